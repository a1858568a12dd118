//! The worker run in this process over the real folder store and SQLite index, with the mock
//! agent: a job's tasks run, graded, packed and recorded as the controller then reads them; a
//! task another attempt completed is left alone; a job spec that is missing or points at
//! another run ends with its exit code. The controller dispatches through a backend that runs
//! each job's worker inline, so no process is started.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenteval_core::config::{LoadedConfig, load_config_str};
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::traits::*;
use agenteval_core::{Result, RunId, TaskId, taskpack};
use agenteval_local::{FsBundleStore, SqliteRunIndex};
use agenteval_testkit::resolver::{FixedResolver, NoSecrets};
use async_trait::async_trait;
use tokio::sync::watch;

use super::run_job;
use crate::controller::{ControllerOptions, NoProgress, RunOutcome, submit};

/// Runs the worker of the job at `uri` to its end on a runtime of its own: its exit code.
fn work(worker: &FixedResolver, uri: &str) -> i32 {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(run_job(uri, worker, None, std::future::pending()))
}

/// Runs each job's worker inline as it is submitted, and reports its exit code as its status.
struct Inline {
    worker: Arc<FixedResolver>,
    exits: Mutex<HashMap<String, i32>>,
}

#[async_trait]
impl CloudBackend for Inline {
    fn id(&self) -> &str {
        "inline"
    }
    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle> {
        let uri = format!("{}/{}", job.bundle_uri, layout::job_spec(&job.job_id, job.attempt));
        let worker = self.worker.clone();
        // On a runtime of its own, as a worker process has.
        let code = tokio::task::spawn_blocking(move || work(&worker, &uri)).await.unwrap();
        let native_id = format!("{}#{}", job.job_id, job.attempt);
        self.exits.lock().unwrap().insert(native_id.clone(), code);
        Ok(JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id })
    }
    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>> {
        let exits = self.exits.lock().unwrap();
        Ok(handles
            .iter()
            .map(|h| worker_exit::job_status(exits.get(&h.native_id).copied(), None, || "never ran".into()))
            .collect())
    }
    async fn cancel_job(&self, _handle: &JobHandle, _reason: &str) -> Result<()> {
        Ok(())
    }
    async fn wait_for_change(&self, _timeout: Duration) {
        tokio::task::yield_now().await;
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    loaded: LoadedConfig,
    /// What a worker is handed: the run's store and index, no backend and no secrets.
    worker: Arc<FixedResolver>,
    /// The controller's: the same, and the inline backend.
    resolver: Arc<FixedResolver>,
}

impl Harness {
    /// A toy run of `tasks` tasks with the mock agent, `per_job` tasks to a job.
    fn new(tasks: u32, per_job: u32) -> Harness {
        Harness::with(&format!("benchmark:\n  kind: toy\n  size: {tasks}\nagent:\n  kind: mock\n"), per_job, &[])
    }

