//! Input patterns and independently computed expected results.
//!
//! Every rank fills its input with small integers chosen so that every result the tester can
//! predict is exactly representable, then compares the library's output byte for byte with
//! values it encodes itself. Patterns (element `i` of the send buffer of rank `r`):
//!
//! - data movement (broadcast, gathers, scatters, all-to-all, send/recv):
//!   `(7919 r + i + 1) mod M`, M a prime at most the type's exact range, so a block taken from
//!   the wrong rank or offset shows up;
//! - sum: `1 + (r + i) mod S` with S = 2 for integers, 4 for fp16/bf16, 16 for fp32/fp64;
//! - prod: `1 + (r + i) mod 2` (every product is a power of two);
//! - max/min: `(7 r + 3 i) mod 127`, shifted by −63 for signed types.
//!
//! A reduction result is declared not checkable (`NULL`, as the vendor tool does) when its
//! largest possible value is not exactly representable: sum when `ranks × S` reaches the exact
//! range (int8 beyond 63 ranks, int16 beyond 16383, fp16 beyond 511, bf16 beyond 63, fp32 beyond
//! 2^20 − 1), prod when 2^ranks overflows (int8 beyond 6 ranks, fp16 beyond 15, bf16/fp32 beyond
//! 127). These limits are the vendor tool's published ones.

use crate::cli::RedOp;
use crate::dtype::{DType, Num};

/// Which family of input values a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Data movement: values identify the source rank and offset.
    Copy,
    /// Sum reduction.
    Sum,
    /// Product reduction.
    Prod,
    /// Max or min reduction.
    MaxMin,
}

impl Pattern {
    /// The pattern for an operation (`red` is `None` for data movement).
    pub fn for_op(red: Option<RedOp>) -> Pattern {
        match red {
            None => Pattern::Copy,
            Some(RedOp::Sum) => Pattern::Sum,
            Some(RedOp::Prod) => Pattern::Prod,
            Some(RedOp::Max | RedOp::Min) => Pattern::MaxMin,
        }
    }
}

fn sum_span(dt: DType) -> i64 {
    match dt {
        DType::Fp16 | DType::Bf16 => 4,
        DType::Fp32 | DType::Fp64 => 16,
        _ => 2,
    }
}

fn copy_modulus(dt: DType) -> u64 {
    match dt {
        DType::Int8 => 127,
        DType::Uint8 | DType::Bf16 => 251,
        DType::Fp16 => 2039,
        DType::Int16 => 32749,
        DType::Uint16 => 65521,
        _ => 1_048_573,
    }
}

/// Element `idx` of the input of rank `src`.
pub fn input(p: Pattern, dt: DType, src: u32, idx: u64) -> i64 {
    let r = src as u64;
    match p {
        Pattern::Copy => ((7919 * r + idx + 1) % copy_modulus(dt)) as i64,
        Pattern::Sum => 1 + ((r + idx) % sum_span(dt) as u64) as i64,
        Pattern::Prod => 1 + ((r + idx) % 2) as i64,
        Pattern::MaxMin => {
            let v = ((7 * r + 3 * (idx % 127)) % 127) as i64;
            if dt.is_signed() {
                v - 63
            } else {
                v
            }
        }
    }
}

/// Whether the reduction of `ranks` inputs with pattern `p` is exactly representable in `dt`.
pub fn checkable(p: Pattern, dt: DType, ranks: u32) -> bool {
    match p {
        Pattern::Copy | Pattern::MaxMin => true,
        Pattern::Sum => (ranks as u128) * (sum_span(dt) as u128) < dt.exact_limit(),
        Pattern::Prod => ranks <= dt.max_pow2_exponent(),
    }
}

fn fold(red: RedOp, dt: DType, vals: impl Iterator<Item = i64>) -> Num {
    let mut acc: Option<Num> = None;
    for v in vals {
        let x = dt.num(v);
        acc = Some(match (acc, x) {
            (None, x) => x,
            (Some(Num::I(a)), Num::I(b)) => Num::I(match red {
                RedOp::Sum => a + b,
                RedOp::Prod => a * b,
                RedOp::Max => a.max(b),
                RedOp::Min => a.min(b),
            }),
            (Some(Num::F(a)), Num::F(b)) => Num::F(match red {
                RedOp::Sum => a + b,
                RedOp::Prod => a * b,
                RedOp::Max => a.max(b),
                RedOp::Min => a.min(b),
            }),
            (Some(a), _) => a,
        });
    }
    acc.unwrap_or(Num::I(0))
}

