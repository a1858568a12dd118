//! `validate-bundle`: required files, checksums, and agreement between the files.

use agenteval_core::format::{Metadata, ResultLine};
use agenteval_core::layout;
use agenteval_core::model::{EvaluatorScore, RunStatus, RunSummary, TaskResult, TraceEvent};
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId, SCHEMA_VERSION, lines, taskpack};
use futures::StreamExt as _;
use futures::future::LocalBoxFuture;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use super::{READ_CONCURRENCY, TaskTable, read_json, summarize};

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

/// `results.jsonl` against the task results: one line per finished task, each saying what its
/// `result.json` says (`expected`: the lines the results make, in a temporary file). Bundles
/// sealed before the file existed have none (a warning).
async fn check_results(
    store: &dyn BundleStore,
    run: &RunId,
    present: bool,
    expected: std::fs::File,
    v: &mut Validation,
) -> Result<()> {
    use std::io::BufRead as _;
    if !present {
        v.warnings
            .push(format!("{}: missing (sealed by an older agenteval); readers use the task folders", layout::RESULTS));
        return Ok(());
    }
    // A sealed bundle's file lists the tasks in the order the results are read in (that of
    // `tasks.jsonl`): compared a line at a time, nothing held. A file in another order, with a
    // task twice or a line that does not parse, is compared by task id below.
    let temp_io = |e| Error::io("reading results from a temporary file", e);
    let mut want = std::io::BufReader::new(expected.try_clone().map_err(temp_io)?).split(b'\n');
    let (mut in_step, mut disagree) = (true, Vec::new());
    lines::each_line(store, run, layout::RESULTS, &mut |_, line| {
        if !in_step || line.is_empty() {
            return Ok(());
        }
        let got = serde_json::from_slice::<ResultLine>(line).ok();
        let wanted = want.next().and_then(|w| w.ok()).and_then(|w| serde_json::from_slice::<ResultLine>(&w).ok());
        match (got, wanted) {
            (Some(g), Some(w)) if g.task_id == w.task_id => {
                if g != w {
                    disagree.push(g.task_id.to_string());
                }
            }
            _ => in_step = false,
        }
        Ok(())
    })
    .await?;
    if in_step && want.next().is_none() {
        for id in disagree {
            v.problems.push(format!("{}: the line of task {id} disagrees with its result.json", layout::RESULTS));
        }
        return Ok(());
    }
    drop(want);
    let mut expected = expected;
    let mut bytes = Vec::new();
    std::io::Seek::rewind(&mut expected)
        .and_then(|_| std::io::Read::read_to_end(&mut expected, &mut bytes))
        .map_err(temp_io)?;
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
    let want = parse(&bytes, false).map_err(|e| Error::internal(format!("recomputed results: {e}")))?;
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

/// What every check reads: the bundle's listing, its metadata and its task table, read once.
struct Bundle<'s> {
    store: &'s dyn BundleStore,
    run: RunId,
    /// Sorted (a million-task bundle's listing is held once, searched, never copied).
    files: Vec<String>,
    meta: Option<Metadata>,
    specs: TaskTable,
    /// The manifest's entries of task packs, by path, left by `checksums` for `tasks`.
    pack_sums: std::sync::Mutex<Vec<ManifestItem>>,
}

impl Bundle<'_> {
    fn has(&self, path: &str) -> bool {
        self.files.binary_search_by(|f| f.as_str().cmp(path)).is_ok()
    }

    fn sealed(&self) -> bool {
        self.meta.as_ref().is_some_and(|m| m.sealed)
    }
}

/// One check of a bundle: it adds what it finds to the validation; `Err` only when the store
/// itself failed.
type Check = for<'a> fn(&'a Bundle<'a>, &'a mut Validation) -> LocalBoxFuture<'a, Result<()>>;

/// The checks, in the order their problems are listed.
const CHECKS: &[(&str, Check)] = &[
    ("required files", |b, v| Box::pin(required_files(b, v))),
    ("metadata", |b, v| Box::pin(metadata(b, v))),
    ("checksums", |b, v| Box::pin(checksums(b, v))),
    ("tasks", |b, v| Box::pin(tasks(b, v))),
    ("summary and results", |b, v| Box::pin(summary(b, v))),
];

