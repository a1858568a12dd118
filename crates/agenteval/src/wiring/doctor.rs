//! Pre-flight checks of a run config's resources (`agenteval doctor`): the backend's own, then
//! the agent program where workers run on this machine.

use agenteval_core::config::RunConfig;
use agenteval_core::traits::Check;

use super::Wiring;

/// Checks what a run of `cfg` needs; every check runs, none launches anything.
pub async fn run(wiring: &Wiring, cfg: &RunConfig) -> Vec<Check> {
    let kind = match wiring.kind(cfg) {
        Ok(k) => k,
        Err(e) => return vec![Check::new("backend", Err(e.to_string()))],
    };
    let secrets = agenteval_engine::worker::required_secrets(cfg, false);
    let mut checks = kind.check(cfg, &secrets).await;
    if kind.on_this_machine()
        && let agenteval_core::config::AgentConfig::Command { command, workdir, .. } = &cfg.agent
        && let Some(prog) = command.first()
    {
        let local = workdir.as_ref().map(|w| w.join(prog)).filter(|p| !prog.starts_with('/') && p.exists());
        let prog = local.map(|p| p.display().to_string()).unwrap_or_else(|| prog.clone());
        let r = match agenteval_engine::agents::runnable(&prog) {
            Ok(path) => Ok(format!("{} is executable", path.display())),
            Err(why) => Err(format!("{why} (agent.command)")),
        };
        checks.push(Check::new(format!("agent program {prog}"), r));
    }
    checks
}
