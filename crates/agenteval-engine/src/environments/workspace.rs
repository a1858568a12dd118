//! The `workspace` environment: a folder made for each task attempt under
//! `<tmp>/agenteval-env/<run>/`, laid out like a small root: `work/` (the agent's working folder:
//! a copy of the task's folder, or a git repository checked out at a commit), `home/` (its HOME
//! and TMPDIR), and the worker's own `tmp/` (the start snapshot), `tests/`, `logs/verifier/` and
//! `solution/`, which the agent's commands cannot write. Commands run as `bash -c` under the
//! agent sandbox (they write only `work/` and `home/` and never see the bundles, the index or
//! the benchmark's data). No Docker needed; no CPU or memory limit.

use std::path::{Path, PathBuf};

use agenteval_core::config::RunConfig;
use agenteval_core::environment::{EnvHandle, EnvSpec, ExecOutput, ExecRequest};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use async_trait::async_trait;

use crate::isolation::sandbox;

/// The `PATH` of a workspace's commands.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, Clone)]
pub struct WorkspaceEnvironment {
    root: PathBuf,
    /// What commands may not see (the run's bundles, index, data, secrets file).
    hide: Vec<PathBuf>,
    /// Under a root worker, the uid each live attempt's commands run as, by its folder.
    uids: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<PathBuf, crate::isolation::uids::Lease>>>,
}

impl WorkspaceEnvironment {
    pub fn new(root: PathBuf, hide: Vec<PathBuf>) -> Self {
        WorkspaceEnvironment { root, hide, uids: Default::default() }
    }

    /// The uid of the attempt in `dir`, if this worker is root (`Err` if it has none: a folder
    /// this worker did not prepare).
    fn uid_of(&self, dir: &Path) -> Result<Option<u32>> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(None);
        }
        match self.uids.lock().expect("not poisoned").get(dir) {
            Some(lease) => Ok(Some(lease.uid)),
            None => Err(Error::invalid(format!("{} is not a workspace this worker prepared", dir.display()))),
        }
    }

    /// Under the system's temporary folder, hiding what the run's agents may not see.
    pub fn for_run(config: &RunConfig) -> Self {
        let hide = sandbox::hidden_paths(config);
        WorkspaceEnvironment::new(std::env::temp_dir().join("agenteval-env"), hide)
    }

    fn run_dir(&self, run: &RunId) -> PathBuf {
        self.root.join(run.to_string())
    }

    /// A handle's folder, if it is one of this environment's (a handle is data: never trust it
    /// to name any other folder).
    fn folder(&self, env: &EnvHandle) -> Result<PathBuf> {
        let p = PathBuf::from(&env.id);
        let inside = |q: &Path| q.starts_with(&self.root) && !q.components().any(|c| c.as_os_str() == "..");
        if env.kind != "workspace"
            || !inside(&p)
            || !(inside(Path::new(&env.workdir)) && Path::new(&env.workdir).starts_with(&p))
        {
            return Err(Error::invalid(format!("{} is not a workspace of this machine", env.id)));
        }
        Ok(p)
    }

    /// A path of the workspace as the host path it is: relative, in the working folder;
    /// absolute, the attempt's folder's own path (`/tests` is its `tests/`).
    fn inside(&self, env: &EnvHandle, path: &str) -> Result<PathBuf> {
        let root = self.folder(env)?;
        let p = if Path::new(path).starts_with(&root) {
            PathBuf::from(path)
        } else if path.starts_with('/') {
            root.join(path.trim_start_matches('/'))
        } else {
            Path::new(&env.workdir).join(path)
        };
        if p.components().any(|c| c.as_os_str() == "..") {
            return Err(Error::invalid(format!("{path} leaves the workspace")));
        }
        Ok(p)
    }
}

/// Runs the worker's git (nothing of the case's or anyone's configuration: `snapshot::worker_git`)
/// in `cwd`.
async fn run_git(args: &[&str], cwd: &Path) -> Result<()> {
    let home = tempfile::tempdir().map_err(|e| Error::io("a home for git", e))?;
    let out = super::snapshot::worker_git(home.path())
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .map_err(|e| Error::io("running git (is it installed?)", e))?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Io,
            format!("git {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()),
        ));
    }
    Ok(())
}

