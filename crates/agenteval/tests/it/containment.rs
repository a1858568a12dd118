//! Containment, as a reward-hacking agent or a hostile case file would try it (issue 43): the
//! worker's git runs nothing the agent configured, no agent code runs as root (an unreadable
//! program is refused before the run, every attempt runs as a uid of its own), no agent uses
//! another task's environment socket, case files name nothing outside their folder and run no
//! program unless trusted, and `agent.pack` carries no case's tests or solution.

use std::path::PathBuf;

use crate::util::*;

/// Whether this process is root; where it is not, the CI's run (as root) is the one that counts,
/// and a test that needs root says so loudly there.
fn root_or_skip(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root {
        assert!(std::env::var_os("CI").is_none(), "{test} needs root, and CI runs the tests as root");
        eprintln!("skipped {test}: needs root");
    }
    root
}

/// The shipped `repo-tasks` cases with `agent` (a `command` agent's lines) on one task.
fn repo_task(ws: &Workspace, task: &str, agent: &str) -> PathBuf {
    let cases = repo().join("configs/repo-tasks/cases.jsonl");
    ws.write(
        "contain.yaml",
        &format!(
            "name: contain\nbenchmark:\n  kind: jsonl\n  cases: {}\n  filter: {{ids: [{task}]}}\nagent:\n{agent}\n  limits:\n    max_wall_seconds: 60\n\
             environment:\n  kind: workspace\nbackend:\n  max_concurrent_jobs: 3\n  tasks_per_job: 1\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\n",
            cases.display()
        ),
    )
}

/// The shipped `repo-tasks`, all three at once, each run by the `command` agent `script`.
fn all_repo_tasks(ws: &Workspace, name: &str, script: &str) -> PathBuf {
    let cases = repo().join("configs/repo-tasks/cases.jsonl");
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nbenchmark:\n  kind: jsonl\n  cases: {}\nagent:\n  kind: command\n  command: [python3, {script}]\n\
             environment:\n  kind: workspace\nbackend:\n  max_concurrent_jobs: 3\n  tasks_per_job: 1\nstorage:\n  bundle_root: runs\n",
            cases.display()
        ),
    )
}

/// An agent that solves nothing itself: it only configures git for whoever runs it next in its
/// workspace (`~/.gitconfig`: an fsmonitor hook that writes the solution and records its uid, an
/// external diff that hides every change) and leaves an attributes file that would rewrite what
/// git reads.
const GIT_TRAP: &str = r##"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
env = req["environment"]
def sh(c):
    return subprocess.run(env["exec"] + [c], capture_output=True, text=True).returncode
hook = "#!/bin/sh\nid -u > uid-of-git.txt\nprintf '%s\\n' '#!/bin/bash' 'if [ \"$1\" = --shout ]; then shift; echo \"HELLO, ${1^^}!\"; else echo \"Hello, $1!\"; fi' > greet.sh\nexit 1\n"
sh("cat > \"$HOME/hook.sh\" <<'EOF'\n" + hook + "EOF\nchmod +x \"$HOME/hook.sh\"")
sh("printf '[core]\\n\\tfsmonitor = %s\\n[diff]\\n\\texternal = %s\\n' \"$HOME/hook.sh\" \"$HOME/hook.sh\" > \"$HOME/.gitconfig\"")
sh("printf '* filter=lie\\n' > .gitattributes && echo planted > notes.txt")
sh("mkdir -p sub && cd sub && git init -q && echo nested > f.txt")
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": "done"}}), flush=True)
"##;

#[test]
fn the_workers_git_runs_nothing_the_agent_configured_and_its_patch_is_the_file_tree() {
    let ws = Workspace::new();
    ws.write("trap.py", GIT_TRAP);
    let cfg = repo_task(&ws, "greet-flag", "  kind: command\n  command: [python3, trap.py]");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let r = read_json(&bundle.join("tasks/greet-flag/result.json"));
    assert_eq!(r["passed"], false, "the hook never ran, so nothing fixed greet.sh: {r}");
    let patch = read_text(bundle.join("tasks/greet-flag/artifacts/patch.diff")).unwrap();
    assert!(!patch.contains("uid-of-git.txt") && !patch.contains("greet.sh"), "no hook ran: {patch}");
    assert!(patch.contains("+++ b/notes.txt") && patch.contains("+planted"), "what the agent wrote, as it is: {patch}");
    assert!(patch.contains("+++ b/.gitattributes"), "its attributes file is a file like any other: {patch}");
    assert!(
        patch.contains("+++ b/sub/f.txt") && patch.contains("+nested"),
        "a nested repository is its files: {patch}"
    );
}

