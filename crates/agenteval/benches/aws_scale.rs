//! The AWS controller's cost model at 1,000, 10,000 and 100,000 tasks (issue 12). A run of
//! 100,000 real workers is too slow for the emulator, so this drives the real controller
//! (`controller::submit`: dispatch, polling loop, job ends, seal) over the real DynamoDB index and
//! S3 store, every one of its calls through the counting proxy, with a simulated fleet in place
//! of ECS: a job "runs" for `JOB_SECONDS`, then its tasks are recorded (completed) and
//! their packs (`tasks/<id>.tar.gz`) and the attempt's manifest part are written, as a worker would, by
//! clients that bypass the proxy (the fleet's calls per task are the other benchmark's).
//!
//! Per size it prints the controller's API calls per task by operation, DynamoDB read and write
//! units per task (from the items each index call touched: one unit per item under 1 KB written,
//! one per item read strongly consistently, a query's pages by 4 KB), the progress polls and the
//! index reads they made, what one poll would cost if it counted the tasks (the design the
//! counters replaced), the controller's peak RSS (with the simulated fleet, which holds nothing
//! but its jobs), and the list-price request cost per 1,000 tasks. Each size runs in its own
//! process so that the peak RSS is that size's.
//!
//! `cargo bench -p agenteval --bench aws_scale`; `AGENTEVAL_SCALE_SIZES=1000,10000` picks sizes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenteval_aws::{AwsClients, AwsSettings, DynamoDbRunIndex, S3BundleStore};
use agenteval_core::config::load_config_str;
use agenteval_core::model::*;
use agenteval_core::traits::*;
use agenteval_core::{Error, Result, RunId, SCHEMA_VERSION, TaskId, layout};
use agenteval_engine::bundle::{RecordingStore, write_files_part};
use agenteval_engine::controller::{ControllerOptions, Progress, ProgressView, submit};
use agenteval_testkit::emulator;
use agenteval_testkit::resolver::{FixedResolver, NoSecrets};
use async_trait::async_trait;
use util::{Children, fault_proxy, read_json};

#[path = "../tests/it/util/mod.rs"]
mod util;

const JOB_SECONDS: f64 = 0.5;
const TASKS_PER_JOB: u64 = 10;
const JOBS_IN_FLIGHT: u64 = 64;

/// The simulated fleet: jobs finish `JOB_SECONDS` after submission, having written what a
/// worker writes that the controller reads.
struct Fleet {
    index: Arc<dyn RunIndex>,
    store: Arc<dyn BundleStore>,
    jobs: Arc<Mutex<HashMap<String, JobStatus>>>,
}

async fn run_job(index: Arc<dyn RunIndex>, store: Arc<dyn BundleStore>, job: JobSpec) -> Result<()> {
    tokio::time::sleep(Duration::from_secs_f64(JOB_SECONDS)).await;
    let recording = RecordingStore::new(store);
    for t in &job.tasks {
        let now = chrono::Utc::now();
        let result = TaskResult {
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
            steps: vec![],
            harbor_would_skip: None,
            roles: Default::default(),
            schema_version: SCHEMA_VERSION.into(),
            run_id: job.run_id,
            task_id: t.id.clone(),
            job_id: job.job_id.clone(),
            attempt: job.attempt,
            passed: t.id.as_str().len() % 3 != 0,
            agent: AgentResult {
                success: true,
                final_answer: Some(serde_json::json!("ok")),
                error: None,
                total_cost_usd: 0.001,
                total_tokens: 100,
                wall_seconds: JOB_SECONDS,
                terminated_by: TerminatedBy::Completed,
                steps: 3,
                cost_unknown: false,
                fault: None,
            },
            scores: vec![],
            started_at: now,
            finished_at: now,
        };
        // A finished task's pack, as a worker leaves it (bundle schema 1.1).
        let bytes = serde_json::to_vec_pretty(&result).expect("serializes");
        let pack = agenteval_core::taskpack::pack(&[(layout::TASK_RESULT, &bytes)])?;
        recording.put(&job.run_id, &layout::task_pack(&t.id), &pack).await?;
        index.record_task(&job.run_id, &TaskTransition::completed(&result)).await?;
    }
    write_files_part(&recording, &job.run_id, &job.job_id, job.attempt, recording.written()).await
}

