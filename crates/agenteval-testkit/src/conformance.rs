//! Shared conformance suites: every `BundleStore`, `RunIndex` and job backend runs the
//! same checks (filesystem and SQLite here, S3 and DynamoDB in the AWS crate).
//!
//! The suites panic with a message naming the broken property, like assertions in a test.

use std::str::FromStr;
use std::sync::Arc;

use chrono::Utc;

use agenteval_core::ErrorKind;
use agenteval_core::model::*;
use agenteval_core::traits::{BundleStore, RunIndex, SecretStore};
use agenteval_core::{JobId, RunId, TaskId};

/// Runs every bundle-store check against `store`.
pub async fn bundle_store_suite(store: Arc<dyn BundleStore>) {
    let run = RunId::new();
    let other = RunId::new();

    assert!(!store.exists(&run, "a.json").await.unwrap(), "fresh store has no files");
    let err = store.get(&run, "a.json").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "get of a missing file is NotFound: {err}");
    assert!(store.list(&run, "").await.unwrap().is_empty(), "list of an empty run");

    // Shared objects: beside the runs, kept across them, never listed as a run.
    let key = format!("judge/{run}.json");
    let err = store.get_shared(&key).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "a missing shared object is NotFound: {err}");
    store.put_shared(&key, b"verdict").await.unwrap();
    store.put_shared(&key, b"verdict 2").await.unwrap();
    assert_eq!(store.get_shared(&key).await.unwrap(), b"verdict 2", "a shared object is replaced whole");
    assert!(store.put_shared("../escape", b"x").await.is_err(), "a shared key stays under the root");

    store.put(&run, "a.json", b"{\"x\":1}").await.unwrap();
    store.put(&run, "tasks/t1/result.json", b"r1").await.unwrap();
    store.put(&run, "tasks/t2/result.json", b"r2").await.unwrap();
    store.put(&other, "tasks/t9/result.json", b"other").await.unwrap();
    let chunked = RunId::new();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    store.put(&chunked, "big.bin", &big).await.unwrap();
    let mut pieces = Vec::new();
    let size = store.read_chunks(&chunked, "big.bin", &mut |p| pieces.extend_from_slice(p)).await.unwrap();
    assert_eq!((size, pieces == big), (big.len() as u64, true), "read_chunks hands over the whole file");
    for (offset, len) in [(0u64, 10u64), (1000, 65_536), (299_990, 100), (300_000, 5), (400_000, 5), (5, 0)] {
        let got = store.read_range(&chunked, "big.bin", offset, len).await.unwrap();
        let (s, e) = ((offset as usize).min(big.len()), ((offset + len) as usize).min(big.len()));
        assert!(got == big[s..e], "read_range({offset}, {len}) gives those bytes: {} of {}", got.len(), e - s);
    }
    let err = store.read_range(&chunked, "nope.bin", 0, 10).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "read_range of a missing file: {err}");
    let err = store.read_chunks(&chunked, "nope.bin", &mut |_| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "read_chunks of a missing file: {err}");
    let runs = store.list_runs().await.unwrap();
    assert!(runs.contains(&run) && runs.contains(&other), "list_runs finds every run with files: {runs:?}");
    // (The shared objects put above are beside the runs, in a folder that is not a run id.)
    assert!(runs.windows(2).all(|w| w[0] < w[1]), "list_runs is sorted: {runs:?}");
    assert!(store.exists(&run, "a.json").await.unwrap());
    assert_eq!(store.get(&run, "a.json").await.unwrap(), b"{\"x\":1}");

    store.put(&run, "a.json", b"replaced").await.unwrap();
    assert_eq!(store.get(&run, "a.json").await.unwrap(), b"replaced", "put overwrites");

    // A staged file published into a task folder, replacing what was there.
    let moved = RunId::new();
    let (staged, published) = ("jobs/j1/attempt-2/tasks/t1/trace.jsonl", "tasks/t1/trace.jsonl");
    store.put(&moved, staged, b"staged").await.unwrap();
    store.put(&moved, published, b"older").await.unwrap();
    store.rename(&moved, staged, published).await.unwrap();
    assert_eq!(store.get(&moved, published).await.unwrap(), b"staged", "rename replaces the target");
    assert!(!store.exists(&moved, staged).await.unwrap(), "rename moves the file");
    assert_eq!(store.list(&moved, "").await.unwrap(), vec![published.to_string()], "nothing else is left");
    let err = store.rename(&moved, staged, published).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "renaming a missing file: {err}");

    // What a worker staged, cleared once its task's pack is published.
    let cleared = RunId::new();
    for f in ["jobs/j1/attempt-1/tasks/t1/trace.jsonl", "jobs/j1/attempt-1/tasks/t1/artifacts/patch.diff"] {
        store.put(&cleared, f, b"x").await.unwrap();
    }
    store.put(&cleared, "jobs/j1/attempt-1/job.json", b"{}").await.unwrap();
    store.delete(&cleared, "jobs/j1/attempt-1/tasks/t1/trace.jsonl").await.unwrap();
    store.delete(&cleared, "jobs/j1/attempt-1/tasks/t1/artifacts/patch.diff").await.unwrap();
    store.delete(&cleared, "jobs/j1/attempt-1/tasks/t1/never-written").await.expect("deleting a missing file is fine");
    assert_eq!(
        store.list(&cleared, "").await.unwrap(),
        vec!["jobs/j1/attempt-1/job.json"],
        "delete removes only its file"
    );

    // A streamed trace turned into its task's pack.
    let (trace, pack) = ("jobs/j1/attempt-1/tasks/t1.trace.jsonl", "jobs/j1/attempt-1/tasks/t1.tar.gz");
    let mut a = store.open_appender(&cleared, trace).await.unwrap();
    a.append(b"{\"step\":0}\n").await.unwrap();
    a.finish().await.unwrap();
    store.replace(&cleared, trace, pack, b"packed").await.unwrap();
    assert_eq!(store.get(&cleared, pack).await.unwrap(), b"packed");
    assert!(!store.exists(&cleared, trace).await.unwrap(), "replace removes the file it replaces");
    let (none, pack2) = ("jobs/j1/attempt-1/tasks/t2.trace.jsonl", "jobs/j1/attempt-1/tasks/t2.tar.gz");
    store.replace(&cleared, none, pack2, b"p2").await.unwrap();
    assert_eq!(store.get(&cleared, pack2).await.unwrap(), b"p2", "replace without a file to replace puts");

    let all = store.list(&run, "").await.unwrap();
    assert_eq!(all, vec!["a.json", "tasks/t1/result.json", "tasks/t2/result.json"], "list is sorted and run-scoped");
    let tasks = store.list(&run, "tasks/").await.unwrap();
    assert_eq!(tasks, vec!["tasks/t1/result.json", "tasks/t2/result.json"], "list honours the prefix");
    assert_eq!(store.list(&run, "tasks/t1/").await.unwrap(), vec!["tasks/t1/result.json"]);
    let sized = store.list_sized(&run, "").await.unwrap();
    assert_eq!(
        sized,
        vec![
            ("a.json".to_string(), Some(8)),
            ("tasks/t1/result.json".to_string(), Some(2)),
            ("tasks/t2/result.json".to_string(), Some(2))
        ],
        "list_sized is list with the sizes the listing gives"
    );
    let mut each = Vec::new();
    store.list_sized_each(&run, "", &mut |p, size| each.push((p, size))).await.unwrap();
    each.sort();
    assert_eq!(each, sized, "list_sized_each hands what list_sized lists");
    let mut under = Vec::new();
    store.list_sized_each(&run, "tasks/t1", &mut |p, _| under.push(p)).await.unwrap();
    assert_eq!(under, vec!["tasks/t1/result.json"], "list_sized_each honours the prefix");

    let empty: Vec<u8> = vec![];
    store.put(&run, "empty.txt", &empty).await.unwrap();
    assert_eq!(store.get(&run, "empty.txt").await.unwrap(), empty, "empty files survive");

    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    store.put(&run, "artifacts/big.bin", &big).await.unwrap();
    assert_eq!(store.get(&run, "artifacts/big.bin").await.unwrap(), big, "large files round-trip");

    for bad in ["../escape", "/abs", "a/../b", "", "a//b"] {
        assert!(store.put(&run, bad, b"x").await.is_err(), "path {bad:?} must be refused");
    }

    let mut app = store.open_appender(&run, "tasks/t1/trace.jsonl").await.unwrap();
    app.append(b"{\"step\":0}\n").await.unwrap();
    app.append(b"{\"step\":1}\n").await.unwrap();
    app.finish().await.unwrap();
    assert_eq!(
        store.get(&run, "tasks/t1/trace.jsonl").await.unwrap(),
        b"{\"step\":0}\n{\"step\":1}\n",
        "appended lines are all there, in order"
    );
    let mut again = store.open_appender(&run, "tasks/t1/trace.jsonl").await.unwrap();
    again.append(b"{\"step\":0}\n").await.unwrap();
    again.finish().await.unwrap();
    assert_eq!(
        store.get(&run, "tasks/t1/trace.jsonl").await.unwrap(),
        b"{\"step\":0}\n",
        "opening an appender starts the file over (a retried attempt replaces its trace)"
    );
    // A writer's file appears whole at `finish`, or not at all.
    store.put(&run, "manifest.json", b"old").await.unwrap();
    if let Some(mut w) = store.open_writer(&run, "manifest.json").await.unwrap() {
        w.append(b"{\"files\": ").await.unwrap();
        assert_eq!(store.get(&run, "manifest.json").await.unwrap(), b"old", "unfinished, the file is as it was");
        w.append(b"{}}").await.unwrap();
        w.finish().await.unwrap();
        assert_eq!(store.get(&run, "manifest.json").await.unwrap(), b"{\"files\": {}}");
        let mut dropped = store.open_writer(&run, "manifest.json").await.unwrap().unwrap();
        dropped.append(b"half").await.unwrap();
        drop(dropped);
        assert_eq!(
            store.get(&run, "manifest.json").await.unwrap(),
            b"{\"files\": {}}",
            "a writer dropped unfinished changes nothing"
        );
        let listed = store.list(&run, "").await.unwrap();
        assert!(
            !listed.iter().any(|p| p.contains("manifest.json.") && p.ends_with(".tmp")),
            "no pieces left: {listed:?}"
        );
    }
    assert!(store.bundle_uri(&run).contains(&run.to_string()), "the bundle uri names the run");
}

