//! Stream entry points.

use std::time::Duration;

use crate::api::{require_non_null, write_out};
use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::{fail, AclResult};
use crate::handle::{from_ptr, to_ptr};
use crate::runtime;
use crate::types::{aclError, aclrtEvent, aclrtStream, aclrtStreamStatus, aclrtStreamStatusRaw};

fn create_stream_into(stream: *mut aclrtStream) -> AclResult {
    let rt = runtime::get()?;
    require_non_null(stream, "stream")?;
    let h = rt.create_stream()?;
    // SAFETY: checked non-NULL; the caller provides a writable aclrtStream.
    unsafe { write_out(stream, "stream", to_ptr(h)) }
}

/// Creates a stream on the current device, served by its own worker thread.
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError {
    acl_api!("aclrtCreateStream", { create_stream_into(stream) })
}

/// Like `aclrtCreateStream`; `priority` and `flag` are accepted and ignored.
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateStreamWithConfig(
    stream: *mut aclrtStream,
    priority: u32,
    flag: u32,
) -> aclError {
    acl_api!("aclrtCreateStreamWithConfig", {
        let _ = (priority, flag);
        create_stream_into(stream)
    })
}

/// Destroys a stream: pending work runs to completion first, then the worker thread is joined.
#[no_mangle]
pub extern "C" fn aclrtDestroyStream(stream: aclrtStream) -> aclError {
    acl_api!("aclrtDestroyStream", {
        runtime::get()?.destroy_stream(from_ptr(stream))
    })
}

/// Waits for all work submitted to `stream`; returns `ACL_ERROR_RT_FAILURE` if any of it failed
/// since the last synchronisation (the error is then cleared).
#[no_mangle]
pub extern "C" fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError {
    acl_api!("aclrtSynchronizeStream", {
        runtime::get()?.stream(from_ptr(stream))?.synchronize(None)
    })
}

/// Like `aclrtSynchronizeStream` with a limit in ms (-1: none); `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`
/// when it expires.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeStreamWithTimeout(stream: aclrtStream, timeout: i32) -> aclError {
    acl_api!("aclrtSynchronizeStreamWithTimeout", {
        let rt = runtime::get()?;
        let limit = match timeout {
            -1 => None,
            t if t >= 0 => Some(Duration::from_millis(t as u64)),
            t => {
                return Err(fail(
                    ACL_ERROR_INVALID_PARAM,
                    format!("timeout {t} is invalid (use -1 or >= 0)"),
                ))
            }
        };
        rt.stream(from_ptr(stream))?.synchronize(limit)
    })
}

/// Whether all work submitted to `stream` has run.
#[no_mangle]
pub unsafe extern "C" fn aclrtStreamQuery(
    stream: aclrtStream,
    status: *mut aclrtStreamStatusRaw,
) -> aclError {
    acl_api!("aclrtStreamQuery", {
        let rt = runtime::get()?;
        require_non_null(status, "status")?;
        let s = rt.stream(from_ptr(stream))?;
        let v = if s.is_idle() {
            aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE
        } else {
            aclrtStreamStatus::ACL_STREAM_STATUS_NOT_READY
        };
        // SAFETY: checked non-NULL; caller provides a writable aclrtStreamStatus.
        unsafe { write_out(status, "status", v as aclrtStreamStatusRaw) }
    })
}

/// Makes later work on `stream` wait until the records of `event` submitted so far have run.
/// An event never recorded imposes no wait.
#[no_mangle]
pub extern "C" fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError {
    acl_api!("aclrtStreamWaitEvent", {
        let rt = runtime::get()?;
        let ev = rt.event(from_ptr(event))?;
        let s = rt.stream(from_ptr(stream))?;
        let gen = ev.pending_generation();
        if gen == 0 {
            return Ok(());
        }
        s.enqueue(Box::new(move || {
            ev.wait_for(gen);
            Ok(())
        }))
    })
}
