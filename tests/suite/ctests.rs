//! Builds the C and C++ programs in `ctests/` against `include/` and the built `libhccl.so`,
//! exactly as a user would, and runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding the libraries of this build profile (`target/<profile>`), with
/// `libhccl.so` rebuilt first: `cargo test` compiles the library for the tests but does not
/// refresh the shared object that C programs link.
fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable path");
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>/deps/<test>")
                .to_path_buf();
            let profile = dir.file_name().and_then(|s| s.to_str()).unwrap_or("debug");
            let target_dir = dir.parent().expect("target dir");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "hccl", "--lib", "--target-dir"])
                .arg(target_dir)
                .current_dir(root());
            match profile {
                // `cargo test` builds into target/debug with the test profile: the same profile
                // reuses its build, where the dev profile would compile everything again.
                "debug" => {
                    cmd.args(["--profile", "test"]);
                }
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            let st = cmd.status().expect("run cargo build");
            assert!(st.success(), "building libhccl.so failed");
            assert!(
                dir.join("libhccl.so").exists(),
                "libhccl.so not found in {}",
                dir.display()
            );
            dir
        })
        .clone()
}

fn out_dir() -> PathBuf {
    let d = lib_dir().join("ctests");
    std::fs::create_dir_all(&d).expect("create ctests output dir");
    d
}

fn run(cmd: &mut Command) -> String {
    // A broken build must fail the test quickly rather than wait out the default timeouts.
    cmd.env("HCCL_CONNECT_TIMEOUT", "30")
        .env("HCCL_EXEC_TIMEOUT", "60");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{text}",
        out.status
    );
    text
}

/// Compiles `src` (C or C++) and returns the executable's path.
fn build(src: &str, std: &str, extra: &[&str]) -> PathBuf {
    let cxx = src.ends_with(".cpp");
    let exe = out_dir().join(Path::new(src).file_stem().expect("file stem"));
    let lib = lib_dir();
    let mut cmd = Command::new(if cxx { "c++" } else { "cc" });
    cmd.arg(format!("-std={std}"))
        .args(["-Wall", "-Wextra", "-Werror", "-O2"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(root().join("ctests").join(src))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lhccl")
        .args(extra);
    run(&mut cmd);
    exe
}

#[test]
fn headers_compile_as_c99_and_cxx11() {
    let dir = out_dir();
    let c = dir.join("all_headers.c");
    std::fs::write(
        &c,
        "#include \"hccl/hccl.h\"\n#include \"hccl/hccl_types.h\"\n#include \"hccl/hccl_comm.h\"\n#include \"hccl/hccl_ext.h\"\nint main(void) { return 0; }\n",
    )
    .expect("write probe");
    let inc = format!("-I{}", root().join("include").display());
    for (compiler, std) in [("cc", "-std=c99"), ("c++", "-std=c++11")] {
        let mut cmd = Command::new(compiler);
        cmd.args([
            std,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ])
        .arg(&inc);
        if compiler == "c++" {
            cmd.args(["-x", "c++"]);
        }
        run(cmd.arg(&c));
    }
}

#[test]
fn abi_layout_asserts() {
    let exe = build("abi_layout.c", "c11", &[]);
    run(&mut Command::new(exe));
}

#[test]
fn compressed_allreduce_through_the_extension_header() {
    let exe = build("compressed_ext.c", "c99", &["-pthread", "-lm"]);
    let out = run(&mut Command::new(exe));
    assert!(out.contains("compressed_ext: ok"), "{out}");
}

#[test]
fn thread_per_rank_program() {
    let exe = build("threads_collectives.c", "c99", &["-pthread"]);
    let out = run(&mut Command::new(exe));
    assert!(out.contains("threads_collectives: ok"), "{out}");
}

#[test]
fn fork_based_multi_process_program() {
    let exe = build("fork_ranks.c", "c99", &[]);
    let out = run(&mut Command::new(exe));
    assert!(out.contains("fork_ranks: ok"), "{out}");
}

#[test]
fn cxx_program_with_config_init() {
    let exe = build("config_init.cpp", "c++11", &["-pthread"]);
    let out = run(&mut Command::new(exe));
    assert!(out.contains("config_init: ok"), "{out}");
}
