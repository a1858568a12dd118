//! The worker: runs every task of one job (prepare, agent, grade, evaluate, write, record),
//! streaming trace events to the bundle as they happen. Running the agent is [`execute`]'s,
//! grading is [`grade`]'s.

mod ctx;
mod decide;
mod execute;
mod fresh;
mod genai_spans;
mod grade;
mod metered;
pub use metered::door_models;
mod regrade;
mod steps;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use agenteval_core::config::{RunConfig, VerifyIn};
use agenteval_core::environment::DEFAULT_STORAGE_MB;
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::{Redactor, Secret};
use agenteval_core::traits::*;
use agenteval_core::{Error, ErrorKind, Result, taskpack};
use chrono::Utc;
use futures::{FutureExt as _, StreamExt as _};
use serde_json::json;
use tracing::Instrument;
use tracing::field::Empty;

use agenteval_core::config::EvaluatorConfig;
use agenteval_llm::{CassetteMode, Cassettes};

use crate::agents::agent_from_config;
use crate::agents::installed::layer::LayerError;
use crate::benchmarks::benchmark_from_config;
use crate::bundle::{publish_staged, read_json, stage_task_pack};
use crate::resolve::{read_bundle_file, store_from_bundle_uri};
use crate::telemetry::{self, Journal, TRACEPARENT_ENV};
use ctx::Ctx;

/// Where a worker finds model-call cassettes (`submit --cassettes`), and what to do with them.
pub const CASSETTES_ENV: &str = "AGENTEVAL_CASSETTES";
pub const CASSETTE_MODE_ENV: &str = "AGENTEVAL_CASSETTE_MODE";

/// The agent's secrets: `(ENV_NAME, secret name, required)`. An `llm` agent with no `secrets`
/// takes its provider's key from the secret of the variable's name (optional for
/// `openai-compatible` servers, which often take none).
pub fn agent_secrets(config: &RunConfig) -> Vec<(String, String, bool)> {
    let listed = config.agent.secrets();
    if let agenteval_core::config::AgentConfig::Llm(a) = &config.agent
        && listed.is_empty()
        && let Ok(spec) = agenteval_llm::ModelSpec::parse(&a.model)
    {
        let var = spec.provider.key_var().to_string();
        return vec![(var.clone(), var, spec.provider.needs_key())];
    }
    listed.iter().map(|(v, n)| (v.clone(), n.clone(), true)).collect()
}

/// The model gateway's keys: `(endpoint, secret name, required)`. A key named in the config is
/// required; a provider's default one only for the provider itself (a server at a `base_url`
/// of the user's may take none).
pub fn upstream_secrets(upstream: &agenteval_core::config::Upstream) -> Vec<(&'static str, String, bool)> {
    upstream
        .secrets()
        .into_iter()
        .map(|(which, name)| {
            let endpoint = if which == "openai" { &upstream.openai } else { &upstream.anthropic };
            let named = endpoint.as_ref().is_some_and(|e| !e.secrets.is_empty() || e.base_url.is_none());
            (which, name, named)
        })
        .collect()
}

/// Every secret a worker of this run fetches and must find: the agent's and the judges',
/// as `(secret name, what needs it)`. `submit` and `doctor` check them before anything starts.
pub fn required_secrets(config: &RunConfig, strict_replay: bool) -> Vec<(String, String)> {
    let replayed = strict_replay && matches!(config.agent, agenteval_core::config::AgentConfig::Llm(_));
    // A regrade runs no agent.
    let agent = if replayed || config.regrade.is_some() { Vec::new() } else { agent_secrets(config) };
    let mut out: Vec<(String, String)> = agent
        .into_iter()
        .filter(|(_, _, required)| *required)
        .map(|(_, name, _)| (name, format!("agent `{}`", config.agent.kind())))
        .collect();
    // The gateway's keys, unless every call is answered from a recording.
    if let Some(up) = config.agent.upstream()
        && !strict_replay
        && config.regrade.is_none()
    {
        for (which, name, required) in upstream_secrets(up) {
            if required && !out.iter().any(|(n, _)| *n == name) {
                out.push((name, format!("agent.upstream.{which}")));
            }
        }
    }
    for e in &config.evaluators {
        if let Some(judge) = e.judge()
            && let Some((_, name)) = crate::evaluators::judge_secret(judge)
            && !out.iter().any(|(n, _)| *n == name)
        {
            out.push((name, format!("evaluator `{}`", e.id())));
        }
    }
    out
}

/// Reads a job spec from a path or URI.
async fn read_job(resolver: &dyn Resolver, uri: &str) -> Result<JobSpec> {
    let bytes = read_bundle_file(resolver, uri).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::with_source(ErrorKind::Invalid, format!("job spec {uri} is invalid: {e}"), e))
}

