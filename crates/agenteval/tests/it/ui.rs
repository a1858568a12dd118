//! `agenteval ui` end to end: a real server on a free port, its pages in headless Chromium (no
//! console message, nothing loaded from anywhere, hostile agent output shown as text), its
//! refusals (wrong `Host`, writes, a public bind without a token, a busy port), its JSON API,
//! and a run in progress. The AWS variant (DynamoDB and S3) is in aws.rs. The
//! screenshots of docs/ui.md are taken here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::ui::{UiServer, browse, request};
use crate::util::*;

/// Writes hostile text everywhere an agent can: its plan, a tool's arguments and result, its
/// answer (with a `javascript:` URL), on every task.
const HOSTILE: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
def emit(kind, payload, **u):
    print(json.dumps(dict(kind=kind, payload=payload, **u)), flush=True)
emit("agent.plan", "</script><script>alert(1)</script>")
emit("agent.tool_call", {"tool": "search", "args": {"q": "\"><img src=x onerror=alert(1)>"}}, input_tokens=20, output_tokens=3, cost_usd=0.0004)
emit("agent.tool_result", {"tool": "search", "result": "<a href=\"javascript:alert(3)\">click</a>"})
bad = req["task_id"] in os.environ.get("BROKEN", "").split(",")
answer = "javascript:alert(2) <img src=x onerror=alert(2)>" if bad else req["input"].upper()
emit("agent.terminal", {"final_answer": answer}, input_tokens=10, output_tokens=5, cost_usd=0.001)
"#;

const NAME: &str = "nightly\"><img src=x onerror=alert(9)></script>";
/// `NAME` as the DOM holds it in text.
const NAME_TEXT: &str = "nightly\"&gt;&lt;img src=x onerror=alert(9)&gt;&lt;/script&gt;";

fn workspace() -> (Workspace, PathBuf) {
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
        &format!(
            "name: '{NAME}'\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\n\
             evaluators:\n  - kind: exact_match\nbackend:\n  max_concurrent_jobs: 4\nstorage:\n  bundle_root: runs\n"
        ),
    );
    (ws, cfg)
}

fn ui(ws: &Workspace, extra: &[&str]) -> UiServer {
    let index = ws.index();
    let mut args = vec!["ui", "--index", index.to_str().unwrap(), "--port", "0"];
    args.extend_from_slice(extra);
    UiServer::start(ws.cmd(&args))
}

