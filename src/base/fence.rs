//! Asymmetric fences between the threads of this process: a [`light`] fence on a hot path that
//! costs nothing at run time, paired with a [`heavy`] one on a rare path that pays for both.
//!
//! The pattern they serve is a store then a load on each side, where at least one side must see
//! the other's store: the hot side stores, runs [`light`], loads; the rare side stores, runs
//! [`heavy`], loads. Where the kernel offers `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//! [`light`] is a compiler fence and [`heavy`] that system call, which makes every running
//! thread of the process pass a full barrier; elsewhere both are full fences. Either way, of the
//! two loads at least one sees the other side's store.
//!
//! [`light_shared`] and [`heavy_shared`] pair the same way across processes that share memory,
//! through `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, for processes that registered for it
//! ([`shared_expedited`]).

use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::sync::OnceLock;

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    }
}

/// Whether the expedited private barrier is available (registered on first use): decided once
/// per process, so that every [`light`] and [`heavy`] pair agrees. Where it is not, [`light`]
/// costs as much as a full fence.
pub fn expedited() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        register(
            MEMBARRIER_CMD_PRIVATE_EXPEDITED,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
        )
    })
}

/// Whether the kernel offers the barrier `cmd` and this process registered for it with
/// `register_cmd`.
fn register(cmd: libc::c_int, register_cmd: libc::c_int) -> bool {
    let cmds = membarrier(MEMBARRIER_CMD_QUERY);
    cmds >= 0 && cmds & libc::c_long::from(cmd) != 0 && membarrier(register_cmd) == 0
}

/// Whether this process is registered for the expedited barrier across processes
/// ([`heavy_shared`]): decided once per process. Pairing across processes is the caller's to
/// arrange: a process may run [`light_shared`] towards another only when both are registered,
/// since only then does the other's [`heavy_shared`] reach it.
pub fn shared_expedited() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        register(
            MEMBARRIER_CMD_GLOBAL_EXPEDITED,
            MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
        )
    })
}

/// The hot side's fence towards registered processes (see [`shared_expedited`]): a compiler
/// fence, paired with [`heavy_shared`] in the other process.
#[inline(always)]
pub fn light_shared() {
    compiler_fence(Ordering::SeqCst);
}

/// The rare side's fence across processes: every running thread of every registered process
/// passes a full barrier. False when it is not available or the call failed; the caller must
/// then not count on any [`light_shared`] pairing.
pub fn heavy_shared() -> bool {
    fence(Ordering::SeqCst);
    shared_expedited() && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0
}

/// The hot side's fence: orders its earlier stores before its later loads with respect to a
/// [`heavy`] fence on another thread of this process.
#[inline(always)]
pub fn light() {
    if expedited() {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The rare side's fence, pairing with [`light`]; a system call where the kernel offers the
/// expedited barrier. False when that call failed, and the pairing then cannot be vouched for.
pub fn heavy() -> bool {
    if expedited() {
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0
    } else {
        fence(Ordering::SeqCst);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32};
    use std::sync::Arc;

    /// Dekker's pattern: two threads each raise a flag, fence, and read the other's; in every
    /// round at least one must see the other's flag. The hot thread runs `light`, the rare one
    /// `heavy`.
    fn dekker(light: fn(), heavy: fn() -> bool) {
        const ROUNDS: u32 = 20_000;
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let round = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicU32::new(0));
        let saw = Arc::new(AtomicBool::new(false));
        let rare = {
            let (flags, round, done, saw) =
                (flags.clone(), round.clone(), done.clone(), saw.clone());
            std::thread::spawn(move || {
                for r in 1..=ROUNDS {
                    while round.load(Ordering::Acquire) != r {
                        std::hint::spin_loop();
                    }
                    flags[1].store(true, Ordering::Relaxed);
                    assert!(heavy());
                    saw.store(flags[0].load(Ordering::Relaxed), Ordering::Relaxed);
                    done.fetch_add(1, Ordering::AcqRel);
                }
            })
        };
        for r in 1..=ROUNDS {
            flags[0].store(false, Ordering::Relaxed);
            flags[1].store(false, Ordering::Relaxed);
            round.store(r, Ordering::Release);
            flags[0].store(true, Ordering::Relaxed);
            light();
            let mine = flags[1].load(Ordering::Relaxed);
            while done.load(Ordering::Acquire) != r {
                std::hint::spin_loop();
            }
            let theirs = saw.load(Ordering::Relaxed);
            assert!(mine || theirs, "round {r}: neither side saw the other");
        }
        rare.join().unwrap();
    }

    #[test]
    fn one_side_always_sees_the_other() {
        dekker(light, heavy);
    }

    /// The pairing across processes holds between threads of one registered process too.
    #[test]
    fn one_side_always_sees_the_other_across_processes() {
        if shared_expedited() {
            dekker(light_shared, heavy_shared);
        } else {
            dekker(
                || fence(Ordering::SeqCst),
                || {
                    fence(Ordering::SeqCst);
                    true
                },
            );
        }
    }
}
