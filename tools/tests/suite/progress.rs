//! Progress bars: drawn on stderr when it is a terminal (a pseudo-terminal here), absent in
//! pipes, and never in the table on stdout.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use crate::common::{cmd, stderr, stdout, table};

/// A pseudo-terminal: (master, slave).
fn pty() -> (File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: out pointers to two ints; no name, termios or window size requested.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Runs `c` with stderr on a terminal and stdout on a pipe: (exit ok, stdout, terminal text).
fn on_terminal(mut c: Command) -> (bool, String, String) {
    let (mut master, slave) = pty();
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .env("TERM", "xterm");
    let child = c.spawn().unwrap();
    // Only the child holds the terminal's slave side now: reading ends (EIO) when it exits.
    drop(c);
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    let o = child.wait_with_output().unwrap();
    let term = reader.join().unwrap();
    (o.status.success(), stdout(&o), term)
}

const SWEEP: [&str; 12] = [
    "-t", "2", "-b", "8", "-e", "1M", "-f", "4", "-n", "5", "-w", "1",
];

#[test]
fn tester_draws_a_bar_on_a_terminal_only() {
    let (ok, out, term) = on_terminal(cmd("all_reduce_test", &SWEEP));
    assert!(ok, "{term}");
    assert!(
        term.contains("/9 sizes"),
        "no bar on the terminal: {term:?}"
    );
    let piped = cmd("all_reduce_test", &SWEEP).output().unwrap();
    assert!(piped.status.success());
    let err = stderr(&piped);
    assert!(
        !err.contains("sizes") && !err.contains('\r') && !err.contains('\x1b'),
        "bar drawn into a pipe: {err:?}"
    );
    // The table is the same either way: only rows, no terminal control characters.
    for o in [&out, &stdout(&piped)] {
        assert_eq!(table(o).len(), 9, "{o}");
        assert!(!o.contains('\r') && !o.contains('\x1b'), "{o:?}");
    }
}

#[test]
fn simulator_draws_a_bar_on_a_terminal_only() {
    let args = ["--hosts", "4", "--per-host", "2", "--sizes", "8,1M"];
    let mut c = Command::new(env!("CARGO_BIN_EXE_hccl_sim"));
    c.args(args);
    let (ok, out, term) = on_terminal(c);
    assert!(ok, "{term}");
    assert!(
        term.contains(" proofs "),
        "no bar on the terminal: {term:?}"
    );
    let piped = Command::new(env!("CARGO_BIN_EXE_hccl_sim"))
        .args(args)
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert!(piped.stderr.is_empty(), "{}", stderr(&piped));
    assert!(!out.contains('\x1b') && out.contains("correct"), "{out}");
}
