//! `agenteval import harbor JOB_DIR`: a Harbor job made a run of the index, its bundle written
//! as agenteval writes one (each trial a task attempt graded by Harbor's rules, its files kept),
//! so `runs show`, `compare`, gates, baselines, the report and the UI read it as any run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agenteval_core::format::Imported;
use agenteval_core::location::{BundleRoot, IndexLocation};
use agenteval_core::model::{EventKind, RunStatus, TaskResult, TaskSpec, TraceEvent};
use agenteval_core::traits::{BundleStore, Resolver as _, RunIndex};
use agenteval_core::{Error, JobId, RunId, TaskId, layout};
use agenteval_engine::bundle::{self, Metadata, TaskTable, to_json_bytes};
use agenteval_interchange::harbor::{self, Job, Trial};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::IndexArgs;
use crate::session::load_config;
use crate::wiring::Wiring;
use crate::{Failure, exit};

/// Most bytes of one trial file kept in its task's pack (a log, a trajectory).
const MAX_KEPT_FILE: u64 = 8 << 20;
/// Most bytes of all of a trial's kept files: a job folder of many large files is kept in part,
/// never held whole.
const MAX_KEPT_TRIAL: usize = 32 << 20;

/// What an import did.
#[derive(Debug, Serialize)]
pub struct ImportedRun {
    pub run_id: String,
    pub name: String,
    pub bundle: String,
    /// It was imported before: nothing was written.
    pub already: bool,
    pub trials: usize,
    pub tasks: usize,
    pub passed: usize,
    /// Harbor's mean reward over the trials it scored, as read back here.
    pub mean_reward: Option<f64>,
    /// The job's own mean, as its `result.json` reports it.
    pub harbor_mean: Option<f64>,
    /// Tasks whose folder was found: their fingerprints are agenteval's, so they pair with an
    /// agenteval run of the same tasks; the others carry Harbor's digest.
    pub tasks_with_folder: usize,
    pub unfinished: Vec<(String, String)>,
}

/// Where the run goes: a config's storage and index, else `--index FILE` (or the nearest
/// `runs/index.sqlite`, else `./runs/index.sqlite`, made) with its bundles beside it.
pub(crate) async fn destination(
    index: &IndexArgs,
) -> Result<(Arc<Wiring>, Arc<dyn BundleStore>, Arc<dyn RunIndex>, String), Failure> {
    let exe = std::env::current_exe().map_err(|e| Error::io("finding agenteval's own program", e))?;
    if let Some(c) = &index.config {
        let cfg = load_config(c, &[]).map_err(crate::session::config_failure)?.config;
        let wiring = Wiring::new(exe, cfg.aws.as_ref());
        let store = wiring.store(&cfg.storage.bundle_root).await?;
        let idx = wiring.create_index(&cfg.storage.index_location()).await?;
        return Ok((wiring, store, idx, format!("the storage of {}", c.display())));
    }
    let at = match (&index.index, index.backend.as_deref()) {
        (Some(p), _) => IndexLocation::Sqlite(p.clone()),
        (None, Some(b)) => crate::wiring::default_index(Some(b))?.0,
        (None, None) => {
            let here = std::env::current_dir().map_err(|e| Error::io("reading the current folder", e))?;
            let rel = Path::new("runs").join("index.sqlite");
            IndexLocation::Sqlite(
                here.ancestors().map(|d| d.join(&rel)).find(|p| p.is_file()).unwrap_or_else(|| here.join(rel)),
            )
        }
    };
    // Bundles go beside a local index; any other's bundles are where a run config stores them.
    let IndexLocation::Sqlite(path) = at else {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!(
                "the import needs a place for its bundle beside {at}: name the run config whose storage and index it goes to (--config FILE)"
            ),
        });
    };
    let root = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&root).map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
    let wiring = Wiring::new(exe, None);
    let store = wiring.store(&BundleRoot::Local(root.clone())).await?;
    let idx = wiring.create_index(&IndexLocation::Sqlite(path.clone())).await?;
    Ok((wiring, store, idx, format!("{} (bundles in {})", path.display(), root.display())))
}

/// A Harbor task name as a task id: the characters a task id allows, others as `_`.
fn task_id_of(name: &str) -> Result<TaskId, Failure> {
    let cleaned: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect();
    cleaned.parse().map_err(|_| Error::invalid(format!("Harbor task `{name}` cannot be named as a task here")).into())
}

