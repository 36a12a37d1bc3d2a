//! Exhaustive simulated checks of every algorithm for small rank counts.

use super::sim::{run, RankBufs};
use super::*;

const ES: usize = 8;

fn val(r: usize, i: usize) -> u64 {
    (r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(1_000_003)
}

fn to_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn add(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
        let v = u64::from_le_bytes(d.try_into().unwrap())
            .wrapping_add(u64::from_le_bytes(s.try_into().unwrap()));
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// An output buffer pre-filled with a sentinel that no expected value equals.
fn fill(len: usize) -> Vec<u64> {
    vec![0xABAB_ABAB_ABAB_ABAB; len]
}

const ALGOS: [Algo; 8] = Algo::ALL;

/// Flat topologies for every rank count the byte-level tests use (leaked: tests only).
fn flat(n: usize) -> &'static Topo {
    static T: std::sync::OnceLock<Vec<Topo>> = std::sync::OnceLock::new();
    &T.get_or_init(|| (0..=64).map(|n| Topo::flat(n as u32)).collect())[n]
}

fn ctx(me: usize, n: usize, network: bool) -> Ctx<'static> {
    Ctx {
        me: me as u32,
        n: n as u32,
        elem: ES,
        network,
        topo: flat(n),
        deterministic: false,
        processes: false,
        crowded: false,
    }
}

/// Runs `coll` on n simulated ranks with each algorithm and link kind; `setup` gives each
/// rank's (send, recv length), `check` verifies rank r's output.
fn check_all(
    n: usize,
    coll: &Coll,
    setup: &dyn Fn(usize) -> (Vec<u64>, Vec<u64>),
    check: &dyn Fn(usize, &[u64]) -> bool,
) {
    for algo in ALGOS {
        for network in [false, true] {
            let scheds: Vec<Schedule> = (0..n)
                .map(|r| build(coll, &ctx(r, n, network), algo))
                .collect();
            // Segmenting a large operation relies on every rank needing the same scratch.
            assert!(
                scheds.iter().all(|s| s.scratch == scheds[0].scratch),
                "{coll:?} n={n} {algo:?} network={network}: scratch differs between ranks: {:?}",
                scheds.iter().map(|s| s.scratch).collect::<Vec<_>>()
            );
            let mut bufs: Vec<RankBufs> = (0..n)
                .map(|r| {
                    let (send, recv) = setup(r);
                    RankBufs {
                        send: to_bytes(&send),
                        recv: to_bytes(&recv),
                        ..Default::default()
                    }
                })
                .collect();
            run(&scheds, &mut bufs, &add)
                .unwrap_or_else(|e| panic!("{coll:?} n={n} {algo:?} network={network}: {e}"));
            for (r, b) in bufs.iter().enumerate() {
                assert!(
                    check(r, &from_bytes(&b.recv)),
                    "{coll:?} n={n} {algo:?} network={network}: wrong output on rank {r}"
                );
            }
        }
    }
}

#[test]
fn allreduce_all_shapes() {
    for n in 1..=9 {
        // 100_003 elements make several cache-sized chunks per block on memory links.
        let big: &[usize] = if n <= 4 { &[100_003] } else { &[] };
        for &count in [0usize, 1, 3, 7, 16, 33].iter().chain(big) {
            let expect: Vec<u64> = (0..count)
                .map(|i| (0..n).fold(0u64, |a, r| a.wrapping_add(val(r, i))))
                .collect();
            check_all(
                n,
                &Coll::AllReduce { count },
                &|r| ((0..count).map(|i| val(r, i)).collect(), fill(count)),
                &|_, out| out == expect.as_slice(),
            );
        }
    }
}

#[test]
fn reduce_scatter_all_shapes() {
    for n in 1..=9 {
        for count in [0usize, 1, 5] {
            check_all(
                n,
                &Coll::ReduceScatter { count },
                &|r| ((0..count * n).map(|i| val(r, i)).collect(), fill(count)),
                &|r, out| {
                    (0..count).all(|i| {
                        out[i] == (0..n).fold(0u64, |a, q| a.wrapping_add(val(q, r * count + i)))
                    })
                },
            );
        }
    }
}

