//! A task folder's digest as Harbor computes it (`Packager.compute_content_hash`, what a job's
//! `lock.json` records): its `task.toml`, `instruction.md`, `README.md` and `trajectory.json`,
//! and every file of `environment/`, `tests/`, `solution/` and `steps/`, less what
//! `.harborignore` files (in the tests' and solutions' folders) and the root `.gitignore` (else
//! Harbor's default ignores) leave out; each as `path\0sha256\n`, in path order.

use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sha2::{Digest as _, Sha256};

/// Harbor's ignores when a task has no `.gitignore`.
const DEFAULT_IGNORES: &[&str] = &["__pycache__/", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~"];

const IGNORE_FILE: &str = ".harborignore";

/// Whether a folder (relative, `/`-separated) is one whose `.harborignore` counts: the tests'
/// and solutions' folders, of the task or of a step, and those under them.
fn in_scope(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    matches!(parts.as_slice(), ["tests" | "solution", ..] | ["steps", _, "tests" | "solution", ..])
}

fn rel_of(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn ignore_file(dir: &Path) -> Option<Gitignore> {
    let path = dir.join(IGNORE_FILE);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut b = GitignoreBuilder::new(dir);
    b.add(&path);
    b.build().ok()
}

/// Walks `dir` in name order without following links: regular files whose `.harborignore`s in
/// scope do not leave them out (a folder left out is not entered).
fn walk(root: &Path, dir: &Path, specs: &mut Vec<(PathBuf, Gitignore)>, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let own = in_scope(&rel_of(root, dir)).then(|| ignore_file(dir)).flatten();
    let pushed = own.is_some();
    if let Some(g) = own {
        specs.push((dir.to_path_buf(), g));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let meta = std::fs::symlink_metadata(&p)?;
        if p.file_name().is_some_and(|n| n == IGNORE_FILE) {
            continue;
        }
        let is_dir = meta.is_dir();
        if in_scope(&rel_of(root, &p)) || in_scope(&rel_of(root, dir)) {
            // The last folder with a rule for it decides, as Harbor's filter reads them.
            let mut excluded = false;
            for (base, g) in specs.iter() {
                let m = g.matched(p.strip_prefix(base).unwrap_or(&p), is_dir);
                if m.is_ignore() {
                    excluded = true;
                } else if m.is_whitelist() {
                    excluded = false;
                }
            }
            if excluded {
                continue;
            }
        }
        if is_dir {
            walk(root, &p, specs, out)?;
        } else if meta.is_file() {
            out.push(p);
        }
    }
    if pushed {
        specs.pop();
    }
    Ok(())
}

/// The digest, `sha256:<hex>`.
pub fn task_digest(dir: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    for single in ["task.toml", "instruction.md", "README.md", "trajectory.json"] {
        let p = dir.join(single);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            files.push(p);
        }
    }
    for sub in ["environment", "tests", "solution", "steps"] {
        let p = dir.join(sub);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            walk(dir, &p, &mut Vec::new(), &mut files)?;
        }
    }
    let gitignore = dir.join(".gitignore");
    let root_rules = {
        let mut b = GitignoreBuilder::new(dir);
        if std::fs::symlink_metadata(&gitignore).is_ok_and(|m| m.is_file()) {
            b.add(&gitignore);
        } else {
            for l in DEFAULT_IGNORES {
                b.add_line(None, l).map_err(std::io::Error::other)?;
            }
        }
        b.build().map_err(std::io::Error::other)?
    };
    let mut kept: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|f| (rel_of(dir, &f), f))
        .filter(|(rel, _)| !root_rules.matched_path_or_any_parents(rel, false).is_ignore())
        .collect();
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    let mut outer = Sha256::new();
    for (rel, f) in kept {
        let sum = Sha256::digest(std::fs::read(&f)?);
        outer.update(format!("{rel}\0{}\n", hex::encode(sum)).as_bytes());
    }
    Ok(format!("sha256:{}", hex::encode(outer.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_files_do_not_change_the_digest_and_task_files_do() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("task.toml"), "version = \"1.0\"\n").unwrap();
        std::fs::write(d.path().join("instruction.md"), "do it\n").unwrap();
        std::fs::create_dir_all(d.path().join("tests/__pycache__")).unwrap();
        std::fs::write(d.path().join("tests/test.sh"), "exit 0\n").unwrap();
        let a = task_digest(d.path()).unwrap();
        assert!(a.starts_with("sha256:") && a.len() == 71, "{a}");
        std::fs::write(d.path().join("tests/__pycache__/x.pyc"), "junk").unwrap();
        std::fs::write(d.path().join("notes.txt"), "not a task file").unwrap();
        std::fs::write(d.path().join("tests/.harborignore"), "big.bin\n").unwrap();
        std::fs::write(d.path().join("tests/big.bin"), "left out").unwrap();
        assert_eq!(task_digest(d.path()).unwrap(), a);
        std::fs::write(d.path().join("tests/test.sh"), "exit 1\n").unwrap();
        assert_ne!(task_digest(d.path()).unwrap(), a);
    }
}
