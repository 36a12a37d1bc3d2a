//! Hostile and broken peers against the bootstrap root and the data listener: a rank count out
//! of bounds on one rank, idle and garbage connections to the root port during init, thousands
//! of connections naming unknown communicators to a data port during a job, and the process
//! running out of descriptors. Attacks target loopback only.
//!
//! Each case runs the job in child processes (one per rank, or one holding the ranks as
//! threads) and plays the attacker from this process, watching the children through `/proc`.

use crate::common::*;
use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::ptr::null_mut;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use HcclResult::*;

const ROLE_VAR: &str = "HCCL_TEST_HOSTILE";
const ARG_VAR: &str = "HCCL_TEST_HOSTILE_ARG";
/// The connect timeout of the jobs: every failure here must come long before it.
const CONNECT_TIMEOUT_S: u64 = 60;

/// A child with piped stdin, stdout lines on a channel, stderr collected.
struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

fn spawn(role: &str, arg: &str, env: &[(&str, &str)]) -> Kid {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe);
    c.args([
        "--exact",
        &test_path("child_entry"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE_VAR, role)
    .env(ARG_VAR, arg)
    .env("HCCL_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S.to_string())
    .env("HCCL_EXEC_TIMEOUT", "60")
    .env("ASCEND_GLOBAL_LOG_LEVEL", "3")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("spawn child");
    let stdin = child.stdin.take();
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let (ltx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = ltx.send(l);
        }
    });
    let (etx, stderr) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        let _ = etx.send(s);
    });
    Kid {
        child,
        stdin,
        lines,
        stderr,
    }
}

impl Kid {
    /// The rest of the first stdout line containing `word ` (panics after `timeout`).
    fn expect(&mut self, word: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(i) = l.find(&format!("{word} ")) {
                        return l[i + word.len() + 1..].to_string();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    let err = self.stderr.recv_timeout(Duration::from_secs(5));
                    panic!(
                        "child never said {word}:\n{}",
                        tail(&err.unwrap_or_default(), 6000)
                    );
                }
            }
        }
    }

    fn tell(&mut self, what: &str) {
        let s = self.stdin.as_mut().expect("stdin");
        writeln!(s, "{what}").unwrap();
        s.flush().unwrap();
    }

    /// Waits for the child to exit; returns (success, stderr).
    fn finish(mut self, timeout: Duration) -> (bool, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let err = self
                    .stderr
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_default();
                return (st.success(), err);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let err = self
                    .stderr
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_default();
                return (false, format!("[killed after {timeout:?}]\n{err}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn field(s: &str, k: &str) -> u64 {
    s.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{k}=")))
        .unwrap_or_else(|| panic!("no {k} in {s:?}"))
        .parse()
        .unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// CPU time (user + system, in clock ticks) of the thread of `pid` named `name`.
fn thread_cpu(pid: u32, name: &str) -> Option<u64> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let p = t.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).ok()?;
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        return Some(f[11].parse::<u64>().ok()? + f[12].parse::<u64>().ok()?);
    }
    None
}

