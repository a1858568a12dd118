//! Faults a misbehaving agent or an unlucky operator brings, each with the real binary: two
//! controllers on one run, usage numbers meant to poison totals and budgets, an index deleted
//! mid-run, unbounded config values, a trace flood, and an agent that goes after the answers,
//! the bundle, the index and the machine.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::*;

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// A run stopped partway: submitted, then interrupted once a few tasks finished.
fn interrupted_run(ws: &Workspace, size: u64) -> String {
    let cfg = toy_config(ws, size, 60, 2, 2);
    let child = ws.spawn(&["submit", "--json", "-q", "--config", cfg.to_str().unwrap()]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    wait_until("a few tasks to finish", Duration::from_secs(30), || {
        std::fs::read_dir(ws.runs())
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| std::fs::read_dir(run.path().join("tasks")).map(|d| d.count() >= 4).unwrap_or(false))
    });
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["run_id"].as_str().unwrap().to_string()
}

#[test]
fn two_concurrent_resumes_one_drives_the_other_names_the_holder() {
    let ws = Workspace::new();
    let run = interrupted_run(&ws, 30);
    let index = ws.index().display().to_string();
    let a = ws.spawn(&["resume", &run, "--json", "-q", "--index", &index]);
    let b = ws.spawn(&["resume", &run, "--json", "-q", "--index", &index]);
    let (a, b) = (wait_output(a, Duration::from_secs(120)), wait_output(b, Duration::from_secs(120)));
    let codes = [a.status.code(), b.status.code()];
    let (winner, loser) = match codes {
        [Some(0), Some(2)] => (&a, &b),
        [Some(2), Some(0)] => (&b, &a),
        _ => panic!("want one 0 and one 2, got {codes:?}\na: {}\nb: {}", text(&a.stderr), text(&b.stderr)),
    };
    let refusal = text(&loser.stderr);
    for part in ["being driven by another controller", "host ", "pid ", "since "] {
        assert!(refusal.contains(part), "the refusal names the holder ({part}): {refusal}");
    }
    assert_eq!(refusal.trim().lines().count(), 1, "one line: {refusal}");
    let v: serde_json::Value = serde_json::from_slice(&winner.stdout).unwrap();
    assert_eq!(v["status"], "complete", "{v}");
    let bundle = v["bundle"].as_str().unwrap();
    assert!(ws.validate(bundle).status.success(), "{}", text(&ws.validate(bundle).stdout));
    // No agent started twice: every task the resume dispatched is in exactly one job of one
    // epoch (a second driver would have written jobs of its own, `r2-…`).
    let mut dispatched = Vec::new();
    for job in std::fs::read_dir(Path::new(bundle).join("jobs")).unwrap().flatten() {
        let name = job.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with("r2-"), "a second controller dispatched {name}");
        if name.starts_with("r1-") {
            for spec in std::fs::read_dir(job.path()).unwrap().flatten() {
                let spec = spec.path().join("job.json");
                if spec.exists() {
                    let v = read_json(&spec);
                    dispatched.extend(v["tasks"].as_array().unwrap().iter().map(|t| t["id"].to_string()));
                }
            }
        }
    }
    assert!(!dispatched.is_empty(), "the resume dispatched the unfinished tasks");
    let before = dispatched.len();
    dispatched.sort();
    dispatched.dedup();
    assert_eq!(dispatched.len(), before, "a task was dispatched twice");
    let meta = read_json(&Path::new(bundle).join("metadata.json"));
    assert_eq!(meta["resumed"], 1, "one resume is counted once");
}

const POISON: &str = r#"
import json, sys
req = json.loads(sys.stdin.readline())
mode = req["input"]
def emit(kind, payload=None, **usage):
    print(json.dumps(dict(kind=kind, payload=payload, **usage)), flush=True)
if mode == "huge-tokens":
    emit("agent.observation", "a", input_tokens=2**62)
    emit("agent.observation", "b", input_tokens=2**62)
elif mode == "huge-cost":
    emit("agent.observation", "a", cost_usd=1e308)
    emit("agent.observation", "b", cost_usd=1e308)
elif mode == "negative-cost":
    emit("agent.observation", "a", cost_usd=-1000)
    emit("agent.observation", "b", cost_usd=5.0)
elif mode == "nan-cost":
    print('{"kind": "agent.observation", "payload": "a", "cost_usd": NaN}', flush=True)
else:
    emit("agent.observation", "paid", cost_usd=4.0, input_tokens=10, output_tokens=5)
emit("agent.terminal", {"final_answer": mode})
"#;

#[test]
fn poisoned_usage_numbers_cannot_break_totals_budgets_or_the_index() {
    let ws = Workspace::new();
    ws.write("poison.py", POISON);
    let modes = ["huge-tokens", "huge-cost", "negative-cost", "nan-cost", "honest-1", "honest-2"];
    let cases: String =
        modes.iter().map(|m| format!("{{\"id\": \"{m}\", \"input\": \"{m}\", \"expected\": \"{m}\"}}\n")).collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "poison.yaml",
        r#"name: poison
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, poison.py]
  limits:
    max_cost_usd: 4.5
max_run_cost_usd: 1000
backend:
  max_concurrent_jobs: 2
storage:
  bundle_root: runs
