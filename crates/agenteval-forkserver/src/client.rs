//! The controller's side: starts the fork server and asks it for workers.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;

use crate::protocol::{Reply, Start, line};

/// Why a worker was not started by the fork server (the caller can still `exec` it).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the fork server is gone")]
    Gone,
    #[error("the fork server could not start the worker: {0}")]
    Refused(String),
    #[error("the fork server did not answer within {0:?} and was killed")]
    Unresponsive(std::time::Duration),
}

/// How long a start may wait for the server's answer (a fork takes milliseconds). A server
/// that stops answering (stopped by a signal, say) must not stall dispatch: it is killed and
/// the remaining workers start by `exec`.
const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A running fork server. Dropping it closes its control socket: the server exits, and the
/// workers it started carry on.
pub struct ForkServer {
    pid: Option<u32>,
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    shared: Arc<Shared>,
    next: AtomicU64,
    start_timeout: std::time::Duration,
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer").field("alive", &self.shared.alive.load(Ordering::SeqCst)).finish()
    }
}

#[derive(Default)]
struct Shared {
    alive: AtomicBool,
    /// Start requests waiting for their reply, by request id.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Result<Worker, Error>>>>,
    /// Started workers waiting for their exit status, by pid.
    running: Mutex<HashMap<i32, oneshot::Sender<ExitStatus>>>,
}

/// A worker the fork server started.
#[derive(Debug)]
pub struct Worker {
    pub pid: i32,
    exit: oneshot::Receiver<ExitStatus>,
}

impl Worker {
    /// Its exit status; `None` when the fork server went away first (the worker may still run,
    /// now a child of init: only its liveness can be known).
    pub async fn wait(self) -> Option<ExitStatus> {
        self.exit.await.ok()
    }
}

impl ForkServer {
    /// Starts `server` (a command that ends in [`crate::serve`]) with the control socket as its
    /// stdin, in its own process group (Ctrl-C reaches the controller, which decides). Its last
    /// argument is added here: `--title-room=...`, room for its workers' command lines, which
    /// the server must accept and ignore.
    pub fn launch(mut server: tokio::process::Command) -> std::io::Result<ForkServer> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut process = server
            .arg(crate::title::room())
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pid = process.id();
        ours.set_nonblocking(true)?;
        let (reader, writer) = tokio::net::UnixStream::from_std(ours)?.into_split();
        let shared = Arc::new(Shared { alive: AtomicBool::new(true), ..Shared::default() });
        let s = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = listen(reader, &s).await {
                tracing::warn!("lost the fork server's replies: {e}");
            }
            s.alive.store(false, Ordering::SeqCst);
            // Dropping the senders answers every waiter: starts fail over to `exec`, and running
            // workers are known from then on by their pid alone.
            s.waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
            s.running.lock().unwrap_or_else(|e| e.into_inner()).clear();
        });
        // Reaped here, so a server that dies does not stay a zombie.
        tokio::spawn(async move {
            match process.wait().await {
                Ok(st) if st.success() => tracing::debug!("fork server ended"),
                Ok(st) => tracing::warn!("fork server ended: {st}; workers start by exec from now on"),
                Err(e) => tracing::warn!("lost track of the fork server: {e}"),
            }
        });
        Ok(ForkServer {
            pid,
            writer: tokio::sync::Mutex::new(writer),
            shared,
            next: AtomicU64::new(1),
            start_timeout: START_TIMEOUT,
        })
    }

    /// Starts a worker running `entry(args)` with `env` added and its output in `log`.
    pub async fn start(&self, args: &[String], env: &[(String, String)], log: &Path) -> Result<Worker, Error> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.shared.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        // Checked after registering: the listener clears `waiting` after it clears `alive`.
        if !self.shared.alive.load(Ordering::SeqCst) {
            self.shared.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return Err(Error::Gone);
        }
        let request = line(&Start { id, args: args.to_vec(), log: log.to_path_buf(), env: env.to_vec() });
        if self.writer.lock().await.write_all(&request).await.is_err() {
            self.shared.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return Err(Error::Gone);
        }
        match tokio::time::timeout(self.start_timeout, rx).await {
            Ok(answer) => answer.unwrap_or(Err(Error::Gone)),
            Err(_) => {
                self.shared.alive.store(false, Ordering::SeqCst);
                self.shared.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                if let Some(pid) = self.pid {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                Err(Error::Unresponsive(self.start_timeout))
            }
        }
    }

    /// How long a start waits for the server's answer before the server is given up (10 s).
    pub fn with_start_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// The server's process id (`None` if it had ended before it was asked).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the server still answers.
    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }
}

async fn listen(reader: OwnedReadHalf, shared: &Shared) -> std::io::Result<()> {
    let mut lines = BufReader::new(reader).lines();
    while let Some(l) = lines.next_line().await? {
        let reply: Reply =
            serde_json::from_str(&l).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        match reply {
            Reply::Started { id, pid } => {
                let (tx, exit) = oneshot::channel();
                // Registered before the starter hears of it: the exit may be the next line.
                shared.running.lock().unwrap_or_else(|e| e.into_inner()).insert(pid, tx);
                if let Some(w) = shared.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                    let _ = w.send(Ok(Worker { pid, exit }));
                }
            }
            Reply::Refused { id, error } => {
                if let Some(w) = shared.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                    let _ = w.send(Err(Error::Refused(error)));
                }
            }
            Reply::Exited { pid, status } => {
                if let Some(w) = shared.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&pid) {
                    let _ = w.send(ExitStatus::from_raw(status));
                }
            }
        }
    }
    Ok(())
}
