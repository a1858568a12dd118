//! SWE-bench 5.x dataset rows (JSON, JSONL or Parquet) and predictions files (JSON or JSONL),
//! read as the official harness reads them, with every problem of a file named at once.

use std::collections::BTreeMap;
use std::path::Path;

use agenteval_core::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::grading::EvalType;

/// One instance: what the agent is told, the image it acts in, and how it is graded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub instance_id: String,
    #[serde(default)]
    pub repo: String,
    #[serde(default)]
    pub version: String,
    pub base_commit: String,
    pub problem_statement: String,
    #[serde(default)]
    pub hints_text: String,
    /// The instance's image (`/testbed` holds the repository at `base_commit`).
    pub image: String,
    /// The row's eval script as written (see [`crate::grading::eval_script`]).
    pub eval_script: String,
    pub log_parser: String,
    pub eval_type: String,
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    /// The reference fix (the harness's `gold` predictions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// Fields every 5.x row has that a 4.x row lacks.
const FIVE_X: [&str; 4] = ["image", "eval_script", "log_parser", "eval_type"];
const REQUIRED: [&str; 5] = ["instance_id", "base_commit", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS"];

impl Instance {
    /// A row as the harness's `make_test_spec` reads it: the test lists as lists or as JSON
    /// text. `Err` says every field that is missing or wrong.
    pub(crate) fn from_row(row: &Value) -> std::result::Result<Instance, String> {
        let Some(obj) = row.as_object() else { return Err("a row is a JSON object".into()) };
        let missing: Vec<&str> = REQUIRED.iter().chain(&FIVE_X).copied().filter(|k| !obj.contains_key(*k)).collect();
        if !missing.is_empty() {
            let old = FIVE_X.iter().any(|k| missing.contains(k));
            return Err(format!(
                "it has no {}{}",
                missing.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
                if old {
                    " (a SWE-bench 4.x row? agenteval reads 5.x rows, which carry the image, eval script and log parser a grader needs)"
                } else {
                    ""
                }
            ));
        }
        let text = |k: &str| obj.get(k).and_then(Value::as_str).map(String::from);
        let mut problems = Vec::new();
        let list = |k: &str, problems: &mut Vec<String>| -> Vec<String> {
            let v = &obj[k];
            let parsed = match v {
                Value::String(s) => serde_json::from_str::<Vec<String>>(s).ok(),
                other => serde_json::from_value::<Vec<String>>(other.clone()).ok(),
            };
            parsed.unwrap_or_else(|| {
                problems.push(format!("`{k}` is not a list of test ids"));
                Vec::new()
            })
        };
        let (f2p, p2p) = (list("FAIL_TO_PASS", &mut problems), list("PASS_TO_PASS", &mut problems));
        let mut need = |k: &str| {
            text(k).unwrap_or_else(|| {
                problems.push(format!("`{k}` is not text"));
                String::new()
            })
        };
        let inst = Instance {
            instance_id: need("instance_id"),
            base_commit: need("base_commit"),
            problem_statement: need("problem_statement"),
            image: need("image"),
            eval_script: need("eval_script"),
            log_parser: need("log_parser"),
            eval_type: need("eval_type"),
            repo: text("repo").unwrap_or_default(),
            version: obj
                .get("version")
                .map(|v| v.as_str().map_or_else(|| v.to_string(), String::from))
                .unwrap_or_default(),
            hints_text: text("hints_text").unwrap_or_default(),
            patch: text("patch"),
            fail_to_pass: f2p,
            pass_to_pass: p2p,
        };
        if !inst.eval_type.is_empty() && EvalType::parse(&inst.eval_type).is_none() {
            problems.push(format!("`eval_type` is `{}`, not `pass_and_fail` or `fail_only`", inst.eval_type));
        }
        if problems.is_empty() { Ok(inst) } else { Err(problems.join("; ")) }
    }
}

/// What a data file's name says it holds.
fn format_of(path: &Path) -> &'static str {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let name = name.trim_end_matches(".gz");
    if name.ends_with(".parquet") {
        "parquet"
    } else if name.ends_with(".json") {
        "json"
    } else {
        "jsonl"
    }
}

/// The JSON objects of a file's bytes: a JSON array (or an object of objects, as SWE-agent
/// writes predictions), one object per line, or Parquet rows.
fn rows(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Value)>> {
    let name = path.display();
    match format_of(path) {
        "parquet" => crate::parquet::rows(bytes)
            .map_err(|e| Error::invalid(format!("{name}: {e}")))
            .map(|rows| rows.into_iter().enumerate().map(|(i, r)| (format!("row {}", i + 1), r)).collect()),
        "json" => {
            let v: Value = serde_json::from_slice(bytes).map_err(|e| Error::invalid(format!("{name}: {e}")))?;
            let items = match v {
                Value::Array(a) => a,
                Value::Object(o) => o.into_iter().map(|(_, v)| v).collect(),
                _ => return Err(Error::invalid(format!("{name}: a list of rows (or an object of them)"))),
            };
            Ok(items.into_iter().enumerate().map(|(i, r)| (format!("item {}", i + 1), r)).collect())
        }
        _ => {
            let text = std::str::from_utf8(bytes).map_err(|e| Error::invalid(format!("{name}: not UTF-8: {e}")))?;
            let mut out = Vec::new();
            let mut problems = Vec::new();
            for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                match serde_json::from_str(line) {
                    Ok(v) => out.push((format!("line {}", i + 1), v)),
                    Err(e) => problems.push(format!("{name}:{}:{}: {e}", i + 1, e.column())),
                }
            }
            if problems.is_empty() { Ok(out) } else { Err(Error::invalid(problems.join("\n"))) }
        }
    }
}

