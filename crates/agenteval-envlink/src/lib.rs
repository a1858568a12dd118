//! A task environment driven over one authenticated connection. On a fleet the agent's
//! environment is a container of the task's image in a launch of its own (an ECS task with no
//! role, on the network its task asked for); a small server there (`agenteval env-serve`)
//! dials the worker, and the worker drives it through [`LinkedEnvironment`] as it drives a local
//! container. The worker's credentials, keys and memory stay in the worker's own launch.
//!
//! Invariants:
//! - a connection is admitted only for a launch the worker is waiting for, once both ends have
//!   proved the launch's token on the other's fresh nonce (HMAC-SHA256); the token never
//!   crosses the wire, so an agent that reached the worker's port learns nothing from it;
//! - everything the environment sends is bounded by what the worker asked: a header's size, a
//!   reply's body (files copied out) by its request's cap, unpacked as plain files and folders
//!   at relative paths only;
//! - a link that breaks fails every call waiting on it (the task's `infra`), never hangs one.

mod link;
mod linked;
mod server;
mod tarball;
pub mod testing;
mod wire;

pub use link::{AsyncStream, Link, Listener, Pending};
pub use linked::{Launched, Launcher, LinkedEnvironment};
pub use server::{dial_and_serve, serve};
pub use wire::random;

/// The variables `agenteval env-serve` reads (and removes from what its commands inherit): the
/// worker's address, the launch's id and its token.
pub const DIAL_ENV: &str = "AGENTEVAL_ENVLINK_DIAL";
pub const ID_ENV: &str = "AGENTEVAL_ENVLINK_ID";
pub const TOKEN_ENV: &str = "AGENTEVAL_ENVLINK_TOKEN";
