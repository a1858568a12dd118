//! Adaptive repetitions as `submit` and `resume` drive them: the judge the controller asks
//! between rounds (`controller::Rounds`), made from the gates file and the baseline, and kept in
//! the run's bundle (`adaptive.json`) so that a resumed run goes on deciding the same way.

use std::collections::BTreeSet;
use std::sync::Arc;

use agenteval_core::config::{AdaptiveRepetitions, RunConfig};
use agenteval_core::model::AdaptiveSpend;
use agenteval_core::traits::{BundleStore, Resolver, RunIndex};
use agenteval_core::{Error, Result, RunId};
use agenteval_engine::controller::{self, Round, Rounds};
use agenteval_judge::adaptive::{Design, Next, attempts, look};
use agenteval_judge::compare::CompareOptions;
use agenteval_judge::gates::{Decision, Gates, load_gates_str};
use agenteval_judge::results::{self, RunResults};
use serde::{Deserialize, Serialize};

/// What a resumed adaptive run needs to judge as its first controller did.
const KEPT: &str = "adaptive.json";

/// How many of a name's earlier runs are read for tasks that flipped.
const HISTORY_RUNS: usize = 5;

#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    /// The gates file's text and its name (for messages).
    gates: String,
    gates_file: String,
    /// The baseline run, resolved at submit (`None`: there was none).
    base: Option<RunId>,
}

/// The controller's judge between rounds.
pub struct Adaptive {
    resolver: Arc<dyn Resolver>,
    index: Arc<dyn RunIndex>,
    design: Design,
    gates: Gates,
    kept: Kept,
    base: Option<RunResults>,
    flaky_before: BTreeSet<String>,
}

impl Adaptive {
    /// The judge of a new run of `config`, against `baseline` (a run reference) with the gates
    /// file `gates_file`; `None` when the config's repetitions are not adaptive.
    pub async fn for_submit(
        resolver: Arc<dyn Resolver>,
        config: &RunConfig,
        gates_file: Option<&std::path::Path>,
        baseline: Option<&str>,
    ) -> std::result::Result<Option<Arc<dyn Rounds>>, crate::Failure> {
        let Some(a) = config.repetitions.adaptive() else { return Ok(None) };
        let Some(file) = gates_file else {
            return Err(crate::Failure {
                code: crate::exit::USAGE,
                error: anyhow::anyhow!(
                    "`repetitions: {{until: decided}}` needs a verdict to reach: give --gates FILE and --baseline REF"
                ),
            });
        };
        let text = std::fs::read_to_string(file).map_err(|e| Error::io(format!("reading {}", file.display()), e))?;
        let index = resolver.index(&config.storage.index_location()).await?;
        let base = match baseline {
            Some(r) => crate::judging::resolve_ref(index.as_ref(), r).await.ok(),
            None => None,
        };
        let kept = Kept { gates: text, gates_file: file.display().to_string(), base };
        Ok(Some(Arc::new(Self::from_kept(resolver, index, a, kept, &config.name).await?)))
    }

    /// The judge of a resumed adaptive run, from what its first controller kept; `None` when
    /// the run is not adaptive or never reached its first look.
    pub async fn for_resume(
        resolver: Arc<dyn Resolver>,
        index: Arc<dyn RunIndex>,
        run: &RunId,
        config: &RunConfig,
    ) -> Result<Option<Arc<dyn Rounds>>> {
        let Some(a) = config.repetitions.adaptive() else { return Ok(None) };
        let located = controller::locate(resolver.as_ref(), index.as_ref(), run).await?;
        let bytes = match located.store.get(run, KEPT).await {
            Ok(b) => b,
            Err(e) if e.kind() == agenteval_core::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let kept: Kept = serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(format!("{KEPT}: {e}")))?;
        Ok(Some(Arc::new(Self::from_kept(resolver, index, a, kept, &config.name).await?)))
    }

    async fn from_kept(
        resolver: Arc<dyn Resolver>,
        index: Arc<dyn RunIndex>,
        a: &AdaptiveRepetitions,
        kept: Kept,
        name: &str,
    ) -> Result<Self> {
        let gates = load_gates_str(&kept.gates, &kept.gates_file).map_err(|e| Error::invalid(e.to_string()))?;
        let base = match &kept.base {
            Some(b) => Some(load(resolver.as_ref(), index.as_ref(), b).await?),
            None => None,
        };
        let flaky_before = flaky_before(resolver.as_ref(), index.as_ref(), name, kept.base.as_ref()).await;
        Ok(Adaptive { resolver, index, design: Design { min: a.min, max: a.max }, gates, kept, base, flaky_before })
    }
}

async fn load(resolver: &dyn Resolver, index: &dyn RunIndex, run: &RunId) -> Result<RunResults> {
    let located = controller::locate(resolver, index, run).await?;
    results::load(located.store.as_ref(), run).await
}

/// The tasks that flipped (passed and failed among their attempts) in the name's latest
/// complete runs: the index's memory of which tasks are noisy.
async fn flaky_before(
    resolver: &dyn Resolver,
    index: &dyn RunIndex,
    name: &str,
    base: Option<&RunId>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(runs) = index.list_runs(200).await else { return out };
    let earlier = runs
        .iter()
        .filter(|r| r.name == name && r.status == agenteval_core::model::RunStatus::Complete)
        .filter(|r| Some(&r.run_id) != base)
        .take(HISTORY_RUNS);
    for r in earlier {
        let Ok(results) = load(resolver, index, &r.run_id).await else { continue };
        out.extend(attempts(&results).into_iter().filter(|(_, (n, p))| *p > 0 && p < n).map(|(id, _)| id));
    }
    out
}

#[async_trait::async_trait]
impl Rounds for Adaptive {
    async fn look(&self, run: &RunId) -> Result<Round> {
        let located = controller::locate(self.resolver.as_ref(), self.index.as_ref(), run).await?;
        let store: &dyn BundleStore = located.store.as_ref();
        if !store.exists(run, KEPT).await? {
            store.put(run, KEPT, &serde_json::to_vec_pretty(&self.kept).expect("serializes")).await?;
        }
        let cand = results::load_live(store, run).await?;
        let per_task = attempts(&cand);
        let most = per_task.values().map(|(n, _)| *n).max().unwrap_or(0);
        let n = most.saturating_sub(self.design.min.max(1)) + 1;
        let spend = |looks: u32, level: f64, ended: String| AdaptiveSpend {
            min: self.design.min,
            max: self.design.max,
            looks,
            level,
            attempts: cand.lines.len() as u64,
            fixed_attempts: per_task.len() as u64 * u64::from(self.design.max),
            ended,
        };
        let Some(base) = &self.base else {
            // No baseline: nothing to decide, so the night runs as the fixed design would.
            let below: Vec<String> =
                per_task.iter().filter(|(_, (n, _))| *n < self.design.max).map(|(id, _)| id.clone()).collect();
            if below.is_empty() {
                return Ok(Round::Done(spend(n, 0.95, "no baseline: every task run `max` times".into())));
            }
            return Ok(Round::Repeat(below));
        };
        let l = look(&self.design, n, &self.gates, base, &cand, &self.flaky_before, CompareOptions::default())?;
        let level = l.comparison.level;
        Ok(match l.next {
            Next::Repeat(ids) => Round::Repeat(ids),
            Next::Decided(d) => Round::Done(spend(n, level, format!("decided {}", d.as_str()))),
            Next::Undecidable => {
                Round::Done(spend(n, level, format!("{} (nothing left to repeat)", Decision::Inconclusive.as_str())))
            }
        })
    }
}
