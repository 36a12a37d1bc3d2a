//! Opaque handles given to C.
//!
//! Handles are never addresses of Rust objects: they are unique numbers (never reused in the life
//! of the process) that are looked up in a registry, so a stale or forged handle is reported as
//! `ACL_ERROR_INVALID_RESOURCE_HANDLE` instead of being dereferenced.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

/// First handle value; large and 16-aligned so handles look like (and never equal) NULL.
const BASE: usize = 0x0a5c_0000_0000;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh handle value.
pub fn new_handle() -> usize {
    BASE + NEXT.fetch_add(1, Ordering::Relaxed) * 16
}

/// The handle as the pointer C sees.
pub fn to_ptr(handle: usize) -> *mut c_void {
    std::ptr::without_provenance_mut(handle)
}

/// The handle value behind a pointer received from C (0 for NULL).
pub fn from_ptr(ptr: *const c_void) -> usize {
    ptr.addr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_round_trip() {
        let a = new_handle();
        let b = new_handle();
        assert_ne!(a, b);
        assert_ne!(a, 0);
        assert_eq!(from_ptr(to_ptr(a)), a);
    }
}
