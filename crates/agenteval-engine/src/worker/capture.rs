//! The capture stage: once the agent has stopped, what it left is taken before anything else
//! runs: the limits of its environment it went past (storage, memory), its processes stopped
//! (under Harbor's rules held still, but its servers), its patch against the starting state
//! and the listed artifacts kept for the task's pack, and the models its calls used.

use agenteval_core::environment::DEFAULT_STORAGE_MB;
use agenteval_core::model::*;
use agenteval_core::traits::{EnvSession, TaskEnvironment};
use agenteval_core::{Error, Result};

use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;

/// Takes what the agent left in `env` into `at`, and the limits it went past into `agent`.
pub(super) async fn capture(
    ctx: &Ctx,
    plan: &Plan,
    task: &TaskSpec,
    env: &TaskEnvironment,
    agent: &mut AgentResult,
    events: &[TraceEvent],
    at: &mut Attempt,
) -> Result<()> {
    {
        let mut found = env.findings.lock().expect("not poisoned");
        found.models = models_called(events);
        found.provider_wait_ms = provider_wait(events);
        found.roles = roles_spent(events);
    }
    let Some(s) = &env.session else { return Ok(()) };
    environment_limits(task, s, agent, at).await;
    // Nothing of the agent runs while its patch is taken and it is graded; under Harbor's rules
    // its servers keep running for the tests and the rest is held still from here until the
    // tests' reward is read (`environments::leftovers`): a leftover cannot act between the
    // patch, the change report, the tamper audit and the tests.
    if !plan.harbor_rules {
        s.env.quiesce(&s.handle).await?;
    } else if let Err(e) = crate::environments::leftovers::hold(s).await {
        // The tests' grade says so (`suspect`); the hold is not tried again.
        at.say(format!("the agent's leftover processes could not be held still: {e}"));
    }
    keep_artifacts(ctx, plan, s, at).await
}

/// The models a trace's calls used, with how many calls each: the gateway's `model.call`
/// events (but those it refused), and the `llm` agent's ticks that stand for theirs.
fn models_called(events: &[TraceEvent]) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    // A refused call used no model.
    let used = |e: &&TraceEvent| {
        matches!(e.kind, EventKind::ModelCall | EventKind::CostTick)
            && e.payload.get("refused").is_none()
            && e.payload.get("role").is_none()
    };
    for e in events.iter().filter(used) {
        if let Some(m) = e.payload.get("model").and_then(serde_json::Value::as_str).filter(|m| !m.is_empty()) {
            *out.entry(m.to_string()).or_default() += 1;
        }
    }
    out
}

/// What each role's calls spent (the gateway's `model.call` events marked with a role).
pub(super) fn roles_spent(events: &[TraceEvent]) -> std::collections::BTreeMap<String, RoleUsage> {
    let mut out: std::collections::BTreeMap<String, RoleUsage> = std::collections::BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == EventKind::ModelCall) {
        let Some(role) = e.payload.get("role").and_then(serde_json::Value::as_str) else { continue };
        let u =
            out.entry(role.to_string()).or_insert_with(|| RoleUsage { cost_usd: Some(0.0), ..RoleUsage::default() });
        if u.model.is_empty() {
            u.model = e.payload["model"].as_str().unwrap_or_default().to_string();
        }
        u.calls += 1;
        u.input_tokens += e.payload["input_tokens"].as_u64().unwrap_or(0);
        u.output_tokens += e.payload["output_tokens"].as_u64().unwrap_or(0);
        u.cost_usd = match (u.cost_usd, e.payload["cost_usd"].as_f64()) {
            (Some(a), Some(b)) => Some(a + b),
            // A refused call cost nothing; an answered one with no price is unknown.
            (Some(a), None) if e.payload.get("refused").is_some() => Some(a),
            _ => None,
        };
    }
    out
}

/// Milliseconds the gateway's `model.call` events say it waited for the provider.
fn provider_wait(events: &[TraceEvent]) -> u64 {
    let waited = |e: &TraceEvent| e.payload.get("waited_ms").and_then(serde_json::Value::as_u64).unwrap_or(0);
    events.iter().filter(|e| e.kind == EventKind::ModelCall).map(waited).fold(0, u64::saturating_add)
}

/// What the agent left: its patch against the starting state and the listed artifacts, kept
/// for the task's pack as `artifacts/…`.
async fn keep_artifacts(ctx: &Ctx, plan: &Plan, s: &EnvSession, at: &mut Attempt) -> Result<()> {
    // One budget for the patch and the artifacts together; what does not fit is left out whole.
    let mut left = ctx.config.environment.artifact_bytes();
    let snapshot = ctx.snapshots.lock().expect("not poisoned").get(&s.handle.id).cloned();
    if let Some(snapshot) = snapshot {
        match snapshot.patch_digested(s, left).await {
            Ok(patch) => {
                // The tamper audit reads every file the patch names, kept or not.
                at.patch = Some(match &patch.text {
                    Some(t) => t.clone(),
                    None => patch.names.iter().map(|n| format!("diff --git a/{n} b/{n}\n")).collect(),
                });
                // The digest is kept even when the patch is not: `replay` compares final states by it.
                at.keep("artifacts/patch.sha256", format!("{}\n", patch.sha256).into_bytes());
                match patch.text {
                    Some(text) => {
                        left = left.saturating_sub(text.len() as u64);
                        at.keep("artifacts/patch.diff", ctx.redactor.redact(&text).into_bytes());
                    }
                    None => at.say(format!(
                        "artifact patch.diff not kept: left out: it is {} bytes, over the task's {left} (environment.max_artifact_bytes, for the patch and the artifacts together)",
                        patch.bytes
                    )),
                }
            }
            Err(e) => at.say(format!("artifact patch.diff not kept: {e}")),
        }
    }
    // The agent's own record of its run is kept beside what the config lists (the plan has both).
    let paths = &plan.artifacts;
    if paths.is_empty() {
        return Ok(());
    }
    let dir = tempfile::tempdir().map_err(|e| Error::io("a folder for the artifacts", e))?;
    at.log.extend(crate::environments::artifacts(s, paths, dir.path(), left).await);
    let mut files = Vec::new();
    let mut todo = vec![dir.path().to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| Error::io("reading the artifacts", e))?.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                files.push(p);
            }
        }
    }
    for f in files {
        let rel = f.strip_prefix(dir.path()).expect("below the folder").to_string_lossy().into_owned();
        let bytes = std::fs::read(&f).map_err(|e| Error::io(format!("reading artifact {rel}"), e))?;
        at.keep(format!("artifacts/{rel}"), bytes);
    }
    Ok(())
}

