//! Builds `ctests/acl_basic.c` against the checked-in headers and a freshly built
//! `libascendcl.so` and runs it; also checks the headers compile as C99 and C++11 with warnings
//! as errors.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>/`: the parent of the `deps/` directory holding this test executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps layout")
        .to_path_buf()
}

/// Builds the cdylib into `target/<profile>/` with the profile of this test run. `cargo test`
/// only links the rlib into tests and leaves no up-to-date `libascendcl.so` there, so the test
/// asks cargo for it (a no-op when fresh). Cross-compiled layouts (`target/<triple>/...`) are not
/// handled.
fn build_cdylib() -> PathBuf {
    let dir = profile_dir();
    let target_dir = dir.parent().expect("target dir");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "ascendcl", "--lib", "--target-dir"])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match dir.file_name().and_then(|n| n.to_str()) {
        // `cargo test` builds into target/debug with the test profile: the same profile
        // reuses its build, where the dev profile would compile everything again.
        Some("debug") => {
            cmd.args(["--profile", "test"]);
        }
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
        None => panic!("cannot tell the cargo profile from {}", dir.display()),
    }
    run(&mut cmd);
    dir
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include")
}

fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ascendcl-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn c_program_runs_against_the_cdylib() {
    let lib_dir = build_cdylib();
    assert!(
        lib_dir.join("libascendcl.so").exists(),
        "{} has no libascendcl.so after `cargo build -p ascendcl`",
        lib_dir.display()
    );
    let dir = scratch_dir("cprog");
    let exe = dir.join("acl_basic");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("ctests/acl_basic.c");
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lascendcl")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display())));
    let out = run(Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env("ASCEND_GLOBAL_LOG_LEVEL", "4"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("acl_basic: ok"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn headers_compile_standalone_as_c99_and_cxx11() {
    let dir = scratch_dir("hdr");
    for header in ["acl/acl_base.h", "acl/acl_rt.h", "acl/acl.h"] {
        // Each header on its own, and twice (include guards).
        let unit = format!(
            "#include \"{header}\"\n#include \"{header}\"\nint main(void) {{ return 0; }}\n"
        );
        let c = dir.join("unit.c");
        std::fs::write(&c, &unit).unwrap();
        run(Command::new("cc")
            .args([
                "-std=c99",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-I",
            ])
            .arg(include_dir())
            .arg(&c));
        let cpp = dir.join("unit.cpp");
        std::fs::write(&cpp, &unit).unwrap();
        run(Command::new("c++")
            .args([
                "-std=c++11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-I",
            ])
            .arg(include_dir())
            .arg(&cpp));
    }
    let _ = std::fs::remove_dir_all(dir);
}
