//! A task attempt's trace as an ATIF document (Harbor's Agent Trajectory Interchange Format,
//! v1.8, as `harbor.models.trajectories` defines it): the instruction as the user's step, each
//! model call the gateway metered as an agent step with its tokens and cost, the agent's text,
//! tool calls and their results, and what ATIF has no field for kept under `extra`.

use std::collections::BTreeMap;

use agenteval_core::model::{EventKind, TaskResult, TraceEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The version written.
pub const SCHEMA_VERSION: &str = "ATIF-v1.8";

/// `Trajectory`: every field ATIF defines that agenteval fills; unknown ones refused on read,
/// as Harbor's models refuse them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trajectory {
    pub schema_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory_id: Option<String>,
    pub agent: Agent,
    pub steps: Vec<Step>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_metrics: Option<FinalMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_trajectory_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_trajectories: Option<Vec<Trajectory>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    pub name: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_definitions: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub step_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// `system`, `user` or `agent`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<Value>,
    /// Text, or (multimodal) content parts.
    pub message: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_copied_context: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_call_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub tool_call_id: String,
    pub function_name: String,
    pub arguments: serde_json::Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub results: Vec<ObservationResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_trajectory_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// The agent a trajectory is of.
#[derive(Debug, Clone)]
pub struct AgentInfo {
    /// Its kind or preset (`llm`, `claude-code`, `command`).
    pub name: String,
    /// The preset's pinned version, else agenteval's.
    pub version: String,
    pub model: Option<String>,
}

/// One task attempt, as the bundle holds it.
pub struct Attempt<'a> {
    pub run_id: &'a str,
    pub task_id: &'a str,
    /// What the agent was asked (the task's input as text).
    pub instruction: String,
    pub agent: AgentInfo,
    pub events: &'a [TraceEvent],
    pub result: Option<&'a TaskResult>,
}

/// A trajectory and what of the trace it could not hold.
#[derive(Debug)]
pub struct Exported {
    pub trajectory: Trajectory,
    /// Events ATIF has no step for, by kind, each kept under the document's `extra`
    /// (`grading` for scores and verdicts).
    pub kept_in_extra: BTreeMap<String, usize>,
    /// Model calls and tool calls written as steps.
    pub model_calls: usize,
    pub tool_calls: usize,
    /// The agent left no step in its trace: the document holds the instruction and says so.
    pub no_trace: bool,
}

/// The document for one attempt.
pub fn trajectory(a: &Attempt<'_>) -> Exported {
    let mut b = Builder::default();
    b.steps.push(Step {
        step_id: 1,
        timestamp: a.result.map(|r| r.started_at.to_rfc3339()),
        source: "user".into(),
        message: Value::String(a.instruction.clone()),
        ..empty_step()
    });
    let mut grading = Vec::new();
    let mut terminal = Value::Null;
    for e in a.events {
        b.event(e, &mut grading, &mut terminal);
    }
    let no_trace = b.steps.len() == 1;
    let totals = b.totals();
    let mut extra = serde_json::Map::new();
    extra.insert("producer".into(), json!("agenteval"));
    extra.insert("run_id".into(), json!(a.run_id));
    extra.insert("task_id".into(), json!(a.task_id));
    extra.insert(
        "metrics_source".into(),
        json!("tokens and cost of each step are the model gateway's, read from the provider's answers; the agent's own report is under agent_reported_usage"),
    );
    if !grading.is_empty() {
        extra.insert("grading".into(), Value::Array(grading));
    }
    if let Some(t) = terminal.as_object() {
        if let Some(u) = t.get("agent_reported_usage") {
            extra.insert("agent_reported_usage".into(), u.clone());
        }
        if let Some(by) = t.get("terminated_by") {
            extra.insert("terminated_by".into(), by.clone());
        }
    }
    if let Some(r) = a.result {
        extra.insert("passed".into(), json!(r.passed));
        extra.insert("outcome".into(), json!(r.outcome().as_str()));
        extra.insert("terminated_by".into(), json!(r.agent.terminated_by.as_str()));
        if let Some(rw) = &r.rewards {
            extra.insert("rewards".into(), json!(rw));
        }
        if !r.tampered.is_empty() {
            extra.insert("tampered".into(), json!(r.tampered));
        }
        if !r.suspect.is_empty() {
            extra.insert("suspect".into(), json!(r.suspect));
        }
        extra.insert("wall_seconds".into(), json!(r.agent.wall_seconds));
    }
    let notes = no_trace.then(|| {
        "the agent left no trace in agenteval's bundle (it reports no steps and made no model call through the gateway): this document holds only the instruction".to_string()
    });
    let model = a.agent.model.clone().or_else(|| b.first_model.clone());
    Exported {
        trajectory: Trajectory {
            schema_version: SCHEMA_VERSION.into(),
            session_id: Some(a.run_id.to_string()),
            trajectory_id: Some(format!("{}/{}", a.run_id, a.task_id)),
            agent: Agent {
                name: a.agent.name.clone(),
                version: a.agent.version.clone(),
                model_name: model,
                tool_definitions: None,
                extra: None,
            },
            final_metrics: Some(FinalMetrics { total_steps: Some(b.steps.len() as u64), ..totals }),
            steps: b.steps,
            notes,
            continued_trajectory_ref: None,
            extra: Some(Value::Object(extra)),
            subagent_trajectories: None,
        },
        kept_in_extra: b.kept,
        model_calls: b.model_calls,
        tool_calls: b.tool_calls,
        no_trace,
    }
}

