//! agenteval's model gateway: the HTTP server a worker runs for its tasks' agents. It speaks
//! OpenAI chat completions, OpenAI Responses and Anthropic Messages (streamed or not) and
//! `GET /v1/models`; maps each call's bearer token to its task's door; refuses a call once the
//! task's budget is spent; forwards the rest to the configured provider with the real key,
//! streaming the answer back as it comes; reads the provider's own usage; prices it; records
//! the call; or answers it from a recording.
//!
//! The core knows it as [`ModelGateway`]; the binary builds it ([`Gateway::start`]).

mod cassette;
mod door;
mod serve;
pub mod wire;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenteval_core::config::{ReplayMatch, Upstream};
use agenteval_core::gateway::{Door, DoorSpec, ModelGateway};
use agenteval_core::secret::Secret;
use agenteval_core::{Error, ErrorKind};
use agenteval_llm::{Price, PriceTable};
use async_trait::async_trait;

pub use cassette::{Entry, fingerprint};
pub use door::GatewayDoor;

/// Seconds one forwarded call may take by default: agents' calls stream long answers.
const DEFAULT_TIMEOUT_SECONDS: f64 = 600.0;

/// Typed errors of building and starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    Config(String),
    #[error("the model gateway cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
}

impl GatewayError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            GatewayError::Config(_) => ErrorKind::Invalid,
            GatewayError::Listen { .. } => ErrorKind::Io,
        }
    }
}

impl From<GatewayError> for Error {
    fn from(e: GatewayError) -> Self {
        Error::new(e.kind(), e.to_string())
    }
}

/// One provider the gateway forwards to.
pub(crate) struct Provider {
    /// Ends without a slash; the wire's path is appended.
    pub base: String,
    pub key: Option<Secret>,
    pub price: Option<Price>,
    pub timeout: Duration,
}

/// What the gateway forwards to and how it prices and replays.
pub struct GatewayConfig {
    pub(crate) openai: Option<Provider>,
    pub(crate) anthropic: Option<Provider>,
    pub(crate) prices: PriceTable,
    pub(crate) replay_match: ReplayMatch,
}

impl std::fmt::Debug for GatewayConfig {
    // The keys are never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("openai", &self.openai.as_ref().map(|p| &p.base))
            .field("anthropic", &self.anthropic.as_ref().map(|p| &p.base))
            .finish_non_exhaustive()
    }
}

impl GatewayConfig {
    /// From a config's `upstream` and the keys fetched for it (`(endpoint, key)`, `openai` or
    /// `anthropic`).
    pub fn new(upstream: &Upstream, keys: Vec<(&str, Secret)>) -> Result<GatewayConfig, GatewayError> {
        let mut keys: HashMap<&str, Secret> = keys.into_iter().collect();
        let provider = |which: &str, e: &agenteval_core::config::Endpoint, default: &str, key: Option<Secret>| {
            let base = e.base_url.as_deref().unwrap_or(default);
            agenteval_core::config::check_base_url(base, e.allow_insecure_http)
                .map_err(|m| GatewayError::Config(format!("upstream.{which}.base_url: {m}")))?;
            Ok::<_, GatewayError>(Provider {
                base: base.trim_end_matches('/').to_string(),
                key,
                price: e.price,
                timeout: Duration::from_secs_f64(e.request_timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS)),
            })
        };
        let openai = match &upstream.openai {
            Some(e) => Some(provider("openai", e, "https://api.openai.com/v1", keys.remove("openai"))?),
            None => None,
        };
        let anthropic = match &upstream.anthropic {
            Some(e) => Some(provider("anthropic", e, "https://api.anthropic.com/v1", keys.remove("anthropic"))?),
            None => None,
        };
        let mut prices = PriceTable::packaged();
        prices.extend(upstream.prices.clone());
        Ok(GatewayConfig { openai, anthropic, prices, replay_match: upstream.replay_match })
    }

    /// The price of `model` on `wire`'s provider: the endpoint's own, else the table's.
    pub(crate) fn price(&self, wire: wire::Wire, model: &str) -> Option<Price> {
        let p = if wire.is_anthropic() { &self.anthropic } else { &self.openai };
        p.as_ref().and_then(|p| p.price).or_else(|| self.prices.lookup(model))
    }
}

