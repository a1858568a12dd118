//! Built-in evaluators: exact_match, contains, regex, no_error, max_steps, tool_sequence,
//! cost_budget, latency_budget, json_schema, policy, `command` (any program, in [`command`]) and
//! the LLM judges `llm_rubric`/`llm_pass_fail` (from `agenteval-llm`). Each turns a task's result
//! and trace into an `EvaluatorScore`.

mod command;

use std::sync::Arc;

use agenteval_core::config::{EvaluatorConfig, PolicyAction, SequenceMode};
use agenteval_core::model::{EvaluatorScore, EventKind, TerminatedBy};
use agenteval_core::secret::Secret;
use agenteval_core::traits::{EvalInput, Evaluator};
use agenteval_core::{Error, Result};
use agenteval_llm::{JudgeKind, LlmJudge};
use async_trait::async_trait;

use crate::benchmarks::answer_text;

/// An evaluator built from its configuration.
#[derive(Debug)]
pub struct BuiltinEvaluator {
    cfg: EvaluatorConfig,
    regex: Option<regex::Regex>,
    /// `json_schema`: the compiled schema.
    schema: Option<jsonschema::Validator>,
    /// `policy`: the compiled forbidden patterns.
    patterns: Vec<regex::Regex>,
}

/// The secret a judge's provider key comes from: `(ENV_NAME, secret name)`, when it needs one.
pub fn judge_secret(judge: &agenteval_core::config::JudgeConfig) -> Option<(String, String)> {
    let spec = agenteval_llm::ModelSpec::parse(&judge.model).ok()?;
    let var = spec.provider.key_var();
    match judge.endpoint.secrets.get(var) {
        Some(name) => Some((var.to_string(), name.clone())),
        None if spec.provider.needs_key() && judge.endpoint.secrets.is_empty() => {
            Some((var.to_string(), var.to_string()))
        }
        None => None,
    }
}

/// Builds an evaluator; fails only on configuration the loader would have refused. `secrets`
/// hold the judges' keys, by environment variable name.
pub fn evaluator_from_config(cfg: &EvaluatorConfig, secrets: &[(String, Secret)]) -> Result<Arc<dyn Evaluator>> {
    let bad = |what: String| Error::invalid(format!("evaluator {}: {what}", cfg.id()));
    let judge = match cfg {
        EvaluatorConfig::LlmRubric { rubric, pass_threshold, judge, .. } => {
            Some((JudgeKind::Rubric { rubric: rubric.clone(), pass_threshold: pass_threshold.unwrap_or(0.5) }, judge))
        }
        EvaluatorConfig::LlmPassFail { criteria, judge, .. } => {
            Some((JudgeKind::PassFail { criteria: criteria.clone() }, judge))
        }
        _ => None,
    };
    if let Some((kind, judge)) = judge {
        let key = judge_secret(judge).and_then(|(var, _)| secrets.iter().find(|(v, _)| *v == var).map(|(_, s)| s));
        return Ok(Arc::new(LlmJudge::new(cfg.id().to_string(), kind, judge, key).map_err(|e| bad(e.to_string()))?));
    }
    let regex = match cfg {
        EvaluatorConfig::Regex { pattern, .. } => {
            Some(regex::Regex::new(pattern).map_err(|e| bad(format!("invalid regex: {e}")))?)
        }
        _ => None,
    };
    let schema = match cfg {
        EvaluatorConfig::JsonSchema { schema: Some(s), .. } => {
            Some(jsonschema::draft202012::new(s).map_err(|e| bad(format!("invalid JSON Schema: {e}")))?)
        }
        EvaluatorConfig::JsonSchema { schema_file, .. } => {
            return Err(bad(format!(
                "the schema of {} was not loaded (only run configs read schema files)",
                schema_file.as_deref().map(|p| p.display().to_string()).unwrap_or_default()
            )));
        }
        _ => None,
    };
    let patterns = match cfg {
        EvaluatorConfig::Policy { forbidden_patterns, .. } => forbidden_patterns
            .iter()
            .map(|p| regex::Regex::new(p).map_err(|e| bad(format!("invalid regex: {e}"))))
            .collect::<Result<_>>()?,
        _ => vec![],
    };
    Ok(Arc::new(BuiltinEvaluator { cfg: cfg.clone(), regex, schema, patterns }))
}

