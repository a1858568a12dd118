//! Built-in agents: `mock` (scripted, deterministic) and `command` (any external program).

mod command;
mod mock;

use std::sync::Arc;

use agenteval_core::config::{AgentConfig, AgentKind};
use agenteval_core::traits::AgentRunner;

pub use command::CommandAgent;
pub use mock::MockAgent;

/// Builds the agent a configuration names.
pub fn agent_from_config(cfg: &AgentConfig) -> Arc<dyn AgentRunner> {
    match cfg.kind {
        AgentKind::Mock => Arc::new(MockAgent::new(cfg.mock.clone(), cfg.model.clone())),
        AgentKind::Command => Arc::new(CommandAgent::new(cfg)),
    }
}
