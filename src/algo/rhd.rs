//! Recursive halving-doubling: log2 steps of pairwise exchange at doubling distances.
//!
//! Non-power-of-two rank counts are folded first: with p the largest power of two ≤ n and
//! r = n − p, ranks 2i+1 (i < r) hand their data to rank 2i and sit out; the remaining p
//! "virtual" ranks run the power-of-two algorithm, and the partners get the result back at the
//! end. Virtual rank v is real rank 2v for v < r and v + r otherwise, so any aligned range of
//! virtual ranks covers a consecutive range of real ranks, whose blocks are contiguous in the
//! standard layouts: most exchanges are one message. Each block is reduced at exactly one rank
//! in an order fixed by the schedule, so results are bit-identical everywhere and run to run.

use super::schedule::{Action, Buf, Schedule, Span};
use super::Ctx;

/// The folding of n ranks onto a power of two.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fold {
    /// Largest power of two ≤ n.
    pub p: u32,
    /// Extra ranks (n − p).
    pub r: u32,
}

impl Fold {
    pub(crate) fn new(n: u32) -> Fold {
        let p = if n == 0 {
            0
        } else {
            1 << (31 - n.leading_zeros())
        };
        Fold { p, r: n - p }
    }

    /// Virtual rank of real rank `k`, or `None` for a folded-away rank.
    pub(crate) fn virt(&self, k: u32) -> Option<u32> {
        if k < 2 * self.r {
            k.is_multiple_of(2).then_some(k / 2)
        } else {
            Some(k - self.r)
        }
    }

    /// Real rank of virtual rank `v`.
    pub(crate) fn real(&self, v: u32) -> u32 {
        if v < self.r {
            2 * v
        } else {
            v + self.r
        }
    }

    /// Real ranks `[lo, hi)` covered by virtual ranks `[a, b)`.
    pub(crate) fn real_range(&self, a: u32, b: u32) -> (u32, u32) {
        let hi = if b - 1 < self.r {
            2 * (b - 1) + 2
        } else {
            b - 1 + self.r + 1
        };
        (self.real(a), hi)
    }
}

/// Byte spans of the blocks of real ranks `[lo, hi)` (elements at `displs`, `counts`), adjacent
/// ones merged, empty ones dropped.
pub(crate) fn spans(
    buf: Buf,
    es: usize,
    counts: &[usize],
    displs: &[usize],
    lo: u32,
    hi: u32,
) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for q in lo as usize..hi as usize {
        if counts[q] == 0 {
            continue;
        }
        let sp = Span::new(buf, displs[q] * es, counts[q] * es);
        match out.last_mut() {
            Some(l) if l.off + l.len == sp.off => l.len += sp.len,
            _ => out.push(sp),
        }
    }
    out
}

fn send_all(st: &mut Vec<Action>, peer: u32, sp: &[Span]) {
    st.extend(sp.iter().map(|&src| Action::Send { peer, src }));
}

fn recv_all(st: &mut Vec<Action>, peer: u32, sp: &[Span], reduce: bool) {
    st.extend(sp.iter().map(|&dst| {
        if reduce {
            Action::RecvReduce { peer, dst }
        } else {
            Action::Recv { peer, dst }
        }
    }));
}

/// Which phases [`halving_doubling`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phases {
    Halve,
    Double,
    Both,
}

/// Halving reduce-scatter and/or doubling allgather over the virtual ranks, on the blocks
/// `counts`/`displs` (one per real rank) of `buf`. Virtual rank v ends the halving owning the
/// blocks of its real ranks; the doubling starts from that ownership.
fn halving_doubling(
    s: &mut Schedule,
    ctx: &Ctx,
    f: Fold,
    buf: Buf,
    counts: &[usize],
    displs: &[usize],
    phases: Phases,
) {
    let es = ctx.elem;
    let Some(v) = f.virt(ctx.me) else { return };
    let blocks = |a: u32, b: u32| {
        let (lo, hi) = f.real_range(a, b);
        spans(buf, es, counts, displs, lo, hi)
    };
    if phases != Phases::Double {
        let mut m = f.p / 2;
        while m >= 1 {
            let partner = f.real(v ^ m);
            let lo = v & !(2 * m - 1);
            let (keep, give) = if v & m == 0 {
                ((lo, lo + m), (lo + m, lo + 2 * m))
            } else {
                ((lo + m, lo + 2 * m), (lo, lo + m))
            };
            let st = s.step();
            send_all(st, partner, &blocks(give.0, give.1));
            recv_all(st, partner, &blocks(keep.0, keep.1), true);
            m /= 2;
        }
    }
    if phases != Phases::Halve {
        let mut m = 1;
        while m < f.p {
            let partner = f.real(v ^ m);
            let mine = v & !(m - 1);
            let theirs = (v ^ m) & !(m - 1);
            let st = s.step();
            send_all(st, partner, &blocks(mine, mine + m));
            recv_all(st, partner, &blocks(theirs, theirs + m), false);
            m *= 2;
        }
    }
}

