//! Link between ranks that are threads of one process: the receiver copies (or reduces)
//! straight out of the sender's buffer, so a message costs exactly one pass over memory.
//!
//! Every ordered pair of ranks has a mailbox. A send posts its buffer's address; the matching
//! receive (FIFO per pair) takes it, moves the data and publishes completion; the sender's
//! buffer stays untouched until then because the sender waits for that completion.
//!
//! Messages of at most [`EAGER_MAX`] bytes are copied into the mailbox instead, and their send
//! completes at once while fewer than [`EAGER_DEPTH`] earlier messages of the pair wait to be
//! taken: a second copy of a few bytes costs less than making the sender wait until its
//! receiver gets a turn on a core, and the bound keeps a sender that runs ahead from queueing
//! without end.
//!
//! Messages of at most [`LANE_MAX`] bytes skip the mailbox when nothing queued in it is
//! untaken: each pair also has a lane, a ring of [`LANE_SLOTS`] cache lines, and such a message
//! is written whole into one line (sequence word, length, tag, bytes), which its receiver reads
//! with one load of that line, as between processes over shared memory. Every lane message is
//! older than every queued one (a sender writes to the lane only while its queue is drained),
//! so a receiver takes the lane's next message before the queue's.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use super::backoff::{Until, NO_CPU};
use super::doorbell::Doorbell;
use super::link::{Link, LinkInfo, Medium, Reach, SendHint, Shared, Wake};
use super::tag::{Tag, TAG_LEN};
use super::ReduceFn;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::stream::{copy_streaming, STREAM_MIN};

/// Largest message sent eagerly (copied at posting): one cache line.
pub const EAGER_MAX: usize = 64;
/// Most messages of a pair that may wait untaken while an eager send completes.
pub const EAGER_DEPTH: u64 = 8;
/// Longest sleep of a rank waiting in [`InprocFabric::push_enter`] or
/// [`InprocFabric::push_finish`] before it looks again (its peers ring it on every change).
const PUSH_TICK_MS: i32 = 50;
/// How long [`InprocFabric::push_finish`] still waits, once its deadline has passed and the
/// fabric failed, for a late rank that entered to end the piece it holds (it claims no other):
/// a piece takes microseconds once that rank gets a core again, as after the whole process was
/// stopped and continued.
const PUSH_GRACE: Duration = Duration::from_secs(1);
/// Operations of at least this many bytes ([`SendHint::op_bytes`]) have their plain receives
/// of [`STREAM_MIN`] bytes or more copied with streaming stores: such an operation's buffers
/// do not fit in this machine's caches, so the destination lines would be read from memory
/// only to be overwritten (a third of a copy's memory traffic). Reductions still use ordinary
/// stores: their destination is read anyway.
pub const STREAM_OP_MIN: usize = 16 << 20;

/// Lines in the lane of a pair: how far a sender of small messages runs ahead of its receiver
/// before it queues them in the mailbox instead.
pub const LANE_SLOTS: usize = 8;
/// Largest message carried in a lane line: what the line leaves beside its sequence word,
/// length and tag.
pub const LANE_MAX: usize = 64 - 16 - TAG_LEN;
/// Words of a lane line: sequence word, length, tag, bytes.
const LANE_WORDS: usize = 8;
const LANE_TAG_WORD: usize = 2;
const LANE_DATA_WORD: usize = LANE_TAG_WORD + TAG_LEN / 8;

/// One line of a lane: the sequence word (the message's number in the lane plus one, written
/// last), its length, its tag and its bytes, as words so that both sides use plain atomics.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct LaneLine([AtomicU64; LANE_WORDS]);

/// A counter alone on its line: one side writes it, the other reads it now and then.
#[derive(Debug, Default)]
#[repr(align(64))]
struct OwnLine(AtomicU64);

/// The lane of one ordered pair (see the module documentation).
#[derive(Debug, Default)]
struct Lane {
    lines: [LaneLine; LANE_SLOTS],
    /// Messages written; the sender's alone.
    wr: OwnLine,
    /// The last value of `rd` the sender read (it looks again only when the lane seems full).
    rd_seen: OwnLine,
    /// Messages taken; written by the receiver, read by the sender when the lane seems full.
    rd: OwnLine,
}

/// A lane message as its receiver read it.
struct LaneMsg {
    len: usize,
    tag: Tag,
    data: [u8; LANE_MAX],
}

#[derive(Clone, Copy, Debug)]
struct SendDesc {
    seq: u64,
    ptr: usize,
    len: usize,
    /// The operation the message belongs to.
    tag: Tag,
    /// The message itself when sent eagerly.
    eager: Option<[u8; EAGER_MAX]>,
    /// Whether a plain receive stores it with streaming stores (see [`STREAM_OP_MIN`]).
    stream: bool,
}

#[derive(Debug, Default)]
#[repr(align(64))]
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
    /// Per ordered pair, as `boxes`, its lane.
    lanes: Vec<Lane>,
    /// Each rank's doorbell, set once when it joins (lock-free to ring: it is on every message's
    /// path). A rank that left keeps its entry; ringing it is harmless.
    bells: Vec<OnceLock<Arc<Doorbell>>>,
    failed: AtomicBool,
    fail_why: Mutex<Option<Error>>,
    /// Per rank, the operation it last found itself stuck in (see `Medium::publish_stuck`).
    stuck: Vec<Mutex<Option<Tag>>>,
    /// Per rank, its part in the current or last operation run by [`InprocFabric::push_enter`].
    push: Mutex<Vec<PushSlot>>,
    /// The next piece of the current such operation to be claimed ([`PushCall::claim`]); reset
    /// by the rank whose posting completes the set, before any rank can enter.
    push_next: AtomicUsize,
    /// Per rank, the list of every rank's buffers its current such operation works on, refilled
    /// by each call ([`PushCall::bufs`]) so that a repeated operation allocates nothing.
    push_views: Vec<Mutex<Vec<PushBufs>>>,
}

/// What a rank publishes for an operation in which ranks write into each other's buffers.
#[derive(Clone, Copy, Debug, Default)]
struct PushSlot {
    /// Operations of this kind the rank has published (the current one's number).
    posted: u64,
    /// The last one it entered (began to read and write its peers' buffers in).
    entered: u64,
    /// The last one it finished.
    done: u64,
    tag: Option<Tag>,
    bufs: PushBufs,
}

/// A rank's input and output in an operation run by [`InprocFabric::push_enter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushBufs {
    /// Address of the input.
    pub send: usize,
    /// Address of the output.
    pub recv: usize,
    /// Bytes of each.
    pub len: usize,
}

/// Rank `me`'s part in an operation entered with [`InprocFabric::push_enter`]: every rank's
/// buffers, the pieces left to claim, and the obligation to finish.
#[derive(Debug)]
pub struct PushCall<'a> {
    fabric: &'a InprocFabric,
    me: usize,
    gen: u64,
    /// Every rank's buffers, in rank order.
    pub bufs: MutexGuard<'a, Vec<PushBufs>>,
    open: bool,
}

