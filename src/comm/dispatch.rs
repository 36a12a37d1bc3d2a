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
//! order, whichever thread (caller or stream worker) runs them (see [`super::order`]); the
//! tickets live in the communicator, so a call looks nothing up to find them.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::communicator::{Communicator, OpArgs};
use super::group;
use super::host_runtime::{self, HostRuntime};
use super::order::Order;
use super::registry::Pinned;
use crate::base::error::{Error, ErrorKind, Result};

/// ACL status codes that mean the stream handle itself was bad.
const ACL_ERROR_INVALID_PARAM: i32 = 100_000;
const ACL_ERROR_INVALID_RESOURCE_HANDLE: i32 = 200_005;

/// Dispatches `args` on `comm`, pinned by the calling entry point; `stream` is the caller's
/// `aclrtStream` (any value, NULL allowed).
pub fn dispatch(comm: &Pinned, args: OpArgs, stream: usize) -> Result<()> {
    if group::active() || stream != 0 {
        return dispatch_reusing(comm, args, stream, drop);
    }
    // Run now, `args` dropped where it lies: handing it to `drop` copied it (a `memcpy` call)
    // on every call.
    run_now(comm, &args)
}

/// [`dispatch`], handing `args` back to `reuse` once the operation has run on the calling
/// thread (neither grouped nor queued on a stream), so that a caller can refill what it
/// allocated for the next call instead of allocating again. `comm` is cloned only for an
/// operation that outlives the call (grouped or queued).
pub fn dispatch_reusing(
    comm: &Pinned,
    args: OpArgs,
    stream: usize,
    reuse: impl FnOnce(OpArgs),
) -> Result<()> {
    if group::active() {
        group::record(Arc::clone(comm), args);
        return Ok(());
    }
    if stream != 0 {
        if let Some(rt) = host_runtime::get() {
            return enqueue(rt, Arc::clone(comm), args, stream);
        }
    }
    let r = run_now(comm, &args);
    reuse(args);
    r
}

/// Runs `args` on the calling thread once its turn in the issue order has come.
fn run_now(comm: &Pinned, args: &OpArgs) -> Result<()> {
    // A repeat of the previous small call, uncontended, needs no ticket (see
    // `Communicator::run_repeat`).
    if let Some(r) = comm.run_repeat(args, comm) {
        return r;
    }
    let order = comm.order();
    let (ticket, ready) = order.take_now();
    run_in_turn(comm, args, order, ticket, ready)
}

/// Finishes a ticket however the operation ends (error or panic included).
struct Turn<'a>(&'a Order, u64);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
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
    ticket: u64,
    ran: bool,
}

/// Takes `args`'s place in `comm`'s order now, to run later with [`Issued::run`].
pub fn issue(comm: Arc<Communicator>, args: OpArgs) -> Issued {
    let ticket = comm.order().take();
    Issued {
        comm,
        args,
        ticket,
        ran: false,
    }
}

impl Issued {
    /// Runs the operation once every operation issued before it on its communicator has
    /// finished (or the execution timeout has passed waiting for them).
    pub fn run(mut self) -> Result<()> {
        self.ran = true;
        run_in_turn(
            &self.comm,
            &self.args,
            self.comm.order(),
            self.ticket,
            false,
        )
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
            self.comm.order().finish(self.ticket);
        }
    }
}

/// An operation queued on a stream; owned by the stream task once queued.
struct Job {
    op: Issued,
    stream: usize,
}

fn enqueue(rt: HostRuntime, comm: Arc<Communicator>, args: OpArgs, stream: usize) -> Result<()> {
    let ticket = comm.order().take();
    let op = Issued {
        comm,
        args,
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
