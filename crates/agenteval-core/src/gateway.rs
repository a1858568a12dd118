//! The model gateway's port: the one door through which an agent reaches its model. The worker
//! opens a [`Door`] per task attempt (its own bearer token, its budget, its recording or the
//! recording to replay) and hears of every call as it ends ([`ModelCall`]); the gateway itself
//! (an HTTP server holding the provider keys) lives in its own crate.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::secret::{Redactor, Secret};
use crate::{Result, RunId, TaskId};

/// The ports the gateway listens on at a task network's host address: the only ports of this
/// machine a task's container reaches (the Docker environment's firewall rules name them).
pub const GATEWAY_PORTS: std::ops::RangeInclusive<u16> = 47600..=47699;

/// What a door is opened with.
#[derive(Debug, Clone)]
pub struct DoorSpec {
    pub run_id: RunId,
    pub task_id: TaskId,
    pub attempt: u32,
    /// Tokens (input + output) the task may use; a call once they are spent is refused.
    pub max_tokens: Option<u64>,
    /// Dollars the task may spend; a call once they are spent, or to a model without a known
    /// price, is refused.
    pub max_cost_usd: Option<f64>,
    /// Recorded calls to answer from (a task's `cassette.jsonl`), and how.
    pub replay: Option<Replay>,
    /// Keep every call's request and answer for the task's cassette (`Door::close` returns
    /// them); without, only the calls' records are made.
    pub record: bool,
    /// Scrubs the task's secrets from what is recorded and reported.
    pub redactor: Redactor,
    /// The models its calls may name (the agent's and `upstream.models`); empty: any.
    pub models: Vec<String>,
    /// The run's budget, kept at the wire: once what every task's calls spent reaches it, the
    /// next call is refused (`Refusal::RunBudget`).
    pub run_budget: Option<RunBudget>,
    /// The gateway retries a call the provider refused for now (429, 5xx, unreachable), waiting
    /// as it asks: for an agent that is someone else's program. The built-in `llm` agent retries
    /// on its own.
    pub retry: bool,
    /// The provider's rate limits, kept for every worker of the run together: a call waits its
    /// turn before it is sent.
    pub rate: Option<RateGovernor>,
    /// The run's count of calls and their cost, kept outside the task (the run index): a task
    /// cancelled before its result is written still has its calls counted.
    pub usage: Option<Usage>,
}

/// The run's rate limits at the provider and the ledger every worker books its calls in (the
/// run index): a generic cell rate algorithm whose one number per limit is the time the limit is
/// booked until, so calls go in the order they booked, across the fleet.
#[derive(Clone)]
pub struct RateGovernor {
    pub limits: Vec<crate::config::RateLimit>,
    pub ledger: std::sync::Arc<dyn RateLedger>,
}

impl std::fmt::Debug for RateGovernor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateGovernor").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// Where the run's rate limits are booked, shared by every worker of the run.
#[async_trait]
pub trait RateLedger: Send + Sync {
    /// Books `cost` of the limit `key`: its time becomes `max(its time, now) + cost`,
    /// atomically; returns that time. (The governor counts in microseconds since the epoch; the
    /// ledger only adds and compares.)
    async fn book(&self, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64>;
}

/// The longest a call waits for its turn under the run's rate limits: past it the call is
/// refused (`Refusal::RateLimited`) and what it booked is given back.
pub const MAX_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A call's place under the run's rate limits: what it booked, to be corrected by what the
/// provider said it used ([`RateGovernor::settle`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Booked {
    /// The tokens booked, in each tokens-per-minute limit that applies.
    pub tokens: u64,
    /// How long the call waited for its turn.
    pub waited: std::time::Duration,
}

