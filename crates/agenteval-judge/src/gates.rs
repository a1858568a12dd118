//! Gates: a YAML file of limits on a comparison that turns it into a verdict (and an exit code).
//! Loading reports every problem at once with `file:line:column`; judging is a pure function of
//! the comparison (or, with no baseline, of the candidate alone).
//!
//! ```yaml
//! on_missing_baseline: fail        # or pass (default: fail when a gate compares, else pass)
//! cluster_by: repo                 # intervals resample groups of tasks (tag `repo:…`), not tasks
//! min_tasks: 20
//! max_task_regressions: 2
//! regressions: {max: 0}            # metrics worse beyond noise (whole interval on the bad side)
//! max_changed_share: 0.1           # above it, no verdict: the runs asked different questions
//! max_tampered: 0                  # tasks whose agent changed files their grading reads
//! max_infra: 0                     # tasks that say nothing of the agent (infra), left out of the rest
//! metrics:
//!   pass_rate: {min: 0.6, max_drop: 0.05}
//!   cost_per_task: {max_drop_pct: 20}
//!   score:exact_match: {max_drop: 0.1}
//! ```

use std::collections::BTreeMap;

use agenteval_core::config::{ConfigError, Origin, Problem, YamlDoc, did_you_mean};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::compare::{Better, Comparison, METRICS, better_of};

/// What to do when there is no baseline to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMissingBaseline {
    Fail,
    Pass,
}

/// Limits on one metric. `min`/`max` bound the candidate's value; `max_drop` (absolute) and
/// `max_drop_pct` (relative to the base) bound how much worse it got, judged on the point
/// estimate (the mean paired difference): a drop is a budget, and whether it is beyond noise is
/// what the `regressions` gate asks.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MetricGate {
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub max_drop: Option<f64>,
    pub max_drop_pct: Option<f64>,
}

/// How a drop gate decides from the comparison.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecideBy {
    /// The mean paired difference against the drop allowed: GO or NO-GO (a drop is a budget).
    #[default]
    Point,
    /// The whole 95% interval: GO when even its worst end is within the drop allowed, NO-GO
    /// when even its best end is beyond it, INCONCLUSIVE when it straddles the limit.
    Interval,
}

