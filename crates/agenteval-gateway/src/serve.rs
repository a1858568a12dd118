//! The gateway's HTTP side: the routes, a call from its token to its answer (refused, replayed
//! or forwarded and streamed back as it arrives), and what each call leaves: its record for the
//! worker and its cassette line.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use agenteval_core::gateway::{ModelCall, Refusal};
use agenteval_llm::{Usage, cost};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::Inner;
use crate::cassette::{self, Entry, MAX_RECORDED_BYTES};
use crate::door::{Hold, Session};
use crate::wire::{self, Heard, Listener, Wire};

/// Headers of a provider's answer that are the connection's, not the answer's.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

/// Largest request body accepted: long agent contexts, not unbounded ones.
const MAX_REQUEST_BYTES: usize = 64 << 20;

pub(crate) fn router(inner: Arc<Inner>) -> axum::Router {
    axum::Router::new()
        .route("/v1/chat/completions", post(|s, h, b| call(s, h, b, Wire::Chat)))
        .route("/v1/responses", post(|s, h, b| call(s, h, b, Wire::Responses)))
        .route("/v1/messages", post(|s, h, b| call(s, h, b, Wire::Messages)))
        .route("/v1/models", get(models))
        .fallback(|| async {
            answer(
                StatusCode::NOT_FOUND,
                &wire::error_body(
                    Wire::Chat,
                    "not_found",
                    "the agenteval gateway serves /v1/chat/completions, /v1/responses, /v1/messages and /v1/models",
                ),
            )
        })
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(inner)
}

/// The routes called in this process: a request through the same router, no connection.
pub(crate) struct Local(pub axum::Router);

#[async_trait::async_trait]
impl agenteval_core::gateway::LocalCall for Local {
    async fn post(
        &self,
        path: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> agenteval_core::Result<agenteval_core::gateway::Posted> {
        use tower::ServiceExt as _;
        let mut req = axum::http::Request::builder().method("POST").uri(path);
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Body::from(body))
            .map_err(|e| agenteval_core::Error::invalid(format!("a local call to the gateway: {e}")))?;
        let resp = self.0.clone().oneshot(req).await.expect("the router's error is Infallible");
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.to_string(), v.to_string())))
            .collect();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.map_err(|e| {
            agenteval_core::Error::new(
                agenteval_core::ErrorKind::Transient,
                format!("the gateway's answer broke off: {e}"),
            )
        })?;
        Ok(agenteval_core::gateway::Posted { status, headers, body: body.to_vec() })
    }
}

fn answer(status: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("a valid response")
}

/// The token a call carries: `Authorization: Bearer …` (OpenAI's SDKs, Claude Code's
/// `ANTHROPIC_AUTH_TOKEN`) or `x-api-key` (Anthropic's).
fn token_of(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok())).map(str::trim)
}

fn session_of(inner: &Inner, headers: &HeaderMap) -> Option<Arc<Session>> {
    let token = token_of(headers)?;
    inner.doors.lock().expect("not poisoned").get(token).cloned()
}

fn unauthorized(wire: Wire) -> Response<Body> {
    let kind = if wire.is_anthropic() { "authentication_error" } else { "invalid_api_key" };
    answer(
        StatusCode::UNAUTHORIZED,
        &wire::error_body(wire, kind, "agenteval gateway: this key is not a token of a running task"),
    )
}

/// What the gateway does with a call once it has arrived.
enum Plan {
    Refuse(Refusal),
    Replay(Box<Entry>),
    Forward,
}

async fn call(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes, wire: Wire) -> Response<Body> {
    let started = Instant::now();
    let Some(session) = session_of(&inner, &headers) else { return unauthorized(wire) };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return answer(
                StatusCode::BAD_REQUEST,
                &wire::error_body(wire, "invalid_request_error", "the request body is not a JSON object"),
            );
        }
    };
    let asked = wire::asked(wire, &request);
    let policy = crate::policy::refusal(wire, &request, &inner.config.allow, &session.models);
    let needs_fingerprint = session.record || session.state.lock().expect("not poisoned").replay.is_some();
    let fingerprint = if needs_fingerprint { cassette::fingerprint(wire.name(), &request) } else { String::new() };
    let price = inner.config.price(wire, &asked.model, session.models.first().map(String::as_str));
    let input = crate::policy::input_estimate(body.len());
    let requested = crate::policy::requested_output(wire, &request);
    let choices = crate::policy::choices(&request);
    let (n, plan, hold) = {
        let mut s = session.state.lock().expect("not poisoned");
        if s.closed {
            drop(s);
            return unauthorized(wire);
        }
        let n = s.arrived;
        s.arrived += 1;
        s.in_flight += 1;
        let arrival =
            Arrival { wire, asked: &asked, policy, price, input, requested, choices, fingerprint: &fingerprint };
        let (plan, hold) = plan_of(&session, &mut s, n, &arrival, &request);
        (n, plan, hold)
    };
    // Counted for the run as it arrives: a task cancelled before its result is written has
    // made this call all the same.
    session.count_calls(1, 0.0);
    // Under any budget (the task's or the run's) an answer whose usage cannot be read counts at
    // what it could cost, never at nothing.
    let limited = session.max_tokens.is_some() || session.max_cost_usd.is_some() || session.run_budget.is_some();
    let (hold, cap) = match hold {
        Some((h, cap)) => (Some(h), cap),
        None => (None, None),
    };
    let record = Record {
        session: session.clone(),
        wire,
        n,
        fingerprint,
        asked,
        price,
        started,
        hold,
        cap,
        limited,
        waited: Duration::ZERO,
        retries: 0,
        queued: Duration::ZERO,
        booked: None,
    };
    match plan {
        Plan::Refuse(why) => record.refuse(why),
        Plan::Replay(entry) => record.replay(*entry, &request),
        Plan::Forward => forward(&inner, &headers, body, request, record).await,
    }
}

