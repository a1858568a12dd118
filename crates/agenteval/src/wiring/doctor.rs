//! Pre-flight checks of a run config's resources (`agenteval doctor`): the backend's own, the
//! agent program where workers run on this machine, and for tasks in containers the Docker
//! engine and every task image.

use agenteval_core::config::RunConfig;
use agenteval_core::traits::Check;

use super::Wiring;

/// Checks what a run of `cfg` needs; every check runs, none launches anything (with `build`,
/// the task images that are not built yet are built).
pub async fn run(wiring: &Wiring, cfg: &RunConfig, build: bool) -> Vec<Check> {
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
    // A root worker runs agents as uids of their own: what runs them must be readable by those.
    if kind.on_this_machine() && agenteval_engine::isolation::confine::agent_user().is_some() {
        let r = agenteval_engine::agents::preflight(cfg)
            .map(|()| "readable by the agents' uids".to_string())
            .map_err(|e| e.to_string());
        checks.push(Check::new("agent programs for a root worker", r));
    }
    if agenteval_engine::environments::kind_of(cfg) == agenteval_core::config::EnvironmentKind::Docker {
        checks.extend(docker_checks(cfg, build).await);
    }
    checks
}

/// The Docker engine (reachable, its version) and every task image: present, not built yet
/// (submit builds it), or, with `build`, built now or failing with its build's last lines.
async fn docker_checks(cfg: &RunConfig, build: bool) -> Vec<Check> {
    let env = agenteval_docker::DockerEnvironment::new(cfg.environment.base_image.clone());
    let version = env.engine_version().await;
    let engine_ok = version.is_ok();
    let mut checks = vec![Check::new(
        "docker engine",
        version.map(|v| format!("reachable, version {v}")).map_err(|e| e.to_string()),
    )];
    if !engine_ok {
        return checks;
    }
    let tasks = match agenteval_engine::benchmarks::benchmark_from_config(&cfg.benchmark) {
        Ok(b) => b.list_tasks(cfg.benchmark.filter()).await,
        Err(e) => Err(e),
    };
    let tasks = match tasks {
        Ok(t) => t,
        Err(e) => {
            return [checks, vec![Check::new("task images", Err(format!("cannot list the tasks: {e}")))]].concat();
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    for spec in tasks.iter().filter_map(|t| t.environment.as_ref()) {
        let key = (spec.image.clone(), spec.context.clone());
        if !seen.insert(key) {
            continue;
        }
        let what = spec
            .image
            .clone()
            .unwrap_or_else(|| spec.context.as_ref().map(|c| c.display().to_string()).unwrap_or_else(|| "?".into()));
        let r = match env.image_present(spec).await {
            Ok((tag, true)) => Ok(format!("{tag} is on the engine")),
            Ok((tag, false)) if spec.image.is_some() => {
                Err(format!("{tag} is not on the engine (pull or build it first)"))
            }
            Ok((tag, false)) if !build => {
                Ok(format!("{tag} not built yet (submit builds it; `doctor --build` builds it now)"))
            }
            Ok(_) => {
                let context = spec.context.as_deref().expect("an image to build has a folder");
                let secs = spec.build_timeout_secs.unwrap_or(1800.0).clamp(1.0, 86_400.0);
                env.build_image(context, std::time::Duration::from_secs_f64(secs))
                    .await
                    .map(|(_, note)| note)
                    .map_err(|e| e.to_string().replace('\n', " | "))
            }
            Err(e) => Err(e.to_string()),
        };
        checks.push(Check::new(format!("image of {what}"), r));
    }
    checks
}
