//! Double binary tree AllReduce: two balanced binary trees over the ranks, each reducing and
//! then broadcasting half of the data in pipelined chunks. Tree B is tree A mirrored (rank r
//! takes position n−1−r), so ranks that are leaves in one tree are mostly inner nodes of the
//! other and the send/receive load is shared.
//!
//! Timing is in rounds shared by all ranks: a node of height h sends chunk c up at round c + h;
//! its parent receives it in the same round into a scratch slot and folds it in (left child
//! then right child, an order fixed by the tree) just before sending its own chunk c up. The
//! root finishes chunk c at round c + H and sends it down; a node at depth d receives it at
//! round c + H + d − 1 and forwards it at the next. Every message is matched in the same round
//! on both sides, so the schedule cannot deadlock; each chunk is reduced once, on its way to the
//! root, so all ranks end bit-identical whatever the arrival order.

use super::schedule::{even_blocks, Action, Buf, Schedule, Span, Step};
use super::Ctx;

/// Target chunk size for pipelining.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Upper bound on chunks per tree (bounds the step count of huge messages).
pub const MAX_CHUNKS: usize = 64;

/// A balanced in-order binary tree over positions `0..n`.
#[derive(Clone, Debug)]
struct Shape {
    parent: Vec<Option<u32>>,
    children: Vec<Vec<u32>>,
    height: Vec<u32>,
    depth: Vec<u32>,
    root: u32,
}

fn shape(n: u32) -> Shape {
    let mut sh = Shape {
        parent: vec![None; n as usize],
        children: vec![Vec::new(); n as usize],
        height: vec![0; n as usize],
        depth: vec![0; n as usize],
        root: 0,
    };
    // Returns the root of [lo, hi) after filling in its subtree.
    fn build(sh: &mut Shape, lo: u32, hi: u32, depth: u32) -> Option<u32> {
        if lo >= hi {
            return None;
        }
        let mid = lo + (hi - lo) / 2;
        sh.depth[mid as usize] = depth;
        let mut h = 0;
        for c in [
            build(sh, lo, mid, depth + 1),
            build(sh, mid + 1, hi, depth + 1),
        ]
        .into_iter()
        .flatten()
        {
            sh.parent[c as usize] = Some(mid);
            sh.children[mid as usize].push(c);
            h = h.max(sh.height[c as usize] + 1);
        }
        sh.height[mid as usize] = h;
        Some(mid)
    }
    sh.root = build(&mut sh, 0, n, 0).unwrap_or(0);
    sh
}

/// The most tree edges (of both trees) that leave one host, when hosts hold `per_host`
/// consecutive ranks: how many of a host's ranks talk across the network in one round.
pub fn crossing_edges(n: u32, per_host: u32) -> u32 {
    if n < 2 || per_host == 0 {
        return 0;
    }
    let sh = shape(n);
    let hosts = n.div_ceil(per_host) as usize;
    let mut count = vec![0u32; hosts];
    for (pos, parent) in sh.parent.iter().enumerate() {
        let Some(p) = *parent else { continue };
        // Tree A maps position to rank; tree B mirrors it.
        for (a, b) in [(pos as u32, p), (n - 1 - pos as u32, n - 1 - p)] {
            let (ha, hb) = ((a / per_host) as usize, (b / per_host) as usize);
            if ha != hb {
                count[ha] += 1;
                count[hb] += 1;
            }
        }
    }
    count.into_iter().max().unwrap_or(0)
}

/// One tree's share of the work: elements `[first, first+count)` of the output buffer, scratch
/// slots from byte `scratch_base`, rank ↔ position maps.
struct Part<'a> {
    pos: &'a dyn Fn(u32) -> u32,
    rank: &'a dyn Fn(u32) -> u32,
    first: usize,
    count: usize,
    scratch_base: usize,
}

