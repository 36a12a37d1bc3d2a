//! The interface every kind of link implements, so that the endpoint (and everything above it)
//! drives links without knowing which kinds exist.
//!
//! A [`Link`] moves tagged messages to and from one peer: sends and receives queue in posting
//! order and complete as [`Link::progress`] moves them. Between passes of progress the endpoint
//! sleeps on whatever the active links name as their wake-up source ([`Wake`]). Links of one
//! endpoint may share state ([`Medium`]: the in-process fabric, this rank's shared-memory
//! segment) that carries failures between ranks and may offer a bell to sleep on.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use super::backoff::{Wait, NO_CPU};
use super::tag::Tag;
use super::ReduceFn;
use crate::base::error::{Error, Result};

/// Where a link's peer runs, seen from this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The rank itself.
    Itself,
    /// Another thread of this process.
    Process,
    /// Another process on this host (level0).
    Host,
    /// Across the network (level1), possibly on this host when forced.
    Network,
}

/// What a link is, for logs, traces and the cost model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// Short name (`self`, `memory`, `shm`, `tcp`, ...).
    pub name: &'static str,
    /// Where the peer runs.
    pub reach: Reach,
    /// Whether large messages move in one copy, the receiver reading the sender's buffer.
    pub single_copy: bool,
}

/// What the operation a send belongs to tells the link about it. Only choices that change how
/// the bytes move, never what arrives, may depend on it: the receiving side follows whatever
/// the sender chose, so ranks that disagree on a hint still deliver the same data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendHint {
    /// Bytes of the operation the message is part of: the largest buffer a rank reads or
    /// writes in it (0: unknown, the message stands alone). A pipelined chunk of a large
    /// operation streams through memory, a message of a cache-sized one mostly does not.
    pub op_bytes: usize,
    /// Every receive of the operation stores what arrives; none reduces it (Broadcast,
    /// AllGather, Scatter, AlltoAll, Send/Recv).
    pub stored: bool,
    /// Stage the message at any size, never read it single-copy: set for a Reduce between
    /// processes of one host, whose receivers reduce what arrives while their senders would
    /// otherwise idle. Staged, a sender's copy into the link overlaps its receiver's reduction
    /// out of it; read single-copy, the receiver copies and reduces alone. A link on a host
    /// with more ranks than cores ignores it: there the two copies do not overlap.
    pub staged: bool,
    /// The reduction of an operation whose senders otherwise idle while their receivers reduce
    /// (a Reduce): a sender that waits for its single-copy message to be read may then reduce
    /// part of it into the receiver's buffer itself, exactly as the receiver would. Left unset
    /// where senders have work of their own (AllReduce, ReduceScatter).
    pub reduce: Option<ReduceFn>,
}

/// How a waiting endpoint learns that an active link may progress.
#[derive(Clone, Copy, Debug)]
pub enum Wake {
    /// The peer rings this endpoint's doorbell.
    Doorbell,
    /// The peer rings the bell of the link's [`Medium`].
    Medium,
    /// A descriptor turns ready for the given poll events.
    Fd(libc::pollfd),
    /// Either descriptor turns ready: the link's own wait descriptor, which a provider may not
    /// signal for everything that lets the link progress (so the endpoint sleeps only in short
    /// slices), and one whose hang-up means the peer is gone.
    Fds([libc::pollfd; 2]),
    /// Nothing signals: the link is polled ([`Link::ready`]) and the endpoint sleeps only in
    /// short slices.
    Poll,
}

/// State that several links of one endpoint share.
pub trait Medium: Send + Sync {
    /// A failure another rank recorded here, as this rank reports it.
    fn failure(&self) -> Option<Error> {
        None
    }
    /// Records that this rank failed for `why`, so that ranks waiting on it stop.
    fn fail(&self, why: &Error);
    /// Publishes the CPU this rank waits on ([`NO_CPU`]: none it can vouch for).
    fn set_cpu(&self, _cpu: u32) {}
    /// The bell's current value, when the medium has a bell to sleep on.
    fn bell_seq(&self) -> Option<u32> {
        None
    }
    /// Waits until the bell differs from `seen`, `also` is ready or `max` passes (under the
    /// waiting policy); returns whether something happened.
    fn wait(&self, _seen: u32, _max: Duration, _also: &mut dyn Wait) -> bool {
        false
    }
    /// Publishes that rank `me` is stuck waiting in the operation tagged `tag`, for peers that
    /// are stuck too (see [`Link::peer_stuck`]).
    fn publish_stuck(&self, _me: u32, _tag: &Tag) {}
}

