//! Judging with the real binary: two runs of a JSONL benchmark whose candidate is worse on known
//! tasks, compared both ways, with gates; infrastructure failures that must not count against
//! the agent; baselines and `latest:`; gates files with every problem at its position.

use std::path::{Path, PathBuf};

use crate::util::ui::UiServer;
use crate::util::*;

const AGENT: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
task = req["task_id"]
if task in os.environ.get("KILL", "").split(","):
    # The parent is the task's supervisor; the worker is its parent. The agent cannot signal
    # it (a uid of its own under a root worker): it asks the test to (`Killer`), and waits.
    import time
    worker = int(open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1])
    open(os.path.join(os.environ["KILL_DIR"], str(worker)), "w").close()
    time.sleep(60)
broken = set(filter(None, os.environ.get("BROKEN", "").split(",")))
answer = "wrong" if task in broken else req["input"].upper()
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": answer}, "cost_usd": 0.001, "input_tokens": 10, "output_tokens": 5}), flush=True)
"#;

const BROKEN: &[&str] = &["c03", "c07", "c11", "c15", "c19", "c23"];

/// Kills, while it lives, every worker an agent names by a file in its folder (`KILL_DIR`):
/// how a test makes a worker die in the middle of a task.
struct Killer {
    dir: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Killer {
    fn start(ws: &Workspace) -> Killer {
        let dir = ws.shared_dir("kill");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (d, s) = (dir.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
                        let _ = std::fs::remove_file(e.path());
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        Killer { dir, stop, thread: Some(thread) }
    }

    fn set(&self) -> String {
        format!("agent.env.KILL_DIR={}", self.dir.display())
    }
}

impl Drop for Killer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn setup() -> (Workspace, std::path::PathBuf) {
    let ws = Workspace::new();
    ws.write("agent.py", AGENT);
    let cases: String = (0..30)
        .map(|i| format!("{{\"id\": \"c{i:02}\", \"input\": \"word{i}\", \"expected\": \"WORD{i}\"}}\n"))
        .collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "eval.yaml",
        r#"name: nightly
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, agent.py]
evaluators:
  - kind: exact_match
backend:
  max_concurrent_jobs: 4
  tasks_per_job: 1
  max_attempts: 1
storage:
  bundle_root: runs
"#,
    );
    ws.write("gates.yaml", "max_task_regressions: 0\nmetrics:\n  pass_rate: {max_drop: 0.02}\n");
    (ws, cfg)
}

fn submit(ws: &Workspace, cfg: &Path, sets: &[&str]) -> (String, i32) {
    let mut extra = vec![];
    for s in sets {
        extra.extend(["--set", s]);
    }
    let (v, code, _) = ws.submit(cfg, &extra);
    (v["run_id"].as_str().unwrap().to_string(), code)
}

fn compare(ws: &Workspace, base: &str, cand: &str) -> (serde_json::Value, i32, String) {
    compare_with(ws, base, cand, &["--record"])
}

fn compare_with(ws: &Workspace, base: &str, cand: &str, extra: &[&str]) -> (serde_json::Value, i32, String) {
    let gates = ws.path().join("gates.yaml");
    let mut args =
        vec!["compare", base, cand, "--gates", gates.to_str().unwrap(), "--format", "json", "--resamples", "4000"];
    args.extend_from_slice(extra);
    let out = ws.run(&args);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    (v, out.status.code().unwrap(), text(&out.stderr))
}

