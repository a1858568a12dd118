//! The `agenteval` binary: parse, run, map to an exit code. Everything else is in the library.

fn main() -> std::process::ExitCode {
    agenteval::main()
}
