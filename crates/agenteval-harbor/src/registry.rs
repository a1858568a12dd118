//! Harbor datasets by name (`benchmark: {kind: harbor, dataset: NAME@VERSION}`): a registry in
//! Harbor's format (`registry.json`: datasets, each a name, a version and its tasks, each a git
//! repository, a commit and a path) read from a URL or a file, and the dataset's tasks fetched
//! once into the cache as git checkouts at the registry's commits. A second run of the same
//! entry fetches nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use agenteval_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// Harbor's own registry, the default `registry`.
pub const DEFAULT_REGISTRY: &str = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json";

/// A dataset of a registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub description: String,
    pub tasks: Vec<RegistryTask>,
}

/// One task of a dataset: where its folder is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryTask {
    pub name: String,
    #[serde(default)]
    pub git_url: Option<String>,
    #[serde(default)]
    pub git_commit_id: Option<String>,
    pub path: PathBuf,
}

/// The registry at `source`: an `http(s)://` URL, or a file (relative to `base`).
pub fn read(source: &str, base: &Path) -> Result<Vec<Dataset>> {
    let text = if source.starts_with("http://") || source.starts_with("https://") {
        fetch_url(source)?
    } else {
        let path = base.join(source);
        std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading the registry {}", path.display()), e))?
    };
    serde_json::from_str(&text).map_err(|e| {
        Error::invalid(format!("the registry {source} is not a Harbor registry (a list of datasets): {e}"))
    })
}

/// A URL's body, fetched on a thread of its own (the loader may run inside a runtime).
fn fetch_url(url: &str) -> Result<String> {
    let url = url.to_string();
    std::thread::spawn(move || -> Result<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("a runtime for the registry", e))?;
        rt.block_on(async {
            let fail = |e: reqwest::Error| {
                Error::new(agenteval_core::ErrorKind::Io, format!("fetching the registry {url}: {e}"))
            };
            let resp = reqwest::Client::new().get(&url).send().await.map_err(fail)?;
            let resp = resp.error_for_status().map_err(fail)?;
            resp.text().await.map_err(fail)
        })
    })
    .join()
    .map_err(|_| Error::internal("the registry fetch panicked"))?
}

/// Harbor's choice among a dataset's versions when none is named: `head`, else the highest
/// version by its numbers, else the last by name.
fn best_version(mut versions: Vec<&str>) -> Option<&str> {
    if versions.contains(&"head") {
        return Some("head");
    }
    let numbers = |v: &str| -> Option<Vec<u64>> { v.split('.').map(|p| p.parse().ok()).collect() };
    let mut numbered: Vec<(Vec<u64>, &str)> = versions.iter().filter_map(|v| numbers(v).map(|n| (n, *v))).collect();
    numbered.sort();
    if let Some((_, v)) = numbered.last() {
        return Some(v);
    }
    versions.sort();
    versions.last().copied()
}

/// The dataset `NAME@VERSION` (or `NAME`, its best version) names; `Err` lists what there is.
pub fn find<'a>(datasets: &'a [Dataset], wanted: &str) -> Result<&'a Dataset> {
    let (name, version) = match wanted.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (wanted, None),
    };
    let versions: Vec<&str> = datasets.iter().filter(|d| d.name == name).map(|d| d.version.as_str()).collect();
    if versions.is_empty() {
        let names: std::collections::BTreeSet<&str> = datasets.iter().map(|d| d.name.as_str()).collect();
        let hint = agenteval_core::config::did_you_mean(name, names.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_default();
        return Err(Error::invalid(format!(
            "the registry has no dataset `{name}`{hint} (`agenteval datasets list` shows them)"
        )));
    }
    let version = match version {
        Some(v) => v,
        None => best_version(versions.clone()).unwrap_or_default(),
    };
    datasets.iter().find(|d| d.name == name && d.version == version).ok_or_else(|| {
        Error::invalid(format!("the registry has no version `{version}` of `{name}` (it has {})", versions.join(", ")))
    })
}

/// Where a dataset's tasks were put, and what it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    /// A folder of task folders (links into the checkouts), the benchmark's `path`.
    pub folder: PathBuf,
    /// The commit of each repository the tasks came from, in order.
    pub commits: Vec<String>,
    /// Whether anything was fetched (a second run fetches nothing).
    pub fetched: bool,
}

fn short_hash(s: &str) -> String {
    use sha2::{Digest as _, Sha256};
    hex::encode(Sha256::digest(s.as_bytes()))[..16].to_string()
}

fn git(args: &[&str], dir: Option<&Path>) -> Result<String> {
    let mut cmd = Command::new("git");
    cmd.args(["-c", "advice.detachedHead=false"]).args(args).env("GIT_TERMINAL_PROMPT", "0");
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let out = cmd.output().map_err(|e| Error::io("running git (is it installed?)", e))?;
    if !out.status.success() {
        return Err(Error::new(
            agenteval_core::ErrorKind::Io,
            format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A dataset's name and version become a folder's name: they may not name a path.
fn plain_names(d: &Dataset) -> Result<()> {
    let plain = |s: &str| {
        !s.is_empty() && !s.starts_with('.') && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b))
    };
    if plain(&d.name) && plain(&d.version) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "the registry's dataset `{}@{}`: a name and a version are letters, digits, `.`, `_`, `+` and `-`",
        d.name, d.version
    )))
}

