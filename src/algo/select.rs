//! Choosing an algorithm for a call: the cheapest under the α-β model of `cost.rs`, for the
//! operation, its size, the rank count and the host layout. Every input is the same on every
//! rank, so all ranks choose alike.

use super::cost::{predict, CostModel, Shape};
use super::{Algo, Coll, Ctx};

/// Bytes per rank above which pairwise AlltoAll is used over the network.
pub const NETWORK_LARGE_BYTES: usize = 64 * 1024;

/// The size the cost formulas take for `coll` (see [`predict`]).
pub fn model_bytes(coll: &Coll, elem: usize, n: u32) -> usize {
    match coll {
        Coll::AllReduce { count } | Coll::Broadcast { count, .. } | Coll::Reduce { count, .. } => {
            count * elem
        }
        Coll::AllGather { count } | Coll::ReduceScatter { count } => count * elem * n as usize,
        Coll::Scatter { count, .. } => count * elem * n as usize,
        Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => {
            counts.iter().sum::<usize>() * elem
        }
        Coll::AlltoAllV { send_counts, .. } => send_counts.iter().sum::<usize>() * elem,
        Coll::P2p { .. } | Coll::Barrier => 0,
    }
}

/// Predicted seconds of every algorithm that has a schedule for `coll`, in [`Algo::ALL`] order.
pub fn predictions(coll: &Coll, ctx: &Ctx, model: &CostModel) -> Vec<(Algo, f64)> {
    let bytes = model_bytes(coll, ctx.elem, ctx.n) as f64;
    let sh = Shape::of(ctx.topo);
    Algo::ALL
        .into_iter()
        .filter_map(|a| predict(a, coll, bytes, sh, model, !ctx.network).map(|t| (a, t)))
        .collect()
}

/// The algorithm for `coll` in context `ctx` under `model`.
pub fn choose_with(coll: &Coll, ctx: &Ctx, model: &CostModel) -> Algo {
    match coll {
        Coll::P2p { .. } | Coll::Barrier | Coll::Scatter { .. } => return Algo::Direct,
        // Per-rank counts differ, so the size cannot steer a choice every rank agrees on;
        // only the (shared) link kind does.
        Coll::AlltoAllV { .. } => {
            return if ctx.network && ctx.n > 2 {
                Algo::Pairwise
            } else {
                Algo::Direct
            }
        }
        _ => {}
    }
    let mut best = (Algo::Direct, f64::INFINITY);
    for (a, t) in predictions(coll, ctx, model) {
        if t < best.1 {
            best = (a, t);
        }
    }
    best.0
}

/// The algorithm for `coll` in context `ctx` under the default model.
pub fn choose(coll: &Coll, ctx: &Ctx) -> Algo {
    choose_with(coll, ctx, &CostModel::for_ctx(ctx))
}
