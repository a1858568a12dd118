//! OpenAI's Codex CLI (npm `@openai/codex`): a static binary, on the Responses wire, run by
//! `codex exec --json`, whose JSON events on stdout are its record.

use serde_json::{Value, json};

use super::{Package, Preset};
use crate::trajectory::{Step, json_lines, text_of};

pub const PRESET: Preset = Preset {
    name: "codex",
    version: "0.171.0",
    wire: "responses",
    package: Package::NpmBinary {
        package: "@openai/codex",
        platform: "@openai/codex@{version}-linux-x64",
        files: &[
            ("package/vendor/x86_64-unknown-linux-musl/bin/codex", "bin/codex"),
            ("package/vendor/x86_64-unknown-linux-musl/codex-path/rg", "bin/rg"),
        ],
    },
    // Its own home under the task's logs: the provider is the gateway; updates, analytics and
    // telemetry are off; approvals and its sandbox are off (the container is the sandbox); its
    // web search (a tool the provider runs, outside the task's network) is off, as the gateway
    // refuses it unless `agent.upstream.allow.server_tools`.
    // Codex has no step limit of its own: max_tokens, max_cost_usd and max_wall_seconds bound it.
    command: r#"set -e
export CODEX_HOME=/logs/agent/codex-home PATH="/opt/agenteval-agent/bin:$PATH"
mkdir -p "$CODEX_HOME"
cat > "$CODEX_HOME/config.toml" <<EOF
model = "${AGENTEVAL_MODEL}"
model_provider = "agenteval"
check_for_update_on_startup = false
web_search = "disabled"
[model_providers.agenteval]
name = "agenteval gateway"
base_url = "${OPENAI_BASE_URL}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
[analytics]
enabled = false
[otel]
exporter = "none"
EOF
printf '%s\n' "${AGENTEVAL_MCP_CONFIG:-}" >> "$CODEX_HOME/config.toml"
codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --json -- "$(cat "$AGENTEVAL_INSTRUCTION")" < /dev/null > /logs/agent/codex.jsonl"#,
    // The session the first turn started (its `thread.started` event), the user's turn on stdin.
    resume: Some(
        r#"set -e
export CODEX_HOME=/logs/agent/codex-home PATH="/opt/agenteval-agent/bin:$PATH"
thread=$(sed -n 's/.*"thread_id": *"\([^"]*\)".*/\1/p' /logs/agent/codex.jsonl | head -n 1)
test -n "$thread" || { echo "no session of codex's to resume in /logs/agent/codex.jsonl" >&2; exit 1; }
codex exec resume --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --json -- "$thread" - < "$AGENTEVAL_USER_TURN" >> /logs/agent/codex.jsonl"#,
    ),
    mcp: Some(mcp),
    env: &[],
    record: "/logs/agent/codex.jsonl",
    read,
    check: "codex --version",
};

/// `codex exec --json` events: each completed item a step, each turn's usage summed.
fn read(record: &str, _stdout: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let (mut input, mut output, mut cached) = (0u64, 0u64, 0u64);
    let mut last_message = None;
    for ev in json_lines(record) {
        match ev["type"].as_str() {
            Some("item.completed") => {
                if let Some(m) = item(&ev["item"], &mut steps) {
                    last_message = Some(m);
                }
            }
            Some("turn.completed") => {
                let u = &ev["usage"];
                input += u["input_tokens"].as_u64().unwrap_or(0);
                output += u["output_tokens"].as_u64().unwrap_or(0);
                cached += u["cached_input_tokens"].as_u64().unwrap_or(0);
            }
            _ => {}
        }
    }
    if let Some(m) = last_message {
        steps.push(Step::Answer(m));
    }
    steps.push(Step::Usage(json!({"input_tokens": input, "output_tokens": output, "cached_input_tokens": cached})));
    steps
}

