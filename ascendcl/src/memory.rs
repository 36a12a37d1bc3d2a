//! "Device" and pinned-host memory: shareable host mappings, tracked in a registry.
//!
//! Every allocation is its own `memfd` mapped `MAP_SHARED`, so another process can map the same
//! pages (via `/proc/<pid>/fd/<fd>` or an fd passed over a Unix socket) for zero-copy transfers;
//! see `aclrtHostMemGetShareInfo`. Mappings are page aligned (well beyond the 64 bytes SIMD code
//! needs). If `memfd_create` is unavailable the allocation falls back to an anonymous shared
//! mapping that cannot be shared with other processes. The registry outlives `aclFinalize`:
//! memory stays valid until freed.
//!
//! Each memfd is sealed against shrinking and growing (and further sealing) once sized: a
//! process that maps a peer's allocation can check the seals and know the file can never be
//! truncated under its mapping (which would make its reads fault). Allocations and frees count
//! in [`share_epoch`], so a caller may cache share lookups while the count is unchanged.

use std::collections::BTreeMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::codes::{ACL_ERROR_BAD_ALLOC, ACL_ERROR_FEATURE_UNSUPPORTED, ACL_ERROR_INVALID_PARAM};
use crate::error::{fail, AclResult};

/// Which allocator produced a block (each must be freed by its own free function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    /// `aclrtMalloc`.
    Device,
    /// `aclrtMallocHost`.
    Host,
}

struct Allocation {
    size: usize,
    map_len: usize,
    fd: i32,
    kind: MemKind,
}

/// Live allocations by base address.
static ALLOCATIONS: Mutex<BTreeMap<usize, Allocation>> = Mutex::new(BTreeMap::new());

/// Changes with every allocation and free (see [`share_epoch`]).
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// A count that changes whenever an allocation is made or freed: share information looked up
/// while it had one value is still true while it keeps that value.
pub fn share_epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Seals a sized memfd so that no mapping of it can ever lose pages under it.
fn seal(fd: i32) -> std::io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Where a pointer lives inside a shareable allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareInfo {
    /// File descriptor of the backing memfd (valid in this process).
    pub fd: i32,
    /// Byte offset of the pointer within the memfd.
    pub offset: u64,
    /// Bytes from the pointer to the end of its allocation.
    pub size: u64,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Allocates `size` zeroed bytes.
pub fn alloc(size: usize, kind: MemKind) -> AclResult<*mut c_void> {
    if size == 0 {
        return Err(fail(ACL_ERROR_INVALID_PARAM, "size must be greater than 0"));
    }
    let page = page_size();
    let map_len = size
        .checked_add(page - 1)
        .map(|s| s & !(page - 1))
        .ok_or_else(|| fail(ACL_ERROR_BAD_ALLOC, format!("size {size} too large")))?;
    let name = match kind {
        MemKind::Device => c"ascendcl-device",
        MemKind::Host => c"ascendcl-host",
    };
    // SAFETY: plain syscalls on values we own; every failure path releases what it acquired.
    let (ptr, fd) = unsafe {
        let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
        if fd >= 0 {
            if libc::ftruncate(fd, map_len as libc::off_t) != 0 {
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(fail(
                    ACL_ERROR_BAD_ALLOC,
                    format!("cannot size memfd to {map_len} bytes: {err}"),
                ));
            }
            if let Err(err) = seal(fd) {
                // Still shareable; peers that require the seals copy another way.
                log::debug!("cannot seal memfd: {err}");
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(fail(
                    ACL_ERROR_BAD_ALLOC,
                    format!("cannot map {map_len} bytes: {err}"),
                ));
            }
            (p, fd)
        } else {
            log::warn!(
                "memfd_create failed ({}); memory will not be shareable",
                std::io::Error::last_os_error()
            );
            let p = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                let err = std::io::Error::last_os_error();
                return Err(fail(
                    ACL_ERROR_BAD_ALLOC,
                    format!("cannot map {map_len} bytes: {err}"),
                ));
            }
            (p, -1)
        }
    };
    ALLOCATIONS.lock().insert(
        ptr.addr(),
        Allocation {
            size,
            map_len,
            fd,
            kind,
        },
    );
    EPOCH.fetch_add(1, Ordering::AcqRel);
    Ok(ptr)
}

