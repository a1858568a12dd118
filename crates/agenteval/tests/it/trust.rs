//! What a new user trusts, through the real binary: a broken agent is not a green run, one word
//! per outcome everywhere, resume that can finish, output without a terminal, every config
//! problem at once, and an agent environment that holds only what was declared.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::*;

fn cases(ws: &Workspace, n: usize) {
    let lines: String =
        (0..n).map(|i| format!("{{\"id\": \"c{i:02}\", \"input\": \"q{i}\", \"expected\": \"Q{i}\"}}\n")).collect();
    ws.write("cases.jsonl", &lines);
}

#[test]
fn an_agent_that_cannot_start_stops_the_run_early_and_says_which_field() {
    let ws = Workspace::new();
    cases(&ws, 40);
    let cfg = ws.write(
        "broken.yaml",
        "name: broken\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [nopython, a.py]\nbackend: {max_concurrent_jobs: 2}\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("error: the agent cannot run: cannot start agent `nopython`"), "{err}");
    assert!(last.contains("fix `agent.command`"), "{last}");
    let status = ws.run(&["status", "latest", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["run"]["status"], "failed", "{v}");
    assert!(v["reason"].as_str().unwrap().contains("nopython"), "{v}");
    let finished = v["tasks"]["completed"].as_u64().unwrap();
    assert!((3..=8).contains(&finished), "stopped within the first tasks, not after {finished}");
    let shown = text(&ws.run(&["status", "latest"]).stdout);
    assert!(shown.contains("why       the agent cannot run"), "{shown}");
    let meta = read_json(&Path::new(v["run"]["bundle_uri"].as_str().unwrap()).join("metadata.json"));
    assert!(meta["reason"].as_str().unwrap().contains("nopython"), "{meta}");

    let doctor = ws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    assert_eq!(doctor.status.code(), Some(2));
    assert!(text(&doctor.stdout).contains("FAIL agent program nopython"), "{}", text(&doctor.stdout));
}

#[test]
fn a_mistyped_script_and_a_chatty_agent_stop_the_run_early_and_doctor_probe_finds_both() {
    let ws = Workspace::new();
    cases(&ws, 20);
    // Answers right, but says hello on stdout first: every task's line is its own text.
    ws.write(
        "chatty.py",
        "import json, sys\nreq = json.loads(sys.stdin.readline())\nprint('debug: working on', req['task_id'])\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': req['input'].upper()}}))\n",
    );
    for (name, command, fix) in [
        ("typo", "[python3, agnet.py]", "check the program and its arguments"),
        ("chatty", "[python3, chatty.py]", "write diagnostics to stderr"),
    ] {
        let cfg = ws.write(
            &format!("{name}.yaml"),
            &format!("name: {name}\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: {command}\nbackend: {{max_concurrent_jobs: 2, tasks_per_job: 1}}\n"),
        );
        let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{name}: {err}");
        let last = err.lines().last().unwrap();
        assert!(last.starts_with("error: the agent cannot run:"), "{name}: {err}");
        assert!(last.contains("fix `agent.command`") && last.contains(fix), "{name}: {last}");
        let status = ws.run(&["status", "latest", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        let finished = v["tasks"]["completed"].as_u64().unwrap();
        assert!((3..=8).contains(&finished), "{name}: stopped within the first tasks, not after {finished}");

        let doctor = ws.run(&["doctor", "--probe", "--config", cfg.to_str().unwrap()]);
        let shown = text(&doctor.stdout);
        assert_eq!(doctor.status.code(), Some(2), "{name}: {shown}");
        let probe = shown.lines().find(|l| l.contains("probe:")).unwrap_or_else(|| panic!("{shown}"));
        assert!(probe.starts_with("FAIL") && probe.contains("task c00"), "{name}: {probe}");
        let why = if name == "typo" { "agnet.py" } else { "write diagnostics to stderr" };
        assert!(probe.contains(why), "{name}: {probe}");
    }
    // The same probe on an agent that works passes, and leaves nothing in the runs folder.
    ws.write(
        "good.py",
        "import json, sys\nreq = json.loads(sys.stdin.readline())\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': req['input'].upper()}}))\n",
    );
    let cfg = ws.write("good.yaml", "name: good\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent: {kind: command, command: [python3, good.py]}\n");
    let before = std::fs::read_dir(ws.runs()).unwrap().count();
    let doctor = ws.run(&["doctor", "--probe", "--config", cfg.to_str().unwrap()]);
    let shown = text(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(0), "{shown}");
    assert!(shown.contains("the agent ran and answered (passed)"), "{shown}");
    assert_eq!(std::fs::read_dir(ws.runs()).unwrap().count(), before, "the probe wrote into the runs folder");
}

/// `passed X failed Y errored Z infra W` anywhere in `line`.
fn words(line: &str) -> Option<[u64; 4]> {
    let at = line.find("passed ")?;
    let w: Vec<&str> = line[at..].split_whitespace().collect();
    let n = |i: usize| w.get(i).and_then(|x| x.trim_end_matches(',').parse::<u64>().ok());
    (w.get(2) == Some(&"failed") && w.get(4) == Some(&"errored") && w.get(6) == Some(&"infra"))
        .then(|| Some([n(1)?, n(3)?, n(5)?, n(7)?]))
        .flatten()
}

#[test]
fn failed_means_the_same_tasks_in_progress_status_table_and_json() {
    let ws = Workspace::new();
    // The toy benchmark's tasks pass, fail, error and hit limits in a known mix.
    let cfg = toy_config(&ws, 40, 20, 1, 4);
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let progress: Vec<[u64; 4]> = err.lines().filter_map(words).collect();
    assert!(progress.len() >= 2, "progress lines without a terminal: {err}");
    let last = *progress.last().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&ws.run(&["status", "latest", "--json"]).stdout).unwrap();
    let t = &status["tasks"];
    let four = |v: &serde_json::Value| ["passed", "failed", "errored", "infra"].map(|k| v[k].as_u64().unwrap());
    let from_status = four(t);
    let shown: serde_json::Value =
        serde_json::from_slice(&ws.run(&["runs", "show", "latest", "--json"]).stdout).unwrap();
    let s = &shown["summary"];
    let from_summary = four(s);
    assert_eq!(last, from_status, "progress vs status");
    assert_eq!(from_status, from_summary, "status vs summary.json");
    assert!(from_summary[1] > 0 && from_summary[2] > 0, "the toy mix has wrong answers and errors: {s}");
    assert_eq!(from_summary.iter().sum::<u64>(), 40);
    let table = text(&out.stdout);
    let row = table.lines().find(|l| l.starts_with("40 ")).unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<u64> = row.split_whitespace().skip(1).take(4).map(|c| c.parse().unwrap()).collect();
    assert_eq!(cells, from_summary, "table vs summary: {table}");
    let text_status = text(&ws.run(&["status", "latest"]).stdout);
    let [p, f, e, i] = from_summary;
    assert!(text_status.contains(&format!("passed {p} failed {f} errored {e} infra {i}")), "{text_status}");
}

#[test]
fn a_budget_stopped_run_resumed_with_more_budget_completes_and_a_complete_run_is_left_alone() {
    let ws = Workspace::new();
    let mut yaml = toy_yaml("budget", 30, 5, 1, 2, "runs");
    yaml.push_str("max_run_cost_usd: 0.005\n");
    let cfg = ws.write("budget.yaml", &yaml);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!((code, v["status"].as_str()), (3, Some("budget_exceeded")), "{v}");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert!(text(&out.stdout).contains("--set max_run_cost_usd="), "the hint says how: {}", text(&out.stdout));
    let run = v["run_id"].as_str().unwrap();

    let refused = ws.run(&["resume", run, "--set", "agent.kind=command"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("cannot change on resume"), "{}", text(&refused.stderr));

    let out = ws.run(&["resume", run, "--json", "--set", "max_run_cost_usd=100"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((out.status.code(), r["status"].as_str()), (Some(0), Some("complete")), "{r}");
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    let meta = read_json(&bundle.join("metadata.json"));
    assert_eq!(meta["resume_overrides"], serde_json::json!(["max_run_cost_usd=100"]));
    assert_eq!(read_json(&bundle.join("config.resolved.json"))["max_run_cost_usd"], 100.0);
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());

    let before = snapshot(&ws.runs());
    let out = ws.run(&["resume", run]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("is complete: nothing to resume"), "{}", text(&out.stdout));
    assert_eq!(snapshot(&ws.runs()), before, "resuming a complete run changed a file");
}

/// Every file under `root` (SQLite's shared-memory side files aside) with its bytes.
fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.to_string_lossy().ends_with("-shm") && !p.to_string_lossy().ends_with("-wal") {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn without_a_terminal_the_run_id_comes_at_once_and_progress_while_it_runs() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 40, 250, 1, 4);
    let start = Instant::now();
    let mut child = ws.spawn(&["submit", "--config", cfg.to_str().unwrap()]);
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines: Vec<(Duration, String)> = Vec::new();
    for line in stderr.lines() {
        lines.push((start.elapsed(), line.unwrap()));
    }
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0));
    let (at, first) = &lines[0];
    assert!(first.starts_with("run "), "{lines:?}");
    assert!(*at < Duration::from_secs(1), "the run id came after {at:?}");
    let ended = lines.last().unwrap().0;
    let during: Vec<&(Duration, String)> =
        lines.iter().filter(|(t, l)| words(l).is_some() && *t < ended - Duration::from_millis(300)).collect();
    assert!(during.len() >= 2, "progress lines while it ran: {lines:?}");
    assert!(during.iter().all(|(_, l)| l.contains("/s") && l.contains("eta")), "rate and ETA: {during:?}");
    for (_, l) in &lines {
        assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
    }
    for l in text(&out.stdout).lines() {
        assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
    }

    let quiet = ws.run(&[
        "-q",
        "submit",
        "--config",
        cfg.to_str().unwrap(),
        "--set",
        "benchmark.latency_ms=0",
        "--set",
        "benchmark.slow_ms=0",
    ]);
    let shown = text(&quiet.stdout);
    assert_eq!(shown.lines().count(), 1, "-q prints one line: {shown}");
    assert!(shown.contains("complete: 40 tasks, passed "), "{shown}");
    assert!(text(&quiet.stderr).is_empty(), "{}", text(&quiet.stderr));
}

#[test]
fn a_five_problem_config_reports_all_five() {
    let ws = Workspace::new();
    let cfg = ws.write(
        "five.yaml",
        "name: five\nbenchmark:\n  kind: jsnl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: []\nevaluators:\n  - kind: regex\nbackend:\n  max_concurrent_jobs: 0\nmax_run_cost_usd: 0\n",
    );
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("has 5 problems"), "{err}");
    for want in [
        "five.yaml:3:9: unknown benchmark kind `jsnl` (expected toy, jsonl, humaneval, harbor, swebench, tau2, command; did you mean `jsonl`?)",
        "five.yaml:7:12: agent `command` needs a program to run",
        "five.yaml:9:11: evaluator `regex` requires `pattern`",
        "five.yaml:11:24: 0 is less than the minimum of 1",
        "five.yaml:12:19: must be greater than zero",
    ] {
        assert!(err.contains(want), "want {want} in:\n{err}");
    }
}

const ENV_DUMP: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
dump = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()))
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": dump}}), flush=True)
"#;

