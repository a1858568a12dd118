//! aider (PyPI `aider-chat`): Python, on the OpenAI chat wire through litellm, run once on the
//! instruction (`--message-file`), whose chat history file is its record.

use serde_json::json;

use super::{Package, Preset};
use crate::trajectory::Step;

pub const PRESET: Preset = Preset {
    name: "aider",
    version: "0.86.2",
    wire: "chat",
    package: Package::Pip { package: "aider-chat", module: "aider.main", call: "main", bin: "aider" },
    // One message, every question answered yes, no git of its own (the worker takes the patch),
    // no repository map, update check, analytics or colour; its home and histories under the
    // task's logs.
    // aider has no step limit of its own beyond its three reflections on a failed edit.
    command: r#"set -e
export PATH="/opt/agenteval-agent/bin:$PATH" HOME=/logs/agent/aider-home
# Its model tables from the packages, not fetched (each fetch waits out a timeout offline).
mkdir -p "$HOME/.aider/caches"
cp /opt/agenteval-agent/site/litellm/model_prices_and_context_window_backup.json "$HOME/.aider/caches/model_prices_and_context_window.json"
echo '{"data": []}' > "$HOME/.aider/caches/openrouter_models.json"
aider --model "openai/${AGENTEVAL_MODEL}" --openai-api-base "${OPENAI_BASE_URL}" --yes-always --no-git --no-auto-commits --map-tokens 0 --no-check-update --no-show-release-notes --no-show-model-warnings --no-analytics --no-pretty --no-stream --no-fancy-input --chat-history-file /logs/agent/aider.chat.history.md --input-history-file /logs/agent/aider.input.history --llm-history-file /logs/agent/aider.llm.history --message-file "$AGENTEVAL_INSTRUCTION" < /dev/null"#,
    // Its chat is a file of edits it replays, not a session a headless call continues.
    resume: None,
    // No MCP client of its own.
    mcp: None,
    env: &[("LITELLM_LOCAL_MODEL_COST_MAP", "True"), ("AIDER_ANALYTICS", "false"), ("NO_COLOR", "1")],
    record: "/logs/agent/aider.chat.history.md",
    read,
    check: "python3 -m compileall -q -j 0 /opt/agenteval-agent/site >/dev/null; aider --version",
};

/// The chat history: `#### ` lines are the user's, `> ` lines aider's own output (its edits,
/// the commands it ran, token counts), the rest the model's replies.
fn read(record: &str, _stdout: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let (mut reply, mut notes) = (String::new(), String::new());
    let (mut sent, mut received, mut n) = (0u64, 0u64, 0usize);
    let flush = |reply: &mut String, notes: &mut String, steps: &mut Vec<Step>, n: &mut usize| {
        if !reply.trim().is_empty() {
            steps.push(Step::Plan(reply.trim().to_string()));
        }
        if !notes.trim().is_empty() {
            *n += 1;
            let id = format!("aider_{n}");
            steps.push(Step::Call { id: id.clone(), tool: "aider".into(), arguments: json!({}) });
            steps.push(Step::Result { id, tool: "aider".into(), output: notes.trim().to_string(), is_error: false });
        }
        reply.clear();
        notes.clear();
    };
    let mut last_reply = None;
    for line in record.lines() {
        if let Some(note) = line.strip_prefix("> ").or_else(|| (line == ">").then_some("")) {
            if !reply.trim().is_empty() {
                last_reply = Some(reply.trim().to_string());
                steps.push(Step::Plan(reply.trim().to_string()));
                reply.clear();
            }
            let note = note.trim_end();
            if let Some(t) = note.strip_prefix("Tokens: ") {
                sent += count_before(t, " sent");
                received += count_before(t, " received");
            }
            notes.push_str(note);
            notes.push('\n');
        } else if line.starts_with("#### ") || line.starts_with("# aider chat started") {
            flush(&mut reply, &mut notes, &mut steps, &mut n);
        } else {
            if !notes.is_empty() {
                flush(&mut String::new(), &mut notes, &mut steps, &mut n);
            }
            reply.push_str(line);
            reply.push('\n');
        }
    }
    if !reply.trim().is_empty() {
        last_reply = Some(reply.trim().to_string());
    }
    flush(&mut reply, &mut notes, &mut steps, &mut n);
    if let Some(r) = last_reply {
        steps.push(Step::Answer(r));
    }
    steps.push(Step::Usage(json!({"input_tokens": sent, "output_tokens": received})));
    steps
}

/// The count aider prints before `word`: `1,010`, `2.3k` or `1.2M`.
fn count_before(text: &str, word: &str) -> u64 {
    let Some(at) = text.find(word) else { return 0 };
    let number = text[..at].rsplit([' ', '\t']).next().unwrap_or_default().replace(',', "");
    let (digits, scale) = match number.chars().last() {
        Some('k') => (&number[..number.len() - 1], 1e3),
        Some('M') => (&number[..number.len() - 1], 1e6),
        _ => (number.as_str(), 1.0),
    };
    digits.parse::<f64>().map_or(0, |n| (n * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// aider 0.86's history of one edit (trimmed).
    const RECORD: &str = "\n# aider chat started at 2026-12-04 13:39:01\n\n> aider --model openai/m  \n> Aider v0.86.2  \n\n#### Create the file  \n\nhello.txt\n```\nHello\n```\n\n> Tokens: 1,010 sent, 5 received.  \n> hello.txt  \n> Applied edit to hello.txt  \n";

    #[test]
    fn replies_aiders_notes_and_the_token_counts_are_read() {
        let steps = read(RECORD, "");
        let plans: Vec<&Step> = steps.iter().filter(|s| matches!(s, Step::Plan(_))).collect();
        assert_eq!(plans, [&Step::Plan("hello.txt\n```\nHello\n```".into())]);
        assert!(
            steps
                .iter()
                .any(|s| matches!(s, Step::Result { output, .. } if output.contains("Applied edit to hello.txt")))
        );
        assert_eq!(steps.last(), Some(&Step::Usage(json!({"input_tokens": 1010, "output_tokens": 5}))));
    }

    #[test]
    fn token_counts_are_read_in_every_form_aider_prints() {
        assert_eq!(count_before("2.3k sent, 101 received. Cost: $0.01 message", " sent"), 2300);
        assert_eq!(count_before("2.3k sent, 101 received.", " received"), 101);
        assert_eq!(count_before("1.2M sent, 7 received.", " sent"), 1_200_000);
        assert_eq!(count_before("nothing here", " sent"), 0);
    }
}