/// A root worker refuses an agent program its agents' uids cannot read (a Python under a 0700
/// folder, as pyenv's under `/root`), before anything is created: it never runs as root.
#[test]
fn an_agent_program_the_agents_uid_cannot_read_is_refused_before_the_run() {
    use std::os::unix::fs::PermissionsExt as _;
    if !root_or_skip("an_agent_program_the_agents_uid_cannot_read_is_refused_before_the_run") {
        return;
    }
    let ws = Workspace::new();
    let private = ws.path().join("private");
    std::fs::create_dir_all(&private).unwrap();
    let python = private.join("python3");
    assert!(std::process::Command::new("cp").arg("/usr/bin/python3").arg(&python).status().unwrap().success());
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    ws.write("agent.py", "print('never')\n");
    ws.write("cases.jsonl", "{\"id\": \"a\", \"input\": \"q\", \"expected\": \"x\"}\n");
    let cfg = ws.write(
        "root.yaml",
        &format!(
            "name: root\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: [{}, agent.py]\nstorage: {{bundle_root: runs}}\n",
            python.display()
        ),
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&python.display().to_string()) && err.contains("chmod o+rX"),
        "names the file and the fix: {err}"
    );
    assert!(err.contains(&private.display().to_string()), "and the folder that blocks it: {err}");
    assert!(!ws.index().exists() || !text(&ws.run(&["runs", "list"]).stdout).contains("root"), "no run was created");
    // `sandbox: none` is no way around it.
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--set", "agent.sandbox=none"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Reports the uid it runs as and the uid its workspace's commands run as, after a moment (so
/// the tasks overlap).
const WHO: &str = r#"
import json, os, subprocess, sys, time
req = json.loads(sys.stdin.readline())
env = req["environment"]
ws = subprocess.run(env["exec"] + ["id -u"], capture_output=True, text=True).stdout.strip()
time.sleep(1)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": json.dumps({"agent": os.getuid(), "workspace": int(ws)})}}), flush=True)
"#;

/// As root, every task attempt's agent and its workspace's commands run as uids of agenteval's
/// range, none shared by two tasks running at once, and never root.
#[test]
fn each_task_attempt_runs_as_a_uid_of_its_own() {
    if !root_or_skip("each_task_attempt_runs_as_a_uid_of_its_own") {
        return;
    }
    let ws = Workspace::new();
    ws.write("who.py", WHO);
    let cfg = all_repo_tasks(&ws, "who", "who.py");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let range = agenteval_engine::isolation::uids::FIRST
        ..agenteval_engine::isolation::uids::FIRST + agenteval_engine::isolation::uids::COUNT;
    let mut agents = Vec::new();
    for r in results(&ws.runs().join(v["run_id"].as_str().unwrap())) {
        let who: serde_json::Value = serde_json::from_str(r["agent"]["final_answer"].as_str().unwrap()).unwrap();
        let (agent, workspace) = (who["agent"].as_u64().unwrap() as u32, who["workspace"].as_u64().unwrap() as u32);
        assert!(range.contains(&agent) && range.contains(&workspace), "{who}");
        assert_ne!(agent, workspace, "the agent's process and its environment's commands are apart: {who}");
        agents.push(agent);
    }
    agents.sort_unstable();
    agents.dedup();
    assert_eq!(agents.len(), 3, "three tasks at once, three uids");
}

/// Looks for every other task's environment socket on the machine (`/proc/net/unix` lists them)
/// for a few seconds and tries to run a command through each; reports what it tried.
const INTRUDER: &str = r#"
import json, os, socket, sys, time
req = json.loads(sys.stdin.readline())
mine = os.environ["AGENTEVAL_ENV_SOCKET"]
tried = {}
deadline = time.time() + 4
while time.time() < deadline:
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        path = line.split()[-1] if len(line.split()) > 7 else ""
        if path.endswith("agenteval-env.sock") and path != mine and path not in tried:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(3)
                s.connect(path)
                s.sendall((json.dumps({"command": "echo INTRUDER > intruder.txt"}) + "\n").encode())
                tried[path] = s.recv(4096).decode() or "closed"
            except OSError as e:
                tried[path] = type(e).__name__
    time.sleep(0.2)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": json.dumps(tried)}}), flush=True)
"#;

