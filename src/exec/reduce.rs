//! Host reduction kernels: `dst[i] = a[i] op b[i]` for every reducible HCCL data type.
//!
//! This is the inner loop of AllReduce / ReduceScatter / Reduce on the CPU, so it is written for
//! the auto-vectoriser:
//!
//! * dispatch on `(dtype, op)` happens once per call through a table of function pointers; each
//!   entry is a kernel monomorphised for one element type and one operator, so the loop body has
//!   no branches on either;
//! * the loop works on fixed-size blocks (64 bytes of integers / floats, 32 half-precision lanes)
//!   copied into local arrays with unaligned reads, which removes bounds checks and any aliasing
//!   question (`dst` may equal `a` or `b`: each block is fully read before it is written);
//! * the tail is handled by the same block code on a zero-padded local copy, so there is only
//!   one arithmetic path per kernel and the tail cannot disagree with the body;
//! * on x86_64 the same generic bodies are also compiled with `avx2` (and `avx2,f16c` for fp16,
//!   where the conversions use the F16C instructions), selected at run time once per process.
//!
//! fp16 / bf16 are computed in f32 and rounded back to nearest-even. All paths give bit-identical
//! results, except for the payload of a NaN produced by `sum`/`prod` (IEEE leaves the choice of
//! which input NaN propagates open, and LLVM may commute the operands); it is a NaN either way.

use crate::base::dtype::{DataType, ReduceOp};
use crate::base::error::Result;
use std::mem::size_of;
use std::ptr;
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------------
// Half-precision lane conversions of the soft kernels: branch-free, so that the kernels' fixed
// blocks of them vectorise (the `half` crate's scalar conversions branch, and with `std` detect
// the CPU on every call). Conversions outside the kernels (the ACL runtime, the tools, the
// Python package) use `half`; the tests below check these against an independent reference
// and against `half`, bit for bit.
// ---------------------------------------------------------------------------------------------

/// Converts IEEE binary16 bits to `f32`.
///
/// Exact for every finite value (subnormals included) and infinities; a NaN stays a NaN with its
/// payload kept and the quiet bit set (the same result as the x86 `vcvtph2ps` instruction).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    // Exponent and mantissa moved to their f32 positions; the exponent is still biased by 15.
    let em = (h & 0x7fff) << 13;
    let exp = em & 0x0f80_0000;
    // Normal numbers: only the exponent bias changes (15 -> 127).
    let normal = em + ((127 - 15) << 23);
    // Inf/NaN: exponent all ones in f32 too; NaNs get the quiet bit.
    let is_nan = u32::from(em & 0x007f_e000 != 0);
    let infnan = (normal + ((128 - 16) << 23)) | (is_nan << 22);
    // Subnormals (and zero): build 2^-14 * (1 + m/1024) and subtract 2^-14, leaving exactly
    // m * 2^-24. Both operands are normal f32, so this is exact and immune to FTZ/DAZ.
    let sub = (f32::from_bits(em + (113 << 23)) - f32::from_bits(113 << 23)).to_bits();
    let bits = if exp == 0x0f80_0000 {
        infnan
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// Converts an `f32` to IEEE binary16 bits, rounding to nearest, ties to even.
///
/// Values that round beyond the largest finite half (65504) become infinity; results below the
/// normal range become subnormals or signed zero. A NaN stays a NaN: quiet bit set, the top 9
/// payload bits kept (the same result as the x86 `vcvtps2ph` instruction).
#[inline(always)]
pub(crate) fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = (x >> 16) & 0x8000;
    let a = x & 0x7fff_ffff;
    let nan = 0x7e00 | ((a >> 13) & 0x03ff);
    // Normal range: rebias the exponent, then round the 13 dropped bits to nearest-even by adding
    // 0xfff plus the lowest kept bit; a carry out of the mantissa bumps the exponent, which is
    // also what turns [65520, 65536) into infinity.
    let lsb = (a >> 13) & 1;
    let normal = a.wrapping_sub((127 - 15) << 23).wrapping_add(0x0fff + lsb) >> 13;
    // Below 2^-14: adding 0.5 (whose ulp is 2^-24, the half subnormal step) makes the FPU do the
    // RNE rounding; the low mantissa bits are then the subnormal half's bits (0x400 when it
    // rounds up to the smallest normal, which is also correct).
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3f00_0000);
    let bits = if a > 0x7f80_0000 {
        nan
    } else if a >= 0x4780_0000 {
        // >= 2^16 (or infinite): always infinity.
        0x7c00
    } else if a < 0x3880_0000 {
        sub
    } else {
        normal
    };
    (bits | sign) as u16
}

/// Converts bfloat16 bits to `f32` (exact; a NaN gets the quiet bit set, payload kept). The
/// kernels widen bf16 with a plain shift (see `SoftBf16`); this quieting form is what the tests
/// check conversions against.
#[cfg(test)]
#[inline(always)]
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    let x = u32::from(h) << 16;
    let is_nan = u32::from(x & 0x7fff_ffff > 0x7f80_0000);
    f32::from_bits(x | (is_nan << 22))
}

/// Converts an `f32` to bfloat16 bits, rounding to nearest, ties to even (overflow gives
/// infinity, subnormals round like any other value). A NaN stays a NaN: quiet bit set, the top
/// payload bits kept.
#[inline(always)]
pub(crate) fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    // RNE on the 16 dropped bits; the carry can reach the exponent (and make infinity) but never
    // the sign, because NaNs take the other branch.
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let nan = (x >> 16) | 0x0040;
    (if x & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }) as u16
}

// ---------------------------------------------------------------------------------------------
// Operators.
// ---------------------------------------------------------------------------------------------

/// `sum` marker.
struct Sum;
/// `prod` marker.
struct Prod;
/// `max` marker.
struct Max;
/// `min` marker.
struct Min;

/// One binary operator on one element type.
trait BinOp<T> {
    fn apply(a: T, b: T) -> T;
}

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for Sum {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.wrapping_add(b) }
        }
        impl BinOp<$t> for Prod {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a.wrapping_mul(b) }
        }
        impl BinOp<$t> for Max {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { if b > a { b } else { a } }
        }
        impl BinOp<$t> for Min {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { if b < a { b } else { a } }
        }
    )*};
}
int_ops!(i8, i16, i32, i64, u8, u16, u32, u64);

// Float max/min: the result is `b` only if `b` is strictly better, or `b` is NaN and `a` is not.
// Hence NaN wins (the first NaN operand if both are), and equal values (including -0.0 vs +0.0)
// return `a`. Written with `&`/`|` on bools so it lowers to compares and a blend.
macro_rules! float_ops {
    ($($t:ty),*) => {$(
        impl BinOp<$t> for Sum {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a + b }
        }
        impl BinOp<$t> for Prod {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t { a * b }
        }
        impl BinOp<$t> for Max {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t {
                if (b > a) | (b.is_nan() & !a.is_nan()) { b } else { a }
            }
        }
        impl BinOp<$t> for Min {
            #[inline(always)]
            fn apply(a: $t, b: $t) -> $t {
                if (b < a) | (b.is_nan() & !a.is_nan()) { b } else { a }
            }
        }
    )*};
}
float_ops!(f32, f64);

