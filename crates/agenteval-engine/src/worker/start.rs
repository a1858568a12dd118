//! Starting a job's worker: its spec read, its run's config and bundle opened, the agent,
//! benchmark and evaluators built, their secrets fetched (the agent's, the gateway's and the
//! judges' kept apart), the model gateway and cassettes set up, and the act chosen.

use std::sync::Arc;

use agenteval_core::config::RunConfig;
use agenteval_core::layout;
use agenteval_core::model::JobSpec;
use agenteval_core::secret::{Redactor, Secret};
use agenteval_core::traits::*;
use agenteval_core::{Error, ErrorKind, Result, taskpack};
use agenteval_llm::{CassetteMode, Cassettes};

use crate::agents::access::{agent_secrets, upstream_of, upstream_secrets};
use crate::agents::agent_from_config;
use crate::benchmarks::benchmark_from_config;
use crate::bundle::read_json;
use crate::resolve::{read_bundle_file, store_from_bundle_uri};
use crate::telemetry::{Journal, TRACEPARENT_ENV};

use super::act::Act;
use super::ctx::Ctx;
use super::{CASSETTE_MODE_ENV, CASSETTES_ENV};

/// Reads a job spec from a path or URI.
pub(super) async fn read_job(resolver: &dyn Resolver, uri: &str) -> Result<JobSpec> {
    let bytes = read_bundle_file(resolver, uri).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::with_source(ErrorKind::Invalid, format!("job spec {uri} is invalid: {e}"), e))
}

