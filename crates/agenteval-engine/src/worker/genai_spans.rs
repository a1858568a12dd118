//! The OpenTelemetry GenAI spans of an agent's model calls and tool executions, built from its
//! trace events (semantic conventions v1.41: `chat {model}` and `execute_tool {tool}` under
//! `agent.execute`), with message content only when the run opts in.

use std::time::SystemTime;

use agenteval_core::model::{EventKind, TraceEvent};
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{Array, KeyValue, StringValue, Value as OtelValue};
use serde_json::{Value, json};

/// Most bytes of one content attribute (a message list, a tool's result): a longer one is cut
/// and says so, since a collector drops a span past its own limit.
const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Who made the calls: the model as the run names it, and what GenAI spans need of it.
#[derive(Debug, Clone)]
pub(super) struct CallModel {
    /// `gen_ai.request.model`: the model without its provider prefix.
    pub model: String,
    /// `gen_ai.provider.name`, when known (the `llm` agent's `openai:` / `anthropic:`).
    pub provider: Option<&'static str>,
}

impl CallModel {
    /// From the agent's `model` setting: `provider:model` for the `llm` agent, any name else.
    pub fn of(model: &str, is_llm: bool) -> CallModel {
        if is_llm && let Ok(spec) = agenteval_llm::ModelSpec::parse(model) {
            return CallModel { model: spec.name.clone(), provider: Some(provider_name(spec.provider)) };
        }
        CallModel { model: model.to_string(), provider: None }
    }
}

/// The semantic conventions' `gen_ai.provider.name` for a provider. An OpenAI-compatible server
/// is spoken to as OpenAI is, which is what OpenAI's own instrumentations report for it.
pub(super) fn provider_name(p: agenteval_llm::Provider) -> &'static str {
    match p {
        agenteval_llm::Provider::OpenAi | agenteval_llm::Provider::OpenAiCompatible => "openai",
        agenteval_llm::Provider::Anthropic => "anthropic",
    }
}

/// A model call whose span is open until its output (plan, tool calls, answer) has been seen.
struct OpenChat {
    span: opentelemetry::global::BoxedSpan,
    /// When the call returned (the event that reported its usage).
    ended: SystemTime,
    parts: Vec<Value>,
    finish: Option<String>,
}

/// Turns the agent's event stream into GenAI spans under `agent.execute`: an LLM call for every
/// event that reports token usage (from the previous event to this one), and a tool execution
/// from each `agent.tool_call` to its `agent.tool_result`.
pub(super) struct CallSpans {
    parent: opentelemetry::Context,
    model: CallModel,
    last_event: SystemTime,
    open_tool: Option<opentelemetry::global::BoxedSpan>,
    open_chat: Option<OpenChat>,
    /// The conversation so far, kept only when content is captured (semconv message form).
    history: Option<Vec<Value>>,
    system: Option<String>,
}

impl CallSpans {
    /// `capture`: the task's input (redacted) and the system prompt, when content goes on spans.
    pub fn new(parent: opentelemetry::Context, model: CallModel, capture: Option<(String, Option<String>)>) -> Self {
        let (history, system) = match capture {
            Some((input, system)) => {
                (Some(vec![json!({"role": "user", "parts": [{"type": "text", "content": input}]})]), system)
            }
            None => (None, None),
        };
        CallSpans { parent, model, last_event: SystemTime::now(), open_tool: None, open_chat: None, history, system }
    }

    pub fn observe(&mut self, ev: &TraceEvent) {
        if !self.parent.span().span_context().is_valid() {
            return;
        }
        let now = SystemTime::now();
        let tracer = opentelemetry::global::tracer("agenteval");
        let str_of = |k: &str| ev.payload.get(k).and_then(Value::as_str).map(str::to_string);
        if ev.kind == EventKind::ModelCall {
            self.gateway_call(&tracer, ev, now);
            return;
        }
        let reports_usage = ev.input_tokens > 0 || ev.output_tokens > 0 || ev.kind == EventKind::CostTick;
        if ev.kind == EventKind::AgentToolResult {
            self.close_chat();
            let mut span = self.open_tool.take().unwrap_or_else(|| self.tool_span(&tracer, ev, self.last_event));
            if ev.input_tokens > 0 || ev.output_tokens > 0 {
                span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", ev.input_tokens as i64));
                span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", ev.output_tokens as i64));
            }
            if ev.payload.get("is_error").and_then(Value::as_bool) == Some(true) {
                span.set_attribute(KeyValue::new("error.type", "tool_error"));
            }
            if let Some(h) = &mut self.history {
                let output = ev.payload.get("output").cloned().unwrap_or(Value::Null);
                span.set_attribute(KeyValue::new("gen_ai.tool.call.result", clip(&text_of(&output))));
                h.push(json!({"role": "tool", "parts": [{
                    "type": "tool_call_response", "id": str_of("call_id"), "response": output,
                }]}));
            }
            span.end_with_timestamp(now);
            self.last_event = now;
            return;
        }
        if reports_usage {
            self.close_tool(now);
            self.close_chat();
            self.open_chat = Some(self.chat_span(&tracer, ev, now));
        }
        match ev.kind {
            EventKind::CostTick => {}
            EventKind::AgentPlan | EventKind::AgentFinalAnswer => {
                self.close_tool(now);
                let text =
                    ev.payload.get("plan").or_else(|| ev.payload.get("answer")).or_else(|| ev.payload.get("text"));
                if let (Some(chat), Some(t)) = (&mut self.open_chat, text) {
                    chat.parts.push(json!({"type": "text", "content": text_of(t)}));
                }
                if ev.kind == EventKind::AgentFinalAnswer {
                    self.close_chat();
                }
            }
            EventKind::AgentToolCall => {
                self.close_tool(now);
                if let Some(chat) = &mut self.open_chat {
                    chat.parts.push(json!({
                        "type": "tool_call", "id": str_of("call_id"), "name": str_of("tool"),
                        "arguments": ev.payload.get("arguments").cloned().unwrap_or(Value::Null),
                    }));
                }
                self.open_tool = Some(self.tool_span(&tracer, ev, now));
            }
            _ => {
                self.close_tool(now);
                self.close_chat();
            }
        }
        self.last_event = now;
    }

