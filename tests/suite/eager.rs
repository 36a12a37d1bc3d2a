//! Rooted small operations complete eagerly over shared memory and between threads: a rank
//! that only sends (a Broadcast or Scatter root, a Reduce leaf) returns as soon as its message
//! sits in the link, up to the link's depth ahead of a receiver that is not calling yet. Checked
//! here: every value is right when the receiver catches up; a mismatch is reported by every rank
//! by the call after it (once the disagreeing rank has returned); a receiver killed while the
//! root runs ahead turns into an error on the root, not a hang.
//!
//! Every case runs in child processes (one per rank over shared memory, or one holding both
//! ranks as threads). Ranks are ordered by gates, never by sleeps: a gated rank waits for a line
//! on its stdin (processes) or for a count of signals (threads), and the parent opens a gate
//! only after the lines that prove the other rank got where the case needs it.

use crate::common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::HcclCommDestroy;
use hccl::ffi::types::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::ptr::null_mut;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use HcclResult::*;

const CASE_VAR: &str = "HCCL_TEST_EAGER";
const RANK_VAR: &str = "HCCL_TEST_EAGER_RANK";
const ROOT_VAR: &str = "HCCL_TEST_EAGER_ROOT";
/// Calls a sender makes before its receiver calls at all: the depth of both eager links (the
/// shared-memory ring's slots, the memory link's eager queue).
const AHEAD: u32 = 8;
/// Exec timeout of every case: a hang shows as a failure long before the test's own budget.
const EXEC_TIMEOUT_S: u64 = 30;

/// Signals counted in this process (threads: every rank shares them).
static SIGNALS: (Mutex<u32>, Condvar) = (Mutex::new(0), Condvar::new());

/// Says "this rank got there": a `SIGNAL` line (processes) or a count (threads).
fn signal(threads: bool) {
    if threads {
        *SIGNALS.0.lock().unwrap() += 1;
        SIGNALS.1.notify_all();
    } else {
        println!("SIGNAL");
        std::io::stdout().flush().unwrap();
    }
}

/// Waits until the parent opens this rank's gate (processes: a line on stdin) or until `need`
/// signals were given (threads).
fn gate(threads: bool, need: u32) {
    if threads {
        let mut n = SIGNALS.0.lock().unwrap();
        while *n < need {
            n = SIGNALS.1.wait(n).unwrap();
        }
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    }
}

/// The rank that only sends in `op` (2 ranks, root 0).
fn sender_of(op: &str) -> u32 {
    if op == "reduce" {
        1
    } else {
        0
    }
}

/// Call `i` of `op` on `rank` of 2 (fp32, 2 elements per rank, root 0); returns its result
/// and, on the rank that receives, whether it got exactly the expected values.
fn rooted(op: &str, rank: u32, i: u32, comm: HcclComm) -> (HcclResult, bool) {
    let v = |k: u32| (i * 100 + k) as f32 + 0.25;
    unsafe {
        match op {
            "broadcast" => {
                let mut buf = if rank == 0 { [v(0), v(1)] } else { [0.0; 2] };
                let rc = HcclBroadcast(buf.as_mut_ptr() as *mut _, 2, FP32, 0, comm, null_mut());
                (rc, buf == [v(0), v(1)])
            }
            "scatter" => {
                let send = [v(0), v(1), v(2), v(3)];
                let mut recv = [0f32; 2];
                let rc = HcclScatter(
                    send.as_ptr() as *mut _,
                    recv.as_mut_ptr() as *mut _,
                    2,
                    FP32,
                    0,
                    comm,
                    null_mut(),
                );
                (rc, recv == [v(2 * rank), v(2 * rank + 1)])
            }
            "reduce" => {
                let send = if rank == 0 { [1.0, 2.0] } else { [v(0), v(1)] };
                let mut recv = [0f32; 2];
                let rc = HcclReduce(
                    send.as_ptr() as *mut _,
                    recv.as_mut_ptr() as *mut _,
                    2,
                    FP32,
                    SUM,
                    0,
                    comm,
                    null_mut(),
                );
                (rc, rank != 0 || recv == [1.0 + v(0), 2.0 + v(1)])
            }
            _ => panic!("unknown operation {op}"),
        }
    }
}

