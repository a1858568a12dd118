//! Wiring: the one place that maps configuration and locations to implementations
//! (`Arc<dyn BundleStore>`, `Arc<dyn RunIndex>`, `Arc<dyn CloudBackend>`), by implementing the
//! engine's [`Resolver`]. Only the binary links every backend crate, so the engine and any
//! crate that reads bundles stay free of the AWS SDK.
//!
//! A [`Wiring`] holds the AWS settings of one command (from its config, or the environment for
//! a worker or a bare `--index`); clients are built once per settings, and nothing is global.

pub mod doctor;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenteval_aws::{AwsClients, AwsSettings, DynamoDbRunIndex, EcsBackend, EcsSettings, S3BundleStore};
use agenteval_core::config::{AwsConfig, BackendId, FargateCapacity, RunConfig};
use agenteval_core::location::{BundleRoot, IndexLocation};
use agenteval_core::traits::{BundleStore, CloudBackend, Resolver, RunIndex};
use agenteval_core::{Error, Result};
use agenteval_local::{FsBundleStore, LocalProcessBackend, SqliteRunIndex};
use async_trait::async_trait;

/// Opens backends for one command.
pub struct Wiring {
    /// The agenteval binary local workers run as.
    exe: PathBuf,
    /// Settings for locations that carry none of their own (a bundle or index URI).
    aws: AwsSettings,
    clients: Mutex<HashMap<AwsSettings, Arc<AwsClients>>>,
    /// `aws.index_retention_days`: how long a DynamoDB index keeps the runs it creates.
    retention_days: Option<u32>,
}

/// The SDK settings a config's `aws` section asks for; unset fields fall back to the standard
/// chain and environment.
pub fn aws_settings(cfg: Option<&AwsConfig>) -> AwsSettings {
    cfg.map(|a| AwsSettings {
        region: a.region.clone(),
        profile: a.profile.clone(),
        endpoint_url: a.endpoint_url.clone(),
        emulator_credentials: false,
    })
    .unwrap_or_default()
}

impl Wiring {
    /// Wiring whose cloud settings come from `aws` (a config's section, or the environment
    /// alone when `None`).
    pub fn new(exe: PathBuf, aws: Option<&AwsConfig>) -> Arc<Wiring> {
        Arc::new(Wiring {
            exe,
            aws: aws_settings(aws),
            clients: Mutex::new(HashMap::new()),
            retention_days: aws.and_then(|a| a.index_retention_days),
        })
    }

    /// The AWS clients for `settings`, connected on first use.
    pub async fn clients(&self, settings: &AwsSettings) -> Arc<AwsClients> {
        if let Some(c) = self.clients.lock().unwrap_or_else(|e| e.into_inner()).get(settings) {
            return c.clone();
        }
        // Connecting reads profiles and the environment; two callers racing here build two
        // equal clients and one wins, which costs nothing but a little work.
        let c = AwsClients::connect(settings).await;
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).entry(settings.clone()).or_insert(c).clone()
    }

    async fn default_clients(&self) -> Arc<AwsClients> {
        self.clients(&self.aws).await
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
        match cfg.backend.id {
            BackendId::Local => {
                let BundleRoot::Local(root) = &cfg.storage.bundle_root else {
                    return Err(Error::invalid("the local backend needs a local bundle folder"));
                };
                Ok(Arc::new(LocalProcessBackend::new(
                    self.exe.clone(),
                    FsBundleStore::new(root),
                    cfg.backend.secrets_file.clone(),
                )))
            }
            BackendId::Aws => {
                let a = cfg.aws.as_ref().ok_or_else(|| Error::invalid("backend `aws` needs an `aws` section"))?;
                let clients = self.clients(&aws_settings(Some(a))).await;
                let BundleRoot::S3 { bucket, prefix } = &cfg.storage.bundle_root else {
                    return Err(Error::invalid("backend `aws` needs s3:// bundles"));
                };
                let store = S3BundleStore::new(clients.clone(), bucket.clone(), prefix.clone());
                // Workers reach the same region and endpoint as the controller; credentials come
                // from their task role, never from here.
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
                    launch_burst: a.launch_burst,
                    launch_per_second: a.launch_per_second,
                    // The controller's heartbeat rides on its polling loop: polls longer than 10 s
                    // would make a live controller look dead to `status` and `resume`.
                    poll: Duration::from_secs_f64(a.poll_seconds.clamp(0.05, 10.0)),
                    worker_env,
                };
                Ok(Arc::new(EcsBackend::new(clients, settings, store)))
            }
        }
    }
}
