//! Operations larger than the caches between threads of one process, where the memory link
//! copies plain receives with streaming stores (`transport::stream`): AllReduce, AllGather and
//! Broadcast of 16 MiB and more on 4 ranks, compared bit for bit with an independent
//! reference, with sizes that leave an unaligned tail.

mod common;

use common::cases::*;
use common::*;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(600);
/// Elements of 4 bytes: 16 MiB and a tail of 12 bytes.
const LARGE: usize = (4 << 20) + 3;

#[test]
fn allreduce_of_16_mib_on_four_threads() {
    run_ranks(4, TIMEOUT, |r| {
        allreduce_case(r, r.comm, FP32, SUM, LARGE, false, 0);
        allreduce_case(r, r.comm, INT32, MAX, LARGE, true, 0);
    });
}

#[test]
fn allgather_and_broadcast_of_16_mib_on_four_threads() {
    run_ranks(4, TIMEOUT, |r| {
        allgather_case(r, FP32, LARGE / 4 + 1, false);
        broadcast_case(r, INT32, LARGE, 3);
    });
}
