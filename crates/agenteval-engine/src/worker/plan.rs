//! The plan stage: before anything of a task attempt runs, what its components declared (the
//! benchmark's [`TaskPlan`], the agent's [`AgentNeeds`]) and the run's settings are resolved
//! into the one set of decisions the other stages read. No stage asks which kind of agent or
//! benchmark it runs.

use agenteval_core::config::{EvaluatorConfig, Limits, RunConfig, VerifyIn};
use agenteval_core::environment::VerifierRules;
use agenteval_core::model::{TaskSpec, TaskStep};
use agenteval_core::traits::{AgentNeeds, TaskPlan};

use crate::agents::installed::layer::Layer;

use super::ctx::Ctx;

/// What one attempt at a task does, decided before it starts.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// The agent's limits here: the run's, with the wall clock lowered to the task's own
    /// timeout when it has one.
    pub limits: Limits,
    /// Where its tests run: where the task says (Harbor's `environment_mode`), else the run's.
    pub verify_in: VerifyIn,
    /// Its tests grade by Harbor's rules (the agent's servers kept running for them).
    pub harbor_rules: bool,
    /// It is graded by tests run in its environment.
    pub by_tests: bool,
    /// The agent is given the task's solution.
    pub sees_solution: bool,
    /// The agent gets an environment of its own (its answers were not made elsewhere).
    pub acts: bool,
    /// The layer its installed agent needs on the task's image (none when no agent runs).
    pub layer: Option<Layer>,
    /// The agent's acts are read from a run's record (`agenteval regrade`), not run.
    pub recorded: bool,
    /// Paths in the environment kept as the task's artifacts: the run's, and the agent's record.
    pub artifacts: Vec<String>,
    /// Why the benchmark's own tool would skip the task.
    pub would_skip: Option<String>,
}

impl Plan {
    /// The plan of `task` in this job.
    pub(super) fn of(ctx: &Ctx, task: &TaskSpec) -> Plan {
        make(&ctx.config, &ctx.needs, &ctx.benchmark.plan(task), task)
    }

    /// The plan of one step of a task told in steps: the step's own tests and time limit.
    pub(super) fn for_step(&self, config: &RunConfig, step_task: &TaskSpec, step: &TaskStep) -> Plan {
        let limits = match step.agent_timeout_secs.filter(|s| *s > 0.0) {
            Some(secs) => lowered(config.agent.limits(), Some(secs)),
            None => self.limits.clone(),
        };
        Plan {
            limits,
            verify_in: verify_in(config, step_task),
            harbor_rules: harbor_rules(step_task),
            by_tests: by_tests(config, step_task),
            ..self.clone()
        }
    }
}

/// The plan from what the components declared and the run's config.
pub(super) fn make(config: &RunConfig, needs: &AgentNeeds, declared: &TaskPlan, task: &TaskSpec) -> Plan {
    let recorded = config.regrade.is_some();
    let mut artifacts = config.environment.artifacts.clone();
    artifacts.extend(needs.record.clone());
    Plan {
        limits: lowered(config.agent.limits(), declared.agent_timeout_secs),
        verify_in: verify_in(config, task),
        harbor_rules: harbor_rules(task),
        by_tests: by_tests(config, task),
        sees_solution: needs.sees_solution,
        acts: !needs.acts_elsewhere,
        layer: Layer::of(&config.agent).filter(|_| !recorded),
        recorded,
        artifacts,
        would_skip: declared.would_skip.clone(),
    }
}

/// The run's limits with the wall clock lowered to `timeout` (the run's stays when lower).
fn lowered(limits: &Limits, timeout: Option<f64>) -> Limits {
    let mut out = limits.clone();
    if let Some(secs) = timeout.filter(|s| *s > 0.0) {
        out.max_wall_seconds = Some(limits.wall_seconds().min(secs));
    }
    out
}

fn verify_in(config: &RunConfig, task: &TaskSpec) -> VerifyIn {
    task.tests.as_ref().and_then(|t| t.verify_in).unwrap_or(config.environment.verify_in)
}

