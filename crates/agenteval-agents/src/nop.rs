//! The `nop` agent: does nothing and answers nothing. What a task's tests give an agent that did
//! no work, so a task whose tests pass anyway is found (they are trivially true).

use agenteval_core::model::EventKind;
use agenteval_core::traits::{AgentContext, AgentEvent, AgentOutcome, AgentRunner, EventSink};
use async_trait::async_trait;
use serde_json::json;

#[derive(Debug, Clone, Default)]
pub struct NopAgent;

#[async_trait]
impl AgentRunner for NopAgent {
    fn name(&self) -> &str {
        "nop"
    }

    async fn run(&self, _ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": null}))).await {
            return AgentOutcome::stopped(stop.terminated_by, stop.reason);
        }
        AgentOutcome::default()
    }
}
