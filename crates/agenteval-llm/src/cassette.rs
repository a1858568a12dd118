//! Cassettes: every model call of a task, in order, as JSON lines of `{call, fingerprint,
//! request, response}`. Recorded with `--cassette-mode record`, replayed with `replay` (strict:
//! a request that differs from the recording fails the task, naming the first difference) or
//! `replay-or-live` (a miss goes to the live model). Every `llm` task also keeps its calls in its
//! bundle folder (`cassette.jsonl`), which is what `agenteval replay` feeds back.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use agenteval_core::secret::Redactor;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::LlmClient;
use crate::error::LlmError;
use crate::types::{ChatRequest, ChatResponse};

/// How recorded calls are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CassetteMode {
    /// Call the model and write every call to the cassette.
    Record,
    /// Answer from the cassette only; the live model is never called.
    Replay,
    /// Answer from the cassette when the request matches, else call the model.
    ReplayOrLive,
}

impl CassetteMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "record" => Some(CassetteMode::Record),
            "replay" => Some(CassetteMode::Replay),
            "replay-or-live" => Some(CassetteMode::ReplayOrLive),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CassetteMode::Record => "record",
            CassetteMode::Replay => "replay",
            CassetteMode::ReplayOrLive => "replay-or-live",
        }
    }
}

/// The file name of a task's cassette, in a cassette folder and in the bundle.
pub const CASSETTE_FILE: &str = "cassette.jsonl";

/// A cassette folder and what to do with it: one `<task id>.jsonl` per task.
#[derive(Debug, Clone, PartialEq)]
pub struct Cassettes {
    pub dir: PathBuf,
    pub mode: CassetteMode,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// 0-based position of the call in its task.
    pub call: u32,
    /// sha256 of the canonical request (before redaction).
    pub fingerprint: String,
    pub request: ChatRequest,
    pub response: ChatResponse,
}

/// The model calls of one task: replayed from a cassette, recorded to one, and kept for the
/// bundle in every case.
#[derive(Debug)]
pub struct TaskCalls {
    task: String,
    mode: Option<CassetteMode>,
    recorded: Vec<Entry>,
    record_to: Option<PathBuf>,
    kept: Vec<Entry>,
    redactor: Redactor,
}

impl TaskCalls {
    /// Calls of `task`, live only.
    pub fn live(task: &str, redactor: Redactor) -> Self {
        TaskCalls { task: task.into(), mode: None, recorded: vec![], record_to: None, kept: vec![], redactor }
    }

    /// Calls of `task` under `cassettes` (`None`: live only). A replay without a recording of
    /// this task fails here.
    pub fn open(task: &str, cassettes: Option<&Cassettes>, redactor: Redactor) -> Result<Self, LlmError> {
        let mut calls = TaskCalls::live(task, redactor);
        let Some(c) = cassettes else { return Ok(calls) };
        calls.mode = Some(c.mode);
        let file = c.dir.join(format!("{task}.jsonl"));
        match c.mode {
            CassetteMode::Record => {
                std::fs::create_dir_all(&c.dir)
                    .and_then(|_| std::fs::write(&file, b""))
                    .map_err(|e| LlmError::Cassette(format!("cannot write cassette {}: {e}", file.display())))?;
                calls.record_to = Some(file);
            }
            CassetteMode::Replay | CassetteMode::ReplayOrLive => match std::fs::read(&file) {
                Ok(bytes) => calls.recorded = parse_entries(&bytes, &file)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && c.mode == CassetteMode::ReplayOrLive => {}
                Err(e) => {
                    return Err(LlmError::ReplayMiss(format!("no recording of task {task}: {}: {e}", file.display())));
                }
            },
        }
        Ok(calls)
    }