impl RateGovernor {
    /// The limits that apply to `model`, each with the ledger's key prefix.
    fn applying<'a>(&'a self, model: &'a str) -> impl Iterator<Item = (String, &'a crate::config::RateLimit)> + 'a {
        self.limits
            .iter()
            .enumerate()
            .filter(move |(_, l)| l.model.as_deref().is_none_or(|m| m == model))
            .map(|(i, l)| (l.model.clone().unwrap_or_else(|| format!("*{i}")), l))
    }

    /// Waits until a call to `model` of about `tokens` may go, booking it in every limit that
    /// applies. A call books at most a minute of any limit (a provider refuses a call larger than
    /// its limit a minute anyway): one call asking for a trillion tokens cannot hold the run's
    /// limit for a year. A call whose turn is more than [`MAX_TURN_WAIT`] away is not made to
    /// wait: what it booked is given back and `Err` says how long it would have waited. A ledger
    /// that cannot be reached lets the call go: the provider's own limit (and the gateway's
    /// retries) still hold.
    pub async fn wait_turn(&self, model: &str, tokens: u64) -> std::result::Result<Booked, std::time::Duration> {
        // In microseconds: a limit of more than 60,000 a minute is still its own, not a
        // millisecond's.
        let mut until = 0i64;
        let now = || chrono::Utc::now().timestamp_micros();
        let mut booked: Vec<(String, i64)> = Vec::new();
        let mut tokens_booked = 0u64;
        for (scope, l) in self.applying(model) {
            // One unit's share of a minute, and a second's worth that may go at once.
            let books = [
                l.requests_per_minute.map(|rpm| ("requests", 1u64, rpm)),
                l.tokens_per_minute.map(|tpm| ("tokens", tokens.clamp(1, tpm.max(1)), tpm)),
            ];
            for (what, units, per_minute) in books.into_iter().flatten() {
                if what == "tokens" {
                    tokens_booked = tokens_booked.max(units);
                }
                let unit_us = 60_000_000.0 / per_minute as f64;
                let cost = (units as f64 * unit_us).ceil() as i64;
                // A call goes when its booked start is due. A quarter of a second's share may
                // start at once: the rest of the provider's own bucket is slack for calls that
                // reach it bunched (a worker held up, a network hiccup), so that none is a 429.
                let burst = ((per_minute as f64 / 240.0).floor() - 1.0).max(0.0) * unit_us;
                let at = now();
                let key = format!("{scope}:{what}:us");
                if let Ok(tat) = self.ledger.book(&key, at, cost).await {
                    until = until.max(tat - cost - burst.ceil() as i64);
                    booked.push((key, cost));
                }
            }
        }
        let wait = until - now();
        if wait <= 0 {
            return Ok(Booked { tokens: tokens_booked, waited: std::time::Duration::ZERO });
        }
        let wait = std::time::Duration::from_micros(wait as u64);
        if wait > MAX_TURN_WAIT {
            // Given back: the calls behind it keep their turns.
            for (key, cost) in booked {
                let _ = self.ledger.book(&key, now(), -cost).await;
            }
            return Err(wait);
        }
        tokio::time::sleep(wait).await;
        Ok(Booked { tokens: tokens_booked, waited: wait })
    }

    /// Corrects a call's booking by what the provider said it used: the tokens it did not use
    /// are given back (calls behind it go sooner), those past its booking are booked.
    pub async fn settle(&self, model: &str, booked: &Booked, used: u64) {
        if booked.tokens == used {
            return;
        }
        for (scope, l) in self.applying(model) {
            let Some(tpm) = l.tokens_per_minute else { continue };
            let unit_us = 60_000_000.0 / tpm as f64;
            let used = used.min(tpm.max(1));
            let delta = ((used as f64 - booked.tokens as f64) * unit_us).round() as i64;
            if delta != 0 {
                let key = format!("{scope}:tokens:us");
                let _ = self.ledger.book(&key, chrono::Utc::now().timestamp_micros(), delta).await;
            }
        }
    }
}

/// A run's budget as each door keeps it: its dollars, and the ledger every worker of the run
/// adds its calls' costs to (the run index).
#[derive(Clone)]
pub struct RunBudget {
    pub max_usd: f64,
    pub ledger: std::sync::Arc<dyn SpendLedger>,
}

impl std::fmt::Debug for RunBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBudget").field("max_usd", &self.max_usd).finish_non_exhaustive()
    }
}

