//! The `predictions` agent: hands over a patch made elsewhere (a SWE-bench predictions file, read
//! into the config when it loads) as the task's answer, so given patches are graded on the
//! fleet without running an agent. Its tasks get no environment: nothing acts.

use std::collections::BTreeMap;

use agenteval_core::config::PredictedPatch;
use agenteval_core::model::EventKind;
use agenteval_core::traits::{AgentContext, AgentEvent, AgentNeeds, AgentOutcome, AgentRunner, EventSink};
use async_trait::async_trait;
use serde_json::json;

#[derive(Debug, Clone, Default)]
pub struct PredictionsAgent {
    pub predictions: BTreeMap<String, PredictedPatch>,
}

/// The answer a prediction gives: its patch (`null` for none) and the model that made it, the
/// shape the `swebench` benchmark reads.
pub fn answer(p: Option<&PredictedPatch>) -> serde_json::Value {
    match p {
        Some(p) => json!({"model_patch": p.model_patch, "model_name_or_path": p.model_name_or_path}),
        None => json!({"model_patch": null, "model_name_or_path": null, "no_prediction": true}),
    }
}

#[async_trait]
impl AgentRunner for PredictionsAgent {
    fn name(&self) -> &str {
        "predictions"
    }

    fn needs(&self) -> AgentNeeds {
        AgentNeeds { acts_elsewhere: true, ..AgentNeeds::default() }
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        // A repetition grades the same prediction again.
        let answer = answer(self.predictions.get(ctx.task.id.base()));
        if let Err(stop) =
            sink.emit(AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": answer.clone()}))).await
        {
            return AgentOutcome::stopped(stop.terminated_by, stop.reason);
        }
        AgentOutcome::answer(answer)
    }
}

/// Reads a `predictions` agent's file into its config (so the patches travel inside the run);
/// the benchmark then refuses instances its dataset lacks (`AgentConfig::answered_tasks`).
pub fn at_load(config: &mut agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    use agenteval_core::config::AgentConfig;
    let AgentConfig::Predictions { path, predictions, .. } = &mut config.agent else { return vec![] };
    if !predictions.is_empty() || !path.is_file() {
        return vec![];
    }
    let read =
        agenteval_benchmarks::read_data_file(path, agenteval_core::config::DEFAULT_DATA_FILE_BYTES, "max_file_bytes")
            .and_then(|bytes| agenteval_swebench::read_predictions(path, &bytes));
    let read = match read {
        Ok(r) => r,
        Err(e) => return vec![("/agent/path".into(), e.to_string())],
    };
    *predictions = read
        .into_values()
        .map(|p| {
            (p.instance_id, PredictedPatch { model_name_or_path: p.model_name_or_path, model_patch: p.model_patch })
        })
        .collect();
    vec![]
}