    fn chat_span(&self, tracer: &opentelemetry::global::BoxedTracer, ev: &TraceEvent, now: SystemTime) -> OpenChat {
        let m = &self.model;
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.request.model", m.model.clone()),
            KeyValue::new("gen_ai.usage.input_tokens", ev.input_tokens as i64),
            KeyValue::new("gen_ai.usage.output_tokens", ev.output_tokens as i64),
            KeyValue::new("agenteval.cost_usd", ev.cost_usd),
            KeyValue::new("agenteval.step", ev.step as i64),
        ];
        if let Some(p) = m.provider {
            attrs.push(KeyValue::new("gen_ai.provider.name", p));
        }
        if let Some(model) = ev.payload.get("model").and_then(Value::as_str) {
            attrs.push(KeyValue::new("gen_ai.response.model", model.to_string()));
        }
        if let Some(n) = ev.payload.get("cached_input_tokens").and_then(Value::as_u64).filter(|n| *n > 0) {
            attrs.push(KeyValue::new("gen_ai.usage.cache_read.input_tokens", n as i64));
        }
        let finish = ev.payload.get("stop_reason").and_then(Value::as_str).map(str::to_string);
        if let Some(f) = &finish {
            let reasons = Array::String(vec![StringValue::from(f.clone())]);
            attrs.push(KeyValue::new("gen_ai.response.finish_reasons", OtelValue::Array(reasons)));
        }
        if let Some(h) = &self.history {
            attrs.push(KeyValue::new("gen_ai.input.messages", clip(&Value::Array(h.clone()).to_string())));
            if let Some(s) = &self.system {
                let parts = json!([{"type": "text", "content": s}]);
                attrs.push(KeyValue::new("gen_ai.system_instructions", clip(&parts.to_string())));
            }
        }
        let span = tracer
            .span_builder(format!("chat {}", m.model))
            .with_kind(SpanKind::Client)
            .with_start_time(self.last_event)
            .with_attributes(attrs)
            .start_with_context(tracer, &self.parent);
        OpenChat { span, ended: now, parts: Vec::new(), finish }
    }

    /// A call through the gateway: a whole `chat` span of its own, timed by the gateway (it
    /// ended as the event was written), with the provider its wire names.
    fn gateway_call(&self, tracer: &opentelemetry::global::BoxedTracer, ev: &TraceEvent, now: SystemTime) {
        let p = &ev.payload;
        let str_of = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let model = str_of("model");
        let wire = str_of("wire");
        let provider = if wire.starts_with("anthropic") { "anthropic" } else { "openai" };
        let latency = std::time::Duration::from_millis(p.get("latency_ms").and_then(Value::as_u64).unwrap_or(0));
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider),
            KeyValue::new("gen_ai.request.model", model.clone()),
            KeyValue::new("gen_ai.usage.input_tokens", ev.input_tokens as i64),
            KeyValue::new("gen_ai.usage.output_tokens", ev.output_tokens as i64),
            KeyValue::new("agenteval.cost_usd", ev.cost_usd),
            KeyValue::new("agenteval.step", ev.step as i64),
            KeyValue::new("agenteval.gateway.wire", wire),
            KeyValue::new("http.response.status_code", p.get("status").and_then(Value::as_i64).unwrap_or(0)),
        ];
        if let Some(n) = p.get("cached_input_tokens").and_then(Value::as_u64).filter(|n| *n > 0) {
            attrs.push(KeyValue::new("gen_ai.usage.cache_read.input_tokens", n as i64));
        }
        let finish = str_of("finish_reason");
        if !finish.is_empty() {
            let reasons = Array::String(vec![StringValue::from(finish.clone())]);
            attrs.push(KeyValue::new("gen_ai.response.finish_reasons", OtelValue::Array(reasons)));
        }
        if self.history.is_some() {
            let input = json!([{"role": "user", "parts": [{"type": "text", "content": str_of("prompt")}]}]);
            attrs.push(KeyValue::new("gen_ai.input.messages", clip(&input.to_string())));
            let output = json!([{"role": "assistant", "parts": [{"type": "text", "content": str_of("answer")}],
                "finish_reason": semconv_finish_reason(Some(&finish), &[])}]);
            attrs.push(KeyValue::new("gen_ai.output.messages", clip(&output.to_string())));
        }
        let mut span = tracer
            .span_builder(format!("chat {model}"))
            .with_kind(SpanKind::Client)
            .with_start_time(now.checked_sub(latency).unwrap_or(now))
            .with_attributes(attrs)
            .start_with_context(tracer, &self.parent);
        if let Some(why) = p.pointer("/refused/reason").and_then(Value::as_str) {
            span.set_status(opentelemetry::trace::Status::error(why.to_string()));
        }
        span.end_with_timestamp(now);
    }

    fn tool_span(
        &self,
        tracer: &opentelemetry::global::BoxedTracer,
        ev: &TraceEvent,
        start: SystemTime,
    ) -> opentelemetry::global::BoxedSpan {
        let tool = ev.payload.get("tool").and_then(Value::as_str).unwrap_or("unknown").to_string();
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.clone()),
            KeyValue::new("gen_ai.tool.type", "function"),
        ];
        if let Some(id) = ev.payload.get("call_id").and_then(Value::as_str) {
            attrs.push(KeyValue::new("gen_ai.tool.call.id", id.to_string()));
        }
        if self.history.is_some()
            && let Some(args) = ev.payload.get("arguments")
        {
            attrs.push(KeyValue::new("gen_ai.tool.call.arguments", clip(&args.to_string())));
        }
        tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(tracer, &self.parent)
    }

    /// Ends the open model call with what it answered.
    fn close_chat(&mut self) {
        let Some(mut chat) = self.open_chat.take() else { return };
        if let Some(h) = &mut self.history {
            let message = json!({
                "role": "assistant",
                "parts": chat.parts,
                "finish_reason": semconv_finish_reason(chat.finish.as_deref(), &chat.parts),
            });
            chat.span.set_attribute(KeyValue::new("gen_ai.output.messages", clip(&json!([message]).to_string())));
            h.push(json!({"role": "assistant", "parts": message["parts"]}));
        }
        chat.span.end_with_timestamp(chat.ended);
    }

    /// A tool call without a result ended when the agent moved on.
    fn close_tool(&mut self, now: SystemTime) {
        if let Some(mut open) = self.open_tool.take() {
            open.set_status(opentelemetry::trace::Status::error("no tool result"));
            open.end_with_timestamp(now);
        }
    }

    /// Closes what is still open; later events (the runner's) make no spans.
    pub fn finish(&mut self) {
        self.close_chat();
        self.close_tool(SystemTime::now());
        self.parent = opentelemetry::Context::new();
    }
}

