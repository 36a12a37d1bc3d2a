//! A mutex biased towards one thread: while only that thread uses it, locking and unlocking are
//! plain stores, with no atomic read-modify-write (each of which costs tens of cycles and waits
//! for every store before it to leave the core, a message written to a peer included).
//!
//! A communicator is almost always driven by one thread. The first thread to ask for the bias
//! ([`BiasedMutex::try_lock_biased`]) while nobody holds it becomes the owner. The owner
//! announces itself in `busy`, runs a [`fence::light`] and checks `revoked`; any other thread
//! locks the inner mutex, raises `revoked`, runs a [`fence::heavy`] and waits until `busy`
//! clears, so of the two at least one sees the other. Revocation is for good: from then on
//! every thread, the owner included, goes through the inner mutex. The bias is offered only
//! where the heavy fence is the kernel's expedited barrier ([`fence::expedited`]); elsewhere
//! this is a plain mutex.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::fence;

/// A mutex over `T` whose owner thread locks without atomic read-modify-writes (see the module
/// documentation).
pub struct BiasedMutex<T> {
    mutex: Mutex<()>,
    /// The owner's thread key ([`thread_key`]); 0 while there is none.
    owner: AtomicU64,
    /// Set for good by the first other thread that locks.
    revoked: AtomicBool,
    /// The owner is inside through the bias.
    busy: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: the data is reached only through a guard, which one thread at a time holds (see the
// module documentation); `T: Send` lets it move between the threads that take turns.
unsafe impl<T: Send> Send for BiasedMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for BiasedMutex<T> {}

/// Exclusive access to a [`BiasedMutex`]'s data, released on drop.
pub struct BiasedGuard<'a, T> {
    lock: &'a BiasedMutex<T>,
    /// None: held through the bias.
    _inner: Option<MutexGuard<'a, ()>>,
}

/// A key for the calling thread, never 0: the address of a thread-local, which no two live
/// threads share. A thread that starts after the owner ended may get the owner's key; it then
/// owns the bias, which is sound, since the ended owner is not inside.
#[inline(always)]
fn thread_key() -> u64 {
    thread_local! {
        static KEY: u8 = const { 0 };
    }
    KEY.with(|k| k as *const u8 as u64)
}

impl<T> BiasedMutex<T> {
    /// A mutex over `data`, owned by no thread yet.
    pub fn new(data: T) -> BiasedMutex<T> {
        BiasedMutex {
            mutex: Mutex::new(()),
            owner: AtomicU64::new(0),
            revoked: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Locks, waiting for whoever holds the lock.
    pub fn lock(&self) -> BiasedGuard<'_, T> {
        if let Some(g) = self.enter_biased() {
            return g;
        }
        let m = self.mutex.lock();
        self.revoke_from_owner(true);
        self.guard(Some(m))
    }

    /// Locks when nobody holds the lock, claiming the bias for the calling thread when nobody
    /// has claimed it and it was never revoked; None when the lock is held (or, for a thread
    /// other than the owner, when the owner is inside: the bias is then revoked, and the next
    /// attempt waits its turn at the inner mutex).
    pub fn try_lock_biased(&self) -> Option<BiasedGuard<'_, T>> {
        if let Some(g) = self.enter_biased() {
            return Some(g);
        }
        let m = self.mutex.try_lock()?;
        if !self.revoke_from_owner(false) {
            return None;
        }
        if fence::expedited()
            && !self.revoked.load(Ordering::Relaxed)
            && self.owner.load(Ordering::Relaxed) == 0
        {
            // Under the inner mutex, where every other thread looks for an owner.
            self.owner.store(thread_key(), Ordering::Relaxed);
        }
        Some(self.guard(Some(m)))
    }

    /// The owner's way in: no atomic read-modify-write. None for any other thread, and once
    /// the bias is revoked.
    #[inline]
    fn enter_biased(&self) -> Option<BiasedGuard<'_, T>> {
        // The key is never 0, so an unowned lock fails the comparison too.
        if self.revoked.load(Ordering::Relaxed)
            || self.owner.load(Ordering::Relaxed) != thread_key()
        {
            return None;
        }
        self.busy.store(true, Ordering::Relaxed);
        fence::light();
        if self.revoked.load(Ordering::Acquire) {
            self.busy.store(false, Ordering::Release);
            return None;
        }
        Some(self.guard(None))
    }

