//! The mock model server as Amazon Bedrock's runtime: `POST /model/{id}/invoke` and
//! `/model/{id}/invoke-with-response-stream` for Anthropic models, answered from the same script
//! as Anthropic's Messages wire, framed as Bedrock frames them (a whole JSON answer, or the
//! `application/vnd.amazon.eventstream` binary framing whose `chunk` events carry each Anthropic
//! event base64-encoded, the last with `amazon-bedrock-invocationMetrics`); and `Converse`
//! (`/model/{id}/converse`, `/model/{id}/converse-stream`) for the others, answered from the
//! script of OpenAI's chat wire, in Converse's JSON and its stream's typed events.
//!
//! Like Bedrock, it refuses a call not SigV4-signed for [`BEDROCK_REGION`] and the `bedrock`
//! service with [`BEDROCK_ACCESS_KEY`]'s secret (or the AWS stand-in's task role's) (403), and a body that names `model` or
//! `stream` or lacks `anthropic_version: bedrock-2023-05-31` (400). Calls are recorded as
//! `bedrock:invoke:<id>` or `bedrock:stream:<id>`, with the `Authorization` header as their
//! credential.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Response, StatusCode, Uri};
use axum::routing::post;
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{State, answer_as};

/// The region the stand-in serves: a call signed for another is refused.
pub const BEDROCK_REGION: &str = "us-west-2";
/// The access key it knows, and its secret: give them to the process under test as
/// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
pub const BEDROCK_ACCESS_KEY: &str = "AKIDAGENTEVALBEDROCK";
pub const BEDROCK_SECRET_KEY: &str = "agenteval-bedrock-stand-in-secret";
/// `cmd` with the credentials the stand-in knows, as the AWS credential chain finds them first
/// (no profile of the machine's, no instance metadata asked for).
pub fn signing_for_stand_in(cmd: &mut std::process::Command) -> &mut std::process::Command {
    cmd.env("AWS_ACCESS_KEY_ID", BEDROCK_ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", BEDROCK_SECRET_KEY)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
}

/// The credentials the AWS stand-in's fleet gives its tasks (their task role, as
/// `tests/aws/fake_fargate.py` sets them): the stand-in knows these too.
const TASK_ROLE: (&str, &str) = ("test", "test");

pub(crate) fn routes(state: Arc<Mutex<State>>, latency: Duration) -> axum::Router {
    let (s2, s3, s4) = (state.clone(), state.clone(), state.clone());
    axum::Router::new()
        .route(
            "/model/{id}/converse",
            post(move |uri: Uri, h: HeaderMap, b: Bytes| converse(s3.clone(), latency, false, uri, h, b)),
        )
        .route(
            "/model/{id}/converse-stream",
            post(move |uri: Uri, h: HeaderMap, b: Bytes| converse(s4.clone(), latency, true, uri, h, b)),
        )
        .route(
            "/model/{id}/invoke",
            post(move |uri: Uri, h: HeaderMap, b: Bytes| invoke(state.clone(), latency, false, uri, h, b)),
        )
        .route(
            "/model/{id}/invoke-with-response-stream",
            post(move |uri: Uri, h: HeaderMap, b: Bytes| invoke(s2.clone(), latency, true, uri, h, b)),
        )
}

/// The model id a call names (`/model/{id}/…`), once its signature checks out; else
/// Bedrock's refusal.
fn signed_model_id(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Result<String, Box<Response<Body>>> {
    verify_sigv4("POST", uri, headers, body)
        .map_err(|why| Box::new(error(StatusCode::FORBIDDEN, "InvalidSignatureException", &why)))?;
    Ok(percent_decode(uri.path().split('/').nth(2).unwrap_or("")))
}

async fn invoke(
    state: Arc<Mutex<State>>,
    latency: Duration,
    stream: bool,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let id = match signed_model_id(&uri, &headers, &body) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "ValidationException", "Malformed input request");
    };
    for key in ["model", "stream"] {
        if request.contains_key(key) {
            let why = format!("Malformed input request: #: extraneous key [{key}] is not permitted");
            return error(StatusCode::BAD_REQUEST, "ValidationException", &why);
        }
    }
    if request.remove("anthropic_version") != Some(json!("bedrock-2023-05-31")) {
        let why = "Malformed input request: #: required key [anthropic_version] not found";
        return error(StatusCode::BAD_REQUEST, "ValidationException", why);
    }
    request.insert("model".into(), json!(id));
    if stream {
        request.insert("stream".into(), json!(true));
    }
    let mut asked = HeaderMap::new();
    if let Some(a) = headers.get("authorization") {
        asked.insert("x-credential", a.clone());
    }
    let label = format!("bedrock:{}:{id}", if stream { "stream" } else { "invoke" });
    let answered =
        answer_as(state, latency, "anthropic", label, asked, Bytes::from(Value::Object(request).to_string())).await;
    let status = answered.status();
    let bytes = axum::body::to_bytes(answered.into_body(), usize::MAX).await.unwrap_or_default();
    if status == StatusCode::TOO_MANY_REQUESTS {
        return error(status, "ThrottlingException", "Too many requests, please wait before trying again.");
    }
    if !status.is_success() {
        return error(status, "InternalServerException", &String::from_utf8_lossy(&bytes));
    }
    if !stream {
        let usage = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| v.get("usage").cloned());
        let count = |k: &str| usage.as_ref().and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
        return Response::builder()
            .header("content-type", "application/json")
            .header("x-amzn-bedrock-input-token-count", count("input_tokens").to_string())
            .header("x-amzn-bedrock-output-token-count", count("output_tokens").to_string())
            .body(Body::from(bytes))
            .unwrap();
    }
    Response::builder()
        .header("content-type", "application/vnd.amazon.eventstream")
        .body(Body::from(event_stream(&String::from_utf8_lossy(&bytes))))
        .unwrap()
}

