//! A Harbor task's `environment/docker-compose.yaml`, read as Compose and Harbor read it, in the
//! subset agenteval runs: the file laid over Harbor's base file (which gives `main` its build
//! from `environment/`, or the task's `docker_image`), its values interpolated as Compose does
//! (`${VAR}`, `${VAR:-default}`, `${VAR:?error}`, `$$`) from the task's own variables only (its
//! `[environment.env]` and Harbor's `CONTEXT_DIR` and image names, never this machine's), and the
//! `main` service (the agent's container) and its sidecars, each `build` (a folder, or `context`
//! and `dockerfile`) or `image`, `environment`, `command`, `depends_on`, `healthcheck` and named
//! `volumes` shared between services. Anything else a service says (ports, a host folder,
//! networks, …) is refused by name: the task is `infra`.

use std::collections::BTreeMap;
use std::path::Path;

use agenteval_core::environment::{Healthcheck, Sidecar, Volume};
use serde_json::Value;

/// The main service's name, as Harbor names it.
pub const MAIN: &str = "main";

/// What a compose file gives the task: the main service and the sidecars in the order they
/// start (each after what it depends on).
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    pub main: Sidecar,
    pub sidecars: Vec<Sidecar>,
    /// `main` says `network_mode: none`: no network, whatever task.toml says.
    pub offline: bool,
}

/// The keys of a service agenteval runs. `expose` only documents a port (every service of a task
/// reaches every other on its own network whatever it says), and `pull_policy` (Harbor's own
/// template sets it) says when to pull an image that agenteval never pulls: both are accepted and
/// do nothing. `network_mode` is accepted as `none` on a task without sidecars.
const KNOWN: [&str; 11] = [
    "build",
    "image",
    "environment",
    "command",
    "depends_on",
    "healthcheck",
    "container_name",
    "expose",
    "volumes",
    "pull_policy",
    "network_mode",
];

/// A service's `volumes`: named volumes the file declares (short `NAME:/path[:ro]` or long
/// `{type: volume, source, target, read_only}`) and the service's own (`/path`); a host folder,
/// a bind mount or the Docker socket is refused.
fn volumes(name: &str, v: Option<&Value>, declared: &[String]) -> Result<Vec<Volume>, String> {
    let Some(v) = v else { return Ok(vec![]) };
    let Some(list) = v.as_array() else { return Err(format!("service `{name}`: `volumes` is not a list")) };
    let mut out = Vec::new();
    for item in list {
        let (source, target, read_only) = match item {
            Value::String(s) => {
                let parts: Vec<&str> = s.split(':').collect();
                match parts.as_slice() {
                    [target] => (None, target.to_string(), false),
                    [source, target] => (Some(source.to_string()), target.to_string(), false),
                    [source, target, mode] if ["ro", "rw"].contains(mode) => {
                        (Some(source.to_string()), target.to_string(), *mode == "ro")
                    }
                    _ => return Err(format!("service `{name}`: volume `{s}` is not NAME:/PATH[:ro|rw]")),
                }
            }
            Value::Object(m) => {
                let kind = m.get("type").and_then(Value::as_str).unwrap_or("volume");
                if kind != "volume" {
                    return Err(format!(
                        "service `{name}`: a `{kind}` mount, which agenteval does not run (only named volumes)"
                    ));
                }
                let unknown: Vec<&str> = m
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !["type", "source", "target", "read_only"].contains(k))
                    .collect();
                if !unknown.is_empty() {
                    return Err(format!(
                        "service `{name}`: a volume's {}, which agenteval does not run",
                        unknown.join(", ")
                    ));
                }
                let Some(target) = m.get("target").and_then(Value::as_str) else {
                    return Err(format!("service `{name}`: a volume without `target`"));
                };
                let source = m.get("source").and_then(Value::as_str).map(String::from);
                (source, target.to_string(), m.get("read_only").and_then(Value::as_bool).unwrap_or(false))
            }
            _ => return Err(format!("service `{name}`: a volume is a string or a mapping")),
        };
        if !target.starts_with('/') {
            return Err(format!("service `{name}`: volume target `{target}` is not an absolute path"));
        }
        if let Some(src) = &source
            && !declared.contains(src)
        {
            let why = if src.starts_with(['/', '.', '~', '$']) || src.contains('/') {
                "a folder of this machine, which a task never mounts"
            } else {
                "not declared under the file's top-level `volumes`"
            };
            return Err(format!("service `{name}`: volume `{src}` is {why}"));
        }
        out.push(Volume { name: source, target, read_only });
    }
    Ok(out)
}