fn empty_step() -> Step {
    Step {
        step_id: 0,
        timestamp: None,
        source: "agent".into(),
        model_name: None,
        reasoning_effort: None,
        message: Value::String(String::new()),
        reasoning_content: None,
        tool_calls: None,
        observation: None,
        metrics: None,
        is_copied_context: None,
        llm_call_count: None,
        extra: None,
    }
}

/// A payload value as text: a string as it is, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

#[derive(Default)]
struct Builder {
    steps: Vec<Step>,
    kept: BTreeMap<String, usize>,
    model_calls: usize,
    tool_calls: usize,
    first_model: Option<String>,
    /// Tool call ids seen, to name results whose call is in an earlier step.
    generated: u32,
}

impl Builder {
    fn open(&mut self, e: &TraceEvent) -> &mut Step {
        let id = self.steps.len() as u32 + 1;
        self.steps.push(Step { step_id: id, timestamp: Some(e.timestamp.to_rfc3339()), ..empty_step() });
        self.steps.last_mut().expect("just pushed")
    }

    /// The last agent step, when what comes next still belongs to it (no results yet).
    fn current(&mut self) -> Option<&mut Step> {
        self.steps.last_mut().filter(|s| s.source == "agent" && s.observation.is_none())
    }

    /// One event of the trace into its step (or, for what ATIF has no step for, `extra`).
    fn event(&mut self, e: &TraceEvent, grading: &mut Vec<Value>, terminal: &mut Value) {
        match e.kind {
            // The simulated user's calls are the user's, not the agent's: ATIF's steps and
            // metrics are the agent's, so they are kept under `extra`.
            EventKind::ModelCall if e.payload["role"] == "user" => {
                *self.kept.entry("model.call (user)".to_string()).or_default() += 1;
            }
            EventKind::CostTick | EventKind::ModelCall => self.model_call(e),
            EventKind::AgentMessage => self.text(e, text(&e.payload["text"])),
            EventKind::UserMessage => {
                let step = self.open(e);
                step.source = "user".into();
                step.message = Value::String(text(&e.payload["text"]));
            }
            EventKind::AgentPlan => self.text(e, text(&e.payload["plan"])),
            EventKind::AgentFinalAnswer => self.text(e, text(&e.payload["answer"])),
            EventKind::AgentToolCall => self.tool_call(e),
            EventKind::AgentToolResult => self.tool_result(e),
            EventKind::AgentObservation => self.observation(e),
            EventKind::AgentTerminal => *terminal = e.payload.clone(),
            EventKind::EvaluatorScore | EventKind::PolicyVerdict => {
                *self.kept.entry(e.kind.as_str().to_string()).or_default() += 1;
                grading.push(
                    json!({"kind": e.kind.as_str(), "timestamp": e.timestamp.to_rfc3339(), "payload": e.payload}),
                );
            }
        }
    }

