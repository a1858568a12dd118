//! The result bundle: metadata, sealing (summary, report, manifest with checksums) and
//! validation that names every problem.

use std::collections::{BTreeMap, BTreeSet};

use agenteval_core::layout;
use agenteval_core::model::{EvaluatorScore, RunStatus, RunSummary, TaskResult, TaskSpec, TraceEvent};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId, SCHEMA_VERSION, TaskId};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::Instrument;

use crate::scorers::{default_scorers, empty_summary};

/// Reads in flight while summarizing and sealing: on S3 each read is a round trip, and a
/// 1,000-task bundle has some 5,000 files.
const READ_CONCURRENCY: usize = 32;

/// `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub schema_version: String,
    pub run_id: RunId,
    pub name: String,
    /// `running` until sealed.
    pub status: RunStatus,
    pub sealed: bool,
    pub backend: String,
    pub benchmark: String,
    pub agent: String,
    pub config_hash: String,
    pub agenteval_version: String,
    pub git_sha: Option<String>,
    pub tasks_total: u64,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Times the run was resumed.
    pub resumed: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub sha256: String,
    pub size: u64,
}

/// `manifest.json`: checksum and size of every other file of the bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: String,
    pub run_id: RunId,
    pub files: BTreeMap<String, ManifestEntry>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub fn to_json_bytes<T: Serialize>(v: &T) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).expect("bundle documents serialize");
    b.push(b'\n');
    b
}

pub async fn read_json<T: for<'de> Deserialize<'de>>(store: &dyn BundleStore, run: &RunId, path: &str) -> Result<T> {
    let bytes = store.get(run, path).await?;
    serde_json::from_slice(&bytes).map_err(|e| Error::json(format!("{path} is not valid"), e))
}

/// The tasks of a run, held compactly: their `tasks.jsonl` text plus an index of lines and
/// ids. A 100,000-task run costs about 30 MB here instead of ~100 MB of `TaskSpec`s.
#[derive(Debug, Default)]
pub struct TaskTable {
    jsonl: Vec<u8>,
    spans: Vec<(u32, u32)>,
    ids: Vec<TaskId>,
}

#[derive(Deserialize)]
struct IdOnly {
    id: TaskId,
}

impl TaskTable {
    pub fn push(&mut self, t: &TaskSpec) {
        let start = self.jsonl.len();
        serde_json::to_writer(&mut self.jsonl, t).expect("tasks serialize");
        self.spans.push((start as u32, (self.jsonl.len() - start) as u32));
        self.jsonl.push(b'\n');
        self.ids.push(t.id.clone());
    }

    /// Reads a `tasks.jsonl` file, parsing only the ids up front.
    pub fn from_jsonl(jsonl: Vec<u8>) -> Result<Self> {
        let mut spans = Vec::new();
        let mut ids = Vec::new();
        let mut start = 0usize;
        for (n, line) in jsonl.split(|b| *b == b'\n').enumerate() {
            if !line.is_empty() {
                let id: IdOnly =
                    serde_json::from_slice(line).map_err(|e| Error::json(format!("{}:{}", layout::TASKS, n + 1), e))?;
                spans.push((start as u32, line.len() as u32));
                ids.push(id.id);
            }
            start += line.len() + 1;
        }
        Ok(TaskTable { jsonl, spans, ids })
    }

