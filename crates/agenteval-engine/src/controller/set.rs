//! What the runs of one set (`submit --matrix`) share while they are driven in one controller:
//! the fleet's job slots and the budget. Each run keeps its own queue, index records and
//! bundle; a slot is taken per job and given back when the job ends, so a combination whose
//! jobs finish early leaves its slots to the others and the fleet stays full. While several
//! runs have jobs waiting, a free slot goes to the one that has launched the fewest jobs and
//! holds less than its even share: the combinations advance together (a budget reached
//! half-way leaves each of them about half done, comparable), not one after the other.

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
    /// Who waits, holds and has launched what, by the runs' positions in the set.
    turns: Arc<Mutex<Turns>>,
    /// Woken when a slot comes free, so that a run waiting for one does not wait for its own
    /// next poll.
    freed: Arc<Notify>,
    /// The run whose spend at the wire (and rate bookings) in the index every run of the set
    /// counts against: the first to launch a job, so its record exists by then.
    ledger: std::sync::OnceLock<RunId>,
}

#[derive(Debug, Default)]
struct Turns {
    /// Runs with jobs waiting for a slot (every run to begin with, so that the first to start
    /// does not take the whole fleet).
    waiting: HashMap<u32, bool>,
    /// Slots each run holds now.
    held: HashMap<u32, usize>,
    /// Jobs each run has launched.
    launched: HashMap<u32, u64>,
}

impl Turns {
    fn waiting_count(&self) -> usize {
        self.waiting.values().filter(|w| **w).count()
    }

    fn held(&self, p: u32) -> usize {
        self.held.get(&p).copied().unwrap_or(0)
    }

    fn launched(&self, p: u32) -> u64 {
        self.launched.get(&p).copied().unwrap_or(0)
    }
}

/// One job's slot; dropping it gives the slot back and wakes the runs waiting for one.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    position: u32,
    turns: Arc<Mutex<Turns>>,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut t = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(h) = t.held.get_mut(&self.position) {
                *h = h.saturating_sub(1);
            }
        }
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
    /// A fleet of `jobs` slots (at least one) for a set of `runs` runs, with the set's budget.
    pub fn new(jobs: usize, runs: u32, max_cost_usd: Option<f64>) -> Arc<Self> {
        let size = jobs.max(1);
        let turns = Turns { waiting: (0..runs).map(|p| (p, true)).collect(), ..Turns::default() };
        Arc::new(SharedFleet {
            slots: Arc::new(Semaphore::new(size)),
            size,
            max_cost_usd,
            spent: Mutex::new(HashMap::new()),
            exhausted: AtomicBool::new(false),
            turns: Arc::new(Mutex::new(turns)),
            freed: Arc::new(Notify::new()),
            ledger: std::sync::OnceLock::new(),
        })
    }

    /// The run the set's calls are counted against at the wire: `run` when it is the first to
    /// ask (its record is in the index: it is launching a job).
    pub fn ledger(&self, run: RunId) -> RunId {
        *self.ledger.get_or_init(|| run)
    }

    /// The ledger run, once one is chosen.
    pub fn ledger_run(&self) -> Option<RunId> {
        self.ledger.get().copied()
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many jobs the whole set may have in flight.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Says whether the run at `position` has jobs waiting for a slot (a run that ended, for
    /// whatever reason, says no: its turn goes to the others).
    pub fn waiting(&self, position: u32, waiting: bool) {
        let was = self.turns().waiting.insert(position, waiting).unwrap_or(false);
        if was && !waiting {
            self.freed.notify_waiters();
        }
    }

    /// How many slots a run may hold now: an even share of the fleet among the runs with jobs
    /// waiting (all of it when one is alone).
    pub fn share(&self) -> usize {
        self.size.div_ceil(self.turns().waiting_count().max(1))
    }

    /// A free slot for the run at `position`, if it is its turn: it holds less than its share,
    /// and no other run that could take the slot has launched fewer jobs.
    pub fn try_slot(&self, position: u32) -> Option<Slot> {
        let mut t = self.turns();
        let share = self.size.div_ceil(t.waiting_count().max(1));
        if t.held(position) >= share {
            return None;
        }
        let fewest = t
            .waiting
            .iter()
            .filter(|(p, w)| **w && t.held(**p) < share)
            .map(|(p, _)| t.launched(*p))
            .min()
            .unwrap_or(0);
        if t.launched(position) > fewest {
            return None;
        }
        let permit = self.slots.clone().try_acquire_owned().ok()?;
        *t.held.entry(position).or_default() += 1;
        *t.launched.entry(position).or_default() += 1;
        Some(Slot { _permit: permit, position, turns: self.turns.clone(), freed: self.freed.clone() })
    }

    /// Resolves when a slot is given back, or a run stops waiting.
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
        let fleet = SharedFleet::new(2, 1, None);
        let a = fleet.try_slot(0).expect("first slot");
        let _b = fleet.try_slot(0).expect("second slot");
        assert!(fleet.try_slot(0).is_none(), "a full fleet has no slot");
        drop(a);
        assert!(fleet.try_slot(0).is_some(), "an ended job's slot is free again");
    }

    #[test]
    fn runs_with_jobs_waiting_share_the_slots_evenly() {
        let fleet = SharedFleet::new(4, 3, None);
        assert_eq!(fleet.share(), 2, "three runs on four slots: at most two each, from the start");
        let _a1 = fleet.try_slot(0).unwrap();
        assert!(fleet.try_slot(0).is_none(), "run 0 launched more than the others: their turn");
        let b1 = fleet.try_slot(1).unwrap();
        let _c1 = fleet.try_slot(2).unwrap();
        let a2 = fleet.try_slot(0).unwrap();
        assert!(fleet.try_slot(0).is_none(), "run 0 holds its share");
        drop(a2);
        // Run 0 holds less than its share but launched more than run 1: run 1's turn.
        assert!(fleet.try_slot(0).is_none());
        let b2 = fleet.try_slot(1).unwrap();
        fleet.waiting(1, false);
        fleet.waiting(2, false);
        assert_eq!(fleet.share(), 4, "the last run with work gets the whole fleet");
        drop((b1, b2));
        let more: Vec<Slot> = std::iter::from_fn(|| fleet.try_slot(0)).collect();
        assert_eq!(more.len(), 2, "run 0 takes every free slot");
    }

    #[test]
    fn a_run_that_cannot_take_a_slot_does_not_hold_up_the_others() {
        let fleet = SharedFleet::new(4, 2, None);
        let _a1 = fleet.try_slot(0).unwrap();
        let b1 = fleet.try_slot(1).unwrap();
        let _a2 = fleet.try_slot(0).unwrap();
        drop(b1);
        let _b2 = fleet.try_slot(1).unwrap();
        // Run 1 launched as many as run 0 now, and run 0 holds its share: the last free slot
        // is run 1's, whatever the count says.
        assert!(fleet.try_slot(1).is_some(), "the fleet stays full");
    }

    #[test]
    fn the_budget_counts_every_run_of_the_set_once() {
        let fleet = SharedFleet::new(1, 2, Some(1.0));
        let (r1, r2) = (RunId::new(), RunId::new());
        assert_eq!(fleet.spend(r1, 0.25), 0.25);
        assert_eq!(fleet.spend(r2, 0.5), 0.75);
        // A run reports its running total, not an increment.
        assert_eq!(fleet.spend(r1, 0.5), 1.0);
    }
}