fn clock_ticks() -> u64 {
    // SAFETY: plain sysconf query.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as u64 }
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn allreduce_ok(comm: HcclComm, round: u32, rank_sum: f32) -> bool {
    let send = [round as f32; 64];
    let mut recv = [0f32; 64];
    let r = unsafe {
        HcclAllReduce(
            send.as_ptr() as *mut _,
            recv.as_mut_ptr() as *mut _,
            64,
            FP32,
            SUM,
            comm,
            null_mut(),
        )
    };
    r == HCCL_SUCCESS && recv.iter().all(|&x| x == round as f32 * rank_sum)
}

fn wait_stdin_line() {
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
}

// ------------------------------------------------------------------------------------------
// Children.

/// Rank 0 of a 2-rank job whose root it serves: prints the root info, joins, reports.
fn child_root_rank() {
    let ri = root_info();
    println!("ROOTINFO {}", hex_encode(&root_info_bytes(&ri)));
    let t0 = Instant::now();
    let mut c: HcclComm = null_mut();
    let r = unsafe { HcclCommInitRootInfo(2, &ri, 0, &mut c) };
    println!("INIT code={} ms={}", r as u32, t0.elapsed().as_millis());
    // The process is healthy: a new one-rank job starts and computes.
    let ri = root_info();
    let c = init_rank(1, &ri, 0);
    assert!(allreduce_ok(c, 3, 1.0));
    assert_eq!(unsafe { HcclCommDestroy(c) }, HCCL_SUCCESS);
    println!("ALIVE peak_kib={}", peak_rss_kib());
}

/// Rank 1 called with the rank count given as argument.
fn child_bad_rank(n: u32) {
    let ri = root_info_from_bytes(&hex_decode(&std::env::var("HCCL_TEST_ROOT_INFO").unwrap()));
    let t0 = Instant::now();
    let mut c: HcclComm = null_mut();
    let r = unsafe { HcclCommInitRootInfo(n, &ri, 1, &mut c) };
    println!(
        "INIT code={} ms={} peak_kib={}",
        r as u32,
        t0.elapsed().as_millis(),
        peak_rss_kib()
    );
}

/// Two ranks (threads, over TCP when the parent forces it) that report the data port, run
/// checked AllReduces until told to stop, and report.
fn child_job() {
    let ri = root_info();
    let hs: Vec<_> = (0..2u32)
        .map(|r| std::thread::spawn(move || init_rank(2, &ri, r) as usize))
        .collect();
    let comms: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let addr = hccl::transport::acceptor::Acceptor::existing()
        .expect("the data listener runs")
        .addr();
    println!("PORT addr={} port={}", addr.ip(), addr.port());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = comms
        .iter()
        .map(|&c| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut ops, mut bad) = (0u32, 0u32);
                // Both ranks run the same number of operations: stop is sampled every 64.
                loop {
                    for _ in 0..64 {
                        ops += 1;
                        if !allreduce_ok(c as HcclComm, ops, 2.0) {
                            bad += 1;
                        }
                    }
                    let s = stop.load(std::sync::atomic::Ordering::SeqCst);
                    let mut both = [s as u8 as f32; 1];
                    let mut agreed = [0f32; 1];
                    unsafe {
                        HcclAllReduce(
                            both.as_mut_ptr() as *mut _,
                            agreed.as_mut_ptr() as *mut _,
                            1,
                            FP32,
                            MAX,
                            c as HcclComm,
                            null_mut(),
                        )
                    };
                    if agreed[0] > 0.0 {
                        break;
                    }
                }
                (ops, bad)
            })
        })
        .collect();
    wait_stdin_line();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut ops, mut bad) = (0, 0);
    for w in workers {
        let (o, b) = w.join().unwrap();
        ops += o;
        bad += b;
    }
    for c in comms {
        assert_eq!(unsafe { HcclCommDestroy(c as HcclComm) }, HCCL_SUCCESS);
    }
    println!("DONE ops={ops} bad={bad}");
}

/// A job whose process then runs out of descriptors until told to go on.
fn child_exhausted() {
    let ri = root_info();
    let hs: Vec<_> = (0..2u32)
        .map(|r| std::thread::spawn(move || init_rank(2, &ri, r) as usize))
        .collect();
    let comms: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let addr = hccl::transport::acceptor::Acceptor::existing()
        .expect("the data listener runs")
        .addr();
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit calls on valid structs.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) };
    // The count includes the descriptor that lists them, closed right after: no slot is left.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
    let low = libc::rlimit {
        rlim_cur: open,
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    println!("PORT addr={} port={}", addr.ip(), addr.port());
    wait_stdin_line();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    let hs: Vec<_> = comms
        .iter()
        .map(|&c| std::thread::spawn(move || allreduce_ok(c as HcclComm, 5, 2.0)))
        .collect();
    let ok = hs.into_iter().all(|h| h.join().unwrap());
    for c in comms {
        assert_eq!(unsafe { HcclCommDestroy(c as HcclComm) }, HCCL_SUCCESS);
    }
    println!("DONE ok={}", ok as u32);
}

/// The child processes' entry point (does nothing when run as a plain test).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        return;
    };
    let arg = std::env::var(ARG_VAR).unwrap_or_default();
    match role.as_str() {
        "root_rank" => child_root_rank(),
        "bad_rank" => child_bad_rank(arg.parse().unwrap()),
        "job" => child_job(),
        "exhausted" => child_exhausted(),
        _ => panic!("unknown role {role}"),
    }
}

// ------------------------------------------------------------------------------------------
// Cases.

