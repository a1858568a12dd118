//! The `tests` evaluator: the verifier of a task that acts in an environment. Once the agent has stopped (and
//! every process it left is stopped), the tests are copied into the environment — never before,
//! so the agent can neither read nor change them — and run there as root with their own
//! timeout; the grade is the reward they write (Harbor's `reward.txt` / `reward.json`) or their
//! exit code. A verifier that crashes, times out or writes no reward is an evaluator error,
//! never a pass, and an agent stopped by a limit or its own error never passes, whatever state
//! it left.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeMap;

use agenteval_core::environment::{ExecRequest, RewardFrom, TestsSpec, VerifierRules, verifier_paths};
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
    EvaluatorScore::graded(id, "tests", score, passed, reason)
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
pub async fn verify(id: &str, session: Option<&EnvSession>, spec: &TestsSpec, result: &AgentResult) -> EvaluatorScore {
    verify_all(id, session, spec, result).await.score
}

/// A verifier's whole outcome: the grade, the named rewards as their own scores (Harbor's rules,
/// no `reward` key), the rewards as Harbor records them, and whether it went unscored.
#[derive(Debug)]
pub struct Verified {
    pub score: EvaluatorScore,
    pub named: Vec<EvaluatorScore>,
    pub rewards: Option<BTreeMap<String, f64>>,
    pub unscored: bool,
    /// Why the grade is in doubt (an agent process ran beside the tests): counted apart.
    pub suspect: Vec<String>,
}

pub(crate) use agenteval_core::rewards::{harbor_graded, rewards_pass};