impl PushCall<'_> {
    /// Claims the next piece of the operation for this rank: every piece goes to exactly one
    /// rank, whichever asks first, so ranks that get more of a core do more of the work. `None`
    /// once the fabric failed (no piece is started after that).
    pub fn claim(&self) -> Option<usize> {
        if self.fabric.failed.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.fabric.push_next.fetch_add(1, Ordering::Relaxed))
    }

    /// Ends this rank's part: waits until no rank touches its buffers any more (see
    /// [`InprocFabric::push_enter`]); fails when any rank failed meanwhile or at `deadline`.
    pub fn finish(mut self, deadline: Option<Instant>) -> Result<()> {
        self.open = false;
        self.fabric.push_finish(self.me, self.gen, deadline)
    }
}

impl Drop for PushCall<'_> {
    /// A call left without [`PushCall::finish`] (its rank panicked while computing) may have
    /// left pieces undone: the peers must fail, and must not wait for this rank.
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let f = self.fabric;
        f.fail(&Error::new(
            ErrorKind::Internal,
            format!("rank {} stopped in the middle of the operation", self.me),
        ));
        f.push.lock()[self.me].done = self.gen;
        *f.stuck[self.me].lock() = None;
        f.ring_all();
    }
}

/// A communicator's fabric in the process-wide registry.
struct Entry {
    fabric: Weak<InprocFabric>,
    /// Held until every rank of this process has joined: ranks that joined early may fail and
    /// destroy their communicator before a slow one joins, and that one must still find the
    /// fabric (and its recorded failure) instead of creating a new, empty one and waiting on it
    /// until its timeout.
    keep: Option<Arc<InprocFabric>>,
    /// Ranks of this process that have joined so far.
    joined: usize,
}

fn registry() -> &'static Mutex<HashMap<u128, Entry>> {
    static REG: OnceLock<Mutex<HashMap<u128, Entry>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

