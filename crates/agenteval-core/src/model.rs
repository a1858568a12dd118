//! Domain model: tasks, jobs, trace events, agent results, scores, run and task records.
//!
//! Every type here is serialized into bundles, job specs or the run index, so field names are
//! part of the on-disk format (see `docs/bundle-format.md`); change them only with the schema
//! version.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, RunId, TaskId};

/// One unit of evaluation: an input for the agent and what the benchmark expects back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub id: TaskId,
    pub input: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Extra evaluators that apply to this task only (from a case file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evaluators: Vec<crate::config::EvaluatorConfig>,
    /// Benchmark-specific data (for `toy`: the scripted behaviour of the mock agent).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub metadata: serde_json::Value,
    /// What the task's environment is (tasks that act in one: Harbor's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::environment::EnvSpec>,
    /// For a task that is a folder (Harbor's): a hash of what its files say (instruction,
    /// `task.toml`, environment, tests). The fingerprint uses it instead of the folder's paths,
    /// so one task checked out in two places is one question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Its verifier, run in its environment once the agent stops (never shown to the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<crate::environment::TestsSpec>,
    /// A folder with its reference solution (`solve.sh`), which only the `oracle` agent runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solution: Option<std::path::PathBuf>,
    /// A task told in steps (Harbor's `[[steps]]`): each step's instruction goes to the agent in
    /// turn, in the same environment, and is graded before the next; `input`, `tests` and
    /// `solution` are then the first step's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Steps>,
    /// The task is a conversation with a simulated user (`roles.user`) this scenario briefs
    /// (a case's `user`; docs/roles.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserSpec>,
}

/// A task's simulated user, as a case file gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    /// Who the user is and what they want: the user model's instructions for this task.
    pub scenario: String,
    /// The agent's opening line, which the user answers first (default: "Hello! How can I help
    /// you today?").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opening: Option<String>,
}

/// The steps of a task told in steps, and how their rewards make the task's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    pub list: Vec<TaskStep>,
    /// The task's rewards: each name's mean over the steps that have rewards (a name a step
    /// lacks counting 0), or the last step's (`final`).
    #[serde(default)]
    pub reward: StepsReward,
}

/// How a task told in steps gets its rewards from its steps' (Harbor's
/// `multi_step_reward_strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepsReward {
    #[default]
    Mean,
    Final,
}

/// One step of a task told in steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStep {
    pub name: String,
    /// What the agent is told for this step.
    pub input: serde_json::Value,
    /// This step's tests (the task's shared tests with the step's own over them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<crate::environment::TestsSpec>,
    /// This step's reference solution (the `oracle` agent's), else the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solution: Option<std::path::PathBuf>,
    /// Files put in the environment's working folder before the step (a `setup.sh` among them
    /// is run there, before the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<std::path::PathBuf>,
    /// A check that must pass before the step's agent starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthcheck: Option<crate::environment::Healthcheck>,
    /// The step's agent time limit in seconds (lowering the run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_timeout_secs: Option<f64>,
    /// The least reward of each name for the steps after this one to run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_reward: BTreeMap<String, f64>,
}

/// What became of one step of a task told in steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub name: String,
    pub passed: bool,
    /// Its verifier's rewards, when it gave any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewards: Option<BTreeMap<String, f64>>,
    pub terminated_by: TerminatedBy,
    pub wall_seconds: f64,
    /// Its grade in one line.
    pub reason: String,
}

/// A content fingerprint in 16 bytes (the first half of its SHA-256), for readers that compare
/// fingerprints of many tasks: equal texts give equal digests, and two different ones collide
/// with odds of 2^-64 even among billions of tasks.
pub fn fingerprint_digest(fingerprint: &str) -> [u8; 16] {
    use sha2::{Digest as _, Sha256};
    let full = Sha256::digest(fingerprint.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

impl TaskSpec {
    /// What decides this task's grade, as a sha256 (hex): its input, expected answer, own
    /// evaluators and benchmark data, not its id or tags. Two runs' tasks with one id but
    /// different fingerprints are different questions, and `compare` keeps them apart. Recorded
    /// as `fingerprint` on each line of `tasks.jsonl`.
    pub fn content_fingerprint(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let mut content = serde_json::json!({
            "input": self.input,
            "expected": self.expected,
            "evaluators": self.evaluators,
            "metadata": self.metadata,
        });
        if let Some(files) = &self.content {
            // Its files say everything else; its metadata and environment hold paths.
            content = serde_json::json!({"input": self.input, "expected": self.expected, "evaluators": self.evaluators, "files": files});
        } else if let Some(env) = &self.environment {
            // Only when there is one: a task without an environment keeps the fingerprint it had.
            content["environment"] = serde_json::json!(env);
            if let Some(tests) = &self.tests {
                content["tests"] = serde_json::json!(tests);
            }
        }
        // Only when there is one: a task without a user keeps the fingerprint it had.
        if let Some(user) = &self.user {
            content["user"] = serde_json::json!(user);
        }
        hex::encode(Sha256::digest(canonical_json(&content)))
    }
}

/// The fingerprint of a resolved config's grading settings: the benchmark section without what
/// only selects or paces tasks, and the run's evaluators.
pub fn grading_fingerprint(resolved: &serde_json::Value) -> String {
    use sha2::{Digest as _, Sha256};
    let mut bench = resolved.get("benchmark").cloned().unwrap_or_default();
    if let Some(m) = bench.as_object_mut() {
        for k in ["filter", "size", "cases", "path", "latency_ms", "slow_ms"] {
            m.remove(k);
        }
    }
    let graded = serde_json::json!({"benchmark": bench, "evaluators": resolved.get("evaluators")});
    hex::encode(Sha256::digest(canonical_json(&graded)))
}

/// JSON text with every object's keys sorted, whatever order the map kept: a stable input for
/// a hash.
pub fn canonical_json(v: &serde_json::Value) -> Vec<u8> {
    fn write(v: &serde_json::Value, out: &mut Vec<u8>) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push(b'{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, k).expect("a string serializes");
                    out.push(b':');
                    write(&m[k], out);
                }
                out.push(b'}');
            }
            serde_json::Value::Array(a) => {
                out.push(b'[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(x, out);
                }
                out.push(b']');
            }
            other => serde_json::to_writer(&mut *out, other).expect("a value serializes"),
        }
    }
    let mut out = Vec::new();
    write(v, &mut out);
    out
}

/// A shard of one or more tasks of one run, as handed to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSpec {
    pub schema_version: String,
    pub run_id: RunId,
    pub job_id: JobId,
    /// Attempt number of this job and of every task in it (1 for the first dispatch).
    pub attempt: u32,
    pub tasks: Vec<TaskSpec>,
    /// The lease epoch of the controller that dispatched this job: a worker starts a task only
    /// while the run's epoch in the index is still this one.
    #[serde(default)]
    pub epoch: u32,
    /// Where the worker finds the bundle (a path or URI understood by the store factory).
    pub bundle_uri: String,
    /// Where the worker records task states.
    pub index_uri: String,
    /// Extra environment for the worker, set by the controller (e.g. trace context).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The image every task of this job acts in, pinned by digest, on a backend that launches
    /// each task's environment from its own image (ECS: an environment task of it, apart from
    /// the worker). `None`: the worker makes its environments (`docker`, `workspace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The run whose spend at the wire and rate bookings in the index this job's calls count
    /// against, when not its own: a set's runs (`submit --matrix`) share one budget and one
    /// provider's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<RunId>,
    /// The secrets a task's tool servers get, by the variable their compose file names
    /// (`roles.tools.secrets`), for a backend that starts those servers itself (ECS: containers
    /// of the environment's task definition, which take them from Secrets Manager).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_secrets: BTreeMap<String, String>,
}

