//! Collective test cases shared by the thread and TCP suites: each runs one operation on
//! the calling rank with generated inputs and checks the output bit for bit.

#![allow(dead_code)]

use super::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::os::raw::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};

pub const SIZES: [usize; 4] = [0, 1, 7, 4099];
pub const BIG: usize = 1_048_577;

pub fn p(v: &[u8]) -> *mut c_void {
    v.as_ptr() as *mut c_void
}
pub fn pm(v: &mut [u8]) -> *mut c_void {
    v.as_mut_ptr() as *mut c_void
}

// ------------------------------------------------------------------------------------------
// AllReduce

pub fn allreduce_case(
    r: &Rank,
    comm: HcclComm,
    dt: u32,
    op: u32,
    count: usize,
    inplace: bool,
    tag: u64,
) {
    let n = r.n;
    let s = seed(&[1, dt as u64, op as u64, count as u64, n as u64, tag]);
    let input = gen(dt, Some(op), s, r.rank, count);
    let key = format!("ar/{dt}/{op}/{count}/{inplace}/{tag}");
    let exp = r.shared(&key, n, || ref_reduce_range(dt, op, s, n, 0, count));
    let what = format!(
        "AllReduce {} {} count={count} inplace={inplace} n={n}",
        dt_name(dt),
        op_name(op)
    );
    let out = if inplace {
        let mut b = input.clone();
        let res = unsafe {
            HcclAllReduce(
                pm(&mut b),
                pm(&mut b),
                count as u64,
                dt,
                op,
                comm,
                null_mut(),
            )
        };
        if !r.ok(res, &what) {
            return;
        }
        b
    } else {
        let mut b = poison(input.len(), s);
        let res = unsafe {
            HcclAllReduce(
                p(&input),
                pm(&mut b),
                count as u64,
                dt,
                op,
                comm,
                null_mut(),
            )
        };
        if !r.ok(res, &what) {
            return;
        }
        r.check_bytes(
            &format!("{what} (sendBuf modified)"),
            dt,
            &input,
            &gen(dt, Some(op), s, r.rank, count),
        );
        b
    };
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn allreduce_body(r: &Rank) {
    for dt in REDUCIBLE {
        for op in OPS {
            for count in SIZES {
                allreduce_case(r, r.comm, dt, op, count, false, 0);
                allreduce_case(r, r.comm, dt, op, count, true, 0);
            }
        }
    }
    for (dt, op) in [(FP32, SUM), (INT8, MAX), (BF16, SUM)] {
        allreduce_case(r, r.comm, dt, op, BIG, false, 0);
    }
    allreduce_case(r, r.comm, FP16, SUM, BIG, true, 0);
    // Reductions of data-movement-only types are refused before any communication.
    for dt in MOVE_ONLY {
        for op in OPS {
            let b = vec![0u8; 7 * esize(dt)];
            let mut o = b.clone();
            let res = unsafe { HcclAllReduce(p(&b), pm(&mut o), 7, dt, op, r.comm, null_mut()) };
            r.expect_code(
                res,
                HcclResult::HCCL_E_NOT_SUPPORT,
                &format!("AllReduce {}", dt_name(dt)),
            );
        }
    }
    // ... and the communicator still works afterwards.
    allreduce_case(r, r.comm, INT32, SUM, 7, false, 1);
}

// ------------------------------------------------------------------------------------------
// Reduce

pub fn reduce_case(
    r: &Rank,
    dt: u32,
    op: u32,
    count: usize,
    root: u32,
    inplace: bool,
    null_nonroot: bool,
) {
    let n = r.n;
    let s = seed(&[2, dt as u64, op as u64, count as u64, n as u64, root as u64]);
    let input = gen(dt, Some(op), s, r.rank, count);
    let what = format!(
        "Reduce {} {} count={count} root={root} inplace={inplace} n={n}",
        dt_name(dt),
        op_name(op)
    );
    let is_root = r.rank == root;
    let mut out = if inplace && is_root {
        input.clone()
    } else {
        poison(input.len(), s ^ 7)
    };
    let before = out.clone();
    let send = if inplace && is_root {
        pm(&mut out)
    } else {
        p(&input)
    };
    let recv = if !is_root && null_nonroot {
        null_mut()
    } else {
        pm(&mut out)
    };
    let res = unsafe { HcclReduce(send, recv, count as u64, dt, op, root, r.comm, null_mut()) };
    if !r.ok(res, &what) {
        return;
    }
    if is_root {
        let exp = ref_reduce_range(dt, op, s, n, 0, count);
        r.check_bytes(&what, dt, &out, &exp);
    } else {
        r.check_bytes(
            &format!("{what} (non-root recvBuf written)"),
            dt,
            &out,
            &before,
        );
    }
}

pub fn reduce_body(r: &Rank) {
    let n = r.n;
    let mut k = 0u32;
    for dt in REDUCIBLE {
        for op in OPS {
            for count in SIZES {
                k += 1;
                let root = (k * 7 + dt) % n;
                reduce_case(
                    r,
                    dt,
                    op,
                    count,
                    root,
                    k.is_multiple_of(2),
                    k.is_multiple_of(3),
                );
            }
        }
    }
    reduce_case(r, FP32, SUM, BIG, n - 1, false, false);
    reduce_case(r, INT8, MAX, BIG, n / 2, true, false);
    reduce_case(r, BF16, SUM, BIG, 0, false, true);
    for dt in MOVE_ONLY {
        let b = vec![0u8; esize(dt)];
        let mut o = b.clone();
        let res = unsafe { HcclReduce(p(&b), pm(&mut o), 1, dt, SUM, 0, r.comm, null_mut()) };
        r.expect_code(
            res,
            HcclResult::HCCL_E_NOT_SUPPORT,
            &format!("Reduce {}", dt_name(dt)),
        );
    }
}

// ------------------------------------------------------------------------------------------
// Broadcast

pub fn broadcast_case(r: &Rank, dt: u32, count: usize, root: u32) {
    let n = r.n;
    let s = seed(&[3, dt as u64, count as u64, n as u64, root as u64]);
    let what = format!("Broadcast {} count={count} root={root} n={n}", dt_name(dt));
    let exp = gen(dt, None, s, root, count);
    let mut buf = if r.rank == root {
        exp.clone()
    } else {
        poison(exp.len(), s ^ r.rank as u64)
    };
    let res = unsafe { HcclBroadcast(pm(&mut buf), count as u64, dt, root, r.comm, null_mut()) };
    if r.ok(res, &what) {
        r.check_bytes(&what, dt, &buf, &exp);
    }
}

pub fn broadcast_body(r: &Rank) {
    let mut k = 0;
    for dt in ALL_DTYPES {
        for count in SIZES {
            k += 1;
            broadcast_case(r, dt, count, (k * 5 + 1) % r.n);
        }
    }
    broadcast_case(r, UINT8, BIG, r.n - 1);
    broadcast_case(r, FP32, BIG, 0);
}

// ------------------------------------------------------------------------------------------
// AllGather, AllGatherV

pub fn allgather_case(r: &Rank, dt: u32, count: usize, inplace: bool) {
    let n = r.n as usize;
    let es = esize(dt);
    let s = seed(&[4, dt as u64, count as u64, n as u64]);
    let what = format!(
        "AllGather {} count={count} inplace={inplace} n={n}",
        dt_name(dt)
    );
    let mine = gen(dt, None, s, r.rank, count);
    let mut out = poison(n * count * es, s);
    let res = if inplace {
        let off = r.rank as usize * count * es;
        out[off..off + count * es].copy_from_slice(&mine);
        let base = pm(&mut out);
        unsafe {
            HcclAllGather(
                (base as *mut u8).add(off) as *mut c_void,
                base,
                count as u64,
                dt,
                r.comm,
                null_mut(),
            )
        }
    } else {
        unsafe { HcclAllGather(p(&mine), pm(&mut out), count as u64, dt, r.comm, null_mut()) }
    };
    if !r.ok(res, &what) {
        return;
    }
    let exp = r.shared(&format!("ag/{dt}/{count}/{inplace}"), n as u32, || {
        let mut e = Vec::with_capacity(n * count * es);
        for q in 0..n as u32 {
            e.extend(gen(dt, None, s, q, count));
        }
        e
    });
    r.check_bytes(&what, dt, &out, &exp);
}

/// Irregular per-rank counts around `c` (some zero), and displacements with gaps.
pub fn vlayout(c: usize, n: usize, salt: usize) -> (Vec<u64>, Vec<u64>, usize) {
    let counts: Vec<u64> = (0..n)
        .map(|i| match (i + salt) % 3 {
            0 => c,
            1 => c / 2,
            _ => c + 1,
        } as u64)
        .collect();
    let mut displs = Vec::with_capacity(n);
    let mut at = 0u64;
    for (i, &k) in counts.iter().enumerate() {
        at += (i % 2) as u64; // a gap before every other block
        displs.push(at);
        at += k;
    }
    // Reverse the block order in memory for odd salts: displacements need not increase.
    if salt % 2 == 1 && n > 1 {
        let mut at = 0u64;
        for i in (0..n).rev() {
            displs[i] = at;
            at += counts[i] + 1;
        }
    }
    let extent = (0..n).map(|i| counts[i] + displs[i]).max().unwrap_or(0) as usize;
    (counts, displs, extent)
}

pub fn allgatherv_case(r: &Rank, dt: u32, c: usize, salt: usize) {
    let n = r.n as usize;
    let es = esize(dt);
    let (counts, displs, extent) = vlayout(c, n, salt);
    let s = seed(&[5, dt as u64, c as u64, n as u64, salt as u64]);
    let what = format!(
        "AllGatherV {} c={c} counts={counts:?} displs={displs:?}",
        dt_name(dt)
    );
    let me = r.rank as usize;
    let mine = gen(dt, None, s, r.rank, counts[me] as usize);
    let mut out = poison(extent * es, s);
    let mut exp = out.clone();
    let res = unsafe {
        HcclAllGatherV(
            p(&mine),
            counts[me],
            pm(&mut out),
            counts.as_ptr() as *const c_void,
            displs.as_ptr() as *const c_void,
            dt,
            r.comm,
            null_mut(),
        )
    };
    if !r.ok(res, &what) {
        return;
    }
    for q in 0..n {
        let d = displs[q] as usize * es;
        exp[d..d + counts[q] as usize * es].copy_from_slice(&gen(
            dt,
            None,
            s,
            q as u32,
            counts[q] as usize,
        ));
    }
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn allgather_body(r: &Rank) {
    for dt in ALL_DTYPES {
        for count in SIZES {
            allgather_case(r, dt, count, false);
            allgather_case(r, dt, count, true);
            allgatherv_case(r, dt, count, dt as usize + count);
        }
    }
    allgather_case(r, UINT8, BIG, false);
    allgather_case(r, FP8E5M2, BIG, true);
    allgatherv_case(r, INT8, BIG / r.n as usize, 1);
}

// ------------------------------------------------------------------------------------------
// ReduceScatter, ReduceScatterV

pub fn reduce_scatter_case(r: &Rank, dt: u32, op: u32, count: usize, inplace: bool) {
    let n = r.n as usize;
    let es = esize(dt);
    let s = seed(&[6, dt as u64, op as u64, count as u64, n as u64]);
    let what = format!(
        "ReduceScatter {} {} recvCount={count} inplace={inplace} n={n}",
        dt_name(dt),
        op_name(op)
    );
    let me = r.rank as usize;
    let mut input = gen(dt, Some(op), s, r.rank, n * count);
    let out = if inplace {
        let base = pm(&mut input);
        let recv = unsafe { (base as *mut u8).add(me * count * es) } as *mut c_void;
        let res =
            unsafe { HcclReduceScatter(base, recv, count as u64, dt, op, r.comm, null_mut()) };
        if !r.ok(res, &what) {
            return;
        }
        input[me * count * es..(me + 1) * count * es].to_vec()
    } else {
        let mut out = poison(count * es, s);
        let res = unsafe {
            HcclReduceScatter(
                p(&input),
                pm(&mut out),
                count as u64,
                dt,
                op,
                r.comm,
                null_mut(),
            )
        };
        if !r.ok(res, &what) {
            return;
        }
        out
    };
    let exp = ref_reduce_range(dt, op, s, n as u32, me * count, count);
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn reduce_scatterv_case(r: &Rank, dt: u32, op: u32, c: usize, salt: usize) {
    let n = r.n as usize;
    let es = esize(dt);
    let (counts, displs, extent) = vlayout(c, n, salt);
    let s = seed(&[7, dt as u64, op as u64, c as u64, n as u64, salt as u64]);
    let what = format!(
        "ReduceScatterV {} {} counts={counts:?} displs={displs:?}",
        dt_name(dt),
        op_name(op)
    );
    let me = r.rank as usize;
    let input = gen(dt, Some(op), s, r.rank, extent);
    let mut out = poison(counts[me] as usize * es, s);
    let res = unsafe {
        HcclReduceScatterV(
            p(&input),
            counts.as_ptr() as *const c_void,
            displs.as_ptr() as *const c_void,
            pm(&mut out),
            counts[me],
            dt,
            op,
            r.comm,
            null_mut(),
        )
    };
    if !r.ok(res, &what) {
        return;
    }
    let exp = ref_reduce_range(
        dt,
        op,
        s,
        n as u32,
        displs[me] as usize,
        counts[me] as usize,
    );
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn reduce_scatter_body(r: &Rank) {
    let mut k = 0usize;
    for dt in REDUCIBLE {
        for op in OPS {
            for count in SIZES {
                k += 1;
                reduce_scatter_case(r, dt, op, count, k.is_multiple_of(2));
                reduce_scatterv_case(r, dt, op, count, k);
            }
        }
    }
    let n = r.n as usize;
    reduce_scatter_case(r, INT8, MAX, BIG, false);
    reduce_scatter_case(r, FP32, SUM, BIG / n + 1, true);
    reduce_scatter_case(r, BF16, SUM, BIG / n + 1, false);
    reduce_scatterv_case(r, FP32, SUM, BIG / n, 0);
    for dt in MOVE_ONLY {
        let b = vec![0u8; n * esize(dt)];
        let mut o = vec![0u8; esize(dt)];
        let res = unsafe { HcclReduceScatter(p(&b), pm(&mut o), 1, dt, MIN, r.comm, null_mut()) };
        r.expect_code(
            res,
            HcclResult::HCCL_E_NOT_SUPPORT,
            &format!("ReduceScatter {}", dt_name(dt)),
        );
    }
}

// ------------------------------------------------------------------------------------------
// Scatter

pub fn scatter_case(r: &Rank, dt: u32, count: usize, root: u32, null_nonroot: bool) {
    let n = r.n as usize;
    let es = esize(dt);
    let s = seed(&[8, dt as u64, count as u64, n as u64, root as u64]);
    let what = format!(
        "Scatter {} recvCount={count} root={root} n={n}",
        dt_name(dt)
    );
    let send = if r.rank == root {
        gen(dt, None, s, root, n * count)
    } else {
        Vec::new()
    };
    static DUMMY: [u8; 16] = [0x5a; 16];
    // A non-root passes NULL or an unrelated buffer: it must be neither read nor written.
    let sp = if r.rank == root {
        p(&send)
    } else if null_nonroot {
        null_mut()
    } else {
        DUMMY.as_ptr() as *mut c_void
    };
    let mut out = poison(count * es, s);
    let res = unsafe { HcclScatter(sp, pm(&mut out), count as u64, dt, root, r.comm, null_mut()) };
    if !r.ok(res, &what) {
        return;
    }
    let exp = gen_range(dt, None, s, root, r.rank as usize * count, count);
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn scatter_body(r: &Rank) {
    let mut k = 0;
    for dt in ALL_DTYPES {
        for count in SIZES {
            k += 1;
            scatter_case(r, dt, count, (k * 3 + 2) % r.n, k.is_multiple_of(2));
        }
    }
    scatter_case(r, UINT8, BIG, r.n / 2, true);
    scatter_case(r, FP32, BIG / r.n as usize + 1, 0, false);
}

// ------------------------------------------------------------------------------------------
// AlltoAll, AlltoAllV, AlltoAllVC

pub fn alltoall_case(r: &Rank, dt: u32, count: usize) {
    let n = r.n as usize;
    let es = esize(dt);
    let s = seed(&[9, dt as u64, count as u64, n as u64]);
    let what = format!("AlltoAll {} count={count} n={n}", dt_name(dt));
    let send = gen(dt, None, s, r.rank, n * count);
    let mut out = poison(n * count * es, s);
    let res = unsafe {
        HcclAlltoAll(
            p(&send),
            count as u64,
            dt,
            pm(&mut out),
            count as u64,
            dt,
            r.comm,
            null_mut(),
        )
    };
    if !r.ok(res, &what) {
        return;
    }
    let mut exp = Vec::with_capacity(out.len());
    for q in 0..n as u32 {
        exp.extend(gen_range(dt, None, s, q, r.rank as usize * count, count));
    }
    r.check_bytes(&what, dt, &out, &exp);
}

/// Elements rank `src` sends to rank `dst` in the V tests.
pub fn a2a_cnt(src: usize, dst: usize, c: usize) -> usize {
    if c == 0 {
        (src + dst) % 2
    } else {
        c + (src * 3 + dst) % 4 - (src + dst) % 2 * (c.min(2) - 1)
    }
}

/// Displacements with one-element gaps, in reversed block order.
pub fn gapped(counts: &[u64]) -> (Vec<u64>, usize) {
    let n = counts.len();
    let mut d = vec![0u64; n];
    let mut at = 0u64;
    for i in (0..n).rev() {
        at += 1;
        d[i] = at;
        at += counts[i];
    }
    (d, at as usize)
}

pub fn alltoallv_case(r: &Rank, dt: u32, c: usize) {
    let n = r.n as usize;
    let me = r.rank as usize;
    let es = esize(dt);
    let s = seed(&[10, dt as u64, c as u64, n as u64]);
    let sc: Vec<u64> = (0..n).map(|q| a2a_cnt(me, q, c) as u64).collect();
    let rc: Vec<u64> = (0..n).map(|q| a2a_cnt(q, me, c) as u64).collect();
    let (sd, sext) = gapped(&sc);
    let (rd, rext) = gapped(&rc);
    let what = format!("AlltoAllV {} c={c} n={n} sc={sc:?} rc={rc:?}", dt_name(dt));
    // Rank q's send buffer: element i of its input is gen(q, i); block for dst at sd.
    let send = gen(dt, None, s, r.rank, sext);
    let mut out = poison(rext * es, s);
    let mut exp = out.clone();
    let res = unsafe {
        HcclAlltoAllV(
            p(&send),
            sc.as_ptr() as *const c_void,
            sd.as_ptr() as *const c_void,
            dt,
            pm(&mut out),
            rc.as_ptr() as *const c_void,
            rd.as_ptr() as *const c_void,
            dt,
            r.comm,
            null_mut(),
        )
    };
    if !r.ok(res, &what) {
        return;
    }
    for q in 0..n {
        // q's send displacement for me.
        let qsc: Vec<u64> = (0..n).map(|d| a2a_cnt(q, d, c) as u64).collect();
        let (qsd, _) = gapped(&qsc);
        let blk = gen_range(dt, None, s, q as u32, qsd[me] as usize, rc[q] as usize);
        let at = rd[q] as usize * es;
        exp[at..at + blk.len()].copy_from_slice(&blk);
    }
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn alltoallvc_case(r: &Rank, dt: u32, c: usize) {
    let n = r.n as usize;
    let me = r.rank as usize;
    let es = esize(dt);
    let s = seed(&[11, dt as u64, c as u64, n as u64]);
    let m: Vec<u64> = (0..n * n)
        .map(|i| a2a_cnt(i / n, i % n, c + 1) as u64)
        .collect();
    let what = format!("AlltoAllVC {} c={c} n={n} matrix={m:?}", dt_name(dt));
    let stot: usize = (0..n).map(|q| m[me * n + q] as usize).sum();
    let rtot: usize = (0..n).map(|q| m[q * n + me] as usize).sum();
    let send = gen(dt, None, s, r.rank, stot);
    let mut out = poison(rtot * es, s);
    let res = unsafe {
        HcclAlltoAllVC(
            p(&send),
            m.as_ptr() as *const c_void,
            dt,
            pm(&mut out),
            dt,
            r.comm,
            null_mut(),
        )
    };
    if !r.ok(res, &what) {
        return;
    }
    let mut exp = Vec::with_capacity(out.len());
    for q in 0..n {
        let off: usize = (0..me).map(|d| m[q * n + d] as usize).sum();
        exp.extend(gen_range(
            dt,
            None,
            s,
            q as u32,
            off,
            m[q * n + me] as usize,
        ));
    }
    r.check_bytes(&what, dt, &out, &exp);
}

pub fn alltoall_body(r: &Rank) {
    for dt in ALL_DTYPES {
        for count in SIZES {
            alltoall_case(r, dt, count);
            alltoallv_case(r, dt, count);
            alltoallvc_case(r, dt, count);
        }
    }
    let n = r.n as usize;
    alltoall_case(r, UINT8, BIG / n + 1);
    alltoallv_case(r, FP32, BIG / n);
    alltoallvc_case(r, INT128, BIG / n / 16);
}

// ------------------------------------------------------------------------------------------
// Send/Recv, BatchSendRecv, groups, Barrier

pub fn group_ring_case(r: &Rank, dt: u32, count: usize) {
    let n = r.n;
    let me = r.rank;
    let s = seed(&[12, dt as u64, count as u64, n as u64]);
    let what = format!("group ring {} count={count} n={n}", dt_name(dt));
    let to = (me + 1) % n;
    let from = (me + n - 1) % n;
    let send = gen(dt, None, s, me, count);
    let mut out = poison(send.len(), s);
    unsafe {
        r.ok(HcclGroupStart(), "HcclGroupStart");
        let mut g = false;
        r.ok(HcclGroupStatusGet(&mut g), "HcclGroupStatusGet");
        r.check(g, || "HcclGroupStatusGet false inside a group".into());
        r.ok(
            HcclSend(p(&send), count as u64, dt, to, r.comm, null_mut()),
            &what,
        );
        r.ok(
            HcclRecv(pm(&mut out), count as u64, dt, from, r.comm, null_mut()),
            &what,
        );
        if !r.ok(HcclGroupEnd(), &format!("{what}: HcclGroupEnd")) {
            return;
        }
        r.ok(HcclGroupStatusGet(&mut g), "HcclGroupStatusGet");
        r.check(!g, || "HcclGroupStatusGet true after the group".into());
    }
    r.check_bytes(&what, dt, &out, &gen(dt, None, s, from, count));
}

/// Plain Send/Recv between every ordered pair, one pair at a time.
pub fn sendrecv_pairs(r: &Rank, counts: &[usize], dtypes: &[u32]) {
    let n = r.n;
    let me = r.rank;
    let mut k = 0usize;
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            k += 1;
            let dt = dtypes[k % dtypes.len()];
            let count = counts[k % counts.len()];
            let s = seed(&[13, a as u64, b as u64, n as u64, count as u64]);
            let what = format!("Send/Recv {a}->{b} {} count={count}", dt_name(dt));
            if me == a {
                let send = gen(dt, None, s, a, count);
                r.ok(
                    unsafe { HcclSend(p(&send), count as u64, dt, b, r.comm, null_mut()) },
                    &what,
                );
            } else if me == b {
                let mut out = poison(count * esize(dt), s);
                if r.ok(
                    unsafe { HcclRecv(pm(&mut out), count as u64, dt, a, r.comm, null_mut()) },
                    &what,
                ) {
                    r.check_bytes(&what, dt, &out, &gen(dt, None, s, a, count));
                }
            }
        }
    }
}

/// BatchSendRecv: every rank sends to and receives from every rank (itself included), items
/// in a rank-specific order (odd ranks list receives first).
pub fn batch_case(r: &Rank, dt: u32, c: usize) {
    let n = r.n;
    let me = r.rank;
    let s = seed(&[14, dt as u64, c as u64, n as u64]);
    let cnt = |src: u32, dst: u32| c + ((src * 2 + dst) % 3) as usize;
    let sends: Vec<Vec<u8>> = (0..n)
        .map(|q| gen(dt, None, s ^ q as u64, me, cnt(me, q)))
        .collect();
    let mut recvs: Vec<Vec<u8>> = (0..n).map(|q| poison(cnt(q, me) * esize(dt), s)).collect();
    let mut items = Vec::new();
    for j in 0..n {
        let q = (me + j + 1) % n;
        items.push(HcclSendRecvItem {
            sendRecvType: 0,
            buf: p(&sends[q as usize]),
            count: cnt(me, q) as u64,
            dataType: dt,
            remoteRank: q,
        });
    }
    for j in 0..n {
        let q = (me + n - j) % n;
        items.push(HcclSendRecvItem {
            sendRecvType: 1,
            buf: pm(&mut recvs[q as usize]),
            count: cnt(q, me) as u64,
            dataType: dt,
            remoteRank: q,
        });
    }
    if me % 2 == 1 {
        items.reverse();
    }
    let what = format!("BatchSendRecv {} c={c} n={n}", dt_name(dt));
    if !r.ok(
        unsafe { HcclBatchSendRecv(items.as_mut_ptr(), items.len() as u32, r.comm, null_mut()) },
        &what,
    ) {
        return;
    }
    for q in 0..n {
        r.check_bytes(
            &format!("{what} from {q}"),
            dt,
            &recvs[q as usize],
            &gen(dt, None, s ^ me as u64, q, cnt(q, me)),
        );
    }
}

/// Barrier: nobody leaves before everybody has arrived.
pub fn barrier_rounds(r: &Rank, rounds: u32) {
    let n = r.n;
    let arrived = r.shared("barrier", n, || AtomicU32::new(0));
    for it in 1..=rounds {
        arrived.fetch_add(1, Ordering::SeqCst);
        if !r.ok(unsafe { HcclBarrier(r.comm, null_mut()) }, "HcclBarrier") {
            break;
        }
        let seen = arrived.load(Ordering::SeqCst);
        r.check(seen >= it * n, || {
            format!(
                "barrier {it}: left after only {seen} arrivals (need {})",
                it * n
            )
        });
        // A second barrier so no rank starts the next round before everybody checked.
        r.ok(unsafe { HcclBarrier(r.comm, null_mut()) }, "HcclBarrier");
    }
}

pub fn p2p_body(r: &Rank) {
    for dt in ALL_DTYPES {
        for count in SIZES {
            group_ring_case(r, dt, count);
        }
    }
    group_ring_case(r, UINT8, BIG);
    sendrecv_pairs(r, &[7, 4099], &ALL_DTYPES);
    for (dt, c) in [
        (FP32, 7usize),
        (INT128, 3),
        (UINT8, 4099),
        (BF16, 0),
        (INT64, 1),
    ] {
        batch_case(r, dt, c);
    }
    barrier_rounds(r, 20);
}

// ------------------------------------------------------------------------------------------
// Several communicators alive at once, used alternately; more than one group op per comm.

pub fn multi_comm_body(r: &Rank) {
    let (a, b) = (r.comms[0], r.comms[1]);
    for i in 0..40u64 {
        let (comm, dt, op) = match i % 4 {
            0 => (a, FP32, SUM),
            1 => (b, INT32, PROD),
            2 => (b, BF16, MAX),
            _ => (a, UINT16, MIN),
        };
        let count = [1usize, 7, 4099, 300][(i % 4) as usize];
        allreduce_case(r, comm, dt, op, count, i % 3 == 0, 100 + i);
    }
    // A group mixing both communicators: a ring on A and the reverse ring on B.
    let n = r.n;
    let me = r.rank;
    let s = seed(&[15, n as u64]);
    let sa = gen(INT16, None, s, me, 100);
    let sb = gen(INT16, None, s ^ 1, me, 50);
    let mut ra = poison(200, 1);
    let mut rb = poison(100, 2);
    unsafe {
        r.ok(HcclGroupStart(), "GroupStart");
        r.ok(
            HcclSend(p(&sa), 100, INT16, (me + 1) % n, a, null_mut()),
            "send A",
        );
        r.ok(
            HcclSend(p(&sb), 50, INT16, (me + n - 1) % n, b, null_mut()),
            "send B",
        );
        r.ok(
            HcclRecv(pm(&mut rb), 50, INT16, (me + 1) % n, b, null_mut()),
            "recv B",
        );
        r.ok(
            HcclRecv(pm(&mut ra), 100, INT16, (me + n - 1) % n, a, null_mut()),
            "recv A",
        );
        if r.ok(HcclGroupEnd(), "two-comm group") {
            r.check_bytes(
                "two-comm group A",
                INT16,
                &ra,
                &gen(INT16, None, s, (me + n - 1) % n, 100),
            );
            r.check_bytes(
                "two-comm group B",
                INT16,
                &rb,
                &gen(INT16, None, s ^ 1, (me + 1) % n, 50),
            );
        }
    }
    // Names of the two communicators differ, and rank/size are right on both.
    let mut na = [0 as std::os::raw::c_char; 128];
    let mut nb = [0 as std::os::raw::c_char; 128];
    unsafe {
        r.ok(HcclGetCommName(a, na.as_mut_ptr()), "GetCommName");
        r.ok(HcclGetCommName(b, nb.as_mut_ptr()), "GetCommName");
        r.check(na != nb, || "two communicators share a name".into());
        for c in [a, b] {
            let (mut sz, mut id) = (0u32, 0u32);
            r.ok(HcclGetRankSize(c, &mut sz), "GetRankSize");
            r.ok(HcclGetRankId(c, &mut id), "GetRankId");
            r.check(sz == n && id == me, || format!("size/rank {sz}/{id}"));
        }
    }
}
