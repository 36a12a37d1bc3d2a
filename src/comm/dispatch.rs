//! Where an operation goes once its arguments are valid: into the calling thread's open group,
//! onto a stream of the host ACL runtime, or run now.
//!
//! A non-NULL `stream` of a loaded host runtime gets the operation queued on it (the call returns
//! at once); the stream's worker runs it after everything queued before it, and a failure is
//! recorded as the communicator's async error and fails the stream, so it surfaces from
//! `aclrtSynchronizeStream` and `HcclGetCommAsyncError`. A NULL stream, or any stream when no
//! runtime with the host-stream extension is loaded, runs the operation on the calling thread
//! before returning (vendor HCCL rejects NULL streams; here NULL means "no stream").
//!
//! Every rank must run a communicator's operations in the order they were issued, but two
//! operations issued on different streams would otherwise race for the communicator. Each
//! communicator therefore hands out tickets at issue time and runs operations strictly in ticket
//! order, whichever thread (caller or stream worker) runs them.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::communicator::{Communicator, OpArgs};
use super::group;
use super::host_runtime::{self, HostRuntime};
use crate::base::error::{Error, ErrorKind, Result};

/// ACL status codes that mean the stream handle itself was bad.
const ACL_ERROR_INVALID_PARAM: i32 = 100_000;
const ACL_ERROR_INVALID_RESOURCE_HANDLE: i32 = 200_005;

/// Dispatches `args` on `comm`; `stream` is the caller's `aclrtStream` (any value, NULL allowed).
pub fn dispatch(comm: Arc<Communicator>, args: OpArgs, stream: usize) -> Result<()> {
    dispatch_reusing(comm, args, stream, drop)
}

/// [`dispatch`], handing `args` back to `reuse` once the operation has run on the calling
/// thread (neither grouped nor queued on a stream), so that a caller can refill what it
/// allocated for the next call instead of allocating again.
pub fn dispatch_reusing(
    comm: Arc<Communicator>,
    args: OpArgs,
    stream: usize,
    reuse: impl FnOnce(OpArgs),
) -> Result<()> {
    if group::active() {
        group::record(comm, args);
        return Ok(());
    }
    let order = order_of(&comm);
    if stream != 0 {
        if let Some(rt) = host_runtime::get() {
            return enqueue(rt, comm, args, stream, order);
        }
    }
    let (ticket, ready) = order.take_now();
    let r = run_in_turn(&comm, &args, &order, ticket, ready);
    reuse(args);
    r
}

/// Issue order of one communicator's operations.
#[derive(Default)]
struct Order {
    st: Mutex<OrderState>,
    turn: Condvar,
}

#[derive(Default)]
struct OrderState {
    /// The next ticket to hand out.
    next: u64,
    /// Every ticket below this one has finished.
    serving: u64,
    /// Finished tickets above `serving` (a waiter that gave up, or finished out of turn).
    done: BTreeSet<u64>,
}

impl Order {
    fn take(&self) -> u64 {
        let mut s = self.st.lock();
        s.next += 1;
        s.next - 1
    }

    /// Takes a ticket, telling whether every earlier one has finished already (the common case of
    /// a caller that runs its operation at once: one lock instead of two).
    fn take_now(&self) -> (u64, bool) {
        let mut s = self.st.lock();
        s.next += 1;
        (s.next - 1, s.serving >= s.next - 1)
    }

    /// Waits until every earlier ticket has finished; false on timeout.
    fn wait_turn(&self, ticket: u64, timeout: Option<Duration>) -> bool {
        let mut s = self.st.lock();
        if s.serving >= ticket {
            // The common case (nothing earlier outstanding) reads no clock.
            return true;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        while s.serving < ticket {
            match deadline {
                None => self.turn.wait(&mut s),
                Some(d) => {
                    if self.turn.wait_until(&mut s, d).timed_out() && s.serving < ticket {
                        return false;
                    }
                }
            }
        }
        true
    }

    fn finish(&self, ticket: u64) {
        let mut s = self.st.lock();
        // In-order completion (the common case) needs no set insertion, so no allocation.
        if ticket == s.serving {
            s.serving += 1;
        } else {
            s.done.insert(ticket);
        }
        while s.done.first() == Some(&s.serving) {
            s.done.pop_first();
            s.serving += 1;
        }
        drop(s);
        self.turn.notify_all();
    }
}

/// Finishes a ticket however the operation ends (error or panic included).
struct Turn<'a>(&'a Order, u64);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// Whether `w` refers to the communicator `comm`. Comparing addresses is enough: a `Weak`
/// keeps its allocation from being reused, so a live communicator at the same address is the
/// same one.
fn same(w: &Weak<Communicator>, comm: &Arc<Communicator>) -> bool {
    std::ptr::eq(w.as_ptr(), Arc::as_ptr(comm))
}

/// The issue order of `comm`, created on first use. Keyed by address; an entry whose
/// communicator is gone is replaced (a dead communicator has no ticket outstanding). Each
/// thread remembers the last one it used, so back-to-back calls on one communicator take no
/// global lock.
fn order_of(comm: &Arc<Communicator>) -> Arc<Order> {
    type Entry = (Weak<Communicator>, Arc<Order>);
    thread_local! {
        static LAST: RefCell<Option<Entry>> = const { RefCell::new(None) };
    }
    let cached = LAST.with_borrow(|l| {
        l.as_ref()
            .filter(|(w, _)| same(w, comm))
            .map(|(_, o)| Arc::clone(o))
    });
    if let Some(o) = cached {
        return o;
    }
    let o = order_of_global(comm);
    LAST.set(Some((Arc::downgrade(comm), Arc::clone(&o))));
    o
}

