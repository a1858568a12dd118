//! Rendering a comparison and its verdict for people and scripts: `text` (a terminal, 80
//! columns, meaning never in colour alone), `md` (a PR comment: compact, escaped, far under
//! GitHub's 65,536-character limit), `json` (the `Comparison` and `Verdict` documents).

use std::fmt::Write as _;

use serde_json::json;

use crate::compare::{Comparison, MetricDiff};
use crate::gates::{Decision, Verdict};

/// Output formats of `compare` and `report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Md,
    Json,
    Html,
}

impl Format {
    /// Every format, in the order `--help` lists them.
    pub const ALL: [Format; 4] = [Format::Text, Format::Md, Format::Json, Format::Html];

    /// The name `--format` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Md => "md",
            Format::Json => "json",
            Format::Html => "html",
        }
    }

    /// What it is for, in a few words (`--help`).
    pub fn about(self) -> &'static str {
        match self {
            Format::Text => "for a terminal",
            Format::Md => "Markdown, a pull-request comment",
            Format::Json => "one JSON document",
            Format::Html => "one self-contained page",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = if s == "markdown" { "md" } else { s };
        Format::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
            format!("unknown format `{s}` ({})", names.join(", "))
        })
    }
}

/// Tasks listed by name in a Markdown report before the rest are only counted.
const MD_TASKS: usize = 50;

/// Escapes user-controlled text for a Markdown table cell: nothing in it can end the cell,
/// open HTML or a code span.
pub fn md_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '`' | '*' | '_' | '[' | ']' | '\\' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

pub use crate::units::{fmt_value, gate_figure};

/// A metric's difference and its interval, as the terminal and the page show it.
pub fn diff_text(m: &MetricDiff) -> String {
    fmt_diff(m)
}

fn fmt_diff(m: &MetricDiff) -> String {
    use crate::units::{fmt_delta, is_share};
    let Some(d) = m.diff else { return format!("{} (not judged)", fmt_delta(&m.metric, m.cand - m.base)) };
    let bare = |v: f64| fmt_delta(&m.metric, v).trim_end_matches(" pts").to_string();
    let unit = if is_share(&m.metric) { " pts" } else { "" };
    format!("{}{unit} [{}, {}]", bare(d.mean), bare(d.lo), bare(d.hi))
}

fn word(m: &MetricDiff) -> &'static str {
    if m.within_noise {
        "noise"
    } else if m.regressed {
        "WORSE"
    } else if m.improved {
        "better"
    } else {
        "same"
    }
}

/// What a reader must know before trusting the numbers: the inputs of the two runs differ.
/// `, clustered by repo (12 groups)` when the intervals resampled groups of tasks.
fn clustered(c: &Comparison) -> String {
    match (&c.clustered_by, c.clusters) {
        (Some(key), Some(n)) => format!(", clustered by {key} ({n} groups)"),
        _ => String::new(),
    }
}

pub fn warnings(c: &Comparison) -> Vec<String> {
    // Said first: the agent is compared against another partner.
    let mut out = c.roles_changed.clone();
    if !c.scores_added.is_empty() {
        out.push(format!("evaluators only the candidate has (not compared): {}", c.scores_added.join(", ")));
    }
    if !c.scores_removed.is_empty() {
        out.push(format!("evaluators only the base has (not compared): {}", c.scores_removed.join(", ")));
    }
    if !c.changed.is_empty() {
        let shown: Vec<&str> = c.changed.iter().take(5).map(String::as_str).collect();
        let more = if c.changed.len() > 5 { format!(" and {} more", c.changed.len() - 5) } else { String::new() };
        out.push(format!(
            "{} changed content (input, expected answer or evaluators) under the same id and are not compared: {}{more}",
            crate::tasks(c.changed.len()),
            shown.join(", ")
        ));
    }
    if c.grading_changed {
        out.push("the runs were graded with different settings (benchmark settings or evaluators): a difference may come from the grading, not the agent".into());
    }
    out
}

