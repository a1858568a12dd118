//! The `installed` agent: a CLI agent (a shipped preset such as Codex or mini-swe-agent, or a
//! team's own) installed into its task's image as an agent layer (`layer.rs`, before the task
//! starts: never in the agent's time) and run there. The instruction is a file in the
//! environment (`$AGENTEVAL_INSTRUCTION`); the agent acts on the environment directly; a
//! preset's own record of its run becomes the trace's steps (`trajectory.rs`).

pub mod fetch;
pub mod layer;
pub mod presets;
pub mod trajectory;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agenteval_core::environment::ExecRequest;
use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::{AgentContext, AgentEvent, AgentNeeds, AgentOutcome, AgentRunner, EventSink};
use async_trait::async_trait;
use serde_json::json;

use presets::Preset;

/// Where the instruction goes in the environment.
const INSTRUCTION: &str = "/logs/agent/instruction.md";
/// A preset's step limit unless `agent.max_steps` says.
pub const DEFAULT_MAX_STEPS: u32 = 50;
/// Most bytes of a preset's record read back for the trace (the artifact keeps it whole).
const MAX_RECORD_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone)]
pub struct InstalledAgent {
    pub preset: Option<&'static Preset>,
    pub command: String,
    pub env: BTreeMap<String, String>,
    pub model: Option<String>,
    pub max_steps: u32,
}

impl InstalledAgent {
    /// The agent an `installed` config names; `None` for another kind.
    pub fn from_config(config: &agenteval_core::config::AgentConfig) -> Option<InstalledAgent> {
        let agenteval_core::config::AgentConfig::Installed { preset, command, env, model, max_steps, .. } = config
        else {
            return None;
        };
        let preset = preset.as_deref().and_then(presets::find);
        Some(InstalledAgent {
            preset,
            command: command.clone().or_else(|| preset.map(|p| p.command.to_string())).unwrap_or_default(),
            env: env.clone(),
            model: model.clone(),
            max_steps: max_steps.unwrap_or(DEFAULT_MAX_STEPS),
        })
    }

