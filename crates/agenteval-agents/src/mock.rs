//! The `mock` agent: deterministic behaviour scripted per task (latency, tokens, cost, tool
//! calls, failures), for trying agenteval and measuring its overhead.

use std::time::Duration;

use agenteval_core::config::MockConfig;
use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::{AgentContext, AgentEvent, AgentOutcome, AgentRunner, EventSink};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Clone)]
pub struct MockAgent {
    defaults: MockConfig,
    model: String,
}

/// A task's script, from `metadata.mock`; missing fields come from the agent's config.
#[derive(Debug, Default, Deserialize)]
struct Script {
    answer: Option<serde_json::Value>,
    latency_ms: Option<u64>,
    tokens: Option<u64>,
    cost_usd: Option<f64>,
    #[serde(default)]
    tool_calls: Vec<String>,
    fail: Option<String>,
    #[serde(default)]
    runaway: bool,
}

impl MockAgent {
    pub fn new(defaults: MockConfig, model: Option<String>) -> Self {
        MockAgent { defaults, model: model.unwrap_or_else(|| "mock-1".into()) }
    }
}

fn tokens_event(kind: EventKind, payload: serde_json::Value, tokens: u64, cost: f64) -> AgentEvent {
    AgentEvent {
        kind: Some(kind),
        payload,
        cost_usd: cost,
        input_tokens: tokens / 2,
        output_tokens: tokens - tokens / 2,
    }
}

#[async_trait]
impl AgentRunner for MockAgent {
    fn name(&self) -> &str {
        "mock"
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        let script: Script =
            ctx.task.metadata.get("mock").and_then(|m| serde_json::from_value(m.clone()).ok()).unwrap_or_default();
        let tokens = script.tokens.unwrap_or(self.defaults.tokens);
        let cost = script.cost_usd.unwrap_or(self.defaults.cost_usd);
        let latency = script.latency_ms.unwrap_or(self.defaults.latency_ms);
        let steps = 2 + 2 * script.tool_calls.len() as u64;
        let (tok_step, cost_step) = (tokens / steps, cost / steps as f64);

        let mut outcome = AgentOutcome::default();
        let plan = json!({"model": self.model, "plan": "answer the question"});
        if let Err(stop) = sink.emit(tokens_event(EventKind::AgentPlan, plan, tok_step, cost_step)).await {
            outcome.error = Some((stop.terminated_by, stop.reason));
            return outcome;
        }
        for tool in &script.tool_calls {
            let call = json!({"tool": tool, "arguments": ctx.task.input});
            let result = json!({"tool": tool, "output": "ok"});
            for (kind, payload) in [(EventKind::AgentToolCall, call), (EventKind::AgentToolResult, result)] {
                if let Err(stop) = sink.emit(tokens_event(kind, payload, tok_step, cost_step)).await {
                    outcome.error = Some((stop.terminated_by, stop.reason));
                    return outcome;
                }
            }
        }
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        if script.runaway {
            // Spends until the runner's limits stop it; stops itself at a million tokens so a
            // run without limits still ends.
            for i in 0..2_000u64 {
                let ev = tokens_event(EventKind::CostTick, json!({"iteration": i}), 500, 0.0005);
                if let Err(stop) = sink.emit(ev).await {
                    outcome.error = Some((stop.terminated_by, stop.reason));
                    return outcome;
                }
            }
            outcome.error = Some((TerminatedBy::AgentError, "runaway mock spent a million tokens".into()));
            return outcome;
        }
        if let Some(msg) = script.fail {
            outcome.error = Some((TerminatedBy::AgentError, msg));
            return outcome;
        }
        let answer = script.answer.or_else(|| ctx.task.expected.clone()).unwrap_or_else(|| ctx.task.input.clone());
        let final_ev = tokens_event(EventKind::AgentFinalAnswer, json!({"answer": answer}), tok_step, cost_step);
        if let Err(stop) = sink.emit(final_ev).await {
            outcome.error = Some((stop.terminated_by, stop.reason));
            return outcome;
        }
        let last = tokens - tok_step * (steps - 1);
        let terminal = tokens_event(
            EventKind::AgentTerminal,
            json!({"final_answer": answer}),
            last,
            cost - cost_step * (steps - 1) as f64,
        );
        if let Err(stop) = sink.emit(terminal).await {
            outcome.error = Some((stop.terminated_by, stop.reason));
            return outcome;
        }
        outcome.final_answer = Some(answer);
        outcome
    }
}
