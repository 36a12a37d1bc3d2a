//! The collective operations of `hccl.h`.
//!
//! This file is the source cbindgen reads for `include/hccl/hccl.h`.
//!
//! # Safety
//! These are C entry points with HCCL's contract: every pointer argument is either NULL
//! (rejected with `HCCL_E_PTR` where a value is required) or valid for the access the HCCL
//! documentation describes for that argument (buffers of `count` elements, arrays of
//! `rankSize` counts, writable output slots). Handles are never dereferenced: they are looked up.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::os::raw::c_void;

use super::boundary::{call, entry_log};
use super::types::{
    aclrtStream, HcclComm, HcclDataTypeRaw, HcclReduceOpRaw, HcclResult, HcclSendRecvItem,
};
use super::validate as v;
use crate::algo::{Coll, P2pItem};
use crate::base::error::{Error, ErrorKind};
use crate::comm::dispatch::dispatch;
use crate::comm::OpArgs;

macro_rules! entry {
    ($api:literal, $($arg:ident),*) => {
        if entry_log() {
            log::info!(concat!("entry ", $api, $(" ", stringify!($arg), "={:?}"),*), $($arg),*);
        }
    };
}

/// Reduces `count` elements of every rank's `sendBuf` into every rank's `recvBuf`.
#[no_mangle]
pub unsafe extern "C" fn HcclAllReduce(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    op: HcclReduceOpRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclAllReduce",
        sendBuf,
        recvBuf,
        count,
        dataType,
        op,
        comm,
        stream
    );
    call("HcclAllReduce", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let n = v::bytes(count, dt)?;
        let args = OpArgs {
            name: "AllReduce",
            coll: Coll::AllReduce {
                count: v::count(count)?,
            },
            dtype: dt,
            op: Some(op),
            send: v::buffer(sendBuf, n, "sendBuf")?,
            recv: v::buffer(recvBuf, n, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// Copies `count` elements of `buf` on `root` to `buf` on every rank.
#[no_mangle]
pub unsafe extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!("HcclBroadcast", buf, count, dataType, root, comm, stream);
    call("HcclBroadcast", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let root = v::rank_in(root, &c, "root")?;
        let n = v::bytes(count, dt)?;
        let b = v::buffer(buf, n, "buf")?;
        let args = OpArgs {
            name: "Broadcast",
            coll: Coll::Broadcast {
                count: v::count(count)?,
                root,
            },
            dtype: dt,
            op: None,
            send: b,
            recv: b,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// Reduces `count` elements of every rank's `sendBuf` into `recvBuf` on `root`.
#[no_mangle]
pub unsafe extern "C" fn HcclReduce(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    op: HcclReduceOpRaw,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclReduce",
        sendBuf,
        recvBuf,
        count,
        dataType,
        op,
        root,
        comm,
        stream
    );
    call("HcclReduce", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let root = v::rank_in(root, &c, "root")?;
        let n = v::bytes(count, dt)?;
        let recv_bytes = if c.rank() == root { n } else { 0 };
        let args = OpArgs {
            name: "Reduce",
            coll: Coll::Reduce {
                count: v::count(count)?,
                root,
            },
            dtype: dt,
            op: Some(op),
            send: v::buffer(sendBuf, n, "sendBuf")?,
            recv: v::buffer(recvBuf, recv_bytes, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// Gathers `sendCount` elements from every rank into every rank's `recvBuf`, in rank order.
#[no_mangle]
pub unsafe extern "C" fn HcclAllGather(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    sendCount: u64,
    dataType: HcclDataTypeRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclAllGather",
        sendBuf,
        recvBuf,
        sendCount,
        dataType,
        comm,
        stream
    );
    call("HcclAllGather", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let n = v::bytes(sendCount, dt)?;
        let total = v::bytes(v::mul(sendCount, c.size() as u64)?, dt)?;
        let args = OpArgs {
            name: "AllGather",
            coll: Coll::AllGather {
                count: v::count(sendCount)?,
            },
            dtype: dt,
            op: None,
            send: v::buffer(sendBuf, n, "sendBuf")?,
            recv: v::buffer(recvBuf, total, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// AllGather with per-rank counts and displacements in the output.
#[no_mangle]
pub unsafe extern "C" fn HcclAllGatherV(
    sendBuf: *mut c_void,
    sendCount: u64,
    recvBuf: *mut c_void,
    recvCounts: *const c_void,
    recvDispls: *const c_void,
    dataType: HcclDataTypeRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclAllGatherV",
        sendBuf,
        sendCount,
        recvBuf,
        recvCounts,
        recvDispls,
        dataType,
        comm,
        stream
    );
    call("HcclAllGatherV", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let counts = v::u64_array(recvCounts, c.size(), "recvCounts")?;
        let displs = v::u64_array(recvDispls, c.size(), "recvDispls")?;
        if counts[c.rank() as usize] as u64 != sendCount {
            return Err(Error::new(
                ErrorKind::Para,
                format!(
                    "sendCount {sendCount} differs from recvCounts[{}] = {}",
                    c.rank(),
                    counts[c.rank() as usize]
                ),
            ));
        }
        let ext = v::extent(&counts, &displs)?;
        let args = OpArgs {
            name: "AllGatherV",
            send: v::buffer(sendBuf, v::bytes(sendCount, dt)?, "sendBuf")?,
            recv: v::buffer(recvBuf, v::bytes(ext as u64, dt)?, "recvBuf")?,
            coll: Coll::AllGatherV { counts, displs },
            dtype: dt,
            op: None,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// Reduces every rank's `sendBuf` (rankSize blocks of `recvCount`) and leaves block r on rank r.
#[no_mangle]
pub unsafe extern "C" fn HcclReduceScatter(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    recvCount: u64,
    dataType: HcclDataTypeRaw,
    op: HcclReduceOpRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclReduceScatter",
        sendBuf,
        recvBuf,
        recvCount,
        dataType,
        op,
        comm,
        stream
    );
    call("HcclReduceScatter", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let n = v::bytes(recvCount, dt)?;
        let total = v::bytes(v::mul(recvCount, c.size() as u64)?, dt)?;
        let args = OpArgs {
            name: "ReduceScatter",
            coll: Coll::ReduceScatter {
                count: v::count(recvCount)?,
            },
            dtype: dt,
            op: Some(op),
            send: v::buffer(sendBuf, total, "sendBuf")?,
            recv: v::buffer(recvBuf, n, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// ReduceScatter with per-rank input blocks (counts and displacements).
#[no_mangle]
pub unsafe extern "C" fn HcclReduceScatterV(
    sendBuf: *mut c_void,
    sendCounts: *const c_void,
    sendDispls: *const c_void,
    recvBuf: *mut c_void,
    recvCount: u64,
    dataType: HcclDataTypeRaw,
    op: HcclReduceOpRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclReduceScatterV",
        sendBuf,
        sendCounts,
        sendDispls,
        recvBuf,
        recvCount,
        dataType,
        op,
        comm,
        stream
    );
    call("HcclReduceScatterV", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let counts = v::u64_array(sendCounts, c.size(), "sendCounts")?;
        let displs = v::u64_array(sendDispls, c.size(), "sendDispls")?;
        if counts[c.rank() as usize] as u64 != recvCount {
            return Err(Error::new(
                ErrorKind::Para,
                format!(
                    "recvCount {recvCount} differs from sendCounts[{}] = {}",
                    c.rank(),
                    counts[c.rank() as usize]
                ),
            ));
        }
        let ext = v::extent(&counts, &displs)?;
        let args = OpArgs {
            name: "ReduceScatterV",
            send: v::buffer(sendBuf, v::bytes(ext as u64, dt)?, "sendBuf")?,
            recv: v::buffer(recvBuf, v::bytes(recvCount, dt)?, "recvBuf")?,
            coll: Coll::ReduceScatterV { counts, displs },
            dtype: dt,
            op: Some(op),
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// Sends block r of `sendBuf` on `root` (blocks of `recvCount`) to rank r's `recvBuf`.
#[no_mangle]
pub unsafe extern "C" fn HcclScatter(
    sendBuf: *mut c_void,
    recvBuf: *mut c_void,
    recvCount: u64,
    dataType: HcclDataTypeRaw,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclScatter",
        sendBuf,
        recvBuf,
        recvCount,
        dataType,
        root,
        comm,
        stream
    );
    call("HcclScatter", || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let root = v::rank_in(root, &c, "root")?;
        let n = v::bytes(recvCount, dt)?;
        let total = v::bytes(v::mul(recvCount, c.size() as u64)?, dt)?;
        let send_bytes = if c.rank() == root { total } else { 0 };
        let args = OpArgs {
            name: "Scatter",
            coll: Coll::Scatter {
                count: v::count(recvCount)?,
                root,
            },
            dtype: dt,
            op: None,
            send: v::buffer(sendBuf, send_bytes, "sendBuf")?,
            recv: v::buffer(recvBuf, n, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

fn same_type(
    send: HcclDataTypeRaw,
    recv: HcclDataTypeRaw,
) -> crate::base::error::Result<crate::base::dtype::DataType> {
    let s = v::dtype(send)?;
    let r = v::dtype(recv)?;
    if s != r {
        return Err(Error::new(
            ErrorKind::Para,
            format!(
                "sendType {} and recvType {} must be the same",
                s.name(),
                r.name()
            ),
        ));
    }
    Ok(s)
}

/// Every rank sends `sendCount` elements to every rank.
#[no_mangle]
pub unsafe extern "C" fn HcclAlltoAll(
    sendBuf: *const c_void,
    sendCount: u64,
    sendType: HcclDataTypeRaw,
    recvBuf: *const c_void,
    recvCount: u64,
    recvType: HcclDataTypeRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclAlltoAll",
        sendBuf,
        sendCount,
        sendType,
        recvBuf,
        recvCount,
        recvType,
        comm,
        stream
    );
    call("HcclAlltoAll", || {
        let c = v::comm(comm)?;
        let dt = same_type(sendType, recvType)?;
        if sendCount != recvCount {
            return Err(Error::new(
                ErrorKind::Para,
                format!("sendCount {sendCount} and recvCount {recvCount} must be equal"),
            ));
        }
        let n = c.size() as usize;
        let cnt = v::count(sendCount)?;
        let total = v::bytes(v::mul(sendCount, n as u64)?, dt)?;
        let counts = vec![cnt; n];
        let displs: Vec<usize> = (0..n).map(|i| i * cnt).collect();
        let args = OpArgs {
            name: "AlltoAll",
            coll: Coll::AlltoAllV {
                send_counts: counts.clone(),
                send_displs: displs.clone(),
                recv_counts: counts,
                recv_displs: displs,
            },
            dtype: dt,
            op: None,
            send: v::buffer(sendBuf, total, "sendBuf")?,
            recv: v::buffer(recvBuf, total, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// AlltoAll with per-peer counts and displacements.
#[no_mangle]
pub unsafe extern "C" fn HcclAlltoAllV(
    sendBuf: *const c_void,
    sendCounts: *const c_void,
    sdispls: *const c_void,
    sendType: HcclDataTypeRaw,
    recvBuf: *const c_void,
    recvCounts: *const c_void,
    rdispls: *const c_void,
    recvType: HcclDataTypeRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclAlltoAllV",
        sendBuf,
        sendCounts,
        sdispls,
        sendType,
        recvBuf,
        recvCounts,
        rdispls,
        recvType,
        comm,
        stream
    );
    call("HcclAlltoAllV", || {
        let c = v::comm(comm)?;
        let dt = same_type(sendType, recvType)?;
        let sc = v::u64_array(sendCounts, c.size(), "sendCounts")?;
        let sd = v::u64_array(sdispls, c.size(), "sdispls")?;
        let rc = v::u64_array(recvCounts, c.size(), "recvCounts")?;
        let rd = v::u64_array(rdispls, c.size(), "rdispls")?;
        let se = v::bytes(v::extent(&sc, &sd)? as u64, dt)?;
        let re = v::bytes(v::extent(&rc, &rd)? as u64, dt)?;
        let args = OpArgs {
            name: "AlltoAllV",
            coll: Coll::AlltoAllV {
                send_counts: sc,
                send_displs: sd,
                recv_counts: rc,
                recv_displs: rd,
            },
            dtype: dt,
            op: None,
            send: v::buffer(sendBuf, se, "sendBuf")?,
            recv: v::buffer(recvBuf, re, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

/// AlltoAll described by the full rankSize × rankSize count matrix (row = sender); blocks are
/// packed contiguously in rank order on both sides.
#[no_mangle]
pub unsafe extern "C" fn HcclAlltoAllVC(
    sendBuf: *const c_void,
    sendCountMatrix: *const c_void,
    sendType: HcclDataTypeRaw,
    recvBuf: *const c_void,
    recvType: HcclDataTypeRaw,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(
        "HcclAlltoAllVC",
        sendBuf,
        sendCountMatrix,
        sendType,
        recvBuf,
        recvType,
        comm,
        stream
    );
    call("HcclAlltoAllVC", || {
        let c = v::comm(comm)?;
        let dt = same_type(sendType, recvType)?;
        let n = c.size();
        let cells = v::mul(n as u64, n as u64)?;
        if cells > u32::MAX as u64 {
            return Err(Error::new(ErrorKind::Para, "count matrix too large"));
        }
        let m = v::u64_array(sendCountMatrix, cells as u32, "sendCountMatrix")?;
        let (me, n) = (c.rank() as usize, n as usize);
        let send_counts: Vec<usize> = (0..n).map(|p| m[me * n + p]).collect();
        let recv_counts: Vec<usize> = (0..n).map(|p| m[p * n + me]).collect();
        let prefix = |v: &[usize]| -> crate::base::error::Result<Vec<usize>> {
            let mut out = Vec::with_capacity(v.len());
            let mut at = 0usize;
            for &x in v {
                out.push(at);
                at = at
                    .checked_add(x)
                    .ok_or_else(|| Error::new(ErrorKind::Para, "count matrix row overflows"))?;
            }
            Ok(out)
        };
        let send_displs = prefix(&send_counts)?;
        let recv_displs = prefix(&recv_counts)?;
        let se = v::bytes(v::extent(&send_counts, &send_displs)? as u64, dt)?;
        let re = v::bytes(v::extent(&recv_counts, &recv_displs)? as u64, dt)?;
        let args = OpArgs {
            name: "AlltoAllVC",
            coll: Coll::AlltoAllV {
                send_counts,
                send_displs,
                recv_counts,
                recv_displs,
            },
            dtype: dt,
            op: None,
            send: v::buffer(sendBuf, se, "sendBuf")?,
            recv: v::buffer(recvBuf, re, "recvBuf")?,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}

fn p2p(
    send: bool,
    buf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    peer: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    let api = if send { "HcclSend" } else { "HcclRecv" };
    call(api, || {
        let c = v::comm(comm)?;
        let dt = v::dtype(dataType)?;
        let peer = v::rank_in(peer, &c, if send { "destRank" } else { "srcRank" })?;
        let n = v::bytes(count, dt)?;
        let b = v::buffer(buf, n, if send { "sendBuf" } else { "recvBuf" })?;
        let args = OpArgs {
            name: if send { "Send" } else { "Recv" },
            coll: Coll::P2p {
                items: vec![P2pItem {
                    send,
                    peer,
                    bytes: n,
                }],
            },
            dtype: dt,
            op: None,
            send: 0,
            recv: 0,
            ext: vec![b],
        };
        dispatch(c, args, stream as usize)
    })
}

/// Sends `count` elements to `destRank`, which must post the matching `HcclRecv`.
#[no_mangle]
pub unsafe extern "C" fn HcclSend(
    sendBuf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    destRank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!("HcclSend", sendBuf, count, dataType, destRank, comm, stream);
    p2p(true, sendBuf, count, dataType, destRank, comm, stream)
}

/// Receives `count` elements from `srcRank`.
#[no_mangle]
pub unsafe extern "C" fn HcclRecv(
    recvBuf: *mut c_void,
    count: u64,
    dataType: HcclDataTypeRaw,
    srcRank: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!("HcclRecv", recvBuf, count, dataType, srcRank, comm, stream);
    p2p(false, recvBuf, count, dataType, srcRank, comm, stream)
}

/// Runs a batch of sends and receives together (they complete as one step, in any order).
#[no_mangle]
pub unsafe extern "C" fn HcclBatchSendRecv(
    sendRecvInfo: *mut HcclSendRecvItem,
    itemNum: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!("HcclBatchSendRecv", sendRecvInfo, itemNum, comm, stream);
    call("HcclBatchSendRecv", || {
        let c = v::comm(comm)?;
        if itemNum == 0 {
            return Ok(());
        }
        let base = v::non_null_mut(sendRecvInfo, "sendRecvInfo")?;
        let mut items = Vec::with_capacity(itemNum as usize);
        let mut ext = Vec::with_capacity(itemNum as usize);
        for i in 0..itemNum as usize {
            // Fields are read as raw integers: an out-of-range enum value must not be assumed.
            let it = std::ptr::read_unaligned(base.add(i));
            let send = match it.sendRecvType {
                0 => true,
                1 => false,
                t => {
                    return Err(Error::new(
                        ErrorKind::Para,
                        format!("item {i}: invalid HcclSendRecvType {t}"),
                    ))
                }
            };
            let dt = v::dtype(it.dataType).map_err(|e| e.context(format!("item {i}")))?;
            let peer = v::rank_in(it.remoteRank, &c, "remoteRank")
                .map_err(|e| e.context(format!("item {i}")))?;
            let n = v::bytes(it.count, dt)?;
            ext.push(v::buffer(it.buf, n, "buf").map_err(|e| e.context(format!("item {i}")))?);
            items.push(P2pItem {
                send,
                peer,
                bytes: n,
            });
        }
        let args = OpArgs {
            name: "BatchSendRecv",
            coll: Coll::P2p { items },
            dtype: crate::base::dtype::DataType::Uint8,
            op: None,
            send: 0,
            recv: 0,
            ext,
        };
        dispatch(c, args, stream as usize)
    })
}

/// Returns on every rank once all ranks have entered.
#[no_mangle]
pub unsafe extern "C" fn HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult {
    entry!("HcclBarrier", comm, stream);
    call("HcclBarrier", || {
        let c = v::comm(comm)?;
        let args = OpArgs {
            name: "Barrier",
            coll: Coll::Barrier,
            dtype: crate::base::dtype::DataType::Uint8,
            op: None,
            send: 0,
            recv: 0,
            ext: Vec::new(),
        };
        dispatch(c, args, stream as usize)
    })
}
