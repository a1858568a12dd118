//! The log parsers SWE-bench's Python repositories name (`parse_log_pytest`, `parse_log_django`,
//! …), ported line for line from the official harness (`swebench/harness/log_parsers/python.py`,
//! 5.x): each turns a test log into a map of test id to status.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

/// A test's status as a parser reads it (`PASSED`, `FAILED`, `SKIPPED`, `ERROR`, `XFAIL`).
pub type StatusMap = BTreeMap<String, String>;

pub const FAILED: &str = "FAILED";
pub const PASSED: &str = "PASSED";
pub const SKIPPED: &str = "SKIPPED";
pub const ERROR: &str = "ERROR";
pub const XFAIL: &str = "XFAIL";
/// In the harness's order (its `TestStatus` enum), which `startswith` checks follow.
const STATUSES: [&str; 5] = [FAILED, PASSED, SKIPPED, ERROR, XFAIL];

/// A parser of test logs.
pub type Parser = fn(&str) -> StatusMap;

/// The parser a row's `log_parser` names, if agenteval has it.
pub fn parser(name: &str) -> Option<Parser> {
    Some(match name {
        "parse_log_pytest"
        | "parse_log_astroid"
        | "parse_log_flask"
        | "parse_log_marshmallow"
        | "parse_log_pvlib"
        | "parse_log_pyvista"
        | "parse_log_sqlfluff"
        | "parse_log_xarray" => pytest,
        "parse_log_pytest_options" | "parse_log_pydicom" | "parse_log_requests" | "parse_log_pylint" => pytest_options,
        "parse_log_pytest_v2" | "parse_log_astropy" | "parse_log_scikit" | "parse_log_sphinx" => pytest_v2,
        "parse_log_django" => django,
        "parse_log_seaborn" => seaborn,
        "parse_log_sympy" => sympy,
        "parse_log_matplotlib" => matplotlib,
        _ => return None,
    })
}

/// Every parser name [`parser`] knows, for messages.
pub const KNOWN: &[&str] = &[
    "parse_log_pytest",
    "parse_log_pytest_options",
    "parse_log_pytest_v2",
    "parse_log_django",
    "parse_log_seaborn",
    "parse_log_sympy",
    "parse_log_matplotlib",
    "parse_log_astroid",
    "parse_log_flask",
    "parse_log_marshmallow",
    "parse_log_pvlib",
    "parse_log_pyvista",
    "parse_log_sqlfluff",
    "parse_log_xarray",
    "parse_log_pydicom",
    "parse_log_requests",
    "parse_log_pylint",
    "parse_log_astropy",
    "parse_log_scikit",
    "parse_log_sphinx",
];

/// Python's `str.split()`: runs of whitespace, none empty.
fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)).filter(|w| !w.is_empty()).collect()
}

/// Python's `str.split("\n")`.
fn lines(log: &str) -> std::str::Split<'_, char> {
    log.split('\n')
}

fn starts_with_status(line: &str) -> bool {
    STATUSES.iter().any(|s| line.starts_with(s))
}

/// pytest's `SKIPPED [N] path:line: reason` summary, where `[N]` is not a test.
fn is_skip_summary(status: &str, name: &str) -> bool {
    static COUNT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\[\d+\]$").expect("valid"));
    status == SKIPPED && COUNT.is_match(name)
}

/// `parse_log_pytest`: `STATUS test_id` lines (`-rA`).
pub fn pytest(log: &str) -> StatusMap {
    pytest_with(log, |l| l.to_string(), |id| id.to_string())
}

fn pytest_with(log: &str, pre: impl Fn(&str) -> String, name: impl Fn(&str) -> String) -> StatusMap {
    let mut map = StatusMap::new();
    for line in lines(log) {
        let mut line = pre(line);
        if !starts_with_status(&line) {
            continue;
        }
        if line.starts_with(FAILED) {
            line = line.replace(" - ", " ");
        }
        let case = words(&line);
        if case.len() <= 1 || is_skip_summary(case[0], case[1]) {
            continue;
        }
        map.insert(name(case[1]), case[0].to_string());
    }
    map
}

/// `parse_log_pytest_options`: as pytest, with a parameter that is an absolute path cut to its
/// last part (`test_x[/tmp/a/b]` is `test_x[/b]`).
pub fn pytest_options(log: &str) -> StatusMap {
    static OPTION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(.*?)\[(.*)\]").expect("valid"));
    pytest_with(
        log,
        |l| l.to_string(),
        |id| match OPTION.captures(id) {
            Some(c) => {
                let (main, mut option) = (c[1].to_string(), c[2].to_string());
                if option.starts_with('/') && !option.starts_with("//") && !option.contains('*') {
                    option = format!("/{}", option.rsplit('/').next().unwrap_or_default());
                }
                format!("{main}[{option}]")
            }
            None => id.to_string(),
        },
    )
}

