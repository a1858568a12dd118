//! What the commands that start or open runs share: a config loaded with every check, the
//! index the arguments name, the controller's options (progress, interrupts, telemetry,
//! cassettes), and how a run's ending is printed and mapped to an exit code.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agenteval_core::config::{ConfigError, LoadedConfig};
use agenteval_core::layout;
use agenteval_core::location::IndexLocation;
use agenteval_core::model::{RunRecord, RunStatus};
use agenteval_core::traits::{Resolver, RunIndex};
use agenteval_core::{Error, RunId};
use agenteval_engine::controller::start::{Ready, Start};
use agenteval_engine::controller::{self, ControllerOptions, NoProgress, Progress, RunOutcome};
use anyhow::Context;
use serde_json::json;
use tokio::sync::watch;

use crate::cli::IndexArgs;
use crate::output::{self, Bar};
use crate::telemetry::{Settings, Telemetry};
use crate::wiring::Wiring;
use crate::{Failure, exit};

pub(crate) fn exe() -> Result<PathBuf, Failure> {
    std::env::current_exe().context("cannot find the agenteval executable").map_err(Failure::from)
}

/// A progress sink that also tells the interrupt handler when driving has started.
struct Started {
    inner: Arc<dyn Progress>,
    started: Arc<std::sync::atomic::AtomicBool>,
}

impl Progress for Started {
    fn start(&self, run_id: &RunId, bundle_uri: &str, total: u64) {
        self.started.store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.start(run_id, bundle_uri, total);
    }
    fn update(&self, view: &agenteval_engine::controller::ProgressView) {
        self.inner.update(view);
    }
    fn message(&self, text: &str) {
        self.inner.message(text);
    }
    fn finish(&self) {
        self.inner.finish();
    }
}

/// Interrupt handling for controllers: the first Ctrl-C (or SIGTERM, SIGHUP) asks the run to
/// stop cleanly (workers stop, the bundle is sealed `interrupted`); a second one exits at once.
/// Before driving starts (enumerating tasks, writing the run) there is nothing to stop or seal,
/// so the first one exits at once: a run already written is left for `resume`, its controller
/// gone.
fn interrupt_channel(
    progress: Arc<dyn Progress>,
    started: Arc<std::sync::atomic::AtomicBool>,
) -> watch::Receiver<bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = watch::channel(false);
    // Installed before the task that waits on them first runs, so no signal finds the default
    // action (exit, nothing sealed) in between.
    let handlers = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()), signal(SignalKind::hangup()));
    tokio::spawn(async move {
        let (Ok(mut int), Ok(mut term), Ok(mut hup)) = handlers else {
            tracing::warn!("cannot install signal handlers; Ctrl-C will not seal the bundle");
            return;
        };
        let mut next = async || {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        };
        next().await;
        if !started.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("interrupted before the run started");
            std::process::exit(i32::from(exit::INCOMPLETE));
        }
        progress.message("interrupted: stopping workers and sealing the bundle (Ctrl-C again to quit now)");
        let _ = tx.send(true);
        next().await;
        eprintln!("quitting without sealing; `agenteval resume` can finish the run");
        std::process::exit(i32::from(exit::INCOMPLETE));
    });
    rx
}

/// The interrupt channel of a set's runs, and the flag that says driving has started.
pub(crate) fn interrupts(progress: Arc<dyn Progress>) -> (Arc<std::sync::atomic::AtomicBool>, watch::Receiver<bool>) {
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    (started.clone(), interrupt_channel(progress, started))
}

pub(crate) fn outcome_code(status: RunStatus) -> u8 {
    if status == RunStatus::Complete { exit::OK } else { exit::INCOMPLETE }
}

/// What a run's ending exits with: a fault that stopped it (`reason`) is a failed operation,
/// else its status says.
pub(crate) fn exit_code_of(o: &RunOutcome) -> u8 {
    if o.reason.is_some() { exit::FAILED } else { outcome_code(o.status) }
}

