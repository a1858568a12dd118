//! A certified run's package, checked offline: its `manifest.json` lists every file with its
//! sha256; `certificate.json` lists every task attempt with its trajectory, its review (for a
//! pass) and its audit. `check` finds every file changed, missing or unlisted, every passing
//! trial without a trajectory or a review, and every task the audit found tampered or suspect.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The package's list of files.
pub const MANIFEST: &str = "manifest.json";
/// The package's account of the run.
pub const CERTIFICATE: &str = "certificate.json";
/// The version of the package's layout.
pub const SCHEMA: &str = "agenteval-certified/1";

/// `manifest.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: String,
    /// Every file of the package but this one, by `/`-separated path: its sha256.
    pub files: BTreeMap<String, String>,
}

/// One task attempt in `certificate.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CertifiedTask {
    pub task_id: String,
    pub outcome: String,
    pub passed: bool,
    /// The ATIF document (path in the package).
    pub trajectory: Option<String>,
    /// The judge's review (a passing trial's).
    pub review: Option<String>,
    /// The tamper audit of the attempt.
    pub audit: String,
}

/// `certificate.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    pub schema: String,
    pub run_id: String,
    pub name: String,
    pub agent: String,
    pub benchmark: String,
    pub agenteval_version: String,
    pub tasks: Vec<CertifiedTask>,
    /// The reviewing judge: its model and the sha256 of its prompt.
    pub judge: serde_json::Value,
    /// The run's summary figures (pass rate, mean reward, cost).
    pub summary: serde_json::Value,
}

/// An audit file's findings (`audit/<task>.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    #[serde(default)]
    pub tampered: Vec<serde_json::Value>,
    #[serde(default)]
    pub changed_outside: u64,
    #[serde(default)]
    pub suspect: Vec<String>,
    /// The exploit battery's row of the task, when an audit ran it.
    #[serde(default)]
    pub exploits: Option<serde_json::Value>,
}

/// A review file (`reviews/<task>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    pub task_id: String,
    /// Whether the pass looks earned; `None` when the judge gave no readable answer.
    pub earned: Option<bool>,
    pub why: String,
    pub model: String,
    pub prompt_sha256: String,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    Ok(hex::encode(Sha256::digest(std::fs::read(path)?)))
}

/// Every regular file under `dir`, by `/`-separated relative path (links are not followed,
/// and named as problems by `check`).
fn files_under(dir: &Path) -> std::io::Result<(Vec<String>, Vec<String>)> {
    let (mut files, mut odd) = (Vec::new(), Vec::new());
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            let rel = rel(dir, &p);
            let meta = std::fs::symlink_metadata(&p)?;
            if meta.is_dir() {
                todo.push(p);
            } else if meta.is_file() {
                files.push(rel);
            } else {
                odd.push(rel);
            }
        }
    }
    files.sort();
    odd.sort();
    Ok((files, odd))
}

fn rel(dir: &Path, p: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// The manifest of what `dir` holds now (written last, over every other file).
pub fn manifest_of(dir: &Path) -> std::io::Result<Manifest> {
    let (files, _) = files_under(dir)?;
    let mut m = Manifest { schema: SCHEMA.into(), files: BTreeMap::new() };
    for f in files.into_iter().filter(|f| f != MANIFEST) {
        m.files.insert(f.clone(), sha256_file(&dir.join(&f))?);
    }
    Ok(m)
}

/// The sha256 of a package: its manifest's, which pins every file (what a leaderboard records).
pub fn package_digest(dir: &Path) -> std::io::Result<String> {
    sha256_file(&dir.join(MANIFEST))
}

/// What a check found.
#[derive(Debug, Default, Serialize)]
pub struct Checked {
    pub files: usize,
    pub tasks: usize,
    pub passing: usize,
    /// What makes the package fail, each in a line naming the file or task.
    pub problems: Vec<String>,
    /// Reviews that doubt a pass: for people to read; the verdict stands.
    pub flagged: Vec<String>,
    pub package_digest: Option<String>,
}

impl Checked {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn read<T: serde::de::DeserializeOwned>(dir: &Path, name: &str, problems: &mut Vec<String>) -> Option<T> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Err(e) => {
            problems.push(format!("{name}: cannot be read ({e})"));
            None
        }
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(v) => Some(v),
            Err(e) => {
                problems.push(format!("{name}: not what it should hold ({e})"));
                None
            }
        },
    }
}

