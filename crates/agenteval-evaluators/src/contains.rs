//! `contains`: the final answer contains a substring (the evaluator's, else the task's expected).

use agenteval_core::traits::EvalInput;
use agenteval_core::{Error, Result};

use super::{Judge, Judgement, final_step, normalize, verdict};
use agenteval_core::model::answer_text;

#[derive(Debug)]
pub(super) struct Contains {
    pub value: Option<String>,
    pub case_sensitive: bool,
}

impl Judge for Contains {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let needle = self
            .value
            .clone()
            .or_else(|| input.task.expected.as_ref().map(answer_text))
            .ok_or_else(|| Error::invalid("contains needs `value` or a task `expected`"))?;
        Ok(match input.result.final_answer.as_ref().map(answer_text) {
            None => verdict(false, "no final answer".into(), vec![]),
            Some(a) => {
                let cs = self.case_sensitive;
                let ok = normalize(&a, cs).contains(&normalize(&needle, cs));
                let reason =
                    if ok { format!("contains {needle:?}") } else { format!("{a:?} does not contain {needle:?}") };
                verdict(ok, reason, final_step(input))
            }
        })
    }
}
