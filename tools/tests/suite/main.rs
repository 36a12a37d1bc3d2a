//! The integration tests of the tools, one module per area, linked into one test executable
//! (each executable links the library and the tools). Run one area with
//! `cargo test -p hccl-tools --test suite docs::`.

#[path = "../common/mod.rs"]
mod common;

mod barrier;
mod cli;
mod closed_pipe;
mod compress_runs;
mod device_memory;
mod diag;
mod docs;
mod hand_launch;
mod launcher;
mod mpi_bench;
mod mpirun;
mod output_lines;
mod plot;
mod progress;
mod runs;
mod slurm;
mod timeline;
