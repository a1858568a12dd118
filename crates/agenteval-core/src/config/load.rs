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

use super::{AgentConfig, BenchmarkConfig, BundleRoot, EvaluatorConfig, IndexLocation, RunConfig};

/// Where a problem comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// 1-based line and column in the file.
    File { line: usize, column: usize },
    /// A `--set` override on the command line.
    Override(String),
    /// A setting a deployment supplied for a field the file left out (`aws.cluster=… from the
    /// stack profile NAME`): the setting, and where it came from.
    Deployed { set: String, from: String },
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
                Origin::Deployed { set, from } => writeln!(f, "  {set} (from {from}): {}{}", p.message, field)?,
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
    /// The overrides the command line's `--agent` and `--model` made (`agent.preset=codex`,
    /// `agent.model=gpt-5`): recorded in the run's metadata, so that a replay with another
    /// config file runs the same agent and model.
    pub agent_flags: Vec<String>,
}

impl LoadedConfig {
    /// The configuration after overrides, as JSON, with paths resolved: what a run keeps as
    /// `config.resolved.json` and hashes. Made from `config` each time it is asked for, so that
    /// a change to `config` can never be missing from it.
    pub fn resolved(&self) -> Value {
        serde_json::to_value(&self.config).expect("configs serialize")
    }
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

/// Gives the long form of each shorthand evaluator the positions of what the user wrote: its
/// `kind` is the shorthand key, its fields are the shorthand value (or the value's fields).
fn shorthand_positions(before: &Value, after: &Value, pos: &mut Positions) {
    let (Some(before), Some(after)) = (before.as_array(), after.as_array()) else { return };
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if b == a {
            continue;
        }
        let (Some(b), Some(a)) = (b.as_object(), a.as_object()) else { continue };
        let Some((key, value)) = b.iter().next() else { continue };
        let item = format!("/evaluators/{i}");
        let old = format!("{item}/{}", escape(key));
        if let Some(o) = pos.keys.get(&old).cloned() {
            pos.values.insert(format!("{item}/kind"), o.clone());
            pos.keys.insert(format!("{item}/kind"), o);
        }
        if value.is_object() {
            let moved: Vec<(String, Origin, bool)> = pos
                .values
                .iter()
                .map(|(p, o)| (p.clone(), o.clone(), false))
                .chain(pos.keys.iter().map(|(p, o)| (p.clone(), o.clone(), true)))
                .filter_map(|(p, o, is_key)| {
                    p.strip_prefix(&format!("{old}/")).map(|rest| (format!("{item}/{rest}"), o, is_key))
                })
                .collect();
            for (p, o, is_key) in moved {
                if is_key {
                    pos.keys.insert(p, o)
                } else {
                    pos.values.insert(p, o)
                };
            }
        } else if let Some(o) = pos.values.get(&old).cloned() {
            for field in a.keys().filter(|f| f.as_str() != "kind") {
                pos.values.insert(format!("{item}/{}", escape(field)), o.clone());
            }
        }
    }
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

    /// The position of the key of the member at a JSON pointer (for "unknown key" problems).
    pub fn key_origin(&self, pointer: &str) -> Origin {
        self.positions.find(pointer, true)
    }
}

/// Applies `key.path=value` overrides. Values are YAML scalars or flow collections.
fn apply_overrides(root: &mut Value, overrides: &[String], pos: &mut Positions, problems: &mut Vec<Problem>) {
    apply_settings(root, overrides, &|set| Origin::Override(set.to_string()), false, pos, problems)
}

