//! The controller driven by a scripted in-memory `CloudBackend`: jobs that run, vanish, hang,
//! or report success without running, so that retries, give-up, budget, cancel and resume are
//! covered without starting a process. The store and index are the real local ones.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenteval_core::config::{LoadedConfig, load_config_str};
use agenteval_core::format::Metadata;
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::Secret;
use agenteval_core::traits::*;
use agenteval_core::{Error, Result, RunId, SCHEMA_VERSION};
use agenteval_local::{FsBundleStore, SqliteRunIndex};
use agenteval_testkit::resolver::FixedResolver;
use async_trait::async_trait;
use chrono::Utc;
use tokio::sync::watch;

use super::{ControllerOptions, NoProgress, RunOutcome, resume, submit};
use crate::bundle::{TaskTable, read_json, write_task_outcome};

/// What a job attempt does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behave {
    /// Runs every task (each passes and costs `cost`) and succeeds, `after` its submission.
    Run { after: Duration, cost: f64 },
    /// The job disappears: an infrastructure failure with nothing done.
    Vanish,
    /// The job reports success without having run a task.
    Lie,
    /// The job runs until it is cancelled.
    Hang,
    /// The backend refuses to launch it, for good (a missing task definition).
    Refuse,
    /// Like `Run`, as a real worker does it (files staged under the job attempt, the task
    /// completed in the index), but the worker dies before it moves its files into the task
    /// folders; the job ends as a lost worker.
    DieBeforePublishing,
}

const RUN: Behave = Behave::Run { after: Duration::ZERO, cost: 0.01 };

type Script = Box<dyn Fn(&JobSpec) -> Behave + Send + Sync>;

struct Job {
    spec: JobSpec,
    behave: Behave,
    submitted: Instant,
    status: JobStatus,
}

/// A passing result of `task`, as a scripted job attempt writes it.
fn scripted_result(spec: &JobSpec, task: &agenteval_core::TaskId, cost: f64, steps: u32) -> TaskResult {
    let now = Utc::now();
    TaskResult {
        image: None,
        changed_outside: 0,
        setup_seconds: None,
        suspect: vec![],
        tampered: vec![],
        without_tampering: None,
        rewards: None,
        unscored: false,
        models: Default::default(),
        provider_wait_seconds: 0.0,
        schema_version: SCHEMA_VERSION.into(),
        run_id: spec.run_id,
        task_id: task.clone(),
        job_id: spec.job_id.clone(),
        attempt: spec.attempt,
        passed: true,
        agent: AgentResult {
            success: true,
            final_answer: Some(serde_json::json!("ok")),
            error: None,
            total_cost_usd: cost,
            total_tokens: 10,
            wall_seconds: 0.0,
            terminated_by: TerminatedBy::Completed,
            steps,
            cost_unknown: false,
            fault: None,
        },
        scores: vec![],
        started_at: now,
        finished_at: now,
        steps: vec![],
        harbor_would_skip: None,
        roles: Default::default(),
    }
}

/// A backend that does what its script says, writing results the way a worker would.
struct Scripted {
    store: Arc<dyn BundleStore>,
    index: Arc<dyn RunIndex>,
    script: Script,
    jobs: Mutex<HashMap<String, Job>>,
    /// Every submission, in order: (job id, attempt, task ids).
    submitted: Mutex<Vec<(String, u32, Vec<String>)>>,
    cancelled: Mutex<Vec<String>>,
    secrets_fetched: std::sync::atomic::AtomicUsize,
    /// Tasks completed by scripted jobs.
    completed: std::sync::atomic::AtomicUsize,
}

impl Scripted {
    fn submissions(&self) -> Vec<(String, u32, Vec<String>)> {
        self.submitted.lock().unwrap().clone()
    }

    async fn stage_and_die(&self, spec: &JobSpec) -> Result<()> {
        for t in &spec.tasks {
            let running = TaskTransition::new(t.id.clone(), spec.attempt, TaskState::Running).job(&spec.job_id);
            if !self.index.record_task(&spec.run_id, &running).await? {
                continue;
            }
            let result = scripted_result(spec, &t.id, 0.01, 0);
            let staged = layout::staged_task_trace(&spec.job_id, spec.attempt, &t.id);
            self.store.put(&spec.run_id, &staged, b"").await?;
            let keep = |s: &str| s.to_string();
            let outcome = crate::bundle::Outcome { result: &result, log: "staged\n", spans: None, trace: None };
            crate::bundle::stage_task_pack(self.store.as_ref(), outcome, &[], &keep).await?;
            self.index.record_task(&spec.run_id, &TaskTransition::completed(&result)).await?;
        }
        Ok(())
    }

