//! End-to-end tests of the local fleet: they drive the real `agenteval` binary, its worker
//! processes, the filesystem bundle and the SQLite index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::otlp;
use crate::util::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn index_tasks(ws: &Workspace, run: &str) -> serde_json::Value {
    let out = ws.run(&["runs", "show", run, "--tasks", "--json", "--index", ws.index().to_str().unwrap()]);
    assert!(out.status.success(), "runs show failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Checks that the index and the bundle say the same about every task.
fn assert_index_agrees(ws: &Workspace, run: &str, bundle: &Path) {
    let shown = index_tasks(ws, run);
    let tasks = shown["tasks"].as_array().unwrap();
    let results: HashMap<String, serde_json::Value> =
        results(bundle).into_iter().map(|r| (r["task_id"].as_str().unwrap().to_string(), r)).collect();
    assert_eq!(tasks.len() as u64, shown["run"]["tasks_total"].as_u64().unwrap());
    for t in tasks {
        let id = t["task_id"].as_str().unwrap();
        let r = results.get(id).unwrap_or_else(|| panic!("task {id} has no result in the bundle"));
        assert_eq!(t["state"], "completed", "task {id}");
        assert_eq!(t["passed"], r["passed"], "task {id}: index and bundle disagree on passed");
        assert_eq!(t["attempt"], r["attempt"], "task {id}: attempt");
        assert_eq!(t["terminated_by"], r["agent"]["terminated_by"], "task {id}: terminated_by");
    }
    let summary = read_json(&bundle.join("summary.json"));
    let passed = tasks.iter().filter(|t| t["passed"] == true).count() as u64;
    assert_eq!(summary["passed"].as_u64().unwrap(), passed, "summary passed vs index");
}

#[test]
fn toy_run_produces_a_valid_bundle_that_agrees_with_the_index() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 25, 0, 3, 3);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "complete");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let run = v["run_id"].as_str().unwrap();
    assert!(bundle.starts_with(ws.runs()));
    for f in [
        "metadata.json",
        "manifest.json",
        "summary.json",
        "report.md",
        "replay_command.txt",
        "config.resolved.json",
        "tasks.jsonl",
    ] {
        assert!(bundle.join(f).is_file(), "{f} missing");
    }
    let meta = read_json(&bundle.join("metadata.json"));
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["sealed"], true);
    assert_eq!(meta["schema_version"], "1.2");
    assert_eq!(meta["config_hash"].as_str().unwrap().len(), 64);
    let rs = results(&bundle);
    assert_eq!(rs.len(), 25);
    // The toy cycle: pass, fail, agent_error, limit, slow → 10 of 25 pass.
    assert_eq!(v["summary"]["passed"], 10);
    let by_term = |t: &str| rs.iter().filter(|r| r["agent"]["terminated_by"] == t).count();
    assert_eq!(by_term("agent_error"), 5);
    assert_eq!(by_term("limit_tokens"), 5);
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_index_agrees(&ws, run, &bundle);

    // Read commands.
    let idx = ws.index();
    let list = ws.run(&["runs", "list", "--json", "--index", idx.to_str().unwrap()]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["run_id"], run);
    // A 10-of-25 run does not look like a 25-of-25 one: the list says how many passed.
    assert_eq!((list[0]["tasks_passed"].as_u64(), list[0]["pass_rate"].as_f64()), (Some(10), Some(0.4)), "{list}");
    let shown = text(&ws.run(&["runs", "list", "--index", idx.to_str().unwrap()]).stdout);
    assert!(shown.contains("10/25"), "{shown}");
    let status = ws.run(&["status", run, "--json", "--index", idx.to_str().unwrap()]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["tasks"]["completed"], 25);
    let report = ws.run(&["report", run, "--index", idx.to_str().unwrap(), "--format", "md"]);
    // tasks, finished, passed, failed (graded), errored (agent errors and limits), infra.
    assert!(text(&report.stdout).contains("| 25 | 25 | 10 | 5 | 10 | 0 | 40.0% |"), "{}", text(&report.stdout));
    // For a terminal: tables within 80 columns, not Markdown.
    let shown = text(&ws.run(&["report", run, "--index", idx.to_str().unwrap()]).stdout);
    assert!(shown.lines().all(|l| l.chars().count() <= 80), "past 80 columns:\n{shown}");
    assert!(!shown.contains("| 25 |") && !shown.contains("# "), "Markdown on a terminal:\n{shown}");
    assert!(shown.contains("40.0%") && shown.contains("not passed (15)"), "{shown}");
    // `-o` takes the format from the file's name, and refuses one that disagrees with --format.
    let page = ws.path().join("r.html");
    let out = ws.run(&["report", run, "--index", idx.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&page).unwrap().starts_with("<!doctype html>"));
    let out =
        ws.run(&["report", run, "--index", idx.to_str().unwrap(), "-o", page.to_str().unwrap(), "--format", "md"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn jsonl_run_with_the_example_command_agent() {
    let ws = Workspace::new();
    let cases = repo().join("configs/cases.jsonl");
    let agent = repo().join("examples/echo_agent.py");
    let cfg = ws.write(
        "j.yaml",
        &format!(
            r#"name: e2e-jsonl
benchmark:
  kind: jsonl
  cases: {}
agent:
  kind: command
  command: [python3, {}]
  limits:
    max_wall_seconds: 20
evaluators:
  - kind: tool_sequence
    tools: [lookup]
backend:
  tasks_per_job: 2
storage:
  bundle_root: runs
"#,
            cases.display(),
            agent.display()
        ),
    );
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    assert_eq!(v["summary"]["tasks_finished"], 6);
    // `upper` expects "OK" and the agent says "ok": the case's own case-insensitive
    // `exact_match` decides, not the benchmark's exact check.
    assert_eq!(v["summary"]["passed"], 6);
    let trace = crate::util::read_text(bundle.join("tasks/capital-fr/trace.jsonl")).unwrap();
    let kinds: Vec<String> = trace
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        &kinds[..5],
        ["agent.plan", "agent.tool_call", "agent.tool_result", "agent.final_answer", "agent.terminal"]
    );
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
    assert_index_agrees(&ws, v["run_id"].as_str().unwrap(), &bundle);
}

/// Issue 73: a machine short of memory (here: a floor above any machine's memory) is a push
/// the local backend reports: the controller keeps fewer workers in flight, down to one, the run
/// still completes, and `status` says why.
#[test]
fn a_machine_short_of_memory_keeps_fewer_workers_in_flight_and_status_says_why() {
    let ws = Workspace::new();
    ws.write("slow.py", "import json, sys, time\nreq = json.loads(sys.stdin.readline())\ntime.sleep(1.5)\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': 'ok'}}), flush=True)\n");
    let cases: String = (0..8).map(|i| format!("{{\"id\": \"m{i}\", \"input\": \"q\"}}\n")).collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "m.yaml",
        "name: memory\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, slow.py]\nbackend:\n  max_concurrent_jobs: 8\n  min_free_memory_mb: 100000000000\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!((code, v["summary"]["tasks_finished"].as_u64()), (0, Some(8)), "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let index = ws.index();
    let status = ws.run(&["status", run, "--json", "--index", index.to_str().unwrap()]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let conc = &status["run"]["concurrency"];
    assert_eq!(conc["limit"], 1, "{conc}");
    assert_eq!(conc["max"], 8, "{conc}");
    assert!(conc["why"].as_str().unwrap().contains("MiB of memory available"), "{conc}");
    let shown = text(&ws.run(&["status", run, "--index", index.to_str().unwrap()]).stdout);
    assert!(shown.contains("jobs      at most 1 of 8 in flight at the end: the machine has "), "{shown}");
}

/// Issue 74: a task's evaluators run at once. Two `command` evaluators meet: each leaves a mark
/// and waits for the other's; run one after the other, the first would wait alone and fail.
#[test]
fn a_tasks_evaluators_run_at_once() {
    let ws = Workspace::new();
    let meet = ws.path().join("meet");
    std::fs::create_dir_all(&meet).unwrap();
    ws.write(
        "meet.py",
        "import json, os, sys, time\nsys.stdin.read()\nme, other, where = sys.argv[1:4]\nopen(os.path.join(where, me), 'w').close()\nfor _ in range(200):\n    if os.path.exists(os.path.join(where, other)):\n        print(json.dumps({'score': 1, 'passed': True, 'reason': 'met ' + other}))\n        sys.exit(0)\n    time.sleep(0.05)\nprint(json.dumps({'score': 0, 'passed': False, 'reason': 'waited alone'}))\n",
    );
    ws.write("cases.jsonl", "{\"id\": \"only\", \"input\": \"q\", \"expected\": \"q\"}\n");
    let cfg = ws.write(
        "meet.yaml",
        &format!(
            "name: meet\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent: {{kind: mock}}\nevaluators:\n  - {{kind: command, id: a, command: [python3, meet.py, a, b, {0}]}}\n  - {{kind: command, id: b, command: [python3, meet.py, b, a, {0}]}}\nstorage:\n  bundle_root: runs\n",
            meet.display()
        ),
    );
    let (v, _, out) = ws.submit(&cfg, &[]);
    let evals = &v["summary"]["evaluators"];
    assert_eq!(
        (evals["a"]["passed"].as_u64(), evals["b"]["passed"].as_u64()),
        (Some(1), Some(1)),
        "{v} {}",
        text(&out.stderr)
    );
}

/// Issue 74: `trace_quality` reads how the agent worked: a loop, a failing call made again and
/// again, and an answer that contradicts its last tool result each fail the task with the steps
/// named; a clean trace passes.
#[test]
fn trace_quality_names_loops_repeated_failures_and_contradictions() {
    let ws = Workspace::new();
    ws.write(
        "agent.py",
        "import json, sys\nreq = json.loads(sys.stdin.readline())\nmode = req['input']\ndef emit(k, p):\n    print(json.dumps({'kind': k, 'payload': p}), flush=True)\ndef call(tool, args, result):\n    emit('agent.tool_call', {'tool': tool, 'arguments': args})\n    emit('agent.tool_result', dict(result, tool=tool))\nanswer = 'done'\nif mode == 'loop':\n    for _ in range(5):\n        call('search', {'q': 'same'}, {'result': 'nothing'})\nelif mode == 'retry':\n    for _ in range(3):\n        call('bash', {'cmd': 'make'}, {'exit_code': 2, 'output': 'no rule'})\n    answer = 'make is broken'\nelif mode == 'contradict':\n    call('calc', {'x': '6*7'}, {'result': '42'})\n    answer = 'the answer is 41'\nelse:\n    call('calc', {'x': '6*7'}, {'result': '42'})\n    answer = 'the answer is 42'\nemit('agent.final_answer', {'answer': answer})\nemit('agent.terminal', {'final_answer': answer})\n",
    );
    let lines: String = ["loop", "retry", "contradict", "clean"]
        .iter()
        .map(|m| format!("{{\"id\": \"{m}\", \"input\": \"{m}\"}}\n"))
        .collect();
    ws.write("cases.jsonl", &lines);
    let cfg = ws.write(
        "q.yaml",
        "name: quality\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, agent.py]\nevaluators:\n  - kind: trace_quality\nstorage:\n  bundle_root: runs\n",
    );
    let (v, _, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["summary"]["evaluators"]["trace_quality"]["passed"], 1, "{v} {}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let why = |task: &str| -> (bool, String) {
        let line = results(&bundle).into_iter().find(|r| r["task_id"] == task).unwrap();
        let s =
            line["scores"].as_array().unwrap().iter().find(|s| s["evaluator_id"] == "trace_quality").unwrap().clone();
        (s["passed"].as_bool().unwrap(), s["reason"].as_str().unwrap_or_default().to_string())
    };
    let (passed, reason) = why("loop");
    assert!(!passed && reason.contains("a loop: `search` called 5 times"), "{reason}");
    let (passed, reason) = why("retry");
    assert!(!passed && reason.contains("`bash` failed 3 times"), "{reason}");
    let (passed, reason) = why("contradict");
    assert!(!passed && reason.contains("gave 42"), "{reason}");
    assert!(why("clean").0, "{}", why("clean").1);
}

#[test]
fn a_misbehaving_command_agent_is_graded_not_fatal() {
    let ws = Workspace::new();
    let agent = repo().join("examples/echo_agent.py");
    ws.write(
        "cases.jsonl",
        r#"{"id": "ok", "input": {"question": "capital of France", "mode": ""}, "expected": "Paris"}
{"id": "crash", "input": {"question": "x", "mode": "crash"}}
{"id": "hang", "input": {"question": "x", "mode": "hang"}}
{"id": "garbage", "input": {"question": "x", "mode": "garbage"}}
{"id": "no-terminal", "input": {"question": "x", "mode": "no_terminal"}}
"#,
    );
    let cfg = ws.write(
        "bad.yaml",
        &format!(
            r#"name: e2e-bad-agent
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, {}]
  limits:
    max_wall_seconds: 8
backend:
  max_concurrent_jobs: 5
storage:
  bundle_root: runs
"#,
            agent.display()
        ),
    );
    let started = std::time::Instant::now();
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "a bad agent must not fail the run: {v}");
    assert_eq!(v["status"], "complete");
    assert!(started.elapsed() < Duration::from_secs(30), "the hanging agent was not killed at its limit");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let term = |id: &str| read_json(&bundle.join(format!("tasks/{id}/result.json")));
    assert_eq!(term("ok")["passed"], true);
    for (id, want, detail) in [
        ("crash", "agent_error", "exited with"),
        ("garbage", "agent_error", "not a protocol event"),
        ("no-terminal", "agent_error", "without an agent.terminal"),
        ("hang", "limit_time", "max_wall_seconds"),
    ] {
        let r = term(id);
        assert_eq!(r["agent"]["terminated_by"], want, "{id}: {r}");
        assert_eq!(r["passed"], false, "{id}");
        assert!(r["agent"]["error"].as_str().unwrap().contains(detail), "{id}: {}", r["agent"]["error"]);
        assert!(!r["scores"].as_array().unwrap().is_empty(), "{id} was graded");
    }
    assert!(term("crash")["agent"]["error"].as_str().unwrap().contains("simulated crash"), "stderr is kept");
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
}

