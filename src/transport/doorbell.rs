//! A per-endpoint wake-up signal: an event counter that a waiter spins on briefly, then sleeps
//! on — on a futex when only memory peers can wake it, or in `poll` on an eventfd together with
//! its sockets when it also waits for the network.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::futex;
use crate::base::error::{Error, ErrorKind, Result};

const AWAKE: u32 = 0;
const FUTEX_SLEEP: u32 = 1;
const POLL_SLEEP: u32 = 2;
/// How long a waiter spins (with periodic yields) before it sleeps.
const SPIN_BUDGET: Duration = Duration::from_micros(50);
/// When ranks outnumber cores a waiter yields a few times and then sleeps: a sleeping rank
/// leaves its core to the peers it is waiting for, while a spinning one keeps competing.
const YIELDS_OVERSUBSCRIBED: u32 = 4;

/// Wake-up signal of one endpoint.
#[derive(Debug)]
pub struct Doorbell {
    seq: AtomicU32,
    sleeping: AtomicU32,
    fd: OwnedFd,
    oversubscribed: bool,
}

impl Doorbell {
    /// Creates a doorbell backed by a futex word and a non-blocking eventfd, for an endpoint
    /// whose process runs `local_ranks` ranks (which decides how long waiters spin).
    pub fn new(local_ranks: usize) -> Result<Doorbell> {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        // SAFETY: plain syscall; the returned fd is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::new(
                ErrorKind::Syscall,
                format!("eventfd: {}", std::io::Error::last_os_error()),
            ));
        }
        Ok(Doorbell {
            seq: AtomicU32::new(0),
            sleeping: AtomicU32::new(AWAKE),
            // SAFETY: fd is a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            oversubscribed: local_ranks > cores,
        })
    }

    /// Current event count; a waiter compares it before and after scanning its work.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst) as u64
    }

    /// Signals the owner: something it may be waiting for has happened.
    pub fn ring(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        // The waiter publishes `sleeping` before re-reading `seq`; with both sides SeqCst one of
        // them always sees the other, so a wake-up is never lost.
        match self.sleeping.load(Ordering::SeqCst) {
            FUTEX_SLEEP => futex::wake(&self.seq, false),
            POLL_SLEEP => {
                let one: u64 = 1;
                // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
                unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            }
            _ => {}
        }
    }

    /// Waits until the event count differs from `seen`, for at most `timeout_ms`: spins briefly,
    /// yields the core a few times (ranks may outnumber cores), then sleeps — on the futex when
    /// `extra` is empty, else in `poll` with `extra` (whose `revents` are filled in).
    pub fn wait(&self, seen: u64, extra: &mut [libc::pollfd], timeout_ms: i32) {
        let seen = seen as u32;
        for f in extra.iter_mut() {
            f.revents = 0;
        }
        // Waking a sleeper costs a syscall on each side and, on virtual machines, tens of
        // microseconds: with a core to itself a waiter spins for a short budget first.
        if self.oversubscribed {
            for _ in 0..YIELDS_OVERSUBSCRIBED {
                std::thread::yield_now();
                if self.seq.load(Ordering::Acquire) != seen {
                    return;
                }
            }
        } else {
            let start = Instant::now();
            let mut round = 0u32;
            loop {
                if self.seq.load(Ordering::Acquire) != seen {
                    return;
                }
                round += 1;
                // A rare yield matters only if something else wants the core.
                if round.is_multiple_of(32) {
                    std::thread::yield_now();
                    if start.elapsed() >= SPIN_BUDGET {
                        break;
                    }
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        if extra.is_empty() {
            self.sleeping.store(FUTEX_SLEEP, Ordering::SeqCst);
            if self.seq.load(Ordering::SeqCst) == seen {
                let t = Duration::from_millis(timeout_ms.max(1) as u64);
                futex::wait(&self.seq, seen, t, false);
            }
            self.sleeping.store(AWAKE, Ordering::SeqCst);
            return;
        }
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(extra.len() + 1);
        fds.push(libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend_from_slice(extra);
        self.sleeping.store(POLL_SLEEP, Ordering::SeqCst);
        if self.seq.load(Ordering::SeqCst) == seen {
            // SAFETY: fds is a valid slice of pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        }
        self.sleeping.store(AWAKE, Ordering::SeqCst);
        let mut buf: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; EAGAIN when empty is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) };
        extra.copy_from_slice(&fds[1..]);
    }

    /// The eventfd, for diagnostics.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn wakes(poll_mode: bool) {
        let bell = Arc::new(Doorbell::new(1).unwrap());
        let seen = bell.seq();
        let b2 = bell.clone();
        let t = std::thread::spawn(move || b2.ring());
        // A lost wake-up shows as this loop never ending (the harness times out); a wait that
        // returned without a ring is caught by the final assertion.
        let (r, w) = {
            let mut fds = [0i32; 2];
            // SAFETY: pipe fills two descriptors.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            (fds[0], fds[1])
        };
        loop {
            let mut extra = [libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            }];
            let slice: &mut [libc::pollfd] = if poll_mode { &mut extra } else { &mut [] };
            bell.wait(seen, slice, 10_000);
            if bell.seq() != seen {
                break;
            }
        }
        t.join().unwrap();
        assert_eq!(bell.seq(), seen + 1);
        // SAFETY: closing the pipe we opened.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }

    #[test]
    fn ring_wakes_futex_sleeper() {
        wakes(false);
    }

    #[test]
    fn ring_wakes_poll_sleeper() {
        wakes(true);
    }
}