/// Prints how a run ended: one JSON object (`--json`), one line (`-q`), or the summary table
/// and where things are. A run stopped because its agent cannot run is a failed operation: one
/// line naming the cause and the config field to fix, exit 4.
pub(crate) fn print_outcome(
    o: &RunOutcome,
    config: &agenteval_core::config::RunConfig,
    json: bool,
    quiet: bool,
) -> Result<u8, Failure> {
    print_outcome_of(o, config, json, quiet, true)
}

/// [`print_outcome`], saying how to finish a run that did not (`resume`) only with `next_step`:
/// a replay's run is not one to finish.
pub(crate) fn print_outcome_of(
    o: &RunOutcome,
    config: &agenteval_core::config::RunConfig,
    json: bool,
    quiet: bool,
    next_step: bool,
) -> Result<u8, Failure> {
    let code = outcome_code(o.status);
    if json {
        let v = json!({
            "run_id": o.run_id,
            "status": o.status,
            "bundle": o.bundle_uri,
            "exit_code": exit_code_of(o),
            "reason": o.reason,
            "summary": o.summary,
        });
        say!("{v}");
    } else if let Some(reason) = &o.reason {
        // Said once, by the error path below.
        let _ = reason;
    } else if quiet {
        let s = &o.summary;
        say!(
            "{} {}: {} tasks, passed {} failed {} errored {} infra {}, cost {}, {}",
            o.run_id,
            o.status.as_str(),
            s.tasks_total,
            s.passed,
            s.failed,
            s.errored,
            s.infra,
            s.cost_dollars(),
            o.bundle_uri
        );
    } else {
        say!("{}", output::summary_table(&o.summary));
        for l in output::summary_lines(&o.summary) {
            say!("{l}");
        }
        say!("run     {}", o.run_id);
        say!("status  {}", output::status_word(o.status));
        say!("bundle  {}", o.bundle_uri);
        say!("report  {}/{}", o.bundle_uri, layout::REPORT);
        match o.status {
            _ if !next_step => {}
            RunStatus::BudgetExceeded => {
                if let Some(max) = config.max_run_cost_usd.filter(|_| o.summary.budget_usd.is_some()) {
                    let over = o.summary.over_budget_usd.unwrap_or_default();
                    let spent = max + over;
                    say!(
                        "spent ${spent:.4} of the ${max:.4} budget (over by ${over:.4}: the calls in flight when it was reached)"
                    );
                }
                say!("the budget stopped it; to finish it: agenteval resume {} --set max_run_cost_usd=<more>", o.run_id)
            }
            RunStatus::Interrupted => say!("finish it with: agenteval resume {}", o.run_id),
            RunStatus::Failed => say!(
                "tasks were given up after retries (`agenteval runs show {id} --tasks --failed` says why); once the cause \
                 is fixed, `agenteval resume {id}` runs them again in this run, `agenteval rerun {id} --failed` in a new one",
                id = o.run_id
            ),
            RunStatus::Complete | RunStatus::Running => {}
        }
        // Last, where a reader comparing with Harbor's numbers looks: its dataset is smaller.
        if o.summary.harbor_would_skip > 0 {
            say!(
                "harbor  Harbor itself would skip {} of these {} tasks (its task.toml rules; `agenteval show RUN TASK` says why): its numbers are over {}",
                o.summary.harbor_would_skip,
                o.summary.tasks_total,
                o.summary.tasks_total.saturating_sub(o.summary.harbor_would_skip)
            );
        }
    }
    if let Some(reason) = &o.reason {
        return Err(Failure {
            code: exit::FAILED,
            error: anyhow::anyhow!(
                "{reason} ({}); run {id} sealed failed: after the fix, `agenteval resume {id}` runs its tasks without a result",
                fix_for(config, o),
                id = o.run_id
            ),
        });
    }
    Ok(code)
}

