//! One-step (mesh) algorithms: every rank exchanges with every peer at once.
//!
//! Best for small messages (one round of latency) and between threads of one process, where a
//! "message" is the receiver reading the sender's buffer directly, so all ranks copy in
//! parallel. Reductions combine contributions in a fixed order, so every rank computes
//! identical bits.

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::{Coll, Ctx, P2pItem};

/// The direct schedule for any collective.
pub fn build(ctx: &Ctx, coll: &Coll) -> Schedule {
    let n = ctx.n as usize;
    match coll {
        Coll::AllReduce { count } => {
            if ctx.network || ctx.deterministic || count * ctx.elem <= 4096 {
                allreduce_gather(ctx, *count)
            } else {
                allreduce_rs_ag(ctx, *count)
            }
        }
        Coll::ReduceScatter { count } => {
            let counts = vec![*count; n];
            let displs = (0..n).map(|i| i * count).collect::<Vec<_>>();
            reduce_scatter(ctx, &counts, &displs)
        }
        Coll::ReduceScatterV { counts, displs } => reduce_scatter(ctx, counts, displs),
        Coll::AllGather { count } => {
            let counts = vec![*count; n];
            let displs = (0..n).map(|i| i * count).collect::<Vec<_>>();
            allgather(ctx, &counts, &displs)
        }
        Coll::AllGatherV { counts, displs } => allgather(ctx, counts, displs),
        Coll::Broadcast { count, root } => broadcast(ctx, *count, *root),
        Coll::Reduce { count, root } => reduce(ctx, *count, *root),
        Coll::Scatter { count, root } => scatter(ctx, *count, *root),
        Coll::AlltoAllV {
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        } => alltoallv(ctx, send_counts, send_displs, recv_counts, recv_displs),
        Coll::P2p { items } => p2p(ctx, items),
        Coll::Barrier => super::barrier::dissemination(ctx),
    }
}

fn span(buf: Buf, elem: usize, first: usize, len: usize) -> Span {
    Span::new(buf, first * elem, len * elem)
}

/// AllReduce for small messages: gather every input into scratch, then reduce in rank order.
pub fn allreduce_gather(ctx: &Ctx, count: usize) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let bytes = count * es;
    let mut s = Schedule::new("direct-gather");
    if bytes == 0 {
        return s;
    }
    if n == 1 {
        s.step().push(Action::Copy {
            src: Span::new(Buf::Send, 0, bytes),
            dst: Span::new(Buf::Recv, 0, bytes),
        });
        return s;
    }
    s.need_scratch(bytes * n as usize);
    let slot = |p: u32| Span::new(Buf::Scratch, p as usize * bytes, bytes);
    let st = s.step();
    st.push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: slot(me),
    });
    for p in (0..n).filter(|&p| p != me) {
        st.push(Action::Send {
            peer: p,
            src: Span::new(Buf::Send, 0, bytes),
        });
        st.push(Action::Recv {
            peer: p,
            dst: slot(p),
        });
    }
    let st = s.step();
    let out = Span::new(Buf::Recv, 0, bytes);
    st.push(Action::Copy {
        src: slot(0),
        dst: out,
    });
    for p in 1..n {
        st.push(Action::Reduce {
            dst: out,
            src: slot(p),
        });
    }
    s
}

