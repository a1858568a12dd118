//! A run's results as judging reads them: its metadata and one `ResultLine` per finished task,
//! from `results.jsonl` (one read) or, for bundles sealed before it existed, the task folders.

use agenteval_core::format::{Metadata, ResultLine};
use agenteval_core::layout;
use agenteval_core::model::{TaskResult, TaskSpec};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId, lines, taskpack};
use futures::StreamExt;
use std::collections::BTreeMap;

/// One run, ready to judge.
///
/// Held compactly, since judging a million-task run holds one per task (and `compare` two):
/// a line of numbers per finished task, and of each task's `tasks.jsonl` line only its tag set
/// (shared between tasks) and a 16-byte digest of its fingerprint.
#[derive(Debug, Clone)]
pub struct RunResults {
    pub meta: Metadata,
    pub bundle_uri: String,
    /// One per finished task, in task-id order (what `task`, `tags` and `fingerprint` rely on).
    pub lines: Vec<ResultLine>,
    /// The fingerprint of the run's grading settings (`config.resolved.json`: the benchmark's
    /// settings that are not task selection, and the evaluators), when readable.
    pub grading: Option<String>,
    /// The run's other actors as its config pinned them (`roles`: the simulated user's model
    /// and settings), when readable.
    pub roles: Option<serde_json::Value>,
    /// What `tasks.jsonl` says of each line's task, by line position (`None`: not known).
    facts: Vec<Option<Facts>>,
    /// The distinct tag sets; `Facts::tags` indexes it.
    tag_sets: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Copy)]
struct Facts {
    tags: u32,
    fingerprint: [u8; 16],
}

impl RunResults {
    /// A run with `lines` (put in task-id order) and nothing known of its tasks yet.
    pub fn new(meta: Metadata, bundle_uri: String, mut lines: Vec<ResultLine>, grading: Option<String>) -> Self {
        if !lines.is_sorted_by(|a, b| a.task_id <= b.task_id) {
            lines.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        }
        RunResults { meta, bundle_uri, lines, grading, roles: None, facts: Vec::new(), tag_sets: vec![Vec::new()] }
    }

    /// The positions of task `id`'s lines (one, unless the file repeats it).
    fn positions(&self, id: &str) -> std::ops::Range<usize> {
        let start = self.lines.partition_point(|l| l.task_id.as_str() < id);
        let end = start + self.lines[start..].iter().take_while(|l| l.task_id.as_str() == id).count();
        start..end
    }

    /// The line of task `id`, if it finished.
    pub fn task(&self, id: &str) -> Option<&ResultLine> {
        self.lines.get(self.positions(id).start).filter(|l| l.task_id.as_str() == id)
    }

    /// Records what `tasks.jsonl` says of task `id` (nothing when it has no line: judging
    /// reads only finished tasks). `tag_ids` finds a tag set already held.
    fn set_facts(
        &mut self,
        id: &str,
        tags: Vec<String>,
        fingerprint: &str,
        tag_ids: &mut std::collections::HashMap<Vec<String>, u32>,
    ) {
        let at = self.positions(id);
        if at.is_empty() {
            return;
        }
        let tags = if tags.is_empty() {
            0
        } else if let Some(&i) = tag_ids.get(&tags) {
            i
        } else {
            let i = self.tag_sets.len() as u32;
            self.tag_sets.push(tags.clone());
            tag_ids.insert(tags, i);
            i
        };
        if self.facts.len() < self.lines.len() {
            self.facts.resize(self.lines.len(), None);
        }
        let facts = Facts { tags, fingerprint: agenteval_core::model::fingerprint_digest(fingerprint) };
        self.facts[at].fill(Some(facts));
    }

