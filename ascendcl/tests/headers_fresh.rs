//! The checked-in headers (`include/acl/*.h`) must equal what `build.rs` generated for this build.
//! Regenerate them with `HCCL_UPDATE_HEADERS=1 cargo build -p ascendcl`.

use std::path::Path;

#[test]
fn checked_in_headers_match_generated() {
    // Exported by build.rs with `cargo:rustc-env`; it is `$OUT_DIR/include/acl`.
    let generated = Path::new(env!("ACL_GENERATED_DIR"));
    let checked_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/acl");
    let mut stale = Vec::new();
    for name in ["acl_base.h", "acl_rt.h", "acl.h"] {
        let want = std::fs::read_to_string(generated.join(name))
            .unwrap_or_else(|e| panic!("generated {name} missing in {}: {e}", generated.display()));
        match std::fs::read_to_string(checked_in.join(name)) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{name} differs")),
            Err(e) => stale.push(format!("{name} unreadable: {e}")),
        }
    }
    assert!(
        stale.is_empty(),
        "include/acl is stale ({}); run `HCCL_UPDATE_HEADERS=1 cargo build -p ascendcl`",
        stale.join(", ")
    );
}
