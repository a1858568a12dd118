//! Built-in agents: `mock` (scripted, deterministic) and `command` (any external program).

mod command;
mod mock;
pub mod reap;

use std::sync::Arc;

use agenteval_core::config::AgentConfig;
use agenteval_core::traits::AgentRunner;

pub use command::CommandAgent;
pub use mock::MockAgent;

/// Builds the agent a configuration names.
pub fn agent_from_config(cfg: &AgentConfig) -> Arc<dyn AgentRunner> {
    match cfg {
        AgentConfig::Mock { model, mock, .. } => Arc::new(MockAgent::new(mock.clone(), model.clone())),
        AgentConfig::Command { model, command, env, workdir, .. } => {
            Arc::new(CommandAgent::new(command.clone(), env.clone(), workdir.clone(), model.clone()))
        }
    }
}
