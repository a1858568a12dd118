//! The environment's end: dials the worker, proves it holds the launch's token (and makes the
//! worker prove it), then serves the worker's operations on the environment it wraps, each as
//! it comes (a long command does not hold up a copy), until the worker hangs up.

use std::sync::Arc;
use std::time::Duration;

use agenteval_core::environment::ExecRequest;
use agenteval_core::traits::Environment;
use agenteval_core::{Error, ErrorKind, Result};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Mutex;

use crate::wire::{self, Challenge, Hello, Op, Prepared, Proof, Reply, Request, WireError};

/// Dials `addr`, introduces itself as launch `id`, and serves `env` until the worker hangs up.
pub async fn dial_and_serve(addr: &str, id: &str, token: &str, env: Arc<dyn Environment>) -> Result<()> {
    let stream = dial(addr).await?;
    let _ = stream.set_nodelay(true);
    serve(stream, id, token, env).await
}

/// Connects to the worker, trying for a while: the worker's listener is up before the launch,
/// but the environment's network may take a moment.
async fn dial(addr: &str) -> Result<tokio::net::TcpStream> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(wire::link_error(&format!("dialing {addr}"), e));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The handshake, then the operations, on any stream.
pub async fn serve<S>(stream: S, id: &str, token: &str, env: Arc<dyn Environment>) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut r, mut w) = tokio::io::split(stream);
    let nonce = wire::random();
    let hello = serde_json::to_vec(&Hello { id: id.into(), nonce: nonce.clone() }).expect("serializable");
    wire::write_frame(&mut w, &hello, &[]).await.map_err(|e| wire::link_error("saying hello", e))?;
    let limit = Duration::from_secs(wire::HANDSHAKE_SECONDS);
    let challenge = tokio::time::timeout(limit, wire::read_handshake(&mut r))
        .await
        .map_err(|_| wire::link_error("the worker's answer", "none in time"))?
        .map_err(|e| wire::link_error("the worker's answer", e))?;
    let challenge: Challenge =
        serde_json::from_slice(&challenge).map_err(|e| wire::link_error("the worker's answer", e))?;
    if !wire::proves(token, wire::WORKER, &nonce, &challenge.proof) {
        return Err(Error::new(ErrorKind::Unauthorized, "the worker did not prove the launch's token"));
    }
    let proof = Proof { proof: wire::proof(token, wire::ENVIRONMENT, &challenge.nonce) };
    wire::write_frame(&mut w, &serde_json::to_vec(&proof).expect("serializable"), &[])
        .await
        .map_err(|e| wire::link_error("proving", e))?;
    let w = Arc::new(Mutex::new(w));
    loop {
        let (header, body) = match wire::read_frame(&mut r, wire::MAX_REQUEST_BODY).await {
            Ok(f) => f,
            // The worker hung up: its job is done with this environment.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(wire::link_error("reading a request", e)),
        };
        let req: Request = serde_json::from_slice(&header).map_err(|e| wire::link_error("a request", e))?;
        let (env, w) = (env.clone(), w.clone());
        tokio::spawn(async move {
            // A bug in one operation answers that request with an error, never leaves it waiting.
            let done = tokio::spawn(async move { run(env.as_ref(), req.op, body).await }).await;
            let (ok, body) = match done.unwrap_or_else(|e| Err(Error::internal(format!("the operation failed: {e}")))) {
                Ok((v, body)) => (Ok(v), body),
                Err(e) => (Err(e), Vec::new()),
            };
            let reply = match ok {
                Ok(v) => Reply { id: req.id, ok: Some(v), err: None },
                Err(e) => Reply { id: req.id, ok: None, err: Some(WireError::of(&e)) },
            };
            let header = serde_json::to_vec(&reply).expect("serializable");
            let mut w = w.lock().await;
            if let Err(e) = wire::write_frame(&mut *w, &header, &body).await {
                tracing::warn!("could not answer the worker: {e}");
            }
        });
    }
}

/// One operation on the environment: its reply's value and body.
async fn run(env: &dyn Environment, op: Op, body: Vec<u8>) -> Result<(serde_json::Value, Vec<u8>)> {
    let json = |v: serde_json::Value| Ok((v, Vec::new()));
    match op {
        Op::Prepare { run, task, attempt, spec } => {
            let handle = env.prepare(&run, &task, attempt, &spec).await?;
            let prepared = Prepared {
                worker_root: env.worker_root(&handle),
                leftovers_outlive_agent: env.leftovers_outlive_agent(&handle),
                processes_before_agent: env.processes_before_agent(&handle),
                releases_servers: env.releases_servers(&handle),
                handle,
            };
            json(serde_json::to_value(prepared).expect("serializable"))
        }
        Op::Exec { handle, command, timeout_ms, user, env: vars, workdir, max_output_bytes, grader } => {
            let req = ExecRequest {
                command,
                timeout: Duration::from_millis(timeout_ms),
                user,
                env: vars,
                workdir,
                max_output_bytes,
                grader,
            };
            json(serde_json::to_value(env.exec(&handle, &req).await?).expect("serializable"))
        }
        Op::CopyIn { handle, to, name } => {
            let dir = tempfile::tempdir().map_err(|e| Error::io("a folder for the copy", e))?;
            crate::tarball::unpack(&body[..], dir.path(), u64::MAX)?;
            let from = match name {
                Some(n) => dir.path().join(n),
                None => dir.path().to_path_buf(),
            };
            env.copy_in(&handle, &from, &to).await?;
            json(serde_json::Value::Null)
        }
        Op::CopyOut { handle, from, max_bytes } => {
            let dir = tempfile::tempdir().map_err(|e| Error::io("a folder for the copy", e))?;
            env.copy_out(&handle, &from, dir.path(), max_bytes).await?;
            let (bytes, _) = crate::tarball::pack(dir.path())?;
            Ok((serde_json::Value::Null, bytes))
        }
        Op::Quiesce { handle } => {
            env.quiesce(&handle).await?;
            json(serde_json::Value::Null)
        }
        Op::ChangedOutside { handle } => json(serde_json::json!(env.changed_outside(&handle).await)),
        Op::MarkBaseline { handle } => {
            env.mark_baseline(&handle).await;
            json(serde_json::json!(env.processes_before_agent(&handle)))
        }
        Op::WrittenBytes { handle } => json(serde_json::json!(env.written_bytes(&handle).await)),
        Op::OutOfMemory { handle } => json(serde_json::json!(env.out_of_memory(&handle).await)),
        Op::Release { handle, pids } => json(serde_json::json!(env.release(&handle, &pids).await)),
        Op::Watched { handle } => json(serde_json::json!(env.watched(&handle).await)),
    }
}
