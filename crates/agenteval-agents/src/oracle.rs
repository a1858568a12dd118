//! The `oracle` agent: answers each task's expected answer (HumanEval's canonical solution), or,
//! for a task that acts in an environment, runs its reference solution there (a Harbor task's
//! `solution/solve.sh`, a case's `solution` folder: copied to `/solution`, or a workspace's
//! `solution` beside its working folder, for it alone), at no cost. It tests the pipeline,
//! the environment and the grader, not a model.

use std::time::Duration;

use agenteval_core::environment::ExecRequest;
use agenteval_core::model::{EventKind, TerminatedBy};
use agenteval_core::traits::{AgentContext, AgentEvent, AgentNeeds, AgentOutcome, AgentRunner, EnvSession, EventSink};
use async_trait::async_trait;
use serde_json::json;

#[derive(Debug, Clone, Default)]
pub struct OracleAgent;

fn failed(why: String) -> AgentOutcome {
    AgentOutcome::stopped(TerminatedBy::AgentError, why)
}

async fn emit_all(sink: &mut dyn EventSink, events: Vec<AgentEvent>) -> Option<AgentOutcome> {
    for ev in events {
        if let Err(stop) = sink.emit(ev).await {
            return Some(AgentOutcome::stopped(stop.terminated_by, stop.reason));
        }
    }
    None
}

/// Runs `solution/solve.sh` in the task's environment, its output in the trace as a tool call.
async fn solve(ctx: &AgentContext<'_>, session: &EnvSession, sink: &mut dyn EventSink) -> AgentOutcome {
    let Some(dir) = ctx.task.solution.as_ref().filter(|d| d.join("solve.sh").is_file()) else {
        return failed(format!("task {} has no solution/solve.sh", ctx.task.id));
    };
    let (_, _, to) = agenteval_core::environment::verifier_paths(&session.env.worker_root(&session.handle));
    if let Err(e) = session.env.copy_in(&session.handle, dir, &to).await {
        return failed(format!("could not copy the solution in: {e}"));
    }
    let command = format!("bash '{to}/solve.sh'");
    let call = AgentEvent::new(EventKind::AgentToolCall, json!({"tool": "bash", "args": {"command": command}}));
    if let Some(stop) = emit_all(sink, vec![call]).await {
        return stop;
    }
    let secs = ctx.limits.wall_seconds();
    let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(&command, Duration::from_secs_f64(secs)) };
    let out = match session.env.exec(&session.handle, &req).await {
        Ok(o) => o,
        Err(e) => return AgentOutcome::stopped(TerminatedBy::InfraFailure, e.to_string()),
    };
    let result = AgentEvent::new(
        EventKind::AgentToolResult,
        json!({"tool": "bash", "exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr, "timed_out": out.timed_out}),
    );
    let summary = format!("solution/solve.sh exited {}", out.exit_code.map_or("-".into(), |c| c.to_string()));
    let done = AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": summary}));
    if let Some(stop) = emit_all(sink, vec![result, done]).await {
        return stop;
    }
    // Whether the solution worked is the tests' to say, not the agent's.
    AgentOutcome::answer(json!(summary))
}

#[async_trait]
impl AgentRunner for OracleAgent {
    fn name(&self) -> &str {
        "oracle"
    }

    fn needs(&self) -> AgentNeeds {
        AgentNeeds { sees_solution: true, ..AgentNeeds::default() }
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        if let Some(session) = &ctx.env.session {
            return solve(ctx, session, sink).await;
        }
        let Some(answer) = ctx.task.expected.clone() else {
            return failed(format!("task {} has no expected answer", ctx.task.id));
        };
        let events = vec![
            AgentEvent::new(EventKind::AgentFinalAnswer, json!({"answer": answer})),
            AgentEvent::new(EventKind::AgentTerminal, json!({"final_answer": answer})),
        ];
        if let Some(stop) = emit_all(sink, events).await {
            return stop;
        }
        AgentOutcome::answer(answer)
    }
}