/// A call as it arrives: what the plan for it is made from.
struct Arrival<'a> {
    wire: Wire,
    asked: &'a wire::Asked,
    /// Why the run does not allow it, if it does not.
    policy: Option<String>,
    price: Option<agenteval_llm::Price>,
    /// Its prompt's tokens as guessed.
    input: u64,
    /// The answer's length it asks, if it names one.
    requested: Option<u64>,
    /// How many answers it asks for (each billed at that length).
    choices: u64,
    fingerprint: &'a str,
}

/// What the gateway does with the `n`-th call of a door (refuse, replay, forward), and, for a
/// call it forwards, what that call holds of the budget and the length its answer is held to.
fn plan_of(
    session: &Session,
    s: &mut crate::door::State,
    n: u32,
    a: &Arrival<'_>,
    request: &Value,
) -> (Plan, Option<(Hold, Option<u64>)>) {
    let mut plan = if let Some(reason) = a.policy.clone() {
        Plan::Refuse(Refusal::Policy { reason })
    } else if let Some(max) = session.max_tokens.filter(|m| s.tokens.saturating_add(s.held_tokens) >= *m) {
        Plan::Refuse(Refusal::Tokens {
            reason: format!(
                "the task's tokens are spent: {} used, {} held by calls in flight, max_tokens {max}",
                s.tokens, s.held_tokens
            ),
        })
    } else if let Some(max) = session.max_cost_usd.filter(|m| s.cost + s.held_cost >= *m) {
        Plan::Refuse(Refusal::Cost {
            reason: format!(
                "the task's budget is spent: ${:.6} used, ${:.6} held by calls in flight, max_cost_usd ${max:.6}",
                s.cost, s.held_cost
            ),
        })
    } else if session.max_cost_usd.is_some() && a.price.is_none() {
        Plan::Refuse(Refusal::Cost {
            reason: format!(
                "no price is known for model `{}`, so the task's max_cost_usd cannot be kept: give its price in \
                 agent.upstream.prices",
                a.asked.model
            ),
        })
    } else {
        match s.replay.as_mut() {
            None => Plan::Forward,
            Some((r, strict)) => match r.find(n as usize, a.fingerprint, a.wire.name(), &a.asked.model) {
                Some(e) => Plan::Replay(Box::new(e)),
                None if *strict => {
                    let why = r.miss(n as usize, a.wire.name(), &a.asked.model, &session.redactor.redact_json(request));
                    Plan::Refuse(Refusal::ReplayMiss { reason: format!("task {}: {why}", session.task) })
                }
                None => Plan::Forward,
            },
        }
    };
    let mut hold = None;
    if matches!(plan, Plan::Forward) {
        match room(session, s, a.requested, a.choices, a.input, a.price) {
            Ok(Room { held, clamp }) => {
                let output = held.unwrap_or(0);
                let priced = |input_tokens| {
                    a.price.filter(|_| held.is_some()).map(|p| {
                        cost(
                            &p,
                            &Usage {
                                input_tokens,
                                output_tokens: output,
                                cached_input_tokens: 0,
                                cache_write_tokens: 0,
                            },
                        )
                    })
                };
                let h = Hold {
                    wire: a.wire.name(),
                    model: a.asked.model.clone(),
                    stream: a.asked.stream,
                    input: a.input,
                    output,
                    cost: priced(a.input),
                    // The prompt is billed as soon as the provider reads it: held with the answer.
                    held_cost: priced(a.input).unwrap_or(0.0),
                    reserved: 0.0,
                };
                s.held_tokens = s.held_tokens.saturating_add(h.tokens());
                s.held_cost += h.held_cost;
                s.holds.insert(n, h.clone());
                hold = Some((h, clamp));
            }
            Err(why) => plan = Plan::Refuse(why),
        }
    }
    (plan, hold)
}

/// An answer's length held for a call that names none: past what most models write at once, so
/// that calls without one can run side by side under a limit.
const UNNAMED_HOLD: u64 = 65_536;

/// The most of an answer booked under the run's rate limits, whatever the call asks: past what
/// any model writes at once (its usage then corrects the booking).
const MAX_BOOKED_OUTPUT: u64 = 128_000;

/// What a forwarded call's answer holds of the budget, and the length the forwarded call is held
/// to, so that with every call in flight at its most the task's limits hold: the tokens left after
/// what is spent and held (prompts included, each call's own as guessed), and the dollars left
/// likewise at the model's output price.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Room {
    /// Output tokens held: the length asked, else [`UNNAMED_HOLD`], never more than is left.
    /// `None`: no limit and no length asked (what it could cost is not known).
    held: Option<u64>,
    /// The length written into the forwarded call: what it asked, lowered to what is left; for a
    /// call that asked none, only when less than [`UNNAMED_HOLD`] is left (a larger number than
    /// a model allows would be refused by the provider).
    clamp: Option<u64>,
}

