//! `hcclrun`: starts N ranks of a program on this host.
//!
//! Every rank gets the variables of [`hccl::comm::world`] (`HCCL_RANK`, `HCCL_WORLD_SIZE`,
//! `HCCL_LOCAL_RANK`, `HCCL_LOCAL_WORLD_SIZE`, `HCCL_ROOT_ADDR`, `HCCL_JOB_ID`) and the
//! torchrun-style ones (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`) for user programs that read those. Each rank runs in its own process group so
//! that stopping it also stops anything it started.
//!
//! Lines a rank writes are prefixed with `[rank] ` (stdout to stdout, stderr to stderr). The
//! first rank to fail (non-zero exit or killed by a signal) ends the run: the others get
//! `SIGTERM`, then `SIGKILL` after a grace period, and `hcclrun` exits with the failing rank's
//! status. `SIGINT`, `SIGTERM`, `SIGHUP` and `SIGQUIT` sent to `hcclrun` are forwarded to every
//! rank. With `--timeout`, ranks still running at the deadline are stopped the same way and the
//! exit status is 124.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;

/// Most ranks one `hcclrun` starts (the signal handler's pid table is static).
pub const MAX_RANKS: u32 = 1024;
/// Exit status when the run hit `--timeout`, as timeout(1) uses.
pub const TIMEOUT_STATUS: u8 = 124;

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Number of ranks.
    pub ranks: u32,
    /// Program and its arguments.
    pub command: Vec<OsString>,
    /// Stop everything after this long.
    pub timeout: Option<Duration>,
    /// Time between `SIGTERM` and `SIGKILL` when stopping ranks.
    pub grace: Duration,
    /// Prefix every output line with `[rank] `.
    pub prefix: bool,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// `rank` failed first, with `status`.
    Failed {
        /// The first failing rank.
        rank: u32,
        /// Its exit status.
        status: ExitStatus,
    },
    /// The deadline passed with ranks still running.
    TimedOut {
        /// Ranks that were still running.
        running: Vec<u32>,
    },
    /// `hcclrun` received this signal and forwarded it.
    Interrupted(i32),
}

impl Outcome {
    /// The exit status `hcclrun` ends with.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Failed { status, .. } => match (status.code(), status.signal()) {
                (Some(c), _) => u8::try_from(c).ok().filter(|&c| c != 0).unwrap_or(1),
                (None, Some(s)) => 128u8.saturating_add(s as u8),
                (None, None) => 1,
            },
            Outcome::TimedOut { .. } => TIMEOUT_STATUS,
            Outcome::Interrupted(s) => 128u8.saturating_add(*s as u8),
        }
    }
}

/// `hcclrun`'s flags: options first, then the program, whose arguments pass through untouched.
#[derive(Parser, Debug)]
#[command(
    name = "hcclrun",
    about = "Starts N ranks of a program on this host with HCCL_RANK, HCCL_WORLD_SIZE, \
             HCCL_LOCAL_RANK, HCCL_LOCAL_WORLD_SIZE, HCCL_ROOT_ADDR, HCCL_JOB_ID and RANK, \
             WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set.",
    after_help = "The first failing rank stops the others; hcclrun exits with its status. \
                  mpirun's spelling -np N is accepted for -n N.",
    disable_version_flag = true
)]
struct Args {
    /// Number of ranks
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=MAX_RANKS as i64))]
    ranks: u32,
    /// Stop every rank after SECS seconds (exit status 124; 0: no limit)
    #[arg(long, value_name = "SECS", value_parser = secs)]
    timeout: Option<Duration>,
    /// Wait between SIGTERM and SIGKILL when stopping ranks
    #[arg(long, value_name = "SECS", value_parser = secs, default_value = "3")]
    grace: Duration,
    /// Do not prefix output lines with [rank]
    #[arg(long)]
    no_prefix: bool,
    /// The program and its arguments
    #[arg(value_name = "PROGRAM", required = true, trailing_var_arg = true,
          value_parser = clap::value_parser!(OsString))]
    command: Vec<OsString>,
}

fn secs(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0 && *x < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| "not a number of seconds".into())
}

/// Parses `hcclrun`'s arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, clap::Error> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    // mpirun's single-dash `-np`, which clap would read as `-n p`: accepted as the first
    // option, so a program's own `-np` later on is never touched.
    if args.first().is_some_and(|a| a == "-np") {
        args[0] = "--np".into();
    }
    let argv = std::iter::once(OsString::from("hcclrun")).chain(args);
    let a = Args::try_parse_from(argv)?;
    Ok(Options {
        ranks: a.ranks,
        command: a.command,
        timeout: a.timeout.filter(|d| !d.is_zero()),
        grace: a.grace,
        prefix: !a.no_prefix,
    })
}

/// Process-group ids of running ranks (0 = free slot), read by the signal handler.
static PGIDS: [AtomicI32; MAX_RANKS as usize] = [const { AtomicI32::new(0) }; MAX_RANKS as usize];
/// The last signal `hcclrun` received (0 = none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn forward(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
    for p in &PGIDS {
        let g = p.load(Ordering::SeqCst);
        if g > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(-g, sig) };
        }
    }
}

