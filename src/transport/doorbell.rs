//! A per-endpoint wake-up signal: an event counter that a waiter polls for a while (see
//! [`Backoff`]), then sleeps on — on a futex when only memory peers can wake it, or in `poll` on
//! an eventfd together with its sockets when it also waits for the network.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::backoff::{publish_cpu, Backoff, Wait, NO_CPU};
use super::futex;
use crate::base::error::{Error, ErrorKind, Result};

const AWAKE: u32 = 0;
const FUTEX_SLEEP: u32 = 1;
const POLL_SLEEP: u32 = 2;

/// Wake-up signal of one endpoint.
#[derive(Debug)]
pub struct Doorbell {
    seq: AtomicU32,
    sleeping: AtomicU32,
    fd: OwnedFd,
    backoff: Backoff,
    /// The CPU the owner last waited on, for peers deciding whether to yield to it.
    cpu: AtomicU32,
}

/// A doorbell wait: the event count, the sockets, then whatever the caller also waits for.
struct BellWait<'a, W: Wait> {
    seq: &'a AtomicU32,
    seen: u32,
    fds: &'a mut [libc::pollfd],
    also: &'a mut W,
}

impl<W: Wait> Wait for BellWait<'_, W> {
    fn ready(&mut self) -> bool {
        self.seq.load(Ordering::Acquire) != self.seen || self.also.ready()
    }

    fn slow(&mut self) -> bool {
        let fds = &mut *self.fds;
        // SAFETY: fds is a valid slice of pollfd; a zero timeout never blocks.
        let polled = !fds.is_empty()
            && unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) } > 0;
        polled || self.also.slow()
    }

    fn here(&mut self, cpu: u32) -> bool {
        self.also.here(cpu)
    }

    fn crowd(&mut self, cpu: u32, share: u32) -> bool {
        self.also.crowd(cpu, share)
    }
}

impl Doorbell {
    /// Whether its owner's host runs more ranks than it has cores (waits then yield, not spin).
    pub fn crowded(&self) -> bool {
        self.backoff.crowded()
    }

    /// Creates a doorbell backed by a futex word and a non-blocking eventfd, for an endpoint
    /// whose process runs `local_ranks` ranks (which decides how long waiters spin).
    pub fn new(local_ranks: usize) -> Result<Doorbell> {
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
            backoff: Backoff::for_host(local_ranks),
            cpu: AtomicU32::new(NO_CPU),
        })
    }

    /// Current event count; a waiter compares it before and after scanning its work.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst) as u64
    }

    /// The CPU the owner last waited on ([`NO_CPU`] before its first wait).
    pub fn cpu(&self) -> u32 {
        self.cpu.load(Ordering::Relaxed)
    }

    /// Records the CPU the owner runs on.
    pub fn set_cpu(&self, cpu: u32) {
        publish_cpu(&self.cpu, cpu);
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

    /// Waits until the event count differs from `seen` or `also` is ready, for at most
    /// `timeout_ms`: polls them (and `extra`) under the backoff policy, then sleeps — on the
    /// futex when `extra` is empty, else in `poll` with `extra` (`also` is not checked while
    /// asleep). On return the `revents` of `extra` are filled in.
    pub fn wait(
        &self,
        seen: u64,
        extra: &mut [libc::pollfd],
        timeout_ms: i32,
        also: &mut impl Wait,
    ) {
        let seen = seen as u32;
        for f in extra.iter_mut() {
            f.revents = 0;
        }
        let limit = Duration::from_millis(timeout_ms.max(1) as u64);
        let mut w = BellWait {
            seq: &self.seq,
            seen,
            fds: extra,
            also,
        };
        let Some(left) = self.backoff.run(limit, &mut w) else {
            return;
        };
        let extra = w.fds;
        if extra.is_empty() {
            self.sleeping.store(FUTEX_SLEEP, Ordering::SeqCst);
            if self.seq.load(Ordering::SeqCst) == seen && !left.is_zero() {
                let t0 = Instant::now();
                futex::wait(&self.seq, seen, left, false);
                self.backoff
                    .slept(t0.elapsed(), self.seq.load(Ordering::SeqCst) != seen);
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
            let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: fds is a valid slice of pollfd.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
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
    use crate::transport::backoff::Until;
    use std::sync::Arc;

    /// How long the sleeper would sleep without a wake-up: far beyond any scheduling delay on a
    /// loaded machine, so a wait that ends well before it was ended by the ring.
    const SLEEP_MS: i32 = 60_000;

    /// One waiter goes to sleep on the bell (futex, or poll with a pipe); once it is asleep
    /// another thread rings. The wait must end because of the ring, long before its timeout:
    /// a lost wake-up shows as a wait that lasted its whole timeout.
    fn wakes(poll_mode: bool) {
        let bell = Arc::new(Doorbell::new(1).unwrap());
        let seen = bell.seq();
        let (r, w) = {
            let mut fds = [0i32; 2];
            // SAFETY: pipe fills two descriptors.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            (fds[0], fds[1])
        };
        let b2 = bell.clone();
        let sleeper = std::thread::spawn(move || {
            let mut extra = [libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            }];
            let slice: &mut [libc::pollfd] = if poll_mode { &mut extra } else { &mut [] };
            let t = Instant::now();
            b2.wait(seen, slice, SLEEP_MS, &mut Until(|| false));
            t.elapsed()
        });
        // Ring only once the sleeper has published that it sleeps (after its backoff phase).
        let asleep = if poll_mode { POLL_SLEEP } else { FUTEX_SLEEP };
        while bell.sleeping.load(Ordering::SeqCst) != asleep {
            std::thread::yield_now();
        }
        bell.ring();
        let waited = sleeper.join().unwrap();
        assert_eq!(bell.seq(), seen + 1);
        assert!(
            waited < Duration::from_millis(SLEEP_MS as u64 / 2),
            "the ring did not wake the sleeper: it slept {waited:?}"
        );
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
