//! The schedules of a compressed AllReduce, around the compression the executor's caller does
//! between them. Ranks form groups (the hosts, or one group per rank when level0 is compressed
//! too); the buffer is cut into M shards (M = the largest group), and in a group of m ranks
//! local rank j owns shards j, j+m, … (as in `hier.rs`). Every shard is cut into the same
//! number P of pieces, and each piece goes through five stages:
//!
//! - R: level0 reduce-scatter at full precision — each rank sends the pieces it does not own
//!   from its input to their owners, an owner copies its own contribution to the output and
//!   adds its group peers' there as they arrive; when reductions must be deterministic
//!   (`HCCL_DETERMINISTIC`) it receives them into [`FOLD_SLOTS`] fold slots instead and the
//!   caller adds them in local rank order before compressing;
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
//! When a group's blobs of a piece are small beside the piece (at most 1/[`FORWARD_SHARE`] of
//! its bytes: top-k), the mesh takes the forwarding form instead: rather than gather decoded
//! pieces at full precision, each owner forwards every group's blobs of its pieces to its group
//! peers (F, in step t + 3, beside its own decoding), and every rank decodes every piece into
//! its output (the forwarded ones in step t + 4): all decode the same bytes in the same order,
//! so the results stay bit-identical, and level0 carries the blobs instead of the data. Level0
//! sums are then always folded by the caller in local rank order, starting from its input, so
//! the reduce step copies nothing; blobs stay in use one step longer ([`FORWARD_SLOTS`] slots,
//! each holding every shard's blobs of its piece).
//!
//! Level1 traffic per rank of this mesh is (groups − 1) compressed pieces each way per owned
//! piece: on two groups what a ring AllReduce of the uncompressed shards moves, scaled by the
//! compression ratio, but growing with the groups. From three groups on, X and D become a
//! compressed reduce-scatter and allgather across the groups (the staged form): every owned
//! piece is cut into one sub-block per group, and
//!
//! - C (caller): each owner compresses the sub-blocks of the other groups, each into its own
//!   blob, and keeps its own group's sub-block at full precision;
//! - X1: each owner sends sub-block g's blob to group g's owner of the piece;
//! - M (caller): each owner adds the blobs of its own sub-block to its own values in f32 (its
//!   own values first, then the other groups' in group order), compresses the sum once, and
//!   keeps what that drops as error feedback;
//! - X2: the owners send each other these blobs (an allgather);
//! - D (caller): every owner decodes every sub-block's blob into the output, its own included,
//!   so all owners write the same bytes.
//!
//! Per owned piece a rank then sends and receives 2 · (groups − 1) / groups compressed pieces
//! over level1, as a ring AllReduce of uncompressed shards moves 2 · (groups − 1) / groups
//! shards. The staged pipeline has P + 6 steps (R(t) in step t, C in t + 1, X1 in t + 2, M in
//! t + 3, X2 in t + 4, D in t + 5, G in t + 6) and [`STAGED_SLOTS`] slots.

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::Topo;

/// Workspace slots of blobs of the mesh form (see the module documentation).
pub const SLOTS: usize = 3;

/// Workspace slots of blobs of the staged form: a piece's blobs are in use from its C to its D
/// step, five steps.
pub const STAGED_SLOTS: usize = 5;

/// Workspace slots of blobs of the forwarding form: a piece's blobs are in use from its C step
/// to the decoding of the forwarded ones, four steps.
pub const FORWARD_SLOTS: usize = 4;

/// The mesh form forwards blobs inside the group instead of gathering the decoded pieces when
/// a group's blobs of a piece take at most this share of the piece's own bytes.
pub const FORWARD_SHARE: usize = 4;

/// Fewest groups for which the staged form is used: on two groups it moves the same bytes as
/// the mesh, with a second compression.
pub const STAGED_FROM: usize = 3;