#[test]
fn a_malformed_config_names_every_problem_and_creates_no_run() {
    let ws = Workspace::new();
    let cfg = ws.write(
        "broken.yaml",
        r#"name: broken
benchmark:
  kind: toy
  size: -3
agent:
  kind: robot
  limits:
    max_tokns: 10
backend:
  max_concurrent_jobs: 0
storage:
  bundle_root: runs
"#,
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for at in ["broken.yaml:4:9:", "broken.yaml:6:9:", "broken.yaml:8:5: unknown field `max_tokns`"] {
        assert!(err.contains(at), "missing {at} in:\n{err}");
    }
    assert!(!ws.runs().exists(), "a bad config must not create a run");
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 4, "{v}");
    // Semantic problems surface once the shape is right, also with positions.
    let cfg2 = ws.write(
        "sem.yaml",
        r#"name: s
benchmark:
  kind: toy
  size: 3
agent:
  kind: mock
backend:
  max_concurrent_jobs: 0
"#,
    );
    let out = ws.run(&["config", "validate", cfg2.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("sem.yaml:8:24: 0 is less than the minimum of 1"), "{}", text(&out.stderr));
    // Usage errors are 2 as well.
    assert_eq!(ws.run(&["submit"]).status.code(), Some(2));
}

#[test]
fn one_changed_byte_fails_validation_naming_the_file() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 5, 0, 1, 2);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0);
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
    // A task's files are one pack: one byte of it changed is caught by the manifest.
    let victim = bundle.join("tasks/toy-0000001.tar.gz");
    let mut bytes = std::fs::read(&victim).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x20;
    std::fs::write(&victim, bytes).unwrap();
    let out = ws.validate(bundle.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("tasks/toy-0000001.tar.gz: sha256 differs"), "{}", text(&out.stdout));
    let out = ws.run(&["validate-bundle", bundle.to_str().unwrap(), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["valid"], false);
}

