//! Ring algorithms: each rank talks only to its neighbours, so every link carries the same
//! load and the bandwidth term is the optimal 2(n-1)/n of the message for AllReduce. Large
//! blocks are cut into chunks that move through the ring as a pipeline (see `pipelined`).

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::Ctx;

fn right(ctx: &Ctx) -> u32 {
    (ctx.me + 1) % ctx.n
}

fn left(ctx: &Ctx) -> u32 {
    (ctx.me + ctx.n - 1) % ctx.n
}

/// Block index `me + k` modulo n, for possibly negative k.
fn idx(ctx: &Ctx, k: i64) -> usize {
    (ctx.me as i64 + k).rem_euclid(ctx.n as i64) as usize
}

/// One ring stage: at stage k rank me sends block `me + shift - k` right and receives block
/// `me + shift - k - 1` from the left, reducing it in when `reduce` is set.
#[derive(Clone, Copy)]
struct Stage {
    shift: i64,
    k: i64,
    reduce: bool,
}

/// The n-1 stages of a ring pass (reduce-scatter when `reduce`, allgather otherwise).
fn pass(ctx: &Ctx, shift: i64, reduce: bool) -> impl Iterator<Item = Stage> {
    (0..ctx.n as i64 - 1).map(move |k| Stage { shift, k, reduce })
}

/// Chunk `c` of `chunks` of block `b`, as a span of `buf`.
fn chunk(buf: Buf, es: usize, b: (usize, usize), chunks: usize, c: usize) -> Span {
    let (f, l) = even_blocks(b.1, chunks)[c];
    Span::new(buf, (b.0 + f) * es, l * es)
}

/// Appends `stages` over `blocks` (first, len in elements) of `buf`, each block cut into
/// `chunks` chunks and the stages software-pipelined: step t carries chunk t − j of the j-th
/// stage, so a rank forwards a chunk as soon as it has it instead of waiting for its whole
/// block, and reductions of one chunk overlap transfers of others. Every stage's block is
/// the one the previous stage received, so chunk c of stage j depends only on chunk c of
/// stage j − 1, one step earlier. With one chunk this is the plain ring, a step per stage.
/// Sends (and receives) of one step are posted in stage order on both sides of every link,
/// which is what matches them up.
fn pipelined(
    s: &mut Schedule,
    ctx: &Ctx,
    buf: Buf,
    blocks: &[(usize, usize)],
    stages: &[Stage],
    chunks: usize,
) {
    let es = ctx.elem;
    if stages.is_empty() {
        return;
    }
    for t in 0..stages.len() + chunks - 1 {
        let st = s.step();
        // Only the stages with a chunk in flight at step t: building stays linear in the
        // schedule's size (rings of thousands of ranks have thousands of stages).
        let first = (t + 1).saturating_sub(chunks);
        let live = stages[first..stages.len().min(t + 1)]
            .iter()
            .enumerate()
            .map(|(i, g)| (t - (first + i), g));
        for (c, g) in live.clone() {
            st.push(Action::Send {
                peer: right(ctx),
                src: chunk(buf, es, blocks[idx(ctx, g.shift - g.k)], chunks, c),
            });
        }
        for (c, g) in live {
            let dst = chunk(buf, es, blocks[idx(ctx, g.shift - g.k - 1)], chunks, c);
            st.push(if g.reduce {
                Action::RecvReduce {
                    peer: left(ctx),
                    dst,
                }
            } else {
                Action::Recv {
                    peer: left(ctx),
                    dst,
                }
            });
        }
    }
}

/// Bytes per pipeline chunk the ring aims for: large enough that a chunk's fixed costs are
/// small against its transfer, small enough that a few chunks are in flight per link.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Most chunks a ring block is cut into.
pub const MAX_CHUNKS: usize = 8;

/// Chunks per block for blocks of at most `block_bytes` bytes.
pub fn chunks_for(block_bytes: usize) -> usize {
    (block_bytes / CHUNK_BYTES).clamp(1, MAX_CHUNKS)
}

/// Largest block of `blocks`, in bytes.
fn max_block(blocks: &[(usize, usize)], es: usize) -> usize {
    blocks.iter().map(|b| b.1).max().unwrap_or(0) * es
}

