//! Starts local workers by `fork` from one pre-loaded, single-threaded process instead of
//! `exec`ing the agenteval binary once per job.
//!
//! Starting the binary costs more than a small job's work: mapping it, the dynamic loader, the C
//! library's and the crypto library's start-up probes, argument parsing (1.4-2 ms of CPU per
//! worker on a 2-core VM, against ~2 ms for the worker's own job of one mock task). The local
//! backend therefore starts one *fork server* per run (`agenteval worker --fork-server`) and
//! asks it for each worker; the server forks, the child becomes the worker (`entry`), the server
//! reaps it and reports its exit status.
//!
//! Invariants:
//! - the server has one thread when it forks (it never starts a runtime, a logger or a random
//!   generator), so every child is a complete, consistent copy and draws its own randomness;
//! - a child keeps only stdin (`/dev/null`), stdout and stderr (its log): the control socket is
//!   closed in it, so neither the worker nor an agent it starts can ask for more processes, and
//!   so is anything else above 2 the controller inherited;
//! - each child is the leader of its own process group (set by both sides of the fork, so a
//!   cancel right after the start reaches it), as an exec'd worker is;
//! - the server lives as long as its control socket: when the controller ends (or dies), the
//!   server exits and its running workers carry on, as exec'd workers do;
//! - a server that is gone is not fatal: the backend starts the remaining workers by `exec`;
//! - a child's command line reads as the arguments it was started with (`title`), so `ps` and
//!   `/proc/PID/cmdline` name its job as they would for an exec'd worker.

mod client;
mod protocol;
mod server;
mod title;

pub use client::{Error, ForkServer, Worker};
pub use server::serve;
