//! `BundleStore` on a local folder: `<root>/<run_id>/<path>`, written atomically.

use std::path::{Path, PathBuf};

use agenteval_core::traits::{Appender, BundleStore, check_bundle_path};
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;

/// Bundles as plain folders. Whole-file writes go to a temporary file that is renamed into
/// place, so a crash never leaves a half-written `result.json`.
#[derive(Debug, Clone)]
pub struct FsBundleStore {
    root: PathBuf,
}

impl FsBundleStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        FsBundleStore { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn run_dir(&self, run: &RunId) -> PathBuf {
        self.root.join(run.to_string())
    }

    fn file(&self, run: &RunId, path: &str) -> Result<PathBuf> {
        check_bundle_path(path)?;
        Ok(self.run_dir(run).join(path))
    }
}

/// Opens a bundle file as what the bundle format says it is: a regular file inside its run's
/// folder. A hostile bundle's symlink (`worker.log -> /etc/shadow`, or a task folder that is a
/// link out of the bundle), a FIFO (which would block) or a device is refused, so nothing that
/// reads bundles (`show`, the UI, `validate-bundle`, the seal) reads what it points at.
fn open_bundle_file(run_dir: &Path, p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(p)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a regular file"));
    }
    // Where the opened file really is (one `readlink` of its descriptor, rather than resolving
    // its folder's path component by component: a measurable share of every read at a task
    // pack per task), against where the run's folder really is.
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).or_else(|_| p.canonicalize());
    let inside = match (canonical(run_dir), opened) {
        (Ok(dir), Ok(real)) => real.starts_with(&dir),
        _ => false,
    };
    if !inside {
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "a link out of the bundle"));
    }
    Ok(file)
}

/// Where a run's folder really is, resolved once per folder and process (a path resolved
/// component by component is some ten system calls, at every file read). A folder moved or
/// linked elsewhere since only makes reads stricter: what it holds is then outside.
fn canonical(dir: &Path) -> std::io::Result<PathBuf> {
    static SEEN: std::sync::Mutex<Option<std::collections::HashMap<PathBuf, PathBuf>>> = std::sync::Mutex::new(None);
    if let Some(c) = SEEN.lock().expect("not poisoned").as_ref().and_then(|m| m.get(dir)) {
        return Ok(c.clone());
    }
    let c = dir.canonicalize()?;
    SEEN.lock().expect("not poisoned").get_or_insert_with(Default::default).insert(dir.to_path_buf(), c.clone());
    Ok(c)
}

/// Writes `bytes` to `target` through a temporary sibling and a rename.
pub fn write_atomic_blocking(target: &Path, bytes: &[u8]) -> Result<()> {
    let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = target.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    // Folders are created only when missing: on a busy bundle a `mkdir` per write is a
    // measurable share of the cost.
    let written = match std::fs::write(&tmp, bytes) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
            }
            std::fs::write(&tmp, bytes)
        }
        other => other,
    };
    written.map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, target).map_err(|e| Error::io(format!("renaming to {}", target.display()), e))
}

fn list_blocking(dir: &Path, base: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    walk_blocking(dir, base, &mut |rel, _| out.push(rel))
}

/// Every file under `dir`, as a bundle path relative to `base`, with its size when it has one,
/// handed to `f` as the folders are read (nothing is held but the folder being read).
fn walk_blocking(dir: &Path, base: &Path, f: &mut dyn FnMut(String, Option<u64>)) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let ft = entry.file_type()?;
        let path = entry.path();
        if ft.is_dir() {
            walk_blocking(&path, base, f)?;
        } else if ft.is_file() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // Temporary files of in-flight atomic writes are not part of the bundle.
            if name.starts_with('.') && name.ends_with(".tmp") {
                continue;
            }
            if let Ok(rel) = path.strip_prefix(base) {
                let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                // A file gone since the folder was read has no size (then it is read, and
                // reported missing, by whoever needs it).
                f(rel.join("/"), entry.metadata().ok().map(|m| m.len()));
            }
        }
    }
    Ok(())
}

#[async_trait]
impl BundleStore for FsBundleStore {
    fn bundle_uri(&self, run: &RunId) -> String {
        self.run_dir(run).display().to_string()
    }

    async fn put(&self, run: &RunId, path: &str, bytes: &[u8]) -> Result<()> {
        let target = self.file(run, path)?;
        crate::blocking(|| write_atomic_blocking(&target, bytes))
    }

