//! The HTML pages: the runs (filtered, paginated, a name's history charted), a run (the judge's
//! report, or live progress while it runs), a task (the report on that task with its trace
//! viewer open), and two runs compared (the report of the comparison, and regressed tasks side
//! by side). askama renders everything but the report, escaping every value.

use std::collections::HashMap;
use std::sync::Arc;

use agenteval_core::model::{RunRecord, RunStatus, RunVerdict, TaskResult, TaskSpec};
use agenteval_judge::html::{Frame, HtmlReport, TaskRows};
use agenteval_judge::results::RunResults;
use agenteval_judge::samples::Sample;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::App;
use crate::data::{self, Problem};

const PER_PAGE: usize = 50;
/// Runs of one name the history chart shows.
const HISTORY: usize = 30;

type Params = Query<HashMap<String, String>>;

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn rendered(t: impl Template) -> Result<String, Problem> {
    t.render().map_err(|e| Problem { status: StatusCode::INTERNAL_SERVER_ERROR, message: format!("rendering: {e}") })
}

#[derive(Template)]
#[template(path = "problem.html")]
struct ProblemPage<'a> {
    source: &'a str,
    generator: &'a str,
    status: String,
    message: &'a str,
}

/// A page, or the problem that prevented it as a page with its status.
async fn page(app: &App, f: impl std::future::Future<Output = Result<String, Problem>>) -> Response {
    match f.await {
        Ok(body) => html(body),
        Err(p) => problem(app, p),
    }
}

fn problem(app: &App, p: Problem) -> Response {
    let source = app.source.describe();
    let body = ProblemPage {
        source: &source,
        generator: &app.opts.generator,
        status: format!("{} {}", p.status.as_u16(), p.status.canonical_reason().unwrap_or("")),
        message: &p.message,
    }
    .render()
    .unwrap_or_else(|_| p.message.clone());
    (p.status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

pub async fn not_found(State(app): State<Arc<App>>) -> Response {
    problem(&app, Problem::not_found("no such page"))
}

#[derive(Template)]
#[template(path = "nav.html")]
struct Nav<'a> {
    source: &'a str,
}

fn nav(app: &App) -> String {
    let source = app.source.describe();
    Nav { source: &source }.render().unwrap_or_default()
}

fn short(id: &agenteval_core::RunId) -> String {
    id.to_string().chars().take(13).collect()
}

fn status_class(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Complete => "pass",
        RunStatus::Running => "",
        RunStatus::Failed => "fail",
        _ => "warn",
    }
}

fn verdict_class(v: Option<RunVerdict>) -> &'static str {
    match v {
        Some(RunVerdict::Pass) => "pass",
        Some(RunVerdict::Fail) => "fail",
        Some(RunVerdict::Infra | RunVerdict::Incomplete | RunVerdict::Inconclusive) => "warn",
        None => "",
    }
}

// --- runs -------------------------------------------------------------------------------------

#[derive(Default)]
struct Filters {
    name: String,
    benchmark: String,
    status: String,
    verdict: String,
    backend: String,
}

impl Filters {
    fn of(q: &HashMap<String, String>) -> Result<Self, Problem> {
        let get = |k: &str| q.get(k).map(|v| v.trim().to_string()).unwrap_or_default();
        let f = Filters {
            name: get("name"),
            benchmark: get("benchmark"),
            status: get("status"),
            verdict: get("verdict"),
            backend: get("backend"),
        };
        if !f.status.is_empty() && RunStatus::parse(&f.status).is_none() {
            return Err(Problem::bad_request(format!("`{}` is not a run status", f.status)));
        }
        Ok(f)
    }

    fn keeps(&self, r: &RunRecord) -> bool {
        (self.name.is_empty() || agenteval_core::model::of_history(&r.name, &self.name))
            && (self.benchmark.is_empty() || r.benchmark == self.benchmark)
            && (self.status.is_empty() || r.status.as_str() == self.status)
            && (self.verdict.is_empty() || r.verdict.map_or("", RunVerdict::as_str) == self.verdict)
            && (self.backend.is_empty() || r.backend == self.backend)
    }

