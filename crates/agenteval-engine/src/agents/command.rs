//! The `command` agent: an external program speaking the JSON-lines agent protocol
//! (`docs/agent-protocol.md`). Anything it does wrong becomes an `agent_error`, never a crash.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use agenteval_core::config::InheritEnv;
use agenteval_core::model::{AgentFault, EventKind, TerminatedBy};
use agenteval_core::traits::{AgentContext, AgentEvent, AgentNeeds, AgentOutcome, AgentRunner, EventSink};

use crate::isolation::confine::{self, Net};
use crate::isolation::sandbox::{self, View};
use crate::isolation::{TreeGuard, disk, warn_unsandboxed};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Longest stdout line accepted; a longer one is garbage, not an event.
const MAX_LINE: usize = 4 * 1024 * 1024;
/// How much of the program's stderr is kept for the error message.
const STDERR_TAIL: usize = 4096;

#[derive(Debug, Clone)]
pub struct CommandAgent {
    program: Vec<String>,
    env: BTreeMap<String, String>,
    workdir: Option<PathBuf>,
    model: Option<String>,
    /// The agent's filesystem view; `None` when the config turned the sandbox off.
    sandbox: Option<View>,
    /// Variables of the worker's environment passed on besides the protocol's own.
    inherit: InheritEnv,
}

impl CommandAgent {
    /// The protocol's request line: the task, the model, the limits, the scratch folder, and the
    /// task's environment when it has one.
    fn request(
        &self,
        ctx: &AgentContext<'_>,
        scratch: Option<&std::path::Path>,
        max_disk: u64,
        socket: Option<&std::path::Path>,
    ) -> serde_json::Value {
        let environment = match (&ctx.env.session, socket) {
            (Some(s), Some(socket)) => json!({
                "kind": s.env.kind(),
                "workdir": s.handle.workdir,
                "socket": socket,
                "exec": [sandbox::launcher(), "env", "exec", "--"],
            }),
            _ => serde_json::Value::Null,
        };
        json!({
            "protocol": 1,
            "run_id": ctx.run_id,
            "task_id": ctx.task.id,
            "input": ctx.task.input,
            "model": self.model,
            "limits": {
                "max_tokens": ctx.limits.max_tokens,
                "max_wall_seconds": ctx.limits.wall_seconds(),
                "max_cost_usd": ctx.limits.max_cost_usd,
                "max_disk_bytes": max_disk,
            },
            "scratch_dir": scratch,
            "environment": environment,
        })
    }

    pub fn new(
        program: Vec<String>,
        env: BTreeMap<String, String>,
        workdir: Option<PathBuf>,
        model: Option<String>,
        sandbox: Option<View>,
    ) -> Self {
        CommandAgent { program, env, workdir, model, sandbox, inherit: InheritEnv::default() }
    }

    /// Passes these variables of the worker's environment on to the agent.
    pub fn inheriting(mut self, inherit: InheritEnv) -> Self {
        self.inherit = inherit;
        self
    }

    /// The program and arguments, a relative path that names a file in the config's folder
    /// made absolute: the agent runs in its scratch folder, not the config's.
    fn argv(&self) -> Vec<String> {
        self.program
            .iter()
            .map(|a| match &self.workdir {
                Some(w) if !a.starts_with('/') && !a.starts_with('-') && w.join(a).exists() => {
                    w.join(a).display().to_string()
                }
                _ => a.clone(),
            })
            .collect()
    }
}

/// Whether `prog` names a program that can be started: found on `PATH` (or at its path) and
/// executable.
pub fn runnable(prog: &str) -> agenteval_core::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(path) = sandbox::which(prog) else {
        return Err(agenteval_core::Error::invalid("not found on PATH"));
    };
    match std::fs::metadata(&path) {
        Err(_) => Err(agenteval_core::Error::invalid(format!("{} does not exist", path.display()))),
        Ok(m) if m.is_dir() => Err(agenteval_core::Error::invalid(format!("{} is a folder", path.display()))),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Err(agenteval_core::Error::invalid(format!("{} is not executable", path.display())))
        }
        Ok(_) => Ok(path),
    }
}

