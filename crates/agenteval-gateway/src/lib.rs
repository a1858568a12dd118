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
mod policy;
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

/// Connections the gateway's listening socket queues before it accepts them (the kernel caps it
/// at `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 4096;

/// Tries of one call a provider refuses for now (429, 5xx), as the `llm` agent's client makes.
const DEFAULT_ATTEMPTS: u32 = 5;

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
#[derive(Clone)]
pub(crate) struct Provider {
    /// Ends without a slash; the wire's path is appended.
    pub base: String,
    pub key: Option<Secret>,
    pub price: Option<Price>,
    pub timeout: Duration,
    /// Tries of one call while the provider refuses it for now (`Endpoint::max_attempts`).
    pub max_attempts: u32,
    /// An Azure OpenAI resource: its paths, deployments and credential header.
    pub azure: Option<Azure>,
    /// Amazon Bedrock serves this wire: calls go to its host, not to `base`.
    pub bedrock: Option<Bedrock>,
}

/// How Anthropic's wire reaches Amazon Bedrock.
#[derive(Clone)]
pub(crate) struct Bedrock {
    /// The Bedrock model id serving each model the agent asks for.
    pub models: std::collections::BTreeMap<String, String>,
    /// The SDK's client (the binary's wiring gives it); `None`: this build cannot reach Bedrock.
    pub host: Option<Arc<dyn agenteval_core::gateway::ModelHost>>,
}

impl Bedrock {
    pub(crate) fn model_id<'a>(&'a self, model: &'a str) -> &'a str {
        self.models.get(model).map_or(model, String::as_str)
    }
}

/// How calls reach an Azure OpenAI resource.
#[derive(Debug, Clone)]
pub(crate) struct Azure {
    /// A dated API version; `None`: the v1 API.
    pub api_version: Option<String>,
    pub deployments: std::collections::BTreeMap<String, String>,
    /// The credential is an Entra token (a bearer), not an `api-key`.
    pub entra: bool,
}

impl Azure {
    /// The URL of a call on `wire` for `deployment`, under the resource's `base`.
    pub(crate) fn url(&self, base: &str, wire: wire::Wire, deployment: &str) -> String {
        match (&self.api_version, wire) {
            (None, _) => format!("{base}/openai/v1/{}", wire.path()),
            (Some(v), wire::Wire::Responses) => format!("{base}/openai/responses?api-version={v}"),
            (Some(v), _) => format!("{base}/openai/deployments/{deployment}/{}?api-version={v}", wire.path()),
        }
    }

    pub(crate) fn deployment<'a>(&'a self, model: &'a str) -> &'a str {
        self.deployments.get(model).map_or(model, String::as_str)
    }
}

