//! `validate-bundle`: required files, checksums, and agreement between the files.

use std::collections::BTreeSet;

use agenteval_core::format::{Manifest, Metadata, ResultLine};
use agenteval_core::layout;
use agenteval_core::model::{EvaluatorScore, RunStatus, RunSummary, TaskResult, TraceEvent};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

use super::{TaskTable, read_json, sha256_hex, summarize};

/// What `validate-bundle` found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Validation {
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
    pub files_checked: u64,
    pub tasks_with_results: u64,
    pub sealed: bool,
    pub status: Option<RunStatus>,
}

impl Validation {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Whether a document's `schema_version` is one this build reads: the same major version.
fn compatible(version: &str) -> bool {
    version.split('.').next() == SCHEMA_VERSION.split('.').next()
}

fn check_version(path: &str, version: &str, v: &mut Validation) {
    if !compatible(version) {
        v.problems.push(format!(
            "{path}: schema_version {version} is not readable by this agenteval (reads {SCHEMA_VERSION} and same-major versions)"
        ));
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
}

/// `results.jsonl` against the task folders: one line per finished task, each saying what its
/// `result.json` says. Bundles sealed before the file existed have none (a warning).
async fn check_results(
    store: &dyn BundleStore,
    run: &RunId,
    present: bool,
    expected: &[u8],
    v: &mut Validation,
) -> Result<()> {
    if !present {
        v.warnings
            .push(format!("{}: missing (sealed by an older agenteval); readers use the task folders", layout::RESULTS));
        return Ok(());
    }
    // A task listed twice in `tasks.jsonl` is reported elsewhere; only the file's own lines are
    // held to one each.
    let parse =
        |bytes: &[u8], strict: bool| -> std::result::Result<std::collections::BTreeMap<String, ResultLine>, String> {
            let mut out = std::collections::BTreeMap::new();
            for (i, line) in bytes.split(|&b| b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
                let r: ResultLine = serde_json::from_slice(line).map_err(|e| format!("line {}: {e}", i + 1))?;
                if out.insert(r.task_id.to_string(), r).is_some() && strict {
                    return Err(format!("line {}: a task listed twice", i + 1));
                }
            }
            Ok(out)
        };
    let want = parse(expected, false).map_err(|e| Error::internal(format!("recomputed results: {e}")))?;
    let got = match parse(&store.get(run, layout::RESULTS).await?, true) {
        Ok(g) => g,
        Err(e) => {
            v.problems.push(format!("{}: {e}", layout::RESULTS));
            return Ok(());
        }
    };
    for (id, line) in &want {
        match got.get(id) {
            None => v.problems.push(format!("{}: task {id} has a result but no line", layout::RESULTS)),
            Some(g) if g != line => {
                v.problems.push(format!("{}: the line of task {id} disagrees with its result.json", layout::RESULTS))
            }
            Some(_) => {}
        }
    }
    for id in got.keys().filter(|id| !want.contains_key(*id)) {
        v.problems.push(format!("{}: task {id} has a line but no result", layout::RESULTS));
    }
    Ok(())
}

/// Checks a bundle: required files, checksums, and that its files agree with each other.
pub async fn validate(store: &dyn BundleStore, run: &RunId) -> Result<Validation> {
    let mut v = Validation::default();
    let files = store.list(run, "").await?;
    if files.is_empty() {
        return Err(Error::not_found(format!("no bundle at {}", store.bundle_uri(run))));
    }
    let present: BTreeSet<&str> = files.iter().map(String::as_str).collect();
    for req in layout::REQUIRED {
        if !present.contains(req) {
            v.problems.push(format!("{req}: missing"));
        }
    }
    let meta: Option<Metadata> = match read_json(store, run, layout::METADATA).await {
        Ok(m) => Some(m),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => {
            v.problems.push(e.to_string());
            None
        }
    };
    if let Some(m) = &meta {
        v.sealed = m.sealed;
        v.status = Some(m.status);
        check_version(layout::METADATA, &m.schema_version, &mut v);
        if m.run_id != *run {
            v.problems.push(format!("{}: run_id {} does not match the bundle's run {run}", layout::METADATA, m.run_id));
        }
        if !m.sealed {
            v.warnings.push(format!(
                "bundle is not sealed (status {}): its run is still going or its controller died; `agenteval resume {run}` finishes it",
                m.status.as_str()
            ));
        }
    }
    let sealed = meta.as_ref().is_some_and(|m| m.sealed);
    if sealed {
        for req in layout::REQUIRED_SEALED {
            if !present.contains(req) {
                v.problems.push(format!("{req}: missing"));
            }
        }
    }

    // Checksums.
    if sealed && present.contains(layout::MANIFEST) {
        match read_json::<Manifest>(store, run, layout::MANIFEST).await {
            Err(e) => v.problems.push(e.to_string()),
            Ok(man) => {
                check_version(layout::MANIFEST, &man.schema_version, &mut v);
                for (path, entry) in &man.files {
                    if !present.contains(path.as_str()) {
                        v.problems.push(format!("{path}: listed in the manifest but missing"));
                        continue;
                    }
                    let bytes = store.get(run, path).await?;
                    v.files_checked += 1;
                    if bytes.len() as u64 != entry.size {
                        v.problems.push(format!(
                            "{path}: size {} differs from the manifest's {}",
                            bytes.len(),
                            entry.size
                        ));
                    } else if sha256_hex(&bytes) != entry.sha256 {
                        v.problems.push(format!("{path}: sha256 differs from the manifest (the file was changed)"));
                    }
                }
                for path in &files {
                    if path != layout::MANIFEST && !man.files.contains_key(path) {
                        v.problems.push(format!("{path}: not listed in the manifest"));
                    }
                }
            }
        }
    }

    // Tasks.
    let specs = match TaskTable::read(store, run).await {
        Ok(t) => t,
        Err(e) => {
            if e.kind() != ErrorKind::NotFound {
                v.problems.push(e.to_string());
            }
            TaskTable::default()
        }
    };
    let known: BTreeSet<&str> = specs.ids().iter().map(|t| t.as_str()).collect();
    if let Some(m) = &meta
        && !specs.is_empty()
        && specs.len() as u64 != m.tasks_total
    {
        v.problems.push(format!("{}: {} tasks, metadata says {}", layout::TASKS, specs.len(), m.tasks_total));
    }
    let mut task_dirs: BTreeSet<String> = BTreeSet::new();
    for f in &files {
        if let Some(rest) = f.strip_prefix("tasks/")
            && let Some((dir, _)) = rest.split_once('/')
        {
            task_dirs.insert(dir.to_string());
        }
    }
    if present.contains(layout::SPANS) {
        check_spans(&store.get(run, layout::SPANS).await?, layout::SPANS, false, &mut v);
    }
    for dir in &task_dirs {
        if !known.is_empty() && !known.contains(dir.as_str()) {
            v.problems.push(format!("tasks/{dir}/: not a task of this run ({})", layout::TASKS));
        }
        let has = |f: &str| present.contains(format!("tasks/{dir}/{f}").as_str());
        if !has(layout::TASK_RESULT) {
            if sealed && meta.as_ref().is_some_and(|m| m.status == RunStatus::Complete) {
                v.problems.push(format!("tasks/{dir}/{}: missing in a complete run", layout::TASK_RESULT));
            }
            continue;
        }
        v.tasks_with_results += 1;
        for f in layout::TASK_FILES {
            if !has(f) {
                v.problems.push(format!("tasks/{dir}/{f}: missing"));
            }
        }
        check_task(store, run, dir, &mut v).await?;
    }

    // Cross-file: summary against the results.
    if let Some(m) = &meta
        && sealed
        && present.contains(layout::SUMMARY)
    {
        // A result that cannot be read is already named by its task's check: the summary
        // cannot be recomputed then, which is no reason to stop validating.
        let recomputed = match summarize(store, run, specs.ids(), m.status, super::Lines::Collect).await {
            Ok(x) => Some(x),
            Err(e) if e.kind() == ErrorKind::Corrupt => None,
            Err(e) => return Err(e),
        };
        match (read_json::<RunSummary>(store, run, layout::SUMMARY).await, recomputed) {
            (Err(e), _) => v.problems.push(e.to_string()),
            (Ok(_), None) => {}
            (Ok(s), Some((re, out))) => {
                check_results(store, run, present.contains(layout::RESULTS), &out.lines, &mut v).await?;
                if s.status != m.status {
                    v.problems.push(format!(
                        "{}: status {} but metadata says {}",
                        layout::SUMMARY,
                        s.status.as_str(),
                        m.status.as_str()
                    ));
                }
                if s.tasks_finished != re.tasks_finished || s.passed != re.passed {
                    v.problems.push(format!(
                        "{}: {} finished / {} passed, but the task results give {} / {}",
                        layout::SUMMARY,
                        s.tasks_finished,
                        s.passed,
                        re.tasks_finished,
                        re.passed
                    ));
                }
                if !close(s.total_cost_usd, re.total_cost_usd) || s.total_tokens != re.total_tokens {
                    v.problems.push(format!("{}: cost or tokens disagree with the task results", layout::SUMMARY));
                }
                if m.status == RunStatus::Complete && s.tasks_finished != m.tasks_total {
                    v.problems.push(format!(
                        "{}: run is complete but {} of {} tasks have results",
                        layout::SUMMARY,
                        s.tasks_finished,
                        m.tasks_total
                    ));
                }
            }
        }
    }
    Ok(v)
}

/// The fields of a `spans.jsonl` line that validation checks.
#[derive(Deserialize)]
struct SpanLine {
    trace_id: String,
    span_id: String,
    name: String,
}

/// Checks a `spans.jsonl`: every line a span; in a task's file, exactly one `eval.task` and every
/// span in its trace.
fn check_spans(bytes: &[u8], path: &str, task_file: bool, v: &mut Validation) {
    let mut spans = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<SpanLine>(line) {
            Ok(s) if s.trace_id.len() == 32 && s.span_id.len() == 16 => spans.push(s),
            Ok(_) => {
                v.problems.push(format!("{path}:{}: malformed trace or span id", i + 1));
                return;
            }
            Err(e) => {
                v.problems.push(format!("{path}:{}: not a span: {e}", i + 1));
                return;
            }
        }
    }
    if !task_file {
        return;
    }
    let roots: Vec<&SpanLine> = spans.iter().filter(|s| s.name == "eval.task").collect();
    match roots.as_slice() {
        [root] => {
            if let Some(other) = spans.iter().find(|s| s.trace_id != root.trace_id) {
                v.problems.push(format!("{path}: span {} ({}) is not in the task's trace", other.span_id, other.name));
            }
        }
        _ => v.problems.push(format!("{path}: {} eval.task spans, expected 1", roots.len())),
    }
}

async fn check_task(store: &dyn BundleStore, run: &RunId, dir: &str, v: &mut Validation) -> Result<()> {
    let path = format!("tasks/{dir}/{}", layout::TASK_SPANS);
    match store.get(run, &path).await {
        Ok(bytes) => check_spans(&bytes, &path, true, v),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let rpath = format!("tasks/{dir}/{}", layout::TASK_RESULT);
    let result: TaskResult = match read_json(store, run, &rpath).await {
        Ok(r) => r,
        Err(e) => {
            v.problems.push(e.to_string());
            return Ok(());
        }
    };
    check_version(&rpath, &result.schema_version, v);
    if result.task_id.as_str() != dir {
        v.problems.push(format!("{rpath}: task_id {} does not match its folder", result.task_id));
    }
    if result.run_id != *run {
        v.problems.push(format!("{rpath}: run_id {} is not this run", result.run_id));
    }
    if result.passed != result.scores.iter().all(|s| s.passed) {
        v.problems.push(format!("{rpath}: `passed` disagrees with its scores"));
    }
    let spath = format!("tasks/{dir}/{}", layout::TASK_SCORES);
    match read_json::<Vec<EvaluatorScore>>(store, run, &spath).await {
        Ok(s) if s != result.scores => v.problems.push(format!("{spath}: differs from the scores in result.json")),
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => v.problems.push(e.to_string()),
    }
    // The worker log's first line names the attempt that wrote it.
    let lpath = format!("tasks/{dir}/{}", layout::TASK_LOG);
    if let Ok(bytes) = store.get(run, &lpath).await {
        let first = String::from_utf8_lossy(bytes.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
        let mut words = first.split_whitespace();
        if let Some(n) = words.by_ref().skip_while(|w| *w != "attempt").nth(1).and_then(|n| n.parse::<u32>().ok())
            && n != result.attempt
        {
            v.problems.push(format!(
                "{lpath}: written by attempt {n}, but the result that counts is attempt {}",
                result.attempt
            ));
        }
    }
    let tpath = format!("tasks/{dir}/{}", layout::TASK_TRACE);
    match store.get(run, &tpath).await {
        Ok(bytes) => {
            let mut n = 0u32;
            for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                match serde_json::from_slice::<TraceEvent>(line) {
                    Ok(ev) => {
                        // A trace written by another attempt than the one that counts: a
                        // losing duplicate's file, which the task folder must never show.
                        if ev.attempt != 0 && ev.attempt != result.attempt {
                            v.problems.push(format!(
                                "{tpath}:{}: written by attempt {}, but the result that counts is attempt {}",
                                i + 1,
                                ev.attempt,
                                result.attempt
                            ));
                            break;
                        }
                        if ev.task_id != result.task_id || ev.step != n {
                            v.problems.push(format!(
                                "{tpath}:{}: event out of place (task {}, step {})",
                                i + 1,
                                ev.task_id,
                                ev.step
                            ));
                            break;
                        }
                        n += 1;
                    }
                    Err(e) => {
                        v.problems.push(format!("{tpath}:{}: not a trace event: {e}", i + 1));
                        break;
                    }
                }
            }
            if n < result.agent.steps {
                v.problems.push(format!("{tpath}: {n} events, result says {}", result.agent.steps));
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
