//! Anthropic's Claude Code (npm `@anthropic-ai/claude-code`): a native binary, on the Anthropic
//! Messages wire, run by `claude -p --output-format stream-json`, whose events are its record.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Package, Preset};
use crate::trajectory::{Step, json_lines, text_of};

pub const PRESET: Preset = Preset {
    name: "claude-code",
    version: "2.1.332",
    wire: "messages",
    package: Package::NpmBinary {
        package: "@anthropic-ai/claude-code",
        platform: "@anthropic-ai/claude-code-linux-x64@{version}",
        files: &[("package/claude", "bin/claude")],
    },
    // Permissions skipped (the container is the sandbox), at most max_steps turns.
    command: r#"set -e
export PATH="/opt/agenteval-agent/bin:$PATH" CLAUDE_CONFIG_DIR=/logs/agent/claude-home
mkdir -p "$CLAUDE_CONFIG_DIR"
if [ -n "${AGENTEVAL_MCP_CONFIG:-}" ]; then printf '%s' "$AGENTEVAL_MCP_CONFIG" > "$CLAUDE_CONFIG_DIR/.claude.json"; fi
claude -p "$(cat "$AGENTEVAL_INSTRUCTION")" --output-format stream-json --verbose --dangerously-skip-permissions --model "$AGENTEVAL_MODEL" --max-turns "$AGENTEVAL_MAX_STEPS" < /dev/null > /logs/agent/claude.jsonl"#,
    // The most recent session of the working folder, the user's turn on stdin (never read as
    // an option), its events appended to the record.
    resume: Some(
        r#"set -e
export PATH="/opt/agenteval-agent/bin:$PATH" CLAUDE_CONFIG_DIR=/logs/agent/claude-home
claude -p --continue --output-format stream-json --verbose --dangerously-skip-permissions --model "$AGENTEVAL_MODEL" --max-turns "$AGENTEVAL_MAX_STEPS" < "$AGENTEVAL_USER_TURN" >> /logs/agent/claude.jsonl"#,
    ),
    mcp: Some(mcp),
    // No telemetry, error reports, updates or other traffic of its own; `IS_SANDBOX` lets it
    // skip permissions under a container's root.
    env: &[
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("IS_SANDBOX", "1"),
    ],
    record: "/logs/agent/claude.jsonl",
    read,
    check: "claude --version",
};

/// stream-json events: the assistant's text and tool uses, the tool results the CLI sent back,
/// and the closing `result` with its answer, usage and cost estimate.
fn read(record: &str, _stdout: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut end = None;
    for ev in json_lines(record) {
        let blocks = ev["message"]["content"].as_array().cloned().unwrap_or_default();
        match ev["type"].as_str() {
            Some("assistant") => {
                for b in &blocks {
                    match b["type"].as_str() {
                        Some("text") => steps.push(Step::Plan(text_of(&b["text"]))),
                        Some("thinking") => steps.push(Step::Plan(text_of(&b["thinking"]))),
                        Some("tool_use") => {
                            let id = text_of(&b["id"]);
                            let tool = text_of(&b["name"]);
                            names.insert(id.clone(), tool.clone());
                            steps.push(Step::Call { id, tool, arguments: b["input"].clone() });
                        }
                        _ => {}
                    }
                }
            }
            Some("user") => {
                for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                    let id = text_of(&b["tool_use_id"]);
                    let tool = names.get(&id).cloned().unwrap_or_default();
                    let is_error = b["is_error"].as_bool().unwrap_or(false);
                    steps.push(Step::Result { id, tool, output: text_of(&b["content"]), is_error });
                }
            }
            Some("result") => end = Some(ev),
            _ => {}
        }
    }
    if let Some(end) = end {
        if let Some(answer) = end["result"].as_str() {
            steps.push(Step::Answer(answer.to_string()));
        }
        let u = &end["usage"];
        steps.push(Step::Usage(json!({
            "input_tokens": u["input_tokens"], "output_tokens": u["output_tokens"],
            "cache_read_input_tokens": u["cache_read_input_tokens"], "num_turns": end["num_turns"],
            "cost_usd": end.get("total_cost_usd").cloned().unwrap_or(Value::Null),
        })));
    }
    steps
}

/// streamable HTTP, as Claude Code names it.
fn mcp(servers: &[agenteval_core::environment::McpServer]) -> String {
    let entries: serde_json::Map<String, Value> = servers
        .iter()
        .map(|s| {
            let entry = match s.transport.as_str() {
                "stdio" => json!({"type": "stdio", "command": s.command, "args": s.args}),
                "sse" => json!({"type": "sse", "url": s.url}),
                _ => json!({"type": "http", "url": s.url}),
            };
            (s.name.clone(), entry)
        })
        .collect();
    json!({"mcpServers": entries}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code 2.1's stream-json for one command and an answer (trimmed).
    const RECORD: &str = r#"{"type":"system","subtype":"init","tools":["Bash"]}
{"type":"assistant","message":{"content":[{"id":"call_1","input":{"command":"ls"},"name":"Bash","type":"tool_use"}]}}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"call_1","type":"tool_result","content":"a","is_error":false}]}}
{"type":"assistant","message":{"content":[{"text":"done","type":"text"}]}}
{"type":"result","subtype":"success","result":"done","num_turns":2,"total_cost_usd":0.00028,"usage":{"input_tokens":20,"output_tokens":10}}"#;

    #[test]
    fn tool_uses_their_results_and_the_answer_are_read() {
        let steps = read(RECORD, "");
        assert_eq!(
            steps[0],
            Step::Call { id: "call_1".into(), tool: "Bash".into(), arguments: json!({"command": "ls"}) }
        );
        assert_eq!(
            steps[1],
            Step::Result { id: "call_1".into(), tool: "Bash".into(), output: "a".into(), is_error: false }
        );
        assert_eq!(steps[3], Step::Answer("done".into()));
        assert!(matches!(&steps[4], Step::Usage(u) if u["cost_usd"] == 0.00028 && u["input_tokens"] == 20));
    }
    #[test]
    fn mcp_servers_are_user_scoped_in_claude_json() {
        let v: Value = serde_json::from_str(&mcp(&super::super::sample_mcp_servers())).unwrap();
        assert_eq!(v["mcpServers"]["orders"], json!({"type": "http", "url": "http://orders:8000/mcp"}));
        assert_eq!(v["mcpServers"]["fs"], json!({"type": "stdio", "command": "mcp-fs", "args": ["/app"]}));
    }
}