/// The run's call count a door adds to ([`CallLedger`]).
#[derive(Clone)]
pub struct Usage(pub std::sync::Arc<dyn CallLedger>);

impl std::fmt::Debug for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Usage")
    }
}

/// Every call of a run and what it cost, counted as the door sees them (the run index's
/// `add_calls`): what the run's calls were, whether their tasks end with a result or not.
#[async_trait]
pub trait CallLedger: Send + Sync {
    /// Adds `calls` calls and `usd` dollars.
    async fn add(&self, calls: u64, usd: f64) -> Result<()>;
    /// Adds `calls` calls that were rate limited (`RunIndex::add_throttled`).
    async fn throttled(&self, _calls: u64) -> Result<()> {
        Ok(())
    }
}

/// What a run's model calls spent, shared by every worker of the run.
#[async_trait]
pub trait SpendLedger: Send + Sync {
    /// The run's spend so far.
    async fn spent(&self) -> Result<f64>;
    /// Adds one call's cost; returns the run's spend.
    async fn add(&self, usd: f64) -> Result<f64>;
    /// Adds to what calls in flight hold (negative: gives it back); returns the run's spend and
    /// what is held. A ledger that holds nothing says so (`0` held).
    async fn hold(&self, _usd: f64) -> Result<(f64, f64)> {
        Ok((self.spent().await?, 0.0))
    }
}

/// Calls answered from a recording instead of the provider.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The task's `cassette.jsonl` as recorded.
    pub cassette: Vec<u8>,
    /// `false`: a call the recording does not have goes to the provider (`replay-or-live`);
    /// `true`: it is refused and the task ends `replay_miss`.
    pub strict: bool,
}

/// Where an agent reaches the gateway from, which decides the address in its base URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A process on this machine (a `command` agent, a workspace, the worker's own container).
    Host,
    /// A container on the task network, which reaches the host at this address.
    Container(std::net::Ipv4Addr),
}

/// One model call through the gateway, as the worker records it: usage from the provider's own
/// fields, never the agent's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// 1-based, in the order the calls arrived.
    pub call: u32,
    /// `openai.chat`, `openai.responses`, `anthropic.messages`.
    pub wire: String,
    /// The model the request named.
    pub model: String,
    pub stream: bool,
    /// The HTTP status the agent got.
    pub status: u16,
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// `None`: no price is known for the model (or the provider reported no usage).
    pub cost_usd: Option<f64>,
    /// Milliseconds from the request to the answer's last byte.
    pub latency_ms: u64,
    /// Milliseconds to the answer's first byte.
    pub ttfb_ms: u64,
    /// Why the model stopped, in the provider's words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub finish_reason: String,
    /// The request's last message (redacted, cut to a few KiB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// The answer's text (redacted, cut to a few KiB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub answer: String,
    /// Answered from the recording, not the provider.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Why the gateway refused the call (a spent budget, a replay miss, an unknown price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// Its tokens and cost are what it could have cost, not the provider's word: its usage was
    /// unreadable under a limit, or it was still running when its task ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_cap: bool,
    /// Milliseconds the gateway waited for the provider before it answered (its rate limits,
    /// its outages): not the model's time, not the agent's.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub waited_ms: u64,
    /// Times the gateway asked the provider again before this answer.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub retries: u32,
}

/// Why a call was refused, and what that means for the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// The task's tokens are spent (`limit_tokens`).
    Tokens { reason: String },
    /// The task's dollars are spent, or the model's price is unknown under a cost limit
    /// (`limit_cost`).
    Cost { reason: String },
    /// Strict replay found no recording of the call (`replay_miss`).
    ReplayMiss { reason: String },
    /// The provider could not be reached, or the call is not one the gateway serves.
    Upstream { reason: String },
    /// The run's budget (`max_run_cost_usd`) was spent by the run's calls: the task is cut, as
    /// the infrastructure's (`infra_failure`), never the agent's.
    RunBudget { reason: String },
    /// The provider stayed unavailable (rate limited, overloaded, failing, unreachable) through
    /// the gateway's retries: the task's `infra_failure`, never the agent's error.
    Unavailable { reason: String },
    /// The call asks what the run does not allow: another model, a tool or store the provider
    /// runs itself (`agent.upstream.models`, `agent.upstream.allow`).
    Policy { reason: String },
    /// The run's rate limits have no turn for the call within a minute: the agent hears a 429
    /// (with when to try again), as it would from the provider, and may retry.
    RateLimited { reason: String },
}

