fn main() -> std::process::ExitCode {
    plegd::cli::main()
}
