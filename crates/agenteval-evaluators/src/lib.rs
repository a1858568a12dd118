//! agenteval's built-in evaluators, one module per kind (`exact_match`, `contains`, `regex`,
//! `no_error`, `max_steps`, `tool_sequence`, `tool_calls`, `closeness`, `trace_quality`,
//! `cost_budget`, `latency_budget`, `json_schema`, `policy`, `command`) and the LLM judges
//! `llm_rubric`/`llm_pass_fail` (from `agenteval-llm`) and `llm_pairwise` (`pairwise`: against a
//! baseline run's answers), built from their config in one table ([`evaluator_with`]). Each
//! turns a task's result and trace into an `EvaluatorScore`; the kinds' configs and their checks
//! are the variants of the core's `EvaluatorConfig`. `tests` (a task's tests run in its
//! environment) is the engine's: it holds the environments.

mod closeness;
pub mod command;
mod contains;
mod cost_budget;
mod exact_match;
mod json_schema;
mod latency_budget;
mod max_steps;
mod no_error;
pub mod pairwise;
mod policy;
mod regex;
mod tool_calls;
mod tool_sequence;
mod trace_quality;

use std::sync::Arc;

use agenteval_core::config::EvaluatorConfig;
use agenteval_core::model::{EvaluatorScore, EventKind};
use agenteval_core::secret::Secret;
use agenteval_core::traits::{EvalInput, Evaluator};
use agenteval_core::{Error, Result};
use agenteval_llm::{JudgeKind, LlmJudge};
use async_trait::async_trait;

