//! The run engine: the controller that turns a benchmark into jobs, the worker that runs them,
//! and everything in between (benchmarks, agents, task environments, evaluators, scorers,
//! bundles).
//!
//! It depends on `agenteval-core` for types and traits and is handed a
//! [`Resolver`](agenteval_core::traits::Resolver) that opens stores, indexes and backends; it
//! depends on no backend crate, never parses command lines and never talks to a cloud SDK.

pub mod agents;
pub mod benchmarks;
pub mod bundle;
pub mod controller;
pub mod environments;
pub mod evaluators;
pub mod refs;
pub mod resolve;
pub mod telemetry;
pub mod worker;

/// How untrusted programs run, from its own crate (the paths the engine names stay `isolation::…`).
pub use agenteval_isolation as isolation;
pub use agenteval_isolation::python;
/// What a bundle seal writes and what reads bundles back, at the paths callers name.
pub use bundle::{rebuild, report, scorers};

/// Version of this build, recorded in every bundle.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use agenteval_core::cache_dir;
