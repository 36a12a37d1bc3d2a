//! One communicator as the Python package drives it: operations run now on the calling thread
//! (with the interpreter released) or go to the communicator's in-order queue; point-to-point
//! operations issued without waiting are gathered into one batch that starts when the caller
//! waits, tests, or issues anything else, so any send/receive pattern the ranks mirror
//! completes (as a group of `HcclSend`/`HcclRecv` does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use hccl::algo::{Coll, P2pItem};
use hccl::base::dtype::DataType;
use hccl::base::error::{Error, ErrorKind, Result};
use hccl::comm::dispatch;
use hccl::comm::queue::{self, OpQueue, Then};
use hccl::comm::{Communicator, OpArgs};
use parking_lot::Mutex;

use crate::buffer::View;

/// Where a deferred point-to-point operation's request appears once its batch starts.
pub type BatchCell = Arc<OnceLock<queue::Request>>;

struct Batch {
    items: Vec<P2pItem>,
    ext: Vec<usize>,
    cell: BatchCell,
}

/// The completion of an operation as a Python request sees it.
pub enum Pending {
    /// Finished (ran on the calling thread, or observed finished).
    Done(Result<()>),
    /// Queued or running on the queue.
    Queued(queue::Request),
    /// In a point-to-point batch that may not have started.
    Deferred(BatchCell),
}

/// Buffers of a request dropped before its operation finished: kept until it has.
struct Orphan {
    pending: Pending,
    _views: Vec<View>,
}

/// One communicator with its queue, its open point-to-point batch and its bookkeeping.
pub struct Core {
    /// The library communicator.
    pub comm: Arc<Communicator>,
    queue: Mutex<Option<OpQueue>>,
    batch: Mutex<Option<Batch>>,
    orphans: Mutex<Vec<Orphan>>,
    has_orphans: AtomicBool,
    /// How many sub-communicators of each rank list were split off (their ids).
    pub splits: Mutex<HashMap<Vec<u32>, u64>>,
    destroyed: AtomicBool,
}

impl Core {
    /// Wraps a new communicator.
    pub fn new(comm: Communicator) -> Core {
        Core {
            comm: Arc::new(comm),
            queue: Mutex::new(None),
            batch: Mutex::new(None),
            orphans: Mutex::new(Vec::new()),
            has_orphans: AtomicBool::new(false),
            splits: Mutex::new(HashMap::new()),
            destroyed: AtomicBool::new(false),
        }
    }

    /// Fails once the communicator has been destroyed.
    pub fn alive(&self) -> Result<()> {
        if self.destroyed.load(Ordering::Relaxed) {
            return Err(Error::new(
                ErrorKind::Unavail,
                format!(
                    "communicator {} (rank {}) has been destroyed",
                    self.comm.name(),
                    self.comm.rank()
                ),
            ));
        }
        Ok(())
    }

    fn submit_issued(&self, op: dispatch::Issued, then: Option<Then>) -> Result<queue::Request> {
        let mut q = self.queue.lock();
        if q.is_none() {
            *q = Some(OpQueue::new(self.comm.name())?);
        }
        Ok(q.as_ref().expect("just set").submit(op, then, None))
    }

    /// Starts the open point-to-point batch, if any.
    pub fn flush(&self) -> Result<()> {
        let Some(b) = self.batch.lock().take() else {
            return Ok(());
        };
        let args = OpArgs {
            name: "BatchSendRecv",
            coll: Coll::P2p { items: b.items },
            dtype: DataType::Uint8,
            op: None,
            send: 0,
            recv: 0,
            ext: b.ext,
            compress: None,
        };
        let req = self.submit_issued(dispatch::issue(Arc::clone(&self.comm), args), None)?;
        let _ = b.cell.set(req);
        Ok(())
    }

    /// Runs `args` on the calling thread, after everything issued before it.
    pub fn run_now(&self, args: OpArgs, then: Option<Then>) -> Result<()> {
        self.flush()?;
        dispatch::issue(Arc::clone(&self.comm), args).run()?;
        then.map_or(Ok(()), |t| t())
    }

    /// Queues `args`; it runs after everything issued before it.
    pub fn submit(&self, args: OpArgs, then: Option<Then>) -> Result<queue::Request> {
        self.flush()?;
        self.submit_issued(dispatch::issue(Arc::clone(&self.comm), args), then)
    }