    /// Called with the inner mutex held: when another thread owns the bias, revokes it for
    /// good and waits until the owner is out (`wait`), or answers false if it is inside.
    fn revoke_from_owner(&self, wait: bool) -> bool {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner == 0 || self.revoked.load(Ordering::Relaxed) || owner == thread_key() {
            return true;
        }
        self.revoked.store(true, Ordering::Relaxed);
        // Pairs with the owner's light fence. Registered once, the expedited barrier does not
        // fail; should it, it is asked again, since going on unpaired could let two threads in.
        while !fence::heavy() {
            std::thread::yield_now();
        }
        let mut spins = 0u32;
        while self.busy.load(Ordering::Acquire) {
            if !wait {
                return false;
            }
            // The owner may be inside a whole operation: spin briefly, then give up the core.
            spins += 1;
            if spins < 100 {
                std::hint::spin_loop();
            } else if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        true
    }

    fn guard<'a>(&'a self, inner: Option<MutexGuard<'a, ()>>) -> BiasedGuard<'a, T> {
        BiasedGuard {
            lock: self,
            _inner: inner,
        }
    }
}

impl<T> Deref for BiasedGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard is the one way in, held by one thread at a time.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for BiasedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for BiasedGuard<'_, T> {
    fn drop(&mut self) {
        if self._inner.is_none() {
            // Publishes the owner's writes to a thread that revokes and sees it out.
            self.lock.busy.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_owner_takes_the_bias_and_others_revoke_it() {
        let m = Arc::new(BiasedMutex::new(0u64));
        *m.try_lock_biased().unwrap() += 1;
        if !fence::expedited() {
            assert_eq!(m.owner.load(Ordering::Relaxed), 0);
            return;
        }
        assert_eq!(m.owner.load(Ordering::Relaxed), thread_key());
        {
            let mut g = m.lock();
            assert!(g._inner.is_none(), "the owner locks through the bias");
            *g += 1;
        }
        let other = Arc::clone(&m);
        std::thread::spawn(move || *other.lock() += 1)
            .join()
            .unwrap();
        assert!(m.revoked.load(Ordering::Relaxed));
        let g = m.lock();
        assert!(
            g._inner.is_some(),
            "after a revocation the owner takes the mutex"
        );
        assert_eq!(*g, 3);
    }

    /// The owner and other threads increment a counter that is not atomic, each keeping a tally
    /// of its own: with exclusion, no increment is lost. The owner keeps its bias until the first
    /// other thread locks, at a point chosen to fall among the owner's increments.
    #[test]
    fn no_increment_is_lost_across_a_revocation() {
        const OWNER: u64 = 200_000;
        const OTHER: u64 = 20_000;
        for round in 0..4u64 {
            let m = Arc::new(BiasedMutex::new((0u64, 0u64)));
            drop(m.try_lock_biased().unwrap());
            let go = Arc::new(AtomicBool::new(false));
            let others: Vec<_> = (0..2)
                .map(|_| {
                    let (m, go) = (Arc::clone(&m), Arc::clone(&go));
                    std::thread::spawn(move || {
                        while !go.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                        for _ in 0..OTHER {
                            let mut g = m.lock();
                            // Read, then write: a racing writer in between would be lost.
                            let v = std::hint::black_box(g.0);
                            g.0 = v + 1;
                        }
                    })
                })
                .collect();
            for i in 0..OWNER {
                if i == round * OWNER / 8 {
                    go.store(true, Ordering::Release);
                }
                let mut g = match m.try_lock_biased() {
                    Some(g) => g,
                    None => m.lock(),
                };
                let v = std::hint::black_box(g.0);
                g.0 = v + 1;
                g.1 += 1;
            }
            for t in others {
                t.join().unwrap();
            }
            let g = m.lock();
            assert_eq!(g.1, OWNER);
            assert_eq!(g.0, OWNER + 2 * OTHER, "round {round}: increments lost");
        }
    }
}
