//! The rules of Harbor 0.26's task reader that agenteval does not need but Harbor enforces: a
//! task that breaks one is skipped by Harbor (with no word), so agenteval runs it, warns at load
//! and counts it, and a comparison of the two tools' numbers knows its datasets differ.

/// Harbor's `org/name` rule for `[task] name`.
fn org_name(name: &str) -> bool {
    let part = |p: &str| {
        p.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && p.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    match name.split_once('/') {
        Some((org, short)) => part(org) && part(short) && !name.contains(".."),
        None => false,
    }
}

/// A number as pydantic reads one in Harbor's lax mode (a number, or a string of one).
fn numeric(v: &toml::Value) -> bool {
    match v {
        toml::Value::Integer(_) | toml::Value::Float(_) => true,
        toml::Value::String(s) => s.trim().parse::<f64>().is_ok(),
        _ => false,
    }
}

/// Why Harbor would skip a task with this `task.toml`, if it would: every rule broken, joined.
pub(super) fn of(table: &toml::Table) -> Option<String> {
    let mut why = Vec::new();
    if let Some(task) = table.get("task") {
        match task.get("name").and_then(toml::Value::as_str) {
            Some(n) if org_name(n) => {}
            Some(n) => why.push(format!("[task] name = \"{n}\" is not `org/name` (Harbor's package names)")),
            None => why.push("[task] has no `name` (Harbor requires `org/name`)".to_string()),
        }
        if task.get("version").and_then(toml::Value::as_str) == Some("") {
            why.push("[task] version is empty".to_string());
        }
    }
    for (section, keys) in [
        ("agent", &["timeout_sec"][..]),
        ("verifier", &["timeout_sec"][..]),
        ("environment", &["cpus", "memory_mb", "storage_mb", "gpus", "build_timeout_sec"][..]),
    ] {
        let Some(t) = table.get(section).and_then(toml::Value::as_table) else { continue };
        for k in keys {
            if let Some(v) = t.get(*k).filter(|v| !numeric(v)) {
                why.push(format!("[{section}] {k} = {v} is not a number"));
            }
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harbor_s_name_rule_and_numbers_are_checked_and_other_keys_are_not() {
        let t = |s: &str| of(&s.parse::<toml::Table>().unwrap());
        assert_eq!(t("[task]\nname = \"acme/fix-it\"\n[agent]\ntimeout_sec = \"30\"\n"), None);
        assert_eq!(t("future = 1\n[metadata]\nx = 1\n"), None, "no [task]: Harbor reads it");
        let why = t("[task]\nname = \"fix-it\"\n").unwrap();
        assert!(why.contains("`org/name`"), "{why}");
        assert!(t("[task]\nname = \"a/../b\"\n").is_some());
        assert!(t("[verifier]\ntimeout_sec = \"soon\"\n").unwrap().contains("not a number"));
    }
}
