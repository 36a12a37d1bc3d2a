//! Execution: running schedules over links, and the reduction kernels they use.

pub mod executor;
pub mod reduce;