/// The [`Room`] of a call asking `choices` answers of `requested` tokens each now, with a
/// prompt of `input` tokens (as guessed); `Err` when nothing is left. Every choice is billed, so
/// the hold is all of them and each is held to its share of what is left; the prompt is billed
/// whatever the answer, so it is held too, and a prompt past what is left is refused.
fn room(
    session: &Session,
    s: &crate::door::State,
    requested: Option<u64>,
    choices: u64,
    input: u64,
    price: Option<agenteval_llm::Price>,
) -> Result<Room, Refusal> {
    let choices = choices.max(1);
    let mut left: Option<u64> = None;
    if let Some(max) = session.max_tokens {
        left = Some(max.saturating_sub(s.tokens.saturating_add(s.held_tokens).saturating_add(input)));
    }
    if let (Some(max), Some(p)) = (session.max_cost_usd, price) {
        let prompt = input as f64 * p.input_per_mtok / 1e6;
        let dollars = max - s.cost - s.held_cost - prompt;
        let out = if p.output_per_mtok > 0.0 {
            (dollars / (p.output_per_mtok / 1e6)).floor().max(0.0) as u64
        } else {
            u64::MAX
        };
        if dollars <= 0.0 || out == 0 {
            return Err(Refusal::Cost {
                reason: format!(
                    "the task's budget is spent: ${:.6} used, ${:.6} held by calls in flight, this call's prompt \
                     ${prompt:.6} (about {input} tokens), max_cost_usd ${max:.6}",
                    s.cost, s.held_cost
                ),
            });
        }
        left = Some(left.map_or(out, |l| l.min(out)));
    }
    let Some(left) = left else {
        // No limit of the task's: under the run's budget an answer that names no length is held
        // at [`UNNAMED_HOLD`] all the same, so that one whose usage cannot be read counts at it.
        let unnamed = session.run_budget.as_ref().map(|_| UNNAMED_HOLD);
        return Ok(Room { held: requested.or(unnamed).map(|r| r.saturating_mul(choices)), clamp: None });
    };
    let left = left / choices;
    if left == 0 {
        return Err(Refusal::Tokens {
            reason: format!(
                "the task's tokens are spent: no room is left for an answer (after this call's prompt of about \
                 {input} tokens) under max_tokens {}",
                session.max_tokens.unwrap_or(0)
            ),
        });
    }
    let each = requested.unwrap_or(UNNAMED_HOLD).min(left);
    let clamp = match requested {
        Some(_) => Some(each),
        None => (left < UNNAMED_HOLD).then_some(left),
    };
    Ok(Room { held: Some(each.saturating_mul(choices)), clamp })
}

/// A call in progress: what its record needs once it ends.
struct Record {
    session: Arc<Session>,
    wire: Wire,
    n: u32,
    fingerprint: String,
    asked: wire::Asked,
    price: Option<agenteval_llm::Price>,
    started: Instant,
    /// What it holds of the budget while it runs (a forwarded call).
    hold: Option<Hold>,
    /// The length written into the forwarded call, when it is held to one (see [`Room`]).
    cap: Option<u64>,
    /// The task has a token or cost limit: an answer whose usage cannot be read counts at its hold.
    limited: bool,
    /// How long the gateway waited for the provider (its retries), and how many it made.
    waited: Duration,
    retries: u32,
    /// How long the call waited its turn under the run's rate limits (not part of `waited`'s
    /// bound on retries).
    queued: Duration,
    /// What it booked of the run's rate limits, corrected by its usage when it ends.
    booked: Option<agenteval_core::gateway::Booked>,
}

impl Record {
    fn call(&self, status: u16, heard: &Heard, ttfb_ms: u64) -> ModelCall {
        let ok = (200..300).contains(&status);
        // Under a limit, an answer whose usage cannot be read counts at what it could cost.
        let at_cap = ok && heard.usage.is_none() && self.limited && self.hold.is_some();
        let (usage, known) = match (&self.hold, at_cap) {
            (Some(h), true) => (
                Usage { input_tokens: h.input, output_tokens: h.output, cached_input_tokens: 0, cache_write_tokens: 0 },
                true,
            ),
            _ => (heard.usage.unwrap_or_default(), heard.usage.is_some()),
        };
        ModelCall {
            call: self.n + 1,
            wire: self.wire.name().into(),
            model: self.asked.model.clone(),
            stream: self.asked.stream,
            status,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            // A failed call costs nothing; a successful one without usage or price is unknown.
            cost_usd: if ok { self.price.filter(|_| known).map(|p| cost(&p, &usage)) } else { Some(0.0) },
            latency_ms: self.started.elapsed().as_millis() as u64,
            ttfb_ms,
            finish_reason: heard.finish.clone(),
            prompt: self.session.redactor.redact(&self.asked.prompt),
            answer: self.session.redactor.redact(&heard.text),
            replayed: false,
            refused: None,
            at_cap,
            waited_ms: (self.waited + self.queued).as_millis() as u64,
            retries: self.retries,
        }
    }

    fn entry(&self, request: &Value, status: u16, heard: &Heard, ttfb_ms: u64) -> Entry {
        let usage = heard.usage.unwrap_or_default();
        Entry {
            call: self.n,
            fingerprint: self.fingerprint.clone(),
            wire: self.wire.name().into(),
            model: self.asked.model.clone(),
            request: self.session.redactor.redact_json(request),
            status,
            response: None,
            stream: None,
            truncated: false,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            usage_known: heard.usage.is_some(),
            ttfb_ms,
            latency_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// Corrects the call's booking under the run's rate limits by what it used (in the
    /// background: the answer is not held up for it).
    fn settle(&self, call: &ModelCall) {
        let (Some(rate), Some(booked)) = (self.session.rate.clone(), self.booked.clone()) else { return };
        let used = call.input_tokens.saturating_add(call.output_tokens);
        let model = self.asked.model.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { rate.settle(&model, &booked, used).await });
        }
    }

