//! Amazon Bedrock as the gateway's model host: an Anthropic Messages call sent to
//! `InvokeModel` (or `InvokeModelWithResponseStream`), an OpenAI chat call to `Converse` (or
//! `ConverseStream`, `converse.rs`), signed by the SDK with the AWS credential chain, and each
//! answer given back on its own wire (an event stream's events as server-sent events, as they
//! arrive).

mod converse;

use std::time::Duration;

use agenteval_core::gateway::{HostAnswer, HostCall, HostFailure, HostWire, ModelHost};
use aws_sdk_bedrockruntime::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockruntime::primitives::Blob;
use aws_sdk_bedrockruntime::types::ResponseStream;
use serde_json::{Value, json};

use crate::sdk::{AwsSettings, sdk_config};

/// The Messages API version Bedrock takes in the body (it has no `anthropic-version` header).
const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// Bedrock's runtime, reached with the SDK (its signing, its event-stream framing).
#[derive(Debug, Clone)]
pub struct BedrockHost {
    client: aws_sdk_bedrockruntime::Client,
    /// Where it is reached, for errors.
    endpoint: String,
    credentials: Option<aws_sdk_bedrockruntime::config::SharedCredentialsProvider>,
}

impl BedrockHost {
    /// A client for Bedrock in `region` (else the environment's), at `endpoint_url` (else the
    /// region's), with the credential chain of `settings` (its profile). One try per call: the
    /// gateway retries Bedrock's refusals itself, and counts the wait.
    pub async fn connect(settings: &AwsSettings, region: Option<&str>, endpoint_url: Option<&str>) -> BedrockHost {
        let settings = AwsSettings {
            region: region.map(str::to_string).or_else(|| settings.region.clone()),
            profile: settings.profile.clone(),
            endpoint_url: endpoint_url.map(str::to_string),
            emulator_credentials: false,
        };
        Self::of_sdk(&sdk_config(&settings, 1).await)
    }

    /// A client from a loaded SDK configuration.
    pub fn of_sdk(sdk: &aws_config::SdkConfig) -> BedrockHost {
        let region = sdk.region().map(|r| r.to_string()).unwrap_or_else(|| "no region".into());
        let endpoint = sdk
            .endpoint_url()
            .map(str::to_string)
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_BEDROCK_RUNTIME").ok())
            .unwrap_or_else(|| format!("bedrock-runtime.{region}.amazonaws.com"));
        BedrockHost {
            // A model's answer may take many minutes to write: the gateway's own limits (the
            // task's wall clock) bound a call, not the SDK's deadline for quick API calls.
            client: aws_sdk_bedrockruntime::Client::from_conf(
                aws_sdk_bedrockruntime::config::Builder::from(sdk)
                    .timeout_config(
                        aws_config::timeout::TimeoutConfig::builder()
                            .connect_timeout(std::time::Duration::from_secs(10))
                            .disable_operation_attempt_timeout()
                            .disable_operation_timeout()
                            .build(),
                    )
                    .build(),
            ),
            endpoint,
            credentials: sdk.credentials_provider(),
        }
    }

