//! An agent whose model calls go through the gateway: its task's door (token, budget, the
//! recording it replays), each call written to the trace as a `model.call` event as it ends
//! (its usage the gateway's, the agent's own report ignored), the task stopped when a call
//! crosses a limit or misses in a strict replay, and the door's cassette kept with the task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::config::{JudgeRole, Limits, UserRole};
use agenteval_core::gateway::{
    CallQueue, Door, DoorSpec, ModelCall, RateGovernor, RateLedger, Reach, Refusal, Replay, RunBudget, SpendLedger,
};
use agenteval_core::model::{EventKind, TaskSpec, TerminatedBy};
use agenteval_core::traits::{AgentEvent, EventSink, GatewayAccess, Stop, TaskEnvironment};
use agenteval_core::{Error, Result, layout};
use agenteval_llm::CassetteMode;
use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::worker::attempt::Attempt;
use crate::worker::ctx::Ctx;
use crate::worker::sink::TraceSink;

/// How long calls still streaming when the agent stops are waited for: their usage counts.
const SETTLE: Duration = Duration::from_secs(5);

/// The trace sink shared by the agent and the gateway's calls.
#[derive(Clone)]
pub(in crate::worker) struct Shared {
    pub sink: Arc<Mutex<TraceSink>>,
    /// The door's calls, when the agent's calls go through the gateway: the agent's own usage
    /// numbers are then not taken.
    pub calls: Option<Arc<CallQueue>>,
    /// The simulated user's door's calls, in a conversation: each is written before the next
    /// event, so a user's turn follows the call that made it.
    pub user_calls: Option<Arc<CallQueue>>,
    /// The agent is the built-in `llm` agent, whose `cost.tick` after each answer is that
    /// call's event: it takes the call's usage from the gateway's record of it (one event per
    /// call, the conversation's spans as they were).
    pub merge_ticks: bool,
}

/// A call that went through with an answer (the `llm` agent reports each such with a tick).
fn answered(c: &ModelCall) -> bool {
    c.refused.is_none() && (200..300).contains(&c.status)
}

#[async_trait]
impl EventSink for Shared {
    async fn emit(&mut self, mut event: AgentEvent) -> std::result::Result<(), Stop> {
        if let Some(user) = &self.user_calls {
            while let Some(call) = user.take(|_| true) {
                self.role_call(call, "user").await?;
            }
        }
        let Some(calls) = self.calls.clone() else { return self.sink.lock().await.emit(event).await };
        // Calls that ended before this event come before it in the trace.
        self.write_pending(&calls, self.merge_ticks).await?;
        let tick = self.merge_ticks && event.kind == Some(EventKind::CostTick);
        // Usage comes from the provider, through the gateway, never from the agent's word.
        event.cost_usd = 0.0;
        event.input_tokens = 0;
        event.output_tokens = 0;
        if let Some(p) = event.payload.as_object_mut() {
            p.remove("cost_unknown");
        }
        if tick && let Some(call) = calls.take(answered) {
            event.cost_usd = call.cost_usd.unwrap_or(0.0);
            event.input_tokens = call.input_tokens;
            event.output_tokens = call.output_tokens;
            if let Some(p) = event.payload.as_object_mut() {
                p.insert("cost_usd".into(), serde_json::json!(call.cost_usd));
                p.insert("wire".into(), serde_json::json!(call.wire));
                p.insert("latency_ms".into(), serde_json::json!(call.latency_ms));
                p.insert("ttfb_ms".into(), serde_json::json!(call.ttfb_ms));
                if call.replayed {
                    p.insert("replayed".into(), serde_json::Value::Bool(true));
                }
                if call.cost_usd.is_none() {
                    p.insert("cost_unknown".into(), serde_json::Value::Bool(true));
                }
            }
        }
        self.sink.lock().await.emit(event).await
    }

    async fn attach(&mut self, name: &str, bytes: Vec<u8>) {
        self.sink.lock().await.attach(name, bytes).await
    }
}

