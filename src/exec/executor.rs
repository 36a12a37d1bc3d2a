//! Runs one rank's schedule over its endpoint.

use std::time::Instant;

use super::identity::{Notice, OpTags};
use super::reduce;
use super::trace::{PeerTraffic, StepTrace};
use crate::algo::{Action, Buf, Schedule, Span};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::transport::{Endpoint, ReduceFn, SendHint};

/// Base addresses of the buffers a schedule refers to.
#[derive(Clone, Debug, Default)]
pub struct Buffers {
    /// Input buffer.
    pub send: usize,
    /// Output buffer.
    pub recv: usize,
    /// Scratch area.
    pub scratch: usize,
    /// Extra buffers (`Buf::Ext(i)`).
    pub ext: Vec<usize>,
    /// What every send of the operation tells its link (see [`SendHint`]).
    pub send_hint: SendHint,
}

impl Buffers {
    fn addr(&self, sp: Span) -> usize {
        let base = match sp.buf {
            Buf::Send => self.send,
            Buf::Recv => self.recv,
            Buf::Scratch => self.scratch,
            Buf::Ext(i) => self.ext[i as usize],
        };
        base + sp.off
    }

    /// The addresses span `sp` covers, end exclusive.
    fn range(&self, sp: Span) -> (usize, usize) {
        let a = self.addr(sp);
        (a, a + sp.len)
    }
}

/// Whether two address ranges (end exclusive) share a byte.
fn meets(x: (usize, usize), y: (usize, usize)) -> bool {
    x.0 < y.1 && y.0 < x.1
}

/// Whether action `a`, run in either order with a copy from `src` to `dst` (address ranges),
/// could change what either leaves behind: it reads `dst`, or writes `src` or `dst`. A
/// reduction's destination counts as written, which covers its being read.
fn disturbs(a: &Action, bufs: &Buffers, src: (usize, usize), dst: (usize, usize)) -> bool {
    let (reads, writes) = match *a {
        Action::Send { src, .. } => (Some(bufs.range(src)), None),
        Action::Recv { dst, .. } | Action::RecvReduce { dst, .. } => (None, Some(bufs.range(dst))),
        Action::Copy { src, dst } | Action::Reduce { dst, src } => {
            (Some(bufs.range(src)), Some(bufs.range(dst)))
        }
    };
    reads.is_some_and(|r| meets(r, dst)) || writes.is_some_and(|w| meets(w, dst) || meets(w, src))
}

/// The reduction of an operation, when it has one.
pub fn reduce_fn(dtype: DataType, op: ReduceOp) -> ReduceFn {
    ReduceFn {
        kernel: reduce::reduce_raw,
        dtype,
        op,
        elem_size: dtype.size(),
        left: 0,
    }
}

/// Executes `sched` step by step, tagging its messages with `tags` and posting the `notices`
/// (see [`super::identity`]) at their steps. The schedule's sends to this rank itself must pair
/// up with its receives from itself ([`check_self_pairs`], checked once when it is built).
///
/// # Safety
/// Every span of the schedule must lie inside the buffer it names, and the buffers must stay
/// valid for the duration of the call.
pub unsafe fn run(
    ep: &mut Endpoint,
    sched: &Schedule,
    bufs: &Buffers,
    red: Option<ReduceFn>,
    deadline: Option<Instant>,
    tags: &mut OpTags,
    notices: &[Notice],
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { run_traced(ep, sched, bufs, red, deadline, tags, notices, None) }
}

