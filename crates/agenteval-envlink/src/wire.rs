//! The link's wire: frames (a JSON header and a byte body, each length-prefixed and capped by
//! the reader), the handshake that proves both ends know the environment's token without
//! sending it, and the operations a worker asks of an environment.

use std::collections::BTreeMap;

use agenteval_core::environment::{EnvHandle, EnvSpec};
use agenteval_core::model::TaskSpec;
use agenteval_core::{Error, ErrorKind, RunId};
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A header is JSON: an operation, or a reply with a command's bounded output.
pub(crate) const MAX_HEADER: usize = 64 << 20;
/// A request's body (files copied in): the worker's own, bounded all the same.
pub(crate) const MAX_REQUEST_BODY: u64 = 4 << 30;
/// A handshake message's header at most: read before anyone is proved, so kept small.
pub(crate) const MAX_HANDSHAKE: usize = 4096;
/// How long either end waits for the other's part of the handshake.
pub(crate) const HANDSHAKE_SECONDS: u64 = 20;

/// Writes one frame.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, header: &[u8], body: &[u8]) -> std::io::Result<()> {
    w.write_all(&(header.len() as u32).to_be_bytes()).await?;
    w.write_all(header).await?;
    w.write_all(&(body.len() as u64).to_be_bytes()).await?;
    w.write_all(body).await?;
    w.flush().await
}

/// Reads one frame's header; its body's length comes next ([`read_body`]).
pub(crate) async fn read_header<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    read_header_within(r, MAX_HEADER).await
}

/// Reads one frame's header of at most `max` bytes, refusing a longer one unread.
async fn read_header_within<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a header of {len} bytes")));
    }
    let mut header = vec![0u8; len];
    r.read_exact(&mut header).await?;
    Ok(header)
}

/// A body's length, refused past `max` before anything of it is read.
async fn body_len<R: AsyncRead + Unpin>(r: &mut R, max: u64) -> std::io::Result<u64> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len).await?;
    let len = u64::from_be_bytes(len);
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a body of {len} bytes, past the {max} it may have"),
        ));
    }
    Ok(len)
}

/// Reads a frame's body, refusing one longer than `max` without reading it.
pub(crate) async fn read_body<R: AsyncRead + Unpin>(r: &mut R, max: u64) -> std::io::Result<Vec<u8>> {
    let len = body_len(r, max).await?;
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    Ok(body)
}

/// Reads a frame's body into a file of its own (none when it is empty), refusing one longer than
/// `max` without reading it: what an environment sends back is never held in memory whole.
pub(crate) async fn spool_body<R: AsyncRead + Unpin>(r: &mut R, max: u64) -> std::io::Result<Option<std::fs::File>> {
    let len = body_len(r, max).await?;
    if len == 0 {
        return Ok(None);
    }
    let mut file = tokio::fs::File::from_std(tempfile::tempfile()?);
    let copied = tokio::io::copy(&mut r.take(len), &mut file).await?;
    if copied != len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the body ended early"));
    }
    let mut file = file.into_std().await;
    std::io::Seek::rewind(&mut file)?;
    Ok(Some(file))
}

/// Reads a handshake message: a small header, no body. What an unproved peer sends is never
/// allowed more.
pub(crate) async fn read_handshake<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let header = read_header_within(r, MAX_HANDSHAKE).await?;
    body_len(r, 0).await?;
    Ok(header)
}

/// Reads a whole frame whose body may be at most `max` bytes.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: u64) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let header = read_header(r).await?;
    let body = read_body(r, max).await?;
    Ok((header, body))
}

/// The environment's first words: which launch it is, and a nonce for the worker to prove on.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub id: String,
    pub nonce: String,
}

/// The worker's answer: its proof on the environment's nonce, and a nonce of its own.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Challenge {
    pub nonce: String,
    pub proof: String,
}

/// The environment's proof on the worker's nonce.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Proof {
    pub proof: String,
}

/// HMAC-SHA256 of `side|nonce` under the token: each end proves it holds the token on the
/// other's fresh nonce, so neither a replayed conversation nor an impostor on either side
/// passes, and the token itself never travels.
pub(crate) fn proof(token: &str, side: &str, nonce: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes any key");
    mac.update(side.as_bytes());
    mac.update(b"|");
    mac.update(nonce.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Whether `given` is the proof of `side|nonce` (compared in constant time).
pub(crate) fn proves(token: &str, side: &str, nonce: &str, given: &str) -> bool {
    let Ok(given) = hex::decode(given) else { return false };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes any key");
    mac.update(side.as_bytes());
    mac.update(b"|");
    mac.update(nonce.as_bytes());
    mac.verify_slice(&given).is_ok()
}

/// A fresh nonce or token: 244 random bits.
pub fn random() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

pub(crate) const WORKER: &str = "worker";
pub(crate) const ENVIRONMENT: &str = "environment";

/// What the worker asks of an environment: the `Environment` trait's methods, a handle each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    Prepare {
        run: RunId,
        task: Box<TaskSpec>,
        attempt: u32,
        spec: Box<EnvSpec>,
    },
    Exec {
        handle: EnvHandle,
        command: String,
        timeout_ms: u64,
        user: Option<String>,
        env: BTreeMap<String, String>,
        workdir: Option<String>,
        max_output_bytes: usize,
        /// Absent from an older worker: the agent's rights, the safe side.
        #[serde(default)]
        grader: bool,
    },
    /// The body is a tar of what to copy; `name` is the file's name when one file was packed.
    CopyIn {
        handle: EnvHandle,
        to: String,
        name: Option<String>,
    },
    CopyOut {
        handle: EnvHandle,
        from: String,
        max_bytes: u64,
    },
    Quiesce {
        handle: EnvHandle,
    },
    ChangedOutside {
        handle: EnvHandle,
    },
    MarkBaseline {
        handle: EnvHandle,
    },
    WrittenBytes {
        handle: EnvHandle,
    },
    OutOfMemory {
        handle: EnvHandle,
    },
    Release {
        handle: EnvHandle,
        pids: Vec<u32>,
    },
    Watched {
        handle: EnvHandle,
    },
}