    fn query(&self, page: usize) -> String {
        let mut parts: Vec<String> = [
            ("name", &self.name),
            ("benchmark", &self.benchmark),
            ("status", &self.status),
            ("verdict", &self.verdict),
            ("backend", &self.backend),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
        parts.push(format!("page={page}"));
        parts.join("&")
    }
}

/// Percent-encodes a query value.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) fn page_number(q: &HashMap<String, String>) -> Result<usize, Problem> {
    match q.get("page") {
        None => Ok(1),
        Some(p) => p
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1_000_000).contains(n))
            .ok_or_else(|| Problem::bad_request(format!("`page={p}`: a page is a number from 1"))),
    }
}

struct Row {
    id: String,
    short: String,
    name: String,
    status: &'static str,
    status_class: &'static str,
    verdict: String,
    verdict_class: &'static str,
    /// The run a judged run was compared with: its id and short form.
    baseline: Option<(String, String)>,
    /// The set a run of a matrix belongs to: its id and short form.
    set: Option<(String, String)>,
    benchmark: String,
    agent: String,
    backend: String,
    /// `passed/total`, and the share of the finished tasks that passed.
    passed: String,
    pass_rate: String,
    cost: String,
    created: String,
}

struct History {
    rate_points: String,
    cost_points: String,
    max_cost: String,
    count: usize,
    /// The tasks that flipped most over these runs: id, flip rate, passes of attempts.
    flakiest: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage<'a> {
    source: &'a str,
    generator: &'a str,
    f: Filters,
    statuses: Vec<&'static str>,
    verdicts: Vec<&'static str>,
    backends: Vec<&'a str>,
    names: Vec<String>,
    rows: Vec<Row>,
    history: Option<History>,
    shown: usize,
    matching: usize,
    page: usize,
    pages: usize,
    prev: Option<String>,
    next: Option<String>,
}

/// A summary's pass rate and cost (`None` when unknown), for the history.
async fn figures(app: &App, runs: &[&RunRecord]) -> Vec<Option<Point>> {
    let reads: Vec<_> = runs.iter().map(|r| data::summary(app, r)).collect();
    futures::future::join_all(reads)
        .await
        .into_iter()
        .map(|s| s.map(|s| (s.pass_rate, s.cost_is_known().then(|| s.known_cost()))))
        .collect()
}

/// One run of a history: its pass rate and its cost (`None` when unknown).
type Point = (f64, Option<f64>);

/// The history's two lines. A run whose cost is unknown has no point on the cost line: it is
/// not a run that cost nothing.
fn chart(points: &[Point]) -> History {
    let n = points.len().max(2) - 1;
    let max_cost = points.iter().filter_map(|p| p.1).fold(0.0f64, f64::max);
    let x = |i: usize| 10.0 + 700.0 * i as f64 / n as f64;
    let y = |v: f64| 130.0 - 120.0 * v;
    let line = |f: &dyn Fn(&Point) -> Option<f64>| {
        let at = points.iter().enumerate().filter_map(|(i, p)| f(p).map(|v| format!("{:.1},{:.1}", x(i), y(v))));
        at.collect::<Vec<_>>().join(" ")
    };
    let known = points.iter().any(|p| p.1.is_some());
    History {
        rate_points: line(&|p| Some(p.0.clamp(0.0, 1.0))),
        cost_points: line(&|p| p.1.map(|c| if max_cost > 0.0 { c / max_cost } else { 0.0 })),
        max_cost: if known { format!("${max_cost:.4}") } else { "unknown".into() },
        count: points.len(),
        flakiest: Vec::new(),
    }
}

/// The ten tasks that flipped most over `runs` (each repetition an attempt): id, flip rate (the
/// chance two attempts disagree) and passes of attempts, flakiest first.
async fn flakiest(app: &App, runs: &[&RunRecord]) -> Vec<(String, String, String)> {
    let reads: Vec<_> = runs.iter().map(|r| data::results(app, r)).collect();
    let mut tally: std::collections::BTreeMap<String, (u64, u64)> = std::collections::BTreeMap::new();
    for results in futures::future::join_all(reads).await.into_iter().flatten() {
        for l in results.lines.iter().filter(|l| !l.terminated_by.says_nothing_about_the_agent()) {
            let (n, c) = tally.entry(l.task_id.base().to_string()).or_default();
            *n += 1;
            *c += u64::from(l.passed);
        }
    }
    let mut rates: Vec<(String, f64, u64, u64)> = tally
        .into_iter()
        .map(|(id, (n, c))| (id, agenteval_judge::stats::flip_rate(n, c), n, c))
        .filter(|(_, r, _, _)| *r > 0.0)
        .collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    rates.into_iter().take(10).map(|(id, r, n, c)| (id, format!("{:.0}%", r * 100.0), format!("{c} of {n}"))).collect()
}

