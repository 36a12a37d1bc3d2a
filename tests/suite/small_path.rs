//! The small-message path (inputs up to 4 KiB among ranks of one host): AllReduce and Reduce of
//! rounding fp16, bf16, fp32 and fp64 inputs, on rank threads, compared bit for bit with a
//! reference written here that folds every element in rank order 0, 1, …, n−1, one rounding per
//! operation (fp16/bf16 in f32, rounded to nearest even). Every rank must hold the same bits.
//! The inputs are checked to be order-sensitive, so another order cannot pass.
//!
//! ReduceScatter is checked the same way (each block folded in rank order); AllGather, AlltoAll
//! and point-to-point transfers (Send/Recv and batches, many in a row so that the shared-memory
//! ring fills and the queued path takes over) move byte patterns that name their source rank,
//! destination and index. Every case runs on 2, 3 and 4 rank threads and on 2 and 4 rank
//! processes over shared memory.

use crate::common::rounding::{self, combine, encode};
use crate::common::*;
use hccl::ffi::coll_api::{
    HcclAllGather, HcclAllReduce, HcclAlltoAll, HcclBatchSendRecv, HcclRecv, HcclReduce,
    HcclReduceScatter, HcclSend,
};
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::os::raw::c_void;
use std::process::Command;
use std::ptr::null_mut;
use std::time::Duration;

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
    reference_range(dt, op, 0, count, order)
}

/// Elements `start..start + count` of the inputs, each folded over the ranks in `order`.
fn reference_range(dt: u32, op: u32, start: usize, count: usize, order: &[u32]) -> Vec<u64> {
    let inputs: Vec<Vec<u64>> = order
        .iter()
        .map(|&r| input(dt, op, r, start + count))
        .collect();
    (start..start + count)
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

/// ReduceScatter of blocks of `count` elements: rank `rank` gets block `rank` of the inputs
/// folded in rank order, out of place and in place.
fn reduce_scatter_cases(comm: HcclComm, rank: u32, n: u32) -> Vec<String> {
    let mut fails = Vec::new();
    let order: Vec<u32> = (0..n).collect();
    let me = rank as usize;
    for dt in DTYPES {
        let es = esize(dt);
        for op in [SUM, PROD] {
            for count in counts(dt) {
                let all = n as usize * count;
                let send = to_bytes(dt, &input(dt, op, rank, all));
                let want = to_bytes(dt, &reference_range(dt, op, me * count, count, &order));
                let what = format!("{} {} x{count} on {n} ranks", dt_name(dt), op_name(op));
                let mut recv = poison(count * es, rank as u64);
                let (sp, rp) = (
                    send.as_ptr() as *mut c_void,
                    recv.as_mut_ptr() as *mut c_void,
                );
                let rc =
                    unsafe { HcclReduceScatter(sp, rp, count as u64, dt, op, comm, null_mut()) };
                if rc != OK {
                    fails.push(format!("rank {rank}: ReduceScatter {what}: {rc:?}"));
                } else if let Some(d) = diff(dt, &recv, &want) {
                    fails.push(format!("rank {rank}: ReduceScatter {what}: {d}"));
                }
                let mut buf = send.clone();
                let bp = buf.as_mut_ptr() as *mut c_void;
                // SAFETY: block `me` lies inside the buffer.
                let own = unsafe { bp.cast::<u8>().add(me * count * es) } as *mut c_void;
                let rc =
                    unsafe { HcclReduceScatter(bp, own, count as u64, dt, op, comm, null_mut()) };
                if rc != OK || buf[me * count * es..(me + 1) * count * es] != want[..] {
                    fails.push(format!(
                        "rank {rank}: in-place ReduceScatter {what}: {rc:?}"
                    ));
                }
            }
        }
    }
    fails
}

/// Byte `i` of the block rank `src` sends to rank `dst` in case `case`.
fn pattern(case: u64, src: u32, dst: u32, i: usize) -> u8 {
    mix(seed(&[case, src as u64, dst as u64, i as u64])) as u8
}

fn block(case: u64, src: u32, dst: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(case, src, dst, i)).collect()
}

/// Block sizes tried for data movement: one element, a few, a cache line and a half, the limit.
const MOVE_BYTES: [usize; 4] = [4, 28, 96, MAX_BYTES];