/// Where the screenshots of docs/ui.md go.
fn shot(name: &str) -> PathBuf {
    let dir = repo().join("docs/ui");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The DOM shows no element the hostile text tried to make: every `<img` and `<script>` the
/// agent wrote is text, and no link goes to `javascript:`.
fn assert_inert(page: &str, dom: &str) {
    assert!(!dom.contains("<img src=\"x\"") && !dom.contains("<img src=x"), "{page}: an <img> from agent text");
    assert!(!dom.contains("onerror=\"alert"), "{page}: an event handler from agent text");
    assert!(!dom.contains("href=\"javascript:"), "{page}: a javascript: link");
    assert!(!dom.contains("<script>alert"), "{page}: a script from agent text");
}

#[test]
fn pages_open_clean_in_chromium_and_hostile_text_stays_text() {
    let (ws, cfg) = workspace();
    let (base, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0);
    let base = base["run_id"].as_str().unwrap().to_string();
    // The candidate is judged against the base: two regressions fail its gate.
    let gates = ws.write("gates.yaml", "max_task_regressions: 0\n");
    let (cand, code, _) = ws
        .submit(&cfg, &["--set", "agent.env.BROKEN=c03,c07", "--baseline", &base, "--gates", gates.to_str().unwrap()]);
    assert_eq!(code, 1, "a failed gate");
    let cand = cand["run_id"].as_str().unwrap().to_string();
    let server = ui(&ws, &[]);
    let pages = [
        ("runs-all", server.page("")),
        (
            "runs",
            server.page(&format!("?name={}", "nightly%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(9)%3E%3C%2Fscript%3E")),
        ),
        ("run", server.page(&format!("runs/{cand}"))),
        ("task", server.page(&format!("runs/{cand}/tasks/c03"))),
        ("compare", server.page(&format!("compare?base={base}&cand={cand}"))),
        ("compare-task", server.page(&format!("compare/task?base={base}&cand={cand}&task=c03"))),
        (
            "history",
            server.page(&format!(
                "history?name={}&task=c03",
                "nightly%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(9)%3E%3C%2Fscript%3E"
            )),
        ),
    ];
    for (name, url) in &pages {
        let (dom, console) = browse(url, Some(&shot(&format!("{name}.png"))));
        assert!(console.is_empty(), "{name}: the browser logged {console:?}");
        assert_inert(name, &dom);
        match *name {
            "runs-all" => {
                // Every run's pass rate, and the verdict with its baseline for the judged one.
                let row = |id: &str| {
                    let at =
                        dom.find(&format!("<tr><td><a href=\"/runs/{id}\">")).unwrap_or_else(|| panic!("{id} listed"));
                    dom[at..at + dom[at..].find("</tr>").unwrap()].to_string()
                };
                let (b, c) = (row(&base), row(&cand));
                assert!(b.contains(">12/12<") && b.contains(">100.0%<"), "{name}: the base's pass rate: {b}");
                assert!(c.contains(">10/12<") && c.contains(">83.3%<"), "{name}: the candidate's pass rate: {c}");
                assert!(c.contains("class=\"fail\">fail<"), "{name}: the candidate's verdict: {c}");
                assert!(c.contains(&format!("href=\"/runs/{base}\">{}<", &base[..13])), "{name}: its baseline: {c}");
            }
            "runs" => {
                assert!(
                    dom.contains(&cand[..13]) && dom.contains(&base[..13]),
                    "{name}: both runs listed: {}",
                    &dom[dom.len().saturating_sub(2500)..]
                );
                assert!(
                    dom.contains("nightly\"&gt;&lt;img src=x onerror=alert(9)&gt;&lt;/script&gt;"),
                    "{name}: the name as text"
                );
                assert!(dom.contains("<polyline class=\"rate\""), "{name}: the name's history is charted");
            }
            "run" => {
                assert!(dom.contains("id=\"tasks\"") && dom.contains("c03"), "{name}: the task table");
                assert!(
                    dom.contains(&format!("Gates: fail (against {NAME_TEXT} [command], {base})")),
                    "{name}: the verdict and its baseline"
                );
                assert!(dom.contains("max_task_regressions"), "{name}: each gate");
                assert!(dom.contains(">Runs</a>"), "{name}: the UI's navigation around the report");
            }
            "task" => {
                assert!(
                    dom.contains("id=\"viewer\" role=\"dialog\" aria-modal=\"true\" class=\"open\""),
                    "{name}: the trace viewer is open"
                );
                assert!(dom.contains("agent.tool_call") && dom.contains("Worker log"), "{name}: the trace and the log");
                assert!(
                    dom.contains("javascript:alert(2) &lt;img src=x onerror=alert(2)&gt;"),
                    "{name}: the answer as text"
                );
                assert!(dom.contains("exact_match"), "{name}: the scores");
                // Input, expected answer and answer side by side, and the score's reason.
                for (id, value) in [("input", "w3"), ("expected", "W3"), ("answer", "javascript:alert(2)")] {
                    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("{name}: no {id}"));
                    assert!(dom[at..at + 400].contains(value), "{name}: {id} shows {value}: {}", &dom[at..at + 400]);
                }
                assert!(dom.contains("class=\"sample\""), "{name}: the sample's values side by side");
                assert!(dom.contains("value s-input"), "{name}: the open viewer shows the sample first");
            }
            "compare" => {
                assert!(
                    dom.contains("Regressed tasks") && dom.contains("task=c03"),
                    "{name}: the regressions link side by side"
                );
            }
            _ => {
                assert!(
                    dom.contains(&format!("/runs/{base}/tasks/c03"))
                        && dom.contains(&format!("/runs/{cand}/tasks/c03"))
                );
            }
        }
    }
    // A citation's link scrolls the trace to its step.
    let (dom, console) = browse(&server.page(&format!("runs/{cand}/tasks/c03#task=c03&step=2")), None);
    assert!(console.is_empty(), "{console:?}");
    assert!(dom.contains("id=\"step-2\"") && dom.contains("class=\"open\""), "the viewer is open at its steps");
    // The report file of the judged run: its gates and baseline, and a task's view with the
    // sample side by side.
    let report = ws.path().join("report.html");
    let out = ws.run(&["report", &cand, "--index", ws.index().to_str().unwrap(), "-o", report.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (dom, console) = browse(&format!("file://{}#task=c03", report.display()), Some(&shot("report-task.png")));
    assert!(console.is_empty(), "{console:?}");
    assert_inert("report", &dom);
    assert!(
        dom.contains(&format!("Gates: fail (against {NAME_TEXT} [command], {base})")),
        "the report's verdict and baseline"
    );
    for (class, value) in [("s-input", "w3"), ("s-expected", "W3"), ("s-answer", "javascript:alert(2)")] {
        let at = dom.find(&format!("value {class}")).unwrap_or_else(|| panic!("the report's task view has no {class}"));
        assert!(dom[at..at + 400].contains(value), "{class} shows {value}: {}", &dom[at..at + 400]);
    }
    assert!(dom.contains("class=\"s-scores\"") && dom.contains("expected"), "each score's reason");
    // Nothing but the server's own pages: the policy allows no other origin and one script.
    let r = server.get(&format!("/runs/{cand}"));
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.starts_with("default-src 'none'") && csp.contains("script-src 'sha256-"), "{csp}");
}

#[test]
fn the_server_refuses_what_it_must_and_marks_every_answer() {
    let (ws, cfg) = workspace();
    let (v, _, _) = ws.submit(&cfg, &[]);
    let run = v["run_id"].as_str().unwrap();
    let server = ui(&ws, &[]);
    // DNS rebinding: a page of another site whose name now points at 127.0.0.1.
    let r = server.request("GET", "/", "evil.example:80", &[]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(server.request("GET", "/", &format!("localhost:{}", server.port), &[]).status, 200);
    let r = server.request("POST", "/api/runs", &format!("127.0.0.1:{}", server.port), &[]);
    assert_eq!(r.status, 405, "read-only");
    for path in ["/", &format!("/runs/{run}"), "/api/runs", "/nope", "/api/runs/00000000-0000-7000-8000-000000000000"] {
        let r = server.get(path);
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}");
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
        assert!(r.header("content-security-policy").is_some_and(|c| c.starts_with("default-src 'none'")), "{path}");
    }
    // The API: unknown ids are 404, malformed parameters 400.
    assert_eq!(server.get("/api/runs/00000000-0000-7000-8000-000000000000").status, 404);
    assert_eq!(server.get(&format!("/api/runs/{run}/tasks/zz99")).status, 404);
    assert_eq!(server.get(&format!("/api/runs/{run}/tasks/bad%20id")).status, 400);
    assert_eq!(server.get("/api/runs?page=abc").status, 400);
    assert_eq!(server.get("/api/runs?status=bogus").status, 400);
    assert_eq!(server.get("/api/compare?base=latest:nope").status, 400);
    let all = server.get("/api/runs").json();
    assert_eq!(all["runs"][0]["run_id"], run);
    let one = server.get(&format!("/api/runs/{run}")).json();
    assert_eq!(one["summary"]["tasks_finished"], 12);
    let task = server.get(&format!("/api/runs/{run}/tasks/c01")).json();
    assert_eq!(task["result"]["task_id"], "c01");
    assert!(task["log"].as_str().unwrap().contains("c01"));
    // The whole trace streams as text; a damaged bundle's huge files are read with a cap (a
    // pack whose log inflates to 256 MiB, and whose result to 64 MiB: read in full they would
    // take the UI's memory).
    let bundle = Path::new(v["bundle"].as_str().unwrap());
    let trace = server.get(&format!("/runs/{run}/tasks/c01/trace.jsonl"));
    assert_eq!(trace.body, crate::util::read_text(bundle.join("tasks/c01/trace.jsonl")).unwrap());
    // A pack's trace streams as it inflates, whatever its size.
    let line = "{\"kind\":\"agent.note\"}\n";
    replace_in_pack(bundle, "c04", "trace.jsonl", line.repeat((32 << 20) / line.len()).into_bytes());
    let big = server.get(&format!("/runs/{run}/tasks/c04/trace.jsonl"));
    assert_eq!((big.status, big.body.len()), (200, line.len() * ((32 << 20) / line.len())));
    replace_in_pack(bundle, "c02", "worker.log", vec![b'x'; 256 << 20]);
    let log = server.get(&format!("/api/runs/{run}/tasks/c02")).json()["log"].as_str().unwrap().to_string();
    assert!(log.len() < 2 << 20 && log.ends_with("the whole log is in the bundle)"), "{} bytes", log.len());
    replace_in_pack(bundle, "c03", "result.json", vec![b' '; 64 << 20]);
    let r = server.get(&format!("/api/runs/{run}/tasks/c03"));
    assert_eq!(r.status, 500);
    assert!(r.body.contains("over 16 MiB"), "{}", r.body);

    // A port in use is a usage error, named.
    let index = ws.index();
    let port = server.port.to_string();
    let out = ws.run(&["ui", "--index", index.to_str().unwrap(), "--port", &port]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("Address already in use"), "{}", text(&out.stderr));
    // So is an index that is not there.
    let out = ws.run(&["ui", "--index", "nowhere/index.sqlite", "--port", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // Loopback needs the token too (another process of the machine, an agent, is not you).
    let token = server.token.clone().expect("the printed address carries a token");
    assert_eq!(token.len(), 32);
    let local = format!("127.0.0.1:{}", server.port);
    assert_eq!(request(server.port, "GET", "/api/runs", &local, &[]).status, 401, "no token on loopback");
    // A token is never taken from the command line; a bind other machines reach cannot drop it.
    let out =
        ws.run(&["ui", "--index", index.to_str().unwrap(), "--port", "0", "--token", "abcdefghijklmnopqrstuvwxyz"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("AGENTEVAL_UI_TOKEN"), "{}", text(&out.stderr));
    let out = ws.run(&["ui", "--index", index.to_str().unwrap(), "--host", "0.0.0.0", "--port", "0", "--no-token"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    drop(server);
    let open = ui(&ws, &["--no-token"]);
    assert!(open.token.is_none());
    assert_eq!(request(open.port, "GET", "/api/runs", &format!("127.0.0.1:{}", open.port), &[]).status, 200);
    drop(open);
    let file = ws.write("ui-token", "from-a-file-0123456789\n");
    let mut cmd = ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0", "--host", "0.0.0.0"]);
    cmd.args(["--token-file", file.to_str().unwrap()]);
    let from_file = UiServer::start(cmd);
    assert_eq!(from_file.token.as_deref(), Some("from-a-file-0123456789"));
    drop(from_file);
    let mut cmd = ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0", "--host", "0.0.0.0"]);
    cmd.env("AGENTEVAL_UI_TOKEN", "from-the-environment-42");
    let public = UiServer::start(cmd);
    let token = public.token.clone().unwrap();
    assert_eq!(token, "from-the-environment-42");
    let any_host = format!("machine.example:{}", public.port);
    assert_eq!(request(public.port, "GET", "/", &any_host, &[]).status, 401, "no token");
    assert_eq!(request(public.port, "GET", "/?token=wrong-token-wrong-token", &any_host, &[]).status, 401);
    let first = request(public.port, "GET", &format!("/?token={token}"), &any_host, &[]);
    assert_eq!(first.status, 200);
    let cookie = first.header("set-cookie").unwrap().split(';').next().unwrap().to_string();
    let next = request(public.port, "GET", "/api/runs", &any_host, &[("Cookie", &cookie)]);
    assert_eq!(next.status, 200, "the cookie carries the token to the next pages");
    let bearer = format!("Bearer {token}");
    assert_eq!(request(public.port, "GET", "/api/runs", &any_host, &[("Authorization", &bearer)]).status, 200);
}

#[test]
fn a_run_in_progress_shows_its_progress_moving() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 60, 300, 1, 2);
    let mut child = ws.spawn(&["submit", "--json", "-q", "--config", cfg.to_str().unwrap()]);
    wait_until("the run in the index", Duration::from_secs(30), || ws.index().exists());
    let server = ui(&ws, &[]);
    let mut run = String::new();
    wait_until("the run listed", Duration::from_secs(30), || {
        let v = server.get("/api/runs").json();
        run = v["runs"][0]["run_id"].as_str().unwrap_or("").to_string();
        !run.is_empty()
    });
    let done = || server.get(&format!("/api/runs/{run}")).json()["progress"]["finished"].as_u64();
    let mut first = None;
    wait_until("some tasks done", Duration::from_secs(30), || {
        first = done();
        first.is_some_and(|n| n > 0)
    });
    let page = server.get(&format!("/runs/{run}"));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("http-equiv=\"refresh\"") && page.body.contains("tasks done"), "{}", page.body);
    let (dom, console) = browse(&server.page(&format!("runs/{run}")), Some(&shot("live.png")));
    assert!(console.is_empty(), "{console:?}");
    assert!(dom.contains("id=\"progress\""));
    wait_until("the count moves", Duration::from_secs(30), || {
        done().is_some_and(|n| n > first.unwrap()) || done().is_none()
    });
    let out = wait_output_of(&mut child);
    assert!(out, "the run finished");
    let sealed = server.get(&format!("/api/runs/{run}")).json();
    assert_eq!(sealed["run"]["status"], "complete");
    assert!(sealed["progress"].is_null() && sealed["summary"]["tasks_finished"] == 60, "{sealed}");
}

fn wait_output_of(child: &mut std::process::Child) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        if let Some(s) = child.try_wait().unwrap() {
            return s.success();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    false
}

#[test]
fn ui_help_names_its_safety() {
    let out = Command::new(BIN).args(["ui", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for part in ["--host", "--port", "--token-file", "--no-token", "--open", "--index", "--backend", "--gates"] {
        assert!(help.contains(part), "{part}: {help}");
    }
}

#[test]
fn open_hands_the_browser_a_private_file_not_the_token() {
    use std::os::unix::fs::PermissionsExt as _;
    let (ws, cfg) = workspace();
    ws.submit(&cfg, &[]);
    // A stand-in browser that keeps what it was given: its command line and the file's mode.
    let bin = ws.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let said = ws.path().join("xdg-open.txt");
    let fake = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" > {0}.tmp\nstat -c %a \"$1\" >> {0}.tmp\ncat \"$1\" >> {0}.tmp\nmv {0}.tmp {0}\n",
        said.display()
    );
    std::fs::write(bin.join("xdg-open"), fake).unwrap();
    std::fs::set_permissions(bin.join("xdg-open"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let index = ws.index();
    let mut cmd = ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0", "--open"]);
    cmd.env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()));
    let server = UiServer::start(cmd);
    let token = server.token.clone().unwrap();
    wait_until("the browser to be opened", Duration::from_secs(20), || said.exists());
    let got = std::fs::read_to_string(&said).unwrap();
    let mut lines = got.lines();
    let argv = lines.next().unwrap();
    assert!(!argv.contains(&token) && argv.ends_with("open.html"), "the command line: {argv}");
    assert_eq!(lines.next(), Some("600"), "only this user reads the page");
    assert!(got.contains(&format!("?token={token}")), "the page leads to the UI: {got}");
}
