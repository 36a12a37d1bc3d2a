//! The tester under Open MPI's `mpirun` (`scripts/setup.sh` installs it; without it the test
//! says it is skipped, and fails under CI).

use crate::common;
use crate::common::ompi_tmp::OmpiTmp;

use std::process::Command;

#[test]
fn all_reduce_under_mpirun() {
    if !common::have("mpirun") {
        common::skip::skip_unless_ci("mpirun not found (scripts/setup.sh installs openmpi-bin)");
        return;
    }
    let tmp = OmpiTmp::new();
    let mut c = Command::new("mpirun");
    tmp.apply(&mut c);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        c.arg("--allow-run-as-root");
    }
    let o = c
        .args([
            "--oversubscribe",
            "-n",
            "2",
            env!("CARGO_BIN_EXE_all_reduce_test"),
        ])
        .args(["-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-w", "1"])
        .env("HCCL_CONNECT_TIMEOUT", "60")
        .env_remove("HCCL_RANK")
        .env_remove("RANK")
        .env_remove("MASTER_ADDR")
        .env_remove("HCCL_ROOT_ADDR")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}\n{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_end().ends_with("success"))
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert!(err.contains("2 processes (openmpi)"), "{err}");
}
