//! The statistics of judging: a seeded paired bootstrap for confidence intervals, the unbiased
//! pass@k estimator, percentiles. Pure functions, reproducible from their seed.

use serde::{Deserialize, Serialize};

/// SplitMix64: a tiny, fast generator whose output is fixed by its seed for ever (unlike a
/// library's default generator, which may change between versions), so a recorded seed
/// reproduces an interval exactly.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (Lemire's multiply-shift; the bias is below 2^-32 for the
    /// sizes used here).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// A mean difference and its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
}

/// The `q`-quantile (0..=1) of sorted values, by linear interpolation.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos.fract());
    if i + 1 < sorted.len() { sorted[i] + (sorted[i + 1] - sorted[i]) * frac } else { sorted[i] }
}

/// The median of unsorted values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, 0.5)
}

/// Percentile bootstrap of the mean of paired differences `diffs` (candidate − base, one per
/// task): `resamples` resamples of the tasks with replacement, the 2.5th and 97.5th
/// percentiles of their means. Empty input gives NaNs.
pub fn paired_bootstrap(diffs: &[f64], resamples: usize, seed: u64) -> Interval {
    paired_bootstrap_at(diffs, resamples, seed, 0.95)
}

/// [`paired_bootstrap`] at confidence `level` (0.95: the 2.5th and 97.5th percentiles).
pub fn paired_bootstrap_at(diffs: &[f64], resamples: usize, seed: u64, level: f64) -> Interval {
    let n = diffs.len();
    if n == 0 {
        return Interval { mean: f64::NAN, lo: f64::NAN, hi: f64::NAN };
    }
    let mean = diffs.iter().sum::<f64>() / n as f64;
    let mut rng = SplitMix64::new(seed);
    // Few distinct differences (passed or not, equal costs) in a large run: the same draws and
    // the same sums, each value found through its code, one byte a task, so the codes stay in
    // the cache where the differences do not (measured at 1,000,000 tasks: 74 s against 113 s
    // for a comparison; below ~2 MB of differences the extra lookup costs more than it saves).
    let coded = if n >= CODED_FROM { categories(diffs) } else { None };
    let mut means: Vec<f64> = match coded {
        Some((codes, values)) => (0..resamples.max(1))
            .map(|_| {
                let mut sum = 0.0;
                for _ in 0..n {
                    sum += values[usize::from(codes[rng.below(n)])];
                }
                sum / n as f64
            })
            .collect(),
        _ => (0..resamples.max(1))
            .map(|_| {
                let mut sum = 0.0;
                for _ in 0..n {
                    sum += diffs[rng.below(n)];
                }
                sum / n as f64
            })
            .collect(),
    };
    means.sort_by(f64::total_cmp);
    let tail = ((1.0 - level) / 2.0).clamp(0.0, 0.5);
    Interval { mean, lo: quantile_sorted(&means, tail), hi: quantile_sorted(&means, 1.0 - tail) }
}

/// A cluster bootstrap of the mean of `diffs`: `clusters[i]` is task i's group; each resample
/// draws as many groups as there are, with replacement, and its mean is their tasks' total over
/// their tasks' count. Tasks of one group (one repository's issues) rise and fall together, so
/// resampling them one by one would understate the spread. Fewer than two groups: the paired
/// bootstrap.
pub fn cluster_bootstrap_at(diffs: &[f64], clusters: &[u32], resamples: usize, seed: u64, level: f64) -> Interval {
    let k = clusters.iter().copied().max().map_or(0, |m| m as usize + 1);
    if k < 2 || clusters.len() != diffs.len() {
        return paired_bootstrap_at(diffs, resamples, seed, level);
    }
    let (mut sums, mut counts) = (vec![0.0; k], vec![0.0f64; k]);
    for (d, &c) in diffs.iter().zip(clusters) {
        sums[c as usize] += d;
        counts[c as usize] += 1.0;
    }
    let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
    let mut rng = SplitMix64::new(seed);
    let mut means: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            let (mut s, mut n) = (0.0, 0.0);
            for _ in 0..k {
                let c = rng.below(k);
                s += sums[c];
                n += counts[c];
            }
            if n > 0.0 { s / n } else { mean }
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let tail = ((1.0 - level) / 2.0).clamp(0.0, 0.5);
    Interval { mean, lo: quantile_sorted(&means, tail), hi: quantile_sorted(&means, 1.0 - tail) }
}

