//! The agent's view of the machine: a Landlock ruleset (Linux, unprivileged) that lets the agent
//! read the system, its own program and the paths the config lists, write only its scratch
//! folder, and never see the bundle root, the index or the benchmark's cases (threat model:
//! `docs/security.md`). Built in the worker before the agent starts; applied in the child
//! between fork and exec, so the worker itself is never restricted.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::ConfineError;
use super::confine::{self, Net};

/// What the agent may see, as paths (`exclude` are removed from every readable folder that
/// holds them), and what else it may do (`docs/security.md`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct View {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub exclude: Vec<PathBuf>,
    /// Its network.
    #[serde(default)]
    pub net: Net,
    /// Process creation refused by the kernel (checks and the `python` tool).
    #[serde(default)]
    pub no_processes: bool,
    /// Run as this uid and gid (the worker is root), after giving it `own`.
    #[serde(default)]
    pub user: Option<u32>,
    /// Folders (the scratch folder) given to `user` before the program starts.
    #[serde(default)]
    pub own: Vec<PathBuf>,
    /// The largest file the program may write (`RLIMIT_FSIZE`): the task's `max_disk_bytes`.
    #[serde(default)]
    pub max_file_bytes: Option<u64>,
}

impl View {
    /// The system's folders to read and its devices to write, nothing else yet; the program
    /// runs as [`confine::agent_user`].
    pub fn system() -> View {
        View {
            read: SYSTEM_READ.iter().map(Into::into).collect(),
            write: SYSTEM_WRITE.iter().map(Into::into).collect(),
            user: confine::agent_user(),
            ..View::default()
        }
    }

    /// No filesystem rule at all (`agent.sandbox: none`), yet under a root worker still a user
    /// of its own: the program never runs as root.
    pub fn unrestricted() -> View {
        View { read: vec!["/".into()], write: vec!["/".into()], user: confine::agent_user(), ..View::default() }
    }

    /// Under a root worker, gives the view a uid of agenteval's range of its own (its user was
    /// only the mark that it needs one), held until the returned lease is dropped.
    pub fn lease_user(&mut self) -> Result<Option<super::uids::Lease>, ConfineError> {
        if self.user.is_none() {
            return Ok(None);
        }
        let lease = super::uids::lease()?;
        if let Some(l) = &lease {
            self.user = Some(l.uid);
        }
        Ok(lease)
    }

    /// Adds a folder the program owns (its scratch folder): writable, and given to its user.
    pub fn with_scratch(mut self, dir: &Path) -> View {
        self.write.push(dir.to_path_buf());
        if self.user.is_some() {
            self.own.push(dir.to_path_buf());
        }
        self
    }
}

/// What no agent may see, resolved: the bundle root, the index, the benchmark's data (its cases,
/// a Harbor task folder with its tests and solutions), a `tests` evaluator's folder, the
/// secrets file. (A case's own `tests` and `solution` are hidden from its agent by task.)
pub fn hidden_paths(run: &agenteval_core::config::RunConfig) -> Vec<std::path::PathBuf> {
    let real = |p: &std::path::Path| p.canonicalize().unwrap_or(p.to_path_buf());
    let mut exclude = Vec::new();
    if let agenteval_core::config::BundleRoot::Local(root) = &run.storage.bundle_root {
        exclude.push(real(root));
    }
    if let agenteval_core::config::IndexLocation::Sqlite(index) = run.storage.index_location() {
        let index = real(&index);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = index.clone().into_os_string();
            p.push(suffix);
            exclude.push(p.into());
        }
    }
    exclude.extend(run.backend.secrets_file.as_deref().map(real));
    exclude.extend(run.benchmark.data_files().into_iter().map(|(_, _, path)| real(path)));
    exclude.extend(run.benchmark.command_files().iter().map(|p| real(p)));
    // What agenteval fetched for the benchmark is its data too (a dataset's checkouts, reference
    // fixes, a package's gold answers), and so is a `tests` evaluator's folder.
    exclude.extend(run.benchmark.fetched_data().iter().map(|p| real(p)));
    exclude.extend(run.evaluators.iter().filter_map(|e| e.tests_folder()).map(real));
    exclude
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
/// Grants are made on what a path resolves to, since that is what Landlock binds: a symbolic
/// link is followed here, and its target granted only if it is not excluded, not below an
/// excluded path, and split in turn if it holds one (`latest-runs -> runs` beside the config
/// opens nothing). `exclude` holds resolved paths.
///
/// A split folder loses the right to be listed, which breaks programs that list their own
/// folders (Python's imports do). When everything excluded below it is a file, the folder goes
/// to `listable` too: its names may be listed, the excluded file still cannot be read. A folder
/// holding an excluded folder (the bundle root) stays unlistable, so that folder's contents
/// cannot be listed either.
pub fn readable_except(dir: &Path, exclude: &[PathBuf], out: &mut Vec<PathBuf>, listable: &mut Vec<PathBuf>) {
    split_around(dir, exclude, out, listable, 0);
}

