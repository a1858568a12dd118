//! `harbor`: tasks in the Harbor / Terminal-Bench format, read as Harbor reads them. A task is
//! a folder: `instruction.md` (what the agent is told), `task.toml` (timeouts, the environment's
//! CPUs, memory and network, tags), `environment/` (its `Dockerfile` and files), `tests/test.sh`
//! (the verifier) and `solution/solve.sh` (the reference solution). The agent acts in the task's
//! environment; once it stops, the tests are copied to `/tests` and run there, and the reward
//! they write (`/logs/verifier/reward.txt`, a number, or `reward.json`) is the grade. The agent
//! never sees the tests or the solution: they are not in the image, and are copied in only after
//! it is done (the solution only for the `oracle` agent).

use std::path::{Path, PathBuf};
use std::time::Duration;

use agenteval_core::config::TaskFilter;
use agenteval_core::environment::{EnvSpec, ExecRequest};
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec, TraceEvent};
use agenteval_core::traits::{BenchmarkAdapter, TaskEnvironment};
use agenteval_core::{Error, Result, TaskId};
use async_trait::async_trait;
use serde_json::{Value, json};

/// Where the tests, the solution and the verifier's logs go in the environment (Harbor's).
pub const TESTS_DIR: &str = "/tests";
pub const SOLUTION_DIR: &str = "/solution";
pub const VERIFIER_LOGS: &str = "/logs/verifier";
/// Seconds the tests may run when `task.toml` says nothing (Harbor's default).
const DEFAULT_VERIFIER_SECS: f64 = 600.0;
/// Output of the tests a failing grade quotes.
const QUOTED_OUTPUT: usize = 1_500;

#[derive(Debug, Clone)]
pub struct HarborBenchmark {
    root: PathBuf,
}

/// What a task folder says beyond its spec: its paths and timeouts (`TaskSpec::metadata.harbor`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct HarborTask {
    pub path: PathBuf,
    #[serde(default)]
    pub agent_timeout_secs: Option<f64>,
    #[serde(default)]
    pub verifier_timeout_secs: Option<f64>,
    #[serde(default)]
    pub verifier_env: std::collections::BTreeMap<String, String>,
}

impl HarborTask {
    pub fn of(task: &TaskSpec) -> Option<HarborTask> {
        serde_json::from_value(task.metadata.get("harbor")?.clone()).ok()
    }

    pub fn solution(&self) -> PathBuf {
        self.path.join("solution")
    }
}

impl HarborBenchmark {
    pub fn new(root: PathBuf) -> Self {
        HarborBenchmark { root }
    }

    /// The task folders: the root itself when it is one, else its subfolders that are.
    fn folders(&self) -> Result<Vec<PathBuf>> {
        if self.root.join("task.toml").is_file() || self.root.join("instruction.md").is_file() {
            return Ok(vec![self.root.clone()]);
        }
        let entries = std::fs::read_dir(&self.root)
            .map_err(|e| Error::io(format!("reading the Harbor tasks folder {}", self.root.display()), e))?;
        let mut out: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() && (p.join("task.toml").is_file() || p.join("instruction.md").is_file()))
            .collect();
        out.sort();
        if out.is_empty() {
            return Err(Error::invalid(format!(
                "{} holds no Harbor task (a folder with instruction.md and task.toml)",
                self.root.display()
            )));
        }
        Ok(out)
    }
}

/// The run's limits for one task: a Harbor task's `agent.timeout_sec` lowers the wall-clock
/// limit (the run's stays when it is lower).
pub fn task_limits(limits: &agenteval_core::config::Limits, task: &TaskSpec) -> agenteval_core::config::Limits {
    let mut out = limits.clone();
    if let Some(secs) = HarborTask::of(task).and_then(|h| h.agent_timeout_secs).filter(|s| *s > 0.0) {
        out.max_wall_seconds = Some(limits.wall_seconds().min(secs));
    }
    out
}

fn num(v: Option<&toml::Value>) -> Option<f64> {
    match v? {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    }
}

/// `"2G"`, `"512M"`, `2048` (MiB) as MiB.
fn memory_mb(v: Option<&toml::Value>) -> Option<u64> {
    match v? {
        toml::Value::Integer(i) => u64::try_from(*i).ok(),
        toml::Value::String(s) => {
            let s = s.trim();
            let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
            let n: f64 = n.trim().parse().ok()?;
            let mb = match unit.to_ascii_uppercase().trim_end_matches('B') {
                "" | "M" => n,
                "G" => n * 1024.0,
                "K" => n / 1024.0,
                _ => return None,
            };
            Some(mb.ceil() as u64)
        }
        _ => None,
    }
}