/// The secret a judge's provider key comes from: `(ENV_NAME, secret name)`, when it needs one.
pub fn judge_secret(judge: &agenteval_core::config::JudgeConfig) -> Option<(String, String)> {
    // Bedrock's calls are signed with AWS credentials: no key.
    if judge.bedrock.is_some() {
        return None;
    }
    if let Some(azure) = &judge.azure {
        let var = azure.secrets.keys().next().map_or(agenteval_core::config::AZURE_KEY_VARS[0], String::as_str);
        return Some((var.to_string(), azure.secret()));
    }
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

/// What the worker hands the evaluators it builds for a whole run.
#[derive(Default)]
pub struct Shared {
    /// The baseline bundle an `llm_pairwise` reads (opened by the worker, which has the
    /// resolver).
    pub baseline: Option<pairwise::Baseline>,
    /// Where the judges also keep and find their verdicts: the run's bundle store, shared by
    /// every worker and run under its root.
    pub verdicts: Option<Arc<dyn agenteval_llm::VerdictCache>>,
    /// The Amazon Bedrock client a judge on `bedrock` asks (from the resolver).
    pub host: Option<Arc<dyn agenteval_core::gateway::ModelHost>>,
}

/// Builds an evaluator from its config, with what a run's evaluators share: the one table of
/// kinds. Fails only on configuration the loader would have refused. `secrets` hold the judges'
/// keys, by environment variable name.
pub fn evaluator_with(
    cfg: &EvaluatorConfig,
    secrets: &[(String, Secret)],
    shared: Shared,
) -> Result<Arc<dyn Evaluator>> {
    let Shared { baseline, verdicts, host } = shared;
    let bad = |what: String| Error::invalid(format!("evaluator {}: {what}", cfg.id()));
    use EvaluatorConfig as C;
    let judge: Box<dyn Judge> = match cfg {
        C::ExactMatch { expected, case_sensitive, .. } => Box::new(exact_match::ExactMatch {
            expected: expected.clone(),
            case_sensitive: case_sensitive.unwrap_or(true),
        }),
        C::Contains { value, case_sensitive, .. } => {
            Box::new(contains::Contains { value: value.clone(), case_sensitive: case_sensitive.unwrap_or(true) })
        }
        C::Regex { pattern, .. } => Box::new(regex::Regex::build(pattern).map_err(bad)?),
        C::NoError { .. } => Box::new(no_error::NoError),
        C::Similarity { expected, min, case_sensitive, .. } => Box::new(closeness::Similarity {
            expected: expected.clone(),
            min: min.unwrap_or(0.8),
            case_sensitive: case_sensitive.unwrap_or(true),
        }),
        C::Numeric { expected, abs_tolerance, rel_tolerance, .. } => Box::new(closeness::Numeric {
            expected: expected.clone(),
            abs_tolerance: abs_tolerance.unwrap_or(0.0),
            rel_tolerance: rel_tolerance.unwrap_or(0.0),
        }),
        C::JsonEqual { expected, ignore, .. } => {
            Box::new(closeness::JsonEqual { expected: expected.clone(), ignore: ignore.clone() })
        }
        C::MaxSteps { max_steps, .. } => Box::new(max_steps::MaxSteps { max: *max_steps }),
        C::TraceQuality { max_repeats, max_failed_repeats, contradictions, .. } => {
            Box::new(trace_quality::TraceQuality::of(*max_repeats, *max_failed_repeats, *contradictions))
        }
        C::ToolSequence { tools, mode, forbidden, .. } => Box::new(tool_sequence::ToolSequence {
            tools: tools.clone(),
            mode: mode.unwrap_or_default(),
            forbidden: forbidden.clone(),
        }),
        C::ToolCalls { calls, order, arguments, pass_threshold, .. } => {
            Box::new(tool_calls::ToolCalls::build(calls, *order, *arguments, *pass_threshold).map_err(bad)?)
        }
        C::CostBudget { max_cost_usd, .. } => Box::new(cost_budget::CostBudget { max_cost_usd: *max_cost_usd }),
        C::LatencyBudget { max_seconds, .. } => Box::new(latency_budget::LatencyBudget { max_seconds: *max_seconds }),
        C::JsonSchema { schema: Some(s), pointer, .. } => {
            Box::new(json_schema::JsonSchema::build(s, pointer.clone()).map_err(bad)?)
        }
        C::JsonSchema { schema_file, .. } => {
            return Err(bad(format!(
                "the schema of {} was not loaded (only run configs read schema files)",
                schema_file.as_deref().map(|p| p.display().to_string()).unwrap_or_default()
            )));
        }
        C::Policy { max_cost_usd, max_steps, allow_tools, deny_tools, forbidden_patterns, on_violation, .. } => {
            Box::new(policy::Policy {
                max_cost_usd: *max_cost_usd,
                max_steps: *max_steps,
                allow_tools: allow_tools.clone(),
                deny_tools: deny_tools.clone(),
                patterns: policy::Policy::patterns(forbidden_patterns).map_err(bad)?,
                on_violation: on_violation.unwrap_or_default(),
            })
        }
        C::Command { command, timeout_seconds, workdir, .. } => {
            return Ok(Arc::new(command::CommandEvaluator {
                id: cfg.id().to_string(),
                command: command.clone(),
                workdir: workdir.clone(),
                timeout: timeout_seconds.unwrap_or(command::DEFAULT_TIMEOUT),
            }));
        }
        C::Tests { .. } => {
            return Err(bad("the `tests` evaluator runs in a task's environment: the engine builds it".into()));
        }
        C::LlmRubric { judge, .. } | C::LlmPassFail { judge, .. } => {
            let kind = judge_kind(cfg).expect("a judge's kind");
            return Ok(Arc::new(llm_judge_of(cfg, kind, judge, secrets, verdicts.clone(), host.clone())?));
        }
        C::LlmPairwise { judge, .. } => {
            let baseline = baseline.ok_or_else(|| bad("its baseline run's bundle was not opened".into()))?;
            let kind = judge_kind(cfg).expect("a judge's kind");
            let judge = llm_judge_of(cfg, kind, judge, secrets, verdicts.clone(), host.clone())?;
            return Ok(Arc::new(pairwise::Pairwise { judge, baseline }));
        }
    };
    Ok(Arc::new(Builtin { id: cfg.id().to_string(), kind: cfg.kind(), judge }))
}

/// What an LLM judge evaluator asks its model (its rubric, criteria and pass threshold);
/// `None` for an evaluator that asks none. `compare --pairwise` asks the same.
pub fn judge_kind(cfg: &EvaluatorConfig) -> Option<JudgeKind> {
    use EvaluatorConfig as C;
    match cfg {
        C::LlmRubric { rubric, pass_threshold, .. } => {
            Some(JudgeKind::Rubric { rubric: rubric.clone(), pass_threshold: pass_threshold.unwrap_or(0.5) })
        }
        C::LlmPassFail { criteria, .. } => Some(JudgeKind::PassFail { criteria: criteria.clone() }),
        C::LlmPairwise { criteria, pass_threshold, .. } => {
            Some(JudgeKind::Pairwise { criteria: criteria.clone(), pass_threshold: pass_threshold.unwrap_or(0.5) })
        }
        _ => None,
    }
}

/// An LLM judge (`agenteval-llm`) with its provider key, and where it shares its verdicts.
fn llm_judge_of(
    cfg: &EvaluatorConfig,
    kind: JudgeKind,
    judge: &agenteval_core::config::JudgeConfig,
    secrets: &[(String, Secret)],
    verdicts: Option<Arc<dyn agenteval_llm::VerdictCache>>,
    host: Option<Arc<dyn agenteval_core::gateway::ModelHost>>,
) -> Result<LlmJudge> {
    let key = judge_secret(judge).and_then(|(var, _)| secrets.iter().find(|(v, _)| *v == var).map(|(_, s)| s));
    if judge.bedrock.is_some() && host.is_none() {
        return Err(Error::invalid(format!("evaluator {}: no Amazon Bedrock client was given to its judge", cfg.id())));
    }
    let built = LlmJudge::new(cfg.id().to_string(), kind, judge, key, host)
        .map_err(|e| Error::invalid(format!("evaluator {}: {e}", cfg.id())))?;
    Ok(match verdicts {
        Some(v) => built.with_shared_cache(v),
        None => built,
    })
}

/// The judges' verdicts kept in a bundle store's shared objects (`judge/<sha256>.json`).
pub struct StoreVerdicts(pub Arc<dyn agenteval_core::traits::BundleStore>);

#[async_trait]
impl agenteval_llm::VerdictCache for StoreVerdicts {
    async fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.0.get_shared(&format!("judge/{key}.json")).await.ok()
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) {
        if let Err(e) = self.0.put_shared(&format!("judge/{key}.json"), &bytes).await {
            tracing::warn!("keeping a judge's verdict in the bundle store: {e}");
        }
    }
}