/// `Converse`: the request as OpenAI's chat wire, answered by the script, the answer as
/// Converse's JSON or its stream's events.
async fn converse(
    state: Arc<Mutex<State>>,
    latency: Duration,
    stream: bool,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let id = match signed_model_id(&uri, &headers, &body) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "ValidationException", "Malformed input request");
    };
    if request.get("messages").and_then(Value::as_array).is_none_or(|m| m.is_empty()) {
        return error(StatusCode::BAD_REQUEST, "ValidationException", "messages: at least one is required");
    }
    let mut asked = HeaderMap::new();
    if let Some(a) = headers.get("authorization") {
        asked.insert("x-credential", a.clone());
    }
    let label = format!("bedrock:{}:{id}", if stream { "converse-stream" } else { "converse" });
    let chat = chat_of(&request, &id);
    let answered = answer_as(state, latency, "openai", label, asked, Bytes::from(chat.to_string())).await;
    let status = answered.status();
    let bytes = axum::body::to_bytes(answered.into_body(), usize::MAX).await.unwrap_or_default();
    if status == StatusCode::TOO_MANY_REQUESTS {
        return error(status, "ThrottlingException", "Too many requests, please wait before trying again.");
    }
    if !status.is_success() {
        return error(status, "InternalServerException", &String::from_utf8_lossy(&bytes));
    }
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let (content, stop, usage) = converse_answer(&answer);
    if !stream {
        let out = json!({"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
                         "usage": usage, "metrics": {"latencyMs": 10}});
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(out.to_string()))
            .unwrap();
    }
    let mut events = vec![("messageStart", json!({"role": "assistant"}))];
    for (i, block) in content.iter().enumerate() {
        if let Some(text) = block.get("text") {
            events.push(("contentBlockDelta", json!({"contentBlockIndex": i, "delta": {"text": text}})));
        } else if let Some(u) = block.get("toolUse") {
            let start = json!({"toolUse": {"toolUseId": u["toolUseId"], "name": u["name"]}});
            events.push(("contentBlockStart", json!({"contentBlockIndex": i, "start": start})));
            let input = u["input"].to_string();
            events.push(("contentBlockDelta", json!({"contentBlockIndex": i, "delta": {"toolUse": {"input": input}}})));
        }
        events.push(("contentBlockStop", json!({"contentBlockIndex": i})));
    }
    events.push(("messageStop", json!({"stopReason": stop})));
    events.push(("metadata", json!({"usage": usage, "metrics": {"latencyMs": 10}})));
    let mut out = Vec::new();
    for (kind, payload) in events {
        let headers = [(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")];
        out.extend(frame(&headers, payload.to_string().as_bytes()));
    }
    Response::builder().header("content-type", "application/vnd.amazon.eventstream").body(Body::from(out)).unwrap()
}

/// A Converse request as the chat request the script answers.
fn chat_of(request: &Value, model: &str) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    let system: Vec<&str> = request
        .get("system")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect();
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system.join("\n")}));
    }
    for m in request["messages"].as_array().into_iter().flatten() {
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n");
        for r in blocks.iter().filter_map(|b| b.get("toolResult")) {
            let said: String =
                r["content"].as_array().into_iter().flatten().filter_map(|c| c["text"].as_str()).collect();
            messages.push(json!({"role": "tool", "tool_call_id": r["toolUseId"], "content": said}));
        }
        let calls: Vec<Value> = blocks
            .iter()
            .filter_map(|b| b.get("toolUse"))
            .map(|u| {
                json!({"id": u["toolUseId"], "type": "function",
                            "function": {"name": u["name"], "arguments": u["input"].to_string()}})
            })
            .collect();
        if !calls.is_empty() {
            messages.push(json!({"role": "assistant", "content": text, "tool_calls": calls}));
        } else if !text.is_empty() {
            messages.push(json!({"role": m["role"], "content": text}));
        }
    }
    let tools: Vec<Value> = request
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("toolSpec"))
        .map(|s| {
            json!({"type": "function", "function": {"name": s["name"], "description": s["description"],
                                                          "parameters": s["inputSchema"]["json"]}})
        })
        .collect();
    let mut chat = json!({"model": model, "messages": messages});
    if !tools.is_empty() {
        chat["tools"] = Value::Array(tools);
    }
    chat
}

