//! Ranks started by hand, each from its own shell (so with different parent processes) and no
//! `HCCL_JOB_ID`, as the README shows for two shells or two hosts: they find each other through
//! the rendezvous they share, and a rank its rank 0 refuses is told why.

use std::process::{Child, Command, Output, Stdio};

use crate::common::{bin, lease_port, stderr, table, LAUNCHER_VARS};

/// Starts rank `rank` of 2 of `all_reduce_test` through its own `sh`, which stays its parent
/// and prints its pid first, with `vars` as the launch environment.
fn start(rank: u32, vars: &[(&str, String)]) -> Child {
    let mut c = Command::new("sh");
    c.args(["-c", "echo \"parent $$\" >&2; \"$0\" \"$@\"; exit $?"])
        .arg(bin("all_reduce_test"))
        .args(["-b", "8", "-e", "1K", "-f", "32", "-n", "2", "-w", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("HCCL_CONNECT_TIMEOUT", "30");
    for (k, v) in vars {
        c.env(k, v.replace("{rank}", &rank.to_string()));
    }
    c.spawn().expect("start sh")
}

fn parent(o: &Output) -> String {
    stderr(o)
        .lines()
        .find_map(|l| l.strip_prefix("parent "))
        .expect("parent pid")
        .to_string()
}

/// Runs both ranks to the end.
fn both(vars: &[(&str, String)]) -> [Output; 2] {
    let kids = [start(0, vars), start(1, vars)];
    kids.map(|k| k.wait_with_output().unwrap())
}

fn assert_all_reduced(outs: &[Output; 2]) {
    assert_ne!(
        parent(&outs[0]),
        parent(&outs[1]),
        "the ranks share a parent"
    );
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", stderr(o));
    }
    let rows = table(&String::from_utf8_lossy(&outs[0].stdout));
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.check == "success"), "{rows:?}");
}

#[test]
fn torchrun_variables_from_two_shells() {
    let lease = lease_port();
    assert_all_reduced(&both(&[
        ("RANK", "{rank}".into()),
        ("WORLD_SIZE", "2".into()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", lease.port.to_string()),
    ]));
}

#[test]
fn root_addr_from_two_shells() {
    let lease = lease_port();
    assert_all_reduced(&both(&[
        ("HCCL_RANK", "{rank}".into()),
        ("HCCL_WORLD_SIZE", "2".into()),
        ("HCCL_ROOT_ADDR", format!("127.0.0.1:{}", lease.port)),
    ]));
    // A host without a port: the port is derived from the host, which both ranks name.
    assert_all_reduced(&both(&[
        ("HCCL_RANK", "{rank}".into()),
        ("HCCL_WORLD_SIZE", "2".into()),
        ("HCCL_ROOT_ADDR", "127.0.0.1".into()),
    ]));
}

#[test]
fn a_refused_rank_is_told_why() {
    let lease = lease_port();
    let mut vars = vec![
        ("RANK", "{rank}".to_string()),
        ("WORLD_SIZE", "2".into()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", lease.port.to_string()),
        ("HCCL_JOB_ID", "job-{rank}".into()),
    ];
    // Rank 1 is refused at once; rank 0 waits for it until its connect timeout.
    vars.push(("HCCL_CONNECT_TIMEOUT", "8".into()));
    let zero = start(0, &vars);
    let one = start(1, &vars);
    let one = one.wait_with_output().unwrap();
    let zero = zero.wait_with_output().unwrap();
    let e1 = stderr(&one);
    assert!(!one.status.success(), "{e1}");
    assert!(
        e1.contains("refused rank 1")
            && e1.contains("'torchrun/job:job-0/2'")
            && e1.contains("'torchrun/job:job-1/2'")
            && e1.contains("HCCL_JOB_ID"),
        "{e1}"
    );
    let e0 = stderr(&zero);
    assert!(!zero.status.success(), "{e0}");
    assert!(e0.contains("job 'torchrun/job:job-1/2'"), "{e0}");
}

#[test]
fn nothing_shared_asks_for_a_job_id() {
    // No address and no job id: the ranks of two shells cannot know they belong together.
    let vars = [
        ("RANK", "{rank}".to_string()),
        ("WORLD_SIZE", "2".into()),
        ("HCCL_CONNECT_TIMEOUT", "3".into()),
    ];
    let outs = both(&vars);
    let e1 = stderr(&outs[1]);
    assert!(!outs[1].status.success(), "{e1}");
    assert!(
        e1.contains("set HCCL_JOB_ID to one value on every rank"),
        "{e1}"
    );
    // The same with a job id they share: it works.
    let mut vars = vars.to_vec();
    vars.push(("HCCL_JOB_ID", format!("hand-{}", std::process::id())));
    vars.push(("HCCL_CONNECT_TIMEOUT", "30".into()));
    assert_all_reduced(&both(&vars));
}

#[test]
fn port_leases_are_exclusive_and_below_the_ephemeral_range() {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let leases: Vec<_> = (0..20).map(|_| lease_port()).collect();
    let mut ports: Vec<u16> = leases.iter().map(|l| l.port).collect();
    assert!(ports.iter().all(|&p| p < low), "{ports:?} vs {low}");
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), leases.len(), "a port leased twice");
}