// Long: one verifier run, step by step (prepare its folders, copy in, run, read the reward,
// check who wrote it), each step's failure an evaluator error that says which step it was.
pub async fn verify_all(id: &str, session: Option<&EnvSession>, spec: &TestsSpec, result: &AgentResult) -> Verified {
    let harbor = spec.rules == VerifierRules::Harbor;
    let done =
        |score: EvaluatorScore| Verified { score, named: vec![], rewards: None, unscored: false, suspect: vec![] };
    let errored = |why: String| done(EvaluatorScore { error: Some(why), ..score(id, false, 0.0, String::new()) });
    let Some(session) = session else {
        return errored("the task has no environment to run its tests in".into());
    };
    let (e, handle) = (&session.env, &session.handle);
    let root = e.worker_root(handle);
    let (tests_dir, logs_dir, _) = verifier_paths(&root);
    let as_root = |cmd: &str, secs: f64| ExecRequest {
        user: Some("0".into()),
        grader: true,
        ..ExecRequest::new(cmd, Duration::from_secs_f64(secs))
    };
    // Under Harbor's rules the agent's processes outlive it: all but its servers are held still
    // from before the verifier's folders are made until the reward is read, so nothing of the
    // agent's writes the reward or the tests; those that ran beside them are named.
    let (held, unheld) = match harbor {
        true => match crate::environments::leftovers::hold(session).await {
            Ok(h) => (h, None),
            Err(why) => (None, Some(format!("the agent's leftover processes could not be held still: {why}"))),
        },
        false => (None, None),
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
    // The verifier folder is the tests' own (a user of Harbor's `[verifier] user` writes there).
    if let Some(user) = &spec.user {
        let own = format!("chown -R {} {}", quote(user), quote(&logs_dir));
        let _ = e.exec(handle, &as_root(&own, 60.0)).await;
    }
    let user = Some(spec.user.clone().unwrap_or_else(|| "0".into()));
    let out = match e.exec(handle, &ExecRequest { env, user, ..as_root(&command, secs) }).await {
        Ok(o) => o,
        Err(err) => return errored(format!("the tests could not run: {err}")),
    };
    // A server watched from the host is named only for what it changed (below, once the reward
    // is read); one that could not be watched, for running at all.
    let mut ran_beside: Vec<(u32, String)> = held
        .as_ref()
        .map(|h| h.running.iter().filter(|(p, _)| !h.watched.contains(p)).cloned().collect())
        .unwrap_or_default();
    if let Some(h) = &held {
        ran_beside.extend(crate::environments::leftovers::woken(session, h).await);
    }
    let stdout = out.stdout.clone();
    let said = || tail(&format!("{stdout}{}", out.stderr), QUOTED_OUTPUT);
    if out.timed_out {
        // Harbor grades such a trial but leaves its reward out (`VerifierTimeoutError`).
        let timed_out = errored(format!("the tests ran past {secs} s (their timeout): {}", said()));
        return Verified { unscored: harbor, ..timed_out };
    }
    let exit = out.exit_code.map_or("-".to_string(), |c| c.to_string());
    let rewards = match spec.reward {
        RewardFrom::ExitCode => match out.exit_code {
            Some(0) => Ok(BTreeMap::from([("reward".to_string(), 1.0)])),
            Some(_) => Ok(BTreeMap::from([("reward".to_string(), 0.0)])),
            None => Err("the tests were killed before they exited".to_string()),
        },
        RewardFrom::File => {
            let logs = match tempfile::tempdir() {
                Ok(d) => d,
                Err(err) => return errored(format!("no folder for the verifier's logs: {err}")),
            };
            match e.copy_out(handle, &logs_dir, logs.path(), MAX_VERIFIER_BYTES).await {
                Ok(()) => read_rewards(&verifier_dir(logs.path()), harbor),
                Err(err) => Err(format!("could not read the verifier's logs: {err}")),
            }
        }
    };
    // A process the agent left running could have rewritten the tests themselves before they
    // ran: each file copied in must still be what the task holds.
    if harbor
        && let Some(dir) = &spec.dir
        && let Some(why) = tests_changed(session, dir, &tests_dir).await
    {
        let reason = format!("not graded: {why}; the agent left a process running that changed the tests");
        return done(score(id, false, 0.0, reason));
    }
    let rewards = match rewards {
        Ok(r) => r,
        Err(why) if harbor => {
            let score = EvaluatorScore {
                error: Some(format!("unscored: {why}; tests exit {exit}: {}", said())),
                ..score(id, false, 0.0, String::new())
            };
            return Verified { score, named: vec![], rewards: None, unscored: true, suspect: vec![] };
        }
        Err(why) => return errored(format!("{why}; tests exit {exit}: {}", said())),
    };
    if let Some((k, r)) = rewards.iter().find(|(_, r)| !r.is_finite()) {
        return errored(format!("the reward `{k}` is {r}, not a number"));
    }
    let mut verified = grade_rewards(id, rewards, harbor, result, &exit, said());
    if let Some(h) = &held {
        ran_beside.extend(crate::environments::leftovers::watched_changes(session, h).await);
    }
    let suspect = (!ran_beside.is_empty())
        .then(|| {
            format!(
                "the agent's processes ran while the tests did and could have written the reward: {}",
                crate::environments::leftovers::Held::names(&ran_beside)
            )
        })
        .or(unheld);
    if let Some(why) = suspect {
        // The processes' command lines are the environment's words: they stay in `suspect`, which
        // the worker redacts, not in the score's reason.
        if verified.score.passed {
            verified
                .score
                .reason
                .push_str("; note: the agent's processes were not all held still while the tests ran (see suspect)");
        }
        verified.suspect.push(why);
    }
    verified
}

/// The tests' files (relative path, sha256) as the task holds them.
fn tests_digests(dir: &Path) -> Vec<(String, String)> {
    use sha2::{Digest as _, Sha256};
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(p),
                Ok(t) if t.is_file() => {
                    if let (Ok(bytes), Ok(rel)) = (std::fs::read(&p), p.strip_prefix(dir)) {
                        out.push((rel.to_string_lossy().into_owned(), hex::encode(Sha256::digest(&bytes))));
                    }
                }
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// A test file that is not, after the tests ran, what the task holds (changed or gone).
async fn tests_changed(s: &EnvSession, dir: &Path, in_env: &str) -> Option<String> {
    let want = tests_digests(dir);
    if want.is_empty() {
        return None;
    }
    let names: Vec<String> = want.iter().map(|(p, _)| quote(p)).collect();
    let cmd = format!("cd {} && sha256sum -- {} 2>/dev/null; true", quote(in_env), names.join(" "));
    let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(60)) }.as_grader();
    let out = s.env.exec(&s.handle, &req).await.ok()?;
    if out.stdout.trim().is_empty() && out.stderr.contains("not found") {
        return None;
    }
    let got: BTreeMap<String, String> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(h, p)| (p.trim_start_matches("./").to_string(), h.to_string())))
        .collect();
    let changed: Vec<&str> = want.iter().filter(|(p, h)| got.get(p) != Some(h)).map(|(p, _)| p.as_str()).collect();
    (!changed.is_empty()).then(|| format!("{} changed while the tests ran", changed.join(", ")))
}

