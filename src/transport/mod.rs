//! Links between ranks and the per-rank endpoint that drives them.
//!
//! A rank reaches each peer through one link: itself (local copy), in-process memory (ranks
//! that are threads of one process), shared memory (other processes on the same host, see
//! [`shm`]) or TCP (ranks on other hosts, or everywhere when the network link is forced). The endpoint posts sends
//! and receives on those links and completes them together in one progress loop, so any set of
//! operations whose peers post the matching ones completes without deadlock.
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
pub mod net;
pub mod shm;
pub mod tag;
pub mod tcp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use backoff::Wait;
use doorbell::Doorbell;
use inproc::InprocFabric;
use shm::ShmLink;
use tag::Tag;
use tcp::TcpLink;

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

/// How the receiver combines incoming data with what its buffer holds: `dst = dst op src`.
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
}

impl ReduceFn {
    /// Applies `dst = dst op src` over `len` bytes.
    ///
    /// # Safety
    /// `dst` valid for reads and writes, `src` for reads, of `len` bytes; `len` a multiple of the
    /// element size.
    pub unsafe fn apply(&self, dst: *mut u8, src: *const u8, len: usize) {
        (self.kernel)(self.dtype, self.op, dst, dst, src, len / self.elem_size);
    }
}

/// Which kind of link connects this rank to a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    /// The rank itself.
    Local,
    /// Another thread of this process.
    Memory,
    /// Another process on this host, over shared memory.
    Shm,
    /// Another process, over TCP.
    Tcp,
}

/// What the running operation accepts from each peer. A peer that called something else may
/// send to this rank where no receive is posted (its schedule differs), and both would wait
/// until the timeout; a rank that waits without progress for `STRAY_CHECK` (50 ms) therefore
/// looks at such unclaimed messages and asks this whether they can belong to the operation.
pub trait Expectation {
    /// Ok when an unclaimed message from `peer` tagged `tag` may be taken by a later step or a
    /// later operation; the mismatch error when this rank will never accept it.
    fn check_stray(&self, peer: u32, tag: &Tag) -> Result<()>;
}

/// How long a wait goes without progress before unclaimed messages are examined (and how
/// often after that).
const STRAY_CHECK: Duration = Duration::from_millis(50);

/// How long a rank that saw one peer close waits for other closed links to show, so that its
/// error names the peer that was actually lost.
const LOST_PEER_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

enum Link {
    Local,
    Memory,
    Shm(Box<ShmLink>),
    Tcp(Box<TcpLink>),
}

/// Longest sleep while shared-memory and in-process work are both pending: in-process peers
/// ring the eventfd doorbell, not the shared futex, so the futex sleep must stay short.
const MIXED_SLEEP: Duration = Duration::from_micros(200);

/// What an endpoint's wait watches besides the primitive it sleeps on: in-process events
/// (`bell_seen`, when it sleeps on the shared segment) and where the peers it waits for run.
struct PeerWait<'a> {
    ep: &'a Endpoint,
    bell_seen: Option<u64>,
}

impl Wait for PeerWait<'_> {
    fn ready(&mut self) -> bool {
        self.bell_seen.is_some_and(|s| self.ep.bell.seq() != s)
    }

    fn here(&mut self, cpu: u32) -> bool {
        let ep = self.ep;
        // Published in both places: in-process peers read the doorbell, others the segment.
        ep.bell.set_cpu(cpu);
        if let Some(seg) = &ep.shm_seg {
            seg.set_cpu(cpu);
        }
        if cpu == backoff::NO_CPU {
            // Unknown: peers not seen yet hold the same value.
            return false;
        }
        let shm = ep
            .shm_active
            .iter()
            .any(|&p| matches!(&ep.links[p as usize], Link::Shm(l) if l.peer_cpu() == cpu));
        shm || ep.fabric.as_ref().is_some_and(|f| {
            ep.pending.iter().any(|p| match p {
                Pending::MemSend { peer, .. } | Pending::MemRecv { peer, .. } => {
                    f.cpu_of(*peer as usize) == cpu
                }
            })
        })
    }
}

