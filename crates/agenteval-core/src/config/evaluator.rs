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

/// How a `tool_calls` evaluator compares an expected call's arguments with a call's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentMode {
    /// The same arguments, no more, no fewer.
    Exact,
    /// Every expected argument, with its value; the call may pass more.
    #[default]
    Subset,
    /// Only expected arguments, each with its value; the call may leave some out.
    Superset,
    /// The tool's name alone (arguments with a rule of their own are still checked).
    Ignore,
}

/// In which order a `tool_calls` evaluator looks for the expected calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallOrder {
    /// Each after the one before; other calls may come between.
    #[default]
    InOrder,
    /// Each matched by a call of its own, anywhere.
    AnyOrder,
    /// One of them is enough.
    AnyOf,
}

/// A rule of one argument of an expected call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ArgumentRule {
    /// `ignore` (not checked) or `exact` (equal to the expected value, the default).
    Word(ArgumentWord),
    /// The value, as text, matches this regular expression.
    Regex { regex: String },
    /// The value is valid against this JSON Schema (draft 2020-12).
    Schema { schema: serde_json::Value },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentWord {
    Ignore,
    Exact,
}

/// One call a `tool_calls` evaluator expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExpectedCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments (an object); none: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
    /// How they compare (default: the evaluator's `arguments`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ArgumentMode>,
    /// A rule per argument, over the mode: `ignore`, `exact`, `{regex: …}` or `{schema: …}`.
    #[serde(default, rename = "match", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rules: std::collections::BTreeMap<String, ArgumentRule>,
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
    /// The final answer is close to the expected one as text: its similarity (1 − the
    /// Levenshtein distance over the longer length, on trimmed text) is the score.
    Similarity {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Expected answer; defaults to the task's `expected`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<serde_json::Value>,
        /// The least similarity that passes (default 0.8).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0.0, max = 1.0))]
        min: Option<f64>,
        /// Compare case-sensitively (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        case_sensitive: Option<bool>,
    },
    /// The final answer is a number within a tolerance of the expected one (the first number in
    /// a text answer is read).
    Numeric {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Expected number; defaults to the task's `expected`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<serde_json::Value>,
        /// Largest absolute difference that passes (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        abs_tolerance: Option<f64>,
        /// Largest difference relative to the expected number that passes (0.01 is 1%).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rel_tolerance: Option<f64>,
    },
    /// The final answer, as JSON, equals the expected JSON (key order aside; numbers by value),
    /// the differences listed by JSON pointer; `ignore` leaves pointers out.
    JsonEqual {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Expected JSON; defaults to the task's `expected`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected: Option<serde_json::Value>,
        /// JSON pointers left out of the comparison (`/timestamp`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ignore: Vec<String>,
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
        #[schemars(range(max = super::MAX_TRACE_EVENTS))]
        max_steps: u32,
    },
    /// How the agent worked, from its trace: no loop, no failing call made again and again, no
    /// final answer that contradicts what its tools said last.
    TraceQuality {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The most times one tool call with the same arguments may be made (default 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = super::MAX_TRACE_EVENTS))]
        max_repeats: Option<u32>,
        /// The most times one call with the same arguments may fail (default 2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = super::MAX_TRACE_EVENTS))]
        max_failed_repeats: Option<u32>,
        /// Check that the answer does not contradict the last tool result (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        contradictions: Option<bool>,
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
    /// The agent made the expected tool calls, each by its name and its arguments (a mode per
    /// call, a rule per argument), in order, in any order, or one of them; the score is the
    /// share of them matched, and the reason names each one missed with the nearest call made.
    ToolCalls {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        calls: Vec<ExpectedCall>,
        /// `in_order` (default), `any_order` or `any_of`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        order: Option<CallOrder>,
        /// How arguments compare unless a call says (default `subset`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<ArgumentMode>,
        /// The share of expected calls to match to pass (default 1: all of them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0.0, max = 1.0))]
        pass_threshold: Option<f64>,
    },
    /// The task cost at most this many US dollars.
    CostBudget {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[schemars(range(max = super::MAX_TASK_COST_USD))]
        max_cost_usd: f64,
    },
    /// The task took at most this many seconds.
    LatencyBudget {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[schemars(range(max = super::MAX_WALL_SECONDS))]
        max_seconds: f64,
    },
    /// The final answer (or the value at `pointer` in it) is valid against a JSON Schema (draft
    /// 2020-12); every violation is listed in the reason. A string answer holding JSON is parsed.
    JsonSchema {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The schema, inline.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<serde_json::Value>,
        /// Or a schema file (relative to the config file; read when the config loads).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema_file: Option<std::path::PathBuf>,
        /// A JSON pointer into the answer (`/result/items`); default the whole answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pointer: Option<String>,
    },
    /// Any program scores the task: `{"task", "result", "trace"}` as JSON on stdin, one JSON
    /// object `{"score": 0..1, "passed": bool, "reason": "..."}` on stdout. A crash, a timeout or
    /// garbage is an evaluator error (the score is marked), never a failure of the run.
    Command {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Program and arguments; relative files are the config file's folder's.
        command: Vec<String>,
        /// Seconds before the program is killed (default 60).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = super::MAX_WALL_SECONDS))]
        timeout_seconds: Option<f64>,
        /// The config file's folder, filled in when loading.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workdir: Option<std::path::PathBuf>,
    },
    /// The task's tests, run in its environment once the agent has stopped (copied in only
    /// then, so the agent never sees them), as root, with their own timeout; the grade is the
    /// reward they write (`reward.txt` / `reward.json` in `$AGENTEVAL_VERIFIER_DIR`) or their
    /// exit code. A verifier that crashes, times out or writes no reward is an evaluator error,
    /// never a pass. Tasks that bring tests (Harbor's, a case's `tests`) are graded by them
    /// without it; this kind sets how, or gives tests to tasks that have none.
    Tests {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// A folder of tests (with its `test.sh`) for tasks that bring none; relative to the
        /// config file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tests: Option<std::path::PathBuf>,
        /// What runs them, in the agent's working folder (default `bash $AGENTEVAL_TESTS_DIR/test.sh`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        /// Seconds they may run (default: the task's, else 600).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = super::MAX_WALL_SECONDS))]
        timeout_seconds: Option<f64>,
        /// `file` (default: the reward the tests write) or `exit_code` (0 passes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reward: Option<crate::environment::RewardFrom>,
    },
    /// How the agent worked: cost ceiling, tool allow and deny lists, step limit, patterns that
    /// must not appear in tool arguments. A violation fails the task (or, with
    /// `on_violation: warn`, scores 0.5 and passes); the reason cites the offending steps.
    Policy {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = super::MAX_TASK_COST_USD))]
        max_cost_usd: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(max = super::MAX_TRACE_EVENTS))]
        max_steps: Option<u32>,
        /// Only these tools may be called (empty: any).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        allow_tools: Vec<String>,
        /// These tools must never be called.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deny_tools: Vec<String>,
        /// Regular expressions that must not match a tool call's arguments (its payload).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        forbidden_patterns: Vec<String>,
        /// `fail` (default) or `warn`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_violation: Option<PolicyAction>,
    },
    /// An LLM grades the answer against a rubric: a score from 0 to 1 and a reason. Temperature
    /// 0, verdicts cached on disk; a judge that fails fails the task, unless `optional: true`.
    LlmRubric {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// What a good answer does.
        rubric: String,
        /// Lowest score that passes (default 0.5).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0, max = 1))]
        pass_threshold: Option<f64>,
        #[serde(flatten)]
        judge: super::JudgeConfig,
    },
    /// An LLM decides whether the answer meets the criteria: pass or fail, with a reason.
    LlmPassFail {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// What the answer must do to pass.
        criteria: String,
        #[serde(flatten)]
        judge: super::JudgeConfig,
    },
    /// An LLM decides which of two answers to the same task is better: this run's, or the
    /// `baseline` run's. Asked twice with the answers' positions swapped (to cancel a judge's
    /// preference for a position): the candidate scores 1 when both orders prefer it, 0 when
    /// both prefer the baseline's, and 0.5 (a tie) when they disagree or call it even.
    LlmPairwise {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The run whose answers this run's are judged against: a run id, `latest:NAME` or
        /// `baseline:NAME`, resolved to one run when the run is submitted.
        baseline: String,
        /// Where that run's bundle is (filled in when the run is submitted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        baseline_bundle: Option<String>,
        /// What makes one answer better than the other.
        criteria: String,
        /// Lowest score that passes (default 0.5: a tie passes, the candidate must not be
        /// worse; 1 asks it to win).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 0, max = 1))]
        pass_threshold: Option<f64>,
        #[serde(flatten)]
        judge: super::JudgeConfig,
    },
}

