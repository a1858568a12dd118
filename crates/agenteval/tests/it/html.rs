//! The HTML report in a real browser: headless Chromium (Debian's `chromium`, installed by
//! `tests/run.sh`) loads the sealed `report.html` and a comparison page with no console message and no
//! request, opens a task's trace viewer, and renders hostile trace text as text, checked in the
//! DOM it built.

use std::path::Path;
use std::process::Command;

use crate::util::*;

const HOSTILE: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
def emit(kind, payload, **u):
    print(json.dumps(dict(kind=kind, payload=payload, **u)), flush=True)
emit("agent.plan", "</script><script>alert(1)</script>")
emit("agent.tool_call", {"tool": "search", "args": {"q": "\"><img src=x onerror=alert(1)>"}}, input_tokens=20, output_tokens=3, cost_usd=0.0004)
emit("agent.tool_result", {"tool": "search", "result": "<b>bold</b>"})
bad = req["task_id"] in os.environ.get("BROKEN", "").split(",")
emit("agent.terminal", {"final_answer": "no <img src=x onerror=alert(2)>" if bad else req["input"].upper()}, input_tokens=10, output_tokens=5, cost_usd=0.001)
"#;

/// Loads `page` (with `#fragment`) and returns the DOM the page's script built, and every
/// console line Chromium logged (errors, CSP-blocked requests, anything the page printed).
fn load(page: &Path, fragment: &str) -> (String, Vec<String>) {
    crate::util::ui::browse(&format!("file://{}{fragment}", page.display()), None)
}

#[test]
fn the_html_report_opens_clean_and_shows_hostile_text_as_text() {
    let ws = Workspace::new();
    ws.write("agent.py", HOSTILE);
    let cases: String = (0..12)
        .map(|i| {
            format!(
                "{{\"id\": \"c{i:02}\", \"input\": \"w{i}\", \"expected\": \"W{i}\", \"tags\": [\"t{}\"]}}\n",
                i % 3
            )
        })
        .collect();
    ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "eval.yaml",
        r#"name: html
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, agent.py]
evaluators:
  - kind: exact_match
storage:
  bundle_root: runs
"#,
    );
    let (base, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0);
    let (cand, code, _) = ws.submit(&cfg, &["--set", "agent.env.BROKEN=c04"]);
    assert_eq!(code, 0);
    let (base, cand) = (base["run_id"].as_str().unwrap().to_string(), cand["run_id"].as_str().unwrap().to_string());

    // The sealed report.html and a comparison page.
    let sealed = ws.runs().join(&cand).join("report.html");
    assert!(sealed.exists(), "sealing writes report.html");
    let page = ws.path().join("compare.html");
    let out =
        ws.run(&["compare", &base, &cand, "--format", "html", "-o", page.to_str().unwrap(), "--resamples", "500"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = ws.path().join("report.html");
    let out = ws.run(&["report", &cand, "--format", "html", "-o", report.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bytes = std::fs::read_to_string(&page).unwrap();
    for remote in ["http://", "https://", "src=\"//"] {
        assert!(
            !bytes.contains(remote) || bytes.matches(remote).all(|_| false),
            "the page names a remote resource: {remote}"
        );
    }

    for p in [&sealed, &page, &report] {
        let (dom, console) = load(p, "");
        assert!(console.is_empty(), "{}: console output (errors or blocked requests): {console:#?}", p.display());
        assert!(
            dom.contains("c04") && dom.contains("regressed") || p != &page,
            "{}: the regression is shown",
            p.display()
        );
        assert!(dom.contains("<table id=\"tasks\">"), "{}: the task table was built", p.display());
    }

    // The trace viewer of the regressed task, opened through its address.
    let (dom, console) = load(&page, "#task=c04");
    assert!(console.is_empty(), "{console:#?}");
    assert!(dom.contains("id=\"viewer\" role=\"dialog\" aria-modal=\"true\" class=\"open\""), "the viewer opened");
    assert!(
        dom.contains("Task c04") && dom.contains("agent.tool_call") && dom.contains("Spans ("),
        "events and spans are shown"
    );
    // Hostile text is text: serialized escaped inside the DOM, and no element came of it.
    assert!(dom.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "the script tag is shown as text");
    assert!(dom.contains("\\\"&gt;&lt;img src=x onerror=alert(1)&gt;"), "the attribute break is shown as text");
    assert!(dom.contains("&lt;b&gt;bold&lt;/b&gt;"));
    assert!(!dom.contains("<img"), "an <img> element was created from trace text");
    assert!(!dom.contains("<b>bold</b>"), "markup from a tool result was rendered");

    // A screenshot of the open viewer, kept next to the test's workspace for people to look at.
    let shot = ws.path().join("trace-viewer.png");
    let out = Command::new(crate::util::ui::chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}#task=c04", page.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"), "a real screenshot: {} bytes", png.len());
    let keep = repo().join("target").join("html-report-trace-viewer.png");
    let _ = std::fs::copy(&shot, keep);
}
