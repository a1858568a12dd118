//! The worker: runs every task of one job (prepare, agent, grade, evaluate, write, record),
//! streaming trace events to the bundle as they happen.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agenteval_core::config::{Limits, RunConfig};
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::{Redactor, Secret};
use agenteval_core::traits::*;
use agenteval_core::{Error, ErrorKind, Result, RunId, SCHEMA_VERSION};
use agenteval_local::process::worker_exit;
use async_trait::async_trait;
use chrono::Utc;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _};
use serde_json::json;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::agents::agent_from_config;
use crate::benchmarks::benchmark_from_config;
use crate::bundle::{read_json, write_task_outcome};
use crate::evaluators::{evaluate_safely, evaluator_from_config};
use crate::factory;
use crate::telemetry::{self, Journal, TRACEPARENT_ENV};

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
    /// Where this job's tasks hang in the run's trace (the controller's `eval.job` span).
    traceparent: Option<String>,
    journal: Journal,
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
    spans: CallSpans,
}

/// Turns the agent's event stream into GenAI spans under `agent.execute`: an LLM call for every
/// event that reports token usage (from the previous event to this one), and a tool execution
/// from each `agent.tool_call` to its `agent.tool_result`.
struct CallSpans {
    parent: opentelemetry::Context,
    model: String,
    last_event: SystemTime,
    open_tool: Option<opentelemetry::global::BoxedSpan>,
}

impl CallSpans {
    fn new(parent: opentelemetry::Context, model: String) -> Self {
        CallSpans { parent, model, last_event: SystemTime::now(), open_tool: None }
    }

    fn observe(&mut self, ev: &TraceEvent) {
        if !self.parent.span().span_context().is_valid() {
            return;
        }
        let now = SystemTime::now();
        let tracer = opentelemetry::global::tracer("agenteval");
        let tool_name = || ev.payload.get("tool").and_then(|t| t.as_str()).unwrap_or("unknown").to_string();
        if ev.kind == EventKind::AgentToolResult {
            let mut span =
                self.open_tool.take().unwrap_or_else(|| self.tool_span(&tracer, &tool_name(), self.last_event));
            if ev.input_tokens + ev.output_tokens > 0 {
                span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", ev.input_tokens as i64));
                span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", ev.output_tokens as i64));
            }
            span.end_with_timestamp(now);
        } else {
            if let Some(mut open) = self.open_tool.take() {
                // A tool call without a result: it ended when the agent moved on.
                open.set_status(opentelemetry::trace::Status::error("no tool result"));
                open.end_with_timestamp(now);
            }
            if ev.input_tokens + ev.output_tokens > 0 {
                let mut span = tracer
                    .span_builder(format!("chat {}", self.model))
                    .with_kind(SpanKind::Client)
                    .with_start_time(self.last_event)
                    .with_attributes([
                        KeyValue::new("gen_ai.operation.name", "chat"),
                        KeyValue::new("gen_ai.request.model", self.model.clone()),
                        KeyValue::new("gen_ai.usage.input_tokens", ev.input_tokens as i64),
                        KeyValue::new("gen_ai.usage.output_tokens", ev.output_tokens as i64),
                        KeyValue::new("agenteval.cost_usd", ev.cost_usd),
                        KeyValue::new("agenteval.step", ev.step as i64),
                    ])
                    .start_with_context(&tracer, &self.parent);
                span.end_with_timestamp(now);
            }
            if ev.kind == EventKind::AgentToolCall {
                self.open_tool = Some(self.tool_span(&tracer, &tool_name(), now));
            }
        }
        self.last_event = now;
    }

    fn tool_span(
        &self,
        tracer: &opentelemetry::global::BoxedTracer,
        tool: &str,
        start: SystemTime,
    ) -> opentelemetry::global::BoxedSpan {
        tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", tool.to_string()),
            ])
            .start_with_context(tracer, &self.parent)
    }

    /// Closes a dangling tool span; later events (the runner's) make no spans.
    fn finish(&mut self) {
        if let Some(mut open) = self.open_tool.take() {
            open.set_status(opentelemetry::trace::Status::error("no tool result"));
            open.end();
        }
        self.parent = opentelemetry::Context::new();
    }
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
        self.spans.observe(&ev);
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