impl Refusal {
    pub fn reason(&self) -> &str {
        match self {
            Refusal::Tokens { reason }
            | Refusal::Cost { reason }
            | Refusal::ReplayMiss { reason }
            | Refusal::Upstream { reason }
            | Refusal::Unavailable { reason }
            | Refusal::RunBudget { reason }
            | Refusal::Policy { reason }
            | Refusal::RateLimited { reason } => reason,
        }
    }
}

/// A call to the gateway from inside the worker's own process (the built-in `llm` agent): the
/// same door, the same metering, budget and recording, without a TCP connection.
#[async_trait]
pub trait LocalCall: Send + Sync {
    /// Posts `body` to `path` (`/v1/chat/completions`, `/v1/messages`) with `headers` (the
    /// token among them); the answer's status, headers and body.
    async fn post(&self, path: &str, headers: Vec<(String, String)>, body: Vec<u8>) -> Result<Posted>;
}

/// What a local call got back.
#[derive(Debug, Clone)]
pub struct Posted {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A cloud's model service reached with the cloud's own credentials instead of a key (Amazon
/// Bedrock). It takes a call on Anthropic's Messages wire or OpenAI's chat completions wire and
/// answers on the same wire (streamed as server-sent events when asked), so the gateway meters, budgets, records and replays it as
/// any other. Its one implementation lives in the crate that owns the cloud's SDK.
#[async_trait]
pub trait ModelHost: Send + Sync {
    /// What it is and where (`bedrock at bedrock-runtime.us-east-1.amazonaws.com`), for errors.
    fn describe(&self) -> String;
    /// Sends one call; `Err` when the service could not be reached or did not answer in time.
    async fn invoke(&self, call: HostCall) -> std::result::Result<HostAnswer, HostFailure>;
}

/// The wire a [`ModelHost`] call comes in on and its answer goes back on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostWire {
    /// Anthropic Messages.
    Messages,
    /// OpenAI chat completions.
    Chat,
}

/// One call to a [`ModelHost`].
#[derive(Debug, Clone)]
pub struct HostCall {
    pub wire: HostWire,
    /// The service's id of the model (a Bedrock model id or inference profile).
    pub model_id: String,
    /// The request as the gateway forwards it (its `model` and `stream` included).
    pub body: Vec<u8>,
    pub stream: bool,
    /// The `anthropic-beta` flags the run lets through.
    pub betas: Vec<String>,
    /// How long the answer may take to start.
    pub timeout: std::time::Duration,
}

/// A [`ModelHost`]'s answer: a status, a content type, a pause asked before a retry, and the
/// body as it arrives (chunks, or why it broke off).
#[derive(Debug)]
pub struct HostAnswer {
    pub status: u16,
    /// `application/json`, or `text/event-stream` for a streamed answer.
    pub content_type: String,
    pub retry_after: Option<std::time::Duration>,
    pub body: tokio::sync::mpsc::Receiver<std::result::Result<Vec<u8>, String>>,
}

impl HostAnswer {
    /// A whole answer of `body`.
    pub fn whole(status: u16, body: Vec<u8>) -> HostAnswer {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let _ = tx.try_send(Ok(body));
        HostAnswer { status, content_type: "application/json".into(), retry_after: None, body: rx }
    }
}

/// Why a host could not be reached, from the innermost error's words: `DNS: …`, `TLS: …` or
/// `connect: …`, so that an unreachable provider is never read as one that answered.
pub fn reach_failure(cause: &str) -> String {
    let c = cause.trim();
    let l = c.to_ascii_lowercase();
    let kind = if ["dns", "lookup", "name or service not known", "no such host", "nodename nor servname", "resolve"]
        .iter()
        .any(|k| l.contains(k))
    {
        "DNS"
    } else if ["certificate", "tls", "ssl", "handshake"].iter().any(|k| l.contains(k)) {
        "TLS"
    } else {
        "connect"
    };
    format!("{kind}: {}", if c.is_empty() { "no detail" } else { c })
}

/// Why a [`ModelHost`] gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostFailure {
    /// It could not be reached (connection, DNS, TLS, credentials not found).
    Connect(String),
    /// The answer did not start in time.
    Timeout,
}

