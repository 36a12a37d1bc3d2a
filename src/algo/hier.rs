//! Two-level (hierarchical) algorithms: level0 is a mesh among the ranks of one host, level1 a
//! ring across hosts. Hosts may hold different numbers of ranks.
//!
//! AllReduce: the data is cut into M shards (M = most ranks on any host); on a host with m
//! ranks, local rank j owns shards j, j+m, …. (1) level0 reduce-scatter: every rank sends each
//! shard to its owner, which folds the copies in local-rank order; (2) level1: for each shard,
//! its owners on all hosts run a ring AllReduce; (3) level0 allgather: owners send their shards
//! to the other ranks of their host. Shards are processed in increasing order everywhere, so
//! the level1 rings of different shards cannot wait on each other in a cycle.
//!
//! AllGather: for each local index j, the ranks owning j (local rank j % m on each host) ring-
//! allgather the blocks of the local-j ranks of every host; then each rank hands its own block
//! and what its rings brought in to the other ranks of its host.

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::Ctx;

/// Ring AllReduce among `members` (this rank is `members[i]`) over elements
/// `[first, first+count)` of the output buffer. The first step joins the schedule's current one.
fn ring_allreduce_group(
    s: &mut Schedule,
    es: usize,
    members: &[u32],
    i: usize,
    first: usize,
    count: usize,
) {
    let h = members.len();
    if h < 2 || count == 0 {
        return;
    }
    let b = even_blocks(count, h);
    let sp = |k: i64| {
        let (f, l) = b[k.rem_euclid(h as i64) as usize];
        Span::new(Buf::Recv, (first + f) * es, l * es)
    };
    let right = members[(i + 1) % h];
    let left = members[(i + h - 1) % h];
    let i = i as i64;
    for k in 0..h as i64 - 1 {
        let st = if k == 0 { s.current() } else { s.step() };
        st.push(Action::Send {
            peer: right,
            src: sp(i - k),
        });
        st.push(Action::RecvReduce {
            peer: left,
            dst: sp(i - k - 1),
        });
    }
    for k in 0..h as i64 - 1 {
        let st = s.step();
        st.push(Action::Send {
            peer: right,
            src: sp(i + 1 - k),
        });
        st.push(Action::Recv {
            peer: left,
            dst: sp(i - k),
        });
    }
}

/// Hierarchical AllReduce in the output buffer.
pub fn allreduce(ctx: &Ctx, count: usize) -> Schedule {
    let mut s = Schedule::new("hier");
    let (es, me) = (ctx.elem, ctx.me);
    let bytes = count * es;
    if count == 0 {
        return s;
    }
    let topo = ctx.topo;
    let hosts = topo.hosts();
    let local = &hosts[topo.host(me) as usize];
    let m = local.len();
    let j = topo.local_index(me) as usize;
    let nshards = topo.max_per_host() as usize;
    let shards = even_blocks(count, nshards);
    let shard = |sh: usize| Span::new(Buf::Recv, shards[sh].0 * es, shards[sh].1 * es);
    let owner = |sh: usize| local[sh % m];
    let mine: Vec<usize> = (0..nshards)
        .filter(|&sh| sh % m == j && shards[sh].1 > 0)
        .collect();
    let others: Vec<usize> = (0..nshards)
        .filter(|&sh| sh % m != j && shards[sh].1 > 0)
        .collect();
    let slot = |q: usize, sh: usize| {
        Span::new(
            Buf::Scratch,
            (q * count + shards[sh].0) * es,
            shards[sh].1 * es,
        )
    };
    if m > 1 {
        s.need_scratch(m * bytes);
    }
    let st = s.step();
    st.push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: Span::new(Buf::Recv, 0, bytes),
    });
    if m > 1 {
        for &sh in &others {
            st.push(Action::Send {
                peer: owner(sh),
                src: shard(sh),
            });
        }
        for &sh in &mine {
            for (q, &peer) in local.iter().enumerate().filter(|&(_, &p)| p != me) {
                st.push(Action::Recv {
                    peer,
                    dst: slot(q, sh),
                });
            }
        }
    }
    for &sh in &mine {
        let st = s.step();
        for q in (0..m).filter(|&q| q != j) {
            st.push(Action::Reduce {
                dst: shard(sh),
                src: slot(q, sh),
            });
        }
        let group: Vec<u32> = hosts.iter().map(|h| h[sh % h.len()]).collect();
        let i = topo.host(me) as usize;
        ring_allreduce_group(&mut s, es, &group, i, shards[sh].0, shards[sh].1);
    }
    if m > 1 {
        let st = s.step();
        for &sh in &mine {
            for &peer in local.iter().filter(|&&p| p != me) {
                st.push(Action::Send {
                    peer,
                    src: shard(sh),
                });
            }
        }
        for &sh in &others {
            st.push(Action::Recv {
                peer: owner(sh),
                dst: shard(sh),
            });
        }
    }
    s
}

