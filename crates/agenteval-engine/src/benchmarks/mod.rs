//! Built-in benchmarks (`toy`, `jsonl`) and the factory that picks one from the config.

mod jsonl;
mod toy;

use std::sync::Arc;

use agenteval_core::config::{BenchmarkConfig, BenchmarkKind};
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_core::{Error, Result};

pub use jsonl::{JsonlBenchmark, parse_cases};
pub use toy::ToyBenchmark;

/// Builds the benchmark a configuration names.
pub fn benchmark_from_config(cfg: &BenchmarkConfig) -> Result<Arc<dyn BenchmarkAdapter>> {
    Ok(match cfg.kind {
        BenchmarkKind::Toy => Arc::new(ToyBenchmark::new(
            cfg.size.ok_or_else(|| Error::invalid("toy benchmark needs a size"))?,
            cfg.latency_ms.unwrap_or(toy::DEFAULT_LATENCY_MS),
            cfg.slow_ms.unwrap_or(toy::DEFAULT_SLOW_MS),
        )),
        BenchmarkKind::Jsonl => Arc::new(JsonlBenchmark::new(
            cfg.cases.clone().ok_or_else(|| Error::invalid("jsonl benchmark needs a case file"))?,
        )),
    })
}

pub use agenteval_core::model::{answer_text, grade_expected};
