//! The result check of `barrier_test`: no rank leaves a barrier before the last rank entered it.
//!
//! In round k (for the first eight ranks) rank k enters last, after spinning for a millisecond
//! so that a barrier that does not wait lets the others out first; every rank reads the
//! monotonic clock just before entering and just after leaving, and the round passes when the
//! latest entry precedes the earliest exit. A correct barrier can never fail this, however the
//! ranks are scheduled. The clock is comparable between processes only on one kernel, so the
//! check runs only when every rank reads the same boot id (`NULL` otherwise).

use std::ptr::null_mut;
use std::time::{Duration, Instant};

use hccl::ffi::coll_api::{HcclAllReduce, HcclBarrier};
use hccl::ffi::types::HcclComm;

use crate::hccl;
use crate::report::CheckResult;

/// Rounds of the check: each of the first ranks enters last once.
const MAX_ROUNDS: u32 = 8;

/// How long the last rank of a round waits before entering.
const LATE: Duration = Duration::from_millis(1);

/// `HcclDataType` int64 and `HcclReduceOp` max.
const INT64: u32 = 5;
const MAX: u32 = 2;

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of one kernel (unlike
/// `Instant`, whose value is opaque).
fn now_ns() -> i64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid out pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// FNV-1a of this kernel's boot id, halved to stay positive; 0 when it cannot be read.
fn boot_id_hash() -> i64 {
    let Ok(id) = std::fs::read("/proc/sys/kernel/random/boot_id") else {
        return 0;
    };
    let h = id.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    (h >> 1) as i64
}

/// Element-wise maximum of `v` over all ranks.
fn max_all(mut v: [i64; 2], comm: HcclComm) -> Result<[i64; 2], String> {
    let mut out = [0i64; 2];
    // SAFETY: two int64 in each buffer, live communicator.
    let r = unsafe {
        HcclAllReduce(
            v.as_mut_ptr().cast(),
            out.as_mut_ptr().cast(),
            2,
            INT64,
            MAX,
            comm,
            null_mut(),
        )
    };
    hccl("HcclAllReduce (barrier check)", r).map(|_| out)
}

/// Runs the check on one rank of `ranks`; every rank returns the same outcome. With `fault`,
/// this rank reports having left the first round before it entered.
///
/// # Safety
/// `comm` must be a live communicator of `ranks` ranks whose rank is `rank`, with every rank
/// calling this at the same point.
pub unsafe fn check(
    rank: u32,
    ranks: u32,
    comm: HcclComm,
    fault: bool,
) -> Result<CheckResult, String> {
    let h = boot_id_hash();
    let [hi, neg_lo] = max_all([h, -h], comm)?;
    if h == 0 || hi != -neg_lo {
        return Ok(CheckResult::Null);
    }
    let barrier = || {
        // SAFETY: live communicator.
        hccl("HcclBarrier", unsafe { HcclBarrier(comm, null_mut()) })
    };
    for k in 0..ranks.min(MAX_ROUNDS) {
        barrier()?;
        if rank == k {
            let t = Instant::now();
            while t.elapsed() < LATE {
                std::hint::spin_loop();
            }
        }
        let enter = now_ns();
        barrier()?;
        let mut leave = now_ns();
        if fault && k == 0 {
            leave = enter - 1;
        }
        // The latest entry and the earliest exit in one reduction: max(enter), max(−leave).
        let [last_in, neg_first_out] = max_all([enter, -leave], comm)?;
        if last_in > -neg_first_out {
            eprintln!(
                "rank {rank}: barrier check failed: round {k} (rank {k} entering last): a rank \
                 left {} ns before the last one entered",
                last_in + neg_first_out
            );
            return Ok(CheckResult::Failed);
        }
    }
    Ok(CheckResult::Success)
}