/// `parse_log_matplotlib`: as pytest, with mouse buttons named as numbers.
pub fn matplotlib(log: &str) -> StatusMap {
    pytest_with(log, |l| l.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"), |id| id.to_string())
}

/// `parse_log_pytest_v2`: colour codes and control characters dropped; a test id may hold
/// spaces; an older pytest's `test_id STATUS` lines too.
pub fn pytest_v2(log: &str) -> StatusMap {
    static COLOUR: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\[(\d+)m").expect("valid"));
    let mut map = StatusMap::new();
    for line in lines(log) {
        let line = COLOUR.replace_all(line, "");
        let line: String = line.chars().filter(|c| !('\u{1}'..='\u{1f}').contains(c)).collect();
        if starts_with_status(&line) {
            let line = if line.starts_with(FAILED) { line.split(" - ").next().unwrap_or_default() } else { &line };
            let case = words(line);
            if case.len() >= 2 && !is_skip_summary(case[0], case[1]) {
                map.insert(case[1..].join(" "), case[0].to_string());
            }
        } else if STATUSES.iter().any(|s| line.ends_with(s)) {
            let case = words(&line);
            if case.len() >= 2 {
                map.insert(case[..case.len() - 1].join(" "), case[case.len() - 1].to_string());
            }
        }
    }
    map
}

/// `parse_log_django`: Django's (and unittest's verbose) `test (module.Class) ... ok` lines.
// Long: the harness's rules in its order, each a line or two; split, they would hide that order.
pub fn django(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    let mut prev: Option<String> = None;
    for line in lines(log) {
        let mut line = line.trim().to_string();
        if line.contains("--version is equivalent to version") {
            map.insert("--version is equivalent to version".into(), PASSED.into());
        }
        if line.contains(" ... ") {
            prev = line.split(" ... ").next().map(String::from);
        }
        for suffix in [" ... ok", " ... OK", " ...  OK"] {
            if line.ends_with(suffix) {
                if line.trim().starts_with("Applying sites.0002_alter_domain_unique...test_no_migrations") {
                    line = line.split_once("...").map_or("", |(_, r)| r).trim().to_string();
                }
                let test = line.rsplit_once(suffix).map_or("", |(l, _)| l);
                map.insert(test.to_string(), PASSED.into());
                break;
            }
        }
        if line.contains(" ... skipped") {
            map.insert(line.split(" ... skipped").next().unwrap_or_default().to_string(), SKIPPED.into());
        }
        if line.ends_with(" ... FAIL") {
            map.insert(line.split(" ... FAIL").next().unwrap_or_default().to_string(), FAILED.into());
        }
        if line.starts_with("FAIL:")
            && let Some(t) = words(&line).get(1)
        {
            map.insert(t.trim().to_string(), FAILED.into());
        }
        if line.ends_with(" ... ERROR") {
            map.insert(line.split(" ... ERROR").next().unwrap_or_default().to_string(), ERROR.into());
        }
        if line.starts_with("ERROR:")
            && let Some(t) = words(&line).get(1)
        {
            map.insert(t.trim().to_string(), ERROR.into());
        }
        if line.trim_start().starts_with("ok")
            && let Some(p) = &prev
        {
            map.insert(p.clone(), PASSED.into());
        }
    }
    static PATTERNS: LazyLock<[Regex; 3]> = LazyLock::new(|| {
        [
            r"(?m)^(.*?)\s\.\.\.\sTesting against Django installed in ((?s:.*?)) silenced\)\.\nok$",
            r"(?m)^(.*?)\s\.\.\.\sInternal Server Error: /(.*)/\nok$",
            r"(?m)^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
        ]
        .map(|p| Regex::new(p).expect("valid"))
    });
    for p in PATTERNS.iter() {
        for c in p.captures_iter(log) {
            map.insert(c[1].to_string(), PASSED.into());
        }
    }
    map
}

/// `parse_log_seaborn`.
pub fn seaborn(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in lines(log) {
        let parts = words(line);
        if parts.len() < 2 {
            continue;
        }
        if line.starts_with(FAILED) {
            map.insert(parts[1].to_string(), FAILED.into());
        } else if line.contains(" PASSED ") {
            if parts[1] == PASSED {
                map.insert(parts[0].to_string(), PASSED.into());
            }
        } else if line.starts_with(PASSED) {
            map.insert(parts[1].to_string(), PASSED.into());
        }
    }
    map
}

/// `parse_log_sympy`: sympy's own runner (`test_x ok`, `test_y F`, `____ file.py:test_z ____`).
pub fn sympy(log: &str) -> StatusMap {
    static FAILURE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(_*) (.*)\.py:(.*) (_*)").expect("valid"));
    let mut map = StatusMap::new();
    for c in FAILURE.captures_iter(log) {
        map.insert(format!("{}.py:{}", &c[2], &c[3]), FAILED.into());
    }
    for line in lines(log) {
        let line = line.trim();
        if !line.starts_with("test_") {
            continue;
        }
        let first = words(line).first().map(|s| s.to_string()).unwrap_or_default();
        if line.ends_with(" E") {
            map.insert(first.clone(), ERROR.into());
        }
        if line.ends_with(" F") {
            map.insert(first.clone(), FAILED.into());
        }
        if line.ends_with(" ok") {
            map.insert(first, PASSED.into());
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> StatusMap {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn pytest_reads_ra_lines_and_drops_the_skip_summary_and_failure_messages() {
        let log = "PASSED tests/test_a.py::test_one\nFAILED tests/test_a.py::test_two - AssertionError: x\nSKIPPED [1] tests/test_a.py:9: no\nSKIPPED tests/test_a.py::test_three\nXFAIL tests/test_a.py::test_four\nPASSED\nnoise PASSED x";
        assert_eq!(
            pytest(log),
            m(&[
                ("tests/test_a.py::test_one", PASSED),
                ("tests/test_a.py::test_two", FAILED),
                ("tests/test_a.py::test_three", SKIPPED),
                ("tests/test_a.py::test_four", XFAIL),
            ])
        );
    }

    #[test]
    fn pytest_options_cuts_an_absolute_path_parameter() {
        let log = "PASSED t.py::test_x[/tmp/a/b.txt]\nPASSED t.py::test_y[//net]\nPASSED t.py::test_z[a-b]";
        assert_eq!(
            pytest_options(log),
            m(&[("t.py::test_x[/b.txt]", PASSED), ("t.py::test_y[//net]", PASSED), ("t.py::test_z[a-b]", PASSED)])
        );
    }

    #[test]
    fn pytest_v2_keeps_spaces_and_reads_the_older_form() {
        let log = "\x1b[32mPASSED\x1b[0m t.py::test_a[a b]\nFAILED t.py::test_b - boom - more\nt.py::test_c PASSED";
        assert_eq!(
            pytest_v2(log),
            m(&[("t.py::test_a[a b]", PASSED), ("t.py::test_b", FAILED), ("t.py::test_c", PASSED)])
        );
    }

    #[test]
    fn django_reads_verbose_unittest_lines_and_their_continuations() {
        let log = "test_a (app.tests.T) ... ok\ntest_b (app.tests.T) ... FAIL\ntest_c (app.tests.T) ... skipped 'no'\ntest_d (app.tests.T) ... ERROR\ntest_e (app.tests.T) ... some output\nok\nFAIL: test_f (app.tests.T)\ntest_g (app.tests.T) ... System check identified no issues (0 silenced)\nok";
        let got = django(log);
        assert_eq!(got["test_a (app.tests.T)"], PASSED);
        assert_eq!(got["test_b (app.tests.T)"], FAILED);
        assert_eq!(got["test_c (app.tests.T)"], SKIPPED);
        assert_eq!(got["test_d (app.tests.T)"], ERROR);
        assert_eq!(got["test_e (app.tests.T)"], PASSED);
        assert_eq!(got["test_f"], FAILED);
        assert_eq!(got["test_g (app.tests.T)"], PASSED);
    }

    #[test]
    fn sympy_and_seaborn_read_their_runners() {
        let log = "test_one ok\ntest_two F\ntest_three E\n________ sympy/core/tests/test_x.py:test_four ________";
        let got = sympy(log);
        assert_eq!(got["test_one"], PASSED);
        assert_eq!(got["test_two"], FAILED);
        assert_eq!(got["test_three"], ERROR);
        assert_eq!(got["sympy/core/tests/test_x.py:test_four"], FAILED);
        let got = seaborn("t.py::a PASSED [ 50%]\nFAILED t.py::b - x\nPASSED t.py::c");
        assert_eq!(got, m(&[("t.py::a", PASSED), ("t.py::b", FAILED), ("t.py::c", PASSED)]));
    }

    #[test]
    fn every_known_name_has_a_parser_and_others_none() {
        for n in KNOWN {
            assert!(parser(n).is_some(), "{n}");
        }
        assert!(parser("parse_log_jest").is_none());
    }
}
