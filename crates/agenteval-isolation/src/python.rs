//! Running untrusted Python (HumanEval completions, the `llm` agent's `python` tool): one process
//! per program, in its own empty scratch folder and process group, with resource limits
//! (address space, CPU time, file size, processes), process creation disabled, the filesystem
//! view of an agent (Landlock: write only the scratch folder), a wall-clock timeout, and the
//! whole process tree killed afterwards.
//!
//! Whether a check passed is read from a line the trusted driver writes to a descriptor of its
//! own, prefixed with a per-run token, after the program returned: what the program prints and
//! how the process exits cannot make it pass.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::confine::{self, Net};
use crate::{TreeGuard, sandbox, warn_unsandboxed};

/// What one program may use.
#[derive(Debug, Clone, PartialEq)]
pub struct PythonLimits {
    pub timeout: Duration,
    /// Address space, bytes.
    pub memory_bytes: u64,
    /// Largest file the program may write, bytes.
    pub file_bytes: u64,
    /// `RLIMIT_NPROC` (enforced for non-root users; process creation is disabled in any case).
    pub processes: u64,
    /// Whether the program may import installed packages (site-packages); without them the
    /// interpreter starts twice as fast.
    pub site_packages: bool,
    /// Paths the program must not see even where its view reaches (the benchmark's answers:
    /// HumanEval's data file lives beside the interpreter, the bundle, the index).
    pub hide: Vec<PathBuf>,
}

impl Default for PythonLimits {
    fn default() -> Self {
        PythonLimits {
            timeout: Duration::from_secs(10),
            memory_bytes: 2 << 30,
            file_bytes: 16 << 20,
            processes: 32,
            site_packages: true,
            hide: Vec::new(),
        }
    }
}

/// How a program ended.
#[derive(Debug, Clone, PartialEq)]
pub struct PythonRun {
    /// The program ran to its end without an exception (the driver said so).
    pub completed: bool,
    pub timed_out: bool,
    /// Why it did not complete, in one line.
    pub reason: String,
    /// What it printed (stdout and stderr, interleaved), cut to its last 16 KiB.
    pub output: String,
}

const OUTPUT_TAIL: usize = 16 * 1024;

/// The trusted driver. It reads the token, the limits and the program from stdin (one line, one
/// line, the rest), moves the program's own stdin/stdout/stderr away from the report
/// descriptor, applies the limits, disables process creation, runs the program with `exec` in a
/// fresh namespace (as the HumanEval harness does), and reports `<token> passed` or `<token>
/// failed <why>` on the saved descriptor. It imports nothing beyond `os`, `sys` and `resource`:
/// interpreter start-up is most of a HumanEval check's cost.
const DRIVER: &str = r#"
import os, resource, sys
def _agenteval_driver():
    data = sys.stdin.buffer.read().decode("utf-8")
    token, limits, program = data.split("\n", 2)
    memory, fsize, cpu, procs = (int(x) for x in limits.split())
    report = os.dup(1)
    out = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0); os.dup2(out, 1); os.dup2(out, 2); os.close(null); os.close(out)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    for res, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CPU, cpu),
                       (resource.RLIMIT_NPROC, procs), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass
    def refused(*args, **kwargs):
        raise PermissionError("creating processes is disabled here")
    for name in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve",
                 "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp",
                 "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "kill", "killpg"):
        if hasattr(os, name):
            setattr(os, name, refused)
    # `random` registers a fork hook when imported; with fork gone it has nothing to do.
    os.register_at_fork = lambda **hooks: None
    for name in ("subprocess", "_posixsubprocess", "ctypes", "_ctypes", "multiprocessing", "pty"):
        sys.modules[name] = None
    code = compile(program, "<program>", "exec")
    del data, program
    try:
        exec(code, {})
    except BaseException as e:
        try:
            why = (type(e).__name__ + ": " + str(e))[:300]
        except BaseException:
            why = "an exception that cannot be shown"
        os.write(report, (token + " failed " + why.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        os._exit(1)
    os.write(report, (token + " passed\n").encode())
    os._exit(0)
_agenteval_driver()
"#;

/// The view a check runs in (no network, no processes, its folder alone writable) and, under a
/// root worker, the uid of its own it runs as; `None` without a launcher. An interpreter the
/// check's uid cannot read is refused: the checked code never runs as root.
fn check_view(
    python: &str,
    dir: &std::path::Path,
    limits: &PythonLimits,
) -> std::io::Result<(Option<sandbox::View>, Option<crate::uids::Lease>)> {
    if sandbox::launcher().is_none() {
        warn_unsandboxed("no sandbox launcher in this process");
        return Ok((None, None));
    }
    if !sandbox::available() {
        warn_unsandboxed("this kernel does not enforce Landlock (see docs/security.md)");
    }
    let mut view = sandbox::View::system().with_scratch(dir);
    view.exclude = limits.hide.iter().map(|p| p.canonicalize().unwrap_or_else(|_| p.clone())).collect();
    let program = sandbox::which(python);
    view.read.extend(program.as_deref().and_then(sandbox::program_home));
    if let Some(program) = program.filter(|_| view.user.is_some())
        && let Some(blocking) = confine::unreadable_part(&program)
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            confine::unreadable_message(&program, &blocking),
        ));
    }
    let lease = view.lease_user().map_err(std::io::Error::other)?;
    view.net = Net::None;
    view.no_processes = true;
    Ok((Some(view), lease))
}