/// How an operator acts on half-precision lanes widened to f32.
trait HalfOp {
    /// True for max/min: pick one operand's original bits instead of rounding a result.
    const SELECT: bool;
    /// Arithmetic result in f32 (sum/prod).
    fn arith(a: f32, b: f32) -> f32;
    /// Whether the selection picks `b` (max/min).
    fn pick_b(a: f32, b: f32) -> bool;
}

impl HalfOp for Sum {
    const SELECT: bool = false;
    #[inline(always)]
    fn arith(a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn pick_b(_: f32, _: f32) -> bool {
        false
    }
}

impl HalfOp for Prod {
    const SELECT: bool = false;
    #[inline(always)]
    fn arith(a: f32, b: f32) -> f32 {
        a * b
    }
    #[inline(always)]
    fn pick_b(_: f32, _: f32) -> bool {
        false
    }
}

// Max/min use the same selection rule as fp32 (NaN wins, ties keep `a`).
impl HalfOp for Max {
    const SELECT: bool = true;
    #[inline(always)]
    fn arith(a: f32, _: f32) -> f32 {
        a
    }
    #[inline(always)]
    fn pick_b(a: f32, b: f32) -> bool {
        (b > a) | (b.is_nan() & !a.is_nan())
    }
}

impl HalfOp for Min {
    const SELECT: bool = true;
    #[inline(always)]
    fn arith(a: f32, _: f32) -> f32 {
        a
    }
    #[inline(always)]
    fn pick_b(a: f32, b: f32) -> bool {
        (b < a) | (b.is_nan() & !a.is_nan())
    }
}

// ---------------------------------------------------------------------------------------------
// Block bodies, shared by every feature level.
// ---------------------------------------------------------------------------------------------

/// Signature of every kernel: `dst = a op b` over `count` elements.
type KernelFn = unsafe fn(*mut u8, *const u8, *const u8, usize);

/// Generic body for plain element types; `N` elements (64 bytes) per block.
///
/// # Safety
/// As [`reduce_raw`], with `T` matching the buffers' element type.
#[inline(always)]
unsafe fn body<T: Copy + Default, O: BinOp<T>, const N: usize>(
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    let bytes = N * size_of::<T>();
    let full = count / N;
    for blk in 0..full {
        let off = blk * bytes;
        // SAFETY: the block lies within the first count*size bytes of each buffer; reads are
        // unaligned-tolerant; both inputs are read before dst is written, so dst == a / b is fine.
        unsafe {
            let va = ptr::read_unaligned(a.add(off).cast::<[T; N]>());
            let vb = ptr::read_unaligned(b.add(off).cast::<[T; N]>());
            let mut r = va;
            for (x, &y) in r.iter_mut().zip(&vb) {
                *x = O::apply(*x, y);
            }
            ptr::write_unaligned(dst.add(off).cast::<[T; N]>(), r);
        }
    }
    // The tail element by element: the same operation per element as in a block, without
    // padding a block through memcpy and memset (most of a few-element call's cost).
    for i in full * N..count {
        let off = i * size_of::<T>();
        // SAFETY: element `i < count` lies within every buffer; it is read before written.
        unsafe {
            let x = ptr::read_unaligned(a.add(off).cast::<T>());
            let y = ptr::read_unaligned(b.add(off).cast::<T>());
            ptr::write_unaligned(dst.add(off).cast::<T>(), O::apply(x, y));
        }
    }
}

/// Lanes per half-precision block (64 bytes of input, 128 bytes of f32 intermediates).
const HL: usize = 32;

/// Conversion of a block of half lanes to and from f32.
trait HalfConv {
    /// # Safety
    /// The CPU must support whatever instructions the implementation uses.
    unsafe fn widen(x: &[u16; HL]) -> [f32; HL];
    /// # Safety
    /// As `widen`.
    unsafe fn narrow(x: &[f32; HL]) -> [u16; HL];
}

// Plain loops rather than `array::map`: `map` is not always inlined, and an out-of-line copy would
// be compiled without the caller's target features (and without vectorising across lanes).

/// IEEE binary16 by bit manipulation (any CPU).
struct SoftF16;
/// bfloat16 by bit manipulation (any CPU).
struct SoftBf16;

impl HalfConv for SoftF16 {
    #[inline(always)]
    unsafe fn widen(x: &[u16; HL]) -> [f32; HL] {
        let mut out = [0f32; HL];
        for (o, &h) in out.iter_mut().zip(x) {
            *o = f16_to_f32(h);
        }
        out
    }
    #[inline(always)]
    unsafe fn narrow(x: &[f32; HL]) -> [u16; HL] {
        let mut out = [0u16; HL];
        for (o, &f) in out.iter_mut().zip(x) {
            *o = f32_to_f16(f);
        }
        out
    }
}

impl HalfConv for SoftBf16 {
    #[inline(always)]
    unsafe fn widen(x: &[u16; HL]) -> [f32; HL] {
        let mut out = [0f32; HL];
        for (o, &h) in out.iter_mut().zip(x) {
            // A plain shift, without `bf16_to_f32`'s quieting: inside a kernel a widened value
            // only feeds an f32 add/mul (which quiets a signalling NaN by itself) or a compare
            // (where any NaN is a NaN), so the result is the same and the loop ~1/3 shorter.
            *o = f32::from_bits(u32::from(h) << 16);
        }
        out
    }
    #[inline(always)]
    unsafe fn narrow(x: &[f32; HL]) -> [u16; HL] {
        let mut out = [0u16; HL];
        for (o, &f) in out.iter_mut().zip(x) {
            *o = f32_to_bf16(f);
        }
        out
    }
}

/// IEEE binary16 through the F16C instructions. Only ever instantiated inside a kernel compiled
/// with `f16c` enabled (always-inline makes the intrinsics inline there), and only called after
/// run-time detection.
#[cfg(target_arch = "x86_64")]
struct HwF16;

#[cfg(target_arch = "x86_64")]
impl HalfConv for HwF16 {
    #[inline(always)]
    unsafe fn widen(x: &[u16; HL]) -> [f32; HL] {
        use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
        let mut out = [0f32; HL];
        for (i, o) in x.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
            // SAFETY: 8 u16 / 8 f32 per chunk; unaligned load/store; f16c checked by caller.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(i.as_ptr().cast::<__m128i>()));
                _mm256_storeu_ps(o.as_mut_ptr(), v);
            }
        }
        out
    }
    #[inline(always)]
    unsafe fn narrow(x: &[f32; HL]) -> [u16; HL] {
        use std::arch::x86_64::{
            __m128i, _mm256_cvtps_ph, _mm256_loadu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
        };
        let mut out = [0u16; HL];
        for (i, o) in x.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
            // SAFETY: as in `widen`. The immediate selects RNE regardless of MXCSR.
            unsafe {
                let v = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(i.as_ptr()));
                _mm_storeu_si128(o.as_mut_ptr().cast::<__m128i>(), v);
            }
        }
        out
    }
}

