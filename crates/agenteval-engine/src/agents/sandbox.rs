//! The agent's view of the machine: a Landlock ruleset (Linux, unprivileged) that lets the agent
//! read the system, its own program and the paths the config lists, write only its scratch
//! folder, and never see the bundle root, the index or the benchmark's cases (threat model:
//! `docs/security.md`). Built in the worker before the agent starts; applied in the child
//! between fork and exec, so the worker itself is never restricted.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// What the agent may see, as paths; `exclude` are removed from every readable folder that
/// holds them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct View {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub exclude: Vec<PathBuf>,
}

/// System folders every program needs to run (read and execute only).
pub const SYSTEM_READ: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/proc", "/sys", "/run", "/dev"];
/// Files outside scratch every program may write.
pub const SYSTEM_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/urandom", "/dev/random"];

/// `dir`, readable except for the `exclude`d paths below it: a folder that holds an excluded
/// path is replaced by its entries, recursively, leaving the excluded ones out. (Landlock only
/// grants; it cannot take a subtree back, so the grant is split around it.)
///
/// A split folder loses the right to be listed, which breaks programs that list their own
/// folders (Python's imports do). When everything excluded below it is a file, the folder goes
/// to `listable` too: its names may be listed, the excluded file still cannot be read. A folder
/// holding an excluded folder (the bundle root) stays unlistable, so that folder's contents
/// cannot be listed either.
pub fn readable_except(dir: &Path, exclude: &[PathBuf], out: &mut Vec<PathBuf>, listable: &mut Vec<PathBuf>) {
    if exclude.iter().any(|x| x == dir) {
        return;
    }
    let below: Vec<&PathBuf> = exclude.iter().filter(|x| x.starts_with(dir)).collect();
    if below.is_empty() {
        out.push(dir.to_path_buf());
        return;
    }
    if below.iter().all(|x| !x.is_dir()) {
        listable.push(dir.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            readable_except(&p, exclude, out, listable);
        } else if !exclude.contains(&p) {
            out.push(p);
        }
    }
}

/// The folder a program's files live in: for `…/prefix/bin/prog`, `…/prefix` (an interpreter
/// needs its libraries beside its binary); for a version manager's `…/root/shims/prog` (pyenv,
/// rbenv, asdf), `…/root`, where the shim finds the real program; else the program's own folder.
pub fn program_home(program: &Path) -> Option<PathBuf> {
    let real = program.canonicalize().ok()?;
    let dir = real.parent()?;
    if dir.file_name().is_some_and(|n| n == "bin" || n == "shims") {
        dir.parent().map(Path::to_path_buf)
    } else {
        Some(dir.into())
    }
}

/// Finds `program` the way `execvp` would.
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::OnceLock;

    use landlock::{
        ABI, Access as _, AccessFs, Ruleset, RulesetAttr as _, RulesetCreated, RulesetCreatedAttr as _, RulesetStatus,
        Scope, path_beneath_rules,
    };

    use super::View;

    /// The ABI asked for: filesystem rights up to V5 (ioctl on devices). Older kernels get
    /// what they support (best effort), which `available` reports.
    const ABI_FS: ABI = ABI::V5;

    /// A ruleset ready to be applied in the agent's process.
    pub struct Prepared(RulesetCreated);

    impl std::fmt::Debug for Prepared {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Prepared(landlock ruleset)")
        }
    }

    impl Prepared {
        /// Applies the ruleset to the calling thread (the forked child, before exec).
        pub fn apply(self) -> std::io::Result<()> {
            self.0.restrict_self().map(|_| ()).map_err(std::io::Error::other)
        }
    }

    fn ruleset() -> Result<RulesetCreated, landlock::RulesetError> {
        // Signals: an agent must not be able to kill its worker (kernels with ABI 6+).
        Ruleset::default().handle_access(AccessFs::from_all(ABI_FS))?.scope(Scope::Signal)?.create()
    }

    /// Whether this kernel enforces Landlock: tried once on a throwaway thread, since a
    /// ruleset binds only the thread that applies it.
    pub fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            std::thread::spawn(|| {
                ruleset().and_then(|r| r.restrict_self()).is_ok_and(|s| s.ruleset != RulesetStatus::NotEnforced)
            })
            .join()
            .unwrap_or(false)
        })
    }

    pub fn prepare(view: &View) -> Result<Prepared, String> {
        // Hidden paths are cut out of the write grants too: a listed folder that holds the
        // bundle root must not open it.
        let (mut read, mut write, mut listable) = (Vec::new(), Vec::new(), Vec::new());
        for p in &view.read {
            super::readable_except(p, &view.exclude, &mut read, &mut listable);
        }
        // Write grants are never widened to listing.
        for p in &view.write {
            super::readable_except(p, &view.exclude, &mut write, &mut Vec::new());
        }
        let rules = ruleset()
            .and_then(|r| r.add_rules(path_beneath_rules(&listable, AccessFs::ReadDir)))
            .and_then(|r| r.add_rules(path_beneath_rules(&read, AccessFs::from_read(ABI_FS))))
            .and_then(|r| r.add_rules(path_beneath_rules(&write, AccessFs::from_all(ABI_FS))))
            .map_err(|e| format!("cannot build the agent's sandbox: {e}"))?;
        Ok(Prepared(rules))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::View;

    #[derive(Debug)]
    pub struct Prepared;

    impl Prepared {
        pub fn apply(self) -> std::io::Result<()> {
            Ok(())
        }
    }

    pub fn available() -> bool {
        false
    }

    pub fn prepare(_view: &View) -> Result<Prepared, String> {
        Ok(Prepared)
    }
}

