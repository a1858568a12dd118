//! The worker: runs every task of one job, each as a pipeline of stages (`pipeline.rs`: plan →
//! prepare → act → capture → verify → grade → record), streaming trace events to the bundle as
//! they happen. This file is the job loop: the run's lease checked before tasks start, tasks
//! run side by side and each written once the next has started, a cancelled job's
//! environments torn down, and each task's span.

mod act;
mod attempt;
mod capture;
mod ctx;
mod decide;
mod genai_spans;
mod grade;
mod judge;
mod pipeline;
mod plan;
mod prepare;
mod record;
mod sessions;
mod sink;
mod start;
mod steps;
mod tamper;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
mod turn;
mod verify;

pub use start::cassettes_bundle;

use agenteval_core::Result;
use agenteval_core::model::*;
use agenteval_core::traits::*;
use futures::{FutureExt as _, StreamExt as _};
use tracing::Instrument;
use tracing::field::Empty;

use crate::telemetry::{self, Journal};
use act::Act;
use attempt::Attempt;
use ctx::Ctx;

/// Where a worker finds model-call cassettes (`submit --cassettes`), and what to do with them.
pub const CASSETTES_ENV: &str = "AGENTEVAL_CASSETTES";
pub const CASSETTE_MODE_ENV: &str = "AGENTEVAL_CASSETTE_MODE";

/// Runs the job at `job_uri`; returns the process exit code (see `worker_exit`).
pub async fn run_job(
    job_uri: &str,
    resolver: &dyn Resolver,
    journal: Journal,
    cancel: impl std::future::Future<Output = ()>,
) -> i32 {
    let job = match start::read_job(resolver, job_uri).await {
        Ok(j) => j,
        Err(e) => {
            tracing::error!("{e}");
            return decide::exit_for_start_error(e.kind(), true);
        }
    };
    let (ctx, act) = match start::build(job, resolver, journal).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot start job: {e}");
            return decide::exit_for_start_error(e.kind(), false);
        }
    };
    let trace = ctx.traceparent.as_deref().and_then(telemetry::parse_traceparent);
    tracing::info!(
        run = %ctx.run_id,
        job = %ctx.job.job_id,
        attempt = ctx.job.attempt,
        tasks = ctx.job.tasks.len(),
        trace_id = %trace.as_ref().map(|t| t.trace_id().to_string()).unwrap_or_default(),
        parent_span_id = %trace.as_ref().map(|t| t.span_id().to_string()).unwrap_or_default(),
        "job started"
    );
    let cancel = cancel.shared();
    let parallel = ctx.config.backend.tasks_in_parallel.max(1) as usize;
    let tasks = futures::stream::iter(ctx.job.tasks.iter())
        .map(|task| process_task(&ctx, act.as_ref(), task, cancel.clone()))
        .buffer_unordered(parallel);
    let code = run_tasks(&ctx, tasks, parallel).await;
    if code == worker_exit::OK {
        tracing::info!(job = %ctx.job.job_id, "job finished");
    }
    code
}

/// A task that has finished, its files and record not yet written.
struct Finished<'a> {
    task: &'a TaskSpec,
    result: TaskResult,
    at: Attempt,
    spans: Option<Vec<u8>>,
}

/// Runs the job's tasks (`parallel` at once) and writes each finished one; the job's exit code.
///
/// A task's slot is free once its agent is graded: the next task starts then, and the finished
/// one's files and record are written when no task has anything else to do. With a hundred
/// tasks at once, their calls all end together; writing each before starting the next held
/// the next calls back behind the others' writes (up to 80 ms a wave of calls at 1,000 in
/// flight on two cores). Writes still run side by side (a bucket's are slow), at most
/// `parallel` at once; no further task starts while twice that many wait. Whatever stops the
/// job, the tasks that finished are written first.
async fn run_tasks<'a>(
    ctx: &'a Ctx,
    mut tasks: impl futures::Stream<Item = std::result::Result<Option<Finished<'a>>, i32>> + Unpin,
    parallel: usize,
) -> i32 {
    let mut waiting: std::collections::VecDeque<Finished<'a>> = std::collections::VecDeque::new();
    let mut writing = futures::stream::FuturesUnordered::new();
    let (mut all_run, mut stopped) = (false, None);
    loop {
        tokio::select! {
            biased;
            done = tasks.next(), if !all_run && stopped.is_none() && waiting.len() + writing.len() < 2 * parallel => {
                match done {
                    Some(Ok(Some(f))) => waiting.push_back(f),
                    Some(Ok(None)) => {}
                    Some(Err(code)) => stopped = Some(code),
                    None => all_run = true,
                }
            }
            Some(written) = writing.next(), if !writing.is_empty() => {
                if let Err(code) = written {
                    // The store or the index failed: nothing more can be vouched for.
                    return code;
                }
            }
            _ = std::future::ready(()), if !waiting.is_empty() && writing.len() < parallel => {
                let f = waiting.pop_front().expect("not empty");
                writing.push(write_finished(ctx, f));
            }
            else => break,
        }
    }
    stopped.unwrap_or(worker_exit::OK)
}