/// Three agents at once, each trying every other task's environment socket: none gets a command
/// run there, and no task's patch holds another's file.
#[test]
fn no_agent_runs_a_command_in_another_tasks_environment() {
    let ws = Workspace::new();
    ws.write("intruder.py", INTRUDER);
    let cfg = all_repo_tasks(&ws, "intruder", "intruder.py");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let mut attempts = 0;
    for r in results(&bundle) {
        let id = r["task_id"].as_str().unwrap();
        let tried: serde_json::Value = serde_json::from_str(r["agent"]["final_answer"].as_str().unwrap()).unwrap();
        for (path, said) in tried.as_object().unwrap() {
            attempts += 1;
            assert!(!said.as_str().unwrap().contains("\"exit_code\":0"), "{id} ran a command through {path}: {said}");
        }
        let patch = read_text(bundle.join(format!("tasks/{id}/artifacts/patch.diff"))).unwrap_or_default();
        assert!(!patch.contains("INTRUDER"), "{id}'s environment took another agent's command: {patch}");
    }
    assert!(attempts >= 2, "the agents saw each other's sockets and tried them");
}

/// A case file is data: no path outside its folder (absolute, `..`, a link out), no `file://`
/// or option-like repository, no `tests.command` unless the config trusts case evaluators; every
/// problem named with its line, nothing run.
#[test]
fn a_case_file_names_nothing_outside_its_folder_and_runs_no_program_unless_trusted() {
    let ws = Workspace::new();
    let cases = ws.path().join("bench");
    std::fs::create_dir_all(cases.join("ok/tests")).unwrap();
    std::fs::write(cases.join("ok/tests/test.sh"), "echo 1 > \"$AGENTEVAL_VERIFIER_DIR/reward.txt\"\n").unwrap();
    ws.write("secrets.env", "KEY=sk-0123456789abcdef0123\n");
    std::os::unix::fs::symlink(ws.path(), cases.join("up")).unwrap();
    let lines = [
        r#"{"id": "abs", "input": "x", "environment": {"context": "/etc"}}"#,
        r#"{"id": "dots", "input": "x", "environment": {"context": "../"}}"#,
        r#"{"id": "link", "input": "x", "environment": {"context": "up"}}"#,
        r#"{"id": "file", "input": "x", "environment": {"repo": "file:///etc"}}"#,
        r#"{"id": "opt", "input": "x", "environment": {"repo": "--upload-pack=touch /tmp/x"}}"#,
        r#"{"id": "cmd", "input": "x", "environment": {"context": "ok"}, "tests": {"dir": "ok/tests", "command": "id > /tmp/pwned"}}"#,
    ];
    std::fs::write(cases.join("cases.jsonl"), lines.join("\n") + "\n").unwrap();
    let cfg = ws.write(
        "cases.yaml",
        "name: data\nbenchmark: {kind: jsonl, cases: bench/cases.jsonl}\nagent: {kind: nop}\nenvironment: {kind: workspace}\nstorage: {bundle_root: runs}\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for (line, says) in [
        (1, "absolute path"),
        (2, "leads out of the case file's folder"),
        (3, "leads out of the case file's folder"),
        (4, "file:///etc"),
        (5, "--upload-pack"),
        (6, "trust_case_evaluators"),
    ] {
        assert!(err.contains(&format!("cases.jsonl:{line}")) && err.contains(says), "line {line}, {says}: {err}");
    }
    // Trusted, the tests' command is allowed (and runs where the tests run).
    std::fs::write(
        cases.join("cases.jsonl"),
        format!("{}\n", lines[5].replace("id > /tmp/pwned", "echo 1 > \\\"$AGENTEVAL_VERIFIER_DIR/reward.txt\\\"")),
    )
    .unwrap();
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.trust_case_evaluators=true"]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
}

/// `agent.pack` of a folder that holds a case's tests or solution (not only the case file) is
/// refused at submit, naming the path: the unpacked agent would read them.
#[test]
fn pack_refuses_a_folder_holding_any_cases_tests_or_solution() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("agent/data/t1/tests")).unwrap();
    std::fs::create_dir_all(ws.path().join("agent/data/t1/solution")).unwrap();
    ws.write("agent/data/t1/tests/test.sh", "exit 0\n");
    ws.write("agent/data/t1/solution/solve.sh", "echo 42 > answer.txt\n");
    ws.write("agent/agent.py", "print('x')\n");
    ws.write("agent/data/t1/start.txt", "");
    // The case file itself lives outside the agent's folder: only its case's folders are in it.
    ws.write(
        "cases.jsonl",
        "{\"id\": \"t1\", \"input\": \"x\", \"environment\": {\"context\": \"agent/data/t1\"}, \"tests\": \"agent/data/t1/tests\", \"solution\": \"agent/data/t1/solution\"}\n",
    );
    let cfg = ws.write(
        "agent/pack.yaml",
        "name: pack\nbenchmark: {kind: jsonl, cases: ../cases.jsonl}\nagent:\n  kind: command\n  command: [python3, agent.py]\n  pack: true\nenvironment: {kind: workspace}\nstorage: {bundle_root: ../runs}\n",
    );
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("agent.pack") && err.contains("t1"), "{err}");
}

