//! A task told in steps (Harbor's `[[steps]]`): each step's instruction goes to the agent in
//! turn, in the one environment, after the step's files are put in its working folder (and its
//! `setup.sh` run, and its healthcheck passed); each step is graded by its own tests before the
//! next, whose agent never sees them; a step below its `min_reward`, or without a reward, stops
//! the task. The task's rewards are the steps' mean (or the last step's), as Harbor makes them.

use std::collections::BTreeMap;
use std::time::Duration;

use agenteval_core::environment::ExecRequest;
use agenteval_core::model::*;
use agenteval_core::traits::{EnvSession, TaskEnvironment};
use agenteval_core::{Error, Result, layout};

use super::act::Act;
use super::attempt::Attempt;
use super::ctx::Ctx;
use super::plan::Plan;
use super::turn::{Turn, turn};
use crate::environments::quote;
use crate::evaluators::verifier;

/// The task as its step is: that step's instruction, tests and solution (its time limit is the
/// step's plan's).
pub(super) fn step_task(task: &TaskSpec, step: &TaskStep) -> TaskSpec {
    let mut t = task.clone();
    t.input = step.input.clone();
    t.tests = step.tests.clone();
    t.solution = step.solution.clone();
    t.steps = None;
    t
}

/// Runs the task's steps in turn and grades each: the task's agent result (the steps' together),
/// its scores and the files changed outside the working folder.
// Long: one loop over the steps, each prepared, run, graded, recorded and checked against its
// threshold; split, the loop's state would travel through every part.
pub(super) async fn run(
    ctx: &Ctx,
    act: &dyn Act,
    plan: &Plan,
    task: &TaskSpec,
    env: &TaskEnvironment,
    at: &mut Attempt,
) -> Result<Turn> {
    let Some(steps) = &task.steps else { return turn(ctx, act, plan, task, env, at).await };
    if plan.recorded {
        return Err(Error::invalid(
            "a task told in steps cannot be regraded (its steps' recorded acts are not kept apart)",
        ));
    }
    let staged = layout::staged_task_trace(&ctx.job.job_id, ctx.job.attempt, &task.id);
    let harbor = plan.harbor_rules;
    let (mut done, mut agents, mut trace) = (Vec::<StepResult>::new(), Vec::<AgentResult>::new(), Vec::<u8>::new());
    let (mut rewarded, mut last_scores, mut changed) = (Vec::new(), Vec::new(), 0u64);
    let mut models = BTreeMap::new();
    let mut roles: BTreeMap<String, RoleUsage> = BTreeMap::new();
    let total = steps.list.len();
    for (i, step) in steps.list.iter().enumerate() {
        at.say(format!("step {}/{total}: {}", i + 1, step.name));
        if let Some(s) = &env.session {
            if i > 0 {
                between(s).await?;
            }
            match before(ctx, s, step, at).await {
                Ok(()) => {}
                Err(e) if i == 0 => return Err(Error::new(e.kind(), format!("step {}: {e}", step.name))),
                // An agent has acted in this environment: a step that cannot be prepared after
                // it (its `setup.sh` or healthcheck broken by what the agent left) is the agent's
                // doing, not agenteval's `infra`, which `compare` would leave out and `resume`
                // would give the agent another try at.
                Err(e) => {
                    let why = format!("it could not be prepared after the agent's earlier steps: {e}");
                    at.say(format!("step {}: {why}", step.name));
                    agents.push(unprepared(why.clone()));
                    done.push(StepResult {
                        name: step.name.clone(),
                        passed: false,
                        rewards: None,
                        terminated_by: TerminatedBy::AgentError,
                        wall_seconds: 0.0,
                        reason: why,
                    });
                    rewarded.push(Some(BTreeMap::from([("reward".to_string(), 0.0)])));
                    break;
                }
            }
        }
        let t = step_task(task, step);
        let Turn { agent, scores, changed: step_changed } =
            turn(ctx, act, &plan.for_step(&ctx.config, &t, step), &t, env, at).await?;
        trace.extend(ctx.store.get(&ctx.run_id, &staged).await?);
        // Each step's count is since the environment was made: the last is the task's.
        changed = changed.max(step_changed);
        let rewards = {
            let mut found = env.findings.lock().expect("not poisoned");
            for (m, n) in std::mem::take(&mut found.models) {
                *models.entry(m).or_insert(0) += n;
            }
            // Each step's trace is its own: its roles' spend (a judge's) is added up.
            for (r, u) in std::mem::take(&mut found.roles) {
                roles.entry(r).or_default().add(&u);
            }
            std::mem::take(&mut found.rewards)
        };
        let passed = scores_pass(&scores);
        let reason = scores.first().map(|s| s.error.clone().unwrap_or_else(|| s.reason.clone())).unwrap_or_default();
        at.say(format!("step {} {}: {reason}", step.name, if passed { "passed" } else { "not passed" }));
        done.push(StepResult {
            name: step.name.clone(),
            passed,
            rewards: rewards.clone(),
            terminated_by: agent.terminated_by,
            wall_seconds: agent.wall_seconds,
            reason: reason.split_whitespace().collect::<Vec<_>>().join(" "),
        });
        agents.push(agent);
        last_scores = scores;
        let stop = match &rewards {
            None => Some("it has no reward".to_string()),
            Some(r) => step.min_reward.iter().find(|(k, min)| r.get(*k).is_none_or(|v| v < *min)).map(|(k, min)| {
                format!("its {k} {} is below its min_reward {min}", r.get(k).map_or("(none)".into(), |v| v.to_string()))
            }),
        };
        rewarded.push(rewards);
        if let Some(why) = stop.filter(|_| i + 1 < total) {
            at.say(format!("step {} stops the task: {why}", step.name));
            break;
        }
    }
    at.trace = rewrite_trace(ctx, &staged, &trace).await?;
    let agent = together(&agents, &done);
    let rewards = combined(&rewarded, steps.reward);
    let score = task_score(&rewards, harbor, &done, &agent);
    {
        let mut found = env.findings.lock().expect("not poisoned");
        found.unscored = harbor && rewards.is_none();
        found.rewards = rewards;
        found.steps = done;
        found.models = models;
        found.roles = roles;
    }
    // The task's grade first, in the benchmark's place; the run's other evaluators as the last
    // step left them.
    let mut scores = vec![score];
    scores.extend(last_scores.into_iter().filter(|s| s.kind != "tests" && s.kind != "benchmark"));
    Ok(Turn { agent, scores, changed })
}

