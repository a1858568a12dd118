//! `swebench`: SWE-bench 5.x instances, graded as the official harness grades them. The agent
//! acts in `/testbed` of the row's image with the problem statement as its instruction; once it
//! stops, its patch (`git diff` against the row's `base_commit`, or a `predictions` agent's
//! patch) is applied in a **fresh** container of the image with the harness's fallbacks, the
//! row's eval script runs there under the harness's timeout, and its log, read by the row's
//! parser, gives `resolved`. The pack keeps the harness's report, the test log and the patch
//! (`artifacts/swebench/`); a log that claims passes the tests did not make is `suspect`.

use std::path::PathBuf;
use std::time::Duration;

use agenteval_core::config::TaskFilter;
use agenteval_core::environment::{EnvSpec, ExecRequest};
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec, TraceEvent, WithoutTampering};
use agenteval_core::tamper::Tampered;
use agenteval_core::traits::{BenchmarkAdapter, EnvSession, TaskEnvironment};
use agenteval_core::{Error, Result, TaskId};
use agenteval_swebench::grading::{self, EvalType, InstanceReport};
use agenteval_swebench::{Instance, parsers};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where the agent works in every SWE-bench image.
pub const TESTBED: &str = "/testbed";
/// The most of a patch taken from the agent's container, and of a test log kept.
const MAX_PATCH_BYTES: usize = 16 << 20;
const MAX_LOG_BYTES: usize = 64 << 20;

#[derive(Debug, Clone)]
pub struct SwebenchBenchmark {
    pub dataset: PathBuf,
    pub hints: bool,
    pub timeout_secs: f64,
    pub max_file_bytes: u64,
    /// `grade_without_tampering`: a flagged patch graded again without the flagged files.
    pub without_tampering: bool,
}

/// What grading an instance needs, kept in its task (`metadata.swebench`); never the agent's to
/// see (agents get the instruction), and never the reference patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwebenchTask {
    /// The dataset's row, its reference `patch` left out.
    #[serde(flatten)]
    pub row: Instance,
    pub timeout_secs: f64,
    /// Grade a patch the tamper audit flags a second time without the flagged files.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_tampering: bool,
}

impl SwebenchTask {
    pub fn of(task: &TaskSpec) -> Option<SwebenchTask> {
        serde_json::from_value(task.metadata.get("swebench")?.clone()).ok()
    }
}

impl SwebenchBenchmark {
    fn instances(&self) -> Result<Vec<Instance>> {
        let bytes = super::read_data_file(&self.dataset, self.max_file_bytes, "max_file_bytes")?;
        agenteval_swebench::read_dataset(&self.dataset, &bytes)
    }

    fn task(&self, i: Instance) -> Result<TaskSpec> {
        let id: TaskId = i.instance_id.parse().map_err(|_| {
            Error::invalid(format!(
                "{}: instance `{}`: a task id is letters, digits, `-`, `_` and `.`",
                self.dataset.display(),
                i.instance_id
            ))
        })?;
        let mut instruction = i.problem_statement.clone();
        if self.hints && !i.hints_text.trim().is_empty() {
            instruction.push_str(&format!("\n\nHints:\n{}", i.hints_text));
        }
        let meta = SwebenchTask {
            row: Instance { patch: None, ..i.clone() },
            timeout_secs: self.timeout_secs,
            without_tampering: self.without_tampering,
        };
        // What grades it, wherever the file sits: the question and everything its grade reads.
        let content = {
            use sha2::{Digest as _, Sha256};
            let graded = json!({"instruction": instruction, "task": meta});
            hex::encode(Sha256::digest(serde_json::to_vec(&graded).unwrap_or_default()))
        };
        let tags = if i.repo.is_empty() { vec![] } else { vec![format!("repo:{}", i.repo)] };
        let solution = match i.patch.as_deref().filter(|p| !p.trim().is_empty()) {
            Some(gold) => Some(gold_solution(gold)?),
            None => None,
        };
        Ok(TaskSpec {
            id,
            input: Value::String(instruction),
            expected: None,
            tags,
            evaluators: vec![],
            metadata: json!({"swebench": meta}),
            environment: Some(EnvSpec { image: Some(i.image), workdir: Some(TESTBED.into()), ..Default::default() }),
            content: Some(content),
            tests: None,
            solution,
            steps: None,
            user: None,
        })
    }
}