fn install_forwarding() {
    for s in FORWARDED {
        // SAFETY: `forward` only touches atomics and calls kill, both async-signal-safe.
        unsafe { libc::signal(s, forward as *const () as libc::sighandler_t) };
    }
}

fn signal_all(ranks: &[u32], sig: i32) {
    for &r in ranks {
        let g = PGIDS[r as usize].load(Ordering::SeqCst);
        if g > 0 {
            // SAFETY: plain kill of a process group we created and have not reaped yet.
            unsafe { libc::kill(-g, sig) };
        }
    }
}

/// Waits for `pid` to exit without reaping it, so its pid cannot be reused while the signal
/// handler may still target it.
fn wait_exit_unreaped(pid: i32) {
    loop {
        // SAFETY: zeroed siginfo is a valid out buffer for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits on our own child; WNOWAIT leaves it waitable.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Held while one line goes out, on stdout or stderr: both may be the same pipe or terminal,
/// and a line must reach it in one piece, never split by another rank's.
static OUTPUT: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pump(rank: u32, prefix: bool, src: impl Read, to_stderr: bool) {
    let mut r = BufReader::new(src);
    let tag = format!("[{rank}] ");
    let mut line = Vec::new();
    loop {
        line.clear();
        if prefix {
            line.extend_from_slice(tag.as_bytes());
        }
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        let write = |w: &mut dyn Write| w.write_all(&line).and_then(|()| w.flush());
        let _one_line = OUTPUT.lock().unwrap_or_else(|e| e.into_inner());
        // A closed terminal or pipe on our side must not stop the rank: keep draining.
        let _ = if to_stderr {
            write(&mut std::io::stderr().lock())
        } else {
            write(&mut std::io::stdout().lock())
        };
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port for the root info: {e}"))
}

/// The environment of `rank` of `n`.
pub fn rank_env(rank: u32, n: u32, port: u16, job: &str) -> Vec<(String, String)> {
    let (r, n) = (rank.to_string(), n.to_string());
    [
        ("HCCL_RANK", r.clone()),
        ("HCCL_WORLD_SIZE", n.clone()),
        ("HCCL_LOCAL_RANK", r.clone()),
        ("HCCL_LOCAL_WORLD_SIZE", n.clone()),
        ("HCCL_ROOT_ADDR", format!("127.0.0.1:{port}")),
        ("HCCL_JOB_ID", job.to_string()),
        ("RANK", r.clone()),
        ("WORLD_SIZE", n.clone()),
        ("LOCAL_RANK", r),
        ("LOCAL_WORLD_SIZE", n),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

enum Event {
    Exited(u32, ExitStatus),
    WaitFailed(u32, String),
}

/// Runs `o.ranks` copies of the command and returns how the run ended.
pub fn run(o: &Options) -> Result<Outcome, String> {
    if o.ranks == 0 || o.ranks > MAX_RANKS {
        return Err(format!("{} ranks is outside 1..={MAX_RANKS}", o.ranks));
    }
    let port = free_port()?;
    let job = format!("hcclrun-{}-{port}", std::process::id());
    install_forwarding();
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut pumps = 0usize;
    let mut running: Vec<u32> = Vec::new();
    let start = Instant::now();
    for rank in 0..o.ranks {
        let mut c = Command::new(&o.command[0]);
        c.args(&o.command[1..])
            .envs(rank_env(rank, o.ranks, port, &job))
            .stdin(if rank == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            c.pre_exec(|| {
                // If hcclrun itself is killed outright, its ranks must not linger.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        if o.prefix {
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = match c.spawn() {
            Ok(ch) => ch,
            Err(e) => {
                signal_all(&running, libc::SIGKILL);
                for _ in &running {
                    let _ = rx.recv_timeout(Duration::from_secs(5));
                }
                return Err(format!(
                    "rank {rank}: cannot start {}: {e}",
                    o.command[0].to_string_lossy()
                ));
            }
        };
        let pid = child.id() as i32;
        PGIDS[rank as usize].store(pid, Ordering::SeqCst);
        for (src, to_err) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                true,
            ),
        ] {
            if let Some(s) = src {
                let (prefix, done) = (o.prefix, done_tx.clone());
                pumps += 1;
                std::thread::spawn(move || {
                    pump(rank, prefix, s, to_err);
                    let _ = done.send(());
                });
            }
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            wait_exit_unreaped(pid);
            PGIDS[rank as usize].store(0, Ordering::SeqCst);
            let ev = match child.wait() {
                Ok(s) => Event::Exited(rank, s),
                Err(e) => Event::WaitFailed(rank, e.to_string()),
            };
            let _ = tx.send(ev);
        });
        running.push(rank);
    }
    drop(tx);
    let deadline = o.timeout.map(|t| start + t);
    let mut outcome = None;
    while !running.is_empty() && outcome.is_none() {
        let ev = match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    outcome = Some(Outcome::TimedOut {
                        running: running.clone(),
                    });
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(ev) => ev,
                Err(_) => break,
            },
        };
        let (rank, status) = match ev {
            Event::Exited(r, s) => (r, s),
            Event::WaitFailed(r, e) => {
                running.retain(|&x| x != r);
                signal_all(&running, libc::SIGKILL);
                return Err(format!("rank {r}: wait failed: {e}"));
            }
        };
        running.retain(|&x| x != rank);
        let sig = RECEIVED.load(Ordering::SeqCst);
        if sig != 0 {
            outcome = Some(Outcome::Interrupted(sig));
        } else if !status.success() {
            outcome = Some(Outcome::Failed { rank, status });
        }
    }
    if !running.is_empty() {
        stop(&mut running, &rx, o.grace);
    }
    // Output of ranks that left children holding the pipes open is not waited for forever.
    let drain_until = Instant::now() + Duration::from_secs(2);
    for _ in 0..pumps {
        if done_rx
            .recv_timeout(drain_until.saturating_duration_since(Instant::now()))
            .is_err()
        {
            break;
        }
    }
    Ok(outcome.unwrap_or(Outcome::Success))
}

/// `SIGTERM`, then `SIGKILL` after `grace`, to every rank still running; waits for their exit.
fn stop(running: &mut Vec<u32>, rx: &mpsc::Receiver<Event>, grace: Duration) {
    signal_all(running, libc::SIGTERM);
    for (sig, wait) in [(0, grace), (libc::SIGKILL, Duration::from_secs(10))] {
        if sig != 0 {
            signal_all(running, sig);
        }
        let until = Instant::now() + wait;
        while !running.is_empty() {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited(r, _)) | Ok(Event::WaitFailed(r, _)) => {
                    running.retain(|&x| x != r)
                }
                Err(_) => break,
            }
        }
    }
}

fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended abnormally".into(),
    }
}

