//! Harbor's job folders read back: a job's `config.json`, `result.json` and `lock.json` and each
//! trial's `result.json`, as Harbor 0.26 writes them, made into agenteval's task results by
//! Harbor's rules (its rewards, its exceptions as errored or infra, its tokens and cost kept as
//! the agent's own report, never as metered).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agenteval_core::model::{AgentResult, EvaluatorScore, TerminatedBy};
use agenteval_core::rewards::{harbor_graded, rewards_pass};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::Value;

use crate::{Error, Result};

pub mod digest;
pub mod write;

/// Most bytes of a job's or trial's JSON file read (a hostile folder's file is refused, not
/// held).
const MAX_JSON: u64 = 64 << 20;

/// A Harbor job, as its folder says.
#[derive(Debug, Clone)]
pub struct Job {
    pub dir: PathBuf,
    /// Harbor's id of the job (`result.json`'s `id`).
    pub id: String,
    pub name: String,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub harbor_version: Option<String>,
    /// Task digests by task name, from `lock.json` (`sha256:…`).
    pub digests: BTreeMap<String, String>,
    /// Trials with a result, in the order they started.
    pub trials: Vec<Trial>,
    /// Trial folders with no readable result (still running when the job stopped), with why.
    pub unfinished: Vec<(String, String)>,
    /// How many trials the job meant to run (`n_total_trials`).
    pub total_trials: Option<u64>,
    /// The job's own mean reward per agent/model/dataset key, as its `result.json` reports it.
    pub reported_means: BTreeMap<String, f64>,
}

/// One trial: a task attempt of Harbor's.
#[derive(Debug, Clone)]
pub struct Trial {
    pub dir: PathBuf,
    pub name: String,
    pub task_name: String,
    /// Where the task's folder was when Harbor ran it (a local task).
    pub task_path: Option<PathBuf>,
    pub task_checksum: Option<String>,
    pub source: Option<String>,
    pub agent: String,
    pub agent_version: Option<String>,
    pub model: Option<String>,
    pub rewards: Option<BTreeMap<String, f64>>,
    /// The exception Harbor recorded: its type and message.
    pub exception: Option<(String, String)>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub agent_seconds: Option<f64>,
    /// The agent's own usage report (`agent_result`): input (with cache), cache and output
    /// tokens, cost.
    pub usage: Value,
}

fn invalid(file: &Path, why: impl Into<String>) -> Error {
    Error::Invalid { file: file.display().to_string(), why: why.into() }
}

fn read_json(path: &Path) -> Result<Value> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).map_err(|e| invalid(path, e.to_string()))?;
    let mut bytes = Vec::new();
    f.take(MAX_JSON + 1).read_to_end(&mut bytes).map_err(|e| invalid(path, e.to_string()))?;
    if bytes.len() as u64 > MAX_JSON {
        return Err(invalid(path, format!("over {} MiB", MAX_JSON >> 20)));
    }
    serde_json::from_slice(&bytes).map_err(|e| invalid(path, format!("not JSON: {e}")))
}

/// A timestamp as Harbor writes it: RFC 3339, or (a job's) without a zone, which is UTC.
pub fn time(v: &Value) -> Option<DateTime<Utc>> {
    let s = v.as_str()?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok().map(|t| t.and_utc()))
}

fn rewards(v: &Value) -> Option<BTreeMap<String, f64>> {
    let m = v.as_object()?;
    let out: BTreeMap<String, f64> = m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect();
    (!out.is_empty()).then_some(out)
}

