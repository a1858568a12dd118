//! The built-in `llm` agent: a tool-use loop. Each model call becomes a `cost.tick` event (its
//! tokens and cost, or `cost_unknown`); tool calls and results, the plan and the final answer
//! become the usual trace events. The runner's limits (tokens, cost, time, trace) stop it through
//! the sink; `max_turns` stops it here with `limit_turns`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agenteval_core::config::{DEFAULT_TURNS, LlmAgentConfig};
use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::secret::Redactor;
use agenteval_core::traits::{
    AgentContext, AgentEvent, AgentNeeds, AgentOutcome, AgentRunner, AgentTool, EventSink, Stop,
};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::LlmError;
use crate::cassette::{CASSETTE_FILE, CassetteMode, Cassettes, TaskCalls};
use crate::client::{LlmClient, RetryPolicy};
use crate::pricing::{Price, PriceTable, cost};
use crate::spec::ModelSpec;
use crate::types::{ChatRequest, Message};

/// Longest tool output sent back to the model (and kept in the trace), in characters.
const TOOL_OUTPUT_CHARS: usize = 16_000;

pub struct LlmAgent {
    config: LlmAgentConfig,
    spec: ModelSpec,
    price: Option<Price>,
    builtin: Vec<Arc<dyn AgentTool>>,
    cassettes: Option<Cassettes>,
    redactor: Redactor,
    client: OnceLock<Result<LlmClient, String>>,
    /// The client of the worker's gateway, built once (a task's differs only by its token).
    gateway: OnceLock<Result<LlmClient, String>>,
}

impl LlmAgent {
    /// An agent for `config`, with the built-in tools it asked for already built (the engine
    /// owns them), calls recorded or replayed per `cassettes`, and text redacted by `redactor`.
    pub fn new(
        config: LlmAgentConfig,
        builtin: Vec<Arc<dyn AgentTool>>,
        cassettes: Option<Cassettes>,
        redactor: Redactor,
    ) -> Result<Self, LlmError> {
        let spec = ModelSpec::parse(&config.model)?;
        let mut table = PriceTable::packaged();
        table.extend(config.prices.clone());
        let price = config.endpoint.price.or_else(|| table.lookup(&spec.name));
        Ok(LlmAgent {
            config,
            spec,
            price,
            builtin,
            cassettes,
            redactor,
            client: OnceLock::new(),
            gateway: OnceLock::new(),
        })
    }

    /// The client, built on first use from the key among the task's secrets. A strict replay
    /// never builds one: live calls are disabled.
    fn client(&self, ctx: &AgentContext<'_>) -> Result<Option<&LlmClient>, String> {
        if self.cassettes.as_ref().is_some_and(|c| c.mode == CassetteMode::Replay) {
            return Ok(None);
        }
        let built = self.client.get_or_init(|| {
            let var = self.spec.provider.key_var();
            let key = ctx.secrets.iter().find(|(v, _)| v == var).map(|(_, s)| s);
            let e = &self.config.endpoint;
            let retry = RetryPolicy { max_attempts: e.max_attempts.unwrap_or(5).max(1), ..RetryPolicy::default() };
            let timeout = Duration::from_secs_f64(e.request_timeout_seconds.unwrap_or(120.0));
            let client = LlmClient::new(self.spec.clone(), e.base_url.as_deref(), key, timeout, retry);
            client.inspect(|c| c.say_transport("the llm agent")).map_err(|e| e.to_string())
        });
        built.as_ref().map(Some).map_err(Clone::clone)
    }
}

