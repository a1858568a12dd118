//! LLM providers for agenteval: a retrying client for OpenAI-compatible chat completions and
//! Anthropic messages, the packaged price table, record/replay cassettes, the built-in `llm`
//! agent, the simulated user and the LLM judges.
//!
//! Everything here speaks one provider-neutral shape ([`ChatRequest`], [`ChatResponse`]); the
//! wire formats live in [`wire`]. Cassettes and fingerprints are taken over the neutral shape, so
//! a recording does not depend on which provider answered.

mod agent;
mod cassette;
mod client;
mod error;
mod judge;
mod mcp;
mod pricing;
mod spec;
mod types;
mod user;
pub mod wire;

pub use agent::LlmAgent;
pub use agenteval_core::config::check_base_url;
pub use cassette::{CassetteMode, Cassettes, TaskCalls, first_difference};
pub use client::{LlmClient, RetryPolicy};
pub use error::{LlmError, is_retryable_status};
pub use judge::{JudgeKind, LlmJudge, VerdictCache, extract_json};
pub use pricing::{PRICES_DATE, Price, PriceTable, cost};
pub use spec::{ModelSpec, Provider};
pub use types::*;
pub use user::GatewayUser;

/// The header the model gateway puts on its answer when it could not reach the provider
/// (`HOST; REASON`): a client reads it as the provider being unreachable, not as an HTTP 502.
pub const GATEWAY_UNREACHABLE: &str = "x-agenteval-unreachable";

/// The models a run's agent calls that no price covers: `(json pointer, model, the field that
/// would price it)`. Their cost is unknown; a cost limit or a cost gate cannot be kept on them.
pub fn unpriced_models(config: &agenteval_core::config::RunConfig) -> Vec<(String, String, String)> {
    use agenteval_core::config::AgentConfig;
    let table = PriceTable::packaged();
    let mut out = Vec::new();
    if let AgentConfig::Llm(a) = &config.agent
        && let Ok(spec) = ModelSpec::parse(&a.model)
    {
        let flat = a.endpoint.price.is_some()
            || a.azure.as_ref().is_some_and(|z| z.price.is_some())
            || a.bedrock.as_ref().is_some_and(|b| b.price.is_some());
        // A model Bedrock serves under an id of its own is priced as that id's model.
        let id = a.bedrock.as_ref().map(|b| b.model_id(&spec.name));
        if !flat
            && !a.prices.contains_key(&spec.name)
            && table.lookup(&spec.name).is_none()
            && id.is_none_or(|id| table.lookup(id).is_none())
        {
            out.push(("/agent/model".into(), spec.name, "`agent.price`".into()));
        }
    }
    if let Some(up) = config.agent.upstream() {
        // An endpoint's own price covers every model it serves.
        let flat = [&up.openai, &up.anthropic].into_iter().flatten().any(|e| e.price.is_some())
            || up.azure.as_ref().is_some_and(|a| a.price.is_some())
            || up.bedrock.as_ref().is_some_and(|b| b.price.is_some());
        let models = config.agent.model().into_iter().map(|m| ("/agent/model".to_string(), m));
        let others = up.models.iter().enumerate().map(|(i, m)| (format!("/agent/upstream/models/{i}"), m.as_str()));
        for (at, model) in models.chain(others) {
            let model = ModelSpec::parse(model).map_or(model.to_string(), |s| s.name);
            let id = up.bedrock.as_ref().map(|b| b.model_id(&model));
            if !flat
                && !up.prices.contains_key(&model)
                && table.lookup(&model).is_none()
                && id.is_none_or(|id| table.lookup(id).is_none())
            {
                out.push((at, model.clone(), format!("`agent.upstream.prices.{model}`")));
            }
        }
    }
    out
}

/// Problems with the LLM parts of a run config that only this crate can see (an unknown price
/// under a cost limit, a model spec it cannot parse): `(json pointer, message)` pairs, like
/// `RunConfig::validate`.
pub fn validate_config(config: &agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    use agenteval_core::config::AgentConfig;
    let mut p = Vec::new();
    if let AgentConfig::Llm(a) = &config.agent
        && let Err(e) = ModelSpec::parse(&a.model)
    {
        p.push(("/agent/model".into(), e.to_string()));
    }
    let limited = config.agent.limits().max_cost_usd.is_some() || config.max_run_cost_usd.is_some();
    if limited {
        for (at, model, field) in unpriced_models(config) {
            p.push((
                at,
                format!(
                    "no price is known for `{model}`, so a cost limit cannot be enforced: give its price in {field} \
                     (USD per million input and output tokens) or drop the limit"
                ),
            ));
        }
    }
    if let Some(user) = &config.roles.user {
        user_role_problems(config, user, &mut p);
    }
    if let Some(judge) = &config.roles.judge {
        judge_role_problems(config, judge, &mut p);
    }
    for (i, e) in config.evaluators.iter().enumerate() {
        if let Some(judge) = e.judge()
            && let Err(msg) = ModelSpec::parse(&judge.model)
        {
            p.push((format!("/evaluators/{i}/model"), msg.to_string()));
        }
    }
    p
}