#[async_trait]
impl CloudBackend for Fleet {
    fn id(&self) -> &str {
        "simulated"
    }
    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle> {
        let key = format!("{}#{}", job.job_id, job.attempt);
        self.jobs.lock().unwrap().insert(key.clone(), JobStatus::Running);
        let (index, store, jobs, spec, k) =
            (self.index.clone(), self.store.clone(), self.jobs.clone(), job.clone(), key.clone());
        tokio::spawn(async move {
            let status = match run_job(index, store, spec).await {
                Ok(()) => JobStatus::Succeeded,
                Err(e) => JobStatus::Failed { exit_code: Some(4), reason: e.to_string(), infrastructure: true },
            };
            jobs.lock().unwrap().insert(k, status);
        });
        Ok(JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id: key })
    }
    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>> {
        let jobs = self.jobs.lock().unwrap();
        handles.iter().map(|h| jobs.get(&h.native_id).cloned().ok_or_else(|| Error::not_found("no such job"))).collect()
    }
    async fn cancel_job(&self, _handle: &JobHandle, _reason: &str) -> Result<()> {
        Ok(())
    }
    async fn wait_for_change(&self, timeout: Duration) {
        tokio::time::sleep(timeout.max(Duration::from_millis(200))).await
    }
}

/// Every index call of the controller, by method, with the items it touched.
struct CountedIndex {
    inner: Arc<dyn RunIndex>,
    calls: Mutex<BTreeMap<&'static str, (u64, u64, Duration)>>,
    tasks: u64,
}

impl CountedIndex {
    fn note(&self, method: &'static str, items: u64, took: Duration) {
        let mut c = self.calls.lock().unwrap();
        let e = c.entry(method).or_default();
        e.0 += 1;
        e.1 += items;
        e.2 += took;
    }
}

macro_rules! counted {
    ($self:ident, $name:literal, $items:expr, $call:expr) => {{
        let start = Instant::now();
        let out = $call.await;
        $self.note($name, $items, start.elapsed());
        out
    }};
}