/// [`run`], appending a [`StepTrace`] per step (the failing one included) to `log` when given.
/// Without a log nothing is timed or recorded.
///
/// # Safety
/// As for [`run`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn run_traced(
    ep: &mut Endpoint,
    sched: &Schedule,
    bufs: &Buffers,
    red: Option<ReduceFn>,
    deadline: Option<Instant>,
    tags: &mut OpTags,
    notices: &[Notice],
    mut log: Option<&mut Vec<StepTrace>>,
) -> Result<()> {
    let mut notices = notices;
    for (i, step) in sched.steps.iter().enumerate() {
        let now = notices.iter().take_while(|n| n.step as usize == i).count();
        let (these, later) = notices.split_at(now);
        notices = later;
        let start = log.is_some().then(Instant::now);
        // SAFETY: the step's spans lie inside the caller's buffers, valid for the whole call.
        let res = unsafe { run_step(ep, step, bufs, red, deadline, tags, these) };
        if let (Some(log), Some(start)) = (log.as_deref_mut(), start) {
            log.push(StepTrace {
                start,
                end: Instant::now(),
                peers: traffic(ep, step),
            });
        }
        if let Err(e) = res {
            // Posted operations must not outlive the call: peers would read or write buffers
            // the caller is about to reuse.
            if ep.broken().is_none() {
                ep.abort(&e);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// What `step` exchanges with each peer (itself excluded), in first-mention order.
fn traffic(ep: &Endpoint, step: &crate::algo::schedule::Step) -> Vec<PeerTraffic> {
    let mut peers: Vec<PeerTraffic> = Vec::new();
    for a in &step.actions {
        let (peer, sent, received) = match *a {
            Action::Send { peer, src } => (peer, src.len as u64, 0),
            Action::Recv { peer, dst } | Action::RecvReduce { peer, dst } => {
                (peer, 0, dst.len as u64)
            }
            _ => continue,
        };
        if peer == ep.rank() {
            continue;
        }
        match peers.iter_mut().find(|p| p.peer == peer) {
            Some(p) => {
                p.sent += sent;
                p.received += received;
            }
            None => peers.push(PeerTraffic {
                peer,
                sent,
                received,
                link: ep.link_info(peer),
            }),
        }
    }
    peers
}

/// Rejects a schedule whose sends to this rank itself do not pair up with its receives from
/// itself, before anything is posted (so a bad call leaves the communicator usable).
pub fn check_self_pairs(me: u32, sched: &Schedule) -> Result<()> {
    sched
        .steps
        .iter()
        .try_for_each(|step| check_step_self_pairs(me, step))
}

fn check_step_self_pairs(me: u32, step: &crate::algo::schedule::Step) -> Result<()> {
    // Iterators, not vectors: this runs on every step of every call.
    let sends = || {
        step.actions.iter().filter_map(move |a| match a {
            Action::Send { peer, src } if *peer == me => Some(src.len),
            _ => None,
        })
    };
    let recvs = || {
        step.actions.iter().filter_map(move |a| match a {
            Action::Recv { peer, dst } | Action::RecvReduce { peer, dst } if *peer == me => {
                Some(dst.len)
            }
            _ => None,
        })
    };
    if !sends().eq(recvs()) {
        let (sends, recvs): (Vec<usize>, Vec<usize>) = (sends().collect(), recvs().collect());
        return Err(Error::new(
            ErrorKind::Para,
            format!(
                "rank {me}: sends to itself ({} of sizes {sends:?}) do not match its receives from \
                 itself ({} of sizes {recvs:?})",
                sends.len(),
                recvs.len()
            ),
        ));
    }
    Ok(())
}

/// A copy of a step that its reducing receive makes instead (see [`fused_copy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FusedCopy {
    /// Index of the `Copy` left out.
    copy: usize,
    /// Index of the `RecvReduce` that reads the copy's source as its left operand.
    recv: usize,
    /// The source's distance from the receive's destination, bytes ([`ReduceFn::left`]).
    left: isize,
}

/// The copy of `step` that its reducing receive can make instead: a `Copy` into exactly the
/// destination of the step's only `RecvReduce` there, when no other action touches that
/// destination and none writes the copy's source. The receive then computes
/// `dst = src op incoming` as it arrives: the same operands in the same order as copying first
/// and reducing into the copy (so the same bits), with one pass over the destination fewer. A
/// Reduce between two ranks and the direct ReduceScatter's first step have this shape. With
/// several receives reducing into one span it does not apply: which arrives first (and so would
/// need the left operand) is not known in advance.
fn fused_copy(step: &crate::algo::schedule::Step, bufs: &Buffers) -> Option<FusedCopy> {
    let acts = &step.actions;
    if !acts.iter().any(|a| matches!(a, Action::RecvReduce { .. })) {
        return None;
    }
    for (c, a) in acts.iter().enumerate() {
        let Action::Copy { src, dst } = *a else {
            continue;
        };
        let (s, d) = (bufs.range(src), bufs.range(dst));
        if dst.len == 0 || (meets(s, d) && s != d) {
            continue;
        }
        let mut recv = None;
        let mut clash = false;
        for (i, b) in acts.iter().enumerate().filter(|&(i, _)| i != c) {
            match *b {
                Action::RecvReduce { dst: rd, .. } if bufs.range(rd) == d && recv.is_none() => {
                    recv = Some(i);
                }
                _ if disturbs(b, bufs, s, d) => {
                    clash = true;
                    break;
                }
                _ => {}
            }
        }
        if let (Some(recv), false) = (recv, clash) {
            return Some(FusedCopy {
                copy: c,
                recv,
                left: s.0.wrapping_sub(d.0) as isize,
            });
        }
    }
    None
}

/// The copies of `step` that can wait until its transfers are posted, as a bit per action
/// index (the first 64 actions): a `Copy` whose destination no other action reads or writes
/// and whose source none writes. Its bytes are then the same in either order, and posting
/// first lets the peers start reading while this rank copies: a Scatter root's own block, or
/// an AllGather's, no longer holds back what the others wait for.
fn copies_after_posting(step: &crate::algo::schedule::Step, bufs: &Buffers) -> u64 {
    let acts = &step.actions;
    let mut later = 0u64;
    for (c, a) in acts.iter().enumerate().take(64) {
        let Action::Copy { src, dst } = *a else {
            continue;
        };
        let (s, d) = (bufs.range(src), bufs.range(dst));
        let clash = acts
            .iter()
            .enumerate()
            .any(|(i, b)| i != c && disturbs(b, bufs, s, d));
        if !clash && dst.len > 0 {
            later |= 1 << c;
        }
    }
    later
}

/// Runs one step: the local copies and reductions that the transfers may depend on, then
/// every send and receive, then the copies that nothing else of the step touches
/// ([`copies_after_posting`]), then waits.
///
/// # Safety
/// As for [`run`], for this step's spans.
unsafe fn run_step(
    ep: &mut Endpoint,
    step: &crate::algo::schedule::Step,
    bufs: &Buffers,
    red: Option<ReduceFn>,
    deadline: Option<Instant>,
    tags: &mut OpTags,
    notices: &[Notice],
) -> Result<()> {
    let need_red =
        || red.ok_or_else(|| Error::new(ErrorKind::Internal, "reduction step without an operator"));
    let fused = fused_copy(step, bufs);
    let later = copies_after_posting(step, bufs);
    let is_later = |i: usize| i < 64 && later & (1 << i) != 0;
    for (i, a) in step.actions.iter().enumerate() {
        match *a {
            Action::Copy { .. } if fused.is_some_and(|f| f.copy == i) || is_later(i) => {}
            Action::Copy { src, dst } => {
                // SAFETY: both spans lie inside live buffers (the caller's contract).
                unsafe { copy_span(bufs, src, dst) };
            }
            Action::Reduce { dst, src } if src.len > 0 => {
                let f = need_red()?;
                // SAFETY: both spans lie inside live buffers (the caller's contract) and have
                // the same length; schedules never reduce a span into itself.
                unsafe {
                    f.apply(
                        bufs.addr(dst) as *mut u8,
                        bufs.addr(src) as *const u8,
                        src.len,
                    )
                };
            }
            _ => {}
        }
    }
    // Notices are empty: any valid address will do.
    let nothing = std::ptr::NonNull::<u8>::dangling().as_ptr();
    for n in notices {
        if n.send {
            // SAFETY: a zero-length transfer never touches its address.
            unsafe { ep.post_send(n.peer, nothing, 0, tags.notice(n)) }?;
        } else {
            // SAFETY: a zero-length transfer never touches its address.
            unsafe { ep.post_recv(n.peer, nothing, 0, None, tags.notice(n)) }?;
        }
    }
    for a in &step.actions {
        if let Action::Send { peer, src } = *a {
            let tag = tags.to(peer, src.len);
            // SAFETY: the span lies inside a live buffer that stays valid until `wait_all`
            // below (or `abort` on failure) has retired the transfer.
            unsafe {
                ep.post_send_hinted(
                    peer,
                    bufs.addr(src) as *const u8,
                    src.len,
                    tag,
                    bufs.send_hint,
                )
            }?;
        }
    }
    for (i, a) in step.actions.iter().enumerate() {
        let (peer, dst, reduce) = match *a {
            Action::Recv { peer, dst } => (peer, dst, None),
            Action::RecvReduce { peer, dst } => {
                let mut f = need_red()?;
                if let Some(fc) = fused.filter(|f| f.recv == i) {
                    f.left = fc.left;
                }
                (peer, dst, Some(f))
            }
            _ => continue,
        };
        let tag = tags.from(peer, dst.len);
        // SAFETY: the span lies inside a live buffer that stays valid until `wait_all` below
        // (or `abort` on failure) has retired the transfer.
        unsafe { ep.post_recv(peer, bufs.addr(dst) as *mut u8, dst.len, reduce, tag) }?;
    }
    if later != 0 {
        // One pass of progress puts the first bytes (or a single-copy message's address) where
        // the peers find them before this rank turns to its own copies.
        ep.push()?;
        for (i, a) in step.actions.iter().enumerate() {
            if let (Action::Copy { src, dst }, true) = (*a, is_later(i)) {
                // SAFETY: as above; no posted transfer touches these spans.
                unsafe { copy_span(bufs, src, dst) };
            }
        }
    }
    ep.wait_all(deadline, Some(&*tags))
}

/// Copies span `src` to span `dst` (they may overlap; nothing to do when they coincide).
///
/// # Safety
/// Both spans lie inside live buffers.
unsafe fn copy_span(bufs: &Buffers, src: Span, dst: Span) {
    let (s, d) = (bufs.addr(src) as *const u8, bufs.addr(dst) as *mut u8);
    if !std::ptr::eq(s, d) && src.len > 0 {
        // SAFETY: the caller's contract; `copy` allows the spans to overlap.
        unsafe { std::ptr::copy(s, d, src.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::schedule::Step;

    fn bufs(send: usize, recv: usize) -> Buffers {
        Buffers {
            send,
            recv,
            scratch: 1 << 40,
            ..Buffers::default()
        }
    }

    fn sp(buf: Buf, off: usize, len: usize) -> Span {
        Span::new(buf, off, len)
    }

    #[test]
    fn copy_before_the_only_reducing_receive_is_fused() {
        // The two-rank Reduce root: copy the input, reduce the peer's into the copy.
        let all = sp(Buf::Send, 0, 4096);
        let out = sp(Buf::Recv, 0, 4096);
        let step = Step {
            actions: vec![
                Action::Copy { src: all, dst: out },
                Action::RecvReduce { peer: 1, dst: out },
            ],
        };
        let f = fused_copy(&step, &bufs(0x10000, 0x40000)).unwrap();
        assert_eq!((f.copy, f.recv), (0, 1));
        assert_eq!(f.left, 0x10000 - 0x40000);
        // In place (input and output one buffer): the copy is a no-op, the left operand the
        // destination itself.
        assert_eq!(fused_copy(&step, &bufs(0x40000, 0x40000)).unwrap().left, 0);
        // A destination overlapping the source in part is never fused.
        assert_eq!(fused_copy(&step, &bufs(0x40000, 0x40800)), None);
    }

    #[test]
    fn copy_is_kept_when_anything_else_touches_its_spans() {
        let mine = sp(Buf::Send, 0, 1024);
        let out = sp(Buf::Recv, 0, 1024);
        let b = bufs(0x10000, 0x40000);
        let with = |extra: Vec<Action>| {
            let mut actions = vec![
                Action::Copy {
                    src: mine,
                    dst: out,
                },
                Action::RecvReduce { peer: 1, dst: out },
            ];
            actions.extend(extra);
            fused_copy(&Step { actions }, &b)
        };
        // The direct ReduceScatter between two ranks: the other block goes out meanwhile.
        let other = sp(Buf::Send, 1024, 1024);
        assert!(with(vec![Action::Send {
            peer: 1,
            src: other
        }])
        .is_some());
        // A send of the source itself is fine: it is only read.
        assert!(with(vec![Action::Send { peer: 1, src: mine }]).is_some());
        // Two receives reducing into it: which comes first is unknown.
        assert!(with(vec![Action::RecvReduce { peer: 2, dst: out }]).is_none());
        // The destination sent, read by a local reduction, or partly received into.
        assert!(with(vec![Action::Send { peer: 2, src: out }]).is_none());
        let scratch = sp(Buf::Scratch, 0, 1024);
        assert!(with(vec![Action::Reduce {
            dst: scratch,
            src: out
        }])
        .is_none());
        assert!(with(vec![Action::Recv {
            peer: 2,
            dst: sp(Buf::Recv, 512, 16)
        }])
        .is_none());
        // The source overwritten by a receive or a copy of the same step.
        assert!(with(vec![Action::Recv {
            peer: 2,
            dst: sp(Buf::Send, 1000, 16)
        }])
        .is_none());
        assert!(with(vec![Action::Copy {
            src: scratch,
            dst: mine
        }])
        .is_none());
        // No reducing receive: nothing to fuse.
        let plain = Step {
            actions: vec![
                Action::Copy {
                    src: mine,
                    dst: out,
                },
                Action::Recv { peer: 1, dst: out },
            ],
        };
        assert!(fused_copy(&plain, &b).is_none());
    }

    #[test]
    fn copies_that_nothing_else_touches_wait_until_the_transfers_are_posted() {
        let b = bufs(0x10000, 0x40000);
        let later = |actions: Vec<Action>| copies_after_posting(&Step { actions }, &b);
        let (mine, other) = (sp(Buf::Send, 0, 1024), sp(Buf::Send, 1024, 1024));
        let (out, theirs) = (sp(Buf::Recv, 0, 1024), sp(Buf::Recv, 1024, 1024));
        let copy = Action::Copy {
            src: mine,
            dst: out,
        };
        // A Scatter root: its own block while the other goes out of the same buffer.
        let send = Action::Send {
            peer: 1,
            src: other,
        };
        assert_eq!(later(vec![copy, send]), 1);
        // A direct AllGather: the own block sent from the input, the peer's received beside.
        let sent = Action::Send { peer: 1, src: mine };
        let recv = Action::Recv {
            peer: 1,
            dst: theirs,
        };
        assert_eq!(later(vec![sent, copy, recv]), 0b10);
        // A ring AllGather's first step sends the copy's destination: it must be there first.
        assert_eq!(later(vec![copy, Action::Send { peer: 1, src: out }]), 0);
        // A receive into the source or the destination, or a reduction reading it.
        assert_eq!(later(vec![copy, Action::Recv { peer: 1, dst: mine }]), 0);
        let partly = sp(Buf::Recv, 1000, 48);
        assert_eq!(
            later(vec![
                copy,
                Action::Recv {
                    peer: 1,
                    dst: partly
                }
            ]),
            0
        );
        assert_eq!(
            later(vec![copy, Action::RecvReduce { peer: 1, dst: out }]),
            0
        );
        let scratch = sp(Buf::Scratch, 0, 1024);
        let reduce = Action::Reduce {
            dst: scratch,
            src: out,
        };
        assert_eq!(later(vec![copy, reduce]), 0);
        // Chained copies keep their order: neither waits.
        let next = Action::Copy {
            src: out,
            dst: scratch,
        };
        assert_eq!(later(vec![copy, next]), 0);
        // Two copies that share only a source both wait.
        let beside = Action::Copy {
            src: mine,
            dst: scratch,
        };
        assert_eq!(later(vec![copy, beside]), 0b11);
        // Nothing to copy.
        let empty = Action::Copy {
            src: sp(Buf::Send, 0, 0),
            dst: sp(Buf::Recv, 0, 0),
        };
        assert_eq!(later(vec![empty, send]), 0);
    }
}
