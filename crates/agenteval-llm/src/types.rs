//! The provider-neutral shape of a model call: what the agent and the judges build, what
//! cassettes record and fingerprint.

use agenteval_core::traits::ToolSpec;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// One chat call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The model id as the provider knows it.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// The answer must be one JSON object of this shape (a judge's verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
}

/// The shape an answer must take: one JSON object valid against `schema`. OpenAI's wire asks it
/// as `response_format: {type: json_schema, strict: true}`; Anthropic's, which has no such
/// field, as a tool of that name the model must call (`tool_choice`), whose input is the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    /// A name for the shape (`verdict`): letters, digits, `_` and `-`.
    pub name: String,
    /// A JSON Schema of an object, every property required and no other allowed (as OpenAI's
    /// strict mode requires).
    pub schema: serde_json::Value,
}

impl ChatRequest {
    /// sha256 of the canonical JSON (object keys sorted, no whitespace): the same request gives
    /// the same fingerprint on every machine and with every provider.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_value(self).expect("requests serialize").to_string();
        hex::encode(Sha256::digest(canonical.as_bytes()))
    }
}

/// A turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        text: String,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with `call_id`.
    Tool {
        call_id: String,
        name: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// The model asks to run a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

/// Tokens of one call, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache (part of `input_tokens`).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Input tokens written to the provider's prompt cache (part of `input_tokens`; Anthropic
    /// bills them apart).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// Why the model stopped, in the provider's words (`stop`, `tool_calls`, `end_turn`…).
    #[serde(default)]
    pub stop_reason: String,
}
