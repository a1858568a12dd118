//! The prepare stage: the task's environment made ready for its agent (the benchmark's
//! preparation, the installed agent's layer found or built, the environment started, its
//! healthcheck passed, its starting state snapshotted for the patch, the fresh environments its
//! benchmark's own grader may ask for), and torn down again once the attempt is graded.

use std::sync::Arc;

use agenteval_core::environment::EnvSpec;
use agenteval_core::model::{AgentFault, TaskSpec};
use agenteval_core::traits::{EnvSession, Environment, FreshEnvironment, TaskEnvironment};
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;
use tracing::Instrument;

use crate::agents::installed::layer::LayerError;
use crate::telemetry;

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;
use super::sessions::{prepare_session, tear_down};

/// What preparing came to: the task's environment (an `Err` is the task's infrastructure
/// failure), the seconds getting its agent ready took, and the agent's fault when its install
/// failed.
pub(super) struct Prepared {
    pub env: Result<TaskEnvironment>,
    pub setup_seconds: Option<f64>,
    pub fault: Option<AgentFault>,
}

/// Prepares the task's environment for its agent, in a `benchmark.prepare` span.
pub(super) async fn prepare(ctx: &Ctx, plan: &Plan, task: &TaskSpec, at: &mut Attempt) -> Prepared {
    let span = tracing::info_span!("benchmark.prepare");
    let mut env = ctx.benchmark.prepare_environment(&ctx.run_id, task).instrument(span.clone()).await;
    let (mut setup_seconds, mut fault) = (None, None);
    if let Ok(te) = &mut env
        && let Some(spec) = &task.environment
        && let Some(e) = &ctx.environment
    {
        te.fresh = Some(Arc::new(TaskFresh {
            env: e.clone(),
            run: ctx.run_id,
            task: task.clone(),
            attempt: ctx.job.attempt,
            // A fleet's fresh environment is a task definition: never given a key (it names
            // each for ECS to put into its sidecars, `prepare_session`).
            spec: match ctx.in_task_images {
                true => spec.clone(),
                false => super::sessions::with_tool_secrets(spec, &ctx.tool_secrets),
            },
        }));
    }
    // An agent that does not act (patches made elsewhere) gets no environment of its own.
    if let Ok(te) = &mut env
        && let Some(spec) = task.environment.as_ref().filter(|_| plan.acts)
    {
        let (prepared, setup) = prepare_with_agent(ctx, plan, task, spec, &span, at).await;
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
        telemetry::set_error(&span, &ctx.redactor.redact(&e.to_string()));
    }
    Prepared { env, setup_seconds, fault }
}

/// Tears down what preparing made, in a `benchmark.teardown` span; a failure is logged.
pub(super) async fn release(ctx: &Ctx, env: &TaskEnvironment, at: &mut Attempt) {
    let span = tracing::info_span!("benchmark.teardown");
    if let Some(s) = &env.session {
        tear_down(ctx, s, at).instrument(span.clone()).await;
    }
    if let Err(e) = ctx.benchmark.teardown(env).instrument(span.clone()).await {
        telemetry::set_error(&span, &ctx.redactor.redact(&e.to_string()));
        at.say(format!("teardown failed: {e}"));
    }
}

