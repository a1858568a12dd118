//! The dispatch loop: keeps up to `max_concurrent_jobs` jobs in flight, watches them end, applies
//! the decisions of [`super::decide`], and every few moments refreshes progress, budget,
//! heartbeat, cancel requests and telemetry. It returns the status the run ends with; sealing
//! is the caller's.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use agenteval_core::model::*;
use agenteval_core::traits::TelemetrySnapshot;
use agenteval_core::{JobId, Result};
use chrono::Utc;
use tracing::Instrument;

use super::concurrency::Concurrency;
use super::decide::{self, Pending, StopReason, Verdict};
use super::jobs::{dispatch, finished_and_not, give_up, job_span, record_job, stop_jobs};
use super::run::{InFlight, Run};
use super::set::{SharedFleet, Slot};
use super::spans::SpanFile;
use super::{
    BUDGET_DRAIN, COUNTS_EVERY, ControllerOptions, DISPATCH_BATCH, HEARTBEAT_EVERY, POLL, PRESSURE_EVERY, ProgressView,
    TELEMETRY_EVERY,
};
use crate::telemetry::{self, FleetMetrics};

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub succeeded: u64,
    pub failed: u64,
    pub retried: u64,
}

/// The state of one drive: what waits, what runs, and how the run is going.
struct Fleet<'a> {
    run: &'a Run,
    metrics: &'a FleetMetrics,
    run_span: &'a tracing::Span,
    queue: VecDeque<Pending>,
    in_flight: HashMap<JobId, InFlight>,
    counters: Counters,
    counts: TaskCounts,
    stop: Option<StopReason>,
    gave_up: bool,
    /// Whether the first finished tasks were looked at for a broken agent.
    broken_checked: bool,
    /// Why the run stopped early, when it did for a reason worth recording.
    reason: Option<String>,
    /// The fault of an agent that cannot run, when its tasks recorded one.
    fault: Option<AgentFault>,
    /// The config field behind a launch that cannot work, as the backend names it.
    launch_field: Option<&'static str>,
    /// Since when every launch has failed (a success clears it): past
    /// `backend.launch_deadline_seconds`, the failing job's tasks are given up and the run stops.
    launch_failing_since: Option<Instant>,
    /// How many jobs may be in flight now, and why.
    concurrency: Concurrency,
    /// The run's rate-limited calls already acted on (the index's `throttled`).
    throttled_seen: u64,
}

/// How a drive ended: the run's status, and why it stopped early when it did.
pub(super) struct Driven {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub fault: Option<AgentFault>,
    pub launch_field: Option<&'static str>,
}

