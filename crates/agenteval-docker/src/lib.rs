//! Task environments in Docker containers (`environment.kind: docker`), through the Docker
//! Engine API (bollard, never the CLI): one container per task attempt from the task's image,
//! with its CPU and memory limits, no network unless the task asks, labels naming run, task and
//! attempt, and no host folder mounted but agenteval's launcher, read-only (files are copied in
//! and out as tar streams). Images built from a task's `environment/` folder are tagged by a
//! hash of its content, so each distinct folder is built once and reused by every task,
//! repetition and run that shares it.

mod build;
mod copy;
mod freezer;
mod launch;
mod network;
mod seccomp;
mod sidecars;
mod volumes;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agenteval_core::environment::{
    Bounded, EnvHandle, EnvSpec, ExecOutput, ExecRequest, LABEL_ATTEMPT, LABEL_RUN, LABEL_TASK, ProcessMark,
};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StartContainerOptions,
};
use futures::StreamExt;
use tokio::sync::OnceCell;

pub use build::{ImageBuild, context_hash, rebase};

/// The label every container and image agenteval makes carries.
pub const LABEL_MANAGED: &str = "agenteval.environment";

/// Docker environments on the engine `DOCKER_HOST` names (default: the local socket).
pub struct DockerEnvironment {
    docker: OnceCell<Docker>,
    /// Replaces the `FROM` of every Dockerfile (`environment.base_image`).
    base_image: Option<String>,
    /// Each live container's changes (path and kind) at its baseline: agenteval's own and an
    /// agent's setup, never counted as the agent's.
    baselines: std::sync::Mutex<HashMap<String, std::sync::Arc<HashMap<String, Seen>>>>,
    /// Each live container's processes at its first baseline (the image's, before anything of
    /// the agent's ran), by pid and start time; never the keep-alive.
    processes: std::sync::Mutex<HashMap<String, Vec<ProcessMark>>>,
    /// Each live container's default user for commands (the task's `user`), when it has one.
    users: std::sync::Mutex<HashMap<String, String>>,
    /// agenteval's launcher on this machine, mounted into every container (`launch`), once
    /// known; `None` where the engine cannot mount it.
    launcher: OnceCell<Option<std::path::PathBuf>>,
    /// The live containers the launcher is mounted in: each agent's command starts through it.
    launched: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The network of containers with internet, made (and the host closed to it) once.
    network: OnceCell<String>,
    /// The network of containers without internet whose agent reaches the model gateway.
    gateway_network: OnceCell<String>,
    /// The run's agent reaches the model gateway from inside its container.
    gateway: bool,
    /// How long an image's ENTRYPOINT may take to hand over (`environment.entrypoint_seconds`).
    handover: Duration,
    /// The egress proxy of allowlisted containers (its address, once started) and what each
    /// may reach.
    egress: OnceCell<SocketAddr>,
    allowed: agenteval_egress::Allowed,
    /// Each live container's servers let out for the tests, watched from here
    /// (`agenteval-watch`): kept until the container goes, since a watched process's changes to
    /// files wait for the watch's answer.
    watches: std::sync::Mutex<HashMap<String, std::sync::Arc<agenteval_watch::Watch>>>,
}

impl std::fmt::Debug for DockerEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerEnvironment").field("base_image", &self.base_image).finish()
    }
}

fn infra(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Transient, format!("{what}: {e}"))
}

fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}

impl DockerEnvironment {
    pub fn new(base_image: Option<String>) -> Self {
        DockerEnvironment {
            docker: OnceCell::new(),
            base_image,
            baselines: Default::default(),
            processes: Default::default(),
            users: Default::default(),
            launcher: OnceCell::new(),
            launched: Default::default(),
            network: OnceCell::new(),
            gateway_network: OnceCell::new(),
            gateway: false,
            handover: Duration::from_secs(HANDOVER_SECS),
            egress: OnceCell::new(),
            allowed: agenteval_egress::Allowed::default(),
            watches: Default::default(),
        }
    }

    /// Containers without internet are put on the gateway's network (`agenteval-tasks`), so
    /// that the agent inside reaches the model gateway, and nothing else.
    pub fn with_gateway(mut self, gateway: bool) -> Self {
        self.gateway = gateway;
        self
    }

    /// How long an image's ENTRYPOINT may take to hand over to the container's command.
    pub fn with_entrypoint_timeout(mut self, timeout: Duration) -> Self {
        self.handover = timeout;
        self
    }

    /// The engine, connected on first use with the API version both sides speak.
    async fn docker(&self) -> Result<&Docker> {
        self.docker
            .get_or_try_init(|| async {
                let d = Docker::connect_with_local_defaults()
                    .map_err(|e| infra("cannot reach the Docker engine (is dockerd running?)", e))?;
                d.negotiate_version()
                    .await
                    .map_err(|e| infra("cannot reach the Docker engine (is dockerd running?)", e))
            })
            .await
    }

    /// The image a task runs (its own `image`, or the one built from its folder), and what
    /// getting it took.
    async fn image(&self, run: &RunId, spec: &EnvSpec) -> Result<(String, String)> {
        let docker = self.docker().await?;
        if let Some(image) = &spec.image {
            if docker.inspect_image(image).await.is_err() {
                return Err(infra(
                    &format!("image {image}"),
                    "not present on this Docker engine (pull or build it first)",
                ));
            }
            return Ok((image.clone(), format!("image {image}")));
        }
        let Some(context) = &spec.context else {
            return Err(Error::invalid("the task names neither an image nor a folder to build one from"));
        };
        let build = ImageBuild::new(context, self.base_image.as_deref())?;
        let timeout = Duration::from_secs_f64(spec.build_timeout_secs.unwrap_or(600.0).clamp(1.0, 86_400.0));
        build.ensure(docker, run, timeout).await
    }
}

impl DockerEnvironment {
    /// Builds a task's image from its folder unless this engine has it (`agenteval images
    /// build`): its tag and what was done.
    pub async fn build_image(&self, context: &Path, timeout: Duration) -> Result<(String, String)> {
        let docker = self.docker().await?;
        let build = ImageBuild::new(context, self.base_image.as_deref())?;
        build.ensure(docker, &RunId::new(), timeout).await
    }

