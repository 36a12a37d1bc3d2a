//! Ranks that disagree about a compressed AllReduce (compressed on one rank and plain on
//! another, different methods, different counts, `HCCL_COMPRESSION` set on one rank only) get
//! `HCCL_E_PARA` naming both calls on every rank, never success with wrong data: over threads of
//! one process and over processes on shared memory, on one host and on two "hosts"
//! (`HCCL_RANK_HOST_MAP`). Afterwards the communicator is broken: the next call fails at once
//! and destroying it succeeds.
//!
//! Every case runs in child processes (one per rank, or one holding every rank as a thread) so
//! that the logged error text can be checked; each rank prints one `RESULT` line.

mod common;

use common::cases::{p, pm};
use common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::ext_api::*;
use hccl::ffi::types::*;
use std::process::Command;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use HcclResult::*;

const SCENARIO_VAR: &str = "HCCL_TEST_CMISMATCH";
const RANK_VAR: &str = "HCCL_TEST_CMISMATCH_RANK";
const SIZE_VAR: &str = "HCCL_TEST_CMISMATCH_SIZE";
const ROOT_VAR: &str = "HCCL_TEST_CMISMATCH_ROOT";
/// The exec timeout of every case: a mismatch must be reported long before it.
const EXEC_TIMEOUT_S: u64 = 60;

const FP16: u32 = 1;
const INT8: u32 = 3;
const TOPK: u32 = 4;

/// How the ranks reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Links {
    /// Threads of one process (memory links).
    Threads,
    /// One process per rank over shared memory.
    Shm,
}

/// A compressed AllReduce of `count` fp32 elements.
///
/// # Safety
/// `send` and `recv` must hold `count` fp32 values; `comm` must be live.
unsafe fn compressed(
    send: *mut std::ffi::c_void,
    recv: *mut std::ffi::c_void,
    count: u64,
    method: u32,
    ratio: f32,
    comm: HcclComm,
) -> HcclResult {
    let cfg = HcclExtCompressConfig {
        method,
        blockSize: 0,
        topkRatio: ratio,
        compressLevel0: 0,
        residual: null_mut(),
        residualCount: 0,
    };
    // SAFETY: the caller's contract; `cfg` outlives the call.
    unsafe { HcclExtAllReduceCompressed(send, recv, count, FP32, SUM, &cfg, comm, null_mut()) }
}

/// The (mismatched) call rank `rank` of `n` makes in `scenario`.
fn call(scenario: &str, rank: u32, n: u32, comm: HcclComm) -> HcclResult {
    let last = rank == n - 1;
    let big = vec![0u8; 64 << 10];
    let mut out = vec![0u8; 64 << 10];
    let (sp, rp) = (p(&big), pm(&mut out));
    unsafe {
        match scenario {
            // The last rank calls the plain AllReduce of the same shape.
            "plain" => {
                if last {
                    HcclAllReduce(sp, rp, 1024, FP32, SUM, comm, null_mut())
                } else {
                    compressed(sp, rp, 1024, INT8, 0.0, comm)
                }
            }
            // The last rank compresses to fp16, the others to int8.
            "method" => compressed(sp, rp, 1024, if last { FP16 } else { INT8 }, 0.0, comm),
            // The last rank keeps 2% of the elements, the others 1%.
            "ratio" => compressed(sp, rp, 1024, TOPK, if last { 0.02 } else { 0.01 }, comm),
            // The last rank reduces 2048 elements, the others 1024.
            "count" => compressed(sp, rp, if last { 2048 } else { 1024 }, INT8, 0.0, comm),
            // Every rank calls the plain AllReduce; `HCCL_COMPRESSION` is set on some only.
            "env" => HcclAllReduce(sp, rp, 1024, FP32, SUM, comm, null_mut()),
            _ => panic!("unknown scenario {scenario}"),
        }
    }
}

/// Runs the scenario on one rank: the mismatched call, then a correct AllReduce, then destroy.
fn rank_body(scenario: &str, rank: u32, n: u32, comm: HcclComm) -> String {
    let t0 = Instant::now();
    let code = call(scenario, rank, n, comm);
    let ms = t0.elapsed().as_millis();
    let send = [1.0f32; 7];
    let mut recv = [0f32; 7];
    let t1 = Instant::now();
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
    let destroy = unsafe { HcclCommDestroy(comm) };
    format!(
        "RESULT rank={rank} code={} ms={ms} next={} next_ms={next_ms} destroy={}",
        code as u32, next as u32, destroy as u32
    )
}

