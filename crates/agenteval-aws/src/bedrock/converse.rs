//! OpenAI's chat completions wire on Bedrock's `Converse` (`ConverseStream` when streamed): a
//! chat request's messages, system prompt, tools and limits as Converse's typed input, and the
//! answer (whole, or its events as they arrive) as a chat completion or its chunks, with
//! Bedrock's own usage.

use std::collections::HashMap;

use aws_sdk_bedrockruntime::types::{
    self as t, ContentBlock, ConversationRole, ConverseOutput, ConverseStreamOutput, InferenceConfiguration, Message,
    StopReason, SystemContentBlock, Tool, ToolConfiguration, ToolInputSchema, ToolResultBlock, ToolResultContentBlock,
    ToolSpecification, ToolUseBlock,
};
use aws_smithy_types::{Document, Number};
use serde_json::{Value, json};

/// What a chat request asks of Converse.
pub(crate) struct Asked {
    pub system: Vec<SystemContentBlock>,
    pub messages: Vec<Message>,
    pub inference: InferenceConfiguration,
    pub tools: Option<ToolConfiguration>,
    /// The model's name in the answer (the request's `model`).
    pub model: String,
}

/// A chat completions request as Converse's input; `Err` says what it cannot carry.
pub(crate) fn asked(body: &[u8]) -> Result<Asked, String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| "the request body is not JSON".to_string())?;
    let mut system = Vec::new();
    // Converse wants user and assistant turns in turn: consecutive ones of a role are merged.
    let mut turns: Vec<(ConversationRole, Vec<ContentBlock>)> = Vec::new();
    for m in v.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let blocks = match role {
            "system" | "developer" => {
                system.extend(texts(m.get("content")).into_iter().map(SystemContentBlock::Text));
                continue;
            }
            "tool" => vec![tool_result(m)?],
            "assistant" => assistant_blocks(m)?,
            _ => texts(m.get("content")).into_iter().map(ContentBlock::Text).collect(),
        };
        let role = if role == "assistant" { ConversationRole::Assistant } else { ConversationRole::User };
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages = turns
        .into_iter()
        .filter(|(_, b)| !b.is_empty())
        .map(|(role, content)| Message::builder().role(role).set_content(Some(content)).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let num = |k: &str| v.get(k).and_then(Value::as_f64);
    let max = ["max_completion_tokens", "max_tokens"].iter().find_map(|k| v.get(*k).and_then(Value::as_i64));
    let stop: Vec<String> = match v.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    };
    let inference = InferenceConfiguration::builder()
        .set_max_tokens(max.map(|m| m.clamp(1, i32::MAX as i64) as i32))
        .set_temperature(num("temperature").map(|t| t as f32))
        .set_top_p(num("top_p").map(|t| t as f32))
        .set_stop_sequences((!stop.is_empty()).then_some(stop))
        .build();
    Ok(Asked {
        system,
        messages,
        inference,
        tools: tools(&v)?,
        model: v.get("model").and_then(Value::as_str).unwrap_or("").to_string(),
    })
}

/// The text parts of a message's content.
fn texts(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or(p.as_str()))
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

fn assistant_blocks(m: &Value) -> Result<Vec<ContentBlock>, String> {
    let mut blocks: Vec<ContentBlock> = texts(m.get("content")).into_iter().map(ContentBlock::Text).collect();
    for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let args = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
        let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
        let block = ToolUseBlock::builder()
            .tool_use_id(call.get("id").and_then(Value::as_str).unwrap_or(""))
            .name(call.pointer("/function/name").and_then(Value::as_str).unwrap_or(""))
            .input(document(&input))
            .build()
            .map_err(|e| e.to_string())?;
        blocks.push(ContentBlock::ToolUse(block));
    }
    Ok(blocks)
}

fn tool_result(m: &Value) -> Result<ContentBlock, String> {
    let text = texts(m.get("content")).join("\n");
    let block = ToolResultBlock::builder()
        .tool_use_id(m.get("tool_call_id").and_then(Value::as_str).unwrap_or(""))
        .content(ToolResultContentBlock::Text(text))
        .build()
        .map_err(|e| e.to_string())?;
    Ok(ContentBlock::ToolResult(block))
}

