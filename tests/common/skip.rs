//! Skipping a test whose prerequisite is missing, visibly.
//!
//! Rust's test harness has no "skipped" outcome, and it hides what a passing test prints with
//! `println!`/`eprintln!`. A skip is therefore written straight to the process's stderr (a
//! direct write is not captured), so `cargo test` shows `SKIPPED <test>: <why>` beside the
//! test's `ok`. Under CI (`CI=true`, which `.ci/run` sets) a prerequisite that
//! `scripts/setup.sh` installs, or that CI provides (root), is never missing: there the skip
//! fails the test instead.

#![allow(dead_code)]

use std::io::Write;

/// Whether this run is CI, where every installable prerequisite must be present.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Skips the calling test because of `why`, which CI cannot have: prints the skip visibly.
pub fn skip(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    // Not eprintln!: the harness captures that and shows it only for failing tests.
    let _ = writeln!(std::io::stderr().lock(), "\nSKIPPED {test}: {why}");
}

/// Skips the calling test because of `why`, a prerequisite that `scripts/setup.sh` installs
/// (or CI provides): visibly, or under CI as a failure.
pub fn skip_unless_ci(why: &str) {
    if under_ci() {
        panic!(
            "prerequisite missing under CI (CI=true): {why}; scripts/setup.sh should have \
             provided it"
        );
    }
    skip(why);
}
