//! Hard bounds on every input the library accepts, in one place.
//!
//! Values beyond these are rejected with `HCCL_E_PARA` before anything is allocated, on the rank
//! that received them and on the root that serves them, so one bad argument can fail a job's
//! initialisation but never exhaust another rank's process.

/// Most ranks a communicator may have.
pub const MAX_RANKS: u32 = 65_536;

/// Most ranks a single message lists by number (longer lists end with "... N more"), so that
/// log lines stay short whatever the rank count.
pub const MAX_REPORTED_RANKS: usize = 16;

/// Longest text (an error reason) sent to or accepted from another rank over the wire.
pub const MAX_WIRE_MESSAGE: usize = 4096;
