//! Compiles `csrc/shim.c` (the libfabric calls, which are inline functions in libfabric's headers)
//! with the system C compiler into a static library and links libfabric.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let src = manifest.join("csrc/shim.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("shim.o");
    let st = Command::new(&cc)
        .args([
            "-c", "-fPIC", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        st.success(),
        "compiling {} failed: libfabric's headers (rdma/fabric.h) come with the \
         libfabric-dev package (scripts/setup.sh installs it)",
        src.display()
    );
    let lib = out.join("libhccl_ofi_shim.a");
    let _ = std::fs::remove_file(&lib);
    let st = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("cannot run ar: {e}"));
    assert!(st.success(), "ar failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=hccl_ofi_shim");
    println!("cargo:rustc-link-lib=dylib=fabric");
}