/// Reads a job folder. A folder that is no Harbor job (no `result.json` with an `id`, no
/// `config.json`) is refused, naming the file.
pub fn read_job(dir: &Path) -> Result<Job> {
    let result_path = dir.join("result.json");
    let config_path = dir.join("config.json");
    if !result_path.is_file() || !config_path.is_file() {
        return Err(invalid(
            dir,
            "not a Harbor job folder: it needs config.json and result.json (`harbor run` writes them)",
        ));
    }
    let result = read_json(&result_path)?;
    let config = read_json(&config_path)?;
    let id = result["id"].as_str().filter(|s| !s.is_empty()).ok_or_else(|| invalid(&result_path, "no job `id`"))?;
    let name = config["job_name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    let mut job = Job {
        dir: dir.to_path_buf(),
        id: id.to_string(),
        name,
        started_at: time(&result["started_at"]),
        finished_at: time(&result["finished_at"]),
        harbor_version: None,
        digests: BTreeMap::new(),
        trials: vec![],
        unfinished: vec![],
        total_trials: result["n_total_trials"].as_u64(),
        reported_means: BTreeMap::new(),
    };
    for (key, eval) in result["stats"]["evals"].as_object().into_iter().flatten() {
        if let Some(mean) = eval["metrics"].as_array().and_then(|m| m.iter().find_map(|x| x["mean"].as_f64())) {
            job.reported_means.insert(key.clone(), mean);
        }
    }
    let lock_path = dir.join("lock.json");
    if lock_path.is_file() {
        let lock = read_json(&lock_path)?;
        job.harbor_version = lock["harbor"]["version"].as_str().map(str::to_string);
        for t in lock["trials"].as_array().into_iter().flatten() {
            if let (Some(n), Some(d)) = (t["task"]["name"].as_str(), t["task"]["digest"].as_str()) {
                job.digests.insert(n.to_string(), d.to_string());
            }
        }
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| invalid(dir, e.to_string()))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    entries.sort();
    for t in entries {
        let r = t.join("result.json");
        let name = t.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !r.is_file() {
            if t.join("config.json").is_file() {
                job.unfinished.push((name, "no result.json: the trial did not finish".into()));
            }
            continue;
        }
        match read_json(&r).and_then(|v| trial(&t, &r, &v)) {
            Ok(trial) => job.trials.push(trial),
            Err(e) => job.unfinished.push((name, e.to_string())),
        }
    }
    job.trials.sort_by(|a, b| (a.started_at, &a.name).cmp(&(b.started_at, &b.name)));
    Ok(job)
}

fn trial(dir: &Path, file: &Path, v: &Value) -> Result<Trial> {
    let task_name = v["task_name"].as_str().ok_or_else(|| invalid(file, "no `task_name`"))?.to_string();
    let name = v["trial_name"].as_str().unwrap_or_default().to_string();
    let info = &v["agent_info"];
    let agent = info["name"].as_str().or(v["config"]["agent"]["name"].as_str()).unwrap_or("unknown").to_string();
    let model = info["model_info"]["name"].as_str().or(v["config"]["agent"]["model_name"].as_str()).map(|m| {
        match info["model_info"]["provider"].as_str() {
            Some(p) if !m.contains('/') => format!("{p}/{m}"),
            _ => m.to_string(),
        }
    });
    let exec = &v["agent_execution"];
    let agent_seconds = match (time(&exec["started_at"]), time(&exec["finished_at"])) {
        (Some(a), Some(b)) => Some((b - a).num_milliseconds().max(0) as f64 / 1000.0),
        _ => None,
    };
    let exception =
        v["exception_info"].as_object().map(|e| (text(&e["exception_type"]), text(&e["exception_message"])));
    Ok(Trial {
        dir: dir.to_path_buf(),
        name,
        task_name,
        task_path: v["task_id"]["path"].as_str().or(v["config"]["task"]["path"].as_str()).map(PathBuf::from),
        task_checksum: v["task_checksum"].as_str().map(str::to_string),
        source: v["source"].as_str().map(str::to_string),
        agent,
        agent_version: info["version"].as_str().map(str::to_string),
        model,
        rewards: rewards(&v["verifier_result"]["rewards"]),
        exception,
        started_at: time(&v["started_at"]),
        finished_at: time(&v["finished_at"]),
        agent_seconds,
        usage: v["agent_result"].clone(),
    })
}

fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| if v.is_null() { String::new() } else { v.to_string() }, str::to_string)
}

/// How a Harbor exception ended the agent: the agent's own failures (its timeout, its exit
/// status, its model's refusals and limits) are the agent's; a spent budget is a budget; the
/// verifier's failures leave the agent `completed` and the reward missing (unscored); anything
/// else (the environment, Docker, a cancel) is infrastructure, which says nothing of the agent.
pub fn ended_by(exception_type: &str) -> TerminatedBy {
    match exception_type {
        // agenteval's own, as `export --to harbor` names them.
        "AgentevalInfraError" => TerminatedBy::InfraFailure,
        "AgentevalReplayMissError" => TerminatedBy::ReplayMiss,
        "AgentevalTurnLimitError" => TerminatedBy::LimitTurns,
        "AgentevalResourceLimitError" => TerminatedBy::LimitMemory,
        "AgentTimeoutError" => TerminatedBy::LimitTime,
        "BudgetExceededError" => TerminatedBy::LimitCost,
        "ContextLengthExceededError"
        | "ContextWindowExceededError"
        | "OutputLengthExceededError"
        | "OutputTokenExceededError" => TerminatedBy::LimitTokens,
        "VerifierTimeoutError" | "VerifierOutputParseError" | "RewardFileNotFoundError" | "RewardFileEmptyError" => {
            TerminatedBy::Completed
        }
        t if t.starts_with("Agent")
            || t.starts_with("NonZeroAgent")
            || matches!(
                t,
                "AuthenticationError"
                    | "BadRequestError"
                    | "ContentPolicyViolationError"
                    | "ModelNotFoundError"
                    | "NotFoundError"
                    | "PermissionDeniedError"
                    | "UnprocessableEntityError"
                    | "UnsupportedModelParametersError"
                    | "UnsupportedParamsError"
                    | "APIResponseValidationError"
            ) =>
        {
            TerminatedBy::AgentError
        }
        _ => TerminatedBy::InfraFailure,
    }
}

/// A trial graded as Harbor grades it: its agent's end, its score and pass, its rewards as
/// counted (none when Harbor leaves them out of the mean) and whether it went unscored.
#[derive(Debug, Clone)]
pub struct Graded {
    pub agent: AgentResult,
    pub score: EvaluatorScore,
    pub passed: bool,
    pub rewards: Option<BTreeMap<String, f64>>,
    pub unscored: bool,
}

