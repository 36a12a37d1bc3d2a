//! Futex wait and wake on a 32-bit word: the cheapest way for a thread to sleep until another
//! thread (or, for `shared`, another process mapping the same memory) changes the word.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

fn op(base: libc::c_int, shared: bool) -> libc::c_int {
    if shared {
        base
    } else {
        base | libc::FUTEX_PRIVATE_FLAG
    }
}

/// Sleeps while `*word == seen`, for at most `timeout`; returns on change, wake, signal or
/// timeout (callers re-check their condition).
pub fn wait(word: &AtomicU32, seen: u32, timeout: Duration, shared: bool) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a futex wait on a valid, aligned word with a valid timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op(libc::FUTEX_WAIT, shared),
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Wakes every waiter on `word`.
pub fn wake(word: &AtomicU32, shared: bool) {
    // SAFETY: a futex wake on a valid, aligned word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op(libc::FUTEX_WAKE, shared),
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}
