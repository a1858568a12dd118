//! `cost_budget`: the task cost at most this many US dollars.

use agenteval_core::Result;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, verdict};

#[derive(Debug)]
pub(super) struct CostBudget {
    pub max_cost_usd: f64,
}

impl Judge for CostBudget {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let (cost, max) = (input.result.total_cost_usd, self.max_cost_usd);
        Ok(verdict(cost <= max, format!("cost ${cost:.6} (budget ${max:.6})"), vec![]))
    }
}
