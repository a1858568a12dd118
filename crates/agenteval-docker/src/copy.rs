//! Files in and out of a container as tar streams (no host folder is ever mounted). What comes
//! out is the agent's: only regular files and folders are unpacked, at safe paths below the
//! destination, within a byte cap; a link or a device in the stream is skipped.

use std::path::{Component, Path, PathBuf};

use agenteval_core::environment::EnvHandle;
use agenteval_core::{Error, ErrorKind, Result};
use bollard::Docker;
use bollard::query_parameters::{DownloadFromContainerOptionsBuilder, UploadToContainerOptionsBuilder};
use futures::StreamExt;

use crate::infra;

/// Packs `from` (a file, or a folder's contents) for unpacking at `to`; returns the tar and the
/// folder of the container to unpack it in.
fn pack(from: &Path, to: &str) -> Result<(Vec<u8>, String)> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let meta = std::fs::metadata(from).map_err(|e| Error::io(format!("reading {}", from.display()), e))?;
    let dir = if meta.is_dir() {
        b.append_dir_all(".", from).map_err(|e| Error::io(format!("packing {}", from.display()), e))?;
        to.to_string()
    } else {
        let (parent, name) = match to.rsplit_once('/') {
            Some(("", name)) => ("/".to_string(), name),
            Some((parent, name)) => (parent.to_string(), name),
            None => (".".to_string(), to),
        };
        b.append_path_with_name(from, name).map_err(|e| Error::io(format!("packing {}", from.display()), e))?;
        parent
    };
    Ok((b.into_inner().map_err(|e| Error::io("packing files", e))?, dir))
}

pub async fn copy_in(docker: &Docker, env: &EnvHandle, from: &Path, to: &str) -> Result<()> {
    let (tar, dir) = pack(from, to)?;
    // The destination folder must exist for the engine to unpack into it.
    let mkdir = agenteval_core::environment::ExecRequest::new(
        format!("mkdir -p -- '{}'", dir.replace('\'', "'\\''")),
        std::time::Duration::from_secs(30),
    );
    let made = crate::exec_in(
        docker,
        env,
        &agenteval_core::environment::ExecRequest { user: Some("0".into()), grader: true, ..mkdir },
    )
    .await?;
    if !made.ok() {
        return Err(infra(&format!("creating {dir} in the container"), made.stderr.trim()));
    }
    docker
        .upload_to_container(
            &env.id,
            Some(UploadToContainerOptionsBuilder::default().path(&dir).build()),
            bollard::body_full(tar.into()),
        )
        .await
        .map_err(|e| infra(&format!("copying {} into the container", from.display()), e))
}

/// A path from the stream, if it stays below the destination.
fn safe(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Unpacks the container's `from` into `to`, at most `max_bytes` of files. The tar is read as
/// it arrives (never held whole: an agent's 50 GB file costs the worker nothing but the refusal),
/// and a file's permission bits come out with it (set-id bits dropped).
pub async fn copy_out(docker: &Docker, env: &EnvHandle, from: &str, to: &Path, max_bytes: u64) -> Result<()> {
    let mut stream = docker
        .download_from_container(&env.id, Some(DownloadFromContainerOptionsBuilder::default().path(from).build()));
    // The first piece says whether the path exists before anything is unpacked.
    let first = match stream.next().await {
        None => None,
        Some(Ok(bytes)) => Some(bytes),
        Some(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) => {
            return Err(Error::not_found(format!("{from} is not in the environment")));
        }
        Some(Err(e)) => return Err(infra(&format!("copying {from} out of the container"), e)),
    };
    std::fs::create_dir_all(to).map_err(|e| Error::io(format!("creating {}", to.display()), e))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let (dest, name) = (to.to_path_buf(), from.to_string());
    let unpacker =
        tokio::task::spawn_blocking(move || unpack(Pieces { rx, piece: Vec::new(), at: 0 }, &dest, &name, max_bytes));
    let fed = async {
        if let Some(bytes) = first
            && tx.send(bytes.to_vec()).await.is_err()
        {
            return Ok(());
        }
        while let Some(piece) = stream.next().await {
            let bytes = piece.map_err(|e| infra(&format!("copying {from} out of the container"), e))?;
            // The unpacker stopped (a refusal): its error is the answer.
            if tx.send(bytes.to_vec()).await.is_err() {
                break;
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    drop(tx);
    let unpacked = unpacker.await.map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    // What the unpacker refused explains a broken feed too.
    unpacked?;
    fed
}

/// The tar's bytes as they come from the engine, for a blocking reader.
struct Pieces {
    rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    piece: Vec<u8>,
    at: usize,
}

impl std::io::Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.piece.len() {
            match self.rx.blocking_recv() {
                Some(p) => (self.piece, self.at) = (p, 0),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.piece.len() - self.at);
        buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn unpack(tar: impl std::io::Read, to: &Path, from: &str, max_bytes: u64) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut archive = tar::Archive::new(tar);
    let mut total = 0u64;
    let entries = archive.entries().map_err(|e| Error::new(ErrorKind::Corrupt, format!("reading {from}: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| Error::new(ErrorKind::Corrupt, format!("reading {from}: {e}")))?;
        let kind = entry.header().entry_type();
        let Some(rel) = entry.path().ok().and_then(|p| safe(&p)) else { continue };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dest = to.join(&rel);
        if kind.is_dir() {
            std::fs::create_dir_all(&dest).map_err(|e| Error::io(format!("creating {}", dest.display()), e))?;
        } else if kind.is_file() {
            // Counted from the header, before any byte of the file is read.
            total = total.saturating_add(entry.size());
            if total > max_bytes {
                return Err(Error::invalid(format!("{from} holds more than {max_bytes} bytes")));
            }
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
            }
            let mut f =
                std::fs::File::create(&dest).map_err(|e| Error::io(format!("writing {}", dest.display()), e))?;
            std::io::copy(&mut entry, &mut f).map_err(|e| Error::io(format!("writing {}", dest.display()), e))?;
            // The worker keeps reading and writing what it copied (snapshots, the fresh copy).
            let mode = (entry.header().mode().unwrap_or(0o644) & 0o777) | 0o600;
            f.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io(format!("setting the mode of {}", dest.display()), e))?;
        }
        // Links, devices and the like are the agent's inventions: never recreated here.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_destination_are_refused() {
        assert_eq!(safe(Path::new("./a/b")), Some(PathBuf::from("a/b")));
        assert_eq!(safe(Path::new("../etc/passwd")), None);
        assert_eq!(safe(Path::new("/etc/passwd")), None);
        assert_eq!(safe(Path::new("a/../../b")), None);
    }
}