impl EvaluatorConfig {
    /// Whether this evaluator asks a model.
    pub fn is_judge_kind(kind: &str) -> bool {
        matches!(kind, "llm_rubric" | "llm_pass_fail" | "llm_pairwise")
    }

    /// Whether it judges the answer itself (against an expectation, a pattern, a schema, a
    /// program or a judge), as opposed to how the agent worked (steps, tools, cost, time,
    /// errors). Only such an evaluator, named by a case, stands in for the benchmark's own
    /// check of the answer: a case that asks only for `no_error` is still checked for it.
    pub fn judges_the_answer(&self) -> bool {
        matches!(
            self,
            EvaluatorConfig::ExactMatch { .. }
                | EvaluatorConfig::Contains { .. }
                | EvaluatorConfig::Regex { .. }
                | EvaluatorConfig::JsonSchema { .. }
                | EvaluatorConfig::Command { .. }
                | EvaluatorConfig::Tests { .. }
                | EvaluatorConfig::LlmRubric { .. }
                | EvaluatorConfig::LlmPassFail { .. }
                | EvaluatorConfig::LlmPairwise { .. }
        )
    }

    /// The model judge's settings, for the kinds that ask one.
    pub fn judge(&self) -> Option<&super::JudgeConfig> {
        match self {
            EvaluatorConfig::LlmRubric { judge, .. }
            | EvaluatorConfig::LlmPassFail { judge, .. }
            | EvaluatorConfig::LlmPairwise { judge, .. } => Some(judge),
            EvaluatorConfig::ExactMatch { .. }
            | EvaluatorConfig::Contains { .. }
            | EvaluatorConfig::Regex { .. }
            | EvaluatorConfig::NoError { .. }
            | EvaluatorConfig::MaxSteps { .. }
            | EvaluatorConfig::TraceQuality { .. }
            | EvaluatorConfig::ToolSequence { .. }
            | EvaluatorConfig::ToolCalls { .. }
            | EvaluatorConfig::Similarity { .. }
            | EvaluatorConfig::Numeric { .. }
            | EvaluatorConfig::JsonEqual { .. }
            | EvaluatorConfig::CostBudget { .. }
            | EvaluatorConfig::LatencyBudget { .. }
            | EvaluatorConfig::JsonSchema { .. }
            | EvaluatorConfig::Command { .. }
            | EvaluatorConfig::Tests { .. }
            | EvaluatorConfig::Policy { .. } => None,
        }
    }

