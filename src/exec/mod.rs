//! Execution: running schedules over links, and the reduction kernels they use.

pub mod compress;
pub mod executor;
pub mod reduce;
