//! Collective algorithms, each a pure function from (rank, rank count, links, counts) to a
//! [`Schedule`], and the selector that picks one per call.
//!
//! Where to look: ring algorithms in `ring.rs`, one-step mesh exchanges in `direct.rs`, the
//! pipelined broadcast chain in `chain.rs`, pairwise AlltoAll in `pairwise.rs`, recursive
//! halving-doubling in `rhd.rs`, Bruck in `bruck.rs`, the double binary tree in `tree.rs`, the
//! two-level hierarchical forms in `hier.rs`, the barrier in `barrier.rs`. Choosing: the α-β
//! cost model in `cost.rs`, the selector in `select.rs`, `HCCL_ALGO` parsing in `spec.rs`.
//! Checking: the byte-moving simulator in `sim.rs` and the symbolic checker in `symbolic.rs`;
//! `topo.rs` says which ranks share a host.

pub mod barrier;
pub mod bruck;
pub mod chain;
pub mod compressed;
pub mod cost;
pub mod direct;
pub mod fabric;
pub mod fingerprint;
pub mod flows;
pub mod hier;
pub mod pairwise;
pub mod rhd;
pub mod ring;
pub mod schedule;
pub mod select;
pub mod sim;
pub mod spec;
pub mod symbolic;
pub mod topo;
pub mod tree;

pub use schedule::{Action, Buf, Schedule, Span};
pub use topo::Topo;

/// One collective call, in elements of `Ctx::elem` bytes. The `V` forms carry per-rank counts
/// and displacements; AlltoAll and AlltoAllVC arrive already converted to `AlltoAllV`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

impl Coll {
    /// Whether every receive of the operation stores what arrives (none reduces it).
    pub fn stores_only(&self) -> bool {
        matches!(
            self,
            Coll::Broadcast { .. }
                | Coll::AllGather { .. }
                | Coll::AllGatherV { .. }
                | Coll::Scatter { .. }
                | Coll::AlltoAllV { .. }
                | Coll::P2p { .. }
        )
    }
}

/// One point-to-point transfer of a `Coll::P2p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct P2pItem {
    /// True to send, false to receive.
    pub send: bool,
    /// The other rank.
    pub peer: u32,
    /// Bytes to move.
    pub bytes: usize,
}

/// What an algorithm may know about where it runs. Every field is the same on every rank
/// except `me`, so all ranks derive matching schedules.
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    /// This rank.
    pub me: u32,
    /// Number of ranks.
    pub n: u32,
    /// Element size in bytes.
    pub elem: usize,
    /// True when some peer is reached over a socket (not process memory).
    pub network: bool,
    /// Which host each rank is on.
    pub topo: &'a Topo,
    /// Reductions must combine contributions in an order fixed by the schedule alone
    /// (`HCCL_DETERMINISTIC`), never in message arrival order.
    pub deterministic: bool,
    /// Ranks of one host are processes linked by shared memory, not threads of one process
    /// (worked out from the rank table, so every rank agrees).
    pub processes: bool,
    /// Some host runs more ranks than it has cores (worked out from the rank table, so every
    /// rank agrees).
    pub crowded: bool,
}

/// An algorithm family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// One-step exchange with every peer (mesh).
    Direct,
    /// Ring.
    Ring,
    /// Pipelined chain (broadcast).
    Chain,
    /// Pairwise exchange (AlltoAll).
    Pairwise,
    /// Recursive halving-doubling, folding non-power-of-two rank counts.
    Rhd,
    /// Two pipelined binary trees, each carrying half of the data (AllReduce).
    Tree,
    /// Bruck: ceil(log2 n) rounds of doubling, any rank count (AllGather).
    Bruck,
    /// Two-level: mesh within each host, ring (chain for Broadcast) across hosts, pipelined.
    Hier,
}

impl Algo {
    /// Every algorithm.
    pub const ALL: [Algo; 8] = [
        Algo::Direct,
        Algo::Ring,
        Algo::Chain,
        Algo::Pairwise,
        Algo::Rhd,
        Algo::Tree,
        Algo::Bruck,
        Algo::Hier,
    ];

    /// Name for logs and the simulator.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Direct => "direct",
            Algo::Ring => "ring",
            Algo::Chain => "chain",
            Algo::Pairwise => "pairwise",
            Algo::Rhd => "rhd",
            Algo::Tree => "tree",
            Algo::Bruck => "bruck",
            Algo::Hier => "hier",
        }
    }

    /// The algorithm called `name` (as printed by [`Algo::name`]).
    pub fn from_name(name: &str) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether this algorithm has its own schedule for `coll` (otherwise [`build`] falls back).
    pub fn supports(self, coll: &Coll) -> bool {
        use Coll::*;
        match self {
            Algo::Direct => true,
            Algo::Ring => matches!(
                coll,
                AllReduce { .. }
                    | ReduceScatter { .. }
                    | ReduceScatterV { .. }
                    | AllGather { .. }
                    | AllGatherV { .. }
                    | Reduce { .. }
                    | Broadcast { .. }
            ),
            Algo::Chain => matches!(coll, Broadcast { .. }),
            Algo::Pairwise => matches!(coll, AlltoAllV { .. }),
            Algo::Rhd => matches!(
                coll,
                AllReduce { .. }
                    | ReduceScatter { .. }
                    | ReduceScatterV { .. }
                    | AllGather { .. }
                    | AllGatherV { .. }
            ),
            Algo::Tree => matches!(coll, AllReduce { .. }),
            Algo::Bruck => matches!(coll, AllGather { .. } | AllGatherV { .. }),
            Algo::Hier => matches!(
                coll,
                AllReduce { .. }
                    | AllGather { .. }
                    | ReduceScatter { .. }
                    | ReduceScatterV { .. }
                    | Reduce { .. }
                    | Broadcast { .. }
            ),
        }
    }
}

