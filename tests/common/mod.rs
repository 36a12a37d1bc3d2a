//! Shared helpers of the integration tests: rank threads over a root info, child processes,
//! an independent reference implementation of every reduction, and deterministic inputs.
//!
//! Nothing here uses the library's own kernels or conversions: the reference is written from
//! the definitions (two's-complement wrapping integers, IEEE round-to-nearest-even halves).

#![allow(dead_code)]

pub mod cases;
pub mod compress_checks;
pub mod mismatch_driver;
pub mod native;
pub mod netns_bed;
pub mod ompi_tmp;
pub mod rounding;
pub mod skip;

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::ptr::null_mut;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hccl::ffi::comm_api::*;
use hccl::ffi::types::*;

pub const OK: HcclResult = HcclResult::HCCL_SUCCESS;

/// Reducible data types (raw ABI values).
pub const REDUCIBLE: [u32; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
/// Data-movement-only data types.
pub const MOVE_ONLY: [u32; 5] = [12, 14, 15, 16, 17];
/// Every valid data type.
pub const ALL_DTYPES: [u32; 17] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16, 17];
/// Reduce operators.
pub const OPS: [u32; 4] = [0, 1, 2, 3];

pub const INT8: u32 = 0;
pub const INT16: u32 = 1;
pub const INT32: u32 = 2;
pub const FP16: u32 = 3;
pub const FP32: u32 = 4;
pub const INT64: u32 = 5;
pub const UINT64: u32 = 6;
pub const UINT8: u32 = 7;
pub const UINT16: u32 = 8;
pub const UINT32: u32 = 9;
pub const FP64: u32 = 10;
pub const BF16: u32 = 11;
pub const INT128: u32 = 12;
pub const HIF8: u32 = 14;
pub const FP8E4M3: u32 = 15;
pub const FP8E5M2: u32 = 16;
pub const FP8E8M0: u32 = 17;

pub const SUM: u32 = 0;
pub const PROD: u32 = 1;
pub const MAX: u32 = 2;
pub const MIN: u32 = 3;

/// Element size in bytes (per the ABI table, written independently of the library).
pub fn esize(dt: u32) -> usize {
    match dt {
        0 | 7 | 14 | 15 | 16 | 17 => 1,
        1 | 3 | 8 | 11 => 2,
        2 | 4 | 9 => 4,
        5 | 6 | 10 => 8,
        12 => 16,
        _ => panic!("no size for dtype {dt}"),
    }
}

pub fn dt_name(dt: u32) -> &'static str {
    match dt {
        0 => "int8",
        1 => "int16",
        2 => "int32",
        3 => "fp16",
        4 => "fp32",
        5 => "int64",
        6 => "uint64",
        7 => "uint8",
        8 => "uint16",
        9 => "uint32",
        10 => "fp64",
        11 => "bf16",
        12 => "int128",
        14 => "hif8",
        15 => "fp8e4m3",
        16 => "fp8e5m2",
        17 => "fp8e8m0",
        _ => "?",
    }
}

pub fn op_name(op: u32) -> &'static str {
    match op {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        _ => "?",
    }
}

pub fn is_float(dt: u32) -> bool {
    matches!(dt, 3 | 4 | 10 | 11)
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversions (independent implementation, round to nearest, ties to even).

/// f32 → IEEE binary16, round to nearest even; NaN stays NaN (quiet), overflow → ±inf.
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign
            | 0x7c00
            | if man != 0 {
                0x200 | (man >> 13) as u16
            } else {
                0
            };
    }
    // Unbiased exponent.
    let e = exp - 127;
    if e > 15 {
        return sign | 0x7c00;
    }
    if e >= -14 {
        // Normal half: 10 mantissa bits, drop 13.
        let mut h = (((e + 15) as u32) << 10) | (man >> 13);
        let rest = man & 0x1fff;
        if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
            h += 1; // may carry into the exponent, up to inf: correct
        }
        return sign | h as u16;
    }
    // Subnormal half (or zero): value = m * 2^-24 with the full 24-bit significand.
    if exp == 0 {
        return sign; // f32 subnormals are far below half's smallest subnormal
    }
    let full = man | 0x80_0000; // value = full * 2^(e-23)
    let shift = (-24 - (e - 23)) as u32; // bits to drop so the unit becomes 2^-24
    if shift > 24 {
        return sign;
    }
    let h = full >> shift;
    let rest = full & ((1u32 << shift) - 1);
    let half = 1u32 << (shift - 1);
    let h = if rest > half || (rest == half && (h & 1) == 1) {
        h + 1
    } else {
        h
    };
    sign | h as u16
}

