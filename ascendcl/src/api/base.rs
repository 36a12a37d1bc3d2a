//! Helpers declared in `acl_base.h`; usable without `aclInit`.

use crate::codes::ACL_ERROR_INVALID_PARAM;
use crate::error::fail;
use crate::fp16;
use crate::types::{aclDataType, aclDataTypeRaw, aclFloat16};

/// Converts a half-precision value to `float`.
#[no_mangle]
pub extern "C" fn aclFloat16ToFloat(value: aclFloat16) -> f32 {
    acl_api_value!("aclFloat16ToFloat", f32::NAN, { fp16::f16_to_f32(value) })
}

/// Converts a `float` to half precision (round to nearest even; overflow gives infinity).
#[no_mangle]
pub extern "C" fn aclFloatToFloat16(value: f32) -> aclFloat16 {
    acl_api_value!("aclFloatToFloat16", 0x7e00, { fp16::f32_to_f16(value) })
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