    /// Whether the config marked this evaluator `optional: true` (judges only): its own failure
    /// then does not fail the task.
    pub fn optional(&self) -> bool {
        self.judge().is_some_and(|j| j.optional)
    }
}

/// What a policy violation does to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    #[default]
    Fail,
    Warn,
}

/// The field a kind's shorthand value fills (`- max_steps: 8` is `{kind: max_steps,
/// max_steps: 8}`); `None` for kinds whose shorthand takes a mapping only.
fn shorthand_field(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "exact_match" => "expected",
        "contains" => "value",
        "regex" => "pattern",
        "max_steps" => "max_steps",
        "tool_sequence" => "tools",
        "cost_budget" => "max_cost_usd",
        "latency_budget" => "max_seconds",
        "json_schema" => "schema_file",
        "command" => "command",
        "llm_rubric" => "rubric",
        "llm_pass_fail" => "criteria",
        _ => return None,
    })
}

/// Rewrites the YAML shorthand of an evaluator list in place: an item that is a one-key mapping
/// without `kind` (`- max_steps: 8`, `- regex: '^\\d+$'`, `- no_error: {}`, `- policy: {deny_tools:
/// [rm]}`) becomes the long form. Anything else is left for the schema to judge.
pub fn expand_shorthand(list: &mut serde_json::Value) {
    let Some(items) = list.as_array_mut() else { return };
    for item in items {
        let Some(map) = item.as_object() else { continue };
        if map.len() != 1 || map.contains_key("kind") {
            continue;
        }
        let (kind, value) = map.iter().next().map(|(k, v)| (k.clone(), v.clone())).expect("one entry");
        let mut long = serde_json::Map::new();
        long.insert("kind".into(), serde_json::Value::String(kind.clone()));
        match (value, shorthand_field(&kind)) {
            (serde_json::Value::Object(fields), _) => long.extend(fields),
            (serde_json::Value::Null, _) => {}
            (v, Some(field)) => {
                long.insert(field.into(), v);
            }
            (v, None) => {
                // No shorthand value for this kind: keep the value where the schema will name it.
                long.insert(kind.clone(), v);
            }
        }
        *item = serde_json::Value::Object(long);
    }
}

