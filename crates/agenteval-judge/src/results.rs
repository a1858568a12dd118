//! A run's results as judging reads them: its metadata and one `ResultLine` per finished task,
//! from `results.jsonl` (one read) or, for bundles sealed before it existed, the task folders.

use agenteval_core::format::{Metadata, ResultLine};
use agenteval_core::layout;
use agenteval_core::model::{TaskResult, TaskSpec};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId, taskpack};
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
    let paths: Vec<String> = store
        .list(run, "tasks/")
        .await?
        .into_iter()
        .filter(|p| p.ends_with(&suffix) || taskpack::task_of_pack(p).is_some())
        .collect();
    let mut reads = futures::stream::iter(paths)
        .map(|p| async move {
            let bytes = match taskpack::task_of_pack(&p) {
                Some(task) => {
                    let task: agenteval_core::TaskId = task.parse()?;
                    taskpack::read_task_file(store, run, &task, layout::TASK_RESULT).await?
                }
                None => store.get(run, &p).await?,
            };
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
    pub events: BTreeMap<String, String>,
    /// Task id → its spans, as a JSON array.
    pub spans: BTreeMap<String, String>,
    /// Tasks whose trace was left out to keep the report small.
    pub omitted: usize,
    /// Task id → what of its trace was not embedded (the events past its budget).
    pub cut: BTreeMap<String, TraceCut>,
    /// Task id → its input, expected answer, answer and scores, for the same tasks (filled by
    /// the caller: `samples::load`, or a seal from the results it read anyway).
    pub samples: BTreeMap<String, crate::samples::Sample>,
}

/// The tail of a trace a page left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceCut {
    pub events: u64,
    pub bytes: u64,
}

/// How much trace a page embeds, whatever the traces' size: memory and file size stay bounded
/// by these, not by what the agents wrote (the full trace stays in the bundle).
#[derive(Debug, Clone, Copy)]
pub struct TraceBudget {
    /// Bytes of one task's events (and, apart, of its spans).
    pub per_task: usize,
    /// Bytes of all tasks' events and spans together.
    pub total: usize,
}

/// A report's budget: 256 KiB a task, 8 MiB in all.
pub const REPORT_TRACE_BUDGET: TraceBudget = TraceBudget { per_task: 256 << 10, total: 8 << 20 };
/// A task page's budget (one task): 4 MiB.
pub const TASK_PAGE_TRACE_BUDGET: TraceBudget = TraceBudget { per_task: 4 << 20, total: 8 << 20 };
/// An event longer than this is embedded as a stub that says its size, keeping the place of
/// the events after it (a score cites steps by position).
pub const MAX_EMBEDDED_EVENT: usize = 64 << 10;

/// One file's JSON lines gathered into a JSON array, a piece at a time, within a budget.
struct Embed<'a> {
    array: String,
    line: Vec<u8>,
    /// The current line's real length (`line` keeps at most `MAX_EMBEDDED_EVENT + 1` bytes).
    line_len: u64,
    per_task: usize,
    total_left: &'a std::sync::atomic::AtomicUsize,
    full: bool,
    cut: TraceCut,
}

impl<'a> Embed<'a> {
    fn new(budget: TraceBudget, total_left: &'a std::sync::atomic::AtomicUsize) -> Self {
        Embed {
            array: String::from("["),
            line: Vec::new(),
            line_len: 0,
            per_task: budget.per_task,
            total_left,
            full: false,
            cut: TraceCut::default(),
        }
    }

    fn push(&mut self, mut piece: &[u8]) {
        while !piece.is_empty() {
            let (part, rest, ended) = match piece.iter().position(|&b| b == b'\n') {
                Some(i) => (&piece[..i], &piece[i + 1..], true),
                None => (piece, &[][..], false),
            };
            let room = (MAX_EMBEDDED_EVENT + 1).saturating_sub(self.line.len());
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            self.line_len += part.len() as u64;
            if ended {
                self.end_line();
            }
            piece = rest;
        }
    }

    /// Takes `n` bytes from the run-wide budget, if it has them.
    fn take(&self, n: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.total_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(n)).is_ok()
    }

    fn end_line(&mut self) {
        let len = std::mem::take(&mut self.line_len);
        let line = std::mem::take(&mut self.line);
        if len == 0 {
            return;
        }
        let text: std::borrow::Cow<'_, str> = if len as usize > MAX_EMBEDDED_EVENT {
            format!("{{\"kind\":\"cut\",\"payload\":{{\"bytes\":{len},\"why\":\"an event over 64 KiB is not embedded; it is in the bundle\"}}}}")
                .into()
        } else {
            // Only whole JSON lines go in (a partial bundle may end in a torn one); checked
            // without building values.
            match std::str::from_utf8(&line) {
                Ok(t) if serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok() => t.trim().to_string().into(),
                _ => return,
            }
        };
        if !self.full && (self.array.len() + text.len() + 2 > self.per_task || !self.take(text.len() + 1)) {
            self.full = true;
        }
        if self.full {
            self.cut.events += 1;
            self.cut.bytes += len + 1;
            return;
        }
        if self.array.len() > 1 {
            self.array.push(',');
        }
        self.array.push_str(&text);
    }

    fn finish(mut self) -> (String, TraceCut) {
        if !self.line.is_empty() {
            self.end_line();
        }
        self.array.push(']');
        (self.array, self.cut)
    }
}