/// Encoded inputs and expected values for one run.
pub struct Oracle {
    dt: DType,
    pattern: Pattern,
    /// Reduction results by `idx mod period` (reductions only: every pattern is periodic).
    reduced: Vec<u8>,
    period: u64,
    /// Encodings of the values -2048..=2048 for fp16/bf16, whose conversion is slow.
    half_lut: Vec<[u8; 2]>,
}

const LUT_HALF: i64 = 2048;

impl Oracle {
    /// Prepares inputs for `dt` with pattern `p`, and expected reductions over `ranks` ranks
    /// with `red` when given.
    pub fn new(dt: DType, p: Pattern, red: Option<RedOp>, ranks: u32) -> Oracle {
        let half_lut = if dt.size() == 2 && dt.is_float() {
            (-LUT_HALF..=LUT_HALF)
                .map(|v| {
                    let mut b = [0u8; 2];
                    dt.encode(Num::F(v as f64), &mut b);
                    b
                })
                .collect()
        } else {
            Vec::new()
        };
        let period = match p {
            Pattern::Copy => 0,
            Pattern::Sum => sum_span(dt) as u64,
            Pattern::Prod => 2,
            Pattern::MaxMin => 127,
        };
        let mut reduced = vec![0u8; period as usize * dt.size()];
        if let Some(red) = red {
            for (k, out) in reduced.chunks_exact_mut(dt.size()).enumerate() {
                let v = fold(red, dt, (0..ranks).map(|r| input(p, dt, r, k as u64)));
                dt.encode(v, out);
            }
        }
        Oracle {
            dt,
            pattern: p,
            reduced,
            period,
            half_lut,
        }
    }

    fn put(&self, v: i64, out: &mut [u8]) {
        if !self.half_lut.is_empty() && (-LUT_HALF..=LUT_HALF).contains(&v) {
            out.copy_from_slice(&self.half_lut[(v + LUT_HALF) as usize]);
        } else {
            self.dt.encode(self.dt.num(v), out);
        }
    }

    /// Fills `buf` with the input of rank `src` starting at element `first`.
    pub fn fill_input(&self, src: u32, first: u64, buf: &mut [u8]) {
        for (k, out) in buf.chunks_exact_mut(self.dt.size()).enumerate() {
            self.put(input(self.pattern, self.dt, src, first + k as u64), out);
        }
    }

    /// Writes the expected bytes of element `idx` of `src` into `out` (`Copy`), or of
    /// reduced element `idx` (`Reduced`).
    pub fn expected(&self, what: Source, idx: u64, out: &mut [u8]) {
        match what {
            Source::Copy { src } => self.put(input(self.pattern, self.dt, src, idx), out),
            Source::Reduced => {
                let s = self.dt.size();
                let k = (idx % self.period) as usize;
                out.copy_from_slice(&self.reduced[k * s..(k + 1) * s]);
            }
        }
    }
}

/// Where the expected values of a region of the output come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A copy of the input of rank `src`.
    Copy {
        /// The rank whose input this is.
        src: u32,
    },
    /// The reduction over all ranks.
    Reduced,
}

/// A run of `count` output elements starting at element `at`, expected to equal elements
/// `first..first + count` of `source`.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    /// First element in the output buffer.
    pub at: u64,
    /// Number of elements.
    pub count: u64,
    /// Where the values come from.
    pub source: Source,
    /// First element index in the source.
    pub first: u64,
}

/// Byte every output position outside the expected regions is set to (and must keep).
pub const GAP_BYTE: u8 = 0x5a;

/// Prepares an output buffer: gaps get [`GAP_BYTE`], expected regions the bitwise complement of
/// the expected bytes, so an element the library fails to write can never pass.
pub fn prefill(o: &Oracle, regions: &[Region], buf: &mut [u8]) {
    buf.fill(GAP_BYTE);
    let s = o.dt.size();
    for r in regions {
        let start = r.at as usize * s;
        let dst = &mut buf[start..start + r.count as usize * s];
        for (k, out) in dst.chunks_exact_mut(s).enumerate() {
            o.expected(r.source, r.first + k as u64, out);
            out.iter_mut().for_each(|b| *b = !*b);
        }
    }
}

