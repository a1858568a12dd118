//! The `oracle` agent: answers each task's expected answer (HumanEval's canonical solution), at
//! no cost. It tests the pipeline and the grader, not a model.

use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::{AgentContext, AgentEvent, AgentOutcome, AgentRunner, EventSink};
use async_trait::async_trait;
use serde_json::json;

#[derive(Debug, Clone, Default)]
pub struct OracleAgent;

#[async_trait]
impl AgentRunner for OracleAgent {
    fn name(&self) -> &str {
        "oracle"
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        let Some(answer) = ctx.task.expected.clone() else {
            return AgentOutcome {
                final_answer: None,
                error: Some((TerminatedBy::AgentError, format!("task {} has no expected answer", ctx.task.id))),
            };
        };
        for ev in [
            AgentEvent::new(EventKind::AgentFinalAnswer, json!({"answer": answer})),
            AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": answer})),
        ] {
            if let Err(stop) = sink.emit(ev).await {
                return AgentOutcome { final_answer: None, error: Some((stop.terminated_by, stop.reason)) };
            }
        }
        AgentOutcome { final_answer: Some(answer), error: None }
    }
}
