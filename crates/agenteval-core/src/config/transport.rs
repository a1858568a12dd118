//! The transport rule for model endpoints (`base_url`), checked when a config loads, and how
//! every connection's transport is said (`posture`).

/// The transport rule: a `base_url` must be `https://`, or `http://` to a loopback address
/// (`localhost`, `127.0.0.0/8`, `::1`), unless the config sets `allow_insecure_http: true`. Keys
/// travel in headers; plain HTTP anywhere else would send them in the clear.
pub fn check_base_url(url: &str, allow_insecure_http: bool) -> crate::Result<()> {
    base_url_problem(url, allow_insecure_http).map_or(Ok(()), |why| Err(crate::Error::invalid(why)))
}

/// The config fields that name a place agenteval connects to, each with how its transport is
/// held: `rule` (`check_base_url` when the config loads: TLS, or plain HTTP to loopback or when
/// allowed) or why another reading applies. A tidy test fails on a `url` or `endpoint` field of
/// the config that this table does not name, so no new one skips the rule unsaid.
pub const ENDPOINT_FIELDS: &[(&str, &str)] = &[
    ("base_url", "rule: a model endpoint (the key travels in a header)"),
    (
        "endpoint",
        "the OTLP collector: TLS or plain as its URL says, said in one INFO line; headers from OTEL_EXPORTER_OTLP_HEADERS only",
    ),
    ("worker_endpoint", "the OTLP collector as the workers reach it: as `endpoint`"),
    (
        "endpoint_url",
        "an AWS endpoint override (an emulator, a VPC endpoint): requests are SigV4-signed, no key is sent; said in one INFO line",
    ),
];

/// How a connection to `url` travels, in words for a log line: `TLS`, `plain HTTP to a loopback
/// address`, or `plain HTTP` (which only an explicit `allow_insecure_http` or a non-key endpoint
/// permits).
pub fn posture(url: &str) -> &'static str {
    if url.starts_with("https://") {
        "TLS"
    } else if url.strip_prefix("http://").is_some_and(|rest| is_loopback(host_of(rest))) {
        "plain HTTP to a loopback address"
    } else {
        "plain HTTP"
    }
}

/// The host of a URL, for a log line (no credentials, no path).
pub fn host_in(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    host_of(rest)
}

fn base_url_problem(url: &str, allow_insecure_http: bool) -> Option<String> {
    if let Some(rest) = url.strip_prefix("https://") {
        return host_of(rest).is_empty().then(|| format!("`{url}` names no host"));
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Some(format!("`{url}` is not an http:// or https:// URL"));
    };
    let host = host_of(rest);
    if host.is_empty() {
        return Some(format!("`{url}` names no host"));
    }
    if is_loopback(host) || allow_insecure_http {
        return None;
    }
    Some(format!(
        "`{url}` would send the API key unencrypted to `{host}`: use https://, a loopback address, or set \
         `allow_insecure_http: true`"
    ))
}

fn host_of(rest: &str) -> &str {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        for ok in ["https://api.openai.com/v1", "http://127.0.0.1:8000/v1", "http://localhost/v1", "http://[::1]:9/v1"]
        {
            assert!(check_base_url(ok, false).is_ok(), "{ok}");
        }
        let e = check_base_url("http://10.0.0.5:8000/v1", false).unwrap_err();
        assert!(e.to_string().contains("allow_insecure_http"), "{e}");
        assert!(check_base_url("http://user@evil.example/v1", false).is_err());
        assert!(check_base_url("http://127.0.0.1.evil.example/v1", false).is_err());
        assert!(check_base_url("http://10.0.0.5:8000/v1", true).is_ok());
        assert!(check_base_url("ftp://x", true).is_err());
        assert_eq!(posture("https://api.openai.com/v1"), "TLS");
        assert_eq!(posture("http://127.0.0.1:8000/v1"), "plain HTTP to a loopback address");
        assert_eq!(posture("http://collector:4318"), "plain HTTP");
        assert_eq!(host_in("http://user:pw@collector:4318/v1/traces"), "collector");
    }
}