async fn build(job: JobSpec, resolver: &dyn Resolver, journal: Journal) -> Result<Ctx> {
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
    let (cassettes, fetched_cassettes) = cassettes_of(resolver, &job).await?;
    // A strict replay never calls the model: its key is not needed (CI replays without keys).
    let strict = cassettes.as_ref().is_some_and(|c| c.mode == CassetteMode::Replay);
    let strict_replay = strict && matches!(config.agent, agenteval_core::config::AgentConfig::Llm(_));
    // A regrade runs no agent: it needs none of the agent's keys.
    let no_agent = strict_replay || config.regrade.is_some();
    let gateway = gateway_of(&config, strict, secret_store.as_ref(), &redactor, resolver).await?;
    // Behind the gateway the `llm` agent holds no key: the gateway does.
    let llm_behind_gateway = gateway.is_some() && matches!(config.agent, agenteval_core::config::AgentConfig::Llm(_));
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
    let evaluators = run_evaluators(&config, &judge_secrets, resolver, &store).await?;
    let traceparent = std::env::var(TRACEPARENT_ENV).ok().or_else(|| job.env.get(TRACEPARENT_ENV).cloned());
    let agent = agent_from_config(&config, cassettes.clone(), &redactor)?;
    let here = job.image.as_ref().map(|_| Arc::new(crate::environments::here::HereEnvironment::new()));
    let environment = match &here {
        Some(h) => {
            // The agent's commands share this container, as root: they must not read this
            // process's memory or environment (its AWS credentials' location).
            let _ = nix::sys::prctl::set_dumpable(false);
            Some(h.clone() as Arc<dyn Environment>)
        }
        None => crate::environments::open(&config, resolver).await?,
    };
    let regrade = match &config.regrade {
        Some(src) => {
            let (store, run) = crate::resolve::store_from_bundle_uri(resolver, &src.bundle).await?;
            Some(regrade::Source { store, run })
        }
        None => None,
    };
    Ok(Ctx {
        traceparent,
        journal,
        run_id,
        benchmark: benchmark_from_config(&config.benchmark)?,
        agent,
        judge_secrets,
        environment,
        here,
        live: std::sync::Mutex::new(Vec::new()),
        snapshots: Default::default(),
        regrade,
        _fetched_cassettes: fetched_cassettes,
        gateway,
        cassettes,
        kept: Default::default(),
        evaluators,
        secrets,
        redactor,
        store,
        index,
        job,
        config,
    })
}

/// Where the gateway sends a run's agent's calls: its `upstream`, or for the `llm` agent its
/// model's endpoint (so that its calls are metered, budgeted and recorded on the same path).
pub fn upstream_of(config: &RunConfig) -> Option<agenteval_core::config::Upstream> {
    use agenteval_core::config::{AgentConfig, Upstream};
    match &config.agent {
        AgentConfig::Llm(cfg) => {
            let spec = agenteval_llm::ModelSpec::parse(&cfg.model).ok()?;
            let mut endpoint = cfg.endpoint.clone();
            if endpoint.secrets.is_empty() {
                let var = spec.provider.key_var().to_string();
                endpoint.secrets.insert(var.clone(), var);
            }
            endpoint.base_url = endpoint.base_url.or_else(|| spec.provider.default_base_url().map(str::to_string));
            let mut up = Upstream { prices: cfg.prices.clone(), ..Upstream::default() };
            match spec.provider {
                agenteval_llm::Provider::Anthropic => up.anthropic = Some(endpoint),
                _ => up.openai = Some(endpoint),
            }
            Some(up)
        }
        other => other.upstream().cloned(),
    }
}

