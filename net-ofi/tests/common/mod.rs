//! Builds the plugin's shared object and C programs against `include/hccl/hccl_net.h`.

#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// Every line the plugin logged through [`collect`].
pub static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The plugin's logger for tests: keeps each line in [`LOG`].
///
/// # Safety
/// `msg` must be a NUL-terminated string (the plugin's contract).
pub unsafe extern "C" fn collect(_ctx: *mut c_void, _level: c_int, msg: *const c_char) {
    // SAFETY: the caller passes a NUL-terminated line.
    let line = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    LOG.lock().unwrap().push(line);
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `target/<profile>` with `libhccl_net_ofi.so` built: `cargo test` builds the rlib for tests
/// but does not refresh the shared object a C program loads.
pub fn plugin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable");
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>/deps")
                .to_path_buf();
            let profile = dir.file_name().and_then(|s| s.to_str()).unwrap_or("debug");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "hccl-net-ofi", "--lib", "--target-dir"])
                .arg(dir.parent().expect("target dir"))
                .current_dir(workspace());
            match profile {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            assert!(
                cmd.status().expect("run cargo").success(),
                "building the plugin failed"
            );
            let so = dir.join("libhccl_net_ofi.so");
            assert!(so.exists(), "{} missing", so.display());
            so
        })
        .clone()
}

/// Compiles a C source of `net-ofi/ctests/` (or a generated one) into an executable.
pub fn compile(src: &Path, name: &str) -> PathBuf {
    let dir = plugin().parent().expect("dir").join("net-ofi-ctests");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
        ])
        .arg(format!("-I{}", workspace().join("include").display()))
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
