//! The HTTP client: one call of a chat API with retries (exponential backoff with full jitter,
//! `Retry-After` honoured, a bounded number of attempts).

use std::time::Duration;

use agenteval_core::secret::Secret;
use reqwest::header::{HeaderMap, HeaderValue};

use crate::error::{LlmError, is_retryable_status};
use crate::spec::{ModelSpec, Provider};
use crate::types::{ChatRequest, ChatResponse};
use crate::wire;

/// How failed calls are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Backoff before the second attempt; it doubles with each further one.
    pub base_delay: Duration,
    /// Longest wait between attempts, `Retry-After` included.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 5, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(60) }
    }
}

/// A chat client for one model.
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    /// The key's header, sent with every call (kept apart from the HTTP client, so that a client
    /// for another key shares its connections).
    auth: Option<(reqwest::header::HeaderName, HeaderValue)>,
    /// Calls go to the model gateway of this very process, without a connection.
    local: Option<std::sync::Arc<dyn agenteval_core::gateway::LocalCall>>,
    /// Calls go to a cloud's model host (Amazon Bedrock) for this model id, signed by it, each
    /// within this time.
    hosted: Option<(std::sync::Arc<dyn agenteval_core::gateway::ModelHost>, String, Duration)>,
    spec: ModelSpec,
    /// The `model` sent in place of the spec's name (an Azure deployment).
    sent_model: Option<String>,
    url: String,
    host: String,
    retry: RetryPolicy,
}

impl std::fmt::Debug for LlmClient {
    // The headers hold the key: only the model and the endpoint are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient").field("model", &self.spec.name).field("url", &self.url).finish_non_exhaustive()
    }
}