impl LlmAgent {
    /// A client of the gateway's door: its base URL for this provider's wire, the task's token
    /// as the key, this agent's timeout and retries; its connections shared by every task.
    fn gateway_client(&self, g: &agenteval_core::traits::GatewayAccess) -> Result<LlmClient, LlmError> {
        let base = match self.spec.provider {
            crate::Provider::Anthropic => format!("{}/v1", g.host.1),
            crate::Provider::OpenAi | crate::Provider::OpenAiCompatible => g.host.0.clone(),
        };
        let shared = self.gateway.get_or_init(|| {
            let e = &self.config.endpoint;
            let retry = RetryPolicy { max_attempts: e.max_attempts.unwrap_or(5).max(1), ..RetryPolicy::default() };
            let timeout = Duration::from_secs_f64(e.request_timeout_seconds.unwrap_or(120.0));
            LlmClient::new(self.spec.clone(), Some(&base), Some(&g.token), timeout, retry).map_err(|e| e.to_string())
        });
        let shared = shared.as_ref().map_err(|e| LlmError::Config(e.clone()))?;
        // One gateway per worker, at one address: a client for another would be a bug.
        if !shared.url().starts_with(&base) {
            return Err(LlmError::Config(format!("the gateway moved: {} is not under {base}", shared.url())));
        }
        let client = shared.with_key(&g.token)?;
        // In this process, the gateway is called without a connection: the same door.
        Ok(match &g.local {
            Some(local) => client.through(local.clone()),
            None => client,
        })
    }
}

/// The user turn a task starts with: its input if it is text, its `prompt` field if it has one,
/// else its JSON.
fn task_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("prompt") {
            Some(Value::String(p)) => p.clone(),
            _ => input.to_string(),
        },
        other => other.to_string(),
    }
}

fn clip(s: String) -> String {
    if s.chars().count() <= TOOL_OUTPUT_CHARS {
        return s;
    }
    let mut out: String = s.chars().take(TOOL_OUTPUT_CHARS).collect();
    out.push_str("\n[output cut]");
    out
}

#[async_trait]
impl AgentRunner for LlmAgent {
    fn name(&self) -> &str {
        "llm"
    }

    fn needs(&self) -> AgentNeeds {
        AgentNeeds {
            calls_in_process: true,
            system_prompt: self.config.system.clone(),
            takes_mcp_servers: true,
            ..AgentNeeds::default()
        }
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        let fail = |t: TerminatedBy, m: String| AgentOutcome::stopped(t, m);
        if let Some(g) = ctx.gateway {
            // Through the worker's model gateway, which holds the key, meters, budgets, records
            // and replays every call: this agent's client speaks to it with its task's token.
            let client = match self.gateway_client(g) {
                Ok(c) => c,
                Err(e) => return fail(TerminatedBy::AgentError, e.to_string()),
            };
            let mut calls = TaskCalls::live(ctx.task.id.as_str(), self.redactor.clone());
            return self.converse(ctx, sink, Some(&client), &mut calls).await;
        }
        let client = match self.client(ctx) {
            Ok(c) => c,
            Err(e) => return fail(TerminatedBy::AgentError, e),
        };
        let mut calls = match TaskCalls::open(ctx.task.id.as_str(), self.cassettes.as_ref(), self.redactor.clone()) {
            Ok(c) => c,
            Err(e @ LlmError::ReplayMiss(_)) => return fail(TerminatedBy::ReplayMiss, e.to_string()),
            Err(e) => return fail(TerminatedBy::AgentError, e.to_string()),
        };
        let outcome = self.converse(ctx, sink, client, &mut calls).await;
        sink.attach(CASSETTE_FILE, calls.to_jsonl()).await;
        outcome
    }
}

