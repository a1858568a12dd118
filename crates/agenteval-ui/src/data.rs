//! Reading what the pages and the API show: the run listing, one run's record, results,
//! summary, comparison and live progress, one task's files; and the one error type both turn
//! into an HTTP status.

use std::sync::Arc;

use agenteval_core::model::{RunRecord, RunStatus, RunSummary, TaskResult};
use agenteval_core::traits::{BundleStore, TelemetrySnapshot};
use agenteval_core::{ErrorKind, TaskId, layout, taskpack};
use agenteval_judge::judgement::Judgement;
use agenteval_judge::results::RunResults;
use axum::http::StatusCode;
use serde::Serialize;

use crate::App;

/// Runs the listing reads (newest first); older ones are not browsable from the list.
pub const LISTING_LIMIT: usize = 10_000;

/// Why a request has no page: the status and one line for the user.
#[derive(Debug)]
pub struct Problem {
    pub status: StatusCode,
    pub message: String,
}

impl Problem {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Problem { status: StatusCode::BAD_REQUEST, message: message.into() }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Problem { status: StatusCode::NOT_FOUND, message: message.into() }
    }
}

impl From<agenteval_core::Error> for Problem {
    fn from(e: agenteval_core::Error) -> Self {
        let status = match e.kind() {
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Invalid => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Problem { status, message: e.to_string() }
    }
}

pub async fn listing(app: &App) -> Result<Arc<Vec<RunRecord>>, Problem> {
    if let Some(l) = app.cache.listing() {
        return Ok(l);
    }
    let runs = Arc::new(app.source.index().list_runs(LISTING_LIMIT).await?);
    app.cache.set_listing(runs.clone());
    Ok(runs)
}

/// The run a path or parameter names.
pub async fn record(app: &App, reference: &str) -> Result<RunRecord, Problem> {
    if reference.is_empty() || reference.len() > 300 {
        return Err(Problem::bad_request("a run is an id, a prefix of one, latest:NAME or baseline:NAME"));
    }
    let id = app.source.resolve(reference).await?;
    app.source.index().get_run(&id).await?.ok_or_else(|| Problem::not_found(format!("no run {id}")))
}

pub fn task_id(task: &str) -> Result<TaskId, Problem> {
    task.parse().map_err(|_| Problem::bad_request(format!("`{task}` is not a task id")))
}

pub async fn store(app: &App, r: &RunRecord) -> Result<Arc<dyn BundleStore>, Problem> {
    Ok(app.source.bundle(&r.bundle_uri).await?)
}

/// Whether the run's bundle can still change (its results are read afresh, not kept).
pub fn live(r: &RunRecord) -> bool {
    r.status == RunStatus::Running
}

pub async fn results(app: &App, r: &RunRecord) -> Result<Arc<RunResults>, Problem> {
    if let Some(c) = app.cache.results(&r.run_id) {
        return Ok(c);
    }
    let store = store(app, r).await?;
    let results = Arc::new(agenteval_judge::results::load(store.as_ref(), &r.run_id).await?);
    if !live(r) {
        app.cache.set_results(r.run_id, results.clone());
    }
    Ok(results)
}

pub async fn summary(app: &App, r: &RunRecord) -> Option<Arc<RunSummary>> {
    if let Some(s) = app.cache.summary(&r.run_id) {
        return Some(s);
    }
    let store = store(app, r).await.ok()?;
    let bytes = store.get(&r.run_id, layout::SUMMARY).await.ok()?;
    let s: Arc<RunSummary> = Arc::new(serde_json::from_slice(&bytes).ok()?);
    if !live(r) {
        app.cache.set_summary(r.run_id, s.clone());
    }
    Some(s)
}

/// The run's judgement (`comparison.json`: its comparison, verdict and outcome), if it was
/// judged.
pub async fn judged(app: &App, r: &RunRecord) -> Result<Option<Judgement>, Problem> {
    if r.verdict.is_none() {
        return Ok(None);
    }
    let store = store(app, r).await?;
    Ok(Judgement::read(store.as_ref(), &r.run_id).await?)
}

/// How many of a run's tasks passed: from its summary once sealed, else counted in the index
/// where that is cheap; `None` when neither can say (a partial run on DynamoDB).
pub async fn tally(app: &App, r: &RunRecord) -> Option<Tally> {
    if let Some(s) = summary(app, r).await {
        let cost_usd = s.cost_is_known().then(|| s.known_cost());
        return Some(Tally { passed: s.passed, finished: s.tasks_finished, cost_usd });
    }
    let index = app.source.index();
    if !index.counts_are_cheap() {
        return None;
    }
    let c = index.task_counts(&r.run_id).await.ok()?;
    Some(Tally { passed: c.passed, finished: c.finished(), cost_usd: (c.cost_unknown == 0).then_some(c.cost_usd) })
}

#[derive(Debug, Clone, Copy)]
pub struct Tally {
    pub passed: u64,
    pub finished: u64,
    /// `None` when a task's cost is unknown.
    pub cost_usd: Option<f64>,
}

impl Tally {
    pub fn pass_rate(&self) -> f64 {
        if self.finished == 0 { 0.0 } else { self.passed as f64 / self.finished as f64 }
    }
}

/// A run in progress, as far as it got.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    pub total: u64,
    pub finished: u64,
    pub passed: u64,
    /// Finished without passing (failed, errored or given up).
    pub not_passed: u64,
    pub running: u64,
    /// What the finished tasks cost; `None` (`null`) once one of them is unknown.
    pub cost_usd: Option<f64>,
    /// Where the figures come from: `index` (counted) or `telemetry` (the fleet's last snapshot).
    pub source: &'static str,
}

