//! The worker: runs every task of one job (prepare, agent, grade, evaluate, write, record),
//! streaming trace events to the bundle as they happen.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::config::{Limits, RunConfig};
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::{Redactor, Secret};
use agenteval_core::traits::*;
use agenteval_core::{Error, ErrorKind, Result, RunId, SCHEMA_VERSION};
use agenteval_local::process::worker_exit;
use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;

use crate::agents::agent_from_config;
use crate::benchmarks::benchmark_from_config;
use crate::bundle::{read_json, write_task_outcome};
use crate::evaluators::{evaluate_safely, evaluator_from_config};
use crate::factory;

/// Everything a worker needs, built once per job.
struct Ctx {
    run_id: RunId,
    job: JobSpec,
    config: RunConfig,
    store: Arc<dyn BundleStore>,
    index: Arc<dyn RunIndex>,
    benchmark: Arc<dyn BenchmarkAdapter>,
    agent: Arc<dyn AgentRunner>,
    evaluators: Vec<Arc<dyn Evaluator>>,
    secrets: Vec<(String, Secret)>,
    redactor: Redactor,
}

/// Streams events to `trace.jsonl` and enforces token and cost limits.
struct TraceSink {
    run_id: RunId,
    task_id: agenteval_core::TaskId,
    appender: Box<dyn Appender>,
    redactor: Redactor,
    limits: Limits,
    events: Vec<TraceEvent>,
    cost: f64,
    tokens: u64,
    write_error: Option<Error>,
}

impl TraceSink {
    async fn write(&mut self, kind: EventKind, payload: serde_json::Value, cost: f64, input: u64, output: u64) {
        let ev = TraceEvent {
            run_id: self.run_id,
            task_id: self.task_id.clone(),
            step: self.events.len() as u32,
            timestamp: Utc::now(),
            kind,
            payload: self.redactor.redact_json(&payload),
            cost_usd: cost,
            input_tokens: input,
            output_tokens: output,
        };
        let mut line = serde_json::to_vec(&ev).expect("trace events serialize");
        line.push(b'\n');
        if let Err(e) = self.appender.append(&line).await {
            self.write_error.get_or_insert(e);
        }
        self.cost += cost;
        self.tokens += input + output;
        self.events.push(ev);
    }
}

#[async_trait]
impl EventSink for TraceSink {
    async fn emit(&mut self, event: AgentEvent) -> std::result::Result<(), Stop> {
        let kind = event.kind.unwrap_or(EventKind::AgentObservation);
        self.write(kind, event.payload, event.cost_usd, event.input_tokens, event.output_tokens).await;
        if let Some(e) = &self.write_error {
            return Err(Stop { terminated_by: TerminatedBy::InfraFailure, reason: format!("cannot write trace: {e}") });
        }
        if let Some(max) = self.limits.max_tokens
            && self.tokens > max
        {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTokens,
                reason: format!("used {} tokens, limit {max}", self.tokens),
            });
        }
        if let Some(max) = self.limits.max_cost_usd
            && self.cost > max
        {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitCost,
                reason: format!("spent ${:.6}, limit ${max:.6}", self.cost),
            });
        }
        Ok(())
    }
}

/// Reads a job spec from a path or URI.
async fn read_job(uri: &str) -> Result<JobSpec> {
    let bytes = factory::read_bundle_file(uri).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::with_source(ErrorKind::Invalid, format!("job spec {uri} is invalid: {e}"), e))
}

async fn build(job: JobSpec, exe: &Path) -> Result<Ctx> {
    let (store, run_id) = factory::store_from_bundle_uri(&job.bundle_uri).await?;
    if run_id != job.run_id {
        return Err(Error::invalid(format!(
            "job {} belongs to run {} but points at bundle {}",
            job.job_id, job.run_id, job.bundle_uri
        )));
    }
    let index = factory::index_from_uri(&job.index_uri).await?;
    let config: RunConfig = read_json(store.as_ref(), &run_id, layout::CONFIG)
        .await
        .map_err(|e| Error::with_source(ErrorKind::Invalid, format!("run config in the bundle: {e}"), e))?;
    let backend = factory::backend_for(&config, exe).await?;
    let redactor = Redactor::new();
    let mut secrets = Vec::new();
    for (var, name) in &config.agent.secrets {
        let s = backend.fetch_secret(name).await?;
        redactor.add(&s);
        secrets.push((var.clone(), s));
    }
    let evaluators = config.evaluators.iter().map(evaluator_from_config).collect::<Result<Vec<_>>>()?;
    Ok(Ctx {
        run_id,
        benchmark: benchmark_from_config(&config.benchmark)?,
        agent: agent_from_config(&config.agent),
        evaluators,
        secrets,
        redactor,
        store,
        index,
        job,
        config,
    })
}

