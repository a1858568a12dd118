//! A Harbor task told in steps (`[[steps]]` in `task.toml`, Harbor 0.26): each step's folder
//! `steps/<name>/` holds its `instruction.md`, and may hold its own `tests/` (laid over the
//! task's shared `tests/`), `solution/` and `workdir/` (files put in the working folder before
//! the step, a `setup.sh` among them run there). Read as Harbor reads them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agenteval_core::environment::TestsSpec;
use agenteval_core::model::{Steps, StepsReward, TaskStep};
use agenteval_core::{Error, Result};
use serde_json::Value;

use super::{healthcheck_of, num, string_map, user_of};

/// Harbor's rule for a step's name: one portable folder name.
pub(super) fn name_ok(name: &str) -> bool {
    const RESERVED: [&str; 22] = [
        "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9", "LPT1",
        "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
    ];
    let stem = name.split('.').next().unwrap_or_default().trim_end_matches(' ');
    !name.trim().is_empty()
        && name != "."
        && name != ".."
        && !name.ends_with(['.', ' '])
        && !name.chars().any(|c| c.is_control() || "<>:\"/\\|?*".contains(c))
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem))
        && name.len() <= 255
}

/// The steps `task.toml` lists, each read from its folder. `tests` is the task's verifier as
/// `task.toml` sets it (each step's own `[steps.verifier]` over it); `solution` the task's.
pub(super) fn read(
    dir: &Path,
    table: &toml::Table,
    tests: &TestsSpec,
    solution: Option<&PathBuf>,
    cache: &Path,
) -> Result<Steps> {
    let reward = match table.get("multi_step_reward_strategy").and_then(toml::Value::as_str) {
        None | Some("mean") => StepsReward::Mean,
        Some("final") => StepsReward::Final,
        Some(other) => {
            return Err(Error::invalid(format!("multi_step_reward_strategy = \"{other}\" is not mean or final")));
        }
    };
    let listed = table.get("steps").and_then(toml::Value::as_array).cloned().unwrap_or_default();
    let mut list: Vec<TaskStep> = Vec::new();
    for (i, step) in listed.iter().enumerate() {
        let Some(t) = step.as_table() else {
            return Err(Error::invalid(format!("[[steps]] entry {} is not a table", i + 1)));
        };
        let name = t.get("name").and_then(toml::Value::as_str).unwrap_or_default().to_string();
        if !name_ok(&name) || name.contains("..") {
            return Err(Error::invalid(format!(
                "step {} has no usable name (`{name}`): one portable folder name",
                i + 1
            )));
        }
        if list.iter().any(|s| s.name.to_lowercase() == name.to_lowercase()) {
            return Err(Error::invalid(format!("two steps are named `{name}`")));
        }
        list.push(step_of(dir, &name, t, tests, solution, cache)?);
    }
    if list.is_empty() {
        return Err(Error::invalid("[[steps]] lists no step"));
    }
    Ok(Steps { list, reward })
}

fn section(t: &toml::Table, k: &str) -> toml::Table {
    t.get(k).and_then(toml::Value::as_table).cloned().unwrap_or_default()
}

fn step_of(
    dir: &Path,
    name: &str,
    t: &toml::Table,
    task_tests: &TestsSpec,
    task_solution: Option<&PathBuf>,
    cache: &Path,
) -> Result<TaskStep> {
    let folder = dir.join("steps").join(name);
    let input = std::fs::read_to_string(folder.join("instruction.md"))
        .map_err(|e| Error::io(format!("step {name}: reading steps/{name}/instruction.md"), e))?;
    let (agent, verifier) = (section(t, "agent"), section(t, "verifier"));
    let shared = task_tests.dir.clone().filter(|d| d.is_dir());
    let own = Some(folder.join("tests")).filter(|d| d.is_dir());
    let has_script = |d: &Option<PathBuf>| d.as_ref().is_some_and(|d| d.join("test.sh").is_file());
    if !has_script(&shared) && !has_script(&own) {
        return Err(Error::invalid(format!("step {name}: no steps/{name}/tests/test.sh and no tests/test.sh")));
    }
    let tests_dir = match (&shared, &own) {
        (Some(a), Some(b)) => Some(merged(a, b, cache)?),
        (a, b) => b.clone().or_else(|| a.clone()),
    };
    let mut env = task_tests.env.clone();
    env.extend(string_map(&verifier, "env"));
    let tests = TestsSpec {
        dir: tests_dir,
        timeout_secs: num(verifier.get("timeout_sec")).or(task_tests.timeout_secs),
        env,
        user: user_of(&verifier).or_else(|| task_tests.user.clone()),
        ..task_tests.clone()
    };
    let healthcheck = healthcheck_of(t);
    let min_reward: BTreeMap<String, f64> = match t.get("min_reward") {
        None => BTreeMap::new(),
        Some(v) => match num(Some(v)) {
            Some(x) => BTreeMap::from([("reward".to_string(), x)]),
            None => match v.as_table() {
                Some(m) => m.iter().filter_map(|(k, v)| Some((k.clone(), num(Some(v))?))).collect(),
                None => return Err(Error::invalid(format!("step {name}: min_reward is a number or a table"))),
            },
        },
    };
    let solution = Some(folder.join("solution")).filter(|d| d.is_dir()).or_else(|| task_solution.cloned());
    Ok(TaskStep {
        name: name.to_string(),
        input: Value::String(input),
        tests: Some(tests),
        solution,
        files: Some(folder.join("workdir")).filter(|d| d.is_dir()),
        healthcheck,
        agent_timeout_secs: num(agent.get("timeout_sec")),
        min_reward,
    })
}

