//! Running the agent on one task: the trace sink that streams its events and enforces the token
//! and cost limits, the wall-clock limit, the GenAI spans of its calls, and the `policy.check`
//! verdict. Grading is [`super::grade`]'s.

use std::time::{Duration, Instant};

use agenteval_core::config::Limits;
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::Redactor;
use agenteval_core::traits::*;
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::ctx::Ctx;
use super::genai_spans::{CallModel, CallSpans};
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
    /// What was written, while it is small: the task's pack takes it from here instead of
    /// reading the staged file back.
    pub(super) copy: Option<Vec<u8>>,
}

/// Trace bytes a sink keeps a copy of for the task's pack; a longer trace is read back.
const COPY_BYTES: usize = 1 << 20;

/// Payload bytes of trace events the worker keeps in memory for grading, so that its memory
/// does not grow with the trace. Past it an event keeps its kind, usage and `tool` name (what the
/// built-in evaluators read) and its payload is marked `{"elided": true}`.
const KEPT_PAYLOAD_BYTES: usize = 8 << 20;

/// What the GenAI spans may show of the conversation: the task's input and the system prompt
/// (both redacted), when the run captures content (`telemetry.capture_content`, or the
/// conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
fn capture_content(
    ctx: &Ctx,
    task: &TaskSpec,
    llm: Option<&agenteval_core::config::LlmAgentConfig>,
) -> Option<(String, Option<String>)> {
    let on = ctx.config.telemetry.capture_content
        || std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if !on {
        return None;
    }
    let input = match &task.input {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let system = llm.and_then(|c| c.system.as_deref()).map(|s| ctx.redactor.redact(s));
    Some((ctx.redactor.redact(&input), system))
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
        match &mut self.copy {
            Some(c) if c.len() + line.len() <= COPY_BYTES => c.extend_from_slice(&line),
            _ => self.copy = None,
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

impl TraceSink {
    /// A sink for events written as they were recorded (`agenteval regrade`): the same trace
    /// file, limits and redaction, and no model-call spans (no model is called).
    pub(super) async fn for_recorded(ctx: &Ctx, task: &TaskSpec) -> Result<TraceSink> {
        let spans = CallSpans::new(opentelemetry::Context::new(), CallModel::of("", false), None);
        TraceSink::open(ctx, task, ctx.config.agent.limits().clone(), spans).await
    }

    /// A sink writing the task's trace into this job attempt's staging folder.
    async fn open(ctx: &Ctx, task: &TaskSpec, limits: Limits, spans: CallSpans) -> Result<TraceSink> {
        // Staged under the job attempt: only the attempt that counts publishes it into the task
        // folder (`write_outcome`), so a duplicate or superseded attempt never touches it.
        let staged = layout::staged_task_trace(&ctx.job.job_id, ctx.job.attempt, &task.id);
        let appender = ctx.store.open_appender(&ctx.run_id, &staged).await?;
        Ok(TraceSink {
            run_id: ctx.run_id,
            task_id: task.id.clone(),
            attempt: ctx.job.attempt,
            appender,
            redactor: ctx.redactor.clone(),
            limits,
            events: Vec::new(),
            kept_payload_bytes: 0,
            written_bytes: 0,
            cost: 0.0,
            tokens: 0,
            write_error: None,
            spans,
            cost_unknown: false,
            attachments: Vec::new(),
            copy: Some(Vec::new()),
        })
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
        if plain && !name.starts_with('.') && !layout::TASK_FILES.contains(&name) && name != layout::TASK_SPANS {
            self.attachments.retain(|(n, _)| n != name);
            self.attachments.push((name.to_string(), bytes));
        }
    }
}

/// How often a task environment's storage is measured while its agent runs, at most: every
/// 2 s, or ten times as long as the last measurement took (a large layer costs a walk).
const STORAGE_POLL: Duration = Duration::from_secs(2);

/// Resolves, with why, once the task's environment has grown past its storage cap; never for
/// an environment that cannot tell (a workspace: its scratch folder has its own limit). A
/// measurement that fails is tried again at the next poll.
async fn storage_watch(env: &TaskEnvironment, task: &TaskSpec) -> String {
    let Some(s) = &env.session else { return std::future::pending().await };
    let cap = super::storage_cap_bytes(task);
    let mut pause = STORAGE_POLL;
    loop {
        tokio::time::sleep(pause).await;
        let took = Instant::now();
        let used = s.env.written_bytes(&s.handle).await;
        pause = STORAGE_POLL.max(took.elapsed() * 10);
        if let Some(used) = used
            && used > cap
        {
            return super::storage_exceeded(used, cap);
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
    let model = ctx.config.agent.model().unwrap_or_else(|| ctx.agent.name()).to_string();
    let llm = match &ctx.config.agent {
        agenteval_core::config::AgentConfig::Llm(c) => Some(c),
        _ => None,
    };
    let call_model = CallModel::of(&model, llm.is_some());
    let execute = tracing::info_span!(
        "agent.execute",
        agenteval.agent = ctx.agent.name(),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = ctx.agent.name(),
        gen_ai.provider.name = Empty,
        gen_ai.request.model = call_model.model.as_str(),
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        agenteval.cost_usd = Empty,
        agenteval.terminated_by = Empty,
    );
    if let Some(p) = call_model.provider {
        execute.record("gen_ai.provider.name", p);
    }
    let spans = CallSpans::new(execute.context(), call_model.clone(), capture_content(ctx, task, llm));
    let sink = TraceSink::open(ctx, task, limits.clone(), spans).await?;
    let mut tools = ctx.benchmark.tools(task);
    if env.session.is_some() {
        tools.extend(crate::agents::env_tools());
    }
    // The task's door to the model gateway, when the agent's calls go through one.
    let (mut door, access) = match super::metered::open(ctx, task, limits, env).await? {
        Some(o) => (Some(o.door), Some(o.access)),
        None => (None, None),
    };
    let shared = super::metered::Shared {
        sink: std::sync::Arc::new(tokio::sync::Mutex::new(sink)),
        calls: door.as_ref().map(|d| d.calls()),
        merge_ticks: llm.is_some(),
    };
    let actx = AgentContext {
        run_id: ctx.run_id,
        task,
        limits,
        env,
        secrets: &ctx.secrets,
        tools: &tools,
        gateway: access.as_ref(),
    };
    let start = Instant::now();
    // Always a deadline: with none, an agent (or a child holding its stdout) could keep the
    // task forever. The config bounds it, so the `Duration` cannot overflow.
    let secs = limits.wall_seconds();
    let mut agent_sink = shared.clone();
    let calls = async {
        match &shared.calls {
            Some(c) => super::metered::feed(c.clone(), &shared).await,
            None => std::future::pending().await,
        }
    };
    let mut outcome = async {
        tokio::select! {
            // A refused call is seen before the agent's reaction to it: the task ends for the
            // refusal's reason (a limit, a replay miss), not for the error the agent then met.
            biased;
            stop = calls => AgentOutcome::stopped(stop.terminated_by, stop.reason),
            run = tokio::time::timeout(Duration::from_secs_f64(secs), ctx.agent.run(&actx, &mut agent_sink)) => match run {
                Ok(o) => o,
                Err(_) => AgentOutcome::stopped(TerminatedBy::LimitTime, format!("killed after {secs}s (max_wall_seconds)")),
            },
            // The environment's storage, watched while the agent writes: stopped at the cap
            // (within a poll), so the machine keeps its disk.
            why = storage_watch(env, task) => AgentOutcome::stopped(TerminatedBy::LimitDisk, why),
        }
    }
    .instrument(execute.clone())
    .await;
    drop(agent_sink);
    // The agent's time: not the wait below for calls still streaming when it stopped.
    let wall = start.elapsed().as_secs_f64();
    if let Some(d) = door.as_mut() {
        let late = super::metered::settle(ctx, task, d.as_mut(), &shared).await?;
        // A refused call the agent met as an error (a call in this process is refused and
        // answered in one step) ends the task for the refusal's reason, not the agent's error.
        let overridable = outcome.error.as_ref().is_none_or(|(t, _)| *t == TerminatedBy::AgentError);
        if let (true, Some(stop)) = (overridable, late) {
            outcome = AgentOutcome::stopped(stop.terminated_by, stop.reason);
        }
    }
    drop(door);
    let metered = shared.calls.is_some();
    let mut sink = std::sync::Arc::try_unwrap(shared.sink)
        .map_err(|_| Error::invalid("the trace is still shared after the agent stopped"))?
        .into_inner();
    sink.spans.finish();
    for (name, bytes) in std::mem::take(&mut sink.attachments) {
        let text = ctx.redactor.redact(&String::from_utf8_lossy(&bytes));
        ctx.keep(&task.id, name, text.into_bytes());
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
    // A fault says why an agent could not run; any other ending keeps none.
    let fault = outcome.fault.filter(|_| terminated_by == TerminatedBy::AgentError);
    let agent = AgentResult {
        fault,
        success: error.is_none(),
        final_answer: outcome.final_answer.map(|a| ctx.redactor.redact_json(&a)),
        error,
        total_cost_usd: sink.cost,
        total_tokens: sink.tokens,
        wall_seconds: wall,
        terminated_by,
        steps: agent_steps.max(sink.events.len() as u32),
        cost_unknown: sink.cost_unknown || unmetered_unknown(ctx, metered, &sink),
    };
    log.push(format!("agent {} ended: {}", ctx.agent.name(), terminated_by.as_str()));
    if let Some(e) = &agent.error {
        log.push(format!("agent error: {e}"));
    }
    Ok((agent, sink))
}

/// A third-party agent whose calls did not go through the gateway and that reported no usage
/// has an unknown cost, not a cost of $0 (built-in agents that call no model cost nothing).
fn unmetered_unknown(ctx: &Ctx, metered: bool, sink: &TraceSink) -> bool {
    use agenteval_core::config::AgentConfig;
    let third_party = matches!(ctx.config.agent, AgentConfig::Command { .. } | AgentConfig::Installed { .. });
    third_party && !metered && sink.tokens == 0 && sink.cost == 0.0
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
