//! Terminal output: logging setup, the progress bar, tables and colour (off under NO_COLOR or
//! when not writing to a terminal).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use agenteval_core::RunId;
use agenteval_core::model::{RunStatus, RunSummary};
use agenteval_engine::controller::{Progress, ProgressView};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
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
    format!("{level},opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off")
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

/// The progress bar: tasks done out of total, with running, failed, pass rate and cost.
pub struct Bar {
    bar: Mutex<Option<ProgressBar>>,
    enabled: bool,
}

impl Bar {
    pub fn new(enabled: bool) -> Self {
        Bar { bar: Mutex::new(None), enabled: enabled && std::io::stderr().is_terminal() }
    }
}

impl Progress for Bar {
    fn start(&self, run_id: &RunId, bundle_uri: &str, total: u64) {
        if !self.enabled {
            return;
        }
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(10));
        let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} tasks  {msg}")
            .expect("valid template")
            .progress_chars("=> ");
        pb.set_style(style);
        pb.enable_steady_tick(Duration::from_millis(200));
        pb.println(format!("run {run_id}\nbundle {bundle_uri}"));
        *self.bar.lock().expect("bar lock") = Some(pb);
    }

    fn update(&self, v: &ProgressView) {
        if let Some(pb) = self.bar.lock().expect("bar lock").as_ref() {
            pb.set_position(v.done);
            let rate = if v.done == 0 { 0.0 } else { 100.0 * v.passed as f64 / v.done as f64 };
            pb.set_message(format!(
                "queued {} | running {} | failed {} | pass {:.1}% | ${:.4}{}",
                v.waiting,
                v.running,
                v.failed,
                rate,
                v.cost_usd,
                if v.retries > 0 { format!(" | retries {}", v.retries) } else { String::new() }
            ));
        }
    }

    fn message(&self, text: &str) {
        match self.bar.lock().expect("bar lock").as_ref() {
            Some(pb) => pb.println(text),
            None if self.enabled => eprintln!("{text}"),
            None => tracing::info!("{text}"),
        }
    }

    fn finish(&self) {
        if let Some(pb) = self.bar.lock().expect("bar lock").take() {
            pb.finish_and_clear();
        }
    }
}

pub fn table() -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t
}

pub fn summary_table(s: &RunSummary) -> Table {
    let mut t = table();
    t.set_header(vec![
        "tasks",
        "finished",
        "passed",
        "failed",
        "pass rate",
        "cost (USD)",
        "tokens",
        "p50 (s)",
        "p95 (s)",
    ]);
    t.add_row(vec![
        s.tasks_total.to_string(),
        s.tasks_finished.to_string(),
        s.passed.to_string(),
        s.failed.to_string(),
        format!("{:.1}%", s.pass_rate * 100.0),
        s.cost_text(),
        s.total_tokens.to_string(),
        format!("{:.3}", s.latency_p50_seconds),
        format!("{:.3}", s.latency_p95_seconds),
    ]);
    t
}
