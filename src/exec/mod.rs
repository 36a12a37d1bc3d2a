//! Execution: running schedules over links, the reduction kernels they use, and operation
//! traces.

pub mod executor;
pub mod reduce;
pub mod trace;
