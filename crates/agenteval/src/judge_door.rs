//! A pinned judge model the commands ask (`certify`'s reviews, `analyze`'s causes): its client
//! built from an `llm_pass_fail` judge's settings with its key from the environment, every call
//! recorded into a folder as it is made, or answered from such a folder with no key and no call.

use std::path::{Path, PathBuf};

use agenteval_core::config::JudgeConfig;
use agenteval_core::traits::Resolver as _;
use agenteval_llm::{
    CassetteMode, Cassettes, ChatRequest, LlmClient, Message, ModelSpec, PriceTable, TaskCalls, Usage,
};
use serde_json::json;

use crate::{Failure, exit};

fn usage(msg: String) -> Failure {
    Failure { code: exit::USAGE, error: anyhow::anyhow!(msg) }
}

/// The judge's settings: an `llm_pass_fail` evaluator's (model, endpoint fields, secrets), read
/// from `path`; `what` names the command in its errors.
pub fn load_judge(path: &Path, what: &str) -> Result<JudgeConfig, Failure> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("{file}: cannot read: {e}")))?;
    let fill = [("kind", json!("llm_pass_fail")), ("criteria", json!(format!("({what})")))];
    let cfg = agenteval_core::config::load_evaluator_str(&text, &file, &fill).map_err(|e| usage(e.to_string()))?;
    // Any judge's settings are a judge's settings; the file may name its kind.
    let Some(judge) = cfg.judge().cloned() else {
        return Err(usage(format!(
            "{file}: a {what} judge is given as an llm_pass_fail judge's settings (model, base_url, …)"
        )));
    };
    ModelSpec::parse(&judge.model).map_err(|e| usage(format!("{file}: model: {e}")))?;
    Ok(judge)
}

/// One answer of the judge.
pub struct Answer {
    pub text: String,
    pub usage: Usage,
    /// `None` when the model has no price.
    pub cost_usd: Option<f64>,
}

/// The judge, live and recording, or replaying a recording.
pub struct JudgeDoor {
    /// The judge's model as configured (`provider:name`).
    pub model: String,
    model_id: String,
    client: Option<LlmClient>,
    price: Option<agenteval_llm::Price>,
    cassettes: Cassettes,
    /// Where a replayed call's recording is written again (the new output keeps it too).
    record_to: PathBuf,
    what: String,
}

impl JudgeDoor {
    /// Live: the judge's key from its environment variable, every call recorded in `record_to`.
    /// Replaying: every answer from `replay_from` (a folder of recorded calls), none made.
    pub async fn open(
        judge: &JudgeConfig,
        record_to: &Path,
        replay_from: Option<&Path>,
        what: &str,
    ) -> Result<Self, Failure> {
        let spec = ModelSpec::parse(&judge.model).map_err(|e| usage(format!("the judge's model: {e}")))?;
        let price = judge
            .endpoint
            .price
            .or(judge.azure.as_ref().and_then(|a| a.price))
            .or_else(|| PriceTable::packaged().lookup(&spec.name));
        let (client, cassettes) = match replay_from {
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(usage(format!("--replay: no recorded calls in {}", dir.display())));
                }
                (None, Cassettes { dir: dir.to_path_buf(), mode: CassetteMode::Replay })
            }
            None => {
                let key = match agenteval_engine::evaluators::judge_secret(judge) {
                    Some((_, name)) => {
                        Some(agenteval_core::secret::Secret::new(std::env::var(&name).map_err(|_| {
                            usage(format!("the {what} judge needs its key in the environment variable {name}"))
                        })?))
                    }
                    None => None,
                };
                let e = &judge.endpoint;
                let retry = agenteval_llm::RetryPolicy {
                    max_attempts: e.max_attempts.unwrap_or(5).max(1),
                    ..Default::default()
                };
                let timeout = std::time::Duration::from_secs_f64(e.request_timeout_seconds.unwrap_or(120.0));
                let client = match &judge.bedrock {
                    Some(b) => {
                        let host = crate::wiring::Wiring::new(crate::session::exe()?, None).model_host(b).await?;
                        LlmClient::on_host(spec.clone(), host, b.model_id(&spec.name), timeout, retry)
                    }
                    None => match &judge.azure {
                        Some(azure) => LlmClient::on_azure(spec.clone(), azure, key.as_ref(), timeout, retry),
                        None => LlmClient::new(spec.clone(), e.base_url.as_deref(), key.as_ref(), timeout, retry),
                    },
                }
                .map_err(|e| usage(format!("the {what} judge: {e}")))?;
                (Some(client), Cassettes { dir: record_to.to_path_buf(), mode: CassetteMode::Record })
            }
        };
        Ok(JudgeDoor {
            model: judge.model.clone(),
            model_id: spec.name.clone(),
            client,
            price,
            cassettes,
            record_to: record_to.to_path_buf(),
            what: what.to_string(),
        })
    }

    /// Asks `prompt` as one user message (temperature 0), recorded under `stem`.
    pub async fn ask(&self, stem: &str, prompt: String, max_output_tokens: u32) -> Result<Answer, Failure> {
        let req = ChatRequest {
            model: self.model_id.clone(),
            system: None,
            messages: vec![Message::User { text: prompt }],
            tools: vec![],
            temperature: Some(0.0),
            max_output_tokens: Some(max_output_tokens),
            response_format: None,
        };
        let failed = |e: agenteval_llm::LlmError| Failure {
            code: exit::FAILED,
            error: anyhow::anyhow!("the {} judge on {stem}: {e}", self.what),
        };
        let mut calls =
            TaskCalls::open(stem, Some(&self.cassettes), agenteval_core::secret::Redactor::new()).map_err(failed)?;
        let answer = calls.call(self.client.as_ref(), req).await.map_err(failed)?;
        if self.cassettes.mode == CassetteMode::Replay {
            // What is made from a recording keeps it too: it replays as the first did.
            std::fs::create_dir_all(&self.record_to)
                .and_then(|()| std::fs::write(self.record_to.join(format!("{stem}.jsonl")), calls.to_jsonl()))
                .map_err(|e| agenteval_core::Error::io(format!("writing {}", self.record_to.display()), e))?;
        }
        Ok(Answer {
            text: answer.text.clone().unwrap_or_default(),
            cost_usd: self.price.as_ref().map(|p| agenteval_llm::cost(p, &answer.usage)),
            usage: answer.usage,
        })
    }
}
