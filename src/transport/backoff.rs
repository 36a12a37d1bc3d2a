//! How a waiting rank spends the time before it sleeps: checks separated by spins or by yields
//! of its core, for a bounded budget.
//!
//! A spin only pays off when the peer runs on another core at the same time; a yield is what
//! lets a peer that shares this core run at all, but on a busy machine it also hands the core
//! to unrelated work for a whole time slice. So a waiter with a core of its own spins, and
//! yields when a peer it waits for was last seen on this very CPU (that peer cannot be running:
//! it is queued behind the waiter), or now and then in case that record is stale. Every waiter
//! records the CPU it runs on where its peers can read it. A waiter that keeps finding a peer on
//! its CPU moves itself to another one, since two ranks taking turns on one core while another
//! idles run several times slower than apart. When the host runs more ranks than it has cores,
//! every peer is likely queued behind some waiter, so there is no spin at all: each check is
//! followed by a yield and the ranks take turns; and a rank that finds more of its peers on its
//! CPU than their share of the cores moves to another one, since the scheduler can leave three
//! yielding ranks on one core and one on the other for long spells. Sleeping comes only after
//! the budget, since a sleeper costs whoever wakes it a system call and itself a wake-up
//! latency.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Pause rounds between checks of the costlier kind (tens of nanoseconds each).
const SPINS: u32 = 64;
/// How long a waiter with a core of its own polls before sleeping, at first.
const BUDGET: Duration = Duration::from_micros(100);
/// The most that budget grows to ([`Backoff::slept`]). A waiter whose sleeps keep ending
/// soon after they began (a peer that wakes from a sleep of its own, answers at once and goes
/// back to sleep) gains nothing by sleeping: each side then pays a wake-up per hand-over, and
/// once a wake-up takes longer than the budget, every wait outlasts the budget because the
/// other side sleeps, so neither ever catches the other awake.
const BUDGET_MAX: Duration = Duration::from_millis(1);
/// Longest spin without a yield, for a waiter that sees no peer queued on its CPU.
const YIELD_EVERY: Duration = Duration::from_micros(40);
/// How long a waiter on a crowded host yields before sleeping: long enough to cover the other
/// ranks' turns many times over, short enough that a rank left waiting for a slow peer soon
/// stops taking turns from it.
const BUDGET_CROWDED: Duration = Duration::from_millis(1);

/// After this many consecutive rounds that find a peer queued on the waiter's CPU, the waiter
/// moves to another CPU. Wake-ups place a woken rank beside its waker, so the scheduler often
/// stacks two ranks on one CPU next to an idle one; while they yield to each other both stay
/// cache-hot, and the load balancer leaves them there for tens of milliseconds.
const MOVE_AFTER: u32 = 16;

/// On a crowded host, a waiter checks once per this many rounds (counted across waits) whether
/// more ranks were last seen on its CPU than their share of the cores, and moves if so. The
/// scheduler leaves yielding ranks stacked three on one CPU and one on the other for long
/// spells: four processes on two cores ran a 16 B AlltoAll in 3.5-4.6 µs in such launches and
/// in 2.1-2.3 µs when spread two by two; with the check, 2.2-2.5 µs in every launch. A check
/// every 32 rounds moved ranks so often that Scatter lost a third.
const CROWD_CHECK_EVERY: u32 = 256;

/// A CPU number that matches no CPU: where a rank is before it first waits.
pub const NO_CPU: u32 = u32::MAX;

/// What a wait waits for.
pub trait Wait {
    /// Whether the event has happened; checked between spins, so it must be cheap.
    fn ready(&mut self) -> bool;
    /// A costlier check, made once per round of spins (a non-blocking `poll`, say).
    fn slow(&mut self) -> bool {
        false
    }
    /// Records that the waiter runs on `cpu` ([`NO_CPU`]: on none it can vouch for, as it is
    /// about to move) and tells whether a peer it waits for was last seen there (`NO_CPU`
    /// matches nothing). Called at the start and once per round, only when the host is not
    /// crowded.
    fn here(&mut self, _cpu: u32) -> bool {
        false
    }
    /// On a crowded host: records that the waiter runs on `cpu` (as [`Wait::here`]) and tells
    /// whether it should leave it: whether, counting the ranks it can see that were last seen
    /// there, it is beyond the first `share` of them in rank order. Ranks that share a view
    /// of the placement pick the same ones to leave, so they do not all move at once.
    fn crowd(&mut self, _cpu: u32, _share: u32) -> bool {
        false
    }
}