/// Applies `key.path=value` settings, each said to come from `origin`; with `only_missing`, a
/// setting whose field already has a value (from the file or `--set`) is left out.
fn apply_settings(
    root: &mut Value,
    overrides: &[String],
    origin: &dyn Fn(&str) -> Origin,
    only_missing: bool,
    pos: &mut Positions,
    problems: &mut Vec<Problem>,
) {
    for set in overrides {
        let bad = |message: String| Problem { origin: origin(set), pointer: String::new(), message };
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
        if only_missing && segments.iter().try_fold(&*root, |v, seg| v.get(seg).filter(|v| !v.is_null())).is_some() {
            continue;
        }
        match slot(root, &segments, path) {
            Ok((target, ptr)) => {
                *target = value;
                // What the file had under this value is gone: its positions must not answer
                // for what the override put there.
                let under = format!("{ptr}/");
                pos.values.retain(|k, _| !k.starts_with(&under));
                pos.keys.retain(|k, _| !k.starts_with(&under));
                // Fields the override created point at the override, so an unknown `bogus`
                // in `--set bogus.x=1` is reported against the flag, not the file.
                let mut prefix = String::new();
                for seg in ptr.split('/').skip(1) {
                    prefix.push('/');
                    prefix.push_str(seg);
                    pos.keys.entry(prefix.clone()).or_insert_with(|| origin(set));
                }
                pos.values.insert(ptr.clone(), origin(set));
                pos.keys.insert(ptr, origin(set));
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
    schema_problems_of(&RunConfig::json_schema(), value, pos)
}

/// Reads a file that holds one evaluator (`compare --pairwise FILE`): the YAML, `fill`'s fields
/// where the file has none (its `kind`, say), the evaluator's schema and its checks, every
/// problem with its line and column, at once.
pub fn load_evaluator_str(
    text: &str,
    file: &str,
    fill: &[(&str, Value)],
) -> Result<super::EvaluatorConfig, ConfigError> {
    let fail = |problems: Vec<Problem>| ConfigError { file: file.to_string(), problems };
    let mut pos = Positions::default();
    let mut value = parse_yaml(text, &mut pos).map_err(fail)?;
    let Some(map) = value.as_object_mut() else {
        return Err(fail(vec![Problem {
            origin: pos.find("", false),
            pointer: String::new(),
            message: "an evaluator is a mapping of its fields".into(),
        }]));
    };
    for (k, v) in fill {
        map.entry(k.to_string()).or_insert_with(|| v.clone());
    }
    let schema = serde_json::to_value(schemars::schema_for!(super::EvaluatorConfig)).expect("schema serializes");
    let problems = schema_problems_of(&schema, &value, &pos);
    if !problems.is_empty() {
        return Err(fail(in_file_order(problems)));
    }
    let cfg: super::EvaluatorConfig = serde_json::from_value(value)
        .map_err(|e| fail(vec![Problem { origin: Origin::Unknown, pointer: String::new(), message: e.to_string() }]))?;
    let mut checks = Vec::new();
    cfg.validate("", &mut checks);
    if !checks.is_empty() {
        let problems = checks
            .into_iter()
            .map(|(pointer, message)| Problem { origin: pos.find(&pointer, false), pointer, message })
            .collect();
        return Err(fail(in_file_order(problems)));
    }
    Ok(cfg)
}

fn schema_problems_of(schema: &Value, value: &Value, pos: &Positions) -> Vec<Problem> {
    let schema = schema.clone();
    let validator = match jsonschema::options()
        .should_validate_formats(true)
        .with_format("rust-regex", |s: &str| regex::Regex::new(s).is_ok())
        .with_format("bundle-root", |s: &str| s.parse::<BundleRoot>().is_ok())
        .with_format("index-location", |s: &str| s.parse::<IndexLocation>().is_ok())
        .build(&schema)
    {
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
        explain(&err, &schema, value, pos, &mut out);
    }
    // A problem shared by every kind's schema is reported once.
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert((p.pointer.clone(), p.message.clone())));
    out
}

type SchemaError<'a> = jsonschema::ValidationError<'a>;

/// The section a pointer is in, for messages: `/benchmark` → `benchmark`, `/evaluators/2` →
/// `evaluator`.
fn section(ptr: &str) -> String {
    let seg = ptr.rsplit('/').find(|s| !s.is_empty() && !s.chars().all(|c| c.is_ascii_digit())).unwrap_or("config");
    seg.strip_suffix('s').unwrap_or(seg).to_string()
}

/// Whether an error inside one branch of a `kind`-tagged `oneOf` says "this is not my kind":
/// the tag differs, is missing, or the value is not even an object.
fn rules_out_branch(e: &SchemaError<'_>, ptr: &str, value: &Value) -> bool {
    use jsonschema::error::ValidationErrorKind as K;
    let at = e.instance_path().as_str();
    // A map where a branch wants one of some words (`sandbox: none` or its paths): that branch
    // is not the one meant, so the other's problems are the ones to say.
    let a_map_for_a_word = at == ptr && value.pointer(ptr).is_some_and(Value::is_object);
    match e.kind() {
        K::Constant { .. } | K::Enum { .. } => at == format!("{ptr}/kind") || a_map_for_a_word,
        // A choice here (a `oneOf` of words) none of whose branches can be meant.
        K::OneOfNotValid { context } | K::AnyOf { context } if at == ptr => {
            context.iter().all(|branch| branch.iter().any(|e| rules_out_branch(e, ptr, value)))
        }
        K::Required { property } => at == ptr && property.as_str() == Some("kind"),
        K::Type { .. } => at == ptr,
        _ => false,
    }
}

/// The fields the schema allows where an `additionalProperties` error found one it does not:
/// the `properties` beside the keyword (its path is canonical, `$ref`s already resolved).
fn known_fields(schema: &Value, err: &SchemaError<'_>) -> Vec<String> {
    let path = err.schema_path().as_str();
    let parent = path.strip_suffix("/additionalProperties").unwrap_or(path);
    schema
        .pointer(parent)
        .and_then(|n| n.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Where a key that is not known here belongs, when it is known elsewhere: a model endpoint's
/// setting on an agent whose calls go through the gateway belongs to its `upstream`; the model
/// of such an agent is `agent.model`, not its endpoint's.
fn misplaced(ptr: &str, kind: Option<&str>, key: &str) -> Option<String> {
    const ENDPOINT: &[&str] = &["base_url", "allow_insecure_http", "price", "request_timeout_seconds", "max_attempts"];
    match (ptr, kind) {
        ("/agent", Some("installed" | "command")) if ENDPOINT.contains(&key) => Some(format!(
            " (a model endpoint's setting: it goes under `agent.upstream.openai.{key}` or `agent.upstream.anthropic.{key}`, docs/agents.md)"
        )),
        ("/agent/upstream/openai" | "/agent/upstream/anthropic", _) if key == "model" => {
            Some(" (the model is `agent.model`; `agent.upstream.models` lists others a call may name)".into())
        }
        _ => None,
    }
}

/// Turns one schema error into problems users can act on. Configs with a `kind` (benchmark,
/// agent, evaluators) are `oneOf` their kinds' schemas; the validator's "not valid under any
/// of the schemas" is replaced by the problems of the kind the user chose, or by an unknown
/// kind with the known ones listed.
// Long: one arm per kind of schema error, each saying its problem in the user's words.
fn explain(err: &SchemaError<'_>, schema: &Value, value: &Value, pos: &Positions, out: &mut Vec<Problem>) {
    use jsonschema::error::ValidationErrorKind as K;
    let ptr = err.instance_path().as_str().to_string();
    match err.kind() {
        K::AdditionalProperties { unexpected } => {
            let kind = value.pointer(&ptr).and_then(|v| v.get("kind")).and_then(Value::as_str);
            let known = known_fields(schema, err);
            for u in unexpected {
                let child = format!("{ptr}/{}", escape(u));
                let hint = misplaced(&ptr, kind, u)
                    .or_else(|| {
                        did_you_mean(u, known.iter().map(String::as_str)).map(|k| format!(" (did you mean `{k}`?)"))
                    })
                    .unwrap_or_default();
                let message = match kind {
                    Some(k) => format!("unknown field `{u}` for {} kind `{k}`{hint}", section(&ptr)),
                    None => format!("unknown field `{u}`{hint}"),
                };
                out.push(Problem { origin: pos.find(&child, true), pointer: child, message });
            }
        }
        K::Required { property } => {
            let field = property.as_str().map(str::to_string).unwrap_or_else(|| property.to_string());
            let kind = value.pointer(&ptr).and_then(|v| v.get("kind")).and_then(Value::as_str);
            let (at, message) = match kind {
                Some(k) => (format!("{ptr}/kind"), format!("{} `{k}` requires `{field}`", section(&ptr))),
                None => (ptr.clone(), format!("`{field}` is required")),
            };
            out.push(Problem { origin: pos.find(&at, false), pointer: at, message });
        }
        K::OneOfNotValid { context } | K::AnyOf { context } => {
            // A choice of documented constants (`backend.id`, `aws.capacity`): name them.
            let options: Option<Vec<String>> = context
                .iter()
                .map(|branch| match branch.as_slice() {
                    [e] if e.instance_path().as_str() == ptr => match e.kind() {
                        K::Constant { expected_value } => expected_value.as_str().map(str::to_string),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            if let Some(options) = options.filter(|o| !o.is_empty()) {
                let found = value.pointer(&ptr).and_then(Value::as_str).unwrap_or_default();
                let message = format!("`{found}` is not one of: {}", options.join(", "));
                out.push(Problem { origin: pos.find(&ptr, false), pointer: ptr, message });
                return;
            }
            let fitting: Vec<_> =
                context.iter().filter(|branch| !branch.iter().any(|e| rules_out_branch(e, &ptr, value))).collect();
            if let [only] = fitting.as_slice() {
                for e in only.iter() {
                    explain(e, schema, value, pos, out);
                }
                return;
            }
            let kinds: Vec<String> = context
                .iter()
                .flat_map(|b| b.iter())
                .filter_map(|e| match e.kind() {
                    K::Constant { expected_value } if e.instance_path().as_str() == format!("{ptr}/kind") => {
                        expected_value.as_str().map(str::to_string)
                    }
                    _ => None,
                })
                .collect();
            if kinds.is_empty() || !value.pointer(&ptr).is_some_and(Value::is_object) {
                out.push(Problem { origin: pos.find(&ptr, false), pointer: ptr, message: err.to_string() });
                return;
            }
            let at = format!("{ptr}/kind");
            let message = match value.pointer(&at) {
                Some(Value::String(k)) => match did_you_mean(k, kinds.iter().map(String::as_str)) {
                    Some(near) => format!(
                        "unknown {} kind `{k}` (expected {}; did you mean `{near}`?)",
                        section(&ptr),
                        kinds.join(", ")
                    ),
                    None => format!("unknown {} kind `{k}` (expected one of: {})", section(&ptr), kinds.join(", ")),
                },
                Some(other) => format!("`kind` must be one of: {} (found {other})", kinds.join(", ")),
                None => format!("`kind` is required (one of: {})", kinds.join(", ")),
            };
            out.push(Problem { origin: pos.find(&at, false), pointer: at.clone(), message });
            // Problems every kind agrees on (a typo inside `limits`) are worth reporting now.
            let mut common: Vec<Problem> = Vec::new();
            for (i, branch) in context.iter().enumerate() {
                let mut found = Vec::new();
                for e in branch.iter().filter(|e| !rules_out_branch(e, &ptr, value)) {
                    if matches!(e.kind(), K::AdditionalProperties { .. }) && e.instance_path().as_str() == ptr {
                        continue;
                    }
                    explain(e, schema, value, pos, &mut found);
                }
                if i == 0 {
                    common = found;
                } else {
                    common.retain(|p| found.contains(p));
                }
            }
            out.extend(common);
        }
        K::Format { format } => {
            let text = value.pointer(&ptr).and_then(Value::as_str).unwrap_or_default();
            let message = match format.as_str() {
                // The regex crate draws the pattern with a caret under the fault; its last line
                // says what the fault is.
                "rust-regex" => regex::Regex::new(text).err().map(|e| {
                    let e = e.to_string();
                    let why = e.lines().last().unwrap_or_default().trim_start_matches("error: ");
                    format!("invalid regex: {why}")
                }),
                "bundle-root" => text.parse::<BundleRoot>().err().map(|e| e.to_string()),
                "index-location" => text.parse::<IndexLocation>().err().map(|e| e.to_string()),
                _ => None,
            };
            let message = message.unwrap_or_else(|| err.to_string());
            out.push(Problem { origin: pos.find(&ptr, false), pointer: ptr, message });
        }
        _ => out.push(Problem { origin: pos.find(&ptr, false), pointer: ptr, message: err.to_string() }),
    }
}

/// Problems sorted as they appear in the file; `--set` problems and unplaced ones follow.
fn in_file_order(mut problems: Vec<Problem>) -> Vec<Problem> {
    problems.sort_by_key(|p| match p.origin {
        Origin::File { line, column } => (0, line, column),
        Origin::Override(_) => (1, 0, 0),
        Origin::Deployed { .. } => (2, 0, 0),
        Origin::Unknown => (3, 0, 0),
    });
    problems
}

fn resolve(base: &Path, p: &Path) -> PathBuf {
    normalize(&base.join(p))
}

/// `serde_path_to_error`'s path (`storage.bundle_root`, `evaluators[1].pattern`) as a JSON
/// pointer.
fn path_to_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } | Segment::Enum { variant: key } => out.push_str(&format!("/{}", escape(key))),
            Segment::Unknown => {}
        }
    }
    out
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

/// The closest of `known` to `got`, when close enough to be the intended name (a typo).
pub fn did_you_mean<'a>(got: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    known.into_iter().map(|k| (distance(got, k), k)).filter(|(d, k)| *d <= 2.max(k.len() / 3)).min().map(|(_, k)| k)
}

/// Loads and validates configuration text. `file` names it in messages; `base` is the folder
/// relative paths resolve against.
pub fn load_config_str(text: &str, file: &str, base: &Path, overrides: &[String]) -> Result<LoadedConfig, ConfigError> {
    load_config_str_checked(text, file, base, overrides, &|_| Vec::new())
}

/// Checks and completions a crate outside the core adds once paths are resolved (the LLM
/// crate's prices and model specs, the HumanEval file found through Python): `(json pointer,
/// message)` pairs, reported with their positions.
pub type ExtraChecks<'a> = &'a dyn Fn(&mut RunConfig) -> Vec<(String, String)>;

/// Why `path` cannot be read as a file: missing, or something else than a regular file (a
/// folder, a FIFO, a device), said as what it is.
fn not_a_file(what: &str, path: &std::path::Path) -> String {
    use std::os::unix::fs::FileTypeExt as _;
    let shown = path.display();
    match std::fs::metadata(path).map(|m| m.file_type()) {
        Err(_) => format!("{what} {shown} does not exist"),
        Ok(t) if what == super::TASK_FOLDER && !t.is_dir() => format!("{what} {shown} is a file, not a folder"),
        Ok(t) if t.is_dir() => format!("{what} {shown} is a folder, not a file"),
        Ok(t) if t.is_fifo() => format!("{what} {shown} is a FIFO, not a regular file"),
        Ok(t) if t.is_char_device() || t.is_block_device() => format!("{what} {shown} is a device, not a regular file"),
        Ok(_) => format!("{what} {shown} is not a regular file"),
    }
}

/// [`load_config_str`] with extra checks. The passes, each reporting every problem it finds:
/// parse (YAML with positions, `--set`, shorthands, the schema), typed (serde, with what the
/// schema refused taken out), validate (the config's own rules), resolve (paths against the
/// config's folder, the files it names read in), then the `extra` checks of other crates.
pub fn load_config_str_checked(
    text: &str,
    file: &str,
    base: &Path,
    overrides: &[String],
    extra: ExtraChecks<'_>,
) -> Result<LoadedConfig, ConfigError> {
    load_config_str_layered(text, file, base, &|_| None, overrides, extra)
}

/// Settings a deployment supplies for the fields a config leaves out, asked once the file and
/// its `--set` overrides are read (so that it can look at `backend.id`): where they come from,
/// and `key.path=value` settings as `--set` takes them.
pub type DeployedFn<'a> = &'a dyn Fn(&Value) -> Option<(String, Vec<String>)>;

/// [`load_config_str_checked`] with a deployment's settings under the file's: what the file or
/// `--set` gives a field wins; a field neither gives takes the deployment's.
pub fn load_config_str_layered(
    text: &str,
    file: &str,
    base: &Path,
    deployed: DeployedFn<'_>,
    overrides: &[String],
    extra: ExtraChecks<'_>,
) -> Result<LoadedConfig, ConfigError> {
    let fail = |problems: Vec<Problem>| ConfigError { file: file.to_string(), problems };
    let (value, pos, mut problems) = parse_pass(text, deployed, overrides).map_err(fail)?;
    // Every problem at once: when the schema found some, the rest of the checks still run, on
    // the config with the offending values taken out (and a section that cannot be read at all
    // stood in for), and report what they find outside what was already reported.
    let reported = problems.len();
    let (mut config, skip) = typed_pass(value, &problems, &pos).map_err(fail)?;
    let at = |(pointer, message): (String, String)| Problem { origin: pos.find(&pointer, false), pointer, message };
    problems.extend(config.validate().into_iter().map(at));
    problems.extend(resolve_pass(&mut config, base, &pos));
    problems.extend(extra(&mut config).into_iter().map(at));
    problems.extend(read_evaluator_files(&mut config, base, &pos));
    let mut problems: Vec<Problem> = problems
        .into_iter()
        .enumerate()
        .filter(|(i, p)| {
            *i < reported || !skip.iter().any(|x| p.pointer == *x || p.pointer.starts_with(&format!("{x}/")))
        })
        .map(|(_, p)| p)
        .collect();
    if !problems.is_empty() {
        problems.dedup_by(|a, b| a.pointer == b.pointer && a.message == b.message);
        return Err(fail(in_file_order(problems)));
    }
    Ok(LoadedConfig { config, path: base.join(file), agent_flags: vec![] })
}

/// YAML to JSON with a pointer→position map, the `--set` overrides, evaluator shorthands, and
/// the schema's problems. `Err`: the text cannot be read as a config at all.
fn parse_pass(
    text: &str,
    deployed: DeployedFn<'_>,
    overrides: &[String],
) -> Result<(Value, Positions, Vec<Problem>), Vec<Problem>> {
    let mut pos = Positions::default();
    let mut value = parse_yaml(text, &mut pos)?;
    if value.is_null() {
        value = Value::Object(Map::new());
    }
    let mut problems = Vec::new();
    apply_overrides(&mut value, overrides, &mut pos, &mut problems);
    if value.is_object()
        && let Some((from, settings)) = deployed(&value)
    {
        let origin = |set: &str| Origin::Deployed { set: set.to_string(), from: from.clone() };
        apply_settings(&mut value, &settings, &origin, true, &mut pos, &mut problems);
    }
    if !value.is_object() {
        problems.push(Problem {
            origin: pos.find("", false),
            pointer: String::new(),
            message: "a run config must be a mapping of fields".into(),
        });
        return Err(problems);
    }
    if let Some(list) = value.get_mut("evaluators") {
        let before = list.clone();
        super::evaluator::expand_shorthand(list);
        shorthand_positions(&before, list, &mut pos);
    }
    problems.extend(schema_problems(&value, &pos));
    Ok((value, pos, problems))
}

/// The typed config, and the pointers whose values were taken out because the schema refused
/// them (`problems`, so later passes do not report them again).
fn typed_pass(value: Value, problems: &[Problem], pos: &Positions) -> Result<(RunConfig, Vec<String>), Vec<Problem>> {
    if problems.is_empty() {
        // The schema accepts every shape serde does; what is left here are values that parse
        // further (locations), reported at their position.
        let config = serde_path_to_error::deserialize(value).map_err(|e| {
            let ptr = path_to_pointer(e.path());
            vec![Problem { origin: pos.find(&ptr, false), pointer: ptr, message: e.inner().to_string() }]
        })?;
        return Ok((config, Vec::new()));
    }
    repaired(value, problems).ok_or_else(|| in_file_order(problems.to_vec()))
}

/// Paths against the config's folder (not wherever the user happens to stand), and the files
/// the config names checked or read in.
fn resolve_pass(config: &mut RunConfig, base: &Path, pos: &Positions) -> Vec<Problem> {
    let mut problems = Vec::new();
    // A HumanEval file not given is found by the benchmark (an `extra` check): it asks Python.
    for (field, what, path) in config.benchmark.data_files_mut() {
        *path = resolve(base, path);
        let there = if what == super::TASK_FOLDER { path.is_dir() } else { path.is_file() };
        if !there {
            let pointer = format!("/benchmark/{field}");
            problems.push(Problem { origin: pos.find(&pointer, false), pointer, message: not_a_file(what, path) });
        }
    }
    if let BundleRoot::Local(root) = &mut config.storage.bundle_root {
        *root = resolve(base, root);
    }
    if let Some(IndexLocation::Sqlite(index)) = &mut config.storage.index {
        *index = resolve(base, index);
    }
    if let Some(f) = &config.backend.secrets_file {
        let abs = resolve(base, f);
        if !abs.is_file() {
            problems.push(Problem {
                origin: pos.find("/backend/secrets_file", false),
                pointer: "/backend/secrets_file".into(),
                message: not_a_file("secrets file", &abs),
            });
        }
        config.backend.secrets_file = Some(abs);
    }
    config.benchmark.resolve_files(base);
    problems.extend(config.agent.resolve_files(base, pos));
    problems
}

impl BenchmarkConfig {
    /// Paths beside the config made absolute, by kind (its data files are resolved with the
    /// others, `data_files_mut`): a command's folder, a Harbor registry given as a file (a URL
    /// stays as it is).
    fn resolve_files(&mut self, base: &Path) {
        match self {
            BenchmarkConfig::Command { workdir, .. } => *workdir = Some(base.to_path_buf()),
            BenchmarkConfig::Harbor { registry: Some(r), .. } if !r.contains("://") => {
                *r = resolve(base, Path::new(r.as_str())).to_string_lossy().into_owned();
            }
            BenchmarkConfig::Harbor { .. }
            | BenchmarkConfig::Toy { .. }
            | BenchmarkConfig::Jsonl { .. }
            | BenchmarkConfig::Humaneval { .. }
            | BenchmarkConfig::Swebench { .. }
            | BenchmarkConfig::Tau2 { .. } => {}
        }
    }
}

impl AgentConfig {
    /// Paths beside the config made absolute and checked, by kind: a command's folder, a
    /// predictions file, a setup script and its files, a prices file (read in: prices travel
    /// inside the resolved config, like schemas, since workers elsewhere cannot read the file).
    fn resolve_files(&mut self, base: &Path, pos: &Positions) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut must_be = |path: &Path, pointer: &str, what: &str, folder: bool| {
            let ok = if folder { path.is_dir() } else { path.is_file() };
            if !ok {
                let message =
                    if folder { format!("{what} {} is not a folder", path.display()) } else { not_a_file(what, path) };
                problems.push(Problem { origin: pos.find(pointer, false), pointer: pointer.into(), message });
            }
        };
        match self {
            AgentConfig::Command { workdir, .. } => {
                *workdir = Some(workdir.as_ref().map_or_else(|| base.to_path_buf(), |w| resolve(base, w)));
            }
            AgentConfig::Predictions { path, .. } => {
                *path = resolve(base, path);
                must_be(path, "/agent/path", "predictions file", false);
            }
            AgentConfig::Installed { setup, setup_files, .. } => {
                if let Some(setup) = setup {
                    *setup = resolve(base, setup);
                    must_be(setup, "/agent/setup", "setup script", false);
                }
                if let Some(files) = setup_files {
                    *files = resolve(base, files);
                    must_be(files, "/agent/setup_files", "setup_files", true);
                }
            }
            AgentConfig::Llm(a) => {
                if let Some(problem) = read_prices(a, base, pos) {
                    problems.push(problem);
                }
            }
            // A strategy named by its file: read in, as the workers cannot read it.
            AgentConfig::Exploit { strategy, script, .. } if strategy.ends_with(".sh") && script.is_none() => {
                let path = resolve(base, Path::new(strategy.as_str()));
                match std::fs::read_to_string(&path) {
                    Ok(text) => *script = Some(text),
                    Err(e) => problems.push(Problem {
                        origin: pos.find("/agent/strategy", false),
                        pointer: "/agent/strategy".into(),
                        message: format!("cannot read exploit script {}: {e}", path.display()),
                    }),
                }
            }
            AgentConfig::Mock { .. }
            | AgentConfig::Oracle { .. }
            | AgentConfig::Nop { .. }
            | AgentConfig::Exploit { .. } => {}
        }
        problems
    }
}

/// An `llm` agent's `prices_file`, read into its `prices`.
fn read_prices(a: &mut super::LlmAgentConfig, base: &Path, pos: &Positions) -> Option<Problem> {
    let f = a.prices_file.as_ref()?;
    let path = resolve(base, f);
    let read = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read prices file {}: {e}", path.display()))
        .and_then(|t| {
            #[derive(serde::Deserialize)]
            struct PricesFile {
                models: std::collections::BTreeMap<String, super::ModelPrice>,
            }
            serde_json::from_str::<PricesFile>(&t)
                .map_err(|e| format!("prices file {} is not a prices table: {e}", path.display()))
        });
    match read {
        Ok(p) => {
            a.prices = p.models;
            a.prices_file = Some(path);
            None
        }
        Err(message) => Some(Problem {
            origin: pos.find("/agent/prices_file", false),
            pointer: "/agent/prices_file".into(),
            message,
        }),
    }
}

/// What evaluators name beside the config: a command's folder, a schema file and a judge's
/// prompt file (read in, so they travel inside the resolved config).
fn read_evaluator_files(config: &mut RunConfig, base: &Path, pos: &Positions) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, e) in config.evaluators.iter_mut().enumerate() {
        let kind = e.kind();
        match e {
            EvaluatorConfig::Command { workdir, .. } => *workdir = Some(base.to_path_buf()),
            EvaluatorConfig::Tests { tests: Some(dir), .. } => {
                let path = resolve(base, dir);
                if path.is_dir() {
                    *dir = path.canonicalize().unwrap_or(path);
                } else {
                    let at = format!("/evaluators/{i}/tests");
                    let message = format!("{} is not a folder of tests", path.display());
                    problems.push(Problem { origin: pos.find(&at, false), pointer: at, message });
                }
            }
            // A judge's prompt template travels inside the resolved config, as a schema does.
            EvaluatorConfig::LlmRubric { judge, .. }
            | EvaluatorConfig::LlmPassFail { judge, .. }
            | EvaluatorConfig::LlmPairwise { judge, .. }
                if judge.prompt_file.is_some() && judge.prompt.is_none() =>
            {
                let at = format!("/evaluators/{i}/prompt_file");
                let path = resolve(base, judge.prompt_file.as_ref().expect("matched"));
                let read = match std::fs::metadata(&path) {
                    Ok(m) if m.len() > 64 * 1024 => Err(format!("prompt file {} is over 64 KiB", path.display())),
                    _ => std::fs::read_to_string(&path)
                        .map_err(|err| format!("cannot read prompt file {}: {err}", path.display())),
                };
                match read.and_then(|t| {
                    super::llm::check_template(kind, &t).map(|_| t).map_err(|e| format!("{}: {e}", path.display()))
                }) {
                    Ok(t) => {
                        judge.prompt = Some(t);
                        judge.prompt_file = Some(path);
                    }
                    Err(message) => problems.push(Problem { origin: pos.find(&at, false), pointer: at, message }),
                }
            }
            // The schema travels inside the resolved config: a worker on another machine has no
            // config folder to read it from.
            EvaluatorConfig::JsonSchema { schema, schema_file: Some(f), .. } if schema.is_none() => {
                let at = format!("/evaluators/{i}/schema_file");
                let path = resolve(base, f);
                let parsed = std::fs::read_to_string(&path)
                    .map_err(|err| format!("cannot read schema file {}: {err}", path.display()))
                    .and_then(|t| {
                        serde_json::from_str::<Value>(&t)
                            .map_err(|err| format!("schema file {} is not JSON: {err}", path.display()))
                    })
                    .and_then(|v| match jsonschema::draft202012::new(&v) {
                        Ok(_) => Ok(v),
                        Err(err) => Err(format!("schema file {} is not a valid JSON Schema: {err}", path.display())),
                    });
                match parsed {
                    Ok(v) => {
                        *schema = Some(v);
                        *f = path;
                    }
                    Err(message) => problems.push(Problem { origin: pos.find(&at, false), pointer: at, message }),
                }
            }
            // Every kind is named: a new one is a compile error here until it says which files
            // it names beside the config.
            EvaluatorConfig::Tests { tests: None, .. }
            | EvaluatorConfig::JsonSchema { .. }
            | EvaluatorConfig::ExactMatch { .. }
            | EvaluatorConfig::Contains { .. }
            | EvaluatorConfig::Regex { .. }
            | EvaluatorConfig::NoError { .. }
            | EvaluatorConfig::MaxSteps { .. }
            | EvaluatorConfig::TraceQuality { .. }
            | EvaluatorConfig::ToolSequence { .. }
            | EvaluatorConfig::ToolCalls { .. }
            | EvaluatorConfig::Similarity { .. }
            | EvaluatorConfig::Numeric { .. }
            | EvaluatorConfig::JsonEqual { .. }
            | EvaluatorConfig::CostBudget { .. }
            | EvaluatorConfig::LatencyBudget { .. }
            | EvaluatorConfig::Policy { .. }
            | EvaluatorConfig::LlmRubric { .. }
            | EvaluatorConfig::LlmPassFail { .. }
            | EvaluatorConfig::LlmPairwise { .. } => {}
        }
    }
    problems
}

