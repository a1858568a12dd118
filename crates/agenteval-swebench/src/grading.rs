//! The verdict on one instance, as the official harness reaches it (`swebench/harness/grading.py`
//! and `run_evaluation.py`, 5.x): the eval script as the harness runs it, the test log between
//! its markers read by the row's parser, FAIL_TO_PASS and PASS_TO_PASS checked with the
//! harness's rules (truncated ids, skipped tests, `fail_only` repositories), and the report
//! fields it writes. Beside the verdict, and never changing it: what makes the log suspect.

use agenteval_core::tamper::{self, Changes, GradingReads, Tampered};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::parsers::{self, ERROR, FAILED, PASSED, SKIPPED, StatusMap, XFAIL};

pub const APPLY_PATCH_FAIL: &str = ">>>>> Patch Apply Failed";
pub const APPLY_PATCH_PASS: &str = ">>>>> Applied Patch";
pub const RESET_FAILED: &str = ">>>>> Reset Failed";
pub const TESTS_ERROR: &str = ">>>>> Tests Errored";
pub const TESTS_TIMEOUT: &str = ">>>>> Tests Timed Out";
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";
const TEST_EXIT_CODE_VAR: &str = "SWEBENCH_TEST_EXIT_CODE";

/// Where the harness puts the patch in the container, and the commands it tries, in order,
/// until one applies it (each after the last one's leftovers are cleaned away).
pub const CONTAINER_PATCH_FILE: &str = "/tmp/patch.diff";
pub const GIT_APPLY_CMDS: [&str; 4] = [
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
];
/// What restores a pristine tree between two attempts.
pub const RESET_BETWEEN_ATTEMPTS: &str = "git checkout -- . ; git clean -fd";
/// Whether a patch none of the commands applied is already in the tree.
pub const ALREADY_APPLIED_CHECK: &str = "git apply --check --reverse";
/// The harness's default seconds for the eval script.
pub const DEFAULT_TIMEOUT_SECS: f64 = 1800.0;

/// The eval script as the harness runs it: the row's lines without its shebang and `set`
/// line, the test command's exit status recorded after the end marker, under
/// `#!/bin/bash` / `set -uxo pipefail`.
pub fn eval_script(row_script: &str) -> String {
    let lines: Vec<&str> =
        row_script.trim().split('\n').filter(|l| *l != "#!/bin/bash" && *l != "set -uxo pipefail").collect();
    let mut out = vec!["#!/bin/bash", "set -uxo pipefail"];
    let record = format!("{TEST_EXIT_CODE_VAR}=$?");
    let echo = format!("echo \"{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}\"");
    match lines.iter().position(|l| l.contains(END_TEST_OUTPUT)) {
        Some(i) => {
            out.extend(&lines[..i]);
            out.push(&record);
            out.push(lines[i]);
            out.push(&echo);
            out.extend(&lines[i + 1..]);
        }
        None => out.extend(&lines),
    }
    out.join("\n") + "\n"
}

/// The test command's exit status as the eval script recorded it.
pub fn test_exit_code(log: &str) -> Option<i64> {
    static RE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(&format!(r"{}:\s*(-?\d+)", regex::escape(TEST_EXIT_CODE))).expect("valid"));
    RE.captures(log).and_then(|c| c[1].parse().ok())
}

/// Evidence that a test runner ran at all, for a log whose parser found nothing.
static SUITE_RAN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?m)Executed [1-9]\d* of \d+|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)|[1-9]\d* passing|Tests:\s+[1-9]\d*|Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total|^# tests [1-9]\d*|[1-9]\d* specs?, \d+ failures?|': ok$",
    )
    .expect("valid")
});