#[test]
fn a_worse_candidate_is_named_task_by_task_and_fails_its_gates() {
    let (ws, cfg) = setup();
    let (base, code) = submit(&ws, &cfg, &[]);
    assert_eq!(code, 0);
    let broken = format!("agent.env.BROKEN={}", BROKEN.join(","));
    let (cand, code) = submit(&ws, &cfg, &[&broken]);
    assert_eq!(code, 0);

    // A question asked of two runs leaves both as they were: the candidate's bundle is byte
    // for byte the same, and the index records no verdict.
    let bundle = ws.runs().join(&cand);
    let files = |dir: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.path().is_dir() {
                    todo.push(e.path())
                } else {
                    out.push((e.path(), std::fs::read(e.path()).unwrap()))
                }
            }
        }
        out.sort();
        out
    };
    let before = files(&bundle);
    let (asked, code, err) = compare_with(&ws, &base, &cand, &[]);
    assert_eq!(code, 1, "a failed gate exits 1: {err}");
    assert_eq!(asked["verdict"]["passed"], false);
    assert!(files(&bundle) == before, "compare --gates without --record changed the candidate's bundle");
    let out = ws.run(&["runs", "list", "--name", "nightly", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(runs[0]["verdict"].is_null(), "{runs}");

    let (v, code, err) = compare(&ws, &base, &cand);
    assert_eq!(code, 1, "a failed gate exits 1: {err}");
    let c = &v["comparison"];
    let regressed: Vec<&str> =
        c["regressions"].as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap()).collect();
    assert_eq!(regressed, BROKEN, "exactly the broken tasks regressed");
    let pr = c["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "pass_rate").unwrap();
    assert!(pr["diff"]["hi"].as_f64().unwrap() < 0.0, "the pass-rate interval is below zero: {pr}");
    assert!((pr["diff"]["mean"].as_f64().unwrap() + 0.2).abs() < 1e-9, "{pr}");
    assert_eq!(pr["regressed"], true);
    assert_eq!(c["seed"], 20_211_207, "the seed is recorded");
    assert_eq!(v["verdict"]["passed"], false);
    // With --record the verdict is in the candidate's bundle, which stays valid, and in the index.
    let doc = read_json(&bundle.join("comparison.json"));
    assert_eq!(doc["verdict"]["passed"], false);
    assert!(
        ws.validate(bundle.to_str().unwrap()).status.success(),
        "{}",
        text(&ws.validate(bundle.to_str().unwrap()).stdout)
    );
    let out = ws.run(&["runs", "list", "--name", "nightly", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert_eq!(runs[0]["verdict"], "fail", "{runs}");
    assert_eq!(runs[0]["baseline"], base.as_str(), "the verdict's baseline: {runs}");
    let listed = text(&ws.run(&["runs", "list"]).stdout);
    assert!(listed.contains(&format!("vs {}", &base[..13])), "the baseline under the verdict:\n{listed}");
    assert!(listed.lines().all(|l| l.chars().count() <= 80), "within 80 columns:\n{listed}");
    // Every format of the judged run's report says its verdict, its baseline and each gate.
    for format in ["text", "md", "json", "html"] {
        let out = ws.run(&["report", &cand, "--format", format]);
        assert!(out.status.success(), "{format}: {}", text(&out.stderr));
        let shown = text(&out.stdout);
        for wanted in ["fail", base.as_str(), "max_task_regressions", "pass_rate.max_drop"] {
            let wanted = if format == "md" { wanted.replace('_', "\\_") } else { wanted.to_string() };
            assert!(shown.contains(&wanted), "report --format {format} lacks {wanted}:\n{shown}");
        }
    }
    let doc: serde_json::Value = serde_json::from_slice(&ws.run(&["report", &cand, "--json"]).stdout).unwrap();
    assert_eq!(doc["judgement"]["outcome"], "fail");
    assert_eq!(doc["judgement"]["comparison"]["base"]["run_id"], base.as_str());
    let md = text(&ws.run(&["report", &cand, "--format", "md"]).stdout);
    assert!(md.contains("## Verdict: ❌ fail") && md.contains(&format!("baseline `{base}`")), "{md}");
    // The index rebuilt from the bundles keeps the verdict and its baseline.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", ws.index().display()));
    }
    let out = ws.run(&["index", "rebuild", "--bundles", ws.runs().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let runs: serde_json::Value =
        serde_json::from_slice(&ws.run(&["runs", "list", "--name", "nightly", "--json"]).stdout).unwrap();
    let rebuilt = runs.as_array().unwrap().iter().find(|r| r["run_id"] == cand.as_str()).unwrap();
    assert_eq!((&rebuilt["verdict"], &rebuilt["baseline"]), (&"fail".into(), &base.as_str().into()), "{runs}");

    // The other way round nothing regressed: exit 0.
    let (v, code, err) = compare(&ws, &cand, &base);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["comparison"]["regressions"].as_array().unwrap().len(), 0);
    assert_eq!(v["comparison"]["improvements"].as_array().unwrap().len(), BROKEN.len());

    // Reproducible: the same seed gives the same intervals.
    let (again, ..) = compare(&ws, &base, &cand);
    assert_eq!(again["comparison"]["metrics"], compare(&ws, &base, &cand).0["comparison"]["metrics"]);

    // Text and Markdown name the regressions too.
    let out = ws.run(&["compare", &base, &cand, "--resamples", "500"]);
    assert_eq!(out.status.code(), Some(0), "without gates a comparison is not a verdict");
    let shown = text(&out.stdout);
    assert!(shown.contains("regressed (passed -> failed): 6") && shown.contains("c23"), "{shown}");
    let md = ws.path().join("pr.md");
    let out = ws.run(&["compare", &base, &cand, "--format", "md", "-o", md.to_str().unwrap(), "--resamples", "500"]);
    assert!(out.status.success());
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("| pass\\_rate |") && md.contains("`c03"), "{md}");

    // Baselines and `latest:`.
    let out = ws.run(&["baseline", "set", &base]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (v, code, _) = compare(&ws, "baseline:nightly", "latest:nightly");
    assert_eq!(code, 1);
    assert_eq!(v["comparison"]["base"]["run_id"], base.as_str());
    assert_eq!(v["comparison"]["cand"]["run_id"], cand.as_str());
    let out = ws.run(&["compare", "baseline:nope", &cand]);
    assert_eq!(out.status.code(), Some(2), "an unknown baseline is a usage error: {}", text(&out.stderr));
    // `submit --baseline --gates` judges the new run against the pin.
    let gates = ws.path().join("gates.yaml");
    let out = ws.run(&[
        "submit",
        "-q",
        "--config",
        cfg.to_str().unwrap(),
        "--set",
        &broken,
        "--baseline",
        "baseline:nightly",
        "--gates",
        gates.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"]["passed"], false);
    assert_eq!(v["comparison"]["regressions"].as_array().unwrap().len(), BROKEN.len());
}

#[test]
fn infrastructure_failures_are_reported_apart_and_fail_no_pass_rate_gate() {
    let (ws, cfg) = setup();
    let (base, _) = submit(&ws, &cfg, &[]);
    // The worker dies on two tasks (the test kills it when the agent asks); with one attempt
    // allowed they are given up as infrastructure failures.
    let killer = Killer::start(&ws);
    let (cand, code) = submit(&ws, &cfg, &["agent.env.KILL=c05,c06", "agent.sandbox=none", &killer.set()]);
    drop(killer);
    assert_eq!(code, 3, "given-up tasks leave the run incomplete");
    let (v, code, err) = compare(&ws, &base, &cand);
    let c = &v["comparison"];
    let infra: Vec<&str> =
        c["infra_failures"].as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap()).collect();
    assert_eq!(infra, ["c05", "c06"], "{c}");
    assert_eq!(c["regressions"].as_array().unwrap().len(), 0, "an infrastructure failure is not a regression");
    assert_eq!(c["paired_tasks"], 28);
    let gate = v["verdict"]["gates"].as_array().unwrap().iter().find(|g| g["gate"] == "pass_rate.max_drop").unwrap();
    assert_eq!(gate["passed"], true, "{gate}");
    assert_eq!(code, 3, "the gates hold, but the candidate did not complete: {err}");
}

#[test]
fn a_bad_gates_file_is_refused_before_anything_runs() {
    let (ws, cfg) = setup();
    let bad = ws.write(
        "bad-gates.yaml",
        "max_task_regresions: 1\nmetrics:\n  pass_rte: {min: 0.5}\n  cost_per_task: {min: 3, max: 1}\n  steps: {max_drop: many}\n",
    );
    let out = ws.run(&[
        "submit",
        "--config",
        cfg.to_str().unwrap(),
        "--gates",
        bad.to_str().unwrap(),
        "--baseline",
        "latest:nightly",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    for want in [
        "bad-gates.yaml:1:1: unknown key `max_task_regresions` (did you mean `max_task_regressions`?)",
        "bad-gates.yaml:3:3: unknown metric `pass_rte` (did you mean `pass_rate`?)",
        "bad-gates.yaml:4:24: min 3 is greater than max 1",
        "bad-gates.yaml:5:21: must be a number",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert!(!ws.runs().exists(), "nothing ran");

    // The first night has no baseline: without gates that is no error, only nothing to compare.
    let out = ws.run(&["submit", "--json", "-q", "--config", cfg.to_str().unwrap(), "--baseline", "latest:nightly"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["comparison"].is_null() && v["verdict"].is_null(), "{v}");
    // With gates, `on_missing_baseline` decides (default: fail).
    let gates = ws.path().join("gates.yaml");
    let out = ws.run(&[
        "submit",
        "-q",
        "--config",
        cfg.to_str().unwrap(),
        "--baseline",
        "baseline:nightly",
        "--gates",
        gates.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("FAIL on_missing_baseline"), "{}", text(&out.stdout));
}

/// The nightly flow (docs/operations.md): every night `submit --baseline baseline:nightly --gates
/// gates.yaml`, a good night pinned as the baseline. A regression exits 1 and reads `fail` in
/// the history; a night whose workers died reads `infra`, exits 3 and is never a regression.
#[test]
fn nightly_runs_record_pass_regression_and_infrastructure_failure_apart() {
    let (ws, cfg) = setup();
    let gates = ws.write(
        "nightly-gates.yaml",
        "on_missing_baseline: pass\nmax_task_regressions: 0\nmetrics:\n  pass_rate: {max_drop: 0.02}\n",
    );
    let night = |sets: &[&str]| {
        let mut extra = vec!["--baseline", "baseline:nightly", "--gates", gates.to_str().unwrap()];
        for s in sets {
            extra.extend(["--set", s]);
        }
        let (v, code, _) = ws.submit(&cfg, &extra);
        (v, code)
    };
    let (first, code) = night(&[]);
    assert_eq!(code, 0, "the first night has no baseline and passes: {first}");
    let first_id = first["run_id"].as_str().unwrap();
    let out = ws.run(&["baseline", "set", first_id]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let broken = format!("agent.env.BROKEN={}", BROKEN.join(","));
    let (regressed, code) = night(&[&broken]);
    assert_eq!(code, 1, "a regression fails the night: {regressed}");
    assert_eq!(regressed["verdict"]["passed"], false);
    assert_eq!(regressed["outcome"], "fail");
    // The verdict, its baseline and the failed gate, wherever the on-call person looks.
    let id = regressed["run_id"].as_str().unwrap();
    for args in [vec!["status", id], vec!["runs", "show", id], vec!["report", id]] {
        let shown = text(&ws.run(&args).stdout);
        assert!(shown.contains(&format!("verdict    fail against {first_id}")), "{args:?}:\n{shown}");
        assert!(shown.contains("  FAIL "), "{args:?}:\n{shown}");
    }

    // The worker dies on one task (killed by the test when the agent asks): with one attempt it
    // is given up as an infrastructure failure.
    let killer = Killer::start(&ws);
    let (infra, code) = night(&["agent.env.KILL=c05", "agent.sandbox=none", &killer.set()]);
    drop(killer);
    assert_eq!(code, 3, "a night the infrastructure failed is incomplete: {infra}");
    assert_eq!(infra["status"], "failed");
    assert_eq!(infra["outcome"], "infra", "{infra}");
    assert_eq!(infra["comparison"]["regressions"].as_array().unwrap().len(), 0, "not a regression: {infra}");
    let bundle = infra["bundle"].as_str().unwrap();
    let doc = read_json(&Path::new(bundle).join("comparison.json"));
    assert_eq!(doc["outcome"], "infra", "{doc}");
    assert!(ws.validate(bundle).status.success(), "{}", text(&ws.validate(bundle).stdout));

    let out = ws.run(&["runs", "list", "--name", "nightly", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let verdicts: Vec<&str> = runs.as_array().unwrap().iter().map(|r| r["verdict"].as_str().unwrap_or("-")).collect();
    assert_eq!(verdicts, ["infra", "fail", "pass"], "newest first: {runs}");
    let out = ws.run(&["runs", "list", "--name", "nightly"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("infra") && shown.contains("fail") && shown.contains("pass"), "{shown}");
}

#[test]
fn an_edited_dataset_is_named_and_only_the_unchanged_tasks_are_judged() {
    let (ws, cfg) = setup();
    let (base, code) = submit(&ws, &cfg, &[]);
    assert_eq!(code, 0);
    // Two expected answers edited under the same ids: the agent "fails" them only because the
    // question changed.
    let edit = |n: usize| {
        let cases: String = (0..30)
            .map(|i| {
                let expected = if i < n { format!("EDITED{i}") } else { format!("WORD{i}") };
                format!("{{\"id\": \"c{i:02}\", \"input\": \"word{i}\", \"expected\": \"{expected}\"}}\n")
            })
            .collect();
        ws.write("cases.jsonl", &cases);
    };
    edit(2);
    let (cand, code) = submit(&ws, &cfg, &[]);
    assert_eq!(code, 0);
    let (v, code, err) = compare(&ws, &base, &cand);
    assert_eq!(code, 0, "the unchanged 28 tasks held: {err}");
    let c = &v["comparison"];
    assert_eq!(c["changed"], serde_json::json!(["c00", "c01"]), "{c}");
    assert_eq!(c["paired_tasks"], 28);
    assert_eq!(c["regressions"].as_array().unwrap().len(), 0, "{c}");
    let shown = text(&ws.run(&["compare", &base, &cand]).stdout);
    assert!(shown.contains("warning: 2 tasks changed content") && shown.contains("c00, c01"), "{shown}");

    // Six of thirty changed (20%, over the default 10%): no verdict, exit 2, saying why.
    edit(6);
    let (cand, _) = submit(&ws, &cfg, &[]);
    let gates = ws.path().join("gates.yaml");
    let out = ws.run(&["compare", &base, &cand, "--gates", gates.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("6 of 30 tasks changed content") && err.contains("max_changed_share"), "{err}");
    assert!(text(&out.stdout).contains("c05"), "the changed tasks are still listed: {}", text(&out.stdout));
    // A gates file that allows it judges the 24 unchanged tasks.
    let lenient = ws.write("lenient.yaml", "max_changed_share: 0.5\nmax_task_regressions: 0\n");
    let out = ws.run(&["compare", &base, &cand, "--gates", lenient.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn the_docs_twenty_task_drop_fails_max_drop_and_regressions() {
    let ws = Workspace::new();
    ws.write("agent.py", AGENT);
    let cases: String = (0..20)
        .map(|i| format!("{{\"id\": \"c{i:02}\", \"input\": \"word{i}\", \"expected\": \"WORD{i}\"}}\n"))
        .collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "eval.yaml",
        "name: drop\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent: {kind: command, command: [python3, agent.py]}\nevaluators:\n  - kind: exact_match\nbackend: {max_concurrent_jobs: 4, tasks_per_job: 5}\n",
    );
    // The base passes 15 of 20, the candidate 11: a 20-point drop (docs/judging.md).
    let (base, code) = submit(&ws, &cfg, &["agent.env.BROKEN=c15,c16,c17,c18,c19"]);
    assert_eq!(code, 0);
    let (cand, code) = submit(&ws, &cfg, &["agent.env.BROKEN=c11,c12,c13,c14,c15,c16,c17,c18,c19"]);
    assert_eq!(code, 0);
    let gates = ws.write(
        "g.yaml",
        "min_tasks: 25\nmax_task_regressions: 3\nregressions: {max: 0}\nmetrics:\n  pass_rate: {max_drop: 0.05, max_drop_pct: 20}\n",
    );
    let out = ws.run(&["compare", &base, &cand, "--gates", gates.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gate = |name: &str| {
        v["verdict"]["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["gate"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}: {v}"))
    };
    for (name, value) in [
        ("pass_rate.max_drop", 0.2),
        ("pass_rate.max_drop_pct", 0.2 / 0.75 * 100.0),
        ("max_task_regressions", 4.0),
        ("min_tasks", 20.0),
    ] {
        let g = gate(name);
        assert_eq!(g["passed"], false, "{g}");
        assert!((g["value"].as_f64().unwrap() - value).abs() < 1e-9, "{name}: {g}");
    }
    // The three metrics the drop moves regress; `wall_seconds` may too when the machine is busy
    // with other tests (a real slowdown beyond noise is still one), so it is not counted on.
    let g = gate("regressions.max");
    assert_eq!(g["passed"], false, "{g}");
    let detail = g["detail"].as_str().unwrap();
    for metric in ["pass_rate", "score:benchmark", "score:exact_match"] {
        assert!(detail.contains(metric), "{metric} regressed: {g}");
    }
    let extra = if detail.contains("wall_seconds") { 1.0 } else { 0.0 };
    assert_eq!(g["value"].as_f64(), Some(3.0 + extra), "{g}");
    let shown = text(&ws.run(&["compare", &base, &cand, "--gates", gates.to_str().unwrap()]).stdout);
    // The gate's line says the drop as the table does: signed, in points.
    assert!(shown.contains("-20.00 pts vs base (95% CI"), "{shown}");
    assert!(shown.contains("-20.00 pts ["), "the table's difference, the same number: {shown}");
}

/// The shipped `configs/gates.yaml` on a small benchmark's first night (no baseline yet):
/// it passes, as docs/operations.md says, though the run has fewer tasks than `min_tasks`.
#[test]
fn the_shipped_gates_pass_a_small_first_night() {
    let ws = Workspace::new();
    let cases: String =
        (0..5).map(|i| format!("{{\"id\": \"c{i}\", \"input\": \"q\", \"expected\": \"a{i}\"}}\n")).collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "first.yaml",
        "name: first-night\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: mock\nbackend:\n  tasks_per_job: 5\n",
    );
    let gates = crate::util::repo().join("configs/gates.yaml");
    let out =
        ws.run(&["submit", "-q", "--config", cfg.to_str().unwrap(), "--gates", gates.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"]["passed"], true, "{v}");
    let gates: Vec<&str> =
        v["verdict"]["gates"].as_array().unwrap().iter().map(|g| g["gate"].as_str().unwrap()).collect();
    assert!(gates.contains(&"on_missing_baseline") && !gates.contains(&"min_tasks"), "{gates:?}");
}

/// A benchmark of ten tasks whose grader passes `t0` and `t1` only on the repetitions listed in
/// `passing.txt` (`0` is the first): two deliberately flaky tasks, the rest always pass.
const FLAKY_BENCH: &str = r#"import json, sys
passing = open("passing.txt").read().split()
if sys.argv[1] == "list":
    for i in range(10):
        print(json.dumps({"id": f"t{i}", "input": f"q{i}", "expected": "a"}))
else:
    doc = json.load(sys.stdin)
    base, _, rep = doc["task"]["id"].partition("@r")
    ok = base not in ("t0", "t1") or (rep or "0") in passing
    print(json.dumps({"score": 1 if ok else 0, "passed": ok}))
"#;

fn flaky_run(ws: &Workspace, passing: &str, repetitions: u32) -> String {
    ws.write("bench.py", FLAKY_BENCH);
    ws.write("passing.txt", passing);
    let cfg = ws.write(
        "flaky.yaml",
        &format!(
            "name: flaky\nrepetitions: {repetitions}\nbenchmark:\n  kind: command\n  command: [python3, bench.py]\n  files: [passing.txt]\n\
             agent:\n  kind: oracle\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 25\nstorage:\n  bundle_root: runs\n"
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", text(&out.stderr));
    v["run_id"].as_str().unwrap().to_string()
}

#[test]
fn flip_rates_and_pass_hat_k_are_reported_and_a_difference_within_the_noise_is_not_a_regression() {
    let ws = Workspace::new();
    let base = flaky_run(&ws, "0 2 4", 5);
    let summary = read_json(&ws.runs().join(&base).join("summary.json"));
    // Two tasks of ten pass three times in five: each flips with 2·3·2/(5·4) = 0.6.
    assert!((summary["flip_rate"].as_f64().unwrap() - 0.12).abs() < 1e-9, "{summary}");
    assert_eq!(summary["flip_rates"], serde_json::json!({"t0": 0.6, "t1": 0.6}), "{summary}");
    // pass^5: only the eight steady tasks pass every time; pass@5: all ten pass once.
    assert!((summary["pass_hat_k"]["5"].as_f64().unwrap() - 0.8).abs() < 1e-9, "{summary}");
    assert!((summary["pass_at_k"]["5"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{summary}");
    let shown = text(&ws.run(&["runs", "show", &base]).stdout);
    assert!(
        shown.contains("all pass:  pass^1 92.0%") && shown.contains("flip rate: 12.0%; flakiest: t0 60%, t1 60%"),
        "{shown}"
    );

    // Another five repetitions in which the flaky two pass twice: 4 points lower, within the noise.
    let cand = flaky_run(&ws, "1 3", 5);
    let gates = ws.write("gates.yaml", "max_task_regressions: 0\nmetrics:\n  pass_rate: {max_drop: 0.02}\n");
    let judged = ws.run(&["compare", &base, &cand, "--gates", gates.to_str().unwrap()]);
    let said = text(&judged.stdout);
    // Within the noise, the gate cannot decide: INCONCLUSIVE, its own exit code, never a pass,
    // and how many more repetitions would decide it.
    assert_eq!(judged.status.code(), Some(5), "{said}{}", text(&judged.stderr));
    assert!(said.contains("within the noise of the base's 5 repetitions") && said.contains("INCONCLUSIVE"), "{said}");
    let flat = said.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("gates: INCONCLUSIVE") && flat.contains("more repetition(s) of each of the 10 tasks"),
        "{said}"
    );
    assert!(said.contains("flipped, within the noise"), "{said}");
    let json: serde_json::Value = serde_json::from_slice(&ws.run(&["compare", &base, &cand, "--json"]).stdout).unwrap();
    assert_eq!(json["comparison"]["noise"]["flaky_tasks"], serde_json::json!(["t0", "t1"]), "{json}");
    assert_eq!(json["comparison"]["regressions"], serde_json::json!([]), "{json}");

    // A base of one run measures no noise: the same drop is judged, and fails.
    let once = flaky_run(&ws, "0", 1);
    let judged = ws.run(&["compare", &once, &cand, "--gates", gates.to_str().unwrap()]);
    assert_eq!(judged.status.code(), Some(1), "{}", text(&judged.stdout));

    // The name's flakiest tasks over its last runs: t0 passed 3 + 2 + 1 of 11 attempts.
    let shown = text(&ws.run(&["runs", "show", &once]).stdout);
    assert!(shown.contains("flakiest   over the last 3 runs of flaky [oracle]: t0 55% (6 of 11 passed)"), "{shown}");
    let v: serde_json::Value = serde_json::from_slice(&ws.run(&["runs", "show", &once, "--json"]).stdout).unwrap();
    assert_eq!(v["flakiest"]["tasks"][1]["task_id"], "t1", "{v}");
    // And the UI's history of the name.
    let index = ws.index();
    let server = UiServer::start(ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0"]));
    let page = server.get("/?name=flaky").body;
    assert!(
        page.contains("Flakiest tasks over these runs")
            && page.contains(
                "<td><a href=\"/history?name=flaky&amp;task=t0\">t0</a></td><td class=\"num\">55%</td><td class=\"num\">6 of 11</td>"
            ),
        "{page}"
    );
}

/// Three runs of one config, each with another agent set in the config (not by `--agent`):
/// three names, three histories, no flip rate across them; the config's name alone finds none
/// of them as "the" latest, and names the three.
#[test]
fn runs_of_one_config_with_three_agents_are_three_histories_never_one() {
    let ws = Workspace::new();
    ws.write(
        "cases.jsonl",
        "{\"id\": \"a\", \"input\": \"2+2\", \"expected\": \"4\"}\n{\"id\": \"b\", \"input\": \"3+3\", \"expected\": \"6\"}\n",
    );
    let mut names = Vec::new();
    for agent in ["oracle", "nop", "mock"] {
        let cfg = ws.write(
            &format!("{agent}.yaml"),
            &format!(
                "name: agents\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: {agent}\nevaluators:\n  - kind: exact_match\nstorage:\n  bundle_root: runs\n"
            ),
        );
        let (v, code, out) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
        let out = ws.run(&["runs", "show", v["run_id"].as_str().unwrap(), "--json"]);
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(shown["flakiest"].is_null(), "no flip rate across agents: {shown}");
        names.push(shown["run"]["name"].as_str().unwrap().to_string());
    }
    assert_eq!(names, ["agents [oracle]", "agents [nop]", "agents [mock]"]);
    let out = ws.run(&["runs", "list", "--name", "agents", "--json"]);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap().as_array().unwrap().len(), 3);
    let out = ws.run(&["compare", "latest:agents", "latest"]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("3 agents") && said.contains("latest:agents [oracle]"), "{said}");
    let out = ws.run(&["compare", "latest:agents [oracle]", "latest:agents [nop]", "--json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", text(&out.stderr));
}

/// The nightly loop closes itself: with `baseline: promote` each night whose gates hold becomes
/// the baseline of the next; `baseline unset` unpins it; a saved results JSON renders its report
/// again with no index; `history NAME --task ID` shows one task over 30 nights in order, a night
/// that did not complete marked, not counted.
#[test]
fn nights_promote_their_baseline_and_one_task_is_followed_across_thirty_nights() {
    let ws = Workspace::new();
    let cfg = ws.write("toy.yaml", &toy_yaml("nightly-loop", 5, 1, 1, 1, "runs"));
    let gates = ws
        .write("gates.yaml", "on_missing_baseline: pass\nbaseline: promote\nmetrics:\n  pass_rate: {max_drop: 0.05}\n");
    let mut ids = Vec::new();
    for night in 0..30 {
        let mut args = vec!["--baseline", "baseline:nightly-loop", "--gates", gates.to_str().unwrap()];
        // Night 12 runs out of budget after its first task: it does not complete.
        if night == 12 {
            args = vec!["--set", "max_run_cost_usd=0.0001"];
        }
        let (v, code, out) = ws.submit(&cfg, &args);
        let run = v["run_id"].as_str().unwrap().to_string();
        if night == 12 {
            assert_eq!((v["status"].as_str(), code), (Some("budget_exceeded"), 3), "{v}");
        } else {
            assert_eq!(code, 0, "night {night}: {v}\n{}", text(&out.stderr));
            let shown = text(&ws.run(&["baseline", "show", "nightly-loop"]).stdout);
            assert!(shown.contains(&run), "night {night} promoted: {shown}");
        }
        ids.push(run);
    }
    // Unpinned, the name has no baseline until the next night that promotes one.
    let out = ws.run(&["baseline", "unset", "nightly-loop"]);
    assert!(text(&out.stdout).contains(&format!("unpinned (it was {})", ids[29])), "{}", text(&out.stdout));
    assert_ne!(ws.run(&["baseline", "show", "nightly-loop"]).status.code(), Some(0));

    // One task across the 30 nights, oldest first; the night that ran out of budget is marked.
    let out = ws.run(&["history", "nightly-loop", "--task", "toy-0000004", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nights = h["nights"].as_array().unwrap();
    let runs: Vec<&str> = nights.iter().map(|n| n["run_id"].as_str().unwrap()).collect();
    assert_eq!(runs, ids.iter().map(String::as_str).collect::<Vec<_>>(), "30 nights in order");
    for (i, n) in nights.iter().enumerate() {
        if i == 12 {
            assert_eq!((n["completed"].as_bool(), n["outcome"].as_str()), (Some(false), None), "{n}");
        } else {
            assert_eq!(n["outcome"], "passed", "night {i}: {n}");
        }
    }
    let shown = text(&ws.run(&["history", "nightly-loop", "--task", "toy-0000004"]).stdout);
    assert!(shown.contains("passed 29 of 29 night(s) with a result; 1 night(s) did not complete"), "{shown}");
    // A task that fails says why, night by night.
    let shown = text(&ws.run(&["history", "nightly-loop", "--task", "toy-0000001", "--last", "3"]).stdout);
    assert!(shown.contains("failed") && shown.contains("benchmark: expected"), "{shown}");

    // The UI shows the same nights: the page a mark and a row each, the API the CLI's JSON.
    let index = ws.index();
    let server = UiServer::start(ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0"]));
    let api: serde_json::Value =
        serde_json::from_str(&server.get("/api/history?name=nightly-loop&task=toy-0000004").body).unwrap();
    assert_eq!(api["nights"], h["nights"], "the API is the CLI's JSON");
    let page = server.get("/history?name=nightly-loop&task=toy-0000004").body;
    assert_eq!(page.matches("<rect class=\"night passed\"").count(), 29, "{page}");
    assert_eq!(page.matches("<rect class=\"night none\"").count(), 1, "the night that did not complete: {page}");
    assert!(page.contains(&format!("{}</a> (budget_exceeded)", &ids[12][..13])), "{page}");
    assert!(page.contains("passed 29 of 29 night(s) with a result; 1 night(s) did not complete"), "{page}");
    let first = page.find(&ids[0][..13]).unwrap();
    assert!(first < page.find(&ids[29][..13]).unwrap(), "oldest first");
    let failing = server.get("/history?name=nightly-loop&task=toy-0000001&last=3").body;
    assert!(failing.contains("benchmark: expected"), "{failing}");
    assert_eq!(server.get("/history?name=nightly-loop&task=no-such-task").status, 404);
    assert_eq!(server.get("/api/history?name=nightly-loop").status, 400);

    // A saved results JSON renders its report again, anywhere, without the index.
    let saved = ws.run(&["report", &ids[29], "--json"]);
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("night.json");
    std::fs::write(&file, &saved.stdout).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agenteval"))
        .args(["report", file.to_str().unwrap(), "--format", "md"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let md = text(&out.stdout);
    assert!(md.contains("# agenteval run `nightly-loop [mock]`") && md.contains(&ids[29]), "{md}");
    assert!(md.contains("## Verdict"), "its verdict too: {md}");
}

/// A benchmark whose task `tN` passes each attempt with the probability `world.json` gives it,
/// drawn from a hash of the task, the attempt and the world's seed: a seeded coin per attempt.
const COIN_BENCH: &str = r#"
import hashlib, json, os, sys, time
world = json.load(open("world.json"))
if sys.argv[1:] == ["list"]:
    for i in range(len(world["p"])):
        print(json.dumps({"id": f"t{i:02}", "input": f"q{i}", "expected": "a"}))
else:
    doc = json.load(sys.stdin)
    tid = doc["task"]["id"]
    if "@r" in tid and os.path.exists(world.get("slow", "/nonexistent")):
        time.sleep(60)
    base = int(tid.partition("@r")[0][1:])
    draw = int(hashlib.sha256(f"{world['seed']}:{tid}".encode()).hexdigest()[:8], 16) / 2**32
    ok = draw < world["p"][base]
    print(json.dumps({"score": 1 if ok else 0, "passed": ok}))
"#;

fn coin_config(ws: &Workspace, repetitions: &str) -> std::path::PathBuf {
    ws.write("bench.py", COIN_BENCH);
    ws.write(
        "coins.yaml",
        &format!(
            "name: coins\nrepetitions: {repetitions}\nbenchmark:\n  kind: command\n  command: [python3, bench.py]\n  files: [world.json]\n\
             agent:\n  kind: oracle\nbackend:\n  max_concurrent_jobs: 4\n  tasks_per_job: 10\nstorage:\n  bundle_root: runs\n"
        ),
    )
}

/// The coin benchmark's nights: forty tasks (twenty always pass, fourteen never, six pass half
/// the time) run five times each as the base; then the world the candidate meets, with ten of
/// the always-passing tasks broken (25 points worse) and `extra` fields in `world.json`. Returns
/// the base run, the gates file and the adaptive config.
fn coin_nights(ws: &Workspace, extra: serde_json::Value) -> (String, PathBuf, PathBuf) {
    let p: Vec<f64> = (0..40).map(|i| [1.0, 0.0, 0.5][usize::from(i >= 20) + usize::from(i >= 34)]).collect();
    ws.write("world.json", &serde_json::json!({"seed": 1, "p": p}).to_string());
    let (v, code, out) = ws.submit(&coin_config(ws, "5"), &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let base = v["run_id"].as_str().unwrap().to_string();
    let worse: Vec<f64> = p.iter().enumerate().map(|(i, &p)| if i < 10 { 0.0 } else { p }).collect();
    let mut world = serde_json::json!({"seed": 2, "p": worse});
    if let (Some(w), Some(e)) = (world.as_object_mut(), extra.as_object()) {
        w.extend(e.clone());
    }
    ws.write("world.json", &world.to_string());
    let gates = ws.write("gates.yaml", "metrics:\n  pass_rate: {max_drop: 0.05}\n");
    (base, gates, coin_config(ws, "{min: 1, max: 5, until: decided}"))
}

#[test]
fn adaptive_repetitions_decide_a_clear_regression_with_a_fraction_of_the_attempts() {
    let ws = Workspace::new();
    let (base, gates, adaptive) = coin_nights(&ws, serde_json::json!({}));
    let out = ws.run(&[
        "submit",
        "--config",
        adaptive.to_str().unwrap(),
        "--baseline",
        &base,
        "--gates",
        gates.to_str().unwrap(),
    ]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "NO-GO is exit 1: {said}");
    let cand = ws.run(&["runs", "list", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&cand.stdout).unwrap();
    let cand = runs.as_array().unwrap().iter().find(|r| r["run_id"] != base.as_str()).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let meta = read_json(&ws.runs().join(&cand).join("metadata.json"));
    let spent = &meta["adaptive"];
    assert_eq!(spent["ended"], "decided NO-GO", "{meta}");
    assert_eq!(spent["fixed_attempts"], 200, "{meta}");
    let attempts = spent["attempts"].as_u64().unwrap();
    assert!((40..=100).contains(&attempts), "at most half the fixed design's attempts: {meta}");
    // The table, the index and the summary hold every attempt made, and only those.
    assert_eq!(meta["tasks_total"].as_u64(), Some(attempts), "{meta}");
    let summary = read_json(&ws.runs().join(&cand).join("summary.json"));
    assert_eq!(summary["tasks_finished"].as_u64(), Some(attempts), "{summary}");
    assert!(said.contains("adaptive repetitions: decided NO-GO after"), "the spend is said: {said}");
    assert!(said.contains(&format!("{attempts} task-attempts")) && said.contains("against 200"), "{said}");
    // `compare` says the same, from the bundle.
    let again = text(&ws.run(&["compare", &base, &cand, "--gates", gates.to_str().unwrap()]).stdout);
    assert!(again.contains("spent      adaptive repetitions: decided NO-GO"), "{again}");
    // `runs show` says it under the run's summary, from the bundle's summary.
    let shown = text(&ws.run(&["runs", "show", &cand]).stdout);
    assert!(shown.contains("adaptive   decided NO-GO after"), "{shown}");
    let summary = read_json(&ws.runs().join(&cand).join("summary.json"));
    assert_eq!(summary["adaptive"]["attempts"].as_u64(), Some(attempts), "{summary}");

    // Without --gates there is nothing to decide: refused before anything runs.
    let out = ws.run(&["submit", "--config", adaptive.to_str().unwrap(), "--baseline", &base]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("needs a verdict to reach: give --gates FILE"), "{}", text(&out.stderr));
}

#[test]
fn an_interrupted_adaptive_run_resumes_and_goes_on_deciding() {
    use nix::sys::signal::{Signal, kill};
    let ws = Workspace::new();
    // The further attempts hang until the flag goes: the run is cut in its second round.
    let slow = ws.path().join("slow");
    std::fs::write(&slow, "").unwrap();
    let (base, gates, adaptive) = coin_nights(&ws, serde_json::json!({"slow": slow}));
    let child = ws.spawn(&[
        "submit",
        "--json",
        "--config",
        adaptive.to_str().unwrap(),
        "--baseline",
        &base,
        "--gates",
        gates.to_str().unwrap(),
    ]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let cand_bundle = || -> Option<PathBuf> {
        std::fs::read_dir(ws.runs()).ok()?.flatten().map(|e| e.path()).find(|p| p.is_dir() && !p.ends_with(&base))
    };
    let second_round = || {
        cand_bundle().is_some_and(|b| std::fs::read_to_string(b.join("tasks.jsonl")).is_ok_and(|t| t.contains("@r1")))
    };
    wait_until("the second round", std::time::Duration::from_secs(60), second_round);
    std::thread::sleep(std::time::Duration::from_secs(2));
    kill(pid, Signal::SIGINT).unwrap();
    let out = wait_output(child, std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "an interrupted run exits 3: {}", text(&out.stderr));
    let bundle = cand_bundle().unwrap();
    assert!(bundle.join("adaptive.json").exists(), "the gates and baseline are kept for a resume");
    let cand = bundle.file_name().unwrap().to_str().unwrap().to_string();

    std::fs::remove_file(&slow).unwrap();
    let out = ws.run(&["resume", &cand, "--json", "--index", ws.index().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let meta = read_json(&bundle.join("metadata.json"));
    assert_eq!(meta["status"], "complete", "{meta}");
    assert_eq!(meta["adaptive"]["ended"], "decided NO-GO", "the resumed run went on deciding: {meta}");
    assert!(meta["adaptive"]["attempts"].as_u64().unwrap() < 100, "{meta}");
    let judged = ws.run(&["compare", &base, &cand, "--gates", gates.to_str().unwrap()]);
    assert_eq!(judged.status.code(), Some(1), "{}", text(&judged.stdout));
}
