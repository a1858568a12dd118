//! `trace_quality`: how the agent worked, from its trace: no loop (the same tool call with the
//! same arguments more than `max_repeats` times), no failing call made again and again (more
//! than `max_failed_repeats` times), and a final answer that does not contradict what its tools
//! said last (success claimed over a failed call; a number other than the one the last
//! calculation gave). The reason names each problem with its steps.

use std::collections::BTreeMap;

use agenteval_core::Result;
use agenteval_core::model::{EventKind, answer_text};
use agenteval_core::traits::EvalInput;
use serde_json::Value;

use super::{Judge, Judgement, verdict};

#[derive(Debug)]
pub(super) struct TraceQuality {
    pub max_repeats: u32,
    pub max_failed_repeats: u32,
    pub contradictions: bool,
}

impl TraceQuality {
    /// From its config: a loop past 3 identical calls, a call failing more than twice, and
    /// contradictions checked, unless the config says otherwise.
    pub(super) fn of(max_repeats: Option<u32>, max_failed_repeats: Option<u32>, contradictions: Option<bool>) -> Self {
        TraceQuality {
            max_repeats: max_repeats.unwrap_or(3),
            max_failed_repeats: max_failed_repeats.unwrap_or(2),
            contradictions: contradictions.unwrap_or(true),
        }
    }
}

/// One tool call and what came back.
struct Call<'a> {
    step: u32,
    tool: &'a str,
    /// The arguments as canonical JSON text: two calls with the same arguments compare equal.
    arguments: String,
    /// The result that followed it, if one did.
    result: Option<&'a Value>,
}

fn tool_of(payload: &Value) -> &str {
    payload.get("tool").or_else(|| payload.get("name")).and_then(Value::as_str).unwrap_or("")
}

/// Whether a tool result says the call failed: an `error`, `is_error: true`, a non-zero
/// `exit_code` or a `status` of `error`/`failed`.
fn failed(result: &Value) -> bool {
    let present = |k: &str| result.get(k).is_some_and(|v| !v.is_null() && v != &Value::Bool(false) && v != "");
    present("error")
        || result.get("is_error").and_then(Value::as_bool) == Some(true)
        || result.get("exit_code").and_then(Value::as_i64).is_some_and(|c| c != 0)
        || result.get("status").and_then(Value::as_str).is_some_and(|s| matches!(s, "error" | "failed"))
}

/// A tool result's output as text (`result`, `output` or `content`).
fn output(result: &Value) -> Option<String> {
    ["result", "output", "content"].iter().find_map(|k| result.get(*k)).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// The numbers written in `text`, as they read (`42`, `-3.5`).
fn numbers(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || (c == '.' && !cur.is_empty()) || (c == '-' && cur.is_empty()) {
            cur.push(c);
        } else {
            if let Ok(n) = cur.trim_end_matches('.').parse::<f64>() {
                out.push(n);
            }
            cur.clear();
        }
    }
    out
}

/// Words of an answer that claim the work succeeded, and words that admit it did not.
fn claims_success(answer: &str) -> bool {
    let a = answer.to_lowercase();
    let admits = ["fail", "error", "could not", "couldn't", "unable", "not "].iter().any(|w| a.contains(w));
    let claims =
        ["passed", "passes", "succeeded", "success", "fixed", "works", "all tests pass"].iter().any(|w| a.contains(w));
    claims && !admits
}

fn calls<'a>(input: &'a EvalInput<'_>) -> Vec<Call<'a>> {
    let mut out: Vec<Call<'a>> = Vec::new();
    for e in input.trace {
        match e.kind {
            EventKind::AgentToolCall => out.push(Call {
                step: e.step,
                tool: tool_of(&e.payload),
                arguments: e.payload.get("arguments").map(Value::to_string).unwrap_or_default(),
                result: None,
            }),
            // A result answers the latest call of its tool still without one.
            EventKind::AgentToolResult => {
                let tool = tool_of(&e.payload);
                if let Some(c) =
                    out.iter_mut().rev().find(|c| c.result.is_none() && (tool.is_empty() || c.tool == tool))
                {
                    c.result = Some(&e.payload);
                }
            }
            _ => {}
        }
    }
    out
}

