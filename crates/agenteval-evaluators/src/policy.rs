//! `policy`: how the agent worked (cost ceiling, tool allow and deny lists, a step limit,
//! patterns that must not appear in tool arguments); a violation fails the task, or warns.

use agenteval_core::Result;
use agenteval_core::config::PolicyAction;
use agenteval_core::model::EventKind;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, tool_calls, verdict};

#[derive(Debug)]
pub(super) struct Policy {
    pub max_cost_usd: Option<f64>,
    pub max_steps: Option<u32>,
    pub allow_tools: Vec<String>,
    pub deny_tools: Vec<String>,
    /// The forbidden patterns, compiled when built.
    pub patterns: Vec<regex::Regex>,
    pub on_violation: PolicyAction,
}

impl Policy {
    /// Compiles the forbidden patterns; fails on one the loader would have refused.
    pub(super) fn patterns(forbidden: &[String]) -> std::result::Result<Vec<regex::Regex>, String> {
        forbidden.iter().map(|p| regex::Regex::new(p).map_err(|e| format!("invalid regex: {e}"))).collect()
    }

    /// Every violation, with the step it happened at, in step order.
    fn violations(&self, input: &EvalInput<'_>) -> Vec<(u32, String)> {
        let mut broken: Vec<(u32, String)> = Vec::new();
        for (step, name) in tool_calls(input) {
            if self.deny_tools.contains(&name) {
                broken.push((step, format!("step {step}: denied tool `{name}`")));
            } else if !self.allow_tools.is_empty() && !self.allow_tools.contains(&name) {
                broken.push((step, format!("step {step}: tool `{name}` is not allowed")));
            }
        }
        for e in input.trace.iter().filter(|e| e.kind == EventKind::AgentToolCall) {
            let args = e.payload.to_string();
            if let Some(p) = self.patterns.iter().find(|p| p.is_match(&args)) {
                broken.push((e.step, format!("step {}: tool arguments match /{}/", e.step, p.as_str())));
            }
        }
        if let Some(max) = self.max_steps
            && input.result.steps > max
        {
            broken.push((max, format!("{} steps (max {max})", input.result.steps)));
        }
        if let Some(max) = self.max_cost_usd {
            let last = input.trace.last().map(|e| e.step).unwrap_or(0);
            let cost = input.result.total_cost_usd;
            if cost > max {
                broken.push((last, format!("cost ${cost:.6} (max ${max:.6})")));
            } else if input.result.cost_unknown {
                // Never counted as $0: an unknown cost is not shown within the ceiling.
                broken.push((last, format!("cost unknown (a call had no price; ${cost:.6} known; max ${max:.6})")));
            }
        }
        broken.sort_by_key(|(s, _)| *s);
        broken
    }
}

impl Judge for Policy {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let broken = self.violations(input);
        let citations: Vec<u32> = broken.iter().map(|(s, _)| *s).collect();
        let why = broken.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>().join("; ");
        Ok(match (broken.is_empty(), self.on_violation) {
            (true, _) => verdict(true, "pass: within policy".into(), vec![]),
            (false, PolicyAction::Warn) => (0.5, true, format!("warn: {why}"), citations),
            (false, PolicyAction::Fail) => (0.0, false, format!("fail: {why}"), citations),
        })
    }
}
