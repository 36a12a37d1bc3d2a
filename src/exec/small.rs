//! The small-message path: collectives of at most [`MAX_BYTES`] per rank among ranks of one host
//! run in one exchange, without a schedule.
//!
//! A small operation is bound by the latency of a hop, not by bandwidth, so every rank sends its
//! whole input straight to the ranks that need it (AllReduce, AllGather: to everyone; Reduce:
//! to the root; ReduceScatter, AlltoAll, Scatter: each block to its owner) and posts every
//! receive at once; the shared-memory link carries such a message inline in one cache line with
//! its flag and tag. What is precomputed per communicator and shape ([`Small`]) leaves the call
//! nothing to build, look up or allocate: it sends its messages, waits once and finishes
//! locally. Point-to-point batches of small transfers take the path too, one message per item
//! as on the generic path.
//!
//! Both directions bypass the endpoint's queues where the link allows: a message goes straight
//! into the link when nothing is queued to that peer and the link has room
//! ([`Endpoint::send_now`]), and one that has arrived is taken straight into its destination
//! ([`Endpoint::recv_now`]); only what cannot is posted and left to one wait.
//!
//! Results are bit-identical on every rank: a reducing rank gathers every input (ReduceScatter:
//! every rank's copy of its own block) and combines them in rank order, `((x0 ∘ x1) ∘ x2) ∘ …`,
//! whichever arrived first.
//!
//! Identity is kept as on the generic path (see [`super::identity`]): every message carries the
//! call's tag (kind, count, type, operator, root, sequence) and every receive checks it before
//! delivering a byte, so a rank that receives from a disagreeing peer fails with `HCCL_E_PARA`.
//! AllReduce, AllGather, ReduceScatter, AlltoAll and Barrier exchange data both ways between
//! every pair, so every rank hears of a disagreeing one within the call. Point-to-point
//! transfers keep their own rules (see [`super::identity`]): numbered per pair, tagged with
//! their length, no notices.
//!
//! # Eager rooted operations
//! A rank that only sends to a peer (a Broadcast or Scatter root, a Reduce leaf) completes as
//! soon as its messages sit in the link, when the link to that peer is eager ([`eager_link`]:
//! shared memory, whose ring of slots lets a sender run ahead by up to its depth, and memory
//! links between threads, which copy small messages at posting); it waits only when the ring
//! is full. Its receiver checks the tag, and a receiver that disagrees fails and aborts the
//! communicator, raising a flag that the sender reads at the start of its next call. Before it
//! posts anything, every call also looks at what its eager peers left unclaimed: a message of
//! an earlier call (or of this one, from a peer that this call never receives from) means the
//! two ranks disagreed — for instance two ranks that each called a Broadcast as its root — and
//! fails the call. So a mismatch is reported by the rank that receives the disagreeing message
//! in that call, and by every other rank at its next call at the latest (once the disagreeing
//! rank has seen it); no rank ever completes with wrong data. Over other links (TCP) the pair
//! exchanges a notice each call instead (see [`super::identity`]): the sender waits for its
//! receiver's notice, as on the generic path.

use super::identity::{Inbound, Notice, OpTags};
use crate::algo::{Coll, P2pItem};
use crate::base::error::Result;
use crate::base::short_copy::copy_short;
use crate::transport::tag::Tag;
use crate::transport::{Endpoint, Expectation, LinkInfo, ReduceFn};
use std::time::Duration;

/// Largest input per rank (bytes) that takes the small path.
pub const MAX_BYTES: usize = 4096;
/// Most ranks that take it: each rank posts a message to (and from) every peer at once.
pub const MAX_RANKS: u32 = 8;

/// Name of the path in traces and logs.
pub const ALGO: &str = "small";

/// What a small operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    AllReduce,
    Broadcast {
        root: u32,
    },
    Reduce {
        root: u32,
    },
    Scatter {
        root: u32,
    },
    Barrier,
    AllGather,
    ReduceScatter,
    /// Blocks of one size to and from every rank, at [`Small::blocks`].
    AlltoAll,
    /// The items of [`Small::items`], in order.
    P2p,
}

