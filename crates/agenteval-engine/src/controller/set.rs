//! What the runs of one set (`submit --matrix`) share while they are driven in one controller:
//! the fleet's job slots and the budget. Each run keeps its own queue, index records and
//! bundle; a slot is taken per job and given back when the job ends, so a combination whose
//! jobs finish early leaves its slots to the others and the fleet stays full.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agenteval_core::RunId;
use agenteval_core::format::SetMember;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The job slots and the budget of a set, shared by its runs' drive loops.
#[derive(Debug)]
pub struct SharedFleet {
    slots: Arc<Semaphore>,
    size: usize,
    /// The set's budget: every run stops once the set together spent this much.
    max_cost_usd: Option<f64>,
    spent: Mutex<HashMap<RunId, f64>>,
    /// Set once the set's budget is reached: every run stops launching at once, without
    /// waiting to read its own counts.
    exhausted: AtomicBool,
    /// Woken when a slot comes free, so that a run waiting for one does not wait for its own
    /// next poll.
    freed: Arc<Notify>,
}

/// One job's slot; dropping it gives the slot back and wakes the runs waiting for one.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.freed.notify_waiters();
    }
}

/// A run's place in a set and what it shares with the others.
#[derive(Debug, Clone)]
pub struct SetRun {
    pub member: SetMember,
    pub fleet: Arc<SharedFleet>,
}

impl SharedFleet {
    /// A fleet of `jobs` slots (at least one) with the set's budget.
    pub fn new(jobs: usize, max_cost_usd: Option<f64>) -> Arc<Self> {
        let size = jobs.max(1);
        Arc::new(SharedFleet {
            slots: Arc::new(Semaphore::new(size)),
            size,
            max_cost_usd,
            spent: Mutex::new(HashMap::new()),
            exhausted: AtomicBool::new(false),
            freed: Arc::new(Notify::new()),
        })
    }

    /// How many jobs the whole set may have in flight.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A free slot, if there is one now.
    pub fn try_slot(&self) -> Option<Slot> {
        let permit = self.slots.clone().try_acquire_owned().ok()?;
        Some(Slot { _permit: permit, freed: self.freed.clone() })
    }

    /// Resolves when a slot is given back.
    pub async fn slot_freed(&self) {
        self.freed.notified().await;
    }

    /// Records what a run has spent so far; returns what the set has spent together.
    pub fn spend(&self, run: RunId, cost_usd: f64) -> f64 {
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        spent.insert(run, cost_usd);
        spent.values().sum()
    }

    /// Marks the set's budget as reached, and wakes the runs waiting for a slot so that they
    /// stop too.
    pub fn exhaust(&self) {
        self.exhausted.store(true, Ordering::SeqCst);
        self.freed.notify_waiters();
    }

    /// Whether a run of the set reached the set's budget.
    pub fn exhausted(&self) -> bool {
        self.exhausted.load(Ordering::SeqCst)
    }

    /// The set's budget.
    pub fn max_cost_usd(&self) -> Option<f64> {
        self.max_cost_usd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_shared_and_come_back_when_a_job_ends() {
        let fleet = SharedFleet::new(2, None);
        let a = fleet.try_slot().expect("first slot");
        let _b = fleet.try_slot().expect("second slot");
        assert!(fleet.try_slot().is_none(), "a full fleet has no slot");
        drop(a);
        assert!(fleet.try_slot().is_some(), "an ended job's slot is free again");
    }

    #[test]
    fn the_budget_counts_every_run_of_the_set_once() {
        let fleet = SharedFleet::new(1, Some(1.0));
        let (r1, r2) = (RunId::new(), RunId::new());
        assert_eq!(fleet.spend(r1, 0.25), 0.25);
        assert_eq!(fleet.spend(r2, 0.5), 0.75);
        // A run reports its running total, not an increment.
        assert_eq!(fleet.spend(r1, 0.5), 1.0);
    }
}
