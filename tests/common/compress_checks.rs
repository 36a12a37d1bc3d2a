//! Checks shared by the compressed-AllReduce suites (tests/compression.rs,
//! tests/compress_netns.rs): the compression config, the call, the relative L2 error against a
//! float64 reference, the communicator counters, and bit-identical results on every rank.

use std::ptr::null_mut;

use hccl::ffi::coll_api::HcclAllGather;
use hccl::ffi::ext_api::*;
use hccl::ffi::types::*;

use super::*;

/// Relative L2 error of `got` against the exact `want`: ‖got − want‖ / ‖want‖.
pub fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).powi(2))
        .sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// A config of `method` (top-k `ratio`), with the caller's residual buffer if any.
pub fn config(method: u32, ratio: f32, residual: Option<&mut [f32]>) -> HcclExtCompressConfig {
    let (ptr, n) = match residual {
        Some(r) => (r.as_mut_ptr(), r.len() as u64),
        None => (null_mut(), 0),
    };
    HcclExtCompressConfig {
        method,
        blockSize: 0,
        topkRatio: ratio,
        compressLevel0: 0,
        residual: ptr,
        residualCount: n,
    }
}

/// A compressed SUM AllReduce of fp32 `send` into `out`.
pub fn allreduce_c(
    r: &Rank,
    send: &[f32],
    out: &mut [f32],
    cfg: &HcclExtCompressConfig,
) -> HcclResult {
    unsafe {
        HcclExtAllReduceCompressed(
            send.as_ptr() as *mut _,
            out.as_mut_ptr() as *mut _,
            send.len() as u64,
            FP32,
            SUM,
            cfg,
            r.comm,
            null_mut(),
        )
    }
}

/// Every rank gathers every rank's `out` and checks that all copies equal its own, byte for
/// byte.
pub fn check_identical(r: &Rank, what: &str, out: &[f32]) {
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut all = vec![0u8; bytes.len() * r.n as usize];
    let res = unsafe {
        HcclAllGather(
            bytes.as_ptr() as *mut _,
            all.as_mut_ptr() as *mut _,
            bytes.len() as u64,
            UINT8,
            r.comm,
            null_mut(),
        )
    };
    if !r.ok(res, "HcclAllGather of the results") {
        return;
    }
    for (p, chunk) in all.chunks(bytes.len()).enumerate() {
        r.check(chunk == bytes, || {
            format!("{what}: rank {p}'s result differs from this rank's")
        });
    }
}

/// The communicator's counters.
pub fn stats(r: &Rank) -> HcclExtCommStats {
    let mut s = HcclExtCommStats::default();
    r.ok(
        unsafe { HcclExtGetCommStats(r.comm, &mut s) },
        "HcclExtGetCommStats",
    );
    s
}
