//! Sealing a bundle: the summary over every task result, the report, the replay command, the
//! final metadata and the manifest of checksums.

use agenteval_core::format::{Metadata, ResultLine};
use agenteval_core::layout;
use agenteval_core::model::{RunStatus, RunSummary, TaskResult};
use agenteval_core::traits::BundleStore;
use agenteval_core::{ErrorKind, Result, RunId, SCHEMA_VERSION, TaskId, taskpack};
use futures::StreamExt;
use tracing::Instrument;

use sha2::Digest as _;

use std::sync::Arc;

use super::files::{KnownSum, ManifestHints, PackSums, RecordingStore};
use super::{READ_CONCURRENCY, read_json, to_json_bytes};
use agenteval_judge::samples::{REPORT_VALUE_CHARS, Sample};

use crate::report::Failure;
use crate::scorers::{default_scorers, empty_summary};

/// Where `summarize` puts `results.jsonl`'s lines.
pub enum Lines {
    /// Not kept (a report that needs the summary and the failures).
    Skip,
    /// Written to a temporary file as they come, returned in `Summarized::spilled`
    /// (`validate-bundle`, which reads them back beside the bundle's file).
    Spill,
    /// Written to the bundle as they come, in chunks (sealing), so a 100,000-task seal does not
    /// hold the file; a capped sample of lines is kept for the HTML report.
    Write,
}

/// What `summarize` produced besides the summary.
#[derive(Debug, Default)]
pub struct Summarized {
    pub failures: Vec<Failure>,
    /// Lines not yet written (with `Lines::Write` or `Lines::Spill`).
    lines: Vec<u8>,
    /// `results.jsonl` as this run's results make it, in a temporary file (with `Lines::Spill`).
    pub spilled: Option<std::fs::File>,
    /// Up to `SEAL_ROW_LIMIT` failing and as many passing lines, in task order.
    pub failing: Vec<ResultLine>,
    pub passing: Vec<ResultLine>,
    /// Task id → the job attempt that wrote its result (what sealing trusts a manifest part of),
    /// for tasks kept as folders.
    pub producers: std::collections::HashMap<String, (agenteval_core::JobId, u32)>,
    /// The sum of each task's pack (read here for its result, so the manifest need not).
    pub packs: PackSums,
    /// The samples of the first `SEAL_TRACE_LIMIT` failing and passing tasks, made from the
    /// results read here so the report does not read them again (without their specs).
    pub samples: std::collections::BTreeMap<String, Sample>,
}

/// Lines written per append when streaming `results.jsonl`.
const RESULTS_CHUNK: usize = 256 * 1024;

/// The tags of a run's tasks, for the pass rates by tag. `tasks.jsonl` lists the tasks in the
/// order of `ids`, so a task's tags are found by its position: one small number per task (tag
/// sets interned), not a map from every id, which at 1,000,000 tagged tasks was the seal's
/// largest holding. A file in another order is held by id, as before.
#[derive(Default)]
struct TaskTags {
    sets: Vec<Vec<String>>,
    /// Position in `ids` → index in `sets` (`u32::MAX`: no tags).
    by_position: Vec<u32>,
    /// When `tasks.jsonl`'s order is not `ids`': id → tags.
    by_id: Option<std::collections::HashMap<String, Vec<String>>>,
}

impl TaskTags {
    fn get(&self, position: usize, id: &str) -> &[String] {
        if let Some(m) = &self.by_id {
            return m.get(id).map(Vec::as_slice).unwrap_or(&[]);
        }
        match self.by_position.get(position) {
            Some(&i) if i != u32::MAX => &self.sets[i as usize],
            _ => &[],
        }
    }

    fn any(&self) -> bool {
        !self.sets.is_empty() || self.by_id.as_ref().is_some_and(|m| !m.is_empty())
    }
}

