//! The schedules of a compressed AllReduce, around the compression the executor's caller does
//! between them. Ranks form groups (the hosts, or one group per rank when level0 is compressed
//! too); the buffer is cut into M shards (M = the largest group), and in a group of m ranks
//! local rank j owns shards j, j+m, … (as in `hier.rs`).
//!
//! 1. `reduce`: level0 reduce-scatter at full precision — each rank sends the shards it does
//!    not own from its input to their owners, an owner copies its own contribution to the
//!    output and adds its group peers' there.
//! 2. (caller) each owner compresses its shard sums into blob slot `(shard, own group)`.
//! 3. `exchange`: the owners of a shard in all groups swap blobs (a mesh, one step), so each
//!    holds every group's blob of the shard in slots `(shard, group)`.
//! 4. (caller) each owner decodes the blobs in group order into an f32 accumulator and writes
//!    the result to its output shard: every owner of a shard decodes the same bytes in the same
//!    order, so all get bit-identical values.
//! 5. `gather`: level0 allgather — owners send their finished shards to their group peers.
//!
//! Level1 traffic per rank is (groups − 1) compressed shards each way; on two hosts this is
//! exactly what a ring AllReduce of the uncompressed shard moves, scaled by the compression
//! ratio.

use super::schedule::{even_blocks, Action, Buf, Schedule, Span};
use super::Topo;

/// One owned shard: its elements and where its blobs live in the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    /// First element.
    pub first: usize,
    /// Elements.
    pub len: usize,
    /// Bytes of one blob of this shard.
    pub blob: usize,
    /// Workspace offset of the blob of group g: `slot0 + g * blob`.
    pub slot0: usize,
}

/// One rank's part in a compressed AllReduce.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The shards this rank owns (and compresses), in shard order.
    pub owned: Vec<Owned>,
    /// This rank's group.
    pub group: usize,
    /// Number of groups.
    pub groups: usize,
    /// Step 1 (level0 reduce-scatter into the output).
    pub reduce: Schedule,
    /// Step 3 (blob exchange in workspace `Buf::Ext(0)`).
    pub exchange: Schedule,
    /// Step 5 (level0 allgather in the output).
    pub gather: Schedule,
    /// Workspace bytes (`Buf::Ext(0)`).
    pub workspace: usize,
}

/// Builds rank `me`'s plan over `groups` for `count` elements of `elem` bytes; `blob(n)` is the
/// size of the compressed form of n elements.
pub fn plan(
    groups: &Topo,
    me: u32,
    count: usize,
    elem: usize,
    blob: &dyn Fn(usize) -> usize,
) -> Plan {
    let hosts = groups.hosts();
    let gi = groups.host(me) as usize;
    let local = &hosts[gi];
    let j = groups.local_index(me) as usize;
    let nsh = groups.max_per_host().max(1) as usize;
    let shards = even_blocks(count, nsh);
    let owner = |g: usize, s: usize| hosts[g][s % hosts[g].len()];
    let span = |buf, s: usize| Span::new(buf, shards[s].0 * elem, shards[s].1 * elem);
    let live = |s: &usize| shards[*s].1 > 0;

    let mut reduce = Schedule::new("compressed-level0-reduce");
    let mut gather = Schedule::new("compressed-level0-gather");
    let (rs, ag) = (reduce.step(), gather.step());
    for s in (0..nsh).filter(live) {
        let o = owner(gi, s);
        if o == me {
            rs.push(Action::Copy {
                src: span(Buf::Send, s),
                dst: span(Buf::Recv, s),
            });
            for &p in local.iter().filter(|&&p| p != me) {
                rs.push(Action::RecvReduce {
                    peer: p,
                    dst: span(Buf::Recv, s),
                });
                ag.push(Action::Send {
                    peer: p,
                    src: span(Buf::Recv, s),
                });
            }
        } else {
            rs.push(Action::Send {
                peer: o,
                src: span(Buf::Send, s),
            });
            ag.push(Action::Recv {
                peer: o,
                dst: span(Buf::Recv, s),
            });
        }
    }

    let mut exchange = Schedule::new("compressed-level1-exchange");
    let ex = exchange.step();
    let mut owned = Vec::new();
    let mut at = 0;
    for s in (0..nsh).filter(|s| live(s) && s % local.len() == j) {
        let b = blob(shards[s].1);
        let o = Owned {
            first: shards[s].0,
            len: shards[s].1,
            blob: b,
            slot0: at,
        };
        at += b * hosts.len();
        for g in (0..hosts.len()).filter(|&g| g != gi) {
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
        owned.push(o);
    }
    Plan {
        owned,
        group: gi,
        groups: hosts.len(),
        reduce: reduce.finish(),
        exchange: exchange.finish(),
        gather: gather.finish(),
        workspace: at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every send has a matching receive of the same size, in the same order per pair, and
    /// every shard is owned once per group.
    #[test]
    fn sends_and_receives_pair_up_and_shards_are_owned_once_per_group() {
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
            for count in [0usize, 1, 5, 64, 1001] {
                let plans: Vec<Plan> = (0..n).map(|r| plan(&topo, r, count, 4, &blob)).collect();
                for pick in [
                    |p: &Plan| p.reduce.clone(),
                    |p: &Plan| p.exchange.clone(),
                    |p: &Plan| p.gather.clone(),
                ] {
                    for a in 0..n {
                        for b in 0..n {
                            let sent: Vec<usize> = pick(&plans[a as usize])
                                .steps
                                .iter()
                                .flat_map(|s| s.actions.clone())
                                .filter_map(|x| match x {
                                    Action::Send { peer, src } if peer == b => Some(src.len),
                                    _ => None,
                                })
                                .collect();
                            let got: Vec<usize> = pick(&plans[b as usize])
                                .steps
                                .iter()
                                .flat_map(|s| s.actions.clone())
                                .filter_map(|x| match x {
                                    Action::Recv { peer, dst }
                                    | Action::RecvReduce { peer, dst }
                                        if peer == a =>
                                    {
                                        Some(dst.len)
                                    }
                                    _ => None,
                                })
                                .collect();
                            assert_eq!(sent, got, "{sizes:?} count {count}: {a} -> {b}");
                        }
                    }
                }
                for g in topo.hosts() {
                    let mut covered = vec![0u32; count];
                    for &r in g {
                        for o in &plans[r as usize].owned {
                            for c in &mut covered[o.first..o.first + o.len] {
                                *c += 1;
                            }
                        }
                    }
                    assert!(covered.iter().all(|&c| c == 1), "{sizes:?} count {count}");
                }
            }
        }
    }
}