/// Links followed in one chain of folders before giving up on it (a loop of links).
const MAX_LINK_DEPTH: usize = 16;

fn split_around(path: &Path, exclude: &[PathBuf], out: &mut Vec<PathBuf>, listable: &mut Vec<PathBuf>, links: usize) {
    let real = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            if links >= MAX_LINK_DEPTH {
                return;
            }
            match path.canonicalize() {
                Ok(target) => return split_around(&target, exclude, out, listable, links + 1),
                // A dangling link grants nothing.
                Err(_) => return,
            }
        }
        Ok(_) => path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        // Something that does not exist yet (a scratch folder made later): granted as named.
        Err(_) => path.to_path_buf(),
    };
    if exclude.iter().any(|x| real.starts_with(x)) {
        return;
    }
    let below: Vec<&PathBuf> = exclude.iter().filter(|x| x.starts_with(&real)).collect();
    if below.is_empty() {
        out.push(real);
        return;
    }
    if below.iter().all(|x| !x.is_dir()) {
        listable.push(real.clone());
    }
    let Ok(entries) = std::fs::read_dir(&real) else { return };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() || t.is_symlink() => split_around(&p, exclude, out, listable, links),
            _ if !exclude.contains(&p) => out.push(p),
            _ => {}
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

/// What an agent may read of its own program: for a program found on `PATH` or laid out as
/// `…/bin/prog`, its [`program_home`] (an interpreter and its libraries); for a program named by
/// a path elsewhere (`./agent.sh` in the config's folder), that file only, so that naming a
/// script does not open the folder it sits in.
pub fn program_files(program: &str) -> Option<PathBuf> {
    let path = which(program)?;
    let real = path.canonicalize().ok()?;
    let laid_out = real.parent().and_then(Path::file_name).is_some_and(|n| n == "bin" || n == "shims");
    if program.contains('/') && !laid_out { Some(real) } else { program_home(&path) }
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

    use super::ConfineError;

    use landlock::{
        ABI, Access as _, AccessFs, AccessNet, CompatLevel, Compatible as _, NetPort, Ruleset, RulesetAttr as _,
        RulesetCreated, RulesetCreatedAttr as _, RulesetStatus, Scope, path_beneath_rules,
    };

    use super::{Net, View};

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
        ruleset_for(&Net::All)
    }

    /// Signals: an agent must not be able to kill its worker (kernels with ABI 6+). Unless the
    /// network is open, TCP connections (ABI 4+) and abstract unix sockets outside the sandbox
    /// (ABI 6+) are refused too, but for the ports a rule adds.
    fn ruleset_for(net: &Net) -> Result<RulesetCreated, landlock::RulesetError> {
        let r = Ruleset::default().handle_access(AccessFs::from_all(ABI_FS))?.scope(Scope::Signal)?;
        match net {
            Net::All => r.create(),
            Net::Tcp(_) | Net::None => {
                r.handle_access(AccessNet::ConnectTcp)?.scope(Scope::AbstractUnixSocket)?.create()
            }
        }
    }

    /// Whether this kernel enforces Landlock's TCP rules (ABI 4, Linux 6.7).
    pub fn tcp_rules_available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            std::thread::spawn(|| {
                Ruleset::default()
                    .set_compatibility(CompatLevel::HardRequirement)
                    .handle_access(AccessNet::ConnectTcp)
                    .and_then(|r| r.create())
                    .and_then(|r| r.restrict_self())
                    .is_ok()
            })
            .join()
            .unwrap_or(false)
        })
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

    pub fn prepare(view: &View) -> Result<Prepared, ConfineError> {
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
        let ports = match &view.net {
            Net::Tcp(ports) => ports.clone(),
            Net::All | Net::None => Vec::new(),
        };
        let rules = ruleset_for(&view.net)
            .and_then(|r| {
                r.add_rules(
                    ports.iter().map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))),
                )
            })
            .and_then(|r| r.add_rules(path_beneath_rules(&listable, AccessFs::ReadDir)))
            .and_then(|r| r.add_rules(path_beneath_rules(&read, AccessFs::from_read(ABI_FS))))
            .and_then(|r| r.add_rules(path_beneath_rules(&write, AccessFs::from_all(ABI_FS))))
            .map_err(|e| format!("cannot build the agent's sandbox: {e}"))?;
        Ok(Prepared(rules))
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::{ConfineError, View};

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

    pub fn tcp_rules_available() -> bool {
        false
    }

    pub fn prepare(_view: &View) -> Result<Prepared, ConfineError> {
        Ok(Prepared)
    }
}

