//! Ranks that disagree about an operation (count, reduction operator, data type, kind, root,
//! point-to-point sizes) get `HCCL_E_PARA` naming both calls, never success with wrong data,
//! over every link: threads of one process, processes over shared memory, and TCP. After a
//! mismatch the communicator is broken: the next call fails at once (`HCCL_E_UNAVAIL` on a rank
//! that saw the mismatch) and destroying it succeeds.
//!
//! Every case runs in child processes (one per rank, or one holding every rank as a thread) so
//! that the logged error text can be checked; each rank prints one `RESULT` line.

use crate::common::cases::{p, pm};
use crate::common::mismatch_driver::{self, Case, Links, QUICK_MS};
use crate::common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::types::*;
use std::ptr::null_mut;

use HcclResult::*;

/// The (mismatched) call rank `rank` of `n` makes in `scenario`.
fn call(scenario: &str, rank: u32, n: u32, comm: HcclComm) -> HcclResult {
    let last = rank == n - 1;
    let big = vec![1u8; 8 << 20];
    let mut out = vec![0u8; 8 << 20];
    let (sp, rp) = (p(&big), pm(&mut out));
    unsafe {
        match scenario {
            // One rank 2 Mi elements, the others 1 Mi.
            "count" => {
                let count = if last { 2 << 20 } else { 1 << 20 };
                HcclAllReduce(sp, rp, count, FP32, SUM, comm, null_mut())
            }
            // The last rank's call is just above the small-message limit, the others' within
            // it: one side runs the small path, the other a schedule.
            "count_across_paths" => {
                let count = if last { 1025 } else { 1024 };
                HcclAllReduce(sp, rp, count, FP32, SUM, comm, null_mut())
            }
            "broadcast_count_across_paths" => {
                let count = if last { 1025 } else { 1024 };
                HcclBroadcast(rp, count, FP32, 0, comm, null_mut())
            }
            "op" => HcclAllReduce(
                sp,
                rp,
                1024,
                FP32,
                if last { MAX } else { SUM },
                comm,
                null_mut(),
            ),
            "dtype" => HcclAllReduce(
                sp,
                rp,
                1024,
                if last { INT32 } else { FP32 },
                SUM,
                comm,
                null_mut(),
            ),
            // The same mismatches after an agreeing call of the same shape (whose plan and tag
            // a rank reuses when nothing else changes).
            "op_after_agreeing" | "dtype_after_agreeing" => {
                let r = HcclAllReduce(sp, rp, 1024, FP32, SUM, comm, null_mut());
                if r != HCCL_SUCCESS {
                    return r;
                }
                let (dtype, op) = match (last, scenario) {
                    (false, _) => (FP32, SUM),
                    (true, "op_after_agreeing") => (FP32, MAX),
                    (true, _) => (INT32, SUM),
                };
                HcclAllReduce(sp, rp, 1024, dtype, op, comm, null_mut())
            }
            // Rank 0 broadcasts (as the root) while the others reduce.
            "kind" => {
                if rank == 0 {
                    HcclBroadcast(rp, 1024, FP32, 0, comm, null_mut())
                } else {
                    HcclAllReduce(sp, rp, 1024, FP32, SUM, comm, null_mut())
                }
            }
            "root" => HcclBroadcast(
                rp,
                1024,
                FP32,
                if last { n - 1 } else { 0 },
                comm,
                null_mut(),
            ),
            // Each rank names the other as the root: both only receive, and neither sends the
            // other anything.
            "broadcast_receivers" => HcclBroadcast(rp, 1024, FP32, 1 - rank, comm, null_mut()),
            // Every rank believes it is the root.
            "reduce_root" => HcclReduce(sp, rp, 1024, FP32, SUM, rank, comm, null_mut()),
            // An 8-byte Reduce (gathered whole at the root) whose last rank disagrees.
            "reduce_small_op" => HcclReduce(
                sp,
                rp,
                2,
                FP32,
                if last { MAX } else { SUM },
                0,
                comm,
                null_mut(),
            ),
            "reduce_small_count" => HcclReduce(
                sp,
                rp,
                if last { 3 } else { 2 },
                FP32,
                SUM,
                0,
                comm,
                null_mut(),
            ),
            // Rank 0 sends 64 elements, rank 1 receives 32.
            "p2p" => {
                if rank == 0 {
                    HcclSend(sp, 64, FP32, 1, comm, null_mut())
                } else {
                    HcclRecv(rp, 32, FP32, 0, comm, null_mut())
                }
            }
            "allgatherv" => {
                let mut counts = vec![4u64; n as usize];
                if last {
                    counts[0] = 5;
                }
                let displs: Vec<u64> = (0..n as u64).map(|i| i * 8).collect();
                HcclAllGatherV(
                    sp,
                    counts[rank as usize],
                    rp,
                    counts.as_ptr() as *const _,
                    displs.as_ptr() as *const _,
                    FP32,
                    comm,
                    null_mut(),
                )
            }
            _ => panic!("unknown scenario {scenario}"),
        }
    }
}

