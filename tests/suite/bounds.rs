//! The hard input bounds of `base::limits`, through the C API: each is refused with
//! `HCCL_E_PARA` one past it, before anything is read or allocated for it, and the communicator
//! stays usable; at the bound the call proceeds (for bounds whose value can be exercised on
//! one machine; the byte and rank-count bounds are also tested at their value in unit tests).

use crate::common::cases::*;
use crate::common::*;
use hccl::base::limits::{
    MAX_BATCH_ITEMS, MAX_BUFFER_BYTES, MAX_COMM_NAME_BYTES, MAX_PATH_BYTES, MAX_RANKS,
};
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::ffi::CString;
use std::os::raw::c_void;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use HcclResult::*;

const TIMEOUT: Duration = Duration::from_secs(120);

fn check_works(r: &Rank, tag: u64) {
    allreduce_case(r, r.comm, FP32, SUM, 7, false, tag);
}

/// Displacements and counts past `MAX_BUFFER_BYTES` (2^60 elements: a wild pointer if
/// accepted) fail on every rank with HCCL_E_PARA, and the next operation works.
fn huge_displacements_body(r: &Rank) {
    let (c, n) = (r.comm, r.n as usize);
    let b = vec![0u8; 4096];
    let mut o = vec![0u8; 4096];
    let (bp, op) = (b.as_ptr() as *mut c_void, o.as_mut_ptr() as *mut c_void);
    let ones = vec![1u64; n];
    let me = r.rank as usize;
    let mut tag = 5000u64;
    let huge: [u64; 4] = [1 << 60, u64::MAX, u64::MAX - 1, MAX_BUFFER_BYTES + 1];
    for &h in &huge {
        // The last rank's block starts at `h`: every rank sees the same arrays.
        let mut displs: Vec<u64> = (0..n as u64).collect();
        displs[n - 1] = h;
        let dp = displs.as_ptr() as *const c_void;
        let cp = ones.as_ptr() as *const c_void;
        let mut expect = |res: HcclResult, what: &str| {
            r.expect_code(res, HCCL_E_PARA, &format!("{what} displacement {h:#x}"));
            tag += 1;
            check_works(r, tag);
        };
        unsafe {
            expect(
                HcclAllGatherV(bp, 1, op, cp, dp, FP32, c, null_mut()),
                "AllGatherV",
            );
            expect(
                HcclReduceScatterV(bp, cp, dp, op, 1, FP32, SUM, c, null_mut()),
                "ReduceScatterV",
            );
            expect(
                HcclAlltoAllV(bp, cp, dp, FP32, op, cp, cp, FP32, c, null_mut()),
                "AlltoAllV sdispls",
            );
            expect(
                HcclAlltoAllV(bp, cp, cp, FP32, op, cp, dp, FP32, c, null_mut()),
                "AlltoAllV rdispls",
            );
            // A huge count instead, on another rank's entry (this rank's own stays 1).
            if n > 1 {
                let mut counts = ones.clone();
                counts[if me == n - 1 { 0 } else { n - 1 }] = h;
                let kp = counts.as_ptr() as *const c_void;
                let zeros = vec![0u64; n];
                let zp = zeros.as_ptr() as *const c_void;
                expect(
                    HcclAllGatherV(bp, 1, op, kp, zp, FP32, c, null_mut()),
                    "AllGatherV count",
                );
            }
            // The AlltoAllVC matrix: this rank's row ends in `h`.
            let mut m = vec![1u64; n * n];
            m[me * n + n - 1] = h;
            expect(
                HcclAlltoAllVC(
                    bp,
                    m.as_ptr() as *const c_void,
                    FP32,
                    op,
                    FP32,
                    c,
                    null_mut(),
                ),
                "AlltoAllVC",
            );
        }
    }
    unsafe {
        // count × size one element past the limit.
        let past = MAX_BUFFER_BYTES / 4 + 1;
        r.expect_code(
            HcclAllReduce(bp, op, past, FP32, SUM, c, null_mut()),
            HCCL_E_PARA,
            "AllReduce count past the limit",
        );
        r.expect_code(
            HcclBroadcast(bp, u64::MAX, INT8, 0, c, null_mut()),
            HCCL_E_PARA,
            "Broadcast count u64::MAX",
        );
        // The gathered total (count × ranks) is bounded too.
        let per_rank = MAX_BUFFER_BYTES / 4 / n as u64 + 1;
        r.expect_code(
            HcclAllGather(bp, op, per_rank, FP32, c, null_mut()),
            HCCL_E_PARA,
            "AllGather total past the limit",
        );
        r.expect_code(
            HcclAlltoAll(bp, per_rank, FP32, op, per_rank, FP32, c, null_mut()),
            HCCL_E_PARA,
            "AlltoAll total past the limit",
        );
    }
    check_works(r, tag + 1);
}

#[test]
fn huge_displacements_and_counts_are_para_errors() {
    for n in [1u32, 2, 3] {
        run_ranks(n, TIMEOUT, huge_displacements_body);
    }
}

