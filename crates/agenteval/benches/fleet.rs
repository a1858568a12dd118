//! Fleet benchmark: the local backend's per-task overhead and the controller's memory, measured
//! by driving the real binary. Run with `cargo bench -p agenteval --bench fleet`.
//!
//! Prints, for zero-latency mock tasks on this machine:
//! - 10,000 tasks at 100 tasks per job: wall time and per-task overhead (target <= 0.25 ms);
//! - 10,000 tasks at 1 task per job (one process each): per-task overhead (target <= 2 ms),
//!   with workers forked by the fork server (the default) and, for comparison, each exec'd;
//! - 3,000 tasks at 1 task per job, 32 in flight: the same with full dispatch batches (each
//!   submission starts a process and writes the index);
//! - 100,000 tasks: the controller's peak RSS (target <= 100 MB).
//!
//! `AGENTEVAL_BENCH_SCALE=0.1` shrinks every scenario for a quick look.
//!
//! `AGENTEVAL_BENCH_ONLY=scale` prints the scale table instead: runs of 1,000, 10,000 and
//! 100,000 zero-latency mock tasks (`AGENTEVAL_BENCH_SIZES=1000,10000,100000,1000000` to choose;
//! a million needs the disk for its bundle), 1,000 per job, 2 in flight, each with its wall time,
//! ms per task, the controller's and the whole fleet's peak memory, the bundle's bytes per task
//! on disk, the seal (from the last task's result to the run's end) and `validate-bundle`'s
//! time. A figure that cannot be measured fails the benchmark: none is printed as 0.
//!
//! `AGENTEVAL_BENCH_ONLY=million` runs what a million tasks must show (`AGENTEVAL_BENCH_TASKS`
//! to choose another size): a run, `validate-bundle`, a second run interrupted half-way and
//! resumed (checked to re-run no finished task), `report` and `compare` of the two, each with
//! its time and peak memory.
//!
//! `AGENTEVAL_BENCH_ONLY=inspect` runs agenteval and Inspect AI 0.3 (`benches/inspect_mock.py`,
//! installed under `target/` on first use, or `AGENTEVAL_INSPECT_PYTHON`) on the same 10,000
//! zero-latency mock tasks, one after the other, and prints both times.

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::path::Path;
use std::time::Duration;

use util::{machine_busy, submit_sampled, submit_sampled_with, toy_yaml};

struct Outcome {
    tasks: u64,
    wall: Duration,
    cpu: Duration,
    peak_rss_kb: u64,
}

fn scenario(dir: &Path, name: &str, tasks: u64, per_job: u64, concurrency: u64) -> Outcome {
    scenario_with(dir, name, tasks, per_job, concurrency, &[])
}

/// A scenario whose controller has `env` added (`AGENTEVAL_WORKER_START=exec`, say).
fn scenario_with(dir: &Path, name: &str, tasks: u64, per_job: u64, concurrency: u64, env: &[(&str, &str)]) -> Outcome {
    let cfg = dir.join(format!("{name}.yaml"));
    std::fs::write(&cfg, toy_yaml(&format!("bench-{name}"), tasks, 0, per_job, concurrency, &format!("runs-{name}")))
        .unwrap();
    let cpu0 = machine_busy();
    // VmHWM is the controller's own high-water mark; sampling it until exit catches the peak
    // (the last sample is at most 20 ms before the end).
    let (wall, peak, v) = submit_sampled_with(&cfg, env, |pid| {
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
    Outcome { tasks, wall, cpu: machine_busy() - cpu0, peak_rss_kb: peak }
}

/// Resident memory of a process and all its descendants (kB).
fn tree_rss_kb(pid: u32) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        total += std::fs::read_to_string(format!("/proc/{p}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
            })
            .unwrap_or(0);
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")) {
            todo.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

/// Bytes a folder takes on disk (allocated blocks), and the newest task result under it (a
/// task's pack, or a task folder's `result.json`).
fn disk_usage(dir: &Path) -> (u64, Option<std::time::SystemTime>) {
    use std::os::unix::fs::MetadataExt as _;
    let (mut bytes, mut newest) = (0u64, None::<std::time::SystemTime>);
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            bytes += m.blocks() * 512;
            if m.is_dir() {
                todo.push(e.path());
            } else if e.file_name() == "result.json" || e.file_name().to_string_lossy().ends_with(".tar.gz") {
                let t = m.modified().unwrap();
                newest = Some(newest.map_or(t, |n| n.max(t)));
            }
        }
    }
    (bytes, newest)
}