/// The tests' statuses the log shows, or `None` where the harness finds no usable log (a
/// failure marker, no markers, nothing parsed and no sign of a runner, or a non-zero test exit
/// with no failure in the log).
pub fn logs_eval(parser: parsers::Parser, log: &str) -> Option<StatusMap> {
    if [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT].iter().any(|c| log.contains(c)) {
        return None;
    }
    if !(log.contains(START_TEST_OUTPUT) && log.contains(END_TEST_OUTPUT)) {
        return None;
    }
    let sliced = log.split(START_TEST_OUTPUT).nth(1).unwrap_or_default();
    let sliced = sliced.split(END_TEST_OUTPUT).next().unwrap_or_default();
    let mut map = parser(sliced);
    if map.is_empty() {
        map = parser(log);
    }
    if map.is_empty() && !SUITE_RAN.is_match(log) {
        return None;
    }
    let exit = test_exit_code(log);
    if !matches!(exit, None | Some(0)) && !map.is_empty() && !map.values().any(|s| s == FAILED || s == ERROR) {
        return None;
    }
    Some(map)
}

/// How a row's tests are judged (`eval_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalType {
    PassAndFail,
    /// Only a test logged as failed fails (repositories whose parser sees only failures).
    FailOnly,
}

impl EvalType {
    pub fn parse(s: &str) -> Option<EvalType> {
        match s {
            "pass_and_fail" => Some(EvalType::PassAndFail),
            "fail_only" => Some(EvalType::FailOnly),
            _ => None,
        }
    }
}

/// The key of `case` in the map: itself, or for an id truncated inside its parameters (`[`
/// outnumbering `]`), the first longer id when all of them agree on pass or fail.
fn resolve_case<'a>(case: &'a str, map: &'a StatusMap) -> Option<&'a str> {
    if map.contains_key(case) {
        return Some(case);
    }
    if case.matches('[').count() > case.matches(']').count() {
        let matches: Vec<&String> = map.keys().filter(|k| k.starts_with(case)).collect();
        let passing = |k: &String| matches!(map[k].as_str(), PASSED | XFAIL);
        if let Some(first) = matches.first()
            && matches.iter().all(|k| passing(k) == passing(first))
        {
            return Some(first.as_str());
        }
    }
    None
}

fn test_passed(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_some_and(|k| matches!(map[k].as_str(), PASSED | XFAIL))
}

fn test_maintained(case: &str, map: &StatusMap) -> bool {
    test_passed(case, map) || resolve_case(case, map).is_some_and(|k| map[k] == SKIPPED)
}

fn test_failed(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_none_or(|k| matches!(map[k].as_str(), FAILED | ERROR | SKIPPED))
}

/// One list's outcome, in the harness's report shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

/// `tests_status`: FAIL_TO_PASS and PASS_TO_PASS (and the two lists the harness reports empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestsStatus {
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Outcome,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Outcome,
    #[serde(rename = "FAIL_TO_FAIL")]
    pub fail_to_fail: Outcome,
    #[serde(rename = "PASS_TO_FAIL")]
    pub pass_to_fail: Outcome,
}

impl TestsStatus {
    /// Resolved: no FAIL_TO_PASS and no PASS_TO_PASS test failed (the harness's `RESOLVED_FULL`).
    pub fn resolved(&self) -> bool {
        self.fail_to_pass.failure.is_empty() && self.pass_to_pass.failure.is_empty()
    }
}

/// FAIL_TO_PASS and PASS_TO_PASS against the statuses the log shows.
pub fn tests_status(map: &StatusMap, f2p: &[String], p2p: &[String], eval_type: EvalType) -> TestsStatus {
    let check = |cases: &[String], maintained: bool| {
        let mut o = Outcome::default();
        for c in cases {
            match eval_type {
                EvalType::FailOnly => {
                    if map.get(c).is_some_and(|s| s == FAILED) {
                        o.failure.push(c.clone())
                    } else {
                        o.success.push(c.clone())
                    }
                }
                EvalType::PassAndFail => {
                    let ok = if maintained { test_maintained(c, map) } else { test_passed(c, map) };
                    if ok {
                        o.success.push(c.clone());
                    } else if test_failed(c, map) {
                        o.failure.push(c.clone());
                    }
                }
            }
        }
        o
    };
    TestsStatus { fail_to_pass: check(f2p, false), pass_to_pass: check(p2p, true), ..Default::default() }
}

