//! Wiring: the one place that maps configuration and locations to implementations
//! (`Arc<dyn BundleStore>`, `Arc<dyn RunIndex>`, `Arc<dyn CloudBackend>`, `Arc<dyn
//! Environment>`), by implementing the
//! engine's [`Resolver`]. Only the binary links every backend crate, so the engine and any
//! crate that reads bundles stay free of the AWS SDK.
//!
//! A [`Wiring`] holds the AWS settings of one command (from its config, or the environment for
//! a worker or a bare `--index`); clients are built once per settings, and nothing is global.

pub mod doctor;
pub mod images;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agenteval_aws::{AwsSettings, ClientCache, DynamoDbRunIndex, EcsBackendKind, S3BundleStore};
use agenteval_core::config::{AwsConfig, EnvironmentConfig, EnvironmentKind, RunConfig};
use agenteval_core::location::{BundleRoot, IndexLocation};
use agenteval_core::traits::{BackendKind, BundleStore, CloudBackend, Environment, Resolver, RunIndex, SecretStore};
use agenteval_core::{Error, Result};
use agenteval_local::{FsBundleStore, LocalBackendKind, SqliteRunIndex};
use async_trait::async_trait;

/// Every backend this build can run jobs on, one line each: adding a backend is its crate
/// (implementing `BackendKind`) and a line here. The first is the default.
#[rustfmt::skip] // one line a backend, however short the list
fn registry(exe: &Path, aws: &Arc<ClientCache>) -> Vec<Arc<dyn BackendKind>> {
    vec![
        Arc::new(LocalBackendKind::new(exe.to_path_buf())),
        Arc::new(EcsBackendKind::new(aws.clone())),
    ]
}

/// The task environments this build has besides the engine's own `workspace`, one line each.
#[rustfmt::skip]
fn environment_of(kind: EnvironmentKind, settings: &EnvironmentConfig) -> Option<Arc<dyn Environment>> {
    match kind {
        EnvironmentKind::Docker => Some(Arc::new(
            agenteval_docker::DockerEnvironment::new(settings.base_image.clone()).with_gateway(settings.gateway).with_entrypoint_timeout(settings.entrypoint_timeout()),
        )),
        _ => None,
    }
}

/// The registered backends, for checks that build nothing (config validation, `--help`).
fn kinds() -> Vec<Arc<dyn BackendKind>> {
    registry(Path::new(""), &Arc::default())
}

/// Parses `--backend`: one of the registered ids, each shown with what it runs on.
pub fn backend_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        kinds().iter().map(|k| clap::builder::PossibleValue::new(k.id()).help(k.about())).collect::<Vec<_>>(),
    )
}

/// The index a read command uses when neither `--index` nor `--config` names one: the
/// default of `--backend`'s kind, else of the default backend; with how it was chosen.
pub fn default_index(backend: Option<&str>) -> Result<(IndexLocation, String)> {
    let kinds = kinds();
    let kind = match backend {
        None => kinds.first(),
        Some(id) => kinds.iter().find(|k| k.id() == id),
    };
    kind.map(|k| k.default_index()).ok_or_else(|| Error::invalid(unknown_backend(backend.unwrap_or_default(), &kinds)))
}

/// What the deployment of the backend a config (read so far, as JSON) names supplies for the
/// fields it leaves out: its source and settings ([`BackendKind::deployed`]).
pub fn deployed_settings(config: &serde_json::Value) -> Option<(String, Vec<String>)> {
    let id = config.pointer("/backend/id").and_then(|v| v.as_str())?;
    let kinds = kinds();
    let d = kinds.iter().find(|k| k.id() == id)?.deployed()?;
    Some((d.source, d.settings))
}

/// Config problems about the backend: an unknown `backend.id` (with the known ones), else what
/// the chosen backend's own `validate` finds. Run by the loader, so each comes with its position.
pub fn backend_problems(cfg: &RunConfig) -> Vec<(String, String)> {
    let kinds = kinds();
    match kinds.iter().find(|k| k.id() == cfg.backend.id.as_str()) {
        Some(k) => k.validate(cfg),
        None => vec![("/backend/id".into(), unknown_backend(cfg.backend.id.as_str(), &kinds))],
    }
}

