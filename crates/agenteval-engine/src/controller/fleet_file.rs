//! The run's `telemetry.jsonl`: fleet snapshots appended through the run's bundle store, the
//! same way on every backend (a file on disk, parts on S3); a resumed run keeps earlier lines.

use agenteval_core::layout;
use agenteval_core::traits::{Appender, BundleStore, TelemetrySnapshot};
use agenteval_core::{Error, ErrorKind, Result, RunId};
use std::sync::Arc;

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
            // Appenders start the file anew: what an earlier controller of this run wrote is
            // carried over first.
            let earlier = match self.store.get(&self.run, layout::TELEMETRY).await {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e),
            };
            let mut a = self.store.open_appender(&self.run, layout::TELEMETRY).await?;
            if !earlier.is_empty() {
                a.append(&earlier).await?;
            }
            *file = Some(a);
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
