//! A scripted model server speaking OpenAI chat completions (`POST /v1/chat/completions`),
//! OpenAI Responses (`POST /v1/responses`) and Anthropic messages (`POST /v1/messages`), each
//! streamed as server-sent events when the request says `"stream": true` (a streamed chat call
//! reports usage only with `stream_options.include_usage`, as OpenAI's does), and
//! `GET /v1/models`; and, as an Azure OpenAI resource, the same under Azure's paths (see
//! `azure_routes`), and as Amazon Bedrock's runtime, Anthropic's under Bedrock's (`bedrock.rs`); so agents, the gateway and the judges are tested without a network or a
//! key. It runs on its own thread and runtime, on `127.0.0.1:<free port>`. Started with a
//! rate limit (`start_limited`), it enforces it as a provider does: a bucket of a second's share
//! of requests, refilled evenly, and a call that finds it empty gets 429 with `Retry-After`.
//!
//! What it answers is scripted by words in the conversation's first user message:
//! - `USE_TOOL`: asks for the `python` tool with `print(6 * 7)`, then answers `the tool said …`;
//! - `LOOP`: asks for a tool on every turn (for `max_turns`);
//! - `RATE_LIMIT`: the first call gets 429 with `Retry-After: 1`;
//! - `FAIL500`: the first two calls get 500;
//! - `MALFORMED`: every answer is broken JSON;
//! - `ECHO_KEY`: the answer quotes the `Authorization`/`x-api-key` header it got and a key-like
//!   string;
//! - `BIG` (or a model whose name holds `-big`): reports 400,000 input and 100,000 output tokens
//!   per call;
//! - `NO_USAGE`: answers without any usage (as a lax OpenAI-compatible server may);
//! - `KEY_ERROR`: 401 with the credential it got quoted in the error body, as providers do;
//! - `REDIRECT`: 307 to another server's address (`http://127.0.0.1:9/…`);
//! - `JUDGE`: answers as a judge: a verdict in prose and a code fence (the JSON alone, or a
//!   call of the tool `tool_choice` names, when the call holds the answer to a schema);
//! - `agenteval analyze`'s prompt (`## Why it was judged a failure`): a cause read from the why
//!   (`expected` → wrong answer, a limit → budget, an exit or error → crashed, else other), its
//!   words in varied case and spacing as a model's are;
//! - a pairwise judge's prompt (`## Answer A` and `## Answer B`): the answer that says `GOOD`
//!   wins (a tie when both or neither do), or always `A` when the task says `POSITION_BIAS`;
//! - `SAY_MODEL`: answers `model=<the request's model> system=<its system prompt>` (a matrix of
//!   models and prompts gets a different answer from each combination);
//! - `FIX_STATS`: fixes harbor-mini's `fix-python-bug` with the environment tools: `bash` (read
//!   the file), `write_file` (the fixed module), `bash` (try it), then answers `fixed: …`;
//! - `FIX_CALC`: fixes the SWE-bench tests' `calc.py` (`add` subtracts) with the environment's
//!   `bash` tool (`sed` in its working folder, leaving `/tmp/agent-was-here`), then answers `fixed`;
//! - `HELLO_SOLVE` / `HELLO_FAIL` (anywhere in a user message): acts as a coding agent's model on
//!   harbor-mini's `hello-file` through whatever shell tool the agent offers (Codex's
//!   `exec_command`, Claude Code's `Bash`, opencode's `bash`, or a `shell`), shaping the
//!   arguments by the tool's schema: it writes `/app/hello.txt` (right for `HELLO_SOLVE`, wrong
//!   for `HELLO_FAIL`) and then answers `done`, or runs `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
//!   when the prompt names that (mini-swe-agent's end); an agent that offers no tool gets the
//!   file in aider's whole-file format (`hello.txt` then its content, fenced) when its prompt
//!   speaks of a "file listing", else each command in a fenced `bash` block;
//! - `MCP_ORDER` (anywhere in a user message), when a tool whose name ends `order_status` is
//!   offered (an MCP server's, through the agent's CLI): calls it for order `8812`, then writes
//!   what it said to `/app/answer.txt` with the shell tool and counts where the agent finds
//!   `7f3a9c1e` (part of the test server's key) in its variables, every process's and its files;
//! - τ²-bench's `mock` domain, both sides: see `tau2.rs`;
//! - an installed agent's conversation (its prompt says `You are talking with a user.`): each
//!   turn answers `You said: <the first line of the user's last words>`;
//! - otherwise it answers `echo: <the message>`.
//!
//! A request that offers no tools never gets a tool call. Every call reports 10 input and 5
//! output tokens unless `BIG`. A latency applies to every call.