/// An AllReduce of one element whose result every rank checks: the communicator still works.
fn healthy(comm: HcclComm) -> bool {
    let send = [1.5f32];
    let mut recv = [0f32];
    let rc = unsafe {
        HcclAllReduce(
            send.as_ptr() as *mut _,
            recv.as_mut_ptr() as *mut _,
            1,
            FP32,
            SUM,
            comm,
            null_mut(),
        )
    };
    rc == HCCL_SUCCESS && recv[0] == 3.0
}

/// One rank of `case`; returns its `RESULT` line.
fn rank_body(case: &str, rank: u32, comm: HcclComm, threads: bool) -> String {
    let line = if let Some(op) = case.strip_prefix("ahead_") {
        if rank == sender_of(op) {
            // AHEAD calls while the receiver has not called at all (its gate is shut).
            let codes: Vec<HcclResult> = (0..AHEAD).map(|i| rooted(op, rank, i, comm).0).collect();
            signal(threads);
            let ok = codes.iter().all(|&c| c == HCCL_SUCCESS);
            format!("ok={} healthy={}", ok, healthy(comm))
        } else {
            gate(threads, 1);
            let got: Vec<(HcclResult, bool)> =
                (0..AHEAD).map(|i| rooted(op, rank, i, comm)).collect();
            let ok = got.iter().all(|&(c, right)| c == HCCL_SUCCESS && right);
            format!("ok={ok} healthy={} got={got:?}", healthy(comm))
        }
    } else if let Some(kind) = case.strip_prefix("next_") {
        // Call 1 disagrees; call 2 (a Broadcast from root 0, which the root only sends in)
        // starts once both ranks have returned from call 1.
        let (count, root) = match kind {
            "count" => (if rank == 1 { 3 } else { 2 }, 0),
            "roots" => (2, rank),
            _ => panic!("unknown case {case}"),
        };
        let mut buf = [7f32; 3];
        let first = unsafe {
            HcclBroadcast(
                buf.as_mut_ptr() as *mut _,
                count,
                FP32,
                root,
                comm,
                null_mut(),
            )
        };
        signal(threads);
        gate(threads, 2);
        let second =
            unsafe { HcclBroadcast(buf.as_mut_ptr() as *mut _, 2, FP32, 0, comm, null_mut()) };
        format!("first={} second={}", first as u32, second as u32)
    } else if case == "killed" {
        if rank == 0 {
            // Runs ahead until the ring is full, then waits for a receiver that is killed.
            let mut done = 0;
            let mut code = HCCL_SUCCESS;
            for i in 0..100_000 {
                code = rooted("broadcast", 0, i, comm).0;
                if code != HCCL_SUCCESS {
                    break;
                }
                done += 1;
                if done == AHEAD {
                    signal(threads);
                }
            }
            format!("done={done} code={}", code as u32)
        } else {
            signal(threads);
            gate(threads, u32::MAX);
            unreachable!("the parent kills this rank");
        }
    } else {
        panic!("unknown case {case}")
    };
    format!("RESULT rank={rank} {line}")
}

/// The children's entry point (does nothing when run as a plain test).
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return;
    };
    let ri = root_info_from_bytes(&hex_decode(&std::env::var(ROOT_VAR).unwrap()));
    let ranks: Vec<u32> = match std::env::var(RANK_VAR) {
        Ok(r) => vec![r.parse().unwrap()],
        Err(_) => vec![0, 1],
    };
    let threads = ranks.len() > 1;
    let hs: Vec<_> = ranks
        .into_iter()
        .map(|r| {
            let case = case.clone();
            std::thread::spawn(move || {
                let comm = init_rank(2, &ri, r);
                let line = rank_body(&case, r, comm, threads);
                assert_eq!(unsafe { HcclCommDestroy(comm) }, HCCL_SUCCESS);
                line
            })
        })
        .collect();
    for h in hs {
        println!("{}", h.join().unwrap());
    }
}