/// The most a task's environment may grow by: its `storage_mb`, else the default.
pub(super) fn storage_cap_bytes(task: &TaskSpec) -> u64 {
    task.environment.as_ref().and_then(|e| e.storage_mb).unwrap_or(DEFAULT_STORAGE_MB).saturating_mul(1 << 20)
}

/// Why a task went past its environment's storage.
pub(super) fn storage_exceeded(used: u64, cap: u64) -> String {
    format!("the environment's files grew by {} MB, past its {} MB (the task's storage_mb)", used >> 20, cap >> 20)
}

/// The limits of its environment the agent went past, as its result says: the task's storage
/// (what it wrote there) and the environment's memory (a process killed for it).
async fn environment_limits(task: &TaskSpec, s: &EnvSession, agent: &mut AgentResult, at: &mut Attempt) {
    let cap = storage_cap_bytes(task);
    if let Some(used) = s.env.written_bytes(&s.handle).await
        && used > cap
        && agent.terminated_by != TerminatedBy::LimitDisk
    {
        agent.terminated_by = TerminatedBy::LimitDisk;
        agent.success = false;
        agent.error = Some(storage_exceeded(used, cap));
    }
    if agent.terminated_by == TerminatedBy::LimitDisk
        && let Some(e) = &agent.error
    {
        at.say(e.clone());
    }
    if s.env.out_of_memory(&s.handle).await && agent.terminated_by != TerminatedBy::LimitMemory {
        agent.terminated_by = TerminatedBy::LimitMemory;
        agent.success = false;
        agent.error = Some("a process went past the environment's memory limit and was killed".into());
        at.say("the environment's memory limit killed a process");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agenteval_core::environment::EnvHandle;
    use agenteval_testkit::fake_env::{Asked, FakeEnvironment, Script};

    use super::*;
    use crate::worker::testing;

    fn env_of(fake: &Arc<FakeEnvironment>) -> TaskEnvironment {
        let handle = EnvHandle { kind: "fake".into(), id: "e1".into(), workdir: "/work".into(), notes: vec![] };
        TaskEnvironment { session: Some(EnvSession { env: fake.clone(), handle }), ..TaskEnvironment::default() }
    }

    #[tokio::test]
    async fn an_environment_grown_past_its_storage_or_memory_ends_the_agent_at_that_limit() {
        let fake = Arc::new(FakeEnvironment::new(Script { written_bytes: Some(3 << 30), ..Script::default() }));
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = testing::task(serde_json::json!({"id": "t", "input": "q", "environment": {"storage_mb": 1024}}));
        let (plan, mut at, mut agent) =
            (super::super::plan::Plan::of(&ctx, &task), testing::attempt(), testing::completed());
        capture(&ctx, &plan, &task, &env_of(&fake), &mut agent, &[], &mut at).await.unwrap();
        assert_eq!(agent.terminated_by, TerminatedBy::LimitDisk);
        assert!(agent.error.as_deref().unwrap().contains("grew by 3072 MB, past its 1024 MB"), "{agent:?}");
        assert!(fake.asked().contains(&Asked::Quiesce), "nothing of the agent runs while it is graded");

        let fake = Arc::new(FakeEnvironment::new(Script { out_of_memory: true, ..Script::default() }));
        let mut agent = testing::completed();
        capture(&ctx, &plan, &task, &env_of(&fake), &mut agent, &[], &mut at).await.unwrap();
        assert_eq!((agent.terminated_by, agent.success), (TerminatedBy::LimitMemory, false));
        assert!(at.log.iter().any(|l| l.contains("memory limit killed a process")), "{:?}", at.log);
    }

    #[tokio::test]
    async fn under_harbors_rules_the_agents_services_keep_running_for_the_tests() {
        let fake = Arc::new(FakeEnvironment::default());
        let (ctx, _dir) = testing::ctx("", Some(fake.clone()));
        let task = testing::task(
            serde_json::json!({"id": "t", "input": "q", "environment": {}, "tests": {"rules": "harbor"}}),
        );
        let plan = super::super::plan::Plan::of(&ctx, &task);
        let mut agent = testing::completed();
        capture(&ctx, &plan, &task, &env_of(&fake), &mut agent, &[], &mut testing::attempt()).await.unwrap();
        assert!(!fake.asked().contains(&Asked::Quiesce), "{:?}", fake.asked());
        assert_eq!(agent.terminated_by, TerminatedBy::Completed);
    }
}
