//! Mappings of a peer process's shareable buffers ([`super::local_mem`]), so a single-copy
//! message is copied with `memcpy` at memory speed instead of `process_vm_readv`, which pins
//! the sender's pages on every call (~0.3-0.45 µs per 4 KiB page on the 2-core VM: 64 KiB took
//! 6.9 µs against 1.1 µs for `memcpy`).
//!
//! On a miss the peer's descriptor is opened through `/proc/<pid>/fd/<n>` (allowed exactly
//! when the kernel copy is: the caller may ptrace the peer), and mapped whole only when the
//! open file is the one the message names (device and inode: a descriptor number the peer
//! reused never passes for the file meant), when the file is sealed against shrinking (so the
//! peer can never truncate it under the mapping and fault this process) and when the message
//! lies inside it. Mappings are kept per peer, at most [`MAX_ENTRIES`] files and
//! [`MAX_BYTES`] bytes, the least recently used unmapped first. A freed and reallocated block
//! is a new file with a new inode, so a kept mapping never serves another block's data.
//!
//! A kept mapping would also keep a freed block's pages alive. Every descriptor carries the
//! peer's allocation count ([`ShareDesc::epoch`]); when it differs from the last one seen, the
//! next message first checks each mapped file against the descriptor number it came by
//! (`stat` of `/proc/<pid>/fd/<n>`, about a microsecond each) and unmaps those the peer no
//! longer holds. Messages between allocations pay one comparison; a freed block's pages live
//! on until the peer's next mapped message after the free (or until the link closes).
//!
//! A file that cannot be opened, is not sealed or is too large to keep is [`Refusal::Unusable`]
//! (the message is copied by the kernel instead; said once per peer); a descriptor naming
//! another file or a message outside its file is [`Refusal::Bad`], an error in the peer.

use std::ffi::CString;

use super::local_mem::ShareDesc;

/// Most files mapped per peer.
pub const MAX_ENTRIES: usize = 32;
/// Most bytes mapped per peer; a larger file is copied by the kernel.
pub const MAX_BYTES: usize = 1 << 30;
/// Files remembered as unusable per peer, so they are not opened again for every message.
const MAX_REFUSED: usize = 32;

/// Why a descriptor was not mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The file cannot or may not be mapped: copy another way.
    Unusable(String),
    /// The descriptor contradicts itself or the file: the peer is broken or hostile.
    Bad(String),
}

#[derive(Debug)]
struct Mapped {
    /// The peer's descriptor number for the file, as last named.
    fd: i32,
    dev: u64,
    ino: u64,
    addr: usize,
    len: usize,
    writable: bool,
    used: u64,
}

/// One peer's mapped files.
#[derive(Debug)]
pub struct PeerMem {
    pid: i32,
    entries: Vec<Mapped>,
    bytes: usize,
    clock: u64,
    refused: Vec<(u64, u64)>,
    told: bool,
    /// The peer's allocation count of the last descriptor seen.
    epoch: u32,
}

impl PeerMem {
    /// No mappings yet of process `pid`'s files.
    pub fn new(pid: i32) -> PeerMem {
        PeerMem {
            pid,
            entries: Vec::new(),
            bytes: 0,
            clock: 0,
            refused: Vec::new(),
            told: false,
            epoch: 0,
        }
    }

    /// The address of the `len` bytes that `d` names, mapped readable (and `write`able).
    pub fn resolve(&mut self, d: &ShareDesc, len: usize, write: bool) -> Result<*mut u8, Refusal> {
        self.clock += 1;
        if d.epoch != self.epoch {
            self.epoch = d.epoch;
            self.drop_freed();
        }
        let end = d
            .offset
            .checked_add(len as u64)
            .ok_or_else(|| Refusal::Bad(format!("offset {} + {len} bytes overflows", d.offset)))?;
        if let Some(m) = self
            .entries
            .iter_mut()
            .find(|m| m.dev == d.dev && m.ino == d.ino && (m.writable || !write))
        {
            if end > m.len as u64 {
                return Err(Refusal::Bad(format!(
                    "{len} bytes at offset {} lie outside the {}-byte file",
                    d.offset, m.len
                )));
            }
            m.used = self.clock;
            m.fd = d.fd;
            return Ok((m.addr + d.offset as usize) as *mut u8);
        }
        if self.refused.contains(&(d.dev, d.ino)) {
            return Err(Refusal::Unusable("refused before".into()));
        }
        let r = self.map(d, end, write);
        if let Err(Refusal::Unusable(_)) = &r {
            if self.refused.len() == MAX_REFUSED {
                self.refused.remove(0);
            }
            self.refused.push((d.dev, d.ino));
        }
        r
    }

