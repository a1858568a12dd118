//! Bundle documents for tests and benchmarks that build a bundle or results by hand.

use agenteval_core::RunId;
use agenteval_core::format::Metadata;
use agenteval_core::model::RunStatus;

/// The metadata of a sealed, complete local run `name` of `benchmark` with `tasks` tasks (a mock
/// agent); callers change what their case needs.
pub fn metadata(run_id: RunId, name: &str, benchmark: &str, tasks: u64) -> Metadata {
    let now = chrono::Utc::now();
    Metadata {
        schema_version: agenteval_core::SCHEMA_VERSION.into(),
        run_id,
        name: name.into(),
        status: RunStatus::Complete,
        sealed: true,
        backend: "local".into(),
        benchmark: benchmark.into(),
        agent: "mock".into(),
        config_hash: "0".repeat(64),
        agenteval_version: "test".into(),
        git_sha: None,
        agent_git: None,
        tasks_total: tasks,
        created_at: now,
        finished_at: Some(now),
        resumed: 0,
        reason: None,
        agent_flags: vec![],
        resume_overrides: vec![],
        rerun_of: None,
        regrade_of: None,
        agent_sha256: None,
        set: None,
        budget_usd: None,
        spent_usd: None,
        calls_at_wire: None,
        dataset: None,
    }
}
