//! The `aws` backend as the binary registers it: jobs as ECS Fargate tasks, secrets from
//! Secrets Manager, and the checks of every resource a run needs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agenteval_core::config::{FargateCapacity, IndexLocation, RunConfig};
use agenteval_core::location::BundleRoot;
use agenteval_core::traits::{BackendKind, Check, CloudBackend, Deployed, Environment, SecretStore};
use agenteval_core::{Error, Result};
use async_trait::async_trait;

use crate::doctor::{DoctorInput, run_checks};
use crate::sdk::{AwsSettings, ClientCache};
use crate::stack::StackProfile;
use crate::{EcsBackend, EcsSettings, S3BundleStore, SecretsManager};

/// How the stack's settings reach a config that lacks them.
const NO_STACK: &str = "set it, or let the stack fill it in: `agenteval aws deploy` or `agenteval aws use STACK` remembers a deployed stack's settings";

/// `backend.id: aws`.
#[derive(Debug, Clone)]
pub struct EcsBackendKind {
    clients: Arc<ClientCache>,
}

impl EcsBackendKind {
    /// Clients come from `clients`, shared with the command's stores and index.
    pub fn new(clients: Arc<ClientCache>) -> Self {
        EcsBackendKind { clients }
    }
}

#[async_trait]
impl BackendKind for EcsBackendKind {
    fn id(&self) -> &'static str {
        "aws"
    }

    fn about(&self) -> &'static str {
        "ECS Fargate tasks"
    }

    /// `AGENTEVAL_AWS_INDEX`, else the stack profile's table, else `agenteval-runs`; said with
    /// where it came from and how to choose another.
    fn default_index(&self) -> (IndexLocation, String) {
        if let Some(at) = std::env::var("AGENTEVAL_AWS_INDEX").ok().and_then(|u| u.parse().ok()) {
            return (at, "named by AGENTEVAL_AWS_INDEX".into());
        }
        match StackProfile::current() {
            Ok(Some((p, path))) => {
                let table =
                    p.settings.iter().find_map(|s| s.strip_prefix("storage.index=")).and_then(|u| u.parse().ok());
                if let Some(at) = table {
                    return (
                        at,
                        format!("the table of {}; AGENTEVAL_AWS_INDEX or --index names another", p.source(&path)),
                    );
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("{e}"),
        }
        (
            IndexLocation::DynamoDb { table: "agenteval-runs".into() },
            "the default table of backend `aws`, no stack profile chosen: `agenteval aws deploy` or `agenteval aws use STACK` \
             remembers a stack's table, AGENTEVAL_AWS_INDEX=dynamodb://TABLE or --index names one"
                .into(),
        )
    }

    /// The stack profile in use (`aws deploy`, `aws use`, `AGENTEVAL_STACK_PROFILE`).
    fn deployed(&self) -> Option<Deployed> {
        match StackProfile::current() {
            Ok(Some((p, path))) => Some(Deployed { source: p.source(&path), settings: p.settings_now() }),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        }
    }

    fn validate(&self, cfg: &RunConfig) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = Vec::new();
        if cfg.backend.secrets_file.is_some() {
            p.push((
                "/backend/secrets_file".into(),
                "only the local backend reads a secrets file; on AWS secrets come from Secrets Manager".into(),
            ));
        }
        if !cfg.backend.options.is_empty() {
            p.push(("/backend/options".into(), "backend `aws` takes its settings from the `aws` section".into()));
        }
        match &cfg.aws {
            None => p.push(("/backend/id".into(), format!("backend `aws` requires an `aws` section ({NO_STACK})"))),
            Some(a) => {
                for (field, ok) in [
                    ("cluster", a.cluster.is_some()),
                    ("task_definition", a.task_definition.is_some()),
                    ("subnets", !a.subnets.is_empty()),
                    ("security_groups", !a.security_groups.is_empty()),
                ] {
                    if !ok {
                        p.push((format!("/aws/{field}"), format!("backend `aws` requires `aws.{field}` ({NO_STACK})")));
                    }
                }
                if a.launch_per_second <= 0.0 || a.launch_burst == 0 {
                    p.push(("/aws/launch_per_second".into(), "launch pacing must allow at least one launch".into()));
                }
            }
        }
        if cfg.storage.bundle_root.is_local() {
            p.push((
                "/storage/bundle_root".into(),
                "backend `aws` needs `s3://bucket/prefix` bundles (Fargate workers have no shared disk)".into(),
            ));
        }
        if !matches!(cfg.storage.index, Some(IndexLocation::DynamoDb { .. })) {
            p.push(("/storage/index".into(), "backend `aws` needs a `dynamodb://table` index".into()));
        }
        p
    }

    async fn jobs(&self, cfg: &RunConfig) -> Result<Arc<dyn CloudBackend>> {
        let a = cfg.aws.as_ref().ok_or_else(|| Error::invalid("backend `aws` needs an `aws` section"))?;
        let clients = self.clients.get(&AwsSettings::of(Some(a))).await;
        let BundleRoot::S3 { bucket, prefix } = &cfg.storage.bundle_root else {
            return Err(Error::invalid("backend `aws` needs s3:// bundles"));
        };
        let store = S3BundleStore::new(clients.clone(), bucket.clone(), prefix.clone());
        // Workers reach the same region and endpoint as the controller; credentials come from
        // their task role, never from here.
        let mut worker_env = BTreeMap::new();
        if let Some(r) = &clients.region {
            worker_env.insert("AWS_REGION".to_string(), r.clone());
        }
        if let Some(e) = &clients.endpoint_url {
            worker_env.insert("AWS_ENDPOINT_URL".to_string(), e.clone());
        }
        let settings = EcsSettings {
            cluster: a.cluster.clone().ok_or_else(|| Error::invalid("aws.cluster is not set"))?,
            task_definition: a
                .task_definition
                .clone()
                .ok_or_else(|| Error::invalid("aws.task_definition is not set"))?,
            container_name: a.container_name.clone(),
            subnets: a.subnets.clone(),
            security_groups: a.security_groups.clone(),
            assign_public_ip: a.assign_public_ip,
            spot: a.capacity == FargateCapacity::FargateSpot,
            spot_fallback: a.spot_fallback,
            launch_burst: a.launch_burst,
            launch_per_second: a.launch_per_second,
            // The controller's heartbeat rides on its polling loop: polls longer than 10 s would
            // make a live controller look dead to `status` and `resume`.
            poll: Duration::from_secs_f64(a.poll_seconds.clamp(0.05, 10.0)),
            worker_env,
            image_repository: a.image_repository.clone(),
        };
        Ok(Arc::new(EcsBackend::new(clients, settings, store)))
    }

    async fn secrets(&self, cfg: &RunConfig) -> Result<Arc<dyn SecretStore>> {
        Ok(Arc::new(SecretsManager::new(self.clients.get(&AwsSettings::of(cfg.aws.as_ref())).await)))
    }

    async fn check(&self, cfg: &RunConfig, secrets: &[(String, String)]) -> Vec<Check> {
        let clients = self.clients.get(&AwsSettings::of(cfg.aws.as_ref())).await;
        run_checks(clients, &doctor_input(cfg, secrets)).await
    }

    /// The cheap checks that concern launching (cluster, task definition and its container): a
    /// launch that cannot work is a usage error naming the resource, not a run whose every task
    /// is charged with it. Secrets and the environments' groups are `doctor`'s: the controller
    /// reads no secret on AWS, and a group missing fails only the tasks of its network mode.
    async fn preflight(&self, cfg: &RunConfig, _secrets: &[(String, String)]) -> Result<()> {
        let clients = self.clients.get(&AwsSettings::of(cfg.aws.as_ref())).await;
        let input = DoctorInput { environment_groups: None, ..doctor_input(cfg, &[]) };
        let checks = run_checks(clients, &input).await;
        let failed: Vec<&Check> = checks
            .iter()
            .filter(|c| !c.ok && (c.name.starts_with("cluster") || c.name.starts_with("task definition")))
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(Error::invalid(launch_problem(&failed))) }
    }

    /// Each environment an ECS task of the job's image with no role, on its network mode's
    /// security groups, dialing this worker back.
    async fn image_environments(&self, cfg: &RunConfig) -> Result<Arc<dyn Environment>> {
        let a = cfg.aws.as_ref().ok_or_else(|| Error::invalid("backend `aws` needs an `aws` section"))?;
        let clients = self.clients.get(&AwsSettings::of(Some(a))).await;
        let tasks = crate::env_tasks::EnvTasks::for_worker(clients, a).await?;
        Ok(Arc::new(agenteval_envlink::LinkedEnvironment::new(Arc::new(tasks))))
    }
}

