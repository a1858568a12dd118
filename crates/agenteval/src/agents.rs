//! `agenteval agents list`: the shipped agents (presets), their pinned versions, the wire their
//! calls speak, their package and the record of their run that becomes the trace; `agenteval
//! datasets list`: the Harbor datasets a registry names.

use agenteval_engine::agents::installed::presets::{ALL, Package};
use serde_json::json;

use crate::exit;

pub fn list(json: bool) -> u8 {
    let rows: Vec<(&str, &str, &str, String, &str)> = ALL
        .iter()
        .map(|p| {
            let package = match p.package {
                Package::NpmBinary { package, .. } => format!("npm {package}"),
                Package::Pip { package, .. } => format!("PyPI {package}"),
            };
            (p.name, p.version, p.wire, package, p.record)
        })
        .collect();
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, version, wire, package, record)| {
                json!({"preset": name, "version": version, "wire": wire, "package": package, "record": record})
            })
            .collect();
        say!("{}", json!({"presets": list}));
        return exit::OK;
    }
    let mut t = crate::output::table();
    t.set_header(["preset", "version", "wire", "package", "record"]);
    for (name, version, wire, package, record) in rows {
        t.add_row([name.to_string(), version.to_string(), wire.to_string(), package, record.to_string()]);
    }
    say!("{}", crate::output::compact(t));
    say!(
        "Use one with `agent: {{kind: installed, preset: NAME, model: M}}` and `agent.upstream`, or `submit --agent NAME --model M`."
    );
    exit::OK
}

/// `agenteval datasets list`: the registry's datasets.
pub fn datasets(registry: Option<&str>, json: bool) -> Result<u8, crate::Failure> {
    use agenteval_harbor::registry;
    let source = registry.unwrap_or(registry::DEFAULT_REGISTRY);
    let all = registry::read(source, std::path::Path::new("."))?;
    if json {
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(
                |d| json!({"name": d.name, "version": d.version, "tasks": d.tasks.len(), "description": d.description}),
            )
            .collect();
        say!("{}", json!({"registry": source, "datasets": list}));
        return Ok(exit::OK);
    }
    let mut t = crate::output::table();
    t.set_header(["dataset", "tasks", "description"]);
    for d in &all {
        let about: String = d.description.chars().take(60).collect();
        t.add_row([format!("{}@{}", d.name, d.version), d.tasks.len().to_string(), about]);
    }
    say!("{}", crate::output::compact(t));
    say!("Run one with `benchmark: {{kind: harbor, dataset: NAME@VERSION, registry: {source}}}`.");
    Ok(exit::OK)
}
