//! The run's evaluators: every kind of `agenteval-evaluators`, and `tests` (`verifier`), a task's
//! tests run in its environment, which needs the engine's environments. [`evaluator_with`] is
//! the one table: the engine's kind, then the crate's.

pub mod verifier;

use std::sync::Arc;

use agenteval_core::Result;
use agenteval_core::config::EvaluatorConfig;
use agenteval_core::secret::Secret;
use agenteval_core::traits::Evaluator;

pub use agenteval_evaluators::{Shared, StoreVerdicts, command, evaluate_safely, judge_kind, judge_secret, pairwise};

/// Builds an evaluator from its config. Fails only on configuration the loader would have
/// refused. `secrets` hold the judges' keys, by environment variable name.
pub fn evaluator_from_config(cfg: &EvaluatorConfig, secrets: &[(String, Secret)]) -> Result<Arc<dyn Evaluator>> {
    evaluator_with(cfg, secrets, Shared::default())
}

/// [`evaluator_from_config`], with what a run's evaluators share.
pub fn evaluator_with(
    cfg: &EvaluatorConfig,
    secrets: &[(String, Secret)],
    shared: Shared,
) -> Result<Arc<dyn Evaluator>> {
    match cfg {
        EvaluatorConfig::Tests { tests, command, timeout_seconds, reward, .. } => {
            Ok(Arc::new(verifier::TestsEvaluator {
                id: cfg.id().to_string(),
                tests: tests.clone(),
                command: command.clone(),
                timeout_secs: *timeout_seconds,
                reward: *reward,
            }))
        }
        other => agenteval_evaluators::evaluator_with(other, secrets, shared),
    }
}