fn harbor_rules(task: &TaskSpec) -> bool {
    task.tests.as_ref().is_some_and(|t| t.rules == VerifierRules::Harbor)
}

/// A task that brings tests (Harbor's, a case's `tests`) is graded by them, and so is one in an
/// environment under a `tests` evaluator.
pub(super) fn by_tests(config: &RunConfig, task: &TaskSpec) -> bool {
    task.tests.is_some() || (has_tests_evaluator(config) && task.environment.is_some())
}

pub(super) fn has_tests_evaluator(config: &RunConfig) -> bool {
    config.evaluators.iter().any(EvaluatorConfig::runs_tests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::config::load_config_str;

    fn config(extra: &str) -> RunConfig {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "name: p\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: mock\n  limits:\n    max_wall_seconds: 100\n{extra}"
        );
        load_config_str(&text, "p.yaml", dir.path(), &[]).unwrap().config
    }

    fn task() -> TaskSpec {
        serde_json::from_value(serde_json::json!({"id": "t", "input": "q"})).unwrap()
    }

    #[test]
    fn a_tasks_own_timeout_lowers_the_runs_and_a_steps_its_own() {
        let cfg = config("");
        let declared = TaskPlan { agent_timeout_secs: Some(30.0), would_skip: Some("no org".into()), user: None };
        let plan = make(&cfg, &AgentNeeds::default(), &declared, &task());
        assert_eq!(plan.limits.max_wall_seconds, Some(30.0));
        assert_eq!(plan.would_skip.as_deref(), Some("no org"));
        let longer =
            make(&cfg, &AgentNeeds::default(), &TaskPlan { agent_timeout_secs: Some(500.0), ..declared }, &task());
        assert_eq!(longer.limits.max_wall_seconds, Some(100.0), "the run's stays when it is lower");
        let step = |secs: Option<f64>| -> TaskStep {
            serde_json::from_value(serde_json::json!({"name": "s", "input": "q", "agent_timeout_secs": secs})).unwrap()
        };
        assert_eq!(plan.for_step(&cfg, &task(), &step(Some(60.0))).limits.max_wall_seconds, Some(60.0));
        assert_eq!(plan.for_step(&cfg, &task(), &step(None)).limits.max_wall_seconds, Some(30.0), "the task's");
    }

    #[test]
    fn what_the_agent_declares_is_what_the_plan_does() {
        let cfg = config("environment:\n  artifacts: [out.txt]\n");
        let plain = make(&cfg, &AgentNeeds::default(), &TaskPlan::default(), &task());
        assert!(plain.acts && !plain.sees_solution && !plain.recorded && plain.layer.is_none());
        assert_eq!(plain.artifacts, ["out.txt"]);
        let needs = AgentNeeds {
            sees_solution: true,
            record: Some("/logs/agent/record.json".into()),
            acts_elsewhere: true,
            ..AgentNeeds::default()
        };
        let plan = make(&cfg, &needs, &TaskPlan::default(), &task());
        assert!(plan.sees_solution && !plan.acts);
        assert_eq!(plan.artifacts, ["out.txt", "/logs/agent/record.json"], "the agent's record is kept too");
    }

    #[test]
    fn where_and_how_the_tests_run_is_the_tasks_else_the_runs() {
        let cfg = config("environment:\n  verify_in: fresh\n");
        let plan = make(&cfg, &AgentNeeds::default(), &TaskPlan::default(), &task());
        assert_eq!(plan.verify_in, VerifyIn::Fresh);
        assert!(!plan.by_tests && !plan.harbor_rules, "a task without tests or environment");
        let mut harbor = task();
        harbor.tests =
            Some(serde_json::from_value(serde_json::json!({"rules": "harbor", "verify_in": "same"})).unwrap());
        let plan = make(&cfg, &AgentNeeds::default(), &TaskPlan::default(), &harbor);
        assert!(plan.by_tests && plan.harbor_rules);
        assert_eq!(plan.verify_in, VerifyIn::Same, "the task's own");
    }
}