    /// `doctor`'s check: one signed request to Bedrock, answered. With `model`, an `InvokeModel`
    /// of an empty body, which a model that exists refuses as invalid (nothing is generated or
    /// billed) and proves the endpoint, the signature, the permission to invoke and the model
    /// id; without, a `ListAsyncInvokes` of one item.
    pub async fn probe(&self, model: Option<&str>) -> agenteval_core::Result<String> {
        use agenteval_core::{Error, ErrorKind};
        self.check().await?;
        let at = self.describe();
        let said = |code: &str, message: &str| {
            if message.is_empty() { code.to_string() } else { format!("{code}: {message}") }
        };
        let answer = match model {
            Some(m) => match self
                .client
                .invoke_model()
                .model_id(m)
                .content_type("application/json")
                .accept("application/json")
                .body(Blob::new("{}"))
                .send()
                .await
            {
                Ok(_) => return Ok(format!("{at} answered an invocation of {m}")),
                Err(e) => Probed::of(&e),
            },
            None => match self.client.list_async_invokes().max_results(1).send().await {
                Ok(_) => return Ok(format!("{at} answered a signed request")),
                Err(e) => Probed::of(&e),
            },
        };
        match answer {
            Probed::Service { status, code, message } => match code.as_str() {
                "ValidationException" => Ok(match model {
                    Some(m) => format!(
                        "{at} accepts the credentials and knows {m} (it refused an empty request, as it should)"
                    ),
                    None => format!("{at} accepts the credentials"),
                }),
                "AccessDeniedException" if model.is_none() => Ok(format!(
                    "{at} accepts the signature (this identity may not list async invocations, which runs do not need)"
                )),
                "ResourceNotFoundException" => Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "{at} does not know model {}: {} (check its id in `bedrock.models`, and that the account has access to it)",
                        model.unwrap_or("?"),
                        said(&code, &message)
                    ),
                )),
                "AccessDeniedException"
                | "UnrecognizedClientException"
                | "InvalidSignatureException"
                | "ExpiredTokenException" => Err(Error::new(
                    ErrorKind::Unauthorized,
                    format!("{at} refused the credentials: {}", said(&code, &message)),
                )),
                _ => Err(Error::new(
                    ErrorKind::Transient,
                    format!(
                        "{at} answered HTTP {status}: {}",
                        said(if code.is_empty() { "no error code" } else { &code }, &message)
                    ),
                )),
            },
            Probed::Timeout => {
                Err(Error::new(ErrorKind::Transient, format!("{at} did not answer within its deadline")))
            }
            Probed::Unreachable(why) => {
                Err(Error::new(ErrorKind::Transient, format!("cannot reach {} ({why})", self.endpoint)))
            }
            Probed::Other(why) => Err(Error::new(ErrorKind::Transient, format!("{at}: {why}"))),
        }
    }

    /// Whether the credential chain gives credentials to sign with (nothing is sent).
    pub async fn check(&self) -> agenteval_core::Result<String> {
        use aws_sdk_bedrockruntime::config::ProvideCredentials as _;
        let Some(chain) = &self.credentials else {
            let why = format!("{}: no AWS credential chain is configured", self.describe());
            return Err(agenteval_core::Error::new(agenteval_core::ErrorKind::Unauthorized, why));
        };
        match chain.provide_credentials().await {
            Ok(_) => Ok(format!("{}: calls are signed with AWS credentials from the chain", self.describe())),
            Err(e) => Err(agenteval_core::Error::new(
                agenteval_core::ErrorKind::Unauthorized,
                format!(
                    "{}: no AWS credentials to sign with ({e}; set AWS_PROFILE or AWS_ACCESS_KEY_ID, or run with a role)",
                    self.describe()
                ),
            )),
        }
    }
}

/// What `doctor`'s one request to Bedrock got.
enum Probed {
    Service { status: u16, code: String, message: String },
    Timeout,
    Unreachable(String),
    Other(String),
}

impl Probed {
    fn of<E>(e: &SdkError<E, aws_sdk_bedrockruntime::config::http::HttpResponse>) -> Probed
    where
        E: aws_sdk_bedrockruntime::error::ProvideErrorMetadata + std::error::Error + 'static,
    {
        match e {
            SdkError::ServiceError(se) => Probed::Service {
                status: se.raw().status().as_u16(),
                code: se.err().code().unwrap_or("").to_string(),
                message: se.err().message().unwrap_or("").to_string(),
            },
            SdkError::TimeoutError(_) => Probed::Timeout,
            SdkError::DispatchFailure(_) => {
                Probed::Unreachable(agenteval_core::gateway::reach_failure(&crate::sdk::root_cause(e)))
            }
            other => Probed::Other(crate::sdk::root_cause(other)),
        }
    }
}

#[async_trait::async_trait]
impl ModelHost for BedrockHost {
    fn describe(&self) -> String {
        format!("Amazon Bedrock at {}", self.endpoint)
    }

