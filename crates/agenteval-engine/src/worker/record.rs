//! The record stage: what a task attempt came to, as its result (its turn's, or the
//! infrastructure's failure; with what the graders found, redacted), and that result and the
//! attempt's files staged as the task's pack, recorded in the index, and published when this
//! attempt is the one that counts.

use agenteval_core::Result;
use agenteval_core::model::*;
use agenteval_core::traits::TaskEnvironment;
use chrono::{DateTime, Utc};

use crate::bundle::{publish_staged, stage_task_pack};

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::decide;
use super::plan::Plan;
use super::prepare::Prepared;
use super::turn::Turn;

/// The attempt's result from its turn (an `Err`: the infrastructure failed it) and what its
/// environment's graders found; its log's last line says it.
pub(super) fn result(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    turn: Result<Turn>,
    prepared: &Prepared,
    started_at: DateTime<Utc>,
    at: &mut Attempt,
) -> TaskResult {
    let Turn { agent, scores, changed } = match turn {
        Ok(t) => t,
        Err(e) => {
            at.say(format!("infrastructure failure: {e}"));
            let (mut agent, scores) = decide::infra_failure(ctx.redactor.redact(&e.to_string()));
            // The install's own failure is the agent's, and says which field fixes it.
            agent.fault = prepared.fault.clone();
            Turn { agent, scores, changed: 0 }
        }
    };
    let mut result = decide::task_result(&ctx.job, task, agent, scores, changed, started_at);
    result.setup_seconds = prepared.setup_seconds;
    if let Ok(env) = &prepared.env {
        found(ctx, env, &mut result, at);
    }
    result.harbor_would_skip = plan.would_skip.clone();
    at.say(decide::finished_line(&result));
    result
}

/// What the graders found in the environment, into the result and the attempt's files.
fn found(ctx: &Ctx, env: &TaskEnvironment, result: &mut TaskResult, at: &mut Attempt) {
    let found = std::mem::take(&mut *env.findings.lock().expect("not poisoned"));
    for (name, bytes) in found.files {
        let text = ctx.redactor.redact(&String::from_utf8_lossy(&bytes));
        at.keep(format!("artifacts/{name}"), text.into_bytes());
    }
    // What a grader doubts may quote the environment (a process's command line): redacted.
    let suspect: Vec<String> = found.suspect.iter().map(|s| ctx.redactor.redact(s)).collect();
    for s in &suspect {
        at.say(format!("suspect: {s}"));
    }
    result.suspect = suspect;
    // Paths are the environment's words: redacted like the rest; each file once.
    let mut tampered: Vec<agenteval_core::tamper::Tampered> = Vec::new();
    for t in found.tampered {
        let t =
            agenteval_core::tamper::Tampered { path: ctx.redactor.redact(&t.path), why: ctx.redactor.redact(&t.why) };
        if !tampered.iter().any(|x| x.path == t.path) {
            tampered.push(t);
        }
    }
    result.tampered = tampered;
    if let Some(w) = &found.without_tampering {
        at.say(format!(
            "without the tampering ({} taken out) the patch {}: {}",
            w.removed.join(", "),
            if w.passed { "passes" } else { "does not pass" },
            w.reason
        ));
    }
    result.without_tampering = found.without_tampering;
    result.rewards = found.rewards;
    result.unscored = found.unscored;
    result.models = found.models;
    result.roles = found.roles;
    result.provider_wait_seconds = found.provider_wait_ms as f64 / 1000.0;
    result.steps = found.steps;
}

/// Writes a finished task's files and records it; `Err` only for failures of agenteval's own
/// storage.
pub(super) async fn write(
    ctx: &Ctx,
    task: &TaskSpec,
    result: TaskResult,
    at: Attempt,
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
    let log = at.log_text();
    let outcome = crate::bundle::Outcome { result: &result, log: &log, spans: spans.as_deref(), trace: at.trace };
    stage_task_pack(ctx.store.as_ref(), outcome, &at.files, &redact).await?;
    if !ctx.index.record_task(run, &TaskTransition::completed(&result)).await? {
        tracing::warn!(task = %task.id, attempt, "another attempt completed this task first; publishing nothing");
        return Ok(());
    }
    publish_staged(ctx.store.as_ref(), run, job, attempt, &task.id).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use agenteval_core::Error;
    use agenteval_core::secret::Secret;
    use agenteval_core::traits::Findings;

    use super::*;
    use crate::worker::testing;

    #[tokio::test]
    async fn an_infrastructure_failure_keeps_the_agents_fault_and_what_the_benchmark_declared() {
        let (ctx, _dir) = testing::ctx("", None);
        let task = testing::task(serde_json::json!({"id": "t", "input": "q"}));
        let mut plan = Plan::of(&ctx, &task);
        plan.would_skip = Some("its name has no org/".into());
        let prepared = Prepared {
            env: Err(Error::invalid("the install failed")),
            setup_seconds: Some(2.5),
            fault: Some(AgentFault::KeyRefused),
        };
        let mut at = testing::attempt();
        let turn = Err(Error::invalid("the install failed"));
        let r = result(&ctx, &plan, &task, turn, &prepared, Utc::now(), &mut at);
        assert_eq!((r.passed, r.agent.terminated_by), (false, TerminatedBy::InfraFailure));
        assert_eq!(r.agent.fault, Some(AgentFault::KeyRefused), "the field that fixes it travels");
        assert_eq!((r.setup_seconds, r.harbor_would_skip.as_deref()), (Some(2.5), Some("its name has no org/")));
        assert!(at.log.iter().any(|l| l == "infrastructure failure: the install failed"), "{:?}", at.log);
        assert!(at.log.last().unwrap().contains("finished: passed=false"), "{:?}", at.log);
    }

    #[tokio::test]
    async fn what_a_grader_found_is_redacted_into_the_result_and_the_pack() {
        let (ctx, _dir) = testing::ctx("", None);
        ctx.redactor.add(&Secret::new("sk-live-0123456789abcdef"));
        let task = testing::task(serde_json::json!({"id": "t", "input": "q"}));
        let env = TaskEnvironment::default();
        *env.findings.lock().unwrap() = Findings {
            files: vec![("report.txt".into(), b"token sk-live-0123456789abcdef".to_vec())],
            suspect: vec!["python3 serve.py --key sk-live-0123456789abcdef (pid 12)".into()],
            unscored: true,
            ..Findings::default()
        };
        let prepared = Prepared { env: Ok(env), setup_seconds: None, fault: None };
        let turn = Turn { agent: testing::completed(), scores: vec![], changed: 3 };
        let mut at = testing::attempt();
        let r = result(&ctx, &Plan::of(&ctx, &task), &task, Ok(turn), &prepared, Utc::now(), &mut at);
        assert!(r.unscored && r.changed_outside == 3, "{r:?}");
        assert!(r.suspect[0].starts_with("python3 serve.py") && !r.suspect[0].contains("0123456789"), "{r:?}");
        let (name, bytes) = &at.files[0];
        assert_eq!(name, "artifacts/report.txt");
        assert!(!String::from_utf8_lossy(bytes).contains("0123456789"), "redacted in the pack");
        assert!(!at.log_text().contains("0123456789"), "nor in the log");
    }
}
