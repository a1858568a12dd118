//! The controller: turns a run config into jobs, dispatches them through a `CloudBackend` with
//! bounded concurrency, retries infrastructure failures, enforces the run budget, reacts to
//! cancellation, and seals the bundle. Also `resume` and `cancel` of existing runs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::config::{LoadedConfig, RunConfig};
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::traits::{Appender, BundleStore, CloudBackend, RunIndex, TelemetrySnapshot};
use agenteval_core::{Error, ErrorKind, JobId, Result, RunId, SCHEMA_VERSION};
use chrono::Utc;
use opentelemetry::KeyValue;
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;
use tracing::field::Empty;

use crate::benchmarks::benchmark_from_config;
use crate::bundle::{self, Metadata, TaskTable, read_json, sha256_hex, to_json_bytes};
use crate::factory;
use crate::telemetry::{self, FleetMetrics, Journal, TRACEPARENT_ENV};

/// A controller heartbeat older than this means the controller is gone.
pub const STALE_HEARTBEAT: Duration = Duration::from_secs(15);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
const COUNTS_EVERY: Duration = Duration::from_millis(200);
const TELEMETRY_EVERY: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(250);
/// Jobs submitted concurrently in one dispatch round.
const DISPATCH_BATCH: usize = 32;
/// How long cancelled jobs get to stop before the controller seals without them.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// What the progress display is told.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgressView {
    pub total: u64,
    pub waiting: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub passed: u64,
    pub cost_usd: f64,
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
}

/// Options that come from the command line rather than the config.
pub struct ControllerOptions {
    /// The agenteval binary workers run as.
    pub exe: PathBuf,
    pub progress: Arc<dyn Progress>,
    /// Becomes `true` when the user interrupts (Ctrl-C).
    pub interrupt: watch::Receiver<bool>,
    /// Where this process's finished spans wait to be written to the bundle's `spans.jsonl`.
    pub journal: Journal,
    /// Environment each worker gets (telemetry settings), asked at every dispatch so that it
    /// can change during the run; the job's `TRACEPARENT` is added.
    pub worker_env: WorkerEnv,
}

/// See `ControllerOptions::worker_env`.
pub type WorkerEnv = Arc<dyn Fn() -> BTreeMap<String, String> + Send + Sync>;

struct Pending {
    job_id: JobId,
    attempt: u32,
    tasks: Vec<u32>,
}

struct InFlight {
    handle: JobHandle,
    tasks: Vec<u32>,
    submitted: Instant,
    /// Whether the job has been seen running (its start latency is recorded once).
    started: bool,
    /// The job's `eval.job` span, from submit to end.
    span: tracing::Span,
}

/// Why dispatching stopped early.
#[derive(Debug, Clone, Copy, PartialEq)]
enum StopReason {
    Interrupted,
    Budget,
}

struct Run {
    run_id: RunId,
    config: RunConfig,
    index_uri: String,
    tasks: TaskTable,
    store: Arc<dyn BundleStore>,
    index: Arc<dyn RunIndex>,
    backend: Arc<dyn CloudBackend>,
    meta: Metadata,
    /// Attempts already used before this controller started (resume); retry limits count from it.
    attempt_base: u32,
    /// Set when the run starts driving.
    metrics: Option<FleetMetrics>,
    journal: Journal,
}

impl Run {
    /// A run ready to drive; its id comes from the metadata, its index URI from the config, and
    /// its metrics and journal are set when driving starts.
    fn new(
        config: RunConfig,
        tasks: TaskTable,
        store: Arc<dyn BundleStore>,
        index: Arc<dyn RunIndex>,
        backend: Arc<dyn CloudBackend>,
        meta: Metadata,
        attempt_base: u32,
    ) -> Self {
        Run {
            run_id: meta.run_id,
            index_uri: factory::index_uri(&config),
            config,
            tasks,
            store,
            index,
            backend,
            meta,
            attempt_base,
            metrics: None,
            journal: None,
        }
    }
}

fn config_hash(resolved: &serde_json::Value) -> String {
    sha256_hex(&serde_json::to_vec(resolved).expect("config serializes"))
}

