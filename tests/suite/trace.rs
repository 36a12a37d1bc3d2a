//! `HCCL_TRACE_FILE`: every rank writes its operations as Chrome trace-event JSON — one complete
//! event per operation and per schedule step, with peers and bytes — and nothing when the
//! variable is unset.
//!
//! The child (4 rank threads, ring forced) runs AllReduce three times, then AllGather and
//! Broadcast, checking every result against values computed here; the parent reads the files.
//! A 4-rank ring AllReduce is 3 reduce-scatter and 3 allgather steps, each sending one quarter
//! of the buffer to the next rank and receiving one from the previous.

use crate::common::*;
use hccl::ffi::coll_api::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::time::Duration;

const TEST: &str = "operations_and_steps_are_traced_per_rank";
const RANKS: u32 = 4;
const COUNT: usize = 1024;
const OPS: [&str; 5] = [
    "AllReduce",
    "AllReduce",
    "AllReduce",
    "AllGather",
    "Broadcast",
];

fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hccl-trace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create trace dir");
    d
}

/// The child's work: the operations of `OPS`, each checked.
fn run_ops() {
    run_ranks(RANKS, Duration::from_secs(60), |r| {
        let n = r.n as usize;
        let send: Vec<f32> = (0..COUNT)
            .map(|i| (r.rank as usize * 10 + i % 7) as f32)
            .collect();
        let mut recv = vec![0f32; COUNT * n];
        for _ in 0..3 {
            let rc = unsafe {
                HcclAllReduce(
                    send.as_ptr() as *mut _,
                    recv.as_mut_ptr() as *mut _,
                    COUNT as u64,
                    FP32,
                    SUM,
                    r.comm,
                    null_mut(),
                )
            };
            r.ok(rc, "HcclAllReduce");
            for (i, v) in recv[..COUNT].iter().enumerate() {
                let want = (0..n).map(|p| (p * 10 + i % 7) as f32).sum::<f32>();
                r.check(*v == want, || format!("allreduce[{i}] = {v}, want {want}"));
            }
        }
        let rc = unsafe {
            HcclAllGather(
                send.as_ptr() as *mut _,
                recv.as_mut_ptr() as *mut _,
                COUNT as u64,
                FP32,
                r.comm,
                null_mut(),
            )
        };
        r.ok(rc, "HcclAllGather");
        for (i, v) in recv.iter().enumerate() {
            let want = ((i / COUNT) * 10 + (i % COUNT) % 7) as f32;
            r.check(*v == want, || format!("allgather[{i}] = {v}, want {want}"));
        }
        let mut buf = send.clone();
        let rc = unsafe {
            HcclBroadcast(
                buf.as_mut_ptr() as *mut _,
                COUNT as u64,
                FP32,
                2,
                r.comm,
                null_mut(),
            )
        };
        r.ok(rc, "HcclBroadcast");
        for (i, v) in buf.iter().enumerate() {
            let want = (20 + i % 7) as f32;
            r.check(*v == want, || format!("broadcast[{i}] = {v}, want {want}"));
        }
    });
}

