//! The testers with `--mem device` between processes: every operation whose messages go
//! single-copy moves `aclrtMalloc` buffers that the peers map (the library's
//! `transport::peer_mem`), and each tester checks its results element by element against values
//! it computes itself. `--mem host` runs the same sizes through the kernel copy.

use std::process::Command;

use crate::common::bin;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `op`'s tester on `n` processes with `mem` memory over sizes that go single-copy (and
/// are shared between sender and receiver from 64 KiB) and returns its stderr.
fn run(op: &str, n: u32, mem: &str) -> String {
    // Single copy at every size, also with one peer and in reductions.
    run_with(op, n, mem, Some("1"))
}

/// [`run`] with `HCCL_SHM_SINGLE_COPY` set to `single_copy` (`None`: unset, the default).
fn run_with(op: &str, n: u32, mem: &str, single_copy: Option<&str>) -> String {
    let exe = bin(&format!("{op}_test"));
    let mut c = Command::new(env!("CARGO_BIN_EXE_hcclrun"));
    c.args(["-n", &n.to_string(), &exe])
        .args(["-b", "96K", "-e", "1536K", "-f", "16", "-n", "2", "-w", "1"])
        .args(["--mem", mem])
        .env("HCCL_CONNECT_TIMEOUT", "60")
        .env("HCCL_EXEC_TIMEOUT", "60")
        .env_remove("HCCL_SHM_SINGLE_COPY");
    if let Some(v) = single_copy {
        c.env("HCCL_SHM_SINGLE_COPY", v);
    }
    let o = c.output().unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{op} n={n} {mem}:\n{out}\n{err}");
    let rows = out.lines().filter(|l| l.ends_with("success")).count();
    assert_eq!(rows, 2, "{op} n={n} {mem}: two checked sizes\n{out}");
    assert!(err.contains(&format!("{mem} memory")), "{err}");
    err
}

#[test]
fn single_copy_operations_check_out_in_device_and_host_memory() {
    for n in [2u32, 4] {
        for op in [
            "all_gather",
            "alltoall",
            "send_recv",
            "scatter",
            "broadcast",
            "all_reduce",
            "reduce_scatter",
        ] {
            let err = run(op, n, "device");
            assert!(
                !err.contains("cannot map a buffer"),
                "{op} n={n}: device memory was not mapped:\n{err}"
            );
        }
        run("broadcast", n, "host");
    }
}

/// Reduce's messages, staged by default, are read from the mapped device memory instead (see
/// the library's `transport::shm::MAPPED_REDUCE_MAX_ONE_PEER`), the root and its sender each
/// reducing part of a message of 64 KiB and more into the root's mapped buffer
/// (`SHARED_REDUCE_MIN`; both sizes here), and still check out, with one peer and with several;
/// plain host memory stays staged.
#[test]
fn default_reduce_checks_out_in_device_and_host_memory() {
    for n in [2u32, 4] {
        for mem in ["device", "host"] {
            let err = run_with("reduce", n, mem, None);
            assert!(!err.contains("cannot map a buffer"), "n={n} {mem}:\n{err}");
        }
    }
}

/// A two-process AllReduce or ReduceScatter of more than 1 MiB, whose messages `malloc` buffers
/// stage, reduces straight out of the peer's mapped device memory (the library's
/// `transport::shm` reads a reducing exchange in place), and checks out in both memories.
#[test]
fn default_reducing_exchanges_check_out_in_device_and_host_memory() {
    for op in ["all_reduce", "reduce_scatter"] {
        for mem in ["device", "host"] {
            let err = run_with(op, 2, mem, None);
            assert!(!err.contains("cannot map a buffer"), "{op} {mem}:\n{err}");
        }
    }
}