/// A child running `case` as rank `rank` (`None`: both ranks as threads), its stdin held by
/// the parent, its stdout lines on a channel.
struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn(case: &str, rank: Option<u32>, root: &str) -> Kid {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        &test_path("child_entry"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CASE_VAR, case)
    .env(ROOT_VAR, root)
    .env(
        "HCCL_EXEC_TIMEOUT",
        (EXEC_TIMEOUT_S * time_scale() as u64).to_string(),
    )
    .env("HCCL_CONNECT_TIMEOUT", "60")
    .env("ASCEND_GLOBAL_LOG_LEVEL", "3")
    .env_remove("HCCL_ALGO")
    .env_remove("HCCL_INTRA_ROCE_ENABLE")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(r) = rank {
        c.env(RANK_VAR, r.to_string());
    }
    let mut child = c.spawn().expect("spawn child");
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
            let _ = tx.send(l);
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    Kid {
        stdin: child.stdin.take(),
        child,
        lines,
        stderr,
    }
}

impl Kid {
    /// Waits for the next line containing `what` (collecting every line into `seen`).
    fn wait_for(&self, what: &str, seen: &mut Vec<String>, deadline: Instant) -> bool {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.contains(what);
                    seen.push(l);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    fn open_gate(&mut self) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "go").unwrap();
        s.flush().unwrap();
    }

    /// Waits for the child to exit; returns its `RESULT` lines and its stderr.
    fn finish(mut self, mut seen: Vec<String>, deadline: Instant) -> (Vec<String>, String) {
        while self.wait_for("RESULT", &mut seen, deadline) {}
        if Instant::now() >= deadline {
            let _ = self.child.kill();
        }
        let status = self.child.wait().unwrap();
        let stderr = self.stderr.join().unwrap();
        assert!(
            status.success(),
            "child failed ({status}):\n{}\n{}",
            seen.join("\n"),
            tail(&stderr, 6000)
        );
        // libtest may print its own words before ours on the same line.
        let results = seen
            .iter()
            .filter_map(|l| l.find("RESULT ").map(|i| l[i..].to_string()))
            .collect();
        (results, stderr)
    }
}

fn budget() -> Instant {
    Instant::now() + scaled(Duration::from_secs(3 * EXEC_TIMEOUT_S))
}

fn root_hex() -> String {
    hex_encode(&root_info_bytes(&root_info()))
}

/// Runs `case` over threads (one child; its gates are signal counts) and over shared memory
/// (one child per rank; the parent opens `gated` ranks' gates once `signals` SIGNAL lines came
/// from `signalling` ranks). Returns each run's RESULT lines (rank order) and stderr.
fn run_case(case: &str, signalling: &[u32], gated: &[u32]) -> Vec<(String, Vec<String>, String)> {
    let mut runs = Vec::new();
    let dl = budget();
    let kid = spawn(case, None, &root_hex());
    let (mut res, err) = kid.finish(Vec::new(), dl);
    res.sort();
    runs.push(("threads".to_string(), res, err));

    let root = root_hex();
    let mut kids: Vec<Kid> = (0..2).map(|r| spawn(case, Some(r), &root)).collect();
    let mut seen: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for &r in signalling {
        assert!(
            kids[r as usize].wait_for("SIGNAL", &mut seen[r as usize], dl),
            "{case}: rank {r} never got there: {:?}",
            seen[r as usize]
        );
    }
    for &r in gated {
        kids[r as usize].open_gate();
    }
    let mut res = Vec::new();
    let mut errs = String::new();
    for (k, s) in kids.into_iter().zip(seen) {
        let (r, e) = k.finish(s, dl);
        res.extend(r);
        errs.push_str(&e);
    }
    res.sort();
    runs.push(("shm".to_string(), res, errs));
    runs
}

