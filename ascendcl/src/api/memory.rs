//! Memory entry points. All memory is host memory; copies are plain `memmove`s, either immediate
//! or run in order on a stream.

use std::os::raw::{c_int, c_void};

use crate::api::{require_non_null, write_out};
use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::{fail, AclResult};
use crate::handle::from_ptr;
use crate::memory::{self, MemKind};
use crate::runtime;
use crate::send_ptr::SendPtr;
use crate::types::{
    aclError, aclrtMemMallocPolicyRaw, aclrtMemcpyKind, aclrtMemcpyKindRaw, aclrtStream,
};

/// Highest `aclrtMemMallocPolicy` value (the low byte; higher bits are vendor flags, ignored).
const MAX_POLICY: c_int = 5;

fn check_copy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: c_int,
) -> AclResult {
    if dst.is_null() || src.is_null() {
        return Err(fail(ACL_ERROR_INVALID_PARAM, "dst or src is NULL"));
    }
    if aclrtMemcpyKind::from_raw(kind).is_none() {
        return Err(fail(
            ACL_ERROR_INVALID_PARAM,
            format!("memcpy kind {kind} is not in 0..=4"),
        ));
    }
    check_count(dest_max, count)
}

fn check_count(dest_max: usize, count: usize) -> AclResult {
    if count > dest_max {
        return Err(fail(
            ACL_ERROR_INVALID_PARAM,
            format!("count {count} exceeds destination capacity {dest_max}"),
        ));
    }
    Ok(())
}

/// # Safety
/// `src` and `dst` valid for `count` bytes.
unsafe fn copy_bytes(dst: *mut c_void, src: *const c_void, count: usize) {
    // SAFETY: per the function contract; `copy` tolerates overlap like memmove.
    unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), count) }
}

/// Allocates `size` bytes of device memory: page-aligned, zeroed, shareable host memory
/// (see `aclrtHostMemGetShareInfo`). `size` 0 is `ACL_ERROR_INVALID_PARAM`.
#[no_mangle]
pub unsafe extern "C" fn aclrtMalloc(
    devPtr: *mut *mut c_void,
    size: usize,
    policy: aclrtMemMallocPolicyRaw,
) -> aclError {
    acl_api!("aclrtMalloc", {
        runtime::get()?;
        require_non_null(devPtr, "devPtr")?;
        if !(0..=MAX_POLICY).contains(&(policy & 0xff)) || policy < 0 {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!("malloc policy {policy} is invalid"),
            ));
        }
        let p = memory::alloc(size, MemKind::Device)?;
        // SAFETY: checked non-NULL; caller provides a writable void *.
        unsafe { write_out(devPtr, "devPtr", p) }
    })
}

/// Frees memory from `aclrtMalloc`. Unknown pointers and double frees are `ACL_ERROR_INVALID_PARAM`.
#[no_mangle]
pub extern "C" fn aclrtFree(devPtr: *mut c_void) -> aclError {
    acl_api!("aclrtFree", {
        runtime::get()?;
        memory::free(devPtr, MemKind::Device)
    })
}

/// Allocates `size` bytes of page-locked host memory (tracked like device memory).
#[no_mangle]
pub unsafe extern "C" fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError {
    acl_api!("aclrtMallocHost", {
        runtime::get()?;
        require_non_null(hostPtr, "hostPtr")?;
        let p = memory::alloc(size, MemKind::Host)?;
        // SAFETY: checked non-NULL; caller provides a writable void *.
        unsafe { write_out(hostPtr, "hostPtr", p) }
    })
}

/// Frees memory from `aclrtMallocHost`.
#[no_mangle]
pub extern "C" fn aclrtFreeHost(hostPtr: *mut c_void) -> aclError {
    acl_api!("aclrtFreeHost", {
        runtime::get()?;
        memory::free(hostPtr, MemKind::Host)
    })
}

/// Sets `count` bytes at `devPtr` to the low byte of `value`; `count` must not exceed `maxCount`.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemset(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
) -> aclError {
    acl_api!("aclrtMemset", {
        runtime::get()?;
        require_non_null(devPtr, "devPtr")?;
        check_count(maxCount, count)?;
        // SAFETY: the caller guarantees `maxCount` writable bytes at devPtr, and count <= maxCount.
        unsafe { std::ptr::write_bytes(devPtr.cast::<u8>(), value as u8, count) };
        Ok(())
    })
}

/// Copies `count` bytes now. Fails with `ACL_ERROR_INVALID_PARAM` on NULL pointers,
/// `count > destMax` or a `kind` outside 0..=4.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKindRaw,
) -> aclError {
    acl_api!("aclrtMemcpy", {
        runtime::get()?;
        check_copy(dst, destMax, src, count, kind)?;
        // SAFETY: validated above; the caller guarantees the buffers.
        unsafe { copy_bytes(dst, src, count) };
        Ok(())
    })
}

/// Enqueues a copy on `stream` (NULL: current device's default stream). Arguments are checked
/// at once; the buffers must stay valid until the copy has run.
#[no_mangle]
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    destMax: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKindRaw,
    stream: aclrtStream,
) -> aclError {
    acl_api!("aclrtMemcpyAsync", {
        let rt = runtime::get()?;
        check_copy(dst, destMax, src, count, kind)?;
        let s = rt.stream(from_ptr(stream))?;
        let (d, sp) = (SendPtr::new(dst), SendPtr::new(src.cast_mut()));
        s.enqueue(Box::new(move || {
            // SAFETY: validated at submission; the caller keeps the buffers alive until it runs.
            unsafe { copy_bytes(d.get(), sp.get(), count) };
            Ok(())
        }))
    })
}

/// Enqueues a memset on `stream` (NULL: current device's default stream).
#[no_mangle]
pub unsafe extern "C" fn aclrtMemsetAsync(
    devPtr: *mut c_void,
    maxCount: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> aclError {
    acl_api!("aclrtMemsetAsync", {
        let rt = runtime::get()?;
        require_non_null(devPtr, "devPtr")?;
        check_count(maxCount, count)?;
        let s = rt.stream(from_ptr(stream))?;
        let d = SendPtr::new(devPtr);
        s.enqueue(Box::new(move || {
            // SAFETY: validated at submission; the caller keeps the buffer alive until it runs.
            unsafe { std::ptr::write_bytes(d.get().cast::<u8>(), value as u8, count) };
            Ok(())
        }))
    })
}

/// Free and total memory: the host's available and physical RAM, whatever `attr` (>= 0) names.
#[no_mangle]
pub unsafe extern "C" fn aclrtGetMemInfo(
    attr: c_int,
    free: *mut usize,
    total: *mut usize,
) -> aclError {
    acl_api!("aclrtGetMemInfo", {
        runtime::get()?;
        if attr < 0 {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!("memory attribute {attr} is invalid"),
            ));
        }
        require_non_null(free, "free")?;
        require_non_null(total, "total")?;
        // SAFETY: sysconf has no preconditions.
        let (page, phys, avail) = unsafe {
            (
                libc::sysconf(libc::_SC_PAGESIZE),
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_AVPHYS_PAGES),
            )
        };
        let bytes =
            |pages: libc::c_long| (pages.max(0) as usize).saturating_mul(page.max(0) as usize);
        // SAFETY: both checked non-NULL; caller provides writable size_t values.
        unsafe {
            write_out(free, "free", bytes(avail))?;
            write_out(total, "total", bytes(phys))
        }
    })
}
