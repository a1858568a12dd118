//! The worker: runs every task of one job, each as a pipeline of stages (`pipeline.rs`: plan →
//! prepare → act → capture → verify → grade → record), streaming trace events to the bundle as
//! they happen. This file is the job loop: the run's lease checked before each task, tasks run
//! side by side, a cancelled job's environments torn down, and each task's span.

mod act;
mod attempt;
mod capture;
mod ctx;
mod decide;
mod genai_spans;
mod grade;
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
    let code = async {
        let mut tasks = futures::stream::iter(ctx.job.tasks.iter())
            .map(|task| process_task(&ctx, act.as_ref(), task, cancel.clone()))
            .buffer_unordered(parallel);
        while let Some(done) = tasks.next().await {
            if let Err(code) = done {
                return code;
            }
        }
        worker_exit::OK
    }
    .await;
    if code == worker_exit::OK {
        tracing::info!(job = %ctx.job.job_id, "job finished");
    }
    code
}

/// Runs one task of the job and writes its outcome; `Err` is the exit code the job stops with.
async fn process_task(
    ctx: &Ctx,
    act: &dyn Act,
    task: &TaskSpec,
    cancel: impl std::future::Future<Output = ()>,
) -> std::result::Result<(), i32> {
    match ctx.index.get_run(&ctx.run_id).await.map(|r| decide::lease(r.as_ref(), &ctx.job)) {
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
    let outcome = match outcome {
        Ok(Some((result, at))) => record::write(ctx, task, result, at, spans).await,
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = outcome {
        // A store or index failure: the job cannot vouch for its results. Exiting non-zero
        // makes the controller retry the unfinished tasks.
        tracing::error!(task = %task.id, "{}", ctx.redactor.redact(&e.to_string()));
        return Err(worker_exit::FAILED);
    }
    Ok(())
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
