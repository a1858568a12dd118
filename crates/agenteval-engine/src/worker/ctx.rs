//! A worker's context, built once per job (`start.rs`): its run, job and config, the store and
//! index it writes, the benchmark, agent and evaluators it runs, the secrets, environments,
//! gateway and cassettes of its tasks, and the environments still live.

use std::sync::Arc;

use agenteval_core::RunId;
use agenteval_core::config::RunConfig;
use agenteval_core::model::*;
use agenteval_core::secret::{Redactor, Secret};
use agenteval_core::traits::*;
use agenteval_llm::Cassettes;

use crate::telemetry::Journal;

/// Everything a worker needs, built once per job.
pub(super) struct Ctx {
    pub(super) run_id: RunId,
    pub(super) job: JobSpec,
    pub(super) config: RunConfig,
    /// The bundle. (No sums are recorded: the seal takes each task pack's from reading it.)
    pub(super) store: Arc<dyn BundleStore>,
    pub(super) index: Arc<dyn RunIndex>,
    pub(super) benchmark: Arc<dyn BenchmarkAdapter>,
    pub(super) agent: Arc<dyn AgentRunner>,
    /// What the agent said it needs, asked once.
    pub(super) needs: AgentNeeds,
    pub(super) evaluators: Vec<Arc<dyn Evaluator>>,
    /// The agent's secrets, by environment variable name.
    pub(super) secrets: Vec<(String, Secret)>,
    pub(super) redactor: Redactor,
    /// Where this job's tasks hang in the run's trace (the controller's `eval.job` span).
    pub(super) traceparent: Option<String>,
    pub(super) journal: Journal,
    /// The judges' keys, for evaluators a task brings.
    pub(super) judge_secrets: Vec<(String, Secret)>,
    /// The task's tool servers' secrets (`roles.tools.secrets`), by variable: given to a
    /// sidecar that names the variable, never to the agent.
    pub(super) tool_secrets: Vec<(String, Secret)>,
    /// Where the tasks' agents act, for a run whose tasks have environments.
    pub(super) environment: Option<Arc<dyn Environment>>,
    /// The job's tasks run in their own image on a fleet (a job with an `image`): each
    /// environment is launched there, the image already holding an installed agent's layer.
    pub(super) in_task_images: bool,
    /// The environments this worker has prepared and not yet torn down (a cancelled job tears
    /// them down on its way out).
    pub(super) live: std::sync::Mutex<Vec<EnvSession>>,
    /// The starting state of each live environment's working folder, by its handle's id (the
    /// agent's patch is taken against it).
    pub(super) snapshots:
        std::sync::Mutex<std::collections::HashMap<String, Arc<crate::environments::snapshot::Snapshot>>>,
    /// When the run's lease last said to go on: tasks starting together read it once
    /// (`LEASE_FRESH`), not once each.
    pub(super) lease_seen: std::sync::Mutex<Option<std::time::Instant>>,
    /// Cassettes fetched from a run's bundle for this job, removed when the job ends.
    pub(super) _fetched_cassettes: Option<tempfile::TempDir>,
    /// The model gateway the agent's calls go through (`agent.upstream`), and the cassettes
    /// its doors record to or replay from.
    pub(super) gateway: Option<Arc<dyn agenteval_core::gateway::ModelGateway>>,
    pub(super) cassettes: Option<Cassettes>,
}