/// AllReduce between threads of one process: each rank reduces its block straight from its
/// peers' inputs (in arrival order, so not used when reductions must be deterministic), then
/// collects the other reduced blocks.
pub fn allreduce_rs_ag(ctx: &Ctx, count: usize) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct-rs-ag");
    if count == 0 {
        return s;
    }
    let blocks = even_blocks(count, n as usize);
    let mine = blocks[me as usize];
    // The reduce-scatter half walks each block in cache-sized chunks: the chunk being reduced
    // stays in cache while every peer's contribution is folded in, so memory sees one read per
    // input and one write instead of a read-modify-write per peer.
    let chunk = (RS_CHUNK_BYTES / es).max(1);
    let chunks_of = |len: usize| len.div_ceil(chunk);
    let steps = blocks.iter().map(|b| chunks_of(b.1)).max().unwrap_or(0);
    let piece = |b: (usize, usize), k: usize| {
        let first = b.0 + k * chunk;
        (first, chunk.min(b.0 + b.1 - first))
    };
    // Step k reduces chunk k of this rank's block and collects chunk k-1 of every other block,
    // which its owner finished one step earlier, so that copy mostly reads from the shared
    // cache rather than memory. Reduce traffic is listed before gather traffic in every step,
    // on both sides, so messages between a pair match in order.
    for k in 0..=steps {
        let st = s.step();
        let own = k < chunks_of(mine.1);
        if own {
            let c = piece(mine, k);
            st.push(Action::Copy {
                src: span(Buf::Send, es, c.0, c.1),
                dst: span(Buf::Recv, es, c.0, c.1),
            });
        }
        for p in (0..n).filter(|&p| p != me) {
            let b = blocks[p as usize];
            if k < chunks_of(b.1) {
                let c = piece(b, k);
                st.push(Action::Send {
                    peer: p,
                    src: span(Buf::Send, es, c.0, c.1),
                });
            }
        }
        if own {
            let c = piece(mine, k);
            for p in (0..n).filter(|&p| p != me) {
                st.push(Action::RecvReduce {
                    peer: p,
                    dst: span(Buf::Recv, es, c.0, c.1),
                });
            }
        }
        if k == 0 {
            continue;
        }
        for p in (0..n).filter(|&p| p != me) {
            if k - 1 < chunks_of(mine.1) {
                let c = piece(mine, k - 1);
                st.push(Action::Send {
                    peer: p,
                    src: span(Buf::Recv, es, c.0, c.1),
                });
            }
            let b = blocks[p as usize];
            if k - 1 < chunks_of(b.1) {
                let c = piece(b, k - 1);
                st.push(Action::Recv {
                    peer: p,
                    dst: span(Buf::Recv, es, c.0, c.1),
                });
            }
        }
    }
    s
}

/// Largest Reduce between two threads of one process that runs as one message to the root. Up
/// to here the second step's wait cost more than the root reducing the whole message alone
/// (64-512 KiB measured 2-10x faster in one step); beyond, both ranks reducing half pays.
/// Between two processes the message is staged (see [`one_message_reduce`]) at any size.
pub const ONE_STEP_REDUCE_MAX: usize = 1 << 20;

/// Largest Reduce that runs as one message from every leaf to the root among processes of a
/// host with more ranks than cores ([`Ctx::crowded`]). There the reduce-scatter and gather form
/// has each of the ranks wait for the scheduler twice, with only two cores to spread its work
/// over; the root reducing every leaf's whole input alone took less. Measured on the 2-core
/// VM, fp32 sum, µs, alternating launches, one message against reduce-scatter and gather:
/// 4 processes, host memory, 8 KiB 6.6-7.2 against 9.7-12.3 (in three of five launches; 14
/// and 19 in the other two), 32 KiB 13.1-14.2 against 13.4-22.4, 128 KiB 37-46 against 45-59,
/// but 256 KiB 80-94 against 71-77 in four of five (in an earlier set of three, 65-67 against
/// 62-66); device memory 128 KiB 15-17 against 22-28, 256 KiB 25-26 against 39-41, 1 MiB
/// 209-213 against 145-177; 3 processes, host memory, 128 KiB 24-27 against 32-45, 256 KiB
/// 42-45 against 55-64.
pub const CROWDED_ONE_STEP_REDUCE_MAX: usize = 128 << 10;
/// Most ranks whose crowded Reduce runs as one message per leaf: the root reduces every other
/// rank's input alone. 8 processes on the 2-core VM, one message against reduce-scatter and
/// gather, µs, three launches each: host memory 8-16 KiB 8.8-13.6 against 17-24, but 32 KiB
/// 30-32 against 25-29 and 256 KiB 223-240 against 172-179; device memory 128 KiB 32-33
/// against 39-40, 256 KiB 81-102 against 85.
pub const CROWDED_ONE_STEP_REDUCE_MAX_RANKS: u32 = 4;

/// Whether `coll` is a Reduce that runs as one message from each leaf to the root, which
/// reduces them into its output as they arrive.
/// - Two ranks of one host, up to [`ONE_STEP_REDUCE_MAX`] between threads and at any size
///   between processes. There the leaf's copy into the shared-memory ring overlaps the root's
///   reduction out of it, so both cores work on every chunk: 2-3x the reduce-scatter and gather
///   form from 2 MiB to 64 MiB (which synchronises twice and moves half the data twice), and
///   2-3x reading the leaf's buffer single-copy, where the root copies and reduces alone.
/// - Up to [`CROWDED_ONE_STEP_REDUCE_MAX_RANKS`] processes of a crowded host, up to
///   [`CROWDED_ONE_STEP_REDUCE_MAX`], unless reductions must be deterministic (the root
///   reduces in arrival order).
pub fn one_message_reduce(coll: &Coll, ctx: &Ctx) -> bool {
    let Coll::Reduce { count, .. } = *coll else {
        return false;
    };
    let bytes = count * ctx.elem;
    if ctx.network {
        return false;
    }
    if ctx.n == 2 {
        return ctx.processes || bytes <= ONE_STEP_REDUCE_MAX;
    }
    ctx.processes
        && ctx.crowded
        && !ctx.deterministic
        && ctx.n <= CROWDED_ONE_STEP_REDUCE_MAX_RANKS
        && bytes <= CROWDED_ONE_STEP_REDUCE_MAX
}

