//! Pre-flight checks of a run config's resources (`agenteval doctor`): the backend's own, the
//! agent program where workers run on this machine, the model endpoints the run's calls go to,
//! and for tasks in containers the Docker engine, every task image, and whether the model
//! gateway answers an agent in a container of the first task.

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
    let secrets = agenteval_engine::agents::access::required_secrets(cfg, false);
    let mut checks = kind.check(cfg, &secrets).await;
    if kind.on_this_machine()
        && let Some(prog) = cfg.agent.program_line().and_then(<[String]>::first)
    {
        let local = cfg.agent.code_folder().map(|w| w.join(prog)).filter(|p| !prog.starts_with('/') && p.exists());
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
    if let Some(up) = agenteval_engine::agents::access::upstream_of(cfg) {
        let field = |name: &str| agenteval_engine::agents::access::endpoint_field(cfg, name);
        checks.extend(endpoint_checks(&up, &field).await);
        if let Some(b) = &up.bedrock {
            let host = agenteval_aws::BedrockHost::connect(&wiring.aws, b.region.as_deref(), b.endpoint_url.as_deref());
            // The model a call names, as the gateway sends it to Bedrock.
            let model = cfg.agent.model().map(|m| m.strip_prefix("bedrock:").unwrap_or(m));
            let model = model.map(|m| b.models.get(m).map_or(m, String::as_str));
            let probe = host.await.probe(model).await.map_err(|e| e.to_string());
            checks.push(Check::new("model endpoint bedrock", probe));
        }
    }
    if agenteval_engine::environments::kind_of(cfg).in_containers() {
        checks.extend(docker_checks(wiring, cfg, build).await);
    }
    checks
}

