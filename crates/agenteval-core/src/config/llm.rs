//! Configuration of the built-in `llm` agent and the LLM judges: model, endpoint, key, prices.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Limits, MAX_ATTEMPTS, MAX_TURNS, MAX_WALL_SECONDS};

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ModelPrice {
    #[schemars(range(min = 0, max = 1000000))]
    pub input_per_mtok: f64,
    #[schemars(range(min = 0, max = 1000000))]
    pub output_per_mtok: f64,
    /// Input tokens served from the provider's prompt cache; default the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub cached_input_per_mtok: Option<f64>,
    /// Input tokens written to the provider's prompt cache (Anthropic bills them apart);
    /// default the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub cache_write_per_mtok: Option<f64>,
}

/// Where a model is and how to reach it; shared by the agent and the judges.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Endpoint {
    /// Server root for `openai-compatible` models (vLLM, Ollama, LiteLLM), or to reach OpenAI
    /// or Anthropic through a proxy: `https://…/v1`. Plain `http://` only to a loopback address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Allows `http://` to a non-loopback `base_url` (the key then travels unencrypted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_http: bool,
    /// The API key: `ENV_NAME: secret-name`, fetched through the backend (environment or secrets
    /// file locally, Secrets Manager on AWS). Default: the provider's variable
    /// (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`) from a secret of the same name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// Price of this model, when the packaged table does not know it (or to override it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<ModelPrice>,
    /// Seconds one model call may take (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_WALL_SECONDS))]
    pub request_timeout_seconds: Option<f64>,
    /// Attempts per call on 408/429/5xx and connection errors (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    pub max_attempts: Option<u32>,
}

/// The built-in `llm` agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LlmAgentConfig {
    /// `provider:model`: `openai:gpt-4o-mini`, `anthropic:claude-3-5-haiku-latest`,
    /// `openai-compatible:NAME` (with `base_url`).
    pub model: String,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Built-in tools the model may call besides the benchmark's: `python`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Model calls per task before the agent is stopped (`limit_turns`; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TURNS))]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Output tokens per model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_output_tokens: Option<u32>,
    /// The Python interpreter of the `python` tool (default `python3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// An `openai:` model served by an Azure OpenAI resource instead of OpenAI's API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureEndpoint>,
    /// The model served by Amazon Bedrock instead of its provider's API (no key: the AWS
    /// credential chain signs the calls): an `anthropic:` model on `InvokeModel`, any other on
    /// `Converse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bedrock: Option<BedrockEndpoint>,
    /// A JSON file of prices (`{"models": {"id": {"input_per_mtok": …, "output_per_mtok": …}}}`)
    /// extending or overriding the packaged table; read when the config loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices_file: Option<PathBuf>,
    /// The prices read from `prices_file` (filled in when loading).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, ModelPrice>,
    /// The provider's rate limits, kept for every worker of the run together (as
    /// `agent.upstream.rate_limits`): each call waits its turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimit>,
    #[serde(default)]
    pub limits: Limits,
}

impl JudgeConfig {
    /// The problems of where the judge's model is, under `at` (an evaluator's place).
    pub fn validate_endpoint(&self, at: &str, p: &mut Vec<(String, String)>) {
        self.endpoint.validate(at, p);
        if let Some(azure) = &self.azure {
            azure.validate(&format!("{at}/azure"), p);
            if !self.model.starts_with("openai:") {
                p.push((format!("{at}/azure"), "Azure OpenAI serves `openai:` judges".into()));
            }
            if self.bedrock.is_some() {
                p.push((format!("{at}/azure"), "the judge is served by one of `azure` or `bedrock`, not both".into()));
            }
            if self.endpoint.base_url.is_some() || !self.endpoint.secrets.is_empty() {
                p.push((
                    format!("{at}/azure"),
                    "with `azure`, the judge's `base_url` and `secrets` are Azure's: give them under `azure`".into(),
                ));
            }
        }
        let Some(bedrock) = &self.bedrock else { return };
        bedrock.validate_beside(&self.endpoint, &format!("{at}/bedrock"), "judge", p);
        if !self.model.starts_with("anthropic:") {
            p.push((format!("{at}/bedrock"), "Bedrock serves `anthropic:` judges here (the Messages wire)".into()));
        }
    }
}

