//! The three wires the gateway speaks: which one a call is, what its request asks (model,
//! stream, last message), what its answer says (usage, finish reason, text) whether whole or
//! streamed as server-sent events, and errors shaped as each provider shapes them.

use agenteval_llm::Usage;
use serde_json::{Value, json};

/// Most characters of a prompt or an answer kept in a call's record.
pub const SHOWN_CHARS: usize = 4_000;
/// Most bytes of a whole (not streamed) answer parsed as JSON; a longer answer is passed through
/// and its usage read from its last [`TAIL_BYTES`] (the providers write `usage` after the answer).
const MAX_JSON_BYTES: usize = 32 << 20;
/// What is kept of the end of an answer too long to parse whole, to read its usage from.
const TAIL_BYTES: usize = 1 << 20;

/// A wire, named by the path it is called at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI chat completions: `POST /v1/chat/completions`.
    Chat,
    /// OpenAI Responses: `POST /v1/responses`.
    Responses,
    /// Anthropic Messages: `POST /v1/messages`.
    Messages,
}

impl Wire {
    /// As recorded in a call and its cassette line.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Chat => "openai.chat",
            Wire::Responses => "openai.responses",
            Wire::Messages => "anthropic.messages",
        }
    }

    /// The path under the upstream's base URL (which ends in `/v1`).
    pub fn path(self) -> &'static str {
        match self {
            Wire::Chat => "chat/completions",
            Wire::Responses => "responses",
            Wire::Messages => "messages",
        }
    }

    pub fn is_anthropic(self) -> bool {
        self == Wire::Messages
    }
}

/// What a request asks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asked {
    pub model: String,
    pub stream: bool,
    /// The text of its last message (or its `input`), cut to [`SHOWN_CHARS`].
    pub prompt: String,
}

/// Reads what `body` asks on `wire`.
pub fn asked(wire: Wire, body: &Value) -> Asked {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("").to_string();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let last = match wire {
        Wire::Chat | Wire::Messages => body.get("messages").and_then(Value::as_array).and_then(|m| m.last()),
        Wire::Responses => match body.get("input") {
            Some(Value::Array(items)) => items.last(),
            other => other,
        },
    };
    let prompt = last.map(|m| text_of(m.get("content").unwrap_or(m))).unwrap_or_default();
    Asked { model, stream, prompt: cut(&prompt) }
}

/// The text of a message's content: a string, or the `text` of its parts.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                p => p
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| p.get("content").map(text_of).filter(|t| !t.is_empty())),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `s` cut to [`SHOWN_CHARS`], saying so.
pub fn cut(s: &str) -> String {
    if s.chars().count() <= SHOWN_CHARS {
        return s.to_string();
    }
    let mut out: String = s.chars().take(SHOWN_CHARS).collect();
    out.push_str(" [cut]");
    out
}

/// A streamed chat call reports its usage only when asked: the gateway asks (the agent then
/// also gets the final usage chunk, which OpenAI's SDKs accept). Whether `body` was changed.
pub fn ensure_stream_usage(wire: Wire, body: &mut Value) -> bool {
    if wire != Wire::Chat || body.get("stream").and_then(Value::as_bool) != Some(true) {
        return false;
    }
    let Some(obj) = body.as_object_mut() else { return false };
    let options = obj.entry("stream_options").or_insert_with(|| json!({}));
    match options.as_object_mut() {
        Some(o) if o.get("include_usage") == Some(&Value::Bool(true)) => false,
        Some(o) => {
            o.insert("include_usage".into(), Value::Bool(true));
            true
        }
        None => {
            *options = json!({"include_usage": true});
            true
        }
    }
}

/// What an answer said, as far as the gateway reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Heard {
    /// `None`: the answer carried no usage the gateway could read.
    pub usage: Option<Usage>,
    pub finish: String,
    /// Its text, cut to [`SHOWN_CHARS`].
    pub text: String,
}

/// Reads an answer as its bytes pass through: whole JSON, or server-sent events line by line.
#[derive(Debug)]
pub struct Listener {
    wire: Wire,
    stream: bool,
    buf: Vec<u8>,
    too_big: bool,
    heard: Heard,
    text_chars: usize,
}

