//! Task environments, as data: what a task asks of its environment (`EnvSpec`), the handle of
//! one that was prepared (`EnvHandle`, plain data so that a later process can tear down what a
//! killed worker left), and a command run in it with its bounded output. The port itself,
//! `Environment`, is with the other ports in `traits`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a task asks of its environment. The benchmark fills it (a Harbor task from its
/// `task.toml` and `environment/` folder); the run's `environment:` settings add to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    /// A folder to build the task's image from (it holds a `Dockerfile`), or, for a workspace,
    /// to copy as the task's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<PathBuf>,
    /// An image to run as it is (no build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A git repository (a path or URL) checked out at `commit` as the task's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Where the agent works inside the environment; default: the image's `WORKDIR`, or the
    /// workspace folder itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// The environment may reach the network (off by default).
    #[serde(default)]
    pub network: bool,
    /// Without `network`: the hosts it may still reach, through agenteval's egress proxy
    /// (`HTTP_PROXY`/`HTTPS_PROXY`; Harbor's `network_mode = "allowlist"`): names, `*.` suffixes,
    /// addresses and CIDR ranges. `docker` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// How long building the image may take (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_timeout_secs: Option<f64>,
    /// The most the environment's own files may grow by while the agent works (a container's
    /// writable layer), in MB (Harbor's `storage_mb`); default [`DEFAULT_STORAGE_MB`]. Past it
    /// the task ends `limit_disk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_mb: Option<u64>,
    /// Set when `image` is the task's image with its installed agent's layer on it (a fleet that
    /// runs each task in its own image): the layer's key, which the image holds, so the worker
    /// installs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_layer: Option<String>,
    /// The user the agent's commands run as (the container's default user; Harbor's `[agent]
    /// user`); default: the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Variables every process of the environment gets (Harbor's `[environment] env`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// A command that must succeed before the agent starts (Harbor's `[environment.healthcheck]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthcheck: Option<Healthcheck>,
    /// Containers that run beside the agent's on the task's own network, reached by their names
    /// (Harbor's `docker-compose.yaml` services), started in this order. `docker` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<Sidecar>,
    /// Volumes the agent's container mounts (compose's named volumes, shared with sidecars).
    /// `docker` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// The agent may trace processes (`ptrace`: a debugging task; a Harbor task's
    /// `[environment] allow_ptrace = true`). Off by default: no process of a task container
    /// can trace another. Under Harbor's rules a pass of such a task is `suspect` unless its
    /// tests ran in a fresh environment (the agent could have traced the tests).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ptrace: bool,
    /// The MCP servers the task gives its agent (Harbor's `[[environment.mcp_servers]]`): each
    /// a sidecar reached by URL, or a program the agent's CLI starts (stdio).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServer>,
}

/// An MCP server of a task, as Harbor's task format names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The name the agent reaches its tools under.
    pub name: String,
    /// `streamable-http` (Harbor's `http`), `sse` or `stdio`.
    pub transport: String,
    /// Where an HTTP server answers (a sidecar's name as its host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The program a `stdio` server is, in the agent's container, and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

/// A container beside the task's: its image (built from `context`, or `image`), variables,
/// command, and the check it must pass before the next one (and the agent) starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sidecar {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables of `env` whose value the run gives when the sidecar starts (compose's
    /// `KEY: ${VAR}` with `VAR` none of the task's own): `KEY` → `VAR`, filled from the run's
    /// `roles.tools.secrets` (empty, as Compose leaves an unset variable, when it names none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub from_run: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthcheck: Option<Healthcheck>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
}

/// A volume a task's container mounts at `target`: a named one (`name`), made for the task
/// attempt, shared by every container of it that names it and removed with it; or, without a
/// name, the container's own. Never a host folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub target: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// A readiness check, as Harbor's: `command` (exit 0: healthy) every `interval_secs`, each try
/// within `timeout_secs`, failures during `start_period_secs` not counted, at most `retries`
/// counted failures; then the task is `infra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Healthcheck {
    pub command: String,
    #[serde(default = "five")]
    pub interval_secs: f64,
    #[serde(default = "thirty")]
    pub timeout_secs: f64,
    #[serde(default)]
    pub start_period_secs: f64,
    #[serde(default = "three")]
    pub retries: u32,
}

fn five() -> f64 {
    5.0
}
fn thirty() -> f64 {
    30.0
}
fn three() -> u32 {
    3
}

/// A task environment's writable storage when its task names none: 10 GiB.
pub const DEFAULT_STORAGE_MB: u64 = 10 * 1024;