impl LlmClient {
    /// A client for `spec` at `base_url` (or the provider's own), sending `key` if given.
    pub fn new(
        spec: ModelSpec,
        base_url: Option<&str>,
        key: Option<&Secret>,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<Self, LlmError> {
        let base = base_url.or(spec.provider.default_base_url()).ok_or_else(|| {
            LlmError::Config(format!("model `{}` is openai-compatible: it needs a `base_url`", spec.name))
        })?;
        let base = base.trim_end_matches('/');
        let url = match spec.provider {
            Provider::Anthropic => format!("{base}/messages"),
            Provider::OpenAi | Provider::OpenAiCompatible => format!("{base}/chat/completions"),
        };
        let host = url.split("://").nth(1).and_then(|r| r.split('/').next()).unwrap_or("").to_string();
        let mut headers = HeaderMap::new();
        let auth = match key {
            Some(key) => Some(auth_header(&spec, key)?),
            None => None,
        };
        if key.is_none() && spec.provider.needs_key() {
            return Err(LlmError::Config(format!(
                "no API key for {}: set the secret {} (see docs/agents.md)",
                spec.provider.as_str(),
                spec.provider.key_var()
            )));
        }
        if spec.provider == Provider::Anthropic {
            headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(10).min(timeout))
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(LlmClient { http, auth, local: None, hosted: None, spec, sent_model: None, url, host, retry })
    }

    /// A client for an `openai:` `spec` served by an Azure OpenAI resource: its deployment (as
    /// `model` on the v1 API, in the path on a dated one), its `api-key` or Entra token.
    pub fn on_azure(
        spec: ModelSpec,
        azure: &agenteval_core::config::AzureEndpoint,
        key: Option<&Secret>,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<Self, LlmError> {
        if spec.provider != Provider::OpenAi {
            return Err(LlmError::Config("Azure OpenAI serves `openai:` models".into()));
        }
        let Some(key) = key else {
            return Err(LlmError::Config(format!(
                "no Azure OpenAI credential: set the secret {} (see docs/agents.md)",
                azure.secret()
            )));
        };
        let base = azure.base_url.trim_end_matches('/');
        let deployment = azure.deployment(&spec.name).to_string();
        let url = match &azure.api_version {
            Some(v) => format!("{base}/openai/deployments/{deployment}/chat/completions?api-version={v}"),
            None => format!("{base}/openai/v1/chat/completions"),
        };
        let bad = |_| LlmError::Config("the Azure OpenAI credential is not a valid header value".into());
        let (name, mut value) = if azure.entra() {
            (reqwest::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(bad)?)
        } else {
            (reqwest::header::HeaderName::from_static("api-key"), HeaderValue::from_str(key.expose()).map_err(bad)?)
        };
        value.set_sensitive(true);
        let client = LlmClient::new(spec, Some(base), Some(key), timeout, retry)?;
        Ok(LlmClient { auth: Some((name, value)), sent_model: Some(deployment), url, ..client })
    }

    /// A client for an `anthropic:` `spec` served by `host` (Amazon Bedrock) as `model_id`: no
    /// key, no URL of its own.
    pub fn on_host(
        spec: ModelSpec,
        host: std::sync::Arc<dyn agenteval_core::gateway::ModelHost>,
        model_id: &str,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<Self, LlmError> {
        if spec.provider != Provider::Anthropic {
            return Err(LlmError::Config(format!("{} serves `anthropic:` models here", host.describe())));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        let described = host.describe();
        Ok(LlmClient {
            http,
            auth: None,
            local: None,
            hosted: Some((host, model_id.to_string(), timeout)),
            spec,
            sent_model: None,
            url: described.clone(),
            host: described,
            retry,
        })
    }

    /// The same client (its connections shared) sending `key` instead.
    pub fn with_key(&self, key: &Secret) -> Result<LlmClient, LlmError> {
        Ok(LlmClient { auth: Some(auth_header(&self.spec, key)?), ..self.clone() })
    }

    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The same client, calling the gateway of this process at `local` instead of its URL.
    pub fn through(&self, local: std::sync::Arc<dyn agenteval_core::gateway::LocalCall>) -> LlmClient {
        LlmClient { local: Some(local), ..self.clone() }
    }

    /// The URL it posts to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Says in one INFO line how this client's calls travel; `who` names the caller.
    pub fn say_transport(&self, who: &str) {
        use agenteval_core::config::{host_in, posture};
        tracing::info!("transport: {who} calls {} over {}", host_in(&self.url), posture(&self.url));
    }

    /// Sends one call, retrying what is worth retrying.
    pub async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let provider = self.spec.provider.as_str();
        let mut body = match self.spec.provider {
            Provider::Anthropic => wire::anthropic_request(req),
            Provider::OpenAi | Provider::OpenAiCompatible => wire::openai_request(req),
        };
        if let Some(model) = &self.sent_model {
            body["model"] = serde_json::Value::String(model.clone());
        }
        let body = serde_json::to_vec(&body).expect("JSON serializes");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = attempt >= self.retry.max_attempts;
            let reply = match self.send(&body).await {
                Ok(r) => r,
                Err(reason) if last => {
                    return Err(LlmError::Unreachable { provider, host: self.host.clone(), reason, attempts: attempt });
                }
                Err(_) => {
                    tokio::time::sleep(self.backoff(attempt, None)).await;
                    continue;
                }
            };
            if (200..300).contains(&reply.status) {
                let bytes = match reply.body {
                    Ok(b) => b,
                    Err(_) if !last => {
                        tokio::time::sleep(self.backoff(attempt, None)).await;
                        continue;
                    }
                    Err(reason) => {
                        return Err(LlmError::Decode { provider, reason: format!("reading the body: {reason}") });
                    }
                };
                let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| LlmError::Decode {
                    provider,
                    reason: format!("not JSON ({} bytes; {})", bytes.len(), e.classify_name()),
                })?;
                let parsed = match self.spec.provider {
                    Provider::Anthropic => wire::anthropic_response(&value),
                    Provider::OpenAi | Provider::OpenAiCompatible => wire::openai_response(&value),
                };
                let mut parsed = parsed.map_err(|e| LlmError::Decode { provider, reason: e.0 })?;
                wire::structured_answer(req, &mut parsed);
                return Ok(parsed);
            }
            // The model gateway could not reach the provider: said as if this client had not.
            if let Some((host, reason)) = reply
                .headers
                .get(crate::GATEWAY_UNREACHABLE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split_once("; "))
                .map(|(h, r)| (h.to_string(), r.to_string()))
            {
                if !last {
                    tokio::time::sleep(self.backoff(attempt, None)).await;
                    continue;
                }
                return Err(LlmError::Unreachable { provider, host, reason, attempts: attempt });
            }
            if is_retryable_status(reply.status) && !last {
                tokio::time::sleep(self.backoff(attempt, retry_after(&reply.headers))).await;
                continue;
            }
            let detail = error_code(reply.body.as_deref().unwrap_or_default());
            return Err(LlmError::Status { provider, status: reply.status, detail, attempts: attempt });
        }
    }

    /// One attempt: over HTTP, or to the gateway of this process (the same door, no
    /// connection). `Err`: no answer at all, and why.
    async fn send(&self, body: &[u8]) -> Result<Reply, String> {
        if let Some((host, model_id, timeout)) = &self.hosted {
            return hosted(host.as_ref(), model_id, body, *timeout).await;
        }
        if let Some(local) = &self.local {
            let path = match self.spec.provider {
                Provider::Anthropic => "/v1/messages",
                Provider::OpenAi | Provider::OpenAiCompatible => "/v1/chat/completions",
            };
            let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
            if let Some((name, value)) = &self.auth {
                headers.push((name.to_string(), value.to_str().unwrap_or_default().to_string()));
            }
            let posted = local.post(path, headers, body.to_vec()).await.map_err(|e| e.to_string())?;
            let mut map = HeaderMap::new();
            for (k, v) in &posted.headers {
                if let (Ok(k), Ok(v)) =
                    (reqwest::header::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v))
                {
                    map.insert(k, v);
                }
            }
            return Ok(Reply { status: posted.status, headers: map, body: Ok(posted.body) });
        }
        let mut post =
            self.http.post(&self.url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body.to_vec());
        if let Some((name, value)) = &self.auth {
            post = post.header(name.clone(), value.clone());
        }
        let resp = post.send().await.map_err(|e| {
            if e.is_timeout() {
                "timed out".to_string()
            } else if e.is_connect() {
                let mut last: &(dyn std::error::Error + 'static) = &e;
                while let Some(next) = last.source() {
                    last = next;
                }
                agenteval_core::gateway::reach_failure(&last.to_string())
            } else {
                "the request failed".to_string()
            }
        })?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.map(|b| b.to_vec()).map_err(|e| kind_of(&e).to_string());
        Ok(Reply { status, headers, body })
    }

    /// The wait before attempt `attempt + 1`: what the server asked for, else full jitter over
    /// an exponentially growing window; never past `max_delay`.
    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(d) = retry_after {
            return d.min(self.retry.max_delay);
        }
        let window = self.retry.base_delay.saturating_mul(1u32 << (attempt - 1).min(16)).min(self.retry.max_delay);
        window.mul_f64(jitter())
    }
}

