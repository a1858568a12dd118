//! A simulated user (`roles.user`): a model briefed by the benchmark (its guidelines and the
//! task's scenario), answering the agent turn by turn through its own door of the model gateway,
//! which meters, budgets, records and replays its calls apart from the agent's.

use std::sync::Arc;
use std::time::Duration;

use agenteval_core::config::{DEFAULT_USER_TURNS, UserRole};
use agenteval_core::model::TerminatedBy;
use agenteval_core::traits::{
    AgentTool, GatewayAccess, PriorCall, PriorMessage, SimulatedUser, Stop, TaskEnvironment, UserAct, UserBrief,
    UserToolResult, UserTurn,
};
use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::LlmError;
use crate::client::{LlmClient, RetryPolicy};
use crate::spec::{ModelSpec, Provider};
use crate::types::{ChatRequest, Message};

/// How long one of the user's answers may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Most rounds of its own tool calls a user makes before it says something to the agent.
const MAX_ACTS: usize = 20;

pub struct GatewayUser {
    client: LlmClient,
    model: String,
    role: UserRole,
    brief: UserBrief,
    /// The tools it acts with on its own side (the benchmark's `user_tools`).
    tools: Vec<Arc<dyn AgentTool>>,
    /// The conversation as the user sees it: the agent's lines are its `user` messages.
    said: Mutex<(Vec<Message>, u32)>,
    /// What it did with its own tools in the turn it is in, until it says something: left
    /// there when the turn is cut short, for the trace (`unfinished_turn`).
    acting: std::sync::Mutex<Vec<UserAct>>,
}