    /// Makes the next call: from the recording when it matches, else from `client` (`None`:
    /// live calls are disabled).
    pub async fn call(&mut self, client: Option<&LlmClient>, req: ChatRequest) -> Result<ChatResponse, LlmError> {
        let index = self.kept.len();
        let fingerprint = req.fingerprint();
        let redacted = self.redact(&req);
        let replayed = match self.mode {
            Some(mode @ (CassetteMode::Replay | CassetteMode::ReplayOrLive)) => match self.recorded.get(index) {
                Some(e) if e.fingerprint == fingerprint => Some(e.response.clone()),
                Some(e) if mode == CassetteMode::Replay => {
                    return Err(LlmError::ReplayMiss(divergence(&self.task, index, &e.request, &redacted)));
                }
                None if mode == CassetteMode::Replay => {
                    return Err(LlmError::ReplayMiss(format!(
                        "task {}: call {} is not in the recording, which has {} call(s)",
                        self.task,
                        index + 1,
                        self.recorded.len()
                    )));
                }
                _ => None,
            },
            _ => None,
        };
        let response = match replayed {
            Some(r) => r,
            None => {
                let client = client.ok_or_else(|| LlmError::Cassette("live model calls are disabled".into()))?;
                client.chat(&req).await?
            }
        };
        let entry = Entry {
            call: index as u32,
            fingerprint,
            request: redacted,
            response: serde_json::from_value(
                self.redactor.redact_json(&serde_json::to_value(&response).expect("serializes")),
            )
            .unwrap_or_else(|_| response.clone()),
        };
        if let Some(file) = &self.record_to {
            let mut line = serde_json::to_vec(&entry).expect("entries serialize");
            line.push(b'\n');
            std::fs::OpenOptions::new()
                .append(true)
                .open(file)
                .and_then(|mut f| f.write_all(&line))
                .map_err(|e| LlmError::Cassette(format!("cannot write cassette {}: {e}", file.display())))?;
        }
        self.kept.push(entry);
        Ok(response)
    }

    /// Every call made so far, as cassette lines (redacted).
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for e in &self.kept {
            out.extend(serde_json::to_vec(e).expect("entries serialize"));
            out.push(b'\n');
        }
        out
    }

    fn redact(&self, req: &ChatRequest) -> ChatRequest {
        let v = self.redactor.redact_json(&serde_json::to_value(req).expect("requests serialize"));
        serde_json::from_value(v).unwrap_or_else(|_| req.clone())
    }
}

/// Reads cassette lines.
pub fn parse_entries(bytes: &[u8], file: &Path) -> Result<Vec<Entry>, LlmError> {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| LlmError::Cassette(format!("{}:{}: not a cassette entry: {e}", file.display(), i + 1)))
        })
        .collect()
}

/// Longest value shown on each side of a divergence.
const SHOWN: usize = 160;

fn divergence(task: &str, index: usize, recorded: &ChatRequest, now: &ChatRequest) -> String {
    let a = serde_json::to_value(recorded).expect("serializes");
    let b = serde_json::to_value(now).expect("serializes");
    match first_difference(&a, &b) {
        Some((at, was, is)) => format!(
            "task {task}: call {} differs from the recording at {at}: recorded {}, now {}",
            index + 1,
            clip(&was),
            clip(&is)
        ),
        None => format!("task {task}: call {} differs from the recording (in a redacted value)", index + 1),
    }
}

fn clip(v: &Option<Value>) -> String {
    let Some(v) = v else { return "nothing".into() };
    let s = v.to_string();
    if s.chars().count() <= SHOWN { s } else { format!("{}…", s.chars().take(SHOWN).collect::<String>()) }
}