/// One block of half lanes: widen, operate in f32, round back (or select original bits).
///
/// # Safety
/// The CPU must support `C`'s instructions.
#[inline(always)]
unsafe fn half_block<C: HalfConv, O: HalfOp>(a: &[u16; HL], b: &[u16; HL]) -> [u16; HL] {
    // SAFETY: forwarded to the caller.
    let (fa, fb) = unsafe { (C::widen(a), C::widen(b)) };
    if O::SELECT {
        let mut r = *a;
        for (((r, &y), &fx), &fy) in r.iter_mut().zip(b).zip(&fa).zip(&fb) {
            // A bit mask rather than `if`: LLVM otherwise selects between the two array
            // addresses and reloads, which does not vectorise.
            let m = u16::from(O::pick_b(fx, fy)).wrapping_neg();
            *r = (y & m) | (*r & !m);
        }
        r
    } else {
        let mut fr = fa;
        for (x, &y) in fr.iter_mut().zip(&fb) {
            *x = O::arith(*x, y);
        }
        // SAFETY: forwarded to the caller.
        unsafe { C::narrow(&fr) }
    }
}

/// Generic body for fp16 / bf16.
///
/// # Safety
/// As [`reduce_raw`] on 2-byte elements, and the CPU must support `C`'s instructions.
#[inline(always)]
unsafe fn half_body<C: HalfConv, O: HalfOp>(
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    let bytes = HL * 2;
    let full = count / HL;
    for blk in 0..full {
        let off = blk * bytes;
        // SAFETY: as in `body`.
        unsafe {
            let va = ptr::read_unaligned(a.add(off).cast::<[u16; HL]>());
            let vb = ptr::read_unaligned(b.add(off).cast::<[u16; HL]>());
            let r = half_block::<C, O>(&va, &vb);
            ptr::write_unaligned(dst.add(off).cast::<[u16; HL]>(), r);
        }
    }
    let rem = (count - full * HL) * 2;
    if rem != 0 {
        let off = full * bytes;
        let mut va = [0u16; HL];
        let mut vb = [0u16; HL];
        // SAFETY: as in `body`.
        unsafe {
            ptr::copy_nonoverlapping(a.add(off), va.as_mut_ptr().cast::<u8>(), rem);
            ptr::copy_nonoverlapping(b.add(off), vb.as_mut_ptr().cast::<u8>(), rem);
            let r = half_block::<C, O>(&va, &vb);
            ptr::copy_nonoverlapping(r.as_ptr().cast::<u8>(), dst.add(off), rem);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Feature levels: the same bodies compiled for different target features.
// ---------------------------------------------------------------------------------------------

/// Baseline kernel (SSE2 on x86_64).
unsafe fn k_base<T: Copy + Default, O: BinOp<T>, const N: usize>(
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    // SAFETY: forwarded to the caller.
    unsafe { body::<T, O, N>(dst, a, b, count) }
}

/// Baseline half kernel.
unsafe fn hk_base<C: HalfConv, O: HalfOp>(dst: *mut u8, a: *const u8, b: *const u8, count: usize) {
    // SAFETY: forwarded to the caller (only soft conversions are used with this level).
    unsafe { half_body::<C, O>(dst, a, b, count) }
}

/// AVX2 kernel; only reachable after `is_x86_feature_detected!("avx2")`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn k_avx2<T: Copy + Default, O: BinOp<T>, const N: usize>(
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    // SAFETY: forwarded to the caller.
    unsafe { body::<T, O, N>(dst, a, b, count) }
}

/// AVX2 half kernel with soft conversions (bf16, and fp16 on CPUs without F16C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hk_avx2<C: HalfConv, O: HalfOp>(dst: *mut u8, a: *const u8, b: *const u8, count: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { half_body::<C, O>(dst, a, b, count) }
}

/// AVX2 + F16C half kernel; only reachable after detecting both features. FMA is deliberately not
/// enabled: nothing here multiplies-and-adds, and Rust never contracts `a * b + c` on its own.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn hk_f16c<C: HalfConv, O: HalfOp>(dst: *mut u8, a: *const u8, b: *const u8, count: usize) {
    // SAFETY: forwarded to the caller; the features HwF16 needs are enabled here.
    unsafe { half_body::<C, O>(dst, a, b, count) }
}

/// Instruction-set level of a kernel table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx2F16c,
}

impl Level {
    fn detect() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                return if is_x86_feature_detected!("f16c") {
                    Level::Avx2F16c
                } else {
                    Level::Avx2
                };
            }
        }
        Level::Baseline
    }

    fn name(self) -> &'static str {
        match self {
            Level::Baseline => "baseline",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2F16c => "avx2+f16c",
        }
    }
}

/// One kernel per operator for element type `$t`, `$n` elements per 64-byte block.
macro_rules! by_op {
    ($op:expr, $k:ident, $t:ty, $n:expr) => {
        match $op {
            ReduceOp::Sum => $k::<$t, Sum, $n> as KernelFn,
            ReduceOp::Prod => $k::<$t, Prod, $n> as KernelFn,
            ReduceOp::Max => $k::<$t, Max, $n> as KernelFn,
            ReduceOp::Min => $k::<$t, Min, $n> as KernelFn,
        }
    };
}

/// One half kernel per operator with conversion `$c`.
macro_rules! by_op_half {
    ($op:expr, $hk:ident, $c:ty) => {
        match $op {
            ReduceOp::Sum => $hk::<$c, Sum> as KernelFn,
            ReduceOp::Prod => $hk::<$c, Prod> as KernelFn,
            ReduceOp::Max => $hk::<$c, Max> as KernelFn,
            ReduceOp::Min => $hk::<$c, Min> as KernelFn,
        }
    };
}

/// The kernel for `(dtype, op)` at one level; `None` for non-reducible types.
macro_rules! pick_kernel {
    ($dtype:expr, $op:expr, $k:ident, $hk:ident, $f16:ty) => {
        match $dtype {
            DataType::Int8 => Some(by_op!($op, $k, i8, 64)),
            DataType::Uint8 => Some(by_op!($op, $k, u8, 64)),
            DataType::Int16 => Some(by_op!($op, $k, i16, 32)),
            DataType::Uint16 => Some(by_op!($op, $k, u16, 32)),
            DataType::Int32 => Some(by_op!($op, $k, i32, 16)),
            DataType::Uint32 => Some(by_op!($op, $k, u32, 16)),
            DataType::Int64 => Some(by_op!($op, $k, i64, 8)),
            DataType::Uint64 => Some(by_op!($op, $k, u64, 8)),
            DataType::Fp32 => Some(by_op!($op, $k, f32, 16)),
            DataType::Fp64 => Some(by_op!($op, $k, f64, 8)),
            DataType::Fp16 => Some(by_op_half!($op, $hk, $f16)),
            DataType::Bf16 => Some(by_op_half!($op, $hk, SoftBf16)),
            DataType::Int128
            | DataType::Hif8
            | DataType::Fp8E4M3
            | DataType::Fp8E5M2
            | DataType::Fp8E8M0 => None,
        }
    };
}

