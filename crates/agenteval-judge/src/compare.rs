//! Comparing two runs task by task: tasks are paired by id (repetitions by their base id), each
//! metric's mean paired difference gets a bootstrap confidence interval, and a metric counts as
//! regressed only when its whole interval is on the bad side. Infrastructure failures are set
//! apart: they are never counted as the agent getting worse.

use std::collections::BTreeSet;

use agenteval_core::format::ResultLine;
use agenteval_core::model::{RunStatus, TerminatedBy};
use agenteval_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::results::RunResults;
use crate::stats::{Interval, median};

/// Version of the comparison document (`docs/report-schema.md`).
pub const COMPARISON_SCHEMA: &str = "1";

#[derive(Debug, Clone, Copy)]
pub struct CompareOptions {
    /// Bootstrap resamples (default 10,000).
    pub resamples: usize,
    /// Seed of the bootstrap, recorded in the output.
    pub seed: u64,
    /// Confidence of the intervals and the noise band (0.95). A run whose repetitions were
    /// spent adaptively is judged at the level of its looks (`adaptive::Design::level`).
    pub level: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions { resamples: 10_000, seed: 20_211_207, level: 0.95 }
    }
}

fn ninety_five() -> f64 {
    0.95
}

/// Which way is better for a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

/// The metrics a comparison reports (and a gates file may name), besides `score:<evaluator>`.
pub const METRICS: &[(&str, Better)] = &[
    ("pass_rate", Better::Higher),
    ("cost_per_task", Better::Lower),
    ("tokens_per_task", Better::Lower),
    ("wall_seconds", Better::Lower),
    ("wall_seconds_p50", Better::Lower),
    ("steps", Better::Lower),
    // Passes whose tests trusted files the agent changed outside its folder (`verify_in: same`).
    ("passed_with_changes", Better::Lower),
    // Tasks whose agent changed files their grading reads (the tamper audit), as a share.
    ("tampered", Better::Lower),
];

/// Which way is better for a metric name, `score:<id>` included; `None` for an unknown name.
pub fn better_of(metric: &str) -> Option<Better> {
    if metric.strip_prefix("score:").is_some_and(|id| !id.is_empty()) {
        return Some(Better::Higher);
    }
    METRICS.iter().find(|(m, _)| *m == metric).map(|(_, b)| *b)
}

/// One side of a comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Side {
    pub run_id: String,
    pub name: String,
    pub status: RunStatus,
    pub bundle: String,
    pub benchmark: String,
    /// Tasks (base ids) with a result on this side.
    pub tasks: usize,
    /// What this side's adaptive repetitions spent against the fixed design (`None`: fixed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<agenteval_core::model::AdaptiveSpend>,
    /// What this side's finished attempts cost (`None`: a cost is unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One metric on both sides.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetricDiff {
    pub metric: String,
    pub better: Better,
    /// Mean (or p50) over the paired tasks.
    pub base: f64,
    pub cand: f64,
    /// Candidate − base, with its 95% interval (`None` for p50, which is reported, not judged).
    pub diff: Option<Interval>,
    /// The whole interval is on the bad side.
    pub regressed: bool,
    /// The whole interval is on the good side.
    pub improved: bool,
    /// The difference is within the noise the base's own repetitions measured (`Noise`): not
    /// judged a regression or an improvement, whatever its interval.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub within_noise: bool,
    /// The paired test of the tasks' differences (McNemar's exact test on pass/fail, the sign
    /// test otherwise), beside the bootstrap's interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_test: Option<crate::stats::PairedTest>,
    /// The smallest difference this many paired tasks can detect (80% power, 5% two-sided),
    /// in the metric's unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mde: Option<f64>,
}

impl MetricDiff {
    /// How much worse the candidate is at best and at worst within the interval (positive is
    /// worse), whichever way is better for the metric.
    pub fn worse_range(&self) -> Option<(f64, f64)> {
        self.diff.map(|d| match self.better {
            Better::Higher => (-d.hi, -d.lo),
            Better::Lower => (d.lo, d.hi),
        })
    }
}

/// A task whose outcome changed, with why it fails now (or failed before).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskChange {
    pub task_id: String,
    /// Fraction of the task's repetitions that passed.
    pub base_pass: f64,
    pub cand_pass: f64,
    /// How the failing side ended (`terminated_by` of its first failing repetition).
    pub ended: Option<TerminatedBy>,
}

/// A task left out of the statistics because infrastructure failed on a side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InfraTask {
    pub task_id: String,
    pub base: bool,
    pub cand: bool,
}