impl Shared {
    /// Writes the calls that ended and are not written yet (with `keep_answered`, not those
    /// the agent's ticks will take); `Err` when one must stop the task.
    async fn write_pending(&self, calls: &CallQueue, keep_answered: bool) -> std::result::Result<(), Stop> {
        while let Some(call) = calls.take(|c| !keep_answered || !answered(c)) {
            self.model_call(call).await?;
        }
        Ok(())
    }

    /// Writes one call of a role (the simulated user); `Err` when the task must stop.
    pub async fn role_call(&self, call: ModelCall, role: &str) -> std::result::Result<(), Stop> {
        let refused = call.refused.clone();
        let mut payload = serde_json::to_value(&call).expect("calls serialize");
        payload["role"] = serde_json::Value::String(role.to_string());
        if (200..300).contains(&call.status) && call.cost_usd.is_none() {
            payload["cost_unknown"] = serde_json::Value::Bool(true);
        }
        let event = AgentEvent { kind: Some(EventKind::ModelCall), payload, ..AgentEvent::default() };
        self.sink.lock().await.emit(event).await?;
        // The same stop as the agent's, said as the role's.
        match refused.and_then(stop_of) {
            Some(stop) => Err(Stop { reason: format!("the {role} role: {}", stop.reason), ..stop }),
            None => Ok(()),
        }
    }

    /// Writes one call; `Err` when the task must stop (a limit crossed, a replay miss).
    pub async fn model_call(&self, call: ModelCall) -> std::result::Result<(), Stop> {
        let refused = call.refused.clone();
        let ok = (200..300).contains(&call.status);
        let mut payload = serde_json::to_value(&call).expect("calls serialize");
        if ok && call.cost_usd.is_none() {
            payload["cost_unknown"] = serde_json::Value::Bool(true);
        }
        let event = AgentEvent {
            kind: Some(EventKind::ModelCall),
            payload,
            cost_usd: call.cost_usd.unwrap_or(0.0),
            input_tokens: call.input_tokens,
            output_tokens: call.output_tokens,
        };
        self.sink.lock().await.emit(event).await?;
        match refused.and_then(stop_of) {
            Some(stop) => Err(stop),
            None => Ok(()),
        }
    }
}

/// What a refused call means for the task: it stops for a limit, a replay miss or the
/// provider's absence; any other refusal the caller met as an error, as it would a provider's.
fn stop_of(refused: Refusal) -> Option<Stop> {
    let (terminated_by, reason) = match refused {
        Refusal::Tokens { reason } => (TerminatedBy::LimitTokens, reason),
        Refusal::Cost { reason } => (TerminatedBy::LimitCost, reason),
        Refusal::ReplayMiss { reason } => (TerminatedBy::ReplayMiss, reason),
        Refusal::Unavailable { reason } | Refusal::RunBudget { reason } => (TerminatedBy::InfraFailure, reason),
        Refusal::Upstream { .. } | Refusal::Policy { .. } | Refusal::RateLimited { .. } => return None,
    };
    Some(Stop { terminated_by, reason })
}

/// The run's spend at the wire, in the run index every worker of the run writes.
struct IndexLedger {
    index: Arc<dyn agenteval_core::traits::RunIndex>,
    run: agenteval_core::RunId,
}

#[async_trait::async_trait]
impl SpendLedger for IndexLedger {
    async fn spent(&self) -> Result<f64> {
        self.index.spend(&self.run).await
    }

    async fn add(&self, usd: f64) -> Result<f64> {
        self.index.add_spend(&self.run, usd).await
    }

    async fn hold(&self, usd: f64) -> Result<(f64, f64)> {
        self.index.add_held(&self.run, usd).await
    }
}

#[async_trait::async_trait]
impl agenteval_core::gateway::CallLedger for IndexLedger {
    async fn add(&self, calls: u64, usd: f64) -> Result<()> {
        self.index.add_calls(&self.run, calls, usd).await
    }

    async fn throttled(&self, calls: u64) -> Result<()> {
        self.index.add_throttled(&self.run, calls).await
    }
}

