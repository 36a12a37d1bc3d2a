//! The root info decoder (`HcclCommInitRootInfo` reads 4108 bytes from the caller).
//!
//! The first byte picks the mode: 0, the bytes are decoded as given (length checks); 1, padded
//! with zeros to the blob size; 2, padded and with the checksum recomputed, so the fields
//! behind the checksum are reached too. Whatever decodes must encode back to the same value.

#![no_main]

use hccl::base::topology::fnv64;
use hccl::comm::root_info::{RootInfo, ROOT_INFO_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let blob = match mode % 3 {
        0 => rest.to_vec(),
        m => {
            let mut b = vec![0u8; ROOT_INFO_BYTES];
            let n = rest.len().min(ROOT_INFO_BYTES);
            b[..n].copy_from_slice(&rest[..n]);
            if m == 2 {
                let sum = fnv64(&b[..64]);
                b[64..72].copy_from_slice(&sum.to_le_bytes());
            }
            b
        }
    };
    if let Ok(info) = RootInfo::decode(&blob) {
        assert_eq!(RootInfo::decode(&info.encode()), Ok(info));
    }
});
