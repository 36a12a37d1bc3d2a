//! The operations under test: buffer layouts, calls into the library, and where each output
//! element's expected value comes from.
//!
//! `data_size` is the size of each rank's largest buffer, as the vendor tool and NCCL's tests
//! report it: the single buffer of all-reduce, broadcast, reduce and send/recv; the
//! `ranks`-block buffer of all-gather (output), reduce-scatter (input), all-to-all(v) (both) and
//! scatter (the root's input). A requested size is rounded down to whole elements (whole blocks
//! of one element per rank for the blocked operations), with at least one element.
//! All-to-all-v sends `block − 1 + (src + dst) mod 3` elements from `src` to `dst`, with a
//! one-element gap after each block on both sides; its `data_size` is the nominal
//! `ranks × block`. Barrier moves no data: its one row has `data_size` 0.

use std::os::raw::c_void;
use std::ptr::null_mut;

use hccl::ffi::coll_api as api;
use hccl::ffi::types::{HcclComm, HcclResult, HcclSendRecvItem};

use crate::check::{Region, Source};
use crate::cli::RedOp;
use crate::dtype::DType;

/// A collective the tester measures; one binary each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `all_reduce_test`
    AllReduce,
    /// `all_gather_test`
    AllGather,
    /// `broadcast_test`
    Broadcast,
    /// `reduce_scatter_test`
    ReduceScatter,
    /// `reduce_test`
    Reduce,
    /// `alltoall_test`
    AlltoAll,
    /// `alltoallv_test`
    AlltoAllV,
    /// `scatter_test`
    Scatter,
    /// `send_recv_test`: every rank sends to the next and receives from the previous one.
    SendRecv,
    /// `barrier_test`: no payload, one row of size 0.
    Barrier,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 10] = [
        Op::AllReduce,
        Op::AllGather,
        Op::Broadcast,
        Op::ReduceScatter,
        Op::Reduce,
        Op::AlltoAll,
        Op::AlltoAllV,
        Op::Scatter,
        Op::SendRecv,
        Op::Barrier,
    ];

    /// The operation's name, as in its binary's name without `_test`.
    pub fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::Broadcast => "broadcast",
            Op::ReduceScatter => "reduce_scatter",
            Op::Reduce => "reduce",
            Op::AlltoAll => "alltoall",
            Op::AlltoAllV => "alltoallv",
            Op::Scatter => "scatter",
            Op::SendRecv => "send_recv",
            Op::Barrier => "barrier",
        }
    }

    /// Whether the operation reduces (and so takes `-o`).
    pub fn reduces(self) -> bool {
        matches!(self, Op::AllReduce | Op::ReduceScatter | Op::Reduce)
    }

    /// Whether the operation has a root (`-r`).
    pub fn rooted(self) -> bool {
        matches!(self, Op::Broadcast | Op::Reduce | Op::Scatter)
    }

    /// Bus bandwidth over algorithm bandwidth for `n` ranks (NCCL's convention).
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = n as f64;
        match self {
            Op::AllReduce => 2.0 * (n - 1.0) / n,
            Op::AllGather | Op::ReduceScatter | Op::AlltoAll | Op::AlltoAllV => (n - 1.0) / n,
            Op::Broadcast | Op::Reduce | Op::Scatter | Op::SendRecv | Op::Barrier => 1.0,
        }
    }

    fn blocked(self) -> bool {
        matches!(
            self,
            Op::AllGather | Op::ReduceScatter | Op::AlltoAll | Op::AlltoAllV | Op::Scatter
        )
    }
}

/// Everything one rank needs to run one size.
pub struct Layout {
    /// The operation.
    pub op: Op,
    /// Element type.
    pub dt: DType,
    /// Reduction (reducing operations only).
    pub red: Option<RedOp>,
    /// Root rank.
    pub root: u32,
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub n: u32,
    /// Elements per block: the count argument of the call.
    pub count: u64,
    /// Bytes reported as `data_size`.
    pub data_size: u64,
    /// Send buffer length in elements.
    pub send_elems: u64,
    /// Receive buffer length in elements.
    pub recv_elems: u64,
    /// All-to-all-v: per-peer send counts, send displacements, receive counts and
    /// displacements of this rank (in elements).
    pub v: [Vec<u64>; 4],
}

