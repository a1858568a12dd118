//! How many jobs the controller keeps in flight: `backend.max_concurrent_jobs` at most, fewer
//! while something pushes back, and back up when it clears (as TCP does with a network it
//! cannot see: a slow start that doubles from a few until the first push, then additive
//! increase and multiplicative decrease).
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
/// A run starts with this many jobs in flight (or its most, if fewer)...
const INITIAL: usize = 4;
/// ...and doubles them this often while jobs wait, until the first push or its most: the first
/// wave of a large fleet does not all meet a provider's limit at once.
const SLOW_START_EVERY: Duration = Duration::from_secs(2);

/// The controller's concurrency and why it is what it is.
#[derive(Debug, Clone)]
pub(super) struct Concurrency {
    adaptive: bool,
    max: usize,
    limit: usize,
    /// Nothing pushed back yet: the limit doubles ([`SLOW_START_EVERY`]).
    starting: bool,
    /// When the limit was last cut (further pushes wait for [`HOLD`]).
    cut_at: Option<Instant>,
    /// The last push, or the last rise: the next rise is [`CALM`] after it.
    quiet_since: Instant,
    why: Option<String>,
    /// What pushed back last, which a rise keeps saying.
    pushed: Option<String>,
}

impl Concurrency {
    pub(super) fn new(max: u32, mode: ConcurrencyMode, now: Instant) -> Self {
        let max = max.max(1) as usize;
        let adaptive = mode == ConcurrencyMode::Adaptive;
        Concurrency {
            adaptive,
            max,
            limit: if adaptive { max.min(INITIAL) } else { max },
            starting: adaptive,
            cut_at: None,
            quiet_since: now,
            why: None,
            pushed: None,
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
        self.starting = false;
        self.pushed = Some(why.to_string());
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

    /// Nothing pushed back: with jobs waiting for a slot (`waiting`), the limit doubles every
    /// [`SLOW_START_EVERY`] until the first push; after one, it rises by a sixteenth of the most
    /// (at least one) after each [`CALM`] spell. Never past the most. Returns whether it rose.
    pub(super) fn calm(&mut self, waiting: bool, now: Instant) -> bool {
        let spell = if self.starting { SLOW_START_EVERY } else { CALM };
        if !self.adaptive || !waiting || self.limit >= self.max || now.duration_since(self.quiet_since) < spell {
            return false;
        }
        self.limit = match self.starting {
            true => self.limit * 2,
            false => self.limit + (self.max / 16).max(1),
        }
        .min(self.max);
        self.quiet_since = now;
        let why = match (self.limit == self.max, self.starting) {
            (true, true) => "started: nothing pushed back".to_string(),
            (true, false) => "back to backend.max_concurrent_jobs: nothing pushed back".to_string(),
            (false, true) => "starting: doubling while nothing pushes back".to_string(),
            (false, false) => format!("rising: nothing pushed back for {} s", CALM.as_secs()),
        };
        self.why = Some(match &self.pushed {
            Some(p) => format!("{why} (last pushed back: {p})"),
            None => why,
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
        while c.limit() < 16 {
            c.calm(true, at(t0, 0.0) + SLOW_START_EVERY * 4);
            c.quiet_since = t0;
        }
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
        c.limit = 32;
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
        assert_eq!(
            c.view().why.as_deref(),
            Some("back to backend.max_concurrent_jobs: nothing pushed back (last pushed back: memory)")
        );
    }

    #[test]
    fn a_run_starts_with_a_few_jobs_and_doubles_them_until_something_pushes_back() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(64, ConcurrencyMode::Adaptive, t0);
        assert_eq!(c.limit(), INITIAL);
        assert!(!c.calm(true, at(t0, 1.0)));
        assert!(c.calm(true, at(t0, 2.0)));
        assert_eq!(c.limit(), 8);
        assert!(c.calm(true, at(t0, 4.0)));
        assert_eq!(c.limit(), 16);
        assert!(c.push("429s", 16, at(t0, 5.0)));
        assert_eq!(c.limit(), 8);
        // Past the first push it rises by steps, after calm spells.
        assert!(!c.calm(true, at(t0, 8.0)));
        assert!(c.calm(true, at(t0, 10.0)));
        assert_eq!(c.limit(), 12);
        // A run whose most is the start never moves up: the default of 4.
        let mut c = Concurrency::new(4, ConcurrencyMode::Adaptive, t0);
        assert!(!c.calm(true, at(t0, 100.0)));
        assert_eq!(c.view(), model::Concurrency { limit: 4, max: 4, why: None });
    }

    #[test]
    fn fixed_never_moves() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(8, ConcurrencyMode::Fixed, t0);
        assert!(!c.push("429s", 8, at(t0, 1.0)));
        assert!(!c.calm(true, at(t0, 100.0)));
        assert_eq!(
            c.view(),
            model::Concurrency { limit: 8, max: 8, why: Some("fixed (backend.concurrency: fixed)".into()) }
        );
    }
}
