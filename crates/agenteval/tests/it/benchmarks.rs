//! Benchmarks written as programs (`benchmark: {kind: command}`): the shipped Python example end
//! to end, graders that fail, and agents that go looking for the benchmark's files.

use std::path::Path;

use crate::util::*;

fn example() -> std::path::PathBuf {
    repo().join("examples/python_benchmark")
}

/// A config for the shipped example with `agent` (YAML, indented by two).
fn example_config(ws: &Workspace, agent: &str) -> std::path::PathBuf {
    let dir = example();
    ws.write(
        "python-benchmark.yaml",
        &format!(
            "name: python-benchmark-test\nbenchmark:\n  kind: command\n  command: [python3, {b}, {d}]\n  files: [{s}]\n\
             agent:\n{agent}\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 2\nstorage:\n  bundle_root: runs\n",
            b = dir.join("benchmark.py").display(),
            d = dir.join("dataset.jsonl").display(),
            s = dir.join("scorer.py").display(),
        ),
    )
}

/// `(task, passed, benchmark score's reason, its error)`, by task id.
fn graded(bundle: &Path) -> Vec<(String, bool, String, Option<String>)> {
    let mut rows: Vec<_> = results(bundle)
        .iter()
        .map(|r| {
            let s = r["scores"].as_array().unwrap().iter().find(|s| s["evaluator_id"] == "benchmark").unwrap();
            (
                r["task_id"].as_str().unwrap().to_string(),
                r["passed"] == true,
                s["reason"].as_str().unwrap_or_default().to_string(),
                s["error"].as_str().map(String::from),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// An agent that answers "the answer is N" with N from a table of questions it knows, else 0.
const GUESSER: &str = r#"
import json, sys
req = json.loads(sys.stdin.readline())
known = {"Natalia": 72, "Weng": 10, "Betty": 7}
answer = next((f"the answer is {n}." for k, n in known.items() if k in req["input"]), "no idea")
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": answer}}), flush=True)
"#;

#[test]
fn the_python_benchmark_example_lists_its_dataset_and_its_scorer_decides() {
    let ws = Workspace::new();
    // The shipped config, as the docs run it, with its bundles kept in the test's folder.
    let shipped = repo().join("configs/python-benchmark.yaml");
    let runs = ws.runs();
    let (v, code, out) = ws.submit(&shipped, &["--set", &format!("storage.bundle_root={}", runs.display())]);
    assert_eq!(code, 0, "{}", text(&out.stderr));
    assert_eq!(v["status"], "complete", "{v}");
    let bundle = v["bundle"].as_str().unwrap();
    let rows = graded(Path::new(bundle));
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert!(rows.iter().all(|r| r.1 && r.3.is_none() && r.2.ends_with("is right")), "{rows:?}");
    assert!(ws.validate(bundle).status.success());

    // An agent that gets two right, one wrong and answers two with no number.
    ws.write("guesser.py", GUESSER);
    let guesser = ws.path().join("guesser.py");
    let cfg =
        example_config(&ws, &format!("  kind: command\n  command: [python3, {}]\n  model: guess-1", guesser.display()));
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{}", text(&out.stderr));
    let rows = graded(Path::new(v["bundle"].as_str().unwrap()));
    let verdicts: Vec<(&str, bool, &str)> = rows.iter().map(|r| (r.0.as_str(), r.1, r.2.as_str())).collect();
    assert_eq!(
        verdicts,
        [
            ("gsm8k-0000", true, "72 is right"),
            ("gsm8k-0001", true, "10 is right"),
            ("gsm8k-0002", false, "7, expected 5"),
            ("gsm8k-0003", false, "no number in the answer"),
            ("gsm8k-0004", false, "no number in the answer"),
        ]
    );
    assert!(rows.iter().all(|r| r.3.is_none()), "a wrong answer is a fail, not an error: {rows:?}");
    let out = ws.run(&["report", v["run_id"].as_str().unwrap(), "--json"]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["passed"], 2, "{summary}");
}

/// A benchmark whose grader crashes, prints garbage, hangs, claims a score out of range or
/// passes: each of the first four is an evaluator error that fails its task, the run goes on.
const FLAKY: &str = r#"#!/bin/sh
case "$1" in
list)
  for id in crash garbage hang range fine; do echo "{\"id\": \"$id\", \"input\": \"$id\", \"expected\": \"$id\"}"; done ;;
grade)
  doc=$(cat)
  case "$doc" in
    *'"id":"crash"'*) echo "scorer blew up: KeyError 'answer'" >&2; exit 1 ;;
    *'"id":"garbage"'*) echo "<html>not a verdict</html>" ;;
    *'"id":"hang"'*) sleep 60 ;;
    *'"id":"range"'*) echo '{"score": 7, "passed": true}' ;;
    *) echo '{"score": 1, "passed": true, "reason": "fine"}' ;;
  esac ;;
