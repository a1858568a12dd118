//! A simulated user (`roles.user`): a model briefed by the benchmark (its guidelines and the
//! task's scenario), answering the agent turn by turn through its own door of the model gateway,
//! which meters, budgets, records and replays its calls apart from the agent's.

use std::time::Duration;

use agenteval_core::config::{DEFAULT_USER_TURNS, UserRole};
use agenteval_core::model::TerminatedBy;
use agenteval_core::traits::{GatewayAccess, SimulatedUser, Stop, UserBrief, UserTurn};
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
        Ok(GatewayUser { client, model: spec.name, role: role.clone(), brief, said: Mutex::new((Vec::new(), 0)) })
    }
}

#[async_trait]
impl SimulatedUser for GatewayUser {
    fn opening(&self) -> &str {
        &self.brief.opening
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