/// A hash of what a task folder says: `instruction.md`, `task.toml`, `environment/` and
/// `tests/` (not the solution: it is not part of the question), each file with its path below
/// the folder, so the same task checked out anywhere has one fingerprint.
fn folder_content(dir: &Path) -> Result<String> {
    use sha2::{Digest as _, Sha256};
    let mut files = Vec::new();
    let mut todo: Vec<PathBuf> =
        ["instruction.md", "task.toml", "environment", "tests"].iter().map(|p| dir.join(p)).collect();
    while let Some(p) = todo.pop() {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {
                let entries = std::fs::read_dir(&p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
                todo.extend(entries.flatten().map(|e| e.path()));
            }
            Ok(m) if m.is_file() => files.push(p),
            _ => {}
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let bytes = std::fs::read(&f).map_err(|e| Error::io(format!("reading {}", f.display()), e))?;
        h.update(f.strip_prefix(dir).unwrap_or(&f).to_string_lossy().as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex::encode(h.finalize()))
}

/// One task folder as a task.
pub fn read_task(dir: &Path) -> Result<TaskSpec> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let id: TaskId = name.parse().map_err(|_| {
        Error::invalid(format!("Harbor task folder `{name}`: a task id is letters, digits, `-`, `_` and `.`"))
    })?;
    let instruction = std::fs::read_to_string(dir.join("instruction.md"))
        .map_err(|e| Error::io(format!("task {id}: reading instruction.md"), e))?;
    let toml_path = dir.join("task.toml");
    let table: toml::Table = match std::fs::read_to_string(&toml_path) {
        Ok(text) => text.parse().map_err(|e: toml::de::Error| {
            Error::invalid(format!("{}: {}", toml_path.display(), e.to_string().trim()))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
        Err(e) => return Err(Error::io(format!("reading {}", toml_path.display()), e)),
    };
    let section = |k: &str| table.get(k).and_then(toml::Value::as_table).cloned().unwrap_or_default();
    let (meta, verifier, agent, env) =
        (section("metadata"), section("verifier"), section("agent"), section("environment"));
    let mut tags: Vec<String> = meta
        .get("tags")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(String::from))
        .collect();
    for k in ["difficulty", "category"] {
        if let Some(v) = meta.get(k).and_then(toml::Value::as_str) {
            tags.push(format!("{k}:{v}"));
        }
    }
    let context = dir.join("environment");
    let spec = EnvSpec {
        context: context.join("Dockerfile").is_file().then_some(context),
        image: env.get("docker_image").and_then(toml::Value::as_str).map(String::from),
        cpus: num(env.get("cpus")),
        memory_mb: memory_mb(env.get("memory_mb").or_else(|| env.get("memory"))),
        network: env.get("allow_internet").and_then(toml::Value::as_bool).unwrap_or(false),
        build_timeout_secs: num(env.get("build_timeout_sec")),
        workdir: env.get("workdir").and_then(toml::Value::as_str).map(String::from),
        ..Default::default()
    };
    if spec.context.is_none() && spec.image.is_none() {
        return Err(Error::invalid(format!(
            "task {id}: no environment/Dockerfile and no `environment.docker_image` in task.toml"
        )));
    }
    if !dir.join("tests/test.sh").is_file() {
        return Err(Error::invalid(format!("task {id}: no tests/test.sh (its verifier)")));
    }
    let harbor = HarborTask {
        path: dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf()),
        agent_timeout_secs: num(agent.get("timeout_sec")),
        verifier_timeout_secs: num(verifier.get("timeout_sec")),
        verifier_env: verifier
            .get("env")
            .and_then(toml::Value::as_table)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect(),
    };
    // Everything task.toml says is kept, known or not (a later Harbor's keys are not errors).
    let toml_json = serde_json::to_value(&table).unwrap_or(Value::Null);
    Ok(TaskSpec {
        id,
        input: Value::String(instruction),
        expected: None,
        tags,
        evaluators: vec![],
        metadata: json!({"harbor": harbor, "task_toml": toml_json}),
        environment: Some(spec),
        content: Some(folder_content(dir)?),
    })
}

fn score(passed: bool, score: f64, reason: String) -> EvaluatorScore {
    EvaluatorScore {
        evaluator_id: "benchmark".into(),
        kind: "tests".into(),
        score,
        passed,
        reason,
        citations: vec![],
        cost_usd: 0.0,
        tokens: 0,
        error: None,
        optional: false,
    }
}

fn tail(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.trim_end().chars().collect();
    if chars.len() <= n {
        chars.into_iter().collect()
    } else {
        format!("…{}", chars[chars.len() - n..].iter().collect::<String>())
    }
}

/// The reward the tests wrote: `reward.txt` (a number) or `reward.json` (`{"reward": x, …}`, or
/// named metrics, whose mean is the reward).
fn read_reward(dir: &Path) -> std::result::Result<(f64, Option<Value>), String> {
    if let Ok(text) = std::fs::read_to_string(dir.join("reward.txt")) {
        return text
            .trim()
            .parse::<f64>()
            .map(|r| (r, None))
            .map_err(|_| format!("reward.txt holds `{}`, not a number", tail(&text, 80)));
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("reward.json")) {
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("reward.json is not JSON: {e}"))?;
        if let Some(r) = v.as_f64() {
            return Ok((r, None));
        }
        if let Some(r) = v.get("reward").and_then(Value::as_f64) {
            return Ok((r, Some(v)));
        }
        let nums: Vec<f64> = v.as_object().into_iter().flatten().filter_map(|(_, x)| x.as_f64()).collect();
        if nums.is_empty() {
            return Err("reward.json holds no number".into());
        }
        return Ok((nums.iter().sum::<f64>() / nums.len() as f64, Some(v)));
    }
    Err("the tests wrote no reward (/logs/verifier/reward.txt or reward.json)".into())
}