impl Listener {
    /// `stream`: the answer is `text/event-stream`.
    pub fn new(wire: Wire, stream: bool) -> Self {
        Listener { wire, stream, buf: Vec::new(), too_big: false, heard: Heard::default(), text_chars: 0 }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.stream {
            if !self.too_big && self.buf.len() + chunk.len() > MAX_JSON_BYTES {
                self.too_big = true;
            }
            self.buf.extend_from_slice(chunk);
            // Past the cap only the answer's end is kept, for its usage.
            if self.too_big && self.buf.len() > 2 * TAIL_BYTES {
                self.buf.drain(..self.buf.len() - TAIL_BYTES);
            }
            return;
        }
        self.buf.extend_from_slice(chunk);
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            self.line(&line);
        }
        // A line longer than any event: not server-sent events the gateway reads.
        if self.buf.len() > MAX_JSON_BYTES {
            self.buf.clear();
        }
    }

    pub fn finish(self) -> Heard {
        self.finish_with_body().0
    }

    /// What the answer said, and a whole answer's JSON (read once, for its record too).
    pub fn finish_with_body(mut self) -> (Heard, Option<Value>) {
        let mut body = None;
        if self.stream {
            let rest = std::mem::take(&mut self.buf);
            self.line(&rest);
        } else if self.too_big {
            // The usage is all that is read of an answer this long: what the provider bills.
            self.heard.usage = usage_in_tail(&self.buf).and_then(|u| whole(self.wire, &u).usage);
        } else if let Ok(v) = serde_json::from_slice::<Value>(&self.buf) {
            self.heard = whole(self.wire, &v);
            body = Some(v);
        }
        (self.heard, body)
    }

    fn line(&mut self, raw: &[u8]) {
        let line = String::from_utf8_lossy(raw);
        let Some(data) = line.trim_end().strip_prefix("data:") else { return };
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else { return };
        self.event(&v);
    }

    fn push_text(&mut self, t: &str) {
        if self.text_chars < SHOWN_CHARS {
            let room = SHOWN_CHARS - self.text_chars;
            let taken: String = t.chars().take(room).collect();
            self.text_chars += taken.chars().count();
            self.heard.text.push_str(&taken);
        }
    }

    fn event(&mut self, v: &Value) {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        match self.wire {
            Wire::Chat => {
                if let Some(t) = s("/choices/0/delta/content") {
                    self.push_text(&t);
                }
                if let Some(f) = s("/choices/0/finish_reason") {
                    self.heard.finish = f;
                }
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    self.heard.usage =
                        Some(openai_usage(u, "prompt_tokens", "completion_tokens", "prompt_tokens_details"));
                }
            }
            Wire::Responses => match v.get("type").and_then(Value::as_str) {
                Some("response.output_text.delta") => {
                    if let Some(t) = s("/delta") {
                        self.push_text(&t);
                    }
                }
                Some("response.completed" | "response.incomplete" | "response.failed") => {
                    if let Some(r) = v.get("response") {
                        let w = whole(Wire::Responses, r);
                        self.heard.usage = w.usage;
                        self.heard.finish = w.finish;
                    }
                }
                _ => {}
            },
            // Amazon Bedrock's own count, on its stream's last event, is the one it bills.
            Wire::Messages if v.get("amazon-bedrock-invocationMetrics").is_some_and(Value::is_object) => {
                self.heard.usage = v.get("amazon-bedrock-invocationMetrics").map(bedrock_usage);
            }
            Wire::Messages => match v.get("type").and_then(Value::as_str) {
                Some("message_start") => {
                    if let Some(u) = v.pointer("/message/usage") {
                        self.heard.usage = Some(anthropic_usage(u, None));
                    }
                }
                Some("content_block_delta") => {
                    if let Some(t) = s("/delta/text") {
                        self.push_text(&t);
                    }
                }
                Some("message_delta") => {
                    if let Some(f) = s("/delta/stop_reason") {
                        self.heard.finish = f;
                    }
                    // The final output count (cumulative), and input counts when they changed.
                    if let Some(u) = v.get("usage") {
                        self.heard.usage = Some(anthropic_usage(u, self.heard.usage));
                    }
                }
                _ => {}
            },
        }
    }
}

/// Reads a whole answer.
/// `{"usage": …}` from the last top-level-looking `"usage":` object in the end of an answer too
/// long to parse whole. A model's text cannot forge it: inside a JSON string a quote is escaped
/// (`\"usage\"`), and the providers write their `usage` after the answer's text.
fn usage_in_tail(tail: &[u8]) -> Option<Value> {
    const KEY: &[u8] = b"\"usage\"";
    let at = tail.windows(KEY.len()).rposition(|w| w == KEY)?;
    let rest = &tail[at + KEY.len()..];
    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if rest[colon] != b':' {
        return None;
    }
    let value = serde_json::Deserializer::from_slice(&rest[colon + 1..]).into_iter::<Value>().next()?.ok()?;
    value.is_object().then(|| serde_json::json!({ "usage": value }))
}

