//! The `command` benchmark: a program in any language lists the tasks (`COMMAND list`, one
//! case per line on stdout, as in a `jsonl` case file) and grades each answer (`COMMAND grade`,
//! the `command` evaluator's protocol). Its failures are errors with its own words, never a pass.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use agenteval_core::config::TaskFilter;
use agenteval_core::model::{AgentResult, EvaluatorScore, TaskSpec, TerminatedBy, TraceEvent};
use agenteval_core::traits::{BenchmarkAdapter, EvalInput, TaskEnvironment};
use agenteval_core::{Error, Result};
use async_trait::async_trait;
use tokio::io::AsyncReadExt as _;

use super::jsonl::{CaseRules, parse_case_lines};

/// Seconds `list` gets when the config does not say.
pub const DEFAULT_LIST_TIMEOUT: f64 = 300.0;
/// Most of the program's stderr kept for an error message.
const STDERR_TAIL: usize = 2048;

#[derive(Debug, Clone)]
pub struct CommandBenchmark {
    pub command: Vec<String>,
    /// The config file's folder: the program runs there and its relative files are found there.
    pub workdir: Option<PathBuf>,
    /// Seconds for each `grade`.
    pub grade_timeout: f64,
    /// Seconds for `list`.
    pub list_timeout: f64,
    /// Line and output caps of the listing (`trust` stays off: a listing is data).
    pub rules: CaseRules,
}

impl CommandBenchmark {
    /// The command line as the user wrote it, to name it in messages.
    fn shown(&self, phase: &str) -> String {
        let mut words: Vec<&str> = self.command.iter().map(String::as_str).collect();
        words.push(phase);
        format!("`{}`", words.join(" "))
    }

    fn argv(&self, phase: &str) -> Vec<String> {
        let mut v = self.command.clone();
        v.push(phase.to_string());
        v
    }

    /// Runs `COMMAND list` and returns what it printed, within the time and size limits.
    async fn listing(&self) -> Result<String> {
        let shown = self.shown("list");
        let (prog, args) = self.command.split_first().ok_or_else(|| Error::invalid("benchmark `command` is empty"))?;
        let resolve = |a: &String| match &self.workdir {
            Some(w) if !a.starts_with('/') && w.join(a).exists() => w.join(a).into_os_string(),
            _ => a.into(),
        };
        let mut args: Vec<std::ffi::OsString> = args.iter().map(resolve).collect();
        args.push("list".into());
        // Under its own supervisor, so what it leaves running dies with it.
        let mut cmd =
            tokio::process::Command::from(agenteval_isolation::sandbox::supervised(&resolve(prog), &args, None));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
        if let Some(w) = &self.workdir {
            cmd.current_dir(w);
        }
        let mut child = cmd.spawn().map_err(|e| Error::invalid(format!("cannot start {shown}: {e}")))?;
        let pid = child.id().map(|p| p as i32);
        let max = self.rules.max_file_bytes;
        let work = async {
            let (so, se) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let (mut so, mut se) = (so.take(max + 1), se.take(64 * 1024));
            let (r1, _) = tokio::join!(so.read_to_end(&mut out), se.read_to_end(&mut err));
            r1.map_err(|e| Error::invalid(format!("reading {shown}: {e}")))?;
            if out.len() as u64 > max {
                return Err(Error::invalid(format!(
                    "{shown} printed more than {max} bytes: raise `benchmark.max_file_bytes`"
                )));
            }
            let status = child.wait().await.map_err(|e| Error::invalid(format!("waiting for {shown}: {e}")))?;
            Ok((status, out, err))
        };
        let outcome = tokio::time::timeout(Duration::from_secs_f64(self.list_timeout), work).await;
        if let Some(pid) = pid {
            agenteval_isolation::reap::kill_tree(pid);
        }
        let (status, out, err) = outcome.map_err(|_| {
            Error::invalid(format!(
                "{shown} did not finish within {}s (`benchmark.list_timeout_seconds`)",
                self.list_timeout
            ))
        })??;
        if !status.success() {
            return Err(Error::invalid(format!("{shown} exited with {status}; stderr: {}", tail(&err))));
        }
        String::from_utf8(out).map_err(|_| Error::invalid(format!("{shown} printed text that is not UTF-8")))
    }
}

/// The end of a program's stderr, trimmed, as one readable piece.
fn tail(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    let text = text.trim();
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    if text.is_empty() { "(empty)".into() } else { text[start..].to_string() }
}

#[async_trait]
impl BenchmarkAdapter for CommandBenchmark {
    fn name(&self) -> &str {
        "command"
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let text = self.listing().await?;
        let shown = self.shown("list");
        let base = self.workdir.clone().unwrap_or_else(|| PathBuf::from("."));
        let (tasks, problems) = parse_case_lines("line", &base, &text, self.rules);
        if !problems.is_empty() {
            let n = problems.len();
            return Err(Error::invalid(format!(
                "{shown} printed {n} bad case{}:\n  {}",
                if n == 1 { "" } else { "s" },
                problems.join("\n  ")
            )));
        }
        if tasks.is_empty() {
            return Err(Error::invalid(format!("{shown} listed no tasks")));
        }
        Ok(super::chosen(tasks, filter))
    }