#[async_trait::async_trait]
impl RateLedger for IndexLedger {
    async fn book(&self, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64> {
        self.index.book_rate(&self.run, key, now_ms, cost_ms).await
    }
}

/// The task's door and what its agent is told of it.
pub(in crate::worker) struct Opened {
    pub door: Box<dyn Door>,
    pub access: GatewayAccess,
}

/// Opens the task's door: its limits, the recording it replays under `--cassettes`, the base
/// URLs from this machine and, for a container, from the task network.
pub(super) async fn open(ctx: &Ctx, task: &TaskSpec, limits: &Limits, env: &TaskEnvironment) -> Result<Option<Opened>> {
    // A gateway that serves only the tests' judge is none of the agent's.
    if !crate::agents::access::agent_calls_through_gateway(&ctx.config) {
        return Ok(None);
    }
    open_for(ctx, task, limits, env, None).await
}

/// A role's door: the role's name (`user`, `judge`), its one model and its own limits.
pub(in crate::worker) struct RoleDoor<'a> {
    pub name: &'static str,
    pub model: &'a str,
    pub limits: Limits,
}

impl<'a> RoleDoor<'a> {
    pub fn user(role: &'a UserRole) -> Self {
        let limits = Limits { max_tokens: role.max_tokens, max_cost_usd: role.max_cost_usd, ..Limits::default() };
        RoleDoor { name: "user", model: &role.model, limits }
    }

    pub fn judge(role: &'a JudgeRole) -> Self {
        let limits = Limits { max_tokens: role.max_tokens, max_cost_usd: role.max_cost_usd, ..Limits::default() };
        RoleDoor { name: "judge", model: &role.model, limits }
    }

    /// Where the task's pack keeps the role's recording.
    fn pack_file(&self) -> &'static str {
        match self.name {
            "judge" => layout::JUDGE_CASSETTE,
            _ => layout::USER_CASSETTE,
        }
    }
}

/// The cassette file of a task's calls in a cassette folder: the agent's, or a role's.
fn cassette_file(task: &TaskSpec, role: Option<&RoleDoor>) -> String {
    match role {
        Some(r) => format!("{}.{}.jsonl", task.id, r.name),
        None => format!("{}.jsonl", task.id),
    }
}

/// A role's door of a task (the simulated user's, the judge's): its own limits, its own
/// recording, its one model; the run's budget, rate limits and call count shared with the
/// agent's.
pub(in crate::worker) async fn open_role(
    ctx: &Ctx,
    task: &TaskSpec,
    role: &RoleDoor<'_>,
    env: &TaskEnvironment,
) -> Result<Opened> {
    open_for(ctx, task, &role.limits, env, Some(role)).await?.ok_or_else(|| {
        let why = match role.name {
            "user" => "`roles.user` needs an `llm` agent or `agent.upstream`",
            _ => "a regrade starts none",
        };
        Error::invalid(format!(
            "the {} role's calls go through the model gateway, and this run has none ({why})",
            role.name
        ))
    })
}

