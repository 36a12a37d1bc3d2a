//! The checked-in headers must equal what build.rs generates from the current sources.

use std::path::Path;

#[test]
fn checked_in_headers_match_generated() {
    let generated = Path::new(env!("HCCL_GENERATED_INCLUDE"));
    let checked_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/hccl");
    for h in ["hccl.h", "hccl_types.h", "hccl_comm.h", "hccl_ext.h"] {
        let g = std::fs::read_to_string(generated.join(h)).expect("generated header");
        let c = std::fs::read_to_string(checked_in.join(h)).unwrap_or_default();
        assert!(
            g == c,
            "include/hccl/{h} is stale: regenerate with `HCCL_UPDATE_HEADERS=1 cargo build`"
        );
    }
}