/// The harness's report of one instance (`report.json`'s value), plus agenteval's doubts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceReport {
    #[serde(rename = "patch_is_None")]
    pub patch_is_none: bool,
    pub patch_exists: bool,
    pub patch_successfully_applied: bool,
    pub resolved: bool,
    pub infra_failure: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_status: Option<TestsStatus>,
}

/// The report of a patch that was applied and tested, from its test log.
pub fn report(
    parser: parsers::Parser,
    log: &str,
    f2p: &[String],
    p2p: &[String],
    eval_type: EvalType,
) -> InstanceReport {
    let mut r = InstanceReport { patch_exists: true, ..Default::default() };
    let Some(map) = logs_eval(parser, log) else { return r };
    r.patch_successfully_applied = true;
    let status = tests_status(&map, f2p, p2p, eval_type);
    r.resolved = status.resolved();
    r.tests_status = Some(status);
    r
}

/// The files a patch changes (`diff --git a/X b/Y`: `Y`, or `X` for a deletion).
fn patched_files(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = patch
        .lines()
        .filter_map(|l| l.strip_prefix("diff --git "))
        .filter_map(|rest| {
            rest.split_once(" b/").map(|(a, b)| if b.is_empty() { a.trim_start_matches("a/") } else { b })
        })
        .map(|f| f.trim().trim_matches('"').to_string())
        .collect();
    out.dedup();
    out
}

/// The tamper audit of a prediction (`agenteval_core::tamper`'s rules): the files of `patch`
/// that change what runs or judges the tests rather than the code they test (a `conftest.py`
/// that marks every test passed, pytest's configuration, `sitecustomize`, a `.pth` file, or the
/// instance's own test files, those the diffs in `tests_from` change: its test patch, or the
/// eval script that applies it), absolute under `workdir`. The official verdict stands.
pub fn machinery_touched(patch: &str, tests_from: &str, workdir: &str) -> Vec<Tampered> {
    let w = workdir.trim_end_matches('/');
    let reads = GradingReads {
        workdir: w.to_string(),
        test_files: patched_files(tests_from).into_iter().map(|f| format!("{w}/{f}")).collect(),
        ..GradingReads::default()
    };
    tamper::audit(&reads, &Changes { patch: Some(patch), ..Changes::default() })
}

/// What makes a test log untrustworthy beside its verdict: output that claims passes the test
/// command did not make (it exited before its runner's summary, the log names more passes than
/// the runner counted, or the same test twice with different outcomes). A non-zero exit with
/// no failure logged the harness itself refuses (see [`logs_eval`]). Each one
/// line; empty when nothing is suspect. The official verdict stands either way.
pub fn suspects(parser: parsers::Parser, log: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !(log.contains(START_TEST_OUTPUT) && log.contains(END_TEST_OUTPUT)) {
        return out;
    }
    let sliced = log.split(START_TEST_OUTPUT).nth(1).unwrap_or_default();
    let sliced = sliced.split(END_TEST_OUTPUT).next().unwrap_or_default();
    let map = parser(sliced);
    let passes = map.values().filter(|s| matches!(s.as_str(), PASSED | XFAIL)).count();
    match runner_count(sliced) {
        Some(counted) if passes > counted => out.push(format!(
            "the output claims {passes} passing test(s) but the test runner counted {counted}: lines were printed by something else"
        )),
        None if passes > 0 => out.push(
            "the output claims passes but has no test runner's summary line: the test command may have exited early"
                .into(),
        ),
        _ => {}
    }
    let conflicting = conflicting_lines(sliced);
    if let Some(first) = conflicting.first() {
        out.push(format!(
            "{} test(s) reported both passing and failing (first: {first}): lines were printed by something else",
            conflicting.len()
        ));
    }
    out
}