/// The simulated user's model: a spec this crate reads, and a price wherever a cost limit must
/// hold its calls (its own `max_cost_usd`, or the run's budget).
fn user_role_problems(
    config: &agenteval_core::config::RunConfig,
    user: &agenteval_core::config::UserRole,
    p: &mut Vec<(String, String)>,
) {
    let spec = match ModelSpec::parse(&user.model) {
        Ok(s) => s,
        Err(e) => return p.push(("/roles/user/model".into(), e.to_string())),
    };
    if user.max_cost_usd.is_none() && config.max_run_cost_usd.is_none() {
        return;
    }
    let mut table = PriceTable::packaged();
    let (prices, flat) = match &config.agent {
        agenteval_core::config::AgentConfig::Llm(a) => (a.prices.clone(), a.endpoint.price.is_some()),
        other => (other.upstream().map(|u| u.prices.clone()).unwrap_or_default(), false),
    };
    table.extend(prices);
    if !flat && table.lookup(&spec.name).is_none() {
        p.push((
            "/roles/user/model".into(),
            format!(
                "no price is known for `{}`, so a cost limit cannot be kept on the simulated user's calls: give its price in `agent.prices.{}` or drop the limit",
                spec.name, spec.name
            ),
        ));
    }
}

/// The judge's model: a spec this crate reads, and a price wherever a cost limit must hold its
/// calls (its own `max_cost_usd`, or the run's budget).
fn judge_role_problems(
    config: &agenteval_core::config::RunConfig,
    judge: &agenteval_core::config::JudgeRole,
    p: &mut Vec<(String, String)>,
) {
    let spec = match ModelSpec::parse(&judge.model) {
        Ok(s) => s,
        Err(e) => return p.push(("/roles/judge/model".into(), e.to_string())),
    };
    if judge.endpoint.price.is_some() || (judge.max_cost_usd.is_none() && config.max_run_cost_usd.is_none()) {
        return;
    }
    let mut table = PriceTable::packaged();
    table.extend(match &config.agent {
        agenteval_core::config::AgentConfig::Llm(a) => a.prices.clone(),
        other => other.upstream().map(|u| u.prices.clone()).unwrap_or_default(),
    });
    if table.lookup(&spec.name).is_none() {
        p.push((
            "/roles/judge/model".into(),
            format!(
                "no price is known for `{}`, so a cost limit cannot be kept on the judge's calls: give its price in `roles.judge.price` or drop the limit",
                spec.name
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_judge_needs_a_model_this_crate_reads_and_a_price_under_a_cost_limit() {
        let problems = |judge: &str| {
            let yaml = format!(
                "name: t\nbenchmark: {{kind: toy, size: 1}}\nagent: {{kind: oracle}}\nroles:\n  judge: {judge}\n"
            );
            let c = agenteval_core::config::load_config_str(&yaml, "c.yaml", std::path::Path::new("."), &[])
                .unwrap()
                .config;
            validate_config(&c)
        };
        assert!(problems("{model: 'anthropic:mock-judge'}").is_empty());
        let p = problems("{model: 'anthropic:mock-judge', max_cost_usd: 1}");
        assert!(p.len() == 1 && p[0].0 == "/roles/judge/model" && p[0].1.contains("roles.judge.price"), "{p:?}");
        let priced = "{model: 'anthropic:mock-judge', max_cost_usd: 1, price: {input_per_mtok: 1, output_per_mtok: 2}}";
        assert!(problems(priced).is_empty());
        assert_eq!(problems("{model: 'no-provider'}")[0].0, "/roles/judge/model");
    }

    #[test]
    fn a_simulated_user_under_a_cost_limit_needs_a_price() {
        let yaml = |user: &str| {
            format!(
                "name: t\nbenchmark: {{kind: toy, size: 1}}\nagent: {{kind: llm, model: 'openai:gpt-4o-mini', prices: {{priced: {{input_per_mtok: 1, output_per_mtok: 2}}}}}}\nroles:\n  user: {{model: '{user}', max_cost_usd: 1}}\n"
            )
        };
        let problems = |user: &str| {
            let c = agenteval_core::config::load_config_str(&yaml(user), "c.yaml", std::path::Path::new("."), &[])
                .unwrap()
                .config;
            validate_config(&c)
        };
        assert!(problems("openai:priced").is_empty());
        let p = problems("openai:unpriced-user");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].0 == "/roles/user/model" && p[0].1.contains("agent.prices.unpriced-user"), "{p:?}");
    }
}