/// The config with what the schema refused taken out, for the checks that run after the
/// schema: each refused value is removed (its default applies), and a section that still cannot
/// be read (an unknown kind) is stood in for by a harmless one. Returns the config and the
/// pointers whose problems are already reported (further problems under them are noise).
fn repaired(mut value: Value, refused: &[Problem]) -> Option<(RunConfig, Vec<String>)> {
    let mut skip: Vec<String> = refused.iter().map(|p| p.pointer.clone()).filter(|p| !p.is_empty()).collect();
    for p in &skip {
        if let Some((parent, key)) = p.rsplit_once('/')
            && let Some(obj) = value.pointer_mut(parent).and_then(Value::as_object_mut)
        {
            obj.remove(&key.replace("~1", "/").replace("~0", "~"));
        }
    }
    for _ in 0..32 {
        match serde_path_to_error::deserialize::<_, RunConfig>(value.clone()) {
            Ok(c) => return Some((c, skip)),
            Err(e) => {
                let ptr = path_to_pointer(e.path());
                let mut parts = ptr.split('/').skip(1);
                let section = match (parts.next(), parts.next()) {
                    (Some("evaluators"), Some(i)) if i.parse::<usize>().is_ok() => format!("/evaluators/{i}"),
                    (Some(first), _) if !first.is_empty() => format!("/{first}"),
                    _ => return None,
                };
                if skip.contains(&section) && !refused.iter().any(|p| p.pointer == section) {
                    return None;
                }
                let stand_in = match section.as_str() {
                    "/benchmark" => Some(serde_json::json!({"kind": "toy", "size": 1})),
                    "/agent" => Some(serde_json::json!({"kind": "mock"})),
                    "/name" => Some(Value::String("config".into())),
                    // Its own id: a stand-in must not collide with a real `no_error` (a false
                    // "duplicate evaluator id" caused by the first problem).
                    s if s.starts_with("/evaluators/") => {
                        Some(serde_json::json!({"kind": "no_error", "id": format!("(stand-in {s})")}))
                    }
                    _ => None,
                };
                let obj = value.as_object_mut()?;
                match stand_in {
                    Some(v) if section.starts_with("/evaluators/") => {
                        let i: usize = section.rsplit('/').next()?.parse().ok()?;
                        *obj.get_mut("evaluators")?.as_array_mut()?.get_mut(i)? = v;
                    }
                    Some(v) => {
                        obj.insert(section[1..].to_string(), v);
                    }
                    None => {
                        obj.remove(&section[1..]);
                    }
                }
                if !skip.contains(&section) {
                    skip.push(section);
                }
            }
        }
    }
    None
}