/// Variables of the worker's environment an agent still gets; everything else (credentials of
/// the worker's cloud role above all) is left out.
const PASSED_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Says once per process that agents' TCP connections are not restricted, and why.
fn warn_unrestricted_tcp() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!("agents may connect to any TCP port: this kernel lacks Landlock's network rules (Linux 6.7)")
    });
}

/// One stdout line of the protocol.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvent {
    kind: EventKind,
    #[serde(default)]
    payload: serde_json::Value,
    #[serde(default)]
    cost_usd: f64,
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// How long output is still read once the agent's own process has exited: enough for the pipe
/// to drain, not enough for a background child holding stdout to keep the task.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

fn agent_error(msg: impl Into<String>) -> AgentOutcome {
    AgentOutcome::stopped(TerminatedBy::AgentError, msg.into())
}

fn cannot_start(prog: &str, why: impl std::fmt::Display) -> AgentOutcome {
    AgentOutcome::faulted(AgentFault::CannotStart, format!("cannot start agent `{prog}`: {why}"))
}

/// Whether an agent's last stderr lines say a connection was refused it the way the sandbox
/// refuses one (Landlock's `EACCES` on `connect`, seccomp's `EPERM` on an IP `socket`), as
/// Python, Node, curl and the C library print it. Read only under a sandbox that restricts the
/// network, where that is the likely cause.
fn refused_connection(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    let denied = ["permission denied", "operation not permitted", "eacces", "eperm", "errno 13]", "errno 1]"];
    let network = ["connect", "socket", "http", "url", "tcp", "port ", "network"];
    denied.iter().any(|d| s.contains(d)) && network.iter().any(|n| s.contains(n))
}

/// The protocol as read from the agent's stdout, one line at a time.
#[derive(Default)]
struct Protocol {
    /// Lines read so far, blank ones included (error messages count from 1).
    lines: usize,
    /// Events accepted.
    events: usize,
    terminal_seen: bool,
    final_answer: Option<serde_json::Value>,
    /// A line was not a protocol event.
    not_protocol: bool,
    /// The text of the `agent.message` just read, for the conversation to answer.
    said: Option<String>,
}

type Problem = (TerminatedBy, String);

impl Protocol {
    /// Takes one raw line; an error ends the task.
    async fn line(&mut self, raw: &[u8], sink: &mut dyn EventSink) -> Result<(), Problem> {
        let agent_error = |msg: String| Err((TerminatedBy::AgentError, msg));
        self.lines += 1;
        let n = self.lines;
        if raw.len() > MAX_LINE {
            return agent_error(format!("output line {n} is longer than {MAX_LINE} bytes"));
        }
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        if self.terminal_seen {
            return agent_error(format!("output line {n} comes after agent.terminal"));
        }
        let ev: WireEvent = match serde_json::from_str(text) {
            Ok(ev) => ev,
            Err(e) => {
                let shown: String = text.chars().take(80).collect();
                self.not_protocol = true;
                return agent_error(format!("output line {n} is not a protocol event ({e}): {shown:?}"));
            }
        };
        // Scores and verdicts are the graders' to write: one from the agent would read as a
        // grade in `show`, the report and the UI; model calls are the gateway's to report, and a
        // simulated user's turns the user's.
        if matches!(
            ev.kind,
            EventKind::EvaluatorScore | EventKind::PolicyVerdict | EventKind::ModelCall | EventKind::UserMessage
        ) {
            let kind = serde_json::to_value(ev.kind).ok().and_then(|v| v.as_str().map(str::to_string));
            return agent_error(format!(
                "output line {n}: an agent cannot emit `{}` events (graders and the gateway write them)",
                kind.unwrap_or_default()
            ));
        }
        let mut problem = None;
        if ev.kind == EventKind::AgentMessage {
            self.said = Some(ev.payload.get("text").and_then(|t| t.as_str()).unwrap_or_default().to_string());
        }
        if ev.kind == EventKind::AgentTerminal {
            self.terminal_seen = true;
            self.final_answer = ev.payload.get("final_answer").cloned();
            if self.final_answer.is_none() {
                problem = Some((TerminatedBy::AgentError, "agent.terminal has no payload.final_answer".into()));
            }
        }
        self.events += 1;
        let event = AgentEvent {
            kind: Some(ev.kind),
            payload: ev.payload,
            cost_usd: ev.cost_usd,
            input_tokens: ev.input_tokens,
            output_tokens: ev.output_tokens,
        };
        if let Err(stop) = sink.emit(event).await {
            return Err((stop.terminated_by, stop.reason));
        }
        problem.map_or(Ok(()), Err)
    }
}

