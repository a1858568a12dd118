//! Bundles of the older layout (a folder per task, before schema 1.1) next to the new one (a
//! pack per task): every reader takes both, and a new run leaves one file per task.

use std::path::{Path, PathBuf};

use crate::util::ui::UiServer;
use crate::util::*;

const OLD_A: &str = "01a23b6e-f5c9-739b-a425-0be39f45552e";
const OLD_B: &str = "01a23b6e-f5f1-7257-a2af-ab9cecdae774";

/// The fixture's two sealed bundles, copied under `runs/` and known to a fresh index.
fn old_bundles(ws: &Workspace) -> PathBuf {
    let runs = ws.runs();
    let fixture = repo().join("crates/agenteval/tests/fixtures/bundles-0.1");
    let out = std::process::Command::new("cp").arg("-r").arg(&fixture).arg(&runs).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ws.run(&["index", "rebuild", "--bundles", runs.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(OLD_A) && said.contains(OLD_B), "{said}");
    runs
}

#[test]
fn bundles_of_the_folder_layout_still_show_compare_validate_and_load_in_the_ui() {
    let ws = Workspace::new();
    let runs = old_bundles(&ws);
    let index = ws.index();
    let idx = index.to_str().unwrap();
    for run in [OLD_A, OLD_B] {
        let bundle = runs.join(run);
        assert!(bundle.join("tasks/toy-0000001/result.json").is_file(), "the fixture is of the folder layout");
        let out = ws.validate(bundle.to_str().unwrap());
        assert_eq!(out.status.code(), Some(0), "{run}: {}{}", text(&out.stdout), text(&out.stderr));
        assert!(text(&out.stdout).contains("6 task results"), "{}", text(&out.stdout));
    }
    let out = ws.run(&["show", OLD_A, "toy-0000001", "--index", idx]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("task     toy-0000001") && shown.contains("evaluator.score"), "{shown}");
    let out = ws.run(&["show", OLD_A, "toy-0000001", "--index", idx, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["task_id"], "toy-0000001");
    assert!(v["trace"].as_array().is_some_and(|t| !t.is_empty()), "{v}");

    let out = ws.run(&["compare", OLD_A, OLD_B, "--index", idx, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["comparison"]["paired_tasks"], 6, "{c}");
    let out = ws.run(&["report", OLD_A, "--index", idx, "--format", "html"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("toy-0000001"), "the report embeds the old bundle's tasks");

    let ui = UiServer::start(ws.cmd(&["ui", "--index", idx, "--port", "0", "--no-token"]));
    assert_eq!(ui.get(&format!("/runs/{OLD_A}")).status, 200);
    let task = ui.get(&format!("/api/runs/{OLD_A}/tasks/toy-0000001")).json();
    assert_eq!(task["result"]["task_id"], "toy-0000001", "{task}");
    assert!(task["log"].as_str().is_some_and(|l| l.contains("toy-0000001")), "{task}");
    let page = ui.get(&format!("/runs/{OLD_A}/tasks/toy-0000001"));
    assert_eq!(page.status, 200);
    let trace = ui.get(&format!("/runs/{OLD_A}/tasks/toy-0000001/trace.jsonl"));
    let on_disk = std::fs::read_to_string(runs.join(OLD_A).join("tasks/toy-0000001/trace.jsonl")).unwrap();
    assert_eq!(trace.body, on_disk);
}

/// A new run beside them: one pack per task, nothing left staged, and `compare` pairs it with an
/// old run task by task.
#[test]
fn a_new_run_keeps_one_file_per_task_and_compares_with_an_old_one() {
    let ws = Workspace::new();
    let runs = old_bundles(&ws);
    let cfg = ws.write("toy.yaml", &toy_yaml("new-layout", 6, 0, 3, 2, runs.to_str().unwrap()));
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    let mut tasks: Vec<String> = std::fs::read_dir(bundle.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    tasks.sort();
    assert_eq!(tasks, (0..6).map(|i| format!("toy-{i:07}.tar.gz")).collect::<Vec<_>>(), "one file per task");
    for job in std::fs::read_dir(bundle.join("jobs")).unwrap().flatten() {
        for attempt in std::fs::read_dir(job.path()).unwrap().flatten() {
            let staged = std::fs::read_dir(attempt.path().join("tasks")).map(|d| d.count()).unwrap_or(0);
            assert_eq!(staged, 0, "{:?}: staged files left", attempt.path());
        }
    }
    // Anyone can open a pack without agenteval.
    let listed =
        std::process::Command::new("tar").arg("tzf").arg(bundle.join("tasks/toy-0000000.tar.gz")).output().unwrap();
    assert_eq!(text(&listed.stdout), "result.json\ntrace.jsonl\nspans.jsonl\nworker.log\n");
    assert_eq!(ws.validate(bundle.to_str().unwrap()).status.code(), Some(0));
    let new = v["run_id"].as_str().unwrap();
    let idx = ws.index();
    let out = ws.run(&["compare", OLD_A, new, "--index", idx.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["comparison"]["paired_tasks"], 6, "the same tasks, paired across layouts: {c}");
}