/// One shape of small operation on one rank, precomputed when its plan is made.
#[derive(Clone, Debug)]
pub struct Small {
    kind: Kind,
    me: u32,
    n: u32,
    /// Bytes per rank: the input of AllReduce and Reduce, the buffer of Broadcast, each rank's
    /// block of Scatter, AllGather, ReduceScatter and AlltoAll (the largest item of P2p).
    bytes: usize,
    /// AlltoAll: per rank, the byte offsets of its block in the send and receive buffers.
    blocks: Vec<(usize, usize)>,
    /// P2p: the transfers, each with its own buffer (`ext[i]` of the call).
    items: Vec<P2pItem>,
    /// What this rank receives from each peer (for examining unclaimed messages).
    inbound: Vec<Inbound>,
    /// Peers over eager links (bit `p`): no notices flow between them and this rank.
    eager: u32,
    /// Peers this rank receives nothing from in a call and reaches over eager links (bit
    /// `p`): what they left unclaimed is examined before each call.
    quiet: u32,
}

/// Whether a pair over `link` completes one-way small messages eagerly (see the module
/// documentation): links whose sender finds its receiver's abort with one load at its next
/// call and whose small sends complete at posting (shared memory, memory between threads).
/// Both ends of a pair see the same kind of link, so both decide alike.
pub fn eager_link(link: LinkInfo) -> bool {
    matches!(link.name, "shm" | "memory")
}

impl Small {
    /// The small path of `coll` on elements of `elem` bytes for rank `me` of `n`, when it
    /// applies. The caller must ensure every rank sits on one host and no algorithm is forced:
    /// every rank must decide alike, so only what every rank agrees on may enter.
    pub fn of(coll: &Coll, elem: usize, me: u32, n: u32) -> Option<Small> {
        if !(2..=MAX_RANKS).contains(&n) || me >= n {
            return None;
        }
        let mut blocks = Vec::new();
        let mut items = Vec::new();
        let (kind, count) = match coll {
            Coll::AllReduce { count } => (Kind::AllReduce, *count),
            Coll::Broadcast { count, root } => (Kind::Broadcast { root: *root }, *count),
            Coll::Reduce { count, root } => (Kind::Reduce { root: *root }, *count),
            Coll::Scatter { count, root } => (Kind::Scatter { root: *root }, *count),
            Coll::Barrier => (Kind::Barrier, 0),
            Coll::AllGather { count } => (Kind::AllGather, *count),
            Coll::ReduceScatter { count } => (Kind::ReduceScatter, *count),
            Coll::AlltoAllV {
                send_counts,
                send_displs,
                recv_counts,
                recv_displs,
            } => {
                // One block size everywhere (AlltoAll): every rank that agrees on the call sees
                // the same counts and so decides alike. The path's messages (one per pair and
                // direction, tagged per pair) are also those of the generic schedules.
                let c = *send_counts.first()?;
                let lists = [send_counts, send_displs, recv_counts, recv_displs];
                if lists.iter().any(|l| l.len() != n as usize)
                    || send_counts.iter().chain(recv_counts).any(|&x| x != c)
                {
                    return None;
                }
                for (sd, rd) in send_displs.iter().zip(recv_displs) {
                    blocks.push((sd.checked_mul(elem)?, rd.checked_mul(elem)?));
                }
                (Kind::AlltoAll, c)
            }
            Coll::P2p { items: list } => {
                // Every transfer is one tagged message, as on the generic path, so a peer that
                // runs its side there pairs with this one all the same.
                if list.is_empty()
                    || list.len() > 2 * MAX_RANKS as usize
                    || list.iter().any(|it| it.peer == me || it.peer >= n)
                {
                    return None;
                }
                items = list.clone();
                let largest = list.iter().map(|it| it.bytes).max().unwrap_or(0);
                if largest > MAX_BYTES {
                    return None;
                }
                (Kind::P2p, largest)
            }
            _ => return None,
        };
        let bytes = if kind == Kind::P2p {
            count
        } else {
            count.checked_mul(elem)?
        };
        // Empty data operations keep their generic form (a barrier of tagged messages).
        let empty_ok = matches!(kind, Kind::Barrier | Kind::P2p);
        if (bytes == 0 && !empty_ok) || bytes > MAX_BYTES {
            return None;
        }
        if let Kind::Broadcast { root } | Kind::Reduce { root } | Kind::Scatter { root } = kind {
            if root >= n {
                return None;
            }
        }
        let mut s = Small {
            kind,
            me,
            n,
            bytes,
            blocks,
            items,
            inbound: Vec::new(),
            eager: 0,
            quiet: 0,
        };
        s.set_eager(|_| false);
        Some(s)
    }

    /// This plan with the pairs for which `eager(p)` holds completing eagerly (no notices; see
    /// the module documentation). Every rank must decide alike for each pair.
    pub fn eager_over(mut self, eager: impl Fn(u32) -> bool) -> Small {
        self.set_eager(eager);
        self
    }

