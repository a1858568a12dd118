//! Built-in benchmarks (`toy`, `jsonl`, `humaneval`, `harbor`, `swebench`, `command`, and `tau2` from its crate) and the factory that picks one from the config.

mod command;
pub mod humaneval;
mod jsonl;
pub mod swebench;
mod toy;

use std::path::Path;
use std::sync::Arc;

use agenteval_core::Result;
use agenteval_core::config::{BenchmarkConfig, DEFAULT_CASE_BYTES, DEFAULT_DATA_FILE_BYTES};
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_harbor as harbor;

pub use jsonl::{CaseRules, JsonlBenchmark, parse_cases};
pub use toy::ToyBenchmark;

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
        BenchmarkConfig::Harbor { .. } => {
            let mut problems = harbor::dataset_at_load(config);
            problems.extend(harbor_in_containers(config));
            problems
        }
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

/// Harbor tasks run in containers.
fn harbor_in_containers(config: &agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if matches!(
        config.environment.kind,
        agenteval_core::config::EnvironmentKind::Workspace | agenteval_core::config::EnvironmentKind::None
    ) {
        problems.push((
            "/environment/kind".into(),
            format!(
                "Harbor tasks run in a container (their tests use /tests and /logs): `environment.kind` must be `docker` or `auto`, not `{}`",
                config.environment.kind.as_str()
            ),
        ));
    }
    problems
}

/// Reads a benchmark's data file whole, gzip or not, refusing one that is not a regular file
/// (a FIFO would hang the controller) or that holds more than `max` bytes once decompressed (a
/// 3 MB gzip bomb is 3 GB of text). `option` names the setting that raises the cap.
pub(crate) fn read_data_file(path: &Path, max: u64, option: &str) -> std::result::Result<Vec<u8>, String> {
    use std::io::{BufRead as _, BufReader, Read as _};
    let name = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut reader = BufReader::new(file);
    let gzip = reader.fill_buf().map_err(|e| format!("cannot read {name}: {e}"))?.starts_with(&[0x1f, 0x8b]);
    let mut out = Vec::new();
    let read = if gzip {
        flate2::read::GzDecoder::new(reader).take(max + 1).read_to_end(&mut out)
    } else {
        reader.take(max + 1).read_to_end(&mut out)
    };
    read.map_err(|e| {
        if gzip { format!("{name} is not a readable gzip file: {e}") } else { format!("cannot read {name}: {e}") }
    })?;
    if out.len() as u64 > max {
        return Err(format!(
            "{name} holds more than {max} bytes{}; raise `benchmark.{option}` if it is meant to",
            if gzip { " once decompressed" } else { "" }
        ));
    }
    Ok(out)
}

pub use agenteval_core::model::{answer_text, grade_expected};

/// The tasks a benchmark's filter chooses, in their order, at most `limit` of them.
pub(crate) fn chosen(
    mut tasks: Vec<agenteval_core::model::TaskSpec>,
    filter: &agenteval_core::config::TaskFilter,
) -> Vec<agenteval_core::model::TaskSpec> {
    tasks.retain(|t| filter.matches(t.id.as_str(), &t.tags));
    if let Some(limit) = filter.limit {
        tasks.truncate(limit as usize);
    }
    tasks
}

/// Adds the files below `root` (or `root` itself, a file) to `h` under `label`: each one's path
/// below `root`, whether it is executable, its length and its bytes, in path order; links are
/// not followed. What cannot be read is hashed as unreadable, never skipped in silence.
pub(crate) fn hash_tree(h: &mut sha2::Sha256, label: &str, root: &Path) {
    use sha2::Digest as _;
    use std::os::unix::fs::PermissionsExt as _;
    let mut files = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => match std::fs::read_dir(&p) {
                Ok(entries) => todo.extend(entries.flatten().map(|e| e.path())),
                Err(_) => files.push((p, None)),
            },
            Ok(m) if m.is_file() => files.push((p, Some(m.permissions().mode() & 0o111 != 0))),
            _ => {}
        }
    }
    files.sort();
    h.update(label.as_bytes());
    h.update([0]);
    for (f, exec) in files {
        h.update(f.strip_prefix(root).unwrap_or(&f).to_string_lossy().as_bytes());
        h.update([0, u8::from(exec == Some(true))]);
        match std::fs::read(&f) {
            Ok(bytes) => {
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(&bytes);
            }
            Err(_) => h.update(b"unreadable"),
        }
    }
}
