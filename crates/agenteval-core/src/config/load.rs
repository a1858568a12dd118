//! Loads a `RunConfig` from YAML, reporting every problem at once with file:line:column.
//!
//! The pipeline: YAML (with positions) → JSON value + a map from JSON pointer to position →
//! `--set` overrides → JSON-schema validation (derived from the Rust types, so unknown fields
//! and wrong types are caught) → typed deserialization → semantic `RunConfig::validate` →
//! relative paths resolved against the config file's folder.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use saphyr::{LoadableYamlNode, MarkedYamlOwned, ScalarOwned, YamlDataOwned};
use serde_json::{Map, Value};

use super::{BenchmarkKind, RunConfig};

/// Where a problem comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// 1-based line and column in the file.
    File { line: usize, column: usize },
    /// A `--set` override on the command line.
    Override(String),
    /// Somewhere in the file, position unknown.
    Unknown,
}

/// One problem in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub origin: Origin,
    /// JSON pointer to the offending value (`/backend/max_attempts`).
    pub pointer: String,
    pub message: String,
}

/// Every problem found in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(f, "{} has {} problem{}:", self.file, n, if n == 1 { "" } else { "s" })?;
        for p in &self.problems {
            let field =
                if p.pointer.is_empty() { String::new() } else { format!(" ({})", pointer_to_path(&p.pointer)) };
            match &p.origin {
                Origin::File { line, column } => {
                    writeln!(f, "  {}:{}:{}: {}{}", self.file, line, column, p.message, field)?
                }
                Origin::Override(set) => writeln!(f, "  --set {}: {}{}", set, p.message, field)?,
                Origin::Unknown => writeln!(f, "  {}: {}{}", self.file, p.message, field)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// A loaded, validated configuration and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: RunConfig,
    /// Absolute path of the file.
    pub path: PathBuf,
    /// The configuration after overrides, as JSON, with paths resolved.
    pub resolved: Value,
}

/// `/a/b/0` → `a.b[0]`, the way users write `--set`.
fn pointer_to_path(ptr: &str) -> String {
    let mut out = String::new();
    for seg in ptr.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if seg.chars().all(|c| c.is_ascii_digit()) && !seg.is_empty() {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

fn escape(seg: &str) -> String {
    seg.replace('~', "~0").replace('/', "~1")
}

/// Positions of values and of mapping keys, by JSON pointer.
#[derive(Default)]
struct Positions {
    values: HashMap<String, Origin>,
    keys: HashMap<String, Origin>,
}

impl Positions {
    /// The closest known position for a pointer: the key if asked, else the value, else the
    /// nearest ancestor.
    fn find(&self, ptr: &str, prefer_key: bool) -> Origin {
        let mut p = ptr.to_string();
        loop {
            let hit = if prefer_key {
                self.keys.get(&p).or_else(|| self.values.get(&p))
            } else {
                self.values.get(&p).or_else(|| self.keys.get(&p))
            };
            if let Some(o) = hit {
                return o.clone();
            }
            match p.rfind('/') {
                Some(i) => p.truncate(i),
                None => return Origin::Unknown,
            }
        }
    }
}

fn origin_of(node: &MarkedYamlOwned) -> Origin {
    Origin::File { line: node.span.start.line(), column: node.span.start.col() + 1 }
}

fn scalar_to_json(s: &ScalarOwned) -> Result<Value, String> {
    Ok(match s {
        ScalarOwned::Null => Value::Null,
        ScalarOwned::Boolean(b) => Value::Bool(*b),
        ScalarOwned::Integer(i) => Value::from(*i),
        ScalarOwned::FloatingPoint(f) => serde_json::Number::from_f64(f.into_inner())
            .map(Value::Number)
            .ok_or_else(|| format!("{} is not a finite number", f.into_inner()))?,
        ScalarOwned::String(s) => Value::String(s.clone()),
    })
}

fn key_string(node: &MarkedYamlOwned) -> Option<String> {
    match &node.data {
        YamlDataOwned::Value(ScalarOwned::String(s)) => Some(s.clone()),
        YamlDataOwned::Value(ScalarOwned::Integer(i)) => Some(i.to_string()),
        YamlDataOwned::Value(ScalarOwned::Boolean(b)) => Some(b.to_string()),
        YamlDataOwned::Representation(s, _, _) => Some(s.clone()),
        _ => None,
    }
}

fn convert(node: &MarkedYamlOwned, ptr: &str, pos: &mut Positions, problems: &mut Vec<Problem>) -> Value {
    pos.values.insert(ptr.to_string(), origin_of(node));
    let mut problem =
        |message: String| problems.push(Problem { origin: origin_of(node), pointer: ptr.to_string(), message });
    match &node.data {
        YamlDataOwned::Value(s) => scalar_to_json(s).unwrap_or_else(|m| {
            problem(m);
            Value::Null
        }),
        YamlDataOwned::Representation(s, _, _) => Value::String(s.clone()),
        YamlDataOwned::Sequence(items) => Value::Array(
            items.iter().enumerate().map(|(i, n)| convert(n, &format!("{ptr}/{i}"), pos, problems)).collect(),
        ),
        YamlDataOwned::Mapping(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter() {
                let Some(key) = key_string(k) else {
                    problems.push(Problem {
                        origin: origin_of(k),
                        pointer: ptr.to_string(),
                        message: "mapping keys must be plain strings".into(),
                    });
                    continue;
                };
                let child = format!("{ptr}/{}", escape(&key));
                pos.keys.insert(child.clone(), origin_of(k));
                let value = convert(v, &child, pos, problems);
                out.insert(key, value);
            }
            Value::Object(out)
        }
        YamlDataOwned::Tagged(_, inner) => convert(inner, ptr, pos, problems),
        YamlDataOwned::Alias(_) => {
            problem("YAML aliases are not supported in run configs".into());
            Value::Null
        }
        YamlDataOwned::BadValue => {
            problem("unreadable value".into());
            Value::Null
        }
    }
}

/// Parses YAML text into JSON, recording positions. A syntax error is returned as the single
/// problem (the parser cannot go on past it).
fn parse_yaml(text: &str, pos: &mut Positions) -> Result<Value, Vec<Problem>> {
    let docs = MarkedYamlOwned::load_from_str(text).map_err(|e| {
        vec![Problem {
            origin: Origin::File { line: e.marker().line(), column: e.marker().col() + 1 },
            pointer: String::new(),
            message: format!("invalid YAML: {}", e.info()),
        }]
    })?;
    let mut problems = Vec::new();
    let value = match docs.as_slice() {
        [] => Value::Null,
        [doc] => convert(doc, "", pos, &mut problems),
        [_, second, ..] => {
            problems.push(Problem {
                origin: origin_of(second),
                pointer: String::new(),
                message: "a run config holds one YAML document; found several".into(),
            });
            Value::Null
        }
    };
    if problems.is_empty() { Ok(value) } else { Err(problems) }
}

/// A YAML document converted to JSON, with the position of every value.
pub struct YamlDoc {
    pub value: Value,
    positions: Positions,
}

impl YamlDoc {
    /// Parses one YAML document. Errors are problems with positions (no file name).
    pub fn parse(text: &str) -> Result<YamlDoc, Vec<Problem>> {
        let mut positions = Positions::default();
        let value = parse_yaml(text, &mut positions)?;
        Ok(YamlDoc { value, positions })
    }

    /// The position of the value at a JSON pointer (or of its nearest ancestor).
    pub fn origin(&self, pointer: &str) -> Origin {
        self.positions.find(pointer, false)
    }
}

/// Applies `key.path=value` overrides. Values are YAML scalars or flow collections.
fn apply_overrides(root: &mut Value, overrides: &[String], pos: &mut Positions, problems: &mut Vec<Problem>) {
    for set in overrides {
        let bad = |message: String| Problem { origin: Origin::Override(set.clone()), pointer: String::new(), message };
        let Some((path, raw)) = set.split_once('=') else {
            problems.push(bad("expected `key.path=value`".into()));
            continue;
        };
        let segments: Vec<&str> = path.split('.').collect();
        if segments.iter().any(|s| s.is_empty()) {
            problems.push(bad(format!("`{path}` is not a key path like `backend.max_attempts`")));
            continue;
        }
        let value = if raw.is_empty() {
            Value::String(String::new())
        } else {
            match parse_yaml(raw, &mut Positions::default()) {
                Ok(v) => v,
                Err(_) => Value::String(raw.to_string()),
            }
        };
        if !root.is_object() {
            *root = Value::Object(Map::new());
        }
        match slot(root, &segments, path) {
            Ok((target, ptr)) => {
                *target = value;
                // Fields the override created point at the override, so an unknown `bogus`
                // in `--set bogus.x=1` is reported against the flag, not the file.
                let mut prefix = String::new();
                for seg in ptr.split('/').skip(1) {
                    prefix.push('/');
                    prefix.push_str(seg);
                    pos.keys.entry(prefix.clone()).or_insert_with(|| Origin::Override(set.clone()));
                }
                pos.values.insert(ptr.clone(), Origin::Override(set.clone()));
                pos.keys.insert(ptr, Origin::Override(set.clone()));
            }
            Err(m) => problems.push(bad(m)),
        }
    }
}

/// The value at `segments` (created as objects where missing) and its JSON pointer.
fn slot<'v>(root: &'v mut Value, segments: &[&str], path: &str) -> Result<(&'v mut Value, String), String> {
    let mut cur = root;
    let mut ptr = String::new();
    for (i, seg) in segments.iter().enumerate() {
        ptr.push('/');
        ptr.push_str(&escape(seg));
        let last = i + 1 == segments.len();
        cur = match cur {
            Value::Object(map) => {
                let entry = map.entry(seg.to_string()).or_insert(Value::Null);
                if !last && entry.is_null() {
                    *entry = Value::Object(Map::new());
                }
                entry
            }
            Value::Array(items) => match seg.parse::<usize>() {
                Ok(n) if n < items.len() => &mut items[n],
                _ => return Err(format!("`{seg}` is not an index of the list at `{path}`")),
            },
            _ => {
                return Err(format!("cannot set `{path}`: `{seg}` is inside a plain value"));
            }
        };
    }
    Ok((cur, ptr))
}

fn schema_problems(value: &Value, pos: &Positions) -> Vec<Problem> {
    let schema = RunConfig::json_schema();
    let validator = match jsonschema::validator_for(&schema) {
        Ok(v) => v,
        Err(e) => {
            return vec![Problem {
                origin: Origin::Unknown,
                pointer: String::new(),
                message: format!("internal error: config schema does not compile: {e}"),
            }];
        }
    };
    let mut out = Vec::new();
    for err in validator.iter_errors(value) {
        let ptr = err.instance_path().as_str().to_string();
        match err.kind() {
            jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                for u in unexpected {
                    let child = format!("{ptr}/{}", escape(u));
                    out.push(Problem {
                        origin: pos.find(&child, true),
                        pointer: child,
                        message: format!("unknown field `{u}`"),
                    });
                }
            }
            _ => out.push(Problem { origin: pos.find(&ptr, false), pointer: ptr, message: err.to_string() }),
        }
    }
    out
}

fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.to_string_lossy().contains("://") {
        return p.to_path_buf();
    }
    normalize(&base.join(p))
}

