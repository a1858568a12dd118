//! Terminal output: logging setup, the progress bar, tables and colour (off under NO_COLOR or
//! when not writing to a terminal).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use agenteval_core::RunId;
use agenteval_core::model::{RunStatus, RunSummary};
use agenteval_engine::controller::{Progress, ProgressView};
use agenteval_judge::judgement::Judgement;
use comfy_table::{ContentArrangement, Table, presets::UTF8_HORIZONTAL_ONLY};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::{Cli, Command};

/// The log filter when `RUST_LOG` is not set: `-q`/`-v` for commands, `info` for workers (their
/// stderr is the job's log in the bundle). The OpenTelemetry SDK's own chatter stays off; export
/// problems surface as one warning of ours.
pub fn default_log_filter(cli: &Cli) -> String {
    let is_worker = matches!(cli.command, Command::Worker { .. });
    let level = if cli.quiet {
        "error"
    } else {
        match (is_worker, cli.verbose) {
            (true, _) => "info",
            (false, 0) => "warn",
            (false, 1) => "info",
            (false, 2) => "debug",
            _ => "trace",
        }
    };
    // Other crates' warnings (the AWS SDK's about its config files, say) are not ours to show
    // unless asked: at the default level only their errors.
    let others = if cli.verbose >= 2 || is_worker { level } else { "error" };
    let ours = OWN_TARGETS.iter().map(|t| format!(",{t}={level}")).collect::<String>();
    format!("{others}{ours},opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off")
}

/// This workspace's crates, as log targets.
const OWN_TARGETS: &[&str] = &[
    "agenteval",
    "agenteval_core",
    "agenteval_engine",
    "agenteval_local",
    "agenteval_aws",
    "agenteval_judge",
    "agenteval_llm",
];

/// The columns a table printed to stdout may take: the terminal's width, at least 80; 80 when
/// stdout is not a terminal (a file, a pipe: what scripts read stays as it was).
pub fn stdout_width() -> usize {
    console::Term::stdout().size_checked().map_or(80, |(_rows, cols)| usize::from(cols).max(80))
}