/// The comparison of two runs (`comparison.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: String,
    pub base: Side,
    pub cand: Side,
    pub resamples: usize,
    pub seed: u64,
    /// The confidence of the intervals and the noise band (0.95 unless the run's repetitions
    /// were spent adaptively).
    #[serde(default = "ninety_five")]
    pub level: f64,
    /// The tag whose values group the tasks when the intervals come from resampling groups
    /// (`cluster_by` in a gates file), and how many groups there were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clustered_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<usize>,
    /// Tasks on both sides without an infrastructure failure: what the statistics cover.
    pub paired_tasks: usize,
    pub metrics: Vec<MetricDiff>,
    pub regressions: Vec<TaskChange>,
    pub improvements: Vec<TaskChange>,
    /// Tasks only the candidate has.
    pub added: Vec<String>,
    /// Tasks only the base has.
    pub removed: Vec<String>,
    pub infra_failures: Vec<InfraTask>,
    /// Tasks on both sides whose content differs (input, expected answer, own evaluators, data:
    /// their fingerprints differ): different questions under one id, left out of the statistics.
    #[serde(default)]
    pub changed: Vec<String>,
    /// The runs were graded with different settings (benchmark settings or evaluators): every
    /// number may move for that reason alone.
    #[serde(default)]
    pub grading_changed: bool,
    /// The runs' other actors differ (the simulated user's model or settings): each named, a
    /// changed input rather than a changed agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles_changed: Vec<String>,
    /// Evaluators that scored the candidate's paired tasks and none of the base's (added since,
    /// or by `agenteval regrade`), and the other way round: no difference can be measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scores_added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scores_removed: Vec<String>,
    /// What a pairwise judge said of the paired tasks' answers (`compare --pairwise`); its score
    /// is the `pairwise` metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairwise: Option<PairwiseTally>,
    /// What the base's own repetitions say of the pass rate's noise, when it ran any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<Noise>,
    /// Tasks that passed in the base and fail now, but flipped among the base's own
    /// repetitions: within the noise, not counted as regressions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaky_changes: Vec<TaskChange>,
}

/// The noise of the pass rate as the base's repetitions measured it: how far apart two runs of
/// the same agent land by chance alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Noise {
    /// The most repetitions the base ran of a task.
    pub base_repetitions: u32,
    /// The base's mean flip rate over the paired tasks (the chance two attempts of a task disagree).
    pub flip_rate: f64,
    /// Half-width of the 95% band around zero that the pass-rate difference of two runs like
    /// these (the base's repetitions, the candidate's) falls in by chance alone.
    pub pass_rate_band: f64,
    /// Paired tasks that flipped among the base's repetitions.
    pub flaky_tasks: Vec<String>,
}

/// A pairwise judge's verdicts over the paired tasks, from the candidate's side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairwiseTally {
    /// `provider:model` of the judge.
    pub judge: String,
    pub wins: usize,
    pub ties: usize,
    pub losses: usize,
    /// Tasks the judge could not decide (its error): left out of the metric.
    pub errors: usize,
}

impl Comparison {
    pub fn metric(&self, name: &str) -> Option<&MetricDiff> {
        self.metrics.iter().find(|m| m.metric == name)
    }
}

/// A run's lines grouped by task (repetitions by their base id), in base-id order. Held as
/// positions, not copies: a million-task comparison keeps 12 bytes a task here, and each
/// metric is computed from the lines when it is asked for.
struct Folds<'a> {
    lines: &'a [ResultLine],
    /// Line positions, grouped by base id.
    order: Vec<u32>,
    /// Each task's group: its start in `order` and its number of repetitions.
    groups: Vec<(u32, u32)>,
}

impl<'a> Folds<'a> {
    fn new(lines: &'a [ResultLine]) -> Self {
        let mut order: Vec<u32> = (0..lines.len() as u32).collect();
        // Stable: a task's repetitions stay in line order (its first failure is the first).
        order.sort_by(|&a, &b| lines[a as usize].task_id.base().cmp(lines[b as usize].task_id.base()));
        let mut groups: Vec<(u32, u32)> = Vec::new();
        for (at, &i) in order.iter().enumerate() {
            match groups.last_mut() {
                Some((start, n))
                    if lines[order[*start as usize] as usize].task_id.base() == lines[i as usize].task_id.base() =>
                {
                    *n += 1
                }
                _ => groups.push((at as u32, 1)),
            }
        }
        Folds { lines, order, groups }
    }

    fn len(&self) -> usize {
        self.groups.len()
    }

    /// The lines of task `g`'s repetitions, and their positions in the run's lines.
    fn reps(&self, g: usize) -> impl Iterator<Item = (usize, &'a ResultLine)> + '_ {
        let (start, n) = self.groups[g];
        self.order[start as usize..(start + n) as usize].iter().map(|&i| (i as usize, &self.lines[i as usize]))
    }

    fn id(&self, g: usize) -> &'a str {
        self.lines[self.order[self.groups[g].0 as usize] as usize].task_id.base()
    }

    fn n(&self, g: usize) -> f64 {
        f64::from(self.groups[g].1)
    }

    /// Infrastructure failed on one of the task's repetitions.
    fn infra(&self, g: usize) -> bool {
        self.reps(g).any(|(_, l)| l.terminated_by.says_nothing_about_the_agent())
    }

    /// How the task's first failing repetition ended.
    fn first_failure(&self, g: usize) -> Option<TerminatedBy> {
        self.reps(g).find(|(_, l)| !l.passed).map(|(_, l)| l.terminated_by)
    }

    /// The first repetition's position (for what `tasks.jsonl` says of the task).
    fn first(&self, g: usize) -> usize {
        self.order[self.groups[g].0 as usize] as usize
    }