/// A cost for a page: dollars, or `unknown`.
fn money(cost: Option<f64>) -> String {
    cost.map_or_else(|| "unknown".into(), |c| format!("${c:.4}"))
}

pub async fn runs(State(app): State<Arc<App>>, Query(q): Params) -> Response {
    let a = app.clone();
    page(&app, async move {
        let f = Filters::of(&q)?;
        let page = page_number(&q)?;
        let all = data::listing(&a).await?;
        let matching: Vec<&RunRecord> = all.iter().filter(|r| f.keeps(r)).collect();
        let pages = matching.len().div_ceil(PER_PAGE).max(1);
        let shown: Vec<&RunRecord> = matching.iter().skip((page - 1) * PER_PAGE).take(PER_PAGE).copied().collect();
        // A name's history: pass rate and cost of its newest complete runs, oldest first. A run
        // that was interrupted, failed or stopped by its budget is listed (its status says so),
        // never plotted: its pass rate is not a night's.
        let history = if f.name.is_empty() {
            None
        } else {
            let recent: Vec<&RunRecord> =
                matching.iter().filter(|r| r.status == RunStatus::Complete).take(HISTORY).copied().collect();
            let points: Vec<Point> = figures(&a, &recent).await.into_iter().rev().flatten().collect();
            let flakiest = flakiest(&a, &recent).await;
            (!points.is_empty()).then(|| History { flakiest, ..chart(&points) })
        };
        let tallies = futures::future::join_all(shown.iter().map(|r| data::tally(&a, r))).await;
        let rows = shown
            .iter()
            .zip(tallies)
            .map(|(r, t)| Row {
                id: r.run_id.to_string(),
                short: short(&r.run_id),
                name: r.name.clone(),
                status: r.status.as_str(),
                status_class: status_class(r.status),
                verdict: r.verdict.map_or("-", RunVerdict::as_str).to_string(),
                verdict_class: verdict_class(r.verdict),
                baseline: r.baseline.map(|b| (b.to_string(), short(&b))),
                set: r.set_id.as_ref().map(|s| (s.clone(), s.chars().take(13).collect())),
                benchmark: r.benchmark.clone(),
                agent: r.agent.clone(),
                backend: r.backend.clone(),
                passed: match t {
                    Some(t) => format!("{}/{}", t.passed, r.tasks_total),
                    None => format!("?/{}", r.tasks_total),
                },
                pass_rate: t.map(|t| format!("{:.1}%", t.pass_rate() * 100.0)).unwrap_or_else(|| "-".into()),
                cost: t.map(|t| money(t.cost_usd)).unwrap_or_else(|| "-".into()),
                created: r.created_at.format("%Y-%m-%d %H:%M").to_string(),
            })
            .collect();
        let mut names: Vec<String> = all.iter().map(|r| r.name.clone()).collect();
        names.sort();
        names.dedup();
        names.truncate(500);
        // The backends the index has runs of: the UI knows no list of backends.
        let mut backends: Vec<&str> = all.iter().map(|r| r.backend.as_str()).collect();
        backends.push("");
        backends.sort();
        backends.dedup();
        let source = a.source.describe();
        rendered(RunsPage {
            source: &source,
            generator: &a.opts.generator,
            statuses: vec!["", "running", "complete", "interrupted", "budget_exceeded", "failed"],
            verdicts: std::iter::once("").chain(RunVerdict::ALL.map(RunVerdict::as_str)).collect(),
            backends,
            names,
            rows,
            history,
            shown: shown.len(),
            matching: matching.len(),
            page,
            pages,
            prev: (page > 1).then(|| f.query(page - 1)),
            next: (page < pages).then(|| f.query(page + 1)),
            f,
        })
    })
    .await
}

