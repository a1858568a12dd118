//! How a verifier's rewards become a verdict: Harbor's rules and agenteval's stricter reading,
//! shared by the `tests` evaluator, tasks told in steps and Harbor jobs read back.

use std::collections::BTreeMap;

use crate::model::TerminatedBy;

/// The score rewards make (in [0, 1] unclamped) and whether they pass: `reward` when it is
/// there, else every named reward whole (Harbor's rules) or their mean whole (strict).
pub fn rewards_pass(rewards: &BTreeMap<String, f64>, harbor: bool) -> (f64, bool) {
    match (harbor, rewards.get("reward").copied()) {
        (_, Some(r)) => (r, r >= 1.0 - 1e-9),
        (true, None) => {
            let mean = rewards.values().sum::<f64>() / rewards.len().max(1) as f64;
            (mean, !rewards.is_empty() && rewards.values().all(|v| *v >= 1.0 - 1e-9))
        }
        (false, None) => {
            // agenteval's strict reading: the mean of the named rewards.
            let mean = rewards.values().sum::<f64>() / rewards.len().max(1) as f64;
            (mean, mean >= 1.0 - 1e-9)
        }
    }
}

/// Under Harbor's rules, whether an agent that ended this way is still graded by its reward
/// (`Some(true)`: a timeout or an error is graded as Harbor grades it), graded but left out of
/// the mean (`Some(false)`: a spent budget), or not for the rewards to say (`None`).
pub fn harbor_graded(t: TerminatedBy) -> Option<bool> {
    match t {
        TerminatedBy::Completed
        | TerminatedBy::LimitTime
        | TerminatedBy::AgentError
        | TerminatedBy::LimitTokens
        | TerminatedBy::LimitTurns => Some(true),
        TerminatedBy::LimitCost => Some(false),
        _ => None,
    }
}
