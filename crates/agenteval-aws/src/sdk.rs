//! SDK configuration (built once) and error classification (one place decides what is
//! retryable).

use std::sync::Arc;

use agenteval_core::{Error, ErrorKind};
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// Where to reach AWS. Empty fields fall back to the standard chain and environment
/// (`AWS_REGION`, `AWS_PROFILE`, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AwsSettings {
    pub region: Option<String>,
    pub profile: Option<String>,
    pub endpoint_url: Option<String>,
    /// Fixed credentials, for emulators only; real AWS uses the standard chain.
    pub emulator_credentials: bool,
}

impl AwsSettings {
    /// Settings for a local emulator (moto, LocalStack): its endpoint, `us-east-1`, and the
    /// dummy credentials emulators accept.
    pub fn emulator(endpoint: impl Into<String>) -> Self {
        AwsSettings {
            region: Some("us-east-1".into()),
            profile: None,
            endpoint_url: Some(endpoint.into()),
            emulator_credentials: true,
        }
    }
}

impl AwsSettings {
    /// The settings a config's `aws` section asks for; unset fields fall back to the standard
    /// chain and environment.
    pub fn of(cfg: Option<&agenteval_core::config::AwsConfig>) -> AwsSettings {
        cfg.map(|a| AwsSettings {
            region: a.region.clone(),
            profile: a.profile.clone(),
            endpoint_url: a.endpoint_url.clone(),
            emulator_credentials: false,
        })
        .unwrap_or_default()
    }
}

/// Clients built once per settings and shared by everything one command opens (its stores,
/// index, jobs and secrets). Held by the binary's wiring, never global.
#[derive(Debug, Default)]
pub struct ClientCache {
    clients: std::sync::Mutex<std::collections::HashMap<AwsSettings, Arc<AwsClients>>>,
}

impl ClientCache {
    /// The clients for `settings`, connected on first use.
    pub async fn get(&self, settings: &AwsSettings) -> Arc<AwsClients> {
        if let Some(c) = self.clients.lock().unwrap_or_else(|e| e.into_inner()).get(settings) {
            return c.clone();
        }
        // Connecting reads profiles and the environment; two callers racing here build two
        // equal clients and one wins, which costs nothing but a little work.
        let c = AwsClients::connect(settings).await;
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).entry(settings.clone()).or_insert(c).clone()
    }
}

/// One client per service, sharing one SDK configuration.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub s3: aws_sdk_s3::Client,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub ecs: aws_sdk_ecs::Client,
    pub ecr: aws_sdk_ecr::Client,
    /// `doctor`'s look at the security groups (nothing else calls EC2).
    pub ec2: aws_sdk_ec2::Client,
    pub secrets: aws_sdk_secretsmanager::Client,
    /// `aws deploy` and `aws use`: the stack and its outputs.
    pub cloudformation: aws_sdk_cloudformation::Client,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
}

impl AwsClients {
    /// Loads the SDK configuration once and builds every client from it.
    pub async fn connect(settings: &AwsSettings) -> Arc<AwsClients> {
        Self::from_sdk_config(&sdk_config(settings, 4).await)
    }

    /// Every client from one loaded SDK configuration.
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig) -> Arc<AwsClients> {
        let endpoint = sdk
            .endpoint_url()
            .map(str::to_string)
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
        // Emulators (and custom endpoints generally) serve buckets by path, not by host name.
        let s3_conf = aws_sdk_s3::config::Builder::from(sdk).force_path_style(endpoint.is_some()).build();
        Arc::new(AwsClients {
            s3: aws_sdk_s3::Client::from_conf(s3_conf),
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            ecs: aws_sdk_ecs::Client::new(sdk),
            ecr: aws_sdk_ecr::Client::new(sdk),
            ec2: aws_sdk_ec2::Client::new(sdk),
            secrets: aws_sdk_secretsmanager::Client::new(sdk),
            cloudformation: aws_sdk_cloudformation::Client::new(sdk),
            region: sdk.region().map(|r| r.to_string()),
            endpoint_url: endpoint,
        })
    }
}

