//! Task environments on Fargate, each an ECS task of its own: the task's image (its task
//! definition, `task_images`: no task role, `agenteval env serve` as its entry), on the
//! security groups of its network mode, sized as the task asks. Its server dials this worker
//! back and proves the launch's token (`agenteval-envlink`); the worker drives it from its own
//! ECS task, so the agent's container holds none of the worker's credentials or keys and
//! reaches only what its groups allow.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use agenteval_core::config::{AwsConfig, EnvironmentGroups, FargateCapacity, Reach};
use agenteval_core::environment::EnvSpec;
use agenteval_core::model::TaskSpec;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use agenteval_envlink::{Launched, Launcher, Listener};
use async_trait::async_trait;
use aws_sdk_ecs::types::{
    AssignPublicIp, AwsVpcConfiguration, CapacityProviderStrategyItem, ContainerOverride, KeyValuePair, LaunchType,
    NetworkConfiguration, Tag, TaskOverride,
};

use crate::sdk::{AwsClients, classify, unparsed_success};
use crate::task_images::{ENV_CONTAINER, TASK_DEFINITION_ENV, fargate_size};

/// How long an environment may take to start (its image pulled) and dial in.
const READY: Duration = Duration::from_secs(900);
/// How often a launch not yet dialed in is looked at (a task that stopped fails it at once).
const LOOK: Duration = Duration::from_secs(3);

/// Launches a job's environments as ECS tasks and stops them.
pub struct EnvTasks {
    clients: Arc<AwsClients>,
    cluster: String,
    task_definition: String,
    subnets: Vec<String>,
    groups: EnvironmentGroups,
    assign_public_ip: bool,
    spot: bool,
    address: Ipv4Addr,
    listener: Listener,
    /// The egress proxy of `allowlist` environments (started for the first), what each may
    /// reach by its address, and each launch's address.
    proxy: tokio::sync::OnceCell<std::net::SocketAddr>,
    allowed: agenteval_egress::Allowed,
    addresses: std::sync::Mutex<std::collections::HashMap<String, std::net::IpAddr>>,
}

/// `startedBy` of a run's environments (ECS allows 36 characters), apart from its jobs'.
fn started_by(run: &RunId) -> String {
    format!("env-{}", run.to_string().replace('-', ""))
}

impl EnvTasks {
    /// The environments of the job this worker runs: its task definition from the backend's
    /// variable, the network from the run's `aws` section, this worker's address from the ECS
    /// task metadata.
    pub async fn for_worker(clients: Arc<AwsClients>, aws: &AwsConfig) -> Result<EnvTasks> {
        let task_definition = std::env::var(TASK_DEFINITION_ENV).map_err(|_| {
            Error::invalid(format!(
                "this worker was started without {TASK_DEFINITION_ENV}: its backend runs no environments"
            ))
        })?;
        let address = own_address().await?;
        let listener = Listener::bind(address.into(), agenteval_core::gateway::GATEWAY_PORTS).await?;
        Ok(EnvTasks {
            clients,
            cluster: aws.cluster.clone().ok_or_else(|| Error::invalid("aws.cluster is not set"))?,
            task_definition,
            subnets: aws.subnets.clone(),
            groups: aws.environment_security_groups.clone(),
            assign_public_ip: aws.assign_public_ip,
            spot: aws.capacity == FargateCapacity::FargateSpot,
            address,
            listener,
            proxy: tokio::sync::OnceCell::new(),
            allowed: agenteval_egress::Allowed::default(),
            addresses: Default::default(),
        })
    }

    /// The egress proxy, on this worker's address and a port its environments reach.
    async fn proxy(&self) -> Result<std::net::SocketAddr> {
        let at = self
            .proxy
            .get_or_try_init(|| async {
                for port in agenteval_core::gateway::GATEWAY_PORTS.rev() {
                    if let Ok(l) = tokio::net::TcpListener::bind((self.address, port)).await {
                        let at = l.local_addr().map_err(|e| Error::io("the egress proxy's address", e))?;
                        agenteval_egress::serve(l, self.allowed.clone());
                        return Ok(at);
                    }
                }
                Err(Error::new(ErrorKind::Transient, "no free port in the workers' range for the egress proxy"))
            })
            .await?;
        Ok(*at)
    }

