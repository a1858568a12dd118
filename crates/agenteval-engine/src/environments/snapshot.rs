//! The agent's patch, made by the worker's own `git` over copies of the working folder taken out
//! of the environment at the start and at the end: no git, configuration, hook, attribute or
//! ignore file of the agent's takes part, wherever the agent acts (it may be root in its
//! container, and write `~/.gitconfig` in a workspace).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use agenteval_core::traits::EnvSession;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use tokio::io::AsyncReadExt as _;

/// The most of a working folder copied out for a snapshot (at the start or the end).
pub const MAX_TREE_BYTES: u64 = 1 << 30;

/// What overrides any `.gitattributes` the tree holds (`info/attributes` is read first): files
/// are added as they are, no filter, no line-ending or encoding conversion, no diff driver.
const ATTRIBUTES: &str = "* -text -filter -ident -working-tree-encoding !eol !diff !merge\n";

/// Where a run's snapshots are kept on this machine; removed with the run's environments.
pub fn run_folder(run: &RunId) -> PathBuf {
    std::env::temp_dir().join("agenteval-snapshots").join(run.to_string())
}

/// The worker's `git` with nothing of anyone's configuration: no system or global file, `HOME`
/// a folder of the worker's (`home`), hooks, fsmonitor and external diff off. For every git the
/// worker runs over files an agent or a case file gave it (snapshots, patches, clones).
pub fn worker_git(home: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .args(HARDENED)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// [`worker_git`] over the snapshot's git folder (`dir/git`) with `tree` as its work tree.
fn git(dir: &Path, tree: &Path) -> tokio::process::Command {
    let mut cmd = worker_git(dir);
    cmd.env("GIT_DIR", dir.join("git")).env("GIT_WORK_TREE", tree).current_dir(tree);
    cmd
}

use agenteval_core::environment::HARDENED_GIT as HARDENED;
pub use agenteval_core::environment::hardened_shell_git;

async fn run_git(cmd: &mut tokio::process::Command, what: &str) -> Result<()> {
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().await.map_err(|e| {
        Error::io(format!("{what}: running the worker's git (is git installed where the worker runs?)"), e)
    })?;
    if !out.status.success() {
        return Err(Error::new(ErrorKind::Io, format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

/// The starting state of a task's working folder, kept on the worker's side.
#[derive(Debug)]
pub struct Snapshot {
    dir: tempfile::TempDir,
}

impl Snapshot {
    /// Copies the working folder out and commits it to a git folder of the worker's.
    pub async fn take(session: &EnvSession, run: &RunId) -> Result<Snapshot> {
        let parent = run_folder(run);
        std::fs::create_dir_all(&parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
        let dir = tempfile::Builder::new()
            .prefix("snap-")
            .tempdir_in(&parent)
            .map_err(|e| Error::io("a folder for the starting state", e))?;
        let tree = dir.path().join("tree");
        copy_tree_out(session, &tree).await?;
        let d = dir.path();
        run_git(git(d, &tree).args(["init", "-q"]).env_remove("GIT_WORK_TREE"), "git init").await?;
        let attributes = d.join("git/info/attributes");
        std::fs::create_dir_all(d.join("git/info"))
            .and_then(|()| std::fs::write(&attributes, ATTRIBUTES))
            .map_err(|e| Error::io("writing the snapshot's attributes", e))?;
        run_git(git(d, &tree).args(["add", "-A", "-f"]), "git add").await?;
        run_git(git(d, &tree).args(["commit", "-q", "--allow-empty", "--no-verify", "-m", "start"]), "git commit")
            .await?;
        remove(tree).await;
        Ok(Snapshot { dir })
    }

    /// What the agent changed in its working folder since the start, as a git patch of at most
    /// `max_bytes`: `Err` names why there is none (a patch over the budget is never cut).
    pub async fn patch(&self, session: &EnvSession, max_bytes: u64) -> Result<String> {
        let p = self.patch_digested(session, max_bytes).await?;
        p.text.ok_or_else(|| {
            Error::invalid(format!(
                "left out: it is {} bytes, over the task's {max_bytes} (environment.max_artifact_bytes, for the patch and the artifacts together)",
                p.bytes
            ))
        })
    }

    /// The patch (when it fits in `max_bytes`) and, always, its size and sha256: the final state
    /// stays comparable (`replay`) when the patch itself is too big to keep.
    pub async fn patch_digested(&self, session: &EnvSession, max_bytes: u64) -> Result<Patch> {
        use sha2::{Digest as _, Sha256};
        let d = self.dir.path();
        let tree = d.join("end");
        let made = async {
            copy_tree_out(session, &tree).await?;
            run_git(git(d, &tree).args(["add", "-A", "-f"]), "git add").await?;
            let mut child = git(d, &tree)
                .args(["diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--no-color", "HEAD"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| Error::io("running the worker's git", e))?;
            let mut kept = Vec::new();
            let mut hash = Sha256::new();
            let mut bytes = 0u64;
            let mut stdout = child.stdout.take().expect("piped");
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = stdout.read(&mut buf).await.map_err(|e| Error::io("reading the patch", e))?;
                if n == 0 {
                    break;
                }
                hash.update(&buf[..n]);
                bytes += n as u64;
                if bytes <= max_bytes {
                    kept.extend_from_slice(&buf[..n]);
                }
            }
            let status = child.wait().await.map_err(|e| Error::io("waiting for git diff", e))?;
            if !status.success() {
                return Err(Error::new(ErrorKind::Io, format!("git diff exited with {status}")));
            }
            let text = (bytes <= max_bytes).then(|| String::from_utf8_lossy(&kept).into_owned());
            // A patch too big to keep still names its files, for the tamper audit.
            let names = match &text {
                Some(t) => agenteval_core::tamper::patched_files(t),
                None => {
                    let out = git(d, &tree)
                        .args(["diff", "--cached", "--name-only", "-z", "--no-renames", "HEAD"])
                        .stderr(Stdio::null())
                        .output()
                        .await
                        .map_err(|e| Error::io("running the worker's git", e))?;
                    out.stdout
                        .split(|b| *b == 0)
                        .filter(|n| !n.is_empty())
                        .map(|n| String::from_utf8_lossy(n).into_owned())
                        .collect()
                }
            };
            Ok(Patch { text, bytes, sha256: hex::encode(hash.finalize()), names })
        }
        .await;
        remove(tree).await;
        made
    }
}

/// The agent's patch as taken: its text when it fit, its size and digest always.
#[derive(Debug, Clone)]
pub struct Patch {
    pub text: Option<String>,
    pub bytes: u64,
    pub sha256: String,
    /// The files it changes, relative to the working folder.
    pub names: Vec<String>,
}

/// The working folder's regular files and folders (no links, devices or fifos: the agent's
/// inventions never become files of the worker's), at most [`MAX_TREE_BYTES`], without any
/// `.git`: a repository's own records are not its files, and a nested one would make git add
/// its folder as a bare commit id (or, with no commit, fail the whole patch).
async fn copy_tree_out(session: &EnvSession, to: &Path) -> Result<()> {
    let from = format!("{}/.", session.handle.workdir.trim_end_matches('/'));
    session.env.copy_out(&session.handle, &from, to, MAX_TREE_BYTES).await?;
    let root = to.to_path_buf();
    tokio::task::spawn_blocking(move || drop_git_records(&root))
        .await
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?
        .map_err(|e| Error::io("clearing the copy's .git folders", e))
}

fn drop_git_records(dir: &Path) -> std::io::Result<()> {
    // A loop, not recursion: the tree is the agent's, as deep as it likes.
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let t = e.file_type()?;
            if e.file_name() == ".git" {
                if t.is_dir() { std::fs::remove_dir_all(e.path())? } else { std::fs::remove_file(e.path())? }
            } else if t.is_dir() {
                todo.push(e.path());
            }
        }
    }
    Ok(())
}

async fn remove(path: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_git_record_goes_from_a_copy_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        for p in [".git/config", "a/.git/HEAD", "a/b.txt", "c/d/.git", "c/d/e.txt"] {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        drop_git_records(d.path()).unwrap();
        for (p, there) in
            [(".git", false), ("a/.git", false), ("a/b.txt", true), ("c/d/.git", false), ("c/d/e.txt", true)]
        {
            assert_eq!(d.path().join(p).exists(), there, "{p}");
        }
    }

    #[test]
    fn the_shell_form_carries_every_setting() {
        let s = hardened_shell_git();
        for kv in HARDENED.chunks(2) {
            assert!(s.contains(&format!("-c '{}'", kv[1])), "{s}");
        }
        assert!(s.contains("GIT_CONFIG_GLOBAL=/dev/null") && s.contains("GIT_CONFIG_NOSYSTEM=1"), "{s}");
    }
}
