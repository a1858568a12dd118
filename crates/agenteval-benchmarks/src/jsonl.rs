//! The `jsonl` benchmark: cases from a JSONL or YAML file (`id`, `input`, `expected`,
//! `evaluators`, `tags`; for a case that acts, its `environment`, `tests` and `solution`; for a
//! conversation, its simulated `user`), with
//! problems reported by line.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use agenteval_core::config::{EvaluatorConfig, Origin, TaskFilter, YamlDoc};
use agenteval_core::model::{TaskSpec, UserSpec};
use agenteval_core::traits::BenchmarkAdapter;
use agenteval_core::{Error, Result, TaskId};
use async_trait::async_trait;
use serde::Deserialize;

#[derive(Debug, Clone)]
pub struct JsonlBenchmark {
    path: PathBuf,
    rules: CaseRules,
}

/// What a case file may hold: the config's settings, defaults when it has none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaseRules {
    /// `benchmark.trust_case_evaluators`: cases may carry `command` evaluators.
    pub trust: bool,
    /// `benchmark.max_case_bytes`: the longest JSONL line.
    pub max_case_bytes: u64,
    /// `benchmark.max_file_bytes`: the largest case file, once decompressed.
    pub max_file_bytes: u64,
}

impl Default for CaseRules {
    fn default() -> Self {
        CaseRules {
            trust: false,
            max_case_bytes: agenteval_core::config::DEFAULT_CASE_BYTES,
            max_file_bytes: agenteval_core::config::DEFAULT_DATA_FILE_BYTES,
        }
    }
}

impl JsonlBenchmark {
    pub fn new(path: PathBuf) -> Self {
        JsonlBenchmark { path, rules: CaseRules::default() }
    }