/// What a backend returns for a submitted job; opaque to the controller, stored in the index so
/// another process can find (and cancel) the job later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHandle {
    pub job_id: JobId,
    pub attempt: u32,
    /// Backend-specific locator: a process id locally, a task ARN on ECS.
    pub native_id: String,
}

/// The lifecycle of a job as the backend sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Succeeded,
    Failed {
        exit_code: Option<i32>,
        reason: String,
        /// True when the failure came from the infrastructure (killed, crashed, evicted) rather
        /// than from a decision of the worker; such jobs are worth re-submitting.
        infrastructure: bool,
    },
    Cancelled,
}

impl JobStatus {
    pub fn is_terminal(&self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed { .. } | JobStatus::Cancelled)
    }
}

/// The closed set of trace event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    #[serde(rename = "agent.plan")]
    AgentPlan,
    #[serde(rename = "agent.tool_call")]
    AgentToolCall,
    #[serde(rename = "agent.tool_result")]
    AgentToolResult,
    #[serde(rename = "agent.observation")]
    AgentObservation,
    #[serde(rename = "agent.final_answer")]
    AgentFinalAnswer,
    #[serde(rename = "agent.terminal")]
    AgentTerminal,
    #[serde(rename = "evaluator.score")]
    EvaluatorScore,
    #[serde(rename = "policy.verdict")]
    PolicyVerdict,
    #[serde(rename = "cost.tick")]
    CostTick,
    /// A model call through the gateway, as the gateway saw it (written by the worker, never
    /// taken from an agent).
    #[serde(rename = "model.call")]
    ModelCall,
    /// What the agent said to the simulated user in a conversation (`docs/roles.md`).
    #[serde(rename = "agent.message")]
    AgentMessage,
    /// A simulated user's turn (written by the worker from the user's calls, never taken from an
    /// agent).
    #[serde(rename = "user.message")]
    UserMessage,
}

impl EventKind {
    pub const ALL: [EventKind; 12] = [
        EventKind::AgentPlan,
        EventKind::AgentToolCall,
        EventKind::AgentToolResult,
        EventKind::AgentObservation,
        EventKind::AgentFinalAnswer,
        EventKind::AgentTerminal,
        EventKind::EvaluatorScore,
        EventKind::PolicyVerdict,
        EventKind::CostTick,
        EventKind::ModelCall,
        EventKind::AgentMessage,
        EventKind::UserMessage,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::AgentPlan => "agent.plan",
            EventKind::AgentToolCall => "agent.tool_call",
            EventKind::AgentToolResult => "agent.tool_result",
            EventKind::AgentObservation => "agent.observation",
            EventKind::AgentFinalAnswer => "agent.final_answer",
            EventKind::AgentTerminal => "agent.terminal",
            EventKind::EvaluatorScore => "evaluator.score",
            EventKind::PolicyVerdict => "policy.verdict",
            EventKind::CostTick => "cost.tick",
            EventKind::ModelCall => "model.call",
            EventKind::AgentMessage => "agent.message",
            EventKind::UserMessage => "user.message",
        }
    }
}

/// One line of `trace.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub run_id: RunId,
    pub task_id: TaskId,
    /// 0-based position of the event in the task's trace.
    pub step: u32,
    /// The job attempt that wrote the event (0 in bundles written before it was recorded):
    /// `validate-bundle` refuses a trace whose events are not the counted attempt's.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempt: u32,
    pub timestamp: DateTime<Utc>,
    pub kind: EventKind,
    #[serde(default)]
    pub payload: serde_json::Value,
    /// What the event cost (a priced model call); left out when nothing, so an unpriced call
    /// (`payload.cost_unknown`) never reads as $0.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost_usd: f64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// Why an agent could not run at all, set where the failure arose (never read back from a
/// message): what the "broken agent" stop compares between tasks, and what names the config
/// field that fixes it. Kept in `result.json` and the run index as its code (`cannot_start`,
/// `exited_before_protocol:2`, …).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum AgentFault {
    /// The program `agent.command` names cannot be started.
    CannotStart,
    /// The program exited with this status before it sent one protocol event (a mistyped
    /// script: status 2 for `python3`, 126/127 for a shell).
    ExitedBeforeProtocol(i32),
    /// A stdout line was not a protocol event (a debug print on stdout).
    NotProtocol,
    /// The model provider refused the key (HTTP 401/403).
    KeyRefused,
    /// The agent failed after its sandbox refused it a connection (`agent.sandbox.network`).
    NetworkRefused,
    /// `agent.setup` failed in the task's image.
    SetupFailed,
    /// The preset's package at `agent.version` could not be installed.
    InstallFailed,
    /// The task's image cannot run the preset (a Python preset on an image without python3).
    ImageCannotRun,
}

impl AgentFault {
    /// The config field (or flag) whose change fixes it.
    pub fn field(&self) -> &'static str {
        match self {
            AgentFault::CannotStart | AgentFault::ExitedBeforeProtocol(_) | AgentFault::NotProtocol => "agent.command",
            AgentFault::KeyRefused => "agent.secrets",
            AgentFault::NetworkRefused => "agent.sandbox.network",
            AgentFault::SetupFailed => "agent.setup",
            AgentFault::InstallFailed => "agent.version",
            AgentFault::ImageCannotRun => "agent.preset",
        }
    }

    /// What went wrong, for people.
    pub fn describe(&self) -> String {
        match self {
            AgentFault::CannotStart => "its program cannot be started".into(),
            AgentFault::ExitedBeforeProtocol(status) => format!(
                "it exited with status {status} before sending any protocol event (a mistyped script or a missing file?)"
            ),
            AgentFault::NotProtocol => {
                "it printed a line that is not a protocol event on stdout (write diagnostics to stderr: stdout carries only protocol events)".into()
            }
            AgentFault::KeyRefused => "the model provider refused its key".into(),
            AgentFault::NetworkRefused => "its sandbox refused it a connection".into(),
            AgentFault::SetupFailed => "its setup script failed".into(),
            AgentFault::InstallFailed => "its package could not be installed".into(),
            AgentFault::ImageCannotRun => "the task's image cannot run it".into(),
        }
    }

    /// The fix, in a few words after the field's name.
    pub fn fix(&self) -> &'static str {
        match self {
            AgentFault::CannotStart | AgentFault::ExitedBeforeProtocol(_) => "check the program and its arguments",
            AgentFault::NotProtocol => "write diagnostics to stderr, only protocol events to stdout",
            AgentFault::KeyRefused => "check the key the secret holds",
            AgentFault::NetworkRefused => {
                "allow the port it needs (`[443, 11434]`) or `all`; `none` allows no IP socket"
            }
            AgentFault::SetupFailed => "the script's last lines are in each task's log",
            AgentFault::InstallFailed => "check the version exists; npm's or pip's last lines are in each task's log",
            AgentFault::ImageCannotRun => {
                "a Python preset needs python3 in the task's image: pick a preset installed by npm (codex, claude-code, opencode), or give the image python3"
            }
        }
    }

    /// Its code in `result.json` and the run index.
    pub fn code(&self) -> String {
        match self {
            AgentFault::CannotStart => "cannot_start".into(),
            AgentFault::ExitedBeforeProtocol(status) => format!("exited_before_protocol:{status}"),
            AgentFault::NotProtocol => "not_protocol".into(),
            AgentFault::KeyRefused => "key_refused".into(),
            AgentFault::NetworkRefused => "network_refused".into(),
            AgentFault::SetupFailed => "setup_failed".into(),
            AgentFault::InstallFailed => "install_failed".into(),
            AgentFault::ImageCannotRun => "image_cannot_run".into(),
        }
    }

    /// Reads a code [`AgentFault::code`] wrote.
    pub fn parse(code: &str) -> Option<AgentFault> {
        Some(match code {
            "cannot_start" => AgentFault::CannotStart,
            "not_protocol" => AgentFault::NotProtocol,
            "key_refused" => AgentFault::KeyRefused,
            "network_refused" => AgentFault::NetworkRefused,
            "setup_failed" => AgentFault::SetupFailed,
            "install_failed" => AgentFault::InstallFailed,
            "image_cannot_run" => AgentFault::ImageCannotRun,
            other => AgentFault::ExitedBeforeProtocol(other.strip_prefix("exited_before_protocol:")?.parse().ok()?),
        })
    }
}

