//! Harbor tasks graded as Harbor grades them (`benchmark.grading: harbor`, the default), end to
//! end with a real Docker engine: eight probe tasks where agenteval's strict rules and Harbor's
//! differ (a server the agent leaves running for the tests, an agent stopped by its timeout
//! with the work done, no reward, two named rewards, `network_mode = "public"`, an allowlist
//! (a server of the test's reached through the egress proxy, another host refused),
//! `environment_mode = "separate"`, a background process that rewrites the reward), tasks
//! agenteval cannot run failing alone (a compose file using volumes, a GPU), a task with a
//! sidecar, and a dataset by name from a local registry.

use std::path::Path;

use crate::environments::{BASE, docker_ready, harbor_config};
use crate::util::*;

const PYTHON_IMAGE: &str = "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\n";

/// A task folder: its `task.toml`, the solution the oracle runs, and the tests.
fn task(root: &Path, name: &str, toml: &str, solve: &str, test: &str) {
    let d = root.join(name);
    for sub in ["environment", "solution", "tests"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("instruction.md"), format!("Probe {name}.\n")).unwrap();
    std::fs::write(d.join("task.toml"), toml).unwrap();
    std::fs::write(d.join("environment/Dockerfile"), PYTHON_IMAGE).unwrap();
    std::fs::write(d.join("solution/solve.sh"), format!("#!/bin/bash\n{solve}\n")).unwrap();
    std::fs::write(d.join("tests/test.sh"), format!("#!/bin/bash\nmkdir -p /logs/verifier\n{test}\n")).unwrap();
}

const PASS: &str = "echo 1 > /logs/verifier/reward.txt";
const FAIL: &str = "echo 0 > /logs/verifier/reward.txt";
const VERDICT: &str = "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt";

/// Every probe task (`aws.rs` runs them on the fleet too).
pub(crate) fn probes(root: &Path) {
    // The allowed host is a server of this test's in a container on Docker's default bridge (not
    // this machine: the proxy reaches none of its addresses), on ports 80 and 8080.
    // The list's ranges hold this machine's docker0 and loopback too: refused all the same.
    let (ip, docker0) = (allowed_server(), docker0());
    let range = ip.split('.').take(2).collect::<Vec<_>>().join(".");
    task(
        root,
        "allowlist",
        &format!(
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"{range}.0.0/16\", \"127.0.0.0/8\", \"{docker0}\"]\n"
        ),
        "true",
        &format!("cat > /tmp/probe.py <<'PY'\n{}\nPY\npython3 /tmp/probe.py {ip} {docker0}", ALLOWLIST_PROBE),
    );
    task(
        root,
        "server",
        "[agent]\ntimeout_sec = 60\n",
        "cat > /app/serve.py <<'PY'\nimport http.server\nhttp.server.HTTPServer(('127.0.0.1', 8765), http.server.SimpleHTTPRequestHandler).serve_forever()\nPY\nnohup setsid python3 /app/serve.py >/app/server.log 2>&1 < /dev/null &\nfor i in $(seq 100); do python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/', timeout=1)\" 2>/dev/null && break; sleep 0.1; done",
        &format!(
            "python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/', timeout=5)\" {VERDICT}"
        ),
    );
    task(
        root,
        "timeout-after-work",
        "[agent]\ntimeout_sec = 3\n",
        "echo done > /app/result.txt\nsleep 60",
        &format!("grep -qx done /app/result.txt {VERDICT}"),
    );
    task(root, "no-reward", "", "true", "echo the tests forgot the reward");
    task(root, "named-rewards", "", "true", "echo '{\"accuracy\": 1, \"style\": 0}' > /logs/verifier/reward.json");
    task(
        root,
        "public-network",
        "[environment]\nnetwork_mode = \"public\"\n",
        "true",
        &format!("ls /sys/class/net | grep -vqx lo {VERDICT}"),
    );
    task(
        root,
        "separate-verifier",
        "[verifier]\nenvironment_mode = \"separate\"\n",
        "echo mine > /app/answer.txt\necho planted > /tmp/planted",
        &format!("grep -qx mine /app/answer.txt && [ ! -e /tmp/planted ] {VERDICT}"),
    );
    task(
        root,
        "test-tamperer",
        "",
        "nohup setsid bash -c 'while true; do [ -f /tests/test.sh ] && grep -q reward.txt /tests/test.sh && printf \"#!/bin/bash\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n\" > /tests/test.sh; sleep 0.01; done' >/dev/null 2>&1 < /dev/null &\nsleep 0.5",
        FAIL,
    );
    task(
        root,
        "reward-rewriter",
        "",
        "nohup setsid bash -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.2; done' >/dev/null 2>&1 < /dev/null &\nsleep 0.5",
        FAIL,
    );
    hijackers(root);
    // A leftover that listens (so it keeps running) and rewrites the tests: caught by their digest.
    task(
        root,
        "listening-tamperer",
        "",
        "nohup setsid python3 -c \"\nimport socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 8766)); s.listen()\nwhile True:\n    try:\n        t = open('/tests/test.sh').read()\n        if 'echo 0' in t: open('/tests/test.sh', 'w').write('#!/bin/bash\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n')\n    except Exception: pass\n    time.sleep(0.01)\n\" >/dev/null 2>&1 < /dev/null &\nsleep 0.5",
        FAIL,
    );
    // A server that turns the tests' 0 into a 1: watched, it is named with what it wrote.
    task(root, "server-rewriter", "", LISTENING_REWRITER, &format!("{FAIL}\nsleep 3"));
    // A task without network whose tests serve on `localhost` and ask the container's own name.
    task(
        root,
        "localhost",
        "",
        "true",
        &format!(
            "python3 -m http.server 8081 --bind 127.0.0.1 >/dev/null 2>&1 &\nsleep 1\ngetent hosts \"$(hostname)\" && python3 -c \"import urllib.request; urllib.request.urlopen('http://localhost:8081/', timeout=5)\" {VERDICT}"
        ),
    );
    // No process of a task's environment can trace another, locally (the container's seccomp
    // profile) and on the fleet (the environment's commands start through agenteval's
    // launcher): not even one the agent started itself.
    task(
        root,
        "ptrace-refused",
        "",
        PTRACE_OWN_CHILD,
        &format!("cat /app/ptrace.txt; grep -qx 'refused 1' /app/ptrace.txt {VERDICT}"),
    );
    // Nor can it reach a process it did not start through `/proc` (the kernel's own check: the agent's
    // commands lack a capability every other process of the container keeps).
    task(
        root,
        "proc-mem",
        "",
        PROC_MEM,
        &format!(
            "cat /app/mem.txt; grep -qx 'pid1-mem refused 13' /app/mem.txt && grep -qx 'pid1-environ refused 13' /app/mem.txt && grep -qx 'pid1-root refused 13' /app/mem.txt && grep -qx 'own-mem opened' /app/mem.txt {VERDICT}"
        ),
    );
    // The tests' service name pointed at a fake the agent left on loopback: a bind-mounted file
    // the container's layer never shows.
    task(
        root,
        "hosts-pointer",
        "",
        "echo '127.0.0.1 grader.internal' >> /etc/hosts",
        &format!("getent hosts grader.internal {VERDICT}"),
    );
}