/// What waiting for the next stdout line came to.
enum Next {
    Line(std::io::Result<usize>),
    /// The agent exited and its output did not end in time.
    Drained,
    /// The scratch folder went over its limit.
    DiskFull(String),
}

/// Reads the agent's events until its output ends, it breaks the protocol, its scratch folder
/// fills, or it has exited and the pipe stays open past `DRAIN_AFTER_EXIT`. Returns the
/// protocol's state, why the task must end (if it must), and the exit status if already seen.
async fn read_events(
    child: &mut tokio::process::Child,
    mut disk: Option<disk::Watch>,
    sink: &mut dyn EventSink,
    mut talk: Option<&mut super::converse::Talk<'_>>,
) -> (Protocol, Option<Problem>, Option<std::io::Result<std::process::ExitStatus>>) {
    let stdout = child.stdout.take().expect("stdout piped");
    let mut lines = BufReader::new(stdout);
    let mut protocol = Protocol::default();
    let mut buf = Vec::new();
    let mut exited = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    loop {
        buf.clear();
        // A read cancelled by another branch keeps what it read in `buf`; the next one goes on.
        let next = loop {
            let mut limited = (&mut lines).take(MAX_LINE as u64 + 1);
            let read_line = limited.read_until(b'\n', &mut buf);
            let disk_due = disk.as_ref().map_or_else(far_future, disk::Watch::due);
            tokio::select! {
                r = read_line => break Next::Line(r),
                st = child.wait(), if exited.is_none() => {
                    exited = Some(st);
                    drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                }
                _ = tokio::time::sleep_until(drain_until.unwrap_or_else(far_future)), if drain_until.is_some() => {
                    break Next::Drained;
                }
                _ = tokio::time::sleep_until(disk_due), if disk.is_some() => {
                    if let Some(why) = disk.as_mut().expect("checked").check().await {
                        break Next::DiskFull(why);
                    }
                }
            }
        };
        let problem = match next {
            Next::Drained | Next::Line(Ok(0)) => None,
            Next::DiskFull(why) => Some((TerminatedBy::LimitDisk, why)),
            Next::Line(Err(e)) => Some((TerminatedBy::AgentError, format!("reading agent output: {e}"))),
            Next::Line(Ok(_)) => match protocol.line(&buf, sink).await {
                Ok(()) => match (talk.as_deref_mut(), protocol.said.take()) {
                    (Some(t), Some(said)) => match t.heard(&said, sink).await {
                        Ok(()) => continue,
                        Err(problem) => Some(problem),
                    },
                    _ => continue,
                },
                Err(problem) => Some(problem),
            },
        };
        return (protocol, problem, exited);
    }
}

#[async_trait]
impl AgentRunner for CommandAgent {
    fn name(&self) -> &str {
        "command"
    }

