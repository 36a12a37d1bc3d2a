//! Which of this process's buffers another process can map: memory of the host ACL runtime
//! (`aclrtMalloc`, `aclrtMallocHost`), each block of which is a `memfd` of its own.
//!
//! The runtime's extension `aclrtHostMemGetShareInfo` names the file and offset behind a
//! pointer; a single-copy send puts that, with the file's identity, in its slot
//! ([`ShareDesc`]), and the receiver maps the file and copies with `memcpy` instead of
//! `process_vm_readv` (see [`super::peer_mem`]). The entry points are found with `dlsym` among
//! the symbols already loaded (a program linked with `-lascendcl`, or a `libascendcl.so` loaded
//! privately, found with `dlopen(RTLD_NOLOAD)`); programs that link the runtime statically hand
//! them over with [`register`]. Without them, or for plain host memory, sends take the kernel
//! copy as before.
//!
//! Answers are cached per link ([`LocalMem`]) while the runtime's allocation count
//! (`aclrtHostMemShareEpoch`) is unchanged, so the hot path pays neither the runtime's registry
//! lock nor an `fstat`. A runtime without that count is asked on every send.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

/// `aclrtHostMemGetShareInfo(ptr, &fd, &offset, &size)`: 0 when `ptr` lies in a shareable
/// allocation.
pub type ShareInfoFn =
    unsafe extern "C" fn(ptr: *const c_void, fd: *mut i32, offset: *mut u64, size: *mut u64) -> i32;
/// `aclrtHostMemShareEpoch()`: changes with every allocation and free.
pub type ShareEpochFn = unsafe extern "C" fn() -> u64;

/// The runtime's share entry points.
#[derive(Clone, Copy, Debug)]
pub struct ShareFns {
    /// `aclrtHostMemGetShareInfo`.
    pub info: ShareInfoFn,
    /// `aclrtHostMemShareEpoch`, when the runtime has it (answers are then cached).
    pub epoch: Option<ShareEpochFn>,
}

const INFO: &CStr = c"aclrtHostMemGetShareInfo";
const EPOCH: &CStr = c"aclrtHostMemShareEpoch";
const LIB_NAMES: [&CStr; 2] = [c"libascendcl.so", c"libascendcl.so.1"];

static FOUND: OnceLock<ShareFns> = OnceLock::new();

/// Uses `fns` from now on (first registration wins; later ones return false). For programs whose
/// runtime symbols `dlsym` cannot see (the runtime linked statically into a Rust program).
pub fn register(fns: ShareFns) -> bool {
    FOUND.set(fns).is_ok()
}

/// The runtime's share entry points, when loaded. A miss is looked up again by the next caller
/// (links are set up once per communicator, so that costs a few `dlsym`s per set-up).
pub fn find() -> Option<ShareFns> {
    if let Some(f) = FOUND.get() {
        return Some(*f);
    }
    let in_lib = |name: &CStr| -> Option<*mut c_void> {
        sym(libc::RTLD_DEFAULT, name).or_else(|| {
            LIB_NAMES.iter().find_map(|lib| {
                // SAFETY: RTLD_NOLOAD loads nothing; the handle's reference is kept on purpose
                // so the functions stay mapped.
                let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
                (!h.is_null()).then(|| sym(h, name)).flatten()
            })
        })
    };
    let info = in_lib(INFO)?;
    // SAFETY: the runtime's `aclrtHostMemGetShareInfo` has the C signature
    // `aclError (const void *, int32_t *, uint64_t *, uint64_t *)`, matching `ShareInfoFn`.
    let info = unsafe { std::mem::transmute::<*mut c_void, ShareInfoFn>(info) };
    // SAFETY: `aclrtHostMemShareEpoch` is `uint64_t (void)`, matching `ShareEpochFn`.
    let epoch =
        in_lib(EPOCH).map(|p| unsafe { std::mem::transmute::<*mut c_void, ShareEpochFn>(p) });
    Some(*FOUND.get_or_init(|| ShareFns { info, epoch }))
}

fn sym(handle: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; a valid handle or RTLD_DEFAULT is passed.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Where a buffer lives, as a peer process finds it: the descriptor number in the owner
/// process, the file's identity (so a reused number is never mistaken for the file meant) and
/// the buffer's byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareDesc {
    /// Descriptor number in the owner (`/proc/<pid>/fd/<fd>`); negative: none.
    pub fd: i32,
    /// The owner's allocation count when it looked the buffer up (its low 32 bits; 0 from a
    /// runtime without the count): a receiver that sees it move re-checks which of its mapped
    /// files the owner still holds ([`super::peer_mem`]).
    pub epoch: u32,
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
    /// Byte offset of the buffer's first byte in the file.
    pub offset: u64,
}

