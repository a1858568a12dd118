//! Built-in scorers: pass rate, per-evaluator means, cost and tokens, latency percentiles.
//! Each observes task results one at a time and fills its part of the `RunSummary`.

use std::collections::BTreeMap;

use agenteval_core::RunId;
use agenteval_core::model::{EvaluatorSummary, Outcome, RunStatus, RunSummary, TaskCounts, TaskResult};
use agenteval_core::traits::Scorer;

#[derive(Debug, Default)]
pub struct PassRate {
    finished: u64,
    outcomes: TaskCounts,
    terminated_by: BTreeMap<String, u64>,
    passed_with_changes: u64,
    suspect: u64,
    tampered: u64,
    passed_tampered: u64,
    unscored: u64,
    harbor_would_skip: u64,
    /// Tasks with rewards, and each reward name's sum over them (Harbor's mean, kept as sums).
    rewarded: u64,
    reward_sums: BTreeMap<String, f64>,
    models: BTreeMap<String, u64>,
}

impl Scorer for PassRate {
    fn observe(&mut self, r: &TaskResult) {
        self.finished += 1;
        self.passed_with_changes += u64::from(r.passed && r.changed_outside > 0);
        self.suspect += u64::from(!r.suspect.is_empty());
        self.tampered += u64::from(!r.tampered.is_empty());
        self.passed_tampered += u64::from(r.passed && !r.tampered.is_empty());
        self.unscored += u64::from(r.unscored);
        self.harbor_would_skip += u64::from(r.harbor_would_skip.is_some());
        for (m, n) in &r.models {
            *self.models.entry(m.clone()).or_default() += n;
        }
        if let Some(rewards) = r.rewards.as_ref().filter(|m| !m.is_empty()) {
            self.rewarded += 1;
            for (k, v) in rewards {
                *self.reward_sums.entry(k.clone()).or_default() += v;
            }
        }
        self.outcomes.add_outcome(Outcome::of(r.passed, r.agent.terminated_by), 1);
        *self.terminated_by.entry(r.agent.terminated_by.as_str().to_string()).or_default() += 1;
    }

    fn finish(&self, s: &mut RunSummary) {
        s.tasks_finished = self.finished;
        s.passed = self.outcomes.passed;
        s.failed = self.outcomes.failed;
        s.errored = self.outcomes.errored;
        s.infra = self.outcomes.infra;
        let (passed, finished) = (self.outcomes.passed, self.finished);
        s.pass_rate = if finished == 0 { 0.0 } else { passed as f64 / finished as f64 };
        s.terminated_by = self.terminated_by.clone();
        s.passed_with_changes = self.passed_with_changes;
        s.suspect = self.suspect;
        s.tampered = self.tampered;
        s.passed_tampered = self.passed_tampered;
        s.unscored = self.unscored;
        s.harbor_would_skip = self.harbor_would_skip;
        s.mean_reward = harbor_mean(self.rewarded, &self.reward_sums);
        s.models = self.models.clone();
    }
}

/// Harbor's mean reward over `n` rewarded tasks from each name's sum: one `mean` when there is a
/// single name, else one per name (a task without a name counts 0 for it, as Harbor counts it).
fn harbor_mean(n: u64, sums: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    if n == 0 {
        return BTreeMap::new();
    }
    let mean = |sum: f64| sum / n as f64;
    match sums.len() {
        0 => BTreeMap::new(),
        1 => sums.values().map(|v| ("mean".to_string(), mean(*v))).collect(),
        _ => sums.iter().map(|(k, v)| (k.clone(), mean(*v))).collect(),
    }
}

#[derive(Debug, Default)]
pub struct EvaluatorMeans {
    /// Per evaluator: its summary so far, the sum of scores and the sum of their squares.
    sums: BTreeMap<String, (EvaluatorSummary, f64, f64)>,
}

impl Scorer for EvaluatorMeans {
    fn observe(&mut self, r: &TaskResult) {
        for sc in &r.scores {
            let (e, sum, squares) = self.sums.entry(sc.evaluator_id.clone()).or_default();
            e.kind = sc.kind.clone();
            e.count += 1;
            e.passed += sc.passed as u64;
            e.errors += sc.error.is_some() as u64;
            *sum += sc.score;
            *squares += sc.score * sc.score;
        }
    }