/// The worker's model gateway: opens a door per task attempt.
#[async_trait]
pub trait ModelGateway: Send + Sync {
    /// A door for one task attempt; calls through it are answered until it is closed.
    async fn open(&self, spec: DoorSpec) -> Result<Box<dyn Door>>;
    /// The gateway called from this process, when it can be.
    fn local(&self) -> Option<std::sync::Arc<dyn LocalCall>> {
        None
    }
    /// Makes the gateway reachable from containers at `ip` (the task network's host address):
    /// the port it listens on there. Idempotent.
    async fn listen_on(&self, ip: std::net::Ipv4Addr) -> Result<u16>;
}

/// One task attempt's door: its token, its base URLs, its calls as they end.
#[async_trait]
pub trait Door: Send {
    /// The bearer token the agent sends as its API key; refused once the door is closed and by
    /// every other door.
    fn token(&self) -> &Secret;
    /// The OpenAI base URL (`…/v1`) and the Anthropic one (its root) an agent reaching the
    /// gateway from `reach` is given.
    fn base_urls(&self, reach: Reach) -> Result<(String, String)>;
    /// The calls that ended, in the order they ended, as they end.
    fn calls(&self) -> std::sync::Arc<CallQueue>;
    /// Calls that arrived and have not ended yet (an answer still streaming).
    fn in_flight(&self) -> u32;
    /// Closes the door (the token stops working at once) and returns the task's calls as
    /// cassette lines (redacted).
    fn close(&mut self) -> Vec<u8>;
    /// Waits until what its calls wrote to the run's ledgers (spend, budget held and given
    /// back, calls counted) is written: a task's worker may end right after.
    async fn settle(&mut self) {}
}

/// The calls of a door that ended and were not taken yet: the gateway puts them, the worker
/// takes them (the first one with a given property, or any), and can wait for the next.
#[derive(Debug, Default)]
pub struct CallQueue {
    calls: std::sync::Mutex<std::collections::VecDeque<ModelCall>>,
    arrived: tokio::sync::Notify,
}

impl CallQueue {
    /// A call ended.
    pub fn push(&self, call: ModelCall) {
        self.calls.lock().expect("not poisoned").push_back(call);
        self.arrived.notify_one();
    }

    /// Takes the first call `which` accepts.
    pub fn take(&self, which: impl Fn(&ModelCall) -> bool) -> Option<ModelCall> {
        let mut q = self.calls.lock().expect("not poisoned");
        let at = q.iter().position(which)?;
        q.remove(at)
    }

    /// Resolves once a call was pushed since the last wait (at once if one was meanwhile).
    pub async fn pushed(&self) {
        self.arrived.notified().await
    }
}