// Long: a door's settings are one struct, each field read from the run where it is set.
async fn open_for(
    ctx: &Ctx,
    task: &TaskSpec,
    limits: &Limits,
    env: &TaskEnvironment,
    role: Option<&RoleDoor<'_>>,
) -> Result<Option<Opened>> {
    let Some(gateway) = &ctx.gateway else { return Ok(None) };
    let replay = match &ctx.cassettes {
        Some(c) if c.mode != CassetteMode::Record => {
            let strict = c.mode == CassetteMode::Replay;
            match std::fs::read(c.dir.join(cassette_file(task, role))) {
                Ok(cassette) => Some(Replay { cassette, strict }),
                // Nothing recorded: every call is a miss (strict) or goes to the provider.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Replay { cassette: Vec::new(), strict }),
                Err(e) => return Err(Error::io("reading the task's cassette", e)),
            }
        }
        _ => None,
    };
    let container_ip = match &env.session {
        Some(s) => s.env.gateway_host(&s.handle).await,
        None => None,
    };
    if let Some(ip) = container_ip {
        gateway.listen_on(ip).await?;
    }
    let spec = DoorSpec {
        run_id: ctx.run_id,
        task_id: task.id.clone(),
        attempt: ctx.job.attempt,
        max_tokens: limits.max_tokens,
        max_cost_usd: limits.max_cost_usd,
        replay,
        record: true,
        redactor: ctx.redactor.clone(),
        models: match role {
            Some(r) => vec![agenteval_llm::ModelSpec::parse(r.model).map_or_else(|_| r.model.to_string(), |s| s.name)],
            None => crate::agents::access::door_models(&ctx.config),
        },
        // The `llm` agent's own client (and the simulated user's) retries a provider's
        // refusals; someone else's program (a verifier's judge calls among them) gets the
        // gateway's.
        retry: match role {
            Some(r) => r.name == "judge",
            None => !crate::agents::access::calls_in_process(&ctx.config),
        },
        run_budget: ctx.config.max_run_cost_usd.map(|max_usd| RunBudget {
            max_usd,
            ledger: Arc::new(IndexLedger { index: ctx.index.clone(), run: ctx.job.ledger.unwrap_or(ctx.run_id) }),
        }),
        rate: crate::agents::access::upstream_of(&ctx.config).filter(|u| !u.rate_limits.is_empty()).map(|u| {
            RateGovernor {
                limits: u.rate_limits,
                ledger: Arc::new(IndexLedger { index: ctx.index.clone(), run: ctx.job.ledger.unwrap_or(ctx.run_id) }),
            }
        }),
        // This run's own count, never a set's ledger.
        usage: Some(agenteval_core::gateway::Usage(Arc::new(IndexLedger {
            index: ctx.index.clone(),
            run: ctx.run_id,
        }))),
    };
    let door = gateway.open(spec).await?;
    let host = door.base_urls(Reach::Host)?;
    let port = host
        .0
        .rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| Error::invalid(format!("the gateway's address {} has no port", host.0)))?;
    let container = match container_ip {
        Some(ip) => Some(door.base_urls(Reach::Container(ip))?),
        None => None,
    };
    let access = GatewayAccess { token: door.token().clone(), host, port, container, local: gateway.local() };
    Ok(Some(Opened { door, access }))
}

/// Writes each of a role's calls as it ends, marked with the role, its usage kept in its
/// payload and out of the agent's (its limits are the role's own, kept at its door); resolves
/// only when one must stop the task.
pub(super) async fn feed_role(calls: Arc<CallQueue>, role: &str, shared: &Shared) -> Stop {
    loop {
        while let Some(call) = calls.take(|_| true) {
            if let Err(stop) = shared.role_call(call, role).await {
                return stop;
            }
        }
        calls.pushed().await;
    }
}

/// Writes each call as it ends (but those the `llm` agent's ticks take); resolves only when
/// one must stop the task.
pub(super) async fn feed(calls: Arc<CallQueue>, shared: &Shared) -> Stop {
    loop {
        if let Err(stop) = shared.write_pending(&calls, shared.merge_ticks).await {
            return stop;
        }
        calls.pushed().await;
    }
}

/// Once the agent has stopped: waits (a little) for calls still streaming, writes them, closes
/// the door (its token stops working) and keeps its cassette with the task (and in the
/// cassette folder when recording). The first stop a late call brings, if any.
pub(in crate::worker) async fn settle(
    ctx: &Ctx,
    task: &TaskSpec,
    door: &mut dyn Door,
    shared: &Shared,
    at: &mut Attempt,
    role: Option<&RoleDoor<'_>>,
) -> Result<Option<Stop>> {
    let deadline = Instant::now() + SETTLE;
    let calls = door.calls();
    let mut first_stop = None;
    // Every call is written, past any that would stop the task (the first such is returned).
    let write_all = async |first_stop: &mut Option<Stop>| match role {
        Some(r) => {
            while let Some(call) = calls.take(|_| true) {
                if let Err(s) = shared.role_call(call, r.name).await {
                    first_stop.get_or_insert(s);
                }
            }
        }
        None => {
            while let Err(s) = shared.write_pending(&calls, false).await {
                first_stop.get_or_insert(s);
            }
        }
    };
    loop {
        write_all(&mut first_stop).await;
        let left = deadline.saturating_duration_since(Instant::now());
        if door.in_flight() == 0 || left.is_zero() {
            break;
        }
        let _ = tokio::time::timeout(left, calls.pushed()).await;
    }
    let pack = role.map_or(layout::TASK_CASSETTE, RoleDoor::pack_file);
    // A task told in steps opens a door per step: its recording is every step's, in order.
    let cassette = match (door.close(), at.kept(pack)) {
        (now, Some(before)) => [before, now.as_slice()].concat(),
        (now, None) => now,
    };
    door.settle().await;
    write_all(&mut first_stop).await;
    if let Some(c) = ctx.cassettes.as_ref().filter(|c| c.mode == CassetteMode::Record) {
        let file = c.dir.join(cassette_file(task, role));
        std::fs::create_dir_all(&c.dir)
            .and_then(|_| std::fs::write(&file, &cassette))
            .map_err(|e| Error::io(format!("writing the cassette {}", file.display()), e))?;
    }
    if !cassette.is_empty() {
        at.keep(pack, cassette);
    }
    Ok(first_stop)
}