/// The request's function tools and its `tool_choice`, as Converse's tool configuration.
fn tools(v: &Value) -> Result<Option<ToolConfiguration>, String> {
    let listed = v.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty());
    let Some(listed) = listed else { return Ok(None) };
    if v.get("tool_choice").and_then(Value::as_str) == Some("none") {
        return Ok(None);
    }
    let mut config = ToolConfiguration::builder();
    for tool in listed {
        let f = tool.get("function").unwrap_or(tool);
        let schema = f.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        let spec = ToolSpecification::builder()
            .name(f.get("name").and_then(Value::as_str).unwrap_or(""))
            .set_description(f.get("description").and_then(Value::as_str).map(str::to_string))
            .input_schema(ToolInputSchema::Json(document(&schema)))
            .build()
            .map_err(|e| e.to_string())?;
        config = config.tools(Tool::ToolSpec(spec));
    }
    let choice = match v.get("tool_choice") {
        Some(Value::String(s)) if s == "required" => Some(t::ToolChoice::Any(t::AnyToolChoice::builder().build())),
        Some(Value::Object(o)) => o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(|n| t::SpecificToolChoice::builder().name(n).build().map(t::ToolChoice::Tool))
            .transpose()
            .map_err(|e| e.to_string())?,
        _ => None,
    };
    config.set_tool_choice(choice).build().map(Some).map_err(|e| e.to_string())
}

/// A JSON value as the SDK's document.
pub(crate) fn document(v: &Value) -> Document {
    match v {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Number::PosInt(u),
            (None, Some(i)) => Number::NegInt(i),
            _ => Number::Float(n.as_f64().unwrap_or(0.0)),
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(a) => Document::Array(a.iter().map(document).collect()),
        Value::Object(o) => {
            Document::Object(o.iter().map(|(k, v)| (k.clone(), document(v))).collect::<HashMap<_, _>>())
        }
    }
}

/// The SDK's document as a JSON value.
pub(crate) fn json_of(d: &Document) -> Value {
    match d {
        Document::Null => Value::Null,
        Document::Bool(b) => Value::Bool(*b),
        Document::Number(Number::PosInt(u)) => json!(u),
        Document::Number(Number::NegInt(i)) => json!(i),
        Document::Number(Number::Float(f)) => json!(f),
        Document::String(s) => Value::String(s.clone()),
        Document::Array(a) => Value::Array(a.iter().map(json_of).collect()),
        Document::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), json_of(v))).collect()),
    }
}

/// A chat completion's `finish_reason` for Converse's stop reason.
fn finish(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens | StopReason::ModelContextWindowExceeded => "length",
        StopReason::ContentFiltered | StopReason::GuardrailIntervened => "content_filter",
        _ => "stop",
    }
}

/// Bedrock's count as OpenAI's `usage`: cache reads and writes are input as well.
fn usage(u: Option<&t::TokenUsage>) -> Value {
    let Some(u) = u else { return Value::Null };
    let read = u.cache_read_input_tokens().unwrap_or(0).max(0) as u64;
    let write = u.cache_write_input_tokens().unwrap_or(0).max(0) as u64;
    let input = u.input_tokens().max(0) as u64 + read + write;
    let output = u.output_tokens().max(0) as u64;
    json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
           "prompt_tokens_details": {"cached_tokens": read}})
}

/// A whole Converse answer as a chat completion.
pub(crate) fn completion(
    model: &str,
    output: Option<&ConverseOutput>,
    stop: &StopReason,
    used: Option<&t::TokenUsage>,
) -> Value {
    let (mut text, mut calls) = (String::new(), Vec::new());
    if let Some(ConverseOutput::Message(m)) = output {
        for block in m.content() {
            match block {
                ContentBlock::Text(s) => text.push_str(s),
                ContentBlock::ToolUse(u) => calls.push(json!({
                    "id": u.tool_use_id(), "type": "function",
                    "function": {"name": u.name(), "arguments": json_of(u.input()).to_string()},
                })),
                _ => {}
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": format!("chatcmpl-bedrock-{}", uuid::Uuid::new_v4().simple()),
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish(stop)}],
        "usage": usage(used),
    })
}

/// Turns `ConverseStream`'s events into chat completion chunks, one event at a time.
pub(crate) struct Chunks {
    id: String,
    model: String,
    created: i64,
    /// The chunk's tool call index of each content block that is a tool use.
    tool_index: HashMap<i32, usize>,
}