/// Chunk of the memory-link reduce-scatter: well inside a core's L2 cache.
const RS_CHUNK_BYTES: usize = 256 * 1024;

/// ReduceScatter(V): on memory links each rank reduces its block from its peers' inputs (in
/// arrival order); over the network, or when reductions must be deterministic, the blocks are
/// gathered into scratch and reduced in rank order.
pub fn reduce_scatter(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct");
    let my = (displs[me as usize], counts[me as usize]);
    let out = Span::new(Buf::Recv, 0, my.1 * es);
    if !ctx.network && !ctx.deterministic {
        let st = s.step();
        st.push(Action::Copy {
            src: span(Buf::Send, es, my.0, my.1),
            dst: out,
        });
        for p in (0..n).filter(|&p| p != me) {
            let (d, c) = (displs[p as usize], counts[p as usize]);
            st.push(Action::Send {
                peer: p,
                src: span(Buf::Send, es, d, c),
            });
        }
        for p in (0..n).filter(|&p| p != me) {
            st.push(Action::RecvReduce { peer: p, dst: out });
        }
        return s;
    }
    let bytes = my.1 * es;
    // Sized by the largest block, so every rank reserves the same scratch.
    s.need_scratch(counts.iter().copied().max().unwrap_or(0) * es * n as usize);
    let slot = |p: u32| Span::new(Buf::Scratch, p as usize * bytes, bytes);
    let st = s.step();
    st.push(Action::Copy {
        src: span(Buf::Send, es, my.0, my.1),
        dst: slot(me),
    });
    for p in (0..n).filter(|&p| p != me) {
        let (d, c) = (displs[p as usize], counts[p as usize]);
        st.push(Action::Send {
            peer: p,
            src: span(Buf::Send, es, d, c),
        });
        st.push(Action::Recv {
            peer: p,
            dst: slot(p),
        });
    }
    let st = s.step();
    st.push(Action::Copy {
        src: slot(0),
        dst: out,
    });
    for p in 1..n {
        st.push(Action::Reduce {
            dst: out,
            src: slot(p),
        });
    }
    s
}

/// AllGather(V): every rank sends its input to every peer.
pub fn allgather(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct");
    let mine = counts[me as usize];
    let st = s.step();
    st.push(Action::Copy {
        src: Span::new(Buf::Send, 0, mine * es),
        dst: span(Buf::Recv, es, displs[me as usize], mine),
    });
    for p in (0..n).filter(|&p| p != me) {
        st.push(Action::Send {
            peer: p,
            src: Span::new(Buf::Send, 0, mine * es),
        });
        st.push(Action::Recv {
            peer: p,
            dst: span(Buf::Recv, es, displs[p as usize], counts[p as usize]),
        });
    }
    s
}

/// Broadcast: the root sends to every peer (receivers copy in parallel on memory links).
pub fn broadcast(ctx: &Ctx, count: usize, root: u32) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct");
    let all = Span::new(Buf::Recv, 0, count * es);
    if count == 0 || n == 1 {
        return s;
    }
    let st = s.step();
    if me == root {
        for p in (0..n).filter(|&p| p != me) {
            st.push(Action::Send { peer: p, src: all });
        }
    } else {
        st.push(Action::Recv {
            peer: root,
            dst: all,
        });
    }
    s
}

