//! One task attempt's door: its token, its budget and spend, its calls as they end, its
//! recording, and the recording it replays.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use agenteval_core::gateway::{CallQueue, Door, DoorSpec, ModelCall, Reach};
use agenteval_core::secret::{Redactor, Secret};
use agenteval_core::{Error, Result};
use async_trait::async_trait;

use crate::Inner;
use crate::cassette::{self, Entry, Replayer};

/// What the server knows of an open door.
pub(crate) struct Session {
    pub task: String,
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub redactor: Redactor,
    /// Requests and answers are kept for the cassette.
    pub record: bool,
    /// The models its calls may name; empty: any.
    pub models: Vec<String>,
    /// Calls the provider refuses for now are asked again (`DoorSpec::retry`).
    pub retry: bool,
    /// The run's budget at the wire (`DoorSpec::run_budget`).
    pub run_budget: Option<agenteval_core::gateway::RunBudget>,
    /// The provider's rate limits, booked for every worker of the run (`DoorSpec::rate`).
    pub rate: Option<agenteval_core::gateway::RateGovernor>,
    /// The run's calls and their cost, outside the task (`DoorSpec::usage`).
    pub usage: Option<std::sync::Arc<dyn agenteval_core::gateway::CallLedger>>,
    /// One call of the task at a time books its turn under the run's rate limits: a task with
    /// many calls at once cannot book the limit ahead of the other tasks' next calls.
    pub turn: tokio::sync::Mutex<()>,
    pub state: Mutex<State>,
    pub calls: Arc<CallQueue>,
    /// Told when the door closes: calls still reading an answer stop (their cost was counted).
    pub closing: tokio::sync::Notify,
    /// The run's ledger writes still under way (spend, holds given back, calls counted): the
    /// worker waits for them before its task ends ([`Door::settle`]), so that a worker that
    /// ends at once never leaves the run's budget held.
    pub pending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// What a forwarded call holds of its task's budget while it runs: the prompt as guessed and
/// the most its answer may be (the length it was held to), at the model's price.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub wire: &'static str,
    pub model: String,
    pub stream: bool,
    pub input: u64,
    pub output: u64,
    /// What it could cost: its prompt as guessed and its answer at its most.
    pub cost: Option<f64>,
    /// What it holds of a cost limit: its prompt as guessed and its answer at its most.
    pub held_cost: f64,
    /// What it holds of the run's budget in the run's ledger (its `cost`, once it is sent):
    /// every worker's next call sees it until the call ends and gives it back.
    pub reserved: f64,
}