    /// The mean of `metric` over the task's repetitions; a score missing from some counts as 0
    /// there, and one missing from all is `None`.
    fn value(&self, g: usize, metric: &str) -> Option<f64> {
        let sum = |f: &dyn Fn(&ResultLine) -> f64| self.reps(g).map(|(_, l)| f(l)).sum::<f64>();
        let total = match metric {
            "pass_rate" => sum(&|l| f64::from(u8::from(l.passed))),
            // An unknown cost is no cost to compare: the task is left out of the metric.
            "cost_per_task" if self.reps(g).any(|(_, l)| l.cost_unknown) => return None,
            "cost_per_task" => sum(&|l| l.cost_usd),
            "tokens_per_task" => sum(&|l| l.tokens as f64),
            "wall_seconds" | "wall_seconds_p50" => sum(&|l| l.wall_seconds),
            "steps" => sum(&|l| f64::from(l.steps)),
            "passed_with_changes" => sum(&|l| f64::from(u8::from(l.passed && l.changed_outside > 0))),
            "tampered" => sum(&|l| f64::from(u8::from(l.tampered > 0))),
            m => {
                let id = m.strip_prefix("score:")?;
                let (found, total) = self
                    .reps(g)
                    .filter_map(|(_, l)| l.scores.get(id).map(|s| s.score))
                    .fold((false, 0.0), |(_, t), x| (true, t + x));
                if !found {
                    return None;
                }
                total
            }
        };
        Some(total / self.n(g))
    }

    /// The evaluator ids that scored any of the task's repetitions.
    fn score_ids(&self, g: usize) -> impl Iterator<Item = &'a str> + '_ {
        self.reps(g).flat_map(|(_, l)| l.scores.keys())
    }
}

/// `run_metric`'s name for how many tasks the tamper audit flagged (the `max_tampered` gate).
pub const TAMPERED_TASKS: &str = "tampered_tasks";
/// `run_metric`'s name for how many tasks ended `infra` (the `max_infra` gate).
pub const INFRA_TASKS: &str = "infra_tasks";

/// A metric of one run alone (gates judged without a baseline), computed the way a comparison
/// computes each side: repetitions folded per task, infrastructure failures left out.
pub fn run_metric(lines: &[ResultLine], metric: &str) -> Option<f64> {
    let f = Folds::new(lines);
    // A count, not a mean: the tasks with any repetition the tamper audit flagged.
    if metric == TAMPERED_TASKS {
        let flagged = (0..f.len()).filter(|&g| f.reps(g).any(|(_, l)| l.tampered > 0)).count();
        return Some(flagged as f64);
    }
    if metric == INFRA_TASKS {
        return Some((0..f.len()).filter(|&g| f.infra(g)).count() as f64);
    }
    let values: Vec<f64> = (0..f.len()).filter(|&g| !f.infra(g)).map(|g| f.value(g, metric)).collect::<Option<_>>()?;
    if values.is_empty() {
        return None;
    }
    Some(if metric == "wall_seconds_p50" { median(&values) } else { values.iter().sum::<f64>() / values.len() as f64 })
}

/// A metric's value for each task of one run (repetitions folded, infrastructure failures left
/// out), in task-id order: what a one-run interval is taken over.
pub fn per_task_values(lines: &[ResultLine], metric: &str) -> Vec<f64> {
    let f = Folds::new(lines);
    (0..f.len()).filter(|&g| !f.infra(g)).filter_map(|g| f.value(g, metric)).collect()
}

fn side(r: &RunResults, tasks: usize) -> Side {
    Side {
        run_id: r.meta.run_id.to_string(),
        name: r.meta.name.clone(),
        status: r.meta.status,
        bundle: r.bundle_uri.clone(),
        benchmark: r.meta.benchmark.clone(),
        tasks,
        adaptive: r.meta.adaptive.clone(),
        cost_usd: (!r.lines.iter().any(|l| l.cost_unknown)).then(|| r.lines.iter().map(|l| l.cost_usd).sum()),
    }
}

/// How the two runs' other actors differ, one line per role: a simulated user of another model
/// (or prompt settings) is another conversation partner, so the agent's numbers move for it.
fn roles_changed(base: Option<&serde_json::Value>, cand: Option<&serde_json::Value>) -> Vec<String> {
    let (Some(base), Some(cand)) = (base, cand) else { return Vec::new() };
    let mut names: Vec<&String> = base.as_object().into_iter().chain(cand.as_object()).flat_map(|m| m.keys()).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for role in names {
        let (b, c) = (&base[role.as_str()], &cand[role.as_str()]);
        if b == c {
            continue;
        }
        let what = if role == "user" { "simulated user".to_string() } else { format!("`{role}` role") };
        let model = |v: &serde_json::Value| v["model"].as_str().map_or_else(|| "none".to_string(), str::to_string);
        let said = if model(b) != model(c) {
            format!("the {what} differs: {} in the base, {} in the candidate", model(b), model(c))
        } else {
            format!("the {what}'s settings differ ({}): {b} in the base, {c} in the candidate", model(b))
        };
        out.push(format!("{said}; a changed input, not a changed agent"));
    }
    out
}

/// Compares a candidate run with a base run. Runs of different benchmarks, or with no task in
/// common, cannot be compared (`Invalid`).
pub fn compare(base: &RunResults, cand: &RunResults, opts: CompareOptions) -> Result<Comparison> {
    compare_clustered(base, cand, opts, None)
}

