//! AllReduce between ranks that are all threads of one process, by writing into each other's
//! outputs: the elements are cut into pieces, each rank claims pieces one at a time, folds a
//! piece of every rank's input in rank order `((x0 ∘ x1) ∘ x2) ∘ …` and stores the result
//! straight into every rank's output with streaming stores.
//!
//! Memory then sees each input read once and each output written once, and nothing else: no
//! reduced block is written and read back, no destination line is read for ownership. The
//! ranks meet twice per call (to learn each other's buffers, and before returning, so nothing
//! touches a buffer its owner got back), never in between. Pieces go to whichever rank asks
//! first, not to fixed blocks: with more ranks than cores (or a core busy with other work) a
//! rank that gets less of a core does less of the work instead of making every rank wait for
//! it. Every element is folded in the same order whichever rank computes it, so every rank
//! holds the same bits, run after run.
//!
//! The ranks check that they all called the same operation (its tag) before any touches
//! another's buffer; a disagreeing rank fails the call on every rank with `HCCL_E_PARA`.

use std::time::Instant;

use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::Result;
use crate::base::stream::{fence, stream_unfenced};
use crate::transport::inproc::{PushBufs, STREAM_OP_MIN};
use crate::transport::tag::Tag;
use crate::transport::{Endpoint, ReduceFn};

/// Name of the path in traces and logs.
pub const ALGO: &str = "direct-push";

/// Smallest AllReduce (bytes per rank) that takes the path: below it the outputs fit in the
/// caches, where streaming stores (which evict them) lose to the schedules.
pub const MIN_BYTES: usize = STREAM_OP_MIN;

/// Most ranks that take the path: with 8 (on the 2-core machine it was measured on) the
/// folded lines streamed to 8 outputs at once measured slower than the schedules.
pub const MAX_RANKS: u32 = 4;

/// Bytes of each input in a piece of work that one rank claims (see
/// [`crate::transport::inproc::PushCall::claim`]): enough that claiming costs nothing beside
/// the folding, small enough that the last pieces even out the ranks' finishing times.
const PIECE_BYTES: usize = 256 * 1024;

/// Bytes folded at a time through the stage: the stage stays in the core's first-level cache
/// while every input is folded into it and it is stored to every output (8-16 KiB measured
/// faster than 64 KiB).
const CHUNK_BYTES: usize = 16 * 1024;

/// Whether an AllReduce of `bytes` per rank runs on this path over `ep`: 2 to [`MAX_RANKS`]
/// ranks, large enough, and every peer a thread of this process.
pub fn applies(ep: &Endpoint, bytes: usize) -> bool {
    (2..=MAX_RANKS).contains(&ep.size()) && bytes >= MIN_BYTES && ep.inproc_fabric().is_some()
}

/// Runs an AllReduce of `count` elements from `send` to `recv` (which may be equal) on every
/// rank of `ep`, tagged `tag`, folding with `red` through `stage` (grown once, kept by the
/// caller between calls); fails at `deadline` if a rank never joins.
///
/// # Safety
/// `send` must be valid for reads and `recv` for writes of `count` elements of `red`'s type,
/// and stay so until the call returns.
#[allow(clippy::too_many_arguments)]
pub unsafe fn allreduce(
    ep: &mut Endpoint,
    send: usize,
    recv: usize,
    count: usize,
    red: &ReduceFn,
    stage: &mut Vec<u8>,
    deadline: Option<Instant>,
    tag: &Tag,
) -> Result<()> {
    let Some(fabric) = ep.inproc_fabric() else {
        return Err(crate::base::error::Error::new(
            crate::base::error::ErrorKind::Internal,
            "the write path runs only between threads of one process",
        ));
    };
    let (me, es) = (ep.rank() as usize, red.elem_size);
    let mine = PushBufs {
        send,
        recv,
        len: count * es,
    };
    let call = match fabric.push_enter(me, tag, mine, deadline) {
        Ok(call) => call,
        Err(e) => {
            ep.abort(&e);
            return Err(e);
        }
    };
    let piece = (PIECE_BYTES / es).max(1);
    if stage.len() < CHUNK_BYTES {
        stage.resize(CHUNK_BYTES, 0);
    }
    let stage = &mut stage[..CHUNK_BYTES / es * es];
    while let Some(k) = call.claim() {
        let Some(first) = k.checked_mul(piece).filter(|&f| f < count) else {
            break;
        };
        // SAFETY: every rank published buffers of `count` elements, valid until each has
        // finished (`finish` below waits for that); the piece is this rank's alone.
        unsafe { fold_piece(&call.bufs, red, first, piece.min(count - first), stage) };
    }
    // The streaming stores reach memory before the peers learn that this rank is done.
    fence();
    let r = call.finish(deadline);
    if let Err(e) = &r {
        ep.abort(e);
    }
    r
}