/// Removes `.` and `..` lexically, so paths shown to users read `/repo/runs`, not
/// `/repo/configs/../runs`.
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Loads and validates configuration text. `file` names it in messages; `base` is the folder
/// relative paths resolve against.
pub fn load_config_str(text: &str, file: &str, base: &Path, overrides: &[String]) -> Result<LoadedConfig, ConfigError> {
    let fail = |problems: Vec<Problem>| ConfigError { file: file.to_string(), problems };
    let mut pos = Positions::default();
    let mut value = parse_yaml(text, &mut pos).map_err(fail)?;
    if value.is_null() {
        value = Value::Object(Map::new());
    }
    let mut problems = Vec::new();
    apply_overrides(&mut value, overrides, &mut pos, &mut problems);
    if !value.is_object() {
        problems.push(Problem {
            origin: pos.find("", false),
            pointer: String::new(),
            message: "a run config must be a mapping of fields".into(),
        });
        return Err(fail(problems));
    }
    problems.extend(schema_problems(&value, &pos));
    if !problems.is_empty() {
        return Err(fail(problems));
    }
    let mut config: RunConfig = serde_json::from_value(value)
        .map_err(|e| fail(vec![Problem { origin: Origin::Unknown, pointer: String::new(), message: e.to_string() }]))?;
    for (ptr, message) in config.validate() {
        problems.push(Problem { origin: pos.find(&ptr, false), pointer: ptr, message });
    }

    // Paths are relative to the config file, not to wherever the user happens to stand.
    let b = &mut config.benchmark;
    if let Some(cases) = &b.cases {
        let abs = resolve(base, cases);
        if b.kind == BenchmarkKind::Jsonl && !abs.is_file() {
            problems.push(Problem {
                origin: pos.find("/benchmark/cases", false),
                pointer: "/benchmark/cases".into(),
                message: format!("case file {} does not exist", abs.display()),
            });
        }
        b.cases = Some(abs);
    }
    config.storage.bundle_root = resolve(base, &config.storage.bundle_root);
    config.storage.index = config.storage.index.as_ref().map(|p| resolve(base, p));
    if let Some(f) = &config.backend.secrets_file {
        let abs = resolve(base, f);
        if !abs.is_file() {
            problems.push(Problem {
                origin: pos.find("/backend/secrets_file", false),
                pointer: "/backend/secrets_file".into(),
                message: format!("secrets file {} does not exist", abs.display()),
            });
        }
        config.backend.secrets_file = Some(abs);
    }
    config.agent.workdir = Some(config.agent.workdir.as_ref().map_or_else(|| base.to_path_buf(), |w| resolve(base, w)));
    if !problems.is_empty() {
        return Err(fail(problems));
    }
    let resolved = serde_json::to_value(&config).expect("config serializes");
    Ok(LoadedConfig { config, path: base.join(file), resolved })
}

