//! `no_error`: the agent completed without an error or a limit.

use agenteval_core::Result;
use agenteval_core::model::TerminatedBy;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, final_step, verdict};

#[derive(Debug)]
pub(super) struct NoError;

impl Judge for NoError {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let r = input.result;
        let ok = r.terminated_by == TerminatedBy::Completed && r.error.is_none();
        let reason = if ok {
            "completed without error".into()
        } else {
            format!("{}: {}", r.terminated_by.as_str(), r.error.as_deref().unwrap_or("no detail"))
        };
        Ok(verdict(ok, reason, final_step(input)))
    }
}
