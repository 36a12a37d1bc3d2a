//! Ring algorithms: each rank talks only to its neighbours, so every link carries the same
//! load and the bandwidth term is the optimal 2(n-1)/n of the message for AllReduce.

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

/// n-1 ring steps over `blocks` (first, len in elements) of `buf`: at step k rank me sends
/// block `me + shift - k` right and receives block `me + shift - k - 1` from the left, reducing
/// it in when `reduce` is set.
fn ring_steps(
    s: &mut Schedule,
    ctx: &Ctx,
    buf: Buf,
    blocks: &[(usize, usize)],
    shift: i64,
    reduce: bool,
) {
    let es = ctx.elem;
    for k in 0..ctx.n as i64 - 1 {
        let sb = blocks[idx(ctx, shift - k)];
        let rb = blocks[idx(ctx, shift - k - 1)];
        let dst = Span::new(buf, rb.0 * es, rb.1 * es);
        let st = s.step();
        st.push(Action::Send {
            peer: right(ctx),
            src: Span::new(buf, sb.0 * es, sb.1 * es),
        });
        st.push(if reduce {
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

/// Ring reduce-scatter, after which rank me holds the full reduction of block `me + 1 + shift`.
fn rs_phase(s: &mut Schedule, ctx: &Ctx, buf: Buf, blocks: &[(usize, usize)], shift: i64) {
    ring_steps(s, ctx, buf, blocks, shift, true);
}

/// Ring allgather, where rank me starts holding block `me + shift`.
fn ag_phase(s: &mut Schedule, ctx: &Ctx, buf: Buf, blocks: &[(usize, usize)], shift: i64) {
    ring_steps(s, ctx, buf, blocks, shift, false);
}

/// Ring AllReduce: reduce-scatter then allgather, in the output buffer.
pub fn allreduce(ctx: &Ctx, count: usize) -> Schedule {
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
    rs_phase(&mut s, ctx, Buf::Recv, &blocks, 0);
    s.steps[0].actions.insert(0, copy.actions[0]);
    ag_phase(&mut s, ctx, Buf::Recv, &blocks, 1);
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
        st.push(Action::Copy {
            src: Span::new(Buf::Send, d * es, b.1 * es),
            dst: Span::new(Buf::Scratch, b.0 * es, b.1 * es),
        });
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