/// The grade from the rewards, by the spec's rules.
fn grade_rewards(
    id: &str,
    rewards: BTreeMap<String, f64>,
    harbor: bool,
    result: &AgentResult,
    exit: &str,
    said: String,
) -> Verified {
    let shown: Vec<String> = rewards.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let main = rewards.get("reward").copied();
    let named_only = main.is_none() && rewards.len() > 1;
    let (r, passed_by_rewards) = rewards_pass(&rewards, harbor);
    let counted = if harbor { harbor_graded(result.terminated_by) } else { None };
    let stopped = result.terminated_by != TerminatedBy::Completed && counted != Some(true);
    let passed = passed_by_rewards && !stopped;
    let rewarded = if rewards.len() == 1 && main.is_some() {
        format!("reward {r}")
    } else {
        format!("rewards {}", shown.join(", "))
    };
    // A verdict first, then why: `reward 0 (tests exit 0)` alone reads like a pass.
    let mut reason = if passed {
        format!("passed: {rewarded} (tests exit {exit})")
    } else if stopped {
        format!("not passed: the agent ended {}; {rewarded} (tests exit {exit})", result.terminated_by.as_str())
    } else {
        format!("not passed: {rewarded}, below a pass (tests exit {exit})")
    };
    if !stopped && result.terminated_by != TerminatedBy::Completed {
        reason.push_str(&format!("; the agent ended {}, graded as Harbor grades it", result.terminated_by.as_str()));
    }
    let said = said.trim();
    if !passed && !said.is_empty() {
        reason.push_str(&format!(": {said}"));
    }
    let named = if harbor && named_only {
        rewards
            .iter()
            .map(|(k, v)| {
                score(&format!("reward:{k}"), *v >= 1.0 - 1e-9 && !stopped, v.clamp(0.0, 1.0), format!("{k} {v}"))
            })
            .collect()
    } else {
        vec![]
    };
    // A budget stops Harbor's trial with a reward it leaves out of the mean.
    let unscored = harbor && counted == Some(false);
    let mut score = score(id, passed, r.clamp(0.0, 1.0), reason);
    if unscored {
        score.error =
            Some(format!("unscored: the agent ended {} (Harbor leaves its reward out)", result.terminated_by.as_str()));
    }
    Verified { score, named, rewards: (!unscored).then_some(rewards), unscored, suspect: vec![] }
}

/// The rewards the tests wrote: `reward.txt` (a number) or `reward.json` (a number, or named
/// rewards, `reward` among them or not). Harbor's rules read `reward.json` first and refuse an
/// empty file or a non-number among the named ones.
fn read_rewards(dir: &Path, harbor: bool) -> Result<BTreeMap<String, f64>, String> {
    let txt = || -> Option<Result<BTreeMap<String, f64>, String>> {
        let text = std::fs::read_to_string(dir.join("reward.txt")).ok()?;
        Some(
            text.trim()
                .parse::<f64>()
                .map(|r| BTreeMap::from([("reward".to_string(), r)]))
                .map_err(|_| format!("reward.txt holds `{}`, not a number", tail(&text, 80))),
        )
    };
    let json = || -> Option<Result<BTreeMap<String, f64>, String>> {
        let text = std::fs::read_to_string(dir.join("reward.json")).ok()?;
        Some(json_rewards(&text, harbor))
    };
    let found = if harbor { json().or_else(txt) } else { txt().or_else(json) };
    found.unwrap_or_else(|| {
        Err("the tests wrote no reward (reward.txt or reward.json in $AGENTEVAL_VERIFIER_DIR, Harbor's /logs/verifier)".into())
    })
}

