//! The `tests` evaluator: the verifier of a task that acts in an environment. Once the agent has stopped (and
//! every process it left is stopped), the tests are copied into the environment — never before,
//! so the agent can neither read nor change them — and run there as root with their own
//! timeout; the grade is the reward they write (Harbor's `reward.txt` / `reward.json`) or their
//! exit code. A verifier that crashes, times out or writes no reward is an evaluator error,
//! never a pass, and an agent stopped by a limit or its own error never passes, whatever state
//! it left.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agenteval_core::environment::{ExecRequest, RewardFrom, TestsSpec, verifier_paths};
use agenteval_core::model::{AgentResult, EvaluatorScore, TerminatedBy};
use agenteval_core::traits::{EnvSession, EvalInput, Evaluator};
use async_trait::async_trait;

use crate::environments::quote;
use serde_json::Value;

/// Seconds the tests may run when neither the task nor the evaluator says (Harbor's default).
pub const DEFAULT_TIMEOUT_SECS: f64 = 600.0;
/// Output of the tests a failing grade quotes.
const QUOTED_OUTPUT: usize = 1_500;
/// The most of the verifier's folder read back (its reward and what it logged).
const MAX_VERIFIER_BYTES: u64 = 1 << 20;

/// The run's `tests` evaluator: how tasks' tests run, and tests for tasks that bring none.
#[derive(Debug, Clone)]
pub struct TestsEvaluator {
    pub id: String,
    pub tests: Option<PathBuf>,
    pub command: Option<String>,
    pub timeout_secs: Option<f64>,
    pub reward: Option<RewardFrom>,
}

impl TestsEvaluator {
    /// The task's own tests with this evaluator's settings over them; its `tests` folder for a
    /// task that brings none.
    fn spec_for(&self, task: Option<&TestsSpec>) -> TestsSpec {
        let mut spec = task.cloned().unwrap_or_default();
        if spec.dir.is_none() {
            spec.dir = self.tests.clone();
        }
        if let Some(c) = &self.command {
            spec.command = Some(c.clone());
        }
        if let Some(t) = self.timeout_secs {
            spec.timeout_secs = Some(t);
        }
        if let Some(r) = self.reward {
            spec.reward = r;
        }
        spec
    }
}

#[async_trait]
impl Evaluator for TestsEvaluator {
    fn id(&self) -> &str {
        &self.id
    }

    fn kind(&self) -> &str {
        "tests"
    }

    async fn evaluate(&self, input: &EvalInput<'_>) -> agenteval_core::Result<EvaluatorScore> {
        let spec = self.spec_for(input.task.tests.as_ref());
        Ok(verify(&self.id, input.env, &spec, input.result).await)
    }
}

