//! The run configuration (`RunConfig`): its types, defaults and pure semantic validation.
//!
//! Loading from YAML with positions lives in [`load`]; this module never touches the
//! filesystem except through paths it was handed already resolved.

mod load;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use load::{ConfigError, LoadedConfig, Origin, Problem, YamlDoc, load_config, load_config_str};

/// A whole run: what to evaluate, with which agent, graded how, run where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
    /// How many times each task is run (each repetition is its own task `<id>@r<n>`).
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Stop dispatching and cancel running jobs once the run has spent this much.
    #[serde(default)]
    pub max_run_cost_usd: Option<f64>,
    /// Where and how to run on AWS (backend `aws`, or `s3://` / `dynamodb://` storage).
    #[serde(default)]
    pub aws: Option<AwsConfig>,
    /// OpenTelemetry export. Every field overrides the matching standard `OTEL_*` variable.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
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
#[serde(deny_unknown_fields)]
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
    pub export_timeout_seconds: Option<f64>,
    /// How often metrics are pushed while a run goes (`OTEL_METRIC_EXPORT_INTERVAL`; default 10).
    #[serde(default)]
    pub metrics_interval_seconds: Option<f64>,
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
#[serde(deny_unknown_fields)]
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
    /// Launch pacing: RunTask calls allowed in a burst.
    #[serde(default = "default_burst")]
    pub launch_burst: u32,
    /// Launch pacing: sustained RunTask calls per second.
    #[serde(default = "default_rate")]
    pub launch_per_second: f64,
    /// Seconds between DescribeTasks polls.
    #[serde(default = "default_poll")]
    pub poll_seconds: f64,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BenchmarkKind {
    /// Deterministic generated tasks, for trying the tool and measuring it.
    Toy,
    /// Cases from a JSONL or YAML file.
    Jsonl,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkConfig {
    pub kind: BenchmarkKind,
    /// `toy`: number of tasks.
    #[serde(default)]
    pub size: Option<u64>,
    /// `toy`: latency of the mock agent on ordinary tasks, in milliseconds.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// `toy`: latency of the mock agent on the slow tasks, in milliseconds.
    #[serde(default)]
    pub slow_ms: Option<u64>,
    /// `jsonl`: the case file (`.jsonl`, `.yaml` or `.yml`), relative to the config file.
    #[serde(default)]
    pub cases: Option<PathBuf>,
    #[serde(default)]
    pub filter: TaskFilter,
}

/// Which tasks of a benchmark to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
    pub fn matches(&self, task: &crate::model::TaskSpec) -> bool {
        (self.ids.is_empty() || self.ids.iter().any(|i| i == task.id.as_str()))
            && (self.tags.is_empty() || task.tags.iter().any(|t| self.tags.contains(t)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// Deterministic scripted agent.
    Mock,
    /// Any external program speaking the agent protocol (`docs/agent-protocol.md`).
    Command,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub kind: AgentKind,
    /// Model name, recorded in results and passed to `command` agents.
    #[serde(default)]
    pub model: Option<String>,
    /// `command`: program and arguments. Runs in the config file's folder.
    #[serde(default)]
    pub command: Vec<String>,
    /// `command`: extra environment for the program.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `command`: secrets to pass as environment variables: `ENV_NAME: secret-name`.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default)]
    pub limits: Limits,
    /// `mock`: behaviour on tasks that carry no script of their own.
    #[serde(default)]
    pub mock: MockConfig,
    /// Folder the command runs in; filled in with the config file's folder when loading.
    #[serde(default)]
    pub workdir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_wall_seconds: Option<f64>,
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MockConfig {
    /// Latency per task in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Tokens spent per task.
    #[serde(default = "default_mock_tokens")]
    pub tokens: u64,
    /// Cost per task in US dollars.
    #[serde(default = "default_mock_cost")]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvaluatorKind {
    ExactMatch,
    Contains,
    Regex,
    NoError,
    MaxSteps,
    ToolSequence,
    CostBudget,
    LatencyBudget,
}

impl EvaluatorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EvaluatorKind::ExactMatch => "exact_match",
            EvaluatorKind::Contains => "contains",
            EvaluatorKind::Regex => "regex",
            EvaluatorKind::NoError => "no_error",
            EvaluatorKind::MaxSteps => "max_steps",
            EvaluatorKind::ToolSequence => "tool_sequence",
            EvaluatorKind::CostBudget => "cost_budget",
            EvaluatorKind::LatencyBudget => "latency_budget",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SequenceMode {
    /// The calls are exactly the expected tools, in order.
    Strict,
    /// The expected tools appear in this order, other calls may come between.
    #[default]
    Ordered,
    /// Every expected tool is called at least once, in any order.
    Subset,
}

/// One evaluator. Which parameters apply depends on `kind` (see `docs/configuration.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluatorConfig {
    /// Name used in scores and summaries; defaults to the kind.
    #[serde(default)]
    pub id: Option<String>,
    pub kind: EvaluatorKind,
    /// `exact_match`: expected answer; defaults to the task's `expected`.
    #[serde(default)]
    pub expected: Option<serde_json::Value>,
    /// `contains`: the substring; defaults to the task's `expected`.
    #[serde(default)]
    pub value: Option<String>,
    /// `regex`: the pattern the final answer must match.
    #[serde(default)]
    pub pattern: Option<String>,
    /// `exact_match`, `contains`: compare case-sensitively (default true).
    #[serde(default)]
    pub case_sensitive: Option<bool>,
    /// `max_steps`: most trace events allowed.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// `tool_sequence`: expected tool names.
    #[serde(default)]
    pub tools: Vec<String>,
    /// `tool_sequence`: how `tools` is compared.
    #[serde(default)]
    pub mode: Option<SequenceMode>,
    /// `tool_sequence`: tools that must never be called.
    #[serde(default)]
    pub forbidden: Vec<String>,
    /// `cost_budget`: most US dollars a task may cost.
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// `latency_budget`: most seconds a task may take.
    #[serde(default)]
    pub max_seconds: Option<f64>,
}

impl EvaluatorConfig {
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or(self.kind.as_str())
    }

    pub fn of_kind(kind: EvaluatorKind) -> Self {
        EvaluatorConfig {
            id: None,
            kind,
            expected: None,
            value: None,
            pattern: None,
            case_sensitive: None,
            max_steps: None,
            tools: vec![],
            mode: None,
            forbidden: vec![],
            max_cost_usd: None,
            max_seconds: None,
        }
    }

    /// Pure checks of the parameters for this kind; `at` is the JSON pointer of this evaluator.
    pub fn validate(&self, at: &str, problems: &mut Vec<(String, String)>) {
        let mut need = |field: &str, present: bool| {
            if !present {
                problems.push((
                    format!("{at}/kind"),
                    format!("evaluator kind `{}` requires `{field}`", self.kind.as_str()),
                ));
            }
        };
        match self.kind {
            EvaluatorKind::Regex => {
                need("pattern", self.pattern.is_some());
                if let Some(p) = &self.pattern
                    && let Err(e) = regex::Regex::new(p)
                {
                    problems.push((format!("{at}/pattern"), format!("invalid regex: {e}")));
                }
            }
            EvaluatorKind::MaxSteps => need("max_steps", self.max_steps.is_some()),
            EvaluatorKind::ToolSequence => {
                need("tools or forbidden", !self.tools.is_empty() || !self.forbidden.is_empty())
            }
            EvaluatorKind::CostBudget => need("max_cost_usd", self.max_cost_usd.is_some()),
            EvaluatorKind::LatencyBudget => need("max_seconds", self.max_seconds.is_some()),
            EvaluatorKind::ExactMatch | EvaluatorKind::Contains | EvaluatorKind::NoError => {}
        }
        for (field, v) in [("max_cost_usd", self.max_cost_usd), ("max_seconds", self.max_seconds)] {
            if v.is_some_and(|v| v < 0.0) {
                problems.push((format!("{at}/{field}"), "must be zero or more".into()));
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `local` (processes on this machine) or `aws` (ECS Fargate).
    #[serde(default = "default_backend")]
    pub id: String,
    #[serde(default = "default_concurrency")]
    pub max_concurrent_jobs: u32,
    /// Tasks per job; 1 runs one worker per task.
    #[serde(default = "one")]
    pub tasks_per_job: u32,
    /// Dispatches of a task before it is given up as an infrastructure failure.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// `local`: a file of `NAME=value` lines the local backend reads secrets from (besides the
    /// environment).
    #[serde(default)]
    pub secrets_file: Option<PathBuf>,
}

fn default_backend() -> String {
    "local".into()
}
fn default_concurrency() -> u32 {
    4
}
fn default_attempts() -> u32 {
    3
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            id: default_backend(),
            max_concurrent_jobs: default_concurrency(),
            tasks_per_job: 1,
            max_attempts: default_attempts(),
            secrets_file: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Folder (or URI) under which `<run_id>/` bundles are written.
    #[serde(default = "default_bundle_root")]
    pub bundle_root: PathBuf,
    /// The run index: a SQLite file locally.
    #[serde(default)]
    pub index: Option<PathBuf>,
}

fn default_bundle_root() -> PathBuf {
    PathBuf::from("runs")
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { bundle_root: default_bundle_root(), index: None }
    }
}

impl StorageConfig {
    /// The index location: `index`, or `index.sqlite` inside the bundle root.
    pub fn index_path(&self) -> PathBuf {
        self.index.clone().unwrap_or_else(|| self.bundle_root.join("index.sqlite"))
    }
}

pub const KNOWN_BACKENDS: &[&str] = &["local", "aws"];

impl RunConfig {
    /// Pure semantic checks that the schema cannot express. Returns `(json pointer, message)`
    /// pairs, every problem at once.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        if self.name.trim().is_empty() {
            p.push(("/name".into(), "must not be empty".into()));
        }
        match self.benchmark.kind {
            BenchmarkKind::Toy => {
                if self.benchmark.size.is_none() {
                    p.push(("/benchmark/kind".into(), "benchmark `toy` requires `size`".into()));
                }
                if self.benchmark.cases.is_some() {
                    p.push(("/benchmark/cases".into(), "only `jsonl` benchmarks take `cases`".into()));
                }
            }
            BenchmarkKind::Jsonl => {
                if self.benchmark.cases.is_none() {
                    p.push(("/benchmark/kind".into(), "benchmark `jsonl` requires `cases`".into()));
                }
                for f in ["size", "latency_ms", "slow_ms"] {
                    let set = match f {
                        "size" => self.benchmark.size.is_some(),
                        "latency_ms" => self.benchmark.latency_ms.is_some(),
                        _ => self.benchmark.slow_ms.is_some(),
                    };
                    if set {
                        p.push((format!("/benchmark/{f}"), "only `toy` benchmarks take this".into()));
                    }
                }
            }
        }
        match self.agent.kind {
            AgentKind::Command if self.agent.command.is_empty() => {
                p.push(("/agent/kind".into(), "agent `command` requires `command`".into()))
            }
            AgentKind::Mock if !self.agent.command.is_empty() => {
                p.push(("/agent/command".into(), "only `command` agents take a command".into()))
            }
            _ => {}
        }
        for (name, v) in
            [("max_wall_seconds", self.agent.limits.max_wall_seconds), ("max_cost_usd", self.agent.limits.max_cost_usd)]
        {
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
        if !KNOWN_BACKENDS.contains(&self.backend.id.as_str()) {
            p.push((
                "/backend/id".into(),
                format!("unknown backend `{}` (expected one of: {})", self.backend.id, KNOWN_BACKENDS.join(", ")),
            ));
        }
        for (name, v) in [
            ("max_concurrent_jobs", self.backend.max_concurrent_jobs),
            ("tasks_per_job", self.backend.tasks_per_job),
            ("max_attempts", self.backend.max_attempts),
        ] {
            if v == 0 {
                p.push((format!("/backend/{name}"), "must be at least 1".into()));
            }
        }
        if self.backend.id == "aws" {
            match &self.aws {
                None => p.push(("/backend/id".into(), "backend `aws` requires an `aws` section".into())),
                Some(a) => {
                    for (field, ok) in [
                        ("cluster", a.cluster.is_some()),
                        ("task_definition", a.task_definition.is_some()),
                        ("subnets", !a.subnets.is_empty()),
                        ("security_groups", !a.security_groups.is_empty()),
                    ] {
                        if !ok {
                            p.push((format!("/aws/{field}"), format!("backend `aws` requires `aws.{field}`")));
                        }
                    }
                    if a.launch_per_second <= 0.0 || a.launch_burst == 0 {
                        p.push((
                            "/aws/launch_per_second".into(),
                            "launch pacing must allow at least one launch".into(),
                        ));
                    }
                }
            }
            if !self.storage.bundle_root.to_string_lossy().starts_with("s3://") {
                p.push((
                    "/storage/bundle_root".into(),
                    "backend `aws` needs `s3://bucket/prefix` bundles (Fargate workers have no shared disk)".into(),
                ));
            }
            if !self.storage.index.as_ref().is_some_and(|i| i.to_string_lossy().starts_with("dynamodb://")) {
                p.push(("/storage/index".into(), "backend `aws` needs a `dynamodb://table` index".into()));
            }
        }
        if self.repetitions == 0 {
            p.push(("/repetitions".into(), "must be at least 1".into()));
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
