//! Device entry points.

use crate::api::write_out;
use crate::runtime;
use crate::types::{aclError, aclrtRunMode, aclrtRunModeRaw};

/// Opens device `deviceId` (one reference) and makes it the calling thread's current device.
/// `ACL_ERROR_INVALID_DEVICE` when out of range.
#[no_mangle]
pub extern "C" fn aclrtSetDevice(deviceId: i32) -> aclError {
    acl_api!("aclrtSetDevice", { runtime::get()?.set_device(deviceId) })
}

/// Releases one reference on `deviceId`; the last release drains and destroys the device's
/// streams. Unbinds the calling thread if it was bound to that device.
#[no_mangle]
pub extern "C" fn aclrtResetDevice(deviceId: i32) -> aclError {
    acl_api!("aclrtResetDevice", {
        runtime::get()?.reset_device(deviceId)
    })
}

/// The calling thread's current device (`ACL_ERROR_INVALID_PARAM` if it has none).
#[no_mangle]
pub unsafe extern "C" fn aclrtGetDevice(deviceId: *mut i32) -> aclError {
    acl_api!("aclrtGetDevice", {
        let rt = runtime::get()?;
        crate::api::require_non_null(deviceId, "deviceId")?;
        let d = rt.require_device()?;
        // SAFETY: checked non-NULL; caller provides a writable int32_t.
        unsafe { write_out(deviceId, "deviceId", d) }
    })
}

/// Number of logical devices (`ASCEND_HOST_DEVICE_COUNT`, default 8).
#[no_mangle]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> aclError {
    acl_api!("aclrtGetDeviceCount", {
        let rt = runtime::get()?;
        // SAFETY: caller provides NULL or a writable uint32_t.
        unsafe { write_out(count, "count", rt.device_count) }
    })
}

/// Waits for all work on every stream of the current device; returns the first stream error.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeDevice() -> aclError {
    acl_api!("aclrtSynchronizeDevice", {
        let rt = runtime::get()?;
        let device = rt.require_device()?;
        let mut first = Ok(());
        for s in rt.device_streams(device)? {
            let r = s.synchronize(None);
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Always `ACL_HOST`.
#[no_mangle]
pub unsafe extern "C" fn aclrtGetRunMode(runMode: *mut aclrtRunModeRaw) -> aclError {
    acl_api!("aclrtGetRunMode", {
        runtime::get()?;
        // SAFETY: caller provides NULL or a writable aclrtRunMode.
        unsafe {
            write_out(
                runMode,
                "runMode",
                aclrtRunMode::ACL_HOST as aclrtRunModeRaw,
            )
        }
    })
}