    fn refuse(self, why: Refusal) -> Response<Body> {
        let (status, kind) = match (&why, self.wire.is_anthropic()) {
            (Refusal::RateLimited { .. }, false) => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded"),
            (Refusal::RateLimited { .. }, true) => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
            (Refusal::Tokens { .. } | Refusal::Cost { .. } | Refusal::RunBudget { .. }, false) => {
                (StatusCode::TOO_MANY_REQUESTS, "insufficient_quota")
            }
            (Refusal::Tokens { .. } | Refusal::Cost { .. } | Refusal::RunBudget { .. }, true) => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
            }
            (_, false) => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            (_, true) => (StatusCode::BAD_REQUEST, "invalid_request_error"),
        };
        let message = format!("agenteval gateway: {}", why.reason());
        let mut call = self.call(status.as_u16(), &Heard::default(), 0);
        call.refused = Some(why);
        let body = wire::error_body(self.wire, kind, &message);
        // Not a model call: nothing is recorded to replay, the worker hears of it.
        self.session.ended(self.n, None, call);
        answer(status, &body)
    }

    fn replay(self, recorded: Entry, request: &Value) -> Response<Body> {
        let heard = Heard {
            usage: recorded.usage_known.then_some(Usage {
                input_tokens: recorded.input_tokens,
                output_tokens: recorded.output_tokens,
                cached_input_tokens: recorded.cached_input_tokens,
                cache_write_tokens: recorded.cache_write_tokens,
            }),
            finish: String::new(),
            text: String::new(),
        };
        let status = StatusCode::from_u16(recorded.status).unwrap_or(StatusCode::OK);
        let (bytes, content_type) = match (&recorded.stream, &recorded.response) {
            (Some(s), _) => (Bytes::from(s.clone()), "text/event-stream"),
            (None, Some(v)) => (Bytes::from(v.to_string()), "application/json"),
            (None, None) => (Bytes::new(), "application/json"),
        };
        // What the answer says is read again, as it was read live.
        let mut listener = Listener::new(self.wire, recorded.stream.is_some());
        listener.feed(&bytes);
        let read = listener.finish();
        let heard = Heard { usage: heard.usage, finish: read.finish, text: read.text };
        let mut call = self.call(recorded.status, &heard, 0);
        call.replayed = true;
        let entry = self.session.record.then(|| {
            let mut entry = self.entry(request, recorded.status, &heard, 0);
            entry.response = recorded.response;
            entry.stream = recorded.stream;
            entry
        });
        self.session.ended(self.n, entry, call);
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(bytes))
            .expect("a valid response")
    }
}

/// Forwards the call to its provider with the real key and streams the answer back as it
/// arrives, reading its usage on the way; the call's record is made when the answer ends
/// (read to its end even when the agent hangs up: the provider bills it).
async fn forward(
    inner: &Arc<Inner>,
    headers: &HeaderMap,
    raw: Bytes,
    request: Value,
    record: Record,
) -> Response<Body> {
    let wire = record.wire;
    if let Some(why) = reserve_run_budget(&record).await {
        return record.refuse(why);
    }
    let provider = if wire.is_anthropic() { &inner.config.anthropic } else { &inner.config.openai };
    let Some(provider) = provider else {
        let which = if wire.is_anthropic() { "anthropic" } else { "openai" };
        return record.refuse(Refusal::Upstream {
            reason: format!("no agent.upstream.{which} is configured: {} calls go nowhere", wire.name()),
        });
    };
    if provider.bedrock.is_some() && wire == Wire::Responses {
        return record.refuse(Refusal::Upstream {
            reason: "Amazon Bedrock serves chat completions and Anthropic Messages, not OpenAI's Responses: give the \
                     agent an `upstream.openai` or `upstream.azure` for it"
                .into(),
        });
    }
    // The agent's bytes as sent, unless the gateway must ask a stream for its usage or hold the
    // answer to what the budget has left.
    let mut body = request.clone();
    let mut changed = wire::ensure_stream_usage(wire, &mut body);
    // Azure's v1 API and its Responses name the deployment as the model; the agent's model stays
    // what is priced and recorded.
    let deployment = provider.azure.as_ref().map(|a| a.deployment(&record.asked.model).to_string());
    if let Some(d) = &deployment
        && body.get("model").and_then(Value::as_str) != Some(d.as_str())
        && let Some(o) = body.as_object_mut()
    {
        o.insert("model".into(), Value::String(d.clone()));
        changed = true;
    }
    if let Some(cap) = record.cap {
        changed |= crate::policy::clamp_output(wire, &mut body, cap);
    }
    let sent = if changed { Bytes::from(serde_json::to_vec(&body).expect("JSON serializes")) } else { raw };
    // The run's rate limits, booked across its workers: the call waits its turn (the wait is
    // the task's, never the agent's time to the model).
    let record = match wait_turn(record, &body, sent.len()).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let sending = Sending { inner, provider, wire, headers, sent, deployment: deployment.as_deref() };
    let (answered, record) = match sending.send(record).await {
        Ok(answered) => answered,
        Err(refused) => return refused,
    };
    let Answer { status, headers: passed, streamed, body, .. } = answered;
    // A provider's error may quote the key it was given: read whole (bounded) and scrubbed.
    let upstream: Upstream = if !(200..300).contains(&status) && !streamed {
        let scrubbed = scrubbed_error(body, provider.key.as_ref(), &record.session).await;
        Box::pin(futures::stream::once(async move { Ok(Bytes::from(scrubbed)) }))
    } else {
        body
    };
    let listening = Listening {
        listener: Listener::new(wire, streamed),
        kept: Vec::new(),
        truncated: false,
        ttfb: None,
        record,
        request,
        status,
        streamed,
    };
    let tee = Tee { inner: upstream, listening: Some(listening) };
    let mut out = Response::builder().status(status);
    for (name, value) in passed {
        out = out.header(name, value);
    }
    if streamed {
        out = out.header(header::CACHE_CONTROL, "no-cache");
    }
    out.body(Body::from_stream(tee)).expect("a valid response")
}

