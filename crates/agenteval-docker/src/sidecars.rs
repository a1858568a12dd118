//! A task's sidecars (Harbor's multi-container tasks, `EnvSpec::sidecars`): the task's own
//! internal network, where its containers reach each other by service name and nothing else,
//! each sidecar started after what it depends on and waited for until its healthcheck passes;
//! all of them removed with the task's container.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agenteval_core::environment::{EnvHandle, EnvSpec, ExecRequest, Healthcheck, LABEL_ATTEMPT, LABEL_RUN, LABEL_TASK};
use agenteval_core::model::TaskSpec;
use agenteval_core::{Error, Result, RunId};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, EndpointSettings, HostConfig, NetworkCreateRequest, NetworkingConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder, StartContainerOptions,
};

use crate::{DockerEnvironment, LABEL_MANAGED, infra};

/// On a sidecar: the task container it serves.
pub(crate) const LABEL_SIDECAR_OF: &str = "agenteval.sidecar-of";
/// On a sidecar: its name on the task network (the compose service's).
const LABEL_SIDECAR_NAME: &str = "agenteval.sidecar-name";
/// On a task container with sidecars: its own network.
pub(crate) const LABEL_TASK_NETWORK: &str = "agenteval.task-network";

/// A new internal network for one task attempt's containers.
pub(crate) async fn task_network(docker: &Docker, run: &RunId) -> Result<String> {
    use sha2::{Digest as _, Sha256};
    let seed = format!("{run}-{:?}-{}", Instant::now(), std::process::id());
    let unique = hex::encode(Sha256::digest(seed.as_bytes()));
    let name = format!("agenteval-task-{}", &unique[..16]);
    // Its bridge is closed to this machine by the rule on every agenteval bridge's name.
    crate::network::close_host().await?;
    let options = HashMap::from([("com.docker.network.bridge.name".to_string(), crate::network::task_bridge(&unique))]);
    let request = NetworkCreateRequest {
        name: name.clone(),
        driver: Some("bridge".into()),
        internal: Some(true),
        options: Some(options),
        labels: Some(HashMap::from([
            (LABEL_MANAGED.to_string(), "1".to_string()),
            (LABEL_RUN.to_string(), run.to_string()),
        ])),
        ..Default::default()
    };
    docker.create_network(request).await.map_err(|e| infra(&format!("creating the task network {name}"), e))?;
    Ok(name)
}

/// The task container's create request moved onto a new task network (as `main`): the request,
/// the network, and the network it would have had otherwise (the internet's or the gateway's),
/// which it joins too.
pub(crate) async fn join_task_network(
    docker: &Docker,
    run: &RunId,
    mut body: ContainerCreateBody,
) -> Result<(ContainerCreateBody, String, Option<String>)> {
    let net = task_network(docker, run).await?;
    let other = body.host_config.as_ref().and_then(|h| h.network_mode.clone()).filter(|m| m != "none");
    if let Some(h) = body.host_config.as_mut() {
        h.network_mode = Some(net.clone());
        h.dns = None;
    }
    body.network_disabled = Some(false);
    body.networking_config = Some(on_network(&net, "main"));
    body.labels.get_or_insert_default().insert(LABEL_TASK_NETWORK.into(), net.clone());
    Ok((body, net, other))
}

/// Where a container joins the task network, reachable there by `alias`.
pub(crate) fn on_network(network: &str, alias: &str) -> NetworkingConfig {
    NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            network.to_string(),
            EndpointSettings { aliases: Some(vec![alias.to_string()]), ..Default::default() },
        )])),
    }
}