/// A running run record, as a controller creates it.
pub fn run_record(run: RunId, name: &str) -> RunRecord {
    let now = Utc::now();
    RunRecord {
        run_id: run,
        name: name.to_string(),
        benchmark: "toy".into(),
        agent: "mock".into(),
        backend: "test".into(),
        status: RunStatus::Running,
        bundle_uri: format!("/tmp/runs/{run}"),
        config_hash: "abc".into(),
        tasks_total: 3,
        created_at: now,
        updated_at: now,
        finished_at: None,
        heartbeat_at: now,
        cancel_requested: false,
        controller: "host:1".into(),
        epoch: 0,
        leased_at: Some(now),
        verdict: None,
        baseline: None,
        set_id: None,
        concurrency: None,
    }
}

fn tid(s: &str) -> TaskId {
    TaskId::from_str(s).unwrap()
}

/// Two handles on one index (two SQLite connections, two DynamoDB clients) race to complete
/// the same tasks from tasks on different threads, released together by a barrier: for every
/// task exactly one completion applies, and the index keeps the winner's result. Run it on a
/// multi-threaded runtime so that the two calls really overlap.
pub async fn run_index_race_suite(a: Arc<dyn RunIndex>, b: Arc<dyn RunIndex>) {
    const TASKS: usize = 24;
    let run = RunId::new();
    let ids: Vec<TaskId> = (0..TASKS).map(|i| tid(&format!("race{i:02}"))).collect();
    a.create_run(&run_record(run, "race"), &ids).await.unwrap();
    let mut wins = [0usize; 2];
    for id in &ids {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let contenders = [(a.clone(), true), (b.clone(), false)].map(|(index, passed)| {
            let (barrier, id) = (barrier.clone(), id.clone());
            tokio::spawn(async move {
                let mut t = TaskTransition::new(id, 1, TaskState::Completed);
                t.passed = Some(passed);
                barrier.wait().await;
                index.record_task(&run, &t).await.unwrap()
            })
        });
        let [ra, rb] = contenders;
        let (ra, rb) = (ra.await.unwrap(), rb.await.unwrap());
        assert!(ra ^ rb, "{id}: exactly one of two racing completions applies (a: {ra}, b: {rb})");
        wins[usize::from(rb)] += 1;
        let kept = b.get_task(&run, id).await.unwrap().unwrap();
        assert_eq!(kept.passed, Some(ra), "{id}: the index keeps the winner's result");
    }
    let counts = a.task_counts(&run).await.unwrap();
    assert_eq!(counts.completed, TASKS as u64, "every raced task completed once");
    assert_eq!(counts.passed, wins[0] as u64, "passed counts the first handle's wins");

    // Two controllers claim the run from the same epoch at once: exactly one gets it.
    for round in 0..8u32 {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let claims = [(a.clone(), "a:1"), (b.clone(), "b:2")].map(|(index, who)| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let claim = RunUpdate {
                    epoch: Some(round + 1),
                    controller: Some(who.into()),
                    if_epoch: Some(round),
                    heartbeat: true,
                    ..Default::default()
                };
                barrier.wait().await;
                index.update_run(&run, &claim).await
            })
        });
        let [ca, cb] = claims;
        let (ca, cb) = (ca.await.unwrap(), cb.await.unwrap());
        assert!(ca.is_ok() ^ cb.is_ok(), "round {round}: exactly one of two racing claims wins ({ca:?}, {cb:?})");
        let loser = ca.as_ref().err().or(cb.as_ref().err()).unwrap();
        assert_eq!(loser.kind(), ErrorKind::Conflict, "round {round}: the loser sees a conflict: {loser}");
        let got = a.get_run(&run).await.unwrap().unwrap();
        assert_eq!(got.epoch, round + 1);
        assert_eq!(got.controller, if ca.is_ok() { "a:1" } else { "b:2" }, "round {round}: the winner holds it");
    }
}