    /// The engine's version, if it answers (`agenteval doctor`).
    pub async fn engine_version(&self) -> Result<String> {
        let docker = self.docker().await?;
        let v = docker.version().await.map_err(|e| infra("cannot reach the Docker engine (is dockerd running?)", e))?;
        Ok(v.version.unwrap_or_else(|| "unknown".into()))
    }

    /// The image a task runs, and whether the engine has it now (`agenteval doctor`): its own
    /// `image`, or the tag its folder's content builds.
    pub async fn image_present(&self, spec: &EnvSpec) -> Result<(String, bool)> {
        let docker = self.docker().await?;
        let tag = match (&spec.image, &spec.context) {
            (Some(image), _) => image.clone(),
            (None, Some(context)) => ImageBuild::new(context, self.base_image.as_deref())?.tag,
            (None, None) => {
                return Err(Error::invalid("the task names neither an image nor a folder to build one from"));
            }
        };
        let present = docker.inspect_image(&tag).await.is_ok();
        Ok((tag, present))
    }

    /// Tags `local` as `reference` (`HOST/NAME:TAG`) and pushes it, with a registry user and
    /// password when one is needed.
    pub async fn push(&self, local: &str, reference: &str, credentials: Option<(String, String)>) -> Result<()> {
        let docker = self.docker().await?;
        let (repo, tag) = reference
            .rsplit_once(':')
            .filter(|(r, t)| !t.contains('/') && !r.is_empty())
            .ok_or_else(|| Error::invalid(format!("{reference} is not REPOSITORY:TAG")))?;
        let opts = bollard::query_parameters::TagImageOptionsBuilder::default().repo(repo).tag(tag).build();
        docker.tag_image(local, Some(opts)).await.map_err(|e| infra(&format!("tagging {local} as {reference}"), e))?;
        let host = repo.split('/').next().unwrap_or_default().to_string();
        let creds = credentials.map(|(username, password)| bollard::auth::DockerCredentials {
            username: Some(username),
            password: Some(password),
            serveraddress: Some(host),
            ..Default::default()
        });
        let opts = bollard::query_parameters::PushImageOptionsBuilder::default().tag(tag).build();
        let mut stream = docker.push_image(repo, Some(opts), creds);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| infra(&format!("pushing {reference}"), e))?;
            if let Some(e) = info.error_detail.and_then(|d| d.message) {
                return Err(Error::new(ErrorKind::Io, format!("pushing {reference}: {e}")));
            }
        }
        Ok(())
    }
}

/// The container's command: it only waits. Run by the image's ENTRYPOINT when it has one.
const KEEP_ALIVE: [&str; 3] = ["sh", "-c", "sleep infinity"];

/// How long an image's ENTRYPOINT has to hand over to the container's command (`exec "$@"`)
/// unless the run says (`environment.entrypoint_seconds`).
pub const HANDOVER_SECS: u64 = 60;

