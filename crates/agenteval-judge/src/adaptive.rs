//! Adaptive repetitions: between the rounds of a run judged against a baseline, which tasks get
//! one more attempt and when to stop. A group-sequential design with Bonferroni alpha spending:
//! the run looks at its data once after each round, at most `L = max − min + 1` times; the
//! interim looks share `INTERIM` of the error rate α equally and the last look has the rest,
//! so the chance that any look's interval misses the truth is at most α whatever the run does
//! with what it sees (stop early, repeat some tasks and not others). An interim look decides
//! only what is clear; a run that has nothing left to repeat is judged as the last look would
//! judge it (the looks in between would see the same data at stricter levels).
//!
//! Only tasks whose outcome can still move the answer are repeated: those whose attempts
//! disagree so far, those the base's own repetitions (or earlier nights) saw flip, and, up to
//! three attempts, those whose outcome differs from the base's. A task that passed (or failed) on both sides and never
//! flipped anywhere adds nothing a repetition could change.

use std::collections::{BTreeMap, BTreeSet};

use agenteval_core::Result;
use serde::{Deserialize, Serialize};

use crate::compare::{CompareOptions, Comparison, compare_clustered};
use crate::gates::{DecideBy, Decision, Gates, Verdict, judge};
use crate::results::RunResults;

/// The error rate every adaptive run holds: the chance that its decision is wrong.
pub const ALPHA: f64 = 0.05;

/// The share of α the interim looks spend between them; the last look has the rest.
pub const INTERIM: f64 = 0.05;

/// An adaptive run's design: every task starts with `min` attempts and gets at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Design {
    pub min: u32,
    pub max: u32,
}

impl Design {
    /// How many times the run may look: once after each round, from `min` attempts to `max`.
    pub fn looks(&self) -> u32 {
        self.max.saturating_sub(self.min.max(1)) + 1
    }

    /// The confidence of look `n`'s intervals and noise band (1-based; the last look's for any
    /// `n` at or past it): `1 − α·INTERIM/(L−1)` before the last, `1 − α·(1 − INTERIM)` at it.
    pub fn level(&self, n: u32) -> f64 {
        let looks = self.looks();
        if looks == 1 {
            1.0 - ALPHA
        } else if n < looks {
            1.0 - ALPHA * INTERIM / f64::from(looks - 1)
        } else {
            1.0 - ALPHA * (1.0 - INTERIM)
        }
    }

    /// `opts` at look `n`'s level.
    pub fn options(&self, opts: CompareOptions, n: u32) -> CompareOptions {
        CompareOptions { level: self.level(n), ..opts }
    }
}

/// What a look decides.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Every gate has its answer (GO or NO-GO): no more attempts.
    Decided(Decision),
    /// These tasks (base ids) get one more attempt each.
    Repeat(Vec<String>),
    /// Some gate is still open and no task that could move it has attempts left.
    Undecidable,
}

/// One look: its decision, and the comparison and verdict it was made from.
#[derive(Debug, Clone)]
pub struct Look {
    pub next: Next,
    pub comparison: Comparison,
    pub verdict: Verdict,
}

/// The gates as a look judges them: a drop by its interval, because the point estimate has no
/// "not yet" (it always says GO or NO-GO) and a sequential run must be able to wait.
pub fn sequential(gates: &Gates) -> Gates {
    Gates { decide_by: DecideBy::Interval, promote: gates.promote, ..gates.clone() }
}

/// Attempts and passes of each task (by base id) of a run, infrastructure failures left out
/// (they say nothing of the agent; their retries are the controller's).
pub fn attempts(run: &RunResults) -> BTreeMap<String, (u32, u32)> {
    let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for l in &run.lines {
        if l.terminated_by == agenteval_core::model::TerminatedBy::InfraFailure {
            continue;
        }
        let e = out.entry(l.task_id.base().to_string()).or_default();
        e.0 += 1;
        e.1 += u32::from(l.passed);
    }
    out
}