#[async_trait]
impl RunIndex for CountedIndex {
    async fn create_run(&self, run: &RunRecord, tasks: &[TaskId]) -> Result<()> {
        counted!(self, "create_run", tasks.len() as u64 + 1, self.inner.create_run(run, tasks))
    }
    async fn add_tasks(&self, run: &RunId, tasks: &[TaskId], total: u64) -> Result<()> {
        counted!(self, "add_tasks", tasks.len() as u64 + 1, self.inner.add_tasks(run, tasks, total))
    }
    async fn get_run(&self, run: &RunId) -> Result<Option<RunRecord>> {
        counted!(self, "get_run", 1, self.inner.get_run(run))
    }
    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        counted!(self, "list_runs", limit as u64, self.inner.list_runs(limit))
    }
    async fn update_run(&self, run: &RunId, update: &RunUpdate) -> Result<()> {
        counted!(self, "update_run", 1, self.inner.update_run(run, update))
    }
    async fn record_task(&self, run: &RunId, t: &TaskTransition) -> Result<bool> {
        counted!(self, "record_task", 1, self.inner.record_task(run, t))
    }
    async fn record_tasks(&self, run: &RunId, ts: &[TaskTransition]) -> Result<Vec<bool>> {
        counted!(self, "record_task", ts.len() as u64, self.inner.record_tasks(run, ts))
    }
    async fn get_task(&self, run: &RunId, task: &TaskId) -> Result<Option<TaskRecord>> {
        counted!(self, "get_task", 1, self.inner.get_task(run, task))
    }
    async fn get_tasks(&self, run: &RunId, tasks: &[TaskId]) -> Result<Vec<Option<TaskRecord>>> {
        counted!(self, "get_tasks", tasks.len() as u64, self.inner.get_tasks(run, tasks))
    }
    async fn list_tasks(&self, run: &RunId) -> Result<Vec<TaskRecord>> {
        counted!(self, "list_tasks", self.tasks, self.inner.list_tasks(run))
    }
    async fn task_counts(&self, run: &RunId) -> Result<TaskCounts> {
        counted!(self, "task_counts", self.tasks, self.inner.task_counts(run))
    }
    async fn add_spend(&self, run: &RunId, usd: f64) -> Result<f64> {
        counted!(self, "add_spend", 1, self.inner.add_spend(run, usd))
    }
    async fn add_held(&self, run: &RunId, usd: f64) -> Result<(f64, f64)> {
        counted!(self, "add_held", 1, self.inner.add_held(run, usd))
    }
    async fn book_rate(&self, run: &RunId, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64> {
        counted!(self, "book_rate", 1, self.inner.book_rate(run, key, now_ms, cost_ms))
    }

    async fn spend(&self, run: &RunId) -> Result<f64> {
        counted!(self, "spend", 1, self.inner.spend(run))
    }
    fn counts_are_cheap(&self) -> bool {
        self.inner.counts_are_cheap()
    }
    async fn record_job(&self, job: &JobRecord) -> Result<()> {
        counted!(self, "record_job", 1, self.inner.record_job(job))
    }
    async fn list_jobs(&self, run: &RunId) -> Result<Vec<JobRecord>> {
        counted!(self, "list_jobs", 0, self.inner.list_jobs(run))
    }
    async fn set_baseline(&self, name: &str, run: &RunId) -> Result<()> {
        counted!(self, "set_baseline", 1, self.inner.set_baseline(name, run))
    }
    async fn get_baseline(&self, name: &str) -> Result<Option<RunId>> {
        counted!(self, "get_baseline", 1, self.inner.get_baseline(name))
    }
    async fn unset_baseline(&self, name: &str) -> Result<Option<RunId>> {
        counted!(self, "unset_baseline", 1, self.inner.unset_baseline(name))
    }
    async fn verify(&self) -> Result<()> {
        self.inner.verify().await
    }
}

