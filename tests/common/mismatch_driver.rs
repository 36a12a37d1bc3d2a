//! The child-process driver of the suites whose ranks disagree about an operation
//! (tests/mismatch.rs, tests/compress_mismatch.rs): every case runs in child processes (one per
//! rank, or one holding every rank as a thread) so that the logged error text can be checked.
//! Each rank makes the suite's mismatched call, then a correct AllReduce, then destroys its
//! communicator, and prints one `RESULT` line that the parent parses and checks.
//!
//! A suite using this module has a test named `child_entry` that calls [`child`] with its
//! scenario function; the children are that test binary re-run with `--exact` naming that test.

use std::process::Command;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use hccl::ffi::coll_api::HcclAllReduce;
use hccl::ffi::comm_api::HcclCommDestroy;
use hccl::ffi::types::*;
use HcclResult::*;

use super::*;

const SCENARIO_VAR: &str = "HCCL_TEST_MISMATCH";
const RANK_VAR: &str = "HCCL_TEST_MISMATCH_RANK";
const SIZE_VAR: &str = "HCCL_TEST_MISMATCH_SIZE";
const ROOT_VAR: &str = "HCCL_TEST_MISMATCH_ROOT";
/// The exec timeout of every case: a mismatch must be reported long before it.
pub const EXEC_TIMEOUT_S: u64 = 60;
/// What "at once" means for a failing call: a third of the exec timeout.
pub const QUICK_MS: u128 = (EXEC_TIMEOUT_S as u128 * 1000) / 3;

/// How the ranks reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Threads of one process (memory links).
    Threads,
    /// One process per rank over shared memory.
    Shm,
    /// One process per rank over TCP.
    Tcp,
}

/// A suite's mismatched call: `(scenario, rank, rank count, communicator)` → its result.
pub type Call = fn(&str, u32, u32, HcclComm) -> HcclResult;

/// Runs the scenario on one rank: the mismatched call, then a correct AllReduce, then destroy.
fn rank_body(call: Call, scenario: &str, rank: u32, n: u32, comm: HcclComm) -> String {
    let t0 = Instant::now();
    let code = call(scenario, rank, n, comm);
    let ms = t0.elapsed().as_millis();
    let send = [1.0f32; 7];
    let mut recv = [0f32; 7];
    let t1 = Instant::now();
    // SAFETY: both buffers hold 7 f32; `comm` is live until the destroy below.
    let next = unsafe {
        HcclAllReduce(
            send.as_ptr() as *mut _,
            recv.as_mut_ptr() as *mut _,
            7,
            FP32,
            SUM,
            comm,
            null_mut(),
        )
    };
    let next_ms = t1.elapsed().as_millis();
    // SAFETY: `comm` came from init and is destroyed once.
    let destroy = unsafe { HcclCommDestroy(comm) };
    format!(
        "RESULT rank={rank} code={} ms={ms} next={} next_ms={next_ms} next_sum={} destroy={}",
        code as u32, next as u32, recv[0], destroy as u32
    )
}

/// In a child: runs the scenario on its ranks (one, or every rank as threads), prints their
/// `RESULT` lines and returns true; in the parent: returns false.
pub fn child(call: Call) -> bool {
    let Ok(scenario) = std::env::var(SCENARIO_VAR) else {
        return false;
    };
    let n: u32 = std::env::var(SIZE_VAR).unwrap().parse().unwrap();
    let ri = root_info_from_bytes(&hex_decode(&std::env::var(ROOT_VAR).unwrap()));
    let ranks: Vec<u32> = match std::env::var(RANK_VAR) {
        Ok(r) => vec![r.parse().unwrap()],
        Err(_) => (0..n).collect(),
    };
    let hs: Vec<_> = ranks
        .into_iter()
        .map(|r| {
            let scenario = scenario.clone();
            std::thread::spawn(move || {
                let comm = init_rank(n, &ri, r);
                rank_body(call, &scenario, r, n, comm)
            })
        })
        .collect();
    for h in hs {
        println!("{}", h.join().unwrap());
    }
    true
}

/// One rank's outcome.
#[derive(Debug)]
pub struct Outcome {
    pub rank: u32,
    pub code: u32,
    pub ms: u128,
    pub next: u32,
    pub next_ms: u128,
    pub destroy: u32,
}

/// A `RESULT` line's outcome.
pub fn parse(line: &str) -> Option<Outcome> {
    // libtest may print its own words before ours on the same line.
    let rest = &line[line.find("RESULT ")? + "RESULT ".len()..];
    let field = |k: &str| -> Option<u128> {
        rest.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{k}=")))?
            .parse()
            .ok()
    };
    Some(Outcome {
        rank: field("rank")? as u32,
        code: field("code")? as u32,
        ms: field("ms")?,
        next: field("next")? as u32,
        next_ms: field("next_ms")?,
        destroy: field("destroy")? as u32,
    })
}