/// What `doctor` looks at for `cfg`; `secrets` are the names its workers will fetch.
fn doctor_input(cfg: &RunConfig, secrets: &[(String, String)]) -> DoctorInput {
    let a = cfg.aws.clone().unwrap_or_default();
    DoctorInput {
        bucket: match &cfg.storage.bundle_root {
            BundleRoot::S3 { bucket, .. } => Some(bucket.clone()),
            BundleRoot::Local(_) => None,
        },
        table: match cfg.storage.index_location() {
            IndexLocation::DynamoDb { table } => Some(table),
            IndexLocation::Sqlite(_) => None,
        },
        cluster: a.cluster.clone(),
        task_definition: a.task_definition.clone(),
        container_name: a.container_name.clone(),
        subnets: a.subnets.clone(),
        security_groups: a.security_groups.clone(),
        secrets: secrets.iter().map(|(name, _)| name.clone()).collect(),
        image_repository: a.image_repository.clone(),
        // Tasks in their own images act in environment tasks, on these groups.
        environment_groups: (a.image_repository.is_some() || !a.environment_security_groups.is_empty())
            .then(|| a.environment_security_groups.clone()),
    }
}

/// The failed launch checks in one line, each cause said once with the resources it hit.
fn launch_problem(failed: &[&Check]) -> String {
    let mut causes: Vec<(&str, Vec<&str>)> = Vec::new();
    for c in failed {
        match causes.iter_mut().find(|(d, _)| *d == c.detail) {
            Some((_, names)) => names.push(&c.name),
            None => causes.push((&c.detail, vec![&c.name])),
        }
    }
    let said: Vec<String> = causes.iter().map(|(d, names)| format!("{}: {d}", names.join(" and "))).collect();
    // An unreachable endpoint is not a wrong cluster name: the detail names its own fix.
    let fix = if failed.iter().all(|c| c.detail.starts_with("cannot reach AWS")) {
        ""
    } else {
        " (fix aws.cluster / aws.task_definition)"
    };
    format!("cannot launch on ECS: {}{fix}", said.join("; "))
}
