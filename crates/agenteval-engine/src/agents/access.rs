//! What an agent's calls need, read from the run's config: the keys it and the model gateway
//! fetch, where the gateway sends its calls, and the models a call may name. The agent
//! component declares these; the worker and `submit`/`doctor` only ask.

use agenteval_core::config::{AgentConfig, ModelPrice as Price, RunConfig, Upstream};

/// The agent's secrets: `(ENV_NAME, secret name, required)`. An `llm` agent with no `secrets`
/// takes its provider's key from the secret of the variable's name (optional for
/// `openai-compatible` servers, which often take none).
pub fn agent_secrets(config: &RunConfig) -> Vec<(String, String, bool)> {
    let listed = config.agent.secrets();
    if let AgentConfig::Llm(a) = &config.agent
        && let Some(azure) = &a.azure
    {
        // Its calls go through the gateway to Azure: the key is the gateway's.
        return vec![(azure.secrets.keys().next().cloned().unwrap_or_default(), azure.secret(), true)];
    }
    if let AgentConfig::Llm(a) = &config.agent
        && a.bedrock.is_some()
    {
        // Its calls go through the gateway to Bedrock, signed with AWS credentials: no key.
        return Vec::new();
    }
    if let AgentConfig::Llm(a) = &config.agent
        && listed.is_empty()
        && let Ok(spec) = agenteval_llm::ModelSpec::parse(&a.model)
    {
        let var = spec.provider.key_var().to_string();
        return vec![(var.clone(), var, spec.provider.needs_key())];
    }
    listed.iter().map(|(v, n)| (v.clone(), n.clone(), true)).collect()
}

/// Whether the agent calls its model from the worker's process (the built-in `llm` agent), as
/// its runner's [`agenteval_core::traits::AgentNeeds::calls_in_process`] says once built.
pub fn calls_in_process(config: &RunConfig) -> bool {
    matches!(config.agent, AgentConfig::Llm(_))
}

/// The model gateway's keys: `(endpoint, secret name, required)`. A key named in the config is
/// required; a provider's default one only for the provider itself (a server at a `base_url`
/// of the user's may take none).
pub fn upstream_secrets(upstream: &Upstream) -> Vec<(&'static str, String, bool)> {
    upstream
        .secrets()
        .into_iter()
        .map(|(which, name)| {
            let named = match which {
                // An Azure resource always takes a credential.
                "azure" => true,
                _ => {
                    let endpoint = if which == "openai" { &upstream.openai } else { &upstream.anthropic };
                    endpoint.as_ref().is_some_and(|e| !e.secrets.is_empty() || e.base_url.is_none())
                }
            };
            (which, name, named)
        })
        .collect()
}

/// Every secret a worker of this run fetches and must find: the agent's and the judges',
/// as `(secret name, what needs it)`. `submit` and `doctor` check them before anything starts.
pub fn required_secrets(config: &RunConfig, strict_replay: bool) -> Vec<(String, String)> {
    let replayed = strict_replay && calls_in_process(config);
    // A regrade runs no agent.
    let agent = if replayed || config.regrade.is_some() { Vec::new() } else { agent_secrets(config) };
    let mut out: Vec<(String, String)> = agent
        .into_iter()
        .filter(|(_, _, required)| *required)
        .map(|(_, name, _)| (name, format!("agent `{}`", config.agent.kind())))
        .collect();
    if let Some((_, name, true)) = user_secret(config).filter(|_| !replayed && config.regrade.is_none()) {
        out.push((name, "roles.user".into()));
    }
    if let Some((_, name, true)) = judge_secret(config).filter(|_| !strict_replay && config.regrade.is_none())
        && !out.iter().any(|(n, _)| *n == name)
    {
        out.push((name, "roles.judge".into()));
    }
    // The gateway's keys, unless every call is answered from a recording.
    if let Some(up) = config.agent.upstream()
        && !strict_replay
        && config.regrade.is_none()
    {
        for (which, name, required) in upstream_secrets(up) {
            if required && !out.iter().any(|(n, _)| *n == name) {
                out.push((name, format!("agent.upstream.{which}")));
            }
        }
    }
    for e in &config.evaluators {
        if let Some(judge) = e.judge()
            && let Some((_, name)) = crate::evaluators::judge_secret(judge)
            && !out.iter().any(|(n, _)| *n == name)
        {
            out.push((name, format!("evaluator `{}`", e.id())));
        }
    }
    // The tool servers' own keys: a regrade starts no environment.
    for (var, name) in config.roles.tools.iter().flat_map(|t| &t.secrets).filter(|_| config.regrade.is_none()) {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.clone(), format!("roles.tools.secrets.{var}")));
        }
    }
    out
}