    async fn get_shared(&self, key: &str) -> Result<Vec<u8>> {
        check_bundle_path(key)?;
        let p = self.root.join(agenteval_core::traits::SHARED_FOLDER).join(key);
        crate::blocking(|| match std::fs::read(&p) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::not_found(format!("shared object {}", p.display())))
            }
            Err(e) => Err(Error::io(format!("reading {}", p.display()), e)),
        })
    }

    async fn put_shared(&self, key: &str, bytes: &[u8]) -> Result<()> {
        check_bundle_path(key)?;
        let target = self.root.join(agenteval_core::traits::SHARED_FOLDER).join(key);
        crate::blocking(|| write_atomic_blocking(&target, bytes))
    }

    async fn rename(&self, run: &RunId, from: &str, to: &str) -> Result<()> {
        let (a, b) = (self.file(run, from)?, self.file(run, to)?);
        crate::blocking(|| {
            // The target folder is created only when missing, as `put` does: on a busy bundle a
            // `mkdir` per move is a measurable share of the cost.
            match std::fs::rename(&a, &b) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && a.exists() => {
                    if let Some(parent) = b.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::rename(&a, &b)?;
                }
                r => r?,
            }
            // A folder the move empties stays: removing it would mean creating it again for the
            // next task a job attempt stages there (see `replace`).
            Ok(())
        })
        .map_err(|e: std::io::Error| Error::io(format!("moving {} to {}", a.display(), b.display()), e))
    }

    async fn replace(&self, run: &RunId, from: &str, to: &str, bytes: &[u8]) -> Result<()> {
        use std::io::Write as _;
        let (a, b) = (self.file(run, from)?, self.file(run, to)?);
        // `from`'s own file, rewritten in place and renamed: on ext4 without a journal (these
        // machines), every file removed makes later creations in its group scan past it for a
        // minute or more, which was 40% of a 20,000-task run when each task's trace was removed.
        // `to` still appears whole (at the rename); a crash before it leaves `from` unreadable,
        // which only a task no attempt finished can have.
        let rewritten = crate::blocking(|| {
            let mut f = match std::fs::OpenOptions::new().write(true).truncate(true).open(&a) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                r => r?,
            };
            f.write_all(bytes)?;
            std::fs::rename(&a, &b)?;
            Ok(true)
        })
        .map_err(|e: std::io::Error| Error::io(format!("writing {} as {}", a.display(), b.display()), e))?;
        if !rewritten {
            self.put(run, to, bytes).await?;
        }
        Ok(())
    }

    async fn delete(&self, run: &RunId, path: &str) -> Result<()> {
        let p = self.file(run, path)?;
        let dir = self.run_dir(run);
        crate::blocking(|| {
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                r => r?,
            }
            // Folders the removal emptied, up to the bundle's own (kept).
            let mut at = p.parent();
            while let Some(folder) = at.filter(|f| *f != dir && f.starts_with(&dir)) {
                if std::fs::remove_dir(folder).is_err() {
                    break;
                }
                at = folder.parent();
            }
            Ok(())
        })
        .map_err(|e: std::io::Error| Error::io(format!("removing {}", p.display()), e))
    }

    async fn get(&self, run: &RunId, path: &str) -> Result<Vec<u8>> {
        use std::io::Read as _;
        let p = self.file(run, path)?;
        let dir = self.run_dir(run);
        crate::blocking(|| {
            let mut bytes = Vec::new();
            open_bundle_file(&dir, &p)?.read_to_end(&mut bytes)?;
            Ok(bytes)
        })
        .map_err(|e: std::io::Error| Error::io(format!("reading {}", p.display()), e))
    }

    async fn read_range(&self, run: &RunId, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        use std::io::{Read as _, Seek as _};
        let p = self.file(run, path)?;
        let dir = self.run_dir(run);
        crate::blocking(|| {
            let mut file = open_bundle_file(&dir, &p)?;
            file.seek(std::io::SeekFrom::Start(offset))?;
            let mut bytes = Vec::new();
            file.take(len).read_to_end(&mut bytes)?;
            Ok(bytes)
        })
        .map_err(|e: std::io::Error| Error::io(format!("reading {}", p.display()), e))
    }

    async fn read_chunks(&self, run: &RunId, path: &str, f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send)) -> Result<u64> {
        use std::io::Read as _;
        let p = self.file(run, path)?;
        let dir = self.run_dir(run);
        crate::blocking(|| {
            let mut file = open_bundle_file(&dir, &p)?;
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0u64;
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    return Ok(total);
                }
                f(&buf[..n]);
                total += n as u64;
            }
        })
        .map_err(|e: std::io::Error| Error::io(format!("reading {}", p.display()), e))
    }

    async fn exists(&self, run: &RunId, path: &str) -> Result<bool> {
        let p = self.file(run, path)?;
        crate::blocking(|| p.try_exists()).map_err(|e| Error::io(format!("checking {}", p.display()), e))
    }

    async fn list(&self, run: &RunId, prefix: &str) -> Result<Vec<String>> {
        let base = self.run_dir(run);
        // Walk only the folder part of the prefix, then filter by the full prefix.
        let start = match prefix.rfind('/') {
            Some(i) => base.join(&prefix[..i]),
            None => base.clone(),
        };
        crate::blocking(|| {
            let mut out = Vec::new();
            list_blocking(&start, &base, &mut out).map_err(|e| Error::io(format!("listing {}", start.display()), e))?;
            out.retain(|p| p.starts_with(prefix));
            out.sort();
            Ok(out)
        })
    }

    async fn list_sized(&self, run: &RunId, prefix: &str) -> Result<Vec<(String, Option<u64>)>> {
        let base = self.run_dir(run);
        let paths = self.list(run, prefix).await?;
        crate::blocking(|| {
            // A file gone between the listing and here is listed without a size (then read,
            // and reported missing, by whoever needs it).
            Ok(paths
                .into_iter()
                .map(|p| {
                    let size = std::fs::metadata(base.join(&p)).ok().map(|m| m.len());
                    (p, size)
                })
                .collect())
        })
    }

    async fn list_sized_each(
        &self,
        run: &RunId,
        prefix: &str,
        f: &mut (dyn FnMut(String, Option<u64>) + Send),
    ) -> Result<()> {
        let base = self.run_dir(run);
        let start = match prefix.rfind('/') {
            Some(i) => base.join(&prefix[..i]),
            None => base.clone(),
        };
        crate::blocking(|| {
            walk_blocking(&start, &base, &mut |p, size| {
                if p.starts_with(prefix) {
                    f(p, size)
                }
            })
        })
        .map_err(|e| Error::io(format!("listing {}", start.display()), e))
    }

    async fn list_runs(&self) -> Result<Vec<RunId>> {
        crate::blocking(|| {
            let entries = match std::fs::read_dir(&self.root) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(Error::io(format!("listing {}", self.root.display()), e)),
            };
            let mut out: Vec<RunId> = entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect();
            out.sort();
            Ok(out)
        })
    }

    async fn open_writer(&self, run: &RunId, path: &str) -> Result<Option<Box<dyn Appender>>> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let target = self.file(run, path)?;
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
        }
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("file");
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = target.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(format!("creating {}", tmp.display()), e))?;
        Ok(Some(Box::new(FsWriter { file: Some(file), tmp, target })))
    }

    async fn open_appender(&self, run: &RunId, path: &str) -> Result<Box<dyn Appender>> {
        let p = self.file(run, path)?;
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&p)
            .map_err(|e| Error::io(format!("opening {}", p.display()), e))?;
        Ok(Box::new(FsAppender { file, path: p }))
    }
}