/// IEEE binary16 → f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Subnormal: man * 2^-24, exactly representable as a normal f32.
            let v = man as f32 * (1.0f32 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
    } else {
        sign | ((exp + 127 - 15) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// f32 → bfloat16, round to nearest even; NaN stays NaN.
pub fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return ((x >> 16) as u16) | 0x40;
    }
    let upper = x >> 16;
    let rest = x & 0xffff;
    let r = if rest > 0x8000 || (rest == 0x8000 && (upper & 1) == 1) {
        upper + 1
    } else {
        upper
    };
    r as u16
}

/// bfloat16 → f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

// ---------------------------------------------------------------------------------------------
// Deterministic inputs.

/// splitmix64 finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A per-case seed from the case's parameters.
pub fn seed(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5eed_u64, |acc, &p| mix(acc ^ p))
}

fn rnd(seed: u64, rank: u32, idx: usize) -> u64 {
    mix(seed ^ ((rank as u64) << 40) ^ mix(idx as u64))
}

fn float_encode(dt: u32, v: f64) -> u128 {
    match dt {
        FP16 => f32_to_f16(v as f32) as u128,
        BF16 => f32_to_bf16(v as f32) as u128,
        FP32 => (v as f32).to_bits() as u128,
        FP64 => v.to_bits() as u128,
        _ => unreachable!(),
    }
}

fn float_decode(dt: u32, b: u128) -> f64 {
    match dt {
        FP16 => f16_to_f32(b as u16) as f64,
        BF16 => bf16_to_f32(b as u16) as f64,
        FP32 => f32::from_bits(b as u32) as f64,
        FP64 => f64::from_bits(b as u64),
        _ => unreachable!(),
    }
}

/// Random bits of a float type, made non-NaN and never -0 (so max/min are order-free).
fn sane_float_bits(dt: u32, h: u64) -> u128 {
    let (bits, width) = match dt {
        FP16 | BF16 => (h & 0xffff, 16),
        FP32 => (h & 0xffff_ffff, 32),
        FP64 => (h, 64),
        _ => unreachable!(),
    };
    let mut b = bits as u128;
    let v = float_decode(dt, b);
    if v.is_nan() {
        // Keep sign and exponent (all ones): infinity.
        let man_bits = match dt {
            FP16 => 10,
            BF16 => 7,
            FP32 => 23,
            _ => 52,
        };
        b &= !((1u128 << man_bits) - 1);
    }
    if b == 1u128 << (width - 1) {
        b = 0; // -0 → +0
    }
    b
}

/// Element `idx` of `rank`'s input for a case. `op` = None: data movement (any bit pattern).
/// Floats under reduction take values whose reductions are exact in any order:
/// sum: halves in [-8, 8]; prod: {±1, ±2, ±0.5}; max/min: any non-NaN value except -0.
pub fn gen_elem(dt: u32, op: Option<u32>, seed: u64, rank: u32, idx: usize) -> u128 {
    let h = rnd(seed, rank, idx);
    if is_float(dt) {
        match op {
            Some(SUM) => float_encode(dt, ((h % 33) as i64 - 16) as f64 / 2.0),
            Some(PROD) => float_encode(dt, [1.0, 2.0, 0.5, -1.0, -2.0, -0.5][(h % 6) as usize]),
            Some(_) => sane_float_bits(dt, h),
            None => h as u128 & mask(dt),
        }
    } else if dt == INT128 {
        ((h as u128) << 64) | rnd(seed ^ 0xabc, rank, idx) as u128
    } else {
        h as u128 & mask(dt)
    }
}

