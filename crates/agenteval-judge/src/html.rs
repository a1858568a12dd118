//! The HTML report: one self-contained file (inline CSS and JS, no request of any kind, light
//! and dark) with summary cards, the comparison's metrics with their intervals, the gates, a
//! sortable and filterable task table and a trace viewer per task (events with a timing
//! waterfall, tool calls and results, tokens and cost per step, errors, spans).
//!
//! Safety: every value reaches the page as JSON inside a `<script type="application/json">`
//! block with `<`, `>` and `&` escaped, and the script builds the page with `textContent` only,
//! so nothing a task, an agent or a run name contains can become markup. A Content Security
//! Policy forbids every fetch, as a second wall.

use agenteval_core::model::RunSummary;
use serde_json::{Value, json};

use crate::compare::Comparison;
use crate::gates::Verdict;

use agenteval_core::format::{Metadata, ResultLine};

use crate::results::{RunResults, Traces};

/// Everything one report shows.
#[derive(Debug)]
pub struct HtmlReport<'a> {
    pub meta: &'a Metadata,
    pub bundle_uri: &'a str,
    /// The task table's rows, built by [`TaskRows`].
    pub rows: &'a TaskRows,
    pub summary: Option<&'a RunSummary>,
    pub traces: &'a Traces,
    pub comparison: Option<&'a Comparison>,
    pub verdict: Option<&'a Verdict>,
    /// `agenteval <version>`, shown in the footer.
    pub generator: &'a str,
    /// What a page around the report adds (`agenteval ui`); empty for the report file.
    pub frame: Frame<'a>,
}

/// Markup a server puts around the report: its navigation at the top of the body, a section
/// under the title, and a task whose trace viewer opens at load. The markup is the caller's,
/// already escaped (a template library that escapes by default renders it).
#[derive(Debug, Default, Clone, Copy)]
pub struct Frame<'a> {
    pub head: &'a str,
    pub nav: &'a str,
    pub section: &'a str,
    pub open_task: Option<&'a str>,
}

/// JSON that can sit inside a `<script>` element whatever its strings hold.
fn script_safe(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
}

fn script_safe_json(v: &Value) -> String {
    let s = serde_json::to_string(v).expect("a JSON value serializes");
    let mut out = String::with_capacity(s.len() + 64);
    script_safe(&s, &mut out);
    out
}

/// The task table's rows as one script-safe JSON array, built a row at a time (failing tasks
/// first is the caller's order) and capped, so that a report of 100,000 tasks holds neither
/// 100,000 JSON values nor a page nobody can open.
#[derive(Debug)]
pub struct TaskRows {
    json: String,
    count: usize,
    omitted: usize,
    cap: usize,
    regressed: std::collections::BTreeSet<String>,
    improved: std::collections::BTreeSet<String>,
}

impl TaskRows {
    pub fn new(comparison: Option<&Comparison>, cap: usize) -> Self {
        let ids = |v: &[crate::compare::TaskChange]| v.iter().map(|t| t.task_id.clone()).collect();
        TaskRows {
            json: String::from("["),
            count: 0,
            omitted: 0,
            cap,
            regressed: comparison.map(|c| ids(&c.regressions)).unwrap_or_default(),
            improved: comparison.map(|c| ids(&c.improvements)).unwrap_or_default(),
        }
    }

    pub fn push(&mut self, l: &ResultLine, tags: &[String]) {
        if self.count >= self.cap {
            self.omitted += 1;
            return;
        }
        let id = l.task_id.as_str();
        let base = l.task_id.base();
        let change = if self.regressed.contains(base) {
            "regressed"
        } else if self.improved.contains(base) {
            "improved"
        } else {
            ""
        };
        let row = json!({
            "id": id,
            "passed": l.passed,
            "ended": l.terminated_by.as_str(),
            // Decided here, once (`Outcome::of`): the page only shows it.
            "outcome": agenteval_core::model::Outcome::of(l.passed, l.terminated_by).as_str(),
            "change": change,
            "scores": l.scores,
            // `null` when unknown: the page says so, never $0.
            "cost": (!l.cost_unknown).then_some(l.cost_usd),
            "tokens": l.tokens,
            "wall": l.wall_seconds,
            "steps": l.steps,
            "tags": tags,
        });
        if self.count > 0 {
            self.json.push(',');
        }
        script_safe(&serde_json::to_string(&row).expect("a row serializes"), &mut self.json);
        self.count += 1;
    }

