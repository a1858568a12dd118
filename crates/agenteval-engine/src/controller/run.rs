//! A run as its controller drives it (its config, tasks, store, index, backend, lease and
//! metrics) and a job in flight.

use std::sync::Arc;
use std::time::Instant;

use agenteval_core::RunId;
use agenteval_core::config::RunConfig;
use agenteval_core::model::*;
use agenteval_core::traits::{BundleStore, CloudBackend, RunIndex};

use super::fleet_file;
use crate::bundle::{Metadata, TaskTable};
use crate::telemetry::{FleetMetrics, Journal};

/// A job submitted and not yet let go.
pub(super) struct InFlight {
    pub(super) handle: JobHandle,
    pub(super) tasks: Vec<u32>,
    pub(super) submitted: Instant,
    /// Whether the job has been seen running (its start latency is recorded once).
    pub(super) started: bool,
    /// The job's `eval.job` span, from submit to end.
    pub(super) span: tracing::Span,
    /// The set's job slot this job holds (a run of a set), given back when the job is let go.
    pub(super) _slot: Option<super::set::Slot>,
}

impl Drop for InFlight {
    /// The OpenTelemetry bridge ends a span at its last exit, not when it closes: a job's span
    /// is entered only while it is submitted, so without this it would end then, before its
    /// tasks start. Entering it once more as the job is let go makes it cover the job.
    fn drop(&mut self) {
        self.span.in_scope(|| {});
    }
}

/// One run being driven.
pub(super) struct Run {
    pub(super) run_id: RunId,
    pub(super) config: RunConfig,
    pub(super) index_uri: String,
    pub(super) tasks: TaskTable,
    pub(super) store: Arc<dyn BundleStore>,
    pub(super) index: Arc<dyn RunIndex>,
    pub(super) backend: Arc<dyn CloudBackend>,
    pub(super) meta: Metadata,
    /// Attempts already used before this controller started (resume); retry limits count from it.
    pub(super) attempt_base: u32,
    /// The lease this controller holds on the run (see `RunUpdate::if_epoch`).
    pub(super) epoch: u32,
    /// Set when the run starts driving.
    pub(super) metrics: Option<FleetMetrics>,
    pub(super) journal: Journal,
    /// The run's `telemetry.jsonl`.
    pub(super) fleet_file: fleet_file::TelemetryFile,
    /// Each job runs in its tasks' own image (`JobSpec::image`): jobs are made of tasks of one
    /// image. Set when the run starts driving.
    pub(super) task_images: bool,
    /// Jobs made so far in this controller's epoch: a further round numbers its jobs on.
    pub(super) jobs_made: std::sync::atomic::AtomicUsize,
}

impl Run {
    /// A run ready to drive; its id comes from the metadata, its index URI from the config, and
    /// its metrics and journal are set when driving starts.
    pub(super) fn new(
        config: RunConfig,
        tasks: TaskTable,
        store: Arc<dyn BundleStore>,
        index: Arc<dyn RunIndex>,
        backend: Arc<dyn CloudBackend>,
        meta: Metadata,
        attempt_base: u32,
    ) -> Self {
        Run {
            run_id: meta.run_id,
            fleet_file: fleet_file::TelemetryFile::new(store.clone(), meta.run_id),
            task_images: false,
            jobs_made: std::sync::atomic::AtomicUsize::new(0),
            index_uri: config.storage.index_location().to_string(),
            config,
            tasks,
            store,
            index,
            backend,
            meta,
            attempt_base,
            epoch: 0,
            metrics: None,
            journal: None,
        }
    }
}