    fn model_call(&mut self, e: &TraceEvent) {
        let p = &e.payload;
        self.model_calls += 1;
        let model = p["model"].as_str().map(str::to_string);
        if self.first_model.is_none() {
            self.first_model.clone_from(&model);
        }
        let metered = p.get("wire").is_some();
        let cost = if p["cost_unknown"] == true || (p.get("cost_usd").is_some_and(Value::is_null) && e.cost_usd == 0.0)
        {
            None
        } else {
            Some(e.cost_usd)
        };
        let mut extra = serde_json::Map::new();
        extra.insert("measured_by".into(), json!(if metered { "gateway" } else { "agent" }));
        for k in [
            "wire",
            "status",
            "latency_ms",
            "ttfb_ms",
            "stream",
            "finish_reason",
            "stop_reason",
            "refused",
            "at_cap",
            "replayed",
            "call",
        ] {
            if let Some(v) = p.get(k).filter(|v| !v.is_null()) {
                extra.insert(k.into(), v.clone());
            }
        }
        if cost.is_none() {
            extra.insert("cost_unknown".into(), json!(true));
        }
        let answer = text(&p["answer"]);
        let step = self.open(e);
        step.model_name = model;
        step.llm_call_count = Some(1);
        step.message = Value::String(answer);
        step.metrics = Some(Metrics {
            prompt_tokens: Some(e.input_tokens),
            completion_tokens: Some(e.output_tokens),
            cached_tokens: p["cached_input_tokens"].as_u64(),
            cost_usd: cost,
            extra: Some(Value::Object(extra)),
            ..Metrics::default()
        });
    }

    /// Text the agent wrote: the current step's message when it has none yet, else a step.
    fn text(&mut self, e: &TraceEvent, said: String) {
        if said.is_empty() {
            return;
        }
        if let Some(s) = self.current()
            && s.tool_calls.is_none()
            && s.message.as_str().is_some_and(str::is_empty)
        {
            s.message = Value::String(said);
            return;
        }
        let step = self.open(e);
        step.message = Value::String(said);
    }

    fn tool_call(&mut self, e: &TraceEvent) {
        let p = &e.payload;
        self.tool_calls += 1;
        let id = match p["call_id"].as_str().filter(|s| !s.is_empty()) {
            Some(id) => id.to_string(),
            None => {
                self.generated += 1;
                format!("agenteval-call-{}", self.generated)
            }
        };
        let arguments = match &p["arguments"] {
            Value::Object(m) => m.clone(),
            Value::Null => serde_json::Map::new(),
            other => {
                let mut m = serde_json::Map::new();
                m.insert("input".into(), other.clone());
                m
            }
        };
        let call = ToolCall { tool_call_id: id, function_name: text(&p["tool"]), arguments, extra: None };
        let step = match self.current() {
            Some(s) => s,
            None => self.open(e),
        };
        step.tool_calls.get_or_insert_with(Vec::new).push(call);
    }

    fn tool_result(&mut self, e: &TraceEvent) {
        let p = &e.payload;
        let id = p["call_id"].as_str().map(str::to_string);
        let mut extra = serde_json::Map::new();
        if p["is_error"] == true {
            extra.insert("is_error".into(), json!(true));
        }
        if let Some(t) = p["tool"].as_str() {
            extra.insert("tool".into(), json!(t));
        }
        let result = |source_call_id, extra| ObservationResult {
            source_call_id,
            content: Some(Value::String(text(&p["output"]))),
            subagent_trajectory_ref: None,
            extra: Some(Value::Object(extra)),
        };
        // The step whose call it answers, when that is the last agent step.
        if let Some(last) = self.steps.last_mut()
            && last.source == "agent"
            && last.tool_calls.as_ref().is_some_and(|c| c.iter().any(|c| Some(&c.tool_call_id) == id.as_ref()))
        {
            last.observation.get_or_insert_with(|| Observation { results: vec![] }).results.push(result(id, extra));
            return;
        }
        // A result whose call is not in the last step (or has no id): its own step, the call
        // named in `extra`, since ATIF ties a result's id to its own step's calls only.
        if let Some(id) = &id {
            extra.insert("call_id".into(), json!(id));
        }
        let step = self.open(e);
        step.observation = Some(Observation { results: vec![result(None, extra)] });
    }