/// Every instance of a dataset file, in its order; `Err` names each bad row (its place and
/// instance id) at once, and an id given twice.
pub fn read_dataset(path: &Path, bytes: &[u8]) -> Result<Vec<Instance>> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut seen = BTreeMap::new();
    for (at, row) in rows(path, bytes)? {
        let id = row.get("instance_id").and_then(Value::as_str).map(|s| format!(" (`{s}`)")).unwrap_or_default();
        match Instance::from_row(&row) {
            Ok(i) => {
                if let Some(first) = seen.insert(i.instance_id.clone(), at.clone()) {
                    problems.push(format!("{}: {at}{id}: the same instance as {first}", path.display()));
                }
                out.push(i)
            }
            Err(e) => problems.push(format!("{}: {at}{id}: {e}", path.display())),
        }
    }
    if !problems.is_empty() {
        return Err(Error::invalid(problems.join("\n")));
    }
    if out.is_empty() {
        return Err(Error::invalid(format!("{}: no instances", path.display())));
    }
    Ok(out)
}

/// One prediction: a patch for an instance, by a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub instance_id: String,
    #[serde(default = "none_name")]
    pub model_name_or_path: String,
    /// `None`: the model gave no patch (the harness's `patch_is_None`).
    #[serde(default)]
    pub model_patch: Option<String>,
}

fn none_name() -> String {
    "None".into()
}

/// A predictions file (`.json`: a list or an object of predictions; `.jsonl`), keyed by
/// instance id; `Err` names every bad entry and an instance predicted twice.
pub fn read_predictions(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, Prediction>> {
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for (at, row) in rows(path, bytes)? {
        match serde_json::from_value::<Prediction>(row) {
            Ok(p) => {
                if out.contains_key(&p.instance_id) {
                    problems.push(format!("{}: {at}: `{}` is predicted twice", path.display(), p.instance_id));
                }
                out.insert(p.instance_id.clone(), p);
            }
            Err(e) => problems.push(format!(
                "{}: {at}: {e} (a prediction is {{\"instance_id\", \"model_name_or_path\", \"model_patch\"}})",
                path.display()
            )),
        }
    }
    if problems.is_empty() { Ok(out) } else { Err(Error::invalid(problems.join("\n"))) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row() -> Value {
        json!({"instance_id": "o__r-1", "repo": "o/r", "version": 1.0, "base_commit": "abc", "problem_statement": "Fix it",
               "image": "img:1", "eval_script": "echo", "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
               "FAIL_TO_PASS": "[\"t::a\"]", "PASS_TO_PASS": ["t::b"], "patch": "diff"})
    }

    #[test]
    fn a_row_reads_its_lists_as_text_or_lists() {
        let i = Instance::from_row(&row()).unwrap();
        assert_eq!(
            (i.fail_to_pass, i.pass_to_pass, i.version),
            (vec!["t::a".to_string()], vec!["t::b".to_string()], "1.0".into())
        );
    }

    #[test]
    fn a_4x_row_is_refused_saying_what_it_lacks_and_every_bad_row_is_named() {
        let mut old = row();
        for k in ["image", "eval_script", "log_parser", "eval_type"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let e = Instance::from_row(&old).unwrap_err();
        assert!(e.contains("`image`") && e.contains("`eval_script`") && e.contains("4.x"), "{e}");
        let mut bad = row();
        bad["eval_type"] = json!("sometimes");
        let text = format!("{}\n{}\n{}\n{}\n", row(), old, bad, row());
        let err = read_dataset(Path::new("d.jsonl"), text.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("line 2 (`o__r-1`)") && err.contains("line 3") && err.contains("sometimes"), "{err}");
        assert!(err.contains("line 4 (`o__r-1`): the same instance as line 1"), "{err}");
    }

    #[test]
    fn predictions_read_as_the_harness_reads_them() {
        let jsonl = "{\"instance_id\": \"a\", \"model_name_or_path\": \"m\", \"model_patch\": \"d\"}\n{\"instance_id\": \"b\", \"model_patch\": null}\n";
        let p = read_predictions(Path::new("p.jsonl"), jsonl.as_bytes()).unwrap();
        assert_eq!((p["a"].model_patch.as_deref(), p["b"].model_patch.as_deref()), (Some("d"), None));
        assert_eq!(p["b"].model_name_or_path, "None");
        let json = r#"{"a": {"instance_id": "a", "model_name_or_path": "m", "model_patch": ""}}"#;
        assert_eq!(read_predictions(Path::new("p.json"), json.as_bytes()).unwrap().len(), 1);
        assert!(read_predictions(Path::new("p.jsonl"), b"{\"model_patch\": \"x\"}\n").is_err());
    }
}