#[async_trait]
impl BenchmarkAdapter for HarborBenchmark {
    fn name(&self) -> &str {
        "harbor"
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let mut out = Vec::new();
        for dir in self.folders()? {
            let t = read_task(&dir)?;
            if filter.matches(t.id.as_str(), &t.tags) {
                out.push(t);
            }
        }
        if let Some(limit) = filter.limit {
            out.truncate(limit as usize);
        }
        Ok(out)
    }

    /// Runs the task's tests in its environment, as Harbor does, and grades by their reward: 1
    /// passes. Tests that crash, time out or write no reward are an evaluator error, never a pass.
    async fn grade(
        &self,
        task: &TaskSpec,
        result: &AgentResult,
        _trace: &[TraceEvent],
        env: &TaskEnvironment,
    ) -> EvaluatorScore {
        let errored = |why: String| EvaluatorScore { error: Some(why), ..score(false, 0.0, String::new()) };
        let Some(h) = HarborTask::of(task) else { return errored("not a Harbor task".into()) };
        let Some(session) = &env.session else {
            return errored(format!("task {} acts in an environment, and the run has none", task.id));
        };
        let (e, handle) = (&session.env, &session.handle);
        let root = |cmd: &str, secs: f64| ExecRequest {
            user: Some("0".into()),
            ..ExecRequest::new(cmd, Duration::from_secs_f64(secs))
        };
        let prep = format!("rm -rf {VERIFIER_LOGS} {TESTS_DIR} && mkdir -p {VERIFIER_LOGS} /logs/agent {TESTS_DIR}");
        match e.exec(handle, &root(&prep, 60.0)).await {
            Ok(o) if o.ok() => {}
            Ok(o) => return errored(format!("could not prepare the tests' folders: {}", tail(&o.stderr, 300))),
            Err(err) => return errored(format!("could not prepare the tests' folders: {err}")),
        }
        if let Err(err) = e.copy_in(handle, &h.path.join("tests"), TESTS_DIR).await {
            return errored(format!("could not copy the tests in: {err}"));
        }
        let secs = h.verifier_timeout_secs.unwrap_or(DEFAULT_VERIFIER_SECS).clamp(1.0, 86_400.0);
        let run = ExecRequest { env: h.verifier_env.clone(), ..root(&format!("bash {TESTS_DIR}/test.sh"), secs) };
        let out = match e.exec(handle, &run).await {
            Ok(o) => o,
            Err(err) => return errored(format!("the tests could not run: {err}")),
        };
        let said = || tail(&format!("{}{}", out.stdout, out.stderr), QUOTED_OUTPUT);
        if out.timed_out {
            return errored(format!("the tests ran past {secs} s (verifier.timeout_sec): {}", said()));
        }
        let logs = match tempfile::tempdir() {
            Ok(d) => d,
            Err(err) => return errored(format!("no folder for the verifier's logs: {err}")),
        };
        let copied = e.copy_out(handle, VERIFIER_LOGS, logs.path(), 1 << 20).await;
        let reward = match copied {
            Ok(()) => read_reward(&verifier_dir(logs.path())),
            Err(err) => Err(format!("could not read the verifier's logs: {err}")),
        };
        match reward {
            Ok((r, metrics)) if r.is_finite() => {
                // An agent stopped by a limit or its own error does not pass, whatever state it
                // left: the tests say what they found, the task says it did not finish.
                let stopped = result.terminated_by != agenteval_core::model::TerminatedBy::Completed;
                let passed = r >= 1.0 - 1e-9 && !stopped;
                let exit = out.exit_code.map_or("-".to_string(), |c| c.to_string());
                let mut reason = format!("reward {r} (tests/test.sh exit {exit})");
                if stopped {
                    reason.push_str(&format!("; not a pass: the agent ended {}", result.terminated_by.as_str()));
                }
                if let Some(m) = metrics {
                    reason.push_str(&format!("; {m}"));
                }
                if !passed {
                    reason.push_str(&format!(": {}", said()));
                }
                score(passed, r.clamp(0.0, 1.0), reason)
            }
            Ok((r, _)) => errored(format!("the reward is {r}, not a number")),
            Err(why) => errored(format!("{why}; tests/test.sh exit {:?}: {}", out.exit_code, said())),
        }
    }
}

