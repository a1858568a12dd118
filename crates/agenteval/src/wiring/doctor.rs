//! Pre-flight checks of a run config's resources (`agenteval doctor`): the backend's own, the
//! agent program where workers run on this machine, the model endpoints the run's calls go to,
//! and for tasks in containers the Docker engine, every task image, and whether an agent in a
//! container of the first task reaches the model gateway.

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
    if let Some(up) = agenteval_engine::worker::upstream_of(cfg) {
        checks.extend(endpoint_checks(&up).await);
    }
    if agenteval_engine::environments::kind_of(cfg) == agenteval_core::config::EnvironmentKind::Docker {
        checks.extend(docker_checks(cfg, build).await);
    }
    checks
}

/// How long an endpoint or a container's connection may take to answer.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Each model endpoint the run's calls go to (through the gateway), asked `GET …/models` from
/// this machine with no key: any HTTP answer (a 401 too) is an endpoint that answers.
async fn endpoint_checks(up: &agenteval_core::config::Upstream) -> Vec<Check> {
    let endpoints = [
        ("openai", up.openai.as_ref(), "https://api.openai.com/v1"),
        ("anthropic", up.anthropic.as_ref(), "https://api.anthropic.com/v1"),
    ];
    let client = reqwest::Client::builder().timeout(ANSWER_WITHIN).build();
    let mut checks = Vec::new();
    for (name, endpoint, default) in endpoints {
        let Some(endpoint) = endpoint else { continue };
        let base = endpoint.base_url.clone().unwrap_or_else(|| default.to_string());
        let url = format!("{}/models", base.trim_end_matches('/'));
        let r = match &client {
            Ok(c) => match c.get(&url).send().await {
                Ok(answer) => Ok(format!("{base} answers (HTTP {} to GET /models)", answer.status().as_u16())),
                Err(e) => Err(format!("{base} does not answer: {} (agent.upstream.{name}.base_url)", reqwest_why(&e))),
            },
            Err(e) => Err(format!("no HTTP client: {e}")),
        };
        checks.push(Check::new(format!("model endpoint {name}"), r));
    }
    checks
}

/// A request's failure in a few words: its innermost cause (connection refused, a name that
/// does not resolve, a timeout), not reqwest's chain.
fn reqwest_why(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {} s", ANSWER_WITHIN.as_secs());
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// From a container of the first task's image, on the network its agent gets, a connection to
/// a listener on the gateway's address and ports (the one way out an installed agent has):
/// what a firewall, a missing network or an image without a shell would break.
async fn gateway_from_container(
    env: &agenteval_docker::DockerEnvironment,
    task: &agenteval_core::model::TaskSpec,
    spec: &agenteval_core::environment::EnvSpec,
) -> Check {
    use agenteval_core::traits::Environment as _;
    let name = format!("gateway from a container of task {}", task.id);
    let run = agenteval_core::RunId::new();
    let handle = match env.prepare(&run, task, 0, spec).await {
        Ok(h) => h,
        Err(e) => return Check::new(name, Err(format!("no container of the task's image: {e}"))),
    };
    let r = probe_gateway(env, &handle).await;
    if let Err(e) = env.teardown(&handle).await {
        tracing::warn!("the probe's container {} was not removed: {e}", handle.id);
    }
    Check::new(name, r)
}

async fn probe_gateway(
    env: &agenteval_docker::DockerEnvironment,
    handle: &agenteval_core::environment::EnvHandle,
) -> Result<String, String> {
    use agenteval_core::traits::Environment as _;
    let host = env.gateway_host(handle).await.ok_or("the container is on no network that reaches the gateway")?;
    let mut bound = None;
    for port in agenteval_core::gateway::GATEWAY_PORTS.rev() {
        if let Ok(l) = tokio::net::TcpListener::bind((host, port)).await {
            bound = Some((l, port));
            break;
        }
    }
    let (listener, port) = bound.ok_or("no free port in the gateway's range on this machine")?;
    let accepted = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        let (mut s, _) = listener.accept().await.ok()?;
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.ok()
    });
    let probe = format!(
        "if command -v bash >/dev/null; then bash -c 'exec 3<>/dev/tcp/{host}/{port}' && echo reached; \
         elif command -v python3 >/dev/null; then python3 -c 'import socket; socket.create_connection((\"{host}\", {port}), 5)' && echo reached; \
         elif command -v curl >/dev/null; then curl -s -m 5 -o /dev/null http://{host}:{port}/ && echo reached; \
         else echo 'no bash, python3 or curl in the image'; fi"
    );
    let req = agenteval_core::environment::ExecRequest::new(probe, ANSWER_WITHIN);
    let out = env.exec(handle, &req).await.map_err(|e| e.to_string())?;
    let reached =
        tokio::time::timeout(std::time::Duration::from_secs(1), accepted).await.ok().and_then(|r| r.ok().flatten());
    match (reached, out.stdout.trim()) {
        (Some(()), _) => Ok(format!("{host}:{port} reached (the gateway's address and ports)")),
        (None, "reached") => Err(format!("{host}:{port}: the container connected to something else")),
        (None, said) => {
            let said = if said.is_empty() { out.stderr.trim() } else { said };
            Err(format!("{host}:{port} not reached from the container: {}", said.lines().last().unwrap_or("no output")))
        }
    }
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
    // An installed agent calls its model from inside the container, through the gateway.
    let in_container = matches!(cfg.agent, agenteval_core::config::AgentConfig::Installed { .. });
    if in_container
        && cfg.agent.upstream().is_some()
        && let Some((task, spec)) = tasks.iter().find_map(|t| Some((t, t.environment.as_ref()?)))
    {
        let ready = matches!(env.image_present(spec).await, Ok((_, true)));
        if ready {
            let env = env.with_gateway(true);
            checks.push(gateway_from_container(&env, task, spec).await);
        } else {
            let what = format!("gateway from a container of task {}", task.id);
            checks.push(Check::new(what, Ok("not tried: the task's image is not built yet (`doctor --build`)".into())));
        }
    }
    checks
}
