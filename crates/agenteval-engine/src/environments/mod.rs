//! Task environments in the engine: which one a run's tasks get (`environment.kind`, or the
//! benchmark's choice), the `workspace` implementation (a folder, no Docker), and what the
//! worker does with any of them: a snapshot of the starting state at prepare and the agent's
//! patch against it at the end (`snapshot`), the listed artifacts, and the sweep of what killed
//! workers left.

pub mod files;
pub mod here;
mod host;
pub mod leftovers;
pub mod snapshot;
pub mod socket;
pub mod workspace;

use std::path::Path;
use std::sync::Arc;

use agenteval_core::config::{EnvironmentKind, RunConfig};
use agenteval_core::traits::{EnvSession, Environment, Resolver};
use agenteval_core::{Error, Result};

/// The environment kind the run's tasks get (`auto`: the benchmark's choice).
pub fn kind_of(config: &RunConfig) -> EnvironmentKind {
    match config.environment.kind {
        EnvironmentKind::Auto => config.benchmark.default_environment(),
        k => k,
    }
}

/// The run's environments, if its tasks have any: the engine's own `workspace`, or what the
/// binary registered for the kind (`docker`).
/// `gateway`: its containers need their way to the model gateway (the agent calls its model from
/// inside, or the tests call a judge; `agents::access::container_reaches_gateway`).
pub async fn open(config: &RunConfig, resolver: &dyn Resolver, gateway: bool) -> Result<Option<Arc<dyn Environment>>> {
    Ok(match kind_of(config) {
        EnvironmentKind::None | EnvironmentKind::Auto => None,
        EnvironmentKind::Workspace => Some(Arc::new(workspace::WorkspaceEnvironment::for_run(config))),
        k => {
            let mut settings = config.environment.clone();
            settings.gateway = gateway;
            Some(resolver.environment(k, &settings).await?)
        }
    })
}

/// Waits until the environment passes its task's healthcheck, as Harbor's: the command every
/// interval, each try within its timeout, failures in the start period not counted, then at
/// most `retries` failures; `Err` (the task's `infra`) quotes the last try.
pub async fn healthy(s: &EnvSession, hc: &agenteval_core::environment::Healthcheck) -> Result<()> {
    use agenteval_core::environment::ExecRequest;
    use std::time::{Duration, Instant};
    let started = Instant::now();
    let mut failures = 0;
    let interval = Duration::from_secs_f64(hc.interval_secs.clamp(0.05, 3600.0));
    loop {
        let req = ExecRequest::new(hc.command.clone(), Duration::from_secs_f64(hc.timeout_secs.clamp(0.1, 3600.0)))
            .as_grader();
        let out = s.env.exec(&s.handle, &req).await?;
        if out.ok() {
            return Ok(());
        }
        if started.elapsed().as_secs_f64() >= hc.start_period_secs {
            failures += 1;
        }
        if failures > hc.retries {
            let said = format!("{}{}", out.stdout, out.stderr);
            let said = said.trim();
            let tail: String = said.chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
            return Err(Error::invalid(format!(
                "the environment's healthcheck `{}` failed {failures} time(s){}: {tail}",
                hc.command,
                if out.timed_out { " (timed out)" } else { "" }
            )));
        }
        tokio::time::sleep(interval).await;
    }
}

pub(crate) use agenteval_core::environment::shell_quote as quote;

/// Copies `paths` (relative to the working folder) out of the environment into `into`, within
/// `max_bytes` in all; says what it left out.
pub async fn artifacts(session: &EnvSession, paths: &[String], into: &Path, max_bytes: u64) -> Vec<String> {
    let mut notes = Vec::new();
    let mut left = max_bytes;
    for p in paths {
        let from = if p.starts_with('/') {
            p.clone()
        } else {
            format!("{}/{p}", session.handle.workdir.trim_end_matches('/'))
        };
        // At its own path under `artifacts/` (`out/report.json`, `logs/agent/codex.jsonl`): the
        // copy lands in the folder of its parent.
        let rel = p.trim_matches('/');
        // (Only its plain parts: `..` never leads out of the artifacts folder.)
        let parent = rel.rsplit_once('/').map_or("", |(parent, _)| parent);
        let dest = into.join(
            Path::new(parent)
                .components()
                .filter_map(|c| match c {
                    std::path::Component::Normal(n) => Some(n),
                    _ => None,
                })
                .collect::<std::path::PathBuf>(),
        );
        match session.env.copy_out(&session.handle, &from, &dest, left).await {
            Ok(()) => left = left.saturating_sub(crate::isolation::disk::usage(&dest, left).bytes),
            Err(e) => notes.push(format!("artifact {p} not kept: {e}")),
        }
    }
    notes
}

/// Tears down every environment of `run` left behind; a failure is only logged (the next sweep
/// tries again).
pub async fn sweep(env: &dyn Environment, run: &agenteval_core::RunId) {
    let _ = std::fs::remove_dir_all(snapshot::run_folder(run));
    match env.sweep(run).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(run = %run, "removed {n} {} environment(s) left behind", env.kind()),
        Err(e) => tracing::warn!(run = %run, "could not remove the {} environments left behind: {e}", env.kind()),
    }
}

/// The error of a task that needs an environment and got none.
pub fn missing(task: &agenteval_core::TaskId) -> Error {
    Error::invalid(format!("task {task} acts in an environment, and the run has none (`environment.kind` is `none`)"))
}
