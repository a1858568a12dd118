//! Looking into a run: `runs show RUN [--tasks] [--failed] [--tag T]` (the run, and why each
//! task that did not pass did not) and `show RUN TASK` (one task's trace as a tree, its scores).

use std::collections::HashMap;

use agenteval_core::layout;
use agenteval_core::model::{EventKind, Outcome, RunSummary, TaskRecord, TaskResult, TaskSpec, TaskState, TraceEvent};
use agenteval_core::traits::{BundleStore, Resolver, RunIndex};
use agenteval_core::{Error, RunId, TaskId, taskpack};
use agenteval_engine::bundle::read_json;
use agenteval_engine::controller;
use agenteval_judge::judgement::Judgement;
use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::session::record_json;
use crate::{Failure, exit, judging, output};

/// Which tasks `runs show` lists.
#[derive(Debug, Default)]
pub struct TaskFilter {
    pub all: bool,
    /// Only those that did not pass.
    pub failed: bool,
    /// Only those with one of these tags.
    pub tags: Vec<String>,
    /// Only those whose agent called this tool.
    pub tool: Option<String>,
    /// Only those that ended this way.
    pub ended_by: Option<agenteval_core::model::TerminatedBy>,
    /// Only those whose why holds this text, in any case.
    pub why: Option<String>,
    /// Each reason whole, wrapped, rather than cut to the width.
    pub full: bool,
}

/// Columns a terminal has.
const WIDTH: usize = 80;
/// Most characters of an answer `show` prints (its middle is cut past it).
const ANSWER_CHARS: usize = 2000;

/// A task as `runs show` lists it: its index record, what became of it, and why.
struct Row {
    record: TaskRecord,
    task: String,
    outcome: String,
    /// `None`: unknown (a call without a price), never $0.
    cost: Option<f64>,
    why: String,
}

pub async fn runs_show(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    run: &str,
    filter: &TaskFilter,
    json: bool,
) -> Result<u8, Failure> {
    let run_id = judging::resolve_ref(index, run).await?;
    let located = controller::locate(resolver, index, &run_id).await?;
    let store = located.store.as_ref();
    let counts = index.task_counts(&run_id).await?;
    let summary: Option<RunSummary> = read_json(store, &run_id, layout::SUMMARY).await.ok();
    let agent_git = read_json::<agenteval_core::format::Metadata>(store, &run_id, layout::METADATA)
        .await
        .ok()
        .and_then(|m| m.agent_git);
    let rows = if filter.all { rows(store, index, &run_id, filter).await? } else { vec![] };
    let flaky = flakiest(index, &located.record).await;
    if json {
        let tasks: Vec<Value> = rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(&r.record).expect("records serialize");
                v["outcome"] = json!(r.outcome);
                v["why"] = json!(r.why);
                v["cost_usd"] = json!(r.cost);
                v
            })
            .collect();
        let flaky_json = flaky.as_ref().map(|f| json!({"runs": f.runs, "tasks": f.tasks.iter().map(|(id, n, c, r)| json!({"task_id": id, "attempts": n, "passed": c, "flip_rate": r})).collect::<Vec<_>>()}));
        say!(
            "{}",
            json!({"run": record_json(&located.record), "agent_git": agent_git, "tasks_counts": counts, "summary": summary, "tasks": tasks, "flakiest": flaky_json})
        );
        return Ok(exit::OK);
    }
    let r = &located.record;
    say!("run        {} ({})", r.run_id, r.name);
    say!("status     {}", output::status_word(r.status));
    say!("benchmark  {}   agent {}   backend {}", r.benchmark, r.agent, r.backend);
    say!("created    {}", r.created_at.to_rfc3339());
    if let Some(f) = r.finished_at {
        say!("finished   {}", f.to_rfc3339());
    }
    say!("bundle     {}", r.bundle_uri);
    if let Some(g) = &agent_git {
        say!("agent git  {}{}", g.commit, if g.dirty { ", with changed files" } else { "" });
    }
    match &summary {
        Some(s) => {
            say!("{}", output::summary_table(s));
            for l in output::summary_lines(s) {
                say!("{l}");
            }
            if located.record.verdict.is_some()
                && let Ok(Some(doc)) = Judgement::read(store, &run_id).await
            {
                for l in output::verdict_lines(&doc) {
                    say!("{l}");
                }
            }
        }
        None => say!(
            "tasks      {} of {} finished: passed {} failed {} errored {} infra {}",
            counts.finished(),
            counts.total,
            counts.passed,
            counts.failed,
            counts.errored,
            counts.infra
        ),
    }
    if let Some(f) = &flaky {
        let named: Vec<String> =
            f.tasks.iter().take(5).map(|(id, n, c, r)| format!("{id} {:.0}% ({c} of {n} passed)", r * 100.0)).collect();
        let line = format!("over the last {} runs of {}: {}", f.runs, r.name, named.join(", "));
        say!("{}", output::wrapped("flakiest   ", &line, 80));
    }
    if filter.all {
        say_rows(&rows, filter.full);
    }
    Ok(exit::OK)
}

