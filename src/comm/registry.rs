//! Handles given to C: every live communicator is registered under an opaque id, so a stale or
//! forged handle is answered with an error instead of being dereferenced.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use super::communicator::{destroyed, leave, try_enter, Communicator};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence;

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

/// A communicator held for one call: known to be inside it (so it cannot be destroyed
/// meanwhile, see [`remove`]) and alive while inside (the table keeps it until it is
/// destroyed). Dereferences to an `Arc` that an operation outliving the call (grouped or
/// queued) clones. Dropped on the thread that pinned it (it is not `Send`): a pin announced in
/// that thread's slot is withdrawn there.
pub struct Pinned {
    /// Borrows the table's reference: never dropped.
    comm: ManuallyDrop<Arc<Communicator>>,
    /// The pinning thread's slot when the pin is announced there, else null (counted in the
    /// communicator's state word).
    slot: *const AtomicUsize,
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
        // The last use: once out, the communicator may be destroyed and freed at once.
        if self.slot.is_null() {
            leave(self.comm.state());
        } else {
            // SAFETY: the slot belongs to this thread (`Pinned` is not `Send`), which keeps it
            // for as long as it lives.
            unsafe { (*self.slot).store(0, Ordering::Release) };
        }
    }
}

/// What a thread remembers of its last pin: the handle, its communicator (dereferenced only
/// while pinned) and that communicator's state word, kept alive by [`KEEP`] (so that it can be
/// read after the communicator is gone). All zero until the first pin, and again once the
/// thread's [`Keep`] is gone.
#[derive(Clone, Copy)]
struct Last {
    handle: usize,
    comm: *const Communicator,
    state: *const AtomicU64,
}

const NO_LAST: Last = Last {
    handle: 0,
    comm: std::ptr::null(),
    state: std::ptr::null(),
};

thread_local! {
    /// Plain cells without destructors: reading them costs no check of the thread's state.
    static LAST: Cell<Last> = const { Cell::new(NO_LAST) };
    /// Where this thread announces the state word of the communicator it is inside (0: none);
    /// listed in [`slots`] from the thread's first cached pin until its [`Keep`] is dropped.
    static SLOT: AtomicUsize = const { AtomicUsize::new(0) };
    static KEEP: RefCell<Option<Keep>> = const { RefCell::new(None) };
}

/// What backs a thread's [`LAST`] and [`SLOT`]: the last pin's state word, and the slot's
/// place in [`slots`], both given up when the thread ends.
struct Keep {
    state: Arc<AtomicU64>,
}

impl Drop for Keep {
    fn drop(&mut self) {
        // A pin later in this thread's teardown goes the counted way, its slot unlisted.
        LAST.set(NO_LAST);
        let me = SLOT.with(|s| s as *const AtomicUsize as usize);
        slots().lock().retain(|&s| s != me);
    }
}

/// The addresses of the listed threads' slots (see [`SLOT`]).
fn slots() -> &'static Mutex<Vec<usize>> {
    static S: OnceLock<Mutex<Vec<usize>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(Vec::new()))
}

/// Remembers `handle`'s communicator `comm` as the thread's last pin, listing its slot on the
/// first call; nothing once the thread's teardown has begun.
fn remember(handle: usize, comm: &Arc<Communicator>) {
    let _ = KEEP.try_with(|k| {
        let Ok(mut k) = k.try_borrow_mut() else {
            return;
        };
        let state = Arc::clone(comm.state());
        let at = Arc::as_ptr(&state);
        match k.as_mut() {
            // Replaced in place: dropping the `Keep` would unlist the slot.
            Some(keep) => keep.state = state,
            None => {
                let me = SLOT.with(|s| s as *const AtomicUsize as usize);
                slots().lock().push(me);
                *k = Some(Keep { state });
            }
        }
        LAST.set(Last {
            handle,
            comm: Arc::as_ptr(comm),
            state: at,
        });
    });
}