/// Runs the job at `job_uri`; returns the process exit code (see `worker_exit`).
pub async fn run_job(job_uri: &str, exe: &Path, cancel: impl std::future::Future<Output = ()>) -> i32 {
    let job = match read_job(job_uri).await {
        Ok(j) => j,
        Err(e) => {
            tracing::error!("{e}");
            return if e.kind() == ErrorKind::Invalid { worker_exit::BAD_JOB } else { 1 };
        }
    };
    let ctx = match build(job, exe).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot start job: {e}");
            return match e.kind() {
                ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Unauthorized => worker_exit::BAD_JOB,
                _ => 1,
            };
        }
    };
    tracing::info!(run = %ctx.run_id, job = %ctx.job.job_id, attempt = ctx.job.attempt, tasks = ctx.job.tasks.len(), "job started");
    tokio::pin!(cancel);
    for task in &ctx.job.tasks {
        let outcome = tokio::select! {
            r = process_task(&ctx, task) => r,
            _ = &mut cancel => {
                tracing::warn!(task = %task.id, "stopping: cancelled");
                return worker_exit::CANCELLED;
            }
        };
        if let Err(e) = outcome {
            // A store or index failure: the job cannot vouch for its results. Exiting non-zero
            // makes the controller retry the unfinished tasks.
            tracing::error!(task = %task.id, "{}", ctx.redactor.redact(&e.to_string()));
            return 1;
        }
    }
    tracing::info!(job = %ctx.job.job_id, "job finished");
    worker_exit::OK
}

/// Processes one task; `Err` only for failures of agenteval's own storage.
async fn process_task(ctx: &Ctx, task: &TaskSpec) -> Result<()> {
    let attempt = ctx.job.attempt;
    let running = TaskTransition::new(task.id.clone(), attempt, TaskState::Running).job(&ctx.job.job_id);
    if !ctx.index.record_task(&ctx.run_id, &running).await? {
        tracing::info!(task = %task.id, attempt, "skipped: already completed or taken by a later attempt");
        return Ok(());
    }
    let mut log =
        vec![format!("{} task {} attempt {} job {}", Utc::now().to_rfc3339(), task.id, attempt, ctx.job.job_id)];
    let started_at = Utc::now();
    let env = ctx.benchmark.prepare_environment(&ctx.run_id, task).await;
    let result = match &env {
        Ok(env) => run_and_grade(ctx, task, env, &mut log).await,
        Err(e) => Err(e.clone_message()),
    };
    if let Ok(env) = &env
        && let Err(e) = ctx.benchmark.teardown(env).await
    {
        log.push(format!("teardown failed: {e}"));
    }
    let (agent, scores) = match result {
        Ok(x) => x,
        Err(e) => {
            log.push(format!("infrastructure failure: {e}"));
            let agent = AgentResult {
                success: false,
                final_answer: None,
                error: Some(e.to_string()),
                total_cost_usd: 0.0,
                total_tokens: 0,
                wall_seconds: 0.0,
                terminated_by: TerminatedBy::InfraFailure,
                steps: 0,
            };
            let score = EvaluatorScore::errored("benchmark", "benchmark", e.to_string());
            (agent, vec![score])
        }
    };
    let result = TaskResult {
        schema_version: SCHEMA_VERSION.into(),
        run_id: ctx.run_id,
        task_id: task.id.clone(),
        job_id: ctx.job.job_id.clone(),
        attempt,
        passed: scores.iter().all(|s| s.passed),
        agent,
        scores,
        started_at,
        finished_at: Utc::now(),
    };
    log.push(format!(
        "{} finished: passed={} terminated_by={} cost=${:.6} tokens={} wall={:.3}s",
        Utc::now().to_rfc3339(),
        result.passed,
        result.agent.terminated_by.as_str(),
        result.total_cost_usd(),
        result.agent.total_tokens,
        result.agent.wall_seconds
    ));
    // A retried job may overlap the attempt it replaced (a worker that was only slow). Whoever
    // the index has moved past must not overwrite the files of the attempt that counts.
    if let Some(now) = ctx.index.get_task(&ctx.run_id, &task.id).await?
        && (now.state == TaskState::Completed || now.attempt > attempt)
    {
        tracing::warn!(task = %task.id, attempt, "superseded by attempt {}; not writing results", now.attempt);
        return Ok(());
    }
    let redact = |t: &str| ctx.redactor.redact(t);
    write_task_outcome(ctx.store.as_ref(), &result, &(log.join("\n") + "\n"), &redact).await?;
    if !ctx.index.record_task(&ctx.run_id, &TaskTransition::completed(&result)).await? {
        tracing::warn!(task = %task.id, attempt, "another attempt completed this task first");
    }
    Ok(())
}