/// Waits until the container runs its command ([`KEEP_ALIVE`]): at once without an ENTRYPOINT,
/// else once the image's ENTRYPOINT has handed over to it. One that exits first, or never hands
/// over, makes the task `infra`, named.
async fn handed_over(docker: &Docker, id: &str, image: &str, within: Duration) -> Result<()> {
    let info = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .map_err(|e| infra("inspecting the container", e))?;
    let entrypoint = info.config.and_then(|c| c.entrypoint).unwrap_or_default();
    if entrypoint.is_empty() {
        return Ok(());
    }
    let named = entrypoint.join(" ");
    let keep_alive = KEEP_ALIVE.join(" ");
    let deadline = std::time::Instant::now() + within;
    loop {
        let info = docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| infra("inspecting the container", e))?;
        let state = info.state.unwrap_or_default();
        if state.running != Some(true) {
            let tail = container_log_tail(docker, id).await;
            return Err(Error::invalid(format!(
                "the ENTRYPOINT of {image} (`{named}`) exited with code {} before starting the container's command{}",
                state.exit_code.unwrap_or(-1),
                if tail.is_empty() { String::new() } else { format!(": {tail}") }
            )));
        }
        // The engine lists the container's processes from this machine: nothing in the image runs.
        let options = bollard::query_parameters::TopOptionsBuilder::default().ps_args("-eo pid,args").build();
        if let Ok(top) = docker.top_processes(id, Some(options)).await
            && top
                .processes
                .unwrap_or_default()
                .iter()
                .any(|p| p.last().is_some_and(|a| a.trim() == keep_alive || a.trim() == "sleep infinity"))
        {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(Error::invalid(format!(
                "the ENTRYPOINT of {image} (`{named}`) did not hand over to the container's command in {} s (it must end with `exec \"$@\"`; environment.entrypoint_seconds gives it longer)",
                within.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last lines a container wrote, on one line, at most 300 characters.
async fn container_log_tail(docker: &Docker, id: &str) -> String {
    let options = bollard::query_parameters::LogsOptionsBuilder::default().stdout(true).stderr(true).tail("5").build();
    let mut logs = docker.logs(id, Some(options));
    let mut text = String::new();
    while let Some(Ok(piece)) = logs.next().await {
        text.push_str(&String::from_utf8_lossy(&piece.into_bytes()));
    }
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect()
}

/// A container's host name from its task's id: letters, digits and `-`, at most 63, never empty.
fn hostname_of(task: &str) -> String {
    let name: String =
        task.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(63).collect();
    let name = name.trim_matches('-').to_string();
    if name.is_empty() { "task".into() } else { name }
}

/// A container's variables: the spec's, and for an allowlisted one the egress proxy's address.
fn container_env(spec: &EnvSpec, proxy: Option<SocketAddr>) -> Option<Vec<String>> {
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if let Some(p) = proxy {
        // The model gateway listens on the proxy's host address: an agent's calls go straight there.
        env.extend(agenteval_egress::proxy_env(p).into_iter().map(|(k, v)| format!("{k}={v}")));
    }
    (!env.is_empty()).then_some(env)
}

/// Every address a container has on its networks.
fn addresses(info: &bollard::models::ContainerInspectResponse) -> Vec<std::net::IpAddr> {
    let nets = info.network_settings.as_ref().and_then(|n| n.networks.clone()).unwrap_or_default();
    nets.values().filter_map(|e| e.ip_address.as_deref()?.parse().ok()).collect()
}

impl DockerEnvironment {
    /// The egress proxy for an allowlisted spec, started on the gateway network's host address
    /// and a free port of the gateway's range (the only ports its containers reach here).
    async fn egress_proxy(&self, docker: &Docker, spec: &EnvSpec) -> Result<Option<SocketAddr>> {
        if spec.allowed_hosts.is_empty() {
            return Ok(None);
        }
        let addr = self
            .egress
            .get_or_try_init(|| async {
                let net = self
                    .gateway_network
                    .get_or_try_init(|| network::ensure(docker, network::TaskNet::GatewayOnly))
                    .await?;
                let host = network::host_address(docker, net)
                    .await
                    .ok_or_else(|| Error::new(ErrorKind::Transient, "the gateway network has no host address"))?;
                for port in agenteval_core::gateway::GATEWAY_PORTS.rev() {
                    if let Ok(l) = tokio::net::TcpListener::bind((host, port)).await {
                        let at = l.local_addr().map_err(|e| Error::io("the egress proxy's address", e))?;
                        agenteval_egress::serve(l, self.allowed.clone());
                        return Ok(at);
                    }
                }
                Err(Error::new(ErrorKind::Transient, "no free port in the gateway's range for the egress proxy"))
            })
            .await?;
        Ok(Some(*addr))
    }

    /// The container's address (on its first network), once it runs.
    async fn address(&self, docker: &Docker, id: &str) -> Option<std::net::IpAddr> {
        let info = docker.inspect_container(id, None::<InspectContainerOptions>).await.ok()?;
        addresses(&info).into_iter().next()
    }

    /// agenteval's launcher on this machine, where the engine mounts this machine's files (its
    /// data root is a folder here); the engine is asked once.
    async fn launcher(&self, docker: &Docker) -> Option<std::path::PathBuf> {
        self.launcher
            .get_or_init(|| async {
                let root = docker.info().await.ok().and_then(|i| i.docker_root_dir);
                launch::host_file(root.as_deref())
            })
            .await
            .clone()
    }

    /// Removes a task's container (idempotent: one already gone, or being removed, is fine).
    async fn remove_main(&self, docker: &Docker, env: &EnvHandle) -> Result<()> {
        match docker
            .remove_container(&env.id, Some(RemoveContainerOptionsBuilder::default().force(true).v(true).build()))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // Already being removed (a second teardown racing the first).
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => Ok(()),
            Err(e) => Err(infra(&format!("removing container {}", env.id), e)),
        }
    }
}

#[async_trait]
impl Environment for DockerEnvironment {
    fn is_container(&self) -> bool {
        true
    }

    fn kind(&self) -> &str {
        "docker"
    }

    // Long: one task container made in order (image, limits, network, create, sidecars, start,
    // working folder), each failure removing what was made so far.
    async fn prepare(&self, run: &RunId, task: &TaskSpec, attempt: u32, spec: &EnvSpec) -> Result<EnvHandle> {
        let (image, note) = self.image(run, spec).await?;
        let docker = self.docker().await?;
        let labels = HashMap::from([
            (LABEL_MANAGED.to_string(), "1".to_string()),
            (LABEL_RUN.to_string(), run.to_string()),
            (LABEL_TASK.to_string(), task.id.to_string()),
            (LABEL_ATTEMPT.to_string(), attempt.to_string()),
        ]);
        let memory = spec.memory_mb.map(|m| (m.min(1 << 30) * 1024 * 1024) as i64);
        let host = HostConfig {
            memory,
            // No swap past the limit: a memory bomb is killed, not slowed down.
            memory_swap: memory,
            nano_cpus: spec.cpus.map(|c| (c.clamp(0.01, 1024.0) * 1e9) as i64),
            // With internet, on agenteval's own bridge: the host and other tasks are closed.
            // Without, on the gateway's internal network when the agent needs it, else none.
            network_mode: Some(if spec.network {
                self.network.get_or_try_init(|| network::ensure(docker, network::TaskNet::Internet)).await?.clone()
            } else if self.gateway || !spec.allowed_hosts.is_empty() {
                self.gateway_network
                    .get_or_try_init(|| network::ensure(docker, network::TaskNet::GatewayOnly))
                    .await?
                    .clone()
            } else {
                "none".into()
            }),
            // Without internet, a name lookup fails at once instead of waiting out the resolver
            // (an agent's update check or model-list fetch would cost each task seconds): the
            // gateway is reached by address.
            // (Only on a network: Docker refuses a resolver for `none`.)
            dns: (!spec.network && (self.gateway || !spec.allowed_hosts.is_empty()))
                .then(|| vec!["127.0.0.1".to_string()]),
            // tini as PID 1 reaps what the agent's commands leave behind.
            init: Some(true),
            pids_limit: Some(4096),
            security_opt: Some(seccomp::security_options(spec.ptrace)),
            ..Default::default()
        };
        let offline = host.network_mode.as_deref() == Some("none");
        let mut host = host;
        if offline {
            host.extra_hosts = Some(vec![format!("{}:127.0.1.1", hostname_of(&task.id.to_string()))]);
        }
        let task_volumes = volumes::make(docker, run, spec).await?;
        host.mounts = task_volumes.mounts(&spec.volumes);
        // A task that lets its agent trace (`allow_ptrace`) lets it reach the rest too: its pass
        // in a shared container is in doubt anyway.
        let launcher = if spec.ptrace { None } else { self.launcher(docker).await };
        if let Some(source) = &launcher {
            host.mounts.get_or_insert_with(Vec::new).push(bollard::models::Mount {
                target: Some(launch::IN_CONTAINER.into()),
                source: Some(source.display().to_string()),
                typ: Some(bollard::models::MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            });
        }
        let mut labels = labels;
        if !task_volumes.token.is_empty() {
            labels.insert(volumes::LABEL_VOLUMES_OF.to_string(), task_volumes.token.clone());
        }
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            labels: Some(labels),
            // The container only waits; every command is an exec into it. The image's ENTRYPOINT
            // runs first, with this as its arguments, as Docker and Harbor's compose run it.
            cmd: Some(KEEP_ALIVE.iter().map(|s| s.to_string()).collect()),
            working_dir: spec.workdir.clone(),
            env: container_env(spec, self.egress_proxy(docker, spec).await?),
            host_config: Some(host),
            // Loopback is not network: a container without one still resolves `localhost` and its
            // own name (Docker writes no `/etc/hosts` for a container whose network is disabled).
            hostname: offline.then(|| hostname_of(&task.id.to_string())),
            ..Default::default()
        };
        // With sidecars, the task's own network first: its containers reach each other there.
        let (body, task_net) = match spec.sidecars.is_empty() {
            true => (body, None),
            false => match sidecars::join_task_network(docker, run, body).await {
                Ok((body, net, extra)) => (body, Some((net, extra))),
                Err(e) => {
                    volumes::remove(docker, &task_volumes.token).await;
                    return Err(e);
                }
            },
        };
        let created = match docker.create_container(Some(CreateContainerOptionsBuilder::default().build()), body).await
        {
            Ok(c) => c,
            Err(e) => {
                if let Some((net, _)) = &task_net {
                    let _ = docker.remove_network(net).await;
                }
                volumes::remove(docker, &task_volumes.token).await;
                return Err(infra(&format!("creating a container of {image}"), e));
            }
        };
        let mut handle =
            EnvHandle { kind: "docker".into(), id: created.id.clone(), workdir: String::new(), notes: vec![note] };
        if launcher.is_some() {
            self.launched.lock().expect("not poisoned").insert(created.id.clone());
        }
        let started = async {
            if let Some((net, extra)) = &task_net {
                if let Some(other) = extra {
                    let request =
                        bollard::models::NetworkConnectRequest { container: created.id.clone(), ..Default::default() };
                    docker
                        .connect_network(other, request)
                        .await
                        .map_err(|e| infra(&format!("connecting to {other}"), e))?;
                }
                let notes =
                    sidecars::start(self, docker, (run, task, attempt), spec, (net, &task_volumes), &created.id)
                        .await?;
                handle.notes.extend(notes);
            }
            docker
                .start_container(&created.id, None::<StartContainerOptions>)
                .await
                .map_err(|e| infra(&format!("starting a container of {image}"), e))?;
            handed_over(docker, &created.id, &image, self.handover).await?;
            let info = docker
                .inspect_container(&created.id, None::<InspectContainerOptions>)
                .await
                .map_err(|e| infra("inspecting the container", e))?;
            let workdir =
                info.config.and_then(|c| c.working_dir).filter(|w| !w.is_empty()).unwrap_or_else(|| "/".into());
            Ok::<_, Error>(workdir)
        }
        .await;
        match started {
            Ok(workdir) => {
                let handle = EnvHandle { workdir, ..handle };
                if !spec.allowed_hosts.is_empty() {
                    match self.address(docker, &handle.id).await {
                        Some(ip) => self.allowed.set(ip, spec.allowed_hosts.clone()),
                        None => {
                            let _ = self.teardown(&handle).await;
                            return Err(Error::new(
                                ErrorKind::Transient,
                                "an allowlisted container has no address on the gateway network",
                            ));
                        }
                    }
                }
                if let Some(u) = &spec.user {
                    self.users.lock().expect("not poisoned").insert(handle.id.clone(), u.clone());
                }
                self.mark_baseline(&handle).await;
                Ok(handle)
            }
            Err(e) => {
                let _ = self.teardown(&handle).await;
                Err(e)
            }
        }
    }

    async fn exec(&self, env: &EnvHandle, req: &ExecRequest) -> Result<ExecOutput> {
        // The task's user is each command's default, not the container's: the image's
        // ENTRYPOINT runs as the image says (it may edit /etc/hosts as root), as under Harbor.
        let user = self.users.lock().expect("not poisoned").get(&env.id).cloned();
        let launched = !req.grader && self.launched.lock().expect("not poisoned").contains(&env.id);
        match (user, &req.user) {
            (Some(u), None) => {
                exec_as(self.docker().await?, env, &ExecRequest { user: Some(u), ..req.clone() }, launched).await
            }
            _ => exec_as(self.docker().await?, env, req, launched).await,
        }
    }

    async fn open_stdio(&self, env: &EnvHandle, argv: &[String]) -> Option<agenteval_core::traits::StdioPair> {
        let user = self.users.lock().expect("not poisoned").get(&env.id).cloned();
        let launched = self.launched.lock().expect("not poisoned").contains(&env.id);
        let argv = if launched { launch::wrap(argv.to_vec()) } else { argv.to_vec() };
        stdio_in(self.docker().await.ok()?, env, argv, user).await
    }

    async fn copy_in(&self, env: &EnvHandle, from: &Path, to: &str) -> Result<()> {
        copy::copy_in(self.docker().await?, env, from, to).await
    }

    async fn copy_out(&self, env: &EnvHandle, from: &str, to: &Path, max_bytes: u64) -> Result<()> {
        copy::copy_out(self.docker().await?, env, from, to, max_bytes).await
    }

    async fn teardown(&self, env: &EnvHandle) -> Result<()> {
        // A frozen process cannot die: the group goes before its container.
        self.thaw(env).await;
        self.baselines.lock().expect("not poisoned").remove(&env.id);
        self.processes.lock().expect("not poisoned").remove(&env.id);
        self.users.lock().expect("not poisoned").remove(&env.id);
        self.launched.lock().expect("not poisoned").remove(&env.id);
        let watch = self.watches.lock().expect("not poisoned").remove(&env.id);
        let docker = self.docker().await?;
        // Its sidecars and network go with it, and what it was allowed to reach.
        if let Ok(info) = docker.inspect_container(&env.id, None::<InspectContainerOptions>).await {
            for ip in addresses(&info) {
                self.allowed.forget(ip);
            }
            let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
            let removed = self.remove_main(docker, env).await;
            if let Some(net) = labels.get(sidecars::LABEL_TASK_NETWORK) {
                sidecars::remove(docker, &env.id, Some(net.clone())).await;
            }
            // Its volumes once no container of it mounts them.
            if let Some(token) = labels.get(volumes::LABEL_VOLUMES_OF) {
                volumes::remove(docker, token).await;
            }
            // Its servers are gone: the watch's thread ends.
            drop_blocking(watch);
            return removed;
        }
        let removed = self.remove_main(docker, env).await;
        drop_blocking(watch);
        removed
    }

    async fn changed_outside(&self, env: &EnvHandle) -> Vec<String> {
        let baseline = self.baselines.lock().expect("not poisoned").get(&env.id).cloned().unwrap_or_default();
        let changes = self.changes(env, Some(baseline.clone())).await;
        let mut after: Vec<String> =
            changes.into_iter().filter(|(p, seen)| baseline.get(p) != Some(seen)).map(|(p, _)| p).collect();
        // A mounted file is seen by its digest and, where the engine made its mount point in the
        // layer, there too: once.
        after.sort_unstable();
        after.dedup();
        outside(after, &env.workdir)
    }

    async fn written_bytes(&self, env: &EnvHandle) -> Option<u64> {
        // The blocks of the container's own layer, counted here when the engine keeps it on
        // this machine (the engine's size also walks the whole image, slowly under load).
        if let Some(upper) = self.upper_dir(env).await
            && let Ok(Ok(used)) = tokio::task::spawn_blocking(move || layer_blocks(&upper)).await
        {
            return Some(used);
        }
        let docker = self.docker().await.ok()?;
        let options = InspectContainerOptions { size: true };
        let info = docker.inspect_container(&env.id, Some(options)).await.ok()?;
        info.size_rw.and_then(|n| u64::try_from(n).ok())
    }

    async fn mark_baseline(&self, env: &EnvHandle) {
        let now = self.changes(env, None).await.into_iter().collect();
        self.baselines.lock().expect("not poisoned").insert(env.id.clone(), std::sync::Arc::new(now));
        // The image's own processes are those of the first baseline (as prepared): an agent's
        // setup, an earlier step's agent and a step's setup come later and are not spared.
        if self.processes.lock().expect("not poisoned").contains_key(&env.id) {
            return;
        }
        // By the shell's builtins alone: the image's programs are not the worker's to trust.
        let list = ExecRequest { user: Some("0".into()), ..ExecRequest::new(IMAGE_PROCESSES, Duration::from_secs(30)) }
            .as_grader();
        if let Ok(docker) = self.docker().await
            && let Ok(out) = exec_in(docker, env, &list).await
        {
            let marks = image_processes(&out.stdout);
            self.processes.lock().expect("not poisoned").insert(env.id.clone(), marks);
        }
    }

    fn leftovers_outlive_agent(&self, _env: &EnvHandle) -> bool {
        true
    }

    async fn freeze_all(&self, env: &EnvHandle, keep: &[ProcessMark]) -> Option<Vec<u32>> {
        let main = self.main_pid(env).await?;
        let keep = keep.to_vec();
        match tokio::task::spawn_blocking(move || freezer::freeze_all(main, &keep)).await {
            Ok(Ok(pids)) => Some(pids),
            Ok(Err(e)) => {
                tracing::warn!("the agent's processes are not frozen as a group ({e}): they are held by signals alone");
                None
            }
            Err(_) => None,
        }
    }

    async fn release(&self, env: &EnvHandle, pids: &[u32]) -> Vec<u32> {
        let Some(main) = self.main_pid(env).await else { return Vec::new() };
        let watch = self.watches.lock().expect("not poisoned").get(&env.id).cloned();
        let watch = watch.unwrap_or_else(|| {
            let (tests, logs, solution) = agenteval_core::environment::verifier_paths(&self.worker_root(env));
            let logs = logs.trim_end_matches("/verifier").to_string();
            let w = std::sync::Arc::new(agenteval_watch::Watch::new(vec![tests, logs, solution]));
            self.watches.lock().expect("not poisoned").insert(env.id.clone(), w.clone());
            w
        });
        let pids = pids.to_vec();
        let released = tokio::task::spawn_blocking(move || {
            let mut watched = Vec::new();
            for (host, inner) in freezer::held(main, &pids) {
                // Attached while frozen, let out, then watched before any code of it runs.
                match watch.add(host, move || freezer::let_out(main, host)) {
                    Ok(()) => watched.push(inner),
                    Err(e) => tracing::warn!("a server the agent left runs unwatched beside the tests ({e})"),
                }
            }
            watched
        });
        released.await.unwrap_or_default()
    }

    async fn watched(&self, env: &EnvHandle) -> Vec<(u32, String, String)> {
        let watch = self.watches.lock().expect("not poisoned").get(&env.id).cloned();
        watch.map(|w| w.take().into_iter().map(|c| (c.pid, c.command, c.what)).collect()).unwrap_or_default()
    }

    async fn thaw(&self, env: &EnvHandle) {
        if let Some(main) = self.main_pid(env).await {
            let _ = tokio::task::spawn_blocking(move || freezer::thaw(main)).await;
        }
    }

    fn processes_before_agent(&self, env: &EnvHandle) -> Vec<ProcessMark> {
        self.processes.lock().expect("not poisoned").get(&env.id).cloned().unwrap_or_default()
    }

    async fn quiesce(&self, env: &EnvHandle) -> Result<()> {
        // A restart kills every process of the container (an exec's children included, which
        // nothing else reaches) and keeps its filesystem.
        let docker = self.docker().await?;
        let options = bollard::query_parameters::RestartContainerOptionsBuilder::default().t(0).build();
        docker
            .restart_container(&env.id, Some(options))
            .await
            .map_err(|e| infra("stopping what the agent left running", e))?;
        // The image's ENTRYPOINT runs again (its services with it), as it did at the start.
        handed_over(docker, &env.id, "the task's image", self.handover).await
    }

    async fn gateway_host(&self, env: &EnvHandle) -> Option<std::net::Ipv4Addr> {
        let docker = self.docker().await.ok()?;
        let info = docker.inspect_container(&env.id, None::<InspectContainerOptions>).await.ok()?;
        let networks = info.network_settings?.networks?;
        for net in [network::TaskNet::GatewayOnly, network::TaskNet::Internet] {
            if networks.contains_key(net.name()) {
                return network::host_address(docker, net.name()).await;
            }
        }
        None
    }

    async fn service_address(&self, env: &EnvHandle, name: &str, port: u16) -> Option<std::net::SocketAddr> {
        // The firewall already lets the answers back in: the task network's making set its rules.
        let docker = self.docker().await.ok()?;
        sidecars::address(docker, &env.id, name).await.map(|ip| std::net::SocketAddr::new(ip, port))
    }

    async fn sweep(&self, run: &RunId) -> Result<usize> {
        let docker = self.docker().await?;
        let label = format!("{LABEL_RUN}={run}");
        let filters = HashMap::from([("label".to_string(), vec![label])]);
        let left = docker
            .list_containers(Some(ListContainersOptionsBuilder::default().all(true).filters(&filters).build()))
            .await
            .map_err(|e| infra("listing containers", e))?;
        let mut removed = 0;
        for c in left {
            if let Some(id) = c.id {
                self.teardown(&EnvHandle { kind: "docker".into(), id, workdir: String::new(), notes: vec![] }).await?;
                removed += 1;
            }
        }
        // Task networks of sidecar tasks whose containers were already gone.
        let nets = docker
            .list_networks(Some(
                bollard::query_parameters::ListNetworksOptionsBuilder::default().filters(&filters).build(),
            ))
            .await
            .unwrap_or_default();
        for n in nets {
            if let Some(name) = n.name {
                let _ = docker.remove_network(&name).await;
            }
        }
        volumes::remove_labelled(docker, format!("{LABEL_RUN}={run}")).await;
        Ok(removed)
    }

    async fn base_image(&self, run: &RunId, spec: &EnvSpec) -> Result<Option<(String, String)>> {
        let (tag, _) = self.image(run, spec).await?;
        let docker = self.docker().await?;
        let id = docker.inspect_image(&tag).await.ok().and_then(|i| i.id).unwrap_or_else(|| tag.clone());
        Ok(Some((tag, id)))
    }

    async fn has_image(&self, tag: &str) -> bool {
        match self.docker().await {
            Ok(docker) => build::is_recorded(docker, tag).await,
            Err(_) => false,
        }
    }

    async fn commit(&self, env: &EnvHandle, tag: &str) -> Result<()> {
        let docker = self.docker().await?;
        let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
        // The image keeps its base's entrypoint and command (the container only waited).
        let base = docker
            .inspect_container(&env.id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| infra("inspecting the container", e))?
            .image
            .unwrap_or_default();
        let base = docker.inspect_image(&base).await.ok().and_then(|i| i.config).unwrap_or_default();
        let json =
            |v: Option<Vec<String>>| serde_json::to_string(&v.unwrap_or_default()).unwrap_or_else(|_| "[]".into());
        let changes = format!("ENTRYPOINT {}\nCMD {}", json(base.entrypoint), json(base.cmd));
        let options = bollard::query_parameters::CommitContainerOptionsBuilder::default()
            .container(&env.id)
            .repo(repo)
            .tag(version)
            .pause(true)
            .changes(&changes)
            .build();
        let labels = HashMap::from([(LABEL_MANAGED.to_string(), "1".to_string())]);
        let config = bollard::models::ContainerConfig { labels: Some(labels), ..Default::default() };
        docker.commit_container(options, config).await.map_err(|e| infra(&format!("saving image {tag}"), e))?;
        build::record(docker, tag).await;
        Ok(())
    }

    async fn out_of_memory(&self, env: &EnvHandle) -> bool {
        let Ok(docker) = self.docker().await else { return false };
        let dead = docker
            .inspect_container(&env.id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.oom_killed)
            .unwrap_or(false);
        if dead {
            return true;
        }
        // A process killed inside a living container leaves only the cgroup's count (v2's
        // `memory.events`, v1's `memory.oom_control`): the engine's flag is for PID 1.
        let read = "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control";
        let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(read, Duration::from_secs(10)) }.as_grader();
        match exec_in(docker, env, &req).await {
            Ok(o) => o
                .stdout
                .lines()
                .any(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()).is_some_and(|n| n > 0)),
            Err(_) => false,
        }
    }
}

impl DockerEnvironment {
    /// The host's pid of the container's first process, while it runs.
    async fn main_pid(&self, env: &EnvHandle) -> Option<u32> {
        let docker = self.docker().await.ok()?;
        let info = docker.inspect_container(&env.id, None::<InspectContainerOptions>).await.ok()?;
        info.state?.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
    }
}

/// Ends a watch off the runtime's threads (its thread is joined).
fn drop_blocking(watch: Option<std::sync::Arc<agenteval_watch::Watch>>) {
    if let Some(w) = watch {
        tokio::task::spawn_blocking(move || drop(w));
    }
}

/// Lists the container's processes (`PID STAT-LINE`) but agenteval's keep-alive ([`KEEP_ALIVE`]:
/// the container's command, and its `sleep`), which is held with the agent's.
const IMAGE_PROCESSES: &str = r#"for p in /proc/[0-9]*; do
  read -r line 2>/dev/null < $p/stat || continue
  a=()
  mapfile -d '' -t a 2>/dev/null < $p/cmdline
  case "${a[*]}" in "sh -c sleep infinity"|"sleep infinity") continue ;; esac
  echo "${p#/proc/} $line"
done"#;

/// The image's processes from [`IMAGE_PROCESSES`]'s lines.
fn image_processes(stdout: &str) -> Vec<ProcessMark> {
    let mark = |l: &str| {
        let (pid, stat) = l.split_once(' ')?;
        let (_, _, start) = agenteval_core::environment::parse_proc_stat(stat)?;
        Some(ProcessMark { pid: pid.parse().ok()?, start })
    };
    stdout.lines().filter_map(mark).collect()
}

/// Runs a command in the container, within its timeout, keeping a bounded part of its output.
pub(crate) async fn exec_in(docker: &Docker, env: &EnvHandle, req: &ExecRequest) -> Result<ExecOutput> {
    exec_as(docker, env, req, false).await
}

/// Runs a command in a container: as the agent (through agenteval's launcher, `launch`) when
/// `launched`, else with the container's own rights.
async fn exec_as(docker: &Docker, env: &EnvHandle, req: &ExecRequest, launched: bool) -> Result<ExecOutput> {
    let secs = req.timeout.as_secs_f64().max(0.001);
    // `timeout` kills the command (and, after 2 s more, what ignores SIGTERM) inside the
    // container: an exec cannot be stopped from outside.
    let cmd = vec![
        "timeout".to_string(),
        "-k".into(),
        "2".into(),
        format!("{secs:.3}"),
        "bash".into(),
        "-c".into(),
        req.command.clone(),
    ];
    let cmd = if launched { launch::wrap(cmd) } else { cmd };
    let config = ExecConfig {
        cmd: Some(cmd),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        env: Some(req.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(req.workdir.clone().unwrap_or_else(|| env.workdir.clone())),
        user: req.user.clone(),
        ..Default::default()
    };
    let created = docker.create_exec(&env.id, config).await.map_err(|e| infra("starting a command", e))?;
    let started = docker.start_exec(&created.id, None).await.map_err(|e| infra("starting a command", e))?;
    let start = std::time::Instant::now();
    let (mut out, mut err) = (Bounded::new(req.max_output_bytes), Bounded::new(req.max_output_bytes));
    let mut timed_out = false;
    if let bollard::exec::StartExecResults::Attached { mut output, .. } = started {
        let read = async {
            while let Some(piece) = output.next().await {
                match piece {
                    Ok(bollard::container::LogOutput::StdErr { message }) => err.push(&message),
                    Ok(l) => out.push(&l.into_bytes()),
                    Err(_) => break,
                }
            }
        };
        // A backstop past the command's own timeout (a stream the engine never closes).
        if tokio::time::timeout(req.timeout + Duration::from_secs(10), read).await.is_err() {
            timed_out = true;
        }
    }
    let exit_code = docker.inspect_exec(&created.id).await.ok().and_then(|i| i.exit_code);
    // `timeout` exits 124 when it stopped the command, 137 when it had to kill it; a 137
    // before the time was up is another kill (the memory limit's), not a timeout.
    timed_out |= exit_code == Some(124) || (exit_code == Some(137) && start.elapsed().as_secs_f64() >= secs);
    Ok(ExecOutput {
        exit_code: if timed_out { None } else { exit_code },
        stdout: out.text(),
        stderr: err.text(),
        timed_out,
        dropped_bytes: out.dropped + err.dropped,
    })
}

/// Starts `argv` in the container with its input and output attached: its output (stdout
/// only; its stderr is dropped) through a pipe a task fills, its input as the engine gives it.
async fn stdio_in(
    docker: &Docker,
    env: &EnvHandle,
    argv: Vec<String>,
    user: Option<String>,
) -> Option<agenteval_core::traits::StdioPair> {
    use tokio::io::AsyncWriteExt as _;
    let config = ExecConfig {
        cmd: Some(argv),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        working_dir: Some(env.workdir.clone()),
        user,
        ..Default::default()
    };
    let created = docker.create_exec(&env.id, config).await.ok()?;
    let bollard::exec::StartExecResults::Attached { mut output, input } =
        docker.start_exec(&created.id, None).await.ok()?
    else {
        return None;
    };
    let (reader, mut writer) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        while let Some(Ok(piece)) = output.next().await {
            if let bollard::container::LogOutput::StdOut { message } = piece
                && writer.write_all(&message).await.is_err()
            {
                break;
            }
        }
    });
    Some((Box::new(reader), Box::new(input)))
}