/// The script's chat completion as Converse's content blocks, stop reason and usage.
fn converse_answer(answer: &Value) -> (Vec<Value>, &'static str, Value) {
    let message = &answer["choices"][0]["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let input: Value =
            call["function"]["arguments"].as_str().and_then(|a| serde_json::from_str(a).ok()).unwrap_or(json!({}));
        content.push(json!({"toolUse": {"toolUseId": call["id"], "name": call["function"]["name"], "input": input}}));
    }
    let stop = match answer["choices"][0]["finish_reason"].as_str() {
        Some("tool_calls") => "tool_use",
        Some("length") => "max_tokens",
        _ => "end_turn",
    };
    let n = |k: &str| answer["usage"][k].as_u64().unwrap_or(0);
    let usage = json!({"inputTokens": n("prompt_tokens"), "outputTokens": n("completion_tokens"),
                       "totalTokens": n("prompt_tokens") + n("completion_tokens")});
    (content, stop, usage)
}

/// Anthropic's server-sent events as Bedrock's event stream: one `chunk` message per event, its
/// JSON base64-encoded in `{"bytes": …}`; the last event carries Bedrock's own count.
fn event_stream(sse: &str) -> Vec<u8> {
    let events: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let (mut input, mut output) = (0, 0);
    let mut out = Vec::new();
    for mut event in events {
        if let Some(n) = event.pointer("/message/usage/input_tokens").and_then(Value::as_u64) {
            input = n;
        }
        if let Some(n) = event.pointer("/usage/output_tokens").and_then(Value::as_u64) {
            output = n;
        }
        if event["type"] == "message_stop" {
            event["amazon-bedrock-invocationMetrics"] = json!({
                "inputTokenCount": input, "outputTokenCount": output,
                "invocationLatency": 10, "firstByteLatency": 5,
            });
        }
        let payload = json!({"bytes": base64::engine::general_purpose::STANDARD.encode(event.to_string())});
        out.extend(frame(
            &[(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")],
            payload.to_string().as_bytes(),
        ));
    }
    out
}

/// One message of the event-stream framing: total and headers lengths, their CRC32, the headers
/// (each a name, type 7 for a string, and a value), the payload, and the whole message's CRC32.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = 12 + h.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// An error as Bedrock's REST JSON protocol says one: its type in `x-amzn-ErrorType`, a message.
fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let mut r = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-amzn-errortype", format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"));
    if status == StatusCode::TOO_MANY_REQUESTS {
        r = r.header("retry-after", "1");
    }
    r.body(Body::from(json!({"message": message}).to_string())).unwrap()
}

