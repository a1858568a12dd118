//! Harbor tasks shaped as real third-party ones are, end to end with a real Docker engine: an
//! image whose ENTRYPOINT edits `/etc/hosts` and starts a service, a task without network whose
//! tests use `localhost`, a sidecar declared with `expose`, a named volume a sidecar writes and
//! `main` reads only, and a task told in three steps. Each passes with its reference solution
//! and fails with `nop`, under Harbor's rules and under `strict`; a task that cannot run fails
//! alone, and one Harbor itself would skip is run and counted. The same tasks also run under
//! Harbor 0.26 (`tests/run.sh` installs it), which must give the same verdicts.

use std::path::{Path, PathBuf};

use crate::environments::{docker_ready, harbor_config};
use crate::util::*;

const PYTHON_IMAGE: &str = "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\n";

const VERDICT: &str = "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt";

/// The five tasks that must pass with the oracle and fail with `nop`.
pub(crate) const FIVE: [&str; 5] =
    ["entrypoint-service", "offline-localhost", "expose-sidecar", "shared-volume", "three-steps"];

fn write(path: PathBuf, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A task folder with an instruction, `task.toml`, the environment's Dockerfile (`extra` after
/// the Python image's lines), the oracle's solution and the tests.
pub(crate) fn task(root: &Path, name: &str, toml: &str, extra: &str, solve: &str, test: &str) -> PathBuf {
    let d = root.join(name);
    write(d.join("instruction.md"), &format!("Do what {name} asks.\n"));
    write(d.join("task.toml"), &format!("version = \"1.0\"\n{toml}"));
    write(d.join("environment/Dockerfile"), &format!("{PYTHON_IMAGE}{extra}"));
    write(d.join("solution/solve.sh"), &format!("#!/bin/bash\nset -e\n{solve}\n"));
    write(d.join("tests/test.sh"), &format!("#!/bin/bash\nmkdir -p /logs/verifier\n{test}\n"));
    d
}

/// Python that fetches `url` (retrying while the service starts) and prints the body.
fn fetch(url: &str) -> String {
    format!(
        "python3 -c \"import time,urllib.request\nfor i in range(60):\n    try:\n        print(urllib.request.urlopen('{url}', timeout=5).read().decode().strip()); break\n    except Exception:\n        time.sleep(0.5)\nelse:\n    raise SystemExit(1)\""
    )
}

const HEALTHCHECK: &str = "    healthcheck:\n      test: [CMD-SHELL, \"python3 -c 'import urllib.request; urllib.request.urlopen(\\\"http://127.0.0.1:8080/\\\")'\"]\n      interval: 1s\n      retries: 30\n";

/// The tool sidecar of `shared-volume`: every `/ping/WORD` is appended to its log.
const TOOL: &str = r#"import http.server, os
os.makedirs("/var/log/tool", exist_ok=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/ping/"):
            with open("/var/log/tool/calls.log", "a") as f:
                f.write(self.path[6:] + "\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"#;

/// The tests of `offline-localhost`: a server on `localhost`, reached by that name and by the
/// container's own host name.
const LOCALHOST_TEST: &str = r#"import socket, threading, http.server
s = http.server.HTTPServer(("localhost", 8081), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=s.serve_forever, daemon=True).start()
import urllib.request
urllib.request.urlopen("http://localhost:8081/", timeout=5).read()
socket.gethostbyname(socket.gethostname())
"#;

/// Writes the five tasks, one Harbor itself would skip, and (with `broken`) one that cannot run.
pub(crate) fn tasks(root: &Path, broken: bool) {
    // 1. The image's ENTRYPOINT edits /etc/hosts, starts a service, then hands over. On a fleet
    // the service inherits the variables the environment's server was launched with (its link's
    // token among them): the agent counts those it can read in every process's `environ`.
    let d = task(
        root,
        "entrypoint-service",
        "",
        "COPY entrypoint.sh /entrypoint.sh\nRUN chmod +x /entrypoint.sh\nENTRYPOINT [\"/entrypoint.sh\"]\n",
        &format!(
            "{} > /app/answer\ncat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c AGENTEVAL_ENVLINK > /app/tokens || true",
            fetch("http://svc.internal:8080/token")
        ),
        &format!(
            "[ \"$(cat /app/answer)\" = token-4711 ] && [ \"$(cat /app/tokens)\" = 0 ] && [ \"$({})\" = token-4711 ] {VERDICT}",
            fetch("http://svc.internal:8080/token")
        ),
    );
    write(
        d.join("environment/entrypoint.sh"),
        "#!/bin/sh\necho '127.0.0.1 svc.internal' >> /etc/hosts\nmkdir -p /srv && echo token-4711 > /srv/token\n(cd /srv && exec python3 -m http.server 8080 >/dev/null 2>&1) &\nexec \"$@\"\n",
    );
    // 2. No network: its tests serve and connect on `localhost`.
    task(
        root,
        "offline-localhost",
        "[environment]\nnetwork_mode = \"no-network\"\n",
        "",
        "echo done > /app/done",
        &format!("[ -e /app/done ] && python3 - <<'PY' {VERDICT}\n{LOCALHOST_TEST}PY"),
    );
    // 3. A sidecar declared with `expose` and a healthcheck; `main` without a `build` (Harbor's
    // base file gives it environment/), its values `${VAR:-default}`, and task.toml's
    // `[environment.env]` beside the compose file's `environment` (task.toml's wins).
    let d = task(
        root,
        "expose-sidecar",
        "[environment.env]\nGREETING = \"from-task\"\n",
        "",
        &format!("{} > /app/reached", fetch("http://api:8080/")),
        &format!(
            "echo \"GREETING=$GREETING MODE=$MODE API=$API_URL\"; [ \"$GREETING\" = from-task ] && [ \"$MODE\" = fast ] && [ \"$API_URL\" = http://api:8080/ ] && [ -s /app/reached ] && {} {VERDICT}",
            fetch("http://api:8080/")
        ),
    );
    write(d.join("environment/api/Dockerfile"), &format!("{PYTHON_IMAGE}RUN echo served > /app/index.html\n"));
    write(
        d.join("environment/docker-compose.yaml"),
        &format!(
            "services:\n  main:\n    environment:\n      GREETING: from-compose\n      MODE: ${{MODE:-fast}}\n      API_URL: http://api:${{API_PORT:-8080}}/\n    depends_on:\n      api: {{condition: service_healthy}}\n  api:\n    build: ./api\n    command: [python3, -m, http.server, \"${{API_PORT:-8080}}\"]\n    expose: [\"8080\"]\n{HEALTHCHECK}"
        ),
    );
    // 4. A named volume the tool sidecar writes and `main` reads only: the log is the tool's.
    // `main` without a `build`, its volume and a sidecar's path given as `${VAR:-default}`, and a
    // variable both files set.
    let d = task(
        root,
        "shared-volume",
        "[environment.env]\nTOKEN = \"t-1\"\nLOG_DIR = \"/var/log/tool\"\n",
        "",
        &format!("{} >/dev/null", fetch("http://tool:8080/ping/solved")),
        &format!(
            "echo \"TOKEN=$TOKEN TOOL_HOME=$TOOL_HOME\"; [ \"$TOKEN\" = t-1 ] && [ \"$TOOL_HOME\" = /srv ] && grep -qx solved /var/log/tool/calls.log && ! touch /var/log/tool/forged 2>/dev/null && {} >/dev/null {VERDICT}",
            fetch("http://tool:8080/")
        ),
    );
    write(d.join("environment/tool/Dockerfile"), &format!("{PYTHON_IMAGE}COPY tool.py /srv/tool.py\n"));
    write(d.join("environment/tool/tool.py"), TOOL);
    write(
        d.join("environment/docker-compose.yaml"),
        &format!(
            "services:\n  main:\n    environment:\n      - TOKEN=compose-token\n      - TOOL_HOME=${{TOOL_HOME-/srv}}\n    depends_on:\n      tool: {{condition: service_healthy}}\n    volumes:\n      - ${{LOG_VOLUME:-toollog}}:${{LOG_DIR}}:ro\n  tool:\n    build: ./tool\n    command: [python3, /srv/tool.py]\n    volumes:\n      - toollog:/var/log/tool\n{HEALTHCHECK}volumes:\n  toollog:\n"
        ),
    );
    // 5. Three steps in one environment: each its own instruction, solution and tests (the third
    // the task's shared ones); the second's files and setup.sh first, and no earlier step's tests
    // left for its agent to read.
    let d = task(
        root,
        "three-steps",
        "[agent]\ntimeout_sec = 120\n[[steps]]\nname = \"one\"\nmin_reward = 1.0\n[[steps]]\nname = \"two\"\n[[steps]]\nname = \"three\"\n",
        "",
        "true",
        &format!("[ \"$(tr '\\n' ' ' < /app/log)\" = 'one two three ' ] {VERDICT}"),
    );
    std::fs::remove_file(d.join("instruction.md")).unwrap();
    std::fs::remove_dir_all(d.join("solution")).unwrap();
    for (step, solve, test) in [
        ("one", "echo one > /app/log", Some("[ \"$(cat /app/log)\" = one ]")),
        (
            "two",
            "[ ! -e /tests/test.sh ] && [ -e /app/data.txt ] && [ \"$(cat /app/setup-ran)\" = set ] && echo two >> /app/log",
            Some("[ \"$(tr '\\n' ' ' < /app/log)\" = 'one two ' ]"),
        ),
        ("three", "echo three >> /app/log", None),
    ] {
        let s = d.join("steps").join(step);
        write(s.join("instruction.md"), &format!("Step {step}.\n"));
        write(s.join("solution/solve.sh"), &format!("#!/bin/bash\nset -e\n{solve}\n"));
        if let Some(t) = test {
            write(s.join("tests/test.sh"), &format!("#!/bin/bash\nmkdir -p /logs/verifier\n{t} {VERDICT}\n"));
        }
    }
    write(d.join("steps/two/workdir/data.txt"), "data\n");
    write(d.join("steps/two/workdir/setup.sh"), "echo set > /app/setup-ran\n");
    // Harbor would skip it (`[task] name` without `org/`); agenteval runs it and counts it.
    task(
        root,
        "unnamed-org",
        "[task]\nname = \"unnamed-org\"\n",
        "",
        "echo ok > /app/ok",
        &format!("[ -e /app/ok ] {VERDICT}"),
    );
    if broken {
        // No instruction.md and no steps: this task alone fails.
        let d = task(root, "no-instruction", "", "", "true", "echo 1 > /logs/verifier/reward.txt");
        std::fs::remove_file(d.join("instruction.md")).unwrap();
    }
}

fn result(bundle: &Path, id: &str) -> serde_json::Value {
    read_json(&bundle.join(format!("tasks/{id}/result.json")))
}

/// Runs the tasks with `agent` under `grading`; the run's bundle.
fn run(ws: &Workspace, tasks: &Path, agent: &str, grading: &str) -> (PathBuf, serde_json::Value, i32, String) {
    let cfg = harbor_config(ws, tasks, agent, "");
    let (v, code, out) = ws.submit(&cfg, &["--set", &format!("benchmark.grading={grading}")]);
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap_or_default());
    (bundle, v, code, text(&out.stderr))
}

#[test]
fn real_shaped_tasks_pass_with_their_solutions_and_fail_with_nop_under_both_rules() {
    docker_ready();
    let ws = Workspace::new();
    let root = ws.path().join("tasks");
    tasks(&root, true);
    for grading in ["harbor", "strict"] {
        let (bundle, v, code, err) = run(&ws, &root, "oracle", grading);
        // The broken task is infra: the run is incomplete (exit 3), the rest ran.
        assert_eq!((v["status"].as_str(), code), (Some("failed"), 3), "{grading}: {v} {err}");
        for id in FIVE.iter().chain(&["unnamed-org"]) {
            let r = result(&bundle, id);
            assert_eq!(r["passed"], true, "{grading}: {id} passes with its solution: {r}");
        }
        let broken = result(&bundle, "no-instruction");
        assert_eq!(broken["agent"]["terminated_by"], "infra_failure", "{broken}");
        assert!(broken["agent"]["error"].as_str().unwrap().contains("instruction.md"), "{broken}");
        let steps = result(&bundle, "three-steps");
        let names: Vec<&str> = steps["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["one", "two", "three"], "{steps}");
        assert_eq!(steps["rewards"]["reward"], 1.0, "{steps}");
        let summary = read_json(&bundle.join("summary.json"));
        assert_eq!(summary["harbor_would_skip"], 1, "{summary}");
        assert_eq!(
            result(&bundle, "unnamed-org")["harbor_would_skip"].as_str().map(|s| s.contains("org/name")),
            Some(true)
        );
        assert!(err.contains("Harbor itself would skip") && err.contains("unnamed-org"), "a warning at load: {err}");
    }
    let (bundle, v, code, err) = run(&ws, &root, "nop", "harbor");
    assert_eq!((v["status"].as_str(), code), (Some("failed"), 3), "{v} {err}");
    for id in FIVE {
        assert_eq!(result(&bundle, id)["passed"], false, "{id} fails with nop");
    }
    let steps = result(&bundle, "three-steps");
    assert_eq!(steps["steps"].as_array().unwrap().len(), 1, "step one's min_reward stops the task: {steps}");
    // `show` says each step, and why Harbor would skip a task.
    let run_id = v["run_id"].as_str().unwrap();
    let shown = text(&ws.run(&["show", run_id, "three-steps"]).stdout);
    assert!(shown.contains("step     one not passed"), "{shown}");
    let shown = text(&ws.run(&["show", run_id, "unnamed-org"]).stdout);
    assert!(shown.contains("Harbor itself would skip this task"), "{shown}");
    // Nothing of the tasks outlives them: containers, networks, volumes.
    for what in [&["ps", "-aq"][..], &["network", "ls", "-q"], &["volume", "ls", "-q"]] {
        let mut args = what.to_vec();
        let filter = format!("label=agenteval.run={run_id}");
        args.extend(["--filter", &filter]);
        let left = std::process::Command::new("docker").args(&args).output().unwrap();
        assert!(text(&left.stdout).trim().is_empty(), "{what:?} left: {}", text(&left.stdout));
    }
}

/// An image whose ENTRYPOINT exits, and one that never hands over, are each their task's
/// `infra`, named; nothing is left behind.
#[test]
fn an_entrypoint_that_exits_or_never_hands_over_is_the_task_s_infra_named() {
    docker_ready();
    let ws = Workspace::new();
    let root = ws.path().join("tasks");
    let d = task(
        &root,
        "exits",
        "",
        "COPY e.sh /e.sh\nENTRYPOINT [\"/bin/sh\", \"/e.sh\"]\n",
        "true",
        "echo 1 > /logs/verifier/reward.txt",
    );
    write(d.join("environment/e.sh"), "echo cannot start the service >&2\nexit 7\n");
    let d = task(
        &root,
        "keeps",
        "",
        "COPY e.sh /e.sh\nENTRYPOINT [\"/bin/sh\", \"/e.sh\"]\n",
        "true",
        "echo 1 > /logs/verifier/reward.txt",
    );
    write(d.join("environment/e.sh"), "exec sleep 100000\n");
    let cfg = harbor_config(&ws, &root, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &["--set", "environment.entrypoint_seconds=5"]);
    let (bundle, err) = (ws.runs().join(v["run_id"].as_str().unwrap_or_default()), text(&out.stderr));
    assert_eq!(code, 3, "{v} {err}");
    let exits = result(&bundle, "exits");
    let why = exits["agent"]["error"].as_str().unwrap();
    assert!(why.contains("ENTRYPOINT") && why.contains("code 7") && why.contains("cannot start the service"), "{why}");
    let keeps = result(&bundle, "keeps");
    let why = keeps["agent"]["error"].as_str().unwrap();
    assert!(why.contains("did not hand over") && why.contains("in 5 s"), "{why}");
}

/// Starts Harbor 0.26 itself (`tests/run.sh` installs it) with `agent` on the tasks under
/// `root`, its job in `jobs/agent`.
fn start_harbor(root: &Path, jobs: &Path, agent: &str) -> std::process::Child {
    let harbor = python_tool("harbor", "harbor");
    // Its Docker Compose v2 plugin sits beside it (Debian's docker-compose is v1).
    let docker_config = harbor.parent().unwrap().parent().unwrap().join("docker");
    assert!(
        docker_config.join("cli-plugins/docker-compose").is_file(),
        "Docker Compose v2 is not installed: tests/run.sh installs it into {}",
        docker_config.display()
    );
    std::process::Command::new(&harbor)
        .args(["run", "-p", root.to_str().unwrap(), "-a", agent, "-o", jobs.to_str().unwrap()])
        .args(["--job-name", agent, "-n", "6", "-y", "-q"])
        .env("DOCKER_CONFIG", &docker_config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// What Harbor's job `jobs/agent` gave each task: its reward and the steps it ran.
fn harbor_verdicts(
    harbor: std::process::Child,
    jobs: &Path,
    agent: &str,
) -> std::collections::BTreeMap<String, (f64, usize)> {
    let out = harbor.wait_with_output().unwrap();
    assert!(out.status.success(), "harbor run -a {agent}: {}{}", text(&out.stdout), text(&out.stderr));
    let mut verdicts = std::collections::BTreeMap::new();
    for trial in std::fs::read_dir(jobs.join(agent)).unwrap().flatten().filter(|e| e.path().is_dir()) {
        let r = read_json(&trial.path().join("result.json"));
        let name = r["task_name"].as_str().unwrap().to_string();
        assert!(r["exception_info"].is_null(), "Harbor's trial of {name} failed: {r}");
        let reward = r["verifier_result"]["rewards"]["reward"].as_f64().unwrap_or(-1.0);
        let steps = r["step_results"].as_array().map_or(0, Vec::len);
        verdicts.insert(name, (reward, steps));
    }
    verdicts
}

/// The same tasks under Harbor 0.26 and under agenteval (Harbor's rules), with the reference
/// solution and with `nop`: the same verdict for every task, the same steps run, and the task
/// Harbor skips without a word is the one agenteval counted.
#[test]
fn harbor_itself_gives_the_same_verdicts_on_the_same_tasks() {
    docker_ready();
    let ws = Workspace::new();
    let root = ws.path().join("tasks");
    tasks(&root, false);
    // Harbor 0.26 runs a `no-network` task only behind its egress sidecar, an image from Docker
    // Hub that this machine cannot pull: here both tools run that task with Harbor's default
    // network declared (agenteval's default is still no network).
    let toml = root.join("offline-localhost/task.toml");
    std::fs::write(&toml, "version = \"1.0\"\n").unwrap();
    // The tasks' Dockerfiles name the public base image; Harbor builds them as they are.
    let tagged =
        std::process::Command::new("docker").args(["tag", crate::environments::BASE, "debian:bookworm-slim"]).status();
    assert!(tagged.unwrap().success());
    // Both of Harbor's jobs at once, while agenteval runs (Harbor mostly waits on containers).
    let jobs = ws.path().join("harbor-jobs");
    let started: Vec<_> = ["oracle", "nop"].into_iter().map(|a| (a, start_harbor(&root, &jobs, a))).collect();
    let ours: Vec<_> = ["oracle", "nop"].into_iter().map(|a| run(&ws, &root, a, "harbor")).collect();
    for ((agent, child), (bundle, v, code, err)) in started.into_iter().zip(ours) {
        let harbor = harbor_verdicts(child, &jobs, agent);
        assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {err}");
        let ran: Vec<&str> = harbor.keys().map(String::as_str).collect();
        assert_eq!(
            ran,
            FIVE.iter().copied().collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>(),
            "Harbor skips unnamed-org"
        );
        assert_eq!(read_json(&bundle.join("summary.json"))["harbor_would_skip"], 1);
        for (name, (reward, steps)) in &harbor {
            let r = result(&bundle, name);
            assert_eq!(
                r["passed"].as_bool(),
                Some(*reward >= 1.0),
                "{agent}: {name}: Harbor's reward {reward}, agenteval's {r}"
            );
            assert_eq!(r["rewards"]["reward"].as_f64(), Some(*reward), "{agent}: {name}: {r}");
            let ours = r["steps"].as_array().map_or(0, Vec::len);
            assert_eq!(ours, *steps, "{agent}: {name}: the same steps ran: {r}");
        }
        imported_as_harbor_reported(&ws, &jobs.join(agent), &harbor, v["run_id"].as_str().unwrap());
    }
}

/// Harbor's job read into the index: the same reward per task and the same mean as Harbor
/// reports; `compare` with agenteval's run of the same tasks pairs every task Harbor ran;
/// importing it again makes no second run.
fn imported_as_harbor_reported(
    ws: &Workspace,
    job: &Path,
    harbor: &std::collections::BTreeMap<String, (f64, usize)>,
    ours: &str,
) {
    let out = ws.run(&["import", "harbor", job.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let imp: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reported = read_json(&job.join("result.json"));
    let mean = reported["stats"]["evals"].as_object().unwrap().values().next().unwrap()["metrics"][0]["mean"]
        .as_f64()
        .unwrap();
    assert!((imp["mean_reward"].as_f64().unwrap() - mean).abs() < 1e-9, "{imp} vs Harbor's {mean}");
    assert_eq!(imp["tasks_with_folder"].as_u64(), Some(harbor.len() as u64), "{imp}");
    let run = imp["run_id"].as_str().unwrap();
    let bundle = ws.runs().join(run);
    for (name, (reward, _)) in harbor {
        let r = result(&bundle, name);
        assert_eq!(r["rewards"]["reward"].as_f64(), Some(*reward), "{name}: {r}");
        assert_eq!(r["passed"].as_bool(), Some(*reward >= 1.0), "{name}: {r}");
    }
    assert!(ws.validate(bundle.to_str().unwrap()).status.success());
    let out = ws.run(&["compare", run, ours, "--json"]);
    let c: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(c["comparison"]["paired_tasks"].as_u64(), Some(harbor.len() as u64), "{c}");
    assert_eq!(c["comparison"]["changed"], serde_json::json!([]), "{c}");
    let again: serde_json::Value =
        serde_json::from_slice(&ws.run(&["import", "harbor", job.to_str().unwrap(), "--json"]).stdout).unwrap();
    assert_eq!((again["already"].as_bool(), again["run_id"].as_str()), (Some(true), Some(run)), "{again}");
    let out = ws.run(&["rerun", run]);
    assert_eq!(out.status.code(), Some(2), "an import cannot be rerun: {}", text(&out.stderr));
}

/// Harbor 0.26's own jobs of the shipped harbor-mini tasks (its `oracle` and `nop`), imported:
/// each task's reward and the mean as Harbor reports them, and every task paired with
/// agenteval's run of the same tasks.
#[test]
fn harbor_jobs_of_the_shipped_tasks_import_with_harbors_rewards_and_pair_with_agentevals_runs() {
    docker_ready();
    let ws = Workspace::new();
    let root = ws.path().join("harbor-mini");
    crate::environments::copy_dir(&repo().join("configs/harbor-mini"), &root);
    let tagged =
        std::process::Command::new("docker").args(["tag", crate::environments::BASE, "debian:bookworm-slim"]).status();
    assert!(tagged.unwrap().success());
    let jobs = ws.path().join("harbor-jobs");
    let started: Vec<_> = ["oracle", "nop"].into_iter().map(|a| (a, start_harbor(&root, &jobs, a))).collect();
    let ours: Vec<_> = ["oracle", "nop"].into_iter().map(|a| run(&ws, &root, a, "harbor")).collect();
    for ((agent, child), (_, v, code, err)) in started.into_iter().zip(ours) {
        let harbor = harbor_verdicts(child, &jobs, agent);
        assert_eq!(harbor.len(), 5, "{agent}: {harbor:?}");
        assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {err}");
        assert!(harbor.values().all(|(r, _)| *r == if agent == "oracle" { 1.0 } else { 0.0 }), "{agent}: {harbor:?}");
        imported_as_harbor_reported(&ws, &jobs.join(agent), &harbor, v["run_id"].as_str().unwrap());
    }
}