    async fn invoke(&self, call: HostCall) -> Result<HostAnswer, HostFailure> {
        if call.wire == HostWire::Chat {
            return self.converse(call).await;
        }
        let body = Blob::new(bedrock_body(&call.body, &call.betas));
        if call.stream {
            let sent = self
                .client
                .invoke_model_with_response_stream()
                .model_id(&call.model_id)
                .content_type("application/json")
                .accept("application/json")
                .body(body)
                .send();
            let out = match tokio::time::timeout(call.timeout, sent).await {
                Err(_) => return Err(HostFailure::Timeout),
                Ok(Err(e)) => return refused(e, HostWire::Messages),
                Ok(Ok(out)) => out,
            };
            let (tx, rx) = tokio::sync::mpsc::channel(32);
            let mut events = out.body;
            tokio::spawn(async move {
                loop {
                    let next = match events.recv().await {
                        Ok(Some(ResponseStream::Chunk(part))) => {
                            part.bytes.map(|b| Ok(server_sent(b.as_ref()))).unwrap_or_else(|| Ok(Vec::new()))
                        }
                        Ok(Some(_)) => continue,
                        Ok(None) => break,
                        // An exception in the stream: said as Anthropic says one, then the end.
                        Err(e) => {
                            let message = match &e {
                                SdkError::ServiceError(se) => se.err().message().unwrap_or("").to_string(),
                                other => other.to_string(),
                            };
                            let event = json!({"type": "error", "error": {"type": "api_error", "message": message}});
                            let _ = tx.send(Ok(format!("event: error\ndata: {event}\n\n").into_bytes())).await;
                            break;
                        }
                    };
                    if tx.send(next).await.is_err() {
                        break;
                    }
                }
            });
            return Ok(HostAnswer {
                status: 200,
                content_type: "text/event-stream".into(),
                retry_after: None,
                body: rx,
            });
        }
        let sent = self
            .client
            .invoke_model()
            .model_id(&call.model_id)
            .content_type("application/json")
            .accept("application/json")
            .body(body)
            .send();
        match tokio::time::timeout(call.timeout, sent).await {
            Err(_) => Err(HostFailure::Timeout),
            Ok(Err(e)) => refused(e, HostWire::Messages),
            Ok(Ok(out)) => Ok(HostAnswer::whole(200, out.body.into_inner())),
        }
    }
}

impl BedrockHost {
    /// An OpenAI chat call on `Converse` (`ConverseStream` when streamed).
    async fn converse(&self, call: HostCall) -> Result<HostAnswer, HostFailure> {
        let asked = match converse::asked(&call.body) {
            Ok(a) => a,
            Err(why) => {
                let body = json!({"error": {"type": "invalid_request_error", "message": why}});
                return Ok(HostAnswer::whole(400, body.to_string().into_bytes()));
            }
        };
        let system = (!asked.system.is_empty()).then_some(asked.system);
        if !call.stream {
            let sent = self
                .client
                .converse()
                .model_id(&call.model_id)
                .set_system(system)
                .set_messages(Some(asked.messages))
                .inference_config(asked.inference)
                .set_tool_config(asked.tools)
                .send();
            return match tokio::time::timeout(call.timeout, sent).await {
                Err(_) => Err(HostFailure::Timeout),
                Ok(Err(e)) => refused(e, HostWire::Chat),
                Ok(Ok(out)) => {
                    let c = converse::completion(&asked.model, out.output(), out.stop_reason(), out.usage());
                    Ok(HostAnswer::whole(200, c.to_string().into_bytes()))
                }
            };
        }
        let sent = self
            .client
            .converse_stream()
            .model_id(&call.model_id)
            .set_system(system)
            .set_messages(Some(asked.messages))
            .inference_config(asked.inference)
            .set_tool_config(asked.tools)
            .send();
        let out = match tokio::time::timeout(call.timeout, sent).await {
            Err(_) => return Err(HostFailure::Timeout),
            Ok(Err(e)) => return refused(e, HostWire::Chat),
            Ok(Ok(out)) => out,
        };
        let (tx, rx) = tokio::sync::mpsc::channel(32);
        let (mut events, mut chunks) = (out.stream, converse::Chunks::new(&asked.model));
        tokio::spawn(async move {
            loop {
                let (bytes, last) = match events.recv().await {
                    Ok(Some(event)) => chunks.of(&event),
                    Ok(None) => break,
                    Err(e) => {
                        let message = match &e {
                            SdkError::ServiceError(se) => se.err().message().unwrap_or("").to_string(),
                            other => other.to_string(),
                        };
                        let _ = tx.send(Err(format!("Bedrock's stream broke off: {message}"))).await;
                        break;
                    }
                };
                if !bytes.is_empty() && tx.send(Ok(bytes)).await.is_err() {
                    break;
                }
                if last {
                    break;
                }
            }
        });
        Ok(HostAnswer { status: 200, content_type: "text/event-stream".into(), retry_after: None, body: rx })
    }
}

