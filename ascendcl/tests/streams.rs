//! Stream semantics: ordering, error propagation, draining on destroy, callbacks.

mod common;

use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use ascendcl::*;
use common::*;

#[test]
fn work_runs_in_submission_order() {
    setup();
    let s = new_stream();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..200 {
        let log = Arc::clone(&log);
        ok(enqueue(s, move || {
            log.lock().unwrap().push(i);
            0
        }));
    }
    ok(aclrtSynchronizeStream(s));
    assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
    ok(aclrtDestroyStream(s));
}

#[test]
fn async_memcpy_and_memset_follow_stream_order() {
    setup();
    let s = new_stream();
    let n = 1 << 16;
    let mut a: *mut c_void = std::ptr::null_mut();
    let mut b: *mut c_void = std::ptr::null_mut();
    unsafe {
        ok(aclrtMalloc(&mut a, n, ACL_MEM_MALLOC_HUGE_FIRST as i32));
        ok(aclrtMalloc(&mut b, n, ACL_MEM_MALLOC_HUGE_FIRST as i32));
    }
    // Gate the stream so all three operations are queued before any runs.
    let (tx, rx) = mpsc::channel::<()>();
    ok(enqueue(s, move || {
        rx.recv().unwrap();
        0
    }));
    unsafe {
        ok(aclrtMemsetAsync(a, n, 0x5a, n, s));
        ok(aclrtMemcpyAsync(
            b,
            n,
            a,
            n,
            ACL_MEMCPY_DEVICE_TO_DEVICE as i32,
            s,
        ));
        ok(aclrtMemsetAsync(a, n, 0x11, n / 2, s));
    }
    let mut status = -1;
    ok(unsafe { aclrtStreamQuery(s, &mut status) });
    assert_eq!(status, ACL_STREAM_STATUS_NOT_READY as i32);
    tx.send(()).unwrap();
    ok(aclrtSynchronizeStream(s));
    ok(unsafe { aclrtStreamQuery(s, &mut status) });
    assert_eq!(status, ACL_STREAM_STATUS_COMPLETE as i32);
    let (av, bv) = unsafe {
        (
            std::slice::from_raw_parts(a.cast::<u8>(), n),
            std::slice::from_raw_parts(b.cast::<u8>(), n),
        )
    };
    assert!(bv.iter().all(|&x| x == 0x5a));
    assert!(av[..n / 2].iter().all(|&x| x == 0x11));
    assert!(av[n / 2..].iter().all(|&x| x == 0x5a));
    ok(aclrtFree(a));
    ok(aclrtFree(b));
    ok(aclrtDestroyStream(s));
}

#[test]
fn task_failure_is_reported_once_by_synchronize() {
    setup();
    let s = new_stream();
    let after = Arc::new(AtomicU64::new(0));
    ok(enqueue(s, || 0));
    ok(enqueue(s, || 42));
    ok(enqueue(s, || 7));
    let a2 = Arc::clone(&after);
    ok(enqueue(s, move || {
        a2.store(1, Ordering::SeqCst);
        0
    }));
    assert_eq!(aclrtSynchronizeStream(s), ACL_ERROR_RT_FAILURE);
    assert!(
        recent_msg().contains("returned 42"),
        "first error wins: {}",
        recent_msg()
    );
    assert_eq!(
        after.load(Ordering::SeqCst),
        1,
        "work after a failure still runs"
    );
    ok(aclrtSynchronizeStream(s));
    ok(aclrtDestroyStream(s));
}

#[test]
fn default_stream_is_used_for_null() {
    setup();
    let hit = Arc::new(AtomicU64::new(0));
    let h2 = Arc::clone(&hit);
    ok(enqueue(std::ptr::null_mut(), move || {
        h2.fetch_add(1, Ordering::SeqCst);
        0
    }));
    ok(aclrtSynchronizeStream(std::ptr::null_mut()));
    assert_eq!(hit.load(Ordering::SeqCst), 1);
    ok(aclrtHostStreamIsValid(std::ptr::null_mut()));
    ok(aclrtSynchronizeDevice());
}

