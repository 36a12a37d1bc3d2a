//! The comparison programs of `bench/` and `scripts/compare_mpi.sh`: every MPI counterpart of a
//! tester builds, runs with 2 ranks on a few tiny sizes and prints the tester's table with the
//! same data sizes and bus factors and every result checked; an injected fault turns every row
//! into `failed`; the shared-memory ping-pong and the single-copy floor print their checked rows
//! (and `failed` under an injected fault); and the script pairs a
//! every tester with its counterpart into a well-formed table of medians and a plot per operation.
//!
//! Needs `mpirun` and `mpicc` (`scripts/setup.sh` installs them; without them the tests say they
//! are skipped, and fail under CI).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use crate::common;
use crate::common::ompi_tmp::OmpiTmp;
use crate::common::{stderr, stdout, table, LAUNCHER_VARS};
use hccl_tools::cli::RedOp;
use hccl_tools::dtype::DType;
use hccl_tools::ops::{Layout, Op};

/// The operations that have an MPI counterpart (all-to-all-v has none).
fn compared() -> impl Iterator<Item = Op> {
    Op::ALL.into_iter().filter(|&op| op != Op::AlltoAllV)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether MPI is installed; skips (or, under CI, fails) the test when it is not.
fn mpi_present() -> bool {
    if common::have("mpirun") && common::have("mpicc") {
        return true;
    }
    common::skip::skip_unless_ci(
        "mpirun or mpicc not found (scripts/setup.sh installs openmpi-bin, libopenmpi-dev)",
    );
    false
}

/// The programs, built once per test process with warnings as errors, into the build tree
/// (overwritten by the next run rather than left behind in the temporary directory).
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-bench");
        let o = Command::new(repo().join("bench/build.sh"))
            .arg(&dir)
            .env("BENCH_WERROR", "1")
            .output()
            .expect("run bench/build.sh");
        assert!(o.status.success(), "bench/build.sh: {}", stderr(&o));
        dir
    })
}

/// `mpirun -n RANKS PROGRAM ARGS`, with the surrounding launcher variables removed, a time
/// limit and a temporary directory of its own (kept until the launch has ended), spawned with
/// both streams captured.
fn mpirun(ranks: u32, program: &Path, args: &[&str], fault: bool) -> (Child, OmpiTmp) {
    let tmp = OmpiTmp::new();
    let mut c = Command::new("timeout");
    tmp.apply(&mut c);
    c.args(["120", "mpirun", "--oversubscribe"]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    c.args(["-n", &ranks.to_string()]).arg(program).args(args);
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    if fault {
        c.env("HCCL_TEST_FAULT_INJECT", "corrupt");
    } else {
        c.env_remove("HCCL_TEST_FAULT_INJECT");
    }
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    (child, tmp)
}

/// The sizes both runs below ask for.
const SIZES: [u64; 4] = [8, 32, 128, 512];
const SWEEP: [&str; 10] = ["-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-w", "1"];

/// Runs every counterpart at once with `ranks` ranks and root `ranks - 1`; returns each one's
/// operation and output.
fn run_all(ranks: u32, fault: bool) -> Vec<(Op, Output)> {
    let dir = built();
    let root = (ranks - 1).to_string();
    let mut args = SWEEP.to_vec();
    args.extend(["-r", &root]);
    let jobs: Vec<(Op, (Child, OmpiTmp))> = compared()
        .map(|op| {
            let prog = dir.join(format!("mpi_{}", op.name()));
            (op, mpirun(ranks, &prog, &args, fault))
        })
        .collect();
    jobs.into_iter()
        .map(|(op, (child, _tmp))| (op, child.wait_with_output().unwrap()))
        .collect()
}

/// Asserts that `out` is the tester's table for `op` on `ranks` ranks: the tester's data
/// sizes, a positive time, alg = data_size / time and bus = alg × the tester's bus factor
/// (both to the printed precision); returns the check column.
fn assert_rows(op: Op, ranks: u32, out: &str) -> Vec<String> {
    let rows = table(out);
    let want: Vec<u64> = if op == Op::Barrier {
        vec![0]
    } else {
        SIZES
            .iter()
            .map(|&b| Layout::new(op, DType::Fp32, RedOp::Sum, ranks - 1, 0, ranks, b).data_size)
            .collect()
    };
    let got: Vec<u64> = rows.iter().map(|r| r.data_size).collect();
    assert_eq!(got, want, "{}: data sizes\n{out}", op.name());
    for r in &rows {
        assert!(r.time_us > 0.0, "{}: {r:?}", op.name());
        let alg = r.data_size as f64 / (r.time_us * 1e-6) / 1e9;
        // Times are printed with 2 decimals, bandwidths with 6.
        let tol = |x: f64| 1e-6 + x * 0.006 / r.time_us.max(0.01);
        assert!((r.alg_bw - alg).abs() <= tol(alg), "{}: {r:?}", op.name());
        let bus = r.alg_bw * op.bus_factor(ranks);
        assert!((r.bus_bw - bus).abs() <= 2e-6, "{}: {r:?}", op.name());
    }
    rows.into_iter().map(|r| r.check).collect()
}

#[test]
fn every_counterpart_prints_checked_rows_with_the_testers_sizes() {
    if !mpi_present() {
        return;
    }
    for (op, o) in run_all(2, false) {
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(o.status.success(), "mpi_{}: {out}\n{err}", op.name());
        for c in assert_rows(op, 2, &out) {
            assert_eq!(c, "success", "mpi_{}: {out}", op.name());
        }
        assert!(err.contains(", 2 processes"), "mpi_{}: {err}", op.name());
    }
}

/// With 3 ranks the bus factors of the three families differ (4/3, 2/3, 1), and a spoiled
/// output element must fail every row.
#[test]
fn an_injected_fault_fails_every_row() {
    if !mpi_present() {
        return;
    }
    for (op, o) in run_all(3, true) {
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(1), "mpi_{}: {out}\n{err}", op.name());
        for c in assert_rows(op, 3, &out) {
            assert_eq!(c, "failed", "mpi_{}: {out}", op.name());
        }
        assert!(err.contains("check failed"), "mpi_{}: {err}", op.name());
    }
}

