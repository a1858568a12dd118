//! The worker's decisions, as pure functions (the loop in `mod.rs` only applies them): the exit
//! code a job that cannot start ends with, whether a task may start under the run's lease, what
//! a task the infrastructure failed records, and what a finished task's result says.

use agenteval_core::model::scores_pass;
use agenteval_core::model::{AgentResult, EvaluatorScore, JobSpec, RunRecord, TaskResult, TaskSpec};
use agenteval_core::traits::worker_exit;
use agenteval_core::{ErrorKind, SCHEMA_VERSION};
use chrono::{DateTime, Utc};

/// The exit code of a job whose spec could not be read (`reading`) or whose agent, benchmark or
/// evaluators could not be built: a job that cannot run as specified (a bad spec or config, a
/// missing secret, a refused key) is not worth retrying; anything else (the store, the index)
/// may pass on another attempt.
pub(super) fn exit_for_start_error(kind: ErrorKind, reading: bool) -> i32 {
    match kind {
        ErrorKind::Invalid => worker_exit::BAD_JOB,
        ErrorKind::NotFound | ErrorKind::Unauthorized if !reading => worker_exit::BAD_JOB,
        _ => worker_exit::FAILED,
    }
}

/// Whether the next task of a job may start, from the run's record in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Lease {
    /// The run is still driven under the lease the job was dispatched with.
    Go,
    /// Stop the job with this exit code, for this reason (logged).
    Stop { code: i32, why: String },
}

/// One driver per run: a job dispatched under an older lease (its controller was taken over)
/// starts nothing more, so no agent runs twice for the same task; a run the index does not know
/// is a failure of the job, retried.
pub(super) fn lease(run: Option<&RunRecord>, job: &JobSpec) -> Lease {
    match run {
        Some(r) if r.epoch == job.epoch => Lease::Go,
        Some(r) => Lease::Stop {
            code: worker_exit::CANCELLED,
            why: format!(
                "stopping: the run is now driven by {} (epoch {}, this job's {})",
                r.controller, r.epoch, job.epoch
            ),
        },
        None => Lease::Stop {
            code: worker_exit::FAILED,
            why: format!("run {} is not in the index {}", job.run_id, job.index_uri),
        },
    }
}

/// What a task records when its environment or its run failed for the infrastructure: no
/// answer, the (redacted) error, `infra_failure`, and one errored score naming the benchmark.
pub(super) fn infra_failure(error: String) -> (AgentResult, Vec<EvaluatorScore>) {
    (AgentResult::infra_failure(error.clone()), vec![EvaluatorScore::errored("benchmark", "benchmark", error)])
}

/// A finished task's result: it passed when its scores say so (`scores_pass`).
pub(super) fn task_result(
    job: &JobSpec,
    task: &TaskSpec,
    agent: AgentResult,
    scores: Vec<EvaluatorScore>,
    changed_outside: u64,
    started_at: DateTime<Utc>,
) -> TaskResult {
    TaskResult {
        changed_outside,
        setup_seconds: None,
        suspect: vec![],
        tampered: vec![],
        without_tampering: None,
        rewards: None,
        unscored: false,
        models: Default::default(),
        provider_wait_seconds: 0.0,
        // The job's environments were launched from the task's image: the one its agent and tests saw.
        image: job.image.clone().filter(|_| task.environment.is_some()),
        schema_version: SCHEMA_VERSION.into(),
        run_id: job.run_id,
        task_id: task.id.clone(),
        job_id: job.job_id.clone(),
        attempt: job.attempt,
        passed: scores_pass(&scores),
        agent,
        scores,
        started_at,
        finished_at: Utc::now(),
        steps: vec![],
        harbor_would_skip: None,
        roles: Default::default(),
    }
}

