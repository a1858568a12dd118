//! The environments a worker holds: one made for a task (its healthcheck passed, its starting
//! state snapshotted for the patch), tracked while it is live, and torn down; a cancelled job
//! tears down all it still holds. The prepare and verify stages make them here.

use std::sync::Arc;

use agenteval_core::Result;
use agenteval_core::environment::EnvSpec;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::EnvSession;

use super::attempt::Attempt;
use super::ctx::Ctx;

/// Prepares the task's environment (an `Err` is an infrastructure failure of the task) and,
/// with `snapshot`, records its starting state for the patch.
pub(super) async fn prepare_session(
    ctx: &Ctx,
    task: &TaskSpec,
    spec: &EnvSpec,
    snapshot: bool,
    at: &mut Attempt,
) -> Result<EnvSession> {
    let Some(env) = &ctx.environment else { return Err(crate::environments::missing(&task.id)) };
    let started = std::time::Instant::now();
    // A fleet's sidecars are containers of the environment's task definition, which names each
    // tool secret for ECS to put in (`JobSpec::tool_secrets`): the worker gives them nothing.
    let spec = &match ctx.in_task_images {
        true => spec.clone(),
        false => with_tool_secrets(spec, &ctx.tool_secrets),
    };
    let handle = env.prepare(&ctx.run_id, task, ctx.job.attempt, spec).await?;
    let session = EnvSession { env: env.clone(), handle };
    ctx.live.lock().expect("not poisoned").push(session.clone());
    at.log.extend(session.handle.notes.iter().cloned());
    if let Some(hc) = &spec.healthcheck {
        let checked = crate::environments::healthy(&session, hc).await;
        if let Err(e) = checked {
            tear_down(ctx, &session, at).await;
            return Err(e);
        }
        at.say(format!("healthcheck `{}` passed", hc.command));
    }
    at.say(format!(
        "environment {} {} prepared in {:.2} s",
        env.kind(),
        session.handle.id,
        started.elapsed().as_secs_f64()
    ));
    if snapshot {
        match crate::environments::snapshot::Snapshot::take(&session, &ctx.run_id).await {
            Ok(snap) => {
                ctx.snapshots.lock().expect("not poisoned").insert(session.handle.id.clone(), Arc::new(snap));
            }
            Err(e) => at.say(format!("no snapshot of the starting state ({e}): no patch")),
        }
    }
    Ok(session)
}

/// `spec` with each sidecar's run-given variables filled (`Sidecar::from_run`): the secret of
/// `roles.tools.secrets` the variable names, else empty (as Compose leaves an unset variable).
/// The copy goes to the environment alone; the task's spec, which the bundle keeps, holds none.
pub(super) fn with_tool_secrets(spec: &EnvSpec, secrets: &[(String, agenteval_core::secret::Secret)]) -> EnvSpec {
    let mut spec = spec.clone();
    for sidecar in &mut spec.sidecars {
        for (key, var) in &sidecar.from_run {
            let value = secrets.iter().find(|(v, _)| v == var).map(|(_, s)| s.expose().to_string());
            sidecar.env.insert(key.clone(), value.unwrap_or_default());
        }
    }
    spec
}

/// Tears an environment down and forgets it; a failure is logged (a sweep removes it later).
pub(super) async fn tear_down(ctx: &Ctx, s: &EnvSession, at: &mut Attempt) {
    match s.env.teardown(&s.handle).await {
        Ok(()) => at.say(format!("environment {} removed", s.handle.id)),
        Err(e) => at.say(format!("environment {} not removed ({e}); the run's sweep removes it", s.handle.id)),
    }
    ctx.live.lock().expect("not poisoned").retain(|l| l.handle != s.handle);
    ctx.snapshots.lock().expect("not poisoned").remove(&s.handle.id);
    crate::environments::leftovers::forget(s).await;
}

/// Tears down every environment this worker still holds (a cancelled job's).
pub(super) async fn tear_down_live(ctx: &Ctx) {
    let live: Vec<EnvSession> = std::mem::take(&mut *ctx.live.lock().expect("not poisoned"));
    ctx.snapshots.lock().expect("not poisoned").clear();
    for s in live {
        if let Err(e) = s.env.teardown(&s.handle).await {
            tracing::warn!("environment {} not removed: {e}", s.handle.id);
        }
    }
}
