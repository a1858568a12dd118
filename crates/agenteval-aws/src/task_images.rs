//! Tasks' environments in their own images on Fargate. Each image (pinned by digest) gets one
//! task definition, registered the first time a run needs it and found again by its family name
//! afterwards (`<worker family>-env-<digest>`): an init container of the agenteval image copies
//! the binary into a task-scoped volume, then the task's image runs it from there as its entry
//! point (`agenteval env serve`, which dials the worker that launched it), as root, in the
//! image's working folder. It has **no task role**: nothing in it can use the fleet's AWS
//! credentials. Its execution role (image pull, logs) and logging are the worker task
//! definition's (`aws.task_definition`); CPU and memory are set per launch, rounded up to a
//! valid Fargate size.

use std::collections::HashMap;

use agenteval_core::{Error, Result};
use aws_sdk_ecs::types::{
    Compatibility, ContainerCondition, ContainerDefinition, ContainerDependency, KeyValuePair, LogConfiguration,
    MountPoint, NetworkMode, Volume,
};

use crate::sdk::{AwsClients, classify};

/// Where the worker binary is, in the agenteval image and in the shared volume.
pub const WORKER_IN_IMAGE: &str = "/usr/local/bin/agenteval";
pub const VOLUME_PATH: &str = "/agenteval";
const VOLUME: &str = "agenteval-worker";
pub const INIT_CONTAINER: &str = "agenteval-init";
/// The variable that names, to a worker, its job's environment task definition (set by the
/// backend that launched it).
pub const TASK_DEFINITION_ENV: &str = "AGENTEVAL_ENV_TASK_DEFINITION";
/// The container of the task's image, which serves the environment.
pub const ENV_CONTAINER: &str = "environment";
/// The variable that tells the worker which image it runs in (recorded in each task's log).
pub const IMAGE_ENV: &str = "AGENTEVAL_TASK_IMAGE";

/// The environment's command: the binary serving it, behind the image's own ENTRYPOINT (an
/// entrypoint that starts a service and then `exec "$@"` hands over to it, as locally).
const SERVE: &[&str] = &["/agenteval/agenteval", "env", "serve"];

/// The Fargate sizes: CPU units with the memory (MiB) each allows, from, to, by.
const SIZES: &[(u32, u32, u32, u32)] = &[
    (256, 512, 2048, 512),
    (512, 1024, 4096, 1024),
    (1024, 2048, 8192, 1024),
    (2048, 4096, 16384, 1024),
    (4096, 8192, 30720, 1024),
    (8192, 16384, 61440, 4096),
    (16384, 32768, 122880, 8192),
];

/// The smallest valid Fargate size (CPU units, memory MiB) with at least `cpus` vCPUs and
/// `memory_mb` of memory (the largest when none holds them). The default: 1 vCPU, 2 GiB.
pub fn fargate_size(cpus: Option<f64>, memory_mb: Option<u64>) -> (u32, u32) {
    let cpu = (cpus.unwrap_or(1.0).max(0.0) * 1024.0).ceil() as u64;
    let mem = memory_mb.unwrap_or(0);
    for &(c, from, to, by) in SIZES {
        if (c as u64) < cpu || (to as u64) < mem {
            continue;
        }
        let m = (from as u64).max(mem.div_ceil(by as u64) * by as u64);
        return (c, m as u32);
    }
    let &(c, _, to, _) = SIZES.last().expect("sizes");
    (c, to)
}

/// What a per-image task definition takes from the worker's.
#[derive(Debug, Clone, Default)]
struct Base {
    family: String,
    execution_role: Option<String>,
    worker_image: String,
    logs: Option<LogConfiguration>,
}

/// Registers and remembers the task definitions of a backend's images.
#[derive(Debug, Default)]
pub struct TaskDefinitions {
    base: tokio::sync::OnceCell<Base>,
    /// Image (pinned) → task definition ARN. The lock is held across a registration, so one
    /// image is registered once however many jobs start at once.
    known: tokio::sync::Mutex<HashMap<String, String>>,
    pub registered: std::sync::atomic::AtomicU64,
    pub described: std::sync::atomic::AtomicU64,
}

