//! A finished task's pack (`tasks/<id>.tar.gz`): made from its outcome and what its attempt
//! staged, and published in one move.

use agenteval_core::layout;
use agenteval_core::model::TaskResult;
use agenteval_core::traits::BundleStore;
use agenteval_core::{ErrorKind, JobId, Result, RunId, TaskId, taskpack};

use super::to_json_bytes;

/// The pack of a finished task: `result.json` first (what the seal reads), then the trace,
/// spans, log and `others` (attachments, `artifacts/…`) in the order given. `redact` is applied
/// to the result, spans and log (the worker scrubs secrets; the controller has none); the
/// trace and attachments were redacted as they were written.
fn pack_outcome(
    result: &TaskResult,
    log: &str,
    spans: Option<&[u8]>,
    trace: &[u8],
    others: &[(String, Vec<u8>)],
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<Vec<u8>> {
    let text = |b: &[u8]| redact(&String::from_utf8_lossy(b)).into_bytes();
    let result = text(&to_json_bytes(result));
    let spans = spans.map(text);
    let log = redact(log).into_bytes();
    let mut files: Vec<(&str, &[u8])> = vec![(layout::TASK_RESULT, &result), (layout::TASK_TRACE, trace)];
    if let Some(spans) = &spans {
        files.push((layout::TASK_SPANS, spans));
    }
    files.push((layout::TASK_LOG, &log));
    // An attachment never stands in for one of the task's own files.
    let own = [layout::TASK_RESULT, layout::TASK_TRACE, layout::TASK_SPANS, layout::TASK_LOG, layout::TASK_SCORES];
    files.extend(others.iter().filter(|(n, _)| !own.contains(&n.as_str())).map(|(n, b)| (n.as_str(), b.as_slice())));
    taskpack::pack(&files)
}

/// Writes a finished task's pack straight into place: how the controller ends a task it gives
/// up on (its one trace line written for it).
pub async fn write_task_outcome(
    store: &dyn BundleStore,
    result: &TaskResult,
    log: &str,
    spans: Option<&[u8]>,
    trace: &[u8],
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<()> {
    let pack = pack_outcome(result, log, spans, trace, &[], redact)?;
    store.put(&result.run_id, &layout::task_pack(&result.task_id), &pack).await
}

/// Writes a finished task's pack, with its attachments (`artifacts/…`), straight into place: a
/// task read back from another tool's run, which has no job attempt to stage it.
pub async fn write_task_pack(
    store: &dyn BundleStore,
    result: &TaskResult,
    log: &str,
    trace: &[u8],
    kept: &[(String, Vec<u8>)],
) -> Result<()> {
    let pack = pack_outcome(result, log, None, trace, kept, &|s: &str| s.to_string())?;
    store.put(&result.run_id, &layout::task_pack(&result.task_id), &pack).await
}

/// A finished task's outcome, as its pack holds it.
pub struct Outcome<'a> {
    pub result: &'a TaskResult,
    pub log: &'a str,
    pub spans: Option<&'a [u8]>,
    /// The trace as written, when the worker kept a copy; else it is read from staging.
    pub trace: Option<Vec<u8>>,
}

/// Packs a finished task into its job attempt's staging folder: the outcome, the trace the
/// attempt streamed there and `kept` (attachments, `artifacts/…`). The streamed trace's file
/// becomes the pack (`BundleStore::replace`). Nothing reaches `tasks/` until [`publish_staged`].
pub async fn stage_task_pack(
    store: &dyn BundleStore,
    outcome: Outcome<'_>,
    kept: &[(String, Vec<u8>)],
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<()> {
    let result = outcome.result;
    let (run, job, attempt, task) = (&result.run_id, &result.job_id, result.attempt, &result.task_id);
    let staged = layout::staged_task_trace(job, attempt, task);
    let trace = match outcome.trace {
        Some(t) => t,
        None => match store.get(run, &staged).await {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        },
    };
    let pack = pack_outcome(result, outcome.log, outcome.spans, &trace, kept, redact)?;
    store.replace(run, &staged, &layout::staged_task_pack(job, attempt, task), &pack).await
}

/// Moves what a job attempt staged for `task` into place. Returns whether anything was staged.
/// A pack already moved (by the seal finishing a publication, or the other way round) is not
/// an error.
pub async fn publish_staged(
    store: &dyn BundleStore,
    run: &RunId,
    job: &JobId,
    attempt: u32,
    task: &TaskId,
) -> Result<bool> {
    match store.rename(run, &layout::staged_task_pack(job, attempt, task), &layout::task_pack(task)).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // A worker of before schema 1.1 (an older image on a fleet) staged a task folder.
            let dir = layout::staged_task_dir(job, attempt, task);
            let staged = store.list(run, &dir).await?;
            publish_staged_folder(store, run, &dir, task, staged).await
        }
        Err(e) => Err(e),
    }
}

/// The folder layout's publication: every staged file into `tasks/<id>/`, `result.json` last.
async fn publish_staged_folder(
    store: &dyn BundleStore,
    run: &RunId,
    dir: &str,
    task: &TaskId,
    mut files: Vec<String>,
) -> Result<bool> {
    if !files.iter().any(|p| p.ends_with(&format!("/{}", layout::TASK_RESULT))) {
        return Ok(false);
    }
    files.sort_by_key(|p| p.ends_with(&format!("/{}", layout::TASK_RESULT)));
    for path in &files {
        match store.rename(run, path, &layout::task_file(task, &path[dir.len()..])).await {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            r => r?,
        }
    }
    Ok(true)
}