#[test]
fn reduce_scatter_v_all_shapes() {
    for n in 1..=7 {
        let counts: Vec<usize> = (0..n).map(|r| (r * 3) % 5).collect();
        let displs: Vec<usize> = (0..n).map(|r| r * 6 + 1).collect();
        let extent = displs[n - 1] + 6;
        let c2 = counts.clone();
        let d2 = displs.clone();
        check_all(
            n,
            &Coll::ReduceScatterV { counts, displs },
            &|r| ((0..extent).map(|i| val(r, i)).collect(), fill(c2[r])),
            &|r, out| {
                (0..c2[r])
                    .all(|i| out[i] == (0..n).fold(0u64, |a, q| a.wrapping_add(val(q, d2[r] + i))))
            },
        );
    }
}

#[test]
fn allgather_all_shapes() {
    for n in 1..=9 {
        for count in [0usize, 1, 4] {
            check_all(
                n,
                &Coll::AllGather { count },
                &|r| ((0..count).map(|i| val(r, i)).collect(), fill(count * n)),
                &|_, out| (0..n).all(|q| (0..count).all(|i| out[q * count + i] == val(q, i))),
            );
        }
    }
}

#[test]
fn allgather_v_all_shapes() {
    for n in 1..=7 {
        let counts: Vec<usize> = (0..n).map(|r| (r * 2 + 1) % 4).collect();
        let displs: Vec<usize> = (0..n).map(|r| (n - 1 - r) * 4).collect();
        let c2 = counts.clone();
        let d2 = displs.clone();
        check_all(
            n,
            &Coll::AllGatherV { counts, displs },
            &|r| ((0..c2[r]).map(|i| val(r, i)).collect(), fill(n * 4)),
            &|_, out| (0..n).all(|q| (0..c2[q]).all(|i| out[d2[q] + i] == val(q, i))),
        );
    }
}

#[test]
fn broadcast_all_shapes() {
    for n in 1..=9 {
        for root in 0..n {
            for count in [0usize, 1, 9] {
                check_all(
                    n,
                    &Coll::Broadcast {
                        count,
                        root: root as u32,
                    },
                    // Broadcast works in the output buffer: the root's data starts there.
                    &|r| {
                        let init = if r == root {
                            (0..count).map(|i| val(root, i)).collect()
                        } else {
                            fill(count)
                        };
                        (Vec::new(), init)
                    },
                    &|_, out| (0..count).all(|i| out[i] == val(root, i)),
                );
            }
        }
    }
}

#[test]
fn reduce_all_shapes() {
    for n in 1..=9 {
        for root in [0, n / 2, n - 1] {
            for count in [0usize, 1, 11] {
                check_all(
                    n,
                    &Coll::Reduce {
                        count,
                        root: root as u32,
                    },
                    &|r| ((0..count).map(|i| val(r, i)).collect(), fill(count)),
                    &|r, out| {
                        r != root
                            || (0..count).all(|i| {
                                out[i] == (0..n).fold(0u64, |a, q| a.wrapping_add(val(q, i)))
                            })
                    },
                );
            }
        }
    }
}

#[test]
fn two_process_reduce_is_one_message_at_any_size() {
    // Above the threads' one-message limit: processes stage one message to the root, threads
    // reduce half each and gather; both sum exactly.
    let count = crate::algo::direct::ONE_STEP_REDUCE_MAX / ES + 3;
    for processes in [true, false] {
        for root in [0u32, 1] {
            let coll = Coll::Reduce { count, root };
            let scheds: Vec<Schedule> = (0..2)
                .map(|r| {
                    let c = Ctx {
                        processes,
                        ..ctx(r, 2, false)
                    };
                    build(&coll, &c, Algo::Direct)
                })
                .collect();
            let steps = if processes { 1 } else { 2 };
            assert!(scheds.iter().all(|s| s.steps.len() == steps), "{processes}");
            let mut bufs: Vec<RankBufs> = (0..2)
                .map(|r| RankBufs {
                    send: to_bytes(&(0..count).map(|i| val(r, i)).collect::<Vec<_>>()),
                    recv: to_bytes(&fill(count)),
                    ..Default::default()
                })
                .collect();
            run(&scheds, &mut bufs, &add).unwrap();
            let out = from_bytes(&bufs[root as usize].recv);
            assert!((0..count).all(|i| out[i] == val(0, i).wrapping_add(val(1, i))));
        }
    }
}

