//! Comparing the runs of one set (`submit --matrix`): every combination against one base
//! combination (the first, unless named), each with its own pass rate and a bootstrap interval
//! over its tasks, its paired difference from the base, its cost, and which combination is best.
//! The pairs are the two-run comparison's (`compare`), so a set's table and `compare BASE CAND`
//! of two of its runs agree.

use serde::{Deserialize, Serialize};

use crate::compare::{CompareOptions, Comparison, compare};
use crate::results::RunResults;
use crate::stats::{Interval, paired_bootstrap};

/// Version of the set comparison document (`docs/report-schema.md`).
pub const SET_SCHEMA: &str = "1";

/// One combination of the set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetEntry {
    /// Its place in the matrix, from 0.
    pub position: u32,
    /// `agent.model=a, agent.system=@p1.txt`.
    pub label: String,
    pub run_id: String,
    pub status: agenteval_core::model::RunStatus,
    /// Tasks (base ids) with a result that says something about the agent.
    pub tasks: usize,
    /// Its pass rate over those tasks (repetitions folded per task), with a 95% bootstrap
    /// interval of the mean.
    pub pass_rate: Interval,
    /// Mean cost of a task, in dollars.
    pub cost_per_task: f64,
    /// Its comparison with the base combination (`None` for the base itself, or when the two
    /// have no task in common).
    pub vs_base: Option<Comparison>,
}

/// Every combination of a set against the base one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetComparison {
    pub schema_version: String,
    pub set_id: String,
    /// The position of the combination the others are compared with.
    pub base: u32,
    pub resamples: usize,
    pub seed: u64,
    pub entries: Vec<SetEntry>,
    /// The position of the combination with the highest pass rate (the lower cost per task
    /// breaks a tie, then the matrix's order).
    pub best: Option<u32>,
}

impl SetComparison {
    pub fn entry(&self, position: u32) -> Option<&SetEntry> {
        self.entries.iter().find(|e| e.position == position)
    }
}

/// Compares each run of a set with the run at `base` (an index into `runs`). `runs` are in the
/// matrix's order; each run's label comes from its metadata.
pub fn compare_set(set_id: &str, runs: &[RunResults], base: usize, opts: CompareOptions) -> SetComparison {
    let entries: Vec<SetEntry> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let position = r.meta.set.as_ref().map(|s| s.position).unwrap_or(i as u32);
            let label = r.meta.set.as_ref().map(|s| s.label()).unwrap_or_else(|| r.meta.name.clone());
            let per_task = crate::compare::per_task_values(&r.lines, "pass_rate");
            let seed = opts.seed ^ u64::from(position).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let pass_rate = paired_bootstrap(&per_task, opts.resamples, seed);
            let costs = crate::compare::per_task_values(&r.lines, "cost_per_task");
            let cost_per_task = if costs.is_empty() { 0.0 } else { costs.iter().sum::<f64>() / costs.len() as f64 };
            let vs_base = (i != base).then(|| compare(&runs[base], r, opts).ok()).flatten();
            SetEntry {
                position,
                label,
                run_id: r.meta.run_id.to_string(),
                status: r.meta.status,
                tasks: per_task.len(),
                pass_rate,
                cost_per_task,
                vs_base,
            }
        })
        .collect();
    let best = entries
        .iter()
        .filter(|e| e.tasks > 0)
        .max_by(|a, b| {
            a.pass_rate
                .mean
                .total_cmp(&b.pass_rate.mean)
                .then(b.cost_per_task.total_cmp(&a.cost_per_task))
                .then(b.position.cmp(&a.position))
        })
        .map(|e| e.position);
    let base_position = entries.get(base).map(|e| e.position).unwrap_or(0);
    SetComparison {
        schema_version: SET_SCHEMA.into(),
        set_id: set_id.into(),
        base: base_position,
        resamples: opts.resamples,
        seed: opts.seed,
        entries,
        best,
    }
}

fn pct(x: f64) -> String {
    if x.is_nan() { "-".into() } else { format!("{:.1}%", x * 100.0) }
}

fn signed_pct(x: f64) -> String {
    if x.is_nan() { "-".into() } else { format!("{:+.1}", x * 100.0) }
}

/// `+12.0 [+3.0, +21.0]` points: a pass-rate difference and its interval.
fn diff_text(e: &SetEntry) -> String {
    match e.vs_base.as_ref().and_then(|c| c.metric("pass_rate")).and_then(|m| m.diff) {
        Some(d) => format!("{} [{},{}]", signed_pct(d.mean), signed_pct(d.lo), signed_pct(d.hi)),
        None => "-".into(),
    }
}

