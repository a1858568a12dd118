//! The heart of agenteval: domain types, backend traits, run configuration and typed errors.
//!
//! This crate performs no network I/O and knows nothing of AWS, OpenTelemetry or the command
//! line; every backend (local, AWS) and every front end builds on the types defined here.

pub mod config;
pub mod cost;
pub mod environment;
pub mod error;
pub mod format;
pub mod gateway;
pub mod history;
pub mod ids;
pub mod layout;
pub mod lines;
pub mod location;
pub mod model;
pub mod rewards;
pub mod secret;
pub mod tamper;
pub mod taskpack;
pub mod traits;

pub use error::{Error, ErrorKind, Result};
pub use ids::{JobId, RunId, TaskId};

/// Version of every JSON document agenteval writes (bundle files, job specs, task results).
/// Readers accept documents with the same major version.
pub const SCHEMA_VERSION: &str = "1.2";

/// Where agenteval keeps what it fetched (installed agents' packages, Harbor datasets):
/// `$AGENTEVAL_CACHE_DIR`, else `$XDG_CACHE_HOME/agenteval`, else `~/.cache/agenteval`.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(d) = std::env::var_os("AGENTEVAL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("agenteval");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache/agenteval"),
        None => std::env::temp_dir().join("agenteval-cache"),
    }
}
