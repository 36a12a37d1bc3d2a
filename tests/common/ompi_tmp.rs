//! A temporary directory of its own for each Open MPI launch.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory that one Open MPI launch (`mpirun`, or a singleton's `MPI_Init`) takes as
/// `TMPDIR`; removed on drop, so keep it alive until the launch has ended.
///
/// Open MPI 4 creates its session directory `$TMPDIR/ompi.HOST.UID` by checking and then
/// calling `mkdir`, and gives up ("File exists", `orte_init` failed) when another launch creates
/// it in between. Launches that a test starts together therefore must not share `TMPDIR`. The
/// directory sits directly in the system's temporary directory: Open MPI puts Unix sockets
/// below it, and their paths must stay short.
pub struct OmpiTmp(PathBuf);

impl OmpiTmp {
    /// Creates the directory.
    pub fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hccl-ompi-{}-{n}", std::process::id()));
        // A directory left by an earlier process with the same id is stale.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create a temporary directory for Open MPI");
        OmpiTmp(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Makes `c` use the directory as `TMPDIR`.
    pub fn apply<'c>(&self, c: &'c mut Command) -> &'c mut Command {
        c.env("TMPDIR", &self.0)
    }
}

impl Drop for OmpiTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