/// The line a task's `worker.log` ends with.
pub(super) fn finished_line(result: &TaskResult) -> String {
    format!(
        "{} finished: passed={} terminated_by={} cost={} tokens={} wall={:.3}s",
        Utc::now().to_rfc3339(),
        result.passed,
        result.agent.terminated_by.as_str(),
        if result.agent.cost_unknown { "unknown".to_string() } else { format!("${:.6}", result.total_cost_usd()) },
        result.agent.total_tokens,
        result.agent.wall_seconds
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::model::TerminatedBy;
    use agenteval_core::{JobId, RunId};

    fn job(epoch: u32) -> JobSpec {
        JobSpec {
            schema_version: SCHEMA_VERSION.into(),
            run_id: RunId::new(),
            job_id: JobId::numbered(epoch, 3),
            attempt: 2,
            tasks: vec![],
            epoch,
            bundle_uri: "/b".into(),
            index_uri: "/b/index.sqlite".into(),
            env: Default::default(),
            image: None,
            ledger: None,
            tool_secrets: Default::default(),
        }
    }

    fn record(epoch: u32) -> RunRecord {
        RunRecord { epoch, ..agenteval_testkit::conformance::run_record(RunId::new(), "n") }
    }

    #[test]
    fn a_job_that_cannot_run_as_specified_is_not_retried() {
        assert_eq!(exit_for_start_error(ErrorKind::Invalid, true), worker_exit::BAD_JOB);
        assert_eq!(exit_for_start_error(ErrorKind::Invalid, false), worker_exit::BAD_JOB);
        // A missing secret or a refused key is the config's; a missing job spec is the store's.
        assert_eq!(exit_for_start_error(ErrorKind::NotFound, false), worker_exit::BAD_JOB);
        assert_eq!(exit_for_start_error(ErrorKind::Unauthorized, false), worker_exit::BAD_JOB);
        assert_eq!(exit_for_start_error(ErrorKind::NotFound, true), worker_exit::FAILED);
        assert_eq!(exit_for_start_error(ErrorKind::Transient, false), worker_exit::FAILED);
        assert_eq!(exit_for_start_error(ErrorKind::Io, true), worker_exit::FAILED);
    }

    #[test]
    fn a_task_starts_only_under_the_jobs_lease() {
        assert_eq!(lease(Some(&record(1)), &job(1)), Lease::Go);
        let Lease::Stop { code, why } = lease(Some(&record(2)), &job(1)) else { panic!("a newer lease stops the job") };
        assert_eq!(code, worker_exit::CANCELLED);
        assert!(why.contains("driven by host:1 (epoch 2, this job's 1)"), "{why}");
        let Lease::Stop { code, why } = lease(None, &job(0)) else { panic!("an unknown run stops the job") };
        assert_eq!(code, worker_exit::FAILED, "retried: the index may be back");
        assert!(why.contains("is not in the index /b/index.sqlite"), "{why}");
    }

    #[test]
    fn an_infrastructure_failure_never_passes_and_says_why() {
        let (agent, scores) = infra_failure("disk full".into());
        assert_eq!(agent.terminated_by, TerminatedBy::InfraFailure);
        assert_eq!(agent.error.as_deref(), Some("disk full"));
        assert!(agent.final_answer.is_none() && !agent.success);
        let task = TaskSpec {
            id: "t1".parse().unwrap(),
            input: serde_json::json!("q"),
            expected: None,
            tags: vec![],
            evaluators: vec![],
            metadata: serde_json::Value::Null,
            environment: None,
            content: None,
            tests: None,
            solution: None,
            steps: None,
            user: None,
        };
        let r = task_result(&job(0), &task, agent, scores, 0, Utc::now());
        assert!(!r.passed, "an errored score fails the task");
        assert_eq!((r.attempt, r.job_id.clone()), (2, JobId::numbered(0, 3)));
        assert!(
            finished_line(&r).ends_with("passed=false terminated_by=infra_failure cost=$0.000000 tokens=0 wall=0.000s")
        );
    }
}