/// Runs `program` with `python` under `limits`.
pub async fn run_python(python: &str, program: &str, limits: &PythonLimits) -> std::io::Result<PythonRun> {
    let scratch = tempfile::Builder::new().prefix("agenteval-py-").tempdir()?;
    let dir = scratch.path().canonicalize()?;
    let token = format!("{:032x}", token_bits());
    let cpu = limits.timeout.as_secs() + 1;
    let input = format!("{token}\n{} {} {cpu} {}\n{program}", limits.memory_bytes, limits.file_bytes, limits.processes);
    let python = resolve_python(python);
    let python = python.to_string_lossy();
    let python = python.as_ref();
    // `-I`: no environment variables, no user site, no script folder on the path. `-S` (no
    // site-packages) when the program needs only the standard library: it halves start-up.
    let args: &[&str] = if limits.site_packages { &["-I", "-c", DRIVER] } else { &["-I", "-S", "-c", DRIVER] };
    // No network and no processes, whatever the kernel's Landlock level: those are seccomp's.
    let (view, lease) = check_view(python, &dir, limits)?;
    let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    let mut std_cmd = sandbox::supervised(python.as_ref(), &args, view.as_ref());
    std_cmd.current_dir(&dir).env_clear();
    for var in ["PATH", "LANG", "LC_ALL"] {
        if let Some(v) = std::env::var_os(var) {
            std_cmd.env(var, v);
        }
    }
    std_cmd.env("HOME", &dir).env("TMPDIR", &dir).env("PYTHONDONTWRITEBYTECODE", "1");
    let mut cmd = tokio::process::Command::from(std_cmd);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
    let mut child = cmd.spawn().map_err(|e| std::io::Error::new(e.kind(), format!("cannot start `{python}`: {e}")))?;
    let guard = TreeGuard(child.id().map(|p| p as i32));
    // The uid is this check's until its processes are gone (the guard kills them first).
    let _lease = lease;
    let mut stdin = child.stdin.take().expect("stdin piped");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let feed = async move {
        let _ = stdin.write_all(input.as_bytes()).await;
    };
    let read = async move {
        let (mut report, mut early) = (Vec::new(), Vec::new());
        let (mut out, mut err) = ((&mut stdout).take(64 * 1024), (&mut stderr).take(64 * 1024));
        let _ = tokio::join!(out.read_to_end(&mut report), err.read_to_end(&mut early));
        (report, early)
    };
    let work = async {
        let ((), (report, early)) = tokio::join!(feed, read);
        let status = child.wait().await;
        (report, early, status)
    };
    let ended = tokio::time::timeout(limits.timeout, work).await;
    drop(guard);
    let output = read_output(&dir.join("output.txt"));
    let Ok((report, early, status)) = ended else {
        return Ok(PythonRun {
            completed: false,
            timed_out: true,
            reason: format!("timed out after {:.1}s", limits.timeout.as_secs_f64()),
            output,
        });
    };
    let report = String::from_utf8_lossy(&report);
    let mine = report.lines().find_map(|l| l.strip_prefix(token.as_str())).map(str::trim);
    let status = status?;
    let (completed, reason) = match mine {
        Some("passed") if status.success() => (true, String::new()),
        Some(r) if r.starts_with("failed") => (false, r.trim_start_matches("failed").trim().to_string()),
        _ => {
            let early = String::from_utf8_lossy(&early);
            let last = early.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            let how = match status.code() {
                Some(c) => format!("exit status {c}"),
                None => "a signal".to_string(),
            };
            let mut why = format!("the program ended before it finished ({how})");
            if !last.is_empty() {
                why.push_str(&format!(": {}", last.chars().take(200).collect::<String>()));
            }
            (false, why)
        }
    };
    Ok(PythonRun { completed, timed_out: false, reason, output })
}

/// The program's output file, read without trusting it: the program could have replaced it
/// with a symlink (to a file it may not read, which this unsandboxed process could), a FIFO
/// (which would block) or a device (endless). Only a regular file is read, without following a
/// link and without blocking, and only its last [`OUTPUT_TAIL`] bytes.
fn read_output(path: &std::path::Path) -> String {
    use std::io::{Read as _, Seek as _};
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let mut file = match std::fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return String::new(),
        Err(_) => return "(output.txt was replaced by a link or cannot be opened; not read)".into(),
    };
    let len = match file.metadata() {
        Ok(m) if m.is_file() => m.len(),
        _ => return "(output.txt was replaced by something that is not a regular file; not read)".into(),
    };
    let mut bytes = Vec::new();
    let start = len.saturating_sub(OUTPUT_TAIL as u64);
    if file.seek(std::io::SeekFrom::Start(start)).is_err()
        || file.take(OUTPUT_TAIL as u64).read_to_end(&mut bytes).is_err()
    {
        return String::new();
    }
    tail(&bytes)
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(OUTPUT_TAIL)..]);
    text.into_owned()
}