/// Whether two media are the same object.
pub(crate) fn same_medium(a: &Arc<dyn Medium>, b: &Arc<dyn Medium>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// What the links of one endpoint share while they progress.
#[derive(Debug, Default)]
pub struct Shared {
    reduce_posted: u64,
    reduce_next: u64,
    /// Scratch for reductions of data read from elsewhere (grown by the link that needs it).
    pub stage: Vec<u8>,
}

impl Shared {
    /// The turn of a new reducing receive. Links that take turns run their reducing receives in
    /// turn order, across peers, so the order in which values are combined (and so the bits of
    /// a float result) never depends on which peer was ready first.
    pub fn reduce_turn(&mut self) -> u64 {
        self.reduce_posted += 1;
        self.reduce_posted - 1
    }

    /// Whether the reducing receive of turn `k` may run now.
    pub fn my_turn(&self, k: u64) -> bool {
        k == self.reduce_next
    }

    /// Hands the turn to the next reducing receive.
    pub fn turn_done(&mut self) {
        self.reduce_next += 1;
    }

    /// Starts counting turns afresh (nothing is pending).
    pub fn reset(&mut self) {
        self.reduce_posted = 0;
        self.reduce_next = 0;
    }
}

/// A link to one peer.
pub trait Link: Send {
    /// What the link is.
    fn info(&self) -> LinkInfo;

    /// The state this link shares with other links of the endpoint, if any.
    fn medium(&self) -> Option<Arc<dyn Medium>> {
        None
    }

    /// Queues a send of `len` bytes at `ptr` tagged `tag`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes and stay valid and unmodified until the link
    /// is idle (or aborted).
    unsafe fn post_send(&mut self, ptr: *const u8, len: usize, tag: Tag) -> Result<()>;

    /// [`Link::post_send`] with what the operation tells the link about the message; links
    /// that have no choice to make ignore it.
    ///
    /// # Safety
    /// As for [`Link::post_send`].
    unsafe fn post_send_hinted(
        &mut self,
        ptr: *const u8,
        len: usize,
        tag: Tag,
        _hint: SendHint,
    ) -> Result<()> {
        // SAFETY: forwarded under the same contract.
        unsafe { self.post_send(ptr, len, tag) }
    }

    /// Queues a receive of `len` bytes into `ptr` tagged `tag`, reducing into it when `reduce`
    /// is given (taking a turn from `shared` when the link orders reductions).
    ///
    /// # Safety
    /// `ptr` must be valid for writes (and reads when reducing) of `len` bytes and stay so,
    /// untouched by anyone else, until the link is idle (or aborted).
    unsafe fn post_recv(
        &mut self,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
        shared: &mut Shared,
    ) -> Result<()>;

    /// Takes the peer's next message into `ptr` at once, bypassing the queues, when nothing is
    /// queued on the link and that message is the one expected — tagged `tag`, `len` bytes,
    /// whole in the link — and has arrived (or arrives within a short spin, where the link's
    /// waiting policy allows one). Returns false, having changed nothing, otherwise: the caller
    /// then posts the receive as usual, and the queued path takes the message or reports the
    /// disagreement exactly as it always does. Links without such a path always return false.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes.
    unsafe fn recv_now(&mut self, _ptr: *mut u8, _len: usize, _tag: &Tag) -> bool {
        false
    }

    /// Sends a message at once, bypassing the queues, when nothing is queued to the peer and
    /// the link can carry it whole right now (a small message, room in the link): the message
    /// is then in the link as if posted and progressed, and `ptr` is free again on return.
    /// Returns false, having changed nothing, otherwise: the caller then posts the send as
    /// usual. Links without such a path always return false.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes.
    unsafe fn send_now(&mut self, _ptr: *const u8, _len: usize, _tag: &Tag) -> bool {
        false
    }

    /// [`Link::send_now`] for a message whose receiver sends this rank no data in the same
    /// operation (a Broadcast or Scatter root's, a Reduce leaf's), which a link may carry
    /// differently from one of an exchange.
    ///
    /// # Safety
    /// As for [`Link::send_now`].
    unsafe fn send_one_way(&mut self, ptr: *const u8, len: usize, tag: &Tag) -> bool {
        // SAFETY: forwarded.
        unsafe { self.send_now(ptr, len, tag) }
    }

    /// Moves whatever can move now without blocking; returns whether anything moved.
    fn progress(&mut self, shared: &mut Shared) -> Result<bool>;

    /// Whether nothing is queued.
    fn idle(&self) -> bool;

    /// How a waiting endpoint learns that this (active) link may progress.
    fn wake(&self) -> Wake;

    /// For [`Wake::Poll`] links: a cheap check whether progress would find something.
    fn ready(&self) -> bool {
        false
    }

    /// Fails when the peer is known to have failed or gone; `thorough` allows a costlier check
    /// (a system call) after a wait that timed out.
    fn check_peer(&self, _thorough: bool) -> Result<()> {
        Ok(())
    }

    /// The tag of a message that has arrived while no receive is posted for it.
    fn stray_tag(&self) -> Option<Tag>;

    /// The tag of the operation the peer last published itself stuck in
    /// ([`Medium::publish_stuck`]), where the link can tell.
    fn peer_stuck(&self) -> Option<Tag> {
        None
    }

    /// The CPU the peer last waited on ([`NO_CPU`] when unknown).
    fn peer_cpu(&self) -> u32 {
        NO_CPU
    }

    /// The fabric of ranks that are threads of this process, when the peer is one of them:
    /// operations may then read and write the peer's buffers directly (see
    /// [`super::inproc::InprocFabric::push_enter`]).
    fn inproc(&self) -> Option<Arc<super::inproc::InprocFabric>> {
        None
    }

    /// A descriptor whose hang-up means the peer's process is gone, when the link has one: a
    /// rank that loses one such link looks at the others to name the peer really lost.
    fn hangup_fd(&self) -> Option<RawFd> {
        None
    }

    /// Whether the peer has closed the link (checked without waiting).
    fn hung_up(&self) -> bool {
        false
    }

    /// Drops everything queued and tells the peer `why` where the link can.
    fn abort(&mut self, why: &Error);
}