/// Tries the Docker engine's socket every way a program can.
const ENGINE: &str = r#"
import json, os, socket, sys
req = json.loads(sys.stdin.readline())
got = {"uid": os.getuid()}
for path in ["/var/run/docker.sock", "/run/docker.sock"]:
    if not os.path.exists(path):
        continue
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(b"GET /containers/json HTTP/1.0\r\n\r\n")
        got[path] = "open: " + s.recv(200).decode(errors="replace")
    except OSError as e:
        got[path] = type(e).__name__
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": json.dumps(got)}}), flush=True)
"#;

/// No agent reaches the Docker engine: its socket's open fails for an agent of a root worker (a
/// leased uid) and of a worker running as an unprivileged user.
#[test]
fn no_agent_opens_the_docker_engines_socket() {
    use std::os::unix::fs::PermissionsExt as _;
    if !root_or_skip("no_agent_opens_the_docker_engines_socket") {
        return;
    }
    let socket = ["/var/run/docker.sock", "/run/docker.sock"].into_iter().find(|p| std::path::Path::new(p).exists());
    let Some(socket) = socket else {
        assert!(std::env::var_os("CI").is_none(), "CI runs a Docker engine (tests/run.sh starts one)");
        return;
    };
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    ws.write("engine.py", ENGINE);
    ws.write("cases.jsonl", "{\"id\": \"e\", \"input\": \"q\", \"expected\": \"x\"}\n");
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("agenteval");
    assert!(std::process::Command::new("cp").arg(BIN).arg(&bin).status().unwrap().success());
    for (mode, runs) in [("root", "runs-root"), ("user", "runs-user")] {
        let cfg = ws.write(
            &format!("engine-{mode}.yaml"),
            &format!(
                "name: engine\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: [/usr/bin/python3, engine.py]\nstorage: {{bundle_root: {runs}}}\n"
            ),
        );
        let args = ["submit", "--json", "--config", cfg.to_str().unwrap()];
        let mut cmd = if mode == "user" {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&bin).args(args);
            c
        } else {
            let mut c = std::process::Command::new(BIN);
            c.args(args);
            c
        };
        let out = cmd.current_dir(ws.path()).env("NO_COLOR", "1").env("PATH", agent_path()).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = &results(std::path::Path::new(v["bundle"].as_str().unwrap()))[0];
        let got: serde_json::Value = serde_json::from_str(r["agent"]["final_answer"].as_str().unwrap()).unwrap();
        assert_eq!(got[socket], "PermissionError", "{mode}: the open fails: {got}");
        assert_ne!(got["uid"], 0, "{mode}: {got}");
    }
}

