//! `HcclGroupStart`/`HcclGroupEnd`: operations issued inside a group are recorded per thread
//! and launched together at the outermost end, with all point-to-point transfers of a
//! communicator merged into one step so that any send/receive pattern completes.

use std::cell::RefCell;
use std::sync::Arc;

use super::communicator::{Communicator, OpArgs};
use crate::algo::Coll;
use crate::base::error::{Error, ErrorKind, Result};

#[derive(Default)]
struct Group {
    depth: u32,
    ops: Vec<(Arc<Communicator>, OpArgs)>,
}

thread_local! {
    // Const-initialised: every call asks whether a group is open, with no lazy set-up check.
    static GROUP: RefCell<Group> = const {
        RefCell::new(Group {
            depth: 0,
            ops: Vec::new(),
        })
    };
}

/// Opens a (possibly nested) group.
pub fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Whether the calling thread is inside a group.
pub fn active() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Records an operation for launch at the end of the group.
pub fn record(comm: Arc<Communicator>, args: OpArgs) {
    GROUP.with(|g| g.borrow_mut().ops.push((comm, args)));
}

/// Closes a group; at the outermost end runs everything recorded.
pub fn end() -> Result<()> {
    let ops = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::new(
                ErrorKind::Para,
                "HcclGroupEnd without HcclGroupStart",
            ));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            std::mem::take(&mut g.ops)
        } else {
            Vec::new()
        })
    })?;
    run(ops)
}

fn run(ops: Vec<(Arc<Communicator>, OpArgs)>) -> Result<()> {
    // Per communicator, in order of first use: its point-to-point items merged into one
    // operation placed where the first of them was, collectives kept in issue order.
    let mut plan: Vec<(Arc<Communicator>, OpArgs)> = Vec::new();
    for (comm, args) in ops {
        if let Coll::P2p { items } = &args.coll {
            if let Some((_, merged)) = plan
                .iter_mut()
                .find(|(c, a)| Arc::ptr_eq(c, &comm) && matches!(a.coll, Coll::P2p { .. }))
            {
                if let Coll::P2p { items: all } = &mut merged.coll {
                    all.extend_from_slice(items);
                }
                merged.ext.extend_from_slice(&args.ext);
                continue;
            }
        }
        plan.push((comm, args));
    }
    let mut first_err = None;
    for (comm, args) in plan {
        if let Err(e) = comm.execute(&args) {
            log::error!("group: {e}");
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}
