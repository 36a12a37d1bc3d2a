//! `--compress`: all-reduce through `HcclExtAllReduceCompressed`, checked by comparing every
//! rank's result (they must be bit-identical) and measured by the relative L2 error against
//! the exact sum of the inputs.

use std::ptr::null_mut;

use hccl::base::compress::Method;
use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::ext_api::{HcclExtAllReduceCompressed, HcclExtCompressConfig};
use hccl::ffi::types::{HcclComm, HcclResult};

use crate::check::{input, Pattern};
use crate::cli::{Config, RedOp};
use crate::dtype::{bf16_to_f64, f16_to_f64, DType};
use crate::ops::Op;

/// Why `--compress` cannot be used with this run, if it cannot.
pub fn check_args(op: Op, cfg: &Config) -> Result<(), String> {
    if cfg.compress.is_none() {
        return Ok(());
    }
    if op != Op::AllReduce {
        return Err(format!(
            "--compress applies to all-reduce only, not {}",
            op.name()
        ));
    }
    if cfg.red_op != RedOp::Sum {
        return Err("--compress needs -o sum".into());
    }
    if !matches!(cfg.dtype, DType::Fp32 | DType::Fp16 | DType::Bf16) {
        return Err(format!(
            "--compress needs -d fp32, fp16 or bf16, not {}",
            cfg.dtype.name()
        ));
    }
    Ok(())
}

/// The extension's config for `m` (no error feedback: each call stands alone).
pub fn config(m: Method) -> HcclExtCompressConfig {
    let (method, block, ratio) = match m {
        Method::Fp16 => (1, 0, 0.0),
        Method::Bf16 => (2, 0, 0.0),
        Method::Int8 { block } => (3, block, 0.0),
        Method::TopK { ratio } => (4, 0, ratio),
    };
    HcclExtCompressConfig {
        method,
        blockSize: block,
        topkRatio: ratio,
        compressLevel0: 0,
        residual: null_mut(),
        residualCount: 0,
    }
}

/// One compressed SUM all-reduce of `count` elements.
///
/// # Safety
/// `send` and `recv` must hold `count` elements of `dt`; `comm` must be live.
pub unsafe fn call(
    c: &HcclExtCompressConfig,
    send: *mut u8,
    recv: *mut u8,
    count: u64,
    dt: DType,
    comm: HcclComm,
) -> HcclResult {
    // SAFETY: forwarded to the caller.
    unsafe {
        HcclExtAllReduceCompressed(
            send.cast(),
            recv.cast(),
            count,
            dt.raw(),
            RedOp::Sum.raw(),
            c,
            comm,
            null_mut(),
        )
    }
}

/// Relative L2 error of `recv` (a SUM all-reduce of the tester's sum pattern over `ranks`
/// ranks) against the exact sum.
pub fn rel_l2_error(dt: DType, ranks: u32, recv: &[u8]) -> f64 {
    let es = dt.size();
    let (mut num, mut den) = (0f64, 0f64);
    for (i, e) in recv.chunks_exact(es).enumerate() {
        let got = match dt {
            DType::Fp16 => f16_to_f64(u16::from_le_bytes([e[0], e[1]])),
            DType::Bf16 => bf16_to_f64(u16::from_le_bytes([e[0], e[1]])),
            _ => f64::from(f32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        };
        let want: f64 = (0..ranks)
            .map(|r| input(Pattern::Sum, dt, r, i as u64) as f64)
            .sum();
        num += (got - want) * (got - want);
        den += want * want;
    }
    if den == 0.0 {
        0.0
    } else {
        (num / den).sqrt()
    }
}

/// Whether every rank holds the same bytes in `buf` (an FNV-1a digest compared with a max and
/// a min all-reduce).
pub(crate) fn same_on_every_rank(buf: &[u8], comm: HcclComm) -> Result<bool, String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in buf {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut out = [0u64; 2];
    for (o, op) in out.iter_mut().zip([RedOp::Max, RedOp::Min]) {
        let mut send = h;
        // SAFETY: one uint64 in each buffer; `comm` is live.
        let r = unsafe {
            HcclAllReduce(
                (&mut send as *mut u64).cast(),
                (o as *mut u64).cast(),
                1,
                DType::Uint64.raw(),
                op.raw(),
                comm,
                null_mut(),
            )
        };
        crate::hccl("HcclAllReduce (digest)", r)?;
    }
    Ok(out[0] == out[1])
}