impl InprocFabric {
    /// Finds or creates the fabric of communicator `key` (all in-process ranks of a comm share
    /// one) and registers `rank`'s doorbell in it; `local` is how many ranks of the
    /// communicator live in this process (the registry keeps the fabric until they all joined).
    pub fn join(
        key: u128,
        n: usize,
        local: usize,
        rank: usize,
        bell: Arc<Doorbell>,
    ) -> Result<Arc<InprocFabric>> {
        let mut reg = registry().lock();
        reg.retain(|_, e| e.keep.is_some() || e.fabric.strong_count() > 0);
        let fabric = match reg.get(&key).and_then(|e| e.fabric.upgrade()) {
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
                    lanes: (0..n * n).map(|_| Lane::default()).collect(),
                    bells: (0..n).map(|_| OnceLock::new()).collect(),
                    failed: AtomicBool::new(false),
                    fail_why: Mutex::new(None),
                    stuck: (0..n).map(|_| Mutex::new(None)).collect(),
                    push: Mutex::new(vec![PushSlot::default(); n]),
                    push_views: (0..n).map(|_| Mutex::new(Vec::with_capacity(n))).collect(),
                    push_next: AtomicUsize::new(0),
                });
                reg.insert(
                    key,
                    Entry {
                        fabric: Arc::downgrade(&f),
                        keep: Some(f.clone()),
                        joined: 0,
                    },
                );
                f
            }
        };
        if fabric.bells[rank].set(bell).is_err() {
            return Err(Error::new(
                ErrorKind::Para,
                format!("rank {rank} joined the same communicator twice in this process"),
            ));
        }
        if let Some(e) = reg.get_mut(&key) {
            e.joined += 1;
            if e.joined >= local {
                e.keep = None;
            }
        }
        Ok(fabric)
    }

    fn mailbox(&self, src: usize, dst: usize) -> &Mailbox {
        &self.boxes[src * self.n + dst]
    }

    fn lane(&self, src: usize, dst: usize) -> &Lane {
        &self.lanes[src * self.n + dst]
    }

    fn ring(&self, rank: usize) {
        if let Some(b) = self.bells[rank].get() {
            b.ring();
        }
    }

    /// The CPU `rank` last waited on ([`NO_CPU`] when unknown).
    pub fn cpu_of(&self, rank: usize) -> u32 {
        self.bells[rank].get().map_or(NO_CPU, |b| b.cpu())
    }

    /// Marks the fabric broken (a rank failed mid-operation; `why` names the rank) and wakes
    /// every rank. The first reason recorded is the one every rank reports.
    pub fn fail(&self, why: &Error) {
        {
            let mut w = self.fail_why.lock();
            if w.is_none() {
                *w = Some(why.clone());
            }
            self.failed.store(true, Ordering::SeqCst);
        }
        for b in self.bells.iter().filter_map(OnceLock::get) {
            b.ring();
        }
    }

    /// The failure recorded by `fail`, as the error a rank waiting on the fabric reports: an
    /// operation mismatch keeps its kind (`HCCL_E_PARA` on every rank), anything else is a
    /// remote failure.
    pub fn failure(&self) -> Option<Error> {
        if !self.failed.load(Ordering::SeqCst) {
            return None;
        }
        let why = self.fail_why.lock().clone()?;
        Some(super::propagated(why, "another rank of this process"))
    }

    /// Publishes rank `me`'s buffers for an operation tagged `tag` in which every rank reads
    /// every other rank's input and writes into its output, and waits until every rank has
    /// published the same operation; returns the call, which holds every rank's buffers in rank
    /// order. From then on the caller may read its peers' inputs and write their outputs until
    /// it ends the call with [`PushCall::finish`], which returns only once no rank touches its
    /// buffers any more. A call dropped without `finish` (a panic in between) fails the fabric
    /// first, so every peer's `finish` reports an error instead of success.
    ///
    /// A rank that published another operation, waits for a message of another operation from
    /// this rank, sent this rank a message of an operation it has not finished, or waits in an
    /// operation after this one fails the fabric with `HCCL_E_PARA` on every rank; so does
    /// `deadline` passing (a remote failure). A failed call has made no rank enter.
    pub fn push_enter(
        &self,
        me: usize,
        tag: &Tag,
        bufs: PushBufs,
        deadline: Option<Instant>,
    ) -> Result<PushCall<'_>> {
        let my_gen = {
            let mut p = self.push.lock();
            p[me].posted += 1;
            p[me].tag = Some(*tag);
            p[me].bufs = bufs;
            let g = p[me].posted;
            // Every rank finished the last operation before any posted this one, so nobody
            // claims pieces any more; nobody enters before the lock is released.
            if p.iter().all(|s| s.posted >= g) {
                self.push_next.store(0, Ordering::Relaxed);
            }
            g
        };
        self.ring_all();
        let bell = self.bells[me].get().cloned();
        let mut stalls = 0u32;
        loop {
            let seen = bell.as_ref().map(|b| b.seq());
            {
                let mut p = self.push.lock();
                if let Some(e) = self.failure() {
                    return Err(e);
                }
                let mut all = true;
                for (r, s) in p.iter().enumerate() {
                    if s.posted < my_gen {
                        all = false;
                    } else if s.tag != Some(*tag) || s.bufs.len != bufs.len {
                        let e = match s.tag {
                            Some(t) if t != *tag => {
                                super::tag::mismatch(&t, tag, r as u32, me as u32)
                            }
                            _ => Error::new(
                                ErrorKind::Para,
                                format!(
                                    "message size mismatch: rank {r} passed {} bytes, rank {me} {}",
                                    s.bufs.len, bufs.len
                                ),
                            ),
                        };
                        // Failed under the lock: no rank enters once it is failed.
                        self.fail(&e);
                        drop(p);
                        return Err(e);
                    }
                }
                if all {
                    p[me].entered = my_gen;
                    // Only this rank's thread locks its view, never while it holds a call.
                    let mut view = self.push_views[me].lock();
                    view.clear();
                    view.extend(p.iter().map(|s| s.bufs));
                    return Ok(PushCall {
                        fabric: self,
                        me,
                        gen: my_gen,
                        bufs: view,
                        open: true,
                    });
                }
                // A peer that runs another operation waits in it with a message for this rank
                // or says where it is stuck: that is a mismatch, not a slow peer.
                if stalls > 0 {
                    if let Some(e) = self.push_stray(me, tag) {
                        self.fail(&e);
                        drop(p);
                        return Err(e);
                    }
                    *self.stuck[me].lock() = Some(*tag);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    let e = Error::new(
                        ErrorKind::Remote,
                        "timed out waiting for every rank of this process to join the operation",
                    );
                    self.fail(&e);
                    drop(p);
                    return Err(e);
                }
            }
            stalls += 1;
            if let (Some(b), Some(seen)) = (&bell, seen) {
                b.wait(seen, &mut [], PUSH_TICK_MS, &mut Until(|| false));
            }
        }
    }

    /// The mismatch a peer's queued message or published stall shows while rank `me` waits
    /// in the collective tagged `tag` (in which no rank sends messages): a queued message of
    /// any other collective (this rank finished every earlier one, so it took their messages),
    /// or a peer stuck in another collective of the same number or of a later one (it got
    /// past this one without this rank). Point-to-point messages run outside that order.
    fn push_stray(&self, me: usize, tag: &Tag) -> Option<Error> {
        let collective = |t: &Tag| !t.is_p2p();
        (0..self.n).filter(|&p| p != me).find_map(|p| {
            let queued = self.peek_tag(p, me).filter(collective);
            let stuck = (*self.stuck[p].lock()).filter(|t| {
                collective(t) && t.seq().wrapping_sub(tag.seq()) as i32 >= 0 && t != tag
            });
            queued
                .or(stuck)
                .map(|t| super::tag::mismatch(&t, tag, p as u32, me as u32))
        })
    }

    /// Marks rank `me` done with operation `gen` and waits until every rank that entered it is
    /// done too, so that nothing reads or writes this rank's buffers after the return. Fails
    /// when the fabric failed meanwhile (the results are incomplete), and at `deadline` (a
    /// remote failure of every rank; a rank inside the operation then is waited for up to
    /// [`PUSH_GRACE`] longer, to end the piece it holds).
    fn push_finish(&self, me: usize, gen: u64, deadline: Option<Instant>) -> Result<()> {
        self.push.lock()[me].done = gen;
        *self.stuck[me].lock() = None;
        self.ring_all();
        let bell = self.bells[me].get().cloned();
        // The ranks not done yet that may still touch this rank's buffers, counted on every
        // look (without allocating) and listed only for a message.
        let late = |list: Option<&mut Vec<usize>>| {
            let p = self.push.lock();
            // A peer that has not entered this operation once the fabric failed never will
            // (it enters only while the fabric is sound, under this lock).
            let failed = self.failed.load(Ordering::SeqCst);
            let ranks = (0..self.n).filter(|&r| p[r].done < gen && !(failed && p[r].entered < gen));
            match list {
                Some(l) => {
                    l.extend(ranks);
                    l.len()
                }
                None => ranks.count(),
            }
        };
        // Set once `deadline` has passed: the end of the wait for late ranks' pieces.
        let mut grace: Option<Instant> = None;
        loop {
            let seen = bell.as_ref().map(|b| b.seq());
            if late(None) == 0 {
                return match self.failure() {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
            }
            let now = Instant::now();
            if grace.is_some_and(|g| now >= g) {
                let mut list = Vec::new();
                late(Some(&mut list));
                // A late rank that has not run for the whole grace may still fold the piece
                // it holds, reading its peers' inputs and writing their outputs after they got
                // them back: at most that one piece (it claims no other), and nothing can stop
                // a thread that does not run.
                log::warn!(
                    "rank {me}: rank(s) {list:?} of this process did not end their piece of a \
                     failed operation within {PUSH_GRACE:?}"
                );
                return Err(self.failure().unwrap_or_else(|| {
                    Error::new(ErrorKind::Remote, "the operation failed on another rank")
                }));
            }
            if grace.is_none() && deadline.is_some_and(|d| now >= d) {
                // Failing the fabric stops the late ranks' claims; those that entered are
                // waited for a little longer so that they do not touch this rank's buffers
                // after the return.
                let mut list = Vec::new();
                late(Some(&mut list));
                let e = Error::new(
                    ErrorKind::Remote,
                    format!("timed out waiting for rank(s) {list:?} of this process to finish"),
                );
                self.fail(&e);
                grace = Some(now + PUSH_GRACE);
                continue;
            }
            if let (Some(b), Some(seen)) = (&bell, seen) {
                b.wait(seen, &mut [], PUSH_TICK_MS, &mut Until(|| false));
            }
        }
    }

    fn ring_all(&self) {
        for b in self.bells.iter().filter_map(OnceLock::get) {
            b.ring();
        }
    }

    /// Posts a send of `len` bytes at `ptr` from `src` to `dst`; returns the sequence number
    /// whose consumption completes it, or `None` when the send is complete already (a copied,
    /// eager message with fewer than [`EAGER_DEPTH`] earlier ones waiting).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, and unless the send completed at once stay
    /// valid and unmodified until `send_done` reports completion.
    pub unsafe fn post_send(
        &self,
        src: usize,
        dst: usize,
        ptr: *const u8,
        len: usize,
        tag: Tag,
        hint: SendHint,
    ) -> Option<u64> {
        let eager = (len <= EAGER_MAX).then(|| {
            let mut b = [0u8; EAGER_MAX];
            if len > 0 {
                // SAFETY: the caller guarantees len readable bytes at ptr.
                unsafe { std::ptr::copy_nonoverlapping(ptr, b.as_mut_ptr(), len) };
            }
            b
        });
        let mb = self.mailbox(src, dst);
        let mut q = mb.queue.lock();
        let seq = mb.posted.load(Ordering::Relaxed) + 1;
        mb.posted.store(seq, Ordering::Relaxed);
        q.push_back(SendDesc {
            seq,
            ptr: ptr as usize,
            len,
            tag,
            eager,
            stream: len >= STREAM_MIN && hint.op_bytes >= STREAM_OP_MIN,
        });
        drop(q);
        self.ring(dst);
        if eager.is_some() {
            // Complete once at most EAGER_DEPTH earlier messages wait.
            seq.checked_sub(EAGER_DEPTH).filter(|&s| s > 0)
        } else {
            Some(seq)
        }
    }

    /// Withdraws every unconsumed send from `src` to `dst`; on return no receiver reads the
    /// withdrawn buffers any more, so the sender may hand them back to its caller.
    pub fn cancel_sends(&self, src: usize, dst: usize) {
        let mb = self.mailbox(src, dst);
        let mut q = mb.queue.lock();
        q.clear();
        // Nothing untaken is left: the queue reads as drained again.
        mb.consumed
            .store(mb.posted.load(Ordering::Relaxed), Ordering::Release);
    }

    /// The tag of the oldest message from `src` to `dst` that no receive has taken yet.
    pub fn peek_tag(&self, src: usize, dst: usize) -> Option<Tag> {
        if let Some(m) = self.lane_head(src, dst) {
            return Some(m.tag);
        }
        let q = self.mailbox(src, dst).queue.lock();
        let front = q.front()?.tag;
        // A lane message written before the front was queued is older (see `try_recv`).
        Some(self.lane_head(src, dst).map_or(front, |m| m.tag))
    }

    /// Writes a message of at most [`LANE_MAX`] bytes from `src` to `dst` into their lane when
    /// every queued message of the pair has been taken and the lane has a free line: the send
    /// is then complete, and the receiver rung. Returns false, having changed nothing,
    /// otherwise (the caller then posts the send). Only `src`'s thread sends to `dst`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes.
    pub unsafe fn send_lane(
        &self,
        src: usize,
        dst: usize,
        ptr: *const u8,
        len: usize,
        tag: &Tag,
    ) -> bool {
        if len > LANE_MAX {
            return false;
        }
        let mb = self.mailbox(src, dst);
        // Lane messages must stay older than every queued one.
        if mb.consumed.load(Ordering::Acquire) != mb.posted.load(Ordering::Relaxed) {
            return false;
        }
        let lane = self.lane(src, dst);
        let wr = lane.wr.0.load(Ordering::Relaxed);
        if wr - lane.rd_seen.0.load(Ordering::Relaxed) >= LANE_SLOTS as u64 {
            let rd = lane.rd.0.load(Ordering::Acquire);
            lane.rd_seen.0.store(rd, Ordering::Relaxed);
            if wr - rd >= LANE_SLOTS as u64 {
                return false;
            }
        }
        let mut data = [0u8; LANE_MAX];
        if len > 0 {
            // SAFETY: the caller guarantees `len` readable bytes at `ptr`; `len <= LANE_MAX`.
            unsafe { std::ptr::copy_nonoverlapping(ptr, data.as_mut_ptr(), len) };
        }
        let w = &lane.lines[wr as usize % LANE_SLOTS].0;
        w[1].store(len as u64, Ordering::Relaxed);
        for (i, c) in tag
            .0
            .chunks_exact(8)
            .chain(data.chunks_exact(8))
            .enumerate()
        {
            let word = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
            w[LANE_TAG_WORD + i].store(word, Ordering::Relaxed);
        }
        // The line is the receiver's from here until it counts the message taken.
        w[0].store(wr + 1, Ordering::Release);
        lane.wr.0.store(wr + 1, Ordering::Relaxed);
        self.ring(dst);
        true
    }

    /// The lane's next message from `src` to `dst`, when it has been written; read by `dst`.
    fn lane_head(&self, src: usize, dst: usize) -> Option<LaneMsg> {
        let lane = self.lane(src, dst);
        let rd = lane.rd.0.load(Ordering::Relaxed);
        let w = &lane.lines[rd as usize % LANE_SLOTS].0;
        if w[0].load(Ordering::Acquire) != rd + 1 {
            return None;
        }
        let mut m = LaneMsg {
            len: w[1].load(Ordering::Relaxed) as usize,
            tag: Tag::default(),
            data: [0u8; LANE_MAX],
        };
        let words = |at: usize, out: &mut [u8]| {
            for (i, c) in out.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&w[at + i].load(Ordering::Relaxed).to_ne_bytes());
            }
        };
        words(LANE_TAG_WORD, &mut m.tag.0);
        words(LANE_DATA_WORD, &mut m.data);
        Some(m)
    }

    /// Counts the lane's next message from `src` to `dst` taken: its line goes back to the
    /// sender.
    fn lane_pop(&self, src: usize, dst: usize) {
        let rd = &self.lane(src, dst).rd.0;
        rd.store(rd.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// Takes the lane's next message from `src` to `dst` into `ptr` when it has been written
    /// and is the one expected (`len` bytes, tagged `tag`) and the fabric is sound. Returns
    /// false, having changed nothing, otherwise: the posted receive ([`Self::try_recv`]) then
    /// takes the message or reports the disagreement.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes.
    pub unsafe fn recv_lane(
        &self,
        src: usize,
        dst: usize,
        ptr: *mut u8,
        len: usize,
        tag: &Tag,
    ) -> bool {
        if self.failed.load(Ordering::Relaxed) {
            return false;
        }
        match self.lane_head(src, dst) {
            Some(m) if m.len == len && m.tag == *tag => {
                // SAFETY: `ptr` holds `len <= LANE_MAX` bytes (the caller's contract).
                unsafe { std::ptr::copy_nonoverlapping(m.data.as_ptr(), ptr, len) };
                self.lane_pop(src, dst);
                true
            }
            _ => false,
        }
    }

    /// The error for a message of `sent_len` bytes tagged `sent` from `src` that `dst` expected
    /// to be `len` bytes tagged `tag`; records it as the fabric's failure.
    fn refuse(
        &self,
        sent: &Tag,
        sent_len: usize,
        src: usize,
        dst: usize,
        tag: &Tag,
        len: usize,
    ) -> Error {
        let e = Tag::check(sent, tag, src as u32, dst as u32)
            .err()
            .unwrap_or_else(|| {
                Error::new(
                    ErrorKind::Para,
                    format!(
                        "message size mismatch: rank {src} sent {sent_len} bytes, rank {dst} \
                         expected {len}"
                    ),
                )
            });
        self.fail(&e);
        e
    }

    /// Whether the send with sequence `seq` from `src` to `dst` has been consumed.
    pub fn send_done(&self, src: usize, dst: usize, seq: u64) -> bool {
        self.mailbox(src, dst).consumed.load(Ordering::Acquire) >= seq
    }

    /// Tries to complete a receive at `dst` from `src` into `ptr` (`len` bytes, tagged `tag`),
    /// reducing into it when `reduce` is given. Returns `Ok(true)` when done, `Ok(false)` when
    /// the matching send has not been posted yet. A message of another operation is left in
    /// place and fails the fabric.
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
        tag: &Tag,
    ) -> Result<bool> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        // The lane's next message is older than anything queued.
        if let Some(m) = self.lane_head(src, dst) {
            // SAFETY: forwarded from this function's contract.
            return unsafe { self.take_lane(src, dst, m, ptr, len, reduce, tag) };
        }
        let mb = self.mailbox(src, dst);
        if mb.consumed.load(Ordering::Relaxed) == mb.posted.load(Ordering::Acquire) {
            // Nothing queued: the mailbox's line is only read, not taken from the sender.
            return Ok(false);
        }
        // The copy happens under the mailbox lock so that a sender that gives up (see
        // `cancel_sends`) can be sure no receiver is still reading its buffer.
        let mut q = mb.queue.lock();
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let Some(front) = q.front() else {
            return Ok(false);
        };
        // A lane message written before the front was queued shows now (the lock orders it
        // after the queueing), and is older.
        if let Some(m) = self.lane_head(src, dst) {
            drop(q);
            // SAFETY: forwarded from this function's contract.
            return unsafe { self.take_lane(src, dst, m, ptr, len, reduce, tag) };
        }
        if front.tag != *tag || front.len != len {
            let (sent, sent_len) = (front.tag, front.len);
            drop(q);
            return Err(self.refuse(&sent, sent_len, src, dst, tag, len));
        }
        let desc = q.pop_front().expect("front exists");
        if len > 0 {
            let from = match &desc.eager {
                Some(b) => b.as_ptr(),
                None => desc.ptr as *const u8,
            };
            // SAFETY: the sender's buffer (or the eager copy) holds `len` bytes and stays valid
            // while its descriptor is queued, which the lock held here guarantees; `ptr` is
            // valid per this function's contract.
            unsafe {
                match reduce {
                    None => {
                        let apart = (from as usize).abs_diff(ptr as usize) >= len;
                        if desc.stream && apart {
                            copy_streaming(from, ptr, len);
                        } else if !std::ptr::eq(from, ptr) {
                            std::ptr::copy(from, ptr, len);
                        }
                    }
                    Some(r) => r.apply(ptr, from, len),
                }
            }
        }
        mb.consumed.store(desc.seq, Ordering::Release);
        let queued = q.len() as u64;
        drop(q);
        // A rendezvous sender waits for its message to be taken; an eager one only when
        // EAGER_DEPTH messages wait before its own.
        if desc.eager.is_none() || queued >= EAGER_DEPTH {
            self.ring(src);
        }
        Ok(true)
    }

    /// [`Self::try_recv`] of the lane's next message `m`: checked, delivered, counted taken.
    ///
    /// # Safety
    /// As for [`Self::try_recv`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn take_lane(
        &self,
        src: usize,
        dst: usize,
        m: LaneMsg,
        ptr: *mut u8,
        len: usize,
        reduce: Option<&ReduceFn>,
        tag: &Tag,
    ) -> Result<bool> {
        if m.tag != *tag || m.len != len {
            return Err(self.refuse(&m.tag, m.len, src, dst, tag, len));
        }
        if len > 0 {
            // SAFETY: `ptr` is valid for `len <= LANE_MAX` bytes (the caller's contract); the
            // message's bytes are a copy of this rank's own.
            unsafe {
                match reduce {
                    None => std::ptr::copy_nonoverlapping(m.data.as_ptr(), ptr, len),
                    Some(r) => r.apply(ptr, m.data.as_ptr(), len),
                }
            }
        }
        self.lane_pop(src, dst);
        Ok(true)
    }
}