/// One row of the scale table.
fn scale_row(dir: &Path, tasks: u64) {
    let name = format!("scale-{tasks}");
    let cfg = dir.join(format!("{name}.yaml"));
    let runs = dir.join(format!("runs-{name}"));
    std::fs::write(&cfg, toy_yaml(&format!("bench-{name}"), tasks, 0, 1_000, 2, runs.to_str().unwrap())).unwrap();
    let mut controller_kb = 0u64;
    let (wall, fleet_kb, v) = submit_sampled(&cfg, |pid| {
        let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
            .unwrap_or(0);
        controller_kb = controller_kb.max(hwm);
        tree_rss_kb(pid)
    });
    let ended = std::time::SystemTime::now();
    assert_eq!(v["status"], "complete", "{name}: {v}");
    assert_eq!(v["summary"]["tasks_finished"].as_u64(), Some(tasks), "{name}");
    let bundle = Path::new(v["bundle"].as_str().expect("the run's bundle"));
    let (bytes, last_result) = disk_usage(bundle);
    let seal = ended.duration_since(last_result.expect("task results on disk")).unwrap_or_default();
    let started = std::time::Instant::now();
    let out =
        std::process::Command::new(util::BIN).args(["validate-bundle", bundle.to_str().unwrap()]).output().unwrap();
    let validate = started.elapsed();
    assert!(out.status.success(), "{name}: validate-bundle: {}", String::from_utf8_lossy(&out.stdout));
    // Every figure measured, or no row at all.
    assert!(controller_kb > 0 && fleet_kb > 0 && bytes > 0, "{name}: a figure could not be measured");
    println!(
        "{tasks:>9} {:>9.2} {:>11.3} {:>12.1} {:>10.1} {:>12.1} {:>9.2} {:>10.2}",
        wall.as_secs_f64(),
        wall.as_secs_f64() * 1000.0 / tasks as f64,
        controller_kb as f64 / 1024.0,
        fleet_kb as f64 / 1024.0,
        bytes as f64 / tasks as f64 / 1024.0,
        seal.as_secs_f64(),
        validate.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&runs);
}

/// The controller's (or any one process's) high-water mark of resident memory, in kB.
fn hwm_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .unwrap_or(0)
}

/// Runs the binary with `args`, sampling its peak memory every 20 ms; with `interrupt_after`,
/// sends it SIGINT (Ctrl-C) then. Returns the wall time, the peak (MB), its exit code and what
/// it printed.
fn measured(args: &[&str], interrupt_after: Option<Duration>) -> (Duration, f64, i32, String) {
    use std::io::Read as _;
    let started = std::time::Instant::now();
    let mut child = std::process::Command::new(util::BIN)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    // Read as it comes: a full pipe would stall the child.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        out
    });
    let (mut peak, mut interrupted) = (0u64, false);
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(hwm_kb(child.id()));
        if let Some(after) = interrupt_after
            && !interrupted
            && started.elapsed() >= after
        {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
            interrupted = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    assert!(peak > 0, "{args:?}: no memory sample could be read");
    (started.elapsed(), peak as f64 / 1024.0, code, reader.join().unwrap())
}