/// The task as agenteval reads its folder (when the folder is where Harbor ran it, or under
/// `--tasks`), so its fingerprint is the one an agenteval run of it records; else a task made
/// of Harbor's digest.
fn task_spec(id: &TaskId, t: &Trial, tasks_dir: Option<&Path>, job: &Job) -> (TaskSpec, bool) {
    let candidates = tasks_dir.map(|d| d.join(&t.task_name)).into_iter().chain(t.task_path.clone());
    for dir in candidates {
        if dir.join("task.toml").is_file()
            && let Ok(mut spec) = agenteval_harbor::read_task(&dir)
        {
            spec.id = id.clone();
            return (spec, true);
        }
    }
    let digest = job.digests.get(&t.task_name).cloned().or_else(|| t.task_checksum.clone()).unwrap_or_default();
    let instruction =
        read_trajectory(t).and_then(|v| v["steps"][0]["message"].as_str().map(str::to_string)).unwrap_or_default();
    let spec = TaskSpec {
        id: id.clone(),
        input: Value::String(instruction),
        expected: None,
        tags: vec![],
        evaluators: vec![],
        metadata: json!({"harbor": {"digest": digest, "source": t.source}}),
        environment: None,
        content: Some(digest.trim_start_matches("sha256:").to_string()),
        tests: None,
        solution: None,
        steps: None,
        user: None,
    };
    (spec, false)
}

fn read_capped(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(MAX_KEPT_FILE).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn read_trajectory(t: &Trial) -> Option<Value> {
    serde_json::from_slice(&read_capped(&t.dir.join("agent/trajectory.json"))?).ok()
}

/// The trial's files a reader wants beside its result: its trajectory, the verifier's rewards
/// and output, its exception and logs (regular files only, each within a cap).
fn kept_files(t: &Trial) -> Vec<(String, Vec<u8>)> {
    // The trial's own files first: what a reader needs most is never the part left out.
    let mut wanted: Vec<(String, PathBuf)> = Vec::new();
    for name in ["result.json", "config.json", "exception.txt", "trial.log"] {
        wanted.push((format!("artifacts/harbor/{name}"), t.dir.join(name)));
    }
    for (sub, prefix) in [("agent", "artifacts/harbor/agent"), ("verifier", "artifacts/harbor/verifier")] {
        let Ok(entries) = std::fs::read_dir(t.dir.join(sub)) else { continue };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            if let Some(name) = f.file_name().and_then(|n| n.to_str()) {
                wanted.push((format!("{prefix}/{name}"), f.clone()));
            }
        }
    }
    // Read in order until the trial's budget is spent: the rest is left out, never held.
    let (mut out, mut total) = (Vec::new(), 0usize);
    for (name, path) in wanted {
        let Some(bytes) = read_capped(&path) else { continue };
        total += bytes.len();
        if total > MAX_KEPT_TRIAL {
            break;
        }
        out.push((name, bytes));
    }
    out
}

/// The trace of a trial: its ATIF trajectory's steps as the agent's events (text, tool calls,
/// results), then how it ended with the agent's own usage report.
fn events_of(t: &Trial, graded: &harbor::Graded) -> Vec<(EventKind, Value)> {
    let mut events: Vec<(EventKind, Value)> = Vec::new();
    if let Some(traj) = read_trajectory(t) {
        for step in traj["steps"].as_array().into_iter().flatten().filter(|s| s["source"] == "agent") {
            if let Some(m) = step["message"].as_str().filter(|m| !m.trim().is_empty()) {
                events.push((EventKind::AgentPlan, json!({"plan": m})));
            }
            for c in step["tool_calls"].as_array().into_iter().flatten() {
                events.push((
                    EventKind::AgentToolCall,
                    json!({"tool": c["function_name"], "arguments": c["arguments"], "call_id": c["tool_call_id"]}),
                ));
            }
            for r in step["observation"]["results"].as_array().into_iter().flatten() {
                let output = r["content"].as_str().map_or_else(|| r["content"].to_string(), str::to_string);
                events.push((EventKind::AgentToolResult, json!({"output": output, "call_id": r["source_call_id"]})));
            }
        }
    }
    events.push((
        EventKind::AgentTerminal,
        json!({
            "terminated_by": graded.agent.terminated_by.as_str(),
            "agent_reported_usage": t.usage,
            "harbor_exception": t.exception.as_ref().map(|(ty, msg)| json!({"type": ty, "message": msg})),
        }),
    ));
    events.push((
        EventKind::EvaluatorScore,
        json!({"evaluator_id": "tests", "kind": "tests", "score": graded.score.score, "passed": graded.passed, "reason": graded.score.reason}),
    ));
    events
}

