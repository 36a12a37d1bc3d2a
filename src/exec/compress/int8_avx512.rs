//! int8 quantisation with AVX-512 (F + BW + VL): the same arithmetic as the generic bodies of
//! the parent module, written with intrinsics because the compiler does not narrow 32-bit
//! lanes to bytes well on its own. One instruction (`vpmovdb`) narrows 16 lanes to 16 bytes,
//! masked loads and stores handle block tails without a scalar loop, and each block's absmax
//! and quantisation run back to back while the block is in L1.
//!
//! Every step is the scalar step lane by lane, in the same order and rounding, so blobs and
//! decoded values are bit-identical to every other level (the parent's tests compare them):
//! - the clamps are `min(127, r)` then `max(−127, r)`, which return `r` when it is NaN, as the
//!   scalar `if r > 127 { 127 } else { r }` does;
//! - rounding adds 1.5 · 2^23 and keeps the low byte of the sum's bits (`vpmovdb` truncates);
//! - decoding multiplies then adds (never a fused multiply-add).

use std::arch::x86_64::*;

use super::{int8_scale, RNE_SHIFT};

/// Lanes of one 512-bit register of f32.
const W: usize = 16;

/// The lane mask of the first `n < 16` lanes.
#[inline(always)]
fn head(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// Largest |x| of a block as f32 bits (integer order equals magnitude order; NaN is largest).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn absmax_bits(x: &[f32]) -> u32 {
    let abs = _mm512_set1_epi32(0x7fff_ffff);
    let (mut m0, mut m1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    let mut pairs = x.chunks_exact(2 * W);
    for c in &mut pairs {
        // SAFETY: `c` holds 32 f32, so both 16-lane loads are in bounds.
        let (a, b) = unsafe {
            (
                _mm512_loadu_si512(c.as_ptr().cast()),
                _mm512_loadu_si512(c.as_ptr().add(W).cast()),
            )
        };
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(a, abs));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(b, abs));
    }
    let mut rest = pairs.remainder();
    if rest.len() >= W {
        // SAFETY: at least 16 f32 remain.
        let a = unsafe { _mm512_loadu_si512(rest.as_ptr().cast()) };
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(a, abs));
        rest = &rest[W..];
    }
    if !rest.is_empty() {
        // SAFETY: the mask covers only the `rest.len() < 16` lanes in bounds; the others read
        // nothing and are zero, which does not change a maximum of magnitudes.
        let a = unsafe { _mm512_maskz_loadu_epi32(head(rest.len()), rest.as_ptr().cast()) };
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(a, abs));
    }
    _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1))
}

/// Quantises 16 lanes: clamp `v · inv` to ±127, round to nearest even, keep the low byte.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn quantise(v: __m512, inv: __m512) -> __m128i {
    let r = _mm512_mul_ps(v, inv);
    let r = _mm512_min_ps(_mm512_set1_ps(127.0), r);
    let r = _mm512_max_ps(_mm512_set1_ps(-127.0), r);
    let r = _mm512_add_ps(r, _mm512_set1_ps(RNE_SHIFT));
    _mm512_cvtepi32_epi8(_mm512_castps_si512(r))
}

/// Quantises `x` into `scales` (4 bytes per block) and `q` (1 byte per element), as the
/// parent's `int8_encode`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn int8_encode(x: &[f32], block: usize, scales: &mut [u8], q: &mut [u8]) {
    for ((xb, qb), s) in x
        .chunks(block)
        .zip(q.chunks_mut(block))
        .zip(scales.chunks_exact_mut(4))
    {
        let (scale, inv) = int8_scale(absmax_bits(xb));
        s.copy_from_slice(&scale.to_le_bytes());
        let inv = _mm512_set1_ps(inv);
        let n = xb.len().min(qb.len());
        let full = n / W * W;
        let mut i = 0;
        while i < full {
            // SAFETY: `i + 16 ≤ n`, in bounds of both `xb` and `qb`.
            unsafe {
                let v = _mm512_loadu_ps(xb.as_ptr().add(i));
                _mm_storeu_si128(qb.as_mut_ptr().add(i).cast(), quantise(v, inv));
            }
            i += W;
        }
        if i < n {
            let k = head(n - i);
            // SAFETY: the mask covers only the `n − i < 16` lanes in bounds of `xb` and `qb`.
            unsafe {
                let v = _mm512_maskz_loadu_ps(k, xb.as_ptr().add(i));
                _mm_mask_storeu_epi8(qb.as_mut_ptr().add(i).cast(), k, quantise(v, inv));
            }
        }
    }
}

/// `acc = apply(MODE, acc, dequantised)`, as the parent's `int8_apply`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn int8_apply<const MODE: u8>(scales: &[u8], q: &[u8], block: usize, acc: &mut [f32]) {
    let step = |a: __m512, qv: __m128i, scale: __m512| {
        let d = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(qv)), scale);
        match MODE {
            super::ADD => _mm512_add_ps(a, d),
            super::SUB => _mm512_sub_ps(a, d),
            _ => _mm512_add_ps(_mm512_setzero_ps(), d),
        }
    };
    for ((ab, qb), s) in acc
        .chunks_mut(block)
        .zip(q.chunks(block))
        .zip(scales.chunks_exact(4))
    {
        let scale = _mm512_set1_ps(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
        let n = ab.len().min(qb.len());
        let full = n / W * W;
        let mut i = 0;
        while i < full {
            // SAFETY: `i + 16 ≤ n`, in bounds of both `ab` and `qb`.
            unsafe {
                let p = ab.as_mut_ptr().add(i);
                let qv = _mm_loadu_si128(qb.as_ptr().add(i).cast());
                _mm512_storeu_ps(p, step(_mm512_loadu_ps(p), qv, scale));
            }
            i += W;
        }
        if i < n {
            let k = head(n - i);
            // SAFETY: the mask covers only the `n − i < 16` lanes in bounds of `ab` and `qb`.
            unsafe {
                let p = ab.as_mut_ptr().add(i);
                let qv = _mm_maskz_loadu_epi8(k, qb.as_ptr().add(i).cast());
                _mm512_mask_storeu_ps(p, k, step(_mm512_maskz_loadu_ps(k, p), qv, scale));
            }
        }
    }
}

/// `acc += dequantised`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn int8_add(s: &[u8], q: &[u8], b: usize, a: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { int8_apply::<{ super::ADD }>(s, q, b, a) }
}

/// `acc −= dequantised` (the residual).
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn int8_sub(s: &[u8], q: &[u8], b: usize, a: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { int8_apply::<{ super::SUB }>(s, q, b, a) }
}

/// `acc = 0 + dequantised`.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn int8_set(s: &[u8], q: &[u8], b: usize, a: &mut [f32]) {
    // SAFETY: the caller's contract.
    unsafe { int8_apply::<{ super::SET }>(s, q, b, a) }
}