pub mod bedrock;
mod tau2;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// A call the server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// The credential header as sent (`Authorization` or `x-api-key`).
    pub credential: Option<String>,
    pub body: Value,
    pub at: Instant,
    pub status: u16,
}

#[derive(Default)]
pub(crate) struct State {
    received: Vec<Received>,
    calls_per_conversation: HashMap<String, u32>,
    /// Requests per second allowed, and the bucket: requests left and when it was last filled.
    limit: Option<(f64, f64, Instant)>,
}

impl State {
    /// Takes one request from the bucket, if the server is limited; `false`: it is empty.
    fn admit(&mut self) -> bool {
        let Some((per_second, left, at)) = &mut self.limit else { return true };
        let now = Instant::now();
        *left = (*left + now.duration_since(*at).as_secs_f64() * *per_second).min(*per_second);
        *at = now;
        if *left >= 1.0 {
            *left -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A running mock server; stops when dropped.
pub struct MockLlm {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockLlm {
    /// Starts a server answering every call after `latency`.
    pub fn start(latency: Duration) -> MockLlm {
        MockLlm::start_with(latency, State::default())
    }

    /// Starts a server that allows `requests_per_minute` (a second's share at once, refilled
    /// evenly) and answers 429 beyond them.
    pub fn start_limited(latency: Duration, requests_per_minute: u64) -> MockLlm {
        let per_second = requests_per_minute as f64 / 60.0;
        MockLlm::start_with(
            latency,
            State { limit: Some((per_second, per_second, Instant::now())), ..State::default() },
        )
    }

    fn start_with(latency: Duration, state: State) -> MockLlm {
        let state = Arc::new(Mutex::new(state));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            rt.block_on(async move {
                // A provider does not drop connections: a queue deep enough for a fleet's first
                // wave of calls (the default 1,024 overflows at 1,000 connecting at once, and a
                // dropped SYN is retried a second later).
                let socket = tokio::net::TcpSocket::new_v4().expect("socket");
                socket.bind("127.0.0.1:0".parse().expect("an address")).expect("bind");
                let listener = socket.listen(4096).expect("listen");
                addr_tx.send(listener.local_addr().expect("addr")).expect("send addr");
                let s1 = shared.clone();
                let s2 = shared.clone();
                let s3 = shared.clone();
                let app = axum::Router::new()
                    .route(
                        "/v1/responses",
                        post(move |h: HeaderMap, b: Bytes| answer(s3.clone(), latency, "responses", h, b)),
                    )
                    .route(
                        "/v1/models",
                        get(|| async {
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Body::from(
                                    r#"{"object": "list", "data": [{"id": "mock-model", "object": "model"}]}"#,
                                ))
                                .unwrap()
                        }),
                    )
                    .route(
                        "/v1/chat/completions",
                        post(move |h: HeaderMap, b: Bytes| answer(s1.clone(), latency, "openai", h, b)),
                    )
                    .route(
                        "/v1/messages",
                        post(move |h: HeaderMap, b: Bytes| answer(s2.clone(), latency, "anthropic", h, b)),
                    )
                    .merge(azure_routes(shared.clone(), latency))
                    .merge(bedrock::routes(shared.clone(), latency));
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        });
        let addr = addr_rx.recv().expect("the mock server started");
        MockLlm { addr, state, stop: Some(stop_tx), thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT/v1`: the `base_url` to configure.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every call so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The key-like string `ECHO_KEY` answers with.
pub const ECHOED_KEY: &str = "sk-proj-MOCKLEAKEDKEY0123456789abcdef";

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").or_else(|| b.get("content")).and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The module `FIX_STATS` writes: harbor-mini's `calc/stats.py`, fixed.
const FIXED_STATS: &str = "def mean(values):\n    values = list(values)\n    if not values:\n        raise ValueError(\"mean of nothing\")\n    return sum(values) / len(values)\n\n\ndef median(values):\n    s = sorted(values)\n    n = len(s)\n    if n == 0:\n        raise ValueError(\"median of nothing\")\n    mid = n // 2\n    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2\n";

/// Azure OpenAI's paths, answered as OpenAI's: the v1 API (`/openai/v1/chat/completions`,
/// `/openai/v1/responses`, the deployment as `model`) and the dated one
/// (`/openai/deployments/<deployment>/chat/completions?api-version=…`,
/// `/openai/responses?api-version=…`). As Azure does, a call without an `api-key` (or an Entra
/// bearer token) is refused 401, and a dated call without `api-version` 404. Recorded as
/// `azure-v1:<wire>` or `azure-dated:<wire>:<deployment>` with the `api-key` as its credential.
fn azure_routes(state: Arc<Mutex<State>>, latency: Duration) -> axum::Router {
    use axum::extract::{Path, RawQuery};
    let (s1, s2, s3, s4) = (state.clone(), state.clone(), state.clone(), state);
    axum::Router::new()
        .route(
            "/openai/v1/chat/completions",
            post(move |h: HeaderMap, b: Bytes| {
                azure(s1.clone(), latency, "openai", "azure-v1:chat".into(), None, h, b)
            }),
        )
        .route(
            "/openai/v1/responses",
            post(move |h: HeaderMap, b: Bytes| {
                azure(s2.clone(), latency, "responses", "azure-v1:responses".into(), None, h, b)
            }),
        )
        .route(
            "/openai/deployments/{deployment}/chat/completions",
            post(move |Path(d): Path<String>, RawQuery(q): RawQuery, h: HeaderMap, b: Bytes| {
                azure(s3.clone(), latency, "openai", format!("azure-dated:chat:{d}"), Some(q), h, b)
            }),
        )
        .route(
            "/openai/responses",
            post(move |RawQuery(q): RawQuery, h: HeaderMap, b: Bytes| {
                azure(s4.clone(), latency, "responses", "azure-dated:responses".into(), Some(q), h, b)
            }),
        )
}

async fn azure(
    state: Arc<Mutex<State>>,
    latency: Duration,
    shape: &'static str,
    label: String,
    query: Option<Option<String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let key = headers.get("api-key").and_then(|v| v.to_str().ok());
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).filter(|v| v.starts_with("Bearer "));
    let Some(credential) = key.map(|k| format!("api-key {k}")).or(bearer.map(str::to_string)) else {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint."}}"#))
            .unwrap();
    };
    if let Some(q) = query
        && !q.unwrap_or_default().split('&').any(|p| p.starts_with("api-version=") && p.len() > 12)
    {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"error": {"code": "404", "message": "Resource not found"}}"#))
            .unwrap();
    }
    let mut headers = headers;
    headers.remove("authorization");
    headers.insert("x-credential", credential.parse().expect("a header value"));
    answer_as(state, latency, shape, label, headers, body).await
}

async fn answer(
    state: Arc<Mutex<State>>,
    latency: Duration,
    shape: &'static str,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    answer_as(state, latency, shape, shape.to_string(), headers, body).await
}

/// Answers a call in `shape`'s format, recording it under `label`.
pub(crate) async fn answer_as(
    state: Arc<Mutex<State>>,
    latency: Duration,
    shape: &'static str,
    label: String,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let at = Instant::now();
    let credential = headers
        .get("authorization")
        .or_else(|| headers.get("x-api-key"))
        .or_else(|| headers.get("x-credential"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !state.lock().unwrap().admit() {
        state.lock().unwrap().received.push(Received { path: label, credential, body, at, status: 429 });
        return Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("retry-after", "1")
            .body(Body::from(r#"{"error": {"type": "rate_limit_exceeded", "message": "requests per minute"}}"#))
            .unwrap();
    }
    let messages = match body.get("input") {
        // Responses: its input items as messages (a function call's output as a tool message).
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i.get("type").and_then(Value::as_str) {
                Some("function_call_output") => json!({"role": "tool", "content": i["output"]}),
                _ => i.clone(),
            })
            .collect(),
        _ => body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default(),
    };
    let first = messages.iter().find(|m| m["role"] == "user").map(|m| text_of(&m["content"])).unwrap_or_default();
    let all_user: String = messages.iter().filter(|m| m["role"] == "user").map(|m| text_of(&m["content"])).collect();
    let hello = if all_user.contains("HELLO_SOLVE") {
        Some("Hello, agenteval!")
    } else if all_user.contains("HELLO_FAIL") {
        Some("Goodbye")
    } else {
        None
    };
    let tool_results = messages
        .iter()
        .filter(|m| {
            m["role"] == "tool" || m["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        })
        .count();
    // A tool result: OpenAI's `tool` message, or Anthropic's `tool_result` block.
    let tool_result = messages.iter().rev().find_map(|m| {
        if m["role"] == "tool" {
            return Some(text_of(&m["content"]));
        }
        m["content"].as_array()?.iter().find(|b| b["type"] == "tool_result").map(|b| text_of(&b["content"]))
    });
    let call_no = {
        let mut s = state.lock().unwrap();
        let n = s.calls_per_conversation.entry(first.clone()).or_default();
        *n += 1;
        *n
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let record = |status: u16| {
        state.lock().unwrap().received.push(Received {
            path: label.clone(),
            credential: credential.clone(),
            body: body.clone(),
            at,
            status,
        })
    };
    if first.contains("RATE_LIMIT") && call_no == 1 {
        record(429);
        return Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("retry-after", "1")
            .body(Body::from(r#"{"error": {"type": "rate_limit_exceeded", "message": "slow down"}}"#))
            .unwrap();
    }
    // `ALWAYS<status>`: every call of the conversation fails with that status.
    if let Some(status) = first.split("ALWAYS").nth(1).and_then(|r| r.get(..3)).and_then(|c| c.parse::<u16>().ok()) {
        record(status);
        let body = format!(r#"{{"error": {{"type": "scripted_{status}", "message": "scripted failure"}}}}"#);
        return Response::builder().status(status).body(Body::from(body)).unwrap();
    }
    if first.contains("KEY_ERROR") {
        record(401);
        let body = format!(
            r#"{{"error": {{"type": "invalid_api_key", "message": "Incorrect API key provided: {}"}}}}"#,
            credential.clone().unwrap_or_default().trim_start_matches("Bearer ")
        );
        return Response::builder()
            .status(401)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
    }
    if first.contains("REDIRECT") {
        record(307);
        return Response::builder()
            .status(307)
            .header("location", "http://127.0.0.1:9/v1/elsewhere")
            .body(Body::empty())
            .unwrap();
    }
    if first.contains("FAIL500") && call_no <= 2 {
        record(500);
        return Response::builder().status(500).body(Body::from("upstream exploded")).unwrap();
    }
    record(200);
    if first.contains("MALFORMED") {
        return Response::builder().status(200).body(Body::from("{\"choices\": [")).unwrap();
    }
    let big = first.contains("BIG") || body["model"].as_str().is_some_and(|m| m.contains("-big"));
    let (input, output) = if big { (400_000, 100_000) } else { (10, 5) };
    let python = || Some(("python", json!({"code": "print(6 * 7)"})));
    let offers_tools = body.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    let hello_cmd = hello.map(|line| format!("echo '{line}' > /app/hello.txt && cat /app/hello.txt"));
    let shell = shell_tool(&body);
    // mini-swe-agent ends a task by a command: its prompt names it.
    let submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";
    let asks_submit = body.to_string().contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT");
    let tau2 = tau2::script(&body, &messages);
    // An MCP tool the agent's CLI offers (`mcp__orders__order_status`, `orders_order_status`).
    // Codex offers an MCP server's tools in a namespace of its own (`mcp__orders`): called by
    // their full name.
    let mcp_tool = body["tools"].as_array().into_iter().flatten().find_map(|t| {
        if t["type"] == "namespace" {
            let inner =
                t["tools"].as_array()?.iter().any(|i| i["name"].as_str().is_some_and(|n| n.ends_with("order_status")));
            return inner.then_some("mcp__orders__order_status");
        }
        let name = t["function"]["name"].as_str().or_else(|| t["name"].as_str())?;
        name.ends_with("order_status").then_some(name)
    });
    let planned: Option<(&str, Value)> = if let Some((call, _)) = &tau2 {
        call.clone()
    } else if all_user.contains("MCP_ORDER") {
        // Every tool result so far: the server's answer, then the look's, end the script.
        let results: Vec<String> = messages
            .iter()
            .flat_map(|m| {
                if m["role"] == "tool" {
                    return vec![text_of(&m["content"])];
                }
                let blocks = m["content"].as_array().cloned().unwrap_or_default();
                blocks.iter().filter(|b| b["type"] == "tool_result").map(|b| text_of(&b["content"])).collect()
            })
            .collect();
        // The calls made so far, by name, on each wire.
        let called: Vec<String> = messages
            .iter()
            .flat_map(|m| {
                let mut names: Vec<String> =
                    m["name"].as_str().filter(|_| m["type"] == "function_call").map(String::from).into_iter().collect();
                let blocks = m["content"].as_array().cloned().unwrap_or_default();
                names.extend(
                    blocks
                        .iter()
                        .filter(|b| b["type"] == "tool_use")
                        .filter_map(|b| b["name"].as_str().map(String::from)),
                );
                let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                names.extend(calls.iter().filter_map(|c| c["function"]["name"].as_str().map(String::from)));
                names
            })
            .collect();
        // The server's answer, or what the agent got back instead: never a second try.
        let answered = called.iter().any(|n| n.ends_with("order_status")).then(|| {
            results.iter().find(|r| r.contains("order 8812") || r.contains("unauthorised")).or(results.last())
        });
        let answered = answered.map(|r| r.cloned().unwrap_or_default());
        let searched = called.iter().any(|n| n == "ToolSearch");
        let deferred = body.to_string().contains("mcp__orders__order_status");
        let offers_search = body["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "ToolSearch"));
        match (answered, mcp_tool, &shell) {
            (None, Some(tool), _) => Some((tool, json!({"order_id": "8812"}))),
            // Claude Code defers an MCP tool's schema until its ToolSearch loads it.
            (None, None, _) if deferred && offers_search && !searched => {
                Some(("ToolSearch", json!({"query": "select:mcp__orders__order_status", "max_results": 1})))
            }
            // What the server said, kept; then a look for the server's key where the agent can
            // look: its variables, every process's, and its files (a count, never the key).
            (Some(said), _, Some((name, shape))) if !results.iter().any(|r| r.contains("found: ")) => {
                let said = said.replace(['\'', '\n'], " ");
                // The needle is put together as it runs: the command's own text never holds it.
                let look = "n=7f3a; n=${n}9c1e; (env; cat /proc/[0-9]*/environ; grep -rIs \"$n\" /etc /root /app /tmp /opt /logs /srv /home) 2>/dev/null | tr '\\0' '\\n' | grep -c \"$n\"";
                Some((
                    name.as_str(),
                    shape.args(&format!("echo '{said}' > /app/answer.txt; echo \"found: $({look})\"; true")),
                ))
            }
            _ => None,
        }
    } else if let (Some(cmd), Some((name, shape))) = (&hello_cmd, &shell) {
        match tool_results {
            0 => Some((name.as_str(), shape.args(cmd))),
            1 if asks_submit => Some((name.as_str(), shape.args(submit))),
            _ => None,
        }
    } else if !offers_tools {
        None
    } else if first.contains("FIX_STATS") {
        match call_no {
            1 => Some(("bash", json!({"command": "cat calc/stats.py"}))),
            2 => Some(("write_file", json!({"path": "calc/stats.py", "content": FIXED_STATS}))),
            3 => Some(("bash", json!({"command": "python3 -c 'import calc; print(calc.mean([1, 2, 3]))'"}))),
            _ => None,
        }
    } else if first.contains("FIX_CALC") {
        (call_no == 1).then(|| ("bash", json!({"command": "touch /tmp/agent-was-here && sed -i 's/return a - b/return a + b/' calc.py && cat calc.py"})))
    } else if (first.contains("USE_TOOL") && tool_result.is_none()) || first.contains("LOOP") {
        python()
    } else {
        None
    };
    let tool_call = planned.is_some();
    let pairwise = first.split_once("## Answer A\n").and_then(|(_, rest)| rest.split_once("## Answer B\n"));
    let text = if let Some((_, text)) = &tau2 {
        text.clone()
    } else if let Some((_, why)) = first.split_once("## Why it was judged a failure\n") {
        // `agenteval analyze`: a cause read from the task's why.
        let why = why.split("\n## ").next().unwrap_or(why).to_lowercase();
        let cause = if why.contains("expected") {
            "Wrong answer"
        } else if why.contains("limit") || why.contains("timed out") {
            "Ran out of budget."
        } else if why.contains("exit") || why.contains("error") || why.contains("crash") {
            "agent   crashed"
        } else {
            "other"
        };
        format!(
            "```json\n{{\"cause\": \"{cause}\", \"why\": \"scripted from: {}\"}}\n```",
            why.trim().chars().take(40).collect::<String>().replace('"', "'")
        )
    } else if first.contains("REVIEW_TRIAL") {
        // A certify review: earned unless the trial's record says otherwise.
        let earned = !first.contains("SUSPICIOUS");
        format!("```json\n{{\"earned\": {earned}, \"why\": \"scripted review\"}}\n```")
    } else if let Some((a, rest)) = pairwise {
        let b = rest.split("## Criteria").next().unwrap_or(rest);
        let winner = if first.contains("POSITION_BIAS") {
            "A"
        } else {
            match (a.contains("GOOD"), b.contains("GOOD")) {
                (true, false) => "A",
                (false, true) => "B",
                _ => "tie",
            }
        };
        format!("```json\n{{\"winner\": \"{winner}\", \"reason\": \"scripted: {winner}\"}}\n```")
    } else if let (Some(line), None, true) = (hello, &shell, body.to_string().contains("file listing")) {
        // aider's whole-file edit format: the file's path, then its new content fenced.
        // Its prompt holds worked examples: the task is the last user message.
        let last_user = messages.iter().rev().find(|m| m["role"] == "user").map(|m| text_of(&m["content"]));
        if last_user.is_some_and(|t| t.contains("HELLO_")) {
            format!("hello.txt\n```\n{line}\n```\n")
        } else {
            "done".to_string()
        }
    } else if let (Some(cmd), None) = (&hello_cmd, &shell) {
        // No tool offered: the command in a fenced block, then the agreed end.
        let prior_turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        if prior_turns == 0 {
            format!("I will write the file.\n\n```bash\n{cmd}\n```")
        } else {
            format!("Done.\n\n```bash\n{submit}\n```")
        }
    } else if hello.is_some() {
        "done".to_string()
    } else if all_user.contains("You are talking with a user.") {
        // An installed agent in a conversation: each turn's prompt is the user's last words.
        let mut last =
            messages.iter().rev().find(|m| m["role"] == "user").map(|m| text_of(&m["content"])).unwrap_or_default();
        // Claude Code puts its own reminders beside the prompt.
        while let (Some(a), Some(b)) = (last.find("<system-reminder>"), last.find("</system-reminder>")) {
            if b < a {
                break;
            }
            last.replace_range(a..b + "</system-reminder>".len(), "");
        }
        let words = last.rsplit("The user says: ").next().unwrap_or(&last).lines().find(|l| !l.trim().is_empty());
        format!("You said: {}", words.unwrap_or_default().trim())
    } else if first.contains("SAY_MODEL") {
        // OpenAI sends the system prompt as a `system` message, Anthropic as a field.
        let system = body
            .get("system")
            .map(text_of)
            .or_else(|| messages.iter().find(|m| m["role"] == "system").map(|m| text_of(&m["content"])))
            .unwrap_or_default();
        format!("model={} system={}", body["model"].as_str().unwrap_or(""), system.trim())
    } else if first.contains("ECHO_KEY") {
        format!("I was called with {} and found {ECHOED_KEY}", credential.clone().unwrap_or_default())
    } else if first.contains("JUDGE") {
        let score = if first.contains("GOOD ANSWER") { 0.9 } else { 0.2 };
        format!(
            "Let me think.\n```json\n{{\"score\": {score}, \"passed\": {}, \"reason\": \"scripted\"}}\n```",
            score > 0.5
        )
    } else if first.contains("FIX_STATS") {
        format!("fixed: {}", tool_result.as_deref().unwrap_or("").trim())
    } else if first.contains("FIX_CALC") {
        "fixed".to_string()
    } else if let Some(r) = &tool_result {
        format!("the tool said {}", r.trim())
    } else {
        format!("echo: {first}")
    };
    // Held to a schema, as a model is: the JSON alone (OpenAI's `response_format`), or a call of
    // the tool it must call (Anthropic's `tool_choice`) with the JSON as its input.
    let (mut text, mut planned, mut tool_call) = (text, planned, tool_call);
    if body.pointer("/response_format/type").and_then(Value::as_str) == Some("json_schema") {
        text = json_of(&text).to_string();
    }
    if body.pointer("/tool_choice/type").and_then(Value::as_str) == Some("tool")
        && let Some(name) = body.pointer("/tool_choice/name").and_then(Value::as_str)
    {
        let input = serde_json::from_str(json_of(&text)).unwrap_or_else(|_| json!({}));
        planned = Some((name, input));
        tool_call = true;
        text = String::new();
    }
    let call_id = format!("call_{call_no}");
    let (tool, args) = planned.clone().unwrap_or(("python", Value::Null));
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    if stream {
        let include_usage = body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
        let sse = streamed(
            shape,
            &text,
            tool_call.then_some((call_id.as_str(), tool, &args)),
            (input, output),
            include_usage,
        );
        return Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(Body::from(sse))
            .unwrap();
    }
    let reply = match (shape, tool_call) {
        ("openai", false) => json!({
            "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output},
        }),
        ("openai", true) => json!({
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": tool, "arguments": args.to_string()}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output},
        }),
        ("responses", false) => json!({
            "id": format!("resp_{call_no}"), "object": "response", "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output},
        }),
        ("responses", true) => json!({
            "id": format!("resp_{call_no}"), "object": "response", "status": "completed",
            "output": [responses_call(&call_id, tool, &args)],
            "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output},
        }),
        (_, false) => json!({
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": input, "output_tokens": output},
        }),
        (_, true) => json!({
            "content": [{"type": "tool_use", "id": call_id, "name": tool, "input": args}], "stop_reason": "tool_use",
            "usage": {"input_tokens": input, "output_tokens": output},
        }),
    };
    let mut reply = reply;
    if first.contains("NO_USAGE")
        && let Some(o) = reply.as_object_mut()
    {
        o.remove("usage");
    }
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(reply.to_string()))
        .unwrap()
}

/// The JSON object of a scripted reply: its ```json fence, else the reply.
fn json_of(text: &str) -> &str {
    match text.split_once("```json\n").and_then(|(_, rest)| rest.split_once("```")) {
        Some((json, _)) => json.trim(),
        None => text.trim(),
    }
}

/// How a shell tool takes its command.
#[derive(Debug, Clone, Copy)]
enum ArgShape {
    /// `{"cmd": "…"}` (Codex's `exec_command`).
    Cmd,
    /// `{"command": "…"}`, with a `description` when the schema requires one.
    Command { description: bool },
    /// `{"command": ["bash", "-lc", "…"]}`.
    Argv,
}

impl ArgShape {
    fn args(self, cmd: &str) -> Value {
        match self {
            ArgShape::Cmd => json!({"cmd": cmd}),
            ArgShape::Command { description: false } => json!({"command": cmd}),
            ArgShape::Command { description: true } => json!({"command": cmd, "description": "Write the file"}),
            ArgShape::Argv => json!({"command": ["bash", "-lc", cmd]}),
        }
    }
}

/// The shell tool a request offers, by name, on any of the three wires, and how it takes its
/// command (read from its schema).
fn shell_tool(body: &Value) -> Option<(String, ArgShape)> {
    let tools = body.get("tools")?.as_array()?;
    let described = tools.iter().filter_map(|t| {
        let f = t.get("function").unwrap_or(t);
        let name = f.get("name")?.as_str()?;
        let schema = f.get("parameters").or_else(|| t.get("input_schema")).cloned().unwrap_or(Value::Null);
        Some((name.to_string(), schema))
    });
    let mut found: Vec<(usize, String, ArgShape)> = described
        .filter_map(|(name, schema)| {
            let rank = ["exec_command", "shell", "Bash", "bash", "shell_command"].iter().position(|n| *n == name)?;
            let props = &schema["properties"];
            let required = |k: &str| schema["required"].as_array().is_some_and(|r| r.iter().any(|v| v == k));
            let shape = if props.get("cmd").is_some() {
                ArgShape::Cmd
            } else if props["command"]["type"] == "array" {
                ArgShape::Argv
            } else {
                ArgShape::Command { description: required("description") }
            };
            Some((rank, name, shape))
        })
        .collect();
    found.sort_by_key(|f| f.0);
    found.into_iter().next().map(|(_, n, s)| (n, s))
}

/// A streamed answer as each provider sends one: the text in two pieces, a tool call, and the
/// usage where that provider puts it.
fn streamed(
    shape: &str,
    text: &str,
    tool: Option<(&str, &str, &Value)>,
    (input, output): (u64, u64),
    include_usage: bool,
) -> String {
    let split = text.char_indices().nth(text.chars().count() / 2).map_or(text.len(), |(i, _)| i);
    let pieces = [&text[..split], &text[split..]];
    let mut out = String::new();
    let mut event = |name: Option<&str>, data: Value| {
        if let Some(n) = name {
            out.push_str(&format!("event: {n}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    };
    match shape {
        "openai" => {
            match tool {
                Some((id, name, args)) => event(
                    None,
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                    {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}}]}),
                ),
                None => {
                    for p in pieces {
                        event(None, json!({"choices": [{"index": 0, "delta": {"content": p}}]}));
                    }
                }
            }
            let finish = if tool.is_some() { "tool_calls" } else { "stop" };
            event(None, json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
            if include_usage {
                event(None, json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}}));
            }
            out.push_str("data: [DONE]\n\n");
        }
        "responses" => {
            event(Some("response.created"), json!({"type": "response.created", "response": {"status": "in_progress"}}));
            let output_items = match tool {
                Some((id, name, args)) => json!([responses_call(id, name, args)]),
                None => {
                    event(
                        Some("response.output_item.added"),
                        json!({"type": "response.output_item.added", "output_index": 0,
                        "item": {"type": "message", "role": "assistant", "content": []}}),
                    );
                    for p in pieces {
                        event(
                            Some("response.output_text.delta"),
                            json!({"type": "response.output_text.delta", "delta": p}),
                        );
                    }
                    json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}])
                }
            };
            // Each item also on its own, done, as OpenAI sends it (Codex builds its turn from these).
            for (i, item) in output_items.as_array().into_iter().flatten().enumerate() {
                event(
                    Some("response.output_item.done"),
                    json!({"type": "response.output_item.done", "output_index": i, "item": item}),
                );
            }
            event(
                Some("response.completed"),
                json!({"type": "response.completed", "response": {
                "id": "resp_mock", "object": "response", "status": "completed", "output": output_items,
                "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output}}}),
            );
        }
        _ => {
            event(
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message", "role": "assistant",
                "model": "mock-model", "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 1}}}),
            );
            match tool {
                Some((id, name, args)) => {
                    event(
                        Some("content_block_start"),
                        json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                    );
                    event(
                        Some("content_block_delta"),
                        json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": args.to_string()}}),
                    );
                }
                None => {
                    event(
                        Some("content_block_start"),
                        json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
                    );
                    for p in pieces {
                        event(
                            Some("content_block_delta"),
                            json!({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": p}}),
                        );
                    }
                }
            }
            event(Some("content_block_stop"), json!({"type": "content_block_stop", "index": 0}));
            let stop = if tool.is_some() { "tool_use" } else { "end_turn" };
            event(
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": stop},
                "usage": {"output_tokens": output}}),
            );
            event(Some("message_stop"), json!({"type": "message_stop"}));
        }
    }
    out
}

/// A Responses function call; a namespaced tool's (`mcp__orders__order_status`, an MCP server's
/// as Codex offers them) by its own name within its namespace.
fn responses_call(id: &str, name: &str, args: &Value) -> Value {
    match name.strip_prefix("mcp__").and_then(|rest| rest.split_once("__")) {
        Some((server, tool)) => json!({"type": "function_call", "call_id": id, "name": tool,
            "namespace": format!("mcp__{server}"), "arguments": args.to_string()}),
        None => json!({"type": "function_call", "call_id": id, "name": name, "arguments": args.to_string()}),
    }
}