impl Medium for InprocFabric {
    fn failure(&self) -> Option<Error> {
        InprocFabric::failure(self)
    }

    fn fail(&self, why: &Error) {
        InprocFabric::fail(self, why)
    }

    fn publish_stuck(&self, me: u32, tag: &Tag) {
        if let Some(s) = self.stuck.get(me as usize) {
            *s.lock() = Some(*tag);
        }
    }
}

/// A receive waiting for its message.
#[derive(Clone, Copy, Debug)]
struct Recv {
    ptr: usize,
    len: usize,
    reduce: Option<ReduceFn>,
    tag: Tag,
    /// Its reduction turn (see [`Shared::reduce_turn`]).
    turn: Option<u64>,
}

/// The link of rank `me` to `peer`, another thread of this process, through their fabric.
#[derive(Debug)]
pub struct MemoryLink {
    fabric: Arc<InprocFabric>,
    me: usize,
    peer: usize,
    /// Per send not complete yet, in posting order, the sequence number whose taking completes
    /// it (its own for a rendezvous send; see [`EAGER_DEPTH`] for eager ones).
    sends: VecDeque<u64>,
    recvs: VecDeque<Recv>,
}

impl MemoryLink {
    /// The link of `me` to `peer` over `fabric` (which both have joined).
    pub fn new(fabric: Arc<InprocFabric>, me: u32, peer: u32) -> MemoryLink {
        MemoryLink {
            fabric,
            me: me as usize,
            peer: peer as usize,
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
        }
    }
}

