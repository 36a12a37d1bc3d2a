//! Runs one rank's schedule over its endpoint.

use std::time::Instant;

use super::reduce;
use crate::algo::{Action, Buf, Schedule, Span};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::{Error, ErrorKind, Result};
use crate::transport::{Endpoint, ReduceFn};

/// Base addresses of the buffers a schedule refers to.
#[derive(Clone, Debug, Default)]
pub struct Buffers {
    /// Input buffer.
    pub send: usize,
    /// Output buffer.
    pub recv: usize,
    /// Scratch area.
    pub scratch: usize,
    /// Extra buffers (`Buf::Ext(i)`).
    pub ext: Vec<usize>,
}

impl Buffers {
    fn addr(&self, sp: Span) -> usize {
        let base = match sp.buf {
            Buf::Send => self.send,
            Buf::Recv => self.recv,
            Buf::Scratch => self.scratch,
            Buf::Ext(i) => self.ext[i as usize],
        };
        base + sp.off
    }
}

/// The reduction of an operation, when it has one.
pub fn reduce_fn(dtype: DataType, op: ReduceOp) -> ReduceFn {
    ReduceFn {
        kernel: reduce::reduce_raw,
        dtype,
        op,
        elem_size: dtype.size(),
    }
}

/// Executes `sched` step by step.
///
/// # Safety
/// Every span of the schedule must lie inside the buffer it names, and the buffers must stay
/// valid for the duration of the call.
pub unsafe fn run(
    ep: &mut Endpoint,
    sched: &Schedule,
    bufs: &Buffers,
    red: Option<ReduceFn>,
    deadline: Option<Instant>,
) -> Result<()> {
    let need_red =
        || red.ok_or_else(|| Error::new(ErrorKind::Internal, "reduction step without an operator"));
    for step in &sched.steps {
        for a in &step.actions {
            match *a {
                Action::Copy { src, dst } => {
                    let (s, d) = (bufs.addr(src) as *const u8, bufs.addr(dst) as *mut u8);
                    if !std::ptr::eq(s, d) && src.len > 0 {
                        std::ptr::copy(s, d, src.len);
                    }
                }
                Action::Reduce { dst, src } if src.len > 0 => {
                    need_red()?.apply(
                        bufs.addr(dst) as *mut u8,
                        bufs.addr(src) as *const u8,
                        src.len,
                    );
                }
                _ => {}
            }
        }
        for a in &step.actions {
            if let Action::Send { peer, src } = *a {
                ep.post_send(peer, bufs.addr(src) as *const u8, src.len)?;
            }
        }
        for a in &step.actions {
            match *a {
                Action::Recv { peer, dst } => {
                    ep.post_recv(peer, bufs.addr(dst) as *mut u8, dst.len, None)?
                }
                Action::RecvReduce { peer, dst } => {
                    ep.post_recv(peer, bufs.addr(dst) as *mut u8, dst.len, Some(need_red()?))?
                }
                _ => {}
            }
        }
        ep.wait_all(deadline)?;
    }
    Ok(())
}