/// The file's top-level `volumes`: names, each plain (no driver, no external volume).
fn declared_volumes(doc: &Value) -> Result<Vec<String>, String> {
    let Some(v) = doc.get("volumes") else { return Ok(vec![]) };
    let Some(m) = v.as_object() else { return Err("the top-level `volumes` is not a mapping".into()) };
    let mut out = Vec::new();
    for (k, v) in m {
        let plain = k.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) && !k.is_empty();
        if !plain {
            return Err(format!("volume name `{k}` is not letters, digits, `_`, `.` and `-`"));
        }
        if let Some(opts) = v.as_object().filter(|o| !o.is_empty()) {
            let keys: Vec<&str> = opts.keys().map(String::as_str).collect();
            return Err(format!(
                "volume `{k}` sets {}, which agenteval does not run (a plain named volume only)",
                keys.join(", ")
            ));
        }
        out.push(k.clone());
    }
    Ok(out)
}

/// A duration as compose writes it (`10s`, `1m30s`, `500ms`, a bare number of seconds).
fn seconds(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            let mut total = 0.0;
            let mut num = String::new();
            let mut chars = s.trim().chars().peekable();
            while let Some(c) = chars.next() {
                if c.is_ascii_digit() || c == '.' {
                    num.push(c);
                    continue;
                }
                let n: f64 = num.parse().ok()?;
                num.clear();
                let unit = if c == 'm' && chars.peek() == Some(&'s') {
                    chars.next();
                    0.001
                } else {
                    match c {
                        'h' => 3600.0,
                        'm' => 60.0,
                        's' => 1.0,
                        _ => return None,
                    }
                };
                total += n * unit;
            }
            if !num.is_empty() {
                total += num.parse::<f64>().ok()?;
            }
            Some(total)
        }
        _ => None,
    }
}

fn healthcheck(v: &Value) -> Option<Healthcheck> {
    let test = match v.get("test")? {
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let parts: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
            match parts.split_first() {
                Some((&"CMD-SHELL", rest)) => rest.join(" "),
                Some((&"CMD", rest)) => {
                    rest.iter().map(|p| agenteval_core::environment::shell_quote(p)).collect::<Vec<_>>().join(" ")
                }
                Some((&"NONE", _)) => return None,
                _ => parts.join(" "),
            }
        }
        _ => return None,
    };
    Some(Healthcheck {
        command: test,
        interval_secs: seconds(v.get("interval")).unwrap_or(5.0),
        timeout_secs: seconds(v.get("timeout")).unwrap_or(30.0),
        start_period_secs: seconds(v.get("start_period")).unwrap_or(0.0),
        retries: v.get("retries").and_then(Value::as_u64).map_or(3, |r| r as u32),
    })
}

/// A build context as the compose file names it, which must be a folder inside the task's
/// `environment/` (no absolute path, no `..`, no link out): it is packed into an image.
fn inside(name: &str, dir: &Path, context: &str) -> Result<std::path::PathBuf, String> {
    let rel = Path::new(context);
    let lexical = rel.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    let joined = dir.join(rel);
    let real_dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let linked_out = joined.canonicalize().is_ok_and(|real| !real.starts_with(&real_dir));
    if !lexical || linked_out {
        return Err(format!("service `{name}`: build context `{context}` is outside the task's environment/ folder"));
    }
    Ok(joined)
}

