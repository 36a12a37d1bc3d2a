//! Choosing an algorithm for a call from the operation, its size and the links involved.
//!
//! Between threads of one process a "message" is one memory copy by the receiver, so one-step
//! exchanges win at every size. Over the network, one-step exchanges win while latency
//! dominates and bandwidth-optimal forms (ring, chain, pairwise) win for large messages.

use super::{Algo, Coll, Ctx};

/// Bytes per rank above which bandwidth-optimal network algorithms are used.
pub const NETWORK_LARGE_BYTES: usize = 64 * 1024;

/// The algorithm for `coll` in context `ctx`.
pub fn choose(coll: &Coll, ctx: &Ctx) -> Algo {
    if !ctx.network || ctx.n <= 2 {
        // Two ranks: the ring is a direct exchange already, and direct needs no scratch copy.
        return match coll {
            Coll::AllReduce { count } if ctx.network && count * ctx.elem > NETWORK_LARGE_BYTES => {
                Algo::Ring
            }
            _ => Algo::Direct,
        };
    }
    let bytes = match coll {
        Coll::AllReduce { count } | Coll::Broadcast { count, .. } | Coll::Reduce { count, .. } => {
            count * ctx.elem
        }
        Coll::AllGather { count } | Coll::ReduceScatter { count } => {
            count * ctx.elem * ctx.n as usize
        }
        Coll::AllGatherV { counts, .. } | Coll::ReduceScatterV { counts, .. } => {
            counts.iter().sum::<usize>() * ctx.elem
        }
        Coll::AlltoAllV { send_counts, .. } => send_counts.iter().sum::<usize>() * ctx.elem,
        Coll::Scatter { .. } | Coll::P2p { .. } | Coll::Barrier => return Algo::Direct,
    };
    if bytes <= NETWORK_LARGE_BYTES {
        return Algo::Direct;
    }
    match coll {
        Coll::Broadcast { .. } => Algo::Chain,
        Coll::AlltoAllV { .. } => Algo::Pairwise,
        _ => Algo::Ring,
    }
}