/// The reference fix as a solution the `oracle` agent runs (`solve.sh` applying `gold.patch` in
/// `/testbed`), kept once per patch in the cache; like every solution, only the oracle sees it.
fn gold_solution(gold: &str) -> Result<PathBuf> {
    use sha2::{Digest as _, Sha256};
    let dir = agenteval_core::cache_dir()
        .join("swebench/solutions")
        .join(&hex::encode(Sha256::digest(gold.as_bytes()))[..16]);
    if dir.join("solve.sh").is_file() {
        return Ok(dir);
    }
    let io = |e| Error::io(format!("writing the reference solution in {}", dir.display()), e);
    let tmp = dir.with_extension(format!("partial-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(io)?;
    std::fs::write(tmp.join("gold.patch"), gold).map_err(io)?;
    std::fs::write(
        tmp.join("solve.sh"),
        format!("#!/bin/bash\nset -e\ncd {TESTBED}\ngit -c safe.directory='*' apply --verbose \"$(dirname \"$0\")/gold.patch\"\n"),
    )
    .map_err(io)?;
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another worker or controller made it first.
        Err(_) if dir.join("solve.sh").is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(io(e)),
    }
}

#[async_trait]
impl BenchmarkAdapter for SwebenchBenchmark {
    fn name(&self) -> &str {
        "swebench"
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let tasks = self.instances()?.into_iter().map(|i| self.task(i)).collect::<Result<Vec<_>>>()?;
        Ok(super::chosen(tasks, filter))
    }

    async fn grade(
        &self,
        task: &TaskSpec,
        result: &AgentResult,
        _trace: &[TraceEvent],
        env: &TaskEnvironment,
    ) -> EvaluatorScore {
        let Some(t) = SwebenchTask::of(task) else {
            return EvaluatorScore::errored("benchmark", "swebench", "the task carries no SWE-bench instance");
        };
        let graded = grade(&t, result, env).await;
        let mut findings = env.findings.lock().expect("not poisoned");
        findings.suspect.extend(graded.suspect);
        findings.tampered.extend(graded.tampered);
        findings.without_tampering = graded.without_tampering;
        findings.files.extend(graded.files);
        graded.score
    }
}

/// A grade with what goes in the pack beside it.
struct Graded {
    score: EvaluatorScore,
    files: Vec<(String, Vec<u8>)>,
    suspect: Vec<String>,
    tampered: Vec<Tampered>,
    without_tampering: Option<WithoutTampering>,
}

impl Graded {
    fn new(score: EvaluatorScore, files: Vec<(String, Vec<u8>)>, tampered: &[Tampered]) -> Graded {
        Graded { score, files, suspect: vec![], tampered: tampered.to_vec(), without_tampering: None }
    }
}

fn score(passed: bool, reason: String) -> EvaluatorScore {
    EvaluatorScore::graded("benchmark", "swebench", if passed { 1.0 } else { 0.0 }, passed, reason)
}

fn as_root(cmd: String, secs: f64, max: usize) -> ExecRequest {
    ExecRequest {
        user: Some("0".into()),
        workdir: Some(TESTBED.into()),
        max_output_bytes: max,
        grader: true,
        ..ExecRequest::new(cmd, Duration::from_secs_f64(secs))
    }
}

/// The agent's patch: the `predictions` agent's answer when no agent acted, else what `git diff`
/// against the base commit says of `/testbed` in the agent's container. `Err` says why there is
/// none (the agent's doing: a broken repository).
async fn patch_of(
    t: &SwebenchTask,
    result: &AgentResult,
    env: &TaskEnvironment,
) -> std::result::Result<Option<String>, String> {
    let Some(s) = &env.session else {
        let answer = result.final_answer.as_ref();
        return Ok(answer.and_then(|a| a.get("model_patch")).and_then(Value::as_str).map(String::from));
    };
    // Every file the agent added counts; what the repository ignores does not.
    let git = agenteval_core::environment::hardened_shell_git();
    let cmd = format!(
        "cd {TESTBED} && {git} -c safe.directory='*' -c core.fileMode=false add -A >/dev/null && {git} -c safe.directory='*' -c core.fileMode=false diff --cached --no-color --no-ext-diff --no-textconv {}",
        agenteval_core::environment::shell_quote(&t.row.base_commit)
    );
    let out = s.env.exec(&s.handle, &as_root(cmd, 300.0, MAX_PATCH_BYTES)).await.map_err(|e| e.to_string())?;
    if out.dropped_bytes > 0 {
        return Err(format!("the agent's patch is over {} MiB", MAX_PATCH_BYTES >> 20));
    }
    if !out.ok() {
        return Err(format!("`git diff {}` in {TESTBED} failed: {}", t.row.base_commit, out.stderr.trim()));
    }
    Ok(Some(out.stdout))
}

// Long: the harness's steps in its order (patch, fresh container, apply, eval, parse), each
// failure the grade it gives there; split, the order would be spread over five functions.
async fn grade(t: &SwebenchTask, result: &AgentResult, env: &TaskEnvironment) -> Graded {
    let mut files = Vec::new();
    let errored = |why: String, files: Vec<(String, Vec<u8>)>, tampered: &[Tampered]| {
        Graded::new(EvaluatorScore::errored("benchmark", "swebench", why), files, tampered)
    };
    let (Some(parser), Some(eval_type)) = (parsers::parser(&t.row.log_parser), EvalType::parse(&t.row.eval_type))
    else {
        return errored(
            format!(
                "instance {} names log parser `{}` (eval type `{}`), which agenteval does not implement; it has {}",
                t.row.instance_id,
                t.row.log_parser,
                t.row.eval_type,
                parsers::KNOWN.join(", ")
            ),
            files,
            &[],
        );
    };
    let mut report = InstanceReport::default();
    let keep_report = |r: &InstanceReport, files: &mut Vec<(String, Vec<u8>)>, error: Option<&str>| {
        let mut v = json!({ t.row.instance_id.clone(): r });
        if let Some(e) = error {
            v[&t.row.instance_id]["error"] = json!(e);
        }
        files.push(("swebench/report.json".into(), serde_json::to_vec_pretty(&v).unwrap_or_default()));
    };
    let patch = match patch_of(t, result, env).await {
        Ok(p) => p,
        Err(why) => {
            keep_report(&report, &mut files, Some(&why));
            return Graded::new(score(false, format!("not resolved: no patch: {why}")), files, &[]);
        }
    };
    let model = result.final_answer.as_ref().and_then(|a| a.get("model_name_or_path")).and_then(Value::as_str);
    let prediction = json!({"instance_id": t.row.instance_id, "model_name_or_path": model, "model_patch": patch});
    files.push(("swebench/prediction.json".into(), serde_json::to_vec(&prediction).unwrap_or_default()));
    let patch = match patch {
        Some(p) if !p.is_empty() => p,
        other => {
            // The harness leaves empty patches out: never graded, never resolved.
            report.patch_is_none = other.is_none();
            keep_report(&report, &mut files, None);
            let none = if result.final_answer.as_ref().is_some_and(|a| a.get("no_prediction").is_some()) {
                "no prediction for this instance"
            } else {
                "an empty patch"
            };
            return Graded::new(score(false, format!("not resolved: {none} (not graded)")), files, &[]);
        }
    };
    report.patch_exists = true;
    // The row's eval script carries the instance's test patch: its files are the tests'.
    let tampered = grading::machinery_touched(&patch, &t.row.eval_script, TESTBED);
    let Some(fresh) = &env.fresh else {
        return errored("no fresh environment to grade in (the task has none)".into(), files, &tampered);
    };
    let session = match fresh.make().await {
        Ok(s) => s,
        Err(e) => {
            return errored(format!("could not make a fresh container of {}: {e}", t.row.image), files, &tampered);
        }
    };
    let ran = apply_and_eval(t, &session, &patch).await;
    fresh.discard(&session).await;
    let ran = match ran {
        Ok(x) => x,
        Err(e) => return errored(e, files, &tampered),
    };
    files.push(("swebench/test_output.txt".into(), ran.log.clone().into_bytes()));
    if let Err(why) = ran.applied {
        keep_report(&report, &mut files, Some(&why));
        return Graded::new(score(false, format!("not resolved: {why}")), files, &tampered);
    }
    let log = ran.log;
    if ran.timed_out {
        let why = format!("the eval script ran past {} s (the harness's timeout)", t.timeout_secs);
        keep_report(&report, &mut files, Some(&why));
        return Graded::new(score(false, format!("not resolved: {why}")), files, &tampered);
    }
    report = grading::report(parser, &log, &t.row.fail_to_pass, &t.row.pass_to_pass, eval_type);
    keep_report(&report, &mut files, None);
    let suspect = grading::suspects(parser, &log);
    let without_tampering = match t.without_tampering && !tampered.is_empty() {
        true => Some(graded_without(t, fresh.as_ref(), &patch, &tampered, parser, eval_type).await),
        false => None,
    };
    Graded { score: score(report.resolved, reason(&report)), files, suspect, tampered, without_tampering }
}

/// The patch graded again in another fresh container with the files the audit named taken out:
/// the verdict the code alone earns. An environment's failure is said as its reason.
async fn graded_without(
    t: &SwebenchTask,
    fresh: &dyn agenteval_core::traits::FreshEnvironment,
    patch: &str,
    tampered: &[Tampered],
    parser: parsers::Parser,
    eval_type: EvalType,
) -> WithoutTampering {
    let prefix = format!("{TESTBED}/");
    let removed: std::collections::BTreeSet<String> =
        tampered.iter().filter_map(|x| x.path.strip_prefix(&prefix)).map(String::from).collect();
    let stripped = agenteval_core::tamper::without_files(patch, &removed);
    let removed: Vec<String> = removed.into_iter().collect();
    let not = |reason: String| WithoutTampering { passed: false, reason, removed: removed.clone() };
    if stripped.trim().is_empty() {
        return not("not resolved: nothing of the patch is left".into());
    }
    let session = match fresh.make().await {
        Ok(s) => s,
        Err(e) => return not(format!("not graded: could not make a fresh container of {}: {e}", t.row.image)),
    };
    let ran = apply_and_eval(t, &session, &stripped).await;
    fresh.discard(&session).await;
    match ran {
        Err(e) => not(format!("not graded: {e}")),
        Ok(r) if r.applied.is_err() => not(format!("not resolved: {}", r.applied.err().unwrap_or_default())),
        Ok(r) if r.timed_out => not("not resolved: the eval script ran past its timeout".into()),
        Ok(r) => {
            let report = grading::report(parser, &r.log, &t.row.fail_to_pass, &t.row.pass_to_pass, eval_type);
            WithoutTampering { passed: report.resolved, reason: reason(&report), removed }
        }
    }
}

/// What the fresh container said: whether the patch applied (or why not), the test log (the
/// applier's output when it did not apply) and whether the eval script ran past its timeout.
struct Ran {
    applied: std::result::Result<(), String>,
    log: String,
    timed_out: bool,
}

/// The verdict in a line: the two lists' counts and the first tests that failed.
fn reason(r: &InstanceReport) -> String {
    let Some(s) = &r.tests_status else {
        return "not resolved: the test log shows no usable result (no markers, nothing parsed, or a failing test command that logged no failure)".into();
    };
    let count = |o: &grading::Outcome| format!("{}/{}", o.success.len(), o.success.len() + o.failure.len());
    let failing: Vec<&String> = s.fail_to_pass.failure.iter().chain(&s.pass_to_pass.failure).take(3).collect();
    let head = if r.resolved { "resolved" } else { "not resolved" };
    let mut line = format!("{head}: FAIL_TO_PASS {}, PASS_TO_PASS {}", count(&s.fail_to_pass), count(&s.pass_to_pass));
    if !failing.is_empty() {
        line.push_str(&format!("; failing: {}", failing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
    }
    line
}

/// Applies the patch in the fresh container as the harness does, then runs the eval script;
/// `Err` is the environment failing.
async fn apply_and_eval(t: &SwebenchTask, s: &EnvSession, patch: &str) -> std::result::Result<Ran, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a folder for the patch: {e}"))?;
    std::fs::write(dir.path().join("patch.diff"), patch)
        .and_then(|()| std::fs::write(dir.path().join("eval.sh"), grading::eval_script(&t.row.eval_script)))
        .map_err(|e| format!("writing the patch: {e}"))?;
    s.env
        .copy_in(&s.handle, dir.path(), "/tmp/agenteval-swebench")
        .await
        .map_err(|e| format!("copying the patch in: {e}"))?;
    // The harness's attempts in one command: each after the last one's leftovers are gone.
    let attempts: Vec<String> = grading::GIT_APPLY_CMDS
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let reset = if i > 0 {
                format!("{{ {}; }} >/dev/null 2>&1; ", grading::RESET_BETWEEN_ATTEMPTS)
            } else {
                String::new()
            };
            format!(
                "{reset}if {c} {f} 2>&1; then echo '{pass}'; exit 0; fi; ",
                f = grading::CONTAINER_PATCH_FILE,
                pass = grading::APPLY_PATCH_PASS
            )
        })
        .collect();
    let apply = format!(
        "mv /tmp/agenteval-swebench/patch.diff {f} && mv /tmp/agenteval-swebench/eval.sh /eval.sh && cd {TESTBED} && {}if {check} {f} >/dev/null 2>&1; then echo '{pass}: verified already applied'; exit 0; fi; echo '{fail}'; exit 1",
        attempts.concat(),
        f = grading::CONTAINER_PATCH_FILE,
        check = grading::ALREADY_APPLIED_CHECK,
        pass = grading::APPLY_PATCH_PASS,
        fail = grading::APPLY_PATCH_FAIL,
    );
    let out =
        s.env.exec(&s.handle, &as_root(apply, 600.0, 1 << 20)).await.map_err(|e| format!("applying the patch: {e}"))?;
    if !out.ok() {
        let said: String =
            out.stdout.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
        let applied = Err(format!("the patch does not apply ({}): {said}", grading::APPLY_PATCH_FAIL));
        return Ok(Ran { applied, log: out.stdout, timed_out: false });
    }
    let eval =
        ExecRequest { workdir: None, ..as_root("/bin/bash /eval.sh 2>&1".into(), t.timeout_secs, MAX_LOG_BYTES) };
    let out = s.env.exec(&s.handle, &eval).await.map_err(|e| format!("running the eval script: {e}"))?;
    let mut log = out.stdout;
    if out.timed_out {
        // The harness's own words.
        log.push_str(&format!("\n\nTimeout error: {} seconds exceeded.", t.timeout_secs));
    }
    Ok(Ran { applied: Ok(()), log, timed_out: out.timed_out })
}

