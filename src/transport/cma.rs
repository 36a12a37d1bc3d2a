//! Cross-memory attach: copying straight out of another process's address space with
//! `process_vm_readv` (or into it with `process_vm_writev`), so a large message between
//! processes costs one copy instead of two, and sender and receiver can share that copy.
//!
//! The kernel allows it when the caller may ptrace the target (same user and no Yama
//! restriction, or privileges). Whether it works is probed once per peer at connect time, and
//! the shared-memory link falls back to staging copies when it does not.

use std::io;

/// Copies `len` bytes at `remote` in process `pid` to `local`, looping over partial reads.
///
/// # Safety
/// `local` must be valid for writes of `len` bytes. `remote` is checked by the kernel (a bad
/// address yields `EFAULT`, never undefined behaviour in this process).
pub unsafe fn read_from(pid: i32, remote: usize, local: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller's contract; the local side is written.
    unsafe { transfer(pid, local, remote, len, Way::Read) }
}

/// Copies `len` bytes at `local` to `remote` in process `pid`, looping over partial writes.
///
/// # Safety
/// `local` must be valid for reads of `len` bytes, and the `len` bytes at `remote` must be
/// memory that process `pid` lets this process write (the kernel checks that they are mapped
/// and writable; it cannot check that `pid` expects them written).
pub unsafe fn write_to(pid: i32, local: *const u8, remote: usize, len: usize) -> io::Result<()> {
    // SAFETY: the caller's contract; the local side is only read.
    unsafe { transfer(pid, local.cast_mut(), remote, len, Way::Write) }
}

/// Which way [`transfer`] moves the bytes.
#[derive(Clone, Copy)]
enum Way {
    Read,
    Write,
}

/// Moves `len` bytes between `local` and `remote` in process `pid`, looping over partial
/// transfers and interrupted calls.
///
/// # Safety
/// As [`read_from`] for [`Way::Read`] and [`write_to`] for [`Way::Write`].
unsafe fn transfer(
    pid: i32,
    local: *mut u8,
    remote: usize,
    len: usize,
    way: Way,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            // SAFETY: done < len, inside the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec lies in the caller's buffer (writable for a read); the kernel
        // checks the remote one.
        let n = unsafe {
            match way {
                Way::Read => libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0),
                Way::Write => libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0),
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            let call = match way {
                Way::Read => "process_vm_readv",
                Way::Write => "process_vm_writev",
            };
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{call} moved no bytes"),
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether this process may read 8 bytes at `remote` in `pid` and finds `expect` there.
pub fn probe(pid: i32, remote: usize, expect: u64) -> bool {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into a local u64.
    let r = unsafe { read_from(pid, remote, (&mut v as *mut u64).cast(), 8) };
    r.is_ok() && v == expect
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_rejects_bad_address() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let pid = std::process::id() as i32;
        // SAFETY: dst is valid for src.len() bytes.
        unsafe { read_from(pid, src.as_ptr() as usize, dst.as_mut_ptr(), src.len()) }.unwrap();
        assert_eq!(src, dst);
        let word = 0x1234_5678_9abc_def0u64;
        assert!(probe(pid, &word as *const u64 as usize, word));
        assert!(!probe(pid, &word as *const u64 as usize, word ^ 1));
        let mut back = vec![0u8; src.len()];
        // SAFETY: src is valid for reads of its length; back is this process's own buffer.
        unsafe { write_to(pid, src.as_ptr(), back.as_mut_ptr() as usize, src.len()) }.unwrap();
        assert_eq!(src, back);
        // Page zero is never mapped: the kernel reports EFAULT.
        let mut b = [0u8; 8];
        // SAFETY: b is valid for 8 bytes.
        assert!(unsafe { read_from(pid, 8, b.as_mut_ptr(), 8) }.is_err());
        // SAFETY: b is valid for 8 bytes; the remote address is unmapped.
        assert!(unsafe { write_to(pid, b.as_ptr(), 8, 8) }.is_err());
    }
}
