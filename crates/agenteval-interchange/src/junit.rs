//! JUnit XML for CI: one test case per task attempt (failures with their why, errored and
//! infra tasks as errors, tasks that never ran as skipped), one suite per run or per gate set,
//! in the shape Jenkins, GitLab and GitHub's test reporters read.

use std::collections::BTreeMap;

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};

use crate::{Error, Result};

/// What became of one test case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    /// Graded and wrong (`<failure>`).
    Failed,
    /// The agent errored or hit a limit (`<error type="errored">`).
    Errored,
    /// agenteval's infrastructure failed it: it says nothing about the agent (`<error type="infra">`).
    Infra,
    /// It never ran (`<skipped>`).
    Skipped,
    /// A gate that cannot decide (`<error type="inconclusive">`): never shown as a pass.
    Inconclusive,
}

/// One test case.
#[derive(Debug, Clone)]
pub struct Case {
    /// The suite it belongs to (a run's name and id, or `gates`).
    pub suite: String,
    pub name: String,
    pub seconds: f64,
    pub verdict: Verdict,
    /// Why it did not pass, in a line.
    pub why: String,
    /// Facts shown with the case (`cost_usd`, `attempt`, `tampered`), as `key: value` lines of
    /// its `<system-out>`: the JUnit schema has no properties on a test case.
    pub properties: Vec<(String, String)>,
}

#[derive(Default)]
struct Counts {
    tests: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
    seconds: f64,
}

impl Counts {
    fn add(&mut self, c: &Case) {
        self.tests += 1;
        self.seconds += c.seconds;
        match c.verdict {
            Verdict::Passed => {}
            Verdict::Failed => self.failures += 1,
            Verdict::Errored | Verdict::Infra | Verdict::Inconclusive => self.errors += 1,
            Verdict::Skipped => self.skipped += 1,
        }
    }

    /// The counts as attributes; `skipped` only on a suite, where the JUnit schema has it.
    fn attrs(&self, e: &mut BytesStart<'_>, suite: bool) {
        e.push_attribute(("tests", self.tests.to_string().as_str()));
        e.push_attribute(("failures", self.failures.to_string().as_str()));
        e.push_attribute(("errors", self.errors.to_string().as_str()));
        if suite {
            e.push_attribute(("skipped", self.skipped.to_string().as_str()));
        }
        e.push_attribute(("time", format!("{:.3}", self.seconds).as_str()));
    }
}

fn xml<E: std::fmt::Display>(e: E) -> Error {
    Error::Xml(e.to_string())
}

/// Text XML 1.0 can hold: control characters other than tab and newlines are dropped (a
/// task's output may hold any byte), as JUnit readers refuse the document otherwise.
fn clean(s: &str) -> String {
    s.chars().filter(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r')).collect()
}

/// The document: `<testsuites name=…>` with one `<testsuite>` per suite, in the order met.
pub fn document(name: &str, cases: &[Case]) -> Result<String> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_suite: BTreeMap<&str, Vec<&Case>> = BTreeMap::new();
    for c in cases {
        if !by_suite.contains_key(c.suite.as_str()) {
            order.push(&c.suite);
        }
        by_suite.entry(&c.suite).or_default().push(c);
    }
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None))).map_err(xml)?;
    let mut all = Counts::default();
    cases.iter().for_each(|c| all.add(c));
    let mut root = BytesStart::new("testsuites");
    root.push_attribute(("name", clean(name).as_str()));
    all.attrs(&mut root, false);
    w.write_event(Event::Start(root)).map_err(xml)?;
    for (i, suite) in order.iter().enumerate() {
        let members = &by_suite[suite];
        let mut counts = Counts::default();
        members.iter().for_each(|c| counts.add(c));
        let mut s = BytesStart::new("testsuite");
        s.push_attribute(("name", clean(suite).as_str()));
        s.push_attribute(("id", i.to_string().as_str()));
        counts.attrs(&mut s, true);
        w.write_event(Event::Start(s)).map_err(xml)?;
        for c in members {
            case(&mut w, c)?;
        }
        w.write_event(Event::End(BytesEnd::new("testsuite"))).map_err(xml)?;
    }
    w.write_event(Event::End(BytesEnd::new("testsuites"))).map_err(xml)?;
    let mut out = String::from_utf8(w.into_inner()).map_err(xml)?;
    out.push('\n');
    Ok(out)
}

