//! The record stage: what a task attempt came to, as its result (its turn's, or the
//! infrastructure's failure; with what the graders found, redacted), and that result and the
//! attempt's files staged as the task's pack, recorded in the index, and published when this
//! attempt is the one that counts.

use agenteval_core::Result;
use agenteval_core::model::*;
use agenteval_core::traits::TaskEnvironment;
use chrono::{DateTime, Utc};

use crate::bundle::{publish_staged, stage_task_pack};

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::decide;
use super::plan::Plan;
use super::prepare::Prepared;
use super::turn::Turn;

/// The attempt's result from its turn (an `Err`: the infrastructure failed it) and what its
/// environment's graders found; its log's last line says it.
pub(super) fn result(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    turn: Result<Turn>,
    prepared: &Prepared,
    started_at: DateTime<Utc>,
    at: &mut Attempt,
) -> TaskResult {
    let Turn { agent, scores, changed } = match turn {
        Ok(t) => t,
        Err(e) => {
            at.say(format!("infrastructure failure: {e}"));
            let (mut agent, scores) = decide::infra_failure(ctx.redactor.redact(&e.to_string()));
            // The install's own failure is the agent's, and says which field fixes it.
            agent.fault = prepared.fault.clone();
            Turn { agent, scores, changed: 0 }
        }
    };
    let mut result = decide::task_result(&ctx.job, task, agent, scores, changed, started_at);
    result.setup_seconds = prepared.setup_seconds;
    if let Ok(env) = &prepared.env {
        found(ctx, env, &mut result, at);
    }
    result.harbor_would_skip = plan.would_skip.clone();
    at.say(decide::finished_line(&result));
    result
}

/// What the graders found in the environment, into the result and the attempt's files.
fn found(ctx: &Ctx, env: &TaskEnvironment, result: &mut TaskResult, at: &mut Attempt) {
    let found = std::mem::take(&mut *env.findings.lock().expect("not poisoned"));
    for (name, bytes) in found.files {
        let text = ctx.redactor.redact(&String::from_utf8_lossy(&bytes));
        at.keep(format!("artifacts/{name}"), text.into_bytes());
    }
    // What a grader doubts may quote the environment (a process's command line): redacted.
    let suspect: Vec<String> = found.suspect.iter().map(|s| ctx.redactor.redact(s)).collect();
    for s in &suspect {
        at.say(format!("suspect: {s}"));
    }
    result.suspect = suspect;
    result.rewards = found.rewards;
    result.unscored = found.unscored;
    result.models = found.models;
    result.steps = found.steps;
}

/// Writes a finished task's files and records it; `Err` only for failures of agenteval's own
/// storage.
pub(super) async fn write(
    ctx: &Ctx,
    task: &TaskSpec,
    result: TaskResult,
    at: Attempt,
    spans: Option<Vec<u8>>,
) -> Result<()> {
    // A retried job may overlap the attempt it replaced (a worker that was only slow), so
    // everything goes to the attempt's staging folder first, packed; the conditional
    // "completed" then decides which attempt counts, and only that one moves its pack into
    // `tasks/`. A duplicate or superseded attempt publishes nothing (no index read first: the
    // conditional write is the one check that cannot race); a winner that dies before it has
    // published is finished by the seal (`controller::finish_publishing`).
    let attempt = ctx.job.attempt;
    let (job, run) = (&ctx.job.job_id, &ctx.run_id);
    let redact = |t: &str| ctx.redactor.redact(t);
    let log = at.log_text();
    let outcome = crate::bundle::Outcome { result: &result, log: &log, spans: spans.as_deref(), trace: at.trace };
    stage_task_pack(ctx.store.as_ref(), outcome, &at.files, &redact).await?;
    if !ctx.index.record_task(run, &TaskTransition::completed(&result)).await? {
        tracing::warn!(task = %task.id, attempt, "another attempt completed this task first; publishing nothing");
        return Ok(());
    }
    publish_staged(ctx.store.as_ref(), run, job, attempt, &task.id).await?;
    Ok(())
}
