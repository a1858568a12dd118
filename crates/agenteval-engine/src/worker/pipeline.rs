//! A task attempt from start to end, its stages chained in one place: plan → prepare → turn
//! (act → capture → verify → grade; once, or once per step) → record. Each stage is its own
//! file and hands the next what it made; the attempt's log and kept files travel with it.

use agenteval_core::model::*;
use agenteval_core::{Error, Result};
use chrono::Utc;

use crate::telemetry;

use super::act::Act;
use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;
use super::{prepare, record, steps};

/// Runs and grades one task: its result and the attempt (its log and files), or `None` when
/// another attempt owns it.
pub(super) async fn run_task(ctx: &Ctx, act: &dyn Act, task: &TaskSpec) -> Result<Option<(TaskResult, Attempt)>> {
    let attempt = ctx.job.attempt;
    let running = TaskTransition::new(task.id.clone(), attempt, TaskState::Running).job(&ctx.job.job_id);
    if !ctx.index.record_task(&ctx.run_id, &running).await? {
        tracing::info!(task = %task.id, attempt, "skipped: already completed or taken by a later attempt");
        return Ok(None);
    }
    let ids = telemetry::log_ids(&tracing::Span::current());
    let mut at = Attempt::new(format!(
        "{} task {} attempt {} job {}{ids}",
        Utc::now().to_rfc3339(),
        task.id,
        attempt,
        ctx.job.job_id
    ));
    let started_at = Utc::now();
    let plan = Plan::of(ctx, task);
    let prepared = prepare::prepare(ctx, &plan, task, &mut at).await;
    let turn = match &prepared.env {
        Ok(env) => steps::run(ctx, act, &plan, task, env, &mut at).await,
        Err(e) => Err(Error::new(e.kind(), e.to_string())),
    };
    if let Ok(env) = &prepared.env {
        prepare::release(ctx, env, &mut at).await;
    }
    let result = record::result(ctx, &plan, task, turn, &prepared, started_at, &mut at);
    Ok(Some((result, at)))
}
