//! Operations larger than the caches between threads of one process, where the memory link
//! copies plain receives with streaming stores (`transport::stream`) and AllReduce writes into
//! every rank's output (`exec::push`): AllReduce, AllGather and Broadcast of 16 MiB and more on
//! 3 and 4 ranks, compared bit for bit with an independent reference, with sizes that leave an
//! unaligned tail.

use crate::common;
use crate::common::cases::*;
use crate::common::*;
use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::types::HcclResult;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(600);
/// Elements of 4 bytes: 16 MiB and a tail of 12 bytes.
const LARGE: usize = (4 << 20) + 3;

#[test]
fn allreduce_of_16_mib_on_four_threads() {
    run_ranks(4, TIMEOUT, |r| {
        allreduce_case(r, r.comm, FP32, SUM, LARGE, false, 0);
        allreduce_case(r, r.comm, INT32, MAX, LARGE, true, 0);
    });
}

#[test]
fn allgather_and_broadcast_of_16_mib_on_four_threads() {
    run_ranks(4, TIMEOUT, |r| {
        allgather_case(r, FP32, LARGE / 4 + 1, false);
        broadcast_case(r, INT32, LARGE, 3);
    });
}

/// Element `i` of `rank`'s input to the rank-order test: values that round when summed.
fn rounding_input(rank: u32, i: usize) -> f32 {
    common::rounding::value(&[77, rank as u64, i as u64], SUM) as f32
}

/// Every element folded in `order`, as little-endian fp32 bytes.
fn folded(order: &[u32], count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|i| {
            let mut acc = rounding_input(order[0], i);
            for &r in &order[1..] {
                acc += rounding_input(r, i);
            }
            acc.to_le_bytes()
        })
        .collect()
}

/// The inputs of the rank-order test expose a wrong order: folding them reversed changes some
/// bits for every rank count tested.
#[test]
fn rank_order_inputs_are_order_sensitive() {
    for n in [3u32, 4] {
        let fwd: Vec<u32> = (0..n).collect();
        let rev: Vec<u32> = (0..n).rev().collect();
        let (a, b) = (folded(&fwd, 4096), folded(&rev, 4096));
        let differ = a.chunks(4).zip(b.chunks(4)).filter(|(x, y)| x != y).count();
        assert!(
            differ > 40,
            "n={n}: only {differ} elements depend on the order"
        );
    }
}

/// Large AllReduce between threads (ranks claim pieces, fold each of every input and write it
/// into every output: `exec::push`) folds every element in rank order, `((x0 + x1) + x2) + …`,
/// out of place and in place, on 3 ranks (a piece shorter than the others at the end) and 4,
/// and with each rank's output at another offset from a cache line (the one-pass fold needs
/// the same offset on every rank and leaves the elements before the first line boundary to
/// the staged fold).
#[test]
fn large_fp32_sums_fold_in_rank_order() {
    for n in [3u32, 4] {
        run_ranks(n, TIMEOUT, |r| {
            let order: Vec<u32> = (0..r.n).collect();
            let exp = r.shared("rank-order", r.n, || folded(&order, LARGE));
            let input: Vec<u8> = (0..LARGE)
                .flat_map(|i| rounding_input(r.rank, i).to_le_bytes())
                .collect();
            let cases = [
                (false, 0),
                (true, 0),
                (false, 36),
                (false, 4 * r.rank as usize + 4),
            ];
            for (inplace, shift) in cases {
                let what =
                    format!("AllReduce fp32 sum count={LARGE} inplace={inplace} shift={shift}");
                let mut out = if inplace {
                    input.clone()
                } else {
                    poison(input.len() + shift, 5)
                };
                let src = if inplace {
                    out.as_mut_ptr()
                } else {
                    input.as_ptr() as *mut u8
                };
                let rc = unsafe {
                    HcclAllReduce(
                        src.cast(),
                        out[shift..].as_mut_ptr().cast(),
                        LARGE as u64,
                        FP32,
                        SUM,
                        r.comm,
                        std::ptr::null_mut(),
                    )
                };
                if r.ok(rc, &what) {
                    r.check_bytes(&what, FP32, &out[shift..], &exp);
                }
            }
        });
    }
}

/// Ranks that disagree on a large AllReduce (one passes another count) all fail with
/// `HCCL_E_PARA` before any touches another's buffers; nothing is written to the outputs.
#[test]
fn a_large_allreduce_with_a_disagreeing_count_fails_on_every_rank() {
    run_ranks(4, TIMEOUT, |r| {
        let count = if r.rank == 2 { LARGE + 1 } else { LARGE };
        let input = vec![0u8; count * 4];
        let mut out = poison(count * 4, 9);
        let before = out.clone();
        let rc = unsafe {
            HcclAllReduce(
                input.as_ptr() as *mut _,
                out.as_mut_ptr().cast(),
                count as u64,
                FP32,
                SUM,
                r.comm,
                std::ptr::null_mut(),
            )
        };
        r.expect_code(rc, HcclResult::HCCL_E_PARA, "AllReduce with rank 2's count");
        r.check(out == before, || "the output was written".into());
    });
}

/// `HCCL_EXEC_TIMEOUT` of [`a_rank_that_never_joins_fails_the_others_at_the_timeout`].
const EXEC_S: u64 = 2;

/// Three of four ranks call a large AllReduce (the write path between threads) that the fourth
/// never calls: each of the three fails after `HCCL_EXEC_TIMEOUT`, and none reports success.
#[test]
fn a_rank_that_never_joins_fails_the_others_at_the_timeout() {
    if !is_child() {
        let s = EXEC_S.to_string();
        run_self(
            "a_rank_that_never_joins_fails_the_others_at_the_timeout",
            &[("HCCL_EXEC_TIMEOUT", &s)],
            Duration::from_secs(300),
        );
        return;
    }
    // Rank 3 leaves the communicator only once the others have returned.
    let returned = std::sync::Arc::new(std::sync::Barrier::new(4));
    run_ranks(4, TIMEOUT, move |r| {
        if r.rank < 3 {
            let input = vec![0u8; LARGE * 4];
            let mut out = vec![0u8; LARGE * 4];
            let t0 = std::time::Instant::now();
            let rc = unsafe {
                HcclAllReduce(
                    input.as_ptr() as *mut _,
                    out.as_mut_ptr().cast(),
                    LARGE as u64,
                    FP32,
                    SUM,
                    r.comm,
                    std::ptr::null_mut(),
                )
            };
            let el = t0.elapsed();
            r.check(rc != HcclResult::HCCL_SUCCESS, || {
                "the AllReduce without rank 3 succeeded".into()
            });
            // Not before the timeout, long before the default one; 15× for a loaded machine.
            r.check(
                el >= Duration::from_secs(EXEC_S) * 3 / 4
                    && el < scaled(Duration::from_secs(EXEC_S * 15)),
                || format!("failed after {el:?} with HCCL_EXEC_TIMEOUT={EXEC_S}"),
            );
        }
        returned.wait();
    });
}
