//! How a `command` agent acts in its task's environment: a Unix socket in its scratch folder
//! (`AGENTEVAL_ENV_SOCKET`) on which the worker runs, in that environment only, each command the
//! agent sends (one JSON line, `WireExec`) and answers with its output (one JSON line,
//! `ExecOutput`). The agent never holds a key to the Docker engine: only this one capability.

use std::path::Path;
use std::time::Duration;

use agenteval_core::environment::{ExecOutput, ExecRequest, WireExec};
use agenteval_core::traits::EnvSession;
use agenteval_core::{Error, Result};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

/// The longest request line.
const MAX_REQUEST: u64 = 1 << 20;

/// Stops serving when dropped (the agent's task is over).
pub struct Served(tokio::task::JoinHandle<()>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The process whose descendants alone may use a task's socket: the agent's supervisor, known
/// once it has started (until then nobody may).
pub type Owner = std::sync::Arc<std::sync::OnceLock<i32>>;

/// Serves `session` on a socket at `path` until the returned guard is dropped; each command runs
/// with at most `max_secs`. A connection from a process outside `owner`'s tree (another task's
/// agent, which the folder's permissions keep out when each task has its own uid, but not when
/// the worker's user runs them all) is refused and logged.
pub fn serve(session: EnvSession, path: &Path, max_secs: f64, owner: Owner) -> Result<Served> {
    use std::os::unix::fs::PermissionsExt as _;
    let listener =
        tokio::net::UnixListener::bind(path).map_err(|e| Error::io(format!("binding {}", path.display()), e))?;
    // The agent may run as another user; the socket sits in its own scratch folder.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| Error::io(format!("opening {} to the agent", path.display()), e))?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let peer = stream.peer_cred().ok().and_then(|c| c.pid());
            let root = owner.get().copied();
            if !matches!((peer, root), (Some(p), Some(r)) if descends_from(p, r)) {
                tracing::warn!(
                    task_env = %session.handle.id,
                    "refused a connection to the environment socket from process {} (not of this task's agent)",
                    peer.map_or("?".to_string(), |p| p.to_string())
                );
                continue;
            }
            let session = session.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = Vec::new();
                let mut reader = BufReader::new(read.take(MAX_REQUEST + 1));
                if reader.read_until(b'\n', &mut line).await.is_err() {
                    return;
                }
                let answer = match serde_json::from_slice::<WireExec>(&line) {
                    Ok(w) => run(&session, w, max_secs).await,
                    Err(e) => ExecOutput {
                        stderr: format!("not a command request: {e}"),
                        exit_code: Some(2),
                        ..Default::default()
                    },
                };
                let mut out = serde_json::to_vec(&answer).expect("an output serializes");
                out.push(b'\n');
                let _ = write.write_all(&out).await;
            });
        }
    });
    Ok(Served(task))
}

/// Whether `pid` is `root` or one of its descendants, by the parents `/proc` names.
pub fn descends_from(mut pid: i32, root: i32) -> bool {
    // Deeper trees than this are not an agent's `env exec`.
    for _ in 0..256 {
        if pid == root {
            return true;
        }
        if pid <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // The command name may hold spaces and parentheses: the fields follow the last `)`.
        match stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()) {
            Some(parent) => pid = parent,
            None => return false,
        }
    }
    false
}

async fn run(session: &EnvSession, w: WireExec, max_secs: f64) -> ExecOutput {
    let secs = w.timeout_seconds.unwrap_or(max_secs).clamp(0.001, max_secs.max(0.001));
    let req = ExecRequest { workdir: w.workdir, ..ExecRequest::new(w.command, Duration::from_secs_f64(secs)) };
    match session.env.exec(&session.handle, &req).await {
        Ok(o) => o,
        Err(e) => {
            ExecOutput { stderr: format!("the environment failed: {e}"), exit_code: Some(125), ..Default::default() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_descends_from_its_ancestors_only() {
        let me = std::process::id() as i32;
        let parent = nix::unistd::getppid().as_raw();
        assert!(descends_from(me, me));
        assert!(descends_from(me, parent));
        assert!(!descends_from(parent, me));
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(descends_from(child.id() as i32, me));
        assert!(!descends_from(1, me));
        let _ = child.kill();
        let _ = child.wait();
    }
}
