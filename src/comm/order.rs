//! Issue order of one communicator's operations: tickets handed out at issue time, run strictly
//! in ticket order whichever thread (caller or stream worker) runs them.
//!
//! The common case, a caller that runs its operation at once while nothing issued earlier is
//! outstanding, costs one atomic add to take a ticket, one load to see that its turn has come
//! and one compare-and-swap to pass the turn on: no lock, no clock. The mutex and the condition
//! variable serve only threads that wait for their turn and tickets finished out of turn (a
//! waiter that gave up, an operation dropped unrun); a counter of those tells a finishing
//! ticket whether it has anything to wake or fold in.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The tickets of one communicator.
#[derive(Default)]
pub struct Order {
    /// The next ticket to hand out.
    next: AtomicU64,
    /// Every ticket below this one has finished.
    serving: AtomicU64,
    /// Threads waiting in [`Order::wait_turn`] plus the tickets in `done`: while zero, a
    /// finish has nobody to wake and nothing to fold in.
    slow: AtomicU64,
    /// Finished tickets above `serving`.
    done: Mutex<BTreeSet<u64>>,
    turn: Condvar,
}

impl Order {
    /// Takes the next ticket.
    pub fn take(&self) -> u64 {
        self.next.fetch_add(1, SeqCst)
    }

    /// Takes a ticket, telling whether every earlier one has finished already.
    pub fn take_now(&self) -> (u64, bool) {
        let t = self.take();
        (t, self.serving.load(SeqCst) == t)
    }

    /// Whether every ticket handed out has finished: nothing issued is outstanding.
    pub fn idle(&self) -> bool {
        self.next.load(SeqCst) == self.serving.load(SeqCst)
    }

    /// Every ticket below this one has finished.
    pub fn serving(&self) -> u64 {
        self.serving.load(SeqCst)
    }

    /// Waits until every ticket before `ticket` has finished; false on timeout.
    pub fn wait_turn(&self, ticket: u64, timeout: Option<Duration>) -> bool {
        if self.serving.load(SeqCst) >= ticket {
            // The common case (nothing earlier outstanding) reads no clock.
            return true;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = self.done.lock();
        // Counted before looking again: a finish that moves `serving` after this look sees
        // the count and wakes this thread under the lock, which it holds until it sleeps.
        self.slow.fetch_add(1, SeqCst);
        let mut ok = true;
        while self.serving.load(SeqCst) < ticket {
            match deadline {
                None => self.turn.wait(&mut g),
                Some(d) => {
                    if self.turn.wait_until(&mut g, d).timed_out() {
                        ok = self.serving.load(SeqCst) >= ticket;
                        break;
                    }
                }
            }
        }
        self.slow.fetch_sub(1, SeqCst);
        ok
    }

    /// Marks `ticket` finished (in turn or not).
    pub fn finish(&self, ticket: u64) {
        if self
            .serving
            .compare_exchange(ticket, ticket + 1, SeqCst, SeqCst)
            .is_ok()
        {
            // In turn: only a waiter or a ticket finished out of turn needs the lock. Either
            // counted itself before looking at `serving`, so one of the two sees the other.
            if self.slow.load(SeqCst) == 0 {
                return;
            }
            let mut done = self.done.lock();
            self.fold(&mut done);
        } else {
            let mut done = self.done.lock();
            done.insert(ticket);
            self.slow.fetch_add(1, SeqCst);
            // `serving` may have reached this ticket meanwhile.
            self.fold(&mut done);
        }
        self.turn.notify_all();
    }

    /// Moves `serving` past the finished tickets that follow it.
    fn fold(&self, done: &mut BTreeSet<u64>) {
        while let Some(&f) = done.first() {
            // Nobody else moves `serving` from a ticket that is in `done`: it finished already.
            if f != self.serving.load(SeqCst) {
                break;
            }
            done.pop_first();
            self.slow.fetch_sub(1, SeqCst);
            self.serving.store(f + 1, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    #[test]
    fn idle_only_while_no_ticket_is_outstanding() {
        let o = Order::default();
        assert!(o.idle());
        let (a, _) = o.take_now();
        assert!(!o.idle());
        let b = o.take();
        o.finish(b);
        assert!(!o.idle(), "finished out of turn, {a} still outstanding");
        o.finish(a);
        assert!(o.idle());
    }

    #[test]
    fn tickets_run_in_issue_order_whatever_thread_waits_first() {
        let order = Arc::new(Order::default());
        let tickets: Vec<u64> = (0..4).map(|_| order.take()).collect();
        let (tx, rx) = mpsc::channel();
        // Start the waiters in reverse order: each must still run after all earlier tickets.
        let handles: Vec<_> = tickets
            .iter()
            .rev()
            .map(|&t| {
                let (order, tx) = (Arc::clone(&order), tx.clone());
                std::thread::spawn(move || {
                    assert!(order.wait_turn(t, Some(Duration::from_secs(20))));
                    tx.send(t).unwrap();
                    order.finish(t);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        drop(tx);
        assert_eq!(rx.iter().collect::<Vec<_>>(), tickets);
    }

    #[test]
    fn waiting_times_out_and_a_given_up_ticket_does_not_block_later_ones() {
        let order = Order::default();
        let (a, b, c) = (order.take(), order.take(), order.take());
        assert!(!order.wait_turn(b, Some(Duration::from_millis(20))));
        order.finish(b);
        // `a` still runs first; `c` waits for it, then passes the abandoned `b`.
        assert!(!order.wait_turn(c, Some(Duration::from_millis(1))));
        order.finish(a);
        assert!(order.wait_turn(c, Some(Duration::from_millis(1))));
        order.finish(c);
        assert_eq!(order.serving(), 3);
        assert_eq!(order.slow.load(SeqCst), 0);
        // Back on the fast path.
        assert_eq!(order.take_now(), (3, true));
    }

    #[test]
    fn many_threads_taking_turns_never_overlap() {
        let order = Arc::new(Order::default());
        let inside = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (order, inside) = (Arc::clone(&order), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let (t, ready) = order.take_now();
                        assert!(ready || order.wait_turn(t, Some(Duration::from_secs(20))));
                        assert_eq!(inside.fetch_add(1, SeqCst), 0);
                        inside.fetch_sub(1, SeqCst);
                        order.finish(t);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(order.serving(), 8000);
    }
}