/// The doors open now, by token.
pub(crate) type Doors = Mutex<HashMap<String, Arc<door::Session>>>;

pub(crate) struct Inner {
    pub config: GatewayConfig,
    pub http: reqwest::Client,
    pub doors: Doors,
}

/// A running gateway; stops serving when dropped.
pub struct Gateway {
    inner: Arc<Inner>,
    /// Where it listens: loopback first, then each address containers reach it at.
    listening: Mutex<Vec<(Ipv4Addr, u16, tokio::task::JoinHandle<()>)>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        for (_, _, task) in self.listening.lock().expect("not poisoned").drain(..) {
            task.abort();
        }
    }
}

impl Gateway {
    /// Starts serving on `127.0.0.1` (`port` 0: any free port).
    pub async fn start(config: GatewayConfig, port: u16) -> Result<Gateway, GatewayError> {
        Gateway::start_at(config, SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await
    }

    /// Starts serving at `addr` (`agenteval gateway serve --listen`).
    pub async fn start_at(config: GatewayConfig, addr: SocketAddr) -> Result<Gateway, GatewayError> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| GatewayError::Config(format!("cannot build the HTTP client: {e}")))?;
        let inner = Arc::new(Inner { config, http, doors: Mutex::new(HashMap::new()) });
        let gateway = Gateway { inner, listening: Mutex::new(Vec::new()) };
        gateway.bind(addr).await?;
        Ok(gateway)
    }

    async fn bind(&self, addr: SocketAddr) -> Result<u16, GatewayError> {
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|source| GatewayError::Listen { addr, source })?;
        let port = listener.local_addr().map_err(|source| GatewayError::Listen { addr, source })?.port();
        let app = serve::router(self.inner.clone());
        // Answers stream as several small writes: without NODELAY each waits for the client's
        // delayed ACK (40 ms).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let ip = match addr.ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        self.listening.lock().expect("not poisoned").push((ip, port, task));
        Ok(port)
    }

    /// The first address it listens at.
    pub fn addr(&self) -> SocketAddr {
        let l = self.listening.lock().expect("not poisoned");
        let (ip, port, _) = l.first().expect("a started gateway listens");
        SocketAddr::from((*ip, *port))
    }

    /// The port it listens on at `ip`, if it does.
    fn port_at(&self, ip: Ipv4Addr) -> Option<u16> {
        self.listening.lock().expect("not poisoned").iter().find(|(i, _, _)| *i == ip).map(|(_, p, _)| *p)
    }

    /// Opens a door (`ModelGateway::open`, without the box).
    pub fn open_door(&self, spec: DoorSpec) -> GatewayDoor {
        let loopback = self.port_at(Ipv4Addr::LOCALHOST).or_else(|| self.port_at(Ipv4Addr::UNSPECIFIED));
        let ports: Vec<(Ipv4Addr, u16)> =
            self.listening.lock().expect("not poisoned").iter().map(|(i, p, _)| (*i, *p)).collect();
        door::open(self.inner.clone(), spec, loopback, ports)
    }
}

#[async_trait]
impl ModelGateway for Gateway {
    async fn open(&self, spec: DoorSpec) -> agenteval_core::Result<Box<dyn Door>> {
        Ok(Box::new(self.open_door(spec)))
    }

    fn local(&self) -> Option<Arc<dyn agenteval_core::gateway::LocalCall>> {
        Some(Arc::new(serve::Local(serve::router(self.inner.clone()))))
    }

