//! Built-in benchmarks (`toy`, `jsonl`, `humaneval`) and the factory that picks one from the config.

pub mod humaneval;
mod jsonl;
mod toy;

use std::sync::Arc;

use agenteval_core::Result;
use agenteval_core::config::BenchmarkConfig;
use agenteval_core::traits::BenchmarkAdapter;

pub use jsonl::{JsonlBenchmark, parse_cases};
pub use toy::ToyBenchmark;

/// Builds the benchmark a configuration names.
pub fn benchmark_from_config(cfg: &BenchmarkConfig) -> Result<Arc<dyn BenchmarkAdapter>> {
    Ok(match cfg {
        BenchmarkConfig::Toy { size, latency_ms, slow_ms, .. } => Arc::new(ToyBenchmark::new(
            *size,
            latency_ms.unwrap_or(toy::DEFAULT_LATENCY_MS),
            slow_ms.unwrap_or(toy::DEFAULT_SLOW_MS),
        )),
        BenchmarkConfig::Jsonl { cases, trust_case_evaluators, .. } => {
            Arc::new(JsonlBenchmark::new(cases.clone()).trusting(*trust_case_evaluators))
        }
        BenchmarkConfig::Humaneval { path, python, timeout_seconds, .. } => Arc::new(
            humaneval::HumanEvalBenchmark::new(path.clone().unwrap_or_default(), python.clone(), *timeout_seconds),
        ),
    })
}

pub use agenteval_core::model::{answer_text, grade_expected};
