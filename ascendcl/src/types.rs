//! C-visible types of the AscendCL subset.
//!
//! cbindgen reads this file to produce the type part of `acl_base.h`. The `#[repr(C)]` enums exist
//! so the header carries the vendor's enum definitions; entry points never take them as parameters
//! (a C caller may pass any integer, and an out-of-range Rust enum value is undefined behaviour).
//! Entry points take the `*Raw` integer aliases instead, which `build.rs` excludes from the headers
//! and renames to the enum names, so the C prototypes read exactly like the vendor's.

// C names (`userData`) are kept so the generated typedefs read like the vendor header.
#![allow(non_snake_case)]

use std::os::raw::{c_int, c_void};

/// Status code returned by runtime calls; `ACL_SUCCESS` (0) on success.
pub type aclError = c_int;
/// Opaque stream handle; NULL means the default stream of the calling thread's current device.
pub type aclrtStream = *mut c_void;
/// Opaque event handle.
pub type aclrtEvent = *mut c_void;
/// Opaque context handle.
pub type aclrtContext = *mut c_void;
/// IEEE 754 binary16 value stored in its bit pattern.
pub type aclFloat16 = u16;
/// Callback launched on a stream with `aclrtLaunchCallback`.
pub type aclrtCallback = Option<unsafe extern "C" fn(userData: *mut c_void)>;
/// Host function launched on a stream with `aclrtLaunchHostFunc`.
pub type aclrtHostFunc = Option<unsafe extern "C" fn(args: *mut c_void)>;

/// Direction of a memory copy (all memory is host memory in this runtime; the kind is validated only).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
    ACL_MEMCPY_DEFAULT = 4,
}

/// Page policy of `aclrtMalloc` (accepted and ignored: memory is ordinary shared host pages).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
}

/// Whether a stream waits for a launched callback before running later work.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclrtCallbackBlockType {
    ACL_CALLBACK_NO_BLOCK = 0,
    ACL_CALLBACK_BLOCK = 1,
}

/// Result of `aclrtQueryEventStatus`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
}

/// Result of `aclrtStreamQuery`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclrtStreamStatus {
    ACL_STREAM_STATUS_COMPLETE = 0,
    ACL_STREAM_STATUS_NOT_READY = 1,
    ACL_STREAM_STATUS_RESERVED = 0xFFFF,
}

/// Where the application runs; this runtime always answers `ACL_HOST`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclrtRunMode {
    ACL_DEVICE = 0,
    ACL_HOST = 1,
}

/// Element types understood by `aclDataTypeSize`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum aclDataType {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27,
}

/// ABI-level `aclrtMemcpyKind` (emitted as `aclrtMemcpyKind` in the headers).
pub type aclrtMemcpyKindRaw = c_int;
/// ABI-level `aclrtMemMallocPolicy` (emitted as `aclrtMemMallocPolicy` in the headers).
pub type aclrtMemMallocPolicyRaw = c_int;
/// ABI-level `aclrtCallbackBlockType` (emitted as `aclrtCallbackBlockType` in the headers).
pub type aclrtCallbackBlockTypeRaw = c_int;
/// ABI-level `aclrtEventRecordedStatus` (emitted as `aclrtEventRecordedStatus` in the headers).
pub type aclrtEventRecordedStatusRaw = c_int;
/// ABI-level `aclrtStreamStatus` (emitted as `aclrtStreamStatus` in the headers).
pub type aclrtStreamStatusRaw = c_int;
/// ABI-level `aclrtRunMode` (emitted as `aclrtRunMode` in the headers).
pub type aclrtRunModeRaw = c_int;
/// ABI-level `aclDataType` (emitted as `aclDataType` in the headers).
pub type aclDataTypeRaw = c_int;

impl aclrtMemcpyKind {
    /// Validates a raw value received from C.
    pub fn from_raw(v: c_int) -> Option<Self> {
        use aclrtMemcpyKind::*;
        Some(match v {
            0 => ACL_MEMCPY_HOST_TO_HOST,
            1 => ACL_MEMCPY_HOST_TO_DEVICE,
            2 => ACL_MEMCPY_DEVICE_TO_HOST,
            3 => ACL_MEMCPY_DEVICE_TO_DEVICE,
            4 => ACL_MEMCPY_DEFAULT,
            _ => return None,
        })
    }
}

impl aclrtCallbackBlockType {
    /// Validates a raw value received from C.
    pub fn from_raw(v: c_int) -> Option<Self> {
        match v {
            0 => Some(Self::ACL_CALLBACK_NO_BLOCK),
            1 => Some(Self::ACL_CALLBACK_BLOCK),
            _ => None,
        }
    }
}

impl aclDataType {
    /// Validates a raw value received from C.
    pub fn from_raw(v: c_int) -> Option<Self> {
        use aclDataType::*;
        Some(match v {
            -1 => ACL_DT_UNDEFINED,
            0 => ACL_FLOAT,
            1 => ACL_FLOAT16,
            2 => ACL_INT8,
            3 => ACL_INT32,
            4 => ACL_UINT8,
            6 => ACL_INT16,
            7 => ACL_UINT16,
            8 => ACL_UINT32,
            9 => ACL_INT64,
            10 => ACL_UINT64,
            11 => ACL_DOUBLE,
            12 => ACL_BOOL,
            27 => ACL_BF16,
            _ => return None,
        })
    }

    /// Size in bytes of one element (0 for `ACL_DT_UNDEFINED`).
    pub fn size(self) -> usize {
        use aclDataType::*;
        match self {
            ACL_DT_UNDEFINED => 0,
            ACL_INT8 | ACL_UINT8 | ACL_BOOL => 1,
            ACL_FLOAT16 | ACL_INT16 | ACL_UINT16 | ACL_BF16 => 2,
            ACL_FLOAT | ACL_INT32 | ACL_UINT32 => 4,
            ACL_INT64 | ACL_UINT64 | ACL_DOUBLE => 8,
        }
    }
}
