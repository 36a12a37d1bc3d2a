//! Bruck AllGather: in round k rank r sends everything it holds — the blocks of ranks
//! r … r+2^k−1 — to rank r−2^k and receives the next 2^k blocks from rank r+2^k. After
//! ceil(log2 n) rounds every rank holds every block, for any n. Blocks are written straight to
//! their place in the output (a wrapped range is two messages), so no final rotation is needed.

use super::rhd::spans;
use super::schedule::{Action, Buf, Schedule, Span};
use super::Ctx;

/// Spans of the blocks of ranks `first`, `first+1`, … (`len` of them, modulo n).
fn wrapped(ctx: &Ctx, counts: &[usize], displs: &[usize], first: u32, len: u32) -> Vec<Span> {
    let n = ctx.n;
    let first = first % n;
    let end = first + len;
    let mut v = spans(Buf::Recv, ctx.elem, counts, displs, first, end.min(n));
    if end > n {
        v.extend(spans(Buf::Recv, ctx.elem, counts, displs, 0, end - n));
    }
    v
}

/// Bruck AllGather(V) in the output buffer.
pub fn allgather(ctx: &Ctx, counts: &[usize], displs: &[usize]) -> Schedule {
    let mut s = Schedule::new("bruck");
    let (es, n, me) = (ctx.elem, ctx.n, ctx.me);
    let m = me as usize;
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, 0, counts[m] * es),
        dst: Span::new(Buf::Recv, displs[m] * es, counts[m] * es),
    });
    let mut d = 1;
    let mut first = true;
    while d < n {
        let len = d.min(n - d);
        // The first round shares the copy's step: local actions run before the exchange.
        let st = if first { s.current() } else { s.step() };
        first = false;
        let to = (me + n - d) % n;
        let from = (me + d) % n;
        for src in wrapped(ctx, counts, displs, me, len) {
            st.push(Action::Send { peer: to, src });
        }
        for dst in wrapped(ctx, counts, displs, me + d, len) {
            st.push(Action::Recv { peer: from, dst });
        }
        d *= 2;
    }
    s
}
