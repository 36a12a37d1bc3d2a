//! An in-order operation queue for one communicator: the issuer hands an operation over and
//! goes on while a worker thread runs the queued operations in issue order, completing one
//! [`Request`] per operation. A caller that waits on a request whose operation has not started
//! yet runs it itself, which saves the hand-over to the worker when it would only wait anyway.
//!
//! Order between queued operations and operations run directly (through
//! [`dispatch`]) comes from the communicator's ticket order: an operation's
//! place is taken when it is issued ([`dispatch::issue`]), whichever thread runs it.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::dispatch::{self, Issued};
use crate::base::error::{Error, ErrorKind, Result};

/// Work run on the operation's buffers after it succeeded and before its request completes
/// (for example the division that turns a sum into an average).
pub type Then = Box<dyn FnOnce() -> Result<()> + Send>;

/// Called once with the outcome, on the thread that completed the request.
pub type Callback = Box<dyn FnOnce(&Result<()>) + Send>;

/// Whatever must stay alive until the operation is over (the owners of its buffers).
pub type KeepAlive = Box<dyn Any + Send>;

struct Job {
    op: Issued,
    then: Option<Then>,
    keep: Option<KeepAlive>,
}

// The state lives inside its slot's one allocation: boxing the job would add a second.
#[allow(clippy::large_enum_variant)]
enum State {
    Queued(Job),
    Running,
    Done(Result<()>),
}

struct Slot {
    st: Mutex<(State, Vec<Callback>)>,
    done: Condvar,
}

impl Slot {
    /// Runs the job if nobody has started it yet; true if this call ran it.
    fn run_if_queued(&self) -> bool {
        let job = {
            let mut st = self.st.lock();
            match std::mem::replace(&mut st.0, State::Running) {
                State::Queued(job) => job,
                other => {
                    st.0 = other;
                    return false;
                }
            }
        };
        let Job { op, then, keep } = job;
        let name = op.args().name;
        let r = catch_unwind(AssertUnwindSafe(|| {
            op.run()?;
            then.map_or(Ok(()), |t| t())
        }))
        .unwrap_or_else(|p| Err(dispatch::panicked(name, p.as_ref())));
        self.complete(r);
        drop(keep);
        true
    }

    fn complete(&self, r: Result<()>) {
        let callbacks = {
            let mut st = self.st.lock();
            st.0 = State::Done(r.clone());
            std::mem::take(&mut st.1)
        };
        self.done.notify_all();
        for cb in callbacks {
            cb(&r);
        }
    }

    fn outcome(&self) -> Option<Result<()>> {
        match &self.st.lock().0 {
            State::Done(r) => Some(r.clone()),
            _ => None,
        }
    }
}

/// The completion of one queued operation.
#[derive(Clone)]
pub struct Request(Arc<Slot>);

impl Request {
    /// The outcome if the operation has finished, without blocking.
    pub fn test(&self) -> Option<Result<()>> {
        self.0.outcome()
    }

    /// Waits for the operation; `None` if `timeout` passed first. Operations issued earlier on
    /// the communicator run first. Without a timeout, an operation nobody has started yet runs
    /// on this thread (it would only wait otherwise); with one, the worker runs it, so the
    /// wait can end on time.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Result<()>> {
        if timeout.is_none() && self.0.run_if_queued() {
            return self.0.outcome();
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.0.st.lock();
        loop {
            if let State::Done(r) = &st.0 {
                return Some(r.clone());
            }
            match deadline {
                None => self.0.done.wait(&mut st),
                Some(d) => {
                    if self.0.done.wait_until(&mut st, d).timed_out() {
                        if let State::Done(r) = &st.0 {
                            return Some(r.clone());
                        }
                        return None;
                    }
                }
            }
        }
    }

    /// Calls `cb` with the outcome once the operation is over: now, on this thread, if it
    /// already is; otherwise on the thread that completes it.
    pub fn on_done(&self, cb: Callback) {
        let r = {
            let mut st = self.0.st.lock();
            match &st.0 {
                State::Done(r) => r.clone(),
                _ => {
                    st.1.push(cb);
                    return;
                }
            }
        };
        cb(&r);
    }
}

#[derive(Default)]
struct Jobs {
    queued: VecDeque<Arc<Slot>>,
    closed: bool,
}

struct Shared {
    jobs: Mutex<Jobs>,
    more: Condvar,
}

/// A worker thread running one communicator's queued operations in issue order.
pub struct OpQueue {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl OpQueue {
    /// Starts the worker thread; `name` is for diagnostics.
    pub fn new(name: &str) -> Result<OpQueue> {
        let shared = Arc::new(Shared {
            jobs: Mutex::new(Jobs::default()),
            more: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name(format!("hccl-q-{name}").chars().take(15).collect())
            .spawn(move || work(&s))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Syscall,
                    format!("cannot start the operation queue thread of {name}: {e}"),
                )
            })?;
        Ok(OpQueue {
            shared,
            worker: Some(worker),
        })
    }

    /// Queues `op`; `then` runs after it succeeds, `keep` is dropped once it is over.
    pub fn submit(&self, op: Issued, then: Option<Then>, keep: Option<KeepAlive>) -> Request {
        let slot = Arc::new(Slot {
            st: Mutex::new((State::Queued(Job { op, then, keep }), Vec::new())),
            done: Condvar::new(),
        });
        self.shared.jobs.lock().queued.push_back(Arc::clone(&slot));
        self.shared.more.notify_one();
        Request(slot)
    }

    /// Closes the queue and waits until the worker has finished everything queued.
    pub fn join(mut self) {
        self.close();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }

    fn close(&self) {
        self.shared.jobs.lock().closed = true;
        self.shared.more.notify_one();
    }
}

impl Drop for OpQueue {
    /// Closes the queue without waiting: the worker finishes what is queued, then exits (a
    /// caller that must not block here, for example one holding a lock a completion callback
    /// needs, can drop the queue safely).
    fn drop(&mut self) {
        self.close();
    }
}

fn work(shared: &Shared) {
    loop {
        let slot = {
            let mut jobs = shared.jobs.lock();
            loop {
                if let Some(s) = jobs.queued.pop_front() {
                    break s;
                }
                if jobs.closed {
                    return;
                }
                shared.more.wait(&mut jobs);
            }
        };
        slot.run_if_queued();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::Coll;
    use crate::base::dtype::{DataType, ReduceOp};
    use crate::base::env::EnvConfig;
    use crate::comm::config::{CommConfig, Overrides};
    use crate::comm::{Communicator, OpArgs};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn pair(timeout_ms: u64) -> Vec<Arc<Communicator>> {
        let env = EnvConfig::from_lookup(|_| None).unwrap();
        let mut cfg = CommConfig::merge(&Overrides::default(), &env).unwrap();
        cfg.exec_timeout = Some(Duration::from_millis(timeout_ms));
        Communicator::init_all(&[0, 1], cfg)
            .unwrap()
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn allreduce(buf: &mut [f32]) -> OpArgs {
        OpArgs {
            name: "AllReduce",
            coll: Coll::AllReduce { count: buf.len() },
            dtype: DataType::Fp32,
            op: Some(ReduceOp::Sum),
            send: buf.as_ptr() as usize,
            recv: buf.as_mut_ptr() as usize,
            ext: Vec::new(),
            compress: None,
        }
    }

    #[test]
    fn queued_operations_run_in_issue_order_with_direct_ones() {
        let comms = pair(20_000);
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                std::thread::spawn(move || {
                    let q = OpQueue::new("test").unwrap();
                    let mut a = vec![r as f32 + 1.0; 1000];
                    let mut b = vec![10.0 * (r as f32 + 1.0); 3];
                    let then_ran = Arc::new(AtomicUsize::new(0));
                    let t = Arc::clone(&then_ran);
                    let req = q.submit(
                        dispatch::issue(Arc::clone(&c), allreduce(&mut a)),
                        Some(Box::new(move || {
                            t.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })),
                        None,
                    );
                    let seen = Arc::new(AtomicUsize::new(0));
                    let s = Arc::clone(&seen);
                    req.on_done(Box::new(move |r| {
                        assert!(r.is_ok());
                        s.fetch_add(1, Ordering::SeqCst);
                    }));
                    // Issued after the queued one: runs after it on every rank.
                    dispatch::issue(Arc::clone(&c), allreduce(&mut b))
                        .run()
                        .unwrap();
                    assert!(req.wait(None).unwrap().is_ok());
                    assert_eq!(then_ran.load(Ordering::SeqCst), 1);
                    // The callback runs exactly once, before or after wait returns: on
                    // the worker's thread it may still be running, so join the worker first.
                    req.on_done(Box::new(|_| {}));
                    q.join();
                    (a, b, seen)
                })
            })
            .collect();
        for h in handles {
            let (a, b, seen) = h.join().unwrap();
            assert!(a.iter().all(|&x| x == 3.0));
            assert!(b.iter().all(|&x| x == 30.0));
            assert_eq!(seen.load(Ordering::SeqCst), 1);
        }
    }

    #[test]
    fn a_waiter_runs_an_unstarted_operation_itself() {
        // No queue worker: the request is completed by the waiting thread alone.
        let comms = pair(20_000);
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let mut a = vec![2.0f32; 16];
                    let slot = Arc::new(Slot {
                        st: Mutex::new((
                            State::Queued(Job {
                                op: dispatch::issue(Arc::clone(&c), allreduce(&mut a)),
                                then: None,
                                keep: None,
                            }),
                            Vec::new(),
                        )),
                        done: Condvar::new(),
                    });
                    let req = Request(slot);
                    assert!(req.test().is_none());
                    // A bounded wait leaves the operation to the (absent) worker ...
                    assert!(req.wait(Some(Duration::from_millis(10))).is_none());
                    // ... an unbounded one runs it here.
                    assert!(req.wait(None).unwrap().is_ok());
                    assert!(req.test().unwrap().is_ok());
                    a
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap().iter().all(|&x| x == 4.0));
        }
    }

    #[test]
    fn a_peer_that_never_comes_fails_the_request_within_the_timeout() {
        let comms = pair(300);
        let q = OpQueue::new("lonely").unwrap();
        let mut a = vec![1.0f32; 8];
        let t0 = Instant::now();
        let req = q.submit(
            dispatch::issue(Arc::clone(&comms[0]), allreduce(&mut a)),
            None,
            None,
        );
        let e = req.wait(None).unwrap().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(20));
        // A wait with a short timeout on a finished request still answers.
        assert!(req.wait(Some(Duration::from_millis(1))).is_some());
    }

    #[test]
    fn an_operation_dropped_unrun_does_not_block_later_ones() {
        let comms = pair(20_000);
        let handles: Vec<_> = comms
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let mut a = vec![1.0f32; 4];
                    drop(dispatch::issue(Arc::clone(&c), allreduce(&mut a)));
                    dispatch::issue(Arc::clone(&c), allreduce(&mut a))
                        .run()
                        .unwrap();
                    a
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap().iter().all(|&x| x == 2.0));
        }
    }
}