    fn finish(&self, s: &mut RunSummary) {
        s.evaluators = self
            .sums
            .iter()
            .map(|(id, (e, sum, squares))| {
                let mut e = e.clone();
                let n = e.count.max(1) as f64;
                e.mean_score = if e.count == 0 { 0.0 } else { sum / n };
                e.stddev_score = (squares / n - e.mean_score * e.mean_score).max(0.0).sqrt();
                (id.clone(), e)
            })
            .collect();
    }
}

#[derive(Debug, Default)]
pub struct CostTokens {
    n: u64,
    cost: f64,
    tokens: u64,
    unknown: u64,
    /// Seconds the calls waited for their provider.
    waited: f64,
    /// Each role's calls, tokens and cost (`None` once a call's price is unknown).
    roles: BTreeMap<String, agenteval_core::model::RoleSummary>,
}

impl Scorer for CostTokens {
    fn observe(&mut self, r: &TaskResult) {
        self.n += 1;
        // A task whose cost is unknown adds nothing, not the priced part it may have had: its
        // result.json writes that part as `null`, and a summary recomputed from the bundle
        // must be the one written live.
        if r.agent.cost_unknown {
            self.unknown += 1;
        } else {
            self.cost += r.total_cost_usd();
        }
        self.tokens = self.tokens.saturating_add(r.agent.total_tokens);
        self.waited += r.provider_wait_seconds;
        for (role, u) in &r.roles {
            let sum = self
                .roles
                .entry(role.clone())
                .or_insert_with(|| agenteval_core::model::RoleSummary { cost_usd: Some(0.0), ..Default::default() });
            sum.calls += u.calls;
            sum.tokens = sum.tokens.saturating_add(u.input_tokens.saturating_add(u.output_tokens));
            sum.cost_usd = sum.cost_usd.zip(u.cost_usd).map(|(a, b)| a + b);
        }
    }

    fn finish(&self, s: &mut RunSummary) {
        let known = self.unknown == 0;
        s.total_cost_usd = known.then_some(self.cost);
        s.mean_cost_usd = known.then(|| if self.n == 0 { 0.0 } else { self.cost / self.n as f64 });
        s.known_cost_usd = (!known && self.cost > 0.0).then_some(self.cost);
        s.total_tokens = self.tokens;
        s.cost_unknown_tasks = self.unknown;
        s.provider_wait_seconds = self.waited;
        s.roles = self.roles.clone();
    }
}

/// Latency percentiles by a streaming estimator, not a table of every task's time: each time
/// falls in a bucket of a logarithmic histogram whose buckets are 2% wide (the DDSketch idea),
/// so a percentile is within 1% of the exact nearest-rank value, and the scorer holds a few KiB
/// whatever the number of tasks (times from a microsecond to a year span under 2,000 buckets).
/// Chosen over an external sort: exact to the digit is not worth a temporary file of every
/// task's time, and a relative error bound is what a latency needs.
#[derive(Debug, Default)]
pub struct Latency {
    buckets: BTreeMap<i32, u64>,
    /// Times of (about) zero, which no logarithm holds.
    zeros: u64,
    count: u64,
}

/// The estimator's relative error.
pub const LATENCY_RELATIVE_ERROR: f64 = 0.01;

impl Latency {
    fn gamma() -> f64 {
        (1.0 + LATENCY_RELATIVE_ERROR) / (1.0 - LATENCY_RELATIVE_ERROR)
    }

    fn add(&mut self, x: f64) {
        self.count += 1;
        if x.is_nan() || x <= 1e-9 {
            self.zeros += 1;
            return;
        }
        let i = (x.ln() / Self::gamma().ln()).ceil() as i32;
        *self.buckets.entry(i).or_default() += 1;
    }

