//! Hard bounds on every input the library accepts, in one place.
//!
//! Values beyond these are rejected with `HCCL_E_PARA` before anything is allocated, on the rank
//! that received them and on the root that serves them, so one bad argument can fail a job's
//! initialisation but never exhaust another rank's process.

/// Most ranks a communicator may have.
pub const MAX_RANKS: u32 = 65_536;