/// The agent says `said` to the simulated user (`opening`: its first line) and hears its reply:
/// `Some(reply)` to go on, `None` when the conversation ended (the user ended it, or the agent
/// said τ²'s `###STOP###`), with the final answer written.
async fn converse_turn(
    sink: &mut dyn EventSink,
    user: &dyn agenteval_core::traits::SimulatedUser,
    said: &str,
    opening: bool,
) -> Result<Option<String>, Stop> {
    let mut ev = json!({"text": said});
    if opening {
        ev["opening"] = json!(true);
    }
    sink.emit(AgentEvent::new(EventKind::AgentMessage, ev)).await?;
    let end = async |sink: &mut dyn EventSink| -> Result<Option<String>, Stop> {
        let answer = Value::String(said.to_string());
        sink.emit(AgentEvent::new(EventKind::AgentFinalAnswer, json!({"answer": answer}))).await?;
        sink.emit(AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": answer}))).await?;
        Ok(None)
    };
    if said.contains(AGENT_STOP) {
        return end(sink).await;
    }
    let turn = user.reply(said).await?;
    sink.emit(AgentEvent::new(EventKind::UserMessage, turn.event_payload())).await?;
    if turn.ends {
        return end(sink).await;
    }
    Ok(Some(turn.text))
}

/// The conversation's start: the agent's opening line and the user's first turn, or how it
/// ended there.
async fn open_conversation(
    sink: &mut dyn EventSink,
    user: &dyn agenteval_core::traits::SimulatedUser,
) -> Result<Vec<Message>, AgentOutcome> {
    let opening = user.opening().to_string();
    let mut messages = told_to_the_agent(user.history());
    messages.push(Message::Assistant { text: Some(opening.clone()), tool_calls: Vec::new() });
    match converse_turn(sink, user, &opening, true).await {
        Ok(Some(reply)) => messages.push(Message::User { text: reply }),
        Ok(None) => return Err(AgentOutcome::answer(Value::String(opening))),
        Err(s) => return Err(AgentOutcome::stopped(s.terminated_by, s.reason)),
    }
    Ok(messages)
}

/// The conversation a task starts from as the agent said and heard it: its own lines and tool
/// calls, the tools' answers, the user's lines.
pub(crate) fn told_to_the_agent(history: &[agenteval_core::traits::PriorMessage]) -> Vec<Message> {
    use agenteval_core::traits::PriorMessage as P;
    history
        .iter()
        .map(|m| match m {
            P::User { text } => Message::User { text: text.clone() },
            P::Agent { text, tool_calls } => Message::Assistant {
                text: text.clone(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| crate::types::ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            },
            P::Tool { call_id, name, content, error } => Message::Tool {
                call_id: call_id.clone(),
                name: name.clone(),
                content: content.clone(),
                is_error: *error,
            },
        })
        .collect()
}

/// The agent said `said` to the user: `None` to go on (both lines added to `messages`), else how
/// the conversation ended.
async fn answer_user(
    sink: &mut dyn EventSink,
    user: &dyn agenteval_core::traits::SimulatedUser,
    said: String,
    messages: &mut Vec<Message>,
) -> Option<AgentOutcome> {
    match converse_turn(sink, user, &said, false).await {
        Ok(Some(reply)) => {
            messages.push(Message::Assistant { text: Some(said), tool_calls: Vec::new() });
            messages.push(Message::User { text: reply });
            None
        }
        Ok(None) => Some(AgentOutcome::answer(Value::String(said))),
        Err(s) => Some(AgentOutcome::stopped(s.terminated_by, s.reason)),
    }
}

/// Runs one tool call of the model's, traced (the call, then its result) and answered in
/// `messages`.
async fn call_tool(
    sink: &mut dyn EventSink,
    tools: &[Arc<dyn AgentTool>],
    env: &agenteval_core::traits::TaskEnvironment,
    call: crate::types::ToolCall,
    turn: u32,
    messages: &mut Vec<Message>,
) -> Result<(), Stop> {
    let ev = json!({"tool": call.name, "arguments": call.arguments, "call_id": call.id, "turn": turn + 1});
    sink.emit(AgentEvent::new(EventKind::AgentToolCall, ev)).await?;
    let result = match tools.iter().find(|t| t.spec().name == call.name) {
        Some(t) => t.call(&call.arguments, env).await,
        None => Err(format!("there is no tool named `{}`", call.name)),
    };
    let is_error = result.is_err();
    let content = clip(result.unwrap_or_else(|e| e));
    let ev = json!({"tool": call.name, "output": content, "is_error": is_error, "call_id": call.id});
    sink.emit(AgentEvent::new(EventKind::AgentToolResult, ev)).await?;
    messages.push(Message::Tool { call_id: call.id, name: call.name, content, is_error });
    Ok(())
}

/// The agent's word that ends a conversation, as τ²-bench's agents say it.
const AGENT_STOP: &str = "###STOP###";

impl LlmAgent {
    /// The `cost.tick` of one answer: its tokens and cost, or `cost_unknown`.
    fn tick(&self, turn: u32, resp: &crate::types::ChatResponse) -> AgentEvent {
        let u = resp.usage;
        let dollars = self.price.map(|p| cost(&p, &u));
        let mut tick = AgentEvent::new(
            EventKind::CostTick,
            json!({
                "model": self.spec.name,
                "call": turn + 1,
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cached_input_tokens": u.cached_input_tokens,
                "cost_usd": dollars,
                "stop_reason": resp.stop_reason.clone(),
            }),
        );
        if dollars.is_none() {
            tick.payload["cost_unknown"] = json!(true);
        }
        tick.input_tokens = u.input_tokens;
        tick.output_tokens = u.output_tokens;
        tick.cost_usd = dollars.unwrap_or(0.0);
        tick
    }

    async fn converse(
        &self,
        ctx: &AgentContext<'_>,
        sink: &mut dyn EventSink,
        client: Option<&LlmClient>,
        calls: &mut TaskCalls,
    ) -> AgentOutcome {
        let stopped = |s: Stop| AgentOutcome::stopped(s.terminated_by, s.reason);
        // The task's MCP servers, connected for as long as the agent runs.
        let mcp = match crate::mcp::connect(ctx).await {
            Ok(m) => m,
            Err(e) => return AgentOutcome::stopped(TerminatedBy::InfraFailure, e),
        };
        let tools: Vec<Arc<dyn AgentTool>> =
            self.builtin.iter().chain(ctx.tools.iter()).chain(mcp.tools.iter()).cloned().collect();
        let specs = tools.iter().map(|t| t.spec()).collect::<Vec<_>>();
        let max_turns = self.config.max_turns.unwrap_or(DEFAULT_TURNS);
        let mut system = self.config.system.clone();
        let mut messages = vec![Message::User { text: task_text(&ctx.task.input) }];
        if let Some(user) = ctx.user {
            // A conversation: the agent opens, the user answers first, and the task's brief
            // (a τ² domain's policy) is the agent's system prompt after its own.
            if let Some(brief) = ctx.task.input.get("system").and_then(Value::as_str) {
                system = Some(system.map_or_else(|| brief.to_string(), |own| format!("{own}\n\n{brief}")));
            }
            messages = match open_conversation(sink, user).await {
                Ok(m) => m,
                Err(ended) => return ended,
            };
        }
        for turn in 0..max_turns {
            let req = ChatRequest {
                model: self.spec.name.clone(),
                system: system.clone(),
                messages: messages.clone(),
                tools: specs.clone(),
                temperature: self.config.temperature,
                max_output_tokens: self.config.max_output_tokens,
                response_format: None,
            };
            let resp = match calls.call(client, req).await {
                Ok(r) => r,
                Err(e) => {
                    let t = match &e {
                        LlmError::ReplayMiss(_) => TerminatedBy::ReplayMiss,
                        e if e.is_provider_outage() => TerminatedBy::InfraFailure,
                        _ => TerminatedBy::AgentError,
                    };
                    let mut stopped = AgentOutcome::stopped(t, e.to_string());
                    stopped.fault = e.fault().filter(|_| t == TerminatedBy::AgentError);
                    return stopped;
                }
            };
            let tick = self.tick(turn, &resp);
            if let Err(s) = sink.emit(tick).await {
                return stopped(s);
            }
            if resp.tool_calls.is_empty()
                && let Some(user) = ctx.user
            {
                match answer_user(sink, user, resp.text.unwrap_or_default(), &mut messages).await {
                    None => continue,
                    Some(ended) => return ended,
                }
            }
            if resp.tool_calls.is_empty() {
                let answer = Value::String(resp.text.unwrap_or_default());
                for ev in [
                    AgentEvent::new(EventKind::AgentFinalAnswer, json!({"answer": answer})),
                    AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": answer})),
                ] {
                    if let Err(s) = sink.emit(ev).await {
                        return stopped(s);
                    }
                }
                return AgentOutcome::answer(answer);
            }
            if let Some(text) = resp.text.as_deref().filter(|t| !t.trim().is_empty())
                && let Err(s) = sink.emit(AgentEvent::new(EventKind::AgentPlan, json!({"plan": text}))).await
            {
                return stopped(s);
            }
            messages.push(Message::Assistant { text: resp.text.clone(), tool_calls: resp.tool_calls.clone() });
            for call in resp.tool_calls {
                if let Err(s) = call_tool(sink, &tools, ctx.env, call, turn, &mut messages).await {
                    return stopped(s);
                }
            }
        }
        AgentOutcome::stopped(
            TerminatedBy::LimitTurns,
            format!("made {max_turns} model calls without a final answer (max_turns)"),
        )
    }
}
