//! How a cost that may be unknown is written: `null`, never a number that reads as $0.
//!
//! A model without a price, or an agent whose calls did not go through the gateway, leaves a
//! task's cost unknown. Inside agenteval such a cost is the priced part (often 0) beside a flag
//! (`cost_unknown`); a reader of a JSON document must not have to know that pairing, so every
//! document writes the cost itself as `null` when the flag is set. Their `Serialize` impls are
//! the derived ones but for that one field (beside their types, in `model.rs` and `format.rs`); reading accepts both `null` (as 0, flagged by its
//! sibling) and the numbers older bundles wrote.

use serde::{Deserialize, Deserializer};

/// Reads a cost written as a number or as `null` (unknown, flagged beside it): `null` is 0.
pub fn number_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(0.0))
}

/// The cost as written: `None` (`null`) when unknown.
pub fn written(cost: f64, unknown: bool) -> Option<f64> {
    (!unknown).then_some(cost)
}

/// A cost for people: dollars to four places, or `unknown`.
pub fn text(cost: f64, unknown: bool) -> String {
    if unknown { "unknown".into() } else { format!("${cost:.4}") }
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use crate::model::{AgentResult, TaskCounts};

    #[test]
    fn an_unknown_cost_is_written_null_and_reads_back_flagged_and_a_known_one_round_trips() {
        let mut r = AgentResult::infra_failure("x".into());
        r.total_cost_usd = 0.25;
        let known = serde_json::to_value(&r).unwrap();
        assert_eq!(known["total_cost_usd"], 0.25);
        assert_eq!(serde_json::from_value::<AgentResult>(known).unwrap(), r);

        r.cost_unknown = true;
        let unknown = serde_json::to_value(&r).unwrap();
        assert_eq!(unknown["total_cost_usd"], serde_json::Value::Null, "{unknown}");
        let back: AgentResult = serde_json::from_value(unknown).unwrap();
        assert!(back.cost_unknown && back.total_cost_usd == 0.0, "{back:?}");

        // What older bundles wrote: the priced part beside the flag.
        let mut old = serde_json::to_value(&r).unwrap();
        old["total_cost_usd"] = serde_json::json!(0.0);
        assert!(serde_json::from_value::<AgentResult>(old).unwrap().cost_unknown);
    }

    #[test]
    fn counts_with_an_unknown_task_write_null_and_read_back_unknown() {
        let c = TaskCounts { completed: 2, cost_usd: 0.5, cost_unknown: 1, ..Default::default() };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["cost_usd"], serde_json::Value::Null, "{v}");
        assert_eq!(v["cost_unknown"], 1);
        let back: TaskCounts = serde_json::from_value(v).unwrap();
        assert_eq!((back.cost_unknown, back.completed), (1, 2));
        let known = TaskCounts { completed: 2, cost_usd: 0.5, ..Default::default() };
        let v = serde_json::to_value(&known).unwrap();
        assert!(v["cost_usd"] == 0.5 && v.get("cost_unknown").is_none(), "{v}");
    }
}