/// How many tests the runner's own summary says ran and passed (pytest's `== 2 passed, 1 failed
/// in 0.1s ==`, unittest's `Ran 3 tests`), when it printed one.
fn runner_count(log: &str) -> Option<usize> {
    static PYTEST: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)^=+ (.*\b(?:passed|failed|error|errors|skipped|xfailed|xpassed|deselected|warnings?)\b.*) in [\d.]+ ?s.*=+\s*$").expect("valid")
    });
    static PYTEST_PART: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(\d+) (passed|xfailed|xpassed)").expect("valid"));
    static UNITTEST: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?m)^Ran (\d+) tests? in ").expect("valid"));
    // A script may run the runner more than once: every summary counts.
    let summaries: Vec<usize> = PYTEST
        .captures_iter(log)
        .map(|c| PYTEST_PART.captures_iter(&c[1]).filter_map(|p| p[1].parse::<usize>().ok()).sum())
        .collect();
    if !summaries.is_empty() {
        return Some(summaries.iter().sum());
    }
    let ran: Vec<usize> = UNITTEST.captures_iter(log).filter_map(|c| c[1].parse().ok()).collect();
    (!ran.is_empty()).then(|| ran.iter().sum())
}

/// Test ids the log reports both as passing and as failing, in `STATUS id` or `id ... ok` lines.
fn conflicting_lines(log: &str) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for line in log.split('\n') {
        let line = line.trim();
        let (id, pass) = if let Some(rest) = line.strip_prefix("PASSED ") {
            (rest.split_whitespace().next().unwrap_or_default(), true)
        } else if let Some(rest) = line.strip_prefix("FAILED ").or_else(|| line.strip_prefix("ERROR ")) {
            (rest.split_whitespace().next().unwrap_or_default(), false)
        } else if let Some((id, verdict)) = line.rsplit_once(" ... ") {
            match verdict {
                "ok" | "OK" => (id, true),
                "FAIL" | "ERROR" => (id, false),
                _ => continue,
            }
        } else {
            continue;
        };
        if id.is_empty() {
            continue;
        }
        let e = seen.entry(id.to_string()).or_default();
        if pass { e.0 = true } else { e.1 = true }
    }
    seen.into_iter().filter(|(_, (p, f))| *p && *f).map(|(k, _)| k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_to_the_test_machinery_is_named() {
        let conftest = "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1,2 @@\n+import pytest\n+def pytest_runtest_makereport(item, call): pass\n";
        let code = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x\n+y\n";
        let tests = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n";
        let cfg =
            "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1 +1,2 @@\n+[tool:pytest]\n";
        let meta = "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1 +1 @@\n-version = 1\n+version = 2\n";
        let touched = |p: &str, t: &str| machinery_touched(p, t, "/testbed/");
        assert!(touched(code, tests).is_empty(), "a fix of the code is none of it");
        let found = touched(&format!("{code}{conftest}"), tests);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "/testbed/conftest.py", "{found:?}");
        assert!(touched(tests, tests)[0].why.contains("test file"));
        assert!(touched(cfg, "")[0].why.contains("pytest's configuration"));
        assert!(touched(meta, "").is_empty(), "setup.cfg without pytest is the package's");
        let pth = "diff --git a/site/x.pth b/site/x.pth\n";
        assert!(touched(pth, "")[0].why.contains(".pth"));
    }

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    fn log(body: &str, exit: i64) -> String {
        format!(
            "+ git apply\n+ : '{START_TEST_OUTPUT}'\n{body}\n+ SWEBENCH_TEST_EXIT_CODE={exit}\n+ : '{END_TEST_OUTPUT}'\n{TEST_EXIT_CODE}: {exit}\n"
        )
    }

    #[test]
    fn the_eval_script_records_the_test_exit_code_after_the_end_marker() {
        let row = "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA\n: '>>>>> End Test Output'\ngit checkout x\n";
        let s = eval_script(row);
        assert_eq!(
            s,
            "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA\nSWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End Test Output'\necho \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\ngit checkout x\n"
        );
        assert_eq!(eval_script("echo hi"), "#!/bin/bash\nset -uxo pipefail\necho hi\n", "no marker: untouched");
    }

    #[test]
    fn resolved_needs_every_fail_to_pass_passing_and_pass_to_pass_passing_or_skipped() {
        let p = parsers::pytest;
        let (f2p, p2p) = (v(&["t.py::a"]), v(&["t.py::b", "t.py::c"]));
        let ok = log("PASSED t.py::a\nPASSED t.py::b\nSKIPPED t.py::c", 0);
        let r = report(p, &ok, &f2p, &p2p, EvalType::PassAndFail);
        assert!(r.resolved && r.patch_successfully_applied, "{r:?}");
        let f2p_skipped = log("SKIPPED t.py::a\nPASSED t.py::b\nPASSED t.py::c", 0);
        assert!(!report(p, &f2p_skipped, &f2p, &p2p, EvalType::PassAndFail).resolved, "a skipped F2P is no fix");
        let missing = log("PASSED t.py::a\nPASSED t.py::b", 0);
        let r = report(p, &missing, &f2p, &p2p, EvalType::PassAndFail);
        assert!(!r.resolved, "a missing P2P test failed");
        assert_eq!(r.tests_status.unwrap().pass_to_pass.failure, v(&["t.py::c"]));
        let fail_only = log("FAILED t.py::b", 1);
        assert!(!report(p, &fail_only, &f2p, &p2p, EvalType::FailOnly).resolved);
        let none_failed = log("PASSED t.py::zzz\nFAILED t.py::other", 1);
        assert!(report(p, &none_failed, &f2p, &p2p, EvalType::FailOnly).resolved, "fail_only: absent is success");
    }

    #[test]
    fn no_usable_log_is_not_applied_and_not_resolved() {
        let p = parsers::pytest;
        let f2p = v(&["t.py::a"]);
        for bad in [
            format!("{APPLY_PATCH_FAIL}\n{}", log("PASSED t.py::a", 0)),
            "PASSED t.py::a".to_string(),
            log("nothing ran", 0),
            // A non-zero test exit with no failure in the log: the log is not the run's.
            log("PASSED t.py::a", 2),
        ] {
            let r = report(p, &bad, &f2p, &[], EvalType::PassAndFail);
            assert!(!r.patch_successfully_applied && !r.resolved, "{bad}");
        }
    }

    #[test]
    fn a_truncated_parametrized_id_matches_when_its_candidates_agree() {
        let map: StatusMap =
            [("t.py::x[a(b)]", PASSED), ("t.py::x[a(c)]", PASSED), ("t.py::y[1]", PASSED), ("t.py::y[2]", FAILED)]
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
        assert!(test_passed("t.py::x[a(", &map));
        assert!(!test_passed("t.py::y[", &map) && test_failed("t.py::y[", &map), "candidates disagree");
        assert!(!test_passed("t.py::x", &map), "no open bracket: exact only");
    }

    #[test]
    fn fake_passes_are_suspect_without_changing_the_verdict() {
        let p = parsers::pytest;
        let honest = log("PASSED t.py::a\n============ 1 passed in 0.01s ============", 0);
        assert!(suspects(p, &honest).is_empty());
        let early = log("PASSED t.py::a", 0);
        assert!(suspects(p, &early)[0].contains("exited early"));
        let printed = log("PASSED t.py::a\nPASSED t.py::b\n===== 1 failed, 1 passed in 0.1s =====", 0);
        assert!(suspects(p, &printed)[0].contains("counted 1"));
        let both = log("PASSED t.py::a\nFAILED t.py::a - x\n===== 1 failed in 0.1s =====", 1);
        assert!(suspects(p, &both).iter().any(|s| s.contains("both passing and failing")));
        let unittest = log("test_a (m.T) ... ok\n----\nRan 1 test in 0.001s\n\nOK", 0);
        assert!(suspects(parsers::django, &unittest).is_empty());
    }
}