impl LlmAgentConfig {
    /// The problems of where its model is: its endpoint, or the Azure resource serving it.
    pub fn validate_endpoint(&self, p: &mut Vec<(String, String)>) {
        self.endpoint.validate("/agent", p);
        if let Some(bedrock) = &self.bedrock {
            bedrock.validate_beside(&self.endpoint, "/agent/bedrock", "agent", p);
            if self.azure.is_some() {
                p.push((
                    "/agent/bedrock".into(),
                    "the model is served by one of `azure` or `bedrock`, not both".into(),
                ));
            }
        }
        let Some(azure) = &self.azure else { return };
        azure.validate("/agent/azure", p);
        if !self.model.starts_with("openai:") {
            p.push(("/agent/azure".into(), "Azure OpenAI serves `openai:` models".into()));
        }
        if self.endpoint.base_url.is_some() || !self.endpoint.secrets.is_empty() {
            p.push((
                "/agent/azure".into(),
                "with `azure`, the agent's `base_url` and `secrets` are Azure's: give them under `agent.azure`".into(),
            ));
        }
    }
}

/// The model an LLM judge asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JudgeConfig {
    /// `provider:model` of the judge.
    pub model: String,
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// An `anthropic:` judge served by Amazon Bedrock (signed with AWS credentials, no key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bedrock: Option<BedrockEndpoint>,
    /// `json_schema`: the judge's reply is held to its verdict's JSON Schema by the provider
    /// (OpenAI's strict `response_format`; a tool it must call on Anthropic's wire), for
    /// models that stray from a shape asked in words. Default `text`.
    #[serde(default, skip_serializing_if = "JudgeReply::is_text")]
    pub response_format: JudgeReply,
    /// An `openai:` judge served by an Azure OpenAI resource (its deployment, its `api-key` or
    /// Entra token), as the `llm` agent's `azure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureEndpoint>,
    /// Where verdicts are cached, keyed by sha256 of (model, prompt, answer, rubric): re-judging
    /// the same answer costs nothing and gives the same verdict. Default
    /// `$XDG_CACHE_HOME/agenteval/judge` (or `~/.cache/agenteval/judge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// When the judge itself fails (an outage, a refusal, an answer past its context), the task
    /// is graded by its other scores. Off by default: a judge error fails the task, since the
    /// agent can make a judge fail and a failed grader must never turn a wrong answer into a
    /// pass.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// Most characters of the agent's answer the judge is sent (default 20,000); a longer one
    /// is cut first, and the cut is said in the prompt and in the score's reason. The agent
    /// decides how long its answer is, not the judge's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 10_000_000))]
    pub max_answer_chars: Option<u64>,
    /// What the judge is shown besides the task and the answer: `expected` (the task's
    /// expected answer, when it has one) and `steps` (a summary of the agent's tool calls and
    /// their results, cut to 4,000 characters). Part of the cached verdict's key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<JudgeInclude>,
    /// The judge's prompt as a template file (relative to the config): `{{task}}`,
    /// `{{answer}}` (`{{answers}}` for `llm_pairwise`), `{{rubric}}` or `{{criteria}}`,
    /// `{{expected}}` and `{{steps}}` are filled in; any other `{{name}}` is a config error. The
    /// reply's JSON shape is asked after it, always. Read at load into `prompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_file: Option<PathBuf>,
    /// The judge's prompt template itself (or `prompt_file`'s, once loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// The variables a judge's prompt template may name, by evaluator kind; the first is required.