/// How an endpoint's last shared-memory wait ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Woke {
    /// No wait yet in this call.
    NotYet,
    /// Something rang (or an in-process event happened).
    Event,
    /// The wait ran out (or slept in a short slice beside TCP).
    TimedOut,
}

#[derive(Clone, Copy)]
enum Pending {
    MemSend {
        peer: u32,
        seq: u64,
    },
    MemRecv {
        peer: u32,
        ptr: usize,
        len: usize,
        reduce: Option<ReduceFn>,
        tag: Tag,
    },
}

/// One rank's view of a communicator's links.
pub struct Endpoint {
    me: u32,
    links: Vec<Link>,
    fabric: Option<Arc<InprocFabric>>,
    bell: Arc<Doorbell>,
    pending: Vec<Pending>,
    tcp_active: Vec<u32>,
    shm_seg: Option<Arc<shm::Segment>>,
    shm_active: Vec<u32>,
    /// Reducing shared-memory receives run in posting order: counters of those posted and of
    /// the next allowed to run, both reset when all work completes.
    shm_reduce_posted: u64,
    shm_reduce_next: u64,
    shm_stage: Vec<u8>,
    local_sends: Vec<(usize, usize)>,
    broken: Option<Error>,
}

/// What an endpoint is made of: per peer either memory (with the shared fabric) or a stream.
pub enum PeerLink {
    /// This rank.
    Local,
    /// Same process.
    Memory,
    /// Same host, another process: an attached shared-memory link.
    Shm(Box<ShmLink>),
    /// Connected TCP streams (one or more, in the same order on both ends).
    Tcp(Vec<std::net::TcpStream>),
}