async fn build(job: JobSpec, exe: &Path, journal: Journal) -> Result<Ctx> {
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
    let traceparent = std::env::var(TRACEPARENT_ENV).ok().or_else(|| job.env.get(TRACEPARENT_ENV).cloned());
    Ok(Ctx {
        traceparent,
        journal,
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
pub async fn run_job(
    job_uri: &str,
    exe: &Path,
    journal: Journal,
    cancel: impl std::future::Future<Output = ()>,
) -> i32 {
    let job = match read_job(job_uri).await {
        Ok(j) => j,
        Err(e) => {
            tracing::error!("{e}");
            return if e.kind() == ErrorKind::Invalid { worker_exit::BAD_JOB } else { 1 };
        }
    };
    let ctx = match build(job, exe, journal).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot start job: {e}");
            return match e.kind() {
                ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Unauthorized => worker_exit::BAD_JOB,
                _ => 1,
            };
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
    tokio::pin!(cancel);
    for task in &ctx.job.tasks {
        let span = task_span(&ctx, task);
        let root = telemetry::span_id(&span);
        let outcome = tokio::select! {
            r = run_task(&ctx, task).instrument(span.clone()) => r,
            _ = &mut cancel => {
                tracing::warn!(task = %task.id, "stopping: cancelled");
                // The task's span ends here, marked, and is flushed before the process exits.
                telemetry::set_error(&span, "worker cancelled");
                return worker_exit::CANCELLED;
            }
        };
        record_outcome(&ctx, &span, &outcome);
        // The task's spans go into its folder, so its span must be over before the files are
        // written; this handle is the last one.
        drop(span);
        let spans = match (root, &ctx.journal) {
            (Some(root), Some(j)) => Some(j.take_tree(root)),
            _ => None,
        };
        let outcome = match outcome {
            Ok(Some(done)) => write_outcome(&ctx, task, done, spans).await,
            Ok(None) => Ok(()),
            Err(e) => Err(e),
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
        gen_ai.request.model = ctx.config.agent.model.as_deref().unwrap_or(""),
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
fn record_outcome(ctx: &Ctx, span: &tracing::Span, outcome: &Result<Option<(TaskResult, String)>>) {
    match outcome {
        Ok(Some((r, _))) => {
            span.record("agenteval.passed", r.passed);
            span.record("agenteval.cost_usd", r.total_cost_usd());
            span.record("agenteval.tokens", r.agent.total_tokens as i64);
            span.record("agenteval.terminated_by", r.agent.terminated_by.as_str());
            if r.agent.terminated_by == TerminatedBy::InfraFailure {
                telemetry::set_error(span, r.agent.error.as_deref().unwrap_or("infrastructure failure"));
            }
        }
        Ok(None) => {
            span.record("agenteval.skipped", true);
        }
        Err(e) => telemetry::set_error(span, &ctx.redactor.redact(&e.to_string())),
    }
}

/// Writes a finished task's files and records it; `Err` only for failures of agenteval's own
/// storage.
async fn write_outcome(
    ctx: &Ctx,
    task: &TaskSpec,
    (result, log): (TaskResult, String),
    spans: Option<Vec<u8>>,
) -> Result<()> {
    // A retried job may overlap the attempt it replaced (a worker that was only slow). Whoever
    // the index has moved past must not overwrite the files of the attempt that counts.
    let attempt = ctx.job.attempt;
    if let Some(now) = ctx.index.get_task(&ctx.run_id, &task.id).await?
        && (now.state == TaskState::Completed || now.attempt > attempt)
    {
        tracing::warn!(task = %task.id, attempt, "superseded by attempt {}; not writing results", now.attempt);
        return Ok(());
    }
    let redact = |t: &str| ctx.redactor.redact(t);
    write_task_outcome(ctx.store.as_ref(), &result, &log, spans.as_deref(), &redact).await?;
    if !ctx.index.record_task(&ctx.run_id, &TaskTransition::completed(&result)).await? {
        tracing::warn!(task = %task.id, attempt, "another attempt completed this task first");
    }
    Ok(())
}

/// Runs and grades one task: its result and worker log, or `None` when another attempt owns it.
async fn run_task(ctx: &Ctx, task: &TaskSpec) -> Result<Option<(TaskResult, String)>> {
    let attempt = ctx.job.attempt;
    let running = TaskTransition::new(task.id.clone(), attempt, TaskState::Running).job(&ctx.job.job_id);
    if !ctx.index.record_task(&ctx.run_id, &running).await? {
        tracing::info!(task = %task.id, attempt, "skipped: already completed or taken by a later attempt");
        return Ok(None);
    }
    let ids = telemetry::log_ids(&tracing::Span::current());
    let mut log =
        vec![format!("{} task {} attempt {} job {}{ids}", Utc::now().to_rfc3339(), task.id, attempt, ctx.job.job_id)];
    let started_at = Utc::now();
    let prepare = tracing::info_span!("benchmark.prepare");
    let env = ctx.benchmark.prepare_environment(&ctx.run_id, task).instrument(prepare.clone()).await;
    if let Err(e) = &env {
        telemetry::set_error(&prepare, &ctx.redactor.redact(&e.to_string()));
    }
    drop(prepare);
    let result = match &env {
        Ok(env) => run_and_grade(ctx, task, env, &mut log).await,
        Err(e) => Err(e.clone_message()),
    };
    if let Ok(env) = &env {
        let teardown = tracing::info_span!("benchmark.teardown");
        if let Err(e) = ctx.benchmark.teardown(env).instrument(teardown.clone()).await {
            telemetry::set_error(&teardown, &ctx.redactor.redact(&e.to_string()));
            log.push(format!("teardown failed: {e}"));
        }
    }
    let (agent, scores) = match result {
        Ok(x) => x,
        Err(e) => {
            log.push(format!("infrastructure failure: {e}"));
            let agent = AgentResult {
                success: false,
                final_answer: None,
                error: Some(ctx.redactor.redact(&e.to_string())),
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
    Ok(Some((result, log.join("\n") + "\n")))
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
    let model = ctx.config.agent.model.clone().unwrap_or_else(|| ctx.agent.name().to_string());
    let execute = tracing::info_span!(
        "agent.execute",
        agenteval.agent = ctx.agent.name(),
        gen_ai.request.model = model.as_str(),
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        agenteval.cost_usd = Empty,
        agenteval.terminated_by = Empty,
    );
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
        spans: CallSpans::new(execute.context(), model),
    };
    let actx = AgentContext { run_id: ctx.run_id, task, limits, env, secrets: &ctx.secrets };
    let start = Instant::now();
    let outcome = async {
        match limits.max_wall_seconds {
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
        }
    }
    .instrument(execute.clone())
    .await;
    let wall = start.elapsed().as_secs_f64();
    sink.spans.finish();
    if let Some(e) = sink.write_error.take() {
        telemetry::set_error(&execute, &ctx.redactor.redact(&e.to_string()));
        return Err(e);
    }
    let agent_steps = sink.events.len() as u32;
    let ended = sink.events.last().is_some_and(|e| e.kind == EventKind::AgentTerminal);
    let (terminated_by, error) = match &outcome.error {
        None => (TerminatedBy::Completed, None),
        Some((t, m)) => (*t, Some(ctx.redactor.redact(m))),
    };
    let (input_tokens, output_tokens) =
        sink.events.iter().fold((0, 0), |(i, o), e| (i + e.input_tokens, o + e.output_tokens));
    execute.record("gen_ai.usage.input_tokens", input_tokens as i64);
    execute.record("gen_ai.usage.output_tokens", output_tokens as i64);
    execute.record("agenteval.cost_usd", sink.cost);
    execute.record("agenteval.terminated_by", terminated_by.as_str());
    if let Some(e) = &error {
        telemetry::set_error(&execute, e);
    }
    drop(execute);
    policy_check(limits, terminated_by, sink.tokens, sink.cost, wall);
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

    let grade = tracing::info_span!("benchmark.grade", agenteval.passed = Empty);
    let graded = ctx.benchmark.grade(task, &agent, &sink.events).instrument(grade.clone()).await;
    score_span(&grade, &graded, &ctx.redactor);
    drop(grade);
    let mut scores = vec![graded];
    let task_evaluators = task.evaluators.iter().map(evaluator_from_config).collect::<Vec<_>>();
    let input = EvalInput { task, result: &agent, trace: &sink.events };
    for e in &ctx.evaluators {
        scores.push(evaluate_in_span(e.as_ref(), &input, &ctx.redactor).await);
    }
    for (i, e) in task_evaluators.into_iter().enumerate() {
        scores.push(match e {
            Ok(e) => evaluate_in_span(e.as_ref(), &input, &ctx.redactor).await,
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

/// The `policy.check` span: whether the agent stayed within the run's limits. The limits are
/// enforced as events arrive (`TraceSink::emit`, the wall-clock timeout); this records the
/// verdict once the agent is done.
fn policy_check(limits: &Limits, terminated_by: TerminatedBy, tokens: u64, cost: f64, wall: f64) {
    let verdict = match terminated_by {
        TerminatedBy::LimitTokens | TerminatedBy::LimitCost | TerminatedBy::LimitTime => terminated_by.as_str(),
        _ => "within_limits",
    };
    let span = tracing::info_span!(
        "policy.check",
        agenteval.policy.verdict = verdict,
        agenteval.tokens = tokens as i64,
        agenteval.cost_usd = cost,
        agenteval.wall_seconds = wall,
        agenteval.limit.max_tokens = Empty,
        agenteval.limit.max_cost_usd = Empty,
        agenteval.limit.max_wall_seconds = Empty,
    );
    if let Some(v) = limits.max_tokens {
        span.record("agenteval.limit.max_tokens", v as i64);
    }
    if let Some(v) = limits.max_cost_usd {
        span.record("agenteval.limit.max_cost_usd", v);
    }
    if let Some(v) = limits.max_wall_seconds {
        span.record("agenteval.limit.max_wall_seconds", v);
    }
    if verdict != "within_limits" {
        telemetry::set_error(&span, &format!("limit exceeded: {verdict}"));
    }
}

fn score_span(span: &tracing::Span, s: &EvaluatorScore, redactor: &Redactor) {
    span.record("agenteval.passed", s.passed);
    if let Some(e) = &s.error {
        telemetry::set_error(span, &redactor.redact(e));
    }
}

/// Runs an evaluator in its `evaluator.<kind>` span.
async fn evaluate_in_span(e: &dyn Evaluator, input: &EvalInput<'_>, redactor: &Redactor) -> EvaluatorScore {
    let span = tracing::info_span!(
        "evaluator",
        otel.name = format!("evaluator.{}", e.kind()),
        agenteval.evaluator.id = e.id(),
        agenteval.score = Empty,
        agenteval.passed = Empty,
    );
    let score = evaluate_safely(e, input).instrument(span.clone()).await;
    span.record("agenteval.score", score.score);
    score_span(&span, &score, redactor);
    score
}
