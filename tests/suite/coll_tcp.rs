//! Collectives over the network link. The library reads its environment once per process, so
//! each test re-executes this binary with `HCCL_INTRA_ROCE_ENABLE=1` (TCP even between
//! threads) and runs its checks there; plus a true multi-process job (3 processes, one rank
//! each) rendezvousing through a root info created by the parent.

use crate::common::cases::*;
use crate::common::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::process::Command;
use std::ptr::null_mut;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(240);
const TCP_SIZES: [usize; 4] = [0, 7, 4099, 300_000];
const TCP_DTYPES: [u32; 5] = [FP32, INT32, FP16, BF16, INT8];
const MOVE: u32 = FP8E4M3;

/// Runs `body` in a child process with the network link forced, or is that child.
fn in_tcp_child(test: &str, body: fn()) {
    in_tcp_child_with(test, &[], body);
}

/// [`in_tcp_child`] with extra environment for the child.
fn in_tcp_child_with(test: &str, extra: &[(&str, &str)], body: fn()) {
    if is_child() {
        body();
    } else {
        let mut env = vec![
            ("HCCL_INTRA_ROCE_ENABLE", "1"),
            ("ASCEND_GLOBAL_LOG_LEVEL", "1"),
            ("HCCL_EXEC_TIMEOUT", "120"),
        ];
        env.extend_from_slice(extra);
        let out = run_self(test, &env, TIMEOUT);
        // The links really were TCP: every communicator reported zero memory peers.
        assert!(
            out.stderr.contains("(0 memory peers"),
            "no communicator reported network-only links:\n{}",
            tail(&out.stderr, 3000)
        );
        for l in out.stderr.lines().filter(|l| l.contains(" ready (")) {
            assert!(
                l.contains("(0 memory peers"),
                "memory links despite HCCL_INTRA_ROCE_ENABLE=1: {l}"
            );
        }
    }
}

fn reductions(r: &Rank) {
    let mut k = 0u32;
    for dt in TCP_DTYPES {
        for count in TCP_SIZES {
            for op in OPS {
                k += 1;
                // Large sizes: one operator per type keeps the suite quick.
                if count == 300_000 && op != [SUM, MAX, SUM, MIN, PROD][(dt as usize) % 5] {
                    continue;
                }
                allreduce_case(r, r.comm, dt, op, count, k.is_multiple_of(2), 0);
                reduce_case(r, dt, op, count, k % r.n, k.is_multiple_of(3), false);
                let rs = if count == 300_000 {
                    count / r.n as usize + 1
                } else {
                    count
                };
                reduce_scatter_case(r, dt, op, rs, k % 2 == 1);
                reduce_scatterv_case(r, dt, op, rs, k as usize);
            }
        }
    }
    for dt in MOVE_ONLY {
        let b = vec![0u8; esize(dt)];
        let mut o = b.clone();
        let res = unsafe {
            hccl::ffi::coll_api::HcclAllReduce(p(&b), pm(&mut o), 1, dt, SUM, r.comm, null_mut())
        };
        r.expect_code(
            res,
            HcclResult::HCCL_E_NOT_SUPPORT,
            "AllReduce of a movement-only type",
        );
    }
}

fn movement(r: &Rank) {
    let mut k = 0u32;
    for dt in TCP_DTYPES.iter().copied().chain([MOVE]) {
        for count in TCP_SIZES {
            k += 1;
            let per_rank = if count == 300_000 {
                count / r.n as usize + 1
            } else {
                count
            };
            broadcast_case(r, dt, count, k % r.n);
            allgather_case(r, dt, per_rank, k.is_multiple_of(2));
            allgatherv_case(r, dt, per_rank, k as usize);
            scatter_case(r, dt, per_rank, (k + 1) % r.n, k % 2 == 1);
            alltoall_case(r, dt, per_rank);
            alltoallv_case(r, dt, per_rank);
            alltoallvc_case(r, dt, per_rank);
        }
    }
}