/// Where the gateway sends a run's agent's calls: its `upstream`, or for the `llm` agent its
/// model's endpoint (so that its calls are metered, budgeted and recorded on the same path).
pub fn upstream_of(config: &RunConfig) -> Option<Upstream> {
    match &config.agent {
        AgentConfig::Llm(cfg) => {
            let spec = agenteval_llm::ModelSpec::parse(&cfg.model).ok()?;
            let mut endpoint = cfg.endpoint.clone();
            if endpoint.secrets.is_empty() {
                let var = spec.provider.key_var().to_string();
                endpoint.secrets.insert(var.clone(), var);
            }
            endpoint.base_url = endpoint.base_url.or_else(|| spec.provider.default_base_url().map(str::to_string));
            let mut up =
                Upstream { prices: cfg.prices.clone(), rate_limits: cfg.rate_limits.clone(), ..Upstream::default() };
            if let Some(azure) = &cfg.azure {
                up.azure = Some(azure.clone());
            } else if let Some(bedrock) = &cfg.bedrock {
                up.bedrock = Some(bedrock.clone());
            } else {
                match spec.provider {
                    agenteval_llm::Provider::Anthropic => up.anthropic = Some(endpoint),
                    _ => up.openai = Some(endpoint),
                }
            }
            Some(with_judge_provider(with_user_provider(up, config), config))
        }
        other => match (other.upstream(), &config.roles.judge) {
            (Some(up), _) => Some(with_judge_provider(with_user_provider(up.clone(), config), config)),
            // An agent that calls no model through agenteval, graded by tests that call a judge:
            // the gateway serves the judge alone.
            (None, Some(_)) => Some(with_judge_provider(Upstream::default(), config)),
            (None, None) => None,
        },
    }
}

/// Whether a task's containers need their way to the model gateway: an installed agent with an
/// `upstream` calls its model from inside, and so do tests that call a judge (`roles.judge`).
pub fn container_reaches_gateway(config: &RunConfig) -> bool {
    agent_calls_from_container(config) || config.roles.judge.is_some()
}

/// Whether the agent calls its model from inside the task's container, through the gateway (an
/// installed agent with an `upstream`).
pub fn agent_calls_from_container(config: &RunConfig) -> bool {
    matches!(config.agent, AgentConfig::Installed { .. }) && config.agent.upstream().is_some()
}

/// The config field that sets the agent's endpoint `name` (`openai`, `azure`, …), as this
/// agent's config writes it: the `llm` agent has its own `base_url` (and refuses
/// `agent.upstream`), other agents an upstream.
pub fn endpoint_field(config: &RunConfig, name: &str) -> String {
    match (&config.agent, name) {
        (AgentConfig::Llm(_), "azure") => "agent.azure.base_url".to_string(),
        (AgentConfig::Llm(_), _) => "agent.base_url".to_string(),
        _ => format!("agent.upstream.{name}.base_url"),
    }
}