fn case(w: &mut Writer<Vec<u8>>, c: &Case) -> Result<()> {
    let mut e = BytesStart::new("testcase");
    e.push_attribute(("name", clean(&c.name).as_str()));
    e.push_attribute(("classname", clean(&c.suite).as_str()));
    e.push_attribute(("time", format!("{:.3}", c.seconds.max(0.0)).as_str()));
    w.write_event(Event::Start(e)).map_err(xml)?;
    let why = clean(&c.why);
    let first_line = why.lines().next().unwrap_or("").to_string();
    let (tag, kind) = match c.verdict {
        Verdict::Passed => ("", ""),
        Verdict::Failed => ("failure", "failed"),
        Verdict::Errored => ("error", "errored"),
        Verdict::Infra => ("error", "infra"),
        Verdict::Inconclusive => ("error", "inconclusive"),
        Verdict::Skipped => ("skipped", ""),
    };
    if !tag.is_empty() {
        let mut e = BytesStart::new(tag);
        e.push_attribute(("message", first_line.as_str()));
        if !kind.is_empty() {
            e.push_attribute(("type", kind));
        }
        if why.is_empty() || tag == "skipped" {
            w.write_event(Event::Empty(e)).map_err(xml)?;
        } else {
            w.write_event(Event::Start(e)).map_err(xml)?;
            w.write_event(Event::Text(BytesText::new(&why))).map_err(xml)?;
            w.write_event(Event::End(BytesEnd::new(tag))).map_err(xml)?;
        }
    }
    if !c.properties.is_empty() {
        let lines: String = c.properties.iter().map(|(k, v)| format!("{}: {}\n", clean(k), clean(v))).collect();
        w.write_event(Event::Start(BytesStart::new("system-out"))).map_err(xml)?;
        w.write_event(Event::Text(BytesText::new(&lines))).map_err(xml)?;
        w.write_event(Event::End(BytesEnd::new("system-out"))).map_err(xml)?;
    }
    w.write_event(Event::End(BytesEnd::new("testcase"))).map_err(xml)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, verdict: Verdict, why: &str) -> Case {
        Case { suite: "nightly".into(), name: name.into(), seconds: 1.5, verdict, why: why.into(), properties: vec![] }
    }

    #[test]
    fn counts_and_escapes() {
        let doc = document(
            "run",
            &[
                c("a", Verdict::Passed, ""),
                c("b", Verdict::Failed, "exact_match: expected \"<8>\" & got \u{1b}[1m9"),
                c("c", Verdict::Errored, "limit_steps: 10"),
                c("d", Verdict::Infra, "image missing"),
                c("e", Verdict::Skipped, "never ran"),
            ],
        )
        .unwrap();
        assert!(doc.contains(r#"<testsuites name="run" tests="5" failures="1" errors="2" time="7.500">"#), "{doc}");
        assert!(doc.contains("expected &quot;&lt;8&gt;&quot; &amp; got [1m9"), "{doc}");
        assert!(doc.contains(r#"<error message="image missing" type="infra">"#), "{doc}");
        assert!(doc.contains(r#"<skipped message="never ran"/>"#), "{doc}");
        assert!(
            doc.contains(r#"<testsuite name="nightly" id="0" tests="5" failures="1" errors="2" skipped="1""#),
            "{doc}"
        );
        assert!(!doc.contains('\u{1b}'));
    }
}
