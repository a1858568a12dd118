//! Built-in agents: `mock` (scripted, deterministic), `command` (any external program),
//! `oracle` (the expected answers, or a task's reference solution), `nop` (nothing) and `llm`
//! (a model with tools, from `agenteval-llm`), `installed` (a CLI agent in the task's image) and
//! `predictions` (patches made elsewhere), `exploit` (tries to pass without doing the task, for
//! `agenteval audit`).

pub mod access;
mod command;
use agenteval_installed::converse;
mod env_tools;
pub use agenteval_installed as installed;
pub mod pack;
mod python_tool;

use std::sync::Arc;

use agenteval_core::config::{AgentConfig, Network, NetworkMode, RunConfig, Sandbox};
use agenteval_core::secret::Redactor;

use crate::isolation::{confine, sandbox};
use agenteval_core::traits::{AgentRunner, AgentTool};
use agenteval_core::{Error, Result};
use agenteval_llm::{Cassettes, LlmAgent};

pub use agenteval_agents::{MockAgent, NopAgent, OracleAgent, exploit, predictions, reference_probes};
pub use command::{CommandAgent, runnable};
pub use env_tools::env_tools;
pub use installed::InstalledAgent;
pub use python_tool::PythonTool;

/// What the agent completes and checks when a config loads (the loader's `ExtraChecks`), by
/// kind: every kind has its arm, so a new one is a compile error here until it says what it
/// needs.
pub fn at_load(config: &mut RunConfig) -> Vec<(String, String)> {
    match &config.agent {
        AgentConfig::Mock { .. }
        | AgentConfig::Command { .. }
        | AgentConfig::Llm(_)
        | AgentConfig::Oracle { .. }
        | AgentConfig::Nop { .. } => Vec::new(),
        // A preset that exists, at a version that is one.
        AgentConfig::Installed { .. } => installed::presets::at_load(config),
        // The predictions read into the config, each for an instance the dataset has.
        AgentConfig::Predictions { .. } => predictions::at_load(config),
        // A built-in strategy's script, or why there is none.
        AgentConfig::Exploit { .. } => exploit::at_load(config),
    }
}

/// Why this run cannot hold a task that converses with a simulated user (a case's `user`):
/// no user model, or an agent that cannot take turns. `None` when it can.
pub fn conversation_problem(config: &RunConfig) -> Option<String> {
    if config.roles.user.is_none() {
        return Some(
            "it converses with a simulated user: give the user's model in `roles.user.model` (docs/roles.md)".into(),
        );
    }
    match &config.agent {
        AgentConfig::Llm(_) => None,
        AgentConfig::Command { upstream: Some(_), .. } => None,
        AgentConfig::Command { .. } => Some(
            "a simulated user's calls go through the model gateway, which a `command` agent has with `agent.upstream` (docs/roles.md)"
                .into(),
        ),
        AgentConfig::Installed { preset: Some(name), command: None, .. } => match installed::presets::find(name) {
            Some(p) if p.resume.is_some() => None,
            _ => Some(format!(
                "the `{name}` preset cannot converse with a simulated user (its CLI cannot go on with a session headless): \
                 run one that can ({}), an `llm` agent, or a `command` agent that speaks the conversation lines of docs/agent-protocol.md",
                installed::presets::ALL.iter().filter(|p| p.resume.is_some()).map(|p| p.name).collect::<Vec<_>>().join(", ")
            )),
        },
        other => Some(format!(
            "the `{}` agent cannot converse with a simulated user: run an `llm` agent, or a `command` agent that speaks the conversation lines of docs/agent-protocol.md",
            other.kind()
        )),
    }
}

/// The agent a run configuration names, as runs are listed and shown: a preset with its version
/// (`codex 0.171.0`), else the kind (with a command agent's program), and the model after a
/// `·` (`codex 0.171.0 · gpt-5-codex`, `llm · openai:gpt-4o-mini`).
pub fn label(agent: &AgentConfig) -> String {
    let who = match agent {
        AgentConfig::Installed { preset: Some(name), version, .. } => {
            let pinned = installed::presets::find(name).map(|p| p.version);
            match version.as_deref().or(pinned) {
                Some(v) => format!("{name} {v}"),
                None => name.clone(),
            }
        }
        AgentConfig::Command { command, .. } => {
            let program = command.first().map(|p| p.rsplit('/').next().unwrap_or(p)).unwrap_or_default();
            let script = command.get(1).filter(|a| !a.starts_with('-')).map(|a| a.rsplit('/').next().unwrap_or(a));
            match script {
                Some(s) => format!("command {program} {s}"),
                None => format!("command {program}"),
            }
        }
        other => other.kind().to_string(),
    };
    match agent.model() {
        Some(m) if !m.is_empty() && m != who => format!("{who} · {m}"),
        _ => who,
    }
}