#[async_trait]
impl Environment for WorkspaceEnvironment {
    fn kind(&self) -> &str {
        "workspace"
    }

    async fn prepare(&self, run: &RunId, task: &TaskSpec, attempt: u32, spec: &EnvSpec) -> Result<EnvHandle> {
        let nonce = uuid_like();
        let dir = self.run_dir(run).join(format!("{}-a{attempt}-{nonce}", task.id));
        let (work, home) = (dir.join("work"), dir.join("home"));
        for d in [&work, &home] {
            std::fs::create_dir_all(d).map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
        }
        let made = async {
            match (&spec.repo, &spec.context) {
                (Some(repo), _) => {
                    run_git(&["clone", "--quiet", "--", repo, "."], &work).await?;
                    if let Some(commit) = &spec.commit {
                        run_git(&["checkout", "--quiet", "--detach", commit, "--"], &work).await?;
                    }
                }
                (None, Some(context)) => {
                    let (from, to) = (context.clone(), work.clone());
                    tokio::task::spawn_blocking(move || super::host::copy_tree(&from, &to))
                        .await
                        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?
                        .map_err(|e| Error::io(format!("copying {} into the workspace", context.display()), e))?;
                }
                (None, None) => {}
            }
            Ok::<_, Error>(())
        }
        .await;
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        // Every command of this attempt, the agent's and the tests', runs as its own uid.
        match crate::isolation::uids::lease() {
            Ok(Some(lease)) => {
                self.uids.lock().expect("not poisoned").insert(dir.clone(), lease);
            }
            Ok(None) => {}
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(Error::new(ErrorKind::Io, e.to_string()));
            }
        }
        Ok(EnvHandle {
            kind: "workspace".into(),
            id: dir.display().to_string(),
            workdir: work.display().to_string(),
            notes: vec![],
        })
    }

    async fn exec(&self, env: &EnvHandle, req: &ExecRequest) -> Result<ExecOutput> {
        let dir = self.folder(env)?;
        let work = PathBuf::from(&env.workdir);
        let as_root = req.user.as_deref() == Some("0");
        // The environment's own commands (the tests, an applied patch) get a home of their own,
        // made new each time: the agent's `home/` (a `.pth` in its user site-packages, a
        // `.gitconfig`) is the agent's, and the tests must not read it.
        let home = if as_root { dir.join("tmp/root-home") } else { dir.join("home") };
        if as_root {
            let _ = std::fs::remove_dir_all(&home);
            std::fs::create_dir_all(&home).map_err(|e| Error::io(format!("creating {}", home.display()), e))?;
        }
        let cwd = match &req.workdir {
            Some(w) => self.inside(env, w)?,
            None => work.clone(),
        };
        let base = sandbox::View { exclude: self.hide.clone(), user: self.uid_of(&dir)?, ..sandbox::View::system() };
        // The environment's "root" (the tests, a recorded patch applied) may write the whole
        // attempt's folder; the agent's commands only its folder and its home. Both run as the
        // attempt's uid: nothing a workspace runs is ever root on the worker.
        let view = if as_root { base.with_scratch(&dir) } else { base.with_scratch(&work).with_scratch(&home) };
        let args = ["-c".into(), req.command.clone().into()];
        let mut std_cmd = sandbox::supervised("bash".as_ref(), &args, Some(&view));
        std_cmd.current_dir(&cwd).env_clear();
        // The system's programs, as in a container: a PATH of the worker's own (a version
        // manager's shims under its home) would name programs the sandbox cannot read.
        std_cmd.env("PATH", SYSTEM_PATH);
        for var in ["LANG", "LC_ALL"] {
            if let Some(v) = std::env::var_os(var) {
                std_cmd.env(var, v);
            }
        }
        std_cmd.env("HOME", &home).env("TMPDIR", &home);
        std_cmd.envs(&req.env);
        super::host::run_bounded(tokio::process::Command::from(std_cmd), req, "the workspace").await
    }

    async fn copy_in(&self, env: &EnvHandle, from: &Path, to: &str) -> Result<()> {
        super::host::copy_in(from, self.inside(env, to)?, to).await
    }

    async fn copy_out(&self, env: &EnvHandle, from: &str, to: &Path, max_bytes: u64) -> Result<()> {
        super::host::copy_out(&self.inside(env, from)?, from, to, max_bytes)
    }

    fn worker_root(&self, env: &EnvHandle) -> String {
        env.id.clone()
    }

    async fn teardown(&self, env: &EnvHandle) -> Result<()> {
        let dir = self.folder(env)?;
        let removed = std::fs::remove_dir_all(&dir);
        // Its processes died with each command's tree: the uid is free for another attempt.
        self.uids.lock().expect("not poisoned").remove(&dir);
        match removed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }

    async fn sweep(&self, run: &RunId) -> Result<usize> {
        let dir = self.run_dir(run);
        let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }
}

