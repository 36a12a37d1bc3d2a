//! Element types of the tester: names, HCCL codes, and exact encodings of the small integer
//! values the tester uses as inputs and expected results.
//!
//! The fp16 and bf16 conversions are the `half` crate's software ones (round to nearest, ties to
//! even), never the library's kernels. From `f64` they round on the top 32 bits of the value,
//! which is exact for everything the tester encodes: integers below 2^24 and powers of two.

/// An element type the tester accepts with `-d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// `int8`
    Int8,
    /// `int16`
    Int16,
    /// `int32`
    Int32,
    /// `int64`
    Int64,
    /// `uint8`
    Uint8,
    /// `uint16`
    Uint16,
    /// `uint32`
    Uint32,
    /// `uint64`
    Uint64,
    /// `fp16` (IEEE binary16)
    Fp16,
    /// `fp32`
    Fp32,
    /// `fp64`
    Fp64,
    /// `bfp16` (bfloat16)
    Bf16,
}

/// A value of an element type: integers exactly, floats as `f64` (every value the tester
/// produces for a float type is an integer or a power of two, exact in `f64`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// A value of an integer type.
    I(i128),
    /// A value of a float type.
    F(f64),
}

impl DType {
    /// Every type, in the order the usage text lists them.
    pub const ALL: [DType; 12] = [
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Uint8,
        DType::Uint16,
        DType::Uint32,
        DType::Uint64,
        DType::Fp16,
        DType::Fp32,
        DType::Fp64,
        DType::Bf16,
    ];

    /// Parses a vendor type name (`bf16` is accepted as an alias of `bfp16`).
    pub fn parse(s: &str) -> Option<DType> {
        let s = s.to_ascii_lowercase();
        if s == "bf16" {
            return Some(DType::Bf16);
        }
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The vendor's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Uint8 => "uint8",
            DType::Uint16 => "uint16",
            DType::Uint32 => "uint32",
            DType::Uint64 => "uint64",
            DType::Fp16 => "fp16",
            DType::Fp32 => "fp32",
            DType::Fp64 => "fp64",
            DType::Bf16 => "bfp16",
        }
    }

    /// The `HcclDataType` value.
    pub fn raw(self) -> u32 {
        match self {
            DType::Int8 => 0,
            DType::Int16 => 1,
            DType::Int32 => 2,
            DType::Fp16 => 3,
            DType::Fp32 => 4,
            DType::Int64 => 5,
            DType::Uint64 => 6,
            DType::Uint8 => 7,
            DType::Uint16 => 8,
            DType::Uint32 => 9,
            DType::Fp64 => 10,
            DType::Bf16 => 11,
        }
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Int8 | DType::Uint8 => 1,
            DType::Int16 | DType::Uint16 | DType::Fp16 | DType::Bf16 => 2,
            DType::Int32 | DType::Uint32 | DType::Fp32 => 4,
            DType::Int64 | DType::Uint64 | DType::Fp64 => 8,
        }
    }

    /// Whether the type is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::Fp16 | DType::Fp32 | DType::Fp64 | DType::Bf16)
    }

    /// Whether the type can hold negative values.
    pub fn is_signed(self) -> bool {
        !matches!(
            self,
            DType::Uint8 | DType::Uint16 | DType::Uint32 | DType::Uint64
        )
    }

    /// Bound below which every non-negative integer is exactly representable: the maximum for
    /// integer types, 2^(mantissa bits + 1) for floats.
    pub fn exact_limit(self) -> u128 {
        match self {
            DType::Int8 => i8::MAX as u128,
            DType::Int16 => i16::MAX as u128,
            DType::Int32 => i32::MAX as u128,
            DType::Int64 => i64::MAX as u128,
            DType::Uint8 => u8::MAX as u128,
            DType::Uint16 => u16::MAX as u128,
            DType::Uint32 => u32::MAX as u128,
            DType::Uint64 => u64::MAX as u128,
            DType::Fp16 => 1 << 11,
            DType::Bf16 => 1 << 8,
            DType::Fp32 => 1 << 24,
            DType::Fp64 => 1 << 53,
        }
    }

    /// Largest `k` such that 2^k is representable (finite, and exact for integers).
    pub fn max_pow2_exponent(self) -> u32 {
        match self {
            DType::Fp16 => 15,
            DType::Bf16 | DType::Fp32 => 127,
            DType::Fp64 => 1023,
            _ => {
                let bits = 8 * self.size() as u32;
                if self.is_signed() {
                    bits - 2
                } else {
                    bits - 1
                }
            }
        }
    }

    /// An integer as a value of this type (callers keep it within the exact range).
    pub fn num(self, v: i64) -> Num {
        if self.is_float() {
            Num::F(v as f64)
        } else {
            Num::I(v as i128)
        }
    }

    /// Writes the little-endian encoding of `v` into `out` (exactly `self.size()` bytes).
    /// Integers are truncated two's-complement, floats rounded to nearest even.
    pub fn encode(self, v: Num, out: &mut [u8]) {
        let f = match v {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        };
        let i = match v {
            Num::I(i) => i,
            Num::F(f) => f as i128,
        };
        match self {
            DType::Int8 | DType::Uint8 => out[0] = i as u8,
            DType::Int16 | DType::Uint16 => out.copy_from_slice(&(i as u16).to_le_bytes()),
            DType::Int32 | DType::Uint32 => out.copy_from_slice(&(i as u32).to_le_bytes()),
            DType::Int64 | DType::Uint64 => out.copy_from_slice(&(i as u64).to_le_bytes()),
            DType::Fp16 => out.copy_from_slice(&f64_to_f16(f).to_le_bytes()),
            DType::Bf16 => out.copy_from_slice(&f64_to_bf16(f).to_le_bytes()),
            DType::Fp32 => out.copy_from_slice(&(f as f32).to_le_bytes()),
            DType::Fp64 => out.copy_from_slice(&f.to_le_bytes()),
        }
    }

    /// A readable rendering of one encoded element (for mismatch messages).
    pub fn describe(self, b: &[u8]) -> String {
        match self {
            DType::Int8 => (b[0] as i8).to_string(),
            DType::Uint8 => b[0].to_string(),
            DType::Int16 => i16::from_le_bytes([b[0], b[1]]).to_string(),
            DType::Uint16 => u16::from_le_bytes([b[0], b[1]]).to_string(),
            DType::Int32 => i32::from_le_bytes(b.try_into().unwrap_or_default()).to_string(),
            DType::Uint32 => u32::from_le_bytes(b.try_into().unwrap_or_default()).to_string(),
            DType::Int64 => i64::from_le_bytes(b.try_into().unwrap_or_default()).to_string(),
            DType::Uint64 => u64::from_le_bytes(b.try_into().unwrap_or_default()).to_string(),
            DType::Fp16 => f16_to_f64(u16::from_le_bytes([b[0], b[1]])).to_string(),
            DType::Bf16 => bf16_to_f64(u16::from_le_bytes([b[0], b[1]])).to_string(),
            DType::Fp32 => f32::from_le_bytes(b.try_into().unwrap_or_default()).to_string(),
            DType::Fp64 => f64::from_le_bytes(b.try_into().unwrap_or_default()).to_string(),
        }
    }
}