/// The model gateway of a run whose agent's calls go through one, with its keys (none in a
/// strict replay): they stay in this process, the agent gets a token of its task.
async fn gateway_of(
    config: &RunConfig,
    strict: bool,
    secret_store: &dyn SecretStore,
    redactor: &Redactor,
    resolver: &dyn Resolver,
) -> Result<Option<Arc<dyn agenteval_core::gateway::ModelGateway>>> {
    let Some(upstream) = upstream_of(config).filter(|_| config.regrade.is_none()) else { return Ok(None) };
    let llm = matches!(config.agent, agenteval_core::config::AgentConfig::Llm(_));
    let mut keys = Vec::new();
    let wanted: Vec<(&'static str, String, bool)> = if strict {
        Vec::new()
    } else if llm {
        // The `llm` agent's key: required as the provider needs one (an openai-compatible
        // server may take none).
        let which = if upstream.anthropic.is_some() { "anthropic" } else { "openai" };
        agent_secrets(config).into_iter().map(|(_, name, required)| (which, name, required)).collect()
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
        // The `llm` agent then calls its model itself, as it can.
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
        match taskpack::read_task_file(store.as_ref(), &run, &t.id, layout::TASK_CASSETTE).await {
            Ok(bytes) => std::fs::write(dir.path().join(format!("{}.jsonl", t.id)), bytes)
                .map_err(|e| Error::io("writing a fetched cassette", e))?,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
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
        let baseline = match e {
            EvaluatorConfig::LlmPairwise { baseline_bundle: Some(uri), .. } => {
                let (store, run) = crate::resolve::store_from_bundle_uri(resolver, uri).await?;
                Some(crate::evaluators::pairwise::Baseline { store, run })
            }
            _ => None,
        };
        let shared = crate::evaluators::Shared { baseline, verdicts: e.judge().map(|_| verdicts.clone()) };
        evaluators.push(crate::evaluators::evaluator_with(e, judge_secrets, shared)?);
    }
    Ok(evaluators)
}

/// Runs the job at `job_uri`; returns the process exit code (see `worker_exit`).
pub async fn run_job(
    job_uri: &str,
    resolver: &dyn Resolver,
    journal: Journal,
    cancel: impl std::future::Future<Output = ()>,
) -> i32 {
    let job = match read_job(resolver, job_uri).await {
        Ok(j) => j,
        Err(e) => {
            tracing::error!("{e}");
            return decide::exit_for_start_error(e.kind(), true);
        }
    };
    let ctx = match build(job, resolver, journal).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot start job: {e}");
            return decide::exit_for_start_error(e.kind(), false);
        }
    };
    let trace = ctx.traceparent.as_deref().and_then(telemetry::parse_traceparent);
    tracing::info!(
        run = %ctx.run_id,
        job = %ctx.job.job_id,
        attempt = ctx.job.attempt,
        tasks = ctx.job.tasks.len(),
        trace_id = %trace.as_ref().map(|t| t.trace_id().to_string()).unwrap_or_default(),
        parent_span_id = %trace.as_ref().map(|t| t.span_id().to_string()).unwrap_or_default(),
        "job started"
    );
    let cancel = cancel.shared();
    // Tasks that share this container as their environment take turns in it.
    let parallel = if ctx.here.is_some() { 1 } else { ctx.config.backend.tasks_in_parallel.max(1) as usize };
    let code = async {
        let mut tasks = futures::stream::iter(ctx.job.tasks.iter())
            .map(|task| process_task(&ctx, task, cancel.clone()))
            .buffer_unordered(parallel);
        let mut done_n = 0;
        while let Some(done) = tasks.next().await {
            if let Err(code) = done {
                return code;
            }
            done_n += 1;
            if let Some(here) = &ctx.here
                && done_n < ctx.job.tasks.len()
                && !here.tainted().is_empty()
            {
                let changed = here.tainted();
                tracing::warn!(
                    job = %ctx.job.job_id,
                    "a task changed this container outside what is reset ({}{}): the job's {} other task(s) go back to the controller for a fresh container",
                    changed.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                    if changed.len() > 3 { format!(" and {} more", changed.len() - 3) } else { String::new() },
                    ctx.job.tasks.len() - done_n
                );
                return worker_exit::HANDED_BACK;
            }
        }
        worker_exit::OK
    }
    .await;
    if code == worker_exit::OK {
        tracing::info!(job = %ctx.job.job_id, "job finished");
    }
    code
}