/// The first place two JSON values differ: its JSON pointer and the two values there (`None`
/// where one side has nothing). Strings are compared down to the first differing line.
pub fn first_difference(a: &Value, b: &Value) -> Option<(String, Option<Value>, Option<Value>)> {
    fn walk(a: &Value, b: &Value, at: &mut String) -> Option<(String, Option<Value>, Option<Value>)> {
        match (a, b) {
            (Value::Object(_), Value::Object(_)) | (Value::Array(_), Value::Array(_)) => {
                // The children of both sides, by pointer segment, in a stable order.
                let children: Vec<(String, Option<&Value>, Option<&Value>)> = match (a, b) {
                    (Value::Object(x), Value::Object(y)) => {
                        let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                        keys.sort();
                        keys.dedup();
                        keys.into_iter()
                            .map(|k| (k.replace('~', "~0").replace('/', "~1"), x.get(k), y.get(k)))
                            .collect()
                    }
                    (Value::Array(x), Value::Array(y)) => {
                        (0..x.len().max(y.len())).map(|i| (i.to_string(), x.get(i), y.get(i))).collect()
                    }
                    _ => unreachable!("matched above"),
                };
                for (segment, p, q) in children {
                    let len = at.len();
                    at.push('/');
                    at.push_str(&segment);
                    let found = match (p, q) {
                        (Some(p), Some(q)) => walk(p, q, at),
                        (p, q) => Some((at.clone(), p.cloned(), q.cloned())),
                    };
                    if found.is_some() {
                        return found;
                    }
                    at.truncate(len);
                }
                None
            }
            (Value::String(x), Value::String(y)) if x != y => {
                // Long prompts: show the first line that differs, not the whole text.
                let line = x.lines().zip(y.lines()).position(|(p, q)| p != q);
                match line {
                    Some(n) => Some((
                        format!("{at} (line {})", n + 1),
                        x.lines().nth(n).map(|s| Value::String(s.into())),
                        y.lines().nth(n).map(|s| Value::String(s.into())),
                    )),
                    None => Some((at.clone(), Some(a.clone()), Some(b.clone()))),
                }
            }
            _ if a != b => Some((at.clone(), Some(a.clone()), Some(b.clone()))),
            _ => None,
        }
    }
    walk(a, b, &mut String::new())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::{Message, Usage};

    fn request(text: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            system: Some("sys".into()),
            messages: vec![Message::User { text: text.into() }],
            tools: vec![],
            temperature: None,
            max_output_tokens: None,
            response_format: None,
        }
    }

    #[test]
    fn the_first_difference_is_named_by_pointer_and_line() {
        let a = json!({"system": "be brief", "messages": [{"text": "a\nb\nc"}]});
        let b = json!({"system": "be brief", "messages": [{"text": "a\nB\nc"}]});
        let (at, was, is) = first_difference(&a, &b).unwrap();
        assert_eq!(at, "/messages/0/text (line 2)");
        assert_eq!((was.unwrap(), is.unwrap()), (json!("b"), json!("B")));
        assert_eq!(first_difference(&a, &a), None);
        let (at, _, is) = first_difference(&json!({"a": 1}), &json!({"a": 1, "b": 2})).unwrap();
        assert_eq!((at.as_str(), is), ("/b", Some(json!(2))));
    }

    #[tokio::test]
    async fn strict_replay_answers_from_the_recording_and_names_a_divergence() {
        let dir = tempfile::tempdir().unwrap();
        let entry = Entry {
            call: 0,
            fingerprint: request("hello").fingerprint(),
            request: request("hello"),
            response: ChatResponse {
                text: Some("hi".into()),
                tool_calls: vec![],
                usage: Usage { input_tokens: 3, output_tokens: 1, cached_input_tokens: 0, cache_write_tokens: 0 },
                stop_reason: "stop".into(),
            },
        };
        std::fs::write(dir.path().join("t1.jsonl"), serde_json::to_string(&entry).unwrap() + "\n").unwrap();
        let c = Cassettes { dir: dir.path().into(), mode: CassetteMode::Replay };
        let mut calls = TaskCalls::open("t1", Some(&c), Redactor::new()).unwrap();
        let r = calls.call(None, request("hello")).await.unwrap();
        assert_eq!(r.text.as_deref(), Some("hi"));
        let e = calls.call(None, request("again")).await.unwrap_err().to_string();
        assert!(e.contains("call 2 is not in the recording"), "{e}");

        let mut calls = TaskCalls::open("t1", Some(&c), Redactor::new()).unwrap();
        let e = calls.call(None, request("goodbye")).await.unwrap_err().to_string();
        assert!(e.contains("/messages/0/text"), "{e}");
        assert!(e.contains("\"hello\"") && e.contains("\"goodbye\""), "{e}");
        let missing = TaskCalls::open("t2", Some(&c), Redactor::new()).unwrap_err().to_string();
        assert!(missing.contains("no recording of task t2"), "{missing}");
    }
}