/// Runs every run-index check against `index`.
pub async fn run_index_suite(index: Arc<dyn RunIndex>) {
    let run = RunId::new();
    let tasks = [tid("t1"), tid("t2"), tid("t3")];
    index.create_run(&run_record(run, "first"), &tasks).await.unwrap();
    let got = index.get_run(&run).await.unwrap().expect("created run is found");
    assert_eq!(got.name, "first");
    assert_eq!(got.status, RunStatus::Running);
    assert_eq!(got.tasks_total, 3);
    assert!(index.get_run(&RunId::new()).await.unwrap().is_none(), "unknown run is None");

    let listed = index.list_tasks(&run).await.unwrap();
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|t| t.state == TaskState::Pending && t.attempt == 0));
    assert_eq!(listed[0].task_id, tasks[0], "tasks are listed by id");

    let counts = index.task_counts(&run).await.unwrap();
    assert_eq!((counts.total, counts.pending), (3, 3));

    // An adaptive run's further repetitions join it as pending tasks; the total follows.
    let other = RunId::new();
    index.create_run(&run_record(other, "adaptive"), &[tid("a1"), tid("a2")]).await.unwrap();
    index.add_tasks(&other, &[tid("a1@r1"), tid("a2@r1")], 4).await.unwrap();
    assert_eq!(index.get_run(&other).await.unwrap().unwrap().tasks_total, 4);
    let added = index.list_tasks(&other).await.unwrap();
    assert_eq!(added.iter().map(|t| t.task_id.to_string()).collect::<Vec<_>>(), ["a1", "a1@r1", "a2", "a2@r1"]);
    assert!(added.iter().all(|t| t.state == TaskState::Pending));
    assert_eq!(index.task_counts(&other).await.unwrap().total, 4);
    let unknown = index.add_tasks(&RunId::new(), &[tid("x")], 1).await.unwrap_err();
    assert_eq!(unknown.kind(), agenteval_core::ErrorKind::NotFound);

    // Forward moves apply; backward moves within an attempt do not.
    let job = JobId::numbered(0, 1);
    let q = TaskTransition::new(tid("t1"), 1, TaskState::Queued).job(&job);
    assert!(index.record_task(&run, &q).await.unwrap());
    let r = TaskTransition::new(tid("t1"), 1, TaskState::Running).job(&job);
    assert!(index.record_task(&run, &r).await.unwrap());
    assert!(!index.record_task(&run, &q).await.unwrap(), "running -> queued refused");
    assert!(!index.record_task(&run, &r).await.unwrap(), "same state again refused");
    let t1 = index.get_task(&run, &tid("t1")).await.unwrap().unwrap();
    assert_eq!((t1.state, t1.attempt), (TaskState::Running, 1));
    assert_eq!(t1.job_id.as_ref(), Some(&job));

    // A new attempt may start over; completion is final and counted once.
    let q2 = TaskTransition::new(tid("t1"), 2, TaskState::Queued);
    assert!(index.record_task(&run, &q2).await.unwrap());
    let mut done = TaskTransition::new(tid("t1"), 2, TaskState::Completed);
    done.passed = Some(true);
    done.cost_usd = 0.25;
    done.tokens = 100;
    done.terminated_by = Some(TerminatedBy::Completed);
    assert!(index.record_task(&run, &done).await.unwrap());
    let mut late = TaskTransition::new(tid("t1"), 3, TaskState::Completed);
    late.passed = Some(false);
    assert!(!index.record_task(&run, &late).await.unwrap(), "a completed task never changes");
    let stale = TaskTransition::new(tid("t1"), 1, TaskState::Completed);
    assert!(!index.record_task(&run, &stale).await.unwrap(), "an older attempt cannot complete");
    let t1 = index.get_task(&run, &tid("t1")).await.unwrap().unwrap();
    assert_eq!(t1.state, TaskState::Completed);
    assert_eq!(t1.passed, Some(true));
    assert_eq!(t1.terminated_by, Some(TerminatedBy::Completed));
    assert!((t1.cost_usd - 0.25).abs() < 1e-9);

    // Racing completions of the same attempt: exactly one wins.
    let mut a = TaskTransition::new(tid("t2"), 1, TaskState::Completed);
    a.passed = Some(true);
    a.terminated_by = Some(TerminatedBy::Completed);
    // Both completions had an unpriced model call: whichever wins, t2's cost is unknown.
    a.cost_unknown = true;
    let mut b = a.clone();
    b.passed = Some(false);
    b.terminated_by = Some(TerminatedBy::LimitTokens);
    let (ra, rb) = tokio::join!(index.record_task(&run, &a), index.record_task(&run, &b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra ^ rb, "exactly one of two completions of one attempt applies");

    let mut f = TaskTransition::new(tid("t3"), 1, TaskState::Failed);
    f.terminated_by = Some(TerminatedBy::InfraFailure);
    f.detail = Some("worker killed".into());
    assert!(index.record_task(&run, &f).await.unwrap());

    // What a resume reads: the completed ids in order (not the given-up t3) and the highest
    // attempt any task reached, the same as the full records say.
    let done = index.completed_tasks(&run).await.unwrap();
    assert_eq!(done.ids, vec![tid("t1"), tid("t2")]);
    assert_eq!(done.max_attempt, 2);
    let records = index.list_tasks(&run).await.unwrap();
    assert_eq!(done.max_attempt, records.iter().map(|t| t.attempt).max().unwrap());

    let counts = index.task_counts(&run).await.unwrap();
    assert_eq!(counts.total, 3);
    assert_eq!(counts.completed, 2);
    assert_eq!(counts.given_up, 1);
    assert_eq!(counts.pending + counts.queued + counts.running, 0);
    assert_eq!(counts.finished(), 3);
    // t1 passed; t2 passed if the first of its two completions (passed) applied, else it
    // errored (a limit); t3 was given up: infra. The outcomes add up to the finished tasks.
    assert_eq!(counts.passed, 1 + u64::from(ra), "passed counts completed tasks that passed");
    assert_eq!(counts.errored, u64::from(rb), "a limit is an error, not a failure");
    assert_eq!((counts.failed, counts.infra), (0, 1));
    assert_eq!(counts.passed + counts.failed + counts.errored + counts.infra, counts.finished());
    assert!((counts.cost_usd - 0.25).abs() < 1e-9, "cost sums completed tasks");
    assert_eq!(counts.cost_unknown, 1, "a task whose cost is unknown is counted as such, never as $0");
    assert!(index.get_task(&run, &tid("t2")).await.unwrap().unwrap().cost_unknown);
    // What the run's calls spent at the wire: additions from several workers at once all count.
    assert_eq!(index.spend(&run).await.unwrap(), 0.0);
    let (a, b, c, d) = tokio::join!(
        index.add_spend(&run, 0.25),
        index.add_spend(&run, 0.25),
        index.add_spend(&run, 0.25),
        index.add_spend(&run, 0.25)
    );
    let totals = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    assert!((totals.iter().copied().fold(0.0, f64::max) - 1.0).abs() < 1e-9, "{totals:?}");
    assert!((index.spend(&run).await.unwrap() - 1.0).abs() < 1e-9);
    assert!((index.add_spend(&run, f64::NAN).await.unwrap() - 1.0).abs() < 1e-9, "a NaN adds nothing");
    // What calls in flight hold, apart from the spend: held by several workers at once, and
    // given back.
    let (a, b) = tokio::join!(index.add_held(&run, 0.25), index.add_held(&run, 0.5));
    let held = a.unwrap().1.max(b.unwrap().1);
    assert!((held - 0.75).abs() < 1e-9, "{held}");
    let (spent, held) = index.add_held(&run, -0.25).await.unwrap();
    assert!((spent - 1.0).abs() < 1e-9 && (held - 0.5).abs() < 1e-9, "{spent} {held}");
    let (_, held) = index.add_held(&run, -0.5).await.unwrap();
    assert!(held.abs() < 1e-9, "{held}");
    assert!((index.spend(&run).await.unwrap() - 1.0).abs() < 1e-9, "holding is not spending");
    assert_eq!(index.add_held(&RunId::new(), 1.0).await.unwrap_err().kind(), ErrorKind::NotFound);
    let unknown = index.add_spend(&RunId::new(), 1.0).await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
    // The run's calls, apart from the budget's spend: counted as they arrive, their costs as
    // they end, from several workers at once.
    assert_eq!(index.calls(&run).await.unwrap(), (0, 0.0));
    let (a, b, c) =
        tokio::join!(index.add_calls(&run, 1, 0.0), index.add_calls(&run, 1, 0.0), index.add_calls(&run, 0, 0.5));
    for r in [a, b, c] {
        r.unwrap();
    }
    index.add_calls(&run, 0, f64::NAN).await.unwrap();
    let (n, usd) = index.calls(&run).await.unwrap();
    assert_eq!(n, 2, "two calls counted");
    assert!((usd - 0.5).abs() < 1e-9, "their cost, a NaN adding nothing: {usd}");
    assert!((index.spend(&run).await.unwrap() - 1.0).abs() < 1e-9, "the budget's spend is apart");
    assert_eq!(index.add_calls(&RunId::new(), 1, 0.0).await.unwrap_err().kind(), ErrorKind::NotFound);
    // Rate-limited calls, counted by several workers at once, apart from the calls.
    assert_eq!(index.throttled(&run).await.unwrap(), 0);
    let (a, b) = tokio::join!(index.add_throttled(&run, 1), index.add_throttled(&run, 2));
    a.unwrap();
    b.unwrap();
    assert_eq!(index.throttled(&run).await.unwrap(), 3);
    assert_eq!(index.calls(&run).await.unwrap().0, 2, "rate-limited calls are not calls made");
    assert_eq!(index.add_throttled(&RunId::new(), 1).await.unwrap_err().kind(), ErrorKind::NotFound);
    // The controller's concurrency, kept with the run and left alone by other updates.
    let concurrency = Concurrency { limit: 3, max: 8, why: Some("the provider's 429s".into()) };
    index.update_run(&run, &RunUpdate { concurrency: Some(concurrency.clone()), ..Default::default() }).await.unwrap();
    index.update_run(&run, &RunUpdate { heartbeat: true, ..Default::default() }).await.unwrap();
    assert_eq!(index.get_run(&run).await.unwrap().unwrap().concurrency, Some(concurrency));
    assert!(!index.get_task(&run, &tid("t1")).await.unwrap().unwrap().cost_unknown);
    assert_eq!(counts.tokens, 100);
    // A rate limit booked by several workers at once: every booking counts, each after the
    // last, and a limit left behind is brought up to now before it is booked.
    let (a, b, c, d) = tokio::join!(
        index.book_rate(&run, "gpt:requests", 1_000, 100),
        index.book_rate(&run, "gpt:requests", 1_000, 100),
        index.book_rate(&run, "gpt:requests", 1_000, 100),
        index.book_rate(&run, "gpt:requests", 1_000, 100)
    );
    let mut booked = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    booked.sort_unstable();
    assert_eq!(booked, [1_100, 1_200, 1_300, 1_400], "each booking after the last");
    assert_eq!(index.book_rate(&run, "gpt:requests", 5_000, 100).await.unwrap(), 5_100, "an idle limit starts at now");
    assert_eq!(index.book_rate(&run, "gpt:tokens", 5_000, 7).await.unwrap(), 5_007, "each key its own");
    let unknown = index.book_rate(&RunId::new(), "gpt:requests", 1, 1).await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound);

    // Batches apply each transition by the same rules.
    let batch = [
        TaskTransition::new(tid("t3"), 2, TaskState::Queued),
        TaskTransition::new(tid("t1"), 9, TaskState::Queued),
        TaskTransition::new(tid("t3"), 2, TaskState::Running),
    ];
    assert_eq!(index.record_tasks(&run, &batch).await.unwrap(), vec![true, false, true], "batch follows the rules");
    let mut f2 = TaskTransition::new(tid("t3"), 2, TaskState::Failed);
    f2.terminated_by = Some(TerminatedBy::InfraFailure);
    assert!(index.record_task(&run, &f2).await.unwrap());

    let unknown = TaskTransition::new(tid("nope"), 1, TaskState::Queued);
    let err = index.record_task(&run, &unknown).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "unknown task: {err}");

    // Run updates.
    let upd = RunUpdate { cancel_requested: Some(true), heartbeat: true, ..Default::default() };
    index.update_run(&run, &upd).await.unwrap();
    let got = index.get_run(&run).await.unwrap().unwrap();
    assert!(got.cancel_requested);
    assert!(got.heartbeat_at >= got.created_at);
    let fin = RunUpdate {
        status: Some(RunStatus::Interrupted),
        finished_at: Some(Utc::now()),
        epoch: Some(1),
        controller: Some("other:2".into()),
        ..Default::default()
    };
    index.update_run(&run, &fin).await.unwrap();
    let got = index.get_run(&run).await.unwrap().unwrap();
    assert_eq!(got.status, RunStatus::Interrupted);
    assert!(got.finished_at.is_some());
    assert_eq!(got.epoch, 1);
    assert_eq!(got.controller, "other:2");
    let missing = index.update_run(&RunId::new(), &upd).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);

    // The lease: an update conditional on the epoch applies only while the epoch holds.
    let beat = RunUpdate { heartbeat: true, if_epoch: Some(1), ..Default::default() };
    index.update_run(&run, &beat).await.expect("the holder's heartbeat applies");
    let claim =
        RunUpdate { epoch: Some(2), controller: Some("third:3".into()), if_epoch: Some(1), ..Default::default() };
    let before_claim = index.get_run(&run).await.unwrap().unwrap().leased_at.expect("a lease start is recorded");
    std::thread::sleep(std::time::Duration::from_millis(2));
    index.update_run(&run, &claim).await.expect("a claim from the current epoch applies");
    let claimed_at = index.get_run(&run).await.unwrap().unwrap().leased_at.unwrap();
    assert!(claimed_at > before_claim, "a new controller starts a new lease ({before_claim} -> {claimed_at})");
    let stale = index.update_run(&run, &beat).await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::Conflict, "the old holder's heartbeat conflicts: {stale}");
    assert!(stale.to_string().contains("third:3"), "a lost lease names the new holder: {stale}");
    let got = index.get_run(&run).await.unwrap().unwrap();
    assert_eq!((got.epoch, got.controller.as_str()), (2, "third:3"), "a refused update changes nothing");
    assert_eq!(got.leased_at, Some(claimed_at), "a heartbeat does not move the lease start");
    let missing = index.update_run(&RunId::new(), &beat).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "a conditional update of an unknown run: {missing}");

    // Verdicts and baselines.
    for v in RunVerdict::ALL {
        index.update_run(&run, &RunUpdate { verdict: Some(v), ..Default::default() }).await.unwrap();
        assert_eq!(index.get_run(&run).await.unwrap().unwrap().verdict, Some(v), "every verdict reads back");
    }
    let against = RunId::new();
    let judged = RunUpdate { verdict: Some(RunVerdict::Fail), baseline: Some(against), ..Default::default() };
    index.update_run(&run, &judged).await.unwrap();
    let got = index.get_run(&run).await.unwrap().unwrap();
    assert_eq!((got.verdict, got.baseline), (Some(RunVerdict::Fail), Some(against)), "a verdict keeps its baseline");
    index.update_run(&run, &RunUpdate { heartbeat: true, ..Default::default() }).await.unwrap();
    assert_eq!(index.get_run(&run).await.unwrap().unwrap().baseline, Some(against), "other updates keep it");
    index.update_run(&run, &RunUpdate { verdict: Some(RunVerdict::Pass), ..Default::default() }).await.unwrap();
    let got = index.get_run(&run).await.unwrap().unwrap();
    assert_eq!((got.verdict, got.baseline), (Some(RunVerdict::Pass), None), "a verdict judged alone has none");
    // A run created judged (an index rebuilt from bundles) keeps both.
    let rebuilt =
        RunRecord { verdict: Some(RunVerdict::Fail), baseline: Some(against), ..run_record(RunId::new(), "rebuilt") };
    index.create_run(&rebuilt, &[]).await.unwrap();
    let got = index.get_run(&rebuilt.run_id).await.unwrap().unwrap();
    assert_eq!((got.verdict, got.baseline), (Some(RunVerdict::Fail), Some(against)), "created judged");
    // A run of a set (`submit --matrix`) keeps its set's id, and listing shows it.
    let member = RunRecord { set_id: Some(format!("set-{run}")), ..run_record(RunId::new(), "member") };
    index.create_run(&member, &[]).await.unwrap();
    assert_eq!(index.get_run(&member.run_id).await.unwrap().unwrap().set_id, member.set_id, "a set's id is kept");
    let listed = index.list_runs(1000).await.unwrap();
    let found = listed.iter().find(|r| r.run_id == member.run_id).expect("listed");
    assert_eq!(found.set_id, member.set_id, "listing shows the set");
    assert_eq!(index.get_run(&run).await.unwrap().unwrap().set_id, None, "a run alone has no set");
    index.update_run(&run, &RunUpdate { verdict: Some(RunVerdict::Fail), ..Default::default() }).await.unwrap();
    let name = format!("nightly-{run}");
    assert_eq!(index.get_baseline(&name).await.unwrap(), None, "no pin yet");
    index.set_baseline(&name, &run).await.unwrap();
    assert_eq!(index.get_baseline(&name).await.unwrap(), Some(run));
    let later = RunId::new();
    index.set_baseline(&name, &later).await.unwrap();
    assert_eq!(index.get_baseline(&name).await.unwrap(), Some(later), "a new pin replaces the old");
    assert!(index.list_runs(1000).await.unwrap().iter().all(|r| r.run_id != later), "a pin is not a run");
    assert_eq!(index.unset_baseline(&name).await.unwrap(), Some(later), "unpinning says what was pinned");
    assert_eq!(index.get_baseline(&name).await.unwrap(), None, "and leaves no pin");
    assert_eq!(index.unset_baseline(&name).await.unwrap(), None, "unpinning twice is no error");

    // Jobs.
    let handle = JobHandle { job_id: job.clone(), attempt: 1, native_id: "pid:42".into() };
    let mut jr = JobRecord {
        run_id: run,
        handle: handle.clone(),
        status: JobState::Running,
        task_count: 1,
        updated_at: Utc::now(),
    };
    index.record_job(&jr).await.unwrap();
    jr.status = JobState::Succeeded;
    index.record_job(&jr).await.unwrap();
    let jobs = index.list_jobs(&run).await.unwrap();
    assert_eq!(jobs.len(), 1, "recording a job again updates it");
    assert_eq!(jobs[0].status, JobState::Succeeded);
    assert_eq!(jobs[0].handle, handle);

    // Listing runs: newest first.
    std::thread::sleep(std::time::Duration::from_millis(3));
    let newer = RunId::new();
    index.create_run(&run_record(newer, "second"), &[tid("x")]).await.unwrap();
    let runs = index.list_runs(100).await.unwrap();
    let pos_old = runs.iter().position(|r| r.run_id == run).expect("old run listed");
    let pos_new = runs.iter().position(|r| r.run_id == newer).expect("new run listed");
    assert!(pos_new < pos_old, "newest first");
    assert_eq!(index.list_runs(1).await.unwrap().len(), 1, "limit honoured");

    // A large run is created in one go.
    let big = RunId::new();
    let many: Vec<TaskId> = (0..2_500).map(|i| tid(&format!("task-{i:05}"))).collect();
    let mut rec = run_record(big, "big");
    rec.tasks_total = many.len() as u64;
    index.create_run(&rec, &many).await.unwrap();
    assert_eq!(index.task_counts(&big).await.unwrap().pending, 2_500);
    // Reading many tasks at once: in the order asked, past one call's worth of keys, with the
    // unknown ones as `None`.
    let mut asked: Vec<TaskId> = many.iter().rev().step_by(7).cloned().collect();
    asked.insert(3, tid("not-a-task"));
    let got = index.get_tasks(&big, &asked).await.unwrap();
    assert_eq!(got.len(), asked.len());
    for (want, got) in asked.iter().zip(&got) {
        match got {
            Some(t) => assert_eq!((&t.task_id, t.state), (want, TaskState::Pending)),
            None => assert_eq!(want.as_str(), "not-a-task"),
        }
    }
    assert!(asked.len() > 300, "more than three batches of keys");
}

