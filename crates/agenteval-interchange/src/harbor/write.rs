//! A run written as a Harbor 0.26 job folder: the job's `config.json`, `result.json` and
//! `lock.json`, and per task attempt a trial's `config.json` and `result.json`, in the shapes
//! Harbor's own models (`JobConfig`, `JobResult`, `JobLock`, `TrialConfig`, `TrialResult`) read.

use std::collections::BTreeMap;
use std::path::Path;

use agenteval_core::model::{TaskResult, TerminatedBy};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::atif::AgentInfo;

/// One trial of the job: a task attempt and what is known of its task.
pub struct TrialIn<'a> {
    /// Harbor's id of the trial (a UUID).
    pub id: String,
    pub name: String,
    /// The task's name (its base id: a repetition is another trial of the same task).
    pub task_name: String,
    pub task_path: Option<&'a Path>,
    /// `sha256:…`, as Harbor computes it, when the task's folder was there to hash.
    pub digest: Option<String>,
    pub source: String,
    pub result: &'a TaskResult,
    /// Tokens and cost as the gateway metered them (from the trajectory's final metrics).
    pub tokens: Tokens,
}

/// Metered usage of a trial.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    pub input: Option<u64>,
    pub cached: Option<u64>,
    pub output: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// The job as a whole.
pub struct JobIn<'a> {
    pub id: String,
    pub name: String,
    pub jobs_dir: &'a Path,
    pub agent: &'a AgentInfo,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub n_attempts: u32,
    pub n_concurrent: u64,
    /// Tasks the run meant to run (its trials and those never run).
    pub n_total: u64,
}

/// The model as Harbor names one: `provider/name`, split.
fn model_info(model: Option<&str>) -> Value {
    match model {
        None => Value::Null,
        Some(m) => match m.split_once(':').or_else(|| m.split_once('/')) {
            Some((p, n)) => json!({"name": n, "provider": p}),
            None => json!({"name": m, "provider": null}),
        },
    }
}

fn agent_config(agent: &AgentInfo) -> Value {
    json!({"name": agent.name, "model_name": agent.model})
}

/// The exception Harbor would have recorded for an attempt that did not end by itself: the
/// type Harbor names (`AgentTimeoutError`, `NonZeroAgentExitCodeError`, `BudgetExceededError`)
/// where it has one, else agenteval's own (`AgentevalInfraError`, …), which Harbor's models
/// read as an unknown exception.
pub fn exception_of(r: &TaskResult) -> Option<(&'static str, String)> {
    let ty = match r.agent.terminated_by {
        TerminatedBy::Completed => return None,
        TerminatedBy::LimitTime => "AgentTimeoutError",
        TerminatedBy::AgentError => "NonZeroAgentExitCodeError",
        TerminatedBy::LimitCost | TerminatedBy::LimitTokens => "BudgetExceededError",
        TerminatedBy::LimitTurns => "AgentevalTurnLimitError",
        TerminatedBy::LimitTrace | TerminatedBy::LimitDisk | TerminatedBy::LimitMemory => "AgentevalResourceLimitError",
        TerminatedBy::InfraFailure => "AgentevalInfraError",
        TerminatedBy::ReplayMiss => "AgentevalReplayMissError",
    };
    Some((ty, r.agent.error.clone().unwrap_or_else(|| r.agent.terminated_by.as_str().to_string())))
}

/// A task as Harbor names it: its folder, else (a task that is no folder: a case of a JSONL
/// file) a package name under the benchmark's.
fn task_ref(t: &TrialIn<'_>) -> (Value, Value) {
    match t.task_path {
        Some(p) => (json!({"path": p, "source": t.source}), json!({"path": p})),
        None => (
            json!({"name": format!("{}/{}", t.source, t.task_name), "source": t.source}),
            json!({"org": t.source, "name": t.task_name}),
        ),
    }
}

/// A trial's `config.json`.
pub fn trial_config(job: &JobIn<'_>, t: &TrialIn<'_>) -> Value {
    json!({
        "task": task_ref(t).0,
        "trial_name": t.name,
        "trials_dir": job.jobs_dir.join(&job.name),
        "agent": agent_config(job.agent),
        "environment": {"type": "docker"},
        "job_id": job.id,
    })
}

