//! SWE-bench end to end: a SWE-bench 5.x dataset built here (a small Python repository, its
//! instance image built from the local base, seven instances) graded from predictions by
//! agenteval and by the official harness (PyPI `swebench` 5.0.2, installed by `tests/run.sh`)
//! with the same verdict for every instance, and exported in the harness's shapes; the same
//! dataset fixed by the `llm` agent and graded in a fresh container.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::swebench::*;
use crate::util::*;

#[test]
fn predictions_are_graded_as_the_official_harness_grades_them_and_export_in_its_shapes() {
    let (image, base) = instance_image();
    let ws = Workspace::new();
    let preds = predictions();
    let rows: Vec<Value> = preds.iter().map(|(id, _)| row(id, "Fix `add`: it subtracts.", &image, &base)).collect();
    let dataset = write_jsonl(&ws, "dataset.jsonl", &rows);
    let pred_rows: Vec<Value> = preds
        .iter()
        .map(|(id, p)| json!({"instance_id": id, "model_name_or_path": "test-model", "model_patch": p}))
        .collect();
    let pred_file = write_jsonl(&ws, "preds.jsonl", &pred_rows);
    let cfg = ws.write(
        "swebench.yaml",
        "name: swebench-preds\nbenchmark:\n  kind: swebench\n  dataset: dataset.jsonl\n  timeout_seconds: 300\n  grade_without_tampering: true\n\
         agent:\n  kind: predictions\n  path: preds.jsonl\nenvironment:\n  kind: docker\n\
         backend:\n  max_concurrent_jobs: 4\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    assert_eq!(code, 0, "a run that completes exits 0 whatever its pass rate: {v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let bundle = ws.runs().join(&run);
    let ours: std::collections::BTreeMap<String, bool> = preds
        .iter()
        .map(|(id, _)| (id.to_string(), read_json(&bundle.join(format!("tasks/{id}/result.json")))["passed"] == true))
        .collect();
    let expected: std::collections::BTreeMap<String, bool> =
        preds.iter().map(|(id, _)| (id.to_string(), matches!(*id, "calc-gold" | "calc-fake-output"))).collect();
    assert_eq!(ours, expected, "agenteval's verdicts");
    // The report fields and the test log are in each graded task's pack.
    let gold_report: Value = serde_json::from_slice(
        &read_bundle_file(bundle.join("tasks/calc-gold/artifacts/swebench/report.json")).unwrap(),
    )
    .unwrap();
    let g = &gold_report["calc-gold"];
    assert_eq!(
        (g["patch_exists"].clone(), g["patch_successfully_applied"].clone(), g["resolved"].clone()),
        (json!(true), json!(true), json!(true)),
        "{gold_report}"
    );
    assert_eq!(g["tests_status"]["FAIL_TO_PASS"]["success"], json!([F2P]), "{gold_report}");
    let log = read_text(bundle.join("tasks/calc-gold/artifacts/swebench/test_output.txt")).unwrap();
    assert!(log.contains("FRESH-CONTAINER") && log.contains(&format!("{F2P} ... ok")), "{log}");
    let p2p = read_json(&bundle.join("tasks/calc-breaks-p2p/result.json"));
    assert!(p2p["scores"][0]["reason"].as_str().unwrap().contains("PASS_TO_PASS 0/1"), "{p2p}");
    let no_apply = read_json(&bundle.join("tasks/calc-no-apply/result.json"));
    assert!(no_apply["scores"][0]["reason"].as_str().unwrap().contains("does not apply"), "{no_apply}");
    // The harness is fooled by output the patch printed; agenteval agrees and says so.
    let fake = read_json(&bundle.join("tasks/calc-fake-output/result.json"));
    assert!(fake["suspect"][0].as_str().is_some_and(|s| s.contains("exited early")), "{fake}");
    assert!(read_json(&bundle.join("tasks/calc-gold/result.json"))["suspect"].is_null());
    // A patch to the test machinery is named by the tamper audit: a conftest.py, the instance's
    // own test file; graded again without them (`grade_without_tampering`), nothing is left.
    for (id, file, why) in [
        ("calc-conftest", "conftest.py", "pytest loads"),
        ("calc-edits-tests", "tests/test_calc.py", "test file of the task's own tests"),
    ] {
        let r = read_json(&bundle.join(format!("tasks/{id}/result.json")));
        assert_eq!(r["tampered"][0]["path"], format!("/testbed/{file}"), "{r}");
        assert!(r["tampered"][0]["why"].as_str().unwrap().contains(why), "{r}");
        assert_eq!(r["without_tampering"]["passed"], false, "{r}");
        assert_eq!(r["without_tampering"]["removed"], json!([file]), "{r}");
        assert!(r["suspect"].is_null(), "the audit's finding is not a doubt of the log: {r}");
    }
    assert!(read_json(&bundle.join("tasks/calc-gold/result.json"))["tampered"].is_null());
    let summary = read_json(&bundle.join("summary.json"));
    assert_eq!((summary["suspect"].clone(), summary["tampered"].clone()), (json!(1), json!(2)), "{summary}");
    let shown = ws.run(&["show", &run, "calc-conftest"]);
    let shown = text(&shown.stdout);
    assert!(
        shown.contains("tampered /testbed/conftest.py (a conftest.py")
            && shown.contains("without  conftest.py taken out"),
        "{shown}"
    );
    let runs_show = ws.run(&["runs", "show", &run]);
    let listed = text(&runs_show.stdout);
    assert!(listed.contains("suspect    1 task(s)") && listed.contains("tampered   2 task(s)"), "{listed}");
    let show = ws.run(&["show", &run, "calc-fake-output"]);
    assert!(text(&show.stdout).contains("suspect  the output claims passes"), "{}", text(&show.stdout));

    // The official harness, on the same files: the same resolved verdict for every instance.
    let official = harness(&ws, &dataset, &pred_file, 4);
    let resolved_there: Vec<&str> =
        official["resolved_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let resolved_here: Vec<&str> = ours.iter().filter(|(_, r)| **r).map(|(k, _)| k.as_str()).collect();
    assert_eq!(resolved_here, resolved_there, "the harness's report: {official}");

    // The export is the harness's report, list for list.
    let exported = ws.run(&["export", &run, "--to", "swebench", "--out", "exported", "--json"]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let e: Value = serde_json::from_slice(&exported.stdout).unwrap();
    let mine = read_json(&ws.path().join(e["report"].as_str().unwrap()));
    for k in [
        "resolved_ids",
        "unresolved_ids",
        "error_ids",
        "empty_patch_ids",
        "completed_ids",
        "submitted_ids",
        "total_instances",
    ] {
        assert_eq!(mine[k], official[k], "{k}: ours {mine}\nthe harness's {official}");
    }
    let lines = read_text(ws.path().join("exported/predictions.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), preds.len(), "{lines}");
    let gold_dir = ws.path().join(format!("exported/logs/run_evaluation/{run}/test-model/calc-gold"));
    assert_eq!(read_json(&gold_dir.join("report.json"))["calc-gold"]["resolved"], true);
}

#[test]
fn the_llm_agent_fixes_an_instance_and_it_is_graded_in_a_fresh_container() {
    let (image, base) = instance_image();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", "OPENAI_API_KEY=sk-test-not-a-real-key-000000000000\n");
    let rows = [
        row("calc-agent", "`add` subtracts; make it add. FIX_CALC", &image, &base),
        row("calc-idle", "`add` subtracts; make it add.", &image, &base),
    ];
    write_jsonl(&ws, "dataset.jsonl", &rows);
    let cfg = ws.write(
        "swebench.yaml",
        &format!(
            "name: swebench-agent\nbenchmark:\n  kind: swebench\n  dataset: dataset.jsonl\n\
             agent:\n  kind: llm\n  model: openai:gpt-4o-mini\n  base_url: {}\n  tools: []\n  limits:\n    max_wall_seconds: 300\n\
             environment:\n  kind: docker\nbackend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\n",
            mock.base_url()
        ),
    );
    // The agent leaves `/tmp/agent-was-here`; the eval script says whether its container has it.
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    assert_eq!(code, 0, "{v}");
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let fixed = read_json(&bundle.join("tasks/calc-agent/result.json"));
    assert_eq!(fixed["passed"], true, "{fixed}");
    let pred: Value = serde_json::from_slice(
        &read_bundle_file(bundle.join("tasks/calc-agent/artifacts/swebench/prediction.json")).unwrap(),
    )
    .unwrap();
    assert!(pred["model_patch"].as_str().unwrap().contains("+    return a + b"), "{pred}");
    let log = read_text(bundle.join("tasks/calc-agent/artifacts/swebench/test_output.txt")).unwrap();
    assert!(log.contains("FRESH-CONTAINER") && !log.contains("AGENT-CONTAINER"), "{log}");
    let idle = read_json(&bundle.join("tasks/calc-idle/result.json"));
    assert_eq!(idle["passed"], false, "{idle}");
    assert!(idle["scores"][0]["reason"].as_str().unwrap().contains("empty patch"), "{idle}");
}

#[test]
fn a_4x_dataset_and_predictions_for_unknown_instances_are_refused_naming_what_is_wrong() {
    let ws = Workspace::new();
    let mut old = row("calc-old", "x", "img", "abc");
    for k in ["image", "eval_script", "log_parser", "eval_type"] {
        old.as_object_mut().unwrap().remove(k);
    }
    write_jsonl(&ws, "old.jsonl", &[old]);
    let cfg = ws.write(
        "old.yaml",
        "name: old\nbenchmark:\n  kind: swebench\n  dataset: old.jsonl\nagent:\n  kind: nop\nenvironment:\n  kind: docker\nstorage:\n  bundle_root: runs\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("line 1 (`calc-old`)") && err.contains("`image`") && err.contains("4.x"), "{err}");
    write_jsonl(&ws, "new.jsonl", &[row("calc-1", "x", "img", "abc")]);
    write_jsonl(&ws, "preds.jsonl", &[json!({"instance_id": "calc-9", "model_name_or_path": "m", "model_patch": "x"})]);
    let cfg = ws.write(
        "preds.yaml",
        "name: p\nbenchmark:\n  kind: swebench\n  dataset: new.jsonl\nagent:\n  kind: predictions\n  path: preds.jsonl\nenvironment:\n  kind: docker\nstorage:\n  bundle_root: runs\n",
    );
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("calc-9") && said.contains("does not have"), "{said}");
}

/// The reference fixes first, as for any benchmark: the `oracle` applies each row's `patch` in
/// its container, and every instance is resolved.
#[test]
fn the_oracle_applies_each_reference_fix_and_every_instance_is_resolved() {
    let (image, base) = instance_image();
    let ws = Workspace::new();
    let rows = [row("calc-a", "x", &image, &base), row("calc-b", "y", &image, &base)];
    write_jsonl(&ws, "dataset.jsonl", &rows);
    let cfg = ws.write(
        "oracle.yaml",
        "name: swebench-oracle\nbenchmark:\n  kind: swebench\n  dataset: dataset.jsonl\nagent:\n  kind: oracle\nenvironment:\n  kind: docker\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", text(&out.stderr));
    assert_eq!(v["summary"]["passed"], 2, "{v}");
}

/// The fixture audited: no exploit of the battery resolves an instance, and those that touch
/// the test machinery (a conftest.py, the tests) are caught by the tamper audit.
#[test]
fn the_fixture_is_audited_and_no_exploit_resolves_an_instance() {
    let (image, base) = instance_image();
    let ws = Workspace::new();
    write_jsonl(&ws, "dataset.jsonl", &[row("calc-a", "x", &image, &base)]);
    let cfg = ws.write(
        "audit.yaml",
        "name: swebench-audit\nbenchmark:\n  kind: swebench\n  dataset: dataset.jsonl\nagent:\n  kind: oracle\nenvironment:\n  kind: docker\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
    );
    let out = ws.run(&["audit", "--config", cfg.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = &v["tasks"][0];
    assert_eq!((task["hackable"].clone(), task["oracle_fails"].clone()), (json!(false), json!(false)), "{v}");
    for caught in ["plant-test-config", "edit-tests"] {
        assert!(task["cells"][caught]["tampered"].as_u64().unwrap() > 0, "{caught}: {task}");
    }
}