/// Dispatches and watches jobs until every task is done or the run is stopped; returns the
/// run's final status.
// Long: the fleet's state is set up in one literal (its queue grouped by image), then the loop.
pub(super) async fn drive_jobs(
    run: &Run,
    todo: Vec<u32>,
    epoch: u32,
    opts: &mut ControllerOptions,
    run_span: &tracing::Span,
    spans: &mut SpanFile,
) -> Result<Driven> {
    let Some(metrics) = run.metrics.as_ref() else {
        return Err(agenteval_core::Error::internal("fleet metrics are set before driving"));
    };
    let progress = opts.progress.clone();
    progress.start(&run.run_id, &run.store.bundle_uri(&run.run_id), run.tasks.len() as u64);
    let mut fleet = Fleet {
        run,
        metrics,
        run_span,
        queue: {
            // Tasks of one image (and compose layout) share a job (and so its task definition).
            let image = |i: u32| {
                if !run.task_images {
                    return None;
                }
                run.tasks.spec(i as usize).ok().and_then(|t| t.environment).and_then(|e| decide::job_key(&e))
            };
            let from = run.jobs_made.load(std::sync::atomic::Ordering::Relaxed);
            let queue =
                decide::shard_by(&todo, run.config.backend.tasks_per_job, (epoch, from), run.attempt_base + 1, image);
            run.jobs_made.fetch_add(queue.len(), std::sync::atomic::Ordering::Relaxed);
            queue
        },
        in_flight: HashMap::new(),
        counters: Counters::default(),
        counts: run.index.task_counts(&run.run_id).await?,
        stop: None,
        gave_up: false,
        broken_checked: false,
        reason: None,
        fault: None,
        launch_field: None,
        launch_failing_since: None,
        concurrency: Concurrency::new(
            run.config.backend.max_concurrent_jobs,
            run.config.backend.concurrency,
            Instant::now(),
        ),
        // Calls rate limited before this drive (an earlier round, a controller before a resume)
        // were acted on then.
        throttled_seen: run.index.throttled(&run.run_id).await.unwrap_or(0),
    };
    fleet.publish(opts, false).await?;
    let mut last_counts = Instant::now() - COUNTS_EVERY;
    let mut last_pressure = Instant::now();
    let mut last_beat = Instant::now();
    let mut last_telemetry = Instant::now();
    let shared = opts.set.as_ref().map(|s| s.fleet.clone());
    // A budget kept at the wire refuses every task's next call: the tasks running when it is
    // reached end on their own within a call, their results and costs kept, rather than cut.
    let wire_kept = crate::agents::access::upstream_of(&run.config).is_some();
    let mut budget_reached_at: Option<Instant> = None;

    let driven: Result<()> = async {
        loop {
            if *opts.interrupt.borrow() {
                fleet.stop = Some(StopReason::Interrupted);
            }
            if last_counts.elapsed() >= COUNTS_EVERY {
                last_counts = Instant::now();
                fleet.refresh_counts(opts).await?;
            }
            if last_beat.elapsed() >= HEARTBEAT_EVERY {
                last_beat = Instant::now();
                fleet.heartbeat(opts).await?;
            }
            if last_pressure.elapsed() >= PRESSURE_EVERY {
                last_pressure = Instant::now();
                fleet.sense(opts).await?;
            }
            if last_telemetry.elapsed() >= TELEMETRY_EVERY {
                last_telemetry = Instant::now();
                fleet.export().await;
                spans.flush().await?;
            }
            if fleet.stop == Some(StopReason::Budget) && wire_kept {
                let at = *budget_reached_at.get_or_insert_with(Instant::now);
                if fleet.in_flight.is_empty() || at.elapsed() >= BUDGET_DRAIN {
                    break;
                }
            } else if fleet.stop.is_some() {
                break;
            } else {
                fleet.dispatch_ready(opts).await?;
            }
            if fleet.in_flight.is_empty() && fleet.queue.is_empty() {
                break;
            }
            let waits_for_slot = !fleet.queue.is_empty() && shared.is_some() && fleet.stop.is_none();
            tokio::select! {
                _ = run.backend.wait_for_change(POLL) => {}
                _ = opts.interrupt.changed() => {}
                // Another run of the set let a job go: its slot may be this run's.
                _ = slot_freed(shared.as_deref()), if waits_for_slot => {}
            }
            fleet.collect_ended(opts).await?;
        }
        Ok(())
    }
    .await;
    if let Some(set) = &opts.set {
        // Whatever it has left, this run launches nothing more: its share is the others'.
        set.fleet.waiting(set.member.position, false);
    }
    if let Err(e) = driven {
        // The run cannot go on (lost index, lost lease, failed store): its workers must not
        // run on unwatched. Best effort; the error that stopped the run is the one to report.
        if let Err(stop) = stop_jobs(run, &mut fleet.in_flight).await {
            tracing::warn!("stopping the run's jobs: {stop}");
        }
        return Err(e);
    }

    if !fleet.in_flight.is_empty() {
        stop_jobs(run, &mut fleet.in_flight).await?;
    }
    fleet.counts = run.index.task_counts(&run.run_id).await?;
    // A run whose every task failed at once the same way is a broken agent too.
    fleet.check_broken_agent(opts).await?;
    progress.update(&view(&fleet.counts, 0, fleet.counters.retried));
    gauges(metrics, &fleet.counts, 0, fleet.queue.len());
    fleet.export().await;
    progress.message("sealing bundle");
    let status = decide::final_status(fleet.stop, fleet.gave_up, &fleet.counts);
    Ok(Driven { status, reason: fleet.reason, fault: fleet.fault, launch_field: fleet.launch_field })
}

