//! `hcclrun`'s `[rank] ` prefixes: with stdout and stderr on one pipe (as `2>&1` or a terminal
//! gives), every line arrives whole, with its own rank's prefix, over many runs of a program
//! whose ranks write as fast as they can on both streams.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

const RUNS: usize = 200;
const LINES: usize = 40;

/// A pipe: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors, which we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Runs `hcclrun -n 2` of a chatty shell loop with both streams on one pipe; returns the text.
fn one_run() -> String {
    let (r, w) = pipe();
    let script = format!(
        "i=0; while [ $i -lt {LINES} ]; do echo \"r$HCCL_RANK out $i\"; \
         echo \"r$HCCL_RANK err $i\" >&2; i=$((i+1)); done"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_hcclrun"))
        .args(["-n", "2", "--timeout", "60", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::from(w.try_clone().unwrap()))
        .stderr(Stdio::from(w))
        .spawn()
        .expect("start hcclrun");
    let mut text = String::new();
    std::fs::File::from(r).read_to_string(&mut text).unwrap();
    assert!(child.wait().unwrap().success(), "{text}");
    text
}

#[test]
fn lines_are_never_mixed_across_ranks_or_streams() {
    for run in 0..RUNS {
        let text = one_run();
        // Per rank and stream, the numbers seen so far: lines arrive whole and in order.
        let mut next = [[0usize; 2]; 2];
        for line in text.lines() {
            let bad = || format!("run {run}: mixed line {line:?} in:\n{text}");
            let (tag, rest) = line.split_once("] ").unwrap_or_else(|| panic!("{}", bad()));
            let rank: usize = tag
                .strip_prefix('[')
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{}", bad()));
            let f: Vec<&str> = rest.split(' ').collect();
            assert!(f.len() == 3 && rank < 2, "{}", bad());
            assert_eq!(f[0], format!("r{rank}"), "{}", bad());
            let stream = match f[1] {
                "out" => 0,
                "err" => 1,
                _ => panic!("{}", bad()),
            };
            assert_eq!(f[2], next[rank][stream].to_string(), "{}", bad());
            next[rank][stream] += 1;
        }
        assert_eq!(next, [[LINES; 2]; 2], "run {run}: lines lost:\n{text}");
    }
}
