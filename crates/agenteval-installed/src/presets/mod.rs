//! The shipped agents (`agent: {kind: installed, preset: NAME}`): for each, where its package
//! comes from and the pinned version, the command line that runs it headless against the
//! model gateway, and the reader that turns its own record into trace steps. One file a preset.

mod aider;
mod claude_code;
mod codex;
mod mini_swe_agent;
mod opencode;

use agenteval_core::environment::McpServer;

use super::trajectory::Step;

/// Where a preset's files come from. They are fetched on the worker (which reaches the
/// registries), never in the task's container (which may have no internet).
#[derive(Debug, Clone, Copy)]
pub enum Package {
    /// An npm package that ships a native binary per platform: the linux-x64 package is
    /// fetched (`npm pack`) and these files of it (`package/…` in the tarball) are laid out as
    /// `bin/NAME` under the agent's folder.
    NpmBinary { package: &'static str, platform: &'static str, files: &'static [(&'static str, &'static str)] },
    /// A PyPI package, installed for the image's own `python3` (`pip install --target`, wheels
    /// only) and run by a wrapper `bin/NAME` that imports it.
    Pip { package: &'static str, module: &'static str, call: &'static str, bin: &'static str },
}

/// A shipped agent.
#[derive(Debug)]
pub struct Preset {
    pub name: &'static str,
    /// The version used when the config names none.
    pub version: &'static str,
    /// The wire its calls speak: `chat`, `responses` or `messages`.
    pub wire: &'static str,
    pub package: Package,
    /// Run by `bash -c` in the task's working folder, as the agent: writes the agent's provider
    /// configuration (pointing at the gateway) and runs it headless. It reads
    /// `$AGENTEVAL_INSTRUCTION`, `$AGENTEVAL_MODEL`, `$AGENTEVAL_MAX_STEPS`, the gateway's
    /// `$OPENAI_BASE_URL` / `$ANTHROPIC_BASE_URL` and the door's token.
    pub command: &'static str,
    /// Run by `bash -c` as `command` is, for each later turn of a conversation with a simulated
    /// user: continues the agent's own session with the user's turn (the file
    /// `$AGENTEVAL_USER_TURN`) and appends to its record. `None`: the CLI cannot resume a
    /// session headless, and the preset does not converse.
    pub resume: Option<&'static str>,
    /// The task's MCP servers in the agent's own configuration (`$AGENTEVAL_MCP_CONFIG`, which
    /// `command` puts where the CLI reads it). `None`: the CLI takes no MCP servers.
    pub mcp: Option<fn(&[McpServer]) -> String>,
    /// Variables the agent gets besides the gateway's (telemetry, updates and prompts off).
    pub env: &'static [(&'static str, &'static str)],
    /// The agent's own record of its run, in the container; kept as an artifact.
    pub record: &'static str,
    /// Reads the record (and the agent's stdout) into steps.
    pub read: fn(record: &str, stdout: &str) -> Vec<Step>,
    /// Run once the layer is installed: the agent starts in this image (a binary built for
    /// another C library, a Python too old, fail here, at install, not in every task).
    pub check: &'static str,
}

/// Every preset, in the order `agents list` shows them.
pub const ALL: [&Preset; 5] =
    [&codex::PRESET, &claude_code::PRESET, &mini_swe_agent::PRESET, &aider::PRESET, &opencode::PRESET];

/// The preset called `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    ALL.iter().copied().find(|p| p.name == name)
}

/// Where the agent's files go in its layer, and the folder of its records in the container.
pub const AGENT_DIR: &str = "/opt/agenteval-agent";
pub const LOGS: &str = "/logs/agent";

