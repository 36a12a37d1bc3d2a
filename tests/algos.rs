//! Every algorithm forced through `hcclAlgo` / `HCCL_ALGO` on real ranks: threads of this
//! process with `HCCL_RANK_HOST_MAP` splitting them into "hosts" (so the two-level algorithms
//! run their level1 rings), and processes-worth of TCP sockets via root-info init with network
//! links forced. Outputs must be right, bit-identical on every rank, and bit-identical run to
//! run under `HCCL_DETERMINISTIC` (float sums whose value depends on the reduction order).

use std::collections::HashMap;
use std::sync::Arc;

use hccl::algo::{Algo, Coll};
use hccl::base::dtype::{DataType, ReduceOp};
use hccl::base::env::EnvConfig;
use hccl::comm::communicator::{create_root_info, Communicator, OpArgs};
use hccl::comm::config::{CommConfig, Overrides};

fn env(pairs: &[(&str, &str)]) -> EnvConfig {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    EnvConfig::from_lookup(|k| map.get(k).cloned()).expect("valid test environment")
}

fn config(algo: &str, hosts: &str, tcp: bool) -> CommConfig {
    let mut pairs = vec![
        ("HCCL_DETERMINISTIC", "true"),
        ("HCCL_RANK_HOST_MAP", hosts),
        ("HCCL_CONNECT_TIMEOUT", "30"),
        ("HCCL_EXEC_TIMEOUT", "60"),
    ];
    if tcp {
        pairs.push(("HCCL_INTRA_ROCE_ENABLE", "1"));
    }
    let ov = Overrides {
        algo: Some(algo.to_string()),
        ..Default::default()
    };
    CommConfig::merge(&ov, &env(&pairs)).expect("valid algorithm text")
}

/// Inputs whose float sum depends on the order of reduction.
fn input(rank: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| {
            let x = ((rank as usize * 7919 + i * 104729) % 1000) as f32;
            (x - 500.0) * 1.37e-3
                + if rank.is_multiple_of(2) {
                    1e4
                } else {
                    -1e4 + 0.3
                }
        })
        .collect()
}

/// Runs AllReduce and AllGather on every communicator (one thread per rank); returns each
/// rank's (allreduce, allgather) output bits.
fn run(comms: &[Communicator], count: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    let n = comms.len();
    std::thread::scope(|sc| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                sc.spawn(move || {
                    let r = c.rank();
                    let send = input(r, count);
                    let mut red = vec![0f32; count];
                    c.execute(&OpArgs {
                        name: "AllReduce",
                        coll: Coll::AllReduce { count },
                        dtype: DataType::Fp32,
                        op: Some(ReduceOp::Sum),
                        send: send.as_ptr() as usize,
                        recv: red.as_mut_ptr() as usize,
                        ext: Vec::new(),
                    })
                    .unwrap_or_else(|e| panic!("rank {r} allreduce: {e}"));
                    let mut gat = vec![0f32; count * n];
                    c.execute(&OpArgs {
                        name: "AllGather",
                        coll: Coll::AllGather { count },
                        dtype: DataType::Fp32,
                        op: None,
                        send: send.as_ptr() as usize,
                        recv: gat.as_mut_ptr() as usize,
                        ext: Vec::new(),
                    })
                    .unwrap_or_else(|e| panic!("rank {r} allgather: {e}"));
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    (bits(&red), bits(&gat))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

fn check(outs: &[(Vec<u32>, Vec<u32>)], n: u32, count: usize, what: &str) {
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.0, outs[0].0, "{what}: allreduce bits differ on rank {r}");
        assert_eq!(o.1, outs[0].1, "{what}: allgather bits differ on rank {r}");
    }
    let inputs: Vec<Vec<f32>> = (0..n).map(|r| input(r, count)).collect();
    for i in 0..count {
        let exact: f64 = inputs.iter().map(|v| v[i] as f64).sum();
        let got = f32::from_bits(outs[0].0[i]) as f64;
        assert!(
            (got - exact).abs() < 0.05,
            "{what}: element {i}: {got} vs {exact}"
        );
    }
    let gathered: Vec<u32> = inputs.iter().flatten().map(|x| x.to_bits()).collect();
    assert!(outs[0].1 == gathered, "{what}: allgather output differs");
}

const ALGOS: [&str; 6] = ["ring", "H-D_R", "tree", "NB", "fullmesh", "hier"];

fn level1(a: &str) -> String {
    format!("level0:NA;level1:{a}")
}

/// Threads, memory links, 7 ranks on uneven "hosts" (3 + 2 + 2).
#[test]
fn every_algorithm_on_threads_over_uneven_hosts() {
    let hosts = "a,a,a,b,b,c,c";
    let n = 7;
    let devices: Vec<i32> = (0..n).collect();
    for a in ALGOS {
        let comms =
            Communicator::init_all(&devices, config(&level1(a), hosts, false)).expect("init");
        assert_eq!(comms[0].topology().hosts().len(), 3);
        for count in [1usize, 1000, 70_001] {
            let first = run(&comms, count);
            check(&first, n as u32, count, &format!("{a} count {count}"));
            // Same inputs, same topology: the same bits, run after run.
            for _ in 0..3 {
                assert_eq!(
                    run(&comms, count),
                    first,
                    "{a} count {count}: run-to-run bits"
                );
            }
        }
    }
}

/// TCP sockets between rank threads (network links forced), 4 ranks on 2 "hosts", each
/// algorithm forced per operation.
#[test]
fn every_algorithm_over_tcp_per_op_spec() {
    let n = 4u32;
    for a in ALGOS {
        let spec = format!("allreduce={}/allgather={}", level1(a), level1(a));
        let cfg = config(&spec, "x,x,y,y", true);
        let info = Arc::new(create_root_info(&cfg.env).expect("root info"));
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (info, cfg) = (info.clone(), cfg.clone());
                std::thread::spawn(move || Communicator::init_root_info(n, &info, r, cfg))
            })
            .collect();
        let comms: Vec<Communicator> = hs
            .into_iter()
            .map(|h| h.join().expect("init thread").expect("init"))
            .collect();
        let outs = run(&comms, 50_003);
        check(&outs, n, 50_003, a);
    }
}