impl DockerEnvironment {
    /// The container's changes against its image: each path with what it is now (so a file the
    /// baseline held that changed again is seen). Read from the container's own layer when the
    /// engine keeps it on this machine (overlay2: a walk of 100,000 files takes a tenth of the
    /// time the engine's `diff` does), else as the engine lists them. Against a `baseline`, only
    /// the files it holds are looked at closely (the rest are new whatever they hold).
    async fn changes(
        &self,
        env: &EnvHandle,
        baseline: Option<std::sync::Arc<HashMap<String, Seen>>>,
    ) -> Vec<(String, Seen)> {
        let Ok(docker) = self.docker().await else { return Vec::new() };
        let mut found = if let Some(upper) = self.upper_dir(env).await
            && let Ok(Ok(found)) = tokio::task::spawn_blocking(move || layer_changes(&upper, baseline.as_deref())).await
        {
            found
        } else {
            match docker.container_changes(&env.id).await {
                Ok(Some(changes)) => changes.into_iter().map(|c| (c.path, Seen::Kind(c.kind as i32))).collect(),
                _ => Vec::new(),
            }
        };
        found.extend(mounted_files(docker, env).await);
        // agenteval's own, read-only: its mount point in the layer is no one's change.
        found.retain(|(path, _)| path != launch::IN_CONTAINER);
        found
    }
}

