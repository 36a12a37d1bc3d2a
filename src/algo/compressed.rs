//! The schedules of a compressed AllReduce, around the compression the executor's caller does
//! between them. Ranks form groups (the hosts, or one group per rank when level0 is compressed
//! too); the buffer is cut into M shards (M = the largest group), and in a group of m ranks
//! local rank j owns shards j, j+m, … (as in `hier.rs`). Every shard is cut into the same
//! number P of pieces, and each piece goes through five stages:
//!
//! - R: level0 reduce-scatter at full precision — each rank sends the pieces it does not own
//!   from its input to their owners, an owner copies its own contribution to the output and
//!   adds its group peers' there;
//! - C (caller): each owner compresses its piece sums into blob slot `(piece, own group)`;
//! - X: the owners of a piece in all groups swap blobs (a mesh), so each holds every group's
//!   blob of the piece;
//! - D (caller): each owner decodes the blobs in group order into an f32 accumulator and writes
//!   the result to its output: every owner of a piece decodes the same bytes in the same order,
//!   so all get bit-identical values;
//! - G: level0 allgather — owners send their finished pieces to their group peers.
//!
//! They run as a pipeline of P + 4 steps: step i (piece t = i − 2) moves X(t), R(t + 2) and
//! G(t − 2) in one executor step while the caller compresses piece t + 1 and decodes piece
//! t − 1, so level0 copies, level1 transfers and the compression overlap. A piece's blobs live
//! in one of [`SLOTS`] workspace slots (piece t in slot t mod 3): pieces t − 1, t and t + 1 are
//! the only ones in use during a step, so the workspace stays a few pieces long whatever the
//! count.
//!
//! Level1 traffic per rank is (groups − 1) compressed pieces each way per owned piece; on two
//! hosts this is what a ring AllReduce of the uncompressed shards moves, scaled by the
//! compression ratio.

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::Topo;

/// Workspace slots of blobs (see the module documentation).
pub const SLOTS: usize = 3;

/// Name of the pipeline's schedules, in traces and logs.
pub const ALGO: &str = "compressed-pipeline";

/// One owned piece: its elements and where its blobs live in the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    /// First element.
    pub first: usize,
    /// Elements.
    pub len: usize,
    /// Bytes of one blob of this piece.
    pub blob: usize,
    /// Workspace offset of the blob of group g: `slot0 + g * blob`.
    pub slot0: usize,
}

/// What the caller does while step i runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Compress this piece (its level0 sum is complete).
    pub compress: Option<usize>,
    /// Decode this piece (every group's blob has arrived).
    pub decode: Option<usize>,
}

/// One rank's part in a compressed AllReduce.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Per piece, the parts of it this rank owns (one per owned shard, empty ones left out).
    pub owned: Vec<Vec<Owned>>,
    /// This rank's group.
    pub group: usize,
    /// Number of groups.
    pub groups: usize,
    /// The pipeline's steps (one-step schedules; `Buf::Ext(0)` is the workspace).
    pub steps: Vec<Schedule>,
    /// What the caller does during each step.
    pub work: Vec<Work>,
    /// Workspace bytes (`Buf::Ext(0)`).
    pub workspace: usize,
}