pub fn template_variables(kind: &str) -> &'static [&'static str] {
    match kind {
        "llm_pairwise" => &["answers", "task", "criteria", "expected", "steps"],
        "llm_pass_fail" => &["answer", "task", "criteria", "expected", "steps"],
        _ => &["answer", "task", "rubric", "expected", "steps"],
    }
}

/// The `{{name}}`s of a template, in order, spaces inside the braces trimmed; `None` for an
/// opening `{{` never closed.
pub fn template_names(template: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        let after = &rest[at + 2..];
        let end = after.find("}}")?;
        out.push(after[..end].trim());
        rest = &after[end + 2..];
    }
    Some(out)
}

/// Checks a judge's prompt template for an evaluator of `kind`: every variable it names is one
/// the judge fills, and the answer is among them.
pub(crate) fn check_template(kind: &str, template: &str) -> Result<(), String> {
    let known = template_variables(kind);
    let names = template_names(template).ok_or("a `{{` is never closed by `}}`")?;
    if let Some(bad) = names.iter().find(|n| !known.contains(n)) {
        return Err(format!(
            "the prompt names `{{{{{bad}}}}}`, which the judge does not fill (it fills {})",
            known.join(", ")
        ));
    }
    if !names.contains(&known[0]) {
        return Err(format!("the prompt never shows the judge `{{{{{}}}}}`", known[0]));
    }
    Ok(())
}

/// How a judge must reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JudgeReply {
    /// Its verdict's JSON shape is asked in words and read from the reply.
    #[default]
    Text,
    /// The verdict's shape is a JSON Schema the provider holds the reply to: OpenAI's strict
    /// `response_format` (Azure's too); on Anthropic's wire (and Bedrock's) a tool the judge must
    /// call, whose input is the verdict.
    JsonSchema,
}

impl JudgeReply {
    pub fn is_text(&self) -> bool {
        *self == JudgeReply::Text
    }
}

/// Something a judge may be shown besides the task and the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JudgeInclude {
    Expected,
    Steps,
}

/// `max_answer_chars` when a judge does not say.
pub const DEFAULT_MAX_ANSWER_CHARS: u64 = 20_000;

impl Endpoint {
    /// Problems of the endpoint at `at` (a JSON pointer prefix).
    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        if let Some(url) = &self.base_url
            && let Err(e) = super::check_base_url(url, self.allow_insecure_http)
        {
            p.push((format!("{at}/base_url"), e.to_string()));
        }
        for (field, v) in [("request_timeout_seconds", self.request_timeout_seconds)] {
            if v.is_some_and(|v| v <= 0.0) {
                p.push((format!("{at}/{field}"), "must be greater than zero".into()));
            }
        }
    }
}

/// OpenAI's models as an Azure OpenAI resource serves them (`docs/agents.md`): the calls on
/// OpenAI's wires go to the resource's deployments, with its `api-key` or an Entra token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AzureEndpoint {
    /// The resource's endpoint, `https://RESOURCE.openai.azure.com` (no path). Plain `http://`
    /// only to a loopback address.
    pub base_url: String,
    /// Allows `http://` to a non-loopback `base_url` (the key then travels unencrypted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_http: bool,
    /// A dated API version (`2024-10-21`): calls go to
    /// `/openai/deployments/<deployment>/chat/completions?api-version=…` (and
    /// `/openai/responses?api-version=…`). Without it, Azure's v1 API (`/openai/v1/…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The deployment serving each model the agent asks for (`gpt-5: my-gpt5`); a model not
    /// listed goes to a deployment of its own name. The agent's model name is what is priced and
    /// recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deployments: BTreeMap<String, String>,
    /// The credential: `AZURE_OPENAI_API_KEY: secret-name` (sent as `api-key`, the default, from
    /// the secret `AZURE_OPENAI_API_KEY`) or `AZURE_OPENAI_AD_TOKEN: secret-name` (a Microsoft
    /// Entra token, sent as a bearer).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// Price of every model the resource serves, when the packaged table does not know it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<ModelPrice>,
    /// Seconds one model call may take (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_WALL_SECONDS))]
    pub request_timeout_seconds: Option<f64>,
}