/// Builds the agent a run configuration names; `cassettes` and `redactor` serve the `llm` agent.
pub fn agent_from_config(
    run: &RunConfig,
    cassettes: Option<Cassettes>,
    redactor: &Redactor,
) -> Result<Arc<dyn AgentRunner>> {
    Ok(match &run.agent {
        AgentConfig::Oracle { .. } => Arc::new(OracleAgent),
        AgentConfig::Nop { .. } => Arc::new(NopAgent),
        AgentConfig::Exploit { strategy, script, .. } => {
            Arc::new(exploit::ExploitAgent { strategy: strategy.clone(), script: script.clone().unwrap_or_default() })
        }
        AgentConfig::Predictions { predictions, .. } => {
            Arc::new(predictions::PredictionsAgent { predictions: predictions.clone() })
        }
        AgentConfig::Installed { .. } => Arc::new(InstalledAgent::from_config(&run.agent).expect("an installed agent")),
        AgentConfig::Llm(cfg) => {
            let mut builtin: Vec<Arc<dyn AgentTool>> = Vec::new();
            if cfg.tools.iter().any(|t| t == "python") {
                let python = cfg.python.clone().unwrap_or_else(|| crate::python::DEFAULT_PYTHON.into());
                // The model's code sees what a command agent would not: none of the answers.
                let hide = view_of(run, None, &[], &[]).exclude;
                let limits = crate::python::PythonLimits { hide, ..crate::python::PythonLimits::default() };
                builtin.push(Arc::new(PythonTool { python, limits }));
            }
            Arc::new(
                LlmAgent::new(cfg.clone(), builtin, cassettes, redactor.clone())
                    .map_err(|e| Error::invalid(e.to_string()))?,
            )
        }
        AgentConfig::Mock { model, mock, .. } => Arc::new(MockAgent::new(mock.clone(), model.clone())),
        AgentConfig::Command { model, command, env, workdir, sandbox, inherit_env, packed, .. } => {
            let view = match sandbox {
                // Off on purpose; a root worker's agent still gets a user of its own.
                Sandbox::Mode(_) => confine::agent_user().map(|_| sandbox::View::unrestricted()),
                Sandbox::Paths(paths) => {
                    let mut view = view_of(run, workdir.as_deref(), &paths.read, &paths.write);
                    // A packed agent's folder is its own files, unpacked for it: it reads them.
                    if packed.is_some()
                        && let Some(w) = workdir
                    {
                        view.read.push(w.clone());
                    }
                    view.net = match &paths.network {
                        Network::Mode(NetworkMode::Https) => confine::Net::Tcp(confine::default_ports()),
                        Network::Mode(NetworkMode::None) => confine::Net::None,
                        Network::Mode(NetworkMode::All) => confine::Net::All,
                        Network::Ports(ports) => confine::Net::Tcp(ports.clone()),
                    };
                    Some(view)
                }
            };
            Arc::new(
                CommandAgent::new(command.clone(), env.clone(), workdir.clone(), model.clone(), view)
                    .inheriting(inherit_env.clone()),
            )
        }
    })
}

/// The agent's filesystem view before its task adds its program and scratch folder: the
/// system and the listed paths (default deny: not the config's folder), minus everything that
/// holds answers, results or keys (the bundle root, the index, the benchmark's cases, the
/// secrets file), however it is reached.
fn view_of(
    run: &RunConfig,
    workdir: Option<&std::path::Path>,
    read: &[std::path::PathBuf],
    write: &[std::path::PathBuf],
) -> sandbox::View {
    let base = workdir.map(std::path::Path::to_path_buf).unwrap_or_default();
    let real = |p: &std::path::Path| {
        let p = base.join(p);
        p.canonicalize().unwrap_or(p)
    };
    let exclude = sandbox::hidden_paths(run);
    let mut view = sandbox::View { exclude, ..sandbox::View::system() };
    view.read.extend(read.iter().map(|p| real(p)));
    view.write.extend(write.iter().map(|p| real(p)));
    view
}