/// All-to-all-v count from `src` to `dst`: the block size varied by −1, 0 or +1 so that
/// counts differ per pair.
fn v_count(c: u64, src: u32, dst: u32) -> u64 {
    if c == 0 {
        0
    } else {
        c - 1 + (src as u64 + dst as u64) % 3
    }
}

/// Displacements of blocks of `counts`, each followed by a one-element gap so that the
/// displacements matter.
fn gapped_displs(counts: &[u64]) -> (Vec<u64>, u64) {
    let mut at = 0;
    let d = counts
        .iter()
        .map(|&c| {
            let here = at;
            at += c + 1;
            here
        })
        .collect();
    (d, at)
}

impl Layout {
    /// The layout of a run of `bytes` requested bytes.
    pub fn new(op: Op, dt: DType, red: RedOp, root: u32, rank: u32, n: u32, bytes: u64) -> Layout {
        let es = dt.size() as u64;
        let blocks = if op.blocked() { n as u64 } else { 1 };
        let count = if bytes == 0 || op == Op::Barrier {
            0
        } else {
            (bytes / es / blocks).max(1)
        };
        let whole = count * blocks;
        let (send_elems, recv_elems) = match op {
            Op::AllReduce | Op::SendRecv => (count, count),
            Op::Broadcast => (0, count),
            Op::Reduce => (count, if rank == root { count } else { 0 }),
            Op::AllGather => (count, whole),
            Op::ReduceScatter => (whole, count),
            Op::AlltoAll => (whole, whole),
            Op::Scatter => (if rank == root { whole } else { 0 }, count),
            Op::AlltoAllV | Op::Barrier => (0, 0),
        };
        let mut l = Layout {
            op,
            dt,
            red: op.reduces().then_some(red),
            root,
            rank,
            n,
            count,
            data_size: whole * es,
            send_elems,
            recv_elems,
            v: Default::default(),
        };
        if op == Op::AlltoAllV {
            let sc: Vec<u64> = (0..n).map(|d| v_count(count, rank, d)).collect();
            let rc: Vec<u64> = (0..n).map(|s| v_count(count, s, rank)).collect();
            let (sd, send_len) = gapped_displs(&sc);
            let (rd, recv_len) = gapped_displs(&rc);
            l.send_elems = send_len;
            l.recv_elems = recv_len;
            l.v = [sc, sd, rc, rd];
        }
        l
    }

    /// The rank this rank receives from in send/recv.
    fn prev(&self) -> u32 {
        (self.rank + self.n - 1) % self.n
    }

    /// The rank this rank sends to in send/recv.
    fn next(&self) -> u32 {
        (self.rank + 1) % self.n
    }

    /// Whether this rank's input lives in the receive buffer (broadcast's in-place buffer).
    pub fn input_in_recv(&self) -> bool {
        self.op == Op::Broadcast && self.rank == self.root
    }

    /// The output regions of this rank and where their values come from.
    pub fn regions(&self) -> Vec<Region> {
        let c = self.count;
        let one = |source, first| {
            vec![Region {
                at: 0,
                count: c,
                source,
                first,
            }]
        };
        let me = self.rank;
        match self.op {
            Op::AllReduce => one(Source::Reduced, 0),
            Op::Reduce if me == self.root => one(Source::Reduced, 0),
            Op::Reduce | Op::Barrier => Vec::new(),
            Op::ReduceScatter => one(Source::Reduced, me as u64 * c),
            Op::Broadcast => one(Source::Copy { src: self.root }, 0),
            Op::Scatter => one(Source::Copy { src: self.root }, me as u64 * c),
            Op::SendRecv => one(Source::Copy { src: self.prev() }, 0),
            Op::AllGather => (0..self.n)
                .map(|q| Region {
                    at: q as u64 * c,
                    count: c,
                    source: Source::Copy { src: q },
                    first: 0,
                })
                .collect(),
            Op::AlltoAll => (0..self.n)
                .map(|q| Region {
                    at: q as u64 * c,
                    count: c,
                    source: Source::Copy { src: q },
                    first: me as u64 * c,
                })
                .collect(),
            Op::AlltoAllV => (0..self.n)
                .map(|q| {
                    // Rank q's send displacement towards this rank, recomputed from q's counts.
                    let qc: Vec<u64> = (0..self.n).map(|d| v_count(c, q, d)).collect();
                    let (qd, _) = gapped_displs(&qc);
                    Region {
                        at: self.v[3][q as usize],
                        count: self.v[2][q as usize],
                        source: Source::Copy { src: q },
                        first: qd[me as usize],
                    }
                })
                .collect(),
        }
    }