/// 128 bits nobody else knows: the time, the process and the address of a fresh allocation,
/// through sha256.
fn token_bits() -> u128 {
    use sha2::{Digest as _, Sha256};
    let probe = Box::new(0u8);
    let mut h = Sha256::new();
    h.update(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos().to_le_bytes(),
    );
    h.update(std::process::id().to_le_bytes());
    h.update((&*probe as *const u8 as usize).to_le_bytes());
    h.update(uuid_like().to_le_bytes());
    let d = h.finalize();
    u128::from_le_bytes(d[..16].try_into().expect("16 bytes"))
}

fn uuid_like() -> u64 {
    std::fs::read("/proc/sys/kernel/random/uuid")
        .map(|b| b.iter().fold(0u64, |a, &x| a.rotate_left(5) ^ x as u64))
        .unwrap_or_default()
}

/// The Python interpreter to use when a config names none.
pub const DEFAULT_PYTHON: &str = "python3";

/// The interpreter file `python` runs as (a version manager's shim resolved to the real one),
/// if it can be found.
pub fn resolved_program(python: &str) -> Option<PathBuf> {
    let real = resolve_python(python);
    sandbox::which(&real.to_string_lossy())
}

/// The interpreter `python` names, resolved once through the worker's own environment: a
/// version manager's shim (pyenv) needs variables the sandboxed program does not get.
fn resolve_python(python: &str) -> PathBuf {
    static CACHE: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = cache.iter().find(|(k, _)| k == python) {
        return p.clone();
    }
    let real = std::process::Command::new(python)
        .args(["-c", "import sys; print(sys.executable)"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(python));
    cache.push((python.to_string(), real.clone()));
    real
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> PythonLimits {
        PythonLimits { timeout: Duration::from_secs(5), ..PythonLimits::default() }
    }

    #[tokio::test]
    async fn a_program_passes_only_by_running_to_its_end() {
        let ok = run_python(DEFAULT_PYTHON, "x = 1\nassert x == 1\nprint('hi')", &quick()).await.unwrap();
        assert!(ok.completed, "{ok:?}");
        assert_eq!(ok.output.trim(), "hi");
        let failed = run_python(DEFAULT_PYTHON, "assert 1 == 2, 'nope'", &quick()).await.unwrap();
        assert!(!failed.completed && failed.reason.contains("AssertionError: nope"), "{failed:?}");
        for cheat in ["print('passed')\nimport os\nos._exit(0)", "import sys\nsys.exit(0)", "exit(0)"] {
            let r = run_python(DEFAULT_PYTHON, cheat, &quick()).await.unwrap();
            assert!(!r.completed, "{cheat}: {r:?}");
        }
    }

    #[tokio::test]
    async fn an_output_file_swapped_for_a_link_a_fifo_or_a_device_is_not_read() {
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), "EXPECTED-ANSWERS-1234").unwrap();
        let link = format!(
            "import os\nprint('x')\nos.remove('output.txt')\nos.symlink({:?}, 'output.txt')",
            secret.path().display().to_string()
        );
        let fifo = "import os\nos.remove('output.txt')\nos.mkfifo('output.txt')".to_string();
        let zero = "import os\nos.remove('output.txt')\nos.symlink('/dev/zero', 'output.txt')".to_string();
        for program in [link, fifo, zero] {
            let started = std::time::Instant::now();
            let r = run_python(DEFAULT_PYTHON, &program, &quick()).await.unwrap();
            assert!(!r.output.contains("EXPECTED-ANSWERS"), "{program}: {r:?}");
            assert!(r.output.contains("not read"), "{program}: {r:?}");
            assert!(r.output.len() < 1024 && started.elapsed() < Duration::from_secs(5), "{program}: {r:?}");
        }
    }

    #[tokio::test]
    async fn loops_forks_and_memory_bombs_are_contained() {
        let limits = PythonLimits { timeout: Duration::from_secs(2), ..PythonLimits::default() };
        let r = run_python(DEFAULT_PYTHON, "while True:\n    pass", &limits).await.unwrap();
        assert!(r.timed_out && !r.completed, "{r:?}");
        let r = run_python(DEFAULT_PYTHON, "import os\nwhile True:\n    os.fork()", &limits).await.unwrap();
        assert!(!r.completed && r.reason.contains("PermissionError"), "{r:?}");
        let r = run_python(DEFAULT_PYTHON, "x = []\nwhile True:\n    x.append(' ' * 10**8)", &limits).await.unwrap();
        assert!(!r.completed, "{r:?}");
    }
}