/// The environment variables the suite's stand-in worker reads from its job's environment.
pub const STAND_IN_EXIT: &str = "AGENTEVAL_CONFORMANCE_EXIT";
pub const STAND_IN_SLEEP: &str = "AGENTEVAL_CONFORMANCE_SLEEP";

/// Writes the program a job backend runs in [`job_backend_suite`] in place of `agenteval
/// worker` (it takes the same arguments and ignores them), and returns its path: it waits
/// `AGENTEVAL_CONFORMANCE_SLEEP` seconds, then exits with `AGENTEVAL_CONFORMANCE_EXIT`, both
/// taken from the job's environment, and exits with the worker's "cancelled" code on SIGTERM,
/// as the worker does.
pub fn stand_in_worker(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("stand-in-worker");
    let script = format!(
        "#!/bin/sh\ntrap 'exit {cancelled}' TERM\nsleep \"${{{STAND_IN_SLEEP}:-0}}\" &\nwait $!\nexit \"${{{STAND_IN_EXIT}:-0}}\"\n",
        cancelled = agenteval_core::traits::worker_exit::CANCELLED
    );
    std::fs::write(&path, script).expect("writing the stand-in worker");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("making it executable");
    path
}

/// A job of run `run` whose stand-in worker sleeps `sleep` seconds and exits with `exit`.
fn stand_in_job(run: RunId, bundle_uri: &str, n: u32, exit: i32, sleep: u32) -> JobSpec {
    JobSpec {
        schema_version: agenteval_core::SCHEMA_VERSION.into(),
        run_id: run,
        job_id: JobId::numbered(0, n as usize),
        attempt: 1,
        tasks: vec![],
        epoch: 0,
        bundle_uri: bundle_uri.to_string(),
        index_uri: "unused".into(),
        env: [(STAND_IN_EXIT.to_string(), exit.to_string()), (STAND_IN_SLEEP.to_string(), sleep.to_string())]
            .into_iter()
            .collect(),
        image: None,
        ledger: None,
        tool_secrets: Default::default(),
    }
}

