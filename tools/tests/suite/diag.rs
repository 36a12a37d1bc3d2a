//! `hccl_diag` on one host: a healthy run, and bootstrap failures with their hints.

use crate::common;

use std::process::{Command, Output};

fn diag(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hccl_diag"));
    c.args(args);
    let extra = ["HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT"];
    for v in common::LAUNCHER_VARS.iter().chain(&extra) {
        c.env_remove(v);
    }
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn three_ranks_are_healthy_and_every_pair_is_measured() {
    let o = diag(&["--size", "3", "--bytes", "64K", "--iters", "5"])
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    for want in [
        "interface",
        "bootstrap ports",
        "shared memory",
        "single copy",
        "RDMA devices",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert!(out.contains("bootstrap           ok: 3 ranks"), "{out}");
    assert!(out.contains("HEALTHY: 3 of 3 pairs passed"), "{out}");
    for title in ["latency (us", "bandwidth (GB/s)"] {
        let at = out.find(title).unwrap();
        let rows: Vec<&str> = out[at..].lines().skip(2).take(3).collect();
        for (r, row) in rows.iter().enumerate() {
            let f: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(f[0], format!("r{r}"), "{row}");
            for (c, v) in f[1..].iter().enumerate() {
                if c == r {
                    assert_eq!(*v, "-");
                } else {
                    assert!(v.parse::<f64>().unwrap() > 0.0, "{row}");
                }
            }
        }
    }
}

fn lone_rank(root_addr: &str) -> Output {
    diag(&["--timeout", "1"])
        .env("HCCL_RANK", "1")
        .env("HCCL_WORLD_SIZE", "2")
        .env("HCCL_ROOT_ADDR", root_addr)
        .output()
        .unwrap()
}

#[test]
fn bootstrap_failures_come_with_hints() {
    // A leased port nobody listens on.
    let closed = common::lease_port();
    let o = lone_rank(&format!("127.0.0.1:{}", closed.port));
    assert_eq!(o.status.code(), Some(1));
    let e = text(&o.stderr);
    assert!(e.contains("bootstrap FAIL on rank 1"), "{e}");
    assert!(e.contains("hint: port blocked"), "{e}");
    let o = lone_rank("no-such-host.invalid:4000");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("hint: name not resolvable"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn usage_errors_exit_2() {
    for a in [&["--bogus"][..], &["--size", "0"], &["--bytes", "1X"]] {
        let o = diag(a).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let e = text(&o.stderr);
        assert!(
            e.starts_with("error:")
                && (e.contains("Usage: hccl_diag") || e.contains("try '--help'")),
            "{e}"
        );
    }
}

#[test]
fn corrupted_pair_is_reported_and_fails_the_run() {
    let o = diag(&["--size", "3", "--bytes", "4K", "--iters", "2"])
        .env("HCCL_DIAG_FAULT_INJECT", "corrupt")
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("pair r0-r1: FAIL"), "{out}");
    assert!(out.contains("UNHEALTHY: 2 of 3 pairs passed"), "{out}");
    let lat = out.find("latency").unwrap();
    let row0 = out[lat..].lines().nth(2).unwrap();
    assert_eq!(row0.split_whitespace().nth(2), Some("FAIL"), "{row0}");
}

#[test]
fn rank_table_bootstrap_under_hcclrun() {
    let leases = [common::lease_port(), common::lease_port()];
    let ports: Vec<u16> = leases.iter().map(|l| l.port).collect();
    let dev = |r: usize| {
        format!(
            r#"{{"device_id":"{r}","device_ip":"127.0.0.1","device_port":"{}","rank_id":"{r}"}}"#,
            ports[r]
        )
    };
    let table = format!(
        r#"{{"status":"completed","version":"1.0","server_count":"1","server_list":[{{"server_id":"n0","host_ip":"127.0.0.1","device":[{},{}]}}]}}"#,
        dev(0),
        dev(1)
    );
    let path = std::env::temp_dir().join(format!("hccl-diag-rt-{}.json", std::process::id()));
    std::fs::write(&path, table).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hcclrun"))
        .args(["-n", "2", "--no-prefix", "--timeout", "60", "--"])
        .arg(env!("CARGO_BIN_EXE_hccl_diag"))
        .args(["--bytes", "4K", "--iters", "2", "--rank-table"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("ok: 2 ranks (rank table)"), "{out}");
}

#[test]
fn loopback_across_hosts_is_an_interface_mismatch() {
    let lease = common::lease_port();
    let port = lease.port;
    let children: Vec<_> = (0..2)
        .map(|r| {
            diag(&["--bytes", "4K", "--iters", "2", "--timeout", "20"])
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("HCCL_IF_IP", "127.0.0.1")
                .env("HCCL_HOST_ID", format!("simulated-host-{r}"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let out = text(&outs[0].stdout);
    assert_eq!(
        outs[0].status.code(),
        Some(1),
        "{out}\n{}",
        text(&outs[0].stderr)
    );
    assert!(outs[1].status.success(), "{}", text(&outs[1].stderr));
    assert!(
        out.contains("host simulated-host-0") && out.contains("host simulated-host-1"),
        "{out}"
    );
    assert!(
        out.contains("uses loopback 127.0.0.1 while the ranks span several hosts"),
        "{out}"
    );
    assert!(out.contains("hint: interface mismatch"), "{out}");
    assert!(
        out.contains("UNHEALTHY: 1 of 1 pairs passed, 2 host problem(s)"),
        "{out}"
    );
}