impl GatewayUser {
    /// A user for one task, calling `role.model` through the user's door `g`.
    pub fn new(role: &UserRole, brief: UserBrief, g: &GatewayAccess) -> Result<Self, LlmError> {
        let spec = ModelSpec::parse(&role.model)?;
        let base = match spec.provider {
            Provider::Anthropic => format!("{}/v1", g.host.1),
            Provider::OpenAi | Provider::OpenAiCompatible => g.host.0.clone(),
        };
        let retry = RetryPolicy { max_attempts: 5, ..RetryPolicy::default() };
        let client = LlmClient::new(spec.clone(), Some(&base), Some(&g.token), TIMEOUT, retry)?;
        let client = match &g.local {
            Some(local) => client.through(local.clone()),
            None => client,
        };
        let seen = seen_by_the_user(&brief.history);
        Ok(GatewayUser {
            client,
            model: spec.name,
            role: role.clone(),
            brief,
            tools: Vec::new(),
            said: Mutex::new((seen, 0)),
            acting: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The user with tools of its own, which it may call before it answers the agent.
    pub fn with_tools(mut self, tools: Vec<Arc<dyn AgentTool>>) -> Self {
        self.tools = tools;
        self
    }

    /// The `user.message` payload of a turn it did not finish (its model failed, its budget ran
    /// out, the agent was stopped) after acting on its own side: those acts changed the task's
    /// state, so the trace keeps them, with no words and `unfinished` saying why. `None` when
    /// it had not acted; taken once.
    pub fn unfinished_turn(&self, why: &str) -> Option<serde_json::Value> {
        let acted = std::mem::take(&mut *self.acting.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        (!acted.is_empty()).then(|| {
            serde_json::json!({
                "text": "",
                "ends": false,
                "acted": serde_json::to_value(&acted).unwrap_or_default(),
                "unfinished": why,
            })
        })
    }

    /// Its tools' answers to `calls`, in order; an unknown tool or a failed call is an error
    /// answer the user reads, as the agent's would be.
    async fn act(&self, calls: &[crate::types::ToolCall]) -> Vec<UserToolResult> {
        let env = TaskEnvironment::default();
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            let answer = match self.tools.iter().find(|t| t.spec().name == c.name) {
                Some(t) => t.call(&c.arguments, &env).await,
                None => Err(format!("no tool named {}", c.name)),
            };
            let (content, error) = match answer {
                Ok(text) => (text, false),
                Err(text) => (text, true),
            };
            out.push(UserToolResult { call_id: c.id.clone(), content, error });
        }
        out
    }
}

/// The conversation a task starts from as the user saw it, as τ²'s simulator is told it: its
/// own lines are its model's, the agent's text its input; the agent's tool calls and their
/// results it never saw.
fn seen_by_the_user(history: &[PriorMessage]) -> Vec<Message> {
    history
        .iter()
        .filter_map(|m| match m {
            PriorMessage::User { text } => {
                Some(Message::Assistant { text: Some(text.clone()), tool_calls: Vec::new() })
            }
            PriorMessage::Agent { text: Some(text), tool_calls } if tool_calls.is_empty() => {
                Some(Message::User { text: text.clone() })
            }
            PriorMessage::Agent { .. } | PriorMessage::Tool { .. } => None,
        })
        .collect()
}

#[async_trait]
impl SimulatedUser for GatewayUser {
    fn opening(&self) -> &str {
        &self.brief.opening
    }

    fn history(&self) -> &[PriorMessage] {
        &self.brief.history
    }

    async fn reply(&self, agent_said: &str) -> Result<UserTurn, Stop> {
        let mut said = self.said.lock().await;
        let max = self.role.max_turns.unwrap_or(DEFAULT_USER_TURNS);
        if said.1 >= max {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTurns,
                reason: format!("the simulated user took {max} turns (roles.user.max_turns)"),
            });
        }
        said.0.push(Message::User { text: agent_said.to_string() });
        let tools: Vec<_> = self.tools.iter().map(|t| t.spec()).collect();
        let acting = || self.acting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        acting().clear();
        let answer = loop {
            let req = ChatRequest {
                model: self.model.clone(),
                system: Some(self.brief.system.clone()),
                messages: said.0.clone(),
                tools: tools.clone(),
                temperature: self.role.temperature,
                max_output_tokens: self.role.max_output_tokens,
                response_format: None,
            };
            let answer = self.client.chat(&req).await.map_err(|e| Stop {
                terminated_by: match &e {
                    LlmError::ReplayMiss(_) => TerminatedBy::ReplayMiss,
                    e if e.is_provider_outage() => TerminatedBy::InfraFailure,
                    _ => TerminatedBy::AgentError,
                },
                reason: format!("the simulated user's model: {e}"),
            })?;
            if answer.tool_calls.is_empty() || self.tools.is_empty() {
                break answer;
            }
            if acting().len() >= MAX_ACTS {
                return Err(Stop {
                    terminated_by: TerminatedBy::AgentError,
                    reason: format!("the simulated user called its tools {MAX_ACTS} times without a word to the agent"),
                });
            }
            let results = self.act(&answer.tool_calls).await;
            said.0.push(Message::Assistant { text: answer.text.clone(), tool_calls: answer.tool_calls.clone() });
            for (c, r) in answer.tool_calls.iter().zip(&results) {
                said.0.push(Message::Tool {
                    call_id: r.call_id.clone(),
                    name: c.name.clone(),
                    content: r.content.clone(),
                    is_error: r.error,
                });
            }
            let calls = answer.tool_calls.iter().map(|c| PriorCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            });
            let act = UserAct { text: answer.text.filter(|t| !t.is_empty()), calls: calls.collect(), results };
            acting().push(act);
        };
        let acted = std::mem::take(&mut *acting());
        let text = answer.text.unwrap_or_default();
        said.0.push(Message::Assistant { text: Some(text.clone()), tool_calls: Vec::new() });
        said.1 += 1;
        let ends = self.brief.stop_words.iter().any(|w| !w.is_empty() && text.contains(w.as_str()));
        Ok(UserTurn { text, ends, acted })
    }
}

#[cfg(test)]
mod tests {
    use agenteval_core::traits::PriorCall;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_recorded_conversation_is_told_to_the_user_as_it_saw_it_and_to_the_agent_as_it_happened() {
        let history = vec![
            PriorMessage::User { text: "make a task".into() },
            PriorMessage::Agent {
                text: None,
                tool_calls: vec![PriorCall { id: "c1".into(), name: "create_task".into(), arguments: json!({"t": 1}) }],
            },
            PriorMessage::Tool { call_id: "c1".into(), name: "create_task".into(), content: "ok".into(), error: false },
            PriorMessage::Agent { text: Some("made task_2".into()), tool_calls: vec![] },
            PriorMessage::User { text: "thanks".into() },
        ];
        // The user's own lines are its model's; the agent's words its input; no tool call.
        assert_eq!(
            seen_by_the_user(&history),
            vec![
                Message::Assistant { text: Some("make a task".into()), tool_calls: vec![] },
                Message::User { text: "made task_2".into() },
                Message::Assistant { text: Some("thanks".into()), tool_calls: vec![] },
            ]
        );
        // The agent hears all of it, its tool call answered.
        let told = crate::agent::told_to_the_agent(&history);
        assert_eq!(told.len(), 5);
        assert!(matches!(&told[1], Message::Assistant { tool_calls, .. } if tool_calls[0].id == "c1"));
        assert!(matches!(&told[2], Message::Tool { call_id, name, .. } if call_id == "c1" && name == "create_task"));
    }
}