/// What the gateway forwards to and how it prices and replays.
pub struct GatewayConfig {
    pub(crate) openai: Option<Provider>,
    pub(crate) anthropic: Option<Provider>,
    pub(crate) prices: PriceTable,
    pub(crate) replay_match: ReplayMatch,
    pub(crate) allow: agenteval_core::config::UpstreamAllow,
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
                max_attempts: e.max_attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1),
                azure: None,
                bedrock: None,
            })
        };
        // Bedrock serves Anthropic's wire (InvokeModel) and, for other models, OpenAI's chat
        // wire (Converse) when nothing else serves it.
        let bedrock = upstream.bedrock.as_ref().map(|b| Provider {
            base: b.endpoint_url.clone().unwrap_or_else(|| "bedrock".into()),
            key: None,
            price: b.price,
            timeout: Duration::from_secs_f64(b.request_timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS)),
            max_attempts: b.max_attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1),
            azure: None,
            bedrock: Some(Bedrock { models: b.models.clone(), host: None }),
        });
        let openai = match (&upstream.openai, &upstream.azure) {
            (Some(e), _) => Some(provider("openai", e, "https://api.openai.com/v1", keys.remove("openai"))?),
            (None, Some(a)) => {
                agenteval_core::config::check_base_url(&a.base_url, a.allow_insecure_http)
                    .map_err(|m| GatewayError::Config(format!("upstream.azure.base_url: {m}")))?;
                Some(Provider {
                    base: a.base_url.trim_end_matches('/').to_string(),
                    key: keys.remove("azure"),
                    price: a.price,
                    timeout: Duration::from_secs_f64(a.request_timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS)),
                    max_attempts: DEFAULT_ATTEMPTS,
                    azure: Some(Azure {
                        api_version: a.api_version.clone(),
                        deployments: a.deployments.clone(),
                        entra: a.entra(),
                    }),
                    bedrock: None,
                })
            }
            (None, None) => bedrock.clone(),
        };
        let anthropic = match &upstream.anthropic {
            Some(e) => Some(provider("anthropic", e, "https://api.anthropic.com/v1", keys.remove("anthropic"))?),
            None => bedrock,
        };
        let mut prices = PriceTable::packaged();
        prices.extend(upstream.prices.clone());
        for (wire, p) in [("OpenAI's", &openai), ("Anthropic's", &anthropic)] {
            let Some(p) = p else { continue };
            let how = match &p.bedrock {
                Some(_) => "AWS's TLS, SigV4-signed (Amazon Bedrock)".to_string(),
                None => agenteval_core::config::posture(&p.base).to_string(),
            };
            tracing::info!(
                "transport: the model gateway sends {wire} wire to {} over {how}",
                agenteval_core::config::host_in(&p.base)
            );
        }
        Ok(GatewayConfig {
            openai,
            anthropic,
            prices,
            replay_match: upstream.replay_match,
            allow: upstream.allow.clone(),
        })
    }

    /// Anthropic's wire served by `host` (Amazon Bedrock), as the config's `upstream.bedrock` says.
    pub fn with_host(mut self, host: Arc<dyn agenteval_core::gateway::ModelHost>) -> GatewayConfig {
        for p in [&mut self.anthropic, &mut self.openai] {
            if let Some(b) = p.as_mut().and_then(|p| p.bedrock.as_mut()) {
                b.host = Some(host.clone());
            }
        }
        self
    }

    /// The price of `model` on `wire`'s provider: an endpoint's own `price` is its model's
    /// (`agent.model`, `own`) and no other's; every other model is priced by the table.
    pub(crate) fn price(&self, wire: wire::Wire, model: &str, own: Option<&str>) -> Option<Price> {
        let p = if wire.is_anthropic() { &self.anthropic } else { &self.openai };
        let endpoint = p.as_ref().and_then(|p| p.price).filter(|_| own.is_none_or(|o| o == model));
        // A Bedrock model id is priced as its model when the agent's name is not.
        let id = p.as_ref().and_then(|p| p.bedrock.as_ref()).map(|b| b.model_id(model));
        endpoint.or_else(|| self.prices.lookup(model)).or_else(|| id.and_then(|id| self.prices.lookup(id)))
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
            // A redirect would carry the key to another host.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| GatewayError::Config(format!("cannot build the HTTP client: {e}")))?;
        let inner = Arc::new(Inner { config, http, doors: Mutex::new(HashMap::new()) });
        let gateway = Gateway { inner, listening: Mutex::new(Vec::new()) };
        gateway.bind(addr).await?;
        Ok(gateway)
    }

    async fn bind(&self, addr: SocketAddr) -> Result<u16, GatewayError> {
        // A queue deep enough for every agent of a fleet's first wave connecting at once: the
        // default (1,024) overflows, and a dropped connection is tried again a second later.
        let listen = || {
            let socket =
                if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }?;
            // As `TcpListener::bind` does: a port of the range is bound again at once after a run.
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            socket.listen(LISTEN_BACKLOG)
        };
        let listener = listen().map_err(|source| GatewayError::Listen { addr, source })?;
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
            let p = ModelPrice {
                input_per_mtok: 1.0,
                output_per_mtok: 2.0,
                cached_input_per_mtok: None,
                cache_write_per_mtok: None,
            };
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
            models: vec![],
            retry: true,
            run_budget: None,
            rate: None,
            usage: None,
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

    /// Azure OpenAI: the OpenAI wires go to the resource's deployment (v1 API, or a dated one
    /// with its `api-version`), with its `api-key` (or an Entra bearer); the agent's model is
    /// what is priced and recorded.
    #[tokio::test]
    async fn openais_wires_reach_an_azure_resource_by_deployment_metered_as_the_agents_model() {
        use agenteval_core::config::AzureEndpoint;
        let mock = MockLlm::start(Duration::ZERO);
        let resource = format!("http://{}", mock.addr);
        for (api_version, entra, chat_path, responses_path) in [
            (None, false, "azure-v1:chat", "azure-v1:responses"),
            (Some("2024-10-21"), false, "azure-dated:chat:my-deployment", "azure-dated:responses"),
            (None, true, "azure-v1:chat", "azure-v1:responses"),
        ] {
            let before = mock.received().len();
            let azure = AzureEndpoint {
                base_url: resource.clone(),
                api_version: api_version.map(str::to_string),
                deployments: [("gpt-5".to_string(), "my-deployment".to_string())].into(),
                secrets: [(
                    if entra { "AZURE_OPENAI_AD_TOKEN" } else { "AZURE_OPENAI_API_KEY" }.to_string(),
                    "k".into(),
                )]
                .into(),
                ..AzureEndpoint::default()
            };
            let up = Upstream { azure: Some(azure), ..Upstream::default() };
            let cfg = GatewayConfig::new(&up, vec![("azure", Secret::new(KEY))]).unwrap();
            let gw = Gateway::start(cfg, 0).await.unwrap();
            let door = gw.open_door(spec("t1"));
            let asked = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hello"}]});
            let (status, body) = post(&door, "chat/completions", asked).await;
            assert_eq!(status, 200, "{body}");
            let (status, body) = post(&door, "responses", json!({"model": "gpt-5", "input": "resp"})).await;
            assert_eq!(status, 200, "{body}");
            let got: Vec<_> = mock.received().into_iter().skip(before).collect();
            let paths: Vec<&str> = got.iter().map(|r| r.path.as_str()).collect();
            assert_eq!(paths, [chat_path, responses_path]);
            for r in &got {
                assert_eq!(r.body["model"], "my-deployment", "{r:?}");
                let want = if entra { format!("Bearer {KEY}") } else { format!("api-key {KEY}") };
                assert_eq!(r.credential.as_deref(), Some(want.as_str()));
            }
            for _ in 0..2 {
                let c = door.next_call().await;
                // gpt-5 at the packaged price: 10 tokens in at $1.25, 5 out at $10 per million.
                assert_eq!((c.model.as_str(), c.input_tokens, c.output_tokens), ("gpt-5", 10, 5), "{c:?}");
                assert!((c.cost_usd.unwrap() - (10.0 * 1.25 + 5.0 * 10.0) / 1e6).abs() < 1e-12, "{c:?}");
            }
        }
    }

    /// A call that timed out is the agent's to meet, never an outage that would make its task
    /// uncounted: an agent could ask for an answer too long to come in time.
    #[tokio::test]
    async fn a_call_that_times_out_is_not_an_outage() {
        let slow = MockLlm::start(Duration::from_secs(3));
        let endpoint =
            Endpoint { base_url: Some(slow.base_url()), request_timeout_seconds: Some(1.0), ..Endpoint::default() };
        let up = Upstream { openai: Some(endpoint), ..Upstream::default() };
        let gw = Gateway::start(GatewayConfig::new(&up, vec![("openai", Secret::new(KEY))]).unwrap(), 0).await.unwrap();
        let door = gw.open_door(spec("t1"));
        let (status, _) = post(&door, "chat/completions", chat("slow", false)).await;
        assert_eq!(status, 502);
        let c = door.next_call().await;
        assert!(matches!(c.refused, Some(Refusal::Upstream { .. })), "{c:?}");
        assert_eq!(c.retries, 0, "not retried: {c:?}");
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
        // Room for the first call's prompt (as guessed: a token for each three bytes) and a few
        // tokens of answer; none for a second prompt once the first is spent.
        let guess = |v: &Value| (serde_json::to_vec(v).unwrap().len() as u64).div_ceil(3);
        let max = guess(&chat("one", false)) + 13;
        let mut door = gw.open_door(DoorSpec { max_tokens: Some(max), ..spec("t1") });
        assert_eq!(post(&door, "chat/completions", chat("one", false)).await.0, 200);
        let _ = door.next_call().await;
        let (status, body) = post(&door, "chat/completions", chat("two", false)).await;
        assert_eq!(status, 429, "{body}");
        assert!(body.contains(&format!("max_tokens {max}")), "{body}");
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

    /// A request from outside the test's task: its status and body.
    async fn post_as(url: String, token: String, body: Value) -> (u16, String) {
        let r = reqwest::Client::new().post(url).bearer_auth(token).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    fn asking(text: &str, max_tokens: u64) -> Value {
        json!({"model": "mock-model", "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]})
    }

    #[tokio::test]
    async fn calls_in_flight_hold_the_budget_and_each_answer_is_held_to_what_is_left() {
        let mock = MockLlm::start(Duration::from_millis(800));
        let gw = Gateway::start(config(&mock, false), 0).await.unwrap();
        let door = gw.open_door(DoorSpec { max_tokens: Some(1500), ..spec("t1") });
        let url = format!("{}/chat/completions", door.base_urls(Reach::Host).unwrap().0);
        let token = door.token().expose().to_string();
        let calls: Vec<_> = (0..20)
            .map(|i| tokio::spawn(post_as(url.clone(), token.clone(), asking(&format!("call {i:02}"), 1000))))
            .collect();
        let mut refused = 0;
        for c in calls {
            if c.await.unwrap().0 == 429 {
                refused += 1;
            }
        }
        let mut asked: Vec<u64> = mock.received().iter().map(|r| r.body["max_tokens"].as_u64().unwrap()).collect();
        asked.sort_unstable();
        // Each prompt is held too (a token for each three bytes): the second answer gets what the
        // first call and its own prompt left.
        let prompt = (serde_json::to_vec(&asking("call 00", 1000)).unwrap().len() as u64).div_ceil(3);
        assert_eq!(
            asked,
            vec![1500 - 2 * prompt - 1000, 1000],
            "two forwarded, the second held to what the first left"
        );
        assert_eq!(refused, 18);
    }

    /// `n` answers are `n` bills: a call asking 50 choices of 1,500 tokens holds all of them, is
    /// held to its share of what is left, and one cut off when the door closes counts at them all.
    #[tokio::test]
    async fn every_choice_is_held_and_a_call_cut_off_counts_them_all() {
        let mock = MockLlm::start(Duration::from_secs(2));
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let mut door = gw.open_door(DoorSpec { max_tokens: Some(1_000_000), ..spec("t1") });
        let url = format!("{}/chat/completions", door.base_urls(Reach::Host).unwrap().0);
        let mut many = asking("fifty", 1500);
        many["n"] = json!(50);
        let late = tokio::spawn(post_as(url.clone(), door.token().expose().to_string(), many));
        while door.in_flight() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        door.close();
        let c = door.next_call().await;
        assert!(c.at_cap && c.output_tokens == 50 * 1500, "every choice counted: {c:?}");
        let _ = late.await;
        // Under a tight limit each choice gets its share.
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let door = gw.open_door(DoorSpec { max_tokens: Some(10_000), ..spec("t2") });
        let url = format!("{}/chat/completions", door.base_urls(Reach::Host).unwrap().0);
        let mut many = asking("ten", 1500);
        many["n"] = json!(10);
        let prompt = (serde_json::to_vec(&many).unwrap().len() as u64).div_ceil(3);
        assert_eq!(post_as(url.clone(), door.token().expose().to_string(), many).await.0, 200);
        let sent = mock.received()[0].body.clone();
        assert_eq!(sent["max_tokens"], (10_000 - prompt) / 10, "{sent}");
        let mut bad = asking("bad", 10);
        bad["n"] = json!("50");
        let (status, body) = post_as(url, door.token().expose().to_string(), bad).await;
        assert_eq!(status, 400, "a count the gateway cannot read is not sent: {body}");
    }

    /// A prompt is billed whatever the answer: under a cost limit one that costs more than is
    /// left is refused before it is sent, and calls in flight hold their prompts.
    #[tokio::test]
    async fn prompts_are_held_and_one_past_the_budget_is_never_sent() {
        let mock = MockLlm::start(Duration::from_millis(500));
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        // $1 a million prompt tokens: a 3 MB prompt is about $1.
        let door = gw.open_door(DoorSpec { max_cost_usd: Some(0.05), ..spec("t1") });
        let url = format!("{}/chat/completions", door.base_urls(Reach::Host).unwrap().0);
        let big = asking(&"x".repeat(3 << 20), 10);
        let (status, body) = post_as(url.clone(), door.token().expose().to_string(), big).await;
        assert_eq!(status, 429, "{body}");
        assert!(body.contains("prompt"), "{body}");
        assert!(mock.received().is_empty(), "never sent");
        // Ten calls of about $0.02 of prompt each: two fit, the rest are refused while they run.
        let each = asking(&"y".repeat(60_000), 10);
        let calls: Vec<_> = (0..10)
            .map(|_| tokio::spawn(post_as(url.clone(), door.token().expose().to_string(), each.clone())))
            .collect();
        let mut ok = 0;
        for c in calls {
            if c.await.unwrap().0 == 200 {
                ok += 1;
            }
        }
        assert_eq!(ok, 2, "the prompts in flight are held");
    }

    /// A ledger in memory, as the run index keeps one.
    #[derive(Default)]
    struct MemoryLedger(std::sync::Mutex<HashMap<String, i64>>);

    #[async_trait::async_trait]
    impl agenteval_core::gateway::RateLedger for MemoryLedger {
        async fn book(&self, key: &str, now: i64, cost: i64) -> agenteval_core::Result<i64> {
            let mut m = self.0.lock().unwrap();
            let t = m.entry(key.to_string()).or_insert(0);
            *t = (*t).max(now) + cost;
            Ok(*t)
        }
    }

    /// Fair between tasks: one task's burst of calls books one at a time, so another task's call
    /// that arrives just after goes before most of the burst, not behind all of it.
    #[tokio::test]
    async fn a_tasks_burst_does_not_book_the_rate_limit_ahead_of_another_task() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, false), 0).await.unwrap();
        // 240 a minute: a call every 250 ms, none at once.
        let limit =
            agenteval_core::config::RateLimit { model: None, requests_per_minute: Some(240), tokens_per_minute: None };
        let governor = agenteval_core::gateway::RateGovernor {
            limits: vec![limit],
            ledger: std::sync::Arc::new(MemoryLedger::default()),
        };
        let run = agenteval_core::RunId::new();
        let door = |t: &str| gw.open_door(DoorSpec { run_id: run, rate: Some(governor.clone()), ..spec(t) });
        let (busy, other) = (door("busy"), door("other"));
        let url = |d: &GatewayDoor| format!("{}/chat/completions", d.base_urls(Reach::Host).unwrap().0);
        let burst: Vec<_> = (0..8)
            .map(|i| tokio::spawn(post_as(url(&busy), busy.token().expose().to_string(), asking(&format!("b{i}"), 5))))
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        assert_eq!(post_as(url(&other), other.token().expose().to_string(), asking("o", 5)).await.0, 200);
        let waited = started.elapsed();
        // Behind the whole burst it would wait about 8 turns (2 s); it waits one or two.
        assert!(waited < Duration::from_millis(1200), "the other task waited {waited:?} behind the burst");
        for b in burst {
            assert_eq!(b.await.unwrap().0, 200);
        }
    }

    /// The run's spend and what its calls in flight hold, as the run index keeps them.
    #[derive(Default)]
    struct MemorySpend(std::sync::Mutex<(f64, f64)>);

    #[async_trait::async_trait]
    impl agenteval_core::gateway::SpendLedger for MemorySpend {
        async fn spent(&self) -> agenteval_core::Result<f64> {
            Ok(self.0.lock().unwrap().0)
        }
        async fn add(&self, usd: f64) -> agenteval_core::Result<f64> {
            let mut t = self.0.lock().unwrap();
            t.0 += usd;
            Ok(t.0)
        }
        async fn hold(&self, usd: f64) -> agenteval_core::Result<(f64, f64)> {
            let mut t = self.0.lock().unwrap();
            t.1 = (t.1 + usd).max(0.0);
            Ok(*t)
        }
    }

    /// Calls in flight at once on many tasks (many workers of a fleet) hold what each could cost
    /// in the run's ledger before they are sent: under a run budget with room for one such call,
    /// calls arriving together go one after another (each waits for the one in flight to end and
    /// give its hold back), never together past the budget; once the spend reaches the budget,
    /// the next is refused.
    #[tokio::test]
    async fn calls_in_flight_on_every_task_hold_the_runs_budget() {
        let mock = MockLlm::start(Duration::from_millis(400));
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let ledger = std::sync::Arc::new(MemorySpend::default());
        let budget = agenteval_core::gateway::RunBudget { max_usd: 0.01, ledger: ledger.clone() };
        let run = agenteval_core::RunId::new();
        let doors: Vec<GatewayDoor> = (0..4)
            .map(|i| gw.open_door(DoorSpec { run_id: run, run_budget: Some(budget.clone()), ..spec(&format!("t{i}")) }))
            .collect();
        let post_on = |d: &GatewayDoor, text: &str| {
            let url = format!("{}/chat/completions", d.base_urls(Reach::Host).unwrap().0);
            // 4,000 tokens at $2 a million: each could cost $0.008.
            tokio::spawn(post_as(url, d.token().expose().to_string(), asking(text, 4000)))
        };
        let calls: Vec<_> = doors.iter().enumerate().map(|(i, d)| post_on(d, &format!("c{i}"))).collect();
        for c in calls {
            assert_eq!(c.await.unwrap().0, 200);
        }
        let mut at: Vec<std::time::Instant> = mock.received().iter().map(|r| r.at).collect();
        at.sort();
        assert_eq!(at.len(), 4);
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(350), "two calls were in flight at once: {at:?}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (spent, held) = *ledger.0.lock().unwrap();
        assert!(held.abs() < 1e-12 && spent > 0.0 && spent < 0.001, "each hold given back: {spent} {held}");
        // Spent up to the budget: refused.
        ledger.0.lock().unwrap().0 = 0.01;
        assert_eq!(post_on(&doors[0], "late").await.unwrap().0, 429);
    }

    #[tokio::test]
    async fn a_call_still_running_when_the_door_closes_counts_at_what_it_could_cost() {
        let mock = MockLlm::start(Duration::from_secs(2));
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let mut door = gw.open_door(DoorSpec { max_tokens: Some(10_000), ..spec("t1") });
        let url = format!("{}/chat/completions", door.base_urls(Reach::Host).unwrap().0);
        let late = tokio::spawn(post_as(url, door.token().expose().to_string(), asking("slow", 4000)));
        while door.in_flight() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        door.close();
        let c = door.next_call().await;
        assert!(c.at_cap && c.status == 499 && c.output_tokens == 4000 && c.input_tokens > 0, "{c:?}");
        assert!(c.cost_usd.is_some_and(|d| d > 0.0), "priced at its most: {c:?}");
        let (tokens, _) = door.spent();
        let _ = late.await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(door.spent().0, tokens, "its late end counts no more");
        assert!(door.calls().take(|_| true).is_none());
    }

    #[tokio::test]
    async fn an_answer_without_usage_counts_at_its_cap_under_a_limit_and_unknown_without() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let limited = gw.open_door(DoorSpec { max_tokens: Some(1000), ..spec("t1") });
        assert_eq!(post(&limited, "chat/completions", asking("NO_USAGE", 300)).await.0, 200);
        let c = limited.next_call().await;
        assert!(c.at_cap && c.output_tokens == 300 && c.cost_usd.is_some(), "{c:?}");
        let free = gw.open_door(spec("t2"));
        assert_eq!(post(&free, "chat/completions", asking("NO_USAGE", 300)).await.0, 200);
        let c = free.next_call().await;
        assert!(!c.at_cap && c.output_tokens == 0 && c.cost_usd.is_none(), "{c:?}");
    }

    #[tokio::test]
    async fn what_the_run_does_not_allow_never_reaches_the_provider() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let door = gw.open_door(DoorSpec { models: vec!["mock-model".into()], ..spec("t1") });
        for (path, body, why) in [
            (
                "chat/completions",
                json!({"model": "o1-pro", "messages": [{"role": "user", "content": "x"}]}),
                "`o1-pro`",
            ),
            ("chat/completions", json!({"model": "mock-model", "stream": 1, "messages": []}), "true or false"),
            (
                "responses",
                json!({"model": "mock-model", "input": "x", "tools": [{"type": "web_search"}]}),
                "server_tools",
            ),
            (
                "responses",
                json!({"model": "mock-model", "input": "x", "previous_response_id": "resp_9"}),
                "stored_responses",
            ),
            (
                "messages",
                json!({"model": "mock-model", "max_tokens": 9, "messages": [], "mcp_servers": [{"url": "https://evil"}]}),
                "mcp_servers",
            ),
        ] {
            let (status, text) = post(&door, path, body).await;
            assert_eq!(status, 400, "{text}");
            assert!(text.contains(why), "{text}");
            assert!(matches!(door.next_call().await.refused, Some(Refusal::Policy { .. })));
        }
        assert!(mock.received().is_empty(), "the provider saw none of them");
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed_and_an_error_never_quotes_the_key() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, true), 0).await.unwrap();
        let door = gw.open_door(spec("t1"));
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let url = format!("{}/chat/completions", door.base_urls(Reach::Host).unwrap().0);
        let r =
            client.post(url).bearer_auth(door.token().expose()).json(&chat("REDIRECT", false)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 307, "passed back, not followed with the key");
        assert_eq!(door.next_call().await.status, 307);
        let (status, body) = post(&door, "chat/completions", chat("KEY_ERROR", false)).await;
        assert_eq!(status, 401);
        assert!(!body.contains(KEY) && body.contains("[REDACTED]"), "{body}");
    }

    #[test]
    fn an_endpoints_price_prices_only_its_own_model() {
        let endpoint = Endpoint {
            price: Some(ModelPrice {
                input_per_mtok: 1.0,
                output_per_mtok: 1.0,
                cached_input_per_mtok: None,
                cache_write_per_mtok: None,
            }),
            ..Endpoint::default()
        };
        let up = Upstream { openai: Some(endpoint), ..Upstream::default() };
        let cfg = GatewayConfig::new(&up, vec![]).unwrap();
        assert!(cfg.price(wire::Wire::Chat, "mock-model", Some("mock-model")).is_some());
        assert!(cfg.price(wire::Wire::Chat, "my-other-model", Some("mock-model")).is_none());
    }

    #[tokio::test]
    async fn a_call_that_names_no_length_holds_a_default_and_is_held_to_one_only_near_the_limit() {
        let mock = MockLlm::start(Duration::ZERO);
        let gw = Gateway::start(config(&mock, false), 0).await.unwrap();
        let roomy = gw.open_door(DoorSpec { max_tokens: Some(1_000_000), ..spec("t1") });
        assert_eq!(post(&roomy, "chat/completions", chat("roomy", false)).await.0, 200);
        let tight = gw.open_door(DoorSpec { max_tokens: Some(1_000), ..spec("t2") });
        assert_eq!(post(&tight, "chat/completions", chat("tight", false)).await.0, 200);
        let sent: Vec<Value> = mock.received().into_iter().map(|r| r.body).collect();
        assert!(sent[0].get("max_tokens").is_none(), "a length the model may not allow is never written: {}", sent[0]);
        let prompt = (serde_json::to_vec(&chat("tight", false)).unwrap().len() as u64).div_ceil(3);
        assert_eq!(
            sent[1]["max_tokens"],
            1000 - prompt,
            "near the limit the call is held to what is left after its prompt"
        );
    }
}