/// Reads a config file, refusing what cannot be one: a device, pipe or folder (`/dev/zero` would
/// be read forever) or a file past [`super::MAX_CONFIG_BYTES`].
fn read_config_file(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let limit = super::MAX_CONFIG_BYTES;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    // Read one byte past the limit: the size in `meta` may already be stale.
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("is larger than {} KiB; a config is a page of YAML, not a data set", limit / 1024));
    }
    String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())
}

/// Loads and validates a configuration file, applying `--set` overrides.
pub fn load_config(path: &Path, overrides: &[String]) -> Result<LoadedConfig, ConfigError> {
    load_config_checked(path, overrides, &|_| Vec::new())
}

/// [`load_config`] with extra checks.
pub fn load_config_checked(
    path: &Path,
    overrides: &[String],
    extra: ExtraChecks<'_>,
) -> Result<LoadedConfig, ConfigError> {
    load_config_layered(path, &|_| None, overrides, extra)
}

/// [`load_config_checked`] with a deployment's settings for the fields the file and `--set`
/// leave out ([`load_config_str_layered`]).
pub fn load_config_layered(
    path: &Path,
    deployed: DeployedFn<'_>,
    overrides: &[String],
    extra: ExtraChecks<'_>,
) -> Result<LoadedConfig, ConfigError> {
    let display = path.display().to_string();
    let text = read_config_file(path).map_err(|message| ConfigError {
        file: display.clone(),
        problems: vec![Problem { origin: Origin::Unknown, pointer: String::new(), message }],
    })?;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let base = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut loaded = load_config_str_layered(&text, &display, &base, deployed, overrides, extra)?;
    loaded.path = abs;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_that_is_not_a_regular_file_is_named_for_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("cases.jsonl");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(super::not_a_file("case file", &fifo).ends_with("is a FIFO, not a regular file"));
        assert!(super::not_a_file("case file", dir.path()).ends_with("is a folder, not a file"));
        assert!(super::not_a_file("case file", &dir.path().join("nope")).ends_with("does not exist"));
    }

    use super::*;

    fn load(text: &str, sets: &[&str]) -> Result<LoadedConfig, ConfigError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load_config_str(text, "c.yaml", Path::new("/base"), &sets)
    }

    const GOOD: &str = "name: t\nbenchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\n";

    #[test]
    fn a_word_or_a_map_names_what_is_wrong_inside_the_map() {
        // `sandbox` is `none` or a map of paths: a map's own problem is the one to say.
        let agent = |sandbox: &str| {
            let text = format!(
                "name: t\nbenchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: command\n  command: [x]\n  sandbox: {sandbox}\n"
            );
            load(&text, &[]).unwrap_err().to_string()
        };
        let e = agent("{netwrk: none}");
        assert!(e.contains("unknown field `netwrk` (did you mean `network`?)"), "{e}");
        let e = agent("{network: nne}");
        assert!(e.contains("`nne` is not one of: https, none, all (agent.sandbox.network)"), "{e}");
        assert!(agent("nne").contains("`nne` is not one of: none (agent.sandbox)"));
    }

    #[test]
    fn evaluator_shorthand_and_did_you_mean() {
        let text = format!(
            "{GOOD}evaluators:\n  - max_steps: 8\n  - regex: '^[0-9]+$'\n  - no_error: {{}}\n  - policy: {{deny_tools: [rm], on_violation: warn}}\n  - json_schema: {{schema: {{type: object}}, id: shape}}\n"
        );
        let c = load(&text, &[]).unwrap().config;
        let kinds: Vec<&str> = c.evaluators.iter().map(|e| e.kind()).collect();
        assert_eq!(kinds, ["max_steps", "regex", "no_error", "policy", "json_schema"]);
        assert!(matches!(c.evaluators[0], EvaluatorConfig::MaxSteps { max_steps: 8, .. }));
        assert_eq!(c.evaluators[4].id(), "shape");
        let e =
            load(&format!("{GOOD}evaluators:\n  - kind: exact_mach\n  - max_stesp: 3\n"), &[]).unwrap_err().to_string();
        assert!(e.contains("c.yaml:8:11: unknown evaluator kind `exact_mach` (expected exact_match, "), "{e}");
        assert!(e.contains("did you mean `exact_match`?)"), "{e}");
        assert!(e.contains("unknown evaluator kind `max_stesp` (expected exact_match,"), "{e}");
        assert!(e.contains("did you mean `max_steps`?)"), "{e}");
        let e = load(
            &format!("{GOOD}evaluators:\n  - json_schema: {{schema: {{type: 12}}}}\n  - kind: json_schema\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not a valid JSON Schema"), "{e}");
        assert!(e.contains("takes `schema` (inline) or `schema_file`"), "{e}");
    }

    #[test]
    fn a_schema_file_is_read_into_the_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.json"), r#"{"type": "array"}"#).unwrap();
        let text = format!(
            "{GOOD}evaluators:\n  - json_schema: s.json\n  - json_schema: {{schema_file: missing.json, id: b}}\n"
        );
        let e = load_config_str(&text, "c.yaml", dir.path(), &[]).unwrap_err().to_string();
        assert!(e.contains("c.yaml:9:32: cannot read schema file"), "{e}");
        let text = format!("{GOOD}evaluators:\n  - json_schema: s.json\n");
        let c = load_config_str(&text, "c.yaml", dir.path(), &[]).unwrap().config;
        assert!(
            matches!(&c.evaluators[0], EvaluatorConfig::JsonSchema { schema: Some(s), .. } if s["type"] == "array")
        );
    }

    #[test]
    fn a_minimal_config_loads_with_defaults_and_resolved_paths() {
        let c = load(GOOD, &[]).unwrap().config;
        assert_eq!(c.backend.tasks_per_job, 1);
        assert_eq!(c.backend.max_attempts, 3);
        assert_eq!(c.repetitions, crate::config::Repetitions::Fixed(1));
        assert_eq!(c.storage.bundle_root, BundleRoot::Local("/base/runs".into()));
        assert_eq!(c.storage.index_location(), IndexLocation::Sqlite("/base/runs/index.sqlite".into()));
        let c = load(GOOD, &["storage.bundle_root=../runs", "agent.kind=command", "agent.command=[a]"]).unwrap().config;
        assert_eq!(c.storage.bundle_root, BundleRoot::Local("/runs".into()));
        assert!(matches!(c.agent, AgentConfig::Command { workdir: Some(w), .. } if w == Path::new("/base")));
    }

    #[test]
    fn a_key_known_elsewhere_says_where_it_goes_and_no_endpoint_key_is_dropped_in_silence() {
        let text = "name: t\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: installed\n  preset: codex\n  base_url: http://127.0.0.1:1/v1\n  upstream:\n    openai:\n      rate_limit: 5\n      model: gpt-5\n    anthropic:\n      bedrock: true\n";
        let shown = load(text, &[]).unwrap_err().to_string();
        assert!(shown.contains("c.yaml:8:3: unknown field `base_url` for agent kind `installed` (a model endpoint's setting: it goes under `agent.upstream.openai.base_url`"), "{shown}");
        assert!(shown.contains("c.yaml:11:7: unknown field `rate_limit`"), "{shown}");
        assert!(shown.contains("c.yaml:12:7: unknown field `model` (the model is `agent.model`"), "{shown}");
        assert!(shown.contains("c.yaml:14:7: unknown field `bedrock`"), "{shown}");
    }

    #[test]
    fn bedrock_serves_anthropics_wire_alone_and_its_region_and_endpoint_are_checked() {
        let text = "name: t\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: installed\n  preset: claude-code\n  upstream:\n    anthropic: {}\n    bedrock:\n      region: US East\n      endpoint_url: http://10.0.0.5\n";
        let shown = load(text, &[]).unwrap_err().to_string();
        assert!(shown.contains("c.yaml:11:7: Anthropic's wire goes to one place: `anthropic` or `bedrock`"), "{shown}");
        assert!(shown.contains("c.yaml:11:15: `US East` is not an AWS region"), "{shown}");
        assert!(shown.contains("c.yaml:12:21: `http://10.0.0.5` would send the signed calls unencrypted"), "{shown}");
        let llm = "name: t\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: llm\n  model: openai:gpt-5\n  base_url: https://x/v1\n  bedrock: {region: us-east-1}\n";
        let shown = load(llm, &[]).unwrap_err().to_string();
        assert!(shown.contains("with `bedrock`, the calls are signed with AWS credentials"), "{shown}");
        let both = "name: t\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: llm\n  model: openai:gpt-5\n  azure: {base_url: 'https://r.openai.azure.com'}\n  bedrock: {region: us-east-1}\n";
        let shown = load(both, &[]).unwrap_err().to_string();
        assert!(shown.contains("one of `azure` or `bedrock`, not both"), "{shown}");
        let fine = "name: t\nbenchmark:\n  kind: toy\n  size: 1\nagent:\n  kind: llm\n  model: anthropic:claude-sonnet-4-5\n  bedrock: {region: us-east-1, models: {claude-sonnet-4-5: \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"}}\n";
        assert!(load(fine, &[]).is_ok());
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
        assert!(shown.contains("c.yaml:3:9: benchmark `toy` requires `size`"), "{shown}");
        assert_eq!(err.problems.len(), 5, "{shown}");
        let lines: Vec<usize> = err
            .problems
            .iter()
            .map(|p| match p.origin {
                Origin::File { line, .. } => line,
                _ => 0,
            })
            .collect();
        assert!(lines.is_sorted(), "problems in file order: {shown}");
    }

    /// Each kind takes only its own fields, and a wrong one is reported where it is written.
    #[test]
    fn a_field_of_another_kind_is_named_with_its_position() {
        let cases = [
            (
                "benchmark:\n  kind: jsonl\n  cases: c.jsonl\n  size: 5\nagent:\n  kind: mock\n",
                "c.yaml:5:3: unknown field `size` for benchmark kind `jsonl`",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\n  cases: c.jsonl\nagent:\n  kind: mock\n",
                "c.yaml:5:3: unknown field `cases` for benchmark kind `toy`",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\n  command: [x]\n",
                "c.yaml:7:3: unknown field `command` for agent kind `mock`",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: command\n  command: [x]\n  mock: {tokens: 1}\n",
                "c.yaml:8:3: unknown field `mock` for agent kind `command`",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\nevaluators:\n  - kind: exact_match\n    pattern: x\n",
                "c.yaml:9:5: unknown field `pattern` for evaluator kind `exact_match`",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\nevaluators:\n  - kind: cost_budget\n",
                "c.yaml:8:11: evaluator `cost_budget` requires `max_cost_usd`",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\nevaluators:\n  - kind: regex\n    pattern: '(('\n",
                "c.yaml:9:14: invalid regex",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\nstorage:\n  bundle_root: gs://b/runs\n",
                "c.yaml:8:16: `gs://b/runs` is not a bundle location",
            ),
            (
                "benchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\nstorage:\n  index: postgres://x\n",
                "c.yaml:8:10: `postgres://x` is not a run index location",
            ),
        ];
        for (body, want) in cases {
            let err = load(&format!("name: t\n{body}"), &[]).unwrap_err();
            let shown = err.to_string();
            assert!(shown.contains(want), "want {want} in:\n{shown}");
            // Besides the one asked about, only a missing case file may be reported (every
            // problem is, at once).
            assert_eq!(err.problems.iter().filter(|p| !p.message.contains("does not exist")).count(), 1, "{shown}");
        }
    }

    /// A misspelled field at any level gets a "did you mean", and a problem is said once: the
    /// stand-in for an evaluator of an unknown kind does not collide with a real one.
    #[test]
    fn misspelled_fields_are_named_with_their_fix_and_one_mistake_is_one_error() {
        let cases = [
            (
                "backend:\n  max_concurent_jobs: 2\n",
                "c.yaml:7:3: unknown field `max_concurent_jobs` (did you mean `max_concurrent_jobs`?)",
            ),
            ("evaluator: x\n", "c.yaml:6:1: unknown field `evaluator` (did you mean `evaluators`?)"),
            (
                "evaluators:\n  - kind: exact_match\n    case_sensitiv: true\n",
                "c.yaml:8:5: unknown field `case_sensitiv` for evaluator kind `exact_match` (did you mean `case_sensitive`?)",
            ),
            (
                "evaluators:\n  - kind: exact_mach\n  - kind: no_error\n",
                "c.yaml:7:11: unknown evaluator kind `exact_mach`",
            ),
        ];
        for (body, want) in cases {
            let err = load(&format!("name: t\nbenchmark:\n  kind: toy\n  size: 5\nagent: {{kind: mock}}\n{body}"), &[])
                .unwrap_err();
            let shown = err.to_string();
            assert!(shown.contains(want), "want {want} in:\n{shown}");
            assert_eq!(err.problems.len(), 1, "one mistake, one error:\n{shown}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once_even_past_the_schema() {
        let text = "name: five\nbenchmark:\n  kind: jsnl\n  cases: c.jsonl\nagent:\n  kind: command\n  command: []\nevaluators:\n  - kind: regex\n  - kind: latency_budget\n    max_seconds: -1\nbackend:\n  max_concurrent_jobs: 0\nmax_run_cost_usd: 0\n";
        let err = load(text, &[]).unwrap_err();
        let shown = err.to_string();
        for want in [
            "c.yaml:3:9: unknown benchmark kind `jsnl` (expected toy, jsonl, humaneval, harbor, swebench, tau2, command; did you mean `jsonl`?)",
            "c.yaml:7:12: agent `command` needs a program to run",
            "c.yaml:9:11: evaluator `regex` requires `pattern`",
            "c.yaml:11:18: must be zero or more",
            "c.yaml:13:24: 0 is less than the minimum of 1",
            "c.yaml:14:19: must be greater than zero",
        ] {
            assert!(shown.contains(want), "want {want} in:\n{shown}");
        }
        assert_eq!(err.problems.len(), 6, "{shown}");
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
        assert!(matches!(c.benchmark, crate::config::BenchmarkConfig::Toy { size: 10000, .. }));
        assert_eq!(c.backend.tasks_per_job, 100);
        let err = load(GOOD, &["backend.tasks_per_job=many", "bogus.x=1", "novalue"]).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("--set backend.tasks_per_job=many:"), "{shown}");
        assert!(shown.contains("--set bogus.x=1: unknown field `bogus`"), "{shown}");
        assert!(shown.contains("--set novalue: expected `key.path=value`"), "{shown}");
    }

    #[test]
    fn a_problem_inside_an_override_is_the_override_s() {
        let text = "name: t\nbenchmark:\n  kind: toy\n  size: 5\nagent:\n  kind: mock\nevaluators:\n  - kind: regex\n    pattern: ok\n";
        let err =
            load(text, &["evaluators=[{kind: regex, pattern: '(('}]", "storage.bundle_root=ftp://x"]).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("--set evaluators=[{kind: regex, pattern: '(('}]: invalid regex: unclosed group"),
            "{shown}"
        );
        assert!(shown.contains("--set storage.bundle_root=ftp://x: `ftp://x` is not a bundle location"), "{shown}");
        assert_eq!(err.problems.len(), 2, "{shown}");
    }

    #[test]
    fn pointers_read_like_set_paths() {
        assert_eq!(pointer_to_path("/evaluators/2/pattern"), "evaluators[2].pattern");
    }
}