/// What a combination's interval says against the base: `better`, `worse` or `same`.
fn word(e: &SetEntry, base: u32) -> &'static str {
    if e.position == base {
        return "base";
    }
    match e.vs_base.as_ref().and_then(|c| c.metric("pass_rate")) {
        Some(m) if m.improved => "better",
        Some(m) if m.regressed => "worse",
        Some(_) => "same",
        None => "-",
    }
}

/// The line that names the best combination.
pub fn best_line(s: &SetComparison) -> Option<String> {
    let e = s.entry(s.best?)?;
    Some(format!(
        "best: #{} {} — pass rate {} [{}, {}] over {} tasks",
        e.position + 1,
        e.label,
        pct(e.pass_rate.mean),
        pct(e.pass_rate.lo),
        pct(e.pass_rate.hi),
        e.tasks
    ))
}

/// Markdown: one table (a pull-request comment, or a file beside the nightly's report).
pub fn md(s: &SetComparison) -> String {
    let mut out = format!("## Set {}\n\n", s.set_id);
    out.push_str("| # | combination | run | pass rate [95% CI] | vs base (points) | cost/task | |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for e in &s.entries {
        out.push_str(&format!(
            "| {} | {} | `{}` | {} [{}, {}] | {} | ${:.4} | {} |\n",
            e.position + 1,
            e.label.replace('|', "\\|"),
            e.run_id,
            pct(e.pass_rate.mean),
            pct(e.pass_rate.lo),
            pct(e.pass_rate.hi),
            diff_text(e),
            e.cost_per_task,
            word(e, s.base)
        ));
    }
    if let Some(line) = best_line(s) {
        out.push_str(&format!("\n**{line}**\n"));
    }
    out.push_str(&format!("\nIntervals: paired bootstrap, {} resamples, seed {}.\n", s.resamples, s.seed));
    out
}

/// The rows of the terminal table, in percentage points so that it fits 80 columns:
/// `[#, combination, pass % [interval], vs base [interval], cost per task, better|worse|same]`.
pub fn rows(s: &SetComparison) -> Vec<[String; 6]> {
    let points = |x: f64| if x.is_nan() { "-".to_string() } else { format!("{:.1}", x * 100.0) };
    s.entries
        .iter()
        .map(|e| {
            [
                format!("{}", e.position + 1),
                e.label.clone(),
                format!("{} [{},{}]", points(e.pass_rate.mean), points(e.pass_rate.lo), points(e.pass_rate.hi)),
                diff_text(e),
                format!("${:.4}", e.cost_per_task),
                word(e, s.base).to_string(),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::results_with;

    #[test]
    fn every_combination_is_compared_with_the_base_and_the_best_is_named() {
        let a = results_with("a", &[true, false, false, false, true, false, false, false, true, false]);
        let b = results_with("b", &[true; 10]);
        let c = results_with("c", &[true, true, false, true, true, false, true, true, false, true]);
        let s = compare_set("set-1", &[a, b, c], 0, CompareOptions { resamples: 2000, seed: 7, ..Default::default() });
        assert_eq!(s.entries.len(), 3);
        assert!(s.entries[0].vs_base.is_none(), "the base is not compared with itself");
        assert_eq!(s.best, Some(1));
        let b = &s.entries[1];
        assert!((b.pass_rate.mean - 1.0).abs() < 1e-12);
        assert_eq!(word(b, s.base), "better", "{:?}", b.vs_base.as_ref().unwrap().metric("pass_rate"));
        assert!(best_line(&s).unwrap().starts_with("best: #2 b — pass rate 100.0%"), "{:?}", best_line(&s));
        let m = md(&s);
        assert!(m.contains("| 2 | b |") && m.contains("**best: #2"), "{m}");
        // The same inputs give the same intervals.
        let again = compare_set("set-1", &[results_with("a", &[true; 3])], 0, CompareOptions::default());
        assert_eq!(again.best, Some(0));
    }

    #[test]
    fn a_tie_on_pass_rate_goes_to_the_cheaper_combination() {
        let mut a = results_with("a", &[true, false]);
        let b = results_with("b", &[true, false]);
        for l in &mut a.lines {
            l.cost_usd = 1.0;
        }
        let s = compare_set("s", &[a, b], 0, CompareOptions { resamples: 100, seed: 1, ..Default::default() });
        assert_eq!(s.best, Some(1));
    }
}
