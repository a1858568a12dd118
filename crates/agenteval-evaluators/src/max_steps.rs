//! `max_steps`: at most this many trace events.

use agenteval_core::Result;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, verdict};

#[derive(Debug)]
pub(super) struct MaxSteps {
    pub max: u32,
}

impl Judge for MaxSteps {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let (steps, max) = (input.result.steps, self.max);
        let ok = steps <= max;
        Ok(verdict(ok, format!("{steps} steps (max {max})"), if ok { vec![] } else { vec![max] }))
    }
}