impl ShareDesc {
    /// Bytes [`ShareDesc::write`] stores.
    pub const BYTES: usize = 32;
    /// The descriptor that names no file.
    pub const NONE: ShareDesc = ShareDesc {
        fd: -1,
        epoch: 0,
        dev: 0,
        ino: 0,
        offset: 0,
    };

    /// Stores the descriptor at `at`; the number and the epoch share the first word.
    ///
    /// # Safety
    /// `at` must be 8-byte aligned and valid for writes of [`ShareDesc::BYTES`] bytes.
    pub unsafe fn write(self, at: *mut u8) {
        let first = (self.epoch as u64) << 32 | self.fd as u32 as u64;
        // SAFETY: the caller's contract; every field is aligned inside the 32 bytes.
        unsafe {
            std::ptr::write_volatile(at as *mut u64, first);
            std::ptr::write_volatile(at.add(8) as *mut u64, self.dev);
            std::ptr::write_volatile(at.add(16) as *mut u64, self.ino);
            std::ptr::write_volatile(at.add(24) as *mut u64, self.offset);
        }
    }

    /// Reads a descriptor stored by [`ShareDesc::write`].
    ///
    /// # Safety
    /// `at` must be 8-byte aligned and valid for reads of [`ShareDesc::BYTES`] bytes.
    pub unsafe fn read(at: *const u8) -> ShareDesc {
        // SAFETY: the caller's contract. Volatile: the memory may be shared with a peer.
        unsafe {
            let first = std::ptr::read_volatile(at as *const u64);
            ShareDesc {
                fd: first as u32 as i32,
                epoch: (first >> 32) as u32,
                dev: std::ptr::read_volatile(at.add(8) as *const u64),
                ino: std::ptr::read_volatile(at.add(16) as *const u64),
                offset: std::ptr::read_volatile(at.add(24) as *const u64),
            }
        }
    }
}

/// Largest number of lookups a [`LocalMem`] keeps.
const MAX_ENTRIES: usize = 32;

/// A cached answer: `[start, end)` of this address space lies in `file` (descriptor, device,
/// inode, offset of `start`), or in no shareable allocation (`None`).
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: usize,
    end: usize,
    file: Option<ShareDesc>,
}

/// Lookups of this process's buffers, cached while the runtime's allocation count holds.
#[derive(Debug)]
pub struct LocalMem {
    fns: Option<ShareFns>,
    epoch: u64,
    entries: Vec<Entry>,
    next: usize,
}

impl LocalMem {
    /// A cache asking `fns` (none: a runtime [`register`]ed later, else every buffer is
    /// unshareable).
    pub fn new(fns: Option<ShareFns>) -> LocalMem {
        LocalMem {
            fns,
            epoch: 0,
            entries: Vec::new(),
            next: 0,
        }
    }

    /// Where the `len` bytes at `ptr` live, when all of them lie in one shareable allocation.
    pub fn find(&mut self, ptr: usize, len: usize) -> Option<ShareDesc> {
        if self.fns.is_none() {
            // A runtime registered after this link was set up (one atomic load).
            self.fns = FOUND.get().copied();
        }
        let fns = self.fns?;
        let end = ptr.checked_add(len)?;
        // SAFETY: the runtime's entry point takes no arguments.
        let epoch = fns.epoch.map(|f| unsafe { f() });
        if epoch == Some(0) {
            // Nothing was ever allocated (perhaps the runtime is not even initialised).
            return None;
        }
        if epoch != Some(self.epoch) {
            self.entries.clear();
            self.epoch = epoch.unwrap_or(0);
        }
        if let Some(e) = self.entries.iter().find(|e| e.start <= ptr && end <= e.end) {
            return e.file.map(|f| ShareDesc {
                offset: f.offset + (ptr - e.start) as u64,
                ..f
            });
        }
        let (file, e_end) = match ask(fns, ptr) {
            Some((f, size)) => (
                Some(ShareDesc {
                    epoch: self.epoch as u32,
                    ..f
                }),
                ptr.saturating_add(size),
            ),
            None => (None, end),
        };
        if epoch.is_some() {
            let e = Entry {
                start: ptr,
                end: e_end,
                file,
            };
            if self.entries.len() < MAX_ENTRIES {
                self.entries.push(e);
            } else {
                self.entries[self.next] = e;
                self.next = (self.next + 1) % MAX_ENTRIES;
            }
        }
        file.filter(|_| end <= e_end)
    }
}