    /// Reads the case file under these rules.
    pub fn with_rules(mut self, rules: CaseRules) -> Self {
        self.rules = rules;
        self
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    id: String,
    input: serde_json::Value,
    #[serde(default)]
    expected: Option<serde_json::Value>,
    #[serde(default)]
    evaluators: Vec<EvaluatorConfig>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    metadata: serde_json::Value,
    /// The environment the agent acts in (paths relative to the case file).
    #[serde(default)]
    environment: Option<agenteval_core::environment::EnvSpec>,
    /// Its verifier: a folder of tests (`test.sh`), or the full settings.
    #[serde(default)]
    tests: Option<CaseTests>,
    /// A folder with its reference solution (`solve.sh`), for the `oracle` agent.
    #[serde(default)]
    solution: Option<PathBuf>,
    /// The simulated user the agent converses with (`roles.user` plays it).
    #[serde(default)]
    user: Option<UserSpec>,
}

/// The longest scenario, and opening line, a case may give.
const MAX_SCENARIO_BYTES: usize = 32 * 1024;
const MAX_OPENING_BYTES: usize = 4 * 1024;

#[derive(Deserialize)]
#[serde(untagged)]
enum CaseTests {
    Folder(PathBuf),
    Spec(agenteval_core::environment::TestsSpec),
}

/// A case's path, relative to the case file's folder and inside it (a case file is data: it
/// cannot name the config's folder, a secrets file or `/`, not by an absolute path, `..` or a
/// link out); a problem when it is missing or outside.
fn case_path(base: &Path, p: &Path, what: &str, problems: &mut Vec<String>) -> PathBuf {
    if p.is_absolute() {
        problems.push(format!(
            "{what} {} is an absolute path: a case's paths are relative to its file's folder and stay inside it",
            p.display()
        ));
        return p.to_path_buf();
    }
    let full = base.join(p);
    let Ok(real) = full.canonicalize() else {
        problems.push(format!("{what} {} is not there", full.display()));
        return full;
    };
    let folder = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    if !real.starts_with(&folder) || real == folder {
        problems.push(format!(
            "{what} {} leads out of the case file's folder ({}): a case's paths stay inside it",
            p.display(),
            folder.display()
        ));
    }
    real
}

/// What an acting case says, wherever its folder is checked out: its environment and tests
/// settings with every path made relative to the case file's folder, its metadata, and the
/// files of its starting folder, local repository and tests (not its solution: not part of the
/// question). An edited test changes it; a moved checkout does not.
fn acting_content(
    env: &agenteval_core::environment::EnvSpec,
    tests: Option<&agenteval_core::environment::TestsSpec>,
    metadata: &serde_json::Value,
    base: &Path,
) -> String {
    use sha2::{Digest as _, Sha256};
    let folder = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    let relative = |p: &Path| p.strip_prefix(&folder).map_or_else(|_| p.to_path_buf(), Path::to_path_buf);
    let mut env = env.clone();
    let mut trees: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(c) = env.context.take() {
        trees.push(("context", c.clone()));
        env.context = Some(relative(&c));
    }
    if let Some(r) = env.repo.clone().filter(|r| Path::new(r).is_absolute()) {
        trees.push(("repo", PathBuf::from(&r)));
        env.repo = Some(relative(Path::new(&r)).display().to_string());
    }
    let tests = tests.map(|t| {
        let mut t = t.clone();
        if let Some(d) = t.dir.take() {
            trees.push(("tests", d.clone()));
            t.dir = Some(relative(&d));
        }
        t
    });
    let settings = serde_json::json!({"environment": env, "tests": tests, "metadata": metadata});
    let mut h = Sha256::new();
    h.update(agenteval_core::model::canonical_json(&settings));
    for (label, root) in trees {
        super::hash_tree(&mut h, label, &root);
    }
    hex::encode(h.finalize())
}

/// A repository a case may name: a path inside its folder, or a remote over https, http, ssh or
/// git (`user@host:path` too); never `file://`, `ext::` or anything git would read as an option.
fn remote_repo_problem(repo: &str) -> Option<String> {
    let ok_scheme = ["https://", "http://", "ssh://", "git://"].iter().any(|s| repo.starts_with(s));
    if repo.starts_with('-') || repo.contains("::") || (repo.contains("://") && !ok_scheme) {
        return Some(format!(
            "environment.repo `{repo}` is not a repository a case may name (a path inside its folder, or an https, http, ssh or git URL)"
        ));
    }
    None
}

/// The case's environment, tests and solution with their paths made absolute and checked.
fn resolve_environment(
    case: &mut Case,
    base: &Path,
    trust: bool,
    problems: &mut Vec<String>,
) -> Option<agenteval_core::environment::TestsSpec> {
    if let Some(env) = &mut case.environment {
        if let Some(problem) = env.repo.as_deref().and_then(remote_repo_problem) {
            problems.push(problem);
        }
        if let Some(c) = env.commit.as_deref().filter(|c| c.starts_with('-') || c.chars().any(char::is_whitespace)) {
            problems.push(format!("environment.commit `{c}` is not a commit or a ref"));
        }
        if let Some(c) = &env.context {
            env.context = Some(case_path(base, c, "environment.context", problems));
        }
        // A repository that is a path on this machine (not a URL) is the case file's neighbour.
        if let Some(r) = env.repo.clone().filter(|r| !r.contains("://") && !r.contains('@')) {
            env.repo = Some(case_path(base, Path::new(&r), "environment.repo", problems).display().to_string());
        }
        if env.repo.is_none() && env.commit.is_some() {
            problems.push("environment.commit needs environment.repo".into());
        }
    }
    if let Some(s) = &case.solution {
        case.solution = Some(case_path(base, s, "solution", problems));
    }
    let mut tests = match case.tests.take()? {
        CaseTests::Folder(dir) => agenteval_core::environment::TestsSpec { dir: Some(dir), ..Default::default() },
        CaseTests::Spec(spec) => spec,
    };
    if let Some(d) = &tests.dir {
        tests.dir = Some(case_path(base, d, "tests", problems));
    }
    if tests.command.is_some() && !trust {
        problems.push(
            "tests.command runs a program of the case's choosing: set `benchmark.trust_case_evaluators: true` in the config to allow it (it runs where the tests run, never as root on the worker)"
                .into(),
        );
    }
    if case.environment.is_none() {
        problems.push("a case with `tests` needs an `environment` to run them in".into());
    }
    Some(tests)
}

/// Checks one case; problems are pushed as messages.
/// How deeply a case's values may nest. A case travels inside the job spec and the agent's
/// request, a few levels deeper than in the case file, and every reader stops at 128 levels: a
/// deeper case would be refused by the worker at run time (and given up as `infra`), so it is
/// refused here, where the file and line can be named.
pub const MAX_CASE_DEPTH: usize = 64;

/// How deeply `v` nests (a scalar is 0).
fn depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn case_to_task(
    mut value: serde_json::Value,
    seen: &mut HashSet<String>,
    problems: &mut Vec<String>,
    trust: bool,
    base: &Path,
) -> Option<TaskSpec> {
    let d = depth(&value);
    if d > MAX_CASE_DEPTH {
        problems.push(format!("the case nests {d} levels deep; at most {MAX_CASE_DEPTH} are allowed"));
        return None;
    }
    if let Some(list) = value.get_mut("evaluators") {
        agenteval_core::config::evaluator::expand_shorthand(list);
    }
    let mut case: Case = match serde_json::from_value(value) {
        Ok(c) => c,
        Err(e) => {
            problems.push(e.to_string());
            return None;
        }
    };
    let id = match TaskId::try_from(case.id.clone()) {
        Ok(id) if !case.id.contains('@') => id,
        Ok(_) => {
            problems.push(format!("case id `{}` must not contain `@`", case.id));
            return None;
        }
        Err(e) => {
            problems.push(e.to_string());
            return None;
        }
    };
    if !seen.insert(case.id.clone()) {
        problems.push(format!("duplicate case id `{}`", case.id));
    }
    let mut evaluator_problems = Vec::new();
    for (i, e) in case.evaluators.iter().enumerate() {
        e.validate(&format!("/evaluators/{i}"), &mut evaluator_problems);
    }
    problems.extend(evaluator_problems.into_iter().map(|(at, m)| format!("{m} (at {at})")));
    // A case file is data: it may not run programs on the worker, nor aim a judge (and its
    // key) at an endpoint of its choosing.
    for (i, e) in case.evaluators.iter().enumerate() {
        match e.kind() {
            "command" if !trust => problems.push(format!(
                "evaluators/{i} is `command`, which runs a program on the worker: set `benchmark.trust_case_evaluators: true` in the config to allow it"
            )),
            "tests" => problems.push(format!(
                "evaluators/{i} is `tests`: a case names its tests with its own `tests` field; the kind's settings go in the config's `evaluators`"
            )),
            kind if agenteval_core::config::EvaluatorConfig::is_judge_kind(kind) => problems.push(format!(
                "evaluators/{i} is `{kind}`: a case cannot define a judge (its model, endpoint and key); define it in the config's `evaluators`"
            )),
            _ => {}
        }
    }
    if let Some(u) = &case.user {
        if u.scenario.trim().is_empty() {
            problems.push("user.scenario is empty: it tells the simulated user who it is and what it wants".into());
        }
        if u.scenario.len() > MAX_SCENARIO_BYTES {
            problems.push(format!("user.scenario is {} bytes, over {MAX_SCENARIO_BYTES}", u.scenario.len()));
        }
        if let Some(o) = &u.opening
            && (o.trim().is_empty() || o.len() > MAX_OPENING_BYTES)
        {
            problems.push(format!("user.opening must be 1 to {MAX_OPENING_BYTES} bytes"));
        }
    }
    let tests = resolve_environment(&mut case, base, trust, problems);
    let content = case.environment.as_ref().map(|env| acting_content(env, tests.as_ref(), &case.metadata, base));
    Some(TaskSpec {
        id,
        input: case.input,
        expected: case.expected,
        tags: case.tags,
        evaluators: case.evaluators,
        metadata: case.metadata,
        environment: case.environment,
        content,
        tests,
        solution: case.solution,
        steps: None,
        user: case.user,
    })
}

/// Parses JSON lines of cases, one per line, with paths relative to `base`: the tasks, and
/// every problem as `name:line: message`.
pub(super) fn parse_case_lines(name: &str, base: &Path, text: &str, rules: CaseRules) -> (Vec<TaskSpec>, Vec<String>) {
    let mut tasks = Vec::new();
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut ps = Vec::new();
        if line.len() as u64 > rules.max_case_bytes {
            problems.push(format!(
                "{name}:{}: the case is {} bytes, over the {} of `benchmark.max_case_bytes`",
                i + 1,
                line.len(),
                rules.max_case_bytes
            ));
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => {
                if let Some(t) = case_to_task(v, &mut seen, &mut ps, rules.trust, base) {
                    tasks.push(t);
                }
            }
            Err(e) => ps.push(format!("invalid JSON: {e}")),
        }
        problems.extend(ps.into_iter().map(|m| format!("{name}:{}: {m}", i + 1)));
    }
    (tasks, problems)
}

