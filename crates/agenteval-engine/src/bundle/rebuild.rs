//! `index rebuild`: the bundle is the source of truth, so a lost or damaged index is recreated
//! from the bundles under a root: each run's record from its `metadata.json`, its tasks from
//! `tasks.jsonl`, and each finished task's state from its `result.json`.

use agenteval_core::layout;
use std::str::FromStr;

use agenteval_core::model::{RunRecord, RunStatus, TaskResult, TaskTransition};
use agenteval_core::traits::{BundleStore, RunIndex};
use agenteval_core::{Error, Result, RunId, taskpack};
use chrono::Utc;
use serde::Serialize;

use crate::bundle::{Metadata, TaskTable, read_json};

/// What a rebuild did, per run.
#[derive(Debug, Default, Serialize)]
pub struct Rebuilt {
    /// Runs recreated in the index, with their finished task counts.
    pub added: Vec<(RunId, u64)>,
    /// Runs the index already had (left as they are).
    pub kept: Vec<RunId>,
    /// Folders that are not readable bundles, with why.
    pub skipped: Vec<(String, String)>,
}

/// Recreates, in `index`, every run under `store` that the index lacks.
pub async fn rebuild_index(store: &dyn BundleStore, index: &dyn RunIndex) -> Result<Rebuilt> {
    let mut out = Rebuilt::default();
    for run in store.list_runs().await? {
        if index.get_run(&run).await?.is_some() {
            out.kept.push(run);
            continue;
        }
        match rebuild_run(store, index, &run).await {
            Ok(finished) => out.added.push((run, finished)),
            Err(e) if e.kind().is_retryable() => return Err(e),
            Err(e) => out.skipped.push((run.to_string(), e.to_string())),
        }
    }
    Ok(out)
}

/// Adds one run of `store` to `index` from its bundle; returns its finished task count.
pub async fn rebuild_run(store: &dyn BundleStore, index: &dyn RunIndex, run: &RunId) -> Result<u64> {
    let meta: Metadata = read_json(store, run, layout::METADATA).await?;
    let tasks = TaskTable::read(store, run).await?;
    // Read every result first: a run is only added once all of it can be.
    let mut finished = Vec::new();
    for path in store.list(run, "tasks/").await? {
        let result: TaskResult = if let Some(task) = taskpack::task_of_pack(&path) {
            let bytes = taskpack::read_task_file(store, run, &task.parse()?, layout::TASK_RESULT).await?;
            serde_json::from_slice(&bytes).map_err(|e| Error::json(format!("{path}: result.json is not valid"), e))?
        } else if path.ends_with(&format!("/{}", layout::TASK_RESULT)) {
            read_json(store, run, &path).await?
        } else {
            continue;
        };
        finished.push(TaskTransition::completed(&result));
    }
    // The gates' verdict and its baseline, when the run was judged (`comparison.json`).
    let judged = agenteval_judge::judgement::Judgement::read(store, run).await.ok().flatten();
    let verdict = judged.as_ref().map(|j| j.outcome());
    let baseline = judged.as_ref().and_then(|j| j.baseline()).and_then(|b| RunId::from_str(&b.run_id).ok());
    // A bundle that was never sealed lost its controller: it is interrupted, and resumable.
    let status = if meta.sealed { meta.status } else { RunStatus::Interrupted };
    let at = meta.finished_at.unwrap_or(meta.created_at);
    let record = RunRecord {
        run_id: *run,
        name: meta.name.clone(),
        benchmark: meta.benchmark.clone(),
        agent: meta.agent.clone(),
        backend: meta.backend.clone(),
        status,
        bundle_uri: store.bundle_uri(run),
        config_hash: meta.config_hash.clone(),
        tasks_total: tasks.len() as u64,
        created_at: meta.created_at,
        updated_at: Utc::now(),
        finished_at: meta.finished_at.or(Some(at)),
        heartbeat_at: at,
        cancel_requested: false,
        controller: String::new(),
        epoch: meta.resumed,
        leased_at: None,
        verdict,
        set_id: meta.set.as_ref().map(|s| s.id.clone()),
        baseline,
        concurrency: None,
    };
    index.create_run(&record, tasks.ids()).await?;
    for chunk in finished.chunks(500) {
        index.record_tasks(run, chunk).await?;
    }
    Ok(finished.len() as u64)
}
