//! Chooses implementations from configuration: the one place that maps names and URIs to
//! `Arc<dyn BundleStore>`, `Arc<dyn RunIndex>` and `Arc<dyn CloudBackend>`.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use agenteval_core::config::RunConfig;
use agenteval_core::traits::{BundleStore, CloudBackend, RunIndex};
use agenteval_core::{Error, Result, RunId};
use agenteval_local::{FsBundleStore, LocalProcessBackend, SqliteRunIndex};

fn is_remote(uri: &str) -> bool {
    uri.contains("://")
}

fn unsupported(uri: &str) -> Error {
    Error::invalid(format!(
        "`{uri}`: only local paths are supported by this build (the AWS backend is not available yet)"
    ))
}

/// The bundle store for a bundle root (a folder).
pub fn store_for_root(root: &Path) -> Result<Arc<dyn BundleStore>> {
    let s = root.to_string_lossy();
    if is_remote(&s) {
        return Err(unsupported(&s));
    }
    Ok(Arc::new(FsBundleStore::new(root)))
}

pub fn store_for(cfg: &RunConfig) -> Result<Arc<dyn BundleStore>> {
    store_for_root(&cfg.storage.bundle_root)
}

/// Splits a bundle URI (`/path/runs/<run_id>`) into its store and run id.
pub fn store_from_bundle_uri(uri: &str) -> Result<(Arc<dyn BundleStore>, RunId)> {
    if is_remote(uri) {
        return Err(unsupported(uri));
    }
    let p = PathBuf::from(uri.trim_end_matches('/'));
    let run = p
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::invalid(format!("`{uri}` is not a bundle path")))
        .and_then(|n| {
            RunId::from_str(n)
                .map_err(|_| Error::invalid(format!("`{uri}` does not end in a run id")))
        })?;
    let root = p.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok((store_for_root(&root)?, run))
}

/// The URI workers use to open the index.
pub fn index_uri(cfg: &RunConfig) -> String {
    cfg.storage.index_path().display().to_string()
}

pub fn index_from_uri(uri: &str) -> Result<Arc<dyn RunIndex>> {
    if is_remote(uri) {
        return Err(unsupported(uri));
    }
    Ok(Arc::new(SqliteRunIndex::open(Path::new(uri))?))
}

pub fn index_for(cfg: &RunConfig) -> Result<Arc<dyn RunIndex>> {
    index_from_uri(&index_uri(cfg))
}

/// The backend named by `backend.id`. `exe` is the agenteval binary workers run as.
pub fn backend_for(cfg: &RunConfig, exe: &Path) -> Result<Arc<dyn CloudBackend>> {
    match cfg.backend.id.as_str() {
        "local" => {
            let root = cfg.storage.bundle_root.to_string_lossy().to_string();
            if is_remote(&root) {
                return Err(unsupported(&root));
            }
            Ok(Arc::new(LocalProcessBackend::new(
                exe.to_path_buf(),
                FsBundleStore::new(&cfg.storage.bundle_root),
                cfg.backend.secrets_file.clone(),
            )))
        }
        "aws" => Err(Error::invalid(
            "backend `aws` is not available in this build yet",
        )),
        other => Err(Error::invalid(format!("unknown backend `{other}`"))),
    }
}
