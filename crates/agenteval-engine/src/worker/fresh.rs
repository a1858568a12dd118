//! Fresh environments for a task's grader (`TaskEnvironment::fresh`): another environment of
//! the task's own image, which its agent never touched (SWE-bench grades in one).

use std::sync::Arc;

use agenteval_core::environment::EnvSpec;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::{EnvSession, Environment, FreshEnvironment};
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;

pub(super) struct TaskFresh {
    pub env: Arc<dyn Environment>,
    pub run: RunId,
    pub task: TaskSpec,
    pub attempt: u32,
    pub spec: EnvSpec,
    /// The worker runs in the task's own container (a fleet job of its image) and an agent acted
    /// in it: there is no other container of the image to be had, and this one is not fresh.
    pub only_a_used_one: bool,
}

#[async_trait]
impl FreshEnvironment for TaskFresh {
    async fn make(&self) -> Result<EnvSession> {
        if self.only_a_used_one {
            return Err(Error::invalid(
                "this fleet runs each job inside its task's own container, where the agent acted: there is no fresh one to grade in (grade a `predictions` run there, or run agents on the local backend)",
            ));
        }
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