/// A provider's answer, from its HTTP API or its cloud's model host: what the gateway passes on.
struct Answer {
    status: u16,
    /// The provider's own headers (`retry-after`, rate limits, request ids), but those of the
    /// connection, which are the gateway's to set.
    headers: Vec<(header::HeaderName, HeaderValue)>,
    /// Server-sent events, passed on as they arrive.
    streamed: bool,
    /// The pause the provider asked for before asking again.
    retry_after: Option<Duration>,
    body: Upstream,
}

impl Answer {
    fn of_http(resp: reqwest::Response) -> Answer {
        use futures::TryStreamExt as _;
        let content_type = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let streamed = content_type.is_some_and(|v| v.starts_with("text/event-stream"));
        let headers = resp
            .headers()
            .iter()
            .filter(|(name, _)| !HOP_BY_HOP.contains(&name.as_str()))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        Answer {
            status: resp.status().as_u16(),
            retry_after: retry_after(resp.headers()),
            headers,
            streamed,
            body: Box::pin(resp.bytes_stream().map_err(|e| e.to_string())),
        }
    }

    fn of_host(a: agenteval_core::gateway::HostAnswer) -> Answer {
        let streamed = a.content_type.starts_with("text/event-stream");
        let content_type =
            HeaderValue::from_str(&a.content_type).unwrap_or(HeaderValue::from_static("application/json"));
        let body = futures::stream::unfold(a.body, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk.map(Bytes::from), rx))
        });
        Answer {
            status: a.status,
            headers: vec![(header::CONTENT_TYPE, content_type)],
            streamed,
            retry_after: a.retry_after.map(|d| d.min(Duration::from_secs(60))),
            body: Box::pin(body),
        }
    }
}

/// Why a provider gave no answer.
enum NoAnswer {
    Connect(String),
    Timeout,
    Failed(String),
}

/// Books the call in the run's rate limits and waits its turn: the prompt guessed from its
/// size, and the most the answer may be (as the call asks it, `max_tokens`,
/// `max_completion_tokens`, `max_output_tokens`, or as it is held to), every choice of it. A
/// task's calls book one at a time. A call whose turn is more than a minute away is refused
/// (`Err`: the agent's 429).
async fn wait_turn(mut record: Record, body: &Value, sent_bytes: usize) -> std::result::Result<Record, Response<Body>> {
    let Some(rate) = record.session.rate.clone() else { return Ok(record) };
    let asked_most = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64));
    // Booked at no more than any model writes at once: the answer's actual usage corrects it.
    let each = record.cap.or(asked_most).unwrap_or(0).min(MAX_BOOKED_OUTPUT);
    let tokens = sent_bytes as u64 / 4 + each.saturating_mul(crate::policy::choices(body));
    // Fair between tasks: a task's calls book one after the other, each once the one before
    // it has had its turn, so the other tasks' calls book between them.
    let session = record.session.clone();
    let _one_at_a_time = session.turn.lock().await;
    match rate.wait_turn(&record.asked.model, tokens).await {
        Ok(booked) => {
            if booked.waited >= HELD_BACK {
                session.count_throttled();
            }
            record.queued += booked.waited;
            record.booked = Some(booked);
            Ok(record)
        }
        Err(wait) => {
            session.count_throttled();
            Err(record.refuse(Refusal::RateLimited {
            reason: format!(
                "the run's rate limits (agent.upstream.rate_limits) have no turn for this call for {} s; try again later",
                wait.as_secs()
            ),
        }))
        }
    }
}

/// How long a call waits for the run's calls in flight to end when what they hold leaves no
/// room for it; past that it goes if the budget is not spent (a worker that died holding some
/// never gives it back).
const RUN_BUDGET_WAIT: Duration = Duration::from_secs(20);

/// What a call holds of the run's budget until it is kept by the call's record or given back:
/// a call dropped while it waits (its agent gone) gives it back too.
struct HeldInLedger {
    session: Arc<Session>,
    usd: f64,
}

impl HeldInLedger {
    /// Kept: the call's end gives it back.
    fn keep(mut self) -> f64 {
        std::mem::take(&mut self.usd)
    }
}

impl Drop for HeldInLedger {
    fn drop(&mut self) {
        self.session.release(self.usd);
    }
}