/// Polls until every job has a terminal status, or `timeout`; returns the statuses.
async fn until_terminal(
    backend: &dyn agenteval_core::traits::CloudBackend,
    handles: &[JobHandle],
    timeout: std::time::Duration,
) -> Vec<JobStatus> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let st = backend.job_status(handles).await.expect("job_status");
        assert_eq!(st.len(), handles.len(), "job_status answers one status per handle asked");
        if st.iter().all(JobStatus::is_terminal) || tokio::time::Instant::now() >= deadline {
            return st;
        }
        backend.wait_for_change(std::time::Duration::from_millis(200)).await;
    }
}

/// What the platform under a job backend reports, where a test platform reports less than the
/// real one: the AWS emulator records every ECS container's exit code as 0 (its ECS runs
/// nothing; the Fargate stand-in can only put the code in the stop reason), so on it the
/// suite cannot see what an exit code maps to. The ECS backend's reading of real DescribeTasks
/// answers is unit-tested beside it.
#[derive(Debug, Clone, Copy)]
pub struct Platform {
    pub reports_exit_codes: bool,
}

/// Runs every job-backend check against `backend`, whose workers must be the program
/// [`stand_in_worker`] wrote (the local backend's `exe`, the Fargate stand-in's binary). Jobs
/// belong to `run`, whose bundle is at `bundle_uri`; `timeout` bounds each wait (a cloud
/// backend polls).
pub async fn job_backend_suite(
    backend: Arc<dyn agenteval_core::traits::CloudBackend>,
    run: RunId,
    bundle_uri: &str,
    timeout: std::time::Duration,
    platform: Platform,
) {
    use agenteval_core::traits::worker_exit;
    let job = |n, exit, sleep| stand_in_job(run, bundle_uri, n, exit, sleep);
    assert!(!backend.id().is_empty(), "a backend names itself");

    // Every exit of a worker reads the same on every backend, and statuses come in the order
    // asked, whatever order the jobs end in.
    let exits = [worker_exit::OK, worker_exit::BAD_JOB, worker_exit::FAILED, 7, worker_exit::CANCELLED];
    let mut handles = Vec::new();
    for (n, code) in exits.iter().enumerate() {
        let h = backend.submit_job(&job(n as u32, *code, (exits.len() - n) as u32 % 2)).await.expect("submit_job");
        assert_eq!((&h.job_id, h.attempt), (&JobId::numbered(0, n), 1), "the handle names its job and attempt");
        handles.push(h);
    }
    let st = until_terminal(backend.as_ref(), &handles, timeout).await;
    assert!(st.iter().all(JobStatus::is_terminal), "every job ended within {timeout:?}: {st:?}");
    assert_eq!(st[0], JobStatus::Succeeded, "exit 0 is a job that succeeded");
    if platform.reports_exit_codes {
        exits_read_as_the_worker_meant(&st);
    }
    let reversed: Vec<JobHandle> = handles.iter().rev().cloned().collect();
    let again = backend.job_status(&reversed).await.expect("job_status");
    assert_eq!(again, st.into_iter().rev().collect::<Vec<_>>(), "statuses come in the order asked, and stay");
    stops_and_waits(backend.as_ref(), &job(10, worker_exit::OK, 120), &handles[0], timeout, platform).await;
}

