//! The recorded act (`agenteval regrade`): a task's recorded outcome (its answer, trace and
//! patch, from the run being regraded) stands in for running the agent, so that only the
//! grading runs again.

use agenteval_core::layout;
use agenteval_core::model::{AgentResult, EventKind, TaskSpec, TraceEvent};
use agenteval_core::{Error, ErrorKind, Result, taskpack};

use agenteval_core::traits::TaskEnvironment;

use crate::worker::attempt::Attempt;
use crate::worker::ctx::Ctx;
use crate::worker::sink::TraceSink;

/// The task's outcome as the regraded run recorded it: its agent result, and its trace
/// written again into this run (without the old scores: they are what is being redone). In an
/// environment, the recorded patch is applied first, so that a verifier sees the state the
/// agent left.
pub(super) async fn recorded(
    ctx: &Ctx,
    source: &super::Recorded,
    task: &TaskSpec,
    env: &TaskEnvironment,
    at: &mut Attempt,
) -> Result<(AgentResult, TraceSink)> {
    let get = |file: &'static str| async move {
        taskpack::read_task_file(source.store.as_ref(), &source.run, &task.id, file).await
    };
    // Both read with caps: the reports' for the result, the run's trace limit for the trace.
    let result = agenteval_judge::samples::result(source.store.as_ref(), &source.run, task.id.as_str())
        .await?
        .ok_or_else(|| Error::not_found(format!("run {} has no readable result for task {}", source.run, task.id)))?;
    let mut sink = TraceSink::for_recorded(ctx, task).await?;
    let cap = ctx.config.agent.limits().trace_bytes();
    let trace = match taskpack::read_task_file_capped(
        source.store.as_ref(),
        &source.run,
        &task.id,
        layout::TASK_TRACE,
        cap + 1,
    )
    .await
    {
        Ok(bytes) if bytes.len() as u64 > cap => {
            return Err(Error::corrupt(format!("run {}'s trace of task {} is over {cap} bytes", source.run, task.id)));
        }
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    for line in trace.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
        let ev: TraceEvent = serde_json::from_slice(line)
            .map_err(|e| Error::corrupt(format!("run {}'s trace of task {}: {e}", source.run, task.id)))?;
        if ev.kind != EventKind::EvaluatorScore {
            sink.write(ev.kind, ev.payload, ev.cost_usd, ev.input_tokens, ev.output_tokens).await;
        }
    }
    if let Some(s) = &env.session {
        match get("artifacts/patch.diff").await {
            Ok(patch) if !patch.is_empty() => {
                apply_patch(s, &patch).await?;
                at.say(format!("applied run {}'s patch ({} bytes) to the environment", source.run, patch.len()));
            }
            Ok(_) => {}
            // Without the patch the environment would start as new, and its tests would grade
            // nothing the agent did: the task cannot be regraded (an infrastructure failure,
            // which says nothing of the agent).
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::io(
                    format!("run {} kept no patch of task {}", source.run, task.id),
                    std::io::Error::other(
                        "it was left out (over environment.max_artifact_bytes) or could not be made (its worker.log says which): its final state cannot be re-created",
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    at.say(format!("regrade: the answer and trace of run {} (no agent ran)", source.run));
    Ok((result.agent, sink))
}

/// Applies a recorded patch to the environment's working folder (as root, with git).
async fn apply_patch(s: &agenteval_core::traits::EnvSession, patch: &[u8]) -> Result<()> {
    use agenteval_core::environment::ExecRequest;
    let dir = tempfile::tempdir().map_err(|e| Error::io("a folder for the patch", e))?;
    let file = dir.path().join("regrade.patch");
    std::fs::write(&file, patch).map_err(|e| Error::io("writing the patch", e))?;
    let root = s.env.worker_root(&s.handle);
    let into = format!("{}/tmp/regrade.patch", root.trim_end_matches('/'));
    s.env.copy_in(&s.handle, &file, &into).await?;
    let workdir = crate::environments::quote(&s.handle.workdir);
    // Strictly (no fuzz, no rejects): a patch that does not apply cleanly to the starting state
    // is not the run's; and with no configuration but the task's own repository's.
    let git = crate::environments::snapshot::hardened_shell_git();
    let cmd = format!("cd {workdir} && {git} apply --binary --whitespace=nowarn {}", crate::environments::quote(&into));
    let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, std::time::Duration::from_secs(120)) }
        .as_grader();
    let out = s.env.exec(&s.handle, &req).await?;
    if !out.ok() {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("the recorded patch does not apply to the task's environment: {}", out.stderr.trim()),
        ));
    }
    Ok(())
}