    /// Whether the file `d` names is mapped (writable, when `write`), so that resolving it maps
    /// nothing and unmaps nothing.
    pub fn holds(&self, d: &ShareDesc, write: bool) -> bool {
        self.entries
            .iter()
            .any(|m| m.dev == d.dev && m.ino == d.ino && (m.writable || !write))
    }

    /// Whether this is the first refusal worth saying (once per peer).
    pub fn first_refusal(&mut self) -> bool {
        !std::mem::replace(&mut self.told, true)
    }

    fn map(&mut self, d: &ShareDesc, end: u64, write: bool) -> Result<*mut u8, Refusal> {
        if d.fd < 0 {
            return Err(Refusal::Bad(format!("descriptor number {}", d.fd)));
        }
        let path = CString::new(format!("/proc/{}/fd/{}", self.pid, d.fd)).expect("no NUL");
        let open = |flags| {
            // SAFETY: a NUL-terminated path; the descriptor is closed below.
            unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) }
        };
        let (fd, writable) = match open(libc::O_RDWR) {
            f if f >= 0 => (f, true),
            _ if write => {
                return Err(unusable(
                    "open for writing",
                    std::io::Error::last_os_error(),
                ))
            }
            _ => match open(libc::O_RDONLY) {
                f if f >= 0 => (f, false),
                _ => return Err(unusable("open", std::io::Error::last_os_error())),
            },
        };
        let r = self.map_open(fd, writable, d, end);
        // SAFETY: our own descriptor; a mapping outlives it.
        unsafe { libc::close(fd) };
        r
    }

    fn map_open(
        &mut self,
        fd: i32,
        writable: bool,
        d: &ShareDesc,
        end: u64,
    ) -> Result<*mut u8, Refusal> {
        // SAFETY: a plain C struct, valid when zeroed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our descriptor, into the local struct.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(unusable("fstat", std::io::Error::last_os_error()));
        }
        if (st.st_dev, st.st_ino) != (d.dev, d.ino) {
            return Err(Refusal::Bad(format!(
                "descriptor {} holds file {}:{}, the message names {}:{}",
                d.fd, st.st_dev, st.st_ino, d.dev, d.ino
            )));
        }
        // SAFETY: fcntl on our descriptor.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(Refusal::Unusable(format!(
                "file {}:{} is not sealed against shrinking",
                d.dev, d.ino
            )));
        }
        let len = usize::try_from(st.st_size).unwrap_or(usize::MAX);
        if end > len as u64 {
            return Err(Refusal::Bad(format!(
                "{} bytes at offset {} lie outside the {len}-byte file",
                end - d.offset,
                d.offset
            )));
        }
        if len > MAX_BYTES || len == 0 {
            return Err(Refusal::Unusable(format!(
                "a {len}-byte file is not kept mapped"
            )));
        }
        while !self.entries.is_empty()
            && (self.entries.len() >= MAX_ENTRIES || self.bytes + len > MAX_BYTES)
        {
            self.evict();
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a file whose size cannot shrink (sealed above).
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(unusable("mmap", std::io::Error::last_os_error()));
        }
        self.entries.push(Mapped {
            fd: d.fd,
            dev: d.dev,
            ino: d.ino,
            addr: p as usize,
            len,
            writable,
            used: self.clock,
        });
        self.bytes += len;
        Ok((p as usize + d.offset as usize) as *mut u8)
    }

    /// Unmaps the least recently used file.
    fn evict(&mut self) {
        if let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) {
            self.unmap(i);
        }
    }

    fn unmap(&mut self, i: usize) {
        let m = self.entries.swap_remove(i);
        self.bytes -= m.len;
        // SAFETY: our mapping; no pointer into it is kept past the call that resolved it.
        unsafe { libc::munmap(m.addr as *mut libc::c_void, m.len) };
    }

    /// Unmaps the files whose descriptor in the peer is closed or now holds another file: the
    /// peer freed those blocks. A file the peer also holds under another number is unmapped
    /// too and mapped again on its next message.
    #[cold]
    fn drop_freed(&mut self) {
        let mut i = 0;
        while i < self.entries.len() {
            let m = &self.entries[i];
            if held(self.pid, m.fd) == Some((m.dev, m.ino)) {
                i += 1;
            } else {
                self.unmap(i);
            }
        }
    }

    /// Files mapped now.
    pub fn mapped(&self) -> usize {
        self.entries.len()
    }
}

