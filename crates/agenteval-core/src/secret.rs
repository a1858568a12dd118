//! Secret values that cannot leak through `Debug`, `Display` or serialization, and a redactor
//! that scrubs known secret values, and anything shaped like a provider's or a cloud's key, out
//! of text before it is written anywhere.

use std::fmt;
use std::sync::{Arc, LazyLock, RwLock};

use regex::{Regex, RegexSet};

/// A secret value. Its `Debug` and `Display` print `[REDACTED]`; the only way to the value is
/// [`Secret::expose`], which call sites use at the last moment (e.g. setting a child's env).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Replaces every known secret value in text with `[REDACTED]`. Shared by the worker's trace
/// writer, log writer and result writer so that whatever an agent echoes is scrubbed.
#[derive(Clone, Default)]
pub struct Redactor {
    values: Arc<RwLock<Vec<String>>>,
    /// The run's own rules (`redact:` in its config): patterns and fields.
    rules: Arc<RwLock<Rules>>,
}

/// What a run's config asks to scrub beside secrets.
#[derive(Default)]
struct Rules {
    patterns: Vec<Regex>,
    /// Field names, compared without case, anywhere in a JSON document.
    fields: Vec<String>,
    /// Paths from a document's root (`$.user.email` as `["user", "email"]`).
    paths: Vec<Vec<String>>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.values.read().map(|v| v.len()).unwrap_or(0);
        write!(f, "Redactor({n} secrets)")
    }
}

/// Secrets shorter than this are not scrubbed: replacing every "a" in a trace would destroy it
/// and protect nothing.
const MIN_SECRET_LEN: usize = 4;

/// Shapes of credentials that are scrubbed even when nobody told the redactor about them: an
/// agent may echo a key it found, a model may recite one. OpenAI and Anthropic keys (`sk-…`,
/// `sk-ant-…`), AWS access key ids (`AKIA…`, `ASIA…`), bearer tokens, GitHub tokens, Slack tokens,
/// Google API keys and PEM private keys.
const KEY_PATTERNS: &[&str] = &[
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{8,}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
];

/// Field names whose values are credentials whatever they look like (compared without case,
/// `-` and `_`).
const SECRET_FIELDS: &[&str] = &[
    "authorization",
    "proxyauthorization",
    "apikey",
    "xapikey",
    "apitoken",
    "accesstoken",
    "secretaccesskey",
    "password",
];

static KEYS: LazyLock<(RegexSet, Vec<Regex>)> = LazyLock::new(|| {
    let set = RegexSet::new(KEY_PATTERNS).expect("key patterns compile");
    let each = KEY_PATTERNS.iter().map(|p| Regex::new(p).expect("key patterns compile")).collect();
    (set, each)
});

/// Whether a JSON field of this name holds a credential.
pub fn is_secret_field(name: &str) -> bool {
    let norm: String = name.chars().filter(|c| *c != '-' && *c != '_').flat_map(char::to_lowercase).collect();
    SECRET_FIELDS.contains(&norm.as_str())
}

/// Literal pieces every key shape contains: text with none of them (almost all text) is not
/// searched, and the patterns are compiled only in a process that meets one — a worker that
/// starts per task would otherwise pay for the compilation every time.
const KEY_MARKERS: &[&str] =
    &["sk-", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "AIza", "PRIVATE KEY"];

fn may_hold_a_key(text: &str) -> bool {
    KEY_MARKERS.iter().any(|m| text.contains(m))
        || text.as_bytes().windows(7).any(|w| w[..6].eq_ignore_ascii_case(b"bearer") && w[6].is_ascii_whitespace())
}

/// Replaces everything shaped like a key in `text`.
pub fn scrub_key_shapes(text: &str) -> std::borrow::Cow<'_, str> {
    if !may_hold_a_key(text) {
        return std::borrow::Cow::Borrowed(text);
    }
    let (set, each) = &*KEYS;
    let hits = set.matches(text);
    if !hits.matched_any() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for i in hits.iter() {
        out = each[i].replace_all(&out, "[REDACTED]").into_owned();
    }
    std::borrow::Cow::Owned(out)
}