#[cfg(test)]
mod tests {
    use agenteval_core::config::Limits;
    use agenteval_core::gateway::{ModelCall, Refusal};
    use agenteval_core::secret::Redactor;

    use super::*;
    use crate::worker::sink::testing::sink;

    fn shared(limits: Limits) -> Shared {
        let (sink, _) = sink(limits, Redactor::new());
        Shared {
            sink: Arc::new(Mutex::new(sink)),
            calls: Some(Arc::new(CallQueue::default())),
            user_calls: None,
            merge_ticks: false,
        }
    }

    fn answered(tokens: u64, cost: Option<f64>) -> ModelCall {
        ModelCall { status: 200, model: "m".into(), input_tokens: tokens, cost_usd: cost, ..ModelCall::default() }
    }

    #[tokio::test]
    async fn a_call_refused_for_a_limit_stops_the_task_for_it_and_is_in_the_trace() {
        let s = shared(Limits::default());
        s.model_call(answered(10, Some(0.01))).await.unwrap();
        let refused = ModelCall {
            status: 429,
            refused: Some(Refusal::Tokens { reason: "the task's max_tokens is spent".into() }),
            ..ModelCall::default()
        };
        let stop = s.model_call(refused).await.unwrap_err();
        assert_eq!(stop.terminated_by, TerminatedBy::LimitTokens);
        assert_eq!(stop.reason, "the task's max_tokens is spent");
        let miss =
            ModelCall { refused: Some(Refusal::ReplayMiss { reason: "no recording".into() }), ..ModelCall::default() };
        assert_eq!(s.model_call(miss).await.unwrap_err().terminated_by, TerminatedBy::ReplayMiss);
        let sink = s.sink.lock().await;
        let kinds: Vec<EventKind> = sink.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::ModelCall; 3], "every call is written, the refused ones too");
        assert_eq!((sink.tokens, sink.cost), (10, 0.01), "usage is the gateway's");
    }

    #[tokio::test]
    async fn a_refusal_the_agent_meets_as_an_error_does_not_stop_the_task() {
        let s = shared(Limits::default());
        let policy = ModelCall {
            status: 400,
            refused: Some(Refusal::Policy { reason: "web_search".into() }),
            ..ModelCall::default()
        };
        s.model_call(policy).await.expect("the agent sees a provider's refusal");
    }

    #[tokio::test]
    async fn the_agents_own_usage_is_never_taken_and_an_unpriced_answer_is_unknown() {
        let mut s = shared(Limits::default());
        let claimed = AgentEvent {
            kind: Some(EventKind::CostTick),
            payload: serde_json::json!({"cost_unknown": true}),
            cost_usd: 5.0,
            input_tokens: 1_000,
            output_tokens: 0,
        };
        s.emit(claimed).await.unwrap();
        s.model_call(answered(3, None)).await.unwrap();
        let sink = s.sink.lock().await;
        assert_eq!((sink.tokens, sink.cost), (3, 0.0), "the agent's word is zeroed");
        assert!(sink.cost_unknown, "an answer without a price is unknown, not $0");
        assert!(sink.events[0].payload.get("cost_unknown").is_none(), "the agent's own flag is dropped");
    }
}