/// What the base's repetitions say of the noise, and whether the pass rate's difference is in it.
fn noise_line(c: &Comparison, n: &crate::compare::Noise) -> String {
    let within = c.metric("pass_rate").is_some_and(|m| m.within_noise);
    let mut line = format!(
        "noise      flip rate {:.1}% in the base's {} repetitions: ±{:.1} pts is chance",
        n.flip_rate * 100.0,
        n.base_repetitions,
        n.pass_rate_band * 100.0
    );
    if within {
        line.push_str("\n           the pass rate's difference is within it: not judged");
    }
    line
}

/// The comparison (and verdict) as terminal text.
pub fn text(c: &Comparison, verdict: Option<&Verdict>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "base       {} ({}, {})", c.base.run_id, c.base.name, c.base.status.as_str());
    let _ = writeln!(o, "candidate  {} ({}, {})", c.cand.run_id, c.cand.name, c.cand.status.as_str());
    let _ = writeln!(
        o,
        "paired     {}; {} bootstrap resamples, seed {}; intervals are {}\n",
        crate::tasks(c.paired_tasks),
        c.resamples,
        c.seed,
        crate::gates::level_words(c.level) + &clustered(c)
    );
    if let Some(a) = &c.cand.adaptive {
        let _ = writeln!(o, "spent      {}\n", crate::adaptive::spend_line(a, c.cand.cost_usd));
    }
    for w in warnings(c) {
        let _ = writeln!(o, "warning: {w}");
    }
    if !warnings(c).is_empty() {
        let _ = writeln!(o);
    }
    let head = format!("difference [{} interval]", crate::gates::level_words(c.level));
    let _ = writeln!(o, "{:<18} {:>9} {:>9}  {head}", "metric", "base", "candidate");
    for m in &c.metrics {
        let _ = writeln!(
            o,
            "{:<18} {:>9} {:>9}  {:<28} {}",
            truncate(&m.metric, 24),
            fmt_value(&m.metric, m.base),
            fmt_value(&m.metric, m.cand),
            fmt_diff(m),
            word(m)
        );
    }
    if let Some(p) = &c.pairwise {
        let _ = writeln!(o, "{}", pairwise_line(p));
    }
    if let Some(n) = &c.noise {
        let _ = writeln!(o, "{}", noise_line(c, n));
    }
    let _ = writeln!(o);
    list(&mut o, "regressed (passed -> failed)", c.regressions.iter().map(|t| task_line(&t.task_id, t.ended)));
    list(
        &mut o,
        "flipped, within the noise (flaky in the base's own repetitions)",
        c.flaky_changes.iter().map(|t| task_line(&t.task_id, t.ended)),
    );
    list(&mut o, "improved (failed -> passed)", c.improvements.iter().map(|t| t.task_id.clone()));
    // Per side: an agent that turns its failures into infra is seen here (and by `max_infra`).
    let on = |side: fn(&crate::compare::InfraTask) -> bool| c.infra_failures.iter().filter(|t| side(t)).count();
    let infra_title =
        format!("infra failures, not in the statistics (base {}, candidate {})", on(|t| t.base), on(|t| t.cand));
    list(
        &mut o,
        &infra_title,
        c.infra_failures.iter().map(|t| {
            format!(
                "{} ({})",
                t.task_id,
                match (t.base, t.cand) {
                    (true, true) => "both runs",
                    (true, false) => "base",
                    _ => "candidate",
                }
            )
        }),
    );
    list(
        &mut o,
        "changed (different content under the same id; left out of the statistics)",
        c.changed.iter().cloned(),
    );
    list(&mut o, "only in the candidate", c.added.iter().cloned());
    list(&mut o, "only in the base", c.removed.iter().cloned());
    if let Some(v) = verdict {
        let word = match v.decision() {
            Decision::Go => "GO (pass)",
            Decision::NoGo => "NO-GO (fail)",
            Decision::Inconclusive => "INCONCLUSIVE (not a pass: the data cannot decide)",
        };
        let _ = writeln!(o, "gates: {word}");
        for g in &v.gates {
            let limit = gate_figure(&g.gate, g.limit);
            let head = format!("  {} {:<24} limit {:<8}", gate_word(g.decision()), g.gate, limit);
            // Within 80 columns: a long detail goes under the gate, a clause a line, wrapped.
            if head.chars().count() + 1 + g.detail.chars().count() <= 80 {
                let _ = writeln!(o, "{head} {}", g.detail);
            } else {
                let _ = writeln!(o, "{}", head.trim_end());
                for clause in g.detail.split("; ") {
                    for line in wrap_words(clause, 80 - 7) {
                        let _ = writeln!(o, "       {line}");
                    }
                }
            }
        }
    }
    o
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

