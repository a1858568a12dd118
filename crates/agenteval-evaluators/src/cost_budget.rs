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
        // An unknown cost is never $0: within the budget cannot be shown, so it is not a pass.
        if input.result.cost_unknown && cost <= max {
            return Ok(verdict(
                false,
                format!("cost unknown (a call had no price; ${cost:.6} known): not shown within the budget ${max:.6}"),
                vec![],
            ));
        }
        Ok(verdict(cost <= max, format!("cost ${cost:.6} (budget ${max:.6})"), vec![]))
    }
}