#[test]
fn destroy_drains_pending_work_then_invalidates_handle() {
    setup();
    let s = new_stream();
    let (tx, rx) = mpsc::channel::<()>();
    let done = Arc::new(AtomicU64::new(0));
    ok(enqueue(s, move || {
        rx.recv().unwrap();
        0
    }));
    for _ in 0..10 {
        let d = Arc::clone(&done);
        ok(enqueue(s, move || {
            d.fetch_add(1, Ordering::SeqCst);
            0
        }));
    }
    let handle = s as usize;
    let destroyer = std::thread::spawn(move || aclrtDestroyStream(handle as aclrtStream));
    // Destroy cannot finish while the gate holds the queue: release it now.
    tx.send(()).unwrap();
    assert_eq!(destroyer.join().unwrap(), ACL_SUCCESS);
    assert_eq!(
        done.load(Ordering::SeqCst),
        10,
        "all pending work ran before destroy returned"
    );
    assert_eq!(aclrtHostStreamIsValid(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(enqueue(s, || 0), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(aclrtDestroyStream(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
}

#[test]
fn synchronize_with_timeout_expires_then_succeeds() {
    setup();
    let s = new_stream();
    let (tx, rx) = mpsc::channel::<()>();
    ok(enqueue(s, move || {
        rx.recv().unwrap();
        0
    }));
    assert_eq!(
        aclrtSynchronizeStreamWithTimeout(s, 10),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    tx.send(()).unwrap();
    ok(aclrtSynchronizeStreamWithTimeout(s, -1));
    assert_eq!(
        aclrtSynchronizeStreamWithTimeout(s, -2),
        ACL_ERROR_INVALID_PARAM
    );
    ok(aclrtDestroyStream(s));
}

#[test]
fn synchronizing_own_stream_from_its_work_fails_instead_of_deadlocking() {
    setup();
    let s = new_stream();
    let handle = s as usize;
    let (tx, rx) = mpsc::channel();
    ok(enqueue(s, move || {
        tx.send(aclrtSynchronizeStream(handle as aclrtStream))
            .unwrap();
        0
    }));
    assert_eq!(rx.recv().unwrap(), ACL_ERROR_INVALID_PARAM);
    ok(aclrtDestroyStream(s));
}

unsafe extern "C" fn record_thread(arg: *mut c_void) {
    let slot = unsafe { &*arg.cast::<AtomicU64>() };
    slot.store(unsafe { libc::pthread_self() } as u64, Ordering::SeqCst);
}

#[test]
fn callbacks_without_subscriber_run_on_the_stream_in_order() {
    setup();
    let s = new_stream();
    let seen = Box::new(AtomicU64::new(0));
    let seen_ptr = (&*seen as *const AtomicU64).cast_mut().cast::<c_void>();
    ok(aclrtLaunchCallback(
        Some(record_thread),
        seen_ptr,
        ACL_CALLBACK_BLOCK as i32,
        s,
    ));
    let after = Arc::new(AtomicU64::new(0));
    let (a2, seen_addr) = (Arc::clone(&after), seen_ptr as usize);
    ok(enqueue(s, move || {
        let seen = unsafe { &*(seen_addr as *const AtomicU64) };
        a2.store(seen.load(Ordering::SeqCst), Ordering::SeqCst);
        0
    }));
    ok(aclrtSynchronizeStream(s));
    let me = unsafe { libc::pthread_self() } as u64;
    assert_ne!(seen.load(Ordering::SeqCst), 0);
    assert_ne!(
        seen.load(Ordering::SeqCst),
        me,
        "ran on the worker, not the caller"
    );
    assert_eq!(
        after.load(Ordering::SeqCst),
        seen.load(Ordering::SeqCst),
        "callback ran before later work"
    );
    ok(aclrtDestroyStream(s));
}

#[test]
fn subscribed_callbacks_run_on_the_processing_thread() {
    setup();
    let s = new_stream();
    let first = Arc::new(AtomicU64::new(0));
    let second = Arc::new(AtomicU64::new(0));
    let (tid_tx, tid_rx) = mpsc::channel::<u64>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (f2, s2) = (Arc::clone(&first), Arc::clone(&second));
    let processor = std::thread::spawn(move || {
        tid_tx.send(unsafe { libc::pthread_self() } as u64).unwrap();
        go_rx.recv().unwrap(); // subscribed now
                               // Each call runs whatever has arrived; keep going until both callbacks ran.
        while f2.load(Ordering::SeqCst) == 0 || s2.load(Ordering::SeqCst) == 0 {
            let rc = aclrtProcessReport(5000);
            if rc != ACL_SUCCESS {
                return rc;
            }
        }
        ACL_SUCCESS
    });
    let tid = tid_rx.recv().unwrap();
    ok(aclrtSubscribeReport(tid, s));
    assert_eq!(
        aclrtSubscribeReport(tid, s),
        ACL_ERROR_INVALID_PARAM,
        "one subscriber per stream"
    );
    go_tx.send(()).unwrap();
    let p1 = Arc::as_ptr(&first).cast_mut().cast::<c_void>();
    let p2 = Arc::as_ptr(&second).cast_mut().cast::<c_void>();
    ok(aclrtLaunchCallback(
        Some(record_thread),
        p1,
        ACL_CALLBACK_BLOCK as i32,
        s,
    ));
    ok(aclrtLaunchCallback(
        Some(record_thread),
        p2,
        ACL_CALLBACK_NO_BLOCK as i32,
        s,
    ));
    assert_eq!(processor.join().unwrap(), ACL_SUCCESS);
    ok(aclrtSynchronizeStream(s));
    assert_eq!(first.load(Ordering::SeqCst), tid);
    assert_eq!(second.load(Ordering::SeqCst), tid);
    ok(aclrtUnSubscribeReport(tid, s));
    assert_eq!(aclrtUnSubscribeReport(tid, s), ACL_ERROR_INVALID_PARAM);
    assert_eq!(
        aclrtProcessReport(0),
        ACL_ERROR_INVALID_PARAM,
        "this thread has no subscription"
    );
    ok(aclrtDestroyStream(s));
}

#[test]
fn unsubscribe_runs_undelivered_callbacks() {
    setup();
    let s = new_stream();
    let me = unsafe { libc::pthread_self() } as u64;
    ok(aclrtSubscribeReport(me, s));
    let seen = Arc::new(AtomicU64::new(0));
    let p = Arc::as_ptr(&seen).cast_mut().cast::<c_void>();
    ok(aclrtLaunchCallback(
        Some(record_thread),
        p,
        ACL_CALLBACK_BLOCK as i32,
        s,
    ));
    // The stream is blocked on the callback until this thread processes it or unsubscribes.
    assert_eq!(
        aclrtSynchronizeStreamWithTimeout(s, 20),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    // Unsubscribing must not strand the blocked stream: an undelivered callback runs here, one not
    // yet reached runs on the worker later.
    ok(aclrtUnSubscribeReport(me, s));
    ok(aclrtSynchronizeStream(s));
    assert_ne!(seen.load(Ordering::SeqCst), 0);
    ok(aclrtDestroyStream(s));
}

#[test]
fn process_report_times_out_without_callbacks() {
    setup();
    let s = new_stream();
    let me = unsafe { libc::pthread_self() } as u64;
    ok(aclrtSubscribeReport(me, s));
    assert_eq!(aclrtProcessReport(5), ACL_ERROR_RT_REPORT_TIMEOUT);
    ok(aclrtUnSubscribeReport(me, s));
    ok(aclrtDestroyStream(s));
}

unsafe extern "C" fn bump(arg: *mut c_void) {
    unsafe { &*arg.cast::<AtomicU64>() }.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn host_func_runs_in_order() {
    setup();
    let s = new_stream();
    let counter = Box::new(AtomicU64::new(0));
    let p = (&*counter as *const AtomicU64).cast_mut().cast::<c_void>();
    for _ in 0..5 {
        ok(aclrtLaunchHostFunc(s, Some(bump), p));
    }
    ok(aclrtSynchronizeStream(s));
    assert_eq!(counter.load(Ordering::SeqCst), 5);
    ok(aclrtDestroyStream(s));
}