/// The body Bedrock takes for an Anthropic model: the Messages request without `model` and
/// `stream` (the path and the operation say them), with Bedrock's `anthropic_version` and the
/// beta flags (which Bedrock reads from the body, not a header). The flags are always the
/// gateway's filtered ones: an `anthropic_beta` the agent put in the body is replaced (or
/// removed), never passed on, as a flag in its header that the run does not allow is dropped.
fn bedrock_body(request: &[u8], betas: &[String]) -> Vec<u8> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(request) else { return request.to_vec() };
    body.remove("model");
    body.remove("stream");
    body.remove("anthropic_beta");
    body.entry("anthropic_version").or_insert_with(|| Value::String(BEDROCK_ANTHROPIC_VERSION.into()));
    if !betas.is_empty() {
        body.insert("anthropic_beta".into(), json!(betas));
    }
    serde_json::to_vec(&Value::Object(body)).expect("JSON serializes")
}

/// One chunk of Bedrock's stream (an Anthropic event as JSON) as the server-sent event the
/// Messages wire sends for it.
fn server_sent(event: &[u8]) -> Vec<u8> {
    let kind = serde_json::from_slice::<Value>(event)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "message".into());
    let mut out = format!("event: {kind}\ndata: ").into_bytes();
    out.extend(event.iter().copied().filter(|b| *b != b'\n' && *b != b'\r'));
    out.extend_from_slice(b"\n\n");
    out
}