    /// Rows of `run`'s lines, failing ones first, with their tags.
    pub fn of(run: &RunResults, comparison: Option<&Comparison>, cap: usize) -> Self {
        let mut rows = TaskRows::new(comparison, cap);
        for pass in [false, true] {
            for (i, l) in run.lines.iter().enumerate().filter(|(_, l)| l.passed == pass) {
                rows.push(l, run.tags(i));
            }
        }
        rows
    }
}

/// Tasks whose traces a report made on demand embeds (failing ones first); the rest stay in
/// the bundle.
pub const TRACE_LIMIT: usize = 1_000;
/// The same for the report written at seal, which every run pays for (two reads per task on S3).
pub const SEAL_TRACE_LIMIT: usize = 300;
/// Rows of the task table a report made on demand embeds.
pub const ROW_LIMIT: usize = 200_000;
/// Rows of the task table in the report written at seal (failing first); `results.jsonl` has all.
pub const SEAL_ROW_LIMIT: usize = 2_000;

/// Reads what a run's report shows from its bundle and renders it (the summary if sealed).
pub async fn render_run(
    store: &dyn agenteval_core::traits::BundleStore,
    run: &RunResults,
    summary: Option<&RunSummary>,
    comparison: Option<&Comparison>,
    verdict: Option<&Verdict>,
    generator: &str,
    frame: Frame<'_>,
) -> String {
    let mut traces = crate::results::load_traces(
        store,
        &run.meta.run_id,
        &run.lines,
        TRACE_LIMIT,
        crate::results::REPORT_TRACE_BUDGET,
    )
    .await;
    let tasks: Vec<String> = traces.events.keys().cloned().collect();
    traces.samples = crate::samples::load(store, &run.meta.run_id, &tasks).await;
    let rows = TaskRows::of(run, comparison, ROW_LIMIT);
    render(&HtmlReport {
        meta: &run.meta,
        bundle_uri: &run.bundle_uri,
        rows: &rows,
        summary,
        traces: &traces,
        comparison,
        verdict,
        generator,
        frame,
    })
}

/// Renders the report.
pub fn render(r: &HtmlReport<'_>) -> String {
    let data = json!({
        "run": {
            "id": r.meta.run_id,
            "name": r.meta.name,
            "status": r.meta.status,
            "benchmark": r.meta.benchmark,
            "agent": r.meta.agent,
            "backend": r.meta.backend,
            "created": r.meta.created_at,
            "bundle": r.bundle_uri,
        },
        "summary": r.summary,
        "rows_omitted": r.rows.omitted,
        "traces_omitted": r.traces.omitted,
        "traces_cut": r.traces.cut,
        "samples": r.traces.samples,
        "comparison": r.comparison,
        "verdict": r.verdict,
        // Each figure as the terminal shows it, in its one unit (a share in percent and its
        // differences in points, a cost in dollars): the page never shows a fraction for a rate.
        "shown": {
            "diffs": r.comparison.map(|c| c.metrics.iter().map(crate::report::diff_text).collect::<Vec<_>>()),
            "limits": r.verdict.map(|v| v.gates.iter().map(|g| crate::report::gate_figure(&g.gate, g.limit)).collect::<Vec<_>>()),
        },
        "generator": r.generator,
        "open": r.frame.open_task,
    });
    // The rows go in as text, as the object's last member: they were serialized (and made
    // script-safe) one by one.
    let mut data = script_safe_json(&data);
    data.pop();
    data.push_str(",\"tasks\":");
    data.push_str(&r.rows.json);
    data.push(']');
    for (name, map) in [("traces", &r.traces.events), ("spans", &r.traces.spans)] {
        data.push_str(&format!(",\"{name}\":{{"));
        for (i, (task, array)) in map.iter().enumerate() {
            if i > 0 {
                data.push(',');
            }
            script_safe(&serde_json::to_string(task).expect("a task id serializes"), &mut data);
            data.push(':');
            script_safe(array, &mut data);
        }
        data.push('}');
    }
    data.push('}');
    let title = format!("agenteval report: {}", r.meta.run_id);
    fill(
        TEMPLATE,
        &[
            ("{{HEAD}}", r.frame.head),
            ("{{TITLE}}", &title),
            ("{{STYLE}}", STYLESHEET),
            ("{{NAV}}", r.frame.nav),
            ("{{SECTION}}", r.frame.section),
            ("{{DATA}}", &data),
            ("{{SCRIPT}}", REPORT_SCRIPT),
        ],
    )
}