#[test]
fn a_worker_killed_mid_task_is_retried_and_its_task_counted_once() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 6, 1500, 1, 3);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    // The worker is SIGKILLed inside its agent, trace started, result not yet written.
    let victim = signal_a_worker_mid_task(&ws, Signal::SIGKILL);
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let r = read_json(&bundle.join(format!("tasks/{victim}/result.json")));
    assert_eq!(r["attempt"], 2, "the killed task was retried: {r}");
    assert_eq!(v["summary"]["tasks_finished"], 6, "every task counted once");
    assert_eq!(results(&bundle).len(), 6);
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_index_agrees(&ws, v["run_id"].as_str().unwrap(), &bundle);
    let shown = index_tasks(&ws, v["run_id"].as_str().unwrap());
    let jobs_log = bundle.join(format!("jobs/{}/attempt-1/worker.log", r["job_id"].as_str().unwrap()));
    assert!(jobs_log.exists(), "the killed attempt's log is kept");
    assert_eq!(shown["tasks_counts"]["completed"], 6);
}

#[test]
fn ctrl_c_seals_an_interrupted_bundle_and_resume_finishes_it() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 12, 800, 1, 3);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    let pid = Pid::from_raw(child.id() as i32);
    let bundle_of =
        || -> Option<PathBuf> { std::fs::read_dir(ws.runs()).ok()?.flatten().map(|e| e.path()).find(|p| p.is_dir()) };
    wait_until("three finished tasks", Duration::from_secs(30), || bundle_of().is_some_and(|b| results(&b).len() >= 3));
    wait_until("workers running again", Duration::from_secs(30), || !workers_under(ws.path()).is_empty());
    kill(pid, Signal::SIGINT).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "an interrupted run exits 3: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "interrupted");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let run = v["run_id"].as_str().unwrap().to_string();
    assert!(workers_under(ws.path()).is_empty(), "workers stopped");
    let meta = read_json(&bundle.join("metadata.json"));
    assert_eq!((meta["status"].as_str(), meta["sealed"].as_bool()), (Some("interrupted"), Some(true)));
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "interrupted bundle validates: {}", text(&out.stdout));
    let finished_before: HashMap<String, String> = results(&bundle)
        .into_iter()
        .map(|r| (r["task_id"].as_str().unwrap().to_string(), r["finished_at"].as_str().unwrap().to_string()))
        .collect();
    assert!(finished_before.len() >= 3 && finished_before.len() < 12, "{}", finished_before.len());

    // Resume from another directory: the index locates everything.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .env("PATH", agent_path())
        .args(["resume", &run, "--json", "--index", ws.index().to_str().unwrap()])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete");
    assert_eq!(v["summary"]["tasks_finished"], 12);
    for r in results(&bundle) {
        let id = r["task_id"].as_str().unwrap();
        if let Some(before) = finished_before.get(id) {
            assert_eq!(r["finished_at"].as_str().unwrap(), before, "{id} was re-run by resume");
        }
    }
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_index_agrees(&ws, &run, &bundle);
    assert!(read_json(&bundle.join("metadata.json"))["resumed"] == 1);
    // Interrupted and resumed, the run is still one trace: the second controller's root hangs
    // under the first's, and every task's spans are in it.
    let spans: Vec<serde_json::Value> = std::fs::read_to_string(bundle.join("spans.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let roots: Vec<&serde_json::Value> = spans.iter().filter(|s| s["name"] == "eval.run").collect();
    assert_eq!(roots.len(), 2, "one eval.run per controller");
    let first = roots.iter().find(|s| s["parent_span_id"].is_null()).expect("the first root");
    let second = roots.iter().find(|s| !s["parent_span_id"].is_null()).expect("the resumed root");
    assert_eq!(second["parent_span_id"], first["span_id"]);
    assert_eq!(second["trace_id"], first["trace_id"]);
    for r in results(&bundle) {
        let task = r["task_id"].as_str().unwrap();
        let log = crate::util::read_text(bundle.join(format!("tasks/{task}/worker.log"))).unwrap();
        let trace = first["trace_id"].as_str().unwrap();
        assert!(log.lines().next().unwrap().contains(&format!("trace_id={trace}")), "{task}: {log}");
    }
}

#[test]
fn secrets_never_reach_bundles_logs_or_the_index() {
    const SECRET: &str = "sk-live-DO-NOT-LEAK-7f3a9c";
    let ws = Workspace::new();
    let agent = repo().join("examples/echo_agent.py");
    ws.write("secrets.env", &format!("# local secrets\nMY_API_KEY={SECRET}\n"));
    ws.write("cases.jsonl", "{\"id\": \"leaky\", \"input\": {\"question\": \"q\", \"mode\": \"echo_secret\"}}\n{\"id\": \"crashy\", \"input\": {\"question\": \"q\", \"mode\": \"crash_secret\"}}\n");
    let cfg = ws.write(
        "s.yaml",
        &format!(
            r#"name: e2e-secrets
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, {}]
  secrets:
    API_KEY: MY_API_KEY
backend:
  secrets_file: secrets.env
storage:
  bundle_root: runs
"#,
            agent.display()
        ),
    );
    // Traces and metrics go to a collector too: they must be as clean as the bundle.
    let receiver = otlp::Receiver::start(otlp::Protocol::Grpc);
    let out = ws
        .cmd(&["submit", "--json", "-vv", "--config", cfg.to_str().unwrap()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    assert!(receiver.wait_for(Duration::from_secs(20), |s| {
        s.spans.iter().filter(|s| s.name == "eval.task").count() == 2 && s.spans.iter().any(|s| s.name == "eval.run")
    }));
    // The agent printed the key on stderr and crashed: the failure path carries it, redacted,
    // into the index's detail, the result and the spans.
    let crashed = read_json(&bundle.join("tasks/crashy/result.json"));
    let err = crashed["agent"]["error"].as_str().unwrap();
    assert!(err.contains("the provider refused key [REDACTED]"), "{err}");
    let shown: serde_json::Value =
        serde_json::from_slice(&ws.run(&["runs", "show", v["run_id"].as_str().unwrap(), "--failed", "--json"]).stdout)
            .unwrap();
    assert!(shown.to_string().contains("refused key [REDACTED]"), "the index's detail: {shown}");
    let exported = format!("{:?}", *receiver.store.lock().unwrap());
    assert!(exported.contains("agent.execute"), "spans arrived");
    assert!(!exported.contains(SECRET), "secret leaked into exported telemetry");
    // The agent did get the secret: it echoed it, and the echo was redacted.
    let r = read_json(&bundle.join("tasks/leaky/result.json"));
    assert_eq!(r["agent"]["final_answer"], "the key is [REDACTED]", "{r}");
    let mut scanned = 0;
    let mut stack = vec![ws.runs()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                scanned += 1;
                let bytes = std::fs::read(&p).unwrap();
                assert!(!text(&bytes).contains(SECRET), "secret leaked into {}", p.display());
            }
        }
    }
    assert!(scanned > 10);
    assert!(
        !text(&out.stdout).contains(SECRET) && !text(&out.stderr).contains(SECRET),
        "secret leaked to the terminal"
    );
}