/// Reads the tags of `tasks.jsonl` a piece at a time (nothing when it cannot be read: a
/// summary never fails for want of tags).
async fn task_tags(store: &dyn BundleStore, run: &RunId, ids: &[TaskId]) -> TaskTags {
    let mut out = TaskTags { by_position: Vec::with_capacity(ids.len()), ..Default::default() };
    let mut interned: std::collections::HashMap<Vec<String>, u32> = std::collections::HashMap::new();
    let mut in_order = true;
    let read = each_tagged(store, run, &mut |id, tags| {
        let at = out.by_position.len();
        in_order &= ids.get(at).is_some_and(|x| x.as_str() == id);
        let set = if tags.is_empty() {
            u32::MAX
        } else {
            let next = out.sets.len() as u32;
            *interned.entry(tags.clone()).or_insert_with(|| {
                out.sets.push(tags);
                next
            })
        };
        out.by_position.push(set);
    })
    .await;
    if read.is_err() {
        return TaskTags::default();
    }
    if in_order && out.by_position.len() == ids.len() {
        return out;
    }
    // Another order: a second pass, by id.
    let mut by_id = std::collections::HashMap::new();
    let read = each_tagged(store, run, &mut |id, tags| {
        if !tags.is_empty() {
            by_id.insert(id, tags);
        }
    })
    .await;
    if read.is_err() {
        return TaskTags::default();
    }
    TaskTags { by_id: Some(by_id), ..Default::default() }
}

/// Every task of `tasks.jsonl` as (id, tags), read a piece at a time; unreadable lines skipped.
async fn each_tagged(
    store: &dyn BundleStore,
    run: &RunId,
    f: &mut (dyn FnMut(String, Vec<String>) + Send),
) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Tagged {
        id: String,
        #[serde(default)]
        tags: Vec<String>,
    }
    agenteval_core::lines::each_line(store, run, layout::TASKS, &mut |_, line| {
        if let Ok(t) = serde_json::from_slice::<Tagged>(line) {
            f(t.id, t.tags);
        }
        Ok(())
    })
    .await
}