/// How many runs of a name `runs show` looks back over for its flakiest tasks.
const FLAKY_RUNS: usize = 10;

/// The tasks that flipped most over the last runs of a name (up to this one), each with its
/// attempts, passes and flip rate, flakiest first.
struct Flaky {
    runs: usize,
    tasks: Vec<(String, u64, u64, f64)>,
}

/// The flakiest tasks of `record`'s name over its last [`FLAKY_RUNS`] finished runs up to it
/// (repetitions counted as attempts); `None` with fewer than two runs or no task that flipped.
async fn flakiest(index: &dyn RunIndex, record: &agenteval_core::model::RunRecord) -> Option<Flaky> {
    let recent = index.list_runs(500).await.ok()?;
    let same: Vec<&agenteval_core::model::RunRecord> = recent
        .iter()
        .filter(|r| r.name == record.name && r.benchmark == record.benchmark && r.created_at <= record.created_at)
        .filter(|r| r.finished_at.is_some())
        .take(FLAKY_RUNS)
        .collect();
    if same.len() < 2 {
        return None;
    }
    let mut tally: std::collections::BTreeMap<String, (u64, u64)> = std::collections::BTreeMap::new();
    for r in &same {
        for t in index.list_tasks(&r.run_id).await.ok()? {
            let Some(passed) = t.passed.filter(|_| !t.terminated_by.is_some_and(|e| e.says_nothing_about_the_agent()))
            else {
                continue;
            };
            let (n, c) = tally.entry(t.task_id.base().to_string()).or_default();
            *n += 1;
            *c += u64::from(passed);
        }
    }
    let mut tasks: Vec<(String, u64, u64, f64)> = tally
        .into_iter()
        .map(|(id, (n, c))| (id, n, c, agenteval_judge::stats::flip_rate(n, c)))
        .filter(|(_, _, _, r)| *r > 0.0)
        .collect();
    tasks.sort_by(|a, b| b.3.total_cmp(&a.3).then(a.0.cmp(&b.0)));
    (!tasks.is_empty()).then_some(Flaky { runs: same.len(), tasks })
}

/// The tasks' table: task, outcome, cost and why, within the terminal's width (each reason
/// whole, wrapped, with `full`).
fn say_rows(rows: &[Row], full: bool) {
    let width = output::stdout_width();
    let task_w = rows.iter().map(|r| r.task.chars().count()).max().unwrap_or(4).clamp(4, 30);
    // task, outcome (7), cost (8), why: the rest of the terminal's columns.
    let why_w = width.saturating_sub(task_w + 1 + 8 + 9).max(20);
    say!("{:<task_w$} {:<7} {:>8} why", "task", "outcome", "cost $");
    for r in rows {
        let cost = r.cost.map_or_else(|| "unknown".to_string(), |c| format!("{c:.4}"));
        let head = format!("{:<task_w$} {:<7} {cost:>8} ", clip(&r.task, task_w), r.outcome);
        if full {
            // Whole, wrapped under its column.
            say!("{}", output::wrapped(&head, &r.why, width));
        } else {
            say!("{head}{}", clip(&r.why, why_w));
        }
    }
    if !full && rows.iter().any(|r| r.why.chars().count() > why_w) {
        say!("(reasons cut to the terminal's width: --full prints them whole)");
    }
    if rows.is_empty() {
        say!("(no task matches)");
    }
}

/// `s` cut to `w` characters, with `…` where it was cut.
fn clip(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('…');
    out
}

