//! `tool_sequence`: the agent called the expected tools (strictly, in order, or as a subset) and
//! none of the forbidden ones.

use agenteval_core::Result;
use agenteval_core::config::SequenceMode;
use agenteval_core::traits::EvalInput;

use super::{Judge, Judgement, tool_calls, verdict};

#[derive(Debug)]
pub(super) struct ToolSequence {
    pub tools: Vec<String>,
    pub mode: SequenceMode,
    pub forbidden: Vec<String>,
}

impl Judge for ToolSequence {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let calls = tool_calls(input);
        if let Some((step, name)) = calls.iter().find(|(_, n)| self.forbidden.contains(n)) {
            return Ok(verdict(false, format!("forbidden tool `{name}` called"), vec![*step]));
        }
        let names: Vec<&str> = calls.iter().map(|(_, n)| n.as_str()).collect();
        let want: Vec<&str> = self.tools.iter().map(String::as_str).collect();
        let ok = match self.mode {
            SequenceMode::Strict => names == want,
            SequenceMode::Ordered => {
                let mut it = names.iter();
                want.iter().all(|w| it.any(|n| n == w))
            }
            SequenceMode::Subset => want.iter().all(|w| names.contains(w)),
        };
        let mode = match self.mode {
            SequenceMode::Strict => "strict",
            SequenceMode::Ordered => "ordered",
            SequenceMode::Subset => "subset",
        };
        let reason = format!("{mode} match of {want:?} against calls {names:?}: {}", if ok { "ok" } else { "no" });
        Ok(verdict(ok, reason, calls.iter().map(|(s, _)| *s).collect()))
    }
}
