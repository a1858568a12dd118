//! `exact_match`: the final answer equals the expected one (trimmed; case-insensitive on request).

use agenteval_core::traits::EvalInput;
use agenteval_core::{Error, Result};

use super::{Judge, Judgement, final_step, normalize, verdict};
use agenteval_core::model::answer_text;

#[derive(Debug)]
pub(super) struct ExactMatch {
    /// The evaluator's own expected answer; else the task's.
    pub expected: Option<serde_json::Value>,
    pub case_sensitive: bool,
}

impl Judge for ExactMatch {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let expected = self
            .expected
            .as_ref()
            .or(input.task.expected.as_ref())
            .ok_or_else(|| Error::invalid("exact_match needs `expected` in the evaluator or the task"))?;
        let exp = answer_text(expected);
        Ok(match input.result.final_answer.as_ref().map(answer_text) {
            None => verdict(false, "no final answer".into(), vec![]),
            Some(a) => {
                let cs = self.case_sensitive;
                let ok = normalize(&a, cs) == normalize(&exp, cs);
                let reason = if ok { "matches".into() } else { format!("expected {exp:?}, got {a:?}") };
                verdict(ok, reason, final_step(input))
            }
        })
    }
}