/// What the benchmark checks when a config loads, once the agent has read its answers: an agent
/// that answers instances by id (`predictions`) names only instances the dataset has, as the
/// harness refuses the others, as `(pointer, message)`. (That its tasks run in containers is
/// the engine's check of every benchmark whose default environment is one.)
pub fn at_load(config: &agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    use agenteval_core::config::BenchmarkConfig;
    let mut problems = Vec::new();
    let BenchmarkConfig::Swebench { dataset, max_file_bytes, .. } = &config.benchmark else { return problems };
    if let Some((path, answered)) = config.agent.answered_tasks()
        && !answered.is_empty()
    {
        let max = max_file_bytes.unwrap_or(agenteval_core::config::DEFAULT_DATA_FILE_BYTES);
        // A dataset that cannot be read is the loader's problem, named there.
        let instances = super::read_data_file(dataset, max, "max_file_bytes")
            .and_then(|bytes| agenteval_swebench::read_dataset(dataset, &bytes));
        if let Ok(instances) = instances {
            let known: std::collections::BTreeSet<&str> = instances.iter().map(|i| i.instance_id.as_str()).collect();
            let unknown: Vec<&str> = answered.into_iter().filter(|id| !known.contains(id)).collect();
            if !unknown.is_empty() {
                problems.push((
                    "/agent/path".into(),
                    format!(
                        "{} predicts {} instance(s) the dataset {} does not have: {}",
                        path.display(),
                        unknown.len(),
                        dataset.display(),
                        unknown.iter().take(10).copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
    }
    problems
}
