//! A run's bundle read into the other tools' formats `agenteval-interchange` builds: each task
//! attempt's ATIF trajectory, for `export --to atif` and the Harbor job folder.

use std::collections::BTreeMap;
use std::path::Path;

use agenteval_core::config::RunConfig;
use agenteval_core::model::{TaskResult, TaskSpec, TraceEvent};
use agenteval_core::taskpack::read_task_file;
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, RunId, layout};
use agenteval_engine::bundle::{self, Metadata};
use agenteval_interchange::atif;
use serde::Serialize;

use crate::Failure;

/// What `export --to atif` wrote.
#[derive(Debug, Default, Serialize)]
pub struct Written {
    pub run_id: String,
    pub out: String,
    pub schema_version: &'static str,
    pub documents: usize,
    pub model_calls: usize,
    pub tool_calls: usize,
    /// Trace events ATIF has no step for, by kind: kept under each document's `extra`.
    pub kept_in_extra: BTreeMap<String, usize>,
    /// Tasks whose agent left no trace: their document holds the instruction and says so.
    pub no_trace: Vec<String>,
    /// Tasks with no result (the run ended before them): no document.
    pub not_run: Vec<String>,
}

/// The agent of a run as ATIF names it: its preset or kind, the preset's pinned version (else
/// agenteval's), its model.
pub fn agent_info(config: &RunConfig, meta: &Metadata) -> atif::AgentInfo {
    // The label names the model only for an agent that has one of its own (not `oracle`).
    let label = config.agent.label();
    let (name, model) = match label.split_once(" · ") {
        Some((n, m)) => (n.to_string(), Some(m.to_string())),
        None => (label.clone(), None),
    };
    let as_json = serde_json::to_value(&config.agent).unwrap_or_default();
    let version = as_json["version"].as_str().map_or_else(|| meta.agenteval_version.clone(), str::to_string);
    atif::AgentInfo { name, version, model }
}