fn task_line(id: &str, ended: Option<agenteval_core::model::TerminatedBy>) -> String {
    match ended {
        Some(t) => format!("{id} ({})", t.as_str()),
        None => id.to_string(),
    }
}

fn list(o: &mut String, title: &str, items: impl Iterator<Item = String>) {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        return;
    }
    let _ = writeln!(o, "{title}: {}", items.len());
    for i in items.iter().take(20) {
        let _ = writeln!(o, "  {i}");
    }
    if items.len() > 20 {
        let _ = writeln!(o, "  … and {} more (--format json lists all)", items.len() - 20);
    }
    let _ = writeln!(o);
}

/// The comparison (and verdict) as a Markdown PR comment.
/// `pairwise judge openai:gpt-4o: 12 wins, 3 ties, 1 loss` (and the tasks it could not decide).
pub fn pairwise_line(p: &crate::compare::PairwiseTally) -> String {
    let mut line =
        format!("pairwise judge {}: {} wins, {} ties, {} losses for the candidate", p.judge, p.wins, p.ties, p.losses);
    if p.errors > 0 {
        line.push_str(&format!(" ({} undecided: the judge failed)", crate::tasks(p.errors)));
    }
    line
}

/// Words in lines of at most `width` characters (a longer word alone on its line).
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// A gate's word in a line of text: `ok`, `FAIL` or `INCONCLUSIVE`.
pub fn gate_word(d: Decision) -> &'static str {
    match d {
        Decision::Go => "ok  ",
        Decision::NoGo => "FAIL",
        Decision::Inconclusive => "INCONCLUSIVE",
    }
}

fn gate_mark(d: Decision) -> &'static str {
    match d {
        Decision::Go => "✅",
        Decision::NoGo => "❌",
        Decision::Inconclusive => "❔",
    }
}

pub fn md(c: &Comparison, verdict: Option<&Verdict>) -> String {
    let head = match verdict.map(Verdict::decision) {
        Some(Decision::Go) => "✅ GO: gates pass",
        Some(Decision::NoGo) => "❌ NO-GO: gates fail",
        Some(Decision::Inconclusive) => "❔ INCONCLUSIVE: the gates cannot decide (not a pass)",
        None => "comparison",
    };
    format!("### agenteval: {head}\n\n{}", md_body(c, verdict))
}