/// Every rank fails with `HCCL_E_PARA` long before the exec timeout, the logs name both calls
/// (`expect` texts), the next call fails at once, and destroying the communicator succeeds.
fn expect_all_fail(scenario: &str, n: u32, links: Links, env: &[(&str, &str)], expect: &[&str]) {
    mismatch_driver::expect_all_fail(&Case::new(scenario, n, links, env), expect);
}

/// As [`expect_all_fail`], except that the ranks in `may_succeed` may also return success.
fn expect_fail(
    scenario: &str,
    n: u32,
    links: Links,
    env: &[(&str, &str)],
    expect: &[&str],
    may_succeed: &[u32],
) {
    mismatch_driver::expect_fail(&Case::new(scenario, n, links, env), expect, may_succeed);
}

/// The child processes' entry point (does nothing when run as a plain test).
#[test]
fn child_entry() {
    mismatch_driver::child(call);
}

const ALL_LINKS: [Links; 3] = [Links::Threads, Links::Shm, Links::Tcp];

/// Whether small rooted operations over `links` complete eagerly when `env` leaves the small
/// path on: a rank that only sends returns once its message is in the link, so a disagreeing
/// sender may succeed and fails at its next call instead (see `src/exec/small.rs`).
fn eager(links: Links, env: &[(&str, &str)]) -> bool {
    links != Links::Tcp && env.is_empty()
}

/// The scenarios of 1024 elements run on both paths: the small-message path (the default for
/// calls of at most 4 KiB on one host) and the scheduled path (forcing an algorithm turns the
/// small path off), so that each keeps its mismatch detection.
const PATHS: [&[(&str, &str)]; 2] = [&[], &[("HCCL_ALGO", "level0:NA;level1:ring")]];

#[test]
fn count_mismatch_fails_every_rank() {
    for links in ALL_LINKS {
        expect_all_fail(
            "count",
            2,
            links,
            &[],
            &[
                "operation mismatch: rank ",
                "called AllReduce count=",
                "count=2097152",
                "count=1048576",
                "fp32 sum (operation #1)",
            ],
        );
    }
}

/// A call the small-message path takes against one that runs a schedule.
#[test]
fn count_mismatch_across_paths_fails_every_rank() {
    for links in ALL_LINKS {
        for n in [2, 3] {
            expect_all_fail(
                "count_across_paths",
                n,
                links,
                &[],
                &["called AllReduce count=", "count=1024 ", "count=1025 "],
            );
        }
        // The receivers may complete; so may the root (which only sends) over eager links.
        let receivers: Vec<u32> = if eager(links, &[]) {
            vec![0, 1]
        } else {
            vec![1]
        };
        expect_fail(
            "broadcast_count_across_paths",
            3,
            links,
            &[],
            &["called Broadcast count=", "count=1024 ", "count=1025 "],
            &receivers,
        );
    }
}

#[test]
fn operator_mismatch_fails_every_rank() {
    for (links, env) in ALL_LINKS.into_iter().flat_map(|l| PATHS.map(|e| (l, e))) {
        expect_all_fail(
            "op",
            2,
            links,
            env,
            &["called AllReduce count=1024 fp32 ", " max", " sum"],
        );
        expect_all_fail(
            "op_after_agreeing",
            2,
            links,
            env,
            &[
                "called AllReduce count=1024 fp32 ",
                " max",
                " sum",
                "operation #",
            ],
        );
    }
}

#[test]
fn dtype_mismatch_fails_every_rank() {
    for (links, env) in ALL_LINKS.into_iter().flat_map(|l| PATHS.map(|e| (l, e))) {
        expect_all_fail(
            "dtype",
            2,
            links,
            env,
            &["called AllReduce count=1024 ", "int32", "fp32"],
        );
        expect_all_fail(
            "dtype_after_agreeing",
            2,
            links,
            env,
            &["called AllReduce count=1024 ", "int32", "fp32"],
        );
    }
}

/// Over eager links the Broadcast root only sends, so it may complete, and its next call fails.
#[test]
fn kind_mismatch_fails_every_rank() {
    for (links, env) in ALL_LINKS.into_iter().flat_map(|l| PATHS.map(|e| (l, e))) {
        let root: &[u32] = if eager(links, env) { &[0] } else { &[] };
        expect_fail(
            "kind",
            2,
            links,
            env,
            &[
                "called Broadcast count=1024 fp32 root=0",
                "called AllReduce count=1024 fp32 sum",
            ],
            root,
        );
    }
}

