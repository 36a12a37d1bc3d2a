//! Context entry points. A context names a device; streams belong to devices, so destroying a
//! context does not destroy streams (the device's last release does).

use crate::api::{require_non_null, write_out};
use crate::handle::{from_ptr, to_ptr};
use crate::runtime;
use crate::types::{aclError, aclrtContext};

/// Creates a context on `deviceId` (holding a device reference) and makes it current.
#[no_mangle]
pub unsafe extern "C" fn aclrtCreateContext(context: *mut aclrtContext, deviceId: i32) -> aclError {
    acl_api!("aclrtCreateContext", {
        let rt = runtime::get()?;
        require_non_null(context, "context")?;
        let c = rt.create_context(deviceId)?;
        // SAFETY: checked non-NULL; caller provides a writable aclrtContext.
        unsafe { write_out(context, "context", to_ptr(c)) }
    })
}

/// Destroys a context made by `aclrtCreateContext` (not a device's default context).
#[no_mangle]
pub extern "C" fn aclrtDestroyContext(context: aclrtContext) -> aclError {
    acl_api!("aclrtDestroyContext", {
        runtime::get()?.destroy_context(from_ptr(context))
    })
}

/// Binds the calling thread to `context` (and so to its device).
#[no_mangle]
pub extern "C" fn aclrtSetCurrentContext(context: aclrtContext) -> aclError {
    acl_api!("aclrtSetCurrentContext", {
        runtime::get()?.set_current_context(from_ptr(context))
    })
}

/// The calling thread's current context (`ACL_ERROR_INVALID_PARAM` if none).
#[no_mangle]
pub unsafe extern "C" fn aclrtGetCurrentContext(context: *mut aclrtContext) -> aclError {
    acl_api!("aclrtGetCurrentContext", {
        let rt = runtime::get()?;
        require_non_null(context, "context")?;
        let c = rt.current_context()?;
        // SAFETY: checked non-NULL; caller provides a writable aclrtContext.
        unsafe { write_out(context, "context", to_ptr(c)) }
    })
}
