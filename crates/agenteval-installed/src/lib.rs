//! The `installed` agent: a CLI agent (a shipped preset such as Codex or mini-swe-agent, or a
//! team's own) installed into its task's image as an agent layer (`layer.rs`, before the task
//! starts: never in the agent's time) and run there. The instruction is a file in the
//! environment (`$AGENTEVAL_INSTRUCTION`); the agent acts on the environment directly; a
//! preset's own record of its run becomes the trace's steps (`trajectory.rs`). A preset whose
//! CLI goes on with a session (`Preset::resume`) converses with a simulated user: one run of
//! its CLI a turn, each user turn the next prompt of the same session.

pub mod converse;
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
/// Where a conversation's next user turn goes in the environment (`$AGENTEVAL_USER_TURN`).
const USER_TURN: &str = "/logs/agent/user-turn.md";
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
        // The task's MCP servers, in the preset's own configuration's shape.
        let servers = ctx.task.environment.as_ref().map(|e| e.mcp_servers.as_slice()).unwrap_or_default();
        if let Some(write) = self.preset.and_then(|p| p.mcp).filter(|_| !servers.is_empty()) {
            env.insert("AGENTEVAL_MCP_CONFIG".into(), write(servers));
        }
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
            takes_mcp_servers: self.preset.is_some_and(|p| p.mcp.is_some()),
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
        let mut text = match &ctx.task.input {
            serde_json::Value::String(t) => t.clone(),
            v => v.to_string(),
        };
        // A conversation opens before the agent starts: its first turn holds the user's first words.
        let mut talk = match ctx.user {
            Some(user) => match crate::converse::open(user, sink).await {
                Ok(t) => Some(t),
                Err(outcome) => return outcome,
            },
            None => None,
        };
        if let Some(t) = &talk {
            text = t.brief(&text);
        }
        if let Err(outcome) = put_file(s, &text, INSTRUCTION).await {
            return outcome;
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
        let mut turn = Turn { command: &self.command, env, record_from: 0, usage: None };
        loop {
            let answer = match self.take_turn(s, &mut turn, left(), wall, sink).await {
                Ok(a) => a,
                Err(outcome) => return outcome,
            };
            let Some(t) = talk.as_mut() else { return self.finish(answer, turn.usage, sink).await };
            let said = answer.as_str().map_or_else(|| answer.to_string(), str::to_string);
            if let Err(stop) = sink.emit(AgentEvent::new(EventKind::AgentMessage, json!({"text": said}))).await {
                return stopped(stop.terminated_by, stop.reason);
            }
            if let Err((by, why)) = t.heard(&said, sink).await {
                return stopped(by, why);
            }
            if t.ended {
                return self.finish(answer, turn.usage, sink).await;
            }
            // The user's next words, and the preset's own way to go on with its session.
            if let Err(outcome) = put_file(s, t.last_user(), USER_TURN).await {
                return outcome;
            }
            let Some(resume) = self.preset.and_then(|p| p.resume) else {
                return stopped(TerminatedBy::AgentError, "the agent cannot take another turn".into());
            };
            turn.command = resume;
            turn.env.insert("AGENTEVAL_USER_TURN".into(), USER_TURN.into());
        }
    }
}

/// One run of the agent's command: what it needs, and what its record held before it.
struct Turn<'a> {
    command: &'a str,
    env: BTreeMap<String, String>,
    /// Bytes of the preset's record earlier turns wrote: a turn reads what follows.
    record_from: usize,
    /// The agent's own usage figures, summed over its turns.
    usage: Option<serde_json::Value>,
}

async fn emit(sink: &mut dyn EventSink, ev: AgentEvent) -> Result<(), AgentOutcome> {
    sink.emit(ev).await.map_err(|stop| stopped(stop.terminated_by, stop.reason))
}

/// Writes `text` to `path` in the environment.
async fn put_file(s: &agenteval_core::traits::EnvSession, text: &str, path: &str) -> Result<(), AgentOutcome> {
    let dir =
        tempfile::tempdir().map_err(|e| stopped(TerminatedBy::InfraFailure, format!("a folder for {path}: {e}")))?;
    let name = path.rsplit('/').next().unwrap_or(path);
    let file = dir.path().join(name);
    std::fs::write(&file, text).map_err(|e| stopped(TerminatedBy::InfraFailure, format!("writing {path}: {e}")))?;
    s.env
        .copy_in(&s.handle, &file, path)
        .await
        .map_err(|e| stopped(TerminatedBy::InfraFailure, format!("copying {path} in: {e}")))
}