"#,
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    assert_eq!(v["status"], "complete");
    let bundle = v["bundle"].as_str().unwrap();
    assert!(ws.validate(bundle).status.success(), "{}", text(&ws.validate(bundle).stdout));
    for r in results(Path::new(bundle)) {
        let id = r["task_id"].as_str().unwrap();
        // A refused cost leaves the task's cost unknown: `null`, flagged, never a number.
        let cost = match r["agent"]["total_cost_usd"].as_f64() {
            Some(c) => c,
            None if r["agent"]["cost_unknown"] == true && r["agent"]["total_cost_usd"].is_null() => 0.0,
            None => panic!("{id}: cost neither a number nor unknown: {r}"),
        };
        assert!(cost.is_finite() && cost >= 0.0, "{id}: {cost}");
        if id.starts_with("honest") {
            assert_eq!(r["agent"]["terminated_by"], "completed", "{r}");
            assert_eq!(r["passed"], true, "{r}");
        } else {
            assert_eq!(r["agent"]["terminated_by"], "agent_error", "{id}: {r}");
            assert_eq!(r["passed"], false, "{id}");
            let why = r["agent"]["error"].as_str().unwrap();
            assert!(why.contains("cost_usd") || why.contains("tokens") || why.contains("NaN"), "{id}: {why}");
            assert!(cost <= 0.0 + 1e-9 || id == "negative-cost", "{id}: no poisoned cost counted: {cost}");
        }
    }
    let summary = &v["summary"];
    // The poisoned tasks' costs are unknown: the total is too, and what is known is the honest
    // $4 + $4.
    assert!(summary["total_cost_usd"].is_null(), "{summary}");
    let known = summary["known_cost_usd"].as_f64().unwrap();
    assert!((7.99..8.01).contains(&known), "only the honest $4 + $4 count: {summary}");
    assert_eq!(summary["total_tokens"], 30, "{summary}");
    let index = ws.index().display().to_string();
    let run = v["run_id"].as_str().unwrap();
    for args in [vec!["status", run], vec!["runs", "show", run, "--tasks"], vec!["resume", run, "-q"]] {
        let mut full = args.clone();
        full.extend(["--index", &index]);
        let out = ws.run(&full);
        assert_eq!(out.status.code(), Some(0), "{full:?}: {}", text(&out.stderr));
    }
}

#[test]
fn a_deleted_index_stops_the_run_and_rebuild_then_resume_completes_it() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 60, 80, 2, 2);
    let child = ws.spawn(&["submit", "--json", "-q", "--config", cfg.to_str().unwrap()]);
    wait_until("a few tasks to finish", Duration::from_secs(30), || {
        std::fs::read_dir(ws.runs())
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| std::fs::read_dir(run.path().join("tasks")).map(|d| d.count() >= 4).unwrap_or(false))
    });
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", ws.index().display()));
    }
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("index") && err.contains("deleted"), "{err}");
    wait_until("the run's workers to stop", Duration::from_secs(10), || workers_under(&ws.runs()).is_empty());
    let runs: Vec<_> = std::fs::read_dir(ws.runs()).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
    assert_eq!(runs.len(), 1);
    let run = runs[0].file_name().to_string_lossy().into_owned();
    for r in results(&runs[0].path()) {
        assert_ne!(r["agent"]["terminated_by"], "infra_failure", "a task was given up because of the index: {r}");
    }
    let index = ws.index().display().to_string();
    let out = ws.run(&["runs", "list", "--index", &index]);
    assert_eq!(out.status.code(), Some(2), "a missing index is an error, not an empty one");
    assert!(text(&out.stderr).contains("index rebuild"), "{}", text(&out.stderr));
    let out = ws.run(&["index", "rebuild", "--bundles", ws.runs().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&run), "{}", text(&out.stdout));
    let out = ws.run(&["status", &run, "--index", &index]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("interrupted"), "{}", text(&out.stdout));
    // The rebuilt index knows every task that had finished: the resume must start none of them
    // again (their results stay byte for byte what the first controller's workers wrote).
    let finished: Vec<(String, Vec<u8>)> = results(&runs[0].path())
        .iter()
        .map(|r| {
            let id = r["task_id"].as_str().unwrap().to_string();
            let bytes = crate::util::read_bundle_file(runs[0].path().join(format!("tasks/{id}/result.json"))).unwrap();
            (id, bytes)
        })
        .collect();
    assert!(finished.len() >= 4, "{}", finished.len());
    let status: serde_json::Value =
        serde_json::from_slice(&ws.run(&["status", &run, "--json", "--index", &index]).stdout).unwrap();
    assert_eq!(status["tasks"]["completed"].as_u64(), Some(finished.len() as u64), "{status}");
    let out = ws.run(&["resume", &run, "--json", "-q", "--index", &index]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["tasks_finished"], 60, "{v}");
    assert!(ws.validate(v["bundle"].as_str().unwrap()).status.success());
    for (id, before) in &finished {
        let after = crate::util::read_bundle_file(runs[0].path().join(format!("tasks/{id}/result.json"))).unwrap();
        assert!(after == *before, "task {id} finished before the rebuild and was run again");
    }
    // An empty index file is refused, not read as "no runs yet".
    std::fs::write(ws.index(), b"").unwrap();
    let out = ws.run(&["runs", "list", "--index", &index]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("empty"), "{}", text(&out.stderr));
}

