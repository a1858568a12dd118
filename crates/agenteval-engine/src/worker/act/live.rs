//! The live act: the agent run on one task under the plan's limits, its events streamed to the
//! task's trace (its calls through the gateway metered as they end), the wall-clock and storage
//! limits enforced while it runs, its GenAI spans, and the `policy.check` verdict.

use std::time::{Duration, Instant};

use agenteval_core::config::Limits;
use agenteval_core::model::*;
use agenteval_core::traits::*;
use agenteval_core::{Error, Result};
use serde_json::json;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::metered;
use crate::telemetry;
use crate::worker::attempt::Attempt;
use crate::worker::capture::{storage_cap_bytes, storage_exceeded};
use crate::worker::ctx::Ctx;
use crate::worker::genai_spans::{CallModel, CallSpans};
use crate::worker::plan::Plan;
use crate::worker::sink::TraceSink;

/// What the GenAI spans may show of the conversation: the task's input and the system prompt
/// (both redacted), when the run captures content (`telemetry.capture_content`, or the
/// conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
fn capture_content(ctx: &Ctx, task: &TaskSpec) -> Option<(String, Option<String>)> {
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
    let system = ctx.needs.system_prompt.as_deref().map(|s| ctx.redactor.redact(s));
    Some((ctx.redactor.redact(&input), system))
}

/// How often a task environment's storage is measured while its agent runs, at most: every
/// 2 s, or ten times as long as the last measurement took (a large layer costs a walk).
const STORAGE_POLL: Duration = Duration::from_secs(2);

/// Resolves, with why, once the task's environment has grown past its storage cap; never for
/// an environment that cannot tell (a workspace: its scratch folder has its own limit). A
/// measurement that fails is tried again at the next poll.
async fn storage_watch(env: &TaskEnvironment, task: &TaskSpec) -> String {
    let Some(s) = &env.session else { return std::future::pending().await };
    let cap = storage_cap_bytes(task);
    let mut pause = STORAGE_POLL;
    loop {
        tokio::time::sleep(pause).await;
        let took = Instant::now();
        let used = s.env.written_bytes(&s.handle).await;
        pause = STORAGE_POLL.max(took.elapsed() * 10);
        if let Some(used) = used
            && used > cap
        {
            return storage_exceeded(used, cap);
        }
    }
}

/// Runs the agent on one task under the run's limits, streaming its events to the task's
/// `trace.jsonl`; returns its result and the open trace, which grading goes on writing to.
// Long: the agent's future, its limits and its span are one `select!`; split, each part would
// need all of them.
pub(super) async fn run_agent(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    env: &TaskEnvironment,
    at: &mut Attempt,
) -> Result<(AgentResult, TraceSink)> {
    let limits = &plan.limits;
    let model = ctx.config.agent.model().unwrap_or_else(|| ctx.agent.name()).to_string();
    let in_process = ctx.needs.calls_in_process;
    let call_model = CallModel::of(&model, in_process);
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
    let spans = CallSpans::new(execute.context(), call_model.clone(), capture_content(ctx, task));
    let sink = TraceSink::open(ctx, task, limits.clone(), spans).await?;
    let mut tools = ctx.benchmark.tools(task);
    if env.session.is_some() {
        tools.extend(crate::agents::env_tools());
    }
    // The task's door to the model gateway, when the agent's calls go through one.
    let (mut door, access) = match metered::open(ctx, task, limits, env).await? {
        Some(o) => (Some(o.door), Some(o.access)),
        None => (None, None),
    };
    // A conversation: the simulated user, through a door of its own.
    let (mut user_door, user) = match (ctx.benchmark.plan(task).user, &ctx.config.roles.user) {
        (Some(brief), Some(role)) => {
            let o = metered::open_role(ctx, task, &metered::RoleDoor::user(role), env).await?;
            let user = agenteval_llm::GatewayUser::new(role, brief, &o.access)
                .map_err(|e| Error::invalid(format!("roles.user: {e}")))?
                .with_tools(ctx.benchmark.user_tools(task));
            (Some(o.door), Some(user))
        }
        _ => (None, None),
    };
    let user_calls = user_door.as_ref().map(|d| d.calls());
    let shared = metered::Shared {
        sink: std::sync::Arc::new(tokio::sync::Mutex::new(sink)),
        calls: door.as_ref().map(|d| d.calls()),
        user_calls: user_calls.clone(),
        merge_ticks: in_process,
    };
    let actx = AgentContext {
        run_id: ctx.run_id,
        task,
        limits,
        env,
        secrets: &ctx.secrets,
        tools: &tools,
        gateway: access.as_ref(),
        user: user.as_ref().map(|u| u as &dyn agenteval_core::traits::SimulatedUser),
    };
    let start = Instant::now();
    // Always a deadline: with none, an agent (or a child holding its stdout) could keep the
    // task forever. The config bounds it, so the `Duration` cannot overflow.
    let secs = limits.wall_seconds();
    let mut agent_sink = shared.clone();
    let calls = async {
        let agent = async {
            match &shared.calls {
                Some(c) => metered::feed(c.clone(), &shared).await,
                None => std::future::pending().await,
            }
        };
        let user = async {
            match &user_calls {
                Some(c) => metered::feed_role(c.clone(), "user", &shared).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! { s = agent => s, s = user => s }
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
    if let Some(d) = user_door.as_mut() {
        let user = ctx.config.roles.user.as_ref().map(metered::RoleDoor::user);
        let late = metered::settle(ctx, task, d.as_mut(), &shared, at, user.as_ref()).await?;
        let overridable = outcome.error.as_ref().is_none_or(|(t, _)| *t == TerminatedBy::AgentError);
        if let (true, Some(stop)) = (overridable, late) {
            outcome = AgentOutcome::stopped(stop.terminated_by, stop.reason);
        }
    }
    drop(user_door);
    // A user turn cut short after the user acted on its own side: its acts, after its calls.
    let why = outcome.error.as_ref().map_or("the agent stopped", |(_, why)| why.as_str());
    if let Some(payload) = user.as_ref().and_then(|u| u.unfinished_turn(why)) {
        let _ = shared.sink.lock().await.emit(AgentEvent::new(EventKind::UserMessage, payload)).await;
    }
    if let Some(d) = door.as_mut() {
        let late = metered::settle(ctx, task, d.as_mut(), &shared, at, None).await?;
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
        at.keep(name, text.into_bytes());
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
    at.say(format!("agent {} ended: {}", ctx.agent.name(), terminated_by.as_str()));
    if let Some(e) = &agent.error {
        at.say(format!("agent error: {e}"));
    }
    Ok((agent, sink))
}

/// A third-party agent whose calls did not go through the gateway and that reported no usage
/// has an unknown cost, not a cost of $0 (built-in agents that call no model cost nothing).
fn unmetered_unknown(ctx: &Ctx, metered: bool, sink: &TraceSink) -> bool {
    ctx.needs.usage_unknown_unless_metered && !metered && sink.tokens == 0 && sink.cost == 0.0
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