    pub async fn read(store: &dyn BundleStore, run: &RunId) -> Result<Self> {
        Self::from_jsonl(store.get(run, layout::TASKS).await?)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn ids(&self) -> &[TaskId] {
        &self.ids
    }

    pub fn id(&self, i: usize) -> &TaskId {
        &self.ids[i]
    }

    pub fn spec(&self, i: usize) -> Result<TaskSpec> {
        let (s, l) = self.spans[i];
        serde_json::from_slice(&self.jsonl[s as usize..(s + l) as usize])
            .map_err(|e| Error::json(format!("{} task {}", layout::TASKS, i + 1), e))
    }

    pub fn jsonl(&self) -> &[u8] {
        &self.jsonl
    }
}

/// Writes a finished task's scores, log and result, in the order the bundle format promises:
/// `result.json` last, so its presence says the folder is complete. `redact` is applied to
/// every byte written (the worker scrubs secrets; the controller has none).
pub async fn write_task_outcome(
    store: &dyn BundleStore,
    result: &TaskResult,
    log: &str,
    spans: Option<&[u8]>,
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<()> {
    let (run, task) = (&result.run_id, &result.task_id);
    let text = |b: Vec<u8>| redact(&String::from_utf8_lossy(&b)).into_bytes();
    if let Some(spans) = spans {
        store.put(run, &layout::task_file(task, layout::TASK_SPANS), &text(spans.to_vec())).await?;
    }
    store.put(run, &layout::task_file(task, layout::TASK_SCORES), &text(to_json_bytes(&result.scores))).await?;
    store.put(run, &layout::task_file(task, layout::TASK_LOG), redact(log).as_bytes()).await?;
    store.put(run, &layout::task_file(task, layout::TASK_RESULT), &text(to_json_bytes(result))).await
}

/// Reads `tasks.jsonl` in full.
pub async fn read_tasks(store: &dyn BundleStore, run: &RunId) -> Result<Vec<TaskSpec>> {
    let table = TaskTable::read(store, run).await?;
    (0..table.len()).map(|i| table.spec(i)).collect()
}

/// A failed task for the report.
#[derive(Debug, Clone)]
pub struct Failure {
    pub task_id: String,
    pub reason: String,
}

/// Summarizes the results of the run's tasks, one file at a time.
pub async fn summarize(
    store: &dyn BundleStore,
    run: &RunId,
    ids: &[TaskId],
    status: RunStatus,
) -> Result<(RunSummary, Vec<Failure>)> {
    let mut scorers = default_scorers();
    let mut failures = Vec::new();
    let mut results = futures::stream::iter(ids)
        .map(|id| async move { read_json::<TaskResult>(store, run, &layout::task_file(id, layout::TASK_RESULT)).await })
        .buffered(READ_CONCURRENCY);
    while let Some(r) = results.next().await {
        let r = match r {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for s in scorers.iter_mut() {
            s.observe(&r);
        }
        if !r.passed && failures.len() < 50 {
            let reason = r
                .agent
                .error
                .clone()
                .or_else(|| r.scores.iter().find(|s| !s.passed).map(|s| format!("{}: {}", s.evaluator_id, s.reason)))
                .unwrap_or_default();
            failures.push(Failure { task_id: r.task_id.to_string(), reason });
        }
    }
    let mut summary = empty_summary(*run, status, ids.len() as u64);
    for s in &scorers {
        s.finish(&mut summary);
    }
    Ok((summary, failures))
}

/// Seals a bundle: summary, report, replay command, final metadata, then the manifest over
/// everything else. Sealing again (after a resume) replaces all of them.
pub async fn seal(store: &dyn BundleStore, meta: &Metadata, ids: &[TaskId]) -> Result<RunSummary> {
    let summary = seal_contents(store, meta, ids).await?;
    write_manifest(store, &meta.run_id).await?;
    Ok(summary)
}

/// Everything of sealing but the manifest: summary (`scorer.summarize` span), report
/// (`report.render` span), replay command and the final metadata.
pub async fn seal_contents(store: &dyn BundleStore, meta: &Metadata, ids: &[TaskId]) -> Result<RunSummary> {
    let run = &meta.run_id;
    let started = std::time::Instant::now();
    let (summary, failures) =
        summarize(store, run, ids, meta.status).instrument(tracing::info_span!("scorer.summarize")).await?;
    store.put(run, layout::SUMMARY, &to_json_bytes(&summary)).await?;
    let report = tracing::info_span!("report.render").in_scope(|| crate::report::render(meta, &summary, &failures));
    store.put(run, layout::REPORT, report.as_bytes()).await?;
    let replay = format!("agenteval submit --config {}/{}\n", store.bundle_uri(run), layout::CONFIG);
    store.put(run, layout::REPLAY, replay.as_bytes()).await?;
    let mut meta = meta.clone();
    meta.sealed = true;
    store.put(run, layout::METADATA, &to_json_bytes(&meta)).await?;
    tracing::info!(run = %run, secs = started.elapsed().as_secs_f64(), "bundle sealed");
    Ok(summary)
}

/// Writes `manifest.json` entry by entry (the same JSON `Manifest` reads), so a bundle of
/// hundreds of thousands of files never exists as a map in memory.
pub async fn write_manifest(store: &dyn BundleStore, run: &RunId) -> Result<()> {
    let paths = store.list(run, "").await?;
    let mut out = Vec::with_capacity(paths.len() * 130);
    out.extend_from_slice(
        format!("{{\n  \"schema_version\": \"{SCHEMA_VERSION}\",\n  \"run_id\": \"{run}\",\n  \"files\": {{")
            .as_bytes(),
    );
    let mut first = true;
    let mut files = futures::stream::iter(paths.iter().filter(|p| p.as_str() != layout::MANIFEST))
        .map(|path| async move { store.get(run, path).await.map(|b| (path, sha256_hex(&b), b.len())) })
        .buffered(READ_CONCURRENCY);
    while let Some(file) = files.next().await {
        let (path, sha, len) = file?;
        out.extend_from_slice(if first { b"\n    " } else { b",\n    " });
        first = false;
        serde_json::to_writer(&mut out, path).expect("paths serialize");
        out.extend_from_slice(format!(": {{\"sha256\": \"{sha}\", \"size\": {len}}}").as_bytes());
    }
    out.extend_from_slice(b"\n  }\n}\n");
    store.put(run, layout::MANIFEST, &out).await
}

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

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
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
        match read_json::<RunSummary>(store, run, layout::SUMMARY).await {
            Err(e) => v.problems.push(e.to_string()),
            Ok(s) => {
                let (re, _) = summarize(store, run, specs.ids(), m.status).await?;
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