/// Holds what the call could cost in the run's ledger, which every worker of the run reads
/// before its next call, so that calls in flight on many workers at once cannot together pass a
/// budget that has room for fewer: a call goes when the run's spend and what calls in flight
/// hold leave room for it, or when no other call is in flight (the run then goes over by this
/// call at most); else it waits for them to end. It is refused once the run's spend reaches
/// the budget. The call's end gives what it held back (`Session::ended`).
async fn reserve_run_budget(record: &Record) -> Option<Refusal> {
    let session = &record.session;
    let budget = session.run_budget.as_ref()?;
    let refusal = |spent: f64| Refusal::RunBudget {
        reason: format!(
            "the run's budget is spent (max_run_cost_usd ${:.4}; its calls spent ${spent:.4})",
            budget.max_usd
        ),
    };
    let cost = record.hold.as_ref().and_then(|h| h.cost).filter(|c| c.is_finite() && *c > 0.0);
    let spent_alone = || async {
        let spent = budget.ledger.spent().await.unwrap_or(0.0);
        (spent >= budget.max_usd).then(|| refusal(spent))
    };
    let Some(cost) = cost else { return spent_alone().await };
    let waited_from = Instant::now();
    loop {
        // Given back on every way out but the call's keeping it, cancellation included.
        let held_here = HeldInLedger { session: session.clone(), usd: cost };
        let (spent, held) = match budget.ledger.hold(cost).await {
            Ok(t) => t,
            // A ledger that cannot be written: the call goes as before, its cost added as it ends.
            Err(e) => {
                let _ = held_here.keep();
                tracing::warn!("cannot hold a call's cost in the run's ledger: {e}");
                return spent_alone().await;
            }
        };
        if spent >= budget.max_usd {
            return Some(refusal(spent));
        }
        let others = held - cost;
        if spent + held <= budget.max_usd || others <= 1e-12 || waited_from.elapsed() >= RUN_BUDGET_WAIT {
            let mut s = session.state.lock().expect("not poisoned");
            // The door closed meanwhile and counted the call at its hold: nothing is kept.
            if let Some(h) = s.holds.get_mut(&record.n) {
                h.reserved = held_here.keep();
            }
            return None;
        }
        // Given back before the next try, so that it does not count itself among the others.
        let _ = budget.ledger.hold(-held_here.keep()).await;
        if session.state.lock().expect("not poisoned").closed {
            return Some(refusal(spent));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A call on its way to the provider.
struct Sending<'a> {
    inner: &'a Arc<Inner>,
    provider: &'a crate::Provider,
    wire: Wire,
    headers: &'a HeaderMap,
    sent: Bytes,
    deployment: Option<&'a str>,
}

impl Sending<'_> {
    /// Sends the call, asking again while the provider refuses it for now (for an agent the
    /// gateway retries for), waiting as it asks, within the bounds; the answer, or the response
    /// the agent gets when the provider stayed unavailable or unreachable.
    async fn send(&self, mut record: Record) -> std::result::Result<(Answer, Record), Response<Body>> {
        let (provider, wire) = (self.provider, self.wire);
        loop {
            let sent_at = self.once(&record).await;
            if sent_at.as_ref().is_ok_and(|a| THROTTLED.contains(&a.status)) {
                record.session.count_throttled();
            }
            let pause = match &sent_at {
                Ok(a) if record.session.retry && RETRIED.contains(&a.status) => {
                    Some(a.retry_after.unwrap_or_else(|| backoff(record.retries)))
                }
                Err(NoAnswer::Connect(_)) if record.session.retry => Some(backoff(record.retries)),
                _ => None,
            };
            match pause {
                Some(p) if record.retries + 1 < provider.max_attempts && record.waited + p <= MAX_WAIT => {
                    tokio::time::sleep(p).await;
                    record.waited += p;
                    record.retries += 1;
                }
                // Asked again as long as the bound allows and still unavailable: the
                // infrastructure's.
                Some(_) => {
                    return Err(match &sent_at {
                        // Never reached: no status to report, and none is made up.
                        Err(e) => unreachable(record, provider, wire, e),
                        Ok(_) => unavailable(record, wire, sent_at),
                    });
                }
                None => {
                    return match sent_at {
                        Ok(a) => Ok((a, record)),
                        Err(e) => Err(unreachable(record, provider, wire, &e)),
                    };
                }
            }
        }
    }

    /// One try: to the provider's HTTP API, or to the cloud's model host serving its wire.
    async fn once(&self, record: &Record) -> std::result::Result<Answer, NoAnswer> {
        let provider = self.provider;
        if let Some(bedrock) = &provider.bedrock {
            let Some(host) = &bedrock.host else {
                return Err(NoAnswer::Failed("this build of agenteval has no Amazon Bedrock client".into()));
            };
            let betas = self
                .headers
                .get("anthropic-beta")
                .and_then(|v| v.to_str().ok())
                .and_then(|b| crate::policy::betas(b, &self.inner.config.allow))
                .map(|b| b.split(',').map(|f| f.trim().to_string()).filter(|f| !f.is_empty()).collect())
                .unwrap_or_default();
            let call = agenteval_core::gateway::HostCall {
                wire: match self.wire {
                    Wire::Messages => agenteval_core::gateway::HostWire::Messages,
                    _ => agenteval_core::gateway::HostWire::Chat,
                },
                model_id: bedrock.model_id(&record.asked.model).to_string(),
                body: self.sent.to_vec(),
                stream: record.asked.stream,
                betas,
                timeout: provider.timeout,
            };
            return match host.invoke(call).await {
                Ok(a) => Ok(Answer::of_host(a)),
                Err(agenteval_core::gateway::HostFailure::Timeout) => Err(NoAnswer::Timeout),
                Err(agenteval_core::gateway::HostFailure::Connect(why)) => Err(NoAnswer::Connect(why)),
            };
        }
        let req = provider_request(self.inner, provider, self.wire, self.headers, self.sent.clone(), self.deployment);
        match req.send().await {
            Ok(r) => Ok(Answer::of_http(r)),
            Err(e) if e.is_timeout() => Err(NoAnswer::Timeout),
            Err(e) if e.is_connect() => Err(NoAnswer::Connect(agenteval_core::gateway::reach_failure(&innermost(&e)))),
            Err(e) => Err(NoAnswer::Failed(format!("the request failed: {}", innermost(&e)))),
        }
    }
}

/// The innermost error of a chain in its own words (`failed to lookup address information: …`),
/// with no URL or key in it (reqwest's outer errors name the URL; the key is a header).
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    let text = last.to_string();
    text.lines().next().unwrap_or("").chars().take(200).collect()
}

/// Statuses the gateway asks again after (its agent never sees them unless it gives up): rate
/// limited, failing, overloaded (Anthropic's 529).
const RETRIED: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// Statuses that say the provider is asked more than it takes (rate limited, overloaded): each
/// counts for the run, and the controller's concurrency backs off on them.
const THROTTLED: [u16; 2] = [429, 529];

