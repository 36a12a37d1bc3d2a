//! Floating-point reductions across ranks with values that round: fp16, bf16, fp32 and fp64 sums
//! and products of random, inexact inputs, through the C API, on rank threads and on rank
//! processes (shared memory). Each output is compared bit for bit with a reference computed here
//! that follows the documented order, one rounding per addition or multiplication (fp16/bf16 in
//! f32, then rounded to nearest even):
//! - `fullmesh` (direct) with `hcclDeterministic`: every element folded in rank order 0, 1, …;
//! - `ring`: block b of the n near-equal blocks (the first `count % n` one element longer)
//!   folded from rank b around the ring: b, b+1, …, b−1.
//!
//! Every rank must hold the same bits. The inputs are checked to be order-sensitive: folding them
//! in another order gives other bits, so a wrong order cannot pass.

use crate::common::rounding::{self, combine, encode};
use crate::common::*;
use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::os::raw::c_char;
use std::process::Command;
use std::ptr::null_mut;
use std::time::Duration;

/// Elements per operation: not a multiple of any rank count used, so ring blocks differ.
const COUNT: usize = 4099;
const ALGOS: [&str; 2] = ["fullmesh", "ring"];
const DTYPES: [u32; 4] = [FP16, BF16, FP32, FP64];

/// The communicator config `HcclCommConfigInit` would give, with `hcclAlgo` forcing `level1`
/// and deterministic reductions.
fn config(level1: &str) -> HcclCommConfig {
    let mut c: HcclCommConfig = unsafe { std::mem::zeroed() };
    let raw = &mut c as *mut HcclCommConfig as *mut u8;
    unsafe {
        std::ptr::write_unaligned(raw as *mut usize, std::mem::size_of::<HcclCommConfig>());
        std::ptr::write_unaligned(raw.add(8) as *mut u32, 0xf0f0_f0f0);
        std::ptr::write_unaligned(raw.add(12) as *mut u32, 10);
    }
    c.hcclBufferSize = u32::MAX;
    c.hcclDeterministic = 1;
    c.hcclRdmaTrafficClass = u32::MAX;
    c.hcclRdmaServiceLevel = u32::MAX;
    c.hcclQos = u32::MAX;
    c.hcclSymWinMaxMemSizePerRank = 16;
    c.hcclExecTimeOut = 60;
    let algo = format!("level0:NA;level1:{level1}");
    for (d, s) in c.hcclAlgo.iter_mut().zip(algo.bytes()) {
        *d = s as c_char;
    }
    c
}

/// Element `i` of `rank`'s input (see [`rounding::value`]).
fn value(dt: u32, op: u32, rank: u32, i: usize) -> f64 {
    rounding::value(&[dt as u64, op as u64, rank as u64, i as u64], op)
}

fn input(dt: u32, op: u32, rank: u32) -> Vec<u64> {
    (0..COUNT)
        .map(|i| encode(dt, value(dt, op, rank, i)))
        .collect()
}

/// The ranks in the order their contributions to element `i` are folded.
fn order(algo: &str, n: u32, i: usize) -> Vec<u32> {
    match algo {
        "fullmesh" => (0..n).collect(),
        _ => {
            let (base, extra) = (COUNT / n as usize, COUNT % n as usize);
            // Blocks 0..extra have base + 1 elements, the rest base.
            let b = if i < extra * (base + 1) {
                i / (base + 1)
            } else {
                extra + (i - extra * (base + 1)) / base
            } as u32;
            (0..n).map(|j| (b + j) % n).collect()
        }
    }
}

/// The reference output: every element folded in `order`.
fn reference(
    algo: &str,
    dt: u32,
    op: u32,
    n: u32,
    fold: impl Fn(Vec<u32>) -> Vec<u32>,
) -> Vec<u64> {
    let inputs: Vec<Vec<u64>> = (0..n).map(|r| input(dt, op, r)).collect();
    (0..COUNT)
        .map(|i| {
            let ranks = fold(order(algo, n, i));
            let mut acc = inputs[ranks[0] as usize][i];
            for &r in &ranks[1..] {
                acc = combine(dt, op, acc, inputs[r as usize][i]);
            }
            acc
        })
        .collect()
}

fn to_bytes(dt: u32, v: &[u64]) -> Vec<u8> {
    let es = esize(dt);
    v.iter()
        .flat_map(|x| x.to_le_bytes()[..es].to_vec())
        .collect()
}

