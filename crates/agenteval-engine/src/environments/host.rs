//! What the environments whose commands are processes of this machine share (`workspace`, a
//! folder; `here`, the worker's own container): running `bash` with a timeout and bounded
//! output, and copying folders in and out of them.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use agenteval_core::environment::{Bounded, ExecOutput, ExecRequest};
use agenteval_core::{Error, Result};
use tokio::io::AsyncReadExt as _;

use crate::isolation::TreeGuard;

/// Runs `cmd` (a `bash -c …` set up by the caller) in its own process group under the request's
/// timeout, keeping at most `max_output_bytes` of each stream; everything it started is killed
/// when it ends or times out. `place` names where it ran, for errors.
pub(crate) async fn run_bounded(
    mut cmd: tokio::process::Command,
    req: &ExecRequest,
    place: &str,
) -> Result<ExecOutput> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
    let mut child = cmd.spawn().map_err(|e| Error::io(format!("starting bash in {place}"), e))?;
    let guard = TreeGuard(child.id().map(|p| p as i32));
    let (mut so, mut se) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let (mut out, mut err) = (Bounded::new(req.max_output_bytes), Bounded::new(req.max_output_bytes));
    let read = async {
        let (mut a, mut b) = ([0u8; 8192], [0u8; 8192]);
        let (mut a_open, mut b_open) = (true, true);
        while a_open || b_open {
            tokio::select! {
                n = so.read(&mut a), if a_open => match n { Ok(0) | Err(_) => a_open = false, Ok(n) => out.push(&a[..n]) },
                n = se.read(&mut b), if b_open => match n { Ok(0) | Err(_) => b_open = false, Ok(n) => err.push(&b[..n]) },
            }
        }
        child.wait().await
    };
    let waited = tokio::time::timeout(req.timeout, read).await;
    drop(guard);
    let (exit_code, timed_out) = match waited {
        Ok(Ok(status)) => (status.code().map(i64::from), false),
        Ok(Err(e)) => return Err(Error::io(format!("waiting for bash in {place}"), e)),
        Err(_) => (None, true),
    };
    Ok(ExecOutput {
        exit_code,
        stdout: out.text(),
        stderr: err.text(),
        timed_out,
        dropped_bytes: out.dropped + err.dropped,
    })
}

/// Copies a folder's files, folders (with their modes) and links into `to`.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = e.file_type()?;
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest)?;
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path())?, &dest)?;
        }
    }
    Ok(())
}

/// A host file or folder copied to `dest` (a folder's contents go into it).
pub(crate) async fn copy_in(from: &Path, dest: PathBuf, to: &str) -> Result<()> {
    let from = from.to_path_buf();
    tokio::task::spawn_blocking(move || {
        if from.is_dir() {
            copy_tree(&from, &dest)
        } else {
            if let Some(p) = dest.parent() {
                std::fs::create_dir_all(p)?;
            }
            std::fs::copy(&from, &dest).map(|_| ())
        }
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
    .map_err(|e| Error::io(format!("copying into {to}"), e))
}

/// `src` (named `from` to the user) copied out to the host folder `to`, at most `max_bytes` of
/// it; regular files and folders only, so a link an agent made cannot bring another file out.
pub(crate) fn copy_out(src: &Path, from: &str, to: &Path, max_bytes: u64) -> Result<()> {
    let meta = std::fs::symlink_metadata(src).map_err(|_| Error::not_found(format!("{from} is not there")))?;
    let used = crate::isolation::disk::usage(src, max_bytes + 1).bytes.max(meta.len());
    if used > max_bytes {
        return Err(Error::invalid(format!("{from} holds more than {max_bytes} bytes")));
    }
    std::fs::create_dir_all(to).map_err(|e| Error::io(format!("creating {}", to.display()), e))?;
    /// Lengths are counted as the files are copied (a sparse file costs its length, which is
    /// what a copy writes), so a copy stops at the cap whatever the blocks said.
    fn walk(src: &Path, to: &Path, left: &mut u64) -> std::io::Result<bool> {
        let m = std::fs::symlink_metadata(src)?;
        if m.is_dir() {
            std::fs::create_dir_all(to)?;
            for e in std::fs::read_dir(src)? {
                let e = e?;
                if !walk(&e.path(), &to.join(e.file_name()), left)? {
                    return Ok(false);
                }
            }
        } else if m.is_file() {
            if m.len() > *left {
                return Ok(false);
            }
            *left -= m.len();
            std::fs::copy(src, to)?;
        }
        Ok(true)
    }
    let name = src.file_name().map(PathBuf::from).unwrap_or_default();
    let dest = if meta.is_dir() { to.to_path_buf() } else { to.join(name) };
    let mut left = max_bytes;
    match walk(src, &dest, &mut left) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::invalid(format!("{from} holds more than {max_bytes} bytes"))),
        Err(e) => Err(Error::io(format!("copying {from} out"), e)),
    }
}