/// The config field behind an agent that cannot run (its tasks' fault, recorded where it arose),
/// or jobs that cannot launch, with the fix where one is known.
fn fix_for(config: &agenteval_core::config::RunConfig, o: &RunOutcome) -> String {
    use agenteval_core::model::AgentFault;
    if let Some(fault) = &o.fault {
        let probe = match fault {
            AgentFault::SetupFailed
            | AgentFault::InstallFailed
            | AgentFault::ImageCannotRun
            | AgentFault::KeyRefused => "",
            _ => "; `agenteval doctor --probe` tries one task",
        };
        return format!("fix `{}`: {}{probe}", fault.field(), fault.fix());
    }
    format!("fix `{}`", o.launch_field.unwrap_or_else(|| agenteval_engine::agents::field_to_fix(config)))
}

pub(crate) fn config_failure(e: ConfigError) -> Failure {
    Failure { code: exit::USAGE, error: anyhow::anyhow!(e.to_string()) }
}

/// Controller options, with telemetry connected as the run's config says.
pub(crate) async fn controller_options(
    config: &agenteval_core::config::RunConfig,
    resolver: Arc<dyn Resolver>,
    json: bool,
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<ControllerOptions, Failure> {
    let settings = Settings::resolve(Some(&config.telemetry));
    // A collector that does not answer costs the run one export timeout, here, and nothing
    // more: it is marked down, so no worker is told to export to it and the exit does not wait
    // for it; it is asked again in the background and gets the rest of the run if it comes back.
    telemetry.connect_controller(&settings).await;
    let shown: Arc<dyn Progress> = if json || quiet { Arc::new(NoProgress) } else { Arc::new(Bar::new()) };
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let progress: Arc<dyn Progress> = Arc::new(Started { inner: shown, started: started.clone() });
    Ok(ControllerOptions {
        rounds: None,
        rerun_of: None,
        set: None,
        resolver,
        progress: progress.clone(),
        interrupt: interrupt_channel(progress, started),
        journal: Some(telemetry.journal()),
        worker_env: telemetry.worker_env(&settings),
    })
}

/// A run resolved, checked and ready, through the engine's one door
/// (`controller::start::prepare`) with this build's backend for it.
pub(crate) async fn start(wiring: &Arc<Wiring>, loaded: LoadedConfig, how: Start<'_>) -> Result<Ready, Failure> {
    let kind = wiring.kind(&loaded.config)?;
    Ok(agenteval_engine::controller::start::prepare(wiring.as_ref(), kind.as_ref(), loaded, how).await?)
}

/// The run index the arguments name, and the wiring that opened it: `--index` (or
/// `AGENTEVAL_INDEX`), else `--config`'s, else `--backend NAME`'s, else — the way `git` finds a
/// repository — the nearest `runs/index.sqlite` in the current folder or one above it. The
/// wiring's AWS settings are the config's when the index came from `--config`, else the
/// environment's. An index that is not there is named, with how it was chosen and the flags
/// that choose another.
pub(crate) async fn open_index(args: &IndexArgs) -> Result<(Arc<Wiring>, Arc<dyn RunIndex>), Failure> {
    let (at, how) = if let Some(i) = &args.index {
        (i.display().to_string().parse::<IndexLocation>()?, "named by --index or AGENTEVAL_INDEX".to_string())
    } else if let Some(c) = &args.config {
        let cfg = load_config(c, &[]).map_err(config_failure)?.config;
        let wiring = Wiring::new(exe()?, cfg.aws.as_ref());
        let at = cfg.storage.index_location();
        let index = wiring
            .index_there(&at)
            .await
            .map_err(|e| missing_index(e, &at, &format!("the index of {}", c.display())))?;
        return Ok((wiring, index));
    } else if let Some(b) = args.backend.as_deref() {
        crate::wiring::default_index(Some(b))?
    } else {
        nearest_index()?
    };
    let wiring = Wiring::new(exe()?, None);
    let index = wiring.index_there(&at).await.map_err(|e| missing_index(e, &at, &how))?;
    Ok((wiring, index))
}

/// The nearest `runs/index.sqlite` in the current folder or a folder above it.
fn nearest_index() -> Result<(IndexLocation, String), Failure> {
    let here = std::env::current_dir().map_err(|e| Error::io("reading the current folder", e))?;
    let relative = Path::new("runs").join("index.sqlite");
    match here.ancestors().map(|d| d.join(&relative)).find(|p| p.is_file()) {
        Some(found) => Ok((IndexLocation::Sqlite(found), "found above the current folder".into())),
        None => Err(Error::invalid(format!(
            "no run index: no {} in {} or any folder above it; name one with --index FILE (or AGENTEVAL_INDEX), \
             or --config FILE for the index of a run config",
            relative.display(),
            here.display()
        ))
        .into()),
    }
}

/// A missing index said with where it was looked for and how to choose another; when its
/// folder still holds run bundles it was lost, and `index rebuild` recreates it.
fn missing_index(e: Error, at: &IndexLocation, how: &str) -> Failure {
    if e.kind() != agenteval_core::ErrorKind::NotFound {
        return e.into();
    }
    let bundles = match at {
        IndexLocation::Sqlite(p) => p.parent().and_then(|d| std::fs::read_dir(d).ok()).map_or(0, |entries| {
            entries.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<RunId>().is_ok())).count()
        }),
        IndexLocation::DynamoDb { .. } => 0,
    };
    let fix = match at {
        IndexLocation::Sqlite(p) if bundles > 0 => format!(
            "its folder holds {bundles} run bundle(s): `agenteval index rebuild --bundles {}` recreates it",
            p.parent().unwrap_or(Path::new(".")).display()
        ),
        IndexLocation::DynamoDb { .. } if !how.contains("AGENTEVAL_AWS_INDEX") => {
            "name another with --index dynamodb://TABLE (or AGENTEVAL_AWS_INDEX), or --config FILE".into()
        }
        IndexLocation::DynamoDb { .. } => "or --config FILE for a run config's".into(),
        _ => "name another with --index FILE (or AGENTEVAL_INDEX), or --config FILE".into(),
    };
    Error::new(e.kind(), format!("{e} ({how}); {fix}")).into()
}