pub fn whole(wire: Wire, v: &Value) -> Heard {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    match wire {
        Wire::Chat => Heard {
            usage: v
                .get("usage")
                .filter(|u| u.is_object())
                .map(|u| openai_usage(u, "prompt_tokens", "completion_tokens", "prompt_tokens_details")),
            finish: s("/choices/0/finish_reason"),
            text: cut(&s("/choices/0/message/content")),
        },
        Wire::Responses => {
            let mut text = String::new();
            for item in v.get("output").and_then(Value::as_array).into_iter().flatten() {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    if part.get("type").and_then(Value::as_str) == Some("output_text") {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                }
            }
            Heard {
                usage: v
                    .get("usage")
                    .filter(|u| u.is_object())
                    .map(|u| openai_usage(u, "input_tokens", "output_tokens", "input_tokens_details")),
                finish: s("/status"),
                text: cut(&text),
            }
        }
        Wire::Messages => Heard {
            usage: v.get("usage").filter(|u| u.is_object()).map(|u| anthropic_usage(u, None)),
            finish: s("/stop_reason"),
            text: cut(&text_of(v.get("content").unwrap_or(&Value::Null))),
        },
    }
}

/// Bedrock's `amazon-bedrock-invocationMetrics`: its input count leaves out the cache's reads and
/// writes, which it counts apart (as Anthropic does).
fn bedrock_usage(m: &Value) -> Usage {
    let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (read, write) = (n("cacheReadInputTokenCount"), n("cacheWriteInputTokenCount"));
    Usage {
        input_tokens: n("inputTokenCount") + read + write,
        output_tokens: n("outputTokenCount"),
        cached_input_tokens: read,
        cache_write_tokens: write,
    }
}

fn openai_usage(u: &Value, input: &str, output: &str, details: &str) -> Usage {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n(&format!("/{input}")),
        output_tokens: n(&format!("/{output}")),
        cached_input_tokens: n(&format!("/{details}/cached_tokens")),
        cache_write_tokens: 0,
    }
}

/// Anthropic counts cache reads and writes apart from `input_tokens`; the gateway's input is
/// all three (reads and writes each at their own price). `before`: what an earlier event of the same stream
/// said, which a `message_delta` only updates.
fn anthropic_usage(u: &Value, before: Option<Usage>) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let before = before.unwrap_or_default();
    let parts = [n("input_tokens"), n("cache_read_input_tokens"), n("cache_creation_input_tokens")];
    let input = if parts.iter().any(Option::is_some) {
        parts.iter().map(|p| p.unwrap_or(0)).sum()
    } else {
        before.input_tokens
    };
    Usage {
        input_tokens: input,
        output_tokens: n("output_tokens").unwrap_or(before.output_tokens),
        cached_input_tokens: n("cache_read_input_tokens").unwrap_or(before.cached_input_tokens),
        cache_write_tokens: n("cache_creation_input_tokens").unwrap_or(before.cache_write_tokens),
    }
}

