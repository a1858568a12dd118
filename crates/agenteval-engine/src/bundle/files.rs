//! What a writer knows of the files it wrote (size and sha256, from the bytes it had), so that
//! sealing a bundle of 100,000 tasks on S3 lists the bucket instead of reading every object.
//!
//! Workers of before schema 1.1 wrote through a [`RecordingStore`] and left, at the end of a job attempt, a
//! part of the manifest (`jobs/<job>/attempt-<n>/files.json`) for the tasks it finished. At seal,
//! an entry is trusted only when it comes from the attempt that wrote the task's result and its
//! size is the size the listing shows; anything else is read and checksummed as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use agenteval_core::traits::{Appender, BundleStore};
use agenteval_core::{JobId, Result, RunId, layout};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// A file's size and checksum, as the manifest keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    pub sha256: String,
    pub size: u64,
}

impl FileSum {
    pub fn of(bytes: &[u8]) -> Self {
        FileSum { sha256: super::sha256_hex(bytes), size: bytes.len() as u64 }
    }
}

/// A known sum as sealing holds one for every file of a large run: the digest as bytes, not as
/// 64 hex characters on the heap (at 600,000 files, the difference is some 60 MB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownSum {
    pub sha256: [u8; 32],
    pub size: u64,
}

impl KnownSum {
    pub fn of_bytes(bytes: &[u8]) -> Self {
        KnownSum { sha256: sha2::Sha256::digest(bytes).into(), size: bytes.len() as u64 }
    }

    /// `None` for a sum that is not 64 hex digits (then the file is read instead).
    fn of(s: &FileSum) -> Option<Self> {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(&s.sha256, &mut sha256).ok()?;
        Some(KnownSum { sha256, size: s.size })
    }
}

/// The sums of a run's task packs, as sealing read them: keyed by a 64-bit hash of the task id
/// rather than the id (at 1,000,000 tasks 48 MB instead of some 100), sorted for lookup. Two ids
/// of one hash (odds of about 1 in 10^7 at a million tasks) are both forgotten: their packs are
/// read again, so a collision costs a read, never a wrong sum.
#[derive(Debug, Default)]
pub struct PackSums {
    entries: Vec<(u64, KnownSum)>,
}

impl PackSums {
    fn key(task: &str) -> u64 {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        task.hash(&mut h);
        h.finish()
    }

    /// Room for `n` sums at once (sealing knows how many tasks it reads): no growth by doubling.
    pub fn with_capacity(n: usize) -> Self {
        PackSums { entries: Vec::with_capacity(n) }
    }

    pub fn push(&mut self, task: &str, sum: KnownSum) {
        self.entries.push((Self::key(task), sum));
    }

    /// Sorts for lookup, in place; a hash held by two tasks answers for neither (its sums are
    /// marked with a size no file has, so both packs are read).
    pub fn finish(&mut self) {
        self.entries.sort_unstable_by_key(|(k, _)| *k);
        for i in 1..self.entries.len() {
            if self.entries[i].0 == self.entries[i - 1].0 {
                self.entries[i].1.size = u64::MAX;
                self.entries[i - 1].1.size = u64::MAX;
            }
        }
    }