/// The family of an image's task definition (ECS allows 255 letters, digits, `-`, `_`), and of
/// a compose task's (its services and volumes hashed after the image's digest).
pub fn family_for(base_family: &str, image: &str, services: &Services) -> String {
    let digest = image.rsplit_once("@sha256:").map(|(_, d)| d.to_string()).unwrap_or_else(|| {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        image.hash(&mut h);
        format!("{:016x}", h.finish())
    });
    let base: String = base_family.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
    let layout = match services.is_empty() {
        true => String::new(),
        false => {
            use sha2::Digest as _;
            let text = serde_json::to_string(services).expect("serializable");
            format!("-{}", &hex::encode(sha2::Sha256::digest(text.as_bytes()))[..12])
        }
    };
    format!("{}-env-{}{layout}", base.chars().take(200).collect::<String>(), &digest[..digest.len().min(16)])
}

/// What a compose task runs beside its own container: its services (images pinned) and the
/// named volumes its container mounts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Services {
    pub sidecars: Vec<agenteval_core::environment::Sidecar>,
    pub volumes: Vec<agenteval_core::environment::Volume>,
    /// The tool servers' secrets, by the variable a sidecar's compose file names
    /// (`roles.tools.secrets`): each sidecar that names one gets it from Secrets Manager as ECS
    /// starts it, so the task definition holds its name, never its value.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, String>,
}

impl Services {
    pub fn of(spec: &agenteval_core::environment::EnvSpec) -> Services {
        Services { sidecars: spec.sidecars.clone(), volumes: spec.volumes.clone(), secrets: Default::default() }
    }

    fn is_empty(&self) -> bool {
        self.sidecars.is_empty() && self.volumes.is_empty()
    }

    /// `secrets` (variable → secret name) kept for the variables a sidecar names.
    pub fn with_secrets(mut self, secrets: &std::collections::BTreeMap<String, String>) -> Services {
        let named = |var: &String| self.sidecars.iter().any(|s| s.from_run.values().any(|v| v == var));
        self.secrets = secrets.iter().filter(|(var, _)| named(var)).map(|(k, v)| (k.clone(), v.clone())).collect();
        self
    }

