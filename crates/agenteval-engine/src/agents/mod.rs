//! Built-in agents: `mock` (scripted, deterministic) and `command` (any external program).

mod command;
mod mock;
pub mod reap;
pub mod sandbox;

use std::sync::Arc;

use agenteval_core::config::{AgentConfig, BenchmarkConfig, BundleRoot, IndexLocation, RunConfig, Sandbox};
use agenteval_core::traits::AgentRunner;

pub use command::CommandAgent;
pub use mock::MockAgent;

/// Builds the agent a run configuration names.
pub fn agent_from_config(run: &RunConfig) -> Arc<dyn AgentRunner> {
    match &run.agent {
        AgentConfig::Mock { model, mock, .. } => Arc::new(MockAgent::new(mock.clone(), model.clone())),
        AgentConfig::Command { model, command, env, workdir, sandbox, .. } => {
            let view = match sandbox {
                Sandbox::Mode(_) => None,
                Sandbox::Paths(paths) => Some(view_of(run, workdir.as_deref(), &paths.read, &paths.write)),
            };
            Arc::new(CommandAgent::new(command.clone(), env.clone(), workdir.clone(), model.clone(), view))
        }
    }
}

/// The agent's filesystem view before its task adds its program and scratch folder: the
/// system, the config's folder and the listed paths, minus everything that holds answers or
/// results (the bundle root, the index, the benchmark's cases).
fn view_of(
    run: &RunConfig,
    workdir: Option<&std::path::Path>,
    read: &[std::path::PathBuf],
    write: &[std::path::PathBuf],
) -> sandbox::View {
    let base = workdir.map(std::path::Path::to_path_buf).unwrap_or_default();
    let real = |p: &std::path::Path| {
        let p = base.join(p);
        p.canonicalize().unwrap_or(p)
    };
    let mut exclude = Vec::new();
    if let BundleRoot::Local(root) = &run.storage.bundle_root {
        exclude.push(real(root));
    }
    if let IndexLocation::Sqlite(index) = run.storage.index_location() {
        let index = real(&index);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = index.clone().into_os_string();
            p.push(suffix);
            exclude.push(p.into());
        }
    }
    if let BenchmarkConfig::Jsonl { cases, .. } = &run.benchmark {
        exclude.push(real(cases));
    }
    let mut view = sandbox::View {
        read: sandbox::SYSTEM_READ.iter().map(Into::into).collect(),
        write: sandbox::SYSTEM_WRITE.iter().map(Into::into).collect(),
        exclude,
    };
    view.read.extend(workdir.map(real));
    view.read.extend(read.iter().map(|p| real(p)));
    view.write.extend(write.iter().map(|p| real(p)));
    view
}
