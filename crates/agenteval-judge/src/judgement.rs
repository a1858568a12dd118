//! A judged run's recorded judgement (`comparison.json` in its bundle): the comparison with its
//! baseline (none when it was judged alone), the verdict of its gates and the outcome the index
//! records. Written once when a run is judged, read by every view that says whether it passed.

use std::fmt::Write;

use agenteval_core::RunId;
use agenteval_core::layout;
use agenteval_core::model::RunVerdict;
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

use crate::compare::{COMPARISON_SCHEMA, Comparison, Side};
use crate::gates::Verdict;
use crate::report::md_escape;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Judgement {
    pub schema_version: String,
    /// `None` when there was no baseline and the gates judged the run alone.
    pub comparison: Option<Comparison>,
    pub verdict: Verdict,
    /// Absent from documents written before outcomes: then the gates' verdict says it.
    #[serde(default)]
    pub outcome: Option<RunVerdict>,
}

impl Judgement {
    pub fn new(comparison: Option<Comparison>, verdict: Verdict, outcome: RunVerdict) -> Self {
        Judgement { schema_version: COMPARISON_SCHEMA.into(), comparison, verdict, outcome: Some(outcome) }
    }

    /// The run's bundle's judgement; `None` when the run was never judged.
    pub async fn read(store: &dyn BundleStore, run: &RunId) -> Result<Option<Self>> {
        match store.get(run, layout::COMPARISON).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::invalid(format!("{}: not a judgement: {e}", layout::COMPARISON))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn outcome(&self) -> RunVerdict {
        self.outcome.unwrap_or(if self.verdict.passed { RunVerdict::Pass } else { RunVerdict::Fail })
    }

    /// The run it was compared with, if any.
    pub fn baseline(&self) -> Option<&Side> {
        self.comparison.as_ref().map(|c| &c.base)
    }

    /// Markdown for the end of a run's report: the outcome and baseline, the gates, and with a
    /// baseline the comparison's metrics and changed tasks.
    pub fn md(&self) -> String {
        let mut o = String::new();
        let outcome = self.outcome();
        let mark = match outcome {
            RunVerdict::Pass => "✅",
            RunVerdict::Inconclusive => "❔",
            _ => "❌",
        };
        let _ = write!(o, "\n## Verdict: {mark} {}\n\n", outcome.as_str());
        match self.baseline() {
            Some(b) => {
                let _ = writeln!(o, "Judged against baseline `{}` ({}).\n", b.run_id, md_escape(&b.name));
            }
            None => {
                let _ = writeln!(o, "No baseline: the gates judged this run alone.\n");
            }
        }
        match &self.comparison {
            Some(c) => o.push_str(&crate::report::md_body(c, Some(&self.verdict))),
            None => o.push_str(&crate::report::md_gates(&self.verdict)),
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::GateResult;

    fn verdict(passed: bool) -> Verdict {
        Verdict {
            passed,
            baseline: false,
            gates: vec![GateResult {
                gate: "pass_rate.min".into(),
                limit: 0.9,
                value: Some(0.5),
                passed,
                detail: "0.5 against 0.9".into(),
                decision: None,
            }],
            decision: None,
        }
    }

    #[test]
    fn a_document_without_an_outcome_takes_the_gates_word() {
        let doc = serde_json::json!({"schema_version": "1", "comparison": null, "verdict": verdict(false)});
        let j: Judgement = serde_json::from_value(doc).unwrap();
        assert_eq!(j.outcome(), RunVerdict::Fail);
        assert!(j.baseline().is_none());
    }

    #[test]
    fn an_infra_outcome_stays_infra_whatever_the_gates_say() {
        let j = Judgement::new(None, verdict(true), RunVerdict::Infra);
        let back: Judgement = serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
        assert_eq!(back.outcome(), RunVerdict::Infra);
        let md = back.md();
        assert!(md.contains("## Verdict: ❌ infra"), "{md}");
        assert!(md.contains("judged this run alone"), "{md}");
        assert!(md.contains(r"| pass\_rate.min | 0.9 | ✅"), "{md}");
    }
}