/// Builds rank `me`'s plan over `groups` for `count` elements of `elem` bytes; `blob(n)` is the
/// size of the compressed form of n elements. Pieces hold at most `max_piece` elements, fewer
/// when the workspace would otherwise exceed `budget` bytes (down to 1024 elements). Every
/// input but `me` must be the same on every rank.
pub fn plan(
    groups: &Topo,
    me: u32,
    count: usize,
    elem: usize,
    blob: &dyn Fn(usize) -> usize,
    max_piece: usize,
    budget: usize,
) -> Plan {
    let hosts = groups.hosts();
    let ng = hosts.len();
    let gi = groups.host(me) as usize;
    let local = &hosts[gi];
    let j = groups.local_index(me) as usize;
    let nsh = groups.max_per_host().max(1) as usize;
    let shards = even_blocks(count, nsh);
    let longest = shards.iter().map(|s| s.1).max().unwrap_or(0);
    // Most shards any rank owns (the smallest group's ranks own the most).
    let most_owned = nsh.div_ceil(hosts.iter().map(Vec::len).min().unwrap_or(1).max(1));
    let mut piece = max_piece.max(1);
    while piece > 1024 && SLOTS * ng * most_owned * blob(piece) > budget {
        piece /= 2;
    }
    let np = longest.div_ceil(piece).max(1);
    // ranges[s][t]: piece t of shard s.
    let ranges: Vec<Vec<(usize, usize)>> = shards
        .iter()
        .map(|&(f, l)| {
            even_blocks(l, np)
                .into_iter()
                .map(|(o, n)| (f + o, n))
                .collect()
        })
        .collect();
    let owner = |g: usize, s: usize| hosts[g][s % hosts[g].len()];
    let span = |buf, (f, n): (usize, usize)| Span::new(buf, f * elem, n * elem);
    let mine: Vec<usize> = (0..nsh).filter(|s| s % local.len() == j).collect();
    let slot_bytes = (0..np)
        .map(|t| {
            mine.iter()
                .filter(|&&s| ranges[s][t].1 > 0)
                .map(|&s| blob(ranges[s][t].1) * ng)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);

    let reduce = |t: usize, out: &mut Vec<Action>| {
        for s in (0..nsh).filter(|&s| ranges[s][t].1 > 0) {
            let r = ranges[s][t];
            let o = owner(gi, s);
            if o == me {
                out.push(Action::Copy {
                    src: span(Buf::Send, r),
                    dst: span(Buf::Recv, r),
                });
                for &p in local.iter().filter(|&&p| p != me) {
                    out.push(Action::RecvReduce {
                        peer: p,
                        dst: span(Buf::Recv, r),
                    });
                }
            } else {
                out.push(Action::Send {
                    peer: o,
                    src: span(Buf::Send, r),
                });
            }
        }
    };
    let gather = |t: usize, out: &mut Vec<Action>| {
        for s in (0..nsh).filter(|&s| ranges[s][t].1 > 0) {
            let r = ranges[s][t];
            let o = owner(gi, s);
            if o == me {
                for &p in local.iter().filter(|&&p| p != me) {
                    out.push(Action::Send {
                        peer: p,
                        src: span(Buf::Recv, r),
                    });
                }
            } else {
                out.push(Action::Recv {
                    peer: o,
                    dst: span(Buf::Recv, r),
                });
            }
        }
    };
    // Per piece: this rank's parts of it, and the exchange of their blobs.
    let (owned, exchanges): (Vec<Vec<Owned>>, Vec<Vec<Action>>) = (0..np)
        .map(|t| {
            let mut at = (t % SLOTS) * slot_bytes;
            let mut ex = Vec::new();
            let mut parts = Vec::new();
            let pieces = mine.iter().map(|&s| (s, ranges[s][t]));
            for (s, (first, len)) in pieces.filter(|(_, r)| r.1 > 0) {
                let b = blob(len);
                let o = Owned {
                    first,
                    len,
                    blob: b,
                    slot0: at,
                };
                at += b * ng;
                for g in (0..ng).filter(|&g| g != gi) {
                    let p = owner(g, s);
                    ex.push(Action::Send {
                        peer: p,
                        src: Span::new(Buf::Ext(0), o.slot0 + gi * b, b),
                    });
                    ex.push(Action::Recv {
                        peer: p,
                        dst: Span::new(Buf::Ext(0), o.slot0 + g * b, b),
                    });
                }
                parts.push(o);
            }
            (parts, ex)
        })
        .unzip();

    let piece_at = |t: isize| (0..np as isize).contains(&t).then_some(t as usize);
    let mut steps = Vec::with_capacity(np + 4);
    let mut work = Vec::with_capacity(np + 4);
    for i in 0..np + 4 {
        let t = i as isize - 2;
        let mut sched = Schedule::new(ALGO);
        let step = sched.step();
        if let Some(t) = piece_at(t) {
            step.extend_from_slice(&exchanges[t]);
        }
        if let Some(t) = piece_at(t + 2) {
            reduce(t, step);
        }
        if let Some(t) = piece_at(t - 2) {
            gather(t, step);
        }
        steps.push(sched.finish());
        work.push(Work {
            compress: piece_at(t + 1),
            decode: piece_at(t - 1),
        });
    }
    Plan {
        owned,
        group: gi,
        groups: ng,
        steps,
        work,
        workspace: slot_bytes * SLOTS.min(np),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comm(sched: &Schedule) -> impl Iterator<Item = &Action> {
        sched.steps.iter().flat_map(|s| &s.actions)
    }

    /// In every step, each send has a matching receive of the same size, in the same order per
    /// pair; every element is owned once per group; the caller's work follows the data (a piece
    /// is compressed after its reduce step and before its exchange, decoded after its exchange
    /// and before its gather); and the blob slots in use during a step never overlap.
    #[test]
    fn pipeline_pairs_up_covers_every_element_and_keeps_slots_apart() {
        let blob = |n: usize| 16 + n / 2;
        for sizes in [
            vec![1u32],
            vec![4],
            vec![2, 2],
            vec![3, 1, 2],
            vec![1, 1, 1, 1, 1],
        ] {
            let topo = Topo::sized(&sizes);
            let n = topo.n();
            for (count, max_piece) in [
                (0usize, 8),
                (1, 8),
                (5, 2),
                (64, 4),
                (1001, 64),
                (1001, 1 << 20),
            ] {
                let plans: Vec<Plan> = (0..n)
                    .map(|r| plan(&topo, r, count, 4, &blob, max_piece, usize::MAX))
                    .collect();
                let steps = plans[0].steps.len();
                assert!(plans.iter().all(|p| p.steps.len() == steps));
                for i in 0..steps {
                    for a in 0..n {
                        for b in 0..n {
                            let sent: Vec<usize> = comm(&plans[a as usize].steps[i])
                                .filter_map(|x| match *x {
                                    Action::Send { peer, src } if peer == b => Some(src.len),
                                    _ => None,
                                })
                                .collect();
                            let got: Vec<usize> = comm(&plans[b as usize].steps[i])
                                .filter_map(|x| match *x {
                                    Action::Recv { peer, dst }
                                    | Action::RecvReduce { peer, dst }
                                        if peer == a =>
                                    {
                                        Some(dst.len)
                                    }
                                    _ => None,
                                })
                                .collect();
                            assert_eq!(sent, got, "{sizes:?} count {count} step {i}: {a} -> {b}");
                        }
                    }
                }
                for g in topo.hosts() {
                    let mut covered = vec![0u32; count];
                    for &r in g {
                        for o in plans[r as usize].owned.iter().flatten() {
                            for c in &mut covered[o.first..o.first + o.len] {
                                *c += 1;
                            }
                        }
                    }
                    assert!(covered.iter().all(|&c| c == 1), "{sizes:?} count {count}");
                }
                for p in &plans {
                    let np = p.owned.len();
                    let when = |f: &dyn Fn(&Work) -> Option<usize>, t: usize| {
                        p.work.iter().position(|w| f(w) == Some(t)).unwrap()
                    };
                    for t in 0..np {
                        let (c, d) = (when(&|w| w.compress, t), when(&|w| w.decode, t));
                        // Reduce of t runs in step t, exchange in step t + 2, gather in t + 4;
                        // the caller's work of step i happens after step i's transfers.
                        assert!(c < t + 2 && c >= t, "compress {t} at {c}");
                        assert!(d >= t + 2 && d < t + 4, "decode {t} at {d}");
                    }
                    for (i, w) in p.work.iter().enumerate() {
                        let t = i as isize - 2;
                        let mut live: Vec<(usize, usize)> = Vec::new();
                        let pieces = [
                            Some(t),
                            w.compress.map(|x| x as isize),
                            w.decode.map(|x| x as isize),
                        ];
                        for t in pieces
                            .into_iter()
                            .flatten()
                            .filter(|&t| t >= 0 && (t as usize) < np)
                        {
                            for o in &p.owned[t as usize] {
                                live.push((o.slot0, o.slot0 + o.blob * p.groups));
                            }
                        }
                        live.sort();
                        assert!(
                            live.windows(2).all(|w| w[0].1 <= w[1].0),
                            "step {i}: {live:?}"
                        );
                        assert!(live.iter().all(|l| l.1 <= p.workspace));
                    }
                }
            }
        }
    }

    /// A tight staging budget makes pieces smaller, down to the floor.
    #[test]
    fn budget_bounds_the_workspace() {
        let blob = |n: usize| 16 + n;
        let topo = Topo::sized(&[2, 2]);
        let p = plan(&topo, 0, 1 << 20, 4, &blob, 1 << 18, 1 << 20);
        assert!(p.workspace <= 1 << 20, "{}", p.workspace);
        assert!(p.owned.len() > 2);
        let tiny = plan(&topo, 0, 1 << 20, 4, &blob, 1 << 18, 1);
        assert!(tiny.owned[0][0].len >= 1024);
    }
}