/// Summarizes the results of the run's tasks, one file at a time, and produces
/// `results.jsonl`, one line per finished task in task order.
pub async fn summarize(
    store: &dyn BundleStore,
    run: &RunId,
    ids: &[TaskId],
    status: RunStatus,
    mode: Lines,
) -> Result<(RunSummary, Summarized)> {
    use agenteval_judge::html::{SEAL_ROW_LIMIT, SEAL_TRACE_LIMIT};
    // pass@k keeps a count per task: only worth it when the run has repetitions (`<id>@r<n>`).
    let mut scorers = default_scorers(ids.iter().any(|id| id.as_str().contains('@')));
    let tags = task_tags(store, run, ids).await;
    let mut tag_rates = tags.any().then(crate::scorers::TagRates::default);
    let mut out = Summarized { packs: PackSums::with_capacity(ids.len()), ..Default::default() };
    // Written in pieces that appear at once where the store can (S3: a multipart upload, not
    // the whole file held and rewritten while it grows); else appended.
    let mut appender = match mode {
        Lines::Write => Some(match store.open_writer(run, layout::RESULTS).await? {
            Some(w) => w,
            None => store.open_appender(run, layout::RESULTS).await?,
        }),
        Lines::Skip | Lines::Spill => None,
    };
    if matches!(mode, Lines::Spill) {
        out.spilled = Some(tempfile::tempfile().map_err(|e| agenteval_core::Error::io("a temporary file", e))?);
    }
    let spill_io = |e| agenteval_core::Error::io("writing results to a temporary file", e);
    let mut batches = std::pin::pin!(decoded_batches(store, run, ids, !matches!(mode, Lines::Skip)));
    // The batch being consumed, and the position in `ids` of its next result.
    let (mut batch, mut at) = (Vec::<Result<Decoded>>::new().into_iter(), 0);
    loop {
        let Some(r) = batch.next() else {
            match batches.next().await {
                Some(next) => {
                    (at, batch) = next.map(|(first, decoded)| (first, decoded.into_iter()))?;
                    continue;
                }
                None => break,
            }
        };
        let i = at;
        at += 1;
        let Decoded { result: r, pack, line, json } = match r {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for s in scorers.iter_mut() {
            s.observe(&r);
        }
        if let Some(t) = tag_rates.as_mut() {
            t.observe_tags(tags.get(i, r.task_id.as_str()), r.passed);
        }
        match pack {
            Some(sum) => out.packs.push(r.task_id.as_str(), sum),
            None => {
                out.producers.insert(r.task_id.to_string(), (r.job_id.clone(), r.attempt));
            }
        }
        if !matches!(mode, Lines::Skip) {
            out.lines.extend_from_slice(&json);
        }
        if out.lines.len() >= RESULTS_CHUNK {
            if let Some(a) = appender.as_mut() {
                a.append(&out.lines).await?;
            }
            if let Some(f) = out.spilled.as_mut() {
                std::io::Write::write_all(f, &out.lines).map_err(spill_io)?;
            }
            out.lines.clear();
        }
        let kept = if line.passed { &mut out.passing } else { &mut out.failing };
        if kept.len() < SEAL_TRACE_LIMIT {
            out.samples.insert(r.task_id.to_string(), Sample::of(None, &r, REPORT_VALUE_CHARS));
        }
        if kept.len() < SEAL_ROW_LIMIT {
            kept.push(line);
        }
        if !r.passed && out.failures.len() < 50 {
            out.failures.push(failure_of(&r));
        }
    }
    out.packs.finish();
    if let Some(mut a) = appender {
        a.append(&out.lines).await?;
        a.finish().await?;
    }
    if let Some(f) = out.spilled.as_mut() {
        use std::io::{Seek as _, Write as _};
        f.write_all(&out.lines).and_then(|_| f.rewind()).map_err(spill_io)?;
    }
    out.lines = Vec::new();
    let mut summary = empty_summary(*run, status, ids.len() as u64);
    for s in &scorers {
        s.finish(&mut summary);
    }
    if let Some(t) = &tag_rates {
        agenteval_core::traits::Scorer::finish(t, &mut summary);
    }
    Ok((summary, out))
}

/// Why a task failed, in a line: its agent's error, else the first evaluator that failed it.
fn failure_of(r: &TaskResult) -> Failure {
    let reason = r
        .agent
        .error
        .clone()
        .or_else(|| r.scores.iter().find(|s| !s.passed).map(|s| format!("{}: {}", s.evaluator_id, s.reason)))
        .unwrap_or_default();
    Failure { task_id: r.task_id.to_string(), reason }
}

/// The results of `ids` in batches, each with the position of its first task. A batch is read
/// here and decoded (inflated, parsed, checksummed) on a blocking thread while the next one is
/// read: on two cores the seal takes the time of the larger half, not of both. `lines`: whether
/// each result's `results.jsonl` line is wanted as JSON too.
fn decoded_batches<'a>(
    store: &'a dyn BundleStore,
    run: &'a RunId,
    ids: &'a [TaskId],
    lines: bool,
) -> impl futures::Stream<Item = Result<(usize, Vec<Result<Decoded>>)>> + 'a {
    futures::stream::iter(ids.chunks(DECODE_BATCH).enumerate())
        .map(move |(b, chunk)| async move {
            let fetched: Vec<Result<Fetched>> = futures::stream::iter(chunk)
                .map(|id| fetch_result(store, run, id))
                .buffered(READ_CONCURRENCY)
                .collect()
                .await;
            let decoded = tokio::task::spawn_blocking(move || {
                fetched.into_iter().map(|f| decode_result(f, lines)).collect::<Vec<_>>()
            })
            .await
            .map_err(|e| agenteval_core::Error::internal(format!("decoding task results: {e}")))?;
            Ok((b * DECODE_BATCH, decoded))
        })
        .buffered(2)
}

/// Task results decoded on a blocking thread at a time.
const DECODE_BATCH: usize = 256;

/// A finished task's result as read from the bundle, not yet decoded.
enum Fetched {
    /// Its pack, and the pack's path (for messages).
    Pack(Vec<u8>, String),
    /// A task folder of an older bundle: `result.json` read alone.
    Folder(Box<TaskResult>),
}

/// A finished task's result, its `results.jsonl` line (and that line as JSON, newline ended,
/// when lines are wanted),
/// and the sum of its pack when it has one (the pack is read whole for the result anyway).
struct Decoded {
    result: TaskResult,
    pack: Option<KnownSum>,
    line: ResultLine,
    json: Vec<u8>,
}

async fn fetch_result(store: &dyn BundleStore, run: &RunId, id: &TaskId) -> Result<Fetched> {
    let path = layout::task_pack(id);
    match store.get(run, &path).await {
        Ok(pack) => Ok(Fetched::Pack(pack, path)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Fetched::Folder(Box::new(
            read_json::<TaskResult>(store, run, &layout::task_file(id, layout::TASK_RESULT)).await?,
        ))),
        Err(e) => Err(e),
    }
}

