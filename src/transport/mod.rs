//! Links between ranks and the per-rank endpoint that drives them.
//!
//! A rank reaches each peer through one [`Link`]: itself ([`local`]), in-process memory (ranks
//! that are threads of one process, [`inproc`]), shared memory (other processes on the same
//! host, [`shm`]) or TCP (ranks on other hosts, or everywhere when the network link is forced,
//! [`tcp`]). The endpoint posts sends and receives on those links and completes them together in
//! one progress loop, so any set of operations whose peers post the matching ones completes
//! without deadlock. It knows links only through the [`Link`] interface: how each one moves
//! data, learns of failures and wakes a waiting rank is the link's own business.
//!
//! Every message carries the tag of the operation it belongs to ([`tag`]); a receive names the
//! tag it expects and its link refuses any other before delivering a byte. A rank that fails
//! aborts its links with the reason, which every peer waiting on it reports: an operation
//! mismatch is `HCCL_E_PARA` with both calls named on every rank that hears of it.

pub mod acceptor;
pub mod backoff;
pub mod cma;
pub mod doorbell;
pub mod futex;
pub mod gate;
pub mod inproc;
pub mod link;
pub mod local;
pub mod local_mem;
pub mod net;
pub mod peer_mem;
pub mod plugin;
pub mod plugin_link;
pub mod ring_stores;
pub mod shm;
pub mod tag;
pub mod tcp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use backoff::Wait;
use doorbell::Doorbell;
pub use link::{Link, LinkInfo, Reach, SendHint};
use link::{Medium, Shared, Wake};
use tag::Tag;

/// The error a rank reports for a failure that `from` announced: an operation mismatch keeps
/// its kind and text (the caller's error, on every rank), anything else is a remote failure.
pub(crate) fn propagated(why: Error, from: &str) -> Error {
    if why.kind == ErrorKind::Para {
        if why.msg.contains("(reported by ") {
            return why;
        }
        return Error::new(ErrorKind::Para, format!("{} (reported by {from})", why.msg));
    }
    Error::new(
        ErrorKind::Remote,
        format!("{from} aborted the communicator: {}", why.msg),
    )
}

/// How the receiver combines incoming data with what its buffer holds: `dst = dst op src`, or
/// with another buffer's contents when [`ReduceFn::left`] is set.
#[derive(Clone, Copy, Debug)]
pub struct ReduceFn {
    /// The kernel: `(dtype, op, dst, a, b, count)` computing `dst = a op b`.
    pub kernel: unsafe fn(DataType, ReduceOp, *mut u8, *const u8, *const u8, usize),
    /// Element type.
    pub dtype: DataType,
    /// Operator.
    pub op: ReduceOp,
    /// Element size in bytes (partial elements are never reduced).
    pub elem_size: usize,
    /// Where the left operand lies, in bytes from the destination: 0 combines with what the
    /// destination holds; otherwise `dst = dst[left..] op src` and the destination's old
    /// contents are never read, which saves copying the left operand there first.
    pub left: isize,
}

/// Two reductions are equal when they compute the same thing: the kernel follows from the
/// element type and the operator (every caller takes it from one table), and a function
/// pointer's address is not a stable identity.
impl PartialEq for ReduceFn {
    fn eq(&self, o: &ReduceFn) -> bool {
        (self.dtype, self.op, self.elem_size, self.left) == (o.dtype, o.op, o.elem_size, o.left)
    }
}

impl Eq for ReduceFn {}

impl ReduceFn {
    /// Applies `dst = dst op src` over `len` bytes (the left operand at `dst + left`).
    ///
    /// # Safety
    /// `dst` valid for reads and writes, `src` for reads, of `len` bytes; `len` a multiple of the
    /// element size; with `left` set, `dst + left` valid for reads of `len` bytes and apart
    /// from `dst`.
    pub unsafe fn apply(&self, dst: *mut u8, src: *const u8, len: usize) {
        let a = (dst as usize).wrapping_add_signed(self.left) as *const u8;
        // SAFETY: forwarded from this function's contract; the kernel reads `a` and `src` and
        // writes `dst`, whole elements only.
        unsafe { (self.kernel)(self.dtype, self.op, dst, a, src, len / self.elem_size) }
    }
}