/// Between two steps, as Harbor leaves the environment: what the verifier held is let go, and
/// its tests and logs are removed before the next agent can read them.
async fn between(s: &EnvSession) -> Result<()> {
    let root = s.env.worker_root(&s.handle);
    let root = root.trim_end_matches('/');
    let cmd = format!(
        "rm -rf {tests} {verifier}; {resume}",
        tests = quote(&format!("{root}/tests")),
        verifier = quote(&format!("{root}/logs/verifier")),
        resume = crate::environments::leftovers::RESUME
    );
    let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(60)) }.as_grader();
    crate::environments::leftovers::forget(s).await;
    let out = s.env.exec(&s.handle, &req).await?;
    if !out.ok() {
        return Err(Error::invalid(format!("could not clear the last step's tests: {}", out.stderr.trim())));
    }
    Ok(())
}

/// A step's files put in the working folder, its `setup.sh` run there, its healthcheck passed.
async fn before(ctx: &Ctx, s: &EnvSession, step: &TaskStep, at: &mut Attempt) -> Result<()> {
    if let Some(dir) = &step.files {
        let (local, _guard) = crate::environments::files::local_folder(ctx.store.as_ref(), &ctx.run_id, dir).await?;
        s.env.copy_in(&s.handle, &local, &s.handle.workdir).await?;
        if local.join("setup.sh").is_file() {
            let script = format!("{}/setup.sh", s.handle.workdir.trim_end_matches('/'));
            let out = s
                .env
                .exec(
                    &s.handle,
                    &ExecRequest::new(format!("bash {}", quote(&script)), Duration::from_secs(600)).as_grader(),
                )
                .await?;
            if !out.ok() {
                let said = format!("{}{}", out.stdout, out.stderr);
                let tail: String = said.trim().chars().rev().take(300).collect::<Vec<_>>().into_iter().rev().collect();
                return Err(Error::invalid(format!("its setup.sh exited {}: {tail}", out.exit_code.unwrap_or(-1))));
            }
            at.say("setup.sh ran");
        }
    }
    if let Some(hc) = &step.healthcheck {
        crate::environments::healthy(s, hc).await?;
        at.say(format!("step healthcheck `{}` passed", hc.command));
    }
    Ok(())
}

/// The steps' traces as the task's one trace (events numbered in order), in place of the last
/// step's; its copy when short.
async fn rewrite_trace(ctx: &Ctx, staged: &str, trace: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut out = Vec::with_capacity(trace.len());
    let mut n = 0u32;
    for line in trace.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(mut ev) = serde_json::from_slice::<TraceEvent>(line) else { continue };
        ev.step = n;
        n += 1;
        out.extend(serde_json::to_vec(&ev).expect("trace events serialize"));
        out.push(b'\n');
    }
    let mut appender = ctx.store.open_appender(&ctx.run_id, staged).await?;
    appender.append(&out).await?;
    appender.finish().await?;
    // The pack takes a short trace from here rather than reading the staged file back.
    Ok((out.len() <= 1 << 20).then_some(out))
}