// --- a run -----------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "live.html")]
struct LivePage<'a> {
    source: &'a str,
    generator: &'a str,
    name: &'a str,
    id: String,
    benchmark: &'a str,
    agent: &'a str,
    backend: &'a str,
    created: String,
    p: data::Progress,
    cost: String,
}

async fn live_page(app: &App, r: &RunRecord) -> Result<String, Problem> {
    let p = data::progress(app, r).await?;
    let source = app.source.describe();
    rendered(LivePage {
        source: &source,
        generator: &app.opts.generator,
        name: &r.name,
        id: r.run_id.to_string(),
        benchmark: &r.benchmark,
        agent: &r.agent,
        backend: &r.backend,
        created: r.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        cost: money(p.cost_usd),
        p,
    })
}

pub async fn run(State(app): State<Arc<App>>, Path(run): Path<String>) -> Response {
    let a = app.clone();
    page(&app, async move {
        let r = data::record(&a, &run).await?;
        if data::live(&r) {
            return live_page(&a, &r).await;
        }
        let results = data::results(&a, &r).await?;
        let summary = data::summary(&a, &r).await;
        let store = data::store(&a, &r).await?;
        // A judged run's page shows its verdict, gates and baseline; a damaged judgement costs
        // only that part of the page.
        let judged = data::judged(&a, &r).await.ok().flatten();
        let nav = nav(&a);
        let frame = Frame { nav: &nav, ..Default::default() };
        Ok(agenteval_judge::html::render_run(
            store.as_ref(),
            &results,
            summary.as_deref(),
            judged.as_ref().and_then(|j| j.comparison.as_ref()),
            judged.as_ref().map(|j| &j.verdict),
            &a.opts.generator,
            frame,
        )
        .await)
    })
    .await
}

// --- a task ----------------------------------------------------------------------------------

struct ScoreRow {
    evaluator_id: String,
    kind: String,
    score: String,
    class: &'static str,
    word: &'static str,
    reason: String,
    citations: Vec<u32>,
}

/// A value of the sample: shown whole when short, else its start with the rest folded.
struct ValueBox {
    title: &'static str,
    id: &'static str,
    text: Option<String>,
    head: Option<String>,
    chars: usize,
}

/// Characters of a value shown before the rest folds.
const FOLD: usize = 1_500;

impl ValueBox {
    fn new(title: &'static str, id: &'static str, text: Option<String>) -> Self {
        let chars = text.as_deref().map_or(0, |t| t.chars().count());
        let head = text.as_deref().filter(|_| chars > FOLD).map(|t| t.chars().take(FOLD).chain(['…']).collect());
        ValueBox { title, id, text, head, chars }
    }
}

#[derive(Template)]
#[template(path = "task_section.html")]
struct TaskSection<'a> {
    run: String,
    task: &'a str,
    outcome: &'static str,
    outcome_class: &'static str,
    attempt: u32,
    ended: &'static str,
    cost: String,
    tokens: u64,
    wall: String,
    values: Vec<ValueBox>,
    scores: Vec<ScoreRow>,
    /// Why the grader doubted its verdict.
    suspect: &'a [String],
    /// The tamper audit's findings, each a file and why the grading reads it.
    tampered: Vec<String>,
    /// A task told in steps: each step run, in a line.
    steps: Vec<String>,
    log: &'a str,
}

