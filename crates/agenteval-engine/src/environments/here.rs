//! The `here` environment: the container the worker itself runs in, on a backend that runs
//! each job in its tasks' own image (ECS Fargate: one task definition per image, the worker
//! entering it from an init container; `docs/aws.md`). There is no container to create or
//! remove: a task's environment is this container's root, and its teardown puts the container
//! back as it was for the job's next task of the same image — every process the task left is
//! killed, the working folder is restored from the copy taken before the first task, and the
//! scratch folders are emptied. What a task changed anywhere else (the tools the next task's
//! tests would trust) cannot be put back: the worker then runs no further task here and hands
//! the rest of its job back to the controller, for a fresh container (`Here::tainted`).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agenteval_core::environment::{EnvHandle, EnvSpec, ExecOutput, ExecRequest, ProcessMark};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use async_trait::async_trait;

use super::workspace::SYSTEM_PATH;

/// Where the worker keeps its own state in the container (the starting copy of the working
/// folder), outside every place a task may change.
const STATE: &str = "/var/lib/agenteval-here";
/// Emptied between tasks; never compared.
const SCRATCH: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];
/// Never compared: the kernel's, the worker's own (read-only) volume, and the verifier's
/// folders, removed between tasks. The starting copy (`STATE`) is compared like the rest: a task
/// that changed it would change what the next one starts from.
const NOT_COMPARED: &[&str] = &["/proc", "/sys", "/dev", "/agenteval", "/tests", "/logs", "/solution"];
/// Files compared at most: past it the container is taken as changed (never as clean).
const MAX_FILES: usize = 500_000;
/// Changed files named at most in the change report; the rest are counted.
const MAX_LISTED: usize = 10_000;

/// One file's identity as the task found it.
type Stamp = (u64, i64, i64, u32, u32);

/// A walk of the container: each file's stamp, and whether the walk stopped at [`MAX_FILES`].
type Walk = (BTreeMap<PathBuf, Stamp>, bool);

#[derive(Debug, Default)]
struct State {
    /// The working folder, its starting copy and the root's files as the first task found them
    /// (and whether that walk stopped at its limit).
    start: Option<(PathBuf, PathBuf, Walk)>,
    /// What a task changed outside what is reset, once found.
    tainted: Vec<String>,
    /// The task's variables (Harbor's `[environment] env`), for every command.
    env: BTreeMap<String, String>,
    /// The container's processes when the task's environment was prepared (its image's own
    /// services, started by its ENTRYPOINT): never the agent's, nor its setup's, nor a step's.
    before_agent: Vec<ProcessMark>,
    /// The task lets its agent trace processes (`EnvSpec::ptrace`).
    ptrace: bool,
}

/// Every process of this container, by pid and start time.
fn processes() -> Vec<ProcessMark> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| mark_of(e.file_name().to_str()?.parse().ok()?)).collect()
}

fn mark_of(pid: u32) -> Option<ProcessMark> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, _, start) = agenteval_core::environment::parse_proc_stat(&stat)?;
    Some(ProcessMark { pid, start })
}

#[derive(Debug)]
pub struct HereEnvironment {
    /// The working folder when a task names none: the image's `WORKDIR` (the worker's folder
    /// when it started).
    default_workdir: PathBuf,
    root: PathBuf,
    state: Mutex<State>,
    /// What every command starts from: the image's own variables (`ENV` in its Dockerfile, as a
    /// container's commands get them), never the launch's (its link's token, the platform's).
    base: BTreeMap<String, String>,
    /// The servers the agent left for the tests, watched from this process (`agenteval-watch`)
    /// until the task's teardown kills them.
    watch: Mutex<Option<std::sync::Arc<agenteval_watch::Watch>>>,
}

/// Variables of the serving process that are the launch's, not the image's.
fn launch_variable(name: &str) -> bool {
    name.starts_with("AGENTEVAL_") || name.starts_with("AWS_") || name.starts_with("ECS_")
}

impl HereEnvironment {
    pub fn new() -> Self {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut here = HereEnvironment::rooted(PathBuf::from("/"), cwd);
        here.base = std::env::vars().filter(|(k, _)| !launch_variable(k)).collect();
        here
    }