/// Runs one task of the job and writes its outcome; `Err` is the exit code the job stops with.
async fn process_task(
    ctx: &Ctx,
    task: &TaskSpec,
    cancel: impl std::future::Future<Output = ()>,
) -> std::result::Result<(), i32> {
    match ctx.index.get_run(&ctx.run_id).await.map(|r| decide::lease(r.as_ref(), &ctx.job)) {
        Ok(decide::Lease::Go) => {}
        Ok(decide::Lease::Stop { code, why }) => {
            if code == worker_exit::CANCELLED {
                tracing::warn!(job = %ctx.job.job_id, "{why}");
            } else {
                tracing::error!(job = %ctx.job.job_id, "{why}");
            }
            return Err(code);
        }
        Err(e) => {
            tracing::error!("{}", ctx.redactor.redact(&e.to_string()));
            return Err(worker_exit::FAILED);
        }
    }
    let span = task_span(ctx, task);
    let root = telemetry::span_id(&span);
    let outcome = tokio::select! {
        r = run_task(ctx, task).instrument(span.clone()) => r,
        _ = cancel => {
            tracing::warn!(task = %task.id, "stopping: cancelled");
            tear_down_live(ctx).await;
            // The task's span ends here, marked, and is flushed before the process exits.
            telemetry::set_error(&span, "worker cancelled");
            return Err(worker_exit::CANCELLED);
        }
    };
    record_outcome(ctx, &span, &outcome);
    // The task's spans go into its folder, so its span must be over before the files are
    // written; this handle is the last one.
    drop(span);
    let spans = match (root, &ctx.journal) {
        (Some(root), Some(j)) => Some(j.take_tree(root)),
        _ => None,
    };
    let outcome = match outcome {
        Ok(Some(done)) => write_outcome(ctx, task, done, spans).await,
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = outcome {
        // A store or index failure: the job cannot vouch for its results. Exiting non-zero
        // makes the controller retry the unfinished tasks.
        tracing::error!(task = %task.id, "{}", ctx.redactor.redact(&e.to_string()));
        return Err(worker_exit::FAILED);
    }
    Ok(())
}

/// A task's `eval.task` span, a child of the controller's `eval.job` span when the job carries
/// its trace context.
fn task_span(ctx: &Ctx, task: &TaskSpec) -> tracing::Span {
    let span = tracing::info_span!(
        "eval.task",
        agenteval.run.id = %ctx.run_id,
        agenteval.task.id = %task.id,
        agenteval.job.id = %ctx.job.job_id,
        agenteval.attempt = ctx.job.attempt as i64,
        agenteval.benchmark = ctx.benchmark.name(),
        agenteval.agent = ctx.agent.name(),
        agenteval.model = ctx.config.agent.model().unwrap_or(""),
        agenteval.backend = ctx.config.backend.id.as_str(),
        agenteval.passed = Empty,
        agenteval.cost_usd = Empty,
        agenteval.tokens = Empty,
        agenteval.terminated_by = Empty,
        agenteval.skipped = Empty,
    );
    if let Some(tp) = &ctx.traceparent {
        telemetry::set_remote_parent(&span, tp);
    }
    span
}

/// The task's outcome on its span.
fn record_outcome(ctx: &Ctx, span: &tracing::Span, outcome: &Result<Option<(TaskResult, String)>>) {
    match outcome {
        Ok(Some((r, _))) => {
            span.record("agenteval.passed", r.passed);
            span.record("agenteval.cost_usd", r.total_cost_usd());
            span.record("agenteval.tokens", r.agent.total_tokens as i64);
            span.record("agenteval.terminated_by", r.agent.terminated_by.as_str());
            if r.agent.terminated_by.says_nothing_about_the_agent() {
                telemetry::set_error(span, r.agent.error.as_deref().unwrap_or("infrastructure failure"));
            }
        }
        Ok(None) => {
            span.record("agenteval.skipped", true);
        }
        Err(e) => telemetry::set_error(span, &ctx.redactor.redact(&e.to_string())),
    }
}

/// Writes a finished task's files and records it; `Err` only for failures of agenteval's own
/// storage.
async fn write_outcome(
    ctx: &Ctx,
    task: &TaskSpec,
    (result, log): (TaskResult, String),
    spans: Option<Vec<u8>>,
) -> Result<()> {
    // A retried job may overlap the attempt it replaced (a worker that was only slow), so
    // everything goes to the attempt's staging folder first, packed; the conditional
    // "completed" then decides which attempt counts, and only that one moves its pack into
    // `tasks/`. A duplicate or superseded attempt publishes nothing (no index read first: the
    // conditional write is the one check that cannot race); a winner that dies before it has
    // published is finished by the seal (`controller::finish_publishing`).
    let attempt = ctx.job.attempt;
    let (job, run) = (&ctx.job.job_id, &ctx.run_id);
    let redact = |t: &str| ctx.redactor.redact(t);
    let kept = ctx.take_kept(&task.id);
    let outcome = crate::bundle::Outcome { result: &result, log: &log, spans: spans.as_deref(), trace: kept.trace };
    stage_task_pack(ctx.store.as_ref(), outcome, &kept.files, &redact).await?;
    if !ctx.index.record_task(run, &TaskTransition::completed(&result)).await? {
        tracing::warn!(task = %task.id, attempt, "another attempt completed this task first; publishing nothing");
        return Ok(());
    }
    publish_staged(ctx.store.as_ref(), run, job, attempt, &task.id).await?;
    Ok(())
}

/// Runs and grades one task: its result and worker log, or `None` when another attempt owns it.
async fn run_task(ctx: &Ctx, task: &TaskSpec) -> Result<Option<(TaskResult, String)>> {
    let attempt = ctx.job.attempt;
    let running = TaskTransition::new(task.id.clone(), attempt, TaskState::Running).job(&ctx.job.job_id);
    if !ctx.index.record_task(&ctx.run_id, &running).await? {
        tracing::info!(task = %task.id, attempt, "skipped: already completed or taken by a later attempt");
        return Ok(None);
    }
    let ids = telemetry::log_ids(&tracing::Span::current());
    let mut log =
        vec![format!("{} task {} attempt {} job {}{ids}", Utc::now().to_rfc3339(), task.id, attempt, ctx.job.job_id)];
    let started_at = Utc::now();
    let prepare = tracing::info_span!("benchmark.prepare");
    let mut env = ctx.benchmark.prepare_environment(&ctx.run_id, task).instrument(prepare.clone()).await;
    let mut setup_seconds = None;
    let mut fault = None;
    if let Ok(te) = &mut env
        && let Some(spec) = &task.environment
        && let Some(e) = &ctx.environment
    {
        te.fresh = Some(Arc::new(fresh::TaskFresh {
            env: e.clone(),
            run: ctx.run_id,
            task: task.clone(),
            attempt: ctx.job.attempt,
            spec: spec.clone(),
            only_a_used_one: ctx.here.is_some() && ctx.config.agent.acts(),
        }));
    }
    // An agent that does not act (patches made elsewhere) gets no environment of its own.
    if let Ok(te) = &mut env
        && let Some(spec) = task.environment.as_ref().filter(|_| ctx.config.agent.acts())
    {
        let (prepared, setup) = prepare_with_agent(ctx, task, spec, &prepare, &mut log).await;
        setup_seconds = setup;
        match prepared {
            Ok(s) => te.session = Some(s),
            Err(e) => {
                fault = e.fault;
                env = Err(e.error);
            }
        }
    }
    if let Err(e) = &env {
        telemetry::set_error(&prepare, &ctx.redactor.redact(&e.to_string()));
    }
    drop(prepare);
    let result = match &env {
        Ok(env) => steps::run(ctx, task, env, &mut log).await,
        Err(e) => Err(e.clone_message()),
    };
    if let Ok(env) = &env {
        let teardown = tracing::info_span!("benchmark.teardown");
        if let Some(s) = &env.session {
            tear_down(ctx, s, &mut log).instrument(teardown.clone()).await;
        }
        if let Err(e) = ctx.benchmark.teardown(env).instrument(teardown.clone()).await {
            telemetry::set_error(&teardown, &ctx.redactor.redact(&e.to_string()));
            log.push(format!("teardown failed: {e}"));
        }
    }
    let (agent, scores, changed) = match result {
        Ok(x) => x,
        Err(e) => {
            log.push(format!("infrastructure failure: {e}"));
            let (mut agent, scores) = decide::infra_failure(ctx.redactor.redact(&e.to_string()));
            // The install's own failure is the agent's, and says which field fixes it.
            agent.fault = fault;
            (agent, scores, 0)
        }
    };
    let mut result = decide::task_result(&ctx.job, task, agent, scores, changed, started_at);
    result.setup_seconds = setup_seconds;
    if let Ok(env) = &env {
        let found = std::mem::take(&mut *env.findings.lock().expect("not poisoned"));
        for (name, bytes) in found.files {
            let text = ctx.redactor.redact(&String::from_utf8_lossy(&bytes));
            ctx.keep(&task.id, format!("artifacts/{name}"), text.into_bytes());
        }
        // What a grader doubts may quote the environment (a process's command line): redacted.
        let suspect: Vec<String> = found.suspect.iter().map(|s| ctx.redactor.redact(s)).collect();
        for s in &suspect {
            log.push(format!("suspect: {s}"));
        }
        result.suspect = suspect;
        result.rewards = found.rewards;
        result.unscored = found.unscored;
        result.models = found.models;
        result.steps = found.steps;
    }
    result.harbor_would_skip = crate::benchmarks::harbor::HarborTask::of(task).and_then(|h| h.harbor_rejects);
    log.push(decide::finished_line(&result));
    Ok(Some((result, log.join("\n") + "\n")))
}

/// The task's environment prepared with its installed agent ready in it (its agent layer found
/// or built first; in a fleet job's own container, its install run there), and the seconds
/// getting the agent ready took: the task's setup, never the agent's time.
async fn prepare_with_agent(
    ctx: &Ctx,
    task: &TaskSpec,
    spec: &agenteval_core::environment::EnvSpec,
    prepare: &tracing::Span,
    log: &mut Vec<String>,
) -> (Result<EnvSession, LayerError>, Option<f64>) {
    let mut setup_seconds = None;
    let layer = crate::agents::installed::layer::Layer::of(&ctx.config.agent).filter(|_| ctx.regrade.is_none());
    // An installed agent's layer first: its time is the task's setup, not the agent's.
    let layered = match &layer {
        Some(layer) if ctx.here.is_none() => {
            let started = std::time::Instant::now();
            let made = agent_layer(ctx, task, spec, layer, log).await;
            setup_seconds = Some(started.elapsed().as_secs_f64());
            made.map(Some)
        }
        _ => Ok(None),
    };
    let mut prepared = match layered {
        Ok(layered) => {
            let spec = layered.as_ref().unwrap_or(spec);
            prepare_session(ctx, task, spec, true, log).instrument(prepare.clone()).await.map_err(LayerError::from)
        }
        Err(e) => Err(e),
    };
    // A fleet job in the task's own image has no image to layer: the install runs in the
    // task's container itself, still as its setup.
    if let (Some(layer), Some(_), Ok(s)) = (&layer, &ctx.here, &prepared) {
        let started = std::time::Instant::now();
        let span = tracing::info_span!("agent.setup", "agenteval.agent.layer" = %layer.name());
        let done = match &spec.agent_layer {
            Some(key) => layer.verify_in(&s.env, &s.handle, key).instrument(span).await.map(|()| None),
            None => layer.install_in(&s.env, &s.handle, &ctx.secrets).instrument(span).await,
        };
        setup_seconds = Some(started.elapsed().as_secs_f64());
        match done {
            Ok(None) => log.push(format!("agent layer {}: this container's image is the layer", layer.name())),
            Ok(Some(out)) => log.push(format!(
                "agent {} installed in this container in {:.1} s:\n{}",
                layer.name(),
                started.elapsed().as_secs_f64(),
                ctx.redactor.redact(out.trim_end())
            )),
            Err(e) => {
                let error = Error::new(e.error.kind(), ctx.redactor.redact(&e.to_string()));
                prepared = Err(LayerError { error, fault: e.fault });
            }
        }
    }
    (prepared, setup_seconds)
}

/// The task's environment with its installed agent: the agent layer on its image, found or made
/// (an `agent.setup` span; its output in the task's log). An `Err` is the task's infrastructure
/// failure, naming the install.
async fn agent_layer(
    ctx: &Ctx,
    task: &TaskSpec,
    spec: &agenteval_core::environment::EnvSpec,
    layer: &crate::agents::installed::layer::Layer,
    log: &mut Vec<String>,
) -> Result<agenteval_core::environment::EnvSpec, LayerError> {
    let Some(env) = &ctx.environment else { return Err(crate::environments::missing(&task.id).into()) };
    let span = tracing::info_span!("agent.setup", "agenteval.agent.layer" = %layer.name());
    let made = layer.ensure(env, &ctx.run_id, task, ctx.job.attempt, spec, &ctx.secrets).instrument(span.clone()).await;
    match made {
        Ok(ready) => {
            log.push(ready.note);
            if !ready.output.trim().is_empty() {
                log.push(format!("the install said:\n{}", ctx.redactor.redact(ready.output.trim_end())));
            }
            Ok(agenteval_core::environment::EnvSpec { image: Some(ready.image), context: None, ..spec.clone() })
        }
        Err(e) => {
            let error = Error::new(e.error.kind(), ctx.redactor.redact(&e.to_string()));
            telemetry::set_error(&span, &error.to_string());
            Err(LayerError { error, fault: e.fault })
        }
    }
}

/// Prepares the task's environment (an `Err` is an infrastructure failure of the task) and,
/// with `snapshot`, records its starting state for the patch.
async fn prepare_session(
    ctx: &Ctx,
    task: &TaskSpec,
    spec: &agenteval_core::environment::EnvSpec,
    snapshot: bool,
    log: &mut Vec<String>,
) -> Result<EnvSession> {
    let Some(env) = &ctx.environment else { return Err(crate::environments::missing(&task.id)) };
    let started = std::time::Instant::now();
    let handle = env.prepare(&ctx.run_id, task, ctx.job.attempt, spec).await?;
    let session = EnvSession { env: env.clone(), handle };
    ctx.live.lock().expect("not poisoned").push(session.clone());
    log.extend(session.handle.notes.iter().cloned());
    if let Some(hc) = &spec.healthcheck {
        let checked = crate::environments::healthy(&session, hc).await;
        if let Err(e) = checked {
            tear_down(ctx, &session, log).await;
            return Err(e);
        }
        log.push(format!("healthcheck `{}` passed", hc.command));
    }
    log.push(format!(
        "environment {} {} prepared in {:.2} s",
        env.kind(),
        session.handle.id,
        started.elapsed().as_secs_f64()
    ));
    if snapshot {
        match crate::environments::snapshot::Snapshot::take(&session, &ctx.run_id).await {
            Ok(snap) => {
                ctx.snapshots.lock().expect("not poisoned").insert(session.handle.id.clone(), Arc::new(snap));
            }
            Err(e) => log.push(format!("no snapshot of the starting state ({e}): no patch")),
        }
    }
    Ok(session)
}

/// The most of an agent's working folder carried into a fresh environment for its tests.
const MAX_CARRIED_BYTES: u64 = 1 << 30;

/// What the fresh environment for a task's tests came to: made, or refused because of what the
/// agent left (its working folder past [`MAX_CARRIED_BYTES`]: the agent's limit, not agenteval's
/// failure).
enum Fresh {
    Made(EnvSession),
    AgentsFault(String),
}

/// A new environment from the task's image with the agent's working folder copied over, for its
/// tests (`environment.verify_in: fresh`): they then trust nothing else the agent changed.
async fn fresh_for_tests(ctx: &Ctx, task: &TaskSpec, left: &EnvSession, log: &mut Vec<String>) -> Result<Fresh> {
    let Some(spec) = &task.environment else { return Err(crate::environments::missing(&task.id)) };
    let carried = tempfile::tempdir().map_err(|e| Error::io("a folder for the agent's working folder", e))?;
    let from = format!("{}/.", left.handle.workdir.trim_end_matches('/'));
    match left.env.copy_out(&left.handle, &from, carried.path(), MAX_CARRIED_BYTES).await {
        Ok(()) => {}
        // The copy's only refusal of its input: more than the cap.
        Err(e) if e.kind() == ErrorKind::Invalid => {
            return Ok(Fresh::AgentsFault(format!(
                "the agent's working folder cannot be carried to the tests' fresh environment: {e}"
            )));
        }
        Err(e) => return Err(e),
    }
    // The patch came from the agent's environment: no snapshot of this one. Its network is the
    // verifier's when the task gives it one.
    let verifiers;
    let spec = match task.tests.as_ref().and_then(|t| t.network.clone()) {
        Some((network, allowed_hosts)) => {
            verifiers = agenteval_core::environment::EnvSpec { network, allowed_hosts, ..spec.clone() };
            &verifiers
        }
        None => spec,
    };
    let fresh = prepare_session(ctx, task, spec, false, log).await?;
    if let Err(e) = fresh.env.copy_in(&fresh.handle, carried.path(), &fresh.handle.workdir).await {
        tear_down(ctx, &fresh, log).await;
        return Err(e);
    }
    log.push(format!("the tests run in a fresh environment ({}) with the agent's working folder", fresh.handle.id));
    Ok(Fresh::Made(fresh))
}

/// Tears an environment down and forgets it; a failure is logged (a sweep removes it later).
async fn tear_down(ctx: &Ctx, s: &EnvSession, log: &mut Vec<String>) {
    match s.env.teardown(&s.handle).await {
        Ok(()) => log.push(format!("environment {} removed", s.handle.id)),
        Err(e) => log.push(format!("environment {} not removed ({e}); the run's sweep removes it", s.handle.id)),
    }
    ctx.live.lock().expect("not poisoned").retain(|l| l.handle != s.handle);
    ctx.snapshots.lock().expect("not poisoned").remove(&s.handle.id);
}

/// The models a trace's calls used, with how many calls each: the gateway's `model.call`
/// events (but those it refused), and the `llm` agent's ticks that stand for theirs.
fn models_called(events: &[TraceEvent]) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    // A refused call used no model.
    let used = |e: &&TraceEvent| {
        matches!(e.kind, EventKind::ModelCall | EventKind::CostTick) && e.payload.get("refused").is_none()
    };
    for e in events.iter().filter(used) {
        if let Some(m) = e.payload.get("model").and_then(serde_json::Value::as_str).filter(|m| !m.is_empty()) {
            *out.entry(m.to_string()).or_default() += 1;
        }
    }
    out
}

