//! Callback entry points (see `report.rs` for the delivery rules).

use std::os::raw::c_void;

use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::fail;
use crate::handle::from_ptr;
use crate::report::current_thread_id;
use crate::runtime;
use crate::send_ptr::SendPtr;
use crate::types::{
    aclError, aclrtCallback, aclrtCallbackBlockType, aclrtCallbackBlockTypeRaw, aclrtHostFunc,
    aclrtStream,
};

/// Enqueues `func(userData)` on `stream`. When reached, it goes to the thread subscribed to the
/// stream (run by its `aclrtProcessReport`), or runs on the stream's worker if nobody subscribed.
/// With `ACL_CALLBACK_BLOCK` later work on the stream waits for the callback to finish.
#[no_mangle]
pub extern "C" fn aclrtLaunchCallback(
    func: aclrtCallback,
    userData: *mut c_void,
    blockType: aclrtCallbackBlockTypeRaw,
    stream: aclrtStream,
) -> aclError {
    acl_api!("aclrtLaunchCallback", {
        let rt = runtime::get()?;
        let func = func.ok_or_else(|| fail(ACL_ERROR_INVALID_PARAM, "callback is NULL"))?;
        let block = match aclrtCallbackBlockType::from_raw(blockType) {
            Some(b) => b == aclrtCallbackBlockType::ACL_CALLBACK_BLOCK,
            None => {
                return Err(fail(
                    ACL_ERROR_INVALID_PARAM,
                    format!("block type {blockType} is not 0 or 1"),
                ))
            }
        };
        let s = rt.stream(from_ptr(stream))?;
        let (handle, data, hub_rt) = (s.handle, SendPtr::new(userData), rt.clone());
        s.enqueue(Box::new(move || {
            hub_rt.reports.deliver(handle, func, data, block);
            Ok(())
        }))
    })
}

/// Routes callbacks of `stream` (NULL: default stream) to the thread whose `pthread_t` is
/// `threadId`; that thread runs them by calling `aclrtProcessReport`. A stream has at most one
/// subscriber.
#[no_mangle]
pub extern "C" fn aclrtSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError {
    acl_api!("aclrtSubscribeReport", {
        let rt = runtime::get()?;
        let s = rt.stream(from_ptr(stream))?;
        rt.reports.subscribe(threadId, s.handle)
    })
}

/// Runs the callbacks delivered to the calling thread, waiting up to `timeout` ms (-1: forever)
/// for at least one; `ACL_ERROR_RT_REPORT_TIMEOUT` if none came, `ACL_ERROR_INVALID_PARAM` if the
/// thread has no subscription.
#[no_mangle]
pub extern "C" fn aclrtProcessReport(timeout: i32) -> aclError {
    acl_api!("aclrtProcessReport", {
        let rt = runtime::get()?;
        if timeout < -1 {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!("timeout {timeout} is invalid (use -1 or >= 0)"),
            ));
        }
        rt.reports.process(current_thread_id(), timeout)
    })
}

/// Ends a subscription; callbacks of the stream not yet run are run by the calling thread.
#[no_mangle]
pub extern "C" fn aclrtUnSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError {
    acl_api!("aclrtUnSubscribeReport", {
        let rt = runtime::get()?;
        let s = rt.stream(from_ptr(stream))?;
        rt.reports.unsubscribe(threadId, s.handle)
    })
}

/// Enqueues `func(args)` on `stream`; it runs on the stream's worker, in order, and later work
/// waits for it.
#[no_mangle]
pub extern "C" fn aclrtLaunchHostFunc(
    stream: aclrtStream,
    func: aclrtHostFunc,
    args: *mut c_void,
) -> aclError {
    acl_api!("aclrtLaunchHostFunc", {
        let rt = runtime::get()?;
        let func = func.ok_or_else(|| fail(ACL_ERROR_INVALID_PARAM, "host function is NULL"))?;
        let s = rt.stream(from_ptr(stream))?;
        let data = SendPtr::new(args);
        s.enqueue(Box::new(move || {
            // SAFETY: the caller supplied a valid function and argument for it.
            unsafe { func(data.get()) };
            Ok(())
        }))
    })
}
