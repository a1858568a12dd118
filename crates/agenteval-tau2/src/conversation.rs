//! A task's conversation read back from its trace as τ²-bench's messages (`AssistantMessage`,
//! `UserMessage`, `ToolMessage`), with how it ended in τ²'s words: what the reference package
//! grades, and what anyone can grade again from the kept `tau2-simulation.json`.

use agenteval_core::model::{AgentResult, EventKind, TerminatedBy, TraceEvent};
use serde_json::{Value, json};

/// The agent's word that ends a conversation (the reference's `###STOP###`).
pub const AGENT_STOP: &str = "###STOP###";

/// A conversation as the reference package is told it.
#[derive(Debug, Clone, PartialEq)]
pub struct Said {
    pub messages: Vec<Value>,
    /// `user_stop`, `agent_stop`, `max_steps`, `agent_error` or `user_error`.
    pub termination: &'static str,
    pub start_time: String,
    pub end_time: String,
    pub agent_cost: Option<f64>,
    pub user_cost: Option<f64>,
}

fn text(e: &TraceEvent, key: &str) -> String {
    match &e.payload[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What the user did on its own side before the words of its `user.message` event `e` (its
/// `acted`): each round a user message of its calls, then the tools' answers to it (τ²'s
/// requestor `user`).
fn users_own_acts(e: &TraceEvent, messages: &mut Vec<Value>) {
    for act in e.payload["acted"].as_array().into_iter().flatten() {
        let calls: Vec<Value> = act["calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"id": c["id"], "name": c["name"], "arguments": c["arguments"]}))
            .collect();
        messages.push(json!({"role": "user", "content": act["text"], "tool_calls": calls}));
        for r in act["results"].as_array().into_iter().flatten() {
            messages.push(json!({
                "role": "tool",
                "id": r["call_id"],
                "content": r["content"],
                "error": r["error"].as_bool() == Some(true),
                "requestor": "user",
            }));
        }
    }
}

/// Reads `trace` (the agent's and the user's events in order) as τ²'s messages.
pub fn read(trace: &[TraceEvent], result: &AgentResult, max_steps: u32) -> Said {
    let mut messages: Vec<Value> = Vec::new();
    let mut plan: Option<String> = None;
    let mut last_turn: Option<u64> = None;
    let mut user_ended = false;
    let mut user_failed = false;
    let mut user_cost = 0.0;
    let mut user_calls = 0;
    for e in trace {
        match e.kind {
            EventKind::AgentMessage => {
                messages.push(json!({"role": "assistant", "content": text(e, "text")}));
                last_turn = None;
            }
            EventKind::UserMessage => {
                users_own_acts(e, &mut messages);
                // A turn the user did not finish said nothing: only its acts are the trajectory's.
                if e.payload.get("unfinished").is_none() {
                    messages.push(json!({"role": "user", "content": text(e, "text")}));
                }
                user_ended = e.payload["ends"].as_bool() == Some(true);
                last_turn = None;
            }
            EventKind::AgentPlan => plan = Some(text(e, "plan")),
            EventKind::AgentToolCall => {
                let call =
                    json!({"id": text(e, "call_id"), "name": text(e, "tool"), "arguments": e.payload["arguments"]});
                let turn = e.payload["turn"].as_u64();
                let same = turn.is_some() && turn == last_turn;
                match messages.last_mut() {
                    Some(m) if same && m["role"] == "assistant" && m["tool_calls"].is_array() => {
                        m["tool_calls"].as_array_mut().expect("an array").push(call);
                    }
                    _ => messages.push(json!({"role": "assistant", "content": plan.take(), "tool_calls": [call]})),
                }
                last_turn = turn;
            }
            EventKind::AgentToolResult => {
                messages.push(json!({
                    "role": "tool",
                    "id": text(e, "call_id"),
                    "content": text(e, "output"),
                    "error": e.payload["is_error"].as_bool() == Some(true),
                }));
            }
            EventKind::ModelCall if e.payload["role"] == "user" => {
                user_calls += 1;
                user_cost += e.payload["cost_usd"].as_f64().unwrap_or(0.0);
                if e.payload.get("refused").is_some() {
                    user_failed = true;
                }
            }
            _ => {}
        }
    }
    let agent_stopped = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant" && m["tool_calls"].is_null())
        .is_some_and(|m| m["content"].as_str().is_some_and(|t| t.contains(AGENT_STOP)));
    let termination = if messages.len() > max_steps as usize {
        "max_steps"
    } else if user_ended {
        "user_stop"
    } else if agent_stopped {
        "agent_stop"
    } else if user_failed {
        "user_error"
    } else if matches!(
        result.terminated_by,
        TerminatedBy::LimitTurns | TerminatedBy::LimitTokens | TerminatedBy::LimitCost | TerminatedBy::LimitTime
    ) {
        "max_steps"
    } else {
        "agent_error"
    };
    let at = |e: Option<&TraceEvent>| e.map(|e| e.timestamp.to_rfc3339()).unwrap_or_default();
    Said {
        messages,
        termination,
        start_time: at(trace.first()),
        end_time: at(trace.last()),
        agent_cost: (!result.cost_unknown).then_some(result.total_cost_usd),
        user_cost: (user_calls > 0).then_some(user_cost),
    }
}

/// Why the reference package gave the reward it gave, in one line.
pub fn why(answer: &Value, said: &Said) -> String {
    let info = &answer["info"];
    let reward = answer["reward"].as_f64().unwrap_or(0.0);
    let mut parts = Vec::new();
    if let Some(b) = info["reward_breakdown"].as_object() {
        let mut kinds: Vec<String> = b.iter().map(|(k, v)| format!("{k} {}", v.as_f64().unwrap_or(0.0))).collect();
        kinds.sort();
        parts.push(kinds.join(", "));
    }
    if let Some(note) = info["info"]["note"].as_str() {
        parts.push(note.to_string());
    }
    let detail = if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) };
    format!("τ² reward {reward}{detail}; ended {} after {} messages", said.termination, said.messages.len())
}

#[cfg(test)]
mod tests {
    use agenteval_core::RunId;

    use super::*;

    fn ev(kind: EventKind, payload: Value) -> TraceEvent {
        TraceEvent {
            run_id: RunId::new(),
            task_id: "t".parse().unwrap(),
            step: 0,
            attempt: 1,
            timestamp: chrono::Utc::now(),
            kind,
            payload,
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
        }
    }

    #[test]
    fn a_conversation_reads_as_taus_messages_with_calls_of_one_turn_together() {
        let trace = vec![
            ev(EventKind::AgentMessage, json!({"text": "Hi! How can I help you today?"})),
            ev(EventKind::UserMessage, json!({"text": "make a task"})),
            ev(EventKind::AgentPlan, json!({"plan": "let me"})),
            ev(EventKind::AgentToolCall, json!({"tool": "a", "arguments": {"x": 1}, "call_id": "c1", "turn": 2})),
            ev(EventKind::AgentToolResult, json!({"tool": "a", "output": "ok", "call_id": "c1"})),
            ev(EventKind::AgentToolCall, json!({"tool": "b", "arguments": {}, "call_id": "c2", "turn": 3})),
            ev(
                EventKind::AgentToolResult,
                json!({"tool": "b", "output": "Error: no", "is_error": true, "call_id": "c2"}),
            ),
            ev(EventKind::AgentMessage, json!({"text": "done"})),
            ev(EventKind::ModelCall, json!({"role": "user", "cost_usd": 0.5})),
            ev(
                EventKind::UserMessage,
                json!({"text": "thanks ###STOP###", "ends": true, "acted": [{
                    "calls": [{"id": "u1", "name": "toggle_airplane_mode", "arguments": {}}],
                    "results": [{"call_id": "u1", "content": "Airplane Mode is now OFF."}],
                }]}),
            ),
        ];
        let result = AgentResult::infra_failure(String::new());
        let said = read(&trace, &result, 100);
        assert_eq!(said.termination, "user_stop");
        assert_eq!(said.user_cost, Some(0.5));
        let roles: Vec<&str> = said.messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["assistant", "user", "assistant", "tool", "assistant", "tool", "assistant", "user", "tool", "user"]
        );
        // The user's own call, then its phone's answer as the user's, then its words.
        assert_eq!(said.messages[7]["tool_calls"][0]["name"], "toggle_airplane_mode");
        assert_eq!(said.messages[8]["requestor"], "user");
        assert_eq!(said.messages[9]["content"], "thanks ###STOP###");
        assert_eq!(said.messages[2]["content"], "let me");
        assert_eq!(said.messages[5]["error"], true);
        assert_eq!(read(&trace, &result, 4).termination, "max_steps");
    }

    #[test]
    fn a_turn_the_user_did_not_finish_keeps_its_acts_and_says_nothing() {
        let trace = vec![
            ev(EventKind::AgentMessage, json!({"text": "Toggle airplane mode, please."})),
            ev(
                EventKind::UserMessage,
                json!({"text": "", "ends": false, "unfinished": "the user role: spent", "acted": [{
                    "calls": [{"id": "u1", "name": "toggle_airplane_mode", "arguments": {}}],
                    "results": [{"call_id": "u1", "content": "Airplane Mode is now OFF."}],
                }]}),
            ),
        ];
        let said = read(&trace, &AgentResult::infra_failure(String::new()), 100);
        let roles: Vec<&str> = said.messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["assistant", "user", "tool"], "{:?}", said.messages);
        assert_eq!(said.messages[1]["tool_calls"][0]["name"], "toggle_airplane_mode");
        assert_ne!(said.termination, "user_stop");
    }
}
