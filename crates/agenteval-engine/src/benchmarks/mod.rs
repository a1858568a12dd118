//! Built-in benchmarks (`toy`, `jsonl`) and what they share: scratch folders and the grader.

mod jsonl;
mod toy;

use std::sync::Arc;

use agenteval_core::config::{BenchmarkConfig, BenchmarkKind};
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec, TerminatedBy};
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_core::{Error, Result};

pub use jsonl::{JsonlBenchmark, parse_cases};
pub use toy::ToyBenchmark;

/// Builds the benchmark a configuration names.
pub fn benchmark_from_config(cfg: &BenchmarkConfig) -> Result<Arc<dyn BenchmarkAdapter>> {
    Ok(match cfg.kind {
        BenchmarkKind::Toy => Arc::new(ToyBenchmark::new(
            cfg.size.ok_or_else(|| Error::invalid("toy benchmark needs a size"))?,
            cfg.latency_ms.unwrap_or(toy::DEFAULT_LATENCY_MS),
            cfg.slow_ms.unwrap_or(toy::DEFAULT_SLOW_MS),
        )),
        BenchmarkKind::Jsonl => Arc::new(JsonlBenchmark::new(
            cfg.cases.clone().ok_or_else(|| Error::invalid("jsonl benchmark needs a case file"))?,
        )),
    })
}

/// Text of a JSON answer for comparison: strings as they are, anything else as JSON.
pub fn answer_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The shared grader: the agent must complete and its final answer must equal `expected`
/// (trimmed). A task without `expected` passes when the agent completes.
pub(crate) fn grade_expected(task: &TaskSpec, result: &AgentResult) -> EvaluatorScore {
    let mut score = EvaluatorScore {
        evaluator_id: "benchmark".into(),
        kind: "benchmark".into(),
        score: 0.0,
        passed: false,
        reason: String::new(),
        citations: vec![],
        cost_usd: 0.0,
        error: None,
    };
    if result.terminated_by != TerminatedBy::Completed {
        score.reason = format!("agent did not complete: {}", result.terminated_by.as_str());
        return score;
    }
    match (&task.expected, &result.final_answer) {
        (None, _) => {
            score.passed = true;
            score.score = 1.0;
            score.reason = "no expected answer; agent completed".into();
        }
        (Some(_), None) => score.reason = "no final answer".into(),
        (Some(exp), Some(got)) => {
            let (e, g) = (answer_text(exp), answer_text(got));
            score.passed = e.trim() == g.trim();
            score.score = if score.passed { 1.0 } else { 0.0 };
            score.reason = if score.passed {
                "final answer matches expected".into()
            } else {
                format!("expected {e:?}, got {g:?}")
            };
        }
    }
    if result.steps > 0 {
        score.citations = vec![result.steps - 1];
    }
    score
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(term: TerminatedBy, answer: Option<serde_json::Value>) -> AgentResult {
        AgentResult {
            success: term == TerminatedBy::Completed,
            final_answer: answer,
            error: None,
            total_cost_usd: 0.0,
            total_tokens: 0,
            wall_seconds: 0.0,
            terminated_by: term,
            steps: 2,
        }
    }

    #[test]
    fn grading_compares_trimmed_answers() {
        let task = TaskSpec {
            id: "t".parse().unwrap(),
            input: json!("q"),
            expected: Some(json!("42")),
            tags: vec![],
            evaluators: vec![],
            metadata: serde_json::Value::Null,
        };
        assert!(grade_expected(&task, &result(TerminatedBy::Completed, Some(json!(" 42\n")))).passed);
        assert!(grade_expected(&task, &result(TerminatedBy::Completed, Some(json!(42)))).passed);
        assert!(!grade_expected(&task, &result(TerminatedBy::Completed, Some(json!("41")))).passed);
        let err = grade_expected(&task, &result(TerminatedBy::AgentError, Some(json!("42"))));
        assert!(!err.passed && err.reason.contains("agent_error"), "{err:?}");
    }
}