/// The files mounted into a container rather than kept in its layer (Docker's `/etc/hosts`,
/// `/etc/resolv.conf`, `/etc/hostname`, and any file bound in), each by a digest of what it holds
/// now: the layer's changes never show them, yet the tests read them (a service name pointed at
/// a fake). Read through the engine's archive API, never a program in the container.
async fn mounted_files(docker: &Docker, env: &EnvHandle) -> Vec<(String, Seen)> {
    use sha2::{Digest as _, Sha256};
    let mut paths = vec!["/etc/hosts".to_string(), "/etc/resolv.conf".to_string(), "/etc/hostname".to_string()];
    if let Ok(info) = docker.inspect_container(&env.id, None::<InspectContainerOptions>).await {
        for m in info.mounts.unwrap_or_default() {
            if let Some(d) = m.destination.filter(|d| !paths.contains(d)) {
                paths.push(d);
            }
        }
    }
    let mut out = Vec::new();
    for path in paths {
        let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default().path(&path).build();
        let mut stream = docker.download_from_container(&env.id, Some(options));
        let mut tar = Vec::new();
        let mut whole = true;
        while let Some(piece) = stream.next().await {
            match piece {
                // A mounted folder is as big as it is: its changes are its own (a volume's).
                Ok(bytes) if tar.len() + bytes.len() <= MOUNTED_FILE_CAP => tar.extend_from_slice(&bytes),
                Ok(_) | Err(_) => {
                    whole = false;
                    break;
                }
            }
        }
        if !whole || tar.is_empty() {
            continue;
        }
        let mut archive = tar::Archive::new(tar.as_slice());
        let Ok(mut entries) = archive.entries() else { continue };
        let Some(Ok(mut entry)) = entries.next() else { continue };
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let mut bytes = Vec::new();
        if std::io::Read::read_to_end(&mut entry, &mut bytes).is_ok() {
            let d = Sha256::digest(&bytes);
            let mut first = [0u8; 8];
            first.copy_from_slice(&d[..8]);
            out.push((path, Seen::Mounted(u64::from_le_bytes(first))));
        }
    }
    out
}