/// Two leftover processes that write the reward while the tests run, inside any time window:
/// one stops `test.sh` as it starts, writes `reward.json` (read before `reward.txt`) and lets
/// it go on; one waits for the tests' own `reward.txt` and rewrites it before they exit.
fn hijackers(root: &Path) {
    task(
        root,
        "reward-json-hijacker",
        "",
        "nohup setsid bash -c 'while true; do for p in /proc/[0-9]*; do if grep -q \"tes[t].sh\" $p/cmdline 2>/dev/null; then kill -STOP ${p#/proc/}; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.json; kill -CONT ${p#/proc/}; exit; fi; done; sleep 0.02; done' >/dev/null 2>&1 < /dev/null &\nsleep 0.5",
        FAIL,
    );
    task(
        root,
        "reward-txt-racer",
        "",
        "nohup setsid bash -c 'while true; do grep -qx 0 /logs/verifier/reward.txt 2>/dev/null && echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' >/dev/null 2>&1 < /dev/null &\nsleep 0.5",
        &format!("{FAIL}\nsleep 1"),
    );
}

/// What the allowlist probe's tests run: the allowed host answers on port 80 through the proxy;
/// the same host on another port, another host, this machine by an IPv4-mapped loopback and by
/// docker0's address, and a `Host` header that is not the target are all refused by it
/// (`x-agenteval-egress: refused`); `NO_PROXY` names the gateway's address.
const ALLOWLIST_PROBE: &str = r#"import sys, urllib.request, urllib.error
ip = sys.argv[1]
def reach(url, host=None):
    try:
        req = urllib.request.Request(url, headers={'Host': host} if host else {})
        r = urllib.request.urlopen(req, timeout=20)
        return r.status, r.headers.get('x-agenteval-egress')
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get('x-agenteval-egress')
    except Exception as e:
        return None, str(e)
allowed = reach('http://%s/' % ip)
refused = [reach('http://%s:8080/' % ip), reach('http://example.com/'), reach('http://[::ffff:127.0.0.1]/'),
           reach('http://%s/' % sys.argv[2]), reach('http://%s/' % ip, host='internal.example')]
# The model gateway listens where the proxy does: an agent's calls to it go around the proxy.
import os, urllib.parse
gateway_direct = urllib.parse.urlparse(os.environ['HTTPS_PROXY']).hostname in os.environ['NO_PROXY'].split(',')
print(allowed, refused, gateway_direct)
ok = allowed[0] == 200 and all(r[1] == 'refused' for r in refused) and gateway_direct
open('/logs/verifier/reward.txt', 'w').write('1' if ok else '0')"#;

/// This machine's address on Docker's default bridge (`docker0`).
fn docker0() -> String {
    let out = std::process::Command::new("docker")
        .args(["network", "inspect", "bridge", "-f", "{{range .IPAM.Config}}{{.Gateway}} {{.Subnet}}{{end}}"])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    let (gateway, subnet) = said.trim().split_once(' ').unwrap_or(("", said.trim()));
    if !gateway.is_empty() {
        return gateway.to_string();
    }
    // No gateway named: the engine gives the bridge its subnet's first address.
    let net = subnet.split('/').next().unwrap_or_default();
    let mut octets: Vec<u32> = net.split('.').filter_map(|o| o.parse().ok()).collect();
    assert_eq!(octets.len(), 4, "docker0's subnet: {said}");
    octets[3] += 1;
    octets.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
}

/// A tiny HTTP server in a container on Docker's default bridge, answering 200 on ports 80 and
/// 8080 until the test binary ends: its address.
fn allowed_server() -> String {
    static SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SERVER
        .get_or_init(|| {
            let serve = "for p in 80 8080; do perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => $ARGV[0], Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) { sysread($c, $b, 4096); print $c \"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\nconnection: close\\r\\n\\r\\nok\"; close $c }' $p & done; wait";
            let out = std::process::Command::new("docker")
                .args(["run", "-d", "--rm", "--label", "agenteval-test=allowlist", "--stop-timeout", "1"])
                .args([crate::environments::BASE, "timeout", "1800", "bash", "-c", serve])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            let id = text(&out.stdout).trim().to_string();
            let ip = std::process::Command::new("docker")
                .args(["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &id])
                .output()
                .unwrap();
            text(&ip.stdout).trim().to_string()
        })
        .clone()
}

/// A new git repository of everything in `dir`, committed: its commit.
fn commit_all(dir: &Path) -> String {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "tasks"]);
    git(&["rev-parse", "HEAD"])
}

