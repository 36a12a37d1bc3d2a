//! Link between ranks that are threads of one process: the receiver copies (or reduces)
//! straight out of the sender's buffer, so a message costs exactly one pass over memory.
//!
//! Every ordered pair of ranks has a mailbox. A send posts its buffer's address; the matching
//! receive (FIFO per pair) takes it, moves the data and publishes completion; the sender's
//! buffer stays untouched until then because the sender waits for that completion.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use super::doorbell::Doorbell;
use super::ReduceFn;
use crate::base::error::{Error, ErrorKind, Result};

#[derive(Clone, Copy, Debug)]
struct SendDesc {
    seq: u64,
    ptr: usize,
    len: usize,
}

#[derive(Debug, Default)]
struct Mailbox {
    queue: Mutex<VecDeque<SendDesc>>,
    posted: AtomicU64,
    consumed: AtomicU64,
}

/// The shared state of all in-process ranks of one communicator.
#[derive(Debug)]
pub struct InprocFabric {
    n: usize,
    boxes: Vec<Mailbox>,
    /// Each rank's doorbell, set once when it joins (lock-free to ring: it is on every message's
    /// path). A rank that left keeps its entry; ringing it is harmless.
    bells: Vec<OnceLock<Arc<Doorbell>>>,
    failed: AtomicBool,
    fail_msg: Mutex<String>,
}

fn registry() -> &'static Mutex<HashMap<u128, Weak<InprocFabric>>> {
    static REG: OnceLock<Mutex<HashMap<u128, Weak<InprocFabric>>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

impl InprocFabric {
    /// Finds or creates the fabric of communicator `key` (all in-process ranks of a comm share
    /// one) and registers `rank`'s doorbell in it.
    pub fn join(
        key: u128,
        n: usize,
        rank: usize,
        bell: Arc<Doorbell>,
    ) -> Result<Arc<InprocFabric>> {
        let mut reg = registry().lock();
        reg.retain(|_, w| w.strong_count() > 0);
        let fabric = match reg.get(&key).and_then(Weak::upgrade) {
            Some(f) => {
                if f.n != n {
                    return Err(Error::new(
                        ErrorKind::Para,
                        format!(
                            "in-process ranks disagree on the rank count ({} vs {n})",
                            f.n
                        ),
                    ));
                }
                f
            }
            None => {
                let f = Arc::new(InprocFabric {
                    n,
                    boxes: (0..n * n).map(|_| Mailbox::default()).collect(),
                    bells: (0..n).map(|_| OnceLock::new()).collect(),
                    failed: AtomicBool::new(false),
                    fail_msg: Mutex::new(String::new()),
                });
                reg.insert(key, Arc::downgrade(&f));
                f
            }
        };
        if fabric.bells[rank].set(bell).is_err() {
            return Err(Error::new(
                ErrorKind::Para,
                format!("rank {rank} joined the same communicator twice in this process"),
            ));
        }
        Ok(fabric)
    }

    fn mailbox(&self, src: usize, dst: usize) -> &Mailbox {
        &self.boxes[src * self.n + dst]
    }

    fn ring(&self, rank: usize) {
        if let Some(b) = self.bells[rank].get() {
            b.ring();
        }
    }

    /// Marks the fabric broken (a rank failed mid-operation) and wakes every rank.
    pub fn fail(&self, msg: &str) {
        if !self.failed.swap(true, Ordering::SeqCst) {
            *self.fail_msg.lock() = msg.to_string();
        }
        for b in self.bells.iter().filter_map(OnceLock::get) {
            b.ring();
        }
    }

    /// The failure recorded by `fail`, if any.
    pub fn failure(&self) -> Option<String> {
        if self.failed.load(Ordering::SeqCst) {
            Some(self.fail_msg.lock().clone())
        } else {
            None
        }
    }

    /// Posts a send of `len` bytes at `ptr` from `src` to `dst`; returns the sequence number
    /// whose consumption completes it.
    ///
    /// # Safety
    /// `ptr` must stay valid and unmodified until `send_done` reports completion.
    pub unsafe fn post_send(&self, src: usize, dst: usize, ptr: *const u8, len: usize) -> u64 {
        let mb = self.mailbox(src, dst);
        let mut q = mb.queue.lock();
        let seq = mb.posted.load(Ordering::Relaxed) + 1;
        mb.posted.store(seq, Ordering::Relaxed);
        q.push_back(SendDesc {
            seq,
            ptr: ptr as usize,
            len,
        });
        drop(q);
        self.ring(dst);
        seq
    }

    /// Withdraws every unconsumed send from `src` to `dst`; on return no receiver reads the
    /// withdrawn buffers any more, so the sender may hand them back to its caller.
    pub fn cancel_sends(&self, src: usize, dst: usize) {
        self.mailbox(src, dst).queue.lock().clear();
    }

    /// Whether the send with sequence `seq` from `src` to `dst` has been consumed.
    pub fn send_done(&self, src: usize, dst: usize, seq: u64) -> bool {
        self.mailbox(src, dst).consumed.load(Ordering::Acquire) >= seq
    }

    /// Tries to complete a receive at `dst` from `src` into `ptr` (`len` bytes), reducing into
    /// it when `reduce` is given. Returns `Ok(true)` when done, `Ok(false)` when the matching
    /// send has not been posted yet.
    ///
    /// # Safety
    /// `ptr` must be valid for writes (and reads when reducing) of `len` bytes.
    pub unsafe fn try_recv(
        &self,
        src: usize,
        dst: usize,
        ptr: *mut u8,
        len: usize,
        reduce: Option<&ReduceFn>,
    ) -> Result<bool> {
        let mb = self.mailbox(src, dst);
        // The copy happens under the mailbox lock so that a sender that gives up (see
        // `cancel_sends`) can be sure no receiver is still reading its buffer.
        let mut q = mb.queue.lock();
        if let Some(msg) = self.failure() {
            return Err(Error::new(
                ErrorKind::Remote,
                format!("another rank of this process failed: {msg}"),
            ));
        }
        let desc = match q.pop_front() {
            Some(d) => d,
            None => return Ok(false),
        };
        if desc.len != len {
            drop(q);
            let msg = format!(
                "message size mismatch: rank {src} sent {} bytes, rank {dst} expected {len}",
                desc.len
            );
            self.fail(&msg);
            return Err(Error::new(ErrorKind::Para, msg));
        }
        if len > 0 {
            let from = desc.ptr as *const u8;
            match reduce {
                None => {
                    if !std::ptr::eq(from, ptr) {
                        std::ptr::copy(from, ptr, len);
                    }
                }
                Some(r) => r.apply(ptr, from, len),
            }
        }
        mb.consumed.store(desc.seq, Ordering::Release);
        drop(q);
        self.ring(src);
        Ok(true)
    }
}
