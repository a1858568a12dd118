//! The controller: turns a run config into jobs, dispatches them through a `CloudBackend` with
//! bounded concurrency, retries infrastructure failures, enforces the run budget, reacts to
//! cancellation, and seals the bundle. Also `resume` and `cancel` of existing runs.
//!
//! Its parts: [`decide`] holds the decisions as pure functions; `drive` the dispatch loop;
//! `jobs` the operations on one job; `spans` the run's span file. This module holds the run's
//! lifecycle: start, resume, cancel, and [`seal_run`], the one way every run ends.

mod concurrency;
pub mod decide;
mod drive;
mod fleet_file;
mod images;
mod jobs;
mod run;
pub mod set;
mod spans;
pub mod start;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::config::{LoadedConfig, RunConfig};
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::traits::{BundleStore, CloudBackend, Resolver, RunIndex};
use agenteval_core::{Error, ErrorKind, Result, RunId, SCHEMA_VERSION, taskpack};
use chrono::Utc;
use tokio::sync::watch;
use tracing::Instrument;
use tracing::field::Empty;

use crate::benchmarks::benchmark_from_config;
use crate::bundle::{self, Metadata, TaskTable, read_json, sha256_hex, to_json_bytes};
use crate::resolve::store_from_bundle_uri;
use crate::telemetry::{self, FleetMetrics, Journal};
use run::Run;
use spans::SpanFile;

/// How the reason of a run stopped for a broken agent begins (the agent's fault, not the
/// infrastructure's: judging still calls it a failure).
pub const BROKEN_AGENT: &str = "the agent cannot run";

/// A controller heartbeat older than this means the controller is gone.
pub const STALE_HEARTBEAT: Duration = Duration::from_secs(15);
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
const COUNTS_EVERY: Duration = Duration::from_millis(200);
const TELEMETRY_EVERY: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);
/// How often the controller looks at what may push its concurrency back (an index read).
const PRESSURE_EVERY: Duration = Duration::from_secs(1);
/// Jobs submitted concurrently in one dispatch round.
const DISPATCH_BATCH: usize = 32;
/// How long the tasks running when a budget kept at the wire is reached get to end on their own
/// (their next call is refused) before their jobs are stopped.
const BUDGET_DRAIN: Duration = Duration::from_secs(30);
/// How long cancelled jobs get to stop before the controller seals without them.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// What the progress display is told.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgressView {
    pub total: u64,
    pub waiting: u64,
    pub running: u64,
    pub done: u64,
    /// Of the `done` tasks: what became of them (`model::Outcome`).
    pub passed: u64,
    pub failed: u64,
    pub errored: u64,
    pub infra: u64,
    /// What the done tasks with a known cost cost.
    pub cost_usd: f64,
    /// Done tasks whose cost is unknown: `cost_usd` is then not the whole.
    pub cost_unknown: u64,
    pub jobs_in_flight: u64,
    pub retries: u64,
}

/// Receives progress; the CLI draws a bar, tests and `--json` stay quiet.
pub trait Progress: Send + Sync {
    fn start(&self, _run_id: &RunId, _bundle_uri: &str, _total: u64) {}
    fn update(&self, _view: &ProgressView) {}
    fn message(&self, _text: &str) {}
    fn finish(&self) {}
}

/// A progress sink that shows nothing.
#[derive(Debug, Default)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// How a controller run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: RunId,
    pub status: RunStatus,
    pub bundle_uri: String,
    pub summary: RunSummary,
    /// Why the run stopped early, when it did for a reason (also in `metadata.json`).
    pub reason: Option<String>,
    /// The fault of an agent that cannot run (the run stopped for it), naming the field to fix.
    pub fault: Option<agenteval_core::model::AgentFault>,
    /// The config field behind jobs that cannot launch (the run stopped for it), as the
    /// backend names it.
    pub launch_field: Option<&'static str>,
}

