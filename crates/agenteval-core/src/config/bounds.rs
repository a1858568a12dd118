//! The documented range of every number in a config: nothing a config says may overflow a
//! `Duration`, allocate without bound or outlive a night. `docs/configuration.md` lists them.

/// Most tokens one event may report. Beyond it the number is a broken or hostile agent, not
/// usage: no model call comes near it, and sums of such values stay far from overflowing.
pub const MAX_EVENT_TOKENS: u64 = 1 << 32;
/// Most one event may cost, in US dollars, for the same reason.
pub const MAX_EVENT_COST_USD: f64 = 1e6;

/// Tasks a `toy` benchmark may generate.
pub const MAX_TOY_SIZE: u64 = 1_000_000;
/// Longest mock latency, in milliseconds (one hour).
pub const MAX_LATENCY_MS: u64 = 3_600_000;
/// Repetitions of each task.
pub const MAX_REPETITIONS: u32 = 1_000;
/// Longest a task's agent may be allowed to run, in seconds (seven days).
pub const MAX_WALL_SECONDS: f64 = 604_800.0;
/// What a task's agent may run for when the config does not say (one hour).
pub const DEFAULT_WALL_SECONDS: f64 = 3_600.0;
/// Largest per-task token limit.
pub const MAX_TASK_TOKENS: u64 = 1_000_000_000_000;
/// Largest per-task cost limit, in US dollars.
pub const MAX_TASK_COST_USD: f64 = 1e6;
/// Largest run cost limit, in US dollars.
pub const MAX_RUN_COST_USD: f64 = 1e9;
/// Most trace events a task may be allowed.
pub const MAX_TRACE_EVENTS: u64 = 1_000_000;
/// Trace events a task may emit when the config does not say.
pub const DEFAULT_TRACE_EVENTS: u64 = 10_000;
/// Most trace bytes a task may be allowed (1 GiB).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// Trace bytes a task may write when the config does not say (64 MiB).
pub const DEFAULT_TRACE_BYTES: u64 = 64 << 20;
/// Largest scratch-folder allowance of one task (16 TiB).
pub const MAX_DISK_BYTES: u64 = 16 << 40;
/// What an agent's scratch folder may hold when the config does not say (4 GiB).
pub const DEFAULT_DISK_BYTES: u64 = 4 << 30;
/// Longest case (one line of a JSONL case file, one entry of a YAML one) a config may allow (256 MiB).
pub const MAX_CASE_BYTES: u64 = 256 << 20;
/// Most artifact bytes a task may keep.
pub const MAX_ARTIFACT_BYTES: u64 = 1 << 30;
/// Longest case when the config does not say (1 MiB).
pub const DEFAULT_CASE_BYTES: u64 = 1 << 20;
/// Largest benchmark data file a config may allow, after decompression (16 GiB).
pub const MAX_DATA_FILE_BYTES: u64 = 16 << 30;
/// Largest benchmark data file when the config does not say, after decompression (256 MiB).
pub const DEFAULT_DATA_FILE_BYTES: u64 = 256 << 20;
/// Jobs running at once.
pub const MAX_CONCURRENT_JOBS: u32 = 10_000;
/// Tasks in one job.
pub const MAX_TASKS_PER_JOB: u32 = 100_000;
/// Dispatches of one task.
pub const MAX_ATTEMPTS: u32 = 100;
/// Longest a run keeps trying to launch a job that fails to launch, in seconds (one day).
pub const MAX_LAUNCH_DEADLINE_SECONDS: u64 = 86_400;
/// RunTask calls in a burst.
pub const MAX_LAUNCH_BURST: u32 = 10_000;
/// Sustained RunTask calls per second.
pub const MAX_LAUNCH_PER_SECOND: f64 = 1_000.0;
/// Shortest poll interval, in seconds.
pub const MIN_POLL_SECONDS: f64 = 0.1;
/// Longest poll or metrics interval, in seconds (one day).
pub const MAX_INTERVAL_SECONDS: f64 = 86_400.0;
/// Longest single telemetry export, in seconds.
pub const MAX_EXPORT_TIMEOUT_SECONDS: f64 = 600.0;
/// Largest config file read, in bytes: a config is a page of YAML, not a data set.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Model calls the `llm` agent may make on one task.
pub const MAX_TURNS: u32 = 10_000;
/// Model calls per task when the config does not say.
pub const DEFAULT_TURNS: u32 = 10;
/// Tasks one worker may run at once (`backend.tasks_in_parallel`).
pub const MAX_TASKS_IN_PARALLEL: u32 = 1_000;
/// Longest a HumanEval check may run, in seconds.
pub const MAX_CHECK_SECONDS: f64 = 600.0;