/// AllGather (out of place and in place) and AlltoAll of byte patterns.
fn movement_cases(comm: HcclComm, rank: u32, n: u32) -> Vec<String> {
    let mut fails = Vec::new();
    let nn = n as usize;
    let me = rank as usize;
    for (k, len) in MOVE_BYTES.into_iter().enumerate() {
        let case = k as u64;
        let (dt, count) = if len % 4 == 0 {
            (FP32, len / 4)
        } else {
            (INT8, len)
        };
        // AllGather: every rank's block, in rank order (a gather sends the same block to all).
        let mine = block(case, rank, 0, len);
        let want: Vec<u8> = (0..n).flat_map(|q| block(case, q, 0, len)).collect();
        let mut recv = poison(nn * len, case);
        let rc = unsafe {
            HcclAllGather(
                mine.as_ptr() as *mut c_void,
                recv.as_mut_ptr() as *mut c_void,
                count as u64,
                dt,
                comm,
                null_mut(),
            )
        };
        if rc != OK || recv != want {
            fails.push(format!(
                "rank {rank}: AllGather {len} B on {n} ranks: {rc:?}"
            ));
        }
        let mut buf = poison(nn * len, case + 1);
        buf[me * len..(me + 1) * len].copy_from_slice(&mine);
        let bp = buf.as_mut_ptr();
        // SAFETY: block `me` lies inside the buffer.
        let own = unsafe { bp.add(me * len) } as *mut c_void;
        let rc =
            unsafe { HcclAllGather(own, bp as *mut c_void, count as u64, dt, comm, null_mut()) };
        if rc != OK || buf != want {
            fails.push(format!(
                "rank {rank}: in-place AllGather {len} B on {n} ranks: {rc:?}"
            ));
        }
        // AlltoAll: block q of the input goes to rank q; block q of the output came from q.
        let send: Vec<u8> = (0..n).flat_map(|q| block(case, rank, q, len)).collect();
        let want: Vec<u8> = (0..n).flat_map(|q| block(case, q, rank, len)).collect();
        let mut recv = poison(nn * len, case + 2);
        let rc = unsafe {
            HcclAlltoAll(
                send.as_ptr() as *const c_void,
                count as u64,
                dt,
                recv.as_mut_ptr() as *const c_void,
                count as u64,
                dt,
                comm,
                null_mut(),
            )
        };
        if rc != OK || recv != want {
            fails.push(format!(
                "rank {rank}: AlltoAll {len} B on {n} ranks: {rc:?}"
            ));
        }
    }
    fails
}

/// Messages one rank sends another in a row before the other receives any: more than the
/// shared-memory ring holds, so later ones wait in the queue.
const IN_A_ROW: u32 = 20;

/// Point to point: a ring of batches (send to the next rank, receive from the previous), and
/// runs of Send from rank 0 to rank 1 that rank 1 receives after they were all sent.
fn p2p_cases(comm: HcclComm, rank: u32, n: u32) -> Vec<String> {
    let mut fails = Vec::new();
    let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
    for (k, len) in MOVE_BYTES.into_iter().enumerate() {
        let case = 100 + k as u64;
        let mut out = block(case, rank, next, len);
        let mut got = poison(len, case);
        // Odd ranks list the receive first.
        let mut items = [
            HcclSendRecvItem {
                sendRecvType: 0,
                buf: out.as_mut_ptr() as *mut c_void,
                count: len as u64,
                dataType: INT8,
                remoteRank: next,
            },
            HcclSendRecvItem {
                sendRecvType: 1,
                buf: got.as_mut_ptr() as *mut c_void,
                count: len as u64,
                dataType: INT8,
                remoteRank: prev,
            },
        ];
        if rank % 2 == 1 {
            items.swap(0, 1);
        }
        let rc = unsafe { HcclBatchSendRecv(items.as_mut_ptr(), 2, comm, null_mut()) };
        if rc != OK || got != block(case, prev, rank, len) {
            fails.push(format!(
                "rank {rank}: batch ring {len} B on {n} ranks: {rc:?}"
            ));
        }
        if rank > 1 {
            continue;
        }
        for m in 0..IN_A_ROW {
            let c = case * 1000 + m as u64;
            if rank == 0 {
                let mut b = block(c, 0, 1, len);
                let rc = unsafe {
                    HcclSend(
                        b.as_mut_ptr() as *mut c_void,
                        len as u64,
                        INT8,
                        1,
                        comm,
                        null_mut(),
                    )
                };
                if rc != OK {
                    fails.push(format!("rank 0: Send #{m} of {len} B: {rc:?}"));
                }
            }
        }
        if rank == 1 {
            for m in 0..IN_A_ROW {
                let c = case * 1000 + m as u64;
                let mut b = poison(len, c);
                let rc = unsafe {
                    HcclRecv(
                        b.as_mut_ptr() as *mut c_void,
                        len as u64,
                        INT8,
                        0,
                        comm,
                        null_mut(),
                    )
                };
                if rc != OK || b != block(c, 0, 1, len) {
                    fails.push(format!("rank 1: Recv #{m} of {len} B: {rc:?}"));
                }
            }
        }
    }
    fails
}

