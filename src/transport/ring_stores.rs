//! Whether a shared-memory link writes staged messages into its ring with streaming stores
//! (`base::stream`), chosen per link from the cache-line round trip between the two processes,
//! measured at link set-up and again about once a second while the link carries large staged
//! messages ([`Prober`]; `HCCL_SHM_STREAM` overrides it).
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

/// Round trips above this mean the two cores share no cache: stream. Between the measured
/// ranges of the placements where plain stores won (0.07-0.11 µs; and 0.19-0.28 µs, where
/// plain staged Reduce ran 1.4x and a 2 MiB AllReduce 1.2x faster than streaming) and the one
/// where streaming did (0.38-0.43 µs).
pub const STREAM_ABOVE: Duration = Duration::from_nanos(300);
/// Round trips above this are no cache's: the two processes shared one CPU while they were
/// measured, and each trip waited for a time slice. Such a measurement says nothing about the
/// placement. On the 2-vCPU VM the set-up measurement read 25.7 µs in three of six launches of
/// two processes (the kernel starts both on one CPU and spreads them later), against 0.21-0.23
/// µs in the others; streaming stores then cost the link's Reduce 1.4x for good, as no probe
/// between the placements changes the choice.
pub const SHARED_CPU_ABOVE: Duration = Duration::from_micros(2);
/// Run-time probes come this often while the link's choice rests on no measurement of its
/// placement ([`placement_seen`]), until one sees it...
pub const PROBE_UNSEEN_EVERY: Duration = Duration::from_millis(10);
/// ...for at most this many probes: two ranks the user bound to one CPU never see a placement,
/// and each of their probes may spin for [`PROBE_MAX`] before it gives up.
pub const PROBE_UNSEEN_MAX: u32 = 8;

/// Whether a measured round trip says where the two processes' cores are (see
/// [`SHARED_CPU_ABOVE`]).
pub fn placement_seen(rtt: Duration) -> bool {
    rtt <= SHARED_CPU_ABOVE
}

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
/// measured `round_trip` (`None`, or one that saw no placement: stream, safe in either
/// placement).
pub fn streams(setting: Option<bool>, round_trip: Option<Duration>) -> bool {
    match (setting, round_trip) {
        (Some(s), _) => s,
        (None, Some(rtt)) if placement_seen(rtt) => rtt > STREAM_ABOVE,
        (None, _) => true,
    }
}

/// A run-time probe ([`Prober`]) turns a link to plain stores only below this round trip...
pub const PLAIN_BELOW: Duration = Duration::from_nanos(170);
/// ...and to streaming ones only above this one. In between the choice stays: under load a
/// 16-trip probe between cores apart read 211 ns once (the set-up measurement 430 ns, the
/// ping-pong bench 418 ns), and a link that flips on such a reading loses up to 10x.
pub const STREAM_ABOVE_AGAIN: Duration = Duration::from_nanos(340);