    /// Issues the operation once on `comm` and waits for it.
    ///
    /// # Safety
    /// `send` and `recv` must hold `send_elems` and `recv_elems` elements, and `comm` must be a
    /// live communicator of `n` ranks whose rank is `rank`.
    pub unsafe fn call(&self, send: *mut u8, recv: *mut u8, comm: HcclComm) -> HcclResult {
        let (s, r) = (send as *mut c_void, recv as *mut c_void);
        let dt = self.dt.raw();
        let red = self.red.map_or(0, RedOp::raw);
        let st = null_mut();
        // SAFETY: the caller guarantees the buffers and the communicator; the count and
        // displacement arrays are this layout's own, sized for `n` ranks.
        unsafe {
            match self.op {
                Op::AllReduce => api::HcclAllReduce(s, r, self.count, dt, red, comm, st),
                Op::Broadcast => api::HcclBroadcast(r, self.count, dt, self.root, comm, st),
                Op::Reduce => api::HcclReduce(s, r, self.count, dt, red, self.root, comm, st),
                Op::AllGather => api::HcclAllGather(s, r, self.count, dt, comm, st),
                Op::ReduceScatter => api::HcclReduceScatter(s, r, self.count, dt, red, comm, st),
                Op::Scatter => api::HcclScatter(s, r, self.count, dt, self.root, comm, st),
                Op::AlltoAll => api::HcclAlltoAll(s, self.count, dt, r, self.count, dt, comm, st),
                Op::Barrier => api::HcclBarrier(comm, st),
                Op::AlltoAllV => {
                    let p = |i: usize| self.v[i].as_ptr() as *const c_void;
                    api::HcclAlltoAllV(s, p(0), p(1), dt, r, p(2), p(3), dt, comm, st)
                }
                Op::SendRecv => {
                    let mut items = [
                        HcclSendRecvItem {
                            sendRecvType: 0,
                            buf: s,
                            count: self.count,
                            dataType: dt,
                            remoteRank: self.next(),
                        },
                        HcclSendRecvItem {
                            sendRecvType: 1,
                            buf: r,
                            count: self.count,
                            dataType: dt,
                            remoteRank: self.prev(),
                        },
                    ];
                    api::HcclBatchSendRecv(items.as_mut_ptr(), 2, comm, st)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_to_whole_blocks() {
        let l = Layout::new(Op::AllGather, DType::Fp32, RedOp::Sum, 0, 0, 3, 100);
        assert_eq!((l.count, l.data_size, l.recv_elems), (8, 96, 24));
        let l = Layout::new(Op::AllReduce, DType::Fp64, RedOp::Sum, 0, 1, 3, 4);
        assert_eq!((l.count, l.data_size), (1, 8));
        let l = Layout::new(Op::AllReduce, DType::Fp64, RedOp::Sum, 0, 1, 3, 0);
        assert_eq!((l.count, l.data_size), (0, 0));
    }

    #[test]
    fn alltoallv_regions_match_peer_layouts() {
        let n = 4;
        for me in 0..n {
            let l = Layout::new(Op::AlltoAllV, DType::Int8, RedOp::Sum, 0, me, n, 64);
            for (q, r) in l.regions().iter().enumerate() {
                let peer = Layout::new(Op::AlltoAllV, DType::Int8, RedOp::Sum, 0, q as u32, n, 64);
                assert_eq!(r.count, peer.v[0][me as usize]);
                assert_eq!(r.first, peer.v[1][me as usize]);
            }
        }
    }
}