/// Differences from which the bootstrap draws codes rather than values (2 MB of `f64`s).
const CODED_FROM: usize = 256 << 10;

/// Each value's code in a table of the distinct values, when there are at most 256 of them.
fn categories(values: &[f64]) -> Option<(Vec<u8>, Vec<f64>)> {
    let mut table: Vec<f64> = Vec::new();
    let mut codes = Vec::with_capacity(values.len());
    for v in values {
        // Compared by bits: the same number is the same value, NaN included.
        let code = match table.iter().position(|t| t.to_bits() == v.to_bits()) {
            Some(c) => c,
            None if table.len() < 256 => {
                table.push(*v);
                table.len() - 1
            }
            None => return None,
        };
        codes.push(code as u8);
    }
    Some((codes, table))
}

/// A paired test of signs: how many tasks moved each way, and the exact two-sided p-value of
/// that split if neither way were likelier. On pass/fail outcomes it is McNemar's exact test
/// (its discordant pairs are the tasks that moved); on rewards or costs, the sign test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedTest {
    /// `mcnemar_exact` or `sign`.
    pub test: String,
    /// Tasks whose difference is above zero, below it, and zero.
    pub up: u64,
    pub down: u64,
    pub ties: u64,
    pub p: f64,
}

/// `ln C(n, k)` by sums of logs (exact enough for any task count a run has).
fn ln_choose(n: u64, k: u64) -> f64 {
    let k = k.min(n - k);
    (0..k).map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln()).sum()
}

/// The exact two-sided binomial p-value of `k` successes in `n` draws at one half: twice the
/// smaller tail, at most 1.
pub fn binomial_two_sided(k: u64, n: u64) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let small = k.min(n - k);
    let ln_half = -(n as f64) * std::f64::consts::LN_2;
    // Summed in log space from the largest term: no underflow at 10,000 pairs.
    let terms: Vec<f64> = (0..=small).map(|i| ln_choose(n, i) + ln_half).collect();
    let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tail = top.exp() * terms.iter().map(|t| (t - top).exp()).sum::<f64>();
    (2.0 * tail).min(1.0)
}

/// The paired test of `diffs` (candidate − base per task): McNemar's exact test when every
/// difference is −1, 0 or 1 (one attempt a side, passed or not), else the sign test.
pub fn paired_test(diffs: &[f64]) -> PairedTest {
    let up = diffs.iter().filter(|d| **d > 0.0).count() as u64;
    let down = diffs.iter().filter(|d| **d < 0.0).count() as u64;
    let ties = diffs.len() as u64 - up - down;
    let binary = diffs.iter().all(|d| *d == 0.0 || d.abs() == 1.0);
    PairedTest {
        test: if binary { "mcnemar_exact" } else { "sign" }.into(),
        up,
        down,
        ties,
        p: binomial_two_sided(up, up + down),
    }
}

/// The smallest mean difference the paired design can detect with 80% power at a two-sided 5%
/// level: (1.96 + 0.84) standard errors of the mean difference.
pub fn minimum_detectable(diffs: &[f64]) -> Option<f64> {
    let n = diffs.len();
    if n < 2 {
        return None;
    }
    let mean = diffs.iter().sum::<f64>() / n as f64;
    let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    Some(2.8 * (var / n as f64).sqrt())
}