    /// The nearest-rank percentile `p`, within `LATENCY_RELATIVE_ERROR` of the exact one.
    fn percentile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = (((p / 100.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        if rank <= self.zeros {
            return 0.0;
        }
        let g = Self::gamma();
        let mut seen = self.zeros;
        for (&i, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                // The bucket (γ^(i-1), γ^i] answers with the point at most α from all of it.
                return 2.0 * g.powi(i) / (g + 1.0);
            }
        }
        0.0
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Scorer for Latency {
    fn observe(&mut self, r: &TaskResult) {
        self.add(r.agent.wall_seconds);
    }

    fn finish(&self, s: &mut RunSummary) {
        s.latency_p50_seconds = self.percentile(50.0);
        s.latency_p95_seconds = self.percentile(95.0);
    }
}

/// pass@k over repetitions (`<id>@r<n>` are repetitions of `<id>`), and the flaky tasks.
#[derive(Debug, Default)]
pub struct PassAtK {
    /// Per base id: repetitions finished, repetitions passed.
    tasks: BTreeMap<String, (u64, u64)>,
}

impl PassAtK {
    /// An estimator's mean for every k from 1 to `most`, over the tasks with at least k
    /// finished repetitions.
    fn per_k(&self, most: u64, estimate: fn(u64, u64, u64) -> f64) -> BTreeMap<u32, f64> {
        (1..=most)
            .filter_map(|k| {
                let of: Vec<f64> =
                    self.tasks.values().filter(|(n, _)| *n >= k).map(|(n, c)| estimate(*n, *c, k)).collect();
                (!of.is_empty()).then(|| (k as u32, of.iter().sum::<f64>() / of.len() as f64))
            })
            .collect()
    }
}

impl Scorer for PassAtK {
    fn observe(&mut self, r: &TaskResult) {
        let (n, c) = self.tasks.entry(r.task_id.base().to_string()).or_default();
        *n += 1;
        *c += u64::from(r.passed);
    }

    fn finish(&self, s: &mut RunSummary) {
        let most = self.tasks.values().map(|(n, _)| *n).max().unwrap_or(0);
        if most < 2 {
            return;
        }
        s.pass_at_k = self.per_k(most, agenteval_judge::stats::pass_at_k);
        s.flaky_tasks = self.tasks.iter().filter(|(_, (n, c))| *c > 0 && c < n).map(|(id, _)| id.clone()).collect();
        s.pass_hat_k = self.per_k(most, agenteval_judge::stats::pass_hat_k);
        let rates: Vec<(&String, f64)> = self
            .tasks
            .iter()
            .filter(|(_, (n, _))| *n >= 2)
            .map(|(id, (n, c))| (id, agenteval_judge::stats::flip_rate(*n, *c)))
            .collect();
        if !rates.is_empty() {
            s.flip_rate = Some(rates.iter().map(|(_, r)| r).sum::<f64>() / rates.len() as f64);
        }
        s.flip_rates = rates.into_iter().filter(|(_, r)| *r > 0.0).map(|(id, r)| (id.clone(), r)).collect();
    }
}

/// Pass rates by tag: fed each task's tags beside its result (`observe_tags`).
#[derive(Debug, Default)]
pub struct TagRates {
    by_tag: BTreeMap<String, (u64, u64)>,
}

impl TagRates {
    pub fn observe_tags(&mut self, tags: &[String], passed: bool) {
        for t in tags {
            let (n, p) = self.by_tag.entry(t.clone()).or_default();
            *n += 1;
            *p += u64::from(passed);
        }
    }
}

impl Scorer for TagRates {
    // The tags come with `observe_tags`: a result does not carry them.
    fn observe(&mut self, _r: &TaskResult) {}

    fn finish(&self, s: &mut RunSummary) {
        s.tags = self
            .by_tag
            .iter()
            .map(|(t, &(n, p))| {
                let rate = if n == 0 { 0.0 } else { p as f64 / n as f64 };
                (t.clone(), agenteval_core::model::TagSummary { tasks: n, passed: p, pass_rate: rate })
            })
            .collect();
    }
}

/// Every built-in scorer, in the order they fill the summary; pass@k only for runs with
/// repetitions.
pub fn default_scorers(repetitions: bool) -> Vec<Box<dyn Scorer>> {
    let mut all: Vec<Box<dyn Scorer>> = vec![
        Box::new(PassRate::default()),
        Box::new(EvaluatorMeans::default()),
        Box::new(CostTokens::default()),
        Box::new(Latency::default()),
    ];
    if repetitions {
        all.push(Box::new(PassAtK::default()));
    }
    all
}

/// An empty summary for a run, to be filled by scorers.
pub fn empty_summary(run_id: RunId, status: RunStatus, tasks_total: u64) -> RunSummary {
    RunSummary {
        schema_version: agenteval_core::SCHEMA_VERSION.to_string(),
        run_id,
        status,
        tasks_total,
        tasks_finished: 0,
        passed: 0,
        failed: 0,
        errored: 0,
        infra: 0,
        pass_rate: 0.0,
        terminated_by: BTreeMap::new(),
        total_cost_usd: Some(0.0),
        mean_cost_usd: Some(0.0),
        roles: BTreeMap::new(),
        known_cost_usd: None,
        total_tokens: 0,
        latency_p50_seconds: 0.0,
        latency_p95_seconds: 0.0,
        evaluators: BTreeMap::new(),
        pass_at_k: BTreeMap::new(),
        flaky_tasks: Vec::new(),
        pass_hat_k: BTreeMap::new(),
        flip_rate: None,
        flip_rates: BTreeMap::new(),
        tags: BTreeMap::new(),
        cost_unknown_tasks: 0,
        passed_with_changes: 0,
        suspect: 0,
        tampered: 0,
        passed_tampered: 0,
        mean_reward: BTreeMap::new(),
        unscored: 0,
        models: Default::default(),
        provider_wait_seconds: 0.0,
        budget_usd: None,
        over_budget_usd: None,
        calls_without_result: 0,
        cost_without_result_usd: None,
        run_cost_usd: None,
        harbor_would_skip: 0,
        adaptive: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_over_repetitions_and_flaky_tasks() {
        use agenteval_core::model::{AgentResult, TerminatedBy};
        let result = |id: &str, passed: bool| TaskResult {
            image: None,
            changed_outside: 0,
            setup_seconds: None,
            suspect: vec![],
            tampered: vec![],
            without_tampering: None,
            rewards: None,
            unscored: false,
            models: Default::default(),
            provider_wait_seconds: 0.0,
            schema_version: agenteval_core::SCHEMA_VERSION.into(),
            run_id: RunId::new(),
            task_id: id.parse().unwrap(),
            job_id: agenteval_core::JobId::numbered(0, 1),
            attempt: 1,
            passed,
            agent: AgentResult {
                success: true,
                final_answer: None,
                error: None,
                total_cost_usd: 0.0,
                total_tokens: 0,
                wall_seconds: 0.0,
                terminated_by: TerminatedBy::Completed,
                steps: 0,
                cost_unknown: false,
                fault: None,
            },
            scores: vec![],
            started_at: chrono::Utc::now(),
            finished_at: chrono::Utc::now(),
            steps: vec![],
            harbor_would_skip: None,
            roles: Default::default(),
        };
        let mut s = PassAtK::default();
        // Task a: 5 repetitions, 2 pass. Task b: 5 repetitions, all pass.
        for (i, id) in ["a", "a@r1", "a@r2", "a@r3", "a@r4"].iter().enumerate() {
            s.observe(&result(id, i < 2));
        }
        for id in ["b", "b@r1", "b@r2", "b@r3", "b@r4"] {
            s.observe(&result(id, true));
        }
        let mut summary = empty_summary(RunId::new(), RunStatus::Complete, 10);
        s.finish(&mut summary);
        // pass@k of a is 0.4, 0.7, 0.9, 1, 1; of b always 1.
        for (k, a) in [(1, 0.4), (2, 0.7), (3, 0.9), (4, 1.0), (5, 1.0)] {
            assert!((summary.pass_at_k[&k] - (a + 1.0) / 2.0).abs() < 1e-12, "k={k}: {:?}", summary.pass_at_k);
        }
        assert_eq!(summary.flaky_tasks, ["a"]);
    }

    #[test]
    fn the_latency_estimator_is_within_its_stated_error_of_the_exact_percentile() {
        // Times over six orders of magnitude, in a scrambled order, with some zeros.
        let mut times: Vec<f64> =
            (0..20_000u64).map(|i| ((i * 7919) % 20_000) as f64 * 1e-4 * 1.0007f64.powi((i % 977) as i32)).collect();
        times.extend([0.0; 50]);
        let mut l = Latency::default();
        for &t in &times {
            l.add(t);
        }
        let mut sorted = times.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        for p in [1.0, 50.0, 90.0, 95.0, 99.0, 100.0] {
            let (exact, est) = (percentile(&sorted, p), l.percentile(p));
            assert!((est - exact).abs() <= LATENCY_RELATIVE_ERROR * exact + 1e-12, "p{p}: {est} vs {exact}");
        }
        assert!(l.buckets.len() < 2_000, "{} buckets", l.buckets.len());
        assert_eq!(Latency::default().percentile(50.0), 0.0);
        let mut zeros = Latency::default();
        zeros.add(0.0);
        assert_eq!(zeros.percentile(95.0), 0.0);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(|i| i as f64).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&[3.0], 95.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