/// The most of one mounted file read for its digest.
const MOUNTED_FILE_CAP: usize = 4 << 20;

impl DockerEnvironment {
    /// The container's own layer, where the engine keeps it on this machine (overlay2).
    async fn upper_dir(&self, env: &EnvHandle) -> Option<std::path::PathBuf> {
        let docker = self.docker().await.ok()?;
        docker
            .inspect_container(&env.id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.graph_driver)
            .filter(|g| g.name == "overlay2")
            .and_then(|g| g.data.get("UpperDir").map(std::path::PathBuf::from))
            .filter(|p| p.is_dir())
    }
}

/// The disk a container's layer takes: its files' blocks (a sparse file costs what it uses).
fn layer_blocks(upper: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0u64;
    let mut todo = vec![upper.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let m = e.metadata()?;
            if m.is_dir() {
                todo.push(e.path());
            }
            total = total.saturating_add(m.blocks() * 512);
        }
    }
    Ok(total)
}

/// What a changed path was seen as: a file by its length, inode, time and mode; a folder (which
/// changes with what is in it, listed itself); a deletion; or the engine's kind of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Seen {
    File(u64, u64, i64, i64, u32),
    /// A file not in the baseline: new, whatever it holds (not looked at).
    New,
    Folder,
    Deleted,
    Kind(i32),
    /// A file mounted into the container, by a digest of its bytes.
    Mounted(u64),
}

