//! Helpers shared by the integration tests: running the binaries and reading their tables.

#![allow(dead_code)]

use std::process::{Command, Output};

#[path = "../../../tests/common/skip.rs"]
pub mod skip;

#[path = "../../../tests/common/ompi_tmp.rs"]
pub mod ompi_tmp;

/// Whether `prog --version` runs and succeeds: the program is installed.
pub fn have(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Path of one of the crate's binaries.
pub fn bin(name: &str) -> String {
    match name {
        "all_reduce_test" => env!("CARGO_BIN_EXE_all_reduce_test"),
        "all_gather_test" => env!("CARGO_BIN_EXE_all_gather_test"),
        "broadcast_test" => env!("CARGO_BIN_EXE_broadcast_test"),
        "reduce_scatter_test" => env!("CARGO_BIN_EXE_reduce_scatter_test"),
        "reduce_test" => env!("CARGO_BIN_EXE_reduce_test"),
        "alltoall_test" => env!("CARGO_BIN_EXE_alltoall_test"),
        "alltoallv_test" => env!("CARGO_BIN_EXE_alltoallv_test"),
        "scatter_test" => env!("CARGO_BIN_EXE_scatter_test"),
        "send_recv_test" => env!("CARGO_BIN_EXE_send_recv_test"),
        "barrier_test" => env!("CARGO_BIN_EXE_barrier_test"),
        "hccl_bench" => env!("CARGO_BIN_EXE_hccl_bench"),
        "hccl_compress_bench" => env!("CARGO_BIN_EXE_hccl_compress_bench"),
        other => panic!("no binary {other}"),
    }
    .to_string()
}

/// Every per-operation binary.
pub const BINS: [&str; 9] = [
    "all_reduce_test",
    "all_gather_test",
    "broadcast_test",
    "reduce_scatter_test",
    "reduce_test",
    "alltoall_test",
    "alltoallv_test",
    "scatter_test",
    "send_recv_test",
];

/// Launcher variables of the surrounding environment (ranks, rendezvous, job ids), which would
/// otherwise decide the ranks and the job of a tool started by a test.
pub const LAUNCHER_VARS: [&str; 28] = [
    "HCCL_RANK",
    "HCCL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "HCCL_ROOT_ADDR",
    "HCCL_JOB_ID",
    "OMPI_MCA_orte_ess_jobid",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "PMI_KVSNAME",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
];

/// A TCP port on 127.0.0.1 that this test process holds until the lease is dropped.
///
/// Binding port 0 and reusing the number after closing races with every process that opens a
/// connection (the kernel may hand the port out as a connection's source port). A lease comes
/// from below the kernel's ephemeral range, which the kernel never hands out by itself, and is
/// made exclusive among test processes by an advisory lock on a file named after it; it is
/// checked free before it is returned. The empty lock files stay in the temporary directory:
/// removing one while another process may have it open would let two processes lock "it".
pub struct PortLease {
    /// The port.
    pub port: u16,
    _lock: std::fs::File,
}

/// Leases a port (see [`PortLease`]).
pub fn lease_port() -> PortLease {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    // Below the ephemeral range and below the library's derived range (20000 and up).
    let (first, span) = (10000u32, low.clamp(10001, 20000) - 10000);
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let port = (first + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        let path = std::env::temp_dir().join(format!("hccl-test-port-{port}.lock"));
        let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return PortLease { port, _lock: f };
        }
    }
    panic!("no free port below the ephemeral range");
}

/// A command for `name` with `args`, with launcher variables of the test environment removed
/// so that only `-t` or the test's own variables decide the ranks.
pub fn cmd(name: &str, args: &[&str]) -> Command {
    let mut c = Command::new(bin(name));
    c.args(args);
    for v in LAUNCHER_VARS.iter().chain(&["HCCL_TEST_FAULT_INJECT"]) {
        c.env_remove(v);
    }
    c
}

/// Runs `name` with `args`.
pub fn run(name: &str, args: &[&str]) -> Output {
    cmd(name, args).output().expect("binary runs")
}

/// Stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One parsed table row.
#[derive(Debug)]
pub struct Row {
    pub data_size: u64,
    pub time_us: f64,
    pub alg_bw: f64,
    pub bus_bw: f64,
    pub check: String,
}

/// Parses the table on stdout, asserting the header and the shape of every row.
pub fn table(out: &str) -> Vec<Row> {
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .expect("header line")
        .split_whitespace()
        .collect();
    let names: Vec<&str> = header
        .iter()
        .map(|h| h.split('(').next().unwrap_or(h))
        .collect();
    assert_eq!(
        names,
        [
            "data_size",
            "aveg_time",
            "alg_bandwidth",
            "bus_bandwidth",
            "check_result"
        ],
        "header: {out}"
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "row: {l}");
            Row {
                data_size: f[0].parse().expect("data_size"),
                time_us: f[1].parse().expect("aveg_time"),
                alg_bw: f[2].parse().expect("alg_bandwidth"),
                bus_bw: f[3].parse().expect("bus_bandwidth"),
                check: f[4].to_string(),
            }
        })
        .collect()
}