fn git_sha(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Starts a new run from a loaded config and drives it to the end.
pub async fn submit(loaded: &LoadedConfig, opts: ControllerOptions) -> Result<RunOutcome> {
    let config = loaded.config.clone();
    let store = factory::store_for(&config).await?;
    let index = factory::index_for(&config).await?;
    let backend = factory::backend_for(&config, &opts.exe).await?;
    let benchmark = benchmark_from_config(&config.benchmark)?;
    let mut tasks = TaskTable::default();
    let reps = config.repetitions.max(1);
    benchmark
        .for_each_task(&config.benchmark.filter, &mut |t| {
            for r in 0..reps {
                if r == 0 {
                    tasks.push(&t);
                } else {
                    let mut rep = t.clone();
                    rep.id = t.id.repetition(r);
                    tasks.push(&rep);
                }
            }
            Ok(())
        })
        .await?;
    if tasks.is_empty() {
        return Err(Error::invalid("the benchmark filter matches no tasks"));
    }
    let run_id = RunId::new();
    let now = Utc::now();
    let hash = config_hash(&loaded.resolved);
    let meta = Metadata {
        schema_version: SCHEMA_VERSION.into(),
        run_id,
        name: config.name.clone(),
        status: RunStatus::Running,
        sealed: false,
        backend: backend.id().to_string(),
        benchmark: benchmark.name().to_string(),
        agent: loaded.resolved["agent"]["kind"].as_str().unwrap_or("unknown").to_string(),
        config_hash: hash.clone(),
        agenteval_version: crate::VERSION.into(),
        git_sha: loaded.path.parent().and_then(git_sha),
        tasks_total: tasks.len() as u64,
        created_at: now,
        finished_at: None,
        resumed: 0,
    };
    store.put(&run_id, layout::CONFIG, &to_json_bytes(&loaded.resolved)).await?;
    store.put(&run_id, layout::TASKS, tasks.jsonl()).await?;
    store.put(&run_id, layout::METADATA, &to_json_bytes(&meta)).await?;
    let record = RunRecord {
        run_id,
        name: config.name.clone(),
        benchmark: meta.benchmark.clone(),
        agent: meta.agent.clone(),
        backend: meta.backend.clone(),
        status: RunStatus::Running,
        bundle_uri: store.bundle_uri(&run_id),
        config_hash: hash,
        tasks_total: tasks.len() as u64,
        created_at: now,
        updated_at: now,
        finished_at: None,
        heartbeat_at: now,
        cancel_requested: false,
        controller: controller_id(),
        epoch: 0,
    };
    index.create_run(&record, tasks.ids()).await?;
    let todo: Vec<u32> = (0..tasks.len() as u32).collect();
    let run = Run::new(config, tasks, store, index, backend, meta, 0);
    drive(run, todo, 0, opts).await
}

/// Where an existing run lives, from its index record.
pub struct Located {
    pub record: RunRecord,
    pub store: Arc<dyn BundleStore>,
    pub config: RunConfig,
}

pub async fn locate(index: &dyn RunIndex, run_id: &RunId) -> Result<Located> {
    let record =
        index.get_run(run_id).await?.ok_or_else(|| Error::not_found(format!("run {run_id} is not in the index")))?;
    let (store, _) = factory::store_from_bundle_uri(&record.bundle_uri).await?;
    let config: RunConfig = read_json(store.as_ref(), run_id, layout::CONFIG).await?;
    Ok(Located { record, store, config })
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

/// Stops workers a dead controller left behind, so that a resume does not race them.
async fn stop_leftovers(index: &dyn RunIndex, backend: &dyn CloudBackend, run_id: &RunId) -> Result<()> {
    for job in index.list_jobs(run_id).await? {
        if job.status == "running" {
            backend.cancel_job(&job.handle, "controller gone").await?;
            let mut j = job.clone();
            j.status = "cancelled".into();
            j.updated_at = Utc::now();
            index.record_job(&j).await?;
        }
    }
    Ok(())
}

/// Re-dispatches every task the index does not record as completed, into the same bundle.
pub async fn resume(index: Arc<dyn RunIndex>, run_id: &RunId, opts: ControllerOptions) -> Result<RunOutcome> {
    let Located { record, store, config } = locate(index.as_ref(), run_id).await?;
    if controller_alive(&record) {
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "run {run_id} is still running (its controller was seen {}s ago)",
                (Utc::now() - record.heartbeat_at).num_seconds()
            ),
        ));
    }
    let mut meta: Metadata = read_json(store.as_ref(), run_id, layout::METADATA).await?;
    let tasks = TaskTable::read(store.as_ref(), run_id).await?;
    let states = index.list_tasks(run_id).await?;
    let attempt_base = states.iter().map(|t| t.attempt).max().unwrap_or(0);
    let done: std::collections::HashSet<_> =
        states.iter().filter(|t| t.state == TaskState::Completed).map(|t| t.task_id.clone()).collect();
    let todo: Vec<u32> = (0..tasks.len() as u32).filter(|&i| !done.contains(tasks.id(i as usize))).collect();
    let epoch = record.epoch + 1;
    let backend = factory::backend_for(&config, &opts.exe).await?;
    stop_leftovers(index.as_ref(), backend.as_ref(), run_id).await?;
    index
        .update_run(
            run_id,
            &RunUpdate {
                status: Some(RunStatus::Running),
                cancel_requested: Some(false),
                epoch: Some(epoch),
                heartbeat: true,
                controller: Some(controller_id()),
                ..Default::default()
            },
        )
        .await?;
    meta.status = RunStatus::Running;
    meta.sealed = false;
    meta.finished_at = None;
    meta.resumed = epoch;
    store.put(run_id, layout::METADATA, &to_json_bytes(&meta)).await?;
    let run = Run::new(config, tasks, store, index, backend, meta, attempt_base);
    drive(run, todo, epoch, opts).await
}

