//! How many jobs the controller keeps in flight: `backend.max_concurrent_jobs` at most, fewer
//! while something pushes back, and back up when it clears (additive increase, multiplicative
//! decrease, as TCP does with a network it cannot see).
//!
//! What pushes back: the provider's 429s and the run's rate limits holding calls back (every
//! worker's gateway counts them in the run index), the platform refusing launches for now (ECS
//! throttling RunTask), jobs failing for the infrastructure (a container that would not start),
//! the machine running short of memory (the backend's `pressure`). Pure: the drive loop feeds it
//! what it saw and when.

use std::time::{Duration, Instant};

use agenteval_core::config::ConcurrencyMode;
use agenteval_core::model;

/// After a cut, the signals still arriving come from the jobs launched before it: they cut
/// again only once this has passed and the jobs in flight are down to the limit.
const HOLD: Duration = Duration::from_secs(3);
/// No push for this long while jobs wait: the limit rises a step, and again each time it passes.
const CALM: Duration = Duration::from_secs(5);

/// The controller's concurrency and why it is what it is.
#[derive(Debug, Clone)]
pub(super) struct Concurrency {
    adaptive: bool,
    max: usize,
    limit: usize,
    /// When the limit was last cut (further pushes wait for [`HOLD`]).
    cut_at: Option<Instant>,
    /// The last push, or the last rise: the next rise is [`CALM`] after it.
    quiet_since: Instant,
    why: Option<String>,
}

impl Concurrency {
    pub(super) fn new(max: u32, mode: ConcurrencyMode, now: Instant) -> Self {
        let max = max.max(1) as usize;
        Concurrency {
            adaptive: mode == ConcurrencyMode::Adaptive,
            max,
            limit: max,
            cut_at: None,
            quiet_since: now,
            why: None,
        }
    }

    /// How many jobs may be in flight now.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// Something pushed back (`why`, in a line): the limit halves, unless it was cut a moment
    /// ago and the jobs launched before that cut are still more than it. Returns whether the
    /// limit changed.
    pub(super) fn push(&mut self, why: &str, in_flight: usize, now: Instant) -> bool {
        if !self.adaptive {
            return false;
        }
        self.quiet_since = now;
        let settled = self.cut_at.is_none_or(|at| now.duration_since(at) >= HOLD && in_flight <= self.limit);
        if !settled || self.limit == 1 {
            if self.limit == 1 {
                self.why = Some(why.to_string());
            }
            return false;
        }
        self.limit = (self.limit / 2).max(1);
        self.cut_at = Some(now);
        self.why = Some(why.to_string());
        true
    }

    /// Nothing pushed back: after [`CALM`] with jobs waiting for a slot (`waiting`), the limit
    /// rises by a sixteenth of the most (at least one), up to the most. Returns whether it did.
    pub(super) fn calm(&mut self, waiting: bool, now: Instant) -> bool {
        if !self.adaptive || self.limit >= self.max || now.duration_since(self.quiet_since) < CALM {
            return false;
        }
        if !waiting {
            return false;
        }
        self.limit = (self.limit + (self.max / 16).max(1)).min(self.max);
        self.quiet_since = now;
        self.why = Some(match self.limit == self.max {
            true => "back to backend.max_concurrent_jobs: nothing pushed back".to_string(),
            false => format!("rising: nothing pushed back for {} s", CALM.as_secs()),
        });
        true
    }

    /// What the index records and `status` shows.
    pub(super) fn view(&self) -> model::Concurrency {
        let why = match (&self.why, self.adaptive) {
            (Some(w), _) => Some(w.clone()),
            (None, false) => Some("fixed (backend.concurrency: fixed)".to_string()),
            (None, true) => None,
        };
        model::Concurrency { limit: self.limit as u32, max: self.max as u32, why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, secs: f64) -> Instant {
        t0 + Duration::from_secs_f64(secs)
    }

    #[test]
    fn a_push_halves_the_limit_once_until_the_cut_has_taken_hold() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(16, ConcurrencyMode::Adaptive, t0);
        assert!(c.push("429s", 16, at(t0, 1.0)));
        assert_eq!(c.limit(), 8);
        // The jobs launched before the cut still push: no further cut yet.
        assert!(!c.push("429s", 16, at(t0, 2.0)));
        assert!(!c.push("429s", 8, at(t0, 3.5)), "within the hold");
        assert!(!c.push("429s", 12, at(t0, 5.0)), "more in flight than the limit");
        assert!(c.push("429s", 8, at(t0, 5.0)));
        assert_eq!(c.limit(), 4);
        // Held long enough and down to the limit: it halves again, down to one and no lower.
        let mut t = 10.0;
        while c.limit() > 1 {
            let limit = c.limit();
            c.push("429s", limit, at(t0, t));
            t += 4.0;
        }
        assert!(!c.push("429s", 1, at(t0, t + 10.0)));
        assert_eq!(c.limit(), 1);
        assert_eq!(c.view().why.as_deref(), Some("429s"));
    }

    #[test]
    fn the_limit_rises_again_in_steps_when_nothing_pushes_and_jobs_wait() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(32, ConcurrencyMode::Adaptive, t0);
        c.push("memory", 32, t0);
        assert_eq!(c.limit(), 16);
        assert!(!c.calm(true, at(t0, 4.0)), "not calm yet");
        assert!(!c.calm(false, at(t0, 6.0)), "no job waits: no reason to rise");
        assert!(c.calm(true, at(t0, 6.0)));
        assert_eq!(c.limit(), 18);
        assert!(!c.calm(true, at(t0, 7.0)), "one step per calm spell");
        let mut t = 12.0;
        while c.calm(true, at(t0, t)) {
            t += 5.0;
        }
        assert_eq!(c.limit(), 32);
        assert_eq!(c.view().why.as_deref(), Some("back to backend.max_concurrent_jobs: nothing pushed back"));
    }

    #[test]
    fn fixed_never_moves() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(8, ConcurrencyMode::Fixed, t0);
        assert!(!c.push("429s", 8, at(t0, 1.0)));
        assert!(!c.calm(true, at(t0, 100.0)));
        assert_eq!(c.view(), model::Concurrency { limit: 8, max: 8, why: Some("fixed (backend.concurrency: fixed)".into()) });
    }
}