/// A short random suffix: two attempts (a duplicated job) never share a folder.
fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}{:x}", t & 0xffff_ffff, std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn task() -> TaskSpec {
        serde_json::from_value(serde_json::json!({"id": "t1", "input": "x"})).unwrap()
    }

    #[tokio::test]
    async fn the_workspace_environment_passes_the_environment_suite() {
        let root = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("seed.txt"), "hello\n").unwrap();
        let env = WorkspaceEnvironment::new(root.path().to_path_buf(), vec![]);
        let spec = EnvSpec { context: Some(src.path().to_path_buf()), ..Default::default() };
        agenteval_testkit::conformance::environment_suite(&env, &spec, false).await;
    }

    #[tokio::test]
    async fn a_workspace_is_made_used_and_removed_and_removing_it_twice_is_fine() {
        let root = tempfile::tempdir().unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "hello").unwrap();
        let env = WorkspaceEnvironment::new(root.path().to_path_buf(), vec![]);
        let run = RunId::new();
        let spec = EnvSpec { context: Some(src.path().to_path_buf()), ..Default::default() };
        let h = env.prepare(&run, &task(), 1, &spec).await.unwrap();
        let out =
            env.exec(&h, &ExecRequest::new("cat a.txt; echo oops >&2; exit 3", Duration::from_secs(10))).await.unwrap();
        assert_eq!((out.exit_code, out.stdout.as_str(), out.stderr.as_str()), (Some(3), "hello", "oops\n"));
        let slow = env.exec(&h, &ExecRequest::new("sleep 5", Duration::from_millis(200))).await.unwrap();
        assert!(slow.timed_out && slow.exit_code.is_none(), "{slow:?}");
        let out_dir = tempfile::tempdir().unwrap();
        env.copy_out(&h, "a.txt", out_dir.path(), 100).await.unwrap();
        assert_eq!(std::fs::read_to_string(out_dir.path().join("a.txt")).unwrap(), "hello");
        assert!(env.copy_out(&h, "a.txt", out_dir.path(), 2).await.is_err(), "past the cap");
        let forged = EnvHandle { kind: "workspace".into(), id: "/etc".into(), workdir: "/etc".into(), notes: vec![] };
        assert!(env.teardown(&forged).await.is_err(), "a handle naming another folder is refused");
        let elsewhere = EnvHandle { workdir: "/etc".into(), ..h.clone() };
        assert!(
            env.exec(&elsewhere, &ExecRequest::new("true", Duration::from_secs(5))).await.is_err(),
            "or a working folder outside it"
        );
        env.teardown(&h).await.unwrap();
        env.teardown(&h).await.unwrap();
        assert!(!Path::new(&h.id).exists());
        assert!(h.workdir.starts_with(&h.id) && h.workdir != h.id, "the agent works in a folder of the attempt's");
        let left = env.prepare(&run, &task(), 2, &spec).await.unwrap();
        assert_eq!(env.sweep(&run).await.unwrap(), 1, "what a killed worker left is found by run");
        assert!(!Path::new(&left.id).exists());
    }
}