/// [`md`] without its heading, for a document that has its own (a run's report).
pub fn md_body(c: &Comparison, verdict: Option<&Verdict>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "`{}` ({}) → `{}` ({}): {} paired tasks, {} intervals from {} paired-bootstrap resamples (seed {}).\n",
        c.base.run_id,
        md_escape(&c.base.name),
        c.cand.run_id,
        md_escape(&c.cand.name),
        c.paired_tasks,
        crate::gates::level_words(c.level) + &clustered(c),
        c.resamples,
        c.seed
    );
    if let Some(a) = &c.cand.adaptive {
        let _ = writeln!(o, "{}\n", md_escape(&crate::adaptive::spend_line(a, c.cand.cost_usd)));
    }
    for w in warnings(c) {
        let _ = writeln!(o, "> ⚠️ {}\n", md_escape(&w));
    }
    let _ = writeln!(
        o,
        "| metric | base | candidate | difference [{} CI] | |\n|---|---:|---:|---|---|",
        crate::gates::level_words(c.level)
    );
    for m in &c.metrics {
        let mark = if m.within_noise {
            "within the noise"
        } else if m.regressed {
            "🔻 worse"
        } else if m.improved {
            "🔺 better"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {mark} |",
            md_escape(&m.metric),
            fmt_value(&m.metric, m.base),
            fmt_value(&m.metric, m.cand),
            fmt_diff(m)
        );
    }
    if let Some(p) = &c.pairwise {
        let _ = writeln!(o, "\n{}", md_escape(&pairwise_line(p)));
    }
    if let Some(n) = &c.noise {
        let _ = writeln!(o, "\n{}", md_escape(&noise_line(c, n)));
    }
    if let Some(v) = verdict {
        o.push('\n');
        o.push_str(&md_gates(v));
    }
    md_tasks(&mut o, "Regressed tasks", c.regressions.iter().map(|t| task_line(&t.task_id, t.ended)));
    md_tasks(&mut o, "Improved tasks", c.improvements.iter().map(|t| t.task_id.clone()));
    md_tasks(&mut o, "Infrastructure failures (not counted)", c.infra_failures.iter().map(|t| t.task_id.clone()));
    md_tasks(&mut o, "Changed tasks (different content, not counted)", c.changed.iter().cloned());
    if !c.added.is_empty() || !c.removed.is_empty() {
        let _ = writeln!(
            o,
            "\n{} only in the candidate, {} only in the base.",
            crate::tasks(c.added.len()),
            c.removed.len()
        );
    }
    o
}

/// Each gate's result as a Markdown table.
pub fn md_gates(v: &Verdict) -> String {
    let mut o = String::from("| gate | limit | result |\n|---|---:|---|\n");
    for g in &v.gates {
        let _ = writeln!(
            o,
            "| {} | {} | {} {} {} |",
            md_escape(&g.gate),
            g.limit,
            gate_mark(g.decision()),
            g.decision().as_str(),
            md_escape(&g.detail)
        );
    }
    o
}

fn md_tasks(o: &mut String, title: &str, items: impl Iterator<Item = String>) {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        return;
    }
    let shown: Vec<String> = items.iter().take(MD_TASKS).map(|i| format!("`{}`", i.replace('`', "'"))).collect();
    let more = if items.len() > MD_TASKS { format!(" … and {} more", items.len() - MD_TASKS) } else { String::new() };
    let _ = writeln!(o, "\n**{title} ({}):** {}{more}", items.len(), shown.join(", "));
}