/// One case: a scenario on `n` ranks over `links`, with `env` for every rank and `last_env`
/// for the last rank's process only (one process per rank).
pub struct Case<'a> {
    pub scenario: &'a str,
    pub n: u32,
    pub links: Links,
    pub env: &'a [(&'a str, &'a str)],
    pub last_env: &'a [(&'a str, &'a str)],
}

impl<'a> Case<'a> {
    /// A case with `env` for every rank and nothing for the last rank alone.
    pub fn new(scenario: &'a str, n: u32, links: Links, env: &'a [(&'a str, &'a str)]) -> Self {
        Case {
            scenario,
            n,
            links,
            env,
            last_env: &[],
        }
    }

    /// "`scenario` on `n` ranks over `links`", for messages.
    pub fn what(&self) -> String {
        format!(
            "{} on {} ranks over {:?}",
            self.scenario, self.n, self.links
        )
    }
}

/// Runs `case` in child processes; returns each rank's outcome (in rank order) and the
/// children's stderr. Fails when a child fails or a rank does not report.
pub fn run(case: &Case) -> (Vec<Outcome>, String) {
    let hex = hex_encode(&root_info_bytes(&root_info()));
    let exe = std::env::current_exe().unwrap();
    let n = case.n;
    let make = |rank: Option<u32>| {
        let mut c = Command::new(&exe);
        c.args([
            "--exact",
            &test_path("child_entry"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_VAR, case.scenario)
        .env(SIZE_VAR, n.to_string())
        .env(ROOT_VAR, &hex)
        .env("HCCL_EXEC_TIMEOUT", EXEC_TIMEOUT_S.to_string())
        .env("HCCL_CONNECT_TIMEOUT", "60")
        .env("ASCEND_GLOBAL_LOG_LEVEL", "3")
        .env_remove("HCCL_COMPRESSION");
        if let Some(r) = rank {
            c.env(RANK_VAR, r.to_string());
        }
        if case.links == Links::Tcp {
            c.env("HCCL_INTRA_ROCE_ENABLE", "1");
        }
        for (k, v) in case.env {
            c.env(k, v);
        }
        if rank == Some(n - 1) {
            for (k, v) in case.last_env {
                c.env(k, v);
            }
        }
        spawn_piped(c)
    };
    let kids: Vec<Spawned> = match case.links {
        Links::Threads => vec![make(None)],
        Links::Shm | Links::Tcp => (0..n).map(|r| make(Some(r))).collect(),
    };
    let budget = Duration::from_secs(EXEC_TIMEOUT_S * 3);
    let what = case.what();
    let mut outcomes = Vec::new();
    let mut stderr = String::new();
    for k in kids {
        let o = k.finish(budget, Vec::new());
        assert!(
            o.success,
            "{what}: child failed (code {:?}):\n{}\n{}",
            o.code,
            o.stdout,
            tail(&o.stderr, 6000)
        );
        outcomes.extend(o.stdout.lines().filter_map(parse));
        stderr.push_str(&o.stderr);
    }
    outcomes.sort_by_key(|o| o.rank);
    assert_eq!(
        outcomes.len(),
        n as usize,
        "{what}: not every rank reported:\n{outcomes:?}\n{}",
        tail(&stderr, 6000)
    );
    (outcomes, stderr)
}

/// Every rank fails with `HCCL_E_PARA` long before the exec timeout and logs a mismatch, the
/// logs name both calls (`expect` texts), the next call fails at once, and destroying the
/// communicator succeeds.
pub fn expect_all_fail(case: &Case, expect: &[&str]) {
    expect_fail(case, expect, &[]);
}

/// As [`expect_all_fail`], except that the ranks in `may_succeed` may also return success
/// (and need not log a mismatch).
pub fn expect_fail(case: &Case, expect: &[&str], may_succeed: &[u32]) {
    let (outcomes, stderr) = run(case);
    let what = case.what();
    for o in &outcomes {
        let ok = o.code == HCCL_E_PARA as u32
            || (o.code == HCCL_SUCCESS as u32 && may_succeed.contains(&o.rank));
        assert!(
            ok,
            "{what}: rank {} returned {} (want HCCL_E_PARA):\n{outcomes:?}\n{}",
            o.rank,
            o.code,
            tail(&stderr, 6000)
        );
        assert!(o.ms < QUICK_MS, "{what}: rank {} took {} ms", o.rank, o.ms);
        assert_ne!(
            o.next, HCCL_SUCCESS as u32,
            "{what}: rank {}: next call",
            o.rank
        );
        assert!(
            o.next_ms < QUICK_MS,
            "{what}: rank {}: next call took {} ms",
            o.rank,
            o.next_ms
        );
        assert_eq!(o.destroy, HCCL_SUCCESS as u32, "{what}: rank {}", o.rank);
    }
    for e in expect {
        assert!(
            stderr.contains(e),
            "{what}: the logs do not say {e:?}:\n{}",
            tail(&stderr, 6000)
        );
    }
    for r in (0..case.n).filter(|r| !may_succeed.contains(r)) {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&format!("rank {r}")) && l.contains("operation mismatch")),
            "{what}: rank {r} logged no mismatch:\n{}",
            tail(&stderr, 6000)
        );
    }
}