#[test]
fn unbounded_config_values_are_config_errors_and_sigterm_stops_enumeration() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 10, 1, 1, 1);
    let c = cfg.to_str().unwrap();
    for set in
        ["benchmark.size=99999999999", "agent.limits.max_wall_seconds=1e300", "telemetry.export_timeout_seconds=1e300"]
    {
        let out = ws.run(&["config", "validate", c, "--set", set]);
        assert_eq!(out.status.code(), Some(2), "{set}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("maximum"), "{set}: {}", text(&out.stderr));
        let out = ws.run(&["submit", "--config", c, "--set", set]);
        assert_eq!(out.status.code(), Some(2), "{set}");
    }
    let out = ws.run(&["config", "validate", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a regular file"), "{}", text(&out.stderr));
    // The largest benchmark allowed takes a while to enumerate and write: SIGTERM stops it.
    let child = ws.spawn(&["submit", "-q", "--config", c, "--set", "benchmark.size=1000000"]);
    std::thread::sleep(Duration::from_millis(700));
    let sent = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = wait_output(child, Duration::from_secs(30));
    assert!(sent.elapsed() < Duration::from_secs(3), "SIGTERM took {:?}", sent.elapsed());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
}

const FLOOD: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
def hwm(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
# The agent's parent is its task's supervisor; the worker is the supervisor's parent.
worker = int(open(f"/proc/{os.getppid()}/stat").read().rsplit(")", 1)[1].split()[1])
blob = "x" * (512 * 1024)
while True:
    print(json.dumps({"kind": "agent.observation", "payload": {"worker_hwm_kb": hwm(worker), "blob": blob}}), flush=True)
"#;

/// The peak memory a worker may reach while its agent floods the trace (documented in
/// `docs/security.md`): the trace streams to disk and only a bounded part stays in memory.
const WORKER_PEAK_MIB: u64 = 64;

#[test]
fn a_trace_flood_stops_at_the_limit_and_the_worker_stays_small() {
    let ws = Workspace::new();
    ws.write("flood.py", FLOOD);
    ws.write("cases.jsonl", "{\"id\": \"flood\", \"input\": \"x\", \"expected\": \"y\"}\n");
    let cfg = ws.write(
        "flood.yaml",
        r#"name: flood
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, flood.py]
  limits:
    max_trace_bytes: 67108864
storage:
  bundle_root: runs
"#,
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    let r = &results(bundle)[0];
    assert_eq!(r["agent"]["terminated_by"], "limit_trace", "{r}");
    let trace = bundle.join("tasks/flood/trace.jsonl");
    let size = crate::util::read_bundle_file(&trace).unwrap().len();
    assert!(size <= (64 << 20) + (1 << 20) + 4096, "the trace stopped near its limit: {size} bytes");
    let peak_kb = crate::util::read_text(&trace)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| e["payload"]["worker_hwm_kb"].as_u64())
        .max()
        .expect("the agent reported the worker's memory");
    eprintln!("worker peak memory during a 64 MiB trace flood: {} MiB", peak_kb / 1024);
    assert!(peak_kb / 1024 < WORKER_PEAK_MIB, "the worker peaked at {} MiB after a 64 MiB trace", peak_kb / 1024);
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
}

const SNOOP: &str = r#"
import json, os, subprocess, sys
req = json.loads(sys.stdin.readline())
root = os.environ["SNOOP_ROOT"]
run = os.path.join(root, "runs", req["run_id"])
tried = {}
def attempt(name, f):
    try:
        f()
        tried[name] = "ok"
    except Exception as e:
        tried[name] = type(e).__name__
attempt("read_tasks", lambda: open(os.path.join(run, "tasks.jsonl")).read())
attempt("read_config", lambda: open(os.path.join(run, "config.resolved.json")).read())
attempt("read_cases", lambda: open(os.path.join(root, "cases.jsonl")).read())
attempt("list_runs", lambda: os.listdir(os.path.join(root, "runs")))
attempt("write_bundle", lambda: open(os.path.join(run, "planted.txt"), "w").write("x"))
attempt("write_index", lambda: open(os.path.join(root, "runs", "index.sqlite"), "a").write("x"))
attempt("write_config_dir", lambda: open(os.path.join(root, "planted.txt"), "w").write("x"))
attempt("read_own_program", lambda: open(os.path.join(root, "snoop.py")).read())
attempt("write_scratch", lambda: open(os.path.join(os.environ["AGENTEVAL_SCRATCH_DIR"], "n"), "w").write("x"))
child = subprocess.Popen(["setsid", "sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tried["child_pid"] = child.pid
tried["aws_env"] = sorted(k for k in os.environ if k.startswith("AWS_"))
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": json.dumps(tried)}}), flush=True)
"#;

#[test]
fn an_agent_cannot_reach_the_answers_the_bundle_the_index_or_outlive_its_task() {
    let ws = Workspace::new();
    ws.write("snoop.py", SNOOP);
    ws.write("cases.jsonl", "{\"id\": \"snoop\", \"input\": \"q\", \"expected\": \"SECRET-ANSWER\"}\n");
    let cfg = ws.write(
        "snoop.yaml",
        &format!(
            r#"name: snoop
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, snoop.py]
  env:
    SNOOP_ROOT: {root}
storage:
  bundle_root: runs
"#,
            root = ws.path().canonicalize().unwrap().display()
        ),
    );
    let mut cmd = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    cmd.env("AWS_ACCESS_KEY_ID", "AKIAWORKERONLY").env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    let r = &results(bundle)[0];
    assert_eq!(r["passed"], false, "{r}");
    let tried: serde_json::Value = serde_json::from_str(r["agent"]["final_answer"].as_str().unwrap()).unwrap();
    for denied in
        ["read_tasks", "read_config", "read_cases", "list_runs", "write_bundle", "write_index", "write_config_dir"]
    {
        assert_eq!(tried[denied], "PermissionError", "{denied} was not denied: {tried}");
    }
    for allowed in ["read_own_program", "write_scratch"] {
        assert_eq!(tried[allowed], "ok", "{allowed} was denied: {tried}");
    }
    assert_eq!(tried["aws_env"], serde_json::json!([]), "the worker's AWS credentials reached the agent");
    assert!(!bundle.join("planted.txt").exists() && !ws.path().join("planted.txt").exists());
    let pid = tried["child_pid"].as_i64().unwrap() as i32;
    wait_until("the agent's setsid child to be killed", Duration::from_secs(10), || !alive(pid));
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
}

/// An agent that leaves a `setsid` child with a grandchild of its own behind, reports their
/// pids as an observation, and answers right after a pause (so its siblings overlap it).
const LEAVER: &str = r#"
import json, os, subprocess, sys, time
req = json.loads(sys.stdin.readline())
child = subprocess.Popen(["setsid", "sh", "-c", "sleep 300 & echo $!; wait"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
grandchild = int(child.stdout.readline())
print(json.dumps({"kind": "agent.observation", "payload": {"pids": [child.pid, grandchild]}}), flush=True)
time.sleep(0.3)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": req["input"].upper()}}), flush=True)
"#;

#[test]
fn tasks_in_parallel_each_own_their_processes_and_none_outlives_the_run() {
    let ws = Workspace::new();
    ws.write("leaver.py", LEAVER);
    let cases: String =
        (0..40).map(|i| format!("{{\"id\": \"c{i:02}\", \"input\": \"q{i}\", \"expected\": \"Q{i}\"}}\n")).collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "leaver.yaml",
        "name: leaver\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent: {kind: command, command: [python3, leaver.py]}\nbackend: {max_concurrent_jobs: 2, tasks_per_job: 20, tasks_in_parallel: 4}\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["summary"]["passed"], 40, "every task passes: {v}");
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    let mut pids = Vec::new();
    for task in std::fs::read_dir(bundle.join("tasks")).unwrap().flatten() {
        let name = task.file_name().to_string_lossy().into_owned();
        let id = name.strip_suffix(".tar.gz").unwrap_or(&name);
        let trace = crate::util::read_text(bundle.join("tasks").join(id).join("trace.jsonl")).unwrap();
        for line in trace.lines() {
            let ev: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(p) = ev["payload"]["pids"].as_array() {
                pids.extend(p.iter().map(|p| p.as_i64().unwrap() as i32));
            }
        }
    }
    assert_eq!(pids.len(), 80, "every task reported its child and grandchild");
    // Killed when their own task ended, so gone by the time `submit` returned.
    let left: Vec<i32> = pids.into_iter().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "processes outlived their task: {left:?}");
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
}

/// `resume --force` while the first controller is alive: the new one takes the lease, the old
/// one stops at its next heartbeat (its workers start no task after the takeover), and the run
/// completes once, valid, every task with one result.
#[test]
fn resume_force_takes_the_lease_and_the_old_controller_and_its_workers_stop() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 30, 300, 5, 2);
    let a = ws.spawn(&["submit", "--json", "-q", "--config", cfg.to_str().unwrap()]);
    let bundle = || std::fs::read_dir(ws.runs()).ok()?.flatten().map(|e| e.path()).find(|p| p.is_dir());
    wait_until("a few tasks to finish", Duration::from_secs(30), || bundle().is_some_and(|b| results(&b).len() >= 3));
    let run = bundle().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let index = ws.index().display().to_string();
    // Without --force the live holder is named and nothing changes.
    let refused = ws.run(&["resume", &run, "--index", &index]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let takeover = chrono::Utc::now();
    let b = ws.spawn(&["resume", &run, "--force", "--json", "-q", "--index", &index]);
    let a = wait_output(a, Duration::from_secs(60));
    let a_err = text(&a.stderr);
    assert_ne!(a.status.code(), Some(0), "the old controller must not finish the run: {a_err}");
    assert!(a_err.contains("another controller") || a_err.contains("lease") || a_err.contains("epoch"), "{a_err}");
    let b = wait_output(b, Duration::from_secs(120));
    let why: Vec<String> = bundle()
        .map(|p| results(&p))
        .unwrap_or_default()
        .iter()
        .filter(|r| r["agent"]["terminated_by"] == "infra_failure")
        .take(2)
        .map(|r| r.to_string())
        .collect();
    assert_eq!(b.status.code(), Some(0), "{}\n{}\nA: {a_err}\n{why:?}", text(&b.stderr), text(&b.stdout));
    let v: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(v["summary"]["tasks_finished"], 30, "{v}");
    let path = Path::new(v["bundle"].as_str().unwrap());
    assert!(
        ws.validate(path.to_str().unwrap()).status.success(),
        "{}",
        text(&ws.validate(path.to_str().unwrap()).stdout)
    );
    // The old epoch's workers started nothing once the lease had moved (a task already under
    // way may finish; a new one may not start). One second of slack for the check itself.
    let slack = chrono::Duration::seconds(1);
    for r in results(path) {
        let job = r["job_id"].as_str().unwrap();
        if !job.starts_with("r1-") {
            let started: chrono::DateTime<chrono::Utc> = r["started_at"].as_str().unwrap().parse().unwrap();
            assert!(
                started < takeover + slack,
                "task {} started under the old lease after the takeover: {r}",
                r["task_id"]
            );
        }
    }
    wait_until("every worker to be gone", Duration::from_secs(10), || workers_under(&ws.runs()).is_empty());
    let shown: serde_json::Value =
        serde_json::from_slice(&ws.run(&["runs", "show", &run, "--json", "--index", &index]).stdout).unwrap();
    assert_eq!(shown["run"]["epoch"], 1, "{shown}");
}

/// A fork-and-exit chain (each process forks and exits, the last one loops): every link is
/// orphaned on the way, which re-parents it to its task's supervisor, so the chain dies with the
/// task instead of outliving the run.
const CHAIN: &str = r#"
import json, os, sys, time
req = json.loads(sys.stdin.readline())
out = os.environ["CHAIN_OUT"]
if os.fork() == 0:
    for _ in range(6):
        if os.fork() != 0:
            os._exit(0)
    open(os.path.join(out, req["task_id"] + ".pid"), "w").write(str(os.getpid()))
    while True:
        open(os.path.join(out, req["task_id"] + ".beat"), "w").write(str(time.time()))
        time.sleep(0.05)
time.sleep(0.5)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": req["input"].upper()}}), flush=True)
"#;

#[test]
fn a_fork_and_exit_chain_does_not_outlive_its_task() {
    let ws = Workspace::new();
    ws.write("chain.py", CHAIN);
    let out = ws.shared_dir("chain-out");
    ws.write("cases.jsonl", "{\"id\": \"c1\", \"input\": \"a\", \"expected\": \"A\"}\n{\"id\": \"c2\", \"input\": \"b\", \"expected\": \"B\"}\n");
    let cfg = ws.write(
        "chain.yaml",
        &format!(
            "name: chain\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: [python3, chain.py]\n  env: {{CHAIN_OUT: {out}}}\n  sandbox: {{write: [{out}]}}\nbackend: {{tasks_in_parallel: 2}}\n",
            out = out.display()
        ),
    );
    let (v, code, o) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&o.stderr));
    assert_eq!(v["summary"]["passed"], 2, "{v}");
    for task in ["c1", "c2"] {
        let pid: i32 = std::fs::read_to_string(out.join(format!("{task}.pid"))).unwrap().trim().parse().unwrap();
        assert!(!alive(pid), "the end of {task}'s chain (pid {pid}) outlived its task");
        let beat = std::fs::metadata(out.join(format!("{task}.beat"))).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let again = std::fs::metadata(out.join(format!("{task}.beat"))).unwrap().modified().unwrap();
        assert_eq!(beat, again, "something of {task}'s chain still writes after the run");
    }
}

/// Every agenteval process is non-dumpable: another process of the same user (an agent) cannot
/// read its `/proc/PID/environ`. Checked as an unprivileged user (`setpriv`), where the kernel
/// makes a non-dumpable process's `/proc` files root's; the agent it starts is its own again.
#[test]
fn agenteval_processes_cannot_be_read_by_an_agent_of_the_same_user() {
    use std::os::unix::fs::MetadataExt as _;
    if !nix_root() {
        // Without root the test cannot switch users; the CI and this machine run it as root.
        // CI runs the tests as root: there, a skip would hide that nothing was checked.
        assert!(std::env::var_os("CI").is_none(), "this test needs root, and CI runs as root");
        eprintln!("skipped: needs root to run the processes as another user");
        return;
    }
    // A copy another user can execute, wherever the checkout lives.
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("agenteval");
    // Copied by `cp`, so no descriptor open for writing can leak into a process another test
    // thread forks meanwhile (which would make the exec fail with "Text file busy").
    assert!(std::process::Command::new("cp").arg(BIN).arg(&bin).status().unwrap().success());
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["agent-sandbox", "--", "sleep", "30"])
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    let supervisor = child.id() as i32;
    let mut agent = None;
    wait_until("the supervised program to start", Duration::from_secs(10), || {
        agent = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: i32 = stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()?;
            let exe = std::fs::read_link(e.path().join("exe")).ok()?;
            (ppid == supervisor && exe.ends_with("sleep")).then_some(pid)
        });
        agent.is_some()
    });
    let owner = |pid: i32| std::fs::metadata(format!("/proc/{pid}/environ")).unwrap().uid();
    assert_eq!(owner(supervisor), 0, "agenteval's own process is readable by its user");
    assert_eq!(owner(agent.unwrap()), 65534, "the agent's program is its own (exec resets it)");
    let _ = child.kill();
    let _ = child.wait();
}

