//! Element types and reduction operators as the library sees them internally.
//!
//! Values match the C ABI (`HcclDataType`, `HcclReduceOp`) so conversion from a raw C integer is
//! a checked table lookup, never a transmute.

/// Element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Int8,
    Int16,
    Int32,
    Fp16,
    Fp32,
    Int64,
    Uint64,
    Uint8,
    Uint16,
    Uint32,
    Fp64,
    Bf16,
    Int128,
    Hif8,
    Fp8E4M3,
    Fp8E5M2,
    Fp8E8M0,
}

impl DataType {
    /// Every data type, in ABI order.
    pub const ALL: [DataType; 17] = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Fp64,
        DataType::Bf16,
        DataType::Int128,
        DataType::Hif8,
        DataType::Fp8E4M3,
        DataType::Fp8E5M2,
        DataType::Fp8E8M0,
    ];

    /// Decodes the C ABI value; `None` for unknown or reserved values.
    pub fn from_raw(v: u32) -> Option<DataType> {
        Some(match v {
            0 => DataType::Int8,
            1 => DataType::Int16,
            2 => DataType::Int32,
            3 => DataType::Fp16,
            4 => DataType::Fp32,
            5 => DataType::Int64,
            6 => DataType::Uint64,
            7 => DataType::Uint8,
            8 => DataType::Uint16,
            9 => DataType::Uint32,
            10 => DataType::Fp64,
            11 => DataType::Bf16,
            12 => DataType::Int128,
            14 => DataType::Hif8,
            15 => DataType::Fp8E4M3,
            16 => DataType::Fp8E5M2,
            17 => DataType::Fp8E8M0,
            _ => return None,
        })
    }

    /// The C ABI value.
    pub fn raw(self) -> u32 {
        match self {
            DataType::Int8 => 0,
            DataType::Int16 => 1,
            DataType::Int32 => 2,
            DataType::Fp16 => 3,
            DataType::Fp32 => 4,
            DataType::Int64 => 5,
            DataType::Uint64 => 6,
            DataType::Uint8 => 7,
            DataType::Uint16 => 8,
            DataType::Uint32 => 9,
            DataType::Fp64 => 10,
            DataType::Bf16 => 11,
            DataType::Int128 => 12,
            DataType::Hif8 => 14,
            DataType::Fp8E4M3 => 15,
            DataType::Fp8E5M2 => 16,
            DataType::Fp8E8M0 => 17,
        }
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::Int8
            | DataType::Uint8
            | DataType::Hif8
            | DataType::Fp8E4M3
            | DataType::Fp8E5M2
            | DataType::Fp8E8M0 => 1,
            DataType::Int16 | DataType::Uint16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Fp32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Fp64 => 8,
            DataType::Int128 => 16,
        }
    }

    /// Whether reductions are defined for this type on the host (the 8-bit float formats and
    /// int128 are data-movement only).
    pub fn reducible(self) -> bool {
        !matches!(
            self,
            DataType::Int128
                | DataType::Hif8
                | DataType::Fp8E4M3
                | DataType::Fp8E5M2
                | DataType::Fp8E8M0
        )
    }

    /// Short lowercase name as used by the vendor tools (`fp32`, `int8`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Int16 => "int16",
            DataType::Int32 => "int32",
            DataType::Fp16 => "fp16",
            DataType::Fp32 => "fp32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Uint8 => "uint8",
            DataType::Uint16 => "uint16",
            DataType::Uint32 => "uint32",
            DataType::Fp64 => "fp64",
            DataType::Bf16 => "bfp16",
            DataType::Int128 => "int128",
            DataType::Hif8 => "hif8",
            DataType::Fp8E4M3 => "fp8e4m3",
            DataType::Fp8E5M2 => "fp8e5m2",
            DataType::Fp8E8M0 => "fp8e8m0",
        }
    }
}

/// Reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceOp {
    /// All operators, in ABI order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// Decodes the C ABI value; `None` for unknown or reserved values.
    pub fn from_raw(v: u32) -> Option<ReduceOp> {
        Some(match v {
            0 => ReduceOp::Sum,
            1 => ReduceOp::Prod,
            2 => ReduceOp::Max,
            3 => ReduceOp::Min,
            _ => return None,
        })
    }

    /// The C ABI value.
    pub fn raw(self) -> u32 {
        self as u32
    }

    /// Lowercase name (`sum`, `prod`, `max`, `min`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_roundtrip() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_raw(t.raw()), Some(t));
        }
        assert_eq!(DataType::from_raw(13), None);
        assert_eq!(DataType::from_raw(255), None);
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_raw(op.raw()), Some(op));
        }
        assert_eq!(ReduceOp::from_raw(255), None);
    }
}
