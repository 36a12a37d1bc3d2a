//! aclInit/aclFinalize state machine, device teardown, and thread accounting. A single test:
//! the runtime state is process-wide, so these steps must not interleave with other tests.

mod common;

use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ascendcl::*;
use common::*;

/// Live stream worker threads (a worker is counted until its thread function returns, which
/// happens before `join` does; /proc/self/task is not used because the kernel may still list a
/// thread for a moment after it was joined).
fn thread_count() -> usize {
    ascendcl::stream::live_workers()
}

fn current_device() -> Result<i32, aclError> {
    let mut d = -1;
    match unsafe { aclrtGetDevice(&mut d) } {
        ACL_SUCCESS => Ok(d),
        rc => Err(rc),
    }
}

#[test]
fn lifecycle_end_to_end() {
    let null = std::ptr::null_mut();
    let mut p: *mut c_void = null;

    // Before aclInit.
    assert_eq!(aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
    assert_eq!(unsafe { aclrtMalloc(&mut p, 8, 0) }, ACL_ERROR_UNINITIALIZE);
    assert_eq!(aclrtHostStreamIsValid(null), ACL_ERROR_UNINITIALIZE);
    assert_eq!(aclrtSynchronizeStream(null), ACL_ERROR_UNINITIALIZE);
    assert_eq!(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);

    // Malformed device count.
    std::env::set_var("ASCEND_HOST_DEVICE_COUNT", "lots");
    assert_eq!(
        unsafe { aclInit(std::ptr::null()) },
        ACL_ERROR_INVALID_PARAM
    );
    assert!(
        recent_msg().contains("ASCEND_HOST_DEVICE_COUNT"),
        "{}",
        recent_msg()
    );
    assert_eq!(
        aclrtSetDevice(0),
        ACL_ERROR_UNINITIALIZE,
        "failed init leaves runtime down"
    );

    std::env::set_var("ASCEND_HOST_DEVICE_COUNT", "3");
    ok(unsafe { aclInit(c"/nonexistent/acl.json".as_ptr()) });
    assert_eq!(
        unsafe { aclInit(std::ptr::null()) },
        ACL_ERROR_REPEAT_INITIALIZE
    );
    let mut count = 0u32;
    ok(unsafe { aclrtGetDeviceCount(&mut count) });
    assert_eq!(count, 3);
    assert_eq!(aclrtSetDevice(3), ACL_ERROR_INVALID_DEVICE);
    let baseline = thread_count();

    // Device reference counting: the last reset drains and destroys the device's streams.
    ok(aclrtSetDevice(1));
    ok(aclrtSetDevice(1));
    let s = new_stream();
    let ran = Arc::new(AtomicU64::new(0));
    for _ in 0..20 {
        let r = Arc::clone(&ran);
        ok(enqueue(s, move || {
            r.fetch_add(1, Ordering::SeqCst);
            0
        }));
    }
    ok(enqueue(null, || 0)); // creates device 1's default stream
    assert_eq!(thread_count(), baseline + 2);
    ok(aclrtResetDevice(1));
    ok(aclrtHostStreamIsValid(s));
    assert_eq!(
        current_device(),
        Err(ACL_ERROR_INVALID_PARAM),
        "reset unbinds the caller"
    );
    ok(aclrtSetDevice(1));
    ok(aclrtResetDevice(1));
    ok(aclrtResetDevice(1));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        20,
        "teardown drained pending work"
    );
    assert_eq!(aclrtHostStreamIsValid(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(thread_count(), baseline, "workers joined");

    // Contexts hold a device reference and bind the caller.
    let mut ctx: aclrtContext = null;
    ok(unsafe { aclrtCreateContext(&mut ctx, 2) });
    assert_eq!(current_device(), Ok(2));
    let mut cur: aclrtContext = null;
    ok(unsafe { aclrtGetCurrentContext(&mut cur) });
    assert_eq!(cur, ctx);
    ok(aclrtSetDevice(0));
    ok(aclrtSetCurrentContext(ctx));
    assert_eq!(current_device(), Ok(2));
    let s2 = new_stream();
    ok(aclrtDestroyContext(ctx));
    assert_eq!(
        aclrtHostStreamIsValid(s2),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "device 2 released"
    );
    assert_eq!(aclrtDestroyContext(ctx), ACL_ERROR_INVALID_RESOURCE_HANDLE);

    // aclFinalize drains and joins everything.
    ok(aclrtSetDevice(0));
    let s3 = new_stream();
    let e = new_event();
    let ran3 = Arc::new(AtomicU64::new(0));
    for _ in 0..20 {
        let r = Arc::clone(&ran3);
        ok(enqueue(s3, move || {
            r.fetch_add(1, Ordering::SeqCst);
            0
        }));
    }
    ok(aclrtRecordEvent(e, s3));
    ok(unsafe { aclrtMalloc(&mut p, 64, 0) });
    assert!(thread_count() > baseline);
    ok(aclFinalize());
    assert_eq!(ran3.load(Ordering::SeqCst), 20);
    assert_eq!(
        thread_count(),
        baseline,
        "no worker thread outlives aclFinalize"
    );
    assert_eq!(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    assert_eq!(aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
    assert_eq!(aclrtSynchronizeStream(s3), ACL_ERROR_UNINITIALIZE);
    assert_eq!(aclrtFree(p), ACL_ERROR_UNINITIALIZE);

    // Re-initialisation starts fresh: old handles and bindings are gone, memory survives.
    ok(unsafe { aclInit(std::ptr::null()) });
    assert_eq!(current_device(), Err(ACL_ERROR_INVALID_PARAM));
    assert_eq!(
        aclrtSynchronizeStream(s3),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    ok(aclrtFree(p));
    ok(aclFinalize());
}
