//! Installed-agent presets benchmark: what each shipped agent costs a task. Run with
//! `cargo bench -p agenteval --bench presets` (needs a Docker engine, the local base image from
//! `docker/build-local.sh --base-only`, and the registries for the first fetch).
//!
//! Prints, for `nop` and each preset (`AGENTEVAL_BENCH_PRESETS=codex,aider` picks some), on copies
//! of harbor-mini's `hello-file` against the scripted model (zero latency) through the gateway,
//! one task at a time:
//! - the first install: the packages fetched into an empty cache, then the agent layer built
//!   (nothing cached), and the same layer built again from a warm package cache;
//! - with the layer cached, over 20 tasks (`AGENTEVAL_BENCH_SCALE=0.25`: 5), median and p95 of the
//!   time from the task's start to its agent's first model call (to `nop`'s only event for
//!   `nop`), and each preset's overhead over `nop` (target: ≤ 1 s for every preset).

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use util::{Workspace, read_json, read_text, repo};

const BASE: &str = "agenteval-local/debian:bookworm";
const PRESETS: [&str; 5] = ["codex", "claude-code", "mini-swe-agent", "aider", "opencode"];

fn scale(n: usize) -> usize {
    let s: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    ((n as f64 * s).round() as usize).max(2)
}

fn quantiles(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

/// `n` copies of `hello-file` scripted to be solved, with room for the agents' memory.
fn tasks(ws: &Workspace, n: usize) -> PathBuf {
    let dir = ws.path().join(format!("tasks-{n}"));
    for i in 0..n {
        let t = dir.join(format!("t{i:02}"));
        copy_dir(&repo().join("configs/harbor-mini/hello-file"), &t);
        let ins = t.join("instruction.md");
        let was = std::fs::read_to_string(&ins).unwrap();
        std::fs::write(&ins, format!("{was}\nHELLO_SOLVE\n")).unwrap();
        let toml = t.join("task.toml");
        let s = std::fs::read_to_string(&toml).unwrap().replace("memory_mb = 512", "memory_mb = 2048");
        std::fs::write(&toml, s).unwrap();
    }
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn config(ws: &Workspace, tasks: &Path, agent: &str, mock: &str) -> PathBuf {
    ws.write("secrets.env", "OPENAI_API_KEY=sk-bench-0000000000000000\nANTHROPIC_API_KEY=sk-ant-bench-000000000\n");
    let upstream = format!(
        "  model: mock-model\n  upstream:\n    openai: {{base_url: {mock}, secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}}}\n    anthropic: {{base_url: {mock}, secrets: {{ANTHROPIC_API_KEY: ANTHROPIC_API_KEY}}}}\n    prices:\n      mock-model: {{input_per_mtok: 1, output_per_mtok: 1}}\n"
    );
    let agent = if agent == "nop" {
        "  kind: nop\n".to_string()
    } else {
        format!("  kind: installed\n  preset: {agent}\n{upstream}")
    };
    ws.write(
        &format!("bench-{}.yaml", tasks.file_name().unwrap().to_string_lossy()),
        &format!(
            "name: presets-bench\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n{agent}environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 1\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
            tasks.display()
        ),
    )
}

fn submit(ws: &Workspace, cfg: &Path, cache: &Path) -> (String, f64) {
    let started = Instant::now();
    let out = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("AGENTEVAL_CACHE_DIR", cache)
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (v["run_id"].as_str().unwrap().to_string(), started.elapsed().as_secs_f64())
}

fn ts(v: &serde_json::Value) -> DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

/// Each task's seconds from its start to its agent's first model call (`nop`: its first event).
fn to_first_call(ws: &Workspace, run: &str, n: usize, solves: bool) -> Vec<f64> {
    let bundle = ws.runs().join(run);
    (0..n)
        .map(|i| {
            let task = bundle.join(format!("tasks/t{i:02}"));
            let r = read_json(&task.join("result.json"));
            assert_eq!(r["passed"] == true, solves, "{r}");
            let trace = read_text(task.join("trace.jsonl")).unwrap();
            let events: Vec<serde_json::Value> = trace.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let first = events.iter().find(|e| e["kind"] == "model.call").or(events.first()).unwrap();
            let latency = first["payload"]["latency_ms"].as_f64().unwrap_or(0.0) / 1000.0;
            (ts(&first["timestamp"]) - ts(&r["started_at"])).as_seconds_f64() - latency
        })
        .collect()
}

fn layer_of(ws: &Workspace, run: &str) -> Option<String> {
    let log = read_text(ws.runs().join(run).join("tasks/t00/worker.log")).ok()?;
    log.split_whitespace().find(|w| w.starts_with("agenteval-agent:")).map(str::to_string)
}

fn main() {
    let only: Option<Vec<String>> =
        std::env::var("AGENTEVAL_BENCH_PRESETS").ok().map(|s| s.split(',').map(str::to_string).collect());
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let n = scale(20);
    let one = tasks(&ws, 1);
    let many = tasks(&ws, n);
    let warm_cache = std::env::var_os("AGENTEVAL_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/agenteval"));
    println!("presets: {n} tasks each, one at a time, on harbor-mini's hello-file, the mock model at zero latency");
    let (nop_run, _) = submit(&ws, &config(&ws, &many, "nop", &mock.base_url()), &warm_cache);
    let (nop_median, nop_p95) = quantiles(to_first_call(&ws, &nop_run, n, false));
    println!("  {:<15} task start to the agent's first event: median {nop_median:.2} s, p95 {nop_p95:.2} s", "nop");
    for preset in PRESETS.iter().filter(|p| only.as_ref().is_none_or(|o| o.iter().any(|x| x == *p))) {
        let cold_cache = tempfile::tempdir().unwrap();
        // The first install: packages fetched into an empty cache, the layer built.
        let cfg_one = config(&ws, &one, preset, &mock.base_url());
        let (warmup, _) = submit(&ws, &cfg_one, &warm_cache);
        if let Some(tag) = layer_of(&ws, &warmup) {
            let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
        }
        let (first, _) = submit(&ws, &cfg_one, cold_cache.path());
        let cold = read_json(&ws.runs().join(&first).join("tasks/t00/result.json"))["setup_seconds"].as_f64().unwrap();
        if let Some(tag) = layer_of(&ws, &first) {
            let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
        }
        let (again, _) = submit(&ws, &cfg_one, cold_cache.path());
        let layer = read_json(&ws.runs().join(&again).join("tasks/t00/result.json"))["setup_seconds"].as_f64().unwrap();
        let (run, wall) = submit(&ws, &config(&ws, &many, preset, &mock.base_url()), &warm_cache);
        let (median, p95) = quantiles(to_first_call(&ws, &run, n, true));
        println!(
            "  {preset:<15} first install {cold:.1} s (fetch + layer), layer alone {layer:.1} s; cached: task start to first model call median {median:.2} s, p95 {p95:.2} s; over nop +{:.2} s / +{:.2} s (target ≤ 1 s); {n} tasks in {wall:.1} s",
            median - nop_median,
            p95 - nop_p95
        );
    }
}