/// A wait for `ready` alone.
pub struct Until<F: FnMut() -> bool>(pub F);

impl<F: FnMut() -> bool> Wait for Until<F> {
    fn ready(&mut self) -> bool {
        (self.0)()
    }
}

/// Whether rank `me`, on `cpu`, is one rank too many there: at least `share` ranks below it
/// (rank `p` last seen on `peer_cpu(p)`) were last seen on the same CPU. Ranks that see the
/// same placement agree on which of them leave: the highest ones.
pub fn one_too_many(me: u32, cpu: u32, share: u32, peer_cpu: impl Fn(u32) -> u32) -> bool {
    // Fewer ranks than `share` sit below `me` at all: nothing to count (the waiter's
    // publications pass `u32::MAX`).
    if cpu == NO_CPU || u64::from(share) > u64::from(me) {
        return false;
    }
    let below = (0..me).filter(|&p| peer_cpu(p) == cpu).count();
    below as u64 >= u64::from(share)
}

/// Records `cpu` in `word` (a rank's published location), writing only on change so that
/// readers keep the line cached.
pub fn publish_cpu(word: &AtomicU32, cpu: u32) {
    if word.load(Ordering::Relaxed) != cpu {
        word.store(cpu, Ordering::Relaxed);
    }
}

fn current_cpu() -> u32 {
    // SAFETY: no arguments; glibc reads it from the thread's rseq area (or asks the kernel).
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        NO_CPU
    } else {
        c as u32
    }
}

/// Moves the calling thread to another CPU it may run on, leaving its affinity mask as it was:
/// the mask is narrowed to exclude the current CPU (the kernel migrates the thread before the
/// call returns), then restored (which does not move it back). Returns the new CPU, or `None`
/// when the thread may run on no other CPU. A mask the application changes for this very
/// thread from another thread in between would be overwritten; nothing else is touched.
fn move_off_cpu() -> Option<u32> {
    let here = current_cpu();
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `mask` is a writable cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut mask) } != 0 {
        return None;
    }
    let here_idx = here as usize;
    let mut others = mask;
    // SAFETY: indices are checked against the set's capacity first.
    unsafe {
        if here_idx >= 8 * size || !libc::CPU_ISSET(here_idx, &mask) {
            return None;
        }
        libc::CPU_CLR(here_idx, &mut others);
        if libc::CPU_COUNT(&others) == 0 {
            return None;
        }
    }
    // SAFETY: valid cpu_set_t values of `size` bytes for the calling thread.
    let moved = unsafe { libc::sched_setaffinity(0, size, &others) } == 0;
    // SAFETY: as above; restores exactly the mask read before.
    unsafe { libc::sched_setaffinity(0, size, &mask) };
    let now = current_cpu();
    (moved && now != here).then_some(now)
}

/// The CPUs this host gives its ranks: the online CPUs, or fewer when the process's control
/// group allows fewer (cgroup v2 CPU set or quota). Not the calling thread's affinity mask:
/// launchers such as `mpirun` bind each rank to a core of its own, and a rank that counted its
/// own mask would take two ranks on two cores for a crowded host and yield its core on every
/// wait instead of spinning (each yield a system call and, when anything else is runnable, a
/// time slice lost).
pub fn host_cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let mut cores = if online > 0 { online as usize } else { 1 };
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok();
    if let Some(n) = read("cpuset.cpus.effective").and_then(|s| cpu_list_len(s.trim())) {
        cores = cores.min(n.max(1));
    }
    if let Some(n) = read("cpu.max").and_then(|s| quota_cpus(s.trim())) {
        cores = cores.min(n);
    }
    cores
}

/// The number of CPUs in a kernel CPU list (`0-3,8,10-11`); `None` when it does not parse.
fn cpu_list_len(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                b.checked_sub(a)? + 1
            }
            None => part.parse::<usize>().map(|_| 1).ok()?,
        };
    }
    Some(n)
}