    /// A run of the config's `benchmark` and `agent` (and what else `body` says), with `files`
    /// written beside the config first.
    fn with(body: &str, per_job: u32, files: &[(&str, &str)]) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let text = format!(
            "name: inline\n{body}backend:\n  max_concurrent_jobs: 2\n  tasks_per_job: {per_job}\n  stop_after_identical_errors: 0\n"
        );
        let store: Arc<dyn BundleStore> = Arc::new(FsBundleStore::new(dir.path().join("runs")));
        let index: Arc<dyn RunIndex> = Arc::new(SqliteRunIndex::open(&dir.path().join("index.sqlite")).unwrap());
        let loaded = load_config_str(&text, "inline.yaml", dir.path(), &[]).unwrap();
        let worker = Arc::new(FixedResolver {
            store: store.clone(),
            index: index.clone(),
            backend: None,
            secrets: Arc::new(NoSecrets),
        });
        let backend = Arc::new(Inline { worker: worker.clone(), exits: Mutex::default() });
        let resolver = Arc::new(FixedResolver { store, index, backend: Some(backend), secrets: Arc::new(NoSecrets) });
        Harness { _dir: dir, loaded, worker, resolver }
    }

    async fn submit(&self) -> RunOutcome {
        let (_tx, rx) = watch::channel(false);
        let opts = ControllerOptions {
            rounds: None,
            rerun_of: None,
            set: None,
            resolver: self.resolver.clone(),
            progress: Arc::new(NoProgress),
            interrupt: rx,
            journal: None,
            worker_env: Arc::new(BTreeMap::new),
        };
        submit(&self.loaded, opts).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_tasks_are_run_graded_packed_and_recorded() {
    let h = Harness::new(12, 4);
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Complete, "{out:?}");
    let s = &out.summary;
    assert_eq!(s.passed + s.failed + s.errored + s.infra, 12, "{s:?}");
    assert!(s.passed > 0 && s.failed + s.errored > 0, "the toy mix grades both ways: {s:?}");
    let index = &h.worker.index;
    let records = index.list_tasks(&out.run_id).await.unwrap();
    assert_eq!(records.len(), 12);
    for r in &records {
        assert_eq!(r.state, TaskState::Completed, "{r:?}");
        assert_eq!(r.attempt, 1, "{r:?}");
        // The task's pack is where the index's record says it finished, with the same verdict.
        let bytes = h.worker.store.get(&out.run_id, &layout::task_pack(&r.task_id)).await.unwrap();
        let result: TaskResult =
            serde_json::from_slice(&taskpack::unpack_one(&bytes, layout::TASK_RESULT, "pack").unwrap().unwrap())
                .unwrap();
        assert_eq!((Some(result.passed), Some(result.agent.terminated_by)), (r.passed, r.terminated_by), "{r:?}");
        assert_eq!(result.job_id, *r.job_id.as_ref().unwrap());
    }
    // Three jobs of four: every task ran in the job the controller gave it.
    let jobs = index.list_jobs(&out.run_id).await.unwrap();
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    assert!(jobs.iter().all(|j| j.status == JobState::Succeeded && j.task_count == 4), "{jobs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_another_attempt_completed_is_left_alone() {
    let h = Harness::new(3, 3);
    let out = h.submit().await;
    let index = &h.worker.index;
    let before = index.list_tasks(&out.run_id).await.unwrap();
    let job = index.list_jobs(&out.run_id).await.unwrap().remove(0).handle;
    let pack = layout::task_pack(&before[0].task_id);
    let pack_before = h.worker.store.get(&out.run_id, &pack).await.unwrap();
    // The same job attempt started again (a duplicated launch): it finds every task done.
    let uri = format!("{}/{}", out.bundle_uri, layout::job_spec(&job.job_id, job.attempt));
    let worker = h.worker.clone();
    let code = tokio::task::spawn_blocking(move || work(&worker, &uri)).await.unwrap();
    assert_eq!(code, worker_exit::OK);
    let after = index.list_tasks(&out.run_id).await.unwrap();
    assert_eq!(before, after, "no record moved");
    assert_eq!(h.worker.store.get(&out.run_id, &pack).await.unwrap(), pack_before, "no pack rewritten");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_spec_missing_or_of_another_run_ends_with_its_exit_code() {
    let h = Harness::new(2, 2);
    let out = h.submit().await;
    let missing = format!("{}/jobs/nope/attempt-1/job.json", out.bundle_uri);
    let worker = h.worker.clone();
    let code = tokio::task::spawn_blocking(move || work(&worker, &missing)).await.unwrap();
    assert_eq!(code, worker_exit::FAILED);
    // A spec that says it is another run's: not this bundle's to run, and retrying won't help.
    let job = h.worker.index.list_jobs(&out.run_id).await.unwrap().remove(0).handle;
    let path = layout::job_spec(&job.job_id, job.attempt);
    let mut spec: serde_json::Value =
        serde_json::from_slice(&h.worker.store.get(&out.run_id, &path).await.unwrap()).unwrap();
    spec["run_id"] = serde_json::json!(RunId::new());
    h.worker.store.put(&out.run_id, &path, &serde_json::to_vec(&spec).unwrap()).await.unwrap();
    let uri = format!("{}/{path}", out.bundle_uri);
    let worker = h.worker.clone();
    let code = tokio::task::spawn_blocking(move || work(&worker, &uri)).await.unwrap();
    assert_eq!(code, worker_exit::BAD_JOB);
}

/// The result the worker packed for `task` of `run`.
async fn packed(h: &Harness, run: &RunId, task: &str) -> (TaskResult, String) {
    let bytes = h.worker.store.get(run, &layout::task_pack(&task.parse().unwrap())).await.unwrap();
    let file = |name| String::from_utf8(taskpack::unpack_one(&bytes, name, "pack").unwrap().unwrap()).unwrap();
    (serde_json::from_str(&file(layout::TASK_RESULT)).unwrap(), file(layout::TASK_LOG))
}

const CASES: &str = r#"{"id": "pass", "input": "q", "expected": "a"}
{"id": "fail", "input": "q", "expected": "a", "metadata": {"mock": {"answer": "b"}}}
{"id": "errored", "input": "q", "expected": "a", "metadata": {"mock": {"fail": "boom"}}}
{"id": "limit", "input": "q", "expected": "a", "metadata": {"mock": {"runaway": true}}}
{"id": "infra", "input": "q", "expected": "a", "environment": {"healthcheck": {"command": "exit 1", "interval_secs": 0.01, "retries": 1}}}
{"id": "unscored", "input": "q", "environment": {}, "tests": {"command": "true", "rules": "harbor"}}
{"id": "fresh", "input": "q", "environment": {}, "tests": {"command": "echo 1 > \"$AGENTEVAL_VERIFIER_DIR/reward.txt\"", "verify_in": "fresh"}}
"#;

/// Each outcome a task can come to, from one job of the real worker: graded pass and fail, an
/// agent that errors, one stopped at its limit, one the infrastructure failed; then the same
/// run regraded from its record, where no agent runs and the verdicts stand.
#[tokio::test(flavor = "multi_thread")]
async fn every_outcome_of_a_task_and_its_regrade() {
    let body = "benchmark:\n  kind: jsonl\n  cases: cases.jsonl\n  trust_case_evaluators: true\nagent:\n  kind: mock\n  limits:\n    max_tokens: 5000\n";
    let mut h = Harness::with(body, 7, &[("cases.jsonl", CASES)]);
    let out = h.submit().await;
    let expect = [
        ("pass", Outcome::Passed, TerminatedBy::Completed),
        ("fail", Outcome::Failed, TerminatedBy::Completed),
        ("errored", Outcome::Errored, TerminatedBy::AgentError),
        ("limit", Outcome::Errored, TerminatedBy::LimitTokens),
        ("infra", Outcome::Infra, TerminatedBy::InfraFailure),
    ];
    for (task, outcome, by) in expect {
        let (r, log) = packed(&h, &out.run_id, task).await;
        assert_eq!(
            (Outcome::of(r.passed, r.agent.terminated_by), r.agent.terminated_by),
            (outcome, by),
            "{task}: {log}"
        );
        assert!(
            log.lines().last().unwrap().contains("finished: passed="),
            "{task}: the log ends with the verdict: {log}"
        );
    }
    let (limit, _) = packed(&h, &out.run_id, "limit").await;
    assert!(limit.agent.error.as_deref().unwrap().contains("limit 5000"), "{limit:?}");
    let (unscored, log) = packed(&h, &out.run_id, "unscored").await;
    assert!(unscored.unscored && !unscored.passed, "Harbor's rules, no reward: {unscored:?} {log}");
    let (fresh, log) = packed(&h, &out.run_id, "fresh").await;
    assert!(fresh.passed && log.contains("the tests run in a fresh environment"), "{fresh:?} {log}");
    let (infra, log) = packed(&h, &out.run_id, "infra").await;
    assert!(log.contains("infrastructure failure"), "{log}");
    assert!(!infra.scores.is_empty() && infra.scores.iter().all(|s| !s.passed), "{infra:?}");

    // The run regraded: its recorded answers graded again, no agent run.
    let record = h.worker.index.get_run(&out.run_id).await.unwrap().unwrap();
    h.loaded.config.regrade =
        Some(agenteval_core::config::RegradeSource { run: out.run_id, bundle: record.bundle_uri });
    *h.loaded.config.benchmark.filter_mut() =
        agenteval_core::config::TaskFilter { ids: vec!["pass".into(), "fail".into()], tags: vec![], limit: None };
    let again = h.submit().await;
    assert_eq!(again.status, RunStatus::Complete, "{again:?}");
    for (task, passed) in [("pass", true), ("fail", false)] {
        let (r, log) = packed(&h, &again.run_id, task).await;
        assert_eq!(r.passed, passed, "{task}: {log}");
        assert!(log.contains(&format!("regrade: the answer and trace of run {}", out.run_id)), "{log}");
        assert!(!log.contains("agent mock ended"), "no agent ran: {log}");
    }
}

/// The capture stage keeps what the run lists of the agent's environment within one budget:
/// what fits is kept, what does not is left out whole and the task's log says so.
#[tokio::test(flavor = "multi_thread")]
async fn what_the_agent_left_is_kept_within_the_artifact_budget() {
    let case = r#"{"id": "left", "input": "q", "expected": "a", "environment": {"healthcheck": {"command": "printf small > small.txt && head -c 4096 /dev/zero > big.txt"}}}"#;
    let body = "benchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: mock\nenvironment:\n  artifacts: [small.txt, big.txt]\n  max_artifact_bytes: 1024\n";
    let h = Harness::with(body, 1, &[("cases.jsonl", &format!("{case}\n"))]);
    let out = h.submit().await;
    let (r, log) = packed(&h, &out.run_id, "left").await;
    assert!(r.passed, "{r:?} {log}");
    let bytes = h.worker.store.get(&out.run_id, &layout::task_pack(&"left".parse().unwrap())).await.unwrap();
    let file = |name: &str| taskpack::unpack_one(&bytes, name, "pack").unwrap();
    assert_eq!(file("artifacts/small.txt").as_deref(), Some(&b"small"[..]));
    assert_eq!(file("artifacts/big.txt"), None, "over the budget: left out whole");
    assert!(log.contains("artifact big.txt not kept"), "{log}");
}

/// Whether a pack of `task` was written anywhere under `dir` (staged or published).
fn pack_written(dir: &std::path::Path, task: &str) -> bool {
    let name = format!("{task}{}", layout::PACK_SUFFIX);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy() == name {
                return true;
            }
        }
    }
    false
}

