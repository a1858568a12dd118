//! What a CI system shows of a run: `--junit FILE` on `submit`, `report` and `compare` (one test
//! case per task attempt, the gates as a suite of their own) and, when `$GITHUB_STEP_SUMMARY`
//! names a file, the run's report and the comparison's table appended to it as Markdown.

use std::io::Write;
use std::path::Path;

use agenteval_core::layout;
use agenteval_core::model::{Outcome, TaskResult};
use agenteval_core::taskpack::read_task_file;
use agenteval_core::traits::{BundleStore, Resolver, RunIndex};
use agenteval_core::{Error, RunId};
use agenteval_engine::bundle::{self, Metadata, read_json};
use agenteval_engine::controller;
use agenteval_interchange::junit::{self, Case, Verdict as Junit};
use agenteval_judge::compare::Comparison;
use agenteval_judge::gates::{Decision, Verdict};

use crate::Failure;

/// The variable GitHub Actions names its step summary file in.
pub const STEP_SUMMARY: &str = "GITHUB_STEP_SUMMARY";

/// GitHub refuses a step summary over 1 MiB; what is appended stays under it.
const STEP_SUMMARY_MAX: usize = 1000 * 1024;

/// Each task of a run as a test case: its finished attempt's verdict and why, or skipped when
/// it has no result (the run stopped before it).
pub async fn run_cases(store: &dyn BundleStore, run: &RunId, meta: &Metadata) -> Result<Vec<Case>, Failure> {
    let table = bundle::TaskTable::read(store, run).await?;
    let suite = format!("{} ({})", meta.name, run);
    let mut cases = Vec::with_capacity(table.len());
    for id in table.ids() {
        let result = match read_task_file(store, run, id, layout::TASK_RESULT).await {
            Ok(bytes) => Some(
                serde_json::from_slice::<TaskResult>(&bytes)
                    .map_err(|e| Error::invalid(format!("run {run}: task {id}'s result.json cannot be read: {e}")))?,
            ),
            Err(e) if e.kind() == agenteval_core::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        cases.push(match result {
            None => Case {
                suite: suite.clone(),
                name: id.to_string(),
                seconds: 0.0,
                verdict: Junit::Skipped,
                why: format!("not run: the run ended {}", meta.status.as_str()),
                properties: vec![],
            },
            Some(r) => case_of(&suite, &r),
        });
    }
    Ok(cases)
}

fn case_of(suite: &str, r: &TaskResult) -> Case {
    let verdict = match r.outcome() {
        Outcome::Passed => Junit::Passed,
        Outcome::Failed => Junit::Failed,
        Outcome::Errored => Junit::Errored,
        Outcome::Infra => Junit::Infra,
    };
    let mut why = r.why();
    // A pass the audit doubts is shown as one, with why not to believe it.
    if r.passed && !r.tampered.is_empty() {
        why = format!("passed, but the tamper audit names {} file(s) its grading reads", r.tampered.len());
    }
    let mut properties = vec![
        ("outcome".to_string(), r.outcome().as_str().to_string()),
        ("terminated_by".into(), r.agent.terminated_by.as_str().to_string()),
        ("attempt".into(), r.attempt.to_string()),
        ("tokens".into(), r.agent.total_tokens.to_string()),
    ];
    if !r.agent.cost_unknown {
        properties.push(("cost_usd".into(), format!("{:.6}", r.total_cost_usd())));
    }
    if !r.tampered.is_empty() {
        properties.push(("tampered".into(), r.tampered.len().to_string()));
    }
    Case {
        suite: suite.to_string(),
        name: r.task_id.to_string(),
        seconds: r.agent.wall_seconds,
        verdict,
        why,
        properties,
    }
}

/// A task that passed in the base (as a rate over its repetitions) and passes less now says so
/// first in its why.
fn mark_regressions(cases: &mut [Case], c: &Comparison) {
    for r in &c.regressions {
        let base = r.task_id.as_str();
        for case in cases.iter_mut().filter(|k| k.name == base || k.name.split("@r").next() == Some(base)) {
            let said = format!(
                "regressed: passed {:.0}% of its repetitions in {}, {:.0}% now",
                r.base_pass * 100.0,
                c.base.run_id,
                r.cand_pass * 100.0
            );
            case.why = if case.why.is_empty() { said } else { format!("{said}; {}", case.why) };
            case.properties.push(("regressed".into(), "true".into()));
        }
    }
}

/// `report RUN --junit FILE`: the run's tasks, and the gates of its kept verdict.
pub async fn report_junit(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    run: &RunId,
    path: &Path,
) -> Result<(), Failure> {
    let located = controller::locate(resolver, index, run).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, run, layout::METADATA).await?;
    let mut cases = run_cases(store, run, &meta).await?;
    if let Some(j) = agenteval_judge::judgement::Judgement::read(store, run).await? {
        if let Some(c) = &j.comparison {
            mark_regressions(&mut cases, c);
        }
        cases.extend(gate_cases(&j.verdict));
    }
    write_junit(path, &meta.name, &cases)
}