    fn observation(&mut self, e: &TraceEvent) {
        let content = e.payload.get("observation").unwrap_or(&e.payload);
        let r = ObservationResult {
            source_call_id: None,
            content: Some(Value::String(text(content))),
            subagent_trajectory_ref: None,
            extra: None,
        };
        match self.steps.last_mut().filter(|s| s.source == "agent") {
            Some(s) => s.observation.get_or_insert_with(|| Observation { results: vec![] }).results.push(r),
            None => {
                let step = self.open(e);
                step.source = "system".into();
                step.observation = Some(Observation { results: vec![r] });
            }
        }
    }

    fn totals(&self) -> FinalMetrics {
        let metrics: Vec<&Metrics> = self.steps.iter().filter_map(|s| s.metrics.as_ref()).collect();
        if metrics.is_empty() {
            return FinalMetrics::default();
        }
        let sum = |f: fn(&Metrics) -> Option<u64>| Some(metrics.iter().filter_map(|m| f(m)).sum());
        // One unpriced call makes the total unknown, never a smaller number.
        let cost = metrics.iter().map(|m| m.cost_usd).sum::<Option<f64>>();
        FinalMetrics {
            total_prompt_tokens: sum(|m| m.prompt_tokens),
            total_completion_tokens: sum(|m| m.completion_tokens),
            total_cached_tokens: sum(|m| m.cached_tokens),
            total_cost_usd: cost,
            total_steps: None,
            extra: None,
        }
    }
}

