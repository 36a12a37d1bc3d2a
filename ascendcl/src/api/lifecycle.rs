//! `aclInit`, `aclFinalize` and `aclGetRecentErrMsg` (declared in `acl.h`).

use std::ffi::CStr;
use std::os::raw::c_char;

use crate::error;
use crate::runtime;
use crate::types::aclError;

/// Initialises the runtime. `configPath` may be NULL; a given file is not interpreted (nothing in
/// it applies to the host runtime). The device count comes from `ASCEND_HOST_DEVICE_COUNT`
/// (default 8); a malformed value fails with `ACL_ERROR_INVALID_PARAM`. Returns
/// `ACL_ERROR_REPEAT_INITIALIZE` when already initialised. Initialising again after `aclFinalize`
/// is allowed.
#[no_mangle]
pub unsafe extern "C" fn aclInit(configPath: *const c_char) -> aclError {
    acl_api!("aclInit", {
        runtime::init()?;
        if !configPath.is_null() {
            // SAFETY: the caller passes NULL or a NUL-terminated string.
            let path = unsafe { CStr::from_ptr(configPath) }.to_string_lossy();
            if !path.is_empty() && std::fs::metadata(&*path).is_err() {
                log::warn!("aclInit: config file {path:?} not readable; ignored");
            }
        }
        Ok(())
    })
}

/// Finalizes the runtime: every device is reset, all streams are drained and their worker
/// threads joined; stream, event and context handles become invalid. Memory stays allocated
/// until freed. Returns `ACL_ERROR_REPEAT_FINALIZE` when not initialised.
#[no_mangle]
pub extern "C" fn aclFinalize() -> aclError {
    acl_api!("aclFinalize", { runtime::finalize() })
}

/// The most recent error message of the calling thread, or NULL if no call failed since the last
/// query. The string stays valid until the next call of this function on the same thread.
#[no_mangle]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    acl_api_value!("aclGetRecentErrMsg", std::ptr::null(), {
        error::take_recent_message()
    })
}