fn order_of_global(comm: &Arc<Communicator>) -> Arc<Order> {
    type Table = HashMap<usize, (Weak<Communicator>, Arc<Order>)>;
    static ORDERS: OnceLock<Mutex<Table>> = OnceLock::new();
    let mut t = ORDERS.get_or_init(Mutex::default).lock();
    let key = Arc::as_ptr(comm) as usize;
    if let Some((w, o)) = t.get(&key) {
        if same(w, comm) {
            return Arc::clone(o);
        }
    }
    t.retain(|_, (w, _)| w.strong_count() > 0);
    let o = Arc::new(Order::default());
    t.insert(key, (Arc::downgrade(comm), Arc::clone(&o)));
    o
}

/// Runs `args` once `ticket`'s turn has come (`ready`: known to have come already).
fn run_in_turn(
    comm: &Communicator,
    args: &OpArgs,
    order: &Order,
    ticket: u64,
    ready: bool,
) -> Result<()> {
    let _turn = Turn(order, ticket);
    let timeout = comm.config().exec_timeout;
    if !ready && !order.wait_turn(ticket, timeout) {
        return Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "comm {} rank {} {}: an operation issued earlier on this communicator did not \
                 finish within {:?} (HCCL_EXEC_TIMEOUT)",
                comm.name(),
                comm.rank(),
                args.name,
                timeout.unwrap_or_default()
            ),
        ));
    }
    comm.execute(args)
}

/// An operation whose place in its communicator's order was taken when it was issued; it runs
/// later, on whichever thread calls [`Issued::run`] (a stream worker, a queue worker, or the
/// issuer itself). Dropped without running, it gives its turn up so later operations do not
/// wait for it.
pub struct Issued {
    comm: Arc<Communicator>,
    args: OpArgs,
    order: Arc<Order>,
    ticket: u64,
    ran: bool,
}

/// Takes `args`'s place in `comm`'s order now, to run later with [`Issued::run`].
pub fn issue(comm: Arc<Communicator>, args: OpArgs) -> Issued {
    let order = order_of(&comm);
    let ticket = order.take();
    Issued {
        comm,
        args,
        order,
        ticket,
        ran: false,
    }
}

impl Issued {
    /// Runs the operation once every operation issued before it on its communicator has
    /// finished (or the execution timeout has passed waiting for them).
    pub fn run(mut self) -> Result<()> {
        self.ran = true;
        run_in_turn(&self.comm, &self.args, &self.order, self.ticket, false)
    }

    /// The operation.
    pub fn args(&self) -> &OpArgs {
        &self.args
    }

    /// Its communicator.
    pub fn comm(&self) -> &Arc<Communicator> {
        &self.comm
    }
}

impl Drop for Issued {
    fn drop(&mut self) {
        if !self.ran {
            self.order.finish(self.ticket);
        }
    }
}

/// An operation queued on a stream; owned by the stream task once queued.
struct Job {
    op: Issued,
    stream: usize,
}

fn enqueue(
    rt: HostRuntime,
    comm: Arc<Communicator>,
    args: OpArgs,
    stream: usize,
    order: Arc<Order>,
) -> Result<()> {
    let ticket = order.take();
    let op = Issued {
        comm,
        args,
        order,
        ticket,
        ran: false,
    };
    let job = Box::into_raw(Box::new(Job { op, stream }));
    // SAFETY: `run_job` matches the task signature and takes ownership of `job` when it runs;
    // the runtime either queues the task (and runs it exactly once) or refuses it.
    let rc = unsafe { (rt.enqueue)(stream as *mut c_void, Some(run_job), job as *mut c_void) };
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: refused, so the task will never run and the job is still ours (dropping its
    // operation unrun gives its turn up).
    let job = unsafe { Box::from_raw(job) };
    let kind = match rc {
        ACL_ERROR_INVALID_PARAM | ACL_ERROR_INVALID_RESOURCE_HANDLE => ErrorKind::Para,
        _ => ErrorKind::Runtime,
    };
    Err(Error::new(
        kind,
        format!(
            "comm {} rank {} {}: cannot queue on stream {stream:#x}: the ACL runtime answered \
             {rc} (unknown or destroyed stream, or runtime not initialised)",
            job.op.comm.name(),
            job.op.comm.rank(),
            job.op.args.name
        ),
    ))
}

/// The error for an operation `name` whose run panicked with `payload`.
pub(crate) fn panicked(name: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    Error::new(
        ErrorKind::Internal,
        format!("panic while running {name}: {what}"),
    )
}

/// The stream task: runs one queued operation; nonzero (the HcclResult) fails the stream.
unsafe extern "C" fn run_job(arg: *mut c_void) -> i32 {
    // SAFETY: `arg` is the job `enqueue` leaked for exactly this one call.
    let job = unsafe { Box::from_raw(arg as *mut Job) };
    let Job { op, stream } = *job;
    let (comm, name) = (Arc::clone(&op.comm), op.args.name);
    let r = catch_unwind(AssertUnwindSafe(|| op.run()))
        .unwrap_or_else(|p| Err(panicked(name, p.as_ref())));
    match r {
        Ok(()) => 0,
        Err(e) => {
            let e = e.context(format!("stream {stream:#x}"));
            log::error!("Hccl{name} (stream-ordered): {}", e.msg);
            comm.record_async_error(&e);
            e.kind.code() as i32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

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
        assert_eq!(order.st.lock().serving, 3);
    }
}