/// Counts the progress polls.
#[derive(Default)]
struct Polls(AtomicU64);
impl Progress for Polls {
    fn update(&self, _view: &ProgressView) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// See `price` in the `aws` benchmark: US East list prices per request (2026).
fn price(op: &str) -> f64 {
    match op {
        "s3.PutObject" | "s3.UploadPart" | "s3.ListObjectsV2" | "s3.POST" | "s3.DELETE" => 0.005 / 1000.0,
        "s3.GetObject" | "s3.HeadObject" => 0.0004 / 1000.0,
        _ => 0.0,
    }
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .expect("VmHWM in /proc/self/status: a memory figure that cannot be read is no figure")
}

/// One size, in this process: prints one JSON line of figures.
async fn one(endpoint: &str, tasks: u64, dir: &Path) {
    let bucket = emulator::unique("scale-bundles");
    let table = emulator::unique("scale-runs");
    let direct = AwsClients::connect(&AwsSettings::emulator(endpoint)).await;
    direct.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    DynamoDbRunIndex::new(direct.clone(), &table).create_table().await.unwrap();
    let mut kill = Children(vec![]);
    let stats = dir.join("proxy.json");
    let (child, counted_url) = fault_proxy(&["--target", endpoint, "--stats", stats.to_str().unwrap()]);
    kill.0.push(child);
    let counted = AwsClients::connect(&AwsSettings::emulator(&counted_url)).await;

    let index = Arc::new(CountedIndex {
        inner: Arc::new(DynamoDbRunIndex::new(counted.clone(), &table)),
        calls: Default::default(),
        tasks,
    });
    let store: Arc<dyn BundleStore> = Arc::new(S3BundleStore::new(counted, &bucket, "runs"));
    let fleet = Arc::new(Fleet {
        index: Arc::new(DynamoDbRunIndex::new(direct.clone(), &table)),
        store: Arc::new(S3BundleStore::new(direct, &bucket, "runs")),
        jobs: Default::default(),
    });
    let yaml = format!(
        "name: scale\nbenchmark:\n  kind: toy\n  size: {tasks}\n  latency_ms: 0\n  slow_ms: 0\nagent:\n  kind: mock\n\
         evaluators:\n  - kind: no_error\nbackend:\n  id: aws\n  max_concurrent_jobs: {JOBS_IN_FLIGHT}\n  concurrency: fixed\n  \
         tasks_per_job: {TASKS_PER_JOB}\nstorage:\n  bundle_root: s3://{bucket}/runs\n  index: dynamodb://{table}\naws:\n  region: us-east-1\n  \
         cluster: simulated\n  task_definition: simulated:1\n  subnets: [subnet-1]\n  security_groups: [sg-1]\n"
    );
    let loaded = load_config_str(&yaml, "scale.yaml", dir, &[]).unwrap_or_else(|e| panic!("{e}"));
    let polls = Arc::new(Polls::default());
    let (_tx, interrupt) = tokio::sync::watch::channel(false);
    let opts = ControllerOptions {
        rounds: None,
        resolver: Arc::new(FixedResolver {
            store,
            index: index.clone(),
            backend: Some(fleet),
            secrets: Arc::new(NoSecrets),
        }),
        progress: polls.clone(),
        interrupt,
        journal: None,
        worker_env: Arc::new(BTreeMap::new),
        rerun_of: None,
        set: None,
    };
    let start = Instant::now();
    let outcome = submit(&loaded, opts).await.unwrap_or_else(|e| panic!("the run failed: {e}"));
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(outcome.summary.tasks_finished, tasks, "every task finished");
    // The design the counters replaced: one count of the tasks per poll, timed now the run is done.
    let t = Instant::now();
    let counts = index.inner.task_counts(&outcome.run_id).await.unwrap();
    let count_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(counts.completed, tasks);
    std::thread::sleep(Duration::from_millis(600));
    let ops: BTreeMap<String, u64> = serde_json::from_value(read_json(&stats)["ops"].clone()).unwrap();
    let calls = index.calls.lock().unwrap().clone();
    let calls: BTreeMap<String, serde_json::Value> = calls
        .into_iter()
        .map(|(k, (n, items, took))| (k.to_string(), serde_json::json!([n, items, took.as_secs_f64()])))
        .collect();
    let line = serde_json::json!({
        "tasks": tasks,
        "seconds": secs,
        "ops": ops,
        "index": calls,
        "polls": polls.0.load(Ordering::Relaxed),
        "count_ms": count_ms,
        "peak_rss_mb": peak_rss_mb(),
    });
    println!("{line}");
}

fn report(v: &serde_json::Value) {
    let tasks = v["tasks"].as_f64().unwrap();
    println!(
        "\n{} tasks: {:.1} s against the emulator, {} jobs of {TASKS_PER_JOB}, {JOBS_IN_FLIGHT} in flight, \
         jobs of {JOB_SECONDS} s; controller peak RSS {:.1} MB",
        v["tasks"],
        v["seconds"].as_f64().unwrap(),
        (tasks as u64).div_ceil(TASKS_PER_JOB),
        v["peak_rss_mb"].as_f64().unwrap()
    );
    println!("{:<28} {:>9} {:>10} {:>16}", "controller API call", "calls", "per task", "USD per 1k tasks");
    let (mut total, mut cost) = (0u64, 0.0);
    let ops: BTreeMap<String, u64> = serde_json::from_value(v["ops"].clone()).unwrap();
    for (op, n) in &ops {
        let c = *n as f64 * price(op) * 1000.0 / tasks;
        total += n;
        cost += c;
        println!("{op:<28} {n:>9} {:>10.4} {c:>16.6}", *n as f64 / tasks);
    }
    // DynamoDB on demand: $0.625 per million write units, $0.125 per million read units.
    let idx: BTreeMap<String, (u64, u64, f64)> = serde_json::from_value(v["index"].clone()).unwrap();
    let items = |m: &str| idx.get(m).map_or(0, |e| e.1);
    let count_calls = idx.get("task_counts").map_or(0, |e| e.0);
    // A task item is ~250 bytes: a query reads 4 KB pages, strongly consistent, one unit each.
    let wcu = items("create_run") + items("update_run") + items("record_task") + items("record_job");
    let rcu = items("get_tasks") + items("get_run") + items("get_task") + (items("task_counts") * 250).div_ceil(4096);
    let ddb = (wcu as f64 * 0.625 + rcu as f64 * 0.125) / 1e6 * 1000.0 / tasks;
    println!(
        "{:<28} {total:>9} {:>10.4} {:>16.6}\nDynamoDB units per task: {:.3} write, {:.3} read (request cost {:.6} USD per 1k tasks; total {:.6})",
        "total",
        total as f64 / tasks,
        cost,
        wcu as f64 / tasks,
        rcu as f64 / tasks,
        ddb,
        cost + ddb
    );
    let spent: Vec<String> = idx.iter().map(|(m, (n, _, secs))| format!("{m} {n}× {secs:.1} s")).collect();
    println!("index calls: {}", spent.join(", "));
    println!(
        "progress polls: {}; index reads made by them: {} (task counts read {count_calls} times: at the start and the end); \
         one count of the tasks, the old per-poll cost: {:.0} ms",
        v["polls"],
        count_calls.saturating_sub(2),
        v["count_ms"].as_f64().unwrap()
    );
}

#[tokio::main]
async fn main() {
    if let Ok(n) = std::env::var("AGENTEVAL_SCALE_ONE") {
        let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("the parent passes the emulator");
        let dir = tempfile::tempdir().unwrap();
        one(&endpoint, n.parse().unwrap(), dir.path()).await;
        return;
    }
    let sizes: Vec<u64> = std::env::var("AGENTEVAL_SCALE_SIZES")
        .unwrap_or_else(|_| "1000,10000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("sizes are numbers"))
        .collect();
    let endpoint = emulator::endpoint().to_string();
    println!("agenteval AWS controller at scale, against {endpoint}");
    let mut per_task = Vec::new();
    for n in sizes {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .env("AGENTEVAL_SCALE_ONE", n.to_string())
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = text
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("size {n} printed no figures: {text}"));
        report(&v);
        let calls: u64 = v["ops"].as_object().unwrap().values().map(|c| c.as_u64().unwrap()).sum();
        per_task.push((n, calls));
    }
    // Calls per task, and what each further task costs between two sizes: a run also pays a
    // fixed part (the report's sample of 300 traces, the listings), which the first figure
    // spreads over its tasks and the second leaves out.
    println!(
        "\ncontroller calls per task: {}",
        per_task.iter().map(|(n, c)| format!("{n}: {:.4}", *c as f64 / *n as f64)).collect::<Vec<_>>().join(", ")
    );
    let marginal: Vec<(u64, u64, f64)> =
        per_task.windows(2).map(|w| (w[0].0, w[1].0, (w[1].1 - w[0].1) as f64 / (w[1].0 - w[0].0) as f64)).collect();
    for (a, b, m) in &marginal {
        println!("calls per further task from {a} to {b} tasks: {m:.4}");
    }
    if let (Some(first), Some(last)) = (marginal.first(), marginal.last()) {
        println!("per-task cost change across the sizes: {:+.1}%", (last.2 / first.2 - 1.0) * 100.0);
    }
}