/// What a built-in evaluator decided: score, passed, reason, and the trace steps it cites.
type Judgement = (f64, bool, String, Vec<u32>);

/// The judgement one built-in kind makes, each in its own module.
trait Judge: Send + Sync + std::fmt::Debug {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement>;
}

/// A built-in evaluator: its id and kind, and its kind's judgement.
#[derive(Debug)]
struct Builtin {
    id: String,
    kind: &'static str,
    judge: Box<dyn Judge>,
}

/// A judgement as a score of evaluator `id` of `kind`.
fn score(id: &str, kind: &str, (score, passed, reason, citations): Judgement) -> EvaluatorScore {
    EvaluatorScore {
        optional: false,
        tokens: 0,
        evaluator_id: id.to_string(),
        kind: kind.to_string(),
        score,
        passed,
        reason,
        citations,
        cost_usd: 0.0,
        error: None,
    }
}

#[async_trait]
impl Evaluator for Builtin {
    fn id(&self) -> &str {
        &self.id
    }

    fn kind(&self) -> &str {
        self.kind
    }

    async fn evaluate(&self, input: &EvalInput<'_>) -> Result<EvaluatorScore> {
        Ok(score(&self.id, self.kind, self.judge.judge(input)?))
    }
}

fn verdict(passed: bool, reason: String, citations: Vec<u32>) -> Judgement {
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
    use agenteval_core::config::{PolicyAction, SequenceMode};
    use agenteval_core::model::TerminatedBy;
    use agenteval_core::model::{AgentResult, TaskSpec, TraceEvent};
    use serde_json::json;

    /// A task for the evaluators' tests (`tool_calls`' too).
    pub(super) fn task(expected: Option<&str>) -> TaskSpec {
        TaskSpec {
            id: "t".parse().unwrap(),
            input: json!("q"),
            expected: expected.map(|e| json!(e)),
            tags: vec![],
            evaluators: vec![],
            metadata: serde_json::Value::Null,
            environment: None,
            content: None,
            tests: None,
            solution: None,
            steps: None,
            user: None,
        }
    }

    pub(super) fn result(answer: Option<&str>) -> AgentResult {
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
            fault: None,
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
        let e = evaluator_with(&cfg, &[], Shared::default()).unwrap();
        evaluate_safely(e.as_ref(), &EvalInput { task: t, result: r, trace: tr, env: None }).await
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

    #[tokio::test]
    async fn an_unknown_cost_is_never_within_a_budget_and_a_failed_tool_call_is_an_error() {
        let t = task(None);
        let unknown = AgentResult { cost_unknown: true, total_cost_usd: 0.0, ..result(Some("x")) };
        let budget = EvaluatorConfig::CostBudget { id: None, max_cost_usd: 1.0 };
        let s = run(budget.clone(), &t, &unknown, &[]).await;
        assert!(!s.passed && s.reason.starts_with("cost unknown"), "{s:?}");
        assert!(run(budget, &t, &result(Some("x")), &[]).await.passed, "a known cost within it passes");
        let policy = EvaluatorConfig::Policy {
            id: None,
            max_cost_usd: Some(1.0),
            max_steps: None,
            allow_tools: vec![],
            deny_tools: vec![],
            forbidden_patterns: vec![],
            on_violation: None,
        };
        let s = run(policy, &t, &unknown, &[]).await;
        assert!(!s.passed && s.reason.contains("cost unknown"), "{s:?}");

        let mut tr = trace(&["bash", "bash"]);
        tr[1].kind = EventKind::AgentToolResult;
        tr[1].payload = json!({"tool": "bash", "output": "command not found", "is_error": true});
        let no_error = EvaluatorConfig::NoError { id: None };
        let s = run(no_error.clone(), &t, &result(Some("x")), &tr).await;
        assert!(
            !s.passed && s.reason == "1 failed tool call(s), the first `bash` at step 1" && s.citations == [1],
            "{s:?}"
        );
        tr[1].payload["is_error"] = json!(false);
        assert!(run(no_error, &t, &result(Some("x")), &tr).await.passed);
    }
}