impl Endpoint {
    /// Builds the endpoint of rank `me` from its per-peer links.
    pub fn new(
        me: u32,
        peers: Vec<PeerLink>,
        fabric: Option<Arc<InprocFabric>>,
        bell: Arc<Doorbell>,
    ) -> Result<Endpoint> {
        let mut links = Vec::with_capacity(peers.len());
        let mut shm_seg = None;
        for (p, l) in peers.into_iter().enumerate() {
            links.push(match l {
                PeerLink::Local => Link::Local,
                PeerLink::Memory => {
                    if fabric.is_none() {
                        return Err(Error::new(
                            ErrorKind::Internal,
                            "memory link without fabric",
                        ));
                    }
                    Link::Memory
                }
                PeerLink::Shm(l) => {
                    shm_seg.get_or_insert_with(|| l.segment().clone());
                    Link::Shm(l)
                }
                PeerLink::Tcp(s) => Link::Tcp(Box::new(TcpLink::new(s, me, p as u32)?)),
            });
        }
        Ok(Endpoint {
            me,
            links,
            fabric,
            bell,
            pending: Vec::new(),
            tcp_active: Vec::new(),
            shm_seg,
            shm_active: Vec::new(),
            shm_reduce_posted: 0,
            shm_reduce_next: 0,
            shm_stage: Vec::new(),
            local_sends: Vec::new(),
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

    /// The kind of link to `peer`.
    pub fn link_kind(&self, peer: u32) -> LinkKind {
        match self.links[peer as usize] {
            Link::Local => LinkKind::Local,
            Link::Memory => LinkKind::Memory,
            Link::Shm(_) => LinkKind::Shm,
            Link::Tcp(_) => LinkKind::Tcp,
        }
    }

    /// The error that broke this endpoint, if a previous operation failed mid-way.
    pub fn broken(&self) -> Option<&Error> {
        self.broken.as_ref()
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
        self.check_usable()?;
        match &mut self.links[peer as usize] {
            Link::Local => self.local_sends.push((ptr as usize, len)),
            Link::Memory => {
                let f = self.fabric.as_ref().expect("memory link has a fabric");
                if let Some(seq) = f.post_send(self.me as usize, peer as usize, ptr, len, tag) {
                    self.pending.push(Pending::MemSend { peer, seq });
                }
            }
            Link::Shm(l) => {
                l.post_send(ptr, len, tag);
                if !self.shm_active.contains(&peer) {
                    self.shm_active.push(peer);
                }
            }
            Link::Tcp(t) => {
                t.post_send(ptr, len, tag);
                if !self.tcp_active.contains(&peer) {
                    self.tcp_active.push(peer);
                }
            }
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
        match &mut self.links[peer as usize] {
            Link::Local => {
                if self.local_sends.is_empty() {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        "self-receive posted before the matching self-send",
                    ));
                }
                let (src, slen) = self.local_sends.remove(0);
                if slen != len {
                    return Err(Error::new(
                        ErrorKind::Para,
                        format!("self send/receive size mismatch: {slen} vs {len} bytes"),
                    ));
                }
                if len > 0 {
                    match reduce {
                        None => std::ptr::copy(src as *const u8, ptr, len),
                        Some(r) => r.apply(ptr, src as *const u8, len),
                    }
                }
            }
            Link::Memory => self.pending.push(Pending::MemRecv {
                peer,
                ptr: ptr as usize,
                len,
                reduce,
                tag,
            }),
            Link::Shm(l) => {
                let order = reduce.map(|_| {
                    self.shm_reduce_posted += 1;
                    self.shm_reduce_posted - 1
                });
                l.post_recv(ptr, len, reduce, order, tag);
                if !self.shm_active.contains(&peer) {
                    self.shm_active.push(peer);
                }
            }
            Link::Tcp(t) => {
                t.post_recv(ptr, len, reduce, tag);
                if !self.tcp_active.contains(&peer) {
                    self.tcp_active.push(peer);
                }
            }
        }
        Ok(())
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

    fn wait_inner(
        &mut self,
        deadline: Option<Instant>,
        expect: Option<&dyn Expectation>,
    ) -> Result<()> {
        if !self.local_sends.is_empty() {
            self.local_sends.clear();
            return Err(Error::new(
                ErrorKind::Internal,
                "self-send without a matching self-receive",
            ));
        }
        let mut pollfds: Vec<libc::pollfd> = Vec::new();
        // How the last shared-memory wait ended, for the peer checks below.
        let mut woke = Woke::NotYet;
        let mut last_full_check: Option<Instant> = None;
        // Passes without progress since the last progress, and since when (the clock is read
        // only from the second such pass on: the first is the usual wait for a peer).
        let mut fruitless = 0u32;
        let mut stuck_since: Option<Instant> = None;
        loop {
            let seen = self.bell.seq();
            let shm_seen = self.shm_seg.as_ref().map(|s| s.bell_seq());
            let mut progressed = self.progress_memory()?;
            progressed |= self.progress_tcp()?;
            progressed |= self.progress_shm()?;
            if self.pending.is_empty() && self.tcp_active.is_empty() && self.shm_active.is_empty() {
                self.shm_reduce_posted = 0;
                self.shm_reduce_next = 0;
                return Ok(());
            }
            if let Some(f) = &self.fabric {
                if let Some(e) = f.failure() {
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
                // A wait ended without work to do: a peer may have aborted or died. Its failure
                // flag is one load; its liveness connection costs a system call, so that is
                // checked when the wait timed out, or now and then while other peers' events
                // keep waking this rank.
                let full = woke == Woke::TimedOut || {
                    let t = *last_full_check.get_or_insert_with(Instant::now);
                    t.elapsed() >= shm::SLEEP_TICK
                };
                if full {
                    last_full_check = Some(Instant::now());
                }
                for &p in &self.shm_active {
                    if let Link::Shm(l) = &self.links[p as usize] {
                        if full {
                            l.check_peer()?;
                        } else {
                            l.check_aborted()?;
                        }
                    }
                }
            }
            if let (Some(seg), Some(s)) = (&self.shm_seg, shm_seen) {
                if !self.shm_active.is_empty() && self.tcp_active.is_empty() {
                    let left = match deadline {
                        None => shm::SLEEP_TICK,
                        Some(d) => {
                            let left = d.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                return Err(self.timeout_error());
                            }
                            left
                        }
                    };
                    let max = if self.pending.is_empty() {
                        left
                    } else {
                        left.min(MIXED_SLEEP)
                    };
                    // In-process peers ring the endpoint's doorbell, not the segment's.
                    let mut also = PeerWait {
                        ep: self,
                        bell_seen: Some(seen),
                    };
                    woke = if seg.wait(s, max, &mut also) {
                        Woke::Event
                    } else {
                        Woke::TimedOut
                    };
                    continue;
                }
                // Shared memory and TCP both pending: shared-memory arrivals do not wake the
                // poll below, so sleep in short slices.
                woke = if self.shm_active.is_empty() {
                    Woke::NotYet
                } else {
                    Woke::TimedOut
                };
            }
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
            pollfds.clear();
            for &p in &self.tcp_active {
                if let Link::Tcp(t) = &self.links[p as usize] {
                    pollfds.push(libc::pollfd {
                        fd: t.fd(),
                        events: t.poll_events(),
                        revents: 0,
                    });
                }
            }
            let timeout_ms = if woke == Woke::TimedOut {
                1
            } else {
                timeout_ms
            };
            let mut also = PeerWait {
                ep: self,
                bell_seen: None,
            };
            self.bell
                .wait(seen, &mut pollfds, timeout_ms.max(1), &mut also);
        }
    }

    /// Examines the messages that have arrived from peers no posted receive is waiting for.
    #[cold]
    fn check_strays(&self, exp: &dyn Expectation) -> Result<()> {
        for (p, l) in self.links.iter().enumerate() {
            let p = p as u32;
            let tag = match l {
                Link::Local => None,
                Link::Memory => {
                    let waited = self
                        .pending
                        .iter()
                        .any(|x| matches!(x, Pending::MemRecv { peer, .. } if *peer == p));
                    let f = self.fabric.as_ref().expect("memory link has a fabric");
                    (!waited)
                        .then(|| f.peek_tag(p as usize, self.me as usize))
                        .flatten()
                }
                Link::Shm(l) => l.peek_tag(),
                Link::Tcp(t) => t.peek_tag(),
            };
            if let Some(t) = tag {
                exp.check_stray(p, &t)?;
            }
        }
        Ok(())
    }

    fn timeout_error(&self) -> Error {
        let mut waiting: Vec<u32> = self
            .pending
            .iter()
            .map(|p| match p {
                Pending::MemSend { peer, .. } | Pending::MemRecv { peer, .. } => *peer,
            })
            .chain(self.tcp_active.iter().copied())
            .chain(self.shm_active.iter().copied())
            .collect();
        waiting.sort_unstable();
        waiting.dedup();
        Error::new(
            ErrorKind::Timeout,
            format!(
                "rank {} timed out waiting for peer rank(s) {waiting:?}",
                self.me
            ),
        )
    }

    fn progress_memory(&mut self) -> Result<bool> {
        if self.pending.is_empty() {
            return Ok(false);
        }
        let f = self
            .fabric
            .clone()
            .expect("pending memory ops imply a fabric");
        let me = self.me as usize;
        let mut progressed = false;
        let mut i = 0;
        // Receives from one peer must complete in posting order: remember peers whose earlier
        // receive is still open in this pass.
        let mut blocked: u64 = 0;
        let mut blocked_big: Vec<u32> = Vec::new();
        let mut reduce_blocked = false;
        while i < self.pending.len() {
            let done = match self.pending[i] {
                Pending::MemSend { peer, seq } => f.send_done(me, peer as usize, seq),
                Pending::MemRecv {
                    peer,
                    ptr,
                    len,
                    reduce,
                    tag,
                } => {
                    // Reductions also complete in posting order across peers, so the
                    // combination order (and so the bits of a float result) never depends on
                    // which peer happened to be ready first.
                    let peer_blocked = if peer < 64 {
                        blocked & (1 << peer) != 0
                    } else {
                        blocked_big.contains(&peer)
                    };
                    let ok = if peer_blocked || (reduce.is_some() && reduce_blocked) {
                        false
                    } else {
                        // SAFETY: post_recv's contract keeps the buffer valid.
                        unsafe {
                            f.try_recv(
                                peer as usize,
                                me,
                                ptr as *mut u8,
                                len,
                                reduce.as_ref(),
                                &tag,
                            )?
                        }
                    };
                    if !ok {
                        reduce_blocked |= reduce.is_some();
                        if peer < 64 {
                            blocked |= 1 << peer;
                        } else if !blocked_big.contains(&peer) {
                            blocked_big.push(peer);
                        }
                    }
                    ok
                }
            };
            if done {
                self.pending.remove(i);
                progressed = true;
            } else {
                i += 1;
            }
        }
        Ok(progressed)
    }

    /// Adds to a failure on the link to `failed` the other TCP peers whose connections are
    /// closed too: when one host dies, the ranks that notice first abort and close their own
    /// links, so the first closed link a rank sees may not be the peer that was lost.
    fn note_lost_tcp_peers(&self, failed: usize, e: Error) -> Error {
        let others = |q: &usize| *q != failed && matches!(&self.links[*q], Link::Tcp(_));
        let lost_now = || -> Vec<usize> {
            (0..self.links.len())
                .filter(|q| others(q) && matches!(&self.links[*q], Link::Tcp(t) if t.hung_up()))
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
                .filter_map(|q| match &self.links[q] {
                    Link::Tcp(t) => Some(libc::pollfd {
                        fd: t.fd(),
                        events: libc::POLLRDHUP,
                        revents: 0,
                    }),
                    _ => None,
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

    fn progress_tcp(&mut self) -> Result<bool> {
        let mut progressed = false;
        let mut i = 0;
        while i < self.tcp_active.len() {
            let p = self.tcp_active[i] as usize;
            if let Link::Tcp(t) = &mut self.links[p] {
                progressed |= t.progress().map_err(|e| self.note_lost_tcp_peers(p, e))?;
                let Link::Tcp(t) = &self.links[p] else {
                    unreachable!("link kind does not change")
                };
                if t.idle() {
                    self.tcp_active.swap_remove(i);
                    continue;
                }
            }
            i += 1;
        }
        Ok(progressed)
    }

    fn progress_shm(&mut self) -> Result<bool> {
        let mut progressed = false;
        let mut i = 0;
        while i < self.shm_active.len() {
            let p = self.shm_active[i] as usize;
            if let Link::Shm(l) = &mut self.links[p] {
                progressed |= l.progress(&mut self.shm_reduce_next, &mut self.shm_stage)?;
                if l.idle() {
                    self.shm_active.swap_remove(i);
                    continue;
                }
            }
            i += 1;
        }
        Ok(progressed)
    }

    /// Abandons pending operations after a failure and tells peers why: TCP and shared-memory
    /// links are shut down, this rank's shared segment and the in-process fabric are marked
    /// failed with the reason, so every rank waiting on this one errors out with it.
    pub fn abort(&mut self, why: &Error) {
        log::error!("rank {}: aborting communicator links: {}", self.me, why.msg);
        // A mismatch message names its ranks already; anything else gets this rank's number.
        let reason = if why.kind == ErrorKind::Para {
            why.clone()
        } else {
            Error::new(why.kind, format!("rank {}: {}", self.me, why.msg))
        };
        if let Some(f) = &self.fabric {
            for p in &self.pending {
                if let Pending::MemSend { peer, .. } = p {
                    f.cancel_sends(self.me as usize, *peer as usize);
                }
            }
        }
        self.pending.clear();
        self.tcp_active.clear();
        self.shm_active.clear();
        self.local_sends.clear();
        // The flag goes up before any link is released, so a peer that finishes a single-copy
        // read of this rank's buffer afterwards sees it and discards what it read.
        if let Some(seg) = &self.shm_seg {
            seg.mark_failed(&reason);
        }
        for l in &mut self.links {
            match l {
                Link::Tcp(t) => t.abort(&reason),
                Link::Shm(s) => s.abort(),
                _ => {}
            }
        }
        if let Some(f) = &self.fabric {
            f.fail(&reason);
        }
        self.broken = Some(why.clone());
    }
}
