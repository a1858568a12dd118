//! Evaluator configuration: each kind with exactly the parameters it takes. Shared by run
//! configs (`evaluators:`) and task specs (a case's own evaluators), so it depends on neither.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How `tool_sequence` compares the calls with the expected tools.
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

/// One evaluator, tagged by `kind` (see `docs/configuration.md`). Every kind takes an `id`, the
/// name used in scores and summaries (default: the kind).
///
/// Unknown fields are refused by the config schema, not by serde, so that documents written by
/// earlier versions (with `null` for every absent field) still read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[schemars(deny_unknown_fields)]
pub enum EvaluatorConfig {
    /// The final answer equals the expected one (trimmed).
    ExactMatch {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Expected answer; defaults to the task's `expected`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<serde_json::Value>,
        /// Compare case-sensitively (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        case_sensitive: Option<bool>,
    },
    /// The final answer contains a substring.
    Contains {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The substring; defaults to the task's `expected`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
        /// Compare case-sensitively (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        case_sensitive: Option<bool>,
    },
    /// The final answer matches a regular expression.
    Regex {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Checked when the config loads (the `rust-regex` format is the `regex` crate's syntax).
        #[schemars(extend("format" = "rust-regex"))]
        pattern: String,
    },
    /// The agent completed without an error or a limit.
    NoError {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// At most this many trace events.
    MaxSteps {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[schemars(range(max = crate::config::MAX_TRACE_EVENTS))]
        max_steps: u32,
    },
    /// The agent called the expected tools (and none of the forbidden ones).
    ToolSequence {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Expected tool names.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tools: Vec<String>,
        /// How `tools` is compared (default `ordered`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<SequenceMode>,
        /// Tools that must never be called.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        forbidden: Vec<String>,
    },
    /// The task cost at most this many US dollars.
    CostBudget {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[schemars(range(max = crate::config::MAX_TASK_COST_USD))]
        max_cost_usd: f64,
    },
    /// The task took at most this many seconds.
    LatencyBudget {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[schemars(range(max = crate::config::MAX_WALL_SECONDS))]
        max_seconds: f64,
    },
}

impl EvaluatorConfig {
    /// The kind as written in configs (`exact_match`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            EvaluatorConfig::ExactMatch { .. } => "exact_match",
            EvaluatorConfig::Contains { .. } => "contains",
            EvaluatorConfig::Regex { .. } => "regex",
            EvaluatorConfig::NoError { .. } => "no_error",
            EvaluatorConfig::MaxSteps { .. } => "max_steps",
            EvaluatorConfig::ToolSequence { .. } => "tool_sequence",
            EvaluatorConfig::CostBudget { .. } => "cost_budget",
            EvaluatorConfig::LatencyBudget { .. } => "latency_budget",
        }
    }

    /// Name used in scores and summaries: `id`, or the kind.
    pub fn id(&self) -> &str {
        let id = match self {
            EvaluatorConfig::ExactMatch { id, .. }
            | EvaluatorConfig::Contains { id, .. }
            | EvaluatorConfig::Regex { id, .. }
            | EvaluatorConfig::NoError { id }
            | EvaluatorConfig::MaxSteps { id, .. }
            | EvaluatorConfig::ToolSequence { id, .. }
            | EvaluatorConfig::CostBudget { id, .. }
            | EvaluatorConfig::LatencyBudget { id, .. } => id,
        };
        id.as_deref().unwrap_or(self.kind())
    }

    /// Pure checks the schema cannot express; `at` is the JSON pointer of this evaluator.
    pub fn validate(&self, at: &str, problems: &mut Vec<(String, String)>) {
        match self {
            EvaluatorConfig::Regex { pattern, .. } => {
                if let Err(e) = regex::Regex::new(pattern) {
                    problems.push((format!("{at}/pattern"), format!("invalid regex: {e}")));
                }
            }
            EvaluatorConfig::ToolSequence { tools, forbidden, .. } if tools.is_empty() && forbidden.is_empty() => {
                problems.push((
                    format!("{at}/kind"),
                    "evaluator kind `tool_sequence` requires `tools` or `forbidden`".into(),
                ))
            }
            EvaluatorConfig::CostBudget { max_cost_usd: v, .. } if *v < 0.0 => {
                problems.push((format!("{at}/max_cost_usd"), "must be zero or more".into()))
            }
            EvaluatorConfig::LatencyBudget { max_seconds: v, .. } if *v < 0.0 => {
                problems.push((format!("{at}/max_seconds"), "must be zero or more".into()))
            }
            _ => {}
        }
    }
}
