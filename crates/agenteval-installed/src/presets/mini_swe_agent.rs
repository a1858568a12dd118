//! mini-swe-agent (PyPI `mini-swe-agent`): Python, on the OpenAI chat wire through litellm, run
//! by `mini -y --exit-immediately`, whose trajectory file (`-o`) is its record.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Package, Preset};
use crate::trajectory::{Step, text_of};

pub const PRESET: Preset = Preset {
    name: "mini-swe-agent",
    version: "2.4.6",
    wire: "chat",
    package: Package::Pip { package: "mini-swe-agent", module: "minisweagent.run.mini", call: "app", bin: "mini" },
    // Its bundled `mini.yaml`, the gateway as litellm's `api_base`, at most max_steps steps,
    // its own cost tracking tolerant of a model litellm does not price (the gateway prices).
    command: r#"set -e
export PATH="/opt/agenteval-agent/bin:$PATH"
mini -y --exit-immediately -m "openai/${AGENTEVAL_MODEL}" -c mini.yaml -c "model.model_kwargs.api_base=${OPENAI_BASE_URL}" -c "agent.step_limit=${AGENTEVAL_MAX_STEPS}" -t "$(cat "$AGENTEVAL_INSTRUCTION")" -o /logs/agent/mini.traj.json < /dev/null"#,
    // One task to its submission: its CLI has no way to go on with a finished trajectory.
    resume: None,
    // No MCP client of its own.
    mcp: None,
    env: &[
        ("MSWEA_CONFIGURED", "true"),
        ("MSWEA_COST_TRACKING", "ignore_errors"),
        ("MSWEA_SILENT_STARTUP", "1"),
        ("MSWEA_GLOBAL_CONFIG_DIR", "/logs/agent/mini-config"),
        // litellm's price table from its package, not fetched from GitHub.
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ("NO_COLOR", "1"),
    ],
    record: "/logs/agent/mini.traj.json",
    read,
    check: "python3 -m compileall -q -j 0 /opt/agenteval-agent/site >/dev/null; mini --help",
};

/// The trajectory's messages: the assistant's text and tool calls, the tool messages with each
/// command's output, and the exit with its submission and model stats.
fn read(record: &str, _stdout: &str) -> Vec<Step> {
    let Ok(traj) = serde_json::from_str::<Value>(record) else { return Vec::new() };
    let mut steps = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for m in traj["messages"].as_array().into_iter().flatten() {
        match m["role"].as_str() {
            Some("assistant") => {
                steps.push(Step::Plan(text_of(&m["content"])));
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = text_of(&c["id"]);
                    let tool = text_of(&c["function"]["name"]);
                    let raw = text_of(&c["function"]["arguments"]);
                    let arguments = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
                    names.insert(id.clone(), tool.clone());
                    steps.push(Step::Call { id, tool, arguments });
                }
            }
            Some("tool") => {
                let id = text_of(&m["tool_call_id"]);
                let extra = &m["extra"];
                let output = match extra.get("raw_output") {
                    Some(raw) => text_of(raw),
                    None => text_of(&m["content"]),
                };
                let is_error = extra["returncode"].as_i64().is_some_and(|c| c != 0);
                steps.push(Step::Result { tool: names.get(&id).cloned().unwrap_or_default(), id, output, is_error });
            }
            _ => {}
        }
    }
    let info = &traj["info"];
    steps.push(Step::Answer(
        format!("{}: {}", text_of(&info["exit_status"]), text_of(&info["submission"])).trim().into(),
    ));
    let stats = &info["model_stats"];
    steps.push(Step::Usage(json!({"api_calls": stats["api_calls"], "cost_usd": stats["instance_cost"]})));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// mini-swe-agent 2.4's trajectory of one command and its submission (trimmed).
    const RECORD: &str = r#"{"info": {"model_stats": {"instance_cost": 0.0, "api_calls": 2}, "exit_status": "Submitted", "submission": ""},
 "messages": [{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": "Please solve this issue"},
  {"content": null, "role": "assistant", "tool_calls": [{"function": {"arguments": "{\"command\":\"ls\"}", "name": "bash"}, "id": "call_1", "type": "function"}]},
  {"content": "{\"returncode\": 0}", "extra": {"raw_output": "a\n", "returncode": 0}, "tool_call_id": "call_1", "role": "tool"},
  {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}}],
 "trajectory_format": "mini-swe-agent-1.1"}"#;

    #[test]
    fn tool_calls_their_outputs_and_the_exit_are_read() {
        let steps = read(RECORD, "");
        assert_eq!(
            steps[1],
            Step::Call { id: "call_1".into(), tool: "bash".into(), arguments: json!({"command": "ls"}) }
        );
        assert_eq!(
            steps[2],
            Step::Result { id: "call_1".into(), tool: "bash".into(), output: "a\n".into(), is_error: false }
        );
        assert_eq!(steps[3], Step::Answer("Submitted:".into()));
        assert!(matches!(&steps[4], Step::Usage(u) if u["api_calls"] == 2));
        assert!(read("not json", "").is_empty());
    }
}