/// The ranks whose blocks rank `x` hands to the other ranks of its host in the final level0
/// step of [`allgather`]: itself, then what its level1 rings brought in.
fn forwarded(ctx: &Ctx, x: u32) -> Vec<u32> {
    let topo = ctx.topo;
    let hosts = topo.hosts();
    let h = topo.host(x) as usize;
    let m = hosts[h].len();
    let i = topo.local_index(x) as usize;
    let mut out = vec![x];
    for j in (0..topo.max_per_host() as usize).filter(|&j| j % m == i) {
        for (g, host) in hosts.iter().enumerate() {
            if g != h && j < host.len() {
                out.push(host[j]);
            }
        }
    }
    out
}

/// Hierarchical AllGather (equal blocks of `count` elements) in the output buffer.
pub fn allgather(ctx: &Ctx, count: usize) -> Schedule {
    let mut s = Schedule::new("hier");
    let (es, me) = (ctx.elem, ctx.me);
    let bytes = count * es;
    let block = |r: u32| Span::new(Buf::Recv, r as usize * bytes, bytes);
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, bytes),
        dst: block(me),
    });
    if count == 0 {
        return s;
    }
    let topo = ctx.topo;
    let hosts = topo.hosts();
    let hi = topo.host(me) as usize;
    let local = &hosts[hi];
    let m = local.len();
    let j0 = topo.local_index(me) as usize;
    let nh = hosts.len();
    let mut fresh = false;
    for j in (0..topo.max_per_host() as usize).filter(|&j| j % m == j0) {
        // Ring allgather among the owners of j; host g contributes the block of its local-j
        // rank if it has one.
        let group: Vec<u32> = hosts.iter().map(|h| h[j % h.len()]).collect();
        let piece = |g: usize| hosts[g].get(j).copied();
        let right = group[(hi + 1) % nh];
        let left = group[(hi + nh - 1) % nh];
        for k in 0..nh.saturating_sub(1) {
            // The first ring step shares the copy's step; later groups start afresh.
            let st = if k == 0 && !fresh {
                s.current()
            } else {
                s.step()
            };
            if let Some(r) = piece((hi + nh - k) % nh) {
                st.push(Action::Send {
                    peer: right,
                    src: block(r),
                });
            }
            if let Some(r) = piece((hi + 2 * nh - k - 1) % nh) {
                st.push(Action::Recv {
                    peer: left,
                    dst: block(r),
                });
            }
        }
        fresh = true;
    }
    if m > 1 {
        let st = s.step();
        for &peer in local.iter().filter(|&&p| p != me) {
            for r in forwarded(ctx, me) {
                st.push(Action::Send {
                    peer,
                    src: block(r),
                });
            }
        }
        for &peer in local.iter().filter(|&&p| p != me) {
            for r in forwarded(ctx, peer) {
                st.push(Action::Recv {
                    peer,
                    dst: block(r),
                });
            }
        }
    }
    s
}