/// Workspace slots of deterministic level0 sums: piece t's peers' contributions arrive in
/// step t and are added during step t + 1, while piece t + 1's arrive.
pub const FOLD_SLOTS: usize = 2;

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
    /// Mesh form: workspace offset of the blob of group g, `slot0 + g * blob`. Staged form:
    /// where this part's blobs start.
    pub slot0: usize,
    /// Workspace bytes of this part's blobs, from `slot0`.
    pub bytes: usize,
    /// Staged form: one sub-block per group (empty in the mesh form).
    pub subs: Vec<Sub>,
    /// Staged form: workspace offset of the blobs of this rank's own group's sub-block that
    /// group g sends, `gathered + g * subs[group].blob`.
    pub gathered: usize,
    /// Deterministic level0 sums: workspace offsets of the group peers' contributions to this
    /// part, in local rank order, which the caller adds to its own before compressing (empty:
    /// the peers' contributions were added as they arrived).
    pub folds: Vec<usize>,
}

/// A sub-block of an owned piece in the staged form: group g reduces sub-block g.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sub {
    /// First element.
    pub first: usize,
    /// Elements.
    pub len: usize,
    /// Bytes of one blob of this sub-block.
    pub blob: usize,
    /// Workspace offset of the blob of this sub-block this rank sends in X1 (other groups'
    /// sub-blocks only).
    pub sent: usize,
    /// Workspace offset of the blob of the reduced sub-block (X2).
    pub reduced: usize,
}

/// What the caller does while step i runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Compress this piece (its level0 sum is complete).
    pub compress: Option<usize>,
    /// Staged form: reduce and re-compress this rank's sub-blocks of this piece.
    pub reduce: Option<usize>,
    /// Decode this piece (every group's blob has arrived).
    pub decode: Option<usize>,
    /// Forwarding form: decode the parts of this piece the group peers forwarded.
    pub decode_forwarded: Option<usize>,
}

/// One rank's part in a compressed AllReduce.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Per piece, the parts of it this rank owns (one per owned shard, empty ones left out).
    pub owned: Vec<Vec<Owned>>,
    /// Forwarding form: per piece, the parts of it the group peers own, whose blobs (every
    /// group's, from `slot0`) they forward to this rank to decode (empty otherwise).
    pub forwarded: Vec<Vec<Owned>>,
    /// This rank's group.
    pub group: usize,
    /// Number of groups.
    pub groups: usize,
    /// Whether this is the staged form (reduce-scatter and allgather across groups).
    pub staged: bool,
    /// Whether this is the forwarding form: owners forward the blobs of a piece to their
    /// group peers, and every rank decodes every piece, instead of a full-precision allgather;
    /// level0 sums are then always folded by the caller (see `Owned::folds`), and the caller
    /// starts them from its own input (no copy to the output first).
    pub forward: bool,
    /// Whether this rank is a group of its own: it has no level0 sum to make, so its pieces
    /// are compressed straight from the input (no copy to the output first).
    pub solo: bool,
    /// The pipeline's steps (one-step schedules; `Buf::Ext(0)` is the workspace).
    pub steps: Vec<Schedule>,
    /// What the caller does during each step.
    pub work: Vec<Work>,
    /// Workspace bytes (`Buf::Ext(0)`).
    pub workspace: usize,
}