/// A trial's `result.json`.
pub fn trial_result(job: &JobIn<'_>, t: &TrialIn<'_>) -> Value {
    let r = t.result;
    let exception = exception_of(r).map(|(ty, msg)| {
        json!({"exception_type": ty, "exception_message": msg, "exception_traceback": "", "occurred_at": r.finished_at})
    });
    let dir = job.jobs_dir.join(&job.name).join(&t.name);
    json!({
        "schema_version": 1,
        "id": t.id,
        "task_name": t.task_name,
        "trial_name": t.name,
        "trial_uri": format!("file://{}", dir.display()),
        "task_id": task_ref(t).1,
        "source": t.source,
        "task_checksum": t.digest.as_deref().map_or(String::new(), |d| d.trim_start_matches("sha256:").to_string()),
        "config": trial_config(job, t),
        "agent_info": {"name": job.agent.name, "version": job.agent.version, "model_info": model_info(job.agent.model.as_deref())},
        "agent_result": {
            "n_input_tokens": t.tokens.input,
            "n_cache_tokens": t.tokens.cached,
            "n_output_tokens": t.tokens.output,
            "cost_usd": t.tokens.cost_usd,
            "metadata": {"agenteval": {
                "run_id": r.run_id,
                "task_id": r.task_id,
                "passed": r.passed,
                "outcome": r.outcome().as_str(),
                "terminated_by": r.agent.terminated_by.as_str(),
                "metered_by": "agenteval gateway",
                "tampered": r.tampered.len(),
            }},
        },
        "verifier_result": r.rewards.as_ref().map(|rw| json!({"rewards": rw})),
        "exception_info": exception,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "agent_execution": {"started_at": r.started_at, "finished_at": r.finished_at},
    })
}

/// The job's `config.json`.
pub fn job_config(job: &JobIn<'_>, task_paths: &[&Path]) -> Value {
    json!({
        "job_name": job.name,
        "jobs_dir": job.jobs_dir,
        "n_attempts": job.n_attempts,
        "n_concurrent_trials": job.n_concurrent,
        "agents": [agent_config(job.agent)],
        "tasks": task_paths.iter().map(|p| json!({"path": p})).collect::<Vec<_>>(),
    })
}

/// The job's `result.json`: its stats as Harbor's `JobStats` counts them.
pub fn job_result(job: &JobIn<'_>, trials: &[TrialIn<'_>]) -> Value {
    let source = trials.first().map_or("adhoc", |t| t.source.as_str());
    let key = match &job.agent.model {
        Some(m) => format!("{}__{}__{source}", job.agent.name, m),
        None => format!("{}__{source}", job.agent.name),
    };
    let mut reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut exception_stats: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut scored, mut errors) = (0u64, 0u64);
    let mut sums: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    let mut totals = Tokens::default();
    for t in trials {
        if let Some(rw) = &t.result.rewards {
            scored += 1;
            for (k, v) in rw {
                reward_stats.entry(k.clone()).or_default().entry(format!("{v:?}")).or_default().push(t.name.clone());
                let s = sums.entry(k.clone()).or_default();
                s.0 += v;
                s.1 += 1;
            }
        }
        if let Some((ty, _)) = exception_of(t.result) {
            errors += 1;
            exception_stats.entry(ty.to_string()).or_default().push(t.name.clone());
        }
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        totals.input = add(totals.input, t.tokens.input);
        totals.cached = add(totals.cached, t.tokens.cached);
        totals.output = add(totals.output, t.tokens.output);
        totals.cost_usd = match (totals.cost_usd, t.tokens.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
    // Harbor's mean metric: of `reward` when every scored trial has one, else per name.
    let metric = match sums.get("reward") {
        Some((s, n)) if sums.len() == 1 => json!({"mean": s / *n as f64}),
        _ => Value::Object(sums.iter().map(|(k, (s, n))| (format!("mean_{k}"), json!(s / *n as f64))).collect()),
    };
    json!({
        "schema_version": 1,
        "id": job.id,
        "started_at": job.started_at,
        "updated_at": job.finished_at.unwrap_or(job.started_at),
        "finished_at": job.finished_at,
        "n_total_trials": job.n_total,
        "stats": {
            "n_completed_trials": trials.len(),
            "n_errored_trials": errors,
            "n_running_trials": 0,
            "n_pending_trials": job.n_total.saturating_sub(trials.len() as u64),
            "n_cancelled_trials": 0,
            "n_retries": 0,
            "evals": {key: {
                "n_trials": scored,
                "n_errors": errors,
                "metrics": if sums.is_empty() { json!([]) } else { json!([metric]) },
                "pass_at_k": {},
                "reward_stats": reward_stats,
                "exception_stats": exception_stats,
            }},
            "n_input_tokens": totals.input,
            "n_cache_tokens": totals.cached,
            "n_output_tokens": totals.output,
            "cost_usd": totals.cost_usd,
        },
    })
}

/// The job's `lock.json`: each trial's task pinned by its digest (trials whose task folder was
/// not there to hash are left out: a lock never names a digest it did not compute).
pub fn job_lock(job: &JobIn<'_>, trials: &[TrialIn<'_>]) -> Value {
    let locked: Vec<Value> = trials
        .iter()
        .filter_map(|t| {
            let digest = t.digest.as_ref()?;
            Some(json!({
                "schema_version": 2,
                "task": {"name": t.task_name, "type": "local", "digest": digest, "source": t.source, "path": t.task_path},
                "agent": agent_config(job.agent),
                "environment": {"type": "docker"},
                "verifier": {},
            }))
        })
        .collect();
    json!({
        "schema_version": 3,
        "created_at": job.started_at,
        "harbor": {"version": null},
        "n_concurrent_trials": job.n_concurrent,
        "retry": {"max_retries": 0},
        "trials": locked,
    })
}
