//! What a call may ask the provider, checked before it is forwarded with the real key: the
//! run's model only, no tool or store the provider runs itself unless the config allows it
//! (`agent.upstream.allow`), booleans that are booleans, and the answer's length held to what
//! the task's budget has left.

use agenteval_core::config::UpstreamAllow;
use serde_json::Value;

use crate::wire::Wire;

/// `anthropic-beta` flags passed on by default: each only changes how an answer is made or
/// streamed, none has the provider act or keep anything.
const HARMLESS_BETAS: &[&str] = &[
    "interleaved-thinking-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "output-128k-",
    "context-1m-",
    "prompt-caching-",
    "claude-code-",
    "computer-use-",
    "context-management-",
    "effort-",
];

/// Tool types the Responses API runs on its own side.
const RESPONSES_SERVER_TOOLS: &[&str] = &["web_search", "file_search", "code_interpreter", "image_generation"];

/// Tool types the Anthropic API runs on its own side (their names carry a date: `web_search_20250305`).
const ANTHROPIC_SERVER_TOOLS: &[&str] = &["web_search", "web_fetch", "code_execution", "tool_search"];

/// Why `body` may not go to the provider, if it may not.
pub(crate) fn refusal(wire: Wire, body: &Value, allow: &UpstreamAllow, models: &[String]) -> Option<String> {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    if !models.is_empty() && !models.iter().any(|m| m == model) {
        return Some(format!(
            "model `{model}` is not this run's (it allows {}); agent.upstream.models lists others it may call",
            models.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    for key in ["stream", "background", "store"] {
        if let Some(v) = body.get(key).filter(|v| !v.is_boolean() && !v.is_null()) {
            return Some(format!("`{key}` must be true or false, not {v}"));
        }
    }
    // Each choice is an answer the provider bills: a count the gateway cannot read is not sent.
    for key in CHOICE_FIELDS {
        if let Some(v) = body.get(*key).filter(|v| !v.is_null())
            && v.as_u64().is_none_or(|n| n == 0 || n > MAX_CHOICES)
        {
            return Some(format!("`{key}` must be a whole number from 1 to {MAX_CHOICES}, not {v}"));
        }
    }
    let yes = |key: &str| body.get(key).and_then(Value::as_bool) == Some(true);
    if !allow.stored_responses {
        let stored = if yes("store") {
            Some("`store: true` (the provider keeps the answer)")
        } else if yes("background") {
            Some("`background: true` (the answer is fetched later, outside the task's budget)")
        } else if body.get("previous_response_id").is_some_and(|v| !v.is_null()) {
            Some("`previous_response_id` (a response the provider kept)")
        } else if body.get("conversation").is_some_and(|v| !v.is_null()) {
            Some("`conversation` (a conversation the provider kept)")
        } else if wire == Wire::Responses && body.pointer("/prompt/id").is_some() {
            Some("`prompt` with an `id` (a prompt the provider kept)")
        } else {
            None
        };
        if let Some(what) = stored {
            return Some(format!("{what} is not allowed; agent.upstream.allow.stored_responses allows it"));
        }
    }
    if !allow.mcp_servers && body.get("mcp_servers").is_some_and(|v| !v.is_null()) {
        return Some("`mcp_servers` is not allowed; agent.upstream.allow.mcp_servers allows it".into());
    }
    let tools = body.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for t in tools {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "mcp" || kind.starts_with("mcp_") {
            if !allow.mcp_servers {
                return Some(format!("the `{kind}` tool is not allowed; agent.upstream.allow.mcp_servers allows it"));
            }
            continue;
        }
        let server_side = match wire {
            // Chat completions has no tool the provider runs (its web search is a field).
            Wire::Chat => false,
            // Responses' client tools (`function`, `custom`, `local_shell`, `namespace`, …) run at
            // the agent; these at the provider.
            Wire::Responses => RESPONSES_SERVER_TOOLS.iter().any(|p| kind.starts_with(p)),
            // Untyped tools are the agent's; typed ones are too (bash, text editor, computer,
            // memory: the client runs them) but for those the API runs itself.
            Wire::Messages => ANTHROPIC_SERVER_TOOLS.iter().any(|p| kind.starts_with(p)),
        };
        if server_side && !allow.server_tools {
            return Some(format!(
                "the `{kind}` tool runs at the provider, outside the task's network; agent.upstream.allow.server_tools allows it"
            ));
        }
    }
    if wire == Wire::Chat && body.get("web_search_options").is_some_and(|v| !v.is_null()) && !allow.server_tools {
        return Some(
            "`web_search_options` has the provider search the web; agent.upstream.allow.server_tools allows it".into(),
        );
    }
    if wire == Wire::Messages && body.get("container").is_some_and(|v| !v.is_null()) && !allow.server_tools {
        return Some("`container` runs code at the provider; agent.upstream.allow.server_tools allows it".into());
    }
    None
}

/// The `anthropic-beta` flags of a call that may go on (the rest are dropped).
pub(crate) fn betas(header: &str, allow: &UpstreamAllow) -> Option<String> {
    let kept: Vec<&str> = header
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .filter(|f| {
            HARMLESS_BETAS.iter().any(|p| f.starts_with(p))
                || allow.anthropic_betas.iter().any(|p| f.starts_with(p.as_str()))
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

/// The fields that ask the provider for more than one answer to a call, each billed (OpenAI's
/// `n`, and `best_of` of its older wire, which bills every candidate).
const CHOICE_FIELDS: &[&str] = &["n", "best_of"];

/// The most answers a call may ask for (OpenAI's own limit on `n`).
const MAX_CHOICES: u64 = 128;

/// How many answers a call asks the provider to write (and bill): its `n` or `best_of`, the
/// larger, else one. [`refusal`] has refused a count that is not a whole number in range.
pub(crate) fn choices(body: &Value) -> u64 {
    CHOICE_FIELDS.iter().filter_map(|f| body.get(*f).and_then(Value::as_u64)).max().unwrap_or(1).clamp(1, MAX_CHOICES)
}

/// The answer length a call asks for, in its wire's field, if it names one.
pub(crate) fn requested_output(wire: Wire, body: &Value) -> Option<u64> {
    let fields: &[&str] = match wire {
        Wire::Chat => &["max_completion_tokens", "max_tokens"],
        Wire::Responses => &["max_output_tokens"],
        Wire::Messages => &["max_tokens"],
    };
    fields.iter().filter_map(|f| body.get(*f).and_then(Value::as_u64)).min()
}

/// Holds the call's answer to `cap` tokens, in its wire's field (every field it named, else the
/// wire's usual one). Whether the body changed.
pub(crate) fn clamp_output(wire: Wire, body: &mut Value, cap: u64) -> bool {
    let Some(obj) = body.as_object_mut() else { return false };
    let (fields, usual): (&[&str], &str) = match wire {
        Wire::Chat => (&["max_completion_tokens", "max_tokens"], "max_tokens"),
        Wire::Responses => (&["max_output_tokens"], "max_output_tokens"),
        Wire::Messages => (&["max_tokens"], "max_tokens"),
    };
    let mut changed = false;
    let mut named = false;
    for f in fields {
        if let Some(v) = obj.get_mut(*f) {
            named = true;
            if v.as_u64().is_none_or(|n| n > cap) {
                *v = Value::from(cap);
                changed = true;
            }
        }
    }
    if !named {
        obj.insert(usual.to_string(), Value::from(cap));
        changed = true;
    }
    changed
}

/// A call's prompt tokens as the gateway guesses them before the provider says: a byte of the
/// request each three (more than most tokenizers give, so a budget errs on the safe side).
pub(crate) fn input_estimate(body_bytes: usize) -> u64 {
    (body_bytes as u64).div_ceil(3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn models() -> Vec<String> {
        vec!["mock-model".into()]
    }

    #[test]
    fn another_model_than_the_runs_is_refused() {
        let none = UpstreamAllow::default();
        assert!(refusal(Wire::Chat, &json!({"model": "mock-model"}), &none, &models()).is_none());
        let why = refusal(Wire::Chat, &json!({"model": "o1-pro"}), &none, &models()).unwrap();
        assert!(why.contains("`o1-pro`") && why.contains("agent.upstream.models"), "{why}");
        assert!(refusal(Wire::Chat, &json!({"model": "o1-pro"}), &none, &[]).is_none(), "no list: any model");
    }

    #[test]
    fn server_tools_mcp_and_stored_responses_are_refused_unless_allowed() {
        let none = UpstreamAllow::default();
        let m = |extra: Value| {
            let mut b = json!({"model": "mock-model"});
            b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            b
        };
        let refused = |wire, extra: Value| refusal(wire, &m(extra), &none, &models());
        assert!(refused(Wire::Responses, json!({"tools": [{"type": "web_search"}]})).is_some());
        assert!(refused(Wire::Responses, json!({"tools": [{"type": "function", "name": "f"}]})).is_none());
        assert!(refused(Wire::Responses, json!({"tools": [{"type": "local_shell"}, {"type": "namespace"}]})).is_none());
        assert!(refused(Wire::Responses, json!({"tools": [{"type": "web_search_preview"}]})).is_some());
        assert!(refused(Wire::Responses, json!({"tools": [{"type": "code_interpreter"}]})).is_some());
        assert!(refused(Wire::Responses, json!({"tools": [{"type": "mcp", "server_url": "https://x"}]})).is_some());
        assert!(refused(Wire::Responses, json!({"previous_response_id": "resp_1"})).is_some());
        assert!(refused(Wire::Responses, json!({"store": true})).is_some());
        assert!(refused(Wire::Responses, json!({"prompt": {"id": "pmpt_1"}})).is_some());
        assert!(refused(Wire::Responses, json!({"store": false})).is_none());
        assert!(refused(Wire::Responses, json!({"background": true})).is_some());
        assert!(refused(Wire::Chat, json!({"stream": 1})).unwrap().contains("true or false"));
        assert!(refused(Wire::Chat, json!({"web_search_options": {}})).is_some());
        assert!(
            refused(Wire::Messages, json!({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]})).is_some()
        );
        assert!(refused(Wire::Messages, json!({"tools": [{"type": "bash_20250124", "name": "bash"}]})).is_none());
        assert!(refused(Wire::Messages, json!({"tools": [{"name": "mine", "input_schema": {}}]})).is_none());
        assert!(refused(Wire::Messages, json!({"mcp_servers": [{"url": "https://evil"}]})).is_some());
        let all =
            UpstreamAllow { server_tools: true, mcp_servers: true, stored_responses: true, anthropic_betas: vec![] };
        for extra in [
            json!({"tools": [{"type": "web_search"}]}),
            json!({"previous_response_id": "r"}),
            json!({"mcp_servers": []}),
        ] {
            assert!(refusal(Wire::Responses, &m(extra.clone()), &all, &models()).is_none(), "{extra}");
        }
    }

    #[test]
    fn only_harmless_or_allowed_betas_go_on() {
        let none = UpstreamAllow::default();
        assert_eq!(
            betas("interleaved-thinking-2025-05-14, web-fetch-2025-09-10,mcp-client-2025-04-04", &none).as_deref(),
            Some("interleaved-thinking-2025-05-14")
        );
        assert_eq!(betas("files-api-2025-04-14", &none), None);
        let some = UpstreamAllow { anthropic_betas: vec!["files-api-".into()], ..UpstreamAllow::default() };
        assert_eq!(betas("files-api-2025-04-14", &some).as_deref(), Some("files-api-2025-04-14"));
    }

    #[test]
    fn every_choice_a_call_asks_is_counted_and_a_count_that_cannot_be_read_is_refused() {
        assert_eq!(choices(&json!({"n": 50})), 50);
        assert_eq!(choices(&json!({"n": 2, "best_of": 5})), 5);
        assert_eq!(choices(&json!({"messages": []})), 1);
        let allow = UpstreamAllow::default();
        for bad in [json!({"n": 0}), json!({"n": 1.5}), json!({"n": "50"}), json!({"best_of": 10_000})] {
            let why = refusal(Wire::Chat, &bad, &allow, &[]).unwrap_or_default();
            assert!(why.contains("whole number from 1 to 128"), "{bad}: {why}");
        }
        assert_eq!(refusal(Wire::Chat, &json!({"n": 3}), &allow, &[]), None);
    }

    #[test]
    fn the_answer_is_held_to_the_cap_in_the_wires_field() {
        let mut b = json!({"max_tokens": 4000});
        assert!(clamp_output(Wire::Messages, &mut b, 100));
        assert_eq!(b["max_tokens"], 100);
        let mut b = json!({"max_tokens": 50});
        assert!(!clamp_output(Wire::Messages, &mut b, 100), "a smaller ask stands");
        let mut b = json!({});
        assert!(clamp_output(Wire::Responses, &mut b, 7));
        assert_eq!(b["max_output_tokens"], 7);
        let mut b = json!({"max_completion_tokens": 900});
        clamp_output(Wire::Chat, &mut b, 300);
        assert_eq!((b["max_completion_tokens"].clone(), b.get("max_tokens")), (json!(300), None));
        assert_eq!(requested_output(Wire::Chat, &json!({"max_tokens": 5, "max_completion_tokens": 9})), Some(5));
    }
}