/// Two ranks that each call a Broadcast as its root (over eager links both only send, so
/// both may complete, and both fail at their next call), two that each name the other as the
/// root (both only wait: each finds the other stuck in another operation), and Reduces whose
/// every rank believes it is the root.
#[test]
fn root_mismatch_fails_every_rank() {
    for (links, env) in ALL_LINKS.into_iter().flat_map(|l| PATHS.map(|e| (l, e))) {
        let senders: &[u32] = if eager(links, env) { &[0, 1] } else { &[] };
        expect_fail(
            "root",
            2,
            links,
            env,
            &["called Broadcast count=1024 fp32 root="],
            senders,
        );
        expect_all_fail(
            "broadcast_receivers",
            2,
            links,
            env,
            &["called Broadcast count=1024 fp32 root="],
        );
        expect_all_fail(
            "reduce_root",
            2,
            links,
            env,
            &["called Reduce count=1024 fp32 sum root="],
        );
    }
}

/// Small Reduces go whole to the root in one step (the small-message path). The root fails,
/// and so does the disagreeing leaf where it waits for the root's notice (TCP); a leaf that
/// agrees exchanged only with the root, so like a Broadcast receiver it may complete (it has no
/// output), and its next call fails. Over eager links every leaf only sends, so the
/// disagreeing one may complete too, and fails at its next call.
#[test]
fn small_reduce_mismatch_fails_the_root_and_the_leaf() {
    for links in ALL_LINKS {
        for n in [2, 3] {
            let last = if eager(links, &[]) { n } else { n - 1 };
            let may_succeed: Vec<u32> = (1..last).collect();
            expect_fail(
                "reduce_small_op",
                n,
                links,
                &[],
                &[
                    "called Reduce count=2 fp32 ",
                    " max",
                    " sum",
                    "(small path)",
                ],
                &may_succeed,
            );
            expect_fail(
                "reduce_small_count",
                n,
                links,
                &[],
                &[
                    "called Reduce count=",
                    "count=2 ",
                    "count=3 ",
                    "(small path)",
                ],
                &may_succeed,
            );
        }
    }
}

/// The receiver fails naming both sizes; the sender (which receives nothing) may return
/// success, and its next call fails.
#[test]
fn point_to_point_size_mismatch_fails_the_receiver() {
    for links in ALL_LINKS {
        expect_fail(
            "p2p",
            2,
            links,
            &[],
            &[
                "rank 0 called Send/Recv of 256 bytes",
                "rank 1 of 128 bytes",
            ],
            &[0],
        );
    }
}

/// Ranks that do not exchange messages with the disagreeing one (a ring, a tree, a V form)
/// fail too.
#[test]
fn ring_schedules_fail_every_rank() {
    let ring = [("HCCL_ALGO", "level0:NA;level1:ring")];
    let tree = [("HCCL_ALGO", "allreduce=level0:NA;level1:tree")];
    for links in ALL_LINKS {
        expect_all_fail(
            "count",
            4,
            links,
            &tree,
            &["called AllReduce count=", "count=2097152", "count=1048576"],
        );
        expect_all_fail(
            "count",
            4,
            links,
            &ring,
            &["called AllReduce count=", "count=2097152", "count=1048576"],
        );
        expect_all_fail(
            "allgatherv",
            4,
            links,
            &ring,
            &["called AllGatherV count=4 (counts digest"],
        );
    }
}

/// A Broadcast whose last rank names another root: the ranks that exchange messages with it
/// fail with `HCCL_E_PARA` at once (no rank waits for the timeout); a rank whose data came only
/// from agreeing ranks may complete, with correct data, and its next call fails.
#[test]
fn broadcast_root_mismatch_on_a_chain() {
    let chain = [("HCCL_ALGO", "broadcast=level0:NA;level1:ring")];
    for links in ALL_LINKS {
        let (outcomes, stderr) = mismatch_driver::run(&Case::new("root", 4, links, &chain));
        let what = format!("root on 4 ranks over {links:?}");
        for o in &outcomes {
            assert!(
                o.code == HCCL_E_PARA as u32 || o.code == HCCL_SUCCESS as u32,
                "{what}: rank {} returned {}:\n{outcomes:?}\n{}",
                o.rank,
                o.code,
                tail(&stderr, 6000)
            );
            assert!(o.ms < QUICK_MS, "{what}: {outcomes:?}");
            assert_ne!(o.next, HCCL_SUCCESS as u32, "{what}: {outcomes:?}");
            assert!(o.next_ms < QUICK_MS, "{what}: {outcomes:?}");
            assert_eq!(o.destroy, HCCL_SUCCESS as u32, "{what}: {outcomes:?}");
        }
        for r in [2, 3] {
            assert_eq!(outcomes[r].code, HCCL_E_PARA as u32, "{what}: {outcomes:?}");
        }
        assert!(
            stderr.contains("called Broadcast count=1024 fp32 root=3"),
            "{what}:\n{}",
            tail(&stderr, 6000)
        );
    }
}