    /// Rooted elsewhere than `/` (tests).
    pub fn rooted(root: PathBuf, default_workdir: PathBuf) -> Self {
        HereEnvironment {
            default_workdir,
            root,
            state: Mutex::new(State::default()),
            base: BTreeMap::new(),
            watch: Mutex::new(None),
        }
    }

    fn at(&self, abs: &str) -> PathBuf {
        // A rooted copy's handle names its working folder as this machine does (already below
        // the root); in the worker's own container the root is `/` and every path is its own.
        if Path::new(abs).starts_with(&self.root) {
            return PathBuf::from(abs);
        }
        self.root.join(abs.trim_start_matches('/'))
    }

    /// What a finished task changed that no reset puts back (empty: the next task may run here).
    pub fn tainted(&self) -> Vec<String> {
        self.state.lock().expect("state lock").tainted.clone()
    }

    fn path(&self, env: &EnvHandle, p: &str) -> Result<PathBuf> {
        if env.kind != "here" {
            return Err(Error::invalid(format!("{} is not this container's environment", env.id)));
        }
        let p = if p.starts_with('/') { self.at(p) } else { Path::new(&env.workdir).join(p) };
        if p.components().any(|c| c.as_os_str() == "..") {
            return Err(Error::invalid(format!("{} leaves the environment", p.display())));
        }
        Ok(p)
    }

    /// Every file below the root but the skipped places, with what identifies its content, and
    /// whether the walk stopped at [`MAX_FILES`] (then what it did not reach cannot be compared).
    fn stamps(&self, workdir: &Path) -> Walk {
        let mut skip: Vec<PathBuf> = NOT_COMPARED.iter().chain(SCRATCH).map(|p| self.at(p)).collect();
        skip.push(workdir.to_path_buf());
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root.clone()];
        let mut cut = false;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let p = e.path();
                if skip.contains(&p) {
                    continue;
                }
                if out.len() >= MAX_FILES {
                    cut = true;
                    break;
                }
                let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
                // A folder's times move whenever an entry comes or goes (the verifier's `/tests`
                // in `/`); its entries are compared themselves.
                let stamp = if m.is_dir() {
                    (0, 0, 0, m.mode(), m.uid())
                } else {
                    (m.len(), m.mtime(), m.ctime(), m.mode(), m.uid())
                };
                out.insert(p.clone(), stamp);
                if m.is_dir() {
                    stack.push(p);
                }
            }
        }
        (out, cut)
    }
}

/// What changed between two walks of the container: every file added, changed or removed, in
/// order, at most [`MAX_LISTED`] by name and the rest counted; a walk that stopped at its limit
/// says so, which counts as a change (a file past the limit cannot be compared, so it is never
/// taken as unchanged).
fn changed_between(start: &Walk, walked: &Walk) -> Vec<String> {
    let (before, now) = (&start.0, &walked.0);
    let mut changed: Vec<&PathBuf> = now.iter().filter(|(p, s)| before.get(*p) != Some(*s)).map(|(p, _)| p).collect();
    changed.extend(before.keys().filter(|p| !now.contains_key(*p)));
    changed.sort_unstable();
    let mut out: Vec<String> = changed.iter().take(MAX_LISTED).map(|p| p.display().to_string()).collect();
    if changed.len() > MAX_LISTED {
        out.push(format!("(and {} more files changed)", changed.len() - MAX_LISTED));
    }
    if start.1 || walked.1 {
        out.push(format!(
            "(the container holds more than {MAX_FILES} files: those past them cannot be compared, so the rest of it is taken as changed)"
        ));
    }
    out
}

impl Default for HereEnvironment {
    fn default() -> Self {
        HereEnvironment::new()
    }
}