impl Hold {
    pub fn tokens(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

pub(crate) struct State {
    /// Tokens and dollars spent so far (calls that ended).
    pub tokens: u64,
    pub cost: f64,
    /// What calls in flight hold of the budget (see [`Hold`]): their prompts and their answers'
    /// most, in tokens and in dollars.
    pub held_tokens: u64,
    pub held_cost: f64,
    pub holds: std::collections::HashMap<u32, Hold>,
    /// Calls counted at their hold when the door closed: their late end counts no more.
    pub written_off: std::collections::HashSet<u32>,
    /// Calls that arrived so far (the next call's 0-based number).
    pub arrived: u32,
    /// Calls that arrived and have not ended.
    pub in_flight: u32,
    pub recorded: Vec<Entry>,
    pub replay: Option<(Replayer, bool)>,
    pub closed: bool,
}

impl Session {
    /// A call ended: its hold is released and its spend counts, its line is kept (a refused
    /// call has none), the worker hears of it. A call already counted when the door closed is
    /// not counted again.
    pub fn ended(&self, n: u32, entry: Option<Entry>, call: ModelCall) {
        let mut s = self.state.lock().expect("not poisoned");
        if s.written_off.contains(&n) {
            return;
        }
        let mut reserved = 0.0;
        if let Some(h) = s.holds.remove(&n) {
            s.held_tokens = s.held_tokens.saturating_sub(h.tokens());
            s.held_cost = (s.held_cost - h.held_cost).max(0.0);
            reserved = h.reserved;
        }
        s.tokens = s.tokens.saturating_add(call.input_tokens.saturating_add(call.output_tokens));
        s.cost += call.cost_usd.unwrap_or(0.0);
        s.in_flight = s.in_flight.saturating_sub(1);
        s.recorded.extend(entry);
        drop(s);
        if !call.replayed {
            self.spend(call.cost_usd.unwrap_or(0.0));
        }
        self.release(reserved);
        if let Some(usd) = call.cost_usd.filter(|c| *c > 0.0) {
            self.count_calls(0, usd);
        }
        self.calls.push(call);
    }

    /// Adds calls and their cost to the run's count, in the background.
    pub fn count_calls(&self, calls: u64, usd: f64) {
        let runtime = tokio::runtime::Handle::try_current().ok();
        if let (Some(usage), Some(rt)) = (self.usage.clone(), runtime) {
            self.track(rt.spawn(async move {
                if let Err(e) = usage.add(calls, usd).await {
                    tracing::warn!("cannot count a call for the run: {e}");
                }
            }));
        }
    }

    /// Counts a call the provider refused for its rate (or the run's rate limits held back long)
    /// for the run, in the background: the controller's concurrency backs off on it.
    pub fn count_throttled(&self) {
        let runtime = tokio::runtime::Handle::try_current().ok();
        if let (Some(usage), Some(rt)) = (self.usage.clone(), runtime) {
            self.track(rt.spawn(async move {
                if let Err(e) = usage.throttled(1).await {
                    tracing::warn!("cannot count a rate-limited call for the run: {e}");
                }
            }));
        }
    }

    /// Gives back what a call held of the run's budget, in the background.
    pub fn release(&self, usd: f64) {
        let runtime = tokio::runtime::Handle::try_current().ok();
        if let (Some(budget), Some(rt)) = (self.run_budget.as_ref().filter(|_| usd > 0.0), runtime) {
            let ledger = budget.ledger.clone();
            self.track(rt.spawn(async move {
                if let Err(e) = ledger.hold(-usd).await {
                    tracing::warn!("cannot give back what a call held of the run's budget: {e}");
                }
            }));
        }
    }

    /// Adds a call's cost to the run's ledger, in the background: the next call of any task
    /// reads it.
    fn spend(&self, usd: f64) {
        // A door dropped where no runtime runs (its worker ending) has nothing left to tell.
        let runtime = tokio::runtime::Handle::try_current().ok();
        if let (Some(budget), Some(rt)) = (self.run_budget.as_ref().filter(|_| usd > 0.0), runtime) {
            let ledger = budget.ledger.clone();
            self.track(rt.spawn(async move {
                if let Err(e) = ledger.add(usd).await {
                    tracing::warn!("cannot add a call's cost to the run's spend: {e}");
                }
            }));
        }
    }

    /// Keeps a ledger write's task until [`Door::settle`] waits for it.
    fn track(&self, task: tokio::task::JoinHandle<()>) {
        let mut pending = self.pending.lock().expect("not poisoned");
        pending.retain(|t| !t.is_finished());
        pending.push(task);
    }

    /// The door closes: every call still in flight is counted at what it could cost (its hold)
    /// and recorded so, and told to stop reading its answer.
    pub fn write_off(&self) {
        let mut s = self.state.lock().expect("not poisoned");
        let holds: Vec<(u32, Hold)> = s.holds.drain().collect();
        let mut calls = Vec::new();
        let (mut cut_off, mut reserved) = (0.0, 0.0);
        for (n, h) in holds {
            reserved += h.reserved;
            s.written_off.insert(n);
            s.tokens = s.tokens.saturating_add(h.tokens());
            s.cost += h.cost.unwrap_or(0.0);
            cut_off += h.cost.unwrap_or(0.0);
            calls.push(ModelCall {
                call: n + 1,
                wire: h.wire.into(),
                model: h.model.clone(),
                stream: h.stream,
                status: 499,
                input_tokens: h.input,
                output_tokens: h.output,
                cached_input_tokens: 0,
                cost_usd: h.cost,
                latency_ms: 0,
                ttfb_ms: 0,
                finish_reason: "cut off: still running when its task ended".into(),
                prompt: String::new(),
                answer: String::new(),
                replayed: false,
                refused: None,
                at_cap: true,
                waited_ms: 0,
                retries: 0,
            });
        }
        s.held_tokens = 0;
        s.held_cost = 0.0;
        s.in_flight = 0;
        s.closed = true;
        drop(s);
        self.spend(cut_off);
        self.release(reserved);
        if cut_off > 0.0 {
            self.count_calls(0, cut_off);
        }
        calls.sort_by_key(|c| c.call);
        for c in calls {
            self.calls.push(c);
        }
        self.closing.notify_waiters();
    }
}

/// The worker's side of a door.
pub struct GatewayDoor {
    inner: Arc<Inner>,
    session: Arc<Session>,
    token: Secret,
    calls: Arc<CallQueue>,
    ports: Vec<(Ipv4Addr, u16)>,
    loopback: Option<u16>,
}

impl std::fmt::Debug for GatewayDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayDoor").field("task", &self.session.task).finish_non_exhaustive()
    }
}

/// Entries as cassette lines, in call order.
fn lines(mut entries: Vec<Entry>) -> Vec<u8> {
    entries.sort_by_key(|e| e.call);
    let mut out = Vec::new();
    for e in entries {
        out.extend(serde_json::to_vec(&e).expect("entries serialize"));
        out.push(b'\n');
    }
    out
}

