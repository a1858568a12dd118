//! The job-backend conformance suite against local workers started by a fork server: this
//! binary is the suite and, with `--fork-server`, the server (one thread, as
//! `agenteval worker --fork-server` has), whose workers behave as the suite's stand-in.

use std::sync::Arc;
use std::time::Duration;

use agenteval_core::traits::{BundleStore as _, worker_exit};
use agenteval_local::{FsBundleStore, LocalProcessBackend};
use agenteval_testkit::conformance::{self, STAND_IN_EXIT, STAND_IN_SLEEP};

/// The stand-in worker's script in Rust: sleep as asked (a SIGTERM ends it as cancelled), then
/// exit as asked.
fn stand_in(_args: &[String]) -> u8 {
    let number = |k| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let (sleep, exit) = (number(STAND_IN_SLEEP), number(STAND_IN_EXIT));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = term.recv() => worker_exit::CANCELLED as u8,
            _ = tokio::time::sleep(Duration::from_secs(sleep)) => exit as u8,
        }
    })
}

fn main() {
    if std::env::args().any(|a| a == "--fork-server") {
        std::process::exit(agenteval_forkserver::serve(stand_in).into());
    }
    let dir = tempfile::tempdir().unwrap();
    let store = FsBundleStore::new(dir.path().join("runs"));
    let run = agenteval_core::RunId::new();
    let uri = store.bundle_uri(&run);
    let backend =
        LocalProcessBackend::new(std::env::current_exe().unwrap(), store).forking(vec!["--fork-server".into()]);
    let platform = conformance::Platform { reports_exit_codes: true };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(conformance::job_backend_suite(Arc::new(backend), run, &uri, Duration::from_secs(30), platform));
    println!("test job_backend_suite_with_forked_workers ... ok");
}
