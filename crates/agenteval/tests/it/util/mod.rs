//! Helpers shared by the end-to-end tests and the benchmarks (which include this file with
//! `#[path]`): a scratch workspace, running the real binary, reading bundles and the index,
//! the Python harness scripts, child processes that die with the test.

#![allow(dead_code)] // the tests and each benchmark use a different subset

pub mod otlp;
pub mod swebench;
pub mod ui;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_agenteval");

/// Repository root (for `examples/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    /// A folder others may read, as a project checkout is: run as root, agents run as an
    /// unprivileged user that must read their program here.
    pub fn new() -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Workspace { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A folder an agent writes into: writable by every user, since under a root worker an
    /// agent whose interpreter others can read runs as nobody.
    pub fn shared_dir(&self, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let p = self.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        p
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn runs(&self) -> PathBuf {
        self.path().join("runs")
    }

    pub fn index(&self) -> PathBuf {
        self.runs().join("index.sqlite")
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args).current_dir(self.path()).env("NO_COLOR", "1").env_remove("RUST_LOG").env("PATH", agent_path());
        // A stack profile of this machine's (`aws deploy`) must not fill in a test's config.
        c.env("AGENTEVAL_CONFIG_HOME", self.path().join(".agenteval-home")).env_remove("AGENTEVAL_STACK_PROFILE");
        // Tests choose their own telemetry; the machine's must not leak in.
        for (k, _) in std::env::vars() {
            if k.starts_with("OTEL_") || k == "TRACEPARENT" {
                c.env_remove(k);
            }
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `submit --json`, returning the parsed object and the exit code.
    pub fn submit(&self, config: &Path, extra: &[&str]) -> (serde_json::Value, i32, Output) {
        let mut args = vec!["submit", "--json", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "submit printed no JSON ({e}); status {:?}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v, out.status.code().unwrap_or(-1), out)
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    }

    pub fn validate(&self, bundle: &str) -> Output {
        self.run(&["validate-bundle", bundle])
    }
}

/// The `PATH` agenteval runs with in the tests: the machine's, with a `python3` that agents can
/// read first when the machine's own is one they cannot (a root-only pyenv under `/root`, as on
/// the CI machine): a root worker refuses such a program (exit 2), as the tests of that refusal
/// check. Agents then run the system's Python, as they would on a machine set up for them.
pub fn agent_path() -> std::ffi::OsString {
    static PATH: std::sync::OnceLock<std::ffi::OsString> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let unreadable = agenteval_engine::isolation::sandbox::which("python3")
            .is_some_and(|p| agenteval_engine::isolation::confine::unreadable_part(&p).is_some());
        let system = Path::new("/usr/bin/python3");
        if !unreadable || !system.exists() {
            return path;
        }
        let dir = std::env::temp_dir().join(format!("agenteval-test-python-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for name in ["python3", "python"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(system, &link).unwrap();
        }
        let mut joined = dir.into_os_string();
        joined.push(":");
        joined.push(path);
        joined
    })
    .clone()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&read_bundle_file(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// A file of a bundle by its path. A finished task's file named as in a task folder
/// (`<bundle>/tasks/<id>/<name>`) is read from the task's pack (`tasks/<id>.tar.gz`) when the
/// bundle keeps one, as agenteval's readers do.
pub fn read_bundle_file(p: impl AsRef<Path>) -> std::io::Result<Vec<u8>> {
    let p = p.as_ref();
    let missing = match std::fs::read(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => e,
        r => return r,
    };
    let Some((pack, name)) = pack_of(p) else { return Err(missing) };
    let Ok(bytes) = std::fs::read(&pack) else { return Err(missing) };
    let files = agenteval_core::taskpack::unpack(&bytes, &pack.display().to_string()).map_err(std::io::Error::other)?;
    files.get(&name).map(<[u8]>::to_vec).ok_or(missing)
}

/// `<bundle>/tasks/<id>/<name…>` → (`<bundle>/tasks/<id>.tar.gz`, `<name…>`).
fn pack_of(p: &Path) -> Option<(PathBuf, String)> {
    let parts: Vec<&std::ffi::OsStr> = p.iter().collect();
    let at = parts.iter().rposition(|c| *c == "tasks").filter(|at| at + 2 < parts.len())?;
    let base: PathBuf = parts[..=at].iter().collect();
    let id = parts.get(at + 1)?.to_str()?;
    let name: Vec<&str> = parts[at + 2..].iter().map(|c| c.to_str()).collect::<Option<_>>()?;
    Some((base.join(format!("{id}.tar.gz")), name.join("/")))
}

/// Replaces one file in a task's pack (`<bundle>/tasks/<id>.tar.gz`), as a damaged or hostile
/// bundle would have it; `None` removes it.
pub fn replace_in_pack(bundle: &Path, id: &str, name: &str, bytes: impl Into<Option<Vec<u8>>>) {
    let path = bundle.join(format!("tasks/{id}.tar.gz"));
    let files = agenteval_core::taskpack::unpack(&std::fs::read(&path).unwrap(), id).unwrap();
    assert!(files.get(name).is_some(), "{path:?} holds no {name}");
    let mut bytes = bytes.into();
    let kept: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter_map(
            |(n, b)| if n == name { Some((n.to_string(), bytes.take()?)) } else { Some((n.to_string(), b.to_vec())) },
        )
        .collect();
    let refs: Vec<(&str, &[u8])> = kept.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    std::fs::write(&path, agenteval_core::taskpack::pack(&refs).unwrap()).unwrap();
}

/// [`read_bundle_file`] as text.
pub fn read_text(p: impl AsRef<Path>) -> std::io::Result<String> {
    read_bundle_file(p).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Whether a bundle file exists, in a task pack or on its own (see [`read_bundle_file`]).
pub fn bundle_file_exists(p: &Path) -> bool {
    read_bundle_file(p).is_ok()
}

/// The results of every finished task of a bundle (packs, or task folders of older bundles).
pub fn results(bundle: &Path) -> Vec<serde_json::Value> {
    let mut out = vec![];
    let Ok(dirs) = std::fs::read_dir(bundle.join("tasks")) else {
        return out;
    };
    for d in dirs {
        let path = d.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let id = name.strip_suffix(".tar.gz").unwrap_or(&name);
        let p = bundle.join("tasks").join(id).join("result.json");
        if bundle_file_exists(&p) {
            out.push(read_json(&p));
        }
    }
    out
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for a child with a deadline, killing it on timeout. Its output is read while it runs,
/// so a chatty child never blocks on a full pipe.
pub fn wait_output(mut child: Child, timeout: Duration) -> Output {
    use std::io::Read;
    // A pipe can outlive the child (a grandchild holding it): collecting is bounded too.
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::sync::mpsc::Receiver<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            let _ = tx.send(buf);
        });
        rx
    }
    let collect =
        |rx: &std::sync::mpsc::Receiver<Vec<u8>>| rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process did not finish in {timeout:?}; stderr: {}", text(&collect(&err)));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output { status, stdout: collect(&out), stderr: collect(&err) }
}

/// Pids of live `agenteval worker` processes whose job file is under `root`.
pub fn workers_under(root: &Path) -> Vec<(i32, PathBuf)> {
    let mut out = vec![];
    let root = root.to_string_lossy().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a == "worker")
            && let Some(job) = args.iter().find(|a| a.starts_with(&root) && a.ends_with("job.json"))
        {
            // Zombies have an empty cmdline, so anything here is alive.
            out.push((pid, PathBuf::from(job)));
        }
    }
    out
}

pub fn toy_config(ws: &Workspace, size: u64, latency_ms: u64, tasks_per_job: u32, concurrency: u32) -> PathBuf {
    ws.write("toy.yaml", &toy_yaml("e2e-toy", size, latency_ms, tasks_per_job as u64, concurrency as u64, "runs"))
}

/// Finds a worker that is inside its agent (its trace has started), sends it `signal`, and
/// returns the task it was running.
pub fn signal_a_worker_mid_task(ws: &Workspace, signal: nix::sys::signal::Signal) -> String {
    let mut victim = None;
    wait_until("a worker mid-task", Duration::from_secs(30), || {
        for (pid, job) in workers_under(ws.path()) {
            let Ok(spec) = std::fs::read(&job) else { continue };
            let spec: serde_json::Value = serde_json::from_slice(&spec).unwrap();
            let task = spec["tasks"][0]["id"].as_str().unwrap().to_string();
            // The attempt stages its trace beside its job spec until it publishes it.
            let staged = job.parent().unwrap().join(format!("tasks/{task}.trace.jsonl"));
            if staged.exists() {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
                victim = Some(task);
                return true;
            }
        }
        false
    });
    victim.unwrap()
}

/// A temporary folder for a benchmark's bundles, on tmpfs (`/dev/shm`) when there is one: on
/// this VM's disk, file creation after large deletes slows down by multiples (the file system
/// itself), which would drown what the benchmarks measure.
pub fn bench_dir(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    if shm.is_dir() { builder.tempdir_in(shm) } else { builder.tempdir() }.unwrap()
}

/// A command running one of the Python harness scripts of `tests/aws/`.
pub fn python(script: &str) -> Command {
    // The machine's own python3 (with boto3 and moto) as the file it is, not a version
    // manager's shim (which would put its own folder first on the PATH the harness hands its
    // workers): the command may be given `agent_path()` for the workers it starts.
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
        PathBuf::from(text(&out.stdout).trim())
    });
    let mut c = Command::new(python);
    c.arg(repo().join("tests/aws").join(script));
    c
}