#[test]
fn crowded_reduce_is_one_message_per_leaf_up_to_its_limit() {
    use crate::algo::direct::CROWDED_ONE_STEP_REDUCE_MAX;
    let limit = CROWDED_ONE_STEP_REDUCE_MAX / ES;
    // (ranks, count, processes, crowded, deterministic, one step)
    for (n, count, processes, crowded, deterministic, one) in [
        (3, 11, true, true, false, true),
        (4, limit, true, true, false, true),
        (5, 1000, true, true, false, false),
        (4, limit + 1, true, true, false, false),
        (4, 1000, true, false, false, false),
        (4, 1000, false, true, false, false),
        (4, 1000, true, true, true, false),
    ] {
        for root in [0, n - 1] {
            let coll = Coll::Reduce { count, root };
            let scheds: Vec<Schedule> = (0..n as usize)
                .map(|r| {
                    let c = Ctx {
                        processes,
                        crowded,
                        deterministic,
                        ..ctx(r, n as usize, false)
                    };
                    build(&coll, &c, Algo::Direct)
                })
                .collect();
            let what = format!("n={n} count={count} p={processes} c={crowded} d={deterministic}");
            assert_eq!(scheds[0].steps.len() == 1, one, "{what}");
            if one {
                let recvs = scheds[root as usize].steps[0]
                    .actions
                    .iter()
                    .filter(|a| matches!(a, Action::RecvReduce { .. }))
                    .count();
                assert_eq!(recvs, n as usize - 1, "{what}");
            }
            let mut bufs: Vec<RankBufs> = (0..n as usize)
                .map(|r| RankBufs {
                    send: to_bytes(&(0..count).map(|i| val(r, i)).collect::<Vec<_>>()),
                    recv: to_bytes(&fill(count)),
                    ..Default::default()
                })
                .collect();
            run(&scheds, &mut bufs, &add).unwrap_or_else(|e| panic!("{what}: {e}"));
            let out = from_bytes(&bufs[root as usize].recv);
            assert!(
                (0..count).all(|i| out[i] == (0..n as usize).fold(0u64, |a, q| a.wrapping_add(val(q, i)))),
                "{what}"
            );
        }
    }
}

#[test]
fn scatter_all_shapes() {
    for n in 1..=8 {
        for root in [0, n - 1] {
            check_all(
                n,
                &Coll::Scatter {
                    count: 3,
                    root: root as u32,
                },
                &|r| ((0..3 * n).map(|i| val(r, i)).collect(), fill(3)),
                &|r, out| (0..3).all(|i| out[i] == val(root, r * 3 + i)),
            );
        }
    }
}

