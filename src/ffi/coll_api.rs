//! The collective operations of `hccl.h`.
//!
//! This file is the source cbindgen reads for `include/hccl/hccl.h`. Every body is one
//! `entry!` (see [`super::boundary`]): the communicator check, panic boundary, entry log and
//! result mapping come from there; what remains here is each operation's own argument checks.
//! The checks run before the operation's arguments are built, never inside the `OpArgs`
//! literal: a `?` there makes the collective a temporary that is then moved whole, and a
//! small call pays for every store it makes (see `base::error`).
//!
//! # Safety
//! These are C entry points with HCCL's contract: every pointer argument is either NULL
//! (rejected with `HCCL_E_PTR` where a value is required) or valid for the access the HCCL
//! documentation describes for that argument (buffers of `count` elements, arrays of
//! `rankSize` counts, writable output slots). Handles are never dereferenced: they are looked up.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::os::raw::c_void;

use super::boundary::{entry, op_name};
use super::types::{
    aclrtStream, HcclComm, HcclDataTypeRaw, HcclReduceOpRaw, HcclResult, HcclSendRecvItem,
};
use super::validate as v;
use crate::algo::{Coll, P2pItem};
use crate::base::dtype::DataType;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::limits::MAX_BATCH_ITEMS;
use crate::comm::dispatch::{dispatch, dispatch_reusing};
use crate::comm::registry::Pinned;
use crate::comm::{Communicator, OpArgs};

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
    entry!(comm(comm => c), sendBuf, recvBuf, count, dataType, op, stream; {
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let n = v::bytes(count, dt)?;
        let count = v::count(count)?;
        let send = v::buffer(sendBuf, n, "sendBuf")?;
        let recv = v::buffer(recvBuf, n, "recvBuf")?;
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::AllReduce { count },
            dtype: dt,
            op: Some(op),
            send,
            recv,
            ext: Vec::new(),
            compress: None,
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
    entry!(comm(comm => c), buf, count, dataType, root, stream; {
        let dt = v::dtype(dataType)?;
        let root = v::rank_in(root, c, "root")?;
        let b = v::buffer(buf, v::bytes(count, dt)?, "buf")?;
        let count = v::count(count)?;
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::Broadcast { count, root },
            dtype: dt,
            op: None,
            send: b,
            recv: b,
            ext: Vec::new(),
            compress: None,
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
    entry!(comm(comm => c), sendBuf, recvBuf, count, dataType, op, root, stream; {
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let root = v::rank_in(root, c, "root")?;
        let n = v::bytes(count, dt)?;
        let recv_bytes = if c.rank() == root { n } else { 0 };
        let count = v::count(count)?;
        let send = v::buffer(sendBuf, n, "sendBuf")?;
        let recv = v::buffer(recvBuf, recv_bytes, "recvBuf")?;
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::Reduce { count, root },
            dtype: dt,
            op: Some(op),
            send,
            recv,
            ext: Vec::new(),
            compress: None,
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
    entry!(comm(comm => c), sendBuf, recvBuf, sendCount, dataType, stream; {
        let dt = v::dtype(dataType)?;
        let n = v::bytes(sendCount, dt)?;
        let total = v::bytes(v::mul(sendCount, c.size() as u64)?, dt)?;
        let count = v::count(sendCount)?;
        let send = v::buffer(sendBuf, n, "sendBuf")?;
        let recv = v::buffer(recvBuf, total, "recvBuf")?;
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::AllGather { count },
            dtype: dt,
            op: None,
            send,
            recv,
            ext: Vec::new(),
            compress: None,
        };
        dispatch(c, args, stream as usize)
    })
}

/// `counts[rank]` must equal the count this rank passed as its own (`sendCount`, `recvCount`).
fn own_count(c: &Communicator, counts: &[usize], own: u64, names: (&str, &str)) -> Result<()> {
    let r = c.rank() as usize;
    if counts[r] as u64 != own {
        return Err(Error::new(
            ErrorKind::Para,
            format!(
                "{} {own} differs from {}[{r}] = {}",
                names.0, names.1, counts[r]
            ),
        ));
    }
    Ok(())
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
    entry!(comm(comm => c), sendBuf, sendCount, recvBuf, recvCounts, recvDispls, dataType, stream; {
        let dt = v::dtype(dataType)?;
        // SAFETY: per the HCCL contract both arrays hold one uint64 per rank of `comm`.
        let counts = unsafe { v::u64_array(recvCounts, c.size(), "recvCounts") }?;
        // SAFETY: as above.
        let displs = unsafe { v::u64_array(recvDispls, c.size(), "recvDispls") }?;
        own_count(c, &counts, sendCount, ("sendCount", "recvCounts"))?;
        let ext = v::extent(&counts, &displs)?;
        let args = OpArgs {
            name: op_name!(),
            send: v::buffer(sendBuf, v::bytes(sendCount, dt)?, "sendBuf")?,
            recv: v::buffer(recvBuf, v::bytes(ext as u64, dt)?, "recvBuf")?,
            coll: Coll::AllGatherV { counts, displs },
            dtype: dt,
            op: None,
            ext: Vec::new(),
            compress: None,
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
    entry!(comm(comm => c), sendBuf, recvBuf, recvCount, dataType, op, stream; {
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        let n = v::bytes(recvCount, dt)?;
        let total = v::bytes(v::mul(recvCount, c.size() as u64)?, dt)?;
        let count = v::count(recvCount)?;
        let send = v::buffer(sendBuf, total, "sendBuf")?;
        let recv = v::buffer(recvBuf, n, "recvBuf")?;
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::ReduceScatter { count },
            dtype: dt,
            op: Some(op),
            send,
            recv,
            ext: Vec::new(),
            compress: None,
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
    entry!(comm(comm => c), sendBuf, sendCounts, sendDispls, recvBuf, recvCount, dataType, op, stream; {
        let dt = v::dtype(dataType)?;
        let op = v::reduce_op(op, dt)?;
        // SAFETY: per the HCCL contract both arrays hold one uint64 per rank of `comm`.
        let counts = unsafe { v::u64_array(sendCounts, c.size(), "sendCounts") }?;
        // SAFETY: as above.
        let displs = unsafe { v::u64_array(sendDispls, c.size(), "sendDispls") }?;
        own_count(c, &counts, recvCount, ("recvCount", "sendCounts"))?;
        let ext = v::extent(&counts, &displs)?;
        let args = OpArgs {
            name: op_name!(),
            send: v::buffer(sendBuf, v::bytes(ext as u64, dt)?, "sendBuf")?,
            recv: v::buffer(recvBuf, v::bytes(recvCount, dt)?, "recvBuf")?,
            coll: Coll::ReduceScatterV { counts, displs },
            dtype: dt,
            op: Some(op),
            ext: Vec::new(),
            compress: None,
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
    entry!(comm(comm => c), sendBuf, recvBuf, recvCount, dataType, root, stream; {
        let dt = v::dtype(dataType)?;
        let root = v::rank_in(root, c, "root")?;
        let n = v::bytes(recvCount, dt)?;
        let total = v::bytes(v::mul(recvCount, c.size() as u64)?, dt)?;
        let send_bytes = if c.rank() == root { total } else { 0 };
        let count = v::count(recvCount)?;
        let send = v::buffer(sendBuf, send_bytes, "sendBuf")?;
        let recv = v::buffer(recvBuf, n, "recvBuf")?;
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::Scatter { count, root },
            dtype: dt,
            op: None,
            send,
            recv,
            ext: Vec::new(),
            compress: None,
        };
        dispatch(c, args, stream as usize)
    })
}

fn same_type(send: HcclDataTypeRaw, recv: HcclDataTypeRaw) -> Result<DataType> {
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

/// The AlltoAll described by per-peer counts and displacements, its buffers checked.
fn alltoall_args(
    name: &'static str,
    dt: DataType,
    (send, send_counts, send_displs): (*const c_void, Vec<usize>, Vec<usize>),
    (recv, recv_counts, recv_displs): (*const c_void, Vec<usize>, Vec<usize>),
) -> Result<OpArgs> {
    let se = v::bytes(v::extent(&send_counts, &send_displs)? as u64, dt)?;
    let re = v::bytes(v::extent(&recv_counts, &recv_displs)? as u64, dt)?;
    Ok(OpArgs {
        name,
        send: v::buffer(send, se, "sendBuf")?,
        recv: v::buffer(recv, re, "recvBuf")?,
        coll: Coll::AlltoAllV {
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        },
        dtype: dt,
        op: None,
        ext: Vec::new(),
        compress: None,
    })
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
    entry!(comm(comm => c), sendBuf, sendCount, sendType, recvBuf, recvCount, recvType, stream; {
        let dt = same_type(sendType, recvType)?;
        if sendCount != recvCount {
            return Err(Error::new(
                ErrorKind::Para,
                format!("sendCount {sendCount} and recvCount {recvCount} must be equal"),
            ));
        }
        let n = c.size() as usize;
        // The whole buffer must be within bounds before per-block offsets are computed.
        let total = v::bytes(v::mul(sendCount, n as u64)?, dt)?;
        let cnt = v::count(sendCount)?;
        let args = OpArgs {
            name: op_name!(),
            send: v::buffer(sendBuf, total, "sendBuf")?,
            recv: v::buffer(recvBuf, total, "recvBuf")?,
            coll: uniform_alltoall(n, cnt),
            dtype: dt,
            op: None,
            ext: Vec::new(),
            compress: None,
        };
        dispatch_reusing(c, args, stream as usize, |a| {
            SPARE_ALLTOALL.set(Some(a.coll));
        })
    })
}

thread_local! {
    /// The previous `HcclAlltoAll`'s operation on this thread: the next call reuses its four
    /// count and displacement vectors, as they are when its shape is the same and refilled
    /// otherwise, instead of allocating them (a small AlltoAll would otherwise spend about a
    /// quarter of its instructions on the allocator).
    static SPARE_ALLTOALL: std::cell::Cell<Option<Coll>> = const { std::cell::Cell::new(None) };
}

/// The operation of an AlltoAll of `cnt` elements per block among `n` ranks, blocks packed in
/// rank order: the previous call's when it had that shape.
fn uniform_alltoall(n: usize, cnt: usize) -> Coll {
    let mut v = match SPARE_ALLTOALL.take() {
        Some(Coll::AlltoAllV {
            send_counts,
            send_displs,
            recv_counts,
            recv_displs,
        }) => [send_counts, send_displs, recv_counts, recv_displs],
        _ => Default::default(),
    };
    // Only `HcclAlltoAll` leaves its operation here, so the block count and the first count
    // tell the whole shape.
    if !(v.iter().all(|x| x.len() == n) && v[0].first() == Some(&cnt)) {
        for (k, x) in v.iter_mut().enumerate() {
            x.clear();
            if k % 2 == 0 {
                x.extend(std::iter::repeat_n(cnt, n));
            } else {
                x.extend((0..n).map(|i| i * cnt));
            }
        }
    }
    let [send_counts, send_displs, recv_counts, recv_displs] = v;
    Coll::AlltoAllV {
        send_counts,
        send_displs,
        recv_counts,
        recv_displs,
    }
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
    entry!(comm(comm => c), sendBuf, sendCounts, sdispls, sendType, recvBuf, recvCounts, rdispls, recvType, stream; {
        let dt = same_type(sendType, recvType)?;
        let n = c.size();
        // SAFETY: per the HCCL contract the four arrays hold one uint64 per rank of `comm`.
        let (sc, sd, rc, rd) = unsafe {
            (
                v::u64_array(sendCounts, n, "sendCounts")?,
                v::u64_array(sdispls, n, "sdispls")?,
                v::u64_array(recvCounts, n, "recvCounts")?,
                v::u64_array(rdispls, n, "rdispls")?,
            )
        };
        let args = alltoall_args(op_name!(), dt, (sendBuf, sc, sd), (recvBuf, rc, rd))?;
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
    entry!(comm(comm => c), sendBuf, sendCountMatrix, sendType, recvBuf, recvType, stream; {
        let dt = same_type(sendType, recvType)?;
        let m = v::non_null(sendCountMatrix, "sendCountMatrix")? as *const u64;
        let (me, n) = (c.rank() as usize, c.size() as usize);
        // Only this rank's row (what it sends) and column (what it receives) are read: the
        // whole matrix of a large communicator would be gigabytes.
        let mut send_counts = Vec::with_capacity(n);
        let mut recv_counts = Vec::with_capacity(n);
        for p in 0..n {
            // SAFETY: per the HCCL contract the matrix holds n × n uint64 values, and
            // me, p < n (n ≤ MAX_RANKS, so the index fits).
            unsafe {
                send_counts.push(v::u64_at(m, me * n + p, "sendCountMatrix")?);
                recv_counts.push(v::u64_at(m, p * n + me, "sendCountMatrix")?);
            }
        }
        let prefix = |counts: &[usize]| -> Result<Vec<usize>> {
            let mut out = Vec::with_capacity(counts.len());
            let mut at = 0usize;
            for &x in counts {
                out.push(at);
                at = at
                    .checked_add(x)
                    .ok_or_else(|| Error::new(ErrorKind::Para, "count matrix row overflows"))?;
            }
            Ok(out)
        };
        let send_displs = prefix(&send_counts)?;
        let recv_displs = prefix(&recv_counts)?;
        let args = alltoall_args(
            op_name!(),
            dt,
            (sendBuf, send_counts, send_displs),
            (recvBuf, recv_counts, recv_displs),
        )?;
        dispatch(c, args, stream as usize)
    })
}

/// One send or receive of `count` elements with `peer`.
fn p2p(
    name: &'static str,
    c: &Pinned,
    send: bool,
    (buf, count, dataType, peer): (*mut c_void, u64, HcclDataTypeRaw, u32),
    stream: aclrtStream,
) -> Result<()> {
    let dt = v::dtype(dataType)?;
    let peer = v::rank_in(peer, c, if send { "destRank" } else { "srcRank" })?;
    let n = v::bytes(count, dt)?;
    let b = v::buffer(buf, n, if send { "sendBuf" } else { "recvBuf" })?;
    let (mut items, mut ext) = spare_p2p();
    items.push(P2pItem {
        send,
        peer,
        bytes: n,
    });
    ext.push(b);
    let args = OpArgs {
        name,
        coll: Coll::P2p { items },
        dtype: dt,
        op: None,
        send: 0,
        recv: 0,
        ext,
        compress: None,
    };
    dispatch_reusing(c, args, stream as usize, keep_p2p)
}

thread_local! {
    /// The previous point-to-point call's item and buffer lists on this thread, refilled by the
    /// next call instead of allocated (as for AlltoAll, see `SPARE_ALLTOALL`).
    static SPARE_P2P: std::cell::Cell<Option<(Vec<P2pItem>, Vec<usize>)>> =
        const { std::cell::Cell::new(None) };
}

/// Empty item and buffer lists, those of the previous point-to-point call when there is one.
fn spare_p2p() -> (Vec<P2pItem>, Vec<usize>) {
    let (mut items, mut ext) = SPARE_P2P.take().unwrap_or_default();
    items.clear();
    ext.clear();
    (items, ext)
}

/// Keeps a finished point-to-point call's lists for the next call (see [`spare_p2p`]).
fn keep_p2p(args: OpArgs) {
    if let Coll::P2p { items } = args.coll {
        SPARE_P2P.set(Some((items, args.ext)));
    }
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
    entry!(comm(comm => c), sendBuf, count, dataType, destRank, stream; {
        p2p(op_name!(), c, true, (sendBuf, count, dataType, destRank), stream)
    })
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
    entry!(comm(comm => c), recvBuf, count, dataType, srcRank, stream; {
        p2p(op_name!(), c, false, (recvBuf, count, dataType, srcRank), stream)
    })
}

/// Runs a batch of sends and receives together (they complete as one step, in any order).
#[no_mangle]
pub unsafe extern "C" fn HcclBatchSendRecv(
    sendRecvInfo: *mut HcclSendRecvItem,
    itemNum: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry!(comm(comm => c), sendRecvInfo, itemNum, stream; {
        if itemNum == 0 {
            return Ok(());
        }
        if itemNum > MAX_BATCH_ITEMS {
            return Err(Error::new(
                ErrorKind::Para,
                format!("itemNum {itemNum} is more than {MAX_BATCH_ITEMS}"),
            ));
        }
        let base = v::non_null_mut(sendRecvInfo, "sendRecvInfo")?;
        let (mut items, mut ext) = spare_p2p();
        for i in 0..itemNum as usize {
            // Fields are read as raw integers: an out-of-range enum value must not be assumed.
            // SAFETY: per the HCCL contract `sendRecvInfo` holds `itemNum` items.
            let it = unsafe { base.add(i).read_unaligned() };
            let at = |e: Error| e.context(format!("item {i}"));
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
            let dt = v::dtype(it.dataType).map_err(at)?;
            let peer = v::rank_in(it.remoteRank, c, "remoteRank").map_err(at)?;
            let n = v::bytes(it.count, dt).map_err(at)?;
            ext.push(v::buffer(it.buf, n, "buf").map_err(at)?);
            items.push(P2pItem {
                send,
                peer,
                bytes: n,
            });
        }
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::P2p { items },
            dtype: DataType::Uint8,
            op: None,
            send: 0,
            recv: 0,
            ext,
            compress: None,
        };
        dispatch_reusing(c, args, stream as usize, keep_p2p)
    })
}

/// Returns on every rank once all ranks have entered.
#[no_mangle]
pub unsafe extern "C" fn HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult {
    entry!(comm(comm => c), stream; {
        let args = OpArgs {
            name: op_name!(),
            coll: Coll::Barrier,
            dtype: DataType::Uint8,
            op: None,
            send: 0,
            recv: 0,
            ext: Vec::new(),
            compress: None,
        };
        dispatch(c, args, stream as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an AlltoAll of `cnt` elements per block among `n` ranks must describe.
    fn packed(n: usize, cnt: usize) -> Coll {
        let counts = vec![cnt; n];
        let displs: Vec<usize> = (0..n).map(|i| i * cnt).collect();
        Coll::AlltoAllV {
            send_counts: counts.clone(),
            send_displs: displs.clone(),
            recv_counts: counts,
            recv_displs: displs,
        }
    }

    #[test]
    fn a_reused_alltoall_shape_is_refilled_when_it_changes() {
        for (n, cnt) in [
            (2, 3),
            (2, 3),
            (3, 3),
            (3, 4),
            (3, 0),
            (1, 5),
            (4, 1),
            (2, 3),
        ] {
            let c = uniform_alltoall(n, cnt);
            assert_eq!(c, packed(n, cnt), "{n} ranks, {cnt} per block");
            SPARE_ALLTOALL.set(Some(c));
        }
    }
}