esac
"#;

#[test]
fn a_grader_that_crashes_prints_garbage_or_hangs_is_an_evaluator_error_never_a_pass() {
    let ws = Workspace::new();
    ws.write("flaky.sh", FLAKY);
    let cfg = ws.write(
        "flaky.yaml",
        "name: flaky-grader\nbenchmark:\n  kind: command\n  command: [sh, flaky.sh]\n  timeout_seconds: 2\n\
         agent:\n  kind: oracle\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 5\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{}", text(&out.stderr));
    assert_eq!(v["status"], "complete", "{v}");
    let rows = graded(Path::new(v["bundle"].as_str().unwrap()));
    let error = |id: &str| rows.iter().find(|r| r.0 == id).unwrap().3.clone().unwrap_or_default();
    assert!(error("crash").contains("exited with") && error("crash").contains("KeyError 'answer'"), "{rows:?}");
    assert!(error("garbage").contains("printed no verdict"), "{rows:?}");
    assert!(error("hang").contains("did not answer within 2s"), "{rows:?}");
    assert!(error("range").contains("outside 0..1"), "{rows:?}");
    assert!(error("crash").contains("`sh flaky.sh grade`"), "the error names the command: {rows:?}");
    let passed: Vec<&str> = rows.iter().filter(|r| r.1).map(|r| r.0.as_str()).collect();
    assert_eq!(passed, ["fine"]);
    // `show` says why a task failed in the grader's words.
    let out = ws.run(&["show", "latest", "crash"]);
    assert!(text(&out.stdout).contains("KeyError 'answer'"), "{}", text(&out.stdout));
}

/// A listing that is not cases stops the run before anything starts, naming each bad line; a
/// lister that fails is a config error with its stderr.
#[test]
fn a_bad_listing_is_a_usage_error_naming_each_line_and_creates_no_run() {
    let ws = Workspace::new();
    ws.write(
        "bad.sh",
        "case \"$1\" in list) echo '{\"id\": \"a\", \"input\": 1}'; echo 'oops'; echo '{\"id\": \"a\", \"input\": 2}'; echo '{\"input\": 3}';; esac\n",
    );
    ws.write("dies.sh", "echo 'cannot open dataset.jsonl' >&2; exit 5\n");
    for (script, wants) in [
        ("bad.sh", &["line:2: invalid JSON", "line:3: duplicate case id `a`", "line:4: missing field `id`"][..]),
        ("dies.sh", &["exited with exit status: 5", "cannot open dataset.jsonl"][..]),
    ] {
        let cfg = ws.write(
            "bad.yaml",
            &format!(
                "name: bad-listing\nbenchmark:\n  kind: command\n  command: [sh, {script}]\nagent:\n  kind: oracle\nstorage:\n  bundle_root: runs\n"
            ),
        );
        let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        for want in wants {
            assert!(err.contains(want), "{want:?} missing from: {err}");
        }
    }
    let out = ws.run(&["runs", "list", "--json"]);
    assert!(!text(&out.stdout).contains("bad-listing"), "a run was created: {}", text(&out.stdout));
}

/// An agent that tries to read the benchmark's program, its dataset and its scorer: each is
/// denied, since they hold the answers.
const SNOOP: &str = r#"
import json, sys
req = json.loads(sys.stdin.readline())
tried = {}
for name, path in req["input"].items():
    try:
        open(path).read(1)
        tried[name] = "ok"
    except Exception as e:
        tried[name] = type(e).__name__
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": json.dumps(tried)}}), flush=True)
"#;