/// The task's shared tests with a step's own laid over them (as Harbor uploads both to
/// `/tests`), as one folder in the cache named by what it holds. Only regular files are
/// copied: a link is not followed.
fn merged(shared: &Path, own: &Path, cache: &Path) -> Result<PathBuf> {
    use sha2::{Digest as _, Sha256};
    let mut files: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    for root in [shared, own] {
        let mut todo = vec![root.to_path_buf()];
        while let Some(d) = todo.pop() {
            let entries = std::fs::read_dir(&d).map_err(|e| Error::io(format!("reading {}", d.display()), e))?;
            for e in entries.flatten() {
                let p = e.path();
                match std::fs::symlink_metadata(&p) {
                    Ok(m) if m.is_dir() => todo.push(p),
                    Ok(m) if m.is_file() => {
                        let rel = p.strip_prefix(root).unwrap_or(&p).to_path_buf();
                        files.insert(rel, p);
                    }
                    _ => {}
                }
            }
        }
    }
    let mut h = Sha256::new();
    let mut read = Vec::new();
    for (rel, from) in &files {
        let bytes = std::fs::read(from).map_err(|e| Error::io(format!("reading {}", from.display()), e))?;
        let exec = is_executable(from);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0, u8::from(exec)]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
        read.push((rel.clone(), bytes, exec));
    }
    let out = cache.join("harbor-step-tests").join(&hex::encode(h.finalize())[..32]);
    if out.is_dir() {
        return Ok(out);
    }
    let parent = out.parent().expect("has a parent");
    std::fs::create_dir_all(parent).map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    let tmp =
        tempfile::tempdir_in(parent).map_err(|e| Error::io(format!("creating a folder in {}", parent.display()), e))?;
    for (rel, bytes, exec) in read {
        let to = tmp.path().join(&rel);
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        }
        std::fs::write(&to, bytes).map_err(|e| Error::io(format!("writing {}", to.display()), e))?;
        if exec {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755));
        }
    }
    let made = tmp.keep();
    // Another process may have made the same folder meanwhile: either is the same content.
    if std::fs::rename(&made, &out).is_err() {
        let _ = std::fs::remove_dir_all(&made);
    }
    Ok(out)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_s_tests_lie_over_the_task_s_and_its_settings_over_the_task_s() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path();
        for f in ["tests", "steps/one/tests", "steps/two"] {
            std::fs::create_dir_all(t.join(f)).unwrap();
        }
        std::fs::write(t.join("tests/test.sh"), "shared\n").unwrap();
        std::fs::write(t.join("tests/helper.py"), "help\n").unwrap();
        std::fs::write(t.join("steps/one/tests/test.sh"), "own\n").unwrap();
        std::fs::write(t.join("steps/one/instruction.md"), "first\n").unwrap();
        std::fs::write(t.join("steps/two/instruction.md"), "second\n").unwrap();
        let table: toml::Table = "multi_step_reward_strategy = \"final\"\n[[steps]]\nname = \"one\"\nmin_reward = 1.0\n[steps.agent]\ntimeout_sec = 30\n[steps.verifier]\nenv = {B = \"2\"}\n[[steps]]\nname = \"two\"\n".parse().unwrap();
        let shared = TestsSpec {
            dir: Some(t.join("tests")),
            env: BTreeMap::from([("A".into(), "1".into())]),
            ..Default::default()
        };
        let cache = tempfile::tempdir().unwrap();
        let s = read(t, &table, &shared, None, cache.path()).unwrap();
        assert_eq!(s.reward, StepsReward::Final);
        let (one, two) = (&s.list[0], &s.list[1]);
        let dir = one.tests.as_ref().unwrap().dir.clone().unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("test.sh")).unwrap(), "own\n", "the step's own wins");
        assert_eq!(std::fs::read_to_string(dir.join("helper.py")).unwrap(), "help\n", "the task's are there too");
        assert_eq!(one.tests.as_ref().unwrap().env.len(), 2);
        assert_eq!((one.agent_timeout_secs, one.min_reward.get("reward")), (Some(30.0), Some(&1.0)));
        assert_eq!(two.tests.as_ref().unwrap().dir.as_deref(), Some(t.join("tests").as_path()));
        assert_eq!(two.input, Value::String("second\n".into()));
        let bad: toml::Table = "[[steps]]\nname = \"../x\"\n".parse().unwrap();
        assert!(read(t, &bad, &shared, None, cache.path()).is_err());
        assert!(!name_ok("a/b") && !name_ok("con.txt") && !name_ok("x.") && name_ok("step-1"));
    }
}
