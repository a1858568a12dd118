//! `submit --matrix KEY=A,B …`: one run per combination of the matrix's values, all driven by
//! this controller as one set (one fleet of job slots, one budget), then a table of how each
//! combination did and the `compare --set` that puts them side by side.

use std::path::Path;
use std::sync::{Arc, Mutex};

use agenteval_core::config::{ConfigError, LoadedConfig};
use agenteval_core::format::{SetMember, SetValue};
use agenteval_core::model::RunStatus;
use agenteval_core::{Error, RunId};
use agenteval_engine::controller::set::{SetRun, SharedFleet};
use agenteval_engine::controller::{ControllerOptions, Progress, ProgressView, RunOutcome};
use serde_json::json;

use crate::cli::{CassetteArgs, Naming, RunConfigArgs};
use crate::output::{self, Bar};
use crate::session::{config_failure, exe, load_config, start};
use crate::telemetry::{Settings, Telemetry};
use crate::wiring::Wiring;
use crate::{Failure, exit};
use agenteval_engine::controller::start::Start;

/// More combinations than this is a typo more often than a plan (and as many bundles).
pub const MAX_COMBINATIONS: usize = 64;

/// One `--matrix` flag: a key path and the values it takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<AxisValue>,
}

/// One value of an axis: as the user wrote it (`@p1.txt`), and as it goes into the config.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisValue {
    pub shown: String,
    /// The `--set` value: the text itself, or a file's contents as a quoted string.
    pub set: String,
}

/// Parses `--matrix` flags. `KEY=A,B,C` gives the key three values; a value `@FILE` is that
/// file's contents (a prompt), read now, relative to the current folder.
pub fn parse(flags: &[String], cwd: &Path) -> Result<Vec<Axis>, Error> {
    let mut axes: Vec<Axis> = Vec::new();
    for flag in flags {
        let Some((key, values)) = flag.split_once('=') else {
            return Err(Error::invalid(format!("--matrix {flag}: expected KEY.PATH=VALUE,VALUE,…")));
        };
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(Error::invalid(format!("--matrix {flag}: `{key}` is not a key path like `agent.model`")));
        }
        if axes.iter().any(|a| a.key == key) {
            return Err(Error::invalid(format!("--matrix {key} is given twice: list all its values in one flag")));
        }
        let mut parsed = Vec::new();
        for raw in values.split(',').map(str::trim) {
            if raw.is_empty() {
                return Err(Error::invalid(format!("--matrix {flag}: an empty value (two commas, or one at an end)")));
            }
            if parsed.iter().any(|v: &AxisValue| v.shown == raw) {
                return Err(Error::invalid(format!("--matrix {flag}: `{raw}` is listed twice")));
            }
            let set = match raw.strip_prefix('@') {
                Some(file) => {
                    let path = cwd.join(file);
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        Error::invalid(format!("--matrix {key}={raw}: cannot read {}: {e}", path.display()))
                    })?;
                    // Quoted: a prompt is text, whatever YAML would make of it unquoted.
                    serde_json::to_string(&text).expect("strings serialize")
                }
                None => raw.to_string(),
            };
            parsed.push(AxisValue { shown: raw.to_string(), set });
        }
        axes.push(Axis { key: key.to_string(), values: parsed });
    }
    let n: usize = axes.iter().map(|a| a.values.len()).product();
    if n > MAX_COMBINATIONS {
        return Err(Error::invalid(format!(
            "the matrix makes {n} combinations; at most {MAX_COMBINATIONS} are run at once (split it)"
        )));
    }
    Ok(axes)
}

/// Every combination, the first axis varying slowest: `[(key, value), …]` per combination.
pub fn combinations(axes: &[Axis]) -> Vec<Vec<(&str, &AxisValue)>> {
    let mut out: Vec<Vec<(&str, &AxisValue)>> = vec![vec![]];
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                axis.values.iter().map(move |v| {
                    let mut c = prefix.clone();
                    c.push((axis.key.as_str(), v));
                    c
                })
            })
            .collect();
    }
    out
}

/// One combination ready to run.
struct Member {
    loaded: LoadedConfig,
    member: SetMember,
}

