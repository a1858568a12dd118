//! The tamper audit of an attempt, between verify and grade: what its grading reads (gathered
//! from the task's tests and the verifier's folders) against what the agent changed (its patch,
//! the files it changed outside its working folder, what it left for the verifier). The rules
//! are the core's (`agenteval_core::tamper`); the findings go to the result, the verdict stands.

use std::path::Path;
use std::time::{Duration, SystemTime};

use agenteval_core::environment::{ExecRequest, verifier_paths};
use agenteval_core::tamper::{self, Changes, GradingReads, Tampered};
use agenteval_core::traits::{EnvSession, TaskEnvironment};

use super::attempt::Attempt;
use super::plan::Plan;
use super::verify::Verified;

/// The most of a task's test files read for what they import and run.
const MAX_TEST_FILES: usize = 200;
const MAX_TEST_FILE_BYTES: u64 = 1 << 20;
/// The most files named from the verifier's folders.
const MAX_LEFT: usize = 200;

/// Audits the attempt: the findings are said in its log and added to the task's findings.
/// `since` is when the agent started: what is older in the verifier's folders is the image's.
pub(super) async fn audit(
    plan: &Plan,
    verified: &Verified,
    env: &TaskEnvironment,
    since: SystemTime,
    at: &mut Attempt,
) -> Vec<Tampered> {
    let Some(s) = &env.session else { return Vec::new() };
    let root = s.env.worker_root(&s.handle);
    let (tests_dir, logs_dir, _) = verifier_paths(&root);
    let mut reads = GradingReads {
        workdir: s.handle.workdir.clone(),
        verifier_dirs: vec![tests_dir.clone(), logs_dir.clone()],
        ..GradingReads::default()
    };
    if let Some(dir) = verified.task.solution.as_deref().filter(|d| d.is_dir()) {
        reads.solution_words = Some(solution_words(dir));
    }
    if let Some(spec) = &verified.task.tests {
        if let Some(dir) = &spec.dir {
            read_tests(dir, &mut reads);
        }
        if let Some(c) = &spec.command {
            reads.programs.extend(tamper::words_of(c));
        }
    }
    let left = match plan.by_tests {
        true => left_for_verifier(s, &[&tests_dir, &logs_dir], since).await,
        false => Vec::new(),
    };
    let changes = Changes { patch: at.patch.as_deref(), outside: &verified.changed, at_verifier: &left };
    let found = tamper::audit(&reads, &changes);
    if !found.is_empty() {
        let shown: Vec<String> = found.iter().take(5).map(ToString::to_string).collect();
        let more = if found.len() > 5 { format!(" and {} more", found.len() - 5) } else { String::new() };
        at.say(format!(
            "tampered: the agent changed {} file(s) its grading reads: {}{more} (the verdict stands)",
            found.len(),
            shown.join("; ")
        ));
        let mut findings = env.findings.lock().expect("not poisoned");
        merge(&mut findings.tampered, found.clone());
    }
    found
}

/// Adds `more` to `into`, each path once (the first reason found for it stays).
fn merge(into: &mut Vec<Tampered>, more: Vec<Tampered>) {
    for t in more {
        if !into.iter().any(|x| x.path == t.path) {
            into.push(t);
        }
    }
}

/// Each small file of `dir` and its folders (at most [`MAX_TEST_FILES`] files, each at most
/// [`MAX_TEST_FILE_BYTES`]), with its text: what the audit reads of a task's tests and solution.
fn each_small_file(dir: &Path, mut f: impl FnMut(&Path, &str)) {
    let mut todo = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            let p = e.path();
            if kind.is_dir() {
                todo.push(p);
                continue;
            }
            seen += 1;
            if seen > MAX_TEST_FILES || !kind.is_file() || !e.metadata().is_ok_and(|m| m.len() <= MAX_TEST_FILE_BYTES) {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&p) {
                f(&p, &text);
            }
        }
    }
}

/// What the tests import and the programs their scripts name, from the task's tests folder.
fn read_tests(dir: &Path, reads: &mut GradingReads) {
    each_small_file(dir, |p, text| match p.extension().and_then(|x| x.to_str()) {
        Some("py") => {
            reads.imports.extend(tamper::imports_of(text));
            reads.import_dirs.extend(tamper::import_dirs_of(text));
        }
        Some("sh" | "bash") => reads.programs.extend(tamper::words_of(text)),
        _ => {}
    });
}

/// Every word of the task's reference solution folder (its scripts, patches and files' names).
fn solution_words(dir: &Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    each_small_file(dir, |p, text| {
        // A file's own name counts: a solution that ships `checker.py` changes it.
        out.extend(tamper::solution_words_of(&p.file_name().unwrap_or_default().to_string_lossy()));
        out.extend(tamper::solution_words_of(text));
    });
    out
}

/// The files in the verifier's folders changed since the agent started (by their status-change
/// time, which no program sets back): the image's own are older.
async fn left_for_verifier(s: &EnvSession, dirs: &[&str], since: SystemTime) -> Vec<String> {
    // Two seconds of margin for the environment's clock.
    let epoch = since.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs().saturating_sub(2);
    let quoted: Vec<String> = dirs.iter().map(|d| crate::environments::quote(d)).collect();
    // A `find` without `-newerct` (busybox) names every file there.
    let cmd = format!(
        "for d in {}; do [ -d \"$d\" ] || continue; find \"$d\" -mindepth 1 ! -type d -newerct @{epoch} -print 2>/dev/null || find \"$d\" -mindepth 1 ! -type d -print; done | head -n {MAX_LEFT}",
        quoted.join(" ")
    );
    let req = ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(60)) }.as_grader();
    match s.env.exec(&s.handle, &req).await {
        Ok(out) => out.stdout.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect(),
        Err(_) => Vec::new(),
    }
}
