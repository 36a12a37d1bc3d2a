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

/// `bench/lib_ab.c` on two copies of this build's `libhccl.so` and on MPI, 2 processes: rows
/// for the three contenders with checked results, each operation's own check passing, and an
/// injected fault reported as `failed` with exit status 1.
#[test]
fn lib_ab_times_builds_side_by_side_in_one_launch() {
    let have = |p: &str| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(have("mpirun") && have("mpicc")) {
        crate::common::skip::skip_unless_ci(
            "mpirun or mpicc not found (scripts/setup.sh installs Open MPI)",
        );
        return;
    }
    let dir = out_dir().join("lib_ab");
    let st = Command::new(root().join("bench/build.sh"))
        .arg(&dir)
        .arg("lib_ab")
        .env("BENCH_WERROR", "1")
        .status()
        .expect("run bench/build.sh");
    assert!(st.success(), "bench/build.sh lib_ab failed");
    let libs: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| {
            let p = dir.join(format!("libhccl_{n}.so"));
            std::fs::copy(lib_dir().join("libhccl.so"), &p).expect("copy libhccl.so");
            p
        })
        .collect();
    let launch = |op: &str, fault: bool| {
        let tmp = crate::common::ompi_tmp::OmpiTmp::new();
        let mut c = Command::new("timeout");
        tmp.apply(&mut c)
            .args([
                "120",
                "mpirun",
                "--oversubscribe",
                "--allow-run-as-root",
                "-n",
                "2",
            ])
            .arg(dir.join("lib_ab"))
            .args([
                "-o", op, "-b", "64", "-n", "50", "-R", "3", "-w", "5", "-r", "1",
            ])
            .args(&libs)
            .arg("mpi")
            .env("HCCL_CONNECT_TIMEOUT", "30")
            .env("HCCL_EXEC_TIMEOUT", "60");
        if fault {
            c.env("HCCL_TEST_FAULT_INJECT", "corrupt");
        } else {
            c.env_remove("HCCL_TEST_FAULT_INJECT");
        }
        let o = c.output().expect("run mpirun");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        // Rows: contender, min, median, mean, median over the first, check.
        let rows: Vec<Vec<String>> = out
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("contender"))
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        (o.status.code(), rows, format!("{out}\n{err}"))
    };
    for op in ["broadcast", "reduce", "reduce_scatter", "alltoall"] {
        let (code, rows, text) = launch(op, false);
        assert_eq!(code, Some(0), "{op}: {text}");
        let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
        let want: Vec<String> = libs.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [want[0].as_str(), want[1].as_str(), "mpi"],
            "{op}: {text}"
        );
        for r in &rows {
            assert_eq!(r.len(), 6, "{op}: {text}");
            let t: Vec<f64> = r[1..5].iter().map(|x| x.parse().expect(x)).collect();
            assert!(
                t[0] > 0.0 && t[0] <= t[1] && t[1] > 0.0 && t[2] > 0.0,
                "{op}: {text}"
            );
            assert_eq!(r[5], "success", "{op}: {text}");
        }
        assert_eq!(rows[0][4], "1.000", "{op}: {text}");
    }
    let (code, rows, text) = launch("all_reduce", true);
    assert_eq!(code, Some(1), "{text}");
    let checks: Vec<&str> = rows.iter().map(|r| r[5].as_str()).collect();
    assert_eq!(checks, ["failed", "success", "success"], "{text}");
    assert!(text.contains("expected"), "{text}");
}