/// An error answer as `wire`'s provider shapes one: `kind` is its error type.
pub fn error_body(wire: Wire, kind: &str, message: &str) -> Value {
    if wire.is_anthropic() {
        json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        json!({"error": {"message": message, "type": kind, "code": kind, "param": null}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer past what is parsed whole still has its usage read (what the provider bills),
    /// not a forged one inside its text.
    #[test]
    fn the_usage_of_an_answer_too_long_to_parse_whole_is_read_from_its_end() {
        let filler = "x".repeat(MAX_JSON_BYTES + 1000);
        let forged = r#"\"usage\": {\"prompt_tokens\": 1, \"completion_tokens\": 1}"#;
        let body = format!(
            r#"{{"id":"c1","choices":[{{"message":{{"role":"assistant","content":"{forged} {filler}"}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":12,"completion_tokens":50025,"total_tokens":50037}},"system_fingerprint":"fp"}}"#
        );
        let mut l = Listener::new(Wire::Chat, false);
        for piece in body.as_bytes().chunks(1 << 16) {
            l.feed(piece);
        }
        let (heard, parsed) = l.finish_with_body();
        assert!(parsed.is_none(), "too long to parse whole");
        let u = heard.usage.expect("the usage is read");
        assert_eq!((u.input_tokens, u.output_tokens), (12, 50025));
        // Anthropic's answer, the same way.
        let body = format!(
            r#"{{"type":"message","content":[{{"type":"text","text":"{filler}"}}],"stop_reason":"max_tokens","usage":{{"input_tokens":7,"output_tokens":64000}}}}"#
        );
        let mut l = Listener::new(Wire::Messages, false);
        l.feed(body.as_bytes());
        assert_eq!(l.finish().usage.map(|u| u.output_tokens), Some(64000));
    }

    fn streamed(wire: Wire, text: &str) -> Heard {
        let mut l = Listener::new(wire, true);
        // Fed in awkward pieces: an event may be split anywhere.
        for piece in text.as_bytes().chunks(7) {
            l.feed(piece);
        }
        l.finish()
    }

    #[test]
    fn a_streamed_chat_answer_gives_its_final_usage_and_text() {
        let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\n\
                   data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
                   data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n\
                   data: [DONE]\n\n";
        let h = streamed(Wire::Chat, sse);
        assert_eq!(h.text, "hello");
        assert_eq!(h.finish, "stop");
        assert_eq!(
            h.usage,
            Some(Usage { input_tokens: 12, output_tokens: 3, cached_input_tokens: 2, cache_write_tokens: 0 })
        );
    }

    #[test]
    fn a_streamed_anthropic_answer_adds_cache_reads_and_takes_the_last_output_count() {
        let sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n\
                   event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n\
                   event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n";
        let h = streamed(Wire::Messages, sse);
        assert_eq!(
            h.usage,
            Some(Usage { input_tokens: 25, output_tokens: 9, cached_input_tokens: 5, cache_write_tokens: 0 })
        );
        assert_eq!((h.text.as_str(), h.finish.as_str()), ("ok", "end_turn"));
    }

    #[test]
    fn bedrocks_invocation_metrics_are_the_count_of_its_stream() {
        let sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
                   event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
                   event: message_stop\ndata: {\"type\":\"message_stop\",\"amazon-bedrock-invocationMetrics\":{\"inputTokenCount\":30,\"outputTokenCount\":7,\"cacheReadInputTokenCount\":4,\"cacheWriteInputTokenCount\":2,\"invocationLatency\":9}}\n\n";
        let h = streamed(Wire::Messages, sse);
        assert_eq!(
            h.usage,
            Some(Usage { input_tokens: 36, output_tokens: 7, cached_input_tokens: 4, cache_write_tokens: 2 })
        );
        assert_eq!(h.finish, "end_turn");
    }

    #[test]
    fn a_streamed_responses_answer_reads_the_completed_event() {
        let sse = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n\
                   event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":7,\"output_tokens\":2}}}\n\n";
        let h = streamed(Wire::Responses, sse);
        assert_eq!(
            h.usage,
            Some(Usage { input_tokens: 7, output_tokens: 2, cached_input_tokens: 0, cache_write_tokens: 0 })
        );
        assert_eq!((h.text.as_str(), h.finish.as_str()), ("hi", "completed"));
    }

    #[test]
    fn whole_answers_and_what_was_asked() {
        let a = json!({"content": [{"type": "text", "text": "yes"}], "stop_reason": "end_turn",
                       "usage": {"input_tokens": 3, "output_tokens": 1}});
        assert_eq!(whole(Wire::Messages, &a).usage.unwrap().input_tokens, 3);
        let mut l = Listener::new(Wire::Chat, false);
        l.feed(br#"{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#);
        let h = l.finish();
        assert_eq!((h.usage.unwrap().output_tokens, h.text.as_str()), (2, "x"));
        let no_usage = whole(Wire::Chat, &json!({"choices": []}));
        assert_eq!(no_usage.usage, None);
        let r =
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "do it"}]}]});
        assert_eq!(asked(Wire::Responses, &r).prompt, "do it");
        let r = json!({"model": "m", "input": "plain", "stream": true});
        assert_eq!(asked(Wire::Responses, &r), Asked { model: "m".into(), stream: true, prompt: "plain".into() });
    }

    #[test]
    fn a_streamed_chat_call_is_made_to_report_usage() {
        let mut b = json!({"model": "m", "stream": true});
        assert!(ensure_stream_usage(Wire::Chat, &mut b));
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(!ensure_stream_usage(Wire::Chat, &mut b));
        let mut whole = json!({"model": "m"});
        assert!(!ensure_stream_usage(Wire::Chat, &mut whole));
    }
}
