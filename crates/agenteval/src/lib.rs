//! The agenteval command line: argument parsing, command dispatch, output and exit codes; and
//! [`api`], the entry point for programs that run and compare from Rust (docs/library.md).
//!
//! Exit codes (documented in the README): 0 ok, 1 a check failed (gate or bundle validation),
//! 2 usage or configuration error, 3 run incomplete, 4 operation failed (storage, index,
//! backend).

/// `print!` for a command's output. A reader that went away (`agenteval runs list | head`)
/// ends the process quietly, as it does any Unix tool, instead of a panic.
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($arg)*)
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            std::process::exit(0);
        }
    }};
}

/// `println!` with the same care as `say_raw!`.
macro_rules! say {
    ($($arg:tt)*) => {
        say_raw!("{}\n", format_args!($($arg)*))
    };
}

mod adaptive;
mod agents;
mod analyze;
pub mod api;
mod audit;
mod certify;
mod ci;
mod cli;
mod commands;
mod export;
mod gateway;
mod history;
mod images;
mod import;
mod import_otlp;
mod inspect;
mod interchange;
mod judge_door;
mod judging;
mod matrix;
mod otlp;
mod output;
mod prices;
mod regrade;
mod replay;
mod session;
mod stack;
pub mod telemetry;
mod ui;
mod wiring;

use std::process::ExitCode;

use clap::Parser;

pub use cli::Cli;

pub mod exit {
    pub const OK: u8 = 0;
    pub const CHECK_FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const INCOMPLETE: u8 = 3;
    pub const FAILED: u8 = 4;
    /// A gate could not decide (the data is within noise, or its interval straddles the limit):
    /// never a pass, never a regression; more repetitions decide it.
    pub const INCONCLUSIVE: u8 = 5;
}

/// An error that knows its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        let error = e.into();
        let code = match error.downcast_ref::<agenteval_core::Error>().map(|e| e.kind()) {
            Some(
                agenteval_core::ErrorKind::Invalid
                | agenteval_core::ErrorKind::NotFound
                | agenteval_core::ErrorKind::Conflict,
            ) => exit::USAGE,
            _ if error.downcast_ref::<agenteval_core::config::ConfigError>().is_some() => exit::USAGE,
            _ => exit::FAILED,
        };
        Failure { code, error }
    }
}

/// The error and its causes, skipping a cause whose text the message already carries (library
/// errors embed their source's text so that they read well on their own).
fn render_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    // No process of agenteval can be read by another of the same user: `/proc/PID/environ`
    // (a worker's cloud credentials, a controller's keys), `mem` and ptrace are closed to an
    // agent running as that user. An agent's own program is dumpable again: `exec` resets it.
    agenteval_engine::isolation::reap::close_to_same_user();
    // Before any thread exists: a Landlock ruleset binds the thread that applies it, and the
    // process becomes the agent right after.
    if let cli::Command::AgentSandbox { view, inner, no_trace, agent, command } = &cli.command {
        if *no_trace && let Err(e) = agenteval_engine::isolation::confine::no_tracing() {
            eprintln!("agent-sandbox: {e}");
            return ExitCode::from(126);
        }
        if *agent && let Err(e) = agenteval_engine::isolation::confine::drop_reach() {
            eprintln!("agent-sandbox: {e}");
            return ExitCode::from(126);
        }
        return ExitCode::from(agenteval_engine::isolation::sandbox::launch(view.as_deref(), *inner, command));
    }
    // Before any thread exists too: the fork server forks, and each child it returns from
    // `serve` in is a worker that ran `forked_worker` (or the server, done, returning 0).
    if let cli::Command::Worker { fork_server: true, .. } = &cli.command {
        warm_up_workers();
        return ExitCode::from(agenteval_forkserver::serve(forked_worker));
    }
    ExitCode::from(run(cli))
}

/// Done once in the fork server rather than in each worker it forks: the CPU feature probes of
/// std (memchr, adler32) and of SHA-256 (a pack's checksum). A CPUID instruction traps to the
/// hypervisor in a VM. Nothing here starts a thread.
fn warm_up_workers() {
    #[cfg(target_arch = "x86_64")]
    let _ = std::arch::is_x86_feature_detected!("avx2");
    let _ = <sha2::Sha256 as sha2::Digest>::digest(b"");
}

/// `agenteval worker --job JOB`, as clap would have parsed it.
fn worker_cli(job: &str) -> Cli {
    Cli {
        command: cli::Command::Worker { job: Some(job.into()), fork_server: false, title_room: None },
        verbose: 0,
        quiet: false,
    }
}

/// A worker forked by the fork server: what `agenteval worker --job FILE` would have done.
fn forked_worker(args: &[String]) -> u8 {
    // The one command line the local backend sends, built without clap (which would rebuild
    // its whole command tree in every worker); anything else is parsed.
    if let [worker, flag, job] = args
        && worker == "worker"
        && flag == "--job"
    {
        return run(worker_cli(job));
    }
    match Cli::try_parse_from(std::iter::once("agenteval").chain(args.iter().map(String::as_str))) {
        Ok(cli) => run(cli),
        Err(e) => {
            let _ = e.print();
            exit::USAGE
        }
    }
}

/// Runs a parsed command line to its exit code.
fn run(cli: Cli) -> u8 {
    // A worker does one task at a time: a single-threaded runtime avoids cross-thread wake-ups,
    // which dominated the cost of small tasks with several workers on two cores. The model
    // gateway on its own is the worker's gateway: the same runtime, for the same reason.
    let builder = if matches!(cli.command, cli::Command::Worker { .. } | cli::Command::Gateway { .. }) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match { builder }.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return exit::FAILED;
        }
    };
    let telemetry = {
        let _guard = runtime.enter();
        telemetry::Telemetry::install(&output::default_log_filter(&cli), output::color_enabled(&std::io::stderr()))
    };
    let verbose = cli.verbose > 0;
    let result = runtime.block_on(commands::run(cli, &telemetry));
    // Every process flushes its spans before it exits, a worker stopped by SIGTERM included
    // (the signal ends its job through the cancel path, which returns here).
    runtime.block_on(telemetry.shutdown());
    match result {
        Ok(code) => code,
        Err(f) => {
            // One readable line (library errors carry what their cause said); with `-v`, every
            // cause below it too (an SDK's dispatch failure, say).
            let shown = if verbose { render_chain(&f.error) } else { f.error.to_string() };
            eprintln!("error: {}", shown.trim_end());
            f.code
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    #[test]
    fn a_forked_workers_command_line_is_the_one_clap_parses() {
        let parsed =
            super::Cli::try_parse_from(["agenteval", "worker", "--job", "/r/jobs/j/attempt-1/job.json"]).unwrap();
        assert_eq!(format!("{:?}", super::worker_cli("/r/jobs/j/attempt-1/job.json")), format!("{parsed:?}"));
    }
}