fn task_section(
    r: &RunRecord,
    result: &TaskResult,
    spec: Option<&TaskSpec>,
    patch: Option<String>,
    log: Option<&str>,
) -> Result<String, Problem> {
    let outcome = result.outcome();
    let sample = Sample::of(spec, result, agenteval_judge::samples::PAGE_VALUE_CHARS);
    let mut values = vec![
        ValueBox::new("Input", "input", sample.input.or_else(|| Some("(not in tasks.jsonl)".into()))),
        ValueBox::new("Expected", "expected", sample.expected),
        ValueBox::new("Answer", "answer", sample.answer.or_else(|| Some("(no answer)".into()))),
    ];
    if sample.error.is_some() {
        values.push(ValueBox::new("Error", "error", sample.error));
    }
    if patch.is_some() {
        values.push(ValueBox::new("Patch", "patch", patch));
    }
    let scores = sample
        .scores
        .into_iter()
        .zip(&result.scores)
        .map(|(s, raw)| ScoreRow {
            evaluator_id: s.evaluator,
            kind: s.kind,
            score: format!("{:.3}", s.score),
            class: if s.error {
                "warn"
            } else if s.passed {
                "pass"
            } else {
                "fail"
            },
            word: if s.error {
                "error"
            } else if s.passed {
                "passed"
            } else {
                "failed"
            },
            reason: s.reason,
            citations: raw.citations.clone(),
        })
        .collect();
    rendered(TaskSection {
        run: r.run_id.to_string(),
        task: result.task_id.as_str(),
        outcome: outcome.as_str(),
        outcome_class: if result.passed { "pass" } else { "fail" },
        attempt: result.attempt,
        ended: result.agent.terminated_by.as_str(),
        cost: agenteval_core::cost::text(result.agent.total_cost_usd, result.agent.cost_unknown),
        tokens: result.agent.total_tokens,
        wall: format!("{:.2} s", result.agent.wall_seconds),
        values,
        scores,
        suspect: &result.suspect,
        tampered: result.tampered.iter().map(ToString::to_string).collect(),
        steps: result
            .steps
            .iter()
            .map(|st| {
                let word = if st.passed { "passed" } else { "not passed" };
                format!("{} {word} ({}, {:.2} s): {}", st.name, st.terminated_by.as_str(), st.wall_seconds, st.reason)
            })
            .collect(),
        log: log.unwrap_or("(no worker log)"),
    })
}

pub async fn task(State(app): State<Arc<App>>, Path((run, task)): Path<(String, String)>) -> Response {
    let a = app.clone();
    page(&app, async move {
        let id = data::task_id(&task)?;
        let r = data::record(&a, &run).await?;
        let (result, log) = data::task_files(&a, &r, &id).await?;
        let store = data::store(&a, &r).await?;
        let meta: agenteval_core::format::Metadata = serde_json::from_slice(
            &store.get(&r.run_id, agenteval_core::layout::METADATA).await.map_err(Problem::from)?,
        )
        .map_err(|e| Problem { status: StatusCode::INTERNAL_SERVER_ERROR, message: format!("metadata.json: {e}") })?;
        let line = agenteval_core::format::ResultLine::from(&result);
        let traces = agenteval_judge::results::load_traces(
            store.as_ref(),
            &r.run_id,
            std::slice::from_ref(&line),
            1,
            agenteval_judge::results::TASK_PAGE_TRACE_BUDGET,
        )
        .await;
        let wanted = std::collections::BTreeSet::from([id.to_string()]);
        let spec = agenteval_judge::samples::specs(store.as_ref(), &r.run_id, &wanted).await.remove(id.as_str());
        // The viewer opens over the page: it shows the sample first, as a report's does.
        let mut traces = traces;
        let patch = agenteval_judge::samples::patch(
            store.as_ref(),
            &r.run_id,
            id.as_str(),
            agenteval_judge::samples::PAGE_VALUE_CHARS,
        )
        .await;
        let sample = Sample {
            patch: patch.clone(),
            ..Sample::of(spec.as_ref(), &result, agenteval_judge::samples::REPORT_VALUE_CHARS)
        };
        traces.samples.insert(id.to_string(), sample);
        let mut rows = TaskRows::new(None, 1);
        rows.push(&line, &[]);
        let nav = nav(&a);
        let section = task_section(&r, &result, spec.as_ref(), patch, log.as_deref())?;
        let generator = a.opts.generator.clone();
        let bundle = store.bundle_uri(&r.run_id);
        Ok(agenteval_judge::html::render(&HtmlReport {
            meta: &meta,
            bundle_uri: &bundle,
            rows: &rows,
            summary: None,
            traces: &traces,
            comparison: None,
            verdict: None,
            generator: &generator,
            frame: Frame { nav: &nav, section: &section, open_task: Some(id.as_str()), ..Default::default() },
        }))
    })
    .await
}

// --- compare ---------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "compare_form.html")]
struct CompareForm<'a> {
    source: &'a str,
    generator: &'a str,
    base: &'a str,
    cand: &'a str,
    gates: bool,
    refs: Vec<String>,
}

