//! Soak: random collectives (kinds, sizes, data types, operators, roots) on a 4-rank world and
//! its two 2-rank sub-communicators, every result compared bit for bit with the independent
//! reference, alternately on 4 processes and on 4 threads of one process, with a rank killed
//! at a random moment in about half the rounds. Every survivor must fail within the timeouts,
//! destroy its communicators and take part in the next job; after every round each process's
//! open descriptors, threads and memfds must be back at their baseline.
//!
//! Ignored by default; `scripts/soak.sh DURATION` runs it (`HCCL_SOAK_SECONDS`) and prints
//! one summary line: rounds, operations checked, faults injected, wrong results, hangs, leaks.

use crate::common::cases::{p, pm};
use crate::common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::ptr::null_mut;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use HcclResult::*;

const N: u32 = 4;
const ROLE_VAR: &str = "HCCL_TEST_SOAK_ROLE";
const EXEC_TIMEOUT_S: u64 = 5;
const CONNECT_TIMEOUT_S: u64 = 10;
/// How long past the timeouts a survivor may take to report before it counts as hung.
const SLACK: Duration = Duration::from_secs(20);

// ------------------------------------------------------------------------------------------
// Operations.

#[derive(Clone, Copy, Debug)]
enum Kind {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AlltoAll,
    Scatter,
    Ring,
    Barrier,
}

const KINDS: [Kind; 9] = [
    Kind::AllReduce,
    Kind::Broadcast,
    Kind::Reduce,
    Kind::AllGather,
    Kind::ReduceScatter,
    Kind::AlltoAll,
    Kind::Scatter,
    Kind::Ring,
    Kind::Barrier,
];

/// One operation of a job: the same on every rank (derived from the job seed).
#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    dt: u32,
    op: u32,
    count: usize,
    root: u32,
    /// On the rank's 2-rank sub-communicator instead of the world.
    sub: bool,
    seed: u64,
}

fn op_of(job: u64, i: u32) -> Op {
    let h = |k: u64| mix(job ^ mix((i as u64) << 8 | k));
    let kind = KINDS[(h(1) % KINDS.len() as u64) as usize];
    let reduces = matches!(kind, Kind::AllReduce | Kind::Reduce | Kind::ReduceScatter);
    let dt = if reduces {
        REDUCIBLE[(h(2) % REDUCIBLE.len() as u64) as usize]
    } else {
        ALL_DTYPES[(h(2) % ALL_DTYPES.len() as u64) as usize]
    };
    let count = match h(3) % 100 {
        0..=49 => (h(4) % 65) as usize,
        50..=84 => 64 + (h(4) % 4032) as usize,
        85..=98 => 4096 + (h(4) % 61440) as usize,
        _ => ((1 << 20) / esize(dt)) + (h(4) % 1000) as usize,
    };
    let sub = h(5) % 3 == 0;
    let n = if sub { 2 } else { N };
    Op {
        kind,
        dt,
        op: OPS[(h(6) % 4) as usize],
        count,
        root: (h(7) % n as u64) as u32,
        sub,
        seed: h(8),
    }
}

