//! Installs the CANN-shaped prefix with `scripts/install.sh` (this test run's cargo profile,
//! same target directory) and uses it as a user would: `source PREFIX/set_env.sh`, then build
//! and run the programs of `ctests/` with the documented commands — thread per device, process
//! per device under `mpirun`, `dlopen` + `dlsym` of every API name, `LD_PRELOAD` over a
//! program linked against a decoy libhccl.so, and the CMake and pkg-config packages used by the
//! consumer projects of `ctests/consumers/`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>`, the directory above this test executable's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The installed prefix (installed once per test process).
fn prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = profile_dir();
        // `cargo test` builds into target/debug with the test profile: installing from that
        // profile reuses its build, where the dev profile would compile everything again.
        let profile = match dir.file_name().and_then(|s| s.to_str()).expect("profile") {
            "debug" => "test",
            other => other,
        };
        // A fixed name: each run replaces the previous prefix instead of accumulating copies.
        let prefix = dir.join("install-test");
        let _ = std::fs::remove_dir_all(&prefix);
        let out = Command::new("bash")
            .arg(root().join("scripts/install.sh"))
            .args(["--profile", profile])
            .arg(&prefix)
            .env("CARGO_TARGET_DIR", dir.parent().expect("target dir"))
            .output()
            .expect("run scripts/install.sh");
        assert!(
            out.status.success(),
            "install.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        prefix
    })
}

/// A scratch directory for one test's build products.
fn work(name: &str) -> PathBuf {
    let d = prefix().with_extension(format!("work-{name}"));
    std::fs::create_dir_all(&d).expect("create work dir");
    d
}