/// What must hold before a run whose workers share this machine starts its agents: under a root
/// worker, every program that runs an agent's code (a `command` agent's program and the files
/// its command names, the Python that checks HumanEval answers or runs the `python` tool) must
/// be readable by the agents' uids, since nothing of an agent ever runs as root. A usage error
/// (exit 2) naming the file, what blocks it and the fix.
pub fn preflight(run: &RunConfig) -> Result<()> {
    if confine::agent_user().is_none() {
        return Ok(());
    }
    let mut problems = Vec::new();
    let mut check = |field: &str, path: std::path::PathBuf| {
        if let Some(blocking) = confine::unreadable_part(&path) {
            problems.push(format!("{field}: {}", confine::unreadable_message(&path, &blocking)));
        }
    };
    if let AgentConfig::Command { command, workdir, .. } = &run.agent
        && let Some((prog, args)) = command.split_first()
    {
        let local = |a: &str| workdir.as_ref().map(|w| w.join(a)).filter(|p| !a.starts_with('-') && p.exists());
        let program =
            if prog.contains('/') { local(prog).or_else(|| sandbox::which(prog)) } else { sandbox::which(prog) };
        if let Some(p) = program {
            check("agent.command", p);
        }
        for a in args {
            let named = if a.starts_with('/') { Some(std::path::PathBuf::from(a)) } else { local(a) };
            if let Some(p) = named.filter(|p| p.exists()) {
                check("agent.command", p);
            }
        }
    }
    let python = match (run.benchmark.answer_python(), &run.agent) {
        (Some((field, python)), _) => Some((field, python.unwrap_or(crate::python::DEFAULT_PYTHON).to_string())),
        (None, AgentConfig::Llm(cfg)) if cfg.tools.iter().any(|t| t == "python") => {
            Some(("agent.python", cfg.python.clone().unwrap_or_else(|| crate::python::DEFAULT_PYTHON.into())))
        }
        _ => None,
    };
    if let Some((field, python)) = python
        && let Some(p) = crate::python::resolved_program(&python)
    {
        check(field, p);
    }
    if problems.is_empty() { Ok(()) } else { Err(Error::invalid(problems.join("; "))) }
}

/// The config field behind an agent whose tasks failed alike with no fault recorded: its
/// kind's main field.
pub fn field_to_fix(config: &agenteval_core::config::RunConfig) -> &'static str {
    match &config.agent {
        AgentConfig::Command { .. } | AgentConfig::Installed { preset: None, .. } => "agent.command",
        // A preset's command line is agenteval's: what is the user's is the agent block.
        AgentConfig::Installed { preset: Some(_), .. } => "agent",
        AgentConfig::Llm(_) => "agent.model",
        AgentConfig::Mock { .. }
        | AgentConfig::Oracle { .. }
        | AgentConfig::Nop { .. }
        | AgentConfig::Predictions { .. } => "agent",
        AgentConfig::Exploit { .. } => "agent.strategy",
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;

    fn agent(yaml: &str) -> AgentConfig {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("name: l\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n{yaml}");
        agenteval_core::config::load_config_str(&text, "l.yaml", dir.path(), &[]).unwrap().config.agent
    }

    #[test]
    fn a_run_is_labelled_by_its_agent_and_model() {
        let codex = installed::presets::find("codex").unwrap().version;
        assert_eq!(
            label(&agent("  kind: installed\n  preset: codex\n  model: gpt-5\n  upstream: {openai: {}}\n")),
            format!("codex {codex} · gpt-5")
        );
        assert_eq!(
            label(&agent("  kind: installed\n  preset: claude-code\n  version: 2.0.1\n  upstream: {anthropic: {}}\n")),
            "claude-code 2.0.1"
        );
        assert_eq!(label(&agent("  kind: llm\n  model: openai:gpt-4o-mini\n")), "llm · openai:gpt-4o-mini");
        assert_eq!(
            label(&agent("  kind: command\n  command: [python3, /x/agent.py, -v]\n  model: m\n")),
            "command python3 agent.py · m"
        );
        assert_eq!(label(&agent("  kind: oracle\n")), "oracle");
        assert_eq!(label(&agent("  kind: mock\n")), "mock");
    }
}
