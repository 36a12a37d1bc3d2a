//! The C types of `hccl/hccl_net.h`, field for field (a test checks sizes and offsets against
//! the header as a C compiler lays it out).

use std::ffi::{c_char, c_int, c_void};

/// `HCCL_NET_PLUGIN_VERSION`.
pub const PLUGIN_VERSION: u32 = 1;
/// `HCCL_NET_HANDLE_BYTES`.
pub const HANDLE_BYTES: usize = 128;
/// `HCCL_NET_NAME_BYTES`.
pub const NAME_BYTES: usize = 64;
/// `HCCL_NET_UNSET`.
pub const UNSET: i32 = -1;
/// `HCCL_NET_FLAG_RMA`.
pub const FLAG_RMA: u32 = 0x1;
/// `HCCL_NET_FLAG_REG_REQUIRED`.
pub const FLAG_REG_REQUIRED: u32 = 0x2;
/// `HCCL_NET_HEAD_BYTES`.
pub const HEAD_BYTES: usize = 64;
/// `HCCL_NET_FLAG_IN_ORDER`.
pub const FLAG_IN_ORDER: u32 = 0x4;

/// `hcclNetResult_t` values.
pub mod code {
    pub const SUCCESS: i32 = 0;
    pub const AGAIN: i32 = 1;
    pub const E_INVALID: i32 = 2;
    pub const E_NOT_INITIALIZED: i32 = 3;
    pub const E_NOT_SUPPORTED: i32 = 4;
    pub const E_NO_DEVICE: i32 = 5;
    pub const E_NO_MEMORY: i32 = 6;
    pub const E_TRUNCATED: i32 = 7;
    pub const E_REMOTE: i32 = 8;
    pub const E_INTERNAL: i32 = 9;
}

/// `hcclNetLogLevel_t` values.
pub mod level {
    pub const ERROR: i32 = 1;
    pub const WARN: i32 = 2;
    pub const INFO: i32 = 3;
    pub const DEBUG: i32 = 4;
}

/// `hcclNetLogFn_t`.
pub type LogFn = Option<unsafe extern "C" fn(ctx: *mut c_void, level: c_int, msg: *const c_char)>;

/// `hcclNetConfig_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetConfig {
    pub traffic_class: i32,
    pub service_level: i32,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            traffic_class: UNSET,
            service_level: UNSET,
        }
    }
}

/// `hcclNetProperties_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetProperties {
    pub name: [c_char; NAME_BYTES],
    pub provider: [c_char; NAME_BYTES],
    pub fabric: [c_char; NAME_BYTES],
    pub speed_mbps: u64,
    pub max_message_bytes: u64,
    pub flags: u32,
    pub reserved: u32,
    pub traffic_class: i32,
    pub service_level: i32,
}

/// `hcclNetHandle_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetHandle {
    pub bytes: [u8; HANDLE_BYTES],
}

/// `hcclNetMrDesc_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrDesc {
    pub base: u64,
    pub size: u64,
    pub key: u64,
    pub reserved: u64,
}

type Res = c_int;
type H = *mut c_void;

/// `hcclNetPlugin_v1_t`.
#[repr(C)]
pub struct PluginV1 {
    pub version: u32,
    pub struct_size: u32,
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(*const NetConfig, LogFn, *mut c_void) -> Res,
    pub devices: unsafe extern "C" fn(*mut c_int) -> Res,
    pub get_properties: unsafe extern "C" fn(c_int, *mut NetProperties) -> Res,
    pub listen: unsafe extern "C" fn(c_int, *mut NetHandle, *mut H) -> Res,
    pub accept: unsafe extern "C" fn(H, *mut H) -> Res,
    pub close_listen: unsafe extern "C" fn(H) -> Res,
    pub connect: unsafe extern "C" fn(c_int, *const NetHandle, *mut H) -> Res,
    pub connect_test: unsafe extern "C" fn(H, *mut c_int) -> Res,
    pub reg_mr: unsafe extern "C" fn(H, *mut c_void, usize, *mut H) -> Res,
    pub dereg_mr: unsafe extern "C" fn(H) -> Res,
    pub get_mr_desc: unsafe extern "C" fn(H, *mut MrDesc) -> Res,
    pub isend: unsafe extern "C" fn(H, *const c_void, usize, u32, H, *mut H) -> Res,
    pub irecv: unsafe extern "C" fn(H, *mut c_void, usize, u32, H, *mut H) -> Res,
    pub iwrite:
        unsafe extern "C" fn(H, *const c_void, usize, H, *const MrDesc, u64, u32, *mut H) -> Res,
    pub poll_imm: unsafe extern "C" fn(H, *mut u32, *mut c_int) -> Res,
    pub test: unsafe extern "C" fn(H, *mut c_int, *mut usize) -> Res,
    pub close_comm: unsafe extern "C" fn(H) -> Res,
    pub wait_fd: unsafe extern "C" fn(H, *mut c_int) -> Res,
    #[allow(clippy::type_complexity)]
    pub isend_head:
        unsafe extern "C" fn(H, *const c_void, usize, *const c_void, usize, u32, H, *mut H) -> Res,
}

// SAFETY: the table is immutable; `name` points to a static string.
unsafe impl Sync for PluginV1 {}

/// Copies `s` into a C name field, truncated and NUL-terminated.
pub fn set_name(dst: &mut [c_char; NAME_BYTES], s: &str) {
    dst.fill(0);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(NAME_BYTES - 1)) {
        *d = b as c_char;
    }
}
