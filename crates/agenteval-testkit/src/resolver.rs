//! A `Resolver` for tests and benchmarks that drive a controller or a worker in this process:
//! whatever location the config names, the same store and index, one job backend (or none, for
//! a worker) and one secret store.

use std::sync::Arc;

use agenteval_core::config::RunConfig;
use agenteval_core::location::{BundleRoot, IndexLocation};
use agenteval_core::secret::Secret;
use agenteval_core::traits::{BundleStore, CloudBackend, Resolver, RunIndex, SecretStore};
use agenteval_core::{Error, Result};
use async_trait::async_trait;

/// Opens the same store, index, backend and secrets for every location.
pub struct FixedResolver {
    pub store: Arc<dyn BundleStore>,
    pub index: Arc<dyn RunIndex>,
    /// `None` for a worker, which launches no job.
    pub backend: Option<Arc<dyn CloudBackend>>,
    pub secrets: Arc<dyn SecretStore>,
}

#[async_trait]
impl Resolver for FixedResolver {
    async fn store(&self, _root: &BundleRoot) -> Result<Arc<dyn BundleStore>> {
        Ok(self.store.clone())
    }
    async fn index(&self, _at: &IndexLocation) -> Result<Arc<dyn RunIndex>> {
        Ok(self.index.clone())
    }
    async fn create_index(&self, _at: &IndexLocation) -> Result<Arc<dyn RunIndex>> {
        Ok(self.index.clone())
    }
    async fn backend(&self, _config: &RunConfig) -> Result<Arc<dyn CloudBackend>> {
        self.backend.clone().ok_or_else(|| Error::internal("this resolver launches no job"))
    }
    async fn secrets(&self, _config: &RunConfig) -> Result<Arc<dyn SecretStore>> {
        Ok(self.secrets.clone())
    }
}

/// A secret store that holds nothing: every fetch is `NotFound`.
#[derive(Debug, Default)]
pub struct NoSecrets;

#[async_trait]
impl SecretStore for NoSecrets {
    async fn fetch(&self, name: &str) -> Result<Secret> {
        Err(Error::not_found(format!("no secret {name}")))
    }
}