/// Runs `o` as rank `me` of `n` on `comm`: Err(code) when the library fails it, Ok(false) when
/// it returned success with a wrong result.
fn run_op(o: &Op, me: u32, n: u32, comm: HcclComm) -> Result<bool, u32> {
    let (dt, c, s) = (o.dt, o.count, o.seed);
    let es = esize(dt);
    let red = Some(o.op);
    let check = |r: HcclResult, got: &[u8], exp: &[u8]| -> Result<bool, u32> {
        if r != HCCL_SUCCESS {
            return Err(r as u32);
        }
        Ok(got == exp)
    };
    unsafe {
        match o.kind {
            Kind::AllReduce => {
                let input = gen(dt, red, s, me, c);
                let mut out = poison(c * es, s);
                let r = HcclAllReduce(
                    p(&input),
                    pm(&mut out),
                    c as u64,
                    dt,
                    o.op,
                    comm,
                    null_mut(),
                );
                check(r, &out, &ref_reduce_range(dt, o.op, s, n, 0, c))
            }
            Kind::Broadcast => {
                let exp = gen(dt, None, s, o.root, c);
                let mut buf = if me == o.root {
                    exp.clone()
                } else {
                    poison(c * es, s)
                };
                let r = HcclBroadcast(pm(&mut buf), c as u64, dt, o.root, comm, null_mut());
                check(r, &buf, &exp)
            }
            Kind::Reduce => {
                let input = gen(dt, red, s, me, c);
                let mut out = poison(c * es, s);
                let r = HcclReduce(
                    p(&input),
                    pm(&mut out),
                    c as u64,
                    dt,
                    o.op,
                    o.root,
                    comm,
                    null_mut(),
                );
                if me == o.root {
                    check(r, &out, &ref_reduce_range(dt, o.op, s, n, 0, c))
                } else {
                    check(r, &[], &[])
                }
            }
            Kind::AllGather => {
                let input = gen(dt, None, s, me, c);
                let mut out = poison(c * es * n as usize, s);
                let r = HcclAllGather(p(&input), pm(&mut out), c as u64, dt, comm, null_mut());
                let exp: Vec<u8> = (0..n).flat_map(|q| gen(dt, None, s, q, c)).collect();
                check(r, &out, &exp)
            }
            Kind::ReduceScatter => {
                let input = gen(dt, red, s, me, c * n as usize);
                let mut out = poison(c * es, s);
                let r = HcclReduceScatter(
                    p(&input),
                    pm(&mut out),
                    c as u64,
                    dt,
                    o.op,
                    comm,
                    null_mut(),
                );
                check(
                    r,
                    &out,
                    &ref_reduce_range(dt, o.op, s, n, me as usize * c, c),
                )
            }
            Kind::AlltoAll => {
                let input = gen(dt, None, s, me, c * n as usize);
                let mut out = poison(c * es * n as usize, s);
                let r = HcclAlltoAll(
                    p(&input),
                    c as u64,
                    dt,
                    pm(&mut out),
                    c as u64,
                    dt,
                    comm,
                    null_mut(),
                );
                let exp: Vec<u8> = (0..n)
                    .flat_map(|q| gen_range(dt, None, s, q, me as usize * c, c))
                    .collect();
                check(r, &out, &exp)
            }
            Kind::Scatter => {
                let input = gen(dt, None, s, o.root, c * n as usize);
                let mut out = poison(c * es, s);
                let r = HcclScatter(
                    p(&input),
                    pm(&mut out),
                    c as u64,
                    dt,
                    o.root,
                    comm,
                    null_mut(),
                );
                check(r, &out, &gen_range(dt, None, s, o.root, me as usize * c, c))
            }
            Kind::Ring => {
                let (to, from) = ((me + 1) % n, (me + n - 1) % n);
                let input = gen(dt, None, s, me, c);
                let mut out = poison(c * es, s);
                HcclGroupStart();
                HcclSend(p(&input), c as u64, dt, to, comm, null_mut());
                HcclRecv(pm(&mut out), c as u64, dt, from, comm, null_mut());
                let r = HcclGroupEnd();
                check(r, &out, &gen(dt, None, s, from, c))
            }
            Kind::Barrier => check(HcclBarrier(comm, null_mut()), &[], &[]),
        }
    }
}

// ------------------------------------------------------------------------------------------
// Resources of this process.