    /// Adds a send or receive of `bytes` at `ptr` to the open batch.
    pub fn defer_p2p(&self, send: bool, peer: u32, ptr: usize, bytes: usize) -> BatchCell {
        let mut b = self.batch.lock();
        let b = b.get_or_insert_with(|| Batch {
            items: Vec::new(),
            ext: Vec::new(),
            cell: Arc::new(OnceLock::new()),
        });
        b.items.push(P2pItem { send, peer, bytes });
        b.ext.push(ptr);
        Arc::clone(&b.cell)
    }

    /// Keeps the buffers of a dropped, unfinished request until its operation is over.
    pub fn adopt(&self, pending: Pending, views: Vec<View>) {
        self.orphans.lock().push(Orphan {
            pending,
            _views: views,
        });
        self.has_orphans.store(true, Ordering::Relaxed);
    }

    /// Releases the buffers of adopted requests whose operations have finished. Called with
    /// the interpreter attached (buffer exports are released there).
    pub fn sweep(&self) {
        if !self.has_orphans.load(Ordering::Relaxed) {
            return;
        }
        let mut o = self.orphans.lock();
        o.retain(|x| !is_done(&x.pending));
        self.has_orphans.store(!o.is_empty(), Ordering::Relaxed);
    }

    /// Starts what is deferred and waits for every queued operation; then no operation is
    /// accepted any more. The interpreter must be released by the caller.
    pub fn shut_down(&self) -> Result<()> {
        let flushed = self.flush();
        self.destroyed.store(true, Ordering::Relaxed);
        if let Some(q) = self.queue.lock().take() {
            q.join();
        }
        flushed?;
        self.comm.mark_destroyed()
    }

    /// Adopted requests not finished yet (for the destroy path).
    pub fn drain_orphans(&self) -> Vec<View> {
        let mut o = self.orphans.lock();
        self.has_orphans.store(false, Ordering::Relaxed);
        o.drain(..).flat_map(|x| x._views).collect()
    }
}

/// Whether `p` has finished, without blocking.
pub fn is_done(p: &Pending) -> bool {
    match p {
        Pending::Done(_) => true,
        Pending::Queued(q) => q.test().is_some(),
        Pending::Deferred(c) => c.get().is_some_and(|q| q.test().is_some()),
    }
}

/// Divides `count` elements of `dt` at `ptr` by `n` in place: the second half of AVG.
///
/// # Safety
/// `ptr` must be valid for reads and writes of `count` elements of `dt`.
pub unsafe fn divide(ptr: usize, count: usize, dt: DataType, n: u32) -> Result<()> {
    let d = n as f64;
    // SAFETY (all arms): the caller guarantees `count` elements at `ptr`; unaligned access is
    // used because a buffer need not be aligned to its element size.
    unsafe {
        match dt {
            DataType::Fp32 => {
                let p = ptr as *mut f32;
                for i in 0..count {
                    let v = p.add(i).read_unaligned();
                    p.add(i).write_unaligned(v / n as f32);
                }
            }
            DataType::Fp64 => {
                let p = ptr as *mut f64;
                for i in 0..count {
                    let v = p.add(i).read_unaligned();
                    p.add(i).write_unaligned(v / d);
                }
            }
            DataType::Fp16 | DataType::Bf16 => {
                type Conv = (fn(u16) -> f32, fn(f32) -> u16);
                let (to, from): Conv = if dt == DataType::Fp16 {
                    (
                        |h| half::f16::from_bits(h).to_f32(),
                        |f| half::f16::from_f32(f).to_bits(),
                    )
                } else {
                    (
                        |h| half::bf16::from_bits(h).to_f32(),
                        |f| half::bf16::from_f32(f).to_bits(),
                    )
                };
                let p = ptr as *mut u16;
                for i in 0..count {
                    let v = to(p.add(i).read_unaligned());
                    p.add(i).write_unaligned(from(v / n as f32));
                }
            }
            other => {
                return Err(Error::new(
                    ErrorKind::NotSupport,
                    format!("AVG needs a floating-point type, not {}", other.name()),
                ))
            }
        }
    }
    Ok(())
}