/// Asks a run to stop. If its controller is alive it is told through the index and stops its
/// own jobs; if not, the jobs are cancelled here and the bundle is sealed as `interrupted`.
pub async fn cancel(index: Arc<dyn RunIndex>, run_id: &RunId, exe: &Path, wait: Duration) -> Result<RunStatus> {
    let located = locate(index.as_ref(), run_id).await?;
    if located.record.status != RunStatus::Running {
        return Ok(located.record.status);
    }
    index.update_run(run_id, &RunUpdate { cancel_requested: Some(true), ..Default::default() }).await?;
    if controller_alive(&located.record) {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = index.get_run(run_id).await?.ok_or_else(|| Error::not_found("run vanished"))?;
            if r.status != RunStatus::Running {
                return Ok(r.status);
            }
            if !controller_alive(&r) {
                break;
            }
        }
        let r = index.get_run(run_id).await?.ok_or_else(|| Error::not_found("run vanished"))?;
        if controller_alive(&r) {
            return Err(Error::new(
                ErrorKind::Transient,
                format!("run {run_id} did not stop within {}s", wait.as_secs()),
            ));
        }
    }
    // The controller is gone: stop what it left running and seal.
    let backend = factory::backend_for(&located.config, exe).await?;
    stop_leftovers(index.as_ref(), backend.as_ref(), run_id).await?;
    for t in index.list_tasks(run_id).await? {
        if matches!(t.state, TaskState::Queued | TaskState::Running) {
            index.record_task(run_id, &TaskTransition::new(t.task_id.clone(), t.attempt, TaskState::Cancelled)).await?;
        }
    }
    let mut meta: Metadata = read_json(located.store.as_ref(), run_id, layout::METADATA).await?;
    meta.status = RunStatus::Interrupted;
    meta.finished_at = Some(Utc::now());
    let ids = TaskTable::read(located.store.as_ref(), run_id).await?;
    bundle::seal(located.store.as_ref(), &meta, ids.ids()).await?;
    index
        .update_run(
            run_id,
            &RunUpdate { status: Some(RunStatus::Interrupted), finished_at: meta.finished_at, ..Default::default() },
        )
        .await?;
    Ok(RunStatus::Interrupted)
}

struct Counters {
    submitted: u64,
    succeeded: u64,
    failed: u64,
    retried: u64,
}

/// The run's `spans.jsonl`, appended as the controller's spans finish so that a crash loses at
/// most the spans still open.
struct SpanFile {
    journal: Journal,
    appender: Option<Box<dyn Appender>>,
}

impl SpanFile {
    /// Opens the run's span file; a resumed run keeps the spans of earlier controllers. Also
    /// returns the `traceparent` of the first controller's `eval.run`, if there was one.
    async fn open(run: &Run, journal: Journal) -> Result<(Self, Option<String>)> {
        if journal.is_none() {
            return Ok((SpanFile { journal, appender: None }, None));
        }
        let earlier = match run.store.get(&run.run_id, layout::SPANS).await {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let root = earlier_root(&earlier);
        let mut appender = run.store.open_appender(&run.run_id, layout::SPANS).await?;
        if !earlier.is_empty() {
            appender.append(&earlier).await?;
        }
        Ok((SpanFile { journal, appender: Some(appender) }, root))
    }

    async fn flush(&mut self) -> Result<()> {
        if let (Some(j), Some(a)) = (&self.journal, self.appender.as_mut()) {
            let lines = j.take_all();
            if !lines.is_empty() {
                a.append(&lines).await?;
            }
        }
        Ok(())
    }

    async fn finish(mut self) -> Result<()> {
        self.flush().await?;
        match self.appender.take() {
            Some(a) => a.finish().await,
            None => Ok(()),
        }
    }
}

/// The `traceparent` of the outermost `eval.run` in a run's `spans.jsonl`.
fn earlier_root(spans: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Line {
        trace_id: String,
        span_id: String,
        name: String,
        parent_span_id: Option<String>,
    }
    spans
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Line>(l).ok())
        .find(|l| l.name == "eval.run" && l.parent_span_id.is_none())
        .map(|l| format!("00-{}-{}-01", l.trace_id, l.span_id))
}