/// A token no one guesses: 244 random bits, shaped like a key so that the redactor's key
/// shapes catch it too.
fn new_token() -> String {
    format!("sk-agenteval-{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

pub(crate) fn open(
    inner: Arc<Inner>,
    spec: DoorSpec,
    loopback: Option<u16>,
    ports: Vec<(Ipv4Addr, u16)>,
) -> GatewayDoor {
    let calls = Arc::new(CallQueue::default());
    let replay = spec.replay.as_ref().map(|r| {
        // An unreadable recording (another agenteval's) replays as an empty one: every call is
        // a miss that says why.
        let (entries, unreadable) = match cassette::parse(&r.cassette) {
            Ok(e) => (e, None),
            Err(why) => (Vec::new(), Some(why)),
        };
        let mut replayer = Replayer::new(entries, inner.config.replay_match);
        replayer.unreadable = unreadable;
        (replayer, r.strict)
    });
    let token = new_token();
    let session = Arc::new(Session {
        task: spec.task_id.to_string(),
        max_tokens: spec.max_tokens,
        max_cost_usd: spec.max_cost_usd,
        redactor: spec.redactor.clone(),
        record: spec.record,
        models: spec.models.clone(),
        retry: spec.retry,
        run_budget: spec.run_budget.clone(),
        rate: spec.rate.clone(),
        usage: spec.usage.clone().map(|u| u.0),
        turn: tokio::sync::Mutex::new(()),
        closing: tokio::sync::Notify::new(),
        pending: Mutex::new(Vec::new()),
        state: Mutex::new(State {
            tokens: 0,
            cost: 0.0,
            held_tokens: 0,
            held_cost: 0.0,
            holds: Default::default(),
            written_off: Default::default(),
            arrived: 0,
            in_flight: 0,
            recorded: Vec::new(),
            replay,
            closed: false,
        }),
        calls: calls.clone(),
    });
    inner.doors.lock().expect("not poisoned").insert(token.clone(), session.clone());
    GatewayDoor { inner, session, token: Secret::new(token), calls, ports, loopback }
}

impl GatewayDoor {
    /// The next call that ends (any), waiting for it.
    pub async fn next_call(&self) -> ModelCall {
        loop {
            if let Some(c) = self.calls.take(|_| true) {
                return c;
            }
            self.calls.pushed().await;
        }
    }

    /// The cassette lines of the calls that ended so far (redacted), in call order.
    pub fn cassette(&self) -> Vec<u8> {
        lines(self.session.state.lock().expect("not poisoned").recorded.clone())
    }

    /// Takes the cassette lines of the calls that ended since the last take (a long-lived
    /// door writes them as it goes rather than holding them).
    pub fn take_cassette(&self) -> Vec<u8> {
        lines(std::mem::take(&mut self.session.state.lock().expect("not poisoned").recorded))
    }

    /// Tokens and dollars spent so far.
    pub fn spent(&self) -> (u64, f64) {
        let s = self.session.state.lock().expect("not poisoned");
        (s.tokens, s.cost)
    }
}

#[async_trait]
impl Door for GatewayDoor {
    fn token(&self) -> &Secret {
        &self.token
    }

    fn base_urls(&self, reach: Reach) -> Result<(String, String)> {
        let (ip, port) = match reach {
            Reach::Host => (Ipv4Addr::LOCALHOST, self.loopback),
            Reach::Container(ip) => (ip, self.ports.iter().find(|(i, _)| *i == ip).map(|(_, p)| *p)),
        };
        let port = port.ok_or_else(|| Error::invalid(format!("the model gateway does not listen at {ip}")))?;
        Ok((format!("http://{ip}:{port}/v1"), format!("http://{ip}:{port}")))
    }

    fn calls(&self) -> Arc<CallQueue> {
        self.calls.clone()
    }

    fn in_flight(&self) -> u32 {
        self.session.state.lock().expect("not poisoned").in_flight
    }

    fn close(&mut self) -> Vec<u8> {
        self.session.write_off();
        self.inner.doors.lock().expect("not poisoned").remove(self.token.expose());
        self.cassette()
    }

    async fn settle(&mut self) {
        let pending: Vec<_> = std::mem::take(&mut *self.session.pending.lock().expect("not poisoned"));
        // Bounded: a ledger that hangs (an index out of reach) does not keep the task open.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), futures::future::join_all(pending)).await;
    }
}

impl Drop for GatewayDoor {
    fn drop(&mut self) {
        self.session.write_off();
        self.inner.doors.lock().expect("not poisoned").remove(self.token.expose());
    }
}
