//! `latency_budget`: the task took at most this many seconds.

use agenteval_core::Result;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, verdict};

#[derive(Debug)]
pub(super) struct LatencyBudget {
    pub max_seconds: f64,
}

impl Judge for LatencyBudget {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let (secs, max) = (input.result.wall_seconds, self.max_seconds);
        Ok(verdict(secs <= max, format!("{secs:.3}s (budget {max:.3}s)"), vec![]))
    }
}