/// Colour only on a terminal and only without NO_COLOR (https://no-color.org).
pub fn color_enabled(stream: &impl IsTerminal) -> bool {
    stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub fn status_word(status: RunStatus) -> String {
    let s = status.as_str();
    if !color_enabled(&std::io::stdout()) {
        return s.to_string();
    }
    let code = match status {
        RunStatus::Complete => "32",
        RunStatus::Running => "36",
        RunStatus::Interrupted | RunStatus::BudgetExceeded => "33",
        RunStatus::Failed => "31",
    };
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// One line of counts, in the words every output uses.
pub fn counts_line(v: &ProgressView) -> String {
    let cost = match (v.cost_unknown, v.cost_usd) {
        (0, d) => format!("${}", dollars(d)),
        (_, d) if d > 0.0 => format!(">=${}", dollars(d)),
        _ => "cost unknown".into(),
    };
    format!("passed {} failed {} errored {} infra {}, {cost}", v.passed, v.failed, v.errored, v.infra)
}

/// Dollars with the decimals that matter at that size.
fn dollars(d: f64) -> String {
    if d < 1.0 { format!("{d:.4}") } else { format!("{d:.2}") }
}

/// Progress: a two-line bar on a terminal (each line within 80 columns, with rate and ETA); on
/// anything else (CI logs, `nohup`), the run id at once and a plain line now and then.
pub struct Bar {
    bar: Mutex<Option<ProgressBar>>,
    terminal: bool,
    plain: Mutex<Plain>,
}

/// The plain progress lines' pacing: every 2 s for the first minute, every 15 s for the next
/// nine, then every minute — quick feedback on short runs, a readable log for long ones.
struct Plain {
    started: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
    last_view: Option<ProgressView>,
}

impl Plain {
    fn due(&self, now: std::time::Instant) -> bool {
        let (Some(start), Some(last)) = (self.started, self.last) else { return true };
        let age = now - start;
        let every = if age < Duration::from_secs(60) {
            Duration::from_secs(2)
        } else if age < Duration::from_secs(600) {
            Duration::from_secs(15)
        } else {
            Duration::from_secs(60)
        };
        now - last >= every
    }
}

impl Bar {
    pub fn new() -> Self {
        Bar {
            bar: Mutex::new(None),
            terminal: std::io::stderr().is_terminal(),
            plain: Mutex::new(Plain { started: None, last: None, last_view: None }),
        }
    }

    /// Starts the display: `header` first (a log that stops here still names the run), then
    /// the bar, or a line every few seconds when stderr is not a terminal.
    pub fn begin(&self, header: &str, total: u64) {
        if !self.terminal {
            eprintln!("{header}");
            let mut p = self.plain.lock().expect("progress lock");
            p.started = Some(std::time::Instant::now());
            return;
        }
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(10));
        let style = ProgressStyle::with_template(
            "{spinner} {elapsed_precise} {bar:16} {pos}/{len} {per_sec:.1} eta {eta} {prefix}\n  {msg}",
        )
        .expect("valid template")
        .progress_chars("=> ");
        pb.set_style(style);
        pb.enable_steady_tick(Duration::from_millis(200));
        pb.println(header);
        *self.bar.lock().expect("bar lock") = Some(pb);
    }

    fn plain_line(&self, v: &ProgressView, now: std::time::Instant) {
        let mut p = self.plain.lock().expect("progress lock");
        let elapsed = p.started.map(|s| now - s).unwrap_or_default();
        let per_sec = if elapsed.as_secs_f64() > 0.0 { v.done as f64 / elapsed.as_secs_f64() } else { 0.0 };
        let eta = if v.total <= v.done {
            " eta 0:00".to_string()
        } else if per_sec > 0.0 {
            format!(" eta {}", clock(Duration::from_secs_f64((v.total - v.done) as f64 / per_sec)))
        } else {
            " eta -".to_string()
        };
        eprintln!("{}/{} {per_sec:.1}/s{eta}: {}", v.done, v.total, counts_line(v));
        p.last = Some(now);
    }
}

impl Default for Bar {
    fn default() -> Self {
        Self::new()
    }
}

/// `1:02:03`, `2:03`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

impl Progress for Bar {
    fn start(&self, run_id: &RunId, bundle_uri: &str, total: u64) {
        self.begin(&format!("run {run_id}\nbundle {bundle_uri}\n{total} tasks"), total);
    }

    fn update(&self, v: &ProgressView) {
        if !self.terminal {
            let now = std::time::Instant::now();
            let due = self.plain.lock().expect("progress lock").due(now);
            self.plain.lock().expect("progress lock").last_view = Some(v.clone());
            if due {
                self.plain_line(v, now);
            }
            return;
        }
        if let Some(pb) = self.bar.lock().expect("bar lock").as_ref() {
            // A set's total grows as its runs start.
            pb.set_length(v.total);
            pb.set_position(v.done);
            let mut running = format!("run {}", v.running);
            if v.retries > 0 {
                running.push_str(&format!(" retry {}", v.retries));
            }
            pb.set_prefix(running);
            pb.set_message(counts_line(v));
        }
    }

    fn message(&self, text: &str) {
        match self.bar.lock().expect("bar lock").as_ref() {
            Some(pb) => pb.println(text),
            None => eprintln!("{text}"),
        }
    }

    fn finish(&self) {
        if let Some(pb) = self.bar.lock().expect("bar lock").take() {
            pb.finish_and_clear();
        }
        if !self.terminal {
            let last = self.plain.lock().expect("progress lock").last_view.clone();
            if let Some(v) = last {
                self.plain_line(&v, std::time::Instant::now());
            }
        }
    }
}

/// A table for the terminal: a rule under the header, no borders, so that it fits 80 columns.
pub fn table() -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_HORIZONTAL_ONLY).set_content_arrangement(ContentArrangement::Disabled);
    t
}

/// Narrows a filled table's columns to one space of padding on the right.
pub fn compact(mut t: Table) -> Table {
    for c in t.column_iter_mut() {
        c.set_padding((0, 1));
    }
    t
}

