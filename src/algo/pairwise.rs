//! Pairwise AlltoAll: in step k rank r sends to r+k and receives from r-k, so each step is a
//! permutation and no rank is hit by every peer at once.

use super::schedule::{Action, Buf, Schedule, Span};
use super::{Coll, Ctx};

/// Pairwise schedule for `Coll::AlltoAllV` (anything else yields an empty schedule).
pub fn alltoallv(ctx: &Ctx, coll: &Coll) -> Schedule {
    let mut s = Schedule::new("pairwise");
    let Coll::AlltoAllV {
        send_counts,
        send_displs,
        recv_counts,
        recv_displs,
    } = coll
    else {
        return s;
    };
    let (me, n, es) = (ctx.me, ctx.n, ctx.elem);
    let m = me as usize;
    s.step().push(Action::Copy {
        src: Span::new(Buf::Send, send_displs[m] * es, send_counts[m] * es),
        dst: Span::new(Buf::Recv, recv_displs[m] * es, recv_counts[m] * es),
    });
    for k in 1..n {
        let to = ((me + k) % n) as usize;
        let from = ((me + n - k) % n) as usize;
        let st = s.step();
        st.push(Action::Send {
            peer: to as u32,
            src: Span::new(Buf::Send, send_displs[to] * es, send_counts[to] * es),
        });
        st.push(Action::Recv {
            peer: from as u32,
            dst: Span::new(Buf::Recv, recv_displs[from] * es, recv_counts[from] * es),
        });
    }
    s
}
