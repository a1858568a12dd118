//! Telemetry overhead benchmark: 1,000 zero-latency mock tasks with OTLP export off and on
//! (gRPC and HTTP/protobuf to an in-process receiver), driving the real binary. Both ways the
//! bundle gets its `spans.jsonl` files; "on" adds the export. Run with
//! `cargo bench -p agenteval --bench telemetry` (target: wall-time overhead under 5%).
//!
//! `AGENTEVAL_BENCH_REPS` (default 5) runs of each mode are interleaved; medians are compared.

#[path = "../tests/util/otlp.rs"]
#[allow(dead_code)]
mod otlp;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agenteval");
const TASKS: u64 = 1_000;

fn run(dir: &Path, shape: &str, per_job: u64, concurrency: u64, otlp: Option<(&str, &str)>) -> Duration {
    let cfg = dir.join(format!("{shape}.yaml"));
    std::fs::write(
        &cfg,
        format!(
            "name: bench-telemetry-{shape}\nbenchmark:\n  kind: toy\n  size: {TASKS}\n  latency_ms: 0\n  slow_ms: 0\nagent:\n  kind: mock\n  limits:\n    max_tokens: 5000\nevaluators:\n  - kind: exact_match\n  - kind: no_error\nbackend:\n  max_concurrent_jobs: {concurrency}\n  tasks_per_job: {per_job}\nstorage:\n  bundle_root: runs-{shape}\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["submit", "--json", "--config", cfg.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::inherit());
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    if let Some((endpoint, protocol)) = otlp {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint).env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let wall = start.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("submit --json output");
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(v["summary"]["tasks_finished"].as_u64(), Some(TASKS));
    wall
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::var("AGENTEVAL_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let dir = tempfile::Builder::new().prefix("agenteval-bench-otel-").tempdir().unwrap();
    let grpc = otlp::Receiver::start(otlp::Protocol::Grpc);
    let http = otlp::Receiver::start(otlp::Protocol::Http);
    println!(
        "agenteval telemetry benchmark: {TASKS} mock tasks, {reps} runs per mode ({} cores)",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1)
    );
    println!(
        "{:<34} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "shape", "off (s)", "grpc (s)", "http (s)", "grpc +%", "http +%"
    );
    let mut report = serde_json::Map::new();
    for (shape, per_job, conc) in [("50-per-job", 50, 2), ("1-per-job", 1, 4)] {
        let (mut off, mut on_grpc, mut on_http) = (vec![], vec![], vec![]);
        for _ in 0..reps {
            off.push(run(dir.path(), shape, per_job, conc, None));
            on_grpc.push(run(dir.path(), shape, per_job, conc, Some((&grpc.endpoint(), "grpc"))));
            on_http.push(run(dir.path(), shape, per_job, conc, Some((&http.endpoint(), "http/protobuf"))));
            let _ = std::fs::remove_dir_all(dir.path().join(format!("runs-{shape}")));
        }
        let (off, g, h) = (median(off), median(on_grpc), median(on_http));
        let pct = |on: Duration| (on.as_secs_f64() / off.as_secs_f64() - 1.0) * 100.0;
        println!(
            "{:<34} {:>12.3} {:>12.3} {:>12.3} {:>9.1}% {:>9.1}%",
            format!("{TASKS} tasks, {shape}, {conc} in flight"),
            off.as_secs_f64(),
            g.as_secs_f64(),
            h.as_secs_f64(),
            pct(g),
            pct(h)
        );
        report.insert(
            shape.into(),
            serde_json::json!({"off_s": off.as_secs_f64(), "grpc_s": g.as_secs_f64(), "http_s": h.as_secs_f64(),
                "grpc_overhead_pct": pct(g), "http_overhead_pct": pct(h)}),
        );
    }
    let spans = |r: &otlp::Receiver| r.store.lock().unwrap().spans.len();
    report.insert("spans_received".into(), serde_json::json!({"grpc": spans(&grpc), "http": spans(&http)}));
    report.insert("target_overhead_pct".into(), 5.into());
    println!("{}", serde_json::Value::Object(report));
}