/// Options that come from the command line rather than the config.
pub struct ControllerOptions {
    /// Opens the run's store, index and backend.
    pub resolver: Arc<dyn Resolver>,
    pub progress: Arc<dyn Progress>,
    /// Becomes `true` when the user interrupts (Ctrl-C).
    pub interrupt: watch::Receiver<bool>,
    /// Where this process's finished spans wait to be written to the bundle's `spans.jsonl`.
    pub journal: Journal,
    /// Environment each worker gets (telemetry settings), asked at every dispatch so that it
    /// can change during the run; the job's `TRACEPARENT` is added.
    pub worker_env: WorkerEnv,
    /// The run this one re-runs some tasks of (`agenteval rerun`), recorded in its metadata.
    pub rerun_of: Option<RunId>,
    /// The set this run is one of (`submit --matrix`): its combination, and the job slots and
    /// budget it shares with the set's other runs.
    pub set: Option<set::SetRun>,
    /// Decides between the rounds of a run whose repetitions are adaptive (`repetitions:
    /// {until: decided}`); `None` runs the tasks it was given and stops.
    pub rounds: Option<Arc<dyn Rounds>>,
}

/// What a look between two rounds of an adaptive run decides.
#[derive(Debug, Clone, PartialEq)]
pub enum Round {
    /// These tasks (base ids) get one more attempt each.
    Repeat(Vec<String>),
    /// The run is over: decided, or nothing left can decide it.
    Done(agenteval_core::model::AdaptiveSpend),
}

/// Judges an adaptive run between its rounds (the binary's: judging is not the engine's).
#[async_trait::async_trait]
pub trait Rounds: Send + Sync {
    /// Looks at what the run's finished tasks say so far.
    async fn look(&self, run: &RunId) -> Result<Round>;
}

/// See `ControllerOptions::worker_env`.
pub type WorkerEnv = Arc<dyn Fn() -> BTreeMap<String, String> + Send + Sync>;

/// The hash recorded as `config_hash`: sha256 of the resolved config's JSON.
pub fn config_hash(resolved: &serde_json::Value) -> String {
    // A `Value` always serializes; the hash of nothing would only ever be a wrong hash.
    sha256_hex(&serde_json::to_vec(resolved).unwrap_or_default())
}

fn git_sha(dir: &Path) -> Option<String> {
    git(dir, &["rev-parse", "HEAD"])
}