/// Folds elements `first..first + len` of every input in rank order and stores them into
/// every output: fp32 sums in one pass over whole output lines where they can (the elements
/// before the outputs' first line boundary and after the last through the stage), the rest
/// (and other types) through `stage` (a whole number of elements).
///
/// # Safety
/// Every buffer of `all` must hold `first + len` elements, valid as in [`allreduce`], and no
/// other rank may write those elements of the outputs meanwhile.
unsafe fn fold_piece(all: &[PushBufs], red: &ReduceFn, first: usize, len: usize, stage: &mut [u8]) {
    let es = red.elem_size;
    if red.dtype == DataType::Fp32 && red.op == ReduceOp::Sum {
        // Streaming stores that fill part of a line leave the write-combining buffer to be
        // flushed partly full (each output written at 16 mod 64, as `malloc` returns large
        // blocks, measured half the rate), so the one pass starts at a line boundary.
        let off = first * es;
        let head = ((all[0].recv + off).next_multiple_of(64) - (all[0].recv + off)).min(len * es);
        let lines = (len * es - head) / 64 * 64;
        // SAFETY: forwarded from this function's contract.
        if head.is_multiple_of(es) && unsafe { fold_sum_f32(all, off + head, lines) } {
            let done = (head + lines) / es;
            // SAFETY: as above, for the elements before and after the lines.
            unsafe {
                fold_staged(all, red, first, head / es, stage);
                fold_staged(all, red, first + done, len - done, stage);
            }
            return;
        }
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { fold_staged(all, red, first, len, stage) };
}

/// [`fold_piece`] through `stage`: a stage-full of elements at a time is folded in the stage
/// (which stays in the first-level cache) and then streamed into every output.
///
/// # Safety
/// As for [`fold_piece`].
unsafe fn fold_staged(
    all: &[PushBufs],
    red: &ReduceFn,
    first: usize,
    len: usize,
    stage: &mut [u8],
) {
    let es = red.elem_size;
    let fold = ReduceFn { left: 0, ..*red };
    let chunk = stage.len() / es;
    let mut k = 0;
    while k < len {
        let c = chunk.min(len - k);
        let (off, bytes) = ((first + k) * es, c * es);
        let at = stage.as_mut_ptr();
        // SAFETY: the buffers per this function's contract; the stage holds `chunk` elements.
        unsafe {
            // The first fold takes rank 0's input as its left operand, so it is not copied.
            let first = ReduceFn {
                left: (all[0].send + off).wrapping_sub(at as usize) as isize,
                ..fold
            };
            first.apply(at, (all[1].send + off) as *const u8, bytes);
            for b in &all[2..] {
                fold.apply(at, (b.send + off) as *const u8, bytes);
            }
            for b in all {
                stream_unfenced(at, (b.recv + off) as *mut u8, bytes);
            }
        }
        k += c;
    }
}

/// Folds the fp32 sums of `bytes` at `off` of every input in rank order and stores them into
/// every output with streaming stores, in one pass without a stage; false (nothing done) when
/// it cannot: not x86-64, `bytes` not whole lines or an output not line-aligned at `off`.
/// The same additions in the same order as the staged path, so the same bits.
///
/// # Safety
/// Every buffer of `all` must hold `off + bytes` bytes, valid as in [`allreduce`].
unsafe fn fold_sum_f32(all: &[PushBufs], off: usize, bytes: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128, _mm_add_ps, _mm_loadu_ps, _mm_stream_ps};
        if !bytes.is_multiple_of(64) || all.iter().any(|b| !(b.recv + off).is_multiple_of(64)) {
            return false;
        }
        let mut i = off;
        while i < off + bytes {
            let load = |p: usize| -> [__m128; 4] {
                let f = p as *const f32;
                // SAFETY: 64 bytes at `p` lie inside an input (the contract); SSE is part of
                // x86-64 and the loads may be unaligned.
                unsafe { [0, 4, 8, 12].map(|k| _mm_loadu_ps(f.add(k))) }
            };
            let mut acc = load(all[0].send + i);
            for b in &all[1..] {
                let x = load(b.send + i);
                for (a, x) in acc.iter_mut().zip(x) {
                    // SAFETY: SSE is part of x86-64.
                    *a = unsafe { _mm_add_ps(*a, x) };
                }
            }
            for b in all {
                let f = (b.recv + i) as *mut f32;
                for (k, a) in acc.iter().enumerate() {
                    // SAFETY: 64 bytes at `f` lie inside an output, line-aligned (checked).
                    unsafe { _mm_stream_ps(f.add(4 * k), *a) };
                }
            }
            i += 64;
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (all, off, bytes);
        false
    }
}
