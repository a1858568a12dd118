//! `tool_calls`: the agent made the expected tool calls, each by name and arguments (a mode per
//! call: `exact`, `subset`, `superset`, `ignore`; a rule per argument: `ignore`, `exact`, a regex
//! or a JSON Schema), in order, in any order, or one of them. The score is the share matched;
//! the reason names each call missed with the nearest call the agent made and what differed.

use std::collections::BTreeMap;

use agenteval_core::Result;
use agenteval_core::config::{ArgumentMode, ArgumentRule, ArgumentWord, CallOrder, ExpectedCall};
use agenteval_core::model::EventKind;
use agenteval_core::traits::EvalInput;
use serde_json::{Map, Value};

use super::{Judge, Judgement};

/// An argument's rule, compiled.
#[derive(Debug)]
enum Rule {
    Ignore,
    Exact,
    Regex(regex::Regex),
    Schema(Box<jsonschema::Validator>),
}

#[derive(Debug)]
struct Expected {
    tool: String,
    arguments: Map<String, Value>,
    mode: ArgumentMode,
    rules: BTreeMap<String, Rule>,
}

#[derive(Debug)]
pub(super) struct ToolCalls {
    calls: Vec<Expected>,
    order: CallOrder,
    pass_threshold: f64,
}

impl ToolCalls {
    pub(super) fn build(
        calls: &[ExpectedCall],
        order: Option<CallOrder>,
        arguments: Option<ArgumentMode>,
        pass_threshold: Option<f64>,
    ) -> std::result::Result<Self, String> {
        let mut out = Vec::new();
        for c in calls {
            let mut rules = BTreeMap::new();
            for (arg, rule) in &c.rules {
                let r = match rule {
                    ArgumentRule::Word(ArgumentWord::Ignore) => Rule::Ignore,
                    ArgumentRule::Word(ArgumentWord::Exact) => Rule::Exact,
                    ArgumentRule::Regex { regex } => {
                        Rule::Regex(regex::Regex::new(regex).map_err(|e| format!("`{arg}`: invalid regex: {e}"))?)
                    }
                    ArgumentRule::Schema { schema } => Rule::Schema(Box::new(
                        jsonschema::draft202012::new(schema)
                            .map_err(|e| format!("`{arg}`: invalid JSON Schema: {e}"))?,
                    )),
                };
                rules.insert(arg.clone(), r);
            }
            out.push(Expected {
                tool: c.tool.clone(),
                arguments: c.arguments.clone().unwrap_or_default(),
                mode: c.mode.or(arguments).unwrap_or_default(),
                rules,
            });
        }
        Ok(ToolCalls { calls: out, order: order.unwrap_or_default(), pass_threshold: pass_threshold.unwrap_or(1.0) })
    }
}

/// A call the agent made: its step, tool and arguments (a string holding JSON is parsed).
struct Made {
    step: u32,
    tool: String,
    arguments: Map<String, Value>,
}

fn made(input: &EvalInput<'_>) -> Vec<Made> {
    input
        .trace
        .iter()
        .filter(|e| e.kind == EventKind::AgentToolCall)
        .map(|e| {
            let tool = e.payload.get("tool").or_else(|| e.payload.get("name")).and_then(Value::as_str).unwrap_or("");
            let args = match e.payload.get("arguments").or_else(|| e.payload.get("input")) {
                Some(Value::Object(m)) => m.clone(),
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                },
                _ => Map::new(),
            };
            Made { step: e.step, tool: tool.to_string(), arguments: args }
        })
        .collect()
}

/// Equal as JSON, numbers by value (`5` and `5.0` are one number).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 { format!("{}…", s.chars().take(60).collect::<String>()) } else { s }
}

