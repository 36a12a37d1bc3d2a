//! Measuring link costs at communicator creation (`HCCL_COST_CALIBRATE=1`), so the algorithm
//! selector prices this machine's links rather than the defaults.
//!
//! Every rank exchanges messages of two sizes with its ring neighbours (all links busy at once,
//! as in a collective), derives α (the small-message time) and β (bytes over the extra time of
//! the large message) for the link to its right neighbour, and classifies that link as level0
//! (same host) or level1. A max-reduction over all ranks then gives every rank the same,
//! conservative figures per level — the selector must choose alike everywhere.

use std::time::Instant;

use crate::algo::cost::CostModel;
use crate::algo::{self, Action, Algo, Buf, Coll, Ctx, Schedule, Span};
use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::Result;
use crate::exec::executor::{self, Buffers};
use crate::exec::identity::OpTags;
use crate::transport::{Endpoint, SendHint};

/// Probe sizes in bytes and repetitions of each.
const SMALL: usize = 8;
const LARGE: usize = 256 * 1024;
const SMALL_REPS: u32 = 50;
const LARGE_REPS: u32 = 8;

/// One ring exchange of `bytes`: send to the right neighbour, receive from the left.
fn exchange(me: u32, n: u32, bytes: usize) -> Schedule {
    let mut s = Schedule::new("probe");
    let st = s.step();
    st.push(Action::Send {
        peer: (me + 1) % n,
        src: Span::new(Buf::Send, 0, bytes),
    });
    st.push(Action::Recv {
        peer: (me + n - 1) % n,
        dst: Span::new(Buf::Recv, 0, bytes),
    });
    s
}

/// The tags of the probes: not an operation of the communicator.
fn probe_tags() -> OpTags<'static> {
    OpTags::internal(crate::transport::tag::OpKind::Calibrate)
}

/// Seconds per exchange of `bytes`, after one untimed exchange.
fn time_exchange(
    ep: &mut Endpoint,
    ctx: &Ctx,
    bufs: &Buffers,
    bytes: usize,
    reps: u32,
    deadline: Instant,
) -> Result<f64> {
    let s = exchange(ctx.me, ctx.n, bytes);
    // SAFETY: both buffers hold LARGE bytes and outlive the calls.
    unsafe { executor::run(ep, &s, bufs, None, Some(deadline), &mut probe_tags(), &[])? };
    let t0 = Instant::now();
    for _ in 0..reps {
        // SAFETY: as above.
        unsafe { executor::run(ep, &s, bufs, None, Some(deadline), &mut probe_tags(), &[])? };
    }
    Ok(t0.elapsed().as_secs_f64() / reps as f64)
}

/// Measures the links and returns `base` with α and β of every level that has a link
/// replaced by the measured figures (bandwidth of mesh steps scaled alike). Collective: every
/// rank of the communicator must call it.
pub fn calibrate(
    ep: &mut Endpoint,
    ctx: &Ctx,
    base: CostModel,
    deadline: Instant,
) -> Result<CostModel> {
    let n = ctx.n;
    if n < 2 {
        return Ok(base);
    }
    let send = vec![0u8; LARGE];
    let mut recv = vec![0u8; LARGE];
    let bufs = Buffers {
        send: send.as_ptr() as usize,
        recv: recv.as_mut_ptr() as usize,
        scratch: 0,
        ext: Vec::new(),
        send_hint: SendHint::default(),
    };
    let small = time_exchange(ep, ctx, &bufs, SMALL, SMALL_REPS, deadline)?;
    let large = time_exchange(ep, ctx, &bufs, LARGE, LARGE_REPS, deadline)?;
    let alpha = small.max(1e-9);
    let inv_beta = ((large - small) / (LARGE - SMALL) as f64).max(1e-13);
    let right = (ctx.me + 1) % n;
    let level = usize::from(!ctx.topo.same_host(ctx.me, right));
    // Per level: [alpha, 1/beta]; zero where this rank has no link of the level. The maximum
    // over ranks is the slowest link of each level.
    let mut mine = [0f64; 4];
    mine[2 * level] = alpha;
    mine[2 * level + 1] = inv_beta;
    let mut all = [0f64; 4];
    let coll = Coll::AllReduce { count: 4 };
    let agree = algo::build(&coll, &Ctx { elem: 8, ..*ctx }, Algo::Direct);
    let mut scratch = vec![0u64; agree.scratch.div_ceil(8)];
    let bufs = Buffers {
        send: mine.as_ptr() as usize,
        recv: all.as_mut_ptr() as usize,
        scratch: scratch.as_mut_ptr() as usize,
        ext: Vec::new(),
        send_hint: SendHint::default(),
    };
    let red = executor::reduce_fn(DataType::Fp64, ReduceOp::Max);
    // SAFETY: 32-byte input and output and the schedule's scratch, alive for the call.
    unsafe {
        executor::run(
            ep,
            &agree,
            &bufs,
            Some(red),
            Some(deadline),
            &mut probe_tags(),
            &[],
        )?
    };
    let mut m = base;
    for (l, link) in [&mut m.level0, &mut m.level1].into_iter().enumerate() {
        let (a, ib) = (all[2 * l], all[2 * l + 1]);
        if a > 0.0 && ib > 0.0 {
            link.mesh_beta *= (1.0 / ib) / link.beta;
            link.alpha = a;
            link.beta = 1.0 / ib;
        }
    }
    Ok(m)
}
