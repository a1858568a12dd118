//! The documents of a bundle that every reader needs (`metadata.json`, `manifest.json`), next to
//! [`crate::layout`]'s file names. Their fields are the on-disk format (`docs/bundle-format.md`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::RunId;
use crate::model::RunStatus;

/// `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub schema_version: String,
    pub run_id: RunId,
    pub name: String,
    /// `running` until sealed.
    pub status: RunStatus,
    pub sealed: bool,
    pub backend: String,
    pub benchmark: String,
    pub agent: String,
    pub config_hash: String,
    pub agenteval_version: String,
    pub git_sha: Option<String>,
    pub tasks_total: u64,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Times the run was resumed.
    pub resumed: u32,
    /// Why the run ended as it did, when that needs saying (an agent that cannot run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `--set` overrides given to `resume` (budget, limits, concurrency), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resume_overrides: Vec<String>,
    /// The run whose failed tasks this run re-runs (`agenteval rerun RUN --failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<RunId>,
    /// The sha256 of the agent's packed folder (`agent.pack: true`): what ran on the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_sha256: Option<String>,
    /// The run whose answers this run graded again (`agenteval regrade RUN`): no agent ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrade_of: Option<RunId>,
    /// The set of runs this one was started with (`submit --matrix`), and what it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<SetMember>,
}

/// A run's place in a set: the runs one `submit --matrix` started from one config, each with
/// one combination of the matrix's values, sharing one fleet and one budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetMember {
    /// The set's id (`compare --set ID`).
    pub id: String,
    /// This run's combination, numbered from 0 in the order the matrix lists them.
    pub position: u32,
    /// How many runs the set has.
    pub size: u32,
    /// The values this run set, in the order of the `--matrix` flags.
    pub values: Vec<SetValue>,
}

/// One `KEY.PATH=VALUE` of a set member's combination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetValue {
    pub key: String,
    pub value: String,
}

impl SetMember {
    /// `agent.model=a, agent.system=@p1.txt`: the combination as people name it.
    pub fn label(&self) -> String {
        self.values.iter().map(|v| format!("{}={}", v.key, v.value)).collect::<Vec<_>>().join(", ")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub sha256: String,
    pub size: u64,
}

/// `manifest.json`: checksum and size of every other file of the bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: String,
    pub run_id: RunId,
    pub files: BTreeMap<String, ManifestEntry>,
}

/// One evaluator's verdict in a [`ResultLine`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineScore {
    pub score: f64,
    pub passed: bool,
    /// Set when the evaluator itself failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

/// One line of `results.jsonl`: a finished task in the few numbers that comparisons and
/// reports read, so that judging a run costs one read, not one per task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    pub task_id: crate::TaskId,
    pub attempt: u32,
    pub passed: bool,
    pub terminated_by: crate::model::TerminatedBy,
    /// Every score by evaluator id (the benchmark's own grade is `benchmark`).
    pub scores: BTreeMap<String, LineScore>,
    /// Agent and evaluator cost, US dollars.
    pub cost_usd: f64,
    pub tokens: u64,
    pub wall_seconds: f64,
    pub steps: u32,
}

impl From<&crate::model::TaskResult> for ResultLine {
    fn from(r: &crate::model::TaskResult) -> Self {
        ResultLine {
            task_id: r.task_id.clone(),
            attempt: r.attempt,
            passed: r.passed,
            terminated_by: r.agent.terminated_by,
            scores: r
                .scores
                .iter()
                .map(|s| {
                    (s.evaluator_id.clone(), LineScore { score: s.score, passed: s.passed, error: s.error.is_some() })
                })
                .collect(),
            cost_usd: r.total_cost_usd(),
            tokens: r.agent.total_tokens,
            wall_seconds: r.agent.wall_seconds,
            steps: r.agent.steps,
        }
    }
}