/// Pins the communicator behind `handle` for one call (see [`Pinned`]).
///
/// Back-to-back calls on one communicator (the small-message hot path) take neither the table's
/// lock nor a reference, and no atomic read-modify-write: each thread remembers its last pin,
/// and a repeat stores the communicator's state word in the thread's slot, then reads that
/// word. A destroy marks the word first, then reads every slot, the two sides paired by an
/// asymmetric fence ([`fence::light`] here, [`fence::heavy`] there): either this thread sees
/// the mark and backs out, or the destroy sees the slot and is refused. A thread already
/// inside a communicator (a nested pin), or one whose cache misses, counts itself in the state
/// word instead. A destroyed communicator keeps its mark for good, so a stale handle is
/// refused at once; a handle is never reused. A destroy that is refused takes its mark back,
/// and a call that raced it and read the mark meanwhile fails as if the handle were destroyed:
/// racing a destroy with a call on the same handle is the caller's error either way.
#[inline]
pub fn pin(handle: usize) -> Result<Pinned> {
    let last = LAST.get();
    if last.handle == handle && handle != 0 {
        let slot: *const AtomicUsize = SLOT.with(|s| s as *const AtomicUsize);
        // SAFETY: this thread's own slot, alive as long as the thread.
        let s = unsafe { &*slot };
        // SAFETY: `KEEP` holds the state word while `LAST` names it.
        let state = unsafe { &*last.state };
        if s.load(Ordering::Relaxed) == 0 {
            s.store(last.state as usize, Ordering::Relaxed);
            fence::light();
            if !destroyed(state) {
                // SAFETY: `comm` is `Arc::as_ptr` of the table's reference (the pointer
                // `Arc::into_raw` would give), and announced inside, the communicator stays in
                // the table, so that reference outlives the `Pinned`, which never drops its copy.
                let comm = ManuallyDrop::new(unsafe { Arc::from_raw(last.comm) });
                return Ok(Pinned { comm, slot });
            }
            s.store(0, Ordering::Relaxed);
        }
    }
    pin_counted(handle)
}

/// [`pin`] of a handle that is not the thread's last (or while the thread is inside a
/// communicator already): counted in the state word.
#[inline(never)]
fn pin_counted(handle: usize) -> Result<Pinned> {
    let c = get(handle)?;
    if !try_enter(c.state()) {
        return Err(Error::new(
            ErrorKind::Para,
            format!("{handle:#x} is not a live communicator handle (destroyed)"),
        ));
    }
    remember(handle, &c);
    let p = Arc::as_ptr(&c);
    // Our reference goes; the table's stays while the communicator is pinned.
    drop(c);
    // SAFETY: as above.
    let comm = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
    Ok(Pinned {
        comm,
        slot: std::ptr::null(),
    })
}

/// Whether some thread announced itself inside the communicator with state word `state`.
fn announced_inside(state: &Arc<AtomicU64>) -> bool {
    let word = Arc::as_ptr(state) as usize;
    slots().lock().iter().any(|&s| {
        // SAFETY: a listed slot is alive: its thread unlists it (under this lock) before its
        // thread-locals go.
        unsafe { &*(s as *const AtomicUsize) }.load(Ordering::Acquire) == word
    })
}

/// Unregisters `handle` after marking its communicator destroyed; fails (leaving it registered)
/// while another thread is inside an operation on it.
pub fn remove(handle: usize) -> Result<Arc<Communicator>> {
    let mut t = table().write();
    let c = t.get(&handle).cloned().ok_or_else(|| not_live(handle))?;
    c.mark_destroyed()?;
    // Pairs with the light fence of `pin` (see there); a failed heavy fence vouches for
    // nothing, so the destroy is refused as if the communicator were busy.
    if !fence::heavy() || announced_inside(c.state()) {
        return Err(c.unmark_destroyed());
    }
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