    fn set_eager(&mut self, eager: impl Fn(u32) -> bool) {
        // Point-to-point transfers have no notices whatever the link (see `super::identity`).
        let eager = |p| self.kind != Kind::P2p && eager(p);
        self.eager = self
            .peers()
            .filter(|&p| eager(p))
            .fold(0, |m, p| m | (1 << p));
        self.quiet = self
            .peers()
            .filter(|&p| self.is_eager(p) && self.receives_from(p).is_none_or(|(d, _)| !d))
            .fold(0, |m, p| m | (1 << p));
        self.inbound = self
            .peers()
            .filter_map(|p| {
                let (data, notice) = self.receives_from(p)?;
                Some(Inbound {
                    peer: p,
                    data,
                    notice,
                })
            })
            .collect();
    }

    fn is_eager(&self, peer: u32) -> bool {
        self.eager & (1 << peer) != 0
    }

    fn peers(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.n).filter(move |&p| p != self.me)
    }

    fn root(&self) -> Option<u32> {
        match self.kind {
            Kind::Broadcast { root } | Kind::Reduce { root } | Kind::Scatter { root } => Some(root),
            _ => None,
        }
    }

    /// (data, notice) this rank receives from `peer`, if anything. Eager pairs exchange no
    /// notices.
    fn receives_from(&self, peer: u32) -> Option<(bool, bool)> {
        let me_root = self.root() == Some(self.me);
        let notice = !self.is_eager(peer);
        match self.kind {
            Kind::AllReduce
            | Kind::Barrier
            | Kind::AllGather
            | Kind::ReduceScatter
            | Kind::AlltoAll => Some((true, false)),
            Kind::P2p => self
                .items
                .iter()
                .any(|it| !it.send && it.peer == peer)
                .then_some((true, false)),
            Kind::Broadcast { root } | Kind::Scatter { root } => {
                if me_root {
                    notice.then_some((false, true))
                } else {
                    (peer == root).then_some((true, false))
                }
            }
            Kind::Reduce { root } => {
                if me_root {
                    Some((true, false))
                } else {
                    (peer == root && notice).then_some((false, true))
                }
            }
        }
    }

    /// What this rank receives from each peer, sorted by peer.
    pub fn inbound(&self) -> &[Inbound] {
        &self.inbound
    }

    /// Scratch bytes a call needs.
    pub fn scratch_bytes(&self) -> usize {
        match self.kind {
            Kind::AllReduce | Kind::ReduceScatter => self.n as usize * self.bytes,
            Kind::Reduce { root } if root == self.me => self.n as usize * self.bytes,
            _ => 0,
        }
    }

    /// Payload bytes (sent, received) between this rank and `peer` per call.
    pub fn traffic_with(&self, peer: u32) -> (u64, u64) {
        let b = self.bytes as u64;
        let root = self.root();
        match self.kind {
            _ if peer == self.me || peer >= self.n => (0, 0),
            Kind::AllReduce
            | Kind::Barrier
            | Kind::AllGather
            | Kind::ReduceScatter
            | Kind::AlltoAll => (b, b),
            Kind::P2p => {
                self.items
                    .iter()
                    .filter(|it| it.peer == peer)
                    .fold((0, 0), |(s, r), it| {
                        let len = it.bytes as u64;
                        if it.send {
                            (s + len, r)
                        } else {
                            (s, r + len)
                        }
                    })
            }
            Kind::Broadcast { .. } | Kind::Scatter { .. } if root == Some(self.me) => (b, 0),
            Kind::Broadcast { .. } | Kind::Scatter { .. } if root == Some(peer) => (0, b),
            Kind::Reduce { .. } if root == Some(self.me) => (0, b),
            Kind::Reduce { .. } if root == Some(peer) => (b, 0),
            _ => (0, 0),
        }
    }

    /// The peers this rank exchanges anything with (data or notices), in rank order.
    pub fn partners(&self) -> impl Iterator<Item = u32> + '_ {
        let root = self.root();
        self.peers().filter(move |&p| {
            if self.kind == Kind::P2p {
                return self.items.iter().any(|it| it.peer == p);
            }
            root.is_none() || root == Some(self.me) || root == Some(p)
        })
    }

    /// Payload bytes (sent, received) by this rank per call.
    pub fn traffic(&self) -> (u64, u64) {
        let b = self.bytes as u64;
        let others = u64::from(self.n - 1);
        let me_root = self.root() == Some(self.me);
        match self.kind {
            Kind::AllReduce | Kind::AllGather | Kind::ReduceScatter | Kind::AlltoAll => {
                (others * b, others * b)
            }
            Kind::Barrier => (0, 0),
            Kind::P2p => self
                .peers()
                .map(|p| self.traffic_with(p))
                .fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1)),
            Kind::Broadcast { .. } | Kind::Scatter { .. } if me_root => (others * b, 0),
            Kind::Broadcast { .. } | Kind::Scatter { .. } => (0, b),
            Kind::Reduce { .. } if me_root => (0, others * b),
            Kind::Reduce { .. } => (b, 0),
        }
    }
}