/// The statuses of jobs whose workers exited 0, 2, 1, 7 and 3.
fn exits_read_as_the_worker_meant(st: &[JobStatus]) {
    assert!(
        matches!(st[1], JobStatus::Failed { exit_code: Some(2), infrastructure: false, .. }),
        "exit 2 is a job that cannot run as specified, not worth retrying: {:?}",
        st[1]
    );
    for (i, code) in [(2, 1), (3, 7)] {
        assert!(
            matches!(&st[i], JobStatus::Failed { exit_code: Some(c), infrastructure: true, .. } if *c == code),
            "exit {code} is an infrastructure failure naming its code: {:?}",
            st[i]
        );
    }
    assert_eq!(st[4], JobStatus::Cancelled, "exit 3 is a worker that stopped because it was asked to");
}

/// A running job can be stopped; stopping it again, or stopping a job that ended (`ended`), is
/// no error; waiting for a change keeps to its timeout.
async fn stops_and_waits(
    backend: &dyn agenteval_core::traits::CloudBackend,
    long: &JobSpec,
    ended: &JobHandle,
    timeout: std::time::Duration,
    platform: Platform,
) {
    let long = backend.submit_job(long).await.expect("submit_job");
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let st = backend.job_status(std::slice::from_ref(&long)).await.expect("job_status").remove(0);
        assert!(!st.is_terminal(), "a job that sleeps two minutes has not ended: {st:?}");
        if st == JobStatus::Running || tokio::time::Instant::now() >= deadline {
            assert_eq!(st, JobStatus::Running, "a started job is reported running");
            break;
        }
        backend.wait_for_change(std::time::Duration::from_millis(200)).await;
    }
    backend.cancel_job(&long, "conformance").await.expect("cancel_job");
    let st = until_terminal(backend, std::slice::from_ref(&long), timeout).await.remove(0);
    assert!(st.is_terminal(), "a cancelled job ends: {st:?}");
    if platform.reports_exit_codes {
        assert_ne!(st, JobStatus::Succeeded, "a cancelled job does not end as a success");
    }
    backend.cancel_job(&long, "again").await.expect("stopping a stopped job is not an error");
    backend.cancel_job(ended, "ended").await.expect("stopping a job that ended is not an error");

    // Waiting for a change never outlasts its timeout by much.
    let started = tokio::time::Instant::now();
    backend.wait_for_change(std::time::Duration::from_millis(50)).await;
    assert!(started.elapsed() < timeout, "wait_for_change returns by its timeout");
}