/// A task's verifier: tests copied into its environment once the agent has stopped (never
/// before: the agent cannot read or change them), run there as root, and graded by the reward
/// they write or by their exit code. A Harbor task's `tests/`; a case's `tests`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestsSpec {
    /// The folder copied to `<root>/tests` (`/tests` in a container). `None`: the command alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Run by `bash -c` in the agent's working folder; default `bash $AGENTEVAL_TESTS_DIR/test.sh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Seconds the tests may run (default 600, as Harbor's); `timeout_seconds` too, as the
    /// config's evaluators spell it.
    #[serde(default, alias = "timeout_seconds", skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    /// Variables the tests get (besides `AGENTEVAL_TESTS_DIR` and `AGENTEVAL_VERIFIER_DIR`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub reward: RewardFrom,
    /// Whose rules grade the reward: agenteval's strict ones (the default), or Harbor's (a
    /// Harbor task's default, `benchmark.grading: harbor`).
    #[serde(default, skip_serializing_if = "VerifierRules::is_strict")]
    pub rules: VerifierRules,
    /// The user the tests run as (Harbor's `[verifier] user`); default root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Where they run, when the task says (Harbor's `[verifier] environment_mode`: `shared` is
    /// `same`, `separate` is `fresh`); else the run's `environment.verify_in`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_in: Option<VerifyIn>,
    /// The network of a fresh environment the tests run in, when the task gives its verifier one
    /// of its own (Harbor's `[verifier] network_mode`): internet or not, and the allowed hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<(bool, Vec<String>)>,
}

/// Where a task's tests run (`environment.verify_in`, or the task's own say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyIn {
    #[default]
    Same,
    Fresh,
}

/// How a verifier's outcome becomes a grade.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifierRules {
    /// agenteval's: everything the agent left running is stopped before the tests, an agent
    /// stopped by any limit never passes, no reward is an evaluator error, several named rewards
    /// are averaged into one.
    #[default]
    Strict,
    /// Harbor's: the agent's services keep running while the tests run (a reward written by
    /// anything but the tests fails the task), an agent stopped by its timeout (or its own exit,
    /// or a token limit) is still graded and counted, no reward is `unscored` (left out of the
    /// mean, never a pass), `reward.json` is read before `reward.txt`, and named rewards are
    /// separate scores (the task passes when its `reward` is 1, or with no `reward` key, when
    /// every named reward is 1).
    Harbor,
}

impl VerifierRules {
    pub fn is_strict(&self) -> bool {
        *self == VerifierRules::Strict
    }
}

/// What a verifier's grade is read from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewardFrom {
    /// `reward.txt` (a number) or `reward.json` in the verifier's folder (Harbor's
    /// `/logs/verifier`); none written is an evaluator error.
    #[default]
    File,
    /// Exit 0 is reward 1, any other exit 0 (a test runner's own verdict, as SWE-bench reads it).
    ExitCode,
}

/// Where a verifier's files go in an environment whose worker root is `root` (`/` in a
/// container, the attempt's folder for a workspace): `(tests, verifier logs, solution)`.
pub fn verifier_paths(root: &str) -> (String, String, String) {
    let r = root.trim_end_matches('/');
    (format!("{r}/tests"), format!("{r}/logs/verifier"), format!("{r}/solution"))
}

/// A prepared environment, as data: which implementation made it, its id there (a container
/// id, a folder) and the agent's working folder in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvHandle {
    pub kind: String,
    pub id: String,
    pub workdir: String,
    /// What preparing it did, for the task's log (`image agenteval-env:… built in 12.3 s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A command to run in an environment. Its `Debug` names the variables, never their values (an
/// installed agent's keys travel in `env`).
#[derive(Clone)]
pub struct ExecRequest {
    /// Run by `bash -c` in the environment.
    pub command: String,
    pub timeout: Duration,
    /// A user of the environment (default: its own default user).
    pub user: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Default: the handle's `workdir`.
    pub workdir: Option<String>,
    /// Bytes of stdout and of stderr kept; the rest is counted, not kept.
    pub max_output_bytes: usize,
    /// Run with the grading's rights, not the agent's (the default). Where the environment can,
    /// an agent's command starts through agenteval's launcher, which drops a capability every
    /// other process of the environment keeps: the kernel then refuses the command, and all it
    /// starts, the memory, variables and files (`/proc/PID/mem`, `environ`, `root`) of any
    /// process it did not start (PID 1, the image's services, the hold, the tests).
    pub grader: bool,
}

impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field("timeout", &self.timeout)
            .field("user", &self.user)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("workdir", &self.workdir)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("grader", &self.grader)
            .finish()
    }
}

impl ExecRequest {
    pub fn new(command: impl Into<String>, timeout: Duration) -> Self {
        ExecRequest {
            command: command.into(),
            timeout,
            user: None,
            env: BTreeMap::new(),
            workdir: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT,
            grader: false,
        }
    }

    /// The same command, run with the grading's rights ([`ExecRequest::grader`]).
    pub fn as_grader(self) -> Self {
        ExecRequest { grader: true, ..self }
    }
}