/// Where `copy_out` put the verifier's files: in the folder itself, or in a `verifier/` below it
/// (a workspace keeps the folder's name).
fn verifier_dir(dir: &Path) -> PathBuf {
    if dir.join("verifier").is_dir() && !dir.join("reward.txt").exists() && !dir.join("reward.json").exists() {
        dir.join("verifier")
    } else {
        dir.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_dir(toml: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("fix-it");
        std::fs::create_dir_all(t.join("environment")).unwrap();
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::write(t.join("instruction.md"), "Fix it.\n").unwrap();
        std::fs::write(t.join("task.toml"), toml).unwrap();
        std::fs::write(t.join("environment/Dockerfile"), "FROM debian\n").unwrap();
        std::fs::write(t.join("tests/test.sh"), "exit 0\n").unwrap();
        d
    }

    #[test]
    fn a_task_folder_reads_as_harbor_reads_it_and_keeps_unknown_keys() {
        let d = task_dir(
            "version = \"1.0\"\nfuture_key = 3\n[metadata]\ndifficulty = \"easy\"\ntags = [\"git\"]\n[verifier]\ntimeout_sec = 30.0\nenv = {A = \"1\"}\n[agent]\ntimeout_sec = 120\n[environment]\ncpus = 2\nmemory = \"1G\"\nallow_internet = true\n",
        );
        let t = read_task(&d.path().join("fix-it")).unwrap();
        assert_eq!(t.id.as_str(), "fix-it");
        assert_eq!(t.input, json!("Fix it.\n"));
        assert_eq!(t.tags, ["git", "difficulty:easy"]);
        let env = t.environment.clone().unwrap();
        assert_eq!((env.cpus, env.memory_mb, env.network), (Some(2.0), Some(1024), true));
        let h = HarborTask::of(&t).unwrap();
        assert_eq!((h.agent_timeout_secs, h.verifier_timeout_secs), (Some(120.0), Some(30.0)));
        assert_eq!(h.verifier_env.get("A").map(String::as_str), Some("1"));
        assert_eq!(t.metadata["task_toml"]["future_key"], 3, "an unknown key is kept, not an error");
        // The same task in another place is the same question; a changed test is another.
        let elsewhere = tempfile::tempdir().unwrap();
        let copy = elsewhere.path().join("fix-it");
        for p in ["environment", "tests"] {
            std::fs::create_dir_all(copy.join(p)).unwrap();
        }
        for f in ["instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh"] {
            std::fs::copy(d.path().join("fix-it").join(f), copy.join(f)).unwrap();
        }
        let moved = read_task(&copy).unwrap();
        assert_eq!(moved.content_fingerprint(), t.content_fingerprint());
        std::fs::write(copy.join("tests/test.sh"), "exit 1\n").unwrap();
        assert_ne!(read_task(&copy).unwrap().content_fingerprint(), t.content_fingerprint());
    }

    #[tokio::test]
    async fn a_folder_of_tasks_lists_each_and_filters() {
        let d = task_dir("[metadata]\ntags = [\"a\"]\n");
        let b = HarborBenchmark::new(d.path().to_path_buf());
        assert_eq!(b.list_tasks(&TaskFilter::default()).await.unwrap().len(), 1);
        let only_b = TaskFilter { tags: vec!["b".into()], ..Default::default() };
        assert!(b.list_tasks(&only_b).await.unwrap().is_empty());
        let one = HarborBenchmark::new(d.path().join("fix-it"));
        assert_eq!(one.list_tasks(&TaskFilter::default()).await.unwrap()[0].id.as_str(), "fix-it");
    }

    #[test]
    fn rewards_are_a_number_or_json_metrics_and_anything_else_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_reward(d.path()).unwrap_err().contains("no reward"));
        std::fs::write(d.path().join("reward.json"), r#"{"a": 1, "b": 0}"#).unwrap();
        assert_eq!(read_reward(d.path()).unwrap().0, 0.5);
        std::fs::write(d.path().join("reward.txt"), "1\n").unwrap();
        assert_eq!(read_reward(d.path()).unwrap().0, 1.0);
        std::fs::write(d.path().join("reward.txt"), "yes").unwrap();
        assert!(read_reward(d.path()).is_err());
        assert_eq!(memory_mb(Some(&toml::Value::String("512M".into()))), Some(512));
    }
}
