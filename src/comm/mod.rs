//! Communicators: bootstrap (root info, rank tables, sub-communicators), configuration, the
//! handle registry, groups, the dispatch of an operation (now, on a stream, or in a group), the
//! issue order of its operations, the in-order queue that runs issued operations on a worker
//! thread, and the launcher's world (ranks from mpirun, torchrun or hcclrun variables).

pub mod bootstrap;
pub mod calibrate;
pub mod communicator;
pub mod compressed;
pub mod config;
pub mod dispatch;
pub mod group;
pub mod host_runtime;
pub mod order;
pub mod queue;
pub mod rank_table;
pub mod registry;
pub mod root_info;
pub mod segment;
pub mod slurm;
pub mod stats;
pub mod world;

pub use communicator::{Communicator, OpArgs};