fn batch_items_body(r: &Rank) {
    let c = r.comm;
    // Past the bound: refused before the (short) array is read.
    let mut one = [HcclSendRecvItem {
        sendRecvType: 0,
        buf: null_mut(),
        count: 0,
        dataType: FP32,
        remoteRank: 0,
    }];
    unsafe {
        r.expect_code(
            HcclBatchSendRecv(one.as_mut_ptr(), MAX_BATCH_ITEMS + 1, c, null_mut()),
            HCCL_E_PARA,
            "itemNum past the bound",
        );
        r.expect_code(
            HcclBatchSendRecv(one.as_mut_ptr(), u32::MAX, c, null_mut()),
            HCCL_E_PARA,
            "itemNum u32::MAX",
        );
    }
    // At the bound: accepted and run (sends and receives of 0 bytes to itself, paired).
    let mut items: Vec<HcclSendRecvItem> = (0..MAX_BATCH_ITEMS)
        .map(|i| HcclSendRecvItem {
            sendRecvType: i % 2,
            buf: null_mut(),
            count: 0,
            dataType: FP32,
            remoteRank: 0,
        })
        .collect();
    unsafe {
        r.expect_code(
            HcclBatchSendRecv(items.as_mut_ptr(), MAX_BATCH_ITEMS, c, null_mut()),
            HCCL_SUCCESS,
            "itemNum at the bound",
        );
    }
    check_works(r, 6000);
}

#[test]
fn batch_item_count_is_bounded() {
    run_ranks(1, TIMEOUT, batch_items_body);
}

#[test]
fn rank_counts_past_the_bound_fail_at_once() {
    let ri = root_info();
    for n in [MAX_RANKS + 1, 1 << 24, u32::MAX] {
        let mut c: HcclComm = null_mut();
        let t0 = Instant::now();
        let res = unsafe { HcclCommInitRootInfo(n, &ri, 0, &mut c) };
        assert_eq!(res, HCCL_E_PARA, "nRanks {n}");
        assert!(c.is_null());
        // Refused before any rendezvous: no connect timeout was waited for.
        assert!(t0.elapsed() < Duration::from_secs(60), "nRanks {n}");
        let devs = [0i32; 4];
        let mut comms = [null_mut(); 4];
        let res = unsafe { HcclCommInitAll(n, devs.as_ptr() as *mut i32, comms.as_mut_ptr()) };
        assert_eq!(res, HCCL_E_PARA, "ndev {n}");
    }
    // The intact root info still works.
    let c = init_rank(1, &ri, 0);
    assert_eq!(unsafe { HcclCommDestroy(c) }, HCCL_SUCCESS);
}

/// At the bound the call is accepted and waits for its peers (none come: a timeout, not a
/// parameter error).
#[test]
fn rank_count_at_the_bound_is_accepted() {
    if !is_child() {
        run_self(
            "rank_count_at_the_bound_is_accepted",
            &[("HCCL_CONNECT_TIMEOUT", "1")],
            Duration::from_secs(120),
        );
        return;
    }
    let ri = root_info();
    let mut c: HcclComm = null_mut();
    let res = unsafe { HcclCommInitRootInfo(MAX_RANKS, &ri, MAX_RANKS - 1, &mut c) };
    assert_eq!(res, HCCL_E_TIMEOUT);
}

#[test]
fn name_and_path_lengths() {
    let at = CString::new("n".repeat(MAX_COMM_NAME_BYTES)).unwrap();
    let past = CString::new("n".repeat(MAX_COMM_NAME_BYTES + 1)).unwrap();
    let mut c: HcclComm = null_mut();
    let mut st = HcclCommStatus::HCCL_COMM_STATUS_READY;
    unsafe {
        assert_eq!(
            HcclCommGetHandleWithName(at.as_ptr(), &mut c),
            HCCL_E_NOT_FOUND
        );
        assert_eq!(
            HcclCommGetHandleWithName(past.as_ptr(), &mut c),
            HCCL_E_PARA
        );
        assert_eq!(HcclCommGetStatus(at.as_ptr(), &mut st), HCCL_E_NOT_FOUND);
        assert_eq!(HcclCommGetStatus(past.as_ptr(), &mut st), HCCL_E_PARA);
        // A name that is not UTF-8 is a parameter error, not a lossy lookup.
        let bad = b"comm\xff\0";
        assert_eq!(
            HcclCommGetHandleWithName(bad.as_ptr().cast(), &mut c),
            HCCL_E_PARA
        );
    }
    // Paths: at the bound the file is looked for (and not found); past it, refused.
    let dir = "/nonexistent-hccl-bounds/";
    let at = CString::new(format!("{dir}{}", "p".repeat(MAX_PATH_BYTES - dir.len()))).unwrap();
    let past = CString::new(format!(
        "{dir}{}",
        "p".repeat(MAX_PATH_BYTES + 1 - dir.len())
    ))
    .unwrap();
    assert_eq!(at.as_bytes().len(), MAX_PATH_BYTES);
    unsafe {
        assert_eq!(
            HcclCommInitClusterInfo(at.as_ptr(), 0, &mut c),
            HCCL_E_OPEN_FILE_FAILURE
        );
        assert_eq!(
            HcclCommInitClusterInfo(past.as_ptr(), 0, &mut c),
            HCCL_E_PARA
        );
        assert_eq!(HcclCommInitClusterInfo(null(), 0, &mut c), HCCL_E_PTR);
    }
}
