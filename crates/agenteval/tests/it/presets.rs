//! The shipped agents (presets), end to end: each real package from its registry, installed once
//! as an agent layer on harbor-mini's `hello-file` image, run in a container without internet
//! against the scripted model through the gateway; a layer shared by ten tasks and built once;
//! and an install that fails.

use std::path::Path;
use std::time::Duration;

use crate::environments::{BASE, copy_dir, docker_ready};
use crate::util::*;

/// Dollars per million tokens, both ways, for the mock model.
const PRICE: u64 = 1000;

/// Two copies of `hello-file`: one whose instruction scripts the model to solve it, one to fail.
fn hello_tasks(ws: &Workspace) -> std::path::PathBuf {
    let tasks = ws.path().join("tasks");
    for (id, word) in [("hello-solve", "HELLO_SOLVE"), ("hello-fail", "HELLO_FAIL")] {
        let dir = tasks.join(id);
        copy_dir(&repo().join("configs/harbor-mini/hello-file"), &dir);
        let instruction = dir.join("instruction.md");
        let was = std::fs::read_to_string(&instruction).unwrap();
        std::fs::write(&instruction, format!("{was}\n{word}\n")).unwrap();
        // The agents are heavier than the task's 512 MB (opencode's runtime alone is near it).
        let toml = dir.join("task.toml");
        let t = std::fs::read_to_string(&toml).unwrap().replace("memory_mb = 512", "memory_mb = 2048");
        std::fs::write(&toml, t).unwrap();
    }
    tasks
}

/// A Harbor config whose installed agent is `agent` (YAML lines under `agent:`) behind the
/// gateway to `mock`, on the model `other-model`.
fn config(ws: &Workspace, tasks: &Path, agent: &str, mock: &str) -> std::path::PathBuf {
    ws.write(
        "secrets.env",
        "OPENAI_API_KEY=sk-upstream-test-0000000000000000\nANTHROPIC_API_KEY=sk-ant-test-000000000000000\n",
    );
    ws.write(
        "presets.yaml",
        &format!(
            "name: presets\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: installed\n{agent}\n  model: other-model\n  limits:\n    max_wall_seconds: 240\n  upstream:\n    openai:\n      base_url: {mock}\n      secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}\n    anthropic:\n      base_url: {mock}\n      secrets: {{ANTHROPIC_API_KEY: ANTHROPIC_API_KEY}}\n    prices:\n      mock-model: {{input_per_mtok: {PRICE}, output_per_mtok: {PRICE}}}\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\n",
            tasks.display()
        ),
    )
}

