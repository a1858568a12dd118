//! `submit --matrix` and `compare --set`: one run per combination of models and prompts, driven
//! as one set (one fleet of job slots, one budget), and the set side by side.

use std::time::Duration;

use crate::util::*;
use agenteval_testkit::llm_mock::MockLlm;

const KEY: &str = "sk-test-THEREALKEYNEVERSHOWN0123456789";

/// Twenty cases the mock answers with its model and system prompt: sixteen want `beta` with the
/// kind prompt, four want `alpha` with the terse one.
fn matrix_workspace(base_url: &str, extra: &str) -> (Workspace, std::path::PathBuf) {
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    ws.write("terse.txt", "Be terse.\n");
    ws.write("kind.txt", "Be kind.\n");
    let lines: String = (0..20)
        .map(|i| {
            let expected = if i < 16 { "model=beta system=Be kind." } else { "model=alpha system=Be terse." };
            format!(
                "{}\n",
                serde_json::json!({"id": format!("q{i}"), "input": format!("SAY_MODEL q{i}"), "expected": expected})
            )
        })
        .collect();
    ws.write("cases.jsonl", &lines);
    let cfg = ws.write(
        "matrix.yaml",
        &format!(
            "name: matrix\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: openai:alpha\n  base_url: {base_url}\n  price: {{input_per_mtok: 1000, output_per_mtok: 1000}}\nevaluators:\n  - kind: contains\nbackend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n{extra}"
        ),
    );
    (ws, cfg)
}

const MATRIX: [&str; 4] =
    ["--matrix", "agent.model=openai:alpha,openai:beta,openai:gamma", "--matrix", "agent.system=@terse.txt,@kind.txt"];

