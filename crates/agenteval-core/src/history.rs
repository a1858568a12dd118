//! One task across a name's last nights (`agenteval history NAME --task ID` and the UI's
//! history page share it): its outcome, cost, tokens and why each night, oldest first. A night
//! that did not complete is marked as such, never counted as a failure or a zero.

use std::sync::Arc;

use serde::Serialize;

use crate::model::{Outcome, RunRecord, RunStatus, TaskResult, TaskState, TerminatedBy, of_history};
use crate::traits::{BundleStore, RunIndex};
use crate::{Error, Result, TaskId, layout, taskpack};

/// One night of the task.
#[derive(Debug, Clone, Serialize)]
pub struct Night {
    pub run_id: String,
    pub created_at: String,
    pub run_status: String,
    /// The run finished: its figures are the task's. When not, `outcome` is `null` unless the
    /// task finished before the run stopped.
    pub completed: bool,
    /// `passed`, `failed`, `errored`, `infra`; `null` when the task has no result that night.
    pub outcome: Option<&'static str>,
    pub cost_usd: Option<f64>,
    pub tokens: Option<u64>,
    pub why: String,
}

/// Where a night's bundle is read (the why of a wrong answer the index does not hold).
#[async_trait::async_trait]
pub trait Bundles: Send + Sync {
    async fn bundle(&self, run: &RunRecord) -> Option<Arc<dyn BundleStore>>;
}

/// The runs of `name` in `listing` (the index's newest runs), oldest first, the last `last` of
/// them. None: `NotFound`, naming where the names are listed.
pub fn nights(listing: &[RunRecord], name: &str, last: usize) -> Result<Vec<RunRecord>> {
    let mut runs: Vec<_> = listing.iter().filter(|r| of_history(&r.name, name)).cloned().collect();
    if runs.is_empty() {
        return Err(Error::not_found(format!("no run is named `{name}` (`agenteval runs list` shows the names)")));
    }
    runs.sort_by_key(|r| r.created_at);
    let skip = runs.len().saturating_sub(last.max(1));
    Ok(runs.into_iter().skip(skip).collect())
}

async fn why_of(bundles: &dyn Bundles, run: &RunRecord, task: &TaskId) -> String {
    let Some(store) = bundles.bundle(run).await else { return String::new() };
    match taskpack::read_task_file(store.as_ref(), &run.run_id, task, layout::TASK_RESULT).await {
        Ok(b) => serde_json::from_slice::<TaskResult>(&b).map(|r| r.why()).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// `task` over `runs` (from [`nights`]), oldest first. `NotFound` when the task is in none of
/// them.
pub async fn task_history(
    index: &dyn RunIndex,
    bundles: &dyn Bundles,
    runs: &[RunRecord],
    task: &TaskId,
) -> Result<Vec<Night>> {
    let mut out = Vec::with_capacity(runs.len());
    let mut found = false;
    for r in runs {
        let t = index.get_task(&r.run_id, task).await?;
        found |= t.is_some();
        let finished = t.as_ref().filter(|t| t.state == TaskState::Completed || t.state == TaskState::Failed);
        let (outcome, cost, tokens, mut why) = match finished {
            Some(t) => {
                let failed = t.state == TaskState::Failed;
                let ended = t.terminated_by.unwrap_or(if failed {
                    TerminatedBy::InfraFailure
                } else {
                    TerminatedBy::Completed
                });
                let o = Outcome::of(t.passed.unwrap_or(false), ended);
                let cost = (!t.cost_unknown).then_some(t.cost_usd);
                (Some(o.as_str()), cost, Some(t.tokens), t.detail.clone().unwrap_or_default())
            }
            None if t.is_none() => (None, None, None, "the task was not in this night's run".to_string()),
            None => (None, None, None, format!("no result: the night ended {}", r.status.as_str())),
        };
        if outcome == Some("failed") && why.is_empty() {
            why = why_of(bundles, r, task).await;
        }
        out.push(Night {
            run_id: r.run_id.to_string(),
            created_at: r.created_at.to_rfc3339(),
            run_status: r.status.as_str().to_string(),
            completed: r.status == RunStatus::Complete,
            outcome,
            cost_usd: cost,
            tokens,
            why,
        });
    }
    if !found {
        return Err(Error::not_found(format!("task `{task}` is in none of the last {} runs", runs.len())));
    }
    Ok(out)
}