impl Fleet<'_> {
    /// Task counts for the progress display and the run budget.
    async fn refresh_counts(&mut self, opts: &ControllerOptions) -> Result<()> {
        if self.run.index.counts_are_cheap() {
            self.counts = self.run.index.task_counts(&self.run.run_id).await?;
        } else {
            // No read: the finished tasks come from job ends, what runs from the jobs in flight.
            let c = &mut self.counts;
            c.running = self.in_flight.values().map(|f| f.tasks.len() as u64).sum();
            c.queued = 0;
            c.pending = c.total.saturating_sub(c.finished() + c.running + c.cancelled);
        }
        opts.progress.update(&view(&self.counts, self.in_flight.len(), self.counters.retried));
        gauges(self.metrics, &self.counts, self.in_flight.len(), self.queue.len());
        // A run of a set shares the set's budget: what all its runs spent together counts.
        let (max, spent, whose) = match &opts.set {
            Some(set) => {
                // What every run's calls spent at the wire, in the set's ledger.
                let wire = match (set.fleet.max_cost_usd(), set.fleet.ledger_run()) {
                    (Some(_), Some(ledger)) => self.run.index.spend(&ledger).await.unwrap_or(0.0),
                    _ => 0.0,
                };
                (set.fleet.max_cost_usd(), set.fleet.spend(self.run.run_id, self.counts.cost_usd).max(wire), "set")
            }
            None => {
                // What the calls spent at the wire, every worker's, finished tasks or not.
                let wire = match self.run.config.max_run_cost_usd {
                    Some(_) => self.run.index.spend(&self.run.run_id).await.unwrap_or(0.0),
                    None => 0.0,
                };
                (self.run.config.max_run_cost_usd, self.counts.cost_usd.max(wire), "run")
            }
        };
        let reached = decide::budget_reached(max, spent);
        if let (Some(set), true) = (&opts.set, reached) {
            set.fleet.exhaust();
        }
        if self.stop.is_none() && (reached || self.set_exhausted(opts)) {
            let max = max.unwrap_or_default();
            opts.progress.message(&format!("{whose} budget ${max:.4} reached (spent ${spent:.4}); stopping"));
            self.stop = Some(StopReason::Budget);
        }
        self.check_broken_agent(opts).await
    }

    /// Stops a run whose first tasks all failed the same way before the agent did anything (a
    /// program that does not exist, a key that is refused): every further task would too, and
    /// a night of such failures must not read as a finished run. Looked at once, when the first
    /// `stop_after_identical_errors` tasks have finished.
    async fn check_broken_agent(&mut self, opts: &ControllerOptions) -> Result<()> {
        let need = (self.run.config.backend.stop_after_identical_errors as u64).min(self.counts.total);
        if self.broken_checked || self.stop.is_some() || need == 0 || self.counts.finished() < need {
            return Ok(());
        }
        self.broken_checked = true;
        if self.counts.passed + self.counts.failed > 0 {
            return Ok(());
        }
        let tasks = self.run.index.list_tasks(&self.run.run_id).await?;
        let finished = tasks.iter().filter(|t| matches!(t.state, TaskState::Completed | TaskState::Failed)).map(|t| {
            decide::Ended {
                by: t.terminated_by.unwrap_or(TerminatedBy::InfraFailure),
                fault: t.fault.as_ref(),
                detail: t.detail.as_deref(),
            }
        });
        if let Some(broken) = decide::broken_agent(finished, need as usize) {
            let detail = &broken.detail;
            opts.progress.message(&format!("the first {need} tasks all failed the same way; stopping: {detail}"));
            self.reason = Some(format!("{}: {detail}", super::BROKEN_AGENT));
            self.fault = broken.fault;
            self.stop = Some(StopReason::BrokenAgent);
        }
        Ok(())
    }

    /// Tells the index this controller is alive, and learns whether someone asked it to stop.
    async fn heartbeat(&mut self, opts: &ControllerOptions) -> Result<()> {
        let run = self.run;
        run.index.verify().await?;
        // Conditional on this controller's lease: a `Conflict` here means another controller
        // claimed the run (`resume --force`), and this one must stop driving it at once.
        run.index
            .update_run(&run.run_id, &RunUpdate { heartbeat: true, if_epoch: Some(run.epoch), ..Default::default() })
            .await?;
        if self.stop.is_none()
            && let Some(r) = run.index.get_run(&run.run_id).await?
            && r.cancel_requested
        {
            opts.progress.message("cancel requested; stopping");
            self.stop = Some(StopReason::Interrupted);
        }
        Ok(())
    }

    /// Submits queued jobs while there is room, in concurrent batches: a cloud launch takes a
    /// round trip of 100 ms or more, and the backend's own pacing (a token bucket) decides the
    /// rate, not this loop. The batch is joined in this task: cloud submissions overlap while
    /// they wait on the network; local ones (index statements, a job spec write, a process
    /// start, none of which waits) run one after the other, which measured faster on two cores
    /// than a task per submission, and costs no allocator arenas on other threads (see
    /// docs/ARCHITECTURE.md, concurrency). A launch that failed transiently goes back to the
    /// front of the queue.
    /// Whether another run of this run's set reached the set's budget.
    fn set_exhausted(&self, opts: &ControllerOptions) -> bool {
        opts.set.as_ref().is_some_and(|s| s.fleet.exhausted())
    }

    async fn dispatch_ready(&mut self, opts: &ControllerOptions) -> Result<()> {
        let run = self.run;
        let max_conc = self.concurrency.limit();
        if self.set_exhausted(opts) {
            // Seen at the next count; nothing more is launched meanwhile.
            return Ok(());
        }
        if let Some(set) = &opts.set {
            // A run with every job out waits for no slot: its share is the others'.
            set.fleet.waiting(set.member.position, !self.queue.is_empty());
        }
        while self.in_flight.len() < max_conc && !self.queue.is_empty() {
            let mut n = (max_conc - self.in_flight.len()).min(self.queue.len()).min(DISPATCH_BATCH);
            // A run of a set launches only into the set's free slots, up to its share of them.
            let mut slots: Vec<Option<Slot>> = match &opts.set {
                Some(set) => {
                    let position = set.member.position;
                    std::iter::from_fn(|| set.fleet.try_slot(position)).take(n).map(Some).collect()
                }
                None => (0..n).map(|_| None).collect(),
            };
            n = slots.len();
            if n == 0 {
                break;
            }
            let batch: Vec<(Pending, tracing::Span)> = self
                .queue
                .drain(..n)
                .map(|p| {
                    let s = job_span(self.run_span, &p);
                    (p, s)
                })
                .collect();
            let env: BTreeMap<String, String> = (opts.worker_env)();
            // A set's runs share one budget and one provider's rate limits at the wire.
            let ledger = opts.set.as_ref().map(|s| s.fleet.ledger(run.run_id));
            let results = futures::future::join_all(
                batch.iter().map(|(p, span)| dispatch(run, p, span, &env, ledger).instrument(span.clone())),
            )
            .await;
            let mut retry_later = Vec::new();
            for ((p, span), res) in batch.into_iter().zip(results) {
                match res {
                    Ok(handle) => {
                        self.launch_failing_since = None;
                        self.metrics.jobs_submitted.add(1, self.metrics.attrs());
                        span.record("agenteval.job.handle", handle.native_id.as_str());
                        let _slot = slots.pop().flatten();
                        self.in_flight.insert(
                            p.job_id.clone(),
                            InFlight { handle, tasks: p.tasks, submitted: Instant::now(), started: false, span, _slot },
                        );
                    }
                    Err(e) if e.kind().is_retryable() => {
                        let since = *self.launch_failing_since.get_or_insert_with(Instant::now);
                        if since.elapsed() < Duration::from_secs(run.config.backend.launch_deadline_seconds) {
                            tracing::warn!(job = %p.job_id, "submit failed, will retry: {e}");
                            let in_flight = self.in_flight.len();
                            if self.concurrency.push(&format!("launches failing: {e}"), in_flight, Instant::now()) {
                                self.publish(opts, true).await?;
                            }
                            telemetry::set_error(&span, &format!("submit failed, will retry: {e}"));
                            retry_later.push(p);
                            continue;
                        }
                        self.launch_overdue(&p, &span, &e, since, opts).await?;
                    }
                    Err(e) => {
                        // A launch no retry can fix (a missing task definition, cluster or
                        // role; a worker binary that cannot start): every job would fail the
                        // same way. Stop, and charge no task with it: they stay untried.
                        tracing::error!(job = %p.job_id, "submit failed: {e}");
                        telemetry::set_error(&span, &format!("submit failed: {e}"));
                        retry_later.push(p);
                        if self.stop.is_none() {
                            opts.progress.message(&format!("cannot launch jobs; stopping: {e}"));
                            self.reason = Some(format!("cannot launch jobs: {e}"));
                            self.launch_field = Some(run.backend.launch_field(&e));
                            self.stop = Some(StopReason::LaunchFailed);
                        }
                    }
                }
            }
            if !retry_later.is_empty() {
                for p in retry_later.into_iter().rev() {
                    self.queue.push_front(p);
                }
                break;
            }
        }
        Ok(())
    }

    /// Launches have failed for the whole `backend.launch_deadline_seconds`: a night must end
    /// with a verdict, not a hang. This job's tasks are `infra` with the provider's words; the
    /// others stay untried and the run stops.
    async fn launch_overdue(
        &mut self,
        p: &Pending,
        span: &tracing::Span,
        e: &agenteval_core::Error,
        since: Instant,
        opts: &ControllerOptions,
    ) -> Result<()> {
        let run = self.run;
        let reason =
            format!("could not launch for {}s (backend.launch_deadline_seconds): {e}", since.elapsed().as_secs());
        telemetry::set_error(span, &reason);
        give_up(run, span, &p.job_id, p.attempt, &p.tasks, &reason).await?;
        self.gave_up = true;
        if !run.index.counts_are_cheap() {
            self.counts.given_up += p.tasks.len() as u64;
            self.counts.infra += p.tasks.len() as u64;
        }
        if self.stop.is_none() {
            opts.progress.message(&format!("cannot launch jobs; stopping: {reason}"));
            self.reason = Some(format!("cannot launch jobs: {reason}"));
            self.launch_field = Some(run.backend.launch_field(e));
            self.stop = Some(StopReason::LaunchFailed);
        }
        Ok(())
    }

    /// Polls the jobs in flight and settles every one that ended.
    async fn collect_ended(&mut self, opts: &ControllerOptions) -> Result<()> {
        let run = self.run;
        let handles: Vec<JobHandle> = self.in_flight.values().map(|f| f.handle.clone()).collect();
        let mut ended = false;
        let statuses = match run.backend.job_status(&handles).await {
            Ok(s) => s,
            Err(e) if e.kind().is_retryable() => {
                tracing::warn!("job status failed, will retry: {e}");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        for (handle, status) in handles.into_iter().zip(statuses) {
            let Some(f) = self.in_flight.get_mut(&handle.job_id) else { continue };
            if !f.started && status != JobStatus::Queued {
                f.started = true;
                self.metrics.job_start_latency.record(f.submitted.elapsed().as_secs_f64(), self.metrics.attrs());
            }
            if !status.is_terminal() {
                continue;
            }
            if let Some(f) = self.in_flight.remove(&handle.job_id) {
                self.settle(handle, status, f, opts).await?;
                ended = true;
            }
        }
        // Until the first tasks have been looked at for a broken agent, every job's end is: a
        // fast-failing agent would otherwise burn through many tasks between two refreshes.
        if ended && !self.broken_checked {
            self.refresh_counts(opts).await?;
        }
        Ok(())
    }

    /// Records a job's end and acts on the decision: done, retry the unfinished tasks, or give
    /// them up.
    async fn settle(
        &mut self,
        handle: JobHandle,
        status: JobStatus,
        f: InFlight,
        opts: &ControllerOptions,
    ) -> Result<()> {
        let run = self.run;
        // A job that failed because the index vanished under it says nothing about its tasks:
        // stop the run (its bundle is intact) rather than retry or give them up.
        run.index.verify().await?;
        record_job(run, &handle, &status, f.tasks.len()).await?;
        tracing::debug!(job = %handle.job_id, ?status, secs = f.submitted.elapsed().as_secs_f64(), "job ended");
        let (done, left) = finished_and_not(run, &f.tasks).await?;
        if !run.index.counts_are_cheap() {
            for t in &done {
                self.counts.add_finished(t);
            }
        }
        f.span.record("agenteval.job.status", JobState::of(&status).as_str());
        f.span.record("agenteval.job.unfinished", left.len() as i64);
        let end = decide::on_job_end(
            &handle.job_id,
            &status,
            handle.attempt,
            run.attempt_base,
            run.config.backend.max_attempts,
            left,
        );
        if end.verdict != Verdict::Done {
            // Retrying or giving up writes for the run: only while this controller still holds
            // its lease. A job stopped because another controller took the run over (`resume
            // --force`) must not be retried or given up by the one that lost it; the
            // conditional heartbeat fails with `Conflict`, which stops this controller.
            run.index
                .update_run(
                    &run.run_id,
                    &RunUpdate { heartbeat: true, if_epoch: Some(run.epoch), ..Default::default() },
                )
                .await?;
        }
        if end.succeeded {
            self.counters.succeeded += 1;
            self.metrics.jobs_succeeded.add(1, self.metrics.attrs());
        } else {
            self.counters.failed += 1;
            self.metrics.jobs_failed.add(1, self.metrics.attrs());
            telemetry::set_error(&f.span, end.reason.as_deref().unwrap_or("job failed"));
        }
        match end.verdict {
            Verdict::Done => {}
            Verdict::Retry(p) => {
                let why =
                    format!("a job failed for the infrastructure ({})", end.reason.as_deref().unwrap_or("unknown"));
                if self.concurrency.push(&why, self.in_flight.len(), Instant::now()) {
                    self.publish(opts, true).await?;
                }
                self.counters.retried += 1;
                self.metrics.jobs_retried.add(1, self.metrics.attrs());
                opts.progress.message(&format!(
                    "job {} attempt {} failed ({}); retrying {} task(s)",
                    handle.job_id,
                    handle.attempt,
                    end.reason.as_deref().unwrap_or("unknown"),
                    p.tasks.len()
                ));
                self.queue.push_front(p);
            }
            Verdict::GiveUp { tasks, reason } => {
                give_up(run, &f.span, &handle.job_id, handle.attempt, &tasks, &reason).await?;
                self.gave_up = true;
                if !run.index.counts_are_cheap() {
                    self.counts.given_up += tasks.len() as u64;
                    self.counts.infra += tasks.len() as u64;
                }
            }
        }
        Ok(())
    }

    /// Looks at what may push back (the run's rate-limited calls, the backend's pressure) and
    /// moves the concurrency: down on a push, up a step after a calm spell with jobs waiting.
    async fn sense(&mut self, opts: &ControllerOptions) -> Result<()> {
        let now = Instant::now();
        let mut pushes = Vec::new();
        // Telemetry of a kind: an index that cannot answer now pushes nothing.
        if let Ok(n) = self.run.index.throttled(&self.run.run_id).await
            && n > self.throttled_seen
        {
            let new = n - self.throttled_seen;
            self.throttled_seen = n;
            pushes.push(format!(
                "{new} model call{} rate limited (the provider's 429s, or held back by the run's rate limits)",
                if new == 1 { " was" } else { "s were" }
            ));
        }
        pushes.extend(self.run.backend.pressure().await);
        let in_flight = self.in_flight.len();
        let changed = match pushes.is_empty() {
            true => {
                let waiting = !self.queue.is_empty() && in_flight >= self.concurrency.limit();
                self.concurrency.calm(waiting, now)
            }
            false => self.concurrency.push(&pushes.join("; "), in_flight, now),
        };
        if changed {
            self.publish(opts, true).await?;
        }
        Ok(())
    }

    /// Tells the index (`status`) the concurrency and why, and the progress display when it
    /// `changed`.
    async fn publish(&self, opts: &ControllerOptions, changed: bool) -> Result<()> {
        let view = self.concurrency.view();
        if let (true, Some(why)) = (changed, view.why.as_deref()) {
            opts.progress.message(&format!("concurrency {} of {}: {why}", view.limit, view.max));
            tracing::info!(limit = view.limit, max = view.max, "concurrency: {why}");
        }
        let run = self.run;
        run.index
            .update_run(
                &run.run_id,
                &RunUpdate { concurrency: Some(view), if_epoch: Some(run.epoch), ..Default::default() },
            )
            .await
    }

    /// A telemetry snapshot to the run's `telemetry.jsonl`; telemetry never harms a run.
    async fn export(&self) {
        let (c, k) = (&self.counts, &self.counters);
        let snap = TelemetrySnapshot {
            timestamp: Utc::now(),
            jobs_queued: self.queue.len() as u64,
            jobs_running: self.in_flight.len() as u64,
            jobs_succeeded: k.succeeded,
            jobs_failed: k.failed,
            jobs_retried: k.retried,
            tasks_finished: c.finished(),
            tasks_passed: c.passed,
            cost_usd: (c.cost_unknown == 0).then_some(c.cost_usd),
            tokens: c.tokens,
        };
        if let Err(e) = self.run.fleet_file.append(&snap).await {
            tracing::warn!("telemetry export failed: {e}");
        }
    }
}

/// Resolves when a run of this run's set gives a job slot back (never without a set).
async fn slot_freed(shared: Option<&SharedFleet>) {
    match shared {
        Some(fleet) => fleet.slot_freed().await,
        None => std::future::pending().await,
    }
}

fn gauges(m: &FleetMetrics, c: &TaskCounts, running: usize, queued: usize) {
    m.jobs_running.record(running as u64, m.attrs());
    m.queue_depth.record(queued as u64, m.attrs());
    if c.finished() > 0 {
        m.pass_rate.record(c.passed as f64 / c.finished() as f64, m.attrs());
    }
}

fn view(c: &TaskCounts, jobs: usize, retries: u64) -> ProgressView {
    ProgressView {
        total: c.total,
        waiting: c.pending + c.queued + c.cancelled,
        running: c.running,
        done: c.finished(),
        passed: c.passed,
        failed: c.failed,
        errored: c.errored,
        infra: c.infra,
        cost_usd: c.cost_usd,
        cost_unknown: c.cost_unknown,
        jobs_in_flight: jobs as u64,
        retries,
    }
}
