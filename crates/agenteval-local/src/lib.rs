//! The embedded default backends: bundles on the filesystem, the run index in SQLite, and jobs
//! as local worker processes. Nothing here needs a network or a cloud account.

pub mod fs_store;
pub mod kind;
pub mod process;
pub mod secrets;
pub mod sqlite_index;

pub use fs_store::FsBundleStore;
pub use kind::LocalBackendKind;
pub use process::LocalProcessBackend;
pub use secrets::LocalSecrets;
pub use sqlite_index::SqliteRunIndex;

/// Runs short blocking work (a SQLite statement, a small file write) from async code without a
/// hop to tokio's blocking pool: on a multi-thread runtime the current worker thread is handed
/// over with `block_in_place`; on a current-thread runtime (the worker) it runs inline. The
/// pool hop costs more than these operations do, and with several workers on two cores the
/// thread wake-ups dominated (measured: most of the system time went to futex).
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