#[test]
fn an_agent_cannot_read_the_benchmarks_program_dataset_or_scorer() {
    let ws = Workspace::new();
    let dir = ws.shared_dir("bench");
    std::fs::write(dir.join("data.jsonl"), "{\"q\": \"SECRET\"}\n").unwrap();
    std::fs::write(dir.join("scorer.py"), "ANSWER = 'SECRET'\n").unwrap();
    let paths = serde_json::json!({
        "program": dir.join("list.py"), "dataset": dir.join("data.jsonl"), "scorer": dir.join("scorer.py"),
    });
    std::fs::write(
        dir.join("list.py"),
        format!(
            "import json, sys\nif sys.argv[-1] == 'list':\n    print(json.dumps({{'id': 'snoop', 'input': {paths}}}))\nelse:\n    sys.stdin.read(); print(json.dumps({{'score': 0, 'passed': False}}))\n"
        ),
    )
    .unwrap();
    ws.write("snoop.py", SNOOP);
    let cfg = ws.write(
        "snoop.yaml",
        "name: snoop-benchmark\nbenchmark:\n  kind: command\n  command: [python3, bench/list.py, bench/data.jsonl]\n  files: [bench/scorer.py]\n\
         agent:\n  kind: command\n  command: [python3, snoop.py]\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{}", text(&out.stderr));
    let r = &results(Path::new(v["bundle"].as_str().unwrap()))[0];
    let tried: serde_json::Value = serde_json::from_str(r["agent"]["final_answer"].as_str().unwrap()).unwrap();
    for what in ["program", "dataset", "scorer"] {
        assert_eq!(tried[what], "PermissionError", "the agent read the benchmark's {what}: {tried}");
    }
}

