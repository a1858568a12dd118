//! Agents that act in an environment, end to end with a real Docker engine (and the local base
//! image `docker/build-local.sh --base-only` makes, so nothing needs a registry): the shipped
//! Harbor tasks under the oracle, `nop` and a wrong solution; an image built once for ten tasks
//! that share a folder and a Dockerfile that does not build; what an agent cannot reach from its
//! container; a memory bomb; and no container left after a run, a Ctrl-C, or a SIGKILLed worker
//! followed by `resume`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::*;

pub(crate) const BASE: &str = "agenteval-local/debian:bookworm";

/// The engine running and the local base image there, made once.
pub(crate) fn docker_ready() {
    static READY: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    READY.get_or_init(|| {
        let out = Command::new(repo().join("docker/build-local.sh")).arg("--base-only").output().unwrap();
        assert!(out.status.success(), "no Docker engine: {}{}", text(&out.stdout), text(&out.stderr));
    });
}

/// The containers of `run` still there.
fn containers_of(run: &str) -> Vec<String> {
    let out =
        Command::new("docker").args(["ps", "-aq", "--filter", &format!("label=agenteval.run={run}")]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(String::from).filter(|l| !l.is_empty()).collect()
}

/// Copies a folder (a benchmark to alter in a test).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

pub(crate) fn harbor_config(ws: &Workspace, tasks: &Path, agent: &str, extra: &str) -> PathBuf {
    ws.write(
        "harbor.yaml",
        &format!(
            "name: harbor-test\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: {agent}\n  limits:\n    max_wall_seconds: 300\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  max_concurrent_jobs: 4\n  tasks_per_job: 1\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\n{extra}",
            tasks.display()
        ),
    )
}

fn scores(ws: &Workspace, run: &str) -> Vec<(String, String, f64)> {
    let out = ws.run(&["runs", "show", run, "--tasks", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bundle = ws.runs().join(run);
    let mut rows: Vec<(String, String, f64)> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let id = t["task_id"].as_str().unwrap().to_string();
            let r = read_json(&bundle.join(format!("tasks/{id}/result.json")));
            let outcome = t["outcome"].as_str().unwrap_or("?").to_string();
            (id, outcome, r["scores"][0]["score"].as_f64().unwrap_or(-1.0))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

#[test]
fn the_shipped_tasks_pass_with_their_solutions_and_fail_with_none_or_a_wrong_one() {
    docker_ready();
    let ws = Workspace::new();
    let shipped = repo().join("configs/harbor-mini");
    let cfg = harbor_config(&ws, &shipped, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let got = scores(&ws, &run);
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.iter().all(|(_, o, s)| o == "passed" && *s == 1.0), "the oracle passes every task: {got:?}");
    let bundle = ws.runs().join(&run);
    assert!(ws.validate(bundle.to_str().unwrap()).status.success(), "the bundle validates");
    let patch = crate::util::read_text(bundle.join("tasks/fix-python-bug/artifacts/patch.diff")).unwrap();
    assert!(patch.contains("--- a/calc/stats.py") && patch.contains("+        raise ValueError"), "{patch}");
    let manifest = std::fs::read_to_string(bundle.join("manifest.json")).unwrap();
    assert!(manifest.contains("tasks/fix-python-bug.tar.gz"), "the task's pack, and its patch, are checksummed");
    let log = crate::util::read_text(bundle.join("tasks/hello-file/worker.log")).unwrap();
    assert!(log.contains("environment docker") && log.contains("removed"), "{log}");
    assert!(containers_of(&run).is_empty(), "no container is left after a run");
    // The report and the UI show a task's patch.
    let report = ws.path().join("r.html");
    let out = ws.run(&["report", &run, "-o", report.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("\"patch\":") && html.contains("raise ValueError"), "the report embeds the patch");
    let index = ws.index();
    let ui = crate::util::ui::UiServer::start(ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0"]));
    let page = ui.get(&format!("/runs/{run}/tasks/fix-python-bug")).body;
    assert!(page.contains("id=\"patch\"") && page.contains("raise ValueError"), "the task page shows the patch");
    drop(ui);

    // An agent that does nothing passes nothing: no shipped task's tests are trivially true.
    let (v, code, _) = ws.submit(&cfg, &["--set", "agent.kind=nop"]);
    assert_eq!(code, 0, "{v}");
    let got = scores(&ws, v["run_id"].as_str().unwrap());
    assert!(got.iter().all(|(_, o, s)| o == "failed" && *s == 0.0), "nop fails every task: {got:?}");

    // A wrong solution scores 0 on its task, the others still pass.
    let altered = ws.path().join("altered");
    copy_dir(&shipped, &altered);
    std::fs::write(altered.join("count-failed/solution/solve.sh"), "#!/bin/bash\necho 5 > /app/count.txt\n").unwrap();
    let cfg = harbor_config(&ws, &altered, "oracle", "");
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let got = scores(&ws, v["run_id"].as_str().unwrap());
    for (id, outcome, score) in &got {
        let want = if id == "count-failed" { ("failed", 0.0) } else { ("passed", 1.0) };
        assert_eq!((outcome.as_str(), *score), want, "{id}: {got:?}");
    }
}

/// A task folder with one Dockerfile line of its own; `shared` decides the rest.
fn write_task(root: &Path, id: &str, dockerfile: &str, solve: &str, test: &str, toml: &str) {
    let t = root.join(id);
    for d in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    std::fs::write(t.join("instruction.md"), format!("Task {id}.\n")).unwrap();
    std::fs::write(t.join("task.toml"), format!("version = \"1.0\"\n{toml}")).unwrap();
    std::fs::write(t.join("environment/Dockerfile"), dockerfile).unwrap();
    std::fs::write(t.join("solution/solve.sh"), solve).unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        format!("#!/bin/bash\nmkdir -p /logs/verifier\nif {test}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"),
    )
    .unwrap();
}

#[test]
fn ten_tasks_sharing_a_folder_build_one_image_and_one_that_does_not_build_is_infra() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    // A fresh image for this test run: the nonce is in the Dockerfile.
    let nonce = uuid::Uuid::now_v7().to_string();
    let shared = format!("FROM debian:bookworm-slim\nRUN echo {nonce} > /nonce\nWORKDIR /app\n");
    for i in 0..10 {
        write_task(&tasks, &format!("t{i:02}"), &shared, "#!/bin/bash\ntouch /app/done\n", "[ -e /app/done ]", "");
    }
    let broken = format!("FROM debian:bookworm-slim\nRUN echo {nonce} && echo the-build-breaks-here >&2 && false\n");
    write_task(&tasks, "broken", &broken, "#!/bin/bash\ntrue\n", "true", "");
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    // A given-up task fails the run (exit 3), the others ran.
    assert_eq!((v["status"].as_str(), code), (Some("failed"), 3), "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let got = scores(&ws, &run);
    for (id, outcome, _) in &got {
        let want = if id == "broken" { "infra" } else { "passed" };
        assert_eq!(outcome, want, "{id}: {got:?}");
    }
    let bundle = ws.runs().join(&run);
    let broken = read_json(&bundle.join("tasks/broken/result.json"));
    let err = broken["agent"]["error"].as_str().unwrap();
    assert!(err.contains("did not build") && err.contains("the-build-breaks-here"), "the build's last lines: {err}");
    let logs: Vec<String> =
        (0..10).map(|i| crate::util::read_text(bundle.join(format!("tasks/t{i:02}/worker.log"))).unwrap()).collect();
    let built = logs.iter().filter(|l| l.contains(" built in ")).count();
    let reused = logs.iter().filter(|l| l.contains(" reused")).count();
    assert_eq!((built, reused), (1, 9), "one build for ten tasks sharing a folder:\n{}", logs.join("\n"));
    assert!(containers_of(&run).is_empty());
}

#[test]
fn an_agent_in_its_container_finds_no_tests_no_solution_no_network_and_no_docker() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let image = "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\n";
    // A port on this machine, reachable from a container with a network (its gateway).
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The "solution" is the hostile agent: it records whatever it can reach. (The oracle's
    // own /solution is the one thing it may see; any other task's files it may not.)
    let probe = r#"#!/bin/bash
found=/app/found
: > $found
[ -e /tests ] && echo tests >> $found
ls / | grep -qx logs && [ -n "$(ls -A /logs 2>/dev/null)" ] && echo logs >> $found
[ -S /var/run/docker.sock ] && echo docker-socket >> $found
find / -xdev -name test.sh 2>/dev/null | grep -q . && echo a-test-script >> $found
python3 - <<'PY' 2>/dev/null && echo network >> $found
import socket, struct
gw = next(socket.inet_ntoa(struct.pack("<L", int(f[2], 16))) for f in (l.split() for l in open("/proc/net/route")) if f[1] == "00000000")
PY
python3 - <<'PY' 2>/dev/null && echo this-machine >> $found
import socket, struct
gw = next(socket.inet_ntoa(struct.pack("<L", int(f[2], 16))) for f in (l.split() for l in open("/proc/net/route")) if f[1] == "00000000")
socket.create_connection((gw, PORT), 3)
PY
cat $found
"#
    .replace("PORT", &port.to_string());
    write_task(&tasks, "probe", image, &probe, "[ -e /app/found ] && [ ! -s /app/found ]", "");
    // The same probe with the network on finds a network (the probe is not blind), and still
    // not this machine: its own addresses are closed to containers (`agenteval-net`).
    write_task(
        &tasks,
        "probe-online",
        image,
        &probe,
        "grep -qx network /app/found && ! grep -qx this-machine /app/found",
        "[environment]\nallow_internet = true\n",
    );
    write_task(&tasks, "other", image, "#!/bin/bash\ntrue\n", "true", "");
    // An agent that leaves a loop behind to rewrite the tests' reward: stopped before grading.
    let cheat = "#!/bin/bash\nnohup bash -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; done' >/dev/null 2>&1 &\nsleep 1\n";
    write_task(&tasks, "cheat", image, cheat, "false", "");
    // A memory bomb under a 64 MiB limit: killed, and the task ends `errored` (a limit).
    write_task(
        &tasks,
        "bomb",
        image,
        "#!/bin/bash\npython3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'\n",
        "true",
        "[environment]\nmemory_mb = 64\n",
    );
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, _, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let bundle = ws.runs().join(&run);
    let probe = read_json(&bundle.join("tasks/probe/result.json"));
    let trace = crate::util::read_text(bundle.join("tasks/probe/trace.jsonl")).unwrap();
    assert_eq!(probe["passed"], true, "the agent reached something it must not: {trace}");
    let cheat = read_json(&bundle.join("tasks/cheat/result.json"));
    assert_eq!(cheat["passed"], false, "a loop the agent left rewrote the reward: {cheat}");
    let online = read_json(&bundle.join("tasks/probe-online/result.json"));
    assert_eq!(online["passed"], true, "with the network on the probe finds it, and not this machine: {online}");
    drop(listener);
    let bomb = read_json(&bundle.join("tasks/bomb/result.json"));
    assert_eq!(bomb["agent"]["terminated_by"], "limit_memory", "{bomb}");
    let got = scores(&ws, &run);
    let bomb_outcome = got.iter().find(|(id, ..)| id == "bomb").map(|(_, o, _)| o.as_str());
    assert_eq!(bomb_outcome, Some("errored"), "a memory limit is the agent's, not infra: {got:?}");
    assert!(containers_of(&run).is_empty());
}

#[test]
fn no_container_outlives_a_ctrl_c_a_cancel_or_a_killed_worker_once_resumed() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let image = "FROM debian:bookworm-slim\nWORKDIR /app\n";
    for i in 0..2 {
        write_task(
            &tasks,
            &format!("slow{i}"),
            image,
            "#!/bin/bash\nsleep 20\ntouch /app/done\n",
            "[ -e /app/done ]",
            "",
        );
    }
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let index = ws.index();
    let run_of = |ws: &Workspace| -> String {
        let out = ws.run(&["runs", "list", "--json", "--index", index.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v[0]["run_id"].as_str().unwrap_or_default().to_string()
    };

    // Ctrl-C: the run is interrupted and its containers go with it.
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("a run", Duration::from_secs(60), || !run_of(&ws).is_empty());
    let run = run_of(&ws);
    wait_until("its containers", Duration::from_secs(120), || containers_of(&run).len() == 2);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = wait_output(child, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(3), "an interrupted run: {}", text(&out.stderr));
    assert!(containers_of(&run).is_empty(), "a Ctrl-C leaves no container: {:?}", containers_of(&run));

    // `agenteval cancel` from another process: the same.
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("another run", Duration::from_secs(60), || run_of(&ws) != run);
    let run = run_of(&ws);
    wait_until("its containers", Duration::from_secs(120), || containers_of(&run).len() == 2);
    let out = ws.run(&["cancel", &run, "--index", index.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = wait_output(child, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(3), "a cancelled run: {}", text(&out.stderr));
    assert!(containers_of(&run).is_empty(), "a cancelled run leaves no container: {:?}", containers_of(&run));

    // A SIGKILLed worker leaves its container; resuming the run removes it and finishes.
    let mut child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    wait_until("a third run", Duration::from_secs(60), || run_of(&ws) != run);
    let run = run_of(&ws);
    wait_until("its containers", Duration::from_secs(120), || containers_of(&run).len() == 2);
    child.kill().unwrap();
    let _ = child.wait();
    for (pid, _) in workers_under(ws.path()) {
        let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!containers_of(&run).is_empty(), "a killed worker cannot clean up after itself");
    let out = ws.run(&["resume", &run, "--force", "--json", "--index", index.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete", "{v}");
    assert!(containers_of(&run).is_empty(), "resume removed what the killed worker left");
}

/// A `command` agent in Python acts in its task's container through the documented interface:
/// the `exec` helper the request names, and the socket itself (one JSON line each way).
const ACTING_AGENT: &str = r#"
import json, os, socket, subprocess, sys
req = json.loads(sys.stdin.readline())
env = req["environment"]
def emit(kind, payload):
    print(json.dumps({"kind": kind, "payload": payload}), flush=True)
# The helper: its stdout is the command's, its exit code the command's.
cmd = "echo 'Hello, agenteval!' > hello.txt && pwd"
emit("agent.tool_call", {"tool": "bash", "args": {"command": cmd}})
done = subprocess.run(env["exec"] + [cmd], capture_output=True, text=True)
emit("agent.tool_result", {"tool": "bash", "exit_code": done.returncode, "stdout": done.stdout})
fails = subprocess.run(env["exec"] + ["exit 7"], capture_output=True, text=True)
# The socket, spoken directly.
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["AGENTEVAL_ENV_SOCKET"])
s.sendall(json.dumps({"command": "cat /app/hello.txt; ls /tests 2>&1 || true"}).encode() + b"\n")
answer = json.loads(s.makefile().readline())
emit("agent.terminal", {"final_answer": {"pwd": done.stdout.strip(), "exit7": fails.returncode, "read": answer["stdout"], "workdir": env["workdir"], "kind": env["kind"]}})
"#;

#[test]
fn a_command_agent_in_python_acts_in_its_container_through_the_documented_interface() {
    docker_ready();
    let ws = Workspace::new();
    ws.write("act.py", ACTING_AGENT);
    let shipped = repo().join("configs/harbor-mini");
    let cfg = harbor_config(&ws, &shipped, "command\n  command: [python3, act.py]", "");
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[hello-file]"]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let r = read_json(&ws.runs().join(run).join("tasks/hello-file/result.json"));
    assert_eq!(r["passed"], true, "the agent's file passed the task's tests: {r}");
    let a = &r["agent"]["final_answer"];
    assert_eq!(
        (a["pwd"].as_str(), a["workdir"].as_str(), a["kind"].as_str()),
        (Some("/app"), Some("/app"), Some("docker")),
        "{a}"
    );
    assert_eq!(a["exit7"], 7, "the helper exits with the command's code: {a}");
    let read = a["read"].as_str().unwrap();
    assert!(
        read.starts_with("Hello, agenteval!\n") && read.contains("No such file"),
        "no /tests while it acts: {read}"
    );
    assert!(containers_of(run).is_empty());
}

/// The `llm` agent, against the scripted model, fixes the Python task with `bash` and
/// `write_file` in its container; its tests pass there, and the trace shows each call with its
/// output.
#[test]
fn the_llm_agent_fixes_a_repository_with_bash_and_write_file_and_its_tests_pass() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", "OPENAI_API_KEY=sk-test-not-a-real-key-000000000000\n");
    let tasks = ws.path().join("tasks");
    copy_dir(&repo().join("configs/harbor-mini/fix-python-bug"), &tasks.join("fix-python-bug"));
    let instruction = tasks.join("fix-python-bug/instruction.md");
    let text_was = std::fs::read_to_string(&instruction).unwrap();
    std::fs::write(&instruction, format!("{text_was}\nFIX_STATS\n")).unwrap();
    let agent = format!("llm\n  model: openai:gpt-4o-mini\n  base_url: {}\n  tools: []", mock.base_url());
    let cfg = harbor_config(&ws, &tasks, &agent, "");
    let (v, code, out) = ws.submit(&cfg, &["--set", "backend.secrets_file=secrets.env"]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let r = read_json(&bundle.join("tasks/fix-python-bug/result.json"));
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["agent"]["final_answer"].as_str().map(|a| a.contains("2.0")), Some(true), "{r}");
    let trace: Vec<serde_json::Value> = crate::util::read_text(bundle.join("tasks/fix-python-bug/trace.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&str> =
        trace.iter().filter(|e| e["kind"] == "agent.tool_call").filter_map(|e| e["payload"]["tool"].as_str()).collect();
    assert_eq!(calls, ["bash", "write_file", "bash"], "{trace:?}");
    let outputs: Vec<String> =
        trace.iter().filter(|e| e["kind"] == "agent.tool_result").map(|e| e["payload"].to_string()).collect();
    assert!(outputs[0].contains("len(values) + 1"), "the first call read the buggy file: {}", outputs[0]);
    assert!(outputs[2].contains("2.0"), "the last call ran the fixed module: {}", outputs[2]);
    let patch = crate::util::read_text(bundle.join("tasks/fix-python-bug/artifacts/patch.diff")).unwrap();
    assert!(patch.contains("+        raise ValueError"), "{patch}");
}

/// An installed agent: a setup script installs a CLI into the task's container, and it runs
/// there with the instruction in `$AGENTEVAL_INSTRUCTION`.
#[test]
fn an_installed_agent_is_set_up_in_the_container_and_runs_there() {
    docker_ready();
    let ws = Workspace::new();
    ws.write(
        "install.sh",
        "#!/bin/bash\nset -e\ncat > /usr/local/bin/hello-agent <<'SH'\n#!/bin/bash\n# A tiny 'agent': reads its instruction, does what it says for this one task.\ngrep -q 'Hello, agenteval!' \"$AGENTEVAL_INSTRUCTION\" && echo 'Hello, agenteval!' > hello.txt\necho \"done by $AGENTEVAL_MODEL in $(pwd)\"\nSH\nchmod +x /usr/local/bin/hello-agent\n",
    );
    let shipped = repo().join("configs/harbor-mini");
    let cfg =
        harbor_config(&ws, &shipped, "installed\n  model: tiny-1\n  setup: install.sh\n  command: hello-agent", "");
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[hello-file, count-failed]"]);
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    assert_eq!(code, 0, "{v}");
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let hello = read_json(&bundle.join("tasks/hello-file/result.json"));
    assert_eq!(hello["passed"], true, "{hello}");
    assert_eq!(hello["agent"]["final_answer"], "done by tiny-1 in /app", "{hello}");
    // It did nothing for the other task, whose tests say so.
    let other = read_json(&bundle.join("tasks/count-failed/result.json"));
    assert_eq!(
        (other["passed"].as_bool(), other["agent"]["terminated_by"].as_str()),
        (Some(false), Some("completed")),
        "{other}"
    );
}

/// Replaces the container's `python3` with one that always succeeds, leaving the bug in place:
/// tests that trust the container the agent had root in would pass.
const REPLACE_PYTHON: &str = r#"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
# It answers "all passed": it stands in for any Python test.
fake = "printf '#!/bin/sh\\necho \"all passed\"\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3 && python3 -c 'raise SystemExit(3)' >/dev/null; echo $?"
done = subprocess.run(req["environment"]["exec"] + [fake], capture_output=True, text=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": done.stdout.strip()}}), flush=True)
"#;

#[test]
fn with_fresh_verification_a_replaced_tool_does_not_pass_and_the_solutions_still_do() {
    docker_ready();
    let ws = Workspace::new();
    ws.write("fake.py", REPLACE_PYTHON);
    let shipped = repo().join("configs/harbor-mini");
    let fresh = "  verify_in: fresh\n";
    let with_fresh = |agent: &str| {
        let cfg = harbor_config(&ws, &shipped, agent, "");
        let text = std::fs::read_to_string(&cfg).unwrap().replace("  base_image:", &format!("{fresh}  base_image:"));
        ws.write("fresh.yaml", &text)
    };
    // Harbor's way: the replaced python3 passes, and the grade says what the agent changed.
    let same = harbor_config(&ws, &shipped, "command\n  command: [python3, fake.py]", "");
    let (v, code, _) = ws.submit(&same, &["--set", "benchmark.filter.ids=[fix-python-bug]"]);
    assert_eq!(code, 0, "{v}");
    let r = read_json(&ws.runs().join(v["run_id"].as_str().unwrap()).join("tasks/fix-python-bug/result.json"));
    let reason = r["scores"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("/usr/local/bin/python3") && reason.contains("verify_in: fresh"), "{r}");

    let cfg = with_fresh("command\n  command: [python3, fake.py]");
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[fix-python-bug]"]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let r = read_json(&ws.runs().join(run).join("tasks/fix-python-bug/result.json"));
    assert_eq!(r["agent"]["final_answer"], "0", "the agent's python3 stood in for the real one: {r}");
    assert_eq!(r["passed"], false, "the tests ran with the image's python3, on the unfixed module: {r}");
    let log = crate::util::read_text(ws.runs().join(run).join("tasks/fix-python-bug/worker.log")).unwrap();
    assert!(log.contains("fresh environment"), "{log}");
    assert!(containers_of(run).is_empty(), "the fresh container is removed too");

    // The working folder carries over: every reference solution still passes.
    let (v, code, _) = ws.submit(&with_fresh("oracle"), &[]);
    assert_eq!(code, 0, "{v}");
    let got = scores(&ws, v["run_id"].as_str().unwrap());
    assert!(got.iter().all(|(_, o, s)| o == "passed" && *s == 1.0), "{got:?}");
}

/// An image is reused only when it is the one agenteval built for its tag: an image tagged over
/// it (as an agent with the engine would commit its container over it) is built again, and the
/// worker's log says why.
#[test]
fn an_image_tagged_over_agentevals_is_built_again_not_reused() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let nonce = uuid::Uuid::now_v7().to_string();
    let dockerfile = format!("FROM debian:bookworm-slim\nRUN echo {nonce} > /nonce\nWORKDIR /app\n");
    write_task(&tasks, "one", &dockerfile, "#!/bin/bash\ntouch /app/done\n", "[ -e /app/done ]", "");
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let log_of = |v: &serde_json::Value| {
        crate::util::read_text(ws.runs().join(v["run_id"].as_str().unwrap()).join("tasks/one/worker.log")).unwrap()
    };
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let log = log_of(&v);
    let tag = log.split_whitespace().skip_while(|w| *w != "image").nth(1).unwrap().to_string();
    assert!(tag.starts_with("agenteval-env:") && log.contains(" built in "), "{log}");
    let (v, _, _) = ws.submit(&cfg, &[]);
    assert!(log_of(&v).contains(&format!("image {tag} reused")), "{}", log_of(&v));
    // Something else under the tag: built again, and the task still runs in what its folder says.
    let out = Command::new("docker").args(["tag", BASE, &tag]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!((code, v["summary"]["passed"].as_u64()), (0, Some(1)), "{v}");
    let log = log_of(&v);
    assert!(log.contains(&format!("image {tag} built in")) && log.contains("is not the"), "{log}");
    let nonce_now = Command::new("docker").args(["run", "--rm", &tag, "cat", "/nonce"]).output().unwrap();
    assert_eq!(text(&nonce_now.stdout).trim(), nonce, "the tag names the task's image again");
}

/// Under `verify_in: fresh` the working folder reaches the tests with its files' modes (an
/// executable stays one), and an agent's folder past the copy's cap (a 2 GB sparse file) is the
/// agent's limit (`errored`, `limit_disk`), not agenteval's `infra`, and nothing is buffered.
#[test]
fn the_fresh_copy_keeps_modes_and_an_oversized_working_folder_is_the_agents_limit() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\n";
    write_task(
        &tasks,
        "exec-bit",
        dockerfile,
        "#!/bin/bash\nprintf '#!/bin/sh\\necho ok\\n' > /app/run.sh && chmod 755 /app/run.sh\n",
        "[ \"$(/app/run.sh)\" = ok ]",
        "",
    );
    write_task(&tasks, "sparse", dockerfile, "#!/bin/bash\ntruncate -s 2G /app/big\n", "true", "");
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let text_cfg = std::fs::read_to_string(&cfg).unwrap().replace("  base_image:", "  verify_in: fresh\n  base_image:");
    let cfg = ws.write("fresh.yaml", &text_cfg);
    let (v, _, out) = ws.submit(&cfg, &[]);
    let run = v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))).to_string();
    let bundle = ws.runs().join(&run);
    let exec = read_json(&bundle.join("tasks/exec-bit/result.json"));
    assert_eq!(exec["passed"], true, "the copied script is still executable: {exec}");
    let sparse = read_json(&bundle.join("tasks/sparse/result.json"));
    assert_eq!(sparse["agent"]["terminated_by"], "limit_disk", "{sparse}");
    assert_eq!(sparse["passed"], false, "{sparse}");
    let shown = ws.run(&["runs", "show", &run, "--tasks", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let outcome =
        shown["tasks"].as_array().unwrap().iter().find(|t| t["task_id"] == "sparse").unwrap()["outcome"].clone();
    assert_eq!(outcome, "errored", "the agent's doing, not agenteval's: {shown}");
    assert!(containers_of(&run).is_empty());
}

/// Replaces `python3` as `REPLACE_PYTHON` does, after ten dummy files that sort first, and
/// leaves a `.pth` in root's user site-packages (a place the tests' Python reads).
const REPLACE_PYTHON_HIDDEN: &str = r#"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
cmd = "mkdir -p /aaa && for i in 0 1 2 3 4 5 6 7 8 9; do touch /aaa/dummy$i; done; " \
      "mkdir -p /root/.local/lib/python3.11/site-packages && echo 'import os' > /root/.local/lib/python3.11/site-packages/zz.pth; " \
      "printf '#!/bin/sh\\necho \"all passed\"\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3"
subprocess.run(req["environment"]["exec"] + [cmd], capture_output=True, text=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": "done"}}), flush=True)
"#;

/// Under `verify_in: same` a pass whose tests trusted files the agent changed outside its folder
/// is its own figure (`passed_with_changes`), every change is listed (volume hides nothing, homes
/// included), and agenteval's own files (the oracle's `/solution`, the init) are never counted.
#[test]
fn a_pass_that_trusted_the_agents_changes_is_counted_apart_with_every_change_listed() {
    docker_ready();
    let ws = Workspace::new();
    ws.write("hide.py", REPLACE_PYTHON_HIDDEN);
    let shipped = repo().join("configs/harbor-mini");
    let cfg = harbor_config(&ws, &shipped, "command\n  command: [python3, hide.py]", "");
    let (v, code, _) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[fix-python-bug]"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["summary"]["passed"], 1, "the tests trusted the fake python3: {v}");
    assert_eq!(v["summary"]["passed_with_changes"], 1, "and the pass is counted apart: {v}");
    let run = v["run_id"].as_str().unwrap();
    let listed = read_text(ws.runs().join(run).join("tasks/fix-python-bug/artifacts/changed-outside.txt")).unwrap();
    for p in ["/usr/local/bin/python3", "/root/.local/lib/python3.11/site-packages/zz.pth", "/aaa/dummy9"] {
        assert!(listed.lines().any(|l| l == p), "{p} is listed: {listed}");
    }
    let shown = text(&ws.run(&["runs", "show", run]).stdout);
    assert!(shown.contains("1 of the 1 passed trusted files the agent changed"), "{shown}");
    // The oracle changes nothing outside its folder of its own: no note, no count.
    let (v, code, _) = ws.submit(&harbor_config(&ws, &shipped, "oracle", ""), &[]);
    assert_eq!(code, 0, "{v}");
    assert!(v["summary"]["passed_with_changes"].is_null(), "{v}");
    let run = v["run_id"].as_str().unwrap();
    for t in ["fix-python-bug", "hello-file", "json-report"] {
        let r = read_json(&ws.runs().join(run).join(format!("tasks/{t}/result.json")));
        assert!(r["changed_outside"].is_null(), "{t}: {r}");
    }
}

/// The attacks on the shipped tasks' own tests that `verify_in: fresh` cannot stop by itself
/// (the working folder is the tests' input): a `json.py` that shadows Python's, and a package
/// whose `__init__.py` exits 0 as it is imported. The shipped tests hold against both.
const SHADOW: &str = r#"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
cheat = {
    "json-report": "printf 'def load(f):\\n    return {\"active_over_30\": [\"bo\", \"lee\", \"zoe\"]}\\n' > /app/json.py",
    "fix-python-bug": "printf 'import os\\nos._exit(0)\\n' > /app/calc/__init__.py",
}[req["task_id"]]
done = subprocess.run(req["environment"]["exec"] + [cheat], capture_output=True, text=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": str(done.returncode)}}), flush=True)
"#;

#[test]
fn the_shipped_tests_hold_against_a_shadowed_module_and_an_import_that_exits_0() {
    docker_ready();
    let ws = Workspace::new();
    ws.write("shadow.py", SHADOW);
    let shipped = repo().join("configs/harbor-mini");
    for verify in ["same", "fresh"] {
        let cfg = harbor_config(&ws, &shipped, "command\n  command: [python3, shadow.py]", "");
        let body = std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("  base_image:", &format!("  verify_in: {verify}\n  base_image:"));
        let cfg = ws.write("shadow.yaml", &body);
        let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[json-report, fix-python-bug]"]);
        assert_eq!(code, 0, "{verify}: {v} {}", text(&out.stderr));
        let got = scores(&ws, v["run_id"].as_str().unwrap());
        assert_eq!(got.len(), 2, "{got:?}");
        for (id, outcome, _) in &got {
            assert_eq!(outcome, "failed", "{verify}: {id} passed a planted cheat: {got:?}");
        }
    }
}

/// From a container of a task that may reach the internet, tries the machine's own addresses
/// (the bridge's gateway and the host's address) on a port the test listens on, and another
/// container's.
const REACH_HOST: &str = r#"
import json, os, subprocess, sys
req = json.loads(sys.stdin.readline())
port, host = os.environ["PORT"], os.environ["HOST_IP"]
probe = (
    "gw=$(awk '$2==\"00000000\"{print $3; exit}' /proc/net/route); "
    "gw=$(printf '%d.%d.%d.%d' 0x${gw:6:2} 0x${gw:4:2} 0x${gw:2:2} 0x${gw:0:2}); "
    f"for a in $gw {host}; do if timeout 3 bash -c \"echo > /dev/tcp/$a/{port}\" 2>/dev/null; then echo \"$a open\"; else echo \"$a closed\"; fi; done"
)
done = subprocess.run(req["environment"]["exec"] + [probe], capture_output=True, text=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": done.stdout.strip()}}), flush=True)
"#;

/// A container that may reach the internet cannot reach this machine's own services: not on
/// the bridge's address, not on the host's, whatever they bind.
#[test]
fn a_container_with_internet_cannot_reach_the_hosts_own_services() {
    docker_ready();
    let ws = Workspace::new();
    ws.write("reach.py", REACH_HOST);
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let host = text(&Command::new("hostname").arg("-I").output().unwrap().stdout)
        .split_whitespace()
        .find(|a| !a.starts_with("172.17.") && !a.contains(':'))
        .unwrap_or("127.0.0.1")
        .to_string();
    let tasks = ws.path().join("tasks");
    write_task(
        &tasks,
        "net",
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
        "#!/bin/bash\ntrue\n",
        "true",
        "[environment]\nallow_internet = true\n",
    );
    let cfg = harbor_config(
        &ws,
        &tasks,
        &format!("command\n  command: [python3, reach.py]\n  env: {{PORT: '{port}', HOST_IP: '{host}'}}"),
        "",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let r = read_json(&ws.runs().join(v["run_id"].as_str().unwrap()).join("tasks/net/result.json"));
    let said = r["agent"]["final_answer"].as_str().unwrap().to_string();
    assert_eq!(said.lines().count(), 2, "both addresses were tried: {said}");
    assert!(said.lines().all(|l| l.ends_with(" closed")), "the host's own addresses are closed: {said}");
    drop(listener);
}

/// A container's files may grow by the task's `storage_mb` (Harbor's), 10 GiB when it names
/// none: an agent that writes past it ends `limit_disk` (errored), and a task within it passes.
#[test]
fn an_agent_that_writes_past_its_containers_storage_ends_at_the_disk_limit() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\n";
    let write = "#!/bin/bash\nhead -c 80000000 /dev/zero > /var/big && touch /app/done\n";
    // Past the cap and still running: stopped while it runs, not when it would have finished.
    let keeps_on = "#!/bin/bash\nhead -c 80000000 /dev/zero > /var/big && touch /app/done && sleep 100\n";
    write_task(&tasks, "over", dockerfile, keeps_on, "[ -e /app/done ]", "[environment]\nstorage_mb = 50\n");
    write_task(&tasks, "within", dockerfile, write, "[ -e /app/done ]", "[environment]\nstorage_mb = 200\n");
    let (v, _, out) = ws.submit(&harbor_config(&ws, &tasks, "oracle", ""), &[]);
    let run = v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))).to_string();
    let got = scores(&ws, &run);
    assert_eq!(
        got.iter().map(|(id, o, _)| (id.as_str(), o.as_str())).collect::<Vec<_>>(),
        [("over", "errored"), ("within", "passed")]
    );
    let r = read_json(&ws.runs().join(&run).join("tasks/over/result.json"));
    assert_eq!(r["agent"]["terminated_by"], "limit_disk", "{r}");
    assert!(r["agent"]["error"].as_str().unwrap().contains("storage_mb"), "{r}");
    assert!(r["agent"]["wall_seconds"].as_f64().unwrap() < 30.0, "stopped as it went past, not at its end: {r}");
}

/// `doctor` checks what tasks in containers need: the engine (stopped: one failing line, exit
/// 2), and each task image (not built yet is fine; with `--build` a Dockerfile that fails is one
/// failing line with its build's last words, exit 2) (issue 47).
#[test]
fn doctor_checks_the_engine_and_every_task_image() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let nonce = uuid::Uuid::now_v7().to_string();
    write_task(
        &tasks,
        "good",
        &format!("FROM debian:bookworm-slim\nRUN echo {nonce}\n"),
        "#!/bin/bash\ntrue\n",
        "true",
        "",
    );
    write_task(
        &tasks,
        "bad",
        &format!("FROM debian:bookworm-slim\nRUN echo {nonce} && echo doctor-saw-this >&2 && false\n"),
        "#!/bin/bash\ntrue\n",
        "true",
        "",
    );
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let lines = |out: &std::process::Output| text(&out.stdout).lines().map(String::from).collect::<Vec<_>>();

    let out = ws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    let said = lines(&out);
    assert_eq!(out.status.code(), Some(0), "{said:?}");
    assert!(
        said.iter().any(|l| l.starts_with("ok") && l.contains("docker engine") && l.contains("reachable, version")),
        "{said:?}"
    );
    assert_eq!(said.iter().filter(|l| l.contains("not built yet")).count(), 2, "{said:?}");

    let out = ws.run(&["doctor", "--build", "--config", cfg.to_str().unwrap()]);
    let said = lines(&out);
    assert_eq!(out.status.code(), Some(2), "{said:?}");
    let failed: Vec<&String> = said.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 1, "{said:?}");
    assert!(failed[0].contains("bad") && failed[0].contains("doctor-saw-this"), "{said:?}");

    let out = ws
        .cmd(&["doctor", "--config", cfg.to_str().unwrap()])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    let said = lines(&out);
    assert_eq!(out.status.code(), Some(2), "{said:?}");
    let failed: Vec<&String> = said.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 1, "{said:?}");
    assert!(failed[0].contains("docker engine") && failed[0].contains("cannot reach"), "{said:?}");
}

/// An installed agent calls its model from inside a task's container without internet: through
/// the model gateway on the task network, with its task's token. The key is nowhere in the
/// container; the host's other ports are closed to it; tokens and cost are the provider's.
#[test]
fn an_installed_agent_reaches_the_gateway_and_nothing_else_from_a_container_without_internet() {
    use sha2::Digest as _;
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    // A service of this machine on every address: the container must not reach it.
    let service = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let key = "sk-upstream-CONTAINERNEVERSEESTHIS0123456789";
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={key}\n"));
    // A tiny agent in bash: the OpenAI wire over /dev/tcp (the base image has no HTTP client).
    ws.write(
        "install.sh",
        r#"#!/bin/bash
set -e
cat > /usr/local/bin/wire-agent <<'SH'
#!/bin/bash
url="${OPENAI_BASE_URL#http://}"; hostport="${url%%/*}"; host="${hostport%:*}"; port="${hostport#*:}"
body='{"model":"mock-model","messages":[{"role":"user","content":"hello from a container"}]}'
exec 3<>"/dev/tcp/$host/$port"
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$hostport" "$OPENAI_API_KEY" "${#body}" "$body" >&3
answer=$(cat <&3 | grep -o 'echo: [^"]*' | head -1)
exec 3<&-
found=no
for f in /proc/self/environ /proc/1/environ; do
  while IFS= read -r -d '' kv; do
    [ "$(printf %s "${kv#*=}" | sha256sum | cut -d' ' -f1)" = "$KEY_SHA256" ] && found=yes
  done < "$f"
done
other=closed
timeout 3 bash -c "echo > /dev/tcp/$host/$SERVICE_PORT" 2>/dev/null && other=open
echo "$answer|key:$found|service:$other"
SH
chmod +x /usr/local/bin/wire-agent
"#,
    );
    let agent = format!(
        "installed\n  model: mock-model\n  setup: install.sh\n  command: wire-agent\n  env: {{KEY_SHA256: {}, SERVICE_PORT: '{}'}}\n  upstream:\n    openai:\n      base_url: {}\n      secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}\n    prices:\n      mock-model: {{input_per_mtok: 1000, output_per_mtok: 1000}}",
        hex::encode(sha2::Sha256::digest(key.as_bytes())),
        service.local_addr().unwrap().port(),
        mock.base_url()
    );
    let cfg = harbor_config(&ws, &repo().join("configs/harbor-mini"), &agent, "");
    let text_cfg =
        std::fs::read_to_string(&cfg).unwrap().replace("backend:\n", "backend:\n  secrets_file: secrets.env\n");
    std::fs::write(&cfg, text_cfg).unwrap();
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[hello-file]"]);
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    assert_eq!(code, 0, "{v}");
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let r = read_json(&bundle.join("tasks/hello-file/result.json"));
    assert_eq!(r["agent"]["final_answer"], "echo: hello from a container|key:no|service:closed", "{r}");
    assert_eq!(r["agent"]["total_tokens"], 15, "{r}");
    assert!((r["agent"]["total_cost_usd"].as_f64().unwrap() - 0.015).abs() < 1e-12, "{r}");
    assert_eq!(mock.received().len(), 1);
    assert!(mock.received()[0].credential.as_deref().is_some_and(|c| c.contains(key)));
    // Replayed with the model gone and no key: the container's call is answered from the
    // recording, and the task ends as it did.
    drop(mock);
    std::fs::write(ws.path().join("secrets.env"), "").unwrap();
    let out = ws.run(&["replay", v["run_id"].as_str().unwrap(), "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(r["match"], 1, "{r}");
}