/// `hcclrun`'s entry point.
pub fn main() -> ExitCode {
    crate::quiet_on_closed_pipe();
    let o = parse(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit());
    let outcome = match run(&o) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("hcclrun: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match &outcome {
        Outcome::Success => {}
        Outcome::Failed { rank, status } => eprintln!(
            "hcclrun: rank {rank} {}; the other ranks were stopped",
            describe(status)
        ),
        Outcome::TimedOut { running } => eprintln!(
            "hcclrun: timeout after {:?}: rank(s) {running:?} still running were stopped",
            o.timeout.unwrap_or_default()
        ),
        Outcome::Interrupted(s) => {
            eprintln!("hcclrun: received signal {s}; forwarded to every rank")
        }
    }
    ExitCode::from(outcome.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Options, clap::Error> {
        parse(s.split_whitespace().map(OsString::from))
    }

    #[test]
    fn parses_flags_and_command() {
        let o = p("-n 3 --timeout=2.5 --no-prefix -- prog -n 5 --x").unwrap();
        assert_eq!(o.ranks, 3);
        assert_eq!(o.timeout, Some(Duration::from_millis(2500)));
        assert!(!o.prefix);
        assert_eq!(o.command, ["prog", "-n", "5", "--x"].map(OsString::from));
        let o = p("-np 2 prog -t 4 -np 3 -h").unwrap();
        assert_eq!(
            o.command,
            ["prog", "-t", "4", "-np", "3", "-h"].map(OsString::from)
        );
        assert_eq!(o.timeout, None);
        assert_eq!(o.grace, Duration::from_secs(3));
        let o = p("--grace 0.5 -n 1 --timeout 0 true").unwrap();
        assert_eq!((o.grace, o.timeout), (Duration::from_millis(500), None));
        assert_eq!(
            p("-h").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn rejects_bad_usage() {
        for s in [
            "prog",
            "-n 0 prog",
            "-n 1025 prog",
            "-n x prog",
            "-n 2",
            "-n 2 --bogus prog",
            "-n 2 --timeout x p",
            "-n 2 --grace -1 p",
        ] {
            let e = p(s).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{s}: {e}");
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Outcome::Success.exit_code(), 0);
        let failed = |raw| Outcome::Failed {
            rank: 1,
            status: ExitStatus::from_raw(raw),
        };
        assert_eq!(failed(3 << 8).exit_code(), 3);
        assert_eq!(failed(libc::SIGKILL).exit_code(), 137);
        assert_eq!(Outcome::TimedOut { running: vec![0] }.exit_code(), 124);
        assert_eq!(Outcome::Interrupted(libc::SIGINT).exit_code(), 130);
    }

    #[test]
    fn environment_names_every_variable() {
        let e = rank_env(2, 4, 5000, "j");
        let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let w = hccl::comm::world::detect(&get).unwrap().unwrap();
        assert_eq!((w.rank, w.size, w.source), (2, 4, "hccl"));
        assert_eq!(w.local_size, Some(4));
        assert_eq!(get("MASTER_PORT").as_deref(), Some("5000"));
    }
}
