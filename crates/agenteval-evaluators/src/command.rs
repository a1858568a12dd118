//! The `command` evaluator: any program scores a task. It gets `{"task", "result", "trace"}` as
//! one JSON document on stdin and prints `{"score", "passed", "reason"}` on stdout (the last
//! non-empty line). A crash, a timeout or garbage is an evaluator error, never a run failure.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use agenteval_core::traits::EvalInput;
use agenteval_core::{Error, Result};
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most output read from a grading program.
const MAX_OUTPUT: u64 = 1 << 20;
/// Seconds a grading program gets when the config does not say.
pub const DEFAULT_TIMEOUT: f64 = 60.0;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Verdict {
    score: f64,
    passed: bool,
    #[serde(default)]
    reason: String,
}

/// The `command` evaluator as built from its config.
#[derive(Debug)]
pub(super) struct CommandEvaluator {
    pub id: String,
    pub command: Vec<String>,
    /// The config file's folder: relative program and argument files are found there.
    pub workdir: Option<std::path::PathBuf>,
    pub timeout: f64,
}

#[async_trait::async_trait]
impl agenteval_core::traits::Evaluator for CommandEvaluator {
    fn id(&self) -> &str {
        &self.id
    }

    fn kind(&self) -> &str {
        "command"
    }

    async fn evaluate(&self, input: &EvalInput<'_>) -> Result<agenteval_core::model::EvaluatorScore> {
        let (score, passed, reason) = run(&self.command, self.workdir.as_deref(), self.timeout, input).await?;
        Ok(super::score(&self.id, "command", (score, passed, reason, vec![])))
    }
}

/// Runs `command` on the task; returns score, passed and reason.
pub async fn run(
    command: &[String],
    workdir: Option<&Path>,
    timeout: f64,
    input: &EvalInput<'_>,
) -> Result<(f64, bool, String)> {
    let (prog, args) = command.split_first().ok_or_else(|| Error::invalid("evaluator `command` is empty"))?;
    let resolve = |a: &String| match workdir {
        Some(w) if !a.starts_with('/') && w.join(a).exists() => w.join(a).display().to_string(),
        _ => a.clone(),
    };
    // Under its own supervisor, so its leftovers die with it and nobody else's do.
    let args: Vec<std::ffi::OsString> = args.iter().map(|a| resolve(a).into()).collect();
    let mut cmd = tokio::process::Command::from(agenteval_isolation::sandbox::supervised(
        std::ffi::OsStr::new(&resolve(prog)),
        &args,
        None,
    ));
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
    if let Some(w) = workdir {
        cmd.current_dir(w);
    }
    let mut child = cmd.spawn().map_err(|e| Error::invalid(format!("cannot start `{prog}`: {e}")))?;
    let pid = child.id().map(|p| p as i32);
    let doc = json!({"task": input.task, "result": input.result, "trace": input.trace});
    let work = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A grader that does not read its input is judged by its output.
            let _ = stdin.write_all(doc.to_string().as_bytes()).await;
        }
        let mut out = Vec::new();
        let mut err = Vec::new();
        let (so, se) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let (mut so, mut se) = (so.take(MAX_OUTPUT), se.take(4096));
        let (r1, r2) = tokio::join!(so.read_to_end(&mut out), se.read_to_end(&mut err));
        r1.map_err(|e| Error::invalid(format!("reading `{prog}`: {e}")))?;
        let _ = r2;
        let status = child.wait().await.map_err(|e| Error::invalid(format!("waiting for `{prog}`: {e}")))?;
        Ok::<_, Error>((status, out, err))
    };
    let outcome = tokio::time::timeout(Duration::from_secs_f64(timeout), work).await;
    if let Some(pid) = pid {
        agenteval_isolation::reap::kill_tree(pid);
    }
    let (status, out, err) =
        outcome.map_err(|_| Error::invalid(format!("`{prog}` did not answer within {timeout}s")))??;
    let stderr = String::from_utf8_lossy(&err).trim().to_string();
    if !status.success() {
        return Err(Error::invalid(format!("`{prog}` exited with {status}; stderr: {stderr}")));
    }
    let text = String::from_utf8_lossy(&out);
    let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let v: Verdict = serde_json::from_str(line).map_err(|e| {
        let shown: String = line.chars().take(120).collect();
        Error::invalid(format!("`{prog}` printed no verdict ({e}): {shown:?}"))
    })?;
    if !(0.0..=1.0).contains(&v.score) {
        return Err(Error::invalid(format!("`{prog}` gave score {}, outside 0..1", v.score)));
    }
    Ok((v.score, v.passed, v.reason))
}