/// Checks a package offline.
pub fn check(dir: &Path) -> std::io::Result<Checked> {
    let mut c = Checked::default();
    let Some(m) = read::<Manifest>(dir, MANIFEST, &mut c.problems) else { return Ok(c) };
    c.package_digest = package_digest(dir).ok();
    let (files, odd) = files_under(dir)?;
    for o in odd {
        c.problems.push(format!("{o}: not a regular file (a link or device in a package)"));
    }
    for (name, sum) in &m.files {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => {
                if &sha256_file(&path)? != sum {
                    c.problems.push(format!(
                        "{name}: changed since it was certified (its sha256 differs from the manifest's)"
                    ));
                }
            }
            _ => c.problems.push(format!("{name}: missing (the manifest lists it)")),
        }
    }
    for f in files.iter().filter(|f| *f != MANIFEST && !m.files.contains_key(*f)) {
        c.problems.push(format!("{f}: not in the manifest (added after it was certified)"));
    }
    c.files = m.files.len();
    let Some(cert) = read::<Certificate>(dir, CERTIFICATE, &mut c.problems) else { return Ok(c) };
    let listed = |p: &Option<String>| p.as_ref().is_some_and(|p| m.files.contains_key(p) && dir.join(p).is_file());
    for t in &cert.tasks {
        c.tasks += 1;
        if t.passed {
            c.passing += 1;
            if !listed(&t.trajectory) {
                c.problems.push(format!("task {}: passed, but its trajectory is missing", t.task_id));
            }
            if !listed(&t.review) {
                c.problems.push(format!("task {}: passed, but the judge's review is missing", t.task_id));
            } else if let Some(r) = t.review.as_deref().and_then(|p| read::<Review>(dir, p, &mut c.problems))
                && r.earned != Some(true)
            {
                c.flagged.push(format!("task {}: the judge doubts the pass: {}", t.task_id, r.why));
            }
        }
        match read::<Audit>(dir, &t.audit, &mut c.problems) {
            Some(a) if !a.tampered.is_empty() => c.problems.push(format!(
                "task {}: tampered: the agent changed {} file(s) its grading reads",
                t.task_id,
                a.tampered.len()
            )),
            Some(a) if !a.suspect.is_empty() => {
                c.problems.push(format!("task {}: suspect: {}", t.task_id, a.suspect.join("; ")))
            }
            Some(a) if a.exploits.as_ref().is_some_and(|e| e["hackable"] == true) => {
                c.problems.push(format!("task {}: hackable: the exploit battery passed it without doing it", t.task_id))
            }
            _ => {}
        }
    }
    Ok(c)
}

/// A package's path for a task's file (`atif/<task>.json`).
pub fn task_path(folder: &str, task: &str) -> String {
    format!("{folder}/{}.json", crate::file_stem(task))
}

/// Where a package's files go, made as needed.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&path, bytes)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let cert = Certificate {
            schema: SCHEMA.into(),
            run_id: "r".into(),
            name: "n".into(),
            agent: "a".into(),
            benchmark: "b".into(),
            agenteval_version: "0".into(),
            tasks: vec![CertifiedTask {
                task_id: "t".into(),
                outcome: "passed".into(),
                passed: true,
                trajectory: Some("atif/t.json".into()),
                review: Some("reviews/t.json".into()),
                audit: "audit/t.json".into(),
            }],
            judge: serde_json::Value::Null,
            summary: serde_json::Value::Null,
        };
        write(d.path(), CERTIFICATE, &serde_json::to_vec(&cert).unwrap()).unwrap();
        write(d.path(), "atif/t.json", b"{}").unwrap();
        let review = Review {
            task_id: "t".into(),
            earned: Some(true),
            why: "ok".into(),
            model: "m".into(),
            prompt_sha256: "p".into(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
        };
        write(d.path(), "reviews/t.json", &serde_json::to_vec(&review).unwrap()).unwrap();
        write(d.path(), "audit/t.json", &serde_json::to_vec(&Audit::default()).unwrap()).unwrap();
        let m = manifest_of(d.path()).unwrap();
        write(d.path(), MANIFEST, &serde_json::to_vec(&m).unwrap()).unwrap();
        d
    }

    #[test]
    fn a_clean_package_checks_and_every_change_is_named() {
        let d = package();
        assert!(check(d.path()).unwrap().ok(), "{:?}", check(d.path()).unwrap().problems);
        std::fs::write(d.path().join("atif/t.json"), b"{} ").unwrap();
        let c = check(d.path()).unwrap();
        assert!(c.problems.iter().any(|p| p.starts_with("atif/t.json: changed")), "{:?}", c.problems);
        std::fs::remove_file(d.path().join("reviews/t.json")).unwrap();
        std::fs::write(d.path().join("extra.txt"), b"x").unwrap();
        let c = check(d.path()).unwrap();
        assert!(c.problems.iter().any(|p| p.contains("review is missing")), "{:?}", c.problems);
        assert!(c.problems.iter().any(|p| p.starts_with("extra.txt: not in the manifest")), "{:?}", c.problems);
    }
}
