//! Ranks that disagree about a compressed AllReduce (compressed on one rank and plain on
//! another, different methods, different counts, `HCCL_COMPRESSION` set on one rank only) get
//! `HCCL_E_PARA` naming both calls on every rank, never success with wrong data: over threads of
//! one process and over processes on shared memory, on one host and on two "hosts"
//! (`HCCL_RANK_HOST_MAP`). Afterwards the communicator is broken: the next call fails at once
//! and destroying it succeeds.
//!
//! Every case runs in child processes (one per rank, or one holding every rank as a thread) so
//! that the logged error text can be checked; each rank prints one `RESULT` line.

use crate::common::cases::{p, pm};
use crate::common::mismatch_driver::{self, expect_all_fail, Case, Links};
use crate::common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::ext_api::*;
use hccl::ffi::types::*;
use std::ptr::null_mut;

const FP16: u32 = 1;
const INT8: u32 = 3;
const TOPK: u32 = 4;

/// A compressed AllReduce of `count` fp32 elements.
///
/// # Safety
/// `send` and `recv` must hold `count` fp32 values; `comm` must be live.
unsafe fn compressed(
    send: *mut std::ffi::c_void,
    recv: *mut std::ffi::c_void,
    count: u64,
    method: u32,
    ratio: f32,
    comm: HcclComm,
) -> HcclResult {
    let cfg = HcclExtCompressConfig {
        method,
        blockSize: 0,
        topkRatio: ratio,
        compressLevel0: 0,
        residual: null_mut(),
        residualCount: 0,
    };
    // SAFETY: the caller's contract; `cfg` outlives the call.
    unsafe { HcclExtAllReduceCompressed(send, recv, count, FP32, SUM, &cfg, comm, null_mut()) }
}

/// The (mismatched) call rank `rank` of `n` makes in `scenario`.
fn call(scenario: &str, rank: u32, n: u32, comm: HcclComm) -> HcclResult {
    let last = rank == n - 1;
    let big = vec![0u8; 64 << 10];
    let mut out = vec![0u8; 64 << 10];
    let (sp, rp) = (p(&big), pm(&mut out));
    unsafe {
        match scenario {
            // The last rank calls the plain AllReduce of the same shape.
            "plain" => {
                if last {
                    HcclAllReduce(sp, rp, 1024, FP32, SUM, comm, null_mut())
                } else {
                    compressed(sp, rp, 1024, INT8, 0.0, comm)
                }
            }
            // The last rank compresses to fp16, the others to int8.
            "method" => compressed(sp, rp, 1024, if last { FP16 } else { INT8 }, 0.0, comm),
            // The last rank keeps 2% of the elements, the others 1%.
            "ratio" => compressed(sp, rp, 1024, TOPK, if last { 0.02 } else { 0.01 }, comm),
            // The last rank reduces 2048 elements, the others 1024.
            "count" => compressed(sp, rp, if last { 2048 } else { 1024 }, INT8, 0.0, comm),
            // Every rank calls the plain AllReduce; `HCCL_COMPRESSION` is set on some only.
            "env" => HcclAllReduce(sp, rp, 1024, FP32, SUM, comm, null_mut()),
            _ => panic!("unknown scenario {scenario}"),
        }
    }
}

/// The child processes' entry point (does nothing when run as a plain test).
#[test]
fn child_entry() {
    mismatch_driver::child(call);
}

const LINKS: [Links; 2] = [Links::Threads, Links::Shm];
const TWO_HOSTS: [(&str, &str); 1] = [("HCCL_RANK_HOST_MAP", "a,a,b,b")];

#[test]
fn compressed_against_plain_fails_every_rank() {
    let expect = [
        "called compressed AllReduce count=1024 int8:256 fp32 sum",
        "called AllReduce count=1024 fp32 sum",
    ];
    for links in LINKS {
        let case = |n, env| Case {
            scenario: "plain",
            n,
            links,
            env,
            last_env: &[],
        };
        expect_all_fail(&case(2, &[]), &expect);
        expect_all_fail(&case(4, &TWO_HOSTS), &expect);
    }
}

#[test]
fn different_methods_fail_every_rank() {
    for links in LINKS {
        let case = |scenario, n, env| Case {
            scenario,
            n,
            links,
            env,
            last_env: &[],
        };
        expect_all_fail(
            &case("method", 2, &[]),
            &[
                "called compressed AllReduce count=1024 ",
                "int8:256",
                "fp16",
            ],
        );
        expect_all_fail(
            &case("method", 4, &TWO_HOSTS),
            &[
                "called compressed AllReduce count=1024 ",
                "int8:256",
                "fp16",
            ],
        );
        expect_all_fail(
            &case("ratio", 2, &[]),
            &[
                "called compressed AllReduce count=1024 ",
                "topk:0.01",
                "topk:0.02",
            ],
        );
    }
}

#[test]
fn different_counts_fail_every_rank() {
    for links in LINKS {
        expect_all_fail(
            &Case {
                scenario: "count",
                n: 2,
                links,
                env: &[],
                last_env: &[],
            },
            &[
                "called compressed AllReduce count=",
                "count=2048 int8:256",
                "count=1024 int8:256",
            ],
        );
    }
}

/// `HCCL_COMPRESSION` set in one rank's process only: its plain AllReduces run compressed, the
/// others' do not, and every rank says so instead of exchanging wrong data.
#[test]
fn compression_variable_on_one_rank_only_fails_every_rank() {
    expect_all_fail(
        &Case {
            scenario: "env",
            n: 4,
            links: Links::Shm,
            env: &TWO_HOSTS,
            last_env: &[("HCCL_COMPRESSION", "int8")],
        },
        &[
            "called compressed AllReduce count=1024 int8:256 fp32 sum",
            "called AllReduce count=1024 fp32 sum",
        ],
    );
}