async fn drive(mut run: Run, todo: Vec<u32>, epoch: u32, opts: ControllerOptions) -> Result<RunOutcome> {
    let (mut spans, earlier_root) = SpanFile::open(&run, opts.journal.clone()).await?;
    let span = tracing::info_span!(
        "eval.run",
        agenteval.run.id = %run.run_id,
        agenteval.run.name = run.config.name.as_str(),
        agenteval.benchmark = run.meta.benchmark.as_str(),
        agenteval.agent = run.meta.agent.as_str(),
        gen_ai.request.model = run.config.agent.model.as_deref().unwrap_or(""),
        agenteval.backend = run.meta.backend.as_str(),
        agenteval.tasks_total = run.tasks.len() as i64,
        agenteval.epoch = epoch as i64,
        agenteval.status = Empty,
        agenteval.passed = Empty,
        agenteval.pass_rate = Empty,
        agenteval.cost_usd = Empty,
        agenteval.tokens = Empty,
    );
    // A resumed run stays one trace: its new root hangs under the first controller's.
    if let Some(tp) = earlier_root {
        telemetry::set_remote_parent(&span, &tp);
    }
    run.metrics = Some(FleetMetrics::new(&run.run_id.to_string(), &run.meta.benchmark, &run.meta.backend));
    run.journal = opts.journal.clone();
    let progress = opts.progress.clone();
    let outcome = drive_jobs(&run, todo, epoch, opts, &span, &mut spans).instrument(span.clone()).await;
    let sealed = match outcome {
        Ok(status) => seal_run(&run, status).instrument(span.clone()).await,
        Err(e) => Err(e),
    };
    match &sealed {
        Ok(Sealed { outcome: o, .. }) => {
            span.record("agenteval.status", o.status.as_str());
            span.record("agenteval.passed", o.summary.passed as i64);
            span.record("agenteval.pass_rate", o.summary.pass_rate);
            span.record("agenteval.cost_usd", o.summary.total_cost_usd);
            span.record("agenteval.tokens", o.summary.total_tokens as i64);
            if o.status != RunStatus::Complete {
                telemetry::set_error(&span, &format!("run {}", o.status.as_str()));
            }
        }
        Err(e) => telemetry::set_error(&span, &e.to_string()),
    }
    // The manifest covers the run's spans, so the root span ends first.
    drop(span);
    let outcome = sealed?;
    spans.finish().await?;
    bundle::write_manifest(run.store.as_ref(), &run.run_id).await?;
    run.index
        .update_run(
            &run.run_id,
            &RunUpdate { status: Some(outcome.outcome.status), finished_at: outcome.finished_at, ..Default::default() },
        )
        .await?;
    progress.finish();
    Ok(outcome.outcome)
}

struct Sealed {
    finished_at: Option<chrono::DateTime<Utc>>,
    outcome: RunOutcome,
}

async fn seal_run(run: &Run, status: RunStatus) -> Result<Sealed> {
    let mut meta = run.meta.clone();
    meta.status = status;
    meta.finished_at = Some(Utc::now());
    let summary = bundle::seal_contents(run.store.as_ref(), &meta, run.tasks.ids()).await?;
    let outcome = RunOutcome { run_id: run.run_id, status, bundle_uri: run.store.bundle_uri(&run.run_id), summary };
    Ok(Sealed { finished_at: meta.finished_at, outcome })
}

