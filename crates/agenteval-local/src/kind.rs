//! The `local` backend as the binary registers it: jobs as worker processes of this machine,
//! secrets from the environment and `backend.secrets_file`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agenteval_core::config::RunConfig;
use agenteval_core::location::BundleRoot;
use agenteval_core::traits::{BackendKind, Check, CloudBackend, SecretStore};
use agenteval_core::{Error, Result};
use async_trait::async_trait;

use crate::{FsBundleStore, LocalProcessBackend, LocalSecrets};

/// `exec` starts every local worker by executing the binary instead of forking it from the
/// run's fork server (`fork`, the default).
pub const WORKER_START: &str = "AGENTEVAL_WORKER_START";

/// `backend.id: local`, the embedded default.
#[derive(Debug, Clone)]
pub struct LocalBackendKind {
    /// The agenteval binary the workers run as.
    exe: PathBuf,
}

impl LocalBackendKind {
    pub fn new(exe: PathBuf) -> Self {
        LocalBackendKind { exe }
    }
}

#[async_trait]
impl BackendKind for LocalBackendKind {
    fn id(&self) -> &'static str {
        "local"
    }

    fn about(&self) -> &'static str {
        "worker processes on this machine"
    }

    fn on_this_machine(&self) -> bool {
        true
    }

    fn validate(&self, cfg: &RunConfig) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if !cfg.storage.bundle_root.is_local() {
            p.push((
                "/storage/bundle_root".into(),
                "the local backend needs a local bundle folder (its workers write to it)".into(),
            ));
        }
        if !cfg.backend.options.is_empty() {
            p.push(("/backend/options".into(), "the local backend takes no options".into()));
        }
        p
    }

    async fn jobs(&self, cfg: &RunConfig) -> Result<Arc<dyn CloudBackend>> {
        let BundleRoot::Local(root) = &cfg.storage.bundle_root else {
            return Err(Error::invalid("the local backend needs a local bundle folder"));
        };
        let backend = LocalProcessBackend::new(self.exe.clone(), FsBundleStore::new(root))
            .memory_floor(cfg.backend.min_free_memory_mb);
        // Workers start by fork from one server (an `exec` of the binary costs as much as a small
        // job's work); `AGENTEVAL_WORKER_START=exec` starts each by `exec`, as before.
        let by_exec = match std::env::var(WORKER_START).as_deref() {
            Err(_) | Ok("fork") => false,
            Ok("exec") => true,
            Ok(other) => return Err(Error::invalid(format!("{WORKER_START} is `fork` or `exec`, not `{other}`"))),
        };
        Ok(Arc::new(if by_exec { backend } else { backend.forking(vec!["worker".into(), "--fork-server".into()]) }))
    }

    async fn secrets(&self, cfg: &RunConfig) -> Result<Arc<dyn SecretStore>> {
        Ok(Arc::new(LocalSecrets::new(cfg.backend.secrets_file.clone())))
    }

    async fn check(&self, cfg: &RunConfig, secrets: &[(String, String)]) -> Vec<Check> {
        let mut checks = vec![Check::new("backend", Ok("local: no cloud resources needed".into()))];
        if let Some(root) = cfg.storage.bundle_root.local_path() {
            checks.push(Check::new(format!("bundle root {}", root.display()), creatable_folder(root)));
        }
        let store = LocalSecrets::new(cfg.backend.secrets_file.clone());
        for (name, user) in secrets {
            let r = match store.fetch(name).await {
                Ok(_) => Ok(format!("found (for the {user})")),
                Err(e) => Err(format!("{e} (for the {user})")),
            };
            checks.push(Check::new(format!("secret {name}"), r));
        }
        checks
    }

    /// Every secret the workers will fetch must exist before anything starts: a missing key is
    /// the user's to fix, not a run that fails task by task. Values are read and dropped at once.
    async fn preflight(&self, cfg: &RunConfig, secrets: &[(String, String)]) -> Result<()> {
        let store = LocalSecrets::new(cfg.backend.secrets_file.clone());
        let mut missing = Vec::new();
        for (name, user) in secrets {
            if let Err(e) = store.fetch(name).await {
                missing.push(format!("{e} (needed by the {user})"));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{}; set it in the environment or in backend.secrets_file, or name another secret in `secrets`",
            missing.join("; ")
        )))
    }
}

/// Whether `dir` is, or can be created as, a folder agenteval can write: the nearest part of
/// the path that exists must be a folder that is not read-only.
fn creatable_folder(dir: &Path) -> std::result::Result<String, String> {
    let Some(existing) = dir.ancestors().find(|a| a.exists()) else {
        return Err("no part of the path exists".into());
    };
    if !existing.is_dir() {
        return Err(format!("{} is not a folder", existing.display()));
    }
    match std::fs::metadata(existing) {
        Ok(m) if m.permissions().readonly() => Err(format!("{} is read-only", existing.display())),
        Ok(_) if existing == dir => Ok("writable folder".into()),
        Ok(_) => Ok(format!("will be created in {}", existing.display())),
        Err(e) => Err(format!("{}: {e}", existing.display())),
    }
}
