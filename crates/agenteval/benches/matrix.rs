//! The matrix benchmark, driving the real binary. Run with `cargo bench -p agenteval --bench
//! matrix`. Prints the wall time of one 500-task run of the `llm` agent against a mock model
//! answering every call after 1 s with 100 calls in flight (4 job slots x 25 tasks at once),
//! then of a 3-model x 2-prompt `submit --matrix` of the same run (6 x 500 tasks on the same
//! fleet), and their ratio (target: at most 6.5x, i.e. the shared fleet stays full).
//!
//! `AGENTEVAL_BENCH_SCALE=0.2` shrinks it for a quick look.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agenteval_testkit::llm_mock::MockLlm;

const BIN: &str = env!("CARGO_BIN_EXE_agenteval");

/// `submit --json` with `extra` arguments: wall time and the printed object.
fn submit(cfg: &Path, extra: &[&str]) -> (Duration, serde_json::Value) {
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(["submit", "--json", "--config", cfg.to_str().unwrap()])
        .args(extra)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let wall = start.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("submit printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    (wall, v)
}

fn main() {
    let scale: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let tasks = ((500.0 * scale) as u64).max(100);
    let dir = tempfile::Builder::new().prefix("agenteval-bench-matrix-").tempdir().unwrap();
    let dir = dir.path();
    println!(
        "agenteval matrix benchmark ({} cores)",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1)
    );
    let mock = MockLlm::start(Duration::from_secs(1));
    let cases: String = (0..tasks).map(|i| format!("{{\"id\": \"t{i:05}\", \"input\": \"question {i}\"}}\n")).collect();
    std::fs::write(dir.join("cases.jsonl"), cases).unwrap();
    std::fs::write(dir.join("p1.txt"), "Be brief.").unwrap();
    std::fs::write(dir.join("p2.txt"), "Be thorough.").unwrap();
    let per_job = tasks.div_ceil(4);
    let cfg = dir.join("matrix.yaml");
    std::fs::write(
        &cfg,
        format!(
            "name: bench-matrix\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: llm\n  model: openai-compatible:m1\n  base_url: {}\nbackend:\n  max_concurrent_jobs: 4\n  tasks_per_job: {per_job}\n  tasks_in_parallel: 25\nstorage: {{bundle_root: runs}}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let (one, v) = submit(&cfg, &[]);
    assert_eq!(v["summary"]["passed"].as_u64(), Some(tasks), "{v}");
    let prompts = format!("agent.system=@{},@{}", dir.join("p1.txt").display(), dir.join("p2.txt").display());
    let (set, v) = submit(
        &cfg,
        &[
            "--matrix",
            "agent.model=openai-compatible:m1,openai-compatible:m2,openai-compatible:m3",
            "--matrix",
            &prompts,
        ],
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6, "{v}");
    for r in runs {
        assert_eq!(r["summary"]["passed"].as_u64(), Some(tasks), "{r}");
    }
    let ratio = set.as_secs_f64() / one.as_secs_f64();
    println!(
        "one run of {tasks} tasks, 1 s per call, 100 in flight: {:.2} s (ideal {:.0} s)",
        one.as_secs_f64(),
        tasks as f64 / 100.0
    );
    println!(
        "matrix of 6 x {tasks} tasks on the same fleet: {:.2} s (ideal {:.0} s): {ratio:.2}x the one run (target <= 6.5x)",
        set.as_secs_f64(),
        6.0 * tasks as f64 / 100.0
    );
}