/// A recorded fault, read leniently: a code this build does not know (a newer agenteval's)
/// reads as none rather than making the whole result unreadable.
pub fn lenient_fault<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AgentFault>, D::Error> {
    let code: Option<String> = Option::deserialize(d)?;
    Ok(code.as_deref().and_then(AgentFault::parse))
}

impl From<AgentFault> for String {
    fn from(f: AgentFault) -> String {
        f.code()
    }
}

impl TryFrom<String> for AgentFault {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        AgentFault::parse(&s).ok_or_else(|| format!("unknown agent fault `{s}`"))
    }
}

/// Why an agent run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminatedBy {
    Completed,
    LimitTokens,
    LimitTime,
    LimitCost,
    /// The trace grew past `max_trace_events` or `max_trace_bytes`.
    LimitTrace,
    /// The agent's scratch folder grew past `max_disk_bytes`.
    LimitDisk,
    /// A process of the task's environment was killed for going past its memory limit.
    LimitMemory,
    /// The `llm` agent made `max_turns` model calls without a final answer.
    LimitTurns,
    InfraFailure,
    AgentError,
    /// A strict cassette replay found no matching recording: the recording is stale (the
    /// prompt, the tools or the dataset changed since it was made). Like an infrastructure
    /// failure it says nothing about the agent, so it is counted as `infra` and left out of
    /// comparisons, but it keeps its own name in every report.
    ReplayMiss,
}

impl TerminatedBy {
    pub const ALL: [TerminatedBy; 11] = [
        TerminatedBy::Completed,
        TerminatedBy::LimitTokens,
        TerminatedBy::LimitTime,
        TerminatedBy::LimitCost,
        TerminatedBy::LimitTrace,
        TerminatedBy::LimitDisk,
        TerminatedBy::LimitMemory,
        TerminatedBy::LimitTurns,
        TerminatedBy::InfraFailure,
        TerminatedBy::AgentError,
        TerminatedBy::ReplayMiss,
    ];

    /// Whether the task ended for a reason that says nothing about the agent (`infra`).
    pub fn says_nothing_about_the_agent(self) -> bool {
        matches!(self, TerminatedBy::InfraFailure | TerminatedBy::ReplayMiss)
    }

    pub fn parse(s: &str) -> Option<TerminatedBy> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TerminatedBy::Completed => "completed",
            TerminatedBy::LimitTokens => "limit_tokens",
            TerminatedBy::LimitTime => "limit_time",
            TerminatedBy::LimitCost => "limit_cost",
            TerminatedBy::LimitTrace => "limit_trace",
            TerminatedBy::LimitDisk => "limit_disk",
            TerminatedBy::LimitMemory => "limit_memory",
            TerminatedBy::LimitTurns => "limit_turns",
            TerminatedBy::InfraFailure => "infra_failure",
            TerminatedBy::AgentError => "agent_error",
            TerminatedBy::ReplayMiss => "replay_miss",
        }
    }
}

/// What one role of a task (the simulated user) spent, from the gateway's records of its calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleUsage {
    pub model: String,
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None`: some call's price is unknown.
    pub cost_usd: Option<f64>,
}

impl RoleUsage {
    /// Adds another stretch of the same role's calls (a later step's, a judge's after the
    /// agent's): an unknown cost stays unknown.
    pub fn add(&mut self, other: &RoleUsage) {
        if self.calls == 0 && self.model.is_empty() {
            *self = other.clone();
            return;
        }
        if self.model.is_empty() {
            self.model = other.model.clone();
        }
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd = self.cost_usd.zip(other.cost_usd).map(|(a, b)| a + b);
    }
}

/// What one role's calls spent over a run's finished tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleSummary {
    pub calls: u64,
    pub tokens: u64,
    /// `null` when a call's price is unknown.
    pub cost_usd: Option<f64>,
}

/// The outcome of one agent run on one task. Written by `crate::cost` (an unknown cost is
/// `null`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AgentResult {
    pub success: bool,
    pub final_answer: Option<serde_json::Value>,
    pub error: Option<String>,
    /// What the priced calls cost; with `cost_unknown`, written as `null`.
    #[serde(deserialize_with = "crate::cost::number_or_null")]
    pub total_cost_usd: f64,
    pub total_tokens: u64,
    pub wall_seconds: f64,
    pub terminated_by: TerminatedBy,
    /// Number of trace events the agent produced.
    pub steps: u32,
    /// Some of the agent's model calls have no known price: `total_cost_usd` counts only the
    /// priced ones and must not be read as the whole cost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_unknown: bool,
    /// Why the agent could not run at all, when that is what ended it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient_fault")]
    pub fault: Option<AgentFault>,
}

impl AgentResult {
    /// The result of a task the infrastructure failed (its environment, its worker, its store):
    /// no answer, nothing spent, `infra_failure` with the reason.
    pub fn infra_failure(error: String) -> AgentResult {
        AgentResult {
            success: false,
            final_answer: None,
            error: Some(error),
            total_cost_usd: 0.0,
            total_tokens: 0,
            wall_seconds: 0.0,
            terminated_by: TerminatedBy::InfraFailure,
            steps: 0,
            cost_unknown: false,
            fault: None,
        }
    }
}

/// A score given by one evaluator (or by the benchmark's own grader, kind `benchmark`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluatorScore {
    pub evaluator_id: String,
    pub kind: String,
    /// In [0, 1].
    pub score: f64,
    pub passed: bool,
    pub reason: String,
    /// Trace steps that justify the score.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub citations: Vec<u32>,
    /// What the evaluator itself cost (an LLM judge); left out when nothing.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost_usd: f64,
    /// Tokens the evaluator itself used (an LLM judge's), apart from the agent's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens: u64,
    /// Set when the evaluator itself failed; such a score never passes, and fails the task
    /// unless the evaluator is `optional`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The config marked the evaluator `optional: true`: its own failure (an `error`) does not
    /// fail the task. Off by default: the agent can make a grader fail (an answer padded past a
    /// judge's context), and a failed grader must never turn a wrong answer into a pass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

impl EvaluatorScore {
    /// A grade with its reason and nothing else (no citations, no cost of its own).
    pub fn graded(id: &str, kind: &str, score: f64, passed: bool, reason: String) -> Self {
        EvaluatorScore {
            evaluator_id: id.to_string(),
            kind: kind.to_string(),
            score,
            passed,
            reason,
            citations: vec![],
            cost_usd: 0.0,
            tokens: 0,
            error: None,
            optional: false,
        }
    }

    pub fn errored(id: &str, kind: &str, error: impl Into<String>) -> Self {
        let error = error.into();
        EvaluatorScore {
            optional: false,
            tokens: 0,
            evaluator_id: id.to_string(),
            kind: kind.to_string(),
            score: 0.0,
            passed: false,
            reason: format!("evaluator error: {error}"),
            citations: vec![],
            cost_usd: 0.0,
            error: Some(error),
        }
    }
}

/// A task's verdict graded again with the files the tamper audit named taken out of its patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WithoutTampering {
    pub passed: bool,
    pub reason: String,
    /// The files taken out, relative to the working folder.
    pub removed: Vec<String>,
}

/// `tasks/<task_id>/result.json`: everything about one finished task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub schema_version: String,
    pub run_id: RunId,
    pub task_id: TaskId,
    pub job_id: JobId,
    pub attempt: u32,
    /// A task passes when every score passes.
    pub passed: bool,
    pub agent: AgentResult,
    pub scores: Vec<EvaluatorScore>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// The image the task's environment ran, pinned by digest, on a fleet that runs each task's
    /// environment as a launch of its own image (ECS): what its agent and its tests saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Files the agent changed outside its working folder that the task's tests then trusted
    /// (`environment.verify_in: same`; listed in the pack's `artifacts/changed-outside.txt`). A
    /// pass with any is counted apart (`passed_with_changes`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changed_outside: u64,
    /// Seconds spent getting the task's agent ready before it started (an installed agent's
    /// layer found or built): never part of the agent's `wall_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_seconds: Option<f64>,
    /// Why its grade is in doubt, when its grader found a reason (a SWE-bench log that claims
    /// passes the test command did not make): shown and counted apart; the verdict stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspect: Vec<String>,
    /// The tamper audit: files the agent changed that its grading reads (a `conftest.py`, a
    /// module the tests import, a reward file), each with why. The verdict stands; this says
    /// why not to believe it. Counted in the summary (`tampered`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tampered: Vec<crate::tamper::Tampered>,
    /// With SWE-bench's `grade_without_tampering`: the verdict of the patch with the hunks the
    /// audit named taken out, beside the official one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_tampering: Option<WithoutTampering>,
    /// Its verifier's rewards by name (`{"reward": 1.0}`; a Harbor task's named rewards each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewards: Option<BTreeMap<String, f64>>,
    /// Graded by Harbor's rules, it got no reward: never a pass, and left out of the mean reward
    /// as Harbor leaves it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unscored: bool,
    /// The models its agent called, with how many calls each (refused ones included).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, u64>,
    /// Seconds the model gateway waited for the provider before answering the agent's calls
    /// (rate limits, outages it retried through): neither the model's time nor the agent's.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub provider_wait_seconds: f64,
    /// A task told in steps: each step run, in order (the steps after one that stopped the
    /// task are not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepResult>,
    /// Why Harbor itself would not run this task (its `task.toml` breaks a rule of Harbor's),
    /// so a comparison with Harbor's numbers knows the datasets differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harbor_would_skip: Option<String>,
    /// What the task's other actors spent (`user`: the simulated user's calls), apart from the
    /// agent's: never part of `agent.total_cost_usd` nor under the agent's limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, RoleUsage>,
}

