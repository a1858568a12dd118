//! Built-in benchmarks (`toy`, `jsonl`, `humaneval`, `harbor`, `swebench`, `command`, and `tau2` from its crate) and the factory that picks one from the config.

use std::sync::Arc;

use agenteval_core::Result;
use agenteval_core::config::{BenchmarkConfig, DEFAULT_CASE_BYTES, DEFAULT_DATA_FILE_BYTES};
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_harbor as harbor;

pub use agenteval_benchmarks::swebench;
pub use agenteval_benchmarks::{
    CaseRules, JsonlBenchmark, ToyBenchmark, chosen, humaneval, parse_cases, read_data_file,
};
use agenteval_benchmarks::{command, toy};

/// Builds the benchmark a configuration names.
pub fn benchmark_from_config(cfg: &BenchmarkConfig) -> Result<Arc<dyn BenchmarkAdapter>> {
    Ok(match cfg {
        BenchmarkConfig::Toy { size, latency_ms, slow_ms, .. } => Arc::new(ToyBenchmark::new(
            *size,
            latency_ms.unwrap_or(toy::DEFAULT_LATENCY_MS),
            slow_ms.unwrap_or(toy::DEFAULT_SLOW_MS),
        )),
        BenchmarkConfig::Jsonl { cases, trust_case_evaluators, max_case_bytes, max_file_bytes, .. } => {
            Arc::new(JsonlBenchmark::new(cases.clone()).with_rules(CaseRules {
                trust: *trust_case_evaluators,
                max_case_bytes: max_case_bytes.unwrap_or(DEFAULT_CASE_BYTES),
                max_file_bytes: max_file_bytes.unwrap_or(DEFAULT_DATA_FILE_BYTES),
            }))
        }
        BenchmarkConfig::Humaneval { path, python, timeout_seconds, max_file_bytes, .. } => Arc::new(
            humaneval::HumanEvalBenchmark::new(
                // A config loaded without the load-time checks (`at_load`) has no path yet.
                path.clone()
                    .or_else(|| {
                        humaneval::packaged_data(python.as_deref().unwrap_or(crate::python::DEFAULT_PYTHON)).ok()
                    })
                    .unwrap_or_default(),
                python.clone(),
                *timeout_seconds,
            )
            .with_max_file_bytes(max_file_bytes.unwrap_or(DEFAULT_DATA_FILE_BYTES)),
        ),
        BenchmarkConfig::Harbor { path, grading, .. } => {
            // A config loaded without the load-time checks (`at_load`) has no dataset folder yet.
            Arc::new(harbor::HarborBenchmark::new(path.clone().unwrap_or_default()).with_rules(*grading))
        }
        BenchmarkConfig::Swebench {
            dataset, hints, timeout_seconds, max_file_bytes, grade_without_tampering, ..
        } => Arc::new(swebench::SwebenchBenchmark {
            dataset: dataset.clone(),
            hints: *hints,
            timeout_secs: timeout_seconds.unwrap_or(agenteval_swebench::grading::DEFAULT_TIMEOUT_SECS),
            max_file_bytes: max_file_bytes.unwrap_or(DEFAULT_DATA_FILE_BYTES),
            without_tampering: *grade_without_tampering,
        }),
        BenchmarkConfig::Command {
            command,
            workdir,
            timeout_seconds,
            list_timeout_seconds,
            max_case_bytes,
            max_file_bytes,
            ..
        } => Arc::new(command::CommandBenchmark {
            command: command.clone(),
            workdir: workdir.clone(),
            grade_timeout: timeout_seconds.unwrap_or(crate::evaluators::command::DEFAULT_TIMEOUT),
            list_timeout: list_timeout_seconds.unwrap_or(command::DEFAULT_LIST_TIMEOUT),
            rules: CaseRules {
                trust: false,
                max_case_bytes: max_case_bytes.unwrap_or(DEFAULT_CASE_BYTES),
                max_file_bytes: max_file_bytes.unwrap_or(DEFAULT_DATA_FILE_BYTES),
            },
        }),
        BenchmarkConfig::Tau2 { domain, split, python, evaluation, max_steps, .. } => {
            Arc::new(agenteval_tau2::Tau2Benchmark::new(
                domain.clone(),
                split.clone().unwrap_or_else(|| "base".to_string()),
                python.clone().unwrap_or_else(|| crate::python::DEFAULT_PYTHON.to_string()),
                evaluation.unwrap_or(agenteval_core::config::Tau2Evaluation::All),
                max_steps.unwrap_or(agenteval_tau2::DEFAULT_MAX_STEPS),
            ))
        }
    })
}

/// What the benchmark completes and checks when a config loads, once its paths are resolved
/// (the loader's `ExtraChecks`), by kind: every kind has its arm, so a new one is a compile
/// error here until it says what it needs.
pub fn at_load(config: &mut agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    let mut problems = needs_containers(config);
    problems.extend(kind_at_load(config));
    problems
}

/// [`at_load`]'s part that is the kind's own.
fn kind_at_load(config: &mut agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    match &config.benchmark {
        BenchmarkConfig::Toy { .. } | BenchmarkConfig::Jsonl { .. } | BenchmarkConfig::Command { .. } => Vec::new(),
        // The reference package the tasks, tools and grading come from.
        BenchmarkConfig::Tau2 { python, .. } => {
            let python = python.as_deref().unwrap_or(crate::python::DEFAULT_PYTHON);
            agenteval_tau2::missing_package(python)
                .map(|why| ("/benchmark/python".to_string(), why))
                .into_iter()
                .collect()
        }
        // The data file found through Python.
        BenchmarkConfig::Humaneval { .. } => humaneval::find_data(config),
        BenchmarkConfig::Harbor { .. } => harbor::dataset_at_load(config),
        BenchmarkConfig::Swebench { .. } => swebench::at_load(config),
    }
}

/// The tasks of `config`'s benchmark that cannot be read as tasks, each with why: a run makes
/// each one `infra` and runs the rest; `config validate` names them.
pub fn unreadable_tasks(config: &agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    match &config.benchmark {
        BenchmarkConfig::Harbor { path: Some(path), .. } => {
            harbor::unreadable_tasks(path).unwrap_or_else(|e| vec![(path.display().to_string(), e.to_string())])
        }
        _ => Vec::new(),
    }
}

/// A benchmark whose tasks run in containers (its default environment is one: Harbor's tests
/// use /tests and /logs, SWE-bench's instances are images) refuses an environment that is none.
fn needs_containers(config: &agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    if !(config.benchmark.default_environment().in_containers() && config.environment.kind.without_containers()) {
        return Vec::new();
    }
    vec![(
        "/environment/kind".into(),
        format!(
            "`{}` tasks run in containers: `environment.kind` must be `docker` or `auto`, not `{}`",
            config.benchmark.kind(),
            config.environment.kind.as_str()
        ),
    )]
}

pub use agenteval_core::model::{answer_text, grade_expected};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_benchmark_whose_tasks_run_in_containers_refuses_no_container() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            "name: c\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: nop\nenvironment:\n  kind: workspace\n";
        let mut config = agenteval_core::config::load_config_str(text, "c.yaml", dir.path(), &[]).unwrap().config;
        assert!(needs_containers(&config).is_empty(), "a toy task needs none");
        config.benchmark =
            serde_json::from_value(serde_json::json!({"kind": "swebench", "dataset": "d.jsonl"})).unwrap();
        let said = needs_containers(&config);
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].0, "/environment/kind");
        assert!(said[0].1.contains("`swebench` tasks run in containers") && said[0].1.contains("not `workspace`"));
    }
}