fn decode_result(fetched: Result<Fetched>, lines: bool) -> Result<Decoded> {
    let (result, pack) = match fetched? {
        Fetched::Pack(pack, path) => {
            let bytes = agenteval_core::taskpack::unpack_one(&pack, layout::TASK_RESULT, &path)?
                .ok_or_else(|| agenteval_core::Error::corrupt(format!("{path} holds no {}", layout::TASK_RESULT)))?;
            let r = serde_json::from_slice(&bytes)
                .map_err(|e| agenteval_core::Error::json(format!("{path}: {} is not valid", layout::TASK_RESULT), e))?;
            (r, Some(KnownSum::of_bytes(&pack)))
        }
        Fetched::Folder(r) => (*r, None),
    };
    let line = ResultLine::from(&result);
    let mut json = Vec::new();
    if lines {
        serde_json::to_writer(&mut json, &line).expect("a result line serializes");
        json.push(b'\n');
    }
    Ok(Decoded { result, pack, line, json })
}

/// The sealed `report.html`, from the sample of lines `summarize` kept: at most
/// `SEAL_ROW_LIMIT` rows and `SEAL_TRACE_LIMIT` traces, failing tasks first.
async fn render_html(
    store: &dyn BundleStore,
    meta: &Metadata,
    summary: &RunSummary,
    kept: &Summarized,
    tasks: usize,
) -> String {
    use agenteval_judge::html::{HtmlReport, SEAL_ROW_LIMIT, SEAL_TRACE_LIMIT, TaskRows};
    let picked: Vec<ResultLine> = kept.failing.iter().chain(&kept.passing).take(SEAL_TRACE_LIMIT).cloned().collect();
    let wanted: std::collections::BTreeSet<String> = picked.iter().map(|l| l.task_id.to_string()).collect();
    // Tags feed the table's filter; a large run's spec file is not worth reading whole for them
    // (only the specs of the sampled tasks are taken from it, in one pass).
    let mut tags = std::collections::BTreeMap::new();
    let mut specs = std::collections::BTreeMap::new();
    let table = if tasks <= SEAL_ROW_LIMIT { super::TaskTable::read(store, &meta.run_id).await.ok() } else { None };
    match table {
        Some(table) => {
            for spec in (0..table.len()).filter_map(|i| table.spec(i).ok()) {
                if wanted.contains(spec.id.as_str()) {
                    specs.insert(spec.id.to_string(), spec.clone());
                }
                if !spec.tags.is_empty() {
                    tags.insert(spec.id.to_string(), spec.tags);
                }
            }
        }
        None => specs = agenteval_judge::samples::specs(store, &meta.run_id, &wanted).await,
    }
    let no_tags = Vec::new();
    let mut rows = TaskRows::new(None, SEAL_ROW_LIMIT);
    for l in kept.failing.iter().chain(&kept.passing) {
        rows.push(l, tags.get(l.task_id.as_str()).unwrap_or(&no_tags));
    }
    let mut traces = agenteval_judge::results::load_traces(
        store,
        &meta.run_id,
        &picked,
        SEAL_TRACE_LIMIT,
        agenteval_judge::results::REPORT_TRACE_BUDGET,
    )
    .await;
    traces.omitted = (summary.tasks_finished as usize).saturating_sub(picked.len());
    traces.samples = wanted
        .iter()
        .filter_map(|t| {
            let s = kept.samples.get(t)?.clone();
            Some((
                t.clone(),
                match specs.get(t) {
                    Some(spec) => s.with_spec(spec, REPORT_VALUE_CHARS),
                    None => s,
                },
            ))
        })
        .collect();
    // A task that acted shows its patch, as `agenteval report` does.
    for (t, sample) in traces.samples.iter_mut() {
        if specs.get(t).is_some_and(|s| s.environment.is_some()) {
            sample.patch = agenteval_judge::samples::patch(store, &meta.run_id, t, REPORT_VALUE_CHARS).await;
        }
    }
    let generator = format!("agenteval {}", crate::VERSION);
    agenteval_judge::html::render(&HtmlReport {
        meta,
        bundle_uri: &store.bundle_uri(&meta.run_id),
        rows: &rows,
        summary: Some(summary),
        traces: &traces,
        comparison: None,
        verdict: None,
        generator: &generator,
        frame: Default::default(),
    })
}

