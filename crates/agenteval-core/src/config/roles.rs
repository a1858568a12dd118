//! `roles:` in a run config: the actors of a task beside the agent (a simulated user), each
//! with its own pinned model and limits, reached through the run's model gateway.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{MAX_TASK_COST_USD, MAX_TASK_TOKENS};

/// Most turns a simulated user may take in one conversation.
pub const MAX_USER_TURNS: u32 = 1000;

/// The other actors of a task (`docs/roles.md`). A benchmark whose tasks need one (τ²-bench's
/// user) says so; the run pins its model here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RolesConfig {
    /// The simulated user the agent converses with, turn by turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserRole>,
    /// The task's tool servers (MCP servers run as its sidecars): what they are given that the
    /// agent never is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsRole>,
    /// The model a task's own verifier calls to grade (a Harbor task whose `[verifier.env]` asks
    /// for a provider's key): pinned, metered, budgeted, recorded and replayed apart from the
    /// agent's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeRole>,
}

impl RolesConfig {
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.tools.is_none() && self.judge.is_none()
    }
}

/// The judge a task's verifier reaches (`docs/roles.md`, "The judge"): a door of the run's model
/// gateway of its own, admitting its one model. The verifier gets the door's token where its
/// `[verifier.env]` asks for a provider's key (`${ANTHROPIC_API_KEY}`, `${OPENAI_API_KEY}`, or
/// a name of `key_variables`), and the door's base URLs (`ANTHROPIC_BASE_URL`,
/// `OPENAI_BASE_URL`); the real key stays in the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JudgeRole {
    /// `provider:name`: the only model the verifier's calls may name.
    pub model: String,
    /// Tokens (input + output) the judge's calls may use on one task; apart from the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TASK_TOKENS))]
    pub max_tokens: Option<u64>,
    /// Dollars the judge's calls may spend on one task; apart from the agent's. Past it a call is
    /// refused, and the task's grade is an error saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TASK_COST_USD))]
    pub max_cost_usd: Option<f64>,
    /// Where its model is served when its provider is not one the agent's or the simulated
    /// user's calls go to (then it goes where theirs go):
    /// `base_url` (default: the provider's API), `secrets` (its key; default the provider's
    /// variable), `price`.
    #[serde(flatten)]
    pub endpoint: super::Endpoint,
    /// Other names the tests' `${VAR}` may ask for the judge's key under (a task's
    /// `JUDGE_KEY = "${MY_JUDGE_KEY}"`), beside the providers' own variables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_variables: Vec<String>,
}

impl JudgeRole {
    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        model_role_problems(at, &self.model, self.max_cost_usd, &self.endpoint, p);
        for (i, var) in self.key_variables.iter().enumerate() {
            if !is_variable_name(var) {
                p.push((format!("{at}/key_variables/{i}"), "must be a variable name (letters, digits, `_`)".into()));
            }
        }
    }
}

/// A name a shell variable may have: letters, digits and `_`, not starting with a digit.
fn is_variable_name(var: &str) -> bool {
    var.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a task's tool servers get from the run (`docs/roles.md`, "Tool servers").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ToolsRole {
    /// Variable → secret name. A sidecar whose compose `environment` gives a variable exactly as
    /// `${VAR}` gets that secret's value there, fetched by the worker when the sidecar starts:
    /// in that container only, never in the agent's, never in a file of the run.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, String>,
}

impl ToolsRole {
    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        for (var, secret) in &self.secrets {
            if !is_variable_name(var) {
                p.push((format!("{at}/secrets/{var}"), "must be a variable name (letters, digits, `_`)".into()));
            }
            if secret.trim().is_empty() {
                p.push((format!("{at}/secrets/{var}"), "must name a secret".into()));
            }
        }
    }
}

/// A simulated user: a model given the task's persona and instructions (the benchmark's own
/// prompt, so a "standard" simulator is the benchmark's), speaking to the agent in turns until it
/// ends the conversation. Its calls go through the run's model gateway (the agent's provider and
/// endpoint, or its own on another provider; `agent.prices` or its `price` pricing it):
/// metered, budgeted and recorded apart from the agent's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct UserRole {
    /// `provider:name`, as the agent's model is written; on another provider than the agent's,
    /// served by `endpoint`.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_output_tokens: Option<u32>,
    /// Most turns the user takes (default 30): past it the conversation ends unfinished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_USER_TURNS))]
    pub max_turns: Option<u32>,
    /// Tokens (input + output) the user's calls may use on one task; apart from the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TASK_TOKENS))]
    pub max_tokens: Option<u64>,
    /// Dollars the user's calls may spend on one task; apart from the agent's. Once spent, the
    /// conversation ends (`limit_cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_TASK_COST_USD))]
    pub max_cost_usd: Option<f64>,
    /// Where its model is served when its provider is not the agent's (an `anthropic:` user of
    /// an `openai:` agent): `base_url` (default: the provider's API), `secrets` (its key;
    /// default the provider's variable, `ANTHROPIC_API_KEY`), `price`. A user on the agent's
    /// provider goes where the agent's calls go, and these are not read.
    #[serde(flatten)]
    pub endpoint: super::Endpoint,
}

/// The user's turns when `max_turns` is not given.
pub const DEFAULT_USER_TURNS: u32 = 30;

impl UserRole {
    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        model_role_problems(at, &self.model, self.max_cost_usd, &self.endpoint, p);
    }
}

/// What a role played by a model must have: a model, a positive cost limit if any, and an
/// endpoint that holds.
fn model_role_problems(
    at: &str,
    model: &str,
    max_cost_usd: Option<f64>,
    endpoint: &super::Endpoint,
    p: &mut Vec<(String, String)>,
) {
    if model.trim().is_empty() {
        p.push((format!("{at}/model"), "must name a model (`provider:name`)".into()));
    }
    if max_cost_usd.is_some_and(|v| v <= 0.0) {
        p.push((format!("{at}/max_cost_usd"), "must be greater than zero".into()));
    }
    endpoint.validate(at, p);
}