/// A child's work: one rank, or every rank as threads.
fn child() -> bool {
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
                rank_body(&scenario, r, n, comm)
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
struct Outcome {
    rank: u32,
    code: u32,
    ms: u128,
    next: u32,
    next_ms: u128,
    destroy: u32,
}

fn parse(line: &str) -> Option<Outcome> {
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
/// for the last rank's process only (shared memory).
struct Case<'a> {
    scenario: &'a str,
    n: u32,
    links: Links,
    env: &'a [(&'a str, &'a str)],
    last_env: &'a [(&'a str, &'a str)],
}

/// Runs `case`; returns each rank's outcome and the children's stderr.
fn run(case: &Case) -> (Vec<Outcome>, String) {
    let hex = hex_encode(&root_info_bytes(&root_info()));
    let exe = std::env::current_exe().unwrap();
    let n = case.n;
    let make = |rank: Option<u32>| {
        let mut c = Command::new(&exe);
        c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
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
        Links::Shm => (0..n).map(|r| make(Some(r))).collect(),
    };
    let budget = Duration::from_secs(EXEC_TIMEOUT_S * 3);
    let what = format!("{} over {:?}", case.scenario, case.links);
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
fn expect_all_fail(case: Case, expect: &[&str]) {
    let (outcomes, stderr) = run(&case);
    let what = format!(
        "{} on {} ranks over {:?}",
        case.scenario, case.n, case.links
    );
    let quick = (EXEC_TIMEOUT_S as u128 * 1000) / 3;
    for o in &outcomes {
        assert_eq!(
            o.code,
            HCCL_E_PARA as u32,
            "{what}: rank {} (want HCCL_E_PARA):\n{outcomes:?}\n{}",
            o.rank,
            tail(&stderr, 6000)
        );
        assert!(o.ms < quick, "{what}: rank {} took {} ms", o.rank, o.ms);
        assert_ne!(o.next, HCCL_SUCCESS as u32, "{what}: rank {}", o.rank);
        assert!(o.next_ms < quick, "{what}: rank {}: next call", o.rank);
        assert_eq!(o.destroy, HCCL_SUCCESS as u32, "{what}: rank {}", o.rank);
    }
    for e in expect {
        assert!(
            stderr.contains(e),
            "{what}: the logs do not say {e:?}:\n{}",
            tail(&stderr, 6000)
        );
    }
    for r in 0..case.n {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&format!("rank {r}")) && l.contains("operation mismatch")),
            "{what}: rank {r} logged no mismatch:\n{}",
            tail(&stderr, 6000)
        );
    }
}

/// The child processes' entry point (does nothing when run as a plain test).
#[test]
fn child_entry() {
    child();
}

const LINKS: [Links; 2] = [Links::Threads, Links::Shm];
const TWO_HOSTS: [(&str, &str); 1] = [("HCCL_RANK_HOST_MAP", "a,a,b,b")];

#[test]
fn compressed_against_plain_fails_every_rank() {
    let expect = [
        "called compressed AllReduce count=1024 int8:256 fp32 sum",
        "called AllReduce count=1024 fp32 sum",
    ];
    for links in LINKS {
        let case = |n, env| Case {
            scenario: "plain",
            n,
            links,
            env,
            last_env: &[],
        };
        expect_all_fail(case(2, &[]), &expect);
        expect_all_fail(case(4, &TWO_HOSTS), &expect);
    }
}

#[test]
fn different_methods_fail_every_rank() {
    for links in LINKS {
        let case = |scenario, n, env| Case {
            scenario,
            n,
            links,
            env,
            last_env: &[],
        };
        expect_all_fail(
            case("method", 2, &[]),
            &[
                "called compressed AllReduce count=1024 ",
                "int8:256",
                "fp16",
            ],
        );
        expect_all_fail(
            case("method", 4, &TWO_HOSTS),
            &[
                "called compressed AllReduce count=1024 ",
                "int8:256",
                "fp16",
            ],
        );
        expect_all_fail(
            case("ratio", 2, &[]),
            &[
                "called compressed AllReduce count=1024 ",
                "topk:0.01",
                "topk:0.02",
            ],
        );
    }
}

#[test]
fn different_counts_fail_every_rank() {
    for links in LINKS {
        expect_all_fail(
            Case {
                scenario: "count",
                n: 2,
                links,
                env: &[],
                last_env: &[],
            },
            &[
                "called compressed AllReduce count=",
                "count=2048 int8:256",
                "count=1024 int8:256",
            ],
        );
    }
}

/// `HCCL_COMPRESSION` set in one rank's process only: its plain AllReduces run compressed, the
/// others' do not, and every rank says so instead of exchanging wrong data.
#[test]
fn compression_variable_on_one_rank_only_fails_every_rank() {
    expect_all_fail(
        Case {
            scenario: "env",
            n: 4,
            links: Links::Shm,
            env: &TWO_HOSTS,
            last_env: &[("HCCL_COMPRESSION", "int8")],
        },
        &[
            "called compressed AllReduce count=1024 int8:256 fp32 sum",
            "called AllReduce count=1024 fp32 sum",
        ],
    );
}
