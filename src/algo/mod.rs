//! Collective algorithms, each a pure function from (rank, rank count, links, counts) to a
//! [`Schedule`](schedule::Schedule), and the selector that picks one per call.
//!
//! Where to look: ring algorithms in `ring.rs`, one-step mesh exchanges in `direct.rs`, the
//! pipelined broadcast chain in `chain.rs`, pairwise AlltoAll in `pairwise.rs`, the barrier in
//! `barrier.rs`, and the choice among them in `select.rs`.

pub mod barrier;
pub mod chain;
pub mod direct;
pub mod pairwise;
pub mod ring;
pub mod schedule;
pub mod select;
pub mod sim;

pub use schedule::{Action, Buf, Schedule, Span};

/// One collective call, in elements of `Ctx::elem` bytes. The `V` forms carry per-rank counts
/// and displacements; AlltoAll and AlltoAllVC arrive already converted to `AlltoAllV`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coll {
    /// Every rank ends with the reduction of all inputs.
    AllReduce { count: usize },
    /// `root`'s buffer is copied to every rank.
    Broadcast { count: usize, root: u32 },
    /// `root` ends with the reduction of all inputs.
    Reduce { count: usize, root: u32 },
    /// Every rank ends with all inputs, concatenated in rank order.
    AllGather { count: usize },
    /// AllGather with per-rank counts and output displacements.
    AllGatherV {
        counts: Vec<usize>,
        displs: Vec<usize>,
    },
    /// Rank r ends with block r of the reduction (blocks of `count` elements).
    ReduceScatter { count: usize },
    /// ReduceScatter with per-rank input blocks (counts, displacements).
    ReduceScatterV {
        counts: Vec<usize>,
        displs: Vec<usize>,
    },
    /// Rank r receives block r of `root`'s input.
    Scatter { count: usize, root: u32 },
    /// Rank r sends `send_counts[p]` elements at `send_displs[p]` to each p, and receives
    /// `recv_counts[p]` at `recv_displs[p]` from each p.
    AlltoAllV {
        send_counts: Vec<usize>,
        send_displs: Vec<usize>,
        recv_counts: Vec<usize>,
        recv_displs: Vec<usize>,
    },
    /// Point-to-point items, completed together; item i uses buffer `Buf::Ext(i)`.
    P2p { items: Vec<P2pItem> },
    /// No rank leaves before every rank has entered.
    Barrier,
}

/// One point-to-point transfer of a `Coll::P2p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pItem {
    /// True to send, false to receive.
    pub send: bool,
    /// The other rank.
    pub peer: u32,
    /// Bytes to move.
    pub bytes: usize,
}

/// What an algorithm may know about where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    /// This rank.
    pub me: u32,
    /// Number of ranks.
    pub n: u32,
    /// Element size in bytes.
    pub elem: usize,
    /// True when some peer is reached over the network (not process memory).
    pub network: bool,
}

/// An algorithm family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// One-step exchange with every peer (mesh).
    Direct,
    /// Ring.
    Ring,
    /// Pipelined chain (broadcast).
    Chain,
    /// Pairwise exchange (AlltoAll).
    Pairwise,
}

impl Algo {
    /// Name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Direct => "direct",
            Algo::Ring => "ring",
            Algo::Chain => "chain",
            Algo::Pairwise => "pairwise",
        }
    }
}

/// Builds rank `ctx.me`'s schedule for `coll` with algorithm `algo` (falling back to the
/// direct form for operations the algorithm does not cover).
pub fn build(coll: &Coll, ctx: &Ctx, algo: Algo) -> Schedule {
    let s = match (coll, algo) {
        (Coll::Barrier, _) => barrier::dissemination(ctx),
        (Coll::P2p { items }, _) => direct::p2p(ctx, items),
        (Coll::AllReduce { count }, Algo::Ring) => ring::allreduce(ctx, *count),
        (Coll::ReduceScatter { count }, Algo::Ring) => {
            let n = ctx.n as usize;
            let counts = vec![*count; n];
            let displs = (0..n).map(|i| i * count).collect::<Vec<_>>();
            ring::reduce_scatter(ctx, &counts, &displs)
        }
        (Coll::ReduceScatterV { counts, displs }, Algo::Ring) => {
            ring::reduce_scatter(ctx, counts, displs)
        }
        (Coll::AllGather { count }, Algo::Ring) => {
            let n = ctx.n as usize;
            let counts = vec![*count; n];
            let displs = (0..n).map(|i| i * count).collect::<Vec<_>>();
            ring::allgather(ctx, &counts, &displs)
        }
        (Coll::AllGatherV { counts, displs }, Algo::Ring) => ring::allgather(ctx, counts, displs),
        (Coll::Reduce { count, root }, Algo::Ring) => ring::reduce(ctx, *count, *root),
        (Coll::Broadcast { count, root }, Algo::Chain | Algo::Ring) => {
            chain::broadcast(ctx, *count, *root)
        }
        (Coll::AlltoAllV { .. }, Algo::Pairwise) => pairwise::alltoallv(ctx, coll),
        _ => direct::build(ctx, coll),
    };
    s.finish()
}

#[cfg(test)]
mod tests;