/// What differs between an expected call's arguments and a call's: empty when it matches.
fn differences(want: &Expected, got: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    let mut keys: Vec<&String> = want.arguments.keys().chain(want.rules.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let rule = want.rules.get(k);
        let expected = want.arguments.get(k);
        if matches!(rule, Some(Rule::Ignore)) {
            continue;
        }
        let Some(actual) = got.get(k) else {
            // A superset call may leave expected arguments out; an ignored mode checks only rules.
            let optional = want.mode == ArgumentMode::Superset || (want.mode == ArgumentMode::Ignore && rule.is_none());
            if !optional {
                out.push(format!("argument `{k}` missing"));
            }
            continue;
        };
        match rule {
            Some(Rule::Regex(re)) => {
                let text = actual.as_str().map_or_else(|| actual.to_string(), str::to_string);
                if !re.is_match(&text) {
                    out.push(format!("argument `{k}` is {}, which does not match /{}/", shown(actual), re.as_str()));
                }
            }
            Some(Rule::Schema(v)) => {
                if let Some(e) = v.iter_errors(actual).next() {
                    out.push(format!("argument `{k}` is {}: {e}", shown(actual)));
                }
            }
            _ if want.mode == ArgumentMode::Ignore && rule.is_none() => {}
            _ => match expected {
                Some(e) if !same(e, actual) => {
                    out.push(format!("argument `{k}` is {}, expected {}", shown(actual), shown(e)))
                }
                _ => {}
            },
        }
    }
    if matches!(want.mode, ArgumentMode::Exact | ArgumentMode::Superset) {
        for k in got.keys().filter(|k| !want.arguments.contains_key(*k) && !want.rules.contains_key(*k)) {
            out.push(format!("unexpected argument `{k}`"));
        }
    }
    out
}

impl Judge for ToolCalls {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let calls = made(input);
        let fits = |w: &Expected, c: &Made| c.tool == w.tool && differences(w, &c.arguments).is_empty();
        // Which call (by position in `calls`) each expected one matched.
        let mut matched: Vec<Option<usize>> = vec![None; self.calls.len()];
        match self.order {
            CallOrder::InOrder => {
                let mut from = 0;
                for (i, w) in self.calls.iter().enumerate() {
                    if let Some(j) = (from..calls.len()).find(|&j| fits(w, &calls[j])) {
                        matched[i] = Some(j);
                        from = j + 1;
                    }
                }
            }
            CallOrder::AnyOrder | CallOrder::AnyOf => {
                let mut used = vec![false; calls.len()];
                for (i, w) in self.calls.iter().enumerate() {
                    if let Some(j) = (0..calls.len()).find(|&j| !used[j] && fits(w, &calls[j])) {
                        matched[i] = Some(j);
                        used[j] = true;
                    }
                }
            }
        }
        let hits = matched.iter().filter(|m| m.is_some()).count();
        let score = match self.order {
            CallOrder::AnyOf => f64::from(u8::from(hits > 0)),
            _ => hits as f64 / self.calls.len().max(1) as f64,
        };
        let passed = score + 1e-12 >= self.pass_threshold;
        let order = match self.order {
            CallOrder::InOrder => "in order",
            CallOrder::AnyOrder => "in any order",
            CallOrder::AnyOf => "any one of them",
        };
        let mut said = vec![format!("{hits} of {} expected calls matched ({order})", self.calls.len())];
        let mut citations: Vec<u32> = matched.iter().flatten().map(|&j| calls[j].step).collect();
        for (i, w) in self.calls.iter().enumerate().filter(|(i, _)| matched[*i].is_none()) {
            // The nearest call: of the same tool, the fewest differences; one that fits but came
            // before the previous match is out of order.
            let nearest = calls
                .iter()
                .filter(|c| c.tool == w.tool)
                .map(|c| (differences(w, &c.arguments), c))
                .min_by_key(|(d, _)| d.len());
            let why = match nearest {
                Some((d, c)) if d.is_empty() => format!("`{}`: its call at step {} came out of order", w.tool, c.step),
                Some((d, c)) => {
                    citations.push(c.step);
                    format!("`{}`: nearest call at step {}: {}", w.tool, c.step, d.join(", "))
                }
                None => {
                    let names: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
                    let names = if names.is_empty() { "none".to_string() } else { names.join(", ") };
                    format!("`{}` was never called (the agent called: {names})", w.tool)
                }
            };
            said.push(format!("call {} {why}", i + 1));
        }
        citations.sort_unstable();
        citations.dedup();
        Ok((score, passed, said.join("; "), citations))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::model::TraceEvent;
    use serde_json::json;

