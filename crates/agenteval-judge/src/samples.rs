//! A task's sample, as the views put it side by side: what it was asked (input), what was
//! expected, what the agent answered, and each score with its reason; read from `tasks.jsonl`
//! and the task's `result.json`, each value cut to a size a page can hold.

use std::collections::{BTreeMap, BTreeSet};

use agenteval_core::layout;
use agenteval_core::model::{TaskResult, TaskSpec};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Result, RunId, TaskId, taskpack};
use futures::StreamExt;
use serde::Serialize;

/// Characters of each value a report embeds; past it the value is cut, saying how much is left
/// (the bundle has all of it).
pub const REPORT_VALUE_CHARS: usize = 8_000;
/// The same for a UI task page, which shows one task.
pub const PAGE_VALUE_CHARS: usize = 200_000;
/// The largest `result.json` a sample is read from (the worker cuts an answer to 64 KiB).
const MAX_RESULT_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// `None` when `tasks.jsonl` has no line for the task.
    pub input: Option<String>,
    pub expected: Option<String>,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub scores: Vec<SampleScore>,
    /// What the agent changed in its environment (`artifacts/patch.diff`), when it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SampleScore {
    pub evaluator: String,
    pub kind: String,
    pub score: f64,
    pub passed: bool,
    /// The reason, or the evaluator's own error when it failed.
    pub reason: String,
    pub error: bool,
}

/// A value as a person reads it: a string as itself, anything else as indented JSON, cut to
/// `cap` characters.
pub fn shown(v: &serde_json::Value, cap: usize) -> String {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        v => serde_json::to_string_pretty(v).unwrap_or_default(),
    };
    cut(text, cap)
}

fn cut(text: String, cap: usize) -> String {
    let n = text.chars().count();
    if n <= cap {
        return text;
    }
    let mut out: String = text.chars().take(cap).collect();
    out.push_str(&format!("\n… ({} more characters in the bundle)", n - cap));
    out
}

impl Sample {
    /// Adds what the task asked and expected, for a sample made before its spec was read.
    pub fn with_spec(mut self, spec: &TaskSpec, cap: usize) -> Self {
        self.input = Some(shown(&spec.input, cap));
        self.expected = spec.expected.as_ref().map(|e| shown(e, cap));
        self
    }

    pub fn of(spec: Option<&TaskSpec>, result: &TaskResult, cap: usize) -> Self {
        Sample {
            input: spec.map(|s| shown(&s.input, cap)),
            expected: spec.and_then(|s| s.expected.as_ref()).map(|e| shown(e, cap)),
            answer: result.agent.final_answer.as_ref().map(|a| shown(a, cap)),
            error: result.agent.error.clone().map(|e| cut(e, cap)),
            scores: result
                .scores
                .iter()
                .map(|s| SampleScore {
                    evaluator: s.evaluator_id.clone(),
                    kind: s.kind.clone(),
                    score: s.score,
                    passed: s.passed && s.error.is_none(),
                    reason: cut(s.error.clone().unwrap_or_else(|| s.reason.clone()), cap),
                    error: s.error.is_some(),
                })
                .collect(),
            patch: None,
        }
    }
}

/// A task's patch (`artifacts/patch.diff` of its pack or folder), its first `cap` characters; `None` when
/// the task had no environment or changed nothing.
pub async fn patch(store: &dyn BundleStore, run: &RunId, task: &str, cap: usize) -> Option<String> {
    let id = task.parse().ok()?;
    let bytes =
        taskpack::read_task_file_capped(store, run, &id, "artifacts/patch.diff", (cap as u64).saturating_mul(4))
            .await
            .ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (!text.trim().is_empty()).then(|| cut(text, cap))
}

#[derive(serde::Deserialize)]
struct IdOnly {
    id: TaskId,
}

/// The specs of `wanted` tasks, from `tasks.jsonl` read a piece at a time: only their lines are
/// parsed whole, so a run of 100,000 tasks costs one pass over the file and a few specs.
pub async fn specs(store: &dyn BundleStore, run: &RunId, wanted: &BTreeSet<String>) -> BTreeMap<String, TaskSpec> {
    let mut found = BTreeMap::new();
    if wanted.is_empty() {
        return found;
    }
    let _ = agenteval_core::lines::each_line(store, run, layout::TASKS, &mut |_, l| {
        if let Ok(IdOnly { id }) = serde_json::from_slice::<IdOnly>(l)
            && wanted.contains(id.as_str())
            && let Ok(spec) = serde_json::from_slice::<TaskSpec>(l)
        {
            found.insert(id.to_string(), spec);
        }
        Ok(())
    })
    .await;
    found
}

/// One task's result, read with a cap (a hostile bundle's `result.json` may be gigabytes).
pub async fn result(store: &dyn BundleStore, run: &RunId, task: &str) -> Result<Option<TaskResult>> {
    let Ok(id) = task.parse() else { return Ok(None) };
    match taskpack::read_task_file_capped(store, run, &id, layout::TASK_RESULT, MAX_RESULT_BYTES + 1).await {
        Ok(b) if b.len() as u64 > MAX_RESULT_BYTES => Ok(None),
        Ok(b) => Ok(serde_json::from_slice(&b).ok()),
        Err(e) if e.kind() == agenteval_core::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The samples of `tasks` for a report: each value cut to `REPORT_VALUE_CHARS`. A task whose
/// result cannot be read has none (a report never fails for a sample).
pub async fn load(store: &dyn BundleStore, run: &RunId, tasks: &[String]) -> BTreeMap<String, Sample> {
    let wanted: BTreeSet<String> = tasks.iter().cloned().collect();
    let specs = specs(store, run, &wanted).await;
    let results: Vec<(String, Option<TaskResult>, Option<String>)> = futures::stream::iter(tasks.iter().cloned())
        .map(|t| async move {
            let r = result(store, run, &t).await.ok().flatten();
            let p = patch(store, run, &t, REPORT_VALUE_CHARS).await;
            (t, r, p)
        })
        .buffered(16)
        .collect()
        .await;
    results
        .into_iter()
        .filter_map(|(t, r, p)| {
            let r = r?;
            let sample = Sample { patch: p, ..Sample::of(specs.get(&t), &r, REPORT_VALUE_CHARS) };
            Some((t, sample))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_shown_as_text_and_long_ones_say_what_was_cut() {
        assert_eq!(shown(&serde_json::json!("plain"), 10), "plain");
        assert_eq!(shown(&serde_json::json!({"a": 1}), 100), "{\n  \"a\": 1\n}");
        let long = shown(&serde_json::json!("x".repeat(25)), 10);
        assert_eq!(long, format!("{}\n… (15 more characters in the bundle)", "x".repeat(10)));
    }
}
