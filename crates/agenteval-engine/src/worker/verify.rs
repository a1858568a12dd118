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

#[cfg(test)]
impl Verified {
    /// Where a grade stage's test says the tests run.
    pub(super) fn for_tests(task: TaskSpec, refused: Option<String>, changed_note: Option<String>) -> Verified {
        Verified { task, _tests: None, fresh: None, refused, changed: vec![], changed_note }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agenteval_core::environment::EnvHandle;
    use agenteval_testkit::fake_env::{Asked, FakeEnvironment, Script};

    use super::*;
    use crate::worker::plan::Plan;
    use crate::worker::testing;

    fn env_of(fake: &Arc<FakeEnvironment>) -> TaskEnvironment {
        let handle = EnvHandle { kind: "fake".into(), id: "left".into(), workdir: "/work".into(), notes: vec![] };
        TaskEnvironment { session: Some(EnvSession { env: fake.clone(), handle }), ..TaskEnvironment::default() }
    }

    fn tested(verify_in: &str) -> TaskSpec {
        testing::task(serde_json::json!({
            "id": "t", "input": "q", "environment": {}, "tests": {"command": "true", "verify_in": verify_in}
        }))
    }

    #[tokio::test]
    async fn in_the_same_environment_what_changed_outside_is_said_and_kept() {
        let changed: Vec<String> = (0..7).map(|i| format!("/usr/bin/tool{i}")).collect();
        let fake = Arc::new(FakeEnvironment::new(Script { changed_outside: changed, ..Script::default() }));
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = tested("same");
        let (mut at, mut agent) = (testing::attempt(), testing::completed());
        let v = verify(&ctx, &Plan::of(&ctx, &task), &task, &env_of(&fake), &mut agent, &mut at).await.unwrap();
        assert!(v.fresh.is_none() && v.refused.is_none());
        assert_eq!(v.changed.len(), 7);
        let note = v.changed_note.unwrap();
        assert!(note.contains("changed 7 file(s)") && note.contains("and 2 more"), "every one counted: {note}");
        let kept = &at.files.iter().find(|(n, _)| n == "artifacts/changed-outside.txt").unwrap().1;
        assert_eq!(String::from_utf8_lossy(kept).lines().count(), 7, "all of them listed");
    }

    #[tokio::test]
    async fn fresh_tests_get_a_new_environment_with_the_working_folder_and_it_is_released() {
        let fake = Arc::new(FakeEnvironment::default());
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = tested("fresh");
        let (mut at, mut agent) = (testing::attempt(), testing::completed());
        let v = verify(&ctx, &Plan::of(&ctx, &task), &task, &env_of(&fake), &mut agent, &mut at).await.unwrap();
        let fresh = v.fresh.clone().expect("a fresh environment");
        assert!(v.changed.is_empty(), "nothing the agent changed elsewhere is trusted");
        let asked = fake.asked();
        assert_eq!(asked[0], Asked::CopyOut("/work/.".into()), "the working folder is carried: {asked:?}");
        assert!(asked.contains(&Asked::CopyIn("/work".into())), "{asked:?}");
        release(&ctx, &v, &mut at).await;
        assert!(fake.asked().contains(&Asked::Teardown(fresh.handle.id)), "{:?}", fake.asked());
    }

    #[tokio::test]
    async fn a_working_folder_too_big_to_carry_is_the_agents_limit_not_a_failure() {
        let fake = Arc::new(FakeEnvironment::new(Script { copy_out_over_cap: true, ..Script::default() }));
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = tested("fresh");
        let (mut at, mut agent) = (testing::attempt(), testing::completed());
        let v = verify(&ctx, &Plan::of(&ctx, &task), &task, &env_of(&fake), &mut agent, &mut at).await.unwrap();
        assert!(v.fresh.is_none());
        assert!(v.refused.as_deref().unwrap().contains("cannot be carried"), "{:?}", v.refused);
        assert_eq!((agent.terminated_by, agent.success), (TerminatedBy::LimitDisk, false));
    }
}
