//! Helpers shared by the integration tests (each test file is its own process).

#![allow(dead_code)]

use std::ffi::CStr;
use std::os::raw::c_void;
use std::sync::Once;

use ascendcl::*;

// Enum values as the C code spells them (each test file uses a different subset).
#[allow(unused_imports)]
pub use ascendcl::{
    aclDataType::*, aclrtCallbackBlockType::*, aclrtEventRecordedStatus::*,
    aclrtMemMallocPolicy::*, aclrtMemcpyKind::*, aclrtRunMode::*, aclrtStreamStatus::*,
};

/// Initialises the runtime once per test process and binds the calling thread to device 0.
pub fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let rc = unsafe { aclInit(std::ptr::null()) };
        assert_eq!(rc, ACL_SUCCESS, "aclInit: {}", recent_msg());
    });
    ok(aclrtSetDevice(0));
}

/// The calling thread's recent error message (empty if none).
pub fn recent_msg() -> String {
    let p = aclGetRecentErrMsg();
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Asserts success, showing the runtime's message otherwise.
#[track_caller]
pub fn ok(rc: aclError) {
    assert_eq!(rc, ACL_SUCCESS, "{}", recent_msg());
}

/// A new stream on the current device.
pub fn new_stream() -> aclrtStream {
    let mut s: aclrtStream = std::ptr::null_mut();
    ok(unsafe { aclrtCreateStream(&mut s) });
    assert!(!s.is_null());
    s
}

/// A new event.
pub fn new_event() -> aclrtEvent {
    let mut e: aclrtEvent = std::ptr::null_mut();
    ok(unsafe { aclrtCreateEvent(&mut e) });
    e
}

type Job = Box<dyn FnOnce() -> i32 + Send>;

unsafe extern "C" fn trampoline(arg: *mut c_void) -> i32 {
    let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    job()
}

/// Enqueues a Rust closure through the `aclrtHostStreamEnqueue` extension.
pub fn enqueue(stream: aclrtStream, f: impl FnOnce() -> i32 + Send + 'static) -> aclError {
    let job: Box<Job> = Box::new(Box::new(f));
    let raw = Box::into_raw(job).cast::<c_void>();
    let rc = aclrtHostStreamEnqueue(stream, Some(trampoline), raw);
    if rc != ACL_SUCCESS {
        // Not enqueued: reclaim the closure.
        drop(unsafe { Box::from_raw(raw.cast::<Job>()) });
    }
    rc
}

/// A bogus handle that was never issued by the runtime.
pub fn forged_handle() -> *mut c_void {
    std::ptr::without_provenance_mut(0xdead_bee0)
}