    /// The variables the agent's command gets: its preset's, the config's, the task's, its
    /// secrets, and the gateway's door from where it runs.
    fn environment(
        &self,
        ctx: &AgentContext<'_>,
        s: &agenteval_core::traits::EnvSession,
    ) -> Result<BTreeMap<String, String>, String> {
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        if let Some(p) = self.preset {
            env.extend(p.env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        }
        env.extend(self.env.clone());
        env.insert("AGENTEVAL_MAX_STEPS".into(), self.max_steps.to_string());
        env.insert("AGENTEVAL_INSTRUCTION".into(), INSTRUCTION.into());
        env.insert("AGENTEVAL_TASK_ID".into(), ctx.task.id.to_string());
        env.insert("AGENTEVAL_MODEL".into(), self.model.clone().unwrap_or_default());
        for (var, secret) in ctx.secrets {
            env.insert(var.clone(), secret.expose().to_string());
        }
        if let Some(g) = ctx.gateway {
            let in_container = s.env.is_container();
            if in_container && g.container.is_none() {
                return Err("the task's container has no way to the model gateway".to_string());
            }
            env.extend(g.env(in_container));
        }
        Ok(env)
    }
}

fn stopped(t: TerminatedBy, why: String) -> AgentOutcome {
    AgentOutcome::stopped(t, why)
}

/// How a command ended, in words: `exited 100`, or `was killed by a signal`.
fn exited(code: Option<i64>) -> String {
    code.map_or_else(|| "was killed by a signal".to_string(), |c| format!("exited {c}"))
}

/// A preset's record, as far as it got (empty when it wrote none).
async fn read_record(s: &agenteval_core::traits::EnvSession, path: &str) -> String {
    let Ok(dir) = tempfile::tempdir() else { return String::new() };
    if s.env.copy_out(&s.handle, path, dir.path(), MAX_RECORD_BYTES).await.is_err() {
        return String::new();
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    std::fs::read(dir.path().join(name)).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

/// What an agent that ended early said last: its stderr's end, else its stdout's last line
/// (an agent may say "Not logged in" there), else its record's, else that it said nothing.
fn last_said(stderr: &str, stdout: &str, record: &str) -> String {
    if !stderr.trim().is_empty() {
        return tail(stderr);
    }
    let last_line = |s: &str| s.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(tail);
    last_line(stdout)
        .map(|l| format!("it printed `{l}`"))
        .or_else(|| last_line(record).map(|l| format!("its record ends `{l}`")))
        .unwrap_or_else(|| "it printed nothing (its record, if any, is in the task's artifacts)".into())
}

fn tail(s: &str) -> String {
    let chars: Vec<char> = s.trim_end().chars().collect();
    chars[chars.len().saturating_sub(500)..].iter().collect()
}

#[async_trait]
impl AgentRunner for InstalledAgent {
    fn name(&self) -> &str {
        "installed"
    }

    fn needs(&self) -> AgentNeeds {
        AgentNeeds {
            record: self.preset.as_ref().map(|p| p.record.to_string()),
            usage_unknown_unless_metered: true,
            ..AgentNeeds::default()
        }
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        let Some(s) = &ctx.env.session else {
            return stopped(
                TerminatedBy::AgentError,
                format!("task {} has no environment to install the agent in", ctx.task.id),
            );
        };
        let started = Instant::now();
        let wall = ctx.limits.wall_seconds();
        let left = || Duration::from_secs_f64((wall - started.elapsed().as_secs_f64()).max(0.001));
        let infra = |what: &str, e: agenteval_core::Error| stopped(TerminatedBy::InfraFailure, format!("{what}: {e}"));
        let text = match &ctx.task.input {
            serde_json::Value::String(t) => t.clone(),
            v => v.to_string(),
        };
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => return stopped(TerminatedBy::InfraFailure, format!("a folder for the instruction: {e}")),
        };
        let file = dir.path().join("instruction.md");
        if let Err(e) = std::fs::write(&file, &text) {
            return stopped(TerminatedBy::InfraFailure, format!("writing the instruction: {e}"));
        }
        if let Err(e) = s.env.copy_in(&s.handle, &file, INSTRUCTION).await {
            return infra("copying the instruction in", e);
        }
        // The instruction is the environment's, not the agent's doing.
        s.env.mark_baseline(&s.handle).await;
        let env = match self.environment(ctx, s) {
            Ok(env) => env,
            Err(why) => return stopped(TerminatedBy::InfraFailure, why),
        };
        if self.preset.is_none() {
            let call = AgentEvent::new(
                EventKind::AgentToolCall,
                json!({"tool": "installed", "args": {"command": self.command}}),
            );
            if let Err(stop) = sink.emit(call).await {
                return stopped(stop.terminated_by, stop.reason);
            }
        }
        let req = ExecRequest { env, max_output_bytes: 1 << 20, ..ExecRequest::new(&self.command, left()) };
        let out = match s.env.exec(&s.handle, &req).await {
            Ok(o) => o,
            Err(e) => return infra("running the agent", e),
        };
        let (stdout, stderr) = (trajectory::strip_ansi(&out.stdout), trajectory::strip_ansi(&out.stderr));
        // A preset's own record, read also when it was stopped: the steps it took are the trace.
        let mut answer = json!(stdout.trim());
        let mut reported = None;
        let mut record = String::new();
        if let Some(p) = self.preset {
            record = read_record(s, p.record).await;
            let (events, said, usage) = trajectory::events(&(p.read)(&record, &stdout));
            for ev in events {
                if let Err(stop) = sink.emit(ev).await {
                    return stopped(stop.terminated_by, stop.reason);
                }
            }
            answer = json!(said.unwrap_or_default());
            reported = usage;
            let seen = json!({"agent": p.name, "exit_code": out.exit_code, "stderr": tail(&stderr), "timed_out": out.timed_out});
            if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentObservation, seen)).await {
                return stopped(stop.terminated_by, stop.reason);
            }
        } else {
            let result = json!({"tool": "installed", "exit_code": out.exit_code, "stdout": stdout, "stderr": stderr, "timed_out": out.timed_out});
            if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentToolResult, result)).await {
                return stopped(stop.terminated_by, stop.reason);
            }
        }
        if out.timed_out {
            return stopped(TerminatedBy::LimitTime, format!("killed after {wall}s (max_wall_seconds)"));
        }
        if !out.ok() {
            let what = self.preset.map_or_else(|| "the agent".to_string(), |p| format!("the {} agent", p.name));
            return stopped(
                TerminatedBy::AgentError,
                format!("{what} {}: {}", exited(out.exit_code), last_said(&stderr, &stdout, &record)),
            );
        }
        let mut terminal = json!({"final_answer": answer});
        if let Some(u) = reported {
            // The agent's own figures, beside the gateway's measured ones (never counted).
            terminal["agent_reported_usage"] = u;
        }
        if self.preset.is_some()
            && let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentFinalAnswer, json!({"answer": answer}))).await
        {
            return stopped(stop.terminated_by, stop.reason);
        }
        if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentTerminal, terminal)).await {
            return stopped(stop.terminated_by, stop.reason);
        }
        AgentOutcome::answer(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_that_ended_early_is_quoted_from_wherever_it_spoke() {
        assert_eq!(last_said("fatal: no model\n", "x", ""), "fatal: no model");
        assert_eq!(
            last_said("", "starting\nNot logged in · Please run /login\n\n", ""),
            "it printed `Not logged in · Please run /login`"
        );
        assert_eq!(
            last_said(" \n", "", "{\"step\": 1}\n{\"error\": \"401\"}\n"),
            "its record ends `{\"error\": \"401\"}`"
        );
        assert!(last_said("", "", "").starts_with("it printed nothing"));
    }
}