/// `AGENTEVAL_BENCH_ONLY=million`: what issue 29 asks to be shown at a million tasks (or
/// `AGENTEVAL_BENCH_TASKS`): run A completes and `validate-bundle` passes; run B is interrupted
/// (SIGINT) half-way through A's time and resumed, and the resume re-runs none of the tasks
/// that had finished (each keeps attempt 1 in `results.jsonl`); `report` of A and `compare A B`
/// finish. Each with its time and peak memory. Needs ~11 GB of disk for the two bundles.
fn million() {
    let tasks: u64 = std::env::var("AGENTEVAL_BENCH_TASKS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::Builder::new().prefix("agenteval-bench-million-").tempdir().unwrap();
    let runs = dir.path().join("runs");
    println!(
        "agenteval at {tasks} tasks ({} cores; bundles in {}; 1,000 tasks per job, 2 in flight)",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
        runs.display()
    );
    println!("{:<44} {:>9} {:>9}  what", "step", "wall s", "peak MB");
    let row = |step: &str, wall: Duration, peak: f64, what: &str| {
        println!("{step:<44} {:>9.2} {peak:>9.1}  {what}", wall.as_secs_f64());
    };
    let config = |name: &str| {
        let cfg = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&cfg, toy_yaml(name, tasks, 0, 1_000, 2, runs.to_str().unwrap())).unwrap();
        cfg.to_str().unwrap().to_string()
    };
    let json = |out: &str| -> serde_json::Value { serde_json::from_str(out).expect("--json output") };
    let (cfg_a, cfg_b) = (config("million-a"), config("million-b"));
    let index = runs.join("index.sqlite");
    let index = index.to_str().unwrap();

    let (wall_a, peak, code, out) = measured(&["submit", "--json", "--config", &cfg_a], None);
    let a = json(&out);
    assert_eq!((code, a["summary"]["tasks_finished"].as_u64()), (0, Some(tasks)), "run A: {a}");
    let run_a = a["run_id"].as_str().unwrap().to_string();
    row("submit A", wall_a, peak, "complete");
    let (wall, peak, code, out) = measured(&["validate-bundle", a["bundle"].as_str().unwrap()], None);
    assert_eq!(code, 0, "validate-bundle A: {out}");
    row("validate-bundle A", wall, peak, "valid");

    let (wall, peak, code, out) = measured(&["submit", "--json", "--config", &cfg_b], Some(wall_a / 2));
    let b = json(&out);
    let finished = b["summary"]["tasks_finished"].as_u64().expect("the interrupted run's summary");
    assert_eq!((code, b["status"].as_str()), (3, Some("interrupted")), "run B: {b}");
    assert!(finished > 0 && finished < tasks, "run B was interrupted part-way: {finished} of {tasks} finished");
    let run_b = b["run_id"].as_str().unwrap().to_string();
    row("submit B, Ctrl-C half-way", wall, peak, &format!("{finished} tasks finished"));
    let (wall, peak, code, out) = measured(&["resume", &run_b, "--json", "--index", index], None);
    let r = json(&out);
    assert_eq!((code, r["summary"]["tasks_finished"].as_u64()), (0, Some(tasks)), "resume B: {r}");
    // Tasks that finished before the interruption keep their first attempt; every task run by
    // the resume has a later one.
    let results =
        std::fs::File::open(std::path::Path::new(r["bundle"].as_str().unwrap()).join("results.jsonl")).unwrap();
    let first_attempt = std::io::BufRead::lines(std::io::BufReader::new(results))
        .filter(|l| serde_json::from_str::<serde_json::Value>(l.as_ref().unwrap()).unwrap()["attempt"] == 1)
        .count() as u64;
    assert_eq!(first_attempt, finished, "the resume re-ran {} finished tasks", finished - first_attempt.min(finished));
    row("resume B", wall, peak, &format!("{} tasks run, none of the {finished} again", tasks - finished));

    let html = dir.path().join("a.html").to_string_lossy().into_owned();
    let (wall, peak, code, out) =
        measured(&["report", &run_a, "--index", index, "--format", "html", "--output", &html], None);
    assert_eq!(code, 0, "report A: {out}");
    row("report A --format html", wall, peak, "written");
    let (wall, peak, code, out) = measured(&["compare", &run_a, &run_b, "--format", "json", "--index", index], None);
    let c = json(&out);
    assert!(code == 0 || code == 1, "compare A B: {out}");
    row("compare A B", wall, peak, &format!("{} paired tasks", c["comparison"]["paired_tasks"]));
}

/// A Python with Inspect AI 0.3: `AGENTEVAL_INSPECT_PYTHON`, else a virtual environment under
/// `target/` made (and installed from PyPI) the first time.
fn inspect_python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("AGENTEVAL_INSPECT_PYTHON") {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/inspect-venv");
    let python = venv.join("bin/python");
    if !python.is_file() {
        let ok = std::process::Command::new("python3").arg("-m").arg("venv").arg(&venv).status().unwrap().success()
            && std::process::Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "inspect_ai==0.3.*"])
                .status()
                .unwrap()
                .success();
        assert!(ok, "could not install Inspect AI into {} (set AGENTEVAL_INSPECT_PYTHON)", venv.display());
    }
    python
}