    /// Records the tags and fingerprint of some tasks (tests, and callers that build results).
    pub fn with_tasks<'a>(mut self, tasks: impl IntoIterator<Item = (&'a str, Vec<String>, &'a str)>) -> Self {
        let mut tag_ids = self.tag_ids();
        for (id, tags, fingerprint) in tasks {
            self.set_facts(id, tags, fingerprint, &mut tag_ids);
        }
        self
    }

    fn tag_ids(&self) -> std::collections::HashMap<Vec<String>, u32> {
        self.tag_sets.iter().enumerate().skip(1).map(|(i, t)| (t.clone(), i as u32)).collect()
    }

    /// The tags of line `i`'s task (none when `tasks.jsonl` did not say).
    pub fn tags(&self, i: usize) -> &[String] {
        self.facts.get(i).copied().flatten().map_or(&[], |f| &self.tag_sets[f.tags as usize])
    }

    /// A digest of line `i`'s task's content fingerprint (see `fingerprint_digest`), when known.
    pub fn fingerprint(&self, i: usize) -> Option<[u8; 16]> {
        self.facts.get(i).copied().flatten().map(|f| f.fingerprint)
    }

    /// The fingerprint digest of task `id`, when it finished and is known.
    pub fn fingerprint_of(&self, id: &str) -> Option<[u8; 16]> {
        let at = self.positions(id);
        if at.is_empty() { None } else { self.fingerprint(at.start) }
    }
}

/// What judging reads of a line of `tasks.jsonl`: its id, tags and, since it was recorded,
/// fingerprint (the rest of the task only for older bundles that lack it).
#[derive(serde::Deserialize)]
struct TaskLine {
    id: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    fingerprint: Option<String>,
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::corrupt(format!("{what}: {e}")))
}

/// Reads a run's results from its bundle. `results.jsonl` and `tasks.jsonl` are read a piece at
/// a time, and of each task only what judging uses is kept.
pub async fn load(store: &dyn BundleStore, run: &RunId) -> Result<RunResults> {
    load_from(store, run, false).await
}

/// [`load`] of a run still going: from its task packs, never from a `results.jsonl` an earlier
/// seal left (a resumed run's is the state it was interrupted in).
pub async fn load_live(store: &dyn BundleStore, run: &RunId) -> Result<RunResults> {
    load_from(store, run, true).await
}

async fn load_from(store: &dyn BundleStore, run: &RunId, live: bool) -> Result<RunResults> {
    let meta: Metadata = parse(&store.get(run, layout::METADATA).await?, layout::METADATA)?;
    if live {
        let lines = from_task_folders(store, run).await?;
        return finish(store, run, meta, lines).await;
    }
    let mut lines = Vec::new();
    let read = lines::each_line(store, run, layout::RESULTS, &mut |n, line| {
        if !lines::is_blank(line) {
            lines.push(parse::<ResultLine>(line, &format!("{}:{n}", layout::RESULTS))?);
        }
        Ok(())
    })
    .await;
    let lines = match read {
        Ok(()) => {
            // The vector grew by doubling: up to half of it would be empty room.
            lines.shrink_to_fit();
            lines
        }
        Err(e) if e.kind() == ErrorKind::NotFound => from_task_folders(store, run).await?,
        Err(e) => return Err(e),
    };
    finish(store, run, meta, lines).await
}

/// The run's results from its lines: its grading settings and what `tasks.jsonl` says of them.
async fn finish(store: &dyn BundleStore, run: &RunId, meta: Metadata, lines: Vec<ResultLine>) -> Result<RunResults> {
    let config = match store.get(run, layout::CONFIG).await {
        Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes).ok(),
        Err(_) => None,
    };
    let grading = config.as_ref().map(agenteval_core::model::grading_fingerprint);
    let mut results = RunResults::new(meta, store.bundle_uri(run), lines, grading);
    results.roles = config.map(|c| c.get("roles").cloned().unwrap_or(serde_json::Value::Null));
    let mut tag_ids = std::collections::HashMap::new();
    let mut facts_of = |line: &[u8]| -> Result<()> {
        if lines::is_blank(line) {
            return Ok(());
        }
        let t: TaskLine = parse(line, layout::TASKS)?;
        let fingerprint = match t.fingerprint {
            Some(f) => f,
            // Written before fingerprints were recorded: computed from the whole task.
            None => parse::<TaskSpec>(line, layout::TASKS)?.content_fingerprint(),
        };
        results.set_facts(&t.id, t.tags, &fingerprint, &mut tag_ids);
        Ok(())
    };
    // A `tasks.jsonl` that cannot be read leaves the tasks' tags and fingerprints unknown, as
    // before (a report still works); one unreadable line stops the reading there.
    let _ = lines::each_line(store, run, layout::TASKS, &mut |_, line| facts_of(line)).await;
    Ok(results)
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