/// A request: an operation and the id its reply carries.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub op: Op,
}

/// A reply: a value, or the environment's error with its kind.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Reply {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<WireError>,
}

/// An error as it crosses the link.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireError {
    pub kind: String,
    pub message: String,
}

const KINDS: &[(ErrorKind, &str)] = &[
    (ErrorKind::NotFound, "not_found"),
    (ErrorKind::Conflict, "conflict"),
    (ErrorKind::Invalid, "invalid"),
    (ErrorKind::Transient, "transient"),
    (ErrorKind::Unauthorized, "unauthorized"),
    (ErrorKind::Corrupt, "corrupt"),
    (ErrorKind::Cancelled, "cancelled"),
    (ErrorKind::Io, "io"),
    (ErrorKind::Internal, "internal"),
];

impl WireError {
    pub fn of(e: &Error) -> WireError {
        let kind = KINDS.iter().find(|(k, _)| *k == e.kind()).map_or("internal", |(_, s)| s);
        WireError { kind: kind.into(), message: e.to_string() }
    }

    pub fn into_error(self) -> Error {
        let kind = KINDS.iter().find(|(_, s)| *s == self.kind).map_or(ErrorKind::Internal, |(k, _)| *k);
        Error::new(kind, self.message)
    }
}

/// What preparing an environment answers: its handle and what the worker asks of it without a
/// call later (the trait's synchronous questions).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Prepared {
    pub handle: EnvHandle,
    pub worker_root: String,
    pub leftovers_outlive_agent: bool,
    pub processes_before_agent: Vec<agenteval_core::environment::ProcessMark>,
    /// Absent from an older server: it lets no server go itself.
    #[serde(default)]
    pub releases_servers: bool,
}

/// A link failing: the environment is gone or spoke out of turn (an infrastructure failure).
pub(crate) fn link_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Io, format!("the environment's link: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_for_its_token_side_and_nonce_only() {
        let p = proof("token", WORKER, "n1");
        assert!(proves("token", WORKER, "n1", &p));
        assert!(!proves("other", WORKER, "n1", &p), "another token");
        assert!(!proves("token", ENVIRONMENT, "n1", &p), "the other side's proof is not this one's");
        assert!(!proves("token", WORKER, "n2", &p), "another nonce");
        assert!(!proves("token", WORKER, "n1", "zz"), "not hex");
    }

    #[test]
    fn an_error_keeps_its_kind_across_the_link() {
        let e = Error::new(ErrorKind::Transient, "busy");
        let back = WireError::of(&e).into_error();
        assert_eq!((back.kind(), back.to_string()), (ErrorKind::Transient, e.to_string()));
    }

    #[tokio::test]
    async fn a_reply_body_goes_to_a_file_and_one_past_its_cap_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, b"{}", b"hello").await.unwrap();
        write_frame(&mut a, b"{}", &[]).await.unwrap();
        write_frame(&mut a, b"{}", &[7u8; 100]).await.unwrap();
        read_header(&mut b).await.unwrap();
        let mut file = spool_body(&mut b, 5).await.unwrap().expect("a file");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).unwrap();
        assert_eq!(text, "hello");
        read_header(&mut b).await.unwrap();
        assert!(spool_body(&mut b, 5).await.unwrap().is_none(), "no file for an empty body");
        read_header(&mut b).await.unwrap();
        let err = spool_body(&mut b, 99).await.unwrap_err();
        assert!(err.to_string().contains("past the 99"), "{err}");
    }

    #[tokio::test]
    async fn a_handshake_message_past_a_few_kib_is_refused_unread() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, &vec![b' '; MAX_HANDSHAKE + 1], &[]).await.unwrap();
        let err = read_handshake(&mut b).await.unwrap_err();
        assert!(err.to_string().contains("a header of 4097 bytes"), "{err}");
    }

    #[tokio::test]
    async fn a_body_past_its_cap_is_refused_unread() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, b"{}", &[7u8; 100]).await.unwrap();
        let err = read_frame(&mut b, 99).await.unwrap_err();
        assert!(err.to_string().contains("past the 99"), "{err}");
    }
}