/// Starts `tests/aws/fault_proxy.py` with `args` on a port it picks itself (and prints), so no
/// other process can take it between choosing and binding; returns the process and its URL.
pub fn fault_proxy(args: &[&str]) -> (Child, String) {
    let mut child = python("fault_proxy.py").args(args).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("the proxy printed no port: {line:?}"));
    (child, format!("http://127.0.0.1:{port}"))
}

/// Child processes (harness servers) killed and awaited when the guard is dropped, so a failed
/// test leaves none behind.
#[derive(Default)]
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// CPU time (user + system) of every child process this process has waited for (and of their
/// waited-for children: a forked worker counts only if the fork server is waited for too).
pub fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(u.user_time()) + tv(u.system_time())
}

/// CPU time every core of this machine spent busy (`/proc/stat`, all but idle and iowait).
/// Not the controller's children's: a forked worker is its fork server's child, and the server
/// ends just after the controller, unwaited; on an otherwise idle machine this is the run's.
pub fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let cpu: Vec<u64> = stat.lines().next().unwrap().split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect();
    let busy: u64 = cpu.iter().enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum();
    // Clock ticks; USER_HZ is 100 on Linux.
    Duration::from_millis(busy * 10)
}

/// A toy-benchmark config for benchmarks and tests: `size` zero-latency (or `latency_ms`) mock
/// tasks, `per_job` per worker, `concurrency` workers at once, bundles in `runs_dir`.
pub fn toy_yaml(name: &str, size: u64, latency_ms: u64, per_job: u64, concurrency: u64, runs_dir: &str) -> String {
    format!(
        r#"name: {name}
benchmark:
  kind: toy
  size: {size}
  latency_ms: {latency_ms}
  slow_ms: {latency_ms}
agent:
  kind: mock
  limits:
    max_tokens: 5000
evaluators:
  - kind: exact_match
  - kind: no_error
backend:
  max_concurrent_jobs: {concurrency}
  tasks_per_job: {per_job}
  max_attempts: 3
storage:
  bundle_root: {runs_dir}
"#
    )
}

