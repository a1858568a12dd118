//! The run's `telemetry.jsonl`: fleet snapshots appended through the run's bundle store, the
//! same way on every backend (a file on disk, parts on S3); a resumed run keeps earlier lines
//! (`reopen`, which the span file shares).

use agenteval_core::layout;
use agenteval_core::traits::{Appender, BundleStore, TelemetrySnapshot};
use agenteval_core::{Error, ErrorKind, Result, RunId};
use std::sync::Arc;

/// A run-long file opened for appending, with what an earlier controller of the run wrote
/// carried over (appenders start a file anew); also returns those earlier bytes.
pub(super) async fn reopen(store: &dyn BundleStore, run: &RunId, path: &str) -> Result<(Box<dyn Appender>, Vec<u8>)> {
    let earlier = match store.get(run, path).await {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut appender = store.open_appender(run, path).await?;
    if !earlier.is_empty() {
        appender.append(&earlier).await?;
    }
    Ok((appender, earlier))
}

/// Opened on the first snapshot, finished by the seal.
pub(super) struct TelemetryFile {
    store: Arc<dyn BundleStore>,
    run: RunId,
    appender: tokio::sync::Mutex<Option<Box<dyn Appender>>>,
}

impl TelemetryFile {
    pub(super) fn new(store: Arc<dyn BundleStore>, run: RunId) -> Self {
        TelemetryFile { store, run, appender: tokio::sync::Mutex::new(None) }
    }

    /// Appends one snapshot line.
    pub(super) async fn append(&self, snapshot: &TelemetrySnapshot) -> Result<()> {
        let mut line = serde_json::to_vec(snapshot).map_err(|e| Error::json("encoding telemetry", e))?;
        line.push(b'\n');
        let mut file = self.appender.lock().await;
        if file.is_none() {
            *file = Some(reopen(self.store.as_ref(), &self.run, layout::TELEMETRY).await?.0);
        }
        file.as_mut().expect("opened above").append(&line).await
    }

    /// Completes the file (stores that write it in parts join them).
    pub(super) async fn finish(&self) -> Result<()> {
        match self.appender.lock().await.take() {
            Some(a) => a.finish().await,
            None => Ok(()),
        }
    }
}