fn only_bundle(ws: &Workspace) -> Option<PathBuf> {
    std::fs::read_dir(ws.runs()).ok()?.flatten().map(|e| e.path()).find(|p| p.is_dir())
}

#[test]
fn the_run_budget_stops_dispatching_and_seals_budget_exceeded() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 40, 50, 1, 2);
    let (v, code, _) = ws.submit(&cfg, &["--set", "max_run_cost_usd=0.004"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["status"], "budget_exceeded");
    let finished = v["summary"]["tasks_finished"].as_u64().unwrap();
    assert!(finished > 0 && finished < 40, "stopped early: {finished}");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    let idx = ws.index();
    let st = ws.run(&["status", v["run_id"].as_str().unwrap(), "--json", "--index", idx.to_str().unwrap()]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["run"]["status"], "budget_exceeded");
    assert!(st["tasks"]["cost_usd"].as_f64().unwrap() >= 0.004);
}

#[test]
fn a_task_whose_worker_dies_more_than_max_attempts_is_given_up() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 3, 1500, 1, 3);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "backend.max_attempts=1"]);
    let victim = signal_a_worker_mid_task(&ws, Signal::SIGKILL);
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "failed");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let r = read_json(&bundle.join(format!("tasks/{victim}/result.json")));
    assert_eq!(r["agent"]["terminated_by"], "infra_failure", "{r}");
    assert!(r["agent"]["error"].as_str().unwrap().contains("killed by SIGKILL"), "{r}");
    assert_eq!(v["summary"]["tasks_finished"], 3, "the given-up task is accounted for");
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    // Its spans say what happened too: an eval.task in the run's trace, under the job that died.
    let spans: Vec<serde_json::Value> = crate::util::read_text(bundle.join(format!("tasks/{victim}/spans.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!((spans[0]["name"].as_str(), spans[0]["status"].as_str()), (Some("eval.task"), Some("error")));
    let attrs = &spans[0]["attributes"];
    assert_eq!(attrs["agenteval.given_up"], true, "{attrs}");
    assert_eq!(attrs["agenteval.terminated_by"], "infra_failure", "{attrs}");
    assert_eq!(attrs["agenteval.attempt"], 1, "given up after its last attempt (max_attempts=1): {attrs}");
    let run_spans = std::fs::read_to_string(bundle.join("spans.jsonl")).unwrap();
    let job = run_spans
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|s| s["span_id"] == spans[0]["parent_span_id"])
        .expect("the given-up task's parent is in the run's spans");
    assert_eq!(job["name"], "eval.job");
    assert_eq!(job["status"], "error");
    assert_eq!(job["trace_id"], spans[0]["trace_id"]);
}

#[test]
fn cancel_from_another_terminal_stops_the_run() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 20, 700, 1, 2);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("two results", Duration::from_secs(30), || only_bundle(&ws).is_some_and(|b| results(&b).len() >= 2));
    let run = only_bundle(&ws).unwrap().file_name().unwrap().to_string_lossy().to_string();
    let out = ws.run(&["cancel", &run, "--json", "--index", ws.index().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["status"], "interrupted");
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "interrupted");
    assert!(v["summary"]["tasks_finished"].as_u64().unwrap() < 20);
    assert!(workers_under(ws.path()).is_empty());
    assert!(ws.validate(v["bundle"].as_str().unwrap()).status.success());
}