    fn judge_on(cfg: Value, calls: &[(&str, Value)]) -> Judgement {
        let expected: Vec<ExpectedCall> = serde_json::from_value(cfg["calls"].clone()).unwrap();
        let order = serde_json::from_value(cfg["order"].clone()).ok();
        let args = serde_json::from_value(cfg["arguments"].clone()).ok();
        let j = ToolCalls::build(&expected, order, args, cfg["pass_threshold"].as_f64()).unwrap();
        let trace: Vec<TraceEvent> = calls
            .iter()
            .enumerate()
            .map(|(i, (tool, args))| TraceEvent {
                run_id: agenteval_core::RunId::new(),
                task_id: "t".parse().unwrap(),
                step: i as u32,
                attempt: 1,
                timestamp: chrono::Utc::now(),
                kind: EventKind::AgentToolCall,
                payload: json!({"tool": tool, "arguments": args}),
                cost_usd: 0.0,
                input_tokens: 0,
                output_tokens: 0,
            })
            .collect();
        let (task, result) = (super::super::tests::task(None), super::super::tests::result(None));
        j.judge(&EvalInput { task: &task, result: &result, trace: &trace, env: None }).unwrap()
    }

    #[test]
    fn the_right_tool_with_wrong_arguments_scores_part_and_names_the_difference() {
        let cfg = json!({"calls": [
            {"tool": "search", "arguments": {"q": "paris", "limit": 5}},
            {"tool": "book", "arguments": {"city": "Paris"}},
        ]});
        let right = [("search", json!({"q": "paris", "limit": 5, "lang": "en"})), ("book", json!({"city": "Paris"}))];
        let (score, passed, _, _) = judge_on(cfg.clone(), &right);
        assert_eq!((score, passed), (1.0, true), "subset: extra arguments are fine");
        let wrong = [("search", json!({"q": "paris", "limit": 10})), ("book", json!({"city": "Paris"}))];
        let (score, passed, why, cites) = judge_on(cfg, &wrong);
        assert_eq!((score, passed), (0.5, false));
        assert!(why.contains("1 of 2 expected calls matched (in order)"), "{why}");
        assert!(why.contains("call 1 `search`: nearest call at step 0: argument `limit` is 10, expected 5"), "{why}");
        assert_eq!(cites, vec![0, 1]);
    }

    #[test]
    fn order_missing_calls_modes_and_rules() {
        let two = json!([{"tool": "a"}, {"tool": "b"}]);
        let reversed = [("b", json!({})), ("a", json!({}))];
        let (score, _, why, _) = judge_on(json!({"calls": two}), &reversed);
        assert_eq!(score, 0.5, "{why}");
        assert!(why.contains("call 2 `b`: its call at step 0 came out of order"), "{why}");
        assert_eq!(judge_on(json!({"calls": two, "order": "any_order"}), &reversed).0, 1.0);
        let (score, _, why, _) = judge_on(json!({"calls": two, "order": "any_order"}), &[("a", json!({}))]);
        assert_eq!(score, 0.5);
        assert!(why.contains("`b` was never called (the agent called: a)"), "{why}");
        assert_eq!(judge_on(json!({"calls": two, "order": "any_of"}), &[("b", json!({}))]).0, 1.0);
        // Exact refuses an extra argument; superset allows one left out; ignore checks names.
        let one = |mode: &str| json!({"calls": [{"tool": "a", "arguments": {"x": 1, "y": 2}, "mode": mode}]});
        assert_eq!(judge_on(one("exact"), &[("a", json!({"x": 1, "y": 2.0}))]).0, 1.0, "2 and 2.0 are one number");
        assert!(
            judge_on(one("exact"), &[("a", json!({"x": 1, "y": 2, "z": 3}))]).2.contains("unexpected argument `z`")
        );
        assert_eq!(judge_on(one("superset"), &[("a", json!({"x": 1}))]).0, 1.0);
        assert_eq!(judge_on(one("subset"), &[("a", json!({"x": 1}))]).0, 0.0);
        assert_eq!(judge_on(one("ignore"), &[("a", json!({"q": 9}))]).0, 1.0);
        // Rules per argument: a regex, a schema, ignore.
        let ruled = json!({"calls": [{"tool": "mail", "arguments": {"to": "x", "n": 0},
            "match": {"to": {"regex": "^[^@]+@example\\.com$"}, "n": {"schema": {"type": "integer", "minimum": 1}}, "cc": "ignore"}}]});
        assert_eq!(judge_on(ruled.clone(), &[("mail", json!({"to": "ann@example.com", "n": 3, "cc": "z"}))]).0, 1.0);
        let (_, _, why, _) = judge_on(ruled, &[("mail", json!({"to": "ann@evil.com", "n": 0}))]);
        assert!(why.contains("argument `to` is \"ann@evil.com\", which does not match"), "{why}");
        assert!(why.contains("argument `n` is 0:"), "{why}");
    }
}
