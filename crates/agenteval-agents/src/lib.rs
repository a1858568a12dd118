//! The built-in agents that need nothing of the engine: `mock` (scripted, deterministic),
//! `nop` (does nothing), `oracle` (the expected answers, or a task's reference solution in its
//! environment), `predictions` (patches made elsewhere, read into the config at load, handed
//! over as answers) and `exploit` (tries to pass without doing the task: the `audit` battery's
//! strategies, each a shell script run in the task's environment).

pub mod exploit;
mod mock;
mod nop;
mod oracle;
pub mod predictions;

pub use mock::MockAgent;
pub use nop::NopAgent;
pub use oracle::OracleAgent;

use agenteval_core::config::{AgentConfig, Limits};

/// The agents `agenteval audit` runs every task with besides its exploits: the reference
/// solution (`oracle`, which must pass) and nothing done (`nop`, which must fail), by name.
pub fn reference_probes(limits: &Limits) -> [(&'static str, AgentConfig); 2] {
    [("oracle", AgentConfig::Oracle { limits: limits.clone() }), ("nop", AgentConfig::Nop { limits: limits.clone() })]
}
