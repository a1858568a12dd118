//! A job's context for the stages' unit tests: a run's config, the folder store and SQLite
//! index in a temporary folder, the config's benchmark and agent, and the environment the test
//! gives (the testkit's scripted one, as a rule).

use std::sync::Arc;

use agenteval_core::config::load_config_str;
use agenteval_core::model::{JobSpec, TaskSpec};
use agenteval_core::secret::Redactor;
use agenteval_core::traits::Environment;
use agenteval_core::{JobId, RunId, SCHEMA_VERSION};

use super::attempt::Attempt;
use super::ctx::Ctx;

/// A context for a job of a run whose config is `body` (a mock agent on a toy benchmark unless
/// it says), acting in `env`; the folder holding its store and index lives as long as it.
pub(super) fn ctx(body: &str, env: Option<Arc<dyn Environment>>) -> (Ctx, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let text = if body.contains("benchmark:") {
        format!("name: unit\n{body}")
    } else {
        format!("name: unit\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: mock\n{body}")
    };
    let config = load_config_str(&text, "unit.yaml", dir.path(), &[]).unwrap().config;
    let run_id = RunId::new();
    let redactor = Redactor::new();
    let agent = crate::agents::agent_from_config(&config, None, &redactor).unwrap();
    let job = JobSpec {
        schema_version: SCHEMA_VERSION.into(),
        run_id,
        job_id: JobId::numbered(0, 1),
        attempt: 1,
        tasks: vec![],
        epoch: 0,
        bundle_uri: dir.path().display().to_string(),
        index_uri: dir.path().join("index.sqlite").display().to_string(),
        env: Default::default(),
        image: None,
        ledger: None,
        tool_secrets: Default::default(),
    };
    let ctx = Ctx {
        run_id,
        job,
        store: Arc::new(agenteval_local::FsBundleStore::new(dir.path().join("runs"))),
        index: Arc::new(agenteval_local::SqliteRunIndex::open(&dir.path().join("index.sqlite")).unwrap()),
        benchmark: crate::benchmarks::benchmark_from_config(&config.benchmark).unwrap(),
        needs: agent.needs(),
        agent,
        evaluators: vec![],
        secrets: vec![],
        redactor,
        traceparent: None,
        journal: None,
        judge_secrets: vec![],
        tool_secrets: Vec::new(),
        environment: env,
        in_task_images: false,
        live: Default::default(),
        snapshots: Default::default(),
        lease_seen: std::sync::Mutex::new(None),
        _fetched_cassettes: None,
        gateway: None,
        cassettes: None,
        config,
    };
    (ctx, dir)
}

/// A task from its JSON.
pub(super) fn task(json: serde_json::Value) -> TaskSpec {
    serde_json::from_value(json).unwrap()
}

/// A fresh attempt's record.
pub(super) fn attempt() -> Attempt {
    Attempt::new("started".into())
}

/// An agent that completed with the answer `"a"`.
pub(super) fn completed() -> agenteval_core::model::AgentResult {
    agenteval_core::model::AgentResult {
        fault: None,
        success: true,
        final_answer: Some(serde_json::json!("a")),
        error: None,
        total_cost_usd: 0.0,
        total_tokens: 0,
        wall_seconds: 0.1,
        terminated_by: agenteval_core::model::TerminatedBy::Completed,
        steps: 1,
        cost_unknown: false,
    }
}
