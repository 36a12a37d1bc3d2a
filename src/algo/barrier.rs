//! Dissemination barrier: in round k rank r signals r + 2^k and waits for r - 2^k; after
//! ceil(log2 n) rounds every rank has transitively heard from every other.

use super::schedule::{Action, Buf, Schedule, Span};
use super::Ctx;

/// The barrier schedule (zero-byte messages).
pub fn dissemination(ctx: &Ctx) -> Schedule {
    let mut s = Schedule::new("dissemination");
    let n = ctx.n;
    let mut dist = 1;
    while dist < n {
        let st = s.step();
        st.push(Action::Send {
            peer: (ctx.me + dist) % n,
            src: Span::new(Buf::Scratch, 0, 0),
        });
        st.push(Action::Recv {
            peer: (ctx.me + n - dist) % n,
            dst: Span::new(Buf::Scratch, 0, 0),
        });
        dist *= 2;
    }
    s
}
