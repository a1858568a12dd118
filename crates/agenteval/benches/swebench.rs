//! SWE-bench grading benchmark: agenteval against the official harness (PyPI `swebench` 5.0.2,
//! from `$AGENTEVAL_TOOLS/swebench`, as `tests/run.sh` installs it) grading the same predictions
//! on the same machine. Run with `cargo bench -p agenteval --bench swebench` (needs a Docker
//! engine and the local base image from `docker/build-local.sh --base-only`).
//!
//! The tests' dataset (`tests/it/util/swebench.rs`: seven kinds of prediction, from gold to a
//! patch that prints fake passes) repeated to 28 instances (`AGENTEVAL_BENCH_SCALE=0.5`: 14), graded
//! at concurrency 2 and 8 by each; prints each wall time, agenteval's speed-up (target ≥ 3x at the
//! same concurrency) and whether the resolved verdicts agree (they must).

#[path = "../tests/it/util/mod.rs"]
mod util;

use std::time::Instant;

use serde_json::{Value, json};
use util::swebench::*;
use util::{Workspace, read_json};

fn copies() -> usize {
    let s: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    ((4.0 * s).round() as usize).max(1)
}

/// A workspace holding the dataset and predictions, and the instance ids.
fn dataset(image: &str, base: &str) -> (Workspace, Vec<String>) {
    let ws = Workspace::new();
    let (mut rows, mut preds, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for copy in 0..copies() {
        for (kind, patch) in predictions() {
            let id = format!("{kind}-{copy}");
            rows.push(row(&id, "Fix `add`: it subtracts.", image, base));
            preds.push(json!({"instance_id": id, "model_name_or_path": "test-model", "model_patch": patch}));
            ids.push(id);
        }
    }
    write_jsonl(&ws, "dataset.jsonl", &rows);
    write_jsonl(&ws, "preds.jsonl", &preds);
    (ws, ids)
}

fn agenteval(ws: &Workspace, workers: usize, ids: &[String]) -> (f64, Vec<String>) {
    let cfg = ws.write(
        "swebench.yaml",
        &format!(
            "name: swebench-bench\nbenchmark:\n  kind: swebench\n  dataset: dataset.jsonl\n  timeout_seconds: 300\n\
             agent:\n  kind: predictions\n  path: preds.jsonl\nenvironment:\n  kind: docker\n\
             backend:\n  max_concurrent_jobs: {workers}\n  concurrency: fixed\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n"
        ),
    );
    let started = Instant::now();
    let (v, code, out) = ws.submit(&cfg, &[]);
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(code, 0, "{v} {}", String::from_utf8_lossy(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let resolved = ids
        .iter()
        .filter(|id| read_json(&bundle.join(format!("tasks/{id}/result.json")))["passed"] == true)
        .cloned()
        .collect();
    (secs, resolved)
}

fn official(ws: &Workspace, workers: usize) -> (f64, Vec<String>) {
    let started = Instant::now();
    let report: Value = harness(ws, &ws.path().join("dataset.jsonl"), &ws.path().join("preds.jsonl"), workers);
    let secs = started.elapsed().as_secs_f64();
    let mut resolved: Vec<String> =
        report["resolved_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    resolved.sort();
    (secs, resolved)
}

fn main() {
    let (image, base) = instance_image();
    println!("SWE-bench grading: {} instances (7 kinds × {}), predictions, images cached", 7 * copies(), copies());
    println!(
        "{:>11} {:>14} {:>14} {:>8} {:>15}",
        "concurrency", "agenteval (s)", "harness (s)", "speed-up", "same verdicts"
    );
    for workers in [2, 8] {
        let (ws, ids) = dataset(&image, &base);
        let (ours, mut ours_resolved) = agenteval(&ws, workers, &ids);
        let (theirs, theirs_resolved) = official(&ws, workers);
        ours_resolved.sort();
        let same = ours_resolved == theirs_resolved;
        println!(
            "{workers:>11} {ours:>14.1} {theirs:>14.1} {:>7.1}x {:>15}",
            theirs / ours,
            if same { "yes" } else { "NO" }
        );
        assert!(same, "verdicts differ: agenteval {ours_resolved:?}, the harness {theirs_resolved:?}");
    }
}