/// Tears down every environment this worker still holds (a cancelled job's).
async fn tear_down_live(ctx: &Ctx) {
    let live: Vec<EnvSession> = std::mem::take(&mut *ctx.live.lock().expect("not poisoned"));
    ctx.snapshots.lock().expect("not poisoned").clear();
    for s in live {
        if let Err(e) = s.env.teardown(&s.handle).await {
            tracing::warn!("environment {} not removed: {e}", s.handle.id);
        }
    }
}

/// What the agent left: its patch against the starting state and the listed artifacts, kept
/// for the task's pack as `artifacts/…`.
async fn keep_artifacts(ctx: &Ctx, task: &TaskSpec, s: &EnvSession, log: &mut Vec<String>) -> Result<()> {
    // One budget for the patch and the artifacts together; what does not fit is left out whole.
    let mut left = ctx.config.environment.artifact_bytes();
    let snapshot = ctx.snapshots.lock().expect("not poisoned").get(&s.handle.id).cloned();
    if let Some(snapshot) = snapshot {
        match snapshot.patch_digested(s, left).await {
            Ok(patch) => {
                // The digest is kept even when the patch is not: `replay` compares final states by it.
                ctx.keep(&task.id, "artifacts/patch.sha256".into(), format!("{}\n", patch.sha256).into_bytes());
                match patch.text {
                    Some(text) => {
                        left = left.saturating_sub(text.len() as u64);
                        ctx.keep(&task.id, "artifacts/patch.diff".into(), ctx.redactor.redact(&text).into_bytes());
                    }
                    None => log.push(format!(
                        "artifact patch.diff not kept: left out: it is {} bytes, over the task's {left} (environment.max_artifact_bytes, for the patch and the artifacts together)",
                        patch.bytes
                    )),
                }
            }
            Err(e) => log.push(format!("artifact patch.diff not kept: {e}")),
        }
    }
    // A preset's own record of its run is kept beside what the config lists.
    let mut paths = ctx.config.environment.artifacts.clone();
    if let Some(p) = crate::agents::installed::InstalledAgent::from_config(&ctx.config.agent).and_then(|a| a.preset) {
        paths.push(p.record.to_string());
    }
    if paths.is_empty() {
        return Ok(());
    }
    let dir = tempfile::tempdir().map_err(|e| Error::io("a folder for the artifacts", e))?;
    log.extend(crate::environments::artifacts(s, &paths, dir.path(), left).await);
    let mut files = Vec::new();
    let mut todo = vec![dir.path().to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| Error::io("reading the artifacts", e))?.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.push(p);
            }
        }
    }
    for f in files {
        let rel = f.strip_prefix(dir.path()).expect("below the folder").to_string_lossy().into_owned();
        let bytes = std::fs::read(&f).map_err(|e| Error::io(format!("reading artifact {rel}"), e))?;
        ctx.keep(&task.id, format!("artifacts/{rel}"), bytes);
    }
    Ok(())
}