/// Writes a finished task's files and record; `Err` is the exit code the job stops with.
async fn write_finished(ctx: &Ctx, f: Finished<'_>) -> std::result::Result<(), i32> {
    if let Err(e) = record::write(ctx, f.task, f.result, f.at, f.spans).await {
        // A store or index failure: the job cannot vouch for its results. Exiting non-zero
        // makes the controller retry the unfinished tasks.
        tracing::error!(task = %f.task.id, "{}", ctx.redactor.redact(&e.to_string()));
        return Err(worker_exit::FAILED);
    }
    Ok(())
}

/// Runs one task of the job: what it came to, to be written (`None`: another attempt owns it);
/// `Err` is the exit code the job stops with.
async fn process_task<'a>(
    ctx: &Ctx,
    act: &dyn Act,
    task: &'a TaskSpec,
    cancel: impl std::future::Future<Output = ()>,
) -> std::result::Result<Option<Finished<'a>>, i32> {
    match lease(ctx).await {
        Ok(decide::Lease::Go) => {}
        Ok(decide::Lease::Stop { code, why }) => {
            if code == worker_exit::CANCELLED {
                tracing::warn!(job = %ctx.job.job_id, "{why}");
            } else {
                tracing::error!(job = %ctx.job.job_id, "{why}");
            }
            return Err(code);
        }
        Err(e) => {
            tracing::error!("{}", ctx.redactor.redact(&e.to_string()));
            return Err(worker_exit::FAILED);
        }
    }
    let span = task_span(ctx, task);
    let root = telemetry::span_id(&span);
    let outcome = tokio::select! {
        r = pipeline::run_task(ctx, act, task).instrument(span.clone()) => r,
        _ = cancel => {
            tracing::warn!(task = %task.id, "stopping: cancelled");
            sessions::tear_down_live(ctx).await;
            // The task's span ends here, marked, and is flushed before the process exits.
            telemetry::set_error(&span, "worker cancelled");
            return Err(worker_exit::CANCELLED);
        }
    };
    record_outcome(ctx, &span, &outcome);
    // The task's spans go into its folder, so its span must be over before the files are
    // written; this handle is the last one.
    drop(span);
    let spans = match (root, &ctx.journal) {
        (Some(root), Some(j)) => Some(j.take_tree(root)),
        _ => None,
    };
    match outcome {
        Ok(Some((result, at))) => Ok(Some(Finished { task, result, at, spans })),
        Ok(None) => Ok(None),
        Err(e) => {
            // A store or index failure: the job cannot vouch for its results. Exiting non-zero
            // makes the controller retry the unfinished tasks.
            tracing::error!(task = %task.id, "{}", ctx.redactor.redact(&e.to_string()));
            Err(worker_exit::FAILED)
        }
    }
}

/// How long a reading of the run's lease holds for the tasks that start after it. A hundred
/// tasks at once start together when their calls end together, and each read the run's record
/// from the index. A cancel or a lost lease is still seen within this.
const LEASE_FRESH: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether the job may start another task: the run's lease, read at most once per
/// `LEASE_FRESH` while it says to go on.
async fn lease(ctx: &Ctx) -> Result<decide::Lease> {
    let fresh = |seen: &Option<std::time::Instant>| seen.is_some_and(|at| at.elapsed() < LEASE_FRESH);
    if fresh(&ctx.lease_seen.lock().expect("not poisoned")) {
        return Ok(decide::Lease::Go);
    }
    let lease = ctx.index.get_run(&ctx.run_id).await.map(|r| decide::lease(r.as_ref(), &ctx.job))?;
    if matches!(lease, decide::Lease::Go) {
        *ctx.lease_seen.lock().expect("not poisoned") = Some(std::time::Instant::now());
    }
    Ok(lease)
}

/// A task's `eval.task` span, a child of the controller's `eval.job` span when the job carries
/// its trace context.
fn task_span(ctx: &Ctx, task: &TaskSpec) -> tracing::Span {
    let span = tracing::info_span!(
        "eval.task",
        agenteval.run.id = %ctx.run_id,
        agenteval.task.id = %task.id,
        agenteval.job.id = %ctx.job.job_id,
        agenteval.attempt = ctx.job.attempt as i64,
        agenteval.benchmark = ctx.benchmark.name(),
        agenteval.agent = ctx.agent.name(),
        agenteval.model = ctx.config.agent.model().unwrap_or(""),
        agenteval.backend = ctx.config.backend.id.as_str(),
        agenteval.passed = Empty,
        agenteval.cost_usd = Empty,
        agenteval.tokens = Empty,
        agenteval.terminated_by = Empty,
        agenteval.skipped = Empty,
    );
    if let Some(tp) = &ctx.traceparent {
        telemetry::set_remote_parent(&span, tp);
    }
    span
}

/// The task's outcome on its span.
fn record_outcome(ctx: &Ctx, span: &tracing::Span, outcome: &Result<Option<(TaskResult, Attempt)>>) {
    match outcome {
        Ok(Some((r, _))) => {
            span.record("agenteval.passed", r.passed);
            span.record("agenteval.cost_usd", r.total_cost_usd());
            span.record("agenteval.tokens", r.agent.total_tokens as i64);
            span.record("agenteval.terminated_by", r.agent.terminated_by.as_str());
            if r.agent.terminated_by.says_nothing_about_the_agent() {
                telemetry::set_error(span, r.agent.error.as_deref().unwrap_or("infrastructure failure"));
            }
        }
        Ok(None) => {
            span.record("agenteval.skipped", true);
        }
        Err(e) => telemetry::set_error(span, &ctx.redactor.redact(&e.to_string())),
    }
}
