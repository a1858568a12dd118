//! `cargo bench -p agenteval-judge --bench html`: the HTML report of a 1,000-task run with a
//! 6-event trace per task: file size, time to render, and time until headless Chromium has
//! loaded it and built the page (when Chromium is installed).

use std::collections::BTreeMap;
use std::time::Instant;

use agenteval_core::format::{LineScore, ResultLine};
use agenteval_core::model::TerminatedBy;
use agenteval_judge::html::{HtmlReport, ROW_LIMIT, TaskRows, render};
use agenteval_judge::results::{RunResults, Traces};
use serde_json::json;

fn main() {
    const TASKS: usize = 1_000;
    let now = chrono::Utc::now();
    let mut meta = agenteval_testkit::fixtures::metadata(agenteval_core::RunId::new(), "bench", "jsonl", TASKS as u64);
    meta.agent = "command".into();
    let lines = (0..TASKS)
        .map(|i| ResultLine {
            task_id: format!("task-{i:04}").parse().unwrap(),
            attempt: 1,
            passed: i % 4 != 0,
            terminated_by: TerminatedBy::Completed,
            scores: [(
                "exact".to_string(),
                LineScore { score: f64::from(u8::from(i % 4 != 0)), passed: i % 4 != 0, error: false },
            )]
            .into(),
            cost_usd: 0.002,
            tokens: 300,
            wall_seconds: 1.2,
            steps: 6,
            changed_outside: 0,
            cost_unknown: false,
            tampered: 0,
        })
        .collect();
    let ids: Vec<String> = (0..TASKS).map(|i| format!("task-{i:04}")).collect();
    let run = RunResults::new(meta, "/runs/bench".into(), lines, None)
        .with_tasks(ids.iter().enumerate().map(|(i, id)| (id.as_str(), vec![format!("tag{}", i % 5)], "fp")));
    let mut events = BTreeMap::new();
    for i in 0..TASKS {
        let id = format!("task-{i:04}");
        let evs: Vec<serde_json::Value> = (0..6)
            .map(|s| json!({"step": s, "timestamp": now + chrono::Duration::milliseconds(s * 150), "kind": if s % 2 == 1 { "agent.tool_call" } else { "agent.observation" }, "payload": {"tool": "search", "text": "some words ".repeat(20)}, "cost_usd": 0.0003, "input_tokens": 40, "output_tokens": 10}))
            .collect();
        events.insert(id, serde_json::to_string(&evs).unwrap());
    }
    let traces = Traces { events, spans: BTreeMap::new(), omitted: 0, cut: BTreeMap::new(), samples: BTreeMap::new() };
    let started = Instant::now();
    let rows = TaskRows::of(&run, None, ROW_LIMIT);
    let page = render(&HtmlReport {
        meta: &run.meta,
        bundle_uri: &run.bundle_uri,
        rows: &rows,
        summary: None,
        traces: &traces,
        comparison: None,
        verdict: None,
        generator: "bench",
        frame: Default::default(),
    });
    let render_ms = started.elapsed().as_secs_f64() * 1e3;
    let path = std::env::temp_dir().join("agenteval-bench-report.html");
    std::fs::write(&path, &page).unwrap();
    println!(
        "html report, {TASKS} tasks x 6 events: {:.1} MiB, rendered in {render_ms:.1} ms",
        page.len() as f64 / (1 << 20) as f64
    );
    if std::path::Path::new("/usr/bin/chromium").exists() {
        let started = Instant::now();
        let out = std::process::Command::new("/usr/bin/chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(format!("file://{}#task=task-0000", path.display()))
            .output()
            .unwrap();
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(dom.contains("1000 of 1000 tasks") && dom.contains("Task task-0000"), "the page was built");
        println!(
            "headless Chromium loaded and built it (task table + one trace open) in {:.2} s",
            started.elapsed().as_secs_f64()
        );
    } else {
        println!("(chromium not installed: no load time)");
    }
}