/// A sender makes AHEAD calls while its receiver has not called yet; then the receiver makes
/// its calls and gets every value right, and the communicator works on.
#[test]
fn senders_run_ahead_and_receivers_catch_up() {
    for op in ["broadcast", "scatter", "reduce"] {
        let sender = sender_of(op);
        let receiver = 1 - sender;
        for (links, res, err) in run_case(&format!("ahead_{op}"), &[sender], &[receiver]) {
            assert_eq!(
                res.len(),
                2,
                "{op} over {links}: {res:?}\n{}",
                tail(&err, 4000)
            );
            for l in &res {
                assert!(
                    l.contains("ok=true healthy=true"),
                    "{op} over {links}: {l}\n{}",
                    tail(&err, 4000)
                );
            }
        }
    }
}

/// A mismatch in call 1: the rank that receives the disagreeing message fails in that call,
/// and every rank's call 2 (which starts after every rank returned from call 1) fails, even
/// on a root that only sends in it.
#[test]
fn a_mismatch_is_reported_by_every_rank_by_the_next_call() {
    let para = HCCL_E_PARA as u32;
    let ok = HCCL_SUCCESS as u32;
    for kind in ["count", "roots"] {
        for (links, res, err) in run_case(&format!("next_{kind}"), &[0, 1], &[0, 1]) {
            let what = format!("{kind} over {links}: {res:?}\n{}", tail(&err, 4000));
            assert_eq!(res.len(), 2, "{what}");
            for l in &res {
                let field = |k: &str| -> u32 {
                    let f = l.split_whitespace().find_map(|f| f.strip_prefix(k));
                    f.unwrap().parse().unwrap()
                };
                let (first, second) = (field("first="), field("second="));
                assert!(first == ok || first == para, "{what}");
                assert_ne!(second, ok, "{what}");
            }
            if kind == "count" {
                // Rank 1 received the root's message and saw the other count.
                assert!(res[1].contains(&format!("first={para}")), "{what}");
            }
            assert!(err.contains("operation mismatch"), "{what}");
            assert!(err.contains("called Broadcast count="), "{what}");
        }
    }
}

/// A root that runs ahead of a receiver which is then killed fails (its ring is full, and the
/// receiver's liveness connection closes) long before the exec timeout, not hanging.
#[test]
fn a_root_running_ahead_of_a_killed_receiver_fails() {
    let root = root_hex();
    let dl = budget();
    let mut kids: Vec<Kid> = (0..2).map(|r| spawn("killed", Some(r), &root)).collect();
    let mut seen: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for r in [1, 0] {
        assert!(
            kids[r].wait_for("SIGNAL", &mut seen[r], dl),
            "rank {r} never got there: {:?}",
            seen[r]
        );
    }
    let mut victim = kids.pop().unwrap();
    victim.child.kill().unwrap();
    let killed_at = Instant::now();
    let _ = victim.child.wait();
    let (res, err) = kids.pop().unwrap().finish(seen.swap_remove(0), dl);
    let took = killed_at.elapsed();
    assert_eq!(res.len(), 1, "{res:?}\n{}", tail(&err, 4000));
    let l = &res[0];
    assert!(!l.contains("code=0"), "the root never failed: {l}");
    assert!(
        took < scaled(Duration::from_secs(EXEC_TIMEOUT_S / 3)),
        "the root took {took:?} to fail: {l}\n{}",
        tail(&err, 4000)
    );
    let done: u32 = l
        .split_whitespace()
        .find_map(|f| f.strip_prefix("done="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(done >= AHEAD, "{l}");
}
