//! Events: status, synchronisation, elapsed time and cross-stream waits.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ascendcl::*;
use common::*;

fn status(e: aclrtEvent) -> i32 {
    let mut st = -1;
    ok(unsafe { aclrtQueryEventStatus(e, &mut st) });
    st
}

#[test]
fn status_follows_execution_and_reset() {
    setup();
    let s = new_stream();
    let e = new_event();
    assert_eq!(
        status(e),
        ACL_EVENT_RECORDED_STATUS_NOT_READY as i32,
        "never recorded"
    );
    ok(aclrtSynchronizeEvent(e)); // nothing recorded: no wait
    let (tx, rx) = mpsc::channel::<()>();
    ok(enqueue(s, move || {
        rx.recv().unwrap();
        0
    }));
    ok(aclrtRecordEvent(e, s));
    assert_eq!(
        status(e),
        ACL_EVENT_RECORDED_STATUS_NOT_READY as i32,
        "record still queued"
    );
    tx.send(()).unwrap();
    ok(aclrtSynchronizeEvent(e));
    assert_eq!(status(e), ACL_EVENT_RECORDED_STATUS_COMPLETE as i32);
    ok(aclrtResetEvent(e, s));
    ok(aclrtSynchronizeStream(s));
    assert_eq!(
        status(e),
        ACL_EVENT_RECORDED_STATUS_NOT_READY as i32,
        "reset"
    );
    ok(aclrtDestroyEvent(e));
    ok(aclrtDestroyStream(s));
}

#[test]
fn elapsed_time_measures_stream_execution() {
    setup();
    let s = new_stream();
    let (start, end) = (new_event(), new_event());
    let mut ms = -1.0f32;
    ok(aclrtRecordEvent(start, s));
    // Work between the two records that takes a known minimum time.
    ok(enqueue(s, || {
        std::thread::sleep(Duration::from_millis(30));
        0
    }));
    ok(aclrtRecordEvent(end, s));
    ok(aclrtSynchronizeEvent(end));
    ok(unsafe { aclrtEventElapsedTime(&mut ms, start, end) });
    assert!((29.0..5000.0).contains(&ms), "elapsed {ms} ms");
    let mut back = 0.0f32;
    ok(unsafe { aclrtEventElapsedTime(&mut back, end, start) });
    assert!(back < 0.0, "reversed order gives a negative time: {back}");
    let never = new_event();
    assert_eq!(
        unsafe { aclrtEventElapsedTime(&mut ms, start, never) },
        ACL_ERROR_INVALID_PARAM
    );
    for e in [start, end, never] {
        ok(aclrtDestroyEvent(e));
    }
    ok(aclrtDestroyStream(s));
}

#[test]
fn stream_waits_for_event_recorded_on_another_stream() {
    setup();
    let (producer, consumer) = (new_stream(), new_stream());
    let e = new_event();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<()>();
    let l1 = Arc::clone(&log);
    ok(enqueue(producer, move || {
        rx.recv().unwrap();
        l1.lock().unwrap().push("produce");
        0
    }));
    ok(aclrtRecordEvent(e, producer));
    ok(aclrtStreamWaitEvent(consumer, e));
    let l2 = Arc::clone(&log);
    ok(enqueue(consumer, move || {
        l2.lock().unwrap().push("consume");
        0
    }));
    // The consumer is stuck behind the event until the producer is released.
    assert_eq!(
        aclrtSynchronizeStreamWithTimeout(consumer, 20),
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    );
    assert!(log.lock().unwrap().is_empty());
    tx.send(()).unwrap();
    ok(aclrtSynchronizeStream(consumer));
    assert_eq!(*log.lock().unwrap(), vec!["produce", "consume"]);
    ok(aclrtSynchronizeStream(producer));
    ok(aclrtDestroyEvent(e));
    ok(aclrtDestroyStream(producer));
    ok(aclrtDestroyStream(consumer));
}

#[test]
fn waiting_on_a_never_recorded_event_does_not_block() {
    setup();
    let s = new_stream();
    let e = new_event();
    ok(aclrtStreamWaitEvent(s, e));
    ok(aclrtSynchronizeStream(s));
    ok(aclrtDestroyEvent(e));
    ok(aclrtDestroyStream(s));
}

#[test]
fn destroyed_event_is_rejected_but_queued_record_completes() {
    setup();
    let s = new_stream();
    let e = new_event();
    let (tx, rx) = mpsc::channel::<()>();
    ok(enqueue(s, move || {
        rx.recv().unwrap();
        0
    }));
    ok(aclrtRecordEvent(e, s));
    ok(aclrtDestroyEvent(e));
    tx.send(()).unwrap();
    ok(aclrtSynchronizeStream(s));
    assert_eq!(aclrtRecordEvent(e, s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(aclrtDestroyEvent(e), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    ok(aclrtDestroyStream(s));
}
