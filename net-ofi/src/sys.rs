//! The C shim over libfabric (`csrc/shim.c`). Negative return values are libfabric error codes.

use std::ffi::{c_char, c_int, c_void};

/// `struct fi_info` (owned by libfabric; only passed back to the shim).
#[repr(C)]
pub struct FiInfo {
    _private: [u8; 0],
}

/// The shim's fabric + domain pair.
#[repr(C)]
pub struct HnoDomain {
    _private: [u8; 0],
}

/// The shim's endpoint with its completion queue and address vector.
#[repr(C)]
pub struct HnoEp {
    _private: [u8; 0],
}

/// `struct fid_mr`.
#[repr(C)]
pub struct FidMr {
    _private: [u8; 0],
}

/// Length of the names in [`InfoDesc`].
pub const NAME: usize = 64;

/// `struct hno_info_desc`: what the plugin needs of one `fi_info` entry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct InfoDesc {
    pub provider: [c_char; NAME],
    pub fabric: [c_char; NAME],
    pub domain: [c_char; NAME],
    pub speed_bps: u64,
    pub max_msg_size: u64,
    pub caps: u64,
    pub mr_mode: u64,
    pub mr_key_size: u64,
    pub cq_data_size: u64,
    pub tclass: u32,
    pub addrlen: u32,
}

/// `struct hno_cqe`: one completion, or one failed operation when `err != 0`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Cqe {
    pub context: *mut c_void,
    pub flags: u64,
    pub len: u64,
    pub data: u64,
    pub err: i32,
    pub prov_err: i32,
}

impl Default for Cqe {
    fn default() -> Self {
        Cqe {
            context: std::ptr::null_mut(),
            flags: 0,
            len: 0,
            data: 0,
            err: 0,
            prov_err: 0,
        }
    }
}

extern "C" {
    pub fn hno_context_size() -> u32;
    pub fn hno_api_version() -> u32;
    pub fn hno_strerror(err: c_int) -> *const c_char;
    pub fn hno_getinfo(
        prov: *const c_char,
        msg: c_int,
        want_rma: c_int,
        tclass: u32,
        out: *mut *mut FiInfo,
    ) -> c_int;
    pub fn hno_info_next(info: *const FiInfo) -> *mut FiInfo;
    pub fn hno_freeinfo(info: *mut FiInfo);
    pub fn hno_describe(info: *const FiInfo, desc: *mut InfoDesc);
    pub fn hno_domain_open(info: *const FiInfo, out: *mut *mut HnoDomain) -> c_int;
    pub fn hno_domain_close(d: *mut HnoDomain);
    pub fn hno_ep_open(d: *mut HnoDomain, out: *mut *mut HnoEp) -> c_int;
    pub fn hno_ep_close(e: *mut HnoEp);
    pub fn hno_ep_wait_fd(e: *const HnoEp) -> c_int;
    pub fn hno_ep_trywait(e: *mut HnoEp) -> c_int;
    pub fn hno_ep_name(e: *mut HnoEp, buf: *mut c_void, len: *mut usize) -> c_int;
    pub fn hno_av_insert(e: *mut HnoEp, addr: *const c_void, fi_addr: *mut u64) -> c_int;
    pub fn hno_msg_listen(d: *mut HnoDomain, out: *mut *mut HnoEp) -> c_int;
    pub fn hno_msg_connect(
        d: *mut HnoDomain,
        addr: *const c_void,
        param: *const c_void,
        paramlen: usize,
        out: *mut *mut HnoEp,
    ) -> c_int;
    pub fn hno_msg_connreq(
        l: *mut HnoEp,
        info: *mut *mut FiInfo,
        param: *mut c_void,
        paramlen: *mut usize,
    ) -> c_int;
    pub fn hno_msg_accept(d: *mut HnoDomain, info: *mut FiInfo, out: *mut *mut HnoEp) -> c_int;
    pub fn hno_msg_reject(l: *mut HnoEp, info: *mut FiInfo);
    pub fn hno_msg_event(e: *mut HnoEp) -> c_int;
    pub fn hno_senddata(
        e: *mut HnoEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        context: *mut c_void,
    ) -> isize;
    #[allow(clippy::too_many_arguments)]
    pub fn hno_send_head(
        e: *mut HnoEp,
        msg: c_int,
        head: *const c_void,
        headlen: usize,
        data: *const c_void,
        len: usize,
        tag: u64,
        dest: u64,
        context: *mut c_void,
    ) -> isize;
    pub fn hno_recv(
        e: *mut HnoEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        context: *mut c_void,
    ) -> isize;
    pub fn hno_tsend(
        e: *mut HnoEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        tag: u64,
        context: *mut c_void,
    ) -> isize;
    pub fn hno_trecv(
        e: *mut HnoEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        tag: u64,
        context: *mut c_void,
    ) -> isize;
    #[allow(clippy::too_many_arguments)]
    pub fn hno_writedata(
        e: *mut HnoEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        imm: u64,
        dest: u64,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize;
    pub fn hno_cq_read(
        e: *mut HnoEp,
        out: *mut Cqe,
        n: usize,
        msg: *mut c_char,
        msglen: usize,
    ) -> isize;
    pub fn hno_flag_remote_cq_data() -> u64;
    #[allow(clippy::too_many_arguments)]
    pub fn hno_mr_reg(
        d: *mut HnoDomain,
        buf: *mut c_void,
        len: usize,
        remote: c_int,
        requested_key: u64,
        mr: *mut *mut FidMr,
        desc: *mut *mut c_void,
        key: *mut u64,
    ) -> c_int;
    pub fn hno_mr_close(mr: *mut FidMr);
    pub fn hno_mr_mode_local() -> u64;
    pub fn hno_mr_mode_virt_addr() -> u64;
    pub fn hno_mr_mode_prov_key() -> u64;
    pub fn hno_cap_rma() -> u64;
    pub fn hno_err_truncated() -> c_int;
    pub fn hno_err_again() -> c_int;
}

/// libfabric's text for an error code (either sign).
pub fn strerror(err: i64) -> String {
    // SAFETY: fi_strerror returns a pointer to a static string for every code.
    let p = unsafe { hno_strerror(err as c_int) };
    if p.is_null() {
        return format!("error {err}");
    }
    // SAFETY: non-null, NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// A NUL-padded C name as a String.
pub fn name(raw: &[c_char; NAME]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