fn service(name: &str, v: &Value, dir: &Path, declared: &[String]) -> Result<(Sidecar, Vec<String>), String> {
    let Some(obj) = v.as_object() else { return Err(format!("service `{name}` is not a mapping")) };
    let unknown: Vec<&str> = obj.keys().map(String::as_str).filter(|k| !KNOWN.contains(k)).collect();
    if !unknown.is_empty() {
        return Err(format!("service `{name}` uses {}, which agenteval does not run", unknown.join(", ")));
    }
    let context = match obj.get("build") {
        Some(Value::String(s)) => Some(inside(name, dir, s)?),
        Some(Value::Object(b)) => {
            if b.get("dockerfile").and_then(Value::as_str).is_some_and(|f| f != "Dockerfile") {
                return Err(format!("service `{name}`: only a build context's own `Dockerfile` is supported"));
            }
            Some(inside(name, dir, b.get("context").and_then(Value::as_str).unwrap_or("."))?)
        }
        Some(_) => return Err(format!("service `{name}`: `build` is a folder or {{context}}")),
        None => None,
    };
    let image = obj.get("image").and_then(Value::as_str).map(String::from);
    // `main` gets its build (or the task's image) from Harbor's base file, under the task's.
    if context.is_none() && image.is_none() && name != MAIN {
        return Err(format!("service `{name}` has neither `build` nor `image`"));
    }
    let env: BTreeMap<String, String> = match obj.get("environment") {
        Some(Value::Object(m)) => {
            m.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), String::from))).collect()
        }
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(|kv| kv.split_once('=').map_or((kv.to_string(), String::new()), |(k, v)| (k.into(), v.into())))
            .collect(),
        _ => BTreeMap::new(),
    };
    let command = match obj.get("command") {
        Some(Value::String(s)) => Some(vec!["/bin/sh".into(), "-c".into(), s.clone()]),
        Some(Value::Array(a)) => Some(a.iter().filter_map(Value::as_str).map(String::from).collect()),
        _ => None,
    };
    let depends: Vec<String> = match obj.get("depends_on") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(String::from).collect(),
        Some(Value::Object(m)) => m.keys().cloned().collect(),
        _ => vec![],
    };
    match obj.get("network_mode") {
        None => {}
        Some(Value::String(m)) if m == "none" => {}
        Some(other) => {
            return Err(format!("service `{name}`: network_mode {other}, which agenteval does not run (only `none`)"));
        }
    }
    let sidecar = Sidecar {
        volumes: volumes(name, obj.get("volumes"), declared)?,
        name: name.to_string(),
        context,
        image: if obj.contains_key("build") { None } else { image },
        env,
        from_run: BTreeMap::new(),
        command,
        healthcheck: obj.get("healthcheck").and_then(healthcheck),
    };
    Ok((sidecar, depends))
}