/// A provider's stop reason as the conventions' output-message `finish_reason` (`stop`,
/// `length`, `content_filter`, `tool_call`, `error`); the provider's own word stays in
/// `gen_ai.response.finish_reasons`.
fn semconv_finish_reason(reason: Option<&str>, parts: &[Value]) -> &'static str {
    match reason {
        Some("length" | "max_tokens") => "length",
        Some("content_filter" | "refusal") => "content_filter",
        Some("tool_calls" | "tool_use" | "function_call") => "tool_call",
        _ if parts.iter().any(|p| p["type"] == "tool_call") => "tool_call",
        _ => "stop",
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `s`, cut to [`MAX_CONTENT_BYTES`] on a character boundary, saying so.
fn clip(s: &str) -> String {
    if s.len() <= MAX_CONTENT_BYTES {
        return s.to_string();
    }
    let mut end = MAX_CONTENT_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} of {} bytes]", &s[..end], end, s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llm_agents_model_names_its_provider_and_others_do_not() {
        let m = CallModel::of("anthropic:claude-sonnet-4-5", true);
        assert_eq!((m.model.as_str(), m.provider), ("claude-sonnet-4-5", Some("anthropic")));
        let m = CallModel::of("openai:gpt-4o-mini", true);
        assert_eq!((m.model.as_str(), m.provider), ("gpt-4o-mini", Some("openai")));
        let m = CallModel::of("lookup-1", false);
        assert_eq!((m.model.as_str(), m.provider), ("lookup-1", None));
    }

    #[test]
    fn stop_reasons_read_as_the_conventions_finish_reasons() {
        let call = [json!({"type": "tool_call"})];
        assert_eq!(semconv_finish_reason(Some("end_turn"), &[]), "stop");
        assert_eq!(semconv_finish_reason(Some("tool_use"), &[]), "tool_call");
        assert_eq!(semconv_finish_reason(None, &call), "tool_call");
        assert_eq!(semconv_finish_reason(Some("max_tokens"), &[]), "length");
    }

    #[test]
    fn long_content_is_cut_on_a_character_boundary_and_says_so() {
        let s = "é".repeat(MAX_CONTENT_BYTES);
        let c = clip(&s);
        assert!(c.len() < s.len() && c.contains("[cut: 65536 of 131072 bytes]"), "{}", &c[c.len() - 40..]);
        assert_eq!(clip("short"), "short");
    }
}
