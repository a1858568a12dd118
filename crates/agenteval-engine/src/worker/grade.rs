//! The grade stage: the benchmark's own grader (or the task's tests), then the run's evaluators
//! and the task's own, each in its span, where the verify stage said; the scores then close the
//! task's trace. An evaluator that fails gives an error score; it never fails the job.

use agenteval_core::model::*;
use agenteval_core::secret::Redactor;
use agenteval_core::traits::*;
use tracing::Instrument;
use tracing::field::Empty;

use agenteval_core::Result;
use serde_json::json;

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::{Plan, has_tests_evaluator};
use super::sink::TraceSink;
use super::verify::Verified;

use crate::evaluators::{evaluate_safely, evaluator_from_config, verifier};
use crate::telemetry;
use futures::FutureExt as _;

/// Grades the attempt where `verified` says, and closes its trace with the scores (the trace's
/// copy, when small, kept for the pack). `Err` only when the trace cannot be written.
pub(super) async fn grade_attempt(
    ctx: &Ctx,
    plan: &Plan,
    verified: &Verified,
    agent: &AgentResult,
    mut sink: TraceSink,
    env: &TaskEnvironment,
    at: &mut Attempt,
) -> Result<Vec<EvaluatorScore>> {
    let task = &verified.task;
    let graded = match &verified.fresh {
        Some(f) => TaskEnvironment { session: Some(f.clone()), ..env.clone() },
        None => env.clone(),
    };
    // Tests that call a model reach the run's judge, through a door of their own.
    let judge = match &verified.refused {
        Some(_) => Ok(None),
        None => super::judge::open(ctx, task, &graded).await,
    };
    let (mut scores, judge) = match (&verified.refused, judge) {
        // Not graded: the tests would run where the agent's working folder is not.
        (Some(why), _) => (vec![EvaluatorScore::errored("tests", "tests", why.clone())], None),
        (None, Err(why)) => (vec![EvaluatorScore::errored("tests", "tests", why)], None),
        (None, Ok(None)) => (grade(ctx, plan, task, agent, &sink.events, &graded).await, None),
        (None, Ok(Some((judged, door)))) => (grade(ctx, plan, &judged, agent, &sink.events, &graded).await, Some(door)),
    };
    if let Some(door) = judge {
        let (back, usage, stop) = super::judge::settle(ctx, task, door, sink, at).await?;
        sink = back;
        if let Some(u) = usage {
            env.findings.lock().expect("not poisoned").roles.entry("judge".into()).or_default().add(&u);
        }
        // A judge refused its call (its budget spent, a replay miss): the tests' grade is not theirs.
        if let Some(why) = stop {
            for s in scores.iter_mut().filter(|s| s.kind == "tests") {
                *s = EvaluatorScore::errored(&s.evaluator_id, "tests", format!("the judge role: {why}"));
            }
        }
    }
    // An agent allowed to trace processes could have traced the tests it shared a container
    // with: under Harbor's rules such a pass is in doubt unless the tests ran elsewhere.
    let traced = task.environment.as_ref().is_some_and(|e| e.ptrace);
    if traced && plan.harbor_rules && verified.fresh.is_none() && scores.iter().any(|s| s.kind == "tests" && s.passed) {
        env.findings.lock().expect("not poisoned").suspect.push(
            "the task lets its agent trace processes (allow_ptrace) and its tests ran in the container the agent \
             left: the agent could have traced them (environment.verify_in: fresh would not)"
                .into(),
        );
    }
    if let Some(n) = &verified.changed_note {
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
    at.trace = sink.copy.take();
    Ok(scores)
}

/// Every score of a task: the benchmark's grade first (unless the task names its own check of
/// the answer), then the run's evaluators', then the task's.
async fn grade(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    agent: &AgentResult,
    trace: &[TraceEvent],
    env: &TaskEnvironment,
) -> Vec<EvaluatorScore> {
    let mut scores = Vec::new();
    let session = env.session.as_ref();
    // A task that brings tests (Harbor's, a case's `tests`) is graded by them: by the run's
    // `tests` evaluator when it has one (its settings), else here, in the benchmark's place. A
    // task in an environment under a `tests` evaluator has no other check of the answer.
    let tests_evaluator = has_tests_evaluator(&ctx.config);
    let by_tests = plan.by_tests;
    if let Some(spec) = task.tests.as_ref().filter(|_| !tests_evaluator) {
        let grade = tracing::info_span!("benchmark.grade", agenteval.passed = Empty);
        let verified = verifier::verify_all("benchmark", session, spec, agent).instrument(grade.clone()).await;
        score_span(&grade, &verified.score, &ctx.redactor);
        drop(grade);
        scores.push(verified.score);
        scores.extend(verified.named);
        let mut findings = env.findings.lock().expect("not poisoned");
        findings.rewards = verified.rewards;
        findings.unscored = verified.unscored;
        findings.suspect.extend(verified.suspect);
    }
    // A case that names its own check of the answer is graded by it: the benchmark's own (the
    // answer equals `expected`, as it is) would overrule what the case asked for (an
    // `exact_match` that ignores case). A case naming only how the agent must work (`no_error`,
    // budgets, tools) keeps the benchmark's check: a wrong answer must not pass by it.
    if !by_tests && !task.evaluators.iter().any(|e| e.judges_the_answer()) {
        let grade = tracing::info_span!("benchmark.grade", agenteval.passed = Empty);
        let graded = ctx.benchmark.grade(task, agent, trace, env).instrument(grade.clone()).await;
        score_span(&grade, &graded, &ctx.redactor);
        drop(grade);
        scores.push(graded);
    }
    let task_evaluators =
        task.evaluators.iter().map(|e| evaluator_from_config(e, &ctx.judge_secrets)).collect::<Vec<_>>();
    let input = EvalInput { task, result: agent, trace, env: session };
    // The run's evaluators and the task's own run at once (a judge waits on its model, a
    // `command` on its program), their scores kept in the config's order. `ctx.evaluators`
    // were built from `config.evaluators`, in order.
    let run_scores = ctx.evaluators.iter().zip(&ctx.config.evaluators).map(|(e, cfg)| {
        let input = &input;
        async move {
            let mut s = evaluate_in_span(e.as_ref(), input, &ctx.redactor).await;
            s.optional = cfg.optional();
            s
        }
        .boxed()
    });
    let task_scores = task_evaluators.iter().zip(&task.evaluators).enumerate().map(|(i, (e, cfg))| {
        let input = &input;
        async move {
            let mut s = match e {
                Ok(e) => evaluate_in_span(e.as_ref(), input, &ctx.redactor).await,
                Err(err) => EvaluatorScore::errored(&format!("task-evaluator-{i}"), "unknown", err.to_string()),
            };
            s.optional = cfg.optional();
            s
        }
        .boxed()
    });
    scores.extend(futures::future::join_all(run_scores.chain(task_scores)).await);
    scores
}

fn score_span(span: &tracing::Span, s: &EvaluatorScore, redactor: &Redactor) {
    span.record("agenteval.passed", s.passed);
    if let Some(e) = &s.error {
        telemetry::set_error(span, &redactor.redact(e));
    }
}

/// Runs an evaluator in its `evaluator.<kind>` span.
async fn evaluate_in_span(e: &dyn Evaluator, input: &EvalInput<'_>, redactor: &Redactor) -> EvaluatorScore {
    let span = tracing::info_span!(
        "evaluator",
        otel.name = format!("evaluator.{}", e.kind()),
        agenteval.evaluator.id = e.id(),
        agenteval.score = Empty,
        agenteval.passed = Empty,
    );
    let score = evaluate_safely(e, input).instrument(span.clone()).await;
    span.record("agenteval.score", score.score);
    score_span(&span, &score, redactor);
    score
}

#[cfg(test)]
mod tests {
    use agenteval_core::config::Limits;

    use super::*;
    use crate::worker::plan::Plan;
    use crate::worker::sink::testing::sink;
    use crate::worker::testing;

    #[tokio::test]
    async fn tests_that_cannot_run_are_an_evaluator_error_and_the_scores_close_the_trace() {
        let (ctx, _dir) = testing::ctx("", None);
        let task = testing::task(serde_json::json!({"id": "t", "input": "q", "expected": "a"}));
        let verified = Verified::for_tests(task.clone(), Some("the working folder is over 1 GiB".into()), None);
        let (trace, written) = sink(Limits::default(), ctx.redactor.clone());
        let mut at = testing::attempt();
        let plan = Plan::of(&ctx, &task);
        let env = TaskEnvironment::default();
        let scores = grade_attempt(&ctx, &plan, &verified, &testing::completed(), trace, &env, &mut at).await.unwrap();
        assert_eq!(scores.len(), 1, "{scores:?}");
        assert!(!scores[0].passed && scores[0].error.as_deref() == Some("the working folder is over 1 GiB"));
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        assert!(text.contains("\"evaluator.score\""), "{text}");
        assert_eq!(at.trace.as_deref(), Some(text.as_bytes()), "the short trace is kept for the pack");
    }

    #[tokio::test]
    async fn the_benchmark_grades_the_answer_where_there_are_no_tests() {
        let (ctx, _dir) = testing::ctx("", None);
        let task = testing::task(serde_json::json!({"id": "t", "input": "q", "expected": "a"}));
        let verified = Verified::for_tests(task.clone(), None, None);
        let (trace, _) = sink(Limits::default(), ctx.redactor.clone());
        let plan = Plan::of(&ctx, &task);
        let env = TaskEnvironment::default();
        let mut at = testing::attempt();
        let scores = grade_attempt(&ctx, &plan, &verified, &testing::completed(), trace, &env, &mut at).await.unwrap();
        assert_eq!(
            scores.iter().map(|s| (s.evaluator_id.as_str(), s.passed)).collect::<Vec<_>>(),
            [("benchmark", true)]
        );
    }
}