/// Grades one trial by Harbor's rules.
pub fn grade(t: &Trial) -> Graded {
    let ended = t.exception.as_ref().map_or(TerminatedBy::Completed, |(ty, _)| ended_by(ty));
    let error = t.exception.as_ref().map(|(ty, msg)| {
        let first = msg.lines().next().unwrap_or("").trim();
        if first.is_empty() { ty.clone() } else { format!("{ty}: {first}") }
    });
    let agent = AgentResult {
        success: ended == TerminatedBy::Completed,
        final_answer: None,
        error: error.clone().filter(|_| ended != TerminatedBy::Completed),
        total_cost_usd: 0.0,
        total_tokens: 0,
        wall_seconds: t.agent_seconds.unwrap_or(0.0),
        terminated_by: ended,
        steps: 0,
        // Harbor's tokens and cost are the agent's own report: kept, never counted as metered.
        cost_unknown: true,
        fault: None,
    };
    let counted = harbor_graded(ended);
    let (score, passed, rewards, unscored, reason) = match (&t.rewards, counted) {
        (Some(r), Some(true)) => {
            let (value, pass) = rewards_pass(r, true);
            let shown: Vec<String> = r.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let verdict = if pass { "passed" } else { "not passed" };
            (
                value.clamp(0.0, 1.0),
                pass,
                Some(r.clone()),
                false,
                format!("{verdict}: {} (Harbor's verifier)", shown.join(", ")),
            )
        }
        (Some(_), Some(false)) => (
            0.0,
            false,
            None,
            true,
            format!("unscored: the agent ended {} (Harbor leaves its reward out)", ended.as_str()),
        ),
        (None, Some(_)) => {
            let why = error.clone().unwrap_or_else(|| "the verifier wrote no reward".into());
            (0.0, false, None, true, format!("unscored: {why}"))
        }
        (_, None) => (0.0, false, None, false, format!("not graded: {}", error.clone().unwrap_or_default())),
    };
    let mut s = EvaluatorScore::graded("tests", "tests", score, passed, reason);
    if unscored {
        s.error = Some(s.reason.clone());
    }
    Graded { agent, score: s, passed, rewards, unscored }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.json"), r#"{"job_name": "nightly"}"#).unwrap();
        std::fs::write(
            d.path().join("result.json"),
            r#"{"id": "25bd1353-fba7-4ea5-b6c5-0745ad9e515e", "started_at": "2026-12-06T11:18:18.391432",
                "finished_at": "2026-12-06T11:19:27.251941", "n_total_trials": 3,
                "stats": {"evals": {"nop__tasks": {"metrics": [{"mean": 0.5}]}}}}"#,
        )
        .unwrap();
        std::fs::write(
            d.path().join("lock.json"),
            r#"{"harbor": {"version": "0.26.0"}, "trials": [{"task": {"name": "a", "digest": "sha256:00"}}]}"#,
        )
        .unwrap();
        for (trial, task, extra) in [
            ("a__1", "a", r#""verifier_result": {"rewards": {"reward": 1.0}}"#),
            (
                "b__1",
                "b",
                r#""verifier_result": {"rewards": {"reward": 0.0}}, "exception_info": {"exception_type": "AgentTimeoutError", "exception_message": "timed out\nafter 60s"}"#,
            ),
            (
                "c__1",
                "c",
                r#""verifier_result": null, "exception_info": {"exception_type": "DockerBuildError", "exception_message": "no image"}"#,
            ),
        ] {
            let t = d.path().join(trial);
            std::fs::create_dir(&t).unwrap();
            std::fs::write(
                t.join("result.json"),
                format!(
                    r#"{{"task_name": "{task}", "trial_name": "{trial}", "agent_info": {{"name": "oracle", "version": "1.0.0", "model_info": null}},
                        "agent_result": {{"n_input_tokens": 10, "cost_usd": 0.5}}, "started_at": "2026-12-06T11:18:1{}.0Z", {extra}}}"#,
                    trial.len() % 10
                ),
            )
            .unwrap();
        }
        std::fs::create_dir(d.path().join("d__1")).unwrap();
        std::fs::write(d.path().join("d__1/config.json"), "{}").unwrap();
        d
    }

    #[test]
    fn a_job_is_read_and_graded_by_harbors_rules() {
        let d = job_dir();
        let job = read_job(d.path()).unwrap();
        assert_eq!((job.name.as_str(), job.harbor_version.as_deref()), ("nightly", Some("0.26.0")));
        assert_eq!(job.trials.len(), 3);
        assert_eq!(job.unfinished.len(), 1, "{:?}", job.unfinished);
        assert_eq!(job.reported_means["nop__tasks"], 0.5);
        let by: BTreeMap<&str, Graded> = job.trials.iter().map(|t| (t.task_name.as_str(), grade(t))).collect();
        assert!(by["a"].passed);
        assert_eq!(by["b"].agent.terminated_by, TerminatedBy::LimitTime, "a timeout is graded, not infra");
        assert_eq!(by["b"].rewards.as_ref().unwrap()["reward"], 0.0);
        assert_eq!(by["c"].agent.terminated_by, TerminatedBy::InfraFailure);
        assert!(by["a"].agent.cost_unknown, "Harbor's cost is the agent's word");
    }

    #[test]
    fn a_folder_that_is_no_job_is_refused_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let e = read_job(d.path()).unwrap_err().to_string();
        assert!(e.contains("not a Harbor job folder"), "{e}");
    }
}
