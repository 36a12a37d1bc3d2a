fn main() -> std::process::ExitCode {
    hccl_tools::diag::main()
}
