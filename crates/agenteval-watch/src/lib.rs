//! A server the agent left for the tests, watched from this machine while they run: every change
//! it makes to a file is seen (an open to write, a rename, a write to a file it holds, …), so an
//! honest server that only answers the tests is not flagged and one that writes the reward is.
//!
//! The worker (root here) attaches to the server with `ptrace` and has it install a seccomp
//! filter (`no_new_privs` is already set: Docker's `no-new-privileges`) whose listener the worker
//! takes; the filter hands every call that can change a file to the listener, which looks and
//! lets it go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`). Nothing is refused, so a server that must
//! write (its database) works as under Harbor, and is named. A call through a descriptor is
//! judged by what the kernel says the descriptor is (`/proc/PID/fd`), never by what the process
//! says, so no thread of it can change the answer between the look and the call; only an open
//! of a log (`*.log`, `*.out`, `*.err`, `/var/log`) is let by its path, and what is then written
//! through it is judged again by the kernel's word. The filter is every thread's (`TSYNC`) and
//! every process's the server starts. x86-64 only: elsewhere [`Watch::add`] says it cannot.

mod filter;
#[cfg(target_arch = "x86_64")]
mod inject;
mod listen;
mod notify;

pub use listen::{Change, Watch};

/// Why a process could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("process {0} is gone")]
    Gone(u32),
    #[error("cannot attach to process {0}: {1}")]
    Attach(u32, nix::errno::Errno),
    #[error("process {0} did not stop to be watched")]
    NotStopped(u32),
    #[error("cannot reach process {0}'s memory: {1}")]
    Memory(u32, std::io::Error),
    #[error("process {0} has no system call instruction to run")]
    NoSyscall(u32),
    #[error("process {0} refused the filter: {1}")]
    Filter(u32, nix::errno::Errno),
    #[error("cannot take process {0}'s listener: {1}")]
    Copy(u32, nix::errno::Errno),
    #[error("watching a process is built for x86-64 only")]
    Unsupported,
}
