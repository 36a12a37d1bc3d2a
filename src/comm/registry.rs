//! Handles given to C: every live communicator is registered under an opaque id, so a stale or
//! forged handle is answered with an error instead of being dereferenced.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;

use super::communicator::Communicator;
use crate::base::error::{Error, ErrorKind, Result};

fn table() -> &'static RwLock<HashMap<usize, Arc<Communicator>>> {
    static T: OnceLock<RwLock<HashMap<usize, Arc<Communicator>>>> = OnceLock::new();
    T.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Handle values are spaced and offset so they never look like small integers or null.
static NEXT: AtomicUsize = AtomicUsize::new(0x4843_0000);

/// Registers a communicator and returns its handle.
pub fn insert(c: Communicator) -> usize {
    let h = NEXT.fetch_add(16, Ordering::Relaxed);
    table().write().insert(h, Arc::new(c));
    h
}

/// Bumped by every removal: a thread's cached lookup is trusted only while it is unchanged, so a
/// destroyed handle is refused at once, exactly as without the cache.
static REMOVALS: AtomicU64 = AtomicU64::new(0);

/// The communicator behind `handle`.
///
/// Back-to-back calls on one communicator (the small-message hot path) skip the table's lock
/// and hash: each thread remembers its last lookup, weakly, so the cache never keeps a
/// destroyed communicator alive.
pub fn get(handle: usize) -> Result<Arc<Communicator>> {
    type Entry = (usize, u64, Weak<Communicator>);
    thread_local! {
        static LAST: RefCell<Option<Entry>> = const { RefCell::new(None) };
    }
    let gen = REMOVALS.load(Ordering::Acquire);
    let hit = LAST.with_borrow(|l| match l {
        Some((h, g, w)) if *h == handle && *g == gen => w.upgrade(),
        _ => None,
    });
    if let Some(c) = hit {
        return Ok(c);
    }
    let c = get_locked(handle)?;
    LAST.set(Some((handle, gen, Arc::downgrade(&c))));
    Ok(c)
}

fn get_locked(handle: usize) -> Result<Arc<Communicator>> {
    table().read().get(&handle).cloned().ok_or_else(|| {
        Error::new(
            ErrorKind::Para,
            format!("{handle:#x} is not a live communicator handle"),
        )
    })
}

/// Unregisters `handle` after marking its communicator destroyed; fails (leaving it registered)
/// while another thread is inside an operation on it.
pub fn remove(handle: usize) -> Result<Arc<Communicator>> {
    let mut t = table().write();
    let c = t.get(&handle).cloned().ok_or_else(|| {
        Error::new(
            ErrorKind::Para,
            format!("{handle:#x} is not a live communicator handle"),
        )
    })?;
    c.mark_destroyed()?;
    t.remove(&handle);
    // Under the write lock: a lookup that read the old count either finished before the removal
    // or reads the table after it.
    REMOVALS.fetch_add(1, Ordering::Release);
    Ok(c)
}

/// Finds a communicator by name; among several (ranks that are threads of this process share
/// a name) the one created by the calling thread is preferred.
pub fn find_by_name(name: &str) -> Option<usize> {
    let me = std::thread::current().id();
    let t = table().read();
    let mut found: Vec<(usize, bool)> = t
        .iter()
        .filter(|(_, c)| c.name() == name)
        .map(|(h, c)| (*h, c.creator() == me))
        .collect();
    found.sort_by_key(|&(h, mine)| (!mine, h));
    found.first().map(|f| f.0)
}

/// Whether a communicator with this name and rank is alive in this process.
pub fn name_taken(name: &str, rank: u32) -> bool {
    table()
        .read()
        .values()
        .any(|c| c.name() == name && c.rank() == rank)
}