/// Usage errors, each in a singleton process (MPI_Init without mpirun: one rank).
#[test]
fn usage_errors_exit_with_2() {
    if !mpi_present() {
        return;
    }
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "mpi_all_reduce",
            &["-d", "fp16"],
            "invalid value 'fp16' for -d",
        ),
        (
            "mpi_all_reduce",
            &["-o", "max"],
            "invalid value 'max' for -o",
        ),
        ("mpi_all_gather", &["-b", "8X"], "invalid value '8X' for -b"),
        ("mpi_barrier", &["--bogus"], "unknown option '--bogus'"),
        (
            "mpi_broadcast",
            &["-r", "1"],
            "root 1 is out of range for 1 ranks",
        ),
    ];
    let jobs: Vec<_> = cases
        .iter()
        .map(|(prog, args, _)| {
            let tmp = OmpiTmp::new();
            let mut c = Command::new("timeout");
            tmp.apply(&mut c)
                .arg("60")
                .arg(built().join(prog))
                .args(*args);
            for v in LAUNCHER_VARS {
                c.env_remove(v);
            }
            let child = c
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (child, tmp)
        })
        .collect();
    for ((prog, args, why), (child, _tmp)) in cases.iter().zip(jobs) {
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{prog} {args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{prog} {args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("usage: "),
            "{prog} {args:?}: {}",
            stderr(&o)
        );
    }
}

/// Runs the two-process bench program `prog` (it forks its own peer) with `args`, its data
/// corrupted when `fault`, under a 60 s timeout.
fn run_bench(prog: &str, args: &[&str], fault: bool) -> Output {
    let mut c = Command::new("timeout");
    c.arg("60").arg(built().join(prog)).args(args);
    if fault {
        c.env("HCCL_TEST_FAULT_INJECT", "corrupt");
    } else {
        c.env_remove("HCCL_TEST_FAULT_INJECT");
    }
    c.output().unwrap()
}

