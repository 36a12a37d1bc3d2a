//! Bad input is answered with the documented error code, never a crash.

mod common;

use std::os::raw::c_void;

use ascendcl::*;
use common::*;

#[test]
fn memcpy_and_memset_arguments_are_checked() {
    setup();
    let mut buf = [0u8; 64];
    let src = [1u8; 64];
    let (d, s) = (
        buf.as_mut_ptr().cast::<c_void>(),
        src.as_ptr().cast::<c_void>(),
    );
    let h2h = ACL_MEMCPY_HOST_TO_HOST as i32;
    unsafe {
        assert_eq!(
            aclrtMemcpy(d, 32, s, 64, h2h),
            ACL_ERROR_INVALID_PARAM,
            "count > destMax"
        );
        assert!(recent_msg().contains("exceeds"), "{}", recent_msg());
        assert_eq!(
            aclrtMemcpy(std::ptr::null_mut(), 64, s, 1, h2h),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            aclrtMemcpy(d, 64, std::ptr::null(), 1, h2h),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            aclrtMemcpy(d, 64, s, 1, 5),
            ACL_ERROR_INVALID_PARAM,
            "kind 5"
        );
        assert_eq!(
            aclrtMemcpy(d, 64, s, 1, -1),
            ACL_ERROR_INVALID_PARAM,
            "kind -1"
        );
        ok(aclrtMemcpy(d, 64, s, 64, ACL_MEMCPY_DEFAULT as i32));
        assert_eq!(
            aclrtMemcpyAsync(d, 8, s, 9, h2h, std::ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(aclrtMemset(d, 8, 0, 9), ACL_ERROR_INVALID_PARAM);
        assert_eq!(
            aclrtMemset(std::ptr::null_mut(), 8, 0, 1),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            aclrtMemsetAsync(d, 8, 0, 9, std::ptr::null_mut()),
            ACL_ERROR_INVALID_PARAM
        );
    }
    assert_eq!(
        buf, [1u8; 64],
        "failed calls wrote nothing after the valid copy"
    );
}

#[test]
fn allocation_misuse_is_rejected() {
    setup();
    let mut p: *mut c_void = std::ptr::null_mut();
    unsafe {
        assert_eq!(aclrtMalloc(&mut p, 0, 0), ACL_ERROR_INVALID_PARAM, "size 0");
        assert_eq!(
            aclrtMalloc(std::ptr::null_mut(), 16, 0),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            aclrtMalloc(&mut p, 16, 9),
            ACL_ERROR_INVALID_PARAM,
            "policy 9"
        );
        assert_eq!(
            aclrtMalloc(&mut p, 16, -1),
            ACL_ERROR_INVALID_PARAM,
            "policy -1"
        );
        assert_eq!(aclrtMallocHost(&mut p, 0), ACL_ERROR_INVALID_PARAM);
        ok(aclrtMalloc(&mut p, 128, 0));
    }
    assert_eq!(
        aclrtFreeHost(p),
        ACL_ERROR_INVALID_PARAM,
        "device memory freed as host memory"
    );
    ok(aclrtFree(p));
    assert_eq!(aclrtFree(p), ACL_ERROR_INVALID_PARAM, "double free");
    assert!(recent_msg().contains("double free"), "{}", recent_msg());
    let mut local = 0u64;
    assert_eq!(
        aclrtFree((&mut local as *mut u64).cast()),
        ACL_ERROR_INVALID_PARAM,
        "foreign pointer"
    );
    assert_eq!(aclrtFree(std::ptr::null_mut()), ACL_ERROR_INVALID_PARAM);
    let mut h: *mut c_void = std::ptr::null_mut();
    ok(unsafe { aclrtMallocHost(&mut h, 8) });
    assert_eq!(
        aclrtFree(h),
        ACL_ERROR_INVALID_PARAM,
        "host memory freed as device memory"
    );
    ok(aclrtFreeHost(h));
    assert_eq!(
        aclrtFreeHost(h),
        ACL_ERROR_INVALID_PARAM,
        "double free of host memory"
    );
}

#[test]
fn forged_and_null_handles_are_rejected() {
    setup();
    let bad = forged_handle();
    let mut status = 0;
    let mut ms = 0.0f32;
    assert_eq!(
        aclrtSynchronizeStream(bad),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtSynchronizeStreamWithTimeout(bad, 1),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(aclrtDestroyStream(bad), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(
        unsafe { aclrtStreamQuery(bad, &mut status) },
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtHostStreamIsValid(bad),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(enqueue(bad, || 0), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(
        aclrtDestroyStream(std::ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM,
        "default stream"
    );
    let e = new_event();
    assert_eq!(aclrtRecordEvent(e, bad), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(
        aclrtRecordEvent(bad, std::ptr::null_mut()),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtStreamWaitEvent(std::ptr::null_mut(), bad),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtSynchronizeEvent(bad),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtSynchronizeEvent(std::ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        unsafe { aclrtQueryEventStatus(bad, &mut status) },
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        unsafe { aclrtEventElapsedTime(&mut ms, e, bad) },
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        unsafe { aclrtQueryEventStatus(e, std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(aclrtDestroyEvent(bad), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    ok(aclrtDestroyEvent(e));
    assert_eq!(
        aclrtSetCurrentContext(bad),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(aclrtDestroyContext(bad), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    let mut ctx: aclrtContext = std::ptr::null_mut();
    ok(unsafe { aclrtGetCurrentContext(&mut ctx) });
    assert_eq!(
        aclrtDestroyContext(ctx),
        ACL_ERROR_INVALID_PARAM,
        "default context"
    );
}

unsafe extern "C" fn noop(_: *mut c_void) {}

#[test]
fn callback_and_task_arguments_are_checked() {
    setup();
    let null = std::ptr::null_mut();
    assert_eq!(
        aclrtLaunchCallback(None, null, 0, null),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtLaunchCallback(Some(noop), null, 2, null),
        ACL_ERROR_INVALID_PARAM,
        "block type 2"
    );
    assert_eq!(
        aclrtLaunchCallback(Some(noop), null, 0, forged_handle()),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtHostStreamEnqueue(null, None, null),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        aclrtLaunchHostFunc(null, None, null),
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(aclrtProcessReport(-5), ACL_ERROR_INVALID_PARAM);
    assert_eq!(
        aclrtSubscribeReport(1, forged_handle()),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
}

#[test]
fn device_ids_out_of_range_are_rejected() {
    setup();
    let mut count = 0u32;
    ok(unsafe { aclrtGetDeviceCount(&mut count) });
    assert_eq!(count, 8, "default device count");
    assert_eq!(aclrtSetDevice(-1), ACL_ERROR_INVALID_DEVICE);
    assert_eq!(aclrtSetDevice(count as i32), ACL_ERROR_INVALID_DEVICE);
    assert_eq!(aclrtResetDevice(99), ACL_ERROR_INVALID_DEVICE);
    let mut ctx: aclrtContext = std::ptr::null_mut();
    assert_eq!(
        unsafe { aclrtCreateContext(&mut ctx, 8) },
        ACL_ERROR_INVALID_DEVICE
    );
    assert_eq!(
        unsafe { aclrtGetDeviceCount(std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        unsafe { aclrtGetDevice(std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    let mut dev = -1;
    ok(unsafe { aclrtGetDevice(&mut dev) });
    assert_eq!(dev, 0, "failed calls left the binding alone");
}

#[test]
fn thread_without_device_gets_invalid_param() {
    setup();
    let rcs = std::thread::spawn(|| {
        let mut dev = 0;
        let mut s: aclrtStream = std::ptr::null_mut();
        let mut ctx: aclrtContext = std::ptr::null_mut();
        vec![
            enqueue(std::ptr::null_mut(), || 0),
            aclrtSynchronizeStream(std::ptr::null_mut()),
            unsafe { aclrtGetDevice(&mut dev) },
            unsafe { aclrtCreateStream(&mut s) },
            unsafe { aclrtGetCurrentContext(&mut ctx) },
            aclrtSynchronizeDevice(),
        ]
    })
    .join()
    .unwrap();
    assert!(
        rcs.iter().all(|&rc| rc == ACL_ERROR_INVALID_PARAM),
        "{rcs:?}"
    );
}

#[test]
fn misc_rejections_and_messages() {
    setup();
    assert_eq!(
        unsafe { aclInit(std::ptr::null()) },
        ACL_ERROR_REPEAT_INITIALIZE
    );
    let msg = recent_msg();
    assert!(msg.contains("aclInit") && msg.contains("100002"), "{msg}");
    assert!(
        aclGetRecentErrMsg().is_null(),
        "message is consumed by reading it"
    );
    assert_eq!(
        unsafe { aclrtCreateStream(std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        unsafe { aclrtCreateEvent(std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    assert_eq!(
        unsafe { aclrtGetRunMode(std::ptr::null_mut()) },
        ACL_ERROR_INVALID_PARAM
    );
    let mut mode = -1;
    ok(unsafe { aclrtGetRunMode(&mut mode) });
    assert_eq!(mode, ACL_HOST as i32);
    assert_eq!(aclDataTypeSize(5), 0, "5 is not a data type");
    assert_eq!(aclDataTypeSize(ACL_BF16 as i32), 2);
    assert_eq!(aclDataTypeSize(ACL_DOUBLE as i32), 8);
    assert_eq!(aclFloat16ToFloat(aclFloatToFloat16(1.5)), 1.5);
}

#[test]
fn destroyed_streams_and_events_are_rejected() {
    setup();
    let s = new_stream();
    let e = new_event();
    ok(aclrtDestroyStream(s));
    ok(aclrtDestroyEvent(e));
    let mut status = 0;
    let mut ms = 0.0f32;
    assert_eq!(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(
        aclrtDestroyStream(s),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "double destroy"
    );
    assert_eq!(
        unsafe { aclrtStreamQuery(s, &mut status) },
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(enqueue(s, || 0), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(aclrtHostStreamIsValid(s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    let live = new_event();
    assert_eq!(aclrtRecordEvent(live, s), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(
        aclrtRecordEvent(e, std::ptr::null_mut()),
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(aclrtSynchronizeEvent(e), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    assert_eq!(
        unsafe { aclrtQueryEventStatus(e, &mut status) },
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        unsafe { aclrtEventElapsedTime(&mut ms, live, e) },
        ACL_ERROR_INVALID_RESOURCE_HANDLE
    );
    assert_eq!(
        aclrtDestroyEvent(e),
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        "double destroy"
    );
    ok(aclrtDestroyEvent(live));
}
