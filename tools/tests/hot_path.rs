//! Instructions and stores per call on the small-message path, counted by valgrind's callgrind
//! in the testers under `mpirun` (2 processes) and held to a budget.
//!
//! A small call's time between processes is set by its sender's stores: they queue behind the
//! message's store into the cell its receiver polls (README, "Small-message hot path"). The
//! count stays low only while a few helpers are inlined and `Result` fits a register, which a
//! small change elsewhere can undo without any test failing; this one fails instead.
//!
//! Counts are exact, not timed. Collection runs only inside the entry point
//! (`--toggle-collect`), so initialisation is left out. Only the counted rank runs under
//! valgrind, tens of times slower than its peer, which runs natively: whatever the counted rank
//! waits for has arrived when it looks, so its count holds no polling and comes out the same
//! from launch to launch (but for the peer's sleeps: see the test). This file is a test
//! executable of its own because cargo runs test executables one at a time: tests running
//! beside it would take the CPU from the native peer, and the counted rank would poll again.
//!
//! Budgets are for the `test` profile (`cargo test`), about 10% above what it counts: the change
//! that took the release build's Broadcast root from 212 to 138 stores per call took this
//! profile's from 291 to 232, so a wider margin would let such a regression pass. The release
//! build executes about a third less. A change that needs more raises the budget here, with its
//! reason, after measuring the release build (README). Without valgrind or mpirun the test is
//! skipped (under CI it fails: `scripts/setup.sh` installs both).

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

/// Calls counted per launch: the tester's timed iterations plus its warm-up ones.
const ITERS: u64 = 2000;
const WARMUP: u64 = 100;
/// Launches per operation at most (two at least).
const LAUNCHES_MAX: usize = 5;

/// One operation's budget.
struct Case {
    tester: &'static str,
    entry: &'static str,
    bytes: u64,
    /// The rank counted: the sender of a rooted operation (root 0); in the others every
    /// rank sends.
    rank: usize,
    max_instructions: u64,
    max_stores: u64,
}

/// Counted in the `test` profile at introduction (instructions / stores per call, over two
/// launches each): Broadcast root 1,167 / 232, Scatter root 1,352 / 257, Reduce leaf 1,086 /
/// 229, AllReduce 1,875-1,881 / 362, AllGather 1,564-1,574 / 315-316, AlltoAll 2,022 / 403.
/// The revision before the stores were cut counts Broadcast root 1,334 / 291, Scatter root
/// 1,528 / 327 and AllReduce 2,155 / 433: over both budgets.
const CASES: [Case; 6] = [
    Case {
        tester: "broadcast_test",
        entry: "HcclBroadcast",
        bytes: 16,
        rank: 0,
        max_instructions: 1_290,
        max_stores: 255,
    },
    Case {
        tester: "scatter_test",
        entry: "HcclScatter",
        bytes: 16,
        rank: 0,
        max_instructions: 1_500,
        max_stores: 285,
    },
    Case {
        tester: "all_reduce_test",
        entry: "HcclAllReduce",
        bytes: 8,
        rank: 0,
        max_instructions: 2_070,
        max_stores: 400,
    },
    Case {
        tester: "all_gather_test",
        entry: "HcclAllGather",
        bytes: 16,
        rank: 0,
        max_instructions: 1_730,
        max_stores: 348,
    },
    Case {
        tester: "alltoall_test",
        entry: "HcclAlltoAll",
        bytes: 16,
        rank: 0,
        max_instructions: 2_230,
        max_stores: 445,
    },
    Case {
        tester: "reduce_test",
        entry: "HcclReduce",
        bytes: 16,
        rank: 1,
        max_instructions: 1_200,
        max_stores: 252,
    },
];