/// Whether a link that streams now (`current`) streams after a run-time probe measured `rtt`,
/// when an earlier measurement has `seen` the placement: if none has, the probe decides as the
/// set-up measurement would ([`STREAM_ABOVE`]). A probe that sees no placement changes nothing.
pub fn streams_after(current: bool, rtt: Duration, seen: bool) -> bool {
    if !placement_seen(rtt) {
        current
    } else if !seen {
        rtt > STREAM_ABOVE
    } else if rtt < PLAIN_BELOW {
        false
    } else if rtt > STREAM_ABOVE_AGAIN {
        true
    } else {
        current
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

/// How often a link's lower rank re-measures the round trip while the link carries messages
/// that [`streams`] concerns: the host may move the two vCPUs together or apart at any time
/// (seen every few minutes on a 2-vCPU VM), and the set-up choice then costs up to 10x.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Timed round trips of a run-time probe (after the untimed one that finds the peer).
pub const PROBE_TRIPS: u32 = 16;
/// A run-time probe whose timed trips take longer than this is abandoned (the peer lost its
/// core), and so is a peer's wait for the next ping: the choice stays as it was.
pub const PROBE_MAX: Duration = Duration::from_micros(200);
/// Set in the ping word when a run-time probe ends (the result word holds its round trip in
/// ns, 0 when abandoned); the set-up measurement's `STOP` has it set too.
const END: u64 = 1 << 63;

/// The pinging side (the link's lower rank) of the run-time probes, which run on the words of
/// [`measure_round_trip`] once it is done. A probe is one ping written when due; the timed
/// trips follow only once the peer answered it, so neither side waits for a peer that is busy
/// elsewhere: a peer that answers late just delays the probe.
#[derive(Debug)]
pub struct Prober {
    due: Instant,
    /// The ping awaiting its first answer (0: none).
    pending: u64,
    last: u64,
    /// Time between probes: [`PROBE_UNSEEN_EVERY`] until a measurement sees the placement
    /// or [`PROBE_UNSEEN_MAX`] probes have started.
    every: Duration,
    started: u32,
}

impl Prober {
    /// A prober whose first probe falls due after `now`: [`PROBE_EVERY`] after it when the
    /// set-up measurement `seen` the placement ([`placement_seen`]), else
    /// [`PROBE_UNSEEN_EVERY`].
    pub fn new(now: Instant, seen: bool) -> Prober {
        let every = if seen {
            PROBE_EVERY
        } else {
            PROBE_UNSEEN_EVERY
        };
        Prober {
            due: now + every,
            pending: 0,
            last: 0,
            every,
            started: 0,
        }
    }

    /// Slows the probes to [`PROBE_EVERY`] once a measurement has seen the placement,
    /// counted from the last probe's start.
    pub fn placement_seen(&mut self) {
        self.due += PROBE_EVERY.saturating_sub(self.every);
        self.every = PROBE_EVERY;
    }

    /// Whether a probe waits for the peer's first answer ([`Prober::poll`] has work).
    pub fn pending(&self) -> bool {
        self.pending != 0
    }

    /// Writes the first ping of a probe if one is due at `now` and none is pending.
    pub fn start_if_due(&mut self, word: &AtomicU64, now: Instant) {
        if self.pending != 0 || now < self.due {
            return;
        }
        self.started = self.started.saturating_add(1);
        if self.started >= PROBE_UNSEEN_MAX {
            self.every = PROBE_EVERY;
        }
        self.due = now + self.every;
        self.last += 2;
        self.pending = self.last - 1;
        word.store(self.pending, Ordering::Release);
    }

    /// When the pending probe's first ping is answered: times [`PROBE_TRIPS`] more, publishes
    /// their median in `result` for the peer and returns it (`Some(None)`: abandoned after
    /// [`PROBE_MAX`]). `None` while the peer has not answered.
    pub fn poll(&mut self, word: &AtomicU64, result: &AtomicU64) -> Option<Option<Duration>> {
        if self.pending == 0 || word.load(Ordering::Acquire) != self.pending + 1 {
            return None;
        }
        self.pending = 0;
        let start = Instant::now();
        // On the stack: a probe runs inside operations, which allocate nothing once warm.
        let mut trips = [0u64; PROBE_TRIPS as usize];
        let mut done = 0;
        'trips: for _ in 0..PROBE_TRIPS {
            self.last += 2;
            let v = self.last - 1;
            let t0 = Instant::now();
            word.store(v, Ordering::Release);
            let mut n = 0u32;
            while word.load(Ordering::Acquire) != v + 1 {
                std::hint::spin_loop();
                n += 1;
                if n.is_multiple_of(256) && start.elapsed() > PROBE_MAX {
                    break 'trips;
                }
            }
            trips[done] = t0.elapsed().as_nanos() as u64;
            done += 1;
        }
        let rtt = if done == trips.len() {
            trips.sort_unstable();
            trips[trips.len() / 2]
        } else {
            0
        };
        result.store(rtt, Ordering::Relaxed);
        self.last += 2;
        word.store(END | (self.last - 1), Ordering::Release);
        Some((rtt > 0).then(|| Duration::from_nanos(rtt)))
    }
}

/// The answering side (the link's higher rank) of the run-time probes ([`Prober`]).
#[derive(Debug)]
pub struct Responder {
    /// The ping word as last handled: the set-up measurement leaves it at `STOP`.
    seen: u64,
}

impl Default for Responder {
    fn default() -> Responder {
        Responder { seen: STOP }
    }
}

impl Responder {
    /// One load while nothing changed. On a ping, answers it and every further one until the
    /// probe ends (or no ping comes for [`PROBE_MAX`]); returns the probe's round trip when
    /// this call saw it end with one.
    pub fn poll(&mut self, word: &AtomicU64, result: &AtomicU64) -> Option<Duration> {
        let mut w = word.load(Ordering::Acquire);
        if w == self.seen {
            return None;
        }
        let mut since = Instant::now();
        loop {
            if w & END != 0 {
                self.seen = w;
                let ns = result.load(Ordering::Relaxed);
                return (ns > 0).then(|| Duration::from_nanos(ns));
            }
            if w % 2 == 1 && w != self.seen {
                word.store(w + 1, Ordering::Release);
                self.seen = w + 1;
                since = Instant::now();
            } else {
                // Still our answer (or the pinger lost its core).
                self.seen = w;
            }
            let mut n = 0u32;
            loop {
                std::hint::spin_loop();
                let x = word.load(Ordering::Acquire);
                if x != self.seen {
                    w = x;
                    break;
                }
                n += 1;
                if n.is_multiple_of(256) && since.elapsed() > PROBE_MAX {
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

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
        // Both processes on one CPU: no placement seen, so the safe choice.
        let shared_cpu = SHARED_CPU_ABOVE + ns(1);
        assert!(placement_seen(SHARED_CPU_ABOVE) && !placement_seen(shared_cpu));
        assert!(streams(None, Some(ns(25_700))));
        assert!(!streams(Some(false), Some(ns(25_700))));
    }

    #[test]
    fn a_probe_between_the_placements_changes_nothing() {
        let ns = Duration::from_nanos;
        for current in [false, true] {
            assert!(!streams_after(current, ns(100), true));
            assert!(streams_after(current, ns(400), true));
            for rtt in [170, 211, 250, 300, 25_700] {
                assert_eq!(streams_after(current, ns(rtt), true), current, "{rtt}");
            }
        }
    }

    #[test]
    fn the_first_probe_that_sees_the_placement_decides_as_the_set_up_would() {
        let ns = Duration::from_nanos;
        for current in [false, true] {
            for rtt in [100, 211, 226, 250, 251, 300, 400] {
                let want = rtt > STREAM_ABOVE.as_nanos() as u64;
                assert_eq!(streams_after(current, ns(rtt), false), want, "{rtt}");
            }
            // One CPU again: still nothing seen.
            assert_eq!(streams_after(current, ns(25_700), false), current);
        }
    }

    #[test]
    fn probes_come_often_until_the_placement_is_seen() {
        let line = [AtomicU64::new(STOP), AtomicU64::new(0)];
        let word = &line[0];
        let now = Instant::now();
        let mut p = Prober::new(now, false);
        p.start_if_due(word, now + PROBE_UNSEEN_EVERY);
        assert!(p.pending());
        let ping = word.load(Ordering::Acquire);
        word.store(ping + 1, Ordering::Release);
        // The peer answered, then lost its core: the probe is abandoned.
        assert_eq!(p.poll(word, &line[1]), Some(None));
        p.start_if_due(word, now + PROBE_UNSEEN_EVERY * 2);
        assert!(p.pending(), "due again after PROBE_UNSEEN_EVERY");
        p.pending = 0;
        p.placement_seen();
        p.start_if_due(word, now + PROBE_UNSEEN_EVERY * 4);
        assert!(!p.pending(), "seen: every PROBE_EVERY");
        p.placement_seen();
        p.start_if_due(
            word,
            now + PROBE_UNSEEN_EVERY * 2 + PROBE_EVERY - Duration::from_nanos(1),
        );
        assert!(!p.pending(), "a second call changes nothing");
        p.start_if_due(word, now + PROBE_UNSEEN_EVERY * 2 + PROBE_EVERY);
        assert!(p.pending());
    }

    #[test]
    fn probes_that_never_see_the_placement_slow_down() {
        let line = [AtomicU64::new(STOP), AtomicU64::new(0)];
        let word = &line[0];
        let now = Instant::now();
        let mut p = Prober::new(now, false);
        let mut t = now;
        for k in 1..=PROBE_UNSEEN_MAX {
            t += PROBE_UNSEEN_EVERY;
            p.start_if_due(word, t);
            assert!(p.pending(), "quick probe {k}");
            p.pending = 0;
        }
        p.start_if_due(word, t + PROBE_UNSEEN_EVERY);
        assert!(!p.pending(), "no quick probe after {PROBE_UNSEEN_MAX}");
        p.start_if_due(word, t + PROBE_EVERY);
        assert!(p.pending());
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
    fn a_run_time_probe_gives_both_sides_the_same_round_trip_again_and_again() {
        let line = [AtomicU64::new(STOP), AtomicU64::new(0)];
        let (word, result) = (&line[0], &line[1]);
        let start = Instant::now();
        let mut p = Prober::new(start, true);
        p.start_if_due(word, start);
        assert!(!p.pending(), "not due before PROBE_EVERY");
        let mut r = Responder::default();
        assert_eq!(r.poll(word, result), None);
        for k in 1..=3u32 {
            p.start_if_due(word, start + PROBE_EVERY * k);
            assert!(p.pending());
            assert_eq!(p.poll(word, result), None, "unanswered");
            // Each side polls from its own thread, as two processes would.
            let done = AtomicBool::new(false);
            let (a, b) = std::thread::scope(|s| {
                let pong = s.spawn(|| loop {
                    let over = done.load(Ordering::Acquire);
                    if let Some(d) = r.poll(word, result) {
                        return Some(d);
                    }
                    if over {
                        return None;
                    }
                });
                let a = loop {
                    if let Some(d) = p.poll(word, result) {
                        break d;
                    }
                };
                done.store(true, Ordering::Release);
                (a, pong.join().unwrap())
            });
            // A probe cut off by a descheduled thread reports none; else both agree.
            if let Some(a) = a {
                assert_eq!(Some(a), b, "probe {k}");
                assert!(a > Duration::ZERO && a < Duration::from_secs(1), "{a:?}");
            }
            assert!(!p.pending());
            assert_eq!(r.poll(word, result), None, "seen");
        }
    }

    #[test]
    fn a_probe_the_peer_leaves_unanswered_blocks_nobody() {
        let line = [AtomicU64::new(STOP), AtomicU64::new(0)];
        let (word, result) = (&line[0], &line[1]);
        let now = Instant::now();
        let mut p = Prober::new(now, true);
        p.start_if_due(word, now + PROBE_EVERY);
        assert_eq!(p.poll(word, result), None);
        // The peer answers the first ping, then loses its core before the timed ones.
        let ping = word.load(Ordering::Acquire);
        word.store(ping + 1, Ordering::Release);
        assert_eq!(p.poll(word, result), Some(None), "abandoned, no choice");
        assert_eq!(result.load(Ordering::Relaxed), 0);
        let mut r = Responder::default();
        let t = Instant::now();
        assert_eq!(
            r.poll(word, result),
            None,
            "an abandoned probe decides nothing"
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        // An answering side whose pinger went quiet gives up after PROBE_MAX.
        p.start_if_due(word, now + PROBE_EVERY * 2);
        let t = Instant::now();
        assert_eq!(r.poll(word, result), None);
        assert!(t.elapsed() >= PROBE_MAX);
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