fn summary_of(bundle: &Path) -> serde_json::Value {
    read_json(&bundle.join("summary.json"))
}

fn result(bundle: &Path, id: &str) -> serde_json::Value {
    read_json(&bundle.join(format!("tasks/{id}/result.json")))
}

#[test]
fn eight_probe_tasks_are_graded_as_harbor_grades_them_and_the_rewriter_and_tamperer_are_caught() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    probes(&tasks);
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let r = |id: &str| result(&bundle, id);
    // Watched from this machine while it served the tests, and it changed no file but its log:
    // an honest server's pass is not counted apart.
    let server = r("server");
    assert_eq!(server["passed"], true, "the agent's server still runs for the tests: {server}");
    assert!(server["suspect"].is_null(), "an honest server is not counted apart: {server}");
    let timed = r("timeout-after-work");
    assert_eq!(
        (timed["passed"].clone(), timed["agent"]["terminated_by"].clone()),
        (true.into(), "limit_time".into()),
        "{timed}"
    );
    let none = r("no-reward");
    assert_eq!((none["passed"].clone(), none["unscored"].clone()), (false.into(), true.into()), "{none}");
    let named = r("named-rewards");
    assert_eq!(named["passed"], false, "{named}");
    assert_eq!(named["rewards"], serde_json::json!({"accuracy": 1.0, "style": 0.0}), "{named}");
    let ids: Vec<&str> =
        named["scores"].as_array().unwrap().iter().map(|s| s["evaluator_id"].as_str().unwrap()).collect();
    assert!(
        ids.contains(&"reward:accuracy") && ids.contains(&"reward:style"),
        "each named reward is its own score: {ids:?}"
    );
    assert_eq!(r("public-network")["passed"], true, "{}", r("public-network"));
    let allow = r("allowlist");
    assert_eq!(allow["passed"], true, "the allowed host answers, another is refused: {allow}");
    assert_eq!(r("separate-verifier")["passed"], true, "{}", r("separate-verifier"));
    let listening = r("listening-tamperer");
    assert_eq!(listening["passed"], false, "{listening}");
    assert!(
        listening["scores"][0]["reason"].as_str().unwrap().contains("test.sh changed while the tests ran"),
        "{listening}"
    );
    // Held still before the tests were copied in: they ran as the task wrote them.
    let tampered = r("test-tamperer");
    assert_eq!(
        (tampered["passed"].clone(), tampered["rewards"].clone()),
        (false.into(), serde_json::json!({"reward": 0.0})),
        "{tampered}"
    );
    // The writers were held still while the tests ran: the tests' own 0 stands.
    for id in ["reward-rewriter", "reward-json-hijacker", "reward-txt-racer"] {
        let r = r(id);
        assert_eq!(
            (r["passed"].clone(), r["rewards"].clone()),
            (false.into(), serde_json::json!({"reward": 0.0})),
            "{id}: {r}"
        );
        let log = read_text(bundle.join(format!("tasks/{id}/worker.log"))).unwrap_or_default();
        assert!(r["suspect"].is_null(), "nothing of the agent's ran beside the tests: {r}\n{log}");
    }
    let suspects: Vec<String> = std::fs::read_dir(bundle.join("tasks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".tar.gz").to_string())
        .filter(|id| !r(id)["suspect"].is_null())
        .map(|id| format!("{id}: {}", r(&id)["suspect"]))
        .collect();
    assert_eq!(suspects.len(), 1, "the rewriting server's grade alone is counted apart: {suspects:?}");
    let rewriter = r("server-rewriter");
    let why = rewriter["suspect"][0].as_str().unwrap_or_default();
    assert!(why.contains("rewriter.py") && why.contains("opened /logs/verifier/reward.txt to write"), "{rewriter}");
    assert_eq!(r("localhost")["passed"], true, "loopback is not network: {}", r("localhost"));
    assert_eq!(r("ptrace-refused")["passed"], true, "no process traces another: {}", r("ptrace-refused"));
    let reached = r("proc-mem");
    assert_eq!(reached["passed"], true, "the agent reached PID 1 through /proc: {reached}");
    let hosts = r("hosts-pointer");
    assert_eq!((hosts["passed"].clone(), hosts["changed_outside"].clone()), (true.into(), 1.into()), "{hosts}");
    let listed = read_text(bundle.join("tasks/hosts-pointer/artifacts/changed-outside.txt")).unwrap();
    assert_eq!(listed, "/etc/hosts\n", "the change report sees a mounted file");
    // Harbor's mean: the unscored task left out; two names, so one mean per name.
    let summary = summary_of(&bundle);
    assert_eq!(summary["unscored"], 1, "{summary}");
    let means = summary["mean_reward"].as_object().unwrap();
    assert!(means.contains_key("accuracy") && means.contains_key("reward"), "{summary}");
    let shown = ws.run(&["runs", "show", v["run_id"].as_str().unwrap()]);
    let shown = text(&shown.stdout);
    assert!(shown.contains("as Harbor computes it") && shown.contains("(1 unscored task(s) left out)"), "{shown}");
}

#[test]
fn strict_grading_stays_available_and_grades_the_same_probes_as_before() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    probes(&tasks);
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, _, out) = ws.submit(
        &cfg,
        &[
            "--set",
            "benchmark.grading=strict",
            "--set",
            "benchmark.filter.ids=[server, timeout-after-work, no-reward, reward-rewriter, reward-json-hijacker]",
        ],
    );
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let r = |id: &str| result(&bundle, id);
    assert_eq!(r("server")["passed"], false, "the agent's processes are stopped before the tests");
    assert_eq!(r("timeout-after-work")["passed"], false, "a timed-out agent never passes");
    assert!(r("no-reward")["scores"][0]["error"].as_str().unwrap().contains("no reward"));
    assert!(r("no-reward")["unscored"].is_null());
    assert_eq!(r("reward-rewriter")["passed"], false, "the rewriter was stopped: the tests' 0 stands");
    assert_eq!(r("reward-json-hijacker")["passed"], false);
}