/// An agent that makes the tool calls its case lists (`{"calls": [[tool, arguments], …]}`),
/// then answers.
const CALLING_AGENT: &str = r#"import json, sys
request = json.loads(sys.stdin.readline())
for tool, args in request["input"]["calls"]:
    print(json.dumps({"kind": "agent.tool_call", "payload": {"tool": tool, "arguments": args}}), flush=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": "done"}}), flush=True)
"#;

/// `tool_calls` through the real binary: the right calls pass; the right tool with the wrong
/// arguments, the right calls in another order and a missing call each get the partial score
/// and the why docs/judging.md describes; a bad rule is refused at load with its place.
#[test]
fn tool_calls_score_wrong_arguments_wrong_order_and_a_missing_call_in_part_saying_why() {
    let ws = Workspace::new();
    ws.write("agent.py", CALLING_AGENT);
    let search = r#"["search", {"q": "weather paris", "limit": 5}]"#;
    let book = r#"["book", {"city": "Paris", "nights": 2}]"#;
    let cases = [
        ("right", format!("[{search}, {book}]")),
        ("wrong-args", format!(r#"[["search", {{"q": "weather paris", "limit": 50}}], {book}]"#)),
        ("wrong-order", format!("[{book}, {search}]")),
        ("missing", format!("[{search}]")),
    ];
    let lines: String =
        cases.iter().map(|(id, calls)| format!("{{\"id\": \"{id}\", \"input\": {{\"calls\": {calls}}}}}\n")).collect();
    ws.write("cases.jsonl", &lines);
    let evaluator = "  - kind: tool_calls\n    calls:\n      - tool: search\n        arguments: {q: weather paris, limit: 5}\n        match: {q: {regex: '(?i)paris'}}\n      - tool: book\n        arguments: {city: Paris}\n";
    let cfg = ws.write(
        "calls.yaml",
        &format!(
            "name: calls\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\nevaluators:\n{evaluator}storage:\n  bundle_root: runs\n"
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = std::path::PathBuf::from(v["bundle"].as_str().unwrap());
    let score = |id: &str| {
        let r = read_json(&bundle.join(format!("tasks/{id}/result.json")));
        let s = r["scores"].as_array().unwrap().iter().find(|s| s["kind"] == "tool_calls").unwrap().clone();
        (s["score"].as_f64().unwrap(), s["passed"].as_bool().unwrap(), s["reason"].as_str().unwrap().to_string())
    };
    assert_eq!(score("right").0, 1.0, "{:?}", score("right"));
    let (s, passed, why) = score("wrong-args");
    assert_eq!((s, passed), (0.5, false), "{why}");
    assert!(why.contains("call 1 `search`: nearest call at step 0: argument `limit` is 50, expected 5"), "{why}");
    let (s, _, why) = score("wrong-order");
    assert_eq!(s, 0.5, "{why}");
    assert!(why.contains("call 2 `book`: its call at step 0 came out of order"), "{why}");
    let (s, _, why) = score("missing");
    assert_eq!(s, 0.5, "{why}");
    assert!(why.contains("call 2 `book` was never called (the agent called: search)"), "{why}");

    // A rule that cannot compile is named where it is, before anything runs.
    std::fs::write(&cfg, std::fs::read_to_string(&cfg).unwrap().replace("'(?i)paris'", "'(unclosed'")).unwrap();
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("calls.yaml:") && said.contains("invalid regex"), "{said}");
}

/// An agent that answers each case with the case's `say` (a text or a JSON value).
const SAYING_AGENT: &str = r#"import json, sys
request = json.loads(sys.stdin.readline())
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": request["input"]["say"]}}), flush=True)
"#;

/// `similarity`, `numeric` and `json_equal` through the binary, each with the score and reason
/// docs/judging.md describes.
#[test]
fn near_answers_are_scored_by_similarity_number_and_json_difference() {
    let ws = Workspace::new();
    ws.write("agent.py", SAYING_AGENT);
    let cases = [
        r#"{"id": "near", "input": {"say": "Paris, France"}, "evaluators": [{"kind": "similarity", "expected": "Paris France", "min": 0.9}]}"#,
        r#"{"id": "far", "input": {"say": "London"}, "evaluators": [{"kind": "similarity", "expected": "Paris France"}]}"#,
        r#"{"id": "close", "input": {"say": "about 101.2 km"}, "evaluators": [{"kind": "numeric", "expected": 100, "rel_tolerance": 0.02}]}"#,
        r#"{"id": "off", "input": {"say": "105"}, "evaluators": [{"kind": "numeric", "expected": 100, "abs_tolerance": 1}]}"#,
        r#"{"id": "same", "input": {"say": {"b": [1, 2], "a": 1.0, "t": 9}}, "evaluators": [{"kind": "json_equal", "expected": {"a": 1, "b": [1, 2], "t": 3}, "ignore": ["/t"]}]}"#,
        r#"{"id": "differs", "input": {"say": "{\"a\": 2}"}, "evaluators": [{"kind": "json_equal", "expected": {"a": 1, "b": true}}]}"#,
    ];
    ws.write("cases.jsonl", &cases.map(|c| format!("{c}\n")).concat());
    let cfg = ws.write(
        "near.yaml",
        "name: near\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = std::path::PathBuf::from(v["bundle"].as_str().unwrap());
    let score = |id: &str, kind: &str| {
        let r = read_json(&bundle.join(format!("tasks/{id}/result.json")));
        let s = r["scores"].as_array().unwrap().iter().find(|s| s["kind"] == kind).unwrap().clone();
        (s["score"].as_f64().unwrap(), s["passed"].as_bool().unwrap(), s["reason"].as_str().unwrap().to_string())
    };
    let (s, passed, why) = score("near", "similarity");
    assert!(passed && s > 0.9 && s < 1.0, "{s} {why}");
    assert!(!score("far", "similarity").1);
    assert!(score("close", "numeric").1, "{:?}", score("close", "numeric"));
    let (_, passed, why) = score("off", "numeric");
    assert!(!passed && why.contains("105 against 100: off by 5 (allowed 1)"), "{why}");
    assert!(score("same", "json_equal").1, "{:?}", score("same", "json_equal"));
    let (_, passed, why) = score("differs", "json_equal");
    assert!(!passed && why.contains("/a: 2, expected 1") && why.contains("/b: missing"), "{why}");
}
