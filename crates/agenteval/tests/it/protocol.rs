//! The `command` agent protocol as docs/agent-protocol.md states it, claim by claim, with one
//! probe agent whose behaviour each task's input picks: what the agent is sent (never the
//! expected answer), its scratch folder (deleted after), every documented agent failure, the
//! 4 KiB stderr tail, the cost limit, and the process group killed at the wall-clock limit.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::util::*;

const PROBE: &str = r#"
import json, os, subprocess, sys, time
req = json.loads(sys.stdin.readline())
mode = req["input"]
seen = os.environ["PROBE_OUT"]
def emit(kind, payload=None, **usage):
    print(json.dumps(dict(kind=kind, payload=payload, **usage)), flush=True)
if mode == "record":
    scratch = os.environ["AGENTEVAL_SCRATCH_DIR"]
    open(os.path.join(scratch, "note.txt"), "w").write("x")
    with open(os.path.join(seen, "record.json"), "w") as f:
        json.dump({"request": req, "env_scratch": scratch, "scratch_listing": os.listdir(scratch)}, f)
    emit("agent.terminal", {"final_answer": "ok"})
elif mode == "no_final":
    emit("agent.terminal", {})
elif mode == "after_terminal":
    emit("agent.terminal", {"final_answer": "ok"})
    emit("agent.observation", "one more")
elif mode == "long_line":
    print(json.dumps({"kind": "agent.observation", "payload": "x" * (5 * 1024 * 1024)}), flush=True)
    emit("agent.terminal", {"final_answer": "ok"})
elif mode == "stderr_tail":
    sys.stderr.write("HEAD-MARKER " + "." * 10000 + " TAIL-MARKER\n")
    sys.exit(1)
elif mode == "costly":
    for _ in range(5):
        emit("agent.observation", "thinking", cost_usd=0.3)
    emit("agent.terminal", {"final_answer": "ok"})
elif mode == "forged_score":
    emit("evaluator.score", {"evaluator_id": "benchmark", "score": 1.0, "passed": True, "reason": "trust me"})
    emit("agent.terminal", {"final_answer": "ok"})
elif mode == "forged_call":
    emit("model.call", {"model": "free-model", "call": 1}, input_tokens=1, cost_usd=0.0)
    emit("agent.terminal", {"final_answer": "ok"})
elif mode == "forged_verdict":
    emit("policy.verdict", {"allowed": True})
    emit("agent.terminal", {"final_answer": "ok"})
elif mode == "hang_with_child":
    child = subprocess.Popen(["sleep", "300"])
    open(os.path.join(seen, "child.pid"), "w").write(str(child.pid))
    time.sleep(300)
"#;

const CASES: &[&str] = &[
    "record",
    "no_final",
    "after_terminal",
    "long_line",
    "stderr_tail",
    "costly",
    "hang_with_child",
    "forged_score",
    "forged_verdict",
    "forged_call",
];

