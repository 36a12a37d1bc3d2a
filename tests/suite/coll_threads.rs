//! The full collective matrix with ranks as threads of this process (memory links): every op ×
//! every data type × every reduce op × rank counts {1, 2, 3, 4, 5, 8} × element counts
//! {0, 1, 7, 4099} (and 1Mi+1 for a few types per op), each output compared bit for bit with an
//! independent reference. One communicator per rank count serves a whole op family; the case
//! functions live in `common/cases.rs` (shared with the TCP suite).

use crate::common::cases::*;
use crate::common::*;
use std::time::Duration;

const RANKS: [u32; 6] = [1, 2, 3, 4, 5, 8];
const TIMEOUT: Duration = Duration::from_secs(300);

fn for_ranks(f: fn(&Rank)) {
    for n in RANKS {
        run_ranks(n, TIMEOUT, f);
    }
}

#[test]
fn allreduce_matrix() {
    check_reference_conversions();
    for_ranks(allreduce_body);
}

#[test]
fn reduce_matrix() {
    for_ranks(reduce_body);
}

#[test]
fn broadcast_matrix() {
    for_ranks(broadcast_body);
}

#[test]
fn allgather_matrix() {
    for_ranks(allgather_body);
}

#[test]
fn reduce_scatter_matrix() {
    for_ranks(reduce_scatter_body);
}

#[test]
fn scatter_matrix() {
    for_ranks(scatter_body);
}

#[test]
fn alltoall_matrix() {
    for_ranks(alltoall_body);
}

#[test]
fn p2p_group_barrier_matrix() {
    for_ranks(p2p_body);
}

#[test]
fn several_communicators_alternating() {
    for n in [2u32, 3, 4] {
        run_ranks_multi(n, 2, TIMEOUT, multi_comm_body);
    }
}

/// Two independent groups of rank threads on their own communicators at the same time.
#[test]
fn concurrent_independent_communicators() {
    let h: Vec<_> = (0..2)
        .map(|j| {
            std::thread::spawn(move || {
                run_ranks(3 + j, TIMEOUT, move |r| {
                    for i in 0..30u64 {
                        allreduce_case(
                            r,
                            r.comm,
                            [FP32, INT8, FP16][(i % 3) as usize],
                            SUM,
                            4099,
                            false,
                            i,
                        );
                    }
                })
            })
        })
        .collect();
    for t in h {
        t.join().expect("group of ranks failed");
    }
}
