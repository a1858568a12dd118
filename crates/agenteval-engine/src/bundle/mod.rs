//! The result bundle: reading and writing its documents, the compact task table, a task's
//! outcome files, sealing (summary, report, manifest with checksums) and validation that names
//! every problem. The document types themselves are in `agenteval_core::format`.

mod files;
mod outcome;
pub mod rebuild;
pub mod report;
pub mod scorers;
mod seal;
mod table;
mod validate;

use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, Result, RunId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use agenteval_core::format::{Manifest, ManifestEntry, Metadata};
pub use files::{FileSum, FilesPart, ManifestHints, PackSums, RecordingStore, write_files_part};
pub use outcome::{Outcome, publish_staged, stage_task_pack, write_task_outcome, write_task_pack};
pub use seal::{Lines, Summarized, seal, seal_contents, summarize, write_manifest};
pub use table::{TaskTable, read_tasks};
pub use validate::{Validation, validate};

/// Reads in flight while summarizing and sealing: on S3 each read is a round trip, and a
/// 1,000-task bundle has some 5,000 files.
const READ_CONCURRENCY: usize = 32;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub fn to_json_bytes<T: Serialize>(v: &T) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).expect("bundle documents serialize");
    b.push(b'\n');
    b
}

pub async fn read_json<T: for<'de> Deserialize<'de>>(store: &dyn BundleStore, run: &RunId, path: &str) -> Result<T> {
    let bytes = store.get(run, path).await?;
    serde_json::from_slice(&bytes).map_err(|e| Error::json(format!("{path} is not valid"), e))
}