/// The whole CPUs a cgroup v2 `cpu.max` (`QUOTA PERIOD`, or `max PERIOD`) allows, at least one;
/// `None` without a quota.
fn quota_cpus(max: &str) -> Option<usize> {
    let (q, p) = max.split_once(' ')?;
    let (q, p) = (q.parse::<u64>().ok()?, p.parse::<u64>().ok()?);
    (p > 0).then(|| (q.div_ceil(p) as usize).max(1))
}

/// A waiting policy for one rank.
#[derive(Debug)]
pub struct Backoff {
    crowded: bool,
    /// On a crowded host, how many of its ranks each CPU should run (0: unknown).
    share: u32,
    /// Rounds since the last check of the placement ([`CROWD_CHECK_EVERY`]).
    crowd_rounds: AtomicU32,
    budget: Duration,
    /// The budget of the next wait in ns: `budget`, or more after sleeps that ended soon.
    grown: AtomicU64,
    /// Consecutive rounds that found a peer on this CPU.
    colocated_rounds: AtomicU32,
}

impl Backoff {
    /// The policy for a rank on a host running `host_ranks` ranks.
    pub fn for_host(host_ranks: usize) -> Backoff {
        let cores = host_cores();
        Backoff::new(host_ranks > cores).sharing(host_ranks, cores)
    }

    /// This policy, for a host that runs `host_ranks` ranks of the communicator on `cores`
    /// cores: when they outnumber the cores, ranks spread themselves evenly over them.
    pub fn sharing(mut self, host_ranks: usize, cores: usize) -> Backoff {
        if self.crowded && cores > 0 {
            self.share = host_ranks.div_ceil(cores).min(u32::MAX as usize) as u32;
        }
        self
    }

    /// The policy for a host whose ranks outnumber its cores (`crowded`) or not.
    pub fn new(crowded: bool) -> Backoff {
        Backoff {
            crowded,
            share: 0,
            crowd_rounds: AtomicU32::new(0),
            budget: if crowded { BUDGET_CROWDED } else { BUDGET },
            grown: AtomicU64::new(0),
            colocated_rounds: AtomicU32::new(0),
        }
    }

    /// Whether this policy is the one for a crowded host.
    pub fn crowded(&self) -> bool {
        self.crowded
    }

    /// The budget of the next wait: the policy's own, or the grown one ([`Backoff::slept`]).
    fn budget_now(&self) -> Duration {
        Duration::from_nanos(self.grown.load(Ordering::Relaxed)).max(self.budget)
    }

    /// Learns from a sleep that followed a spent budget (a waiter with a core of its own): one
    /// that an event (`woken`) ended within 1 ms doubles the budget, up to that; any
    /// other puts it back. Polling that long costs the waiter's own core only, and each
    /// hand-over caught awake spares both sides a wake-up.
    pub fn slept(&self, asleep: Duration, woken: bool) {
        if self.crowded {
            return;
        }
        let grown = if woken && asleep < BUDGET_MAX {
            (2 * self.budget_now()).min(BUDGET_MAX)
        } else {
            self.budget
        };
        let ns = grown.as_nanos() as u64;
        if self.grown.load(Ordering::Relaxed) != ns {
            self.grown.store(ns, Ordering::Relaxed);
        }
    }

    /// Checks `w` until it is ready or the budget, at most `limit`, is spent. Returns `None`
    /// once ready, else the part of `limit` left (for sleeping).
    pub fn run(&self, limit: Duration, w: &mut impl Wait) -> Option<Duration> {
        let budget = self.budget_now().min(limit);
        let mut start: Option<Instant> = None;
        let mut last_yield = Duration::ZERO;
        // Published at every wait, not only long ones: a record left from before a migration
        // would make a peer yield to a CPU this rank no longer runs on.
        let mut colocated = !self.crowded && w.here(current_cpu());
        loop {
            // A peer queued behind this rank cannot act before it yields: no spin then.
            let spins = if self.crowded || colocated { 0 } else { SPINS };
            for _ in 0..spins {
                if w.ready() {
                    return None;
                }
                std::hint::spin_loop();
            }
            if w.ready() || w.slow() {
                return None;
            }
            // The clock is read only once the first check failed: an event that is already
            // there costs nothing but the check.
            let t0 = *start.get_or_insert_with(Instant::now);
            let spent = t0.elapsed();
            if spent >= budget {
                return Some(limit.saturating_sub(spent));
            }
            if !colocated {
                self.colocated_rounds.store(0, Ordering::Relaxed);
            } else if self.colocated_rounds.fetch_add(1, Ordering::Relaxed) + 1 >= MOVE_AFTER {
                self.colocated_rounds.store(0, Ordering::Relaxed);
                // Withdrawn first: the peer gets the CPU as this rank leaves, and must not take
                // a stale record for a reason to leave as well.
                w.here(NO_CPU);
                if let Some(cpu) = move_off_cpu() {
                    colocated = w.here(cpu);
                    continue;
                }
                colocated = w.here(current_cpu());
            }
            if self.crowded && self.share > 0 {
                self.spread(w);
            }
            if self.crowded || colocated || spent - last_yield >= YIELD_EVERY {
                last_yield = spent;
                std::thread::yield_now();
            }
            colocated = !self.crowded && w.here(current_cpu());
        }
    }