/// The red team's `command` agent: it goes after a secrets file and links beside the config,
/// the paths on every process's command line, every process's environment, a local
/// `agenteval ui` and an abstract unix socket, and answers the expected answer if it found it.
const RED_TEAM: &str = r#"
import json, os, re, socket, sys
req = json.loads(sys.stdin.readline())
cfg = os.environ["SNOOP_CFG"]
found, tried = [], {}
def look(name, data):
    if data is None:
        return
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    # Spelled in two pieces, so that this program's own text is not a find.
    for needle in ("SECRET-" + "ANSWER", "sk-" + "ctrl-", "sk-" + "file-"):
        if needle in data:
            found.append(name + ": " + needle)
def attempt(name, f):
    try:
        look(name, f())
        tried[name] = "ok"
    except Exception as e:
        tried[name] = type(e).__name__
attempt("secrets_file", lambda: open(os.path.join(cfg, "secrets.env")).read())
attempt("config_file", lambda: open(os.path.join(cfg, "snoop.yaml")).read())
attempt("latest_runs", lambda: "".join(
    open(os.path.join(cfg, "latest-runs", r, "tasks.jsonl")).read()
    for r in os.listdir(os.path.join(cfg, "latest-runs")) if not r.startswith("index")))
attempt("current_cases", lambda: open(os.path.join(cfg, "current.jsonl")).read())
paths = set()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        paths.update(re.findall(r"/[^\s\"',\x00\[\]{}]+", open("/proc/%s/cmdline" % pid, "rb").read().decode("utf-8", "replace")))
    except Exception:
        pass
    try:
        look("environ of %s" % pid, open("/proc/%s/environ" % pid, "rb").read())
    except Exception:
        pass