/// Dispatches and watches jobs until every task is done or the run is stopped; returns the
/// run's final status.
async fn drive_jobs(
    run: &Run,
    todo: Vec<u32>,
    epoch: u32,
    mut opts: ControllerOptions,
    run_span: &tracing::Span,
    spans: &mut SpanFile,
) -> Result<RunStatus> {
    let metrics = run.metrics.as_ref().expect("metrics set before driving");
    let progress = opts.progress.clone();
    let bundle_uri = run.store.bundle_uri(&run.run_id);
    progress.start(&run.run_id, &bundle_uri, run.tasks.len() as u64);
    let per_job = run.config.backend.tasks_per_job.max(1) as usize;
    let mut queue: VecDeque<Pending> = todo
        .chunks(per_job)
        .enumerate()
        .map(|(n, chunk)| Pending {
            job_id: JobId::numbered(epoch, n + 1),
            attempt: run.attempt_base + 1,
            tasks: chunk.to_vec(),
        })
        .collect();
    let mut in_flight: HashMap<JobId, InFlight> = HashMap::new();
    let max_conc = run.config.backend.max_concurrent_jobs.max(1) as usize;
    let mut counters = Counters { submitted: 0, succeeded: 0, failed: 0, retried: 0 };
    let mut stop: Option<StopReason> = None;
    let mut last_counts = Instant::now() - COUNTS_EVERY;
    let mut last_beat = Instant::now();
    let mut last_telemetry = Instant::now();
    let mut counts = run.index.task_counts(&run.run_id).await?;
    let mut gave_up = false;

    loop {
        if *opts.interrupt.borrow() {
            stop = Some(StopReason::Interrupted);
        }
        if last_counts.elapsed() >= COUNTS_EVERY {
            counts = run.index.task_counts(&run.run_id).await?;
            last_counts = Instant::now();
            progress.update(&view(&counts, in_flight.len(), counters.retried));
            gauges(metrics, &counts, in_flight.len(), queue.len());
            if let Some(max) = run.config.max_run_cost_usd
                && counts.cost_usd >= max
                && stop.is_none()
            {
                progress.message(&format!("run budget ${max:.4} reached (spent ${:.4}); stopping", counts.cost_usd));
                stop = Some(StopReason::Budget);
            }
        }
        if last_beat.elapsed() >= HEARTBEAT_EVERY {
            last_beat = Instant::now();
            run.index.update_run(&run.run_id, &RunUpdate { heartbeat: true, ..Default::default() }).await?;
            if stop.is_none()
                && let Some(r) = run.index.get_run(&run.run_id).await?
                && r.cancel_requested
            {
                progress.message("cancel requested; stopping");
                stop = Some(StopReason::Interrupted);
            }
        }
        if last_telemetry.elapsed() >= TELEMETRY_EVERY {
            last_telemetry = Instant::now();
            export(run, &counts, &in_flight, queue.len(), &counters).await;
            spans.flush().await?;
        }
        if stop.is_some() {
            break;
        }
        // Dispatch in concurrent batches: a cloud launch takes a round trip of 100 ms or more,
        // and the backend's own pacing (a token bucket) decides the rate, not this loop.
        while in_flight.len() < max_conc && !queue.is_empty() {
            let n = (max_conc - in_flight.len()).min(queue.len()).min(DISPATCH_BATCH);
            let batch: Vec<(Pending, tracing::Span)> = queue
                .drain(..n)
                .map(|p| {
                    let s = job_span(run_span, &p);
                    (p, s)
                })
                .collect();
            let env = (opts.worker_env)();
            let results = futures::future::join_all(
                batch.iter().map(|(p, span)| dispatch(run, p, span, &env).instrument(span.clone())),
            )
            .await;
            let mut retry_later = Vec::new();
            for ((p, span), res) in batch.into_iter().zip(results) {
                match res {
                    Ok(handle) => {
                        counters.submitted += 1;
                        metrics.jobs_submitted.add(1, metrics.attrs());
                        span.record("agenteval.job.handle", handle.native_id.as_str());
                        in_flight.insert(
                            p.job_id.clone(),
                            InFlight { handle, tasks: p.tasks, submitted: Instant::now(), started: false, span },
                        );
                    }
                    Err(e) if e.kind().is_retryable() => {
                        tracing::warn!(job = %p.job_id, "submit failed, will retry: {e}");
                        telemetry::set_error(&span, &format!("submit failed, will retry: {e}"));
                        retry_later.push(p);
                    }
                    Err(e) => {
                        tracing::error!(job = %p.job_id, "submit failed: {e}");
                        telemetry::set_error(&span, &format!("submit failed: {e}"));
                        let reason = format!("could not submit job: {e}");
                        give_up(run, &span, &p.job_id, p.attempt, &p.tasks, &reason).await?;
                        gave_up = true;
                    }
                }
            }
            if !retry_later.is_empty() {
                for p in retry_later.into_iter().rev() {
                    queue.push_front(p);
                }
                break;
            }
        }
        if in_flight.is_empty() && queue.is_empty() {
            break;
        }
        tokio::select! {
            _ = run.backend.wait_for_change(POLL) => {}
            _ = opts.interrupt.changed() => {}
        }
        let handles: Vec<JobHandle> = in_flight.values().map(|f| f.handle.clone()).collect();
        let statuses = match run.backend.job_status(&handles).await {
            Ok(s) => s,
            Err(e) if e.kind().is_retryable() => {
                tracing::warn!("job status failed, will retry: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        for (handle, status) in handles.into_iter().zip(statuses) {
            if let Some(f) = in_flight.get_mut(&handle.job_id)
                && !f.started
                && status != JobStatus::Queued
            {
                f.started = true;
                metrics.job_start_latency.record(f.submitted.elapsed().as_secs_f64(), metrics.attrs());
            }
            if !status.is_terminal() {
                continue;
            }
            let f = in_flight.remove(&handle.job_id).expect("job in flight");
            record_job(run, &handle, &status, f.tasks.len()).await?;
            tracing::debug!(job = %handle.job_id, ?status, secs = f.submitted.elapsed().as_secs_f64(), "job ended");
            // Whatever the job's status says, the index is the judge of what got done: a job that
            // "succeeded" without recording its tasks (a container that never ran, an emulator)
            // is an infrastructure failure like any other.
            let unfinished = unfinished(run, &f.tasks).await?;
            f.span.record("agenteval.job.status", job_status_word(&status));
            f.span.record("agenteval.job.unfinished", unfinished.len() as i64);
            let (infrastructure, reason) = match &status {
                JobStatus::Succeeded if unfinished.is_empty() => {
                    counters.succeeded += 1;
                    metrics.jobs_succeeded.add(1, metrics.attrs());
                    continue;
                }
                JobStatus::Succeeded => (true, format!("job ended without results for {} task(s)", unfinished.len())),
                JobStatus::Failed { infrastructure, reason, .. } => (*infrastructure, reason.clone()),
                JobStatus::Cancelled => (true, "worker was cancelled".to_string()),
                JobStatus::Queued | JobStatus::Running => unreachable!("terminal statuses only"),
            };
            counters.failed += 1;
            metrics.jobs_failed.add(1, metrics.attrs());
            telemetry::set_error(&f.span, &reason);
            if unfinished.is_empty() {
                continue;
            }
            let used = handle.attempt - run.attempt_base;
            if infrastructure && used < run.config.backend.max_attempts {
                counters.retried += 1;
                metrics.jobs_retried.add(1, metrics.attrs());
                progress.message(&format!(
                    "job {} attempt {} failed ({reason}); retrying {} task(s)",
                    handle.job_id,
                    handle.attempt,
                    unfinished.len()
                ));
                queue.push_front(Pending {
                    job_id: handle.job_id.clone(),
                    attempt: handle.attempt + 1,
                    tasks: unfinished,
                });
            } else {
                give_up(run, &f.span, &handle.job_id, handle.attempt, &unfinished, &reason).await?;
                gave_up = true;
            }
        }
    }

    if !in_flight.is_empty() {
        stop_jobs(run, &mut in_flight).await?;
    }
    counts = run.index.task_counts(&run.run_id).await?;
    progress.update(&view(&counts, 0, counters.retried));
    gauges(metrics, &counts, 0, queue.len());
    export(run, &counts, &in_flight, queue.len(), &counters).await;
    let status = match stop {
        Some(StopReason::Interrupted) => RunStatus::Interrupted,
        Some(StopReason::Budget) => RunStatus::BudgetExceeded,
        None if gave_up || counts.failed > 0 => RunStatus::Failed,
        None if counts.completed == counts.total => RunStatus::Complete,
        None => RunStatus::Failed,
    };
    progress.message("sealing bundle");
    Ok(status)
}

/// The `eval.job` span of one job attempt: a child of `eval.run` whatever span is current.
fn job_span(run_span: &tracing::Span, p: &Pending) -> tracing::Span {
    tracing::info_span!(
        parent: run_span,
        "eval.job",
        agenteval.job.id = %p.job_id,
        agenteval.attempt = p.attempt as i64,
        agenteval.job.tasks = p.tasks.len() as i64,
        agenteval.job.handle = Empty,
        agenteval.job.status = Empty,
        agenteval.job.unfinished = Empty,
    )
}

fn job_status_word(status: &JobStatus) -> &'static str {
    match status {
        JobStatus::Queued => "queued",
        JobStatus::Running => "running",
        JobStatus::Succeeded => "succeeded",
        JobStatus::Failed { .. } => "failed",
        JobStatus::Cancelled => "cancelled",
    }
}

fn gauges(m: &FleetMetrics, c: &TaskCounts, running: usize, queued: usize) {
    m.jobs_running.record(running as u64, m.attrs());
    m.queue_depth.record(queued as u64, m.attrs());
    if c.finished() > 0 {
        m.pass_rate.record(c.passed as f64 / c.finished() as f64, m.attrs());
    }
}

fn view(c: &TaskCounts, jobs: usize, retries: u64) -> ProgressView {
    ProgressView {
        total: c.total,
        waiting: c.pending + c.queued + c.cancelled,
        running: c.running,
        done: c.finished(),
        failed: c.failed,
        passed: c.passed,
        cost_usd: c.cost_usd,
        jobs_in_flight: jobs as u64,
        retries,
    }
}

async fn export(run: &Run, c: &TaskCounts, in_flight: &HashMap<JobId, InFlight>, queued: usize, k: &Counters) {
    let snap = TelemetrySnapshot {
        timestamp: Utc::now(),
        jobs_queued: queued as u64,
        jobs_running: in_flight.len() as u64,
        jobs_succeeded: k.succeeded,
        jobs_failed: k.failed,
        jobs_retried: k.retried,
        tasks_finished: c.finished(),
        tasks_passed: c.passed,
        cost_usd: c.cost_usd,
        tokens: c.tokens,
    };
    // Telemetry never harms a run.
    if let Err(e) = run.backend.export_telemetry(&run.run_id, &snap).await {
        tracing::warn!("telemetry export failed: {e}");
    }
}

async fn dispatch(
    run: &Run,
    p: &Pending,
    span: &tracing::Span,
    worker_env: &BTreeMap<String, String>,
) -> Result<JobHandle> {
    let mut env = worker_env.clone();
    if let Some(tp) = telemetry::traceparent(span) {
        env.insert(TRACEPARENT_ENV.into(), tp);
    }
    let spec = JobSpec {
        schema_version: SCHEMA_VERSION.into(),
        run_id: run.run_id,
        job_id: p.job_id.clone(),
        attempt: p.attempt,
        tasks: p.tasks.iter().map(|&i| run.tasks.spec(i as usize)).collect::<Result<_>>()?,
        bundle_uri: run.store.bundle_uri(&run.run_id),
        index_uri: run.index_uri.clone(),
        env,
    };
    run.store.put(&run.run_id, &layout::job_spec(&p.job_id, p.attempt), &to_json_bytes(&spec)).await?;
    let queued: Vec<_> = spec
        .tasks
        .iter()
        .map(|t| TaskTransition::new(t.id.clone(), p.attempt, TaskState::Queued).job(&p.job_id))
        .collect();
    run.index.record_tasks(&run.run_id, &queued).await?;
    let handle = run.backend.submit_job(&spec).await?;
    run.index
        .record_job(&JobRecord {
            run_id: run.run_id,
            handle: handle.clone(),
            status: "running".into(),
            task_count: spec.tasks.len() as u32,
            updated_at: Utc::now(),
        })
        .await?;
    Ok(handle)
}

async fn record_job(run: &Run, handle: &JobHandle, status: &JobStatus, n: usize) -> Result<()> {
    let s = job_status_word(status);
    run.index
        .record_job(&JobRecord {
            run_id: run.run_id,
            handle: handle.clone(),
            status: s.into(),
            task_count: n as u32,
            updated_at: Utc::now(),
        })
        .await
}

/// Tasks of a job the index does not record as completed or given up.
async fn unfinished(run: &Run, tasks: &[u32]) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for &i in tasks {
        let id = run.tasks.id(i as usize);
        match run.index.get_task(&run.run_id, id).await? {
            Some(t) if matches!(t.state, TaskState::Completed | TaskState::Failed) => task_metrics(run, &t),
            _ => out.push(i),
        }
    }
    Ok(out)
}