/// Models as Amazon Bedrock serves them (`docs/agents.md`): calls on Anthropic's Messages wire
/// go to Bedrock's `InvokeModel` (`InvokeModelWithResponseStream` when streamed), calls on
/// OpenAI's chat wire to `Converse` (`ConverseStream`), signed with the AWS credential chain
/// (the worker's task role on the fleet): no key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BedrockEndpoint {
    /// Bedrock's region (`us-east-1`). Default: the environment's (`AWS_REGION`, the profile's,
    /// the fleet task's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The Bedrock model id (or inference profile) serving each model the agent asks for
    /// (`claude-sonnet-4-5: us.anthropic.claude-sonnet-4-5-20250929-v1:0`); a model not listed
    /// is sent as its own id. The agent's model name is what is recorded; either is priced.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, String>,
    /// Bedrock runtime's endpoint, for a VPC interface endpoint or a stand-in. Default: the
    /// region's (or `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`). Plain `http://` only to a loopback
    /// address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    /// Allows `http://` to a non-loopback `endpoint_url`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_http: bool,
    /// Price of every model it serves, when the packaged table does not know it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<ModelPrice>,
    /// Seconds one model call may take (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_WALL_SECONDS))]
    pub request_timeout_seconds: Option<f64>,
    /// Tries of one call Bedrock refuses for now (throttled, unavailable; default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_ATTEMPTS))]
    pub max_attempts: Option<u32>,
}

impl BedrockEndpoint {
    /// The Bedrock model id serving `model`.
    pub fn model_id<'a>(&'a self, model: &'a str) -> &'a str {
        self.models.get(model).map_or(model, String::as_str)
    }

    /// Its problems at `at`, and those of the `endpoint` of the `whose` (agent or judge) it
    /// serves: a `base_url` or `secrets` there would be ignored.
    pub fn validate_beside(&self, endpoint: &Endpoint, at: &str, whose: &str, p: &mut Vec<(String, String)>) {
        self.validate(at, p);
        if endpoint.base_url.is_some() || !endpoint.secrets.is_empty() {
            p.push((
                at.into(),
                format!(
                    "with `bedrock`, the calls are signed with AWS credentials: drop the {whose}'s `base_url` and `secrets`"
                ),
            ));
        }
    }

    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        if let Some(url) = &self.endpoint_url
            && let Err(e) = super::check_base_url(url, self.allow_insecure_http)
        {
            // No key travels to Bedrock; the calls and their signatures would.
            let why = match url.starts_with("http://") {
                true => format!(
                    "`{url}` would send the signed calls unencrypted: use https://, a loopback address, or set `allow_insecure_http: true`"
                ),
                false => e.to_string(),
            };
            p.push((format!("{at}/endpoint_url"), why));
        }
        if let Some(r) = &self.region
            && (r.is_empty() || !r.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        {
            p.push((format!("{at}/region"), format!("`{r}` is not an AWS region (`us-east-1`)")));
        }
        if self.request_timeout_seconds.is_some_and(|v| v <= 0.0) {
            p.push((format!("{at}/request_timeout_seconds"), "must be greater than zero".into()));
        }
    }
}

/// The variables an Azure credential may be named by: an API key, or an Entra token.
pub const AZURE_KEY_VARS: [&str; 2] = ["AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN"];

impl AzureEndpoint {
    /// The deployment serving `model`.
    pub fn deployment<'a>(&'a self, model: &'a str) -> &'a str {
        self.deployments.get(model).map_or(model, String::as_str)
    }

