//! The C entry points, one file per group. `build.rs` feeds these files to cbindgen:
//! `base.rs` → `acl_base.h`, `lifecycle.rs` → `acl.h`, the others → `acl_rt.h`.

#![allow(non_snake_case)]

pub mod base;
pub mod callback;
pub mod context;
pub mod device;
pub mod event;
pub mod host_ext;
pub mod lifecycle;
pub mod memory;
pub mod stream;

pub use base::*;
pub use callback::*;
pub use context::*;
pub use device::*;
pub use event::*;
pub use host_ext::*;
pub use lifecycle::*;
pub use memory::*;
pub use stream::*;

use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::{fail, AclResult};

/// Stores `value` through an out-parameter, rejecting NULL.
///
/// # Safety
/// `out` must be NULL or valid for writing a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, what: &str, value: T) -> AclResult {
    if out.is_null() {
        return Err(fail(ACL_ERROR_INVALID_PARAM, format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and valid per the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Rejects a NULL out-parameter before any work is done.
pub(crate) fn require_non_null<T>(p: *const T, what: &str) -> AclResult {
    if p.is_null() {
        Err(fail(ACL_ERROR_INVALID_PARAM, format!("{what} is NULL")))
    } else {
        Ok(())
    }
}