/// Per-task metrics, recorded once when the controller learns a task is finished (each task
/// belongs to exactly one job in flight).
fn task_metrics(run: &Run, t: &TaskRecord) {
    let Some(m) = &run.metrics else { return };
    let passed = t.passed.unwrap_or(false);
    m.tasks_completed.add(1, &m.attrs_with(KeyValue::new("agenteval.passed", passed)));
    m.task_duration.record(t.wall_seconds, m.attrs());
    m.tokens.add(t.tokens, m.attrs());
    m.cost.add(t.cost_usd, m.attrs());
}

/// Records tasks as infrastructure failures, with a result in the bundle so that the bundle
/// says what happened to every task.
/// Every task of the bundle has its `spans.jsonl`: for a task given up, the controller records an
/// `eval.task` span (status ERROR) under the last job attempt's span. It is parented through the
/// job's trace context, as a worker's would be, so that the journal keeps it apart from the
/// run's own spans.
async fn give_up(
    run: &Run,
    job_span: &tracing::Span,
    job: &JobId,
    attempt: u32,
    tasks: &[u32],
    reason: &str,
) -> Result<()> {
    for &i in tasks {
        let task = run.tasks.spec(i as usize)?;
        let now = Utc::now();
        let msg = format!("gave up after attempt {attempt}: {reason}");
        let span = tracing::info_span!(
            parent: None,
            "eval.task",
            agenteval.run.id = %run.run_id,
            agenteval.task.id = %task.id,
            agenteval.job.id = %job,
            agenteval.attempt = attempt as i64,
            agenteval.benchmark = run.meta.benchmark.as_str(),
            agenteval.agent = run.meta.agent.as_str(),
            agenteval.backend = run.meta.backend.as_str(),
            agenteval.passed = false,
            agenteval.terminated_by = TerminatedBy::InfraFailure.as_str(),
            agenteval.given_up = true,
        );
        if let Some(tp) = telemetry::traceparent(job_span) {
            telemetry::set_remote_parent(&span, &tp);
        }
        telemetry::set_error(&span, &msg);
        let root = telemetry::span_id(&span);
        drop(span);
        let spans = match (root, &run.journal) {
            (Some(root), Some(j)) => Some(j.take_tree(root)),
            _ => None,
        };
        let result = TaskResult {
            schema_version: SCHEMA_VERSION.into(),
            run_id: run.run_id,
            task_id: task.id.clone(),
            job_id: job.clone(),
            attempt,
            passed: false,
            agent: AgentResult {
                success: false,
                final_answer: None,
                error: Some(msg.clone()),
                total_cost_usd: 0.0,
                total_tokens: 0,
                wall_seconds: 0.0,
                terminated_by: TerminatedBy::InfraFailure,
                steps: 0,
            },
            scores: vec![EvaluatorScore::errored("benchmark", "benchmark", msg.clone())],
            started_at: now,
            finished_at: now,
        };
        let trace = TraceEvent {
            run_id: run.run_id,
            task_id: task.id.clone(),
            step: 0,
            timestamp: now,
            kind: EventKind::AgentTerminal,
            payload: json!({"terminated_by": "infra_failure", "error": msg, "written_by": "controller"}),
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
        };
        let mut line = serde_json::to_vec(&trace).expect("serializes");
        line.push(b'\n');
        let log = format!("{} controller: {msg}\nsee {}\n", now.to_rfc3339(), layout::job_log(job, attempt));
        run.store.put(&run.run_id, &layout::task_file(&task.id, layout::TASK_TRACE), &line).await?;
        bundle::write_task_outcome(run.store.as_ref(), &result, &log, spans.as_deref(), &|t: &str| t.to_string())
            .await?;
        if run.index.record_task(&run.run_id, &TaskTransition::completed(&result)).await?
            && let Some(m) = &run.metrics
        {
            m.tasks_completed.add(1, &m.attrs_with(KeyValue::new("agenteval.passed", false)));
            m.task_duration.record(0.0, m.attrs());
        }
    }
    Ok(())
}

