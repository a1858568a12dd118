//! Running the agent on one task: the trace sink that streams its events and enforces the token
//! and cost limits, the wall-clock limit, the GenAI spans of its calls, and the `policy.check`
//! verdict. Grading is [`super::grade`]'s.

use std::time::{Duration, Instant, SystemTime};

use agenteval_core::config::Limits;
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::Redactor;
use agenteval_core::traits::*;
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;
use chrono::Utc;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _};
use serde_json::json;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::Ctx;
use crate::telemetry;

/// Streams events to `trace.jsonl` and enforces token and cost limits.
pub(super) struct TraceSink {
    run_id: RunId,
    task_id: agenteval_core::TaskId,
    /// The job attempt writing the trace: every event carries it.
    attempt: u32,
    pub(super) appender: Box<dyn Appender>,
    redactor: Redactor,
    limits: Limits,
    /// What grading sees of the trace: every event, with its payload kept only while the
    /// kept payloads fit [`KEPT_PAYLOAD_BYTES`]; the whole trace is in `trace.jsonl`.
    pub(super) events: Vec<TraceEvent>,
    kept_payload_bytes: usize,
    written_bytes: u64,
    cost: f64,
    tokens: u64,
    pub(super) write_error: Option<Error>,
    spans: CallSpans,
    /// Some event said its cost is unknown (`"cost_unknown": true` in its payload).
    cost_unknown: bool,
    /// Files the agent attached, written to the task's folder once it is done.
    attachments: Vec<(String, Vec<u8>)>,
}

/// Payload bytes of trace events the worker keeps in memory for grading, so that its memory
/// does not grow with the trace. Past it an event keeps its kind, usage and `tool` name (what the
/// built-in evaluators read) and its payload is marked `{"elided": true}`.
const KEPT_PAYLOAD_BYTES: usize = 8 << 20;

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
            if ev.input_tokens > 0 || ev.output_tokens > 0 {
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
            if ev.input_tokens > 0 || ev.output_tokens > 0 {
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
    pub(super) async fn write(
        &mut self,
        kind: EventKind,
        payload: serde_json::Value,
        cost: f64,
        input: u64,
        output: u64,
    ) {
        let ev = TraceEvent {
            run_id: self.run_id,
            task_id: self.task_id.clone(),
            step: self.events.len() as u32,
            attempt: self.attempt,
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
        self.written_bytes = self.written_bytes.saturating_add(line.len() as u64);
        // Usage was checked on the way in (`emit`); saturating keeps a long trace of large but
        // believable numbers from wrapping.
        self.cost += cost;
        self.tokens = self.tokens.saturating_add(input.saturating_add(output));
        self.spans.observe(&ev);
        let mut ev = ev;
        let size = line.len();
        if self.kept_payload_bytes + size > KEPT_PAYLOAD_BYTES && kind != EventKind::AgentTerminal {
            let tool = ev.payload.get("tool").cloned();
            ev.payload = json!({"elided": true});
            if let Some(tool) = tool {
                ev.payload["tool"] = tool;
            }
        } else {
            self.kept_payload_bytes += size;
        }
        self.events.push(ev);
    }
}

#[async_trait]
impl EventSink for TraceSink {
    async fn emit(&mut self, event: AgentEvent) -> std::result::Result<(), Stop> {
        if let Some(problem) = event.usage_problem() {
            // Not written: the numbers would enter every total. The reason quotes them.
            return Err(Stop {
                terminated_by: TerminatedBy::AgentError,
                reason: format!("event {} {problem}", self.events.len() + 1),
            });
        }
        // The runner's own terminal event is written after this limit; one past it is allowed.
        let max_events = self.limits.trace_events();
        if self.events.len() as u64 >= max_events {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTrace,
                reason: format!("emitted more than {max_events} events (max_trace_events)"),
            });
        }
        let kind = event.kind.unwrap_or(EventKind::AgentObservation);
        if event.payload.get("cost_unknown") == Some(&serde_json::Value::Bool(true)) {
            self.cost_unknown = true;
        }
        self.write(kind, event.payload, event.cost_usd, event.input_tokens, event.output_tokens).await;
        if let Some(e) = &self.write_error {
            return Err(Stop { terminated_by: TerminatedBy::InfraFailure, reason: format!("cannot write trace: {e}") });
        }
        let max_bytes = self.limits.trace_bytes();
        if self.written_bytes > max_bytes {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTrace,
                reason: format!("wrote {} trace bytes, limit {max_bytes} (max_trace_bytes)", self.written_bytes),
            });
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

    async fn attach(&mut self, name: &str, bytes: Vec<u8>) {
        // A plain file name only: an agent does not choose where in the bundle it writes.
        let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if plain && !name.starts_with('.') && !layout::TASK_FILES.contains(&name) {
            self.attachments.retain(|(n, _)| n != name);
            self.attachments.push((name.to_string(), bytes));
        }
    }
}

