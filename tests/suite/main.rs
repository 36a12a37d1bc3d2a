//! The integration tests, one module per area, linked into one test executable (each
//! executable links the whole library, so one link serves them all). Run one area with
//! `cargo test --test suite faults::`, one test with `--exact faults::<name>`.
//!
//! Tests that re-execute this binary as a child (a rank process, or a process with its own
//! environment) name the child's test through [`common::test_path`], which adds the module.
//! Tests that need the whole process to themselves (a counting global allocator) are a
//! binary of their own: `tests/steady_alloc.rs`.

#[path = "../common/mod.rs"]
mod common;

mod algos;
mod bounds;
mod coll_shm;
mod coll_tcp;
mod coll_threads;
mod compress_mismatch;
mod compress_netns;
mod compression;
mod cost_model;
mod ctests;
mod eager;
mod entry_log;
mod faults;
mod float_order;
mod headers_fresh;
mod hostile;
mod install_prefix;
mod large_threads;
mod mismatch;
mod multihost;
mod small_path;
mod smoke;
mod soak;
mod streams;
mod topology;
mod trace;