/// Ring reduce-scatter, after which rank me holds the full reduction of block `me + 1 + shift`.
fn rs_phase(s: &mut Schedule, ctx: &Ctx, buf: Buf, blocks: &[(usize, usize)], shift: i64) {
    let stages: Vec<Stage> = pass(ctx, shift, true).collect();
    let chunks = chunks_for(max_block(blocks, ctx.elem));
    pipelined(s, ctx, buf, blocks, &stages, chunks);
}

/// Ring allgather, where rank me starts holding block `me + shift`.
fn ag_phase(s: &mut Schedule, ctx: &Ctx, buf: Buf, blocks: &[(usize, usize)], shift: i64) {
    let stages: Vec<Stage> = pass(ctx, shift, false).collect();
    let chunks = chunks_for(max_block(blocks, ctx.elem));
    pipelined(s, ctx, buf, blocks, &stages, chunks);
}

/// Ring AllReduce: reduce-scatter then allgather, in the output buffer, pipelined in chunks
/// sized from the largest block.
pub fn allreduce(ctx: &Ctx, count: usize) -> Schedule {
    let block = count.div_ceil(ctx.n as usize) * ctx.elem;
    allreduce_chunked(ctx, count, chunks_for(block))
}

/// Ring AllReduce with each block cut into `chunks` pipeline chunks.
pub fn allreduce_chunked(ctx: &Ctx, count: usize, chunks: usize) -> Schedule {
    let mut s = Schedule::new("ring");
    let bytes = count * ctx.elem;
    if count == 0 {
        return s;
    }
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: Span::new(Buf::Recv, 0, bytes),
    });
    if ctx.n == 1 {
        return s;
    }
    let blocks = even_blocks(count, ctx.n as usize);
    // The copy shares the first step with the first sends: local actions run before posting.
    let copy = s.steps.pop().expect("copy step");
    // Both passes as one pipeline: the allgather of a chunk starts as soon as its reduction
    // is complete.
    let stages: Vec<Stage> = pass(ctx, 0, true).chain(pass(ctx, 1, false)).collect();
    pipelined(&mut s, ctx, Buf::Recv, &blocks, &stages, chunks.max(1));
    s.steps[0].actions.insert(0, copy.actions[0]);
    s
}

/// Ring ReduceScatter(V): the input blocks are copied next to each other into scratch (so
/// scratch holds only the blocks, whatever gaps the displacements leave), reduced around the
/// ring so that rank me finishes with block me, which is copied out.
pub fn reduce_scatter(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let mut s = Schedule::new("ring");
    let es = ctx.elem;
    let me = ctx.me as usize;
    let blocks = compact_blocks(counts);
    s.need_scratch(counts.iter().sum::<usize>() * es);
    let st = s.step();
    for (b, &d) in blocks.iter().zip(displs) {
        super::schedule::push_copy(
            st,
            Span::new(Buf::Send, d * es, b.1 * es),
            Span::new(Buf::Scratch, b.0 * es, b.1 * es),
        );
    }
    let copies = s.steps.pop().expect("copy step");
    rs_phase(&mut s, ctx, Buf::Scratch, &blocks, -1);
    if s.steps.is_empty() {
        s.steps.push(Default::default());
    }
    let first = &mut s.steps[0].actions;
    for (i, a) in copies.actions.into_iter().enumerate() {
        first.insert(i, a);
    }
    s.step().push(Action::Copy {
        src: Span::new(Buf::Scratch, blocks[me].0 * es, blocks[me].1 * es),
        dst: Span::new(Buf::Recv, 0, blocks[me].1 * es),
    });
    s
}

/// Blocks of `counts` laid out back to back: `(first, len)` in elements.
pub fn compact_blocks(counts: &[usize]) -> Vec<(usize, usize)> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            at += c;
            (at - c, c)
        })
        .collect()
}

/// Ring AllGather(V) in the output buffer.
pub fn allgather(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let mut s = Schedule::new("ring");
    let es = ctx.elem;
    let me = ctx.me as usize;
    let blocks: Vec<(usize, usize)> = displs.iter().copied().zip(counts.iter().copied()).collect();
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, counts[me] * es),
        dst: Span::new(Buf::Recv, blocks[me].0 * es, blocks[me].1 * es),
    });
    let copy = s.steps.pop().expect("copy step");
    ag_phase(&mut s, ctx, Buf::Recv, &blocks, 0);
    if s.steps.is_empty() {
        s.steps.push(Default::default());
    }
    s.steps[0].actions.insert(0, copy.actions[0]);
    s
}