/// Checks ATIF's own rules on a document (step ids from 1 in order, agent-only fields on agent
/// steps, results naming calls of their own step): what Harbor's models refuse.
pub fn check(t: &Trajectory) -> Vec<String> {
    let mut problems = Vec::new();
    if t.steps.is_empty() {
        problems.push("steps: at least one step is required".into());
    }
    for (i, s) in t.steps.iter().enumerate() {
        if s.step_id as usize != i + 1 {
            problems.push(format!("steps[{i}].step_id: expected {}, got {}", i + 1, s.step_id));
        }
        if !["system", "user", "agent"].contains(&s.source.as_str()) {
            problems.push(format!("steps[{i}].source: {:?} is not system, user or agent", s.source));
        }
        if s.source != "agent"
            && (s.model_name.is_some()
                || s.tool_calls.is_some()
                || s.metrics.is_some()
                || s.reasoning_content.is_some())
        {
            problems.push(format!("steps[{i}]: agent-only fields on a {} step", s.source));
        }
        let ids: Vec<&str> = s.tool_calls.iter().flatten().map(|c| c.tool_call_id.as_str()).collect();
        for r in s.observation.iter().flat_map(|o| &o.results) {
            if let Some(id) = &r.source_call_id
                && !ids.contains(&id.as_str())
            {
                problems.push(format!("steps[{i}]: a result names call {id:?}, not one of the step's calls"));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::{RunId, TaskId};

    fn ev(step: u32, kind: EventKind, payload: Value, tokens: (u64, u64), cost: f64) -> TraceEvent {
        TraceEvent {
            run_id: RunId::new(),
            task_id: TaskId::try_from("t".to_string()).unwrap(),
            step,
            attempt: 1,
            timestamp: chrono::Utc::now(),
            kind,
            payload,
            cost_usd: cost,
            input_tokens: tokens.0,
            output_tokens: tokens.1,
        }
    }

    fn attempt(events: &[TraceEvent]) -> Exported {
        trajectory(&Attempt {
            run_id: "r",
            task_id: "t",
            instruction: "do it".into(),
            agent: AgentInfo { name: "llm".into(), version: "0.1.0".into(), model: None },
            events,
            result: None,
        })
    }

    #[test]
    fn the_llm_agents_calls_tools_and_answer_become_steps_with_the_gateways_metrics() {
        let events = [
            ev(
                0,
                EventKind::CostTick,
                json!({"model": "m", "wire": "openai.chat", "cached_input_tokens": 2}),
                (10, 5),
                0.5,
            ),
            ev(
                1,
                EventKind::AgentToolCall,
                json!({"tool": "python", "arguments": {"code": "1"}, "call_id": "c1"}),
                (0, 0),
                0.0,
            ),
            ev(2, EventKind::AgentToolResult, json!({"tool": "python", "output": "1\n", "call_id": "c1"}), (0, 0), 0.0),
            ev(3, EventKind::CostTick, json!({"model": "m", "wire": "openai.chat"}), (7, 3), 0.25),
            ev(4, EventKind::AgentFinalAnswer, json!({"answer": "done"}), (0, 0), 0.0),
            ev(5, EventKind::AgentTerminal, json!({"agent_reported_usage": {"input_tokens": 99}}), (0, 0), 0.0),
            ev(6, EventKind::EvaluatorScore, json!({"evaluator_id": "x", "passed": true}), (0, 0), 0.0),
        ];
        let x = attempt(&events);
        let t = &x.trajectory;
        assert_eq!(check(t), Vec::<String>::new());
        assert_eq!(t.steps.len(), 3, "{t:#?}");
        assert_eq!(t.steps[1].tool_calls.as_ref().unwrap()[0].function_name, "python");
        assert_eq!(t.steps[1].observation.as_ref().unwrap().results[0].source_call_id.as_deref(), Some("c1"));
        assert_eq!(t.steps[1].metrics.as_ref().unwrap().prompt_tokens, Some(10));
        assert_eq!(t.steps[2].message, "done");
        let f = t.final_metrics.as_ref().unwrap();
        assert_eq!(
            (f.total_prompt_tokens, f.total_completion_tokens, f.total_cost_usd),
            (Some(17), Some(8), Some(0.75))
        );
        assert_eq!(t.extra.as_ref().unwrap()["agent_reported_usage"]["input_tokens"], 99);
        assert_eq!(x.kept_in_extra.get("evaluator.score"), Some(&1));
        assert_eq!((x.model_calls, x.tool_calls), (2, 1));
    }

    #[test]
    fn an_unpriced_call_makes_the_total_unknown_and_a_stray_result_is_its_own_step() {
        let events = [
            ev(
                0,
                EventKind::ModelCall,
                json!({"model": "m", "wire": "anthropic.messages", "cost_usd": null, "status": 200}),
                (1, 1),
                0.0,
            ),
            ev(1, EventKind::AgentToolResult, json!({"tool": "bash", "output": "x", "call_id": "gone"}), (0, 0), 0.0),
        ];
        let t = attempt(&events).trajectory;
        assert_eq!(check(&t), Vec::<String>::new());
        assert_eq!(t.final_metrics.unwrap().total_cost_usd, None);
        assert_eq!(t.steps[1].metrics.as_ref().unwrap().extra.as_ref().unwrap()["cost_unknown"], true);
        assert_eq!(t.steps[2].observation.as_ref().unwrap().results[0].extra.as_ref().unwrap()["call_id"], "gone");
    }

    #[test]
    fn no_trace_is_said_not_invented() {
        let x = attempt(&[]);
        assert!(x.no_trace);
        assert_eq!(x.trajectory.steps.len(), 1);
        assert!(x.trajectory.notes.as_deref().unwrap().contains("no trace"));
        let back: Trajectory = serde_json::from_value(serde_json::to_value(&x.trajectory).unwrap()).unwrap();
        assert_eq!(back, x.trajectory);
    }
}