impl TaskResult {
    /// What became of the task.
    pub fn outcome(&self) -> Outcome {
        Outcome::of(self.passed, self.agent.terminated_by)
    }

    /// Why the task did not pass, in one line (empty when it passed): the agent's error or
    /// limit, else the first score that failed, with its reason (`exact_match: expected "8",
    /// got "9"`).
    pub fn why(&self) -> String {
        let one_line = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        if self.passed {
            return String::new();
        }
        if let Some(e) = &self.agent.error {
            return format!("{}: {}", self.agent.terminated_by.as_str(), one_line(e));
        }
        match self.scores.iter().find(|s| !scores_pass(std::slice::from_ref(s))) {
            Some(s) => {
                let said = s.error.as_deref().unwrap_or(&s.reason);
                format!("{}: {}", s.evaluator_id, one_line(said))
            }
            None => "no score passed".into(),
        }
    }

    /// Cost of the task including evaluator cost.
    pub fn total_cost_usd(&self) -> f64 {
        self.agent.total_cost_usd + self.scores.iter().map(|s| s.cost_usd).sum::<f64>()
    }
}

/// Status of a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Dispatching or waiting for jobs.
    Running,
    /// Every task has a result.
    Complete,
    /// Stopped by the user (Ctrl-C, `cancel`) or by a crash; `resume` can finish it.
    Interrupted,
    /// Stopped because `max_run_cost_usd` was reached.
    BudgetExceeded,
    /// Tasks were given up after `max_attempts` infrastructure failures.
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Interrupted => "interrupted",
            RunStatus::BudgetExceeded => "budget_exceeded",
            RunStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        [RunStatus::Running, RunStatus::Complete, RunStatus::Interrupted, RunStatus::BudgetExceeded, RunStatus::Failed]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// State of one task in the run index. States only move forward within an attempt; a later
/// attempt may start over, but a `Completed` task never changes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    Queued,
    Running,
    /// Gave up after infrastructure failures (a result with `infra_failure` exists).
    Failed,
    Cancelled,
    /// Graded; a result exists. Final.
    Completed,
}

impl TaskState {
    /// Order used to refuse backward transitions within one attempt.
    pub fn rank(self) -> u8 {
        match self {
            TaskState::Pending => 0,
            TaskState::Queued => 1,
            TaskState::Running => 2,
            TaskState::Failed | TaskState::Cancelled => 3,
            TaskState::Completed => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Completed => "completed",
        }
    }

    pub fn parse(s: &str) -> Option<TaskState> {
        [
            TaskState::Pending,
            TaskState::Queued,
            TaskState::Running,
            TaskState::Failed,
            TaskState::Cancelled,
            TaskState::Completed,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    /// Whether moving from `(cur_attempt, self)` to `(attempt, next)` is allowed: [`state_rule`]
    /// read in Rust.
    pub fn may_move_to(self, cur_attempt: u32, next: TaskState, attempt: u32) -> bool {
        struct Here {
            cur: (TaskState, u32),
            next: (TaskState, u32),
        }
        impl StateRule for Here {
            type Out = bool;
            fn not_completed(&self) -> bool {
                self.cur.0 != TaskState::Completed
            }
            fn earlier_attempt(&self) -> bool {
                self.cur.1 < self.next.1
            }
            fn same_attempt(&self) -> bool {
                self.cur.1 == self.next.1
            }
            fn lower_rank(&self) -> bool {
                self.cur.0.rank() < self.next.0.rank()
            }
            fn and(&self, a: bool, b: bool) -> bool {
                a && b
            }
            fn or(&self, a: bool, b: bool) -> bool {
                a || b
            }
        }
        state_rule(&Here { cur: (self, cur_attempt), next: (next, attempt) })
    }
}

/// The terms of the task-state rule, as a reader of it (Rust, SQL, a DynamoDB condition)
/// expresses them: each says something of the task as recorded against the transition asked.
pub trait StateRule {
    type Out;
    /// The recorded state is not `completed`.
    fn not_completed(&self) -> Self::Out;
    /// The recorded attempt is earlier than the transition's.
    fn earlier_attempt(&self) -> Self::Out;
    /// The recorded attempt is the transition's.
    fn same_attempt(&self) -> Self::Out;
    /// The recorded state's rank is below the transition's.
    fn lower_rank(&self) -> Self::Out;
    fn and(&self, a: Self::Out, b: Self::Out) -> Self::Out;
    fn or(&self, a: Self::Out, b: Self::Out) -> Self::Out;
}

/// The whole task-state machine, written once: a task moves unless it is completed, to a later
/// attempt, or within its attempt to a state of higher rank. Every index applies it in one
/// conditional write (SQLite's `UPDATE … WHERE`, DynamoDB's condition expression), read from
/// here; [`TaskState::may_move_to`] is its reading in Rust.
pub fn state_rule<R: StateRule + ?Sized>(r: &R) -> R::Out {
    let later = r.or(r.earlier_attempt(), r.and(r.same_attempt(), r.lower_rank()));
    r.and(r.not_completed(), later)
}

/// The task-state rule written as an expression over named columns or placeholders (SQL, a
/// DynamoDB condition): `state != completed AND (attempt < A OR (attempt = A AND rank < R))`.
pub struct StateRuleText<'a> {
    /// The recorded state, and the literal or placeholder for `completed`.
    pub state: &'a str,
    pub completed: &'a str,
    /// How the language says "not equal".
    pub not_equal: &'a str,
    /// The recorded attempt and rank, and the transition's.
    pub attempt: &'a str,
    pub new_attempt: &'a str,
    pub rank: &'a str,
    pub new_rank: &'a str,
}

impl StateRule for StateRuleText<'_> {
    type Out = String;
    fn not_completed(&self) -> String {
        format!("{} {} {}", self.state, self.not_equal, self.completed)
    }
    fn earlier_attempt(&self) -> String {
        format!("{} < {}", self.attempt, self.new_attempt)
    }
    fn same_attempt(&self) -> String {
        format!("{} = {}", self.attempt, self.new_attempt)
    }
    fn lower_rank(&self) -> String {
        format!("{} < {}", self.rank, self.new_rank)
    }
    fn and(&self, a: String, b: String) -> String {
        format!("{a} AND {b}")
    }
    fn or(&self, a: String, b: String) -> String {
        format!("({a} OR ({b}))")
    }
}

