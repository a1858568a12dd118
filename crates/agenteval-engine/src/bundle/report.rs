//! Renders `report.md`, the human-readable page of a run.

use agenteval_judge::report::md_escape;
use std::fmt::Write;

use agenteval_core::model::RunSummary;

use agenteval_core::format::Metadata;

/// A failed task, as the report lists it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub task_id: String,
    pub reason: String,
}

/// `text` as one Markdown code span, whatever it holds: fenced by more backticks than its
/// longest run of them (CommonMark), padded where it starts or ends with one, on one line.
pub fn code_span(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// The run's `report.md`.
// Long: the report's sections in the order they are read, each a few lines of Markdown.
pub fn render(meta: &Metadata, s: &RunSummary, failures: &[Failure]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# agenteval run {}\n", code_span(&meta.name));
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| run id | `{}` |", meta.run_id);
    let _ = writeln!(out, "| status | **{}** |", s.status.as_str());
    let _ = writeln!(out, "| benchmark | {} |", meta.benchmark);
    if let Some(d) = &meta.dataset {
        let commits: Vec<String> = d.commits.iter().map(|c| format!("`{c}`")).collect();
        let _ = writeln!(out, "| dataset | {}@{} ({}; {}) |", d.name, d.version, d.registry, commits.join(", "));
    }
    let _ = writeln!(out, "| agent | {} |", meta.agent);
    let _ = writeln!(out, "| backend | {} |", meta.backend);
    let _ = writeln!(out, "| started | {} |", meta.created_at.to_rfc3339());
    if let Some(f) = meta.finished_at {
        let _ = writeln!(out, "| finished | {} |", f.to_rfc3339());
    }
    let _ = writeln!(out, "| agenteval | {} |", meta.agenteval_version);
    if let Some(g) = &meta.git_sha {
        let _ = writeln!(out, "| git | `{g}` |");
    }
    if let Some(g) = &meta.agent_git {
        let _ = writeln!(out, "| agent's git | `{}`{} |", g.commit, if g.dirty { " (changed files)" } else { "" });
    }
    let _ = writeln!(out, "\n## Results\n");
    let _ = writeln!(out, "| tasks | finished | passed | failed | errored | infra | pass rate |");
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {:.1}% |\n",
        s.tasks_total,
        s.tasks_finished,
        s.passed,
        s.failed,
        s.errored,
        s.infra,
        s.pass_rate * 100.0
    );
    // Two tables, so that the report reads in an 80-column terminal too.
    let _ = writeln!(out, "| cost (USD) | tokens | p50 (s) | p95 (s) |\n|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| {} | {} | {:.3} | {:.3} |",
        s.cost_text(),
        s.total_tokens,
        s.latency_p50_seconds,
        s.latency_p95_seconds
    );
    if s.harbor_would_skip > 0 {
        let _ = writeln!(
            out,
            "\n> Harbor itself would skip {} task(s) of this run whose task.toml breaks a rule of its own (each task's `show` says which): its numbers are over fewer tasks.",
            s.harbor_would_skip
        );
    }
    if !s.models.is_empty() {
        let _ = writeln!(out, "\n## Models\n\n| model | calls |\n|---|---:|");
        for (m, n) in &s.models {
            let _ = writeln!(out, "| {} | {n} |", md_escape(m));
        }
    }
    if !s.tags.is_empty() {
        let _ = writeln!(out, "\n## By tag\n\n| tag | tasks | passed | pass rate |\n|---|---:|---:|---:|");
        for (tag, t) in &s.tags {
            let _ = writeln!(out, "| {} | {} | {} | {:.1}% |", md_escape(tag), t.tasks, t.passed, t.pass_rate * 100.0);
        }
    }
    if !s.terminated_by.is_empty() {
        let _ = writeln!(out, "\n## How agents ended\n\n| terminated by | tasks |\n|---|---:|");
        for (k, n) in &s.terminated_by {
            let _ = writeln!(out, "| {k} | {n} |");
        }
    }
    if !s.evaluators.is_empty() {
        let _ = writeln!(
            out,
            "\n## Evaluators\n\n| evaluator | kind | scored | passed | errors | mean score | spread (sd) |\n|---|---|---:|---:|---:|---:|---:|"
        );
        for (id, e) in &s.evaluators {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.3} | {:.3} |",
                md_escape(id),
                md_escape(&e.kind),
                e.count,
                e.passed,
                e.errors,
                e.mean_score,
                e.stddev_score
            );
        }
    }
    if s.tampered > 0 {
        let _ = writeln!(
            out,
            "\n**Tampered:** {} task(s) whose agent changed files their grading reads, {} of them passed (the verdicts stand; each task's `tampered` names the files).",
            s.tampered, s.passed_tampered
        );
    }
    if !s.pass_at_k.is_empty() {
        let _ = writeln!(
            out,
            "\n## pass@k and pass^k (unbiased estimators over repetitions)\n\n| k | pass@k (one passes) | pass^k (all pass) |\n|---:|---:|---:|"
        );
        for (k, v) in &s.pass_at_k {
            let hat = s.pass_hat_k.get(k).map_or("-".to_string(), |h| format!("{:.1}%", h * 100.0));
            let _ = writeln!(out, "| {k} | {:.1}% | {hat} |", v * 100.0);
        }
        if let Some(f) = s.flip_rate {
            let _ = writeln!(
                out,
                "\nFlip rate (the chance two attempts of a task disagree), mean over tasks: {:.1}%",
                f * 100.0
            );
        }
        if !s.flaky_tasks.is_empty() {
            let shown: Vec<String> = s.flaky_tasks.iter().take(50).map(|t| format!("`{t}`")).collect();
            let more = s.flaky_tasks.len().saturating_sub(50);
            let more = if more > 0 { format!(" … and {more} more") } else { String::new() };
            let _ = writeln!(
                out,
                "\nFlaky ({} tasks both passed and failed): {}{more}",
                s.flaky_tasks.len(),
                shown.join(", ")
            );
        }
    }
    if !failures.is_empty() {
        let _ = writeln!(out, "\n## Failed tasks (first {})\n", failures.len());
        for f in failures {
            let reason = f.reason.replace('\n', " ");
            let reason: String = reason.chars().take(200).collect();
            let _ = writeln!(out, "- `{}`: {}", f.task_id, md_escape(&reason));
        }
    }
    if s.tasks_finished < s.tasks_total {
        let _ = writeln!(
            out,
            "\n> {} of {} tasks have no result. Finish the run with `agenteval resume {}`.",
            s.tasks_total - s.tasks_finished,
            s.tasks_total,
            meta.run_id
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::code_span;

    #[test]
    fn a_name_with_backticks_stays_one_code_span() {
        assert_eq!(code_span("nightly"), "`nightly`");
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("``x"), "``` ``x ```");
        assert_eq!(code_span("two\nlines"), "`two lines`");
    }
}
