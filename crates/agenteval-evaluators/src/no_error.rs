//! `no_error`: the agent completed without an error or a limit, and none of its tool calls
//! failed.

use agenteval_core::Result;
use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, final_step, verdict};

#[derive(Debug)]
pub(super) struct NoError;

impl Judge for NoError {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let r = input.result;
        if r.terminated_by != TerminatedBy::Completed || r.error.is_some() {
            let reason = format!("{}: {}", r.terminated_by.as_str(), r.error.as_deref().unwrap_or("no detail"));
            return Ok(verdict(false, reason, final_step(input)));
        }
        // A tool call that failed is an error too, though the agent went on.
        let failed: Vec<&agenteval_core::model::TraceEvent> = input
            .trace
            .iter()
            .filter(|e| {
                e.kind == EventKind::AgentToolResult
                    && e.payload.get("is_error") == Some(&serde_json::Value::Bool(true))
            })
            .collect();
        if let Some(first) = failed.first() {
            let tool = first.payload.get("tool").and_then(serde_json::Value::as_str).unwrap_or("a tool");
            let reason = format!("{} failed tool call(s), the first `{tool}` at step {}", failed.len(), first.step);
            return Ok(verdict(false, reason, failed.iter().map(|e| e.step).collect()));
        }
        Ok(verdict(true, "completed without error".into(), final_step(input)))
    }
}