/// A commit is hex (or `HEAD`), never an option git would read.
fn check_commit(d: &Dataset, t: &RegistryTask, commit: &str) -> Result<()> {
    let hex = (4..=64).contains(&commit.len()) && commit.bytes().all(|b| b.is_ascii_hexdigit());
    if commit == "HEAD" || hex {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "dataset {}@{}: task `{}`: git_commit_id `{}` is not a commit (hex)",
        d.name,
        d.version,
        t.name,
        commit.chars().take(64).collect::<String>()
    )))
}

/// The dataset's tasks in `cache`: each repository checked out once at its commit, the tasks
/// linked by name into one folder. `base` resolves a repository given as a relative path.
pub fn fetch(d: &Dataset, cache: &Path, base: &Path) -> Result<Fetched> {
    plain_names(d)?;
    let key = short_hash(&serde_json::to_string(d).unwrap_or_default());
    let folder = cache.join("harbor").join("datasets").join(format!("{}@{}-{key}", d.name, d.version));
    let done = folder.join(".agenteval-complete");
    if let Ok(text) = std::fs::read_to_string(&done) {
        let commits = text.lines().map(String::from).collect();
        return Ok(Fetched { folder: folder.join("tasks"), commits, fetched: false });
    }
    let io = |what: &str, e| Error::io(format!("{what} in {}", folder.display()), e);
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(folder.join("tasks")).map_err(|e| io("creating the dataset's folder", e))?;
    let mut commits: Vec<String> = Vec::new();
    for t in &d.tasks {
        // A registry is data: its names and paths stay inside the cache and the checkouts.
        let name_ok = t.name.parse::<agenteval_core::TaskId>().is_ok() && t.name != "." && t.name != "..";
        let path_ok =
            t.path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
        if !name_ok || !path_ok {
            return Err(Error::invalid(format!(
                "dataset {}@{}: task `{}` at `{}`: a task name is letters, digits, `-`, `_` and `.`, and its path a relative one inside its repository",
                d.name,
                d.version,
                t.name,
                t.path.display()
            )));
        }
        let source = match &t.git_url {
            Some(url) => {
                let url = if url.contains("://") || Path::new(url).is_absolute() {
                    url.clone()
                } else {
                    base.join(url).to_string_lossy().into_owned()
                };
                let commit = t.git_commit_id.clone().unwrap_or_else(|| "HEAD".into());
                check_commit(d, t, &commit)?;
                let checkout = cache.join("harbor").join("checkouts").join(format!(
                    "{}-{}",
                    short_hash(&url),
                    short_hash(&commit)
                ));
                if !checkout.join(".git").is_dir() {
                    let tmp = checkout.with_extension("partial");
                    let _ = std::fs::remove_dir_all(&tmp);
                    std::fs::create_dir_all(tmp.parent().unwrap_or(Path::new(".")))
                        .map_err(|e| io("creating the checkouts", e))?;
                    // Links are checked out as plain files: a dataset's link never reads this
                    // machine's files.
                    git(
                        &[
                            "-c",
                            "core.symlinks=false",
                            "clone",
                            "--quiet",
                            "--end-of-options",
                            &url,
                            &tmp.to_string_lossy(),
                        ],
                        None,
                    )?;
                    git(
                        &["-c", "core.symlinks=false", "checkout", "--quiet", "--end-of-options", &commit],
                        Some(&tmp),
                    )?;
                    std::fs::rename(&tmp, &checkout).map_err(|e| io("keeping the checkout", e))?;
                }
                let head = git(&["rev-parse", "HEAD"], Some(&checkout))?;
                if !commits.contains(&head) {
                    commits.push(head);
                }
                checkout.join(&t.path)
            }
            None => base.join(&t.path),
        };
        if !source.is_dir() {
            return Err(Error::invalid(format!(
                "dataset {}@{}: task `{}` is not at {} in its repository",
                d.name,
                d.version,
                t.name,
                t.path.display()
            )));
        }
        std::os::unix::fs::symlink(&source, folder.join("tasks").join(&t.name)).map_err(|e| io("linking a task", e))?;
    }
    std::fs::write(&done, commits.iter().map(|c| format!("{c}\n")).collect::<String>())
        .map_err(|e| io("marking the dataset fetched", e))?;
    Ok(Fetched { folder: folder.join("tasks"), commits, fetched: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(name: &str, version: &str) -> Dataset {
        Dataset { name: name.into(), version: version.into(), description: String::new(), tasks: vec![] }
    }

    #[test]
    fn a_name_without_a_version_takes_harbors_choice_and_a_wrong_one_lists_what_there_is() {
        let all = [ds("tb", "1.0"), ds("tb", "2.0"), ds("tb", "10.0"), ds("other", "x")];
        assert_eq!(find(&all, "tb").unwrap().version, "10.0");
        assert_eq!(find(&all, "tb@2.0").unwrap().version, "2.0");
        let e = find(&all, "tb@3.0").unwrap_err().to_string();
        assert!(e.contains("1.0, 2.0, 10.0"), "{e}");
        assert!(find(&all, "tbb").unwrap_err().to_string().contains("did you mean `tb`"));
        assert_eq!(best_version(vec!["1.0", "head"]), Some("head"));
    }

    #[test]
    fn a_registry_cannot_name_a_folder_outside_its_repository_or_link_outside_the_cache() {
        let cache = tempfile::tempdir().unwrap();
        for (name, path) in [("ok", "../../etc"), ("ok", "/etc"), ("..", "tasks/x"), ("a/b", "tasks/x")] {
            let mut d = ds("evil", "1");
            d.tasks.push(RegistryTask { name: name.into(), git_url: None, git_commit_id: None, path: path.into() });
            let e = fetch(&d, cache.path(), cache.path()).unwrap_err().to_string();
            assert!(e.contains("relative one inside its repository"), "{name} {path}: {e}");
        }
    }
}
