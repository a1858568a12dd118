//! The act stage: what the agent did on the task, as its result and its open trace (which
//! grading goes on writing to). Live, the agent runs ([`live`]); for `agenteval regrade`, a
//! run's record stands in for it ([`recorded`]). Which one is chosen once per job.

mod live;
pub(super) mod metered;
mod recorded;

use std::sync::Arc;

use agenteval_core::model::{AgentResult, TaskSpec};
use agenteval_core::traits::{BundleStore, TaskEnvironment};
use agenteval_core::{Result, RunId};
use async_trait::async_trait;

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;
use super::sink::TraceSink;

/// How a job's tasks are acted on.
#[async_trait]
pub(super) trait Act: Send + Sync {
    /// The agent's result on `task` and its trace, still open.
    async fn act(
        &self,
        ctx: &Ctx,
        plan: &Plan,
        task: &TaskSpec,
        env: &TaskEnvironment,
        at: &mut Attempt,
    ) -> Result<(AgentResult, TraceSink)>;
}

/// The agent runs.
pub(super) struct Live;

#[async_trait]
impl Act for Live {
    async fn act(
        &self,
        ctx: &Ctx,
        plan: &Plan,
        task: &TaskSpec,
        env: &TaskEnvironment,
        at: &mut Attempt,
    ) -> Result<(AgentResult, TraceSink)> {
        if plan.sees_solution {
            // Only an agent that asked for it is given the task's solution, fetched for it alone.
            let (task, _solution) =
                crate::environments::files::with_local_solution(ctx.store.as_ref(), &ctx.run_id, task).await?;
            return live::run_agent(ctx, plan, &task, env, at).await;
        }
        live::run_agent(ctx, plan, task, env, at).await
    }
}

/// A run's record stands in for the agent (`agenteval regrade`): the bundle it reads, opened
/// once per job.
pub(super) struct Recorded {
    pub store: Arc<dyn BundleStore>,
    pub run: RunId,
}

#[async_trait]
impl Act for Recorded {
    async fn act(
        &self,
        ctx: &Ctx,
        _plan: &Plan,
        task: &TaskSpec,
        env: &TaskEnvironment,
        at: &mut Attempt,
    ) -> Result<(AgentResult, TraceSink)> {
        recorded::recorded(ctx, self, task, env, at).await
    }
}

/// The act of a job whose config regrades `source` (a run's bundle), else the live one.
pub(super) async fn chosen(
    regrade: Option<&agenteval_core::config::RegradeSource>,
    resolver: &dyn agenteval_core::traits::Resolver,
) -> Result<Box<dyn Act>> {
    Ok(match regrade {
        Some(src) => {
            let (store, run) = crate::resolve::store_from_bundle_uri(resolver, &src.bundle).await?;
            Box::new(Recorded { store, run })
        }
        None => Box::new(Live),
    })
}