/// The job's context and how its tasks are acted on (live, or from a run's record), built once.
// Long: each step below needs the ones before it (the config for the secrets, the secrets for
// the gateway, all of them for the context); split, every part would take the same ten values.
pub(super) async fn build(job: JobSpec, resolver: &dyn Resolver, journal: Journal) -> Result<(Ctx, Box<dyn Act>)> {
    let (store, run_id) = store_from_bundle_uri(resolver, &job.bundle_uri).await?;
    if run_id != job.run_id {
        return Err(Error::invalid(format!(
            "job {} belongs to run {} but points at bundle {}",
            job.job_id, job.run_id, job.bundle_uri
        )));
    }
    let index = resolver.index(&job.index_uri.parse()?).await?;
    let mut config: RunConfig = read_json(store.as_ref(), &run_id, layout::CONFIG)
        .await
        .map_err(|e| Error::with_source(ErrorKind::Invalid, format!("run config in the bundle: {e}"), e))?;
    // A packed agent runs from its archive, unpacked here, whatever machine this is.
    if config.regrade.is_none() {
        crate::agents::pack::unpack_for_worker(&mut config, resolver).await?;
    }
    let secret_store = resolver.secrets(&config).await?;
    let redactor = Redactor::new();
    redactor.add_rules(&config.redact.patterns, &config.redact.fields)?;
    let (cassettes, fetched_cassettes) = cassettes_of(resolver, &job).await?;
    let agent = agent_from_config(&config, cassettes.clone(), &redactor)?;
    let needs = agent.needs();
    // A strict replay never calls the model: its key is not needed (CI replays without keys).
    let strict = cassettes.as_ref().is_some_and(|c| c.mode == CassetteMode::Replay);
    let strict_replay = strict && needs.calls_in_process;
    // A regrade runs no agent: it needs none of the agent's keys.
    let no_agent = strict_replay || config.regrade.is_some();
    let gateway = gateway_of(&config, &needs, strict, secret_store.as_ref(), &redactor, resolver).await?;
    // Behind the gateway an agent that calls its model from this process holds no key: the
    // gateway does.
    let llm_behind_gateway = gateway.is_some() && needs.calls_in_process;
    let mut secrets = Vec::new();
    for (var, name, required) in if no_agent || llm_behind_gateway { Vec::new() } else { agent_secrets(&config) } {
        match secret_store.fetch(&name).await {
            Ok(s) => {
                redactor.add(&s);
                secrets.push((var, s));
            }
            Err(e) if !required && e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    // The judges' keys are kept apart: an agent under test never gets a judge's key.
    let mut judge_secrets: Vec<(String, Secret)> = Vec::new();
    for e in &config.evaluators {
        if let Some(judge) = e.judge()
            && let Some((var, name)) = crate::evaluators::judge_secret(judge)
            && !judge_secrets.iter().any(|(v, _)| *v == var)
        {
            let s = secret_store.fetch(&name).await?;
            redactor.add(&s);
            judge_secrets.push((var, s));
        }
    }
    let mut tool_secrets: Vec<(String, Secret)> = Vec::new();
    for (var, name) in config.roles.tools.iter().flat_map(|t| &t.secrets).filter(|_| config.regrade.is_none()) {
        let s = secret_store.fetch(name).await?;
        redactor.add(&s);
        tool_secrets.push((var.clone(), s));
    }
    let evaluators = run_evaluators(&config, &judge_secrets, resolver, &store).await?;
    let traceparent = std::env::var(TRACEPARENT_ENV).ok().or_else(|| job.env.get(TRACEPARENT_ENV).cloned());
    // A job of tasks in their own images: each environment is launched by the backend, apart
    // from this worker (its credentials and keys stay here).
    let in_task_images = job.image.is_some();
    let environment = match in_task_images {
        true => Some(resolver.image_environments(&config).await?),
        false => {
            crate::environments::open(&config, resolver, crate::agents::access::container_reaches_gateway(&config))
                .await?
        }
    };
    let act = super::act::chosen(config.regrade.as_ref(), resolver).await?;
    let ctx = Ctx {
        traceparent,
        journal,
        run_id,
        benchmark: benchmark_from_config(&config.benchmark)?,
        agent,
        needs,
        judge_secrets,
        tool_secrets,
        environment,
        in_task_images,
        live: std::sync::Mutex::new(Vec::new()),
        snapshots: Default::default(),
        lease_seen: std::sync::Mutex::new(None),
        _fetched_cassettes: fetched_cassettes,
        gateway,
        cassettes,
        evaluators,
        secrets,
        redactor,
        store,
        index,
        job,
        config,
    };
    Ok((ctx, act))
}

/// The model gateway of a run whose agent's calls go through one, with its keys (none in a
/// strict replay): they stay in this process, the agent gets a token of its task.
async fn gateway_of(
    config: &RunConfig,
    needs: &AgentNeeds,
    strict: bool,
    secret_store: &dyn SecretStore,
    redactor: &Redactor,
    resolver: &dyn Resolver,
) -> Result<Option<Arc<dyn agenteval_core::gateway::ModelGateway>>> {
    let Some(upstream) = upstream_of(config).filter(|_| config.regrade.is_none()) else { return Ok(None) };
    let llm = needs.calls_in_process;
    let mut keys = Vec::new();
    let wanted: Vec<(&'static str, String, bool)> = if strict {
        Vec::new()
    } else if llm {
        // The key of an agent calling from this process: required as the provider needs one (an openai-compatible
        // server may take none).
        // The agent's own endpoint: a simulated user on another provider has one beside it.
        let which = crate::agents::access::llm_agent_endpoint(config).unwrap_or("openai");
        let mut w: Vec<_> =
            agent_secrets(config).into_iter().map(|(_, name, required)| (which, name, required)).collect();
        // A simulated user on another provider: its key too, for its wire.
        w.extend(crate::agents::access::user_secret(config));
        // A judge on yet another provider: its key, for its wire.
        w.extend(crate::agents::access::judge_secret(config));
        w
    } else {
        upstream_secrets(&upstream)
    };
    for (which, name, required) in wanted {
        match secret_store.fetch(&name).await {
            Ok(s) => {
                redactor.add(&s);
                keys.push((which, s));
            }
            Err(e) if !required && e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    match resolver.gateway(&upstream, keys).await? {
        Some(g) => Ok(Some(g)),
        // An agent calling from this process then calls its model itself, as it can.
        None if llm => Ok(None),
        None => Err(Error::invalid("this build has no model gateway, which `agent.upstream` needs")),
    }
}

/// The job's cassettes (`submit --cassettes`): a folder of this machine, or a run's bundle
/// (`s3://…/RUN`) whose tasks' `cassette.jsonl` are fetched for this job's tasks into a folder
/// of the worker's own, removed with the job (the second value).
async fn cassettes_of(
    resolver: &dyn Resolver,
    job: &JobSpec,
) -> Result<(Option<Cassettes>, Option<tempfile::TempDir>)> {
    let setting = |var: &str| std::env::var(var).ok().or_else(|| job.env.get(var).cloned());
    let Some(dir) = setting(CASSETTES_ENV) else { return Ok((None, None)) };
    let mode = setting(CASSETTE_MODE_ENV);
    let mode = mode.as_deref().unwrap_or("replay");
    let mode = CassetteMode::parse(mode)
        .ok_or_else(|| Error::invalid(format!("{CASSETTE_MODE_ENV}={mode} is not record, replay or replay-or-live")))?;
    Ok(match cassettes_bundle(&dir) {
        Some(uri) => {
            let fetched = fetch_cassettes(resolver, &uri, job, mode).await?;
            (Some(Cassettes { dir: fetched.path().to_path_buf(), mode }), Some(fetched))
        }
        None => (Some(Cassettes { dir: dir.into(), mode }), None),
    })
}

/// The bundle a cassette setting names, when it names one (an S3 bundle URI: a run's calls
/// kept in its task folders) rather than a folder of this machine.
pub fn cassettes_bundle(setting: &str) -> Option<String> {
    setting.starts_with("s3://").then(|| setting.trim_end_matches('/').to_string())
}

/// This job's tasks' recorded calls from a run's bundle, as a cassette folder: one
/// `<task id>.jsonl` per task that has some (a task without is a replay miss, as for a folder).
async fn fetch_cassettes(
    resolver: &dyn Resolver,
    uri: &str,
    job: &JobSpec,
    mode: CassetteMode,
) -> Result<tempfile::TempDir> {
    if mode == CassetteMode::Record {
        return Err(Error::invalid(
            "a run's bundle is replayed, not recorded into: a run records its own calls in its bundle",
        ));
    }
    let (store, run) = crate::resolve::store_from_bundle_uri(resolver, uri).await?;
    let dir = tempfile::Builder::new()
        .prefix("agenteval-cassettes-")
        .tempdir()
        .map_err(|e| Error::io("creating a folder for the cassettes", e))?;
    for t in &job.tasks {
        // The agent's calls, a conversation's simulated user's and the verifier's judge's.
        for (file, name) in [
            (layout::TASK_CASSETTE, format!("{}.jsonl", t.id)),
            (layout::USER_CASSETTE, format!("{}.user.jsonl", t.id)),
            (layout::JUDGE_CASSETTE, format!("{}.judge.jsonl", t.id)),
        ] {
            match taskpack::read_task_file(store.as_ref(), &run, &t.id, file).await {
                Ok(bytes) => std::fs::write(dir.path().join(name), bytes)
                    .map_err(|e| Error::io("writing a fetched cassette", e))?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(dir)
}

/// The run's evaluators; a pairwise judge reads the baseline run's answers from its bundle.
async fn run_evaluators(
    config: &RunConfig,
    judge_secrets: &[(String, Secret)],
    resolver: &dyn Resolver,
    store: &Arc<dyn BundleStore>,
) -> Result<Vec<Arc<dyn Evaluator>>> {
    let mut evaluators = Vec::with_capacity(config.evaluators.len());
    // The judges' verdicts are shared through the run's bundle store: every worker (a Fargate
    // task too) and every later run under the same root finds them.
    let verdicts: Arc<dyn agenteval_llm::VerdictCache> = Arc::new(crate::evaluators::StoreVerdicts(store.clone()));
    for e in &config.evaluators {
        let baseline = match e.baseline_bundle() {
            Some(uri) => {
                let (store, run) = crate::resolve::store_from_bundle_uri(resolver, uri).await?;
                Some(crate::evaluators::pairwise::Baseline { store, run })
            }
            None => None,
        };
        let host = match e.judge().and_then(|j| j.bedrock.as_ref()) {
            Some(b) => Some(resolver.model_host(b).await?),
            None => None,
        };
        let shared = crate::evaluators::Shared { baseline, verdicts: e.judge().map(|_| verdicts.clone()), host };
        evaluators.push(crate::evaluators::evaluator_with(e, judge_secrets, shared)?);
    }
    Ok(evaluators)
}
