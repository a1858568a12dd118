//! A finished task's files, written in the order the bundle format promises.

use agenteval_core::layout;
use agenteval_core::model::TaskResult;
use agenteval_core::traits::BundleStore;
use agenteval_core::{ErrorKind, JobId, Result, RunId, TaskId};

use super::to_json_bytes;

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
    let task = result.task_id.clone();
    write_task_outcome_in(store, result, log, spans, redact, &|name| layout::task_file(&task, name)).await
}

/// [`write_task_outcome`] into the folder `path` names (a job attempt's staging folder).
pub async fn write_task_outcome_in(
    store: &dyn BundleStore,
    result: &TaskResult,
    log: &str,
    spans: Option<&[u8]>,
    redact: &(dyn Fn(&str) -> String + Sync),
    path: &(dyn Fn(&str) -> String + Sync),
) -> Result<()> {
    let run = &result.run_id;
    let text = |b: Vec<u8>| redact(&String::from_utf8_lossy(&b)).into_bytes();
    if let Some(spans) = spans {
        store.put(run, &path(layout::TASK_SPANS), &text(spans.to_vec())).await?;
    }
    store.put(run, &path(layout::TASK_SCORES), &text(to_json_bytes(&result.scores))).await?;
    store.put(run, &path(layout::TASK_LOG), redact(log).as_bytes()).await?;
    store.put(run, &path(layout::TASK_RESULT), &text(to_json_bytes(result))).await
}

/// Moves what a job attempt staged for `task` into the task folder, `result.json` last, so its
/// presence still says the folder is complete. A file already moved (by the seal finishing a
/// publication, or the other way round) is skipped. Returns whether anything was staged.
pub async fn publish_staged(
    store: &dyn BundleStore,
    run: &RunId,
    job: &JobId,
    attempt: u32,
    task: &TaskId,
) -> Result<bool> {
    let staged = layout::staged_task_dir(job, attempt, task);
    let mut files = store.list(run, &staged).await?;
    if files.is_empty() {
        return Ok(false);
    }
    // `result.json` sorts after the other task files' names only by chance: put it last.
    files.sort_by_key(|p| p.ends_with(&format!("/{}", layout::TASK_RESULT)));
    for path in &files {
        let name = &path[staged.len()..];
        match store.rename(run, path, &layout::task_file(task, name)).await {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            r => r?,
        }
    }
    Ok(true)
}
