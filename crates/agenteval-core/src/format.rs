//! The documents of a bundle that every reader needs (`metadata.json`, `manifest.json`), next to
//! [`crate::layout`]'s file names. Their fields are the on-disk format (`docs/bundle-format.md`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::RunId;
use crate::model::RunStatus;

/// `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub schema_version: String,
    pub run_id: RunId,
    pub name: String,
    /// `running` until sealed.
    pub status: RunStatus,
    pub sealed: bool,
    pub backend: String,
    pub benchmark: String,
    pub agent: String,
    pub config_hash: String,
    pub agenteval_version: String,
    pub git_sha: Option<String>,
    pub tasks_total: u64,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Times the run was resumed.
    pub resumed: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub sha256: String,
    pub size: u64,
}

/// `manifest.json`: checksum and size of every other file of the bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: String,
    pub run_id: RunId,
    pub files: BTreeMap<String, ManifestEntry>,
}