/// Checks a bundle: required files, checksums, and that its files agree with each other.
pub async fn validate(store: &dyn BundleStore, run: &RunId) -> Result<Validation> {
    let mut v = Validation::default();
    let files = store.list(run, "").await?;
    if files.is_empty() {
        return Err(Error::not_found(format!("no bundle at {}", store.bundle_uri(run))));
    }
    let meta: Option<Metadata> = match read_json(store, run, layout::METADATA).await {
        Ok(m) => Some(m),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => {
            v.problems.push(e.to_string());
            None
        }
    };
    let specs = match TaskTable::read(store, run).await {
        Ok(t) => t,
        Err(e) => {
            if e.kind() != ErrorKind::NotFound {
                v.problems.push(e.to_string());
            }
            TaskTable::default()
        }
    };
    let mut files = files;
    files.sort_unstable();
    let bundle = Bundle { store, run: *run, files, meta, specs, pack_sums: Default::default() };
    for (what, check) in CHECKS {
        let started = std::time::Instant::now();
        check(&bundle, &mut v).await.map_err(|e| Error::new(e.kind(), format!("checking the {what}: {e}")))?;
        tracing::debug!("checked the {what} in {:.2} s", started.elapsed().as_secs_f64());
    }
    Ok(v)
}

/// Every file a bundle must have, and those a sealed one must have too.
async fn required_files(b: &Bundle<'_>, v: &mut Validation) -> Result<()> {
    let sealed: &[&str] = if b.sealed() { layout::REQUIRED_SEALED } else { &[] };
    for req in layout::REQUIRED.iter().chain(sealed) {
        if !b.has(req) {
            v.problems.push(format!("{req}: missing"));
        }
    }
    Ok(())
}

/// The metadata's version and run id; an unsealed bundle is a warning naming `resume`.
async fn metadata(b: &Bundle<'_>, v: &mut Validation) -> Result<()> {
    let Some(m) = &b.meta else { return Ok(()) };
    let run = b.run;
    v.sealed = m.sealed;
    v.status = Some(m.status);
    check_version(layout::METADATA, &m.schema_version, v);
    if m.run_id != run {
        v.problems.push(format!("{}: run_id {} does not match the bundle's run {run}", layout::METADATA, m.run_id));
    }
    if !m.sealed {
        v.warnings.push(format!(
            "bundle is not sealed (status {}): its run is still going or its controller died; `agenteval resume {run}` finishes it",
            m.status.as_str()
        ));
    }
    if !b.specs.is_empty() && b.specs.len() as u64 != m.tasks_total {
        v.problems.push(format!("{}: {} tasks, metadata says {}", layout::TASKS, b.specs.len(), m.tasks_total));
    }
    Ok(())
}

/// `manifest.json` as validation reads it: its entries as a sorted list of (path, sha256, size),
/// the sums as bytes (a million entries as a map of strings were ~200 MB).
#[derive(Deserialize)]
struct CompactManifest {
    schema_version: String,
    #[serde(deserialize_with = "compact_entries")]
    files: Vec<ManifestItem>,
}

/// A manifest entry: its path, its sha256 (`None` when not 64 hex digits) and its size.
type ManifestItem = (Box<str>, Option<[u8; 32]>, u64);

fn compact_entries<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<ManifestItem>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Vec<ManifestItem>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of files")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some(path) = map.next_key::<String>()? {
                let e: agenteval_core::format::ManifestEntry = map.next_value()?;
                // A sum that is not 64 hex digits matches no file.
                let sum = hex::decode(&e.sha256).ok().and_then(|b| <[u8; 32]>::try_from(b).ok());
                out.push((path.into_boxed_str(), sum, e.size));
            }
            out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            Ok(out)
        }
    }
    d.deserialize_map(Visit)
}

