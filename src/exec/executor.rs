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
}

/// The reduction of an operation, when it has one.
pub fn reduce_fn(dtype: DataType, op: ReduceOp) -> ReduceFn {
    ReduceFn {
        kernel: reduce::reduce_raw,
        dtype,
        op,
        elem_size: dtype.size(),
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

/// Runs one step: local copies and reductions, then every send and receive, then waits.
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
    for a in &step.actions {
        match *a {
            Action::Copy { src, dst } => {
                let (s, d) = (bufs.addr(src) as *const u8, bufs.addr(dst) as *mut u8);
                if !std::ptr::eq(s, d) && src.len > 0 {
                    // SAFETY: both spans lie inside live buffers (the caller's contract);
                    // `copy` allows them to overlap.
                    unsafe { std::ptr::copy(s, d, src.len) };
                }
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
    for a in &step.actions {
        let (peer, dst, reduce) = match *a {
            Action::Recv { peer, dst } => (peer, dst, None),
            Action::RecvReduce { peer, dst } => (peer, dst, Some(need_red()?)),
            _ => continue,
        };
        let tag = tags.from(peer, dst.len);
        // SAFETY: the span lies inside a live buffer that stays valid until `wait_all` below
        // (or `abort` on failure) has retired the transfer.
        unsafe { ep.post_recv(peer, bufs.addr(dst) as *mut u8, dst.len, reduce, tag) }?;
    }
    ep.wait_all(deadline, Some(&*tags))
}