/// Loads the config once per combination. Every combination's problems are reported together,
/// each under the combination that has it: nothing starts until all of them load.
fn load_members(args: &RunConfigArgs, naming: &Naming, axes: &[Axis], set_id: &str) -> Result<Vec<Member>, Failure> {
    let combos = combinations(axes);
    let size = combos.len() as u32;
    let mut members = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for (i, combo) in combos.iter().enumerate() {
        let mut sets = args.overrides();
        sets.extend(combo.iter().map(|(k, v)| format!("{k}={}", v.set)));
        let member = SetMember {
            id: set_id.to_string(),
            position: i as u32,
            size,
            values: combo.iter().map(|(k, v)| SetValue { key: k.to_string(), value: v.shown.clone() }).collect(),
        };
        match load_config(&args.config, &sets) {
            Ok(mut loaded) => {
                loaded.config.name =
                    format!("{} [{}]", naming.name(&loaded.config.name, &loaded.config.agent), member.label());
                loaded.agent_flags = args.agent_flags();
                members.push(Member { loaded, member });
            }
            Err(e) => failed.push(format!("combination {} ({}): {}", i + 1, member.label(), shown_problems(&e))),
        }
    }
    if !failed.is_empty() {
        return Err(Failure { code: exit::USAGE, error: anyhow::anyhow!(failed.join("\n")) });
    }
    Ok(members)
}

/// A config error with a prompt file's contents (quoted into an override) cut out.
fn shown_problems(e: &ConfigError) -> String {
    let text = e.to_string();
    let clip = |l: &str| {
        if l.chars().count() > 300 { format!("{}…", l.chars().take(300).collect::<String>()) } else { l.to_string() }
    };
    text.lines().map(clip).collect::<Vec<_>>().join("\n")
}

/// Runs every combination of the matrix as one set and prints how each did.
// Long: loading, checking, wiring the shared options and printing are one sequence.
pub async fn submit_matrix(
    args: &RunConfigArgs,
    naming: &Naming,
    matrix: &[String],
    json: bool,
    cassettes: &CassetteArgs,
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    let cwd = std::env::current_dir().map_err(|e| Error::io("reading the current folder", e))?;
    let axes = parse(matrix, &cwd)?;
    // The base config carries the set's fleet size and budget, and must load on its own too.
    let base = load_config(&args.config, &args.overrides()).map_err(config_failure)?;
    let set_id = RunId::new().to_string();
    let members = load_members(args, naming, &axes, &set_id)?;
    let wiring = Wiring::new(exe()?, base.config.aws.as_ref());
    // Every combination resolved and checked before any starts.
    let how =
        Start { cassettes: cassettes.cassettes.as_deref().map(|d| (d, cassettes.cassette_mode)), preflight: true };
    let mut ready = Vec::with_capacity(members.len());
    for m in &members {
        let r = start(&wiring, m.loaded.clone(), how).await.map_err(|f| Failure {
            code: f.code,
            error: anyhow::anyhow!("combination {} ({}): {}", m.member.position + 1, m.member.label(), f.error),
        })?;
        ready.push(r);
    }
    let fleet = SharedFleet::new(
        base.config.backend.max_concurrent_jobs as usize,
        members.len() as u32,
        base.config.max_run_cost_usd,
    );
    let settings = Settings::resolve(Some(&base.config.telemetry));
    telemetry.connect_controller(&settings).await;
    let shown = (!json && !quiet).then(|| Arc::new(Bar::new()));
    let set_progress = Arc::new(SetProgress::new(&set_id, members.len(), shown));
    let (started, interrupt) = crate::session::interrupts(set_progress.clone());
    let mut runs = Vec::new();
    for (m, ready) in members.iter().zip(&ready) {
        let progress: Arc<dyn Progress> =
            Arc::new(MemberProgress { set: set_progress.clone(), label: m.member.label(), started: started.clone() });
        let opts = ControllerOptions {
            rounds: None,
            resolver: wiring.clone(),
            progress,
            interrupt: interrupt.clone(),
            journal: Some(telemetry.journal()),
            worker_env: telemetry.worker_env(&settings),
            rerun_of: None,
            set: Some(SetRun { member: m.member.clone(), fleet: fleet.clone() }),
        };
        let (fleet, position) = (fleet.clone(), m.member.position);
        runs.push(async move {
            let outcome = ready.submit(opts).await;
            // A run that failed before driving never said it was done: its share is the others'.
            fleet.waiting(position, false);
            outcome
        });
    }
    let outcomes = futures::future::join_all(runs).await;
    set_progress.finish_all();
    report(&set_id, &members, outcomes, (json, quiet), base.config.max_run_cost_usd)
}

