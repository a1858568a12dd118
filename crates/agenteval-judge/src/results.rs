//! A run's results as judging reads them: its metadata and one `ResultLine` per finished task,
//! from `results.jsonl` (one read) or, for bundles sealed before it existed, the task folders.

use agenteval_core::format::{Metadata, ResultLine};
use agenteval_core::layout;
use agenteval_core::model::{TaskResult, TaskSpec};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use futures::StreamExt;
use std::collections::BTreeMap;

/// One run, ready to judge.
#[derive(Debug, Clone)]
pub struct RunResults {
    pub meta: Metadata,
    pub bundle_uri: String,
    pub lines: Vec<ResultLine>,
    /// Tags of each task, by task id, from `tasks.jsonl` (for reports; empty if unreadable).
    pub tags: std::collections::BTreeMap<String, Vec<String>>,
    /// Each task's content fingerprint, by task id (`tasks.jsonl`; computed from the line for
    /// bundles written before it was recorded).
    pub fingerprints: std::collections::BTreeMap<String, String>,
    /// The fingerprint of the run's grading settings (`config.resolved.json`: the benchmark's
    /// settings that are not task selection, and the evaluators), when readable.
    pub grading: Option<String>,
}

/// A line of `tasks.jsonl`: the task and, since it was recorded, its fingerprint.
#[derive(serde::Deserialize)]
struct TaskLine {
    #[serde(flatten)]
    spec: TaskSpec,
    #[serde(default)]
    fingerprint: Option<String>,
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::corrupt(format!("{what}: {e}")))
}

fn parse_lines<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<Vec<T>> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
        .map(|(i, l)| parse(l, &format!("{what}:{}", i + 1)))
        .collect()
}

/// Reads a run's results from its bundle.
pub async fn load(store: &dyn BundleStore, run: &RunId) -> Result<RunResults> {
    let meta: Metadata = parse(&store.get(run, layout::METADATA).await?, layout::METADATA)?;
    let lines = match store.get(run, layout::RESULTS).await {
        Ok(bytes) => parse_lines(&bytes, layout::RESULTS)?,
        Err(e) if e.kind() == ErrorKind::NotFound => from_task_folders(store, run).await?,
        Err(e) => return Err(e),
    };
    let (mut tags, mut fingerprints) = (BTreeMap::new(), BTreeMap::new());
    if let Ok(bytes) = store.get(run, layout::TASKS).await
        && let Ok(specs) = parse_lines::<TaskLine>(&bytes, layout::TASKS)
    {
        for t in specs {
            let id = t.spec.id.to_string();
            fingerprints.insert(id.clone(), t.fingerprint.unwrap_or_else(|| t.spec.content_fingerprint()));
            tags.insert(id, t.spec.tags);
        }
    }
    let grading = match store.get(run, layout::CONFIG).await {
        Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .map(|v| agenteval_core::model::grading_fingerprint(&v)),
        Err(_) => None,
    };
    Ok(RunResults { meta, bundle_uri: store.bundle_uri(run), lines, tags, fingerprints, grading })
}

async fn from_task_folders(store: &dyn BundleStore, run: &RunId) -> Result<Vec<ResultLine>> {
    let suffix = format!("/{}", layout::TASK_RESULT);
    let paths: Vec<String> = store.list(run, "tasks/").await?.into_iter().filter(|p| p.ends_with(&suffix)).collect();
    let mut reads = futures::stream::iter(paths)
        .map(|p| async move {
            let bytes = store.get(run, &p).await?;
            parse::<TaskResult>(&bytes, &p).map(|r| ResultLine::from(&r))
        })
        .buffered(32);
    let mut out = Vec::new();
    while let Some(r) = reads.next().await {
        out.push(r?);
    }
    out.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    Ok(out)
}

/// Trace events and spans of some tasks, for the HTML report's trace viewer, kept as the JSON
/// text they are in the bundle (a JSON array per task): a parsed value per event would cost
/// several times the bytes.
#[derive(Debug, Clone, Default)]
pub struct Traces {
    /// Task id → its trace events, as a JSON array.
    pub events: std::collections::BTreeMap<String, String>,
    /// Task id → its spans, as a JSON array.
    pub spans: std::collections::BTreeMap<String, String>,
    /// Tasks whose trace was left out to keep the report small.
    pub omitted: usize,
}

/// Reads the traces and spans of at most `limit` tasks, failing ones first (those are the ones
/// people open). Missing or unreadable files are skipped: a report never fails for a trace.
pub async fn load_traces(store: &dyn BundleStore, run: &RunId, lines: &[ResultLine], limit: usize) -> Traces {
    let mut ids: Vec<&ResultLine> = lines.iter().collect();
    ids.sort_by_key(|l| l.passed);
    let omitted = ids.len().saturating_sub(limit);
    let picked: Vec<String> = ids.into_iter().take(limit).map(|l| l.task_id.to_string()).collect();
    let read = |task: String, file: &'static str| async move {
        let path = format!("tasks/{task}/{file}");
        let mut array = String::from("[");
        if let Ok(bytes) = store.get(run, &path).await {
            // Only whole JSON lines go in (a partial bundle may end in a torn one); checked
            // without building values.
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
                    && let Ok(text) = std::str::from_utf8(line)
                {
                    if array.len() > 1 {
                        array.push(',');
                    }
                    array.push_str(text.trim());
                }
            }
        }
        array.push(']');
        (task, array)
    };
    let events = futures::stream::iter(picked.clone().into_iter().map(|t| read(t, layout::TASK_TRACE)))
        .buffered(32)
        .collect::<Vec<_>>()
        .await;
    let spans = futures::stream::iter(picked.into_iter().map(|t| read(t, layout::TASK_SPANS)))
        .buffered(32)
        .collect::<Vec<_>>()
        .await;
    Traces { events: events.into_iter().collect(), spans: spans.into_iter().collect(), omitted }
}