/// Reduce: each rank reduces one block of the result (from its peers' inputs on memory links,
/// from gathered copies over the network), then the root collects the blocks; or, where
/// [`one_message_reduce`] says so, every leaf sends its whole input to the root.
pub fn reduce(ctx: &Ctx, count: usize, root: u32) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct");
    if count == 0 {
        return s;
    }
    if n == 1 {
        s.step().push(Action::Copy {
            src: Span::new(Buf::Send, 0, count * es),
            dst: Span::new(Buf::Recv, 0, count * es),
        });
        return s;
    }
    if one_message_reduce(&Coll::Reduce { count, root }, ctx) {
        // Every leaf sends its whole input and the root reduces each into its output: one
        // message and one wait instead of a reduce-scatter step and a gather step.
        let all = Span::new(Buf::Send, 0, count * es);
        let out = Span::new(Buf::Recv, 0, count * es);
        let st = s.step();
        if me == root {
            st.push(Action::Copy { src: all, dst: out });
            for p in (0..n).filter(|&p| p != root) {
                st.push(Action::RecvReduce { peer: p, dst: out });
            }
        } else {
            st.push(Action::Send {
                peer: root,
                src: all,
            });
        }
        return s;
    }
    let blocks = even_blocks(count, n as usize);
    let counts: Vec<usize> = blocks.iter().map(|b| b.1).collect();
    let displs: Vec<usize> = blocks.iter().map(|b| b.0).collect();
    // Phase 1: my block of the result lands where it ends up on the root (so the root copies
    // nothing afterwards), in scratch elsewhere.
    let mut rs = reduce_scatter(ctx, &counts, &displs);
    let my = blocks[me as usize];
    let my_bytes = my.1 * es;
    let base = rs.scratch;
    let (to, off) = if me == root {
        (Buf::Recv, my.0 * es)
    } else {
        (Buf::Scratch, base)
    };
    for st in &mut rs.steps {
        for a in &mut st.actions {
            move_recv(a, to, off);
        }
    }
    rs.need_scratch(base + blocks[0].1 * es);
    let st = rs.step();
    if me == root {
        for p in (0..n).filter(|&p| p != me) {
            let b = blocks[p as usize];
            st.push(Action::Recv {
                peer: p,
                dst: span(Buf::Recv, es, b.0, b.1),
            });
        }
    } else {
        st.push(Action::Send {
            peer: root,
            src: Span::new(Buf::Scratch, base, my_bytes),
        });
    }
    rs.algo = "direct";
    s = rs;
    s
}

/// Moves spans in the output buffer by `off` bytes into `to` (scratch for a phase whose result
/// is temporary).
fn move_recv(a: &mut Action, to: Buf, off: usize) {
    let fix = |sp: &mut Span| {
        if sp.buf == Buf::Recv {
            sp.buf = to;
            sp.off += off;
        }
    };
    match a {
        Action::Send { src, .. } => fix(src),
        Action::Recv { dst, .. } | Action::RecvReduce { dst, .. } => fix(dst),
        Action::Copy { src, dst } | Action::Reduce { dst, src } => {
            fix(src);
            fix(dst);
        }
    }
}

/// Scatter: the root sends block p to rank p.
pub fn scatter(ctx: &Ctx, count: usize, root: u32) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct");
    if count == 0 {
        return s;
    }
    let st = s.step();
    let out = Span::new(Buf::Recv, 0, count * es);
    if me == root {
        st.push(Action::Copy {
            src: span(Buf::Send, es, me as usize * count, count),
            dst: out,
        });
        for p in (0..n).filter(|&p| p != me) {
            st.push(Action::Send {
                peer: p,
                src: span(Buf::Send, es, p as usize * count, count),
            });
        }
    } else {
        st.push(Action::Recv {
            peer: root,
            dst: out,
        });
    }
    s
}

/// AlltoAllV in one step: every pair exchanges at once.
pub fn alltoallv(
    ctx: &Ctx,
    send_counts: &[usize],
    send_displs: &[usize],
    recv_counts: &[usize],
    recv_displs: &[usize],
) -> Schedule {
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let mut s = Schedule::new("direct");
    let m = me as usize;
    let st = s.step();
    st.push(Action::Copy {
        src: span(Buf::Send, es, send_displs[m], send_counts[m]),
        dst: span(Buf::Recv, es, recv_displs[m], recv_counts[m]),
    });
    for p in (0..n).filter(|&p| p != me) {
        let q = p as usize;
        st.push(Action::Send {
            peer: p,
            src: span(Buf::Send, es, send_displs[q], send_counts[q]),
        });
        st.push(Action::Recv {
            peer: p,
            dst: span(Buf::Recv, es, recv_displs[q], recv_counts[q]),
        });
    }
    s
}

/// Point-to-point items, all in one step so that any pattern of sends and receives that the
/// peers mirror completes (a ring of Send/Recv inside a group cannot deadlock).
pub fn p2p(_ctx: &Ctx, items: &[P2pItem]) -> Schedule {
    let mut s = Schedule::new("p2p");
    let st = s.step();
    for (i, it) in items.iter().enumerate() {
        let sp = Span::new(Buf::Ext(i as u32), 0, it.bytes);
        st.push(if it.send {
            Action::Send {
                peer: it.peer,
                src: sp,
            }
        } else {
            Action::Recv {
                peer: it.peer,
                dst: sp,
            }
        });
    }
    s
}