/// A run as the index records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: RunId,
    pub name: String,
    pub benchmark: String,
    pub agent: String,
    pub backend: String,
    pub status: RunStatus,
    pub bundle_uri: String,
    pub config_hash: String,
    pub tasks_total: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Last sign of life of the controller; a `running` run with an old heartbeat was abandoned.
    pub heartbeat_at: DateTime<Utc>,
    pub cancel_requested: bool,
    /// `host:pid` of the controller driving the run, so that a dead one is noticed at once on
    /// the same machine (elsewhere the heartbeat tells).
    pub controller: String,
    /// How many times the run was resumed; also the prefix of the job ids of the latest resume.
    pub epoch: u32,
    /// When `controller` took the run (its lease began): set whenever `controller` changes.
    /// `None` in records written before leases.
    #[serde(default)]
    pub leased_at: Option<DateTime<Utc>>,
    /// What the run came to once judged against its gates.
    #[serde(default)]
    pub verdict: Option<RunVerdict>,
    /// The run the verdict was judged against (`None`: never judged, or judged alone).
    #[serde(default)]
    pub baseline: Option<RunId>,
    /// The set the run belongs to (`submit --matrix`; `compare --set`).
    #[serde(default)]
    pub set_id: Option<String>,
    /// How many jobs the controller keeps in flight now and why, when it has changed from
    /// `backend.max_concurrent_jobs` (`status` shows it).
    #[serde(default)]
    pub concurrency: Option<Concurrency>,
}

/// The jobs a controller keeps in flight: `limit` of at most `max`, and what held it below
/// `max` (the provider's 429s, ECS throttling launches, the machine's memory, failing
/// containers) or let it rise again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Concurrency {
    pub limit: u32,
    pub max: u32,
    /// Why it last changed, in a line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What a judged run came to, one word each (`runs list`, the UI, `comparison.json`): its gates
/// passed or failed, the infrastructure failed it (never a regression), or it did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    Pass,
    Fail,
    Infra,
    Incomplete,
    /// The gates could not decide (within noise): neither a pass nor a regression.
    Inconclusive,
}

impl RunVerdict {
    pub const ALL: [RunVerdict; 5] =
        [RunVerdict::Pass, RunVerdict::Fail, RunVerdict::Infra, RunVerdict::Incomplete, RunVerdict::Inconclusive];

    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Pass => "pass",
            RunVerdict::Fail => "fail",
            RunVerdict::Infra => "infra",
            RunVerdict::Incomplete => "incomplete",
            RunVerdict::Inconclusive => "inconclusive",
        }
    }

    /// The verdict a stored word names; `None` for a word this version does not know.
    pub fn parse(word: &str) -> Option<RunVerdict> {
        RunVerdict::ALL.into_iter().find(|v| v.as_str() == word)
    }
}

/// A change to a run record; `None` fields are left as they are.
#[derive(Debug, Clone, Default)]
pub struct RunUpdate {
    pub status: Option<RunStatus>,
    pub finished_at: Option<DateTime<Utc>>,
    pub heartbeat: bool,
    pub cancel_requested: Option<bool>,
    pub epoch: Option<u32>,
    /// A new controller for the run; its lease starts now (`leased_at`).
    pub controller: Option<String>,
    /// The verdict of the run's gates.
    pub verdict: Option<RunVerdict>,
    /// The run that verdict was judged against.
    pub baseline: Option<RunId>,
    /// The controller's concurrency, when it changed.
    pub concurrency: Option<Concurrency>,
    /// Applies the update only while the run's epoch is this one; otherwise the update fails
    /// with `Conflict`. This is the run's lease: a controller claims a run by moving its epoch
    /// on from the one it read, and every heartbeat and the seal are conditional on it, so two
    /// controllers can never both drive a run.
    pub if_epoch: Option<u32>,
}

/// The error of an update whose `if_epoch` no longer holds: another controller has claimed the
/// run since.
pub fn lease_lost(run: &str, epoch: u32, controller: &str) -> crate::Error {
    crate::Error::new(
        crate::ErrorKind::Conflict,
        format!("run {run} is now driven by another controller ({controller}, epoch {epoch})"),
    )
}

/// The completed tasks of a run and the highest attempt any task reached: what `resume` reads
/// from the index (`RunIndex::completed_tasks`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletedTasks {
    /// Ordered by id.
    pub ids: Vec<TaskId>,
    pub max_attempt: u32,
}

/// A task as the index records it. Written by `crate::cost` (an unknown cost is `null`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskRecord {
    pub run_id: RunId,
    pub task_id: TaskId,
    pub state: TaskState,
    pub attempt: u32,
    pub job_id: Option<JobId>,
    pub passed: Option<bool>,
    /// What the priced part cost; with `cost_unknown`, written as `null`.
    #[serde(deserialize_with = "crate::cost::number_or_null")]
    pub cost_usd: f64,
    /// Some of the task's cost has no price (see [`AgentResult::cost_unknown`]).
    #[serde(default)]
    pub cost_unknown: bool,
    pub tokens: u64,
    pub wall_seconds: f64,
    pub terminated_by: Option<TerminatedBy>,
    pub detail: Option<String>,
    /// Why the agent could not run at all, when that ended the task.
    #[serde(default, deserialize_with = "lenient_fault")]
    pub fault: Option<AgentFault>,
    pub updated_at: DateTime<Utc>,
}

/// A requested state transition of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTransition {
    pub task_id: TaskId,
    pub attempt: u32,
    pub state: TaskState,
    pub job_id: Option<JobId>,
    pub passed: Option<bool>,
    pub cost_usd: f64,
    pub cost_unknown: bool,
    pub tokens: u64,
    pub wall_seconds: f64,
    pub terminated_by: Option<TerminatedBy>,
    pub detail: Option<String>,
    pub fault: Option<AgentFault>,
}

impl TaskTransition {
    pub fn new(task_id: TaskId, attempt: u32, state: TaskState) -> Self {
        TaskTransition {
            task_id,
            attempt,
            state,
            job_id: None,
            passed: None,
            cost_usd: 0.0,
            cost_unknown: false,
            tokens: 0,
            wall_seconds: 0.0,
            terminated_by: None,
            detail: None,
            fault: None,
        }
    }