/// Bedrock refused the call, or could not be reached: its status with an Anthropic-shaped error
/// (the gateway retries what is for now), or why nothing answered.
fn refused<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    e: SdkError<E, aws_sdk_bedrockruntime::config::http::HttpResponse>,
    wire: HostWire,
) -> Result<HostAnswer, HostFailure> {
    match &e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let code = se.err().code().unwrap_or("");
            let message = se.err().message().unwrap_or("");
            let kind = match status {
                429 => "rate_limit_error",
                401 | 403 => "permission_error",
                404 => "not_found_error",
                503 | 529 => "overloaded_error",
                s if s >= 500 => "api_error",
                _ => "invalid_request_error",
            };
            let retry_after = se
                .raw()
                .headers()
                .get("retry-after")
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64);
            let said = if code.is_empty() { message.to_string() } else { format!("Bedrock {code}: {message}") };
            let body = match wire {
                HostWire::Messages => json!({"type": "error", "error": {"type": kind, "message": said}}),
                HostWire::Chat => json!({"error": {"type": kind, "code": code, "message": said}}),
            };
            let mut answer = HostAnswer::whole(status, body.to_string().into_bytes());
            answer.retry_after = retry_after;
            Ok(answer)
        }
        SdkError::TimeoutError(_) => Err(HostFailure::Timeout),
        SdkError::DispatchFailure(_) => {
            Err(HostFailure::Connect(agenteval_core::gateway::reach_failure(&crate::sdk::root_cause(&e))))
        }
        _ => Err(HostFailure::Connect(crate::sdk::kind_and_detail(&e).1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_bedrock_takes_has_no_model_or_stream_and_names_its_version_and_betas() {
        let sent = br#"{"model":"claude-sonnet-4-5","stream":true,"max_tokens":5,"messages":[]}"#;
        let body: Value = serde_json::from_slice(&bedrock_body(sent, &["fine-grained-tool-streaming".into()])).unwrap();
        assert_eq!(
            body,
            json!({"max_tokens": 5, "messages": [], "anthropic_version": "bedrock-2023-05-31",
                   "anthropic_beta": ["fine-grained-tool-streaming"]})
        );
        // Not JSON: sent as it is, for Bedrock to refuse.
        assert_eq!(bedrock_body(b"nope", &[]), b"nope");
        // The agent's own flags in the body never reach Bedrock: only the filtered ones do.
        let smuggled = br#"{"max_tokens":5,"messages":[],"anthropic_beta":["computer-use-2025-01-24"]}"#;
        let body: Value = serde_json::from_slice(&bedrock_body(smuggled, &[])).unwrap();
        assert!(body.get("anthropic_beta").is_none(), "{body}");
        let body: Value =
            serde_json::from_slice(&bedrock_body(smuggled, &["fine-grained-tool-streaming".into()])).unwrap();
        assert_eq!(body["anthropic_beta"], json!(["fine-grained-tool-streaming"]), "{body}");
    }

    /// A host signing with the stand-in's key for `region`, at the stand-in.
    async fn host(mock: &agenteval_testkit::llm_mock::MockLlm, region: &str) -> BedrockHost {
        host_with(mock, region, agenteval_testkit::llm_mock::bedrock::BEDROCK_SECRET_KEY).await
    }

    async fn host_with(mock: &agenteval_testkit::llm_mock::MockLlm, region: &str, secret: &str) -> BedrockHost {
        use agenteval_testkit::llm_mock::bedrock::BEDROCK_ACCESS_KEY;
        let settings = AwsSettings {
            region: Some(region.into()),
            endpoint_url: Some(format!("http://{}", mock.addr)),
            ..AwsSettings::default()
        };
        let key =
            aws_sdk_bedrockruntime::config::Credentials::new(BEDROCK_ACCESS_KEY, secret.to_string(), None, None, "t");
        let sdk = sdk_config(&settings, 1)
            .await
            .into_builder()
            .credentials_provider(aws_sdk_bedrockruntime::config::SharedCredentialsProvider::new(key))
            .build();
        BedrockHost::of_sdk(&sdk)
    }

    async fn read(mut a: HostAnswer) -> String {
        let mut out = Vec::new();
        while let Some(chunk) = a.body.recv().await {
            out.extend(chunk.unwrap());
        }
        String::from_utf8(out).unwrap()
    }

    fn call(stream: bool) -> HostCall {
        HostCall {
            wire: HostWire::Messages,
            model_id: "us.anthropic.claude-sonnet-4-5-20250929-v1:0".into(),
            body: serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "stream": stream, "max_tokens": 50,
                "messages": [{"role": "user", "content": "hello bedrock"}]}))
            .unwrap(),
            stream,
            betas: Vec::new(),
            timeout: Duration::from_secs(20),
        }
    }

    #[tokio::test]
    async fn invoke_and_its_stream_reach_the_stand_in_signed_and_come_back_on_anthropics_wire() {
        let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
        let bedrock = host(&mock, agenteval_testkit::llm_mock::bedrock::BEDROCK_REGION).await;
        let whole = bedrock.invoke(call(false)).await.unwrap();
        assert_eq!((whole.status, whole.content_type.as_str()), (200, "application/json"));
        let v: Value = serde_json::from_str(&read(whole).await).unwrap();
        assert_eq!(v["content"][0]["text"], "echo: hello bedrock", "{v}");
        let streamed = bedrock.invoke(call(true)).await.unwrap();
        assert_eq!(streamed.content_type, "text/event-stream");
        let sse = read(streamed).await;
        assert!(sse.starts_with("event: message_start\ndata: {"), "{sse}");
        assert!(sse.contains("\"amazon-bedrock-invocationMetrics\":{"), "{sse}");
        let seen = mock.received();
        let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "bedrock:invoke:us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                "bedrock:stream:us.anthropic.claude-sonnet-4-5-20250929-v1:0"
            ]
        );
        assert!(
            seen[0].credential.as_deref().unwrap().starts_with("AWS4-HMAC-SHA256 Credential=AKIDAGENTEVALBEDROCK/")
        );

        // Signed for another region: refused as Bedrock refuses it, in Anthropic's shape.
        let elsewhere = host(&mock, "eu-west-1").await;
        let refused = elsewhere.invoke(call(false)).await.unwrap();
        assert_eq!(refused.status, 403);
        let said = read(refused).await;
        assert!(said.contains("permission_error") && said.contains("InvalidSignatureException"), "{said}");
        // Signed with another secret: the signature does not match.
        let forged = host_with(&mock, agenteval_testkit::llm_mock::bedrock::BEDROCK_REGION, "not-the-secret").await;
        let said = read(forged.invoke(call(true)).await.unwrap()).await;
        assert!(said.contains("signature we calculated does not match"), "{said}");
        // Nothing listening: no answer, said so.
        let gone = {
            let settings = AwsSettings {
                region: Some("us-west-2".into()),
                endpoint_url: Some("http://127.0.0.1:9".into()),
                ..AwsSettings::default()
            };
            BedrockHost::of_sdk(&sdk_config(&settings, 1).await)
        };
        assert!(matches!(gone.invoke(call(false)).await, Err(HostFailure::Connect(_))));
    }

    #[tokio::test]
    async fn converse_and_its_stream_come_back_as_chat_completions_with_tool_calls() {
        let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
        let bedrock = host(&mock, agenteval_testkit::llm_mock::bedrock::BEDROCK_REGION).await;
        let chat = |stream: bool| HostCall {
            wire: HostWire::Chat,
            model_id: "meta.llama3-3-70b-instruct-v1:0".into(),
            body: serde_json::to_vec(&json!({"model": "llama-3.3-70b", "stream": stream,
                "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "USE_TOOL please"}],
                "tools": [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]}))
            .unwrap(),
            stream,
            betas: Vec::new(),
            timeout: Duration::from_secs(20),
        };
        let whole: Value = serde_json::from_str(&read(bedrock.invoke(chat(false)).await.unwrap()).await).unwrap();
        assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls", "{whole}");
        let call = &whole["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "python", "{whole}");
        assert_eq!(
            serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(),
            json!({"code": "print(6 * 7)"})
        );
        assert_eq!(
            (whole["usage"]["prompt_tokens"].as_u64(), whole["usage"]["completion_tokens"].as_u64()),
            (Some(10), Some(5))
        );
        let sse = read(bedrock.invoke(chat(true)).await.unwrap()).await;
        assert!(sse.contains("\"function\":{\"name\":\"python\",\"arguments\":\"\"}"), "{sse}");
        assert!(sse.contains("\"finish_reason\":\"tool_calls\""), "{sse}");
        assert!(
            sse.contains("\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5")
                && sse.ends_with("data: [DONE]\n\n"),
            "{sse}"
        );
        let seen: Vec<String> = mock.received().into_iter().map(|r| r.path).collect();
        assert_eq!(
            seen,
            [
                "bedrock:converse:meta.llama3-3-70b-instruct-v1:0",
                "bedrock:converse-stream:meta.llama3-3-70b-instruct-v1:0"
            ]
        );
        // The system prompt reached the model as a system message.
        assert_eq!(mock.received()[0].body["messages"][0], json!({"role": "system", "content": "be brief"}));
    }

    #[test]
    fn a_chunk_becomes_the_server_sent_event_of_its_type() {
        let out = server_sent(br#"{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":3}}"#);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: message_stop\ndata: {\"type\":\"message_stop\",\"amazon-bedrock-invocationMetrics\":{\"inputTokenCount\":3}}\n\n"
        );
    }
}