fn read_events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str::<Vec<Value>>(&text).unwrap_or_else(|e| {
        panic!(
            "{} is not a JSON array of events ({e}):\n{text}",
            path.display()
        )
    })
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// Checks rank `rank`'s file: the operations of `OPS` in order, each with exactly its steps.
fn check_rank(rank: u32, events: &[Value]) {
    let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let ops: Vec<&Value> = complete
        .iter()
        .copied()
        .filter(|e| e["cat"] == "op")
        .collect();
    let steps: Vec<&Value> = complete
        .iter()
        .copied()
        .filter(|e| e["cat"] == "step")
        .collect();
    assert_eq!(
        complete.len(),
        ops.len() + steps.len(),
        "rank {rank}: other events"
    );
    let names: Vec<&str> = ops
        .iter()
        .map(|o| o["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, OPS, "rank {rank}");
    let (next, prev) = ((rank + 1) % RANKS, (rank + RANKS - 1) % RANKS);
    let mut steps_seen = 0;
    for o in &ops {
        let a = &o["args"];
        assert_eq!(o["pid"], rank, "{o}");
        assert_eq!(a["dtype"], "fp32", "{o}");
        assert_eq!(a["count"], COUNT, "{o}");
        // `ring` forces the ring for AllReduce and AllGather (Broadcast's pipelined chain is
        // its ring form).
        let want = if o["name"] == "Broadcast" {
            "chain"
        } else {
            "ring"
        };
        assert_eq!(a["algorithm"], want, "{o}");
        assert_eq!(a["level"], "level0", "{o}");
        assert!(a["error"].is_null(), "{o}");
        let (begin, end) = (num(o, "ts"), num(o, "ts") + num(o, "dur"));
        // The steps of this operation: inside its time range, same thread, naming it.
        let mine: Vec<&&Value> = steps
            .iter()
            .filter(|s| s["tid"] == o["tid"] && num(s, "ts") >= begin && num(s, "ts") <= end)
            .collect();
        assert_eq!(mine.len() as u64, a["steps"].as_u64().unwrap(), "{o}");
        steps_seen += mine.len();
        for (i, s) in mine.iter().enumerate() {
            assert_eq!(s["name"], format!("step {i}"), "{s}");
            assert_eq!(s["args"]["op"], o["name"], "{s}");
            assert!(
                num(s, "ts") + num(s, "dur") <= end + 1.0,
                "{s} outlasts {o}"
            );
        }
        if o["name"] == "AllReduce" {
            assert_eq!(a["reduce"], "sum", "{o}");
            assert_eq!(mine.len(), 2 * (RANKS as usize - 1), "{o}");
            let quarter = (COUNT * 4 / RANKS as usize) as u64;
            for s in &mine {
                let peers = s["args"]["peers"].as_array().expect("peers");
                let sent: Vec<(u64, u64)> = peers
                    .iter()
                    .filter(|p| p["sent"].as_u64() > Some(0))
                    .map(|p| (p["peer"].as_u64().unwrap(), p["sent"].as_u64().unwrap()))
                    .collect();
                let got: Vec<(u64, u64)> = peers
                    .iter()
                    .filter(|p| p["received"].as_u64() > Some(0))
                    .map(|p| (p["peer"].as_u64().unwrap(), p["received"].as_u64().unwrap()))
                    .collect();
                assert_eq!(sent, [(u64::from(next), quarter)], "{s}");
                assert_eq!(got, [(u64::from(prev), quarter)], "{s}");
                assert!(peers.iter().all(|p| p["link"] == "memory"), "{s}");
            }
            assert_eq!(a["sent"], 6 * quarter, "{o}");
        }
    }
    assert_eq!(
        steps_seen,
        steps.len(),
        "rank {rank}: steps outside any operation"
    );
}

#[test]
fn operations_and_steps_are_traced_per_rank() {
    if is_child() {
        run_ops();
        return;
    }
    let dir = scratch_dir("on");
    let template = dir.join("trace.%r.json");
    run_self(
        TEST,
        &[
            ("HCCL_TRACE_FILE", template.to_str().expect("utf-8 path")),
            ("HCCL_ALGO", "level0:NA;level1:ring"),
        ],
        Duration::from_secs(120),
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("read trace dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        (0..RANKS)
            .map(|r| format!("trace.{r}.json"))
            .collect::<Vec<_>>()
    );
    for r in 0..RANKS {
        let events = read_events(&dir.join(format!("trace.{r}.json")));
        check_rank(r, &events);
        assert!(
            events
                .iter()
                .any(|e| e["ph"] == "M" && e["args"]["name"] == format!("rank {r}")),
            "rank {r}: no process name"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nothing_is_written_without_the_variable() {
    const CHILD: &str = "nothing_is_written_without_the_variable";
    if is_child() {
        // The child runs in the directory a relative template would resolve in.
        assert!(std::env::var_os("HCCL_TRACE_FILE").is_none());
        run_ops();
        return;
    }
    let dir = scratch_dir("off");
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "--exact",
        &test_path(CHILD),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_VAR, "1")
    .env("HCCL_ALGO", "level0:NA;level1:ring")
    .env_remove("HCCL_TRACE_FILE")
    .current_dir(&dir);
    let out = spawn_piped(cmd).finish(Duration::from_secs(120), Vec::new());
    assert!(
        out.success && out.stdout.contains("1 passed"),
        "{}",
        out.stderr
    );
    let left: Vec<_> = std::fs::read_dir(&dir).expect("read dir").collect();
    assert!(left.is_empty(), "files appeared: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