budget = [400]
def sweep(p):
    if budget[0] <= 0 or p.startswith(("/usr", "/proc", "/sys", "/dev", "/etc", "/lib", "/bin", "/sbin")):
        return
    budget[0] -= 1
    try:
        if os.path.isdir(p):
            for e in os.listdir(p):
                sweep(os.path.join(p, e))
        elif os.path.isfile(p):
            with open(p, "rb") as f:
                look("cmdline path " + p, f.read(1 << 20))
    except Exception:
        pass
for p in sorted(paths):
    sweep(p)
def ui():
    s = socket.create_connection(("127.0.0.1", int(os.environ["SNOOP_UI_PORT"])), timeout=3)
    s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    return s.recv(65536)
attempt("ui", ui)
attempt("abstract_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(b"\0" + os.environ["SNOOP_ABSTRACT"].encode()))
status = open("/proc/self/status").read()
tried["uid"] = os.getuid()
tried["cap_eff"] = re.search(r"CapEff:\s*(\w+)", status).group(1)
tried["no_new_privs"] = re.search(r"NoNewPrivs:\s*(\d)", status).group(1)
answer = "SECRET-" + "ANSWER" if any(("SECRET-" + "ANSWER") in f for f in found) else json.dumps({"tried": tried, "found": found})
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": answer}}), flush=True)
"#;

/// The red team's run, as root with an agent program others can read (the agent runs as a
/// leased uid of its own), as root with one they cannot (refused before the run: it never runs
/// as root), and as an unprivileged user: each time the agent finds nothing, passes nothing,
/// and reaches neither the UI nor an abstract socket.
#[test]
fn a_hostile_command_agent_finds_nothing_as_root_and_as_a_user() {
    use std::os::unix::fs::PermissionsExt as _;
    if !nix_root() {
        // CI runs the tests as root: there, a skip would hide that nothing was checked.
        assert!(std::env::var_os("CI").is_none(), "this test needs root, and CI runs as root");
        eprintln!("skipped: needs root to run as root and as another user");
        return;
    }
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let root = ws.path().canonicalize().unwrap();
    ws.write("snoop.py", RED_TEAM);
    ws.write("cases.jsonl", "{\"id\": \"snoop\", \"input\": \"q\", \"expected\": \"SECRET-ANSWER\"}\n");
    ws.write("secrets.env", "JUDGE_KEY=sk-file-0123456789abcdef0123\n");
    std::os::unix::fs::symlink(root.join("cases.jsonl"), root.join("current.jsonl")).unwrap();
    // An earlier run holding the answer, served by a local UI without a token (its defence is the
    // agent's network, not the token here).
    let oracle =
        ws.write("oracle.yaml", "name: earlier\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent: {kind: oracle}\n");
    let (v, code, _) = ws.submit(&oracle, &[]);
    assert_eq!(code, 0, "{v}");
    let index = ws.index();
    let ui = crate::util::ui::UiServer::start(ws.cmd(&[
        "ui",
        "--index",
        index.to_str().unwrap(),
        "--port",
        "0",
        "--no-token",
    ]));
    let ui_port = ui.port.to_string();
    assert_eq!(ui.get("/api/runs").status, 200, "the UI answers anyone on loopback");
    let abstract_name = format!("agenteval-red-team-{}", std::process::id());
    let abstract_addr =
        <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(&abstract_name)
            .unwrap();
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).unwrap();
    // A copy of the binary another user can execute.
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("agenteval");
    assert!(std::process::Command::new("cp").arg(BIN).arg(&bin).status().unwrap().success());

    // An interpreter others cannot read (pyenv's under /root): refused, never run as root.
    // `python3` when it is one, else a copy in a root-only folder.
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let on_path = agenteval_engine::isolation::sandbox::which("python3");
    let root_only = match on_path {
        Some(p) if !agenteval_engine::isolation::confine::readable_by_others(&p) => p.display().to_string(),
        _ => {
            let copy = private.path().join("python3");
            assert!(std::process::Command::new("cp").arg("/usr/bin/python3").arg(&copy).status().unwrap().success());
            copy.display().to_string()
        }
    };
    for (mode, python) in
        [("nobody", "/usr/bin/python3"), ("capless-root", root_only.as_str()), ("user", "/usr/bin/python3")]
    {
        let runs = format!("runs-{mode}");
        let _ = std::fs::remove_file(root.join("latest-runs"));
        std::os::unix::fs::symlink(root.join(&runs), root.join("latest-runs")).unwrap();
        let cfg = ws.write(
            "snoop.yaml",
            &format!(
                "name: snoop\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: [{python}, snoop.py]\n  env: {{SNOOP_CFG: {root}, SNOOP_UI_PORT: '{ui_port}', SNOOP_ABSTRACT: {abstract_name}}}\nbackend: {{secrets_file: secrets.env}}\nstorage: {{bundle_root: {runs}}}\n",
                root = root.display()
            ),
        );
        let args = ["submit", "--json", "--config", cfg.to_str().unwrap()];
        let mut cmd = if mode == "user" {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&bin).args(args);
            c
        } else {
            let mut c = std::process::Command::new(BIN);
            c.args(args).env("PATH", agent_path());
            c
        };
        cmd.current_dir(&root).env("NO_COLOR", "1").env("CONTROLLER_KEY", "sk-ctrl-0123456789abcdef0123");
        let out = cmd.output().unwrap();
        if mode == "capless-root" {
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{mode}: refused before the run: {err}");
            assert!(err.contains(&root_only) && err.contains("chmod o+rX"), "{mode}: {err}");
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = &results(Path::new(v["bundle"].as_str().unwrap()))[0];
        assert_eq!(r["passed"], false, "{mode}: {r}");
        let answer: serde_json::Value = serde_json::from_str(r["agent"]["final_answer"].as_str().unwrap())
            .unwrap_or_else(|_| panic!("{mode}: {r}"));
        assert_eq!(answer["found"], serde_json::json!([]), "{mode}: the agent found {}", answer["found"]);
        let tried = &answer["tried"];
        for denied in ["secrets_file", "config_file", "latest_runs", "current_cases", "ui", "abstract_socket"] {
            assert_eq!(tried[denied], "PermissionError", "{mode}: {denied} was not denied: {tried}");
        }
        assert_eq!(tried["no_new_privs"], "1", "{mode}: {tried}");
        assert_eq!(tried["cap_eff"], "0000000000000000", "{mode}: the agent kept capabilities: {tried}");
        let uid = tried["uid"].as_u64().unwrap() as u32;
        if mode == "user" {
            assert_eq!(uid, 65534, "{mode}: the worker's own user: {tried}");
        } else {
            assert!(agenteval_engine::isolation::uids::is_leased_uid(uid), "{mode}: a leased uid: {tried}");
        }
    }
    drop(ui);
}

