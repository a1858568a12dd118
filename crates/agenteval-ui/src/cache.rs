//! What the UI keeps between requests: the run listing for a moment, and the results and
//! summaries of sealed runs (a sealed bundle never changes), a bounded number of each.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenteval_core::RunId;
use agenteval_core::model::{RunRecord, RunSummary};
use agenteval_judge::results::RunResults;

/// How long the run listing is reused: pages and refreshes in a burst cost one index query.
const LISTING_TTL: Duration = Duration::from_secs(2);
/// Sealed runs whose results are kept (a 10,000-task run's are a few MB).
const RESULTS_KEPT: usize = 8;
/// Summaries kept (a few hundred bytes each), for the history charts.
const SUMMARIES_KEPT: usize = 5_000;

#[derive(Default)]
pub(crate) struct Cache {
    listing: Mutex<Option<(Instant, Arc<Vec<RunRecord>>)>>,
    results: Mutex<VecDeque<(RunId, Arc<RunResults>)>>,
    summaries: Mutex<HashMap<RunId, Arc<RunSummary>>>,
}

impl Cache {
    pub fn listing(&self) -> Option<Arc<Vec<RunRecord>>> {
        let l = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        l.as_ref().filter(|(at, _)| at.elapsed() < LISTING_TTL).map(|(_, v)| v.clone())
    }

    pub fn set_listing(&self, runs: Arc<Vec<RunRecord>>) {
        *self.listing.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), runs));
    }

    pub fn results(&self, run: &RunId) -> Option<Arc<RunResults>> {
        let r = self.results.lock().unwrap_or_else(|e| e.into_inner());
        r.iter().find(|(id, _)| id == run).map(|(_, v)| v.clone())
    }

    pub fn set_results(&self, run: RunId, results: Arc<RunResults>) {
        let mut r = self.results.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|(id, _)| *id != run);
        r.push_front((run, results));
        r.truncate(RESULTS_KEPT);
    }

    pub fn summary(&self, run: &RunId) -> Option<Arc<RunSummary>> {
        self.summaries.lock().unwrap_or_else(|e| e.into_inner()).get(run).cloned()
    }

    pub fn set_summary(&self, run: RunId, summary: Arc<RunSummary>) {
        let mut s = self.summaries.lock().unwrap_or_else(|e| e.into_inner());
        if s.len() >= SUMMARIES_KEPT {
            s.clear();
        }
        s.insert(run, summary);
    }
}
