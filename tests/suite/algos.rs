//! Every algorithm forced through `hcclAlgo` / `HCCL_ALGO` on real ranks: threads of this
//! process with `HCCL_RANK_HOST_MAP` splitting them into "hosts" (so the two-level algorithms
//! run their level1 rings), and processes-worth of TCP sockets via root-info init with network
//! links forced. Each run must have used the forced algorithm (the schedules the communicator
//! ran, fallbacks included); outputs are checked on every element: bit-exact for inputs whose sums
//! are exact in any order, within the worst-case rounding of an f32 sum of n terms for inputs
//! whose sum depends on the order, and bit-identical on every rank and run to run under
//! `HCCL_DETERMINISTIC`.

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

/// Inputs of rank r: order-sensitive ([`input`]) or small integers, whose sums are exact in
/// any order ([`exact_input`]).
type Input = fn(u32, usize) -> Vec<f32>;

/// Both kinds of input, each with whether its sums are exact in any order.
const INPUTS: [(Input, bool); 2] = [(exact_input, true), (input, false)];

/// Small integers: every partial sum is exact, so any order gives the exact sum's bits.
fn exact_input(rank: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((rank as usize * 31 + i * 17) % 64) as f32 - 32.0)
        .collect()
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
fn run(comms: &[Communicator], count: usize, input: Input) -> Vec<(Vec<u32>, Vec<u32>)> {
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
                        compress: None,
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
                        compress: None,
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

/// Whether `got` is `inputs`' sum at element `i` as an f32 sum of them in some order can give
/// it: within γ(n−1)·Σ|x| of the exact sum (the worst-case rounding of n−1 additions in any
/// order, u = 2⁻²⁴), and bit-exact when the sum is exact in every order.
fn sum_ok(got: f32, inputs: &[Vec<f32>], i: usize, exact_in_any_order: bool) -> bool {
    let exact: f64 = inputs.iter().map(|v| v[i] as f64).sum();
    if exact_in_any_order {
        return got.to_bits() == (exact as f32).to_bits();
    }
    let k = (inputs.len() - 1) as f64;
    let u = (-24f64).exp2();
    let bound = k * u / (1.0 - k * u) * inputs.iter().map(|v| (v[i] as f64).abs()).sum::<f64>();
    (got as f64 - exact).abs() <= bound
}

fn check(outs: &[(Vec<u32>, Vec<u32>)], n: u32, count: usize, inp: (Input, bool), what: &str) {
    let (input, exact) = inp;
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.0, outs[0].0, "{what}: allreduce bits differ on rank {r}");
        assert_eq!(o.1, outs[0].1, "{what}: allgather bits differ on rank {r}");
    }
    let inputs: Vec<Vec<f32>> = (0..n).map(|r| input(r, count)).collect();
    for i in 0..count {
        let got = f32::from_bits(outs[0].0[i]);
        assert!(
            sum_ok(got, &inputs, i, exact),
            "{what}: element {i}: {got} vs {}",
            inputs.iter().map(|v| v[i] as f64).sum::<f64>()
        );
    }
    let gathered: Vec<u32> = inputs.iter().flatten().map(|x| x.to_bits()).collect();
    assert!(outs[0].1 == gathered, "{what}: allgather output differs");
}

/// The schedules a forced `HCCL_ALGO` level1 value must run for (AllReduce, AllGather): the
/// algorithm itself, or for an operation it has no schedule for, its documented fallback.
fn expected_schedules(level1: &str) -> (&'static str, &'static str) {
    match level1 {
        "ring" => ("ring", "ring"),
        "H-D_R" => ("rhd", "rhd"),
        "tree" => ("tree", "rhd"),
        "NB" => ("rhd", "bruck"),
        // Deterministic (or networked) mesh AllReduce gathers, then reduces in rank order.
        "fullmesh" => ("direct-gather", "direct"),
        "hier" => ("hier", "hier"),
        other => panic!("no expectation for {other}"),
    }
}

/// Every communicator ran AllReduce and AllGather of `count` fp32 with the schedules
/// `level1` forces, in every segment.
fn check_schedules(comms: &[Communicator], count: usize, level1: &str) {
    let (ar, ag) = expected_schedules(level1);
    for c in comms {
        for (coll, want) in [
            (Coll::AllReduce { count }, ar),
            (Coll::AllGather { count }, ag),
        ] {
            let ran = c
                .schedules_run(&coll, 4)
                .unwrap_or_else(|| panic!("{level1}: {coll:?} never ran"));
            assert!(
                !ran.is_empty() && ran.iter().all(|&x| x == want),
                "{level1}: rank {} ran {coll:?} with {ran:?}, not {want}",
                c.rank()
            );
        }
    }
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
            let what = format!("{a} count {count}");
            check(
                &run(&comms, count, exact_input),
                n as u32,
                count,
                INPUTS[0],
                &what,
            );
            let first = run(&comms, count, input);
            check(&first, n as u32, count, INPUTS[1], &what);
            check_schedules(&comms, count, a);
            // Same inputs, same topology: the same bits, run after run.
            for _ in 0..3 {
                assert_eq!(run(&comms, count, input), first, "{what}: run-to-run bits");
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
        for inp in INPUTS {
            check(&run(&comms, 50_003, inp.0), n, 50_003, inp, a);
        }
        check_schedules(&comms, 50_003, a);
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
                        compress: None,
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
        for c in &comms {
            let ran = c.schedules_run(coll, 4).expect("it ran");
            assert!(
                !ran.is_empty() && ran.iter().all(|&x| x == "hier"),
                "rank {} ran {coll:?} with {ran:?}",
                c.rank()
            );
        }
        first
    };
    // 1.2 M floats are 4.8 MB: two pipeline pieces.
    for (count, (input, exact)) in [1usize, 5, 1_200_001]
        .into_iter()
        .flat_map(|c| INPUTS.map(|i| (c, i)))
    {
        let inputs: Vec<Vec<f32>> = (0..n).map(|r| input(r, count)).collect();
        for root in 0..n {
            let outs = twice(&Coll::Reduce { count, root }, &inputs, count);
            let got = &outs[root as usize];
            for (i, &g) in got.iter().enumerate() {
                assert!(
                    sum_ok(f32::from_bits(g), &inputs, i, exact),
                    "reduce root {root} [{i}]: {} vs {}",
                    f32::from_bits(g),
                    exact_sum(&inputs, i)
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
            for (i, &g) in o.iter().enumerate() {
                assert!(
                    sum_ok(f32::from_bits(g), &inputs, r * block + i, exact),
                    "reduce-scatter rank {r} [{i}]: {} vs {}",
                    f32::from_bits(g),
                    exact_sum(&inputs, r * block + i)
                );
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