#[derive(Template)]
#[template(path = "compare_section.html")]
struct CompareSection<'a> {
    base: &'a str,
    cand: &'a str,
    base_id: String,
    cand_id: String,
    judged: bool,
    gates_name: &'a str,
    regressed: Vec<String>,
}

/// Both runs' results and their comparison (and the verdict, when asked and a gates file was
/// given).
pub(crate) struct Compared {
    pub base: RunRecord,
    pub cand: RunRecord,
    pub cand_results: Arc<agenteval_judge::results::RunResults>,
    pub comparison: agenteval_judge::compare::Comparison,
    pub verdict: Option<agenteval_judge::gates::Verdict>,
}

pub(crate) async fn compared(app: &App, q: &HashMap<String, String>) -> Result<Compared, Problem> {
    let (Some(base), Some(cand)) = (q.get("base"), q.get("cand")) else {
        return Err(Problem::bad_request("compare needs `base` and `cand`"));
    };
    let judge = match q.get("gates").map(String::as_str) {
        None | Some("") | Some("off") => false,
        Some("on") if app.gates.is_some() => true,
        Some("on") => return Err(Problem::bad_request("no gates file: start `agenteval ui --gates FILE`")),
        Some(other) => return Err(Problem::bad_request(format!("`gates={other}`: on or off"))),
    };
    let (base, cand) = (data::record(app, base).await?, data::record(app, cand).await?);
    let (b, c) = (data::results(app, &base).await?, data::results(app, &cand).await?);
    let comparison = agenteval_judge::compare::compare(&b, &c, Default::default())?;
    let verdict = match (&app.gates, judge) {
        (Some(g), true) => {
            let lines = &c.lines;
            Some(agenteval_judge::gates::judge(
                g,
                Some(&comparison),
                &|m| agenteval_judge::compare::run_metric(lines, m),
                lines.len() as u64,
            ))
        }
        _ => None,
    };
    Ok(Compared { base, cand, cand_results: c, comparison, verdict })
}

pub async fn compare(State(app): State<Arc<App>>, Query(q): Params) -> Response {
    let a = app.clone();
    page(&app, async move {
        let (base, cand) = (q.get("base").cloned().unwrap_or_default(), q.get("cand").cloned().unwrap_or_default());
        if base.is_empty() || cand.is_empty() {
            let all = data::listing(&a).await?;
            let mut refs: Vec<String> = Vec::new();
            for r in all.iter().take(200) {
                for x in [format!("latest:{}", r.name), r.run_id.to_string()] {
                    if !refs.contains(&x) {
                        refs.push(x);
                    }
                }
            }
            let source = a.source.describe();
            return rendered(CompareForm {
                source: &source,
                generator: &a.opts.generator,
                base: &base,
                cand: &cand,
                gates: a.gates.is_some(),
                refs,
            });
        }
        let c = compared(&a, &q).await?;
        let store = data::store(&a, &c.cand).await?;
        let summary = data::summary(&a, &c.cand).await;
        let section = rendered(CompareSection {
            base: &base,
            cand: &cand,
            base_id: c.base.run_id.to_string(),
            cand_id: c.cand.run_id.to_string(),
            judged: c.verdict.is_some(),
            gates_name: a.opts.gates.as_ref().map(|g| g.1.as_str()).unwrap_or(""),
            regressed: c.comparison.regressions.iter().map(|t| t.task_id.clone()).collect(),
        })?;
        let nav = nav(&a);
        Ok(agenteval_judge::html::render_run(
            store.as_ref(),
            &c.cand_results,
            summary.as_deref(),
            Some(&c.comparison),
            c.verdict.as_ref(),
            &a.opts.generator,
            Frame { nav: &nav, section: &section, ..Default::default() },
        )
        .await)
    })
    .await
}

#[derive(Template)]
#[template(path = "compare_task.html")]
struct CompareTask<'a> {
    source: &'a str,
    generator: &'a str,
    base: String,
    cand: String,
    task: &'a str,
}