/// The buffers of one small operation.
#[derive(Clone, Copy, Debug)]
pub struct Bufs<'a> {
    /// The send buffer (unused by a Scatter leaf, a Barrier and P2p).
    pub send: usize,
    /// The receive buffer (unused by a Reduce leaf, a Barrier and P2p).
    pub recv: usize,
    /// Scratch of at least [`Small::scratch_bytes`].
    pub scratch: usize,
    /// P2p: the buffer of each item.
    pub ext: &'a [usize],
}

/// Runs one small operation: sends every message, waits once, finishes locally. The clock is
/// read only when the call has to wait longer than a few hundred polls: its deadline,
/// `timeout` from then, starts there (see [`Endpoint::wait_all_for`]).
///
/// # Safety
/// The buffers must be the operation's as validated for its counts (`recv` of a Reduce leaf and
/// `send` of a Scatter leaf may be unused), `scratch` valid for writes of
/// [`Small::scratch_bytes`], all of them valid for the duration of the call.
pub unsafe fn run(
    ep: &mut Endpoint,
    s: &Small,
    bufs: &Bufs<'_>,
    red: Option<ReduceFn>,
    timeout: Option<Duration>,
    tags: &mut OpTags,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    let r = unsafe { exchange(ep, s, bufs, red, timeout, tags) };
    if let Err(e) = &r {
        // Posted transfers must not outlive the call: peers would touch buffers the caller is
        // about to reuse.
        if ep.broken().is_none() {
            ep.abort(e);
        }
    }
    r
}