/// Prices by model, and prices by the field that gives them for every model of an endpoint.
pub type ConfigPrices = (Vec<(String, Price)>, Vec<(&'static str, Price)>);

/// The prices a config gives: by model (an `llm` agent's `prices`, an upstream's), and those an
/// endpoint gives every model it serves, by the field that says so (`agent.price`, …).
pub fn config_prices(config: &RunConfig) -> ConfigPrices {
    let mut named: Vec<(String, Price)> = vec![];
    let mut flat: Vec<(&'static str, Price)> = vec![];
    if let AgentConfig::Llm(a) = &config.agent {
        named.extend(a.prices.iter().map(|(m, p)| (m.clone(), *p)));
        flat.extend(a.endpoint.price.map(|p| ("agent.price", p)));
        flat.extend(a.azure.as_ref().and_then(|z| z.price).map(|p| ("agent.azure.price", p)));
        flat.extend(a.bedrock.as_ref().and_then(|b| b.price).map(|p| ("agent.bedrock.price", p)));
    }
    if let Some(up) = config.agent.upstream() {
        named.extend(up.prices.iter().map(|(m, p)| (m.clone(), *p)));
        flat.extend(up.openai.as_ref().and_then(|e| e.price).map(|p| ("agent.upstream.openai.price", p)));
        flat.extend(up.anthropic.as_ref().and_then(|e| e.price).map(|p| ("agent.upstream.anthropic.price", p)));
        flat.extend(up.azure.as_ref().and_then(|z| z.price).map(|p| ("agent.upstream.azure.price", p)));
        flat.extend(up.bedrock.as_ref().and_then(|b| b.price).map(|p| ("agent.upstream.bedrock.price", p)));
    }
    (named, flat)
}

/// Where the agent's Bedrock models are served, when they are (its own `bedrock`, or its
/// upstream's): a model Bedrock serves under an id of its own is priced as that id's model.
pub fn bedrock_of(config: &RunConfig) -> Option<&agenteval_core::config::BedrockEndpoint> {
    match &config.agent {
        AgentConfig::Llm(a) => a.bedrock.as_ref(),
        agent => agent.upstream().and_then(|u| u.bedrock.as_ref()),
    }
}

/// Whether the agent's own calls go through the model gateway (the `llm` agent's, or an
/// `upstream`'s): only then does it get a door of its task. A gateway that serves only a judge
/// is none of the agent's.
pub fn agent_calls_through_gateway(config: &RunConfig) -> bool {
    calls_in_process(config) || config.agent.upstream().is_some()
}

/// Whether `up` serves `wire` (`openai`, `anthropic`): its own endpoint, or Azure's (OpenAI's wire), or
/// Bedrock (Anthropic's).
fn serves_wire(up: &Upstream, wire: &str) -> bool {
    match wire {
        "anthropic" => up.anthropic.is_some() || up.bedrock.is_some(),
        _ => up.openai.is_some() || up.azure.is_some(),
    }
}

/// The simulated user's endpoint, when the user's provider is not one the agent's upstream
/// serves: `roles.user`'s own `base_url`, key and price (else the provider's API and key
/// variable), beside the agent's.
fn with_user_provider(up: Upstream, config: &RunConfig) -> Upstream {
    match &config.roles.user {
        Some(user) => with_role_provider(up, &user.model, &user.endpoint),
        None => up,
    }
}

/// The judge's endpoint, when its provider is not one `up` serves: `roles.judge`'s own
/// `base_url`, key and price (else the provider's API and key variable).
fn with_judge_provider(up: Upstream, config: &RunConfig) -> Upstream {
    match &config.roles.judge {
        Some(judge) => with_role_provider(up, &judge.model, &judge.endpoint),
        None => up,
    }
}

/// A role's model served beside the agent's: its price, and its own endpoint when `up` does not
/// serve its provider.
fn with_role_provider(mut up: Upstream, model: &str, role_endpoint: &agenteval_core::config::Endpoint) -> Upstream {
    let Ok(spec) = agenteval_llm::ModelSpec::parse(model) else { return up };
    if let Some(p) = role_endpoint.price {
        up.prices.entry(spec.name.clone()).or_insert(p);
    }
    if serves_wire(&up, wire_of(spec.provider)) {
        return up;
    }
    let mut endpoint = role_endpoint.clone();
    endpoint.price = None;
    if endpoint.secrets.is_empty() && spec.provider.needs_key() {
        let var = spec.provider.key_var().to_string();
        endpoint.secrets.insert(var.clone(), var);
    }
    endpoint.base_url = endpoint.base_url.or_else(|| spec.provider.default_base_url().map(str::to_string));
    match spec.provider {
        agenteval_llm::Provider::Anthropic => up.anthropic = Some(endpoint),
        _ => up.openai = Some(endpoint),
    }
    up
}

/// The gateway endpoint the `llm` agent's calls go to (`openai`, `anthropic`, `azure`,
/// `bedrock`), which its key is for.
pub fn llm_agent_endpoint(config: &RunConfig) -> Option<&'static str> {
    let AgentConfig::Llm(agent) = &config.agent else { return None };
    Some(match (&agent.azure, &agent.bedrock) {
        (Some(_), _) => "azure",
        (None, Some(_)) => "bedrock",
        (None, None) => match agenteval_llm::ModelSpec::parse(&agent.model).ok()?.provider {
            agenteval_llm::Provider::Anthropic => "anthropic",
            _ => "openai",
        },
    })
}

/// The simulated user's key for the `llm` agent's gateway, when the user's provider is not the
/// agent's: `(endpoint, secret name, required)`.
pub fn user_secret(config: &RunConfig) -> Option<(&'static str, String, bool)> {
    let user = config.roles.user.as_ref()?;
    let (wire, name, required) = role_key(&user.model, &user.endpoint)?;
    (llm_agent_wire(config)? != wire).then_some((wire, name, required))
}

/// The judge's key, when its provider is not one the agent's or the simulated user's calls go
/// to: `(endpoint, secret name, required)`.
pub fn judge_secret(config: &RunConfig) -> Option<(&'static str, String, bool)> {
    let judge = config.roles.judge.as_ref()?;
    let (wire, name, required) = role_key(&judge.model, &judge.endpoint)?;
    let served = match &config.agent {
        AgentConfig::Llm(_) => llm_agent_wire(config) == Some(wire),
        other => other.upstream().is_some_and(|up| serves_wire(up, wire)),
    };
    let by_user = user_secret(config).is_some_and(|(w, _, _)| w == wire);
    (!served && !by_user).then_some((wire, name, required))
}

/// A role's model's wire (`openai`, `anthropic`) and its key there: the secret its endpoint
/// names for the provider's variable (else the variable's own name), and whether the provider
/// needs one.
fn role_key(model: &str, endpoint: &agenteval_core::config::Endpoint) -> Option<(&'static str, String, bool)> {
    let spec = agenteval_llm::ModelSpec::parse(model).ok()?;
    let var = spec.provider.key_var();
    let name = endpoint.secrets.get(var).cloned().unwrap_or_else(|| var.to_string());
    Some((wire_of(spec.provider), name, spec.provider.needs_key()))
}

/// The gateway wire a provider's calls go on.
fn wire_of(provider: agenteval_llm::Provider) -> &'static str {
    match provider {
        agenteval_llm::Provider::Anthropic => "anthropic",
        _ => "openai",
    }
}

/// The wire the `llm` agent's calls go on (Azure serves OpenAI's, Bedrock Anthropic's).
fn llm_agent_wire(config: &RunConfig) -> Option<&'static str> {
    llm_agent_endpoint(config).map(|e| match e {
        "azure" => "openai",
        "bedrock" => "anthropic",
        w => w,
    })
}

