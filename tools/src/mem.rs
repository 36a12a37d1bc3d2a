//! The testers' buffers: device memory of the host ACL runtime (`aclrtMalloc`, the vendor
//! tester's choice and the default) or plain host memory (`--mem host`).
//!
//! Device memory is shareable with other processes, so a peer may map it and copy single-copy
//! messages with `memcpy` (see the library's `transport::peer_mem`); host memory is what a
//! framework's CPU tensors are, copied by the kernel (`process_vm_readv`). The runtime is
//! linked into the testers, where `dlsym` cannot see its symbols, so its share entry points are
//! handed to the library here.

use std::ffi::c_void;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use hccl::transport::local_mem::{self, ShareFns};

/// Where the testers' buffers live (`--mem`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// `aclrtMalloc` of the host ACL runtime.
    Device,
    /// A plain heap allocation.
    Host,
}

impl Memory {
    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Memory::Device => "device",
            Memory::Host => "host",
        }
    }
}

/// Starts the runtime once per process and hands its share entry points to the library.
fn runtime() -> Result<(), String> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            // SAFETY: NULL config path; aclInit may be called once per process.
            let rc = unsafe { ascendcl::aclInit(std::ptr::null()) };
            if rc != 0 {
                return Err(format!("aclInit returned {rc}"));
            }
            local_mem::register(ShareFns {
                info: ascendcl::aclrtHostMemGetShareInfo,
                epoch: Some(ascendcl::aclrtHostMemShareEpoch),
            });
            Ok(())
        })
        .clone()
}

/// A zeroed buffer in the chosen memory, freed on drop.
pub struct Buffer {
    ptr: *mut u8,
    len: usize,
    host: Vec<u8>,
}

impl Buffer {
    /// `len` zeroed bytes in `mem` (an empty buffer allocates nothing).
    pub fn new(mem: Memory, len: usize) -> Result<Buffer, String> {
        if mem == Memory::Host || len == 0 {
            let mut host = vec![0u8; len];
            return Ok(Buffer {
                ptr: host.as_mut_ptr(),
                len,
                host,
            });
        }
        runtime()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-parameter; policy 0 is the default.
        let rc = unsafe { ascendcl::aclrtMalloc(&mut p, len, 0) };
        if rc != 0 || p.is_null() {
            return Err(format!("aclrtMalloc of {len} bytes returned {rc}"));
        }
        Ok(Buffer {
            ptr: p.cast(),
            len,
            host: Vec::new(),
        })
    }
}

impl Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised (zeroed by the allocator) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.host.is_empty() && self.len > 0 {
            // A live block of aclrtMalloc, freed once.
            let rc = ascendcl::aclrtFree(self.ptr.cast());
            debug_assert_eq!(rc, 0, "aclrtFree");
        }
    }
}

// SAFETY: the buffer owns its block exclusively, like a Vec<u8>.
unsafe impl Send for Buffer {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_memories_give_zeroed_writable_buffers() {
        for mem in [Memory::Device, Memory::Host] {
            let mut b = Buffer::new(mem, 10_000).unwrap();
            assert!(b.iter().all(|&x| x == 0));
            b[9_999] = 7;
            assert_eq!(b[9_999], 7);
            assert!(Buffer::new(mem, 0).unwrap().is_empty());
        }
        let b = Buffer::new(Memory::Device, 4096).unwrap();
        let mut m = local_mem::LocalMem::new(local_mem::find());
        assert!(
            m.find(b.as_ptr() as usize, 4096).is_some(),
            "device memory is shareable"
        );
        let h = Buffer::new(Memory::Host, 4096).unwrap();
        assert!(m.find(h.as_ptr() as usize, 4096).is_none());
    }
}
