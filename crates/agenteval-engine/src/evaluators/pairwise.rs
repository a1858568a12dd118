//! `llm_pairwise`: this run's answer to a task against the baseline run's answer to the same
//! task, read from the baseline's bundle, judged by `agenteval-llm`'s pairwise judge in both
//! orders.

use std::sync::Arc;

use agenteval_core::layout;
use agenteval_core::model::{EvaluatorScore, TaskResult, answer_text};
use agenteval_core::traits::{BundleStore, EvalInput, Evaluator};
use agenteval_core::{Error, ErrorKind, Result, RunId, TaskId};
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
        let base: TaskId = task.base().parse()?;
        for id in [task, &base] {
            match self.baseline.store.get(&self.baseline.run, &layout::task_file(id, layout::TASK_RESULT)).await {
                Ok(bytes) => {
                    let r: TaskResult = serde_json::from_slice(&bytes).map_err(|e| {
                        Error::corrupt(format!("the baseline run {}'s result of task {id}: {e}", self.baseline.run))
                    })?;
                    return Ok(r.agent.final_answer.as_ref().map(answer_text).unwrap_or_default());
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Err(Error::not_found(format!("the baseline run {} has no result for task {task}", self.baseline.run)))
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