pub use imp::{Prepared, available, prepare, tcp_rules_available};

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
        if let Err(e) = confine_self(&view) {
            eprintln!("agent-sandbox: {e}");
            return 126;
        }
        if let Some(uid) = view.user {
            let e = std::process::Command::new(prog).args(args).exec();
            eprintln!(
                "cannot start agent `{}`: {e} (it runs as uid {uid}, since the worker runs as root: its files and the folders above them must be readable by others)",
                prog.to_string_lossy(),
            );
            return 127;
        }
    }
    let e = std::process::Command::new(prog).args(args).exec();
    eprintln!("cannot start agent `{}`: {e}", prog.to_string_lossy());
    127
}

/// Confines this process to `view`, in the order each step needs: the filesystem rules are
/// built while the paths can still be opened (as root), the user is changed (or, staying, every
/// capability dropped) while that is still allowed, then no new privileges, Landlock, and the
/// seccomp filters, which bind everything the program starts.
fn confine_self(view: &View) -> Result<(), ConfineError> {
    let prepared = prepare(view)?;
    match view.user {
        Some(uid) => confine::become_user(uid, &view.own)?,
        // Never a confined program as root, even without capabilities: root owns the Docker
        // engine's socket and every root-only file the view does not hide.
        None if nix::unistd::geteuid().is_root() => {
            return Err(ConfineError("refusing to run a confined program as root: its view names no user".into()));
        }
        None => confine::drop_capabilities()?,
    }
    if let Some(max) = view.max_file_bytes {
        confine::limit_file_size(max)?;
    }
    confine::no_new_privileges()?;
    prepared.apply().map_err(|e| e.to_string())?;
    confine::install_filters(view.no_processes, view.net == Net::None)
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
    fn a_link_to_a_hidden_path_grants_nothing_and_a_link_above_one_is_split() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for p in ["cfg/agent.py", "runs/r1/tasks.jsonl", "data/cases.jsonl", "data/notes.txt"] {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        let cfg = root.join("cfg");
        std::os::unix::fs::symlink(root.join("runs"), cfg.join("latest-runs")).unwrap();
        std::os::unix::fs::symlink(root.join("runs/r1/tasks.jsonl"), cfg.join("t.jsonl")).unwrap();
        std::os::unix::fs::symlink(root.join("data"), cfg.join("data")).unwrap();
        std::os::unix::fs::symlink(cfg.join("loop"), cfg.join("loop")).unwrap();
        let exclude = [root.join("runs"), root.join("data/cases.jsonl")];
        let (mut out, mut listable) = (Vec::new(), Vec::new());
        readable_except(&cfg, &exclude, &mut out, &mut listable);
        assert_eq!(out, vec![cfg.clone()], "nothing hidden below the folder itself: {out:?}");
        // Grant the folder holding the links, with the links' targets hidden from its side.
        let (mut out, mut listable) = (Vec::new(), Vec::new());
        readable_except(&cfg, &[cfg.join("x")], &mut out, &mut listable);
        let mut out = Vec::new();
        for p in [cfg.join("latest-runs"), cfg.join("t.jsonl"), cfg.join("data"), cfg.join("loop")] {
            readable_except(&p, &exclude, &mut out, &mut listable);
        }
        assert_eq!(out, vec![root.join("data/notes.txt")], "only what the links reach that is not hidden");
        assert!(out.iter().all(|p| !p.starts_with(root.join("runs"))));
    }

    #[test]
    fn a_script_named_by_path_brings_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("agent.sh"), b"").unwrap();
        let named = root.join("agent.sh").display().to_string();
        assert_eq!(program_files(&named), Some(root.join("agent.sh")));
        std::fs::create_dir_all(root.join("venv/bin")).unwrap();
        std::fs::write(root.join("venv/bin/python"), b"").unwrap();
        let named = root.join("venv/bin/python").display().to_string();
        assert_eq!(program_files(&named), Some(root.join("venv")), "an interpreter's prefix");
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

#[cfg(test)]
mod fetched_tests {
    #[test]
    fn what_was_fetched_for_a_benchmark_is_hidden_like_its_data() {
        let yaml = "name: s\nbenchmark:\n  kind: swebench\n  dataset: d.jsonl\nagent:\n  kind: nop\n";
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("d.jsonl"), "").unwrap();
        let run = agenteval_core::config::load_config_str(yaml, "s.yaml", dir.path(), &[]).unwrap().config;
        let hidden = super::hidden_paths(&run);
        let fixes = agenteval_core::cache_dir().join("swebench");
        let fixes = fixes.canonicalize().unwrap_or(fixes);
        assert!(hidden.contains(&fixes), "{hidden:?}");
    }
}