/// The SDK configuration for `settings`, the one place it is built: ring's TLS, the region,
/// profile and endpoint asked for (else the standard chain's), `max_attempts` tries per call,
/// each call within 300 s (a try within 120 s, a connection within 10 s).
pub async fn sdk_config(settings: &AwsSettings, max_attempts: u32) -> aws_config::SdkConfig {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .retry_config(RetryConfig::standard().with_max_attempts(max_attempts))
        // Every call has a deadline as well as a retry budget: a host that accepts and never
        // answers must not hold a night. Streamed bodies are read after the call returns.
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .operation_attempt_timeout(std::time::Duration::from_secs(120))
                .operation_timeout(std::time::Duration::from_secs(300))
                .build(),
        );
    if let Some(r) = &settings.region {
        loader = loader.region(aws_config::Region::new(r.clone()));
    }
    if let Some(p) = &settings.profile {
        loader = loader.profile_name(p);
    }
    if let Some(e) = &settings.endpoint_url {
        loader = loader.endpoint_url(e);
    }
    // How the calls travel, said once per configuration (requests are SigV4-signed either way).
    let endpoint = settings.endpoint_url.clone().or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    match &endpoint {
        Some(e) => tracing::info!(
            "transport: AWS calls go to {} over {} (the endpoint override), SigV4-signed",
            agenteval_core::config::host_in(e),
            agenteval_core::config::posture(e)
        ),
        None => tracing::info!("transport: AWS calls go to the region's endpoints over TLS, SigV4-signed"),
    }
    if settings.emulator_credentials {
        loader =
            loader.credentials_provider(aws_sdk_s3::config::Credentials::new("test", "test", None, None, "emulator"));
    }
    loader.load().await
}

const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestThrottled",
    "RequestThrottledException",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "ServerException",
    "TransactionConflictException",
    "LimitExceededException",
];

const NOT_FOUND_CODES: &[&str] =
    &["NoSuchKey", "NoSuchBucket", "NotFound", "ResourceNotFoundException", "ClusterNotFoundException"];

const UNAUTHORIZED_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
];

/// Classifies an SDK error: throttling, 5xx, capacity and network trouble are `Transient`
/// (retry), missing resources `NotFound`, credentials `Unauthorized`, failed conditions
/// `Conflict`; anything else is `Invalid` (the request itself is wrong).
pub fn classify<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    what: &str,
    err: SdkError<E, HttpResponse>,
) -> Error {
    let (kind, detail) = kind_and_detail(&err);
    // One readable line; the whole chain stays the error's source, which `-v` prints.
    Error::with_source(kind, format!("{what}: {detail}"), err)
}

/// What an SDK error means for a caller, and what it said, in one line without the resource.
pub fn kind_and_detail<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    err: &SdkError<E, HttpResponse>,
) -> (ErrorKind, String) {
    match err {
        SdkError::TimeoutError(_) => (ErrorKind::Transient, "timed out".to_string()),
        SdkError::DispatchFailure(_) if root_cause(err).to_ascii_lowercase().contains("credential") => (
            ErrorKind::Unauthorized,
            "no AWS credentials found (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run with a role)"
                .to_string(),
        ),
        SdkError::DispatchFailure(_) => (
            ErrorKind::Transient,
            format!(
                "cannot reach AWS: {} (is AWS_ENDPOINT_URL or aws.endpoint_url right, and the network up?)",
                root_cause(err)
            ),
        ),
        SdkError::ResponseError(r) => {
            let status = r.raw().status().as_u16();
            match r.raw().body().bytes().and_then(page_says) {
                // A proxy's or a server's error page: its own words, not the parser's.
                Some(said) => (ErrorKind::Transient, format!("HTTP {status}: {said}")),
                None => (ErrorKind::Transient, format!("unreadable response: {}", root_cause(err))),
            }
        }
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let status = se.raw().status().as_u16();
            let page = se.raw().body().bytes().and_then(page_says);
            let message = match &page {
                Some(said) if code.is_empty() => said.as_str(),
                _ => se.err().message().unwrap_or(""),
            };
            // An error page's parse failure says nothing of what the service meant.
            let message = if page.is_none() && message.contains("unexpected token") { "" } else { message };
            let kind = if TRANSIENT_CODES.contains(&code) || status >= 500 || status == 429 {
                ErrorKind::Transient
            } else if NOT_FOUND_CODES.contains(&code) {
                ErrorKind::NotFound
            } else if UNAUTHORIZED_CODES.contains(&code) {
                ErrorKind::Unauthorized
            } else if code == "ConditionalCheckFailedException" || code == "PreconditionFailed" {
                ErrorKind::Conflict
            } else {
                ErrorKind::Invalid
            };
            let code = if code.is_empty() { format!("HTTP {status}") } else { code.to_string() };
            let hint = if kind == ErrorKind::Unauthorized {
                " (check the AWS credentials: AWS_PROFILE, AWS_ACCESS_KEY_ID…, an expired session token)"
            } else {
                ""
            };
            (kind, if message.is_empty() { format!("{code}{hint}") } else { format!("{code}: {message}{hint}") })
        }
        SdkError::ConstructionFailure(_) => {
            let cause = root_cause(err);
            let hint = if cause.to_ascii_lowercase().contains("credential") {
                " (set AWS credentials: AWS_PROFILE, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a role)"
            } else {
                ""
            };
            (ErrorKind::Unauthorized, format!("{cause}{hint}"))
        }
        _ => (ErrorKind::Invalid, root_cause(err)),
    }
}