    pub fn job(mut self, job_id: &JobId) -> Self {
        self.job_id = Some(job_id.clone());
        self
    }

    /// The completion transition for a graded result.
    pub fn completed(result: &TaskResult) -> Self {
        TaskTransition {
            task_id: result.task_id.clone(),
            attempt: result.attempt,
            state: if result.agent.terminated_by.says_nothing_about_the_agent() {
                TaskState::Failed
            } else {
                TaskState::Completed
            },
            job_id: Some(result.job_id.clone()),
            passed: Some(result.passed),
            cost_usd: result.total_cost_usd(),
            cost_unknown: result.agent.cost_unknown,
            tokens: result.agent.total_tokens,
            wall_seconds: result.agent.wall_seconds,
            terminated_by: Some(result.agent.terminated_by),
            detail: result.agent.error.clone(),
            fault: result.agent.fault.clone(),
        }
    }
}

/// What became of a finished task: the one word every output uses for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Graded, and every score passed.
    Passed,
    /// Graded, and a score failed: the agent completed with a wrong answer.
    Failed,
    /// The agent errored or hit a limit (`agent_error`, `limit_*`).
    Errored,
    /// agenteval's infrastructure failed the task (`infra_failure`, or given up after retries),
    /// or a strict replay had no recording of it (`replay_miss`): it says nothing about the agent.
    Infra,
}

impl Outcome {
    pub fn of(passed: bool, terminated_by: TerminatedBy) -> Outcome {
        match terminated_by {
            t if t.says_nothing_about_the_agent() => Outcome::Infra,
            _ if passed => Outcome::Passed,
            TerminatedBy::Completed => Outcome::Failed,
            _ => Outcome::Errored,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Errored => "errored",
            Outcome::Infra => "infra",
        }
    }
}

/// Aggregates over a run's tasks, cheap enough to poll for progress: where the tasks are
/// (`pending` … `cancelled`) and what became of the finished ones (`passed`, `failed`,
/// `errored`, `infra`, which add up to `finished()`). Written by `crate::cost` (the cost is
/// `null` once a task's is unknown).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TaskCounts {
    pub total: u64,
    pub pending: u64,
    pub queued: u64,
    pub running: u64,
    /// Graded: a result exists.
    pub completed: u64,
    /// Given up after infrastructure failures (also counted in `infra`).
    #[serde(default)]
    pub given_up: u64,
    pub cancelled: u64,
    pub passed: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub errored: u64,
    #[serde(default)]
    pub infra: u64,
    /// What the finished tasks with a known cost cost; written `null` when `cost_unknown > 0`.
    #[serde(deserialize_with = "crate::cost::number_or_null")]
    pub cost_usd: f64,
    /// Finished tasks whose cost is unknown.
    #[serde(default)]
    pub cost_unknown: u64,
    pub tokens: u64,
}

impl TaskCounts {
    pub fn finished(&self) -> u64 {
        self.completed + self.given_up
    }

    /// Counts a task the index records as finished (graded or given up); other states are
    /// not counted here.
    pub fn add_finished(&mut self, t: &TaskRecord) {
        match t.state {
            TaskState::Completed => {
                self.completed += 1;
                self.add_outcome(
                    Outcome::of(t.passed.unwrap_or(false), t.terminated_by.unwrap_or(TerminatedBy::Completed)),
                    1,
                );
                self.cost_usd += t.cost_usd;
                self.cost_unknown += u64::from(t.cost_unknown);
                self.tokens = self.tokens.saturating_add(t.tokens);
            }
            TaskState::Failed => {
                self.given_up += 1;
                self.infra += 1;
            }
            _ => {}
        }
    }

    /// Counts `n` finished tasks of one outcome.
    pub fn add_outcome(&mut self, outcome: Outcome, n: u64) {
        match outcome {
            Outcome::Passed => self.passed += n,
            Outcome::Failed => self.failed += n,
            Outcome::Errored => self.errored += n,
            Outcome::Infra => self.infra += n,
        }
    }
}

/// A job dispatch as the index records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub run_id: RunId,
    pub handle: JobHandle,
    pub status: JobState,
    pub task_count: u32,
    pub updated_at: DateTime<Utc>,
}

/// Where a dispatched job stands, as the index records it: [`JobStatus`] without its details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 5] =
        [JobState::Queued, JobState::Running, JobState::Succeeded, JobState::Failed, JobState::Cancelled];

    /// The state a backend's status is.
    pub fn of(status: &JobStatus) -> JobState {
        match status {
            JobStatus::Queued => JobState::Queued,
            JobStatus::Running => JobState::Running,
            JobStatus::Succeeded => JobState::Succeeded,
            JobStatus::Failed { .. } => JobState::Failed,
            JobStatus::Cancelled => JobState::Cancelled,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        Self::ALL.into_iter().find(|j| j.as_str() == s)
    }
}

/// Per-evaluator aggregate in the run summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvaluatorSummary {
    pub kind: String,
    pub count: u64,
    pub passed: u64,
    pub errors: u64,
    pub mean_score: f64,
    /// Standard deviation of the scores (their spread across tasks).
    #[serde(default)]
    pub stddev_score: f64,
}

