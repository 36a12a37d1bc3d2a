//! Logging setup.
//!
//! The library logs through the `log` facade. [`init`] installs an `env_logger` writing to stderr
//! with lines of the form
//!
//! ```text
//! [HCCL] <LEVEL> <pid>:<tid> <timestamp> <message>
//! ```
//!
//! e.g. `[HCCL] WARN 4242:4250 2025-01-31T10:00:00.123456Z HCCL_SERVER_PORT is an alias; ...`.
//! The fixed `[HCCL] <LEVEL> <pid>:<tid>` prefix makes lines from many ranks interleaved on one
//! terminal easy to grep and attribute. The level comes from the environment (see
//! [`EnvConfig::log_level`](crate::base::env::EnvConfig::log_level)), not from `RUST_LOG`.
//!
//! With `HCCL_ENTRY_LOG_ENABLE=1` the API entry lines (target [`ENTRY_LOG_TARGET`]) are let
//! through at INFO whatever the level, since the user asked for exactly those lines.
//!
//! We are a library loaded into someone else's process: if the host program already installed a
//! `log` logger, ours is silently not installed and records go to the host's logger instead.

use std::fmt;
use std::io::Write;
use std::sync::Once;

use crate::base::env::EnvConfig;

/// Log target of the API entry lines (`HCCL_ENTRY_LOG_ENABLE=1`).
pub const ENTRY_LOG_TARGET: &str = "hccl_entry";

/// Installs the library's stderr logger at `level` (plus the API entry lines when `entry_log`),
/// once per process. Later calls do nothing, and an already-installed logger (from the host
/// program) is left in place; never panics.
pub fn init(level: log::LevelFilter, entry_log: bool) {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // try_init fails only if another logger is installed; that one is the host's choice.
        let _ = builder(level, entry_log).try_init();
    });
}

/// Initialises logging from [`EnvConfig::global`] and then logs, once per process, the
/// configuration's warnings at WARN. If the configuration is malformed, logs at ERROR level
/// and reports the configuration error (the caller of `EnvConfig::global` will also fail on it).
#[inline]
pub fn init_from_env() {
    // Every API entry calls this: once done, skip fetching (cloning) the configuration, with
    // one inline load.
    if !REPORT.is_completed() {
        init_from_env_now();
    }
}

/// Whether [`init_from_env`] has run (and reported the configuration's warnings).
static REPORT: Once = Once::new();

#[cold]
#[inline(never)]
fn init_from_env_now() {
    let cfg = EnvConfig::global();
    let (level, entry_log) = cfg.as_ref().map_or((log::LevelFilter::Error, false), |c| {
        (c.log_level, c.entry_log)
    });
    init(level, entry_log);
    // Warnings are reported after init so they reach the logger; Once keeps them from repeating
    // when several entry points call this.
    REPORT.call_once(|| match &cfg {
        Ok(c) => c.warnings.iter().for_each(|w| log::warn!("{w}")),
        Err(e) => log::error!("invalid environment configuration: {e}"),
    });
}

/// The configured `env_logger` builder; separate from [`init`] so tests can redirect it.
fn builder(level: log::LevelFilter, entry_log: bool) -> env_logger::Builder {
    let mut b = env_logger::Builder::new();
    b.filter_level(level);
    if entry_log {
        b.filter_module(ENTRY_LOG_TARGET, level.max(log::LevelFilter::Info));
    }
    b.target(env_logger::Target::Stderr).format(|buf, record| {
        let ts = buf.timestamp_micros();
        write_line(
            buf,
            record.level(),
            std::process::id(),
            current_tid(),
            &ts,
            record.args(),
        )
    });
    b
}

/// Writes one log line in the library's format.
fn write_line(
    out: &mut dyn Write,
    level: log::Level,
    pid: u32,
    tid: i64,
    ts: &dyn fmt::Display,
    msg: &fmt::Arguments<'_>,
) -> std::io::Result<()> {
    writeln!(out, "[HCCL] {level} {pid}:{tid} {ts} {msg}")
}