    /// Whether the credential is an Entra token (a bearer) rather than an `api-key`.
    pub fn entra(&self) -> bool {
        self.secrets.keys().next().is_some_and(|v| v == AZURE_KEY_VARS[1])
    }

    /// The secret the credential is fetched from.
    pub fn secret(&self) -> String {
        self.secrets.values().next().cloned().unwrap_or_else(|| AZURE_KEY_VARS[0].to_string())
    }

    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        match super::check_base_url(&self.base_url, self.allow_insecure_http) {
            Err(e) => p.push((format!("{at}/base_url"), e.to_string())),
            Ok(()) if self.base_url.trim_end_matches('/').contains("/openai") => p.push((
                format!("{at}/base_url"),
                "the resource's endpoint only (`https://RESOURCE.openai.azure.com`): the path is agenteval's".into(),
            )),
            Ok(()) => {}
        }
        if self.secrets.len() > 1 {
            p.push((format!("{at}/secrets"), "one credential: name one secret".into()));
        }
        if let Some(var) = self.secrets.keys().find(|v| !AZURE_KEY_VARS.contains(&v.as_str())) {
            p.push((
                format!("{at}/secrets/{var}"),
                format!("`{var}`: Azure's credential is `AZURE_OPENAI_API_KEY` (an api-key) or `AZURE_OPENAI_AD_TOKEN` (an Entra token)"),
            ));
        }
        if self.request_timeout_seconds.is_some_and(|v| v <= 0.0) {
            p.push((format!("{at}/request_timeout_seconds"), "must be greater than zero".into()));
        }
    }
}

/// Where the model gateway sends a `command` or `installed` agent's calls (`docs/agents.md`):
/// the agent is given a token of its task and the gateway's base URLs, never these keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Upstream {
    /// Where calls in OpenAI's wires (chat completions, Responses, `GET /v1/models`) go:
    /// `base_url` (default `https://api.openai.com/v1`), the key (default the secret
    /// `OPENAI_API_KEY`), and a price for every model it serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openai: Option<Endpoint>,
    /// Or an Azure OpenAI resource serves OpenAI's wires (not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureEndpoint>,
    /// Where Anthropic Messages calls go: `base_url` (default `https://api.anthropic.com/v1`),
    /// the key (default the secret `ANTHROPIC_API_KEY`), a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic: Option<Endpoint>,
    /// Or Amazon Bedrock serves Anthropic's Messages wire (not both), and OpenAI's chat wire
    /// (`Converse`) unless `openai` or `azure` does: signed with the AWS credential chain, no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bedrock: Option<BedrockEndpoint>,
    /// Prices by model id, extending or overriding the packaged table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, ModelPrice>,
    /// How a replayed call finds its recording: `fingerprint` (the default: the first unused
    /// recorded call with the same request) or `order` (also the task's n-th recorded call when
    /// it has the same wire and model: for agents whose requests carry ids or times).
    #[serde(default, skip_serializing_if = "ReplayMatch::is_default")]
    pub replay_match: ReplayMatch,
    /// Models the agent may call besides `agent.model` (a preset's small model, say): a call to
    /// any other is refused. With no `agent.model` and no list, any model may be called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// What the provider may be asked beyond a model's answer, each refused unless allowed here.
    #[serde(default, skip_serializing_if = "UpstreamAllow::is_default")]
    pub allow: UpstreamAllow,
    /// The provider's rate limits, kept by the gateway for every worker of the run together:
    /// each call waits its turn (queued, never refused) so the run stays within them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimit>,
}

/// A provider's limit on one model (or every model), per minute, as the run's workers share it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RateLimit {
    /// The model it limits (as the agent names it); none: every model of the upstream together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Requests per minute, spread evenly (at most a quarter of a second's share at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000))]
    pub requests_per_minute: Option<u64>,
    /// Tokens per minute (a call counts its prompt, guessed from its size, and the most its
    /// answer may be), spread evenly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000_000u64))]
    pub tokens_per_minute: Option<u64>,
}

