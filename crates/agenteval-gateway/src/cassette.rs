//! A task's calls through the gateway as cassette lines (`cassette.jsonl`: request, answer or
//! its stream of events, usage, timing), their fingerprints, and finding a call's recording
//! again in a replay.

use agenteval_core::config::ReplayMatch;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// Request fields left out of a fingerprint: ids and tags an agent may set per run, which say
/// nothing of what it asks.
// `client_metadata`: Codex's per-turn ids (`root_turn_id`), new on every call of every run.
const UNFINGERPRINTED: &[&str] =
    &["user", "metadata", "client_metadata", "prompt_cache_key", "safety_identifier", "stream_options"];

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Most bytes of one answer kept in a cassette line; a longer one is recorded without its body
/// and cannot be replayed.
pub const MAX_RECORDED_BYTES: usize = 8 << 20;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// 0-based position of the call in its task, in arrival order.
    pub call: u32,
    pub fingerprint: String,
    /// `openai.chat`, `openai.responses`, `anthropic.messages`.
    pub wire: String,
    pub model: String,
    /// The request as the agent sent it (redacted).
    pub request: Value,
    pub status: u16,
    /// A whole answer's body (redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
    /// A streamed answer, its events as sent (redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// The answer was too long to keep: this call cannot be replayed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// The provider reported its usage.
    #[serde(default)]
    pub usage_known: bool,
    #[serde(default)]
    pub ttfb_ms: u64,
    #[serde(default)]
    pub latency_ms: u64,
}

/// sha256 of the request's canonical JSON (keys sorted, no whitespace) on its wire, without
/// the fields in [`UNFINGERPRINTED`]: the same call gives the same fingerprint on every machine.
pub fn fingerprint(wire: &str, body: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String((*k).clone()).to_string());
                    out.push(':');
                    canonical(&m[*k], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::from(wire);
    text.push('\n');
    canonical(&fingerprinted(wire, body), &mut text);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The part of a request its fingerprint covers: all but [`UNFINGERPRINTED`], and on the
/// Responses wire what Codex makes anew each run: the `id` of each `input` item (it names each
/// message it sends `msg_<uuid>`; the ids of items the model made come back the same from a
/// recording anyway) and, in a tool's output, the lines of [`VOLATILE_OUTPUT_LINES`].
fn fingerprinted(wire: &str, body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(o) = body.as_object_mut() {
        for k in UNFINGERPRINTED {
            o.remove(*k);
        }
        if wire == crate::wire::Wire::Responses.name()
            && let Some(items) = o.get_mut("input").and_then(Value::as_array_mut)
        {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                item.remove("id");
                if let Some(Value::String(output)) = item.get_mut("output") {
                    *output = steady_output(output);
                }
            }
        }
    }
    body
}

/// Lines of a tool's output that differ between two runs of the same command, by their start
/// and end: Codex's `exec` reports a random chunk id and the time the command took.
const VOLATILE_OUTPUT_LINES: &[(&str, &str)] = &[("Chunk ID: ", ""), ("Wall time: ", " seconds")];

/// A tool's output with its [`VOLATILE_OUTPUT_LINES`] reduced to their fixed parts.
fn steady_output(output: &str) -> String {
    let steady = |line: &str| {
        VOLATILE_OUTPUT_LINES
            .iter()
            .find(|(start, end)| {
                line.starts_with(start) && line.ends_with(end) && line.len() >= start.len() + end.len()
            })
            .map_or_else(|| line.to_string(), |(start, end)| format!("{start}…{end}"))
    };
    output.split('\n').map(steady).collect::<Vec<_>>().join("\n")
}

/// Parses cassette lines; lines of another shape (the `llm` agent's) are an error naming the
/// line.
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("cassette line {}: not a gateway call: {e}", i + 1)))
        .collect()
}

/// The recorded calls of a task being replayed, each answered at most once.
#[derive(Debug)]
pub struct Replayer {
    /// Why the recording could not be read, when it could not (every call is then a miss).
    pub unreadable: Option<String>,
    entries: Vec<Entry>,
    used: Vec<bool>,
    rule: ReplayMatch,
}

impl Replayer {
    pub fn new(entries: Vec<Entry>, rule: ReplayMatch) -> Self {
        let used = vec![false; entries.len()];
        Replayer { unreadable: None, entries, used, rule }
    }

    /// The recording of the task's call `n` (0-based): the first unused one with the same
    /// fingerprint (an agent with calls in flight at once may send them in another order);
    /// under `order`, else the n-th recorded call if unused and of the same wire and model.
    pub fn find(&mut self, n: usize, fingerprint: &str, wire: &str, model: &str) -> Option<Entry> {
        let same = (0..self.entries.len()).find(|&i| !self.used[i] && self.entries[i].fingerprint == fingerprint);
        let at = same.or_else(|| {
            (self.rule == ReplayMatch::Order
                && self.entries.get(n).is_some_and(|e| e.wire == wire && e.model == model)
                && !self.used[n])
                .then_some(n)
        })?;
        if self.entries[at].truncated {
            return None;
        }
        self.used[at] = true;
        Some(self.entries[at].clone())
    }

