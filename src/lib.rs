//! A host implementation of HCCL, the collective communication library of the Ascend stack,
//! exposing HCCL's exact C ABI (`libhccl.so`).
//!
//! Layers, each depending only on those below it:
//! - [`ffi`]: C entry points (validation, panic boundary, error mapping);
//! - [`comm`]: communicators (bootstrap, configuration, handles, groups);
//! - [`algo`]: collective algorithms as schedules, and their selection;
//! - [`exec`]: running schedules, reduction kernels;
//! - [`transport`]: links between ranks (one interface; memory, shared memory, TCP);
//! - [`base`]: data types, errors, environment, topology.

// Every unsafe operation sits in an `unsafe {}` block that says why it is sound.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod algo;
pub mod base;
pub mod comm;
pub mod exec;
pub mod ffi;
pub mod transport;

/// Visible skips for the unit tests (shared with the integration tests).
#[cfg(test)]
#[path = "../tests/common/skip.rs"]
mod test_skip;