/// `x` rounded to IEEE binary16 (nearest, ties to even), as bits.
pub fn f64_to_f16(x: f64) -> u16 {
    half::f16::from_f64(x).to_bits()
}

/// The value of binary16 bits.
pub fn f16_to_f64(h: u16) -> f64 {
    half::f16::from_bits(h).to_f64()
}

/// `x` rounded to bfloat16 (nearest, ties to even), as bits.
pub fn f64_to_bf16(x: f64) -> u16 {
    half::bf16::from_f64(x).to_bits()
}

/// The value of bfloat16 bits.
pub fn bf16_to_f64(h: u16) -> f64 {
    half::bf16::from_bits(h).to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_known_values() {
        assert_eq!(f64_to_f16(1.0), 0x3c00);
        assert_eq!(f64_to_f16(-2.0), 0xc000);
        assert_eq!(f64_to_f16(65504.0), 0x7bff);
        assert_eq!(f64_to_f16(65519.0), 0x7bff);
        assert_eq!(f64_to_f16(65520.0), 0x7c00);
        assert_eq!(f64_to_f16(2049.0), f64_to_f16(2048.0));
        assert_eq!(f64_to_f16(2051.0), f64_to_f16(2052.0));
        assert_eq!(f64_to_f16((2.0f64).powi(-24)), 0x0001);
        assert_eq!(f64_to_f16((2.0f64).powi(-25)), 0x0000);
        assert_eq!(f64_to_f16(3.0 * (2.0f64).powi(-26)), 0x0001);
        assert_eq!(f64_to_f16((2.0f64).powi(-14)), 0x0400);
        assert_eq!(f64_to_f16(f64::INFINITY), 0x7c00);
        assert!(f16_to_f64(f64_to_f16(f64::NAN)).is_nan());
        assert_eq!(f64_to_f16(-0.0), 0x8000);
    }

    #[test]
    fn bf16_known_values() {
        assert_eq!(f64_to_bf16(1.0), 0x3f80);
        assert_eq!(f64_to_bf16(257.0), f64_to_bf16(256.0));
        assert_eq!(f64_to_bf16(259.0), f64_to_bf16(260.0));
        assert_eq!(f64_to_bf16(3.0e38), 0x7f62);
        assert_eq!(f64_to_bf16(f64::MAX), 0x7f80);
        assert_eq!(f64_to_bf16((2.0f64).powi(-133)), 0x0001);
    }

    #[test]
    fn half_roundtrip_every_pattern() {
        for h in 0..=u16::MAX {
            for (to, from, man) in [
                (
                    f64_to_f16 as fn(f64) -> u16,
                    f16_to_f64 as fn(u16) -> f64,
                    10,
                ),
                (f64_to_bf16, bf16_to_f64, 7),
            ] {
                let v = from(h);
                let exp_mask = ((1u16 << (15 - man)) - 1) << man;
                if v.is_nan() {
                    assert_eq!(to(v) & exp_mask, exp_mask);
                } else {
                    assert_eq!(to(v), h, "{h:#06x}");
                }
            }
        }
    }

    #[test]
    fn halfway_between_neighbours_rounds_to_even() {
        for h in 0x0000u16..0x7bff {
            let (a, b) = (f16_to_f64(h), f16_to_f64(h + 1));
            let even = if h & 1 == 0 { h } else { h + 1 };
            assert_eq!(f64_to_f16((a + b) / 2.0), even, "{h:#06x}");
        }
        for h in 0x0000u16..0x7f7f {
            let (a, b) = (bf16_to_f64(h), bf16_to_f64(h + 1));
            let even = if h & 1 == 0 { h } else { h + 1 };
            assert_eq!(f64_to_bf16((a + b) / 2.0), even, "{h:#06x}");
        }
    }

    #[test]
    fn limits() {
        assert_eq!(DType::Int8.max_pow2_exponent(), 6);
        assert_eq!(DType::Uint8.max_pow2_exponent(), 7);
        assert_eq!(DType::Int64.max_pow2_exponent(), 62);
        assert_eq!(DType::Uint64.max_pow2_exponent(), 63);
        assert_eq!(DType::parse("BFP16"), Some(DType::Bf16));
        assert_eq!(DType::parse("fp8"), None);
    }
}