impl Link for MemoryLink {
    fn info(&self) -> LinkInfo {
        LinkInfo {
            name: "memory",
            reach: Reach::Process,
            single_copy: true,
        }
    }

    fn medium(&self) -> Option<Arc<dyn Medium>> {
        Some(self.fabric.clone())
    }

    unsafe fn post_send(&mut self, ptr: *const u8, len: usize, tag: Tag) -> Result<()> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.post_send_hinted(ptr, len, tag, SendHint::default()) }
    }

    unsafe fn post_send_hinted(
        &mut self,
        ptr: *const u8,
        len: usize,
        tag: Tag,
        hint: SendHint,
    ) -> Result<()> {
        // SAFETY: forwarded from this function's contract.
        if unsafe { self.send_now(ptr, len, &tag) } {
            return Ok(());
        }
        // SAFETY: forwarded from this function's contract.
        let posted = unsafe {
            self.fabric
                .post_send(self.me, self.peer, ptr, len, tag, hint)
        };
        if let Some(seq) = posted {
            self.sends.push_back(seq);
        }
        Ok(())
    }

    unsafe fn post_recv(
        &mut self,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
        shared: &mut Shared,
    ) -> Result<()> {
        self.recvs.push_back(Recv {
            ptr: ptr as usize,
            len,
            reduce,
            tag,
            turn: reduce.map(|_| shared.reduce_turn()),
        });
        Ok(())
    }

    /// Takes the message from the pair's lane (see the module documentation).
    unsafe fn recv_now(&mut self, ptr: *mut u8, len: usize, tag: &Tag) -> bool {
        // SAFETY: forwarded from this function's contract.
        self.recvs.is_empty() && unsafe { self.fabric.recv_lane(self.peer, self.me, ptr, len, tag) }
    }

    /// Writes the message into the pair's lane (see the module documentation).
    unsafe fn send_now(&mut self, ptr: *const u8, len: usize, tag: &Tag) -> bool {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.fabric.send_lane(self.me, self.peer, ptr, len, tag) }
    }

    fn progress(&mut self, shared: &mut Shared) -> Result<bool> {
        let mut any = false;
        // The fabric counts taken sends, so they complete in posting order.
        while let Some(&seq) = self.sends.front() {
            if !self.fabric.send_done(self.me, self.peer, seq) {
                break;
            }
            self.sends.pop_front();
            any = true;
        }
        while let Some(r) = self.recvs.front() {
            if r.turn.is_some_and(|k| !shared.my_turn(k)) {
                break;
            }
            // SAFETY: post_recv's contract keeps the buffer valid until the link is idle.
            let done = unsafe {
                self.fabric.try_recv(
                    self.peer,
                    self.me,
                    r.ptr as *mut u8,
                    r.len,
                    r.reduce.as_ref(),
                    &r.tag,
                )?
            };
            if !done {
                break;
            }
            if r.turn.is_some() {
                shared.turn_done();
            }
            self.recvs.pop_front();
            any = true;
        }
        Ok(any)
    }

    fn idle(&self) -> bool {
        self.sends.is_empty() && self.recvs.is_empty()
    }

    fn wake(&self) -> Wake {
        Wake::Doorbell
    }

    fn stray_tag(&self) -> Option<Tag> {
        if !self.recvs.is_empty() {
            return None;
        }
        self.fabric.peek_tag(self.peer, self.me)
    }

    fn peer_stuck(&self) -> Option<Tag> {
        *self.fabric.stuck[self.peer].lock()
    }

    fn peer_cpu(&self) -> u32 {
        self.fabric.cpu_of(self.peer)
    }

    fn inproc(&self) -> Option<Arc<InprocFabric>> {
        Some(self.fabric.clone())
    }

    fn abort(&mut self, _why: &Error) {
        if !self.sends.is_empty() {
            self.fabric.cancel_sends(self.me, self.peer);
        }
        self.sends.clear();
        self.recvs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tag::{OpKind, OpTag};

    const T: Tag = Tag([0; crate::transport::tag::TAG_LEN]);

    /// A fabric of `n` ranks under a key of its own (`tag`: tests run in parallel).
    fn fabric(n: usize, tag: u128) -> Arc<InprocFabric> {
        let key = u128::from(std::process::id()) << 64 | tag;
        let mut f = None;
        for r in 0..n {
            let bell = Arc::new(Doorbell::new(n).unwrap());
            f = Some(InprocFabric::join(key, n, n, r, bell).unwrap());
        }
        f.unwrap()
    }

    /// A rank that joins after the others failed and dropped the fabric still finds it, with
    /// its failure; once every rank joined and left, the key starts afresh.
    #[test]
    fn a_late_rank_finds_the_failure_of_ranks_that_already_left() {
        let key = u128::from(std::process::id()) << 64 | 99;
        let bell = || Arc::new(Doorbell::new(2).unwrap());
        let early = InprocFabric::join(key, 3, 2, 0, bell()).unwrap();
        early.fail(&Error::new(ErrorKind::Para, "operation mismatch: test"));
        drop(early);
        let late = InprocFabric::join(key, 3, 2, 1, bell()).unwrap();
        let seen = late.failure().expect("the late rank sees the failure");
        assert_eq!(seen.kind, ErrorKind::Para);
        drop(late);
        let next = InprocFabric::join(key, 3, 2, 0, bell()).unwrap();
        assert!(
            next.failure().is_none(),
            "a new communicator's fabric is fresh"
        );
    }

    /// Message `k` of the lane tests: its length (mostly lane-sized, some queued eagerly, some
    /// rendezvous) and its bytes.
    fn lane_msg(k: u32) -> Vec<u8> {
        let len = match k % 7 {
            0 => 0,
            3 => LANE_MAX + 1 + k as usize % 40,
            5 if k.is_multiple_of(3) => 1000,
            _ => 1 + k as usize % LANE_MAX,
        };
        (0..len).map(|i| (k as usize * 31 + i) as u8).collect()
    }

    /// Small messages take the lane while the queue is drained and the lane has room, the
    /// rest the queue; across the lane's wrap-around and interleaved with queued messages,
    /// every message arrives once, whole and in sending order, and the lane is used again once
    /// the queue drained.
    #[test]
    fn lane_and_queue_messages_arrive_in_sending_order() {
        let f = fabric(2, 40);
        // One thread: a full lane, then the queue, then nothing more on the lane.
        let x = [9u8; 8];
        // SAFETY: 8 readable bytes at `x`.
        let lane = || unsafe { f.send_lane(0, 1, x.as_ptr(), 8, &T) };
        for k in 0..LANE_SLOTS {
            assert!(lane(), "line {k}");
        }
        assert!(!lane(), "the lane is full");
        // SAFETY: eager: copied at posting.
        unsafe { f.post_send(0, 1, x.as_ptr(), 8, T, SendHint::default()) };
        let mut got = [0u8; 8];
        // SAFETY: a destination of 8 bytes.
        let mut take = || unsafe { f.try_recv(0, 1, got.as_mut_ptr(), 8, None, &T) }.unwrap();
        assert!(take());
        assert!(
            !lane(),
            "a queued message is untaken: the next one queues behind it"
        );
        for _ in 0..LANE_SLOTS {
            assert!(take());
        }
        assert!(!take());
        assert!(lane(), "drained: the lane again");

        // Two threads, through the links, many times around the lane.
        let f = fabric(2, 41);
        const N: u32 = 3000;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut link = MemoryLink::new(f.clone(), 0, 1);
                let mut shared = Shared::default();
                for k in 0..N {
                    let m = lane_msg(k);
                    let tag = op(OpKind::P2p, k);
                    // SAFETY: `m` outlives the wait for the link to be idle below.
                    unsafe { link.post_send(m.as_ptr(), m.len(), tag).unwrap() };
                    while !link.idle() {
                        link.progress(&mut shared).unwrap();
                        std::thread::yield_now();
                    }
                }
            });
            let mut link = MemoryLink::new(f.clone(), 1, 0);
            let mut shared = Shared::default();
            for k in 0..N {
                let want = lane_msg(k);
                let tag = op(OpKind::P2p, k);
                let mut got = vec![0xeeu8; want.len()];
                // SAFETY: `got` holds its length and outlives the loop below.
                let now = unsafe { link.recv_now(got.as_mut_ptr(), got.len(), &tag) };
                if !now {
                    // SAFETY: as above.
                    unsafe {
                        link.post_recv(got.as_mut_ptr(), got.len(), None, tag, &mut shared)
                            .unwrap()
                    };
                    while !link.idle() {
                        link.progress(&mut shared).unwrap();
                        std::thread::yield_now();
                    }
                }
                assert_eq!(got, want, "message {k}");
            }
        });
        assert!(f.failure().is_none());
    }

    /// A lane message of another operation or size is refused, left unread and fails the
    /// fabric as a queued one does; a direct receive never takes it.
    #[test]
    fn a_lane_message_that_disagrees_is_refused_and_left_unread() {
        for (case, len) in [(0, 8), (1, 12)] {
            let f = fabric(2, 42 + case);
            let sent = op(OpKind::Broadcast, 1);
            let want = if case == 0 {
                op(OpKind::AllReduce, 1)
            } else {
                sent
            };
            let a = [7u8; 8];
            let mut got = [0u8; 12];
            // SAFETY: buffers of the stated lengths, alive for the calls.
            unsafe {
                assert!(f.send_lane(0, 1, a.as_ptr(), 8, &sent));
                assert!(!f.recv_lane(0, 1, got.as_mut_ptr(), len, &want));
                assert_eq!(f.peek_tag(0, 1), Some(sent));
                let e = f
                    .try_recv(0, 1, got.as_mut_ptr(), len, None, &want)
                    .unwrap_err();
                assert_eq!(e.kind, ErrorKind::Para, "case {case}: {}", e.msg);
            }
            assert_eq!(got, [0u8; 12], "case {case}: nothing was delivered");
            assert_eq!(f.peek_tag(0, 1), Some(sent), "case {case}: left unread");
            assert_eq!(f.failure().map(|e| e.kind), Some(ErrorKind::Para));
        }
    }

    /// Once a rank failed the fabric (it died mid-operation), a receiver does not take even a
    /// message already in the lane: it reports the failure.
    #[test]
    fn a_failed_fabric_fails_lane_receives() {
        let f = fabric(2, 44);
        let a = [3u8; 4];
        let mut got = [0u8; 4];
        // SAFETY: buffers of the stated lengths, alive for the calls.
        unsafe { assert!(f.send_lane(0, 1, a.as_ptr(), 4, &T)) };
        f.fail(&Error::new(ErrorKind::Internal, "rank 0 stopped"));
        // SAFETY: as above.
        unsafe {
            assert!(!f.recv_lane(0, 1, got.as_mut_ptr(), 4, &T));
            let e = f.try_recv(0, 1, got.as_mut_ptr(), 4, None, &T).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Remote, "{}", e.msg);
        }
        assert_eq!(got, [0u8; 4]);
    }

    /// A sender runs ahead by at most EAGER_DEPTH small messages: the next one completes when
    /// the receiver takes the oldest.
    #[test]
    fn eager_sends_run_ahead_by_the_depth_only() {
        let f = fabric(2, 7);
        let x = [5u8; 8];
        for k in 0..EAGER_DEPTH {
            // SAFETY: eager: the message is copied at posting.
            let s = unsafe { f.post_send(0, 1, x.as_ptr(), x.len(), T, SendHint::default()) };
            assert_eq!(s, None, "message {k} completes at posting");
        }
        // SAFETY: as above.
        let s = unsafe { f.post_send(0, 1, x.as_ptr(), x.len(), T, SendHint::default()) };
        let s = s.expect("one past the depth waits");
        assert!(!f.send_done(0, 1, s));
        let mut got = [0u8; 8];
        // SAFETY: a destination of 8 bytes.
        assert!(unsafe { f.try_recv(0, 1, got.as_mut_ptr(), 8, None, &T) }.unwrap());
        assert!(f.send_done(0, 1, s));
        assert_eq!(got, x);
    }

    #[test]
    fn small_sends_complete_at_once_and_large_ones_when_taken() {
        let f = fabric(2, 1);
        let mut small: Vec<u8> = (1..=EAGER_MAX as u8).collect();
        let expect_small = small.clone();
        let big: Vec<u8> = (0..EAGER_MAX + 1).map(|i| (i * 7) as u8).collect();
        // SAFETY: the buffers outlive the receives below.
        let (s1, s2) = unsafe {
            (
                f.post_send(0, 1, small.as_ptr(), small.len(), T, SendHint::default()),
                f.post_send(0, 1, big.as_ptr(), big.len(), T, SendHint::default()),
            )
        };
        assert_eq!(
            s1, None,
            "a message of EAGER_MAX bytes is copied at posting"
        );
        let s2 = s2.expect("a larger one waits for its receiver");
        assert!(!f.send_done(0, 1, s2));
        // The eager copy is the sender's: overwriting its buffer changes nothing received.
        small.fill(0);
        let mut got_small = vec![0u8; EAGER_MAX];
        let mut got_big = vec![0u8; big.len()];
        // SAFETY: destination buffers of the stated lengths.
        unsafe {
            assert!(f
                .try_recv(0, 1, got_small.as_mut_ptr(), EAGER_MAX, None, &T)
                .unwrap());
            assert!(!f.send_done(0, 1, s2));
            assert!(f
                .try_recv(0, 1, got_big.as_mut_ptr(), big.len(), None, &T)
                .unwrap());
            assert!(!f
                .try_recv(0, 1, got_big.as_mut_ptr(), big.len(), None, &T)
                .unwrap());
        }
        assert!(f.send_done(0, 1, s2));
        assert_eq!(got_small, expect_small);
        assert_eq!(got_big, big);
    }

    #[test]
    fn eager_messages_reduce_into_the_receive_buffer() {
        let f = fabric(2, 2);
        let a: Vec<f32> = vec![1.5, -2.0, 3.25];
        let mut acc: Vec<f32> = vec![0.5, 4.0, -1.25];
        let expect: Vec<f32> = a.iter().zip(&acc).map(|(x, y)| y + x).collect();
        let red = crate::exec::executor::reduce_fn(
            crate::base::dtype::DataType::Fp32,
            crate::base::dtype::ReduceOp::Sum,
        );
        // SAFETY: buffers of the stated lengths, alive for the calls.
        unsafe {
            assert_eq!(
                f.post_send(1, 0, a.as_ptr().cast(), 12, T, SendHint::default()),
                None
            );
            assert!(f
                .try_recv(1, 0, acc.as_mut_ptr().cast(), 12, Some(&red), &T)
                .unwrap());
        }
        assert_eq!(
            acc.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            expect.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_message_of_another_operation_is_refused_and_left_unread() {
        let f = fabric(2, 3);
        let sent = OpTag {
            count: 4,
            ..OpTag::new(OpKind::Broadcast)
        };
        let want = OpTag {
            count: 4,
            ..OpTag::new(OpKind::AllReduce)
        };
        let a = [7u8; 16];
        let mut got = [0u8; 16];
        // SAFETY: buffers of the stated lengths, alive for the calls.
        let e = unsafe {
            f.post_send(0, 1, a.as_ptr(), 16, sent.encode(), SendHint::default());
            f.try_recv(0, 1, got.as_mut_ptr(), 16, None, &want.encode())
                .unwrap_err()
        };
        assert_eq!(e.kind, ErrorKind::Para);
        assert!(e.msg.contains("rank 0 called Broadcast"), "{}", e.msg);
        assert_eq!(got, [0u8; 16], "nothing was delivered");
        let seen = f.failure().expect("the fabric is failed for every rank");
        assert_eq!(seen.kind, ErrorKind::Para);
        assert!(seen.msg.contains("rank 0 called Broadcast"), "{}", seen.msg);
    }

    /// The tag of collective number `seq` of `kind`, as the push path's tests use it.
    fn op(kind: OpKind, seq: u32) -> Tag {
        OpTag {
            seq,
            count: 16,
            ..OpTag::new(kind)
        }
        .encode()
    }

    /// Runs `body(rank)` on a thread per rank of `f` and returns their results in rank order.
    fn on_ranks<R: Send>(
        f: &InprocFabric,
        body: impl Fn(usize, &InprocFabric) -> R + Sync,
    ) -> Vec<std::thread::Result<R>> {
        std::thread::scope(|s| {
            let body = &body;
            let hs: Vec<_> = (0..f.n).map(|r| s.spawn(move || body(r, f))).collect();
            hs.into_iter().map(|h| h.join()).collect()
        })
    }

    const BUFS: PushBufs = PushBufs {
        send: 0,
        recv: 0,
        len: 64,
    };

    /// Every piece goes to exactly one rank, and the next operation starts from the first
    /// piece again.
    #[test]
    fn pieces_are_claimed_once_each_and_afresh_per_operation() {
        let f = fabric(3, 10);
        for seq in 1..=2 {
            let got = on_ranks(&f, |r, f| {
                let call = f
                    .push_enter(r, &op(OpKind::AllReduce, seq), BUFS, None)
                    .unwrap();
                let mine: Vec<usize> = std::iter::from_fn(|| call.claim())
                    .take_while(|&k| k < 100)
                    .collect();
                call.finish(None).unwrap();
                mine
            });
            let mut all: Vec<usize> = got.into_iter().flat_map(|g| g.unwrap()).collect();
            all.sort_unstable();
            assert_eq!(all, (0..100).collect::<Vec<_>>(), "operation {seq}");
        }
    }

    /// A rank that panics between entering and finishing fails every peer's finish (their
    /// results are incomplete) instead of leaving them waiting or reporting success.
    #[test]
    fn a_rank_that_panics_mid_operation_fails_every_peer() {
        let f = fabric(3, 11);
        let got = on_ranks(&f, |r, f| {
            let call = f.push_enter(r, &op(OpKind::AllReduce, 1), BUFS, None);
            if r == 1 {
                let _call = call.unwrap();
                panic!("injected: rank 1 fails while computing");
            }
            // A peer still entering when rank 1 fails learns it there; one that entered, at
            // its finish. A bound far past any scheduling delay: without the failure they
            // would wait for it.
            call?.finish(Some(Instant::now() + std::time::Duration::from_secs(60)))
        });
        assert!(got[1].is_err(), "rank 1 panicked");
        for r in [0, 2] {
            let e = got[r].as_ref().unwrap().as_ref().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Remote, "rank {r}: {}", e.msg);
            assert!(e.msg.contains("rank 1 stopped"), "rank {r}: {}", e.msg);
        }
        assert!(f
            .push_enter(0, &op(OpKind::AllReduce, 2), BUFS, None)
            .is_err());
    }

    /// A rank that entered and never finishes fails its peers at their deadline; once it comes
    /// back it claims nothing more and fails too.
    #[test]
    fn a_rank_that_never_finishes_fails_its_peers_at_the_deadline() {
        let f = fabric(3, 12);
        let (gave_up, peers_gave_up) = std::sync::mpsc::channel::<()>();
        let peers_gave_up = Mutex::new(peers_gave_up);
        let got = on_ranks(&f, |r, f| {
            let call = f
                .push_enter(r, &op(OpKind::AllReduce, 1), BUFS, None)
                .unwrap();
            if r == 2 {
                // Held until both peers have given up on it (a bound far past their deadline,
                // so that a finish that never gives up fails this test instead of hanging).
                let rx = peers_gave_up.lock();
                for _ in 0..2 {
                    let _ = rx.recv_timeout(std::time::Duration::from_secs(60));
                }
                assert_eq!(call.claim(), None, "no piece is claimed after the failure");
                return call.finish(None);
            }
            let deadline = Instant::now() + std::time::Duration::from_millis(200);
            let res = call.finish(Some(deadline));
            gave_up.send(()).unwrap();
            res
        });
        for (r, g) in got.iter().enumerate() {
            let e = g.as_ref().unwrap().as_ref().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Remote, "rank {r}: {}", e.msg);
        }
        let e = got[0].as_ref().unwrap().as_ref().unwrap_err();
        assert!(e.msg.contains("rank(s) [2]"), "{}", e.msg);
    }

    /// A rank still folding a piece when a peer's deadline passes is waited for until it ends
    /// that piece (bounded by the grace): the peer gets its buffers back only once nothing
    /// touches them any more.
    #[test]
    fn a_late_rank_ends_its_piece_before_its_peer_returns() {
        let f = fabric(2, 13);
        let (returned, saw_return) = std::sync::mpsc::channel::<()>();
        let saw_return = Mutex::new(saw_return);
        let left = AtomicBool::new(false);
        let got = on_ranks(&f, |r, f| {
            let call = f
                .push_enter(r, &op(OpKind::AllReduce, 1), BUFS, None)
                .unwrap();
            if r == 1 {
                assert_eq!(call.claim(), Some(0));
                // "Folding" piece 0 until the peer's deadline failed the fabric, then a while
                // longer (a bound well inside the grace): a peer that returns meanwhile is seen.
                while call.claim().is_some() {
                    std::thread::yield_now();
                }
                let _ = saw_return
                    .lock()
                    .recv_timeout(std::time::Duration::from_millis(200));
                left.store(true, Ordering::SeqCst);
                return call.finish(None);
            }
            let res = call.finish(Some(Instant::now() + std::time::Duration::from_millis(100)));
            let piece_ended = left.load(Ordering::SeqCst);
            returned.send(()).unwrap();
            assert!(
                piece_ended,
                "rank 0 returned while rank 1 still held a piece"
            );
            res
        });
        for (r, g) in got.into_iter().enumerate() {
            let e = g.unwrap().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Remote, "rank {r}: {}", e.msg);
            assert!(e.msg.contains("rank(s) [1]"), "rank {r}: {}", e.msg);
        }
    }

    /// While a rank waits to enter, a peer's queued message of another collective (earlier:
    /// left unread; later: the peer got past this operation) or a peer waiting in a later
    /// collective is a mismatch, reported at once on every rank, not at the deadline.
    #[test]
    fn a_peer_at_another_place_in_the_sequence_fails_the_entry_at_once() {
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let x = [1u8; 8];
        for (case, seq) in [(0, 1), (1, 9), (2, 9)] {
            let f = fabric(2, 20 + case);
            if case < 2 {
                // SAFETY: eager: the message is copied at posting.
                unsafe {
                    f.post_send(
                        1,
                        0,
                        x.as_ptr(),
                        8,
                        op(OpKind::Broadcast, seq),
                        SendHint::default(),
                    )
                };
            } else {
                f.publish_stuck(1, &op(OpKind::Barrier, seq));
            }
            let e = f
                .push_enter(0, &op(OpKind::AllReduce, 5), BUFS, Some(later))
                .unwrap_err();
            assert_eq!(e.kind, ErrorKind::Para, "case {case}: {}", e.msg);
            assert!(e.msg.contains("rank 1 called"), "case {case}: {}", e.msg);
            assert_eq!(f.failure().map(|e| e.kind), Some(ErrorKind::Para));
        }
    }

    /// A peer still waiting in an earlier collective (for another rank, maybe) or with a
    /// point-to-point message queued is no mismatch: the entry waits, and both enter.
    #[test]
    fn a_peer_behind_or_with_a_point_to_point_message_is_waited_for() {
        let f = fabric(2, 30);
        let x = [1u8; 8];
        // SAFETY: eager: the message is copied at posting.
        unsafe { f.post_send(1, 0, x.as_ptr(), 8, op(OpKind::P2p, 7), SendHint::default()) };
        f.publish_stuck(1, &op(OpKind::Broadcast, 4));
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let got = on_ranks(&f, |r, f| {
            if r == 1 {
                // Posts once rank 0 has looked at it and found it no mismatch.
                while f.stuck[0].lock().is_none() {
                    std::thread::yield_now();
                }
            }
            let call = f.push_enter(r, &op(OpKind::AllReduce, 5), BUFS, Some(later))?;
            call.finish(Some(later))
        });
        for (r, g) in got.into_iter().enumerate() {
            g.unwrap().unwrap_or_else(|e| panic!("rank {r}: {}", e.msg));
        }
    }
}