/// The template with each placeholder (in the order they appear) replaced once, in one pass:
/// a value is never searched for the placeholders after it, so no text can move another.
fn fill(template: &str, parts: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + parts.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    for (key, value) in parts {
        let (before, after) = rest.split_once(key).expect("the template has every placeholder, in order");
        out.push_str(before);
        out.push_str(value);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The report's stylesheet: the one the UI's pages use too (its base template includes it and
/// adds only its own few rules), so a report file and a UI page look alike.
pub const STYLESHEET: &str = r##":root { --bg:#fff; --fg:#1d2330; --muted:#5d6677; --line:#dde2ea; --card:#f5f7fa; --pass:#17803d; --fail:#c0262d; --warn:#a35f00; --accent:#2457c5; --bar:#9db4e6; }
@media (prefers-color-scheme: dark) { :root { --bg:#14171d; --fg:#e3e7ee; --muted:#9aa3b2; --line:#2c323d; --card:#1c2029; --pass:#4fc77b; --fail:#ff6b6b; --warn:#f0a640; --accent:#7ea6ff; --bar:#3d5a99; } }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background:var(--bg); color:var(--fg); }
header, main, footer { max-width:1200px; margin:0 auto; padding:12px 20px; }
h1 { font-size:20px; margin:8px 0 4px; } h2 { font-size:16px; margin:24px 0 8px; }
.muted { color:var(--muted); }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(150px, 1fr)); gap:10px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 12px; }
.card .v { font-size:20px; font-weight:600; } .card .k { color:var(--muted); font-size:12px; }
table { border-collapse:collapse; width:100%; }
th, td { border-bottom:1px solid var(--line); padding:5px 8px; text-align:left; vertical-align:top; }
th { cursor:pointer; user-select:none; white-space:nowrap; } th.nosort { cursor:default; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.pass { color:var(--pass); font-weight:600; } .fail { color:var(--fail); font-weight:600; } .warn { color:var(--warn); font-weight:600; }
.ci { position:relative; height:14px; width:220px; background:var(--card); border:1px solid var(--line); }
.ci .zero { position:absolute; top:-2px; bottom:-2px; width:1px; background:var(--muted); }
.ci .span { position:absolute; top:2px; bottom:2px; background:var(--bar); }
.ci .mean { position:absolute; top:0; bottom:0; width:2px; background:var(--fg); }
.filters { display:flex; gap:10px; flex-wrap:wrap; margin:8px 0; }
select, input { background:var(--bg); color:var(--fg); border:1px solid var(--line); border-radius:4px; padding:4px 6px; }
button.link { background:none; border:none; color:var(--accent); cursor:pointer; padding:0; font:inherit; text-decoration:underline; }
#viewer { position:fixed; inset:0; background:rgba(0,0,0,.45); display:none; }
#viewer.open { display:block; }
#viewer .panel { position:absolute; top:3%; bottom:3%; left:5%; right:5%; background:var(--bg); border:1px solid var(--line); border-radius:8px; overflow:auto; padding:14px 18px; }
.event { border-left:3px solid var(--line); margin:6px 0; padding:4px 10px; }
.event.err { border-left-color:var(--fail); } .event.tool { border-left-color:var(--accent); } .event.result { border-left-color:var(--bar); margin-left:22px; }
.wf { position:relative; height:8px; background:var(--card); margin:3px 0; }
.wf span { position:absolute; top:0; bottom:0; background:var(--bar); min-width:2px; }
pre { white-space:pre-wrap; word-break:break-word; background:var(--card); padding:6px 8px; border-radius:4px; margin:4px 0; max-height:260px; overflow:auto; }
.sample { display:grid; grid-template-columns:repeat(auto-fit, minmax(240px, 1fr)); gap:10px; margin:6px 0 10px; }
.sample .value { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:8px 10px; min-width:0; }
.sample h3 { font-size:13px; margin:0 0 4px; color:var(--muted); font-weight:600; }
.sample pre { background:var(--bg); }
.sample .wide { grid-column:1 / -1; }
details > summary { cursor:pointer; color:var(--accent); font-size:12px; }
.badge { display:inline-block; padding:0 6px; border-radius:10px; border:1px solid var(--line); font-size:12px; margin-right:4px; }
"##;

const TEMPLATE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="referrer" content="no-referrer">
{{HEAD}}<title>{{TITLE}}</title>
<style>
{{STYLE}}</style>
</head>
<body>
{{NAV}}<header><h1 id="title"></h1><div id="subtitle" class="muted"></div></header>
<main>
{{SECTION}}
<section id="cards" class="cards"></section>
<section id="comparison"></section>
<section id="gates"></section>
<section><h2>Tasks</h2>
<div class="filters">
<label>outcome <select id="f-status"><option value="">all</option><option value="passed">passed</option><option value="failed">failed</option><option value="errored">errored</option><option value="infra">infra</option><option value="regressed">regressed</option><option value="improved">improved</option></select></label>
<label>tag <select id="f-tag"><option value="">all</option></select></label>
<label>failing evaluator <select id="f-eval"><option value="">any</option></select></label>
<label>search <input id="f-text" type="search" placeholder="task id"></label>
<span id="count" class="muted"></span>
</div>
<table id="tasks"><thead></thead><tbody></tbody></table>
<p id="omitted" class="muted"></p>
</section>
</main>
<footer class="muted" id="footer"></footer>
<div id="viewer" role="dialog" aria-modal="true"><div class="panel" id="panel"></div></div>
<script id="report-data" type="application/json">{{DATA}}</script>
<script>{{SCRIPT}}</script>
</body>
</html>
"##;

/// The report's one script (a server showing the report allows exactly it, by its hash).
pub const REPORT_SCRIPT: &str = r##"
"use strict";
const D = JSON.parse(document.getElementById("report-data").textContent);
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}
const pct = v => (v * 100).toFixed(1) + "%";
const money = v => v == null ? "unknown" : "$" + Number(v).toFixed(4);
const num = (v, d) => Number(v).toFixed(d == null ? 3 : d);
function fmtMetric(name, v) { return (name === "pass_rate" || name === "pairwise" || name.startsWith("score:")) ? pct(v) : name === "cost_per_task" ? money(v) : num(v); }

document.getElementById("title").textContent = "agenteval: " + D.run.name;
document.getElementById("subtitle").textContent = D.run.id + " · " + D.run.status + " · benchmark " + D.run.benchmark + " · agent " + D.run.agent + " · " + D.run.backend + " · " + D.run.created;
document.getElementById("footer").textContent = "Generated by " + D.generator + ". Bundle: " + D.run.bundle;

// Cards.
const cards = document.getElementById("cards");
function card(k, v, cls) { cards.append(el("div", {class: "card"}, el("div", {class: "v " + (cls || ""), text: v}), el("div", {class: "k", text: k}))); }
const S = D.summary;
// The four words every output uses: passed, failed (graded, wrong), errored (agent error or
// limit), infra (infrastructure).
const outcome = t => t.outcome;
const finished = D.tasks.length, count = o => D.tasks.filter(t => outcome(t) === o).length, passed = count("passed");
card("tasks finished", S ? S.tasks_finished + " / " + S.tasks_total : String(finished));
card("passed", String(passed), "pass");
// Passes whose tests trusted what the agent changed outside its folder: counted apart.
if (S && S.passed_with_changes) card("passed with changes", String(S.passed_with_changes), "fail");
// Verdicts from a test log that claims passes the tests did not make: shown, never hidden.
if (S && S.suspect) card("suspect", String(S.suspect), "fail");
// Tasks whose agent changed files their grading reads (the tamper audit): shown, never hidden.
if (S && S.tampered) card("tampered", String(S.tampered) + (S.passed_tampered ? " (" + S.passed_tampered + " passed)" : ""), "fail");
// Which model the run measured: each the agents called, with its calls.
if (S && S.models && Object.keys(S.models).length) card("models", Object.entries(S.models).map(([m, n]) => m + " (" + n + ")").join(", "));
for (const o of ["failed", "errored", "infra"]) card(o, String(count(o)), count(o) ? "fail" : "");
card("pass rate", finished ? pct(passed / finished) : "–");
if (S) {
  // A model without a price has an unknown cost: never shown as if the sum were whole.
  const known = S.total_cost_usd != null ? S.total_cost_usd : S.known_cost_usd;
  card("total cost", (S.cost_unknown_tasks || S.total_cost_usd == null) ? (known ? ">= " + money(known) + " (" + S.cost_unknown_tasks + " unknown)" : "unknown") : money(S.total_cost_usd));
  // The simulated user's cost is the run's too, but never the agent's: its own card.
  for (const [role, r] of Object.entries(S.roles || {})) card(role + " cost", r.cost_usd == null ? "unknown" : money(r.cost_usd));
  card("tokens", String(S.total_tokens));
  card("latency p50 / p95", num(S.latency_p50_seconds, 2) + " / " + num(S.latency_p95_seconds, 2) + " s");
  for (const [k, v] of Object.entries(S.pass_at_k || {})) card("pass@" + k, pct(v));
  // pass^k: every attempt passed; the flip rate: how often two attempts of a task disagree.
  for (const [k, v] of Object.entries(S.pass_hat_k || {})) card("pass^" + k, pct(v));
  if (S.flip_rate != null) card("flip rate", pct(S.flip_rate), S.flip_rate > 0 ? "fail" : "");
}
const decisionOf = v => v.decision || (v.passed ? "GO" : "NO-GO");
const decisionClass = d => d === "GO" ? "pass" : d === "NO-GO" ? "fail" : "warn";
if (D.verdict) card("gates", decisionOf(D.verdict), decisionClass(decisionOf(D.verdict)));

// Comparison with interval bars.
if (D.comparison) {
  const C = D.comparison, sec = document.getElementById("comparison");
  sec.append(el("h2", {text: "Compared with " + C.base.name + " (" + C.base.run_id + ")"}));
  sec.append(el("p", {class: "muted", text: C.paired_tasks + " paired tasks; " + Math.round((C.level || 0.95) * 1000) / 10 + "% intervals from " + C.resamples + " paired-bootstrap resamples, seed " + C.seed + ". A metric is worse or better only when its whole interval is."}));
  const t = el("table", {}, el("thead", {}, el("tr", {}, ...["metric", "base", "candidate", "difference [" + Math.round((C.level || 0.95) * 1000) / 10 + "% interval]", "", "verdict"].map(h => el("th", {class: "nosort", text: h})))));
  const body = el("tbody");
  for (const [i, m] of C.metrics.entries()) {
    const bar = el("div", {class: "ci"});
    let diffText = "not judged";
    if (m.diff) {
      const scale = Math.max(Math.abs(m.diff.lo), Math.abs(m.diff.hi), 1e-12) * 1.1;
      const x = v => (50 + 50 * v / scale) + "%";
      bar.append(el("div", {class: "zero", style: "left:50%"}), el("div", {class: "span", style: "left:" + x(m.diff.lo) + ";width:calc(" + x(m.diff.hi) + " - " + x(m.diff.lo) + ")"}), el("div", {class: "mean", style: "left:" + x(m.diff.mean)}));
      diffText = num(m.diff.mean, 4) + " [" + num(m.diff.lo, 4) + ", " + num(m.diff.hi, 4) + "]";
    }
    if (D.shown && D.shown.diffs) diffText = D.shown.diffs[i];
    const verdict = m.regressed ? el("span", {class: "fail", text: "worse"}) : m.improved ? el("span", {class: "pass", text: "better"}) : el("span", {class: "muted", text: "no change"});
    body.append(el("tr", {}, el("td", {text: m.metric + " (" + (m.better === "higher" ? "higher" : "lower") + " is better)"}), el("td", {class: "num", text: fmtMetric(m.metric, m.base)}), el("td", {class: "num", text: fmtMetric(m.metric, m.cand)}), el("td", {class: "num", text: diffText}), el("td", {}, bar), el("td", {}, verdict)));
  }
  t.append(body);
  sec.append(t);
  if ((C.changed || []).length) sec.append(el("p", {class: "warn", text: C.changed.length + " tasks changed content under the same id and are left out of the statistics: " + C.changed.join(", ")}));
  if (C.grading_changed) sec.append(el("p", {class: "warn", text: "The runs were graded with different settings: a difference may come from the grading, not the agent."}));
  if (C.infra_failures.length) sec.append(el("p", {class: "warn", text: C.infra_failures.length + " tasks failed on infrastructure and are left out of the statistics: " + C.infra_failures.map(t => t.task_id).join(", ")}));
}
if (D.verdict) {
  const sec = document.getElementById("gates");
  sec.append(el("h2", {text: "Gates: " + (D.verdict.passed ? "pass" : "fail") + (D.comparison ? " (against " + D.comparison.base.name + ", " + D.comparison.base.run_id + ")" : " (no baseline: judged alone)")}));
  const t = el("table", {}, el("thead", {}, el("tr", {}, ...["gate", "limit", "result", "detail"].map(h => el("th", {class: "nosort", text: h})))));
  const body = el("tbody");
  for (const [i, g] of D.verdict.gates.entries()) body.append(el("tr", {}, el("td", {text: g.gate}), el("td", {class: "num", text: D.shown && D.shown.limits ? D.shown.limits[i] : String(g.limit)}), el("td", {}, el("span", {class: decisionClass(decisionOf(g)), text: decisionOf(g)})), el("td", {text: g.detail})));
  t.append(body);
  sec.append(t);
}

// Tasks: failing and regressed first, sortable, filterable.
const evals = [...new Set(D.tasks.flatMap(t => Object.keys(t.scores)))].sort();
const tags = [...new Set(D.tasks.flatMap(t => t.tags))].sort();
for (const t of tags) document.getElementById("f-tag").append(el("option", {value: t, text: t}));
for (const e of evals) document.getElementById("f-eval").append(el("option", {value: e, text: e}));
const cols = [
  ["task", t => t.id], ["outcome", t => t.change || outcome(t)], ["ended", t => t.ended],
  ...evals.map(e => [e, t => t.scores[e] ? t.scores[e].score : -1]),
  ["cost", t => t.cost, true], ["tokens", t => t.tokens, true], ["seconds", t => t.wall, true], ["steps", t => t.steps, true],
];
const rank = t => t.change === "regressed" ? 0 : !t.passed ? 1 : t.change === "improved" ? 2 : 3;
let sortCol = null, sortDir = 1;
const thead = document.querySelector("#tasks thead"), tbody = document.querySelector("#tasks tbody");
thead.append(el("tr", {}, ...cols.map(([name, , numeric], i) => el("th", {class: numeric ? "num" : "", text: name, onclick: () => { sortDir = sortCol === i ? -sortDir : 1; sortCol = i; draw(); }}))));
function statusCell(t) {
  if (t.change === "regressed") return el("span", {class: "fail", text: "regressed"});
  if (t.change === "improved") return el("span", {class: "pass", text: "improved"});
  return el("span", {class: t.passed ? "pass" : "fail", text: outcome(t)});
}
function draw() {
  const fs = document.getElementById("f-status").value, ft = document.getElementById("f-tag").value, fe = document.getElementById("f-eval").value, fx = document.getElementById("f-text").value.toLowerCase();
  let rows = D.tasks.filter(t => (!fs || (["passed", "failed", "errored", "infra"].includes(fs) ? outcome(t) === fs : t.change === fs)) && (!ft || t.tags.includes(ft)) && (!fe || (t.scores[fe] && !t.scores[fe].passed)) && (!fx || t.id.toLowerCase().includes(fx)));
  rows.sort((a, b) => rank(a) - rank(b) || (a.id < b.id ? -1 : 1));
  if (sortCol !== null) { const f = cols[sortCol][1]; rows.sort((a, b) => { const x = f(a), y = f(b); return (x < y ? -1 : x > y ? 1 : 0) * sortDir; }); }
  tbody.replaceChildren(...rows.slice(0, 5000).map(t => el("tr", {},
    el("td", {}, el("button", {class: "link", text: t.id, onclick: () => openTask(t.id)})),
    el("td", {}, statusCell(t)), el("td", {text: t.ended}),
    ...evals.map(e => el("td", {class: "num " + (t.scores[e] ? (t.scores[e].passed ? "" : "fail") : "muted"), text: t.scores[e] ? num(t.scores[e].score, 2) : "–"})),
    el("td", {class: "num", text: money(t.cost)}), el("td", {class: "num", text: String(t.tokens)}), el("td", {class: "num", text: num(t.wall, 2)}), el("td", {class: "num", text: String(t.steps)}))));
  document.getElementById("count").textContent = rows.length + " of " + D.tasks.length + " tasks" + (rows.length > 5000 ? " (first 5000 shown)" : "");
}
for (const id of ["f-status", "f-tag", "f-eval", "f-text"]) document.getElementById(id).addEventListener("input", draw);
const omitted = [];
if (D.rows_omitted) omitted.push(D.rows_omitted + " more tasks are not listed here (all are in the bundle's results.jsonl; `agenteval report RUN --format html` lists up to 200,000)");
if (D.traces_omitted) omitted.push("the traces of " + D.traces_omitted + " tasks are not embedded, to keep this file small; they are in the bundle");
document.getElementById("omitted").textContent = omitted.join("; ");
draw();

// Trace viewer.
function openTask(id) {
  const task = D.tasks.find(t => t.id === id);
  const events = D.traces[id] || [], spans = D.spans[id] || [];
  const panel = document.getElementById("panel");
  panel.replaceChildren();
  panel.append(el("button", {class: "link", text: "close (Esc)", onclick: closeTask}));
  panel.append(el("h2", {text: "Task " + id}));
  if (task) panel.append(el("p", {}, statusCell(task), " ended " + task.ended + " · " + money(task.cost) + " · " + task.tokens + " tokens · " + num(task.wall, 2) + " s · " + task.steps + " steps"));
  const sample = (D.samples || {})[id];
  if (sample) panel.append(sampleView(sample));
  if (!D.traces[id]) panel.append(el("p", {class: "muted", text: "This task's trace is not embedded in the report; it is in the bundle (tasks/" + id + ".tar.gz, or `agenteval show`)."}));
  const cut = (D.traces_cut || {})[id];
  if (cut) panel.append(el("p", {class: "muted", text: "The last " + cut.events + " events (" + num(cut.bytes / 1048576, 1) + " MiB) are not embedded, to keep this page small; the whole trace is in the bundle (tasks/" + id + ".tar.gz, or `agenteval show`)."}));
  const times = events.map(e => Date.parse(e.timestamp)).filter(x => !isNaN(x));
  const t0 = times.length ? Math.min(...times) : 0, t1 = times.length ? Math.max(...times) : 1, total = Math.max(t1 - t0, 1);
  panel.append(el("h2", {text: "Events (" + events.length + ")"}));
  events.forEach((e, i) => {
    const start = Date.parse(e.timestamp), next = i + 1 < events.length ? Date.parse(events[i + 1].timestamp) : start;
    const kind = String(e.kind);
    const isErr = kind === "agent.error" || (e.payload && (e.payload.error || e.payload.terminated_by && e.payload.terminated_by !== "completed"));
    const cls = "event" + (isErr ? " err" : kind === "agent.tool_call" ? " tool" : kind === "agent.tool_result" ? " result" : "");
    const wf = el("div", {class: "wf", title: "from " + (start - t0) + " ms to " + (next - t0) + " ms"}, el("span", {style: "left:" + (100 * (start - t0) / total) + "%;width:" + (100 * Math.max(next - start, 0) / total) + "%"}));
    const unpriced = e.payload && e.payload.cost_unknown === true;
    const usage = (e.input_tokens || e.output_tokens || e.cost_usd) ? " · " + (e.input_tokens || 0) + " in / " + (e.output_tokens || 0) + " out tokens · " + (unpriced ? "cost unknown" : money(e.cost_usd || 0)) : "";
    const tool = e.payload && typeof e.payload === "object" && e.payload.tool ? " · tool " + e.payload.tool : kind === "model.call" && e.payload ? " · " + e.payload.model + " over " + e.payload.wire + " in " + e.payload.latency_ms + " ms" : "";
    panel.append(el("div", {class: cls, id: "step-" + e.step}, el("div", {}, el("span", {class: "badge", text: "#" + e.step}), el("strong", {text: kind}), el("span", {class: "muted", text: " +" + (start - t0) + " ms" + tool + usage})), wf, el("pre", {text: JSON.stringify(e.payload, null, 2)})));
  });
  if (spans.length) {
    panel.append(el("h2", {text: "Spans (" + spans.length + ")"}));
    const starts = spans.map(s => Date.parse(s.start_time)), ends = spans.map(s => Date.parse(s.end_time));
    const s0 = Math.min(...starts), s1 = Math.max(...ends), st = Math.max(s1 - s0, 1);
    const t = el("table", {}, el("thead", {}, el("tr", {}, ...["span", "ms", "", "status"].map(h => el("th", {class: "nosort", text: h})))));
    const body = el("tbody");
    spans.slice().sort((a, b) => Date.parse(a.start_time) - Date.parse(b.start_time)).forEach(s => {
      const a = Date.parse(s.start_time), b = Date.parse(s.end_time);
      body.append(el("tr", {}, el("td", {text: s.name}), el("td", {class: "num", text: num(s.duration_ms, 1)}), el("td", {style: "width:40%"}, el("div", {class: "wf"}, el("span", {style: "left:" + (100 * (a - s0) / st) + "%;width:" + (100 * (b - a) / st) + "%"}))), el("td", {class: s.status === "error" ? "fail" : "", text: s.status + (s.status_message ? ": " + s.status_message : "")})));
    });
    t.append(body);
    panel.append(t);
  }
  document.getElementById("viewer").classList.add("open");
  setHash("#task=" + encodeURIComponent(id));
}
// A task's sample: input, expected and answer side by side, then each score's reason. A long
// value shows its start and folds the rest.
const FOLD = 1500;
function valueBox(title, text, cls) {
  const box = el("div", {class: "value " + cls}, el("h3", {text: title}));
  if (text == null) box.append(el("p", {class: "muted", text: "(none)"}));
  else if (text.length <= FOLD) box.append(el("pre", {text: text}));
  else box.append(el("pre", {text: text.slice(0, FOLD) + "…"}), el("details", {}, el("summary", {text: "all " + text.length + " characters"}), el("pre", {text: text})));
  return box;
}
function sampleView(s) {
  const wrap = el("div", {class: "sample-view"});
  const boxes = [valueBox("Input", s.input, "s-input"), valueBox("Expected", s.expected, "s-expected"), valueBox("Answer", s.answer, "s-answer")];
  if (s.error) boxes.push(valueBox("Error", s.error, "s-error"));
  if (s.patch) boxes.push(valueBox("Patch (what the agent changed)", s.patch, "s-patch wide"));
  wrap.append(el("div", {class: "sample"}, ...boxes));
  if (s.scores.length) {
    const t = el("table", {class: "s-scores"}, el("thead", {}, el("tr", {}, ...["evaluator", "kind", "score", "result", "reason"].map(h => el("th", {class: "nosort", text: h})))));
    const body = el("tbody");
    for (const x of s.scores) body.append(el("tr", {}, el("td", {text: x.evaluator}), el("td", {text: x.kind}), el("td", {class: "num", text: num(x.score, 3)}), el("td", {}, el("span", {class: x.error ? "warn" : x.passed ? "pass" : "fail", text: x.error ? "error" : x.passed ? "passed" : "failed"})), el("td", {}, el("pre", {text: x.reason}))));
    t.append(body);
    wrap.append(t);
  }
  return wrap;
}
// The open task is in the address, so a link can open it; some viewers forbid changing it.
function setHash(h) { try { if (location.hash !== h) history.replaceState(null, "", h || location.pathname); } catch (_) {} }
function closeTask() { document.getElementById("viewer").classList.remove("open"); setHash(""); }
document.addEventListener("keydown", e => { if (e.key === "Escape") closeTask(); });
document.getElementById("viewer").addEventListener("click", e => { if (e.target.id === "viewer") closeTask(); });
// `#task=ID` opens a task's trace, `#task=ID&step=N` scrolls it to one step (a score's citation).
function route() {
  const m = /^#task=([^&]+)(?:&step=(\d+))?$/.exec(location.hash);
  if (!m) return false;
  openTask(decodeURIComponent(m[1]));
  const step = m[2] && document.getElementById("step-" + m[2]);
  if (step) step.scrollIntoView();
  return true;
}
window.addEventListener("hashchange", route);
if (!route() && D.open) openTask(D.open);
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_holding_a_placeholder_moves_nothing() {
        let out = fill("a{{X}}b{{Y}}c", &[("{{X}}", "{{Y}}"), ("{{Y}}", "y")]);
        assert_eq!(out, "a{{Y}}byc");
    }

    #[test]
    fn strings_cannot_close_the_data_script() {
        let v = json!({"x": "</script><script>alert(1)</script>", "y": "\"><img src=x onerror=alert(1)>", "z": "a & b \u{2028}"});
        let s = script_safe_json(&v);
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&') && !s.contains('\u{2028}'), "{s}");
        assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v, "still the same JSON");
    }
}
