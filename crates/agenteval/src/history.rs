//! `agenteval history NAME --task ID`: one task across a name's last nights — its outcome,
//! cost, tokens and why each night, oldest first — from the run index (and each night's bundle
//! for the why of a wrong answer). A night that did not complete is marked as such, never shown
//! as a failure or a zero.

use agenteval_core::model::{Outcome, RunStatus, TaskResult, TaskState, TerminatedBy, of_history};
use agenteval_core::taskpack::read_task_file;
use agenteval_core::traits::{Resolver, RunIndex};
use agenteval_core::{Error, TaskId, layout};
use agenteval_engine::controller;
use serde::Serialize;

use crate::cli::IndexArgs;
use crate::session::open_index;
use crate::{Failure, exit};

/// One night of the task.
#[derive(Debug, Serialize)]
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

/// The nights of `name`, oldest first, the last `last` of them.
async fn nights(
    index: &dyn RunIndex,
    name: &str,
    last: usize,
) -> Result<Vec<agenteval_core::model::RunRecord>, Failure> {
    let mut runs: Vec<_> = index
        .list_runs(agenteval_engine::refs::LATEST_WINDOW)
        .await?
        .into_iter()
        .filter(|r| of_history(&r.name, name))
        .collect();
    if runs.is_empty() {
        return Err(
            Error::not_found(format!("no run is named `{name}` (`agenteval runs list` shows the names)")).into()
        );
    }
    runs.sort_by_key(|r| r.created_at);
    let skip = runs.len().saturating_sub(last.max(1));
    Ok(runs.into_iter().skip(skip).collect())
}

/// Why a finished task did not pass, from its result in the night's bundle.
async fn why_of(resolver: &dyn Resolver, index: &dyn RunIndex, run: &agenteval_core::RunId, task: &TaskId) -> String {
    let Ok(located) = controller::locate(resolver, index, run).await else { return String::new() };
    match read_task_file(located.store.as_ref(), run, task, layout::TASK_RESULT).await {
        Ok(b) => serde_json::from_slice::<TaskResult>(&b).map(|r| r.why()).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The command.
pub async fn history(name: &str, task: &str, last: usize, index: &IndexArgs, json: bool) -> Result<u8, Failure> {
    let task_id: TaskId = task.parse().map_err(|e: Error| Failure { code: exit::USAGE, error: e.into() })?;
    let (wiring, index) = open_index(index).await?;
    let runs = nights(index.as_ref(), name, last).await?;
    let mut out = Vec::with_capacity(runs.len());
    let mut found = false;
    for r in &runs {
        let completed = r.status == RunStatus::Complete;
        let t = index.get_task(&r.run_id, &task_id).await?;
        found |= t.is_some();
        let finished = t.as_ref().filter(|t| t.state == TaskState::Completed || t.state == TaskState::Failed);
        let (outcome, cost, tokens, mut why) = match finished {
            Some(t) => {
                let ended = t.terminated_by.unwrap_or(if t.state == TaskState::Failed {
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
            why = why_of(wiring.as_ref(), index.as_ref(), &r.run_id, &task_id).await;
        }
        out.push(Night {
            run_id: r.run_id.to_string(),
            created_at: r.created_at.to_rfc3339(),
            run_status: r.status.as_str().to_string(),
            completed,
            outcome,
            cost_usd: cost,
            tokens,
            why,
        });
    }
    if !found {
        return Err(
            Error::not_found(format!("task `{task}` is in none of the last {} runs of `{name}`", runs.len())).into()
        );
    }
    if json {
        say!("{}", serde_json::json!({"name": name, "task": task, "nights": out}));
        return Ok(exit::OK);
    }
    say!("{}", table(&out));
    let judged: Vec<&Night> = out.iter().filter(|n| n.outcome.is_some()).collect();
    let passed = judged.iter().filter(|n| n.outcome == Some("passed")).count();
    let incomplete = out.iter().filter(|n| !n.completed).count();
    let mut line = format!("{task}: passed {passed} of {} night(s) with a result", judged.len());
    if incomplete > 0 {
        line.push_str(&format!("; {incomplete} night(s) did not complete (marked `-`, not counted)"));
    }
    say!("{line}");
    Ok(exit::OK)
}

fn table(nights: &[Night]) -> String {
    use comfy_table::{ContentArrangement, Table, presets::UTF8_HORIZONTAL_ONLY};
    let mut t = Table::new();
    t.load_preset(UTF8_HORIZONTAL_ONLY).set_content_arrangement(ContentArrangement::Dynamic).set_width(80);
    t.set_header(["night", "run", "outcome", "cost $", "tokens", "why"]);
    for n in nights {
        let run =
            if n.completed { n.run_id[..13].to_string() } else { format!("{} ({})", &n.run_id[..13], n.run_status) };
        t.add_row([
            n.created_at.get(..16).unwrap_or(&n.created_at).replace('T', " "),
            run,
            n.outcome.unwrap_or("-").to_string(),
            n.cost_usd.map_or_else(|| "-".into(), |c| format!("{c:.4}")),
            n.tokens.map_or_else(|| "-".into(), |t| t.to_string()),
            n.why.chars().take(60).collect(),
        ]);
    }
    t.to_string()
}