/// [`run`] without the abort on failure.
///
/// # Safety
/// As for [`run`].
unsafe fn exchange(
    ep: &mut Endpoint,
    s: &Small,
    bufs: &Bufs<'_>,
    red: Option<ReduceFn>,
    timeout: Option<Duration>,
    tags: &mut OpTags,
) -> Result<()> {
    let (send, recv, scratch) = (bufs.send, bufs.recv, bufs.scratch);
    let b = s.bytes;
    let me = s.me;
    // Notices are empty: any valid address will do.
    let nothing = std::ptr::NonNull::<u8>::dangling().as_ptr();
    let notice = |peer: u32, send: bool| Notice {
        step: 0,
        peer,
        send,
        bytes: b,
    };
    let slot = |r: u32| (scratch + r as usize * b) as *mut u8;
    if s.quiet != 0 {
        check_quiet(ep, s, tags)?;
    }
    match s.kind {
        Kind::AllReduce | Kind::Barrier | Kind::ReduceScatter => {
            let rs = s.kind == Kind::ReduceScatter;
            // A Barrier has no buffers (their addresses may be null): its messages are empty.
            let src = |p: u32| match b {
                0 => nothing as *const u8,
                _ if rs => (send + p as usize * b) as *const u8,
                _ => send as *const u8,
            };
            let dst = |p: u32| if b == 0 { nothing } else { slot(p) };
            // SAFETY: `src(p)` holds `b` bytes (the caller's contract) and stays valid and
            // unmodified until `finish` (or its abort) retires the transfer; slot `p` of the
            // scratch holds `b` bytes and nobody else touches it until `finish` returns.
            let posted = unsafe { swap_all(ep, s, tags, b, src, dst) }?;
            if b > 0 {
                // SAFETY: the own slot is not posted; `send` may alias `recv`, so it is copied
                // before `recv` is written.
                unsafe { copy_short(src(me), slot(me), b) };
            }
            finish(ep, posted, timeout, tags)?;
            if s.kind != Kind::Barrier {
                // SAFETY: every slot is filled and `recv` holds `b` bytes.
                unsafe { combine(s, red, recv as *mut u8, slot)? };
            }
        }
        Kind::AllGather | Kind::AlltoAll => {
            let a2a = s.kind == Kind::AlltoAll;
            let src = |p: u32| match a2a {
                true => (send + s.blocks[p as usize].0) as *const u8,
                false => send as *const u8,
            };
            let dst = |p: u32| match a2a {
                true => (recv + s.blocks[p as usize].1) as *mut u8,
                false => (recv + p as usize * b) as *mut u8,
            };
            // SAFETY: as for AllReduce: every block of `send` and `recv` holds `b` bytes, and
            // nobody else touches the received ones until `finish` returns.
            let posted = unsafe { swap_all(ep, s, tags, b, src, dst) }?;
            finish(ep, posted, timeout, tags)?;
            // SAFETY: the own blocks hold `b` bytes each (the caller's contract).
            unsafe { copy_own(src(me), dst(me), b) };
        }
        Kind::P2p => {
            if bufs.ext.len() != s.items.len() {
                return Err(crate::base::error::Error::new(
                    crate::base::error::ErrorKind::Internal,
                    "small point-to-point call without a buffer per item",
                ));
            }
            let mut posted = false;
            for (it, &buf) in s.items.iter().zip(bufs.ext) {
                let len = it.bytes;
                let at = if len == 0 { nothing } else { buf as *mut u8 };
                if it.send {
                    let tag = tags.to(it.peer, len);
                    // SAFETY: the item's buffer holds `len` bytes (the caller's contract).
                    unsafe { send_to(ep, it.peer, at, len, tag, false) }?;
                } else {
                    let tag = tags.from(it.peer, len);
                    // SAFETY: the item's buffer holds `len` bytes, untouched by others until
                    // `wait_all` returns.
                    posted |= unsafe { receive(ep, it.peer, at, len, tag) }?;
                }
            }
            finish(ep, posted, timeout, tags)?;
        }
        Kind::Reduce { root } if root == me => {
            let mut posted = false;
            for p in s.peers() {
                if !s.is_eager(p) {
                    // SAFETY: a zero-length transfer never touches its address.
                    unsafe { ep.post_send(p, nothing, 0, tags.notice(&notice(p, true))) }?;
                    posted = true;
                }
                let tag = tags.from(p, b);
                // SAFETY: as for AllReduce.
                posted |= unsafe { receive(ep, p, slot(p), b, tag) }?;
            }
            // SAFETY: as for AllReduce.
            unsafe { copy_short(send as *const u8, slot(me), b) };
            finish(ep, posted, timeout, tags)?;
            // SAFETY: as for AllReduce.
            unsafe { combine(s, red, recv as *mut u8, slot)? };
        }
        Kind::Reduce { root } => {
            let mut posted = false;
            if !s.is_eager(root) {
                // SAFETY: a zero-length transfer never touches its address.
                unsafe { ep.post_recv(root, nothing, 0, None, tags.notice(&notice(root, false))) }?;
                posted = true;
            }
            let tag = tags.to(root, b);
            // SAFETY: `send` holds `b` bytes, valid until `wait_all` retires the transfer.
            unsafe { send_to(ep, root, send as *const u8, b, tag, true) }?;
            finish(ep, posted, timeout, tags)?;
        }
        Kind::Broadcast { root } | Kind::Scatter { root } if root == me => {
            let scatter = matches!(s.kind, Kind::Scatter { .. });
            let mut posted = false;
            for p in s.peers() {
                if !s.is_eager(p) {
                    // SAFETY: a zero-length transfer never touches its address.
                    unsafe { ep.post_recv(p, nothing, 0, None, tags.notice(&notice(p, false))) }?;
                    posted = true;
                }
                let src = if scatter { send + p as usize * b } else { send };
                let tag = tags.to(p, b);
                // SAFETY: the root's buffer holds the block (Scatter: `n` blocks of `b` bytes),
                // valid and unmodified until `wait_all` retires the transfer.
                unsafe { send_to(ep, p, src as *const u8, b, tag, true) }?;
            }
            if scatter {
                // SAFETY: the root's own block and `recv` hold `b` bytes each.
                unsafe { copy_own((send + me as usize * b) as *const u8, recv as *mut u8, b) };
            }
            finish(ep, posted, timeout, tags)?;
        }
        Kind::Broadcast { root } | Kind::Scatter { root } => {
            if !s.is_eager(root) {
                // SAFETY: a zero-length transfer never touches its address.
                unsafe { ep.post_send(root, nothing, 0, tags.notice(&notice(root, true))) }?;
            }
            let tag = tags.from(root, b);
            // SAFETY: `recv` holds `b` bytes and nobody else touches it until `wait_all`
            // returns.
            let posted = unsafe { receive(ep, root, recv as *mut u8, b, tag) }?;
            finish(ep, posted, timeout, tags)?;
        }
    }
    Ok(())
}