/// The task's environment prepared with its installed agent ready in it (its agent layer found
/// or built first; in a fleet job's own container, its install run there), and the seconds
/// getting the agent ready took: the task's setup, never the agent's time.
async fn prepare_with_agent(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    spec: &EnvSpec,
    prepare: &tracing::Span,
    at: &mut Attempt,
) -> (Result<EnvSession, LayerError>, Option<f64>) {
    let mut setup_seconds = None;
    if !spec.mcp_servers.is_empty() && !ctx.needs.takes_mcp_servers {
        let names: Vec<&str> = spec.mcp_servers.iter().map(|m| m.name.as_str()).collect();
        at.say(format!(
            "the task's MCP servers ({}) are not given to this agent, which has no MCP client of agenteval's (the `llm` agent, Claude Code, Codex and opencode take them)",
            names.join(", ")
        ));
    }
    let layer = &plan.layer;
    // An installed agent's layer first: its time is the task's setup, not the agent's.
    let layered = match layer {
        Some(layer) if !ctx.in_task_images => {
            let started = std::time::Instant::now();
            let made = agent_layer(ctx, task, spec, layer, at).await;
            setup_seconds = Some(started.elapsed().as_secs_f64());
            made.map(Some)
        }
        _ => Ok(None),
    };
    let mut prepared = match layered {
        Ok(layered) => {
            let spec = layered.as_ref().unwrap_or(spec);
            prepare_session(ctx, task, spec, true, at).instrument(prepare.clone()).await.map_err(LayerError::from)
        }
        Err(e) => Err(e),
    };
    // A fleet job in the task's own image has no image to layer: the image holds the layer, or
    // the install runs in the task's container itself, still as its setup.
    if let (Some(layer), true, Ok(s)) = (layer, ctx.in_task_images, &prepared) {
        let started = std::time::Instant::now();
        let span = tracing::info_span!("agent.setup", "agenteval.agent.layer" = %layer.name());
        let done = match &spec.agent_layer {
            Some(key) => layer.verify_in(&s.env, &s.handle, key).instrument(span).await.map(|()| None),
            None => layer.install_in(&s.env, &s.handle, &ctx.secrets).instrument(span).await,
        };
        setup_seconds = Some(started.elapsed().as_secs_f64());
        match done {
            Ok(None) => at.say(format!("agent layer {}: the environment's image is the layer", layer.name())),
            Ok(Some(out)) => at.say(format!(
                "agent {} installed in the environment in {:.1} s:\n{}",
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
/// (an `agent.setup` span; its output in the task's at). An `Err` is the task's infrastructure
/// failure, naming the install.
async fn agent_layer(
    ctx: &Ctx,
    task: &TaskSpec,
    spec: &EnvSpec,
    layer: &crate::agents::installed::layer::Layer,
    at: &mut Attempt,
) -> Result<EnvSpec, LayerError> {
    let Some(env) = &ctx.environment else { return Err(crate::environments::missing(&task.id).into()) };
    let span = tracing::info_span!("agent.setup", "agenteval.agent.layer" = %layer.name());
    let made = layer.ensure(env, &ctx.run_id, task, ctx.job.attempt, spec, &ctx.secrets).instrument(span.clone()).await;
    match made {
        Ok(ready) => {
            at.say(ready.note);
            if !ready.output.trim().is_empty() {
                at.say(format!("the install said:\n{}", ctx.redactor.redact(ready.output.trim_end())));
            }
            Ok(EnvSpec { image: Some(ready.image), context: None, ..spec.clone() })
        }
        Err(e) => {
            let error = Error::new(e.error.kind(), ctx.redactor.redact(&e.to_string()));
            telemetry::set_error(&span, &error.to_string());
            Err(LayerError { error, fault: e.fault })
        }
    }
}

/// Fresh environments of one task's image for its benchmark's grader (SWE-bench grades in one).
pub(super) struct TaskFresh {
    pub env: Arc<dyn Environment>,
    pub run: RunId,
    pub task: TaskSpec,
    pub attempt: u32,
    pub spec: EnvSpec,
}

#[async_trait]
impl FreshEnvironment for TaskFresh {
    async fn make(&self) -> Result<EnvSession> {
        // The task's image as it is: never an installed agent's layer.
        let spec = EnvSpec { agent_layer: None, ..self.spec.clone() };
        let handle = self.env.prepare(&self.run, &self.task, self.attempt, &spec).await?;
        Ok(EnvSession { env: self.env.clone(), handle })
    }

    async fn discard(&self, session: &EnvSession) {
        if let Err(e) = session.env.teardown(&session.handle).await {
            tracing::warn!("environment {} not removed ({e}); the run's sweep removes it", session.handle.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agenteval_testkit::fake_env::{Asked, FakeEnvironment, Script};

    use super::*;
    use crate::worker::testing;

    #[tokio::test]
    async fn an_environment_that_fails_its_healthcheck_is_the_tasks_infra_and_is_torn_down() {
        let fake = Arc::new(FakeEnvironment::new(Script { exit_code: 1, ..Script::default() }));
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = testing::task(serde_json::json!({
            "id": "t", "input": "q",
            "environment": {"healthcheck": {"command": "curl -f localhost", "interval_secs": 0.01, "timeout_secs": 1, "retries": 1}}
        }));
        let mut at = testing::attempt();
        let prepared = prepare(&ctx, &Plan::of(&ctx, &task), &task, &mut at).await;
        let err = prepared.env.expect_err("the task cannot run");
        assert!(err.to_string().contains("curl -f localhost"), "{err}");
        assert!(prepared.fault.is_none(), "an environment's failure is not the agent's");
        assert!(matches!(fake.asked().last(), Some(Asked::Teardown(_))), "{:?}", fake.asked());
        assert!(ctx.live.lock().unwrap().is_empty(), "nothing left live");
    }

    #[tokio::test]
    async fn an_agent_whose_answers_were_made_elsewhere_gets_no_environment() {
        let fake = Arc::new(FakeEnvironment::default());
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = testing::task(serde_json::json!({"id": "t", "input": "q", "environment": {}}));
        let mut plan = Plan::of(&ctx, &task);
        plan.acts = false;
        let prepared = prepare(&ctx, &plan, &task, &mut testing::attempt()).await;
        let env = prepared.env.unwrap();
        assert!(env.session.is_none() && env.fresh.is_some(), "its grader may still ask for a fresh one");
        assert!(fake.asked().is_empty(), "{:?}", fake.asked());
    }
}