/// The comparison and verdict as one JSON document.
pub fn json(c: &Comparison, verdict: Option<&Verdict>) -> serde_json::Value {
    json!({"comparison": c, "verdict": verdict})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_has_one_unit_whether_a_value_a_difference_or_a_gate() {
        assert_eq!(fmt_value("pass_rate", 0.4), "40.0%");
        assert_eq!(fmt_value("cost_per_task", 0.0013), "$0.0013");
        assert_eq!(gate_figure("pass_rate.min", 0.3), "30.0%");
        assert_eq!(gate_figure("pass_rate.max_drop", 0.05), "5.00 pts");
        assert_eq!(gate_figure("cost_per_task.max", 0.02), "$0.0200");
        assert_eq!(gate_figure("cost_per_task.max_drop_pct", 25.0), "25.00%");
        assert_eq!(gate_figure("max_task_regressions", 3.0), "3");
        assert_eq!(gate_figure("score:exact_match.min", 0.9), "90.0%");
        let m = |metric: &str, d: Option<f64>| MetricDiff {
            metric: metric.into(),
            better: crate::compare::Better::Higher,
            base: 0.5,
            cand: 0.45,
            diff: d.map(|d| crate::stats::Interval { mean: d, lo: d - 0.01, hi: d + 0.01 }),
            regressed: false,
            improved: false,
            within_noise: false,
            paired_test: None,
            mde: None,
        };
        assert_eq!(diff_text(&m("pass_rate", Some(-0.05))), "-5.00 pts [-6.00, -4.00]");
        assert_eq!(diff_text(&m("cost_per_task", Some(-0.05))), "-$0.0500 [-$0.0600, -$0.0400]");
        assert_eq!(diff_text(&m("tokens_per_task", None)), "-0.050 (not judged)");
    }

    /// A 10,000-task run; `broken`: half the tasks fail and a tenth fail on infrastructure.
    fn synthetic(broken: bool) -> crate::results::RunResults {
        use crate::results::RunResults;
        use agenteval_core::format::{LineScore, ResultLine};
        use agenteval_core::model::TerminatedBy;
        let meta =
            agenteval_testkit::fixtures::metadata(agenteval_core::RunId::new(), "big | <b>run</b>", "toy", 10_000);
        let lines = (0..10_000)
            .map(|i| {
                // Half the tasks regress, a tenth fail on infrastructure.
                let passed = !broken || i % 2 == 0;
                let ended = if broken && i % 10 == 1 { TerminatedBy::InfraFailure } else { TerminatedBy::Completed };
                ResultLine {
                    task_id: format!("a-rather-long-task-name-{i:06}").parse().unwrap(),
                    attempt: 1,
                    passed,
                    terminated_by: ended,
                    scores: [(
                        "exact".to_string(),
                        LineScore { score: f64::from(u8::from(passed)), passed, error: false },
                    )]
                    .into(),
                    cost_usd: 0.01,
                    tokens: 10,
                    wall_seconds: 1.0,
                    steps: 2,
                    changed_outside: 0,
                    cost_unknown: false,
                    tampered: 0,
                }
            })
            .collect();
        RunResults::new(meta, String::new(), lines, None)
    }

    #[test]
    fn the_markdown_of_a_10000_task_comparison_fits_a_pr_comment() {
        use crate::compare::{CompareOptions, compare};
        let c = compare(
            &synthetic(false),
            &synthetic(true),
            CompareOptions { resamples: 200, seed: 1, ..Default::default() },
        )
        .unwrap();
        assert!(c.regressions.len() > 3_000);
        let md = md(&c, None);
        assert!(md.len() < 65_536, "{} characters", md.len());
        assert!(md.contains("and ") && md.contains(" more"), "the rest is summarised");
        assert!(!md.contains("<b>"), "user text is escaped");
    }

    #[test]
    fn the_text_report_fits_80_columns() {
        use crate::compare::{CompareOptions, compare};
        use crate::gates::{judge, load_gates_str};
        let c = compare(
            &synthetic(false),
            &synthetic(true),
            CompareOptions { resamples: 200, seed: 1, ..Default::default() },
        )
        .unwrap();
        let g = load_gates_str(
            "min_tasks: 10\nmax_task_regressions: 0\nmetrics:\n  pass_rate: {min: 0.9, max_drop: 0.01, max_drop_pct: 1}\n  score:exact: {max_drop: 0.01}\n  cost_per_task: {max: 0.001}\n",
            "g",
        )
        .unwrap();
        let v = judge(&g, Some(&c), &|_| None, 0);
        let shown = text(&c, Some(&v));
        for line in shown.lines().filter(|l| !l.starts_with("base ") && !l.starts_with("candidate ")) {
            assert!(line.chars().count() <= 80, "{} columns: {line}", line.chars().count());
        }
    }

    #[test]
    fn markdown_escaping_keeps_user_text_inside_its_cell() {
        let e = md_escape("a|b <img src=x onerror=alert(1)> `code` [link](x)\nnext");
        assert!(!e.contains('<') && !e.contains('\n'), "{e}");
        assert!(
            e.contains("\\|") && e.contains("&lt;img") && e.contains("\\`code\\`") && e.contains("\\[link\\]"),
            "{e}"
        );
    }
}
