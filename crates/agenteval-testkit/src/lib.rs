//! Test support shared by agenteval's crates, never shipped: the conformance suites every
//! `BundleStore` and `RunIndex` implementation must pass, the AWS emulator launcher and a mock
//! LLM server, bundle documents for hand-built bundles (`fixtures`), and a scripted environment
//! for unit tests of the stages around one (`fake_env`).
//!
//! Only `[dev-dependencies]` name this crate, so the libraries and the binary do not export
//! test helpers.

pub mod conformance;
pub mod emulator;
pub mod fake_env;
pub mod fixtures;
pub mod llm_mock;
pub mod resolver;