/// Runs `agenteval submit --json --config CFG`, calling `sample(pid)` every 20 ms until it exits
/// (a memory figure in kB); returns the wall time, the highest sample and the JSON printed.
pub fn submit_sampled(cfg: &Path, sample: impl FnMut(u32) -> u64) -> (Duration, u64, serde_json::Value) {
    submit_sampled_with(cfg, &[], sample)
}

/// [`submit_sampled`] with `env` added to the controller's environment.
pub fn submit_sampled_with(
    cfg: &Path,
    env: &[(&str, &str)],
    mut sample: impl FnMut(u32) -> u64,
) -> (Duration, u64, serde_json::Value) {
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args(["submit", "--json", "--config", cfg.to_str().unwrap()])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut peak = 0u64;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(sample(child.id()));
        std::thread::sleep(Duration::from_millis(20));
    }
    let wall = start.elapsed();
    let out = child.wait_with_output().unwrap();
    (wall, peak, serde_json::from_slice(&out.stdout).expect("submit --json output"))
}

/// A program of a Python tool the tests run as a server (Phoenix, MLflow), from the virtual
/// environment `tests/run.sh` installs it in (`$AGENTEVAL_TOOLS`, default `/opt/agenteval-tools`,
/// one folder per tool: their dependencies conflict), else from `PATH`. Missing is a failure
/// that says how to install it, never a skip.
pub fn python_tool(venv: &str, program: &str) -> PathBuf {
    let root = std::env::var_os("AGENTEVAL_TOOLS").map_or_else(|| PathBuf::from("/opt/agenteval-tools"), PathBuf::from);
    let p = root.join(venv).join("bin").join(program);
    if p.is_file() {
        return p;
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join(program)).find(|c| c.is_file()));
    on_path.unwrap_or_else(|| panic!("`{program}` is not installed: tests/run.sh installs it into {}", p.display()))
}

/// A free TCP port on 127.0.0.1 (free when asked; a server binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server process, killed with its children when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ =
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// Starts `cmd` in its own process group and waits until `port` answers `GET path` with 200.
pub fn start_server(mut cmd: Command, port: u16, path: &str, what: &str) -> Server {
    use std::os::unix::process::CommandExt as _;
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && ui::request(port, "GET", path, "127.0.0.1", &[]).status == 200
        {
            return server;
        }
        if let Some(st) = server.0.try_wait().unwrap() {
            panic!("{what} exited with {st}: {}", std::fs::read_to_string(log.path()).unwrap_or_default());
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not start in 180 s: {}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
