//! HCCL operations on host-runtime streams, with ranks as threads: the call returns at once and
//! the operation runs in stream order between asynchronous copies; operations a rank issues on
//! different streams keep their issue order; failures surface from `aclrtSynchronizeStream` and
//! `HcclGetCommAsyncError`; a NULL stream runs synchronously; bad streams are rejected.
//!
//! The runtime is linked statically into this test binary, where `dlsym` cannot see its
//! symbols, so it is handed over with `host_runtime::register` (C programs linked against the
//! shared libraries take the `dlsym` path: see `tests/install_prefix.rs`).

use std::ffi::c_void;
use std::os::raw::c_char;
use std::ptr::null_mut;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::common::*;
use ascendcl as acl;
use hccl::comm::host_runtime::{self, HostRuntime};
use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use HcclResult::*;

/// Starts the runtime once for the whole test binary and hands it to libhccl.
fn setup() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        assert_eq!(unsafe { acl::aclInit(std::ptr::null()) }, 0, "aclInit");
        host_runtime::register(HostRuntime {
            enqueue: acl::aclrtHostStreamEnqueue,
        });
    });
}

fn acl_ok(rc: i32, what: &str) {
    assert_eq!(rc, 0, "{what} returned {rc}");
}

/// A latch a stream task waits on, so work can be queued behind it before any of it runs.
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn new() -> Box<Gate> {
        Box::new(Gate {
            open: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Queues a task on `stream` that blocks it until `open` (or fails it after 30 s).
    fn hold(&self, stream: acl::aclrtStream) {
        unsafe extern "C" fn wait(arg: *mut c_void) -> i32 {
            let g = unsafe { &*(arg as *const Gate) };
            let guard = g.open.lock().unwrap();
            let (guard, _) =
                g.cv.wait_timeout_while(guard, Duration::from_secs(30), |open| !*open)
                    .unwrap();
            if *guard {
                0
            } else {
                1
            }
        }
        let rc =
            acl::aclrtHostStreamEnqueue(stream, Some(wait), self as *const Gate as *mut c_void);
        acl_ok(rc, "aclrtHostStreamEnqueue(gate)");
    }
}

/// One rank's device, stream(s) and device buffers of `bytes` each.
struct Dev {
    streams: Vec<acl::aclrtStream>,
    bufs: Vec<*mut c_void>,
}

impl Dev {
    fn new(rank: u32, nstreams: usize, nbufs: usize, bytes: usize) -> Dev {
        acl_ok(acl::aclrtSetDevice(rank as i32), "aclrtSetDevice");
        let streams = (0..nstreams)
            .map(|_| {
                let mut s = null_mut();
                acl_ok(
                    unsafe { acl::aclrtCreateStream(&mut s) },
                    "aclrtCreateStream",
                );
                s
            })
            .collect();
        let bufs = (0..nbufs)
            .map(|_| {
                let mut p = null_mut();
                let rc = unsafe {
                    acl::aclrtMalloc(
                        &mut p,
                        bytes,
                        acl::aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST as i32,
                    )
                };
                acl_ok(rc, "aclrtMalloc");
                p
            })
            .collect();
        Dev { streams, bufs }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        for s in &self.streams {
            acl_ok(acl::aclrtDestroyStream(*s), "aclrtDestroyStream");
        }
        for p in &self.bufs {
            acl_ok(acl::aclrtFree(*p), "aclrtFree");
        }
    }
}

fn copy_async(dst: *mut c_void, src: *const c_void, bytes: usize, kind: i32, s: acl::aclrtStream) {
    let rc = unsafe { acl::aclrtMemcpyAsync(dst, bytes, src, bytes, kind, s) };
    acl_ok(rc, "aclrtMemcpyAsync");
}

const H2D: i32 = acl::aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE as i32;
const D2H: i32 = acl::aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST as i32;
const N: usize = 1 << 16;
const TIMEOUT: Duration = Duration::from_secs(120);

fn sum_f32(r: &Rank, send: *mut c_void, recv: *mut c_void, s: acl::aclrtStream) -> bool {
    let rc = unsafe { HcclAllReduce(send, recv, N as u64, FP32, SUM, r.comm, s) };
    r.ok(rc, "HcclAllReduce")
}

#[test]
fn allreduce_on_a_stream_returns_at_once_and_runs_between_async_copies() {
    setup();
    run_ranks(3, TIMEOUT, |r| {
        let dev = Dev::new(r.rank, 1, 2, N * 4);
        let s = dev.streams[0];
        let input: Vec<f32> = (0..N).map(|i| (i % 97) as f32 + r.rank as f32).collect();
        let mut out = vec![-1.0f32; N];
        let gate = Gate::new();
        gate.hold(s);
        copy_async(dev.bufs[0], input.as_ptr().cast(), N * 4, H2D, s);
        if !sum_f32(r, dev.bufs[0], dev.bufs[1], s) {
            gate.open();
            return;
        }
        copy_async(out.as_mut_ptr().cast(), dev.bufs[1], N * 4, D2H, s);
        // The stream is held: nothing can have run yet, so the call did not wait for the peers.
        let untouched = out.iter().all(|&v| v == -1.0);
        r.check(untouched, || "output written before the stream ran".into());
        gate.open();
        acl_ok(acl::aclrtSynchronizeStream(s), "aclrtSynchronizeStream");
        let n = r.n as f32;
        let bad = (0..N).find(|&i| out[i] != n * (i % 97) as f32 + (0..r.n).sum::<u32>() as f32);
        r.check(bad.is_none(), || format!("wrong sum at {bad:?}"));
        let mut e = HCCL_E_INTERNAL;
        r.ok(
            unsafe { HcclGetCommAsyncError(r.comm, &mut e) },
            "HcclGetCommAsyncError",
        );
        r.expect_code(e, HCCL_SUCCESS, "async error after a good run");
    });
}

#[test]
fn operations_on_two_streams_keep_their_issue_order() {
    setup();
    run_ranks(2, TIMEOUT, |r| {
        let dev = Dev::new(r.rank, 2, 3, N * 4);
        let (s1, s2) = (dev.streams[0], dev.streams[1]);
        let input = vec![1.0f32 + r.rank as f32; N];
        let mut out = vec![0.0f32; N];
        let gate = Gate::new();
        gate.hold(s1);
        copy_async(dev.bufs[0], input.as_ptr().cast(), N * 4, H2D, s1);
        // First op on the held stream; the second, on a free stream, reads the first's output.
        let ok = sum_f32(r, dev.bufs[0], dev.bufs[1], s1);
        let ok = ok && sum_f32(r, dev.bufs[1], dev.bufs[2], s2);
        if ok {
            copy_async(out.as_mut_ptr().cast(), dev.bufs[2], N * 4, D2H, s2);
        }
        gate.open();
        acl_ok(acl::aclrtSynchronizeStream(s1), "sync s1");
        acl_ok(acl::aclrtSynchronizeStream(s2), "sync s2");
        // (1 + 2) summed twice over 2 ranks: 6 everywhere.
        let bad = out.iter().position(|&v| v != 6.0);
        r.check(bad.is_none(), || {
            format!(
                "second op ran out of order: out[{bad:?}] = {}",
                out[bad.unwrap_or(0)]
            )
        });
    });
}

#[test]
fn null_stream_runs_synchronously_and_bad_streams_are_rejected() {
    setup();
    run_ranks(2, TIMEOUT, |r| {
        let dev = Dev::new(r.rank, 1, 0, 0);
        let input = vec![2.0f32; N];
        let mut out = vec![0.0f32; N];
        let send = input.as_ptr() as *mut c_void;
        let recv = out.as_mut_ptr().cast();
        if sum_f32(r, send, recv, null_mut()) {
            // Complete on return, with no synchronisation.
            r.check(out.iter().all(|&v| v == 4.0), || {
                "NULL stream: not done on return".into()
            });
        }
        let fake = 0xdead_beef_usize as *mut c_void;
        let rc = unsafe { HcclAllReduce(send, recv, N as u64, FP32, SUM, r.comm, fake) };
        r.expect_code(rc, HCCL_E_PARA, "unknown stream");
        let mut gone = null_mut();
        acl_ok(unsafe { acl::aclrtCreateStream(&mut gone) }, "create");
        acl_ok(acl::aclrtDestroyStream(gone), "destroy");
        let rc = unsafe { HcclAllReduce(send, recv, N as u64, FP32, SUM, r.comm, gone) };
        r.expect_code(rc, HCCL_E_PARA, "destroyed stream");
        // The rejected calls left the communicator healthy and in step with its peer.
        let mut e = HCCL_E_INTERNAL;
        r.ok(
            unsafe { HcclGetCommAsyncError(r.comm, &mut e) },
            "HcclGetCommAsyncError",
        );
        r.expect_code(e, HCCL_SUCCESS, "async error after rejected calls");
        if sum_f32(r, send, recv, dev.streams[0]) {
            acl_ok(acl::aclrtSynchronizeStream(dev.streams[0]), "sync");
            r.check(out.iter().all(|&v| v == 4.0), || {
                "stream op after rejects".into()
            });
        }
    });
}

/// A communicator config with `hcclExecTimeOut` set (the rest "not set"), built as
/// `HcclCommConfigInit` would.
fn timeout_config(secs: i32) -> HcclCommConfig {
    let mut c: HcclCommConfig = unsafe { std::mem::zeroed() };
    let raw = &mut c as *mut HcclCommConfig as *mut u8;
    unsafe {
        std::ptr::write_unaligned(raw as *mut usize, std::mem::size_of::<HcclCommConfig>());
        std::ptr::write_unaligned(raw.add(8) as *mut u32, 0xf0f0_f0f0);
        std::ptr::write_unaligned(raw.add(12) as *mut u32, 10);
    }
    c.hcclBufferSize = u32::MAX;
    c.hcclDeterministic = u32::MAX;
    c.hcclRdmaTrafficClass = u32::MAX;
    c.hcclRdmaServiceLevel = u32::MAX;
    c.hcclQos = u32::MAX;
    c.hcclSymWinMaxMemSizePerRank = 16;
    c.hcclExecTimeOut = secs;
    c.hcclCommName[0] = 0 as c_char;
    c
}

#[test]
fn failure_on_a_stream_surfaces_from_synchronize_and_async_error() {
    setup();
    let ri = root_info();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let cfg = timeout_config(1);
        let mut c: HcclComm = null_mut();
        assert_eq!(
            unsafe { HcclCommInitRootInfoConfig(2, &ri, 1, &cfg, &mut c) },
            HCCL_SUCCESS
        );
        // Rank 1 never joins the collective; it waits for rank 0 to see the failure.
        done_rx.recv_timeout(TIMEOUT).expect("rank 0 finished");
        assert_eq!(unsafe { HcclCommDestroy(c) }, HCCL_SUCCESS);
    });
    let cfg = timeout_config(1);
    let mut c: HcclComm = null_mut();
    assert_eq!(
        unsafe { HcclCommInitRootInfoConfig(2, &ri, 0, &cfg, &mut c) },
        HCCL_SUCCESS
    );
    let dev = Dev::new(0, 1, 2, N * 4);
    let s = dev.streams[0];
    let input = vec![3.0f32; N];
    let mut out = vec![0.0f32; N];
    let gate = Gate::new();
    gate.hold(s);
    copy_async(dev.bufs[0], input.as_ptr().cast(), N * 4, H2D, s);
    // The gate holds the stream until the call has returned, so a call that waited for its op
    // could never return: a watchdog then opens the gate after 30 s and the test fails.
    let (returned, seen) = mpsc::channel::<()>();
    let (rc, waited, early) = std::thread::scope(|sc| {
        let g = &gate;
        let watchdog = sc.spawn(move || {
            let late = seen.recv_timeout(Duration::from_secs(30)).is_err();
            g.open();
            late
        });
        let rc = unsafe { HcclAllReduce(dev.bufs[0], dev.bufs[1], N as u64, FP32, SUM, c, s) };
        // Still held: the op cannot have run, let alone failed.
        let mut e = HCCL_E_INTERNAL;
        assert_eq!(unsafe { HcclGetCommAsyncError(c, &mut e) }, HCCL_SUCCESS);
        returned.send(()).unwrap();
        (rc, watchdog.join().unwrap(), e)
    });
    assert!(!waited, "the call waited for the op on its stream");
    assert_eq!(rc, HCCL_SUCCESS, "queued");
    assert_eq!(
        early, HCCL_SUCCESS,
        "the op ran before the stream reached it"
    );
    // Work queued after the failing op still runs, in order.
    copy_async(out.as_mut_ptr().cast(), dev.bufs[0], N * 4, D2H, s);
    let rc = acl::aclrtSynchronizeStream(s);
    assert_eq!(
        rc,
        acl::ACL_ERROR_RT_FAILURE,
        "stream reports the failed collective"
    );
    assert!(
        out.iter().all(|&v| v == 3.0),
        "copy after the failure did not run"
    );
    let mut e = HCCL_SUCCESS;
    assert_eq!(unsafe { HcclGetCommAsyncError(c, &mut e) }, HCCL_SUCCESS);
    assert_eq!(e, HCCL_E_TIMEOUT, "async error of the communicator");
    // The stream error was reported once; the stream is usable again.
    acl_ok(acl::aclrtSynchronizeStream(s), "second sync");
    assert_eq!(unsafe { HcclCommDestroy(c) }, HCCL_SUCCESS);
    done_tx.send(()).unwrap();
    peer.join().expect("rank 1");
    drop(dev);
}
