//! `llm_pairwise`: this run's answer to a task against the baseline run's answer to the same
//! task, read from the baseline's bundle, judged by `agenteval-llm`'s pairwise judge in both
//! orders.

use std::sync::Arc;

use agenteval_core::model::{EvaluatorScore, answer_text};
use agenteval_core::traits::{BundleStore, EvalInput, Evaluator};
use agenteval_core::{Error, Result, RunId, TaskId};
use agenteval_llm::LlmJudge;
use async_trait::async_trait;

/// The baseline's bundle, opened once per worker.
pub struct Baseline {
    pub store: Arc<dyn BundleStore>,
    pub run: RunId,
}

pub struct Pairwise {
    pub judge: LlmJudge,
    pub baseline: Baseline,
}

impl Pairwise {
    /// The baseline's answer to `task` (a repetition falls back to its base task's answer); an
    /// empty answer for a task the baseline's agent did not answer.
    async fn baseline_answer(&self, task: &TaskId) -> Result<String> {
        let (store, run) = (self.baseline.store.as_ref(), &self.baseline.run);
        for id in [task.as_str(), task.base()] {
            // Read with the reports' cap: a bundle's `result.json` may be anything.
            if let Some(r) = agenteval_judge::samples::result(store, run, id).await? {
                return Ok(r.agent.final_answer.as_ref().map(answer_text).unwrap_or_default());
            }
        }
        Err(Error::not_found(format!("the baseline run {run} has no readable result for task {task}")))
    }
}

#[async_trait]
impl Evaluator for Pairwise {
    fn id(&self) -> &str {
        self.judge.id()
    }

    fn kind(&self) -> &str {
        "llm_pairwise"
    }

    async fn evaluate(&self, input: &EvalInput<'_>) -> Result<EvaluatorScore> {
        let baseline = self.baseline_answer(&input.task.id).await?;
        let candidate = input.result.final_answer.as_ref().map(answer_text).unwrap_or_default();
        self.judge.compare_answers(&input.task.input, input.task.expected.as_ref(), &candidate, &baseline).await
    }
}