/// The tasks worth another attempt: those of `cand` below `design.max` attempts whose
/// attempts disagree, that flipped in the base or in `flaky_before` (earlier nights), or whose
/// attempts differ from the base's majority (up to three attempts).
pub fn open_tasks(
    design: &Design,
    base: &RunResults,
    cand: &RunResults,
    flaky_before: &BTreeSet<String>,
) -> Vec<String> {
    let base = attempts(base);
    attempts(cand)
        .into_iter()
        .filter(|(id, (n, passed))| {
            let Some(&(bn, bp)) = base.get(id) else { return false };
            let mixed = |n: u32, p: u32| p > 0 && p < n;
            let majority = |n: u32, p: u32| 2 * p >= n;
            // A task that differs from the base is tried up to three times: three agreeing
            // attempts against a base that never flipped show a steady change, which more
            // attempts would not move.
            let differs = majority(*n, *passed) != majority(bn, bp) && *n < 3;
            *n < design.max && (mixed(*n, *passed) || mixed(bn, bp) || flaky_before.contains(id) || differs)
        })
        .map(|(id, _)| id)
        .collect()
}

/// Look `n` (1-based: after the round that brought open tasks to `min + n − 1` attempts) at
/// `cand` so far against `base`: decided, or the tasks to repeat, or undecidable. `opts` are the
/// comparison's; its level is the look's, whatever `opts` says.
pub fn look(
    design: &Design,
    n: u32,
    gates: &Gates,
    base: &RunResults,
    cand: &RunResults,
    flaky_before: &BTreeSet<String>,
    opts: CompareOptions,
) -> Result<Look> {
    let gates = sequential(gates);
    let judged = |level_of: u32| -> Result<(Comparison, Verdict)> {
        let comparison = compare_clustered(base, cand, design.options(opts, level_of), gates.cluster_by.as_deref())?;
        let lines = &cand.lines;
        let verdict =
            judge(&gates, Some(&comparison), &|metric| crate::compare::run_metric(lines, metric), lines.len() as u64);
        Ok((comparison, verdict))
    };
    let (comparison, verdict) = judged(n)?;
    if verdict.decision() != Decision::Inconclusive {
        return Ok(Look { next: Next::Decided(verdict.decision()), comparison, verdict });
    }
    let open = if n < design.looks() { open_tasks(design, base, cand, flaky_before) } else { Vec::new() };
    if !open.is_empty() {
        return Ok(Look { next: Next::Repeat(open), comparison, verdict });
    }
    // Nothing more will be run: this is the last look, whatever its number.
    let (comparison, verdict) = if n < design.looks() { judged(design.looks())? } else { (comparison, verdict) };
    let next = match verdict.decision() {
        Decision::Inconclusive => Next::Undecidable,
        d => Next::Decided(d),
    };
    Ok(Look { next, comparison, verdict })
}

pub use agenteval_core::model::AdaptiveSpend as Spend;

