//! Compression kernels for compressed AllReduce: f32 values in, a self-describing byte block
//! ("blob") out, and back, accumulating in f32.
//!
//! A blob is a 16-byte header (method tag, method parameter, element count, little-endian)
//! followed by the payload:
//! - fp16 / bf16: one 2-byte value per element, rounded to nearest even;
//! - int8: one f32 scale per block of `block` elements (absmax / 127), then one signed byte
//!   per element, `round_ties_even(x · 127 / absmax)`. Absmax keeps every value of the block in
//!   range, needs no search, and costs 4 bytes per block (1.6% at the default 256); a block
//!   holding a NaN or an infinity decodes as NaN, so bad input stays visible;
//! - top-k: the `k = ceil(ratio · n)` elements of largest magnitude (ties broken by lower
//!   index), as k u32 indices in increasing order, then their k f32 values, exact. They are
//!   selected in one streaming pass: a threshold guessed from a sample keeps a few times k
//!   candidates, and an exact selection among those picks k; when the guess fails, a radix
//!   selection over the whole input (three passes) gives the same k.
//!
//! The receiver checks the header against what it expects and top-k indices against the
//! element count, so a peer that disagrees on the method or sends garbage yields an error, never
//! wrong data. Decoding adds into an f32 accumulator with one rounding per addition (never a
//! fused multiply-add), so every instruction-set level gives bit-identical results; the levels
//! are the same bodies compiled for baseline x86_64, `avx2`, and `avx2,f16c` (fp16 through the
//! F16C instructions), plus `avx2,f16c` with int8 written for AVX-512 (`int8_avx512`), chosen
//! once per process at run time as the reduction kernels are.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
mod int8_avx512;
mod lines;