/// Sends `b` bytes at `src(p)` to every peer `p`, moves what had to be queued, then receives
/// `b` bytes from every peer `p` into `dst(p)`: the one exchange of the operations that swap
/// data with every peer. Returns whether it posted a receive (see [`receive`]).
///
/// # Safety
/// `src(p)` must be valid for reads of `b` bytes and stay unmodified until [`finish`] returns;
/// `dst(p)` valid for writes of `b` bytes and untouched by anyone else until then.
unsafe fn swap_all(
    ep: &mut Endpoint,
    s: &Small,
    tags: &mut OpTags,
    b: usize,
    src: impl Fn(u32) -> *const u8,
    dst: impl Fn(u32) -> *mut u8,
) -> Result<bool> {
    for p in s.peers() {
        let tag = tags.to(p, b);
        // SAFETY: forwarded from the caller.
        unsafe { send_to(ep, p, src(p), b, tag, false) }?;
    }
    // The inputs leave before the receives are posted: that is what the peers wait for.
    if ep.pending() {
        ep.push()?;
    }
    let mut posted = false;
    for p in s.peers() {
        let tag = tags.from(p, b);
        // SAFETY: forwarded from the caller.
        posted |= unsafe { receive(ep, p, dst(p), b, tag) }?;
    }
    Ok(posted)
}

/// Sends `len` bytes at `src` tagged `tag` to `peer`: straight into the link when nothing is
/// queued to the peer and the link has room (see [`Endpoint::send_now`]; when the peer sends
/// this rank no data in the operation, `one_way`, [`Endpoint::send_one_way`]), else by posting
/// the send, which [`finish`] completes.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes and stay unmodified until [`finish`] returns.
unsafe fn send_to(
    ep: &mut Endpoint,
    peer: u32,
    src: *const u8,
    len: usize,
    tag: Tag,
    one_way: bool,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let sent = unsafe {
        match one_way {
            true => ep.send_one_way(peer, src, len, &tag),
            false => ep.send_now(peer, src, len, &tag),
        }
    };
    if sent {
        return Ok(());
    }
    // SAFETY: forwarded from the caller.
    unsafe { ep.post_send(peer, src, len, tag) }
}

/// Receives `len` bytes tagged `tag` from `peer` into `dst`: straight from the link when the
/// message is there and nothing is queued on it (see [`Endpoint::recv_now`]), else by posting
/// the receive. Returns whether it posted one ([`finish`] then waits for it); a message that
/// disagrees is always left to the posted receive, which reports it as on the generic path.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes and stay untouched by anyone else until
/// [`finish`] returns.
unsafe fn receive(
    ep: &mut Endpoint,
    peer: u32,
    dst: *mut u8,
    len: usize,
    tag: Tag,
) -> Result<bool> {
    // SAFETY: forwarded from the caller.
    if unsafe { ep.recv_now(peer, dst, len, &tag) } {
        return Ok(false);
    }
    // SAFETY: forwarded from the caller.
    unsafe { ep.post_recv(peer, dst, len, None, tag) }?;
    Ok(true)
}

/// Completes what the call posted: waits when it posted anything, failing `timeout` after the
/// wait starts to spin. When every message was taken straight from its link and every send has
/// left, nothing is pending and the wait (with its look at the bell that senders ring) is
/// skipped.
fn finish(ep: &mut Endpoint, posted: bool, timeout: Option<Duration>, tags: &OpTags) -> Result<()> {
    if posted || ep.pending() {
        ep.wait_all_for(timeout, Some(tags as &dyn Expectation))?;
    }
    Ok(())
}

/// Copies this rank's own block of `b` bytes from `src` to `dst`, which may be the same bytes
/// (in place) or overlap: apart, a short block moves with word loads and stores instead of a
/// `memmove` call, which costs about as much as the rest of a rooted call's sending.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `b` bytes.
#[inline(always)]
unsafe fn copy_own(src: *const u8, dst: *mut u8, b: usize) {
    let (s, d) = (src as usize, dst as usize);
    // SAFETY: forwarded from the caller; `copy_short` only where the two do not overlap.
    unsafe {
        if s + b <= d || d + b <= s {
            copy_short(src, dst, b)
        } else {
            std::ptr::copy(src, dst, b)
        }
    }
}