/// One value interpolated as Compose interpolates: `$$` is `$`; `$VAR` and `${VAR}` its value
/// (empty when unset); `${VAR:-x}` / `${VAR-x}` `x` when unset or empty / unset; `${VAR:+x}` /
/// `${VAR+x}` `x` when set and not empty / set; `${VAR:?msg}` / `${VAR?msg}` an error when unset
/// or empty / unset. Defaults are interpolated in turn.
fn interpolate(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            let ch = s[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        match b.get(i + 1) {
            Some(b'$') => {
                out.push('$');
                i += 2;
            }
            Some(b'{') => {
                // The closing brace of this one, past nested `${…}` in its default.
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    match b[j] {
                        b'{' => depth += 1,
                        b'}' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                if depth > 0 {
                    return Err(format!("`{s}`: a `${{` is not closed"));
                }
                let inner = &s[i + 2..j - 1];
                let name_len = inner.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
                let (name, op) = inner.split_at(name_len);
                if name.is_empty() {
                    return Err(format!("`{s}`: `${{{inner}}}` names no variable"));
                }
                let value = vars.get(name);
                let set_nonempty = value.is_some_and(|v| !v.is_empty());
                let said = match op {
                    "" => value.cloned().unwrap_or_default(),
                    _ if op.starts_with(":-") => {
                        if set_nonempty {
                            value.cloned().unwrap_or_default()
                        } else {
                            interpolate(&op[2..], vars)?
                        }
                    }
                    _ if op.starts_with('-') => match value {
                        Some(v) => v.clone(),
                        None => interpolate(&op[1..], vars)?,
                    },
                    _ if op.starts_with(":+") => {
                        if set_nonempty {
                            interpolate(&op[2..], vars)?
                        } else {
                            String::new()
                        }
                    }
                    _ if op.starts_with('+') => {
                        if value.is_some() {
                            interpolate(&op[1..], vars)?
                        } else {
                            String::new()
                        }
                    }
                    _ if op.starts_with(":?") || op.starts_with('?') => {
                        let strict = op.starts_with(':');
                        let missing = if strict { !set_nonempty } else { value.is_none() };
                        if missing {
                            let msg = &op[if strict { 2 } else { 1 }..];
                            return Err(format!("required variable {name} is missing a value: {msg}"));
                        }
                        value.cloned().unwrap_or_default()
                    }
                    _ => return Err(format!("`{s}`: `${{{inner}}}` is not an interpolation Compose reads")),
                };
                out.push_str(&said);
                i = j;
            }
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
                let len = s[i + 1..].bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
                out.push_str(vars.get(&s[i + 1..i + 1 + len]).map(String::as_str).unwrap_or(""));
                i += 1 + len;
            }
            _ => {
                out.push('$');
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Every string value of a document interpolated (keys stay as written, as Compose keeps them).
fn interpolate_all(v: &mut Value, vars: &BTreeMap<String, String>) -> Result<(), String> {
    match v {
        Value::String(s) => *s = interpolate(s, vars)?,
        Value::Array(a) => a.iter_mut().try_for_each(|x| interpolate_all(x, vars))?,
        Value::Object(m) => m.values_mut().try_for_each(|x| interpolate_all(x, vars))?,
        _ => {}
    }
    Ok(())
}

/// Each service's variables given exactly as `${VAR}` (or `$VAR`) of a variable the task does
/// not set: service → (variable → `VAR`). A sidecar's are the run's to fill when it starts
/// (`roles.tools.secrets`); interpolated, they are empty, as Compose leaves them.
fn from_run(doc: &Value, vars: &BTreeMap<String, String>) -> BTreeMap<String, BTreeMap<String, String>> {
    let whole = |v: &str| -> Option<String> {
        let name = v.strip_prefix("${").and_then(|r| r.strip_suffix('}')).or_else(|| v.strip_prefix('$'))?;
        let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        (ok && !vars.contains_key(name)).then(|| name.to_string())
    };
    let mut out = BTreeMap::new();
    for (service, v) in doc.get("services").and_then(Value::as_object).into_iter().flatten() {
        let pairs: Vec<(String, String)> = match v.get("environment") {
            Some(Value::Object(m)) => m.iter().filter_map(|(k, v)| Some((k.clone(), whole(v.as_str()?)?))).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), whole(v)?)))
                .collect(),
            _ => vec![],
        };
        if !pairs.is_empty() {
            out.insert(service.clone(), pairs.into_iter().collect());
        }
    }
    out
}

