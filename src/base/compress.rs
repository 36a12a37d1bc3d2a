//! What a compressed AllReduce is asked to do: the method and its parameters, as parsed from
//! `HCCL_COMPRESSION` or built from the C extension's config, checked in one place.

use std::fmt;

use crate::base::error::{Error, ErrorKind, Result};

/// Default number of elements that share one int8 scale.
pub const DEFAULT_INT8_BLOCK: u32 = 256;

/// Largest int8 block: a block is quantised from a stack copy, so it stays small.
pub const MAX_INT8_BLOCK: u32 = 1 << 16;

/// How values are compressed on the wire.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// IEEE binary16, rounded to nearest even (2 bytes per element).
    Fp16,
    /// bfloat16, rounded to nearest even (2 bytes per element).
    Bf16,
    /// Signed 8-bit integers with one f32 scale (absmax / 127) per `block` elements.
    Int8 {
        /// Elements per scale, 1..=[`MAX_INT8_BLOCK`].
        block: u32,
    },
    /// The `ratio` × n elements of largest magnitude, as (index, value) pairs.
    TopK {
        /// Fraction of the elements kept, in (0, 1].
        ratio: f32,
    },
}

impl Method {
    /// Short name (`fp16`, `bf16`, `int8`, `topk`).
    pub fn name(self) -> &'static str {
        match self {
            Method::Fp16 => "fp16",
            Method::Bf16 => "bf16",
            Method::Int8 { .. } => "int8",
            Method::TopK { .. } => "topk",
        }
    }

    /// Checks the parameters; the error names the offending field (`blockSize`, `topkRatio`).
    pub fn check(self) -> Result<Method> {
        match self {
            Method::Int8 { block } if block == 0 || block > MAX_INT8_BLOCK => Err(Error::new(
                ErrorKind::Para,
                format!("blockSize {block} is out of range 1..={MAX_INT8_BLOCK} for int8"),
            )),
            Method::TopK { ratio } if !(ratio > 0.0 && ratio <= 1.0) => Err(Error::new(
                ErrorKind::Para,
                format!("topkRatio {ratio} is outside (0, 1]"),
            )),
            m => Ok(m),
        }
    }

    /// Parses `fp16`, `bf16`, `int8`, `int8:BLOCK`, `topk`, `topk:RATIO` (case-insensitive);
    /// `topk` alone keeps 1%.
    pub fn parse(text: &str) -> Result<Method> {
        let t = text.trim().to_ascii_lowercase();
        let (name, arg) = match t.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (t.as_str(), None),
        };
        let bad = |why: String| Error::new(ErrorKind::Para, format!("{text:?}: {why}"));
        let m = match (name, arg) {
            ("fp16", None) => Method::Fp16,
            ("bf16", None) => Method::Bf16,
            ("int8", None) => Method::Int8 {
                block: DEFAULT_INT8_BLOCK,
            },
            ("int8", Some(b)) => Method::Int8 {
                block: b
                    .parse()
                    .map_err(|_| bad(format!("int8 block size {b:?} is not an integer")))?,
            },
            ("topk", None) => Method::TopK { ratio: 0.01 },
            ("topk", Some(r)) => Method::TopK {
                ratio: r
                    .parse()
                    .map_err(|_| bad(format!("topk ratio {r:?} is not a number")))?,
            },
            _ => {
                return Err(bad(
                    "expected fp16, bf16, int8[:BLOCK] or topk[:RATIO]".to_string()
                ))
            }
        };
        m.check().map_err(|e| bad(e.into_msg()))
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Method::Int8 { block } => write!(f, "int8:{block}"),
            Method::TopK { ratio } => write!(f, "topk:{ratio}"),
            m => f.write_str(m.name()),
        }
    }
}

/// Where compression applies in a compressed AllReduce.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// The method.
    pub method: Method,
    /// Compress between ranks of one host too (one flat exchange among all ranks) instead of
    /// reducing inside each host at full precision and compressing only across hosts.
    pub level0: bool,
}

/// Bit of [`Spec::to_wire`]'s first word that marks level0 compression.
const WIRE_LEVEL0: u32 = 1 << 8;

impl Spec {
    /// The spec as two words of an operation tag: method number (1 fp16, 2 bf16, 3 int8,
    /// 4 topk) with the level0 bit, and the method's parameter (int8 block size, bits of the
    /// topk ratio). Ranks whose words differ refuse each other's messages.
    pub fn to_wire(&self) -> (u32, u32) {
        let (id, param) = match self.method {
            Method::Fp16 => (1, 0),
            Method::Bf16 => (2, 0),
            Method::Int8 { block } => (3, block),
            Method::TopK { ratio } => (4, ratio.to_bits()),
        };
        (id | if self.level0 { WIRE_LEVEL0 } else { 0 }, param)
    }

    /// The spec [`to_wire`](Self::to_wire) wrote; `None` for words it never writes.
    pub fn from_wire(id: u32, param: u32) -> Option<Spec> {
        let method = match (id & !WIRE_LEVEL0, param) {
            (1, 0) => Method::Fp16,
            (2, 0) => Method::Bf16,
            (3, block) => Method::Int8 { block },
            (4, bits) => Method::TopK {
                ratio: f32::from_bits(bits),
            },
            _ => return None,
        };
        Some(Spec {
            method,
            level0: id & WIRE_LEVEL0 != 0,
        })
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.method)?;
        if self.level0 {
            f.write_str(" compressLevel0")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_method_and_rejects_bad_parameters() {
        assert_eq!(Method::parse("FP16").unwrap(), Method::Fp16);
        assert_eq!(Method::parse("bf16").unwrap(), Method::Bf16);
        assert_eq!(
            Method::parse("int8").unwrap(),
            Method::Int8 {
                block: DEFAULT_INT8_BLOCK
            }
        );
        assert_eq!(
            Method::parse("int8:64").unwrap(),
            Method::Int8 { block: 64 }
        );
        assert_eq!(
            Method::parse("topk:0.05").unwrap(),
            Method::TopK { ratio: 0.05 }
        );
        assert_eq!(Method::parse("TopK").unwrap(), Method::TopK { ratio: 0.01 });
        for bad in [
            "", "zstd", "topk:0", "topk:1.5", "topk:-1", "topk:nan", "int8:0", "fp16:2",
        ] {
            let e = Method::parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Para, "{bad}");
        }
        assert!(Method::parse("topk:1").is_ok());
        let e = Method::TopK { ratio: 2.0 }.check().unwrap_err();
        assert!(e.msg.contains("topkRatio"), "{}", e.msg);
        let e = Method::Int8 { block: 0 }.check().unwrap_err();
        assert!(e.msg.contains("blockSize"), "{}", e.msg);
    }

    #[test]
    fn wire_words_round_trip_and_tell_specs_apart() {
        let methods = [
            Method::Fp16,
            Method::Bf16,
            Method::Int8 { block: 256 },
            Method::Int8 { block: 64 },
            Method::TopK { ratio: 0.01 },
            Method::TopK { ratio: 0.02 },
        ];
        let mut seen = Vec::new();
        for method in methods {
            for level0 in [false, true] {
                let s = Spec { method, level0 };
                let (a, b) = s.to_wire();
                assert_eq!(Spec::from_wire(a, b), Some(s));
                assert!(!seen.contains(&(a, b)), "{s}");
                seen.push((a, b));
            }
        }
        assert_eq!(Spec::from_wire(0, 0), None);
        assert_eq!(Spec::from_wire(1, 7), None);
        assert_eq!(Spec::from_wire(9, 0), None);
    }
}