pub async fn compare_task(State(app): State<Arc<App>>, Query(q): Params) -> Response {
    let a = app.clone();
    page(&app, async move {
        let (Some(base), Some(cand), Some(task)) = (q.get("base"), q.get("cand"), q.get("task")) else {
            return Err(Problem::bad_request("needs `base`, `cand` and `task`"));
        };
        let task = data::task_id(task)?;
        let (base, cand) = (data::record(&a, base).await?, data::record(&a, cand).await?);
        let source = a.source.describe();
        rendered(CompareTask {
            source: &source,
            generator: &a.opts.generator,
            base: base.run_id.to_string(),
            cand: cand.run_id.to_string(),
            task: task.as_str(),
        })
    })
    .await
}

#[derive(Template)]
#[template(path = "set.html")]
struct SetPage<'a> {
    source: &'a str,
    generator: &'a str,
    set_id: &'a str,
    /// One column per combination: number, label, run id and short form, status.
    columns: Vec<SetColumn>,
    /// Rows of figures, one per metric: its name and one cell per combination.
    metrics: Vec<(String, Vec<String>)>,
    best: String,
    /// Rows of tasks: its id and one cell per combination (`pass`, `fail`, `infra` or `-`).
    tasks: Vec<(String, Vec<SetCell>)>,
    /// Tasks not shown (the matrix shows at most `MAX_SET_TASKS`).
    more_tasks: usize,
}

struct SetColumn {
    number: u32,
    /// The combination's values, one a line.
    parts: Vec<String>,
    run_id: String,
    short: String,
    status: String,
    base: bool,
}

struct SetCell {
    word: &'static str,
    class: &'static str,
    /// The task's page in that run, when it has a result there.
    link: Option<String>,
}

/// Most task rows a set's matrix shows (the figures above it cover every task).
const MAX_SET_TASKS: usize = 500;

/// `/sets/{set}`: a set's runs (`submit --matrix`) as a matrix, combinations across, the
/// figures and then the tasks down; `?against=N` compares with combination N.
pub async fn set(State(app): State<Arc<App>>, Path(set): Path<String>, Query(q): Params) -> Response {
    let a = app.clone();
    page(&app, async move {
        let all = data::listing(&a).await?;
        let mut records: Vec<&RunRecord> = all.iter().filter(|r| r.set_id.as_deref() == Some(set.as_str())).collect();
        if records.is_empty() {
            return Err(Problem::not_found(format!("no set `{set}` in the index")));
        }
        let mut runs = Vec::with_capacity(records.len());
        for r in &records {
            runs.push(data::results(&a, r).await?);
        }
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|i| runs[*i].meta.set.as_ref().map(|s| s.position).unwrap_or(u32::MAX));
        let runs: Vec<RunResults> = order.iter().map(|i| (*runs[*i]).clone()).collect();
        records = order.iter().map(|i| records[*i]).collect();
        let against =
            match q.get("against") {
                None => 0,
                Some(n) => n.parse::<usize>().ok().filter(|n| (1..=runs.len()).contains(n)).map(|n| n - 1).ok_or_else(
                    || Problem::bad_request(format!("`against={n}`: the set has combinations 1 to {}", runs.len())),
                )?,
            };
        let s = agenteval_judge::set::compare_set(&set, &runs, against, Default::default());
        let columns = s
            .entries
            .iter()
            .zip(&records)
            .map(|(e, r)| SetColumn {
                number: e.position + 1,
                parts: e.label.split(", ").map(str::to_string).collect(),
                run_id: e.run_id.clone(),
                short: short(&r.run_id),
                status: r.status.as_str().to_string(),
                base: e.position == s.base,
            })
            .collect();
        let rows = agenteval_judge::set::rows(&s);
        let metrics = vec![
            ("pass % [95% CI]".to_string(), rows.iter().map(|r| r[2].clone()).collect()),
            ("vs base, points".to_string(), rows.iter().map(|r| r[3].clone()).collect()),
            ("cost per task".to_string(), rows.iter().map(|r| r[4].clone()).collect()),
            ("tasks".to_string(), s.entries.iter().map(|e| e.tasks.to_string()).collect()),
            ("".to_string(), rows.iter().map(|r| r[5].clone()).collect()),
        ];
        // Tasks down, combinations across: each cell what became of the task in that run.
        let mut ids: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for r in &runs {
            ids.extend(r.lines.iter().map(|l| l.task_id.to_string()));
        }
        let more_tasks = ids.len().saturating_sub(MAX_SET_TASKS);
        let by_id: Vec<HashMap<String, &agenteval_core::format::ResultLine>> =
            runs.iter().map(|r| r.lines.iter().map(|l| (l.task_id.to_string(), l)).collect()).collect();
        let tasks = ids
            .into_iter()
            .take(MAX_SET_TASKS)
            .map(|id| {
                let cells = runs
                    .iter()
                    .zip(&by_id)
                    .map(|(r, lines)| match lines.get(&id) {
                        None => SetCell { word: "-", class: "muted", link: None },
                        Some(l) => {
                            let (word, class) = if l.passed {
                                ("pass", "pass")
                            } else if l.terminated_by.says_nothing_about_the_agent() {
                                ("infra", "muted")
                            } else {
                                ("fail", "fail")
                            };
                            SetCell { word, class, link: Some(format!("/runs/{}/tasks/{id}", r.meta.run_id)) }
                        }
                    })
                    .collect();
                (id, cells)
            })
            .collect();
        let source = a.source.describe();
        rendered(SetPage {
            source: &source,
            generator: &a.opts.generator,
            set_id: &set,
            columns,
            metrics,
            best: agenteval_judge::set::best_line(&s).unwrap_or_default(),
            tasks,
            more_tasks,
        })
    })
    .await
}