/// RHD AllReduce in the output buffer.
pub fn allreduce(ctx: &Ctx, count: usize) -> Schedule {
    let mut s = Schedule::new("rhd");
    let (es, n, me) = (ctx.elem, ctx.n, ctx.me);
    let bytes = count * es;
    if count == 0 {
        return s;
    }
    let all = Span::new(Buf::Recv, 0, bytes);
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: all,
    });
    if n == 1 {
        return s;
    }
    let f = Fold::new(n);
    let extra = me < 2 * f.r && me % 2 == 1;
    if me < 2 * f.r {
        // The fold shares the copy's step: local actions run before the exchange.
        let st = s.current();
        if extra {
            st.push(Action::Send {
                peer: me - 1,
                src: all,
            });
        } else {
            st.push(Action::RecvReduce {
                peer: me + 1,
                dst: all,
            });
        }
    }
    // Virtual rank v's block is assigned to real rank real(v); folded-away ranks get empty
    // blocks, so virtual ranges map straight onto the layout.
    let vb = super::schedule::even_blocks(count, f.p as usize);
    let mut counts = vec![0; n as usize];
    let mut displs = vec![0; n as usize];
    for v in 0..f.p {
        let k = f.real(v) as usize;
        counts[k] = vb[v as usize].1;
        displs[k] = vb[v as usize].0;
    }
    halving_doubling(&mut s, ctx, f, Buf::Recv, &counts, &displs, Phases::Both);
    if me < 2 * f.r {
        let st = s.step();
        if extra {
            st.push(Action::Recv {
                peer: me - 1,
                dst: all,
            });
        } else {
            st.push(Action::Send {
                peer: me + 1,
                src: all,
            });
        }
    }
    s
}

/// RHD ReduceScatter(V): reduced in scratch (a copy of the input), block r copied out on rank r.
pub fn reduce_scatter(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let mut s = Schedule::new("rhd");
    let (es, n, me) = (ctx.elem, ctx.n, ctx.me);
    // Scratch holds the blocks back to back, whatever gaps the displacements leave.
    let packed: Vec<usize> = super::ring::compact_blocks(counts)
        .iter()
        .map(|b| b.0)
        .collect();
    let displs_in = displs;
    let displs = &packed[..];
    s.need_scratch(counts.iter().sum::<usize>() * es);
    let all_work = spans(Buf::Scratch, es, counts, displs, 0, n);
    let st = s.step();
    for q in (0..n as usize).filter(|&q| counts[q] > 0) {
        super::schedule::push_copy(
            st,
            Span::new(Buf::Send, displs_in[q] * es, counts[q] * es),
            Span::new(Buf::Scratch, displs[q] * es, counts[q] * es),
        );
    }
    let f = Fold::new(n);
    let extra = me < 2 * f.r && me % 2 == 1;
    if me < 2 * f.r {
        let st = s.current();
        if extra {
            send_all(st, me - 1, &all_work);
        } else {
            recv_all(st, me + 1, &all_work, true);
        }
    }
    halving_doubling(&mut s, ctx, f, Buf::Scratch, counts, displs, Phases::Halve);
    if me < 2 * f.r {
        let st = s.step();
        if extra {
            recv_all(
                st,
                me - 1,
                &spans(Buf::Scratch, es, counts, displs, me, me + 1),
                false,
            );
        } else {
            send_all(
                st,
                me + 1,
                &spans(Buf::Scratch, es, counts, displs, me + 1, me + 2),
            );
        }
    }
    let m = me as usize;
    s.step().push(Action::Copy {
        src: Span::new(Buf::Scratch, displs[m] * es, counts[m] * es),
        dst: Span::new(Buf::Recv, 0, counts[m] * es),
    });
    s
}

/// RHD AllGather(V) in the output buffer.
pub fn allgather(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let mut s = Schedule::new("rhd");
    let (es, n, me) = (ctx.elem, ctx.n, ctx.me);
    let m = me as usize;
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, counts[m] * es),
        dst: Span::new(Buf::Recv, displs[m] * es, counts[m] * es),
    });
    let f = Fold::new(n);
    let extra = me < 2 * f.r && me % 2 == 1;
    if me < 2 * f.r {
        let st = s.current();
        if extra {
            send_all(
                st,
                me - 1,
                &spans(Buf::Recv, es, counts, displs, me, me + 1),
            );
        } else {
            let theirs = spans(Buf::Recv, es, counts, displs, me + 1, me + 2);
            recv_all(st, me + 1, &theirs, false);
        }
    }
    halving_doubling(&mut s, ctx, f, Buf::Recv, counts, displs, Phases::Double);
    if me < 2 * f.r {
        // Everything but the extra rank's own block, in rank order on both sides.
        let x = if extra { me } else { me + 1 };
        let rest: Vec<Span> = spans(Buf::Recv, es, counts, displs, 0, x)
            .into_iter()
            .chain(spans(Buf::Recv, es, counts, displs, x + 1, n))
            .collect();
        let st = s.step();
        if extra {
            recv_all(st, me - 1, &rest, false);
        } else {
            send_all(st, me + 1, &rest);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_maps_ranges_onto_consecutive_real_ranks() {
        for n in 1..=40u32 {
            let f = Fold::new(n);
            assert!(f.p.is_power_of_two() && f.p <= n && 2 * f.p > n);
            let mut seen = 0;
            for k in 0..n {
                if let Some(v) = f.virt(k) {
                    assert_eq!(f.real(v), k);
                    seen += 1;
                }
            }
            assert_eq!(seen, f.p);
            assert_eq!(f.real_range(0, f.p), (0, n));
        }
    }
}