/// One completed item's steps; an agent message's text is returned (the last is the answer).
fn item(item: &Value, steps: &mut Vec<Step>) -> Option<String> {
    let id = item["id"].as_str().unwrap_or_default().to_string();
    let mut pair = |tool: String, arguments: Value, output: String, is_error: bool| {
        steps.push(Step::Call { id: id.clone(), tool: tool.clone(), arguments });
        steps.push(Step::Result { id: id.clone(), tool, output, is_error });
    };
    match item["type"].as_str()? {
        "agent_message" => {
            let text = text_of(&item["text"]);
            steps.push(Step::Plan(text.clone()));
            return Some(text);
        }
        "reasoning" => steps.push(Step::Plan(text_of(&item["text"]))),
        "command_execution" => {
            let failed = item["exit_code"].as_i64().is_some_and(|c| c != 0) || item["status"] == "failed";
            let out = text_of(&item["aggregated_output"]);
            pair("shell".into(), json!({"command": item["command"]}), out, failed);
        }
        "file_change" => {
            let failed = item["status"] == "failed";
            pair("apply_patch".into(), json!({"changes": item["changes"]}), text_of(&item["status"]), failed);
        }
        "mcp_tool_call" => {
            let tool = format!("{}.{}", text_of(&item["server"]), text_of(&item["tool"]));
            let (out, failed) = match &item["error"] {
                Value::Null => (text_of(&item["result"]), false),
                e => (text_of(e), true),
            };
            pair(tool, item["arguments"].clone(), out, failed);
        }
        "web_search" => {
            steps.push(Step::Call { id, tool: "web_search".into(), arguments: json!({"query": item["query"]}) })
        }
        "todo_list" => steps.push(Step::Plan(item["items"].to_string())),
        _ => {}
    }
    None
}

/// and its `args`.
fn mcp(servers: &[agenteval_core::environment::McpServer]) -> String {
    let mut tables = toml::Table::new();
    for s in servers {
        let mut t = toml::Table::new();
        match (&s.command, &s.url) {
            (Some(c), _) if s.transport == "stdio" => {
                t.insert("command".into(), c.clone().into());
                t.insert("args".into(), toml::Value::Array(s.args.iter().cloned().map(Into::into).collect()));
            }
            (_, Some(u)) => {
                t.insert("url".into(), u.clone().into());
            }
            _ => continue,
        }
        tables.insert(s.name.clone(), toml::Value::Table(t));
    }
    let mut doc = toml::Table::new();
    doc.insert("mcp_servers".into(), toml::Value::Table(tables));
    toml::to_string(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Codex 0.171 printed for one command and an answer, against the test model.
    const RECORD: &str = r#"{"type":"thread.started","thread_id":"t"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata not found."}}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \"ls\"","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \"ls\"","aggregated_output":"a\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"done"}}
{"type":"turn.completed","usage":{"input_tokens":20,"cached_input_tokens":0,"output_tokens":10,"reasoning_output_tokens":0}}"#;

    #[test]
    fn a_command_and_an_answer_are_read_with_the_usage() {
        let steps = read(RECORD, "");
        assert_eq!(
            steps[0],
            Step::Call {
                id: "item_1".into(),
                tool: "shell".into(),
                arguments: json!({"command": "/bin/bash -lc \"ls\""})
            }
        );
        assert!(matches!(&steps[1], Step::Result { output, is_error: false, .. } if output == "a\n"));
        assert_eq!(steps[3], Step::Answer("done".into()));
        assert_eq!(steps[4], Step::Usage(json!({"input_tokens": 20, "output_tokens": 10, "cached_input_tokens": 0})));
    }
    #[test]
    fn mcp_servers_are_tables_of_its_config_toml() {
        let t: toml::Table = toml::from_str(&mcp(&super::super::sample_mcp_servers())).unwrap();
        assert_eq!(t["mcp_servers"]["orders"]["url"].as_str(), Some("http://orders:8000/mcp"));
        assert_eq!(t["mcp_servers"]["fs"]["command"].as_str(), Some("mcp-fs"));
        assert_eq!(t["mcp_servers"]["fs"]["args"][0].as_str(), Some("/app"));
    }
}