/// A wait for a turn under the run's rate limits past which the call counts as held back (as a
/// 429 would): more tasks in flight would only wait longer.
const HELD_BACK: Duration = Duration::from_secs(2);

/// The longest the gateway waits for a provider in all, for one call.
const MAX_WAIT: Duration = Duration::from_secs(120);

/// How long the provider asked to be left alone (`retry-after-ms`, `retry-after` in seconds),
/// at most a minute.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok());
    let wait = get("retry-after-ms").map(|ms| ms / 1000.0).or_else(|| get("retry-after"))?;
    (wait.is_finite() && wait >= 0.0).then(|| Duration::from_secs_f64(wait.min(60.0)))
}

/// The pause before retry `n + 1` when the provider named none: 0.5 s doubling, at most 30 s.
fn backoff(n: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << n.min(6))).min(Duration::from_secs(30))
}

/// The provider stayed unavailable through the retries: the agent gets its last answer's status
/// with the gateway's reason, and the task ends as the infrastructure's (`Refusal::Unavailable`).
fn unavailable(record: Record, wire: Wire, last: std::result::Result<Answer, NoAnswer>) -> Response<Body> {
    let status = last.as_ref().map_or(502, |a| a.status);
    let why = format!(
        "the provider answered {status} to {} tries over {:.1} s (rate limited or unavailable)",
        record.retries + 1,
        record.waited.as_secs_f64()
    );
    let mut call = record.call(status, &Heard::default(), 0);
    call.refused = Some(Refusal::Unavailable { reason: why.clone() });
    record.session.ended(record.n, None, call);
    answer(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        &wire::error_body(wire, "api_error", &format!("agenteval gateway: {why}")),
    )
}

/// The provider could not be reached at all.
fn unreachable(record: Record, provider: &crate::Provider, wire: Wire, e: &NoAnswer) -> Response<Body> {
    let reason = match e {
        NoAnswer::Timeout => "timed out",
        NoAnswer::Connect(why) | NoAnswer::Failed(why) => why.as_str(),
    };
    let host = match provider.bedrock.as_ref().and_then(|b| b.host.as_ref()) {
        Some(h) => h.describe(),
        None => provider.base.split("://").nth(1).and_then(|r| r.split('/').next()).unwrap_or("").to_string(),
    };
    let tries = match record.retries {
        0 => String::new(),
        n => format!(" after {} tries over {:.1} s", n + 1, record.waited.as_secs_f64()),
    };
    let why = format!("cannot reach {host} ({reason}){tries}");
    let mut call = record.call(502, &Heard::default(), 0);
    // For an agent the gateway retries for, a provider it cannot connect to is the
    // infrastructure's. A call that timed out is not: an agent could ask for an answer too long
    // to come in time and turn its own failure into an uncounted task. Otherwise the agent meets
    // it as any client would (the `llm` agent's own client retries and says so).
    call.refused = Some(match record.session.retry && matches!(e, NoAnswer::Connect(_)) {
        true => Refusal::Unavailable { reason: why.clone() },
        false => Refusal::Upstream { reason: why.clone() },
    });
    record.session.ended(record.n, None, call);
    let mut out =
        answer(StatusCode::BAD_GATEWAY, &wire::error_body(wire, "api_error", &format!("agenteval gateway: {why}")));
    if let Ok(v) = HeaderValue::from_str(&format!("{host}; {reason}")) {
        out.headers_mut().insert(agenteval_llm::GATEWAY_UNREACHABLE, v);
    }
    out
}

/// The call to the provider: its wire's path under the upstream's base URL, the body as it is
/// sent, the real key, and of the agent's headers only Anthropic's version and the beta flags the
/// run allows.
fn provider_request(
    inner: &Inner,
    provider: &crate::Provider,
    wire: Wire,
    headers: &HeaderMap,
    sent: Bytes,
    deployment: Option<&str>,
) -> reqwest::RequestBuilder {
    let url = match (&provider.azure, deployment) {
        (Some(a), Some(d)) => a.url(&provider.base, wire, d),
        _ => format!("{}/{}", provider.base, wire.path()),
    };
    let mut req =
        inner.http.post(url).timeout(provider.timeout).header(header::CONTENT_TYPE, "application/json").body(sent);
    if wire.is_anthropic() {
        let version = headers.get("anthropic-version").cloned().unwrap_or(HeaderValue::from_static("2023-06-01"));
        req = req.header("anthropic-version", version);
        // Only the flags that change how an answer is made, and those the config allows.
        if let Some(beta) = headers
            .get("anthropic-beta")
            .and_then(|v| v.to_str().ok())
            .and_then(|b| crate::policy::betas(b, &inner.config.allow))
            && let Ok(v) = HeaderValue::from_str(&beta)
        {
            req = req.header("anthropic-beta", v);
        }
        if let Some(key) = &provider.key {
            req = req.header("x-api-key", key.expose());
        }
    } else if let Some(key) = &provider.key {
        req = match &provider.azure {
            Some(a) if !a.entra => req.header("api-key", key.expose()),
            _ => req.bearer_auth(key.expose()),
        };
    }
    req
}

/// A provider's error answer, read whole up to [`MAX_ERROR_BYTES`], without the key's bytes.
async fn scrubbed_error(
    mut stream: Upstream,
    key: Option<&agenteval_core::secret::Secret>,
    session: &Session,
) -> String {
    use futures::StreamExt as _;
    let mut whole = Vec::new();
    while let Some(Ok(chunk)) = stream.next().await {
        whole.extend_from_slice(&chunk);
        if whole.len() > MAX_ERROR_BYTES {
            whole.truncate(MAX_ERROR_BYTES);
            break;
        }
    }
    scrub(&String::from_utf8_lossy(&whole), key, session)
}