trait CloneMessage {
    fn clone_message(&self) -> Error;
}

impl CloneMessage for Error {
    fn clone_message(&self) -> Error {
        Error::new(self.kind(), self.to_string())
    }
}

/// The most a task's environment may grow by: its `storage_mb`, else the default.
fn storage_cap_bytes(task: &TaskSpec) -> u64 {
    task.environment.as_ref().and_then(|e| e.storage_mb).unwrap_or(DEFAULT_STORAGE_MB).saturating_mul(1 << 20)
}

/// Why a task went past its environment's storage.
fn storage_exceeded(used: u64, cap: u64) -> String {
    format!("the environment's files grew by {} MB, past its {} MB (the task's storage_mb)", used >> 20, cap >> 20)
}

/// The limits of its environment the agent went past, as its result says: the task's storage
/// (what it wrote there) and the environment's memory (a process killed for it).
async fn environment_limits(task: &TaskSpec, s: &EnvSession, agent: &mut AgentResult, log: &mut Vec<String>) {
    let cap = storage_cap_bytes(task);
    if let Some(used) = s.env.written_bytes(&s.handle).await
        && used > cap
        && agent.terminated_by != TerminatedBy::LimitDisk
    {
        agent.terminated_by = TerminatedBy::LimitDisk;
        agent.success = false;
        agent.error = Some(storage_exceeded(used, cap));
    }
    if agent.terminated_by == TerminatedBy::LimitDisk
        && let Some(e) = &agent.error
    {
        log.push(e.clone());
    }
    if s.env.out_of_memory(&s.handle).await && agent.terminated_by != TerminatedBy::LimitMemory {
        agent.terminated_by = TerminatedBy::LimitMemory;
        agent.success = false;
        agent.error = Some("a process went past the environment's memory limit and was killed".into());
        log.push("the environment's memory limit killed a process".into());
    }
}

