//! Execution: running schedules over links, naming each operation on the wire, and the
//! reduction kernels the schedules use.

pub mod executor;
pub mod identity;
pub mod reduce;