fn nix_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .is_some_and(|ids| ids.split_whitespace().nth(1) == Some("0"))
}

/// Writes 60 MiB of trace (1 MiB events), then a wrong answer.
const BIG_TRACE: &str = r#"
import json, sys
req = json.loads(sys.stdin.readline())
blob = "x" * (1024 * 1024 - 100)
for i in range(60):
    print(json.dumps({"kind": "agent.observation", "payload": {"i": i, "blob": blob}}), flush=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": "wrong"}}), flush=True)
"#;

fn peak_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Four tasks with 60 MiB traces: the sealed `report.html` stays under 10 MB, the controller
/// (which seals) and the UI (which renders the run and each task) stay under 200 MB.
#[test]
fn four_60_mib_traces_make_a_small_report_and_bounded_memory() {
    let ws = Workspace::new();
    ws.write("big.py", BIG_TRACE);
    let cases: String =
        (1..=4).map(|i| format!("{{\"id\": \"big{i}\", \"input\": \"x\", \"expected\": \"y\"}}\n")).collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "big.yaml",
        "name: big\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, big.py]\nbackend: {tasks_in_parallel: 2}\nstorage: {bundle_root: runs}\n",
    );
    // The controller's peak, as the kernel counts it for a waited-for child (the workers are
    // its children and are counted apart).
    let wrapper = "import resource, subprocess, sys\nr = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\nsys.stdout.buffer.write(r.stdout)\nprint(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\nsys.exit(r.returncode)";
    let out = std::process::Command::new("python3")
        .args(["-c", wrapper, BIN, "submit", "--json", "--config", cfg.to_str().unwrap()])
        .current_dir(ws.path())
        .env("NO_COLOR", "1")
        .env("PATH", agent_path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let controller_kib: u64 = text(&out.stderr).lines().last().unwrap().trim().parse().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    for i in 1..=4 {
        let size = crate::util::read_bundle_file(bundle.join(format!("tasks/big{i}/trace.jsonl"))).unwrap().len();
        assert!(size > 60 << 20, "task {i}'s trace is {size} bytes");
    }
    let report = std::fs::metadata(bundle.join("report.html")).unwrap().len();
    eprintln!("report.html: {report} bytes; controller peak: {} MiB", controller_kib / 1024);
    assert!(report < 10_000_000, "report.html is {report} bytes");
    assert!(controller_kib < 200 * 1024, "the controller peaked at {} MiB", controller_kib / 1024);

    let index = ws.index();
    let ui = crate::util::ui::UiServer::start(ws.cmd(&[
        "ui",
        "--index",
        index.to_str().unwrap(),
        "--port",
        "0",
        "--no-token",
    ]));
    let run = v["run_id"].as_str().unwrap();
    let mut pages = vec![format!("/runs/{run}")];
    pages.extend((1..=4).map(|i| format!("/runs/{run}/tasks/big{i}")));
    for page in &pages {
        let r = ui.get(page);
        assert_eq!(r.status, 200, "{page}");
        assert!(r.body.len() < 10_000_000, "{page} is {} bytes", r.body.len());
    }
    // The whole trace, streamed: every byte the bundle holds, the UI still small.
    let trace = ui.get(&format!("/runs/{run}/tasks/big1/trace.jsonl"));
    assert_eq!(trace.status, 200);
    assert_eq!(trace.header("content-type"), Some("text/plain; charset=utf-8"));
    let on_disk = crate::util::read_text(bundle.join("tasks/big1/trace.jsonl")).unwrap();
    assert!(trace.body == on_disk, "the full trace: {} of {} bytes", trace.body.len(), on_disk.len());
    assert!(ui.get(&format!("/runs/{run}/tasks/big1")).body.contains("/tasks/big1/trace.jsonl"), "linked");
    assert_eq!(ui.get(&format!("/runs/{run}/tasks/nope/trace.jsonl")).status, 404);
    let ui_kib = peak_kib(ui.pid()).unwrap();
    eprintln!("ui peak: {} MiB", ui_kib / 1024);
    drop(ui);
    assert!(ui_kib < 200 * 1024, "the UI peaked at {} MiB", ui_kib / 1024);
}

/// Three ways to fill a disk: write without end, write one file past the limit and delete it
/// before answering, and write past the limit just before answering (faster than a measurement).
const FILLER: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
scratch, task = req["scratch_dir"], req["task_id"]
chunk = b"x" * (1 << 20)
if task == "forever":
    i = 0
    while True:
        with open(os.path.join(scratch, f"f{i}"), "wb") as f:
            f.write(chunk)
        i += 1
elif task == "one-big-file":
    path = os.path.join(scratch, "big")
    with open(path, "wb") as f:
        for _ in range(24):
            f.write(chunk)
    os.remove(path)
elif task == "burst":
    for i in range(24):
        with open(os.path.join(scratch, f"f{i}"), "wb") as f:
            f.write(chunk)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": "y"}}), flush=True)
"#;

#[test]
fn an_agent_that_fills_its_scratch_folder_stops_at_the_disk_limit_and_does_not_pass() {
    let ws = Workspace::new();
    ws.write("filler.py", FILLER);
    let cases: String = ["forever", "one-big-file", "burst", "small"]
        .iter()
        .map(|id| format!("{{\"id\": \"{id}\", \"input\": \"x\", \"expected\": \"y\"}}\n"))
        .collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "filler.yaml",
        r#"name: filler
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, filler.py]
  limits:
    max_disk_bytes: 8388608
    max_wall_seconds: 60
storage:
  bundle_root: runs
"#,
    );
    let started = Instant::now();
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(50), "stopped by the disk limit, not the clock");
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    for r in results(bundle) {
        let id = r["task_id"].as_str().unwrap().to_string();
        if id == "small" {
            assert_eq!(r["passed"], true, "{r}");
            continue;
        }
        assert_eq!(r["passed"], false, "{id}: {r}");
        let error = r["agent"]["error"].as_str().unwrap_or_default();
        if id == "one-big-file" {
            // The kernel refuses the write: a program that handles SIGXFSZ (Python does) sees
            // EFBIG and fails on its own; one that does not is killed.
            assert!(error.contains("File too large") || error.contains("max_disk_bytes"), "{r}");
            continue;
        }
        assert_eq!(r["agent"]["terminated_by"], "limit_disk", "{id}: {r}");
        assert!(error.contains("max_disk_bytes"), "{id}: {r}");
    }
    assert_eq!(results(bundle).len(), 4);
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
}