/// `summary.json`: the aggregated outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub schema_version: String,
    pub run_id: RunId,
    pub status: RunStatus,
    pub tasks_total: u64,
    /// Tasks with a result file.
    pub tasks_finished: u64,
    pub passed: u64,
    /// Graded and wrong (see [`Outcome`]).
    pub failed: u64,
    /// The agent errored or hit a limit.
    #[serde(default)]
    pub errored: u64,
    /// Infrastructure failures.
    #[serde(default)]
    pub infra: u64,
    /// pass rate over finished tasks, in [0, 1].
    pub pass_rate: f64,
    pub terminated_by: BTreeMap<String, u64>,
    /// What the finished tasks cost: `null` when one of them has an unknown cost (see
    /// `cost_unknown_tasks` and `known_cost_usd`), never a partial sum read as the whole.
    pub total_cost_usd: Option<f64>,
    /// `total_cost_usd` per finished task, `null` as it is.
    pub mean_cost_usd: Option<f64>,
    /// What the tasks' other actors spent, by role (`user`: the simulated user), apart from
    /// `total_cost_usd` (the agent's and its graders').
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, RoleSummary>,
    /// When some tasks' costs are unknown: what the others cost, a lower bound of the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_cost_usd: Option<f64>,
    pub total_tokens: u64,
    pub latency_p50_seconds: f64,
    pub latency_p95_seconds: f64,
    pub evaluators: BTreeMap<String, EvaluatorSummary>,
    /// With `repetitions: n > 1`: the unbiased pass@k estimate for every k from 1 to n (keys
    /// are k), over the tasks with at least k finished repetitions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pass_at_k: BTreeMap<u32, f64>,
    /// With repetitions: tasks (base ids) that both passed and failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaky_tasks: Vec<String>,
    /// With repetitions: pass^k for every k from 1 to n, the chance that k attempts all pass
    /// (keys are k), over the tasks with at least k finished repetitions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pass_hat_k: BTreeMap<u32, f64>,
    /// With repetitions: the mean over tasks of each task's flip rate (the chance two attempts
    /// of it disagree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flip_rate: Option<f64>,
    /// With repetitions: each flaky task's flip rate (base ids; tasks that never flipped are
    /// left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flip_rates: BTreeMap<String, f64>,
    /// Pass rates by task tag (tasks without tags are in no group).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, TagSummary>,
    /// Tasks whose cost is unknown (a model missing from the price table, an agent whose calls
    /// did not go through the gateway): `total_cost_usd` is then `null`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_unknown_tasks: u64,
    /// Passed tasks whose tests trusted files the agent changed outside its working folder
    /// (`verify_in: same`): passes that are not evidence alone (among `passed`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passed_with_changes: u64,
    /// Tasks whose grader doubted its own verdict (`TaskResult::suspect`: a test log that claims
    /// passes the tests did not make, an agent process that ran beside Harbor's tests, a patch to
    /// SWE-bench's test machinery); their verdicts stand, counted in `passed`/`failed`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspect: u64,
    /// Tasks whose agent changed files their grading reads (`TaskResult::tampered`); their
    /// verdicts stand, counted in `passed`/`failed`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tampered: u64,
    /// Passed tasks among `tampered`: passes the audit says not to believe.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passed_tampered: u64,
    /// The mean reward as Harbor computes it, over the tasks that have rewards (`unscored` ones
    /// left out): one `mean` for a single reward, else one per reward name (a task missing a
    /// name counting 0 for it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mean_reward: BTreeMap<String, f64>,
    /// Tasks graded by Harbor's rules that got no reward.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unscored: u64,
    /// Tasks Harbor itself would have skipped (`TaskResult::harbor_would_skip`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub harbor_would_skip: u64,
    /// The models the run's agents called, with how many calls each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, u64>,
    /// Seconds the tasks' calls waited for their provider in all (`TaskResult::provider_wait_seconds`).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub provider_wait_seconds: f64,
    /// For a run its budget stopped: the budget (`max_run_cost_usd`), and by how much the calls
    /// in flight when it was reached went over it (what the tasks spent past it; 0 within it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_budget_usd: Option<f64>,
    /// Model calls of tasks that ended with no result (cancelled, interrupted, cut short): the
    /// run's calls as its gateways counted them in the run index, less those in the results.
    /// They were made, and may be billed, though no task's figures hold them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_without_result: u64,
    /// What those calls cost, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_without_result_usd: Option<f64>,
    /// What every model call of the run cost at the wire, its tasks' with a result or not
    /// (`total_cost_usd` plus `cost_without_result_usd`): the run's cost as the provider bills
    /// it. Set when the run's calls were counted at the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_cost_usd: Option<f64>,
    /// What the run's adaptive repetitions spent against the fixed design (`metadata.json`'s
    /// `adaptive`), for a run whose repetitions were adaptive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveSpend>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RunSummary {
    /// The run's cost for people: dollars, or `unknown` / `≥ dollars (N tasks unknown)` when
    /// some model had no price, so a partial sum never reads as the whole.
    pub fn cost_text(&self) -> String {
        match (self.cost_is_known(), self.known_cost()) {
            (true, cost) => format!("{cost:.4}"),
            (false, known) if known > 0.0 => {
                let n = self.cost_unknown_tasks.max(1);
                format!(">={known:.4} ({n} task{} unknown)", if n == 1 { "" } else { "s" })
            }
            (false, _) => "unknown".into(),
        }
    }

    /// [`Self::cost_text`] with its dollar sign: `$0.1234`, `>=$0.1234 (2 tasks unknown)` or
    /// `unknown`.
    pub fn cost_dollars(&self) -> String {
        let text = self.cost_text();
        match text.strip_prefix(">=") {
            Some(rest) => format!(">=${rest}"),
            None if self.cost_is_known() => format!("${text}"),
            None => text,
        }
    }

    /// Whether `total_cost_usd` is the whole cost. Summaries written before 1.2 carried a
    /// partial sum beside `cost_unknown_tasks`, read here as unknown too.
    pub fn cost_is_known(&self) -> bool {
        self.total_cost_usd.is_some() && self.cost_unknown_tasks == 0
    }

    /// What the tasks with a known cost cost: the total when it is known, else a lower bound.
    pub fn known_cost(&self) -> f64 {
        self.total_cost_usd.or(self.known_cost_usd).unwrap_or(0.0)
    }

    /// What the tasks' other actors' priced calls cost (`roles`).
    pub fn role_cost(&self) -> f64 {
        self.roles.values().filter_map(|r| r.cost_usd).sum()
    }
}

/// Whether a task with these scores passed: every score passes, except that the failure of an
/// evaluator the config marked `optional` (its score has an `error`) neither passes nor fails it.
pub fn scores_pass(scores: &[EvaluatorScore]) -> bool {
    scores.iter().all(|s| s.passed || (s.error.is_some() && s.optional))
}

/// The finished tasks carrying one tag.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TagSummary {
    pub tasks: u64,
    pub passed: u64,
    pub pass_rate: f64,
}

/// Text of a JSON answer for comparison: strings as they are, anything else as JSON.
pub fn answer_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The shared grader: the agent must complete and its final answer must equal `expected`
/// (trimmed). A task without `expected` passes when the agent completes.
pub fn grade_expected(task: &TaskSpec, result: &AgentResult) -> EvaluatorScore {
    let mut score = EvaluatorScore {
        optional: false,
        tokens: 0,
        evaluator_id: "benchmark".into(),
        kind: "benchmark".into(),
        score: 0.0,
        passed: false,
        reason: String::new(),
        citations: vec![],
        cost_usd: 0.0,
        error: None,
    };
    if result.terminated_by != TerminatedBy::Completed {
        score.reason = format!("agent did not complete: {}", result.terminated_by.as_str());
        return score;
    }
    match (&task.expected, &result.final_answer) {
        (None, _) => {
            score.passed = true;
            score.score = 1.0;
            score.reason = "no expected answer; agent completed".into();
        }
        (Some(_), None) => score.reason = "no final answer".into(),
        (Some(exp), Some(got)) => {
            let (e, g) = (answer_text(exp), answer_text(got));
            score.passed = e.trim() == g.trim();
            score.score = if score.passed { 1.0 } else { 0.0 };
            score.reason = if score.passed {
                "final answer matches expected".into()
            } else {
                format!("expected {e:?}, got {g:?}")
            };
        }
    }
    if result.steps > 0 {
        score.citations = vec![result.steps - 1];
    }
    score
}

// What a cost that may be unknown looks like written (`crate::cost`): the derived `Serialize`
// but for the cost, `null` when unknown.

#[derive(Serialize)]
struct AgentResultOut<'a> {
    success: bool,
    final_answer: &'a Option<serde_json::Value>,
    error: &'a Option<String>,
    total_cost_usd: Option<f64>,
    total_tokens: u64,
    wall_seconds: f64,
    terminated_by: TerminatedBy,
    steps: u32,
    #[serde(skip_serializing_if = "crate::cost::is_false")]
    cost_unknown: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: &'a Option<AgentFault>,
}

impl Serialize for AgentResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        AgentResultOut {
            success: self.success,
            final_answer: &self.final_answer,
            error: &self.error,
            total_cost_usd: crate::cost::written(self.total_cost_usd, self.cost_unknown),
            total_tokens: self.total_tokens,
            wall_seconds: self.wall_seconds,
            terminated_by: self.terminated_by,
            steps: self.steps,
            cost_unknown: self.cost_unknown,
            fault: &self.fault,
        }
        .serialize(s)
    }
}