/// What an HTML (or plain text) error page says, in one line: its `<title>`, else its first
/// line of text. `None` for a body that is not such a page (JSON, XML, empty).
pub fn page_says(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(64 * 1024)]);
    let t = text.trim_start();
    let lower = t.to_ascii_lowercase();
    if t.is_empty() || t.starts_with('{') || lower.starts_with("<?xml") {
        return None;
    }
    let is_html = lower.starts_with("<!doctype html") || lower.starts_with("<html") || lower.contains("<title>");
    let line = if is_html {
        let title = lower.find("<title>").and_then(|at| {
            let from = at + "<title>".len();
            lower[from..].find("</title>").map(|len| t[from..from + len].to_string())
        });
        match title.filter(|s| !s.trim().is_empty()) {
            Some(title) => title,
            None => strip_tags(t).lines().map(str::trim).find(|l| !l.is_empty())?.to_string(),
        }
    } else if t.starts_with('<') {
        return None;
    } else {
        t.lines().map(str::trim).find(|l| !l.is_empty())?.to_string()
    };
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    (!line.is_empty()).then(|| line.chars().take(200).collect())
}

/// The text of an HTML page, its tags dropped.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push('\n');
            }
            // A line break inside an element's text is a space: an element is one line.
            '\n' | '\r' if !in_tag => out.push(' '),
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// The innermost error of a chain, in its own words (`Connection refused (os error 111)`),
/// not the chain's debug dump.
pub(crate) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut last: &(dyn std::error::Error + 'static) = err;
    while let Some(next) = last.source() {
        last = next;
    }
    let text = last.to_string();
    let text = text.lines().next().unwrap_or("").trim().to_string();
    if text.is_empty() { "no detail".into() } else { text.chars().take(200).collect() }
}

/// The HTTP status of a service error, if any.
pub fn status_of<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    match err {
        SdkError::ServiceError(se) => Some(se.raw().status().as_u16()),
        _ => None,
    }
}

/// The body of a 200 response the SDK could not parse, as JSON.
pub(crate) fn unparsed_success<E>(
    err: &aws_sdk_ecs::error::SdkError<E, aws_sdk_ecs::config::http::HttpResponse>,
) -> Option<serde_json::Value> {
    match err {
        aws_sdk_ecs::error::SdkError::ResponseError(r) if r.raw().status().as_u16() == 200 => {
            r.raw().body().bytes().and_then(|b| serde_json::from_slice(b).ok())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::page_says;

    #[test]
    fn an_error_page_is_told_by_its_title_or_first_line() {
        let werkzeug = b"<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n<p>The server encountered an internal error.</p>\n";
        assert_eq!(page_says(werkzeug).as_deref(), Some("500 Internal Server Error"));
        let untitled = b"<html><body>\n<h1>502   Bad\n Gateway</h1><hr><center>nginx</center></body></html>";
        assert_eq!(page_says(untitled).as_deref(), Some("502 Bad Gateway"));
        assert_eq!(
            page_says(b"upstream connect error or disconnect/reset before headers\n").as_deref(),
            Some("upstream connect error or disconnect/reset before headers")
        );
        assert_eq!(page_says(br#"{"__type":"ServerException","message":"boom"}"#), None);
        assert_eq!(page_says(b"<?xml version=\"1.0\"?><Error/>"), None);
        assert_eq!(page_says(b"  \n"), None);
    }
}
