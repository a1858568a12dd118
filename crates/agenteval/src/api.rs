//! The library entry point, for teams that embed agenteval in their own Rust program: [`run`] a
//! config to its end and [`compare`] two runs (with gates), as `agenteval submit` and
//! `agenteval compare` do, returning what they found instead of printing it (docs/library.md).
//!
//! A run's workers are processes of the `agenteval` binary (local or on the fleet), so the
//! program names it ([`RunOptions::agenteval_bin`]; else `AGENTEVAL_BIN`, else `agenteval` on
//! `PATH`). Nothing here installs a `tracing` subscriber or a signal handler: the program keeps
//! its own, and stops a run by [`RunOptions::cancel`] (the bundle is then sealed `interrupted`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agenteval_core::location::IndexLocation;
pub use agenteval_core::model::{RunStatus, RunSummary};
use agenteval_engine::controller::start::Start;
use agenteval_engine::controller::{ControllerOptions, NoProgress};
pub use agenteval_judge::compare::Comparison;
pub use agenteval_judge::gates::Verdict;

use crate::session::{config_failure, load_config, start};
use crate::wiring::Wiring;
use crate::{Failure, exit};

/// Why a call could not give its answer, with the exit code the command line would have used.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The config, a `--set`, or the gates file is not valid: every problem, each with its
    /// `file:line:column` (the command line's exit 2).
    #[error("{0}")]
    Invalid(String),
    /// An operation failed: storage, the index, the backend, a run that is not there.
    #[error("{message}")]
    Failed {
        /// The command line's exit code for it (4, or 2 for a run reference that names none).
        code: u8,
        message: String,
    },
}

impl ApiError {
    /// The exit code `agenteval` would have ended with (`README.md`'s table).
    pub fn exit_code(&self) -> u8 {
        match self {
            ApiError::Invalid(_) => exit::USAGE,
            ApiError::Failed { code, .. } => *code,
        }
    }
}

impl From<Failure> for ApiError {
    fn from(f: Failure) -> Self {
        // The whole cause chain in one line: the program decides how much of it to show.
        let message = format!("{:#}", f.error);
        if f.code == exit::USAGE { ApiError::Invalid(message) } else { ApiError::Failed { code: f.code, message } }
    }
}

/// How [`run`] runs.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// `--set KEY=VALUE` overrides, in order.
    pub sets: Vec<String>,
    /// The `agenteval` binary the run's workers are started from.
    pub agenteval_bin: Option<PathBuf>,
    /// Set to `true` to stop the run: the tasks in flight end, the bundle is sealed
    /// `interrupted`, and [`run`] returns (`resume` finishes it later).
    pub cancel: Option<tokio::sync::watch::Receiver<bool>>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Ran {
    pub run_id: String,
    pub status: RunStatus,
    /// Where its bundle is (a folder, or `s3://…`).
    pub bundle: String,
    pub summary: RunSummary,
    /// Why it stopped early, when it did for a reason.
    pub reason: Option<String>,
    /// What `agenteval submit` would have exited with: 0 complete, 3 not (interrupted, over
    /// budget), 4 stopped by a fault (`reason` says which).
    pub exit_code: u8,
}

fn worker_binary(given: Option<PathBuf>) -> Result<PathBuf, ApiError> {
    if let Some(p) = given.or_else(|| std::env::var_os("AGENTEVAL_BIN").map(PathBuf::from)) {
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("agenteval")).find(|p| p.is_file()).ok_or_else(|| {
        ApiError::Invalid(
            "no agenteval binary to start workers from: set RunOptions::agenteval_bin or AGENTEVAL_BIN, or put \
             agenteval on PATH"
                .into(),
        )
    })
}

/// Runs the config at `config` to its end, as `agenteval submit --config FILE` does (every load
/// check, the backend's pre-flight, the bundle and the index), printing nothing.
pub async fn run(config: &Path, opts: RunOptions) -> Result<Ran, ApiError> {
    let loaded = load_config(config, &opts.sets).map_err(config_failure)?;
    let wiring = Wiring::new(worker_binary(opts.agenteval_bin)?, loaded.config.aws.as_ref());
    let ready = start(&wiring, loaded, Start { cassettes: None, preflight: true }).await?;
    // A program that never cancels keeps the sender alive for the run's whole length.
    let (keep, never) = tokio::sync::watch::channel(false);
    let controller = ControllerOptions {
        resolver: wiring.clone(),
        progress: Arc::new(NoProgress),
        interrupt: opts.cancel.unwrap_or(never),
        journal: None,
        worker_env: Arc::new(Default::default),
        rerun_of: None,
        set: None,
        rounds: None,
    };
    let outcome = ready.submit(controller).await.map_err(Failure::from)?;
    drop(keep);
    let code = crate::session::exit_code_of(&outcome);
    Ok(Ran {
        run_id: outcome.run_id.to_string(),
        status: outcome.status,
        bundle: outcome.bundle_uri,
        summary: outcome.summary,
        reason: outcome.reason,
        exit_code: code,
    })
}

/// What [`compare`] found.
#[derive(Debug, Clone)]
pub struct Compared {
    /// The comparison, task by task with its intervals; `None` when the base could not be found
    /// and the gates allow that (`on_missing_baseline`).
    pub comparison: Option<Comparison>,
    /// The gates' verdict, when gates were given.
    pub verdict: Option<Verdict>,
    /// What `agenteval compare` would have exited with: 0, or 1 when a gate failed.
    pub exit_code: u8,
}

/// Compares `cand` with `base` in the index at `index` (a SQLite file, or `dynamodb://table`),
/// judged by the gates file `gates` when given, as `agenteval compare BASE CAND [--gates FILE]`
/// does. `base` and `cand` are run ids, prefixes of one, `latest:NAME` or `baseline:NAME`.
pub async fn compare(index: &str, base: &str, cand: &str, gates: Option<&Path>) -> Result<Compared, ApiError> {
    let gates = gates.map(agenteval_judge::gates::load_gates).transpose().map_err(config_failure)?;
    let at: IndexLocation = index.parse().map_err(Failure::from)?;
    // A comparison starts no worker: the binary is never run.
    let wiring = Wiring::new(PathBuf::from("agenteval"), None);
    let index = wiring.index_there(&at).await.map_err(Failure::from)?;
    let cand = crate::judging::resolve_ref(index.as_ref(), cand).await?;
    let judged = crate::judging::judge_run(
        wiring.as_ref(),
        index.as_ref(),
        Some(base),
        &cand,
        gates.as_ref(),
        None,
        agenteval_judge::compare::CompareOptions::default(),
        false,
        false,
        None,
    )
    .await?;
    Ok(Compared { comparison: judged.comparison, verdict: judged.verdict, exit_code: judged.code })
}