/// The task's input as the agent read it: text as it is, anything else as JSON.
pub fn instruction(t: &TaskSpec) -> String {
    match &t.input {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// A finished task's result and trace; `None` when it has no result.
pub async fn attempt_files(
    store: &dyn BundleStore,
    run: &RunId,
    task: &TaskSpec,
) -> Result<Option<(TaskResult, Vec<TraceEvent>)>, Failure> {
    let result = match read_task_file(store, run, &task.id, layout::TASK_RESULT).await {
        Ok(b) => serde_json::from_slice::<TaskResult>(&b)
            .map_err(|e| Error::invalid(format!("run {run}: task {}'s result.json cannot be read: {e}", task.id)))?,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let trace = match read_task_file(store, run, &task.id, layout::TASK_TRACE).await {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    // A line that is not an event (a hostile bundle's) is left out, not a reason to stop.
    let events = trace
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter_map(|l| serde_json::from_slice::<TraceEvent>(l).ok())
        .filter(|e| e.attempt == 0 || e.attempt == result.attempt)
        .collect();
    Ok(Some((result, events)))
}

/// A file name for a task id that is safe on any file system (ids are checked, but `/` and
/// `@` have meanings in paths and URLs).
pub fn file_stem(id: &str) -> String {
    agenteval_interchange::file_stem(id)
}

/// One task attempt's trajectory.
pub fn trajectory(
    run: &RunId,
    task: &TaskSpec,
    agent: &atif::AgentInfo,
    result: &TaskResult,
    events: &[TraceEvent],
) -> atif::Exported {
    let run = run.to_string();
    atif::trajectory(&atif::Attempt {
        run_id: &run,
        task_id: task.id.as_str(),
        instruction: instruction(task),
        agent: agent.clone(),
        events,
        result: Some(result),
    })
}

/// Writes every finished task's trajectory into `out` and `summary.json` beside them.
pub async fn write_atif(
    store: &dyn BundleStore,
    run: &RunId,
    meta: &Metadata,
    config: &RunConfig,
    out: &Path,
) -> Result<Written, Failure> {
    let io = |what: String, e: std::io::Error| Error::io(what, e);
    std::fs::create_dir_all(out).map_err(|e| io(format!("creating {}", out.display()), e))?;
    let agent = agent_info(config, meta);
    let tasks = bundle::read_tasks(store, run).await?;
    let mut w = Written {
        run_id: run.to_string(),
        out: out.display().to_string(),
        schema_version: atif::SCHEMA_VERSION,
        ..Written::default()
    };
    for task in &tasks {
        let Some((result, events)) = attempt_files(store, run, task).await? else {
            w.not_run.push(task.id.to_string());
            continue;
        };
        let x = trajectory(run, task, &agent, &result, &events);
        w.documents += 1;
        w.model_calls += x.model_calls;
        w.tool_calls += x.tool_calls;
        for (k, n) in x.kept_in_extra {
            *w.kept_in_extra.entry(k).or_default() += n;
        }
        if x.no_trace {
            w.no_trace.push(task.id.to_string());
        }
        let path = out.join(format!("{}.json", file_stem(task.id.as_str())));
        let doc = serde_json::to_vec_pretty(&x.trajectory).expect("serializes");
        std::fs::write(&path, doc).map_err(|e| io(format!("writing {}", path.display()), e))?;
    }
    let summary = out.join("summary.json");
    std::fs::write(&summary, serde_json::to_vec_pretty(&w).expect("serializes"))
        .map_err(|e| io(format!("writing {}", summary.display()), e))?;
    Ok(w)
}

/// What `export --to harbor` wrote.
#[derive(Debug, Default, Serialize)]
pub struct HarborWritten {
    pub run_id: String,
    pub job_dir: String,
    pub trials: usize,
    /// Trials whose task folder was found and hashed as Harbor hashes it (in `lock.json`).
    pub locked: usize,
    /// Tasks with no result (the run ended before them): no trial.
    pub not_run: Vec<String>,
}

/// A finished task attempt of a run being exported, read and converted once for every format.
pub struct Finished {
    pub task: TaskSpec,
    pub result: TaskResult,
    pub exported: atif::Exported,
    /// The task's folder, when it is a Harbor task still there, and its digest as Harbor
    /// computes it.
    pub folder: Option<std::path::PathBuf>,
    pub digest: Option<String>,
}

/// A run's attempts as every format reads them.
pub struct Done {
    /// The finished attempts, each read from its pack once, as ATIF.
    pub attempts: Vec<Finished>,
    /// The tasks with no result.
    pub not_run: Vec<String>,
    /// The agent as ATIF names it.
    pub agent: atif::AgentInfo,
    /// Tasks the run meant to run.
    pub total: u64,
}

/// Reads a run's attempts once for every format.
pub async fn finished(
    store: &dyn BundleStore,
    run: &RunId,
    meta: &Metadata,
    config: &RunConfig,
) -> Result<Done, Failure> {
    let agent = agent_info(config, meta);
    let tasks = bundle::read_tasks(store, run).await?;
    let (mut done, mut not_run) = (Vec::new(), Vec::new());
    for task in tasks.iter() {
        let Some((result, events)) = attempt_files(store, run, task).await? else {
            not_run.push(task.id.to_string());
            continue;
        };
        let exported = trajectory(run, task, &agent, &result, &events);
        let folder = task_folder(task);
        let digest = folder.as_deref().and_then(|f| agenteval_interchange::harbor::digest::task_digest(f).ok());
        done.push(Finished { task: task.clone(), result, exported, folder, digest });
    }
    Ok(Done { attempts: done, not_run, agent, total: tasks.len() as u64 })
}

/// A task folder the run read, when it is still there.
fn task_folder(task: &TaskSpec) -> Option<std::path::PathBuf> {
    let p = task.metadata.get("harbor")?.get("path")?.as_str()?;
    let p = std::path::PathBuf::from(p);
    p.join("task.toml").is_file().then_some(p)
}

/// The run as a Harbor job folder at `out` (`out`'s name is the job's name, its parent the
/// jobs folder Harbor's viewer is pointed at).
pub async fn write_harbor(
    store: &dyn BundleStore,
    run: &RunId,
    meta: &Metadata,
    config: &RunConfig,
    out: &Path,
) -> Result<HarborWritten, Failure> {
    let done = finished(store, run, meta, config).await?;
    let mut w = write_harbor_of(store, run, meta, config, &done, out).await?;
    w.not_run = done.not_run;
    Ok(w)
}

/// [`write_harbor`] of attempts already read.
// Long: each trial's files written in turn, then the job's three.
pub async fn write_harbor_of(
    store: &dyn BundleStore,
    run: &RunId,
    meta: &Metadata,
    config: &RunConfig,
    done: &Done,
    out: &Path,
) -> Result<HarborWritten, Failure> {
    let (agent, total) = (&done.agent, done.total);
    use agenteval_interchange::harbor::write::{self as hw, JobIn, Tokens, TrialIn};
    let io = |what: String, e: std::io::Error| Error::io(what, e);
    let write = |path: &Path, bytes: &[u8]| -> Result<(), Failure> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| io(format!("creating {}", d.display()), e))?;
        }
        std::fs::write(path, bytes).map_err(|e| io(format!("writing {}", path.display()), e).into())
    };
    let out = std::path::absolute(out).map_err(|e| io(format!("reading {}", out.display()), e))?;
    let job_name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| run.to_string());
    let jobs_dir = out.parent().map(Path::to_path_buf).unwrap_or_default();
    let source =
        meta.dataset.as_ref().map(|d| d.name.clone()).unwrap_or_else(|| match config.benchmark.task_folder() {
            Some(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "adhoc".into()),
            None => meta.benchmark.clone(),
        });
    let mut w = HarborWritten { run_id: run.to_string(), job_dir: out.display().to_string(), ..Default::default() };
    let started = meta.created_at;
    let mut trials = Vec::new();
    for f in &done.attempts {
        let (task, result, x) = (&f.task, &f.result, &f.exported);
        let seed = format!("{run}/{}", task.id);
        let id = RunId::derived(result.started_at.timestamp_millis().max(0) as u64, seed.as_bytes()).to_string();
        let short: String = bundle::sha256_hex(seed.as_bytes()).chars().take(7).collect();
        let m = x.trajectory.final_metrics.clone().unwrap_or_default();
        let metered = x.model_calls > 0;
        trials.push(TrialIn {
            id,
            name: format!("{}__{short}", task.id.base()),
            task_name: task.id.base().to_string(),
            task_path: f.folder.as_deref(),
            digest: f.digest.clone(),
            source: source.clone(),
            result,
            tokens: Tokens {
                input: m.total_prompt_tokens.filter(|_| metered),
                cached: m.total_cached_tokens.filter(|_| metered),
                output: m.total_completion_tokens.filter(|_| metered),
                cost_usd: m.total_cost_usd.filter(|_| metered),
            },
        });
    }
    let job = JobIn {
        id: run.to_string(),
        name: job_name,
        jobs_dir: &jobs_dir,
        agent,
        started_at: started,
        finished_at: meta.finished_at,
        n_attempts: config.repetitions.max(),
        n_concurrent: u64::from(config.backend.max_concurrent_jobs),
        n_total: total,
    };
    let json = |v: &serde_json::Value| serde_json::to_vec_pretty(v).expect("serializes");
    for (t, f) in trials.iter().zip(&done.attempts) {
        let (task, result, x) = (&f.task, &f.result, &f.exported);
        let dir = out.join(&t.name);
        write(&dir.join("config.json"), &json(&hw::trial_config(&job, t)))?;
        write(&dir.join("result.json"), &json(&hw::trial_result(&job, t)))?;
        write(&dir.join("agent/trajectory.json"), &serde_json::to_vec_pretty(&x.trajectory).expect("serializes"))?;
        if let Some(rw) = &result.rewards {
            write(&dir.join("verifier/reward.json"), &serde_json::to_vec_pretty(rw).expect("serializes"))?;
        }
        let said: String = result.scores.iter().map(|s| format!("{}: {}\n", s.evaluator_id, s.reason)).collect();
        write(&dir.join("verifier/test-stdout.txt"), said.as_bytes())?;
        if let Some((ty, msg)) = hw::exception_of(result) {
            write(&dir.join("exception.txt"), format!("{ty}: {msg}\n").as_bytes())?;
        }
        // The pack unpacked once: its log and its files; an older bundle's folder, its log.
        match store.get(run, &layout::task_pack(&task.id)).await {
            Ok(pack) => {
                for (name, bytes) in agenteval_core::taskpack::unpack(&pack, &layout::task_pack(&task.id))?.iter() {
                    if name == layout::TASK_LOG {
                        write(&dir.join("trial.log"), bytes)?;
                    } else if let Some(rest) = name.strip_prefix("artifacts/") {
                        write(&dir.join("artifacts/agenteval").join(rest), bytes)?;
                    }
                }
            }
            Err(_) => {
                if let Ok(log) = read_task_file(store, run, &task.id, layout::TASK_LOG).await {
                    write(&dir.join("trial.log"), &log)?;
                }
            }
        }
        w.trials += 1;
        w.locked += usize::from(t.digest.is_some());
    }
    let paths: Vec<&Path> = {
        let mut p: Vec<&Path> = trials.iter().filter_map(|t| t.task_path).collect();
        p.sort();
        p.dedup();
        p
    };
    write(&out.join("config.json"), &json(&hw::job_config(&job, &paths)))?;
    write(&out.join("result.json"), &json(&hw::job_result(&job, &trials)))?;
    write(&out.join("lock.json"), &json(&hw::job_lock(&job, &trials)))?;
    Ok(w)
}