#[test]
fn a_killed_controller_leaves_an_inspectable_run_that_resume_finishes() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 8, 700, 1, 2);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("two results", Duration::from_secs(30), || only_bundle(&ws).is_some_and(|b| results(&b).len() >= 2));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = wait_output(child, Duration::from_secs(10));
    let bundle = only_bundle(&ws).unwrap();
    let run = bundle.file_name().unwrap().to_string_lossy().to_string();
    let idx = ws.index();

    // The index says what happened.
    let st = ws.run(&["status", &run, "--json", "--index", idx.to_str().unwrap()]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["run"]["status"], "running");
    assert_eq!(st["run"]["controller_alive"], false, "{st}");
    let human = text(&ws.run(&["status", &run, "--index", idx.to_str().unwrap()]).stdout);
    assert!(human.contains("controller gone"), "{human}");

    // The partial bundle is valid and inspectable.
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("not sealed"));
    let report = ws.run(&["report", &run, "--index", idx.to_str().unwrap()]);
    assert!(report.status.success());
    assert!(text(&report.stdout).contains("have no result"), "{}", text(&report.stdout));

    let out = ws.run(&["resume", &run, "--json", "--index", idx.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete");
    assert_eq!(v["summary"]["tasks_finished"], 8);
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
    assert_index_agrees(&ws, &run, &bundle);
}

#[test]
fn sigterm_to_the_controller_seals_like_ctrl_c() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 10, 700, 1, 2);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("a result", Duration::from_secs(30), || only_bundle(&ws).is_some_and(|b| !results(&b).is_empty()));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "interrupted");
    assert!(ws.validate(v["bundle"].as_str().unwrap()).status.success());
    assert!(workers_under(ws.path()).is_empty(), "workers stopped");
}

