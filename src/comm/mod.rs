//! Communicators: bootstrap (root info, rank tables, sub-communicators), configuration, the
//! handle registry, groups, and the entry point that runs an operation.

pub mod bootstrap;
pub mod calibrate;
pub mod communicator;
pub mod config;
pub mod group;
pub mod host_runtime;
pub mod launch;
pub mod rank_table;
pub mod registry;
pub mod root_info;
pub mod segment;

pub use communicator::{Communicator, OpArgs};
