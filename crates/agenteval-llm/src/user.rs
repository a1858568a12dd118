//! A simulated user (`roles.user`): a model briefed by the benchmark (its guidelines and the
//! task's scenario), answering the agent turn by turn through its own door of the model gateway,
//! which meters, budgets, records and replays its calls apart from the agent's.

use std::time::Duration;

use agenteval_core::config::{DEFAULT_USER_TURNS, UserRole};
use agenteval_core::model::TerminatedBy;
use agenteval_core::traits::{GatewayAccess, PriorMessage, SimulatedUser, Stop, UserBrief, UserTurn};
use async_trait::async_trait;
use tokio::sync::Mutex;

use crate::LlmError;
use crate::client::{LlmClient, RetryPolicy};
use crate::spec::{ModelSpec, Provider};
use crate::types::{ChatRequest, Message};

/// How long one of the user's answers may take.
const TIMEOUT: Duration = Duration::from_secs(120);

pub struct GatewayUser {
    client: LlmClient,
    model: String,
    role: UserRole,
    brief: UserBrief,
    /// The conversation as the user sees it: the agent's lines are its `user` messages.
    said: Mutex<(Vec<Message>, u32)>,
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
        Ok(GatewayUser { client, model: spec.name, role: role.clone(), brief, said: Mutex::new((seen, 0)) })
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
        let req = ChatRequest {
            model: self.model.clone(),
            system: Some(self.brief.system.clone()),
            messages: said.0.clone(),
            tools: Vec::new(),
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
        let text = answer.text.unwrap_or_default();
        said.0.push(Message::Assistant { text: Some(text.clone()), tool_calls: Vec::new() });
        said.1 += 1;
        let ends = self.brief.stop_words.iter().any(|w| !w.is_empty() && text.contains(w.as_str()));
        Ok(UserTurn { text, ends })
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