/// The identity (device, inode) of the file process `pid` holds as descriptor `fd`.
fn held(pid: i32, fd: i32) -> Option<(u64, u64)> {
    let path = CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL");
    // SAFETY: a plain C struct, valid when zeroed.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path; stat writes into the local struct.
    (unsafe { libc::stat(path.as_ptr(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

fn unusable(what: &str, e: std::io::Error) -> Refusal {
    Refusal::Unusable(format!("{what}: {e}"))
}

impl Drop for PeerMem {
    fn drop(&mut self) {
        while !self.entries.is_empty() {
            self.evict();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memfd of `len` bytes holding its index pattern, sealed against shrinking when `sealed`.
    fn file(len: usize, sealed: bool) -> (i32, ShareDesc) {
        // SAFETY: plain syscalls on a descriptor this test owns.
        unsafe {
            let fd = libc::memfd_create(c"peer-mem-test".as_ptr(), libc::MFD_ALLOW_SEALING);
            assert!(fd >= 0);
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            assert_eq!(libc::write(fd, data.as_ptr().cast(), len), len as isize);
            if sealed {
                assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK), 0);
            }
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(fd, &mut st), 0);
            let d = ShareDesc {
                fd,
                epoch: 0,
                dev: st.st_dev,
                ino: st.st_ino,
                offset: 0,
            };
            (fd, d)
        }
    }

    fn me() -> PeerMem {
        PeerMem::new(std::process::id() as i32)
    }

    #[test]
    fn maps_a_sealed_file_and_reads_the_bytes_named() {
        let (fd, d) = file(3 * 4096 + 10, true);
        let mut m = me();
        let at = ShareDesc { offset: 5000, ..d };
        let p = m.resolve(&at, 100, false).unwrap();
        // SAFETY: 100 bytes mapped at p.
        let got = unsafe { std::slice::from_raw_parts(p, 100) };
        let want: Vec<u8> = (5000..5100).map(|i: usize| (i * 7 + 3) as u8).collect();
        assert_eq!(got, &want[..]);
        // The second lookup is a hit, also for writing (the file opened read-write).
        assert_eq!(m.resolve(&at, 100, true).unwrap(), p);
        assert_eq!(m.mapped(), 1);
        // SAFETY: the test's descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn identity_and_bounds_are_checked() {
        let (fd, d) = file(8192, true);
        let (fd2, d2) = file(4096, true);
        let mut m = me();
        // The number names the second file, the identity the first.
        let wrong = ShareDesc { fd: fd2, ..d };
        assert!(matches!(m.resolve(&wrong, 10, false), Err(Refusal::Bad(_))));
        let past = ShareDesc { offset: 8000, ..d };
        assert!(matches!(m.resolve(&past, 193, false), Err(Refusal::Bad(_))));
        let huge = ShareDesc {
            offset: u64::MAX - 5,
            ..d
        };
        assert!(matches!(m.resolve(&huge, 10, false), Err(Refusal::Bad(_))));
        // Mapped now: bounds are checked on the cached entry too.
        m.resolve(&ShareDesc { offset: 8000, ..d }, 192, false)
            .unwrap();
        assert!(matches!(m.resolve(&past, 193, false), Err(Refusal::Bad(_))));
        assert!(m.resolve(&d2, 4096, false).is_ok());
        let neg = ShareDesc { fd: -1, ..d2 };
        // SAFETY: the test's descriptors.
        unsafe {
            libc::close(fd);
            libc::close(fd2);
        }
        // A cached file is still served by identity after its number closed.
        assert!(m.resolve(&neg, 10, false).is_ok());
    }

    #[test]
    fn an_unsealed_file_is_refused_and_remembered() {
        let (fd, d) = file(4096, false);
        let mut m = me();
        match m.resolve(&d, 10, false) {
            Err(Refusal::Unusable(why)) => assert!(why.contains("sealed"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(m.first_refusal());
        assert!(!m.first_refusal());
        assert!(matches!(
            m.resolve(&d, 10, false),
            Err(Refusal::Unusable(_))
        ));
        assert_eq!(m.mapped(), 0);
        // SAFETY: the test's descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn the_least_recently_used_file_is_unmapped_first() {
        let mut m = me();
        let files: Vec<_> = (0..MAX_ENTRIES + 2).map(|_| file(4096, true)).collect();
        for (_, d) in &files[..MAX_ENTRIES] {
            m.resolve(d, 10, false).unwrap();
        }
        // Touch the first so the second is the oldest.
        m.resolve(&files[0].1, 10, false).unwrap();
        m.resolve(&files[MAX_ENTRIES].1, 10, false).unwrap();
        assert_eq!(m.mapped(), MAX_ENTRIES);
        assert!(m.entries.iter().any(|e| e.ino == files[0].1.ino));
        assert!(!m.entries.iter().any(|e| e.ino == files[1].1.ino));
        assert_eq!(m.bytes, MAX_ENTRIES * 4096);
        // An evicted file maps again on its next message.
        m.resolve(&files[1].1, 10, false).unwrap();
        assert!(m.entries.iter().any(|e| e.ino == files[1].1.ino));
        for (fd, _) in files {
            // SAFETY: the test's descriptors.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn files_the_peer_freed_are_unmapped_when_its_epoch_moves() {
        let mut m = me();
        let (kept, dk) = file(4096, true);
        let (freed, df) = file(8192, true);
        let (reused, dr) = file(4096, true);
        m.resolve(&dk, 10, false).unwrap();
        m.resolve(&df, 10, false).unwrap();
        assert_eq!((m.mapped(), m.bytes), (2, 3 * 4096));
        // The "peer" frees a block: its number closes, then holds another file.
        // SAFETY: the test's descriptors.
        unsafe { libc::dup2(reused, freed) };
        // The same epoch: no check, the mapping stays.
        m.resolve(&dk, 10, false).unwrap();
        assert_eq!(m.mapped(), 2);
        let moved = ShareDesc { epoch: 1, ..dk };
        m.resolve(&moved, 10, false).unwrap();
        assert_eq!((m.mapped(), m.bytes), (1, 4096));
        assert!(m.entries.iter().all(|e| e.ino == dk.ino));
        // A closed number counts as freed too.
        m.resolve(&ShareDesc { epoch: 1, ..dr }, 10, false).unwrap();
        assert_eq!(m.mapped(), 2);
        // SAFETY: the test's descriptors.
        unsafe {
            libc::close(reused);
            libc::close(freed);
        }
        m.resolve(&ShareDesc { epoch: 2, ..dk }, 10, false).unwrap();
        assert_eq!((m.mapped(), m.bytes), (1, 4096));
        // SAFETY: the test's descriptor.
        unsafe { libc::close(kept) };
    }

    /// Before the epoch check runs, a kept mapping of a freed block only holds pages: the freed
    /// file keeps its inode while mapped, so a new block is never mistaken for it, even under
    /// the same descriptor number.
    #[test]
    fn a_kept_mapping_of_a_freed_file_never_serves_another_block() {
        let mut m = me();
        let (old, dold) = file(4096, true);
        m.resolve(&dold, 16, false).unwrap();
        let (new, dnew) = file(4096, true);
        // The "peer" frees the block and allocates another under the same number, with no
        // message in between: the epoch the receiver saw does not move.
        // SAFETY: the test's descriptors.
        unsafe {
            assert_eq!(libc::pwrite(new, [0xa5u8; 16].as_ptr().cast(), 16, 0), 16);
            libc::dup2(new, old);
            libc::close(new);
        }
        assert_ne!(dnew.ino, dold.ino);
        let p = m
            .resolve(&ShareDesc { fd: old, ..dnew }, 16, false)
            .unwrap();
        // SAFETY: 16 bytes mapped at p.
        assert_eq!(unsafe { std::slice::from_raw_parts(p, 16) }, &[0xa5u8; 16]);
        assert_eq!(m.mapped(), 2);
        // SAFETY: the test's descriptor.
        unsafe { libc::close(old) };
    }
}
