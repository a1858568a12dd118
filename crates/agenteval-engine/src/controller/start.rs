//! The one way a run starts. Every command that creates a run (`submit`, `rerun`, `replay`,
//! `regrade`, each run of `submit --matrix`, `doctor --probe`) goes through [`prepare`], which
//! does the steps before a run exists in one order: the references in its config resolved (an
//! `llm_pairwise` baseline's `latest:NAME`, recorded with where its bundle is), the pre-flight
//! checks of its backend (every secret a worker will fetch, what the fleet needs), and the
//! cassettes its workers record to or replay from; then [`Ready::submit`] drives it.

use std::path::Path;

use agenteval_core::config::{EvaluatorConfig, LoadedConfig, RunConfig};
use agenteval_core::traits::{BackendKind, Resolver};
use agenteval_core::{Error, Result};
use agenteval_llm::CassetteMode;

use super::{ControllerOptions, RunOutcome};

/// How a run starts, besides its config.
#[derive(Debug, Clone, Copy, Default)]
pub struct Start<'a> {
    /// `--cassettes`: the folder of this machine, or a run's bundle (`s3://…/RUN`), the workers
    /// record to or replay from, and how.
    pub cassettes: Option<(&'a Path, CassetteMode)>,
    /// Whether the backend's pre-flight checks run first. Only `doctor --probe` goes without:
    /// what would fail is what it reports.
    pub preflight: bool,
}

/// A run whose config is resolved and checked, ready to be driven.
#[derive(Debug)]
pub struct Ready {
    loaded: LoadedConfig,
    /// What every worker is told of the cassettes: the folder or bundle, and the mode.
    cassettes: Option<(String, String)>,
}

impl Ready {
    pub fn config(&self) -> &RunConfig {
        &self.loaded.config
    }

    /// Creates the run and drives it to its end (see [`super::submit`]).
    pub async fn submit(&self, mut opts: ControllerOptions) -> Result<RunOutcome> {
        if let Some((dir, mode)) = self.cassettes.clone() {
            let inner = opts.worker_env.clone();
            opts.worker_env = std::sync::Arc::new(move || {
                let mut env = inner();
                env.insert(crate::worker::CASSETTES_ENV.into(), dir.clone());
                env.insert(crate::worker::CASSETTE_MODE_ENV.into(), mode.clone());
                env
            });
        }
        super::submit(&self.loaded, opts).await
    }
}

/// Resolves, checks and readies a run; nothing is created. Its errors are the user's to fix
/// (a usage error) unless a store or the backend failed.
pub async fn prepare(
    resolver: &dyn Resolver,
    kind: &dyn BackendKind,
    mut loaded: LoadedConfig,
    how: Start<'_>,
) -> Result<Ready> {
    resolve_references(resolver, &mut loaded.config).await?;
    let strict_replay = matches!(how.cassettes, Some((_, CassetteMode::Replay)));
    if how.preflight {
        preflight(kind, &loaded.config, strict_replay).await?;
    }
    let cassettes = match how.cassettes {
        Some((dir, mode)) => Some((cassette_setting(kind, &loaded.config, dir, mode)?, mode.as_str().to_string())),
        None => None,
    };
    Ok(Ready { loaded, cassettes })
}

/// Resolves each `llm_pairwise` evaluator's `baseline` to one run and records where its bundle
/// is, in the config the workers read: a run the index does not know is named with its
/// evaluator, every such problem at once. Runs that share the config's index only.
pub async fn resolve_references(resolver: &dyn Resolver, config: &mut RunConfig) -> Result<()> {
    if !config.evaluators.iter().any(EvaluatorConfig::compares_runs) {
        return Ok(());
    }
    let index = resolver.index(&config.storage.index_location()).await.map_err(|e| {
        Error::invalid(format!("llm_pairwise: its baseline is looked up in the run index, which cannot be opened: {e}"))
    })?;
    let mut problems = Vec::new();
    for (i, e) in config.evaluators.iter_mut().enumerate() {
        let kind = e.kind();
        let Some((baseline, baseline_bundle)) = e.baseline_mut() else { continue };
        let found = async {
            let id = crate::refs::resolve_ref(index.as_ref(), baseline).await?;
            let record =
                index.get_run(&id).await?.ok_or_else(|| Error::not_found(format!("run {id} is not in the index")))?;
            Ok::<_, Error>((id, record.bundle_uri))
        }
        .await;
        match found {
            Ok((id, uri)) => {
                *baseline = id.to_string();
                *baseline_bundle = Some(uri);
            }
            Err(e) => problems.push(format!("evaluators[{i}] ({kind}) baseline `{baseline}`: {e}")),
        }
    }
    if !problems.is_empty() {
        return Err(Error::invalid(problems.join("\n")));
    }
    Ok(())
}

/// What must hold before a run is created, as its backend says (`BackendKind::preflight`:
/// locally every secret the workers will fetch exists; on AWS the cluster and task definition
/// do); workers of this machine also need to read what runs their agents.
pub async fn preflight(kind: &dyn BackendKind, config: &RunConfig, strict_replay: bool) -> Result<()> {
    let needed = crate::agents::access::required_secrets(config, strict_replay);
    kind.preflight(config, &needed).await?;
    // Workers of this machine run as this process's user: a root worker's agents get uids of
    // their own, which must be able to read what runs them.
    if kind.on_this_machine() {
        crate::agents::preflight(config)?;
    }
    Ok(())
}

/// The cassette setting every worker gets: a run's bundle as named, or a folder of this machine
/// made absolute; refused when the agent's calls cannot be recorded or the workers cannot see it.
fn cassette_setting(kind: &dyn BackendKind, config: &RunConfig, dir: &Path, mode: CassetteMode) -> Result<String> {
    if crate::agents::access::upstream_of(config).is_none() {
        return Err(Error::invalid(format!(
            "--cassettes records the model calls of the `llm` agent, of an agent whose calls go through the \
             gateway (`agent.upstream`) and of a judge (`roles.judge`); this run's `{}` agent has no upstream",
            config.agent.kind()
        )));
    }
    let setting = dir.display().to_string();
    match crate::worker::cassettes_bundle(&setting) {
        // A run's bundle on S3: every worker, wherever it runs, replays from it.
        Some(uri) => {
            if mode == CassetteMode::Record {
                return Err(Error::invalid(
                    "--cassettes s3://…/RUN replays a run's recorded calls; on the fleet a run records its calls in its own bundle (each task pack's cassette.jsonl): run without --cassettes, then replay from that run's bundle",
                ));
            }
            agenteval_core::location::BundleRoot::split_bundle_uri(&uri).map_err(|e| {
                Error::invalid(format!("--cassettes {uri}: not a run's bundle (s3://BUCKET/PREFIX/RUN_ID): {e}"))
            })?;
            Ok(uri)
        }
        None => {
            if !kind.on_this_machine() {
                return Err(Error::invalid(
                    "--cassettes DIR is a folder of this machine, which the fleet's workers do not see: replay from a run's bundle instead (--cassettes s3://BUCKET/PREFIX/RUN_ID)",
                ));
            }
            if mode != CassetteMode::Record && !dir.is_dir() {
                return Err(Error::invalid(format!("cassette folder {} does not exist", dir.display())));
            }
            let dir = std::path::absolute(dir).map_err(|e| Error::io("resolving the cassette folder", e))?;
            Ok(dir.display().to_string())
        }
    }
}
