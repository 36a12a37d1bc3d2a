//! Event entry points.

use crate::api::{require_non_null, write_out};
use crate::error::AclResult;
use crate::event::Event;
use crate::handle::{from_ptr, to_ptr};
use crate::runtime;
use crate::types::{
    aclError, aclrtEvent, aclrtEventRecordedStatus, aclrtEventRecordedStatusRaw, aclrtStream,
};

fn create_event_into(event: *mut aclrtEvent) -> AclResult {
    let rt = runtime::get()?;
    require_non_null(event, "event")?;
    // SAFETY: checked non-NULL; the caller provides a writable aclrtEvent.
    unsafe { write_out(event, "event", to_ptr(rt.create_event())) }
}

/// Creates an event.
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError {
    acl_api!("aclrtCreateEvent", { create_event_into(event) })
}

/// Like `aclrtCreateEvent`; `flag` is accepted and ignored (timestamps are always taken).
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError {
    acl_api!("aclrtCreateEventWithFlag", {
        let _ = flag;
        create_event_into(event)
    })
}

/// Destroys an event. Records and waits already submitted still complete.
#[no_mangle]
pub extern "C" fn aclrtDestroyEvent(event: aclrtEvent) -> aclError {
    acl_api!("aclrtDestroyEvent", {
        runtime::get()?.destroy_event(from_ptr(event))
    })
}

/// Enqueues a record of `event` on `stream`; it completes, with a timestamp, when reached.
#[no_mangle]
pub extern "C" fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    acl_api!("aclrtRecordEvent", {
        let rt = runtime::get()?;
        let ev = rt.event(from_ptr(event))?;
        ev.record(&*rt.stream(from_ptr(stream))?)
    })
}

/// Enqueues a reset of `event` on `stream`: its status returns to "not ready" when reached.
#[no_mangle]
pub extern "C" fn aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) -> aclError {
    acl_api!("aclrtResetEvent", {
        let rt = runtime::get()?;
        let ev = rt.event(from_ptr(event))?;
        ev.reset(&*rt.stream(from_ptr(stream))?)
    })
}

/// Waits until the records of `event` submitted so far have run (at once if never recorded).
#[no_mangle]
pub extern "C" fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError {
    acl_api!("aclrtSynchronizeEvent", {
        runtime::get()?.event(from_ptr(event))?.synchronize();
        Ok(())
    })
}

/// `ACL_EVENT_RECORDED_STATUS_COMPLETE` once a record has run and none is pending.
#[no_mangle]
pub unsafe extern "C" fn aclrtQueryEventStatus(
    event: aclrtEvent,
    status: *mut aclrtEventRecordedStatusRaw,
) -> aclError {
    acl_api!("aclrtQueryEventStatus", {
        let rt = runtime::get()?;
        require_non_null(status, "status")?;
        let v = if rt.event(from_ptr(event))?.is_complete() {
            aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE
        } else {
            aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY
        };
        // SAFETY: checked non-NULL; caller provides a writable aclrtEventRecordedStatus.
        unsafe { write_out(status, "status", v as aclrtEventRecordedStatusRaw) }
    })
}

/// Milliseconds between the executions of the last records of `startEvent` and `endEvent`;
/// `ACL_ERROR_INVALID_PARAM` unless both have completed.
#[no_mangle]
pub unsafe extern "C" fn aclrtEventElapsedTime(
    ms: *mut f32,
    startEvent: aclrtEvent,
    endEvent: aclrtEvent,
) -> aclError {
    acl_api!("aclrtEventElapsedTime", {
        let rt = runtime::get()?;
        require_non_null(ms, "ms")?;
        let (a, b) = (
            rt.event(from_ptr(startEvent))?,
            rt.event(from_ptr(endEvent))?,
        );
        let v = Event::elapsed_ms(&a, &b)?;
        // SAFETY: checked non-NULL; caller provides a writable float.
        unsafe { write_out(ms, "ms", v) }
    })
}