/// Every path of a container's overlay layer (`upper`), with what it is now; links are not
/// followed. A file is looked at (a `stat`) only when it is in `baseline` (or there is none:
/// the baseline is being taken); the entry's type comes with the listing.
fn layer_changes(upper: &Path, baseline: Option<&HashMap<String, Seen>>) -> std::io::Result<Vec<(String, Seen)>> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let mut out = Vec::new();
    let mut todo = vec![upper.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let t = e.file_type()?;
            let path = e.path();
            let inside = path.strip_prefix(upper).map(|p| p.to_string_lossy()).unwrap_or_default();
            let inside = ["/", inside.as_ref()].concat();
            let what = if t.is_dir() {
                todo.push(path);
                Seen::Folder
            } else if t.is_char_device() && e.metadata()?.rdev() == 0 {
                Seen::Deleted
            } else if baseline.is_none_or(|b| b.contains_key(&inside)) {
                let m = e.metadata()?;
                Seen::File(m.len(), m.ino(), m.mtime(), m.mtime_nsec(), m.mode())
            } else {
                Seen::New
            };
            out.push((inside, what));
        }
    }
    Ok(out)
}

/// Where nothing a test reads lives: changes there say nothing about the tests' tools. Homes
/// (a `.pth` in root's user site-packages, a `.bashrc`) are not among them.
const SCRATCH: &[&str] = &["/tmp", "/var/tmp", "/run", "/logs", "/tests", "/solution", "/dev", "/proc", "/sys"];

