//! A task's own folders (its tests, its reference solution) on a fleet whose workers cannot
//! read the controller's disk: at submit each distinct folder is packed once, reproducibly,
//! into the run's bundle as `files/<sha256>.tar.gz` and the task names it there
//! (`bundle:files/<sha256>.tar.gz`); a worker fetches it, checks its hash and unpacks it into a
//! folder of its own only when it is needed — the tests once the agent has stopped, the solution
//! for the `oracle` agent alone — and removes it with the task.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use agenteval_core::model::TaskSpec;
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, Result, RunId};
use sha2::{Digest, Sha256};

/// How a task names a folder kept in its run's bundle.
const MARK: &str = "bundle:";

/// Where a packed folder lives in its run's bundle.
pub fn archive_path(sha256: &str) -> String {
    format!("files/{sha256}.tar.gz")
}

/// The folders of a run's tasks, packed at submit (before anything is created), to store once
/// the run exists.
#[derive(Debug, Default)]
pub struct Packed {
    by_folder: HashMap<PathBuf, String>,
    archives: BTreeMap<String, Vec<u8>>,
}

impl Packed {
    /// Packs `task`'s tests and solution folders (each distinct folder once) and makes the task
    /// name them in the bundle.
    pub fn pack(&mut self, task: &mut TaskSpec) -> Result<()> {
        if let Some(tests) = &mut task.tests
            && let Some(dir) = &tests.dir
        {
            tests.dir = Some(self.folder(dir)?);
        }
        if let Some(dir) = &task.solution {
            task.solution = Some(self.folder(dir)?);
        }
        // A task told in steps: each step's folders too.
        if let Some(steps) = &mut task.steps {
            for step in &mut steps.list {
                if let Some(tests) = &mut step.tests
                    && let Some(dir) = &tests.dir
                {
                    tests.dir = Some(self.folder(dir)?);
                }
                for dir in [&mut step.solution, &mut step.files].into_iter().flatten() {
                    *dir = self.folder(dir)?;
                }
            }
        }
        Ok(())
    }

    fn folder(&mut self, dir: &Path) -> Result<PathBuf> {
        if is_packed(dir) {
            return Ok(dir.to_path_buf());
        }
        if let Some(sha) = self.by_folder.get(dir) {
            return Ok(named(sha));
        }
        let bytes = archive_folder(dir, &[], "task folder")?;
        let sha = hex::encode(Sha256::digest(&bytes));
        self.by_folder.insert(dir.to_path_buf(), sha.clone());
        self.archives.entry(sha.clone()).or_insert(bytes);
        Ok(named(&sha))
    }

    /// Distinct folders packed.
    pub fn len(&self) -> usize {
        self.archives.len()
    }

    pub fn is_empty(&self) -> bool {
        self.archives.is_empty()
    }

    /// Puts every archive in the run's bundle.
    pub async fn store(self, store: &dyn BundleStore, run: &RunId) -> Result<()> {
        for (sha, bytes) in self.archives {
            store.put(run, &archive_path(&sha), &bytes).await?;
        }
        Ok(())
    }
}

fn named(sha: &str) -> PathBuf {
    PathBuf::from(format!("{MARK}{}", archive_path(sha)))
}

/// Whether a task's folder is one kept in its run's bundle.
pub fn is_packed(dir: &Path) -> bool {
    dir.to_str().is_some_and(|s| s.starts_with(MARK))
}

