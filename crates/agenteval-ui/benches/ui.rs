//! The UI's server time and page weight (issue 13): the runs list over an index of 1,000 runs,
//! the run page of a 10,000-task run (every task with a trace), and the task page of a task
//! with a 2,000-event trace; then the server's memory after browsing them. The server runs in
//! this process, over a real SQLite index and bundle folders; requests go over loopback HTTP,
//! so a page's time is the server's plus a loopback round trip.
//!
//! `cargo bench -p agenteval-ui --bench ui`

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_core::format::ResultLine;
use agenteval_core::model::*;
use agenteval_core::traits::{BundleStore, RunIndex};
use agenteval_core::{JobId, RunId, SCHEMA_VERSION, TaskId, layout};
use agenteval_local::{FsBundleStore, SqliteRunIndex};
use agenteval_ui::{Access, Source, UiOptions};
use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;

struct Local {
    index: SqliteRunIndex,
    store: Arc<dyn BundleStore>,
}

#[async_trait]
impl Source for Local {
    fn index(&self) -> &dyn RunIndex {
        &self.index
    }
    async fn bundle(&self, _uri: &str) -> agenteval_core::Result<Arc<dyn BundleStore>> {
        Ok(self.store.clone())
    }
    async fn resolve(&self, reference: &str) -> agenteval_core::Result<RunId> {
        reference.parse()
    }
    fn describe(&self) -> String {
        "bench".into()
    }
}

fn record(run: RunId, name: &str, tasks: u64, store: &dyn BundleStore) -> RunRecord {
    let now = Utc::now();
    RunRecord {
        run_id: run,
        name: name.into(),
        benchmark: "bench".into(),
        agent: "mock".into(),
        backend: "local".into(),
        status: RunStatus::Complete,
        bundle_uri: store.bundle_uri(&run),
        config_hash: "0".repeat(64),
        tasks_total: tasks,
        created_at: now,
        updated_at: now,
        finished_at: Some(now),
        heartbeat_at: now,
        cancel_requested: false,
        controller: "bench:1".into(),
        epoch: 0,
        leased_at: None,
        verdict: Some(agenteval_core::model::RunVerdict::Pass),
        baseline: None,
        set_id: None,
        concurrency: None,
    }
}

fn event(run: RunId, task: &TaskId, step: u32) -> String {
    let e = TraceEvent {
        run_id: run,
        task_id: task.clone(),
        step,
        attempt: 0,
        timestamp: Utc::now(),
        kind: if step.is_multiple_of(2) { EventKind::AgentToolCall } else { EventKind::AgentToolResult },
        payload: json!({"tool": "search", "args": {"q": format!("query number {step} about something")}, "result": "a result of some length ".repeat(4)}),
        cost_usd: 0.0001,
        input_tokens: 40,
        output_tokens: 12,
    };
    let mut s = serde_json::to_string(&e).unwrap();
    s.push('\n');
    s
}

fn result(run: RunId, task: &TaskId, passed: bool) -> TaskResult {
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
        run_id: run,
        task_id: task.clone(),
        job_id: JobId::numbered(0, 1),
        attempt: 1,
        passed,
        agent: AgentResult {
            success: passed,
            final_answer: Some(json!("answer")),
            error: None,
            total_cost_usd: 0.002,
            total_tokens: 260,
            wall_seconds: 1.5,
            terminated_by: TerminatedBy::Completed,
            steps: 5,
            cost_unknown: false,
            fault: None,
        },
        scores: vec![EvaluatorScore {
            optional: false,
            evaluator_id: "exact_match".into(),
            kind: "exact_match".into(),
            score: if passed { 1.0 } else { 0.0 },
            passed,
            reason: "compared".into(),
            citations: vec![],
            cost_usd: 0.0,
            tokens: 0,
            error: None,
        }],
        started_at: now,
        finished_at: now,
        steps: vec![],
        harbor_would_skip: None,
        roles: Default::default(),
    }
}

