//! `agenteval regrade RUN`: a new run that grades RUN's recorded answers again (changed or
//! added evaluators and judges) without starting any agent. The worker takes each task's
//! outcome from RUN's bundle instead of running the agent (`RunConfig::regrade`).

use std::path::PathBuf;

use agenteval_core::Error;
use agenteval_core::config::{LoadedConfig, RegradeSource, TaskFilter};
use agenteval_core::layout;
use agenteval_core::model::TaskState;
use agenteval_engine::controller;

use crate::Failure;
use crate::cli::IndexArgs;
use crate::judging;
use crate::session::{config_failure, controller_options, load_config, open_index, print_outcome, start};
use crate::telemetry::Telemetry;
use agenteval_engine::controller::start::Start;

/// Runs the regrade and prints its outcome like `submit` does.
pub async fn regrade(
    run: &str,
    sets: &[String],
    index_args: &IndexArgs,
    json: bool,
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index_args).await?;
    let run_id = judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    // Traces imported from OTLP hold answers and steps to grade; another tool's run holds its
    // own verdicts only.
    let meta: agenteval_engine::bundle::Metadata =
        agenteval_engine::bundle::read_json(located.store.as_ref(), &run_id, layout::METADATA).await?;
    if meta.imported.as_ref().is_none_or(|i| i.tool != "otlp") {
        crate::session::not_imported(located.store.as_ref(), &run_id, "regraded").await?;
    }
    if located.config.regrade.is_some() {
        return Err(Error::invalid(format!(
            "run {run_id} is itself a regrade: regrade the run it graded ({})",
            located.config.regrade.as_ref().map(|r| r.run.to_string()).unwrap_or_default()
        ))
        .into());
    }
    // The tasks with an answer to grade: those that completed (a task given up has none).
    let mut ids: Vec<String> = index
        .list_tasks(&run_id)
        .await?
        .into_iter()
        .filter(|t| t.state == TaskState::Completed)
        .map(|t| t.task_id.base().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Err(Error::invalid(format!("run {run_id} has no completed task: nothing to regrade")).into());
    }
    let mut loaded = grading_config(&located, index_args, sets)?;
    let config = &mut loaded.config;
    if config.benchmark.kind() != located.config.benchmark.kind() {
        return Err(Error::invalid(format!(
            "run {run_id} is a `{}` benchmark; the grading config's is `{}`: a regrade grades the same tasks",
            located.config.benchmark.kind(),
            config.benchmark.kind()
        ))
        .into());
    }
    // The answers are RUN's agent's, whatever the grading config says of an agent.
    config.agent = located.config.agent.clone();
    config.repetitions = located.config.repetitions;
    *config.benchmark.filter_mut() = TaskFilter { ids, tags: vec![], limit: None };
    config.name = format!("{} (regrade)", located.config.name);
    config.regrade = Some(RegradeSource { run: run_id, bundle: located.record.bundle_uri.clone() });
    let ready = start(&wiring, loaded, Start { preflight: true, ..Start::default() }).await?;
    let opts = controller_options(ready.config(), wiring.clone(), json, quiet, telemetry).await?;
    let outcome = ready.submit(opts).await?;
    if !json && !quiet {
        say!("regrade of {run_id}: `agenteval compare {run_id} {}` shows what changed", outcome.run_id);
    }
    print_outcome(&outcome, ready.config(), json, quiet)
}

/// The config the regrade grades with: `--config FILE` (with `--set`), or RUN's own recorded
/// config with `--set` applied and checked as a file would be.
fn grading_config(
    located: &controller::Located,
    index_args: &IndexArgs,
    sets: &[String],
) -> Result<LoadedConfig, Failure> {
    if let Some(file) = &index_args.config {
        return load_config(file, sets).map_err(config_failure);
    }
    let mut recorded = serde_json::to_value(&located.config).expect("configs serialize");
    if let Some(map) = recorded.as_object_mut() {
        map.remove("regrade");
    }
    // JSON is YAML: the recorded config goes through the loader like a file, so that `--set`
    // is applied and checked the same way, every problem at once.
    let text = serde_json::to_string_pretty(&recorded).expect("configs serialize");
    let name = format!("{}/{}", located.record.bundle_uri, layout::CONFIG);
    let base = PathBuf::from(&located.record.bundle_uri);
    agenteval_core::config::load_config_str(&text, &name, &base, sets).map_err(config_failure)
}
