//! The controller's decisions as pure functions: how tasks are sharded into jobs, what happens
//! to a job's tasks when it ends, when the budget stops a run, and the status a run ends with.
//! No I/O here, so every rule is unit-tested on its own.

use std::collections::VecDeque;

use agenteval_core::JobId;
use agenteval_core::model::{AgentFault, JobStatus, RunStatus, TaskCounts, TerminatedBy};
use agenteval_core::traits::worker_exit;

/// A job waiting to be dispatched: tasks by their position in the run's task table.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub job_id: JobId,
    pub attempt: u32,
    pub tasks: Vec<u32>,
}

/// Why dispatching stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Ctrl-C, SIGTERM, SIGHUP or `agenteval cancel`.
    Interrupted,
    /// The run spent `max_run_cost_usd`.
    Budget,
    /// The first tasks all failed the same way before the agent did anything: it cannot run.
    BrokenAgent,
    /// The backend refused to launch a job for a reason no retry can fix.
    LaunchFailed,
}

/// A task's message on one line: a multi-line one (a traceback in the agent's stderr) as its
/// first line and its last, which says what was raised; the task's log keeps it whole.
fn one_line(said: &str) -> String {
    let mut lines = said.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    match lines.next_back() {
        Some(last) => format!("{first} … {last}"),
        None => first.to_string(),
    }
}

/// A finished task as the broken-agent check reads it from the index: how it ended, the fault
/// the worker recorded (set where the failure arose, never read from the message) and what it
/// said.
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    pub by: TerminatedBy,
    pub fault: Option<&'a AgentFault>,
    pub detail: Option<&'a str>,
}

/// An agent that cannot run: the fault its tasks share (`None` when they share only the same
/// message) and what to tell people.
#[derive(Debug, Clone, PartialEq)]
pub struct Broken {
    pub fault: Option<AgentFault>,
    pub detail: String,
}

/// Whether a run's first finished tasks show an agent that cannot run: at least `need` of them
/// (`backend.stop_after_identical_errors`; 0 turns the check off), each an `agent_error` or an
/// install that failed (`infra` with a fault), all with the same fault — or, with none, the
/// same message. The first one's message, after the fault's description where that says more.
pub fn broken_agent<'a>(finished: impl IntoIterator<Item = Ended<'a>>, need: usize) -> Option<Broken> {
    if need == 0 {
        return None;
    }
    let mut first: Option<Ended<'a>> = None;
    let mut n = 0;
    for t in finished {
        let agents = t.by == TerminatedBy::AgentError || (t.by == TerminatedBy::InfraFailure && t.fault.is_some());
        if !agents {
            return None;
        }
        match &first {
            None => first = Some(t),
            Some(f) if f.fault != t.fault => return None,
            Some(f) if f.fault.is_none() && f.detail != t.detail => return None,
            Some(_) => {}
        }
        n += 1;
    }
    if n < need {
        return None;
    }
    let first = first?;
    let said = one_line(first.detail.unwrap_or(""));
    let detail = match first.fault {
        None
        | Some(
            AgentFault::CannotStart | AgentFault::SetupFailed | AgentFault::InstallFailed | AgentFault::ImageCannotRun,
        ) => said,
        Some(f) => format!("{}; the first said: {said}", f.describe()),
    };
    Some(Broken { fault: first.fault.cloned(), detail })
}

/// The first jobs of a (resumed) run: `todo` in chunks of `per_job`, numbered in the epoch.
pub fn shard(todo: &[u32], per_job: u32, epoch: u32, attempt: u32) -> VecDeque<Pending> {
    todo.chunks(per_job.max(1) as usize)
        .enumerate()
        .map(|(n, chunk)| Pending { job_id: JobId::numbered(epoch, n + 1), attempt, tasks: chunk.to_vec() })
        .collect()
}

