//! `agenteval replay RUN`: re-runs a run's config (or another) with the model calls recorded in
//! its bundle substituted for live ones, and compares every task with the recording: `MATCH`
//! (same success, `terminated_by`, tool calls in order, a simulated user's turns, final state of its environment (the
//! agent's patch), scores, answer, cost within ±5%), `DIFFER`
//! (with the first difference) or `CODE_CHANGED` (agenteval's version, or how it reads the
//! recorded config, changed since the recording).
//!
//! The recording may be a bundle folder with no index (one kept in a repository), and `--check`
//! replays it into a scratch folder that is removed afterwards: CI replays a recording against a
//! new build of its agent, and the trajectory (tool calls, their results, the user's turns, the
//! final state) is what must not change.

use std::path::Path;
use std::sync::Arc;

use agenteval_core::config::{LoadedConfig, RunConfig};
use agenteval_core::layout;
use agenteval_core::location::BundleRoot;
use agenteval_core::model::{EventKind, RunStatus, TaskResult, TraceEvent};
use agenteval_core::traits::{BundleStore, RunIndex};
use agenteval_core::{Error, RunId, taskpack};
use agenteval_engine::bundle::{Metadata, read_json};
use agenteval_engine::controller;
use serde_json::{Value, json};

use crate::session::{config_failure, controller_options, load_config, print_outcome_of, start};
use crate::telemetry::Telemetry;
use crate::wiring::Wiring;
use crate::{Failure, exit, judging};
use agenteval_engine::controller::start::Start;

/// Relative cost difference a match allows.
const COST_TOLERANCE: f64 = 0.05;

/// What a task did, as far as a replay compares it.
#[derive(Debug, PartialEq)]
struct Behaviour {
    passed: bool,
    answer: Option<Value>,
    terminated_by: String,
    error: Option<String>,
    tools: Vec<(String, Value)>,
    /// What each tool call gave back, in order: (tool, its output). Only the `llm` agent's, whose
    /// tools are agenteval's: an installed agent's record of its own tools holds what changes
    /// from run to run (the gateway's address in its command line).
    results: Vec<(String, String)>,
    /// A conversation's simulated user, turn by turn (`user.message`).
    said: Vec<String>,
    cost: f64,
    /// The grade: every score, by evaluator.
    scores: Vec<(String, String)>,
    /// sha256 of the agent's patch to its environment (its final state), when it has one.
    patch: Option<String>,
    /// It had a patch, but neither it nor its digest was kept.
    patch_unknown: bool,
    /// Each file the kept patch changes, with the digest of its part of the patch (bytecode
    /// left out), to name the first file that differs.
    patch_files: Option<std::collections::BTreeMap<String, String>>,
}

/// Python's bytecode caches: written by whatever imported the code, at times and with
/// timestamps no replay can repeat, and never the agent's work.
fn is_bytecode(path: &str) -> bool {
    path.starts_with("__pycache__/")
        || path.contains("/__pycache__/")
        || path.ends_with(".pyc")
        || path.ends_with(".pyo")
}

