//! `hcclrun`: environment, output prefixes, failure propagation, timeout, signal forwarding.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn hcclrun(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hcclrun"));
    c.args(args);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = text(b).lines().map(String::from).collect();
    v.sort();
    v
}

#[test]
fn every_rank_gets_its_environment_and_a_prefix() {
    let o = hcclrun(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "echo $HCCL_RANK/$HCCL_WORLD_SIZE $RANK/$WORLD_SIZE $LOCAL_RANK $MASTER_ADDR; echo e$HCCL_RANK >&2",
    ])
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        sorted_lines(&o.stdout),
        [
            "[0] 0/3 0/3 0 127.0.0.1",
            "[1] 1/3 1/3 1 127.0.0.1",
            "[2] 2/3 2/3 2 127.0.0.1"
        ]
    );
    assert_eq!(sorted_lines(&o.stderr), ["[0] e0", "[1] e1", "[2] e2"]);
    let o = hcclrun(&["-n", "2", "--no-prefix", "sh", "-c", "echo x"])
        .output()
        .unwrap();
    assert_eq!(text(&o.stdout), "x\nx\n");
}

#[test]
fn first_failure_stops_the_others_and_sets_the_status() {
    let t = Instant::now();
    let o = hcclrun(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "if [ $HCCL_RANK = 1 ]; then exit 7; fi; exec sleep 60",
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(7));
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let e = text(&o.stderr);
    assert!(e.contains("rank 1 exited with status 7"), "{e}");
    // A rank killed by a signal counts as failed too, with 128 + signal.
    let o = hcclrun(&[
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "[ $HCCL_RANK = 0 ] && kill -9 $$; exec sleep 60",
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(137));
    assert!(text(&o.stderr).contains("rank 0 was killed by signal 9"));
}

#[test]
fn timeout_stops_every_rank() {
    let t = Instant::now();
    let o = hcclrun(&["-n", "2", "--timeout", "0.5", "--", "sleep", "60"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(124));
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(text(&o.stderr).contains("timeout"), "{}", text(&o.stderr));
}

#[test]
fn sigterm_is_forwarded_to_every_rank() {
    let mut child = hcclrun(&[
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "trap 'echo term$HCCL_RANK; exit 5' TERM; echo ready; while :; do sleep 0.05; done",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    // Both ranks have installed their trap once they said so.
    while seen.len() < 2 {
        let mut l = String::new();
        assert!(out.read_line(&mut l).unwrap() > 0, "hcclrun ended early");
        seen.push(l);
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(
        rest.contains("[0] term0") && rest.contains("[1] term1"),
        "{rest}"
    );
}

#[test]
fn runs_the_tester_as_processes() {
    let o: Output = hcclrun(&["-n", "2", env!("CARGO_BIN_EXE_all_reduce_test")])
        .args(["-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-w", "1"])
        .env("HCCL_CONNECT_TIMEOUT", "30")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let rows: Vec<&str> = out.lines().filter(|l| l.ends_with("success")).collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert!(
        rows.iter().all(|r| r.starts_with("[0] ")),
        "only rank 0 prints"
    );
    assert!(text(&o.stderr).contains("2 processes (hccl)"));
}

#[test]
fn usage_errors_exit_2() {
    for a in [&["--bogus", "x"][..], &["-n", "0", "true"], &["-n", "2"]] {
        let o = hcclrun(a).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let e = text(&o.stderr);
        assert!(
            e.starts_with("error:") && (e.contains("Usage: hcclrun") || e.contains("try '--help'")),
            "{e}"
        );
    }
}

#[test]
fn ranks_do_not_outlive_a_killed_hcclrun() {
    let mut child = hcclrun(&["-n", "1", "--", "sh", "-c", "echo $$; exec sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let rank_pid: i32 = line.trim().trim_start_matches("[0] ").parse().expect(&line);
    // SAFETY: pidfd_open takes a pid and flags; the fd is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, rank_pid, 0) } as i32;
    assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    child.kill().unwrap();
    child.wait().unwrap();
    // The pidfd turns readable when the rank exits; wait for that with a deadline.
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut p, 1, 10_000) };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(fd) };
    assert_eq!(
        ready, 1,
        "rank {rank_pid} still running 10 s after hcclrun was killed"
    );
}