/// The agent's result for a step that could not be prepared after the agent's earlier steps.
fn unprepared(why: String) -> AgentResult {
    AgentResult {
        success: false,
        final_answer: None,
        error: Some(why),
        total_cost_usd: 0.0,
        total_tokens: 0,
        wall_seconds: 0.0,
        terminated_by: TerminatedBy::AgentError,
        steps: 0,
        cost_unknown: false,
        fault: None,
    }
}

/// The steps' agents as one: their costs, tokens, time and events summed; the first step that
/// did not complete says how the task's agent ended.
fn together(agents: &[AgentResult], done: &[StepResult]) -> AgentResult {
    let ended = agents.iter().zip(done).find(|(a, _)| a.terminated_by != TerminatedBy::Completed);
    let last = agents.last().cloned().expect("at least one step ran");
    AgentResult {
        success: agents.iter().all(|a| a.success),
        final_answer: last.final_answer,
        error: ended.and_then(|(a, s)| a.error.as_ref().map(|e| format!("step {}: {e}", s.name))),
        total_cost_usd: agents.iter().map(|a| a.total_cost_usd).sum(),
        total_tokens: agents.iter().map(|a| a.total_tokens).fold(0, u64::saturating_add),
        wall_seconds: agents.iter().map(|a| a.wall_seconds).sum(),
        terminated_by: ended.map_or(TerminatedBy::Completed, |(a, _)| a.terminated_by),
        steps: agents.iter().map(|a| a.steps).sum(),
        cost_unknown: agents.iter().any(|a| a.cost_unknown),
        fault: ended.and_then(|(a, _)| a.fault.clone()),
    }
}

/// The task's rewards from its steps', as Harbor makes them: each name's mean over the steps
/// with rewards (a name a step lacks counting 0), or the last step's.
pub(super) fn combined(steps: &[Option<BTreeMap<String, f64>>], how: StepsReward) -> Option<BTreeMap<String, f64>> {
    if how == StepsReward::Final {
        return steps.last().cloned().flatten();
    }
    let with: Vec<&BTreeMap<String, f64>> = steps.iter().flatten().collect();
    let names: std::collections::BTreeSet<&String> = with.iter().flat_map(|r| r.keys()).collect();
    if names.is_empty() {
        return None;
    }
    let n = with.len() as f64;
    Some(
        names
            .into_iter()
            .map(|k| (k.clone(), with.iter().map(|r| r.get(k).copied().unwrap_or(0.0)).sum::<f64>() / n))
            .collect(),
    )
}

/// The task's grade from its rewards.
fn task_score(
    rewards: &Option<BTreeMap<String, f64>>,
    harbor: bool,
    done: &[StepResult],
    agent: &AgentResult,
) -> EvaluatorScore {
    let each: Vec<String> = done
        .iter()
        .map(|s| match &s.rewards {
            Some(r) => {
                format!("{} {}", s.name, r.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "))
            }
            None => format!("{} no reward", s.name),
        })
        .collect();
    let Some(r) = rewards else {
        let why = format!("unscored: no step gave a reward ({})", each.join("; "));
        return EvaluatorScore {
            error: Some(why),
            ..EvaluatorScore::graded("benchmark", "tests", 0.0, false, String::new())
        };
    };
    let (value, by_rewards) = verifier::rewards_pass(r, harbor);
    let counted = if harbor { verifier::harbor_graded(agent.terminated_by) } else { None };
    let stopped = agent.terminated_by != TerminatedBy::Completed && counted != Some(true);
    let passed = by_rewards && !stopped;
    let shown: Vec<String> = r.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let verdict = match (passed, stopped) {
        (true, _) => "passed".to_string(),
        (false, true) => format!("not passed: the agent ended {}", agent.terminated_by.as_str()),
        (false, false) => "not passed".to_string(),
    };
    let reason =
        format!("{verdict}: {} step(s) of the task's rewards ({}): {}", done.len(), shown.join(", "), each.join("; "));
    EvaluatorScore::graded("benchmark", "tests", value.clamp(0.0, 1.0), passed, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_rewards_combine_as_harbor_combines_them() {
        let r =
            |pairs: &[(&str, f64)]| Some(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>());
        let steps = vec![r(&[("reward", 1.0)]), None, r(&[("reward", 0.0), ("style", 1.0)])];
        let mean = combined(&steps, StepsReward::Mean).unwrap();
        assert_eq!(
            (mean["reward"], mean["style"]),
            (0.5, 0.5),
            "a step without a reward is left out; a missing name is 0"
        );
        assert_eq!(combined(&steps, StepsReward::Final), steps[2]);
        assert_eq!(combined(&[None, None], StepsReward::Mean), None);
    }
}
