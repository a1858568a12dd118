//! `regex`: the final answer matches a regular expression (compiled once, when built).

use agenteval_core::Result;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, final_step, verdict};
use agenteval_core::model::answer_text;

#[derive(Debug)]
pub(super) struct Regex {
    re: regex::Regex,
}

impl Regex {
    /// Fails on a pattern the loader would have refused.
    pub(super) fn build(pattern: &str) -> std::result::Result<Regex, String> {
        Ok(Regex { re: regex::Regex::new(pattern).map_err(|e| format!("invalid regex: {e}"))? })
    }
}

impl Judge for Regex {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        Ok(match input.result.final_answer.as_ref().map(answer_text) {
            None => verdict(false, "no final answer".into(), vec![]),
            Some(a) => {
                let ok = self.re.is_match(&a);
                let how = if ok { "matches" } else { "does not match" };
                verdict(ok, format!("{how} /{}/", self.re.as_str()), final_step(input))
            }
        })
    }
}