/// A second Ctrl-C quits at once (exit 3) without sealing; the run is left for `resume`, which
/// stops what the first controller left running and finishes it.
#[test]
fn ctrl_c_twice_quits_at_once_and_resume_finishes() {
    let ws = Workspace::new();
    // Enough finished tasks that stopping and sealing take a while: the second Ctrl-C must
    // land while the first is being honoured.
    let cfg = toy_config(&ws, 2000, 1, 50, 2);
    // Stderr goes to a file the test can watch while the controller runs (`-v` shows the
    // controller's messages without a terminal).
    let log = ws.path().join("controller.log");
    let mut child = ws
        .cmd(&["submit", "-v", "--config", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("some results", Duration::from_secs(60), || only_bundle(&ws).is_some_and(|b| results(&b).len() >= 200));
    let pid = Pid::from_raw(child.id() as i32);
    // Two signals sent back to back may arrive as one: the second goes once the first is seen,
    // and again until the controller is gone.
    kill(pid, Signal::SIGINT).unwrap();
    let seen = || std::fs::read_to_string(&log).unwrap_or_default().contains("interrupted: stopping workers");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen() {
        assert!(Instant::now() < deadline, "the first Ctrl-C was not handled");
        std::thread::sleep(Duration::from_millis(1));
    }
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        let _ = kill(pid, Signal::SIGINT);
        std::thread::sleep(Duration::from_millis(2));
    }
    let started = Instant::now();
    let out = wait_output(child, Duration::from_secs(60));
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("quitting without sealing"), "{stderr}");
    assert!(out.stdout.is_empty(), "no outcome is printed for a run that was not sealed");
    assert!(started.elapsed() < Duration::from_secs(10), "the second Ctrl-C did not wait for the seal");
    let bundle = only_bundle(&ws).unwrap();
    let meta = read_json(&bundle.join("metadata.json"));
    assert_eq!(meta["sealed"], false, "{meta}");
    assert!(ws.validate(bundle.to_str().unwrap()).status.success(), "an unsealed bundle is still valid");
    let run = meta["run_id"].as_str().unwrap().to_string();
    let out = ws.run(&["resume", &run, "--json", "--index", ws.index().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["tasks_finished"], 2000);
    assert!(workers_under(ws.path()).is_empty());
}

/// Exit 2 is for what the user typed; a run the index knows whose bundle is gone is a failed
/// operation (4).
#[test]
fn exit_codes_tell_a_typo_from_a_failed_operation() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 2, 0, 1, 1);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let idx = ws.index();
    let idx = idx.to_str().unwrap();
    // A run id that is not in the index, and one that is not a run id at all: the user's.
    let unknown = "01a22a96-1d7e-7510-9d4a-b92353ebdcb2";
    for (args, want) in [
        (vec!["status", unknown, "--index", idx], "is not in the index"),
        (vec!["report", "not-a-run", "--index", idx], "run id"),
        (vec!["status", &run, "--index", "/nonexistent/index.sqlite"], "no run index"),
    ] {
        let out = ws.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(want), "{args:?}: {}", text(&out.stderr));
    }
    // The bundle of a known run disappears: reading it is an operation that failed.
    std::fs::remove_dir_all(v["bundle"].as_str().unwrap()).unwrap();
    for cmd in ["report", "resume"] {
        let out = ws.run(&[cmd, &run, "--index", idx]);
        assert_eq!(out.status.code(), Some(4), "{cmd}: {}", text(&out.stderr));
        assert!(text(&out.stderr).lines().count() <= 2, "{cmd}: {}", text(&out.stderr));
    }
}

/// `(ppid, pgrp)` of a process, from /proc.
fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit(')').next()?.split_whitespace().skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// A terminal's Ctrl-C goes to the whole foreground process group. Workers, and the agents they
/// start, each run in a group of their own, so it reaches only the controller, which decides how
/// they stop; the run ends `interrupted` with every result written before it intact.
#[test]
fn ctrl_c_from_a_terminal_reaches_only_the_controller() {
    use std::os::unix::process::CommandExt;
    let ws = Workspace::new();
    ws.write(
        "slow_agent.py",
        "import json, sys, time\nreq = json.loads(sys.stdin.readline())\ntime.sleep(1.5)\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': 'done'}}), flush=True)\n",
    );
    let cases: String =
        (0..12).map(|i| format!("{{\"id\": \"c{i}\", \"input\": \"q\", \"expected\": \"done\"}}\n")).collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "slow.yaml",
        r#"name: ctrl-c
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, slow_agent.py]
backend:
  max_concurrent_jobs: 3
storage:
  bundle_root: runs
"#,
    );
    // Its own process group, as a shell puts a foreground job.
    let child = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let group = child.id() as i32;
    let bundle = || std::fs::read_dir(ws.runs()).ok()?.flatten().map(|e| e.path()).find(|p| p.is_dir());
    wait_until("a finished task", Duration::from_secs(60), || bundle().is_some_and(|b| !results(&b).is_empty()));
    let mut agents = Vec::new();
    wait_until("agents mid-task", Duration::from_secs(30), || {
        let workers: Vec<i32> = workers_under(ws.path()).into_iter().map(|(pid, _)| pid).collect();
        agents = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
            .filter(|pid| parent_and_group(*pid).is_some_and(|(ppid, _)| workers.contains(&ppid)))
            .collect();
        for w in &workers {
            // Read twice: a process seen in the instant of its start may not have its own
            // group yet; one that stays in the controller's group is the failure.
            let in_group = || parent_and_group(*w).is_some_and(|(_, pgrp)| pgrp == group);
            if in_group() {
                std::thread::sleep(Duration::from_millis(100));
                assert!(!in_group(), "worker {w} is in the controller's process group");
            }
        }
        !agents.is_empty()
    });
    for a in &agents {
        let in_group = || parent_and_group(*a).is_some_and(|(_, pgrp)| pgrp == group);
        if in_group() {
            std::thread::sleep(Duration::from_millis(100));
            assert!(!in_group(), "agent {a} is in the controller's process group");
        }
    }
    kill(Pid::from_raw(-group), Signal::SIGINT).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "interrupted");
    let rs = results(&PathBuf::from(v["bundle"].as_str().unwrap()));
    assert!(!rs.is_empty() && rs.len() < 12, "the run was interrupted mid-way: {} results", rs.len());
    for r in &rs {
        assert_eq!(r["agent"]["terminated_by"], "completed", "an agent was hit: {r}");
    }
    assert!(ws.validate(v["bundle"].as_str().unwrap()).status.success());
}