    pub fn get(&self, task: &str) -> Option<KnownSum> {
        let key = Self::key(task);
        self.entries.binary_search_by_key(&key, |(k, _)| *k).ok().map(|i| self.entries[i].1)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod pack_sums_tests {
    use super::*;

    #[test]
    fn sums_are_found_by_task_and_a_shared_hash_answers_for_neither() {
        let sum = |b: u8| KnownSum { sha256: [b; 32], size: b as u64 };
        let mut p = PackSums::with_capacity(3);
        p.push("t1", sum(1));
        p.push("t2", sum(2));
        p.finish();
        assert_eq!(p.get("t2"), Some(sum(2)));
        assert_eq!(p.get("t3"), None);
        // Two entries of one key, as two ids of one hash would make.
        let mut d = PackSums::with_capacity(2);
        d.entries = vec![(7, sum(1)), (7, sum(2)), (9, sum(3))];
        d.finish();
        assert_eq!(d.entries.iter().filter(|(_, s)| s.size == u64::MAX).count(), 2);
        assert_eq!(d.entries[2].1, sum(3));
    }
}

type Written = Arc<Mutex<BTreeMap<String, FileSum>>>;

/// A `BundleStore` that remembers the size and checksum of every file written through it (by
/// `put`, or by an appender once finished). Reads pass through.
pub struct RecordingStore {
    inner: Arc<dyn BundleStore>,
    written: Written,
}

impl RecordingStore {
    pub fn new(inner: Arc<dyn BundleStore>) -> Self {
        RecordingStore { inner, written: Default::default() }
    }

    /// What has been written so far, by bundle path (the last write of a path wins).
    pub fn written(&self) -> BTreeMap<String, FileSum> {
        self.written.lock().expect("recording lock").clone()
    }
}

#[async_trait]
impl BundleStore for RecordingStore {
    fn bundle_uri(&self, run: &RunId) -> String {
        self.inner.bundle_uri(run)
    }
    async fn put(&self, run: &RunId, path: &str, bytes: &[u8]) -> Result<()> {
        // Forgotten first: a failed write must not leave the earlier sum standing for new bytes.
        self.written.lock().expect("recording lock").remove(path);
        self.inner.put(run, path, bytes).await?;
        self.written.lock().expect("recording lock").insert(path.to_string(), FileSum::of(bytes));
        Ok(())
    }
    async fn get(&self, run: &RunId, path: &str) -> Result<Vec<u8>> {
        self.inner.get(run, path).await
    }
    async fn rename(&self, run: &RunId, from: &str, to: &str) -> Result<()> {
        // The bytes move, so their sum moves with them.
        let sum = {
            let mut w = self.written.lock().expect("recording lock");
            w.remove(to);
            w.remove(from)
        };
        self.inner.rename(run, from, to).await?;
        if let Some(sum) = sum {
            self.written.lock().expect("recording lock").insert(to.to_string(), sum);
        }
        Ok(())
    }
    async fn exists(&self, run: &RunId, path: &str) -> Result<bool> {
        self.inner.exists(run, path).await
    }
    async fn delete(&self, run: &RunId, path: &str) -> Result<()> {
        self.written.lock().expect("recording lock").remove(path);
        self.inner.delete(run, path).await
    }
    async fn replace(&self, run: &RunId, from: &str, to: &str, bytes: &[u8]) -> Result<()> {
        {
            let mut w = self.written.lock().expect("recording lock");
            w.remove(from);
            w.remove(to);
        }
        self.inner.replace(run, from, to, bytes).await?;
        self.written.lock().expect("recording lock").insert(to.to_string(), FileSum::of(bytes));
        Ok(())
    }
    async fn read_chunks(&self, run: &RunId, path: &str, f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send)) -> Result<u64> {
        self.inner.read_chunks(run, path, f).await
    }
    async fn list(&self, run: &RunId, prefix: &str) -> Result<Vec<String>> {
        self.inner.list(run, prefix).await
    }
    async fn list_sized(&self, run: &RunId, prefix: &str) -> Result<Vec<(String, Option<u64>)>> {
        self.inner.list_sized(run, prefix).await
    }
    async fn join_parts(&self, run: &RunId) -> Result<()> {
        self.inner.join_parts(run).await
    }
    async fn list_runs(&self) -> Result<Vec<RunId>> {
        self.inner.list_runs().await
    }
    // Shared objects are no run's files: nothing to record.
    async fn get_shared(&self, key: &str) -> Result<Vec<u8>> {
        self.inner.get_shared(key).await
    }
    async fn put_shared(&self, key: &str, bytes: &[u8]) -> Result<()> {
        self.inner.put_shared(key, bytes).await
    }
    async fn open_writer(&self, run: &RunId, path: &str) -> Result<Option<Box<dyn Appender>>> {
        self.written.lock().expect("recording lock").remove(path);
        let Some(inner) = self.inner.open_writer(run, path).await? else { return Ok(None) };
        Ok(Some(Box::new(RecordingAppender {
            inner,
            path: path.to_string(),
            hasher: sha2::Sha256::new(),
            size: 0,
            written: self.written.clone(),
        })))
    }

    async fn open_appender(&self, run: &RunId, path: &str) -> Result<Box<dyn Appender>> {
        self.written.lock().expect("recording lock").remove(path);
        let inner = self.inner.open_appender(run, path).await?;
        Ok(Box::new(RecordingAppender {
            inner,
            path: path.to_string(),
            hasher: sha2::Sha256::new(),
            size: 0,
            written: self.written.clone(),
        }))
    }
}

struct RecordingAppender {
    inner: Box<dyn Appender>,
    path: String,
    hasher: sha2::Sha256,
    size: u64,
    written: Written,
}

#[async_trait]
impl Appender for RecordingAppender {
    async fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.append(bytes).await?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }
    async fn finish(self: Box<Self>) -> Result<()> {
        let RecordingAppender { inner, path, hasher, size, written } = *self;
        inner.finish().await?;
        let sum = FileSum { sha256: hex::encode(hasher.finalize()), size };
        written.lock().expect("recording lock").insert(path, sum);
        Ok(())
    }
}

/// The part of the manifest one job attempt leaves.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FilesPart {
    pub files: BTreeMap<String, FileSum>,
}

/// Writes the part for the tasks this attempt finished (those whose `result.json` it wrote): a
/// task it left half-done has files another attempt will replace.
pub async fn write_files_part(
    store: &dyn BundleStore,
    run: &RunId,
    job: &JobId,
    attempt: u32,
    written: BTreeMap<String, FileSum>,
) -> Result<()> {
    let finished: std::collections::HashSet<&str> = written
        .keys()
        .filter_map(|p| {
            agenteval_core::taskpack::task_of_pack(p)
                .or_else(|| p.strip_prefix("tasks/")?.strip_suffix(&format!("/{}", layout::TASK_RESULT)))
        })
        .collect();
    // A pack's sum is taken by the seal from the bytes it reads for the result anyway: only the
    // files of task folders (a worker of before schema 1.1 never gets here) would need a part.
    let files: BTreeMap<String, FileSum> = written
        .iter()
        .filter(|(p, _)| agenteval_core::taskpack::task_of_pack(p).is_none())
        .filter(|(p, _)| task_of(p).is_some_and(|t| finished.contains(t)))
        .map(|(p, s)| (p.clone(), s.clone()))
        .collect();
    if files.is_empty() {
        return Ok(());
    }
    let part = FilesPart { files };
    store.put(run, &layout::job_files(job, attempt), &serde_json::to_vec(&part).expect("serializes")).await
}