#[test]
fn alltoallv_all_shapes() {
    for n in 1..=8 {
        // Rank r sends (r + p) % 3 elements to p, laid out contiguously.
        let cnt = |r: usize, p: usize| (r + p) % 3;
        let sdis = |r: usize, p: usize| (0..p).map(|q| cnt(r, q)).sum::<usize>();
        let rdis = |r: usize, p: usize| (0..p).map(|q| cnt(q, r)).sum::<usize>();
        for me in 0..n {
            let coll = Coll::AlltoAllV {
                send_counts: (0..n).map(|p| cnt(me, p)).collect(),
                send_displs: (0..n).map(|p| sdis(me, p)).collect(),
                recv_counts: (0..n).map(|p| cnt(p, me)).collect(),
                recv_displs: (0..n).map(|p| rdis(me, p)).collect(),
            };
            // Each rank has its own argument vector, so build schedules per rank directly.
            for algo in ALGOS {
                for network in [false, true] {
                    let scheds: Vec<Schedule> = (0..n)
                        .map(|r| {
                            let c = Coll::AlltoAllV {
                                send_counts: (0..n).map(|p| cnt(r, p)).collect(),
                                send_displs: (0..n).map(|p| sdis(r, p)).collect(),
                                recv_counts: (0..n).map(|p| cnt(p, r)).collect(),
                                recv_displs: (0..n).map(|p| rdis(r, p)).collect(),
                            };
                            build(&c, &ctx(r, n, network), algo)
                        })
                        .collect();
                    let mut bufs: Vec<RankBufs> = (0..n)
                        .map(|r| {
                            let total: usize = (0..n).map(|p| cnt(r, p)).sum();
                            let rtotal: usize = (0..n).map(|p| cnt(p, r)).sum();
                            RankBufs {
                                send: to_bytes(&(0..total).map(|i| val(r, i)).collect::<Vec<_>>()),
                                recv: vec![0; rtotal * ES],
                                ..Default::default()
                            }
                        })
                        .collect();
                    run(&scheds, &mut bufs, &add).unwrap();
                    let out = from_bytes(&bufs[me].recv);
                    for p in 0..n {
                        for i in 0..cnt(p, me) {
                            assert_eq!(out[rdis(me, p) + i], val(p, sdis(p, me) + i), "{coll:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn barrier_completes() {
    for n in 1..=33 {
        let scheds: Vec<Schedule> = (0..n)
            .map(|r| build(&Coll::Barrier, &ctx(r, n, true), Algo::Direct))
            .collect();
        let mut bufs = vec![RankBufs::default(); n];
        run(&scheds, &mut bufs, &add).unwrap();
    }
}

#[test]
fn p2p_ring_in_one_step_completes() {
    for n in 2..=6 {
        let scheds: Vec<Schedule> = (0..n)
            .map(|r| {
                let items = vec![
                    P2pItem {
                        send: false,
                        peer: ((r + n - 1) % n) as u32,
                        bytes: 16,
                    },
                    P2pItem {
                        send: true,
                        peer: ((r + 1) % n) as u32,
                        bytes: 16,
                    },
                ];
                build(&Coll::P2p { items }, &ctx(r, n, true), Algo::Direct)
            })
            .collect();
        let mut bufs: Vec<RankBufs> = (0..n)
            .map(|r| RankBufs {
                ext: vec![vec![0; 16], vec![r as u8; 16]],
                ..Default::default()
            })
            .collect();
        run(&scheds, &mut bufs, &add).unwrap();
        for (r, b) in bufs.iter().enumerate() {
            assert_eq!(b.ext[0], vec![((r + n - 1) % n) as u8; 16]);
        }
    }
}

#[test]
fn sim_detects_deadlock() {
    // Two ranks that both only receive.
    let mut s = Schedule::new("bad");
    s.step().push(Action::Recv {
        peer: 1,
        dst: Span::new(Buf::Recv, 0, 0),
    });
    let mut t = Schedule::new("bad");
    t.step().push(Action::Recv {
        peer: 0,
        dst: Span::new(Buf::Recv, 0, 0),
    });
    let mut bufs = vec![RankBufs::default(); 2];
    assert!(run(&[s, t], &mut bufs, &add)
        .unwrap_err()
        .contains("deadlock"));
}

// ---- Symbolic checks: every op × algorithm × rank count 1…64, plus 1024 and 4096. ----

use super::{fingerprint, symbolic};

/// Host layouts to try for n ranks: flat, and (when n allows) uniform and uneven hosts.
fn layouts(n: u32) -> Vec<Topo> {
    let mut v = vec![Topo::flat(n)];
    if n >= 4 {
        let per = if n.is_multiple_of(4) { 4 } else { 2 };
        if n.is_multiple_of(per) {
            v.push(Topo::uniform(n / per, per));
        }
        // Uneven: hosts of 1, 2, 3, … ranks until n is used up.
        let mut sizes = Vec::new();
        let mut left = n;
        let mut k = 1;
        while left > 0 {
            sizes.push(k.min(left));
            left -= k.min(left);
            k += 1;
        }
        v.push(Topo::sized(&sizes));
    }
    v
}

fn colls(n: u32) -> Vec<Coll> {
    let nn = n as usize;
    let c = nn + 3;
    let counts: Vec<usize> = (0..nn).map(|r| (r * 7 + 1) % 4).collect();
    let mut displs = Vec::with_capacity(nn);
    let mut at = 0;
    for &k in &counts {
        displs.push(at);
        at += k + 1;
    }
    vec![
        Coll::AllReduce { count: c },
        Coll::AllReduce { count: 1 },
        Coll::AllGather { count: 2 },
        Coll::AllGatherV {
            counts: counts.clone(),
            displs: displs.clone(),
        },
        Coll::ReduceScatter { count: 2 },
        Coll::ReduceScatterV { counts, displs },
        Coll::Broadcast {
            count: c,
            root: n / 2,
        },
        Coll::Reduce {
            count: c,
            root: n - 1,
        },
        Coll::Scatter {
            count: 2,
            root: n / 3,
        },
    ]
}

#[test]
fn symbolic_exhaustive_1_to_64() {
    for n in 1..=64u32 {
        for topo in layouts(n) {
            for coll in colls(n) {
                for algo in Algo::ALL.into_iter().filter(|a| a.supports(&coll)) {
                    let what = || format!("{algo:?} {coll:?} n={n} hosts={:?}", topo.hosts());
                    let r = symbolic::check(&topo, &|_| coll.clone(), algo, true)
                        .unwrap_or_else(|e| panic!("{}: {e}", what()));
                    // Deterministic mode: no reduction may follow arrival order.
                    assert!(r.order_fixed, "{}", what());
                    // The fast proof agrees, down to the report.
                    let f = fingerprint::check(&topo, &|_| coll.clone(), algo, true)
                        .unwrap_or_else(|e| panic!("{}: fingerprint: {e}", what()));
                    assert_eq!(f, r, "{}", what());
                }
            }
        }
    }
}

#[test]
fn symbolic_alltoallv_1_to_64() {
    for n in 1..=64u32 {
        let cnt = |r: u32, p: u32| ((r + 2 * p) % 3) as usize;
        let coll_of = move |r: u32| {
            let sc: Vec<usize> = (0..n).map(|p| cnt(r, p)).collect();
            let rc: Vec<usize> = (0..n).map(|p| cnt(p, r)).collect();
            let pre = |v: &[usize]| {
                v.iter()
                    .scan(0, |a, &x| {
                        *a += x;
                        Some(*a - x)
                    })
                    .collect::<Vec<_>>()
            };
            Coll::AlltoAllV {
                send_displs: pre(&sc),
                recv_displs: pre(&rc),
                send_counts: sc,
                recv_counts: rc,
            }
        };
        for algo in [Algo::Direct, Algo::Pairwise] {
            let r = symbolic::check(&Topo::flat(n), &coll_of, algo, true)
                .unwrap_or_else(|e| panic!("{algo:?} n={n}: {e}"));
            let f = fingerprint::check(&Topo::flat(n), &coll_of, algo, true)
                .unwrap_or_else(|e| panic!("{algo:?} n={n}: fingerprint: {e}"));
            assert_eq!(f, r, "{algo:?} n={n}");
        }
    }
}

/// 1024 and 4096 ranks for the log-step algorithms (each well under a second here). Ring and
/// hier have O(n) steps per rank, so O(n²) simulated steps: 5 s / 0.3 s at 1024 but minutes at
/// 4096 — run those through `hccl_sim` instead of the test suite.
#[test]
fn symbolic_spot_checks_at_scale() {
    let cases: [(Topo, Coll, &[Algo]); 3] = [
        (
            Topo::uniform(128, 8),
            Coll::AllReduce { count: 4096 },
            &[Algo::Rhd, Algo::Tree, Algo::Hier],
        ),
        (
            Topo::uniform(128, 8),
            Coll::AllGather { count: 2 },
            &[Algo::Rhd, Algo::Bruck],
        ),
        (
            Topo::uniform(512, 8),
            Coll::AllReduce { count: 8192 },
            &[Algo::Rhd, Algo::Tree],
        ),
    ];
    for (topo, coll, algos) in cases {
        for &algo in algos {
            symbolic::check(&topo, &|_| coll.clone(), algo, true)
                .unwrap_or_else(|e| panic!("{algo:?} {coll:?} n={}: {e}", topo.n()));
        }
    }
}

#[test]
fn symbolic_catches_a_broken_schedule() {
    // Ring AllReduce with one rank's last allgather receive dropped: detected, not passed.
    let n = 5;
    let topo = Topo::flat(n);
    let coll = Coll::AllReduce { count: 10 };
    let mut scheds: Vec<Schedule> = (0..n)
        .map(|me| {
            let ctx = Ctx {
                me,
                n,
                elem: 1,
                network: true,
                topo: &topo,
                deterministic: true,
                processes: false,
                crowded: false,
            };
            build(&coll, &ctx, Algo::Ring)
        })
        .collect();
    scheds[2].steps.pop();
    assert!(symbolic::run(&scheds, &|_| coll.clone()).is_err());
}

#[test]
fn direct_is_order_dependent_only_when_allowed() {
    let topo = Topo::flat(4);
    // Above the 4 KiB small-message cut-off, where memory links reduce in arrival order.
    let coll = Coll::AllReduce { count: 8192 };
    let run = |det| {
        let scheds: Vec<Schedule> = (0..4)
            .map(|me| {
                let ctx = Ctx {
                    me,
                    n: 4,
                    elem: 1,
                    network: false,
                    topo: &topo,
                    deterministic: det,
                    processes: false,
                    crowded: false,
                };
                build(&coll, &ctx, Algo::Direct)
            })
            .collect();
        symbolic::run(&scheds, &|_| coll.clone()).unwrap()
    };
    assert!(!run(false).order_fixed);
    assert!(run(true).order_fixed);
}

// ---- Hierarchical forms over many host layouts, roots, sizes and pipeline depths. ----

/// Host layouts for the hierarchical tests: every sequence of 1–4 hosts of 1–4 ranks, hosts
/// whose ranks interleave, and some larger ones.
fn hier_layouts() -> Vec<Topo> {
    let mut v = Vec::new();
    let mut sizes: Vec<Vec<u32>> = vec![Vec::new()];
    for _ in 0..4 {
        sizes = sizes
            .iter()
            .flat_map(|s| {
                (1..=4).map(move |k| {
                    let mut t = s.clone();
                    t.push(k);
                    t
                })
            })
            .collect();
        v.extend(sizes.iter().map(|s| Topo::sized(s)));
    }
    for labels in ["abab", "abcab", "aabcbba", "abcdabcdaa", "baab"] {
        v.push(Topo::from_labels(&labels.chars().collect::<Vec<_>>()));
    }
    v.extend([
        Topo::uniform(2, 8),
        Topo::uniform(4, 4),
        Topo::uniform(8, 2),
        Topo::uniform(3, 5),
        Topo::sized(&[8, 3, 1, 6]),
    ]);
    v
}

/// Pipeline piece sizes in elements: one piece, a few, and the most the cap allows.
const HIER_PIECES: [usize; 3] = [1 << 30, 9, 2];

/// Rank `ctx.me`'s hier schedule for `coll`, with pieces of `piece` elements where it pipelines.
fn hier_build(coll: &Coll, ctx: &Ctx, piece: usize) -> Schedule {
    let pb = piece * ctx.elem;
    match *coll {
        Coll::AllReduce { count } => hier::allreduce(ctx, count, pb).finish(),
        Coll::Reduce { count, root } => hier::reduce(ctx, count, root, pb).finish(),
        Coll::Broadcast { count, root } => hier::broadcast(ctx, count, root, pb).finish(),
        _ => build(coll, ctx, Algo::Hier),
    }
}

fn hier_ctx(topo: &Topo, me: u32, elem: usize, det: bool) -> Ctx<'_> {
    Ctx {
        me,
        n: topo.n(),
        elem,
        network: true,
        topo,
        deterministic: det,
        processes: false,
        crowded: false,
    }
}

/// Checks `coll` with the hier forms on `topo`: symbolically (and, when deterministic, that no
/// reduction follows arrival order), then moving bytes with `setup`'s buffers (in place when
/// asked), after which rank r's output must satisfy `check(r, out)`.
#[allow(clippy::too_many_arguments)]
fn hier_case(
    topo: &Topo,
    coll: &Coll,
    piece: usize,
    det: bool,
    in_place: bool,
    setup: &dyn Fn(usize) -> (Vec<u64>, Vec<u64>),
    check: &dyn Fn(usize, &[u64]) -> bool,
) {
    let n = topo.n();
    let what = || format!("{coll:?} piece={piece} det={det} hosts={:?}", topo.hosts());
    let sym: Vec<Schedule> = (0..n)
        .map(|me| hier_build(coll, &hier_ctx(topo, me, 1, det), piece))
        .collect();
    let rep = symbolic::run(&sym, &|_| coll.clone())
        .unwrap_or_else(|e| panic!("{}: symbolic: {e}", what()));
    assert!(!det || rep.order_fixed, "{}: order follows arrival", what());
    let scheds: Vec<Schedule> = (0..n)
        .map(|me| hier_build(coll, &hier_ctx(topo, me, ES, det), piece))
        .collect();
    assert!(
        scheds.iter().all(|s| s.scratch == scheds[0].scratch),
        "{}: scratch differs between ranks",
        what()
    );
    let mut bufs: Vec<RankBufs> = (0..n as usize)
        .map(|r| {
            let (send, recv) = setup(r);
            RankBufs {
                send: to_bytes(&send),
                recv: to_bytes(&recv),
                in_place,
                ..Default::default()
            }
        })
        .collect();
    run(&scheds, &mut bufs, &add).unwrap_or_else(|e| panic!("{}: sim: {e}", what()));
    for (r, b) in bufs.iter().enumerate() {
        assert!(
            check(r, &from_bytes(&b.recv)),
            "{}: wrong output on rank {r}",
            what()
        );
    }
}

/// Element counts to try on `topo`: empty, one, fewer than the shards, a few per shard, and
/// enough for every pipeline depth of [`HIER_PIECES`].
fn hier_counts(topo: &Topo) -> Vec<usize> {
    let m = topo.max_per_host() as usize;
    let mut v = vec![0, 1, m.saturating_sub(1).max(1), 2 * m + 3, 40];
    v.dedup();
    v
}

fn sum_of(n: usize, i: usize) -> u64 {
    (0..n).fold(0u64, |a, q| a.wrapping_add(val(q, i)))
}

#[test]
fn hier_allreduce_pipelined_layouts() {
    for topo in hier_layouts() {
        let n = topo.n() as usize;
        for count in hier_counts(&topo) {
            let expect: Vec<u64> = (0..count).map(|i| sum_of(n, i)).collect();
            let input = |r: usize| (0..count).map(|i| val(r, i)).collect::<Vec<_>>();
            for piece in HIER_PIECES {
                for det in [false, true] {
                    let coll = Coll::AllReduce { count };
                    let ok = |_: usize, out: &[u64]| out == expect.as_slice();
                    hier_case(
                        &topo,
                        &coll,
                        piece,
                        det,
                        false,
                        &|r| (input(r), fill(count)),
                        &ok,
                    );
                    hier_case(&topo, &coll, piece, det, true, &|r| (vec![], input(r)), &ok);
                }
            }
        }
    }
}

#[test]
fn hier_reduce_every_root() {
    for topo in hier_layouts() {
        let n = topo.n() as usize;
        for count in hier_counts(&topo) {
            let expect: Vec<u64> = (0..count).map(|i| sum_of(n, i)).collect();
            let input = |r: usize| (0..count).map(|i| val(r, i)).collect::<Vec<_>>();
            for root in 0..n {
                let coll = Coll::Reduce {
                    count,
                    root: root as u32,
                };
                // Off the root the output must stay untouched: the caller may pass none.
                let ok = |r: usize, out: &[u64]| {
                    if r == root {
                        out == expect.as_slice()
                    } else {
                        out == fill(count).as_slice()
                    }
                };
                for piece in HIER_PIECES {
                    for det in [false, true] {
                        hier_case(
                            &topo,
                            &coll,
                            piece,
                            det,
                            false,
                            &|r| (input(r), fill(count)),
                            &ok,
                        );
                    }
                }
                // In place on the root.
                let ok_in_place = |r: usize, out: &[u64]| r != root || out == expect.as_slice();
                hier_case(
                    &topo,
                    &coll,
                    HIER_PIECES[1],
                    true,
                    true,
                    &|r| (vec![], input(r)),
                    &ok_in_place,
                );
            }
        }
    }
}

#[test]
fn hier_broadcast_every_root() {
    for topo in hier_layouts() {
        let n = topo.n() as usize;
        for count in hier_counts(&topo) {
            for root in 0..n {
                let coll = Coll::Broadcast {
                    count,
                    root: root as u32,
                };
                let setup = |r: usize| {
                    let init = if r == root {
                        (0..count).map(|i| val(root, i)).collect()
                    } else {
                        fill(count)
                    };
                    (Vec::new(), init)
                };
                let ok = |_: usize, out: &[u64]| (0..count).all(|i| out[i] == val(root, i));
                for piece in HIER_PIECES {
                    hier_case(&topo, &coll, piece, false, false, &setup, &ok);
                }
            }
        }
    }
}

#[test]
fn hier_reduce_scatter_layouts() {
    for topo in hier_layouts() {
        let n = topo.n() as usize;
        for count in [0usize, 1, 3] {
            let coll = Coll::ReduceScatter { count };
            let setup = |r: usize| ((0..count * n).map(|i| val(r, i)).collect(), fill(count));
            let ok = |r: usize, out: &[u64]| (0..count).all(|i| out[i] == sum_of(n, r * count + i));
            for det in [false, true] {
                hier_case(&topo, &coll, 1, det, false, &setup, &ok);
            }
        }
        for scale in [0usize, 1, 3] {
            // Uneven blocks (some empty) at displacements in reverse rank order, with gaps.
            let counts: Vec<usize> = (0..n).map(|r| scale * ((r * 3 + 1) % 4)).collect();
            let stride = 3 * scale + 2;
            let displs: Vec<usize> = (0..n).map(|r| (n - 1 - r) * stride + 1).collect();
            let extent = n * stride + 1;
            let coll = Coll::ReduceScatterV {
                counts: counts.clone(),
                displs: displs.clone(),
            };
            let setup = |r: usize| ((0..extent).map(|i| val(r, i)).collect(), fill(counts[r]));
            let ok = |r: usize, out: &[u64]| {
                out.len() == counts[r] && (0..counts[r]).all(|i| out[i] == sum_of(n, displs[r] + i))
            };
            for det in [false, true] {
                hier_case(&topo, &coll, 1, det, false, &setup, &ok);
            }
        }
    }
}

#[test]
fn hier_reduce_never_touches_the_output_off_the_root() {
    let touches = |a: &Action| match *a {
        Action::Send { src, .. } => src.buf == Buf::Recv,
        Action::Recv { dst, .. } | Action::RecvReduce { dst, .. } => dst.buf == Buf::Recv,
        Action::Copy { src, dst } | Action::Reduce { dst, src } => {
            src.buf == Buf::Recv || dst.buf == Buf::Recv
        }
    };
    for topo in [Topo::sized(&[3, 1, 2]), Topo::uniform(2, 4)] {
        for root in 0..topo.n() {
            for me in (0..topo.n()).filter(|&me| me != root) {
                for det in [false, true] {
                    let coll = Coll::Reduce { count: 50, root };
                    let s = hier_build(&coll, &hier_ctx(&topo, me, ES, det), 4);
                    assert!(!s.steps.iter().flat_map(|st| &st.actions).any(touches));
                }
            }
        }
    }
}

#[test]
fn hier_allreduce_pipelines_and_needs_little_scratch() {
    let topo = Topo::sized(&[4, 2, 4]);
    let count = 1000;
    for me in 0..topo.n() {
        let one = hier_build(
            &Coll::AllReduce { count },
            &hier_ctx(&topo, me, ES, true),
            count,
        );
        let piped = hier_build(
            &Coll::AllReduce { count },
            &hier_ctx(&topo, me, ES, true),
            100,
        );
        // Ten pieces over three hosts: 10 + 2·(3−1) + 1 steps instead of 2·3.
        assert_eq!(one.steps.len(), 6, "rank {me}");
        assert_eq!(piped.steps.len(), 15, "rank {me}");
        // Deterministic: the largest need is on the 4-rank hosts, 3 slots of one shard of one
        // piece (the 2-rank host needs 1 slot of two shards); otherwise none.
        assert_eq!(one.scratch, 3 * 250 * ES, "rank {me}");
        assert_eq!(piped.scratch, 3 * 25 * ES, "rank {me}");
        let loose = hier_build(
            &Coll::AllReduce { count },
            &hier_ctx(&topo, me, ES, false),
            100,
        );
        assert_eq!(loose.scratch, 0);
    }
}

#[test]
fn selector_picks_hier_across_hosts_for_large_messages() {
    let topo = Topo::uniform(4, 8);
    let ctx = hier_ctx(&topo, 0, 4, false);
    let count = 16 << 20;
    for coll in [
        Coll::AllReduce { count },
        Coll::ReduceScatter { count: count / 32 },
        Coll::Reduce { count, root: 9 },
        Coll::Broadcast { count, root: 9 },
    ] {
        assert_eq!(select::choose(&coll, &ctx), Algo::Hier, "{coll:?}");
    }
    // On one host a two-level AllReduce only adds steps.
    let flat = Topo::flat(8);
    let one = hier_ctx(&flat, 0, 4, false);
    assert_ne!(select::choose(&Coll::AllReduce { count }, &one), Algo::Hier);
}
