//! Host implementation of the AscendCL runtime subset used by HCCL programs (`libascendcl.so`).
//!
//! On a machine without an NPU, "devices" are logical slots, device memory is shareable host
//! memory, and every stream is an in-order queue served by its own worker thread. The C API lives
//! in [`api`]; the headers `include/acl/{acl_base,acl_rt,acl}.h` are generated from it by
//! `build.rs`.
//!
//! Environment variables:
//! * `ASCEND_HOST_DEVICE_COUNT` — number of logical devices (default 8, must be 1..=1024);
//!   read by `aclInit`, which fails with `ACL_ERROR_INVALID_PARAM` when it is malformed.
//! * `ASCEND_GLOBAL_LOG_LEVEL` — 0 debug, 1 info, 2 warning, 3 error (default), 4 off.

// Every unsafe operation sits in an `unsafe {}` block that says why it is sound.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]
// Every entry point is an `unsafe extern "C" fn` whose safety contract is the C API contract
// documented on it (valid pointers as described); a separate `# Safety` section would repeat it.
#![allow(clippy::missing_safety_doc)]

#[macro_use]
mod ffi_macro;

pub mod api;
pub mod device;
pub mod error;
pub mod event;
pub mod handle;
pub mod logging;
pub mod memory;
pub mod report;
pub mod runtime;
mod send_ptr;
pub mod stream;
pub mod types;

pub use api::*;
pub use types::*;

/// AscendCL status codes (`aclError` values), from the result-code table shared with libhccl
/// (also the `static const int` lines of `acl_base.h`).
pub mod codes {
    pub use result_codes::acl::*;
}
pub use codes::*;
