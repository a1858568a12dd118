//! Secret values that cannot leak through `Debug`, `Display` or serialization, and a redactor
//! that scrubs known secret values out of text before it is written anywhere.

use std::fmt;
use std::sync::{Arc, RwLock};

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

    pub fn redact(&self, text: &str) -> String {
        let values = self.values.read().unwrap_or_else(|e| e.into_inner());
        let mut out = text.to_string();
        for v in values.iter() {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), "[REDACTED]");
            }
        }
        out
    }

    /// Redacts every string inside a JSON value (keys included).
    pub fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        if self.is_empty() {
            return value.clone();
        }
        match value {
            serde_json::Value::String(s) => serde_json::Value::String(self.redact(s)),
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(|v| self.redact_json(v)).collect()),
            serde_json::Value::Object(o) => {
                serde_json::Value::Object(o.iter().map(|(k, v)| (self.redact(k), self.redact_json(v))).collect())
            }
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
    fn redactor_scrubs_text_and_json() {
        let r = Redactor::new();
        r.add(&Secret::new("hunter2hunter2"));
        r.add(&Secret::new("abc")); // too short to scrub
        assert_eq!(r.redact("pw=hunter2hunter2!"), "pw=[REDACTED]!");
        let j = serde_json::json!({"a": ["x hunter2hunter2"], "hunter2hunter2": 1});
        let out = r.redact_json(&j).to_string();
        assert!(!out.contains("hunter2"), "{out}");
    }
}