/// Runs `script` in bash after `source PREFIX/set_env.sh`, in `dir`; returns stdout+stderr and
/// whether it succeeded.
fn shell(dir: &Path, script: &str) -> (bool, String) {
    let full = format!(
        "set -e\nsource '{}/set_env.sh'\nexport CT='{}'\n{script}",
        prefix().display(),
        root().join("ctests").display()
    );
    // Scripts run together, and those that launch Open MPI must not share its session directory.
    let tmp = common::ompi_tmp::OmpiTmp::new();
    let out = Command::new("bash")
        .env("TMPDIR", tmp.path())
        .args(["-c", &full])
        .current_dir(dir)
        // A broken build must fail quickly rather than wait out the default timeouts.
        .env("HCCL_CONNECT_TIMEOUT", "30")
        .env("HCCL_EXEC_TIMEOUT", "60")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn shell_ok(dir: &Path, script: &str) -> String {
    let (ok, text) = shell(dir, script);
    assert!(ok, "script failed:\n{script}\n--- output ---\n{text}");
    text
}

/// The hardening flags of the documented build command.
const CXXFLAGS: &str = "-std=c++14 -Werror -fPIE -pie -O2 -Wl,-z,relro -Wl,-z,now \
                        -Wl,--copy-dt-needed-entries";
const LINK: &str = "-I$ASCEND_HOME_PATH/include -L$ASCEND_HOME_PATH/lib64 -lhccl -lascendcl";

#[test]
fn prefix_is_laid_out_like_cann_and_set_env_exports_it() {
    let p = prefix();
    for f in [
        "include/hccl/hccl.h",
        "include/hccl/hccl_types.h",
        "include/hccl/hccl_comm.h",
        "include/acl/acl.h",
        "include/acl/acl_rt.h",
        "include/acl/acl_base.h",
        "lib64/libhccl.so",
        "lib64/libhccl.a",
        "lib64/libascendcl.so",
        "lib64/libascendcl.a",
        // setup.sh installs libfabric's headers, so the net plugin is built and installed.
        "lib64/libhccl_net_ofi.so",
        "include/hccl/hccl_net.h",
        "bin/all_reduce_test",
        "bin/hccl_bench",
        "set_env.sh",
    ] {
        assert!(p.join(f).is_file(), "{f} missing from {}", p.display());
    }
    let out = shell_ok(
        &work("env"),
        "echo \"home=$ASCEND_HOME_PATH\"\necho \"ld=$LD_LIBRARY_PATH\"\n\
         command -v all_reduce_test\nreadelf -d \"$ASCEND_HOME_PATH/lib64/libhccl.so\"",
    );
    let pd = p.display().to_string();
    assert!(out.contains(&format!("home={pd}\n")), "{out}");
    assert!(out.contains(&format!("ld={pd}/lib64")), "{out}");
    assert!(out.contains(&format!("{pd}/bin/all_reduce_test")), "{out}");
    // libhccl finds the runtime at run time: no link-time dependency on it.
    assert!(out.contains("(NEEDED)"), "readelf output: {out}");
    assert!(
        !out.contains("libascendcl"),
        "libhccl.so needs libascendcl.so:\n{out}"
    );
    // The plugin is loaded at run time: libfabric is no dependency of libhccl.so.
    assert!(
        !out.contains("libfabric"),
        "libhccl.so needs libfabric:\n{out}"
    );
}

#[test]
fn thread_per_device_cann_program_builds_with_documented_command() {
    let dir = work("threads");
    let out = shell_ok(
        &dir,
        &format!(
            "g++ {CXXFLAGS} \"$CT/cann_threads.cc\" {LINK} -o cann_threads -pthread\n\
             ./cann_threads 4"
        ),
    );
    assert!(out.contains("cann_threads: ok (4 devices)"), "{out}");
}

#[test]
fn process_per_device_cann_program_runs_under_mpirun() {
    let dir = work("mpi");
    let out = shell_ok(
        &dir,
        &format!(
            "mpicxx {CXXFLAGS} \"$CT/cann_mpi.cc\" {LINK} -o cann_mpi\n\
             timeout 120 mpirun -n 4 --oversubscribe --allow-run-as-root ./cann_mpi"
        ),
    );
    assert!(out.contains("cann_mpi: ok (4 processes)"), "{out}");
}

/// Every function the installed HCCL headers declare (not the inline helpers).
fn declared_api_names() -> Vec<String> {
    let mut names = Vec::new();
    for h in ["hccl.h", "hccl_comm.h", "hccl_types.h"] {
        let text = std::fs::read_to_string(prefix().join("include/hccl").join(h)).expect("header");
        for line in text.lines() {
            let t = line.trim_start();
            if line.starts_with(' ') || t.starts_with('*') || t.starts_with("static") {
                continue;
            }
            if t.starts_with("typedef") || t.starts_with('#') || !t.contains(");") {
                continue;
            }
            let Some(open) = t.find('(') else { continue };
            let name = t[..open]
                .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            if name.starts_with("Hccl") {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn dlopen_and_dlsym_reach_every_api_name() {
    let names = declared_api_names();
    assert!(
        names.len() >= 50,
        "only {} names parsed: {names:?}",
        names.len()
    );
    let dir = work("dlopen");
    let out = shell_ok(
        &dir,
        &format!(
            "cc -std=c99 -Wall -Wextra -Werror -O2 \"$CT/dlopen_all.c\" \
             -I$ASCEND_HOME_PATH/include -ldl -pthread -o dlopen_all\n\
             ./dlopen_all {}",
            names.join(" ")
        ),
    );
    assert!(
        out.contains(&format!("dlopen_all: ok ({} symbols)", names.len())),
        "{out}"
    );
    // The check can fail: a name the library does not export is reported.
    let (ok, text) = shell(&dir, "./dlopen_all HcclAllReduce HcclNoSuchFunction");
    assert!(!ok && text.contains("HcclNoSuchFunction"), "{text}");
}

#[test]
fn ld_preload_takes_over_from_a_decoy_libhccl() {
    let dir = work("preload");
    let build = "mkdir -p decoy\n\
         cc -shared -fPIC -O2 \"$CT/decoy_hccl.c\" -o decoy/libhccl.so\n\
         cc -std=c99 -Wall -Wextra -Werror -O2 \"$CT/preload_decoy.c\" \
         -I$ASCEND_HOME_PATH/include -Ldecoy -Wl,-rpath,\"$PWD/decoy\" -lhccl -pthread \
         -o preload_decoy";
    shell_ok(&dir, build);
    // Without the preload the program reaches the decoy, which fails loudly.
    let (ok, text) = shell(&dir, "unset LD_LIBRARY_PATH\n./preload_decoy");
    assert!(!ok && text.contains("DECOY libhccl.so called"), "{text}");
    let out = shell_ok(
        &dir,
        "unset LD_LIBRARY_PATH\nLD_PRELOAD=\"$ASCEND_HOME_PATH/lib64/libhccl.so\" ./preload_decoy",
    );
    assert!(out.contains("preload_decoy: ok"), "{out}");
    assert!(!out.contains("DECOY"), "{out}");
}

#[test]
fn overlap_program_builds_and_runs_on_a_small_message() {
    let dir = work("overlap");
    let out = shell_ok(
        &dir,
        &format!("g++ {CXXFLAGS} \"$CT/overlap.cc\" {LINK} -o overlap -pthread\n./overlap 2 1"),
    );
    assert!(out.contains("overlap: 2 ranks, 1 MiB"), "{out}");
}

/// Whether `tool` runs (`tool --version`).
fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The library's version, as the packages must advertise it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs `script` in bash in `dir` with a clean environment for the package lookups (no
/// set_env.sh: the packages must be found from the prefix alone, as a user's build does).
fn plain_shell(dir: &Path, script: &str) -> (bool, String) {
    let out = Command::new("bash")
        .args(["-c", &format!("set -e\n{script}")])
        .current_dir(dir)
        .env("P", prefix())
        .env("CT", root().join("ctests"))
        .env("HCCL_CONNECT_TIMEOUT", "30")
        .env("HCCL_EXEC_TIMEOUT", "60")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .env_remove("PKG_CONFIG_PATH")
        .env_remove("CMAKE_PREFIX_PATH")
        .output()
        .expect("run bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn cmake_project_finds_the_package_and_runs_a_two_rank_allreduce() {
    if !have("cmake") || !have("make") {
        common::skip::skip_unless_ci("cmake or make not installed");
        return;
    }
    let dir = work("cmake");
    let _ = std::fs::remove_dir_all(dir.join("build"));
    // Configured with CMAKE_PREFIX_PATH only; the program runs without LD_LIBRARY_PATH, so
    // the imported targets also gave it a usable build rpath.
    let (ok, out) = plain_shell(
        &dir,
        "cmake -S \"$CT/consumers/cmake\" -B build -DCMAKE_PREFIX_PATH=\"$P\" \
         -DCMAKE_BUILD_TYPE=Release\n\
         cmake --build build\n\
         ./build/package_allreduce",
    );
    assert!(ok, "CMake consumer failed:\n{out}");
    assert!(out.contains("package_allreduce: ok (2 ranks)"), "{out}");

    // The version file: a newer request is refused, an exact one accepted; the targets carry
    // the prefix's include directory and libraries.
    let probe = dir.join("probe");
    std::fs::create_dir_all(&probe).expect("probe dir");
    std::fs::write(
        probe.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\nproject(probe LANGUAGES NONE)\n\
         find_package(hccl ${WANT} CONFIG REQUIRED)\n\
         get_target_property(inc hccl::hccl INTERFACE_INCLUDE_DIRECTORIES)\n\
         get_target_property(lib ascendcl::ascendcl IMPORTED_LOCATION)\n\
         message(STATUS \"probe: ${hccl_VERSION} inc=${inc} lib=${lib}\")\n",
    )
    .expect("write probe project");
    let configure = |want: &str| {
        plain_shell(
            &probe,
            &format!("rm -rf b && cmake -S . -B b -DCMAKE_PREFIX_PATH=\"$P\" -DWANT={want} 2>&1"),
        )
    };
    let (ok, out) = configure(VERSION);
    let pd = prefix().display().to_string();
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "probe: {VERSION} inc={pd}/include lib={pd}/lib64/libascendcl.so"
        )),
        "{out}"
    );
    let (ok, out) = configure("99.0");
    assert!(
        !ok && out.contains("99.0"),
        "a version 99.0 request succeeded:\n{out}"
    );
}

#[test]
fn makefile_project_with_pkg_config_runs_a_two_rank_allreduce() {
    if !have("pkg-config") || !have("make") {
        common::skip::skip_unless_ci("pkg-config or make not installed");
        return;
    }
    let dir = work("pkgconfig");
    let _ = std::fs::remove_file(dir.join("package_allreduce"));
    let pd = prefix().display().to_string();
    let (ok, out) = plain_shell(
        &dir,
        "export PKG_CONFIG_PATH=\"$P/lib64/pkgconfig\"\n\
         echo \"version=$(pkg-config --modversion hccl) $(pkg-config --modversion ascendcl)\"\n\
         echo \"flags=$(pkg-config --cflags --libs hccl)\"\n\
         make -f \"$CT/consumers/pkgconfig/Makefile\"\n\
         LD_LIBRARY_PATH=\"$(pkg-config --variable=libdir hccl)\" ./package_allreduce",
    );
    assert!(ok, "pkg-config consumer failed:\n{out}");
    assert!(
        out.contains(&format!("version={VERSION} {VERSION}\n")),
        "{out}"
    );
    assert!(
        out.contains(&format!("flags=-I{pd}/include -L{pd}/lib64 -lhccl")),
        "{out}"
    );
    assert!(out.contains("package_allreduce: ok (2 ranks)"), "{out}");
}

#[test]
fn set_env_points_pkg_config_and_cmake_at_the_prefix() {
    let out = shell_ok(
        &work("env-pkg"),
        "echo \"pc=$PKG_CONFIG_PATH\"\necho \"cm=$CMAKE_PREFIX_PATH\"",
    );
    let pd = prefix().display().to_string();
    assert!(out.contains(&format!("pc={pd}/lib64/pkgconfig")), "{out}");
    assert!(out.contains(&format!("cm={pd}")), "{out}");
    for f in [
        "lib64/pkgconfig/hccl.pc",
        "lib64/pkgconfig/ascendcl.pc",
        "lib64/cmake/hccl/hcclConfig.cmake",
        "lib64/cmake/hccl/hcclConfigVersion.cmake",
        "share/cmake/hccl/hcclConfig.cmake",
        "share/cmake/hccl/hcclConfigVersion.cmake",
    ] {
        assert!(prefix().join(f).is_file(), "{f} missing");
    }
}