/// Builds rank `me`'s plan over `groups` for `count` elements of `elem` bytes; `blob(n)` is the
/// size of the compressed form of n elements. Pieces hold at most `max_piece` elements, fewer
/// when the workspace would otherwise exceed `budget` bytes (down to 1024 elements); when
/// `deterministic`, level0 sums are added in local rank order (fold slots), never in arrival
/// order. Every input but `me` must be the same on every rank.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    groups: &Topo,
    me: u32,
    count: usize,
    elem: usize,
    blob: &dyn Fn(usize) -> usize,
    max_piece: usize,
    budget: usize,
    deterministic: bool,
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
    let staged = ng >= STAGED_FROM;
    let mut piece = max_piece.max(1);
    // Blobs small beside the data they stand for (sparse methods) are cheaper forwarded than
    // the decoded data gathered: decided from sizes every rank knows alike.
    let typical = piece.min(longest).max(1);
    let forward = !staged && ng > 1 && ng * blob(typical) * FORWARD_SHARE <= typical * elem;
    let slots = if staged {
        STAGED_SLOTS
    } else if forward {
        FORWARD_SLOTS
    } else {
        SLOTS
    };
    // The staged form's parts take about three blobs, at most ng; the forwarding form holds
    // every shard's blobs.
    let held = if forward { nsh } else { most_owned };
    while piece > 1024 && slots * ng * held * blob(piece) > budget {
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
    // Deterministic level0 sums (HCCL_DETERMINISTIC): an owner receives its group peers'
    // contributions into fold slots and the caller adds them in local rank order, instead of
    // reducing them in arrival order.
    let fold = (deterministic || forward) && local.len() > 1;
    let peers = local.len() - 1;
    let fold_len = |t: usize| {
        mine.iter()
            .map(|&s| ranges[s][t].1 * elem * peers)
            .sum::<usize>()
    };
    let fold_slot = if fold {
        (0..np).map(fold_len).max().unwrap_or(0)
    } else {
        0
    };
    // The fold slots come first in the workspace, then the blob slots.
    let fold_area = fold_slot * FOLD_SLOTS.min(np);
    // Where shard s's piece t's peers' contributions go, one of `len` elements per peer.
    let folds_of = |t: usize, s: usize, len: usize| -> Vec<usize> {
        if !fold {
            return Vec::new();
        }
        let at = (t % FOLD_SLOTS) * fold_slot
            + mine
                .iter()
                .take_while(|&&x| x < s)
                .map(|&x| ranges[x][t].1 * elem * peers)
                .sum::<usize>();
        (0..peers).map(|q| at + q * len * elem).collect()
    };
    // One owned part: its blobs' layout from workspace offset `at`, and the level1 transfers
    // of its blobs in the exchange steps (X; staged: X1, X2).
    let part = |t: usize, s: usize, (first, len): (usize, usize), at: usize| {
        let folds = folds_of(t, s, len);
        let mut x1 = Vec::new();
        let mut x2 = Vec::new();
        if !staged {
            let b = blob(len);
            for g in (0..ng).filter(|&g| g != gi) {
                let p = owner(g, s);
                x1.push(Action::Send {
                    peer: p,
                    src: Span::new(Buf::Ext(0), at + gi * b, b),
                });
                x1.push(Action::Recv {
                    peer: p,
                    dst: Span::new(Buf::Ext(0), at + g * b, b),
                });
            }
            let o = Owned {
                first,
                len,
                blob: b,
                slot0: at,
                bytes: b * ng,
                subs: Vec::new(),
                gathered: 0,
                folds,
            };
            return (o, x1, x2);
        }
        let mut end = at;
        let mut subs: Vec<Sub> = even_blocks(len, ng)
            .into_iter()
            .enumerate()
            .map(|(q, (o, n))| {
                let b = blob(n);
                let sent = end;
                if q != gi {
                    end += b;
                }
                Sub {
                    first: first + o,
                    len: n,
                    blob: b,
                    sent,
                    reduced: 0,
                }
            })
            .collect();
        let gathered = end;
        let own = subs[gi].blob;
        end += ng * own;
        for sb in &mut subs {
            sb.reduced = end;
            end += sb.blob;
        }
        for g in (0..ng).filter(|&g| g != gi) {
            let p = owner(g, s);
            x1.push(Action::Send {
                peer: p,
                src: Span::new(Buf::Ext(0), subs[g].sent, subs[g].blob),
            });
            x1.push(Action::Recv {
                peer: p,
                dst: Span::new(Buf::Ext(0), gathered + g * own, own),
            });
            x2.push(Action::Send {
                peer: p,
                src: Span::new(Buf::Ext(0), subs[gi].reduced, own),
            });
            x2.push(Action::Recv {
                peer: p,
                dst: Span::new(Buf::Ext(0), subs[g].reduced, subs[g].blob),
            });
        }
        let o = Owned {
            first,
            len,
            blob: blob(len),
            slot0: at,
            bytes: end - at,
            subs,
            gathered,
            folds,
        };
        (o, x1, x2)
    };
    // A part forwarded to this rank: every group's blob of it, from `at`.
    let fwd_part = |(first, len): (usize, usize), at: usize| Owned {
        first,
        len,
        blob: blob(len),
        slot0: at,
        bytes: blob(len) * ng,
        subs: Vec::new(),
        gathered: 0,
        folds: Vec::new(),
    };
    let slot_bytes = (0..np)
        .map(|t| {
            (0..nsh)
                .filter(|&s| ranges[s][t].1 > 0)
                .map(|s| {
                    if s % local.len() == j {
                        part(t, s, ranges[s][t], 0).0.bytes
                    } else if forward {
                        fwd_part(ranges[s][t], 0).bytes
                    } else {
                        0
                    }
                })
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);

    let solo = local.len() == 1;
    let reduce = |t: usize, out: &mut Vec<Action>| {
        for s in (0..nsh).filter(|&s| ranges[s][t].1 > 0) {
            let r = ranges[s][t];
            let o = owner(gi, s);
            if o == me && solo {
                // The caller compresses it from the input.
                continue;
            }
            if o == me {
                if !forward {
                    out.push(Action::Copy {
                        src: span(Buf::Send, r),
                        dst: span(Buf::Recv, r),
                    });
                }
                let folds = folds_of(t, s, r.1);
                for (qi, &p) in local.iter().filter(|&&p| p != me).enumerate() {
                    out.push(match folds.get(qi) {
                        Some(&at) => Action::Recv {
                            peer: p,
                            dst: Span::new(Buf::Ext(0), at, r.1 * elem),
                        },
                        None => Action::RecvReduce {
                            peer: p,
                            dst: span(Buf::Recv, r),
                        },
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
    // Per piece: this rank's parts of it, the exchanges of their blobs, and in the forwarding
    // form the parts its group peers forward and the forwarding transfers (shard order on
    // both sides of every pair).
    let built = (0..np).map(|t| {
        let mut at = fold_area + (t % slots) * slot_bytes;
        let (mut parts, mut fwd, mut x1, mut x2, mut f) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (s, r) in (0..nsh).map(|s| (s, ranges[s][t])).filter(|p| p.1 .1 > 0) {
            if s % local.len() == j {
                let (o, a, b) = part(t, s, r, at);
                at += o.bytes;
                if forward {
                    for &p in local.iter().filter(|&&p| p != me) {
                        f.push(Action::Send {
                            peer: p,
                            src: Span::new(Buf::Ext(0), o.slot0, o.bytes),
                        });
                    }
                }
                parts.push(o);
                x1.extend(a);
                x2.extend(b);
            } else if forward {
                let o = fwd_part(r, at);
                at += o.bytes;
                f.push(Action::Recv {
                    peer: owner(gi, s),
                    dst: Span::new(Buf::Ext(0), o.slot0, o.bytes),
                });
                fwd.push(o);
            }
        }
        (parts, fwd, x1, x2, f)
    });
    let mut owned = Vec::with_capacity(np);
    let mut forwarded = Vec::with_capacity(np);
    let mut firsts = Vec::with_capacity(np);
    let mut seconds = Vec::with_capacity(np);
    let mut forwards = Vec::with_capacity(np);
    for (parts, fwd, x1, x2, f) in built {
        owned.push(parts);
        forwarded.push(fwd);
        firsts.push(x1);
        seconds.push(x2);
        forwards.push(f);
    }

    // Stage offsets: R(t) runs in step t, G(t) in step t + last.
    let last = if staged { 6 } else { 4 };
    let piece_at = |t: isize| (0..np as isize).contains(&t).then_some(t as usize);
    let mut steps = Vec::with_capacity(np + last);
    let mut work = Vec::with_capacity(np + last);
    for i in 0..(np + last) as isize {
        let mut sched = Schedule::new(ALGO);
        let step = sched.step();
        if let Some(t) = piece_at(i - 2) {
            step.extend_from_slice(&firsts[t]);
        }
        if let Some(t) = piece_at(i - 4).filter(|_| staged) {
            step.extend_from_slice(&seconds[t]);
        }
        if let Some(t) = piece_at(i) {
            reduce(t, step);
        }
        if let Some(t) = piece_at(i - last as isize).filter(|_| !forward) {
            gather(t, step);
        }
        // Forwarding: piece t's blobs are complete after its exchange in step t + 2.
        if let Some(t) = piece_at(i - 3).filter(|_| forward) {
            step.extend_from_slice(&forwards[t]);
        }
        steps.push(sched.finish());
        work.push(Work {
            compress: piece_at(i - 1),
            reduce: piece_at(i - 3).filter(|_| staged),
            decode: piece_at(i + 1 - last as isize),
            decode_forwarded: piece_at(i - 4).filter(|_| forward),
        });
    }
    Plan {
        owned,
        forwarded,
        group: gi,
        groups: ng,
        staged,
        forward,
        solo,
        steps,
        work,
        workspace: fold_area + slot_bytes * slots.min(np),
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
    /// and before its gather); and the blob slots in use during a step never overlap. When
    /// deterministic, no level0 sum follows arrival order: owners receive their peers'
    /// contributions into fold slots of their own, listed in local rank order.
    #[test]
    fn pipeline_pairs_up_covers_every_element_and_keeps_slots_apart() {
        for det in [false, true] {
            pipeline_checks(det);
        }
    }

    /// The same for blobs small enough to be forwarded inside the group: then no level0 sum
    /// follows arrival order either, no full-precision data is gathered, every rank decodes
    /// every element once (its own parts and the forwarded ones), and forwarded blobs are in use
    /// one step longer.
    #[test]
    fn forwarding_pipeline_pairs_up_and_decodes_every_element_once() {
        for det in [false, true] {
            assert!(pipeline_checks_with(det, &|n: usize| 16 + n / 64) > 0);
        }
    }

    fn pipeline_checks(det: bool) {
        assert_eq!(pipeline_checks_with(det, &|n: usize| 16 + n / 2), 0);
    }

    /// Runs the checks over several topologies and counts; returns how many plans were of the
    /// forwarding form.
    fn pipeline_checks_with(det: bool, blob: &dyn Fn(usize) -> usize) -> usize {
        let mut forwarding = 0;
        for sizes in [
            vec![1u32],
            vec![4],
            vec![2, 2],
            vec![3, 1, 2],
            vec![2, 2, 2],
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
                    .map(|r| plan(&topo, r, count, 4, blob, max_piece, usize::MAX, det))
                    .collect();
                forwarding += plans.iter().filter(|p| p.forward).count();
                for (r, p) in plans.iter().enumerate() {
                    let m = topo.hosts()[topo.host(r as u32) as usize].len();
                    let acts = || p.steps.iter().flat_map(comm);
                    let arrival = acts().any(|a| matches!(a, Action::RecvReduce { .. }));
                    let folded = det || p.forward;
                    assert!(!(folded && arrival), "{sizes:?} rank {r}");
                    if p.forward {
                        // Nothing of the output crosses a link: only blobs are forwarded.
                        assert!(
                            acts().all(|a| !matches!(a, Action::Copy { .. })
                                && !matches!(a, Action::Send { src, .. } if src.buf == Buf::Recv)),
                            "{sizes:?} rank {r}"
                        );
                        let mut decoded = vec![0u32; count];
                        for o in p.owned.iter().chain(&p.forwarded).flatten() {
                            for c in &mut decoded[o.first..o.first + o.len] {
                                *c += 1;
                            }
                        }
                        assert!(decoded.iter().all(|&c| c == 1), "{sizes:?} rank {r}");
                    } else {
                        assert!(p.forwarded.iter().all(Vec::is_empty));
                    }
                    for o in p.owned.iter().flatten() {
                        assert_eq!(o.folds.len(), if folded { m - 1 } else { 0 });
                        // Fold slots lie before the blobs.
                        for &f in &o.folds {
                            assert!(f + o.len * 4 <= o.slot0, "{sizes:?} rank {r}");
                        }
                    }
                    // Piece t's fold slots (written in step t, read in step t + 1) never
                    // overlap piece t + 1's.
                    for t in 1..p.owned.len() {
                        let span = |t: usize| {
                            p.owned[t]
                                .iter()
                                .flat_map(|o| o.folds.iter().map(move |&f| (f, f + o.len * 4)))
                                .collect::<Vec<_>>()
                        };
                        for a in span(t - 1) {
                            for b in span(t) {
                                assert!(a.1 <= b.0 || b.1 <= a.0, "{sizes:?} rank {r} piece {t}");
                            }
                        }
                    }
                }
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
                        // Reduce of t runs in step t, exchange in step t + 2 (staged: X1 in
                        // t + 2, X2 in t + 4), gather after the decoding; the caller's work of
                        // step i happens after step i's transfers.
                        assert!(c < t + 2 && c >= t, "compress {t} at {c}");
                        if p.staged {
                            let r = when(&|w| w.reduce, t);
                            assert!(r >= t + 2 && r < t + 4, "reduce {t} at {r}");
                            assert!(d >= t + 4 && d < t + 6, "decode {t} at {d}");
                        } else {
                            assert!(p.work.iter().all(|w| w.reduce.is_none()));
                            assert!(d >= t + 2 && d < t + 4, "decode {t} at {d}");
                        }
                        if p.forward {
                            // Forwarded in step t + 3, after the exchange; decoded in the next.
                            assert_eq!(when(&|w| w.decode_forwarded, t), t + 4);
                        } else {
                            assert!(p.work.iter().all(|w| w.decode_forwarded.is_none()));
                        }
                    }
                    for (i, w) in p.work.iter().enumerate() {
                        let t = i as isize - 2;
                        let mut live: Vec<(usize, usize)> = Vec::new();
                        let pieces = [
                            Some(t),
                            Some(t - 2).filter(|_| p.staged),
                            w.compress.map(|x| x as isize),
                            w.reduce.map(|x| x as isize),
                            w.decode.map(|x| x as isize),
                            w.decode_forwarded.map(|x| x as isize),
                        ];
                        let mut pieces: Vec<isize> = pieces
                            .into_iter()
                            .flatten()
                            .filter(|&t| t >= 0 && (t as usize) < np)
                            .collect();
                        pieces.sort();
                        pieces.dedup();
                        for t in pieces {
                            for o in p.owned[t as usize].iter().chain(&p.forwarded[t as usize]) {
                                live.push((o.slot0, o.slot0 + o.bytes));
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
        forwarding
    }

    /// From three groups on, each owned part is cut into one sub-block per group, and a rank
    /// sends 2 · (groups − 1) / groups of its owned blobs' bytes over level1 (the mesh:
    /// groups − 1 times them).
    #[test]
    fn staged_form_sends_two_shares_per_group_across_groups() {
        let blob = |n: usize| n;
        for groups in [2usize, 3, 4, 5] {
            let topo = Topo::sized(&vec![2; groups]);
            let count = 1 << 16;
            let p = plan(&topo, 1, count, 4, &blob, 1 << 12, usize::MAX, false);
            assert_eq!(p.staged, groups >= STAGED_FROM);
            let owned: usize = p.owned.iter().flatten().map(|o| o.len).sum();
            let sent: usize = p
                .steps
                .iter()
                .flat_map(|s| s.steps.iter().flat_map(|s| &s.actions))
                .filter_map(|a| match *a {
                    Action::Send { peer, src } if topo.host(peer) != topo.host(1) => Some(src.len),
                    _ => None,
                })
                .sum();
            let want = if p.staged {
                2 * (groups - 1) * owned / groups
            } else {
                (groups - 1) * owned
            };
            assert!(
                sent.abs_diff(want) <= 2 * groups * p.owned.len(),
                "{groups}: {sent} vs {want}"
            );
            for o in p.owned.iter().flatten() {
                if p.staged {
                    assert_eq!(o.subs.len(), groups);
                    assert_eq!(o.subs[0].first, o.first);
                    assert_eq!(o.subs.iter().map(|s| s.len).sum::<usize>(), o.len);
                    for w in o.subs.windows(2) {
                        assert_eq!(w[0].first + w[0].len, w[1].first);
                    }
                } else {
                    assert!(o.subs.is_empty());
                }
            }
        }
    }

    /// A tight staging budget makes pieces smaller, down to the floor.
    #[test]
    fn budget_bounds_the_workspace() {
        let blob = |n: usize| 16 + n;
        let topo = Topo::sized(&[2, 2]);
        let p = plan(&topo, 0, 1 << 20, 4, &blob, 1 << 18, 1 << 20, false);
        assert!(p.workspace <= 1 << 20, "{}", p.workspace);
        assert!(p.owned.len() > 2);
        let tiny = plan(&topo, 0, 1 << 20, 4, &blob, 1 << 18, 1, false);
        assert!(tiny.owned[0][0].len >= 1024);
    }
}