    fn needs(&self) -> AgentNeeds {
        AgentNeeds { usage_unknown_unless_metered: true, ..AgentNeeds::default() }
    }

    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome {
        let argv = self.argv();
        let Some((prog, args)) = argv.split_first() else {
            return agent_error("agent.command is empty");
        };
        // Said plainly before anything starts: through the sandbox launcher a missing program
        // would only be an exit status 127.
        if let Err(why) = runnable(prog) {
            return cannot_start(prog, why);
        }
        // A scratch folder for the agent: the benchmark's if it prepared one, else a fresh
        // temporary folder removed when this function returns.
        let own_scratch = match &ctx.env.workdir {
            Some(_) => None,
            None => match tempfile::Builder::new().prefix(&format!("agenteval-{}-", ctx.task.id)).tempdir() {
                Ok(d) => Some(d),
                Err(e) => return agent_error(format!("cannot create a scratch folder: {e}")),
            },
        };
        let scratch = ctx.env.workdir.clone().or_else(|| own_scratch.as_ref().map(|d| d.path().to_path_buf()));
        let max_disk = ctx.limits.disk_bytes();
        let (mut view, _uid) = match self.task_view(prog, args, scratch.as_deref(), max_disk, ctx) {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        // A task with an environment: the agent acts in it through a socket in its scratch
        // folder, and may run this binary's `env exec` helper that speaks it.
        let socket = match (&ctx.env.session, &scratch) {
            (Some(_), Some(dir)) => Some(dir.join("agenteval-env.sock")),
            _ => None,
        };
        let owner = crate::environments::socket::Owner::default();
        let _served = match (&ctx.env.session, &socket) {
            (Some(s), Some(path)) => {
                match crate::environments::socket::serve(s.clone(), path, ctx.limits.wall_seconds(), owner.clone()) {
                    Ok(served) => Some(served),
                    Err(e) => {
                        return AgentOutcome::stopped(TerminatedBy::InfraFailure, e.to_string());
                    }
                }
            }
            _ => None,
        };
        if let (Some(v), Some(_), Some(exe)) = (view.as_mut(), &socket, sandbox::launcher()) {
            v.read.push(exe.to_path_buf());
        }
        if let (Some(v), Some(g)) = (view.as_mut(), ctx.gateway) {
            open_to_gateway(v, g.port);
        }
        // A conversation opens before the agent starts: its request holds the user's first turn.
        let mut talk = match ctx.user {
            Some(user) => match super::converse::open(user, sink).await {
                Ok(t) => Some(t),
                Err(outcome) => return outcome,
            },
            None => None,
        };
        let mut cmd = self.command(prog, args, view.as_ref(), scratch.as_deref(), ctx);
        if let Some(path) = &socket {
            cmd.env(agenteval_core::environment::ENV_SOCKET_VAR, path);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return cannot_start(prog, e),
        };
        let _guard = TreeGuard(child.id().map(|p| p as i32));
        if let Some(pid) = child.id() {
            let _ = owner.set(pid as i32);
        }

        let mut request = self.request(ctx, scratch.as_deref(), max_disk, socket.as_deref());
        if let Some(t) = &talk {
            request["conversation"] = t.request();
        }
        send_request(&mut child, &request, talk.as_mut()).await;
        let stderr_task = tokio::spawn(stderr_tail(child.stderr.take().expect("stderr piped")));

        let watch = scratch.clone().map(|dir| disk::Watch::new(dir, max_disk));
        let (protocol, mut problem, exited) = read_events(&mut child, watch, sink, talk.as_mut()).await;
        if problem.is_some()
            && let Some(pid) = child.id()
        {
            // The whole tree: the supervisor alone would leave the agent holding the pipes.
            crate::isolation::reap::kill_tree(pid as i32);
        }
        let status = match exited {
            Some(st) => st,
            None => child.wait().await,
        };
        if problem.is_none() {
            problem = disk_left(&status, scratch.as_deref(), max_disk);
        }
        // A descendant that escaped the kill could hold stderr open: wait for it only briefly.
        let stderr_tail =
            tokio::time::timeout(DRAIN_AFTER_EXIT, stderr_task).await.ok().and_then(Result::ok).unwrap_or_default();
        let restricted = view.as_ref().is_some_and(|v| !matches!(v.net, Net::All));
        finish(&protocol, problem, status, &stderr_tail, restricted)
    }
}

/// Writes the request line to the agent's stdin, and closes it unless a conversation goes on
/// there (its next turns come the same way).
async fn send_request(
    child: &mut tokio::process::Child,
    request: &serde_json::Value,
    talk: Option<&mut super::converse::Talk<'_>>,
) {
    let Some(mut stdin) = child.stdin.take() else { return };
    let mut line = request.to_string();
    line.push('\n');
    // An agent that exits without reading its input is judged by its output.
    let _ = stdin.write_all(line.as_bytes()).await;
    match talk {
        Some(t) if !t.ended => t.stdin = Some(stdin),
        _ => drop(stdin),
    }
}

/// The model gateway is reachable whatever the config's network rule says: its port is added.
fn open_to_gateway(view: &mut View, port: u16) {
    view.net = match std::mem::replace(&mut view.net, Net::None) {
        Net::All => Net::All,
        Net::None => Net::Tcp(vec![port]),
        Net::Tcp(mut ports) => {
            ports.push(port);
            Net::Tcp(ports)
        }
    };
}

/// The last `STDERR_TAIL` bytes of the agent's stderr (read up to 1 MiB).
async fn stderr_tail(mut stderr: tokio::process::ChildStderr) -> String {
    let mut buf = Vec::new();
    let _ = (&mut stderr).take(1024 * 1024).read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
    text[start..].to_string()
}

/// What the agent left behind counts too: it may have written its last gigabytes after the last
/// measurement, or been killed by the kernel for one file too large.
fn disk_left(
    status: &std::io::Result<std::process::ExitStatus>,
    scratch: Option<&std::path::Path>,
    max_disk: u64,
) -> Option<(TerminatedBy, String)> {
    let killed_by_size = matches!(status, Ok(st) if st.code() == Some(disk::KILLED_BY_FILE_SIZE));
    let left = scratch.and_then(|dir| disk::over(disk::usage(dir, max_disk), max_disk));
    match (left, killed_by_size) {
        (Some(why), _) => Some((TerminatedBy::LimitDisk, why)),
        (None, true) => Some((
            TerminatedBy::LimitDisk,
            format!("the agent wrote a file past {max_disk} bytes (limits.max_disk_bytes)"),
        )),
        (None, false) => None,
    }
}

/// The outcome of a run whose protocol was read to its end: a limit or protocol problem, a
/// failed exit, a missing `agent.terminal`, else the final answer. Errors end with the tail of
/// the agent's stderr, and the fault when the agent could not run at all: its output broke the
/// protocol, it exited before its first event, or (under a sandbox that restricts the network,
/// `restricted`) its stderr says a connection was refused it.
fn finish(
    protocol: &Protocol,
    problem: Option<(TerminatedBy, String)>,
    status: std::io::Result<std::process::ExitStatus>,
    stderr_tail: &str,
    restricted: bool,
) -> AgentOutcome {
    let with_stderr = |msg: String| {
        if stderr_tail.trim().is_empty() { msg } else { format!("{msg}; stderr: {}", stderr_tail.trim()) }
    };
    let mut outcome = match (problem, status) {
        (Some((term, msg)), _) => AgentOutcome::stopped(term, with_stderr(msg)),
        (None, Ok(st)) if st.success() && !protocol.terminal_seen => {
            agent_error(with_stderr("agent exited without an agent.terminal event".into()))
        }
        (None, Ok(st)) if st.success() => {
            return AgentOutcome { final_answer: protocol.final_answer.clone(), ..Default::default() };
        }
        (None, Ok(st)) if protocol.events == 0 => {
            let mut o = agent_error(with_stderr(format!("agent exited with {st} before sending any protocol event")));
            o.fault = st.code().map(AgentFault::ExitedBeforeProtocol);
            o
        }
        (None, Ok(st)) => agent_error(with_stderr(format!("agent exited with {st}"))),
        (None, Err(e)) => return agent_error(format!("waiting for agent: {e}")),
    };
    if outcome.error.as_ref().is_some_and(|(t, _)| *t == TerminatedBy::AgentError) {
        if protocol.not_protocol {
            outcome.fault = Some(AgentFault::NotProtocol);
        } else if restricted && refused_connection(stderr_tail) {
            outcome.fault = Some(AgentFault::NetworkRefused);
        }
    }
    outcome
}

impl CommandAgent {
    /// The filesystem view the agent runs in, or `None` (with a warning said once) when it runs
    /// unsandboxed.
    /// `Err` when a root worker's agent could not read its own program (it never runs as root).
    fn view(
        &self,
        prog: &str,
        args: &[String],
        scratch: Option<&std::path::Path>,
        max_disk: u64,
    ) -> Result<Option<View>, String> {
        let Some(view) = self.sandbox.as_ref() else { return Ok(None) };
        if sandbox::launcher().is_none() {
            warn_unsandboxed("no sandbox launcher in this process");
            return Ok(None);
        }
        if !sandbox::available() {
            warn_unsandboxed("this kernel does not enforce Landlock (see docs/security.md)");
        } else if matches!(view.net, Net::Tcp(_)) && !sandbox::tcp_rules_available() {
            warn_unrestricted_tcp();
        }
        let mut view = view.clone();
        let named: Vec<PathBuf> = args.iter().map(PathBuf::from).filter(|p| p.is_absolute() && p.exists()).collect();
        if view.user.is_some() {
            // An agent that could not read its own program is refused: it never runs as root.
            for p in sandbox::which(prog).iter().chain(&named) {
                if let Some(blocking) = confine::unreadable_part(p) {
                    return Err(confine::unreadable_message(p, &blocking));
                }
            }
        }
        view.read.extend(sandbox::program_files(prog));
        view.read.extend(named);
        // No single file past the disk limit: the kernel stops it as it is written, between
        // two measurements of the scratch folder.
        view.max_file_bytes = Some(max_disk);
        if let Some(scratch) = scratch {
            view = view.with_scratch(scratch);
        }
        Ok(Some(view))
    }

