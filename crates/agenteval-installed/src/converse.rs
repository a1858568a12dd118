//! A `command` agent's conversation with the task's simulated user (`roles.user`), over the
//! agent's stdin (docs/agent-protocol.md, "Conversations"): the worker says the benchmark's
//! opening line for the agent and puts the user's first turn in the request; each
//! `agent.message` the agent then writes is answered by the user's next turn, one JSON line on
//! its stdin; when the conversation ends (the user's stop word, the agent's `###STOP###`) the
//! last turn says so and stdin is closed. The user's turns are the worker's events: an agent
//! cannot write them.

use std::time::Duration;

use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::{AgentEvent, AgentOutcome, EventSink, SimulatedUser};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The agent's word that ends a conversation, as τ²-bench's agents say it.
pub const AGENT_STOP: &str = "###STOP###";

/// How long a turn may wait for the agent to take it from its stdin.
const WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// A conversation in progress.
pub struct Talk<'a> {
    user: &'a dyn SimulatedUser,
    opening: String,
    first: String,
    /// The user's last turn (the first, until the agent is answered).
    last: String,
    /// The conversation is over: no turn is written any more.
    pub ended: bool,
    /// Where the user's turns go; closed when the conversation ends.
    pub stdin: Option<tokio::process::ChildStdin>,
}

async fn emit(sink: &mut dyn EventSink, kind: EventKind, payload: Value) -> Result<(), (TerminatedBy, String)> {
    sink.emit(AgentEvent::new(kind, payload)).await.map_err(|s| (s.terminated_by, s.reason))
}

/// Opens the conversation before the agent starts: the opening line said for the agent, the
/// user's first answer.
pub async fn open<'a>(user: &'a dyn SimulatedUser, sink: &mut dyn EventSink) -> Result<Talk<'a>, AgentOutcome> {
    if !user.history().is_empty() {
        // Its line protocol and the CLIs' sessions start empty: the task would be another one.
        return Err(AgentOutcome::stopped(
            TerminatedBy::InfraFailure,
            "the task starts from a recorded conversation, which only the `llm` agent can be told (docs/roles.md)",
        ));
    }
    let opening = user.opening().to_string();
    let stopped = |(t, why): (TerminatedBy, String)| AgentOutcome::stopped(t, why);
    emit(sink, EventKind::AgentMessage, json!({"text": opening, "opening": true})).await.map_err(stopped)?;
    let turn = user.reply(&opening).await.map_err(|s| AgentOutcome::stopped(s.terminated_by, s.reason))?;
    emit(sink, EventKind::UserMessage, turn.event_payload()).await.map_err(stopped)?;
    Ok(Talk { user, opening, last: turn.text.clone(), first: turn.text, ended: turn.ends, stdin: None })
}

impl Talk<'_> {
    /// The request's `conversation`.
    pub fn request(&self) -> Value {
        json!({"opening": self.opening, "user": self.first, "ended": self.ended, "stop_word": AGENT_STOP})
    }

    /// An agent's instruction for a CLI that takes one prompt a turn (an installed agent): the
    /// task's `text`, the conversation so far, and how it goes on.
    pub fn brief(&self, text: &str) -> String {
        format!(
            "{text}\n\n## The conversation\n\nYou are talking with a user. You opened with: {opening}\n\nThe user says: {first}\n\n\
             Answer the user: your last message of each turn is what they read, and their next words come as your next \
             prompt. When the conversation is over, end your message with {AGENT_STOP}.\n",
            opening = self.opening,
            first = self.first,
        )
    }

    /// The user's last turn.
    pub fn last_user(&self) -> &str {
        &self.last
    }

    /// The agent said `said` to the user: the user's answer written to its stdin, or the end.
    pub async fn heard(&mut self, said: &str, sink: &mut dyn EventSink) -> Result<(), (TerminatedBy, String)> {
        if self.ended {
            return Ok(());
        }
        if said.contains(AGENT_STOP) {
            self.end();
            return Ok(());
        }
        let turn = self.user.reply(said).await.map_err(|s| (s.terminated_by, s.reason))?;
        emit(sink, EventKind::UserMessage, turn.event_payload()).await?;
        self.last.clone_from(&turn.text);
        let mut line = json!({"kind": "user.message", "payload": {"text": turn.text, "ends": turn.ends}}).to_string();
        line.push('\n');
        if let Some(stdin) = self.stdin.as_mut() {
            match tokio::time::timeout(WRITE_DEADLINE, stdin.write_all(line.as_bytes())).await {
                Ok(Ok(())) => {}
                // It closed its stdin: it takes no more turns, and ends as it will.
                Ok(Err(_)) => self.stdin = None,
                Err(_) => {
                    return Err((
                        TerminatedBy::AgentError,
                        format!("the agent did not read the user's turn from its stdin in {WRITE_DEADLINE:?}"),
                    ));
                }
            }
        }
        if turn.ends {
            self.end();
        }
        Ok(())
    }

    fn end(&mut self) {
        self.ended = true;
        // End of input: no more turns; the agent answers with `agent.terminal`.
        self.stdin = None;
    }
}
