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

const ALGOS: [Algo; 4] = [Algo::Direct, Algo::Ring, Algo::Chain, Algo::Pairwise];

fn ctx(me: usize, n: usize, network: bool) -> Ctx {
    Ctx {
        me: me as u32,
        n: n as u32,
        elem: ES,
        network,
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
        for count in [0usize, 1, 3, 7, 16, 33] {
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
