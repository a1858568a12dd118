//! The mock's τ²-bench script: it plays both sides of a conversation in τ²'s `mock` domain. A
//! request whose system prompt holds a `<scenario>` is the simulated user's: its first turn asks
//! for what the scenario asks, its next ends with `###STOP###`. A request offering the domain's
//! `create_task` tool is the agent's: it acts on the user's last request with the domain's tools,
//! then tells the user what the tool said. A model whose name holds `careless` gets the title
//! wrong (the database then differs: reward 0). A user model whose name holds `chatty` keeps
//! talking for four turns. A scenario that continues a recorded conversation ("Continue the
//! conversation") asks to mark the task it names, or the one the agent's words name, completed.
//! In `telecom` (a request offering `get_customer_by_phone` is the agent's, a user's offers its
//! phone's `toggle_airplane_mode`), the agent has the user toggle airplane mode on its phone.

use serde_json::{Value, json};

use super::text_of;

/// A tool call to make, or none, and the text of the answer.
pub(crate) type Scripted = (Option<(&'static str, Value)>, String);

fn quoted_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('\'')?;
    Some(&rest[..rest.find('\'')?])
}

fn word_starting<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let at = text.find(prefix)?;
    let rest = &text[at..];
    Some(&rest[..rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len())])
}

pub(crate) fn script(body: &Value, messages: &[Value]) -> Option<Scripted> {
    let system = body
        .get("system")
        .map(text_of)
        .or_else(|| messages.iter().find(|m| m["role"] == "system").map(|m| text_of(&m["content"])))
        .unwrap_or_default();
    let offers = |name: &str| {
        body["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == name || t["name"] == name))
    };
    if system.contains("<scenario>") && offers("toggle_airplane_mode") {
        return Some(telecom_user(messages));
    }
    if offers("get_customer_by_phone") {
        return Some(telecom_agent(messages));
    }
    if let Some(scenario) = system.split("<scenario>").nth(1) {
        // The user: its own turns are the request's assistant messages, but for the one of the
        // recorded conversation a task continues (its scenario says so).
        let earlier = usize::from(scenario.contains("Continue the conversation"));
        let said = messages.iter().filter(|m| m["role"] == "assistant").count().saturating_sub(earlier);
        // What the agent told it (a task's id, in a continued conversation).
        let heard = messages.iter().filter(|m| m["role"] == "user").map(|m| text_of(&m["content"])).collect::<Vec<_>>();
        let heard = heard.join(" ");
        let chatty = if scenario.contains("CHATTY") || body["model"].as_str().is_some_and(|m| m.contains("chatty")) {
            4
        } else {
            1
        };
        let text = if said == 0 {
            if let (Some(title), Some(user)) = (quoted_after(scenario, "called "), word_starting(scenario, "user_")) {
                format!("Hi. Please create a task called '{title}' for {user}.")
            } else if let Some(task) = word_starting(scenario, "task_").or_else(|| word_starting(&heard, "task_")) {
                format!("Please mark {task} as completed.")
            } else if scenario.contains("delete") {
                "I want to delete all my tasks.".to_string()
            } else {
                "Hello.".to_string()
            }
        } else if said < chatty {
            "Are you sure it is done?".to_string()
        } else {
            "Thank you, that is all. ###STOP###".to_string()
        };
        return Some((None, text));
    }
    if !offers("create_task") {
        return None;
    }
    // The agent: the last message decides.
    let last = messages.last()?;
    if last["role"] == "tool" {
        return Some((None, format!("Done: {}", text_of(&last["content"]).trim())));
    }
    let asked = messages.iter().rev().find(|m| m["role"] == "user").map(|m| text_of(&m["content"])).unwrap_or_default();
    let careless = body["model"].as_str().is_some_and(|m| m.contains("careless"));
    let call = if let (Some(title), Some(user)) = (quoted_after(&asked, "called "), word_starting(&asked, "user_")) {
        let title = if careless { title.to_lowercase() } else { title.to_string() };
        Some(("create_task", json!({"user_id": user, "title": title})))
    } else if let Some(task) = word_starting(&asked, "task_") {
        Some(("update_task_status", json!({"task_id": task, "status": "completed"})))
    } else if asked.contains("delete") {
        Some(("transfer_to_human_agents", json!({"summary": "The user wants to delete all their tasks."})))
    } else {
        None
    };
    match call {
        Some(c) => Some((Some(c), String::new())),
        None => Some((None, "It is done.".to_string())),
    }
}

/// τ²'s `telecom` user, with its phone's tools: it says its phone has no service; told of
/// airplane mode, it toggles it on its phone; once the phone says it is off, it thanks the agent
/// and ends.
fn telecom_user(messages: &[Value]) -> Scripted {
    let last = messages.last();
    if let Some(m) = last.filter(|m| m["role"] == "tool") {
        let said = text_of(&m["content"]);
        let text = if said.contains("Airplane Mode is now OFF") {
            "I turned airplane mode off and the phone has signal now. Thank you! ###STOP###"
        } else {
            "That did not help. ###STOP###"
        };
        return (None, text.to_string());
    }
    let heard = last.filter(|m| m["role"] == "user").map(|m| text_of(&m["content"])).unwrap_or_default();
    if heard.to_lowercase().contains("airplane") {
        return (Some(("toggle_airplane_mode", json!({}))), String::new());
    }
    (None, "My phone shows No Service and I cannot make calls.".to_string())
}

/// τ²'s `telecom` agent: told of a phone with no service, it asks the user to toggle airplane
/// mode.
fn telecom_agent(messages: &[Value]) -> Scripted {
    let asked = messages.iter().rev().find(|m| m["role"] == "user").map(|m| text_of(&m["content"])).unwrap_or_default();
    if asked.contains("No Service") {
        return (
            None,
            "Please toggle airplane mode on your phone, then tell me what the status bar shows.".to_string(),
        );
    }
    (None, "I am glad it works now.".to_string())
}
