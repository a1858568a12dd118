//! The `installed` agent: a CLI agent (mini-swe-agent, a team's own) installed into each task's
//! environment by a setup script and run there. The instruction is a file in the environment
//! (`$AGENTEVAL_INSTRUCTION`); the agent acts on the environment directly; its output is the
//! trace's one tool call and its stdout the answer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agenteval_core::environment::ExecRequest;
use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::{AgentContext, AgentEvent, AgentOutcome, AgentRunner, EventSink};
use async_trait::async_trait;
use serde_json::json;

/// Where the setup script and the instruction go in the environment.
const SETUP: &str = "/installed-agent/setup.sh";
const INSTRUCTION: &str = "/logs/agent/instruction.md";

#[derive(Debug, Clone)]
pub struct InstalledAgent {
    pub setup: Option<PathBuf>,
    pub command: String,
    pub env: BTreeMap<String, String>,
    pub model: Option<String>,
}

fn stopped(t: TerminatedBy, why: String) -> AgentOutcome {
    AgentOutcome { final_answer: None, error: Some((t, why)) }
}

/// How a command ended, in words: `exited 100`, or `was killed by a signal`.
fn exited(code: Option<i64>) -> String {
    code.map_or_else(|| "was killed by a signal".to_string(), |c| format!("exited {c}"))
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
        if let Some(setup) = &self.setup {
            if let Err(e) = s.env.copy_in(&s.handle, setup, SETUP).await {
                return infra("copying the setup script in", e);
            }
            let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(format!("bash {SETUP}"), left()) };
            match s.env.exec(&s.handle, &req).await {
                Ok(o) if o.ok() => {}
                Ok(o) if o.timed_out => {
                    return stopped(TerminatedBy::LimitTime, "the setup script ran out of time".into());
                }
                Ok(o) => {
                    return stopped(
                        TerminatedBy::AgentError,
                        format!(
                            "the setup script (agent.setup) {}: {}",
                            exited(o.exit_code),
                            tail(&format!("{}{}", o.stdout, o.stderr))
                        ),
                    );
                }
                Err(e) => return infra("running the setup script", e),
            }
        }
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
        // The setup's files and the instruction are the environment's, not the agent's doing.
        s.env.mark_baseline(&s.handle).await;
        let mut env = self.env.clone();
        env.insert("AGENTEVAL_INSTRUCTION".into(), INSTRUCTION.into());
        env.insert("AGENTEVAL_TASK_ID".into(), ctx.task.id.to_string());
        if let Some(m) = &self.model {
            env.insert("AGENTEVAL_MODEL".into(), m.clone());
        }
        for (var, secret) in ctx.secrets {
            env.insert(var.clone(), secret.expose().to_string());
        }
        if let Some(g) = ctx.gateway {
            let in_container = s.env.kind() == "docker";
            if in_container && g.container.is_none() {
                return stopped(
                    TerminatedBy::InfraFailure,
                    "the task's container has no way to the model gateway".to_string(),
                );
            }
            env.extend(g.env(in_container));
        }
        let call =
            AgentEvent::new(EventKind::AgentToolCall, json!({"tool": "installed", "args": {"command": self.command}}));
        if let Err(stop) = sink.emit(call).await {
            return stopped(stop.terminated_by, stop.reason);
        }
        let req = ExecRequest { env, max_output_bytes: 1 << 20, ..ExecRequest::new(&self.command, left()) };
        let out = match s.env.exec(&s.handle, &req).await {
            Ok(o) => o,
            Err(e) => return infra("running the agent", e),
        };
        let result = json!({"tool": "installed", "exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr, "timed_out": out.timed_out});
        if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentToolResult, result)).await {
            return stopped(stop.terminated_by, stop.reason);
        }
        if out.timed_out {
            return stopped(TerminatedBy::LimitTime, format!("killed after {wall}s (max_wall_seconds)"));
        }
        if !out.ok() {
            return stopped(
                TerminatedBy::AgentError,
                format!("the agent {}: {}", exited(out.exit_code), tail(&out.stderr)),
            );
        }
        let answer = json!(out.stdout.trim());
        if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": answer}))).await {
            return stopped(stop.terminated_by, stop.reason);
        }
        AgentOutcome { final_answer: Some(answer), error: None }
    }
}
