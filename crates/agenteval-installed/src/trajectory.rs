//! An installed agent's own record of its run, as trace steps: what each preset's reader makes
//! of it, emitted as the `llm` agent's events are (`agent.plan`, `agent.tool_call`,
//! `agent.tool_result`, `agent.final_answer`), so `show`, the report and the UI read both alike.

use std::sync::LazyLock;

use agenteval_core::model::EventKind;
use agenteval_core::traits::AgentEvent;
use serde_json::{Value, json};

/// Most characters of one tool output kept in the trace (the raw record keeps all of it).
const MAX_OUTPUT_CHARS: usize = 20_000;

/// One step of an agent's run, as its record tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Text the model wrote between actions.
    Plan(String),
    Call {
        id: String,
        tool: String,
        arguments: Value,
    },
    Result {
        id: String,
        tool: String,
        output: String,
        is_error: bool,
    },
    /// What the agent ended with.
    Answer(String),
    /// The agent's own usage figures (tokens, its own cost estimate), kept beside the gateway's.
    Usage(Value),
}

/// Colour and cursor codes out: what is shown is text.
pub fn strip_ansi(s: &str) -> String {
    static ANSI: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]")
            .expect("a valid pattern")
    });
    ANSI.replace_all(s, "").into_owned()
}

fn clip(s: &str) -> String {
    let s = strip_ansi(s);
    match s.char_indices().nth(MAX_OUTPUT_CHARS) {
        Some((i, _)) => format!("{}\n… ({} more characters in the raw record)", &s[..i], s[i..].chars().count()),
        None => s,
    }
}

/// The events of `steps`, and the agent's last answer and usage figures, in order.
pub fn events(steps: &[Step]) -> (Vec<AgentEvent>, Option<String>, Option<Value>) {
    let mut out = Vec::new();
    let mut answer = None;
    let mut usage = None;
    for s in steps {
        match s {
            Step::Plan(t) if !t.trim().is_empty() => {
                out.push(AgentEvent::new(EventKind::AgentPlan, json!({"plan": strip_ansi(t)})));
            }
            Step::Plan(_) => {}
            Step::Call { id, tool, arguments } => out.push(AgentEvent::new(
                EventKind::AgentToolCall,
                json!({"tool": tool, "arguments": arguments, "call_id": id}),
            )),
            Step::Result { id, tool, output, is_error } => out.push(AgentEvent::new(
                EventKind::AgentToolResult,
                json!({"tool": tool, "output": clip(output), "is_error": is_error, "call_id": id}),
            )),
            Step::Answer(a) => answer = Some(strip_ansi(a)),
            Step::Usage(u) => usage = Some(u.clone()),
        }
    }
    (out, answer, usage)
}

/// Each line of `text` that is a JSON object (records and stdout streams of JSON events; other
/// lines, a warning the agent printed, are skipped).
pub fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
}

/// A JSON value as text: a string as it is, anything else as JSON.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| p.get("text").and_then(Value::as_str).map_or_else(|| text_of(p), str::to_string))
            .collect::<Vec<_>>()
            .join(""),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_codes_and_titles_are_stripped() {
        assert_eq!(strip_ansi("\x1b[93m\x1b[1m! \x1b[0mok\x1b]0;title\x07 done"), "! ok done");
    }

    #[test]
    fn steps_become_the_llm_agents_events() {
        let steps = vec![
            Step::Plan("look".into()),
            Step::Call { id: "c1".into(), tool: "bash".into(), arguments: json!({"command": "ls"}) },
            Step::Result { id: "c1".into(), tool: "bash".into(), output: "\x1b[31ma\x1b[0m".into(), is_error: false },
            Step::Answer("done".into()),
            Step::Usage(json!({"input_tokens": 3})),
        ];
        let (events, answer, usage) = events(&steps);
        let kinds: Vec<Option<EventKind>> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [Some(EventKind::AgentPlan), Some(EventKind::AgentToolCall), Some(EventKind::AgentToolResult)]
        );
        assert_eq!(events[2].payload["output"], "a");
        assert_eq!((answer.as_deref(), usage), (Some("done"), Some(json!({"input_tokens": 3}))));
    }
}