trait CloneMessage {
    fn clone_message(&self) -> Error;
}

impl CloneMessage for Error {
    fn clone_message(&self) -> Error {
        Error::new(self.kind(), self.to_string())
    }
}

async fn run_and_grade(
    ctx: &Ctx,
    task: &TaskSpec,
    env: &TaskEnvironment,
    log: &mut Vec<String>,
) -> Result<(AgentResult, Vec<EvaluatorScore>)> {
    let limits = &ctx.config.agent.limits;
    let appender = ctx.store.open_appender(&ctx.run_id, &layout::task_file(&task.id, layout::TASK_TRACE)).await?;
    let mut sink = TraceSink {
        run_id: ctx.run_id,
        task_id: task.id.clone(),
        appender,
        redactor: ctx.redactor.clone(),
        limits: limits.clone(),
        events: Vec::new(),
        cost: 0.0,
        tokens: 0,
        write_error: None,
    };
    let actx = AgentContext { run_id: ctx.run_id, task, limits, env, secrets: &ctx.secrets };
    let start = Instant::now();
    let outcome = match limits.max_wall_seconds {
        Some(secs) => {
            match tokio::time::timeout(Duration::from_secs_f64(secs), ctx.agent.run(&actx, &mut sink)).await {
                Ok(o) => o,
                Err(_) => AgentOutcome {
                    final_answer: None,
                    error: Some((TerminatedBy::LimitTime, format!("killed after {secs}s (max_wall_seconds)"))),
                },
            }
        }
        None => ctx.agent.run(&actx, &mut sink).await,
    };
    let wall = start.elapsed().as_secs_f64();
    if let Some(e) = sink.write_error.take() {
        return Err(e);
    }
    let agent_steps = sink.events.len() as u32;
    let ended = sink.events.last().is_some_and(|e| e.kind == EventKind::AgentTerminal);
    let (terminated_by, error) = match &outcome.error {
        None => (TerminatedBy::Completed, None),
        Some((t, m)) => (*t, Some(ctx.redactor.redact(m))),
    };
    if !ended || error.is_some() {
        // Every trace ends with a terminal event, written by the runner when the agent could not.
        let payload = json!({"terminated_by": terminated_by.as_str(), "error": error, "written_by": "runner"});
        sink.write(EventKind::AgentTerminal, payload, 0.0, 0, 0).await;
    }
    let agent = AgentResult {
        success: error.is_none(),
        final_answer: outcome.final_answer.map(|a| ctx.redactor.redact_json(&a)),
        error,
        total_cost_usd: sink.cost,
        total_tokens: sink.tokens,
        wall_seconds: wall,
        terminated_by,
        steps: agent_steps.max(sink.events.len() as u32),
    };
    log.push(format!("agent {} ended: {}", ctx.agent.name(), terminated_by.as_str()));
    if let Some(e) = &agent.error {
        log.push(format!("agent error: {e}"));
    }

    let mut scores = vec![ctx.benchmark.grade(task, &agent, &sink.events).await];
    let task_evaluators = task.evaluators.iter().map(evaluator_from_config).collect::<Vec<_>>();
    let input = EvalInput { task, result: &agent, trace: &sink.events };
    for e in &ctx.evaluators {
        scores.push(evaluate_safely(e.as_ref(), &input).await);
    }
    for (i, e) in task_evaluators.into_iter().enumerate() {
        scores.push(match e {
            Ok(e) => evaluate_safely(e.as_ref(), &input).await,
            Err(err) => EvaluatorScore::errored(&format!("task-evaluator-{i}"), "unknown", err.to_string()),
        });
    }
    for s in &scores {
        let payload = json!({"evaluator_id": s.evaluator_id, "kind": s.kind, "score": s.score, "passed": s.passed, "reason": s.reason});
        sink.write(EventKind::EvaluatorScore, payload, s.cost_usd, 0, 0).await;
    }
    sink.appender.finish().await?;
    if let Some(e) = sink.write_error.take() {
        return Err(e);
    }
    Ok((agent, scores))
}