/// The gates as test cases: a gate that failed is a failure, with its line.
pub fn gate_cases(v: &Verdict) -> Vec<Case> {
    v.gates
        .iter()
        .map(|g| Case {
            suite: "gates".into(),
            name: g.gate.clone(),
            seconds: 0.0,
            verdict: match g.decision() {
                Decision::Go => Junit::Passed,
                Decision::NoGo => Junit::Failed,
                // Never shown as a pass: CI shows it as an error to look at.
                Decision::Inconclusive => Junit::Inconclusive,
            },
            why: if g.passed { String::new() } else { format!("{}: {}", g.decision().as_str(), g.detail) },
            properties: vec![("detail".into(), g.detail.clone())],
        })
        .collect()
}

/// Writes the JUnit file (its folder made).
pub fn write_junit(path: &Path, name: &str, cases: &[Case]) -> Result<(), Failure> {
    let doc = junit::document(name, cases).map_err(Error::from)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(path, doc).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(())
}

/// Appends `md` to the step summary when `$GITHUB_STEP_SUMMARY` names a file; nothing otherwise.
pub fn step_summary(md: &str) -> Result<(), Failure> {
    let Some(path) = std::env::var_os(STEP_SUMMARY).filter(|p| !p.is_empty()) else { return Ok(()) };
    let path = std::path::PathBuf::from(path);
    let mut text = md.to_string();
    if text.len() > STEP_SUMMARY_MAX {
        let mut cut = STEP_SUMMARY_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n\n… (cut to GitHub's step summary limit; the full report is in the run's bundle)\n");
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::io(format!("opening {STEP_SUMMARY} ({})", path.display()), e))?;
    f.write_all(format!("{}\n", text.trim_end()).as_bytes())
        .map_err(|e| Error::io(format!("writing {STEP_SUMMARY} ({})", path.display()), e))?;
    Ok(())
}

/// Whether CI asked for anything: a JUnit file, or a step summary (`$GITHUB_STEP_SUMMARY`).
pub fn wanted(junit: Option<&Path>) -> bool {
    junit.is_some() || std::env::var_os(STEP_SUMMARY).is_some_and(|p| !p.is_empty())
}

/// What CI gets of a judged or plain run: `--junit` (the run's tasks, then the gates) and the
/// step summary (the run's report, then the comparison and the gates' verdict).
pub async fn after(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    run: &RunId,
    junit: Option<&Path>,
    judged: Option<(Option<&Comparison>, Option<&Verdict>)>,
    with_report: bool,
) -> Result<(), Failure> {
    if !wanted(junit) {
        return Ok(());
    }
    let summary_wanted = std::env::var_os(STEP_SUMMARY).is_some_and(|p| !p.is_empty());
    let located = controller::locate(resolver, index, run).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, run, layout::METADATA).await?;
    if let Some(path) = junit {
        let mut cases = run_cases(store, run, &meta).await?;
        if let Some((Some(c), _)) = judged {
            mark_regressions(&mut cases, c);
        }
        if let Some((_, Some(v))) = judged {
            cases.extend(gate_cases(v));
        }
        write_junit(path, &meta.name, &cases)?;
    }
    if summary_wanted {
        let mut md = String::new();
        if with_report && let Ok(r) = store.get(run, layout::REPORT).await {
            md.push_str(&String::from_utf8_lossy(&r));
            md.push('\n');
        }
        match judged {
            Some((Some(c), v)) => md.push_str(&agenteval_judge::report::md(c, v)),
            Some((None, Some(v))) => {
                md.push_str("## Gates (no baseline to compare with)\n\n| gate | | detail |\n|---|---|---|\n");
                for g in &v.gates {
                    let ok = match g.decision() {
                        Decision::Go => "GO",
                        Decision::NoGo => "**NO-GO**",
                        Decision::Inconclusive => "**INCONCLUSIVE**",
                    };
                    md.push_str(&format!("| `{}` | {ok} | {} |\n", g.gate, g.detail.replace('|', "\\|")));
                }
            }
            _ => {}
        }
        // A summary CI cannot take never fails the run it summarises.
        if let Err(f) = step_summary(&md) {
            tracing::warn!("{STEP_SUMMARY} not written: {}", f.error);
        }
    }
    Ok(())
}