/// Frees a block returned by [`alloc`] with the same `kind`.
// `ptr` is only handed to munmap after the registry proved it is one of our mappings.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn free(ptr: *mut c_void, kind: MemKind) -> AclResult {
    if ptr.is_null() {
        return Err(fail(ACL_ERROR_INVALID_PARAM, "pointer is NULL"));
    }
    let mut map = ALLOCATIONS.lock();
    match map.get(&ptr.addr()) {
        None => {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!("{ptr:p} is not a live allocation (double free or foreign pointer)"),
            ))
        }
        Some(a) if a.kind != kind => {
            return Err(fail(
                ACL_ERROR_INVALID_PARAM,
                format!(
                    "{ptr:p} was allocated as {:?} memory, freed as {kind:?}",
                    a.kind
                ),
            ))
        }
        Some(_) => {}
    }
    let a = map.remove(&ptr.addr()).expect("checked above");
    // Before the fd number can be reused: a cached lookup must not outlive its file.
    EPOCH.fetch_add(1, Ordering::AcqRel);
    drop(map);
    // SAFETY: the mapping and fd were created by `alloc` and just left the registry, so nothing
    // else will release them.
    unsafe {
        libc::munmap(ptr, a.map_len);
        if a.fd >= 0 {
            libc::close(a.fd);
        }
    }
    // And after the close: a peer that re-checked its mappings of this process's files on the
    // first change (while the file was still open) re-checks on this one and lets it go.
    EPOCH.fetch_add(1, Ordering::AcqRel);
    Ok(())
}

/// Finds the allocation containing `ptr`: (base, size, kind).
pub fn lookup(ptr: *const c_void) -> Option<(usize, usize, MemKind)> {
    let p = ptr.addr();
    let map = ALLOCATIONS.lock();
    let (&base, a) = map.range(..=p).next_back()?;
    (p < base + a.size).then_some((base, a.size, a.kind))
}

/// Share information for the allocation containing `ptr`.
pub fn share_info(ptr: *const c_void) -> AclResult<ShareInfo> {
    let p = ptr.addr();
    let map = ALLOCATIONS.lock();
    let found = map
        .range(..=p)
        .next_back()
        .filter(|(&base, a)| p < base + a.size);
    match found {
        None => Err(fail(
            ACL_ERROR_INVALID_PARAM,
            format!("{ptr:p} is not inside a live allocation"),
        )),
        Some((_, a)) if a.fd < 0 => Err(fail(
            ACL_ERROR_FEATURE_UNSUPPORTED,
            format!("{ptr:p} lives in non-shareable memory (memfd unavailable)"),
        )),
        Some((&base, a)) => Ok(ShareInfo {
            fd: a.fd,
            offset: (p - base) as u64,
            size: (base + a.size - p) as u64,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_lookup_share_free() {
        let p = alloc(1000, MemKind::Device).unwrap();
        assert_eq!(p.addr() % 64, 0);
        let inner = p.wrapping_byte_add(100);
        assert_eq!(lookup(inner), Some((p.addr(), 1000, MemKind::Device)));
        assert!(lookup(p.wrapping_byte_add(1000)).is_none());
        let info = share_info(inner).unwrap();
        assert!(info.fd >= 0);
        assert_eq!((info.offset, info.size), (100, 900));
        // SAFETY: fcntl on the live allocation's descriptor.
        let seals = unsafe { libc::fcntl(info.fd, libc::F_GET_SEALS) };
        assert_eq!(
            seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL),
            libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL
        );
        // SAFETY: as above; the seal makes the call fail, the file keeps its size.
        assert_ne!(unsafe { libc::ftruncate(info.fd, 0) }, 0);
        let epoch = share_epoch();
        assert_eq!(
            free(p, MemKind::Host).unwrap_err().code(),
            ACL_ERROR_INVALID_PARAM
        );
        free(p, MemKind::Device).unwrap();
        assert_ne!(share_epoch(), epoch, "a free changes the epoch");
        assert_eq!(
            free(p, MemKind::Device).unwrap_err().code(),
            ACL_ERROR_INVALID_PARAM
        );
        assert!(share_info(inner).is_err());
    }

    #[test]
    fn zero_size_is_rejected() {
        assert_eq!(
            alloc(0, MemKind::Host).unwrap_err().code(),
            ACL_ERROR_INVALID_PARAM
        );
    }
}
