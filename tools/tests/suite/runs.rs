//! End-to-end runs of every binary: ranks as threads, fault injection, output files, and two
//! processes with torchrun-style variables.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{cmd, lease_port, run, stderr, stdout, table, BINS};

const SMALL: [&str; 10] = ["-b", "1", "-e", "4K", "-f", "16", "-n", "2", "-w", "1"];

fn small_with(extra: &[&str]) -> Vec<String> {
    SMALL.iter().chain(extra).map(|s| s.to_string()).collect()
}

#[test]
fn every_binary_succeeds_on_2_3_4_thread_ranks() {
    let mut jobs = Vec::new();
    for b in BINS {
        for t in ["2", "3", "4"] {
            // The last rank as root exercises a non-zero root where there is one.
            let root = (t.parse::<u32>().unwrap() - 1).to_string();
            let a = small_with(&["-t", t, "-r", &root, "-d", "int16"]);
            let child = cmd(b, &a.iter().map(String::as_str).collect::<Vec<_>>())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            jobs.push((b, t, child));
        }
    }
    for (b, t, child) in jobs {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{b} -t {t}: {}", stderr(&o));
        let rows = table(&stdout(&o));
        assert_eq!(rows.len(), 4, "{b} -t {t}");
        for r in rows {
            assert_eq!(r.check, "success", "{b} -t {t}: {r:?}");
        }
    }
}

#[test]
fn every_reduction_and_type_checks_out() {
    let types = [
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "fp16", "fp32",
        "fp64", "bfp16",
    ];
    let mut jobs = Vec::new();
    for d in types {
        for o in ["sum", "prod", "max", "min"] {
            let a = [
                "-t", "3", "-b", "2", "-e", "2K", "-f", "32", "-n", "1", "-w", "0",
            ];
            let child = cmd("all_reduce_test", &a)
                .args(["-d", d, "-o", o])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            jobs.push((d, o, child));
        }
    }
    for (d, op, child) in jobs {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{d} {op}: {}", stderr(&o));
        for r in table(&stdout(&o)) {
            assert_eq!(r.check, "success", "{d} {op}: {r:?}");
        }
    }
}

#[test]
fn unrepresentable_or_unchecked_results_are_null() {
    let o = run(
        "all_reduce_test",
        &[
            "-t", "7", "-d", "int8", "-o", "prod", "-b", "8", "-e", "8", "-n", "1",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(table(&stdout(&o))[0].check, "NULL");
    let o = run(
        "alltoall_test",
        &["-t", "2", "-c", "0", "-b", "8", "-e", "8"],
    );
    assert!(o.status.success());
    assert_eq!(table(&stdout(&o))[0].check, "NULL");
}

#[test]
fn injected_fault_is_reported_as_failed() {
    for (b, extra) in [
        ("all_reduce_test", &[][..]),
        ("reduce_test", &["-r", "1"][..]),
        ("all_gather_test", &[]),
        ("send_recv_test", &[]),
    ] {
        let a = small_with(&["-t", "3"]);
        let o = cmd(b, &a.iter().map(String::as_str).collect::<Vec<_>>())
            .args(extra)
            .env("HCCL_TEST_FAULT_INJECT", "corrupt")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{b}");
        for r in table(&stdout(&o)) {
            assert_eq!(r.check, "failed", "{b}: {r:?}");
        }
        assert!(stderr(&o).contains("check failed at element 0"), "{b}");
    }
}

#[test]
fn csv_and_json_files_are_well_formed() {
    let dir = std::env::temp_dir().join(format!("hccl-tools-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("out.csv");
    let json = dir.join("out.json");
    let o = cmd(
        "reduce_scatter_test",
        &[
            "-t", "2", "-b", "64", "-e", "1K", "-f", "4", "-n", "2", "-w", "0",
        ],
    )
    .arg("--csv")
    .arg(&csv)
    .arg(format!("--json={}", json.display()))
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = table(&stdout(&o));
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), rows.len() + 1);
    let cols = lines[0].split(',').count();
    assert!(lines[0].starts_with("op,dtype,reduce_op,root,ranks,data_size,"));
    for (l, r) in lines[1..].iter().zip(&rows) {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), cols, "{l}");
        assert_eq!(f[0], "reduce_scatter");
        assert_eq!(f[5].parse::<u64>().unwrap(), r.data_size);
        assert_eq!(f[cols - 1], "success");
    }
    let jt = std::fs::read_to_string(&json).unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&jt).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{jt}"));
    assert_eq!(doc["op"], "reduce_scatter", "{jt}");
    assert_eq!(doc["ranks"], 2, "{jt}");
    assert_eq!(doc["iters"], 2, "{jt}");
    assert_eq!(doc["warmup_iters"], 0, "{jt}");
    let jrows = doc["rows"].as_array().expect("rows");
    assert_eq!(jrows.len(), rows.len(), "{jt}");
    for (j, r) in jrows.iter().zip(&rows) {
        assert_eq!(j["data_size"].as_u64(), Some(r.data_size), "{jt}");
        assert_eq!(j["check_result"], "success", "{jt}");
        assert!(j["aveg_time_us"].as_f64().is_some_and(|t| t > 0.0), "{jt}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn torchrun_style_processes() {
    let lease = lease_port();
    let port = lease.port.to_string();
    let start = Instant::now();
    let children: Vec<_> = (0..2)
        .map(|r| {
            cmd(
                "all_reduce_test",
                &["-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1"],
            )
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", "2")
            .env("LOCAL_RANK", r.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("HCCL_CONNECT_TIMEOUT", "30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    assert!(start.elapsed() < Duration::from_secs(40));
    for o in &outs {
        assert!(o.status.success(), "{}", stderr(o));
    }
    let rows = table(&stdout(&outs[0]));
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r.check == "success"), "{rows:?}");
    assert!(stdout(&outs[1]).is_empty(), "only rank 0 prints");
    assert!(stderr(&outs[0]).contains("2 processes (torchrun)"));
}

#[test]
fn bench_defaults_to_four_thread_allreduce() {
    let o = run("hccl_bench", &["-e", "512", "-n", "2", "-w", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = table(&stdout(&o));
    let sizes: Vec<u64> = rows.iter().map(|r| r.data_size).collect();
    assert_eq!(sizes, [8, 16, 32, 64, 128, 256, 512]);
    assert!(stderr(&o).contains("4 threads"));
}
