//! Every tool asked for help exits 0 and prints plain usage on stdout; every tool whose stdout
//! is a pipe nobody reads any more (`tool | head -1` after `head` exits) ends quietly: killed by
//! `SIGPIPE` as a C tool is, or done, but never with a panic or an error message.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use crate::common::{bin, BINS, LAUNCHER_VARS};

fn tool(name: &str) -> String {
    match name {
        "hcclrun" => env!("CARGO_BIN_EXE_hcclrun").to_string(),
        "hccl_diag" => env!("CARGO_BIN_EXE_hccl_diag").to_string(),
        "hccl_plot" => env!("CARGO_BIN_EXE_hccl_plot").to_string(),
        "hccl_sim" => env!("CARGO_BIN_EXE_hccl_sim").to_string(),
        other => bin(other),
    }
}

/// Every tool with arguments that make it print to stdout.
fn runs() -> Vec<(&'static str, Vec<String>)> {
    let small = ["-t", "2", "-b", "8", "-e", "64", "-n", "1", "-w", "0"];
    let csv = std::env::temp_dir().join(format!("hccl-pipe-{}.csv", std::process::id()));
    std::fs::write(&csv, "bytes,busbw_GB/s\n8,0.1\n64,0.5\n").unwrap();
    let png = csv.with_extension("png");
    let mut v: Vec<(&'static str, Vec<String>)> = BINS
        .iter()
        .chain(&["hccl_bench"])
        .map(|&b| (b, small.iter().map(|s| s.to_string()).collect()))
        .collect();
    let owned = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    v.push(("hccl_sim", owned(&["--hosts", "2", "--per-host", "2"])));
    v.push((
        "hccl_plot",
        vec![
            "-o".into(),
            png.display().to_string(),
            csv.display().to_string(),
        ],
    ));
    v.push(("hccl_diag", owned(&["--size", "1", "--iters", "1"])));
    v.push(("hcclrun", owned(&["-n", "2", "--", "echo", "hello"])));
    v
}

/// Runs `name args` with stdout on a pipe whose read end is already closed.
fn run_into_closed_pipe(name: &str, args: &[String]) -> std::process::Output {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors, which we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    let mut c = Command::new(tool(name));
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .env("HCCL_CONNECT_TIMEOUT", "30");
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.output().expect("start the tool")
}

fn assert_quiet(name: &str, args: &[String]) {
    let o = run_into_closed_pipe(name, args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.signal() == Some(libc::SIGPIPE) || o.status.success(),
        "{name} {args:?} into a closed pipe: {:?}\n{err}",
        o.status
    );
    // What a tool says on stderr in a normal run (the testers' summary line) may appear; no
    // complaint about the pipe may.
    let lower = err.to_lowercase();
    assert!(
        !["panick", "broken pipe", "error", "os error"]
            .iter()
            .any(|w| lower.contains(w)),
        "{name} {args:?} into a closed pipe said:\n{err}"
    );
}

#[test]
fn every_tool_ends_quietly_on_a_closed_pipe() {
    for (name, args) in runs() {
        assert_quiet(name, &args);
        assert_quiet(name, &["--help".to_string()]);
    }
}

#[test]
fn every_tool_prints_plain_usage_for_help() {
    for (name, _) in runs() {
        for flag in ["-h", "--help"] {
            let o = Command::new(tool(name)).arg(flag).output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{name} {flag}: {:?}\n{out}{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                out.contains(name),
                "{name} {flag}: usage names the tool:\n{out}"
            );
            assert!(
                !out.contains("```"),
                "{name} {flag}: Markdown in usage:\n{out}"
            );
            assert!(o.stderr.is_empty(), "{name} {flag}: stderr not empty");
        }
    }
}