/// Instructions and data writes (stores) callgrind counted in one rank's output file.
fn totals(file: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("callgrind output {}: {e}", file.display()));
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` line in {}", file.display()))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let events = line("events:");
    let sums = line("summary:");
    let get = |name: &str| -> u64 {
        let i = events
            .iter()
            .position(|e| *e == name)
            .unwrap_or_else(|| panic!("callgrind counted no {name} (events: {events:?})"));
        sums.get(i).map_or(0, |v| v.parse().expect("a count"))
    };
    (get("Ir"), get("Dw"))
}

/// Runs `case`'s tester on 2 processes, the counted rank under callgrind and its peer natively,
/// and returns the counted rank's instructions and stores per call inside the entry point.
fn measure(case: &Case, dir: &Path) -> (u64, u64) {
    let out = dir.join(format!("{}.out", case.tester));
    let tester = common::bin(case.tester);
    let size = case.bytes.to_string();
    let (iters, warmup) = (ITERS.to_string(), WARMUP.to_string());
    let run = [
        tester.as_str(),
        "-b",
        &size,
        "-e",
        &size,
        "-n",
        &iters,
        "-w",
        &warmup,
        "-c",
        "0",
    ];
    let toggle = format!("--toggle-collect={}", case.entry);
    let out_file = format!("--callgrind-out-file={}", out.display());
    let counted = [
        "valgrind",
        "--tool=callgrind",
        "--cache-sim=yes",
        "--dump-line=no",
        &toggle,
        &out_file,
    ];
    let tmp = common::ompi_tmp::OmpiTmp::new();
    let mut c = Command::new("mpirun");
    tmp.apply(&mut c);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.arg("--oversubscribe");
    // One application context per rank, in rank order.
    for r in 0..2 {
        if r > 0 {
            c.arg(":");
        }
        c.args(["-n", "1"]);
        if r == case.rank {
            c.args(counted);
        }
        c.args(run);
    }
    let o = c
        .env("HCCL_CONNECT_TIMEOUT", "120")
        .env("HCCL_EXEC_TIMEOUT", "300")
        .env_remove("HCCL_RANK")
        .env_remove("RANK")
        .env_remove("MASTER_ADDR")
        .env_remove("HCCL_ROOT_ADDR")
        .output()
        .expect("run mpirun");
    assert!(
        o.status.success(),
        "{} with rank {} under callgrind failed:\n{}{}",
        case.tester,
        case.rank,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let (ir, dw) = totals(&out);
    (ir / (ITERS + WARMUP), dw / (ITERS + WARMUP))
}

#[test]
fn small_calls_stay_within_their_instruction_and_store_budgets() {
    for prog in ["mpirun", "valgrind"] {
        if !common::have(prog) {
            common::skip::skip_unless_ci(&format!(
                "{prog} not found (scripts/setup.sh installs it)"
            ));
            return;
        }
    }
    let dir = std::env::temp_dir().join(format!("hccl-hot-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut over = Vec::new();
    for case in &CASES {
        // The native peer still sleeps now and then while it waits for the slow rank, and then
        // the counted rank pays for waking it; other work on the host can deschedule the peer,
        // and then the counted rank polls. The fewest of two launches is what the path costs,
        // and over budget up to three more launches decide.
        let mut best = (u64::MAX, u64::MAX);
        for launch in 0..LAUNCHES_MAX {
            let m = measure(case, &dir);
            best = (best.0.min(m.0), best.1.min(m.1));
            if launch >= 1 && best.0 <= case.max_instructions && best.1 <= case.max_stores {
                break;
            }
        }
        eprintln!(
            "{} {} B: {} instructions, {} stores per call (budget {}, {})",
            case.entry, case.bytes, best.0, best.1, case.max_instructions, case.max_stores
        );
        if best.0 > case.max_instructions || best.1 > case.max_stores {
            over.push(format!(
                "{} {} B: {} instructions (budget {}), {} stores (budget {}) per call",
                case.entry, case.bytes, best.0, case.max_instructions, best.1, case.max_stores
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        over.is_empty(),
        "the small-message path grew (see README, \"Small-message hot path\"), or other work \
         on the host kept the counted ranks polling in every launch:\n{}",
        over.join("\n")
    );
}