/// The `Environment` suite, for every implementation (`workspace`, `docker`): `spec` names a
/// starting folder holding `seed.txt` (`hello`). Commands, exit codes, both streams, a timeout,
/// the output bound, files in and out (and a cap), a program spoken to over its input and output
/// (where the environment starts one: `starts_programs`), an idempotent teardown, and the sweep by run.
pub async fn environment_suite(
    env: &dyn agenteval_core::traits::Environment,
    spec: &agenteval_core::environment::EnvSpec,
    starts_programs: bool,
) {
    use agenteval_core::environment::ExecRequest;
    use std::time::Duration;
    let run = RunId::new();
    let task: TaskSpec = serde_json::from_value(serde_json::json!({"id": "conformance", "input": ""})).unwrap();
    let h = env.prepare(&run, &task, 1, spec).await.expect("prepare");
    assert_eq!(h.kind, env.kind());
    let cmd = |c: &str| ExecRequest::new(c, Duration::from_secs(30));
    let out = env.exec(&h, &cmd("cat seed.txt; echo to-stderr >&2; exit 3")).await.unwrap();
    assert_eq!((out.exit_code, out.stdout.trim(), out.stderr.trim()), (Some(3), "hello", "to-stderr"), "{out:?}");
    assert!(!out.timed_out);
    let slow = env.exec(&h, &ExecRequest::new("sleep 30", Duration::from_millis(500))).await.unwrap();
    assert!(slow.timed_out && slow.exit_code.is_none(), "a command past its timeout: {slow:?}");
    let big = env
        .exec(&h, &ExecRequest { max_output_bytes: 100, ..cmd("head -c 5000 /dev/zero | tr '\\0' x") })
        .await
        .unwrap();
    assert_eq!((big.stdout.matches('x').count(), big.dropped_bytes), (100, 4900), "output is bounded and counted");
    // Files in: a file to a path, a folder's contents into a folder.
    let host = tempfile_dir();
    std::fs::write(host.join("one.txt"), "one").unwrap();
    std::fs::create_dir_all(host.join("tree/sub")).unwrap();
    std::fs::write(host.join("tree/sub/two.txt"), "two").unwrap();
    let at = |p: &str| format!("{}/{p}", h.workdir.trim_end_matches('/'));
    env.copy_in(&h, &host.join("one.txt"), &at("in/one.txt")).await.unwrap();
    env.copy_in(&h, &host.join("tree"), &at("in/tree")).await.unwrap();
    let read = env.exec(&h, &cmd("cat in/one.txt in/tree/sub/two.txt")).await.unwrap();
    assert_eq!(read.stdout, "onetwo", "{read:?}");
    // Files out, within a cap.
    env.exec(&h, &cmd("mkdir -p out && printf data > out/a.txt")).await.unwrap();
    let back = tempfile_dir();
    env.copy_out(&h, &at("out"), &back, 1 << 20).await.unwrap();
    let found: Vec<String> = walk(&back).into_iter().filter_map(|p| std::fs::read_to_string(p).ok()).collect();
    assert_eq!(found, ["data"], "the folder came out");
    let capped = tempfile_dir();
    assert!(env.copy_out(&h, &at("out"), &capped, 2).await.is_err(), "past its cap a copy is refused");
    assert!(env.copy_out(&h, &at("missing"), &capped, 1 << 20).await.is_err(), "a missing path is an error");
    // A program with its input and output open to this machine, where the environment starts
    // one (a task's `stdio` MCP server): what it is sent reaches it, and what it says comes back.
    let stdio = env.open_stdio(&h, &["cat".to_string()]).await;
    assert_eq!(stdio.is_some(), starts_programs, "whether it starts a program with its input and output open");
    if let Some((mut output, mut input)) = stdio {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        input.write_all(b"ping\n").await.unwrap();
        input.flush().await.unwrap();
        let mut said = [0u8; 5];
        let heard = tokio::time::timeout(Duration::from_secs(20), output.read_exact(&mut said)).await;
        assert!(matches!(heard, Ok(Ok(5))), "the program's answer came back: {heard:?}");
        assert_eq!(&said, b"ping\n");
    }
    // Teardown twice; a second environment left behind is found by its run.
    env.teardown(&h).await.unwrap();
    env.teardown(&h).await.expect("a second teardown is harmless");
    let left = env.prepare(&run, &task, 2, spec).await.unwrap();
    // An environment that is the worker's own container ends with it: nothing is left to sweep.
    let expected = usize::from(env.outlives_its_worker());
    assert_eq!(env.sweep(&run).await.unwrap(), expected, "the sweep finds what a killed worker left");
    assert_eq!(env.sweep(&run).await.unwrap(), 0, "and nothing after");
    env.teardown(&left).await.expect("tearing down a swept environment is harmless");
}