fn json_rewards(text: &str, harbor: bool) -> Result<BTreeMap<String, f64>, String> {
    if text.trim().is_empty() {
        return Err("reward.json is empty".into());
    }
    let v: Value = serde_json::from_str(text).map_err(|e| format!("reward.json is not JSON: {e}"))?;
    if let Some(r) = v.as_f64() {
        return Ok(BTreeMap::from([("reward".to_string(), r)]));
    }
    let Some(obj) = v.as_object() else { return Err("reward.json holds neither a number nor named rewards".into()) };
    let mut out = BTreeMap::new();
    for (k, x) in obj {
        match x.as_f64() {
            Some(n) => {
                out.insert(k.clone(), n);
            }
            None if harbor => return Err(format!("reward.json's `{k}` is not a number")),
            None => {}
        }
    }
    if out.is_empty() {
        return Err("reward.json holds no number".into());
    }
    // agenteval's strict reading keeps `reward` alone when it is there.
    if !harbor && let Some(r) = out.get("reward").copied() {
        return Ok(BTreeMap::from([("reward".to_string(), r)]));
    }
    Ok(out)
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
        let m = |pairs: &[(&str, f64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>();
        assert!(read_rewards(d.path(), false).is_err(), "no reward written is an error");
        std::fs::write(d.path().join("reward.json"), r#"{"a": 1.0, "b": 0.0}"#).unwrap();
        assert_eq!(read_rewards(d.path(), true).unwrap(), m(&[("a", 1.0), ("b", 0.0)]), "named, each kept");
        std::fs::write(d.path().join("reward.json"), r#"{"reward": 0.25, "x": 1}"#).unwrap();
        assert_eq!(read_rewards(d.path(), false).unwrap(), m(&[("reward", 0.25)]));
        assert_eq!(read_rewards(d.path(), true).unwrap(), m(&[("reward", 0.25), ("x", 1.0)]));
        std::fs::write(d.path().join("reward.json"), r#"{"x": "y"}"#).unwrap();
        assert!(read_rewards(d.path(), false).is_err());
        std::fs::write(d.path().join("reward.json"), "").unwrap();
        assert!(read_rewards(d.path(), true).is_err(), "Harbor refuses an empty reward file");
        std::fs::write(d.path().join("reward.json"), "0").unwrap();
        std::fs::write(d.path().join("reward.txt"), "1\n").unwrap();
        assert_eq!(read_rewards(d.path(), false).unwrap(), m(&[("reward", 1.0)]), "reward.txt comes first here");
        assert_eq!(read_rewards(d.path(), true).unwrap(), m(&[("reward", 0.0)]), "reward.json first for Harbor");
        std::fs::write(d.path().join("reward.txt"), "PASS").unwrap();
        assert!(read_rewards(d.path(), false).is_err());
    }

    #[test]
    fn harbor_grades_a_timed_out_agent_and_named_rewards_each_while_strict_rules_do_not() {
        let agent = |t: TerminatedBy| AgentResult { terminated_by: t, ..AgentResult::infra_failure(String::new()) };
        let one = BTreeMap::from([("reward".to_string(), 1.0)]);
        let v = grade_rewards("t", one.clone(), true, &agent(TerminatedBy::LimitTime), "0", String::new());
        assert!(v.score.passed && !v.unscored, "{v:?}");
        let v = grade_rewards("t", one.clone(), false, &agent(TerminatedBy::LimitTime), "0", String::new());
        assert!(!v.score.passed);
        let v = grade_rewards("t", one, true, &agent(TerminatedBy::LimitCost), "0", String::new());
        assert!(!v.score.passed && v.unscored && v.rewards.is_none(), "a budget: left out");
        let named = BTreeMap::from([("a".to_string(), 1.0), ("b".to_string(), 0.0)]);
        let v = grade_rewards("t", named.clone(), true, &agent(TerminatedBy::Completed), "0", String::new());
        assert!(!v.score.passed && v.named.len() == 2 && v.named[0].passed && !v.named[1].passed, "{v:?}");
        assert_eq!(v.rewards, Some(named));
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

    #[test]
    fn a_reason_says_its_verdict_first_and_ends_with_what_the_tests_said_if_anything() {
        let agent = |t: TerminatedBy| AgentResult { terminated_by: t, ..AgentResult::infra_failure(String::new()) };
        let one = |r: f64| BTreeMap::from([("reward".to_string(), r)]);
        let v = grade_rewards("tests", one(0.0), false, &agent(TerminatedBy::Completed), "0", String::new());
        assert_eq!(v.score.reason, "not passed: reward 0, below a pass (tests exit 0)", "no empty colon");
        let v = grade_rewards("tests", one(0.0), false, &agent(TerminatedBy::Completed), "1", "FAILED test_x\n".into());
        assert_eq!(v.score.reason, "not passed: reward 0, below a pass (tests exit 1): FAILED test_x");
        let v = grade_rewards("tests", one(1.0), false, &agent(TerminatedBy::Completed), "0", "ok".into());
        assert_eq!(v.score.reason, "passed: reward 1 (tests exit 0)");
        let v = grade_rewards("tests", one(1.0), false, &agent(TerminatedBy::LimitTime), "0", String::new());
        assert_eq!(v.score.reason, "not passed: the agent ended limit_time; reward 1 (tests exit 0)");
    }
}
