//! One turn of a task attempt: act → capture → verify → grade, each stage handing the next what
//! it made. A task runs one turn, or one per step (`steps.rs`).

use agenteval_core::Result;
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec};
use agenteval_core::traits::TaskEnvironment;

use super::act::Act;
use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;
use super::{capture, grade, tamper, verify};

/// What a turn came to: the agent's result, its scores, and how many files the agent changed
/// outside its working folder that the tests trusted.
pub(super) struct Turn {
    pub agent: AgentResult,
    pub scores: Vec<EvaluatorScore>,
    pub changed: u64,
}

/// Acts on `task` in `env`, takes what the agent left, and grades it where the plan says.
pub(super) async fn turn(
    ctx: &Ctx,
    act: &dyn Act,
    plan: &Plan,
    task: &TaskSpec,
    env: &TaskEnvironment,
    at: &mut Attempt,
) -> Result<Turn> {
    let since = std::time::SystemTime::now();
    let (mut agent, sink) = act.act(ctx, plan, task, env, at).await?;
    capture::capture(ctx, plan, task, env, &mut agent, &sink.events, at).await?;
    let verified = verify::verify(ctx, plan, task, env, &mut agent, at).await?;
    tamper::audit(plan, &verified, env, since, at).await;
    let scores = grade::grade_attempt(ctx, plan, &verified, &agent, sink, env, at).await;
    verify::release(ctx, &verified, at).await;
    if let Some(s) = &env.session {
        crate::environments::leftovers::forget(s).await;
    }
    Ok(Turn { scores: scores?, changed: verified.changed.len() as u64, agent })
}