/// Trace events are appended as they happen: a worker killed mid-task, with its controller, has
/// every event its agent sent before the kill in `trace.jsonl`, and the partial bundle is valid.
#[test]
fn a_killed_worker_has_streamed_every_event_before_the_kill() {
    let ws = Workspace::new();
    let seen = ws.shared_dir("seen");
    ws.write(
        "chatty.py",
        r#"import json, os, sys, time
req = json.loads(sys.stdin.readline())
seen = os.environ["SEEN"]
open(os.path.join(seen, "agent.pid"), "w").write(str(os.getpid()))
for i in range(1000):
    print(json.dumps({"kind": "agent.observation", "payload": {"n": i}}), flush=True)
    time.sleep(0.3)
    # Sent, and given 300 ms to reach the trace.
    with open(os.path.join(seen, "sent.tmp"), "w") as f:
        f.write(str(i + 1))
    os.replace(os.path.join(seen, "sent.tmp"), os.path.join(seen, "sent"))
"#,
    );
    ws.write("cases.jsonl", "{\"id\": \"long\", \"input\": \"q\"}\n");
    let cfg = ws.write(
        "chatty.yaml",
        &format!(
            r#"name: streaming
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, chatty.py]
  env:
    SEEN: {seen}
  sandbox:
    write: [{seen}]
storage:
  bundle_root: runs
"#,
            seen = seen.display()
        ),
    );
    let mut child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    let sent = || std::fs::read_to_string(seen.join("sent")).ok().and_then(|s| s.trim().parse::<usize>().ok());
    wait_until("three events sent", Duration::from_secs(60), || sent().unwrap_or(0) >= 3);
    let workers = workers_under(ws.path());
    assert_eq!(workers.len(), 1, "{workers:?}");
    // Everything dies at once, the controller first so that nobody cleans up after the worker.
    let before = sent().unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    kill(Pid::from_raw(-workers[0].0), Signal::SIGKILL).unwrap();
    if let Some(agent) = std::fs::read_to_string(seen.join("agent.pid")).ok().and_then(|p| p.trim().parse::<i32>().ok())
    {
        let _ = kill(Pid::from_raw(-agent), Signal::SIGKILL);
    }
    let bundle = std::fs::read_dir(ws.runs()).unwrap().flatten().map(|e| e.path()).find(|p| p.is_dir()).unwrap();
    // Staged under the job attempt that was killed (it never got to publish it).
    let trace = std::fs::read_to_string(bundle.join("jobs/j000001/attempt-1/tasks/long.trace.jsonl")).unwrap();
    let events = trace.lines().filter(|l| !l.is_empty()).count();
    assert!(events >= before, "{before} events sent before the kill, {events} in the trace");
    for line in trace.lines().filter(|l| !l.is_empty()) {
        let _: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("a torn line: {e}: {line}"));
    }
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "the partial bundle is valid: {}", text(&out.stdout));
}

/// The shipped JSONL example passes every case: a case's own evaluators decide for it (the
/// `upper` case's case-insensitive `exact_match`), not the benchmark's exact `expected` check.
#[test]
fn the_jsonl_example_passes_every_case_its_own_evaluators_decide() {
    let ws = Workspace::new();
    let cfg = repo().join("configs/jsonl-example.yaml");
    let root = format!("storage.bundle_root={}", ws.runs().display());
    let (v, code, out) = ws.submit(&cfg, &["--set", &root]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    assert_eq!((v["summary"]["passed"].as_u64(), v["summary"]["tasks_finished"].as_u64()), (Some(6), Some(6)), "{v}");
    let bundle = std::path::Path::new(v["bundle"].as_str().unwrap());
    let upper = read_json(&bundle.join("tasks/upper/result.json"));
    let kinds: Vec<&str> = upper["scores"].as_array().unwrap().iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"benchmark") && kinds.contains(&"exact_match"), "{kinds:?}");
}

/// A case that asks only how the agent must work (`no_error`) keeps the benchmark's check of its
/// answer: a wrong answer that completes without error still fails.
#[test]
fn a_case_naming_only_no_error_still_has_its_answer_checked() {
    let ws = Workspace::new();
    ws.write(
        "cases.jsonl",
        "{\"id\": \"wrong\", \"input\": \"q\", \"expected\": \"right\", \"evaluators\": [{\"kind\": \"no_error\"}], \"metadata\": {\"mock\": {\"answer\": \"wrong\"}}}\n\
         {\"id\": \"right\", \"input\": \"q\", \"expected\": \"right\", \"evaluators\": [{\"kind\": \"no_error\"}], \"metadata\": {\"mock\": {\"answer\": \"right\"}}}\n",
    );
    let cfg = ws.write("c.yaml", "name: c\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent: {kind: mock}\n");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = std::path::Path::new(v["bundle"].as_str().unwrap());
    assert_eq!(read_json(&bundle.join("tasks/wrong/result.json"))["passed"], false, "a wrong answer passed");
    assert_eq!(read_json(&bundle.join("tasks/right/result.json"))["passed"], true);
}

