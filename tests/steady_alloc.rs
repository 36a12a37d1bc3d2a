//! Steady state allocates nothing: once an operation of a given shape has run, repeating it
//! (and the other collectives of a training step) makes no heap allocation anywhere in the
//! process. A counting global allocator sees every allocation of every thread.

mod common;

use common::*;
use hccl::ffi::coll_api::*;
use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Held by each test: the counter sees every thread of the process, so tests run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One "training step": the collectives a data-parallel step makes, on fixed buffers.
fn step(comm: HcclComm, n: usize, a: &mut [f32], b: &mut [f32]) {
    let big = a.len() / n;
    let (pa, pb) = (a.as_mut_ptr() as *mut c_void, b.as_mut_ptr() as *mut c_void);
    let fp32 = HcclDataType::HCCL_DATA_TYPE_FP32 as u32;
    let sum = HcclReduceOp::HCCL_REDUCE_SUM as u32;
    unsafe {
        let ok = HcclResult::HCCL_SUCCESS;
        assert_eq!(
            HcclAllReduce(pa, pb, big as u64, fp32, sum, comm, null_mut()),
            ok
        );
        assert_eq!(HcclAllReduce(pa, pb, 2, fp32, sum, comm, null_mut()), ok);
        assert_eq!(
            HcclAllGather(pa, pb, big as u64, fp32, comm, null_mut()),
            ok
        );
        assert_eq!(
            HcclReduceScatter(pa, pb, big as u64, fp32, sum, comm, null_mut()),
            ok
        );
        assert_eq!(HcclBroadcast(pa, big as u64, fp32, 0, comm, null_mut()), ok);
        assert_eq!(HcclBarrier(comm, null_mut()), ok);
    }
}

/// Heap allocations in every thread while each of `n` rank threads runs 20 steps, idle for
/// `pause` after the tenth (as between training steps), after 3 warm-up steps.
fn steady(n: usize, pause: Duration) -> u64 {
    let ri = root_info();
    let bar = Arc::new(Barrier::new(n));
    let delta = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (bar, delta) = (bar.clone(), delta.clone());
            std::thread::spawn(move || {
                let comm = init_rank(n as u32, &ri, rank as u32);
                let mut a = vec![1.0f32; 256 * 1024];
                let mut b = vec![0.0f32; 256 * 1024];
                for _ in 0..3 {
                    step(comm, n, &mut a, &mut b);
                }
                bar.wait();
                let before = ALLOCS.load(Ordering::SeqCst);
                bar.wait();
                for i in 0..20 {
                    if i == 10 {
                        std::thread::sleep(pause);
                    }
                    step(comm, n, &mut a, &mut b);
                }
                bar.wait();
                if rank == 0 {
                    delta.store(ALLOCS.load(Ordering::SeqCst) - before, Ordering::SeqCst);
                }
                bar.wait();
                assert_eq!(unsafe { HcclCommDestroy(comm) }, HcclResult::HCCL_SUCCESS);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("rank thread");
    }
    delta.load(Ordering::SeqCst)
}

/// The library's own threads allocate nothing either while the ranks wait between steps: the
/// data listener's thread wakes at least once a second (a step under load, or a slow one, takes
/// longer than that), so the steps are paused for longer than one such period.
#[test]
fn background_threads_do_not_allocate_between_steps() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = steady(2, Duration::from_millis(1500));
    assert_eq!(
        d, 0,
        "{d} heap allocations in 20 steady-state steps with a pause of 1.5 s"
    );
}

#[test]
fn repeated_collectives_do_not_allocate() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for n in [2, 4] {
        let d = steady(n, Duration::ZERO);
        assert_eq!(
            d, 0,
            "{n} ranks: {d} heap allocations in 20 steady-state steps"
        );
    }
}

/// One call on rank `rank` of `n` with two buffers.
type Call = fn(HcclComm, usize, usize, &mut [f32], &mut [f32]);

