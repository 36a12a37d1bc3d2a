//! Whether a shared-memory link writes staged messages into its ring with streaming stores
//! (`base::stream`), chosen per link from the cache-line round trip between the two processes,
//! measured once at link set-up (`HCCL_SHM_STREAM` overrides it).
//!
//! A ring line the sender rewrites was last read by the receiver, so a plain store first takes
//! the line back from the receiver's cache, and the receiver then fetches it from the sender's.
//! When both cores share a last-level cache that costs little: on a 2-vCPU VM the round trip of
//! one line measured 0.07-0.11 µs and plain staged Reduce between two processes ran at
//! 15-29 GB/s (32 KiB-1 MiB). When they do not (the host placed the two vCPUs on different
//! core complexes: round trip 0.38-0.43 µs) every line crosses the fabric twice per pass of the
//! ring, and plain staged Reduce fell to 0.3-1.2 GB/s. Streaming stores skip the round trip but
//! make the receiver read from memory: 8-17 GB/s in either placement, which is why they are
//! the choice when nothing was measured.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::base::error::{Error, ErrorKind, Result};

/// Round trips above this mean the two cores share no cache: stream. Between the two
/// placements' measured ranges (0.07-0.11 µs and 0.38-0.43 µs).
pub const STREAM_ABOVE: Duration = Duration::from_nanos(250);
/// Round trips the set-up measurement times (after one untimed one); their median counts.
/// Not the fastest: with the cores apart the fastest of 64 measured 0.22-0.23 µs in two of
/// eight launches whose median was 0.36-0.39 µs (the same as `bench/shm_pingpong.c` before and
/// after), while a trip the scheduler interrupted only moves the upper half.
pub const TRIPS: u32 = 64;
/// The measurement stops early after this long (a crowded host, where each trip may wait for
/// a time slice).
pub const MEASURE_MAX: Duration = Duration::from_millis(2);
/// Polls of the line before each further poll yields the core (the peer may need it).
const SPINS: u64 = 1000;
/// Written by the pinging side when it is done, after the result.
const STOP: u64 = u64::MAX;

/// Whether the link streams staged messages: as `setting` (`HCCL_SHM_STREAM`) says, else by the
/// measured `round_trip` (`None`: not measured, stream: safe in either placement).
pub fn streams(setting: Option<bool>, round_trip: Option<Duration>) -> bool {
    match (setting, round_trip) {
        (Some(s), _) => s,
        (None, Some(rtt)) => rtt > STREAM_ABOVE,
        (None, None) => true,
    }
}

/// Measures the round trip of one cache line between this process and a peer, through two
/// words of one line both map: `word` carries the ping (odd values, written by the `pinger`)
/// and the pong (the next even value), `result` the pinger's measurement (ns) for the other
/// side. Both sides return the same value: the median of [`TRIPS`] trips, or of those done
/// within [`MEASURE_MAX`]. Waits for the peer no later than `deadline`. Both words must start
/// at 0 and are left at `u64::MAX` and the result.
pub fn measure_round_trip(
    word: &AtomicU64,
    result: &AtomicU64,
    pinger: bool,
    peer: u32,
    deadline: Instant,
) -> Result<Duration> {
    let wait = |pred: &dyn Fn(u64) -> bool| -> Result<u64> {
        let mut n = 0u64;
        loop {
            let v = word.load(Ordering::Acquire);
            if pred(v) {
                return Ok(v);
            }
            n += 1;
            if n < SPINS {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if n.is_multiple_of(1024) && Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "shared-memory set-up: peer rank {peer} did not answer the cache-line \
                         round trip in time"
                    ),
                ));
            }
        }
    };
    if !pinger {
        let mut seen = 0;
        loop {
            let v = wait(&|v| v != seen && (v == STOP || v % 2 == 1))?;
            if v == STOP {
                return Ok(Duration::from_nanos(result.load(Ordering::Acquire)));
            }
            word.store(v + 1, Ordering::Release);
            seen = v;
        }
    }
    let start = Instant::now();
    let mut trips = Vec::with_capacity(TRIPS as usize);
    let mut v = 1;
    for trip in 0..=TRIPS {
        let t0 = Instant::now();
        word.store(v, Ordering::Release);
        wait(&|x| x == v + 1)?;
        let ns = t0.elapsed().as_nanos() as u64;
        // The first trip brings the line and the code into cache.
        if trip > 0 {
            trips.push(ns);
        }
        v += 2;
        if start.elapsed() > MEASURE_MAX && !trips.is_empty() {
            break;
        }
    }
    trips.sort_unstable();
    let median = trips[trips.len() / 2];
    result.store(median, Ordering::Relaxed);
    word.store(STOP, Ordering::Release);
    Ok(Duration::from_nanos(median))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_decide_unless_the_setting_does() {
        let ns = Duration::from_nanos;
        // The two placements measured on the 2-vCPU VM.
        for rtt in [70, 107, 110] {
            assert!(!streams(None, Some(ns(rtt))), "{rtt}");
            assert!(streams(Some(true), Some(ns(rtt))));
        }
        for rtt in [380, 420, 5_000] {
            assert!(streams(None, Some(ns(rtt))), "{rtt}");
            assert!(!streams(Some(false), Some(ns(rtt))));
        }
        assert!(!streams(None, Some(STREAM_ABOVE)));
        assert!(streams(None, Some(STREAM_ABOVE + ns(1))));
        assert!(streams(None, None));
        assert!(!streams(Some(false), None));
    }

    #[test]
    fn both_sides_get_the_same_round_trip() {
        let line = [AtomicU64::new(0), AtomicU64::new(0)];
        let dl = Instant::now() + Duration::from_secs(60);
        let (a, b) = std::thread::scope(|s| {
            let pong = s.spawn(|| measure_round_trip(&line[0], &line[1], false, 0, dl));
            let a = measure_round_trip(&line[0], &line[1], true, 1, dl).unwrap();
            (a, pong.join().unwrap().unwrap())
        });
        assert_eq!(a, b);
        assert!(a > Duration::ZERO && a < Duration::from_secs(60), "{a:?}");
        assert_eq!(line[0].load(Ordering::Relaxed), STOP);
    }

    #[test]
    fn a_silent_peer_ends_in_a_timeout_on_either_side() {
        for pinger in [true, false] {
            let line = [AtomicU64::new(0), AtomicU64::new(0)];
            let dl = Instant::now() + Duration::from_millis(20);
            let e = measure_round_trip(&line[0], &line[1], pinger, 3, dl).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Timeout);
            assert!(e.msg.contains("peer rank 3"), "{}", e.msg);
        }
    }
}