    fn overrides(&self, id: &str, token: &str, spec: &EnvSpec) -> TaskOverride {
        let var = |k: &str, v: String| KeyValuePair::builder().name(k).value(v).build();
        let (cpu, memory) = fargate_size(spec.cpus, spec.memory_mb);
        TaskOverride::builder()
            .container_overrides(
                ContainerOverride::builder()
                    .name(ENV_CONTAINER)
                    .environment(var(agenteval_envlink::DIAL_ENV, self.listener.addr().to_string()))
                    .environment(var(agenteval_envlink::ID_ENV, id.into()))
                    .environment(var(agenteval_envlink::TOKEN_ENV, token.into()))
                    .build(),
            )
            .cpu(cpu.to_string())
            .memory(memory.to_string())
            .build()
    }

    /// One RunTask of the environment (launch `id`), retried while ECS says it is busy; its ARN.
    /// The launch's id is the idempotency token: a retried call never starts a second one.
    async fn run_task(
        &self,
        id: &str,
        run: &RunId,
        task: &TaskSpec,
        groups: &[String],
        overrides: TaskOverride,
    ) -> Result<String> {
        let vpc = AwsVpcConfiguration::builder()
            .set_subnets(Some(self.subnets.clone()))
            .set_security_groups(Some(groups.to_vec()))
            .assign_public_ip(if self.assign_public_ip { AssignPublicIp::Enabled } else { AssignPublicIp::Disabled })
            .build()
            .map_err(|e| Error::invalid(format!("network configuration: {e}")))?;
        let mut backoff = Duration::from_millis(500);
        for attempt in 1..=6 {
            let mut req = self
                .clients
                .ecs
                .run_task()
                .cluster(&self.cluster)
                .task_definition(&self.task_definition)
                .count(1)
                .network_configuration(NetworkConfiguration::builder().awsvpc_configuration(vpc.clone()).build())
                .overrides(overrides.clone())
                .started_by(started_by(run))
                .client_token(id)
                .tags(Tag::builder().key("agenteval:run").value(run.to_string()).build())
                .tags(Tag::builder().key("agenteval:task").value(task.id.to_string()).build());
            req = if self.spot {
                let fargate_spot = CapacityProviderStrategyItem::builder().capacity_provider("FARGATE_SPOT").weight(1);
                req.capacity_provider_strategy(
                    fargate_spot.build().map_err(|e| Error::invalid(format!("capacity provider: {e}")))?,
                )
            } else {
                req.launch_type(LaunchType::Fargate)
            };
            let what = format!("starting task {}'s environment", task.id);
            let (arns, failures) = match crate::ecs::run_task_answer(req.send().await, &what) {
                Ok(answer) => answer,
                Err(err) => {
                    if err.kind() == ErrorKind::Transient && attempt < 6 {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(20));
                        continue;
                    }
                    return Err(err);
                }
            };
            if let Some(arn) = arns.into_iter().next() {
                return Ok(arn);
            }
            if crate::ecs::retryable_launch_failure(&failures) && attempt < 6 {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(20));
                continue;
            }
            return Err(Error::new(
                ErrorKind::Io,
                format!("ECS did not start task {}'s environment: {failures}", task.id),
            ));
        }
        Err(Error::new(ErrorKind::Transient, format!("ECS kept refusing task {}'s environment", task.id)))
    }

    /// Why the environment's ECS task stopped, if it did.
    async fn stopped(&self, arn: &str) -> Option<String> {
        let out = self.clients.ecs.describe_tasks().cluster(&self.cluster).tasks(arn).send().await;
        let (status, reason) = match out {
            Ok(o) => {
                let t = o.tasks().first()?;
                (t.last_status().unwrap_or_default().to_string(), t.stopped_reason().unwrap_or_default().to_string())
            }
            Err(e) => {
                let v = unparsed_success(&e)?;
                let t = &v["tasks"][0];
                (t["lastStatus"].as_str()?.to_string(), t["stoppedReason"].as_str().unwrap_or_default().to_string())
            }
        };
        (status == "STOPPED").then_some(reason)
    }
}

#[async_trait]
impl Launcher for EnvTasks {
    fn kind(&self) -> &str {
        "fargate"
    }

