//! The worker's end: a listener environments dial into, each connection admitted only for a
//! launch the worker is waiting for and only once the environment proved that launch's token,
//! and the [`Link`] it becomes: requests sent as they come, replies matched by id, a reply's
//! body refused past what its request allowed.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use agenteval_core::{Error, ErrorKind, Result};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::sync::{Mutex, oneshot};

use crate::wire::{self, Challenge, Hello, Op, Proof, Reply, Request};

type Stream = Box<dyn AsyncStream>;
/// A connection's stream, whatever carries it.
pub trait AsyncStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> AsyncStream for T {}

/// What a pending launch is waiting for: its token, and where its link goes once proved.
struct Waiting {
    token: String,
    tx: oneshot::Sender<Link>,
}

/// Where environments dial in: one per worker, on a port of agenteval's range (the task
/// networks' firewall and the fleet's security groups let only those through).
pub struct Listener {
    addr: SocketAddr,
    waiting: Arc<SyncMutex<HashMap<String, Waiting>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Listens on `ip`, at the first free port of `ports`.
    pub async fn bind(ip: IpAddr, ports: std::ops::RangeInclusive<u16>) -> Result<Listener> {
        let mut last = None;
        for port in ports {
            match tokio::net::TcpListener::bind((ip, port)).await {
                Ok(l) => return Ok(Listener::serve(l)),
                Err(e) => last = Some(e),
            }
        }
        Err(wire::link_error(
            &format!("listening on {ip}"),
            last.map_or_else(|| "no port to try".to_string(), |e| e.to_string()),
        ))
    }

    fn serve(l: tokio::net::TcpListener) -> Listener {
        let addr = l.local_addr().expect("a bound listener has an address");
        let waiting: Arc<SyncMutex<HashMap<String, Waiting>>> = Arc::default();
        let w = waiting.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = l.accept().await else {
                    // Out of descriptors, say: wait rather than spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let w = w.clone();
                tokio::spawn(async move {
                    if let Err(e) = admit(Box::new(stream), Some(peer), &w).await {
                        tracing::warn!("refused an environment's connection from {peer}: {e}");
                    }
                });
            }
        });
        Listener { addr, waiting, task }
    }

    /// Where environments dial.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for launch `id` to dial in and prove `token`.
    pub fn expect(&self, id: &str, token: &str) -> Pending {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("not poisoned").insert(id.into(), Waiting { token: token.into(), tx });
        Pending { id: id.into(), rx, waiting: self.waiting.clone() }
    }

    /// Admits one connection (tests drive this over an in-memory stream).
    pub async fn admit(&self, stream: impl AsyncStream + 'static) -> Result<()> {
        admit(Box::new(stream), None, &self.waiting).await
    }
}

/// A launch's link to come; dropped, it stops waiting.
pub struct Pending {
    id: String,
    rx: oneshot::Receiver<Link>,
    waiting: Arc<SyncMutex<HashMap<String, Waiting>>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.waiting.lock().expect("not poisoned").remove(&self.id);
    }
}

impl Pending {
    /// The link, once the environment dialed in and proved its token.
    pub async fn link(&mut self) -> Result<Link> {
        (&mut self.rx).await.map_err(|_| Error::internal("the listener stopped"))
    }
}

/// The handshake on a connection: the environment's hello, the worker's proof and nonce, the
/// environment's proof. Only then is the waiting launch handed the link (and no longer
/// waiting): an impostor that knows the launch's id but not its token takes nothing.
async fn admit(stream: Stream, peer: Option<SocketAddr>, waiting: &SyncMutex<HashMap<String, Waiting>>) -> Result<()> {
    let (mut r, mut w) = tokio::io::split(stream);
    let limit = Duration::from_secs(wire::HANDSHAKE_SECONDS);
    let hello = tokio::time::timeout(limit, wire::read_handshake(&mut r))
        .await
        .map_err(|_| wire::link_error("hello", "none in time"))?
        .map_err(|e| wire::link_error("hello", e))?;
    let hello: Hello = serde_json::from_slice(&hello).map_err(|e| wire::link_error("hello", e))?;
    let token = match waiting.lock().expect("not poisoned").get(&hello.id) {
        Some(w) => w.token.clone(),
        None => return Err(Error::invalid(format!("no launch {} is waiting", hello.id))),
    };
    let nonce = wire::random();
    let challenge = Challenge { nonce: nonce.clone(), proof: wire::proof(&token, wire::WORKER, &hello.nonce) };
    wire::write_frame(&mut w, &serde_json::to_vec(&challenge).expect("serializable"), &[])
        .await
        .map_err(|e| wire::link_error("challenge", e))?;
    let proof = tokio::time::timeout(limit, wire::read_handshake(&mut r))
        .await
        .map_err(|_| wire::link_error("proof", "none in time"))?
        .map_err(|e| wire::link_error("proof", e))?;
    let proof: Proof = serde_json::from_slice(&proof).map_err(|e| wire::link_error("proof", e))?;
    if !wire::proves(&token, wire::ENVIRONMENT, &nonce, &proof.proof) {
        return Err(Error::new(ErrorKind::Unauthorized, format!("launch {} did not prove its token", hello.id)));
    }
    let Some(waiter) = waiting.lock().expect("not poisoned").remove(&hello.id) else {
        return Err(Error::invalid(format!("launch {} was admitted already", hello.id)));
    };
    let _ = waiter.tx.send(Link::over(r, w, peer));
    Ok(())
}

