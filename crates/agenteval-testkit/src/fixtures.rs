//! Bundle documents for tests and benchmarks that build a bundle or results by hand.

use agenteval_core::RunId;
use agenteval_core::format::Metadata;
use agenteval_core::model::RunStatus;

/// The metadata of a sealed, complete local run `name` of `benchmark` with `tasks` tasks (a mock
/// agent); callers change what their case needs.
pub fn metadata(run_id: RunId, name: &str, benchmark: &str, tasks: u64) -> Metadata {
    let now = chrono::Utc::now();
    Metadata {
        sealed: true,
        backend: "local".into(),
        benchmark: benchmark.into(),
        agent: "mock".into(),
        config_hash: "0".repeat(64),
        agenteval_version: "test".into(),
        finished_at: Some(now),
        ..Metadata::new(run_id, name, RunStatus::Complete, tasks, now)
    }
}