impl Chunks {
    pub(crate) fn new(model: &str) -> Chunks {
        Chunks {
            id: format!("chatcmpl-bedrock-{}", uuid::Uuid::new_v4().simple()),
            model: model.to_string(),
            created: chrono::Utc::now().timestamp(),
            tool_index: HashMap::new(),
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Vec<u8> {
        let c = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n").into_bytes()
    }

    /// The chunks one event makes (none for most), and whether it was the last.
    pub(crate) fn of(&mut self, event: &ConverseStreamOutput) -> (Vec<u8>, bool) {
        match event {
            ConverseStreamOutput::MessageStart(_) => {
                (self.chunk(json!({"role": "assistant", "content": ""}), None), false)
            }
            ConverseStreamOutput::ContentBlockStart(s) => match s.start() {
                Some(t::ContentBlockStart::ToolUse(u)) => {
                    let n = self.tool_index.len();
                    self.tool_index.insert(s.content_block_index(), n);
                    let call = json!({"index": n, "id": u.tool_use_id(), "type": "function",
                                      "function": {"name": u.name(), "arguments": ""}});
                    (self.chunk(json!({"tool_calls": [call]}), None), false)
                }
                _ => (Vec::new(), false),
            },
            ConverseStreamOutput::ContentBlockDelta(d) => match d.delta() {
                Some(t::ContentBlockDelta::Text(s)) => (self.chunk(json!({"content": s}), None), false),
                Some(t::ContentBlockDelta::ToolUse(u)) => {
                    let n = self.tool_index.get(&d.content_block_index()).copied().unwrap_or(0);
                    let call = json!({"index": n, "function": {"arguments": u.input()}});
                    (self.chunk(json!({"tool_calls": [call]}), None), false)
                }
                _ => (Vec::new(), false),
            },
            ConverseStreamOutput::MessageStop(s) => (self.chunk(json!({}), Some(finish(s.stop_reason()))), false),
            ConverseStreamOutput::Metadata(m) => {
                let c = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                               "model": self.model, "choices": [], "usage": usage(m.usage())});
                (format!("data: {c}\n\ndata: [DONE]\n\n").into_bytes(), true)
            }
            _ => (Vec::new(), false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_becomes_converse_turns_with_its_tools_and_limits() {
        let body = json!({
            "model": "meta.llama3-70b", "max_tokens": 64, "temperature": 0.2, "stop": "END",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "add 2 and 3"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "5"},
                {"role": "user", "content": [{"type": "text", "text": "and now?"}]}
            ],
            "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
            "tool_choice": "required"
        });
        let a = asked(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!(a.system, [SystemContentBlock::Text("be brief".into())]);
        // The tool's result and the next question are one user turn: Converse alternates.
        let roles: Vec<&ConversationRole> = a.messages.iter().map(|m| m.role()).collect();
        assert_eq!(roles, [&ConversationRole::User, &ConversationRole::Assistant, &ConversationRole::User]);
        assert_eq!(a.messages[2].content().len(), 2);
        let ContentBlock::ToolUse(u) = &a.messages[1].content()[0] else { panic!("{:?}", a.messages[1]) };
        assert_eq!((u.tool_use_id(), u.name(), json_of(u.input())), ("c1", "add", json!({"a": 2, "b": 3})));
        assert_eq!(a.inference.max_tokens(), Some(64));
        assert_eq!(a.inference.stop_sequences(), ["END"]);
        let tools = a.tools.unwrap();
        assert!(matches!(tools.tool_choice(), Some(t::ToolChoice::Any(_))));
        assert_eq!(tools.tools().len(), 1);
    }

    #[test]
    fn a_converse_answer_is_a_chat_completion_with_bedrocks_usage() {
        let input = document(&json!({"x": 1}));
        let call = ToolUseBlock::builder().tool_use_id("t1").name("f").input(input).build().unwrap();
        let m = Message::builder()
            .role(ConversationRole::Assistant)
            .content(ContentBlock::Text("hi".into()))
            .content(ContentBlock::ToolUse(call))
            .build()
            .unwrap();
        let used = t::TokenUsage::builder()
            .input_tokens(10)
            .output_tokens(5)
            .total_tokens(15)
            .cache_read_input_tokens(4)
            .build()
            .unwrap();
        let c = completion("m", Some(&ConverseOutput::Message(m)), &StopReason::ToolUse, Some(&used));
        assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(c["choices"][0]["message"]["content"], "hi");
        assert_eq!(c["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
        assert_eq!(
            c["usage"],
            json!({"prompt_tokens": 14, "completion_tokens": 5, "total_tokens": 19,
                                      "prompt_tokens_details": {"cached_tokens": 4}})
        );
    }
}
