//! The result codes of `libhccl.so` and `libascendcl.so`, from one table.
//!
//! [`HcclResult`] and [`AclCode`] are written out in `src/table.rs` (cbindgen reads the former
//! for `hccl_types.h`); `build.rs` derives from that file the internal [`ErrorKind`], the
//! descriptions (`HcclGetErrorString`, the ACL runtime's messages), the `aclError` constants in
//! [`acl`] and the alias list from which `acl_base.h` gets its `static const int` lines.

#![allow(non_camel_case_types)]
#![deny(unsafe_code)]

include!("table.rs");
include!(concat!(env!("OUT_DIR"), "/derived.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hccl_codes_round_trip() {
        for r in HcclResult::ALL {
            assert_eq!(HcclResult::from_raw(r as u32), Some(r));
            assert!(!r.describe().to_bytes().is_empty(), "{}", r.name());
            assert!(r.name().starts_with("HCCL_"));
        }
        assert_eq!(HcclResult::from_raw(25), None);
        assert_eq!(HcclResult::HCCL_E_IN_STATUS as u32, 1041);
        assert_eq!(HcclResult::HCCL_E_PARA.describe(), c"parameter error");
    }

    #[test]
    fn every_error_code_has_one_kind_with_its_value() {
        for r in HcclResult::ALL {
            match r {
                HcclResult::HCCL_SUCCESS | HcclResult::HCCL_E_RESERVED => {
                    assert_eq!(r.kind(), None)
                }
                _ => {
                    let k = r.kind().expect("error code without a kind");
                    assert_eq!(k.code(), r as u32);
                    assert_eq!(k.result(), r);
                    assert_eq!(ErrorKind::from_code(r as u32), Some(k));
                    assert_eq!(HcclResult::from(k), r);
                }
            }
        }
        assert_eq!(ErrorKind::ALL.len(), HcclResult::ALL.len() - 2);
        assert_eq!(
            ErrorKind::OpenFile.result(),
            HcclResult::HCCL_E_OPEN_FILE_FAILURE
        );
        assert_eq!(ErrorKind::Para.describe(), "parameter error");
    }

    #[test]
    fn acl_codes_and_aliases() {
        for c in AclCode::ALL {
            assert_eq!(AclCode::from_raw(c.value()), Some(c));
            assert!(c.name().starts_with("ACL_"));
        }
        assert_eq!(acl::ACL_ERROR_INVALID_PARAM, 100_000);
        assert_eq!(acl::ACL_ERROR_NONE, acl::ACL_SUCCESS);
        assert_eq!(ACL_ALIASES[0].0, "ACL_ERROR_NONE");
        assert_eq!(ACL_ERROR_NONE, AclCode::ACL_SUCCESS);
    }
}