/// One line: `decided GO after 2 of 5 looks (last at 95.2%): 64 task-attempts, $1.50 against 250
/// for 5 of each task (26%)`.
pub fn spend_line(spend: &Spend, cost_usd: Option<f64>) -> String {
    let share = if spend.fixed_attempts > 0 {
        format!(" ({:.0}%)", 100.0 * spend.attempts as f64 / spend.fixed_attempts as f64)
    } else {
        String::new()
    };
    let cost = cost_usd.map(|c| format!(", ${c:.2}")).unwrap_or_default();
    format!(
        "adaptive repetitions: {} after {} of {} looks (last at {}): {} task-attempts{cost} against {} for {} of each task{share}",
        spend.ended,
        spend.looks,
        Design { min: spend.min, max: spend.max }.looks(),
        crate::gates::level_words(spend.level),
        spend.attempts,
        spend.fixed_attempts,
        spend.max,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::run;
    use agenteval_core::model::TerminatedBy::Completed;

    fn gates() -> Gates {
        crate::gates::load_gates_str("metrics:\n  pass_rate: {max_drop: 0.05}\n", "g.yaml").unwrap()
    }

    /// A run of `tasks` tasks where task `i`'s attempts passed as `outcome(i, rep)` says.
    fn made(name: &str, tasks: usize, reps: impl Fn(usize) -> u32, outcome: impl Fn(usize, u32) -> bool) -> RunResults {
        let mut ids = Vec::new();
        for i in 0..tasks {
            for r in 0..reps(i) {
                let id = format!("t{i:03}").parse::<agenteval_core::TaskId>().unwrap().repetition(r).to_string();
                ids.push((id, outcome(i, r)));
            }
        }
        let leaked: Vec<(&str, bool, _)> =
            ids.iter().map(|(id, p)| (&*Box::leak(id.clone().into_boxed_str()), *p, Completed)).collect();
        run(name, &leaked)
    }

    #[test]
    fn the_levels_spend_alpha_over_the_looks() {
        let d = Design { min: 1, max: 5 };
        assert_eq!(d.looks(), 5);
        let spent: f64 = (1..=5).map(|n| 1.0 - d.level(n)).sum();
        assert!((spent - ALPHA).abs() < 1e-12, "{spent}");
        assert!((d.level(1) - (1.0 - 0.05 * INTERIM / 4.0)).abs() < 1e-12);
        assert_eq!(d.level(5), d.level(9));
        assert!((Design { min: 3, max: 3 }.level(1) - 0.95).abs() < 1e-12);
    }

    #[test]
    fn a_clear_regression_is_decided_at_the_first_look() {
        // The base passes every task five times; the candidate fails half of them once each.
        let base = made("b", 80, |_| 5, |_, _| true);
        let cand = made("c", 80, |_| 1, |i, _| i % 2 == 0);
        let d = Design { min: 1, max: 5 };
        let l = look(&d, 1, &gates(), &base, &cand, &BTreeSet::new(), CompareOptions::default()).unwrap();
        assert_eq!(l.next, Next::Decided(Decision::NoGo));
        assert_eq!(l.comparison.level, d.level(1));
    }

    #[test]
    fn only_tasks_that_can_move_the_answer_are_repeated() {
        // t000–t009 flip in the base; t010 differs between the sides; the rest agree and are
        // steady; t011 flipped on an earlier night.
        let base = made("b", 60, |_| 5, |i, r| if i < 10 { r % 2 == 0 } else { i != 10 });
        let cand = made("c", 60, |_| 1, |_, _| true);
        let before: BTreeSet<String> = ["t011".to_string()].into();
        let open = open_tasks(&Design { min: 1, max: 5 }, &base, &cand, &before);
        let want: Vec<String> = (0..12).map(|i| format!("t{i:03}")).collect();
        assert_eq!(open, want);
        // At `max` attempts nothing is repeated any more.
        let full = made("c", 60, |_| 5, |_, r| r > 0);
        assert!(open_tasks(&Design { min: 1, max: 5 }, &base, &full, &before).is_empty());
    }

    #[test]
    fn a_candidate_within_the_noise_is_undecidable_once_nothing_is_left_to_repeat() {
        let base = made("b", 40, |_| 5, |i, r| i % 4 != 0 || r % 2 == 0);
        let cand = made("c", 40, |_| 5, |i, r| i % 4 != 0 || r % 2 == 1);
        let d = Design { min: 1, max: 5 };
        let l = look(&d, 5, &gates(), &base, &cand, &BTreeSet::new(), CompareOptions::default()).unwrap();
        assert_eq!(l.next, Next::Undecidable);
        assert_eq!(l.comparison.level, d.level(5));
        assert_eq!(l.verdict.decision(), Decision::Inconclusive);
    }

    #[test]
    fn the_spend_is_said_against_the_fixed_design() {
        let s =
            Spend { min: 1, max: 5, looks: 2, level: 0.99, attempts: 64, fixed_attempts: 250, ended: "decided".into() };
        assert_eq!(
            spend_line(&s, Some(1.5)),
            "adaptive repetitions: decided after 2 of 5 looks (last at 99%): 64 task-attempts, $1.50 against 250 for 5 of each task (26%)"
        );
    }
}