    async fn run_tasks(&self, spec: &JobSpec, cost: f64) -> Result<()> {
        for t in &spec.tasks {
            let running = TaskTransition::new(t.id.clone(), spec.attempt, TaskState::Running).job(&spec.job_id);
            if !self.index.record_task(&spec.run_id, &running).await? {
                continue;
            }
            let result = scripted_result(spec, &t.id, cost, 1);
            write_task_outcome(self.store.as_ref(), &result, "scripted\n", None, b"", &|s: &str| s.to_string()).await?;
            self.index.record_task(&spec.run_id, &TaskTransition::completed(&result)).await?;
            self.completed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

#[async_trait]
impl CloudBackend for Scripted {
    fn id(&self) -> &str {
        "scripted"
    }

    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle> {
        let key = format!("{}#{}", job.job_id, job.attempt);
        let behave = (self.script)(job);
        if matches!(behave, Behave::Refuse) {
            return Err(agenteval_core::Error::invalid(
                "launching a job: ClientException: Unable to find task definition nightly:9",
            ));
        }
        self.submitted.lock().unwrap().push((
            job.job_id.to_string(),
            job.attempt,
            job.tasks.iter().map(|t| t.id.to_string()).collect(),
        ));
        let status = match behave {
            Behave::Vanish => JobStatus::Failed { exit_code: None, reason: "vanished".into(), infrastructure: true },
            Behave::Lie => JobStatus::Succeeded,
            Behave::DieBeforePublishing => {
                self.stage_and_die(job).await?;
                JobStatus::Failed { exit_code: Some(137), reason: "worker killed".into(), infrastructure: true }
            }
            _ => JobStatus::Running,
        };
        self.jobs
            .lock()
            .unwrap()
            .insert(key.clone(), Job { spec: job.clone(), behave, submitted: Instant::now(), status });
        Ok(JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id: key })
    }

    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>> {
        let mut out = Vec::new();
        for h in handles {
            let due = {
                let jobs = self.jobs.lock().unwrap();
                let j = jobs.get(&h.native_id).ok_or_else(|| Error::not_found("no such job"))?;
                match (j.behave, &j.status) {
                    (Behave::Run { after, cost }, JobStatus::Running) if j.submitted.elapsed() >= after => {
                        Some((j.spec.clone(), cost))
                    }
                    _ => None,
                }
            };
            if let Some((spec, cost)) = due {
                self.run_tasks(&spec, cost).await?;
                self.jobs.lock().unwrap().get_mut(&h.native_id).unwrap().status = JobStatus::Succeeded;
            }
            out.push(self.jobs.lock().unwrap()[&h.native_id].status.clone());
        }
        Ok(out)
    }

    async fn cancel_job(&self, handle: &JobHandle, _reason: &str) -> Result<()> {
        self.cancelled.lock().unwrap().push(handle.native_id.clone());
        if let Some(j) = self.jobs.lock().unwrap().get_mut(&handle.native_id)
            && !j.status.is_terminal()
        {
            j.status = JobStatus::Cancelled;
        }
        Ok(())
    }

    async fn wait_for_change(&self, _timeout: Duration) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The scripted fleet has no secrets, and counts who asked.
#[async_trait]
impl SecretStore for Scripted {
    async fn fetch(&self, name: &str) -> Result<Secret> {
        self.secrets_fetched.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(Error::not_found(format!("no secret {name}")))
    }
}

/// The SQLite index, counting `task_counts` calls, optionally claiming its counts are costly.
struct Counting {
    inner: SqliteRunIndex,
    costly: bool,
    counted: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl RunIndex for Counting {
    async fn create_run(&self, run: &RunRecord, tasks: &[agenteval_core::TaskId]) -> Result<()> {
        self.inner.create_run(run, tasks).await
    }
    async fn add_tasks(&self, run: &RunId, tasks: &[agenteval_core::TaskId], total: u64) -> Result<()> {
        self.inner.add_tasks(run, tasks, total).await
    }
    async fn get_run(&self, run: &RunId) -> Result<Option<RunRecord>> {
        self.inner.get_run(run).await
    }
    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.inner.list_runs(limit).await
    }
    async fn update_run(&self, run: &RunId, update: &RunUpdate) -> Result<()> {
        self.inner.update_run(run, update).await
    }
    async fn record_task(&self, run: &RunId, t: &TaskTransition) -> Result<bool> {
        self.inner.record_task(run, t).await
    }
    async fn record_tasks(&self, run: &RunId, ts: &[TaskTransition]) -> Result<Vec<bool>> {
        self.inner.record_tasks(run, ts).await
    }
    async fn get_task(&self, run: &RunId, task: &agenteval_core::TaskId) -> Result<Option<TaskRecord>> {
        self.inner.get_task(run, task).await
    }
    async fn get_tasks(&self, run: &RunId, tasks: &[agenteval_core::TaskId]) -> Result<Vec<Option<TaskRecord>>> {
        self.inner.get_tasks(run, tasks).await
    }
    async fn list_tasks(&self, run: &RunId) -> Result<Vec<TaskRecord>> {
        self.inner.list_tasks(run).await
    }
    async fn task_counts(&self, run: &RunId) -> Result<TaskCounts> {
        self.counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.task_counts(run).await
    }
    async fn add_spend(&self, run: &RunId, usd: f64) -> Result<f64> {
        self.inner.add_spend(run, usd).await
    }
    async fn add_held(&self, run: &RunId, usd: f64) -> Result<(f64, f64)> {
        self.inner.add_held(run, usd).await
    }
    async fn book_rate(&self, run: &RunId, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64> {
        self.inner.book_rate(run, key, now_ms, cost_ms).await
    }

    async fn spend(&self, run: &RunId) -> Result<f64> {
        self.inner.spend(run).await
    }
    fn counts_are_cheap(&self) -> bool {
        !self.costly
    }
    async fn record_job(&self, job: &JobRecord) -> Result<()> {
        self.inner.record_job(job).await
    }
    async fn list_jobs(&self, run: &RunId) -> Result<Vec<JobRecord>> {
        self.inner.list_jobs(run).await
    }
    async fn set_baseline(&self, name: &str, run: &RunId) -> Result<()> {
        self.inner.set_baseline(name, run).await
    }
    async fn get_baseline(&self, name: &str) -> Result<Option<RunId>> {
        self.inner.get_baseline(name).await
    }
    async fn unset_baseline(&self, name: &str) -> Result<Option<RunId>> {
        self.inner.unset_baseline(name).await
    }
    async fn verify(&self) -> Result<()> {
        self.inner.verify().await
    }
}

struct Harness {
    counting: Arc<Counting>,
    _dir: tempfile::TempDir,
    loaded: LoadedConfig,
    resolver: Arc<FixedResolver>,
    backend: Arc<Scripted>,
}

impl Harness {
    /// How many times the index's `task_counts` was read.
    fn counted(&self) -> u64 {
        self.counting.counted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A toy run of `tasks` tasks, one per job and two jobs at a time unless `sets` says
    /// otherwise, whose jobs do what `script` says.
    fn new(tasks: u32, sets: &[&str], script: Script) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "name: scripted\nbenchmark:\n  kind: toy\n  size: {tasks}\nagent:\n  kind: mock\nbackend:\n  max_concurrent_jobs: 2\n"
        );
        let store: Arc<dyn BundleStore> = Arc::new(FsBundleStore::new(dir.path().join("runs")));
        let sqlite = SqliteRunIndex::open(&dir.path().join("index.sqlite")).unwrap();
        // `costly_counts=true` stands for DynamoDB, whose counts are a scan of every task.
        let costly = sets.contains(&"costly_counts=true");
        let sets: Vec<&str> = sets.iter().copied().filter(|s| *s != "costly_counts=true").collect();
        let counting = Arc::new(Counting { inner: sqlite, costly, counted: Default::default() });
        let index: Arc<dyn RunIndex> = counting.clone();
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let loaded = load_config_str(&text, "scripted.yaml", dir.path(), &sets).unwrap();
        let backend = Arc::new(Scripted {
            store: store.clone(),
            index: index.clone(),
            script,
            jobs: Mutex::default(),
            submitted: Mutex::default(),
            cancelled: Mutex::default(),
            secrets_fetched: Default::default(),
            completed: Default::default(),
        });
        let resolver =
            Arc::new(FixedResolver { store, index, backend: Some(backend.clone()), secrets: backend.clone() });
        Harness { counting, _dir: dir, loaded, resolver, backend }
    }

    fn options(&self, interrupt: watch::Receiver<bool>) -> ControllerOptions {
        ControllerOptions {
            rounds: None,
            rerun_of: None,
            set: None,
            resolver: self.resolver.clone(),
            progress: Arc::new(NoProgress),
            interrupt,
            journal: None,
            worker_env: Arc::new(BTreeMap::new),
        }
    }

    async fn submit(&self) -> RunOutcome {
        let (_tx, rx) = watch::channel(false);
        submit(&self.loaded, self.options(rx)).await.unwrap()
    }

    /// Submits, and interrupts the run once `ready` says so (polled every few milliseconds).
    async fn submit_and_interrupt(&self, ready: impl Fn(&Scripted) -> bool + Send + 'static) -> RunOutcome {
        let (tx, rx) = watch::channel(false);
        let backend = self.backend.clone();
        let watcher = tokio::spawn(async move {
            while !ready(&backend) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = tx.send(true);
            // The sender stays alive until the run has seen it.
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let out = submit(&self.loaded, self.options(rx)).await.unwrap();
        watcher.abort();
        out
    }

    fn backend(&self) -> &Scripted {
        &self.backend
    }

    async fn tasks(&self, run: &RunId) -> Vec<TaskRecord> {
        self.resolver.index.list_tasks(run).await.unwrap()
    }

    async fn result(&self, run: &RunId, task: &str) -> TaskResult {
        let id = task.parse().unwrap();
        let bytes =
            agenteval_core::taskpack::read_task_file(self.resolver.store.as_ref(), run, &id, layout::TASK_RESULT)
                .await
                .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    async fn metadata(&self, run: &RunId) -> Metadata {
        read_json(self.resolver.store.as_ref(), run, layout::METADATA).await.unwrap()
    }
}

fn attempts_of(subs: &[(String, u32, Vec<String>)], job: &str) -> Vec<u32> {
    subs.iter().filter(|(j, _, _)| j == job).map(|(_, a, _)| *a).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_vanishes_is_retried() {
    let h = Harness::new(
        3,
        &[],
        Box::new(|j| if j.job_id.as_str() == "j000002" && j.attempt == 1 { Behave::Vanish } else { RUN }),
    );
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Complete);
    assert_eq!(out.summary.passed, 3);
    let subs = h.backend().submissions();
    assert_eq!(attempts_of(&subs, "j000002"), vec![1, 2]);
    assert_eq!(attempts_of(&subs, "j000001"), vec![1]);
    let tasks = h.tasks(&out.run_id).await;
    assert!(tasks.iter().all(|t| t.state == TaskState::Completed), "{tasks:?}");
    assert_eq!(h.result(&out.run_id, &subs.iter().find(|s| s.0 == "j000002").unwrap().2[0]).await.attempt, 2);
}

/// A worker that won its tasks (the index says completed) and died before moving its staged
/// files: nothing is run again, and the seal moves the files the index says count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seal_publishes_what_a_dead_winner_left_staged() {
    let h = Harness::new(
        4,
        &["backend.tasks_per_job=2"],
        Box::new(|j| if j.job_id.as_str() == "j000002" { Behave::DieBeforePublishing } else { RUN }),
    );
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Complete);
    assert_eq!(out.summary.passed, 4, "{:?}", out.summary);
    let subs = h.backend().submissions();
    assert_eq!(attempts_of(&subs, "j000002"), vec![1], "the completed tasks are not run again");
    let store = h.resolver.store.as_ref();
    for id in &subs.iter().find(|s| s.0 == "j000002").unwrap().2 {
        let r = h.result(&out.run_id, id).await;
        assert_eq!(r.attempt, 1);
        let task: agenteval_core::TaskId = id.parse().unwrap();
        let pack = store.get(&out.run_id, &layout::task_pack(&task)).await.unwrap();
        let files = agenteval_core::taskpack::unpack(&pack, id).unwrap();
        assert_eq!(files.names().collect::<Vec<_>>(), ["result.json", "trace.jsonl", "worker.log"], "the pack moved");
        let job = "j000002".parse().unwrap();
        for left in [layout::staged_task_trace(&job, 1, &task), layout::staged_task_pack(&job, 1, &task)] {
            assert!(!store.exists(&out.run_id, &left).await.unwrap(), "{left} left staged");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_reports_success_without_running_is_retried() {
    let h = Harness::new(2, &[], Box::new(|j| if j.attempt == 1 { Behave::Lie } else { RUN }));
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Complete);
    let subs = h.backend().submissions();
    assert_eq!(attempts_of(&subs, "j000001"), vec![1, 2]);
    assert_eq!(attempts_of(&subs, "j000002"), vec![1, 2]);
    for t in h.tasks(&out.run_id).await {
        assert_eq!((t.state, t.attempt), (TaskState::Completed, 2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_attempts_the_tasks_are_given_up_once() {
    let h = Harness::new(2, &["backend.tasks_per_job=2", "backend.max_attempts=3"], Box::new(|_| Behave::Vanish));
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Failed);
    assert_eq!(attempts_of(&h.backend().submissions(), "j000001"), vec![1, 2, 3]);
    let tasks = h.tasks(&out.run_id).await;
    assert_eq!(tasks.len(), 2);
    for t in &tasks {
        assert_eq!((t.state, t.attempt), (TaskState::Failed, 3), "{t:?}");
        let r = h.result(&out.run_id, t.task_id.as_str()).await;
        assert_eq!(r.agent.terminated_by, TerminatedBy::InfraFailure);
        assert!(r.agent.error.as_deref().unwrap().contains("gave up after attempt 3: vanished"), "{r:?}");
    }
    assert_eq!((out.summary.failed, out.summary.infra), (0, 2), "given up: infra, not failed");
    assert!(h.metadata(&out.run_id).await.sealed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_no_retry_can_fix_stops_the_run_and_tries_no_task() {
    let h = Harness::new(
        6,
        &["backend.tasks_per_job=2"],
        Box::new(|j| if j.job_id.as_str() == "j000001" { RUN } else { Behave::Refuse }),
    );
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Failed);
    let reason = out.reason.clone().unwrap();
    assert!(reason.starts_with("cannot launch jobs:") && reason.contains("task definition nightly:9"), "{reason}");
    let tasks = h.tasks(&out.run_id).await;
    assert!(tasks.iter().all(|t| t.state != TaskState::Failed), "no task is charged with the launch: {tasks:?}");
    assert!(tasks.iter().filter(|t| t.state == TaskState::Completed).count() <= 2);
    let meta = h.metadata(&out.run_id).await;
    assert!(meta.sealed && meta.reason.as_deref() == Some(reason.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_counts_are_read_at_the_start_and_end_and_kept_from_job_ends_between() {
    let script: Script = Box::new(|j| {
        if j.job_id.as_str() == "j000003" && j.attempt == 1 {
            Behave::Vanish
        } else {
            Behave::Run { after: Duration::from_millis(150), cost: 0.01 }
        }
    });
    let h = Harness::new(12, &["costly_counts=true", "backend.max_attempts=1"], script);
    let out = h.submit().await;
    // Tasks of j000003 were given up; the others passed.
    assert_eq!((out.summary.passed, out.summary.infra), (11, 1), "{:?}", out.summary);
    let counted = h.counted();
    // Start and end of the drive, whatever the number of 200 ms polls in between (the cheap
    // index below is read at every one of them).
    assert!(counted <= 3, "task_counts read {counted} times");
    let cheap = Harness::new(
        12,
        &["backend.max_attempts=1"],
        Box::new(|_| Behave::Run { after: Duration::from_millis(150), cost: 0.01 }),
    );
    cheap.submit().await;
    assert!(cheap.counted() > 4, "a cheap index is polled: {}", cheap.counted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_budget_stops_dispatch() {
    let h = Harness::new(
        20,
        &["backend.max_concurrent_jobs=1", "max_run_cost_usd=2.5"],
        Box::new(|_| Behave::Run { after: Duration::from_millis(100), cost: 1.0 }),
    );
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::BudgetExceeded);
    let n = h.backend().submissions().len();
    // The budget is read every 200 ms; tasks take 100 ms each, one at a time.
    assert!((3..=12).contains(&n), "{n} of 20 jobs dispatched for a budget of 2.5 tasks");
    assert!(out.summary.known_cost() >= 2.5, "{:?}", out.summary);
    assert!(h.metadata(&out.run_id).await.sealed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_jobs_and_seals_interrupted() {
    let h = Harness::new(4, &[], Box::new(|j| if j.job_id.as_str() == "j000001" { RUN } else { Behave::Hang }));
    let out = h.submit_and_interrupt(|b| b.submissions().len() >= 3).await;
    assert_eq!(out.status, RunStatus::Interrupted);
    let cancelled = h.backend().cancelled.lock().unwrap().clone();
    assert!(cancelled.contains(&"j000002#1".to_string()) && cancelled.contains(&"j000003#1".to_string()));
    let tasks = h.tasks(&out.run_id).await;
    let states: Vec<_> = tasks.iter().map(|t| t.state).collect();
    assert_eq!(states.iter().filter(|s| **s == TaskState::Completed).count(), 1, "{states:?}");
    assert_eq!(states.iter().filter(|s| **s == TaskState::Cancelled).count(), 2, "{states:?}");
    let meta = h.metadata(&out.run_id).await;
    assert!(meta.sealed);
    assert_eq!(meta.status, RunStatus::Interrupted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_runs_only_the_unfinished_tasks() {
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = hang.clone();
    let h = Harness::new(
        4,
        &[],
        Box::new(move |j| {
            if j.job_id.as_str() == "j000001" || !flag.load(std::sync::atomic::Ordering::SeqCst) {
                RUN
            } else {
                Behave::Hang
            }
        }),
    );
    // Interrupted once the first job has run and the second hangs.
    let first = h
        .submit_and_interrupt(|b| {
            b.submissions().len() >= 2 && b.completed.load(std::sync::atomic::Ordering::SeqCst) >= 1
        })
        .await;
    assert_eq!(first.status, RunStatus::Interrupted);
    let done: Vec<String> = h
        .tasks(&first.run_id)
        .await
        .into_iter()
        .filter(|t| t.state == TaskState::Completed)
        .map(|t| t.task_id.to_string())
        .collect();
    assert_eq!(done.len(), 1);
    let before = h.backend().submissions().len();

    hang.store(false, std::sync::atomic::Ordering::SeqCst);
    let (_tx, rx) = watch::channel(false);
    let out = resume(h.resolver.index.clone(), &first.run_id, false, &[], h.options(rx)).await.unwrap();
    assert_eq!(out.status, RunStatus::Complete);
    assert_eq!(out.summary.passed, 4);
    let resumed = &h.backend().submissions()[before..];
    let rerun: Vec<&String> = resumed.iter().flat_map(|(_, _, t)| t).collect();
    assert_eq!(rerun.len(), 3, "{resumed:?}");
    assert!(!rerun.contains(&&done[0]), "a finished task ran again: {resumed:?}");
    assert!(resumed.iter().all(|(j, _, _)| j.starts_with("r1-")), "{resumed:?}");
    let meta = h.metadata(&first.run_id).await;
    assert_eq!((meta.resumed, meta.status, meta.sealed), (1, RunStatus::Complete, true));
    let table = TaskTable::read(h.resolver.store.as_ref(), &first.run_id).await.unwrap();
    assert_eq!(table.len(), 4);
    assert!(Path::new(&h.resolver.store.bundle_uri(&first.run_id)).join(layout::MANIFEST).is_file());
}

/// Secrets are the workers' business: a controller that fetched them would hold them in a
/// process that writes the bundle and the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_never_fetches_a_secret() {
    let h = Harness::new(
        2,
        &["agent.kind=command", "agent.command=[agent]", "agent.secrets={API_KEY: prod/key}"],
        Box::new(|_| RUN),
    );
    assert_eq!(h.loaded.config.agent.secrets().len(), 1, "the config names a secret");
    let out = h.submit().await;
    assert_eq!(out.status, RunStatus::Complete);
    assert_eq!(h.backend().secrets_fetched.load(std::sync::atomic::Ordering::SeqCst), 0);
}