/// The set's table (or JSON) and its exit code: 0 when every run completed, 3 when one did not,
/// 4 when one failed to run at all.
fn report(
    set_id: &str,
    members: &[Member],
    outcomes: Vec<agenteval_core::Result<RunOutcome>>,
    (json, quiet): (bool, bool),
    budget: Option<f64>,
) -> Result<u8, Failure> {
    let mut code = exit::OK;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (m, outcome) in members.iter().zip(outcomes) {
        match outcome {
            Ok(o) => {
                if o.reason.is_some() {
                    code = code.max(exit::FAILED);
                    errors.push(format!("{}: {}", m.member.label(), o.reason.clone().unwrap_or_default()));
                } else if o.status != RunStatus::Complete {
                    code = code.max(exit::INCOMPLETE);
                }
                rows.push((m, Some(o)));
            }
            Err(e) => {
                code = code.max(exit::FAILED);
                errors.push(format!("{}: {e}", m.member.label()));
                rows.push((m, None));
            }
        }
    }
    // What the set spent together, and by how much past its budget when the budget stopped it.
    let spent: f64 = rows.iter().filter_map(|(_, o)| o.as_ref()).map(|o| o.summary.known_cost()).sum();
    let stopped = rows.iter().any(|(_, o)| o.as_ref().is_some_and(|o| o.status == RunStatus::BudgetExceeded));
    let over = budget.filter(|_| stopped).map(|max| (spent - max).max(0.0));
    if json {
        let runs: Vec<serde_json::Value> = rows
            .iter()
            .map(|(m, o)| {
                let values: serde_json::Map<String, serde_json::Value> =
                    m.member.values.iter().map(|v| (v.key.clone(), json!(v.value))).collect();
                json!({
                    "position": m.member.position,
                    "combination": values,
                    "label": m.member.label(),
                    "name": m.loaded.config.name,
                    "run_id": o.as_ref().map(|o| o.run_id),
                    "status": o.as_ref().map(|o| o.status),
                    "bundle": o.as_ref().map(|o| o.bundle_uri.clone()),
                    "reason": o.as_ref().and_then(|o| o.reason.clone()),
                    "summary": o.as_ref().map(|o| o.summary.clone()),
                })
            })
            .collect();
        say!(
            "{}",
            json!({ "set_id": set_id, "exit_code": code, "runs": runs, "errors": errors,
                    "budget_usd": budget, "spent_usd": spent, "over_budget_usd": over })
        );
    } else {
        let mut t = output::table();
        t.set_header(["#", "combination", "run", "status", "passed", "cost"]);
        for (m, o) in &rows {
            match o {
                Some(o) => {
                    let s = &o.summary;
                    t.add_row([
                        format!("{}", m.member.position + 1),
                        crate::judging::wrap_label(&m.member.label(), 24),
                        o.run_id.to_string().chars().take(13).collect(),
                        output::status_word(o.status).to_string(),
                        format!("{}/{}", s.passed, s.tasks_total),
                        s.cost_dollars(),
                    ]);
                }
                None => {
                    let label = crate::judging::wrap_label(&m.member.label(), 24);
                    let n = format!("{}", m.member.position + 1);
                    t.add_row([n, label, "-".into(), "error".into(), "-".into(), "-".into()]);
                }
            }
        }
        if !quiet {
            say!("{}", output::compact(t));
        }
        if let (Some(max), Some(over)) = (budget, over) {
            say!(
                "spent ${spent:.4} of the set's ${max:.4} budget (over by ${over:.4}: the calls in flight when it was reached)"
            );
        }
        say!("set     {set_id}");
        if !quiet {
            say!("compare agenteval compare --set {set_id}");
        }
    }
    if !errors.is_empty() {
        return Err(Failure { code, error: anyhow::anyhow!(errors.join("\n")) });
    }
    Ok(code)
}

/// One progress display for the whole set: the tasks of every run in one bar, messages marked
/// with the combination they concern.
pub(crate) struct SetProgress {
    set_id: String,
    runs: usize,
    bar: Option<Arc<Bar>>,
    state: Mutex<SetState>,
}

#[derive(Default)]
struct SetState {
    views: std::collections::BTreeMap<String, ProgressView>,
    begun: bool,
    finished: usize,
}