/// The variables an agent gets to reach its model through a door: the token as every
/// provider's key, and the base URLs under the names the providers' SDKs and the popular agents
/// read.
pub fn door_env(token: &Secret, openai_base: &str, anthropic_base: &str) -> Vec<(String, String)> {
    let t = token.expose().to_string();
    vec![
        ("OPENAI_API_KEY".into(), t.clone()),
        ("OPENAI_BASE_URL".into(), openai_base.into()),
        ("OPENAI_API_BASE".into(), openai_base.into()),
        ("ANTHROPIC_API_KEY".into(), t.clone()),
        ("ANTHROPIC_AUTH_TOKEN".into(), t.clone()),
        ("ANTHROPIC_BASE_URL".into(), anthropic_base.into()),
        ("AGENTEVAL_GATEWAY_TOKEN".into(), t),
        ("AGENTEVAL_GATEWAY_URL".into(), openai_base.into()),
    ]
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ledger in memory, as the run index keeps one: a time per key, moved in one step.
    #[derive(Default)]
    struct Memory(std::sync::Mutex<std::collections::HashMap<String, i64>>);

    #[async_trait]
    impl RateLedger for Memory {
        async fn book(&self, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64> {
            let mut m = self.0.lock().unwrap();
            let t = m.entry(key.to_string()).or_insert(0);
            *t = (*t).max(now_ms) + cost_ms;
            Ok(*t)
        }
    }

    #[tokio::test]
    async fn calls_go_a_quarter_of_a_seconds_share_at_once_then_evenly() {
        // 600 a minute: 100 ms a request, a second's share of 10, two at once.
        let limit = crate::config::RateLimit { model: None, requests_per_minute: Some(600), tokens_per_minute: None };
        let governor = RateGovernor { limits: vec![limit], ledger: std::sync::Arc::new(Memory::default()) };
        let waits: Vec<std::time::Duration> =
            booked_together(&governor, 4).await.into_iter().map(|w| w.round_to_10ms()).collect();
        assert_eq!(waits[..2], [std::time::Duration::ZERO; 2], "{waits:?}");
        assert!(waits[2] >= std::time::Duration::from_millis(50), "{waits:?}");
        assert!(waits[3] >= waits[2] + std::time::Duration::from_millis(50), "{waits:?}");
    }

    /// One call asking for far more than a limit allows books at most a minute of it, and is
    /// corrected by what it used; a call whose turn is more than a minute away is refused and
    /// gives back what it booked.
    #[tokio::test]
    async fn a_huge_ask_books_a_minute_at_most_and_is_corrected_by_its_usage() {
        let limit =
            crate::config::RateLimit { model: None, requests_per_minute: None, tokens_per_minute: Some(6_000_000) };
        let ledger = std::sync::Arc::new(Memory::default());
        let governor = RateGovernor { limits: vec![limit], ledger: ledger.clone() };
        let booked_until = || ledger.0.lock().unwrap().get("*0:tokens:us").copied().unwrap_or(0);
        let start = chrono::Utc::now().timestamp_micros();
        let huge = governor.wait_turn("m", 1_000_000_000_000).await.expect("the first call goes at once");
        assert_eq!(huge.tokens, 6_000_000, "a minute of the limit, not a year");
        assert!(booked_until() - start <= 61_000_000, "booked until {} s on", (booked_until() - start) / 1_000_000);
        // Its answer used 600 tokens: the rest is given back, so the next call goes at once.
        governor.settle("m", &huge, 600).await;
        assert!(booked_until() - start < 1_000_000, "corrected by its usage");
        let next = governor.wait_turn("m", 100).await.expect("a turn");
        assert!(next.waited < std::time::Duration::from_secs(1), "{next:?}");
        // Two minutes booked ahead: the next call is refused, and what it booked is given back.
        let ahead = ledger.book("*0:tokens:us", chrono::Utc::now().timestamp_micros(), 120_000_000).await.unwrap();
        let refused = governor.wait_turn("m", 100).await;
        assert!(refused.is_err_and(|w| w > MAX_TURN_WAIT), "refused, not made to wait two minutes");
        assert_eq!(booked_until(), ahead, "what it booked is given back");
    }

    /// `n` calls booked one after the other, each waiting its turn at once.
    async fn booked_together(g: &RateGovernor, n: usize) -> Vec<std::time::Duration> {
        let mut handles = Vec::new();
        for _ in 0..n {
            let g = g.clone();
            handles
                .push(tokio::spawn(async move { g.wait_turn("m", 1).await.expect("a turn within a minute").waited }));
            tokio::task::yield_now().await;
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }

    trait Round {
        fn round_to_10ms(self) -> Self;
    }

    impl Round for std::time::Duration {
        fn round_to_10ms(self) -> Self {
            std::time::Duration::from_millis((self.as_millis() as u64 / 10) * 10)
        }
    }
}
