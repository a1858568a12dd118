//! Operations on jobs: dispatching one (job spec, queued tasks, submit, job record), recording
//! its end, asking the index what it left unfinished, giving tasks up with a result, and
//! stopping every job in flight.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::{JobId, Result, SCHEMA_VERSION};
use chrono::Utc;
use opentelemetry::KeyValue;
use serde_json::json;
use tracing::field::Empty;

use super::STOP_GRACE;
use super::decide::Pending;
use super::run::{InFlight, Run};
use crate::bundle::{self, to_json_bytes};
use crate::telemetry::{self, TRACEPARENT_ENV};

/// The `eval.job` span of one job attempt: a child of `eval.run` whatever span is current.
pub(super) fn job_span(run_span: &tracing::Span, p: &Pending) -> tracing::Span {
    tracing::info_span!(
        parent: run_span,
        "eval.job",
        agenteval.job.id = %p.job_id,
        agenteval.attempt = p.attempt as i64,
        agenteval.job.tasks = p.tasks.len() as i64,
        agenteval.job.handle = Empty,
        agenteval.job.status = Empty,
        agenteval.job.unfinished = Empty,
    )
}

pub(super) async fn dispatch(
    run: &Run,
    p: &Pending,
    span: &tracing::Span,
    worker_env: &BTreeMap<String, String>,
    ledger: Option<agenteval_core::RunId>,
) -> Result<JobHandle> {
    let mut env = worker_env.clone();
    if let Some(tp) = telemetry::traceparent(span) {
        env.insert(TRACEPARENT_ENV.into(), tp);
    }
    let tasks: Vec<_> = p.tasks.iter().map(|&i| run.tasks.spec(i as usize)).collect::<Result<_>>()?;
    // A job is made of tasks of one image (`decide::shard_by`).
    let image = if run.task_images {
        tasks.first().and_then(|t| t.environment.as_ref()).and_then(|e| e.image.clone())
    } else {
        None
    };
    let spec = JobSpec {
        schema_version: SCHEMA_VERSION.into(),
        run_id: run.run_id,
        job_id: p.job_id.clone(),
        attempt: p.attempt,
        epoch: run.epoch,
        tasks,
        bundle_uri: run.store.bundle_uri(&run.run_id),
        index_uri: run.index_uri.clone(),
        env,
        image,
        ledger: ledger.filter(|l| *l != run.run_id),
        tool_secrets: run.config.roles.tools.as_ref().map(|t| t.secrets.clone()).unwrap_or_default(),
    };
    run.store.put(&run.run_id, &layout::job_spec(&p.job_id, p.attempt), &to_json_bytes(&spec)).await?;
    let queued: Vec<_> = spec
        .tasks
        .iter()
        .map(|t| TaskTransition::new(t.id.clone(), p.attempt, TaskState::Queued).job(&p.job_id))
        .collect();
    run.index.record_tasks(&run.run_id, &queued).await?;
    let handle = run.backend.submit_job(&spec).await?;
    run.index
        .record_job(&JobRecord {
            run_id: run.run_id,
            handle: handle.clone(),
            status: JobState::Running,
            task_count: spec.tasks.len() as u32,
            updated_at: Utc::now(),
        })
        .await?;
    Ok(handle)
}

pub(super) async fn record_job(run: &Run, handle: &JobHandle, status: &JobStatus, n: usize) -> Result<()> {
    run.index
        .record_job(&JobRecord {
            run_id: run.run_id,
            handle: handle.clone(),
            status: JobState::of(status),
            task_count: n as u32,
            updated_at: Utc::now(),
        })
        .await
}

/// Tasks of a job the index does not record as completed or given up.
pub(super) async fn unfinished(run: &Run, tasks: &[u32]) -> Result<Vec<u32>> {
    Ok(finished_and_not(run, tasks).await?.1)
}

/// A job's tasks the index records as finished, and the others (by position).
pub(super) async fn finished_and_not(run: &Run, tasks: &[u32]) -> Result<(Vec<TaskRecord>, Vec<u32>)> {
    let ids: Vec<agenteval_core::TaskId> = tasks.iter().map(|&i| run.tasks.id(i as usize).clone()).collect();
    let records = run.index.get_tasks(&run.run_id, &ids).await?;
    let (mut done, mut left) = (Vec::new(), Vec::new());
    for (&i, record) in tasks.iter().zip(records) {
        match record {
            Some(t) if matches!(t.state, TaskState::Completed | TaskState::Failed) => {
                task_metrics(run, &t);
                done.push(t);
            }
            _ => left.push(i),
        }
    }
    Ok((done, left))
}

/// Per-task metrics, recorded once when the controller learns a task is finished (each task
/// belongs to exactly one job in flight).
fn task_metrics(run: &Run, t: &TaskRecord) {
    let Some(m) = &run.metrics else { return };
    let passed = t.passed.unwrap_or(false);
    m.tasks_completed.add(1, &m.attrs_with(KeyValue::new("agenteval.passed", passed)));
    m.task_duration.record(t.wall_seconds, m.attrs());
    m.tokens.add(t.tokens, m.attrs());
    m.cost.add(t.cost_usd, m.attrs());
}