/// The compose file of a task's `environment/` folder, read in agenteval's subset, its values
/// interpolated from `vars`.
pub(crate) fn read(file: &Path, vars: &BTreeMap<String, String>) -> Result<Compose, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let mut doc = agenteval_core::config::YamlDoc::parse(&text).map_err(|p| {
        format!("{} is not YAML: {}", file.display(), p.first().map(|p| p.message.clone()).unwrap_or_default())
    })?;
    let deferred = from_run(&doc.value, vars);
    interpolate_all(&mut doc.value, vars)?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let Some(services) = doc.value.get("services").and_then(Value::as_object) else {
        return Err(format!("{} has no `services`", file.display()));
    };
    let declared = declared_volumes(&doc.value)?;
    let mut read: BTreeMap<String, (Sidecar, Vec<String>)> = BTreeMap::new();
    for (name, v) in services {
        let (mut sidecar, depends) = service(name, v, dir, &declared)?;
        if name != MAIN {
            sidecar.from_run = deferred.get(name).cloned().unwrap_or_default();
        }
        read.insert(name.clone(), (sidecar, depends));
    }
    let Some((main, _)) = read.get(MAIN).cloned() else {
        return Err(format!("{} has no `{MAIN}` service (the agent's container)", file.display()));
    };
    // Without a network the agent's container could not reach its sidecars; a sidecar without one
    // would serve nothing.
    let offline: Vec<&String> =
        services.iter().filter(|(_, v)| v.get("network_mode").is_some()).map(|(k, _)| k).collect();
    if !offline.is_empty() && (services.len() > 1 || offline.iter().any(|k| *k != MAIN)) {
        return Err("`network_mode: none` is run only on `main` in a task without sidecars".into());
    }
    // Each sidecar after what it depends on; a cycle is refused.
    let mut order: Vec<String> = Vec::new();
    let mut todo: Vec<String> = read.keys().filter(|k| *k != MAIN).cloned().collect();
    while !todo.is_empty() {
        let ready: Vec<String> = todo
            .iter()
            .filter(|n| read[*n].1.iter().all(|d| d == MAIN || order.contains(d) || !read.contains_key(d)))
            .cloned()
            .collect();
        if ready.is_empty() {
            return Err(format!("the services {} depend on each other in a circle", todo.join(", ")));
        }
        todo.retain(|n| !ready.contains(n));
        order.extend(ready);
    }
    let sidecars = order.into_iter().map(|n| read[&n].0.clone()).collect();
    Ok(Compose { main, sidecars, offline: !offline.is_empty() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_interpolated_as_compose_interpolates_them() {
        let vars: BTreeMap<String, String> =
            [("SET", "yes"), ("EMPTY", "")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for (given, want) in [
            ("${SET}", "yes"),
            ("$SET/x", "yes/x"),
            ("${UNSET:-fallback}", "fallback"),
            ("${EMPTY:-fallback}", "fallback"),
            ("${EMPTY-fallback}", ""),
            ("${UNSET-${SET}}", "yes"),
            ("${SET:+alt}", "alt"),
            ("${EMPTY:+alt}", ""),
            ("${EMPTY+alt}", "alt"),
            ("$$HOME and $$", "$HOME and $"),
            ("${UNSET}", ""),
            ("cost: 5$", "cost: 5$"),
        ] {
            assert_eq!(interpolate(given, &vars).unwrap(), want, "{given}");
        }
        assert!(interpolate("${UNSET:?set it}", &vars).unwrap_err().contains("UNSET is missing a value: set it"));
        assert!(interpolate("${EMPTY?x}", &vars).is_ok());
        assert!(interpolate("${OPEN", &vars).is_err());
    }

    #[test]
    fn main_may_leave_its_build_to_harbors_base_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("docker-compose.yaml");
        std::fs::write(&f, "services:\n  main:\n    environment:\n      MODE: ${MODE:-quick}\n  side:\n    image: x\n")
            .unwrap();
        let c = read(&f, &BTreeMap::new()).unwrap();
        assert_eq!((c.main.context.as_ref(), c.main.image.as_ref()), (None, None));
        assert_eq!(c.main.env["MODE"], "quick");
        std::fs::write(&f, "services:\n  main:\n    image: x\n  side:\n    environment: [A=1]\n").unwrap();
        assert!(read(&f, &BTreeMap::new()).unwrap_err().contains("`side` has neither"));
    }

    #[test]
    fn a_sidecars_variable_of_none_of_the_tasks_is_the_runs_to_give() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("docker-compose.yaml");
        std::fs::write(
            &f,
            "services:\n  main:\n    environment:\n      LEAK: ${ORDERS_KEY}\n  orders:\n    image: x\n    environment:\n      ORDERS_API_KEY: ${ORDERS_KEY}\n      MODE: ${MODE}\n      MIXED: pre-${ORDERS_KEY}\n",
        )
        .unwrap();
        let vars = BTreeMap::from([("MODE".to_string(), "test".to_string())]);
        let c = read(&f, &vars).unwrap();
        let orders = &c.sidecars[0];
        assert_eq!(orders.from_run, BTreeMap::from([("ORDERS_API_KEY".to_string(), "ORDERS_KEY".to_string())]));
        assert_eq!(
            (orders.env["ORDERS_API_KEY"].as_str(), orders.env["MODE"].as_str(), orders.env["MIXED"].as_str()),
            ("", "test", "pre-")
        );
        assert!(
            c.main.from_run.is_empty() && c.main.env["LEAK"].is_empty(),
            "the agent's container is never given one"
        );
    }

    #[test]
    fn a_build_context_outside_the_environment_folder_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("env/api")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("env/out")).unwrap();
        let env = d.path().join("env");
        assert!(inside("api", &env, "api").is_ok() && inside("api", &env, ".").is_ok());
        for bad in ["..", "../x", "/etc", "api/../../x", "out"] {
            let why = inside("api", &env, bad).unwrap_err();
            assert!(why.contains("outside the task's environment/"), "{bad}: {why}");
        }
    }

    #[test]
    fn the_subset_reads_and_what_it_lacks_is_named() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("docker-compose.yaml");
        std::fs::write(
            &f,
            "services:\n  main:\n    build: .\n    depends_on: [api]\n  api:\n    image: app:1\n    command: python3 -m http.server 80\n    environment:\n      MODE: test\n    depends_on:\n      db: {condition: service_healthy}\n    healthcheck:\n      test: [CMD-SHELL, curl -f localhost]\n      interval: 1s\n      retries: 5\n  db:\n    image: db:1\n",
        )
        .unwrap();
        let c = read(&f, &BTreeMap::new()).unwrap();
        assert_eq!(c.main.context.as_deref(), Some(d.path().join(".").as_path()));
        let names: Vec<&str> = c.sidecars.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["db", "api"], "each after what it depends on");
        let api = &c.sidecars[1];
        assert_eq!(api.env["MODE"], "test");
        assert_eq!(api.command.as_deref().unwrap()[2], "python3 -m http.server 80");
        let hc = api.healthcheck.clone().unwrap();
        assert_eq!((hc.command.as_str(), hc.interval_secs, hc.retries), ("curl -f localhost", 1.0, 5));
        std::fs::write(&f, "services:\n  main:\n    image: x\n  api:\n    image: y\n    expose: [\"8080\"]\n").unwrap();
        assert!(read(&f, &BTreeMap::new()).is_ok(), "`expose` is accepted (it only documents a port)");
        std::fs::write(&f, "services:\n  main:\n    image: x\n    ports: [\"80:80\"]\n").unwrap();
        assert!(read(&f, &BTreeMap::new()).unwrap_err().contains("ports"));
        assert_eq!(seconds(Some(&Value::String("1m30s".into()))), Some(90.0));
        let head = "services:\n  main:\n    image: x\n    pull_policy: build\n";
        std::fs::write(&f, format!("{head}    volumes: [\"logs:/var/log/tool:ro\"]\n  tool:\n    image: y\n    volumes:\n      - {{type: volume, source: logs, target: /var/log/tool}}\n      - /scratch\nvolumes:\n  logs:\n")).unwrap();
        let c = read(&f, &BTreeMap::new()).unwrap();
        assert_eq!(
            c.main.volumes,
            [Volume { name: Some("logs".into()), target: "/var/log/tool".into(), read_only: true }]
        );
        assert_eq!(c.sidecars[0].volumes[1], Volume { name: None, target: "/scratch".into(), read_only: false });
        for (bad, why) in [
            ("    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\"]\n", "a folder of this machine"),
            ("    volumes: [\"./data:/data\"]\n", "a folder of this machine"),
            ("    volumes: [\"other:/data\"]\n", "not declared"),
            ("    volumes: [{type: bind, source: /etc, target: /x}]\n", "`bind` mount"),
            ("    network_mode: host\n", "network_mode"),
        ] {
            std::fs::write(&f, format!("{head}{bad}volumes:\n  logs:\n")).unwrap();
            let e = read(&f, &BTreeMap::new()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        std::fs::write(&f, format!("{head}volumes:\n  logs: {{driver: local}}\n")).unwrap();
        assert!(read(&f, &BTreeMap::new()).unwrap_err().contains("driver"));
        std::fs::write(&f, format!("{head}    network_mode: none\n")).unwrap();
        assert!(read(&f, &BTreeMap::new()).unwrap().offline, "`none` on a lone main: no network");
        assert_eq!(seconds(Some(&Value::String("500ms".into()))), Some(0.5));
    }
}
