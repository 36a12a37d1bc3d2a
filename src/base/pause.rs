//! How long the CPU's spin-wait hint (`std::hint::spin_loop`, `pause` on x86) takes, measured
//! once per process, so that a wait too short to read a clock in can still be given as a time.
//! The hint's cost differs tenfold between CPUs (about 10 cycles on older x86 cores, 140 on
//! newer ones), so a count of pauses tuned on one machine is a different wait on another.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Pauses timed per measurement; long enough that a clock read is noise beside it.
const PAUSES: u32 = 256;
/// Measurements taken; the fastest counts (an interrupt only makes one slower).
const RUNS: u32 = 5;

static PAUSE_NS: OnceLock<f64> = OnceLock::new();

/// Nanoseconds one spin-wait hint takes on this CPU (measured at the first call).
pub fn pause_ns() -> f64 {
    *PAUSE_NS.get_or_init(measure)
}

fn measure() -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        for _ in 0..PAUSES {
            std::hint::spin_loop();
        }
        best = best.min(t.elapsed());
    }
    (best.as_nanos() as f64 / PAUSES as f64).max(0.1)
}

/// Spin-wait hints that take about `wait` on a CPU whose hint takes `pause_ns`, within
/// `min..=max`.
pub fn rounds_for(wait: Duration, pause_ns: f64, min: u32, max: u32) -> u32 {
    let n = (wait.as_nanos() as f64 / pause_ns.max(0.1)).round();
    (n.min(u32::MAX as f64) as u32).clamp(min, max)
}

/// Spin-wait hints that take about `wait` on this CPU, within `min..=max`.
pub fn rounds(wait: Duration, min: u32, max: u32) -> u32 {
    rounds_for(wait, pause_ns(), min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_becomes_more_rounds_on_a_cpu_with_a_faster_pause() {
        let w = Duration::from_nanos(350);
        // A pause of 11 ns (the 2-vCPU VM) and of 140 cycles at 3 GHz.
        assert_eq!(rounds_for(w, 11.0, 1, 1000), 32);
        assert_eq!(rounds_for(w, 46.7, 1, 1000), 7);
        assert_eq!(rounds_for(w, 46.7, 8, 1000), 8);
        assert_eq!(rounds_for(w, 0.01, 1, 64), 64);
        assert_eq!(rounds_for(Duration::ZERO, 11.0, 0, 64), 0);
    }

    #[test]
    fn the_measured_pause_is_plausible_and_stable() {
        let p = pause_ns();
        assert!(p > 0.0 && p < 10_000.0, "{p}");
        assert_eq!(p, pause_ns());
        let r = rounds(Duration::from_micros(1), 1, u32::MAX);
        assert!(r >= 1, "{r}");
    }
}