/// Reduce: ring reduce-scatter into scratch, then every rank sends its block to the root.
pub fn reduce(ctx: &Ctx, count: usize, root: u32) -> Schedule {
    let mut s = Schedule::new("ring");
    let es = ctx.elem;
    let bytes = count * es;
    if count == 0 {
        return s;
    }
    if ctx.n == 1 {
        s.step().push(Action::Copy {
            src: Span::new(Buf::Send, 0, bytes),
            dst: Span::new(Buf::Recv, 0, bytes),
        });
        return s;
    }
    let blocks = even_blocks(count, ctx.n as usize);
    s.need_scratch(bytes);
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: Span::new(Buf::Scratch, 0, bytes),
    });
    let copy = s.steps.pop().expect("copy step");
    rs_phase(&mut s, ctx, Buf::Scratch, &blocks, -1);
    s.steps[0].actions.insert(0, copy.actions[0]);
    let me = ctx.me as usize;
    let st = s.step();
    if ctx.me == root {
        st.push(Action::Copy {
            src: Span::new(Buf::Scratch, blocks[me].0 * es, blocks[me].1 * es),
            dst: Span::new(Buf::Recv, blocks[me].0 * es, blocks[me].1 * es),
        });
        for p in (0..ctx.n).filter(|&p| p != root) {
            let b = blocks[p as usize];
            st.push(Action::Recv {
                peer: p,
                dst: Span::new(Buf::Recv, b.0 * es, b.1 * es),
            });
        }
    } else {
        st.push(Action::Send {
            peer: root,
            src: Span::new(Buf::Scratch, blocks[me].0 * es, blocks[me].1 * es),
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::{sim, symbolic, Coll, Topo};
    use super::*;

    #[test]
    fn pipelined_allreduce_is_exact_for_any_chunking() {
        for n in 1..=7u32 {
            let topo = Topo::flat(n);
            for count in [0usize, 1, 5, 16, 37] {
                for chunks in 1..=5 {
                    let ctx = |me| Ctx {
                        me,
                        n,
                        elem: 8,
                        network: true,
                        topo: &topo,
                        deterministic: false,
                        processes: false,
                        crowded: false,
                    };
                    let scheds: Vec<Schedule> = (0..n)
                        .map(|r| allreduce_chunked(&ctx(r), count, chunks).finish())
                        .collect();
                    let val = |r: u32, i: usize| (r as u64 + 1) * 1000 + i as u64;
                    let mut bufs: Vec<sim::RankBufs> = (0..n)
                        .map(|r| sim::RankBufs {
                            send: (0..count).flat_map(|i| val(r, i).to_le_bytes()).collect(),
                            recv: vec![0xAB; count * 8],
                            ..Default::default()
                        })
                        .collect();
                    let add = |d: &mut [u8], s: &[u8]| {
                        for (d, s) in d.chunks_exact_mut(8).zip(s.chunks_exact(8)) {
                            let v = u64::from_le_bytes(d.try_into().unwrap())
                                + u64::from_le_bytes(s.try_into().unwrap());
                            d.copy_from_slice(&v.to_le_bytes());
                        }
                    };
                    sim::run(&scheds, &mut bufs, &add)
                        .unwrap_or_else(|e| panic!("n={n} count={count} chunks={chunks}: {e}"));
                    let want: Vec<u8> = (0..count)
                        .flat_map(|i| (0..n).map(|r| val(r, i)).sum::<u64>().to_le_bytes())
                        .collect();
                    for (r, b) in bufs.iter().enumerate() {
                        assert_eq!(b.recv, want, "n={n} count={count} chunks={chunks} rank {r}");
                    }
                    // Symbolically: every contribution exactly once, nothing read early.
                    let one: Vec<Schedule> = (0..n)
                        .map(|r| {
                            let c = Ctx { elem: 1, ..ctx(r) };
                            allreduce_chunked(&c, count, chunks).finish()
                        })
                        .collect();
                    symbolic::run(&one, &|_| Coll::AllReduce { count })
                        .unwrap_or_else(|e| panic!("n={n} count={count} chunks={chunks}: {e}"));
                    if count >= n as usize * chunks && n > 1 {
                        // A real pipeline: fewer steps than stages × chunks.
                        let stages = 2 * (n as usize - 1);
                        assert_eq!(scheds[0].steps.len(), stages + chunks - 1);
                    }
                }
            }
        }
    }
}
