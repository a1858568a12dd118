//! Results in other tools' formats, checked by those tools' own readers: a JUnit file against
//! the JUnit schema pytest validates its reports with, the GitHub step summary, and ATIF
//! trajectories parsed by Harbor's own models (`harbor.models.trajectories`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use agenteval_testkit::llm_mock::MockLlm;

use crate::util::*;

/// Validates `xml` against the JUnit schema and returns what its root and cases say:
/// `[tests, failures, errors, skipped]` from the root's attributes (skipped: its suites', where
/// the schema has it), then counted case by case.
pub fn junit_counts(xml: &Path) -> ([u64; 4], [u64; 4], Vec<String>) {
    let py = python_tool("junit", "python");
    let xsd = py.parent().unwrap().parent().unwrap().join("junit-10.xsd");
    assert!(xsd.is_file(), "{} missing: tests/run.sh installs it", xsd.display());
    let script = r#"
import json, sys, xmlschema
import xml.etree.ElementTree as ET
xmlschema.XMLSchema(sys.argv[1]).validate(sys.argv[2])
root = ET.parse(sys.argv[2]).getroot()
attrs = [int(root.get(k)) for k in ("tests", "failures", "errors")]
attrs.append(sum(int(s.get("skipped", "0")) for s in root.findall("testsuite")))
cases = root.findall(".//testcase")
kinds = [next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed") for case in cases]
counted = [len(cases), kinds.count("failure"), kinds.count("error"), kinds.count("skipped")]
print(json.dumps({"attrs": attrs, "counted": counted, "names": [c.get("name") for c in cases]}))
"#;
    let out = std::process::Command::new(&py).arg("-c").arg(script).arg(&xsd).arg(xml).output().unwrap();
    assert!(out.status.success(), "the JUnit schema refuses {}: {}", xml.display(), text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let four = |k: &str| -> [u64; 4] {
        let a: Vec<u64> = v[k].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
        [a[0], a[1], a[2], a[3]]
    };
    let names = v["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    (four("attrs"), four("counted"), names)
}

#[test]
fn a_junit_file_counts_passed_failed_errored_and_skipped_tasks_and_passes_the_schema() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 40, 50, 1, 2);
    let summary = ws.path().join("step-summary.md");
    // A budget that stops the run part-way: the tasks it never started are skipped.
    let out = ws
        .cmd(&[
            "submit",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--set",
            "max_run_cost_usd=0.004",
            "--junit",
            "reports/junit.xml",
        ])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "budget_exceeded", "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let results = results(&bundle);
    let passed = results.iter().filter(|r| r["passed"] == true).count() as u64;
    let failed =
        results.iter().filter(|r| r["passed"] == false && r["agent"]["terminated_by"] == "completed").count() as u64;
    let errored = results.len() as u64 - passed - failed;
    let skipped = 40 - results.len() as u64;
    assert!(passed > 0 && failed > 0 && errored > 0 && skipped > 0, "{passed} {failed} {errored} {skipped}");
    let (attrs, counted, names) = junit_counts(&ws.path().join("reports/junit.xml"));
    assert_eq!(attrs, [40, failed, errored, skipped], "the root's counts");
    assert_eq!(counted, attrs, "the cases agree with the counts");
    assert!(names.contains(&"t0001".to_string()) || names.iter().any(|n| n.starts_with('t')), "{names:?}");
    // The step summary: the run's report, appended.
    let md = read_text(&summary).unwrap();
    assert!(md.contains("# agenteval run") && md.contains("| tasks | finished | passed |"), "{md}");

    // `report --junit` says the same of the sealed run.
    let run = v["run_id"].as_str().unwrap();
    let out = ws.run(&["report", run, "--junit", "report.xml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(junit_counts(&ws.path().join("report.xml")).0, attrs);
}

#[test]
fn compare_writes_the_gates_as_junit_cases_and_the_table_to_the_step_summary() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 10, 1, 5, 2);
    let (a, _, _) = ws.submit(&cfg, &[]);
    let (b, _, _) = ws.submit(&cfg, &[]);
    ws.write("gates.yaml", "metrics:\n  pass_rate: {max_drop: 0.05}\n");
    let summary = ws.path().join("summary.md");
    let out = ws
        .cmd(&[
            "compare",
            a["run_id"].as_str().unwrap(),
            b["run_id"].as_str().unwrap(),
            "--gates",
            "gates.yaml",
            "--junit",
            "compare.xml",
        ])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", text(&out.stderr));
    let (attrs, _, names) = junit_counts(&ws.path().join("compare.xml"));
    assert!(names.iter().any(|n| n.starts_with("pass_rate")), "the gate is a case: {names:?}");
    assert_eq!(attrs[0], 10 + names.iter().filter(|n| n.starts_with("pass_rate")).count() as u64);
    let md = read_text(&summary).unwrap();
    assert!(md.contains("gates pass") && md.contains("pass\\_rate"), "{md}");
    // A step summary CI cannot take is a warning, never the verdict's exit code.
    let again = ws
        .cmd(&["compare", a["run_id"].as_str().unwrap(), b["run_id"].as_str().unwrap(), "--gates", "gates.yaml"])
        .env("GITHUB_STEP_SUMMARY", ws.path().join("no/such/folder/summary.md"))
        .output()
        .unwrap();
    assert_eq!(again.status.code(), out.status.code(), "{}", text(&again.stderr));
    assert!(text(&again.stderr).contains("GITHUB_STEP_SUMMARY not written"), "{}", text(&again.stderr));
}

/// Reads a job folder `export --to harbor` wrote with Harbor's own models (job config, result
/// and lock; each trial's config, result and trajectory) and its viewer's API (the job listed,
/// each trial listed and opened with its trajectory). Returns what the viewer said.
pub fn harbor_reads_job(job: &Path) -> serde_json::Value {
    let py = python_tool("harbor", "python");
    let script = r#"
import sys, json
from pathlib import Path
from fastapi.testclient import TestClient
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.job.lock import JobLock
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.models.trajectories import Trajectory
from harbor.viewer.server import create_app
from harbor.publisher.packager import Packager
job = Path(sys.argv[1])
JobConfig.model_validate_json((job / "config.json").read_text())
res = JobResult.model_validate_json((job / "result.json").read_text())
lock = JobLock.model_validate_json((job / "lock.json").read_text())
trials = sorted(d for d in job.iterdir() if d.is_dir())
for d in trials:
    TrialConfig.model_validate_json((d / "config.json").read_text())
    TrialResult.model_validate_json((d / "result.json").read_text())
    Trajectory.model_validate_json((d / "agent" / "trajectory.json").read_text())
# Each pinned task's digest is the one Harbor computes of its folder.
wrong = [str(t.task.path) for t in lock.trials
         if t.task.path and t.task.digest != "sha256:" + Packager.compute_content_hash(t.task.path)[0]]
assert not wrong, f"digests Harbor computes otherwise: {wrong}"
out = {"trials": [d.name for d in trials], "locked": [t.task.digest for t in lock.trials],
       "means": [m for v in res.stats.evals.values() for m in v.metrics]}
with TestClient(create_app(job.parent)) as c:
    out["viewer_jobs"] = [j["name"] for j in c.get("/api/jobs").json()["items"]]
    listed = c.get(f"/api/jobs/{job.name}/trials").json()["items"]
    out["viewer_trials"] = sorted(t["name"] for t in listed)
    out["opened"] = {}
    for t in listed:
        r = c.get(f"/api/jobs/{job.name}/trials/{t['name']}")
        tr = c.get(f"/api/jobs/{job.name}/trials/{t['name']}/trajectory")
        out["opened"][t["name"]] = [r.status_code, tr.status_code, len((tr.json() or {}).get("steps", []))]
print(json.dumps(out))
"#;
    let out = std::process::Command::new(&py).arg("-c").arg(script).arg(job).output().unwrap();
    assert!(out.status.success(), "Harbor refuses the exported job {}: {}", job.display(), text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["viewer_trials"], v["trials"], "the viewer lists every trial: {v}");
    for (trial, opened) in v["opened"].as_object().unwrap() {
        assert_eq!((opened[0].as_u64(), opened[1].as_u64()), (Some(200), Some(200)), "{trial}: {v}");
        assert!(opened[2].as_u64().unwrap() >= 1, "{trial}'s trajectory opens with its steps: {v}");
    }
    v
}

/// Validates every ATIF document in `dir` with Harbor's own model; returns each one.
pub fn harbor_reads_atif(dir: &Path) -> Vec<serde_json::Value> {
    let py = python_tool("harbor", "python");
    let script = r#"
import json, pathlib, sys
from harbor.models.trajectories import Trajectory
docs = []
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    if p.name == "summary.json":
        continue
    t = Trajectory.model_validate_json(p.read_text())
    docs.append(t.to_json_dict())
print(json.dumps(docs))
"#;
    let out = std::process::Command::new(&py).arg("-c").arg(script).arg(dir).output().unwrap();
    assert!(out.status.success(), "Harbor's models refuse an ATIF document: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Checks one ATIF document against its task's trace: every tool call and every model call is
/// there, with the gateway's tokens.
pub fn atif_holds_the_trace(doc: &serde_json::Value, trace: &[serde_json::Value]) {
    let steps = doc["steps"].as_array().unwrap();
    let calls: Vec<&serde_json::Value> =
        steps.iter().flat_map(|s| s["tool_calls"].as_array().into_iter().flatten()).collect();
    let traced: Vec<&serde_json::Value> = trace.iter().filter(|e| e["kind"] == "agent.tool_call").collect();
    assert_eq!(calls.len(), traced.len(), "every tool call: {doc}");
    for (c, t) in calls.iter().zip(&traced) {
        assert_eq!(c["function_name"], t["payload"]["tool"], "{c} {t}");
    }
    let metered: Vec<&serde_json::Value> =
        trace.iter().filter(|e| e["kind"] == "model.call" || e["kind"] == "cost.tick").collect();
    let with_metrics: Vec<&serde_json::Value> = steps.iter().filter(|s| s["metrics"].is_object()).collect();
    assert_eq!(with_metrics.len(), metered.len(), "every model call: {doc}");
    let sum = |xs: &[&serde_json::Value], f: &dyn Fn(&serde_json::Value) -> u64| xs.iter().map(|x| f(x)).sum::<u64>();
    let prompt = sum(&with_metrics, &|s| s["metrics"]["prompt_tokens"].as_u64().unwrap_or(0));
    let traced_in = sum(&metered, &|e| e["input_tokens"].as_u64().unwrap_or(0));
    assert_eq!(prompt, traced_in, "the gateway's input tokens");
    assert_eq!(doc["final_metrics"]["total_prompt_tokens"].as_u64(), Some(traced_in), "{doc}");
    assert!(with_metrics.iter().all(|s| s["metrics"]["extra"]["measured_by"] == "gateway"), "{doc}");
}

const KEY: &str = "sk-test-0123456789abcdef0123";

/// A run of the `llm` agent on the mock: a task that calls a tool and passes, one that fails.
fn llm_run(ws: &Workspace, mock: &MockLlm) -> (String, PathBuf) {
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    ws.write(
        "cases.jsonl",
        "{\"id\":\"tool\",\"input\":\"USE_TOOL please\",\"expected\":\"the tool said 42\"}\n{\"id\":\"plain\",\"input\":\"hello\",\"expected\":\"nope\"}\n",
    );
    let cfg = ws.write(
        "llm.yaml",
        &format!(
            "name: certified\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: openai:gpt-4o-mini\n  base_url: {}\n  tools: [python]\nbackend:\n  secrets_file: secrets.env\nstorage:\n  bundle_root: runs\n",
            mock.base_url()
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["status"], "complete", "{v}");
    (v["run_id"].as_str().unwrap().to_string(), PathBuf::from(v["bundle"].as_str().unwrap()))
}

/// `certify --check DIR --json`: its exit code and what it said.
fn check(ws: &Workspace, dir: &Path) -> (i32, serde_json::Value) {
    let out = ws.run(&["certify", "--check", dir.to_str().unwrap(), "--json"]);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (p, q) = (e.path(), to.join(e.file_name()));
        if p.is_dir() {
            std::fs::create_dir_all(&q).unwrap();
            copy_tree(&p, &q);
        } else {
            std::fs::copy(&p, &q).unwrap();
        }
    }
}

#[test]
fn a_certified_package_checks_offline_and_names_every_change_and_its_reviews_replay_without_a_key() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let (run, bundle) = llm_run(&ws, &mock);
    ws.write("judge.yaml", &format!("model: openai:gpt-4o-mini\nbase_url: {}\n", mock.base_url()));
    ws.write("review.md", "REVIEW_TRIAL {{task_id}}\n{{instruction}}\n{{trajectory}}\n{{grading}}\n{{verdict}}\n");
    let certify = |out: &str, extra: &[&str], key: bool| {
        let mut args =
            vec!["certify", run.as_str(), "--judge", "judge.yaml", "--judge-prompt", "review.md", "--out", out];
        args.extend_from_slice(extra);
        let mut c = ws.cmd(&args);
        if key {
            c.env("OPENAI_API_KEY", KEY);
        } else {
            c.env_remove("OPENAI_API_KEY");
        }
        c.output().unwrap()
    };
    let out = certify("pkg", &[], true);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    let pkg = ws.path().join("pkg");
    let (code, v) = check(&ws, &pkg);
    assert_eq!(code, 0, "{v}");
    assert_eq!((v["check"]["tasks"].as_u64(), v["check"]["passing"].as_u64()), (Some(2), Some(1)), "{v}");
    let review = read_json(&pkg.join("reviews/tool.json"));
    assert_eq!((review["earned"].as_bool(), review["why"].as_str()), (Some(true), Some("scripted review")), "{review}");
    assert!(pkg.join("harbor").read_dir().unwrap().count() == 1, "the Harbor job is in the package");
    assert_eq!(harbor_reads_atif(&pkg.join("atif")).len(), 2);
    // Nothing of the key in any file of the package.
    let manifest = read_json(&pkg.join("manifest.json"));
    let files: Vec<String> = manifest["files"].as_object().unwrap().keys().cloned().collect();
    for f in &files {
        assert!(!read_text(pkg.join(f)).unwrap_or_default().contains(KEY), "{f} holds the key");
    }

    // The reviews again, from the package's recording: no key, no call, the same reviews.
    let before = mock.received().len();
    let out = certify("pkg2", &["--replay", "pkg"], false);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(mock.received().len(), before, "a replayed review calls no model");
    assert_eq!(read_json(&ws.path().join("pkg2/reviews/tool.json")), review);

    // One byte of any file changed: the check fails naming that file.
    for f in &files {
        let copy = ws.path().join("changed");
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).unwrap();
        copy_tree(&pkg, &copy);
        let mut bytes = std::fs::read(copy.join(f)).unwrap();
        bytes[0] ^= 1;
        std::fs::write(copy.join(f), bytes).unwrap();
        let (code, v) = check(&ws, &copy);
        assert_eq!(code, 1, "{f}: {v}");
        assert!(v["check"]["problems"].to_string().contains(f.as_str()), "{f}: {v}");
    }
    // A passing trial's trajectory deleted, even with the manifest rewritten to match.
    let copy = ws.path().join("deleted");
    std::fs::create_dir_all(&copy).unwrap();
    copy_tree(&pkg, &copy);
    std::fs::remove_file(copy.join("atif/tool.json")).unwrap();
    let (code, v) = check(&ws, &copy);
    assert_eq!(code, 1, "{v}");
    assert!(v["check"]["problems"].to_string().contains("atif/tool.json: missing"), "{v}");
    let mut m = manifest.clone();
    m["files"].as_object_mut().unwrap().remove("atif/tool.json");
    std::fs::write(copy.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, v) = check(&ws, &copy);
    assert_eq!(code, 1, "{v}");
    assert!(v["check"]["problems"].to_string().contains("task tool: passed, but its trajectory is missing"), "{v}");

    // A run with a tampered task: its package does not check, naming the task.
    let mut r = read_json(&bundle.join("tasks/tool/result.json"));
    r["tampered"] =
        serde_json::json!([{"path": "/app/conftest.py", "why": "a conftest.py, which pytest loads before the tests"}]);
    replace_in_pack(&bundle, "tool", "result.json", serde_json::to_vec(&r).unwrap());
    let out = certify("pkg3", &[], true);
    assert_eq!(out.status.code(), Some(1), "{}{}", text(&out.stdout), text(&out.stderr));
    let (code, v) = check(&ws, &ws.path().join("pkg3"));
    assert_eq!(code, 1);
    assert!(v["check"]["problems"].to_string().contains("task tool: tampered"), "{v}");
}

#[test]
fn a_review_prompt_with_an_unknown_variable_is_refused_at_load_naming_where() {
    let ws = Workspace::new();
    ws.write("judge.yaml", "model: openai:gpt-4o-mini\n");
    ws.write("review.md", "Task {{task_id}}\nsee {{answer}} and {{ trajectory }}\n");
    let out = ws.run(&["certify", "latest", "--judge", "judge.yaml", "--judge-prompt", "review.md"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("review.md:2:5: unknown variable `answer`"), "{err}");
}

#[test]
fn an_llm_runs_trajectories_export_as_atif_that_harbor_reads() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", "OPENAI_API_KEY=sk-test-0123456789abcdef0123\n");
    ws.write(
        "cases.jsonl",
        "{\"id\":\"tool\",\"input\":\"USE_TOOL please\"}\n{\"id\":\"plain\",\"input\":\"hello\"}\n",
    );
    let cfg = ws.write(
        "llm.yaml",
        &format!(
            "name: atif\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: openai:gpt-4o-mini\n  base_url: {}\n  tools: [python]\nbackend:\n  secrets_file: secrets.env\nstorage:\n  bundle_root: runs\n",
            mock.base_url()
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let out = ws.run(&["export", run, "--to", "atif", "--out", "atif", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((said["documents"].as_u64(), said["tool_calls"].as_u64()), (Some(2), Some(1)), "{said}");
    let docs = harbor_reads_atif(&ws.path().join("atif"));
    assert_eq!(docs.len(), 2);
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    for doc in &docs {
        let task = doc["extra"]["task_id"].as_str().unwrap();
        let trace: Vec<serde_json::Value> = read_text(bundle.join(format!("tasks/{task}/trace.jsonl")))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        atif_holds_the_trace(doc, &trace);
        assert_eq!(doc["steps"][0]["source"], "user");
        assert_eq!(doc["agent"]["name"], "llm");
    }
    // Keys never travel with a trajectory.
    for doc in &docs {
        assert!(!doc.to_string().contains("sk-test-0123456789abcdef0123"));
    }
    // A run of no task folders is a Harbor job too: its trials, with nothing to pin in the lock.
    let out = ws.run(&["export", run, "--to", "harbor", "--out", "jobs/atif"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job = harbor_reads_job(&ws.path().join("jobs/atif"));
    assert_eq!(job["trials"].as_array().unwrap().len(), 2, "{job}");
    assert_eq!(job["locked"], serde_json::json!([]), "{job}");
}

/// `analyze`: a judge model names the cause of each failed task, the tasks are grouped by it
/// (the same words in another case or spacing are one cause), every call is recorded, and
/// `--replay` makes the same analysis with no key and no call.
#[test]
fn analyze_groups_a_runs_failed_tasks_by_the_cause_a_judge_names_and_replays_without_a_key() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 12, 1, 6, 2);
    let (v, _, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let summary = read_json(&PathBuf::from(v["bundle"].as_str().unwrap()).join("summary.json"));
    let failed = summary["tasks_finished"].as_u64().unwrap() - summary["passed"].as_u64().unwrap();
    assert!(failed >= 2, "{summary}");
    ws.write("judge.yaml", &format!("model: openai:gpt-4o-mini\nbase_url: {}\n", mock.base_url()));
    let analyze = |extra: &[&str], key: bool| {
        let mut args = vec!["analyze", run.as_str(), "--judge", "judge.yaml"];
        args.extend_from_slice(extra);
        let mut c = ws.cmd(&args);
        if key {
            c.env("OPENAI_API_KEY", KEY);
        } else {
            c.env_remove("OPENAI_API_KEY");
        }
        c.output().unwrap()
    };
    let out = analyze(&["--out", "an", "--json"], true);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["failed"].as_u64(), Some(failed), "{a}");
    assert_eq!(mock.received().len() as u64, failed, "one call per failed task");
    let groups = a["groups"].as_array().unwrap();
    let in_groups: usize = groups.iter().map(|g| g["tasks"].as_array().unwrap().len()).sum();
    assert_eq!(in_groups as u64, failed, "{a}");
    for t in a["tasks"].as_array().unwrap() {
        let why = t["why"].as_str().unwrap();
        let want = match () {
            _ if t["outcome"] == "failed" => "wrong answer",
            _ if why.contains("limit") => "ran out of budget",
            _ => "agent crashed",
        };
        assert_eq!(t["cause"], want, "the model's words, normalised: {t}");
    }
    assert!(
        groups.windows(2).all(|w| w[0]["tasks"].as_array().unwrap().len() >= w[1]["tasks"].as_array().unwrap().len())
    );
    assert_eq!(read_json(&ws.path().join("an/analysis.json")), a);
    let shown = text(&analyze(&["--out", "an-text"], true).stdout);
    assert!(shown.contains(&format!("{failed} failed task(s) in {} cause(s)", groups.len())), "{shown}");
    assert!(shown.contains("wrong answer ("), "{shown}");

    // From the recording: no key, no call, the same groups.
    let calls = mock.received().len();
    let out = analyze(&["--replay", "an", "--out", "an2", "--json"], false);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["groups"], a["groups"]);
    assert_eq!(mock.received().len(), calls, "a replay makes no call");
    // Without a key and without a recording: the key's variable is named, exit 2.
    let out = analyze(&["--out", "an3"], false);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("OPENAI_API_KEY"), "{}", text(&out.stderr));
}