/// What the agent changed outside its working folder, said in a line: every one of them counted,
/// never a sample (five dummy files must not hide a replaced `python3`).
fn changed_note(changed: &[String]) -> Option<String> {
    (!changed.is_empty()).then(|| {
        let shown: Vec<&str> = changed.iter().take(5).map(String::as_str).collect();
        let more = if changed.len() > 5 { format!(" and {} more", changed.len() - 5) } else { String::new() };
        format!(
            "the agent changed {} file(s) outside its working folder: {}{more} (all in artifacts/changed-outside.txt)",
            changed.len(),
            shown.join(", ")
        )
    })
}

/// Whether the task's tests grade by Harbor's rules (its agent's services kept running).
fn harbor_rules(task: &TaskSpec) -> bool {
    task.tests.as_ref().is_some_and(|t| t.rules == agenteval_core::environment::VerifierRules::Harbor)
}

/// Where the task's tests run: where the task says (Harbor's `environment_mode`), else the run's.
fn verify_in(ctx: &Ctx, task: &TaskSpec) -> VerifyIn {
    task.tests.as_ref().and_then(|t| t.verify_in).unwrap_or(ctx.config.environment.verify_in)
}

/// Runs the agent, grades its result, and closes the task's trace with the scores.
async fn run_and_grade(
    ctx: &Ctx,
    task: &TaskSpec,
    env: &TaskEnvironment,
    log: &mut Vec<String>,
) -> Result<(AgentResult, Vec<EvaluatorScore>, u64)> {
    let (mut agent, mut sink) = match &ctx.regrade {
        Some(source) => regrade::recorded(ctx, source, task, env, log).await?,
        // Only the reference agent is given the task's solution, fetched for it alone.
        None if matches!(ctx.config.agent, agenteval_core::config::AgentConfig::Oracle { .. }) => {
            let (task, _solution) =
                crate::environments::files::with_local_solution(ctx.store.as_ref(), &ctx.run_id, task).await?;
            execute::run_agent(ctx, &task, env, log).await?
        }
        None => execute::run_agent(ctx, task, env, log).await?,
    };
    env.findings.lock().expect("not poisoned").models = models_called(&sink.events);
    if let Some(s) = &env.session {
        environment_limits(task, s, &mut agent, log).await;
        // Nothing of the agent runs while its patch is taken and it is graded; under Harbor's
        // rules its servers keep running for the tests and the rest is held still while they run
        // (`environments::leftovers`).
        if !harbor_rules(task) {
            s.env.quiesce(&s.handle).await?;
        }
        keep_artifacts(ctx, task, s, log).await?;
    }
    // The tests reach this machine only now that nothing of the agent runs.
    let fetched = crate::environments::files::with_local_tests(ctx.store.as_ref(), &ctx.run_id, task).await?;
    let task = fetched.as_ref().map_or(task, |(t, _)| t);
    let mut refused = None;
    let fresh = match &env.session {
        Some(s) if verify_in(ctx, task) == VerifyIn::Fresh && grade::by_tests(ctx, task) => {
            match fresh_for_tests(ctx, task, s, log).await? {
                Fresh::Made(f) => Some(f),
                Fresh::AgentsFault(why) => {
                    log.push(why.clone());
                    agent.terminated_by = TerminatedBy::LimitDisk;
                    agent.success = false;
                    agent.error = Some(why.clone());
                    refused = Some(why);
                    None
                }
            }
        }
        _ => None,
    };
    // Under Harbor's way the tests trust the environment the agent left: what it changed outside
    // its folder (a replaced `python3`) is said beside a pass.
    let changed = match (&env.session, &fresh) {
        (Some(s), None) if refused.is_none() && grade::by_tests(ctx, task) => s.env.changed_outside(&s.handle).await,
        _ => Vec::new(),
    };
    let changed_note = changed_note(&changed);
    if let Some(n) = &changed_note {
        log.push(n.clone());
        let all = changed.iter().map(|p| format!("{p}\n")).collect::<String>();
        ctx.keep(&task.id, "artifacts/changed-outside.txt".into(), all.into_bytes());
    }
    let mut scores = match &fresh {
        // Not graded: the tests would run where the agent's working folder is not.
        None if refused.is_some() => {
            vec![EvaluatorScore::errored("tests", "tests", refused.clone().unwrap_or_default())]
        }
        Some(f) => {
            let graded = TaskEnvironment { session: Some(f.clone()), ..env.clone() };
            let scores = grade::grade(ctx, task, &agent, &sink.events, &graded).await;
            tear_down(ctx, f, log).await;
            scores
        }
        None => grade::grade(ctx, task, &agent, &sink.events, env).await,
    };
    if let Some(n) = &changed_note {
        for s in scores.iter_mut().filter(|s| s.kind == "tests" && s.passed) {
            s.reason
                .push_str(&format!("; note: {n}, which the tests trusted (environment.verify_in: fresh would not)"));
        }
    }
    for s in &scores {
        let mut payload = json!({"evaluator_id": s.evaluator_id, "kind": s.kind, "score": s.score, "passed": s.passed, "reason": s.reason});
        if s.tokens > 0 {
            payload["tokens"] = json!(s.tokens);
        }
        sink.write(EventKind::EvaluatorScore, payload, s.cost_usd, 0, 0).await;
    }
    sink.appender.finish().await?;
    if let Some(e) = sink.write_error.take() {
        return Err(e);
    }
    if let Some(copy) = sink.copy.take() {
        ctx.keep_trace(&task.id, copy);
    }
    Ok((agent, scores, changed.len() as u64))
}
