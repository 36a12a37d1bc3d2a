fn main() -> std::process::ExitCode {
    hccl_tools::plot::main()
}