/// What tasks must share to share a job on a fleet that runs each job's environments from one
/// task definition: the image and, for a compose task, its services and volumes (two tasks of
/// one image with different sidecars must not run under the first one's). `None`: no image.
pub fn job_key(env: &agenteval_core::environment::EnvSpec) -> Option<String> {
    use sha2::Digest as _;
    let image = env.image.clone()?;
    if env.sidecars.is_empty() && env.volumes.is_empty() {
        return Some(image);
    }
    let layout = serde_json::to_vec(&(&env.sidecars, &env.volumes)).expect("serializable");
    Some(format!("{image} {}", hex::encode(&sha2::Sha256::digest(&layout)[..8])))
}

/// Like [`shard`], with tasks of one `key` (their image) in jobs of their own: each key's
/// tasks keep their order, and keys come in the order their first task does.
pub fn shard_by(
    todo: &[u32],
    per_job: u32,
    (epoch, from): (u32, usize),
    attempt: u32,
    key: impl Fn(u32) -> Option<String>,
) -> VecDeque<Pending> {
    let mut groups: Vec<(Option<String>, Vec<u32>)> = Vec::new();
    let mut at: std::collections::HashMap<Option<String>, usize> = std::collections::HashMap::new();
    for &t in todo {
        let k = key(t);
        let i = *at.entry(k.clone()).or_insert_with(|| {
            groups.push((k, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(t);
    }
    // Numbered on from the jobs of the epoch's earlier rounds (adaptive repetitions), so that no
    // job's folder is another's.
    let mut n = from;
    let mut out = VecDeque::new();
    for (_, tasks) in groups {
        for chunk in tasks.chunks(per_job.max(1) as usize) {
            n += 1;
            out.push_back(Pending { job_id: JobId::numbered(epoch, n), attempt, tasks: chunk.to_vec() });
        }
    }
    out
}

/// What becomes of a job's tasks once the job has ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every task of the job is finished in the index.
    Done,
    /// Dispatch these tasks again, as this attempt.
    Retry(Pending),
    /// Record these tasks as infrastructure failures.
    GiveUp { tasks: Vec<u32>, reason: String },
}

/// A job's end, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    /// Whether the job counts as succeeded (it did all it was given).
    pub succeeded: bool,
    /// Why it failed, when it did.
    pub reason: Option<String>,
    pub verdict: Verdict,
}

/// Decides what a job's end means for its tasks. The index, not the backend, says what got
/// done: `unfinished` are the job's tasks the index does not record as finished, so a job that
/// "succeeded" without running them (a container that never started, an emulator) is an
/// infrastructure failure like any other. Infrastructure failures are retried while the
/// attempts this controller made (`attempt - attempt_base`) stay under `max_attempts`; a job
/// that failed by its own decision (a bad job spec) is never retried.
pub fn on_job_end(
    job_id: &JobId,
    status: &JobStatus,
    attempt: u32,
    attempt_base: u32,
    max_attempts: u32,
    unfinished: Vec<u32>,
) -> JobEnd {
    let (infrastructure, reason) = match status {
        JobStatus::Succeeded if unfinished.is_empty() => {
            return JobEnd { succeeded: true, reason: None, verdict: Verdict::Done };
        }
        JobStatus::Succeeded => (true, format!("job ended without results for {} task(s)", unfinished.len())),
        JobStatus::Failed { infrastructure, reason, .. } => (*infrastructure, reason.clone()),
        JobStatus::Cancelled => (true, "worker was cancelled".to_string()),
        // Not an end; a caller asking is a bug, and the safe answer is to look again later.
        JobStatus::Queued | JobStatus::Running => (true, "job has not ended".to_string()),
    };
    // Handed back unstarted by a worker that finished others: no attempt was spent on them.
    let handed_back = matches!(status, JobStatus::Failed { exit_code: Some(worker_exit::HANDED_BACK), .. });
    let verdict = if unfinished.is_empty() {
        Verdict::Done
    } else if handed_back || (infrastructure && attempt.saturating_sub(attempt_base) < max_attempts) {
        Verdict::Retry(Pending { job_id: job_id.clone(), attempt: attempt + 1, tasks: unfinished })
    } else {
        Verdict::GiveUp { tasks: unfinished, reason: reason.clone() }
    };
    JobEnd { succeeded: false, reason: Some(reason), verdict }
}

/// Whether the run budget stops dispatching.
pub fn budget_reached(max_run_cost_usd: Option<f64>, spent: f64) -> bool {
    max_run_cost_usd.is_some_and(|max| spent >= max)
}

/// The status a run ends with once the controller stops driving it.
pub fn final_status(stop: Option<StopReason>, gave_up: bool, counts: &TaskCounts) -> RunStatus {
    match stop {
        Some(StopReason::Interrupted) => RunStatus::Interrupted,
        Some(StopReason::Budget) => RunStatus::BudgetExceeded,
        Some(StopReason::BrokenAgent | StopReason::LaunchFailed) => RunStatus::Failed,
        None if gave_up || counts.given_up > 0 => RunStatus::Failed,
        None if counts.completed == counts.total => RunStatus::Complete,
        None => RunStatus::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobId {
        JobId::numbered(0, 7)
    }

    fn crashed() -> JobStatus {
        JobStatus::Failed { exit_code: Some(137), reason: "killed".into(), infrastructure: true }
    }

    #[test]
    fn shards_keep_every_task_once_in_order() {
        let q = shard(&[0, 1, 2, 3, 4], 2, 0, 1);
        assert_eq!(q.iter().map(|p| p.tasks.clone()).collect::<Vec<_>>(), vec![vec![0, 1], vec![2, 3], vec![4]]);
        assert_eq!(q[2].job_id.as_str(), "j000003");
        let q = shard(&[5, 9], 0, 2, 4);
        assert_eq!(q.len(), 2, "tasks_per_job 0 means one task per job");
        assert_eq!((q[0].job_id.as_str(), q[0].attempt), ("r2-j000001", 4));
    }

    #[test]
    fn shards_by_key_keep_one_key_a_job() {
        let key = |t: u32| Some(if t.is_multiple_of(2) { "even" } else { "odd" }.to_string());
        // One image, two compose layouts: two keys.
        let env = |sidecar: Option<&str>| agenteval_core::environment::EnvSpec {
            image: Some("envs@sha256:aa".into()),
            sidecars: sidecar
                .map(|n| serde_json::from_value(serde_json::json!([{"name": n, "image": "svc@sha256:bb"}])).unwrap())
                .unwrap_or_default(),
            ..Default::default()
        };
        assert_eq!(job_key(&env(None)).as_deref(), Some("envs@sha256:aa"));
        assert_ne!(job_key(&env(Some("api"))), job_key(&env(Some("tool"))), "different sidecars, different jobs");
        assert_ne!(job_key(&env(Some("api"))), job_key(&env(None)));
        let q = shard_by(&[0, 1, 2, 3, 4, 5, 6], 2, (0, 0), 1, key);
        let jobs: Vec<Vec<u32>> = q.iter().map(|p| p.tasks.clone()).collect();
        assert_eq!(jobs, vec![vec![0, 2], vec![4, 6], vec![1, 3], vec![5]]);
        assert_eq!(q[3].job_id.as_str(), "j000004");
        assert_eq!(shard_by(&[0, 1, 2], 2, (0, 0), 1, |_| None), shard(&[0, 1, 2], 2, 0, 1));
        // A later round goes on numbering.
        let later = shard_by(&[7, 8], 2, (0, 4), 1, |_| None);
        assert_eq!(later[0].job_id, JobId::numbered(0, 5));
    }

    #[test]
    fn a_job_that_did_everything_is_done() {
        let end = on_job_end(&job(), &JobStatus::Succeeded, 1, 0, 3, vec![]);
        assert_eq!(end, JobEnd { succeeded: true, reason: None, verdict: Verdict::Done });
    }

    #[test]
    fn success_without_results_is_retried() {
        let end = on_job_end(&job(), &JobStatus::Succeeded, 1, 0, 3, vec![4, 5]);
        assert!(!end.succeeded);
        assert_eq!(end.verdict, Verdict::Retry(Pending { job_id: job(), attempt: 2, tasks: vec![4, 5] }));
        assert!(end.reason.unwrap().contains("without results for 2 task(s)"));
    }

    #[test]
    fn infrastructure_failures_retry_until_max_attempts_then_give_up() {
        assert!(matches!(on_job_end(&job(), &crashed(), 2, 0, 3, vec![1]).verdict, Verdict::Retry(_)));
        let end = on_job_end(&job(), &crashed(), 3, 0, 3, vec![1]);
        assert_eq!(end.verdict, Verdict::GiveUp { tasks: vec![1], reason: "killed".into() });
        // A resumed run counts its attempts from where it started.
        assert!(matches!(on_job_end(&job(), &crashed(), 4, 3, 3, vec![1]).verdict, Verdict::Retry(_)));
        assert!(matches!(on_job_end(&job(), &JobStatus::Cancelled, 1, 0, 1, vec![1]).verdict, Verdict::GiveUp { .. }));
    }

    #[test]
    fn tasks_handed_back_are_dispatched_again_whatever_the_attempts() {
        let back = worker_exit::job_status(Some(worker_exit::HANDED_BACK), None, String::new);
        let end = on_job_end(&job(), &back, 9, 0, 3, vec![2, 3]);
        assert_eq!(end.verdict, Verdict::Retry(Pending { job_id: job(), attempt: 10, tasks: vec![2, 3] }));
    }

    #[test]
    fn a_worker_refusing_its_job_is_not_retried() {
        let refused = JobStatus::Failed { exit_code: Some(2), reason: "bad spec".into(), infrastructure: false };
        let end = on_job_end(&job(), &refused, 1, 0, 3, vec![0, 1]);
        assert_eq!(end.verdict, Verdict::GiveUp { tasks: vec![0, 1], reason: "bad spec".into() });
    }

    #[test]
    fn a_failed_job_whose_tasks_all_finished_needs_nothing() {
        let end = on_job_end(&job(), &crashed(), 1, 0, 3, vec![]);
        assert!(!end.succeeded);
        assert_eq!(end.verdict, Verdict::Done);
    }

    #[test]
    fn budget_and_final_status() {
        assert!(!budget_reached(None, 1e9));
        assert!(!budget_reached(Some(1.0), 0.99));
        assert!(budget_reached(Some(1.0), 1.0));
        let all = TaskCounts { total: 3, completed: 3, ..Default::default() };
        assert_eq!(final_status(None, false, &all), RunStatus::Complete);
        assert_eq!(final_status(None, true, &all), RunStatus::Failed);
        assert_eq!(final_status(Some(StopReason::Budget), false, &all), RunStatus::BudgetExceeded);
        assert_eq!(final_status(Some(StopReason::Interrupted), false, &all), RunStatus::Interrupted);
        let short = TaskCounts { total: 3, completed: 2, ..Default::default() };
        assert_eq!(final_status(None, false, &short), RunStatus::Failed);
    }

    fn ended<'a>(by: TerminatedBy, fault: Option<&'a AgentFault>, detail: &'a str) -> Ended<'a> {
        Ended { by, fault, detail: Some(detail) }
    }

    #[test]
    fn a_broken_agent_is_the_same_agent_error_on_every_first_task() {
        use TerminatedBy::{AgentError, Completed, LimitTime};
        let start = AgentFault::CannotStart;
        let cannot = ended(AgentError, Some(&start), "cannot start agent `nopython`: No such file or directory");
        let got = broken_agent([cannot; 3], 3).unwrap();
        assert_eq!((got.fault, got.detail.as_str()), (Some(start.clone()), cannot.detail.unwrap()));
        assert_eq!(broken_agent([cannot; 2], 3), None, "too few yet");
        assert_eq!(broken_agent([cannot, ended(AgentError, None, "other"), cannot], 3), None);
        assert_eq!(broken_agent([cannot, ended(Completed, None, ""), cannot], 3), None);
        assert_eq!(broken_agent([ended(LimitTime, None, "x"); 3], 3), None, "a limit is not a broken agent");
        assert_eq!(broken_agent([cannot; 3], 0), None, "0 turns it off");
        // The same message with no fault is the same mistake too.
        let same = ended(AgentError, None, "agent.terminal has no payload.final_answer");
        assert_eq!(broken_agent([same; 3], 3).unwrap().fault, None);
    }

    #[test]
    fn tasks_are_the_same_mistake_by_their_fault_whatever_their_messages_say() {
        use TerminatedBy::{AgentError, InfraFailure};
        let two = AgentFault::ExitedBeforeProtocol(2);
        let typo = |dir: &str| {
            format!(
                "agent exited with exit status: 2 before sending any protocol event; stderr: python3: can't open file '/tmp/agenteval-{dir}/agnet.py'"
            )
        };
        let (a, b, c) = (typo("c00-x1"), typo("c01-y2"), typo("c02-z3"));
        let got = broken_agent([&a, &b, &c].map(|d| ended(AgentError, Some(&two), d)), 3).unwrap();
        assert!(got.detail.starts_with("it exited with status 2 before sending any protocol event"), "{got:?}");
        assert!(got.detail.contains("agnet.py"), "the first message is kept: {got:?}");
        assert_eq!(got.fault.as_ref().map(AgentFault::field), Some("agent.command"));
        // A message that reads like a fault is not one: only the field counts.
        let words = "agent exited with exit status: 2 before sending any protocol event";
        let mixed =
            [ended(AgentError, Some(&two), &a), ended(AgentError, None, words), ended(AgentError, Some(&two), &c)];
        assert_eq!(broken_agent(mixed, 3), None);
        // Different statuses are different mistakes; task-specific failures never stop a run.
        let one = AgentFault::ExitedBeforeProtocol(1);
        assert_eq!(broken_agent([ended(AgentError, Some(&two), &a), ended(AgentError, Some(&one), &b)], 2), None);
        let (x, y) = ("agent exited with exit status: 1; stderr: KeyError 'c00'", "... KeyError 'c01'");
        assert_eq!(broken_agent([ended(AgentError, None, x), ended(AgentError, None, y)], 2), None);
        // A setup that fails is the agent's, though its task is infra; other infra is not.
        let setup = AgentFault::SetupFailed;
        let failed =
            ended(InfraFailure, Some(&setup), "installing the agent (agent.setup) failed: `bash setup.sh` exited 100");
        assert_eq!(broken_agent([failed; 3], 3).unwrap().fault.map(|f| f.field()), Some("agent.setup"));
        assert_eq!(broken_agent([ended(InfraFailure, None, "docker is down"); 3], 3), None);
        let traceback = "agent exited with exit status: 1; stderr: Traceback (most recent call last):\n  File \"a.py\", line 3\nPermissionError: [Errno 1] Operation not permitted";
        let net = AgentFault::NetworkRefused;
        let got = broken_agent([ended(AgentError, Some(&net), traceback); 2], 2).unwrap();
        assert!(
            !got.detail.contains('\n') && got.detail.ends_with("… PermissionError: [Errno 1] Operation not permitted"),
            "{got:?}"
        );
        let key = AgentFault::KeyRefused;
        let refused = ended(AgentError, Some(&key), "openai answered HTTP 401 (invalid_api_key) after 1 attempt(s)");
        assert!(broken_agent([refused; 3], 3).unwrap().detail.starts_with("the model provider refused its key"));
    }
}