    /// Every named volume, once.
    fn volume_names(&self) -> Vec<String> {
        let mut names: Vec<String> = (self.volumes.iter())
            .chain(self.sidecars.iter().flat_map(|s| &s.volumes))
            .filter_map(|v| v.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// A volume's mount in a container (named volumes only: an unnamed one is the container's own).
fn mounts(volumes: &[agenteval_core::environment::Volume]) -> Vec<MountPoint> {
    volumes
        .iter()
        .filter_map(|v| {
            let name = v.name.as_ref()?;
            Some(
                MountPoint::builder()
                    .source_volume(volume_name(name))
                    .container_path(&v.target)
                    .read_only(v.read_only)
                    .build(),
            )
        })
        .collect()
}

/// A compose volume's name in the task definition (apart from agenteval's own).
fn volume_name(name: &str) -> String {
    let clean: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
    format!("task-{clean}")
}

/// A sidecar as a container of the environment's task: its image, command, variables, volumes,
/// and its healthcheck in ECS's bounds; started after the one before it (healthy, if that one
/// has a check), as compose starts them.
fn sidecar_container(
    s: &agenteval_core::environment::Sidecar,
    before: Option<&agenteval_core::environment::Sidecar>,
    arns: &std::collections::BTreeMap<String, String>,
) -> Result<ContainerDefinition> {
    let image = s.image.as_deref().ok_or_else(|| Error::internal(format!("sidecar {} has no pinned image", s.name)))?;
    let mut c = ContainerDefinition::builder()
        .name(format!("svc-{}", s.name))
        .image(image)
        .essential(false)
        .memory_reservation(128)
        .set_command(s.command.clone())
        .set_environment(Some(s.env.iter().map(|(k, v)| KeyValuePair::builder().name(k).value(v).build()).collect()))
        .set_mount_points(Some(mounts(&s.volumes)));
    for (key, var) in &s.from_run {
        if let Some(arn) = arns.get(var) {
            let secret = aws_sdk_ecs::types::Secret::builder()
                .name(key)
                .value_from(arn)
                .build()
                .map_err(|e| Error::internal(format!("secret of {}: {e}", s.name)))?;
            c = c.secrets(secret);
        }
    }
    if let Some(hc) = &s.healthcheck {
        let check = aws_sdk_ecs::types::HealthCheck::builder()
            .command("CMD-SHELL")
            .command(&hc.command)
            .interval((hc.interval_secs.round() as i32).clamp(5, 300))
            .timeout((hc.timeout_secs.round() as i32).clamp(2, 60))
            .retries((hc.retries as i32).clamp(1, 10))
            .start_period((hc.start_period_secs.round() as i32).clamp(0, 300))
            .build()
            .map_err(|e| Error::internal(format!("healthcheck of {}: {e}", s.name)))?;
        c = c.health_check(check);
    }
    if let Some(b) = before {
        c = c.depends_on(started(b)?);
    }
    Ok(c.build())
}

/// The dependency on a sidecar having started: healthy when it has a check.
fn started(s: &agenteval_core::environment::Sidecar) -> Result<ContainerDependency> {
    let condition = if s.healthcheck.is_some() { ContainerCondition::Healthy } else { ContainerCondition::Start };
    ContainerDependency::builder()
        .container_name(format!("svc-{}", s.name))
        .condition(condition)
        .build()
        .map_err(|e| Error::internal(format!("container dependency: {e}")))
}

impl TaskDefinitions {
    async fn base(&self, clients: &AwsClients, worker_def: &str) -> Result<&Base> {
        self.base
            .get_or_try_init(|| async {
                self.described.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let out = clients
                    .ecs
                    .describe_task_definition()
                    .task_definition(worker_def)
                    .send()
                    .await
                    .map_err(|e| classify(&format!("reading task definition {worker_def}"), e))?;
                let td =
                    out.task_definition().ok_or_else(|| Error::invalid(format!("no task definition {worker_def}")))?;
                let c = td
                    .container_definitions()
                    .first()
                    .ok_or_else(|| Error::invalid(format!("task definition {worker_def} has no container")))?;
                Ok(Base {
                    family: td.family().unwrap_or("agenteval-worker").to_string(),
                    execution_role: td.execution_role_arn().map(str::to_string),
                    worker_image: c.image().unwrap_or_default().to_string(),
                    logs: c.log_configuration().cloned(),
                })
            })
            .await
    }

    /// The task definition of `image`'s environments (pinned) with a compose task's `services`,
    /// registered unless it already is.
    // Long: one container list, built in the order ECS starts them.
    pub async fn for_image(
        &self,
        clients: &AwsClients,
        worker_def: &str,
        image: &str,
        services: &Services,
    ) -> Result<String> {
        let mut known = self.known.lock().await;
        let family_key = family_for("", image, services);
        if let Some(arn) = known.get(&family_key) {
            return Ok(arn.clone());
        }
        let base = self.base(clients, worker_def).await?.clone();
        let family = family_for(&base.family, image, services);
        // Registered by an earlier run: reuse it when it serves this very image, with no role.
        self.described.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(o) = clients.ecs.describe_task_definition().task_definition(&family).send().await
            && let Some(td) = o.task_definition()
            && td.task_role_arn().is_none()
            && td
                .container_definitions()
                .iter()
                .any(|c| c.name() == Some(ENV_CONTAINER) && c.image() == Some(image) && c.command() == SERVE)
            && let Some(arn) = td.task_definition_arn()
        {
            known.insert(family_key, arn.to_string());
            return Ok(arn.to_string());
        }
        let mount = |read_only| {
            MountPoint::builder().source_volume(VOLUME).container_path(VOLUME_PATH).read_only(read_only).build()
        };
        let init = ContainerDefinition::builder()
            .name(INIT_CONTAINER)
            .image(&base.worker_image)
            .essential(false)
            .memory(128)
            // The agenteval image runs as an unprivileged user; the fresh volume is root's.
            .user("0")
            .entry_point("/bin/sh")
            .command("-c")
            .command(format!("cp {WORKER_IN_IMAGE} {VOLUME_PATH}/agenteval && chmod 0755 {VOLUME_PATH}/agenteval"))
            .mount_points(mount(false))
            .set_log_configuration(base.logs.clone())
            .build();
        let (cpu, memory) = fargate_size(None, None);
        let mut main = ContainerDefinition::builder()
            .name(ENV_CONTAINER)
            .image(image)
            .essential(true)
            // A soft limit: the job's own size (a task override) bounds the task.
            .memory_reservation(256)
            .user("0")
            .set_command(Some(SERVE.iter().map(|s| s.to_string()).collect()))
            .depends_on(
                ContainerDependency::builder()
                    .container_name(INIT_CONTAINER)
                    .condition(ContainerCondition::Success)
                    .build()
                    .map_err(|e| Error::internal(format!("container dependency: {e}")))?,
            )
            .mount_points(mount(true))
            .environment(KeyValuePair::builder().name(IMAGE_ENV).value(image).build())
            .set_log_configuration(base.logs.clone());
        for m in mounts(&services.volumes) {
            main = main.mount_points(m);
        }
        // Each tool secret by its ARN, which ECS asks for.
        let mut arns = std::collections::BTreeMap::new();
        for (var, name) in &services.secrets {
            let described = clients.secrets.describe_secret().secret_id(name).send().await;
            let arn = described
                .map_err(|e| classify(&format!("looking up the tool server's secret {name}"), e))?
                .arn()
                .map(str::to_string)
                .ok_or_else(|| Error::not_found(format!("the tool server's secret {name} has no ARN")))?;
            arns.insert(var.clone(), arn);
        }
        let mut sidecars = Vec::new();
        for (i, s) in services.sidecars.iter().enumerate() {
            sidecars.push(sidecar_container(s, i.checked_sub(1).map(|j| &services.sidecars[j]), &arns)?);
            main = main.depends_on(started(s)?);
        }
        let main = main.build();
        self.registered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = clients
            .ecs
            .register_task_definition()
            .family(&family)
            .network_mode(NetworkMode::Awsvpc)
            .requires_compatibilities(Compatibility::Fargate)
            .cpu(cpu.to_string())
            .memory(memory.to_string())
            .set_execution_role_arn(base.execution_role.clone())
            .set_volumes(Some(
                std::iter::once(Volume::builder().name(VOLUME).build())
                    .chain(services.volume_names().iter().map(|n| Volume::builder().name(volume_name(n)).build()))
                    .collect(),
            ))
            .set_container_definitions(Some([init, main].into_iter().chain(sidecars).collect()))
            .send()
            .await;
        let arn = match out {
            Ok(o) => o.task_definition().and_then(|t| t.task_definition_arn()).map(str::to_string),
            // An emulator's answer the SDK cannot read (numbers for strings) still names it.
            Err(e) => match crate::sdk::unparsed_success(&e) {
                Some(v) => v["taskDefinition"]["taskDefinitionArn"].as_str().map(str::to_string),
                None => return Err(classify(&format!("registering a task definition for {image}"), e)),
            },
        }
        .ok_or_else(|| Error::internal(format!("ECS named no task definition for {image}")))?;
        tracing::info!(image, task_definition = %arn, "registered a task definition for a task image");
        known.insert(family_key, arn.clone());
        Ok(arn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_a_valid_fargate_size() {
        assert_eq!(fargate_size(None, None), (1024, 2048));
        assert_eq!(fargate_size(Some(0.25), Some(512)), (256, 512));
        assert_eq!(fargate_size(Some(0.25), Some(3000)), (512, 3072), "past 2 GiB a quarter vCPU cannot hold it");
        assert_eq!(fargate_size(Some(1.0), Some(4000)), (1024, 4096));
        assert_eq!(fargate_size(Some(3.0), Some(1024)), (4096, 8192));
        assert_eq!(fargate_size(Some(8.0), Some(20000)), (8192, 20480));
        assert_eq!(fargate_size(Some(64.0), Some(1 << 20)), (16384, 122880), "the largest when none holds it");
    }

    #[test]
    fn one_family_per_digest() {
        let none = Services::default();
        let a = family_for("agenteval-worker", "r.example/envs@sha256:0123456789abcdef0123", &none);
        assert_eq!(a, "agenteval-worker-env-0123456789abcdef");
        assert_ne!(a, family_for("agenteval-worker", "r.example/envs@sha256:ffff456789abcdef0123", &none));
        let volume =
            agenteval_core::environment::Volume { name: Some("v".into()), target: "/v".into(), read_only: false };
        let compose = Services { sidecars: vec![], volumes: vec![volume], secrets: Default::default() };
        let b = family_for("agenteval-worker", "r.example/envs@sha256:0123456789abcdef0123", &compose);
        assert!(b.starts_with(&format!("{a}-")) && b.len() == a.len() + 13, "a compose layout has its own: {b}");
    }
}