/// The kernel thread id of the calling thread. Not cached: a cached value would be wrong in a
/// forked child, and the syscall is cheap next to formatting a log line.
fn current_tid() -> i64 {
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn line(level: log::Level, msg: fmt::Arguments<'_>) -> String {
        let mut out = Vec::new();
        write_line(&mut out, level, 42, 43, &"TS", &msg).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn line_format() {
        assert_eq!(
            line(log::Level::Warn, format_args!("x={}", 5)),
            "[HCCL] WARN 42:43 TS x=5\n"
        );
        assert_eq!(
            line(log::Level::Error, format_args!("boom")),
            "[HCCL] ERROR 42:43 TS boom\n"
        );
    }

    #[test]
    fn tid_is_per_thread() {
        let here = current_tid();
        let there = std::thread::spawn(current_tid).join().unwrap();
        assert!(here > 0 && there > 0);
        assert_ne!(here, there);
        assert_eq!(here, current_tid());
    }

    /// A `Write` whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn builder_formats_and_filters() {
        use log::Log;
        let sink = Sink::default();
        let logger = builder(log::LevelFilter::Info, false)
            .target(env_logger::Target::Pipe(Box::new(sink.clone())))
            .build();
        let rec = |level, msg: &str| {
            logger.log(
                &log::Record::builder()
                    .level(level)
                    .args(format_args!("{msg}"))
                    .build(),
            )
        };
        rec(log::Level::Info, "kept");
        rec(log::Level::Debug, "dropped");
        logger.flush();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text:?}");
        let prefix = format!("[HCCL] INFO {}:{} ", std::process::id(), current_tid());
        assert!(lines[0].starts_with(&prefix), "{text:?}");
        assert!(lines[0].ends_with(" kept"), "{text:?}");
        // Between prefix and message sits an RFC 3339 timestamp, e.g. 2025-01-31T10:00:00.123456Z.
        let ts = &lines[0][prefix.len()..lines[0].len() - " kept".len()];
        assert!(
            ts.len() >= 20 && ts.contains('T') && ts.ends_with('Z'),
            "{ts:?}"
        );
    }

    #[test]
    fn entry_lines_pass_whatever_the_level() {
        use log::Log;
        for (level, entry_log, want) in [
            (log::LevelFilter::Error, true, "entry kept"),
            (log::LevelFilter::Off, true, "entry kept"),
            (log::LevelFilter::Error, false, ""),
        ] {
            let sink = Sink::default();
            let logger = builder(level, entry_log)
                .target(env_logger::Target::Pipe(Box::new(sink.clone())))
                .build();
            for (target, msg) in [(ENTRY_LOG_TARGET, "entry kept"), ("hccl::comm", "other")] {
                logger.log(
                    &log::Record::builder()
                        .level(log::Level::Info)
                        .target(target)
                        .args(format_args!("{msg}"))
                        .build(),
                );
            }
            logger.flush();
            let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
            let lines = text.lines().count();
            assert_eq!(
                lines,
                usize::from(!want.is_empty()),
                "{level} {entry_log}: {text:?}"
            );
            assert!(text.contains(want) && !text.contains("other"), "{text:?}");
        }
    }

    /// A stand-in for a logger installed by the host program.
    struct HostLogger(Mutex<Vec<String>>);

    impl log::Log for HostLogger {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &log::Record<'_>) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
        fn flush(&self) {}
    }

    static HOST: HostLogger = HostLogger(Mutex::new(Vec::new()));

    /// Runs `test` (one of the ignored tests below) alone in a fresh copy of this test binary,
    /// where nothing has installed a logger yet, whatever the other tests of this process did.
    fn in_fresh_process(test: &str) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--ignored", "--test-threads=1"])
            .env_remove("HCCL_LOG_LEVEL")
            .env_remove("ASCEND_GLOBAL_LOG_LEVEL")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{test}:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn init_keeps_host_logger() {
        in_fresh_process("base::logging::tests::host_logger_in_fresh_process");
    }

    #[test]
    fn init_is_once() {
        in_fresh_process("base::logging::tests::init_once_in_fresh_process");
    }

    #[test]
    #[ignore = "needs a process without a logger; run by init_keeps_host_logger"]
    fn host_logger_in_fresh_process() {
        log::set_logger(&HOST).expect("no logger installed yet in a fresh process");
        log::set_max_level(log::LevelFilter::Trace);
        init(log::LevelFilter::Debug, false);
        init_from_env();
        log::error!("still the host's");
        assert!(HOST
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "still the host's"));
        // Ours stayed out: the host's level is untouched.
        assert_eq!(log::max_level(), log::LevelFilter::Trace);
    }

    #[test]
    #[ignore = "needs a process without a logger; run by init_is_once"]
    fn init_once_in_fresh_process() {
        init(log::LevelFilter::Info, false);
        assert_eq!(log::max_level(), log::LevelFilter::Info);
        init(log::LevelFilter::Off, false);
        init(log::LevelFilter::Trace, true);
        init_from_env();
        assert_eq!(
            log::max_level(),
            log::LevelFilter::Info,
            "a later init changed the level"
        );
        // Ours is installed: a host logger can no longer be.
        assert!(log::set_logger(&HOST).is_err());
    }
}
