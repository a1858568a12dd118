//! A finished task's files, written in the order the bundle format promises.

use agenteval_core::Result;
use agenteval_core::layout;
use agenteval_core::model::TaskResult;
use agenteval_core::traits::BundleStore;

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
    let (run, task) = (&result.run_id, &result.task_id);
    let text = |b: Vec<u8>| redact(&String::from_utf8_lossy(&b)).into_bytes();
    if let Some(spans) = spans {
        store.put(run, &layout::task_file(task, layout::TASK_SPANS), &text(spans.to_vec())).await?;
    }
    store.put(run, &layout::task_file(task, layout::TASK_SCORES), &text(to_json_bytes(&result.scores))).await?;
    store.put(run, &layout::task_file(task, layout::TASK_LOG), redact(log).as_bytes()).await?;
    store.put(run, &layout::task_file(task, layout::TASK_RESULT), &text(to_json_bytes(result))).await
}