fn pick(level: Level, dtype: DataType, op: ReduceOp) -> Option<KernelFn> {
    match level {
        Level::Baseline => pick_kernel!(dtype, op, k_base, hk_base, SoftF16),
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => pick_kernel!(dtype, op, k_avx2, hk_avx2, SoftF16),
        #[cfg(target_arch = "x86_64")]
        Level::Avx2F16c => pick_kernel!(dtype, op, k_avx2, hk_f16c, HwF16),
    }
}

/// Kernel table for one level, indexed by raw dtype and raw op.
struct Kernels {
    fns: [[Option<KernelFn>; 4]; 18],
    level: Level,
}

impl Kernels {
    fn build(level: Level) -> Kernels {
        let mut fns = [[None; 4]; 18];
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                fns[dtype.raw() as usize][op.raw() as usize] = pick(level, dtype, op);
            }
        }
        Kernels { fns, level }
    }

    fn get(&self, dtype: DataType, op: ReduceOp) -> Option<KernelFn> {
        self.fns[dtype.raw() as usize][op.raw() as usize]
    }
}

/// The table for this CPU, built on first use.
fn kernels() -> &'static Kernels {
    static K: OnceLock<Kernels> = OnceLock::new();
    K.get_or_init(|| Kernels::build(Level::detect()))
}

// ---------------------------------------------------------------------------------------------
// Public entry points.
// ---------------------------------------------------------------------------------------------

/// Names the kernel family selected on this CPU (`"avx2+f16c"`, `"avx2"` or `"baseline"`), for
/// logs.
pub fn kernel_description() -> &'static str {
    kernels().level.name()
}

/// Checks that `(dtype, op)` can be reduced on the host.
///
/// Returns `Err(NotSupport)` naming both for int128 and the 8-bit float types, which are
/// data-movement only.
pub fn check_reducible(dtype: DataType, op: ReduceOp) -> Result<()> {
    if !dtype.reducible() {
        crate::bail!(
            NotSupport,
            "reduce op {} is not supported for data type {}",
            op.name(),
            dtype.name()
        );
    }
    Ok(())
}

/// Computes `dst[i] = a[i] op b[i]` for `count` elements of `dtype`.
///
/// Integers wrap on sum/prod; floats follow IEEE (fp16/bf16 computed in f32 and rounded to
/// nearest-even); float max/min return NaN if either operand is NaN, and `a` when both compare
/// equal (so `-0.0` vs `+0.0` is deterministic). For a non-reducible `dtype` (see
/// [`check_reducible`], which callers must use first) nothing is written.
///
/// # Safety
/// `a` and `b` must be valid for reads and `dst` for writes of `count * dtype.size()` bytes.
/// `dst` may be exactly equal to `a` or `b` (same start address) but must not otherwise overlap
/// them. No alignment is required.
pub unsafe fn reduce_raw(
    dtype: DataType,
    op: ReduceOp,
    dst: *mut u8,
    a: *const u8,
    b: *const u8,
    count: usize,
) {
    if count == 0 {
        return;
    }
    match kernels().get(dtype, op) {
        // SAFETY: forwarded to the caller; the table only holds kernels the CPU supports.
        Some(f) => unsafe { f(dst, a, b, count) },
        None => debug_assert!(false, "reduce_raw on non-reducible {}", dtype.name()),
    }
}

/// Validates slice lengths against the element size.
fn check_len(dtype: DataType, op: ReduceOp, lens: &[usize]) -> Result<usize> {
    check_reducible(dtype, op)?;
    let n = lens[0];
    if lens.iter().any(|&l| l != n) {
        crate::bail!(
            Para,
            "reduce {} {}: buffer lengths differ ({lens:?})",
            dtype.name(),
            op.name()
        );
    }
    if !n.is_multiple_of(dtype.size()) {
        crate::bail!(
            Para,
            "reduce {} {}: length {n} is not a multiple of the element size {}",
            dtype.name(),
            op.name(),
            dtype.size()
        );
    }
    Ok(n / dtype.size())
}

/// `out = a op b` on byte slices holding elements of `dtype`.
///
/// All three lengths must be equal multiples of `dtype.size()` (else `Err(Para)`); the type must
/// be reducible (else `Err(NotSupport)`). No alignment is required.
pub fn reduce_into(
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<()> {
    let count = check_len(dtype, op, &[out.len(), a.len(), b.len()])?;
    // SAFETY: lengths checked; `&mut` guarantees `out` overlaps neither input.
    unsafe { reduce_raw(dtype, op, out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), count) };
    Ok(())
}