async fn rows(
    store: &dyn BundleStore,
    index: &dyn RunIndex,
    run: &RunId,
    filter: &TaskFilter,
) -> Result<Vec<Row>, Failure> {
    let tags: HashMap<String, Vec<String>> = if filter.tags.is_empty() {
        HashMap::new()
    } else {
        let bytes = store.get(run, layout::TASKS).await?;
        bytes
            .split(|&b| b == b'\n')
            .filter_map(|l| serde_json::from_slice::<TaskSpec>(l).ok())
            .map(|t| (t.id.to_string(), t.tags))
            .collect()
    };
    let records = index.list_tasks(run).await?;
    let wanted = records.into_iter().filter(|t| {
        filter.tags.is_empty()
            || tags.get(t.task_id.as_str()).is_some_and(|ts| ts.iter().any(|x| filter.tags.contains(x)))
    });
    // A finished task's why is in its result; reading them is what costs, so 16 at a time.
    let mut out: Vec<Row> = futures::stream::iter(wanted)
        .map(|t| async move {
            let (outcome, cost, why) = match t.state {
                TaskState::Completed => {
                    let result: Option<TaskResult> = task_json(store, run, &t.task_id, layout::TASK_RESULT).await;
                    match result {
                        Some(r) => {
                            let cost = (!r.agent.cost_unknown).then(|| r.total_cost_usd());
                            (r.outcome().as_str().to_string(), cost, r.why())
                        }
                        None => {
                            let ended = t.terminated_by.unwrap_or(agenteval_core::model::TerminatedBy::Completed);
                            let o = Outcome::of(t.passed.unwrap_or(false), ended);
                            let cost = (!t.cost_unknown).then_some(t.cost_usd);
                            (o.as_str().to_string(), cost, t.detail.clone().unwrap_or_default())
                        }
                    }
                }
                TaskState::Failed => {
                    (Outcome::Infra.as_str().to_string(), Some(t.cost_usd), t.detail.clone().unwrap_or_default())
                }
                other => (other.as_str().to_string(), Some(t.cost_usd), String::new()),
            };
            Row { task: t.task_id.to_string(), outcome, cost, why, record: t }
        })
        .buffered(16)
        .collect()
        .await;
    if filter.failed {
        out.retain(|r| matches!(r.outcome.as_str(), "failed" | "errored" | "infra"));
    }
    if let Some(ended) = filter.ended_by {
        out.retain(|r| r.record.terminated_by == Some(ended));
    }
    if let Some(text) = &filter.why {
        let text = text.to_lowercase();
        out.retain(|r| r.why.to_lowercase().contains(&text));
    }
    if let Some(tool) = &filter.tool {
        // The calls are in each task's trace: read only for the tasks still in the list.
        let used: Vec<bool> = futures::stream::iter(&out)
            .map(|r| async move { called(store, run, &r.record.task_id, tool).await })
            .buffered(16)
            .collect()
            .await;
        let mut used = used.into_iter();
        out.retain(|_| used.next().unwrap_or(false));
    }
    Ok(out)
}

/// Whether a task's trace has a call of `tool` (an `agent.tool_call` naming it).
async fn called(store: &dyn BundleStore, run: &RunId, task: &TaskId, tool: &str) -> bool {
    let Ok(trace) = taskpack::read_task_file(store, run, task, layout::TASK_TRACE).await else { return false };
    trace.split(|&b| b == b'\n').filter_map(|l| serde_json::from_slice::<Value>(l).ok()).any(|e| {
        e["kind"] == "agent.tool_call"
            && (e["payload"]["tool"].as_str() == Some(tool) || e["payload"]["name"].as_str() == Some(tool))
    })
}

/// A finished task's result (from its pack, or its folder in an older bundle), if readable.
async fn task_json(
    store: &dyn agenteval_core::traits::BundleStore,
    run: &agenteval_core::RunId,
    task: &TaskId,
    name: &str,
) -> Option<TaskResult> {
    serde_json::from_slice(&taskpack::read_task_file(store, run, task, name).await.ok()?).ok()
}

