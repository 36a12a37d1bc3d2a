//! Memory registrations. A registration lives until it is deregistered and no posted operation
//! still uses it (each holds an Arc), so deregistering early never frees memory the network
//! is still reading or writing.

use crate::abi::MrDesc;
use crate::error::{NetError, NetResult};
use crate::fabric::Device;
use crate::sys::{self, FidMr};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Keys for providers that let the caller choose them: unique within the process.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

pub struct Mr {
    pub dev: Arc<Device>,
    mr: *mut FidMr,
    desc: usize,
    key: u64,
    addr: usize,
    len: usize,
}

// SAFETY: the registration is immutable after creation; the domain is thread-safe.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `[data, data + len)` on `dev`.
    pub fn register(dev: &Arc<Device>, data: *mut c_void, len: usize) -> NetResult<Mr> {
        if data.is_null() {
            return Err(NetError::Invalid("data is NULL".into()));
        }
        if len == 0 {
            return Err(NetError::Invalid("size is 0".into()));
        }
        if (data as usize).checked_add(len).is_none() {
            return Err(NetError::Invalid(format!("{data:p} + {len} overflows")));
        }
        let requested = if dev.mr_prov_key {
            0
        } else {
            NEXT_KEY.fetch_add(1, Ordering::Relaxed)
        };
        let mut mr: *mut FidMr = std::ptr::null_mut();
        let mut desc: *mut c_void = std::ptr::null_mut();
        let mut key = 0u64;
        // SAFETY: the caller vouches for the memory (the C contract); the out-pointers are
        // valid locals.
        let rc = unsafe {
            sys::hno_mr_reg(
                dev.domain(),
                data,
                len,
                dev.rma as i32,
                requested,
                &mut mr,
                &mut desc,
                &mut key,
            )
        };
        if rc != 0 {
            return Err(NetError::fabric("fi_mr_reg", rc as i64));
        }
        Ok(Mr {
            dev: dev.clone(),
            mr,
            desc: desc as usize,
            key,
            addr: data as usize,
            len,
        })
    }

    /// The local descriptor to pass with operations on this memory.
    pub fn desc(&self) -> *mut c_void {
        self.desc as *mut c_void
    }

    /// Checks that `[data, data + len)` lies inside this registration, on `dev`.
    pub fn covers(&self, dev: &Arc<Device>, data: usize, len: usize) -> NetResult<()> {
        if !Arc::ptr_eq(&self.dev, dev) {
            return Err(NetError::Invalid(format!(
                "memory handle belongs to device {}, the comm to device {}",
                self.dev.index, dev.index
            )));
        }
        if len == 0 {
            return Ok(());
        }
        let end = data.checked_add(len);
        if data < self.addr || end.is_none_or(|e| e > self.addr + self.len) {
            return Err(NetError::Invalid(format!(
                "buffer {:#x}+{len} lies outside its registration {:#x}+{}",
                data, self.addr, self.len
            )));
        }
        Ok(())
    }

    /// What a peer needs to write here.
    pub fn remote_desc(&self) -> MrDesc {
        MrDesc {
            base: if self.dev.mr_virt_addr {
                self.addr as u64
            } else {
                0
            },
            size: self.len as u64,
            key: self.key,
            reserved: 0,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, closed once; no operation uses it any more (each
        // holds an Arc until its completion is reaped or its endpoint is closed).
        unsafe { sys::hno_mr_close(self.mr) };
    }
}