/// One rank of a 2-process job called with nRanks = 0xFFFFFFFF or 2^24: both ranks fail with
/// `HCCL_E_PARA` long before the connect timeout, rank 0's process (which serves the root)
/// survives without a large allocation, and no log line is long.
#[test]
fn rank_count_out_of_bounds_on_one_rank() {
    for bad in [u32::MAX, 1 << 24] {
        let mut r0 = spawn("root_rank", "", &[]);
        let ri = r0.expect("ROOTINFO", Duration::from_secs(60));
        let mut r1 = spawn(
            "bad_rank",
            &bad.to_string(),
            &[("HCCL_TEST_ROOT_INFO", &ri)],
        );
        let limit = Duration::from_secs(CONNECT_TIMEOUT_S / 2);
        let i1 = r1.expect("INIT", limit);
        let i0 = r0.expect("INIT", limit);
        let alive = r0.expect("ALIVE", limit);
        let (ok1, err1) = r1.finish(limit);
        let (ok0, err0) = r0.finish(limit);
        let what = format!("nRanks={bad}");
        assert!(ok0 && ok1, "{what}: a process failed:\n{err0}\n{err1}");
        for (rank, i) in [(0, &i0), (1, &i1)] {
            assert_eq!(
                field(i, "code"),
                HCCL_E_PARA as u64,
                "{what}: rank {rank}: {i}"
            );
            assert!(
                field(i, "ms") < CONNECT_TIMEOUT_S * 1000 / 2,
                "{what}: rank {rank}: {i}"
            );
        }
        // Nothing near a per-rank allocation for 2^24 ranks (hundreds of megabytes).
        for (rank, peak) in [(0, field(&alive, "peak_kib")), (1, field(&i1, "peak_kib"))] {
            assert!(
                peak < 200 * 1024,
                "{what}: rank {rank} peaked at {peak} KiB"
            );
        }
        for (rank, err) in [(0, &err0), (1, &err1)] {
            assert!(
                err.contains(&format!("nRanks={bad}")),
                "{what}: rank {rank} did not log the bad count:\n{}",
                tail(err, 4000)
            );
            let longest = err.lines().map(str::len).max().unwrap_or(0);
            assert!(
                longest < 2000,
                "{what}: rank {rank} logged a {longest}-byte line"
            );
        }
    }
}

/// Silent, half-sent and garbage connections to the root port while a job initialises: init
/// still succeeds within its connect timeout (the vendor root served one connection at a time
/// and gave each 10 s, so two idle connections failed an init with a 15 s timeout).
#[test]
fn idle_and_garbage_connections_to_the_root() {
    if is_child() {
        let ri = root_info();
        let b = root_info_bytes(&ri);
        let addr = SocketAddr::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(b[16], b[17], b[18], b[19])),
            u16::from_le_bytes([b[12], b[13]]),
        );
        let mut junk: Vec<TcpStream> = Vec::new();
        for i in 0..300 {
            let Ok(mut c) = TcpStream::connect(addr) else {
                continue;
            };
            let _ = match i % 3 {
                0 => Ok(()),
                1 => c.write_all(&[0x48; 40]),
                _ => c.write_all(&[0xff; 96]),
            };
            junk.push(c);
        }
        let t0 = Instant::now();
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                std::thread::spawn(move || {
                    let mut c: HcclComm = null_mut();
                    let res = unsafe { HcclCommInitRootInfo(2, &ri, r, &mut c) };
                    (res, c as usize)
                })
            })
            .collect();
        for h in hs {
            let (res, c) = h.join().unwrap();
            assert_eq!(res, HCCL_SUCCESS, "init failed after {:?}", t0.elapsed());
            assert_eq!(unsafe { HcclCommDestroy(c as HcclComm) }, HCCL_SUCCESS);
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
        drop(junk);
        return;
    }
    run_self(
        "idle_and_garbage_connections_to_the_root",
        &[("HCCL_CONNECT_TIMEOUT", "15"), ("HCCL_IF_IP", "127.0.0.1")],
        Duration::from_secs(120),
    );
}

/// Lets this process open `n` more descriptors than the usual default allows.
fn allow_descriptors(n: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit calls on a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        l.rlim_cur = l.rlim_cur.max(n.min(l.rlim_max));
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
}

/// Opens `k` connections to `addr`, each sending `hello` (when given), and keeps them open.
fn flood(addr: SocketAddr, k: usize, hello: Option<&dyn Fn(usize) -> Vec<u8>>) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(k);
    for i in 0..k {
        let Ok(mut c) = TcpStream::connect(addr) else {
            continue;
        };
        if let Some(h) = hello {
            let _ = c.write_all(&h(i));
        }
        out.push(c);
    }
    out
}

