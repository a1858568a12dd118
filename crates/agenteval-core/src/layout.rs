//! Where things live inside a run bundle. Every writer and reader uses these names.

use crate::ids::{JobId, TaskId};

pub const METADATA: &str = "metadata.json";
pub const MANIFEST: &str = "manifest.json";
pub const SUMMARY: &str = "summary.json";
pub const REPORT: &str = "report.md";
/// The same report as one self-contained HTML page with a trace viewer.
pub const REPORT_HTML: &str = "report.html";
pub const REPLAY: &str = "replay_command.txt";
pub const CONFIG: &str = "config.resolved.json";
/// Every task of the run, one JSON `TaskSpec` per line, written when the run is created.
pub const TASKS: &str = "tasks.jsonl";
/// One compact line per finished task, written at seal (`format::ResultLine`).
pub const RESULTS: &str = "results.jsonl";
/// The comparison with a baseline and the gates' verdict, when the run was judged.
pub const COMPARISON: &str = "comparison.json";
pub const TELEMETRY: &str = "telemetry.jsonl";
/// The controller's OpenTelemetry spans (`eval.run`, `eval.job`, ...), one JSON object per line.
pub const SPANS: &str = "spans.jsonl";

pub const TASK_RESULT: &str = "result.json";
pub const TASK_TRACE: &str = "trace.jsonl";
pub const TASK_SCORES: &str = "scores.json";
pub const TASK_LOG: &str = "worker.log";
/// The `llm` agent's model calls, redacted (what `agenteval replay` feeds back).
pub const TASK_CASSETTE: &str = "cassette.jsonl";
/// The simulated user's calls of a task, recorded as the agent's are (`roles.user`).
pub const USER_CASSETTE: &str = "cassette.user.jsonl";
/// The calls a task's verifier made to its judge, recorded as the agent's are (`roles.judge`).
pub const JUDGE_CASSETTE: &str = "cassette.judge.jsonl";
/// The task's OpenTelemetry spans (`eval.task` and everything under it).
pub const TASK_SPANS: &str = "spans.jsonl";

/// Files every bundle has, sealed or not.
pub const REQUIRED: &[&str] = &[METADATA, CONFIG, TASKS];
/// Files a sealed bundle has in addition.
pub const REQUIRED_SEALED: &[&str] = &[MANIFEST, SUMMARY, REPORT, REPLAY];
// `report.html` and `results.jsonl` are not required: bundles sealed before them stay valid.
/// Files every finished task folder has.
pub const TASK_FILES: &[&str] = &[TASK_RESULT, TASK_TRACE, TASK_SCORES, TASK_LOG];

/// A file of a task folder: how bundles before schema 1.1 keep a finished task (and how a
/// task pack names its entries). Read through `taskpack::read_task_file`, which knows both.
pub fn task_file(task: &TaskId, file: &str) -> String {
    format!("tasks/{task}/{file}")
}

/// How a task pack's name ends.
pub const PACK_SUFFIX: &str = ".tar.gz";

/// A finished task's files in one pack (`taskpack`), since schema 1.1: its presence says the
/// task is finished, as `result.json` in a task folder did.
pub fn task_pack(task: &TaskId) -> String {
    format!("tasks/{task}{PACK_SUFFIX}")
}

/// Where a job attempt leaves a finished task's pack until the index says the attempt counts.
pub fn staged_task_pack(job: &JobId, attempt: u32, task: &TaskId) -> String {
    format!("{}/tasks/{task}{PACK_SUFFIX}", job_dir(job, attempt))
}

pub fn job_dir(job: &JobId, attempt: u32) -> String {
    format!("jobs/{job}/attempt-{attempt}")
}

/// Where a job attempt streams a task's trace while the task runs: one file beside the others
/// of the attempt (no folder per task), which becomes the task's pack when it ends.
pub fn staged_task_trace(job: &JobId, attempt: u32, task: &TaskId) -> String {
    format!("{}/tasks/{task}.{TASK_TRACE}", job_dir(job, attempt))
}

/// The folder of a job attempt's staged files for one task (workers of before schema 1.1).
pub fn staged_task_dir(job: &JobId, attempt: u32, task: &TaskId) -> String {
    format!("{}/tasks/{task}/", job_dir(job, attempt))
}

pub fn job_spec(job: &JobId, attempt: u32) -> String {
    format!("{}/job.json", job_dir(job, attempt))
}

/// The sizes and checksums of the task files one job attempt wrote (a part of the manifest,
/// merged at seal so that sealing need not read those files again).
pub fn job_files(job: &JobId, attempt: u32) -> String {
    format!("{}/{JOB_FILES}", job_dir(job, attempt))
}

pub const JOB_FILES: &str = "files.json";

pub fn job_log(job: &JobId, attempt: u32) -> String {
    format!("{}/worker.log", job_dir(job, attempt))
}