/// Every case of the newer small operations as rank `rank` of `n`.
fn more_cases(comm: HcclComm, rank: u32, n: u32) -> Vec<String> {
    let mut fails = reduce_scatter_cases(comm, rank, n);
    fails.extend(movement_cases(comm, rank, n));
    fails.extend(p2p_cases(comm, rank, n));
    fails
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

#[test]
fn threads_gather_scatter_and_transfer_small_blocks() {
    for n in [2u32, 3, 4] {
        let ri = root_info();
        let fails: Vec<String> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let ri = &ri;
                    sc.spawn(move || {
                        let c = init_rank(n, ri, r);
                        let out = more_cases(c, r, n);
                        assert_eq!(unsafe { HcclCommDestroy(c) }, OK);
                        out
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert!(fails.is_empty(), "{n} threads: {fails:#?}");
    }
}

const RANK_VAR: &str = "HCCL_TEST_SMALL_RANK";
const SIZE_VAR: &str = "HCCL_TEST_SMALL_SIZE";
const ROOT_VAR: &str = "HCCL_TEST_SMALL_ROOT";

/// Every case, AllReduce and Reduce included, as one rank per process over shared memory.
#[test]
fn processes_run_every_small_operation() {
    if let Ok(rank) = std::env::var(RANK_VAR) {
        let rank: u32 = rank.parse().unwrap();
        let n: u32 = std::env::var(SIZE_VAR).unwrap().parse().unwrap();
        let ri = root_info_from_bytes(&hex_decode(&std::env::var(ROOT_VAR).unwrap()));
        let c = init_rank(n, &ri, rank);
        let mut fails = rank_cases(c, rank, n).0;
        fails.extend(more_cases(c, rank, n));
        assert_eq!(unsafe { HcclCommDestroy(c) }, OK);
        assert!(fails.is_empty(), "rank {rank}: {fails:#?}");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for n in [2u32, 4] {
        let root = hex_encode(&root_info_bytes(&root_info()));
        let kids: Vec<Spawned> = (0..n)
            .map(|rank| {
                let mut c = Command::new(&exe);
                c.args([
                    "--exact",
                    &test_path("processes_run_every_small_operation"),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(RANK_VAR, rank.to_string())
                .env(SIZE_VAR, n.to_string())
                .env(ROOT_VAR, &root)
                .env("HCCL_EXEC_TIMEOUT", "60")
                .env("ASCEND_GLOBAL_LOG_LEVEL", "1");
                spawn_piped(c)
            })
            .collect();
        for (rank, k) in kids.into_iter().enumerate() {
            let o = k.finish(Duration::from_secs(240), Vec::new());
            assert!(
                o.success && o.stdout.contains("1 passed"),
                "{n} processes, rank {rank} failed (code {:?}):\n--- stdout\n{}\n--- stderr\n{}",
                o.code,
                o.stdout,
                tail(&o.stderr, 5000)
            );
            assert!(
                o.stderr
                    .lines()
                    .any(|l| l.contains(" ready (") && l.contains(&format!("{} shm peer", n - 1))),
                "{n} processes, rank {rank}: not over shared memory:\n{}",
                tail(&o.stderr, 2000)
            );
        }
    }
}

/// `HCCL_EXEC_TIMEOUT` of [`a_thread_that_stops_calling_fails_its_peers_at_the_timeout`].
const STOP_EXEC_S: u64 = 2;

/// Three rank threads run small AllReduces, many more than a pair's lane of lines holds, each
/// checked; then rank 2 stops calling. Ranks 0 and 1 have sent it their inputs at once (a small
/// message between threads completes at posting) and wait for its input: each fails after
/// `HCCL_EXEC_TIMEOUT`, and none reports success.
#[test]
fn a_thread_that_stops_calling_fails_its_peers_at_the_timeout() {
    if !is_child() {
        let s = STOP_EXEC_S.to_string();
        run_self(
            "a_thread_that_stops_calling_fails_its_peers_at_the_timeout",
            &[("HCCL_EXEC_TIMEOUT", &s)],
            Duration::from_secs(300),
        );
        return;
    }
    // Rank 2 leaves the communicator only once the others have returned.
    let returned = std::sync::Arc::new(std::sync::Barrier::new(3));
    run_ranks(3, Duration::from_secs(600), move |r| {
        let call = |k: u32, out: &mut [f32; 2]| {
            let input = [(r.rank * 1000 + k) as f32, k as f32];
            unsafe {
                HcclAllReduce(
                    input.as_ptr() as *mut c_void,
                    out.as_mut_ptr().cast(),
                    2,
                    FP32,
                    SUM,
                    r.comm,
                    null_mut(),
                )
            }
        };
        for k in 0..50u32 {
            let mut out = [0f32; 2];
            r.expect_code(call(k, &mut out), HcclResult::HCCL_SUCCESS, "AllReduce");
            let want = [(3000 + 3 * k) as f32, (3 * k) as f32];
            r.check(out == want, || {
                format!("call {k}: {out:?}, expected {want:?}")
            });
        }
        if r.rank < 2 {
            let t0 = std::time::Instant::now();
            let mut out = [0f32; 2];
            let rc = call(50, &mut out);
            let el = t0.elapsed();
            r.check(rc != HcclResult::HCCL_SUCCESS, || {
                "the AllReduce without rank 2 succeeded".into()
            });
            // Not before the timeout, long before the default one; 15× for a loaded machine.
            r.check(
                el >= Duration::from_secs(STOP_EXEC_S) * 3 / 4
                    && el < scaled(Duration::from_secs(STOP_EXEC_S * 15)),
                || format!("failed after {el:?} with HCCL_EXEC_TIMEOUT={STOP_EXEC_S}"),
            );
        }
        returned.wait();
    });
}
