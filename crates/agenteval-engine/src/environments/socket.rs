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

/// Serves `session` on a socket at `path` until the returned guard is dropped; each command runs
/// with at most `max_secs`.
pub fn serve(session: EnvSession, path: &Path, max_secs: f64) -> Result<Served> {
    use std::os::unix::fs::PermissionsExt as _;
    let listener =
        tokio::net::UnixListener::bind(path).map_err(|e| Error::io(format!("binding {}", path.display()), e))?;
    // The agent may run as another user; the socket sits in its own scratch folder.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| Error::io(format!("opening {} to the agent", path.display()), e))?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
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
