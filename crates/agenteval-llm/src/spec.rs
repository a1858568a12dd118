//! Model specs (`provider:model`).

/// Which wire protocol a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// api.openai.com chat completions.
    OpenAi,
    /// Any server speaking OpenAI's chat completions (vLLM, Ollama, LiteLLM…) at `base_url`.
    OpenAiCompatible,
    /// api.anthropic.com messages.
    Anthropic,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::OpenAiCompatible => "openai-compatible",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The environment variable (and default secret name) of the provider's API key.
    pub fn key_var(self) -> &'static str {
        match self {
            Provider::OpenAi | Provider::OpenAiCompatible => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    /// Whether calls need a key (a local vLLM or Ollama usually takes none).
    pub fn needs_key(self) -> bool {
        !matches!(self, Provider::OpenAiCompatible)
    }

    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("https://api.openai.com/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com/v1"),
            Provider::OpenAiCompatible => None,
        }
    }
}

/// `provider:model`, e.g. `openai:gpt-4o-mini`, `anthropic:claude-3-5-haiku-20241022`,
/// `openai-compatible:llama3` (with a `base_url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub provider: Provider,
    /// The model id sent to the provider.
    pub name: String,
}

impl ModelSpec {
    pub fn parse(s: &str) -> Result<ModelSpec, crate::LlmError> {
        let Some((provider, name)) = s.split_once(':') else {
            return Err(crate::LlmError::Config(format!(
                "`{s}` is not a model spec: write provider:model (openai:gpt-4o-mini, anthropic:claude-3-5-haiku-latest, \
                 openai-compatible:NAME)"
            )));
        };
        let provider = match provider {
            "openai" => Provider::OpenAi,
            "anthropic" => Provider::Anthropic,
            "openai-compatible" => Provider::OpenAiCompatible,
            other => {
                return Err(crate::LlmError::Config(format!(
                    "unknown provider `{other}` in `{s}` (expected openai, anthropic or openai-compatible)"
                )));
            }
        };
        if name.trim().is_empty() {
            return Err(crate::LlmError::Config(format!("`{s}` names no model after the provider")));
        }
        Ok(ModelSpec { provider, name: name.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_explain() {
        let s = ModelSpec::parse("openai:gpt-4o-mini").unwrap();
        assert_eq!((s.provider, s.name.as_str()), (Provider::OpenAi, "gpt-4o-mini"));
        assert_eq!(ModelSpec::parse("openai-compatible:org/llama:8b").unwrap().name, "org/llama:8b");
        assert!(ModelSpec::parse("gpt-4o").unwrap_err().to_string().contains("provider:model"));
        assert!(ModelSpec::parse("azure:x").unwrap_err().to_string().contains("unknown provider `azure`"));
    }
}