/// The answer as JSON: a string that holds JSON is parsed, anything else is taken as is.
fn answer_json(answer: &serde_json::Value) -> serde_json::Value {
    match answer {
        serde_json::Value::String(s) => serde_json::from_str(s.trim()).unwrap_or_else(|_| answer.clone()),
        other => other.clone(),
    }
}

fn verdict(passed: bool, reason: String, citations: Vec<u32>) -> (f64, bool, String, Vec<u32>) {
    (if passed { 1.0 } else { 0.0 }, passed, reason, citations)
}

fn normalize(s: &str, case_sensitive: bool) -> String {
    let t = s.trim();
    if case_sensitive { t.to_string() } else { t.to_lowercase() }
}

/// Steps of the trace that are tool calls, with the tool names.
fn tool_calls(input: &EvalInput<'_>) -> Vec<(u32, String)> {
    input
        .trace
        .iter()
        .filter(|e| e.kind == EventKind::AgentToolCall)
        .map(|e| {
            let name = e
                .payload
                .get("tool")
                .or_else(|| e.payload.get("name"))
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string();
            (e.step, name)
        })
        .collect()
}

fn final_step(input: &EvalInput<'_>) -> Vec<u32> {
    input.trace.last().map(|e| vec![e.step]).unwrap_or_default()
}