impl SetProgress {
    fn new(set_id: &str, runs: usize, bar: Option<Arc<Bar>>) -> Self {
        SetProgress { set_id: set_id.into(), runs, bar, state: Mutex::new(SetState::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn member_started(&self, label: &str, run_id: &RunId, total: u64) {
        let Some(bar) = &self.bar else { return };
        let mut st = self.lock();
        st.views.insert(label.into(), ProgressView { total, ..Default::default() });
        if !st.begun {
            st.begun = true;
            bar.begin(&format!("set {} ({} runs)", self.set_id, self.runs), total);
        }
        bar.message(&format!("run {run_id} [{label}]"));
    }

    fn member_update(&self, label: &str, view: &ProgressView) {
        let Some(bar) = &self.bar else { return };
        let sum = {
            let mut st = self.lock();
            st.views.insert(label.into(), view.clone());
            st.views.values().fold(ProgressView::default(), |mut a, v| {
                a.total += v.total;
                a.waiting += v.waiting;
                a.running += v.running;
                a.done += v.done;
                a.passed += v.passed;
                a.failed += v.failed;
                a.errored += v.errored;
                a.infra += v.infra;
                a.cost_usd += v.cost_usd;
                a.cost_unknown += v.cost_unknown;
                a.jobs_in_flight += v.jobs_in_flight;
                a.retries += v.retries;
                a
            })
        };
        bar.update(&sum);
    }

    fn member_finished(&self) {
        let done = {
            let mut st = self.lock();
            st.finished += 1;
            st.finished == self.runs
        };
        if done {
            self.finish_all();
        }
    }

    fn finish_all(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl Progress for SetProgress {
    fn message(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.message(text),
            None => eprintln!("{text}"),
        }
    }
}

/// What one run of the set tells the set's display.
struct MemberProgress {
    set: Arc<SetProgress>,
    label: String,
    started: Arc<std::sync::atomic::AtomicBool>,
}

impl Progress for MemberProgress {
    fn start(&self, run_id: &RunId, _bundle_uri: &str, total: u64) {
        self.started.store(true, std::sync::atomic::Ordering::SeqCst);
        self.set.member_started(&self.label, run_id, total);
    }
    fn update(&self, view: &ProgressView) {
        self.set.member_update(&self.label, view);
    }
    fn message(&self, text: &str) {
        if self.set.bar.is_some() {
            self.set.message(&format!("[{}] {text}", self.label));
        }
    }
    fn finish(&self) {
        self.set.member_finished();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_once_the_first_axis_slowest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p1.txt"), "Be brief: yes.\n").unwrap();
        let axes = parse(&["agent.model=a,b,c".into(), "agent.system=@p1.txt,plain".into()], dir.path()).unwrap();
        let combos = combinations(&axes);
        assert_eq!(combos.len(), 6);
        let shown: Vec<String> = combos
            .iter()
            .map(|c| c.iter().map(|(k, v)| format!("{k}={}", v.shown)).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(shown[0], "agent.model=a agent.system=@p1.txt");
        assert_eq!(shown[1], "agent.model=a agent.system=plain");
        assert_eq!(shown[5], "agent.model=c agent.system=plain");
        // A prompt file goes in as a quoted string, not as YAML (`Be brief: yes.` is a map).
        assert_eq!(combos[0][1].1.set, "\"Be brief: yes.\\n\"");
    }

    #[test]
    fn bad_flags_are_named() {
        let here = Path::new(".");
        let err = |flags: &[&str]| {
            parse(&flags.iter().map(|s| s.to_string()).collect::<Vec<_>>(), here).unwrap_err().to_string()
        };
        assert!(err(&["agent.model"]).contains("expected KEY.PATH=VALUE"));
        assert!(err(&["agent.model=a,,b"]).contains("empty value"));
        assert!(err(&["agent.model=a", "agent.model=b"]).contains("given twice"));
        assert!(err(&["agent.model=a,a"]).contains("listed twice"));
        assert!(err(&["agent.system=@missing-prompt.txt"]).contains("cannot read"));
        let many: Vec<String> =
            (0..3).map(|i| format!("k{i}.x={}", (0..5).map(|v| v.to_string()).collect::<Vec<_>>().join(","))).collect();
        assert!(parse(&many, here).unwrap_err().to_string().contains("125 combinations"));
    }
}