/// An answer's body as it arrives, or why it broke off.
type Upstream = std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<Bytes, String>> + Send>>;

/// The most of a provider's error answer read (and passed on).
const MAX_ERROR_BYTES: usize = 1 << 20;

/// `text` with the provider's key (and the task's secrets) taken out.
fn scrub(text: &str, key: Option<&agenteval_core::secret::Secret>, session: &Session) -> String {
    let mut out = text.to_string();
    if let Some(k) = key.map(|k| k.expose()).filter(|k| !k.is_empty()) {
        out = out.replace(k, "[REDACTED]");
    }
    session.redactor.redact(&out)
}

/// The provider's answer on its way to the agent, listened to as it passes: each chunk goes on
/// as it arrives (no task or buffer between them); the call's record is made at its end.
struct Tee {
    inner: Upstream,
    /// `None` once the call's record is made.
    listening: Option<Listening>,
}

/// What a passing answer has said so far.
struct Listening {
    listener: Listener,
    kept: Vec<u8>,
    truncated: bool,
    ttfb: Option<u64>,
    record: Record,
    request: Value,
    status: u16,
    streamed: bool,
}

impl Listening {
    fn chunk(&mut self, chunk: &[u8]) {
        let started = self.record.started;
        self.ttfb.get_or_insert_with(|| started.elapsed().as_millis() as u64);
        self.listener.feed(chunk);
        if !self.record.session.record {
        } else if self.kept.len() + chunk.len() <= MAX_RECORDED_BYTES {
            self.kept.extend_from_slice(chunk);
        } else {
            self.truncated = true;
        }
    }

    /// The answer ended (or broke off): the call's record, and its cassette line.
    fn finish(self) {
        let Listening { listener, kept, truncated, ttfb, record, request, status, streamed } = self;
        let (heard, body) = listener.finish_with_body();
        let ttfb = ttfb.unwrap_or_else(|| record.started.elapsed().as_millis() as u64);
        let call = record.call(status, &heard, ttfb);
        record.settle(&call);
        // A rate limit or an outage says nothing of the model: not recorded, so a replay
        // answers the call that then went through.
        if !record.session.record || agenteval_llm::is_retryable_status(status) {
            record.session.ended(record.n, None, call);
            return;
        }
        let mut entry = record.entry(&request, status, &heard, ttfb);
        if truncated {
            entry.truncated = true;
        } else if streamed {
            entry.stream = Some(record.session.redactor.redact(&String::from_utf8_lossy(&kept)));
        } else {
            let v = body.unwrap_or_else(|| Value::String(String::from_utf8_lossy(&kept).into()));
            entry.response = Some(record.session.redactor.redact_json(&v));
        }
        record.session.ended(record.n, Some(entry), call);
    }
}

impl futures::Stream for Tee {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(l) = self.listening.as_mut() {
                    l.chunk(&chunk);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(l) = self.listening.take() {
                    l.finish();
                }
                Poll::Ready(Some(Err(std::io::Error::other(format!("the provider's answer broke off: {e}")))))
            }
            Poll::Ready(None) => {
                if let Some(l) = self.listening.take() {
                    l.finish();
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // The agent hung up before the end: the rest is read all the same (the provider bills
        // it), then the call's record is made.
        let Some(mut listening) = self.listening.take() else { return };
        let mut rest: Upstream = std::mem::replace(&mut self.inner, Box::pin(futures::stream::empty()));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    use futures::StreamExt as _;
                    // Until the door closes: then the call was counted at its hold, and reading
                    // on (the provider billing on) is stopped.
                    let session = listening.record.session.clone();
                    let closing = session.closing.notified();
                    tokio::pin!(closing);
                    closing.as_mut().enable();
                    let closed = session.state.lock().expect("not poisoned").closed;
                    if !closed {
                        loop {
                            tokio::select! {
                                _ = &mut closing => break,
                                next = rest.next() => match next {
                                    Some(Ok(chunk)) => listening.chunk(&chunk),
                                    _ => break,
                                },
                            }
                        }
                    }
                    drop(rest);
                    listening.finish();
                });
            }
            Err(_) => listening.finish(),
        }
    }
}

/// `GET /v1/models`: the provider's list when it can be asked, else the models the run prices.
async fn models(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response<Body> {
    let anthropic = headers.contains_key("x-api-key") && !headers.contains_key(header::AUTHORIZATION);
    let wire = if anthropic { Wire::Messages } else { Wire::Chat };
    if session_of(&inner, &headers).is_none() {
        return unauthorized(wire);
    }
    let provider = if anthropic { &inner.config.anthropic } else { &inner.config.openai };
    // An Azure resource lists its deployments, not models, and Bedrock lists none on its runtime:
    // the run's priced models are answered.
    if let Some(p) = provider.as_ref().filter(|p| p.azure.is_none() && p.bedrock.is_none()) {
        let mut req = inner.http.get(format!("{}/models", p.base)).timeout(std::time::Duration::from_secs(30));
        req = match (&p.key, anthropic) {
            (Some(k), true) => req.header("x-api-key", k.expose()).header("anthropic-version", "2023-06-01"),
            (Some(k), false) => req.bearer_auth(k.expose()),
            (None, _) => req,
        };
        if let Ok(r) = req.send().await
            && r.status().is_success()
            && let Ok(bytes) = r.bytes().await
        {
            return Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(bytes))
                .expect("a valid response");
        }
    }
    let data: Vec<Value> = inner
        .config
        .prices
        .models()
        .map(|m| json!({"id": m, "object": "model", "type": "model", "owned_by": "agenteval"}))
        .collect();
    answer(StatusCode::OK, &json!({"object": "list", "data": data}))
}