/// Starts the spec's sidecars on `network` for the task container `main`, in order, each
/// waited for until healthy; their notes for the task's log.
pub(crate) async fn start(
    env: &DockerEnvironment,
    docker: &Docker,
    (run, task, attempt): (&RunId, &TaskSpec, u32),
    spec: &EnvSpec,
    (network, volumes): (&str, &crate::volumes::TaskVolumes),
    main: &str,
) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for s in &spec.sidecars {
        let image_spec = EnvSpec { context: s.context.clone(), image: s.image.clone(), ..Default::default() };
        let (image, note) = env.image(run, &image_spec).await?;
        notes.push(format!("sidecar {}: {note}", s.name));
        let labels = HashMap::from([
            (LABEL_MANAGED.to_string(), "1".to_string()),
            (LABEL_RUN.to_string(), run.to_string()),
            (LABEL_TASK.to_string(), task.id.to_string()),
            (LABEL_ATTEMPT.to_string(), attempt.to_string()),
            (LABEL_SIDECAR_OF.to_string(), main.to_string()),
            (LABEL_SIDECAR_NAME.to_string(), s.name.clone()),
        ]);
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            labels: Some(labels),
            cmd: s.command.clone(),
            env: (!s.env.is_empty()).then(|| s.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            host_config: Some(HostConfig {
                network_mode: Some(network.to_string()),
                init: Some(true),
                // The task's limits, else the documented defaults (a sidecar is no way around them).
                memory: Some(sidecar_memory(spec)),
                memory_swap: Some(sidecar_memory(spec)),
                nano_cpus: Some((spec.cpus.unwrap_or(SIDECAR_CPUS).clamp(0.01, 1024.0) * 1e9) as i64),
                pids_limit: Some(4096),
                security_opt: Some(crate::seccomp::security_options(false)),
                mounts: volumes.mounts(&s.volumes),
                ..Default::default()
            }),
            networking_config: Some(on_network(network, &s.name)),
            ..Default::default()
        };
        let created = docker
            .create_container(Some(CreateContainerOptionsBuilder::default().build()), body)
            .await
            .map_err(|e| infra(&format!("creating sidecar {} of {image}", s.name), e))?;
        docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
            .map_err(|e| infra(&format!("starting sidecar {}", s.name), e))?;
        if let Some(hc) = &s.healthcheck {
            let handle =
                EnvHandle { kind: "docker".into(), id: created.id.clone(), workdir: String::new(), notes: vec![] };
            healthy(docker, &handle, hc).await.map_err(|e| Error::new(e.kind(), format!("sidecar {}: {e}", s.name)))?;
            notes.push(format!("sidecar {} healthy", s.name));
        }
    }
    Ok(notes)
}

/// A sidecar's memory when the task names none, in MiB.
pub const SIDECAR_MEMORY_MB: u64 = 2048;
/// A sidecar's CPUs when the task names none.
pub const SIDECAR_CPUS: f64 = 1.0;

/// Bytes of memory (and of memory and swap together) each sidecar of `spec` gets.
fn sidecar_memory(spec: &EnvSpec) -> i64 {
    (spec.memory_mb.unwrap_or(SIDECAR_MEMORY_MB).min(1 << 30) * 1024 * 1024) as i64
}

/// Runs the healthcheck until it passes, as compose and Harbor do.
async fn healthy(docker: &Docker, h: &EnvHandle, hc: &Healthcheck) -> Result<()> {
    let started = Instant::now();
    let mut failures = 0;
    loop {
        let req = ExecRequest::new(hc.command.clone(), Duration::from_secs_f64(hc.timeout_secs.clamp(0.1, 3600.0)))
            .as_grader();
        let out = crate::exec_in(docker, h, &req).await?;
        if out.ok() {
            return Ok(());
        }
        if started.elapsed().as_secs_f64() >= hc.start_period_secs {
            failures += 1;
        }
        if failures > hc.retries {
            return Err(Error::invalid(format!(
                "its healthcheck `{}` failed {failures} time(s): {}",
                hc.command,
                format!("{}{}", out.stdout, out.stderr).trim()
            )));
        }
        tokio::time::sleep(Duration::from_secs_f64(hc.interval_secs.clamp(0.05, 3600.0))).await;
    }
}

/// The address of the sidecar `name` of the task container `main` on the task's own network,
/// which this machine reaches through the network's bridge (the firewall lets back in what this
/// machine opened: `network::close_host`).
pub(crate) async fn address(docker: &Docker, main: &str, name: &str) -> Option<std::net::IpAddr> {
    let main_info = docker.inspect_container(main, None::<InspectContainerOptions>).await.ok()?;
    let network = main_info.config?.labels?.get(LABEL_TASK_NETWORK)?.clone();
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_SIDECAR_OF}={main}"), format!("{LABEL_SIDECAR_NAME}={name}")],
    )]);
    let listed =
        docker.list_containers(Some(ListContainersOptionsBuilder::default().filters(&filters).build())).await.ok()?;
    let id = listed.into_iter().find_map(|c| c.id)?;
    let info = docker.inspect_container(&id, None::<InspectContainerOptions>).await.ok()?;
    let ip = info.network_settings?.networks?.get(&network)?.ip_address.clone()?;
    ip.parse().ok()
}

/// Removes the sidecars of the task container `main` and its network (named by its label).
pub(crate) async fn remove(docker: &Docker, main: &str, network: Option<String>) {
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_SIDECAR_OF}={main}")])]);
    let listed =
        docker.list_containers(Some(ListContainersOptionsBuilder::default().all(true).filters(&filters).build())).await;
    for c in listed.unwrap_or_default() {
        if let Some(id) = c.id {
            let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::default().force(true).v(true).build();
            let _ = docker.remove_container(&id, Some(opts)).await;
        }
    }
    if let Some(n) = network {
        let _ = docker.remove_network(&n).await;
    }
}