fn get(port: u16, path: &str) -> (Duration, usize) {
    let start = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{path}: {}", &text[..text.len().min(300)]);
    let body = text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len());
    (took, body)
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .expect("VmRSS in /proc/self/status: a memory figure that cannot be read is no figure")
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn BundleStore> = Arc::new(FsBundleStore::new(dir.path()));
    let index = SqliteRunIndex::open(&dir.path().join("index.sqlite")).unwrap();
    let made = Instant::now();
    for i in 0..999 {
        index.create_run(&record(RunId::new(), &format!("suite-{}", i % 20), 100, store.as_ref()), &[]).await.unwrap();
    }
    // The big run, newest: 10,000 tasks, each with a 5-event trace; t00000 has 2,000 events.
    let run = RunId::new();
    let tasks: Vec<TaskId> = (0..10_000).map(|i| format!("t{i:05}").parse().unwrap()).collect();
    index.create_run(&record(run, "big", tasks.len() as u64, store.as_ref()), &tasks).await.unwrap();
    let meta = agenteval_testkit::fixtures::metadata(run, "big", "bench", tasks.len() as u64);
    store.put(&run, layout::METADATA, &serde_json::to_vec(&meta).unwrap()).await.unwrap();
    let mut lines = String::new();
    let mut specs = String::new();
    for (i, t) in tasks.iter().enumerate() {
        let r = result(run, t, i % 4 != 0);
        lines.push_str(&serde_json::to_string(&ResultLine::from(&r)).unwrap());
        lines.push('\n');
        specs.push_str(
            &serde_json::to_string(&json!({"id": t, "input": "q", "tags": [format!("g{}", i % 7)]})).unwrap(),
        );
        specs.push('\n');
        let n = if i == 0 { 2_000 } else { 5 };
        let trace: String = (0..n).map(|s| event(run, t, s)).collect();
        store.put(&run, &layout::task_file(t, layout::TASK_TRACE), trace.as_bytes()).await.unwrap();
        if i == 0 {
            store
                .put(&run, &layout::task_file(t, layout::TASK_RESULT), &serde_json::to_vec(&r).unwrap())
                .await
                .unwrap();
            store
                .put(&run, &layout::task_file(t, layout::TASK_LOG), b"worker log line\n".repeat(200).as_slice())
                .await
                .unwrap();
        }
    }
    store.put(&run, layout::RESULTS, lines.as_bytes()).await.unwrap();
    store.put(&run, layout::TASKS, specs.as_bytes()).await.unwrap();
    println!(
        "data: 1,000 runs, one of 10,000 tasks (a trace each), a 2,000-event trace ({:.1} s to write)",
        made.elapsed().as_secs_f64()
    );

    let source = Arc::new(Local { index, store });
    let opts = UiOptions { access: Access { loopback: true, token: None }, gates: None, generator: "bench".into() };
    let bound = agenteval_ui::bind(source, "127.0.0.1:0".parse().unwrap(), opts).await.unwrap();
    let port = bound.addr.port();
    tokio::spawn(bound.serve(std::future::pending()));
    let before = rss_mb();
    println!("{:<44} {:>10} {:>10} {:>10} {:>12}", "page", "first ms", "median ms", "max ms", "weight KB");
    for (name, path) in [
        ("runs list (1,000 runs; 50 a page)", "/".to_string()),
        ("runs list, a name's history (50 runs)", "/?name=suite-3".to_string()),
        ("run page (10,000 tasks)", format!("/runs/{run}")),
        ("task page (2,000-event trace)", format!("/runs/{run}/tasks/t00000")),
        ("API: runs", "/api/runs".to_string()),
    ] {
        let path2 = path.clone();
        let first = tokio::task::spawn_blocking(move || get(port, &path2)).await.unwrap();
        let mut times = Vec::new();
        let mut weight = first.1;
        for _ in 0..10 {
            let p = path.clone();
            let (t, w) = tokio::task::spawn_blocking(move || get(port, &p)).await.unwrap();
            times.push(t);
            weight = w;
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{name:<44} {:>10.1} {:>10.1} {:>10.1} {:>12.0}",
            ms(first.0),
            ms(times[times.len() / 2]),
            ms(*times.last().unwrap()),
            weight as f64 / 1024.0
        );
    }
    println!(
        "server memory: {before:.1} MB before browsing, {:.1} MB after (this process: the server and the data it cached)",
        rss_mb()
    );
}