/// Seals a bundle: summary, report, replay command, final metadata, then the manifest over
/// everything else. Sealing again (after a resume) replaces all of them.
pub async fn seal(store: Arc<dyn BundleStore>, meta: &Metadata, ids: &[TaskId]) -> Result<RunSummary> {
    let (summary, hints) = seal_contents(store.clone(), meta, ids).await?;
    write_manifest(store.as_ref(), &meta.run_id, &hints).await?;
    Ok(summary)
}

/// Everything of sealing but the manifest: summary (`scorer.summarize` span), report
/// (`report.render` span), replay command and the final metadata. Returns with the summary what
/// the manifest can take without reading: what was written here, and who wrote each result.
pub async fn seal_contents(
    store: Arc<dyn BundleStore>,
    meta: &Metadata,
    ids: &[TaskId],
) -> Result<(RunSummary, ManifestHints)> {
    let recording = RecordingStore::new(store);
    let store: &dyn BundleStore = &recording;
    let run = &meta.run_id;
    let started = std::time::Instant::now();
    let (mut summary, kept) = summarize(store, run, ids, meta.status, Lines::Write)
        .instrument(tracing::info_span!("scorer.summarize"))
        .await?;
    if let (RunStatus::BudgetExceeded, Some(budget)) = (meta.status, meta.budget_usd) {
        // What the calls spent at the wire, or what the finished tasks did, whichever is more.
        let spent = meta.spent_usd.unwrap_or(0.0).max(summary.known_cost());
        summary.budget_usd = Some(budget);
        summary.over_budget_usd = Some((spent - budget).max(0.0));
    }
    summary.adaptive = meta.adaptive.clone();
    if let Some((calls, usd)) = meta.calls_at_wire {
        // The calls no result holds: a cancelled or cut-short task's, made all the same.
        // The agent's calls and its task's other actors' (a simulated user's).
        let in_results: u64 =
            summary.models.values().sum::<u64>() + summary.roles.values().map(|r| r.calls).sum::<u64>();
        summary.calls_without_result = calls.saturating_sub(in_results);
        if summary.calls_without_result > 0 {
            summary.cost_without_result_usd = Some((usd - summary.known_cost() - summary.role_cost()).max(0.0));
        }
        // Known only when every task's cost is: a call at an unknown price counts $0 at the wire.
        summary.run_cost_usd =
            (summary.cost_unknown_tasks == 0).then(|| usd.max(summary.known_cost() + summary.role_cost()));
    }
    store.put(run, layout::SUMMARY, &to_json_bytes(&summary)).await?;
    // Both reports under one `report.render` span: Markdown from the summary, HTML from the
    // result lines just written (a capped table, failing tasks first, and a few traces).
    let (report, html) = async {
        let report = crate::report::render(meta, &summary, &kept.failures);
        let html = render_html(store, meta, &summary, &kept, ids.len()).await;
        Ok::<_, agenteval_core::Error>((report, html))
    }
    .instrument(tracing::info_span!("report.render"))
    .await?;
    store.put(run, layout::REPORT, report.as_bytes()).await?;
    store.put(run, layout::REPORT_HTML, html.as_bytes()).await?;
    // A command that runs as it is: `submit` reads a config from a local path only, so a bundle
    // in a bucket is run again by its id, from the run index the AWS backend names.
    let uri = store.bundle_uri(run);
    let replay = if uri.contains("://") {
        format!("agenteval rerun {run} --all --backend aws\n")
    } else {
        format!("agenteval submit --config {uri}/{}\n", layout::CONFIG)
    };
    store.put(run, layout::REPLAY, replay.as_bytes()).await?;
    let mut meta = meta.clone();
    meta.sealed = true;
    store.put(run, layout::METADATA, &to_json_bytes(&meta)).await?;
    tracing::info!(run = %run, secs = started.elapsed().as_secs_f64(), "bundle sealed");
    let hints = ManifestHints {
        producers: kept.producers,
        packs: kept.packs,
        written: recording.written(),
        ..Default::default()
    };
    Ok((summary, hints))
}