pub(crate) fn record_json(r: &RunRecord) -> serde_json::Value {
    let mut v = serde_json::to_value(r).expect("serializes");
    v["controller_alive"] = json!(controller::controller_alive(r));
    v
}

/// Loads a run config with every check, the LLM crate's included (prices under a cost limit,
/// model specs).
pub(crate) fn load_config(path: &std::path::Path, overrides: &[String]) -> Result<LoadedConfig, ConfigError> {
    let deployed = |config: &serde_json::Value| crate::wiring::deployed_settings(config);
    agenteval_core::config::load_config_layered(path, &deployed, overrides, &|config| {
        let mut problems = crate::wiring::backend_problems(config);
        // The agent first: a benchmark checks the answers an agent read (`predictions`).
        problems.extend(agenteval_engine::agents::at_load(config));
        problems.extend(agenteval_engine::benchmarks::at_load(config));
        problems.extend(agenteval_llm::validate_config(config));
        problems
    })
}

/// A run imported from another tool ran nothing here: it cannot be run again from its bundle.
pub(crate) async fn not_imported(
    store: &dyn agenteval_core::traits::BundleStore,
    run: &agenteval_core::RunId,
    what: &str,
) -> Result<(), Failure> {
    let meta: agenteval_engine::bundle::Metadata =
        agenteval_engine::bundle::read_json(store, run, agenteval_core::layout::METADATA).await?;
    match meta.imported {
        Some(i) => Err(Failure {
            code: crate::exit::USAGE,
            error: anyhow::anyhow!(
                "run {run} was imported from a {} job ({}): nothing of it ran here, so it cannot be {what}; run its tasks with `agenteval submit`",
                i.tool,
                i.from
            ),
        }),
        None => Ok(()),
    }
}