/// A `tool_calls` evaluator's expected calls: each names a tool, each rule compiles.
fn validate_calls(calls: &[ExpectedCall], at: &str, problems: &mut Vec<(String, String)>) {
    if calls.is_empty() {
        problems.push((format!("{at}/calls"), "names no call: give at least one `{tool: …}`".into()));
    }
    for (i, c) in calls.iter().enumerate() {
        if c.tool.trim().is_empty() {
            problems.push((format!("{at}/calls/{i}/tool"), "names no tool".into()));
        }
        for (arg, rule) in &c.rules {
            let here = format!("{at}/calls/{i}/match/{}", arg.replace('~', "~0").replace('/', "~1"));
            match rule {
                ArgumentRule::Regex { regex } => {
                    if let Err(e) = regex::Regex::new(regex) {
                        problems.push((format!("{here}/regex"), format!("invalid regex: {e}")));
                    }
                }
                ArgumentRule::Schema { schema } => {
                    if let Err(e) = jsonschema::draft202012::new(schema) {
                        problems.push((format!("{here}/schema"), format!("not a valid JSON Schema: {e}")));
                    }
                }
                ArgumentRule::Word(_) => {}
            }
        }
    }
}

impl EvaluatorConfig {
    /// Whether it runs the tests of a task's environment (`tests`).
    pub fn runs_tests(&self) -> bool {
        matches!(self, EvaluatorConfig::Tests { .. })
    }

    /// The folder of tests it brings for tasks that bring none: agents must not see it.
    pub fn tests_folder(&self) -> Option<&std::path::Path> {
        match self {
            EvaluatorConfig::Tests { tests, .. } => tests.as_deref(),
            _ => None,
        }
    }

    /// Whether it judges against another run's answers (`llm_pairwise`).
    pub fn compares_runs(&self) -> bool {
        matches!(self, EvaluatorConfig::LlmPairwise { .. })
    }

    /// The run it judges against, as written, and where that run's bundle is once resolved:
    /// the submitting controller fills the second in.
    pub fn baseline_mut(&mut self) -> Option<(&mut String, &mut Option<String>)> {
        match self {
            EvaluatorConfig::LlmPairwise { baseline, baseline_bundle, .. } => Some((baseline, baseline_bundle)),
            _ => None,
        }
    }

    /// Where the run it judges against keeps its bundle, once resolved.
    pub fn baseline_bundle(&self) -> Option<&str> {
        match self {
            EvaluatorConfig::LlmPairwise { baseline_bundle, .. } => baseline_bundle.as_deref(),
            _ => None,
        }
    }