    /// The task's view (its tests and solution hidden however the config's `read` reaches
    /// them) and, under a root worker, the uid of its own the agent runs as, held until dropped.
    fn task_view(
        &self,
        prog: &str,
        args: &[String],
        scratch: Option<&std::path::Path>,
        max_disk: u64,
        ctx: &AgentContext<'_>,
    ) -> Result<(Option<View>, Option<crate::isolation::uids::Lease>), AgentOutcome> {
        let mut view = self.view(prog, args, scratch, max_disk).map_err(|why| cannot_start(prog, why))?;
        let lease = view
            .as_mut()
            .map(View::lease_user)
            .transpose()
            .map_err(|e| AgentOutcome::stopped(TerminatedBy::InfraFailure, e.to_string()))?;
        if let Some(v) = view.as_mut() {
            let real = |p: &std::path::Path| p.canonicalize().unwrap_or(p.to_path_buf());
            v.exclude.extend(ctx.task.tests.iter().filter_map(|t| t.dir.as_deref()).map(real));
            v.exclude.extend(ctx.task.solution.as_deref().map(real));
        }
        Ok((view, lease.flatten()))
    }

    /// The agent's process, not yet started: supervised, in its own process group, with only the
    /// environment it is owed.
    fn command(
        &self,
        prog: &str,
        args: &[String],
        view: Option<&View>,
        scratch: Option<&std::path::Path>,
        ctx: &AgentContext<'_>,
    ) -> tokio::process::Command {
        // Under the task's own supervisor, which the sandbox restricts and then replaces by the
        // agent: the worker stays unrestricted, and no unsafe `pre_exec` is needed.
        let os_args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        let mut std_cmd = sandbox::supervised(prog.as_ref(), &os_args, view);
        std_cmd.env_clear();
        for var in PASSED_ENV {
            if let Some(v) = std::env::var_os(var) {
                std_cmd.env(var, v);
            }
        }
        match &self.inherit {
            InheritEnv::All(true) => {
                std_cmd.envs(std::env::vars_os());
            }
            InheritEnv::All(false) => {}
            InheritEnv::Names(names) => {
                for name in names {
                    if let Some(v) = std::env::var_os(name) {
                        std_cmd.env(name, v);
                    }
                }
            }
        }
        std_cmd.envs(&self.env).envs(&ctx.env.vars);
        if let Some(g) = ctx.gateway {
            std_cmd.envs(g.env(false));
            // A proxy of the worker's must not carry the calls to the gateway on this machine.
            for var in ["NO_PROXY", "no_proxy"] {
                let mut v = std::env::var(var).unwrap_or_default();
                if !v.is_empty() {
                    v.push(',');
                }
                v.push_str("127.0.0.1,localhost");
                std_cmd.env(var, v);
            }
        }
        if let Some(scratch) = scratch {
            std_cmd
                .env("AGENTEVAL_SCRATCH_DIR", scratch)
                .env("HOME", scratch)
                .env("TMPDIR", scratch)
                .current_dir(scratch);
        } else if let Some(w) = &self.workdir {
            std_cmd.current_dir(w);
        }
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
        for (var, secret) in ctx.secrets {
            cmd.env(var, secret.expose());
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    /// Keeps what it is given; stops after `limit` events, as a sink at its token limit does.
    #[derive(Default)]
    struct Kept {
        events: Vec<AgentEvent>,
        limit: Option<usize>,
    }

    #[async_trait]
    impl EventSink for Kept {
        async fn emit(&mut self, event: AgentEvent) -> Result<(), agenteval_core::traits::Stop> {
            if self.limit.is_some_and(|l| self.events.len() >= l) {
                return Err(agenteval_core::traits::Stop {
                    terminated_by: TerminatedBy::LimitTokens,
                    reason: "past max_tokens".into(),
                });
            }
            self.events.push(event);
            Ok(())
        }
    }

    /// Feeds `lines` to a fresh protocol: the first problem (kind and message), the events kept.
    fn read(lines: &[&str], limit: Option<usize>) -> (Protocol, Option<(TerminatedBy, String)>, usize) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut p = Protocol::default();
            let mut sink = Kept { limit, ..Default::default() };
            let mut problem = None;
            for l in lines {
                if let Err(e) = p.line(l.as_bytes(), &mut sink).await {
                    problem = Some(e);
                    break;
                }
            }
            (p, problem, sink.events.len())
        })
    }

