//! Telemetry overhead benchmark: 1,000 zero-latency mock tasks with OTLP export off and on
//! (gRPC and HTTP/protobuf to an in-process receiver), driving the real binary. Both ways the
//! bundle gets its `spans.jsonl` files; "on" adds the export. Run with
//! `cargo bench -p agenteval --bench telemetry` (target: wall-time overhead under 5%).
//!
//! `AGENTEVAL_BENCH_REPS` (default 5) runs of each mode are interleaved; medians are compared.
//! Bundles go to a tmpfs (`/dev/shm`) when there is one: on this VM's ext4, deleting a bundle of
//! thousands of files makes the next run's writes several times slower, which drowns the
//! difference being measured.

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::{BIN, children_cpu, otlp, toy_yaml};

const TASKS: u64 = 1_000;

/// One run: wall time and the CPU time of the controller and its workers.
fn run(dir: &Path, shape: &str, sc: &Scenario, otlp: Option<(&str, &str)>) -> (Duration, Duration) {
    let (per_job, concurrency, latency) = (sc.per_job, sc.concurrency, sc.latency_ms);
    let cfg = dir.join(format!("{shape}.yaml"));
    std::fs::write(
        &cfg,
        toy_yaml(&format!("bench-telemetry-{shape}"), TASKS, latency, per_job, concurrency, &format!("runs-{shape}")),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["submit", "--json", "--config", cfg.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // Workers exec'd, so each is the controller's child and its CPU is counted when it is
    // waited for (a forked worker's fork server outlives the controller by a moment, unwaited);
    // the OTLP receiver runs in this process, so the machine's busy time would count it too.
    cmd.env("AGENTEVAL_WORKER_START", "exec");
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    if let Some((endpoint, protocol)) = otlp {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint).env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    let cpu0 = children_cpu();
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let wall = start.elapsed();
    let cpu = children_cpu() - cpu0;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("submit --json output");
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(v["summary"]["tasks_finished"].as_u64(), Some(TASKS));
    (wall, cpu)
}

fn spans_received(r: &otlp::Receiver) -> u64 {
    r.store.lock().unwrap().span_count
}

/// Lines of every `spans.jsonl` under `dir`: the spans the runs there produced.
fn spans_in(dir: &Path) -> u64 {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            n += spans_in(&p);
        } else if p.file_name().is_some_and(|f| f == "spans.jsonl") {
            n += std::fs::read_to_string(&p).map(|t| t.lines().filter(|l| !l.is_empty()).count() as u64).unwrap_or(0);
        }
    }
    n
}

struct Scenario {
    per_job: u64,
    concurrency: u64,
    latency_ms: u64,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::var("AGENTEVAL_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let dir = util::bench_dir("agenteval-bench-otel-");
    // The receivers run in this process, on the same two cores: they count what arrives and
    // keep nothing, so that they cost as little as a collector elsewhere would.
    let grpc = otlp::Receiver::counting(otlp::Protocol::Grpc);
    let http = otlp::Receiver::counting(otlp::Protocol::Http);
    println!(
        "agenteval telemetry benchmark: {TASKS} mock tasks, {reps} runs per mode ({} cores), bundles in {}",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
        dir.path().display()
    );
    println!(
        "{:<48} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "scenario", "off (s)", "grpc (s)", "http (s)", "grpc +%", "http +%"
    );
    let mut report = serde_json::Map::new();
    let scenarios = [
        ("0ms-50-per-job", Scenario { per_job: 50, concurrency: 2, latency_ms: 0 }),
        ("0ms-1-per-job", Scenario { per_job: 1, concurrency: 4, latency_ms: 0 }),
        ("20ms-50-per-job", Scenario { per_job: 50, concurrency: 4, latency_ms: 20 }),
    ];
    for (shape, sc) in &scenarios {
        let (mut off, mut on_grpc, mut on_http) = (vec![], vec![], vec![]);
        for _ in 0..reps {
            for (times, receiver) in [(&mut off, None), (&mut on_grpc, Some(&grpc)), (&mut on_http, Some(&http))] {
                let before = receiver.map(spans_received).unwrap_or(0);
                let otlp =
                    receiver.map(|r| (r.endpoint(), if std::ptr::eq(r, &grpc) { "grpc" } else { "http/protobuf" }));
                times.push(run(dir.path(), shape, sc, otlp.as_ref().map(|(e, p)| (e.as_str(), *p))));
                let runs = dir.path().join(format!("runs-{shape}"));
                // An exporter that silently sent nothing would show as no overhead: every span
                // the run wrote to its bundle must have reached the receiver.
                if let Some(r) = receiver {
                    let (sent, written) = (spans_received(r) - before, spans_in(&runs));
                    assert!(written > 0 && sent == written, "{shape}: {written} spans in the bundle, {sent} received");
                }
                let _ = std::fs::remove_dir_all(runs);
            }
        }
        let walls = |v: &[(Duration, Duration)]| median(v.iter().map(|x| x.0).collect());
        let cpus = |v: &[(Duration, Duration)]| median(v.iter().map(|x| x.1).collect());
        let (off_w, g_w, h_w) = (walls(&off), walls(&on_grpc), walls(&on_http));
        let (off_c, g_c, h_c) = (cpus(&off), cpus(&on_grpc), cpus(&on_http));
        let pct = |on: Duration, off: Duration| (on.as_secs_f64() / off.as_secs_f64() - 1.0) * 100.0;
        println!(
            "{:<48} {:>8.3} {:>8.3} {:>8.3} {:>7.1}% {:>7.1}% {:>8.1}% {:>8.1}%",
            format!("{TASKS} tasks, {} ms agent, {} per job, {} in flight", sc.latency_ms, sc.per_job, sc.concurrency),
            off_w.as_secs_f64(),
            g_w.as_secs_f64(),
            h_w.as_secs_f64(),
            pct(g_w, off_w),
            pct(h_w, off_w),
            pct(g_c, off_c),
            pct(h_c, off_c),
        );
        report.insert(
            (*shape).into(),
            serde_json::json!({"off_s": off_w.as_secs_f64(), "grpc_s": g_w.as_secs_f64(), "http_s": h_w.as_secs_f64(),
                "grpc_wall_overhead_pct": pct(g_w, off_w), "http_wall_overhead_pct": pct(h_w, off_w),
                "grpc_cpu_overhead_pct": pct(g_c, off_c), "http_cpu_overhead_pct": pct(h_c, off_c)}),
        );
    }
    report.insert(
        "spans_received".into(),
        serde_json::json!({"grpc": spans_received(&grpc), "http": spans_received(&http)}),
    );
    report.insert("target_overhead_pct".into(), 5.into());
    println!("{}", serde_json::Value::Object(report));
}
