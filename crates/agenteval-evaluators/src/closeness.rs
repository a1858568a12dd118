//! How close an answer is to the expected one, for answers that need not be exact:
//! `similarity` (normalized Levenshtein on text), `numeric` (a number within a tolerance) and
//! `json_equal` (JSON equal but for key order and ignored pointers, each difference named).

use agenteval_core::model::answer_text;
use agenteval_core::traits::EvalInput;
use agenteval_core::{Error, Result};
use serde_json::Value;

use super::{Judge, Judgement, final_step, normalize, verdict};

fn expected<'a>(own: Option<&'a Value>, input: &'a EvalInput<'_>, kind: &str) -> Result<&'a Value> {
    own.or(input.task.expected.as_ref())
        .ok_or_else(|| Error::invalid(format!("{kind} needs `expected` in the evaluator or the task")))
}

#[derive(Debug)]
pub(super) struct Similarity {
    pub expected: Option<Value>,
    pub min: f64,
    pub case_sensitive: bool,
}

impl Judge for Similarity {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let exp = normalize(&answer_text(expected(self.expected.as_ref(), input, "similarity")?), self.case_sensitive);
        let Some(got) = input.result.final_answer.as_ref().map(answer_text) else {
            return Ok(verdict(false, "no final answer".into(), vec![]));
        };
        let got = normalize(&got, self.case_sensitive);
        let score = strsim::normalized_levenshtein(&exp, &got);
        let passed = score + 1e-12 >= self.min;
        let reason = format!("similarity {score:.3} to {exp:?} (at least {:.3} passes)", self.min);
        Ok((score, passed, reason, final_step(input)))
    }
}

#[derive(Debug)]
pub(super) struct Numeric {
    pub expected: Option<Value>,
    pub abs_tolerance: f64,
    pub rel_tolerance: f64,
}

/// A number in a value: itself, or the first number written in its text (`"about 42.5 km"`).
fn number_in(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            static NUMBER: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
                regex::Regex::new(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?").expect("a valid pattern")
            });
            NUMBER.find(s).and_then(|m| m.as_str().replace(',', "").parse().ok())
        }
        _ => None,
    }
}

impl Judge for Numeric {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let exp = expected(self.expected.as_ref(), input, "numeric")?;
        let want = number_in(exp).ok_or_else(|| Error::invalid(format!("numeric: expected {exp} is not a number")))?;
        let Some(answer) = input.result.final_answer.as_ref() else {
            return Ok(verdict(false, "no final answer".into(), vec![]));
        };
        let Some(got) = number_in(answer) else {
            return Ok(verdict(false, format!("no number in the answer {:?}", answer_text(answer)), final_step(input)));
        };
        let diff = (got - want).abs();
        let allowed = self.abs_tolerance.max(self.rel_tolerance * want.abs());
        let passed = diff <= allowed + 1e-12 * want.abs().max(1.0);
        let reason = format!("{got} against {want}: off by {diff} (allowed {allowed})");
        Ok(verdict(passed, reason, final_step(input)))
    }
}

#[derive(Debug)]
pub(super) struct JsonEqual {
    pub expected: Option<Value>,
    pub ignore: Vec<String>,
}

/// Every place `a` and `b` differ, by JSON pointer (at most `cap`), leaving out `ignore`.
fn diff(a: &Value, b: &Value, at: &str, ignore: &[String], out: &mut Vec<String>, cap: usize) {
    if out.len() >= cap || ignore.iter().any(|i| i == at) {
        return;
    }
    let shown = |v: &Value| {
        let s = v.to_string();
        if s.chars().count() > 40 { format!("{}…", s.chars().take(40).collect::<String>()) } else { s }
    };
    let here = if at.is_empty() { "/" } else { at };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff(u, v, &p, ignore, out, cap),
                    (Some(_), None) if !ignore.contains(&p) => out.push(format!("{p}: missing")),
                    (None, Some(v)) if !ignore.contains(&p) => out.push(format!("{p}: unexpected {}", shown(v))),
                    _ => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                diff(u, v, &format!("{at}/{i}"), ignore, out, cap);
            }
        }
        (Value::Array(x), Value::Array(y)) => out.push(format!("{here}: {} items, expected {}", y.len(), x.len())),
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        (x, y) if x == y => {}
        (x, y) => out.push(format!("{here}: {}, expected {}", shown(y), shown(x))),
    }
}

impl Judge for JsonEqual {
    fn judge(&self, input: &EvalInput<'_>) -> Result<Judgement> {
        let exp = expected(self.expected.as_ref(), input, "json_equal")?;
        let parse = |v: &Value| match v {
            Value::String(s) => serde_json::from_str(s.trim()).unwrap_or_else(|_| v.clone()),
            other => other.clone(),
        };
        let Some(answer) = input.result.final_answer.as_ref() else {
            return Ok(verdict(false, "no final answer".into(), vec![]));
        };
        let (want, got) = (parse(exp), parse(answer));
        let mut differences = Vec::new();
        diff(&want, &got, "", &self.ignore, &mut differences, 20);
        let reason = if differences.is_empty() {
            "equal as JSON".to_string()
        } else {
            format!("{} difference(s): {}", differences.len(), differences.join("; "))
        };
        Ok(verdict(differences.is_empty(), reason, final_step(input)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_and_json_differences_are_read_as_documented() {
        assert_eq!(number_in(&json!("about 1,234.5 km")), Some(1234.5));
        assert_eq!(number_in(&json!(-3)), Some(-3.0));
        assert_eq!(number_in(&json!("none")), None);
        let mut out = Vec::new();
        diff(
            &json!({"a": 1, "b": [1, 2], "t": 5, "c": {"d": "x"}}),
            &json!({"a": 1.0, "b": [1, 3], "t": 9, "e": true}),
            "",
            &["/t".to_string()],
            &mut out,
            20,
        );
        assert_eq!(out, ["/b/1: 3, expected 2", "/c: missing", "/e: unexpected true"]);
        assert!((strsim::normalized_levenshtein("kitten", "sitting") - (1.0 - 3.0 / 7.0)).abs() < 1e-12);
    }
}