#[cfg(test)]
mod load_tests {
    use super::*;
    use agenteval_core::model::TerminatedBy;

    /// A bundle holding `results.jsonl` and `tasks.jsonl` as given, with the metadata of a
    /// sealed run.
    async fn bundle(results: &str, tasks: &str) -> (tempfile::TempDir, agenteval_local::FsBundleStore, RunId) {
        let dir = tempfile::tempdir().unwrap();
        let store = agenteval_local::FsBundleStore::new(dir.path().to_path_buf());
        let r = crate::compare::tests::run("r", &[("x", true, TerminatedBy::Completed)]);
        let run = r.meta.run_id;
        store.put(&run, layout::METADATA, &serde_json::to_vec(&r.meta).unwrap()).await.unwrap();
        store.put(&run, layout::RESULTS, results.as_bytes()).await.unwrap();
        store.put(&run, layout::TASKS, tasks.as_bytes()).await.unwrap();
        (dir, store, run)
    }

    fn line(id: &str, passed: bool) -> String {
        format!(
            r#"{{"task_id":"{id}","attempt":1,"passed":{passed},"terminated_by":"completed","scores":{{"exact":{{"score":{},"passed":{passed}}}}},"cost_usd":0.0,"tokens":0,"wall_seconds":0.1,"steps":1}}"#,
            u8::from(passed)
        )
    }

    #[tokio::test]
    async fn what_tasks_jsonl_says_is_kept_per_finished_line() {
        // Out of order, a blank line, a repetition; t9 never finished.
        let results = [line("t2", false), String::new(), line("t1", true), line("t1@r1", true)].join("\n");
        let tasks = [
            r#"{"id":"t1","input":"a","tags":["easy","math"],"fingerprint":"f1"}"#,
            r#"{"id":"t1@r1","input":"a","tags":["easy","math"],"fingerprint":"f1"}"#,
            // Written before fingerprints were recorded: computed from the task.
            r#"{"id":"t2","input":"b","tags":["hard"]}"#,
            r#"{"id":"t9","input":"c","tags":["never"],"fingerprint":"f9"}"#,
        ]
        .join("\n");
        let (_dir, store, run) = bundle(&results, &tasks).await;
        let r = load(&store, &run).await.unwrap();
        let ids: Vec<&str> = r.lines.iter().map(|l| l.task_id.as_str()).collect();
        assert_eq!(ids, ["t1", "t1@r1", "t2"], "in task-id order");
        assert_eq!(r.tags(0), ["easy", "math"]);
        assert_eq!(r.tags(1), ["easy", "math"]);
        assert_eq!(r.tags(2), ["hard"]);
        assert_eq!(r.tag_sets.len(), 3, "one copy of each distinct tag set (and the empty one)");
        assert_eq!(r.fingerprint(0), Some(agenteval_core::model::fingerprint_digest("f1")));
        assert_eq!(r.fingerprint(0), r.fingerprint(1));
        let spec: TaskSpec = serde_json::from_str(r#"{"id":"t2","input":"b","tags":["hard"]}"#).unwrap();
        assert_eq!(
            r.fingerprint_of("t2"),
            Some(agenteval_core::model::fingerprint_digest(&spec.content_fingerprint()))
        );
        assert_eq!(r.fingerprint_of("t9"), None, "an unfinished task is not held");
        assert_eq!(r.fingerprint_of("t1@r0"), None, "nor one with no line, whatever line follows it");
        assert!(r.task("t9").is_none() && r.task("t1@r1").is_some());
        assert!(r.lines[0].scores.get("exact").unwrap().passed);
    }

    #[tokio::test]
    async fn a_bad_result_line_is_named_and_unreadable_tasks_leave_facts_unknown() {
        let (_dir, store, run) = bundle(&format!("{}\nnot json\n", line("t1", true)), "garbage").await;
        let e = load(&store, &run).await.unwrap_err();
        assert!(e.to_string().contains("results.jsonl:2"), "{e}");
        let (_dir, store, run) = bundle(&line("t1", true), "garbage").await;
        let r = load(&store, &run).await.unwrap();
        assert_eq!((r.lines.len(), r.tags(0).len(), r.fingerprint(0)), (1, 0, None));
    }
}