/// Parses a case file. Every problem is reported at once as `file:line: message`.
pub fn parse_cases(path: &Path, text: &str, rules: CaseRules) -> Result<Vec<TaskSpec>> {
    let trust = rules.trust;
    let base = path.parent().unwrap_or(Path::new("."));
    let name = path.display();
    let mut tasks = Vec::new();
    let mut problems = Vec::new();
    let is_yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    if is_yaml {
        let mut seen = HashSet::new();
        match YamlDoc::parse(text) {
            Err(ps) => {
                for p in ps {
                    let at = match p.origin {
                        Origin::File { line, column } => format!("{name}:{line}:{column}"),
                        _ => name.to_string(),
                    };
                    problems.push(format!("{at}: {}", p.message));
                }
            }
            Ok(doc) => match &doc.value {
                serde_json::Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let mut ps = Vec::new();
                        if let Some(t) = case_to_task(item.clone(), &mut seen, &mut ps, trust, base) {
                            tasks.push(t);
                        }
                        let at = match doc.origin(&format!("/{i}")) {
                            Origin::File { line, .. } => format!("{name}:{line}"),
                            _ => name.to_string(),
                        };
                        problems.extend(ps.into_iter().map(|m| format!("{at}: {m}")));
                    }
                }
                _ => problems.push(format!("{name}:1: a YAML case file is a list of cases")),
            },
        }
    } else {
        (tasks, problems) = parse_case_lines(&name.to_string(), base, text, rules);
    }
    if !problems.is_empty() {
        let n = problems.len();
        return Err(Error::invalid(format!(
            "case file {name} has {n} problem{}:\n  {}",
            if n == 1 { "" } else { "s" },
            problems.join("\n  ")
        )));
    }
    if tasks.is_empty() {
        return Err(Error::invalid(format!("case file {name} has no cases")));
    }
    Ok(tasks)
}