fn score(id: &str, passed: bool, score: f64, reason: String) -> EvaluatorScore {
    EvaluatorScore {
        evaluator_id: id.into(),
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

/// Runs `spec`'s tests in the task's environment as the agent left it and grades by them.
// Long: one verifier run, step by step (prepare its folders, copy in, run, read the reward),
// each step's failure an evaluator error that says which step it was.
pub async fn verify(id: &str, session: Option<&EnvSession>, spec: &TestsSpec, result: &AgentResult) -> EvaluatorScore {
    let errored = |why: String| EvaluatorScore { error: Some(why), ..score(id, false, 0.0, String::new()) };
    let Some(session) = session else {
        return errored("the task has no environment to run its tests in".into());
    };
    let (e, handle) = (&session.env, &session.handle);
    let root = e.worker_root(handle);
    let (tests_dir, logs_dir, _) = verifier_paths(&root);
    let as_root = |cmd: &str, secs: f64| ExecRequest {
        user: Some("0".into()),
        ..ExecRequest::new(cmd, Duration::from_secs_f64(secs))
    };
    // Whatever the agent left at these paths goes first: a reward it wrote is not the tests'.
    let agent_logs = format!("{}/logs/agent", root.trim_end_matches('/'));
    let prep = format!(
        "rm -rf {logs} {tests} && mkdir -p {logs} {agent} {tests}",
        logs = quote(&logs_dir),
        tests = quote(&tests_dir),
        agent = quote(&agent_logs)
    );
    match e.exec(handle, &as_root(&prep, 60.0)).await {
        Ok(o) if o.ok() => {}
        Ok(o) => return errored(format!("could not prepare the tests' folders: {}", tail(&o.stderr, 300))),
        Err(err) => return errored(format!("could not prepare the tests' folders: {err}")),
    }
    if let Some(dir) = &spec.dir
        && let Err(err) = e.copy_in(handle, dir, &tests_dir).await
    {
        return errored(format!("could not copy the tests in: {err}"));
    }
    if spec.dir.is_none() && spec.command.is_none() {
        return errored("the task has no tests (no `tests` folder and no command)".into());
    }
    let command = spec.command.clone().unwrap_or_else(|| "bash \"$AGENTEVAL_TESTS_DIR/test.sh\"".into());
    let secs = spec.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1.0, 86_400.0);
    let mut env = spec.env.clone();
    env.insert("AGENTEVAL_TESTS_DIR".into(), tests_dir.clone());
    env.insert("AGENTEVAL_VERIFIER_DIR".into(), logs_dir.clone());
    let out = match e.exec(handle, &ExecRequest { env, ..as_root(&command, secs) }).await {
        Ok(o) => o,
        Err(err) => return errored(format!("the tests could not run: {err}")),
    };
    let said = || tail(&format!("{}{}", out.stdout, out.stderr), QUOTED_OUTPUT);
    if out.timed_out {
        return errored(format!("the tests ran past {secs} s (their timeout): {}", said()));
    }
    let exit = out.exit_code.map_or("-".to_string(), |c| c.to_string());
    let reward = match spec.reward {
        RewardFrom::ExitCode => match out.exit_code {
            Some(0) => Ok((1.0, None)),
            Some(_) => Ok((0.0, None)),
            None => Err("the tests were killed before they exited".to_string()),
        },
        RewardFrom::File => {
            let logs = match tempfile::tempdir() {
                Ok(d) => d,
                Err(err) => return errored(format!("no folder for the verifier's logs: {err}")),
            };
            match e.copy_out(handle, &logs_dir, logs.path(), MAX_VERIFIER_BYTES).await {
                Ok(()) => read_reward(&verifier_dir(logs.path())),
                Err(err) => Err(format!("could not read the verifier's logs: {err}")),
            }
        }
    };
    match reward {
        Ok((r, metrics)) if r.is_finite() => {
            // The tests say what they found; the task says the agent did not finish.
            let stopped = result.terminated_by != TerminatedBy::Completed;
            let passed = r >= 1.0 - 1e-9 && !stopped;
            let mut reason = format!("reward {r} (tests exit {exit})");
            if stopped {
                reason.push_str(&format!("; not a pass: the agent ended {}", result.terminated_by.as_str()));
            }
            if let Some(m) = metrics {
                reason.push_str(&format!("; {m}"));
            }
            if !passed {
                reason.push_str(&format!(": {}", said()));
            }
            score(id, passed, r.clamp(0.0, 1.0), reason)
        }
        Ok((r, _)) => errored(format!("the reward is {r}, not a number")),
        Err(why) => errored(format!("{why}; tests exit {exit}: {}", said())),
    }
}

/// The reward the tests wrote: `reward.txt` (a number) or `reward.json` (`{"reward": x, …}`, or
/// named metrics, whose mean is the reward).
fn read_reward(dir: &Path) -> Result<(f64, Option<Value>), String> {
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
    Err("the tests wrote no reward (reward.txt or reward.json in $AGENTEVAL_VERIFIER_DIR, Harbor's /logs/verifier)"
        .into())
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

    #[test]
    fn rewards_are_a_number_or_json_metrics_and_anything_else_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_reward(d.path()).is_err(), "no reward written is an error");
        std::fs::write(d.path().join("reward.json"), r#"{"a": 1.0, "b": 0.0}"#).unwrap();
        assert_eq!(read_reward(d.path()).unwrap().0, 0.5);
        std::fs::write(d.path().join("reward.json"), r#"{"reward": 0.25, "x": 1}"#).unwrap();
        assert_eq!(read_reward(d.path()).unwrap().0, 0.25);
        std::fs::write(d.path().join("reward.json"), r#"{"x": "y"}"#).unwrap();
        assert!(read_reward(d.path()).is_err());
        std::fs::write(d.path().join("reward.txt"), "1\n").unwrap();
        assert_eq!(read_reward(d.path()).unwrap().0, 1.0, "reward.txt comes first");
        std::fs::write(d.path().join("reward.txt"), "PASS").unwrap();
        assert!(read_reward(d.path()).is_err());
    }

    #[test]
    fn the_evaluators_settings_go_over_the_tasks_and_its_folder_serves_tasks_without_one() {
        let e = TestsEvaluator {
            id: "tests".into(),
            tests: Some("/shared".into()),
            command: None,
            timeout_secs: Some(5.0),
            reward: Some(RewardFrom::ExitCode),
        };
        let own = TestsSpec { dir: Some("/own".into()), timeout_secs: Some(60.0), ..Default::default() };
        let s = e.spec_for(Some(&own));
        assert_eq!(
            (s.dir.as_deref(), s.timeout_secs, s.reward),
            (Some(Path::new("/own")), Some(5.0), RewardFrom::ExitCode)
        );
        assert_eq!(e.spec_for(None).dir.as_deref(), Some(Path::new("/shared")));
    }
}