/// The models a task's calls may name: the agent's (as the provider knows it) and the upstream's
/// `models`. Empty (any) only when the config names neither.
pub fn door_models(config: &RunConfig) -> Vec<String> {
    let mut out = Vec::new();
    match &config.agent {
        AgentConfig::Llm(c) => out.extend(agenteval_llm::ModelSpec::parse(&c.model).ok().map(|s| s.name)),
        AgentConfig::Command { model, .. } | AgentConfig::Installed { model, .. } => out.extend(model.clone()),
        _ => {}
    }
    if let Some(up) = upstream_of(config) {
        out.extend(up.models.iter().cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(agent: &str, roles: &str) -> RunConfig {
        let yaml = format!("name: t\nbenchmark: {{kind: toy, size: 1}}\nagent: {agent}\nroles:\n{roles}");
        agenteval_core::config::load_config_str(&yaml, "c.yaml", std::path::Path::new("."), &[]).unwrap().config
    }

    #[test]
    fn a_judge_needs_its_own_key_only_where_no_other_actor_goes_on_its_wire() {
        let judge = "  judge: {model: 'anthropic:j', secrets: {ANTHROPIC_API_KEY: judge-key}}\n";
        let alone = config("{kind: oracle}", judge);
        assert_eq!(judge_secret(&alone), Some(("anthropic", "judge-key".to_string(), true)));
        assert!(required_secrets(&alone, false).contains(&("judge-key".into(), "roles.judge".into())));
        assert!(required_secrets(&alone, true).is_empty(), "a strict replay needs no key");
        // On the agent's wire the judge's calls go where the agent's go.
        assert_eq!(judge_secret(&config("{kind: llm, model: 'anthropic:a'}", judge)), None);
        // On the simulated user's, where the user's go; the user's own key is its.
        let user = "  user: {model: 'anthropic:u', secrets: {ANTHROPIC_API_KEY: user-key}}\n";
        let both = config("{kind: llm, model: 'openai:a'}", &format!("{user}{judge}"));
        assert_eq!(user_secret(&both), Some(("anthropic", "user-key".to_string(), true)));
        assert_eq!(judge_secret(&both), None);
        assert_eq!(judge_secret(&config("{kind: llm, model: 'openai:a'}", judge)).map(|k| k.0), Some("anthropic"));
    }
}