/// Records tasks as infrastructure failures, with a result in the bundle so that the bundle
/// says what happened to every task.
/// Every task of the bundle has its `spans.jsonl`: for a task given up, the controller records an
/// `eval.task` span (status ERROR) under the last job attempt's span. It is parented through the
/// job's trace context, as a worker's would be, so that the journal keeps it apart from the
/// run's own spans.
pub(super) async fn give_up(
    run: &Run,
    job_span: &tracing::Span,
    job: &JobId,
    attempt: u32,
    tasks: &[u32],
    reason: &str,
) -> Result<()> {
    for &i in tasks {
        let task = run.tasks.spec(i as usize)?;
        let now = Utc::now();
        let msg = format!("gave up after attempt {attempt}: {reason}");
        let span = tracing::info_span!(
            parent: None,
            "eval.task",
            agenteval.run.id = %run.run_id,
            agenteval.task.id = %task.id,
            agenteval.job.id = %job,
            agenteval.attempt = attempt as i64,
            agenteval.benchmark = run.meta.benchmark.as_str(),
            agenteval.agent = run.meta.agent.as_str(),
            agenteval.backend = run.meta.backend.as_str(),
            agenteval.passed = false,
            agenteval.terminated_by = TerminatedBy::InfraFailure.as_str(),
            agenteval.given_up = true,
        );
        if let Some(tp) = telemetry::traceparent(job_span) {
            telemetry::set_remote_parent(&span, &tp);
        }
        telemetry::set_error(&span, &msg);
        let root = telemetry::span_id(&span);
        drop(span);
        let spans = match (root, &run.journal) {
            (Some(root), Some(j)) => Some(j.take_tree(root)),
            _ => None,
        };
        let result = TaskResult {
            image: None,
            changed_outside: 0,
            setup_seconds: None,
            suspect: vec![],
            tampered: vec![],
            without_tampering: None,
            rewards: None,
            unscored: false,
            models: Default::default(),
            provider_wait_seconds: 0.0,
            schema_version: SCHEMA_VERSION.into(),
            run_id: run.run_id,
            task_id: task.id.clone(),
            job_id: job.clone(),
            attempt,
            passed: false,
            agent: AgentResult::infra_failure(msg.clone()),
            scores: vec![EvaluatorScore::errored("benchmark", "benchmark", msg.clone())],
            started_at: now,
            finished_at: now,
            steps: vec![],
            harbor_would_skip: None,
            roles: Default::default(),
        };
        let trace = TraceEvent {
            run_id: run.run_id,
            task_id: task.id.clone(),
            step: 0,
            attempt,
            timestamp: now,
            kind: EventKind::AgentTerminal,
            payload: json!({"terminated_by": "infra_failure", "error": msg, "written_by": "controller"}),
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
        };
        let mut line = serde_json::to_vec(&trace).expect("serializes");
        line.push(b'\n');
        let log = format!("{} controller: {msg}\nsee {}\n", now.to_rfc3339(), layout::job_log(job, attempt));
        let keep = |t: &str| t.to_string();
        bundle::write_task_outcome(run.store.as_ref(), &result, &log, spans.as_deref(), &line, &keep).await?;
        if run.index.record_task(&run.run_id, &TaskTransition::completed(&result)).await?
            && let Some(m) = &run.metrics
        {
            m.tasks_completed.add(1, &m.attrs_with(KeyValue::new("agenteval.passed", false)));
            m.task_duration.record(0.0, m.attrs());
        }
    }
    Ok(())
}

/// Cancels every job in flight, waits (bounded) for them to stop, and records their unfinished
/// tasks as cancelled so `resume` picks them up.
pub(super) async fn stop_jobs(run: &Run, in_flight: &mut HashMap<JobId, InFlight>) -> Result<()> {
    for f in in_flight.values() {
        if let Err(e) = run.backend.cancel_job(&f.handle, "run stopped").await {
            tracing::warn!(job = %f.handle.job_id, "cancel failed: {e}");
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    while !in_flight.is_empty() && Instant::now() < deadline {
        run.backend.wait_for_change(Duration::from_millis(100)).await;
        let handles: Vec<JobHandle> = in_flight.values().map(|f| f.handle.clone()).collect();
        let Ok(statuses) = run.backend.job_status(&handles).await else {
            continue;
        };
        for (h, st) in handles.into_iter().zip(statuses) {
            if st.is_terminal()
                && let Some(f) = in_flight.remove(&h.job_id)
            {
                record_job(run, &h, &JobStatus::Cancelled, f.tasks.len()).await?;
                for i in unfinished(run, &f.tasks).await? {
                    let id = run.tasks.id(i as usize).clone();
                    run.index
                        .record_task(&run.run_id, &TaskTransition::new(id, h.attempt, TaskState::Cancelled))
                        .await?;
                }
            }
        }
    }
    for (_, f) in in_flight.drain() {
        tracing::warn!(job = %f.handle.job_id, "job did not stop in time");
        for i in unfinished(run, &f.tasks).await? {
            let id = run.tasks.id(i as usize).clone();
            run.index
                .record_task(&run.run_id, &TaskTransition::new(id, f.handle.attempt, TaskState::Cancelled))
                .await?;
        }
    }
    Ok(())
}
