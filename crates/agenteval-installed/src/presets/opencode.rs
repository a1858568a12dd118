//! opencode (npm `opencode-ai`): a native binary, on the OpenAI chat wire through its
//! OpenAI-compatible provider, run by `opencode run --format json`, whose events are its record.

use std::collections::HashMap;

use serde_json::json;

use super::{Package, Preset};
use crate::trajectory::{Step, json_lines, text_of};

pub const PRESET: Preset = Preset {
    name: "opencode",
    version: "1.18.33",
    wire: "chat",
    package: Package::NpmBinary {
        package: "opencode-ai",
        platform: "opencode-linux-x64@{version}",
        files: &[("package/bin/opencode", "bin/opencode")],
    },
    // Its config, data and cache under the task's logs; the gateway as its one provider; every
    // permission granted (the container is the sandbox); updates and sharing off; at most
    // max_steps steps.
    command: r#"set -e
export PATH="/opt/agenteval-agent/bin:$PATH" OPENCODE_CONFIG=/logs/agent/opencode.json
export XDG_DATA_HOME=/logs/agent/opencode/data XDG_CACHE_HOME=/logs/agent/opencode/cache XDG_CONFIG_HOME=/logs/agent/opencode/config XDG_STATE_HOME=/logs/agent/opencode/state
mkdir -p /logs/agent/opencode
mcp=${AGENTEVAL_MCP_CONFIG:-}; [ -n "$mcp" ] || mcp='{}'
cat > "$OPENCODE_CONFIG" <<EOF
{"provider": {"agenteval": {"npm": "@ai-sdk/openai-compatible", "name": "agenteval gateway",
  "options": {"baseURL": "${OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"},
  "models": {"${AGENTEVAL_MODEL}": {"name": "${AGENTEVAL_MODEL}"}}}},
 "model": "agenteval/${AGENTEVAL_MODEL}", "autoupdate": false, "share": "disabled",
 "permission": {"*": "allow", "external_directory": "allow", "bash": "allow", "edit": "allow"},
 "agent": {"build": {"steps": ${AGENTEVAL_MAX_STEPS}}}, "mcp": ${mcp}}
EOF
opencode run --format json "$(cat "$AGENTEVAL_INSTRUCTION")" < /dev/null > /logs/agent/opencode.jsonl"#,
    // Its last session continued (`--continue`), the user's turn on stdin (an argument with a
    // space it would quote).
    resume: Some(
        r#"set -e
export PATH="/opt/agenteval-agent/bin:$PATH" OPENCODE_CONFIG=/logs/agent/opencode.json
export XDG_DATA_HOME=/logs/agent/opencode/data XDG_CACHE_HOME=/logs/agent/opencode/cache XDG_CONFIG_HOME=/logs/agent/opencode/config XDG_STATE_HOME=/logs/agent/opencode/state
opencode run --continue --format json < "$AGENTEVAL_USER_TURN" >> /logs/agent/opencode.jsonl"#,
    ),
    mcp: Some(mcp),
    // No update, share, model-list fetch, LSP download, default plugins or other agents' files.
    env: &[
        ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
        ("OPENCODE_DISABLE_SHARE", "1"),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
        ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
        ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
        ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
    ],
    record: "/logs/agent/opencode.jsonl",
    read,
    check: "opencode --version",
};

/// `opencode run --format json` events: text parts, tool parts with their input and output,
/// and each step's tokens and cost summed.
fn read(record: &str, _stdout: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut last_text = None;
    let mut usage: HashMap<&str, f64> = HashMap::new();
    for ev in json_lines(record) {
        let part = &ev["part"];
        match ev["type"].as_str() {
            Some("text") => {
                let t = text_of(&part["text"]);
                steps.push(Step::Plan(t.clone()));
                last_text = Some(t);
            }
            Some("reasoning") => steps.push(Step::Plan(text_of(&part["text"]))),
            Some("tool_use") => {
                let id = text_of(&part["callID"]);
                let tool = text_of(&part["tool"]);
                let state = &part["state"];
                steps.push(Step::Call { id: id.clone(), tool: tool.clone(), arguments: state["input"].clone() });
                let is_error = state["status"] == "error";
                let output = if is_error { text_of(&state["error"]) } else { text_of(&state["output"]) };
                steps.push(Step::Result { id, tool, output, is_error });
            }
            Some("step_finish") => {
                let t = &part["tokens"];
                for (k, v) in
                    [("input_tokens", &t["input"]), ("output_tokens", &t["output"]), ("cost_usd", &part["cost"])]
                {
                    *usage.entry(k).or_default() += v.as_f64().unwrap_or(0.0);
                }
            }
            _ => {}
        }
    }
    if let Some(t) = last_text {
        steps.push(Step::Answer(t));
    }
    steps.push(Step::Usage(json!({
        "input_tokens": usage.get("input_tokens").copied().unwrap_or(0.0) as u64,
        "output_tokens": usage.get("output_tokens").copied().unwrap_or(0.0) as u64,
        "cost_usd": usage.get("cost_usd").copied().unwrap_or(0.0),
    })));
    steps
}

/// Its config's `mcp` entries: `remote` servers by URL, `local` ones by their command line.
fn mcp(servers: &[agenteval_core::environment::McpServer]) -> String {
    let entries: serde_json::Map<String, serde_json::Value> = servers
        .iter()
        .map(|s| {
            let entry = match s.transport.as_str() {
                "stdio" => {
                    let argv: Vec<String> = s.command.iter().cloned().chain(s.args.iter().cloned()).collect();
                    json!({"type": "local", "command": argv, "enabled": true})
                }
                _ => json!({"type": "remote", "url": s.url, "enabled": true}),
            };
            (s.name.clone(), entry)
        })
        .collect();
    serde_json::Value::Object(entries).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// opencode 1.18's events for one command and an answer (trimmed).
    const RECORD: &str = r#"{"type":"step_start","part":{"type":"step-start"}}
{"type":"tool_use","part":{"type":"tool","tool":"bash","callID":"call_1","state":{"status":"completed","input":{"command":"ls"},"output":"a\n"}}}
{"type":"step_finish","part":{"type":"step-finish","tokens":{"input":10,"output":5},"cost":0}}
{"type":"text","part":{"type":"text","text":"done"}}
{"type":"step_finish","part":{"type":"step-finish","tokens":{"input":10,"output":5},"cost":0}}"#;

    #[test]
    fn tool_parts_and_the_last_text_are_read_with_the_summed_usage() {
        let steps = read(RECORD, "");
        assert_eq!(
            steps[0],
            Step::Call { id: "call_1".into(), tool: "bash".into(), arguments: json!({"command": "ls"}) }
        );
        assert!(matches!(&steps[1], Step::Result { output, is_error: false, .. } if output == "a\n"));
        assert_eq!(steps[3], Step::Answer("done".into()));
        assert!(matches!(&steps[4], Step::Usage(u) if u["input_tokens"] == 20 && u["output_tokens"] == 10));
    }
    #[test]
    fn mcp_servers_are_remote_or_local_entries() {
        let v: serde_json::Value = serde_json::from_str(&mcp(&super::super::sample_mcp_servers())).unwrap();
        assert_eq!(v["orders"], json!({"type": "remote", "url": "http://orders:8000/mcp", "enabled": true}));
        assert_eq!(v["fs"], json!({"type": "local", "command": ["mcp-fs", "/app"], "enabled": true}));
    }
}