    #[test]
    fn the_protocol_takes_events_and_refuses_what_is_not_one() {
        let step = r#"{"kind": "agent.plan", "payload": {"n": 1}}"#;
        let done = r#"{"kind": "agent.terminal", "payload": {"final_answer": "42"}}"#;
        let long = format!(r#"{{"kind": "agent.plan", "payload": "{}"}}"#, "x".repeat(MAX_LINE));
        // (lines, the problem's kind and a word of its message, events kept, not_protocol)
        type Row<'a> = (Vec<&'a str>, Option<(TerminatedBy, &'a str)>, usize, bool);
        let table: Vec<Row> = vec![
            (vec![step, "", "  ", done], None, 2, false),
            (vec!["debug: starting"], Some((TerminatedBy::AgentError, "line 1 is not a protocol event")), 0, true),
            (vec![step, "{\"kind\": \"no.such\"}"], Some((TerminatedBy::AgentError, "line 2 is not")), 1, true),
            (vec![done, step], Some((TerminatedBy::AgentError, "line 2 comes after agent.terminal")), 1, false),
            (
                vec![r#"{"kind": "agent.terminal", "payload": {}}"#],
                Some((TerminatedBy::AgentError, "no payload.final_answer")),
                1,
                false,
            ),
            (
                vec![r#"{"kind": "evaluator.score", "payload": {"score": 1}}"#],
                Some((TerminatedBy::AgentError, "cannot emit `evaluator.score`")),
                0,
                false,
            ),
            (
                vec![r#"{"kind": "model.call", "payload": {}}"#],
                Some((TerminatedBy::AgentError, "graders and the gateway write them")),
                0,
                false,
            ),
            (
                vec![r#"{"kind": "user.message", "payload": {"text": "STOP", "ends": true}}"#],
                Some((TerminatedBy::AgentError, "cannot emit `user.message`")),
                0,
                false,
            ),
            (vec![long.as_str()], Some((TerminatedBy::AgentError, "longer than")), 0, false),
        ];
        for (lines, want, kept, not_protocol) in table {
            let (p, got, n) = read(&lines, None);
            match (&want, &got) {
                (None, None) => {}
                (Some((kind, says)), Some((k, msg))) => {
                    assert_eq!(kind, k, "{lines:?}: {msg}");
                    assert!(msg.contains(says), "{lines:?}: {msg}");
                }
                _ => panic!("{lines:?}: wanted {want:?}, got {got:?}"),
            }
            assert_eq!(n, kept, "{lines:?}");
            assert_eq!(p.not_protocol, not_protocol, "{lines:?}");
        }
        let (p, problem, _) = read(&[step, done], None);
        assert!(problem.is_none() && p.terminal_seen && p.final_answer == Some(json!("42")));
        // A sink that stops the agent (a limit) ends the protocol for the sink's reason.
        let (_, problem, n) = read(&[step, step, step], Some(2));
        assert_eq!((problem.map(|p| p.0), n), (Some(TerminatedBy::LimitTokens), 2));
    }

    fn status(code: i32) -> std::io::Result<std::process::ExitStatus> {
        Ok(std::process::ExitStatus::from_raw(code << 8))
    }

    #[test]
    fn an_ending_is_its_fault_set_where_it_is_known() {
        let none = Protocol::default();
        let started = Protocol { events: 1, ..Default::default() };
        let chatty = Protocol { not_protocol: true, ..Default::default() };
        let done = Protocol { events: 1, terminal_seen: true, final_answer: Some(json!("a")), ..Default::default() };
        let refused = "PermissionError: [Errno 13] Permission denied: connect to 127.0.0.1:11434";
        let not_proto = Some((TerminatedBy::AgentError, "output line 1 is not a protocol event".to_string()));
        // (protocol, problem, exit status, stderr, restricted network) -> fault, ended by
        type Row<'a> = (
            &'a Protocol,
            Option<(TerminatedBy, String)>,
            i32,
            &'a str,
            bool,
            Option<AgentFault>,
            Option<TerminatedBy>,
        );
        let table: Vec<Row> = vec![
            (&done, None, 0, "", true, None, None),
            (
                &none,
                None,
                2,
                "can't open file 'agnet.py'",
                true,
                Some(AgentFault::ExitedBeforeProtocol(2)),
                Some(TerminatedBy::AgentError),
            ),
            (&none, None, 1, refused, true, Some(AgentFault::NetworkRefused), Some(TerminatedBy::AgentError)),
            (&started, None, 1, refused, true, Some(AgentFault::NetworkRefused), Some(TerminatedBy::AgentError)),
            // With the network open, the same words are the agent's own failure.
            (&none, None, 1, refused, false, Some(AgentFault::ExitedBeforeProtocol(1)), Some(TerminatedBy::AgentError)),
            (&started, None, 1, refused, false, None, Some(TerminatedBy::AgentError)),
            // Denied, but not a connection: a file the agent may not write.
            (
                &started,
                None,
                1,
                "PermissionError: [Errno 13] Permission denied: '/etc/passwd'",
                true,
                None,
                Some(TerminatedBy::AgentError),
            ),
            (&chatty, not_proto, 0, "", true, Some(AgentFault::NotProtocol), Some(TerminatedBy::AgentError)),
            (&started, None, 0, "", true, None, Some(TerminatedBy::AgentError)),
            (
                &started,
                Some((TerminatedBy::LimitDisk, "full".into())),
                1,
                refused,
                true,
                None,
                Some(TerminatedBy::LimitDisk),
            ),
        ];
        for (protocol, problem, code, stderr, restricted, fault, by) in table {
            let o = finish(protocol, problem, status(code), stderr, restricted);
            assert_eq!(o.fault, fault, "{code} {stderr:?} {restricted}: {o:?}");
            assert_eq!(o.error.as_ref().map(|e| e.0), by, "{o:?}");
            if let Some((_, msg)) = &o.error {
                assert!(!msg.contains("Some(") && !msg.contains("ExitStatus("), "no Debug output: {msg}");
            }
        }
    }
}