/// Writes `manifest.json` entry by entry (the same JSON `Manifest` reads). The bundle is walked
/// once, without holding its listing: a file whose sum `hints` know (of the size the walk shows)
/// has its entry written to a temporary file at once; the few others (job specs and logs,
/// config, spans) are read and checksummed after. Sealing a large S3 bundle so costs a listing,
/// not a GET per file, and a million-task bundle's seal no map of its files.
pub async fn write_manifest(store: &dyn BundleStore, run: &RunId, hints: &ManifestHints) -> Result<()> {
    use std::io::{Read as _, Seek as _, Write as _};
    let known = hints.known(store, run).await?;
    let spill_io = |e| agenteval_core::Error::io("a temporary file of manifest entries", e);
    let mut spill = std::io::BufWriter::new(tempfile::tempfile().map_err(spill_io)?);
    let (mut to_read, mut spilled, mut failed) = (Vec::new(), 0u64, None);
    store
        .list_sized_each(run, "", &mut |path, size| {
            if path == layout::MANIFEST || failed.is_some() {
                return;
            }
            let k =
                known.get(&path).copied().or_else(|| taskpack::task_of_pack(&path).and_then(|t| hints.packs.get(t)));
            match k.filter(|k| size == Some(k.size)) {
                Some(k) => {
                    let mut entry = Vec::with_capacity(path.len() + 100);
                    entry.extend_from_slice(if spilled == 0 { b"\n    " } else { b",\n    " });
                    entry_json(&mut entry, &path, &hex::encode(k.sha256), k.size);
                    if let Err(e) = spill.write_all(&entry) {
                        failed = Some(e);
                    }
                    spilled += 1;
                }
                None => to_read.push(path),
            }
        })
        .await?;
    if let Some(e) = failed {
        return Err(spill_io(e));
    }
    let mut spill = spill.into_inner().map_err(|e| spill_io(e.into_error()))?;
    spill.rewind().map_err(spill_io)?;
    // Written in pieces where the store can make them appear at once; else held and put whole.
    let mut writer = store.open_writer(run, layout::MANIFEST).await?;
    let mut out = Vec::with_capacity(MANIFEST_CHUNK + 4096);
    out.extend_from_slice(
        format!("{{\n  \"schema_version\": \"{SCHEMA_VERSION}\",\n  \"run_id\": \"{run}\",\n  \"files\": {{")
            .as_bytes(),
    );
    let mut piece = vec![0u8; MANIFEST_CHUNK];
    loop {
        let n = spill.read(&mut piece).map_err(spill_io)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&piece[..n]);
        if let Some(w) = writer.as_mut()
            && out.len() >= MANIFEST_CHUNK
        {
            w.append(&out).await?;
            out.clear();
        }
    }
    let mut first = spilled == 0;
    let mut files = futures::stream::iter(to_read)
        .map(|path| async move {
            // A piece at a time: a large file (results.jsonl of a big run) is never held whole.
            let mut hasher = sha2::Sha256::new();
            let len = store.read_chunks(run, &path, &mut |piece| hasher.update(piece)).await?;
            Ok::<_, agenteval_core::Error>((path, hex::encode(hasher.finalize()), len))
        })
        .buffered(READ_CONCURRENCY);
    while let Some(file) = files.next().await {
        let (path, sha, len) = file?;
        out.extend_from_slice(if first { b"\n    " } else { b",\n    " });
        first = false;
        entry_json(&mut out, &path, &sha, len);
        if let Some(w) = writer.as_mut()
            && out.len() >= MANIFEST_CHUNK
        {
            w.append(&out).await?;
            out.clear();
        }
    }
    out.extend_from_slice(b"\n  }\n}\n");
    match writer {
        Some(mut w) => {
            w.append(&out).await?;
            w.finish().await
        }
        None => store.put(run, layout::MANIFEST, &out).await,
    }
}

/// One manifest entry, `"PATH": {"sha256": "…", "size": N}`.
fn entry_json(out: &mut Vec<u8>, path: &str, sha: &str, size: u64) {
    serde_json::to_writer(&mut *out, path).expect("paths serialize");
    out.extend_from_slice(format!(": {{\"sha256\": \"{sha}\", \"size\": {size}}}").as_bytes());
}

/// Bytes of `manifest.json` written at a time when the store takes it in pieces.
const MANIFEST_CHUNK: usize = 256 * 1024;
