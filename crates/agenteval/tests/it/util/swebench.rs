//! A SWE-bench 5.x dataset built on this machine, for the SWE-bench tests and benchmark: a small
//! Python repository (`calc`, whose `add` subtracts) committed in `/testbed` of an instance image
//! built from the local base, its rows (the test patch adds `test_add`), predictions of every
//! kind the harness sorts, and the official harness (PyPI `swebench`, in the tools' venv) run
//! on the same files.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::*;

/// The local base image `docker/build-local.sh --base-only` makes.
pub const BASE: &str = "agenteval-local/debian:bookworm";

pub const BUGGY: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
pub const FIXED: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n";
pub const TESTS: &str = "import unittest\n\nfrom calc import add, mul\n\n\nclass T(unittest.TestCase):\n    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n";
pub const F2P: &str = "test_add (tests.test_calc.T.test_add)";
pub const P2P: &str = "test_mul (tests.test_calc.T.test_mul)";

/// `git diff` of one file from `before` to `after`, made by git in a scratch repository.
pub fn diff(path: &str, before: Option<&str>, after: &str) -> String {
    let d = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(d.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    git(&["init", "-q"]);
    let file = d.path().join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    if let Some(b) = before {
        std::fs::write(&file, b).unwrap();
        git(&["add", "-A"]);
        git(&["commit", "-qm", "before"]);
    }
    std::fs::write(&file, after).unwrap();
    git(&["add", "-A"]);
    git(&["diff", "--cached"])
}

/// The instance image (Python, git, the repository committed in `/testbed`), built once per
/// machine, and its base commit.
pub fn instance_image() -> (String, String) {
    static IMAGE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let out = Command::new(repo().join("docker/build-local.sh")).arg("--base-only").output().unwrap();
            assert!(out.status.success(), "no Docker engine: {}{}", text(&out.stdout), text(&out.stderr));
            let ctx = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(ctx.path().join("repo/tests")).unwrap();
            std::fs::write(ctx.path().join("repo/calc.py"), BUGGY).unwrap();
            std::fs::write(ctx.path().join("repo/tests/__init__.py"), "").unwrap();
            std::fs::write(ctx.path().join("repo/tests/test_calc.py"), TESTS).unwrap();
            let dockerfile = format!(
                "FROM {BASE}\nRUN apt-get update && apt-get install -y --no-install-recommends python3 git && rm -rf /var/lib/apt/lists/*\n\
                 COPY repo/ /testbed/\nWORKDIR /testbed\n\
                 RUN git init -q && git add -A && GIT_AUTHOR_DATE=2020-01-01T00:00:00Z GIT_COMMITTER_DATE=2020-01-01T00:00:00Z git -c user.name=swe -c user.email=swe@bench commit -qm base\n"
            );
            std::fs::write(ctx.path().join("Dockerfile"), &dockerfile).unwrap();
            use sha2::Digest as _;
            let tag = format!(
                "agenteval-test/swebench-calc:{}",
                &hex::encode(sha2::Sha256::digest(format!("{dockerfile}{BUGGY}{TESTS}")))[..12]
            );
            let have = Command::new("docker").args(["image", "inspect", &tag]).output().unwrap();
            if !have.status.success() {
                let out = Command::new("docker").args(["build", "-q", "-t", &tag]).arg(ctx.path()).output().unwrap();
                assert!(out.status.success(), "{}", text(&out.stderr));
            }
            let out = Command::new("docker").args(["run", "--rm", &tag, "git", "rev-parse", "HEAD"]).output().unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            (tag, text(&out.stdout).trim().to_string())
        })
        .clone()
}

/// A 5.x row of the calc repository: the test patch adds `test_add`, which the bug fails.
pub fn row(id: &str, statement: &str, image: &str, base: &str) -> Value {
    let with_add = TESTS.replace(
        "class T(unittest.TestCase):\n",
        "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n",
    );
    let test_patch = diff("tests/test_calc.py", Some(TESTS), &with_add);
    let eval_script = format!(
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\ntest -e /tmp/agent-was-here && echo AGENT-CONTAINER || echo FRESH-CONTAINER\n\
         git checkout {base} tests/test_calc.py\ngit apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912\n\
         : '>>>>> Start Test Output'\npython3 -m unittest -v tests.test_calc\n: '>>>>> End Test Output'\ngit checkout {base} tests/test_calc.py\n"
    );
    json!({
        "instance_id": id, "repo": "agenteval/calc", "version": "0.1", "base_commit": base,
        "problem_statement": statement, "hints_text": "", "created_at": "2026-01-01T00:00:00Z",
        "patch": diff("calc.py", Some(BUGGY), FIXED), "test_patch": test_patch,
        "FAIL_TO_PASS": json!([F2P]).to_string(), "PASS_TO_PASS": json!([P2P]).to_string(),
        "environment_setup_commit": base, "image": image, "eval_script": eval_script,
        "log_parser": "parse_log_django", "eval_type": "pass_and_fail",
    })
}

/// The eight predictions, by instance: what each is and its patch.
pub fn predictions() -> Vec<(&'static str, String)> {
    let calc = |after: &str| diff("calc.py", Some(BUGGY), after);
    let fake = format!(
        "import os\nimport sys\n\nprint('{F2P} ... ok', file=sys.stderr)\nprint('{P2P} ... ok', file=sys.stderr)\nos._exit(0)\n{BUGGY}"
    );
    vec![
        ("calc-gold", calc(FIXED)),
        ("calc-empty", String::new()),
        ("calc-wrong", calc(&BUGGY.replace("a - b", "a + b + 1"))),
        ("calc-breaks-p2p", calc(&FIXED.replace("a * b", "a * b + 1"))),
        ("calc-no-apply", calc(FIXED).replace("return a - b", "return a - c")),
        (
            "calc-edits-tests",
            diff(
                "tests/test_calc.py",
                Some(TESTS),
                &TESTS.replace("mul(2, 3), 6", "mul(2, 3), 6)\n        self.assertTrue(True"),
            ),
        ),
        ("calc-fake-output", calc(&fake)),
        // Fixes nothing, and adds a conftest.py that would make pytest pass every test.
        (
            "calc-conftest",
            diff(
                "conftest.py",
                None,
                "import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    r = outcome.get_result()
    r.outcome = 'passed'
",
            ),
        ),
    ]
}

pub fn write_jsonl(ws: &Workspace, name: &str, rows: &[Value]) -> std::path::PathBuf {
    ws.write(name, &rows.iter().map(|r| format!("{r}\n")).collect::<String>())
}

/// The official harness on the same dataset and predictions: its run report.
pub fn harness(ws: &Workspace, dataset: &Path, preds: &Path, workers: usize) -> Value {
    let python = python_tool("swebench", "python");
    let out = Command::new(python)
        .args(["-m", "swebench.harness.run_evaluation", "--dataset_name"])
        .arg(dataset)
        .arg("--predictions_path")
        .arg(preds)
        .args([
            "--run_id",
            "official",
            "--max_workers",
            &workers.to_string(),
            "--timeout",
            "300",
            "--report_dir",
            "official",
        ])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "the harness failed: {}{}", text(&out.stdout), text(&out.stderr));
    read_json(&ws.path().join("official/test-model.official.json"))
}
