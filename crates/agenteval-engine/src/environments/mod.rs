//! Task environments in the engine: which one a run's tasks get (`environment.kind`, or the
//! benchmark's choice), the `workspace` implementation (a folder, no Docker), and what the
//! worker does with any of them: a snapshot of the starting state at prepare, the agent's patch
//! against it at the end, the listed artifacts, and the sweep of what killed workers left.

pub mod files;
pub mod here;
mod host;
pub mod socket;
pub mod workspace;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agenteval_core::config::{EnvironmentKind, RunConfig};
use agenteval_core::environment::ExecRequest;
use agenteval_core::traits::{EnvSession, Environment, Resolver};
use agenteval_core::{Error, Result};

/// Where a snapshot of the starting state is kept, below the environment's worker root: a git
/// folder outside the agent's working folder (`/tmp/.agenteval-start` in a container), so `git
/// status` there shows nothing of it.
fn snapshot_dir(session: &EnvSession) -> String {
    format!("{}/tmp/.agenteval-start", session.env.worker_root(&session.handle).trim_end_matches('/'))
}

/// The environment kind the run's tasks get (`auto`: the benchmark's choice).
pub fn kind_of(config: &RunConfig) -> EnvironmentKind {
    match config.environment.kind {
        EnvironmentKind::Auto => config.benchmark.default_environment(),
        k => k,
    }
}

/// The run's environments, if its tasks have any: the engine's own `workspace`, or what the
/// binary registered for the kind (`docker`).
pub async fn open(config: &RunConfig, resolver: &dyn Resolver) -> Result<Option<Arc<dyn Environment>>> {
    Ok(match kind_of(config) {
        EnvironmentKind::None | EnvironmentKind::Auto => None,
        EnvironmentKind::Workspace => Some(Arc::new(workspace::WorkspaceEnvironment::for_run(config))),
        k => Some(resolver.environment(k, &config.environment).await?),
    })
}

/// `s` as one shell word.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `git` run on the snapshot, with the working folder as its tree.
fn git(session: &EnvSession) -> String {
    format!(
        "GIT_DIR={} GIT_WORK_TREE={} git -c user.name=agenteval -c user.email=agenteval@localhost -c core.autocrlf=false",
        quote(&snapshot_dir(session)),
        quote(&session.handle.workdir)
    )
}

/// Records the starting state of the working folder (when the environment has `git`), for the
/// patch. A failure costs only the patch.
pub async fn snapshot(session: &EnvSession) -> bool {
    let git = git(session);
    let parent = quote(&format!("{}/tmp", session.env.worker_root(&session.handle).trim_end_matches('/')));
    let cmd = format!(
        "command -v git >/dev/null 2>&1 || exit 3; mkdir -p {parent} && {git} init -q && {git} add -A && {git} commit -q --allow-empty -m start"
    );
    let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(120)) };
    matches!(session.env.exec(&session.handle, &req).await, Ok(o) if o.ok())
}

/// What the agent changed in its working folder since the snapshot, as a git patch (`None`
/// without a snapshot).
pub async fn patch(session: &EnvSession, max_bytes: usize) -> Option<String> {
    let git = git(session);
    let cmd = format!("{git} add -A >/dev/null 2>&1 && {git} diff --cached --binary HEAD");
    let req = ExecRequest {
        user: Some("0".into()),
        max_output_bytes: max_bytes,
        ..ExecRequest::new(cmd, Duration::from_secs(120))
    };
    match session.env.exec(&session.handle, &req).await {
        Ok(o) if o.ok() => Some(o.stdout),
        _ => None,
    }
}

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
        let name = p.trim_matches('/').replace('/', "_");
        let dest = into.join(&name);
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