/// Reads the traces and spans of at most `limit` tasks, failing ones first (those are the ones
/// people open), each within `budget`: files are read a piece at a time, so memory stays within
/// the budget and one event however large the traces. Missing or unreadable files are skipped: a
/// report never fails for a trace.
pub async fn load_traces(
    store: &dyn BundleStore,
    run: &RunId,
    lines: &[ResultLine],
    limit: usize,
    budget: TraceBudget,
) -> Traces {
    let mut ids: Vec<&ResultLine> = lines.iter().collect();
    ids.sort_by_key(|l| l.passed);
    let omitted = ids.len().saturating_sub(limit);
    let picked: Vec<String> = ids.into_iter().take(limit).map(|l| l.task_id.to_string()).collect();
    let total_left = std::sync::atomic::AtomicUsize::new(budget.total);
    let total_left = &total_left;
    let read = |task: String, file: &'static str| async move {
        let mut embed = Embed::new(budget, total_left);
        if let Ok(id) = task.parse::<agenteval_core::TaskId>() {
            let _ = taskpack::read_task_file_chunks(store, run, &id, file, &mut |piece| embed.push(piece)).await;
        }
        let (array, cut) = embed.finish();
        (task, array, cut)
    };
    // Fewer at once than other reads: each holds up to a task's budget.
    let events = futures::stream::iter(picked.clone().into_iter().map(|t| read(t, layout::TASK_TRACE)))
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    let spans = futures::stream::iter(picked.into_iter().map(|t| read(t, layout::TASK_SPANS)))
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    let cut = events.iter().filter(|(_, _, c)| c.events > 0).map(|(t, _, c)| (t.clone(), *c)).collect();
    Traces {
        events: events.into_iter().map(|(t, a, _)| (t, a)).collect(),
        spans: spans.into_iter().map(|(t, a, _)| (t, a)).collect(),
        omitted,
        cut,
        samples: BTreeMap::new(),
    }
}

#[cfg(test)]
mod embed_tests {
    use super::*;

    fn embed(budget: TraceBudget, pieces: &[&[u8]]) -> (String, TraceCut) {
        let left = std::sync::atomic::AtomicUsize::new(budget.total);
        let mut e = Embed::new(budget, &left);
        for p in pieces {
            e.push(p);
        }
        e.finish()
    }

    #[test]
    fn lines_split_across_pieces_are_joined_and_a_torn_last_line_is_dropped() {
        let b = TraceBudget { per_task: 1 << 20, total: 1 << 20 };
        let (a, cut) = embed(b, &[b"{\"kind\":\"a\"}\n{\"ki", b"nd\":\"b\"}\n{\"torn"]);
        assert_eq!(a, r#"[{"kind":"a"},{"kind":"b"}]"#);
        assert_eq!(cut, TraceCut::default());
    }

    #[test]
    fn past_the_budget_events_are_counted_not_kept_and_a_huge_one_is_a_stub() {
        let b = TraceBudget { per_task: 100, total: 1 << 20 };
        let line = format!("{{\"kind\":\"x\",\"payload\":\"{}\"}}\n", "y".repeat(30));
        let lines = line.repeat(10);
        let (a, cut) = embed(b, &[lines.as_bytes()]);
        assert!(a.len() <= 100, "{a}");
        assert_eq!(cut.events + a.matches("\"x\"").count() as u64, 10);
        let huge =
            format!("{{\"kind\":\"x\",\"payload\":\"{}\"}}\n{{\"kind\":\"after\"}}\n", "z".repeat(MAX_EMBEDDED_EVENT));
        let (a, _) = embed(TraceBudget { per_task: 1 << 20, total: 1 << 20 }, &[huge.as_bytes()]);
        let v: serde_json::Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v[0]["kind"], "cut");
        assert_eq!(v[1]["kind"], "after", "the events after it keep their place");
        // The run-wide budget binds too.
        let left = std::sync::atomic::AtomicUsize::new(20);
        let mut e = Embed::new(TraceBudget { per_task: 1 << 20, total: 20 }, &left);
        e.push(lines.as_bytes());
        let (a, cut) = e.finish();
        assert_eq!((a.as_str(), cut.events), ("[]", 10));
    }
}