/// The config's problems with its preset, as the loader reports them (`config validate`).
pub fn at_load(config: &agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    use agenteval_core::config::AgentConfig;
    let AgentConfig::Installed { preset: Some(name), version, command, setup, .. } = &config.agent else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    match find(name) {
        None => {
            let known: Vec<&str> = ALL.iter().map(|p| p.name).collect();
            let hint = agenteval_core::config::did_you_mean(name, known.iter().copied())
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            problems.push((
                "/agent/preset".into(),
                format!("no preset named `{name}`{hint}: the presets are {}", known.join(", ")),
            ));
        }
        Some(preset) => {
            if let Some(v) = version
                && !valid_version(v)
            {
                problems.push((
                    "/agent/version".into(),
                    format!("`{v}` is not a package version (letters, digits, `.`, `-`, `+`)"),
                ));
            }
            if let Some(p) = unreachable_model(preset, &config.agent) {
                problems.push(p);
            }
        }
    }
    if command.is_some() || setup.is_some() {
        problems.push((
            "/agent/preset".into(),
            "a preset brings its own `command` and install: leave `command` and `setup` out, or the preset".into(),
        ));
    }
    problems
}

/// A preset calls a model: with no `agent.upstream` and no key of its own it cannot start (it
/// would exit at once, "not logged in"), so the config is refused naming the field to add.
fn unreachable_model(preset: &Preset, agent: &agenteval_core::config::AgentConfig) -> Option<(String, String)> {
    if agent.upstream().is_some() || !agent.secrets().is_empty() {
        return None;
    }
    let provider = if preset.wire == "messages" { "anthropic" } else { "openai" };
    Some((
        "/agent".into(),
        format!(
            "the {} preset calls a model, and nothing says which: add `agent.upstream.{provider}` (its `base_url` and key; the gateway holds the key, meters and records the calls, docs/agents.md), or give the agent a key of its own with `agent.secrets`",
            preset.name
        ),
    ))
}

/// A version is passed to `npm` and `pip` as part of one argument: nothing else may ride in it.
fn valid_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
}

/// Two servers of each kind, as the presets' own tests write their configurations for them.
#[cfg(test)]
pub(super) fn sample_mcp_servers() -> [McpServer; 2] {
    let http = McpServer {
        name: "orders".into(),
        transport: "streamable-http".into(),
        url: Some("http://orders:8000/mcp".into()),
        command: None,
        args: vec![],
    };
    let stdio = McpServer {
        name: "fs".into(),
        transport: "stdio".into(),
        url: None,
        command: Some("mcp-fs".into()),
        args: vec!["/app".into()],
    };
    [http, stdio]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_has_a_distinct_name_a_version_and_a_record_under_the_logs() {
        let mut names: Vec<&str> = ALL.iter().map(|p| p.name).collect();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for p in ALL {
            assert!(valid_version(p.version), "{}", p.name);
            assert!(p.record.starts_with(LOGS), "{}", p.name);
            assert!(["chat", "responses", "messages"].contains(&p.wire), "{}", p.name);
        }
    }

    #[test]
    fn a_preset_with_no_way_to_its_model_is_refused_naming_the_field() {
        use agenteval_core::config::load_config_str;
        let dir = tempfile::tempdir().unwrap();
        let load = |extra: &str| {
            let text = format!(
                "name: p\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: installed\n  preset: claude-code\n{extra}"
            );
            load_config_str(&text, "p.yaml", dir.path(), &[]).unwrap().config
        };
        let (at, why) = at_load(&load("")).pop().expect("refused");
        assert_eq!(at, "/agent");
        assert!(why.contains("add `agent.upstream.anthropic`"), "{why}");
        assert!(at_load(&load("  upstream:\n    anthropic: {}\n")).is_empty());
        assert!(at_load(&load("  secrets: {ANTHROPIC_API_KEY: my-key}\n")).is_empty());
    }

    #[test]
    fn a_version_cannot_carry_another_argument() {
        assert!(valid_version("0.171.0") && valid_version("2.1.0-beta.1"));
        for bad in ["", "1.0 --index-url=x", "-1", "1;rm", "../x"] {
            assert!(!valid_version(bad), "{bad}");
        }
    }
}