/// `tasks/<id>.tar.gz` or `tasks/<id>/…` → `<id>`.
fn task_of(path: &str) -> Option<&str> {
    agenteval_core::taskpack::task_of_pack(path)
        .or_else(|| path.strip_prefix("tasks/")?.split_once('/').map(|(t, _)| t))
}

/// What sealing knows of the bundle's files without reading them.
#[derive(Debug, Default)]
pub struct ManifestHints {
    /// Task id → the job attempt that wrote its result (from the results sealing read), for
    /// tasks kept as folders (bundles before schema 1.1).
    pub producers: HashMap<String, (JobId, u32)>,
    /// The sum of each task's pack, taken from the bytes sealing read for its result.
    pub packs: PackSums,
    /// Files the sealing controller wrote itself.
    pub written: BTreeMap<String, FileSum>,
    /// Entries of a manifest written moments ago over the same files (re-sealing after adding a
    /// document): trusted when the size still matches.
    pub previous: BTreeMap<String, FileSum>,
}

impl ManifestHints {
    /// The hints of a bundle whose manifest was just written: its entries, but for the files
    /// written since (`changed`).
    pub async fn from_manifest(store: &dyn BundleStore, run: &RunId, changed: &[&str]) -> Self {
        let previous = match super::read_json::<agenteval_core::format::Manifest>(store, run, layout::MANIFEST).await {
            Ok(m) => m
                .files
                .into_iter()
                .filter(|(p, _)| !changed.contains(&p.as_str()))
                .map(|(p, e)| (p, FileSum { sha256: e.sha256, size: e.size }))
                .collect(),
            Err(_) => BTreeMap::new(),
        };
        ManifestHints { previous, ..Default::default() }
    }

    /// The known sums: the seal's own writes, the previous manifest, then the parts of the
    /// attempts that produced each task's result.
    pub(super) async fn known(&self, store: &dyn BundleStore, run: &RunId) -> Result<HashMap<String, KnownSum>> {
        use futures::StreamExt as _;
        let mut known: HashMap<String, KnownSum> = self
            .previous
            .iter()
            .chain(&self.written)
            .filter_map(|(p, s)| Some((p.clone(), KnownSum::of(s)?)))
            .collect();
        if self.producers.is_empty() {
            return Ok(known);
        }
        let wanted: std::collections::HashSet<(&JobId, u32)> = self.producers.values().map(|(j, a)| (j, *a)).collect();
        let listed = store.list(run, "jobs/").await?;
        let parts: Vec<(JobId, u32, &str)> = listed
            .iter()
            .filter_map(|p| {
                let rest = p.strip_prefix("jobs/")?.strip_suffix(&format!("/{}", layout::JOB_FILES))?;
                let (job, attempt) = rest.split_once("/attempt-")?;
                Some((job.parse().ok()?, attempt.parse().ok()?, p.as_str()))
            })
            .filter(|(j, a, _)| wanted.contains(&(j, *a)))
            .collect();
        let mut reads = futures::stream::iter(parts)
            .map(|(job, attempt, path)| async move { (job, attempt, path, store.get(run, path).await) })
            .buffer_unordered(super::READ_CONCURRENCY);
        while let Some((job, attempt, path, bytes)) = reads.next().await {
            // An unreadable part only costs reading its files.
            let Ok(bytes) = bytes else { continue };
            if let Some(k) = KnownSum::of(&FileSum::of(&bytes)) {
                known.insert(path.to_string(), k);
            }
            let Ok(part) = serde_json::from_slice::<FilesPart>(&bytes) else { continue };
            for (path, sum) in part.files {
                let by_this_attempt =
                    task_of(&path).and_then(|t| self.producers.get(t)).is_some_and(|(j, a)| *j == job && *a == attempt);
                if by_this_attempt && let Some(k) = KnownSum::of(&sum) {
                    known.insert(path, k);
                }
            }
        }
        Ok(known)
    }
}

impl std::fmt::Debug for RecordingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingStore").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod recording_tests {
    use super::*;

    /// A recording store is a bundle store like any other: the port's conformance suite runs
    /// through it, over the folder store.
    #[tokio::test]
    async fn the_recording_store_passes_the_bundle_store_suite() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn BundleStore> = Arc::new(agenteval_local::FsBundleStore::new(dir.path()));
        let store = Arc::new(RecordingStore::new(inner));
        agenteval_testkit::conformance::bundle_store_suite(store.clone()).await;
        assert!(!store.written().is_empty(), "it recorded what the suite wrote");
    }
}