/// `acc = acc op incoming` on byte slices holding elements of `dtype`.
///
/// Lengths must be equal multiples of `dtype.size()` (else `Err(Para)`); the type must be
/// reducible (else `Err(NotSupport)`). No alignment is required.
pub fn reduce_inplace(
    dtype: DataType,
    op: ReduceOp,
    acc: &mut [u8],
    incoming: &[u8],
) -> Result<()> {
    let count = check_len(dtype, op, &[acc.len(), incoming.len()])?;
    let p = acc.as_mut_ptr();
    // SAFETY: lengths checked; dst is exactly `a`, which the kernels allow.
    unsafe { reduce_raw(dtype, op, p, p, incoming.as_ptr(), count) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::ErrorKind;

    /// xorshift64*: deterministic test data without dependencies.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| (self.next() >> 32) as u8).collect()
        }
    }

    // ----- reference conversions, written arithmetically in f64 -----

    /// Decodes a binary format with `man` mantissa bits and exponent bias `bias` to f64.
    fn ref_decode(bits: u32, man: u32, exp_bits: u32, bias: i32) -> f64 {
        let sign = if bits >> (man + exp_bits) & 1 == 1 {
            -1.0
        } else {
            1.0
        };
        let e = (bits >> man) & ((1 << exp_bits) - 1);
        let m = f64::from(bits & ((1 << man) - 1));
        let scale = |p: i32| 2f64.powi(p);
        sign * if e == (1 << exp_bits) - 1 {
            if m == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        } else if e == 0 {
            m * scale(1 - bias - man as i32)
        } else {
            (m + scale(man as i32)) * scale(e as i32 - bias - man as i32)
        }
    }

    /// Rounds a finite or infinite f64 to the binary format, nearest-even (not NaN).
    fn ref_encode(x: f64, man: u32, exp_bits: u32, bias: i32) -> u32 {
        let sign = u32::from(x.is_sign_negative()) << (man + exp_bits);
        let inf = ((1u32 << exp_bits) - 1) << man;
        let ax = x.abs();
        if ax == 0.0 {
            return sign;
        }
        if ax.is_infinite() {
            return sign | inf;
        }
        let e2 = ((ax.to_bits() >> 52) as i32 - 1023).max(1 - bias);
        let ulp = 2f64.powi(e2 - man as i32);
        let q = (ax / ulp).round_ties_even() as u64;
        // q in [0, 2^(man+1)]; the formula also covers subnormals (e2 + bias == 1) and the carry
        // into the next binade.
        let bits = (((e2 + bias) as u64) << man) + q - (1u64 << man);
        sign | (bits.min(u64::from(inf)) as u32)
    }

    fn ref_f16(x: f64) -> u16 {
        ref_encode(x, 10, 5, 15) as u16
    }
    fn ref_bf16(x: f64) -> u16 {
        ref_encode(x, 7, 8, 127) as u16
    }
    fn ref_f16_val(h: u16) -> f64 {
        ref_decode(u32::from(h), 10, 5, 15)
    }
    fn ref_bf16_val(h: u16) -> f64 {
        ref_decode(u32::from(h), 7, 8, 127)
    }

    #[test]
    fn f16_exhaustive_roundtrip_and_widen() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            let r = ref_f16_val(h);
            if r.is_nan() {
                assert!(f.is_nan(), "{h:#06x}");
                assert_eq!(f.to_bits() & 0x0040_0000, 0x0040_0000, "quiet {h:#06x}");
                let back = f32_to_f16(f);
                assert_eq!(back & 0x7e00, 0x7e00, "NaN stays quiet NaN {h:#06x}");
                assert_eq!(back & 0x81ff, h & 0x81ff, "payload {h:#06x}");
            } else {
                assert_eq!(f64::from(f).to_bits(), r.to_bits(), "widen {h:#06x}");
                assert_eq!(f32_to_f16(f), h, "roundtrip {h:#06x}");
            }
        }
    }

    #[test]
    fn bf16_exhaustive_roundtrip_and_widen() {
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            let r = ref_bf16_val(h);
            if r.is_nan() {
                assert!(f.is_nan() && f.to_bits() & 0x0040_0000 != 0, "{h:#06x}");
                assert_eq!(f32_to_bf16(f), h | 0x0040, "{h:#06x}");
            } else {
                assert_eq!(f64::from(f).to_bits(), r.to_bits(), "widen {h:#06x}");
                assert_eq!(f32_to_bf16(f), h, "roundtrip {h:#06x}");
            }
        }
    }

    #[test]
    fn f32_to_f16_rounding_cases() {
        let cases: &[(f32, u16)] = &[
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (65519.99, 0x7bff),
            (65520.0, 0x7c00), // tie between max finite (odd) and "65536": to even = inf
            (1e10, 0x7c00),
            (-1e10, 0xfc00),
            (f32::INFINITY, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
            (1.0 + 1.0 / 2048.0, 0x3c00), // tie, lower is even
            (1.0 + 3.0 / 2048.0, 0x3c02), // tie, upper is even
            (1.0 + 1.0 / 2048.0 + 1.0 / 65536.0, 0x3c01),
            (5.960_464_5e-8, 0x0001),  // 2^-24, smallest subnormal
            (2.980_232_2e-8, 0x0000),  // 2^-25: tie to even zero
            (-2.980_232_2e-8, 0x8000), // negative tie keeps the sign
            (4.470_348_4e-8, 0x0001),  // 1.5 * 2^-25 rounds up
            (8.940_697e-8, 0x0002),    // 1.5 * 2^-24: tie to even 2
            (6.097_555e-5, 0x03ff),    // largest subnormal
            (6.103_515_6e-5, 0x0400),  // 2^-14, smallest normal
            (6.100_535_4e-5, 0x0400),  // between: tie (0x3ff odd) goes up to normal
            (1e-30, 0x0000),
            (f32::from_bits(1), 0x0000), // f32 subnormal
        ];
        for &(f, h) in cases {
            assert_eq!(f32_to_f16(f), h, "{f:e}");
        }
        assert_eq!(f32_to_f16(f32::NAN) & 0x7e00, 0x7e00);
        assert_eq!(f32_to_f16(f32::from_bits(0x7f80_0001)), 0x7e00); // sNaN, payload below kept bits
        assert_eq!(f32_to_f16(f32::from_bits(0xffa0_0000)), 0xff00);
    }

    #[test]
    fn f32_to_bf16_rounding_cases() {
        let cases: &[(u32, u16)] = &[
            (0x0000_0000, 0x0000),
            (0x8000_0000, 0x8000),
            (0x3f80_0000, 0x3f80),
            (0x3f80_8000, 0x3f80), // tie, lower even
            (0x3f81_8000, 0x3f82), // tie, upper even
            (0x3f80_8001, 0x3f81),
            (0x3f80_7fff, 0x3f80),
            (0x7f7f_ffff, 0x7f80), // f32::MAX overflows to inf
            (0xff7f_ffff, 0xff80),
            (0x7f7f_7fff, 0x7f7f),
            (0x7f80_0000, 0x7f80),
            (0x0000_8000, 0x0000), // subnormal tie to even zero
            (0x0001_8000, 0x0002), // subnormal tie to even
            (0x0000_8001, 0x0001),
            (0x807f_ffff, 0x8080), // largest negative subnormal rounds to min normal
            (0x7f80_0001, 0x7fc0), // sNaN becomes quiet
            (0xffc1_2345, 0xffc1),
        ];
        for &(f, h) in cases {
            assert_eq!(f32_to_bf16(f32::from_bits(f)), h, "{f:#010x}");
        }
    }

    #[test]
    fn narrow_random_vs_reference() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for i in 0..2_000_000u32 {
            let bits = match i % 4 {
                0 => rng.next() as u32,
                // Concentrate on the f16 range, where the rounding work happens.
                1 => 0x3000_0000 + (rng.next() as u32 % 0x1800_0000),
                2 => (rng.next() as u32 % 0x3900_0000) | ((rng.next() as u32) << 31),
                _ => 0x4770_0000 + (rng.next() as u32 % 0x0020_0000),
            };
            let f = f32::from_bits(bits);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(f), ref_f16(f64::from(f)), "f16 {bits:#010x}");
            assert_eq!(f32_to_bf16(f), ref_bf16(f64::from(f)), "bf16 {bits:#010x}");
        }
    }

    /// The lane conversions agree with the `half` crate bit for bit: every half pattern
    /// widened (NaNs included: quiet bit set, payload kept), and f32 patterns narrowed across
    /// every exponent, NaNs and the rounding boundaries included.
    #[test]
    fn lanes_match_the_half_crate() {
        for h in 0..=u16::MAX {
            assert_eq!(
                f16_to_f32(h).to_bits(),
                half::f16::from_bits(h).to_f32().to_bits(),
                "f16 {h:#06x}"
            );
            assert_eq!(
                bf16_to_f32(h).to_bits(),
                half::bf16::from_bits(h).to_f32().to_bits(),
                "bf16 {h:#06x}"
            );
        }
        let mut rng = Rng(0x0bad_cafe_f00d_1234);
        for i in 0..1_000_000u32 {
            let bits = match i % 3 {
                0 => rng.next() as u32,
                // Every value a multiple of 2^-13 ulp around a half boundary: ties and their
                // neighbours.
                1 => (rng.next() as u32 & 0xffff_e000) | [0x0fff, 0x1000, 0x1001][i as usize % 3],
                _ => (rng.next() as u32 & 0xffff_0000) | [0x7fff, 0x8000, 0x8001][i as usize % 3],
            };
            let f = f32::from_bits(bits);
            assert_eq!(
                f32_to_f16(f),
                half::f16::from_f32(f).to_bits(),
                "f16 {bits:#010x}"
            );
            assert_eq!(
                f32_to_bf16(f),
                half::bf16::from_f32(f).to_bits(),
                "bf16 {bits:#010x}"
            );
        }
    }

    /// Exhaustive over all 2^32 f32 patterns (about 10 s in release). Run with
    /// `cargo test --release -- --ignored`.
    #[test]
    #[ignore]
    fn narrow_exhaustive_vs_reference_and_hw() {
        #[cfg(target_arch = "x86_64")]
        let hw = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c");
        for hi in 0..=u16::MAX {
            let mut xs = [0f32; HL];
            for lo in (0..=u16::MAX as u32).step_by(HL) {
                for (j, x) in xs.iter_mut().enumerate() {
                    *x = f32::from_bits((u32::from(hi) << 16) | (lo + j as u32));
                }
                // SAFETY: soft conversion needs no CPU features.
                let soft = unsafe { SoftF16::narrow(&xs) };
                #[cfg(target_arch = "x86_64")]
                if hw {
                    // SAFETY: features detected above.
                    let h = unsafe { hw_narrow(&xs) };
                    assert_eq!(soft, h, "hi {hi:#06x} lo {lo:#06x}");
                }
                if hi & 0xff == 0 {
                    for (x, s) in xs.iter().zip(soft) {
                        if !x.is_nan() {
                            assert_eq!(s, ref_f16(f64::from(*x)));
                            assert_eq!(f32_to_bf16(*x), ref_bf16(f64::from(*x)));
                        }
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn hw_narrow(x: &[f32; HL]) -> [u16; HL] {
        // SAFETY: features enabled on this function.
        unsafe { HwF16::narrow(x) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn hw_widen(x: &[u16; HL]) -> [f32; HL] {
        // SAFETY: features enabled on this function.
        unsafe { HwF16::widen(x) }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f16c_matches_soft_conversion() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
            crate::test_skip::skip(
                "this CPU has no AVX2+F16C, so the hardware conversion cannot run",
            );
            return;
        }
        let mut h = [0u16; HL];
        for base in (0..=u16::MAX as u32).step_by(HL) {
            for (j, x) in h.iter_mut().enumerate() {
                *x = (base + j as u32) as u16;
            }
            // SAFETY: features checked above; soft needs none.
            let (hw, soft) = unsafe { (hw_widen(&h), SoftF16::widen(&h)) };
            assert_eq!(
                hw.map(f32::to_bits),
                soft.map(f32::to_bits),
                "widen from {base:#x}"
            );
            // SAFETY: as above.
            let (hw, soft) = unsafe { (hw_narrow(&soft), SoftF16::narrow(&soft)) };
            assert_eq!(hw, soft, "narrow from {base:#x}");
        }
        let mut rng = Rng(99);
        let mut xs = [0f32; HL];
        for _ in 0..200_000 {
            for x in xs.iter_mut() {
                *x = f32::from_bits(rng.next() as u32);
            }
            // SAFETY: as above.
            let (hw, soft) = unsafe { (hw_narrow(&xs), SoftF16::narrow(&xs)) };
            assert_eq!(hw, soft, "{xs:?}");
        }
    }

    // ----- reductions against a reference -----

    const REDUCIBLE: [DataType; 12] = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
    ];

    /// Integer element as i128 (sign- or zero-extended), `None` for float types.
    fn int_val(dt: DataType, e: &[u8]) -> Option<i128> {
        let mut buf = [0u8; 16];
        buf[..e.len()].copy_from_slice(e);
        let u = u128::from_le_bytes(buf);
        let bits = 8 * e.len() as u32;
        let signed = matches!(
            dt,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
        );
        match dt {
            DataType::Fp16 | DataType::Bf16 | DataType::Fp32 | DataType::Fp64 => None,
            _ if signed => Some(((u << (128 - bits)) as i128) >> (128 - bits)),
            _ => Some(u as i128),
        }
    }

    /// Float element as f64.
    fn float_val(dt: DataType, e: &[u8]) -> f64 {
        match dt {
            DataType::Fp16 => ref_f16_val(u16::from_le_bytes([e[0], e[1]])),
            DataType::Bf16 => ref_bf16_val(u16::from_le_bytes([e[0], e[1]])),
            DataType::Fp32 => f64::from(f32::from_le_bytes(e.try_into().unwrap())),
            DataType::Fp64 => f64::from_le_bytes(e.try_into().unwrap()),
            _ => unreachable!(),
        }
    }

    /// Rounds an exact-enough f64 to the element encoding (double rounding through f64 is
    /// harmless for one +/* of two narrower operands).
    fn float_enc(dt: DataType, x: f64) -> Vec<u8> {
        match dt {
            DataType::Fp16 if x.is_nan() => vec![0x00, 0x7e],
            DataType::Bf16 if x.is_nan() => vec![0xc0, 0x7f],
            DataType::Fp16 => ref_f16(x).to_le_bytes().to_vec(),
            DataType::Bf16 => ref_bf16(x).to_le_bytes().to_vec(),
            DataType::Fp32 => (x as f32).to_le_bytes().to_vec(),
            DataType::Fp64 => x.to_le_bytes().to_vec(),
            _ => unreachable!(),
        }
    }

    fn is_nan_elem(dt: DataType, e: &[u8]) -> bool {
        int_val(dt, e).is_none() && float_val(dt, e).is_nan()
    }

    /// One element of the reference result.
    fn ref_elem(dt: DataType, op: ReduceOp, x: &[u8], y: &[u8]) -> Vec<u8> {
        let n = x.len();
        if let (Some(a), Some(b)) = (int_val(dt, x), int_val(dt, y)) {
            let r = match op {
                ReduceOp::Sum => a.wrapping_add(b),
                ReduceOp::Prod => a.wrapping_mul(b),
                ReduceOp::Max => a.max(b),
                ReduceOp::Min => a.min(b),
            };
            return r.to_le_bytes()[..n].to_vec();
        }
        let (a, b) = (float_val(dt, x), float_val(dt, y));
        match op {
            ReduceOp::Sum => float_enc(dt, a + b),
            ReduceOp::Prod => float_enc(dt, a * b),
            ReduceOp::Max | ReduceOp::Min => {
                let b_wins = if a.is_nan() {
                    false
                } else if b.is_nan() {
                    true
                } else if op == ReduceOp::Max {
                    b > a
                } else {
                    b < a
                };
                if b_wins {
                    y.to_vec()
                } else {
                    x.to_vec()
                }
            }
        }
    }

    fn check_result(dt: DataType, op: ReduceOp, a: &[u8], b: &[u8], got: &[u8], what: &str) {
        let sz = dt.size();
        for (i, ((x, y), g)) in a
            .chunks(sz)
            .zip(b.chunks(sz))
            .zip(got.chunks(sz))
            .enumerate()
        {
            let want = ref_elem(dt, op, x, y);
            let arith = matches!(op, ReduceOp::Sum | ReduceOp::Prod);
            if arith && is_nan_elem(dt, &want) {
                // NaN payload of an arithmetic result is unspecified; NaN-ness is not.
                assert!(is_nan_elem(dt, g), "{what} {dt:?} {op:?} [{i}] not NaN");
                continue;
            }
            assert_eq!(g, &want[..], "{what} {dt:?} {op:?} [{i}] a={x:?} b={y:?}");
        }
    }

    /// Random elements: half raw bit patterns, half small "nice" values that exercise rounding
    /// and exact ties.
    fn gen(rng: &mut Rng, dt: DataType, n: usize) -> Vec<u8> {
        let sz = dt.size();
        let mut v = rng.bytes(n * sz);
        for e in v.chunks_mut(sz) {
            if rng.next() & 1 == 0 {
                continue;
            }
            let small = (rng.next() % 2001) as f64 / 8.0 - 125.0;
            let enc = match dt {
                DataType::Fp16 => ref_f16(small).to_le_bytes().to_vec(),
                DataType::Bf16 => ref_bf16(small).to_le_bytes().to_vec(),
                DataType::Fp32 => (small as f32).to_le_bytes().to_vec(),
                DataType::Fp64 => small.to_le_bytes().to_vec(),
                _ => continue,
            };
            e.copy_from_slice(&enc);
        }
        v
    }

    /// Every level this CPU can run, so each compiled path is exercised.
    fn tables() -> Vec<Kernels> {
        #[allow(unused_mut)]
        let mut levels = vec![Level::Baseline];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            levels.push(Level::Avx2);
            if is_x86_feature_detected!("f16c") {
                levels.push(Level::Avx2F16c);
            }
        }
        levels.into_iter().map(Kernels::build).collect()
    }

    #[test]
    fn all_types_and_ops_vs_reference() {
        let mut rng = Rng(7);
        let lens: Vec<usize> = (0..=70).chain([255, 1000, 4099]).collect();
        for t in &tables() {
            for dt in REDUCIBLE {
                for op in ReduceOp::ALL {
                    let k = t.get(dt, op).expect("reducible");
                    for &n in &lens {
                        let sz = dt.size();
                        let a = gen(&mut rng, dt, n);
                        let b = gen(&mut rng, dt, n);
                        // Out of place, all three pointers misaligned by one byte.
                        let mut ab = vec![0u8; n * sz + 1];
                        let mut bb = vec![0u8; n * sz + 1];
                        ab[1..].copy_from_slice(&a);
                        bb[1..].copy_from_slice(&b);
                        let mut out = vec![0xa5u8; n * sz + 2];
                        // SAFETY: each buffer holds n*sz bytes from offset 1; out has a guard byte.
                        unsafe {
                            k(
                                out.as_mut_ptr().add(1),
                                ab.as_ptr().add(1),
                                bb.as_ptr().add(1),
                                n,
                            )
                        };
                        assert_eq!(out[0], 0xa5, "underrun");
                        assert_eq!(out[n * sz + 1], 0xa5, "overrun");
                        let what = format!("{} n={n} unaligned", t.level.name());
                        check_result(dt, op, &a, &b, &out[1..=n * sz], &what);
                        // dst == a.
                        let mut acc = ab.clone();
                        let p = acc.as_mut_ptr().wrapping_add(1);
                        // SAFETY: dst is exactly a.
                        unsafe { k(p, p, bb.as_ptr().add(1), n) };
                        assert_eq!(acc[1..], out[1..=n * sz], "dst == a, {what}");
                        // dst == b.
                        let mut acc = bb.clone();
                        let p = acc.as_mut_ptr().wrapping_add(1);
                        // SAFETY: dst is exactly b.
                        unsafe { k(p, ab.as_ptr().add(1), p, n) };
                        assert_eq!(acc[1..], out[1..=n * sz], "dst == b, {what}");
                    }
                }
            }
        }
    }

    #[test]
    fn dispatched_matches_baseline_bitwise() {
        let base = Kernels::build(Level::Baseline);
        let mut rng = Rng(0xfeed);
        let all = tables();
        for (best, dt, op) in all
            .iter()
            .chain([kernels()])
            .flat_map(|t| REDUCIBLE.map(|dt| (t, dt)))
            .flat_map(|(t, dt)| ReduceOp::ALL.map(|op| (t, dt, op)))
        {
            {
                let n = 10_007;
                let a = gen(&mut rng, dt, n);
                let b = gen(&mut rng, dt, n);
                let mut o1 = vec![0u8; a.len()];
                let mut o2 = vec![0u8; a.len()];
                // SAFETY: all buffers hold n elements.
                unsafe {
                    base.get(dt, op).unwrap()(o1.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n);
                    best.get(dt, op).unwrap()(o2.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n);
                }
                for (i, (x, y)) in o1.chunks(dt.size()).zip(o2.chunks(dt.size())).enumerate() {
                    if is_nan_elem(dt, x) && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
                        assert!(is_nan_elem(dt, y), "{dt:?} {op:?} [{i}]");
                    } else {
                        assert_eq!(x, y, "{dt:?} {op:?} [{i}] {}", best.level.name());
                    }
                }
            }
        }
    }

    #[test]
    fn integer_wrapping_and_extremes() {
        let run = |dt, op, a: &[u8], b: &[u8]| {
            let mut out = vec![0u8; a.len()];
            reduce_into(dt, op, &mut out, a, b).unwrap();
            out
        };
        let b = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        assert_eq!(
            run(DataType::Int64, ReduceOp::Sum, &b(&[i64::MAX]), &b(&[1])),
            b(&[i64::MIN])
        );
        assert_eq!(
            run(DataType::Int64, ReduceOp::Prod, &b(&[i64::MAX]), &b(&[2])),
            b(&[-2])
        );
        assert_eq!(run(DataType::Int8, ReduceOp::Sum, &[127], &[1]), [0x80]);
        assert_eq!(
            run(DataType::Int8, ReduceOp::Prod, &[0x80], &[0xff]),
            [0x80]
        );
        assert_eq!(run(DataType::Int8, ReduceOp::Max, &[0x80], &[0x7f]), [0x7f]);
        assert_eq!(
            run(DataType::Uint8, ReduceOp::Max, &[0x80], &[0x7f]),
            [0x80]
        );
        assert_eq!(run(DataType::Uint8, ReduceOp::Sum, &[200], &[100]), [44]);
        let u = |v: u64| v.to_le_bytes();
        assert_eq!(
            run(DataType::Uint64, ReduceOp::Prod, &u(u64::MAX), &u(u64::MAX)),
            u(1)
        );
        assert_eq!(
            run(DataType::Uint64, ReduceOp::Min, &u(u64::MAX), &u(1 << 63)),
            u(1 << 63)
        );
        let w = |v: i32| v.to_le_bytes();
        assert_eq!(
            run(DataType::Int32, ReduceOp::Min, &w(-1), &w(i32::MAX)),
            w(-1)
        );
        assert_eq!(
            run(DataType::Uint32, ReduceOp::Min, &w(-1), &w(i32::MAX)),
            w(i32::MAX)
        );
        let s = |v: i16| v.to_le_bytes();
        assert_eq!(
            run(DataType::Int16, ReduceOp::Prod, &s(300), &s(300)),
            s(300i16.wrapping_mul(300))
        );
    }

    #[test]
    fn float_nan_and_signed_zero() {
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let q = f32::from_bits(0x7fc0_0001);
        let q2 = f32::from_bits(0xffc0_0002);
        let a = f(&[q, 1.0, q, 0.0, -0.0, 1.0, f32::NEG_INFINITY]);
        let b = f(&[1.0, q, q2, -0.0, 0.0, 2.0, f32::INFINITY]);
        let mut out = vec![0u8; a.len()];
        reduce_into(DataType::Fp32, ReduceOp::Max, &mut out, &a, &b).unwrap();
        assert_eq!(out, f(&[q, q, q, 0.0, -0.0, 2.0, f32::INFINITY]));
        reduce_into(DataType::Fp32, ReduceOp::Min, &mut out, &a, &b).unwrap();
        assert_eq!(out, f(&[q, q, q, 0.0, -0.0, 1.0, f32::NEG_INFINITY]));
        reduce_into(DataType::Fp32, ReduceOp::Sum, &mut out, &a, &b).unwrap();
        let r: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(r[0].is_nan() && r[1].is_nan() && r[2].is_nan() && r[6].is_nan());
        assert_eq!(r[3].to_bits(), 0);

        let d = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let a = d(&[f64::NAN, 3.0, -0.0]);
        let b = d(&[4.0, f64::NAN, 0.0]);
        let mut out = vec![0u8; a.len()];
        reduce_into(DataType::Fp64, ReduceOp::Min, &mut out, &a, &b).unwrap();
        assert_eq!(out, d(&[f64::NAN, f64::NAN, -0.0]));

        // Halves: max/min return the original bits, NaN wins, ties keep `a`.
        for dt in [DataType::Fp16, DataType::Bf16] {
            let nan: u16 = if dt == DataType::Fp16 { 0x7c01 } else { 0x7f81 };
            let h = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            let a = h(&[nan, 0x0000, 0x8000, 0x3c00]);
            let b = h(&[0x3c00, nan, 0x0000, 0xbc00]);
            let mut out = vec![0u8; a.len()];
            reduce_into(dt, ReduceOp::Max, &mut out, &a, &b).unwrap();
            assert_eq!(out, h(&[nan, nan, 0x8000, 0x3c00]), "{dt:?}");
            reduce_into(dt, ReduceOp::Min, &mut out, &a, &b).unwrap();
            assert_eq!(out, h(&[nan, nan, 0x8000, 0xbc00]), "{dt:?}");
            reduce_into(dt, ReduceOp::Sum, &mut out, &a, &b).unwrap();
            let sums: Vec<u16> = out
                .chunks(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let exp_mask = if dt == DataType::Fp16 { 0x7c00 } else { 0x7f80 };
            assert!(sums[0] & exp_mask == exp_mask && sums[0] & !(exp_mask | 0x8000) != 0);
            assert_eq!(sums[2], 0x0000, "-0 + +0 = +0");
        }
        // fp16 sum overflowing to infinity and rounding in f32 then to half.
        let h = |v: u16| v.to_le_bytes();
        let mut out = [0u8; 2];
        reduce_into(
            DataType::Fp16,
            ReduceOp::Sum,
            &mut out,
            &h(0x7bff),
            &h(0x7bff),
        )
        .unwrap();
        assert_eq!(out, h(0x7c00));
        // 2048 + 1 is a tie in fp16: to even, 2048.
        reduce_into(
            DataType::Fp16,
            ReduceOp::Sum,
            &mut out,
            &h(0x6800),
            &h(0x3c00),
        )
        .unwrap();
        assert_eq!(out, h(0x6800));
    }

    #[test]
    fn safe_wrappers_validate() {
        let mut out = [0u8; 8];
        let a = [1u8; 8];
        let e = reduce_into(DataType::Fp32, ReduceOp::Sum, &mut out, &a, &a[..4]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        let e = reduce_into(
            DataType::Fp32,
            ReduceOp::Sum,
            &mut out[..6],
            &a[..6],
            &a[..6],
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        let e = reduce_inplace(DataType::Int64, ReduceOp::Max, &mut out[..4], &a[..4]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        let e = reduce_inplace(DataType::Int16, ReduceOp::Max, &mut out, &a[..6]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Para);
        for dt in DataType::ALL {
            for op in ReduceOp::ALL {
                let r = check_reducible(dt, op);
                assert_eq!(r.is_ok(), dt.reducible(), "{dt:?}");
                if let Err(e) = r {
                    assert_eq!(e.kind, ErrorKind::NotSupport);
                    assert!(
                        e.msg.contains(dt.name()) && e.msg.contains(op.name()),
                        "{e}"
                    );
                    let mut o = [0u8; 16];
                    let r = reduce_into(dt, op, &mut o, &[0; 16], &[0; 16]);
                    assert_eq!(r.unwrap_err().kind, ErrorKind::NotSupport);
                }
            }
        }
        // Empty buffers are fine.
        reduce_into(DataType::Fp16, ReduceOp::Sum, &mut [], &[], &[]).unwrap();
        // In place.
        let mut acc = 5i32.to_le_bytes();
        reduce_inplace(
            DataType::Int32,
            ReduceOp::Prod,
            &mut acc,
            &7i32.to_le_bytes(),
        )
        .unwrap();
        assert_eq!(i32::from_le_bytes(acc), 35);
        assert!(!kernel_description().is_empty());
    }
}