fn sha256_hex(bytes: &[u8]) -> String {
    <sha2::Sha256 as sha2::Digest>::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A git patch's files and their parts' digests, bytecode caches left out.
fn patch_files(patch: &[u8]) -> std::collections::BTreeMap<String, String> {
    let text = String::from_utf8_lossy(patch);
    let mut files = std::collections::BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    let flush = |c: Option<(String, String)>, files: &mut std::collections::BTreeMap<String, String>| {
        if let Some((path, body)) = c
            && !is_bytecode(&path)
        {
            files.insert(path, sha256_hex(body.as_bytes()));
        }
    };
    for line in text.split_inclusive('\n') {
        if let Some(header) = line.strip_prefix("diff --git ") {
            flush(current.take(), &mut files);
            let path = header.trim_end().rsplit_once(" b/").map_or(header.trim_end(), |(_, b)| b).to_string();
            current = Some((path, line.to_string()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
        }
    }
    flush(current, &mut files);
    files
}

async fn behaviour(store: &dyn BundleStore, run: &RunId, task: &str, with_results: bool) -> Option<Behaviour> {
    let id: agenteval_core::TaskId = task.parse().ok()?;
    let result: TaskResult =
        serde_json::from_slice(&taskpack::read_task_file(store, run, &id, layout::TASK_RESULT).await.ok()?).ok()?;
    let trace = taskpack::read_task_file(store, run, &id, layout::TASK_TRACE).await.unwrap_or_default();
    let events: Vec<TraceEvent> = trace.split(|&b| b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect();
    let said = events
        .iter()
        .filter(|e| e.kind == EventKind::UserMessage)
        .map(|e| e.payload.get("text").and_then(Value::as_str).unwrap_or("").to_string())
        .collect();
    let results = events
        .iter()
        .filter(|e| with_results && e.kind == EventKind::AgentToolResult)
        .map(|e| {
            let name = e.payload.get("tool").and_then(Value::as_str).unwrap_or("").to_string();
            let output = match e.payload.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            (name, output)
        })
        .collect();
    let tools = events
        .into_iter()
        .filter(|e| e.kind == EventKind::AgentToolCall)
        .map(|e| {
            let name = e.payload.get("tool").and_then(Value::as_str).unwrap_or("").to_string();
            (name, e.payload.get("arguments").cloned().unwrap_or(Value::Null))
        })
        .collect();
    let mut scores: Vec<(String, String)> = result
        .scores
        .iter()
        .map(|s| (s.evaluator_id.clone(), format!("{} ({})", s.score, if s.passed { "passed" } else { "failed" })))
        .collect();
    scores.sort();
    // The digest the worker kept (whole, even when the patch was too big to keep), else the
    // kept patch's own (a bundle from before digests were kept).
    // The kept patch, compared without bytecode caches, file by file; else the digest the
    // worker kept (whole, even when the patch was too big to keep).
    let kept = taskpack::read_task_file(store, run, &id, "artifacts/patch.diff").await.ok();
    let patch_files = kept.as_deref().map(patch_files);
    let patch = match &patch_files {
        Some(files) => Some(sha256_hex(serde_json::to_string(files).unwrap_or_default().as_bytes())),
        None => taskpack::read_task_file(store, run, &id, "artifacts/patch.sha256")
            .await
            .ok()
            .map(|d| String::from_utf8_lossy(&d).trim().to_string()),
    };
    // A patch neither kept nor digested: the final state cannot be compared.
    let log = taskpack::read_task_file(store, run, &id, layout::TASK_LOG).await.unwrap_or_default();
    let patch_unknown = patch.is_none() && String::from_utf8_lossy(&log).contains("artifact patch.diff not kept");
    Some(Behaviour {
        scores,
        patch,
        patch_unknown,
        patch_files,
        passed: result.passed,
        answer: result.agent.final_answer.clone(),
        terminated_by: result.agent.terminated_by.as_str().to_string(),
        error: result.agent.error.clone(),
        cost: result.total_cost_usd(),
        tools,
        results,
        said,
    })
}

/// A value in a difference: its start and end when it is long.
fn clip(v: &impl std::fmt::Display) -> String {
    crate::output::middle_cut(&v.to_string(), 120)
}

/// The first way `now` differs from `was`, if it does.
fn first_difference(was: &Behaviour, now: &Behaviour) -> Option<String> {
    // Whole enough to keep where a recording and a call differ (the JSON pointer comes first).
    let because = now.error.as_deref().map(|e| format!(" ({})", crate::output::middle_cut(e, 400))).unwrap_or_default();
    // A tool that gave back something else is where a trajectory first parts from its recording
    // (a changed image, a changed tool): the model's next request differs because of it.
    if let Some((i, (a, b))) = was.results.iter().zip(&now.results).enumerate().find(|(_, (a, b))| a != b) {
        return Some(format!("tool result {} ({}): {} → {}", i + 1, a.0, clip(&a.1), clip(&b.1)));
    }
    if was.terminated_by != now.terminated_by {
        return Some(format!("terminated_by {} → {}{because}", was.terminated_by, now.terminated_by));
    }
    if was.passed != now.passed {
        return Some(format!("passed {} → {}{because}", was.passed, now.passed));
    }
    for (i, pair) in was.tools.iter().zip(now.tools.iter()).enumerate() {
        if pair.0 != pair.1 {
            return Some(format!(
                "tool call {}: {} {} → {} {}",
                i + 1,
                pair.0.0,
                clip(&pair.0.1),
                pair.1.0,
                clip(&pair.1.1)
            ));
        }
    }
    if was.tools.len() != now.tools.len() {
        return Some(format!("{} tool calls → {}", was.tools.len(), now.tools.len()));
    }
    if let Some((i, (a, b))) = was.said.iter().zip(&now.said).enumerate().find(|(_, (a, b))| a != b) {
        return Some(format!("the simulated user's turn {}: {} → {}", i + 1, clip(a), clip(b)));
    }
    if was.said.len() != now.said.len() {
        return Some(format!("{} user turns → {}", was.said.len(), now.said.len()));
    }
    if was.patch_unknown || now.patch_unknown {
        return Some(
            "the environment's final state cannot be compared (a patch too big to keep, with no digest)".into(),
        );
    }
    if let (Some(a), Some(b)) = (&was.patch_files, &now.patch_files) {
        let paths: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for p in paths {
            match (a.get(p), b.get(p)) {
                (Some(x), Some(y)) if x == y => continue,
                (Some(_), Some(_)) => return Some(format!("the environment's final state: {p} differs")),
                (Some(_), None) => {
                    return Some(format!("the environment's final state: {p} changed only in the recording"));
                }
                _ => return Some(format!("the environment's final state: {p} changed only in the replay")),
            }
        }
    } else if was.patch != now.patch {
        let show =
            |p: &Option<String>| p.as_ref().map_or("none".to_string(), |h| format!("sha256 {}", &h[..12.min(h.len())]));
        return Some(format!("the environment's final state (patch {} → {})", show(&was.patch), show(&now.patch)));
    }
    if was.scores != now.scores {
        let diff = was.scores.iter().zip(&now.scores).find(|(a, b)| a != b);
        return Some(match diff {
            Some((a, b)) => format!("score {}: {} → {}", a.0, a.1, b.1),
            None => format!("{} scores → {}", was.scores.len(), now.scores.len()),
        });
    }
    if was.answer != now.answer {
        let show = |a: &Option<Value>| a.as_ref().map_or("nothing".to_string(), clip);
        return Some(format!("answer {} → {}", show(&was.answer), show(&now.answer)));
    }
    let scale = was.cost.abs().max(now.cost.abs());
    if scale > 0.0 && (was.cost - now.cost).abs() > COST_TOLERANCE * scale {
        return Some(format!("cost ${:.6} → ${:.6}", was.cost, now.cost));
    }
    None
}

/// The recording a replay reads.
pub enum Recording {
    /// A run of the index, by reference (an id, a prefix, `latest:NAME`, ...).
    Indexed(Arc<dyn RunIndex>, String),
    /// A bundle folder, with or without an index (a recording kept in a repository).
    Folder(std::path::PathBuf),
}

impl Recording {
    /// `reference` as a bundle folder, when it names one (a folder with the bundle's metadata).
    pub fn folder(reference: &str) -> Option<std::path::PathBuf> {
        let p = Path::new(reference);
        p.join(layout::METADATA).is_file().then(|| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
    }
}

/// The store of a bundle folder. A folder kept under another name than its run id (a
/// repository's `recordings/nightly`) is read through a link named by the id its metadata
/// gives, in `link` (kept for as long as the store is read).
async fn folder_store(
    wiring: &Wiring,
    dir: &Path,
    link: &mut Option<tempfile::TempDir>,
) -> Result<(Arc<dyn BundleStore>, RunId), Failure> {
    let named = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.parse::<RunId>().ok());
    if named.is_some() {
        return Ok(agenteval_engine::resolve::store_from_bundle_uri(wiring, &dir.display().to_string()).await?);
    }
    let meta_path = dir.join(layout::METADATA);
    let bytes = std::fs::read(&meta_path).map_err(|e| Error::io(format!("reading {}", meta_path.display()), e))?;
    let meta: agenteval_core::format::Metadata = serde_json::from_slice(&bytes)
        .map_err(|e| Error::corrupt(format!("{} is not a bundle's metadata: {e}", meta_path.display())))?;
    let root =
        tempfile::Builder::new().prefix("agenteval-recording-").tempdir().map_err(|e| Error::io("a link folder", e))?;
    let at = root.path().join(meta.run_id.to_string());
    std::os::unix::fs::symlink(dir, &at).map_err(|e| Error::io("linking the recording", e))?;
    let found = agenteval_engine::resolve::store_from_bundle_uri(wiring, &at.display().to_string()).await?;
    *link = Some(root);
    Ok(found)
}

/// How a replay runs and says what it found.
pub struct ReplayOptions<'a> {
    pub with_config: Option<&'a Path>,
    /// CI's check: the replay goes to a scratch folder removed afterwards (kept, and named, when
    /// a task differs), so it adds nothing to an index or a runs folder.
    pub check: bool,
    pub json: bool,
    pub quiet: bool,
}

pub async fn replay(
    wiring: Arc<Wiring>,
    recording: Recording,
    o: ReplayOptions<'_>,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    let (with_config, json, quiet) = (o.with_config, o.json, o.quiet);
    let mut renamed = None;
    let (store, run) = match &recording {
        Recording::Indexed(index, reference) => {
            let run = judging::resolve_ref(index.as_ref(), reference).await?;
            (controller::locate(wiring.as_ref(), index.as_ref(), &run).await?.store.clone(), run)
        }
        Recording::Folder(dir) => folder_store(wiring.as_ref(), dir, &mut renamed).await?,
    };
    crate::session::not_imported(store.as_ref(), &run, "replayed").await?;
    let meta: Metadata = read_json(store.as_ref(), &run, layout::METADATA).await?;
    let mut loaded = replay_config(&wiring, store.as_ref(), &run, with_config, &meta.agent_flags).await?;
    if with_config.is_some() && !meta.agent_flags.is_empty() && !json && !quiet {
        say!("with the run's own agent and model: --set {}", meta.agent_flags.join(" --set "));
    }
    let code_changed = if meta.agenteval_version != agenteval_engine::VERSION {
        Some(format!("recorded with agenteval {}, replayed with {}", meta.agenteval_version, agenteval_engine::VERSION))
    } else if with_config.is_none() && controller::config_hash(&loaded.resolved()) != meta.config_hash {
        Some("this agenteval reads the recorded config differently (its hash changed)".to_string())
    } else {
        None
    };
    let (dir, recorded_tasks) = unpack_cassettes(store.as_ref(), &run).await?;
    // Only the recorded tasks are replayed: tasks the recording never reached have nothing to
    // compare with.
    let filter = loaded.config.benchmark.filter_mut();
    filter.ids = recorded_tasks.iter().map(|t| t.split('@').next().unwrap_or(t).to_string()).collect();
    filter.ids.dedup();
    filter.limit = None;
    loaded.config.name = format!("{} (replay)", meta.name);
    let scratch = if o.check { Some(scratch_storage(&mut loaded.config)?) } else { None };

    let how = Start { cassettes: Some((dir.path(), agenteval_llm::CassetteMode::Replay)), ..Start::default() };
    let ready = start(&wiring, loaded, how).await?;
    let opts = controller_options(ready.config(), wiring.clone(), json, quiet, telemetry).await?;
    let outcome = ready.submit(opts).await?;
    let loaded_config = ready.config();
    let new_store =
        agenteval_core::traits::Resolver::store(wiring.as_ref(), &loaded_config.storage.bundle_root).await?;

    let own_tools = agenteval_engine::agents::access::calls_in_process(loaded_config);
    let mut rows = Vec::new();
    for task in &recorded_tasks {
        let Some(was) = behaviour(store.as_ref(), &run, task, own_tools).await else { continue };
        let verdict = match behaviour(new_store.as_ref(), &outcome.run_id, task, own_tools).await {
            None => Some("no result in the replay".to_string()),
            Some(now) => first_difference(&was, &now),
        };
        let (word, detail) = match verdict {
            None => (Verdict::Match, String::new()),
            Some(d) if code_changed.is_some() => (Verdict::CodeChanged, d),
            Some(d) => (Verdict::Differ, d),
        };
        rows.push((task.clone(), word, detail));
    }
    let all_match = rows.iter().all(|r| r.1 == Verdict::Match);
    let code = if !all_match {
        exit::CHECK_FAILED
    } else if outcome.status != RunStatus::Complete {
        exit::INCOMPLETE
    } else {
        exit::OK
    };
    // A check that failed keeps its replay to look at; one that held leaves nothing behind.
    let kept = match scratch {
        Some(dir) if code != exit::OK => Some(dir.keep().join("runs").join(outcome.run_id.to_string())),
        _ => None,
    };
    let shown = Replayed {
        run,
        outcome: &outcome,
        code_changed: code_changed.as_deref(),
        rows: &rows,
        code,
        kept: kept.as_deref(),
    };
    if json {
        say!("{}", shown.json());
    } else {
        shown.print(loaded_config, quiet || o.check);
    }
    Ok(code)
}

/// `--check`'s scratch folder, which the replay's bundle and index go to.
fn scratch_storage(config: &mut RunConfig) -> Result<tempfile::TempDir, Failure> {
    let dir = tempfile::Builder::new()
        .prefix("agenteval-replay-check-")
        .tempdir()
        .map_err(|e| Error::io("a scratch folder for the replay", e))?;
    config.storage =
        agenteval_core::config::StorageConfig { bundle_root: BundleRoot::Local(dir.path().join("runs")), index: None };
    Ok(dir)
}

/// The config a replay runs: the recorded one (or `with_config`, with the `--agent` and
/// `--model` the run was submitted with), which must be an `llm` run or one whose agent's calls
/// went through the gateway, on a backend of this machine with a local bundle folder.
async fn replay_config(
    wiring: &Wiring,
    store: &dyn agenteval_core::traits::BundleStore,
    run: &agenteval_core::RunId,
    with_config: Option<&Path>,
    agent_flags: &[String],
) -> Result<LoadedConfig, Failure> {
    let loaded = match with_config {
        Some(path) => load_config(path, agent_flags).map_err(config_failure)?,
        None => {
            let recorded: Value = read_json(store, run, layout::CONFIG).await?;
            let config: RunConfig = serde_json::from_value(recorded).map_err(|e| {
                Error::corrupt(format!("the recorded config of run {run} cannot be read by this agenteval: {e}"))
            })?;
            let path = std::path::PathBuf::from(store.bundle_uri(run)).join(layout::CONFIG);
            LoadedConfig { config, path, agent_flags: vec![] }
        }
    };
    if agenteval_engine::agents::access::upstream_of(&loaded.config).is_none() {
        return Err(Error::invalid(format!(
            "run {run} used the `{}` agent without `agent.upstream`: only runs of the `llm` agent, of an agent \
             whose calls went through the gateway, or with a judge (`roles.judge`) recorded model calls to replay",
            loaded.config.agent.kind()
        ))
        .into());
    }
    if !wiring.kind(&loaded.config)?.on_this_machine() || !loaded.config.storage.bundle_root.is_local() {
        return Err(Error::invalid("replay runs on the local backend with a local bundle folder").into());
    }
    Ok(loaded)
}

/// The bundle's cassettes, one file per task, in a folder where the workers read them; and the
/// tasks that have one, sorted.
async fn unpack_cassettes(
    store: &dyn agenteval_core::traits::BundleStore,
    run: &agenteval_core::RunId,
) -> Result<(tempfile::TempDir, Vec<String>), Failure> {
    let dir = tempfile::Builder::new()
        .prefix("agenteval-replay-")
        .tempdir()
        .map_err(|e| Error::io("a cassette folder", e))?;
    let suffix = format!("/{}", layout::TASK_CASSETTE);
    let mut recorded_tasks = Vec::new();
    for path in store.list(run, "tasks/").await? {
        // A pack holds its task's cassettes, if it has any: the agent's, a conversation's simulated
        // user's (its turns replay from it) and the verifier's judge's (its verdicts do).
        if let Some(task) = taskpack::task_of_pack(&path) {
            let id: agenteval_core::TaskId = task.parse()?;
            let mut any = false;
            for (file, name) in [
                (layout::TASK_CASSETTE, format!("{task}.jsonl")),
                (layout::USER_CASSETTE, format!("{task}.user.jsonl")),
                (layout::JUDGE_CASSETTE, format!("{task}.judge.jsonl")),
            ] {
                match taskpack::read_task_file(store, run, &id, file).await {
                    Ok(b) => {
                        std::fs::write(dir.path().join(name), b).map_err(|e| Error::io("writing a cassette", e))?;
                        any = true;
                    }
                    Err(e) if e.kind() == agenteval_core::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if any {
                recorded_tasks.push(task.to_string());
            }
        } else if let Some(task) = path.strip_prefix("tasks/").and_then(|p| p.strip_suffix(&suffix)) {
            // A task folder (older bundles) shows its cassette.
            std::fs::write(dir.path().join(format!("{task}.jsonl")), store.get(run, &path).await?)
                .map_err(|e| Error::io("writing a cassette", e))?;
            recorded_tasks.push(task.to_string());
        }
    }
    if recorded_tasks.is_empty() {
        return Err(
            Error::not_found(format!("run {run} has no recorded model calls (no task has a cassette.jsonl)")).into()
        );
    }
    recorded_tasks.sort();
    Ok((dir, recorded_tasks))
}

/// What a replay found for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// It behaved as recorded.
    Match,
    /// It did not (the first difference beside it).
    Differ,
    /// It did not, and agenteval's version or how it reads the config changed since.
    CodeChanged,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Match => "MATCH",
            Verdict::Differ => "DIFFER",
            Verdict::CodeChanged => "CODE_CHANGED",
        }
    }
}

/// What a replay found, task by task, for the terminal or `--json`.
struct Replayed<'a> {
    run: agenteval_core::RunId,
    outcome: &'a controller::RunOutcome,
    code_changed: Option<&'a str>,
    /// `(task, verdict, the first difference)`.
    rows: &'a [(String, Verdict, String)],
    code: u8,
    /// `--check`'s replay bundle, kept because a task differed.
    kept: Option<&'a Path>,
}

impl Replayed<'_> {
    fn count(&self, verdict: Verdict) -> usize {
        self.rows.iter().filter(|r| r.1 == verdict).count()
    }

    fn json(&self) -> Value {
        let tasks: Vec<Value> =
            self.rows.iter().map(|(t, w, d)| json!({"task_id": t, "verdict": w.as_str(), "difference": d})).collect();
        json!({
            "run_id": self.run,
            "replay_run_id": self.outcome.run_id,
            "replay_status": self.outcome.status,
            "code_changed": self.code_changed,
            "match": self.count(Verdict::Match),
            "differ": self.count(Verdict::Differ),
            "code_changed_tasks": self.count(Verdict::CodeChanged),
            "tasks": tasks,
            "replay_bundle": self.kept,
            "exit_code": self.code,
        })
    }

    fn print(&self, config: &RunConfig, quiet: bool) {
        if !quiet {
            // A replay that could not run says so below, task by task.
            let _ = print_outcome_of(self.outcome, config, false, quiet, false);
            say!("");
        }
        if let Some(why) = self.code_changed {
            say!("note: {why}");
        }
        for (task, word, detail) in self.rows {
            let word = word.as_str();
            if detail.is_empty() {
                say!("{word:<12} {task}");
            } else {
                say!("{}", crate::output::wrapped(&format!("{word:<12} {task}  "), detail, 80));
            }
        }
        say!(
            "replay of {}: {} tasks, {} MATCH, {} DIFFER, {} CODE_CHANGED",
            self.run,
            self.rows.len(),
            self.count(Verdict::Match),
            self.count(Verdict::Differ),
            self.count(Verdict::CodeChanged)
        );
        if let Some(dir) = self.kept {
            say!("the replay is kept in {}", dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(files: &[(&str, &str)]) -> Vec<u8> {
        files
            .iter()
            .map(|(p, body)| format!("diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x\n+{body}\n"))
            .collect::<String>()
            .into_bytes()
    }

    fn with(files: &[(&str, &str)]) -> Behaviour {
        let pf = patch_files(&patch(files));
        Behaviour {
            passed: true,
            answer: None,
            terminated_by: "completed".into(),
            error: None,
            tools: vec![],
            results: vec![],
            said: vec![],
            cost: 0.0,
            scores: vec![],
            patch: Some(sha256_hex(serde_json::to_string(&pf).unwrap().as_bytes())),
            patch_unknown: false,
            patch_files: Some(pf),
        }
    }

    #[test]
    fn a_changed_user_turn_is_the_difference_named() {
        let was = Behaviour { said: vec!["hi".into(), "bye ###STOP###".into()], ..with(&[]) };
        let now = Behaviour { said: vec!["hi".into(), "more please".into()], ..with(&[]) };
        assert_eq!(first_difference(&was, &now).unwrap(), "the simulated user's turn 2: bye ###STOP### → more please");
        let short = Behaviour { said: vec!["hi".into()], ..with(&[]) };
        assert_eq!(first_difference(&was, &short).unwrap(), "2 user turns → 1");
        assert_eq!(first_difference(&was, &was), None);
    }

    #[test]
    fn a_tool_that_gave_back_something_else_is_named_before_what_followed_from_it() {
        let was = Behaviour { results: vec![("bash".into(), "3 passed".into())], ..with(&[]) };
        let now = Behaviour {
            results: vec![("bash".into(), "1 failed".into())],
            terminated_by: "replay_miss".into(),
            ..with(&[])
        };
        assert_eq!(first_difference(&was, &now).unwrap(), "tool result 1 (bash): 3 passed → 1 failed");
    }

    #[test]
    fn bytecode_caches_are_left_out_and_the_first_differing_file_is_named() {
        let was = with(&[("src/app.py", "y"), ("src/__pycache__/app.cpython-311.pyc", "\u{1}")]);
        let same = with(&[("src/app.py", "y"), ("src/__pycache__/app.cpython-311.pyc", "\u{2}"), ("x.pyc", "z")]);
        assert_eq!(first_difference(&was, &same), None);
        let other = with(&[("src/app.py", "z")]);
        assert_eq!(
            first_difference(&was, &other).as_deref(),
            Some("the environment's final state: src/app.py differs")
        );
        let more = with(&[("src/app.py", "y"), ("notes.txt", "n")]);
        assert_eq!(
            first_difference(&was, &more).as_deref(),
            Some("the environment's final state: notes.txt changed only in the replay")
        );
    }
}
