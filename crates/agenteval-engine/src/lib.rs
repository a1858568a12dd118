//! The run engine: the controller that turns a benchmark into jobs, the worker that runs them,
//! and everything in between (benchmarks, agents, task environments, evaluators, scorers,
//! bundles).
//!
//! It depends on `agenteval-core` for types and traits and is handed a
//! [`Resolver`](agenteval_core::traits::Resolver) that opens stores, indexes and backends; it
//! depends on no backend crate, never parses command lines and never talks to a cloud SDK.

pub mod agents;
pub mod benchmarks;
pub mod bundle;
pub mod controller;
pub mod environments;
pub mod evaluators;
pub mod isolation;
pub mod python;
pub mod rebuild;
pub mod report;
pub mod resolve;
pub mod scorers;
pub mod telemetry;
pub mod worker;

/// Version of this build, recorded in every bundle.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

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
