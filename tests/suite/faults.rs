//! Error paths and communicator management: argument validation (every bad call must leave the
//! communicator usable), root info corruption, timeouts, a killed peer process, destroy while
//! busy, configs, sub-communicators, InitAll, rank tables.

use crate::common::cases::*;
use crate::common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::process::Command;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use HcclResult::*;

const TIMEOUT: Duration = Duration::from_secs(120);

fn check_works(r: &Rank, tag: u64) {
    allreduce_case(r, r.comm, FP32, SUM, 7, false, tag);
}

// ------------------------------------------------------------------------------------------
// Argument validation.

fn bad_args_body(r: &Rank) {
    let c = r.comm;
    let n = r.n;
    let b = vec![0u8; 4096];
    let mut o = vec![0u8; 4096];
    let (bp, op) = (p(&b), pm(&mut o));
    let cnts = vec![1u64; n as usize];
    let disp: Vec<u64> = (0..n as u64).collect();
    let (cp, dp) = (
        cnts.as_ptr() as *const c_void,
        disp.as_ptr() as *const c_void,
    );
    let mut tag = 1000u64;
    let mut expect = |res: HcclResult, want: HcclResult, what: &str| {
        r.expect_code(res, want, what);
        tag += 1;
        check_works(r, tag);
    };
    unsafe {
        // Null pointers → HCCL_E_PTR.
        expect(
            HcclAllReduce(null_mut(), op, 4, FP32, SUM, c, null_mut()),
            HCCL_E_PTR,
            "AllReduce sendBuf NULL",
        );
        expect(
            HcclAllReduce(bp, null_mut(), 4, FP32, SUM, c, null_mut()),
            HCCL_E_PTR,
            "AllReduce recvBuf NULL",
        );
        expect(
            HcclAllReduce(bp, op, 4, FP32, SUM, null_mut(), null_mut()),
            HCCL_E_PTR,
            "AllReduce comm NULL",
        );
        expect(
            HcclBroadcast(null_mut(), 4, FP32, 0, c, null_mut()),
            HCCL_E_PTR,
            "Broadcast buf NULL",
        );
        expect(
            HcclReduce(null_mut(), op, 4, FP32, SUM, 0, c, null_mut()),
            HCCL_E_PTR,
            "Reduce sendBuf NULL",
        );
        // Root-only checks: no collective afterwards here (the next check runs one on all ranks).
        if r.rank == 0 {
            r.expect_code(
                HcclReduce(bp, null_mut(), 4, FP32, SUM, 0, c, null_mut()),
                HCCL_E_PTR,
                "Reduce root recvBuf NULL",
            );
        }
        expect(
            HcclAllGather(null_mut(), op, 4, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AllGather sendBuf NULL",
        );
        expect(
            HcclAllGather(bp, null_mut(), 4, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AllGather recvBuf NULL",
        );
        expect(
            HcclAllGatherV(bp, 1, op, null(), dp, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AllGatherV recvCounts NULL",
        );
        expect(
            HcclAllGatherV(bp, 1, op, cp, null(), FP32, c, null_mut()),
            HCCL_E_PTR,
            "AllGatherV recvDispls NULL",
        );
        expect(
            HcclAllGatherV(bp, 1, null_mut(), cp, dp, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AllGatherV recvBuf NULL",
        );
        expect(
            HcclReduceScatter(null_mut(), op, 4, FP32, SUM, c, null_mut()),
            HCCL_E_PTR,
            "ReduceScatter sendBuf NULL",
        );
        expect(
            HcclReduceScatter(bp, null_mut(), 4, FP32, SUM, c, null_mut()),
            HCCL_E_PTR,
            "ReduceScatter recvBuf NULL",
        );
        expect(
            HcclReduceScatterV(bp, null(), dp, op, 1, FP32, SUM, c, null_mut()),
            HCCL_E_PTR,
            "ReduceScatterV sendCounts NULL",
        );
        expect(
            HcclReduceScatterV(bp, cp, null(), op, 1, FP32, SUM, c, null_mut()),
            HCCL_E_PTR,
            "ReduceScatterV sendDispls NULL",
        );
        expect(
            HcclScatter(bp, null_mut(), 4, FP32, 0, c, null_mut()),
            HCCL_E_PTR,
            "Scatter recvBuf NULL",
        );
        if r.rank == 0 {
            r.expect_code(
                HcclScatter(null_mut(), op, 4, FP32, 0, c, null_mut()),
                HCCL_E_PTR,
                "Scatter root sendBuf NULL",
            );
        }
        expect(
            HcclAlltoAll(null(), 1, FP32, op, 1, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AlltoAll sendBuf NULL",
        );
        expect(
            HcclAlltoAll(bp, 1, FP32, null(), 1, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AlltoAll recvBuf NULL",
        );
        expect(
            HcclAlltoAllV(bp, null(), dp, FP32, op, cp, dp, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AlltoAllV sendCounts NULL",
        );
        expect(
            HcclAlltoAllV(bp, cp, dp, FP32, op, cp, null(), FP32, c, null_mut()),
            HCCL_E_PTR,
            "AlltoAllV rdispls NULL",
        );
        expect(
            HcclAlltoAllVC(bp, null(), FP32, op, FP32, c, null_mut()),
            HCCL_E_PTR,
            "AlltoAllVC matrix NULL",
        );
        expect(
            HcclSend(null_mut(), 4, FP32, 0, c, null_mut()),
            HCCL_E_PTR,
            "Send sendBuf NULL",
        );
        expect(
            HcclRecv(null_mut(), 4, FP32, 0, c, null_mut()),
            HCCL_E_PTR,
            "Recv recvBuf NULL",
        );
        expect(
            HcclBatchSendRecv(null_mut(), 1, c, null_mut()),
            HCCL_E_PTR,
            "BatchSendRecv items NULL",
        );
        let mut it = [HcclSendRecvItem {
            sendRecvType: 0,
            buf: null_mut(),
            count: 4,
            dataType: FP32,
            remoteRank: 0,
        }];
        expect(
            HcclBatchSendRecv(it.as_mut_ptr(), 1, c, null_mut()),
            HCCL_E_PTR,
            "BatchSendRecv item buf NULL",
        );
        expect(
            HcclBarrier(null_mut(), null_mut()),
            HCCL_E_PTR,
            "Barrier comm NULL",
        );
        expect(
            HcclGetRankSize(c, null_mut()),
            HCCL_E_PTR,
            "GetRankSize out NULL",
        );
        expect(
            HcclGetRankId(c, null_mut()),
            HCCL_E_PTR,
            "GetRankId out NULL",
        );
        let mut v = 0u32;
        expect(
            HcclGetRankSize(null_mut(), &mut v),
            HCCL_E_PTR,
            "GetRankSize comm NULL",
        );
        expect(
            HcclGetCommName(c, null_mut()),
            HCCL_E_PTR,
            "GetCommName out NULL",
        );
        expect(
            HcclCommGetHandleWithName(null(), &mut null_mut()),
            HCCL_E_PTR,
            "GetHandleWithName name NULL",
        );
        expect(HcclGetRootInfo(null_mut()), HCCL_E_PTR, "GetRootInfo NULL");
        expect(
            HcclCommInitRootInfo(2, null(), 0, &mut null_mut()),
            HCCL_E_PTR,
            "InitRootInfo rootInfo NULL",
        );
        let ri = HcclRootInfo {
            internal: [0; 4108],
        };
        expect(
            HcclCommInitRootInfo(2, &ri, 0, null_mut()),
            HCCL_E_PTR,
            "InitRootInfo comm NULL",
        );
        expect(HcclCommDestroy(null_mut()), HCCL_E_PTR, "CommDestroy NULL");
        expect(
            HcclGroupStatusGet(null_mut()),
            HCCL_E_PTR,
            "GroupStatusGet NULL",
        );
        // NULL buffers are fine when they hold nothing.
        expect(
            HcclAllReduce(null_mut(), null_mut(), 0, FP32, SUM, c, null_mut()),
            HCCL_SUCCESS,
            "AllReduce count 0 NULL bufs",
        );

        // Bad enums, ranks and sizes → HCCL_E_PARA.
        for dt in [13u32, 18, 99, 255] {
            expect(
                HcclAllReduce(bp, op, 4, dt, SUM, c, null_mut()),
                HCCL_E_PARA,
                &format!("AllReduce dtype {dt}"),
            );
            expect(
                HcclBroadcast(op, 4, dt, 0, c, null_mut()),
                HCCL_E_PARA,
                &format!("Broadcast dtype {dt}"),
            );
            expect(
                HcclAllGather(bp, op, 1, dt, c, null_mut()),
                HCCL_E_PARA,
                &format!("AllGather dtype {dt}"),
            );
            expect(
                HcclSend(bp, 1, dt, 0, c, null_mut()),
                HCCL_E_PARA,
                &format!("Send dtype {dt}"),
            );
        }
        for bad_op in [4u32, 5, 255, 1000] {
            expect(
                HcclAllReduce(bp, op, 4, FP32, bad_op, c, null_mut()),
                HCCL_E_PARA,
                &format!("AllReduce op {bad_op}"),
            );
            expect(
                HcclReduce(bp, op, 4, INT8, bad_op, 0, c, null_mut()),
                HCCL_E_PARA,
                &format!("Reduce op {bad_op}"),
            );
            expect(
                HcclReduceScatter(bp, op, 1, INT32, bad_op, c, null_mut()),
                HCCL_E_PARA,
                &format!("ReduceScatter op {bad_op}"),
            );
        }
        for root in [n, n + 1, u32::MAX] {
            expect(
                HcclBroadcast(op, 4, FP32, root, c, null_mut()),
                HCCL_E_PARA,
                &format!("Broadcast root {root}"),
            );
            expect(
                HcclReduce(bp, op, 4, FP32, SUM, root, c, null_mut()),
                HCCL_E_PARA,
                &format!("Reduce root {root}"),
            );
            expect(
                HcclScatter(bp, op, 1, FP32, root, c, null_mut()),
                HCCL_E_PARA,
                &format!("Scatter root {root}"),
            );
            expect(
                HcclSend(bp, 1, FP32, root, c, null_mut()),
                HCCL_E_PARA,
                &format!("Send destRank {root}"),
            );
            expect(
                HcclRecv(op, 1, FP32, root, c, null_mut()),
                HCCL_E_PARA,
                &format!("Recv srcRank {root}"),
            );
            let mut it = [HcclSendRecvItem {
                sendRecvType: 0,
                buf: bp,
                count: 1,
                dataType: FP32,
                remoteRank: root,
            }];
            expect(
                HcclBatchSendRecv(it.as_mut_ptr(), 1, c, null_mut()),
                HCCL_E_PARA,
                "BatchSendRecv remoteRank",
            );
        }
        let mut it = [HcclSendRecvItem {
            sendRecvType: 2,
            buf: bp,
            count: 1,
            dataType: FP32,
            remoteRank: 0,
        }];
        expect(
            HcclBatchSendRecv(it.as_mut_ptr(), 1, c, null_mut()),
            HCCL_E_PARA,
            "BatchSendRecv type 2",
        );
        let huge = u64::MAX / 2;
        expect(
            HcclAllReduce(bp, op, huge, FP32, SUM, c, null_mut()),
            HCCL_E_PARA,
            "AllReduce count overflow",
        );
        expect(
            HcclAllGather(bp, op, huge, FP32, c, null_mut()),
            HCCL_E_PARA,
            "AllGather count x size overflow",
        );
        expect(
            HcclReduceScatter(bp, op, huge, FP32, SUM, c, null_mut()),
            HCCL_E_PARA,
            "ReduceScatter count x size overflow",
        );
        expect(
            HcclAlltoAll(bp, huge, FP32, op, huge, FP32, c, null_mut()),
            HCCL_E_PARA,
            "AlltoAll overflow",
        );
        expect(
            HcclScatter(bp, op, huge, FP32, 0, c, null_mut()),
            HCCL_E_PARA,
            "Scatter overflow",
        );
        expect(
            HcclBroadcast(op, huge, INT64, 0, c, null_mut()),
            HCCL_E_PARA,
            "Broadcast overflow",
        );
        expect(
            HcclAlltoAll(bp, 1, FP32, op, 1, INT32, c, null_mut()),
            HCCL_E_PARA,
            "AlltoAll type mismatch",
        );
        expect(
            HcclAlltoAll(bp, 1, FP32, op, 2, FP32, c, null_mut()),
            HCCL_E_PARA,
            "AlltoAll count mismatch",
        );
        let wrong: Vec<u64> = vec![2; n as usize];
        expect(
            HcclAllGatherV(
                bp,
                1,
                op,
                wrong.as_ptr() as *const c_void,
                dp,
                FP32,
                c,
                null_mut(),
            ),
            HCCL_E_PARA,
            "AllGatherV sendCount != recvCounts[rank]",
        );
        expect(
            HcclReduceScatterV(bp, cp, dp, op, 3, FP32, SUM, c, null_mut()),
            HCCL_E_PARA,
            "ReduceScatterV recvCount != sendCounts[rank]",
        );
        let ovf: Vec<u64> = vec![u64::MAX / 4; n as usize];
        expect(
            HcclAlltoAllV(
                bp,
                cp,
                ovf.as_ptr() as *const c_void,
                FP32,
                op,
                cp,
                dp,
                FP32,
                c,
                null_mut(),
            ),
            HCCL_E_PARA,
            "AlltoAllV displacement overflow",
        );
        // Reductions of data-movement-only types → HCCL_E_NOT_SUPPORT.
        for dt in MOVE_ONLY {
            for o2 in OPS {
                expect(
                    HcclAllReduce(bp, op, 1, dt, o2, c, null_mut()),
                    HCCL_E_NOT_SUPPORT,
                    "AllReduce movement type",
                );
                expect(
                    HcclReduce(bp, op, 1, dt, o2, 0, c, null_mut()),
                    HCCL_E_NOT_SUPPORT,
                    "Reduce movement type",
                );
                expect(
                    HcclReduceScatter(bp, op, 1, dt, o2, c, null_mut()),
                    HCCL_E_NOT_SUPPORT,
                    "ReduceScatter movement type",
                );
                expect(
                    HcclReduceScatterV(bp, cp, dp, op, 1, dt, o2, c, null_mut()),
                    HCCL_E_NOT_SUPPORT,
                    "ReduceScatterV movement type",
                );
            }
        }
        // GroupEnd without GroupStart.
        expect(HcclGroupEnd(), HCCL_E_PARA, "GroupEnd without GroupStart");
    }
}

#[test]
fn bad_arguments_leave_comm_usable() {
    for n in [1u32, 2, 3] {
        run_ranks(n, TIMEOUT, bad_args_body);
    }
}

#[test]
fn unknown_and_destroyed_handles() {
    unsafe {
        let fake = 0x1234_5678usize as HcclComm;
        assert_eq!(HcclCommDestroy(fake), HCCL_E_PARA);
        let b = [0f32; 4];
        let mut o = [0f32; 4];
        assert_eq!(
            HcclAllReduce(
                b.as_ptr() as *mut _,
                o.as_mut_ptr() as *mut _,
                4,
                FP32,
                SUM,
                fake,
                null_mut()
            ),
            HCCL_E_PARA
        );
        let ri = root_info();
        let c = init_rank(1, &ri, 0);
        // Used once first, so that this thread's lookup cache holds the handle when it dies.
        let mut v = 0;
        assert_eq!(HcclGetRankSize(c, &mut v), HCCL_SUCCESS);
        assert_eq!(v, 1);
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
        assert_eq!(HcclCommDestroy(c), HCCL_E_PARA, "double destroy");
        assert_eq!(HcclGetRankSize(c, &mut v), HCCL_E_PARA, "use after destroy");
        assert_eq!(
            HcclAllReduce(
                b.as_ptr() as *mut _,
                o.as_mut_ptr() as *mut _,
                4,
                FP32,
                SUM,
                c,
                null_mut()
            ),
            HCCL_E_PARA,
            "collective after destroy"
        );
    }
}

#[test]
fn error_strings_and_capability() {
    for code in (0u32..=24).chain([1041, 1042, 9999]) {
        let s = HcclGetErrorString(code);
        assert!(!s.is_null(), "code {code}");
        let s = unsafe { CStr::from_ptr(s) }.to_str().unwrap();
        assert!(!s.is_empty(), "code {code}");
    }
    assert_ne!(unsafe { CStr::from_ptr(HcclGetErrorString(0)) }, unsafe {
        CStr::from_ptr(HcclGetErrorString(9))
    });
    // Everything below HCCL_COMM_CONFIG_RETRY (10) is supported; retry is not.
    assert_eq!(HcclGetCommConfigCapability(), 10);
}

// ------------------------------------------------------------------------------------------
// Init errors.

#[test]
fn init_parameter_errors() {
    unsafe {
        let ri = root_info();
        let mut c: HcclComm = null_mut();
        assert_eq!(
            HcclCommInitRootInfo(2, &ri, 2, &mut c),
            HCCL_E_PARA,
            "rank == nRanks"
        );
        assert_eq!(
            HcclCommInitRootInfo(2, &ri, 7, &mut c),
            HCCL_E_PARA,
            "rank > nRanks"
        );
        assert_eq!(
            HcclCommInitRootInfo(0, &ri, 0, &mut c),
            HCCL_E_PARA,
            "nRanks 0"
        );
        let zero = HcclRootInfo {
            internal: [0; 4108],
        };
        assert_eq!(
            HcclCommInitRootInfo(1, &zero, 0, &mut c),
            HCCL_E_PARA,
            "all-zero root info"
        );
        let bytes = root_info_bytes(&ri);
        // Bytes 0..72 are the encoded, checksummed part (the zero tail is not verified).
        for at in [0usize, 3, 4, 8, 12, 13, 17, 19, 33, 40, 50, 60, 64, 71] {
            let mut b = bytes.clone();
            b[at] ^= 0x41;
            let bad = root_info_from_bytes(&b);
            assert_eq!(
                HcclCommInitRootInfo(1, &bad, 0, &mut c),
                HCCL_E_PARA,
                "root info byte {at} flipped"
            );
        }
        // The intact root info still works afterwards.
        let c = init_rank(1, &ri, 0);
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
    }
}

/// nRanks = 3 but only 2 ranks arrive: both get HCCL_E_TIMEOUT after the connect timeout.
#[test]
fn missing_rank_times_out() {
    const CONNECT_S: u64 = 2;
    if !is_child() {
        run_self(
            "missing_rank_times_out",
            &[("HCCL_CONNECT_TIMEOUT", &CONNECT_S.to_string())],
            Duration::from_secs(120),
        );
        return;
    }
    let ri = root_info();
    let t0 = Instant::now();
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            std::thread::spawn(move || {
                let mut c: HcclComm = null_mut();
                let res = unsafe { HcclCommInitRootInfo(3, &ri, r, &mut c) };
                (res, t0.elapsed())
            })
        })
        .collect();
    for h in hs {
        let (res, el) = h.join().unwrap();
        assert_eq!(res, HCCL_E_TIMEOUT);
        // Not before the configured timeout, and long before the 120 s default, which would
        // mean the variable was ignored; the upper bound leaves a loaded machine 15×.
        assert!(
            el >= Duration::from_secs(CONNECT_S) * 3 / 4
                && el < scaled(Duration::from_secs(CONNECT_S * 15)),
            "timed out after {el:?} with HCCL_CONNECT_TIMEOUT={CONNECT_S}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// A peer process killed during collectives.

/// `HCCL_EXEC_TIMEOUT` of the ranks of [`killed_peer_process`]. Survivors must notice within a
/// bound derived from it: 10× leaves a loaded machine room and is far below the 1836 s default.
const KILL_EXEC_S: u64 = 3;

#[test]
fn killed_peer_process() {
    if let Ok(rank) = std::env::var("HCCL_TEST_KILL_RANK") {
        let rank: u32 = rank.parse().unwrap();
        let ri = root_info_from_bytes(&hex_decode(&std::env::var("HCCL_TEST_ROOT_INFO").unwrap()));
        let comm = init_rank(3, &ri, rank);
        let count = 16 << 20; // 64 MiB of fp32
        let send = vec![1.0f32; count];
        let mut recv = vec![0f32; count];
        for i in 0..100_000u32 {
            let res = unsafe {
                HcclAllReduce(
                    send.as_ptr() as *mut _,
                    recv.as_mut_ptr() as *mut _,
                    count as u64,
                    FP32,
                    SUM,
                    comm,
                    null_mut(),
                )
            };
            if res != HCCL_SUCCESS {
                println!("\nOPFAILED {}", res as u32);
                let d = unsafe { HcclCommDestroy(comm) };
                println!("DESTROY {}", d as u32);
                assert_eq!(d, HCCL_SUCCESS);
                return;
            }
            assert_eq!(recv[count - 1], 3.0);
            if i == 0 {
                println!("\nSTARTED {rank}");
            }
        }
        panic!("the collective never failed");
    }
    let ri = root_info();
    let hex = hex_encode(&root_info_bytes(&ri));
    let exe = std::env::current_exe().unwrap();
    let mut kids: Vec<Spawned> = (0..3u32)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.args([
                "--exact",
                &test_path("killed_peer_process"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HCCL_TEST_KILL_RANK", rank.to_string())
            .env("HCCL_TEST_ROOT_INFO", &hex)
            .env("HCCL_EXEC_TIMEOUT", KILL_EXEC_S.to_string())
            .env("HCCL_CONNECT_TIMEOUT", "60");
            spawn_piped(c)
        })
        .collect();
    // Wait until every rank has completed one AllReduce.
    let mut seen: Vec<Vec<String>> = vec![Vec::new(); 3];
    let deadline = Instant::now() + scaled(Duration::from_secs(90));
    for (k, kid) in kids.iter().enumerate() {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match kid.lines.recv_timeout(left) {
                Ok(l) => {
                    let started = l.contains("STARTED ");
                    seen[k].push(l);
                    if started {
                        break;
                    }
                }
                Err(_) => {
                    for kid in kids.iter_mut() {
                        let _ = kid.child.kill();
                    }
                    panic!("rank {k} never started: {:?}", seen[k]);
                }
            }
        }
    }
    let victim = kids.remove(2);
    let mut victim = victim;
    victim.child.kill().expect("kill rank 2");
    let killed_at = Instant::now();
    let _ = victim.child.wait();
    // Survivors: exec timeout 3 s + slack.
    for (k, kid) in kids.into_iter().enumerate() {
        let out = kid.finish(
            Duration::from_secs(KILL_EXEC_S * 20),
            std::mem::take(&mut seen[k]),
        );
        let el = killed_at.elapsed();
        assert!(
            out.success,
            "survivor {k} failed (code {:?}):\n{}\n{}",
            out.code,
            out.stdout,
            tail(&out.stderr, 4000)
        );
        let code = out
            .stdout
            .lines()
            .find_map(|l| l.split("OPFAILED ").nth(1))
            .unwrap_or_else(|| panic!("survivor {k} reported no failure:\n{}", out.stdout));
        // A peer process that vanished is a remote failure (HCCL_E_REMOTE), on every survivor.
        assert_eq!(
            code,
            (HCCL_E_REMOTE as u32).to_string(),
            "survivor {k}: {}",
            out.stdout
        );
        assert!(
            out.stdout.contains("DESTROY 0"),
            "survivor {k}: destroy failed:\n{}",
            out.stdout
        );
        assert!(
            el < scaled(Duration::from_secs(KILL_EXEC_S * 10)),
            "survivor {k} took {el:?} to notice"
        );
    }
}

// ------------------------------------------------------------------------------------------
// Destroy while another thread is inside a collective on the same handle.

#[test]
fn destroy_while_busy_is_refused() {
    let ri = root_info();
    let (tx, rx) = std::sync::mpsc::channel::<usize>();
    let t0 = std::thread::spawn(move || unsafe {
        let c = init_rank(2, &ri, 0);
        tx.send(c as usize).unwrap();
        // One step: send to rank 1, receive from rank 1. Rank 1 receives first (proving this
        // thread is inside the operation) and sends only after its destroy attempt.
        let out = [7u8; 64];
        let mut inb = vec![0u8; 64];
        let mut items = [
            HcclSendRecvItem {
                sendRecvType: 0,
                buf: out.as_ptr() as *mut _,
                count: 64,
                dataType: UINT8,
                remoteRank: 1,
            },
            HcclSendRecvItem {
                sendRecvType: 1,
                buf: inb.as_mut_ptr() as *mut _,
                count: 64,
                dataType: UINT8,
                remoteRank: 1,
            },
        ];
        let res = HcclBatchSendRecv(items.as_mut_ptr(), 2, c, null_mut());
        assert_eq!(res, HCCL_SUCCESS);
        assert_eq!(inb, vec![9u8; 64]);
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
    });
    let t1 = std::thread::spawn(move || unsafe {
        let c = init_rank(2, &ri, 1);
        let h0 = rx.recv().unwrap() as HcclComm;
        let mut inb = vec![0u8; 64];
        assert_eq!(
            HcclRecv(inb.as_mut_ptr() as *mut _, 64, UINT8, 0, c, null_mut()),
            HCCL_SUCCESS
        );
        assert_eq!(inb, vec![7u8; 64]);
        // Rank 0's thread is now provably inside HcclBatchSendRecv on h0.
        let d = HcclCommDestroy(h0);
        let out = [9u8; 64];
        // Let rank 0 finish whatever happened, then judge.
        let s = HcclSend(out.as_ptr() as *mut _, 64, UINT8, 0, c, null_mut());
        assert_eq!(d, HCCL_E_UNAVAIL, "HcclCommDestroy on a handle in use");
        assert_eq!(s, HCCL_SUCCESS);
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
    });
    t1.join().expect("rank 1");
    t0.join().expect("rank 0");
}

/// As above, with the busy thread inside a repeat of its previous small call (the fast path
/// that takes no ticket): the destroy is refused all the same, and both calls deliver.
#[test]
fn destroy_while_a_repeated_small_call_runs_is_refused() {
    let ri = root_info();
    let (tx, rx) = std::sync::mpsc::channel::<usize>();
    let t0 = std::thread::spawn(move || unsafe {
        let c = init_rank(2, &ri, 0);
        tx.send(c as usize).unwrap();
        for round in 0..2u8 {
            let out = [7 + round; 8];
            let mut inb = [0u8; 8];
            let mut items = [
                HcclSendRecvItem {
                    sendRecvType: 0,
                    buf: out.as_ptr() as *mut _,
                    count: 8,
                    dataType: UINT8,
                    remoteRank: 1,
                },
                HcclSendRecvItem {
                    sendRecvType: 1,
                    buf: inb.as_mut_ptr() as *mut _,
                    count: 8,
                    dataType: UINT8,
                    remoteRank: 1,
                },
            ];
            let res = HcclBatchSendRecv(items.as_mut_ptr(), 2, c, null_mut());
            assert_eq!(res, HCCL_SUCCESS, "round {round}");
            assert_eq!(inb, [20 + round; 8], "round {round}");
        }
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
    });
    let t1 = std::thread::spawn(move || unsafe {
        let c = init_rank(2, &ri, 1);
        let h0 = rx.recv().unwrap() as HcclComm;
        for round in 0..2u8 {
            let mut inb = [0u8; 8];
            assert_eq!(
                HcclRecv(inb.as_mut_ptr() as *mut _, 8, UINT8, 0, c, null_mut()),
                HCCL_SUCCESS
            );
            assert_eq!(inb, [7 + round; 8]);
            // In the second round rank 0's thread is provably inside its repeated call.
            let d = (round == 1).then(|| HcclCommDestroy(h0));
            let out = [20 + round; 8];
            let s = HcclSend(out.as_ptr() as *mut _, 8, UINT8, 0, c, null_mut());
            if let Some(d) = d {
                assert_eq!(d, HCCL_E_UNAVAIL, "HcclCommDestroy on a handle in use");
            }
            assert_eq!(s, HCCL_SUCCESS);
        }
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
    });
    t1.join().expect("rank 1");
    t0.join().expect("rank 0");
}

// ------------------------------------------------------------------------------------------
// Communicator management APIs.

fn config(size: usize, magic: u32, name: &str) -> HcclCommConfig {
    let mut c: HcclCommConfig = unsafe { std::mem::zeroed() };
    let raw = &mut c as *mut HcclCommConfig as *mut u8;
    unsafe {
        std::ptr::write_unaligned(raw as *mut usize, size);
        std::ptr::write_unaligned(raw.add(8) as *mut u32, magic);
        std::ptr::write_unaligned(raw.add(12) as *mut u32, 10);
        std::ptr::write_unaligned(raw.add(16) as *mut u64, 0);
    }
    c.hcclBufferSize = 0xffff_ffff;
    c.hcclDeterministic = 0xffff_ffff;
    c.hcclOpExpansionMode = 0;
    c.hcclRdmaTrafficClass = 0xffff_ffff;
    c.hcclRdmaServiceLevel = 0xffff_ffff;
    c.hcclWorldRankID = 0;
    c.hcclJobID = 0;
    c.aclGraphZeroCopyEnable = 0;
    c.hcclExecTimeOut = -1;
    c.hcclQos = 0xffff_ffff;
    c.hcclSymWinMaxMemSizePerRank = 16;
    for (d, s) in c.hcclCommName.iter_mut().zip(name.bytes()) {
        *d = s as c_char;
    }
    c
}

#[test]
fn config_layout() {
    assert_eq!(std::mem::size_of::<HcclCommConfig>(), 2240);
    assert_eq!(std::mem::size_of::<HcclSendRecvItem>(), 32);
}

#[test]
fn init_root_info_config_names_and_lookup() {
    let ri = root_info();
    let name = format!("test_comm_{}", std::process::id());
    let hs: Vec<_> = (0..3u32)
        .map(|r| {
            let name = name.clone();
            std::thread::spawn(move || unsafe {
                let cfg = config(2240, 0xf0f0_f0f0, &name);
                let mut c: HcclComm = null_mut();
                assert_eq!(
                    HcclCommInitRootInfoConfig(3, &ri, r, &cfg, &mut c),
                    HCCL_SUCCESS
                );
                let mut buf = [0 as c_char; 128];
                assert_eq!(HcclGetCommName(c, buf.as_mut_ptr()), HCCL_SUCCESS);
                assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), name);
                let cname = CString::new(name.clone()).unwrap();
                let mut found: HcclComm = null_mut();
                assert_eq!(
                    HcclCommGetHandleWithName(cname.as_ptr(), &mut found),
                    HCCL_SUCCESS
                );
                assert_eq!(found, c, "lookup by name from the creating thread");
                let missing = CString::new("no_such_comm_xyz").unwrap();
                assert_eq!(
                    HcclCommGetHandleWithName(missing.as_ptr(), &mut found),
                    HCCL_E_NOT_FOUND
                );
                let (mut sz, mut id) = (0, 0);
                assert_eq!(HcclGetRankSize(c, &mut sz), HCCL_SUCCESS);
                assert_eq!(HcclGetRankId(c, &mut id), HCCL_SUCCESS);
                assert_eq!((sz, id), (3, r));
                let b = [r as f32 + 1.0; 5];
                let mut o = [0f32; 5];
                assert_eq!(
                    HcclAllReduce(
                        b.as_ptr() as *mut _,
                        o.as_mut_ptr() as *mut _,
                        5,
                        FP32,
                        SUM,
                        c,
                        null_mut()
                    ),
                    HCCL_SUCCESS
                );
                assert_eq!(o, [6.0; 5]);
                assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn config_bad_magic_and_older_size() {
    unsafe {
        let ri = root_info();
        let mut c: HcclComm = null_mut();
        let bad = config(2240, 0x1234_5678, "");
        assert_eq!(
            HcclCommInitRootInfoConfig(1, &ri, 0, &bad, &mut c),
            HCCL_E_PARA,
            "bad magic"
        );
        assert_eq!(
            HcclCommInitRootInfoConfig(1, &ri, 0, null(), &mut c),
            HCCL_E_PTR,
            "NULL config"
        );
        // An older caller: only the header and the first two fields are present.
        let old = config(32, 0xf0f0_f0f0, "ignored_beyond_size");
        assert_eq!(
            HcclCommInitRootInfoConfig(1, &ri, 0, &old, &mut c),
            HCCL_SUCCESS,
            "size 32"
        );
        let mut buf = [0 as c_char; 128];
        assert_eq!(HcclGetCommName(c, buf.as_mut_ptr()), HCCL_SUCCESS);
        let got = CStr::from_ptr(buf.as_ptr()).to_str().unwrap().to_string();
        assert_ne!(got, "ignored_beyond_size", "a name beyond `size` was read");
        let b = [2.0f32; 3];
        let mut o = [0f32; 3];
        assert_eq!(
            HcclAllReduce(
                b.as_ptr() as *mut _,
                o.as_mut_ptr() as *mut _,
                3,
                FP32,
                PROD,
                c,
                null_mut()
            ),
            HCCL_SUCCESS
        );
        assert_eq!(o, [2.0; 3]);
        assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
    }
}

#[test]
fn init_all_four_devices() {
    let mut devs = [0i32, 1, 2, 3];
    let mut comms: [HcclComm; 4] = [null_mut(); 4];
    unsafe {
        assert_eq!(
            HcclCommInitAll(4, devs.as_mut_ptr(), comms.as_mut_ptr()),
            HCCL_SUCCESS
        );
        let mut dup = [0i32, 0];
        let mut c2: [HcclComm; 2] = [null_mut(); 2];
        assert_eq!(
            HcclCommInitAll(2, dup.as_mut_ptr(), c2.as_mut_ptr()),
            HCCL_E_PARA,
            "repeated device"
        );
    }
    let hs: Vec<_> = comms
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let c = c as usize;
            std::thread::spawn(move || unsafe {
                let c = c as HcclComm;
                let (mut sz, mut id) = (0, 0);
                assert_eq!(HcclGetRankSize(c, &mut sz), HCCL_SUCCESS);
                assert_eq!(HcclGetRankId(c, &mut id), HCCL_SUCCESS);
                assert_eq!((sz, id), (4, i as u32));
                let b: Vec<i64> = (0..1000).map(|k| k * (i as i64 + 1)).collect();
                let mut o = vec![0i64; 1000];
                assert_eq!(
                    HcclAllReduce(
                        b.as_ptr() as *mut _,
                        o.as_mut_ptr() as *mut _,
                        1000,
                        INT64,
                        SUM,
                        c,
                        null_mut()
                    ),
                    HCCL_SUCCESS
                );
                for (k, v) in o.iter().enumerate() {
                    assert_eq!(*v, k as i64 * 10);
                }
                assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn sub_communicators_even_odd() {
    run_ranks(4, TIMEOUT, |r| unsafe {
        let mut parent = r.comm;
        let mut ids: Vec<u32> = if r.rank % 2 == 0 {
            vec![0, 2]
        } else {
            vec![1, 3]
        };
        let sub_rank = r.rank / 2;
        let mut sub: HcclComm = null_mut();
        let res = HcclCreateSubCommConfig(
            &mut parent,
            2,
            ids.as_mut_ptr(),
            7 + (r.rank % 2) as u64,
            sub_rank,
            null_mut(),
            &mut sub,
        );
        if !r.ok(res, "HcclCreateSubCommConfig") {
            return;
        }
        let (mut sz, mut id) = (0, 0);
        r.ok(HcclGetRankSize(sub, &mut sz), "sub size");
        r.ok(HcclGetRankId(sub, &mut id), "sub rank");
        r.check((sz, id) == (2, sub_rank), || {
            format!("sub size/rank {sz}/{id}")
        });
        let b: Vec<u32> = (0..777).map(|k| k + r.rank * 1000).collect();
        let mut o = vec![0u32; 777];
        if r.ok(
            HcclAllReduce(
                b.as_ptr() as *mut _,
                o.as_mut_ptr() as *mut _,
                777,
                UINT32,
                SUM,
                sub,
                null_mut(),
            ),
            "sub AllReduce",
        ) {
            // {0,2}: 2k + 2000; {1,3}: 2k + 4000.
            let base = if r.rank % 2 == 0 { 2000 } else { 4000 };
            r.check(
                o.iter().enumerate().all(|(k, v)| *v == 2 * k as u32 + base),
                || format!("sub AllReduce wrong: {:?}", &o[..4]),
            );
        }
        // The parent still works, then the sub communicator is gone cleanly.
        allreduce_case(r, r.comm, INT16, MAX, 99, false, 5);
        r.ok(HcclCommDestroy(sub), "destroy sub");
        // Bad sub-comm arguments.
        let mut bad_ids = vec![0u32, 9];
        r.expect_code(
            HcclCreateSubCommConfig(
                &mut parent,
                2,
                bad_ids.as_mut_ptr(),
                9,
                0,
                null_mut(),
                &mut sub,
            ),
            HCCL_E_PARA,
            "sub comm with a rank outside the parent",
        );
        r.expect_code(
            HcclCreateSubCommConfig(
                &mut parent,
                2,
                ids.as_mut_ptr(),
                9,
                1 - sub_rank,
                null_mut(),
                &mut sub,
            ),
            HCCL_E_PARA,
            "subCommRankId not matching the caller",
        );
    });
}

#[test]
fn cluster_info_rank_table() {
    let n = 3u32;
    let devices: Vec<String> = (0..n)
        .map(|r| format!(r#"{{ "device_id": "{r}", "rank_id": "{r}" }}"#))
        .collect();
    let json = format!(
        r#"{{ "status": "completed", "version": "1.0", "server_count": "1",
  "server_list": [ {{ "server_id": "node_0", "device": [ {} ] }} ] }}"#,
        devices.join(", ")
    );
    let path = std::env::temp_dir().join(format!(
        "hccl_rank_table_{}_{}.json",
        std::process::id(),
        line!()
    ));
    std::fs::write(&path, json).unwrap();
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let addr = cpath.as_ptr() as usize;
    let hs: Vec<_> = (0..n)
        .map(|r| {
            std::thread::spawn(move || unsafe {
                let mut c: HcclComm = null_mut();
                let res = HcclCommInitClusterInfo(addr as *const c_char, r, &mut c);
                assert_eq!(res, HCCL_SUCCESS, "rank {r}");
                let b = vec![1u8 << r; 4099];
                let mut o = vec![0u8; 4099];
                assert_eq!(
                    HcclAllReduce(
                        b.as_ptr() as *mut _,
                        o.as_mut_ptr() as *mut _,
                        4099,
                        UINT8,
                        SUM,
                        c,
                        null_mut()
                    ),
                    HCCL_SUCCESS
                );
                assert!(o.iter().all(|&v| v == 7));
                assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
            })
        })
        .collect();
    let res: Vec<_> = hs.into_iter().map(|h| h.join()).collect();
    let missing = CString::new("/nonexistent/rank_table.json").unwrap();
    let mut c: HcclComm = null_mut();
    let r = unsafe { HcclCommInitClusterInfo(missing.as_ptr(), 0, &mut c) };
    let _ = std::fs::remove_file(&path);
    for x in res {
        x.expect("rank thread");
    }
    assert_eq!(r, HCCL_E_OPEN_FILE_FAILURE, "missing rank table file");
}

/// A batch whose self-send/self-receive items do not pair up is refused before anything is
/// posted, and the communicator keeps working (no stale send is matched by the next call).
#[test]
fn unpaired_self_items_leave_comm_usable() {
    let ri = root_info();
    let ts: Vec<_> = (0..2u32)
        .map(|r| {
            std::thread::spawn(move || unsafe {
                let c = init_rank(2, &ri, r);
                let out = [1u8; 64];
                let mut inb = vec![0u8; 64];
                let mut items = [
                    HcclSendRecvItem {
                        sendRecvType: 0,
                        buf: out.as_ptr() as *mut _,
                        count: 64,
                        dataType: UINT8,
                        remoteRank: 1 - r,
                    },
                    HcclSendRecvItem {
                        sendRecvType: 1,
                        buf: inb.as_mut_ptr() as *mut _,
                        count: 64,
                        dataType: UINT8,
                        remoteRank: r,
                    },
                ];
                let res = HcclBatchSendRecv(items.as_mut_ptr(), 2, c, null_mut());
                assert_eq!(res, HcclResult::HCCL_E_PARA);
                for count in [8usize, 16] {
                    let send = vec![(r + 1) as f32; count];
                    let mut recv = vec![0f32; count];
                    let res = HcclAllReduce(
                        send.as_ptr() as *mut _,
                        recv.as_mut_ptr() as *mut _,
                        count as u64,
                        FP32,
                        SUM,
                        c,
                        null_mut(),
                    );
                    assert_eq!(res, HCCL_SUCCESS);
                    assert_eq!(recv, vec![3.0f32; count]);
                }
                assert_eq!(HcclCommDestroy(c), HCCL_SUCCESS);
            })
        })
        .collect();
    for t in ts {
        t.join().expect("rank");
    }
}
