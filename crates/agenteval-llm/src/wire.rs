//! The two wire formats: OpenAI chat completions and Anthropic messages, to and from the
//! neutral [`ChatRequest`]/[`ChatResponse`].

use serde_json::{Value, json};

use crate::types::*;

/// What in a provider's answer could not be read, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

impl From<&str> for Unreadable {
    fn from(s: &str) -> Self {
        Unreadable(s.into())
    }
}

impl From<String> for Unreadable {
    fn from(s: String) -> Self {
        Unreadable(s)
    }
}

/// The body of `POST {base_url}/chat/completions`.
pub fn openai_request(req: &ChatRequest) -> Value {
    let mut messages = Vec::new();
    if let Some(s) = &req.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    for m in &req.messages {
        messages.push(match m {
            Message::User { text } => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } => {
                let mut v = json!({"role": "assistant", "content": text});
                if !tool_calls.is_empty() {
                    v["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                        })
                        .collect();
                }
                v
            }
            Message::Tool { call_id, content, .. } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": content})
            }
        });
    }
    let mut body = json!({"model": req.model, "messages": messages});
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = req.max_output_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(f) = &req.response_format {
        body["response_format"] =
            json!({"type": "json_schema", "json_schema": {"name": f.name, "schema": f.schema, "strict": true}});
    }
    body
}

/// Reads a chat completions answer.
pub fn openai_response(body: &Value) -> Result<ChatResponse, Unreadable> {
    let choice = body.pointer("/choices/0").ok_or("no choices[0]")?;
    let message = choice.get("message").ok_or("no choices[0].message")?;
    let text = message.get("content").and_then(Value::as_str).map(str::to_string);
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let name =
                c.pointer("/function/name").and_then(Value::as_str).ok_or(format!("tool_calls[{i}] has no name"))?;
            let raw = c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
            // A model may send arguments that are not JSON; the tool sees them as a string.
            let arguments = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
            let id = c.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_string);
            tool_calls.push(ToolCall { id, name: name.to_string(), arguments });
        }
    }
    let usage = body.get("usage");
    let n = |p: &str| usage.and_then(|u| u.pointer(p)).and_then(Value::as_u64).unwrap_or(0);
    Ok(ChatResponse {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: n("/prompt_tokens"),
            output_tokens: n("/completion_tokens"),
            cached_input_tokens: n("/prompt_tokens_details/cached_tokens"),
            cache_write_tokens: 0,
        },
        stop_reason: choice.get("finish_reason").and_then(Value::as_str).unwrap_or("").to_string(),
    })
}

/// Anthropic requires `max_tokens`; this is what a request without one asks for.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

/// The body of `POST {base_url}/messages`.
pub fn anthropic_request(req: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for m in &req.messages {
        let (role, block) = match m {
            Message::User { text } => ("user", vec![json!({"type": "text", "text": text})]),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
                    blocks.push(json!({"type": "text", "text": t}));
                }
                for c in tool_calls {
                    blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}));
                }
                ("assistant", blocks)
            }
            Message::Tool { call_id, content, is_error, .. } => (
                "user",
                vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error})],
            ),
        };
        // Consecutive tool results go in one user turn, as the API requires.
        match messages.last_mut() {
            Some(last) if last["role"] == role && role == "user" && matches!(m, Message::Tool { .. }) => {
                last["content"].as_array_mut().expect("content is an array").extend(block);
            }
            _ => messages.push(json!({"role": role, "content": block})),
        }
    }
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "max_tokens": req.max_output_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
    });
    if let Some(s) = &req.system {
        body["system"] = json!(s);
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    // Anthropic's wire has no answer format: the shape is a tool the model must call, and its
    // input is the answer ([`structured_answer`]).
    if let Some(f) = &req.response_format {
        let tool =
            json!({"name": f.name, "description": "Give your answer by calling this tool.", "input_schema": f.schema});
        match body.get_mut("tools").and_then(Value::as_array_mut) {
            Some(tools) => tools.push(tool),
            None => body["tools"] = json!([tool]),
        }
        body["tool_choice"] = json!({"type": "tool", "name": f.name});
    }
    body
}

/// The answer to a call that asked a `response_format`: its text, or, where the shape was asked
/// as a tool (Anthropic's wire), that tool's input as JSON text.
pub fn structured_answer(req: &ChatRequest, resp: &mut ChatResponse) {
    let Some(f) = &req.response_format else { return };
    if resp.text.as_deref().is_some_and(|t| !t.trim().is_empty()) {
        return;
    }
    if let Some(at) = resp.tool_calls.iter().position(|c| c.name == f.name) {
        let call = resp.tool_calls.remove(at);
        resp.text = Some(call.arguments.to_string());
    }
}

/// Reads a messages answer.
pub fn anthropic_response(body: &Value) -> Result<ChatResponse, Unreadable> {
    let content = body.get("content").and_then(Value::as_array).ok_or("no content array")?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, b) in content.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: b.get("id").and_then(Value::as_str).map_or_else(|| format!("toolu_{i}"), str::to_string),
                name: b.get("name").and_then(Value::as_str).ok_or(format!("content[{i}] tool_use has no name"))?.into(),
                arguments: b.get("input").cloned().unwrap_or(json!({})),
            }),
            _ => {}
        }
    }
    let usage = body.get("usage");
    let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    let (cached, written) = (n("cache_read_input_tokens"), n("cache_creation_input_tokens"));
    Ok(ChatResponse {
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        // Anthropic counts cache reads and writes apart from `input_tokens`; the neutral shape
        // includes them.
        usage: Usage {
            input_tokens: n("input_tokens") + cached + written,
            output_tokens: n("output_tokens"),
            cached_input_tokens: cached,
            cache_write_tokens: written,
        },
        stop_reason: body.get("stop_reason").and_then(Value::as_str).unwrap_or("").to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            system: Some("be brief".into()),
            messages: vec![
                Message::User { text: "hi".into() },
                Message::Assistant {
                    text: None,
                    tool_calls: vec![
                        ToolCall { id: "c1".into(), name: "python".into(), arguments: json!({"code": "1"}) },
                        ToolCall { id: "c2".into(), name: "python".into(), arguments: json!({"code": "2"}) },
                    ],
                },
                Message::Tool { call_id: "c1".into(), name: "python".into(), content: "1".into(), is_error: false },
                Message::Tool { call_id: "c2".into(), name: "python".into(), content: "2".into(), is_error: true },
            ],
            tools: vec![],
            temperature: Some(0.0),
            max_output_tokens: None,
            response_format: None,
        }
    }

    #[test]
    fn openai_round_trip_of_tool_calls() {
        let body = openai_request(&conversation());
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"code\":\"1\"}");
        assert_eq!(body["messages"][3]["tool_call_id"], "c1");
        let answer = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "python", "arguments": "{\"code\": \"print(2)\"}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 3}});
        let r = openai_response(&answer).unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!({"code": "print(2)"}));
        assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (10, 3));
    }

    #[test]
    fn anthropic_groups_tool_results_in_one_user_turn() {
        let body = anthropic_request(&conversation());
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], ANTHROPIC_DEFAULT_MAX_TOKENS);
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3, "{body}");
        assert_eq!(msgs[2]["content"].as_array().unwrap().len(), 2);
        let answer = json!({"content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t", "name": "python", "input": {"code": "1"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 4}});
        let r = anthropic_response(&answer).unwrap();
        assert_eq!(r.text.as_deref(), Some("ok"));
        assert_eq!(r.usage.input_tokens, 9);
        assert_eq!(r.tool_calls[0].name, "python");
    }
}
