//! `harbor`: tasks in the Harbor / Terminal-Bench format, read as Harbor reads them. A task is
//! a folder: `instruction.md` (what the agent is told), `task.toml` (timeouts, the environment's
//! CPUs, memory and network, tags), `environment/` (its `Dockerfile` and files), `tests/test.sh`
//! (the verifier) and `solution/solve.sh` (the reference solution). The agent acts in the task's
//! environment; once it stops, the tests are copied to `/tests` and run there, and the reward
//! they write (`/logs/verifier/reward.txt`, a number, or `reward.json`) is the grade. The agent
//! never sees the tests or the solution: they are not in the image, and are copied in only after
//! it is done (the solution only for the `oracle` agent).

mod compose;
pub mod registry;
mod rejects;
mod steps;

use std::path::{Path, PathBuf};

use agenteval_core::config::TaskFilter;
use agenteval_core::config::VerifyIn;
use agenteval_core::environment::{EnvSpec, Healthcheck, RewardFrom, TestsSpec, VerifierRules};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::{BenchmarkAdapter, TaskEnvironment, TaskPlan};
use agenteval_core::{Error, ErrorKind, Result, TaskId};
use async_trait::async_trait;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct HarborBenchmark {
    root: PathBuf,
    rules: VerifierRules,
}

/// What a task folder says beyond its spec: its paths and timeouts (`TaskSpec::metadata.harbor`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct HarborTask {
    pub path: PathBuf,
    #[serde(default)]
    pub agent_timeout_secs: Option<f64>,
    /// Why agenteval cannot run this task (a compose file, a GPU, an allowlist): it is `infra`
    /// with this reason, and the rest of the dataset runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
    /// Why Harbor itself would skip this task (a rule of Harbor's its `task.toml` breaks):
    /// agenteval runs it, warns at load and counts it in the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harbor_rejects: Option<String>,
}

impl HarborTask {
    pub fn of(task: &TaskSpec) -> Option<HarborTask> {
        serde_json::from_value(task.metadata.get("harbor")?.clone()).ok()
    }
}

impl HarborBenchmark {
    pub fn new(root: PathBuf) -> Self {
        HarborBenchmark { root, rules: VerifierRules::Harbor }
    }

    /// Graded by these rules (`benchmark.grading`).
    pub fn with_rules(mut self, rules: VerifierRules) -> Self {
        self.rules = rules;
        self
    }

    /// The task folders: the root itself when it is one, else its subfolders that are.
    fn folders(&self) -> Result<Vec<PathBuf>> {
        if self.root.join("task.toml").is_file() || self.root.join("instruction.md").is_file() {
            return Ok(vec![self.root.clone()]);
        }
        let entries = std::fs::read_dir(&self.root)
            .map_err(|e| Error::io(format!("reading the Harbor tasks folder {}", self.root.display()), e))?;
        let mut out: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() && (p.join("task.toml").is_file() || p.join("instruction.md").is_file()))
            .collect();
        out.sort();
        if out.is_empty() {
            return Err(Error::invalid(format!(
                "{} holds no Harbor task (a folder with instruction.md and task.toml)",
                self.root.display()
            )));
        }
        Ok(out)
    }
}