/// The ping-pong's row: (round trip, one way, mean round trip, check).
fn pingpong(fault: bool) -> (Output, f64, f64, f64, String) {
    let o = run_bench("shm_pingpong", &["-n", "2000", "-w", "100"], fault);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}\n{}", stderr(&o));
    let head: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        head,
        [
            "data_size(Bytes)",
            "round_trip(us)",
            "one_way(us)",
            "mean_round_trip(us)",
            "cpus",
            "check_result"
        ]
    );
    let f: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!((f.len(), f[0]), (6, "64"), "{out}");
    let num = |i: usize| f[i].parse::<f64>().expect(f[i]);
    let (rtt, one, mean, check) = (num(1), num(2), num(3), f[5].to_string());
    (o, rtt, one, mean, check)
}

#[test]
fn pingpong_prints_its_checked_floor() {
    if !mpi_present() {
        return;
    }
    let (o, rtt, one, mean, check) = pingpong(false);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(check, "success");
    assert!(rtt > 0.0 && mean > 0.0, "{rtt} {mean}");
    assert!((one - rtt / 2.0).abs() <= 0.001, "{rtt} {one}");
    let (o, .., check) = pingpong(true);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(check, "failed");
    assert!(stderr(&o).contains("wrong words"), "{}", stderr(&o));
}

/// `cma_floor -b 4K -e 16K`: its exit status, rows (size and check) and output.
fn cma_floor(fault: bool) -> (Output, Vec<(u64, String)>, String) {
    let o = run_bench("cma_floor", &["-b", "4K", "-e", "16K", "-n", "20"], fault);
    let out = stdout(&o);
    let mut lines = out.lines();
    let head: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        head,
        [
            "data_size(B)",
            "cma_us",
            "cma_GB/s",
            "memcpy_us",
            "memcpy_GB/s",
            "check_result"
        ],
        "{out}\n{}",
        stderr(&o)
    );
    let rows = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 6, "{out}");
            for x in &f[1..5] {
                assert!(x.parse::<f64>().expect(x) > 0.0, "{out}");
            }
            (f[0].parse::<u64>().expect(f[0]), f[5].to_string())
        })
        .collect();
    (o, rows, out)
}

#[test]
fn cma_floor_prints_checked_rows() {
    if !mpi_present() {
        return;
    }
    let (o, rows, out) = cma_floor(false);
    if o.status.code() == Some(1) && rows.is_empty() {
        // The kernel refuses cross-memory attach here (as the library's probe would find).
        assert!(stderr(&o).contains("process_vm_readv"), "{}", stderr(&o));
        return;
    }
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let want: Vec<(u64, String)> = [4096, 8192, 16384]
        .into_iter()
        .map(|s| (s, "success".to_string()))
        .collect();
    assert_eq!(rows, want, "{out}");
    let (o, rows, out) = cma_floor(true);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", stderr(&o));
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows.iter().all(|(_, c)| c == "failed"), "{out}");
}