/// One call to a cloud's model host, its whole answer read.
async fn hosted(
    host: &dyn agenteval_core::gateway::ModelHost,
    model_id: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Reply, String> {
    use agenteval_core::gateway::{HostCall, HostFailure, HostWire};
    let call = HostCall {
        wire: HostWire::Messages,
        model_id: model_id.into(),
        body: body.to_vec(),
        stream: false,
        betas: Vec::new(),
        timeout,
    };
    let mut answer = host.invoke(call).await.map_err(|f| match f {
        HostFailure::Timeout => "timed out".to_string(),
        HostFailure::Connect(why) => why,
    })?;
    let mut whole = Vec::new();
    let mut broke = None;
    while let Some(chunk) = answer.body.recv().await {
        match chunk {
            Ok(c) => whole.extend(c),
            Err(e) => broke = Some(e),
        }
    }
    let mut headers = HeaderMap::new();
    if let Some(d) = answer.retry_after
        && let Ok(v) = HeaderValue::from_str(&format!("{}", d.as_secs_f64()))
    {
        headers.insert("retry-after", v);
    }
    Ok(Reply { status: answer.status, headers, body: broke.map_or(Ok(whole), Err) })
}

/// The header that carries `key` for `spec`'s provider, marked sensitive.
fn auth_header(spec: &ModelSpec, key: &Secret) -> Result<(reqwest::header::HeaderName, HeaderValue), LlmError> {
    let bad = |_| LlmError::Config(format!("the {} key is not a valid header value", spec.provider.as_str()));
    let (name, mut value) = match spec.provider {
        Provider::Anthropic => {
            (reqwest::header::HeaderName::from_static("x-api-key"), HeaderValue::from_str(key.expose()).map_err(bad)?)
        }
        Provider::OpenAi | Provider::OpenAiCompatible => {
            (reqwest::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(bad)?)
        }
    };
    value.set_sensitive(true);
    Ok((name, value))
}

/// One attempt's answer, however it was sent.
struct Reply {
    status: u16,
    headers: HeaderMap,
    /// The body, or why it could not be read to its end.
    body: Result<Vec<u8>, String>,
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "i/o",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected data",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}

fn kind_of(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() { "timed out" } else { "connection lost" }
}

/// A number in [0.5, 1): half the window is always waited, so retries never stampede at once.
fn jitter() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ seed;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    0.5 + (x >> 11) as f64 / (1u64 << 53) as f64 / 2.0
}

/// `Retry-After` in seconds (or OpenAI's `retry-after-ms`). An HTTP date is not honoured: the
/// exponential backoff applies instead.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok());
    if let Some(ms) = get("retry-after-ms").filter(|v| v.is_finite() && *v >= 0.0) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    get("retry-after").filter(|v| v.is_finite() && *v >= 0.0).map(|s| Duration::from_secs_f64(s.min(3600.0)))
}

/// The provider's error type or code, when it is a short identifier: the message itself may
/// quote the request (or a masked key), so it is never shown.
fn error_code(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else { return String::new() };
    let code = ["/error/code", "/error/type", "/type"]
        .iter()
        .filter_map(|p| v.pointer(p).and_then(|c| c.as_str()))
        .find(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    code.map(|c| format!(" ({c})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_seconds_or_milliseconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut d = HeaderMap::new();
        d.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&d), None);
    }

    #[test]
    fn jitter_stays_in_the_upper_half() {
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.5..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let spec = ModelSpec::parse("openai:gpt-4o-mini").unwrap();
        let key = Secret::new("sk-test-abcdefghijklmnopqrstuvwx");
        let c = LlmClient::new(spec, None, Some(&key), Duration::from_secs(5), RetryPolicy::default()).unwrap();
        assert!(!format!("{c:?}").contains("abcdefgh"));
        let spec = ModelSpec::parse("anthropic:claude-3-5-haiku-latest").unwrap();
        let e = LlmClient::new(spec, None, None, Duration::from_secs(5), RetryPolicy::default()).unwrap_err();
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
    }
}