/// One night's mark and row on the history page.
struct NightRow {
    night: String,
    run_id: String,
    short: String,
    completed: bool,
    run_status: String,
    /// `passed`, `failed`, `errored`, `infra`, or `-` (no result that night).
    outcome: &'static str,
    /// Its mark's class: the outcome, or `none`.
    class: &'static str,
    cost: String,
    tokens: String,
    why: String,
    /// Where its mark is on the strip.
    x: usize,
}

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage<'a> {
    source: &'a str,
    generator: &'a str,
    name: String,
    task: String,
    task_path: String,
    last: String,
    rows: Vec<NightRow>,
    mark_width: usize,
    summary: String,
}

/// `/history?name=&task=&last=`: one task across a name's last nights, oldest first: a mark per
/// night (a night without a result is an empty outline, never a failure or a zero) and a row
/// with its outcome, cost, tokens and why.
pub async fn history(State(app): State<Arc<App>>, Query(q): Params) -> Response {
    page(&app, async {
        let (name, task, nights) = crate::data::task_history(&app, &q).await?;
        let step = 720 / nights.len().max(1);
        let rows: Vec<NightRow> = nights
            .iter()
            .enumerate()
            .map(|(i, n)| NightRow {
                night: n.created_at.get(..16).unwrap_or(&n.created_at).replace('T', " "),
                short: n.run_id.get(..13).unwrap_or(&n.run_id).to_string(),
                run_id: n.run_id.clone(),
                completed: n.completed,
                run_status: n.run_status.clone(),
                outcome: n.outcome.unwrap_or("-"),
                class: n.outcome.unwrap_or("none"),
                cost: if n.outcome.is_some() { money(n.cost_usd) } else { "-".into() },
                tokens: n.tokens.map_or_else(|| "-".into(), |t| t.to_string()),
                why: n.why.chars().take(300).collect(),
                x: i * step,
            })
            .collect();
        let judged = nights.iter().filter(|n| n.outcome.is_some()).count();
        let passed = nights.iter().filter(|n| n.outcome == Some("passed")).count();
        let incomplete = nights.iter().filter(|n| !n.completed).count();
        let mut summary = format!("passed {passed} of {judged} night(s) with a result");
        if incomplete > 0 {
            summary.push_str(&format!("; {incomplete} night(s) did not complete (an empty mark, not counted)"));
        }
        let source = app.source.describe();
        rendered(HistoryPage {
            source: &source,
            generator: &app.opts.generator,
            task_path: encode(task.as_str()),
            task: task.to_string(),
            name,
            last: q.get("last").cloned().unwrap_or_else(|| "30".into()),
            mark_width: step.saturating_sub(2).max(1),
            rows,
            summary,
        })
    })
    .await
}