#[test]
fn a_compose_task_and_a_gpu_task_fail_alone_and_the_rest_of_the_dataset_runs() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    task(&tasks, "plain", "", "echo ok > /app/ok", &format!("[ -e /app/ok ] {VERDICT}"));
    task(&tasks, "gpu", "[environment]\ngpus = 1\n", "true", PASS);
    task(&tasks, "compose", "", "true", PASS);
    std::fs::remove_file(tasks.join("compose/environment/Dockerfile")).unwrap();
    std::fs::write(
        tasks.join("compose/environment/docker-compose.yaml"),
        format!(
            "services:\n  main:\n    image: {BASE}\n    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\"]\n"
        ),
    )
    .unwrap();
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    // Given up, they leave the run incomplete (exit 3), as any infrastructure failure does.
    assert_eq!((v["status"].as_str(), code), (Some("failed"), 3), "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    assert_eq!(result(&bundle, "plain")["passed"], true);
    for (id, why) in [("gpu", "GPU"), ("compose", "a folder of this machine")] {
        let r = result(&bundle, id);
        assert_eq!(r["agent"]["terminated_by"], "infra_failure", "{r}");
        assert!(r["agent"]["error"].as_str().unwrap().contains(why), "{r}");
    }
}

/// A local registry file naming a dataset in a local git repository: the dataset runs by name,
/// its commit is in the run's metadata, and a second run fetches nothing (the repository gone).
#[test]
fn a_dataset_by_name_from_a_local_registry_runs_and_is_fetched_once() {
    docker_ready();
    let ws = Workspace::new();
    let repo_dir = ws.path().join("tasks-repo");
    for t in ["hello-file", "count-failed"] {
        crate::environments::copy_dir(&repo().join("configs/harbor-mini").join(t), &repo_dir.join("tasks").join(t));
    }
    let commit = commit_all(&repo_dir);
    let task = |name: &str| serde_json::json!({"name": name, "git_url": repo_dir, "git_commit_id": commit, "path": format!("tasks/{name}")});
    let registry = serde_json::json!([
        {"name": "mini", "version": "1.0", "description": "two tasks", "tasks": [task("hello-file"), task("count-failed")]},
        {"name": "mini", "version": "0.9", "description": "older", "tasks": [task("hello-file")]},
    ]);
    ws.write("registry.json", &registry.to_string());
    let cfg = ws.write(
        "dataset.yaml",
        &format!(
            "name: by-name\nbenchmark:\n  kind: harbor\n  dataset: mini@1.0\n  registry: registry.json\nagent:\n  kind: oracle\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\nstorage:\n  bundle_root: runs\n"
        ),
    );
    let cache = ws.path().join("cache");
    let submit = || {
        let out = ws
            .cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])
            .env("AGENTEVAL_CACHE_DIR", &cache)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
        (v, out)
    };
    let (v, out) = submit();
    assert_eq!(v["status"], "complete", "{v} {}", text(&out.stderr));
    assert_eq!(v["summary"]["passed"], 2, "{v}");
    let meta = read_json(&ws.runs().join(v["run_id"].as_str().unwrap()).join("metadata.json"));
    assert_eq!(meta["dataset"]["name"], "mini", "{meta}");
    assert_eq!(meta["dataset"]["version"], "1.0", "{meta}");
    assert_eq!(meta["dataset"]["commits"], serde_json::json!([commit]), "{meta}");
    // Fetched once: the repository can go, the next run reads the cache.
    std::fs::remove_dir_all(&repo_dir).unwrap();
    let (again, out) = submit();
    assert_eq!(again["summary"]["passed"], 2, "{again} {}", text(&out.stderr));
    let listed = ws.run(&["datasets", "list", "--registry", "registry.json", "--json"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let l: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(l["datasets"][0]["name"], "mini");
    assert_eq!(l["datasets"][0]["tasks"], 2);
    // A version the registry lacks is refused at load, naming what it has.
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap(), "--set", "benchmark.dataset=mini@3.0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(format!("{}{}", text(&out.stdout), text(&out.stderr)).contains("1.0, 0.9"));
}

/// What a compose task's tests run: this machine's service at each address given and at the
/// task network's bridge (`.1` of the container's own address) must all be refused.
const HOST_PROBE: &str = r#"import socket, sys
port = int(sys.argv[1])
me = socket.gethostbyname(socket.gethostname())
addrs = sys.argv[2:] + [me.rsplit('.', 1)[0] + '.1']
reached = []
for a in addrs:
    try:
        socket.create_connection((a, port), timeout=3).close()
        reached.append(a)
    except Exception:
        pass
print('reached', reached, 'of', addrs)
open('/logs/verifier/reward.txt', 'w').write('0' if reached else '1')"#;

/// A TCP service on every address of this machine until the test ends: this machine's own
/// address (where the default route leaves) and the port.
fn listener_everywhere() -> (std::net::IpAddr, u16) {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("10.255.255.255:9").unwrap();
    let ip = probe.local_addr().unwrap().ip();
    let listener = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    (ip, port)
}

/// A multi-container task: the agent's container and a sidecar (a web service built from its
/// own folder, healthy before the agent starts) on the task's own network; the tests reach the
/// sidecar by its service name, and nothing of it outlives the task.
#[test]
fn a_compose_task_with_a_sidecar_passes_under_docker() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let query = "python3 -c \"import urllib.request; urllib.request.urlopen('http://api:8080/', timeout=5)\"";
    task(
        &tasks,
        "with-sidecar",
        "",
        &format!("{query} && echo reached > /app/reached"),
        &format!("[ -e /app/reached ] && {query} {VERDICT}"),
    );
    let env = tasks.join("with-sidecar/environment");
    std::fs::create_dir_all(env.join("api")).unwrap();
    std::fs::write(env.join("api/Dockerfile"), PYTHON_IMAGE).unwrap();
    std::fs::write(
        env.join("docker-compose.yaml"),
        "services:\n  main:\n    build: .\n    depends_on:\n      api: {condition: service_healthy}\n  api:\n    build: ./api\n    command: [python3, -m, http.server, \"8080\"]\n    healthcheck:\n      test: [CMD-SHELL, \"python3 -c 'import urllib.request; urllib.request.urlopen(\\\"http://127.0.0.1:8080\\\")'\"]\n      interval: 1s\n      retries: 20\n",
    )
    .unwrap();
    // Beside it, a task on its own compose network whose tests look for this machine: a service
    // of this test's on every address, asked at the bridge's address, docker0's and the host's own.
    let (host_ip, port) = listener_everywhere();
    let docker0 = docker0();
    task(
        &tasks,
        "compose-host-probe",
        "",
        "true",
        &format!("cat > /tmp/probe.py <<'PY'\n{HOST_PROBE}\nPY\npython3 /tmp/probe.py {port} {host_ip} {docker0}"),
    );
    let probe_env = tasks.join("compose-host-probe/environment");
    crate::environments::copy_dir(&env, &probe_env);
    // A sidecar that says its own memory limit: the documented default, not the machine's.
    let limit = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://api:8080/limit', timeout=5).read().decode().strip())\"";
    task(&tasks, "sidecar-limits", "", "true", &format!("[ \"$({limit})\" = 2147483648 ] {VERDICT}"));
    let limits_env = tasks.join("sidecar-limits/environment");
    crate::environments::copy_dir(&env, &limits_env);
    std::fs::write(
        limits_env.join("docker-compose.yaml"),
        "services:\n  main:\n    build: .\n    depends_on:\n      api: {condition: service_healthy}\n  api:\n    build: ./api\n    command: [sh, -c, \"mkdir -p /srv && (cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes) > /srv/limit && cd /srv && exec python3 -m http.server 8080\"]\n    healthcheck:\n      test: [CMD-SHELL, \"python3 -c 'import urllib.request; urllib.request.urlopen(\\\"http://127.0.0.1:8080\\\")'\"]\n      interval: 1s\n      retries: 20\n",
    )
    .unwrap();
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let r = result(&ws.runs().join(run), "with-sidecar");
    assert_eq!(r["passed"], true, "{r}");
    let limits = result(&ws.runs().join(run), "sidecar-limits");
    assert_eq!(limits["passed"], true, "a sidecar gets the default memory limit: {limits}");
    let probe = result(&ws.runs().join(run), "compose-host-probe");
    assert_eq!(probe["passed"], true, "a compose network reaches none of this machine's addresses: {probe}");
    let left = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=agenteval.run={run}")])
        .output()
        .unwrap();
    assert!(text(&left.stdout).trim().is_empty(), "containers left: {}", text(&left.stdout));
    let nets = std::process::Command::new("docker")
        .args(["network", "ls", "-q", "--filter", &format!("label=agenteval.run={run}")])
        .output()
        .unwrap();
    assert!(text(&nets.stdout).trim().is_empty(), "networks left: {}", text(&nets.stdout));
}