/// The fork server of the controller `controller` (its child with `--fork-server`).
fn fork_server_of(controller: u32) -> Option<i32> {
    let children = std::fs::read_to_string(format!("/proc/{controller}/task/{controller}/children")).ok()?;
    children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()).find(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"--fork-server"))
    })
}

#[test]
fn a_killed_fork_server_leaves_the_run_to_finish_with_exec_workers() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 12, 600, 1, 3);
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("forked workers", Duration::from_secs(30), || !workers_under(ws.path()).is_empty());
    let server = fork_server_of(child.id()).expect("the controller started a fork server");
    let running = workers_under(ws.path());
    kill(Pid::from_raw(server), Signal::SIGKILL).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("workers start by exec"), "the switch is said: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete");
    assert_eq!(v["summary"]["tasks_finished"], 12, "every task counted once");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    assert_eq!(results(&bundle).len(), 12);
    // The workers running when their server died lost the parent that would have told their
    // exit status; their tasks still finished once.
    assert!(!running.is_empty());
    let out = ws.validate(bundle.to_str().unwrap());
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_index_agrees(&ws, v["run_id"].as_str().unwrap(), &bundle);
}

#[test]
fn workers_start_by_fork_or_exec_as_agenteval_worker_start_says_and_nothing_else() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 8, 200, 1, 2);
    let out = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("AGENTEVAL_WORKER_START", "vfork")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("AGENTEVAL_WORKER_START is `fork` or `exec`, not `vfork`"),
        "{}",
        text(&out.stderr)
    );
    let child = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("AGENTEVAL_WORKER_START", "exec")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
    let mut servers = 0;
    // A fork server lives as long as its controller: a run of ~1 s polled every 5 ms would see it.
    while child.try_wait().unwrap().is_none() {
        servers += usize::from(fork_server_of(child.id()).is_some());
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(servers, 0, "no fork server when workers start by exec");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["tasks_finished"], 8);
}

/// `replay_command.txt` is a command that runs as it is: run from another folder, it runs the
/// same benchmark again (a new run of the same tasks, all passing as before).
#[test]
fn the_replay_command_of_a_bundle_runs_as_it_is() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 6, 0, 3, 2);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let line = std::fs::read_to_string(bundle.join("replay_command.txt")).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"agenteval"), "{line}");
    let elsewhere = tempfile::tempdir().unwrap();
    let out = ws.cmd(&words[1..]).arg("--json").current_dir(elsewhere.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{line}: {}", text(&out.stderr));
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ne!(again["run_id"], v["run_id"], "a new run");
    assert_eq!(again["summary"]["tasks_total"], v["summary"]["tasks_total"], "{again}");
    assert_eq!(again["summary"]["passed"], v["summary"]["passed"], "{again}");
}

/// Issue 58: a `command` agent's folder in a git checkout: the run records which commit ran and
/// whether tracked files were changed (untracked ones, such as the runs folder, do not count).
#[test]
fn the_agents_git_checkout_and_its_changes_are_recorded() {
    let ws = Workspace::new();
    std::fs::copy(repo().join("examples/echo_agent.py"), ws.path().join("agent.py")).unwrap();
    ws.write("cases.jsonl", "{\"id\": \"a\", \"input\": \"hi\"}\n");
    let cfg = ws.write(
        "g.yaml",
        "name: git\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\nstorage:\n  bundle_root: runs\n",
    );
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(ws.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "agent.py", "cases.jsonl", "g.yaml"]);
    git(&["commit", "-qm", "agent"]);
    let head = git(&["rev-parse", "HEAD"]);
    let recorded =
        |v: &serde_json::Value| read_json(&PathBuf::from(v["bundle"].as_str().unwrap()).join("metadata.json"));
    let (clean, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{clean}");
    assert_eq!(recorded(&clean)["agent_git"], serde_json::json!({"commit": head, "dirty": false}));
    std::fs::write(
        ws.path().join("agent.py"),
        std::fs::read_to_string(ws.path().join("agent.py")).unwrap() + "\n# changed\n",
    )
    .unwrap();
    let (dirty, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{dirty}");
    assert_eq!(recorded(&dirty)["agent_git"], serde_json::json!({"commit": head, "dirty": true}));
    let shown = text(&ws.run(&["runs", "show", dirty["run_id"].as_str().unwrap()]).stdout);
    assert!(shown.contains(&format!("agent git  {head}, with changed files")), "{shown}");
}

/// A caller that traces (a CI pipeline, a scheduler) hands its span over in `TRACEPARENT`: the
/// run's root span is its child, in its trace, and every task's spans with it; a malformed one
/// is said and a trace of the run's own starts.
#[test]
fn the_callers_traceparent_is_the_parent_of_the_runs_root_span() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 3, 0, 1, 2);
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let out = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("TRACEPARENT", format!("00-{trace}-{parent}-01"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let spans: Vec<serde_json::Value> =
        read_text(bundle.join("spans.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let root = spans.iter().find(|s| s["name"] == "eval.run").expect("the run's root");
    assert_eq!((root["trace_id"].as_str(), root["parent_span_id"].as_str()), (Some(trace), Some(parent)), "{root}");
    assert!(spans.iter().all(|s| s["trace_id"] == trace), "every span is in the caller's trace");
    for r in results(&bundle) {
        let task = r["task_id"].as_str().unwrap();
        let log = read_text(bundle.join(format!("tasks/{task}/worker.log"))).unwrap();
        assert!(log.lines().next().unwrap().contains(&format!("trace_id={trace}")), "{task}: {log}");
    }

    let out = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("TRACEPARENT", "00-nonsense")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ignoring a malformed TRACEPARENT"), "{}", text(&out.stderr));
}