/// Of a container's changed paths, those outside `workdir` and the scratch places, without the
/// folders Docker lists only because something below them changed.
fn outside(mut paths: Vec<String>, workdir: &str) -> Vec<String> {
    // `p` is `dir` or below it (no allocation: this runs for every changed path).
    fn under(p: &str, dir: &str) -> bool {
        let dir = dir.trim_end_matches('/');
        !dir.is_empty() && p.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
    // Parents are found before the scratch places are left out: `/var` listed only because
    // `/var/tmp` changed is no change of its own.
    paths.sort_unstable();
    let parents: Vec<bool> = (0..paths.len())
        .map(|i| paths.get(i + 1).is_some_and(|next| under(next, &paths[i]) && next.len() > paths[i].len()))
        .collect();
    paths
        .into_iter()
        .zip(parents)
        .filter(|(p, parent)| !parent && !under(p, workdir) && !SCRATCH.iter().any(|s| under(p, s)))
        .map(|(p, _)| p)
        .collect()
}

#[cfg(test)]
mod changes_tests {
    #[test]
    fn only_files_outside_the_working_folder_and_scratch_count_and_not_their_parent_folders() {
        let paths = [
            "/usr",
            "/usr/local",
            "/usr/local/bin",
            "/usr/local/bin/python3",
            "/var",
            "/var/tmp",
            "/var/tmp/codex.sock",
            "/app",
            "/app/x.py",
            "/tmp/a",
            "/root/.local/lib/python3.11/site-packages/x.pth",
            "/solution/solve.sh",
            "/etc/ld.so.preload",
        ];
        let got = super::outside(paths.iter().map(|p| p.to_string()).collect(), "/app");
        assert_eq!(
            got,
            ["/etc/ld.so.preload", "/root/.local/lib/python3.11/site-packages/x.pth", "/usr/local/bin/python3"]
        );
    }
}

#[cfg(test)]
mod env_tests {
    use super::*;

    #[test]
    fn the_image_processes_are_read_by_pid_and_start_time_and_the_keep_alive_is_not_listed() {
        let out = "1 1 (docker-init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5000 1 1\n7 7 (a b) c) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5100 1 1\nnoise\n";
        let marks = image_processes(out);
        assert_eq!(marks, vec![ProcessMark { pid: 1, start: 5000 }, ProcessMark { pid: 7, start: 5100 }]);
        // The script itself: valid bash that leaves the keep-alive out.
        let out = std::process::Command::new("bash").args(["-n", "-c", IMAGE_PROCESSES]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(IMAGE_PROCESSES.contains(&KEEP_ALIVE.join(" ")), "the keep-alive is the one left out");
    }

    #[test]
    fn a_hostname_is_a_plain_name() {
        assert_eq!(super::hostname_of("fix_python.bug-2"), "fix-python-bug-2");
        assert_eq!(super::hostname_of("__"), "task");
    }

    #[test]
    fn an_allowlisted_container_reaches_the_gateway_past_its_proxy() {
        let spec = agenteval_core::environment::EnvSpec::default();
        let env = super::container_env(&spec, Some("172.20.0.1:47600".parse().unwrap())).unwrap();
        assert!(env.contains(&"HTTPS_PROXY=http://172.20.0.1:47600".to_string()), "{env:?}");
        assert!(env.contains(&"NO_PROXY=localhost,127.0.0.1,172.20.0.1".to_string()), "{env:?}");
    }
}
