//! `cargo bench -p agenteval-judge --bench compare`: the time (and peak memory) of comparing two
//! runs of 10,000 and 100,000 tasks with 10,000 bootstrap resamples, on synthetic results with a
//! known regression (so the figures come with a correctness check).

use std::time::Instant;

use agenteval_core::format::{LineScore, ResultLine};
use agenteval_core::model::TerminatedBy;
use agenteval_judge::compare::{CompareOptions, compare};
use agenteval_judge::results::RunResults;

fn run(tasks: usize, worse: bool) -> RunResults {
    let meta = agenteval_testkit::fixtures::metadata(agenteval_core::RunId::new(), "bench", "toy", tasks as u64);
    let lines = (0..tasks)
        .map(|i| {
            // The candidate fails every 20th task the base passes: a 5-point drop.
            let passed = i % 3 != 0 && !(worse && i % 20 == 1);
            ResultLine {
                task_id: format!("task-{i:06}").parse().unwrap(),
                attempt: 1,
                passed,
                terminated_by: TerminatedBy::Completed,
                scores: [
                    ("exact".to_string(), LineScore { score: f64::from(u8::from(passed)), passed, error: false }),
                    ("judge".to_string(), LineScore { score: (i % 7) as f64 / 7.0, passed: true, error: false }),
                ]
                .into(),
                cost_usd: 0.001 * (1 + i % 5) as f64,
                tokens: 100 + (i % 50) as u64,
                wall_seconds: 0.5 + (i % 13) as f64 / 10.0,
                steps: 3 + (i % 4) as u32,
                changed_outside: 0,
                cost_unknown: false,
                tampered: 0,
            }
        })
        .collect();
    RunResults::new(meta, String::new(), lines, None)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .expect("VmHWM in /proc/self/status: a memory figure that cannot be read is no figure")
}

fn main() {
    for tasks in [10_000, 100_000, 1_000_000] {
        let (base, cand) = (run(tasks, false), run(tasks, true));
        let started = Instant::now();
        let c = compare(&base, &cand, CompareOptions { resamples: 10_000, seed: 7, ..Default::default() }).unwrap();
        let secs = started.elapsed().as_secs_f64();
        let pr = c.metric("pass_rate").unwrap();
        let d = pr.diff.unwrap();
        assert!(pr.regressed && d.lo < -0.05 + 0.02 && d.hi > -0.05 - 0.02, "the 5-point drop is found: {d:?}");
        assert_eq!(c.regressions.len(), (0..tasks).filter(|i| i % 3 != 0 && i % 20 == 1).count());
        println!(
            "compare {tasks:>7} tasks x {} metrics, 10,000 resamples: {secs:.2} s, peak RSS {:.0} MiB (pass rate {:+.2} pts [{:+.2}, {:+.2}])",
            c.metrics.len(),
            peak_rss_mib(),
            d.mean * 100.0,
            d.lo * 100.0,
            d.hi * 100.0
        );
    }
}
