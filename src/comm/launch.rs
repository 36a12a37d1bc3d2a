//! Where an operation goes once its arguments are valid: into the calling thread's open group,
//! or run now. The `stream` is kept for stream-ordered execution by a host runtime.

use std::sync::Arc;

use super::communicator::{Communicator, OpArgs};
use super::group;
use crate::base::error::Result;

/// Launches `args` on `comm`; `stream` is the caller's `aclrtStream` (any value, NULL allowed).
pub fn launch(comm: Arc<Communicator>, args: OpArgs, stream: usize) -> Result<()> {
    if group::active() {
        group::record(comm, args);
        return Ok(());
    }
    let _ = stream;
    comm.execute(&args)
}