/// The standard normal quantile at `p` (0 < p < 1), by Acklam's rational approximation
/// (relative error below 1.2e-9): the `z` of a two-sided interval at level `l` is
/// `normal_quantile(1 − (1 − l)/2)`.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    if !(p > 0.0 && p < 1.0) {
        return if p <= 0.0 { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    let low = 0.024_25;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < low {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - low {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The `z` of a two-sided interval at confidence `level` (1.96 at 0.95).
pub fn z_of(level: f64) -> f64 {
    normal_quantile(1.0 - (1.0 - level) / 2.0)
}

/// The unbiased pass@k estimator of Chen et al. (2021) for one task with `n` samples of which
/// `c` passed: 1 − C(n−c, k) / C(n, k), in its product form (no huge binomials).
pub fn pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    1.0 - ((n - c + 1)..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>()
}

/// pass^k: the chance that k independent attempts all pass, estimated without bias from `n`
/// attempts of which `c` passed (`C(c, k) / C(n, k)`, τ-bench's). `NaN` when `k` is 0 or more
/// than `n`.
pub fn pass_hat_k(n: u64, c: u64, k: u64) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if c < k {
        return 0.0;
    }
    (0..k).map(|i| (c - i) as f64 / (n - i) as f64).product()
}

/// A task's flip rate: the chance that two independent attempts disagree, estimated without
/// bias from `n` attempts of which `c` passed (`2·c·(n−c) / (n·(n−1))`). `NaN` under 2 attempts.
pub fn flip_rate(n: u64, c: u64) -> f64 {
    if n < 2 {
        return f64::NAN;
    }
    2.0 * c as f64 * (n - c) as f64 / (n as f64 * (n - 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantiles_are_the_tables() {
        assert!((z_of(0.95) - 1.959_964).abs() < 1e-5);
        assert!((z_of(0.99) - 2.575_829).abs() < 1e-5);
        assert!((normal_quantile(0.8) - 0.841_621).abs() < 1e-5);
        assert!((normal_quantile(0.001) + 3.090_232).abs() < 1e-5);
    }

    #[test]
    fn tasks_that_move_together_get_a_wider_interval_when_clustered() {
        // Ten repositories of six tasks: in four of them every task got worse at once.
        let diffs: Vec<f64> = (0..60).map(|i| if (i / 6) % 5 < 2 { -1.0 } else { 0.0 }).collect();
        let clusters: Vec<u32> = (0..60).map(|i| i / 6).collect();
        let flat = paired_bootstrap_at(&diffs, 4000, 9, 0.95);
        let grouped = cluster_bootstrap_at(&diffs, &clusters, 4000, 9, 0.95);
        assert_eq!(flat.mean, grouped.mean);
        assert!(grouped.hi - grouped.lo > 1.5 * (flat.hi - flat.lo), "{flat:?} {grouped:?}");
        // One group is no clustering at all.
        assert_eq!(cluster_bootstrap_at(&diffs, &[0; 60], 4000, 9, 0.95), flat);
    }

    #[test]
    fn a_wider_level_gives_a_wider_interval() {
        let diffs: Vec<f64> = (0..60).map(|i| f64::from(i % 3 == 0) - f64::from(i % 5 == 0)).collect();
        let a = paired_bootstrap_at(&diffs, 4000, 3, 0.95);
        let b = paired_bootstrap_at(&diffs, 4000, 3, 0.99);
        assert!(b.lo < a.lo && b.hi > a.hi, "{a:?} {b:?}");
        assert_eq!(a, paired_bootstrap(&diffs, 4000, 3));
    }

    #[test]
    fn the_exact_binomial_and_mcnemar_match_their_tables() {
        // Two-sided exact p of 1 in 10, 0 in 5, 5 in 10 (R's binom.test).
        assert!((binomial_two_sided(1, 10) - 0.021_484_375).abs() < 1e-12);
        assert!((binomial_two_sided(0, 5) - 0.0625).abs() < 1e-12);
        assert_eq!(binomial_two_sided(5, 10), 1.0);
        assert!(binomial_two_sided(4_000, 10_000) < 1e-80, "no underflow to a wrong 0 or NaN");
        let t = paired_test(&[-1.0, -1.0, -1.0, 0.0, 1.0, 0.0]);
        assert_eq!((t.test.as_str(), t.up, t.down, t.ties), ("mcnemar_exact", 1, 3, 2));
        assert!((t.p - 0.625).abs() < 1e-12, "{t:?}");
        assert_eq!(paired_test(&[0.5, -0.2]).test, "sign");
        let mde = minimum_detectable(&[1.0, 0.0, -1.0, 0.0]).unwrap();
        assert!((mde - 2.8 * (2.0f64 / 3.0 / 4.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn pass_hat_k_and_flip_rate_are_the_unbiased_estimates() {
        assert_eq!(pass_hat_k(5, 5, 3), 1.0);
        assert_eq!(pass_hat_k(5, 2, 3), 0.0);
        assert!((pass_hat_k(5, 3, 2) - 0.3).abs() < 1e-12, "C(3,2)/C(5,2) = 3/10");
        assert!(pass_hat_k(3, 3, 4).is_nan());
        assert_eq!(flip_rate(5, 5), 0.0);
        assert!((flip_rate(5, 3) - 0.6).abs() < 1e-12, "2·3·2/(5·4)");
        assert!((flip_rate(2, 1) - 1.0).abs() < 1e-12, "one pass and one fail: every pair disagrees");
        assert!(flip_rate(1, 1).is_nan());
    }

    fn binomial(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product()
    }

    #[test]
    fn pass_at_k_matches_the_closed_form() {
        // n = 5 samples, c = 2 passed: 1 - C(3, k) / C(5, k).
        let want = [0.4, 0.7, 0.9, 1.0, 1.0];
        for (k, w) in (1..=5).zip(want) {
            let closed = 1.0 - binomial(3, k) / binomial(5, k);
            assert!((pass_at_k(5, 2, k) - w).abs() < 1e-12, "k={k}: {}", pass_at_k(5, 2, k));
            assert!((closed - w).abs() < 1e-12, "k={k}: the closed form itself");
        }
        assert_eq!(pass_at_k(5, 0, 3), 0.0);
        assert_eq!(pass_at_k(5, 5, 1), 1.0);
        assert!(pass_at_k(5, 2, 6).is_nan(), "k above n is undefined");
    }

    #[test]
    fn a_constant_difference_has_a_zero_width_interval() {
        let i = paired_bootstrap(&[0.25; 40], 2_000, 7);
        assert_eq!((i.mean, i.lo, i.hi), (0.25, 0.25, 0.25));
    }

    #[test]
    fn the_bootstrap_matches_a_hand_computed_example_and_its_seed() {
        // Two tasks, differences 0 and 1. A resample's mean is 0, 1/2 or 1 with probabilities
        // 1/4, 1/2, 1/4: the 2.5th percentile is 0, the 97.5th is 1, and about half the
        // resamples give 1/2.
        let i = paired_bootstrap(&[0.0, 1.0], 10_000, 42);
        assert_eq!((i.mean, i.lo, i.hi), (0.5, 0.0, 1.0));
        let mut rng = SplitMix64::new(42);
        let halves = (0..10_000).filter(|_| rng.below(2) != rng.below(2)).count();
        assert!((4_800..5_200).contains(&halves), "{halves}");
        // Same seed, same interval; another seed, (almost surely) different resamples.
        let diffs: Vec<f64> = (0..200).map(|i| ((i * 37) % 11) as f64 / 10.0 - 0.4).collect();
        assert_eq!(paired_bootstrap(&diffs, 1_000, 1), paired_bootstrap(&diffs, 1_000, 1));
        assert_ne!(paired_bootstrap(&diffs, 1_000, 1), paired_bootstrap(&diffs, 1_000, 2));
        let i = paired_bootstrap(&diffs, 1_000, 1);
        assert!(i.lo < i.mean && i.mean < i.hi, "{i:?}");
    }

    #[test]
    fn the_interval_is_the_95_percent_one() {
        // Resampled here exactly as the bootstrap does; its ends must be the 2.5th and 97.5th
        // percentiles, which differ from the 5th and 95th (a 90% interval) on these data.
        let diffs: Vec<f64> = (0..30).map(|i| ((i * 7) % 5) as f64 - 2.0).collect();
        let i = paired_bootstrap(&diffs, 4_000, 9);
        let mut rng = SplitMix64::new(9);
        let mut means: Vec<f64> =
            (0..4_000).map(|_| (0..30).map(|_| diffs[rng.below(30)]).sum::<f64>() / 30.0).collect();
        means.sort_by(f64::total_cmp);
        assert_eq!((i.lo, i.hi), (quantile_sorted(&means, 0.025), quantile_sorted(&means, 0.975)));
        assert!(i.lo < quantile_sorted(&means, 0.05) && quantile_sorted(&means, 0.95) < i.hi, "{i:?}");
    }

    #[test]
    fn few_distinct_differences_resample_as_many_do() {
        // The same draws either way: counted by value, or summed one by one.
        let n = CODED_FROM;
        let diffs: Vec<f64> = (0..n).map(|i| [0.0, 1.0, -1.0, 0.5][(i * 7) % 4]).collect();
        let coded = paired_bootstrap(&diffs, 20, 3);
        let mut rng = SplitMix64::new(3);
        let mut means: Vec<f64> =
            (0..20).map(|_| (0..n).map(|_| diffs[rng.below(n)]).sum::<f64>() / n as f64).collect();
        means.sort_by(f64::total_cmp);
        assert_eq!((coded.lo, coded.hi), (quantile_sorted(&means, 0.025), quantile_sorted(&means, 0.975)));
        assert!(categories(&(0..300).map(f64::from).collect::<Vec<_>>()).is_none(), "over 256 values");
    }

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile_sorted(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