fn unknown_backend(id: &str, kinds: &[Arc<dyn BackendKind>]) -> String {
    let known: Vec<&str> = kinds.iter().map(|k| k.id()).collect();
    let hint = agenteval_core::config::did_you_mean(id, known.iter().copied())
        .map(|k| format!("did you mean `{k}`? "))
        .unwrap_or_default();
    format!("unknown backend `{id}` ({hint}this build has: {})", known.join(", "))
}

/// Opens backends for one command.
pub struct Wiring {
    /// Settings for locations that carry none of their own (a bundle or index URI).
    aws: AwsSettings,
    clients: Arc<ClientCache>,
    /// `aws.index_retention_days`: how long a DynamoDB index keeps the runs it creates.
    retention_days: Option<u32>,
    backends: Vec<Arc<dyn BackendKind>>,
}

impl Wiring {
    /// Wiring whose cloud settings come from `aws` (a config's section, or the environment
    /// alone when `None`); `exe` is the agenteval binary local workers run as.
    pub fn new(exe: PathBuf, aws: Option<&AwsConfig>) -> Arc<Wiring> {
        let clients = Arc::new(ClientCache::default());
        Arc::new(Wiring {
            aws: match aws {
                Some(_) => AwsSettings::of(aws),
                None => agenteval_aws::stack::settings_without_config(),
            },
            backends: registry(&exe, &clients),
            clients,
            retention_days: aws.and_then(|a| a.index_retention_days),
        })
    }

    /// The registered backend `cfg.backend.id` names.
    pub fn kind(&self, cfg: &RunConfig) -> Result<Arc<dyn BackendKind>> {
        let id = cfg.backend.id.as_str();
        self.backends
            .iter()
            .find(|k| k.id() == id)
            .cloned()
            .ok_or_else(|| Error::invalid(unknown_backend(id, &self.backends)))
    }

    /// The gateway's config for `upstream`, with the Amazon Bedrock client its `bedrock` asks
    /// for (the AWS credential chain of this command's settings).
    pub async fn gateway_config(
        &self,
        upstream: &agenteval_core::config::Upstream,
        keys: Vec<(&'static str, agenteval_core::secret::Secret)>,
    ) -> Result<agenteval_gateway::GatewayConfig> {
        let mut config = agenteval_gateway::GatewayConfig::new(upstream, keys)?;
        if let Some(b) = &upstream.bedrock {
            config = config.with_host(self.model_host(b).await?);
        }
        Ok(config)
    }

    /// The index at `at`, checked to be there: a read command's (a DynamoDB table that does not
    /// exist is `NotFound` before anything is read from it).
    pub async fn index_there(&self, at: &IndexLocation) -> Result<Arc<dyn RunIndex>> {
        if let IndexLocation::DynamoDb { table } = at {
            let index = DynamoDbRunIndex::new(self.default_clients().await, table);
            index.exists().await?;
            return Ok(Arc::new(index));
        }
        self.index(at).await
    }

    async fn default_clients(&self) -> Arc<agenteval_aws::AwsClients> {
        self.clients.get(&self.aws).await
    }
}

#[async_trait]
impl Resolver for Wiring {
    async fn store(&self, root: &BundleRoot) -> Result<Arc<dyn BundleStore>> {
        Ok(match root {
            BundleRoot::Local(dir) => Arc::new(FsBundleStore::new(dir)),
            BundleRoot::S3 { bucket, prefix } => {
                Arc::new(S3BundleStore::new(self.default_clients().await, bucket.clone(), prefix.clone()))
            }
        })
    }

    async fn index(&self, at: &IndexLocation) -> Result<Arc<dyn RunIndex>> {
        Ok(match at {
            IndexLocation::Sqlite(path) => Arc::new(SqliteRunIndex::open_existing(path)?),
            IndexLocation::DynamoDb { table } => Arc::new(DynamoDbRunIndex::new(self.default_clients().await, table)),
        })
    }