/// Adds `more`'s numbers to `into`'s, key by key (a conversation's turns each report their own).
fn add_usage(into: &mut Option<serde_json::Value>, more: serde_json::Value) {
    let Some(sum) = into.as_mut().and_then(serde_json::Value::as_object_mut) else {
        *into = Some(more);
        return;
    };
    for (k, v) in more.as_object().into_iter().flatten() {
        match (sum.get(k).and_then(serde_json::Value::as_f64), v.as_f64()) {
            (Some(a), Some(b)) if sum[k].is_u64() && v.is_u64() => sum[k] = json!(a as u64 + b as u64),
            (Some(a), Some(b)) => sum[k] = json!(a + b),
            _ => {
                sum.insert(k.clone(), v.clone());
            }
        }
    }
}

impl InstalledAgent {
    /// Runs the agent's command once (its first turn, or a conversation's next), its record's
    /// new steps emitted: what it answered.
    async fn take_turn(
        &self,
        s: &agenteval_core::traits::EnvSession,
        turn: &mut Turn<'_>,
        left: Duration,
        wall: f64,
        sink: &mut dyn EventSink,
    ) -> Result<serde_json::Value, AgentOutcome> {
        let req =
            ExecRequest { env: turn.env.clone(), max_output_bytes: 1 << 20, ..ExecRequest::new(turn.command, left) };
        let out = s
            .env
            .exec(&s.handle, &req)
            .await
            .map_err(|e| stopped(TerminatedBy::InfraFailure, format!("running the agent: {e}")))?;
        let (stdout, stderr) = (trajectory::strip_ansi(&out.stdout), trajectory::strip_ansi(&out.stderr));
        // A preset's own record, read also when it was stopped: the steps it took are the trace.
        let mut answer = json!(stdout.trim());
        let mut record = String::new();
        if let Some(p) = self.preset {
            let whole = read_record(s, p.record).await;
            record = whole.get(turn.record_from..).unwrap_or_default().to_string();
            turn.record_from = whole.len();
            let (events, said, usage) = trajectory::events(&(p.read)(&record, &stdout));
            for ev in events {
                emit(sink, ev).await?;
            }
            answer = json!(said.unwrap_or_default());
            if let Some(u) = usage {
                add_usage(&mut turn.usage, u);
            }
            let seen = json!({"agent": p.name, "exit_code": out.exit_code, "stderr": tail(&stderr), "timed_out": out.timed_out});
            emit(sink, AgentEvent::new(EventKind::AgentObservation, seen)).await?;
        } else {
            let result = json!({"tool": "installed", "exit_code": out.exit_code, "stdout": stdout, "stderr": stderr, "timed_out": out.timed_out});
            emit(sink, AgentEvent::new(EventKind::AgentToolResult, result)).await?;
        }
        if out.timed_out {
            return Err(stopped(TerminatedBy::LimitTime, format!("killed after {wall}s (max_wall_seconds)")));
        }
        if !out.ok() {
            let what = self.preset.map_or_else(|| "the agent".to_string(), |p| format!("the {} agent", p.name));
            return Err(stopped(
                TerminatedBy::AgentError,
                format!("{what} {}: {}", exited(out.exit_code), last_said(&stderr, &stdout, &record)),
            ));
        }
        Ok(answer)
    }

    /// The agent's last answer as its final one.
    async fn finish(
        &self,
        answer: serde_json::Value,
        usage: Option<serde_json::Value>,
        sink: &mut dyn EventSink,
    ) -> AgentOutcome {
        let mut terminal = json!({"final_answer": answer});
        if let Some(u) = usage {
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
    fn a_conversations_turns_add_their_usage_key_by_key() {
        let mut sum = None;
        add_usage(&mut sum, json!({"input_tokens": 10, "cost_usd": 0.5}));
        add_usage(&mut sum, json!({"input_tokens": 5, "cost_usd": 0.25, "model": "m"}));
        assert_eq!(sum, Some(json!({"input_tokens": 15, "cost_usd": 0.75, "model": "m"})));
    }

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