    async fn listen_on(&self, ip: Ipv4Addr) -> agenteval_core::Result<u16> {
        if let Some(p) = self.port_at(ip) {
            return Ok(p);
        }
        // A port of agenteval's range: the task network's firewall lets only those through.
        let mut last = None;
        for port in agenteval_core::gateway::GATEWAY_PORTS {
            match self.bind(SocketAddr::from((ip, port))).await {
                Ok(p) => return Ok(p),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("the range is not empty").into())
    }
}

#[cfg(test)]
mod tests {
    use agenteval_core::config::{Endpoint, ModelPrice};
    use agenteval_core::gateway::{Reach, Refusal, Replay};
    use agenteval_core::secret::Redactor;
    use agenteval_testkit::llm_mock::MockLlm;
    use serde_json::{Value, json};

    use super::*;

    const KEY: &str = "sk-upstream-secret-0123456789abcdef";

    fn config(mock: &MockLlm, prices: bool) -> GatewayConfig {
        let endpoint = Endpoint { base_url: Some(mock.base_url()), ..Endpoint::default() };
        let mut up = Upstream { openai: Some(endpoint.clone()), anthropic: Some(endpoint), ..Upstream::default() };
        if prices {
            let p = ModelPrice { input_per_mtok: 1.0, output_per_mtok: 2.0, cached_input_per_mtok: None };
            up.prices.insert("mock-model".into(), p);
        }
        GatewayConfig::new(&up, vec![("openai", Secret::new(KEY)), ("anthropic", Secret::new(KEY))]).unwrap()
    }

    fn spec(task: &str) -> DoorSpec {
        DoorSpec {
            run_id: agenteval_core::RunId::new(),
            task_id: task.parse().unwrap(),
            attempt: 1,
            max_tokens: None,
            max_cost_usd: None,
            replay: None,
            record: true,
            redactor: Redactor::new(),
        }
    }

    async fn post(door: &GatewayDoor, path: &str, body: Value) -> (u16, String) {
        let (openai, anthropic) = door.base_urls(Reach::Host).unwrap();
        let url = if path == "messages" { format!("{anthropic}/v1/messages") } else { format!("{openai}/{path}") };
        let r = reqwest::Client::new().post(url).bearer_auth(door.token().expose()).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    fn chat(text: &str, stream: bool) -> Value {
        json!({"model": "mock-model", "stream": stream, "messages": [{"role": "user", "content": text}]})
    }

    #[tokio::test]
    async fn every_wire_is_metered_from_the_providers_usage_streamed_or_not() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let mut door = gw.open_door(spec("t1"));
        let (status, body) = post(&door, "chat/completions", chat("hello", false)).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("echo: hello"), "{body}");
        let (_, sse) = post(&door, "chat/completions", chat("streamed", true)).await;
        assert!(sse.contains("data: [DONE]") && sse.contains("\"usage\""), "{sse}");
        let (_, sse) = post(&door, "messages", chat("claude", true)).await;
        assert!(sse.contains("message_delta"), "{sse}");
        let (_, sse) = post(&door, "responses", json!({"model": "mock-model", "input": "resp", "stream": true})).await;
        assert!(sse.contains("response.completed"), "{sse}");
        let mut calls = Vec::new();
        for _ in 0..4 {
            calls.push(door.next_call().await);
        }
        calls.sort_by_key(|c| c.call);
        for c in &calls {
            assert_eq!((c.input_tokens, c.output_tokens, c.status), (10, 5, 200), "{c:?}");
            assert!((c.cost_usd.unwrap() - 20e-6).abs() < 1e-12, "{c:?}");
        }
        assert_eq!(calls[0].answer, "echo: hello");
        assert_eq!(calls[1].answer, "echo: streamed");
        assert!(calls[1].stream);
        assert_eq!(calls[2].wire, "anthropic.messages");
        assert_eq!(calls[3].finish_reason, "completed");
        // The provider got the real key; the agent never sent it.
        assert!(mock.received().iter().all(|r| r.credential.as_deref().is_some_and(|c| c.contains(KEY))));
        let cassette = door.close();
        assert_eq!(String::from_utf8_lossy(&cassette).lines().count(), 4);
    }