    /// The kind as written in configs (`exact_match`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            EvaluatorConfig::ExactMatch { .. } => "exact_match",
            EvaluatorConfig::Contains { .. } => "contains",
            EvaluatorConfig::Regex { .. } => "regex",
            EvaluatorConfig::NoError { .. } => "no_error",
            EvaluatorConfig::Similarity { .. } => "similarity",
            EvaluatorConfig::Numeric { .. } => "numeric",
            EvaluatorConfig::JsonEqual { .. } => "json_equal",
            EvaluatorConfig::MaxSteps { .. } => "max_steps",
            EvaluatorConfig::TraceQuality { .. } => "trace_quality",
            EvaluatorConfig::ToolSequence { .. } => "tool_sequence",
            EvaluatorConfig::ToolCalls { .. } => "tool_calls",
            EvaluatorConfig::CostBudget { .. } => "cost_budget",
            EvaluatorConfig::LatencyBudget { .. } => "latency_budget",
            EvaluatorConfig::JsonSchema { .. } => "json_schema",
            EvaluatorConfig::Command { .. } => "command",
            EvaluatorConfig::Tests { .. } => "tests",
            EvaluatorConfig::Policy { .. } => "policy",
            EvaluatorConfig::LlmRubric { .. } => "llm_rubric",
            EvaluatorConfig::LlmPassFail { .. } => "llm_pass_fail",
            EvaluatorConfig::LlmPairwise { .. } => "llm_pairwise",
        }
    }

    /// Name used in scores and summaries: `id`, or the kind.
    pub fn id(&self) -> &str {
        let id = match self {
            EvaluatorConfig::ExactMatch { id, .. }
            | EvaluatorConfig::Contains { id, .. }
            | EvaluatorConfig::Regex { id, .. }
            | EvaluatorConfig::NoError { id }
            | EvaluatorConfig::Similarity { id, .. }
            | EvaluatorConfig::Numeric { id, .. }
            | EvaluatorConfig::JsonEqual { id, .. }
            | EvaluatorConfig::MaxSteps { id, .. }
            | EvaluatorConfig::TraceQuality { id, .. }
            | EvaluatorConfig::ToolSequence { id, .. }
            | EvaluatorConfig::ToolCalls { id, .. }
            | EvaluatorConfig::CostBudget { id, .. }
            | EvaluatorConfig::LatencyBudget { id, .. }
            | EvaluatorConfig::JsonSchema { id, .. }
            | EvaluatorConfig::Command { id, .. }
            | EvaluatorConfig::Tests { id, .. }
            | EvaluatorConfig::Policy { id, .. }
            | EvaluatorConfig::LlmRubric { id, .. }
            | EvaluatorConfig::LlmPassFail { id, .. }
            | EvaluatorConfig::LlmPairwise { id, .. } => id,
        };
        id.as_deref().unwrap_or(self.kind())
    }

    /// A judge's inline prompt template names only what the judge fills (a `prompt_file` is
    /// checked when the loader reads it).
    fn validate_prompt(&self, at: &str, problems: &mut Vec<(String, String)>) {
        let Some(judge) = self.judge() else { return };
        match (&judge.prompt, &judge.prompt_file) {
            (Some(_), Some(_)) => {
                problems.push((format!("{at}/prompt"), "give `prompt` or `prompt_file`, not both".into()))
            }
            (Some(t), None) => {
                if let Err(e) = super::llm::check_template(self.kind(), t) {
                    problems.push((format!("{at}/prompt"), e));
                }
            }
            _ => {}
        }
    }

    /// Pure checks the schema cannot express; `at` is the JSON pointer of this evaluator.
    pub fn validate(&self, at: &str, problems: &mut Vec<(String, String)>) {
        self.validate_prompt(at, problems);
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
            EvaluatorConfig::ToolCalls { calls, .. } => validate_calls(calls, at, problems),
            EvaluatorConfig::Numeric { abs_tolerance, rel_tolerance, .. }
                if abs_tolerance.is_some_and(|t| t < 0.0) || rel_tolerance.is_some_and(|t| t < 0.0) =>
            {
                problems.push((format!("{at}/kind"), "a tolerance is zero or more".into()))
            }
            EvaluatorConfig::JsonEqual { ignore, .. } => {
                for (i, p) in ignore.iter().enumerate() {
                    if !p.starts_with('/') {
                        problems.push((format!("{at}/ignore/{i}"), format!("`{p}` is not a JSON pointer (`/a/0/b`)")));
                    }
                }
            }
            EvaluatorConfig::CostBudget { max_cost_usd: v, .. } if *v < 0.0 => {
                problems.push((format!("{at}/max_cost_usd"), "must be zero or more".into()))
            }
            EvaluatorConfig::LatencyBudget { max_seconds: v, .. } if *v < 0.0 => {
                problems.push((format!("{at}/max_seconds"), "must be zero or more".into()))
            }
            EvaluatorConfig::JsonSchema { schema, schema_file, pointer, .. } => {
                match (schema, schema_file) {
                    (None, None) | (Some(_), Some(_)) => problems.push((
                        format!("{at}/kind"),
                        "evaluator kind `json_schema` takes `schema` (inline) or `schema_file`, one of them".into(),
                    )),
                    (Some(s), None) => {
                        if let Err(e) = jsonschema::draft202012::new(s) {
                            problems.push((format!("{at}/schema"), format!("not a valid JSON Schema: {e}")));
                        }
                    }
                    (None, Some(_)) => {}
                }
                if let Some(p) = pointer
                    && !(p.is_empty() || p.starts_with('/'))
                {
                    problems.push((format!("{at}/pointer"), format!("`{p}` is not a JSON pointer (`/a/0/b`)")));
                }
            }
            EvaluatorConfig::Command { command, timeout_seconds, .. } => {
                if command.first().is_none_or(|c| c.trim().is_empty()) {
                    problems.push((format!("{at}/command"), "evaluator `command` needs a program to run".into()));
                }
                if timeout_seconds.is_some_and(|t| t <= 0.0) {
                    problems.push((format!("{at}/timeout_seconds"), "must be greater than zero".into()));
                }
            }
            EvaluatorConfig::Tests { command, timeout_seconds, .. } => {
                if command.as_deref().is_some_and(|c| c.trim().is_empty()) {
                    problems.push((format!("{at}/command"), "an empty command runs no tests".into()));
                }
                if timeout_seconds.is_some_and(|t| t <= 0.0) {
                    problems.push((format!("{at}/timeout_seconds"), "must be greater than zero".into()));
                }
            }
            EvaluatorConfig::Policy { max_cost_usd, forbidden_patterns, .. } => {
                if max_cost_usd.is_some_and(|v| v < 0.0) {
                    problems.push((format!("{at}/max_cost_usd"), "must be zero or more".into()));
                }
                for (i, p) in forbidden_patterns.iter().enumerate() {
                    if let Err(e) = regex::Regex::new(p) {
                        problems.push((format!("{at}/forbidden_patterns/{i}"), format!("invalid regex: {e}")));
                    }
                }
            }
            EvaluatorConfig::LlmRubric { judge, .. } | EvaluatorConfig::LlmPassFail { judge, .. } => {
                judge.validate_endpoint(at, problems);
            }
            EvaluatorConfig::LlmPairwise { judge, baseline, .. } => {
                judge.validate_endpoint(at, problems);
                if baseline.trim().is_empty() {
                    problems.push((
                        format!("{at}/baseline"),
                        "name the run to judge against (a run id, latest:NAME or baseline:NAME)".into(),
                    ));
                }
                if judge.include.contains(&super::JudgeInclude::Steps) {
                    problems.push((
                        format!("{at}/include"),
                        "`steps` is for llm_rubric and llm_pass_fail: a pairwise judge sees two answers, and only this run's steps".into(),
                    ));
                }
            }
            _ => {}
        }
    }
}