impl BuiltinEvaluator {
    fn judge(&self, input: &EvalInput<'_>) -> Result<(f64, bool, String, Vec<u32>)> {
        let cfg = &self.cfg;
        let answer = input.result.final_answer.as_ref().map(answer_text);
        Ok(match cfg {
            EvaluatorConfig::ExactMatch { expected, case_sensitive, .. } => {
                let cs = case_sensitive.unwrap_or(true);
                let expected = expected
                    .as_ref()
                    .or(input.task.expected.as_ref())
                    .ok_or_else(|| Error::invalid("exact_match needs `expected` in the evaluator or the task"))?;
                let exp = answer_text(expected);
                match answer {
                    None => verdict(false, "no final answer".into(), vec![]),
                    Some(a) => {
                        let ok = normalize(&a, cs) == normalize(&exp, cs);
                        let reason = if ok { "matches".into() } else { format!("expected {exp:?}, got {a:?}") };
                        verdict(ok, reason, final_step(input))
                    }
                }
            }
            EvaluatorConfig::Contains { value, case_sensitive, .. } => {
                let cs = case_sensitive.unwrap_or(true);
                let needle = value
                    .clone()
                    .or_else(|| input.task.expected.as_ref().map(answer_text))
                    .ok_or_else(|| Error::invalid("contains needs `value` or a task `expected`"))?;
                match answer {
                    None => verdict(false, "no final answer".into(), vec![]),
                    Some(a) => {
                        let ok = normalize(&a, cs).contains(&normalize(&needle, cs));
                        let reason = if ok {
                            format!("contains {needle:?}")
                        } else {
                            format!("{a:?} does not contain {needle:?}")
                        };
                        verdict(ok, reason, final_step(input))
                    }
                }
            }
            EvaluatorConfig::Regex { .. } => {
                let re = self.regex.as_ref().ok_or_else(|| Error::internal("regex evaluator without a regex"))?;
                match answer {
                    None => verdict(false, "no final answer".into(), vec![]),
                    Some(a) => {
                        let ok = re.is_match(&a);
                        verdict(
                            ok,
                            format!("{} /{}/", if ok { "matches" } else { "does not match" }, re.as_str()),
                            final_step(input),
                        )
                    }
                }
            }
            EvaluatorConfig::NoError { .. } => {
                let r = input.result;
                let ok = r.terminated_by == TerminatedBy::Completed && r.error.is_none();
                let reason = if ok {
                    "completed without error".into()
                } else {
                    format!("{}: {}", r.terminated_by.as_str(), r.error.as_deref().unwrap_or("no detail"))
                };
                verdict(ok, reason, final_step(input))
            }
            EvaluatorConfig::MaxSteps { max_steps: max, .. } => {
                let max = *max;
                let steps = input.result.steps;
                let ok = steps <= max;
                let cite = if ok { vec![] } else { vec![max] };
                verdict(ok, format!("{steps} steps (max {max})"), cite)
            }
            EvaluatorConfig::ToolSequence { tools, mode, forbidden, .. } => {
                let calls = tool_calls(input);
                if let Some((step, name)) = calls.iter().find(|(_, n)| forbidden.contains(n)) {
                    return Ok(verdict(false, format!("forbidden tool `{name}` called"), vec![*step]));
                }
                let names: Vec<&str> = calls.iter().map(|(_, n)| n.as_str()).collect();
                let want: Vec<&str> = tools.iter().map(String::as_str).collect();
                let mode = mode.unwrap_or_default();
                let ok = match mode {
                    SequenceMode::Strict => names == want,
                    SequenceMode::Ordered => {
                        let mut it = names.iter();
                        want.iter().all(|w| it.any(|n| n == w))
                    }
                    SequenceMode::Subset => want.iter().all(|w| names.contains(w)),
                };
                let reason =
                    format!("{mode:?} match of {want:?} against calls {names:?}: {}", if ok { "ok" } else { "no" })
                        .to_lowercase();
                verdict(ok, reason, calls.iter().map(|(s, _)| *s).collect())
            }
            EvaluatorConfig::CostBudget { max_cost_usd: max, .. } => {
                let max = *max;
                let cost = input.result.total_cost_usd;
                verdict(cost <= max, format!("cost ${cost:.6} (budget ${max:.6})"), vec![])
            }
            EvaluatorConfig::LatencyBudget { max_seconds: max, .. } => {
                let max = *max;
                let secs = input.result.wall_seconds;
                verdict(secs <= max, format!("{secs:.3}s (budget {max:.3}s)"), vec![])
            }
            EvaluatorConfig::JsonSchema { pointer, .. } => {
                let schema = self.schema.as_ref().ok_or_else(|| Error::internal("json_schema without a schema"))?;
                let Some(answer) = input.result.final_answer.as_ref() else {
                    return Ok(verdict(false, "no final answer".into(), vec![]));
                };
                let doc = answer_json(answer);
                let target = match pointer.as_deref().filter(|p| !p.is_empty()) {
                    None => &doc,
                    Some(p) => match doc.pointer(p) {
                        Some(v) => v,
                        None => return Ok(verdict(false, format!("the answer has nothing at {p}"), final_step(input))),
                    },
                };
                let errors: Vec<String> = schema
                    .iter_errors(target)
                    .map(|e| {
                        let at = e.instance_path().to_string();
                        format!("{}: {e}", if at.is_empty() { "/".to_string() } else { at })
                    })
                    .collect();
                if errors.is_empty() {
                    verdict(true, "valid against the schema".into(), final_step(input))
                } else {
                    verdict(false, format!("{} violations: {}", errors.len(), errors.join("; ")), final_step(input))
                }
            }
            EvaluatorConfig::Policy { max_cost_usd, max_steps, allow_tools, deny_tools, on_violation, .. } => {
                let mut broken: Vec<(u32, String)> = Vec::new();
                for (step, name) in tool_calls(input) {
                    if deny_tools.contains(&name) {
                        broken.push((step, format!("step {step}: denied tool `{name}`")));
                    } else if !allow_tools.is_empty() && !allow_tools.contains(&name) {
                        broken.push((step, format!("step {step}: tool `{name}` is not allowed")));
                    }
                }
                for e in input.trace.iter().filter(|e| e.kind == EventKind::AgentToolCall) {
                    let args = e.payload.to_string();
                    if let Some(p) = self.patterns.iter().find(|p| p.is_match(&args)) {
                        broken.push((e.step, format!("step {}: tool arguments match /{}/", e.step, p.as_str())));
                    }
                }
                if let Some(max) = max_steps
                    && input.result.steps > *max
                {
                    broken.push((*max, format!("{} steps (max {max})", input.result.steps)));
                }
                if let Some(max) = max_cost_usd
                    && input.result.total_cost_usd > *max
                {
                    broken.push((
                        input.trace.last().map(|e| e.step).unwrap_or(0),
                        format!("cost ${:.6} (max ${max:.6})", input.result.total_cost_usd),
                    ));
                }
                broken.sort_by_key(|(s, _)| *s);
                let citations: Vec<u32> = broken.iter().map(|(s, _)| *s).collect();
                let why = broken.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>().join("; ");
                match (broken.is_empty(), on_violation.unwrap_or_default()) {
                    (true, _) => verdict(true, "pass: within policy".into(), vec![]),
                    (false, PolicyAction::Warn) => (0.5, true, format!("warn: {why}"), citations),
                    (false, PolicyAction::Fail) => (0.0, false, format!("fail: {why}"), citations),
                }
            }
            EvaluatorConfig::Command { .. } => return Err(Error::internal("the command evaluator is asynchronous")),
            EvaluatorConfig::LlmRubric { .. } | EvaluatorConfig::LlmPassFail { .. } => {
                return Err(Error::internal("LLM judges are built by agenteval-llm"));
            }
        })
    }
}