/// Kills every process of the container but this process, its ancestors and `spare` (what a
/// task's commands started, in whatever group or session they moved to).
fn kill_others(spare: &[ProcessMark]) {
    let me = std::process::id() as i32;
    let mut keep = vec![me];
    // A spared pid is the image's process only while its start time is the one seen then.
    keep.extend(spare.iter().filter(|m| mark_of(m.pid).as_ref() == Some(*m)).map(|m| m.pid as i32));
    let mut p = me;
    while let Some(parent) = parent_of(p).filter(|&pp| pp > 0) {
        keep.push(parent);
        p = parent;
    }
    for _ in 0..3 {
        let Ok(entries) = std::fs::read_dir("/proc") else { return };
        let mut killed = 0;
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            // Threads of this worker are not listed in /proc; its children (none run between
            // tasks) would be killed like any other.
            if keep.contains(&pid) || parent_of(pid).is_none() {
                continue;
            }
            if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
        if killed == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

fn empty_dir(dir: &Path, keep: &[PathBuf]) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for e in entries.flatten() {
        let p = e.path();
        if keep.iter().any(|k| k.starts_with(&p)) {
            continue;
        }
        if e.file_type()?.is_dir() { std::fs::remove_dir_all(&p)? } else { std::fs::remove_file(&p)? }
    }
    Ok(())
}

fn blocking_err(e: tokio::task::JoinError) -> Error {
    Error::new(ErrorKind::Internal, e.to_string())
}

#[async_trait]
impl Environment for HereEnvironment {
    fn kind(&self) -> &str {
        "here"
    }

    async fn prepare(&self, _run: &RunId, task: &TaskSpec, attempt: u32, spec: &EnvSpec) -> Result<EnvHandle> {
        let workdir = match &spec.workdir {
            Some(w) => self.at(w),
            None => self.default_workdir.clone(),
        };
        let mut notes = vec![];
        if let Some(image) = &spec.image {
            notes.push(format!("image {image}, this container's own"));
        }
        // The working folder is copied and restored whole: it cannot be the root, or hold the
        // worker's own state.
        if workdir == self.root || self.at(STATE).starts_with(&workdir) {
            return Err(Error::invalid(format!(
                "task {}: its image's working folder is {}: give the image a WORKDIR (e.g. /app) or the task a workdir",
                task.id,
                workdir.display()
            )));
        }
        {
            let mut st = self.state.lock().expect("state lock");
            st.env = spec.env.clone();
            st.ptrace = spec.ptrace;
            // Only the container's own root has its own processes (a rooted copy shares this
            // machine's).
            if self.root == Path::new("/") {
                st.before_agent = processes();
            }
        }
        let first = self.state.lock().expect("state lock").start.is_none();
        // A compose task's services share this container's network (one ECS task): each is
        // reached by its name, on loopback, as under Docker by its own address.
        if first && !spec.sidecars.is_empty() {
            let names: Vec<&str> = spec.sidecars.iter().map(|s| s.name.as_str()).collect();
            let hosts = self.at("/etc/hosts");
            let mut text = std::fs::read_to_string(&hosts).unwrap_or_default();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("127.0.0.1 {}\n", names.join(" ")));
            std::fs::write(&hosts, text).map_err(|e| Error::io("naming the task's services in /etc/hosts", e))?;
        }
        if first {
            let (root_state, wd) = (self.at(STATE), workdir.clone());
            let this = HereEnvironment::rooted(self.root.clone(), self.default_workdir.clone());
            let start = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
                std::fs::create_dir_all(&wd)?;
                let copy = root_state.join("start");
                let _ = std::fs::remove_dir_all(&copy);
                std::fs::create_dir_all(&root_state)?;
                std::fs::set_permissions(&root_state, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
                super::host::copy_tree(&wd, &copy)?;
                Ok((wd.clone(), copy, this.stamps(&wd)))
            })
            .await
            .map_err(blocking_err)?
            .map_err(|e| Error::io(format!("keeping the starting state of {}", workdir.display()), e))?;
            self.state.lock().expect("state lock").start = Some(start);
        } else if !self.tainted().is_empty() {
            return Err(Error::new(ErrorKind::Transient, "this container was changed by an earlier task"));
        }
        Ok(EnvHandle {
            kind: "here".into(),
            id: format!("here-{}-a{attempt}", task.id),
            workdir: workdir.display().to_string(),
            notes,
        })
    }

    async fn exec(&self, env: &EnvHandle, req: &ExecRequest) -> Result<ExecOutput> {
        let cwd = match &req.workdir {
            Some(w) => self.path(env, w)?,
            None => PathBuf::from(&env.workdir),
        };
        // In the worker's own container every command starts through agenteval's launcher,
        // which keeps it and all it starts from tracing another process (the container's own
        // seccomp profile is the platform's, which allows `ptrace`), unless the task allows it;
        // an agent's command also from reaching any process it did not start (`drop_reach`).
        let traced = self.state.lock().expect("state lock").ptrace;
        let launcher = crate::isolation::sandbox::launcher().filter(|_| self.root == Path::new("/") && !traced);
        let mut cmd = match launcher {
            Some(l) => {
                let mut c = tokio::process::Command::new(l);
                c.args(["agent-sandbox", "--inner", "--no-trace"]);
                if !req.grader {
                    c.arg("--agent");
                }
                c.args(["--", "bash"]);
                c
            }
            None => tokio::process::Command::new("bash"),
        };
        cmd.arg("-c").arg(&req.command).current_dir(&cwd).env_clear();
        // The image's variables, the task's, the command's: never the serving process's own
        // (its link's token among them).
        let task_env = self.state.lock().expect("state lock").env.clone();
        cmd.env("PATH", SYSTEM_PATH).env("HOME", "/root").envs(&self.base).envs(&task_env).envs(&req.env);
        if let Some(user) = req.user.as_deref().filter(|u| *u != "0" && *u != "root") {
            let u = match user.parse::<u32>() {
                Ok(uid) => nix::unistd::User::from_uid(uid.into()).ok().flatten(),
                Err(_) => nix::unistd::User::from_name(user).ok().flatten(),
            }
            .ok_or_else(|| Error::invalid(format!("no user {user} in this container")))?;
            cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw()).env("HOME", &u.dir);
        }
        super::host::run_bounded(cmd, req, "this container").await
    }

    async fn copy_in(&self, env: &EnvHandle, from: &Path, to: &str) -> Result<()> {
        super::host::copy_in(from, self.path(env, to)?, to).await
    }

    async fn copy_out(&self, env: &EnvHandle, from: &str, to: &Path, max_bytes: u64) -> Result<()> {
        super::host::copy_out(&self.path(env, from)?, from, to, max_bytes)
    }

    fn processes_before_agent(&self, _env: &EnvHandle) -> Vec<ProcessMark> {
        self.state.lock().expect("state lock").before_agent.clone()
    }

    /// What is in the container now is its own from here on (an agent's install, before the
    /// agent runs): its files for `changed_outside`. Not its processes: those the image had when
    /// the environment was prepared stay the only ones the hold spares (an agent's setup, or a
    /// step's writer, must not become the image's own).
    async fn mark_baseline(&self, _env: &EnvHandle) {
        let workdir = self.state.lock().expect("state lock").start.as_ref().map(|(w, _, _)| w.clone());
        if let Some(workdir) = workdir {
            let this = HereEnvironment::rooted(self.root.clone(), self.default_workdir.clone());
            if let Ok(now) = tokio::task::spawn_blocking(move || this.stamps(&workdir)).await
                && let Some(start) = self.state.lock().expect("state lock").start.as_mut()
            {
                start.2 = now;
            }
        }
    }

    /// Where this process may trace the agent's (root in its own container, x86-64): the
    /// servers the hold stopped are let go here, each watched first.
    fn releases_servers(&self, env: &EnvHandle) -> bool {
        self.leftovers_outlive_agent(env) && cfg!(target_arch = "x86_64") && nix::unistd::geteuid().is_root()
    }

    /// Each server attached while still stopped, then sent `SIGCONT`, then watched before any
    /// code of it runs; one that cannot be watched is let go all the same.
    async fn release(&self, _env: &EnvHandle, pids: &[u32]) -> Vec<u32> {
        let watch = self
            .watch
            .lock()
            .expect("watch lock")
            .get_or_insert_with(|| {
                let guarded = ["/tests", "/logs", "/solution"].iter().map(|p| p.to_string()).collect();
                std::sync::Arc::new(agenteval_watch::Watch::new(guarded))
            })
            .clone();
        let pids = pids.to_vec();
        let released = tokio::task::spawn_blocking(move || {
            let mut watched = Vec::new();
            for pid in pids {
                let go = move || {
                    let _ = i32::try_from(pid)
                        .map(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::SIGCONT));
                };
                match watch.add(pid, go) {
                    Ok(()) => watched.push(pid),
                    Err(e) => tracing::warn!("a server the agent left runs unwatched beside the tests ({e})"),
                }
            }
            watched
        });
        released.await.unwrap_or_default()
    }

    async fn watched(&self, _env: &EnvHandle) -> Vec<(u32, String, String)> {
        let watch = self.watch.lock().expect("watch lock").clone();
        watch.map(|w| w.take().into_iter().map(|c| (c.pid, c.command, c.what)).collect()).unwrap_or_default()
    }

    fn leftovers_outlive_agent(&self, _env: &EnvHandle) -> bool {
        // Only the worker's own container: a rooted copy (tests) shares this machine's processes.
        self.root == Path::new("/")
    }

    /// What the agent left running is killed; the image's own processes (its ENTRYPOINT's
    /// services, running when the environment was prepared) go on, as a container restarted
    /// runs them again.
    async fn quiesce(&self, _env: &EnvHandle) -> Result<()> {
        if self.root == Path::new("/") {
            let spare = self.state.lock().expect("state lock").before_agent.clone();
            tokio::task::spawn_blocking(move || kill_others(&spare)).await.map_err(blocking_err)?;
        }
        Ok(())
    }

    /// Puts the container back for the next task: processes killed, the working folder as it
    /// started, scratch emptied, the verifier's folders removed; then says whether anything
    /// else changed since the first task started (`tainted`).
    async fn teardown(&self, _env: &EnvHandle) -> Result<()> {
        let start = {
            let st = self.state.lock().expect("state lock");
            st.start.as_ref().map(|(w, c, s)| (w.clone(), c.clone(), s.clone()))
        };
        let Some((workdir, copy, stamps)) = start else { return Ok(()) };
        if self.root == Path::new("/") {
            tokio::task::spawn_blocking(|| kill_others(&[])).await.map_err(blocking_err)?;
        }
        // Its servers are gone: the watch's thread ends.
        if let Some(w) = self.watch.lock().expect("watch lock").take() {
            tokio::task::spawn_blocking(move || drop(w));
        }
        let this = HereEnvironment::rooted(self.root.clone(), self.default_workdir.clone());
        let scratch: Vec<PathBuf> = SCRATCH.iter().map(|p| self.at(p)).collect();
        let verifier: Vec<PathBuf> = ["/tests", "/logs", "/solution"].iter().map(|p| self.at(p)).collect();
        // The worker's own: a packed agent unpacked once for the job (`agents::pack`).
        let keep = vec![self.at(STATE), std::env::temp_dir().join("agenteval-agents")];
        let changed = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<String>> {
            // Emptied and filled, not removed: its parent stays as the image made it.
            empty_dir(&workdir, &[])?;
            super::host::copy_tree(&copy, &workdir)?;
            for d in &scratch {
                empty_dir(d, &keep)?;
            }
            for d in &verifier {
                let _ = std::fs::remove_dir_all(d);
            }
            let (now, cut) = this.stamps(&workdir);
            let mut changed: Vec<String> = Vec::new();
            for (p, s) in &now {
                if stamps.0.get(p) != Some(s) {
                    changed.push(p.display().to_string());
                }
            }
            changed.extend(
                stamps.0.keys().filter(|p| !now.contains_key(*p)).map(|p| format!("{} (removed)", p.display())),
            );
            if cut || stamps.1 {
                changed.push(format!("(more than {MAX_FILES} files: the rest cannot be compared)"));
            }
            Ok(changed)
        })
        .await
        .map_err(blocking_err)?
        .map_err(|e| Error::io("putting the container back for the next task", e))?;
        if !changed.is_empty() {
            let mut st = self.state.lock().expect("state lock");
            st.tainted = changed;
        }
        Ok(())
    }

    /// Nothing outlives the container: the ECS task's end removes it.
    async fn sweep(&self, _run: &RunId) -> Result<usize> {
        Ok(0)
    }

    fn outlives_its_worker(&self) -> bool {
        false
    }

    async fn changed_outside(&self, env: &EnvHandle) -> Vec<String> {
        let start = self.state.lock().expect("state lock").start.as_ref().map(|(_, _, s)| s.clone());
        let Some(stamps) = start else { return vec![] };
        let this = HereEnvironment::rooted(self.root.clone(), self.default_workdir.clone());
        let workdir = PathBuf::from(&env.workdir);
        // Homes are compared as locally (a `usercustomize.py` under `/root` runs in every test's
        // `python3`).
        tokio::task::spawn_blocking(move || changed_between(&stamps, &this.stamps(&workdir)))
            .await
            .unwrap_or_else(|e| vec![format!("(the change report could not be taken: {e})")])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn task() -> TaskSpec {
        serde_json::from_value(serde_json::json!({"id": "t1", "input": "x"})).unwrap()
    }

    /// The fleet job's own container is an environment like any other: the port's conformance
    /// suite runs on one rooted in a folder (its image's working folder holding the seed).
    #[tokio::test]
    async fn the_here_environment_passes_the_environment_suite() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("app");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("seed.txt"), "hello\n").unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), work);
        agenteval_testkit::conformance::environment_suite(&env, &EnvSpec::default(), false).await;
    }

    #[tokio::test]
    async fn the_here_environment_served_over_a_link_passes_the_environment_suite() {
        // As a fleet's environment task serves it (`agenteval env serve`) to its worker.
        let root = tempfile::tempdir().unwrap();
        let workdir = root.path().join("app");
        std::fs::create_dir_all(&workdir).unwrap();
        std::fs::write(workdir.join("seed.txt"), "hello").unwrap();
        let here = std::sync::Arc::new(HereEnvironment::rooted(root.path().to_path_buf(), workdir));
        let launcher = std::sync::Arc::new(agenteval_envlink::testing::InProcess::new(here).await);
        let env = agenteval_envlink::LinkedEnvironment::new(launcher);
        agenteval_testkit::conformance::environment_suite(&env, &EnvSpec::default(), false).await;
    }

    #[tokio::test]
    async fn a_task_s_changes_to_its_folder_are_undone_and_others_taint_the_container() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("app");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("main.py"), "print(1)\n").unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::write(root.path().join("usr/bin/pytest"), "real\n").unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), work.clone());
        let run = RunId::new();
        let h = env.prepare(&run, &task(), 1, &EnvSpec::default()).await.unwrap();
        let out = env
            .exec(&h, &ExecRequest::new("echo changed > main.py && touch new.txt && pwd", Duration::from_secs(5)))
            .await
            .unwrap();
        assert!(out.ok() && out.stdout.trim() == work.display().to_string(), "{out:?}");
        env.teardown(&h).await.unwrap();
        assert_eq!(std::fs::read_to_string(work.join("main.py")).unwrap(), "print(1)\n");
        assert!(!work.join("new.txt").exists());
        assert!(env.tainted().is_empty(), "{:?}", env.tainted());
        // The next task finds the folder as the first did; changing a tool taints the container.
        let h = env.prepare(&run, &task(), 1, &EnvSpec::default()).await.unwrap();
        std::fs::write(root.path().join("usr/bin/pytest"), "always pass\n").unwrap();
        env.teardown(&h).await.unwrap();
        assert!(env.tainted().iter().any(|p| p.ends_with("usr/bin/pytest")), "{:?}", env.tainted());
        let err = env.prepare(&run, &task(), 1, &EnvSpec::default()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
    }

    #[tokio::test]
    async fn a_task_that_changes_the_starting_copy_taints_the_container() {
        let root = tempfile::tempdir().unwrap();
        let work = root.path().join("app");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("main.py"), "print(1)\n").unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), work.clone());
        let h = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap();
        // The next task would start from a planted answer.
        let copy = root.path().join(STATE.trim_start_matches('/')).join("start/answer.txt");
        std::fs::write(&copy, "planted\n").unwrap();
        env.teardown(&h).await.unwrap();
        assert!(!env.tainted().is_empty(), "the planted file is found");
    }

    #[tokio::test]
    async fn a_command_gets_only_its_own_variables() {
        let root = tempfile::tempdir().unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), root.path().join("w"));
        let h = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap();
        let mut req = ExecRequest::new("env", Duration::from_secs(5));
        req.env.insert("GIVEN".into(), "yes".into());
        let out = env.exec(&h, &req).await.unwrap();
        assert!(out.stdout.contains("GIVEN=yes"), "{}", out.stdout);
        // None of the worker's own variables (cargo gives the test process several).
        for (k, _) in std::env::vars().filter(|(k, _)| !["PATH", "HOME", "PWD", "SHLVL", "_"].contains(&k.as_str())) {
            assert!(!out.stdout.lines().any(|l| l.starts_with(&format!("{k}="))), "{k} leaked: {}", out.stdout);
        }
        assert!(env.copy_out(&h, "../x", root.path(), 10).await.is_err());
    }

    /// The fleet's change report reads as the local one: a file under `/root` and a removed file
    /// are changes, and a walk past its limit is "cannot be compared", never clean.
    #[test]
    fn homes_removals_and_a_walk_past_its_limit_are_changes() {
        let root = tempfile::tempdir().unwrap();
        for d in ["root", "usr/bin", "app"] {
            std::fs::create_dir_all(root.path().join(d)).unwrap();
        }
        std::fs::write(root.path().join("usr/bin/tool"), "x").unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), root.path().join("app"));
        let start = env.stamps(&root.path().join("app"));
        std::fs::write(root.path().join("root/usercustomize.py"), "import os").unwrap();
        std::fs::remove_file(root.path().join("usr/bin/tool")).unwrap();
        let changed = changed_between(&start, &env.stamps(&root.path().join("app")));
        let named = |end: &str| changed.iter().any(|c| c.ends_with(end));
        assert!(named("root/usercustomize.py") && named("usr/bin/tool"), "{changed:?}");
        assert_eq!(changed.len(), 2, "{changed:?}");
        let cut = (start.0.clone(), true);
        let changed = changed_between(&cut, &cut);
        assert!(changed.len() == 1 && changed[0].contains("cannot be compared"), "{changed:?}");
    }

    /// An install before the agent (the baseline taken after it) is the container's own; what
    /// comes after is the agent's.
    #[tokio::test]
    async fn what_changed_before_the_baseline_is_the_containers_own() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), root.path().join("w"));
        let h = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap();
        std::fs::write(root.path().join("usr/bin/installed"), "x").unwrap();
        env.mark_baseline(&h).await;
        assert!(env.changed_outside(&h).await.is_empty(), "the install is the container's");
        std::fs::write(root.path().join("usr/bin/planted"), "x").unwrap();
        let changed = env.changed_outside(&h).await;
        assert!(changed.len() == 1 && changed[0].ends_with("usr/bin/planted"), "{changed:?}");
    }

    /// As a container's commands get them: the image's variables, then the task's, then the
    /// command's own; the serving process's launch variables (the link's token) never.
    #[tokio::test]
    async fn the_images_and_the_tasks_variables_reach_every_command_the_launchs_never() {
        let root = tempfile::tempdir().unwrap();
        let mut env = HereEnvironment::rooted(root.path().to_path_buf(), root.path().join("w"));
        let served = [("PYTHONPATH", "/opt/lib"), ("AGENTEVAL_ENVLINK_TOKEN", "secret"), ("AWS_REGION", "x")];
        env.base =
            served.iter().filter(|(k, _)| !launch_variable(k)).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let spec = EnvSpec { env: [("TASK_VAR".to_string(), "t".to_string())].into(), ..EnvSpec::default() };
        let h = env.prepare(&RunId::new(), &task(), 1, &spec).await.unwrap();
        let out = env.exec(&h, &ExecRequest::new("env", Duration::from_secs(5))).await.unwrap();
        assert!(out.stdout.contains("PYTHONPATH=/opt/lib") && out.stdout.contains("TASK_VAR=t"), "{}", out.stdout);
        assert!(
            !out.stdout.contains("AGENTEVAL_ENVLINK_TOKEN") && !out.stdout.contains("AWS_REGION"),
            "{}",
            out.stdout
        );
    }

    #[tokio::test]
    async fn an_image_without_a_working_folder_is_refused_not_copied_whole() {
        let root = tempfile::tempdir().unwrap();
        let env = HereEnvironment::rooted(root.path().to_path_buf(), root.path().to_path_buf());
        let err = env.prepare(&RunId::new(), &task(), 1, &EnvSpec::default()).await.unwrap_err();
        assert!(err.to_string().contains("WORKDIR"), "{err}");
        assert!(!root.path().join(STATE.trim_start_matches('/')).exists(), "nothing was copied");
    }
}
