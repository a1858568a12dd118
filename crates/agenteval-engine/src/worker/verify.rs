//! The verify stage: where the task's tests run once the agent has stopped. In the environment
//! it left (`same`: what it changed outside its working folder is then said beside a pass), or
//! in a fresh one of the task's image with only its working folder carried over (`fresh`).

use agenteval_core::config::VerifyIn;
use agenteval_core::model::*;
use agenteval_core::traits::{EnvSession, TaskEnvironment};
use agenteval_core::{Error, ErrorKind, Result};

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;
use super::sessions::{prepare_session, tear_down};

/// Where a task's tests run, and what they trust.
pub(super) struct Verified {
    /// The task as its tests see it: its tests fetched to this machine (only now that nothing
    /// of the agent runs), kept while they run.
    pub task: TaskSpec,
    _tests: Option<tempfile::TempDir>,
    /// The fresh environment they run in; `None`: the one the agent left.
    pub fresh: Option<EnvSession>,
    /// Why they cannot run at all (what the agent left cannot be carried to a fresh one).
    pub refused: Option<String>,
    /// What the agent changed outside its working folder, which the tests trust.
    pub changed: Vec<String>,
    /// That, said in a line.
    pub changed_note: Option<String>,
}

/// Decides where the tests run and makes it ready; an agent whose working folder cannot be
/// carried ends past its storage limit.
pub(super) async fn verify(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    env: &TaskEnvironment,
    agent: &mut AgentResult,
    at: &mut Attempt,
) -> Result<Verified> {
    let fetched = crate::environments::files::with_local_tests(ctx.store.as_ref(), &ctx.run_id, task).await?;
    let (task, tests) = match fetched {
        Some((t, dir)) => (t, Some(dir)),
        None => (task.clone(), None),
    };
    let mut refused = None;
    let fresh = match &env.session {
        Some(s) if plan.verify_in == VerifyIn::Fresh && plan.by_tests => {
            match fresh_for_tests(ctx, &task, s, at).await? {
                Fresh::Made(f) => Some(f),
                Fresh::AgentsFault(why) => {
                    at.say(why.clone());
                    agent.terminated_by = TerminatedBy::LimitDisk;
                    agent.success = false;
                    agent.error = Some(why.clone());
                    refused = Some(why);
                    None
                }
            }
        }
        _ => None,
    };
    // Under Harbor's way the tests trust the environment the agent left: what it changed outside
    // its folder (a replaced `python3`) is said beside a pass.
    let changed = match (&env.session, &fresh) {
        (Some(s), None) if refused.is_none() && plan.by_tests => s.env.changed_outside(&s.handle).await,
        _ => Vec::new(),
    };
    let changed_note = changed_note(&changed);
    if let Some(n) = &changed_note {
        at.say(n.clone());
        let all = changed.iter().map(|p| format!("{p}\n")).collect::<String>();
        at.keep("artifacts/changed-outside.txt", all.into_bytes());
    }
    Ok(Verified { task, _tests: tests, fresh, refused, changed, changed_note })
}

/// Tears down the fresh environment the tests ran in, if they had one.
pub(super) async fn release(ctx: &Ctx, verified: &Verified, at: &mut Attempt) {
    if let Some(f) = &verified.fresh {
        tear_down(ctx, f, at).await;
    }
}

/// The most of an agent's working folder carried into a fresh environment for its tests.
const MAX_CARRIED_BYTES: u64 = 1 << 30;

/// What the fresh environment for a task's tests came to: made, or refused because of what the
/// agent left (its working folder past [`MAX_CARRIED_BYTES`]: the agent's limit, not agenteval's
/// failure).
enum Fresh {
    Made(EnvSession),
    AgentsFault(String),
}

/// A new environment from the task's image with the agent's working folder copied over, for its
/// tests (`environment.verify_in: fresh`): they then trust nothing else the agent changed.
async fn fresh_for_tests(ctx: &Ctx, task: &TaskSpec, left: &EnvSession, at: &mut Attempt) -> Result<Fresh> {
    let Some(spec) = &task.environment else { return Err(crate::environments::missing(&task.id)) };
    let carried = tempfile::tempdir().map_err(|e| Error::io("a folder for the agent's working folder", e))?;
    let from = format!("{}/.", left.handle.workdir.trim_end_matches('/'));
    match left.env.copy_out(&left.handle, &from, carried.path(), MAX_CARRIED_BYTES).await {
        Ok(()) => {}
        // The copy's only refusal of its input: more than the cap.
        Err(e) if e.kind() == ErrorKind::Invalid => {
            return Ok(Fresh::AgentsFault(format!(
                "the agent's working folder cannot be carried to the tests' fresh environment: {e}"
            )));
        }
        Err(e) => return Err(e),
    }
    // The patch came from the agent's environment: no snapshot of this one. Its network is the
    // verifier's when the task gives it one.
    let verifiers;
    let spec = match task.tests.as_ref().and_then(|t| t.network.clone()) {
        Some((network, allowed_hosts)) => {
            verifiers = agenteval_core::environment::EnvSpec { network, allowed_hosts, ..spec.clone() };
            &verifiers
        }
        None => spec,
    };
    let fresh = prepare_session(ctx, task, spec, false, at).await?;
    if let Err(e) = fresh.env.copy_in(&fresh.handle, carried.path(), &fresh.handle.workdir).await {
        tear_down(ctx, &fresh, at).await;
        return Err(e);
    }
    at.say(format!("the tests run in a fresh environment ({}) with the agent's working folder", fresh.handle.id));
    Ok(Fresh::Made(fresh))
}

/// What the agent changed outside its working folder, said in a line: every one of them counted,
/// never a sample (five dummy files must not hide a replaced `python3`).
fn changed_note(changed: &[String]) -> Option<String> {
    (!changed.is_empty()).then(|| {
        let shown: Vec<&str> = changed.iter().take(5).map(String::as_str).collect();
        let more = if changed.len() > 5 { format!(" and {} more", changed.len() - 5) } else { String::new() };
        format!(
            "the agent changed {} file(s) outside its working folder: {}{more} (all in artifacts/changed-outside.txt)",
            changed.len(),
            shown.join(", ")
        )
    })
}