/// Cancels every job in flight, waits (bounded) for them to stop, and records their unfinished
/// tasks as cancelled so `resume` picks them up.
async fn stop_jobs(run: &Run, in_flight: &mut HashMap<JobId, InFlight>) -> Result<()> {
    for f in in_flight.values() {
        if let Err(e) = run.backend.cancel_job(&f.handle, "run stopped").await {
            tracing::warn!(job = %f.handle.job_id, "cancel failed: {e}");
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    while !in_flight.is_empty() && Instant::now() < deadline {
        run.backend.wait_for_change(Duration::from_millis(100)).await;
        let handles: Vec<JobHandle> = in_flight.values().map(|f| f.handle.clone()).collect();
        let Ok(statuses) = run.backend.job_status(&handles).await else {
            continue;
        };
        for (h, st) in handles.into_iter().zip(statuses) {
            if st.is_terminal() {
                let f = in_flight.remove(&h.job_id).expect("in flight");
                record_job(run, &h, &JobStatus::Cancelled, f.tasks.len()).await?;
                for i in unfinished(run, &f.tasks).await? {
                    let id = run.tasks.id(i as usize).clone();
                    run.index
                        .record_task(&run.run_id, &TaskTransition::new(id, h.attempt, TaskState::Cancelled))
                        .await?;
                }
            }
        }
    }
    for (_, f) in in_flight.drain() {
        tracing::warn!(job = %f.handle.job_id, "job did not stop in time");
        for i in unfinished(run, &f.tasks).await? {
            let id = run.tasks.id(i as usize).clone();
            run.index
                .record_task(&run.run_id, &TaskTransition::new(id, f.handle.attempt, TaskState::Cancelled))
                .await?;
        }
    }
    Ok(())
}