/// Runs the agent on one task under the run's limits, streaming its events to the task's
/// `trace.jsonl`; returns its result and the open trace, which grading goes on writing to.
// Long: the agent's future, its limits and its span are one `select!`; split, each part would
// need all of them.
pub(super) async fn run_agent(
    ctx: &Ctx,
    task: &TaskSpec,
    env: &TaskEnvironment,
    log: &mut Vec<String>,
) -> Result<(AgentResult, TraceSink)> {
    let task_limits = crate::benchmarks::harbor::task_limits(ctx.config.agent.limits(), task);
    let limits = &task_limits;
    // Staged under the job attempt: only the attempt that counts publishes it into the task
    // folder (`write_outcome`), so a duplicate or superseded attempt never touches it.
    let (job, attempt) = (&ctx.job.job_id, ctx.job.attempt);
    let staged = layout::staged_task_file(job, attempt, &task.id, layout::TASK_TRACE);
    let appender = ctx.store.open_appender(&ctx.run_id, &staged).await?;
    let model = ctx.config.agent.model().unwrap_or_else(|| ctx.agent.name()).to_string();
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
        attempt: ctx.job.attempt,
        appender,
        redactor: ctx.redactor.clone(),
        limits: limits.clone(),
        events: Vec::new(),
        kept_payload_bytes: 0,
        written_bytes: 0,
        cost: 0.0,
        tokens: 0,
        write_error: None,
        spans: CallSpans::new(execute.context(), model),
        cost_unknown: false,
        attachments: Vec::new(),
    };
    let mut tools = ctx.benchmark.tools(task);
    if env.session.is_some() {
        tools.extend(crate::agents::env_tools());
    }
    let actx = AgentContext { run_id: ctx.run_id, task, limits, env, secrets: &ctx.secrets, tools: &tools };
    let start = Instant::now();
    // Always a deadline: with none, an agent (or a child holding its stdout) could keep the
    // task forever. The config bounds it, so the `Duration` cannot overflow.
    let secs = limits.wall_seconds();
    let outcome = async {
        match tokio::time::timeout(Duration::from_secs_f64(secs), ctx.agent.run(&actx, &mut sink)).await {
            Ok(o) => o,
            Err(_) => AgentOutcome {
                final_answer: None,
                error: Some((TerminatedBy::LimitTime, format!("killed after {secs}s (max_wall_seconds)"))),
            },
        }
    }
    .instrument(execute.clone())
    .await;
    let wall = start.elapsed().as_secs_f64();
    sink.spans.finish();
    for (name, bytes) in std::mem::take(&mut sink.attachments) {
        let text = ctx.redactor.redact(&String::from_utf8_lossy(&bytes));
        let staged = layout::staged_task_file(&ctx.job.job_id, ctx.job.attempt, &task.id, &name);
        ctx.store.put(&ctx.run_id, &staged, text.as_bytes()).await?;
    }
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
    let (input_tokens, output_tokens) = sink
        .events
        .iter()
        .fold((0u64, 0u64), |(i, o), e| (i.saturating_add(e.input_tokens), o.saturating_add(e.output_tokens)));
    execute.record("gen_ai.usage.input_tokens", input_tokens.min(i64::MAX as u64) as i64);
    execute.record("gen_ai.usage.output_tokens", output_tokens.min(i64::MAX as u64) as i64);
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
        cost_unknown: sink.cost_unknown,
    };
    log.push(format!("agent {} ended: {}", ctx.agent.name(), terminated_by.as_str()));
    if let Some(e) = &agent.error {
        log.push(format!("agent error: {e}"));
    }
    Ok((agent, sink))
}

/// The `policy.check` span: whether the agent stayed within the run's limits. The limits are
/// enforced as events arrive (`TraceSink::emit`, the wall-clock timeout); this records the
/// verdict once the agent is done.
fn policy_check(limits: &Limits, terminated_by: TerminatedBy, tokens: u64, cost: f64, wall: f64) {
    let verdict = match terminated_by {
        TerminatedBy::LimitTokens
        | TerminatedBy::LimitCost
        | TerminatedBy::LimitTime
        | TerminatedBy::LimitTrace
        | TerminatedBy::LimitDisk
        | TerminatedBy::LimitMemory => terminated_by.as_str(),
        _ => "within_limits",
    };
    let span = tracing::info_span!(
        "policy.check",
        agenteval.policy.verdict = verdict,
        agenteval.tokens = tokens.min(i64::MAX as u64) as i64,
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
    span.record("agenteval.limit.max_wall_seconds", limits.wall_seconds());
    if verdict != "within_limits" {
        telemetry::set_error(&span, &format!("limit exceeded: {verdict}"));
    }
}