/// The runtime's answer for `ptr` with the file's identity: its descriptor and the bytes from
/// `ptr` to the end of its allocation.
fn ask(fns: ShareFns, ptr: usize) -> Option<(ShareDesc, usize)> {
    let (mut fd, mut offset, mut size) = (-1i32, 0u64, 0u64);
    // SAFETY: the runtime reads nothing at `ptr` (it only looks the address up) and writes the
    // three out-parameters.
    let rc = unsafe { (fns.info)(ptr as *const c_void, &mut fd, &mut offset, &mut size) };
    if rc != 0 || fd < 0 {
        return None;
    }
    // SAFETY: a plain C struct, valid when zeroed.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the local struct; a descriptor that is not open fails cleanly.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    let desc = ShareDesc {
        fd,
        epoch: 0,
        dev: st.st_dev,
        ino: st.st_ino,
        offset,
    };
    Some((desc, usize::try_from(size).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A test "runtime": one memfd of 64 KiB at a fixed buffer, and a call counter.
    struct Fake {
        fd: i32,
        base: usize,
    }
    static FAKE: OnceLock<Fake> = OnceLock::new();
    static CALLS: AtomicU64 = AtomicU64::new(0);
    static FAKE_EPOCH: AtomicU64 = AtomicU64::new(1);

    unsafe extern "C" fn info(
        p: *const c_void,
        fd: *mut i32,
        off: *mut u64,
        size: *mut u64,
    ) -> i32 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        let f = FAKE.get().unwrap();
        let p = p as usize;
        if p < f.base || p >= f.base + 65536 {
            return 100000;
        }
        // SAFETY: the caller passes valid out-parameters.
        unsafe {
            *fd = f.fd;
            *off = (p - f.base) as u64;
            *size = (f.base + 65536 - p) as u64;
        }
        0
    }

    unsafe extern "C" fn epoch() -> u64 {
        FAKE_EPOCH.load(Ordering::Relaxed)
    }

    #[test]
    fn descriptors_round_trip_and_lookups_are_cached_until_the_epoch_moves() {
        let mut buf = [0u64; 4];
        let d = ShareDesc {
            fd: 7,
            epoch: u32::MAX - 1,
            dev: 1 << 40,
            ino: 99,
            offset: 4096,
        };
        // SAFETY: 32 aligned bytes.
        unsafe { d.write(buf.as_mut_ptr().cast()) };
        // SAFETY: as above.
        assert_eq!(unsafe { ShareDesc::read(buf.as_ptr().cast()) }, d);
        // SAFETY: as above.
        unsafe { ShareDesc::NONE.write(buf.as_mut_ptr().cast()) };
        // SAFETY: as above.
        assert_eq!(unsafe { ShareDesc::read(buf.as_ptr().cast()) }.fd, -1);

        // SAFETY: plain syscall; the fd lives for the whole test binary.
        let fd = unsafe { libc::memfd_create(c"local-mem-test".as_ptr(), 0) };
        assert!(fd >= 0);
        FAKE.get_or_init(|| Fake { fd, base: 1 << 30 });
        // SAFETY: a plain C struct, valid when zeroed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into the local struct.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        let mut m = LocalMem::new(Some(ShareFns {
            info,
            epoch: Some(epoch),
        }));
        let base = 1usize << 30;
        let got = m.find(base + 100, 1000).unwrap();
        assert_eq!((got.fd, got.dev, got.ino), (fd, st.st_dev, st.st_ino));
        assert_eq!((got.offset, got.epoch), (100, 1));
        let calls = CALLS.load(Ordering::Relaxed);
        // Inside the cached range: no call.
        assert_eq!(m.find(base + 5000, 60000).unwrap().offset, 5000);
        assert_eq!(CALLS.load(Ordering::Relaxed), calls);
        // Past the allocation's end: not shareable as a whole.
        assert!(m.find(base + 65000, 1000).is_none());
        // Plain memory: asked once, then cached as unshareable.
        assert!(m.find(4096, 100).is_none());
        let calls = CALLS.load(Ordering::Relaxed);
        assert!(m.find(4096, 100).is_none());
        assert_eq!(CALLS.load(Ordering::Relaxed), calls);
        // An allocation or free elsewhere: asked again.
        FAKE_EPOCH.fetch_add(1, Ordering::Relaxed);
        let got = m.find(base + 5000, 10).unwrap();
        assert_eq!((got.offset, got.epoch), (5000, 2));
        assert_eq!(CALLS.load(Ordering::Relaxed), calls + 1);
        // Without the epoch entry point nothing is cached.
        let mut m = LocalMem::new(Some(ShareFns { info, epoch: None }));
        m.find(base, 10).unwrap();
        m.find(base, 10).unwrap();
        assert_eq!(CALLS.load(Ordering::Relaxed), calls + 3);
        // Without a runtime nothing is shareable.
        assert!(LocalMem::new(None).find(base, 10).is_none());
    }
}