#[test]
fn a_three_model_two_prompt_matrix_is_one_set_on_one_fleet_and_compare_names_the_best() {
    let latency = Duration::from_millis(50);
    let mock = MockLlm::start(latency);
    let (ws, cfg) = matrix_workspace(&mock.base_url(), "");
    let (v, code, out) = ws.submit(&cfg, &MATRIX);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6, "{v}");
    let set_id = v["set_id"].as_str().unwrap().to_string();
    let passed: Vec<(String, u64)> = runs
        .iter()
        .map(|r| (r["label"].as_str().unwrap().to_string(), r["summary"]["passed"].as_u64().unwrap()))
        .collect();
    assert_eq!(passed[0], ("agent.model=openai:alpha, agent.system=@terse.txt".to_string(), 4), "{passed:?}");
    assert_eq!(passed.iter().map(|p| p.1).collect::<Vec<_>>(), [4, 0, 0, 16, 0, 0], "{passed:?}");
    // Each run's bundle says which set it is in and what it set; the prompt went in as text.
    for (i, r) in runs.iter().enumerate() {
        let meta = read_json(&std::path::PathBuf::from(r["bundle"].as_str().unwrap()).join("metadata.json"));
        assert_eq!(meta["set"]["id"], set_id.as_str());
        assert_eq!(meta["set"]["position"], i as u64);
        assert_eq!(meta["set"]["size"], 6);
    }
    let calls = mock.received();
    assert_eq!(calls.len(), 120, "one call per task per combination");
    let systems: std::collections::BTreeSet<String> =
        calls.iter().filter_map(|c| c.body["messages"][0]["content"].as_str().map(str::to_string)).collect();
    assert!(systems.contains("Be kind.\n") && systems.contains("Be terse.\n"), "{systems:?}");
    // One fleet: never more model calls at once than the set's two job slots, and the slots
    // were used together.
    let mut times: Vec<std::time::Instant> = calls.iter().map(|c| c.at).collect();
    times.sort();
    let most = times.iter().map(|t| times.iter().filter(|u| **u >= *t && **u < *t + latency).count()).max().unwrap();
    assert!(most <= 2, "{most} calls at once on a fleet of 2 job slots");
    // The index knows the set; runs list shows the six runs.
    let listed = ws.run(&["runs", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let in_set = listed.as_array().unwrap().iter().filter(|r| r["set_id"] == set_id.as_str()).count();
    assert_eq!(in_set, 6, "{listed}");

    // The set side by side, against the first combination: the best is beta with the kind prompt.
    let out = ws.run(&["compare", "--set", &set_id[..13]]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("best: #4 agent.model=openai:beta, agent.system=@kind.txt — pass rate 80.0% ["), "{shown}");
    for line in shown.lines() {
        assert!(line.chars().count() <= 80 || line.starts_with("best:"), "wider than 80 columns: {line}");
    }
    let out = ws.run(&["compare", "--set", &set_id, "--format", "json"]);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["best"], 3);
    assert_eq!(s["base"], 0);
    let best = &s["entries"][3];
    assert!((best["pass_rate"]["mean"].as_f64().unwrap() - 0.8).abs() < 1e-9, "{best}");
    assert!(best["pass_rate"]["lo"].as_f64().unwrap() < 0.8 && best["pass_rate"]["hi"].as_f64().unwrap() <= 1.0);
    let diff = &best["vs_base"]["metrics"][0];
    assert_eq!(diff["metric"], "pass_rate");
    assert!(diff["improved"].as_bool().unwrap(), "{diff}");
    // Against another combination, by number.
    let out = ws.run(&["compare", "--set", &set_id, "--against", "4", "--format", "md"]);
    let md = text(&out.stdout);
    assert!(md.contains("| 4 | agent.model=openai:beta, agent.system=@kind.txt |") && md.contains("| base |"), "{md}");
    assert!(md.contains("| worse |"), "{md}");
    // The UI shows the set as a matrix: combinations across, figures and tasks down; the runs
    // page links each run to its set.
    let index = ws.index();
    let ui = crate::util::ui::UiServer::start(ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0"]));
    let page = ui.get(&format!("/sets/{set_id}")).body;
    assert!(page.contains("best: #4 agent.model=openai:beta, agent.system=@kind.txt"), "{page}");
    assert!(page.contains("<th>pass % [95% CI]</th>") && page.contains("80.0 ["), "{page}");
    let q0 = page.split("<td>q0</td>").nth(1).unwrap().split("</tr>").next().unwrap();
    let words: Vec<&str> = ["pass", "fail"].into_iter().filter(|w| q0.contains(&format!(">{w}</a>"))).collect();
    assert_eq!(words, ["pass", "fail"], "q0's row: {q0}");
    assert_eq!(q0.matches(">pass</a>").count(), 1, "only beta with the kind prompt passes q0: {q0}");
    // In a browser: no console error, and the page docs/ui.md shows.
    let shot = repo().join("docs/ui/set.png");
    let (dom, console) = crate::util::ui::browse(&ui.page(&format!("sets/{set_id}")), Some(&shot));
    assert!(console.is_empty(), "{console:?}");
    assert!(dom.contains("set-tasks"), "the task matrix is on the page");
    let against = ui.get(&format!("/sets/{set_id}?against=9"));
    assert_eq!(against.status, 400, "{}", against.body);
    let runs = ui.get("/").body;
    assert!(runs.contains(&format!("href=\"/sets/{set_id}\"")), "the runs page links the set");
    drop(ui);
    // Mistakes are one line each, exit 2.
    for (args, says) in [
        (vec!["compare", "--set", "ffffffff"], "no set `ffffffff`"),
        (vec!["compare", "--set", &set_id, "--against", "7"], "combinations 1 to 6"),
        (vec!["compare", "--set", &set_id, "--format", "html"], "no HTML report"),
    ] {
        let out = ws.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
    // No key anywhere it should not be.
    assert!(!text(&out.stderr).contains(KEY));
}

#[test]
fn a_set_shares_one_budget_and_bad_combinations_are_all_named_before_anything_runs() {
    // Slow enough calls that the budget is read (every 200 ms) before many more tasks finish.
    let mock = MockLlm::start(Duration::from_millis(300));
    // 15 tokens a call at $1000 per million: $0.015 a task. The set may spend $0.15 of the 120
    // tasks' $1.80.
    let (ws, cfg) = matrix_workspace(&mock.base_url(), "max_run_cost_usd: 0.15\n");
    let (v, code, out) = ws.submit(&cfg, &MATRIX);
    assert_eq!(code, 3, "a set stopped by its budget is incomplete: {v}\n{}", text(&out.stderr));
    let runs = v["runs"].as_array().unwrap();
    let spent: f64 = runs.iter().map(|r| r["summary"]["total_cost_usd"].as_f64().unwrap_or(0.0)).sum();
    // The budget is the set's, not each run's (six runs of $0.15 would be $0.90), and it is
    // kept at the wire: every worker of every run reads the set's one ledger before each call,
    // so only the calls in flight when it was reached (two jobs of one task: two calls) go over.
    assert!((0.15..=0.15 + 2.0 * 0.015 + 1e-9).contains(&spent), "the set spent ${spent}: {v}");
    assert!(runs.iter().any(|r| r["status"] == "budget_exceeded"), "{v}");
    assert_eq!(v["budget_usd"], 0.15, "{v}");
    let over = v["over_budget_usd"].as_f64().unwrap();
    assert!((over - (spent - 0.15).max(0.0)).abs() < 1e-9, "the set says by how much it went over: {v}");
    // The combinations took turns: each got about as far as the others (not the first one
    // done and the last one never started).
    let finished: Vec<u64> = runs.iter().map(|r| r["summary"]["tasks_finished"].as_u64().unwrap()).collect();
    let (least, most) = (finished.iter().min().unwrap(), finished.iter().max().unwrap());
    assert!(*least >= 1 && most - least <= 2, "tasks finished per combination: {finished:?}");

    // A value that breaks the config in two combinations: both named, nothing created.
    let before = std::fs::read_dir(ws.path().join("runs")).map(|d| d.count()).unwrap_or(0);
    let out = ws.run(&[
        "submit",
        "--config",
        cfg.to_str().unwrap(),
        "--matrix",
        "agent.max_turns=0,2,-1",
        "--matrix",
        "agent.system=@terse.txt",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("combination 1 (agent.max_turns=0") && err.contains("combination 3 (agent.max_turns=-1"),
        "{err}"
    );
    assert!(!err.contains("combination 2"), "{err}");
    assert_eq!(std::fs::read_dir(ws.path().join("runs")).map(|d| d.count()).unwrap_or(0), before);
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--matrix", "agent.system=@missing.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read"), "{}", text(&out.stderr));
}