/// 50 honest passes under Harbor's rules, half of them tests that print a line just before they
/// write the reward (which a check by file times once failed), five of them a server the agent
/// leaves for the tests (which logs every request): every one passes, none counted apart.
#[test]
fn fifty_honest_passes_under_harbors_rules_all_pass() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    for i in 0..50 {
        let test = if i % 2 == 0 { format!("echo checking the answer\n{PASS}") } else { PASS.to_string() };
        if i % 10 == 5 {
            // A server the tests call, as Harbor's tasks ask for: it logs each request.
            let port = 8700 + i;
            let test = format!(
                "python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=5)\" {VERDICT}"
            );
            let solve = format!(
                "nohup python3 -m http.server {port} --bind 127.0.0.1 >/tmp/server.log 2>&1 < /dev/null &\nfor i in $(seq 100); do python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=1)\" 2>/dev/null && break; sleep 0.1; done"
            );
            task(&tasks, &format!("honest-{i:02}"), "", &solve, &test);
            continue;
        }
        task(&tasks, &format!("honest-{i:02}"), "", "echo done > /app/done", &test);
        std::fs::write(
            tasks.join(format!("honest-{i:02}/environment/Dockerfile")),
            "FROM debian:bookworm-slim\nWORKDIR /app\n",
        )
        .unwrap();
    }
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &["--set", "backend.max_concurrent_jobs=8"]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let summary = summary_of(&bundle);
    let suspects: Vec<String> = (0..50)
        .map(|i| result(&bundle, &format!("honest-{i:02}")))
        .filter(|r| !r["suspect"].is_null())
        .map(|r| format!("{}: {}", r["task_id"], r["suspect"]))
        .collect();
    assert_eq!((summary["passed"].as_u64(), summary["suspect"].as_u64()), (Some(50), None), "{summary} {suspects:?}");
}

