//! The embedded default backends: bundles on the filesystem, the run index in SQLite, and jobs
//! as local worker processes. Nothing here needs a network or a cloud account.

pub mod fs_store;
pub mod process;
pub mod sqlite_index;

pub use fs_store::FsBundleStore;
pub use process::LocalProcessBackend;
pub use sqlite_index::SqliteRunIndex;
