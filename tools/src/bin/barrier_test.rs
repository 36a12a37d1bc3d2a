fn main() -> std::process::ExitCode {
    hccl_tools::main(hccl_tools::Op::Barrier)
}