/// An imported attempt's events as its `trace.jsonl`: numbered in order, all at `at`, its first
/// attempt, nothing metered (another tool's numbers are its own report, kept in the events).
/// An imported run's documents, once its tasks' packs are written: its config, task table and
/// metadata, then sealed (its summary) and put in the index, as a run of agenteval's is.
pub(crate) async fn write_run(
    store: &Arc<dyn BundleStore>,
    idx: &dyn RunIndex,
    config: &Value,
    table: &TaskTable,
    meta: &Metadata,
    ids: &[TaskId],
) -> Result<(), Error> {
    let run = meta.run_id;
    store.put(&run, layout::CONFIG, &to_json_bytes(config)).await?;
    table.write_to(store.as_ref(), &run, layout::TASKS).await?;
    store.put(&run, layout::METADATA, &to_json_bytes(meta)).await?;
    bundle::seal(store.clone(), meta, ids).await?;
    bundle::rebuild::rebuild_run(store.as_ref(), idx, &run).await?;
    Ok(())
}

pub(crate) fn trace_lines(run: RunId, id: &TaskId, at: DateTime<Utc>, events: Vec<(EventKind, Value)>) -> Vec<u8> {
    let mut lines = Vec::new();
    for (i, (kind, payload)) in events.into_iter().enumerate() {
        let e = TraceEvent {
            run_id: run,
            task_id: id.clone(),
            step: i as u32,
            attempt: 1,
            timestamp: at,
            kind,
            payload,
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
        };
        lines.extend_from_slice(&serde_json::to_vec(&e).expect("serializes"));
        lines.push(b'\n');
    }
    lines
}

fn result_of(run: RunId, id: &TaskId, t: &Trial, g: &harbor::Graded) -> TaskResult {
    let started = t.started_at.unwrap_or_else(Utc::now);
    TaskResult {
        schema_version: agenteval_core::SCHEMA_VERSION.into(),
        run_id: run,
        task_id: id.clone(),
        job_id: JobId::numbered(0, 1),
        attempt: 1,
        passed: g.passed,
        agent: g.agent.clone(),
        scores: vec![g.score.clone()],
        started_at: started,
        finished_at: t.finished_at.unwrap_or(started),
        image: None,
        changed_outside: 0,
        setup_seconds: None,
        suspect: vec![],
        tampered: vec![],
        without_tampering: None,
        rewards: g.rewards.clone(),
        unscored: g.unscored,
        models: BTreeMap::new(),
        provider_wait_seconds: 0.0,
        steps: vec![],
        harbor_would_skip: None,
        roles: Default::default(),
    }
}