/// A sealed bundle's files against its manifest: each listed file there with its size and
/// sha256, and every file listed.
async fn checksums(b: &Bundle<'_>, v: &mut Validation) -> Result<()> {
    if !b.sealed() || !b.has(layout::MANIFEST) {
        return Ok(());
    }
    let man = match read_json::<CompactManifest>(b.store, &b.run, layout::MANIFEST).await {
        Err(e) => {
            v.problems.push(e.to_string());
            return Ok(());
        }
        Ok(m) => m,
    };
    check_version(layout::MANIFEST, &man.schema_version, v);
    let listed = |path: &str| man.files.binary_search_by(|(p, ..)| p.as_ref().cmp(path)).is_ok();
    let unlisted: Vec<String> = b
        .files
        .iter()
        .filter(|p| p.as_str() != layout::MANIFEST && !listed(p))
        .map(|p| format!("{p}: not listed in the manifest"))
        .collect();
    let mut packs = Vec::new();
    for (path, sum, size) in man.files {
        if !b.has(&path) {
            v.problems.push(format!("{path}: listed in the manifest but missing"));
            continue;
        }
        if taskpack::task_of_pack(&path).is_some() {
            // Checked where `tasks` reads the pack for its task: each pack is read once.
            packs.push((path, sum, size));
            continue;
        }
        let bytes = b.store.get(&b.run, &path).await?;
        v.files_checked += 1;
        if let Some(problem) = sum_problem(&path, &bytes, sum, size) {
            v.problems.push(problem);
        }
    }
    *b.pack_sums.lock().unwrap_or_else(|e| e.into_inner()) = packs;
    v.problems.extend(unlisted);
    Ok(())
}

/// What is wrong with a file whose manifest entry says `sum` and `size`, if anything.
fn sum_problem(path: &str, bytes: &[u8], sum: Option<[u8; 32]>, size: u64) -> Option<String> {
    if bytes.len() as u64 != size {
        Some(format!("{path}: size {} differs from the manifest's {size}", bytes.len()))
    } else if sum.is_none_or(|s| s[..] != sha2::Sha256::digest(bytes)[..]) {
        Some(format!("{path}: sha256 differs from the manifest (the file was changed)"))
    } else {
        None
    }
}