#[test]
fn an_undeclared_variable_reaches_no_agent_and_no_file() {
    let ws = Workspace::new();
    ws.write("dump.py", ENV_DUMP);
    cases(&ws, 1);
    let cfg = ws.write(
        "env.yaml",
        "name: env\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, dump.py]\n  env: {DECLARED: yes-declared}\n  inherit_env: [ASKED_FOR]\n",
    );
    let out = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("SHELL_ONLY_TOKEN", "shell-only-7c1e9")
        .env("ASKED_FOR", "asked-for-value")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &results(Path::new(v["bundle"].as_str().unwrap()))[0];
    let seen = r["agent"]["final_answer"].as_str().unwrap();
    assert!(seen.contains("DECLARED=yes-declared") && seen.contains("ASKED_FOR=asked-for-value"), "{seen}");
    assert!(seen.contains("AGENTEVAL_SCRATCH_DIR=") && seen.contains("PATH="), "{seen}");
    assert!(!seen.contains("SHELL_ONLY_TOKEN"), "an undeclared variable reached the agent: {seen}");
    for (file, bytes) in snapshot(&ws.runs()) {
        assert!(!bytes.windows(16).any(|w| w == b"shell-only-7c1e9"), "{file} holds the undeclared value");
    }
}

#[test]
fn limit_rerun_failed_runs_show_and_show_task_give_the_why() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 30, 0, 5, 2);
    let (v, code, _) = ws.submit(&cfg, &["--limit", "10"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["summary"]["tasks_total"], 10, "--limit 10 runs the first 10 tasks");
    let run = v["run_id"].as_str().unwrap().to_string();
    let s = &v["summary"];
    let not_passed = 10 - s["passed"].as_u64().unwrap();
    assert!(not_passed > 0, "{s}");
    // Per-tag pass rates: the toy benchmark tags each task with its behaviour.
    assert_eq!(s["tags"]["pass"]["pass_rate"], 1.0, "{s}");
    assert_eq!(s["tags"]["fail"]["passed"], 0, "{s}");

    let shown: serde_json::Value =
        serde_json::from_slice(&ws.run(&["runs", "show", &run, "--failed", "--json"]).stdout).unwrap();
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len() as u64, not_passed, "{shown}");
    for t in tasks {
        assert!(!t["why"].as_str().unwrap().is_empty(), "every failing task says why: {t}");
        assert_ne!(t["outcome"], "passed");
    }
    let wrong = tasks.iter().find(|t| t["outcome"] == "failed").expect("a wrong answer");
    assert!(wrong["why"].as_str().unwrap().contains("expected"), "expected vs got: {wrong}");
    let table = text(&ws.run(&["runs", "show", &run, "--tasks", "--tag", "fail"]).stdout);
    assert!(table.contains("expected"), "{table}");
    for l in table.lines() {
        assert!(l.chars().count() <= 80, "{} columns: {l}", l.chars().count());
    }

    let task = wrong["task_id"].as_str().unwrap();
    let one = ws.run(&["show", &run, task]);
    assert_eq!(one.status.code(), Some(0), "{}", text(&one.stderr));
    let shown = text(&one.stdout);
    for want in ["outcome  failed", "trace", "agent.terminal", "scores", "exact_match"] {
        assert!(shown.contains(want), "missing {want}:\n{shown}");
    }
    let j: serde_json::Value = serde_json::from_slice(&ws.run(&["show", &run, task, "--json"]).stdout).unwrap();
    assert!(j["trace"].as_array().unwrap().len() >= 2, "{j}");
    assert_eq!(ws.run(&["show", &run, "no-such-task"]).status.code(), Some(2));

    let out = ws.run(&["rerun", &run, "--failed", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["summary"]["tasks_total"].as_u64(), Some(not_passed), "{again}");
    let meta = read_json(&Path::new(again["bundle"].as_str().unwrap()).join("metadata.json"));
    assert_eq!(meta["rerun_of"], run.as_str());
    assert!(meta["name"].as_str().unwrap().ends_with("(rerun)"), "{meta}");
    // `--all` runs the whole run again; a selection is required, and only one.
    let out = ws.run(&["rerun", &run, "--all", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all["summary"]["tasks_total"].as_u64(), Some(10), "{all}");
    assert_eq!(ws.run(&["rerun", &run]).status.code(), Some(2));
    assert_eq!(ws.run(&["rerun", &run, "--all", "--failed"]).status.code(), Some(2));
}

#[test]
fn an_agent_its_sandbox_refuses_a_connection_is_told_to_fix_agent_sandbox_network() {
    let ws = Workspace::new();
    cases(&ws, 12);
    // Reaches for a local model server first, as an agent pointed at Ollama would.
    ws.write(
        "local_model.py",
        "import json, socket, sys\nreq = json.loads(sys.stdin.readline())\ns = socket.create_connection(('127.0.0.1', 11434), timeout=5)\n",
    );
    let cfg = ws.write(
        "refused.yaml",
        "name: refused\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, local_model.py]\n  sandbox: {network: none}\nbackend: {max_concurrent_jobs: 2, tasks_per_job: 1}\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("error: the agent cannot run: its sandbox refused it a connection"), "{err}");
    assert!(last.contains("Operation not permitted (fix `agent.sandbox.network`"), "one line, the fix last: {err}");
    assert!(!last.contains("agent.command"), "the hint names the one field: {last}");
    let status: serde_json::Value = serde_json::from_slice(&ws.run(&["status", "latest", "--json"]).stdout).unwrap();
    let bundle = Path::new(status["run"]["bundle_uri"].as_str().unwrap()).to_path_buf();
    let shown = text(&ws.run(&["show", "latest", "c00", "--json"]).stdout);
    let v: serde_json::Value = serde_json::from_str(&shown).unwrap_or_else(|_| panic!("{shown}"));
    assert_eq!(v["result"]["agent"]["fault"], "network_refused", "the fault is a field of the result: {v}");
    let shown = text(&ws.run(&["show", "latest", "c00"]).stdout);
    assert!(shown.contains("fault    its sandbox refused it a connection (fix `agent.sandbox.network`"), "{shown}");
    assert!(bundle.exists());

    // The same program allowed the port gets past the sandbox: a refused connection from an
    // empty port is the agent's own failure, not the sandbox's, and names no sandbox field.
    let cfg = ws.write(
        "allowed.yaml",
        "name: allowed\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, local_model.py]\n  sandbox: {network: all}\nbackend: {max_concurrent_jobs: 2, tasks_per_job: 1}\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!err.contains("agent.sandbox.network"), "{err}");
}

/// A long reason is cut to the width with a note saying how to see it whole, and `--full` prints
/// it whole (wrapped); `show --full` prints the answer and every event whole.
#[test]
fn full_prints_whole_reasons_answers_and_events() {
    let ws = Workspace::new();
    let expected = "e".repeat(300);
    let answer = format!("{}MIDDLE{}", "a".repeat(1500), "z".repeat(1500));
    ws.write(
        "cases.jsonl",
        &format!("{}\n", serde_json::json!({"id": "long", "input": "q", "expected": expected, "metadata": {"mock": {"answer": answer}}})),
    );
    let cfg =
        ws.write("long.yaml", "name: long\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: mock\n");
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let cut = text(&ws.run(&["runs", "show", &run, "--tasks"]).stdout);
    assert!(!cut.contains(&expected) && cut.contains("--full prints them whole"), "{cut}");
    assert!(cut.lines().all(|l| l.chars().count() <= 80), "{cut}");
    let whole = text(&ws.run(&["runs", "show", &run, "--full"]).stdout);
    let joined: String = whole.split_whitespace().collect();
    assert!(joined.contains(&expected), "the reason whole, wrapped: {whole}");
    assert!(whole.lines().all(|l| l.chars().count() <= 80), "{whole}");
    // The answer's section: from its label to the trace.
    let answer_of = |out: &str| -> String {
        let from = out.find("\nanswer   ").expect("an answer");
        let to = out[from..].find("\ntrace").map_or(out.len(), |i| from + i);
        out[from..to].split_whitespace().collect()
    };
    let shown = text(&ws.run(&["show", &run, "long"]).stdout);
    assert!(!answer_of(&shown).contains("MIDDLE"), "the answer's middle is cut: {shown}");
    let full = text(&ws.run(&["show", &run, "long", "--full"]).stdout);
    assert!(answer_of(&full).contains(&answer), "the answer whole: {full}");
}

/// An agent that meets a customer's e-mail address and id and puts them in its messages, its
/// tool calls, its tool results and its answer.
pub(crate) const LEAKY_AGENT: &str = r#"import json, sys
json.loads(sys.stdin.readline())
def emit(kind, payload):
    print(json.dumps({"kind": kind, "payload": payload}), flush=True)
mail = "ann.secret" + "@example.com"
emit("agent.plan", {"text": "write to " + mail})
emit("agent.tool_call", {"tool": "crm", "arguments": {"customer_id": "CUST-" + "99812", "note": "mail " + mail}, "call_id": "c1"})
emit("agent.tool_result", {"tool": "crm", "output": "found " + mail + " for CUST-" + "99812", "call_id": "c1"})
emit("agent.terminal", {"final_answer": {"to": mail, "customer_id": "CUST-" + "99812", "text": "sent to " + mail}})
"#;

/// `redact:` in a config: patterns and a field, planted by the agent in its messages, tool
/// calls, tool results and answer, are found nowhere downstream — no bundle file (packs
/// unpacked, spans included), not the run index — and the answer is still graded.
#[test]
fn configured_redaction_scrubs_planted_values_from_everything_downstream() {
    let ws = Workspace::new();
    ws.write("agent.py", LEAKY_AGENT);
    ws.write("cases.jsonl", "{\"id\": \"c1\", \"input\": \"write to the customer\"}\n");
    let cfg = ws.write(
        "redact.yaml",
        "name: redact\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\nevaluators:\n  - kind: contains\n    value: sent to\nredact:\n  patterns: ['[\\w.+-]+@[\\w-]+\\.[\\w.]+', 'CUST-\\d+']\n  fields: [customer_id]\nstorage:\n  bundle_root: runs\n",
    );
    // Spans leave for a collector too, message content and all.
    let receiver = crate::util::otlp::Receiver::start(crate::util::otlp::Protocol::Grpc);
    let out = ws
        .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    for stream in [&out.stdout, &out.stderr] {
        let t = text(stream);
        assert!(!t.contains("ann.secret@example.com") && !t.contains("CUST-99812"), "{t}");
    }
    assert!(
        receiver.wait_for(std::time::Duration::from_secs(20), |s| s.spans.iter().any(|s| s.name == "eval.run")),
        "the spans arrived"
    );
    {
        let store = receiver.store.lock().unwrap();
        let tool = store.spans.iter().find(|s| s.name.starts_with("execute_tool")).expect("a tool span arrived");
        assert!(format!("{:?}", tool.attrs).contains("[REDACTED]"), "its content arrived, scrubbed: {:?}", tool.attrs);
        for sp in &store.spans {
            let all = format!("{} {:?} {:?}", sp.name, sp.attrs, sp.resource);
            assert!(!all.contains("ann.secret@example.com") && !all.contains("CUST-99812"), "span {all}");
        }
    }
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let r = read_json(&bundle.join("tasks/c1/result.json"));
    assert_eq!(r["agent"]["final_answer"]["customer_id"], "[REDACTED]", "{r}");
    assert!(r["agent"]["final_answer"]["text"].as_str().unwrap().starts_with("sent to [REDACTED]"), "{r}");
    let mut seen = 0;
    let mut files = vec![];
    let mut stack = vec![ws.runs()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() { stack.push(e.path()) } else { files.push(e.path()) }
        }
    }
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let texts: Vec<(String, Vec<u8>)> = if f.to_string_lossy().ends_with(".tar.gz") {
            agenteval_core::taskpack::unpack(&bytes, "pack")
                .unwrap()
                .iter()
                .map(|(n, b)| (format!("{}:{n}", f.display()), b.to_vec()))
                .collect()
        } else {
            vec![(f.display().to_string(), bytes)]
        };
        for (name, b) in texts {
            seen += 1;
            let t = String::from_utf8_lossy(&b);
            assert!(!t.contains("ann.secret@example.com") && !t.contains("CUST-99812"), "{name} holds a planted value");
        }
    }
    assert!(seen > 10, "{seen} files read");
    // The bad pattern of another config is named where it is, before anything runs.
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("patterns: ['", "patterns: ['(")).unwrap();
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("redact.yaml:12:") && said.contains("redact.patterns[0]"), "{said}");
}