/// A file written in pieces beside its target (`.<name>.<pid>.<n>.tmp`, as `put` names its
/// temporary files) and renamed over it at `finish`; dropped unfinished, the pieces go.
struct FsWriter {
    file: Option<std::fs::File>,
    tmp: PathBuf,
    target: PathBuf,
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[async_trait]
impl Appender for FsWriter {
    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let file = self.file.as_mut().ok_or_else(|| Error::internal("writer already finished"))?;
        file.write_all(bytes).map_err(|e| Error::io(format!("writing {}", self.tmp.display()), e))
    }

    async fn finish(mut self: Box<Self>) -> Result<()> {
        drop(self.file.take());
        std::fs::rename(&self.tmp, &self.target)
            .map_err(|e| Error::io(format!("renaming to {}", self.target.display()), e))
    }
}

/// Appends go straight to the file with one unbuffered `write` each: once `append` returns, the
/// bytes are in the kernel and survive a kill of this process. The write is synchronous on
/// purpose: a trace line is a few hundred bytes to a local file, cheaper than a hop to
/// tokio's blocking pool.
struct FsAppender {
    file: std::fs::File,
    path: PathBuf,
}

#[async_trait]
impl Appender for FsAppender {
    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        self.file.write_all(bytes).map_err(|e| Error::io(format!("appending to {}", self.path.display()), e))
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn a_hostile_bundle_cannot_point_a_reader_outside_it() {
        use agenteval_core::traits::BundleStore as _;
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("shadow"), "root:secret").unwrap();
        let store = FsBundleStore::new(dir.path().to_path_buf());
        let run = agenteval_core::RunId::new();
        store.put(&run, "tasks/t1/result.json", b"{}").await.unwrap();
        let run_dir = store.run_dir(&run);
        std::os::unix::fs::symlink(outside.path().join("shadow"), run_dir.join("tasks/t1/worker.log")).unwrap();
        std::os::unix::fs::symlink(outside.path(), run_dir.join("tasks/t2")).unwrap();
        assert!(
            std::process::Command::new("mkfifo").arg(run_dir.join("tasks/t1/trace.jsonl")).status().unwrap().success()
        );
        for path in ["tasks/t1/worker.log", "tasks/t2/shadow", "tasks/t1/trace.jsonl"] {
            let err = store.get(&run, path).await.unwrap_err().to_string();
            assert!(!err.contains("root:secret"), "{path}: {err}");
            assert!(store.read_chunks(&run, path, &mut |_| {}).await.is_err(), "{path}");
        }
        assert_eq!(store.get(&run, "tasks/t1/result.json").await.unwrap(), b"{}");
    }
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        agenteval_testkit::conformance::bundle_store_suite(Arc::new(FsBundleStore::new(dir.path()))).await;
    }

    #[tokio::test]
    async fn interrupted_atomic_writes_are_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsBundleStore::new(dir.path());
        let run = RunId::new();
        store.put(&run, "a.json", b"1").await.unwrap();
        std::fs::write(store.run_dir(&run).join(".b.json.99.tmp"), b"half").unwrap();
        assert_eq!(store.list(&run, "").await.unwrap(), vec!["a.json"]);
    }
}
