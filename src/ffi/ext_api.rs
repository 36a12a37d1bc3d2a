//! Extensions of this library beyond the vendor API, declared in `hccl/hccl_ext.h`: compressed
//! AllReduce and per-communicator counters. Every name carries the `HcclExt` prefix, which no
//! vendor function uses, so future vendor headers cannot collide with them.
//!
//! This file is the source cbindgen reads for `include/hccl/hccl_ext.h`.
//!
//! # Safety
//! As for `hccl.h`: pointer arguments are NULL (rejected where a value is required) or valid
//! for the access described on each function.

#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

use std::os::raw::c_void;

use super::boundary::{entry, op_name};
use super::types::{aclrtStream, HcclComm, HcclDataTypeRaw, HcclReduceOpRaw, HcclResult};
use super::validate as v;
use crate::algo::Coll;
use crate::base::compress::{Method, Spec, DEFAULT_INT8_BLOCK};
use crate::base::error::{Error, ErrorKind, Result};
use crate::comm::compressed::check_call;
use crate::comm::dispatch::dispatch;
use crate::comm::OpArgs;

/// Compression methods of `HcclExtCompressConfig::method`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcclExtCompressMethod {
    /// No compression: a plain, exact AllReduce.
    HCCL_EXT_COMPRESS_NONE = 0,
    /// IEEE binary16, round to nearest even.
    HCCL_EXT_COMPRESS_FP16 = 1,
    /// bfloat16, round to nearest even.
    HCCL_EXT_COMPRESS_BF16 = 2,
    /// 8-bit integers with one f32 scale (absmax / 127) per `blockSize` elements.
    HCCL_EXT_COMPRESS_INT8 = 3,
    /// The `topkRatio` share of elements of largest magnitude, as (index, value) pairs.
    HCCL_EXT_COMPRESS_TOPK = 4,
}

/// How `HcclExtAllReduceCompressed` compresses. Zero-initialise it, then set `method` and
/// what the method needs.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HcclExtCompressConfig {
    /// An `HcclExtCompressMethod` value.
    pub method: u32,
    /// INT8: elements sharing one scale, 1..=65536; 0 selects 256.
    pub blockSize: u32,
    /// TOPK: fraction of the elements sent, in (0, 1].
    pub topkRatio: f32,
    /// 1: compress between the ranks of a host too (every rank compresses its input and the
    /// ranks exchange directly); 0: on several hosts, reduce inside each host at full precision
    /// and compress only across hosts. A communicator on one host always compresses between
    /// its ranks.
    pub compressLevel0: u32,
    /// Error feedback: NULL for none, or `count` floats (4-byte aligned, zero before the first
    /// call, passed again on every call with the same data layout), holding what compression
    /// dropped, which the next call adds back before compressing.
    pub residual: *mut f32,
    /// Number of floats at `residual`: must equal `count` (0 when `residual` is NULL).
    pub residualCount: u64,
}

/// Counters of one communicator rank, filled by `HcclExtGetCommStats`. Level0 links join
/// ranks of the same host, level1 links ranks of different hosts; bytes are payload (and
/// compressed blocks' headers), counted for operations that finished.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HcclExtCommStats {
    /// Operations that finished successfully (every kind, not only AllReduce).
    pub ops: u64,
    /// Of those, AllReduces that ran compressed.
    pub compressedOps: u64,
    /// Operations that failed.
    pub failedOps: u64,
    /// Bytes this rank sent over level0 links.
    pub level0BytesSent: u64,
    /// Bytes this rank received over level0 links.
    pub level0BytesRecv: u64,
    /// Bytes this rank sent over level1 links.
    pub level1BytesSent: u64,
    /// Bytes this rank received over level1 links.
    pub level1BytesRecv: u64,
    /// Nanoseconds this rank spent running operations, small-message ones excepted (they read
    /// no clock).
    pub timeNs: u64,
}