pub use imp::{Prepared, available, prepare};

static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();

/// Names the executable whose hidden `agent-sandbox` command supervises a task's program and
/// applies a [`View`] to it (the worker's own binary). Without one, programs run unsupervised and
/// unsandboxed.
pub fn set_launcher(exe: PathBuf) {
    let _ = LAUNCHER.set(exe);
}

pub fn launcher() -> Option<&'static Path> {
    LAUNCHER.get().map(PathBuf::as_path)
}

/// `program` with `args`, started through the launcher when there is one: under a per-task
/// supervisor (`reap::supervise`), restricted to `view` when one is given. Environment, folder
/// and stdio are the caller's to set on the returned command; they pass through unchanged.
pub fn supervised(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    view: Option<&View>,
) -> std::process::Command {
    match launcher() {
        Some(launcher) => {
            let mut c = std::process::Command::new(launcher);
            c.arg("agent-sandbox");
            if let Some(view) = view {
                c.args(["--view", &serde_json::to_string(view).expect("a view serializes")]);
            }
            c.arg("--").arg(program).args(args);
            c
        }
        None => {
            let mut c = std::process::Command::new(program);
            c.args(args);
            c
        }
    }
}

/// The `agent-sandbox` command. Without `inner`: the task's supervisor, which starts itself again
/// with `--inner` and supervises that (`reap::supervise`). With `inner`: restricts this (still
/// single-threaded) process to `view` (JSON), if any, and replaces it with `command`; returns only
/// on failure, with the exit code to use.
pub fn launch(view: Option<&str>, inner: bool, command: &[std::ffi::OsString]) -> u8 {
    use std::os::unix::process::CommandExt as _;
    let Some((prog, args)) = command.split_first() else {
        eprintln!("agent-sandbox: no command");
        return 126;
    };
    if !inner {
        let me = match std::env::current_exe() {
            Ok(me) => me,
            Err(e) => {
                eprintln!("agent-sandbox: cannot find own executable: {e}");
                return 126;
            }
        };
        let mut c = std::process::Command::new(me);
        c.args(["agent-sandbox", "--inner"]);
        if let Some(view) = view {
            c.args(["--view", view]);
        }
        c.arg("--").args(command);
        return super::reap::supervise(c);
    }
    if let Some(view) = view {
        let view: View = match serde_json::from_str(view) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("agent-sandbox: bad view: {e}");
                return 126;
            }
        };
        if let Err(e) = prepare(&view).and_then(|p| p.apply().map_err(|e| e.to_string())) {
            eprintln!("agent-sandbox: {e}");
            return 126;
        }
    }
    let e = std::process::Command::new(prog).args(args).exec();
    eprintln!("cannot start agent `{}`: {e}", prog.to_string_lossy());
    127
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_holding_an_excluded_path_is_split_around_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for p in ["agent.py", "data/cases.jsonl", "data/other.txt", "runs/index.sqlite", "runs/r1/tasks.jsonl"] {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        let (mut out, mut listable) = (Vec::new(), Vec::new());
        readable_except(&root, &[root.join("runs"), root.join("data/cases.jsonl")], &mut out, &mut listable);
        out.sort();
        assert_eq!(out, vec![root.join("agent.py"), root.join("data/other.txt")]);
        assert_eq!(listable, vec![root.join("data")], "the root holds the bundle folder: never listable");
        let mut all = Vec::new();
        readable_except(&root, &[PathBuf::from("/elsewhere")], &mut all, &mut listable);
        assert_eq!(all, vec![root.clone()], "nothing excluded below: the folder itself");
    }

    #[test]
    fn an_interpreter_brings_its_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("py/bin")).unwrap();
        std::fs::write(root.join("py/bin/python"), b"").unwrap();
        assert_eq!(program_home(&root.join("py/bin/python")), Some(root.join("py")));
        std::fs::write(root.join("tool"), b"").unwrap();
        assert_eq!(program_home(&root.join("tool")), Some(root.clone()));
    }
}
