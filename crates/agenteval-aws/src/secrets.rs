//! Secrets from AWS Secrets Manager, fetched once per name per worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agenteval_core::secret::Secret;
use agenteval_core::traits::SecretStore;
use agenteval_core::{Error, Result};
use async_trait::async_trait;

use crate::sdk::{AwsClients, classify};

/// Reads `GetSecretValue` by name; a value is cached for the life of the store (one worker), so
/// a job of many tasks asks once.
pub struct SecretsManager {
    clients: Arc<AwsClients>,
    cache: Mutex<HashMap<String, Secret>>,
    calls: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SecretsManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsManager").field("cached", &self.cache.lock().map(|c| c.len()).unwrap_or(0)).finish()
    }
}

impl SecretsManager {
    pub fn new(clients: Arc<AwsClients>) -> Self {
        SecretsManager { clients, cache: Mutex::new(HashMap::new()), calls: Default::default() }
    }

    /// `GetSecretValue` calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait]
impl SecretStore for SecretsManager {
    async fn fetch(&self, name: &str) -> Result<Secret> {
        if let Some(s) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Ok(s.clone());
        }
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = self
            .clients
            .secrets
            .get_secret_value()
            .secret_id(name)
            .send()
            .await
            .map_err(|e| classify(&format!("reading secret `{name}`"), e))?;
        let value = out
            .secret_string()
            .map(str::to_string)
            .or_else(|| out.secret_binary().map(|b| String::from_utf8_lossy(b.as_ref()).into_owned()))
            .ok_or_else(|| Error::not_found(format!("secret `{name}` has no value")))?;
        let secret = Secret::new(value);
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), secret.clone());
        Ok(secret)
    }
}
