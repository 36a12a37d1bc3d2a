fn main() -> std::process::ExitCode {
    hccl_tools::launcher::main()
}
