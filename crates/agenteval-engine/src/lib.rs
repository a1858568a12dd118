//! The run engine: the controller that turns a benchmark into jobs, the worker that runs them,
//! and everything in between (benchmarks, agents, evaluators, scorers, bundles, factories).
//!
//! It depends on `agenteval-core` for types and traits and picks implementations through
//! [`factory`]; it never parses command lines and never talks to a cloud SDK directly.

pub mod agents;
pub mod benchmarks;
pub mod bundle;
pub mod controller;
pub mod doctor;
pub mod evaluators;
pub mod factory;
pub mod report;
pub mod scorers;
pub mod telemetry;
pub mod worker;

/// Version of this build, recorded in every bundle.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