/// A finished task's slot goes to the next task before its files are written; whatever then
/// stops the job, every task that finished is written before the job ends with its code.
#[tokio::test(flavor = "current_thread")]
async fn the_next_task_starts_before_the_finished_one_is_written_and_a_stop_writes_what_finished() {
    use super::{Finished, run_tasks, testing};
    use futures::StreamExt as _;
    type Done<'a> =
        std::pin::Pin<Box<dyn std::future::Future<Output = std::result::Result<Option<Finished<'a>>, i32>> + 'a>>;
    let (ctx, dir) = testing::ctx("", None);
    let tasks: Vec<TaskSpec> =
        ["t1", "t2", "t3"].iter().map(|id| testing::task(serde_json::json!({"id": id, "input": "q"}))).collect();
    let ids: Vec<TaskId> = tasks.iter().map(|t| t.id.clone()).collect();
    ctx.index.create_run(&agenteval_testkit::conformance::run_record(ctx.run_id, "unit"), &ids).await.unwrap();
    fn finished<'a>(ctx: &super::ctx::Ctx, t: &'a TaskSpec) -> Finished<'a> {
        let result = super::decide::task_result(&ctx.job, t, testing::completed(), vec![], 0, chrono::Utc::now());
        Finished { task: t, result, at: testing::attempt(), spans: None }
    }
    let seen = Mutex::new(None);
    let runs: Vec<Done<'_>> = vec![
        Box::pin(async { Ok(Some(finished(&ctx, &tasks[0]))) }),
        Box::pin(async {
            *seen.lock().unwrap() = Some(pack_written(dir.path(), "t1"));
            tokio::task::yield_now().await;
            Ok(Some(finished(&ctx, &tasks[1])))
        }),
    ];
    let code = run_tasks(&ctx, futures::stream::iter(runs).buffer_unordered(1), 1).await;
    assert_eq!(code, worker_exit::OK);
    assert_eq!(*seen.lock().unwrap(), Some(false), "t2 started with t1 not yet written");
    assert!(pack_written(dir.path(), "t1") && pack_written(dir.path(), "t2"));
    let recorded = ctx.index.get_tasks(&ctx.run_id, &ids).await.unwrap();
    assert!(recorded[..2].iter().all(|r| r.as_ref().is_some_and(|r| r.state == TaskState::Completed)), "{recorded:?}");
    // A job stopped (cancelled) right after a task finished still writes it.
    let runs: Vec<Done<'_>> =
        vec![Box::pin(async { Ok(Some(finished(&ctx, &tasks[2]))) }), Box::pin(async { Err(worker_exit::CANCELLED) })];
    let code = run_tasks(&ctx, futures::stream::iter(runs).buffer_unordered(2), 2).await;
    assert_eq!(code, worker_exit::CANCELLED);
    assert!(pack_written(dir.path(), "t3"), "what finished before the stop is written");
}