/// Bytes of each output stream a command keeps unless it asks otherwise.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

/// What a command did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// `None` when it did not exit by itself (timed out, killed with its environment).
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// Bytes of output past `max_output_bytes` that were dropped (both streams).
    pub dropped_bytes: u64,
}

impl ExecOutput {
    pub fn ok(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// Keeps the first `max` bytes of a stream and counts the rest.
#[derive(Debug, Default)]
pub struct Bounded {
    pub kept: Vec<u8>,
    pub dropped: u64,
    max: usize,
}

impl Bounded {
    pub fn new(max: usize) -> Self {
        Bounded { kept: Vec::new(), dropped: 0, max }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.max.saturating_sub(self.kept.len());
        let take = room.min(bytes.len());
        self.kept.extend_from_slice(&bytes[..take]);
        self.dropped += (bytes.len() - take) as u64;
    }

    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!("\n… ({} more bytes not kept)", self.dropped));
        }
        s
    }
}

/// A command a `command` agent asks its task's environment to run: one JSON line on the socket
/// named by `AGENTEVAL_ENV_SOCKET` (`agenteval env exec` speaks it); the answer is one line of
/// [`ExecOutput`] (`docs/agent-protocol.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireExec {
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

/// A process as the environment saw it: its pid and its start time (clock ticks after boot,
/// `/proc/PID/stat`'s 22nd field). A pid alone is not a process: the kernel gives it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessMark {
    pub pid: u32,
    pub start: u64,
}

impl ProcessMark {
    /// `PID:START`, as the hold script reads its list.
    pub fn word(&self) -> String {
        format!("{}:{}", self.pid, self.start)
    }
}

/// Reads a `/proc/PID/stat` line: (state, parent pid, start time). The command name may hold
/// spaces and parentheses, so the fields are counted from its last `)`.
pub fn parse_proc_stat(line: &str) -> Option<(char, u32, u64)> {
    let rest = &line[line.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3rd field), ppid (4th) ... starttime (22nd).
    let state = f.first()?.chars().next()?;
    let ppid = f.get(1)?.parse().ok()?;
    let start = f.get(19)?.parse().ok()?;
    Some((state, ppid, start))
}

/// The variable naming the socket a `command` agent acts in its environment through.
pub const ENV_SOCKET_VAR: &str = "AGENTEVAL_ENV_SOCKET";

/// Labels every environment carries, so that what a killed worker left is found by run.
pub const LABEL_RUN: &str = "agenteval.run";
pub const LABEL_TASK: &str = "agenteval.task";
pub const LABEL_ATTEMPT: &str = "agenteval.attempt";

/// `s` as one word of a POSIX shell command line, whatever it holds.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Settings every git the worker runs over an agent's files gets on its command line (which no
/// configuration file overrides).
pub const HARDENED_GIT: &[&str] = &[
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "diff.external=",
    "-c",
    "gc.auto=0",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "user.name=agenteval",
    "-c",
    "user.email=agenteval@localhost",
];

/// The same settings as a shell prefix, for a git the worker runs inside an environment (to
/// apply a recorded patch): no configuration but the repository's own, no hooks, no fsmonitor.
pub fn hardened_shell_git() -> String {
    let settings: Vec<String> = HARDENED_GIT.chunks(2).map(|kv| format!("-c '{}'", kv[1])).collect();
    format!(
        "HOME=/nonexistent XDG_CONFIG_HOME=/nonexistent GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1 git {}",
        settings.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        let line = "4242 (evil) (x) y) S 17 4242 4242 0 -1 4194560 90 0 0 0 1 2 0 0 20 0 1 0 987654 2408448 389 18446744073709551615";
        assert_eq!(parse_proc_stat(line), Some(('S', 17, 987654)));
        assert_eq!(parse_proc_stat("12 (sh) T 1"), None, "too short a line is no process");
        assert_eq!(ProcessMark { pid: 12, start: 34 }.word(), "12:34");
    }

    #[test]
    fn a_request_shows_its_variables_names_not_their_values() {
        let mut r = ExecRequest::new("my-agent", Duration::from_secs(1));
        r.env.insert("OPENAI_API_KEY".into(), "sk-secret-value".into());
        let shown = format!("{r:?}");
        assert!(shown.contains("OPENAI_API_KEY") && !shown.contains("sk-secret-value"), "{shown}");
    }

    #[test]
    fn output_past_its_bound_is_counted_not_kept() {
        let mut b = Bounded::new(4);
        b.push(b"ab");
        b.push(b"cdef");
        assert_eq!(b.kept, b"abcd");
        assert_eq!(b.dropped, 2);
        assert_eq!(b.text(), "abcd\n… (2 more bytes not kept)");
    }
}