/// A folder kept in the run's bundle, fetched, checked and unpacked into a fresh folder of
/// this worker's (removed when the returned guard drops).
pub async fn fetch(store: &dyn BundleStore, run: &RunId, dir: &Path) -> Result<tempfile::TempDir> {
    let key = dir
        .to_str()
        .and_then(|s| s.strip_prefix(MARK))
        .ok_or_else(|| Error::invalid(format!("{} is not a folder of the run's bundle", dir.display())))?;
    let sha = key
        .strip_prefix("files/")
        .and_then(|k| k.strip_suffix(".tar.gz"))
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| Error::invalid(format!("{key} is not a packed folder's name")))?;
    let bytes = store.get(run, key).await?;
    let got = hex::encode(Sha256::digest(&bytes));
    if got != sha {
        return Err(Error::new(ErrorKind::Corrupt, format!("{key} has sha256 {got}: not what the controller packed")));
    }
    let out = tempfile::Builder::new()
        .prefix("agenteval-files-")
        .tempdir()
        .map_err(|e| Error::io("creating a folder for a task's files", e))?;
    let to = out.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        tar.set_preserve_permissions(true);
        tar.unpack(&to)
    })
    .await
    .map_err(|e| Error::internal(format!("unpacking {key}: {e}")))?
    .map_err(|e| Error::new(ErrorKind::Corrupt, format!("unpacking {key}: {e}")))?;
    Ok(out)
}

/// When `task`'s tests folder is kept in the bundle: the task with that folder fetched to this
/// machine, and the guard that removes it. `None` (no copy made) for a folder already here.
pub async fn with_local_tests(
    store: &dyn BundleStore,
    run: &RunId,
    task: &TaskSpec,
) -> Result<Option<(TaskSpec, tempfile::TempDir)>> {
    let Some(dir) = task.tests.as_ref().and_then(|t| t.dir.as_ref()).filter(|d| is_packed(d)) else {
        return Ok(None);
    };
    let fetched = fetch(store, run, dir).await?;
    let mut t = task.clone();
    if let Some(tests) = &mut t.tests {
        tests.dir = Some(fetched.path().to_path_buf());
    }
    Ok(Some((t, fetched)))
}

/// A folder of the task's (a step's files) on this machine: fetched when it is kept in the
/// bundle (with the guard that removes it), else as it is.
pub async fn local_folder(
    store: &dyn BundleStore,
    run: &RunId,
    dir: &Path,
) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    if !is_packed(dir) {
        return Ok((dir.to_path_buf(), None));
    }
    let fetched = fetch(store, run, dir).await?;
    Ok((fetched.path().to_path_buf(), Some(fetched)))
}

/// `task` with its solution folder on this machine (for the `oracle` agent only).
pub async fn with_local_solution(
    store: &dyn BundleStore,
    run: &RunId,
    task: &TaskSpec,
) -> Result<(TaskSpec, Option<tempfile::TempDir>)> {
    let Some(dir) = task.solution.as_ref().filter(|d| is_packed(d)) else { return Ok((task.clone(), None)) };
    let fetched = fetch(store, run, dir).await?;
    let mut t = task.clone();
    t.solution = Some(fetched.path().to_path_buf());
    Ok((t, Some(fetched)))
}

/// Most bytes of the files of a packed agent folder: past it, a usage error before the run
/// starts (a virtual environment or a model's weights do not belong in every job).
pub const MAX_PACK_BYTES: u64 = 256 << 20;

/// Folders never packed: version control and caches that are not the agent.
const SKIPPED: &[&str] = &[".git", "__pycache__", ".venv", "node_modules", ".mypy_cache", ".pytest_cache"];

/// An agent's folder as a reproducible archive (`agent.pack`; see [`archive_folder`]).
pub fn archive(dir: &Path, hidden: &[PathBuf]) -> Result<Vec<u8>> {
    archive_folder(dir, hidden, "agent.pack")
}

