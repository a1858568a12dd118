//! The client's typed errors. Their text names the provider, the status and the attempt count,
//! never a header, a key or a request body.

use agenteval_core::{Error, ErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with an error status (after retries, when it was retryable).
    #[error("{provider} answered HTTP {status}{detail} after {attempts} attempt(s)")]
    Status { provider: &'static str, status: u16, detail: String, attempts: u32 },
    /// No answer at all: connection refused, DNS, timeout.
    #[error("cannot reach {provider} at {host}: {reason} (after {attempts} attempt(s))")]
    Unreachable { provider: &'static str, host: String, reason: String, attempts: u32 },
    /// An answer agenteval cannot read.
    #[error("{provider} sent a response agenteval cannot read: {reason}")]
    Decode { provider: &'static str, reason: String },
    /// A cassette cannot be read or written.
    #[error("{0}")]
    Cassette(String),
    /// A strict replay found no matching recording of a call (a stale recording).
    #[error("{0}")]
    ReplayMiss(String),
    /// The client cannot be built as configured.
    #[error("{0}")]
    Config(String),
}

impl LlmError {
    /// How a caller should treat it: `Transient` errors were retried and may pass later.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LlmError::Status { status, .. } if *status == 401 || *status == 403 => ErrorKind::Unauthorized,
            LlmError::Status { status, .. } if is_retryable_status(*status) => ErrorKind::Transient,
            LlmError::Status { .. } => ErrorKind::Invalid,
            LlmError::Unreachable { .. } => ErrorKind::Transient,
            LlmError::Decode { .. } => ErrorKind::Io,
            LlmError::Cassette(_) | LlmError::ReplayMiss(_) => ErrorKind::NotFound,
            LlmError::Config(_) => ErrorKind::Invalid,
        }
    }

    /// Why an agent meeting this error cannot run at all, when that is what it says.
    pub fn fault(&self) -> Option<agenteval_core::model::AgentFault> {
        (self.kind() == ErrorKind::Unauthorized).then_some(agenteval_core::model::AgentFault::KeyRefused)
    }

    /// Whether the model provider itself (capacity, network) failed rather than the request:
    /// such a task is an infrastructure failure, not the agent's.
    pub fn is_provider_outage(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }
}

/// 408, 409 (OpenAI's "try again"), 429 and every 5xx.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..600).contains(&status)
}

impl From<LlmError> for Error {
    fn from(e: LlmError) -> Self {
        Error::new(e.kind(), e.to_string())
    }
}