/// The first difference between an output and its expectation.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// Element index in the output buffer.
    pub element: u64,
    /// The value found.
    pub got: String,
    /// The value expected.
    pub expected: String,
}

/// Compares `buf` with the expected regions and gaps; `None` when every byte matches.
pub fn verify(o: &Oracle, regions: &[Region], buf: &[u8]) -> Option<Mismatch> {
    let s = o.dt.size();
    let mut want = vec![0u8; s];
    let mut covered = 0usize;
    let mut sorted: Vec<&Region> = regions.iter().collect();
    sorted.sort_by_key(|r| r.at);
    let gap_bad = |from: usize, to: usize| -> Option<Mismatch> {
        let off = buf[from..to].iter().position(|&b| b != GAP_BYTE)?;
        let e = (from + off) / s;
        Some(Mismatch {
            element: e as u64,
            got: o.dt.describe(&buf[e * s..(e + 1) * s]),
            expected: "untouched gap".into(),
        })
    };
    for r in sorted {
        let start = r.at as usize * s;
        if let Some(m) = gap_bad(covered, start) {
            return Some(m);
        }
        let end = start + r.count as usize * s;
        for (k, got) in buf[start..end].chunks_exact(s).enumerate() {
            o.expected(r.source, r.first + k as u64, &mut want);
            if got != want.as_slice() {
                return Some(Mismatch {
                    element: r.at + k as u64,
                    got: o.dt.describe(got),
                    expected: o.dt.describe(&want),
                });
            }
        }
        covered = end;
    }
    gap_bad(covered, buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_limits() {
        let last_ok = |p, dt| (1..100_000u32).take_while(|&n| checkable(p, dt, n)).last();
        assert_eq!(last_ok(Pattern::Sum, DType::Int8), Some(63));
        assert_eq!(last_ok(Pattern::Sum, DType::Int16), Some(16383));
        assert_eq!(last_ok(Pattern::Sum, DType::Fp16), Some(511));
        assert_eq!(last_ok(Pattern::Sum, DType::Bf16), Some(63));
        assert_eq!(last_ok(Pattern::Prod, DType::Int8), Some(6));
        assert_eq!(last_ok(Pattern::Prod, DType::Int16), Some(14));
        assert_eq!(last_ok(Pattern::Prod, DType::Int32), Some(30));
        assert_eq!(last_ok(Pattern::Prod, DType::Fp16), Some(15));
        assert_eq!(last_ok(Pattern::Prod, DType::Fp32), Some(127));
        assert!(checkable(Pattern::Sum, DType::Fp32, 1_048_575));
        assert!(!checkable(Pattern::Sum, DType::Fp32, 1_048_576));
    }

    #[test]
    fn expected_sum_is_exact_at_the_limit() {
        for dt in DType::ALL {
            let n = (1..600u32)
                .take_while(|&n| checkable(Pattern::Sum, dt, n))
                .last()
                .unwrap();
            let o = Oracle::new(dt, Pattern::Sum, Some(RedOp::Sum), n);
            let mut b = vec![0u8; dt.size()];
            for idx in 0..16 {
                o.expected(Source::Reduced, idx, &mut b);
                let want: i64 = (0..n).map(|r| input(Pattern::Sum, dt, r, idx)).sum();
                assert_eq!(dt.describe(&b), format!("{want}"), "{dt:?} n={n}");
            }
        }
    }

    #[test]
    fn prefill_never_matches_and_verify_finds_first_error() {
        let o = Oracle::new(DType::Fp32, Pattern::Copy, None, 2);
        let regions = [
            Region {
                at: 0,
                count: 4,
                source: Source::Copy { src: 1 },
                first: 10,
            },
            Region {
                at: 5,
                count: 3,
                source: Source::Copy { src: 0 },
                first: 0,
            },
        ];
        let mut buf = vec![0u8; 8 * 4];
        prefill(&o, &regions, &mut buf);
        assert_eq!(verify(&o, &regions, &buf).unwrap().element, 0);
        o.fill_input(1, 10, &mut buf[..16]);
        o.fill_input(0, 0, &mut buf[20..32]);
        assert!(verify(&o, &regions, &buf).is_none());
        buf[17] ^= 1;
        assert_eq!(verify(&o, &regions, &buf).unwrap().element, 4);
        buf[17] ^= 1;
        buf[30] ^= 0xff;
        assert_eq!(verify(&o, &regions, &buf).unwrap().element, 7);
    }
}