/// A reply: its value, and its body spooled to a file (files copied out), if it has one.
pub(crate) type Answer = (serde_json::Value, Option<std::fs::File>);
type Replies = Arc<SyncMutex<Option<HashMap<u64, (u64, oneshot::Sender<Result<Answer>>)>>>>;

/// A proved connection to one environment's server.
#[derive(Clone)]
pub struct Link {
    w: Arc<Mutex<WriteHalf<Stream>>>,
    replies: Replies,
    next: Arc<std::sync::atomic::AtomicU64>,
    _reader: Arc<ReaderTask>,
    peer: Option<SocketAddr>,
}

struct ReaderTask(tokio::task::JoinHandle<()>);

impl Drop for ReaderTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Link {
    fn over(r: ReadHalf<Stream>, w: WriteHalf<Stream>, peer: Option<SocketAddr>) -> Link {
        let replies: Replies = Arc::new(SyncMutex::new(Some(HashMap::new())));
        let reader = tokio::spawn(read_replies(r, replies.clone()));
        Link { w: Arc::new(Mutex::new(w)), replies, next: Arc::default(), _reader: Arc::new(ReaderTask(reader)), peer }
    }

    /// Where the environment's connection came from: its address as the worker sees it.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Sends `op` (with `body`) and waits `wait` at most for its reply, whose body may be at
    /// most `max_body` bytes.
    pub(crate) async fn call(&self, op: Op, body: &[u8], max_body: u64, wait: Duration) -> Result<Answer> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.replies.lock().expect("not poisoned").as_mut() {
            Some(m) => m.insert(id, (max_body, tx)),
            None => return Err(wire::link_error("sending", "the environment hung up")),
        };
        let header = serde_json::to_vec(&Request { id, op }).expect("serializable");
        wire::write_frame(&mut *self.w.lock().await, &header, body)
            .await
            .map_err(|e| wire::link_error("sending", e))?;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(wire::link_error("waiting for a reply", "the environment hung up")),
            Err(_) => {
                if let Some(m) = self.replies.lock().expect("not poisoned").as_mut() {
                    m.remove(&id);
                }
                Err(wire::link_error("waiting for a reply", format!("none in {} s", wait.as_secs())))
            }
        }
    }
}

/// Hands each reply to its request; at the first frame out of turn (an unknown id, a body past
/// its request's cap, anything unreadable) the link is closed and every waiting request fails.
async fn read_replies(mut r: ReadHalf<Stream>, replies: Replies) {
    let why = loop {
        let header = match wire::read_header(&mut r).await {
            Ok(h) => h,
            Err(e) => break e.to_string(),
        };
        let reply: Reply = match serde_json::from_slice(&header) {
            Ok(r) => r,
            Err(e) => break format!("an unreadable reply: {e}"),
        };
        let waiter = replies.lock().expect("not poisoned").as_mut().and_then(|m| m.remove(&reply.id));
        let max = waiter.as_ref().map_or(0, |(max, _)| *max);
        let body = match wire::spool_body(&mut r, max).await {
            Ok(b) => b,
            Err(e) => break e.to_string(),
        };
        let Some((_, tx)) = waiter else { continue };
        let result = match (reply.ok, reply.err) {
            (_, Some(e)) => Err(e.into_error()),
            (ok, None) => Ok((ok.unwrap_or(serde_json::Value::Null), body)),
        };
        let _ = tx.send(result);
    };
    let waiting = replies.lock().expect("not poisoned").take().unwrap_or_default();
    for (_, (_, tx)) in waiting {
        let _ = tx.send(Err(wire::link_error("the environment hung up", &why)));
    }
}