fn mask(dt: u32) -> u128 {
    let bits = esize(dt) * 8;
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// `count` elements starting at index `start` of `rank`'s input, as bytes.
pub fn gen_range(
    dt: u32,
    op: Option<u32>,
    seed: u64,
    rank: u32,
    start: usize,
    count: usize,
) -> Vec<u8> {
    let es = esize(dt);
    let mut v = Vec::with_capacity(count * es);
    for i in start..start + count {
        let e = gen_elem(dt, op, seed, rank, i);
        v.extend_from_slice(&e.to_le_bytes()[..es]);
    }
    v
}

pub fn gen(dt: u32, op: Option<u32>, seed: u64, rank: u32, count: usize) -> Vec<u8> {
    gen_range(dt, op, seed, rank, 0, count)
}

/// A filler byte pattern that no correct output would plausibly equal everywhere.
pub fn poison(nbytes: usize, salt: u64) -> Vec<u8> {
    (0..nbytes)
        .map(|i| (mix(salt ^ i as u64) as u8) | 1)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Reference reductions.

macro_rules! int_combine {
    ($t:ty, $acc:expr, $src:expr, $op:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(N).zip($src.chunks_exact(N)) {
            let x = <$t>::from_le_bytes(a[..].try_into().unwrap());
            let y = <$t>::from_le_bytes(b[..].try_into().unwrap());
            let r = match $op {
                SUM => x.wrapping_add(y),
                PROD => x.wrapping_mul(y),
                MAX => {
                    if y > x {
                        y
                    } else {
                        x
                    }
                }
                MIN => {
                    if y < x {
                        y
                    } else {
                        x
                    }
                }
                _ => unreachable!(),
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

/// `acc = acc op src`, element-wise.
pub fn combine_into(dt: u32, op: u32, acc: &mut [u8], src: &[u8]) {
    assert_eq!(acc.len(), src.len());
    match dt {
        INT8 => int_combine!(i8, acc, src, op),
        INT16 => int_combine!(i16, acc, src, op),
        INT32 => int_combine!(i32, acc, src, op),
        INT64 => int_combine!(i64, acc, src, op),
        UINT8 => int_combine!(u8, acc, src, op),
        UINT16 => int_combine!(u16, acc, src, op),
        UINT32 => int_combine!(u32, acc, src, op),
        UINT64 => int_combine!(u64, acc, src, op),
        FP16 | BF16 | FP32 | FP64 => {
            let es = esize(dt);
            for (a, b) in acc.chunks_exact_mut(es).zip(src.chunks_exact(es)) {
                let mut ab = [0u8; 16];
                ab[..es].copy_from_slice(a);
                let mut bb = [0u8; 16];
                bb[..es].copy_from_slice(b);
                let (ra, rb) = (u128::from_le_bytes(ab), u128::from_le_bytes(bb));
                let (x, y) = (float_decode(dt, ra), float_decode(dt, rb));
                let r = match op {
                    SUM => float_encode(dt, x + y),
                    PROD => float_encode(dt, x * y),
                    MAX => {
                        if y > x {
                            rb
                        } else {
                            ra
                        }
                    }
                    MIN => {
                        if y < x {
                            rb
                        } else {
                            ra
                        }
                    }
                    _ => unreachable!(),
                };
                a.copy_from_slice(&r.to_le_bytes()[..es]);
            }
        }
        _ => panic!("dtype {dt} is not reducible"),
    }
}

/// The reduction over ranks `0..n` of elements `start..start+count` of the generated inputs.
pub fn ref_reduce_range(
    dt: u32,
    op: u32,
    seed: u64,
    n: u32,
    start: usize,
    count: usize,
) -> Vec<u8> {
    let mut acc = gen_range(dt, Some(op), seed, 0, start, count);
    for r in 1..n {
        let s = gen_range(dt, Some(op), seed, r, start, count);
        combine_into(dt, op, &mut acc, &s);
    }
    acc
}

/// Describes element `i` of a buffer for failure messages.
pub fn show_elem(dt: u32, b: &[u8], i: usize) -> String {
    let es = esize(dt);
    let e = &b[i * es..(i + 1) * es];
    let mut w = [0u8; 16];
    w[..es].copy_from_slice(e);
    let raw = u128::from_le_bytes(w);
    if is_float(dt) {
        format!("{:#x} ({})", raw, float_decode(dt, raw))
    } else {
        format!("{raw:#x}")
    }
}

/// First mismatch between two byte buffers, described in elements of `dt`.
pub fn diff(dt: u32, got: &[u8], exp: &[u8]) -> Option<String> {
    if got.len() != exp.len() {
        return Some(format!("length {} != expected {}", got.len(), exp.len()));
    }
    if got == exp {
        return None;
    }
    let es = esize(dt);
    let i = got
        .chunks_exact(es)
        .zip(exp.chunks_exact(es))
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    let bad = got
        .chunks_exact(es)
        .zip(exp.chunks_exact(es))
        .filter(|(a, b)| a != b)
        .count();
    Some(format!(
        "{bad} of {} elements differ; first at {i}: got {} expected {}",
        got.len() / es,
        show_elem(dt, got, i),
        show_elem(dt, exp, i)
    ))
}

// ---------------------------------------------------------------------------------------------
// Ranks as threads.

pub fn root_info() -> HcclRootInfo {
    let mut ri = HcclRootInfo {
        internal: [0; 4108],
    };
    let r = unsafe { HcclGetRootInfo(&mut ri) };
    assert_eq!(r, OK, "HcclGetRootInfo");
    ri
}

pub fn init_rank(n: u32, ri: &HcclRootInfo, rank: u32) -> HcclComm {
    let mut comm: HcclComm = null_mut();
    let r = unsafe { HcclCommInitRootInfo(n, ri, rank, &mut comm) };
    assert_eq!(r, OK, "HcclCommInitRootInfo rank {rank} of {n}");
    assert!(!comm.is_null());
    comm
}

/// A lazily created shared value and how many ranks still hold it.
type CacheSlot = (Arc<OnceLock<Arc<dyn Any + Send + Sync>>>, u32);

#[derive(Default)]
struct Cache {
    map: Mutex<HashMap<String, CacheSlot>>,
}

/// One rank thread's view: its communicator(s) and a failure log.
pub struct Rank {
    pub rank: u32,
    pub n: u32,
    /// The first communicator.
    pub comm: HcclComm,
    /// All communicators of this rank (when the harness created several).
    pub comms: Vec<HcclComm>,
    fails: RefCell<Vec<String>>,
    cache: Arc<Cache>,
}

impl Rank {
    /// Records a failure (the run continues so that peers are not left hanging).
    pub fn fail(&self, msg: String) {
        let mut f = self.fails.borrow_mut();
        if f.len() < 30 {
            f.push(format!("rank {}/{}: {msg}", self.rank, self.n));
        }
    }

    pub fn failed(&self) -> bool {
        !self.fails.borrow().is_empty()
    }

    /// Checks a return code; false (and a recorded failure) if it is not success.
    pub fn ok(&self, r: HcclResult, what: &str) -> bool {
        if r != OK {
            self.fail(format!("{what}: returned {r:?}"));
            false
        } else {
            true
        }
    }

    pub fn expect_code(&self, r: HcclResult, want: HcclResult, what: &str) {
        if r != want {
            self.fail(format!("{what}: returned {r:?}, expected {want:?}"));
        }
    }

    pub fn check(&self, cond: bool, what: impl FnOnce() -> String) {
        if !cond {
            self.fail(what());
        }
    }

    /// Bit-exact comparison.
    pub fn check_bytes(&self, what: &str, dt: u32, got: &[u8], exp: &[u8]) -> bool {
        match diff(dt, got, exp) {
            None => true,
            Some(d) => {
                self.fail(format!("{what}: {d}"));
                false
            }
        }
    }

    /// A value computed once for `users` callers (ranks) sharing `key`.
    pub fn shared<T: Send + Sync + 'static>(
        &self,
        key: &str,
        users: u32,
        f: impl FnOnce() -> T,
    ) -> Arc<T> {
        let cell = {
            let mut m = self.cache.map.lock().unwrap();
            let e = m
                .entry(key.to_string())
                .or_insert_with(|| (Arc::new(OnceLock::new()), 0));
            e.1 += 1;
            let cell = e.0.clone();
            if e.1 >= users {
                m.remove(key);
            }
            cell
        };
        let any = cell
            .get_or_init(|| Arc::new(f()) as Arc<dyn Any + Send + Sync>)
            .clone();
        any.downcast::<T>().expect("shared value type")
    }
}

/// Runs `f` as rank `rank` of `n` on an existing communicator in the calling thread (one rank
/// per process); returns the failures.
pub fn run_single_rank(rank: u32, n: u32, comm: HcclComm, f: fn(&Rank)) -> Vec<String> {
    let r = Rank {
        rank,
        n,
        comm,
        comms: vec![comm],
        fails: RefCell::new(Vec::new()),
        cache: Arc::new(Cache::default()),
    };
    f(&r);
    r.fails.into_inner()
}

/// Runs `f` on `n` rank threads, each with one communicator from a shared root info.
pub fn run_ranks<F>(n: u32, timeout: Duration, f: F)
where
    F: Fn(&Rank) + Send + Sync + 'static,
{
    run_ranks_multi(n, 1, timeout, f)
}

/// Runs `f` on `n` rank threads, each with `ncomms` communicators (from `ncomms` root infos,
/// all alive at once). Fails on any recorded failure, panic, or when the ranks do not finish
/// within `timeout`. Every communicator is destroyed at the end (and that must succeed).
pub fn run_ranks_multi<F>(n: u32, ncomms: usize, timeout: Duration, f: F)
where
    F: Fn(&Rank) + Send + Sync + 'static,
{
    let timeout = scaled(timeout);
    let infos: Vec<HcclRootInfo> = (0..ncomms).map(|_| root_info()).collect();
    let f = Arc::new(f);
    let cache = Arc::new(Cache::default());
    let (tx, rx) = mpsc::channel::<(u32, Vec<String>)>();
    for r in 0..n {
        let infos = infos.clone();
        let f = f.clone();
        let cache = cache.clone();
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("rank{r}of{n}"))
            .spawn(move || {
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let comms: Vec<HcclComm> = infos.iter().map(|ri| init_rank(n, ri, r)).collect();
                    let rank = Rank {
                        rank: r,
                        n,
                        comm: comms[0],
                        comms: comms.clone(),
                        fails: RefCell::new(Vec::new()),
                        cache,
                    };
                    f(&rank);
                    for c in &comms {
                        let d = unsafe { HcclCommDestroy(*c) };
                        if d != OK {
                            rank.fail(format!("HcclCommDestroy returned {d:?}"));
                        }
                    }
                    rank.fails.into_inner()
                }));
                let fails = match res {
                    Ok(f) => f,
                    Err(p) => {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        vec![format!("rank {r}/{n} panicked: {msg}")]
                    }
                };
                let _ = tx.send((r, fails));
            })
            .expect("spawn rank thread");
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let mut done = vec![false; n as usize];
    let mut all_fails = Vec::new();
    for _ in 0..n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((r, fails)) => {
                done[r as usize] = true;
                all_fails.extend(fails);
            }
            Err(_) => {
                let missing: Vec<usize> = (0..n as usize).filter(|&i| !done[i]).collect();
                panic!(
                    "{n} ranks: ranks {missing:?} did not finish within {timeout:?}; failures so far: {all_fails:#?}"
                );
            }
        }
    }
    assert!(
        all_fails.is_empty(),
        "{n} ranks: {} failure(s):\n{}",
        all_fails.len(),
        all_fails.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Child processes.

/// Output of a finished child.
pub struct ChildOutput {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A child process whose stdout arrives line by line on a channel; stderr is collected.
pub struct Spawned {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

/// Factor on the tests' time budgets and on the peer timeouts they give child ranks:
/// `HCCL_TEST_TIME_SCALE` (default 1). `scripts/sanitize.sh` sets it, as instrumented ranks run
/// many times slower, and more so on a loaded machine.
pub fn time_scale() -> u32 {
    static SCALE: OnceLock<u32> = OnceLock::new();
    *SCALE.get_or_init(|| {
        std::env::var("HCCL_TEST_TIME_SCALE")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&k| k >= 1)
            .unwrap_or(1)
    })
}

/// `d` stretched by [`time_scale`].
pub fn scaled(d: Duration) -> Duration {
    d * time_scale()
}

/// Spawns `cmd` with piped output. The peer and connect timeouts it sets for the child are
/// stretched by [`time_scale`]; a test that checks when a rank fails at such a timeout
/// stretches its upper bound with [`scaled`] (the child inherits the factor).
pub fn spawn_piped(mut cmd: Command) -> Spawned {
    if time_scale() > 1 {
        let stretched: Vec<(String, String)> = cmd
            .get_envs()
            .filter_map(|(k, v)| {
                let k = k.to_str()?;
                let secs: u64 = v?.to_str()?.parse().ok()?;
                (k == "HCCL_EXEC_TIMEOUT" || k == "HCCL_CONNECT_TIMEOUT")
                    .then(|| (k.to_string(), (secs * time_scale() as u64).to_string()))
            })
            .collect();
        cmd.envs(stretched);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = cmd.spawn().expect("spawn child");
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let (ltx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            match l {
                Ok(l) => {
                    if ltx.send(l).is_err() {
                        // Receiver gone: keep draining so the child never blocks on a full pipe.
                    }
                }
                Err(_) => break,
            }
        }
        // Dropping ltx signals EOF.
    });
    let (etx, stderr) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        let _ = etx.send(s);
    });
    Spawned {
        child,
        lines,
        stderr,
    }
}