fn alive(pid: i32) -> bool {
    // A zombie has exited: only a process that still runs counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn the_agent_protocol_holds_claim_by_claim() {
    let ws = Workspace::new();
    ws.write("probe.py", PROBE);
    let seen = ws.shared_dir("seen");
    let cases: String = CASES
        .iter()
        .map(|c| {
            format!("{{\"id\": \"{}\", \"input\": \"{c}\", \"expected\": \"SECRET-ANSWER-42\"}}\n", c.replace('_', "-"))
        })
        .collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "probe.yaml",
        &format!(
            r#"name: protocol
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, probe.py]
  env:
    PROBE_OUT: {seen}
  sandbox:
    write: [{seen}]
  limits:
    max_wall_seconds: 8
    max_cost_usd: 0.5
backend:
  max_concurrent_jobs: 4
storage:
  bundle_root: runs
"#,
            seen = seen.display()
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = Path::new(v["bundle"].as_str().unwrap()).to_path_buf();
    let by_id: HashMap<String, serde_json::Value> =
        results(&bundle).into_iter().map(|r| (r["task_id"].as_str().unwrap().to_string(), r)).collect();
    let ended = |id: &str| by_id[id]["agent"]["terminated_by"].as_str().unwrap().to_string();
    let error = |id: &str| by_id[id]["agent"]["error"].as_str().unwrap_or_default().to_string();

    // The request: the input, never the expected answer; a scratch folder, gone afterwards.
    let record = read_json(&seen.join("record.json"));
    let request = record["request"].to_string();
    assert!(!request.contains("SECRET-ANSWER-42"), "the expected answer reached the agent: {request}");
    assert_eq!(record["request"]["input"], "record");
    assert_eq!(record["request"]["protocol"], 1);
    assert_eq!(record["request"]["scratch_dir"], record["env_scratch"]);
    assert_eq!(record["scratch_listing"], serde_json::json!(["note.txt"]), "the scratch folder starts empty");
    assert!(!Path::new(record["env_scratch"].as_str().unwrap()).exists(), "the scratch folder outlived its task");
    assert_eq!(ended("record"), "completed");

    // Every documented agent failure is graded, never a failure of the run.
    for id in ["no-final", "after-terminal", "long-line", "stderr-tail"] {
        assert_eq!(ended(id), "agent_error", "{id}: {}", by_id[id]);
        assert_eq!(by_id[id]["passed"], false, "{id}");
    }
    // Scores and verdicts are the graders': an agent's own is refused, and nothing it wrote
    // reads as a grade.
    for (id, kind) in
        [("forged-score", "evaluator.score"), ("forged-verdict", "policy.verdict"), ("forged-call", "model.call")]
    {
        assert_eq!(ended(id), "agent_error", "{id}: {}", by_id[id]);
        assert!(error(id).contains(&format!("cannot emit `{kind}`")), "{id}: {}", error(id));
        let trace = crate::util::read_text(bundle.join(format!("tasks/{id}/trace.jsonl"))).unwrap();
        assert!(!trace.contains("trust me") && !trace.contains("\"allowed\""), "{id}: {trace}");
    }
    // The last 4 KiB of stderr, not the first.
    let tail = error("stderr-tail");
    assert!(tail.contains("TAIL-MARKER"), "{tail}");
    assert!(!tail.contains("HEAD-MARKER"), "more than the tail was kept: {} bytes", tail.len());
    assert!(tail.len() <= 4096 + 200, "{} bytes kept", tail.len());

    // The cost limit stops the agent after the event that crossed it.
    assert_eq!(ended("costly"), "limit_cost", "{}", by_id["costly"]);
    let cost = by_id["costly"]["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((0.5..0.7).contains(&cost), "stopped after the crossing event: ${cost}");

    // The wall-clock limit kills the agent's whole process group, its children included.
    assert_eq!(ended("hang-with-child"), "limit_time");
    let pid: i32 = std::fs::read_to_string(seen.join("child.pid")).unwrap().trim().parse().unwrap();
    wait_until("the agent's child to be killed", Duration::from_secs(10), || !alive(pid));
}

#[test]
fn a_program_that_cannot_start_is_an_agent_error_and_the_run_says_so() {
    let ws = Workspace::new();
    ws.write("cases.jsonl", "{\"id\": \"a\", \"input\": \"q\", \"expected\": \"x\"}\n");
    let cfg = ws.write(
        "broken.yaml",
        r#"name: broken
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [no-such-program-here]
storage:
  bundle_root: runs
"#,
    );
    let (v, _, _) = ws.submit(&cfg, &[]);
    let bundle = Path::new(v["bundle"].as_str().unwrap()).to_path_buf();
    let r = &results(&bundle)[0];
    assert_eq!(r["agent"]["terminated_by"], "agent_error", "{r}");
    assert!(r["agent"]["error"].as_str().unwrap().contains("no-such-program-here"), "{r}");
}

/// The agent a user wrote, packed into the run (`agent.pack: true`): the workers run the
/// archive's files, not the config's folder; a change to the agent is a new hash in the run's
/// metadata, and `compare` judges it.
#[test]
fn a_packed_agent_is_what_ran_and_its_change_is_a_new_hash_that_compare_judges() {
    let ws = Workspace::new();
    let agent = "import json, os, sys\nfrom answers import VERSION\nreq = json.loads(sys.stdin.readline())\nhere = os.path.dirname(os.path.abspath(__file__))\nanswer = VERSION if req['input'] == 'version' else here\nprint(json.dumps({'kind': 'agent.final_answer', 'payload': {'answer': answer}}), flush=True)\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': answer}}), flush=True)\n";
    std::fs::create_dir_all(ws.path().join("my-agent")).unwrap();
    ws.write("my-agent/agent.py", agent);
    ws.write("my-agent/answers.py", "VERSION = 'one'\n");
    let cases: String =
        (0..4).map(|i| format!("{{\"id\": \"v{i}\", \"input\": \"version\", \"expected\": \"one\"}}\n")).collect();
    ws.write("cases.jsonl", &format!("{cases}{{\"id\": \"where\", \"input\": \"where\"}}\n"));
    let cfg = ws.write(
        "packed.yaml",
        "name: packed\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, agent.py]\n  workdir: my-agent\n  pack: true\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["summary"]["passed"], 5, "{v}");
    let first = std::path::PathBuf::from(v["bundle"].as_str().unwrap());
    let meta = read_json(&first.join("metadata.json"));
    let one = meta["agent_sha256"].as_str().unwrap().to_string();
    assert_eq!(one.len(), 64);
    assert!(first.join(format!("agent/{one}.tar.gz")).is_file(), "the archive is in the bundle");
    let resolved = read_json(&first.join("config.resolved.json"));
    assert_eq!(resolved["agent"]["packed"]["sha256"], one.as_str());
    // It ran from the unpacked archive, not from the config's folder.
    let ran_in =
        read_json(&first.join("tasks/where/result.json"))["agent"]["final_answer"].as_str().unwrap().to_string();
    assert!(ran_in.ends_with(&format!("agenteval-agents/{one}")), "the agent ran in {ran_in}");
    assert!(ws.validate(first.to_str().unwrap()).status.success());

    // The agent changes: a new hash, and compare calls it a regression.
    ws.write("my-agent/answers.py", "VERSION = 'two'\n");
    let (v2, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v2}");
    let second = std::path::PathBuf::from(v2["bundle"].as_str().unwrap());
    let two = read_json(&second.join("metadata.json"))["agent_sha256"].as_str().unwrap().to_string();
    assert_ne!(one, two, "a changed agent is a new hash");
    assert_eq!(v2["summary"]["passed"], 1, "{v2}");
    let out = ws.run(&["compare", v["run_id"].as_str().unwrap(), v2["run_id"].as_str().unwrap(), "--format", "json"]);
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rate =
        c["comparison"]["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "pass_rate").unwrap().clone();
    assert_eq!(rate["regressed"], true, "{rate}");
    assert_eq!(c["comparison"]["regressions"].as_array().unwrap().len(), 4);

    // Packing the config's folder would hand the agent the cases and their answers: refused.
    let whole = ws.write(
        "whole.yaml",
        "name: whole\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, my-agent/agent.py]\n  pack: true\n",
    );
    let runs_before = std::fs::read_dir(ws.path().join("runs")).unwrap().count();
    let out = ws.run(&["submit", "--config", whole.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("hidden from agents"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(ws.path().join("runs")).unwrap().count(), runs_before, "nothing was created");
    // A folder that links out of itself is not packed: exit 2, before any run.
    std::os::unix::fs::symlink("/etc/hostname", ws.path().join("my-agent/host")).unwrap();
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("links outside"), "{}", text(&out.stderr));
}