/// How long an endpoint or a container's connection may take to answer.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Each model endpoint the run's calls go to (through the gateway), asked `GET …/models` from
/// this machine with no key: any HTTP answer (a 401 too) is an endpoint that answers.
async fn endpoint_checks(up: &agenteval_core::config::Upstream, field: &dyn Fn(&str) -> String) -> Vec<Check> {
    let base = |e: Option<&agenteval_core::config::Endpoint>, default: &str| {
        e.map(|e| e.base_url.clone().unwrap_or_else(|| default.to_string()))
    };
    // An Azure resource is asked where its v1 API lists models.
    let azure = up.azure.as_ref().map(|a| format!("{}/openai/v1", a.base_url.trim_end_matches('/')));
    let endpoints = [
        ("openai", base(up.openai.as_ref(), "https://api.openai.com/v1")),
        ("azure", azure),
        ("anthropic", base(up.anthropic.as_ref(), "https://api.anthropic.com/v1")),
    ];
    let client = reqwest::Client::builder().timeout(ANSWER_WITHIN).build();
    let mut checks = Vec::new();
    for (name, base) in endpoints {
        let Some(base) = base else { continue };
        let url = format!("{}/models", base.trim_end_matches('/'));
        let r = match &client {
            Ok(c) => match c.get(&url).send().await {
                Ok(answer) => Ok(format!("{base} answers (HTTP {} to GET /models)", answer.status().as_u16())),
                Err(e) if e.is_timeout() => {
                    Err(format!("{base} does not answer: {} ({})", reqwest_why(&e), field(name)))
                }
                Err(e) => Err(format!(
                    "cannot reach {base} ({}) ({})",
                    agenteval_core::gateway::reach_failure(&reqwest_why(&e)),
                    field(name)
                )),
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

/// From a container of the first task's image, on the network its agent gets, the run's model
/// gateway (started here as a worker starts it, with no key) asked `GET /v1/models` with a
/// task's token, as the agent would ask it: what a firewall, a missing network, a gateway that
/// cannot listen on the task network or an image without curl, python3 or bash would break.
/// (The endpoint behind the gateway is asked from this machine, where the gateway runs.)
async fn gateway_from_container(
    wiring: &Wiring,
    up: &agenteval_core::config::Upstream,
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
    let r = probe_gateway(wiring, up, env, &handle, run, task).await;
    if let Err(e) = env.teardown(&handle).await {
        tracing::warn!("the probe's container {} was not removed: {e}", handle.id);
    }
    Check::new(name, r)
}

/// The probe itself: the gateway listening on the task network's host address, a door opened
/// for it, and the request from the container with whichever of curl, python3 or bash it has.
async fn probe_gateway(
    wiring: &Wiring,
    up: &agenteval_core::config::Upstream,
    env: &agenteval_docker::DockerEnvironment,
    handle: &agenteval_core::environment::EnvHandle,
    run_id: agenteval_core::RunId,
    task: &agenteval_core::model::TaskSpec,
) -> Result<String, String> {
    use agenteval_core::gateway::{DoorSpec, Reach};
    use agenteval_core::traits::{Environment as _, Resolver as _};
    let host = env.gateway_host(handle).await.ok_or("the container is on no network that reaches the gateway")?;
    let gateway = wiring
        .gateway(up, Vec::new())
        .await
        .map_err(|e| format!("the model gateway does not start: {e}"))?
        .ok_or("this build has no model gateway")?;
    gateway.listen_on(host).await.map_err(|e| format!("the gateway cannot listen on {host}: {e}"))?;
    let spec = DoorSpec {
        run_id,
        task_id: task.id.clone(),
        attempt: 0,
        max_tokens: None,
        max_cost_usd: None,
        replay: None,
        record: false,
        redactor: agenteval_core::secret::Redactor::new(),
        models: Vec::new(),
        retry: false,
        run_budget: None,
        rate: None,
        usage: None,
    };
    let mut door = gateway.open(spec).await.map_err(|e| e.to_string())?;
    let (base, _) = door.base_urls(Reach::Container(host)).map_err(|e| e.to_string())?;
    let at = base.trim_start_matches("http://").trim_end_matches("/v1").to_string();
    let (ip, port) = at.split_once(':').ok_or("the gateway's address has no port")?;
    // The token goes in the request only, and dies with the door when this check ends.
    let token = door.token().expose().to_string();
    let probe = format!(
        r#"if command -v curl >/dev/null; then curl -s -m 5 -o /dev/null -w 'HTTP %{{http_code}}\n' -H 'Authorization: Bearer {token}' {base}/models;
elif command -v python3 >/dev/null; then python3 -c 'import urllib.request as u; r = u.urlopen(u.Request("{base}/models", headers={{"Authorization": "Bearer {token}"}}), timeout=5); print("HTTP", r.status)';
elif command -v bash >/dev/null; then bash -c 'exec 3<>/dev/tcp/{ip}/{port} && printf "GET /v1/models HTTP/1.0\r\nAuthorization: Bearer {token}\r\n\r\n" >&3 && head -c 12 <&3'; echo;
else echo 'no curl, python3 or bash in the image'; fi"#
    );
    let req = agenteval_core::environment::ExecRequest::new(probe, ANSWER_WITHIN);
    let out = env.exec(handle, &req).await.map_err(|e| e.to_string());
    door.close();
    let out = out?;
    let hide = |s: &str| s.replace(&token, "<token>");
    let said = hide(out.stdout.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or(""));
    let status = said.split_whitespace().nth(1);
    if said.starts_with("HTTP") && status == Some("200") {
        Ok(format!("{base} answers a task's token (GET /models)"))
    } else {
        let why = if said.is_empty() { hide(out.stderr.trim().lines().last().unwrap_or("no output")) } else { said };
        Err(format!("{base} does not answer from the container: {why}"))
    }
}

/// The Docker engine (reachable, its version) and every task image: present, not built yet
/// (submit builds it), or, with `build`, built now or failing with its build's last lines.
async fn docker_checks(wiring: &Wiring, cfg: &RunConfig, build: bool) -> Vec<Check> {
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
    if agenteval_engine::agents::access::agent_calls_from_container(cfg)
        && let Some(up) = cfg.agent.upstream()
        && let Some((task, spec)) = tasks.iter().find_map(|t| Some((t, t.environment.as_ref()?)))
    {
        let ready = matches!(env.image_present(spec).await, Ok((_, true)));
        if ready {
            let env = env.with_gateway(true);
            checks.push(gateway_from_container(wiring, up, &env, task, spec).await);
        } else {
            let what = format!("gateway from a container of task {}", task.id);
            checks.push(Check::new(what, Ok("not tried: the task's image is not built yet (`doctor --build`)".into())));
        }
    }
    checks
}