/// The run's spans, and each finished task (a pack, or a folder in older bundles): a task of
/// this run, with every file a finished task has (a complete run has a result for each), each
/// file well-formed.
async fn tasks(b: &Bundle<'_>, v: &mut Validation) -> Result<()> {
    // Sorted lists searched, not sets: at a million tasks each set cost tens of megabytes.
    let known = SortedIds::of(b.specs.ids().iter().map(|t| t.as_str()).collect());
    let task_dirs = SortedIds::of(
        b.files
            .iter()
            .filter_map(|f| f.strip_prefix("tasks/").and_then(|rest| rest.split_once('/')).map(|(dir, _)| dir))
            .collect(),
    );
    let packs = SortedIds::of(b.files.iter().filter_map(|f| taskpack::task_of_pack(f)).collect());
    if b.has(layout::SPANS) {
        check_spans(&b.store.get(&b.run, layout::SPANS).await?, layout::SPANS, false, v);
    }
    let complete = b.sealed() && b.meta.as_ref().is_some_and(|m| m.status == RunStatus::Complete);
    if complete {
        for id in known.iter().filter(|t| !packs.contains(t) && !task_dirs.contains(t)) {
            v.problems.push(format!("tasks/{id}{}: missing in a complete run", layout::PACK_SUFFIX));
        }
    }
    // A batch of packs is read here and checked (inflated, parsed) on a blocking thread while
    // the next one is read: on two cores, the time of the larger half.
    let run = b.run;
    let sums = std::mem::take(&mut *b.pack_sums.lock().unwrap_or_else(|e| e.into_inner()));
    let mut checked = futures::stream::iter(packs.0.chunks(CHECK_BATCH))
        .map(|ids| {
            let (known, task_dirs, sums) = (&known, &task_dirs, &sums);
            async move {
                let fetched: Vec<Result<PackToCheck>> = futures::stream::iter(ids)
                    .map(|id| async move {
                        let path = format!("tasks/{id}{}", layout::PACK_SUFFIX);
                        let bytes = b.store.get(&b.run, &path).await?;
                        let foreign = !known.is_empty() && !known.contains(id);
                        let expected = sums
                            .binary_search_by(|(p, ..)| p.as_ref().cmp(path.as_str()))
                            .ok()
                            .map(|i| (sums[i].1, sums[i].2));
                        let with_folder = task_dirs.contains(id);
                        Ok(PackToCheck { id: id.to_string(), path, bytes, foreign, with_folder, expected })
                    })
                    .buffered(READ_CONCURRENCY)
                    .collect()
                    .await;
                tokio::task::spawn_blocking(move || {
                    let mut part = Validation::default();
                    for pack in fetched {
                        check_pack(&run, pack?, &mut part);
                    }
                    Ok::<_, Error>(part)
                })
                .await
                .map_err(|e| Error::internal(format!("checking task packs: {e}")))?
            }
        })
        .buffered(2);
    while let Some(part) = checked.next().await {
        let part: Validation = part?;
        v.problems.extend(part.problems);
        v.tasks_with_results += part.tasks_with_results;
        v.files_checked += part.files_checked;
    }
    for dir in task_dirs.iter().filter(|d| !packs.contains(d)) {
        if !known.is_empty() && !known.contains(dir) {
            v.problems.push(format!("tasks/{dir}/: not a task of this run ({})", layout::TASKS));
        }
        let has = |f: &str| b.has(&format!("tasks/{dir}/{f}"));
        if !has(layout::TASK_RESULT) {
            if complete {
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
        let mut files = Vec::new();
        for f in [layout::TASK_SPANS, layout::TASK_RESULT, layout::TASK_SCORES, layout::TASK_LOG, layout::TASK_TRACE] {
            match b.store.get(&b.run, &format!("tasks/{dir}/{f}")).await {
                Ok(bytes) => files.push((f.to_string(), bytes)),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        check_task(&taskpack::TaskFiles::from_files(files), &b.run, dir, &|f| format!("tasks/{dir}/{f}"), v);
    }
    Ok(())
}

/// Packs checked on a blocking thread at a time.
const CHECK_BATCH: usize = 256;

/// A task's pack as read, with what the listing says of it.
struct PackToCheck {
    id: String,
    path: String,
    bytes: Vec<u8>,
    /// Not a task of this run's table.
    foreign: bool,
    /// The task also has a folder (of the older layout).
    with_folder: bool,
    /// Its sum and size in the manifest (a sealed bundle's).
    expected: Option<(Option<[u8; 32]>, u64)>,
}

/// One pack: a task of this run, unpacked, with every file a finished task has, each
/// well-formed.
fn check_pack(run: &RunId, pack: PackToCheck, v: &mut Validation) {
    let PackToCheck { id, path, bytes, foreign, with_folder, expected } = pack;
    if let Some((sum, size)) = expected {
        v.files_checked += 1;
        if let Some(problem) = sum_problem(&path, &bytes, sum, size) {
            v.problems.push(problem);
        }
    }
    if foreign {
        v.problems.push(format!("tasks/{id}{}: not a task of this run ({})", layout::PACK_SUFFIX, layout::TASKS));
    }
    if with_folder {
        v.problems.push(format!("tasks/{id}/: a task with a pack has no folder"));
    }
    let files = match taskpack::unpack(&bytes, &path) {
        Ok(f) => f,
        Err(e) => {
            v.problems.push(e.to_string());
            return;
        }
    };
    v.tasks_with_results += 1;
    for f in [layout::TASK_RESULT, layout::TASK_TRACE, layout::TASK_LOG] {
        if files.get(f).is_none() {
            v.problems.push(format!("{path}/{f}: missing"));
        }
    }
    check_task(&files, run, &id, &|f| format!("{path}/{f}"), v);
}

/// Task ids in order, searched.
struct SortedIds<'a>(Vec<&'a str>);

impl<'a> SortedIds<'a> {
    fn of(mut ids: Vec<&'a str>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        SortedIds(ids)
    }

    fn contains(&self, id: &str) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &&'a str> {
        self.0.iter()
    }
}

impl<'s, 'a> IntoIterator for &'s SortedIds<'a> {
    type Item = &'s &'a str;
    type IntoIter = std::slice::Iter<'s, &'a str>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A sealed bundle's summary and `results.jsonl` against the task results they were made from.
async fn summary(b: &Bundle<'_>, v: &mut Validation) -> Result<()> {
    let Some(m) = b.meta.as_ref().filter(|m| m.sealed && b.has(layout::SUMMARY)) else { return Ok(()) };
    // A result that cannot be read is already named by its task's check: the summary cannot be
    // recomputed then, which is no reason to stop validating.
    let recomputed = match summarize(b.store, &b.run, b.specs.ids(), m.status, super::Lines::Spill).await {
        Ok(x) => x,
        Err(e) if e.kind() == ErrorKind::Corrupt => return Ok(()),
        Err(e) => return Err(e),
    };
    let s = match read_json::<RunSummary>(b.store, &b.run, layout::SUMMARY).await {
        Ok(s) => s,
        Err(e) => {
            v.problems.push(e.to_string());
            return Ok(());
        }
    };
    let (re, out) = recomputed;
    let expected = out.spilled.ok_or_else(|| Error::internal("summarize kept no lines"))?;
    check_results(b.store, &b.run, b.has(layout::RESULTS), expected, v).await?;
    let at = layout::SUMMARY;
    if s.status != m.status {
        v.problems.push(format!("{at}: status {} but metadata says {}", s.status.as_str(), m.status.as_str()));
    }
    if s.tasks_finished != re.tasks_finished || s.passed != re.passed {
        v.problems.push(format!(
            "{at}: {} finished / {} passed, but the task results give {} / {}",
            s.tasks_finished, s.passed, re.tasks_finished, re.passed
        ));
    }
    let costs_agree = s.cost_is_known() == re.cost_is_known() && close(s.known_cost(), re.known_cost());
    if !costs_agree || s.total_tokens != re.total_tokens {
        v.problems.push(format!("{at}: cost or tokens disagree with the task results"));
    }
    if m.status == RunStatus::Complete && s.tasks_finished != m.tasks_total {
        v.problems
            .push(format!("{at}: run is complete but {} of {} tasks have results", s.tasks_finished, m.tasks_total));
    }
    Ok(())
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

/// One finished task's files (`label` names a file of it in problems).
fn check_task(files: &taskpack::TaskFiles, run: &RunId, dir: &str, label: &dyn Fn(&str) -> String, v: &mut Validation) {
    let path = label(layout::TASK_SPANS);
    if let Some(bytes) = files.get(layout::TASK_SPANS) {
        check_spans(bytes, &path, true, v);
    }
    let rpath = label(layout::TASK_RESULT);
    let Some(bytes) = files.get(layout::TASK_RESULT) else { return };
    let result: TaskResult = match serde_json::from_slice(bytes) {
        Ok(r) => r,
        Err(e) => {
            v.problems.push(Error::json(format!("{rpath} is not valid"), e).to_string());
            return;
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
    let spath = label(layout::TASK_SCORES);
    if let Some(bytes) = files.get(layout::TASK_SCORES) {
        match serde_json::from_slice::<Vec<EvaluatorScore>>(bytes) {
            Ok(s) if s != result.scores => v.problems.push(format!("{spath}: differs from the scores in result.json")),
            Ok(_) => {}
            Err(e) => v.problems.push(Error::json(format!("{spath} is not valid"), e).to_string()),
        }
    }
    // The worker log's first line names the attempt that wrote it.
    let lpath = label(layout::TASK_LOG);
    if let Some(bytes) = files.get(layout::TASK_LOG) {
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
    let tpath = label(layout::TASK_TRACE);
    if let Some(bytes) = files.get(layout::TASK_TRACE) {
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
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