fn fds() -> (usize, usize) {
    let mut all = 0;
    let mut memfds = 0;
    for e in std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
    {
        all += 1;
        if std::fs::read_link(e.path())
            .map(|t| t.to_string_lossy().starts_with("/memfd:"))
            .unwrap_or(false)
        {
            memfds += 1;
        }
    }
    (all, memfds)
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn resources() -> String {
    let (f, m) = fds();
    format!("fds={f} threads={} memfds={m}", threads())
}

// ------------------------------------------------------------------------------------------
// One rank's job.

/// Joins the job, runs `ops` operations (or until one fails; until `die_at` when given, where
/// the rank destroys its communicators and leaves as if it had died), destroys everything and
/// returns its report line.
fn rank_job(ri: &HcclRootInfo, rank: u32, seed: u64, ops: u32, die_at: Option<u32>) -> String {
    let mut world: HcclComm = null_mut();
    let r = unsafe { HcclCommInitRootInfo(N, ri, rank, &mut world) };
    if r != HCCL_SUCCESS {
        // Nothing was created, so nothing needs destroying.
        return format!(
            "END rank={rank} ops=0 wrong=0 fault=1 code={} destroyed=1",
            r as u32
        );
    }
    let mut ids: Vec<u32> = if rank.is_multiple_of(2) {
        vec![0, 2]
    } else {
        vec![1, 3]
    };
    let mut sub: HcclComm = null_mut();
    let r = unsafe {
        HcclCreateSubCommConfig(
            &mut world,
            2,
            ids.as_mut_ptr(),
            1 + (rank % 2) as u64,
            rank / 2,
            null_mut(),
            &mut sub,
        )
    };
    let (mut done, mut wrong, mut fault) = (0u32, 0u32, r as u32);
    if r == HCCL_SUCCESS {
        for i in 0..ops {
            if die_at == Some(i) {
                break;
            }
            let o = op_of(seed, i);
            let (c, me, n) = if o.sub {
                (sub, rank / 2, 2)
            } else {
                (world, rank, N)
            };
            match run_op(&o, me, n, c) {
                Ok(true) => done += 1,
                Ok(false) => {
                    done += 1;
                    wrong += 1;
                    eprintln!("WRONG rank {rank} op {i}: {o:?}");
                }
                Err(code) => {
                    fault = code;
                    break;
                }
            }
        }
    }
    let mut codes = Vec::new();
    for c in [sub, world] {
        if !c.is_null() {
            codes.push(unsafe { HcclCommDestroy(c) } as u32);
        }
    }
    let destroyed = codes.iter().all(|&c| c == 0) as u32;
    format!(
        "END rank={rank} ops={done} wrong={wrong} fault={} code={fault} destroyed={destroyed}",
        (fault != 0) as u32
    )
}

/// A process rank: runs the jobs it is sent on stdin, one report per job.
fn proc_worker() {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines().map_while(Result::ok) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"JOB") {
            continue;
        }
        let ri = root_info_from_bytes(&hex_decode(f[1]));
        let rank: u32 = f[2].parse().unwrap();
        let seed: u64 = f[3].parse().unwrap();
        let ops: u32 = f[4].parse().unwrap();
        let end = rank_job(&ri, rank, seed, ops, None);
        println!("{end} {}", resources());
    }
}

/// A process of 4 rank threads: runs the jobs it is sent on stdin.
fn thread_worker() {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines().map_while(Result::ok) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"JOB") {
            continue;
        }
        let seed: u64 = f[1].parse().unwrap();
        let ops: u32 = f[2].parse().unwrap();
        let victim: Option<(u32, u32)> = (f[3] != "-").then(|| {
            let (v, at) = f[3].split_once(':').unwrap();
            (v.parse().unwrap(), at.parse().unwrap())
        });
        let ri = root_info();
        let hs: Vec<_> = (0..N)
            .map(|r| {
                let die = victim.filter(|v| v.0 == r).map(|v| v.1);
                std::thread::spawn(move || rank_job(&ri, r, seed, ops, die))
            })
            .collect();
        for h in hs {
            println!("{}", h.join().unwrap());
        }
        println!("ROUND {}", resources());
    }
}

// ------------------------------------------------------------------------------------------
// The driver.

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// Lines already taken off the channel (while checking whether the worker was done).
    early: VecDeque<String>,
    /// The resources reported after its first job: later reports must match.
    baseline: Option<String>,
}

