//! Reference arithmetic for floating-point reductions that round: inputs with random sign,
//! magnitude and mantissa, their raw bits per element type, and one rounded `a op b`.

use super::*;

/// An input value drawn from the hash of `key`: random sign, magnitude and mantissa, so sums and
/// products round. Sums (`op == SUM`): magnitudes 2⁻⁶…2¹⁰ (fp16 has headroom for 8 ranks);
/// products: 0.5…2.
pub fn value(key: &[u64], op: u32) -> f64 {
    let h = mix(seed(key));
    let mant = 1.0 + (h >> 11) as f64 / (1u64 << 53) as f64;
    let sign = if h & 1 == 1 { -1.0 } else { 1.0 };
    match op {
        SUM => sign * mant * ((((h >> 1) % 17) as f64) - 6.0).exp2(),
        _ => mant * if h & 2 == 2 { 0.5 } else { 1.0 },
    }
}

/// `v` in the element type `dt`, as raw bits (little-endian in the low bytes).
pub fn encode(dt: u32, v: f64) -> u64 {
    match dt {
        FP16 => f32_to_f16(v as f32) as u64,
        BF16 => f32_to_bf16(v as f32) as u64,
        FP32 => (v as f32).to_bits() as u64,
        _ => v.to_bits(),
    }
}

/// `a op b` rounded once to `dt`: fp16/bf16 widened to f32, computed in f32, rounded to nearest
/// even; fp32 and fp64 in their own precision.
pub fn combine(dt: u32, op: u32, a: u64, b: u64) -> u64 {
    let f = |x: f32, y: f32| if op == SUM { x + y } else { x * y };
    match dt {
        FP16 => f32_to_f16(f(f16_to_f32(a as u16), f16_to_f32(b as u16))) as u64,
        BF16 => f32_to_bf16(f(bf16_to_f32(a as u16), bf16_to_f32(b as u16))) as u64,
        FP32 => f(f32::from_bits(a as u32), f32::from_bits(b as u32)).to_bits() as u64,
        _ => {
            let (x, y) = (f64::from_bits(a), f64::from_bits(b));
            (if op == SUM { x + y } else { x * y }).to_bits()
        }
    }
}