impl Spawned {
    /// Waits for the child to close its stdout (i.e. exit) within `timeout`, collecting the
    /// remaining lines; kills it on timeout. Returns the output.
    pub fn finish(mut self, timeout: Duration, mut seen: Vec<String>) -> ChildOutput {
        let timeout = scaled(timeout);
        let deadline = Instant::now() + timeout;
        let mut timed_out = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => seen.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    let _ = self.child.kill();
                    break;
                }
            }
        }
        let status = self.child.wait().expect("wait child");
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        let mut stdout = seen.join("\n");
        if timed_out {
            stdout.push_str(&format!("\n[killed after {timeout:?} timeout]"));
        }
        ChildOutput {
            success: status.success() && !timed_out,
            code: status.code(),
            stdout,
            stderr,
        }
    }
}

/// Waits for every child by one shared deadline `budget` and asserts each exited successfully
/// having run its one test; `what` names the run in the failure message. Returns the outputs
/// in spawn order.
pub fn finish_passed(kids: Vec<Spawned>, budget: Duration, what: &str) -> Vec<ChildOutput> {
    let deadline = Instant::now() + budget;
    kids.into_iter()
        .enumerate()
        .map(|(rank, k)| {
            let o = k.finish(
                deadline.saturating_duration_since(Instant::now()),
                Vec::new(),
            );
            assert!(
                o.success && o.stdout.contains("1 passed"),
                "{what}: rank {rank} process failed (code {:?}):\n--- stdout\n{}\n--- stderr\n{}",
                o.code,
                o.stdout,
                tail(&o.stderr, 5000)
            );
            o
        })
        .collect()
}

