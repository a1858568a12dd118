//! Typed errors shared by every agenteval library crate; the kind drives retry decisions.

use std::fmt;

/// What went wrong, coarse enough for callers to branch on (retry, report, give up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The thing asked for does not exist (run, task, bundle file, secret).
    NotFound,
    /// A conditional write lost: the state already moved past what the caller wanted.
    Conflict,
    /// Bad input from the user: configuration, arguments, case files.
    Invalid,
    /// A temporary failure (throttling, busy database, capacity); retrying may succeed.
    Transient,
    /// Credentials or permissions refused the call.
    Unauthorized,
    /// Data on disk or in the store is not what agenteval wrote (checksums, schema).
    Corrupt,
    /// The operation was cancelled by the user or by a budget.
    Cancelled,
    /// An I/O failure that retrying will probably not fix.
    Io,
    /// A bug or an unexpected state.
    Internal,
}

impl ErrorKind {
    /// Whether an operation that failed with this kind is worth retrying as is.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Transient)
    }

    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Invalid => "invalid input",
            ErrorKind::Transient => "temporary failure",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Corrupt => "corrupt data",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Io => "i/o error",
            ErrorKind::Internal => "internal error",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error with a kind, a human message and an optional underlying cause.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), source: None }
    }

    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error { kind, message: message.into(), source: Some(Box::new(source)) }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    /// Wraps an I/O error, keeping `NotFound` distinguishable for callers.
    pub fn io(context: impl Into<String>, err: std::io::Error) -> Self {
        let kind = match err.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::Unauthorized,
            std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => ErrorKind::Transient,
            _ => ErrorKind::Io,
        };
        let context = context.into();
        Self::with_source(kind, format!("{context}: {err}"), err)
    }

    pub fn json(context: impl Into<String>, err: serde_json::Error) -> Self {
        let context = context.into();
        Self::with_source(ErrorKind::Corrupt, format!("{context}: {err}"), err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_not_found_keeps_its_kind() {
        let e = Error::io("reading x", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.to_string().starts_with("reading x:"));
        assert!(!e.kind().is_retryable());
        assert!(ErrorKind::Transient.is_retryable());
    }
}
