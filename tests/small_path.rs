//! The small-message path (inputs up to 4 KiB among ranks of one host): AllReduce and Reduce of
//! rounding fp16, bf16, fp32 and fp64 inputs, on rank threads, compared bit for bit with a
//! reference written here that folds every element in rank order 0, 1, …, n−1, one rounding per
//! operation (fp16/bf16 in f32, rounded to nearest even). Every rank must hold the same bits.
//! The inputs are checked to be order-sensitive, so another order cannot pass.

mod common;

use common::rounding::{self, combine, encode};
use common::*;
use hccl::ffi::coll_api::{HcclAllReduce, HcclReduce};
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::ptr::null_mut;

const DTYPES: [u32; 4] = [FP16, BF16, FP32, FP64];
/// Largest input that takes the path.
const MAX_BYTES: usize = 4096;

/// Element `i` of `rank`'s input (see [`rounding::value`]).
fn value(dt: u32, op: u32, rank: u32, i: usize) -> f64 {
    rounding::value(&[dt as u64, op as u64, rank as u64, i as u64, 0x5a11], op)
}

fn input(dt: u32, op: u32, rank: u32, count: usize) -> Vec<u64> {
    (0..count)
        .map(|i| encode(dt, value(dt, op, rank, i)))
        .collect()
}

/// Every element folded over the ranks in `order`.
fn reference(dt: u32, op: u32, count: usize, order: &[u32]) -> Vec<u64> {
    let inputs: Vec<Vec<u64>> = order.iter().map(|&r| input(dt, op, r, count)).collect();
    (0..count)
        .map(|i| {
            let mut acc = inputs[0][i];
            for x in &inputs[1..] {
                acc = combine(dt, op, acc, x[i]);
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

/// Counts tried per type: a few elements, and as many as fill the path's limit.
fn counts(dt: u32) -> [usize; 2] {
    [7, MAX_BYTES / esize(dt)]
}

/// Every case as rank `rank` of `n`; returns failures and a digest of every AllReduce output.
fn rank_cases(comm: HcclComm, rank: u32, n: u32) -> (Vec<String>, u64) {
    let mut fails = Vec::new();
    let mut digest = 0u64;
    let order: Vec<u32> = (0..n).collect();
    let root = n - 1;
    for dt in DTYPES {
        for op in [SUM, PROD] {
            for count in counts(dt) {
                let send = to_bytes(dt, &input(dt, op, rank, count));
                let want = to_bytes(dt, &reference(dt, op, count, &order));
                let what = format!("{} {} x{count} on {n} ranks", dt_name(dt), op_name(op));
                let mut recv = poison(send.len(), rank as u64);
                let (sp, rp) = (send.as_ptr() as *mut _, recv.as_mut_ptr() as *mut _);
                let rc = unsafe { HcclAllReduce(sp, rp, count as u64, dt, op, comm, null_mut()) };
                if rc != OK {
                    fails.push(format!("rank {rank}: AllReduce {what}: {rc:?}"));
                } else if let Some(d) = diff(dt, &recv, &want) {
                    fails.push(format!("rank {rank}: AllReduce {what}: {d}"));
                }
                digest = seed(&[digest, recv.iter().fold(0u64, |h, &b| mix(h ^ b as u64))]);
                // In place.
                let mut buf = send.clone();
                let bp = buf.as_mut_ptr() as *mut _;
                let rc = unsafe { HcclAllReduce(bp, bp, count as u64, dt, op, comm, null_mut()) };
                if rc != OK || buf != recv {
                    fails.push(format!("rank {rank}: in-place AllReduce {what}: {rc:?}"));
                }
                let mut recv = poison(send.len(), rank as u64 + 1);
                let rp = recv.as_mut_ptr() as *mut _;
                let rc =
                    unsafe { HcclReduce(sp, rp, count as u64, dt, op, root, comm, null_mut()) };
                if rc != OK {
                    fails.push(format!("rank {rank}: Reduce {what}: {rc:?}"));
                } else if rank == root {
                    if let Some(d) = diff(dt, &recv, &want) {
                        fails.push(format!("rank {rank}: Reduce {what}: {d}"));
                    }
                } else if recv != poison(send.len(), rank as u64 + 1) {
                    fails.push(format!(
                        "rank {rank}: Reduce {what}: a leaf's output changed"
                    ));
                }
            }
        }
    }
    (fails, digest)
}

/// A wrong order would show: folding the inputs in another order changes some bits.
#[test]
fn inputs_are_order_sensitive() {
    for n in [3u32, 5] {
        for dt in DTYPES {
            for op in [SUM, PROD] {
                let count = counts(dt)[1];
                let fwd: Vec<u32> = (0..n).collect();
                let mut rot = fwd.clone();
                rot.rotate_left(1);
                let a = reference(dt, op, count, &fwd);
                let b = reference(dt, op, count, &rot);
                let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
                assert!(
                    differ > count / 100,
                    "{} {} n={n}: only {differ} elements depend on the order",
                    dt_name(dt),
                    op_name(op)
                );
            }
        }
    }
}

#[test]
fn threads_reduce_in_rank_order_with_identical_bits() {
    for n in [2u32, 3, 5] {
        let ri = root_info();
        let outs: Vec<(Vec<String>, u64)> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let ri = &ri;
                    sc.spawn(move || {
                        let mut c: HcclComm = null_mut();
                        let rc = unsafe { HcclCommInitRootInfo(n, ri, r, &mut c) };
                        assert_eq!(rc, OK, "init rank {r}");
                        let out = rank_cases(c, r, n);
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
            "{n} ranks: ranks hold different bits"
        );
    }
}