/// What `git ARGS` prints in `dir`, when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The git checkout of the agent's folder (a `command` agent's), when there is one: which
/// commit ran, and whether tracked files were changed. Untracked files are not counted: the
/// bundles and the index often sit in that folder.
fn agent_git(config: &agenteval_core::config::RunConfig) -> Option<agenteval_core::format::GitCheckout> {
    let dir = config.agent.code_folder()?;
    let commit = git(dir, &["rev-parse", "HEAD"])?;
    let dirty = !git(dir, &["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Some(agenteval_core::format::GitCheckout { commit, dirty })
}

/// Starts a new run from a loaded config and drives it to the end.
pub async fn submit(loaded: &LoadedConfig, opts: ControllerOptions) -> Result<RunOutcome> {
    let config = loaded.config.clone();
    // A packed agent's folder is read first: a folder that cannot be packed creates nothing.
    let archive = crate::agents::pack::archive_for(&config).await?;
    let store = opts.resolver.store(&config.storage.bundle_root).await?;
    let index = opts.resolver.create_index(&config.storage.index_location()).await?;
    let backend = opts.resolver.backend(&config).await?;
    let benchmark = benchmark_from_config(&config.benchmark)?;
    let mut tasks = TaskTable::default();
    let reps = config.repetitions.first().max(1);
    // On a fleet that runs each task in its own image the tasks are named again before the
    // table is made (their images as the fleet runs them, their folders in the bundle).
    let task_images = images::uses_task_images(&config, backend.as_ref()).await?;
    let mut held: Vec<TaskSpec> = Vec::new();
    let conversation = crate::agents::conversation_problem(&config);
    benchmark
        .for_each_task(config.benchmark.filter(), &mut |t| {
            if let (Some(_), Some(why)) = (&t.user, &conversation) {
                return Err(Error::invalid(format!("task {}: {why}", t.id)));
            }
            for r in 0..reps {
                let rep = (r > 0).then(|| {
                    let mut rep = t.clone();
                    rep.id = t.id.repetition(r);
                    rep
                });
                let t = rep.as_ref().unwrap_or(&t);
                if task_images { held.push(t.clone()) } else { tasks.push(t)? }
            }
            Ok(())
        })
        .await?;
    let packed = if task_images {
        let packed = images::prepare(&config, opts.resolver.as_ref(), backend.as_ref(), &mut held).await?;
        for t in &held {
            tasks.push(t)?;
        }
        Some(packed)
    } else {
        None
    };
    if tasks.is_empty() {
        return Err(Error::invalid("the benchmark filter matches no tasks"));
    }
    let run_id = RunId::new();
    if let Some(p) = packed {
        p.store(store.as_ref(), &run_id).await?;
    }
    let now = Utc::now();
    // A packed agent travels in the run: its archive first, then the config that names it.
    let (mut config, mut resolved) = (config, loaded.resolved());
    let agent_sha256 =
        crate::agents::pack::store_for_run(archive, &mut config, &mut resolved, store.as_ref(), &run_id).await?;
    let hash = config_hash(&resolved);
    let meta = Metadata {
        schema_version: SCHEMA_VERSION.into(),
        run_id,
        name: config.name.clone(),
        status: RunStatus::Running,
        sealed: false,
        backend: backend.id().to_string(),
        benchmark: benchmark.name().to_string(),
        agent: crate::agents::label(&config.agent),
        config_hash: hash.clone(),
        agenteval_version: crate::VERSION.into(),
        git_sha: loaded.path.parent().and_then(git_sha),
        agent_git: agent_git(&config),
        tasks_total: tasks.len() as u64,
        created_at: now,
        finished_at: None,
        resumed: 0,
        reason: None,
        agent_flags: loaded.agent_flags.clone(),
        resume_overrides: vec![],
        rerun_of: opts.rerun_of,
        regrade_of: loaded.config.regrade.as_ref().map(|r| r.run),
        agent_sha256,
        set: opts.set.as_ref().map(|s| s.member.clone()),
        budget_usd: config.max_run_cost_usd.filter(|_| opts.set.is_none()),
        spent_usd: None,
        calls_at_wire: None,
        dataset: config.benchmark.pinned_dataset().cloned(),
        imported: None,
        adaptive: None,
    };
    store.put(&run_id, layout::CONFIG, &to_json_bytes(&resolved)).await?;
    tasks.write_to(store.as_ref(), &run_id, layout::TASKS).await?;
    store.put(&run_id, layout::METADATA, &to_json_bytes(&meta)).await?;
    let record = new_run_record(&meta, store.bundle_uri(&run_id), now);
    index.create_run(&record, tasks.ids()).await?;
    let todo: Vec<u32> = (0..tasks.len() as u32).collect();
    let run = Run::new(config, tasks, store, index, backend, meta, 0);
    // From here on the run exists; what fails is an operation, not the user's input.
    drive(run, todo, 0, opts).await.map_err(not_user_error)
}

/// The index's record of a run that starts now, from its metadata.
fn new_run_record(meta: &Metadata, bundle_uri: String, now: chrono::DateTime<Utc>) -> RunRecord {
    RunRecord {
        run_id: meta.run_id,
        name: meta.name.clone(),
        benchmark: meta.benchmark.clone(),
        agent: meta.agent.clone(),
        backend: meta.backend.clone(),
        status: RunStatus::Running,
        bundle_uri,
        config_hash: meta.config_hash.clone(),
        tasks_total: meta.tasks_total,
        created_at: now,
        updated_at: now,
        finished_at: None,
        heartbeat_at: now,
        cancel_requested: false,
        controller: controller_id(),
        epoch: 0,
        leased_at: Some(now),
        verdict: None,
        baseline: None,
        set_id: meta.set.as_ref().map(|s| s.id.clone()),
        concurrency: None,
    }
}

/// Where an existing run lives, from its index record.
pub struct Located {
    pub record: RunRecord,
    pub store: Arc<dyn BundleStore>,
    pub config: RunConfig,
}

/// Finds a run the user named. A run missing from the index is the user's mistake (`NotFound`);
/// a bundle missing under a run the index knows is a failed operation (`Io`), not a usage error.
pub async fn locate(resolver: &dyn Resolver, index: &dyn RunIndex, run_id: &RunId) -> Result<Located> {
    let record =
        index.get_run(run_id).await?.ok_or_else(|| Error::not_found(format!("run {run_id} is not in the index")))?;
    let (store, _) = store_from_bundle_uri(resolver, &record.bundle_uri).await.map_err(not_user_error)?;
    let config: RunConfig = read_json(store.as_ref(), run_id, layout::CONFIG).await.map_err(not_user_error)?;
    Ok(Located { record, store, config })
}

/// What the index or the bundle lacks mid-operation is a failure of the operation: the user
/// typed nothing wrong.
pub(crate) fn not_user_error(e: Error) -> Error {
    match e.kind() {
        // A conflict mid-run is a lost lease: another controller took the run over.
        ErrorKind::NotFound | ErrorKind::Invalid | ErrorKind::Conflict => {
            Error::with_source(ErrorKind::Io, e.to_string(), e)
        }
        _ => e,
    }
}

fn hostname() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `host:pid` of this process.
pub fn controller_id() -> String {
    format!("{}:{}", hostname(), std::process::id())
}

/// Whether the run's controller is still alive: its heartbeat is fresh and, when it ran on this
/// machine, its process exists.
pub fn controller_alive(record: &RunRecord) -> bool {
    if record.status != RunStatus::Running {
        return false;
    }
    let fresh = (Utc::now() - record.heartbeat_at).to_std().map(|d| d < STALE_HEARTBEAT).unwrap_or(true);
    match record.controller.rsplit_once(':') {
        Some((host, pid)) if fresh && host == hostname() => {
            pid.parse::<i32>().is_ok_and(|pid| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok())
        }
        _ => fresh,
    }
}

/// The refusal of a run whose lease another controller holds.
fn held_by(r: &RunRecord) -> Error {
    let (host, pid) = r.controller.rsplit_once(':').unwrap_or((r.controller.as_str(), "?"));
    Error::new(
        ErrorKind::Conflict,
        format!(
            "run {} is being driven by another controller (host {host}, pid {pid}, since {}, last seen {}s ago); \
             wait for it, or take over with `agenteval resume --force {}`",
            r.run_id,
            r.leased_at.unwrap_or(r.created_at).format("%Y-%m-%d %H:%M:%S UTC"),
            (Utc::now() - r.heartbeat_at).num_seconds().max(0),
            r.run_id,
        ),
    )
}

/// Stops workers a dead controller left behind, so that a resume does not race them.
/// Removes the task environments of a run that workers left behind (killed before their
/// teardown), found by the run's label; a failure is only logged.
async fn sweep_environments(config: &RunConfig, resolver: &dyn Resolver, run_id: &RunId) {
    match crate::environments::open(config, resolver, crate::agents::access::container_reaches_gateway(config)).await {
        Ok(Some(env)) => crate::environments::sweep(env.as_ref(), run_id).await,
        Ok(None) => {}
        Err(e) => tracing::warn!("the run's environments cannot be checked for leftovers: {e}"),
    }
}

async fn stop_leftovers(index: &dyn RunIndex, backend: &dyn CloudBackend, run_id: &RunId) -> Result<()> {
    for job in index.list_jobs(run_id).await? {
        if job.status == JobState::Running {
            backend.cancel_job(&job.handle, "controller gone").await?;
            let mut j = job.clone();
            j.status = JobState::Cancelled;
            j.updated_at = Utc::now();
            index.record_job(&j).await?;
        }
    }
    Ok(())
}

/// Re-dispatches every task the index does not record as completed, into the same bundle.
///
/// Only one controller drives a run: this one claims the run's lease by moving its epoch on,
/// conditionally on the epoch it read, before it touches anything. While another controller's
/// lease is live (its heartbeat is fresh) it refuses with `Conflict` naming the holder, unless
/// `force`, which takes the run over; the old holder's workers are stopped and the old holder
/// stops at its next heartbeat.
/// Settings `resume --set` may change: what bounds or paces the rest of the run, never what it
/// evaluates (the benchmark, the agent, the evaluators), so its tasks stay comparable.
pub const RESUME_SETTABLE: &[&str] = &[
    "max_run_cost_usd",
    "agent.limits.",
    "backend.max_concurrent_jobs",
    "backend.concurrency",
    "backend.min_free_memory_mb",
    "backend.max_attempts",
    "backend.tasks_per_job",
    "backend.tasks_in_parallel",
    // Where and how the fleet launches, the fix of a night whose launches failed: not what the
    // tasks run on (the task definition, the environments' groups stay).
    "backend.launch_deadline_seconds",
    "aws.capacity",
    "aws.spot_fallback",
    "aws.cluster",
    "aws.subnets",
    "aws.security_groups",
    "aws.assign_public_ip",
    "aws.launch_burst",
    "aws.launch_per_second",
    "aws.poll_seconds",
];

/// A run's config with `resume --set` overrides applied and checked like a config file's.
pub fn resume_config(
    config: &agenteval_core::config::RunConfig,
    sets: &[String],
) -> std::result::Result<agenteval_core::config::RunConfig, agenteval_core::config::ConfigError> {
    use agenteval_core::config::{ConfigError, Origin, Problem};
    if sets.is_empty() {
        return Ok(config.clone());
    }
    let refused: Vec<Problem> = sets
        .iter()
        .filter(|set| {
            let key = set.split('=').next().unwrap_or("").trim();
            !RESUME_SETTABLE.iter().any(|k| if k.ends_with('.') { key.starts_with(k) } else { key == *k })
        })
        .map(|set| Problem {
            origin: Origin::Unknown,
            pointer: String::new(),
            message: format!(
                "`--set {set}` cannot change on resume: only {} can (the tasks must stay comparable)",
                RESUME_SETTABLE
                    .iter()
                    .map(|k| if k.ends_with('.') { format!("{k}*") } else { k.to_string() })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
        .collect();
    if !refused.is_empty() {
        return Err(ConfigError { file: "resume --set".into(), problems: refused });
    }
    let text = serde_json::to_string_pretty(config).expect("configs serialize");
    agenteval_core::config::load_config_str(&text, layout::CONFIG, Path::new("/"), sets).map(|l| l.config)
}

pub async fn resume(
    index: Arc<dyn RunIndex>,
    run_id: &RunId,
    force: bool,
    sets: &[String],
    opts: ControllerOptions,
) -> Result<RunOutcome> {
    let Located { record, store, config } = locate(opts.resolver.as_ref(), index.as_ref(), run_id).await?;
    if record.status == RunStatus::Complete {
        return Err(Error::invalid(format!("run {run_id} is complete: nothing to resume")));
    }
    let config = resume_config(&config, sets).map_err(|e| Error::invalid(e.to_string()))?;
    if controller_alive(&record) && !force {
        return Err(held_by(&record));
    }
    let epoch = record.epoch + 1;
    let claim = RunUpdate {
        status: Some(RunStatus::Running),
        cancel_requested: Some(false),
        epoch: Some(epoch),
        heartbeat: true,
        controller: Some(controller_id()),
        if_epoch: Some(record.epoch),
        ..Default::default()
    };
    if let Err(e) = index.update_run(run_id, &claim).await {
        // Another controller claimed it between our read and our claim: name it.
        return Err(match (e.kind(), index.get_run(run_id).await) {
            (ErrorKind::Conflict, Ok(Some(now))) => held_by(&now),
            _ => e,
        });
    }
    let mut meta: Metadata = read_json(store.as_ref(), run_id, layout::METADATA).await.map_err(not_user_error)?;
    let tasks = TaskTable::read(store.as_ref(), run_id).await.map_err(not_user_error)?;
    let mut done = index.completed_tasks(run_id).await?;
    if !done.ids.is_sorted() {
        done.ids.sort();
    }
    let attempt_base = done.max_attempt;
    let todo = tasks.positions_not_in(&done.ids);
    drop(done);
    let backend = opts.resolver.backend(&config).await?;
    stop_leftovers(index.as_ref(), backend.as_ref(), run_id).await?;
    sweep_environments(&config, opts.resolver.as_ref(), run_id).await;
    meta.status = RunStatus::Running;
    meta.sealed = false;
    meta.finished_at = None;
    meta.resumed = epoch;
    meta.reason = None;
    if !sets.is_empty() {
        // Workers read the config from the bundle: the new limits must be there before any
        // job starts. The hash follows the config; the overrides are kept, in order.
        let resolved = serde_json::to_value(&config).expect("configs serialize");
        store.put(run_id, layout::CONFIG, &to_json_bytes(&resolved)).await?;
        meta.config_hash = config_hash(&resolved);
        meta.resume_overrides.extend(sets.iter().cloned());
        meta.budget_usd = config.max_run_cost_usd.filter(|_| meta.set.is_none());
    }
    store.put(run_id, layout::METADATA, &to_json_bytes(&meta)).await?;
    let run = Run::new(config, tasks, store, index, backend, meta, attempt_base);
    drive(run, todo, epoch, opts).await.map_err(not_user_error)
}

/// Asks a run to stop. If its controller is alive it is told through the index and stops its
/// own jobs; if not, the jobs are cancelled here and the bundle is sealed as `interrupted`.
pub async fn cancel(
    resolver: &dyn Resolver,
    index: Arc<dyn RunIndex>,
    run_id: &RunId,
    wait: Duration,
) -> Result<RunStatus> {
    let located = locate(resolver, index.as_ref(), run_id).await?;
    if located.record.status != RunStatus::Running {
        return Ok(located.record.status);
    }
    index.update_run(run_id, &RunUpdate { cancel_requested: Some(true), ..Default::default() }).await?;
    if controller_alive(&located.record) {
        let vanished = || Error::new(ErrorKind::Io, format!("run {run_id} vanished from the index"));
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = index.get_run(run_id).await?.ok_or_else(vanished)?;
            if r.status != RunStatus::Running {
                return Ok(r.status);
            }
            if !controller_alive(&r) {
                break;
            }
        }
        let r = index.get_run(run_id).await?.ok_or_else(vanished)?;
        if controller_alive(&r) {
            return Err(Error::new(
                ErrorKind::Transient,
                format!("run {run_id} did not stop within {}s", wait.as_secs()),
            ));
        }
    }
    // The controller is gone: stop what it left running and seal.
    let backend = resolver.backend(&located.config).await?;
    stop_leftovers(index.as_ref(), backend.as_ref(), run_id).await?;
    sweep_environments(&located.config, resolver, run_id).await;
    for t in index.list_tasks(run_id).await? {
        if matches!(t.state, TaskState::Queued | TaskState::Running) {
            index.record_task(run_id, &TaskTransition::new(t.task_id.clone(), t.attempt, TaskState::Cancelled)).await?;
        }
    }
    let meta: Metadata = read_json(located.store.as_ref(), run_id, layout::METADATA).await.map_err(not_user_error)?;
    let tasks = TaskTable::read(located.store.as_ref(), run_id).await.map_err(not_user_error)?;
    let sealed =
        seal_run(&located.store, index.as_ref(), &meta, tasks.ids(), RunStatus::Interrupted, None, None).await?;
    Ok(sealed.status)
}

async fn drive(mut run: Run, todo: Vec<u32>, epoch: u32, opts: ControllerOptions) -> Result<RunOutcome> {
    let (mut spans, earlier_root) = SpanFile::open(&run, opts.journal.clone()).await?;
    let span = tracing::info_span!(
        "eval.run",
        agenteval.run.id = %run.run_id,
        agenteval.run.name = run.config.name.as_str(),
        agenteval.benchmark = run.meta.benchmark.as_str(),
        agenteval.agent = run.meta.agent.as_str(),
        agenteval.model = run.config.agent.model().unwrap_or(""),
        agenteval.backend = run.meta.backend.as_str(),
        agenteval.tasks_total = run.tasks.len() as i64,
        agenteval.epoch = epoch as i64,
        agenteval.status = Empty,
        agenteval.passed = Empty,
        agenteval.pass_rate = Empty,
        agenteval.cost_usd = Empty,
        agenteval.tokens = Empty,
    );
    // A resumed run stays one trace: its new root hangs under the first controller's. A new
    // run's root hangs under its caller's span when the caller says which (`TRACEPARENT`: a CI
    // pipeline's, a scheduler's), so the run is a part of the caller's trace.
    let caller = || std::env::var(telemetry::TRACEPARENT_ENV).ok().filter(|t| !t.trim().is_empty());
    if let Some(tp) = earlier_root.or_else(caller) {
        telemetry::set_remote_parent(&span, &tp);
    }
    run.epoch = epoch;
    run.task_images = images::uses_task_images(&run.config, run.backend.as_ref()).await?;
    run.metrics = Some(FleetMetrics::new(&run.run_id.to_string(), &run.meta.benchmark, &run.meta.backend));
    run.journal = opts.journal.clone();
    let progress = opts.progress.clone();
    let resolver = opts.resolver.clone();
    let mut opts = opts;
    let mut todo = todo;
    let drive::Driven { status, reason, fault, launch_field } = loop {
        let driven =
            match drive::drive_jobs(&run, todo, epoch, &mut opts, &span, &mut spans).instrument(span.clone()).await {
                Ok(s) => s,
                Err(e) => {
                    telemetry::set_error(&span, &e.to_string());
                    return Err(e);
                }
            };
        let Some(rounds) = opts.rounds.clone().filter(|_| driven.status == RunStatus::Complete) else {
            break driven;
        };
        match rounds.look(&run.run_id).await {
            Ok(Round::Repeat(ids)) if !ids.is_empty() => {
                todo = repeat(&mut run, &ids).await?;
                if todo.is_empty() {
                    break driven;
                }
                progress.message(&format!(
                    "adaptive repetitions: {} more attempt(s) where the verdict is open",
                    todo.len()
                ));
            }
            Ok(Round::Repeat(_)) => break driven,
            Ok(Round::Done(spend)) => {
                run.meta.adaptive = Some(spend);
                break driven;
            }
            // The tasks' results stand; only the spending stops. Judging after the seal says
            // what is wrong with the comparison.
            Err(e) => {
                tracing::warn!("adaptive repetitions stopped: the run cannot be judged between rounds: {e}");
                break driven;
            }
        }
    };
    run.meta.reason = reason.clone();
    // Whatever the workers left (a killed one's environments) goes before the seal.
    sweep_environments(&run.config, resolver.as_ref(), &run.run_id).await;
    let sealed = seal_run(
        &run.store,
        run.index.as_ref(),
        &run.meta,
        run.tasks.ids(),
        status,
        Some(epoch),
        Some((span, spans, &run.fleet_file)),
    )
    .await?;
    progress.finish();
    Ok(RunOutcome {
        run_id: run.run_id,
        status: sealed.status,
        bundle_uri: run.store.bundle_uri(&run.run_id),
        summary: sealed.summary,
        reason,
        fault,
        launch_field,
    })
}

/// Adds one more attempt of each task of `ids` (base ids) to a running run: its table (and
/// `tasks.jsonl`), the index and the metadata's count; returns their positions to dispatch.
async fn repeat(run: &mut Run, ids: &[String]) -> Result<Vec<u32>> {
    let mut first: std::collections::HashMap<String, (usize, u32)> = std::collections::HashMap::new();
    for (i, id) in run.tasks.ids().iter().enumerate() {
        let e = first.entry(id.base().to_string()).or_insert((i, 0));
        e.1 += 1;
        if id.as_str() == id.base() {
            e.0 = i;
        }
    }
    let mut added = Vec::new();
    let mut todo = Vec::new();
    // However the judge answers, no task gets more than `max` attempts: a round adds nothing
    // past it, and a round that can add nothing ends the run.
    let most = run.config.repetitions.max();
    for id in ids {
        let Some(&(at, reps)) = first.get(id) else {
            return Err(Error::internal(format!("adaptive repetitions named task {id}, which the run does not have")));
        };
        if reps >= most {
            continue;
        }
        let mut spec = run.tasks.spec(at)?;
        spec.id = spec.id.repetition(reps);
        todo.push(run.tasks.len() as u32);
        run.tasks.push(&spec)?;
        added.push(spec.id);
    }
    if added.is_empty() {
        return Ok(todo);
    }
    run.tasks.write_to(run.store.as_ref(), &run.run_id, layout::TASKS).await?;
    run.meta.tasks_total = run.tasks.len() as u64;
    run.index.add_tasks(&run.run_id, &added, run.meta.tasks_total).await?;
    run.store.put(&run.run_id, layout::METADATA, &to_json_bytes(&run.meta)).await?;
    Ok(todo)
}

/// A sealed run.
struct Sealed {
    pub status: RunStatus,
    pub summary: RunSummary,
}

/// The one way a run ends, whatever the ending (complete, failed, interrupted, budget exceeded,
/// or a cancel that finds its controller gone): summary, report, replay command and final
/// metadata; then the controller's `eval.run` span closes with the outcome and the run's span
/// file and its telemetry file are finished (and any a dead controller left in parts
/// joined), because the manifest that follows covers them; last, the index is told.
/// How long the seal waits for a winning attempt that is still moving its files into place.
const PUBLISH_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Tasks whose winning attempt completed in the index and then died before it had moved its
/// staged files into the task folder, or is moving them now (a duplicate worker nobody waits
/// for). Found from what is still staged: a winner moves its files out, so `jobs/` holds only
/// losers' leftovers and unfinished moves, and one listing of it is all this costs when nothing
/// is missing (no per-task index read, which on DynamoDB would cost a scan). The seal waits a
/// little for a move under way, then makes it itself, for the job and attempt the index names.
async fn finish_publishing(store: &dyn BundleStore, index: &dyn RunIndex, run: &RunId) -> Result<()> {
    let mut staged: Vec<(agenteval_core::JobId, u32, agenteval_core::TaskId)> = Vec::new();
    for path in store.list(run, "jobs/").await? {
        // jobs/<job>/attempt-<n>/tasks/<task>.tar.gz (or, staged by a worker of before schema
        // 1.1, jobs/<job>/attempt-<n>/tasks/<task>/result.json)
        let parts: Vec<&str> = path.split('/').collect();
        let (job, attempt, task) = match parts.as_slice() {
            ["jobs", job, attempt, "tasks", pack] if pack.ends_with(layout::PACK_SUFFIX) => {
                (*job, *attempt, &pack[..pack.len() - layout::PACK_SUFFIX.len()])
            }
            ["jobs", job, attempt, "tasks", task, "result.json"] => (*job, *attempt, *task),
            _ => continue,
        };
        if let (Ok(job), Some(Ok(attempt)), Ok(task)) =
            (job.parse(), attempt.strip_prefix("attempt-").map(str::parse::<u32>), task.parse())
        {
            staged.push((job, attempt, task));
        }
    }
    let mut waiting = Vec::new();
    for (job, attempt, task) in staged {
        if !taskpack::has_result(store, run, &task).await? {
            waiting.push((job, attempt, task));
        }
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let ids: Vec<agenteval_core::TaskId> = waiting.iter().map(|(_, _, t)| t.clone()).collect();
    let records = index.get_tasks(run, &ids).await?;
    let deadline = tokio::time::Instant::now() + PUBLISH_GRACE;
    for ((job, attempt, task), rec) in waiting.into_iter().zip(records) {
        // Only the attempt the index recorded as finishing the task is published.
        let Some(rec) = rec else { continue };
        let won = matches!(rec.state, TaskState::Completed | TaskState::Failed)
            && rec.attempt == attempt
            && rec.job_id.as_ref() == Some(&job);
        if !won {
            continue;
        }
        while !taskpack::has_result(store, run, &task).await? && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        if !taskpack::has_result(store, run, &task).await?
            && bundle::publish_staged(store, run, &job, attempt, &task).await?
        {
            tracing::warn!(task = %task, attempt, "published the files its worker left staged");
        }
    }
    Ok(())
}

async fn seal_run(
    store: &Arc<dyn BundleStore>,
    index: &dyn RunIndex,
    meta: &Metadata,
    ids: &[agenteval_core::TaskId],
    status: RunStatus,
    lease: Option<u32>,
    driven: Option<(tracing::Span, SpanFile, &fleet_file::TelemetryFile)>,
) -> Result<Sealed> {
    let (run_span, spans, fleet) = match driven {
        Some((span, file, fleet)) => (Some(span), Some(file), Some(fleet)),
        None => (None, None, None),
    };
    finish_publishing(store.as_ref(), index, &meta.run_id).await?;
    let mut meta = meta.clone();
    meta.status = status;
    meta.finished_at = Some(Utc::now());
    if meta.budget_usd.is_some() {
        // Tasks cut short by the budget leave no result, but their calls were paid for.
        meta.spent_usd = index.spend(&meta.run_id).await.ok();
    }
    // Every call the run's gateways counted, its tasks with no result included.
    meta.calls_at_wire = index.calls(&meta.run_id).await.ok().filter(|(n, _)| *n > 0);
    let span = run_span.unwrap_or_else(tracing::Span::none);
    let sealed = bundle::seal_contents(store.clone(), &meta, ids).instrument(span.clone()).await;
    let (summary, hints) = match sealed {
        Ok((s, h)) => (Ok(s), h),
        Err(e) => (Err(e), Default::default()),
    };
    match &summary {
        Ok(s) => {
            span.record("agenteval.status", status.as_str());
            span.record("agenteval.passed", s.passed as i64);
            span.record("agenteval.pass_rate", s.pass_rate);
            span.record("agenteval.cost_usd", s.total_cost_usd);
            span.record("agenteval.tokens", s.total_tokens as i64);
            if status != RunStatus::Complete {
                telemetry::set_error(&span, &format!("run {}", status.as_str()));
            }
        }
        Err(e) => telemetry::set_error(&span, &e.to_string()),
    }
    drop(span);
    let summary = summary?;
    if let Some(spans) = spans {
        spans.finish().await?;
    }
    if let Some(fleet) = fleet
        && let Err(e) = fleet.finish().await
    {
        tracing::warn!("telemetry file not finished: {e}");
    }
    store.join_parts(&meta.run_id).await?;
    bundle::write_manifest(store.as_ref(), &meta.run_id, &hints).await?;
    index
        .update_run(
            &meta.run_id,
            &RunUpdate { status: Some(status), finished_at: meta.finished_at, if_epoch: lease, ..Default::default() },
        )
        .await?;
    Ok(Sealed { status, summary })
}
