//! The `strait` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    strait::cli::main()
}