#[async_trait]
impl BenchmarkAdapter for JsonlBenchmark {
    fn name(&self) -> &str {
        "jsonl"
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let bytes = super::read_data_file(&self.path, self.rules.max_file_bytes, "max_file_bytes")
            .map_err(|e| Error::invalid(format!("case file: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::invalid(format!("case file {} is not UTF-8 text", self.path.display())))?;
        Ok(super::chosen(parse_cases(&self.path, &text, self.rules)?, filter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cases_user_briefs_the_simulated_user_and_is_part_of_the_question() {
        let text =
            "{\"id\":\"a\",\"input\":\"x\",\"user\":{\"scenario\":\"You are Ann.\"}}\n{\"id\":\"b\",\"input\":\"x\"}\n";
        let tasks = parse_cases(Path::new("c.jsonl"), text, CaseRules::default()).unwrap();
        let b = JsonlBenchmark::new("c.jsonl".into());
        let brief = b.plan(&tasks[0]).user.unwrap();
        assert!(brief.system.contains("<scenario>\nYou are Ann.\n</scenario>"), "{}", brief.system);
        assert_eq!(
            (brief.opening.as_str(), brief.stop_words[0].as_str()),
            (agenteval_core::traits::DEFAULT_OPENING, "###STOP###")
        );
        assert!(b.plan(&tasks[1]).user.is_none());
        assert_ne!(tasks[0].content_fingerprint(), tasks[1].content_fingerprint(), "another question");
        let bad = "{\"id\":\"a\",\"input\":\"x\",\"user\":{\"scenario\":\" \",\"opening\":\"\"}}\n{\"id\":\"b\",\"input\":\"x\",\"user\":{\"persona\":\"p\"}}\n";
        let err = parse_cases(Path::new("c.jsonl"), bad, CaseRules::default()).unwrap_err().to_string();
        assert!(err.contains("c.jsonl:1: user.scenario is empty") && err.contains("user.opening must be"), "{err}");
        assert!(err.contains("c.jsonl:2:") && err.contains("persona"), "{err}");
    }

    #[test]
    fn jsonl_problems_name_every_line() {
        let text = "{\"id\":\"a\",\"input\":\"x\"}\nnot json\n{\"id\":\"a\",\"input\":\"y\"}\n{\"id\":\"b/c\",\"input\":1}\n{\"id\":\"d\",\"input\":1,\"colour\":2}\n";
        let err = parse_cases(Path::new("cases.jsonl"), text, CaseRules::default()).unwrap_err().to_string();
        assert!(err.contains("cases.jsonl:2: invalid JSON"), "{err}");
        assert!(err.contains("cases.jsonl:3: duplicate case id `a`"), "{err}");
        assert!(err.contains("cases.jsonl:4:"), "{err}");
        assert!(err.contains("cases.jsonl:5: unknown field `colour`"), "{err}");
        let mut deep = serde_json::json!("x");
        for _ in 0..MAX_CASE_DEPTH {
            deep = serde_json::json!([deep]);
        }
        let line = serde_json::json!({"id": "deep", "input": deep, "expected": "x"}).to_string();
        let err = parse_cases(
            Path::new("cases.jsonl"),
            &format!("{{\"id\": \"a\", \"input\": 1}}\n{line}\n"),
            CaseRules::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("cases.jsonl:2: the case nests 65 levels deep; at most 64"), "{err}");
    }

    #[test]
    fn a_case_file_cannot_run_programs_or_define_judges_unless_trusted() {
        let text = "{\"id\": \"a\", \"input\": 1, \"evaluators\": [{\"kind\": \"command\", \"command\": [\"sh\", \"-c\", \"id\"]}]}\n{\"id\": \"b\", \"input\": 1, \"evaluators\": [{\"kind\": \"llm_pass_fail\", \"model\": \"openai:gpt-4o\", \"base_url\": \"https://listener.example/v1\", \"criteria\": \"x\"}]}\n";
        let err = parse_cases(Path::new("cases.jsonl"), text, CaseRules::default()).unwrap_err().to_string();
        assert!(
            err.contains("cases.jsonl:1: evaluators/0 is `command`") && err.contains("trust_case_evaluators: true"),
            "{err}"
        );
        assert!(err.contains("cases.jsonl:2: evaluators/0 is `llm_pass_fail`: a case cannot define a judge"), "{err}");
        // Trusted: the program may run; a judge still may not come from a case.
        let err = parse_cases(Path::new("cases.jsonl"), text, CaseRules { trust: true, ..CaseRules::default() })
            .unwrap_err()
            .to_string();
        assert!(!err.contains("cases.jsonl:1:") && err.contains("cases.jsonl:2:"), "{err}");
    }

    #[test]
    fn yaml_cases_load_and_report_lines() {
        let good = "- id: a\n  input: hello\n  expected: HELLO\n  tags: [x]\n- id: b\n  input: {q: 1}\n  evaluators:\n    - kind: contains\n      value: '1'\n";
        let tasks = parse_cases(Path::new("c.yaml"), good, CaseRules::default()).unwrap();
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks[1].evaluators.len(), 1);
        let bad = "- id: a\n  input: hello\n- id: b\n  inptu: 2\n";
        let err = parse_cases(Path::new("c.yaml"), bad, CaseRules::default()).unwrap_err().to_string();
        assert!(err.contains("c.yaml:3:"), "{err}");
    }
}