/// Waits until `pid` has at most `want` descriptors open, up to `limit`; returns the count.
fn settle_fds(pid: u32, want: usize, limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let n = open_fds(pid);
        if n <= want || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 3000 connections naming unknown communicators, then 300 silent ones, against the data port
/// of a job at work: the job's descriptors come back to their baseline within the handshake
/// deadline (with margin), no thread is started per connection, and every result is right.
#[test]
fn unknown_communicator_flood_on_a_data_port() {
    let mut job = spawn(
        "job",
        "",
        &[("HCCL_INTRA_ROCE_ENABLE", "1"), ("HCCL_IF_IP", "127.0.0.1")],
    );
    let port = job.expect("PORT", Duration::from_secs(60));
    let addr = SocketAddr::new(
        port.split_whitespace()
            .find_map(|f| f.strip_prefix("addr="))
            .unwrap()
            .parse()
            .unwrap(),
        field(&port, "port") as u16,
    );
    let pid = job.child.id();
    let base_fds = open_fds(pid);
    let base_threads = threads(pid);
    let margin = hccl::transport::acceptor::HANDSHAKE_DEADLINE * 3;
    let handshake = |i: usize| {
        hccl::transport::acceptor::encode_handshake((0xbad_0000 + i as u128, 1, 0, 0), 1).to_vec()
    };
    allow_descriptors(4096);
    let conns = flood(addr, 3000, Some(&handshake));
    assert!(conns.len() >= 2900, "only {} connections", conns.len());
    let fds = settle_fds(pid, base_fds + 2, margin);
    assert!(
        fds <= base_fds + 2,
        "{} unknown-communicator connections: the job holds {fds} descriptors, {base_fds} before",
        conns.len()
    );
    assert!(
        threads(pid) <= base_threads + 2,
        "threads: {} vs {base_threads}",
        threads(pid)
    );
    drop(conns);
    let idle = flood(addr, 300, None);
    let fds = settle_fds(pid, base_fds + 2, margin);
    assert!(
        fds <= base_fds + 2,
        "{} silent connections: the job holds {fds} descriptors after the handshake deadline, \
         {base_fds} before",
        idle.len()
    );
    assert!(
        threads(pid) <= base_threads + 2,
        "threads: {} vs {base_threads}",
        threads(pid)
    );
    drop(idle);
    job.tell("stop");
    let done = job.expect("DONE", Duration::from_secs(120));
    let (ok, err) = job.finish(Duration::from_secs(60));
    assert!(ok, "job failed:\n{}", tail(&err, 4000));
    assert!(field(&done, "ops") > 0, "{done}");
    assert_eq!(field(&done, "bad"), 0, "{done}");
}

/// The job's process runs out of descriptors while connections keep arriving: its listener
/// thread pauses instead of spinning on `accept` (under 5% of a core, measured from /proc),
/// logs the condition once, and the communicator works once descriptors are free again.
#[test]
fn descriptor_exhaustion_does_not_spin() {
    let mut job = spawn(
        "exhausted",
        "",
        &[("HCCL_INTRA_ROCE_ENABLE", "1"), ("HCCL_IF_IP", "127.0.0.1")],
    );
    let port = job.expect("PORT", Duration::from_secs(60));
    let addr = SocketAddr::new(
        port.split_whitespace()
            .find_map(|f| f.strip_prefix("addr="))
            .unwrap()
            .parse()
            .unwrap(),
        field(&port, "port") as u16,
    );
    let pid = job.child.id();
    let conns = flood(addr, 20, None);
    let before = thread_cpu(pid, "hccl-acceptor").expect("the listener thread");
    let t0 = Instant::now();
    // A measurement window, not synchronisation: CPU used over ~3 s of wall time.
    std::thread::sleep(Duration::from_secs(3));
    let used = thread_cpu(pid, "hccl-acceptor").unwrap() - before;
    let wall_ticks = t0.elapsed().as_secs_f64() * clock_ticks() as f64;
    drop(conns);
    job.tell("go");
    let done = job.expect("DONE", Duration::from_secs(120));
    let (ok, err) = job.finish(Duration::from_secs(60));
    assert!(
        (used as f64) < 0.05 * wall_ticks,
        "the listener used {used} of {wall_ticks:.0} clock ticks while out of descriptors"
    );
    assert!(ok, "job failed:\n{}", tail(&err, 4000));
    assert_eq!(field(&done, "ok"), 1, "{done}");
    assert_eq!(
        err.matches("out of file descriptors").count(),
        1,
        "logged once:\n{}",
        tail(&err, 4000)
    );
}
