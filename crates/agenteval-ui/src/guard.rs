//! Every request's gate and every answer's headers. The UI shows untrusted agent output from a
//! local server, so: only GET and HEAD; on a loopback bind, only a loopback `Host` (a page of
//! another site that rebinds its name to 127.0.0.1 cannot read the UI); unless turned off on a
//! loopback bind, the token on every request (as `?token=`, which also sets a same-site cookie,
//! as the cookie, or as `Authorization: Bearer`), so that another process of the machine (an
//! agent under evaluation) cannot read it either; a strict Content-Security-Policy on everything.

use std::sync::{Arc, OnceLock};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sha2::Digest as _;

use crate::App;

/// Who may use the UI.
#[derive(Clone)]
pub struct Access {
    /// Bound to a loopback address: requests must name a loopback host.
    pub loopback: bool,
    /// Requests must carry this token.
    pub token: Option<String>,
}

/// The token is a credential: never shown in logs or `Debug`.
impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("loopback", &self.loopback)
            .field("token", &self.token.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

const COOKIE: &str = "agenteval_ui_token";

/// The policy: nothing may load from anywhere but this server, no script but the report's own
/// (by its hash), frames only of this server's pages (the side-by-side comparison).
fn csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        let hash = sha2::Sha256::digest(agenteval_judge::html::REPORT_SCRIPT.as_bytes());
        let hash = base64::engine::general_purpose::STANDARD.encode(hash);
        format!(
            "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; img-src data:; \
             frame-src 'self'; frame-ancestors 'self'; form-action 'self'; base-uri 'none'"
        )
    })
}

fn loopback_host(host: &str) -> bool {
    // `host[:port]`, with IPv6 literals in brackets: after the closing bracket only a port.
    let name = if let Some(rest) = host.strip_prefix('[') {
        let Some((name, after)) = rest.split_once(']') else { return false };
        if !(after.is_empty()
            || after.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
        {
            return false;
        }
        name
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { host })
    };
    matches!(name.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "::1")
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

enum Token {
    Valid { from_query: bool },
    Missing,
}

fn token_of(req: &Request, want: &str) -> Token {
    let query = req.uri().query().unwrap_or("");
    let in_query = query.split('&').filter_map(|kv| kv.strip_prefix("token=")).any(|t| same(t, want));
    if in_query {
        return Token::Valid { from_query: true };
    }
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| same(t.trim(), want));
    let cookie = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(';').filter_map(|c| c.trim().strip_prefix(&format!("{COOKIE}="))).any(|t| same(t, want)));
    if bearer || cookie { Token::Valid { from_query: false } } else { Token::Missing }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{message}\n")).into_response()
}

pub(crate) async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let mut set_cookie = None;
    let refused = if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = refuse(StatusCode::METHOD_NOT_ALLOWED, "this UI is read-only: GET and HEAD only");
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        Some(r)
    } else {
        let access = &app.opts.access;
        let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if access.loopback && !loopback_host(host) {
            Some(refuse(StatusCode::FORBIDDEN, "refused: this UI answers only requests to localhost or 127.0.0.1"))
        } else {
            match access.token.as_deref().map(|want| (want, token_of(&req, want))) {
                None | Some((_, Token::Valid { from_query: false })) => None,
                Some((want, Token::Valid { from_query: true })) => {
                    set_cookie = Some(format!("{COOKIE}={want}; Path=/; HttpOnly; SameSite=Strict"));
                    None
                }
                Some((_, Token::Missing)) => {
                    Some(refuse(StatusCode::UNAUTHORIZED, "a token is needed: open the address `agenteval ui` printed"))
                }
            }
        }
    };
    let mut response = match refused {
        Some(r) => r,
        None => next.run(req).await,
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp()));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("SAMEORIGIN"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, c);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_pass_the_host_check() {
        for ok in ["localhost", "localhost:8765", "127.0.0.1:1", "[::1]:8765", "LOCALHOST"] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8765",
            "127.0.0.1.nip.io",
            "",
            "localhost.evil.example:80",
            "[::2]:1",
            "[::1]evil.com",
            "[::1]:",
            "[::1]:80x",
            "[::1",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn the_policy_allows_the_reports_script_by_hash_and_nothing_inline() {
        let p = csp();
        assert!(p.starts_with("default-src 'none'"), "{p}");
        let script = p.split(';').map(str::trim).find(|d| d.starts_with("script-src")).unwrap();
        assert!(script.starts_with("script-src 'sha256-") && !script.contains("unsafe"), "{p}");
    }
}