/// [`compare`] with the tasks in groups: the tasks whose candidate line has the tag
/// `<cluster_by>:<value>` form one group per value (a SWE-bench run's `repo:…`), and every
/// interval comes from resampling groups, not tasks (a cluster bootstrap: tasks of one repo
/// fail together, so they are not independent draws). Tasks without the tag are each a group of
/// their own. Fewer than two groups: not clustered.
pub fn compare_clustered(
    base: &RunResults,
    cand: &RunResults,
    opts: CompareOptions,
    cluster_by: Option<&str>,
) -> Result<Comparison> {
    if base.meta.benchmark != cand.meta.benchmark {
        return Err(Error::invalid(format!(
            "cannot compare runs of different benchmarks: {} is `{}`, {} is `{}`",
            base.meta.run_id, base.meta.benchmark, cand.meta.run_id, cand.meta.benchmark
        )));
    }
    let (b, c) = (Folds::new(&base.lines), Folds::new(&cand.lines));
    let (common, added, removed) = merge(&b, &c);
    if common.is_empty() {
        return Err(Error::invalid(format!(
            "runs {} and {} have no finished task in common",
            base.meta.run_id, cand.meta.run_id
        )));
    }
    let mut infra_failures = Vec::new();
    let mut paired: Vec<(usize, usize)> = Vec::new();
    let mut changed = Vec::new();
    for &(x, y) in &common {
        let (bi, ci) = (b.infra(x), c.infra(y));
        if let (Some(p), Some(q)) = (base.fingerprint(b.first(x)), cand.fingerprint(c.first(y)))
            && p != q
        {
            changed.push(b.id(x).to_string());
        } else if bi || ci {
            infra_failures.push(InfraTask { task_id: b.id(x).to_string(), base: bi, cand: ci });
        } else {
            paired.push((x, y));
        }
    }
    drop(common);
    let (mut regressions, improvements) = flips(&b, &c, &paired);
    let scores: BTreeSet<&str> = paired
        .iter()
        .flat_map(|&(x, y)| {
            let theirs: BTreeSet<&str> = c.score_ids(y).collect();
            b.score_ids(x).filter(move |k| theirs.contains(k))
        })
        .collect();
    let base_ids: BTreeSet<&str> = paired.iter().flat_map(|&(x, _)| b.score_ids(x)).collect();
    let cand_ids: BTreeSet<&str> = paired.iter().flat_map(|&(_, y)| c.score_ids(y)).collect();
    let scores_added: Vec<String> = cand_ids.difference(&base_ids).map(|s| s.to_string()).collect();
    let scores_removed: Vec<String> = base_ids.difference(&cand_ids).map(|s| s.to_string()).collect();
    let mut names: Vec<(String, Better)> = METRICS.iter().map(|(m, b)| (m.to_string(), *b)).collect();
    names.extend(scores.into_iter().map(|id| (format!("score:{id}"), Better::Higher)));
    let clusters = cluster_by.and_then(|key| clusters_of(cand, &c, &paired, key));
    let mut metrics = metric_diffs(&names, &paired, clusters.as_ref().map(|(g, _)| g.as_slice()), &b, &c, opts);
    let noise = noise_of(&b, &c, &paired, opts.level);
    let mut flaky_changes = Vec::new();
    if let Some(n) = &noise {
        for m in metrics.iter_mut().filter(|m| m.metric == "pass_rate") {
            if (m.cand - m.base).abs() <= n.pass_rate_band + 1e-12 {
                (m.within_noise, m.regressed, m.improved) = (true, false, false);
            }
        }
        let (flaky, kept): (Vec<TaskChange>, Vec<TaskChange>) =
            regressions.into_iter().partition(|t| n.flaky_tasks.contains(&t.task_id));
        (flaky_changes, regressions) = (flaky, kept);
    }
    Ok(Comparison {
        schema_version: COMPARISON_SCHEMA.into(),
        base: side(base, b.len()),
        cand: side(cand, c.len()),
        resamples: opts.resamples,
        seed: opts.seed,
        level: opts.level,
        clustered_by: clusters.as_ref().map(|_| cluster_by.unwrap_or_default().to_string()),
        clusters: clusters.as_ref().map(|(_, n)| *n),
        paired_tasks: paired.len(),
        metrics,
        regressions,
        improvements,
        added,
        removed,
        infra_failures,
        changed,
        grading_changed: matches!((&base.grading, &cand.grading), (Some(x), Some(y)) if x != y),
        roles_changed: roles_changed(base.roles.as_ref(), cand.roles.as_ref()),
        scores_added,
        scores_removed,
        pairwise: None,
        noise,
        flaky_changes,
    })
}

/// The paired tasks that went from passing to failing, and the other way.
fn flips(b: &Folds<'_>, c: &Folds<'_>, paired: &[(usize, usize)]) -> (Vec<TaskChange>, Vec<TaskChange>) {
    let mut regressions = Vec::new();
    let mut improvements = Vec::new();
    for &(x, y) in paired {
        let (bp, cp) = (b.value(x, "pass_rate").unwrap_or(0.0), c.value(y, "pass_rate").unwrap_or(0.0));
        // A task "passes" when at least half of its repetitions do.
        let change = |ended| TaskChange { task_id: b.id(x).to_string(), base_pass: bp, cand_pass: cp, ended };
        match (bp >= 0.5, cp >= 0.5) {
            (true, false) => regressions.push(change(c.first_failure(y))),
            (false, true) => improvements.push(change(b.first_failure(x))),
            _ => {}
        }
    }
    (regressions, improvements)
}