    async fn launch(&self, run: &RunId, task: &TaskSpec, _attempt: u32, spec: &EnvSpec) -> Result<Launched> {
        let reach = Reach::of(spec);
        let (groups, field) = self.groups.of(reach);
        if groups.is_empty() {
            return Err(Error::invalid(format!(
                "task {}'s environment needs {field}: set it to the security groups its network mode may use (the stack's outputs name them)",
                task.id
            )));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let token = agenteval_envlink::random();
        let mut pending = self.listener.expect(&id, &token);
        let arn = self.run_task(&id, run, task, groups, self.overrides(&id, &token, spec)).await?;
        let started = tokio::time::Instant::now();
        let link = loop {
            tokio::select! {
                link = pending.link() => break link?,
                _ = tokio::time::sleep(LOOK) => {}
            }
            if let Some(reason) = self.stopped(&arn).await {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("task {}'s environment (ECS task {arn}) stopped before it was ready: {reason}", task.id),
                ));
            }
            if started.elapsed() > READY {
                let _ = self.stop(&arn).await;
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "task {}'s environment (ECS task {arn}) did not dial in within {} s",
                        task.id,
                        READY.as_secs()
                    ),
                ));
            }
        };
        let note = format!(
            "environment: ECS task {arn} of {}, on {field}, ready in {:.1} s",
            self.task_definition,
            started.elapsed().as_secs_f64()
        );
        // An allowlisted environment reaches its hosts through this worker's egress proxy, known
        // there by the address its link came from.
        let mut env = std::collections::BTreeMap::new();
        if reach == Reach::Allowlist {
            let Some(peer) = link.peer() else {
                let _ = self.stop(&arn).await;
                return Err(Error::internal("the environment's link has no address to allow its hosts for"));
            };
            let proxy = match self.proxy().await {
                Ok(p) => p,
                Err(e) => {
                    let _ = self.stop(&arn).await;
                    return Err(e);
                }
            };
            self.allowed.set(peer.ip(), spec.allowed_hosts.clone());
            self.addresses.lock().expect("not poisoned").insert(arn.clone(), peer.ip());
            env.extend(agenteval_egress::proxy_env(proxy));
        }
        Ok(Launched { id: arn, link, notes: vec![note], env })
    }

    async fn stop(&self, id: &str) -> Result<()> {
        if let Some(ip) = self.addresses.lock().expect("not poisoned").remove(id) {
            self.allowed.forget(ip);
        }
        let out = self
            .clients
            .ecs
            .stop_task()
            .cluster(&self.cluster)
            .task(id)
            .reason("agenteval: the task attempt ended")
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) if unparsed_success(&e).is_some() => Ok(()),
            Err(e) => {
                let err = classify(&format!("stopping environment {id}"), e);
                if matches!(err.kind(), ErrorKind::NotFound | ErrorKind::Invalid) { Ok(()) } else { Err(err) }
            }
        }
    }

    async fn sweep(&self, run: &RunId) -> Result<usize> {
        let out = self
            .clients
            .ecs
            .list_tasks()
            .cluster(&self.cluster)
            .started_by(started_by(run))
            .send()
            .await
            .map_err(|e| classify("listing a run's environments", e))?;
        let arns: Vec<String> = out.task_arns().to_vec();
        for arn in &arns {
            self.stop(arn).await?;
        }
        Ok(arns.len())
    }

    fn worker_address(&self) -> Option<Ipv4Addr> {
        Some(self.address)
    }
}

/// This worker's address in its task's network, from the ECS task metadata endpoint (v4).
async fn own_address() -> Result<Ipv4Addr> {
    let uri = std::env::var("ECS_CONTAINER_METADATA_URI_V4").map_err(|_| {
        Error::invalid("ECS_CONTAINER_METADATA_URI_V4 is not set: this worker is not in an ECS task, and its environments could not reach it")
    })?;
    let fail = |e: String| Error::new(ErrorKind::Io, format!("reading this task's address from {uri}: {e}"));
    let client =
        reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| fail(e.to_string()))?;
    let v: serde_json::Value = client
        .get(&uri)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| fail(e.to_string()))?
        .json()
        .await
        .map_err(|e| fail(e.to_string()))?;
    v["Networks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["IPv4Addresses"].as_array().into_iter().flatten())
        .find_map(|a| a.as_str()?.parse().ok())
        .ok_or_else(|| fail(format!("no IPv4 address in {v}")))
}