/// One rooted or scattering operation on every rank at once (one thread per rank); returns
/// each rank's output bits. A Reduce passes no output buffer off the root, as callers may.
fn run_op(
    comms: &[Communicator],
    coll: &Coll,
    inputs: &[Vec<f32>],
    out_len: usize,
) -> Vec<Vec<u32>> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = comms
            .iter()
            .map(|c| {
                sc.spawn(move || {
                    let r = c.rank();
                    let mut out = match coll {
                        Coll::Broadcast { root, .. } if *root != r => vec![0f32; out_len],
                        Coll::Broadcast { .. } => inputs[r as usize].clone(),
                        _ => vec![0f32; out_len],
                    };
                    let recv = match coll {
                        Coll::Reduce { root, .. } if *root != r => 0,
                        _ => out.as_mut_ptr() as usize,
                    };
                    let (name, op, send) = match coll {
                        Coll::Broadcast { .. } => ("Broadcast", None, recv),
                        Coll::Reduce { .. } => (
                            "Reduce",
                            Some(ReduceOp::Sum),
                            inputs[r as usize].as_ptr() as usize,
                        ),
                        _ => (
                            "ReduceScatter",
                            Some(ReduceOp::Sum),
                            inputs[r as usize].as_ptr() as usize,
                        ),
                    };
                    c.execute(&OpArgs {
                        name,
                        coll: coll.clone(),
                        dtype: DataType::Fp32,
                        op,
                        send,
                        recv,
                        ext: Vec::new(),
                    })
                    .unwrap_or_else(|e| panic!("rank {r} {name}: {e}"));
                    out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// The sum of `inputs` at element `i`, exactly.
fn exact_sum(inputs: &[Vec<f32>], i: usize) -> f64 {
    inputs.iter().map(|v| v[i] as f64).sum()
}

/// Hier ReduceScatter, Reduce and Broadcast forced on threads over interleaved, uneven "hosts"
/// (3 + 2 + 2), every root, sizes up to several pipeline pieces: right, and the same bits run
/// after run.
#[test]
fn hier_reduce_scatter_reduce_broadcast_on_uneven_hosts() {
    let n = 7u32;
    let devices: Vec<i32> = (0..n as i32).collect();
    let comms = Communicator::init_all(&devices, config(&level1("hier"), "a,b,a,c,b,a,c", false))
        .expect("init");
    assert_eq!(comms[0].topology().hosts().len(), 3);
    let twice = |coll: &Coll, inputs: &[Vec<f32>], len: usize| {
        let first = run_op(&comms, coll, inputs, len);
        assert_eq!(
            run_op(&comms, coll, inputs, len),
            first,
            "{coll:?}: run-to-run bits"
        );
        first
    };
    // 1.2 M floats are 4.8 MB: two pipeline pieces.
    for count in [1usize, 5, 1_200_001] {
        let inputs: Vec<Vec<f32>> = (0..n).map(|r| input(r, count)).collect();
        for root in 0..n {
            let outs = twice(&Coll::Reduce { count, root }, &inputs, count);
            let got = &outs[root as usize];
            for i in (0..count).step_by(997) {
                let v = f32::from_bits(got[i]) as f64;
                assert!(
                    (v - exact_sum(&inputs, i)).abs() < 0.05,
                    "reduce root {root} [{i}]"
                );
            }
            let outs = twice(&Coll::Broadcast { count, root }, &inputs, count);
            let want: Vec<u32> = inputs[root as usize].iter().map(|x| x.to_bits()).collect();
            for (r, o) in outs.iter().enumerate() {
                assert!(*o == want, "broadcast root {root}: rank {r} differs");
            }
        }
        let block = count.div_ceil(n as usize);
        let inputs: Vec<Vec<f32>> = (0..n).map(|r| input(r, block * n as usize)).collect();
        let outs = twice(&Coll::ReduceScatter { count: block }, &inputs, block);
        for (r, o) in outs.iter().enumerate() {
            for i in (0..block).step_by(991) {
                let v = f32::from_bits(o[i]) as f64;
                let want = exact_sum(&inputs, r * block + i);
                assert!((v - want).abs() < 0.05, "reduce-scatter rank {r} [{i}]");
            }
        }
    }
}

#[test]
fn bad_algorithm_text_fails_init_with_the_valid_values() {
    let e = CommConfig::merge(
        &Overrides {
            algo: Some("level0:NA;level1:hypercube".into()),
            ..Default::default()
        },
        &env(&[]),
    )
    .unwrap_err();
    assert_eq!(e.kind, hccl::base::error::ErrorKind::Para);
    for v in ["ring", "H-D_R", "NB", "pairwise"] {
        assert!(e.msg.contains(v), "{}", e.msg);
    }
    // Every name the simulator prints is a real algorithm.
    for a in Algo::ALL {
        assert_eq!(Algo::from_name(a.name()), Some(a));
    }
}