/// Each paired task's group (by the candidate's `<key>:<value>` tag) and the number of groups;
/// `None` when there are fewer than two.
fn clusters_of(cand: &RunResults, c: &Folds<'_>, paired: &[(usize, usize)], key: &str) -> Option<(Vec<u32>, usize)> {
    let prefix = format!("{key}:");
    let mut ids: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let groups: Vec<u32> = paired
        .iter()
        .map(|&(_, y)| {
            let value = cand
                .tags(c.first(y))
                .iter()
                .find_map(|t| t.strip_prefix(&prefix))
                .map(str::to_string)
                // Untagged: a group of its own.
                .unwrap_or_else(|| format!("\u{0}{}", c.id(y)));
            let next = ids.len() as u32;
            *ids.entry(value).or_insert(next)
        })
        .collect();
    (ids.len() >= 2).then_some((groups, ids.len()))
}

/// The tasks of both sides (positions in each), and those only the candidate or only the base
/// has: both sides are in base-id order, so one merge pairs them.
fn merge(b: &Folds<'_>, c: &Folds<'_>) -> (Vec<(usize, usize)>, Vec<String>, Vec<String>) {
    let (mut common, mut added, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < b.len() || j < c.len() {
        match (i < b.len(), j < c.len()) {
            (true, true) => match b.id(i).cmp(c.id(j)) {
                std::cmp::Ordering::Equal => {
                    common.push((i, j));
                    (i, j) = (i + 1, j + 1);
                }
                std::cmp::Ordering::Less => {
                    removed.push(b.id(i).to_string());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    added.push(c.id(j).to_string());
                    j += 1;
                }
            },
            (true, false) => {
                removed.push(b.id(i).to_string());
                i += 1;
            }
            _ => {
                added.push(c.id(j).to_string());
                j += 1;
            }
        }
    }
    (common, added, removed)
}

/// Each metric's difference over the paired tasks, with its bootstrap interval.
fn metric_diffs(
    names: &[(String, Better)],
    paired: &[(usize, usize)],
    clusters: Option<&[u32]>,
    b: &Folds<'_>,
    c: &Folds<'_>,
    opts: CompareOptions,
) -> Vec<MetricDiff> {
    // Each metric's bootstrap is independent and seeded by its position: the same inputs give
    // the same intervals however the work is spread over threads. As many at once as there are
    // cores: each holds its metric's values (16 bytes a task).
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(1);
    let mut metrics: Vec<MetricDiff> = Vec::with_capacity(names.len());
    for (chunk_at, chunk) in names.chunks(threads).enumerate() {
        let done: Vec<MetricDiff> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(k, (name, better))| {
                    s.spawn(move || {
                        let mut groups: Vec<u32> = Vec::new();
                        let values: Vec<(f64, f64)> = paired
                            .iter()
                            .enumerate()
                            .filter_map(|(at, &(x, y))| {
                                let v = (b.value(x, name)?, c.value(y, name)?);
                                if let Some(cl) = clusters {
                                    groups.push(cl[at]);
                                }
                                Some(v)
                            })
                            .collect();
                        // No task whose cost both sides know: cost is not compared at all.
                        if values.is_empty() && !paired.is_empty() && name == "cost_per_task" {
                            return None;
                        }
                        let groups = clusters.map(|_| groups.as_slice());
                        Some(metric_diff(name, *better, (&values, groups), opts, (chunk_at * threads + k) as u64))
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().expect("a bootstrap thread panicked")).collect()
        });
        metrics.extend(done);
    }
    metrics
}

fn metric_diff(
    name: &str,
    better: Better,
    (values, clusters): (&[(f64, f64)], Option<&[u32]>),
    opts: CompareOptions,
    index: u64,
) -> MetricDiff {
    if name == "wall_seconds_p50" {
        let (bs, cs): (Vec<f64>, Vec<f64>) = values.iter().copied().unzip();
        return MetricDiff {
            metric: name.into(),
            better,
            base: median(&bs),
            cand: median(&cs),
            diff: None,
            regressed: false,
            improved: false,
            within_noise: false,
            paired_test: None,
            mde: None,
        };
    }
    let n = values.len().max(1) as f64;
    let (bsum, csum) = values.iter().fold((0.0, 0.0), |(x, y), (b, c)| (x + b, y + c));
    let diffs: Vec<f64> = values.iter().map(|(b, c)| c - b).collect();
    let seed = opts.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let diff = match clusters {
        Some(cl) => crate::stats::cluster_bootstrap_at(&diffs, cl, opts.resamples, seed, opts.level),
        None => crate::stats::paired_bootstrap_at(&diffs, opts.resamples, seed, opts.level),
    };
    let (bad, good) = match better {
        Better::Higher => (diff.hi < 0.0, diff.lo > 0.0),
        Better::Lower => (diff.lo > 0.0, diff.hi < 0.0),
    };
    MetricDiff {
        metric: name.into(),
        better,
        base: bsum / n,
        cand: csum / n,
        diff: Some(diff),
        regressed: bad,
        improved: good,
        within_noise: false,
        paired_test: Some(crate::stats::paired_test(&diffs)),
        mde: crate::stats::minimum_detectable(&diffs),
    }
}

/// The pass rate's noise from the base's repetitions, over the paired tasks: each task's
/// variance of one attempt (`c·(n−c)/(n·(n−1))`, unbiased; a task run once takes the others'
/// mean), over the base's and the candidate's repetitions of it. `None` when no paired task
/// ran twice in the base.
fn noise_of(b: &Folds<'_>, c: &Folds<'_>, paired: &[(usize, usize)], level: f64) -> Option<Noise> {
    let stats = |x: usize| {
        let n = b.reps(x).count() as u64;
        let passed = b.reps(x).filter(|(_, l)| l.passed).count() as u64;
        (n, passed)
    };
    let measured: Vec<f64> = paired
        .iter()
        .map(|&(x, _)| stats(x))
        .filter(|(n, _)| *n >= 2)
        .map(|(n, k)| crate::stats::flip_rate(n, k) / 2.0)
        .collect();
    if measured.is_empty() {
        return None;
    }
    let mean_var = measured.iter().sum::<f64>() / measured.len() as f64;
    let tasks = paired.len() as f64;
    let mut var = 0.0;
    let mut flaky = Vec::new();
    for &(x, y) in paired {
        let (n, k) = stats(x);
        let v = if n >= 2 { crate::stats::flip_rate(n, k) / 2.0 } else { mean_var };
        if k > 0 && k < n {
            flaky.push(b.id(x).to_string());
        }
        var += v * (1.0 / n.max(1) as f64 + 1.0 / c.n(y).max(1.0));
    }
    let most = paired.iter().map(|&(x, _)| stats(x).0).max().unwrap_or(0);
    Some(Noise {
        base_repetitions: most as u32,
        flip_rate: measured.iter().map(|v| v * 2.0).sum::<f64>() / measured.len() as f64,
        pass_rate_band: crate::stats::z_of(level) * (var / (tasks * tasks)).sqrt(),
        flaky_tasks: flaky,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use agenteval_core::format::LineScore;

    #[test]
    fn a_changed_judge_or_user_is_said_as_a_changed_input_and_an_unchanged_one_is_not() {
        let base = serde_json::json!({"judge": {"model": "anthropic:haiku"}, "user": {"model": "openai:u"}});
        let cand = serde_json::json!({"judge": {"model": "anthropic:sonnet"}, "user": {"model": "openai:u"}});
        let said = roles_changed(Some(&base), Some(&cand));
        assert_eq!(
            said,
            [
                "the `judge` role differs: anthropic:haiku in the base, anthropic:sonnet in the candidate; a changed input, not a changed agent"
            ]
        );
        let priced = serde_json::json!({"judge": {"model": "anthropic:haiku", "max_cost_usd": 1.0}, "user": {"model": "openai:u"}});
        assert!(roles_changed(Some(&base), Some(&priced))[0].contains("`judge` role's settings differ"));
        assert!(roles_changed(Some(&base), Some(&base)).is_empty());
    }

    /// A sealed run of `outcomes` (task id, passed, how it ended), each costing $0.01.
    pub(crate) fn run(name: &str, outcomes: &[(&str, bool, TerminatedBy)]) -> RunResults {
        let mut meta =
            agenteval_testkit::fixtures::metadata(agenteval_core::RunId::new(), name, "jsonl", outcomes.len() as u64);
        meta.agent = "command".into();
        let lines = outcomes
            .iter()
            .map(|(id, passed, ended)| ResultLine {
                task_id: id.parse().unwrap(),
                attempt: 1,
                passed: *passed,
                terminated_by: *ended,
                scores: [("exact", LineScore { score: f64::from(u8::from(*passed)), passed: *passed, error: false })]
                    .into(),
                cost_usd: 0.01,
                tokens: 100,
                wall_seconds: 1.0,
                steps: 3,
                changed_outside: 0,
                cost_unknown: false,
                tampered: 0,
            })
            .collect();
        let fingerprints: Vec<String> =
            outcomes.iter().map(|(id, ..)| format!("fp-{}", id.split('@').next().unwrap_or(id))).collect();
        RunResults::new(meta, format!("/runs/{name}"), lines, Some("g".into()))
            .with_tasks(outcomes.iter().zip(&fingerprints).map(|((id, ..), fp)| (*id, Vec::new(), fp.as_str())))
    }

    /// A run whose tasks `t0`, `t1`, … passed or failed as `passed` says.
    pub(crate) fn results_with(name: &str, passed: &[bool]) -> RunResults {
        let ids: Vec<String> = (0..passed.len()).map(|i| format!("t{i}")).collect();
        let outcomes: Vec<(&str, bool, TerminatedBy)> =
            ids.iter().zip(passed).map(|(id, p)| (id.as_str(), *p, TerminatedBy::Completed)).collect();
        run(name, &outcomes)
    }

    use TerminatedBy::*;

    #[test]
    fn tasks_of_one_repo_are_resampled_together_when_clustered() {
        // Ten repositories of four tasks; the candidate fails every task of three of them.
        let ids: Vec<String> = (0..40).map(|i| format!("t{i:02}")).collect();
        let tags: Vec<Vec<String>> = (0..40).map(|i| vec![format!("repo:r{}", i / 4)]).collect();
        let made = |name: &str, fails: &dyn Fn(usize) -> bool| {
            let outcomes: Vec<(&str, bool, TerminatedBy)> =
                ids.iter().enumerate().map(|(i, id)| (id.as_str(), !fails(i), Completed)).collect();
            let mut meta = agenteval_testkit::fixtures::metadata(agenteval_core::RunId::new(), name, "jsonl", 40);
            meta.agent = "command".into();
            let r = run(name, &outcomes);
            RunResults::new(meta, String::new(), r.lines.clone(), None)
                .with_tasks(ids.iter().zip(&tags).map(|(id, t)| (id.as_str(), t.clone(), "fp")))
        };
        let base = made("b", &|_| false);
        let cand = made("c", &|i| i / 4 < 3);
        let opts = CompareOptions { resamples: 4000, seed: 5, ..Default::default() };
        let flat = compare(&base, &cand, opts).unwrap();
        let grouped = compare_clustered(&base, &cand, opts, Some("repo")).unwrap();
        assert_eq!((grouped.clustered_by.as_deref(), grouped.clusters), (Some("repo"), Some(10)));
        assert_eq!((flat.clustered_by.as_deref(), flat.clusters), (None, None));
        let width = |c: &Comparison| c.metric("pass_rate").and_then(|m| m.diff).map(|d| d.hi - d.lo).unwrap();
        assert!(width(&grouped) > 1.4 * width(&flat), "{} vs {}", width(&grouped), width(&flat));
        // A tag no task has leaves every task its own group: the same as not clustering.
        assert_eq!(compare_clustered(&base, &cand, opts, Some("domain")).unwrap().clusters, Some(40));
        assert!(crate::report::text(&grouped, None).contains("intervals are 95%, clustered by repo (10 groups)"));
    }

    #[test]
    fn regressions_improvements_and_infrastructure_are_told_apart() {
        let mut base = vec![];
        let mut cand = vec![];
        for i in 0..40 {
            let id: &'static str = Box::leak(format!("t{i:02}").into_boxed_str());
            base.push((id, true, Completed));
            // t00..t09 regress; t10 fails on infrastructure only; the rest hold.
            cand.push(match i {
                0..10 => (id, false, AgentError),
                10 => (id, false, InfraFailure),
                _ => (id, true, Completed),
            });
        }
        base.push(("gone", true, Completed));
        cand.push(("new", true, Completed));
        let c = compare(
            &run("b", &base),
            &run("c", &cand),
            CompareOptions { resamples: 2_000, seed: 1, ..Default::default() },
        )
        .unwrap();
        let names: Vec<&str> = c.regressions.iter().map(|r| r.task_id.as_str()).collect();
        assert_eq!(names, (0..10).map(|i| format!("t{i:02}")).collect::<Vec<_>>());
        assert_eq!(c.regressions[0].ended, Some(AgentError));
        assert_eq!(c.infra_failures.len(), 1);
        assert_eq!(c.infra_failures[0].task_id, "t10");
        assert_eq!(c.paired_tasks, 39);
        assert_eq!((c.added.as_slice(), c.removed.as_slice()), (&["new".to_string()][..], &["gone".to_string()][..]));
        let pr = c.metric("pass_rate").unwrap();
        assert!(pr.regressed && pr.diff.unwrap().hi < 0.0, "{pr:?}");
        assert!((pr.diff.unwrap().mean + 10.0 / 39.0).abs() < 1e-12);
        assert!(c.metric("score:exact").unwrap().regressed);
        assert!(!c.metric("cost_per_task").unwrap().regressed, "equal costs: no change");
        // The other way round the same tasks are improvements, nothing regressed.
        let r = compare(
            &run("c", &cand),
            &run("b", &base),
            CompareOptions { resamples: 2_000, seed: 1, ..Default::default() },
        )
        .unwrap();
        assert!(r.regressions.is_empty() && r.improvements.len() == 10);
        assert!(r.metric("pass_rate").unwrap().improved);
    }

    #[test]
    fn tasks_whose_content_changed_are_set_apart_from_the_statistics() {
        let ids: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        let base: Vec<_> = ids.iter().map(|id| (id.as_str(), true, Completed)).collect();
        let cand: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i >= 3, if i < 3 { AgentError } else { Completed }))
            .collect();
        // t0..t2 were edited under the same ids: their failures say nothing about the agent.
        let mut c = run("c", &cand).with_tasks(["t0", "t1", "t2"].map(|id| (id, Vec::new(), "edited")));
        let r =
            compare(&run("b", &base), &c, CompareOptions { resamples: 500, seed: 1, ..Default::default() }).unwrap();
        assert_eq!(r.changed, vec!["t0", "t1", "t2"]);
        assert_eq!(r.paired_tasks, 7);
        assert!(r.regressions.is_empty(), "{:?}", r.regressions);
        assert_eq!(r.metric("pass_rate").unwrap().cand, 1.0);
        assert!(!r.grading_changed);
        c.grading = Some("other".into());
        assert!(
            compare(&run("b", &base), &c, CompareOptions { resamples: 50, seed: 1, ..Default::default() })
                .unwrap()
                .grading_changed
        );
    }

    #[test]
    fn a_run_alone_is_measured_like_a_side_of_a_comparison() {
        let r = run(
            "r",
            &[("a", true, Completed), ("a@r1", false, AgentError), ("b", true, Completed), ("c", false, InfraFailure)],
        );
        // a: 1/2, b: 1; c is left out.
        assert_eq!(run_metric(&r.lines, "pass_rate"), Some(0.75));
        assert_eq!(run_metric(&r.lines, "score:exact"), Some(0.75));
        assert_eq!(run_metric(&r.lines, "score:nope"), None);
        assert_eq!(run_metric(&r.lines, "steps"), Some(3.0));
    }

    #[test]
    fn infrastructure_failures_alone_are_not_a_regression() {
        let base: Vec<_> = (0..20).map(|i| (&*Box::leak(format!("t{i}").into_boxed_str()), true, Completed)).collect();
        let cand: Vec<_> = base
            .iter()
            .enumerate()
            .map(|(i, (id, ..))| (*id, i >= 5, if i < 5 { InfraFailure } else { Completed }))
            .collect();
        let c = compare(&run("b", &base), &run("c", &cand), CompareOptions::default()).unwrap();
        assert!(c.regressions.is_empty());
        assert_eq!(c.infra_failures.len(), 5);
        assert!(!c.metric("pass_rate").unwrap().regressed);
    }

    #[test]
    fn a_difference_within_the_noise_of_the_bases_repetitions_is_not_judged() {
        // Ten tasks, five repetitions each; two flip (three passes in five).
        let ids: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        let mut base = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            for r in 0..5 {
                let rep = if r == 0 { id.clone() } else { format!("{id}@r{r}") };
                base.push((rep, i >= 2 || r % 2 == 0));
            }
        }
        let as_run = |name: &str, v: &[(String, bool)]| {
            let outcomes: Vec<(&str, bool, TerminatedBy)> =
                v.iter().map(|(id, p)| (id.as_str(), *p, if *p { Completed } else { AgentError })).collect();
            run(name, &outcomes)
        };
        // One run in which the flaky two failed: 12 points lower.
        let cand: Vec<(String, bool)> = ids.iter().enumerate().map(|(i, id)| (id.clone(), i >= 2)).collect();
        let c = compare(
            &as_run("b", &base),
            &as_run("c", &cand),
            CompareOptions { resamples: 500, seed: 1, ..Default::default() },
        )
        .unwrap();
        let noise = c.noise.clone().unwrap();
        assert_eq!((noise.base_repetitions, noise.flaky_tasks.clone()), (5, vec!["t0".to_string(), "t1".to_string()]));
        assert!((noise.flip_rate - 0.12).abs() < 1e-9, "two tasks of ten at 0.6: {noise:?}");
        let pr = c.metric("pass_rate").unwrap();
        assert!(pr.within_noise && !pr.regressed, "{pr:?} within ±{}", noise.pass_rate_band);
        assert!(c.regressions.is_empty() && c.flaky_changes.len() == 2, "{:?}", c.flaky_changes);
        // A task that never flipped in the base and fails now is a regression, noise or not.
        let mut worse = cand.clone();
        for w in worse.iter_mut().skip(2).take(6) {
            w.1 = false;
        }
        let c = compare(
            &as_run("b", &base),
            &as_run("c", &worse),
            CompareOptions { resamples: 500, seed: 1, ..Default::default() },
        )
        .unwrap();
        let pr = c.metric("pass_rate").unwrap();
        assert!(!pr.within_noise && pr.regressed, "{pr:?}");
        assert_eq!(c.regressions.len(), 6);
        // A base of one repetition measures no noise.
        let once: Vec<(String, bool)> = ids.iter().map(|id| (id.clone(), true)).collect();
        assert!(compare(&as_run("b", &once), &as_run("c", &cand), CompareOptions::default()).unwrap().noise.is_none());
    }

    #[test]
    fn repetitions_pair_by_base_id_and_mismatched_runs_are_refused() {
        let base =
            [("a@r1", true, Completed), ("a", true, Completed), ("b", false, AgentError), ("b@r1", true, Completed)];
        let cand =
            [("a", false, AgentError), ("a@r1", false, AgentError), ("b", true, Completed), ("b@r1", true, Completed)];
        let c = compare(
            &run("b", &base),
            &run("c", &cand),
            CompareOptions { resamples: 200, seed: 3, ..Default::default() },
        )
        .unwrap();
        assert_eq!(c.paired_tasks, 2);
        assert_eq!(c.regressions.len(), 1);
        assert_eq!(c.regressions[0].task_id, "a");
        let mut other = run("c", &cand);
        other.meta.benchmark = "toy".into();
        assert!(
            compare(&run("b", &base), &other, CompareOptions::default())
                .unwrap_err()
                .to_string()
                .contains("different benchmarks")
        );
        let disjoint = run("d", &[("zzz", true, Completed)]);
        assert!(
            compare(&run("b", &base), &disjoint, CompareOptions::default())
                .unwrap_err()
                .to_string()
                .contains("no finished task in common")
        );
    }
}
