//! `cargo bench -p agenteval-judge --bench adaptive`: 200 simulated nights of a benchmark whose
//! tasks pass with known probabilities, judged by the fixed design (every task 5 times) and by
//! adaptive repetitions (1 to 5 attempts, `adaptive::look` between rounds, as the controller
//! runs it). Prints, per scenario: how often the adaptive run reaches the fixed design's GO or
//! NO-GO where that is decided, the task-attempts each spent, and how often a decision was wrong
//! where the truth sits on the gate's limit (a false GO or NO-GO). Exits non-zero when a figure
//! misses what the docs promise (docs/judging.md, "Adaptive repetitions").

use std::collections::BTreeSet;

use agenteval_core::format::{LineScore, ResultLine};
use agenteval_core::model::TerminatedBy;
use agenteval_judge::adaptive::{Design, Next, look};
use agenteval_judge::compare::{CompareOptions, compare};
use agenteval_judge::gates::{Decision, judge, load_gates_str};
use agenteval_judge::results::RunResults;
use agenteval_judge::stats::SplitMix64;

const NIGHTS: u64 = 200;
const TASKS: usize = 100;
const K: u32 = 5;

fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A benchmark's true pass probabilities: 45% of tasks always pass, 30% never, 25% flaky.
fn benchmark(rng: &mut SplitMix64) -> Vec<f64> {
    (0..TASKS)
        .map(|_| match uniform(rng) {
            x if x < 0.45 => 1.0,
            x if x < 0.75 => 0.0,
            _ => 0.2 + 0.6 * uniform(rng),
        })
        .collect()
}

/// A run's results: `reps[i]` attempts of task `i`, each passing with probability `p[i]`.
fn attempts(name: &str, p: &[f64], reps: &[u32], rng: &mut SplitMix64) -> Vec<ResultLine> {
    let _ = name;
    let mut lines = Vec::new();
    for (i, (&p, &n)) in p.iter().zip(reps).enumerate() {
        for r in 0..n {
            lines.push(line(i, r, uniform(rng) < p));
        }
    }
    lines
}

fn line(task: usize, rep: u32, passed: bool) -> ResultLine {
    let id: agenteval_core::TaskId = format!("task-{task:03}").parse().expect("a valid id");
    ResultLine {
        task_id: id.repetition(rep),
        attempt: 1,
        passed,
        terminated_by: TerminatedBy::Completed,
        scores: [("exact".to_string(), LineScore { score: f64::from(u8::from(passed)), passed, error: false })].into(),
        cost_usd: 0.01,
        tokens: 100,
        wall_seconds: 1.0,
        steps: 3,
        changed_outside: 0,
        cost_unknown: false,
        tampered: 0,
    }
}

fn results(name: &str, lines: Vec<ResultLine>) -> RunResults {
    let meta = agenteval_testkit::fixtures::metadata(agenteval_core::RunId::new(), name, "sim", lines.len() as u64);
    RunResults::new(meta, String::new(), lines, None)
}

struct Night {
    fixed: Decision,
    adaptive: Decision,
    fixed_attempts: u64,
    adaptive_attempts: u64,
}

fn night(base_p: &[f64], cand_p: &[f64], gates_yaml: &str, history: bool, rng: &mut SplitMix64) -> Night {
    let gates = load_gates_str(gates_yaml, "gates.yaml").expect("valid gates");
    let opts = CompareOptions { resamples: 10_000, seed: rng.next_u64(), ..Default::default() };
    let base = results("base", attempts("base", base_p, &[K; TASKS], rng));
    // The index's history: the tasks that flipped on the night before the base (the same agent).
    let mut flaky_before = BTreeSet::new();
    if history {
        let earlier = attempts("earlier", base_p, &[K; TASKS], rng);
        for (i, chunk) in earlier.chunks(K as usize).enumerate() {
            let passed = chunk.iter().filter(|l| l.passed).count();
            if passed > 0 && passed < K as usize {
                flaky_before.insert(format!("task-{i:03}"));
            }
        }
    }
    // One night's attempts: the fixed design makes all K of each task; the adaptive run makes
    // the first few of the same ones (it is the same night, spent differently).
    let drawn: Vec<Vec<bool>> = cand_p.iter().map(|&p| (0..K).map(|_| uniform(rng) < p).collect()).collect();
    let fixed_lines: Vec<ResultLine> = drawn
        .iter()
        .enumerate()
        .flat_map(|(i, d)| d.iter().enumerate().map(move |(r, &p)| line(i, r as u32, p)))
        .collect();
    let fixed = results("cand", fixed_lines);
    let c = compare(&base, &fixed, opts).expect("comparable");
    let seq = agenteval_judge::adaptive::sequential(&gates);
    let fixed_verdict = judge(&seq, Some(&c), &|_| None, fixed.lines.len() as u64);
    // Adaptive: one attempt of each task, then one more of each open task per round.
    let design = Design { min: 1, max: K };
    let mut lines: Vec<ResultLine> = drawn.iter().enumerate().map(|(i, d)| line(i, 0, d[0])).collect();
    let mut reps = [1u32; TASKS];
    let mut round = 1;
    let adaptive = loop {
        let cand = results("cand", lines.clone());
        let l = look(&design, round, &gates, &base, &cand, &flaky_before, opts).expect("comparable");
        round += 1;
        match l.next {
            Next::Decided(d) => break d,
            Next::Undecidable => break Decision::Inconclusive,
            Next::Repeat(ids) => {
                for id in ids {
                    let i: usize = id.trim_start_matches("task-").parse().expect("a task index");
                    lines.push(line(i, reps[i], drawn[i][reps[i] as usize]));
                    reps[i] += 1;
                }
            }
        }
    };
    Night {
        fixed: fixed_verdict.decision(),
        adaptive,
        fixed_attempts: (TASKS as u64) * u64::from(K),
        adaptive_attempts: lines.len() as u64,
    }
}