/// `AGENTEVAL_BENCH_ONLY=inspect`: agenteval and Inspect AI on the same 10,000 zero-latency
/// mock tasks (`AGENTEVAL_BENCH_TASKS`), one after the other in this run: each one's wall time
/// and the ratio.
fn against_inspect() {
    let tasks: u64 = std::env::var("AGENTEVAL_BENCH_TASKS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    // Both write to tmpfs when there is one, as the other scenarios do.
    let dir = util::bench_dir("agenteval-bench-inspect-");
    let python = inspect_python();
    println!(
        "agenteval and Inspect AI on {tasks} zero-latency mock tasks ({} cores, files in {})",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
        dir.path().display()
    );
    let ours = scenario(dir.path(), "inspect-sharded", tasks, 100, 2);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/inspect_mock.py");
    let started = std::time::Instant::now();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(tasks.to_string())
        .arg(dir.path().join("inspect-logs"))
        .output()
        .unwrap();
    let theirs = started.elapsed();
    let said = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = said.split_whitespace().collect();
    assert!(
        out.status.success() && fields.get(1) == Some(&"success") && fields.get(2) == Some(&tasks.to_string().as_str()),
        "Inspect AI did not finish its {tasks} samples: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let eval_s: f64 = fields[0].parse().unwrap();
    let ms = |s: f64| s * 1000.0 / tasks as f64;
    println!("{:<34} {:>9} {:>9}", "", "wall s", "ms/task");
    println!(
        "{:<34} {:>9.2} {:>9.3}",
        "agenteval (100 per job, 2 in flight)",
        ours.wall.as_secs_f64(),
        ms(ours.wall.as_secs_f64())
    );
    println!("{:<34} {:>9.2} {:>9.3}", "Inspect AI 0.3, the process", theirs.as_secs_f64(), ms(theirs.as_secs_f64()));
    println!("{:<34} {:>9.2} {:>9.3}", "Inspect AI 0.3, eval() alone", eval_s, ms(eval_s));
    println!(
        "agenteval is {:.1}x faster than the Inspect process ({:.1}x its eval() alone)",
        theirs.as_secs_f64() / ours.wall.as_secs_f64(),
        eval_s / ours.wall.as_secs_f64()
    );
}

fn main() {
    if std::env::var("AGENTEVAL_BENCH_ONLY").as_deref() == Ok("inspect") {
        against_inspect();
        return;
    }
    if std::env::var("AGENTEVAL_BENCH_ONLY").as_deref() == Ok("million") {
        million();
        return;
    }
    if std::env::var("AGENTEVAL_BENCH_ONLY").as_deref() == Ok("scale") {
        let sizes: Vec<u64> = std::env::var("AGENTEVAL_BENCH_SIZES")
            .unwrap_or_else(|_| "1000,10000,100000".into())
            .split(',')
            .map(|s| s.trim().parse().expect("AGENTEVAL_BENCH_SIZES: numbers separated by commas"))
            .collect();
        let dir = tempfile::Builder::new().prefix("agenteval-bench-scale-").tempdir().unwrap();
        println!(
            "agenteval scale table ({} cores; bundles in {}; 1,000 tasks per job, 2 in flight)",
            std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
            dir.path().display()
        );
        println!(
            "{:>9} {:>9} {:>11} {:>12} {:>10} {:>12} {:>9} {:>10}",
            "tasks", "wall s", "ms/task", "ctrl peak MB", "fleet MB", "KB/task disk", "seal s", "validate s"
        );
        for t in sizes {
            scale_row(dir.path(), t);
        }
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing we use.
    let scale: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let n = |x: u64| ((x as f64 * scale) as u64).max(10);
    let dir = util::bench_dir("agenteval-bench-");
    println!(
        "agenteval fleet benchmark ({} cores, scale {scale}, bundles in {})",
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
        dir.path().display()
    );

    let a = scenario(dir.path(), "sharded", n(10_000), 100, 2);
    let b = scenario(dir.path(), "per-task", n(10_000), 1, 4);
    let e = scenario_with(dir.path(), "per-task-exec", n(10_000), 1, 4, &[("AGENTEVAL_WORKER_START", "exec")]);
    let w = scenario(dir.path(), "wide", n(3_000), 1, 32);
    let c = scenario(dir.path(), "large", n(100_000), 1_000, 2);

    let ms = |d: Duration, t: u64| d.as_secs_f64() * 1000.0 / t as f64;
    println!(
        "{:<44} {:>10} {:>14} {:>14} {:>12}",
        "scenario", "wall (s)", "wall/task (ms)", "busy/task (ms)", "peak RSS"
    );
    for (label, o) in [
        (format!("{} tasks, 100 per job, 2 in flight", a.tasks), &a),
        (format!("{} tasks, 1 per job (process each), 4 in flight", b.tasks), &b),
        (format!("{} tasks, the same, each worker exec'd", e.tasks), &e),
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
            "per_process_by_exec_ms_per_task": ms(e.wall, e.tasks),
            "wide_ms_per_task": ms(w.wall, w.tasks),
            "controller_peak_rss_mb_large": c.peak_rss_kb as f64 / 1024.0,
            "targets": {"sharded_ms_per_task": 0.25, "per_process_ms_per_task": 2.0, "controller_peak_rss_mb": 100.0},
        })
    );
}