#[derive(Serialize)]
struct TaskRecordOut<'a> {
    run_id: &'a crate::RunId,
    task_id: &'a crate::TaskId,
    state: TaskState,
    attempt: u32,
    job_id: &'a Option<crate::JobId>,
    passed: Option<bool>,
    cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "crate::cost::is_false")]
    cost_unknown: bool,
    tokens: u64,
    wall_seconds: f64,
    terminated_by: Option<TerminatedBy>,
    detail: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: &'a Option<AgentFault>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl Serialize for TaskRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TaskRecordOut {
            run_id: &self.run_id,
            task_id: &self.task_id,
            state: self.state,
            attempt: self.attempt,
            job_id: &self.job_id,
            passed: self.passed,
            cost_usd: crate::cost::written(self.cost_usd, self.cost_unknown),
            cost_unknown: self.cost_unknown,
            tokens: self.tokens,
            wall_seconds: self.wall_seconds,
            terminated_by: self.terminated_by,
            detail: &self.detail,
            fault: &self.fault,
            updated_at: self.updated_at,
        }
        .serialize(s)
    }
}

#[derive(Serialize)]
struct TaskCountsOut {
    total: u64,
    pending: u64,
    queued: u64,
    running: u64,
    completed: u64,
    given_up: u64,
    cancelled: u64,
    passed: u64,
    failed: u64,
    errored: u64,
    infra: u64,
    /// The finished tasks' cost: `null` once one of them is unknown.
    cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "crate::cost::is_zero")]
    cost_unknown: u64,
    tokens: u64,
}

impl Serialize for TaskCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let unknown = self.cost_unknown > 0;
        TaskCountsOut {
            total: self.total,
            pending: self.pending,
            queued: self.queued,
            running: self.running,
            completed: self.completed,
            given_up: self.given_up,
            cancelled: self.cancelled,
            passed: self.passed,
            failed: self.failed,
            errored: self.errored,
            infra: self.infra,
            cost_usd: crate::cost::written(self.cost_usd, unknown),
            cost_unknown: self.cost_unknown,
            tokens: self.tokens,
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(term: TerminatedBy, answer: Option<serde_json::Value>) -> AgentResult {
        AgentResult {
            success: term == TerminatedBy::Completed,
            final_answer: answer,
            error: None,
            total_cost_usd: 0.0,
            total_tokens: 0,
            wall_seconds: 0.0,
            terminated_by: term,
            steps: 2,
            cost_unknown: false,
            fault: None,
        }
    }

    #[test]
    fn a_fault_reads_back_from_its_code_and_an_unknown_code_reads_as_none() {
        let all = [
            AgentFault::CannotStart,
            AgentFault::ExitedBeforeProtocol(127),
            AgentFault::ExitedBeforeProtocol(-1),
            AgentFault::NotProtocol,
            AgentFault::KeyRefused,
            AgentFault::NetworkRefused,
            AgentFault::SetupFailed,
            AgentFault::InstallFailed,
            AgentFault::ImageCannotRun,
        ];
        for f in all {
            assert_eq!(AgentFault::parse(&f.code()), Some(f.clone()), "{f:?}");
            assert!(f.field().starts_with("agent."), "{f:?}");
            assert!(!f.describe().contains("Some(") && !f.fix().is_empty());
        }
        assert_eq!(AgentFault::parse("exited_before_protocol:x"), None);
        let mut r = result(TerminatedBy::AgentError, None);
        r.fault = Some(AgentFault::NetworkRefused);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["fault"], "network_refused");
        let mut newer = json.clone();
        newer["fault"] = serde_json::json!("a_fault_of_a_newer_agenteval");
        let read: AgentResult = serde_json::from_value(newer).unwrap();
        assert_eq!(read.fault, None, "a newer code leaves the result readable");
        let mut older = json;
        older.as_object_mut().unwrap().remove("fault");
        assert_eq!(serde_json::from_value::<AgentResult>(older).unwrap().fault, None);
    }

    #[test]
    fn grading_compares_trimmed_answers() {
        use serde_json::json;
        let task = TaskSpec {
            id: "t".parse().unwrap(),
            input: json!("q"),
            expected: Some(json!("42")),
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
        assert!(grade_expected(&task, &result(TerminatedBy::Completed, Some(json!(" 42\n")))).passed);
        assert!(grade_expected(&task, &result(TerminatedBy::Completed, Some(json!(42)))).passed);
        assert!(!grade_expected(&task, &result(TerminatedBy::Completed, Some(json!("41")))).passed);
        let err = grade_expected(&task, &result(TerminatedBy::AgentError, Some(json!("42"))));
        assert!(!err.passed && err.reason.contains("agent_error"), "{err:?}");
    }

    #[test]
    fn event_kinds_round_trip_through_their_wire_names() {
        for k in EventKind::ALL {
            let s = serde_json::to_string(&k).unwrap();
            assert_eq!(s, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<EventKind>(&s).unwrap(), k);
        }
        assert!(serde_json::from_str::<EventKind>("\"agent.dance\"").is_err());
    }

    #[test]
    fn task_states_never_go_backwards_within_an_attempt() {
        use TaskState::*;
        assert!(Pending.may_move_to(0, Queued, 1));
        assert!(Queued.may_move_to(1, Running, 1));
        assert!(!Running.may_move_to(1, Queued, 1));
        assert!(!Running.may_move_to(1, Running, 1));
        assert!(Running.may_move_to(1, Queued, 2), "a new attempt may start over");
        assert!(!Completed.may_move_to(1, Queued, 2), "completed is final");
        assert!(Cancelled.may_move_to(1, Queued, 2));
        assert!(
            Cancelled.may_move_to(1, Completed, 1),
            "a result that arrives after a cancel is kept rather than re-run"
        );
        assert!(!Completed.may_move_to(1, Completed, 2), "a task completes exactly once");
        let text = state_rule(&StateRuleText {
            state: "state",
            completed: "'completed'",
            not_equal: "!=",
            attempt: "attempt",
            new_attempt: "?5",
            rank: "rank",
            new_rank: "?4",
        });
        assert_eq!(text, "state != 'completed' AND (attempt < ?5 OR (attempt = ?5 AND rank < ?4))");
    }
}

/// Whether a run named `run_name` is of the history `asked` names: that name, or a config's
/// name with its agent, `asked [AGENT · MODEL]` (not a try's or a set member's).
pub fn of_history(run_name: &str, asked: &str) -> bool {
    if run_name == asked {
        return true;
    }
    let Some(label) = run_name.strip_prefix(asked).and_then(|r| r.strip_prefix(" [")) else { return false };
    label.strip_suffix(']').is_some_and(|l| !l.is_empty() && !l.contains(']') && !l.contains('['))
}

/// What an adaptive run spent against the fixed design it replaces (`max` attempts of every
/// task), and how its looks ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveSpend {
    pub min: u32,
    pub max: u32,
    /// Looks taken (rounds judged).
    pub looks: u32,
    /// The confidence of the last look's intervals (the level the run is judged at).
    pub level: f64,
    /// Task-attempts made.
    pub attempts: u64,
    /// Task-attempts the fixed design would have made (`max` of every task).
    pub fixed_attempts: u64,
    /// How the looks ended: `decided GO`, `decided NO-GO`, `undecidable`, or why they stopped.
    pub ended: String,
}

#[cfg(test)]
mod history_tests {
    use super::of_history;

    #[test]
    fn a_configs_name_is_the_history_of_its_agents_runs_not_of_tries_or_set_members() {
        assert!(of_history("nightly", "nightly"));
        assert!(of_history("nightly [llm · openai:gpt-4o-mini]", "nightly"));
        assert!(of_history("nightly [codex · gpt-5]", "nightly [codex · gpt-5]"));
        assert!(!of_history("nightly [codex] (try)", "nightly"));
        assert!(!of_history("nightly [llm · a] [model=a]", "nightly"));
        assert!(!of_history("nightly-2 [oracle]", "nightly"));
        assert!(!of_history("nightly []", "nightly"));
    }
}