/// A final state too big to keep as a patch is still compared by its digest: an agent that
/// leaves a different state each time never replays as MATCH.
#[test]
fn replay_tells_final_states_apart_when_the_patch_is_too_big_to_keep() {
    docker_ready();
    let ws = Workspace::new();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(std::time::Duration::ZERO);
    let tasks = ws.path().join("tasks");
    task(&tasks, "random-state", "", "true", PASS);
    // One model call (so the run has a recording), then a state of its own each time.
    ws.write(
        "setup.sh",
        r#"#!/bin/bash
cat > /usr/local/bin/random-agent <<'PY'
#!/usr/bin/env python3
import json, os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
import base64
open("/app/state.txt", "w").write(base64.b64encode(os.urandom(65536)).decode())
PY
chmod +x /usr/local/bin/random-agent
"#,
    );
    ws.write("secrets.env", "OPENAI_API_KEY=sk-test-0123456789\n");
    let agent = format!(
        "installed\n  model: mock-model\n  setup: setup.sh\n  command: random-agent\n  upstream:\n    openai:\n      base_url: {}\n      secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}",
        mock.base_url()
    );
    let cfg = harbor_config(&ws, &tasks, &agent, "");
    let with_secrets =
        std::fs::read_to_string(&cfg).unwrap().replace("backend:\n", "backend:\n  secrets_file: secrets.env\n");
    std::fs::write(&cfg, with_secrets).unwrap();
    let (v, code, out) = ws.submit(&cfg, &["--set", "environment.max_artifact_bytes=2048"]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let digest = read_text(ws.runs().join(run).join("tasks/random-state/artifacts/patch.sha256")).unwrap();
    assert_eq!(digest.trim().len(), 64, "the digest is kept without the patch: {digest}");
    let out = ws.run(&["replay", run, "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(r["match"], 0, "two different final states are no MATCH: {r}");
    assert!(r.to_string().contains("final state"), "{r}");
}

/// Hostile datasets: a task whose `instruction.md` links to a root-only file of this machine, a
/// registry repository that commits such a link, a version that names a path and a commit that
/// is an option of git's: each is refused or read as data, and the file's text shows nowhere.
#[test]
fn a_hostile_dataset_reads_no_file_of_this_machine() {
    use std::os::unix::fs::PermissionsExt as _;
    let ws = Workspace::new();
    let secret = ws.write("root-only.txt", "TOP-SECRET-MARKER\n");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let said = |out: &std::process::Output| format!("{}{}", text(&out.stdout), text(&out.stderr));
    // A task folder whose instruction is a link out of it fails alone, named; the rest of the
    // dataset runs, and the linked file is read nowhere.
    let tasks = ws.path().join("tasks");
    task(&tasks, "linky", "", "true", PASS);
    task(&tasks, "plain", "", "true", PASS);
    std::fs::remove_file(tasks.join("linky/instruction.md")).unwrap();
    std::os::unix::fs::symlink(&secret, tasks.join("linky/instruction.md")).unwrap();
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 3, "one task could not be read: the run is incomplete: {v} {}", said(&out));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    assert_eq!(result(&bundle, "plain")["passed"], true, "{v}");
    let linky = result(&bundle, "linky");
    assert_eq!(linky["agent"]["terminated_by"], "infra_failure", "{linky}");
    let why = linky["agent"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("instruction.md is a link out of the task's folder"), "{linky}");
    assert!(!said(&out).contains("TOP-SECRET"), "{}", said(&out));
    let found = std::process::Command::new("grep").args(["-rl", "TOP-SECRET"]).arg(&bundle).output().unwrap();
    assert!(text(&found.stdout).trim().is_empty(), "the linked file reached the bundle: {}", text(&found.stdout));
    // Left out by the filter, it is not even named.
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[plain]"]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v} {}", said(&out));
    // A registry's repository that commits the same link: checked out as a plain file.
    let repo_dir = ws.path().join("hostile-repo");
    std::fs::create_dir_all(repo_dir.join("tasks")).unwrap();
    task(&repo_dir.join("tasks"), "t1", "", "true", PASS);
    std::fs::remove_file(repo_dir.join("tasks/t1/instruction.md")).unwrap();
    std::os::unix::fs::symlink(&secret, repo_dir.join("tasks/t1/instruction.md")).unwrap();
    let commit = commit_all(&repo_dir);
    let entry = |version: &str, commit: &str| {
        serde_json::json!({"name": "evil", "version": version, "tasks": [
            {"name": "t1", "git_url": repo_dir, "git_commit_id": commit, "path": "tasks/t1"}]})
    };
    let option = format!("--pathspec-from-file={}", secret.display());
    let registry = serde_json::json!([entry("1.0", &commit), entry("../../escape", &commit), entry("2.0", &option)]);
    ws.write("registry.json", &registry.to_string());
    let cache = ws.path().join("cache");
    let validate = |dataset: &str| {
        let cfg = ws.write(
            "dataset.yaml",
            &format!(
                "name: evil\nbenchmark:\n  kind: harbor\n  dataset: {dataset}\n  registry: registry.json\nagent:\n  kind: oracle\nstorage:\n  bundle_root: runs\n"
            ),
        );
        ws.cmd(&["config", "validate", cfg.to_str().unwrap()]).env("AGENTEVAL_CACHE_DIR", &cache).output().unwrap()
    };
    let out = validate("evil@1.0");
    assert!(out.status.success(), "{}", said(&out));
    let checkouts: Vec<_> = std::fs::read_dir(cache.join("harbor/checkouts")).unwrap().flatten().collect();
    for c in checkouts {
        let f = c.path().join("tasks/t1/instruction.md");
        let m = std::fs::symlink_metadata(&f).unwrap();
        assert!(m.file_type().is_file(), "the link is a plain file in the checkout: {}", f.display());
        assert!(!std::fs::read_to_string(&f).unwrap().contains("TOP-SECRET"));
    }
    let out = validate("evil@2.0");
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("is not a commit") && !said(&out).contains("TOP-SECRET"), "{}", said(&out));
    let out = validate("evil@../../escape");
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let made: Vec<String> = std::fs::read_dir(cache.join("harbor"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!made.iter().any(|n| n.starts_with("escape")), "a version named a folder: {made:?}");
}

/// A leftover that keeps appending to a file of the working folder: its count when the tests ran
/// is the count the recorded patch holds only if it was held before the patch was taken.
const TICKER: &str = "nohup setsid bash -c 'while true; do echo t >> /app/ticks; sleep 0.01; done' >/dev/null 2>&1 < /dev/null &\nsleep 0.5";

/// Tries to trace agenteval's keep-alive (`sleep infinity`, which the hold once left running as
/// the image's own) and says what the kernel answered.
const PTRACE_KEEP_ALIVE: &str = r#"cat > /tmp/pt.py <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
target = None
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            cmd = open('/proc/%s/cmdline' % p, 'rb').read()
        except Exception:
            continue
        if cmd == b'sleep\x00infinity\x00':
            target = int(p)
if target is None:
    said = 'no keep-alive'
elif libc.ptrace(16, target, None, None) == 0:
    os.waitpid(target, 0)
    libc.ptrace(17, target, None, None)
    said = 'attached'
else:
    said = 'refused %d' % ctypes.get_errno()
open('/app/ptrace.txt', 'w').write(said)
PY
python3 /tmp/pt.py"#;

/// Opens PID 1's memory for writing and its variables, and the memory of a process of its own:
/// what the kernel answered, one line each.
const PROC_MEM: &str = r#"cat > /tmp/mem.py <<'PY'
import subprocess
said = []
own = subprocess.Popen(['sleep', '30'])
for name, path, mode in (('pid1-mem', '/proc/1/mem', 'r+b'), ('pid1-environ', '/proc/1/environ', 'rb'),
                         ('pid1-root', '/proc/1/root/etc/hostname', 'rb'), ('own-mem', '/proc/%d/mem' % own.pid, 'r+b')):
    try:
        open(path, mode).close()
        said.append('%s opened' % name)
    except OSError as e:
        said.append('%s refused %d' % (name, e.errno))
own.kill()
open('/app/mem.txt', 'w').write('\n'.join(said) + '\n')
PY
python3 /tmp/mem.py"#;

/// Starts a process of its own and tries to trace it: what the kernel answered.
const PTRACE_OWN_CHILD: &str = r#"cat > /tmp/pt.py <<'PY'
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
victim = subprocess.Popen(['sleep', '30'])
if libc.ptrace(16, victim.pid, None, None) == 0:
    said = 'attached'
else:
    said = 'refused %d' % ctypes.get_errno()
victim.kill()
open('/app/ptrace.txt', 'w').write(said)
PY
python3 /tmp/pt.py"#;

/// A leftover that stops itself and is woken by its own POSIX timer's SIGCONT every 0.2 s: each
/// time it writes `reward.json` if the verifier's folder is there, then stops again.
const SELF_WAKER: &str = r#"cat > /app/waker.py <<'PY'
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
class SigEvent(ctypes.Structure):
    _fields_ = [('value', ctypes.c_void_p), ('signo', ctypes.c_int), ('notify', ctypes.c_int), ('pad', ctypes.c_byte * 48)]
class TimeSpec(ctypes.Structure):
    _fields_ = [('sec', ctypes.c_long), ('nsec', ctypes.c_long)]
class ITimerSpec(ctypes.Structure):
    _fields_ = [('interval', TimeSpec), ('value', TimeSpec)]
ev = SigEvent(signo=signal.SIGCONT, notify=0)
timer = ctypes.c_void_p()
assert libc.timer_create(1, ctypes.byref(ev), ctypes.byref(timer)) == 0
every = TimeSpec(0, 200000000)
assert libc.timer_settime(timer, 0, ctypes.byref(ITimerSpec(every, every)), None) == 0
while True:
    if os.path.isdir('/logs/verifier'):
        try:
            open('/logs/verifier/reward.json', 'w').write('{"reward": 1}')
        except Exception:
            pass
    os.kill(os.getpid(), signal.SIGSTOP)
PY
nohup setsid python3 /app/waker.py >/dev/null 2>&1 < /dev/null &
sleep 0.5"#;

/// A server (it listens, so it runs beside the tests) that turns the tests' 0 into a 1.
const LISTENING_REWRITER: &str = r#"cat > /app/rewriter.py <<'PY'
import os, socket, time
s = socket.socket(); s.bind(('127.0.0.1', 8766)); s.listen()
while True:
    try:
        if open('/logs/verifier/reward.txt').read().strip() == '0':
            open('/logs/verifier/reward.txt', 'w').write('1')
    except OSError:
        pass
    time.sleep(0.05)
PY
nohup setsid python3 /app/rewriter.py >/dev/null 2>&1 < /dev/null &
sleep 0.5"#;

/// What a leftover can do once its agent has ended, under Harbor's rules and the shipped
/// defaults: it is held before the patch, the change report and the audit are taken (the ticker's
/// count in the patch is the count the tests saw); it cannot trace the keep-alive (the kernel
/// refuses `ptrace`); and one that wakes itself with a timer while held is named (`suspect`),
/// never an unflagged pass.
#[test]
fn leftovers_are_held_before_anything_is_read_and_cannot_trace_or_wake_themselves() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    task(
        &tasks,
        "ticker",
        "",
        TICKER,
        "echo \"{\\\"reward\\\": 1, \\\"ticks\\\": $(wc -l < /app/ticks)}\" > /logs/verifier/reward.json",
    );
    task(
        &tasks,
        "ptrace-keep-alive",
        "",
        PTRACE_KEEP_ALIVE,
        &format!("cat /app/ptrace.txt; grep -qx 'refused 1' /app/ptrace.txt {VERDICT}"),
    );
    task(&tasks, "self-waker", "", SELF_WAKER, &format!("{FAIL}\nsleep 1.5"));
    // A debugging task may let its agent trace (agenteval's `allow_ptrace`): a pass in the
    // container it shared with the tests is then in doubt.
    task(
        &tasks,
        "ptrace-allowed",
        "[environment]\nallow_ptrace = true\n",
        PTRACE_KEEP_ALIVE,
        &format!("cat /app/ptrace.txt; grep -qx attached /app/ptrace.txt {VERDICT}"),
    );
    let cfg = harbor_config(&ws, &tasks, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"].as_str(), Some("complete"), "{v} {}", text(&out.stderr));
    assert!(code == 0 || code == 1, "{v}");
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let r = |id: &str| result(&bundle, id);

    let ticker = r("ticker");
    let patch = read_text(bundle.join("tasks/ticker/artifacts/patch.diff")).unwrap();
    let in_patch = patch.lines().filter(|l| *l == "+t").count() as f64;
    assert!(in_patch > 0.0, "{patch}");
    assert_eq!(
        ticker["rewards"]["ticks"].as_f64(),
        Some(in_patch),
        "the ticker ran on after its patch was taken: {ticker}"
    );
    assert!(ticker["suspect"].is_null(), "held, and it stayed held: {ticker}");

    let traced = r("ptrace-keep-alive");
    assert_eq!(traced["passed"], true, "the kernel let the agent trace the keep-alive: {traced}");

    let allowed = r("ptrace-allowed");
    assert_eq!(allowed["passed"], true, "a task that allows tracing traces: {allowed}");
    let why = allowed["suspect"].to_string();
    assert!(why.contains("allow_ptrace"), "and its pass in the same container is in doubt: {allowed}");

    let waker = r("self-waker");
    assert!(
        waker["passed"] == false || !waker["suspect"].is_null(),
        "a process that woke itself while held wrote the reward unflagged: {waker}"
    );
    // Where this machine can write the containers' cgroups (root beside a local engine, as CI
    // runs), the agent's processes are frozen as a group before anything is read: the waker's
    // timer wakes nothing, and it never writes the reward at all.
    if nix::unistd::geteuid().is_root() && std::path::Path::new("/sys/fs/cgroup").is_dir() {
        assert_eq!(waker["passed"], false, "frozen as a group, the waker could not run: {waker}");
    }
    if waker["passed"] == true {
        let why = waker["suspect"][0].as_str().unwrap_or_default();
        assert!(why.contains("waker.py"), "the process is named: {waker}");
    }
}

/// A task told in steps whose agent (`installed`, which takes a new baseline each step) leaves a
/// reward writer in step one, and breaks step three's `setup.sh` in step two: the writer is held
/// in step two as in step one (steps share one baseline; step one's writer never becomes "the
/// image's own"), and the step that cannot be prepared after the agent acted is the agent's
/// failure, not `infra`.
#[test]
fn a_writer_left_between_steps_is_held_and_a_setup_the_agent_broke_is_its_failure() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    task(
        &tasks,
        "steps-writer",
        "[agent]\ntimeout_sec = 60\n[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n[[steps]]\nname = \"three\"\n",
        "true",
        PASS,
    );
    let d = tasks.join("steps-writer");
    for (step, test) in [("one", PASS), ("two", &format!("{FAIL}\nsleep 0.5")[..]), ("three", PASS)] {
        let s = d.join("steps").join(step);
        std::fs::create_dir_all(s.join("tests")).unwrap();
        std::fs::write(s.join("instruction.md"), format!("Step {step}.\n")).unwrap();
        std::fs::write(s.join("tests/test.sh"), format!("#!/bin/bash\nmkdir -p /logs/verifier\n{test}\n")).unwrap();
    }
    std::fs::create_dir_all(d.join("steps/three/workdir")).unwrap();
    std::fs::write(d.join("steps/three/workdir/setup.sh"), "#!/bin/bash\nset -e\n/app/prepare-step-three\n").unwrap();
    ws.write(
        "setup.sh",
        r#"#!/bin/bash
cat > /usr/local/bin/step-agent <<'SH'
#!/bin/bash
if grep -q 'Step one' /logs/agent/instruction.md; then
  nohup setsid bash -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done' >/dev/null 2>&1 < /dev/null &
  printf '#!/bin/sh\nexit 0\n' > /app/prepare-step-three; chmod +x /app/prepare-step-three
fi
if grep -q 'Step two' /logs/agent/instruction.md; then
  printf '#!/bin/sh\necho the agent broke this >&2; exit 7\n' > /app/prepare-step-three
fi
sleep 0.3
echo done
SH
chmod +x /usr/local/bin/step-agent
"#,
    );
    let cfg = harbor_config(&ws, &tasks, "installed\n  setup: setup.sh\n  command: step-agent", "");
    // One task that errs: not "an agent that cannot run" (that check wants several).
    let (v, _code, out) = ws.submit(&cfg, &["--set", "backend.stop_after_identical_errors=0"]);
    assert_eq!(v["status"].as_str(), Some("complete"), "the agent's doing is not infra: {v} {}", text(&out.stderr));
    let r = result(&ws.runs().join(v["run_id"].as_str().unwrap()), "steps-writer");
    let steps = r["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["one", "two", "three"], "{r}");
    assert_eq!(steps[1]["rewards"]["reward"], 0.0, "step one's writer was held in step two: {r}");
    assert_eq!(steps[2]["terminated_by"], "agent_error", "{r}");
    assert!(steps[2]["reason"].as_str().unwrap().contains("could not be prepared after the agent"), "{r}");
    assert_eq!(r["passed"], false, "{r}");
    assert_ne!(r["agent"]["terminated_by"], "infra_failure", "{r}");
}