/// What the running operation accepts from each peer. A peer that called something else may
/// send to this rank where no receive is posted (its schedule differs), and both would wait
/// until the timeout; a rank that waits without progress for `STRAY_CHECK` (50 ms) therefore
/// looks at such unclaimed messages and asks this whether they can belong to the operation.
pub trait Expectation {
    /// Ok when an unclaimed message from `peer` tagged `tag` may be taken by a later step or a
    /// later operation; the mismatch error when this rank will never accept it.
    fn check_stray(&self, peer: u32, tag: &Tag) -> Result<()>;

    /// The tag every rank that agrees on the running operation gives it (without per-peer
    /// parts), when there is one: two ranks stuck in the same place of the sequence under
    /// different such tags disagree, even when neither sent the other anything.
    fn identity(&self) -> Option<Tag> {
        None
    }
}

/// Passes of progress [`Endpoint::wait_all_for`] makes before it reads the clock and waits
/// under the full policy (about the time a peer a step behind takes to publish, as for the
/// shared-memory link's direct receive).
const QUICK_PASSES: u32 = 64;

/// How long a wait goes without progress before unclaimed messages are examined (and how
/// often after that).
const STRAY_CHECK: Duration = Duration::from_millis(50);

/// How long a rank that saw one peer close waits for other closed links to show, so that its
/// error names the peer that was actually lost.
const LOST_PEER_GRACE: Duration = Duration::from_millis(200);

/// Longest sleep on a medium's bell while doorbell links are active too: their peers ring the
/// endpoint's doorbell, not the medium's bell, so that sleep must stay short.
const MIXED_SLEEP: Duration = Duration::from_micros(200);

/// Longest sleep while a link whose events cannot wake this rank is active (a medium's bell
/// beside descriptors, or a polled link).
const SLICE_MS: i32 = 1;

/// Longest sleep on a medium's bell (its peers' liveness is checked after each).
const MEDIUM_TICK: Duration = Duration::from_millis(50);

/// What an endpoint's wait watches besides the primitive it sleeps on: the doorbell (when it
/// sleeps on a medium's bell), polled links, and where the peers it waits for run.
struct PeerWait<'a> {
    ep: &'a Endpoint,
    bell_seen: Option<u64>,
}

impl Wait for PeerWait<'_> {
    fn ready(&mut self) -> bool {
        self.bell_seen.is_some_and(|s| self.ep.bell.seq() != s)
    }

    fn slow(&mut self) -> bool {
        let ep = self.ep;
        ep.polled && ep.active.iter().any(|&p| ep.links[p as usize].ready())
    }

    fn here(&mut self, cpu: u32) -> bool {
        let ep = self.ep;
        // Published everywhere a peer may look: the doorbell and every medium.
        ep.bell.set_cpu(cpu);
        for m in &ep.media {
            m.set_cpu(cpu);
        }
        if cpu == backoff::NO_CPU {
            // Unknown: peers not seen yet hold the same value.
            return false;
        }
        ep.active
            .iter()
            .any(|&p| ep.links[p as usize].peer_cpu() == cpu)
    }

    fn crowd(&mut self, cpu: u32, share: u32) -> bool {
        self.here(cpu);
        let ep = self.ep;
        backoff::one_too_many(ep.me, cpu, share, |p| ep.links[p as usize].peer_cpu())
    }
}

/// How an endpoint's last sleep on a medium's bell ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Woke {
    /// No such sleep yet in this call.
    NotYet,
    /// Something rang (or a doorbell event happened).
    Event,
    /// The sleep ran out (or slept in a short slice).
    TimedOut,
}

/// One rank's view of a communicator's links.
pub struct Endpoint {
    me: u32,
    links: Vec<Box<dyn Link>>,
    /// State the links share (each medium once), in order of first appearance.
    media: Vec<Arc<dyn Medium>>,
    /// The first medium with a bell: links that wake by [`Wake::Medium`] ring it.
    bell_medium: Option<Arc<dyn Medium>>,
    bell: Arc<Doorbell>,
    /// Peers whose links have work queued, in order of activation.
    active: Vec<u32>,
    is_active: Vec<bool>,
    /// Whether an active link is polled ([`Wake::Poll`]), as of the last wait.
    polled: bool,
    shared: Shared,
    broken: Option<Error>,
}