fn p2p(r: &Rank) {
    for dt in TCP_DTYPES.iter().copied().chain([MOVE]) {
        for count in TCP_SIZES {
            group_ring_case(r, dt, count);
        }
    }
    sendrecv_pairs(r, &TCP_SIZES, &[FP32, INT8, MOVE, BF16]);
    for (dt, c) in [(FP32, 7usize), (MOVE, 4099), (INT32, 0), (FP16, 70_000)] {
        batch_case(r, dt, c);
    }
    barrier_rounds(r, 10);
}

fn tcp_reductions_body() {
    for n in [2, 3, 4] {
        run_ranks(n, TIMEOUT, reductions);
    }
}
fn tcp_movement_body() {
    for n in [2, 3, 4] {
        run_ranks(n, TIMEOUT, movement);
    }
}
fn tcp_p2p_body() {
    for n in [2, 3, 4] {
        run_ranks(n, TIMEOUT, p2p);
    }
    // Two communicators alive at once, used alternately, over TCP.
    run_ranks_multi(3, 2, TIMEOUT, multi_comm_body);
}

#[test]
fn tcp_reductions() {
    in_tcp_child("tcp_reductions", tcp_reductions_body);
}

#[test]
fn tcp_movement() {
    in_tcp_child("tcp_movement", tcp_movement_body);
}

#[test]
fn tcp_p2p_group_barrier() {
    in_tcp_child("tcp_p2p_group_barrier", tcp_p2p_body);
}

/// Operations whose one-piece schedules need several MiB of scratch (ring ReduceScatter and
/// Reduce over the network), run with a 1 MiB staging budget: results stay exact and the
/// communicator never holds more scratch than the budget.
fn budget(r: &Rank) {
    let mut k = 0u32;
    for (dt, op) in [(FP32, SUM), (INT8, MAX), (BF16, PROD)] {
        for count in [300_001usize, 1_000_000] {
            k += 1;
            allreduce_case(r, r.comm, dt, op, count, k.is_multiple_of(2), 0);
            reduce_case(r, dt, op, count, k % r.n, k.is_multiple_of(3), false);
            reduce_scatter_case(r, dt, op, count / 2, k % 2 == 1);
            reduce_scatterv_case(r, dt, op, count / 2, k as usize);
            allgather_case(r, dt, count / 3, k.is_multiple_of(2));
            allgatherv_case(r, dt, count / 3, k as usize);
            broadcast_case(r, dt, count, k % r.n);
        }
    }
    let c = hccl::comm::registry::get(r.comm as usize).expect("live communicator");
    r.check(c.scratch_bytes() <= 1 << 20, || {
        format!(
            "scratch {} bytes exceeds the 1 MiB budget",
            c.scratch_bytes()
        )
    });
}

fn tcp_budget_body() {
    for n in [2, 3] {
        run_ranks(n, TIMEOUT, budget);
    }
}

#[test]
fn tcp_within_staging_budget() {
    in_tcp_child_with(
        "tcp_within_staging_budget",
        &[("HCCL_BUFFSIZE", "1")],
        tcp_budget_body,
    );
}

#[test]
fn tcp_within_staging_budget_rhd() {
    in_tcp_child_with(
        "tcp_within_staging_budget_rhd",
        &[
            ("HCCL_BUFFSIZE", "1"),
            ("HCCL_ALGO", "level0:NA;level1:H-D_R"),
        ],
        tcp_budget_body,
    );
}

// ------------------------------------------------------------------------------------------
// Three processes, one rank each.

const MP_RANKS: u32 = 3;

