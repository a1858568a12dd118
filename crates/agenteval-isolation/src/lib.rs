//! How untrusted programs run: the per-task supervisor and process-tree killing (`reap`), the
//! Landlock view and launcher (`sandbox`), seccomp, users and capabilities (`confine`), the uid
//! each task attempt leases under a root worker (`uids`), the scratch folder's disk limit
//! (`disk`), and untrusted Python in a sandboxed process (`python`: HumanEval checks and the
//! `python` tool). Agents, checks and graders all start through it.

pub mod confine;
pub mod disk;
pub mod python;
pub mod reap;
pub mod sandbox;
pub mod uids;

/// Why a program could not be confined as asked: a step the kernel refused, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfineError(pub String);

impl From<String> for ConfineError {
    fn from(s: String) -> Self {
        ConfineError(s)
    }
}

/// Says once per process that agents run without a sandbox, and why.
pub fn warn_unsandboxed(why: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| tracing::warn!("agents run without a filesystem sandbox: {why}"));
}

/// Kills the agent's whole process tree when dropped, however the task ended: on a time limit
/// the runner drops the agent's future, and nothing the agent started (in its group or out of
/// it) may outlive its task.
pub struct TreeGuard(pub Option<i32>);

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            reap::kill_tree(pid);
        }
    }
}