impl Endpoint {
    /// Builds the endpoint of rank `me` from its links, `links[p]` reaching rank `p`; `bell` is
    /// the doorbell that peers ring for this rank.
    pub fn new(me: u32, links: Vec<Box<dyn Link>>, bell: Arc<Doorbell>) -> Result<Endpoint> {
        if me as usize >= links.len() || links[me as usize].info().reach != Reach::Itself {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("rank {me}'s endpoint lacks its link to itself"),
            ));
        }
        let mut media: Vec<Arc<dyn Medium>> = Vec::new();
        for m in links.iter().filter_map(|l| l.medium()) {
            if !media.iter().any(|x| link::same_medium(x, &m)) {
                media.push(m);
            }
        }
        let bell_medium = media.iter().find(|m| m.bell_seq().is_some()).cloned();
        Ok(Endpoint {
            me,
            is_active: vec![false; links.len()],
            links,
            media,
            bell_medium,
            bell,
            active: Vec::new(),
            polled: false,
            shared: Shared::default(),
            broken: None,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.me
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.links.len() as u32
    }

    /// What the link to `peer` is.
    pub fn link_info(&self, peer: u32) -> LinkInfo {
        self.links[peer as usize].info()
    }

    /// The fabric every peer of this rank shares with it when all of them are threads of this
    /// process (see [`Link::inproc`]); `None` when any is not, or when the endpoint is broken.
    pub fn inproc_fabric(&self) -> Option<Arc<inproc::InprocFabric>> {
        if self.broken.is_some() {
            return None;
        }
        let mut found: Option<Arc<inproc::InprocFabric>> = None;
        for (p, l) in self.links.iter().enumerate() {
            if p == self.me as usize {
                continue;
            }
            let f = l.inproc()?;
            match &found {
                Some(g) if !Arc::ptr_eq(g, &f) => return None,
                Some(_) => {}
                None => found = Some(f),
            }
        }
        found
    }

    /// The error that broke this endpoint, if a previous operation failed mid-way.
    pub fn broken(&self) -> Option<&Error> {
        self.broken.as_ref()
    }

    /// Moves what can move now (one pass of progress) without waiting: a small message posted
    /// before its receives leaves at once instead of at the first pass of [`Endpoint::wait_all`].
    /// A failure breaks the endpoint as in `wait_all`.
    pub fn push(&mut self) -> Result<()> {
        let r = self.progress().map(|_| ());
        if let Err(e) = &r {
            self.abort(e);
        }
        r
    }

    /// Fails when a medium of this endpoint records another rank's failure.
    pub fn check_failures(&self) -> Result<()> {
        for m in &self.media {
            if let Some(e) = m.failure() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Fails when `peer` is known to have failed (the link's quick check, no system call).
    pub fn check_peer(&self, peer: u32) -> Result<()> {
        self.links[peer as usize].check_peer(false)
    }

    /// The tag of a message from `peer` that has arrived while no receive is posted for it.
    pub fn stray_tag(&self, peer: u32) -> Option<Tag> {
        self.links[peer as usize].stray_tag()
    }

    fn check_usable(&self) -> Result<()> {
        if let Some(e) = &self.broken {
            return Err(Error::new(
                ErrorKind::Unavail,
                format!("communicator unusable after an earlier failure: {}", e.msg),
            ));
        }
        Ok(())
    }

    fn activate(&mut self, peer: u32) {
        if !self.is_active[peer as usize] {
            self.is_active[peer as usize] = true;
            self.active.push(peer);
        }
    }

    /// Posts a send of `len` bytes at `ptr` to `peer`, tagged `tag`.
    ///
    /// # Safety
    /// The buffer must stay valid and unmodified until `wait_all` returns.
    pub unsafe fn post_send(
        &mut self,
        peer: u32,
        ptr: *const u8,
        len: usize,
        tag: Tag,
    ) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.post_send_hinted(peer, ptr, len, tag, SendHint::default()) }
    }

    /// [`Endpoint::post_send`] with what the operation tells the link about the message.
    ///
    /// # Safety
    /// As for [`Endpoint::post_send`].
    pub unsafe fn post_send_hinted(
        &mut self,
        peer: u32,
        ptr: *const u8,
        len: usize,
        tag: Tag,
        hint: SendHint,
    ) -> Result<()> {
        self.check_usable()?;
        let link = &mut self.links[peer as usize];
        // SAFETY: forwarded; `wait_all` (or an abort) ends the link's use of the buffer.
        unsafe { link.post_send_hinted(ptr, len, tag, hint)? };
        if !link.idle() {
            self.activate(peer);
        }
        Ok(())
    }

    /// Posts a receive of `len` bytes from `peer` into `ptr`, reducing into it when `reduce` is
    /// given.
    ///
    /// # Safety
    /// The buffer must stay valid until `wait_all` returns and not be touched meanwhile.
    pub unsafe fn post_recv(
        &mut self,
        peer: u32,
        ptr: *mut u8,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
    ) -> Result<()> {
        self.check_usable()?;
        let link = &mut self.links[peer as usize];
        // SAFETY: forwarded; `wait_all` (or an abort) ends the link's use of the buffer.
        unsafe { link.post_recv(ptr, len, reduce, tag, &mut self.shared)? };
        if !link.idle() {
            self.activate(peer);
        }
        Ok(())
    }

    /// Whether any posted operation is still pending (a link has work queued).
    pub fn pending(&self) -> bool {
        !self.active.is_empty()
    }

    /// Receives a small message from `peer` at once when its link can take it without queueing
    /// (see [`Link::recv_now`]): nothing is pending on that link, and the message is there
    /// (or arrives within the link's short spin) with the expected tag and size. Returns false,
    /// having changed nothing, otherwise; the caller then posts the receive.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes.
    pub unsafe fn recv_now(&mut self, peer: u32, ptr: *mut u8, len: usize, tag: &Tag) -> bool {
        if self.broken.is_some() || self.is_active[peer as usize] {
            return false;
        }
        // SAFETY: forwarded.
        unsafe { self.links[peer as usize].recv_now(ptr, len, tag) }
    }

    /// Sends a small message to `peer` at once when its link can carry it without queueing
    /// (see [`Link::send_now`]): nothing is queued to that peer and the link has room. Returns
    /// false, having changed nothing, otherwise (also on a broken endpoint); the caller then
    /// posts the send, which reports the failure.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes.
    #[inline]
    pub unsafe fn send_now(&mut self, peer: u32, ptr: *const u8, len: usize, tag: &Tag) -> bool {
        if self.broken.is_some() {
            return false;
        }
        // SAFETY: forwarded.
        unsafe { self.links[peer as usize].send_now(ptr, len, tag) }
    }

    /// [`Endpoint::send_now`] for a message to a `peer` that sends this rank no data in the
    /// same operation (see [`Link::send_one_way`]).
    ///
    /// # Safety
    /// As for [`Endpoint::send_now`].
    #[inline]
    pub unsafe fn send_one_way(
        &mut self,
        peer: u32,
        ptr: *const u8,
        len: usize,
        tag: &Tag,
    ) -> bool {
        if self.broken.is_some() {
            return false;
        }
        // SAFETY: forwarded.
        unsafe { self.links[peer as usize].send_one_way(ptr, len, tag) }
    }

    /// Completes every posted operation, failing at `deadline` (None: wait forever); `expect`
    /// says what the running operation accepts (see [`Expectation`]).
    pub fn wait_all(
        &mut self,
        deadline: Option<Instant>,
        expect: Option<&dyn Expectation>,
    ) -> Result<()> {
        let r = self.wait_inner(deadline, expect);
        if let Err(e) = &r {
            self.abort(e);
        }
        r
    }

    /// [`Endpoint::wait_all`] with its deadline `timeout` from when it starts to wait: first up
    /// to 64 passes of progress, which read no clock, then the full wait. For the
    /// small-message path, whose messages usually land within those passes: a clock read costs
    /// about as much as the rest of such a call.
    pub fn wait_all_for(
        &mut self,
        timeout: Option<Duration>,
        expect: Option<&dyn Expectation>,
    ) -> Result<()> {
        // On a crowded host a peer may be queued behind this rank: no spinning then.
        let passes = if self.bell.crowded() { 0 } else { QUICK_PASSES };
        for _ in 0..passes {
            match self.progress() {
                Err(e) => {
                    self.abort(&e);
                    return Err(e);
                }
                Ok(_) if self.active.is_empty() => {
                    self.shared.reset();
                    return Ok(());
                }
                Ok(_) => std::hint::spin_loop(),
            }
        }
        self.wait_all(timeout.map(|t| Instant::now() + t), expect)
    }

    fn wait_inner(
        &mut self,
        deadline: Option<Instant>,
        expect: Option<&dyn Expectation>,
    ) -> Result<()> {
        let mut pollfds: Vec<libc::pollfd> = Vec::new();
        // How the last sleep on a medium's bell ended, for the peer checks below.
        let mut woke = Woke::NotYet;
        let mut last_full_check: Option<Instant> = None;
        // Passes without progress since the last progress, and since when (the clock is read
        // only from the second such pass on: the first is the usual wait for a peer).
        let mut fruitless = 0u32;
        let mut stuck_since: Option<Instant> = None;
        loop {
            let seen = self.bell.seq();
            let medium_seen = self.bell_medium.as_ref().and_then(|m| m.bell_seq());
            let progressed = self.progress()?;
            if self.active.is_empty() {
                self.shared.reset();
                return Ok(());
            }
            for m in &self.media {
                if let Some(e) = m.failure() {
                    return Err(e);
                }
            }
            if progressed {
                fruitless = 0;
                stuck_since = None;
                continue;
            }
            fruitless += 1;
            if let (Some(exp), true) = (expect, fruitless > 1) {
                let now = Instant::now();
                if now.duration_since(*stuck_since.get_or_insert(now)) >= STRAY_CHECK {
                    self.check_strays(exp)?;
                    stuck_since = Some(now);
                }
            }
            if woke != Woke::NotYet {
                // A sleep ended without work to do: a peer may have aborted or died. A link's
                // quick check is made every time; its thorough one (a system call) when the
                // sleep timed out, or now and then while other peers' events keep waking
                // this rank.
                let thorough = woke == Woke::TimedOut || {
                    let t = *last_full_check.get_or_insert_with(Instant::now);
                    t.elapsed() >= MEDIUM_TICK
                };
                if thorough {
                    last_full_check = Some(Instant::now());
                }
                for &p in &self.active {
                    self.links[p as usize].check_peer(thorough)?;
                }
            }
            // What the active links wake this rank by.
            pollfds.clear();
            let (mut by_doorbell, mut by_medium, mut polled) = (false, false, false);
            let mut sliced = false;
            for &p in &self.active {
                match self.links[p as usize].wake() {
                    Wake::Doorbell => by_doorbell = true,
                    Wake::Medium => by_medium = true,
                    Wake::Fd(f) => pollfds.push(f),
                    Wake::Fds(f) => {
                        pollfds.extend_from_slice(&f);
                        sliced = true;
                    }
                    Wake::Poll => polled = true,
                }
            }
            self.polled = polled;
            if let (Some(m), Some(s), true) = (&self.bell_medium, medium_seen, by_medium) {
                if pollfds.is_empty() && !polled {
                    let left = match deadline {
                        None => MEDIUM_TICK,
                        Some(d) => {
                            let left = d.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                return Err(self.timeout_error());
                            }
                            left
                        }
                    };
                    let max = if by_doorbell {
                        left.min(MIXED_SLEEP)
                    } else {
                        left
                    };
                    // Doorbell links ring the endpoint's doorbell, not the medium's bell.
                    let mut also = PeerWait {
                        ep: self,
                        bell_seen: Some(seen),
                    };
                    woke = if m.wait(s, max, &mut also) {
                        Woke::Event
                    } else {
                        Woke::TimedOut
                    };
                    continue;
                }
            }
            // The medium's bell and descriptors (or polled links) together: the medium's events
            // and polled links do not wake the sleep below, nor may every event of a sliced
            // link, so it lasts one short slice.
            woke = if by_medium || polled || sliced {
                Woke::TimedOut
            } else {
                Woke::NotYet
            };
            // Waking now and then lets a stalled wait examine unclaimed messages.
            let longest = if expect.is_some() {
                2 * STRAY_CHECK.as_millis() as i32
            } else {
                1000
            };
            let timeout_ms = match deadline {
                None => longest,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(self.timeout_error());
                    }
                    (left.as_millis().min(longest as u128)) as i32
                }
            };
            let timeout_ms = if woke == Woke::TimedOut {
                SLICE_MS
            } else {
                timeout_ms
            };
            let mut also = PeerWait {
                ep: self,
                bell_seen: None,
            };
            self.bell
                .wait(seen, &mut pollfds, timeout_ms.max(1), &mut also);
            if sliced && !by_medium && !polled {
                // A descriptor that woke the sleep spares the peer checks their system call,
                // unless it is a hang-up.
                let hangup = libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP | libc::POLLNVAL;
                let events = pollfds.iter().fold(0, |a, f| a | f.revents);
                if events != 0 && events & hangup == 0 {
                    woke = Woke::Event;
                }
            }
        }
    }

    /// One pass of progress over the active links; drops those that went idle.
    fn progress(&mut self) -> Result<bool> {
        let mut progressed = false;
        let mut i = 0;
        while i < self.active.len() {
            let p = self.active[i] as usize;
            progressed |= self.links[p]
                .progress(&mut self.shared)
                .map_err(|e| self.note_lost_peers(p, e))?;
            if self.links[p].idle() {
                self.active.swap_remove(i);
                self.is_active[p] = false;
                continue;
            }
            i += 1;
        }
        Ok(progressed)
    }

    /// Examines the messages that have arrived from peers no posted receive is waiting for,
    /// and what the peers this rank waits for say they are stuck in: ranks that each wait for
    /// the other in different operations (two Broadcast receivers, each naming the other as
    /// root) have sent each other nothing, and this is how they find out.
    #[cold]
    fn check_strays(&self, exp: &dyn Expectation) -> Result<()> {
        for (p, l) in self.links.iter().enumerate() {
            if let Some(t) = l.stray_tag() {
                exp.check_stray(p as u32, &t)?;
            }
        }
        let Some(mine) = exp.identity() else {
            return Ok(());
        };
        for m in &self.media {
            m.publish_stuck(self.me, &mine);
        }
        for &p in &self.active {
            if let Some(t) = self.links[p as usize].peer_stuck() {
                if t.seq() == mine.seq() && t != mine {
                    return Err(tag::mismatch(&t, &mine, p, self.me));
                }
            }
        }
        Ok(())
    }

    fn timeout_error(&self) -> Error {
        let mut waiting = self.active.clone();
        waiting.sort_unstable();
        Error::new(
            ErrorKind::Timeout,
            format!(
                "rank {} timed out waiting for peer rank(s) {waiting:?}",
                self.me
            ),
        )
    }

    /// Adds to a failure on the link to `failed` the other peers whose connections are closed
    /// too: when one host dies, the ranks that notice first abort and close their own links, so
    /// the first closed link a rank sees may not be the peer that was lost.
    fn note_lost_peers(&self, failed: usize, e: Error) -> Error {
        if self.links[failed].hangup_fd().is_none() {
            return e;
        }
        let others = |q: &usize| *q != failed && self.links[*q].hangup_fd().is_some();
        let lost_now = || -> Vec<usize> {
            (0..self.links.len())
                .filter(|q| others(q) && self.links[*q].hung_up())
                .collect()
        };
        // The peer that really died closed its sockets first, but its close may reach this
        // rank after the close of a survivor that noticed sooner: give it a moment to show.
        let deadline = Instant::now() + LOST_PEER_GRACE;
        let mut lost = lost_now();
        while lost.is_empty() && e.kind == ErrorKind::TcpTransfer {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds: Vec<libc::pollfd> = (0..self.links.len())
                .filter(others)
                .filter_map(|q| self.links[q].hangup_fd())
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLRDHUP,
                    revents: 0,
                })
                .collect();
            if fds.is_empty() {
                break;
            }
            let slice = left.as_millis().clamp(1, 10) as i32;
            // SAFETY: polls valid descriptors owned by this endpoint's links.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, slice) };
            lost = lost_now();
        }
        if lost.is_empty() {
            return e;
        }
        Error::new(
            e.kind,
            format!(
                "{}; the connections to peer rank(s) {lost:?} are closed as well",
                e.msg
            ),
        )
    }

    /// Abandons pending operations after a failure and tells peers why: every medium records
    /// the reason first (so a peer that finishes reading this rank's memory afterwards sees it
    /// and discards what it read), then every link drops its work and tells its peer where it
    /// can, so every rank waiting on this one errors out with the reason.
    pub fn abort(&mut self, why: &Error) {
        log::error!("rank {}: aborting communicator links: {}", self.me, why.msg);
        // A mismatch message names its ranks already; anything else gets this rank's number.
        let reason = if why.kind == ErrorKind::Para {
            why.clone()
        } else {
            Error::new(why.kind, format!("rank {}: {}", self.me, why.msg))
        };
        for p in self.active.drain(..) {
            self.is_active[p as usize] = false;
        }
        self.shared.reset();
        for m in &self.media {
            m.fail(&reason);
        }
        for l in &mut self.links {
            l.abort(&reason);
        }
        self.broken = Some(why.clone());
    }
}