    /// One round of a crowded waiter: every [`CROWD_CHECK_EVERY`] rounds, publishes where it
    /// runs and moves to another CPU when `w` finds it one rank too many there
    /// ([`Wait::crowd`]). The kernel places the moved rank; it is not pinned.
    fn spread(&self, w: &mut impl Wait) {
        let cpu = current_cpu();
        if self.crowd_rounds.fetch_add(1, Ordering::Relaxed) + 1 < CROWD_CHECK_EVERY {
            // Published at every round, so that the ranks that check find each other where
            // they are.
            w.crowd(cpu, u32::MAX);
            return;
        }
        self.crowd_rounds.store(0, Ordering::Relaxed);
        if w.crowd(cpu, self.share) {
            w.here(NO_CPU);
            let cpu = move_off_cpu().unwrap_or_else(current_cpu);
            w.crowd(cpu, u32::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Count {
        ready_after: u32,
        checks: u32,
        slow: bool,
        heres: u32,
        cpus: Vec<u32>,
        withdrawn: u32,
        peer_here: bool,
        /// The `crowd` calls: CPU and share.
        crowds: Vec<(u32, u32)>,
        /// What the next `crowd` check (not a publication) answers.
        too_many: bool,
    }

    impl Wait for Count {
        fn ready(&mut self) -> bool {
            self.checks += 1;
            self.checks > self.ready_after
        }
        fn slow(&mut self) -> bool {
            self.slow
        }
        fn here(&mut self, cpu: u32) -> bool {
            if cpu == NO_CPU {
                self.withdrawn += 1;
                return false;
            }
            self.heres += 1;
            if !self.cpus.contains(&cpu) {
                self.cpus.push(cpu);
            }
            self.peer_here
        }
        fn crowd(&mut self, cpu: u32, share: u32) -> bool {
            self.crowds.push((cpu, share));
            share != u32::MAX && std::mem::take(&mut self.too_many)
        }
    }

    fn count(ready_after: u32) -> Count {
        Count {
            ready_after,
            checks: 0,
            slow: false,
            heres: 0,
            cpus: Vec::new(),
            withdrawn: 0,
            peer_here: false,
            crowds: Vec::new(),
            too_many: false,
        }
    }

    #[test]
    fn host_cores_ignore_the_affinity_mask() {
        assert_eq!(cpu_list_len("0-3,8,10-11"), Some(7));
        assert_eq!(cpu_list_len("5"), Some(1));
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len("x"), None);
        assert_eq!(quota_cpus("max 100000"), None);
        assert_eq!(quota_cpus("150000 100000"), Some(2));
        assert_eq!(quota_cpus("1000 100000"), Some(1));
        // Narrowing this thread's mask to one CPU (as a launcher's binding does) leaves the
        // count alone.
        let before = host_cores();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let here = current_cpu() as usize;
        // SAFETY: all-zero cpu_set_t values are valid empty sets, `here` is a CPU this thread
        // runs on (so within the set's capacity), and every call gets the set's size; the
        // thread's own mask is restored before the block ends.
        let (got, set, bound, restored) = unsafe {
            let mut mask: libc::cpu_set_t = std::mem::zeroed();
            let got = libc::sched_getaffinity(0, size, &mut mask);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(here, &mut one);
            let set = libc::sched_setaffinity(0, size, &one);
            let bound = host_cores();
            (got, set, bound, libc::sched_setaffinity(0, size, &mask))
        };
        assert_eq!((got, set, restored), (0, 0, 0));
        assert_eq!(bound, before);
        assert!(before >= 1);
    }

    #[test]
    fn returns_at_once_when_ready_and_gives_up_after_the_budget() {
        for crowded in [false, true] {
            let b = Backoff::new(crowded);
            assert_eq!(b.crowded(), crowded);
            let mut w = count(0);
            assert_eq!(b.run(Duration::MAX, &mut w), None);
            assert_eq!(w.checks, 1);
            let limit = Duration::from_secs(10);
            let t0 = Instant::now();
            let mut w = count(u32::MAX);
            let left = b.run(limit, &mut w).expect("never ready");
            assert!(t0.elapsed() >= b.budget);
            assert!(left <= limit - b.budget);
            // Only a waiter with a core of its own looks for its peers' CPUs.
            assert_eq!(w.heres > 0, !crowded);
            // A zero limit allows one round of checks and no yield.
            let mut w = count(u32::MAX);
            assert_eq!(b.run(Duration::ZERO, &mut w), Some(Duration::ZERO));
            let spins = if crowded { 0 } else { SPINS };
            assert_eq!(w.checks, spins + 1);
            // A peer queued on this CPU gets it at once: no spins before the first yield.
            let mut w = count(u32::MAX);
            w.peer_here = true;
            assert_eq!(b.run(Duration::ZERO, &mut w), Some(Duration::ZERO));
            assert_eq!(w.checks, 1);
            let mut w = count(u32::MAX);
            w.slow = true;
            assert_eq!(
                b.run(Duration::MAX, &mut w),
                None,
                "the slow check ends it too"
            );
        }
    }

    #[test]
    fn sees_an_event_from_another_thread() {
        for crowded in [false, true] {
            let flag = Arc::new(AtomicBool::new(false));
            let f2 = flag.clone();
            let t = std::thread::spawn(move || f2.store(true, Ordering::Release));
            // Keep waiting across budgets: a lost event shows as the harness timing out.
            let b = Backoff::new(crowded);
            let mut w = Until(|| flag.load(Ordering::Acquire));
            while b.run(Duration::MAX, &mut w).is_some() {}
            t.join().unwrap();
        }
    }

    fn allowed_cpus() -> (libc::cpu_set_t, i32) {
        // SAFETY: an all-zero cpu_set_t is a valid empty set, filled in by the call.
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: a writable cpu_set_t of `size` bytes.
        assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut mask) }, 0);
        // SAFETY: reads the set just filled in.
        let n = unsafe { libc::CPU_COUNT(&mask) };
        (mask, n)
    }

    fn same_mask(a: &libc::cpu_set_t, b: &libc::cpu_set_t) -> bool {
        // SAFETY: indices below the set's capacity.
        (0..8 * std::mem::size_of::<libc::cpu_set_t>())
            .all(|i| unsafe { libc::CPU_ISSET(i, a) == libc::CPU_ISSET(i, b) })
    }

    #[test]
    fn moving_off_a_cpu_keeps_the_affinity_mask() {
        let (before, n) = allowed_cpus();
        let here = current_cpu();
        let moved = move_off_cpu();
        assert!(same_mask(&before, &allowed_cpus().0));
        if n < 2 {
            assert_eq!(moved, None);
        } else {
            let cpu = moved.expect("another CPU is allowed");
            assert_ne!(cpu, here);
        }
    }

    #[test]
    fn a_waiter_stuck_beside_its_peer_moves() {
        let (before, n) = allowed_cpus();
        // Every round finds the peer on this CPU: after MOVE_AFTER rounds the waiter moves.
        let mut w = count(2 * MOVE_AFTER);
        w.peer_here = true;
        let b = Backoff {
            budget: Duration::from_secs(100),
            ..Backoff::new(false)
        };
        assert_eq!(b.run(Duration::from_secs(200), &mut w), None);
        assert!(same_mask(&before, &allowed_cpus().0));
        assert_eq!(w.withdrawn, 2, "its record is withdrawn before each move");
        if n >= 2 {
            assert!(w.cpus.len() >= 2, "never moved: {:?}", w.cpus);
        }
    }

    #[test]
    fn the_share_of_a_cpu_counts_ranks_per_core_on_a_crowded_host_only() {
        assert_eq!(Backoff::new(true).sharing(4, 2).share, 2);
        assert_eq!(Backoff::new(true).sharing(5, 2).share, 3);
        assert_eq!(Backoff::new(false).sharing(2, 2).share, 0);
        assert_eq!(Backoff::new(true).share, 0, "unknown: no spreading");
    }

    #[test]
    fn the_highest_ranks_beyond_a_cpus_share_are_the_ones_to_leave() {
        // Ranks 0, 1, 2 and 4 on CPU 0, rank 3 on CPU 1, rank 5 not seen yet; two per CPU.
        let at = |p: u32| [0, 0, 0, 1, 0, NO_CPU][p as usize];
        let leaves: Vec<u32> = (0..6)
            .filter(|&me| one_too_many(me, at(me), 2, at))
            .collect();
        assert_eq!(leaves, [2, 4]);
        assert!(
            !one_too_many(5, NO_CPU, 1, at),
            "a rank that cannot tell stays"
        );
        assert!(one_too_many(1, 0, 1, at));
        assert!(
            !one_too_many(1, 0, u32::MAX, at),
            "a publication never moves"
        );
    }

    #[test]
    fn a_crowded_waiter_one_too_many_on_its_cpu_moves_and_says_where_it_went() {
        let (before, n) = allowed_cpus();
        let b = Backoff::new(true).sharing(4, 2);
        // One check per round on a crowded host: the placement is examined once, at round
        // CROWD_CHECK_EVERY, and found crowded.
        let mut w = count(CROWD_CHECK_EVERY + 4);
        w.too_many = true;
        assert_eq!(b.run(Duration::from_secs(100), &mut w), None);
        assert!(same_mask(&before, &allowed_cpus().0));
        let checks: Vec<usize> = (0..w.crowds.len())
            .filter(|&i| w.crowds[i].1 != u32::MAX)
            .collect();
        assert_eq!(checks.len(), 1, "{:?}", w.crowds);
        let i = checks[0];
        assert_eq!(w.crowds[i].1, 2);
        assert_eq!(
            i + 1,
            CROWD_CHECK_EVERY as usize,
            "published at every round before"
        );
        assert_eq!(w.withdrawn, 1, "its record is withdrawn before it moves");
        let (from, to) = (w.crowds[i].0, w.crowds[i + 1].0);
        assert_eq!(w.crowds[i + 1].1, u32::MAX, "where it went is published");
        if n >= 2 {
            assert_ne!(from, to, "never moved");
        }
        // A policy without a share never examines the placement.
        let mut w = count(2 * CROWD_CHECK_EVERY);
        assert_eq!(
            Backoff::new(true).run(Duration::from_secs(100), &mut w),
            None
        );
        assert!(w.crowds.is_empty());
    }

    #[test]
    fn sleeps_that_end_soon_grow_the_budget_and_others_put_it_back() {
        let b = Backoff::new(false);
        assert_eq!(b.budget_now(), BUDGET);
        let short = BUDGET_MAX / 4;
        b.slept(short, true);
        assert_eq!(b.budget_now(), 2 * BUDGET);
        for _ in 0..20 {
            b.slept(short, true);
        }
        assert_eq!(b.budget_now(), BUDGET_MAX, "capped");
        // The grown budget is what a wait polls for before it gives up.
        let t0 = Instant::now();
        assert!(b.run(Duration::MAX, &mut count(u32::MAX)).is_some());
        assert!(t0.elapsed() >= BUDGET_MAX);
        b.slept(BUDGET_MAX, true);
        assert_eq!(b.budget_now(), BUDGET, "a long sleep paid off");
        b.slept(short, true);
        b.slept(short, false);
        assert_eq!(b.budget_now(), BUDGET, "a sleep that timed out");
        // A crowded host's waiters keep their budget: a peer may need their core.
        let c = Backoff::new(true);
        c.slept(short, true);
        assert_eq!(c.budget_now(), BUDGET_CROWDED);
    }

    #[test]
    fn publishing_a_cpu_records_it() {
        let word = AtomicU32::new(NO_CPU);
        publish_cpu(&word, 3);
        assert_eq!(word.load(Ordering::Relaxed), 3);
        publish_cpu(&word, 3);
        publish_cpu(&word, 0);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }
}