/// A Harbor dataset named by `benchmark.dataset`: looked up in its registry and fetched into the
/// cache (once), its folder made the benchmark's `path` and what it resolved to recorded. Every
/// problem as `(pointer, message)`.
pub fn dataset_at_load(config: &mut agenteval_core::config::RunConfig) -> Vec<(String, String)> {
    use agenteval_core::config::{BenchmarkConfig, ResolvedDataset};
    let BenchmarkConfig::Harbor { path, dataset, registry, resolved, .. } = &mut config.benchmark else {
        return vec![];
    };
    let Some(wanted) = dataset.clone() else {
        return match path {
            Some(_) => vec![],
            None => vec![(
                "/benchmark/path".into(),
                "a Harbor benchmark needs `path` (a folder of tasks) or `dataset` (NAME@VERSION from a registry)"
                    .into(),
            )],
        };
    };
    if path.is_some() && resolved.is_none() {
        return vec![("/benchmark/dataset".into(), "give `path` or `dataset`, not both".into())];
    }
    if resolved.is_some() {
        return vec![];
    }
    let source = registry.clone().unwrap_or_else(|| registry::DEFAULT_REGISTRY.to_string());
    let base = if source.contains("://") {
        std::path::PathBuf::from(".")
    } else {
        Path::new(&source).parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let found = registry::read(&source, &base).and_then(|all| {
        let d = registry::find(&all, &wanted)?.clone();
        let fetched = registry::fetch(&d, &agenteval_core::cache_dir(), &base)?;
        Ok((d, fetched))
    });
    match found {
        Ok((d, fetched)) => {
            if fetched.fetched {
                tracing::info!(dataset = %wanted, folder = %fetched.folder.display(), "fetched the dataset's tasks");
            }
            *path = Some(fetched.folder);
            *resolved =
                Some(ResolvedDataset { name: d.name, version: d.version, registry: source, commits: fetched.commits });
            vec![]
        }
        Err(e) => vec![("/benchmark/dataset".into(), e.to_string())],
    }
}

/// The `healthcheck` table of a `task.toml` section (`[environment]`, a step's), Harbor's
/// defaults for what it leaves out.
fn healthcheck_of(section: &toml::Table) -> Option<Healthcheck> {
    let h = section.get("healthcheck")?.as_table()?;
    Some(Healthcheck {
        command: h.get("command")?.as_str()?.to_string(),
        interval_secs: num(h.get("interval_sec")).unwrap_or(5.0),
        timeout_secs: num(h.get("timeout_sec")).unwrap_or(30.0),
        start_period_secs: num(h.get("start_period_sec")).unwrap_or(0.0),
        retries: num(h.get("retries")).map_or(3, |r| r.max(0.0) as u32),
    })
}

fn num(v: Option<&toml::Value>) -> Option<f64> {
    match v? {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    }
}

/// `"2G"`, `"512M"`, `2048` (MiB) as MiB.
fn memory_mb(v: Option<&toml::Value>) -> Option<u64> {
    match v? {
        toml::Value::Integer(i) => u64::try_from(*i).ok(),
        toml::Value::String(s) => {
            let s = s.trim();
            let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
            let n: f64 = n.trim().parse().ok()?;
            let mb = match unit.to_ascii_uppercase().trim_end_matches('B') {
                "" | "M" => n,
                "G" => n * 1024.0,
                "K" => n / 1024.0,
                _ => return None,
            };
            Some(mb.ceil() as u64)
        }
        _ => None,
    }
}

/// A hash of what a task folder says: `instruction.md`, `task.toml`, `environment/` and
/// `tests/` and `steps/` (not the solution: it is not part of the question), each file with its path below
/// the folder, so the same task checked out anywhere has one fingerprint.
fn folder_content(dir: &Path) -> Result<String> {
    use sha2::{Digest as _, Sha256};
    let mut files = Vec::new();
    let mut todo: Vec<PathBuf> =
        ["instruction.md", "task.toml", "environment", "tests", "steps"].iter().map(|p| dir.join(p)).collect();
    while let Some(p) = todo.pop() {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {
                let entries = std::fs::read_dir(&p).map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
                todo.extend(entries.flatten().map(|e| e.path()));
            }
            Ok(m) if m.is_file() => files.push(p),
            _ => {}
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let bytes = std::fs::read(&f).map_err(|e| Error::io(format!("reading {}", f.display()), e))?;
        h.update(f.strip_prefix(dir).unwrap_or(&f).to_string_lossy().as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex::encode(h.finalize()))
}

/// The task's `[environment.env]`, a value that is a whole `${VAR:-default}` read as Harbor
/// reads it with no such variable: its default (agenteval hands a task none of this machine's
/// variables).
fn task_env(env: &toml::Table) -> std::collections::BTreeMap<String, String> {
    string_map(env, "env")
        .into_iter()
        .map(|(k, v)| {
            let inner = v.strip_prefix("${").and_then(|r| r.strip_suffix('}'));
            let default = inner
                .and_then(|i| i.split_once(":-"))
                .filter(|(name, _)| !name.is_empty() && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'));
            match default {
                Some((_, d)) => (k, d.to_string()),
                None => (k, v),
            }
        })
        .collect()
}

/// The verifier's `[verifier.env]`: its values read as `[environment.env]`'s, but a provider's
/// key written whole (`${ANTHROPIC_API_KEY}`, with or without a default), which the run's judge
/// fills (`roles.judge`): Harbor reads it from its own machine's variables.
fn verifier_env(verifier: &toml::Table) -> std::collections::BTreeMap<String, String> {
    let raw = string_map(verifier, "env");
    let mut env = task_env(verifier);
    for (k, v) in raw {
        let name = v.strip_prefix("${").and_then(|r| r.strip_suffix('}')).map(|i| i.split(":-").next().unwrap_or(i));
        if let Some(name) = name.filter(|n| matches!(*n, "ANTHROPIC_API_KEY" | "OPENAI_API_KEY")) {
            env.insert(k, format!("${{{name}}}"));
        }
    }
    env
}

/// A phase's network as `task.toml` says it.
#[derive(Debug, Clone, PartialEq)]
enum Net {
    Public,
    None,
    /// Only these hosts (through the egress proxy).
    Allow(Vec<String>),
}

/// A phase's network as `task.toml` says it: `network_mode` (`public`, `no-network`,
/// `allowlist` with `allowed_hosts`), or the older `allow_internet`. `None`: not said.
fn network_of(t: &toml::Table) -> Option<std::result::Result<Net, String>> {
    match t.get("network_mode").and_then(toml::Value::as_str) {
        Some("public") => Some(Ok(Net::Public)),
        Some("no-network") => Some(Ok(Net::None)),
        Some("allowlist") => {
            let hosts: Vec<String> = t
                .get("allowed_hosts")
                .and_then(toml::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(|h| h.trim().to_ascii_lowercase()))
                .filter(|h| !h.is_empty())
                .collect();
            if hosts.is_empty() {
                Some(Err("network_mode = \"allowlist\" names no allowed_hosts".into()))
            } else if let Some(bad) = hosts.iter().find(|h| {
                // A port of its own (`host:8080`, `[2001:db8::1]:443`) is agenteval's addition.
                let bare = match h.rsplit_once(':') {
                    Some((rest, p)) if p.parse::<u16>().is_ok() && (rest.ends_with(']') || !rest.contains(':')) => {
                        rest.trim_start_matches('[').trim_end_matches(']')
                    }
                    _ => h.as_str(),
                };
                bare.contains("://")
                    || bare.contains('@')
                    || (bare.contains(':') && !bare.contains('/') && bare.parse::<std::net::IpAddr>().is_err())
            }) {
                Some(Err(format!(
                    "allowed_hosts entry `{bad}` is not a hostname, address or CIDR range (with a `:port` of its own, or 80 and 443)"
                )))
            } else {
                Some(Ok(Net::Allow(hosts)))
            }
        }
        Some(other) => Some(Err(format!("network_mode = \"{other}\" is not one of public, no-network, allowlist"))),
        None => {
            t.get("allow_internet").and_then(toml::Value::as_bool).map(|b| Ok(if b { Net::Public } else { Net::None }))
        }
    }
}

/// A user as Harbor writes it: a name or a uid.
fn user_of(t: &toml::Table) -> Option<String> {
    match t.get("user")? {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

fn string_map(t: &toml::Table, key: &str) -> std::collections::BTreeMap<String, String> {
    t.get(key)
        .and_then(toml::Value::as_table)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// One task folder as a task. What agenteval cannot run (a compose file, a GPU, an allowlist)
/// makes a task that is `infra` with the reason, never an error for the whole dataset.
/// The files and folders of a task that agenteval reads or copies, each refused when a link
/// takes it out of the task's folder.
const TASK_PATHS: &[&str] = &[
    "instruction.md",
    "task.toml",
    "environment",
    "environment/Dockerfile",
    "environment/docker-compose.yaml",
    "environment/docker-compose.yml",
    "environment/compose.yaml",
    "tests",
    "tests/test.sh",
    "solution",
    "solution/solve.sh",
];

/// The task folders under `root` whose files cannot be read as a task (a `task.toml` that is
/// not TOML or says what Harbor does not, no `instruction.md`, a link out of the folder), each
/// with why: what a run makes `infra`, and `config validate` names before it.
pub fn unreadable_tasks(root: &Path) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for dir in HarborBenchmark::new(root.to_path_buf()).folders()? {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let Ok(id) = name.parse::<TaskId>() else {
            out.push((name, "the folder's name is no task id (letters, digits, `-`, `_` and `.`)".into()));
            continue;
        };
        if let Err(e) = links_out(&dir, &id).and_then(|()| read_folder(&dir, &id, VerifierRules::Harbor)) {
            let why = e.to_string();
            out.push((name.clone(), why.strip_prefix(&format!("task {id}: ")).unwrap_or(&why).to_string()));
        }
    }
    Ok(out)
}

/// The task's `[[environment.mcp_servers]]`, checked as Harbor checks them: a name each, once;
/// `transport` `sse` (the default), `streamable-http` (or `http`) with a `url`, or `stdio` with a
/// `command`. Headers, which Harbor fills from this machine's variables, are not taken.
fn mcp_servers(env: &toml::Table) -> std::result::Result<Vec<agenteval_core::environment::McpServer>, String> {
    let Some(list) = env.get("mcp_servers") else { return Ok(vec![]) };
    let list = list.as_array().ok_or("`environment.mcp_servers` is not a list of tables")?;
    let mut out: Vec<agenteval_core::environment::McpServer> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let t = t.as_table().ok_or(format!("`environment.mcp_servers[{i}]` is not a table"))?;
        let text = |k: &str| t.get(k).and_then(toml::Value::as_str).map(String::from);
        let name = text("name").filter(|n| !n.trim().is_empty()).ok_or(format!("MCP server {i} has no `name`"))?;
        if out.iter().any(|s| s.name == name) {
            return Err(format!("MCP server `{name}` is named twice"));
        }
        let transport = match text("transport").as_deref().unwrap_or("sse") {
            "http" | "streamable-http" => "streamable-http",
            "sse" => "sse",
            "stdio" => "stdio",
            other => {
                return Err(format!("MCP server `{name}`: transport `{other}` is not sse, streamable-http or stdio"));
            }
        };
        let (url, command) = (text("url"), text("command"));
        if transport == "stdio" && command.is_none() {
            return Err(format!("MCP server `{name}`: a stdio server needs a `command`"));
        }
        if transport != "stdio" && url.is_none() {
            return Err(format!("MCP server `{name}`: a {transport} server needs a `url`"));
        }
        if t.get("headers").and_then(toml::Value::as_table).is_some_and(|h| !h.is_empty()) {
            return Err(format!(
                "MCP server `{name}`: headers are not taken (a credential for a tool server goes to the server, as roles.tools.secrets)"
            ));
        }
        let args = t.get("args").and_then(toml::Value::as_array).into_iter().flatten();
        let args = args.filter_map(|a| a.as_str().map(String::from)).collect();
        out.push(agenteval_core::environment::McpServer { name, transport: transport.into(), url, command, args });
    }
    Ok(out)
}

pub fn read_task(dir: &Path) -> Result<TaskSpec> {
    read_task_with(dir, VerifierRules::Harbor)
}

/// A task folder as a task; one whose files cannot be read as a task (no `instruction.md`, a
/// `task.toml` that is not TOML, no verifier, a file that links out of the folder, which is
/// never read) is that task's failure (`infra`, with why), never the dataset's: the rest of it
/// runs. A folder whose name is no task id is refused.
fn read_task_with(dir: &Path, rules: VerifierRules) -> Result<TaskSpec> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let id: TaskId = name.parse().map_err(|_| {
        Error::invalid(format!("Harbor task folder `{name}`: a task id is letters, digits, `-`, `_` and `.`"))
    })?;
    match links_out(dir, &id).and_then(|()| read_folder(dir, &id, rules)) {
        Ok(t) => Ok(t),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Io | ErrorKind::Unauthorized
            ) =>
        {
            let why = e.to_string();
            let why = why.strip_prefix(&format!("task {id}: ")).unwrap_or(&why).to_string();
            tracing::warn!(task = %id, "this task cannot run (it alone fails): {why}");
            let harbor = HarborTask {
                path: dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf()),
                agent_timeout_secs: None,
                unsupported: Some(why),
                harbor_rejects: None,
            };
            Ok(TaskSpec {
                id,
                input: Value::String(String::new()),
                expected: None,
                tags: vec![],
                evaluators: vec![],
                metadata: json!({"harbor": harbor}),
                environment: None,
                content: Some(folder_content(dir).unwrap_or_default()),
                tests: None,
                solution: None,
                steps: None,
                user: None,
            })
        }
        Err(e) => Err(e),
    }
}

/// None of the task's files may be a link out of its folder (a registry's checkout keeps
/// links, and one to a root-only file of this machine would become the agent's input, the
/// bundle's and the tests').
fn links_out(dir: &Path, id: &TaskId) -> Result<()> {
    let inside = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut paths: Vec<PathBuf> = TASK_PATHS.iter().map(|f| dir.join(f)).collect();
    // A task told in steps: each step's folders too.
    if let Ok(steps) = std::fs::read_dir(dir.join("steps")) {
        paths.push(dir.join("steps"));
        for step in steps.flatten() {
            for f in ["", "instruction.md", "tests", "tests/test.sh", "solution", "solution/solve.sh", "workdir"] {
                paths.push(if f.is_empty() { step.path() } else { step.path().join(f) });
            }
        }
    }
    for p in paths {
        if let Ok(real) = p.canonicalize()
            && !real.starts_with(&inside)
        {
            let f = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            return Err(Error::invalid(format!(
                "task {id}: {f} is a link out of the task's folder; a dataset's files are read only inside it"
            )));
        }
    }
    Ok(())
}

// Long: task.toml's sections in Harbor's order (metadata, environment, agent, verifier), each
// key read where Harbor reads it; split, the table's keys would be spread far from each other.
fn read_folder(dir: &Path, id: &TaskId, rules: VerifierRules) -> Result<TaskSpec> {
    let id = id.clone();
    let toml_path = dir.join("task.toml");
    let table: toml::Table = match std::fs::read_to_string(&toml_path) {
        Ok(text) => text.parse().map_err(|e: toml::de::Error| {
            Error::invalid(format!(
                "task.toml is not TOML: {}",
                e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
        Err(e) => return Err(Error::io(format!("reading {}", toml_path.display()), e)),
    };
    let stepped = table.get("steps").and_then(toml::Value::as_array).is_some_and(|a| !a.is_empty());
    let instruction = match std::fs::read_to_string(dir.join("instruction.md")) {
        Ok(text) => text,
        Err(_) if stepped => String::new(),
        Err(e) => return Err(Error::io(format!("task {id}: reading instruction.md"), e)),
    };
    let section = |k: &str| table.get(k).and_then(toml::Value::as_table).cloned().unwrap_or_default();
    let (meta, verifier, agent, env) =
        (section("metadata"), section("verifier"), section("agent"), section("environment"));
    let mut tags: Vec<String> = meta
        .get("tags")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(String::from))
        .collect();
    for k in ["difficulty", "category"] {
        if let Some(v) = meta.get(k).and_then(toml::Value::as_str) {
            tags.push(format!("{k}:{v}"));
        }
    }
    let mut unsupported: Vec<String> = Vec::new();
    let mut unsupported_if = |r: Option<std::result::Result<Net, String>>| match r {
        Some(Ok(b)) => Some(b),
        Some(Err(why)) => {
            unsupported.push(why);
            None
        }
        None => None,
    };
    // agenteval's default is stricter than Harbor's (`public`): no network unless the task says.
    let env_network = unsupported_if(network_of(&env)).unwrap_or(Net::None);
    let agent_network = unsupported_if(network_of(&agent)).unwrap_or_else(|| env_network.clone());
    let verifier_network = unsupported_if(network_of(&verifier)).unwrap_or_else(|| env_network.clone());
    let verify_in = match verifier.get("environment_mode").and_then(toml::Value::as_str) {
        Some("shared") => Some(VerifyIn::Same),
        Some("separate") => Some(VerifyIn::Fresh),
        Some(other) => {
            unsupported.push(format!("[verifier] environment_mode = \"{other}\" is not shared or separate"));
            None
        }
        None if verifier.get("environment").is_some() => Some(VerifyIn::Fresh),
        None => None,
    };
    if verifier_network != agent_network && verify_in != Some(VerifyIn::Fresh) {
        unsupported.push(
            "the verifier's network differs from the agent's in a shared environment: agenteval cannot change a container's network between phases (give the verifier environment_mode = \"separate\")".into(),
        );
    }
    if let Some(os) = env.get("os").and_then(toml::Value::as_str).filter(|o| !o.eq_ignore_ascii_case("linux")) {
        unsupported.push(format!("the task runs on {os}, and agenteval's Docker environment runs Linux containers"));
    }
    if let Some(g) = num(env.get("gpus")).filter(|g| *g > 0.0) {
        unsupported
            .push(format!("the task needs {g} GPU(s), and agenteval's Docker environment gives containers none"));
    }
    let context = dir.join("environment");
    let compose_file = ["docker-compose.yaml", "docker-compose.yml", "compose.yaml"]
        .iter()
        .map(|f| context.join(f))
        .find(|f| f.is_file());
    // What Compose interpolates the file with, as Harbor hands it over: the task's own
    // variables, then Harbor's (which win); never this machine's environment.
    let task_env = task_env(&env);
    let mut vars = task_env.clone();
    vars.insert("CONTEXT_DIR".into(), context.canonicalize().unwrap_or_else(|_| context.clone()).display().to_string());
    vars.insert("MAIN_IMAGE_NAME".into(), format!("hb__{}", id.as_str().to_lowercase()));
    if let Some(image) = env.get("docker_image").and_then(toml::Value::as_str) {
        vars.insert("PREBUILT_IMAGE_NAME".into(), image.to_string());
    }
    if let Some(c) = num(env.get("cpus")) {
        vars.insert("CPUS".into(), c.to_string());
    }
    if let Some(m) = memory_mb(env.get("memory_mb").or_else(|| env.get("memory"))) {
        vars.insert("MEMORY".into(), format!("{m}M"));
    }
    let compose = match &compose_file {
        Some(f) => match compose::read(f, &vars) {
            Ok(c) => Some(c),
            Err(why) => {
                unsupported.push(format!("its compose file: {why}"));
                None
            }
        },
        None => None,
    };
    let healthcheck = healthcheck_of(&env);
    let mut spec = EnvSpec {
        context: context.join("Dockerfile").is_file().then_some(context.clone()),
        image: env.get("docker_image").and_then(toml::Value::as_str).map(String::from),
        cpus: num(env.get("cpus")),
        memory_mb: memory_mb(env.get("memory_mb").or_else(|| env.get("memory"))),
        network: agent_network == Net::Public,
        allowed_hosts: match &agent_network {
            Net::Allow(hosts) => hosts.clone(),
            _ => vec![],
        },
        build_timeout_secs: num(env.get("build_timeout_sec")),
        workdir: env.get("workdir").and_then(toml::Value::as_str).map(String::from),
        storage_mb: num(env.get("storage_mb")).filter(|n| *n > 0.0).map(|n| n.ceil() as u64),
        user: user_of(&agent),
        env: task_env,
        healthcheck,
        // agenteval's own key: Harbor's containers allow `ptrace` to everything in them.
        ptrace: env.get("allow_ptrace").and_then(toml::Value::as_bool).unwrap_or(false),
        mcp_servers: mcp_servers(&env).unwrap_or_else(|why| {
            unsupported.push(why);
            vec![]
        }),
        ..Default::default()
    };
    // A compose file's `main` service is the agent's container; the others are its sidecars.
    if let Some(c) = compose {
        spec.context = c.main.context.or(spec.context);
        spec.image = if spec.context.is_some() { None } else { c.main.image.or(spec.image) };
        // Harbor lays the task's `[environment.env]` over the compose file's, last.
        let mut merged = c.main.env;
        merged.extend(std::mem::take(&mut spec.env));
        spec.env = merged;
        spec.volumes = c.main.volumes;
        spec.sidecars = c.sidecars;
        if c.offline {
            (spec.network, spec.allowed_hosts) = (false, vec![]);
        }
    }
    if spec.context.is_none() && spec.image.is_none() {
        unsupported.push("no environment/Dockerfile and no `environment.docker_image` in task.toml".to_string());
    }
    if !stepped && !dir.join("tests/test.sh").is_file() {
        return Err(Error::invalid(format!("task {id}: no tests/test.sh (its verifier)")));
    }
    let path = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let harbor_rejects = rejects::of(&table);
    if let Some(why) = &harbor_rejects {
        tracing::warn!(task = %id, "Harbor itself would skip this task: {why}");
    }
    let unsupported_now = (!unsupported.is_empty()).then(|| unsupported.join("; "));
    let harbor = HarborTask {
        path: path.clone(),
        agent_timeout_secs: num(agent.get("timeout_sec")),
        unsupported: unsupported_now,
        harbor_rejects,
    };
    // Harbor's verifier: `bash /tests/test.sh` as root, the reward in `/logs/verifier`.
    let tests = TestsSpec {
        dir: Some(path.join("tests")),
        command: Some("bash /tests/test.sh".into()),
        timeout_secs: num(verifier.get("timeout_sec")),
        env: verifier_env(&verifier),
        reward: RewardFrom::File,
        rules,
        user: user_of(&verifier),
        network: (verify_in == Some(VerifyIn::Fresh) && verifier_network != agent_network).then(|| {
            match &verifier_network {
                Net::Public => (true, vec![]),
                Net::None => (false, vec![]),
                Net::Allow(hosts) => (false, hosts.clone()),
            }
        }),
        verify_in,
    };
    let solution = path.join("solution");
    let solution = solution.is_dir().then_some(solution);
    let (steps, first) = match stepped {
        true => {
            let s = steps::read(&path, &table, &tests, solution.as_ref(), &agenteval_core::cache_dir())?;
            let first = s.list[0].clone();
            (Some(s), Some(first))
        }
        false => (None, None),
    };
    // Everything task.toml says is kept, known or not (a later Harbor's keys are not errors).
    let toml_json = serde_json::to_value(&table).unwrap_or(Value::Null);
    let runnable = harbor.unsupported.is_none();
    let (input, tests, solution) = match first {
        Some(f) => (f.input, f.tests, f.solution),
        None => (Value::String(instruction), Some(tests), solution),
    };
    Ok(TaskSpec {
        id,
        input,
        expected: None,
        tags,
        evaluators: vec![],
        metadata: json!({"harbor": harbor, "task_toml": toml_json}),
        environment: runnable.then_some(spec),
        content: Some(folder_content(dir)?),
        tests: tests.filter(|_| runnable),
        solution: solution.filter(|_| runnable),
        steps: steps.filter(|_| runnable),
        user: None,
    })
}

#[async_trait]
impl BenchmarkAdapter for HarborBenchmark {
    fn name(&self) -> &str {
        "harbor"
    }

    fn plan(&self, task: &TaskSpec) -> TaskPlan {
        let h = HarborTask::of(task);
        TaskPlan {
            agent_timeout_secs: h.as_ref().and_then(|h| h.agent_timeout_secs).filter(|s| *s > 0.0),
            would_skip: h.and_then(|h| h.harbor_rejects),
            user: None,
        }
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>> {
        let mut out = Vec::new();
        for dir in self.folders()? {
            let t = read_task_with(&dir, self.rules)?;
            if filter.matches(t.id.as_str(), &t.tags) {
                out.push(t);
            }
        }
        if let Some(limit) = filter.limit {
            out.truncate(limit as usize);
        }
        Ok(out)
    }

    /// A task agenteval cannot run is `infra` here, with its reason; the others run.
    async fn prepare_environment(&self, _run: &agenteval_core::RunId, task: &TaskSpec) -> Result<TaskEnvironment> {
        match HarborTask::of(task).and_then(|h| h.unsupported) {
            Some(why) => Err(Error::invalid(format!("task {}: {why}", task.id))),
            None => Ok(TaskEnvironment::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_dir(toml: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("fix-it");
        std::fs::create_dir_all(t.join("environment")).unwrap();
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::write(t.join("instruction.md"), "Fix it.\n").unwrap();
        std::fs::write(t.join("task.toml"), toml).unwrap();
        std::fs::write(t.join("environment/Dockerfile"), "FROM debian\n").unwrap();
        std::fs::write(t.join("tests/test.sh"), "exit 0\n").unwrap();
        d
    }

    #[test]
    fn a_verifiers_provider_key_is_left_for_the_judge_and_other_defaults_are_read() {
        let t: toml::Table = toml::from_str(
            "[env]\nK = \"${ANTHROPIC_API_KEY}\"\nO = \"${OPENAI_API_KEY:-unset}\"\nM = \"${MODEL:-haiku}\"\nL = \"plain\"\n",
        )
        .unwrap();
        let env = verifier_env(&t);
        let got: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, [("K", "${ANTHROPIC_API_KEY}"), ("L", "plain"), ("M", "haiku"), ("O", "${OPENAI_API_KEY}")]);
    }

    #[test]
    fn a_task_folder_reads_as_harbor_reads_it_and_keeps_unknown_keys() {
        let d = task_dir(
            "version = \"1.0\"\nfuture_key = 3\n[metadata]\ndifficulty = \"easy\"\ntags = [\"git\"]\n[verifier]\ntimeout_sec = 30.0\nenv = {A = \"1\"}\n[agent]\ntimeout_sec = 120\n[environment]\ncpus = 2\nmemory = \"1G\"\nallow_internet = true\n",
        );
        let t = read_task(&d.path().join("fix-it")).unwrap();
        assert_eq!(t.id.as_str(), "fix-it");
        assert_eq!(t.input, json!("Fix it.\n"));
        assert_eq!(t.tags, ["git", "difficulty:easy"]);
        let env = t.environment.clone().unwrap();
        assert_eq!((env.cpus, env.memory_mb, env.network), (Some(2.0), Some(1024), true));
        let (h, tests) = (HarborTask::of(&t).unwrap(), t.tests.clone().unwrap());
        assert_eq!((h.agent_timeout_secs, tests.timeout_secs), (Some(120.0), Some(30.0)));
        assert_eq!(tests.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(tests.command.as_deref(), Some("bash /tests/test.sh"));
        assert_eq!(t.metadata["task_toml"]["future_key"], 3, "an unknown key is kept, not an error");
        // The same task in another place is the same question; a changed test is another.
        let elsewhere = tempfile::tempdir().unwrap();
        let copy = elsewhere.path().join("fix-it");
        for p in ["environment", "tests"] {
            std::fs::create_dir_all(copy.join(p)).unwrap();
        }
        for f in ["instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh"] {
            std::fs::copy(d.path().join("fix-it").join(f), copy.join(f)).unwrap();
        }
        let moved = read_task(&copy).unwrap();
        assert_eq!(moved.content_fingerprint(), t.content_fingerprint());
        std::fs::write(copy.join("tests/test.sh"), "exit 1\n").unwrap();
        assert_ne!(read_task(&copy).unwrap().content_fingerprint(), t.content_fingerprint());
    }

    #[tokio::test]
    async fn a_folder_of_tasks_lists_each_and_filters() {
        let d = task_dir("[metadata]\ntags = [\"a\"]\n");
        let b = HarborBenchmark::new(d.path().to_path_buf());
        assert_eq!(b.list_tasks(&TaskFilter::default()).await.unwrap().len(), 1);
        let only_b = TaskFilter { tags: vec!["b".into()], ..Default::default() };
        assert!(b.list_tasks(&only_b).await.unwrap().is_empty());
        let one = HarborBenchmark::new(d.path().join("fix-it"));
        assert_eq!(one.list_tasks(&TaskFilter::default()).await.unwrap()[0].id.as_str(), "fix-it");
    }

    #[test]
    fn each_phase_gets_its_network_and_what_cannot_run_here_is_said_not_refused() {
        let d = task_dir(
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"PyPI.org\", \"*.example.com\"]\n[verifier]\nenvironment_mode = \"separate\"\nnetwork_mode = \"public\"\n[agent]\nuser = 1000\n",
        );
        let t = read_task(&d.path().join("fix-it")).unwrap();
        let env = t.environment.clone().unwrap();
        assert_eq!(
            (env.network, env.allowed_hosts.as_slice(), env.user.as_deref()),
            (false, &["pypi.org".to_string(), "*.example.com".to_string()][..], Some("1000"))
        );
        let tests = t.tests.clone().unwrap();
        assert_eq!((tests.verify_in, tests.network), (Some(VerifyIn::Fresh), Some((true, vec![]))));
        let shared = task_dir("[verifier]\nnetwork_mode = \"public\"\n[environment]\ngpus = 2\nos = \"windows\"\n");
        let t = read_task(&shared.path().join("fix-it")).unwrap();
        let why = HarborTask::of(&t).unwrap().unsupported.unwrap();
        assert!(why.contains("2 GPU") && why.contains("shared environment") && why.contains("windows"), "{why}");
        assert!(t.environment.is_none() && t.tests.is_none(), "it runs nothing: it is infra");
    }

    #[tokio::test]
    async fn a_task_that_cannot_be_read_fails_alone_and_one_harbor_would_skip_is_named() {
        let d = task_dir("[task]\nname = \"no-org\"\n");
        let t = d.path();
        for (name, toml) in [("bad-toml", "this is = = not toml"), ("bad-steps", "[[steps]]\nname = \"one\"\n")] {
            std::fs::create_dir_all(t.join(name).join("tests")).unwrap();
            std::fs::write(t.join(name).join("task.toml"), toml).unwrap();
            std::fs::write(t.join(name).join("tests/test.sh"), "exit 0\n").unwrap();
        }
        let listed = HarborBenchmark::new(t.to_path_buf()).list_tasks(&TaskFilter::default()).await.unwrap();
        let why = |id: &str| {
            let task = listed.iter().find(|x| x.id.as_str() == id).unwrap();
            (HarborTask::of(task).unwrap(), task.environment.is_none())
        };
        let (bad, alone) = why("bad-toml");
        assert!(bad.unsupported.unwrap().contains("not TOML") && alone);
        let (steps, alone) = why("bad-steps");
        assert!(steps.unsupported.unwrap().contains("steps/one/instruction.md") && alone);
        let (ok, runs) = why("fix-it");
        assert!(ok.unsupported.is_none() && !runs);
        assert!(ok.harbor_rejects.unwrap().contains("org/name"));
    }

    #[test]
    fn mcp_servers_are_read_as_harbor_checks_them() {
        let d = task_dir(
            "[[environment.mcp_servers]]\nname = \"orders\"\ntransport = \"http\"\nurl = \"http://orders:8000/mcp\"\n\
             [[environment.mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"mcp-fs\"\nargs = [\"/app\"]\n",
        );
        let t = read_task(&d.path().join("fix-it")).unwrap();
        let servers = t.environment.unwrap().mcp_servers;
        assert_eq!(servers.len(), 2);
        assert_eq!(
            (servers[0].transport.as_str(), servers[0].url.as_deref()),
            ("streamable-http", Some("http://orders:8000/mcp"))
        );
        assert_eq!(
            (servers[1].command.as_deref(), servers[1].args.as_slice()),
            (Some("mcp-fs"), &["/app".to_string()][..])
        );
        for (toml, says) in [
            ("[[environment.mcp_servers]]\nname = \"a\"\n", "needs a `url`"),
            ("[[environment.mcp_servers]]\nname = \"a\"\ntransport = \"stdio\"\n", "needs a `command`"),
            ("[[environment.mcp_servers]]\nname = \"a\"\ntransport = \"ws\"\n", "transport `ws`"),
            (
                "[[environment.mcp_servers]]\nname = \"a\"\nurl = \"http://a/mcp\"\nheaders = {Authorization = \"Bearer ${T}\"}\n",
                "headers",
            ),
        ] {
            let d = task_dir(toml);
            let t = read_task(&d.path().join("fix-it")).unwrap();
            let why = HarborTask::of(&t).unwrap().unsupported.unwrap_or_default();
            assert!(why.contains(says), "{toml}: {why}");
        }
    }

    #[test]
    fn memory_reads_as_harbor_writes_it() {
        assert_eq!(memory_mb(Some(&toml::Value::String("512M".into()))), Some(512));
        assert_eq!(memory_mb(Some(&toml::Value::String("2G".into()))), Some(2048));
    }
}