    #[tokio::test]
    async fn debug_output_shows_neither_the_key_nor_a_token() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, false), 0).await.unwrap();
        let door = gw.open_door(spec("t1"));
        let token = door.token().expose().to_string();
        let access = agenteval_core::traits::GatewayAccess {
            token: door.token().clone(),
            host: door.base_urls(Reach::Host).unwrap(),
            port: 1,
            container: None,
            local: None,
        };
        for shown in
            [format!("{gw:?}"), format!("{door:?}"), format!("{access:?}"), format!("{:?}", config(&mock, true))]
        {
            assert!(!shown.contains(KEY) && !shown.contains(&token), "{shown}");
        }
    }

    #[tokio::test]
    async fn a_spent_budget_refuses_the_next_call_and_a_closed_door_its_token() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, false), 0).await.unwrap();
        let mut door = gw.open_door(DoorSpec { max_tokens: Some(15), ..spec("t1") });
        assert_eq!(post(&door, "chat/completions", chat("one", false)).await.0, 200);
        let _ = door.next_call().await;
        let (status, body) = post(&door, "chat/completions", chat("two", false)).await;
        assert_eq!(status, 429, "{body}");
        assert!(body.contains("max_tokens 15"), "{body}");
        let refused = door.next_call().await;
        assert!(matches!(refused.refused, Some(Refusal::Tokens { .. })), "{refused:?}");
        // A cost limit without a price refuses at once: the limit could not be kept.
        let priced = gw.open_door(DoorSpec { max_cost_usd: Some(1.0), ..spec("t2") });
        let (status, body) = post(&priced, "chat/completions", chat("x", false)).await;
        assert_eq!(status, 429, "{body}");
        assert!(matches!(priced.next_call().await.refused, Some(Refusal::Cost { .. })));
        // A token works for its own door only, and only while it is open.
        let token = door.token().expose().to_string();
        door.close();
        let (openai, _) = priced.base_urls(Reach::Host).unwrap();
        let r = reqwest::Client::new()
            .post(format!("{openai}/chat/completions"))
            .bearer_auth(&token)
            .json(&chat("late", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let wrong = reqwest::Client::new()
            .post(format!("{openai}/chat/completions"))
            .header("x-api-key", "sk-not-a-token")
            .json(&chat("x", false))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 401);
    }

    #[tokio::test]
    async fn a_recording_replays_with_the_provider_gone_and_a_changed_call_is_a_miss() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let mut door = gw.open_door(spec("t1"));
        let (_, live_whole) = post(&door, "chat/completions", chat("hello", false)).await;
        let (_, live_stream) = post(&door, "messages", chat("stream me", true)).await;
        for _ in 0..2 {
            door.next_call().await;
        }
        let cassette = door.close();
        drop(mock);
        let replay = Replay { cassette, strict: true };
        let again = gw.open_door(DoorSpec { replay: Some(replay.clone()), ..spec("t1") });
        // In another order: matched by fingerprint.
        let (_, s) = post(&again, "messages", chat("stream me", true)).await;
        assert_eq!(s, live_stream);
        let (_, w) = post(&again, "chat/completions", chat("hello", false)).await;
        assert_eq!(serde_json::from_str::<Value>(&w).unwrap(), serde_json::from_str::<Value>(&live_whole).unwrap());
        let a = again.next_call().await;
        assert!(a.replayed && a.input_tokens == 10 && a.output_tokens == 5, "{a:?}");
        let changed = gw.open_door(DoorSpec { replay: Some(replay), ..spec("t1") });
        let (status, body) = post(&changed, "chat/completions", chat("hello, changed", false)).await;
        assert_eq!(status, 400, "{body}");
        let miss = changed.next_call().await;
        match miss.refused {
            Some(Refusal::ReplayMiss { reason }) => assert!(reason.contains("/messages/0/content"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}