fn equal_blocks(n: u32, count: usize) -> (Vec<usize>, Vec<usize>) {
    let n = n as usize;
    (vec![count; n], (0..n).map(|i| i * count).collect())
}

/// Builds rank `ctx.me`'s schedule for `coll` with algorithm `algo` (falling back to the
/// direct form for operations the algorithm does not cover).
pub fn build(coll: &Coll, ctx: &Ctx, algo: Algo) -> Schedule {
    let s = match (coll, algo) {
        (Coll::Barrier, _) => barrier::dissemination(ctx),
        (Coll::P2p { items }, _) => direct::p2p(ctx, items),
        (Coll::AllReduce { count }, Algo::Ring) => ring::allreduce(ctx, *count),
        (Coll::ReduceScatter { count }, Algo::Ring) => {
            let (counts, displs) = equal_blocks(ctx.n, *count);
            ring::reduce_scatter(ctx, &counts, &displs)
        }
        (Coll::ReduceScatterV { counts, displs }, Algo::Ring) => {
            ring::reduce_scatter(ctx, counts, displs)
        }
        (Coll::AllGather { count }, Algo::Ring) => {
            let (counts, displs) = equal_blocks(ctx.n, *count);
            ring::allgather(ctx, &counts, &displs)
        }
        (Coll::AllGatherV { counts, displs }, Algo::Ring) => ring::allgather(ctx, counts, displs),
        (Coll::Reduce { count, root }, Algo::Ring) => ring::reduce(ctx, *count, *root),
        (Coll::Broadcast { count, root }, Algo::Chain | Algo::Ring) => {
            chain::broadcast(ctx, *count, *root)
        }
        (Coll::AlltoAllV { .. }, Algo::Pairwise) => pairwise::alltoallv(ctx, coll),
        (Coll::AllReduce { count }, Algo::Rhd) => rhd::allreduce(ctx, *count),
        (Coll::ReduceScatter { count }, Algo::Rhd) => {
            let (counts, displs) = equal_blocks(ctx.n, *count);
            rhd::reduce_scatter(ctx, &counts, &displs)
        }
        (Coll::ReduceScatterV { counts, displs }, Algo::Rhd) => {
            rhd::reduce_scatter(ctx, counts, displs)
        }
        (Coll::AllGather { count }, Algo::Rhd) => {
            let (counts, displs) = equal_blocks(ctx.n, *count);
            rhd::allgather(ctx, &counts, &displs)
        }
        (Coll::AllGatherV { counts, displs }, Algo::Rhd) => rhd::allgather(ctx, counts, displs),
        (Coll::AllGather { count }, Algo::Bruck) => {
            let (counts, displs) = equal_blocks(ctx.n, *count);
            bruck::allgather(ctx, &counts, &displs)
        }
        (Coll::AllGatherV { counts, displs }, Algo::Bruck) => bruck::allgather(ctx, counts, displs),
        (Coll::AllReduce { count }, Algo::Tree) => tree::allreduce(ctx, *count),
        (Coll::AllReduce { count }, Algo::Hier) => hier::allreduce(ctx, *count, hier::PIECE_BYTES),
        (Coll::AllGather { count }, Algo::Hier) => hier::allgather(ctx, *count),
        (Coll::ReduceScatter { count }, Algo::Hier) => {
            let (counts, displs) = equal_blocks(ctx.n, *count);
            hier::reduce_scatter(ctx, &counts, &displs)
        }
        (Coll::ReduceScatterV { counts, displs }, Algo::Hier) => {
            hier::reduce_scatter(ctx, counts, displs)
        }
        (Coll::Reduce { count, root }, Algo::Hier) => {
            hier::reduce(ctx, *count, *root, hier::PIECE_BYTES)
        }
        (Coll::Broadcast { count, root }, Algo::Hier) => {
            hier::broadcast(ctx, *count, *root, hier::PIECE_BYTES)
        }
        _ => direct::build(ctx, coll),
    };
    s.finish()
}

/// Builds the schedule of every rank of `topo` for `coll_of(rank)` with `algo` (elements of
/// `elem` bytes, network links) on all available cores, handing each to `keep` (which may
/// compact it) as it is made; results in rank order.
pub fn build_each<T: Send>(
    topo: &Topo,
    coll_of: &(dyn Fn(u32) -> Coll + Sync),
    algo: Algo,
    elem: usize,
    deterministic: bool,
    keep: impl Fn(u32, Schedule) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let n = topo.n();
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, 8)
        .min(n.max(1) as usize) as u32;
    let per = n.div_ceil(threads).max(1);
    let keep = &keep;
    let parts: Vec<Result<Vec<T>, String>> = std::thread::scope(|sc| {
        let jobs: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    (t * per..((t + 1) * per).min(n))
                        .map(|me| {
                            let ctx = Ctx {
                                me,
                                n,
                                elem,
                                network: true,
                                topo,
                                deterministic,
                                processes: false,
                                crowded: false,
                            };
                            keep(me, build(&coll_of(me), &ctx, algo))
                        })
                        .collect()
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("schedule builder panicked"))
            .collect()
    });
    let mut out = Vec::with_capacity(n as usize);
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