/// Adds one tree's actions to the per-round lists; returns the scratch bytes it reserves.
fn tree_rounds(rounds: &mut Vec<Vec<Action>>, ctx: &Ctx, sh: &Shape, part: &Part) -> usize {
    let es = ctx.elem;
    let count = part.count;
    if count == 0 {
        return 0;
    }
    let k = (count * es)
        .div_ceil(CHUNK_BYTES)
        .clamp(1, MAX_CHUNKS)
        .min(count);
    let chunks = even_blocks(count, k);
    let me = (part.pos)(ctx.me) as usize;
    let top = sh.height[sh.root as usize] as usize;
    let piece = |c: usize| Span::new(Buf::Recv, (part.first + chunks[c].0) * es, chunks[c].1 * es);
    let slot = |child: usize, c: usize| {
        Span::new(
            Buf::Scratch,
            part.scratch_base + (child * count + chunks[c].0) * es,
            chunks[c].1 * es,
        )
    };
    fn at(rounds: &mut Vec<Vec<Action>>, t: usize) -> &mut Vec<Action> {
        if rounds.len() <= t {
            rounds.resize_with(t + 1, Vec::new);
        }
        &mut rounds[t]
    }
    let h = sh.height[me] as usize;
    let d = sh.depth[me] as usize;
    let kids = &sh.children[me];
    for c in 0..k {
        for (i, &kid) in kids.iter().enumerate() {
            at(rounds, c + sh.height[kid as usize] as usize).push(Action::Recv {
                peer: (part.rank)(kid),
                dst: slot(i, c),
            });
        }
        let up = at(rounds, c + h);
        for i in 0..kids.len() {
            up.push(Action::Reduce {
                dst: piece(c),
                src: slot(i, c),
            });
        }
        if let Some(p) = sh.parent[me] {
            up.push(Action::Send {
                peer: (part.rank)(p),
                src: piece(c),
            });
            at(rounds, c + top + d - 1).push(Action::Recv {
                peer: (part.rank)(p),
                dst: piece(c),
            });
        }
        for &kid in kids {
            at(rounds, c + top + d).push(Action::Send {
                peer: (part.rank)(kid),
                src: piece(c),
            });
        }
    }
    // Room for two children on every rank, leaf or not: scratch is the same on all ranks.
    2 * count * es
}

/// Double binary tree AllReduce in the output buffer.
pub fn allreduce(ctx: &Ctx, count: usize) -> Schedule {
    let mut s = Schedule::new("tree");
    let (es, n) = (ctx.elem, ctx.n);
    let bytes = count * es;
    if count == 0 {
        return s;
    }
    let mut rounds: Vec<Vec<Action>> = vec![vec![Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: Span::new(Buf::Recv, 0, bytes),
    }]];
    if n > 1 {
        let sh = shape(n);
        let half = count / 2;
        let same = |r: u32| r;
        let mirror = |r: u32| n - 1 - r;
        let a = tree_rounds(
            &mut rounds,
            ctx,
            &sh,
            &Part {
                pos: &same,
                rank: &same,
                first: 0,
                count: half,
                scratch_base: 0,
            },
        );
        let b = tree_rounds(
            &mut rounds,
            ctx,
            &sh,
            &Part {
                pos: &mirror,
                rank: &mirror,
                first: half,
                count: count - half,
                scratch_base: a,
            },
        );
        s.need_scratch(a + b);
    }
    s.steps = rounds.into_iter().map(|actions| Step { actions }).collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossing_edges_count_both_trees() {
        // One host: nothing crosses. One rank per host: a node has up to 3 edges per tree.
        assert_eq!(crossing_edges(8, 8), 0);
        assert!((2..=6).contains(&crossing_edges(8, 1)));
        assert_eq!(crossing_edges(1, 1), 0);
        // Bigger hosts: few edges leave a block of consecutive positions.
        assert!(crossing_edges(64, 8) <= 8);
    }

    #[test]
    fn shape_is_a_balanced_tree() {
        for n in 1..=70u32 {
            let sh = shape(n);
            assert_eq!(sh.parent.iter().filter(|p| p.is_none()).count(), 1);
            assert!(sh.parent[sh.root as usize].is_none());
            let top = sh.height[sh.root as usize];
            assert!(top < 32 - n.leading_zeros(), "n={n} height {top}");
            for p in 0..n as usize {
                assert!(sh.children[p].len() <= 2);
                for &c in &sh.children[p] {
                    assert_eq!(sh.depth[c as usize], sh.depth[p] + 1);
                }
            }
        }
    }
}
