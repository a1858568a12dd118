//! The judge role of a task's own verifier (`roles.judge`): tests whose variables ask for a
//! provider's key (Harbor's `[verifier.env]`, `ANTHROPIC_API_KEY = "${ANTHROPIC_API_KEY}"`) get,
//! for as long as they run, a door of the run's model gateway that admits the judge's one model.
//! Their calls are the `judge` role's in the trace: metered, budgeted, recorded and replayed apart
//! from the agent's; the provider's key never leaves the gateway.

use std::sync::Arc;

use agenteval_core::gateway::Door;
use agenteval_core::model::{RoleUsage, TaskSpec};
use agenteval_core::traits::TaskEnvironment;
use agenteval_core::{Error, Result};
use tokio::sync::Mutex;

use super::act::metered::{self, RoleDoor, Shared};
use super::attempt::Attempt;
use super::ctx::Ctx;
use super::sink::TraceSink;

/// The providers' key variables a verifier may ask the run for.
const KEY_VARS: &[&str] = &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"];

/// The variables of a task's tests that ask for a judge: each whose value is exactly `${VAR}`
/// for a provider's key variable or one of `also` (`roles.judge.key_variables`).
pub(super) fn asked_for(task: &TaskSpec, also: &[String]) -> Vec<String> {
    let Some(tests) = &task.tests else { return Vec::new() };
    tests
        .env
        .iter()
        .filter(|(_, v)| {
            v.strip_prefix("${")
                .and_then(|r| r.strip_suffix('}'))
                .is_some_and(|name| KEY_VARS.contains(&name) || also.iter().any(|a| a == name))
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// A judge's door, open while the tests run.
pub(super) struct Opened {
    door: Box<dyn Door>,
}

/// What the tests get: the task with the door's token where they asked for a key and the
/// door's base URLs (those the task does not set itself), and the door; `Err` with the reason
/// the tests cannot be given a judge, said as their grade.
pub(super) async fn open(
    ctx: &Ctx,
    task: &TaskSpec,
    graded: &TaskEnvironment,
) -> Result<Option<(TaskSpec, Opened)>, String> {
    let also = ctx.config.roles.judge.as_ref().map(|j| j.key_variables.as_slice()).unwrap_or_default();
    let asked = asked_for(task, also);
    if asked.is_empty() {
        return Ok(None);
    }
    let Some(role) = &ctx.config.roles.judge else {
        return Err(format!(
            "the task's tests call a model (their variables ask for {}): give the run a judge in `roles.judge` \
             (docs/roles.md), whose calls go through agenteval's gateway",
            asked.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ")
        ));
    };
    let o =
        metered::open_role(ctx, task, &RoleDoor::judge(role), graded).await.map_err(|e| format!("roles.judge: {e}"))?;
    let in_container = graded.session.as_ref().is_some_and(|s| s.env.is_container());
    if in_container && o.access.container.is_none() {
        return Err("roles.judge: the task's container has no way to the model gateway".into());
    }
    let door_env: std::collections::BTreeMap<String, String> = o.access.env(in_container).into_iter().collect();
    let mut judged = task.clone();
    let tests = judged.tests.as_mut().expect("asked_for found tests");
    for var in &asked {
        tests.env.insert(var.clone(), o.access.token.expose().to_string());
    }
    for base in ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE"] {
        if !tests.env.contains_key(base) {
            tests.env.insert(base.into(), door_env[base].clone());
        }
    }
    Ok(Some((judged, Opened { door: o.door })))
}

/// Once the tests have run: the judge's calls written to the trace as the `judge` role's (before
/// the scores), its recording kept with the task, its door closed. What it spent, and why a call
/// was refused (its budget spent, a replay miss), when one was.
pub(super) async fn settle(
    ctx: &Ctx,
    task: &TaskSpec,
    opened: Opened,
    sink: TraceSink,
    at: &mut Attempt,
) -> Result<(TraceSink, Option<RoleUsage>, Option<String>)> {
    let Some(role) = &ctx.config.roles.judge else { return Ok((sink, None, None)) };
    let shared = Shared { sink: Arc::new(Mutex::new(sink)), calls: None, user_calls: None, merge_ticks: false };
    let mut door = opened.door;
    let first = sink_len(&shared).await;
    let stop = metered::settle(ctx, task, door.as_mut(), &shared, at, Some(&RoleDoor::judge(role))).await?;
    drop(door);
    let sink = Arc::try_unwrap(shared.sink)
        .map_err(|_| Error::invalid("the trace is still shared after the judge's calls were written"))?
        .into_inner();
    let usage = super::capture::roles_spent(&sink.events[first..]).remove("judge");
    Ok((sink, usage, stop.map(|s| s.reason)))
}

async fn sink_len(shared: &Shared) -> usize {
    shared.sink.lock().await.events.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_providers_key_or_a_named_variable_written_whole_asks_for_a_judge() {
        let mut task = crate::worker::testing::task(serde_json::json!({"id": "t", "input": "q"}));
        let env = [
            ("ANTHROPIC_API_KEY", "${ANTHROPIC_API_KEY}"),
            ("KEY_FOR_SDK", "${OPENAI_API_KEY}"),
            ("MODEL_NAME", "claude-haiku-4-5"),
            ("OTHER", "${SOMETHING_ELSE}"),
            ("PREFIXED", "x${OPENAI_API_KEY}"),
        ];
        task.tests = Some(agenteval_core::environment::TestsSpec {
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        });
        assert_eq!(asked_for(&task, &[]), ["ANTHROPIC_API_KEY", "KEY_FOR_SDK"]);
        // A name the run's judge says its key may be asked for under.
        assert_eq!(asked_for(&task, &["SOMETHING_ELSE".into()]), ["ANTHROPIC_API_KEY", "KEY_FOR_SDK", "OTHER"]);
        task.tests = None;
        assert!(asked_for(&task, &[]).is_empty());
    }
}