/// Copies a folder, as a second checkout of the repository would hold it.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    let out = std::process::Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The same benchmark in two checkouts (a CI runner's and the nightly machine's) is the same
/// questions: `compare` pairs every task of the shipped `repo-tasks`; editing one case's test
/// file makes exactly that case a different question (issue 47).
#[test]
fn two_checkouts_of_the_same_benchmark_pair_every_task_and_an_edited_test_is_a_new_question() {
    let ws = Workspace::new();
    let (a, b) = (ws.path().join("checkout-a"), ws.path().join("checkout-b"));
    for dir in [&a, &b] {
        copy_tree(&repo().join("configs/repo-tasks"), dir);
    }
    let runs = ws.path().join("runs");
    let run_in = |dir: &std::path::Path| {
        let cfg = dir.join("run.yaml");
        std::fs::write(
            &cfg,
            format!(
                "name: checkouts\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent: {{kind: nop}}\nenvironment: {{kind: workspace}}\nstorage: {{bundle_root: {}}}\n",
                runs.display()
            ),
        )
        .unwrap();
        let (v, code, out) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{v} {}", text(&out.stderr));
        v["run_id"].as_str().unwrap().to_string()
    };
    let compare = |x: &str, y: &str| {
        let out = ws.run(&["compare", x, y, "--format", "json", "--resamples", "200"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
        v
    };
    let (run_a, run_b) = (run_in(&a), run_in(&b));
    let c = compare(&run_a, &run_b);
    let c = if c["comparison"].is_object() { c["comparison"].clone() } else { c };
    assert_eq!(c["paired_tasks"], 3, "{c}");
    assert_eq!(c["changed"], serde_json::json!([]), "{c}");
    // One case's test edited in one checkout: that case alone is another question.
    let test = b.join("greet-flag/tests/test.sh");
    let edited = std::fs::read_to_string(&test).unwrap() + "\n# stricter now\n";
    std::fs::write(&test, edited).unwrap();
    let run_b2 = run_in(&b);
    let c = compare(&run_a, &run_b2);
    let c = if c["comparison"].is_object() { c["comparison"].clone() } else { c };
    assert_eq!(c["changed"], serde_json::json!(["greet-flag"]), "{c}");
    assert_eq!(c["paired_tasks"], 2, "{c}");
}

/// Writes 200 KB into its working folder, and the shipped task's fix.
const BIG_PATCH: &str = r#"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
env = req["environment"]
subprocess.run(env["exec"] + ["head -c 200000 /dev/urandom | base64 > big.txt"], check=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": "done"}}), flush=True)
"#;

/// A patch over the task's artifact budget is left out whole (never cut), the task's log says
/// how large it was, and `regrade` of that task is `infra` naming the missing patch (issue 47).
#[test]
fn a_patch_over_the_budget_is_left_out_whole_and_regrade_says_why() {
    let ws = Workspace::new();
    ws.write("big.py", BIG_PATCH);
    let cfg = repo_task(&ws, "greet-flag", "  kind: command\n  command: [python3, big.py]");
    let body = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("  kind: workspace\n", "  kind: workspace\n  max_artifact_bytes: 10000\n");
    let cfg = ws.write("big.yaml", &body);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let bundle = ws.runs().join(&run);
    assert!(read_bundle_file(bundle.join("tasks/greet-flag/artifacts/patch.diff")).is_err(), "no cut patch is kept");
    let log = read_text(bundle.join("tasks/greet-flag/worker.log")).unwrap();
    assert!(
        log.contains("artifact patch.diff not kept: left out: it is") && log.contains("over the task's 10000"),
        "{log}"
    );
    let out = ws.run(&["regrade", &run, "--json"]);
    assert_eq!(out.status.code(), Some(3), "the task cannot be regraded: {}", text(&out.stderr));
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &results(&ws.runs().join(again["run_id"].as_str().unwrap()))[0];
    assert_eq!(r["agent"]["terminated_by"], "infra_failure", "{r}");
    assert!(r["agent"]["error"].as_str().unwrap().contains("max_artifact_bytes"), "{r}");
}

/// Leaves a `.pth` in its home's user site-packages that makes any Python exit 0 as it starts.
const PTH: &str = r#"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
env = req["environment"]
plant = "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && echo 'import os; os._exit(0)' > \"$d/zz.pth\""
done = subprocess.run(env["exec"] + [plant], capture_output=True, text=True)
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": str(done.returncode)}}), flush=True)
"#;

/// In a workspace the tests run with a home of their own, not the agent's: a `.pth` the agent
/// left in its user site-packages does not run in the tests' Python.
#[test]
fn a_workspaces_tests_do_not_read_the_agents_home() {
    let ws = Workspace::new();
    ws.write("pth.py", PTH);
    let bench = ws.path().join("bench");
    std::fs::create_dir_all(bench.join("start")).unwrap();
    std::fs::create_dir_all(bench.join("tests")).unwrap();
    std::fs::write(bench.join("start/README"), "nothing to do\n").unwrap();
    std::fs::write(bench.join("tests/test.sh"), "python3 -c 'raise SystemExit(1)'\n").unwrap();
    std::fs::write(
        bench.join("cases.jsonl"),
        "{\"id\": \"pth\", \"input\": \"x\", \"environment\": {\"context\": \"start\"}, \"tests\": {\"dir\": \"tests\", \"reward\": \"exit_code\"}}\n",
    )
    .unwrap();
    let cfg = ws.write(
        "pth.yaml",
        "name: pth\nbenchmark: {kind: jsonl, cases: bench/cases.jsonl}\nagent:\n  kind: command\n  command: [python3, pth.py]\nenvironment: {kind: workspace}\nstorage: {bundle_root: runs}\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let r = &results(&ws.runs().join(v["run_id"].as_str().unwrap()))[0];
    assert_eq!(r["agent"]["final_answer"], "0", "the agent planted it: {r}");
    assert_eq!(r["passed"], false, "the tests' Python never read the agent's home: {r}");
}