#[test]
fn a_case_line_or_a_data_file_past_its_cap_is_a_config_error_naming_the_option() {
    use std::io::Write as _;
    let ws = Workspace::new();
    let big = format!("{{\"id\": \"big\", \"input\": \"{}\", \"expected\": \"y\"}}\n", "x".repeat(2 << 20));
    ws.write("cases.jsonl", &format!("{{\"id\": \"ok\", \"input\": \"x\", \"expected\": \"y\"}}\n{big}"));
    let cfg = ws.write(
        "big.yaml",
        "name: big\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: oracle\nstorage:\n  bundle_root: runs\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("cases.jsonl:2") && err.contains("benchmark.max_case_bytes"), "{err}");
    // Raised, the same line is read.
    let out = ws.run(&["submit", "-q", "--config", cfg.to_str().unwrap(), "--set", "benchmark.max_case_bytes=4194304"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A gzip bomb: 64 MiB of zeros in 64 KiB, over a 16 MiB cap once unzipped.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    std::fs::write(ws.path().join("bomb.jsonl.gz"), gz.finish().unwrap()).unwrap();
    let cfg = ws.write(
        "bomb.yaml",
        "name: bomb\nbenchmark:\n  kind: humaneval\n  path: bomb.jsonl.gz\n  max_file_bytes: 16777216\nagent:\n  kind: oracle\nstorage:\n  bundle_root: runs\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("benchmark.max_file_bytes"), "{}", text(&out.stderr));
}