    async fn grade(
        &self,
        task: &TaskSpec,
        result: &AgentResult,
        trace: &[TraceEvent],
        env: &TaskEnvironment,
    ) -> EvaluatorScore {
        let mut score = EvaluatorScore::errored("benchmark", "command", "");
        score.error = None;
        if result.terminated_by != TerminatedBy::Completed {
            score.reason = format!("agent did not complete: {}", result.terminated_by.as_str());
            return score;
        }
        let input = EvalInput { task, result, trace, env: env.session.as_ref() };
        let argv = self.argv("grade");
        match agenteval_evaluators::command::run(&argv, self.workdir.as_deref(), self.grade_timeout, &input).await {
            Ok((s, passed, reason)) => {
                score.score = s;
                score.passed = passed;
                score.reason = reason;
                score
            }
            Err(e) => EvaluatorScore::errored("benchmark", "command", format!("{}: {e}", self.shown("grade"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(dir: &std::path::Path, script: &str) -> CommandBenchmark {
        std::fs::write(dir.join("b.sh"), script).unwrap();
        CommandBenchmark {
            command: vec!["sh".into(), "b.sh".into()],
            workdir: Some(dir.to_path_buf()),
            grade_timeout: 5.0,
            list_timeout: 5.0,
            rules: CaseRules { max_file_bytes: 4096, ..CaseRules::default() },
        }
    }

    fn completed(answer: &str) -> AgentResult {
        AgentResult {
            success: true,
            final_answer: Some(serde_json::json!(answer)),
            error: None,
            total_cost_usd: 0.0,
            total_tokens: 0,
            wall_seconds: 0.1,
            terminated_by: TerminatedBy::Completed,
            steps: 1,
            cost_unknown: false,
            fault: None,
        }
    }

    #[tokio::test]
    async fn lists_filters_and_grades_through_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let b = bench(
            dir.path(),
            r#"case "$1" in
list) echo '{"id":"a","input":"1+1","expected":"2","tags":["x"]}'; echo; echo '{"id":"b","input":"2+2"}';;
grade) read doc; case "$doc" in *'"final_answer":"2"'*) echo '{"score":1,"passed":true,"reason":"ok"}';; *) echo '{"score":0,"passed":false}';; esac;;
esac"#,
        );
        let all = b.list_tasks(&TaskFilter::default()).await.unwrap();
        assert_eq!(all.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(all[0].expected, Some(serde_json::json!("2")));
        let only = b.list_tasks(&TaskFilter { tags: vec!["x".into()], ..Default::default() }).await.unwrap();
        assert_eq!(only.len(), 1);
        let env = TaskEnvironment::default();
        let good = b.grade(&all[0], &completed("2"), &[], &env).await;
        assert!(good.passed && good.error.is_none() && good.score == 1.0, "{good:?}");
        let bad = b.grade(&all[0], &completed("3"), &[], &env).await;
        assert!(!bad.passed && bad.error.is_none(), "{bad:?}");
        let stopped = AgentResult { terminated_by: TerminatedBy::LimitTime, ..completed("2") };
        assert!(!b.grade(&all[0], &stopped, &[], &env).await.passed);
    }

    #[tokio::test]
    async fn a_bad_listing_names_each_line_and_a_bad_grader_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let b = bench(
            dir.path(),
            "case \"$1\" in\nlist) echo '{\"id\":\"a\",\"input\":1}'; echo 'nope'; echo '{\"id\":\"a\",\"input\":2}';;\ngrade) echo garbage;;\nesac",
        );
        let err = b.list_tasks(&TaskFilter::default()).await.unwrap_err().to_string();
        assert!(err.contains("`sh b.sh list` printed 2 bad cases"), "{err}");
        assert!(err.contains("line:2: invalid JSON") && err.contains("line:3: duplicate case id `a`"), "{err}");
        let task = TaskSpec {
            id: "a".parse().unwrap(),
            input: serde_json::json!(1),
            expected: None,
            tags: vec![],
            evaluators: vec![],
            metadata: serde_json::Value::Null,
            environment: None,
            content: None,
            tests: None,
            solution: None,
            steps: None,
            user: None,
        };
        let s = b.grade(&task, &completed("x"), &[], &TaskEnvironment::default()).await;
        assert!(!s.passed && s.error.as_deref().is_some_and(|e| e.contains("printed no verdict")), "{s:?}");
    }

    #[tokio::test]
    async fn a_failing_silent_huge_or_slow_lister_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("echo boom >&2; exit 3", "exited with exit status: 3; stderr: boom"),
            ("true", "listed no tasks"),
            ("head -c 10000 /dev/zero | tr '\\0' x", "printed more than 4096 bytes"),
            ("sleep 30", "did not finish within 0.5s"),
        ];
        for (script, want) in cases {
            let mut b = bench(dir.path(), script);
            b.list_timeout = 0.5;
            let err = b.list_tasks(&TaskFilter::default()).await.unwrap_err().to_string();
            assert!(err.contains(want), "{script}: {err}");
        }
    }
}