impl Redactor {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&self, secret: &Secret) {
        let v = secret.expose();
        if v.len() >= MIN_SECRET_LEN {
            let mut values = self.values.write().unwrap_or_else(|e| e.into_inner());
            if !values.iter().any(|x| x == v) {
                values.push(v.to_string());
                // Longest first, so a secret containing another is replaced whole.
                values.sort_by_key(|s| std::cmp::Reverse(s.len()));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values.read().map(|v| v.is_empty()).unwrap_or(true)
    }

    /// Adds a run's own rules: every match of each pattern (a regular expression) is scrubbed
    /// from text, and the value of each field (a name, anywhere; or `$.a.b`, a path from a
    /// document's root) from JSON. A pattern that does not compile is refused, naming it.
    pub fn add_rules(&self, patterns: &[String], fields: &[String]) -> crate::Result<()> {
        let mut rules = self.rules.write().unwrap_or_else(|e| e.into_inner());
        for p in patterns {
            rules
                .patterns
                .push(Regex::new(p).map_err(|e| crate::Error::invalid(format!("redact pattern `{p}`: {e}")))?);
        }
        for f in fields {
            match f.strip_prefix("$.") {
                Some(path) => rules.paths.push(path.split('.').map(str::to_string).collect()),
                None => rules.fields.push(f.to_lowercase()),
            }
        }
        Ok(())
    }

    /// Scrubs the known secrets, then everything shaped like a key.
    pub fn redact(&self, text: &str) -> String {
        let values = self.values.read().unwrap_or_else(|e| e.into_inner());
        let mut out = text.to_string();
        for v in values.iter() {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), "[REDACTED]");
            }
        }
        let mut out = match scrub_key_shapes(&out) {
            std::borrow::Cow::Borrowed(_) => out,
            std::borrow::Cow::Owned(o) => o,
        };
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        for p in &rules.patterns {
            if p.is_match(&out) {
                out = p.replace_all(&out, "[REDACTED]").into_owned();
            }
        }
        out
    }

    /// Whether the run's rules name the field `key` at `path` (the keys above it).
    fn field_ruled(&self, path: &[String], key: &str) -> bool {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        rules.fields.iter().any(|f| f.eq_ignore_ascii_case(key))
            || rules.paths.iter().any(|p| p.len() == path.len() + 1 && p[..path.len()] == *path && p[path.len()] == key)
    }

    /// Redacts every string inside a JSON value (keys included); the value of a field named
    /// like a credential (`authorization`, `api-key`, `x-api-key`, …) is replaced whole.
    pub fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        self.redact_json_at(value, &mut Vec::new())
    }

    fn redact_json_at(&self, value: &serde_json::Value, path: &mut Vec<String>) -> serde_json::Value {
        match value {
            serde_json::Value::String(s) => serde_json::Value::String(self.redact(s)),
            serde_json::Value::Array(a) => {
                serde_json::Value::Array(a.iter().map(|v| self.redact_json_at(v, path)).collect())
            }
            serde_json::Value::Object(o) => serde_json::Value::Object(
                o.iter()
                    .map(|(k, v)| {
                        // The value only: it is never learned as text to scrub elsewhere, since
                        // an agent writes these documents and must not choose what is removed
                        // from the trace its policies and graders read (a pattern covers text).
                        let v = if (is_secret_field(k) || self.field_ruled(path, k)) && !v.is_null() {
                            serde_json::Value::String("[REDACTED]".into())
                        } else {
                            path.push(k.clone());
                            let v = self.redact_json_at(v, path);
                            path.pop();
                            v
                        };
                        (self.redact(k), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let s = Secret::new("sk-very-secret");
        assert!(!format!("{s:?}").contains("very"));
        assert!(!format!("{s}").contains("very"));
        assert_eq!(s.expose(), "sk-very-secret");
    }

    #[test]
    fn a_runs_rules_scrub_patterns_fields_and_paths() {
        let r = Redactor::new();
        r.add_rules(&[r"[\w.+-]+@[\w-]+\.[\w.]+".into()], &["customer_id".into(), "$.user.phone".into()]).unwrap();
        assert_eq!(r.redact("mail ann@example.com now"), "mail [REDACTED] now");
        let j = serde_json::json!({"Customer_ID": 42, "user": {"phone": "555", "name": "Ann"}, "phone": "kept",
            "list": [{"customer_id": "cust-1"}]});
        let out = r.redact_json(&j);
        assert_eq!(out["Customer_ID"], "[REDACTED]");
        assert_eq!(out["user"]["phone"], "[REDACTED]");
        assert_eq!(out["user"]["name"], "Ann");
        assert_eq!(out["phone"], "kept", "a path names one place only");
        assert_eq!(out["list"][0]["customer_id"], "[REDACTED]");
        assert!(r.add_rules(&["(".into()], &[]).unwrap_err().to_string().contains("redact pattern `(`"));
        assert_eq!(r.redact("the id cust-1 again"), "the id cust-1 again", "an agent never chooses what is scrubbed");
    }

    #[test]
    fn redactor_scrubs_text_and_json() {
        let r = Redactor::new();
        r.add(&Secret::new("hunter2hunter2"));
        r.add(&Secret::new("abc")); // too short to scrub
        assert_eq!(r.redact("pw=hunter2hunter2!"), "pw=[REDACTED]!");
        let j = serde_json::json!({"a": ["x hunter2hunter2"], "hunter2hunter2": 1});
        let out = r.redact_json(&j).to_string();
        assert!(!out.contains("hunter2"), "{out}");
    }

    #[test]
    fn key_shapes_are_scrubbed_without_being_told() {
        let r = Redactor::new();
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----";
        for key in [
            "sk-proj-abcdefghijklmnopqrstuvwx",
            "sk-ant-api03-abcdefghijklmnopqrstuvwx",
            "AKIAIOSFODNN7EXAMPLE",
            "ASIAIOSFODNN7EXAMPLE",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghij",
            pem,
        ] {
            let out = r.redact(&format!("the key is {key}."));
            assert_eq!(out, "the key is [REDACTED].", "{key}");
        }
        assert_eq!(r.redact("Authorization: Bearer abc.def-123456"), "Authorization: [REDACTED]");
        assert_eq!(r.redact("task-identifier-for-something"), "task-identifier-for-something");
        let j = serde_json::json!({"headers": {"X-Api-Key": "short", "api_key": null, "accept": "json"}});
        let out = r.redact_json(&j);
        assert_eq!(out["headers"]["X-Api-Key"], "[REDACTED]");
        assert_eq!(out["headers"]["api_key"], serde_json::Value::Null);
        assert_eq!(out["headers"]["accept"], "json");
    }
}