fn spawn_worker(role: &str) -> Worker {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe);
    c.args([
        "--exact",
        &test_path("soak_worker"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE_VAR, role)
    .env("HCCL_EXEC_TIMEOUT", EXEC_TIMEOUT_S.to_string())
    .env("HCCL_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S.to_string())
    .env("ASCEND_GLOBAL_LOG_LEVEL", "4")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn worker");
    let stdin = child.stdin.take().unwrap();
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // Keep the last lines of stderr for reports; never let the pipe fill.
    std::thread::spawn(move || {
        let mut keep: VecDeque<String> = VecDeque::new();
        let mut buf = String::new();
        let _ = err.read_to_string(&mut buf);
        for l in buf.lines() {
            if l.starts_with("WRONG") {
                keep.push_back(l.to_string());
                if keep.len() > 20 {
                    keep.pop_front();
                }
            }
        }
        for l in keep {
            println!("worker stderr: {l}");
        }
    });
    Worker {
        child,
        stdin,
        lines,
        early: VecDeque::new(),
        baseline: None,
    }
}

fn field(s: &str, k: &str) -> u64 {
    s.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{k}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn resources_of(line: &str) -> String {
    ["fds", "threads", "memfds"]
        .iter()
        .map(|k| format!("{k}={}", field(line, k)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Default, Debug)]
struct Tally {
    rounds: u64,
    process_rounds: u64,
    thread_rounds: u64,
    ops: u64,
    faults: u64,
    survivor_errors: u64,
    wrong: u64,
    hangs: u64,
    leaks: u64,
}

/// Reads one line starting with `word` from `w` before `deadline`.
fn read_line(w: &mut Worker, word: &str, deadline: Instant) -> Option<String> {
    while let Some(l) = w.early.pop_front() {
        if let Some(i) = l.find(word) {
            return Some(l[i..].to_string());
        }
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match w.lines.recv_timeout(left) {
            Ok(l) => {
                if let Some(i) = l.find(word) {
                    return Some(l[i..].to_string());
                }
            }
            Err(_) => return None,
        }
    }
}

/// Compares a report's resources with the worker's baseline (set by its first report).
fn check_leak(w: &mut Worker, line: &str, t: &mut Tally, who: &str) {
    let now = resources_of(line);
    match &w.baseline {
        None => w.baseline = Some(now),
        Some(b) if *b != now => {
            t.leaks += 1;
            println!("LEAK {who}: {now}, baseline {b}");
        }
        Some(_) => {}
    }
}

fn count_end(line: &str, t: &mut Tally) {
    t.ops += field(line, "ops");
    t.wrong += field(line, "wrong");
    if field(line, "destroyed") == 0 {
        t.leaks += 1;
        println!("DESTROY FAILED: {line}");
    }
}

fn rng(state: &mut u64) -> u64 {
    *state = mix(*state);
    *state
}

fn process_round(workers: &mut Vec<Worker>, t: &mut Tally, r: &mut u64) {
    while workers.len() < N as usize {
        workers.push(spawn_worker("proc"));
    }
    let ri = root_info();
    let hex = hex_encode(&root_info_bytes(&ri));
    let seed = rng(r);
    let ops = 40 + (rng(r) % 160) as u32;
    for (k, w) in workers.iter_mut().enumerate() {
        writeln!(w.stdin, "JOB {hex} {k} {seed} {ops}").unwrap();
        w.stdin.flush().unwrap();
    }
    let kill = rng(r).is_multiple_of(2);
    let victim = (rng(r) % N as u64) as usize;
    let mut killed_at = None;
    let start = Instant::now();
    if kill {
        // A random moment in what is usually the job's lifetime (init included).
        std::thread::sleep(Duration::from_millis(rng(r) % 1500));
        let w = &mut workers[victim];
        w.early.extend(w.lines.try_iter());
        // Killed only while it still works: a job that already ended injects nothing.
        if !w.early.iter().any(|l| l.contains("END ")) {
            let _ = w.child.kill();
            let _ = w.child.wait();
            killed_at = Some(Instant::now());
            t.faults += 1;
        }
    }
    let limit = Duration::from_secs(EXEC_TIMEOUT_S.max(CONNECT_TIMEOUT_S)) + SLACK;
    let mut keep = Vec::new();
    for (k, mut w) in workers.drain(..).enumerate() {
        if killed_at.is_some() && k == victim {
            continue;
        }
        let deadline =
            killed_at.unwrap_or(start) + limit + if kill { Duration::ZERO } else { limit };
        match read_line(&mut w, "END ", deadline) {
            Some(line) => {
                count_end(&line, t);
                if killed_at.is_some() && field(&line, "fault") == 1 {
                    t.survivor_errors += 1;
                }
                check_leak(&mut w, &line, t, &format!("process rank {k}"));
                keep.push(w);
            }
            None => {
                t.hangs += 1;
                println!("HANG: process rank {k} did not report (killed victim: {killed_at:?})");
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
    *workers = keep;
    t.process_rounds += 1;
}

fn thread_round(worker: &mut Option<Worker>, t: &mut Tally, r: &mut u64) {
    let w = worker.get_or_insert_with(|| spawn_worker("threads"));
    let seed = rng(r);
    let ops = 40 + (rng(r) % 160) as u32;
    let victim = if rng(r).is_multiple_of(2) {
        let v = (rng(r) % N as u64) as u32;
        let at = (rng(r) % ops as u64) as u32;
        t.faults += 1;
        format!("{v}:{at}")
    } else {
        "-".to_string()
    };
    writeln!(w.stdin, "JOB {seed} {ops} {victim}").unwrap();
    w.stdin.flush().unwrap();
    let deadline =
        Instant::now() + Duration::from_secs(EXEC_TIMEOUT_S.max(CONNECT_TIMEOUT_S)) + SLACK * 2;
    for k in 0..N {
        match read_line(w, "END ", deadline) {
            Some(line) => {
                count_end(&line, t);
                if victim != "-" && field(&line, "fault") == 1 {
                    t.survivor_errors += 1;
                }
            }
            None => {
                t.hangs += 1;
                println!("HANG: thread rank {k} did not report");
                let _ = w.child.kill();
                let _ = w.child.wait();
                *worker = None;
                return;
            }
        }
    }
    match read_line(w, "ROUND ", deadline) {
        Some(line) => check_leak(w, &line, t, "thread process"),
        None => t.hangs += 1,
    }
    t.thread_rounds += 1;
}

/// Entry point of the worker processes (does nothing as a plain test).
#[test]
fn soak_worker() {
    match std::env::var(ROLE_VAR).as_deref() {
        Ok("proc") => proc_worker(),
        Ok("threads") => thread_worker(),
        _ => {}
    }
}

#[test]
#[ignore = "long: run by scripts/soak.sh"]
fn soak() {
    let secs: u64 = std::env::var("HCCL_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut t = Tally::default();
    let mut r = seed(&[secs, std::process::id() as u64]);
    let mut procs: Vec<Worker> = Vec::new();
    let mut threads_worker: Option<Worker> = None;
    let parent_base = (fds().0, threads());
    while Instant::now() < end {
        if t.rounds % 2 == 0 {
            process_round(&mut procs, &mut t, &mut r);
        } else {
            thread_round(&mut threads_worker, &mut t, &mut r);
        }
        t.rounds += 1;
        if t.rounds % 10 == 0 {
            println!("progress: {t:?}");
        }
    }
    for mut w in procs.into_iter().chain(threads_worker) {
        drop(w.stdin);
        let _ = w.child.wait();
    }
    // The roots this process served are gone once their jobs are (a root whose rank was killed
    // before it arrived waits out the connect timeout).
    let settle = Instant::now() + Duration::from_secs(CONNECT_TIMEOUT_S) + SLACK;
    while (fds().0, threads()) != parent_base && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(100));
    }
    let parent_now = (fds().0, threads());
    if parent_now != parent_base {
        println!("LEAK parent: fds/threads {parent_now:?}, baseline {parent_base:?}");
        t.leaks += 1;
    }
    println!(
        "SOAK seconds={secs} rounds={} process_rounds={} thread_rounds={} ops_checked={} \
         faults_injected={} survivor_errors={} wrong_results={} hangs={} leaks={}",
        t.rounds,
        t.process_rounds,
        t.thread_rounds,
        t.ops,
        t.faults,
        t.survivor_errors,
        t.wrong,
        t.hangs,
        t.leaks
    );
    assert_eq!((t.wrong, t.hangs, t.leaks), (0, 0, 0), "{t:?}");
}