/// Checks the request's AWS Signature Version 4 as AWS does, from its own canonical request.
fn verify_sigv4(method: &str, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Result<(), String> {
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    let auth = header("authorization").ok_or("Missing Authentication Token")?;
    let rest = auth.strip_prefix("AWS4-HMAC-SHA256 ").ok_or("not an AWS4-HMAC-SHA256 signature")?;
    let mut parts = std::collections::HashMap::new();
    for p in rest.split(',') {
        if let Some((k, v)) = p.trim().split_once('=') {
            parts.insert(k, v);
        }
    }
    let (credential, signed, signature) =
        match (parts.get("Credential"), parts.get("SignedHeaders"), parts.get("Signature")) {
            (Some(c), Some(s), Some(g)) => (*c, *s, *g),
            _ => return Err("an incomplete Authorization header".into()),
        };
    let scope: Vec<&str> = credential.split('/').collect();
    let [key, date, region, service, "aws4_request"] = scope[..] else {
        return Err(format!("a malformed credential scope `{credential}`"));
    };
    let secret = match key {
        BEDROCK_ACCESS_KEY => BEDROCK_SECRET_KEY,
        k if k == TASK_ROLE.0 => TASK_ROLE.1,
        _ => return Err("The security token included in the request is invalid.".into()),
    };
    if region != BEDROCK_REGION || service != "bedrock" {
        return Err(format!(
            "Credential should be scoped to a valid region and service: signed for {region}/{service}, not {BEDROCK_REGION}/bedrock"
        ));
    }
    let amz_date = header("x-amz-date").ok_or("no x-amz-date")?;
    let mut canonical_headers = String::new();
    for name in signed.split(';') {
        let value = header(name).ok_or(format!("signed header `{name}` is missing"))?;
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let body_hash = hex(&sha2::Sha256::digest(body));
    let payload = match header("x-amz-content-sha256") {
        Some(h) if h != "UNSIGNED-PAYLOAD" && h != body_hash => return Err("the body is not the one signed".into()),
        Some(h) => h.to_string(),
        None => body_hash,
    };
    let mut query: Vec<&str> = uri.query().unwrap_or("").split('&').filter(|q| !q.is_empty()).collect();
    query.sort();
    let canonical =
        format!("{method}\n{}\n{}\n{canonical_headers}\n{signed}\n{payload}", uri_encode(uri.path()), query.join("&"));
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(&sha2::Sha256::digest(canonical.as_bytes()))
    );
    let mut k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        k = hmac(&k, part.as_bytes());
    }
    if hex(&hmac(&k, to_sign.as_bytes())) != signature {
        return Err("The request signature we calculated does not match the signature you provided.".into());
    }
    Ok(())
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A path as SigV4 encodes it for every service but S3: each byte but the unreserved ones and
/// `/` percent-encoded, on the path as sent (so what the client encoded is encoded again).
fn uri_encode(path: &str) -> String {
    let mut out = String::new();
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => out.push(b as char),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_has_its_lengths_and_checksums_where_the_format_puts_them() {
        let f = frame(&[(":event-type", "chunk")], b"{}");
        assert_eq!(u32::from_be_bytes(f[0..4].try_into().unwrap()) as usize, f.len());
        assert_eq!(u32::from_be_bytes(f[4..8].try_into().unwrap()), 1 + 11 + 1 + 2 + 5);
        assert_eq!(u32::from_be_bytes(f[8..12].try_into().unwrap()), crc32fast::hash(&f[0..8]));
        let end = f.len() - 4;
        assert_eq!(u32::from_be_bytes(f[end..].try_into().unwrap()), crc32fast::hash(&f[..end]));
    }

    #[test]
    fn the_path_is_encoded_again_as_sigv4_asks() {
        assert_eq!(uri_encode("/model/us.anthropic.x-v1%3A0/invoke"), "/model/us.anthropic.x-v1%253A0/invoke");
        assert_eq!(percent_decode("us.anthropic.x-v1%3A0"), "us.anthropic.x-v1:0");
    }
}