/// Pass rates by tag, as lines within 80 columns (nothing for a run without tags).
pub fn tag_lines(s: &RunSummary) -> Vec<String> {
    let items: Vec<String> =
        s.tags.iter().map(|(tag, t)| format!("{tag} {}/{} ({:.0}%)", t.passed, t.tasks, t.pass_rate * 100.0)).collect();
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::from("by tag:");
    for (i, item) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        let fresh = line.len() <= "by tag:".len();
        if !fresh && line.chars().count() + 1 + item.chars().count() + sep.len() > 80 {
            lines.push(std::mem::replace(&mut line, " ".repeat("by tag:".len())));
        }
        line.push(' ');
        line.push_str(item);
        line.push_str(sep);
    }
    if !items.is_empty() {
        lines.push(line);
    }
    lines
}

/// The run's summary in a table that fits 80 columns: what became of the tasks (the words of
/// `model::Outcome`), the pass rate, cost, tokens and latency.
pub fn summary_table(s: &RunSummary) -> Table {
    let mut t = table();
    t.set_header(vec!["tasks", "passed", "failed", "errored", "infra", "pass", "cost $", "tokens", "p50/p95 s"]);
    t.add_row(vec![
        if s.tasks_finished == s.tasks_total {
            s.tasks_total.to_string()
        } else {
            format!("{}/{}", s.tasks_finished, s.tasks_total)
        },
        s.passed.to_string(),
        s.failed.to_string(),
        s.errored.to_string(),
        s.infra.to_string(),
        format!("{:.1}%", s.pass_rate * 100.0),
        s.cost_text(),
        s.total_tokens.to_string(),
        format!("{:.2}/{:.2}", s.latency_p50_seconds, s.latency_p95_seconds),
    ]);
    compact(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_fit_80_columns_for_a_big_run() {
        let v = ProgressView {
            total: 100_000,
            waiting: 90_000,
            running: 64,
            done: 99_999,
            passed: 45_000,
            failed: 30_000,
            errored: 20_000,
            infra: 4_999,
            cost_usd: 1234.5678,
            cost_unknown: 0,
            jobs_in_flight: 64,
            retries: 12,
        };
        let bar_line = counts_line(&v);
        assert!(bar_line.len() + 2 <= 80, "{} columns: {bar_line}", bar_line.len() + 2);
        // The bar's first line: spinner, elapsed, a 16-wide bar, position, rate, ETA, running.
        let first = format!(
            "⠁ 01:02:03 {} {}/{} {:.1}/s eta {} run {} retry {}",
            "=".repeat(16),
            v.done,
            v.total,
            999.9,
            "1h 2m",
            v.running,
            v.retries
        );
        assert!(first.chars().count() <= 80, "{} columns: {first}", first.chars().count());
        let plain = format!("{}/{} {:.1}/s eta {}: {}", v.done, v.total, 999.9, "1:02:03", counts_line(&v));
        assert!(plain.chars().count() <= 110, "plain progress stays one line: {plain}");
        let small = ProgressView {
            total: 2000,
            done: 1234,
            passed: 500,
            failed: 400,
            errored: 300,
            infra: 34,
            cost_usd: 12.345,
            ..v.clone()
        };
        let plain = format!("{}/{} {:.1}/s eta {}: {}", small.done, small.total, 99.9, "12:34", counts_line(&small));
        assert!(plain.chars().count() <= 80, "a run of thousands of tasks logs within 80 columns: {plain}");
    }
}

/// `text` after `label`, wrapped to `width` columns, its continuation lines indented under its
/// start: a long error is shown whole, never cut (an error's useful part is often its end).
pub fn wrapped(label: &str, text: &str, width: usize) -> String {
    let indent = " ".repeat(label.chars().count());
    let opts = textwrap::Options::new(width).initial_indent(label).subsequent_indent(&indent).break_words(true);
    textwrap::fill(&text.replace('\n', " "), opts)
}

/// `s` within `max` characters, its middle cut when it is longer: the start and the end are
/// where a difference or an error says what it is.
pub fn middle_cut(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(9) / 2;
    let head: String = s.chars().take(keep).collect();
    let tail: String = s.chars().skip(n - keep).collect();
    format!("{head} […{}…] {tail}", n - 2 * keep)
}

#[cfg(test)]
mod wrap_tests {
    use super::*;

    #[test]
    fn a_long_error_is_wrapped_whole_within_the_width() {
        let error: String = (0..120).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ");
        let shown = wrapped("outcome  errored: ", &error, 80);
        assert!(shown.lines().all(|l| l.chars().count() <= 80), "{shown}");
        assert!(shown.lines().skip(1).all(|l| l.starts_with(&" ".repeat(18))), "{shown}");
        let joined: Vec<&str> = shown.split_whitespace().skip(2).collect();
        assert_eq!(joined.join(" "), error, "nothing is cut");
    }

    #[test]
    fn a_middle_cut_keeps_the_start_and_the_end() {
        let s = format!("start {} end", "x".repeat(500));
        let cut = middle_cut(&s, 100);
        assert!(cut.starts_with("start ") && cut.ends_with(" end") && cut.contains("[…"), "{cut}");
        assert!(cut.chars().count() <= 100, "{}", cut.chars().count());
        assert_eq!(middle_cut("short", 100), "short");
    }
}

/// pass@k for every k, on one wrapped line, when the run has repetitions (`None` otherwise).
pub fn pass_at_k_line(s: &RunSummary) -> Option<String> {
    if s.pass_at_k.is_empty() {
        return None;
    }
    let ks: Vec<String> = s.pass_at_k.iter().map(|(k, v)| format!("pass@{k} {:.1}%", v * 100.0)).collect();
    let mut out = wrapped("repeated: ", &ks.join(", "), 80);
    // pass^k: every attempt passed; the flip rate: how often two attempts of a task disagree.
    if !s.pass_hat_k.is_empty() {
        let hats: Vec<String> = s.pass_hat_k.iter().map(|(k, v)| format!("pass^{k} {:.1}%", v * 100.0)).collect();
        out.push('\n');
        out.push_str(&wrapped("all pass:  ", &hats.join(", "), 80));
    }
    if let Some(f) = s.flip_rate {
        let mut flakiest: Vec<(&String, &f64)> = s.flip_rates.iter().collect();
        flakiest.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        let named: Vec<String> = flakiest.iter().take(5).map(|(id, r)| format!("{id} {:.0}%", *r * 100.0)).collect();
        let more = if flakiest.len() > 5 { format!(" and {} more", flakiest.len() - 5) } else { String::new() };
        let said = match named.is_empty() {
            true => format!("{:.1}% (no task flipped)", f * 100.0),
            false => format!("{:.1}%; flakiest: {}{more}", f * 100.0, named.join(", ")),
        };
        out.push('\n');
        out.push_str(&wrapped("flip rate: ", &said, 80));
    }
    Some(out)
}

/// The models the run's agents called, with their calls: which model a run measured.
pub fn models_line(s: &RunSummary) -> Option<String> {
    (!s.models.is_empty()).then(|| {
        let models: Vec<String> =
            s.models.iter().map(|(m, n)| format!("{m} ({n} call{})", if *n == 1 { "" } else { "s" })).collect();
        wrapped("models     ", &models.join(", "), 80)
    })
}

/// The lines under a run's summary table: what the numbers alone do not say.
pub fn summary_lines(s: &RunSummary) -> Vec<String> {
    let mut out: Vec<String> = [
        wait_line(s),
        models_line(s),
        without_result_line(s),
        changes_line(s),
        suspect_line(s),
        tampered_line(s),
        reward_line(s),
        roles_line(s),
    ]
    .into_iter()
    .flatten()
    .collect();
    out.extend(tag_lines(s));
    out.extend(pass_at_k_line(s));
    out.extend(adaptive_line(s));
    out
}

/// What an adaptive run's repetitions spent against the fixed design, and how they ended.
fn adaptive_line(s: &RunSummary) -> Option<String> {
    let a = s.adaptive.as_ref()?;
    let line = agenteval_judge::adaptive::spend_line(a, s.total_cost_usd);
    Some(wrapped("adaptive   ", line.trim_start_matches("adaptive repetitions: "), 80))
}

/// Model calls no task's result holds (tasks cancelled or cut short with their calls made),
/// said when there were any: made, and perhaps billed, though outside the figures above.
pub fn without_result_line(s: &RunSummary) -> Option<String> {
    (s.calls_without_result > 0).then(|| {
        let cost = s.cost_without_result_usd.map_or_else(|| "cost unknown".to_string(), |c| format!("at least ${c:.4}"));
        wrapped(
            "no result  ",
            &format!(
                "{} model call{} ({cost}) by tasks that ended with no result (cancelled or cut short), not in the figures above{}",
                s.calls_without_result,
                if s.calls_without_result == 1 { "" } else { "s" },
                s.run_cost_usd.map_or_else(String::new, |c| format!("; the run's calls cost ${c:.4} in all"))
            ),
            80,
        )
    })
}

/// The time the model gateway waited for the provider (rate limits, outages it retried
/// through), said when there was any: neither the model's time nor the agent's.
pub fn wait_line(s: &RunSummary) -> Option<String> {
    (s.provider_wait_seconds > 0.0).then(|| {
        wrapped(
            "waited     ",
            &format!(
                "{:.1} s for the model provider (rate limits or outages the gateway retried through)",
                s.provider_wait_seconds
            ),
            80,
        )
    })
}

/// Passes whose tests trusted files the agent changed outside its working folder, said apart
/// (`verify_in: same`): a pass that is not evidence alone.
pub fn changes_line(s: &RunSummary) -> Option<String> {
    (s.passed_with_changes > 0).then(|| {
        wrapped(
            "changes    ",
            &format!(
                "{} of the {} passed trusted files the agent changed outside its working folder (each task's artifacts/changed-outside.txt; environment.verify_in: fresh would not trust them)",
                s.passed_with_changes, s.passed
            ),
            80,
        )
    })
}

/// The mean reward as Harbor computes it (tasks without a reward left out), beside the pass rate,
/// for runs graded by rewards.
pub fn reward_line(s: &RunSummary) -> Option<String> {
    (!s.mean_reward.is_empty() || s.unscored > 0 || s.harbor_would_skip > 0).then(|| {
        let means: Vec<String> = s
            .mean_reward
            .iter()
            .map(|(k, v)| if k == "mean" { format!("{v:.3}") } else { format!("{k} {v:.3}") })
            .collect();
        let means = if means.is_empty() { "none".to_string() } else { means.join(", ") };
        let mut said = format!(
            "mean {means} as Harbor computes it ({} unscored task(s) left out); pass rate {:.1}%",
            s.unscored,
            s.pass_rate * 100.0
        );
        if s.harbor_would_skip > 0 {
            said.push_str(&format!(
                "; Harbor itself would skip {} task(s) whose task.toml it rejects, so its mean is over fewer (`show RUN TASK` says why)",
                s.harbor_would_skip
            ));
        }
        wrapped("reward     ", &said, 80)
    })
}

/// What the tasks' other actors (a simulated user, a judge) cost, apart from the agent's.
pub fn roles_line(s: &RunSummary) -> Option<String> {
    (!s.roles.is_empty()).then(|| {
        let roles: Vec<String> = s
            .roles
            .iter()
            .map(|(role, r)| match r.cost_usd {
                Some(c) => format!("{role} ${c:.4} ({} calls)", r.calls),
                None => format!("{role} cost unknown ({} calls)", r.calls),
            })
            .collect();
        let agent = s.total_cost_usd.map_or_else(|| "unknown".to_string(), |c| format!("${c:.4}"));
        wrapped(
            "roles      ",
            &format!("{} (the other actors' calls; the agent's cost is {agent}, apart)", roles.join(", ")),
            80,
        )
    })
}

/// Tasks whose grader doubted its verdict (a test log that claims passes the tests did not make).
pub fn suspect_line(s: &RunSummary) -> Option<String> {
    (s.suspect > 0).then(|| {
        wrapped(
            "suspect    ",
            &format!(
                "{} task(s) graded from a test log that claims passes the tests did not make (their verdicts stand; `show RUN TASK` says why)",
                s.suspect
            ),
            80,
        )
    })
}

/// Tasks whose agent changed files their grading reads (the tamper audit).
pub fn tampered_line(s: &RunSummary) -> Option<String> {
    (s.tampered > 0).then(|| {
        wrapped(
            "tampered   ",
            &format!(
                "{} task(s) whose agent changed files their grading reads, {} of them passed (verdicts stand; `show RUN TASK` names the files)",
                s.tampered, s.passed_tampered
            ),
            80,
        )
    })
}

/// A run's report for a terminal, within 80 columns: what ran, the summary table, pass rates by
/// tag, pass@k with repetitions, and why each task that did not pass did not.
pub fn report_text(
    meta: &agenteval_core::format::Metadata,
    s: &RunSummary,
    failures: &[agenteval_engine::report::Failure],
) -> String {
    let mut out = vec![
        format!("run        {} ({})", meta.run_id, meta.name),
        format!("status     {}", meta.status.as_str()),
        wrapped(
            "ran        ",
            &format!("benchmark {}, agent {}, backend {}", meta.benchmark, meta.agent, meta.backend),
            80,
        ),
    ];
    if let Some(g) = &meta.agent_git {
        let changed = if g.dirty { ", with changed files" } else { "" };
        out.push(wrapped("agent git  ", &format!("{}{changed}", g.commit), 80));
    }
    if let Some(why) = &meta.reason {
        out.push(wrapped("why        ", why, 80));
    }
    out.push(summary_table(s).to_string());
    if s.cost_unknown_tasks > 0 {
        out.push(wrapped(
            "cost       ",
            &format!(
                "unknown for {} task(s): a model without a known price; the total counts only the rest",
                s.cost_unknown_tasks
            ),
            80,
        ));
    }
    out.extend(models_line(s));
    out.extend(without_result_line(s));
    out.extend(wait_line(s));
    out.extend(changes_line(s));
    out.extend(suspect_line(s));
    out.extend(tampered_line(s));
    out.extend(reward_line(s));
    out.extend(roles_line(s));
    out.extend(tag_lines(s));
    out.extend(pass_at_k_line(s));
    if !failures.is_empty() {
        out.push(format!("not passed ({})", failures.len()));
        let w = failures.iter().map(|f| f.task_id.chars().count()).max().unwrap_or(0).clamp(4, 30);
        for f in failures {
            let label = format!("  {:<w$} ", middle_cut(&f.task_id, w));
            out.push(wrapped(&label, &f.reason, 80));
        }
    }
    if s.tasks_finished < s.tasks_total {
        out.push(wrapped(
            "",
            &format!(
                "{} of {} tasks have no result: `agenteval resume {}` finishes the run.",
                s.tasks_total - s.tasks_finished,
                s.tasks_total,
                meta.run_id
            ),
            80,
        ));
    }
    out.join("\n") + "\n"
}

/// A judged run's verdict, its baseline and each gate, from the bundle's `comparison.json`, as
/// lines within 80 columns.
pub fn verdict_lines(j: &Judgement) -> Vec<String> {
    let against = match j.baseline() {
        Some(b) => format!(" against {} ({})", b.run_id, b.name),
        None => " (no baseline: judged alone)".to_string(),
    };
    let mut out = vec![wrapped("verdict    ", &format!("{}{against}", j.outcome().as_str()), 80)];
    for g in &j.verdict.gates {
        let word = agenteval_judge::report::gate_word(g.decision());
        let figure = |v: f64| agenteval_judge::report::gate_figure(&g.gate, v);
        let value = g.value.map_or("-".to_string(), figure);
        out.push(wrapped(&format!("  {word} "), &format!("{} {value} (limit {})", g.gate, figure(g.limit)), 80));
    }
    out
}
