//! Handles given to C: every live communicator is registered under an opaque id, so a stale or
//! forged handle is answered with an error instead of being dereferenced.

use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::communicator::{leave, try_enter, Communicator};
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

/// The communicator behind `handle`, referenced (not pinned: see [`pin`]).
pub fn get(handle: usize) -> Result<Arc<Communicator>> {
    table()
        .read()
        .get(&handle)
        .cloned()
        .ok_or_else(|| not_live(handle))
}

fn not_live(handle: usize) -> Error {
    Error::new(
        ErrorKind::Para,
        format!("{handle:#x} is not a live communicator handle"),
    )
}

/// A communicator held for one call: counted inside it (so it cannot be destroyed meanwhile,
/// see [`Communicator::mark_destroyed`]) and alive while counted (the table keeps it until it is
/// destroyed). Dereferences to an `Arc` that an operation outliving the call (grouped or queued)
/// clones.
pub struct Pinned {
    /// Borrows the table's reference: never dropped.
    comm: ManuallyDrop<Arc<Communicator>>,
}

impl Deref for Pinned {
    type Target = Arc<Communicator>;

    fn deref(&self) -> &Arc<Communicator> {
        &self.comm
    }
}

impl AsRef<Communicator> for Pinned {
    fn as_ref(&self) -> &Communicator {
        &self.comm
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // The last use: counted out, the communicator may be destroyed and freed at once.
        leave(self.comm.state());
    }
}

/// What a thread remembers of its last pin: the handle, its communicator (dereferenced only
/// while pinned) and that communicator's state word (kept alive by this entry, so that it can be
/// read after the communicator is gone).
struct Cached {
    handle: usize,
    comm: *const Communicator,
    state: Arc<AtomicU64>,
}

/// Pins the communicator behind `handle` for one call (see [`Pinned`]).
///
/// Back-to-back calls on one communicator (the small-message hot path) take neither the table's
/// lock nor a reference: each thread remembers its last pin, and a repeat costs one atomic
/// increment (and one decrement when it ends) on the communicator's state word. A destroyed
/// communicator keeps its mark in that word for good, so a stale handle is refused at once; a
/// handle is never reused.
pub fn pin(handle: usize) -> Result<Pinned> {
    thread_local! {
        static LAST: RefCell<Option<Cached>> = const { RefCell::new(None) };
    }
    let hit = LAST.with_borrow(|l| match l {
        Some(c) if c.handle == handle && try_enter(&c.state) => Some(c.comm),
        _ => None,
    });
    if let Some(p) = hit {
        // SAFETY: `p` is `Arc::as_ptr` of the table's reference (the pointer `Arc::into_raw`
        // would give), and counted inside, the communicator stays in the table, so that
        // reference outlives the `Pinned`, which never drops its copy.
        let comm = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
        return Ok(Pinned { comm });
    }
    let c = get(handle)?;
    if !try_enter(c.state()) {
        return Err(Error::new(
            ErrorKind::Para,
            format!("{handle:#x} is not a live communicator handle (destroyed)"),
        ));
    }
    let p = Arc::as_ptr(&c);
    LAST.set(Some(Cached {
        handle,
        comm: p,
        state: Arc::clone(c.state()),
    }));
    // Our reference goes; the table's stays while the communicator is pinned.
    drop(c);
    // SAFETY: as above.
    let comm = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
    Ok(Pinned { comm })
}

/// Unregisters `handle` after marking its communicator destroyed; fails (leaving it registered)
/// while another thread is inside an operation on it.
pub fn remove(handle: usize) -> Result<Arc<Communicator>> {
    let mut t = table().write();
    let c = t.get(&handle).cloned().ok_or_else(|| not_live(handle))?;
    c.mark_destroyed()?;
    t.remove(&handle);
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