/// Heap allocations in every thread while each of `n` rank threads repeats `call` 20 times on
/// buffers of `len` floats, after a few calls of the same shape (the plan, the entry's lists and
/// the links' queues are then in place).
fn repeated(n: usize, len: usize, call: Call) -> u64 {
    let ri = root_info();
    let bar = Arc::new(Barrier::new(n));
    let delta = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (bar, delta) = (bar.clone(), delta.clone());
            std::thread::spawn(move || {
                let comm = init_rank(n as u32, &ri, rank as u32);
                let mut a = vec![1.0f32; len];
                let mut b = vec![0.0f32; len];
                for _ in 0..5 {
                    call(comm, rank, n, &mut a, &mut b);
                }
                bar.wait();
                let before = ALLOCS.load(Ordering::SeqCst);
                bar.wait();
                for _ in 0..20 {
                    call(comm, rank, n, &mut a, &mut b);
                }
                bar.wait();
                if rank == 0 {
                    delta.store(ALLOCS.load(Ordering::SeqCst) - before, Ordering::SeqCst);
                }
                bar.wait();
                assert_eq!(unsafe { HcclCommDestroy(comm) }, HcclResult::HCCL_SUCCESS);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("rank thread");
    }
    delta.load(Ordering::SeqCst)
}

/// A small AlltoAll: its count and displacement lists are refilled, not allocated.
fn alltoall(comm: HcclComm, _rank: usize, _n: usize, a: &mut [f32], b: &mut [f32]) {
    let fp32 = HcclDataType::HCCL_DATA_TYPE_FP32 as u32;
    let (pa, pb) = (a.as_mut_ptr() as *mut c_void, b.as_mut_ptr() as *mut c_void);
    let rc = unsafe { HcclAlltoAll(pa, 2, fp32, pb, 2, fp32, comm, null_mut()) };
    assert_eq!(rc, HcclResult::HCCL_SUCCESS);
}

/// A ring of small batches (send to the next rank, receive from the previous one).
fn batch(comm: HcclComm, rank: usize, n: usize, a: &mut [f32], b: &mut [f32]) {
    let fp32 = HcclDataType::HCCL_DATA_TYPE_FP32 as u32;
    let mut items = [
        HcclSendRecvItem {
            sendRecvType: 0,
            buf: a.as_mut_ptr() as *mut c_void,
            count: 4,
            dataType: fp32,
            remoteRank: ((rank + 1) % n) as u32,
        },
        HcclSendRecvItem {
            sendRecvType: 1,
            buf: b.as_mut_ptr() as *mut c_void,
            count: 4,
            dataType: fp32,
            remoteRank: ((rank + n - 1) % n) as u32,
        },
    ];
    let rc = unsafe { HcclBatchSendRecv(items.as_mut_ptr(), 2, comm, null_mut()) };
    assert_eq!(rc, HcclResult::HCCL_SUCCESS);
}

#[test]
fn repeated_small_alltoall_and_batches_reuse_their_lists() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for n in [2, 4] {
        for (name, call) in [("AlltoAll", alltoall as Call), ("BatchSendRecv", batch)] {
            // Not one per call: the entry's lists were four (AlltoAll) or two (batch)
            // allocations per call on every rank. (A link may still grow a queue now and then.)
            let d = repeated(n, 64, call);
            assert!(d < 20, "{n} ranks: {d} heap allocations in 20 {name} calls");
        }
    }
}

/// An AllReduce of the whole buffer with the maximum: large enough for ranks that are threads to
/// write into each other's outputs, folded through the stage (the fp32 sum mostly bypasses it).
fn large_max(comm: HcclComm, _rank: usize, _n: usize, a: &mut [f32], b: &mut [f32]) {
    let fp32 = HcclDataType::HCCL_DATA_TYPE_FP32 as u32;
    let max = HcclReduceOp::HCCL_REDUCE_MAX as u32;
    let (pa, pb) = (a.as_mut_ptr() as *mut c_void, b.as_mut_ptr() as *mut c_void);
    let rc = unsafe { HcclAllReduce(pa, pb, a.len() as u64, fp32, max, comm, null_mut()) };
    assert_eq!(rc, HcclResult::HCCL_SUCCESS);
}

#[test]
fn repeated_thread_write_path_reuses_its_stage_and_lists() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // 16 MiB per rank: the smallest AllReduce that takes the write path.
    let len = (16 << 20) / 4;
    for n in [2, 4] {
        let d = repeated(n, len, large_max);
        assert_eq!(
            d, 0,
            "{n} ranks: {d} heap allocations in 20 write-path AllReduces"
        );
    }
}