pub async fn show_task(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    run: &str,
    task: &str,
    full: bool,
    json: bool,
) -> Result<u8, Failure> {
    let run_id = judging::resolve_ref(index, run).await?;
    let task_id: TaskId = task.parse()?;
    let located = controller::locate(resolver, index, &run_id).await?;
    let store = located.store.as_ref();
    let record = index.get_task(&run_id, &task_id).await?.ok_or_else(|| {
        Error::not_found(format!(
            "run {run_id} has no task `{task}` (`agenteval runs show {run_id} --tasks` lists them)"
        ))
    })?;
    let result: Option<TaskResult> = task_json(store, &run_id, &task_id, layout::TASK_RESULT).await;
    let trace_bytes = taskpack::read_task_file(store, &run_id, &task_id, layout::TASK_TRACE).await.unwrap_or_default();
    let trace: Vec<TraceEvent> =
        trace_bytes.split(|&b| b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect();
    if json {
        say!("{}", json!({"run_id": run_id, "task": record, "result": result, "trace": trace}));
        return Ok(exit::OK);
    }
    say!("task     {task_id} (run {run_id})");
    match &result {
        Some(r) => say_result(r, full),
        None => say!("outcome  {} (no result yet)", record.state.as_str()),
    }
    if !trace.is_empty() {
        say!("trace");
        let mut cut = false;
        let start = trace[0].timestamp;
        for e in &trace {
            let at = (e.timestamp - start).num_milliseconds() as f64 / 1000.0;
            let indent = if e.kind == EventKind::AgentToolResult { "    " } else { "  " };
            // A call without a price costs an unknown amount, never $0.
            let unknown = e.payload.get("cost_unknown") == Some(&json!(true));
            let usage = if unknown {
                format!(" [{}+{} tok $ unknown]", e.input_tokens, e.output_tokens)
            } else if e.input_tokens + e.output_tokens > 0 || e.cost_usd > 0.0 {
                format!(" [{}+{} tok ${:.4}]", e.input_tokens, e.output_tokens, e.cost_usd)
            } else {
                String::new()
            };
            let head = format!("{indent}{:>3} {:>7.3}s {}", e.step, at, e.kind.as_str());
            if full {
                say!("{}", output::wrapped(&format!("{head}{usage} "), &describe(e), WIDTH));
                continue;
            }
            let room = WIDTH.saturating_sub(head.chars().count() + usage.chars().count() + 1);
            let shown = describe(e);
            if shown.chars().count() > room {
                cut = true;
            }
            say!("{head} {}{usage}", clip(&shown, room));
        }
        if cut {
            say!("  (cut to fit: --full prints every call and result whole, --json the events)");
        }
    }
    if let Some(r) = &result {
        say!("scores");
        let id_w = r.scores.iter().map(|s| s.evaluator_id.chars().count()).max().unwrap_or(5).clamp(5, 24);
        for s in &r.scores {
            let verdict = if s.error.is_some() {
                "error"
            } else if s.passed {
                "pass"
            } else {
                "fail"
            };
            let reason = s.error.as_deref().unwrap_or(&s.reason);
            let label = format!("  {:<id_w$} {verdict:<5} {:.2} ", clip(&s.evaluator_id, id_w), s.score);
            say!("{}", output::wrapped(&label, reason, WIDTH));
        }
    }
    Ok(exit::OK)
}

/// A task's result for `show`: its outcome and why, the agent's ending, its fault and the
/// field that fixes it, its setup time, doubts about its log, its answer.
fn say_result(r: &TaskResult, full: bool) {
    let why = r.why();
    let outcome =
        if why.is_empty() { r.outcome().as_str().to_string() } else { format!("{}: {why}", r.outcome().as_str()) };
    say!("{}", output::wrapped("outcome  ", &outcome, WIDTH));
    let a = &r.agent;
    // An unknown cost is said as such, never as $0.
    let cost = match (a.cost_unknown, a.total_cost_usd > 0.0) {
        (false, _) => format!("${:.4}", a.total_cost_usd),
        (true, false) => "cost unknown".to_string(),
        (true, true) => format!("${:.4} (cost partly unknown)", a.total_cost_usd),
    };
    say!(
        "agent    {} after {:.3} s, {} steps, {} tokens, {cost}",
        a.terminated_by.as_str(),
        a.wall_seconds,
        a.steps,
        a.total_tokens,
    );
    for (role, u) in &r.roles {
        let cost = u.cost_usd.map_or_else(|| "cost unknown".to_string(), |c| format!("${c:.4}"));
        say!(
            "{role:<8} {} calls to {}, {} tokens, {cost} (apart from the agent's)",
            u.calls,
            u.model,
            u.input_tokens + u.output_tokens
        );
    }
    if let Some(f) = &a.fault {
        let fix = format!("{} (fix `{}`: {})", f.describe(), f.field(), f.fix());
        say!("{}", output::wrapped("fault    ", &fix, WIDTH));
    }
    if let Some(setup) = r.setup_seconds {
        say!("setup    {setup:.3} s getting the agent ready (its install or agent layer), not the agent's time");
    }
    for doubt in &r.suspect {
        say!("suspect  {doubt} (the verdict stands)");
    }
    for t in &r.tampered {
        say!("{}", output::wrapped("tampered ", &format!("{t}; the verdict stands"), WIDTH));
    }
    if let Some(w) = &r.without_tampering {
        let verdict = if w.passed { "passes" } else { "does not pass" };
        let line = format!("{} taken out, the patch {verdict}: {}", w.removed.join(", "), w.reason);
        say!("{}", output::wrapped("without  ", &line, WIDTH));
    }
    for st in &r.steps {
        let word = if st.passed { "passed" } else { "not passed" };
        say!(
            "{}",
            output::wrapped(
                "step     ",
                &format!("{} {word}, {}: {}", st.name, st.terminated_by.as_str(), st.reason),
                WIDTH
            )
        );
    }
    if let Some(why) = &r.harbor_would_skip {
        say!("{}", output::wrapped("harbor   ", &format!("Harbor itself would skip this task: {why}"), WIDTH));
    }
    if let Some(answer) = &a.final_answer {
        // An answer may be megabytes: its start and end, wrapped (`--full` and `--json` have it
        // whole).
        let text = agenteval_core::model::answer_text(answer).replace('\n', "⏎");
        let answer = if full { text } else { output::middle_cut(&text, ANSWER_CHARS) };
        say!("{}", output::wrapped("answer   ", &answer, WIDTH));
    }
}

/// One event's payload, shortly: a tool call's tool and arguments, a result's output, a final
/// answer, a score's verdict.
fn describe(e: &TraceEvent) -> String {
    let p = &e.payload;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let shown = match e.kind {
        EventKind::AgentToolCall => {
            format!("{} {}", text(&p["tool"]), p.get("arguments").map(text).unwrap_or_default())
        }
        EventKind::AgentToolResult => {
            format!("{} -> {}", text(&p["tool"]), p.get("output").map(text).unwrap_or_default())
        }
        EventKind::AgentFinalAnswer => p.get("answer").map(text).unwrap_or_default(),
        // A conversation, both sides: what each said, and whether the user ended it.
        EventKind::AgentMessage => format!("agent: {}", p.get("text").map(text).unwrap_or_default()),
        EventKind::UserMessage => {
            let ends = match p["unfinished"].as_str() {
                Some(why) => format!("(did not answer: {why})"),
                None if p["ends"] == json!(true) => " (ends the conversation)".into(),
                None => String::new(),
            };
            // What it did with its own tools first (τ²'s telecom user, on its phone).
            let acted: Vec<String> = p["acted"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|a| {
                    let results = a["results"].as_array().cloned().unwrap_or_default();
                    a["calls"].as_array().cloned().unwrap_or_default().into_iter().map(move |c| {
                        let answer = results.iter().find(|r| r["call_id"] == c["id"]).map(|r| text(&r["content"]));
                        format!("{} {} -> {}", text(&c["name"]), text(&c["arguments"]), answer.unwrap_or_default())
                    })
                })
                .collect();
            let acted = if acted.is_empty() { String::new() } else { format!("[on its side: {}] ", acted.join("; ")) };
            format!("user: {acted}{}{ends}", p.get("text").map(text).unwrap_or_default())
        }
        // A call through the gateway: model, wire, status, and what came of it.
        EventKind::ModelCall => {
            let mut s = format!("{} {}", text(&p["model"]), text(&p["wire"]));
            if let Some(role) = p.get("role").and_then(Value::as_str) {
                s.push_str(&format!(" ({role}'s)"));
            }
            if p["stream"] == json!(true) {
                s.push_str(" stream");
            }
            if p["replayed"] == json!(true) {
                s.push_str(" replayed");
            }
            if let Some(ms) = p.get("waited_ms").and_then(Value::as_u64).filter(|ms| *ms > 0) {
                let tries = p.get("retries").and_then(Value::as_u64).unwrap_or(0) + 1;
                s.push_str(&format!(" (waited {:.1} s for the provider, {tries} tries)", ms as f64 / 1000.0));
            }
            match p.pointer("/refused/reason") {
                Some(why) => s.push_str(&format!(" refused: {}", text(why))),
                None if p["status"] != json!(200) => s.push_str(&format!(" HTTP {}", text(&p["status"]))),
                None => s.push_str(&format!(" -> {}", p.get("answer").map(text).unwrap_or_default())),
            }
            s
        }
        EventKind::AgentTerminal => {
            p.get("error").filter(|e| !e.is_null()).or_else(|| p.get("final_answer")).map(text).unwrap_or_default()
        }
        EventKind::EvaluatorScore => format!(
            "{} {} {}",
            text(&p["evaluator_id"]),
            if p["passed"] == json!(true) { "pass" } else { "fail" },
            p.get("reason").map(text).unwrap_or_default()
        ),
        _ if p.is_null() => String::new(),
        _ => text(p),
    };
    shown.replace('\n', "⏎")
}
