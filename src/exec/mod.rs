//! Execution: running schedules over links, naming each operation on the wire, the reduction
//! kernels the schedules use, and operation traces.

pub mod compress;
pub mod executor;
pub mod identity;
pub mod push;
pub mod reduce;
pub mod small;
pub mod trace;