/// One rank of the multi-process job: every op on a few sizes and types.
fn mp_rank_body(r: &Rank) {
    let mut k = 0u32;
    for count in [0usize, 7, 4099, 200_000] {
        for (dt, op) in [(FP32, SUM), (INT8, MAX), (BF16, PROD), (INT32, MIN)] {
            k += 1;
            allreduce_case(r, r.comm, dt, op, count, k.is_multiple_of(2), 0);
            reduce_case(r, dt, op, count, k % r.n, k.is_multiple_of(3), false);
            reduce_scatter_case(r, dt, op, count / 3 + 1, false);
            reduce_scatterv_case(r, dt, op, count / 3, k as usize);
        }
        for dt in [FP16, INT128, FP8E5M2] {
            k += 1;
            broadcast_case(r, dt, count, k % r.n);
            allgather_case(r, dt, count / 3, true);
            allgatherv_case(r, dt, count / 3, k as usize);
            scatter_case(r, dt, count / 3, (k + 2) % r.n, true);
            alltoall_case(r, dt, count / 3);
            alltoallv_case(r, dt, count / 3);
            alltoallvc_case(r, dt, count / 3);
            group_ring_case(r, dt, count);
        }
    }
    sendrecv_pairs(r, &[7, 100_000], &[UINT16, FP64]);
    batch_case(r, INT64, 1000);
    // (The arrival-counting barrier check needs shared memory; here: barriers must succeed.)
    for _ in 0..5 {
        r.ok(
            unsafe { hccl::ffi::coll_api::HcclBarrier(r.comm, null_mut()) },
            "HcclBarrier",
        );
    }
}

#[test]
fn multi_process_three_ranks() {
    if let Ok(rank) = std::env::var("HCCL_TEST_MP_RANK") {
        // Child: one rank of the job. Failures are collected and reported on stderr.
        let rank: u32 = rank.parse().unwrap();
        let ri = root_info_from_bytes(&hex_decode(&std::env::var("HCCL_TEST_ROOT_INFO").unwrap()));
        let comm = init_rank(MP_RANKS, &ri, rank);
        let fails = run_single_rank(rank, MP_RANKS, comm, mp_rank_body);
        let d = unsafe { HcclCommDestroy(comm) };
        assert!(
            fails.is_empty(),
            "rank {rank}: {} failure(s):\n{}",
            fails.len(),
            fails.join("\n")
        );
        assert_eq!(d, OK, "HcclCommDestroy");
        return;
    }
    let ri = root_info();
    let hex = hex_encode(&root_info_bytes(&ri));
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<Spawned> = (0..MP_RANKS)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.args([
                "--exact",
                &test_path("multi_process_three_ranks"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HCCL_TEST_MP_RANK", rank.to_string())
            .env("HCCL_TEST_ROOT_INFO", &hex)
            .env("HCCL_EXEC_TIMEOUT", "60")
            .env("HCCL_CONNECT_TIMEOUT", "60")
            // Processes of one host would use shared memory: force the network link, and
            // log the links at INFO so the test can see which were used.
            .env("HCCL_INTRA_ROCE_ENABLE", "1")
            .env("ASCEND_GLOBAL_LOG_LEVEL", "1");
            spawn_piped(c)
        })
        .collect();
    // Every child gets the full budget measured from now (they run concurrently).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let outs: Vec<ChildOutput> = kids
        .into_iter()
        .map(|k| {
            k.finish(
                deadline.saturating_duration_since(std::time::Instant::now()),
                Vec::new(),
            )
        })
        .collect();
    for (rank, o) in outs.iter().enumerate() {
        assert!(
            o.success && o.stdout.contains("1 passed"),
            "rank {rank} process failed (code {:?}):\n--- stdout\n{}\n--- stderr\n{}",
            o.code,
            o.stdout,
            tail(&o.stderr, 5000)
        );
        let links = format!(
            "(0 memory peers, 0 shm peers, {} network peers)",
            MP_RANKS - 1
        );
        assert!(
            o.stderr.contains(&links),
            "rank {rank} did not run over TCP only ({links}):\n{}",
            tail(&o.stderr, 3000)
        );
    }
}
