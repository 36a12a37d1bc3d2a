//! Helpers declared in `acl_base.h`; usable without `aclInit`.

use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::fail;
use crate::types::{aclDataType, aclDataTypeRaw, aclFloat16};

/// Converts a half-precision value to `float` (exact; a NaN stays a NaN).
#[no_mangle]
pub extern "C" fn aclFloat16ToFloat(value: aclFloat16) -> f32 {
    acl_api_value!("aclFloat16ToFloat", f32::NAN, {
        half::f16::from_bits(value).to_f32()
    })
}

/// Converts a `float` to half precision (round to nearest even; overflow gives infinity; a
/// NaN stays a quiet NaN).
#[no_mangle]
pub extern "C" fn aclFloatToFloat16(value: f32) -> aclFloat16 {
    acl_api_value!("aclFloatToFloat16", 0x7e00, {
        half::f16::from_f32(value).to_bits()
    })
}

/// Size in bytes of one element of `dataType`; 0 for `ACL_DT_UNDEFINED` or an unknown value.
#[no_mangle]
pub extern "C" fn aclDataTypeSize(dataType: aclDataTypeRaw) -> usize {
    acl_api_value!("aclDataTypeSize", 0, {
        match aclDataType::from_raw(dataType) {
            Some(t) => t.size(),
            None => {
                fail(
                    ACL_ERROR_INVALID_PARAM,
                    format!("unknown data type {dataType}"),
                );
                0
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{aclFloat16ToFloat as to_f32, aclFloatToFloat16 as to_f16};

    #[test]
    fn known_values() {
        assert_eq!(to_f16(1.0), 0x3c00);
        assert_eq!(to_f16(-2.0), 0xc000);
        assert_eq!(to_f16(65504.0), 0x7bff);
        assert_eq!(to_f16(65520.0), 0x7c00);
        assert_eq!(to_f16(1.0e6), 0x7c00);
        assert_eq!(to_f16(0.0), 0);
        assert_eq!(to_f16(-0.0), 0x8000);
        assert_eq!(to_f16(2f32.powi(-24)), 0x0001);
        assert_eq!(to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(to_f16(2f32.powi(-14)), 0x0400);
        assert_eq!(to_f16(f32::NAN) & 0x7e00, 0x7e00);
        assert_eq!(to_f32(0x3555), 0.333_251_95);
        assert_eq!(to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(to_f32(0x7e01).is_nan());
    }

    #[test]
    fn ties_round_to_even() {
        // 1 + 2^-11 lies halfway between 1.0 and the next half; even mantissa (1.0) wins.
        assert_eq!(to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        // 1 + 3*2^-11 lies halfway between odd 0x3c01 and even 0x3c02.
        assert_eq!(to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
    }

    #[test]
    fn all_halves_round_trip() {
        for h in 0..=u16::MAX {
            let f = to_f32(h);
            if f.is_nan() {
                assert_eq!(h & 0x7c00, 0x7c00, "{h:#06x}");
                continue;
            }
            assert_eq!(to_f16(f), h, "bits {h:#06x}");
        }
    }
}