fn trace(bundle: &Path, task: &str) -> Vec<serde_json::Value> {
    crate::util::read_text(bundle.join(format!("tasks/{task}/trace.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `preset`, on the mock model, solves one task and fails the other as scripted: its steps in
/// the trace, the gateway's tokens and cost in the result, its own record kept, its install
/// out of the agent's time.
fn solves_then_fails(preset: &str, tool: &str, record: &str, result_says: &str) {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = hello_tasks(&ws);
    // The preset and model named on the command line, over a config's installed agent.
    let cfg = config(&ws, &tasks, "  preset: opencode", &mock.base_url());
    let (v, code, out) = ws.submit(&cfg, &["--agent", preset, "--model", "mock-model"]);
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
    let solved = read_json(&bundle.join("tasks/hello-solve/result.json"));
    let failed = read_json(&bundle.join("tasks/hello-fail/result.json"));
    let log = read_text(bundle.join("tasks/hello-solve/worker.log")).unwrap_or_default();
    let calls = read_text(bundle.join("tasks/hello-solve/trace.jsonl")).unwrap_or_default();
    assert_eq!(solved["passed"], true, "{solved}\n{log}\n{calls}");
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (failed["passed"].as_bool(), failed["agent"]["terminated_by"].as_str()),
        (Some(false), Some("completed"))
    );
    // Every model call went through the gateway: its tokens and the price table's cost.
    let calls = mock.received().iter().filter(|r| r.body.to_string().contains("HELLO_SOLVE")).count() as u64;
    assert!(calls >= 1, "{calls}");
    assert_eq!(solved["agent"]["total_tokens"].as_u64(), Some(15 * calls), "{solved}");
    let cost = solved["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - 15.0 * calls as f64 * PRICE as f64 / 1e6).abs() < 1e-9, "{solved}");
    // Its own steps, as the llm agent's are traced.
    let t = trace(&bundle, "hello-solve");
    let called: Vec<&serde_json::Value> = t.iter().filter(|e| e["kind"] == "agent.tool_call").collect();
    assert!(called.iter().any(|e| e["payload"]["tool"] == tool), "{t:?}");
    let results: Vec<String> =
        t.iter().filter(|e| e["kind"] == "agent.tool_result").map(|e| e["payload"].to_string()).collect();
    assert!(results.iter().any(|r| r.contains(result_says)), "{results:?}");
    assert!(t.iter().any(|e| e["kind"] == "model.call"), "{t:?}");
    assert!(!t.iter().any(|e| e.to_string().contains("\\u001b")), "no colour codes in the trace");
    // The raw record is kept; the install is setup, not the agent's time.
    let kept = bundle.join(format!("tasks/hello-solve/artifacts/{}", record.trim_start_matches('/')));
    assert!(read_text(&kept).is_ok_and(|r| !r.is_empty()), "{} missing", kept.display());
    assert!(solved["setup_seconds"].as_f64().is_some(), "{solved}");
    assert!(log.contains(&format!("agent layer {preset} ")), "{log}");
    // The install is the image's: nothing of it counts as the agent's change.
    let changed = read_text(bundle.join("tasks/hello-solve/artifacts/changed-outside.txt")).unwrap_or_default();
    assert!(solved["changed_outside"].is_null(), "{changed}");
    // Named for the agent and model the command line chose: never one history with another's.
    let run = v["run_id"].as_str().unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&ws.run(&["runs", "show", run, "--json"]).stdout).unwrap();
    assert_eq!(shown["run"]["name"], format!("presets [{preset} · mock-model]"), "{shown}");

    // Its trajectories as ATIF, read by Harbor's own models: every tool call and every model
    // call of the trace, with the gateway's tokens.
    let out = ws.run(&["export", run, "--to", "atif", "--out", "atif"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let docs = crate::interchange::harbor_reads_atif(&ws.path().join("atif"));
    assert_eq!(docs.len(), 2);
    for doc in &docs {
        let task = doc["extra"]["task_id"].as_str().unwrap();
        crate::interchange::atif_holds_the_trace(doc, &trace(&bundle, task));
        assert_eq!(doc["agent"]["name"], preset, "{doc}");
    }
    // The run as a Harbor job: Harbor's models read every file, its viewer lists and opens
    // every trial, the lock pins each task by the digest Harbor computes.
    let out = ws.run(&["export", run, "--to", "harbor", "--out", "jobs/presets"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job = crate::interchange::harbor_reads_job(&ws.path().join("jobs/presets"));
    assert_eq!(job["trials"].as_array().unwrap().len(), 2, "{job}");
    assert_eq!(job["locked"].as_array().unwrap().len(), 2, "{job}");

    // The recording replays with no change to anything: every task MATCH, no call reaches the
    // model. Codex's through `--with-config` with the config file as it is, whose agent is
    // another preset: the run's `--agent` and `--model` still apply.
    let before = mock.received().len();
    let mut args = vec!["replay", run, "--json"];
    if preset == "codex" {
        args.extend(["--with-config", cfg.to_str().unwrap()]);
    }
    let out = ws.run(&args);
    let replayed: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{replayed}\n{}", text(&out.stderr));
    let verdicts: Vec<&str> =
        replayed["tasks"].as_array().unwrap().iter().map(|t| t["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["MATCH", "MATCH"], "{replayed}");
    assert_eq!(mock.received().len(), before, "a replay calls no model");
}

#[test]
fn the_codex_preset_solves_and_fails_as_scripted() {
    solves_then_fails("codex", "shell", "/logs/agent/codex.jsonl", "Hello, agenteval!");
}

#[test]
fn the_claude_code_preset_solves_and_fails_as_scripted() {
    solves_then_fails("claude-code", "Bash", "/logs/agent/claude.jsonl", "Hello, agenteval!");
}

#[test]
fn the_opencode_preset_solves_and_fails_as_scripted() {
    solves_then_fails("opencode", "bash", "/logs/agent/opencode.jsonl", "Hello, agenteval!");
}

#[test]
fn the_mini_swe_agent_preset_solves_and_fails_as_scripted() {
    solves_then_fails("mini-swe-agent", "bash", "/logs/agent/mini.traj.json", "Hello, agenteval!");
}

#[test]
fn the_aider_preset_solves_and_fails_as_scripted() {
    solves_then_fails("aider", "aider", "/logs/agent/aider.chat.history.md", "Applied edit to hello.txt");
}

/// Ten tasks on one image build its agent layer once; a second run builds nothing; the install's
/// time is the task's setup, never the agent's wall time.
#[test]
fn ten_tasks_on_one_image_build_the_agent_layer_once() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    for i in 0..10 {
        copy_dir(&repo().join("configs/harbor-mini/hello-file"), &tasks.join(format!("t{i}")));
    }
    // A layer no other test makes: this test's own nonce in the script.
    let nonce = format!("{:?}-{}", std::time::SystemTime::now(), std::process::id());
    ws.write(
        "setup.sh",
        &format!("#!/bin/bash\nset -e\n# {nonce}\nsleep 8\nprintf '#!/bin/sh\\necho \"Hello, agenteval!\" > /app/hello.txt\\n' > /usr/local/bin/hello\nchmod +x /usr/local/bin/hello\n"),
    );
    let cfg = crate::environments::harbor_config(&ws, &tasks, "installed\n  setup: setup.sh\n  command: hello", "");
    let built = |run: &str| -> (usize, usize) {
        let bundle = ws.runs().join(run);
        let logs: Vec<String> =
            (0..10).map(|i| read_text(bundle.join(format!("tasks/t{i}/worker.log"))).unwrap()).collect();
        let built = logs.iter().filter(|l| l.contains("agent layer agent.setup") && l.contains(" built in ")).count();
        let reused = logs.iter().filter(|l| l.contains("agent layer agent.setup") && l.contains(" reused")).count();
        (built, reused)
    };
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!((code, v["status"].as_str()), (0, Some("complete")), "{v} {}", text(&out.stderr));
    let first = v["run_id"].as_str().unwrap().to_string();
    assert_eq!(built(&first), (1, 9), "one build, nine reuses");
    for i in 0..10 {
        let r = read_json(&ws.runs().join(&first).join(format!("tasks/t{i}/result.json")));
        let wall = r["agent"]["wall_seconds"].as_f64().unwrap();
        // The install sleeps 8 s; the agent writes one file: counted in its time, the install
        // would make it 8 s at least, however loaded the machine.
        assert!(wall < 8.0, "the 8 s install is not the agent's time: {r}");
        assert!(r["setup_seconds"].as_f64().is_some(), "{r}");
        if r["setup_seconds"].as_f64().unwrap() >= 8.0 {
            assert!(r["passed"] == true, "{r}");
        }
    }
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(built(v["run_id"].as_str().unwrap()), (0, 10), "a second run builds nothing");
}

/// A preset version that does not exist: each task is `infra` with the installer's last lines and
/// a message naming `agent.version`; the run goes on to its end.
#[test]
fn a_preset_install_that_fails_is_infra_naming_the_version() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = hello_tasks(&ws);
    let cfg = config(&ws, &tasks, "  preset: codex\n  version: 0.0.0-does-not-exist", "http://127.0.0.1:9/v1");
    let (v, code, out) = ws.submit(&cfg, &[]);
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
    for id in ["hello-solve", "hello-fail"] {
        let r = read_json(&bundle.join(format!("tasks/{id}/result.json")));
        assert_eq!(r["agent"]["terminated_by"], "infra_failure", "{r}");
        assert_eq!(r["agent"]["fault"], "install_failed", "{r}");
        let why = r["agent"]["error"].as_str().unwrap();
        assert!(why.contains("agent.version 0.0.0-does-not-exist") && why.contains("npm"), "{why}");
    }
    // Every task failing the same install is an agent that cannot run, and the fix is named.
    let err = text(&out.stderr);
    assert_eq!(code, 4, "{err}");
    assert!(err.lines().last().unwrap().contains("(fix `agent.version`: check the version exists"), "{err}");
}

/// A setup script that fails on every task stops the run, naming `agent.setup` (the task is the
/// infrastructure's to count, the fix the config's), with no Rust debug output in the message.
#[test]
fn a_setup_that_fails_stops_the_run_naming_agent_setup() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    for i in 0..6 {
        copy_dir(&repo().join("configs/harbor-mini/hello-file"), &tasks.join(format!("t{i}")));
    }
    let nonce = format!("{:?}-{}", std::time::SystemTime::now(), std::process::id());
    ws.write(
        "setup.sh",
        &format!("#!/bin/bash\n# {nonce}\necho 'E: Unable to locate package hello-agent' >&2\nexit 100\n"),
    );
    let cfg = crate::environments::harbor_config(&ws, &tasks, "installed\n  setup: setup.sh\n  command: hello", "");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("error: the agent cannot run: installing the agent (agent.setup) failed"), "{err}");
    assert!(last.contains("exited 100") && !last.contains("Some("), "{last}");
    assert!(last.contains("(fix `agent.setup`: the script's last lines are in each task's log)"), "{last}");
}

/// `--agent` and `--model` pick a preset over a config's installed agent; a preset name that is
/// not one is a config error naming the presets; `agents list` shows them.
#[test]
fn presets_are_listed_and_named_on_the_command_line() {
    let ws = Workspace::new();
    let out = ws.run(&["agents", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["presets"].as_array().unwrap().iter().map(|p| p["preset"].as_str().unwrap()).collect();
    assert_eq!(names, ["codex", "claude-code", "mini-swe-agent", "aider", "opencode"]);
    let tasks = hello_tasks(&ws);
    let cfg = config(&ws, &tasks, "  preset: codex", "http://127.0.0.1:9/v1");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--agent", "codx", "--model", "m2"]);
    assert_eq!(out.status.code(), Some(2));
    let said = text(&out.stderr);
    assert!(said.contains("no preset named `codx`") && said.contains("did you mean `codex`"), "{said}");
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap(), "--set", "agent.preset=aider"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `--matrix agent.preset=…`: two agents on one benchmark, one set, each run its own preset.
#[test]
fn a_matrix_of_presets_compares_two_agents_on_one_benchmark() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = hello_tasks(&ws);
    let cfg = config(&ws, &tasks, "  preset: codex", &mock.base_url());
    let (v, code, out) = ws.submit(&cfg, &["--model", "mock-model", "--matrix", "agent.preset=codex,claude-code"]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let runs = v["runs"].as_array().unwrap();
    let passed: Vec<(&str, u64)> =
        runs.iter().map(|r| (r["label"].as_str().unwrap(), r["summary"]["passed"].as_u64().unwrap())).collect();
    assert_eq!(passed, [("agent.preset=codex", 1), ("agent.preset=claude-code", 1)], "{v}");
    let wires: std::collections::BTreeSet<String> = mock.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(wires, ["anthropic".to_string(), "responses".to_string()].into(), "each agent on its own wire");
    // The two runs are told apart wherever they are listed: by agent, version and model.
    let list = text(&ws.run(&["runs", "list"]).stdout);
    for preset in ["codex 0.", "claude-code 2."] {
        assert!(list.contains(preset), "each run's agent on a line of its own: {list}");
    }
    assert!(list.lines().all(|l| l.chars().count() <= 80), "{list}");
    let listed: serde_json::Value = serde_json::from_slice(&ws.run(&["runs", "list", "--json"]).stdout).unwrap();
    let agents: std::collections::BTreeSet<&str> =
        listed.as_array().unwrap().iter().map(|r| r["agent"].as_str().unwrap()).collect();
    assert_eq!(agents.len(), 2, "{listed}");
    assert!(agents.iter().all(|a| a.ends_with(" · mock-model")), "{agents:?}");
    let names: std::collections::BTreeSet<&str> =
        listed.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2, "two agents' runs are two histories: {listed}");
    // And in the UI's list of runs: each run's name and agent.
    let index = ws.index();
    let ui = crate::util::ui::UiServer::start(ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0"]));
    let page = ui.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in names.iter().copied().chain(["codex 0.", "claude-code 2."]) {
        assert!(page.body.contains(shown), "the UI's runs list shows {shown:?}: {}", page.body);
    }
}

/// `doctor` on an installed agent behind the gateway: the model endpoint answers from this
/// machine, and from a container of the first task's image the gateway's address and ports are
/// reached; an endpoint that does not answer is one failing line naming its field, exit 2.
#[test]
fn doctor_checks_the_model_endpoint_and_the_gateway_from_a_task_container() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    // The hello-file image with its Dockerfile as shipped: built by `--build`.
    copy_dir(&repo().join("configs/harbor-mini/hello-file"), &tasks.join("t0"));
    let setup = "#!/bin/bash\nprintf '#!/bin/sh\\ntrue\\n' > /usr/local/bin/hello && chmod +x /usr/local/bin/hello\n";
    ws.write("setup.sh", setup);
    let cfg = config(&ws, &tasks, "  setup: setup.sh\n  command: hello", &mock.base_url());
    let lines = |out: &std::process::Output| text(&out.stdout).lines().map(String::from).collect::<Vec<_>>();
    let out = ws.run(&["doctor", "--build", "--config", cfg.to_str().unwrap()]);
    let said = lines(&out);
    assert_eq!(out.status.code(), Some(0), "{said:?} {}", text(&out.stderr));
    let line =
        |what: &str| said.iter().find(|l| l.contains(what)).unwrap_or_else(|| panic!("{what}: {said:?}")).clone();
    let endpoint = line("model endpoint openai");
    assert!(endpoint.starts_with("ok") && endpoint.contains("answers (HTTP"), "{endpoint}");
    let gateway = line("gateway from a container of task t0");
    assert!(gateway.starts_with("ok") && gateway.contains("answers a task's token (GET /models)"), "{gateway}");

    // A port nothing listens on: the endpoint's line fails, and only it.
    let cfg = config(&ws, &tasks, "  setup: setup.sh\n  command: hello", "http://127.0.0.1:9/v1");
    let out = ws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    let said = lines(&out);
    assert_eq!(out.status.code(), Some(2), "{said:?}");
    let failed: Vec<&String> = said.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 2, "openai and anthropic, both at the dead port: {said:?}");
    assert!(
        failed.iter().all(|l| l.contains("cannot reach http://127.0.0.1:9/v1 (connect: ") && l.contains("base_url)")),
        "{said:?}"
    );
    assert!(failed[0].contains("(agent.upstream.openai.base_url)"), "{failed:?}");
}

/// A hostile task image whose `python3` answers a path instead of its version: a Python preset's
/// install fails naming the answer, and nothing of this machine is made or touched by it.
#[test]
fn an_images_python3_that_answers_a_path_names_no_folder_of_this_machine() {
    docker_ready();
    let ws = Workspace::new();
    let tasks = hello_tasks(&ws);
    let nonce = format!("agenteval-pwned-{}", std::process::id());
    let escape = "../".repeat(12);
    for id in ["hello-solve", "hello-fail"] {
        let dockerfile = tasks.join(id).join("environment/Dockerfile");
        let was = std::fs::read_to_string(&dockerfile).unwrap();
        std::fs::write(
            &dockerfile,
            format!("{was}\nRUN printf '#!/bin/sh\\necho {escape}tmp/{nonce}\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3\n"),
        )
        .unwrap();
    }
    let cfg = config(&ws, &tasks, "  preset: mini-swe-agent", "http://127.0.0.1:9/v1");
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
    for id in ["hello-solve", "hello-fail"] {
        let r = read_json(&bundle.join(format!("tasks/{id}/result.json")));
        assert_eq!(r["agent"]["fault"], "image_cannot_run", "{r}");
        assert!(r["agent"]["error"].as_str().unwrap().contains("not a Python 3 version"), "{r}");
    }
    // No version would install: the hint names the preset and what the image lacks, not the version.
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("(fix `agent.preset`: a Python preset needs python3"), "{err}");
    let made: Vec<String> = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&nonce))
        .collect();
    assert!(made.is_empty(), "the image's answer named a folder: {made:?}");
}

/// Issue 59: Codex (the preset) on an Azure OpenAI resource: its Responses calls reach the
/// resource's deployment with its `api-key`, metered from the resource's usage at the model's
/// price; the agent is unchanged.
#[test]
fn the_codex_preset_reaches_an_azure_resource_through_the_gateway() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = hello_tasks(&ws);
    ws.write("secrets.env", "AZURE_OPENAI_API_KEY=azure-key-0000000000000000\n");
    let cfg = ws.write(
        "azure.yaml",
        &format!(
            "name: azure\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: installed\n  preset: codex\n  model: mock-model\n  limits:\n    max_wall_seconds: 240\n  upstream:\n    azure:\n      base_url: http://{}\n      deployments: {{mock-model: codex-eval}}\n    prices:\n      mock-model: {{input_per_mtok: {PRICE}, output_per_mtok: {PRICE}}}\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
            tasks.display(),
            mock.addr
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let solved = read_json(&bundle.join("tasks/hello-solve/result.json"));
    assert_eq!(solved["passed"], true, "{solved}");
    let got = mock.received();
    assert!(!got.is_empty());
    for r in &got {
        assert_eq!((r.path.as_str(), &r.body["model"]), ("azure-v1:responses", &serde_json::json!("codex-eval")));
        assert_eq!(r.credential.as_deref(), Some("api-key azure-key-0000000000000000"));
    }
    let calls = got.iter().filter(|r| r.body.to_string().contains("HELLO_SOLVE")).count() as u64;
    assert_eq!(solved["agent"]["total_tokens"].as_u64(), Some(15 * calls), "{solved}");
    let cost = solved["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - 15.0 * calls as f64 * PRICE as f64 / 1e6).abs() < 1e-9, "{solved}");
}

/// Issue 59: Claude Code (the preset) on Amazon Bedrock, unchanged: its Messages calls reach the
/// stand-in as Bedrock's `InvokeModelWithResponseStream` for the mapped model id, SigV4-signed
/// (the worker's AWS credentials, never the agent's), and stream back through the gateway,
/// metered from Bedrock's own counts; the run replays with the stand-in gone.
#[test]
fn the_claude_code_preset_reaches_bedrock_through_the_gateway() {
    use agenteval_testkit::llm_mock::bedrock::{BEDROCK_REGION, BEDROCK_SECRET_KEY, signing_for_stand_in};
    const ID: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = hello_tasks(&ws);
    let cfg = ws.write(
        "bedrock.yaml",
        &format!(
            "name: bedrock\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: installed\n  preset: claude-code\n  model: mock-model\n  limits:\n    max_wall_seconds: 240\n  upstream:\n    bedrock:\n      region: {BEDROCK_REGION}\n      endpoint_url: http://{}\n      models: {{mock-model: \"{ID}\"}}\n    prices:\n      mock-model: {{input_per_mtok: {PRICE}, output_per_mtok: {PRICE}}}\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
            tasks.display(),
            mock.addr
        ),
    );
    let out =
        signing_for_stand_in(&mut ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap());
    let solved = read_json(&bundle.join("tasks/hello-solve/result.json"));
    assert_eq!(solved["passed"], true, "{solved}");
    let got = mock.received();
    assert!(!got.is_empty());
    for r in &got {
        assert_eq!(r.path, format!("bedrock:stream:{ID}"));
        assert!(r.credential.as_deref().unwrap_or_default().starts_with("AWS4-HMAC-SHA256 Credential="), "{r:?}");
    }
    let calls = got.iter().filter(|r| r.body.to_string().contains("HELLO_SOLVE")).count() as u64;
    assert_eq!(solved["agent"]["total_tokens"].as_u64(), Some(15 * calls), "{solved}");
    let cost = solved["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - 15.0 * calls as f64 * PRICE as f64 / 1e6).abs() < 1e-9, "{solved}");
    for file in ["tasks/hello-solve/trace.jsonl", "tasks/hello-solve/worker.log"] {
        let body = read_text(bundle.join(file)).unwrap_or_default();
        assert!(!body.contains(BEDROCK_SECRET_KEY), "{file} holds the AWS secret");
    }
    // The recording replays with the stand-in gone and no credentials: every task MATCH.
    drop(mock);
    let out = ws.run(&["replay", v["run_id"].as_str().unwrap(), "--json"]);
    let replayed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{replayed}\n{}", text(&out.stderr));
    let verdicts: Vec<&str> =
        replayed["tasks"].as_array().unwrap().iter().map(|t| t["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["MATCH", "MATCH"], "{replayed}");
}

/// The presets whose CLI can go on with a session (Claude Code, Codex, opencode) converse with a
/// case's simulated user: each of the user's turns is the next prompt of the same session (the
/// model sees the turns before it), the conversation is the worker's record, the user's calls
/// are metered apart; a preset that cannot (aider, mini-swe-agent) is refused before anything
/// runs, naming those that can.
#[test]
fn presets_that_resume_a_session_converse_with_a_simulated_user() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let case = serde_json::json!({
        "id": "talk", "input": "You are a support agent for a task list.",
        "user": {"scenario": "CHATTY: you want task_7 done."},
        "environment": {"image": BASE, "memory_mb": 2048},
        "evaluators": [{"kind": "contains", "value": "You said: Are you sure it is done?"}],
    });
    ws.write("cases.jsonl", &format!("{case}\n"));
    ws.write(
        "secrets.env",
        "OPENAI_API_KEY=sk-upstream-test-0000000000000000\nANTHROPIC_API_KEY=sk-ant-test-000000000000000\n",
    );
    let url = mock.base_url();
    let cfg = ws.write(
        "talk.yaml",
        &format!(
            "name: talk\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: installed\n  preset: codex\n  model: mock-model\n  limits:\n    max_wall_seconds: 240\n  upstream:\n    openai:\n      base_url: {url}\n      secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}\n    anthropic:\n      base_url: {url}\n      secrets: {{ANTHROPIC_API_KEY: ANTHROPIC_API_KEY}}\n\
             roles:\n  user:\n    model: openai:mock-user\nenvironment:\n  kind: docker\nbackend:\n  secrets_file: secrets.env\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n"
        ),
    );
    for preset in ["claude-code", "codex", "opencode"] {
        let before = mock.received().len();
        let (v, code, out) = ws.submit(&cfg, &["--agent", preset]);
        let bundle = ws.runs().join(v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
        let r = read_json(&bundle.join("tasks/talk/result.json"));
        let t = trace(&bundle, "talk");
        let said: Vec<(String, String)> = t
            .iter()
            .filter(|e| e["kind"] == "agent.message" || e["kind"] == "user.message")
            .map(|e| (e["kind"].as_str().unwrap().to_string(), e["payload"]["text"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!((code, r["passed"].as_bool()), (0, Some(true)), "{preset}: {r}\n{said:?}\n{}", text(&out.stderr));
        // The opening, then the user's five turns each answered: the chatty user's last ends it.
        let kinds: Vec<&str> = said.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["agent.message", "user.message"].repeat(5), "{preset}: {said:?}");
        assert_eq!(said[1].1, "Please mark task_7 as completed.", "{preset}");
        assert_eq!(said[2].1, "You said: Please mark task_7 as completed.", "{preset}: {said:?}");
        assert_eq!(said[4].1, "You said: Are you sure it is done?", "{preset}: {said:?}");
        assert!(said[9].1.contains("###STOP###"), "{preset}: {said:?}");
        assert_eq!(r["roles"]["user"]["calls"], 5, "{preset}: the user's calls are its own: {r}");
        // A later turn went on with the same session: the model saw the first turn's brief and the
        // user's later words in one request.
        let resumed = mock.received()[before..].iter().any(|c| {
            let body = c.body.to_string();
            body.contains("You are talking with a user.") && body.contains("Are you sure it is done?")
        });
        assert!(resumed, "{preset}: no call held both the first turn and a later one");
        assert!(t.iter().any(|e| e["kind"] == "model.call"), "{preset}: {t:?}");
    }
    for preset in ["aider", "mini-swe-agent"] {
        let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--agent", preset]);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{preset}: {said}");
        assert!(said.contains("cannot converse") && said.contains("(codex, claude-code, opencode)"), "{said}");
    }
}

/// The MCP test server: one tool that answers only with the key the run gives its container.
const ORDERS_SERVER: &str = r#"import os
from mcp.server.fastmcp import FastMCP
mcp = FastMCP("orders", host="0.0.0.0", port=8000)

@mcp.tool()
def order_status(order_id: str) -> str:
    """The status of an order."""
    if os.environ.get("ORDERS_API_KEY") != "sk-orders-7f3a9c1e-test":
        raise ValueError("unauthorised: the server has no key")
    return f"order {order_id}: shipped"

mcp.run(transport="streamable-http")
"#;

/// The `mcp` SDK from PyPI for the test server's image (the image's Python, 3.11), fetched once.
fn mcp_site() -> std::path::PathBuf {
    let root = std::env::var_os("AGENTEVAL_CACHE_DIR").map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let site = root.join("test-mcp-1.30.0-py3.11");
    if !site.join("mcp").is_dir() {
        let part = root.join(format!("test-mcp-{}", std::process::id()));
        let out = std::process::Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--only-binary=:all:"])
            .args(["--python-version", "3.11", "--platform", "manylinux2014_x86_64", "--implementation", "cp"])
            .arg("--target")
            .arg(&part)
            .arg("mcp==1.30.0")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let _ = std::fs::rename(&part, &site);
    }
    site
}

/// A Harbor task with an MCP server (`[[environment.mcp_servers]]`, a compose sidecar built on
/// the `mcp` SDK) whose key comes from the run's secrets (`roles.tools.secrets`) into the
/// server's container only: Claude Code, Codex and opencode reach it through their own MCP
/// configurations, the `llm` agent as tools of its own, and the call and its answer are in the trace; the agent looks for the key in its variables, every
/// process's and its files and finds none; the key is in no file of the run.
#[test]
fn a_task_s_mcp_server_answers_the_preset_with_a_key_the_agent_cannot_read() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let env = order_status_task(&tasks, "transport = \"streamable-http\"\nurl = \"http://orders:8000/mcp\"\n");
    let server = env.join("orders");
    crate::environments::copy_dir(&mcp_site(), &server.join("site"));
    std::fs::write(server.join("server.py"), ORDERS_SERVER).unwrap();
    std::fs::write(
        server.join("Dockerfile"),
        "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\nCOPY site /opt/mcp\nCOPY server.py /srv/server.py\nENV PYTHONPATH=/opt/mcp\nCMD [\"python3\", \"/srv/server.py\"]\n",
    )
    .unwrap();
    std::fs::write(
        env.join("docker-compose.yaml"),
        "services:\n  main:\n    build: .\n    depends_on:\n      orders: {condition: service_healthy}\n  orders:\n    build: ./orders\n    environment:\n      ORDERS_API_KEY: ${ORDERS_API_KEY}\n    healthcheck:\n      test: [CMD-SHELL, \"python3 -c 'import socket; socket.create_connection((\\\"127.0.0.1\\\", 8000), 1)'\"]\n      interval: 1s\n      retries: 60\n",
    )
    .unwrap();
    let cfg = config(&ws, &tasks, "  preset: claude-code", &mock.base_url());
    let with_tools =
        std::fs::read_to_string(&cfg).unwrap() + "roles:\n  tools:\n    secrets: {ORDERS_API_KEY: orders-key}\n";
    std::fs::write(&cfg, with_tools).unwrap();
    // Without the key in the store: refused before anything runs, naming where it is asked for.
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--model", "mock-model"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("roles.tools.secrets.ORDERS_API_KEY"), "{}", text(&out.stderr));

    let secrets = std::fs::read_to_string(ws.path().join("secrets.env")).unwrap();
    std::fs::write(ws.path().join("secrets.env"), secrets + "orders-key=sk-orders-7f3a9c1e-test\n").unwrap();
    for preset in ["claude-code", "codex", "opencode"] {
        mcp_order_passes(&ws, &cfg, &["--agent", preset, "--model", "mock-model"], preset);
    }
    // The `llm` agent: the server's tools are its own (`mcp__orders__order_status`), called from
    // the worker through the task network's bridge.
    let llm = ws.write(
        "mcp-llm.yaml",
        &format!(
            "name: mcp-llm\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: llm\n  model: openai:mock-model\n  base_url: {}\n  secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}\n  tools: []\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  secrets_file: secrets.env\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\nroles:\n  tools:\n    secrets: {{ORDERS_API_KEY: orders-key}}\n",
            tasks.display(),
            mock.base_url()
        ),
    );
    mcp_order_passes(&ws, &llm, &[], "llm");
}

/// A task's `stdio` MCP server (a program in the agent's own image, the `mcp` SDK's) is the
/// `llm` agent's too: the worker starts it in the task's container as the agent's CLI would, and
/// speaks to it over its input and output; the call and its answer are in the trace.
#[test]
fn a_stdio_mcp_server_is_started_in_the_tasks_container_for_the_llm_agent() {
    docker_ready();
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let tasks = ws.path().join("tasks");
    let env = order_status_task(&tasks, "transport = \"stdio\"\ncommand = \"python3\"\nargs = [\"/srv/server.py\"]\n");
    crate::environments::copy_dir(&mcp_site(), &env.join("site"));
    std::fs::write(
        env.join("server.py"),
        "from mcp.server.fastmcp import FastMCP\nmcp = FastMCP(\"orders\")\n\n@mcp.tool()\ndef order_status(order_id: str) -> str:\n    \"\"\"The status of an order.\"\"\"\n    return f\"order {order_id}: shipped\"\n\nmcp.run(transport=\"stdio\")\n",
    )
    .unwrap();
    let dockerfile = std::fs::read_to_string(env.join("Dockerfile")).unwrap()
        + "COPY site /opt/mcp\nCOPY server.py /srv/server.py\nENV PYTHONPATH=/opt/mcp\n";
    std::fs::write(env.join("Dockerfile"), dockerfile).unwrap();
    ws.write("secrets.env", "OPENAI_API_KEY=sk-upstream-test-0000000000000000\n");
    let cfg = ws.write(
        "stdio.yaml",
        &format!(
            "name: mcp-stdio\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: llm\n  model: openai:mock-model\n  base_url: {}\n  secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}\n  tools: []\n\
             environment:\n  kind: docker\n  base_image: {BASE}\nbackend:\n  secrets_file: secrets.env\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\n",
            tasks.display(),
            mock.base_url()
        ),
    );
    mcp_order_passes(&ws, &cfg, &[], "llm");
}

/// The task `order-status` under `tasks`, whose MCP server `orders` is `server` (the rest of
/// its `[[environment.mcp_servers]]` table): find order 8812's status with the server's tool.
/// Its environment folder, for the server's files.
fn order_status_task(tasks: &Path, server: &str) -> std::path::PathBuf {
    let dir = tasks.join("order-status");
    copy_dir(&repo().join("configs/harbor-mini/hello-file"), &dir);
    std::fs::write(dir.join("instruction.md"), "Find the status of order 8812 with the orders tool. MCP_ORDER\n")
        .unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("version = \"1.0\"\n[agent]\ntimeout_sec = 240\n[environment]\nmemory_mb = 2048\n[[environment.mcp_servers]]\nname = \"orders\"\n{server}"),
    )
    .unwrap();
    std::fs::write(dir.join("tests/test.sh"), "#!/bin/bash\nmkdir -p /logs/verifier\ngrep -q 'order 8812: shipped' /app/answer.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n").unwrap();
    dir.join("environment")
}

/// `who` on the MCP task: passed, the call and its answer in the trace, the key nowhere.
fn mcp_order_passes(ws: &Workspace, cfg: &Path, args: &[&str], preset: &str) {
    let (v, code, out) = ws.submit(cfg, args);
    let bundle = ws.runs().join(v["run_id"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
    let r = read_json(&bundle.join("tasks/order-status/result.json"));
    let t = trace(&bundle, "order-status");
    assert_eq!((code, r["passed"].as_bool()), (0, Some(true)), "{preset}: {r}\n{t:?}\n{}", text(&out.stderr));
    assert!(r["suspect"].is_null(), "{preset}: a server of the task's is not the agent's doing: {r}");
    let call = t.iter().find(|e| {
        e["kind"] == "agent.tool_call" && e["payload"]["tool"].as_str().unwrap_or("").ends_with("order_status")
    });
    let call = call.unwrap_or_else(|| panic!("{preset}: the MCP call is in the trace: {t:?}"));
    assert_eq!(call["payload"]["arguments"]["order_id"], "8812", "{call}");
    let results: Vec<String> =
        t.iter().filter(|e| e["kind"] == "agent.tool_result").map(|e| e["payload"]["output"].to_string()).collect();
    assert!(results.iter().any(|r| r.contains("order 8812: shipped")), "its answer is in the trace: {results:?}");
    assert!(results.iter().any(|r| r.contains("found: 0")), "the agent found the key nowhere: {results:?}");
    // The key (and any part of it) is in no file of the run.
    for entry in walk(&bundle) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains("7f3a9c1e"), "{} holds the key", entry.display());
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}