impl Judge for TraceQuality {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let calls = calls(input);
        let mut problems: Vec<String> = Vec::new();
        let mut cited: Vec<u32> = Vec::new();
        let mut same: BTreeMap<(&str, &str), Vec<&Call>> = BTreeMap::new();
        for c in &calls {
            same.entry((c.tool, c.arguments.as_str())).or_default().push(c);
        }
        for ((tool, _), group) in &same {
            let steps: Vec<u32> = group.iter().map(|c| c.step).collect();
            let failing: Vec<u32> = group.iter().filter(|c| c.result.is_some_and(failed)).map(|c| c.step).collect();
            if group.len() as u32 > self.max_repeats {
                problems.push(format!(
                    "a loop: `{tool}` called {} times with the same arguments (steps {}; max_repeats {})",
                    group.len(),
                    list(&steps),
                    self.max_repeats
                ));
                cited.extend(&steps);
            } else if failing.len() as u32 > self.max_failed_repeats {
                problems.push(format!(
                    "`{tool}` failed {} times with the same arguments and was called again each time (steps {}; max_failed_repeats {})",
                    failing.len(),
                    list(&failing),
                    self.max_failed_repeats
                ));
                cited.extend(&failing);
            }
        }
        if self.contradictions
            && let Some(answer) = input.result.final_answer.as_ref().map(answer_text)
            && let Some(last) = calls.iter().rev().find(|c| c.result.is_some())
            && let Some(result) = last.result
        {
            if failed(result) && claims_success(&answer) {
                problems.push(format!(
                    "the answer claims success, but the last tool call (`{}`, step {}) failed",
                    last.tool, last.step
                ));
                cited.push(last.step);
            } else if let Some(out) = output(result)
                && let [said] = numbers(&out)[..]
                && out.trim().trim_end_matches('.').parse::<f64>().is_ok()
            {
                let given = numbers(&answer);
                if !given.is_empty() && !given.iter().any(|n| (n - said).abs() <= 1e-9 * said.abs().max(1.0)) {
                    problems.push(format!(
                        "the answer contradicts its last tool result: `{}` (step {}) gave {out}, the answer says otherwise",
                        last.tool,
                        last.step,
                        out = out.trim()
                    ));
                    cited.push(last.step);
                }
            }
        }
        cited.sort_unstable();
        cited.dedup();
        let ok = problems.is_empty();
        let reason = if ok {
            format!("{} tool call(s): no loop, no failing call repeated, no contradiction", calls.len())
        } else {
            problems.join("; ")
        };
        Ok(verdict(ok, reason, cited))
    }
}

fn list(steps: &[u32]) -> String {
    steps.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::model::TraceEvent;
    use serde_json::json;

    fn judge(events: &[(EventKind, Value)], answer: &str) -> Judgement {
        let task = crate::tests::task(None);
        let run = agenteval_core::RunId::new();
        let trace: Vec<TraceEvent> = events
            .iter()
            .enumerate()
            .map(|(i, (kind, payload))| TraceEvent {
                run_id: run,
                task_id: "t".parse().unwrap(),
                step: i as u32 + 1,
                attempt: 0,
                timestamp: chrono::Utc::now(),
                kind: *kind,
                payload: payload.clone(),
                cost_usd: 0.0,
                input_tokens: 0,
                output_tokens: 0,
            })
            .collect();
        let result = crate::tests::result(Some(answer));
        let input = EvalInput { task: &task, result: &result, trace: &trace, env: None };
        TraceQuality { max_repeats: 3, max_failed_repeats: 1, contradictions: true }.judge(&input).unwrap()
    }

    fn call(tool: &str, args: Value) -> (EventKind, Value) {
        (EventKind::AgentToolCall, json!({"tool": tool, "arguments": args}))
    }

    fn result(tool: &str, r: Value) -> (EventKind, Value) {
        let mut p = r;
        p["tool"] = json!(tool);
        (EventKind::AgentToolResult, p)
    }

    #[test]
    fn a_clean_trace_passes() {
        let (_, passed, reason, _) =
            judge(&[call("calc", json!({"x": "6*7"})), result("calc", json!({"result": "42"}))], "The answer is 42.");
        assert!(passed, "{reason}");
    }

    #[test]
    fn the_same_call_four_times_is_a_loop_with_its_steps() {
        let mut events = Vec::new();
        for _ in 0..4 {
            events.push(call("search", json!({"q": "x"})));
            events.push(result("search", json!({"result": "nothing"})));
        }
        let (score, passed, reason, steps) = judge(&events, "no idea");
        assert!(!passed && score == 0.0);
        assert!(reason.contains("a loop: `search` called 4 times"), "{reason}");
        assert_eq!(steps, [1, 3, 5, 7]);
        // Different arguments are not a loop.
        let varied: Vec<_> = (0..4)
            .flat_map(|i| [call("search", json!({"q": i})), result("search", json!({"result": "nothing"}))])
            .collect();
        assert!(judge(&varied, "no idea").1);
    }

    #[test]
    fn a_failing_call_made_again_is_named() {
        let events = [
            call("bash", json!({"cmd": "make"})),
            result("bash", json!({"exit_code": 2, "output": "no rule"})),
            call("bash", json!({"cmd": "make"})),
            result("bash", json!({"exit_code": 2, "output": "no rule"})),
        ];
        let (_, passed, reason, steps) = judge(&events, "I gave up");
        assert!(!passed);
        assert!(reason.contains("`bash` failed 2 times"), "{reason}");
        assert_eq!(steps, [1, 3]);
    }

    #[test]
    fn an_answer_that_contradicts_the_last_tool_result_is_named() {
        let events = [call("bash", json!({"cmd": "pytest"})), result("bash", json!({"error": "3 tests failed"}))];
        let (_, passed, reason, _) = judge(&events, "Fixed: all tests pass.");
        assert!(!passed && reason.contains("claims success"), "{reason}");
        assert!(judge(&events, "3 tests still fail").1, "an answer that admits the failure agrees with it");
        let events = [call("calc", json!({"x": "6*7"})), result("calc", json!({"result": "42"}))];
        let (_, passed, reason, _) = judge(&events, "The answer is 41.");
        assert!(!passed && reason.contains("gave 42"), "{reason}");
        assert!(judge(&events, "done").1, "an answer with no number does not contradict one");
    }

    #[test]
    fn numbers_are_read_as_written() {
        assert_eq!(numbers("it is 42. or -3.5, not x7y"), [42.0, -3.5, 7.0]);
    }
}
