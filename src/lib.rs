//! A host implementation of HCCL, the collective communication library of the Ascend stack,
//! exposing HCCL's exact C ABI (`libhccl.so`).
//!
//! Layers, each depending only on those below it:
//! - [`ffi`]: C entry points (validation, panic boundary, error mapping);
//! - [`comm`]: communicators (bootstrap, configuration, handles, groups);
//! - [`algo`]: collective algorithms as schedules, and their selection;
//! - [`exec`]: running schedules, reduction kernels;
//! - [`transport`]: links between ranks (memory, TCP);
//! - [`base`]: data types, errors, environment, topology.

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
