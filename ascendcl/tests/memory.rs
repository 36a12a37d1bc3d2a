//! Device/host memory: alignment, copies, and sharing through the memfd extension.

mod common;

use std::os::raw::c_void;

use ascendcl::*;
use common::*;

fn malloc(size: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    ok(unsafe { aclrtMalloc(&mut p, size, ACL_MEM_MALLOC_NORMAL_ONLY as i32) });
    p
}

#[test]
fn allocations_are_aligned_zeroed_and_copyable() {
    setup();
    for size in [1usize, 63, 64, 4097, 1 << 20] {
        let d = malloc(size);
        assert_eq!(d as usize % 64, 0, "size {size}");
        let bytes = unsafe { std::slice::from_raw_parts(d.cast::<u8>(), size) };
        assert!(bytes.iter().all(|&b| b == 0));
        let mut h = std::ptr::null_mut();
        ok(unsafe { aclrtMallocHost(&mut h, size) });
        ok(unsafe { aclrtMemset(d, size, 0x1ab, size) }); // low byte only
        ok(unsafe { aclrtMemcpy(h, size, d, size, ACL_MEMCPY_DEVICE_TO_HOST as i32) });
        let hb = unsafe { std::slice::from_raw_parts(h.cast::<u8>(), size) };
        assert!(hb.iter().all(|&b| b == 0xab));
        ok(aclrtFreeHost(h));
        ok(aclrtFree(d));
    }
}

#[test]
fn share_info_lets_the_memory_be_mapped_again() {
    setup();
    let size = 3 * 4096 + 100;
    let d = malloc(size);
    let inner = d.wrapping_byte_add(5000);
    let (mut fd, mut off, mut len) = (-1i32, 0u64, 0u64);
    ok(unsafe { aclrtHostMemGetShareInfo(inner, &mut fd, &mut off, &mut len) });
    assert!(fd >= 0);
    assert_eq!((off, len), (5000, (size - 5000) as u64));
    // Map the file the way another process would (via /proc/self/fd, as a peer uses /proc/<pid>/fd).
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap();
    let page = 4096u64;
    let map_off = off & !(page - 1);
    let map_len = (off + len - map_off) as usize;
    unsafe {
        let f = libc::open(path.as_ptr(), libc::O_RDWR);
        assert!(f >= 0);
        let m = libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f,
            map_off as libc::off_t,
        );
        assert_ne!(m, libc::MAP_FAILED);
        let peer = m.cast::<u8>().add((off - map_off) as usize);
        *peer = 0x77; // write through the second mapping
        assert_eq!(
            *inner.cast::<u8>(),
            0x77,
            "both mappings see the same pages"
        );
        libc::munmap(m, map_len);
        libc::close(f);
    }
    let outside = std::ptr::without_provenance::<c_void>(16);
    assert_eq!(
        unsafe { aclrtHostMemGetShareInfo(outside, &mut fd, &mut off, &mut len) },
        ACL_ERROR_INVALID_PARAM
    );
    // (Lookups after free are covered by the unit test in src/memory.rs: here a parallel test may
    // already have been given the same address.)
    ok(aclrtFree(d));
}

#[test]
fn mem_info_reports_host_memory() {
    setup();
    let (mut free, mut total) = (0usize, 0usize);
    ok(unsafe { aclrtGetMemInfo(0, &mut free, &mut total) });
    assert!(total > 0 && free <= total);
}