#[async_trait]
impl Evaluator for BuiltinEvaluator {
    fn id(&self) -> &str {
        self.cfg.id()
    }

    fn kind(&self) -> &str {
        self.cfg.kind()
    }

    async fn evaluate(&self, input: &EvalInput<'_>) -> Result<EvaluatorScore> {
        let (score, passed, reason, citations) = match &self.cfg {
            EvaluatorConfig::Command { command, timeout_seconds, workdir, .. } => {
                let timeout = timeout_seconds.unwrap_or(command::DEFAULT_TIMEOUT);
                let (score, passed, reason) = command::run(command, workdir.as_deref(), timeout, input).await?;
                (score, passed, reason, vec![])
            }
            _ => self.judge(input)?,
        };
        Ok(EvaluatorScore {
            optional: false,
            tokens: 0,
            evaluator_id: self.id().to_string(),
            kind: self.kind().to_string(),
            score,
            passed,
            reason,
            citations,
            cost_usd: 0.0,
            error: None,
        })
    }
}

/// Runs an evaluator, turning an error or a panic-free failure into an error score.
pub async fn evaluate_safely(e: &dyn Evaluator, input: &EvalInput<'_>) -> EvaluatorScore {
    match e.evaluate(input).await {
        Ok(s) => s,
        Err(err) => EvaluatorScore::errored(e.id(), e.kind(), err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::RunId;
    use agenteval_core::model::{AgentResult, TaskSpec, TraceEvent};
    use serde_json::json;

    fn task(expected: Option<&str>) -> TaskSpec {
        TaskSpec {
            id: "t".parse().unwrap(),
            input: json!("q"),
            expected: expected.map(|e| json!(e)),
            tags: vec![],
            evaluators: vec![],
            metadata: serde_json::Value::Null,
        }
    }

    fn result(answer: Option<&str>) -> AgentResult {
        AgentResult {
            success: true,
            final_answer: answer.map(|a| json!(a)),
            error: None,
            total_cost_usd: 0.02,
            total_tokens: 10,
            wall_seconds: 1.5,
            terminated_by: TerminatedBy::Completed,
            steps: 4,
            cost_unknown: false,
        }
    }

    fn trace(tools: &[&str]) -> Vec<TraceEvent> {
        let run = RunId::new();
        tools
            .iter()
            .enumerate()
            .map(|(i, t)| TraceEvent {
                run_id: run,
                task_id: "t".parse().unwrap(),
                step: i as u32,
                attempt: 0,
                timestamp: chrono::Utc::now(),
                kind: EventKind::AgentToolCall,
                payload: json!({"tool": t}),
                cost_usd: 0.0,
                input_tokens: 0,
                output_tokens: 0,
            })
            .collect()
    }

    async fn run(cfg: EvaluatorConfig, t: &TaskSpec, r: &AgentResult, tr: &[TraceEvent]) -> EvaluatorScore {
        let e = evaluator_from_config(&cfg, &[]).unwrap();
        evaluate_safely(e.as_ref(), &EvalInput { task: t, result: r, trace: tr }).await
    }

    fn exact(case_sensitive: Option<bool>) -> EvaluatorConfig {
        EvaluatorConfig::ExactMatch { id: None, expected: None, case_sensitive }
    }

    #[tokio::test]
    async fn answer_evaluators() {
        let t = task(Some("Paris"));
        assert!(run(exact(None), &t, &result(Some("Paris ")), &[]).await.passed);
        assert!(!run(exact(None), &t, &result(Some("paris")), &[]).await.passed);
        assert!(run(exact(Some(false)), &t, &result(Some("paris")), &[]).await.passed);
        let contains = EvaluatorConfig::Contains { id: None, value: None, case_sensitive: None };
        assert!(run(contains.clone(), &t, &result(Some("It is Paris.")), &[]).await.passed);
        assert!(!run(contains, &t, &result(Some("It is Rome.")), &[]).await.passed);
        let re = EvaluatorConfig::Regex { id: None, pattern: "^[A-Z][a-z]+$".into() };
        assert!(run(re.clone(), &t, &result(Some("Paris")), &[]).await.passed);
        assert!(!run(re.clone(), &t, &result(Some("paris!")), &[]).await.passed);
        assert!(!run(re, &t, &result(None), &[]).await.passed);
    }

    #[tokio::test]
    async fn a_failing_evaluator_gives_an_error_score() {
        let s = run(exact(None), &task(None), &result(Some("x")), &[]).await;
        assert!(!s.passed);
        assert!(s.error.as_deref().unwrap().contains("expected"), "{s:?}");
    }

    #[tokio::test]
    async fn budgets_and_steps() {
        let t = task(None);
        let r = result(Some("x"));
        let cost = |max| EvaluatorConfig::CostBudget { id: None, max_cost_usd: max };
        assert!(!run(cost(0.01), &t, &r, &[]).await.passed);
        assert!(run(cost(0.05), &t, &r, &[]).await.passed);
        let latency = |max| EvaluatorConfig::LatencyBudget { id: None, max_seconds: max };
        assert!(run(latency(2.0), &t, &r, &[]).await.passed);
        assert!(!run(latency(1.0), &t, &r, &[]).await.passed);
        let steps = |max| EvaluatorConfig::MaxSteps { id: None, max_steps: max };
        assert!(!run(steps(3), &t, &r, &[]).await.passed);
        assert!(run(steps(4), &t, &r, &[]).await.passed);
        let no_error = EvaluatorConfig::NoError { id: None };
        assert!(run(no_error.clone(), &t, &r, &[]).await.passed);
        let mut bad = r.clone();
        bad.terminated_by = TerminatedBy::LimitTime;
        assert!(!run(no_error, &t, &bad, &[]).await.passed);
    }

    #[tokio::test]
    async fn json_schema_lists_every_violation() {
        let schema = json!({"type": "object", "required": ["city", "population"], "properties": {
            "city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}}});
        let mk = |pointer: Option<&str>| EvaluatorConfig::JsonSchema {
            id: None,
            schema: Some(schema.clone()),
            schema_file: None,
            pointer: pointer.map(str::to_string),
        };
        let t = task(None);
        let mut r = result(None);
        r.final_answer = Some(json!({"city": "Paris", "population": 2100000}));
        assert!(run(mk(None), &t, &r, &[]).await.passed);
        // A string holding JSON is parsed; every violation is named with its place.
        r.final_answer = Some(json!("{\"city\": 7, \"population\": -1}"));
        let s = run(mk(None), &t, &r, &[]).await;
        assert!(!s.passed);
        assert!(
            s.reason.starts_with("2 violations") && s.reason.contains("/city") && s.reason.contains("/population"),
            "{}",
            s.reason
        );
        r.final_answer = Some(json!({"data": {"city": "Rome", "population": 1}}));
        assert!(run(mk(Some("/data")), &t, &r, &[]).await.passed);
        assert!(!run(mk(Some("/nothing")), &t, &r, &[]).await.passed);
    }

    #[tokio::test]
    async fn policy_cites_the_steps_that_broke_it() {
        let run_id = RunId::new();
        let ev = |step: u32, tool: &str, args: serde_json::Value| TraceEvent {
            run_id,
            task_id: "t".parse().unwrap(),
            step,
            attempt: 0,
            timestamp: chrono::Utc::now(),
            kind: EventKind::AgentToolCall,
            payload: json!({"tool": tool, "args": args}),
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
        };
        let tr = vec![
            ev(0, "search", json!({"q": "x"})),
            ev(1, "shell", json!({"cmd": "rm -rf /"})),
            ev(2, "calc", json!({})),
        ];
        let mk = |action| EvaluatorConfig::Policy {
            id: None,
            max_cost_usd: Some(1.0),
            max_steps: None,
            allow_tools: vec!["search".into(), "calc".into(), "shell".into()],
            deny_tools: vec![],
            forbidden_patterns: vec!["rm -rf".into()],
            on_violation: action,
        };
        let t = task(None);
        let r = result(Some("x"));
        let s = run(mk(None), &t, &r, &tr).await;
        assert!(!s.passed && s.reason.starts_with("fail:") && s.citations == vec![1], "{s:?}");
        let s = run(mk(Some(PolicyAction::Warn)), &t, &r, &tr).await;
        assert!(s.passed && s.score == 0.5 && s.reason.starts_with("warn:"), "{s:?}");
        let deny = EvaluatorConfig::Policy {
            id: None,
            max_cost_usd: Some(0.01),
            max_steps: Some(2),
            allow_tools: vec![],
            deny_tools: vec!["calc".into()],
            forbidden_patterns: vec![],
            on_violation: None,
        };
        let s = run(deny, &t, &r, &tr).await;
        assert_eq!(s.citations, vec![2, 2, 2], "{s:?}");
        assert!(
            s.reason.contains("denied tool `calc`") && s.reason.contains("4 steps") && s.reason.contains("cost"),
            "{s:?}"
        );
        let clean = EvaluatorConfig::Policy {
            id: None,
            max_cost_usd: None,
            max_steps: None,
            allow_tools: vec![],
            deny_tools: vec![],
            forbidden_patterns: vec![],
            on_violation: None,
        };
        assert!(run(clean, &t, &r, &tr).await.passed);
    }

    #[tokio::test]
    async fn a_command_scores_and_its_failures_are_evaluator_errors() {
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            p.display().to_string()
        };
        let good = script(
            "good.py",
            "import json, sys\nd = json.load(sys.stdin)\nok = d['result']['final_answer'] == 'x'\nprint(json.dumps({'score': 1.0 if ok else 0.0, 'passed': ok, 'reason': 'graded ' + d['task']['id']}))\n",
        );
        let garbage = script("garbage.py", "print('not json')\n");
        let crash = script("crash.py", "import sys\nsys.stderr.write('boom')\nsys.exit(3)\n");
        let slow = script("slow.py", "import time\ntime.sleep(30)\n");
        let mk = |path: &str, timeout: Option<f64>| EvaluatorConfig::Command {
            id: None,
            command: vec!["python3".into(), path.into()],
            timeout_seconds: timeout,
            workdir: None,
        };
        let (t, r) = (task(None), result(Some("x")));
        let s = run(mk(&good, None), &t, &r, &[]).await;
        assert!(s.passed && s.score == 1.0 && s.reason == "graded t" && s.error.is_none(), "{s:?}");
        for (path, want) in [(&garbage, "printed no verdict"), (&crash, "boom")] {
            let s = run(mk(path, None), &t, &r, &[]).await;
            assert!(!s.passed && s.error.as_deref().unwrap_or("").contains(want), "{s:?}");
        }
        let started = std::time::Instant::now();
        let s = run(mk(&slow, Some(0.5)), &t, &r, &[]).await;
        assert!(s.error.as_deref().unwrap_or("").contains("did not answer within"), "{s:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[tokio::test]
    async fn tool_sequences() {
        let t = task(None);
        let r = result(Some("x"));
        let tr = trace(&["search", "open", "calc"]);
        let mk = |mode, tools: &[&str]| EvaluatorConfig::ToolSequence {
            id: None,
            mode: Some(mode),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            forbidden: vec![],
        };
        assert!(run(mk(SequenceMode::Strict, &["search", "open", "calc"]), &t, &r, &tr).await.passed);
        assert!(!run(mk(SequenceMode::Strict, &["search", "calc"]), &t, &r, &tr).await.passed);
        assert!(run(mk(SequenceMode::Ordered, &["search", "calc"]), &t, &r, &tr).await.passed);
        assert!(!run(mk(SequenceMode::Ordered, &["calc", "search"]), &t, &r, &tr).await.passed);
        assert!(run(mk(SequenceMode::Subset, &["calc", "search"]), &t, &r, &tr).await.passed);
        let forbid =
            EvaluatorConfig::ToolSequence { id: None, mode: None, tools: vec![], forbidden: vec!["open".into()] };
        let s = run(forbid, &t, &r, &tr).await;
        assert!(!s.passed);
        assert_eq!(s.citations, vec![1]);
    }
}