/// Runs `scripts/compare_mpi.sh ARGS -o DIR/cmp.png` with our test binaries; returns its
/// output and the plot directory (removed by the caller). The raw outputs it keeps for a person
/// to read are removed here.
fn compare(tag: &str, args: &[&str]) -> (Output, PathBuf) {
    let dir = std::env::temp_dir().join(format!("hccl-compare-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bins = Path::new(env!("CARGO_BIN_EXE_all_reduce_test"))
        .parent()
        .unwrap();
    let tmp = OmpiTmp::new();
    let mut c = Command::new("timeout");
    tmp.apply(&mut c)
        .arg("300")
        .arg(repo().join("scripts/compare_mpi.sh"))
        .args(args)
        .arg("-o")
        .arg(dir.join("cmp.png"))
        .env("HCCL_TOOLS_BIN", bins)
        .env("HCCL_CONNECT_TIMEOUT", "60");
    for v in LAUNCHER_VARS.iter().chain(&["HCCL_TEST_FAULT_INJECT"]) {
        c.env_remove(v);
    }
    let o = c.output().unwrap();
    if let Some(raw) = stderr(&o)
        .lines()
        .find_map(|l| l.strip_prefix("raw outputs in "))
    {
        let _ = std::fs::remove_dir_all(raw.trim());
    }
    (o, dir)
}

/// Asserts that `out` holds `op`'s table of medians with exactly `sizes`, in order, each row
/// well-formed (11 columns, the ratio inside its range, the floor's ratios for sizes up to
/// 4 KiB) and both sides checked in every repeat.
fn assert_table(out: &str, op: &str, sizes: &[u64]) {
    let head = format!("== {op}: {op}_test vs ");
    let at = out.find(&head).unwrap_or_else(|| panic!("{head}\n{out}"));
    let rows: Vec<Vec<&str>> = out[at..]
        .lines()
        .skip(2)
        .take_while(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let got: Vec<u64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(got, sizes, "{op}\n{out}");
    for r in &rows {
        assert_eq!(r.len(), 11, "{op}: {r:?}");
        for c in &r[1..5] {
            c.parse::<f64>().unwrap_or_else(|_| panic!("{op}: {r:?}"));
        }
        assert_eq!(&r[9..], ["success", "success"], "{op}: {r:?}");
        let ratio: f64 = r[5].parse().unwrap();
        let (lo, hi) = r[6].split_once("..").unwrap();
        let (lo, hi): (f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap());
        // Printed to 2 decimals (a slow outlier can print 0.00); with up to two repeats the
        // ratio of the medians lies within the repeats' range.
        assert!(
            0.0 <= lo && lo <= hi && lo - 0.01 <= ratio && ratio <= hi + 0.01,
            "{op}: {r:?}"
        );
        if r[0].parse::<u64>().unwrap() <= 4096 {
            assert!(r[7].parse::<f64>().unwrap() > 0.0, "{op}: {r:?}");
            assert!(r[8].parse::<f64>().unwrap() > 0.0, "{op}: {r:?}");
        } else {
            assert_eq!(&r[7..9], ["-", "-"], "{op}: {r:?}");
        }
    }
}

/// The summary's rows after its two header lines.
fn summary(out: &str) -> Vec<&str> {
    out.lines()
        .skip_while(|l| !l.starts_with("== summary"))
        .skip(2)
        .collect()
}

/// Every operation, once each, two sizes: a table per operation, a plot per operation that
/// moves data, and a summary row per operation.
#[test]
fn compare_script_covers_every_operation() {
    if !mpi_present() {
        return;
    }
    let args = [
        "-n", "2", "-b", "8", "-e", "1K", "-f", "128", "-i", "2", "-s", "2", "-w", "1", "-r", "1",
    ];
    let (o, dir) = compare("all", &args);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.starts_with("latency floor: "), "{out}");
    let ops: Vec<Op> = compared().collect();
    for &op in &ops {
        let sizes: &[u64] = if op == Op::Barrier { &[0] } else { &[8, 1024] };
        assert_table(&out, op.name(), sizes);
        let plot = dir.join(format!("cmp_{}.png", op.name()));
        assert_eq!(plot.exists(), op != Op::Barrier, "{}", plot.display());
    }
    let rows = summary(&out);
    let names: Vec<&str> = rows
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let want: Vec<&str> = ops.iter().map(|op| op.name()).collect();
    assert_eq!(names, want, "{out}");
    assert!(rows.iter().all(|l| l.ends_with(" ok")), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Medians over two repeats, and the sweep split where the iteration count changes (the last
/// size, past 1 MiB, comes from a second run with -i iterations).
#[test]
fn compare_script_prints_medians_and_plots() {
    if !mpi_present() {
        return;
    }
    let args = [
        "--op",
        "all_reduce,barrier",
        "-n",
        "2",
        "-b",
        "8",
        "-e",
        "2M",
        "-f",
        "512",
        "-i",
        "3",
        "-s",
        "2",
        "-w",
        "1",
        "-r",
        "2",
    ];
    let (o, dir) = compare("medians", &args);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}\n{err}");
    assert_table(&out, "all_reduce", &[8, 4096, 2097152]);
    assert_table(&out, "barrier", &[0]);
    assert!(err.contains("== all_reduce repeat 2/2"), "{err}");
    assert_eq!(summary(&out).len(), 2, "{out}");
    let plot = std::fs::read(dir.join("cmp_all_reduce.png")).expect("all_reduce plot");
    assert!(plot.starts_with(b"\x89PNG\r\n\x1a\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