/// Runs every (dtype, op) case as rank `rank` on `comm` (forced to `algo`); returns failures
/// and a digest of every output, for comparing ranks.
fn rank_cases(comm: HcclComm, algo: &str, rank: u32, n: u32) -> (Vec<String>, u64) {
    let mut fails = Vec::new();
    let mut digest = 0u64;
    for dt in DTYPES {
        for op in [SUM, PROD] {
            let send = to_bytes(dt, &input(dt, op, rank));
            let mut recv = poison(send.len(), rank as u64);
            let rc = unsafe {
                HcclAllReduce(
                    send.as_ptr() as *mut _,
                    recv.as_mut_ptr() as *mut _,
                    COUNT as u64,
                    dt,
                    op,
                    comm,
                    null_mut(),
                )
            };
            let what = format!("{algo} {} {} on {n} ranks", dt_name(dt), op_name(op));
            if rc != OK {
                fails.push(format!("rank {rank}: {what}: {rc:?}"));
                continue;
            }
            let want = to_bytes(dt, &reference(algo, dt, op, n, |o| o));
            if let Some(d) = diff(dt, &recv, &want) {
                fails.push(format!("rank {rank}: {what}: {d}"));
            }
            digest = seed(&[digest, recv.iter().fold(0u64, |h, &b| mix(h ^ b as u64))]);
        }
    }
    (fails, digest)
}

/// The inputs would expose a wrong order: folding them reversed changes some bits, for every
/// case and every rank count tested.
#[test]
fn inputs_are_order_sensitive() {
    for n in [3u32, 5] {
        for algo in ALGOS {
            for dt in DTYPES {
                for op in [SUM, PROD] {
                    let fwd = reference(algo, dt, op, n, |o| o);
                    let rev = reference(algo, dt, op, n, |o| o.into_iter().rev().collect());
                    let differ = fwd.iter().zip(&rev).filter(|(a, b)| a != b).count();
                    assert!(
                        differ > COUNT / 100,
                        "{algo} {} {} n={n}: only {differ} elements depend on the order",
                        dt_name(dt),
                        op_name(op)
                    );
                }
            }
        }
    }
}

/// Rank threads of one process (memory links).
#[test]
fn threads_follow_the_documented_order() {
    for n in [2u32, 3, 5] {
        for algo in ALGOS {
            let ri = root_info();
            let cfg = config(algo);
            let outs: Vec<(Vec<String>, u64)> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..n)
                    .map(|r| {
                        let (ri, cfg) = (&ri, &cfg);
                        sc.spawn(move || {
                            let mut c: HcclComm = null_mut();
                            let rc = unsafe { HcclCommInitRootInfoConfig(n, ri, r, cfg, &mut c) };
                            assert_eq!(rc, OK, "init rank {r}");
                            let out = rank_cases(c, algo, r, n);
                            assert_eq!(unsafe { HcclCommDestroy(c) }, OK);
                            out
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let fails: Vec<&String> = outs.iter().flat_map(|o| &o.0).collect();
            assert!(fails.is_empty(), "{fails:#?}");
            assert!(
                outs.iter().all(|o| o.1 == outs[0].1),
                "{algo} on {n} ranks: ranks hold different bits"
            );
        }
    }
}

const RANK_VAR: &str = "HCCL_TEST_FLOAT_RANK";
const ROOTS_VAR: &str = "HCCL_TEST_FLOAT_ROOTS";
const PROCS: u32 = 3;

/// Rank processes of one host (shared-memory links, single copy for the larger messages).
#[test]
fn processes_follow_the_documented_order() {
    if let Ok(rank) = std::env::var(RANK_VAR) {
        let rank: u32 = rank.parse().unwrap();
        let roots = std::env::var(ROOTS_VAR).unwrap();
        for (algo, hex) in ALGOS.iter().zip(roots.split(',')) {
            let ri = root_info_from_bytes(&hex_decode(hex));
            let mut c: HcclComm = null_mut();
            let rc = unsafe { HcclCommInitRootInfoConfig(PROCS, &ri, rank, &config(algo), &mut c) };
            assert_eq!(rc, OK, "init rank {rank}");
            let (fails, digest) = rank_cases(c, algo, rank, PROCS);
            assert_eq!(unsafe { HcclCommDestroy(c) }, OK);
            assert!(fails.is_empty(), "{fails:#?}");
            println!("DIGEST {algo} {digest}");
        }
        return;
    }
    let roots: Vec<String> = ALGOS
        .iter()
        .map(|_| hex_encode(&root_info_bytes(&root_info())))
        .collect();
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<Spawned> = (0..PROCS)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.args([
                "--exact",
                &test_path("processes_follow_the_documented_order"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(RANK_VAR, rank.to_string())
            .env(ROOTS_VAR, roots.join(","))
            .env("HCCL_CONNECT_TIMEOUT", "60")
            .env("ASCEND_GLOBAL_LOG_LEVEL", "1");
            spawn_piped(c)
        })
        .collect();
    let mut digests = Vec::new();
    let outs = finish_passed(kids, Duration::from_secs(180), "float order");
    for (rank, o) in outs.into_iter().enumerate() {
        assert!(
            o.stderr.contains(&format!("{} shm peers", PROCS - 1)),
            "rank {rank} was not on shared memory:\n{}",
            tail(&o.stderr, 3000)
        );
        let d: Vec<String> = o
            .stdout
            .lines()
            .filter_map(|l| l.find("DIGEST ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(d.len(), ALGOS.len(), "rank {rank}: {}", o.stdout);
        digests.push(d);
    }
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "ranks hold different bits: {digests:?}"
    );
}