    /// Why call `n` (whose request is `now`) has no recording, in one line.
    pub fn miss(&self, n: usize, wire: &str, model: &str, now: &Value) -> String {
        if let Some(why) = &self.unreadable {
            return format!("the recording cannot be read ({why}): record it again with this agenteval");
        }
        match self.entries.get(n) {
            None => format!(
                "call {} ({wire} {model}) is not in the recording, which has {} call(s)",
                n + 1,
                self.entries.len()
            ),
            Some(e) if e.wire != wire || e.model != model => {
                format!("call {} is {wire} {model}; the recording's was {} {}", n + 1, e.wire, e.model)
            }
            Some(e) if e.truncated => format!("call {}: its recorded answer was too long to keep", n + 1),
            // Where the fingerprints differ: a field left out of them is no reason for a miss.
            Some(e) => {
                match agenteval_llm::first_difference(&fingerprinted(wire, &e.request), &fingerprinted(wire, now)) {
                    Some((at, was, is)) => format!(
                        "call {} differs from the recording at {at}: recorded {}, now {} (a changed prompt or \
                     setting is a real difference: record again; an id or time the agent makes anew each run \
                     is not: `agent.upstream.replay_match: order` answers such calls by position)",
                        n + 1,
                        shown(was),
                        shown(is)
                    ),
                    None => format!("call {} differs from the recording (in a redacted value)", n + 1),
                }
            }
        }
    }
}

fn shown(v: Option<Value>) -> String {
    let s = v.map_or_else(|| "nothing".to_string(), |v| v.to_string());
    if s.chars().count() > 160 { format!("{}…", s.chars().take(160).collect::<String>()) } else { s }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(call: u32, body: Value) -> Entry {
        Entry {
            call,
            fingerprint: fingerprint("openai.chat", &body),
            wire: "openai.chat".into(),
            model: "m".into(),
            request: body,
            status: 200,
            response: Some(json!({})),
            stream: None,
            truncated: false,
            input_tokens: 1,
            output_tokens: 1,
            cached_input_tokens: 0,
            cache_write_tokens: 0,
            usage_known: true,
            ttfb_ms: 0,
            latency_ms: 0,
        }
    }

    #[test]
    fn fingerprints_ignore_key_order_and_per_run_tags() {
        let a = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "user": "run-1"});
        let b = json!({"messages": [{"content": "x", "role": "user"}], "model": "m", "user": "run-2"});
        assert_eq!(fingerprint("openai.chat", &a), fingerprint("openai.chat", &b));
        assert_ne!(fingerprint("openai.chat", &a), fingerprint("openai.responses", &a));
        let c = json!({"model": "m", "messages": [{"role": "user", "content": "y"}]});
        assert_ne!(fingerprint("openai.chat", &a), fingerprint("openai.chat", &c));
        // Codex's Responses calls carry a new turn id each time: a recording still replays.
        let turn = |id: &str| json!({"model": "m", "input": "x", "client_metadata": {"root_turn_id": id}});
        assert_eq!(fingerprint("openai.responses", &turn("t-1")), fingerprint("openai.responses", &turn("t-2")));
        // …and names each message it sends anew; what the message says still counts.
        let said =
            |id: &str, text: &str| json!({"model": "m", "input": [{"type": "message", "id": id, "content": text}]});
        let r = "openai.responses";
        assert_eq!(fingerprint(r, &said("msg_1", "hi")), fingerprint(r, &said("msg_2", "hi")));
        assert_ne!(fingerprint(r, &said("msg_1", "hi")), fingerprint(r, &said("msg_1", "bye")));
        assert_ne!(fingerprint("openai.chat", &said("msg_1", "hi")), fingerprint("openai.chat", &said("msg_2", "hi")));
        // …and its tool output says a random chunk id and the time taken; not the output itself.
        let ran = |chunk: &str, took: &str, out: &str| {
            let output =
                format!("Chunk ID: {chunk}\nWall time: {took} seconds\nProcess exited with code 0\nOutput:\n{out}");
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c1", "output": output}]})
        };
        assert_eq!(fingerprint(r, &ran("2f9f97", "0.0512", "42")), fingerprint(r, &ran("4cdc19", "0.0020", "42")));
        assert_ne!(fingerprint(r, &ran("2f9f97", "0.0512", "42")), fingerprint(r, &ran("2f9f97", "0.0512", "43")));
    }

    #[test]
    fn replay_matches_by_fingerprint_in_any_order_and_by_order_only_when_asked() {
        let one = json!({"model": "m", "messages": ["one"]});
        let two = json!({"model": "m", "messages": ["two"]});
        let entries = vec![entry(0, one.clone()), entry(1, two.clone())];
        let mut r = Replayer::new(entries.clone(), ReplayMatch::Fingerprint);
        assert_eq!(r.find(0, &fingerprint("openai.chat", &two), "openai.chat", "m").unwrap().call, 1);
        assert_eq!(r.find(1, &fingerprint("openai.chat", &one), "openai.chat", "m").unwrap().call, 0);
        // Each recording answers once.
        assert!(r.find(2, &fingerprint("openai.chat", &one), "openai.chat", "m").is_none());
        let changed = json!({"model": "m", "messages": ["one at 12:00"]});
        let mut strict = Replayer::new(entries.clone(), ReplayMatch::Fingerprint);
        assert!(strict.find(0, &fingerprint("openai.chat", &changed), "openai.chat", "m").is_none());
        assert!(
            strict.miss(0, "openai.chat", "m", &changed).contains("/messages/0"),
            "{}",
            strict.miss(0, "openai.chat", "m", &changed)
        );
        let mut by_order = Replayer::new(entries, ReplayMatch::Order);
        assert_eq!(by_order.find(0, &fingerprint("openai.chat", &changed), "openai.chat", "m").unwrap().call, 0);
        assert!(by_order.find(1, "other", "openai.chat", "other-model").is_none());
    }
}