/// From the index where counting is cheap (SQLite); else (DynamoDB, where a count reads every
/// task) from the last fleet snapshot the controller wrote to the bundle.
pub async fn progress(app: &App, r: &RunRecord) -> Result<Progress, Problem> {
    let index = app.source.index();
    if index.counts_are_cheap() {
        let c = index.task_counts(&r.run_id).await?;
        return Ok(Progress {
            total: c.total,
            finished: c.finished(),
            passed: c.passed,
            not_passed: c.finished().saturating_sub(c.passed),
            running: c.running + c.queued,
            cost_usd: (c.cost_unknown == 0).then_some(c.cost_usd),
            source: "index",
        });
    }
    let store = store(app, r).await?;
    let last = match store.get(&r.run_id, layout::TELEMETRY).await {
        Ok(bytes) => {
            bytes.split(|&b| b == b'\n').rev().find_map(|l| serde_json::from_slice::<TelemetrySnapshot>(l).ok())
        }
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    Ok(match last {
        Some(s) => Progress {
            total: r.tasks_total,
            finished: s.tasks_finished,
            passed: s.tasks_passed,
            not_passed: s.tasks_finished.saturating_sub(s.tasks_passed),
            running: s.jobs_running,
            cost_usd: s.cost_usd,
            source: "telemetry",
        },
        None => Progress {
            total: r.tasks_total,
            finished: 0,
            passed: 0,
            not_passed: 0,
            running: 0,
            cost_usd: Some(0.0),
            source: "telemetry",
        },
    })
}

/// The largest `result.json` the UI reads: a real one is a few KiB (its answer is cut to 64 KiB
/// by the worker); a bundle of gigabytes there is damaged or hostile.
pub const MAX_RESULT_BYTES: u64 = 16 << 20;
/// How much of a worker log a task page shows.
pub const MAX_LOG_BYTES: u64 = 1 << 20;

/// One task's files: its result and its worker log (missing ones are `None`), each read with a
/// cap whatever the bundle holds.
pub async fn task_files(app: &App, r: &RunRecord, task: &TaskId) -> Result<(TaskResult, Option<String>), Problem> {
    let store = store(app, r).await?;
    let result = match taskpack::read_task_file_capped(
        store.as_ref(),
        &r.run_id,
        task,
        layout::TASK_RESULT,
        MAX_RESULT_BYTES + 1,
    )
    .await
    {
        Ok(b) if b.len() as u64 > MAX_RESULT_BYTES => {
            return Err(Problem {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!(
                    "result.json of task {task} is over {} MiB: the bundle is damaged",
                    MAX_RESULT_BYTES >> 20
                ),
            });
        }
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| Problem { status: StatusCode::INTERNAL_SERVER_ERROR, message: format!("result.json: {e}") })?,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(Problem::not_found(format!("run {} has no result for task {task}", r.run_id)));
        }
        Err(e) => return Err(e.into()),
    };
    let log = taskpack::read_task_file_capped(store.as_ref(), &r.run_id, task, layout::TASK_LOG, MAX_LOG_BYTES + 1)
        .await
        .ok()
        .map(|b| {
            let cut = b.len() as u64 > MAX_LOG_BYTES;
            let mut text = String::from_utf8_lossy(&b[..b.len().min(MAX_LOG_BYTES as usize)]).into_owned();
            if cut {
                text.push_str(&format!("\n… (cut at {} MiB: the whole log is in the bundle)", MAX_LOG_BYTES >> 20));
            }
            text
        });
    Ok((result, log))
}

/// Each night's bundle, through the UI's source.
struct SourceBundles<'a>(&'a App);

#[async_trait::async_trait]
impl agenteval_core::history::Bundles for SourceBundles<'_> {
    async fn bundle(&self, run: &RunRecord) -> Option<Arc<dyn BundleStore>> {
        self.0.source.bundle(&run.bundle_uri).await.ok()
    }
}

/// One task across a name's last nights (`?name=&task=&last=`, `last` 1 to 365, default 30):
/// the name, the task and its nights, oldest first.
pub async fn task_history(
    app: &App,
    q: &std::collections::HashMap<String, String>,
) -> Result<(String, TaskId, Vec<agenteval_core::history::Night>), Problem> {
    let name = q.get("name").map(|s| s.trim()).filter(|s| !s.is_empty());
    let name = name.ok_or_else(|| Problem::bad_request("`name` is missing: the name whose nights to show"))?;
    let task = q.get("task").map(|s| s.trim()).filter(|s| !s.is_empty());
    let task = task_id(task.ok_or_else(|| Problem::bad_request("`task` is missing: the task to follow"))?)?;
    let last = match q.get("last") {
        None => 30,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=365).contains(n))
            .ok_or_else(|| Problem::bad_request(format!("`last={l}`: 1 to 365 nights")))?,
    };
    // The listing the runs page keeps, not the index read again.
    let runs = agenteval_core::history::nights(&listing(app).await?, name, last)?;
    let nights = agenteval_core::history::task_history(app.source.index(), &SourceBundles(app), &runs, &task).await?;
    Ok((name.to_string(), task, nights))
}