/// Loads and validates a configuration file, applying `--set` overrides.
pub fn load_config(path: &Path, overrides: &[String]) -> Result<LoadedConfig, ConfigError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: display.clone(),
        problems: vec![Problem {
            origin: Origin::Unknown,
            pointer: String::new(),
            message: format!("cannot read: {e}"),
        }],
    })?;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let base = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut loaded = load_config_str(&text, &display, &base, overrides)?;
    loaded.path = abs;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, sets: &[&str]) -> Result<LoadedConfig, ConfigError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load_config_str(text, "c.yaml", Path::new("/base"), &sets)
    }

    const GOOD: &str = "name: t\nbenchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\n";

    #[test]
    fn a_minimal_config_loads_with_defaults_and_resolved_paths() {
        let c = load(GOOD, &[]).unwrap().config;
        assert_eq!(c.backend.tasks_per_job, 1);
        assert_eq!(c.backend.max_attempts, 3);
        assert_eq!(c.repetitions, 1);
        assert_eq!(c.storage.bundle_root, PathBuf::from("/base/runs"));
        assert_eq!(c.storage.index_path(), PathBuf::from("/base/runs/index.sqlite"));
        assert_eq!(c.agent.workdir, Some(PathBuf::from("/base")));
        let c = load(GOOD, &["storage.bundle_root=../runs"]).unwrap().config;
        assert_eq!(c.storage.bundle_root, PathBuf::from("/runs"));
    }

    #[test]
    fn every_problem_is_reported_with_its_position() {
        let text = "name: t\nbenchmark:\n  kind: toy\n  sise: 5\nagent:\n  kind: robot\nbackend:\n  max_attempts: -1\ncolour: blue\n";
        let err = load(text, &[]).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("c.yaml:4:3: unknown field `sise`"), "{shown}");
        assert!(shown.contains("c.yaml:6:9:"), "{shown}");
        assert!(shown.contains("c.yaml:8:17:"), "{shown}");
        assert!(shown.contains("c.yaml:9:1: unknown field `colour`"), "{shown}");
        assert_eq!(err.problems.len(), 4, "{shown}");
    }

    #[test]
    fn semantic_problems_point_at_the_field() {
        let text = "name: t\nbenchmark:\n  kind: toy\nagent:\n  kind: command\nevaluators:\n  - kind: regex\n    pattern: '(('\n";
        let err = load(text, &[]).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("c.yaml:3:9: benchmark `toy` requires `size`"), "{shown}");
        assert!(shown.contains("c.yaml:5:9: agent `command` requires `command`"), "{shown}");
        assert!(shown.contains("c.yaml:8:14: invalid regex"), "{shown}");
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        let err = load("name: [unclosed\n", &[]).unwrap_err();
        assert_eq!(err.problems.len(), 1);
        assert!(matches!(err.problems[0].origin, Origin::File { line: 2, .. }), "{err}");
    }

    #[test]
    fn overrides_set_typed_values_and_are_validated() {
        let c = load(GOOD, &["benchmark.size=10000", "backend.tasks_per_job=100"]).unwrap().config;
        assert_eq!(c.benchmark.size, Some(10000));
        assert_eq!(c.backend.tasks_per_job, 100);
        let err = load(GOOD, &["backend.tasks_per_job=many", "bogus.x=1", "novalue"]).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("--set backend.tasks_per_job=many:"), "{shown}");
        assert!(shown.contains("--set bogus.x=1: unknown field `bogus`"), "{shown}");
        assert!(shown.contains("--set novalue: expected `key.path=value`"), "{shown}");
    }

    #[test]
    fn pointers_read_like_set_paths() {
        assert_eq!(pointer_to_path("/evaluators/2/pattern"), "evaluators[2].pattern");
    }
}