use super::reduce::{f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::base::compress::Method;
use crate::base::error::{Error, ErrorKind, Result};

/// Bytes of the blob header.
pub const HEADER: usize = 16;

/// Lanes per conversion group.
const L: usize = 8;

/// Elements kept by top-k with `ratio` out of `n`: `ceil(ratio · n)`, at least 1 when `n > 0`.
pub fn topk_count(ratio: f32, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    // The ratio is an f32 near a decimal (0.01, 0.3): shave its representation error
    // (relative 2^-24) off so that 0.3 of 10 is 3, not 4.
    let t = f64::from(ratio) * n as f64;
    ((t - t * 1.2e-7).ceil() as usize).clamp(1, n)
}

/// The method's code in the header tag, and its parameter for `n` elements.
fn tag_and_param(m: Method, n: usize) -> (u32, u32) {
    const MAGIC: u32 = 0x485a_0000;
    match m {
        Method::Fp16 => (MAGIC | 1, 0),
        Method::Bf16 => (MAGIC | 2, 0),
        Method::Int8 { block } => (MAGIC | 3, block),
        Method::TopK { ratio } => (MAGIC | 4, topk_count(ratio, n) as u32),
    }
}

/// Bytes of the blob for `n` elements with method `m`, header included.
pub fn blob_len(m: Method, n: usize) -> usize {
    HEADER
        + match m {
            Method::Fp16 | Method::Bf16 => 2 * n,
            Method::Int8 { block } => 4 * n.div_ceil(block as usize) + n,
            Method::TopK { ratio } => 8 * topk_count(ratio, n),
        }
}

/// Largest element count a blob may describe (top-k indices are u32).
pub const MAX_ELEMS: usize = u32::MAX as usize;

fn header(m: Method, n: usize) -> [u8; HEADER] {
    let (tag, param) = tag_and_param(m, n);
    let mut h = [0u8; HEADER];
    h[0..4].copy_from_slice(&tag.to_le_bytes());
    h[4..8].copy_from_slice(&param.to_le_bytes());
    h[8..16].copy_from_slice(&(n as u64).to_le_bytes());
    h
}

/// Checks a received blob's header and length against method `m` and `n` elements.
fn check_blob(m: Method, n: usize, blob: &[u8]) -> Result<()> {
    let want = header(m, n);
    if blob.len() != blob_len(m, n) || blob[..HEADER] != want {
        let got = |r: std::ops::Range<usize>| {
            blob.get(r)
                .map(|b| b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
        };
        return Err(Error::new(
            ErrorKind::Para,
            format!(
                "compressed block does not match this rank's call: expected {m} over {n} \
                 elements ({} bytes), got tag {:#x?} parameter {:?} count {:?} ({} bytes) — \
                 do all ranks pass the same method and count?",
                blob_len(m, n),
                got(0..4),
                got(4..8),
                got(8..16),
                blob.len()
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Generic bodies (safe code; the levels below compile them for different target features).
// ---------------------------------------------------------------------------------------------

/// Decoding modes: [`ADD`] `acc + d`, [`SUB`] `acc − d` (the residual, `acc` holding the
/// encoded values), [`SET`] `d` (the first block of a sum, saving a zeroing pass; `0 + d` so
/// that the result is the same as adding to zeros, -0 included).
const ADD: u8 = 0;
/// See [`ADD`].
const SUB: u8 = 1;
/// See [`ADD`].
const SET: u8 = 2;

#[inline(always)]
fn mode<const MODE: u8>(a: f32, d: f32) -> f32 {
    match MODE {
        ADD => a + d,
        SUB => a - d,
        _ => 0.0 + d,
    }
}

/// Half-precision conversion of 8 lanes.
trait Half {
    /// # Safety
    /// The CPU must support the implementation's instructions.
    unsafe fn narrow(x: &[f32; L]) -> [u16; L];
    /// # Safety
    /// As `narrow`.
    unsafe fn widen(h: &[u16; L]) -> [f32; L];
}

struct SoftF16;
struct SoftBf16;

impl Half for SoftF16 {
    #[inline(always)]
    unsafe fn narrow(x: &[f32; L]) -> [u16; L] {
        let mut o = [0u16; L];
        for (o, &f) in o.iter_mut().zip(x) {
            *o = f32_to_f16(f);
        }
        o
    }
    #[inline(always)]
    unsafe fn widen(h: &[u16; L]) -> [f32; L] {
        let mut o = [0f32; L];
        for (o, &v) in o.iter_mut().zip(h) {
            *o = f16_to_f32(v);
        }
        o
    }
}

impl Half for SoftBf16 {
    #[inline(always)]
    unsafe fn narrow(x: &[f32; L]) -> [u16; L] {
        let mut o = [0u16; L];
        for (o, &f) in o.iter_mut().zip(x) {
            *o = f32_to_bf16(f);
        }
        o
    }
    #[inline(always)]
    unsafe fn widen(h: &[u16; L]) -> [f32; L] {
        let mut o = [0f32; L];
        for (o, &v) in o.iter_mut().zip(h) {
            // A plain shift, without `bf16_to_f32`'s quieting: a widened value only feeds an
            // f32 addition or subtraction, which quiets a signalling NaN by itself.
            *o = f32::from_bits(u32::from(v) << 16);
        }
        o
    }
}

/// fp16 through F16C; only instantiated in functions compiled with `f16c`, only called after
/// run-time detection.
#[cfg(target_arch = "x86_64")]
struct HwF16;

#[cfg(target_arch = "x86_64")]
impl Half for HwF16 {
    #[inline(always)]
    unsafe fn narrow(x: &[f32; L]) -> [u16; L] {
        use std::arch::x86_64::{
            __m128i, _mm256_cvtps_ph, _mm256_loadu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
        };
        let mut o = [0u16; L];
        // SAFETY: 8 f32 in, 8 u16 out, unaligned accesses; f16c is the caller's contract. The
        // immediate selects round-to-nearest-even whatever MXCSR says.
        unsafe {
            let v = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.as_ptr()));
            _mm_storeu_si128(o.as_mut_ptr().cast::<__m128i>(), v);
        }
        o
    }
    #[inline(always)]
    unsafe fn widen(h: &[u16; L]) -> [f32; L] {
        use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
        let mut o = [0f32; L];
        // SAFETY: as in `narrow`.
        unsafe {
            _mm256_storeu_ps(
                o.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast::<__m128i>())),
            );
        }
        o
    }
}

#[inline(always)]
fn load_u16(b: &[u8]) -> [u16; L] {
    let mut o = [0u16; L];
    for (o, c) in o.iter_mut().zip(b.chunks_exact(2)) {
        *o = u16::from_le_bytes([c[0], c[1]]);
    }
    o
}

/// `out` (2 bytes per element) = `x` narrowed.
///
/// # Safety
/// The CPU must support `C`'s instructions.
#[inline(always)]
unsafe fn half_encode<C: Half>(x: &[f32], out: &mut [u8]) {
    let mut xi = x.chunks_exact(L);
    let mut oi = out.chunks_exact_mut(2 * L);
    for (xs, os) in (&mut xi).zip(&mut oi) {
        let a: &[f32; L] = xs.try_into().expect("chunk of L");
        // SAFETY: forwarded to the caller.
        let h = unsafe { C::narrow(a) };
        for (o, v) in os.chunks_exact_mut(2).zip(h) {
            o.copy_from_slice(&v.to_le_bytes());
        }
    }
    let (xs, os) = (xi.remainder(), oi.into_remainder());
    if !xs.is_empty() {
        let mut a = [0f32; L];
        a[..xs.len()].copy_from_slice(xs);
        // SAFETY: forwarded to the caller.
        let h = unsafe { C::narrow(&a) };
        for (o, v) in os.chunks_exact_mut(2).zip(h) {
            o.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// `acc = apply(MODE, acc, widen(payload))` (see [`mode`]).
///
/// # Safety
/// The CPU must support `C`'s instructions.
#[inline(always)]
unsafe fn half_apply<C: Half, const MODE: u8>(payload: &[u8], acc: &mut [f32]) {
    let mut pi = payload.chunks_exact(2 * L);
    let mut ai = acc.chunks_exact_mut(L);
    for (ps, a) in (&mut pi).zip(&mut ai) {
        // SAFETY: forwarded to the caller.
        let w = unsafe { C::widen(&load_u16(ps)) };
        for (a, w) in a.iter_mut().zip(w) {
            *a = mode::<MODE>(*a, w);
        }
    }
    let (ps, a) = (pi.remainder(), ai.into_remainder());
    if !a.is_empty() {
        let mut p = [0u8; 2 * L];
        p[..ps.len()].copy_from_slice(ps);
        // SAFETY: forwarded to the caller.
        let w = unsafe { C::widen(&load_u16(&p)) };
        for (a, w) in a.iter_mut().zip(w) {
            *a = mode::<MODE>(*a, w);
        }
    }
}

/// Largest |x| of a block as f32 bits (integer order equals magnitude order; NaN is largest).
#[inline(always)]
fn absmax_bits(x: &[f32]) -> u32 {
    let mut m = [0u32; L];
    let mut it = x.chunks_exact(L);
    for c in &mut it {
        for (m, &v) in m.iter_mut().zip(c) {
            *m = (*m).max(v.to_bits() & 0x7fff_ffff);
        }
    }
    let mut r = m.into_iter().max().unwrap_or(0);
    for &v in it.remainder() {
        r = r.max(v.to_bits() & 0x7fff_ffff);
    }
    r
}

/// 1.5 · 2^23: adding it to |v| ≤ 2^22 makes the FPU round v to an integer, ties to even, and
/// leaves that integer in the low mantissa bits (exact on every level, unlike a library call).
const RNE_SHIFT: f32 = 12_582_912.0;

/// Scale and inverse scale of a block whose largest magnitude has bits `amax`.
#[inline(always)]
fn int8_scale(amax: u32) -> (f32, f32) {
    let a = f32::from_bits(amax);
    if amax >= 0x7f80_0000 {
        (f32::NAN, 0.0)
    } else if amax == 0 {
        (0.0, 0.0)
    } else {
        (a / 127.0, 127.0 / a)
    }
}

/// Quantises `x` into `scales` (4 bytes per block) and `q` (1 byte per element).
#[inline(always)]
fn int8_encode(x: &[f32], block: usize, scales: &mut [u8], q: &mut [u8]) {
    for ((xb, qb), s) in x
        .chunks(block)
        .zip(q.chunks_mut(block))
        .zip(scales.chunks_exact_mut(4))
    {
        let (scale, inv) = int8_scale(absmax_bits(xb));
        s.copy_from_slice(&scale.to_le_bytes());
        for (o, &v) in qb.iter_mut().zip(xb) {
            // Clamped first (the bounds are integers, so this equals rounding first), then
            // rounded by adding 1.5 · 2^23: the sum's low byte is the integer in two's
            // complement. A NaN gives some byte; its block's NaN scale decodes it as NaN.
            let r = v * inv;
            let r = if r > 127.0 { 127.0 } else { r };
            let r = if r < -127.0 { -127.0 } else { r };
            *o = (r + RNE_SHIFT).to_bits() as u8;
        }
    }
}

/// `acc = apply(MODE, acc, dequantised)` (see [`mode`]).
#[inline(always)]
fn int8_apply<const MODE: u8>(scales: &[u8], q: &[u8], block: usize, acc: &mut [f32]) {
    for ((ab, qb), s) in acc
        .chunks_mut(block)
        .zip(q.chunks(block))
        .zip(scales.chunks_exact(4))
    {
        let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        for (a, &v) in ab.iter_mut().zip(qb) {
            let d = f32::from(v as i8) * scale;
            *a = mode::<MODE>(*a, d);
        }
    }
}

/// Magnitude bits of an f32 (integer order equals magnitude order; NaN above infinity).
const MAG: u32 = 0x7fff_ffff;

/// Appends `(index, bits)` of the elements of `x` whose magnitude bits exceed `t`, and of the
/// first `ties` (in index order) equal to it, in index order; gives up (false) once more than
/// `limit` exceed `t`. Blocks of 16 are tested with one vectorised maximum first, since most
/// hold no candidate.
#[inline(always)]
fn topk_collect(x: &[f32], t: u32, limit: usize, ties: usize, out: &mut Vec<(u32, u32)>) -> bool {
    const B: usize = 16;
    let mut n = [0usize; 2];
    let mut blocks = x.chunks_exact(B);
    let mut base = 0u32;
    for c in &mut blocks {
        let c: &[f32; B] = c.try_into().expect("block of B");
        let top = c.iter().fold(0u32, |a, v| a.max(v.to_bits() & MAG));
        // Once `ties` equal ones are in, only larger ones matter.
        if top > t || (top == t && n[1] < ties) {
            collect_from(c, base, t, ties, &mut n, out);
            if n[0] > limit {
                return false;
            }
        }
        base += B as u32;
    }
    collect_from(blocks.remainder(), base, t, ties, &mut n, out);
    n[0] <= limit
}

/// [`topk_collect`] of `a + b` (f32 sums), or with `res` of `res += a + b` (every element of
/// `res` is updated, whether the collection succeeds or not).
#[inline(always)]
fn topk_sum_collect(
    a: &[f32],
    b: &[f32],
    mut res: Option<&mut [f32]>,
    t: u32,
    limit: usize,
    ties: usize,
    out: &mut Vec<(u32, u32)>,
) -> bool {
    const B: usize = 16;
    let mut n = [0usize; 2];
    let full = a.len() / B * B;
    let mut collecting = true;
    let mut v = [0f32; B];
    for i in (0..full).step_by(B) {
        let x: &[f32; B] = a[i..i + B].try_into().expect("block of B");
        let y: &[f32; B] = b[i..i + B].try_into().expect("block of B");
        match res.as_deref_mut() {
            Some(r) => {
                let r: &mut [f32; B] = (&mut r[i..i + B]).try_into().expect("block of B");
                for ((r, x), y) in r.iter_mut().zip(x).zip(y) {
                    *r += x + y;
                }
                v = *r;
            }
            None => {
                for ((v, x), y) in v.iter_mut().zip(x).zip(y) {
                    *v = x + y;
                }
            }
        }
        if !collecting {
            continue;
        }
        let top = v.iter().fold(0u32, |m, x| m.max(x.to_bits() & MAG));
        if top > t || (top == t && n[1] < ties) {
            collect_from(&v, i as u32, t, ties, &mut n, out);
            if n[0] > limit {
                if res.is_none() {
                    return false;
                }
                collecting = false;
            }
        }
    }
    let mut tail = [0f32; B];
    let w = a.len() - full;
    for (j, (x, y)) in a[full..].iter().zip(&b[full..]).enumerate() {
        tail[j] = match res.as_deref_mut() {
            Some(r) => {
                r[full + j] += x + y;
                r[full + j]
            }
            None => x + y,
        };
    }
    if collecting {
        collect_from(&tail[..w], full as u32, t, ties, &mut n, out);
    }
    collecting && n[0] <= limit
}

/// [`topk_collect`]'s scalar part over `c` (elements from `base`): `n` counts the elements
/// above `t` and those equal to it taken so far.
#[inline(always)]
fn collect_from(
    c: &[f32],
    base: u32,
    t: u32,
    ties: usize,
    n: &mut [usize; 2],
    out: &mut Vec<(u32, u32)>,
) {
    for (j, &v) in c.iter().enumerate() {
        let b = v.to_bits() & MAG;
        if b > t || (b == t && n[1] < ties) {
            n[usize::from(b == t)] += 1;
            out.push((base + j as u32, v.to_bits()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Levels.
// ---------------------------------------------------------------------------------------------

type HalfEncode = unsafe fn(&[f32], &mut [u8]);
type HalfApply = unsafe fn(&[u8], &mut [f32]);
type Int8Encode = unsafe fn(&[f32], usize, &mut [u8], &mut [u8]);
type Int8Apply = unsafe fn(&[u8], &[u8], usize, &mut [f32]);
type TopkCollect = unsafe fn(&[f32], u32, usize, usize, &mut Vec<(u32, u32)>) -> bool;
type TopkSumCollect =
    unsafe fn(&[f32], &[f32], Option<&mut [f32]>, u32, usize, usize, &mut Vec<(u32, u32)>) -> bool;

/// One level's kernels.
struct Kernels {
    name: &'static str,
    f16_encode: HalfEncode,
    f16_add: HalfApply,
    f16_sub: HalfApply,
    f16_set: HalfApply,
    bf16_encode: HalfEncode,
    bf16_add: HalfApply,
    bf16_sub: HalfApply,
    bf16_set: HalfApply,
    int8_encode: Int8Encode,
    int8_add: Int8Apply,
    int8_sub: Int8Apply,
    int8_set: Int8Apply,
    topk_collect: TopkCollect,
    topk_sum_collect: TopkSumCollect,
}

/// The level functions of one set of target features: `$feat` empty for the baseline.
macro_rules! level {
    ($modname:ident, $f16:ty, [$($feat:literal)?]) => {
        mod $modname {
            use super::*;
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn f16_encode(x: &[f32], o: &mut [u8]) {
                // SAFETY: the level is only chosen when its features were detected.
                unsafe { half_encode::<$f16>(x, o) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn f16_add(p: &[u8], a: &mut [f32]) {
                // SAFETY: as above.
                unsafe { half_apply::<$f16, ADD>(p, a) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn f16_sub(p: &[u8], a: &mut [f32]) {
                // SAFETY: as above.
                unsafe { half_apply::<$f16, SUB>(p, a) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn f16_set(p: &[u8], a: &mut [f32]) {
                // SAFETY: as above.
                unsafe { half_apply::<$f16, SET>(p, a) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn bf16_encode(x: &[f32], o: &mut [u8]) {
                // SAFETY: soft conversions need no feature.
                unsafe { half_encode::<SoftBf16>(x, o) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn bf16_add(p: &[u8], a: &mut [f32]) {
                // SAFETY: as above.
                unsafe { half_apply::<SoftBf16, ADD>(p, a) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn bf16_sub(p: &[u8], a: &mut [f32]) {
                // SAFETY: as above.
                unsafe { half_apply::<SoftBf16, SUB>(p, a) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn bf16_set(p: &[u8], a: &mut [f32]) {
                // SAFETY: as above.
                unsafe { half_apply::<SoftBf16, SET>(p, a) }
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn int8_encode(x: &[f32], b: usize, s: &mut [u8], q: &mut [u8]) {
                super::int8_encode(x, b, s, q)
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn int8_add(s: &[u8], q: &[u8], b: usize, a: &mut [f32]) {
                super::int8_apply::<ADD>(s, q, b, a)
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn int8_sub(s: &[u8], q: &[u8], b: usize, a: &mut [f32]) {
                super::int8_apply::<SUB>(s, q, b, a)
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn int8_set(s: &[u8], q: &[u8], b: usize, a: &mut [f32]) {
                super::int8_apply::<SET>(s, q, b, a)
            }
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn topk_collect(
                x: &[f32],
                t: u32,
                limit: usize,
                ties: usize,
                out: &mut Vec<(u32, u32)>,
            ) -> bool {
                super::topk_collect(x, t, limit, ties, out)
            }
            #[allow(clippy::too_many_arguments)]
            $(#[target_feature(enable = $feat)])?
            pub unsafe fn topk_sum_collect(
                a: &[f32],
                b: &[f32],
                res: Option<&mut [f32]>,
                t: u32,
                limit: usize,
                ties: usize,
                out: &mut Vec<(u32, u32)>,
            ) -> bool {
                super::topk_sum_collect(a, b, res, t, limit, ties, out)
            }
            pub fn kernels(name: &'static str) -> Kernels {
                Kernels {
                    name,
                    f16_encode,
                    f16_add,
                    f16_sub,
                    f16_set,
                    bf16_encode,
                    bf16_add,
                    bf16_sub,
                    bf16_set,
                    int8_encode,
                    int8_add,
                    int8_sub,
                    int8_set,
                    topk_collect,
                    topk_sum_collect,
                }
            }
        }
    };
}

level!(baseline, SoftF16, []);
#[cfg(target_arch = "x86_64")]
level!(avx2, SoftF16, ["avx2"]);
#[cfg(target_arch = "x86_64")]
level!(avx2_f16c, HwF16, ["avx2,f16c"]);

/// Every level this CPU can run, best last (tests compare them all).
fn available() -> Vec<Kernels> {
    #[allow(unused_mut)]
    let mut v = vec![baseline::kernels("baseline")];
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") {
            v.push(avx2::kernels("avx2"));
            if is_x86_feature_detected!("f16c") {
                v.push(avx2_f16c::kernels("avx2+f16c"));
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                {
                    v.push(Kernels {
                        int8_encode: int8_avx512::int8_encode,
                        int8_add: int8_avx512::int8_add,
                        int8_sub: int8_avx512::int8_sub,
                        int8_set: int8_avx512::int8_set,
                        ..avx2_f16c::kernels("avx2+f16c, int8 avx512")
                    });
                }
            }
        }
    }
    v
}

fn kernels() -> &'static Kernels {
    static K: OnceLock<Kernels> = OnceLock::new();
    K.get_or_init(|| available().pop().expect("baseline level"))
}

/// The kernel level chosen on this CPU, for logs and benchmarks.
pub fn kernel_description() -> &'static str {
    kernels().name
}

// ---------------------------------------------------------------------------------------------
// Public operations.
// ---------------------------------------------------------------------------------------------

/// Work memory of top-k selection, kept between calls.
#[derive(Default)]
pub struct Scratch {
    hist: Vec<usize>,
    /// Top-k candidates: (index, f32 bits).
    cand: Vec<(u32, u32)>,
    /// Magnitudes of a sample or of the candidates.
    mags: Vec<u32>,
}

/// Encodes `x` with method `m` into `out` (exactly [`blob_len`]`(m, x.len())` bytes).
pub fn compress(m: Method, x: &[f32], out: &mut [u8], scratch: &mut Scratch) {
    compress_with(kernels(), m, x, out, scratch)
}

fn compress_with(k: &Kernels, m: Method, x: &[f32], out: &mut [u8], scratch: &mut Scratch) {
    let n = x.len();
    assert!(n <= MAX_ELEMS, "blob of {n} elements");
    assert_eq!(out.len(), blob_len(m, n), "blob buffer size");
    let (h, body) = out.split_at_mut(HEADER);
    h.copy_from_slice(&header(m, n));
    match m {
        Method::Fp16 => {
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            unsafe { (k.f16_encode)(x, body) }
        }
        Method::Bf16 => {
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            unsafe { (k.bf16_encode)(x, body) }
        }
        Method::Int8 { block } => {
            let (s, q) = body.split_at_mut(4 * n.div_ceil(block as usize));
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            unsafe { (k.int8_encode)(x, block as usize, s, q) }
        }
        Method::TopK { ratio } => {
            let kk = topk_count(ratio, n);
            if kk == 0 {
                return;
            }
            let (idx, val) = body.split_at_mut(4 * kk);
            if topk_sampled(k, x, kk, scratch) {
                let (t, above) = kth_of_candidates(&scratch.cand, kk, &mut scratch.mags);
                emit(scratch.cand.iter().copied(), t, kk - above, idx, val);
            } else {
                let (t, above) = kth_largest_magnitude(x, kk, scratch);
                let all = x.iter().enumerate().map(|(i, v)| (i as u32, v.to_bits()));
                emit(all, t, kk - above, idx, val);
            }
        }
    }
}

/// Writes the top-k selection to `idx` and `val`: of `elems` (index, f32 bits) in index order,
/// those whose magnitude bits exceed `t`, and the first `ties` of those equal to it.
fn emit(
    elems: impl Iterator<Item = (u32, u32)>,
    t: u32,
    mut ties: usize,
    idx: &mut [u8],
    val: &mut [u8],
) {
    let mut slots = idx.chunks_exact_mut(4).zip(val.chunks_exact_mut(4));
    for (i, v) in elems {
        let b = v & MAG;
        if b > t || (b == t && ties > 0) {
            if b == t {
                ties -= 1;
            }
            let (si, sv) = slots.next().expect("exactly k selected");
            si.copy_from_slice(&i.to_le_bytes());
            sv.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Elements sampled to guess a top-k threshold.
const SAMPLE: usize = 2048;

/// Samples per run: a run of consecutive elements is one or two cache lines, so the sample
/// costs a few hundred memory accesses, and it sees every phase of short periodic patterns.
const SAMPLE_RUN: usize = 16;

/// Where the `j`-th of [`SAMPLE`] samples of `n` (at least `SAMPLE`) elements is taken: in run
/// `j / SAMPLE_RUN`, which starts at a hashed offset within its stretch of the elements.
fn sample_at(j: usize, n: usize) -> usize {
    run_start(j / SAMPLE_RUN, n) + j % SAMPLE_RUN
}

/// Where run `r` of the sample of `n` elements starts.
fn run_start(r: usize, n: usize) -> usize {
    let runs = (SAMPLE / SAMPLE_RUN) as u64;
    let r = r as u64;
    let h = r.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    let start = ((r * n as u64 + h % n as u64) / runs) as usize;
    start.min(n - SAMPLE_RUN)
}

/// Asks for the cache lines of run `r..r + SAMPLE_RUN` of `x` ahead of reading them: the
/// sample's runs lie far apart, each a cache (and often a TLB) miss, and read one after the
/// other those misses would not overlap.
#[inline(always)]
fn prefetch_run(x: &[f32], r: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in [r, r + SAMPLE_RUN - 1] {
        if let Some(v) = x.get(i) {
            // SAFETY: SSE is part of x86_64; a prefetch never faults, and the address is
            // inside `x` anyway.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    (v as *const f32).cast(),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, r);
}

/// Collects into `scratch.cand` a superset of the `kk` largest magnitudes of `x` in index
/// order with one streaming pass, instead of the radix selection's three: every element above
/// a threshold `t` guessed from a sample, and the first `kk` equal to it (the kk-th largest is
/// at least `t` once that makes `kk`, and its ties go to the lowest indices, so this holds the
/// selection). `t` is the sample's order statistic at about twice the expected share plus a
/// margin; the sample is taken in short runs at scattered places, so that periodic data
/// cannot fool it. False
/// when the guess leaves fewer than `kk` candidates or far too many above `t`: the caller then
/// selects over all of `x`. Either way the selection is the same.
fn topk_sampled(k: &Kernels, x: &[f32], kk: usize, scratch: &mut Scratch) -> bool {
    let n = x.len();
    let Some(t) = guess_threshold(n, kk, |r| prefetch_run(x, r), |i| x[i].to_bits(), scratch)
    else {
        return false;
    };
    let limit = candidate_limit(n, kk);
    // SAFETY: `k` is a level this CPU supports (`available` detected its features).
    let ok = unsafe { (k.topk_collect)(x, t, limit, kk, &mut scratch.cand) };
    ok && scratch.cand.len() >= kk
}

/// Most candidates above the threshold [`topk_sampled`] accepts.
fn candidate_limit(n: usize, kk: usize) -> usize {
    4 * kk + n / 64
}

/// [`topk_sampled`]'s threshold for the `kk` largest of `n` elements whose f32 bits `at`
/// gives (`prefetch(i)` is called first for the start `i` of every run of the sample), with `scratch.cand` emptied and reserved; `None` when `n` is too small or `kk` too
/// large a share for a sample to pay off.
fn guess_threshold(
    n: usize,
    kk: usize,
    prefetch: impl Fn(usize),
    at: impl Fn(usize) -> u32,
    scratch: &mut Scratch,
) -> Option<u32> {
    if n < 16 * SAMPLE || kk * 16 > n {
        return None;
    }
    for r in 0..SAMPLE / SAMPLE_RUN {
        prefetch(run_start(r, n));
    }
    let sample = &mut scratch.mags;
    sample.clear();
    sample.extend((0..SAMPLE).map(|j| at(sample_at(j, n)) & MAG));
    let expect = kk * SAMPLE / n;
    let j = (2 * expect + 16).min(SAMPLE);
    let t = *sample.select_nth_unstable_by(j - 1, |a, b| b.cmp(a)).1;
    scratch.cand.clear();
    scratch.cand.reserve(candidate_limit(n, kk) + kk + 16);
    Some(t)
}

/// Top-k (`ratio`) compression of `x = a + b`, the f32 sums of two level0 contributions, into
/// `out`, the same blob as [`compress`] of `x` gives; with error feedback (`res`), of
/// `res += x` instead, which the caller then turns into its residual with [`residual`]. The
/// sums are formed in the candidate pass and never stored (without `res`), so a level0 sum
/// costs one read of each input; `spill` (as long as `a`) receives them only when the
/// sampled threshold fails and the selection must see them all.
#[allow(clippy::too_many_arguments)]
pub fn compress_topk_of_sum(
    ratio: f32,
    a: &[f32],
    b: &[f32],
    mut res: Option<&mut [f32]>,
    spill: &mut [f32],
    out: &mut [u8],
    scratch: &mut Scratch,
) {
    let k = kernels();
    let n = a.len();
    assert!(b.len() == n && spill.len() == n && res.as_ref().is_none_or(|r| r.len() == n));
    let m = Method::TopK { ratio };
    let kk = topk_count(ratio, n);
    let value = |r: &Option<&mut [f32]>, i: usize| {
        let x = a[i] + b[i];
        match r {
            Some(r) => (r[i] + x).to_bits(),
            None => x.to_bits(),
        }
    };
    let mut summed = false;
    if kk > 0 {
        let prefetch = |r: usize| {
            prefetch_run(a, r);
            prefetch_run(b, r);
            if let Some(res) = &res {
                prefetch_run(res, r);
            }
        };
        if let Some(t) = guess_threshold(n, kk, prefetch, |i| value(&res, i), scratch) {
            let limit = candidate_limit(n, kk);
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            let ok = unsafe {
                (k.topk_sum_collect)(a, b, res.as_deref_mut(), t, limit, kk, &mut scratch.cand)
            };
            summed = true;
            if ok && scratch.cand.len() >= kk {
                assert_eq!(out.len(), blob_len(m, n), "blob buffer size");
                let (h, body) = out.split_at_mut(HEADER);
                h.copy_from_slice(&header(m, n));
                let (idx, val) = body.split_at_mut(4 * kk);
                let (t, above) = kth_of_candidates(&scratch.cand, kk, &mut scratch.mags);
                emit(scratch.cand.iter().copied(), t, kk - above, idx, val);
                return;
            }
        }
    }
    let x: &[f32] = match res {
        Some(r) => {
            if !summed {
                for ((r, x), y) in r.iter_mut().zip(a).zip(b) {
                    *r += x + y;
                }
            }
            r
        }
        None => {
            for ((s, x), y) in spill.iter_mut().zip(a).zip(b) {
                *s = x + y;
            }
            spill
        }
    };
    compress_with(k, m, x, out, scratch)
}

/// The magnitude bits of the `kk`-th largest of `cand`'s magnitudes (kk ≤ its length), and
/// how many are strictly larger.
fn kth_of_candidates(cand: &[(u32, u32)], kk: usize, mags: &mut Vec<u32>) -> (u32, usize) {
    mags.clear();
    mags.extend(cand.iter().map(|c| c.1 & MAG));
    let (larger, &mut t, _) = mags.select_nth_unstable_by(kk - 1, |a, b| b.cmp(a));
    // `larger` holds the kk − 1 largest, ties of t among them.
    let above = larger.iter().filter(|&&m| m > t).count();
    (t, above)
}

/// The magnitude bits of the `kk`-th largest |x| (1 ≤ kk ≤ x.len()), and how many elements
/// are strictly larger: a radix selection on the 31 magnitude bits, 11 + 11 + 9 bits a pass.
/// Each pass counts, among the elements whose higher bits equal the prefix found so far, the
/// values of the next bits, and keeps the bucket holding the kk-th largest. Three streaming
/// passes whatever the data (many equal values included, as in test patterns), with no copy.
fn kth_largest_magnitude(x: &[f32], kk: usize, scratch: &mut Scratch) -> (u32, usize) {
    const PASSES: [(u32, u32); 3] = [(20, 11), (9, 11), (0, 9)];
    let hist = &mut scratch.hist;
    let mut prefix = 0u32;
    let mut above = 0usize;
    for (i, &(shift, bits)) in PASSES.iter().enumerate() {
        hist.clear();
        hist.resize(1 << bits, 0);
        let mask = (1u32 << bits) - 1;
        // Bits above this pass's, which must equal the prefix found so far.
        let high = shift + bits;
        if i == 0 {
            for &v in x {
                hist[((v.to_bits() & 0x7fff_ffff) >> shift) as usize] += 1;
            }
        } else {
            for &v in x {
                let a = v.to_bits() & 0x7fff_ffff;
                if a >> high == prefix {
                    hist[((a >> shift) & mask) as usize] += 1;
                }
            }
        }
        let mut bucket = hist.len() - 1;
        while above + hist[bucket] < kk {
            above += hist[bucket];
            bucket -= 1;
        }
        prefix = (prefix << bits) | bucket as u32;
    }
    (prefix, above)
}

/// Adds the values `blob` encodes (method `m`, `acc.len()` elements) into `acc`, after checking
/// that the blob is what this rank expects.
pub fn decompress_add(m: Method, blob: &[u8], acc: &mut [f32]) -> Result<()> {
    apply_with(kernels(), m, blob, acc, ADD)
}

/// Overwrites `out` with `0 + decoded(blob)`: the same as [`decompress_add`] into zeros, in
/// one pass.
pub fn decompress_set(m: Method, blob: &[u8], out: &mut [f32]) -> Result<()> {
    apply_with(kernels(), m, blob, out, SET)
}

/// Turns `x` into the residual of its own encoding: `x − decoded(blob)`, where `blob` is
/// [`compress`]'s output for `x`.
pub fn residual(m: Method, blob: &[u8], x: &mut [f32]) -> Result<()> {
    apply_with(kernels(), m, blob, x, SUB)
}

/// Overwrites `out` with the sum of the values `blobs` encode (method `m`, `out.len()`
/// elements each), added in blob order into zeros: the same values as [`decompress_set`] of
/// the first blob followed by [`decompress_add`] of the others. Top-k blobs are merged and
/// every cache line of `out` is written once, with streaming stores (see `lines`); nothing
/// is written unless every blob is what this rank expects.
pub fn decompress_sum(m: Method, blobs: &[&[u8]], out: &mut [f32]) -> Result<()> {
    let Method::TopK { ratio } = m else {
        for (g, blob) in blobs.iter().enumerate() {
            let md = if g == 0 { SET } else { ADD };
            apply_with(kernels(), m, blob, out, md)?;
        }
        if blobs.is_empty() {
            out.fill(0.0);
        }
        return Ok(());
    };
    let n = out.len();
    let kk = topk_count(ratio, n);
    let mut sparse = Vec::with_capacity(blobs.len());
    for blob in blobs {
        check_blob(m, n, blob)?;
        let (idx, val) = blob[HEADER..].split_at(4 * kk);
        topk_indices_ok(idx, n)?;
        sparse.push(lines::Sparse::new(idx, val));
    }
    lines::write_sum(&mut sparse, out);
    Ok(())
}

/// Checks that top-k indices (little-endian u32) increase strictly and stay below `n`.
fn topk_indices_ok(idx: &[u8], n: usize) -> Result<()> {
    let mut next = 0usize;
    for i in idx.chunks_exact(4) {
        let i = u32::from_le_bytes([i[0], i[1], i[2], i[3]]) as usize;
        if i < next || i >= n {
            return Err(corrupt_index(i, n));
        }
        next = i + 1;
    }
    Ok(())
}

fn corrupt_index(i: usize, n: usize) -> Error {
    Error::new(
        ErrorKind::Para,
        format!("top-k block index {i} is out of order or beyond {n} elements (corrupt block)"),
    )
}

fn apply_with(k: &Kernels, m: Method, blob: &[u8], acc: &mut [f32], md: u8) -> Result<()> {
    let n = acc.len();
    check_blob(m, n, blob)?;
    let body = &blob[HEADER..];
    let half = |add, sub, set| match md {
        ADD => add,
        SUB => sub,
        _ => set,
    };
    match m {
        Method::Fp16 => {
            let f: HalfApply = half(k.f16_add, k.f16_sub, k.f16_set);
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            unsafe { f(body, acc) }
        }
        Method::Bf16 => {
            let f: HalfApply = half(k.bf16_add, k.bf16_sub, k.bf16_set);
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            unsafe { f(body, acc) }
        }
        Method::Int8 { block } => {
            let (s, q) = body.split_at(4 * n.div_ceil(block as usize));
            let f = match md {
                ADD => k.int8_add,
                SUB => k.int8_sub,
                _ => k.int8_set,
            };
            // SAFETY: `k` is a level this CPU supports (`available` detected its features).
            unsafe { f(s, q, block as usize, acc) }
        }
        Method::TopK { ratio } => {
            if md == SET {
                acc.fill(0.0);
            }
            let kk = topk_count(ratio, n);
            let (idx, val) = body.split_at(4 * kk);
            let mut next = 0usize;
            for (i, v) in idx.chunks_exact(4).zip(val.chunks_exact(4)) {
                let i = u32::from_le_bytes([i[0], i[1], i[2], i[3]]) as usize;
                if i < next || i >= n {
                    return Err(corrupt_index(i, n));
                }
                next = i + 1;
                let v = f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                // A kept value is exact, so its residual is exactly zero.
                acc[i] = if md == SUB { 0.0 } else { acc[i] + v };
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::reduce::bf16_to_f32;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// Values of every kind: normal, tiny, huge, halves' ties, zeros, NaN, infinities.
    fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
        let mut r = rng(seed);
        (0..n)
            .map(|i| {
                let u = r();
                if specials && u.is_multiple_of(97) {
                    [
                        f32::NAN,
                        f32::INFINITY,
                        -0.0,
                        1e-40,
                        65520.0,
                        1.0 + 2f32.powi(-11),
                    ][(u >> 8) as usize % 6]
                } else {
                    let m = ((u >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32;
                    m * 2f32.powi((i % 9) as i32 - 3)
                }
            })
            .collect()
    }

    /// The scalar reference: decoded values of `x` under `m`, written from the definitions.
    fn reference(m: Method, x: &[f32]) -> Vec<f32> {
        match m {
            Method::Fp16 => x.iter().map(|&v| f16_to_f32(f32_to_f16(v))).collect(),
            Method::Bf16 => x.iter().map(|&v| bf16_to_f32(f32_to_bf16(v))).collect(),
            Method::Int8 { block } => x
                .chunks(block as usize)
                .flat_map(|b| {
                    let amax = b.iter().fold(0f32, |a, v| {
                        if v.is_nan() || a.is_nan() {
                            f32::NAN
                        } else {
                            a.max(v.abs())
                        }
                    });
                    b.iter().map(move |&v| {
                        if !amax.is_finite() {
                            f32::NAN
                        } else if amax == 0.0 {
                            0.0
                        } else {
                            let q = (v * (127.0 / amax)).round_ties_even().clamp(-127.0, 127.0);
                            // An integer: no negative zero.
                            (q as i32 as f32) * (amax / 127.0)
                        }
                    })
                })
                .collect(),
            Method::TopK { ratio } => {
                let k = topk_count(ratio, x.len());
                let mut order: Vec<usize> = (0..x.len()).collect();
                // Stable sort: equal magnitudes keep index order.
                order.sort_by_key(|&i| std::cmp::Reverse(x[i].to_bits() & 0x7fff_ffff));
                let mut out = vec![0f32; x.len()];
                for &i in &order[..k] {
                    out[i] = x[i];
                }
                out
            }
        }
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    const METHODS: [Method; 9] = [
        Method::Fp16,
        Method::Bf16,
        Method::Int8 { block: 256 },
        Method::Int8 { block: 7 },
        Method::Int8 { block: 17 },
        Method::Int8 { block: 48 },
        Method::TopK { ratio: 0.01 },
        Method::TopK { ratio: 0.3 },
        Method::TopK { ratio: 1.0 },
    ];

    #[test]
    fn every_level_matches_the_scalar_reference() {
        let mut s = Scratch::default();
        for k in available() {
            for m in METHODS {
                for n in [0usize, 1, 7, 8, 9, 255, 256, 257, 1000, 4099] {
                    for specials in [false, true] {
                        // Top-k's reference ignores NaN ordering subtleties; keep it finite.
                        let specials = specials && !matches!(m, Method::TopK { .. });
                        let x = values(n, n as u64 * 31 + 7, specials);
                        let mut blob = vec![0u8; blob_len(m, n)];
                        compress_with(&k, m, &x, &mut blob, &mut s);
                        let mut dec = vec![0f32; n];
                        apply_with(&k, m, &blob, &mut dec, ADD).unwrap();
                        let mut set = vec![f32::NAN; n];
                        apply_with(&k, m, &blob, &mut set, SET).unwrap();
                        assert!(same_bits(&set, &dec), "{} {m} n={n} set", k.name);
                        let want = reference(m, &x);
                        // Decoding adds to a zero accumulator: -0 becomes +0.
                        let want0: Vec<f32> = want.iter().map(|d| 0.0 + d).collect();
                        assert!(same_bits(&dec, &want0), "{} {m} n={n}", k.name);
                        // The residual is x minus exactly what the peers decode.
                        let mut res = x.clone();
                        apply_with(&k, m, &blob, &mut res, SUB).unwrap();
                        if !matches!(m, Method::TopK { .. }) {
                            let want_res: Vec<f32> =
                                x.iter().zip(&want).map(|(v, d)| v - d).collect();
                            assert!(same_bits(&res, &want_res), "{} {m} n={n} residual", k.name);
                        }
                        // Adding is in f32, one rounding per element.
                        let mut acc: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
                        apply_with(&k, m, &blob, &mut acc, ADD).unwrap();
                        let want_acc: Vec<f32> = want
                            .iter()
                            .enumerate()
                            .map(|(i, d)| i as f32 * 0.25 + d)
                            .collect();
                        assert!(
                            same_bits(&acc, &want_acc),
                            "{} {m} n={n} accumulate",
                            k.name
                        );
                    }
                }
            }
        }
    }

    /// Every level writes the same int8 blob bytes as the baseline and decodes it to the same
    /// bits, for block sizes that are and are not multiples of the vector widths, tails of
    /// every length, special values, and values that round to ±127 and to ties.
    #[test]
    fn int8_blobs_and_decodes_are_byte_identical_across_levels() {
        let levels = available();
        let base = &levels[0];
        let mut s = Scratch::default();
        for block in [
            1u32, 2, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 100, 255, 256, 257, 1024,
        ] {
            let m = Method::Int8 { block };
            for n in [1usize, 15, 16, 17, 33, 64, 100, 257, 1000, 2048 + 13] {
                for specials in [false, true] {
                    let mut x = values(n, u64::from(block) * 1009 + n as u64, specials);
                    // Exact ties: with absmax 127, v · 1 lands on k + 0.5.
                    if n > 4 && !specials {
                        x[0] = 127.0;
                        x[1] = 2.5;
                        x[2] = -3.5;
                        x[3] = -127.0;
                    }
                    let mut want = vec![0u8; blob_len(m, n)];
                    compress_with(base, m, &x, &mut want, &mut s);
                    for k in &levels[1..] {
                        let mut got = vec![0u8; blob_len(m, n)];
                        compress_with(k, m, &x, &mut got, &mut s);
                        assert!(got == want, "{} {m} n={n} specials={specials}", k.name);
                        for md in [ADD, SUB, SET] {
                            let init: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 5.0).collect();
                            let (mut a, mut b) = (init.clone(), init);
                            apply_with(base, m, &want, &mut a, md).unwrap();
                            apply_with(k, m, &want, &mut b, md).unwrap();
                            assert!(
                                a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()),
                                "{} {m} n={n} mode {md}",
                                k.name
                            );
                        }
                    }
                }
            }
        }
    }

    /// Summing blobs with every output line written once gives the bits of clearing and adding
    /// blob by blob, for every method, output alignment within a cache line, length and number
    /// of blobs, and writes nothing outside the output; a corrupt blob is refused before
    /// anything is written.
    #[test]
    fn sum_of_blobs_written_once_matches_clear_then_add() {
        let mut s = Scratch::default();
        for m in METHODS {
            for n in [0usize, 1, 15, 16, 17, 33, 1000, 4099] {
                for count in [1usize, 2, 3] {
                    let blobs: Vec<Vec<u8>> = (0..count)
                        .map(|g| {
                            let x = values(n, 11 + 5 * g as u64 + n as u64, true);
                            let mut b = vec![0u8; blob_len(m, n)];
                            compress(m, &x, &mut b, &mut s);
                            b
                        })
                        .collect();
                    let blobs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
                    let mut want = vec![7f32; n];
                    decompress_set(m, blobs[0], &mut want).unwrap();
                    for b in &blobs[1..] {
                        decompress_add(m, b, &mut want).unwrap();
                    }
                    let mut buf = vec![7f32; n + 48];
                    let line = buf.as_ptr().align_offset(64);
                    for shift in 0..16 {
                        let at = line + shift;
                        buf.fill(7.0);
                        decompress_sum(m, &blobs, &mut buf[at..at + n]).unwrap();
                        let got = &buf[at..at + n];
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{m} n {n} blobs {count} shift {shift}"
                        );
                        let outside = buf[..at].iter().chain(&buf[at + n..]);
                        assert!(outside.into_iter().all(|&v| v == 7.0), "{m} n {n}");
                    }
                    if let (Method::TopK { .. }, true) = (m, n > 1 && count > 1) {
                        // The last blob's first two indices swapped: out of order.
                        let mut bad = blobs[count - 1].to_vec();
                        if topk_count_of(m, n) > 1 {
                            let (a, b) = bad[HEADER..HEADER + 8].split_at_mut(4);
                            a.swap_with_slice(b);
                            let mut all = blobs.clone();
                            all[count - 1] = &bad;
                            buf.fill(7.0);
                            assert!(decompress_sum(m, &all, &mut buf[..n]).is_err());
                            assert!(buf.iter().all(|&v| v == 7.0), "{m} n {n}");
                        }
                    }
                }
            }
        }
    }

    fn topk_count_of(m: Method, n: usize) -> usize {
        match m {
            Method::TopK { ratio } => topk_count(ratio, n),
            _ => 0,
        }
    }

    #[test]
    fn topk_residual_zeroes_exactly_the_kept_elements() {
        let mut s = Scratch::default();
        let x = values(1000, 5, false);
        let m = Method::TopK { ratio: 0.05 };
        let mut blob = vec![0u8; blob_len(m, x.len())];
        compress(m, &x, &mut blob, &mut s);
        let mut dec = vec![0f32; x.len()];
        decompress_add(m, &blob, &mut dec).unwrap();
        let mut res = x.clone();
        residual(m, &blob, &mut res).unwrap();
        let kept = dec.iter().filter(|v| **v != 0.0).count();
        assert_eq!(kept, 50);
        for i in 0..x.len() {
            assert_eq!(dec[i] + res[i], x[i], "element {i}");
        }
        // The smallest kept magnitude is at least the largest dropped one.
        let kept_min = (0..x.len())
            .filter(|&i| dec[i] != 0.0)
            .map(|i| x[i].abs())
            .fold(f32::INFINITY, f32::min);
        let dropped_max = (0..x.len())
            .filter(|&i| dec[i] == 0.0)
            .map(|i| x[i].abs())
            .fold(0.0, f32::max);
        assert!(kept_min >= dropped_max);
    }

    /// Data the radix selection must look into every pass for: few distinct magnitudes (test
    /// patterns), and magnitudes that differ only in their lowest mantissa bits.
    #[test]
    fn topk_matches_the_reference_on_repetitive_and_close_values() {
        let mut s = Scratch::default();
        let few: Vec<f32> = (0..5000).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
        let close: Vec<f32> = (0..5000u32)
            .map(|i| {
                f32::from_bits(0x4000_0000 + i.wrapping_mul(2_654_435_761) % 1024)
                    * if i % 3 == 0 { -1.0 } else { 1.0 }
            })
            .collect();
        for x in [few, close] {
            for ratio in [0.001, 0.01, 0.37, 1.0] {
                let m = Method::TopK { ratio };
                let mut blob = vec![0u8; blob_len(m, x.len())];
                compress(m, &x, &mut blob, &mut s);
                let mut dec = vec![0f32; x.len()];
                decompress_add(m, &blob, &mut dec).unwrap();
                let want: Vec<f32> = reference(m, &x).iter().map(|d| 0.0 + d).collect();
                assert!(same_bits(&dec, &want), "ratio {ratio}");
            }
        }
    }

    /// Pieces large enough for the sampled threshold: the same selection as the reference on
    /// every level, whether the sample guides it (random data; many equal values; a periodic
    /// test pattern; mostly zeros) or misleads it (it sees only small values: far too many
    /// candidates; only the largest: too few for the larger k), and the selection is made over
    /// all elements.
    #[test]
    fn sampled_topk_matches_the_reference() {
        let n = 40 * SAMPLE + 13;
        let sampled: std::collections::HashSet<usize> =
            (0..SAMPLE).map(|j| sample_at(j, n)).collect();
        let random = values(n, 77, false);
        let equal: Vec<f32> = (0..n)
            .map(|i| if i % 3 == 0 { -1.5 } else { 1.5 })
            .collect();
        let periodic: Vec<f32> = (0..n).map(|i| (2 + i % 16 + (i + 1) % 16) as f32).collect();
        let sparse: Vec<f32> = (0..n)
            .map(|i| if i % 397 == 0 { i as f32 } else { 0.0 })
            .collect();
        let hidden: Vec<f32> = (0..n)
            .map(|i| {
                if sampled.contains(&i) {
                    1e-3
                } else {
                    (i % 1000) as f32
                }
            })
            .collect();
        let sampled_big: Vec<f32> = (0..n)
            .map(|i| {
                if sampled.contains(&i) {
                    1e6 + i as f32
                } else {
                    1e-3 * (i % 7) as f32
                }
            })
            .collect();
        let mut s = Scratch::default();
        for (name, x, guided) in [
            ("random", &random, Some(true)),
            ("equal", &equal, Some(true)),
            ("periodic", &periodic, Some(true)),
            ("sparse", &sparse, Some(true)),
            ("hidden", &hidden, Some(false)),
            ("sampled big", &sampled_big, None),
        ] {
            for ratio in [0.001, 0.01, 0.05] {
                let m = Method::TopK { ratio };
                let kk = topk_count(ratio, n);
                for k in available() {
                    let used = topk_sampled(&k, x, kk, &mut s);
                    if let Some(g) = guided {
                        assert_eq!(used, g, "{name} ratio {ratio} {}", k.name);
                    }
                    let mut blob = vec![0u8; blob_len(m, n)];
                    compress_with(&k, m, x, &mut blob, &mut s);
                    let mut dec = vec![0f32; n];
                    apply_with(&k, m, &blob, &mut dec, SET).unwrap();
                    let want: Vec<f32> = reference(m, x).iter().map(|d| 0.0 + d).collect();
                    assert!(same_bits(&dec, &want), "{name} ratio {ratio} {}", k.name);
                }
            }
        }
    }

    /// Top-k of a sum formed during the selection: the same blob as top-k of the stored sum,
    /// and with error feedback the same residual, whether the sample guides the selection or
    /// not (then the sums are spilled, or taken from the updated residual).
    #[test]
    fn topk_of_a_sum_matches_topk_of_the_stored_sum() {
        let n = 40 * SAMPLE + 13;
        let a = values(n, 5, false);
        let guided = values(n, 6, false);
        // Sums of zero where the sample looks, large elsewhere: far too many candidates.
        let sampled: std::collections::HashSet<usize> =
            (0..SAMPLE).map(|j| sample_at(j, n)).collect();
        let hidden: Vec<f32> = (0..n)
            .map(|i| {
                if sampled.contains(&i) {
                    -a[i]
                } else {
                    1000.0 + i as f32
                }
            })
            .collect();
        let prior = values(n, 8, false);
        let mut s = Scratch::default();
        for (b, spills) in [(&guided, false), (&hidden, true)] {
            for ratio in [0.001, 0.01, 0.05, 0.5] {
                let m = Method::TopK { ratio };
                for feedback in [false, true] {
                    let sum: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
                    let mut want_res = prior.clone();
                    let x = if feedback {
                        for (r, v) in want_res.iter_mut().zip(&sum) {
                            *r += v;
                        }
                        &want_res
                    } else {
                        &sum
                    };
                    let mut want = vec![0u8; blob_len(m, n)];
                    compress(m, x, &mut want, &mut s);
                    let mut got = vec![0u8; blob_len(m, n)];
                    let mut res = prior.clone();
                    let mut spill = vec![0f32; n];
                    compress_topk_of_sum(
                        ratio,
                        &a,
                        b,
                        feedback.then_some(&mut res[..]),
                        &mut spill,
                        &mut got,
                        &mut s,
                    );
                    assert!(got == want, "ratio {ratio} feedback {feedback}");
                    if feedback {
                        assert!(same_bits(&res, &want_res), "ratio {ratio} residual");
                    } else {
                        // Sums are stored only when the selection must see them all (also
                        // when k is too large a share for sampling).
                        let spilled = spills || ratio > 0.1;
                        assert_eq!(same_bits(&spill, &sum), spilled, "ratio {ratio} spill");
                    }
                }
            }
        }
    }

    #[test]
    fn ties_are_broken_by_lower_index() {
        let mut s = Scratch::default();
        let x = vec![1.0f32; 10];
        let m = Method::TopK { ratio: 0.3 };
        let mut blob = vec![0u8; blob_len(m, 10)];
        compress(m, &x, &mut blob, &mut s);
        let mut dec = vec![0f32; 10];
        decompress_add(m, &blob, &mut dec).unwrap();
        assert_eq!(dec, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn int8_error_is_within_half_a_step_and_sizes_are_as_documented() {
        let mut s = Scratch::default();
        let m = Method::Int8 { block: 256 };
        let x = values(10_000, 9, false);
        let mut blob = vec![0u8; blob_len(m, x.len())];
        assert_eq!(blob.len(), 16 + 4 * 40 + 10_000);
        compress(m, &x, &mut blob, &mut s);
        let mut dec = vec![0f32; x.len()];
        decompress_add(m, &blob, &mut dec).unwrap();
        for (b, (xs, ds)) in x.chunks(256).zip(dec.chunks(256)).enumerate() {
            let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (v, d) in xs.iter().zip(ds) {
                assert!(
                    (v - d).abs() <= amax / 127.0 * 0.5001,
                    "block {b}: {v} -> {d}"
                );
            }
        }
        assert_eq!(blob_len(Method::Fp16, 10), 16 + 20);
        assert_eq!(blob_len(Method::TopK { ratio: 0.01 }, 1000), 16 + 80);
    }

    #[test]
    fn blobs_that_disagree_with_the_call_are_rejected() {
        let mut s = Scratch::default();
        let x = values(100, 3, false);
        let mut blob = vec![0u8; blob_len(Method::Fp16, 100)];
        compress(Method::Fp16, &x, &mut blob, &mut s);
        let mut acc = vec![0f32; 100];
        // Another method, another count, a truncated blob: all refused, nothing added.
        for (m, n, len) in [
            (Method::Bf16, 100, blob.len()),
            (Method::Fp16, 99, blob.len()),
            (Method::Fp16, 100, blob.len() - 1),
        ] {
            let e = decompress_add(m, &blob[..len], &mut acc[..n]).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Para);
            assert!(e.msg.contains("same method"), "{}", e.msg);
        }
        assert!(acc.iter().all(|v| *v == 0.0));
        // Top-k indices out of order or out of range are corrupt.
        let m = Method::TopK { ratio: 0.02 };
        let mut blob = vec![0u8; blob_len(m, 100)];
        compress(m, &x, &mut blob, &mut s);
        blob[HEADER..HEADER + 4].copy_from_slice(&200u32.to_le_bytes());
        let e = decompress_add(m, &blob, &mut acc).unwrap_err();
        assert!(e.msg.contains("corrupt"), "{}", e.msg);
    }
}