/// A gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    #[serde(rename = "GO")]
    Go,
    #[serde(rename = "NO-GO")]
    NoGo,
    /// The data cannot tell (within noise, or an interval across the limit): never a pass.
    #[serde(rename = "INCONCLUSIVE")]
    Inconclusive,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Go => "GO",
            Decision::NoGo => "NO-GO",
            Decision::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// A set of answers as one: NO-GO if any is, else INCONCLUSIVE if any is, else GO.
    pub fn of_all(all: impl IntoIterator<Item = Decision>) -> Decision {
        all.into_iter().fold(Decision::Go, |acc, d| match (acc, d) {
            (Decision::NoGo, _) | (_, Decision::NoGo) => Decision::NoGo,
            (Decision::Inconclusive, _) | (_, Decision::Inconclusive) => Decision::Inconclusive,
            _ => Decision::Go,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gates {
    pub on_missing_baseline: OnMissingBaseline,
    /// How drop gates decide (`decide_by: point | interval`).
    pub decide_by: DecideBy,
    /// `cluster_by: repo`: tasks tagged `repo:<value>` are resampled by group (a cluster
    /// bootstrap) for every interval the gates judge.
    pub cluster_by: Option<String>,
    /// `baseline: promote`: a complete run whose gates all say GO, judged and kept (`submit`,
    /// `compare --record`), becomes its name's baseline.
    pub promote: bool,
    pub min_tasks: Option<u64>,
    pub max_task_regressions: Option<u64>,
    /// Most metrics allowed to be worse beyond noise (`regressions: {max: N}`).
    pub max_regressions: Option<u64>,
    /// Largest share (0..=1) of the tasks on both sides whose content changed for which a
    /// verdict is still given; above it the gates refuse to judge.
    pub max_changed_share: f64,
    /// Most tasks of the candidate the tamper audit may flag (`max_tampered: 0`: none).
    pub max_tampered: Option<u64>,
    /// Most tasks of the candidate that ended `infra` (left out of every other figure).
    pub max_infra: Option<u64>,
    pub metrics: BTreeMap<String, MetricGate>,
}

impl Gates {
    /// Whether a gate compares with a baseline (a drop, regressions): only then can a missing
    /// baseline leave the file unjudged.
    pub fn needs_baseline(&self) -> bool {
        self.max_task_regressions.is_some()
            || self.max_regressions.is_some()
            || self.metrics.values().any(|g| g.max_drop.is_some() || g.max_drop_pct.is_some())
    }
}

const TOP: &[&str] = &[
    "on_missing_baseline",
    "decide_by",
    "cluster_by",
    "baseline",
    "min_tasks",
    "max_task_regressions",
    "regressions",
    "max_changed_share",
    "max_tampered",
    "max_infra",
    "metrics",
];

/// `max_changed_share` when a gates file does not say.
pub const DEFAULT_MAX_CHANGED_SHARE: f64 = 0.1;
const LIMITS: &[&str] = &["min", "max", "max_drop", "max_drop_pct"];

fn unknown(what: &str, got: &str, known: &[&str]) -> String {
    match did_you_mean(got, known.iter().copied()) {
        Some(k) => format!("unknown {what} `{got}` (did you mean `{k}`?)"),
        None => format!("unknown {what} `{got}` (expected one of: {})", known.join(", ")),
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Parses and checks a gates file's text; `file` names it in messages.
// Long: one arm per key of the file, each with its own check and message, read top to bottom.
pub fn load_gates_str(text: &str, file: &str) -> Result<Gates, ConfigError> {
    let fail = |problems: Vec<Problem>| ConfigError { file: file.to_string(), problems };
    let doc = YamlDoc::parse(text).map_err(fail)?;
    let mut problems = Vec::new();
    // Unknown names point at the key, bad values at the value.
    let mut problem = |pointer: String, message: String| {
        let origin = if message.starts_with("unknown ") { doc.key_origin(&pointer) } else { doc.origin(&pointer) };
        problems.push(Problem { origin, pointer, message });
    };
    let mut gates = Gates {
        on_missing_baseline: OnMissingBaseline::Fail,
        decide_by: DecideBy::Point,
        cluster_by: None,
        promote: false,
        min_tasks: None,
        max_task_regressions: None,
        max_regressions: None,
        max_changed_share: DEFAULT_MAX_CHANGED_SHARE,
        max_tampered: None,
        max_infra: None,
        metrics: BTreeMap::new(),
    };
    let Value::Object(top) = &doc.value else {
        problem(
            String::new(),
            "a gates file is a mapping (on_missing_baseline, min_tasks, max_task_regressions, metrics)".into(),
        );
        return Err(fail(problems));
    };
    let count = |v: &Value| v.as_u64().ok_or_else(|| format!("must be a whole number of 0 or more, not {v}"));
    for (key, v) in top {
        let at = format!("/{}", escape(key));
        match key.as_str() {
            "on_missing_baseline" => match v.as_str() {
                Some("fail") => gates.on_missing_baseline = OnMissingBaseline::Fail,
                Some("pass") => gates.on_missing_baseline = OnMissingBaseline::Pass,
                _ => problem(at, format!("must be `fail` or `pass`, not {v}")),
            },
            "baseline" => match v.as_str() {
                Some("promote") => gates.promote = true,
                Some("keep") => gates.promote = false,
                _ => problem(
                    at,
                    format!("must be `promote` (a night whose gates hold becomes the baseline) or `keep`, not {v}"),
                ),
            },
            "decide_by" => match v.as_str() {
                Some("point") => gates.decide_by = DecideBy::Point,
                Some("interval") => gates.decide_by = DecideBy::Interval,
                _ => problem(at, format!("must be `point` or `interval`, not {v}")),
            },
            "cluster_by" => match v.as_str() {
                Some(key) if !key.is_empty() && !key.contains(':') => gates.cluster_by = Some(key.to_string()),
                _ => problem(at, format!("must be a tag's name (`repo` groups the tasks tagged `repo:…`), not {v}")),
            },
            "min_tasks" => match count(v) {
                Ok(n) => gates.min_tasks = Some(n),
                Err(m) => problem(at, m),
            },
            "max_task_regressions" => match count(v) {
                Ok(n) => gates.max_task_regressions = Some(n),
                Err(m) => problem(at, m),
            },
            "max_infra" => match count(v) {
                Ok(n) => gates.max_infra = Some(n),
                Err(m) => problem(at, m),
            },
            "max_tampered" => match count(v) {
                Ok(n) => gates.max_tampered = Some(n),
                Err(m) => problem(at, m),
            },
            "max_changed_share" => match v.as_f64() {
                Some(x) if (0.0..=1.0).contains(&x) => gates.max_changed_share = x,
                _ => problem(at, format!("must be a share between 0 and 1, not {v}")),
            },
            "regressions" => match v {
                Value::Object(m) => {
                    for (limit, value) in m {
                        let lat = format!("{at}/{}", escape(limit));
                        match (limit.as_str(), count(value)) {
                            ("max", Ok(n)) => gates.max_regressions = Some(n),
                            ("max", Err(msg)) => problem(lat, msg),
                            (other, _) => problem(lat, unknown("limit", other, &["max"])),
                        }
                    }
                    if m.is_empty() {
                        problem(at, "names no limit: write `regressions: {max: N}`".into());
                    }
                }
                _ => problem(at, format!("must be a mapping, `regressions: {{max: N}}`, not {v}")),
            },
            "metrics" => {
                let Value::Object(metrics) = v else {
                    problem(at, "must be a mapping of metric name to limits".into());
                    continue;
                };
                let known: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
                for (metric, limits) in metrics {
                    let mat = format!("{at}/{}", escape(metric));
                    if better_of(metric).is_none() {
                        problem(
                            mat.clone(),
                            unknown("metric", metric, &known) + "; evaluator scores are `score:<evaluator id>`",
                        );
                        continue;
                    }
                    let Value::Object(limits) = limits else {
                        problem(mat, "must be a mapping of limits (min, max, max_drop, max_drop_pct)".into());
                        continue;
                    };
                    let mut g = MetricGate::default();
                    for (limit, value) in limits {
                        let lat = format!("{mat}/{}", escape(limit));
                        let Some(x) = value.as_f64().filter(|x| x.is_finite()) else {
                            if LIMITS.contains(&limit.as_str()) {
                                problem(lat, format!("must be a number, not {value}"));
                            } else {
                                problem(lat, unknown("limit", limit, LIMITS));
                            }
                            continue;
                        };
                        match limit.as_str() {
                            "min" => g.min = Some(x),
                            "max" => g.max = Some(x),
                            "max_drop" | "max_drop_pct" if x < 0.0 => {
                                problem(lat, format!("must be 0 or more (a drop is how much worse), not {x}"))
                            }
                            "max_drop" => g.max_drop = Some(x),
                            "max_drop_pct" => g.max_drop_pct = Some(x),
                            other => problem(lat, unknown("limit", other, LIMITS)),
                        }
                    }
                    if let (Some(lo), Some(hi)) = (g.min, g.max)
                        && lo > hi
                    {
                        problem(format!("{mat}/min"), format!("min {lo} is greater than max {hi}"));
                    }
                    if limits.is_empty() {
                        problem(mat, "names no limit (min, max, max_drop, max_drop_pct)".into());
                    } else {
                        // Kept even when its limits had problems: the file is refused then anyway.
                        gates.metrics.insert(metric.clone(), g);
                    }
                }
            }
            other => problem(at, unknown("key", other, TOP)),
        }
    }
    // A file that judges the candidate alone (`max_tampered`, metrics' `min`/`max`) has nothing
    // to miss without a baseline: unless it says otherwise, a missing one does not fail it.
    if !top.contains_key("on_missing_baseline") && !gates.needs_baseline() {
        gates.on_missing_baseline = OnMissingBaseline::Pass;
    }
    if problems.is_empty() {
        Ok(gates)
    } else {
        problems.sort_by_key(|p| match p.origin {
            Origin::File { line, column } => (line, column),
            _ => (0, 0),
        });
        Err(fail(problems))
    }
}

/// Reads and checks a gates file.
pub fn load_gates(path: &std::path::Path) -> Result<Gates, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        problems: vec![Problem {
            origin: Origin::Unknown,
            pointer: String::new(),
            message: format!("cannot read: {e}"),
        }],
    })?;
    load_gates_str(&text, &file)
}

/// Why gates must not judge this comparison at all: more than `max_changed_share` of the tasks
/// both runs have changed content under the same ids.
pub fn refusal(gates: &Gates, c: &Comparison) -> Option<String> {
    let common = c.paired_tasks + c.infra_failures.len() + c.changed.len();
    if c.changed.is_empty() || common == 0 {
        return None;
    }
    let share = c.changed.len() as f64 / common as f64;
    (share > gates.max_changed_share).then(|| {
        format!(
            "not judged: {} of {} tasks changed content between the runs ({:.0}% > max_changed_share {:.0}%); compare runs of the same data, or raise max_changed_share in the gates file",
            c.changed.len(),
            common,
            share * 100.0,
            gates.max_changed_share * 100.0
        )
    })
}

/// One gate's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateResult {
    /// `pass_rate.max_drop`, `max_task_regressions`, …
    pub gate: String,
    pub limit: f64,
    /// The value judged (for a drop: how much worse the mean paired difference is).
    pub value: Option<f64>,
    /// GO (and only GO) passes.
    pub passed: bool,
    pub detail: String,
    /// GO, NO-GO or INCONCLUSIVE; absent from documents written before gates had three
    /// answers (then `passed` says GO or NO-GO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

impl GateResult {
    pub fn decision(&self) -> Decision {
        self.decision.unwrap_or(if self.passed { Decision::Go } else { Decision::NoGo })
    }
}

/// The verdict of a set of gates.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// The decision is GO.
    pub passed: bool,
    pub baseline: bool,
    pub gates: Vec<GateResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

impl Verdict {
    pub fn decision(&self) -> Decision {
        self.decision.unwrap_or_else(|| Decision::of_all(self.gates.iter().map(GateResult::decision)))
    }
}

/// How many more task-attempts would bring an interval of half-width `half` around `point` off
/// `limit` (the width shrinks as one over the square root of the attempts), said as attempts and
/// repetitions of each task.
fn more_to_decide(point: f64, half: f64, limit: f64, tasks: u64, reps: u64) -> String {
    let distance = (point - limit).abs();
    let attempts = (tasks * reps.max(1)) as f64;
    if distance < 1e-12 || !half.is_finite() || tasks == 0 {
        return "its difference sits on the limit: no number of repetitions decides it".into();
    }
    let needed = (attempts * (half / distance).powi(2)).ceil();
    let more = (needed - attempts).max(1.0);
    let per_task = (more / tasks as f64).ceil() as u64;
    format!(
        "about {more:.0} more task-attempts ({per_task} more repetition(s) of each of the {tasks} tasks) would decide it"
    )
}

/// A drop gate's line, signed and in the unit of `compare`'s table: the candidate's difference
/// from the base (`-20.00 pts`: the candidate is lower; a rate in percentage points, a
/// `max_drop_pct` in percent of the base), its 95% interval, and the drop allowed. The gate's
/// value stays the amount worse, for scripts.
fn drop_detail(
    metric: &str,
    limit_name: &str,
    better: Better,
    limit: f64,
    worse: (f64, f64, f64),
    level: &str,
) -> String {
    let rate = metric == "pass_rate" || metric == "pairwise" || metric.starts_with("score:");
    let (k, unit) = match limit_name {
        "max_drop_pct" => (1.0, "%"),
        _ if rate => (100.0, " pts"),
        _ => (1.0, ""),
    };
    // Worse is lower for a metric where higher is better, higher for the others.
    let sign = if better == Better::Higher { -1.0 } else { 1.0 };
    let signed = |x: f64| sign * x * k + 0.0;
    let (point, a, b) = (signed(worse.0), signed(worse.1), signed(worse.2));
    format!(
        "{point:+.2}{unit} vs base ({level} CI {:+.2} to {:+.2}); drop allowed {:.2}{unit}",
        a.min(b),
        a.max(b),
        limit * k
    )
}

/// A confidence level in words: `95%`, `99%`, `99.5%`.
pub fn level_words(level: f64) -> String {
    let pct = level * 100.0;
    if (pct - pct.round()).abs() < 1e-9 { format!("{pct:.0}%") } else { format!("{pct:.1}%") }
}

/// Why a cost gate fails when a cost is unknown: never judged as $0.
const UNKNOWN_COST: &str = "cost_per_task is unknown (a model without a price, or an agent whose calls did not go \
     through the gateway): a cost gate cannot pass on it";

/// A candidate's own value of a metric, for judging without a baseline.
pub type Standalone<'a> = &'a dyn Fn(&str) -> Option<f64>;

/// Judges a comparison (or, with `None`, the candidate alone through `standalone`, whose tasks
/// count is `cand_tasks`) against the gates.
// Long: one block per kind of gate, each adding its result; the verdict is their conjunction.
pub fn judge(gates: &Gates, comparison: Option<&Comparison>, standalone: Standalone<'_>, cand_tasks: u64) -> Verdict {
    let mut out: Vec<GateResult> = Vec::new();
    // Macros, not closures: both add to `out`.
    macro_rules! decided {
        ($gate:expr, $limit:expr, $value:expr, $decision:expr, $detail:expr $(,)?) => {{
            let decision: Decision = $decision;
            out.push(GateResult {
                gate: $gate,
                limit: $limit,
                value: $value,
                passed: decision == Decision::Go,
                detail: $detail,
                decision: Some(decision),
            })
        }};
    }
    macro_rules! push {
        ($gate:expr, $limit:expr, $value:expr, $passed:expr, $detail:expr $(,)?) => {
            decided!($gate, $limit, $value, if $passed { Decision::Go } else { Decision::NoGo }, $detail)
        };
    }
    // The intervals' confidence as the comparison computed them (`99%` for an adaptive run).
    let level = level_words(comparison.map_or(0.95, |c| c.level));
    if comparison.is_none() {
        let ok = gates.on_missing_baseline == OnMissingBaseline::Pass;
        push!(
            "on_missing_baseline".into(),
            0.0,
            None,
            ok,
            if ok {
                "no baseline: comparison gates skipped (min_tasks, regressions, drops)".into()
            } else {
                "no baseline to compare with".into()
            },
        );
    }
    // Too few tasks to tell a change from noise is a comparison's gate: a first night that may
    // pass without a baseline (`on_missing_baseline: pass`) is not failed by it.
    let skipped = comparison.is_none() && gates.on_missing_baseline == OnMissingBaseline::Pass;
    let tasks = comparison.map(|c| c.paired_tasks as u64).unwrap_or(cand_tasks);
    if let Some(min) = gates.min_tasks.filter(|_| !skipped) {
        let detail = if tasks >= min {
            format!("{} judged", crate::tasks(tasks as usize))
        } else {
            format!("only {} judged: too few to tell a change from noise", crate::tasks(tasks as usize))
        };
        push!("min_tasks".into(), min as f64, Some(tasks as f64), tasks >= min, detail);
    }
    if let (Some(max), Some(c)) = (gates.max_task_regressions, comparison) {
        let n = c.regressions.len() as u64;
        push!(
            "max_task_regressions".into(),
            max as f64,
            Some(n as f64),
            n <= max,
            format!("{} regressed", crate::tasks(n as usize)),
        );
    }
    // The candidate's own audit, with or without a baseline: a tampered pass is no evidence.
    if let Some(max) = gates.max_tampered {
        let n = standalone(crate::compare::TAMPERED_TASKS).unwrap_or(0.0) as u64;
        let detail = match n {
            0 => "no task's agent changed a file its grading reads".to_string(),
            n => format!(
                "{} whose agent changed files their grading reads (`show RUN TASK` names them)",
                crate::tasks(n as usize)
            ),
        };
        push!("max_tampered".into(), max as f64, Some(n as f64), n <= max, detail);
    }
    // Infra tasks are left out of every other figure: an agent that turns its failures into
    // infra would otherwise pass every gate on the tasks it did not break.
    if let Some(max) = gates.max_infra {
        let n = standalone(crate::compare::INFRA_TASKS).unwrap_or(0.0) as u64;
        let detail = match n {
            0 => "no task ended infra".to_string(),
            n => format!(
                "{} ended infra (left out of every other figure; `runs show RUN --tag infra`)",
                crate::tasks(n as usize)
            ),
        };
        push!("max_infra".into(), max as f64, Some(n as f64), n <= max, detail);
    }
    if let (Some(max), Some(c)) = (gates.max_regressions, comparison) {
        let worse: Vec<&str> = c.metrics.iter().filter(|m| m.regressed).map(|m| m.metric.as_str()).collect();
        let n = worse.len() as u64;
        let detail = if worse.is_empty() {
            format!("no metric worse beyond noise ({level} CI)")
        } else {
            format!("worse beyond noise ({level} CI): {}", worse.join(", "))
        };
        push!("regressions.max".into(), max as f64, Some(n as f64), n <= max, detail);
    }
    for (metric, g) in &gates.metrics {
        let diff = comparison.and_then(|c| c.metric(metric));
        let value = diff.map(|d| d.cand).or_else(|| standalone(metric));
        for (name, limit, ok) in [
            ("min", g.min, value.map(|v| g.min.is_none_or(|m| v >= m))),
            ("max", g.max, value.map(|v| g.max.is_none_or(|m| v <= m))),
        ] {
            if let Some(limit) = limit {
                let passed = ok.unwrap_or(false);
                let detail = match value {
                    Some(v) => format!("{metric} is {}", crate::units::fmt_value(metric, v)),
                    None if metric == "cost_per_task" => UNKNOWN_COST.into(),
                    None => format!("{metric} is not measured in this run"),
                };
                push!(format!("{metric}.{name}"), limit, value, passed, detail);
            }
        }
        if comparison.is_none() {
            continue;
        }
        for (name, limit) in [("max_drop", g.max_drop), ("max_drop_pct", g.max_drop_pct)] {
            let Some(limit) = limit else { continue };
            let gate = format!("{metric}.{name}");
            let (Some(d), Some((best, worst))) = (diff, diff.and_then(|d| d.worse_range())) else {
                let why = match metric.as_str() {
                    "cost_per_task" => format!("{UNKNOWN_COST} on one side or both"),
                    _ => format!("{metric} is not measured on both sides"),
                };
                push!(gate, limit, None, false, why);
                continue;
            };
            // A pass rate that moved less than the base's own repetitions move it is not judged.
            if d.within_noise
                && let Some(n) = comparison.and_then(|c| c.noise.as_ref())
            {
                let moved = d.cand - d.base;
                let tasks = comparison.map_or(0, |c| c.paired_tasks as u64);
                let detail = format!(
                    "{metric} moved {:+.2} pts, within the noise of the base's {} repetitions (±{:.1} pts, {level}): INCONCLUSIVE; {}",
                    moved * 100.0 + 0.0,
                    n.base_repetitions,
                    n.pass_rate_band * 100.0,
                    more_to_decide(moved, n.pass_rate_band, 0.0, tasks, n.base_repetitions as u64)
                );
                decided!(gate, limit, Some(0.0), Decision::Inconclusive, detail);
                continue;
            }
            // How much worse the mean paired difference is (positive is worse).
            let point = match d.better {
                Better::Higher => d.base - d.cand,
                Better::Lower => d.cand - d.base,
            };
            let base = d.base;
            let scale = |x: f64| {
                if name == "max_drop_pct" {
                    if base.abs() > 0.0 {
                        x / base.abs() * 100.0
                    } else if x > 0.0 {
                        f64::INFINITY
                    } else {
                        0.0
                    }
                } else {
                    x
                }
            };
            // `+ 0.0` turns a negative zero into a plain one for display.
            let (point, best, worst) = (scale(point) + 0.0, scale(best) + 0.0, scale(worst) + 0.0);
            // A hair of tolerance, so 0.05 allowed is not failed by 0.05000000000000002 measured.
            let within = |x: f64| x <= limit + 1e-9 * limit.abs().max(1.0);
            let decision = match gates.decide_by {
                DecideBy::Point if within(point) => Decision::Go,
                DecideBy::Point => Decision::NoGo,
                DecideBy::Interval if within(worst) => Decision::Go,
                DecideBy::Interval if !within(best) => Decision::NoGo,
                DecideBy::Interval => Decision::Inconclusive,
            };
            let mut detail = drop_detail(metric, name, d.better, limit, (point, best, worst), &level);
            let rate = metric == "pass_rate" || metric == "pairwise" || metric.starts_with("score:");
            let (k, unit) = match name {
                "max_drop_pct" => (1.0, "%"),
                _ if rate => (100.0, " pts"),
                _ => (1.0, ""),
            };
            if let Some(mde) = d.mde {
                detail.push_str(&format!("; this run detects a change of {:.2}{unit} (80% power)", scale(mde) * k));
            }
            if let Some(t) = &d.paired_test {
                let name = if t.test == "mcnemar_exact" { "McNemar exact" } else { "sign test" };
                let p = if t.p < 0.001 { "< 0.001".to_string() } else { format!("= {:.3}", t.p) };
                detail.push_str(&format!("; {name} p {p} ({} up, {} down)", t.up, t.down));
            }
            if decision == Decision::Inconclusive {
                let tasks = comparison.map_or(0, |c| c.paired_tasks as u64);
                let reps = comparison.and_then(|c| c.noise.as_ref()).map_or(1, |n| n.base_repetitions as u64);
                detail.push_str(&format!(
                    "; INCONCLUSIVE: the {level} interval straddles the drop allowed; {}",
                    more_to_decide(point, (worst - best).abs() / 2.0, limit, tasks, reps)
                ));
            }
            // Judged or not, a gate names the noise band the comparison measured, so that it
            // and the noise verdict never seem to disagree.
            if metric == "pass_rate"
                && let Some(n) = comparison.and_then(|c| c.noise.as_ref())
            {
                detail.push_str(&format!(
                    "; outside the noise of the base's {} repetitions (±{:.1} pts, {level})",
                    n.base_repetitions,
                    n.pass_rate_band * 100.0
                ));
            }
            decided!(gate, limit, Some(point), decision, detail);
        }
    }
    let decision = Decision::of_all(out.iter().map(GateResult::decision));
    Verdict { passed: decision == Decision::Go, baseline: comparison.is_some(), gates: out, decision: Some(decision) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_by_names_a_tag_and_a_bad_one_is_named_with_its_line() {
        let g = load_gates_str("cluster_by: repo\nmetrics:\n  pass_rate: {max_drop: 0.05}\n", "g.yaml").unwrap();
        assert_eq!(g.cluster_by.as_deref(), Some("repo"));
        let e = load_gates_str("metrics: {}\ncluster_by: \"repo:django\"\n", "g.yaml").unwrap_err().to_string();
        assert!(e.contains("g.yaml:2:") && e.contains("must be a tag's name"), "{e}");
    }

    #[test]
    fn every_problem_of_a_gates_file_is_named_with_its_position() {
        let text = "on_missing_baseline: maybe\nmin_taks: 3\nmetrics:\n  pass_rat: {min: 0.5}\n  cost_per_task: {max_drop: lots}\n  steps: {min: 9, max: 2}\n  tokens_per_task: {max_dorp: 1}\n  wall_seconds: {max_drop: -1}\n";
        let e = load_gates_str(text, "gates.yaml").unwrap_err();
        let shown = e.to_string();
        for want in [
            "gates.yaml:1:22: must be `fail` or `pass`",
            "gates.yaml:2:1: unknown key `min_taks` (did you mean `min_tasks`?)",
            "gates.yaml:4:3: unknown metric `pass_rat` (did you mean `pass_rate`?)",
            "gates.yaml:5:29: must be a number, not \"lots\"",
            "gates.yaml:6:16: min 9 is greater than max 2",
            "gates.yaml:7:21: unknown limit `max_dorp` (did you mean `max_drop`?)",
            "gates.yaml:8:28: must be 0 or more",
        ] {
            assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
        }
        assert_eq!(e.problems.len(), 7, "{shown}");
    }

    #[test]
    fn the_shipped_example_loads() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/gates.yaml");
        let g = load_gates(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(g.metrics.contains_key("pass_rate"));
    }

    #[test]
    fn a_good_file_loads() {
        let g = load_gates_str(
            "on_missing_baseline: pass\nmin_tasks: 3\nmax_task_regressions: 0\nmetrics:\n  pass_rate: {min: 0.5, max_drop: 0.05}\n  score:exact: {max_drop_pct: 10}\n",
            "g.yaml",
        )
        .unwrap();
        assert_eq!(g.on_missing_baseline, OnMissingBaseline::Pass);
        assert_eq!(g.metrics["pass_rate"].max_drop, Some(0.05));
        assert_eq!(g.metrics["score:exact"].max_drop_pct, Some(10.0));
    }

    #[test]
    fn a_file_that_needs_no_baseline_is_not_failed_for_missing_one() {
        let g = load_gates_str("max_tampered: 0\nmetrics:\n  pass_rate: {min: 0.5}\n", "g").unwrap();
        assert_eq!(g.on_missing_baseline, OnMissingBaseline::Pass);
        let clean = |m: &str| match m {
            "pass_rate" => Some(0.7),
            crate::compare::TAMPERED_TASKS => Some(0.0),
            _ => None,
        };
        assert!(judge(&g, None, &clean, 10).passed);
        let tampered = |m: &str| if m == crate::compare::TAMPERED_TASKS { Some(1.0) } else { Some(0.7) };
        assert!(!judge(&g, None, &tampered, 10).passed, "one tampered task fails max_tampered: 0");
        let g = load_gates_str("max_infra: 1\n", "g").unwrap();
        let infra = |n: f64| move |m: &str| (m == crate::compare::INFRA_TASKS).then_some(n);
        assert!(judge(&g, None, &infra(1.0), 10).passed);
        let v = judge(&g, None, &infra(2.0), 10);
        assert!(
            !v.passed && v.gates.iter().any(|r| r.gate == "max_infra" && !r.passed),
            "two infra tasks fail max_infra: 1"
        );
        let said = load_gates_str("on_missing_baseline: fail\nmax_tampered: 0\n", "g").unwrap();
        assert_eq!(said.on_missing_baseline, OnMissingBaseline::Fail, "what the file says stands");
    }

    #[test]
    fn without_a_baseline_only_the_candidate_is_judged() {
        let g = load_gates_str("metrics:\n  pass_rate: {min: 0.5, max_drop: 0.1}\n", "g").unwrap();
        let v = judge(&g, None, &|m| (m == "pass_rate").then_some(0.7), 10);
        assert!(!v.passed, "on_missing_baseline defaults to fail");
        assert!(v.gates.iter().any(|r| r.gate == "pass_rate.min" && r.passed));
        let g = load_gates_str("on_missing_baseline: pass\nmetrics:\n  pass_rate: {min: 0.5}\n", "g").unwrap();
        assert!(judge(&g, None, &|_| Some(0.7), 10).passed);
        assert!(!judge(&g, None, &|_| Some(0.4), 10).passed);
    }

    use crate::compare::{CompareOptions, compare, tests::run};
    use agenteval_core::model::TerminatedBy::{AgentError, Completed};

    /// 20 tasks, 15 passed in the base, 11 in the candidate: a 20-point drop in pass rate.
    fn twenty_point_drop() -> Comparison {
        let ids: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
        let side = |passing: usize| -> Vec<(&str, bool, agenteval_core::model::TerminatedBy)> {
            ids.iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i < passing, if i < passing { Completed } else { AgentError }))
                .collect()
        };
        compare(&run("b", &side(15)), &run("c", &side(11)), CompareOptions::default()).unwrap()
    }

    fn gate<'a>(v: &'a Verdict, name: &str) -> &'a GateResult {
        v.gates.iter().find(|g| g.gate == name).unwrap_or_else(|| panic!("no gate {name}: {v:?}"))
    }

    #[test]
    fn a_drop_is_judged_on_the_point_estimate_not_the_best_end_of_the_interval() {
        let c = twenty_point_drop();
        let pr = c.metric("pass_rate").unwrap();
        let (best, _) = pr.worse_range().unwrap();
        assert!(best <= 0.05, "the interval's best end is within 0.05 ({best}): the old rule let this pass");
        let g = load_gates_str("metrics:\n  pass_rate: {max_drop: 0.05, max_drop_pct: 20}\n", "g").unwrap();
        let v = judge(&g, Some(&c), &|_| None, 20);
        assert!(!v.passed);
        let drop = gate(&v, "pass_rate.max_drop");
        assert!(!drop.passed && (drop.value.unwrap() - 0.2).abs() < 1e-12, "{drop:?}");
        assert!(drop.detail.starts_with("-20.00 pts vs base (95% CI -"), "{}", drop.detail);
        assert!(drop.detail.contains("; drop allowed 5.00 pts"), "{}", drop.detail);
        // Beside the interval: what this size can detect, and McNemar's exact test (4 tasks
        // regressed, none improved: p = 2 / 2^4).
        assert!(drop.detail.contains("this run detects a change of"), "{}", drop.detail);
        assert!(drop.detail.contains("McNemar exact p = 0.125 (0 up, 4 down)"), "{}", drop.detail);
        let pct = gate(&v, "pass_rate.max_drop_pct");
        assert!(!pct.passed && (pct.value.unwrap() - 0.2 / 0.75 * 100.0).abs() < 1e-9, "{pct:?}");
        // A budget the drop fits in passes.
        let g = load_gates_str("metrics:\n  pass_rate: {max_drop: 0.2, max_drop_pct: 30}\n", "g").unwrap();
        assert!(judge(&g, Some(&c), &|_| None, 20).passed);
    }

    #[test]
    fn decided_by_the_interval_a_gate_says_go_no_go_or_inconclusive() {
        let c = twenty_point_drop();
        let (best, worst) = c.metric("pass_rate").unwrap().worse_range().unwrap();
        let at = |limit: f64| {
            let g =
                load_gates_str(&format!("decide_by: interval\nmetrics:\n  pass_rate: {{max_drop: {limit}}}\n"), "g")
                    .unwrap();
            judge(&g, Some(&c), &|_| None, 20)
        };
        // The whole interval within the drop allowed: GO; beyond it: NO-GO; across it: neither.
        assert_eq!(at(worst + 0.01).decision(), Decision::Go);
        assert_eq!(at((best - 0.01).max(0.0)).decision(), Decision::NoGo);
        let v = at(0.2);
        assert_eq!(v.decision(), Decision::Inconclusive, "{v:?}");
        assert!(!v.passed, "INCONCLUSIVE is never a pass");
        let g = gate(&v, "pass_rate.max_drop");
        assert!(g.detail.contains("INCONCLUSIVE: the 95% interval straddles"), "{}", g.detail);
        // Decided by the point (the default), the same drop is a NO-GO or a GO, never open.
        let g = load_gates_str("metrics:\n  pass_rate: {max_drop: 0.19}\n", "g").unwrap();
        assert_eq!(judge(&g, Some(&c), &|_| None, 20).decision(), Decision::NoGo);
        assert_eq!(Decision::of_all([Decision::Go, Decision::Inconclusive]), Decision::Inconclusive);
        assert_eq!(Decision::of_all([Decision::NoGo, Decision::Inconclusive]), Decision::NoGo);
        assert!(load_gates_str("decide_by: bayes\n", "g").unwrap_err().to_string().contains("`point` or `interval`"));
    }

    #[test]
    fn regressions_counts_the_metrics_worse_beyond_noise() {
        let c = twenty_point_drop();
        let g = load_gates_str("regressions: {max: 0}\n", "g").unwrap();
        let v = judge(&g, Some(&c), &|_| None, 20);
        let r = gate(&v, "regressions.max");
        assert!(!r.passed && r.detail.contains("pass_rate") && r.detail.contains("score:exact"), "{r:?}");
        assert_eq!(r.value, Some(2.0));
        let g = load_gates_str("regressions: {max: 2}\n", "g").unwrap();
        assert!(judge(&g, Some(&c), &|_| None, 20).passed);
        for bad in ["regressions: 0\n", "regressions: {most: 1}\n", "regressions: {max: -1}\n", "regressions: {}\n"] {
            assert!(load_gates_str(bad, "g").is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cost_gate_on_an_unknown_cost_fails_saying_so_never_as_zero() {
        let g = load_gates_str("on_missing_baseline: pass\nmetrics:\n  cost_per_task: {max: 0.01}\n", "g").unwrap();
        // An unknown cost has no value (`run_metric` gives none): not $0, which would pass.
        let v = judge(&g, None, &|_| None, 5);
        let r = gate(&v, "cost_per_task.max");
        assert!(!r.passed && r.detail.contains("cost_per_task is unknown"), "{r:?}");
        assert!(!v.passed);
    }

    #[test]
    fn a_first_night_that_may_pass_without_a_baseline_is_not_failed_for_its_size() {
        let g = load_gates_str("on_missing_baseline: pass\nmin_tasks: 20\nmetrics:\n  pass_rate: {min: 0.3}\n", "g")
            .unwrap();
        let v = judge(&g, None, &|m| (m == "pass_rate").then_some(0.5), 5);
        assert!(v.passed, "{v:?}");
        assert!(v.gates.iter().all(|r| r.gate != "min_tasks"), "not judged: {v:?}");
        assert!(!judge(&g, None, &|_| Some(0.1), 5).passed, "the candidate's own bounds still hold");
        let g = load_gates_str("on_missing_baseline: fail\nmin_tasks: 20\n", "g").unwrap();
        let v = judge(&g, None, &|_| None, 5);
        assert!(!v.passed && !gate(&v, "min_tasks").passed, "{v:?}");
    }

    #[test]
    fn too_few_tasks_and_a_value_over_max_fail() {
        let c = twenty_point_drop();
        let g =
            load_gates_str("min_tasks: 25\nmax_task_regressions: 3\nmetrics:\n  cost_per_task: {max: 0.005}\n", "g")
                .unwrap();
        let v = judge(&g, Some(&c), &|_| None, 20);
        let min = gate(&v, "min_tasks");
        assert!(!min.passed && min.detail.contains("too few"), "{min:?}");
        assert!(!gate(&v, "cost_per_task.max").passed);
        assert!(!gate(&v, "max_task_regressions").passed, "4 tasks regressed");
        let g =
            load_gates_str("min_tasks: 20\nmax_task_regressions: 4\nmetrics:\n  cost_per_task: {max: 0.011}\n", "g")
                .unwrap();
        assert!(judge(&g, Some(&c), &|_| None, 20).passed);
    }
}