struct Figures {
    decided: u64,
    agreed: u64,
    adaptive_decided: u64,
    fixed_attempts: u64,
    adaptive_attempts: u64,
    false_decisions: u64,
}

fn scenario(
    name: &str,
    seed: u64,
    gates: &str,
    cand: impl Fn(&[f64], &mut SplitMix64) -> Vec<f64>,
    null: bool,
    history: bool,
) -> Figures {
    let mut rng = SplitMix64::new(seed);
    let mut f = Figures {
        decided: 0,
        agreed: 0,
        adaptive_decided: 0,
        fixed_attempts: 0,
        adaptive_attempts: 0,
        false_decisions: 0,
    };
    for _ in 0..NIGHTS {
        let base_p = benchmark(&mut rng);
        let cand_p = cand(&base_p, &mut rng);
        let n = night(&base_p, &cand_p, gates, history, &mut rng);
        f.fixed_attempts += n.fixed_attempts;
        f.adaptive_attempts += n.adaptive_attempts;
        if n.fixed != Decision::Inconclusive {
            f.decided += 1;
            f.agreed += u64::from(n.adaptive == n.fixed);
        }
        if n.adaptive != Decision::Inconclusive {
            f.adaptive_decided += 1;
            f.false_decisions += u64::from(null);
        }
    }
    println!(
        "{name:<44} fixed decided {:>3}/{NIGHTS}; adaptive the same in {:>3} ({:>5.1}%), decided {:>3}; attempts {:>6} vs {:>6} ({:>4.1}%){}",
        f.decided,
        f.agreed,
        100.0 * f.agreed as f64 / f.decided.max(1) as f64,
        f.adaptive_decided,
        f.adaptive_attempts,
        f.fixed_attempts,
        100.0 * f.adaptive_attempts as f64 / f.fixed_attempts as f64,
        if null {
            format!(
                "; false decisions {} ({:.1}%)",
                f.false_decisions,
                100.0 * f.false_decisions as f64 / NIGHTS as f64
            )
        } else {
            String::new()
        }
    );
    f
}

fn main() {
    let interval = "metrics:\n  pass_rate: {max_drop: 0.05}\n";
    let at_limit = "metrics:\n  pass_rate: {max_drop: 0.0}\n";
    let started = std::time::Instant::now();
    // A regression: a fifth of the tasks that could pass now never do (about 11 points).
    let worse = scenario(
        "regression (~11 pts; max_drop 5 pts)",
        1,
        interval,
        |p, rng| p.iter().map(|&p| if p > 0.0 && uniform(rng) < 0.2 { 0.0 } else { p }).collect(),
        false,
        true,
    );
    // The same without any earlier night in the index (a benchmark's first week).
    scenario(
        "regression, no history in the index",
        1,
        interval,
        |p, rng| p.iter().map(|&p| if p > 0.0 && uniform(rng) < 0.2 { 0.0 } else { p }).collect(),
        false,
        false,
    );
    // An improvement: a fifth of the tasks that could fail now always pass.
    let better = scenario(
        "improvement (~11 pts; max_drop 5 pts)",
        2,
        interval,
        |p, rng| p.iter().map(|&p| if p < 1.0 && uniform(rng) < 0.2 { 1.0 } else { p }).collect(),
        false,
        true,
    );
    // No difference, gated at zero drop: the truth sits on the limit, so any GO or NO-GO is false.
    let null = scenario("no difference, on the limit (max_drop 0)", 3, at_limit, |p, _| p.to_vec(), true, true);
    // No difference against a 5-point allowance: NO-GO would be false.
    let same = scenario("no difference (max_drop 5 pts)", 4, interval, |p, _| p.to_vec(), false, true);
    println!("({} nights of {TASKS} tasks per scenario in {:.1} s)", NIGHTS, started.elapsed().as_secs_f64());
    let mut missed = Vec::new();
    for (name, f) in [("regression", &worse), ("improvement", &better)] {
        if f.decided > 0 && (f.agreed as f64) < 0.95 * f.decided as f64 {
            missed.push(format!("{name}: the same decision in under 95% of decided nights"));
        }
        if 2 * f.adaptive_attempts > f.fixed_attempts {
            missed.push(format!("{name}: more than half the fixed design's attempts"));
        }
    }
    if null.false_decisions as f64 > agenteval_judge::adaptive::ALPHA * NIGHTS as f64 {
        missed.push("no difference: false decisions above the error rate".into());
    }
    if 2 * same.adaptive_attempts > same.fixed_attempts {
        missed.push("no difference: more than half the fixed design's attempts".into());
    }
    if !missed.is_empty() {
        eprintln!("missed: {}", missed.join("; "));
        std::process::exit(1);
    }
}
