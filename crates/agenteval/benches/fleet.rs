//! Fleet benchmark: the local backend's per-task overhead and the controller's memory, measured
//! by driving the real binary. Run with `cargo bench -p agenteval --bench fleet`.
//!
//! Prints, for zero-latency mock tasks on this machine:
//! - 10,000 tasks at 100 tasks per job: wall time and per-task overhead (target < 1 ms);
//! - 10,000 tasks at 1 task per job (one process each): per-task overhead (target < 10 ms);
//! - 3,000 tasks at 1 task per job, 32 in flight: the same with full dispatch batches (each
//!   submission starts a process and writes the index);
//! - 100,000 tasks: the controller's peak RSS (target < 150 MB).
//!
//! `AGENTEVAL_BENCH_SCALE=0.1` shrinks every scenario for a quick look.

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::path::Path;
use std::time::Duration;

use util::{children_cpu, submit_sampled, toy_yaml};

struct Outcome {
    tasks: u64,
    wall: Duration,
    cpu: Duration,
    peak_rss_kb: u64,
}

fn scenario(dir: &Path, name: &str, tasks: u64, per_job: u64, concurrency: u64) -> Outcome {
    let cfg = dir.join(format!("{name}.yaml"));
    std::fs::write(&cfg, toy_yaml(&format!("bench-{name}"), tasks, 0, per_job, concurrency, &format!("runs-{name}")))
        .unwrap();
    let cpu0 = children_cpu();
    // VmHWM is the controller's own high-water mark; sampling it until exit catches the peak
    // (the last sample is at most 20 ms before the end).
    let (wall, peak, v) = submit_sampled(&cfg, |pid| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
            .unwrap_or(0)
    });
    // A sample can miss only at the very end (the process just exited); never seeing one means
    // the reader is broken, and a 0 printed as a figure would be a lie.
    assert!(peak > 0, "{name}: no memory sample of the controller could be read");
    assert_eq!(v["status"], "complete", "{name}: {v}");
    assert_eq!(v["summary"]["tasks_finished"].as_u64(), Some(tasks), "{name}");
    Outcome { tasks, wall, cpu: children_cpu() - cpu0, peak_rss_kb: peak }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing we use.
    let scale: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let n = |x: u64| ((x as f64 * scale) as u64).max(10);
    // Bundles on tmpfs when there is one: on this VM's disk, file-heavy runs slow down by
    // multiples after large deletes (online discard), which drowns what is measured here.
    let shm = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("agenteval-bench-");
    let dir = if shm.is_dir() { builder.tempdir_in(shm) } else { builder.tempdir() }.unwrap();
    println!(
        "agenteval fleet benchmark ({} cores, scale {scale}, bundles in {})",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
        dir.path().display()
    );

    let a = scenario(dir.path(), "sharded", n(10_000), 100, 2);
    let b = scenario(dir.path(), "per-task", n(10_000), 1, 4);
    let w = scenario(dir.path(), "wide", n(3_000), 1, 32);
    let c = scenario(dir.path(), "large", n(100_000), 1_000, 2);

    let ms = |d: Duration, t: u64| d.as_secs_f64() * 1000.0 / t as f64;
    println!(
        "{:<44} {:>10} {:>14} {:>14} {:>12}",
        "scenario", "wall (s)", "wall/task (ms)", "cpu/task (ms)", "peak RSS"
    );
    for (label, o) in [
        (format!("{} tasks, 100 per job, 2 in flight", a.tasks), &a),
        (format!("{} tasks, 1 per job (process each), 4 in flight", b.tasks), &b),
        (format!("{} tasks, 1 per job, 32 in flight", w.tasks), &w),
        (format!("{} tasks, 1000 per job, 2 in flight", c.tasks), &c),
    ] {
        println!(
            "{label:<44} {:>10.2} {:>14.3} {:>14.3} {:>9.1} MB",
            o.wall.as_secs_f64(),
            ms(o.wall, o.tasks),
            ms(o.cpu, o.tasks),
            o.peak_rss_kb as f64 / 1024.0
        );
    }
    println!(
        "{}",
        serde_json::json!({
            "sharded_ms_per_task": ms(a.wall, a.tasks),
            "per_process_ms_per_task": ms(b.wall, b.tasks),
            "wide_ms_per_task": ms(w.wall, w.tasks),
            "controller_peak_rss_mb_large": c.peak_rss_kb as f64 / 1024.0,
            "targets": {"sharded_ms_per_task": 1.0, "per_process_ms_per_task": 10.0, "controller_peak_rss_mb": 150.0},
        })
    );
}