/// The command.
// Long: read the job, name its tasks, write each trial's pack, then the run's documents, seal
// and index; each step short.
pub async fn harbor(
    job_dir: &Path,
    tasks_dir: Option<&Path>,
    name: Option<&str>,
    index: &IndexArgs,
    json: bool,
) -> Result<u8, Failure> {
    let job =
        harbor::read_job(job_dir).map_err(|e| Failure { code: exit::USAGE, error: anyhow::anyhow!(e.to_string()) })?;
    if job.trials.is_empty() {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!("{}: the job has no finished trial to import", job_dir.display()),
        });
    }
    let started = job.started_at.or(job.trials[0].started_at).unwrap_or_else(Utc::now);
    let run = RunId::derived(started.timestamp_millis().max(0) as u64, format!("harbor:{}", job.id).as_bytes());
    let (_wiring, store, idx, at) = destination(index).await?;
    let first = &job.trials[0];
    let agent_label = match &first.model {
        Some(m) => format!("{} · {m}", first.agent),
        None => first.agent.clone(),
    };
    let run_name = name.map(str::to_string).unwrap_or_else(|| format!("{} [harbor:{agent_label}]", job.name));
    if let Some(r) = idx.get_run(&run).await? {
        let done = ImportedRun {
            run_id: run.to_string(),
            name: r.name,
            bundle: r.bundle_uri,
            already: true,
            trials: job.trials.len(),
            tasks: 0,
            passed: 0,
            mean_reward: None,
            harbor_mean: job.reported_means.values().next().copied(),
            tasks_with_folder: 0,
            unfinished: job.unfinished.clone(),
        };
        if json {
            say!("{}", serde_json::to_string(&done).expect("serializes"));
        } else {
            say!("Harbor job {} was imported before, as run {run} ({}): nothing to do", job.id, done.name);
        }
        return Ok(exit::OK);
    }
    // Each task's trials in the order they started: its first attempt is the task, the others
    // its repetitions, as agenteval names repetitions.
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut table = TaskTable::default();
    let (mut ids, mut passed, mut with_folder) = (Vec::new(), 0, 0);
    let (mut reward_sum, mut rewarded) = (0.0, 0u64);
    for t in &job.trials {
        let base = task_id_of(&t.task_name)?;
        let rep = seen.entry(t.task_name.clone()).or_insert(0);
        let id = base.repetition(*rep);
        *rep += 1;
        let (spec, found) = task_spec(&id, t, tasks_dir, &job);
        with_folder += usize::from(found);
        table.push(&spec)?;
        let g = harbor::grade(t);
        passed += usize::from(g.passed);
        if let Some(r) = &g.rewards {
            reward_sum += agenteval_core::rewards::rewards_pass(r, true).0;
            rewarded += 1;
        }
        let result = result_of(run, &id, t, &g);
        let lines = trace_lines(run, &id, t.started_at.unwrap_or_else(Utc::now), events_of(t, &g));
        let log = format!("imported from Harbor trial {} (job {}) attempt 1\n", t.name, job.id);
        bundle::write_task_pack(store.as_ref(), &result, &log, &lines, &kept_files(t)).await?;
        ids.push(id);
    }
    let agent_json = match first.agent.as_str() {
        "oracle" => json!({"kind": "oracle"}),
        "nop" => json!({"kind": "nop"}),
        other => json!({"kind": "command", "command": ["harbor-agent", other], "model": first.model}),
    };
    let tasks_root = tasks_dir
        .map(Path::to_path_buf)
        .or_else(|| first.task_path.as_ref().and_then(|p| p.parent().map(Path::to_path_buf)));
    let config = json!({
        "name": run_name,
        "benchmark": {"kind": "harbor", "path": tasks_root},
        "agent": agent_json,
    });
    let meta = Metadata {
        backend: "harbor".into(),
        benchmark: "harbor".into(),
        agent: agent_label,
        config_hash: bundle::sha256_hex(&agenteval_core::model::canonical_json(&config)),
        agenteval_version: agenteval_engine::VERSION.into(),
        finished_at: job.finished_at.or(Some(started)),
        reason: (!job.unfinished.is_empty()).then(|| format!("{} Harbor trial(s) had no result", job.unfinished.len())),
        imported: Some(Imported {
            tool: "harbor".into(),
            version: job.harbor_version.clone(),
            id: job.id.clone(),
            from: std::path::absolute(job_dir).unwrap_or_else(|_| job_dir.to_path_buf()).display().to_string(),
        }),
        ..Metadata::new(run, &run_name, RunStatus::Complete, ids.len() as u64, started)
    };
    write_run(&store, idx.as_ref(), &config, &table, &meta, &ids).await?;
    let done = ImportedRun {
        run_id: run.to_string(),
        name: run_name,
        bundle: store.bundle_uri(&run),
        already: false,
        trials: job.trials.len(),
        tasks: seen.len(),
        passed,
        mean_reward: (rewarded > 0).then(|| reward_sum / rewarded as f64),
        harbor_mean: job.reported_means.values().next().copied(),
        tasks_with_folder: with_folder,
        unfinished: job.unfinished.clone(),
    };
    if json {
        say!("{}", serde_json::to_string(&done).expect("serializes"));
    } else {
        say!("imported Harbor job {} as run {run} ({}) into {at}", job.id, done.name);
        let mean = done.mean_reward.map_or("none".to_string(), |m| format!("{m:.3}"));
        let harbor_mean = done.harbor_mean.map_or(String::new(), |m| format!(" (Harbor reported {m:.3})"));
        say!(
            "  {} trials of {} tasks: {} passed, mean reward {mean}{harbor_mean}",
            done.trials,
            done.tasks,
            done.passed
        );
        if with_folder < ids.len() {
            say!(
                "  {} trial(s) whose task folder was not found (name it with --tasks DIR): they carry Harbor's digest, and pair only with runs that do",
                ids.len() - with_folder
            );
        }
        for (trial, why) in &done.unfinished {
            say!("  not imported: {trial}: {why}");
        }
    }
    Ok(exit::OK)
}