/// What the gateway lets through to the provider beyond a model's answer (`docs/agents.md`): the
/// provider acts on these with the real key, outside the task's network and budget.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamAllow {
    /// Tools the provider runs itself (web search and fetch, code execution, file search,
    /// computer use on the provider's side, image generation): refused unless `true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub server_tools: bool,
    /// MCP servers the provider connects to (`mcp_servers`, an `mcp` tool): refused unless `true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mcp_servers: bool,
    /// Responses kept by the provider and read back (`store: true`, `previous_response_id`,
    /// `conversation`, `background`, a stored `prompt`): refused unless `true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stored_responses: bool,
    /// `anthropic-beta` flags passed on besides the built-in ones that only change how an answer
    /// is made (`interleaved-thinking-…`, `fine-grained-tool-streaming-…`, …): each a prefix.
    /// Any other flag is dropped from the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anthropic_betas: Vec<String>,
}

impl UpstreamAllow {
    pub fn is_default(&self) -> bool {
        *self == UpstreamAllow::default()
    }
}

/// How a replayed call is matched to its recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplayMatch {
    #[default]
    Fingerprint,
    Order,
}

impl ReplayMatch {
    pub fn is_default(&self) -> bool {
        *self == ReplayMatch::Fingerprint
    }
}

/// A rate limit must limit something: requests, tokens or both.
pub fn validate_rate_limits(limits: &[RateLimit], at: &str, p: &mut Vec<(String, String)>) {
    for (i, l) in limits.iter().enumerate() {
        if l.requests_per_minute.is_none() && l.tokens_per_minute.is_none() {
            p.push((format!("{at}/{i}"), "give `requests_per_minute`, `tokens_per_minute` or both".into()));
        }
    }
}

impl Upstream {
    /// Its problems, each at its place under `at` (`/agent/upstream`).
    pub fn validate(&self, at: &str, p: &mut Vec<(String, String)>) {
        for (name, e) in [("openai", &self.openai), ("anthropic", &self.anthropic)] {
            if let Some(e) = e {
                e.validate(&format!("{at}/{name}"), p);
                if e.secrets.len() > 1 {
                    p.push((format!("{at}/{name}/secrets"), "one key per provider: name one secret".into()));
                }
            }
        }
        if let Some(a) = &self.azure {
            a.validate(&format!("{at}/azure"), p);
            if self.openai.is_some() {
                p.push((format!("{at}/azure"), "OpenAI's wires go to one place: `openai` or `azure`, not both".into()));
            }
        }
        if let Some(b) = &self.bedrock {
            b.validate(&format!("{at}/bedrock"), p);
            if self.anthropic.is_some() {
                p.push((
                    format!("{at}/bedrock"),
                    "Anthropic's wire goes to one place: `anthropic` or `bedrock`, not both".into(),
                ));
            }
        }
        if self.openai.is_none() && self.anthropic.is_none() && self.azure.is_none() && self.bedrock.is_none() {
            p.push((
                at.into(),
                "name the provider the calls go to: `openai` (or `azure`), `anthropic` (or `bedrock`) or both".into(),
            ));
        }
        validate_rate_limits(&self.rate_limits, &format!("{at}/rate_limits"), p);
    }

    /// The secret each endpoint's key is fetched from: `(endpoint, secret name)`, `openai`,
    /// `azure` or `anthropic`; by default the provider's variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
    pub fn secrets(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (endpoint, which, var) in
            [(&self.openai, "openai", "OPENAI_API_KEY"), (&self.anthropic, "anthropic", "ANTHROPIC_API_KEY")]
        {
            if let Some(e) = endpoint {
                let name = e.secrets.values().next().cloned().unwrap_or_else(|| var.to_string());
                out.push((which, name));
            }
        }
        if let Some(a) = &self.azure {
            out.push(("azure", a.secret()));
        }
        out
    }
}
