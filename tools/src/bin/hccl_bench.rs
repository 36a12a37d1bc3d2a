//! The project's demo benchmark: AllReduce (fp32 sum by default) with ranks as threads over
//! 8 B .. 64 MiB (×2), four ranks unless `-t` says otherwise. It is `all_reduce_test` with
//! different defaults, and takes the same flags.

fn main() -> std::process::ExitCode {
    hccl_tools::run(hccl_tools::Op::AllReduce, &hccl_tools::Defaults::bench())
}