/// The environment variable that marks a re-executed test binary.
pub const CHILD_VAR: &str = "HCCL_TEST_CHILD";

/// Whether this process is a child started by `run_self`.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_VAR).is_some()
}

/// The full name of `test`, a test in the module of the test running on this thread, as
/// `--exact` wants it in a re-executed child: the suite binary names tests `module::test`.
/// Panics when called off a test's own thread (libtest names that thread after the test).
pub fn test_path(test: &str) -> String {
    let me = std::thread::current();
    let running = me
        .name()
        .filter(|n| *n != "main")
        .expect("test_path runs on the thread of the test that calls it");
    match running.rsplit_once("::") {
        Some((module, _)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// Re-executes this test binary running only `test` (a test of the calling test's module) with
/// `env` added, and waits (with a
/// timeout) for it; panics with its output unless it succeeded and actually ran the test.
pub fn run_self(test: &str, env: &[(&str, &str)], timeout: Duration) -> ChildOutput {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        &test_path(test),
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd.env(CHILD_VAR, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = spawn_piped(cmd).finish(timeout, Vec::new());
    assert!(
        out.success,
        "child running {test} failed (code {:?}):\n--- stdout\n{}\n--- stderr\n{}",
        out.code,
        out.stdout,
        tail(&out.stderr, 6000)
    );
    assert!(
        out.stdout.contains("1 passed"),
        "child did not run {test}:\n{}",
        out.stdout
    );
    out
}

pub fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        s
    } else {
        let mut i = s.len() - n;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        &s[i..]
    }
}

pub fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

pub fn root_info_bytes(ri: &HcclRootInfo) -> Vec<u8> {
    ri.internal.iter().map(|&c| c as u8).collect()
}

pub fn root_info_from_bytes(b: &[u8]) -> HcclRootInfo {
    assert_eq!(b.len(), 4108);
    let mut ri = HcclRootInfo {
        internal: [0; 4108],
    };
    for (d, s) in ri.internal.iter_mut().zip(b) {
        *d = *s as _;
    }
    ri
}

/// Sanity checks of the reference conversions against known values (run by each test file
/// that wants them).
pub fn check_reference_conversions() {
    assert_eq!(f32_to_f16(1.0), 0x3c00);
    assert_eq!(f32_to_f16(-2.0), 0xc000);
    assert_eq!(f32_to_f16(65504.0), 0x7bff);
    assert_eq!(f32_to_f16(65520.0), 0x7c00); // ties to even → inf
    assert_eq!(f32_to_f16(5.960_464_5e-8), 0x0001); // smallest subnormal
    assert_eq!(f32_to_f16(2.980_232_2e-8), 0x0000); // half of it: tie → even (0)
    assert_eq!(f32_to_f16(1.0 + 1.0 / 2048.0), 0x3c00); // tie → even
    assert_eq!(f32_to_f16(1.0 + 3.0 / 2048.0), 0x3c02); // tie → even (up)
    assert!(f16_to_f32(0x7e00).is_nan());
    assert_eq!(f32_to_bf16(1.0), 0x3f80);
    assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie → even
    assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    for h in 0..=u16::MAX {
        let f = f16_to_f32(h);
        if !f.is_nan() {
            assert_eq!(f32_to_f16(f), h, "f16 roundtrip {h:#x}");
        }
        let b = bf16_to_f32(h);
        if !b.is_nan() {
            assert_eq!(f32_to_bf16(b), h, "bf16 roundtrip {h:#x}");
        }
    }
}