    async fn create_index(&self, at: &IndexLocation) -> Result<Arc<dyn RunIndex>> {
        Ok(match at {
            IndexLocation::Sqlite(path) => Arc::new(SqliteRunIndex::open(path)?),
            IndexLocation::DynamoDb { table } => Arc::new(
                DynamoDbRunIndex::new(self.default_clients().await, table).with_retention_days(self.retention_days),
            ),
        })
    }

    async fn backend(&self, cfg: &RunConfig) -> Result<Arc<dyn CloudBackend>> {
        self.kind(cfg)?.jobs(cfg).await
    }

    async fn secrets(&self, cfg: &RunConfig) -> Result<Arc<dyn SecretStore>> {
        self.kind(cfg)?.secrets(cfg).await
    }

    async fn environment(&self, kind: EnvironmentKind, settings: &EnvironmentConfig) -> Result<Arc<dyn Environment>> {
        environment_of(kind, settings)
            .ok_or_else(|| Error::invalid(format!("this build has no `{}` environments", kind.as_str())))
    }

    async fn image_environments(&self, cfg: &RunConfig) -> Result<Arc<dyn Environment>> {
        self.kind(cfg)?.image_environments(cfg).await
    }

    async fn gateway(
        &self,
        upstream: &agenteval_core::config::Upstream,
        keys: Vec<(&'static str, agenteval_core::secret::Secret)>,
    ) -> Result<Option<Arc<dyn agenteval_core::gateway::ModelGateway>>> {
        let gateway_config = self.gateway_config(upstream, keys).await?;
        Ok(Some(Arc::new(agenteval_gateway::Gateway::start(gateway_config, 0).await?)))
    }

    async fn model_host(
        &self,
        b: &agenteval_core::config::BedrockEndpoint,
    ) -> Result<Arc<dyn agenteval_core::gateway::ModelHost>> {
        let host = agenteval_aws::BedrockHost::connect(&self.aws, b.region.as_deref(), b.endpoint_url.as_deref());
        Ok(Arc::new(host.await))
    }

    fn task_image(&self, spec: &agenteval_core::environment::EnvSpec, settings: &EnvironmentConfig) -> Result<String> {
        match (&spec.image, &spec.context) {
            (Some(image), _) => Ok(image.clone()),
            (None, Some(context)) => {
                Ok(agenteval_docker::ImageBuild::new(context, settings.base_image.as_deref())?.tag)
            }
            (None, None) => Err(Error::invalid("the task names neither an image nor a folder to build one from")),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The backend's problems come from the registry at load, with their positions, once each.
    #[test]
    fn backend_problems_are_the_registered_kinds_own() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "backend:\n  id: lcoal\n",
                "c.yaml:6:7: unknown backend `lcoal` (did you mean `local`? this build has: local, aws)",
            ),
            (
                "storage:\n  bundle_root: s3://b/runs\n  index: dynamodb://t\n",
                "c.yaml:6:16: the local backend needs a local bundle folder",
            ),
            (
                "backend:\n  id: aws\n  secrets_file: s.env\naws:\n  cluster: c\n  task_definition: t\n  subnets: [subnet-1]\n  security_groups: [sg-1]\nstorage:\n  bundle_root: s3://b/runs\n  index: dynamodb://t\n",
                "c.yaml:7:17: only the local backend reads a secrets file",
            ),
            ("backend:\n  options: {x: 1}\n", "c.yaml:6:12: the local backend takes no options"),
        ];
        std::fs::write(dir.path().join("s.env"), "").unwrap();
        for (body, want) in cases {
            let path = dir.path().join("c.yaml");
            std::fs::write(&path, format!("name: t\nbenchmark: {{kind: toy, size: 2}}\nagent:\n  kind: mock\n{body}"))
                .unwrap();
            let err = crate::session::load_config(&path, &[]).unwrap_err();
            let shown = err.to_string();
            assert!(shown.contains(want), "want {want} in:\n{shown}");
            assert_eq!(err.problems.len(), 1, "{shown}");
        }
    }
}