/// The method a config names; `None` for `HCCL_EXT_COMPRESS_NONE`.
fn method_of(cfg: &HcclExtCompressConfig) -> Result<Option<Method>> {
    let m = match cfg.method {
        0 => return Ok(None),
        1 => Method::Fp16,
        2 => Method::Bf16,
        3 => Method::Int8 {
            block: if cfg.blockSize == 0 {
                DEFAULT_INT8_BLOCK
            } else {
                cfg.blockSize
            },
        },
        4 => Method::TopK {
            ratio: cfg.topkRatio,
        },
        m => {
            return Err(Error::new(
                ErrorKind::Para,
                format!(
                    "method {m} is not an HcclExtCompressMethod (NONE 0, FP16 1, BF16 2, INT8 3, \
                     TOPK 4)"
                ),
            ))
        }
    };
    Ok(Some(m))
}

/// AllReduce of `count` elements with the compression `config` describes: every rank ends with
/// bit-identical results, close to the exact sum (see the method). SUM on fp32, fp16 or bf16
/// only; `config` is read during the call (the residual buffer is used until the operation
/// completes, on `stream` like any operation).
#[no_mangle]
pub unsafe extern "C" fn HcclExtAllReduceCompressed(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    op: HcclReduceOpRaw,
    config: *const HcclExtCompressConfig,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(comm(comm => c), sendBuf, recvBuf, count, dataType, op, config, stream; {
        let dt = v::dtype(dataType)?;
        let rop = v::reduce_op(op, dt)?;
        let n = v::bytes(count, dt)?;
        let cfg = v::non_null(config, "config")?;
        // SAFETY: non-null, and valid for reading per the caller's contract; C need not align it.
        let cfg = unsafe { cfg.read_unaligned() };
        let send = v::buffer(sendBuf, n, "sendBuf")?;
        let recv = v::buffer(recvBuf, n, "recvBuf")?;
        let count = v::count(count)?;
        let compress = match method_of(&cfg)? {
            None => None,
            Some(method) => {
                let residual = match (cfg.residual.is_null(), cfg.residualCount) {
                    (true, 0) => None,
                    (true, k) => {
                        return Err(Error::new(
                            ErrorKind::Para,
                            format!("residual is NULL but residualCount is {k}"),
                        ))
                    }
                    (false, k) => Some((cfg.residual as usize, k)),
                };
                let spec = Spec {
                    method,
                    level0: cfg.compressLevel0 != 0,
                };
                Some(Box::new(check_call(
                    dt,
                    rop,
                    count,
                    [(send, n), (recv, n)],
                    spec,
                    residual,
                )?))
            }
        };
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::AllReduce { count },
            dtype: dt,
            op: Some(rop),
            send,
            recv,
            ext: Vec::new(),
            compress,
        };
        dispatch(c, args, stream as usize)
    })
}

/// Writes the counters of `comm` (this rank) to `stats`.
#[no_mangle]
pub unsafe extern "C" fn HcclExtGetCommStats(
    comm: HcclComm,
    stats: *mut HcclExtCommStats,
) -> HcclResult {
    entry!(comm(comm => c), stats; {
        let out = v::non_null_mut(stats, "stats")?;
        let s = c.stats();
        let value = HcclExtCommStats {
            ops: s.ops,
            compressedOps: s.compressed_ops,
            failedOps: s.failed_ops,
            level0BytesSent: s.traffic.sent[0],
            level0BytesRecv: s.traffic.recv[0],
            level1BytesSent: s.traffic.sent[1],
            level1BytesRecv: s.traffic.recv[1],
            timeNs: s.busy_ns,
        };
        // SAFETY: non-null and writable per the caller's contract; written without assuming
        // alignment.
        unsafe { out.write_unaligned(value) };
        Ok(())
    })
}

/// Sets the counters of `comm` (this rank) back to zero.
#[no_mangle]
pub unsafe extern "C" fn HcclExtResetCommStats(comm: HcclComm) -> HcclResult {
    entry!(comm(comm => c); {
        c.reset_stats();
        Ok(())
    })
}
