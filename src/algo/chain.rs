//! Pipelined chain broadcast: the message is cut into chunks that flow root → next → … so that
//! every link is busy at once and the time approaches one message transfer plus n chunk hops.

use super::schedule::{Action, Buf, Schedule, Span};
use super::Ctx;

/// Chunk size: small enough to pipeline, large enough to amortise per-step cost.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Chain broadcast from `root` of `count` elements in the output buffer.
pub fn broadcast(ctx: &Ctx, count: usize, root: u32) -> Schedule {
    let mut s = Schedule::new("chain");
    let es = ctx.elem;
    let bytes = count * es;
    let n = ctx.n as usize;
    if bytes == 0 || n == 1 {
        return s;
    }
    let chunk = (CHUNK_BYTES / es).max(1) * es;
    let k = bytes.div_ceil(chunk);
    let pos = (ctx.me as usize + n - root as usize) % n;
    let next = (ctx.me + 1) % ctx.n;
    let prev = (ctx.me + ctx.n - 1) % ctx.n;
    let piece = |c: usize| {
        let off = c * chunk;
        Span::new(Buf::Recv, off, chunk.min(bytes - off))
    };
    // Position i receives chunk c at step c + i - 1 and forwards it at step c + i.
    for t in 0..k + n - 2 {
        let st = s.step();
        if pos > 0 && t + 1 >= pos && t + 1 - pos < k {
            st.push(Action::Recv {
                peer: prev,
                dst: piece(t + 1 - pos),
            });
        }
        if pos + 1 < n && t >= pos && t - pos < k {
            st.push(Action::Send {
                peer: next,
                src: piece(t - pos),
            });
        }
    }
    s
}