fn tempfile_dir() -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("agenteval-conformance-{}", RunId::new()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// A `SecretStore` holding `present` (name, value pairs the caller stored its own way: an
/// environment or file locally, Secrets Manager on AWS) and not `absent`: each present secret
/// reads back whole, again the same, and shows its value to no `Debug` or error; an absent one
/// is `NotFound` naming it, never an empty secret.
pub async fn secret_store_suite(store: Arc<dyn SecretStore>, present: &[(&str, &str)], absent: &str) {
    for (name, value) in present {
        let s = store.fetch(name).await.unwrap_or_else(|e| panic!("fetching {name}: {e}"));
        assert_eq!(s.expose(), *value, "{name} reads back whole");
        assert_eq!(store.fetch(name).await.unwrap().expose(), *value, "{name} reads the same twice");
        let shown = format!("{s:?}");
        assert!(!shown.contains(value), "Debug of a secret shows its value: {shown}");
    }
    let e = match store.fetch(absent).await {
        Ok(s) => panic!("an absent secret read as {} bytes", s.expose().len()),
        Err(e) => e,
    };
    assert_eq!(e.kind(), agenteval_core::ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains(absent), "the error names the secret: {e}");
    for (_, value) in present {
        assert!(!e.to_string().contains(value), "an error shows a secret's value: {e}");
    }
}