/// Fails when a quiet peer (see [`Small::quiet`]) has aborted, or left a message that this call
/// will not take: one of an earlier call (whose receiver this rank should have been), or of
/// this call from a peer it never receives from. Either means the two disagreed.
fn check_quiet(ep: &Endpoint, s: &Small, tags: &OpTags) -> Result<()> {
    ep.check_failures()?;
    for p in s.peers().filter(|p| s.quiet & (1 << p) != 0) {
        ep.check_peer(p)?;
        if let Some(t) = ep.stray_tag(p) {
            tags.check_stray(p, &t)?;
        }
    }
    Ok(())
}

/// Writes `slot(0) ∘ slot(1) ∘ … ∘ slot(n-1)`, combined in rank order, to `out`.
///
/// # Safety
/// Every slot and `out` must hold `s.bytes` bytes; `out` overlaps no slot.
#[inline(always)]
unsafe fn combine(
    s: &Small,
    red: Option<ReduceFn>,
    out: *mut u8,
    slot: impl Fn(u32) -> *mut u8,
) -> Result<()> {
    let f = red.ok_or_else(|| {
        crate::base::error::Error::new(
            crate::base::error::ErrorKind::Internal,
            "small reduction without an operator",
        )
    })?;
    // SAFETY: forwarded from the caller.
    unsafe {
        copy_short(slot(0), out, s.bytes);
        for r in 1..s.n {
            f.apply(out, slot(r), s.bytes);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_to_small_operations_among_few_ranks_only() {
        let ar = |count| Coll::AllReduce { count };
        assert!(Small::of(&ar(2), 4, 0, 2).is_some());
        assert!(Small::of(&ar(1024), 4, 1, 8).is_some());
        assert!(Small::of(&ar(1025), 4, 0, 2).is_none());
        assert!(Small::of(&ar(0), 4, 0, 2).is_none());
        assert!(Small::of(&ar(2), 4, 0, 1).is_none());
        assert!(Small::of(&ar(2), 4, 0, MAX_RANKS + 1).is_none());
        assert!(Small::of(&Coll::Barrier, 0, 0, 2).is_some());
        let bc = Coll::Broadcast { count: 4, root: 2 };
        assert!(Small::of(&bc, 4, 0, 2).is_none());
        assert!(Small::of(&Coll::AllGather { count: 2 }, 4, 0, 2).is_some());
        assert!(Small::of(&Coll::ReduceScatter { count: 1025 }, 4, 0, 2).is_none());
        assert!(Small::of(
            &Coll::AllGatherV {
                counts: vec![1, 1],
                displs: vec![0, 1]
            },
            4,
            0,
            2
        )
        .is_none());
        // AlltoAll: one block size everywhere.
        assert!(Small::of(&a2a(&[3, 3], &[3, 3]), 4, 0, 2).is_some());
        assert!(Small::of(&a2a(&[3, 2], &[3, 3]), 4, 0, 2).is_none());
        assert!(Small::of(&a2a(&[3, 3], &[3, 2]), 4, 0, 2).is_none());
        assert!(Small::of(&a2a(&[0, 0], &[0, 0]), 4, 0, 2).is_none());
        assert!(Small::of(&a2a(&[3, 3, 3], &[3, 3, 3]), 4, 0, 2).is_none());
        // Point to point: small transfers with other ranks only.
        let p2p = |items: Vec<P2pItem>| Coll::P2p { items };
        let it = |send, peer, bytes| P2pItem { send, peer, bytes };
        assert!(Small::of(&p2p(vec![it(true, 1, 8), it(false, 1, 0)]), 1, 0, 2).is_some());
        assert!(Small::of(&p2p(vec![it(true, 0, 8)]), 1, 0, 2).is_none());
        assert!(Small::of(&p2p(vec![it(true, 1, MAX_BYTES + 1)]), 1, 0, 2).is_none());
        assert!(Small::of(&p2p(vec![]), 1, 0, 2).is_none());
    }

    /// A uniform AlltoAll of `send` and `recv` counts, blocks packed in rank order.
    fn a2a(send: &[usize], recv: &[usize]) -> Coll {
        let displs = |c: &[usize]| {
            c.iter()
                .scan(0, |at, &x| Some(std::mem::replace(at, *at + x)))
                .collect()
        };
        Coll::AlltoAllV {
            send_counts: send.to_vec(),
            send_displs: displs(send),
            recv_counts: recv.to_vec(),
            recv_displs: displs(recv),
        }
    }

    #[test]
    fn per_peer_traffic_adds_up_and_names_every_partner() {
        let colls = [
            Coll::AllReduce { count: 3 },
            Coll::Barrier,
            Coll::Broadcast { count: 3, root: 1 },
            Coll::Reduce { count: 3, root: 2 },
            Coll::Scatter { count: 3, root: 0 },
            Coll::AllGather { count: 3 },
            Coll::ReduceScatter { count: 3 },
            a2a(&[3; 4], &[3; 4]),
        ];
        for coll in &colls {
            for me in 0..4 {
                let s = Small::of(coll, 4, me, 4).unwrap();
                let partners: Vec<u32> = s.partners().collect();
                let heard: Vec<u32> = s.inbound().iter().map(|i| i.peer).collect();
                assert_eq!(partners, heard, "{coll:?} rank {me}");
                let (sent, recv) = partners
                    .iter()
                    .map(|&p| s.traffic_with(p))
                    .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
                assert_eq!((sent, recv), s.traffic(), "{coll:?} rank {me}");
                assert_eq!(s.traffic_with(me), (0, 0));
            }
        }
    }

    #[test]
    fn every_pair_that_talks_hears_from_each_other() {
        // Whatever one side receives from the other, the other receives something back, so a
        // disagreeing peer is always heard by a rank it exchanges with.
        let colls = [
            Coll::AllReduce { count: 2 },
            Coll::Barrier,
            Coll::Broadcast { count: 2, root: 1 },
            Coll::Reduce { count: 2, root: 2 },
            Coll::Scatter { count: 2, root: 0 },
            Coll::AllGather { count: 2 },
            Coll::ReduceScatter { count: 2 },
            a2a(&[2; 4], &[2; 4]),
        ];
        for coll in &colls {
            let n = 4;
            let plans: Vec<Small> = (0..n).map(|r| Small::of(coll, 4, r, n).unwrap()).collect();
            for a in 0..n {
                for b in (0..n).filter(|&b| b != a) {
                    let ab = plans[a as usize].receives_from(b).is_some();
                    let ba = plans[b as usize].receives_from(a).is_some();
                    assert_eq!(ab, ba, "{coll:?}: ranks {a} and {b}");
                    let ta = plans[a as usize].traffic();
                    assert!(ta.0 <= 3 * 8 && ta.1 <= 3 * 8);
                }
            }
        }
    }

    #[test]
    fn point_to_point_traffic_follows_the_items() {
        let it = |send, peer, bytes| P2pItem { send, peer, bytes };
        let items = vec![
            it(true, 2, 8),
            it(false, 1, 16),
            it(true, 1, 4),
            it(false, 2, 0),
        ];
        let s = Small::of(&Coll::P2p { items }, 1, 0, 4).unwrap();
        assert_eq!(s.partners().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(s.traffic_with(1), (4, 16));
        assert_eq!(s.traffic_with(2), (8, 0));
        assert_eq!(s.traffic_with(3), (0, 0));
        assert_eq!(s.traffic(), (12, 16));
        let heard: Vec<u32> = s.inbound().iter().map(|i| i.peer).collect();
        assert_eq!(heard, vec![1, 2]);
        // No notices and nothing examined ahead of a call, whatever the links.
        let s = s.eager_over(|_| true);
        assert_eq!((s.eager, s.quiet), (0, 0));
    }

    #[test]
    fn own_block_copies_apart_in_place_and_overlapping() {
        let src: Vec<u8> = (1..=48).collect();
        for b in [1usize, 4, 7, 8, 13, 24, 25, 40] {
            let mut dst = [0u8; 48];
            // SAFETY: both buffers hold at least `b` bytes and do not overlap.
            unsafe { copy_own(src.as_ptr(), dst.as_mut_ptr(), b) };
            assert_eq!(&dst[..b], &src[..b], "apart, {b} bytes");
            assert!(
                dst[b..].iter().all(|&x| x == 0),
                "apart, {b} bytes: past the end"
            );
            for shift in [0usize, 1, 3] {
                // In place (shift 0) and overlapping either way: the block as it was before.
                let mut buf: Vec<u8> = (1..=48).collect();
                let p = buf.as_mut_ptr();
                // SAFETY: `shift + b` stays inside the 48-byte buffer.
                unsafe { copy_own(p.add(shift), p, b) };
                assert_eq!(&buf[..b], &src[shift..shift + b], "down {shift}, {b} bytes");
                let mut buf: Vec<u8> = (1..=48).collect();
                let p = buf.as_mut_ptr();
                // SAFETY: as above.
                unsafe { copy_own(p, p.add(shift), b) };
                assert_eq!(&buf[shift..shift + b], &src[..b], "up {shift}, {b} bytes");
            }
        }
    }
}