/// The folder as a reproducible gzipped tar: the same files give the same bytes. A file or
/// folder under one of `hidden` (canonical paths) is refused; `label` starts every refusal
/// (`agent.pack`, `task folder`).
pub fn archive_folder(dir: &Path, hidden: &[PathBuf], label: &str) -> Result<Vec<u8>> {
    let mut files = Vec::new();
    collect(dir, dir, hidden, label, &mut files)?;
    files.sort();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut total: u64 = 0;
    for rel in files {
        let full = dir.join(&rel);
        let meta = std::fs::metadata(&full).map_err(|e| Error::io(format!("reading {}", full.display()), e))?;
        total += meta.len();
        if total > MAX_PACK_BYTES {
            let hint = if label == "agent.pack" { ": pack a folder with only the agent (agent.workdir)" } else { "" };
            return Err(Error::invalid(format!(
                "{label}: {} holds more than {} MiB{hint}",
                dir.display(),
                MAX_PACK_BYTES >> 20
            )));
        }
        let data = std::fs::read(&full).map_err(|e| Error::io(format!("reading {}", full.display()), e))?;
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(if is_executable(&meta) { 0o755 } else { 0o644 });
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, &rel, data.as_slice())
            .map_err(|e| Error::io(format!("packing {}", dir.display()), e))?;
    }
    let gz = tar.into_inner().map_err(|e| Error::io(format!("packing {}", dir.display()), e))?;
    gz.finish().map_err(|e| Error::io(format!("packing {}", dir.display()), e))
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.permissions().mode() & 0o111 != 0
}

/// Regular files below `dir` (links followed only when they stay inside it), relative paths.
fn collect(root: &Path, dir: &Path, hidden: &[PathBuf], label: &str, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    for e in entries {
        let e = e.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
        let name = e.file_name();
        if SKIPPED.iter().any(|s| name == *s) {
            continue;
        }
        let path = e.path();
        // A link that leads out of the folder would pack files the user did not mean to send.
        let real = std::fs::canonicalize(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let root_real = std::fs::canonicalize(root).map_err(|e| Error::io(format!("reading {}", root.display()), e))?;
        if !real.starts_with(&root_real) {
            return Err(Error::invalid(format!(
                "{label}: {} links outside the folder {}",
                path.display(),
                root.display()
            )));
        }
        if hidden.iter().any(|h| real.starts_with(h)) {
            return Err(Error::invalid(format!(
                "{label}: {} is hidden from agents (the benchmark's cases, tests or data, the bundles, the index or the secrets): pack a folder with only the agent (agent.workdir)",
                path.display()
            )));
        }
        if real.is_dir() {
            collect(root, &path, hidden, label, out)?;
        } else if real.is_file() {
            out.push(path.strip_prefix(root).expect("below the root").to_path_buf());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenteval_core::environment::TestsSpec;

    #[tokio::test]
    async fn a_task_s_folders_travel_through_the_bundle_once_each() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("test.sh"), "exit 0\n").unwrap();
        let mut a: TaskSpec = serde_json::from_value(serde_json::json!({"id": "a", "input": "x"})).unwrap();
        a.tests = Some(TestsSpec { dir: Some(src.path().to_path_buf()), ..Default::default() });
        let mut b = a.clone();
        let b0 = a.clone();
        let mut packed = Packed::default();
        packed.pack(&mut a).unwrap();
        packed.pack(&mut b).unwrap();
        assert_eq!(packed.len(), 1, "one folder, one archive");
        let dir = a.tests.as_ref().unwrap().dir.clone().unwrap();
        assert!(is_packed(&dir) && dir.to_str().unwrap().starts_with("bundle:files/"), "{dir:?}");
        let root = tempfile::tempdir().unwrap();
        let store = agenteval_local::FsBundleStore::new(root.path().to_path_buf());
        let run = RunId::new();
        packed.store(&store, &run).await.unwrap();
        let (local, guard) = with_local_tests(&store, &run, &a).await.unwrap().expect("kept in the bundle");
        let got = local.tests.unwrap().dir.unwrap();
        assert_eq!(std::fs::read_to_string(got.join("test.sh")).unwrap(), "exit 0\n");
        drop(guard);
        assert!(!got.exists(), "removed with the task");
        // A changed archive is refused.
        let key = dir.to_str().unwrap().strip_prefix(MARK).unwrap();
        store.put(&run, key, b"other").await.unwrap();
        assert_eq!(with_local_tests(&store, &run, &a).await.unwrap_err().kind(), ErrorKind::Corrupt);
        assert!(with_local_tests(&store, &run, &b0).await.unwrap().is_none(), "a folder here is not copied");
    }
}
