//! One case per check of `validate`: each breaks exactly one thing in a valid sealed bundle and
//! asserts the problem named. Cases about agreement between files re-write the manifest after
//! the break, so that the checksums hold and only the check under test can catch it.

use std::path::Path;

use agenteval_core::format::Metadata;
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::traits::BundleStore;
use agenteval_core::{RunId, SCHEMA_VERSION, TaskId};
use agenteval_local::FsBundleStore;
use chrono::Utc;
use serde_json::{Value, json};

use super::validate;
use crate::bundle::{TaskTable, seal, to_json_bytes, write_manifest, write_task_outcome};

const TASKS: [&str; 3] = ["t1", "t2", "t3"];

/// A sealed, complete, valid bundle of three tasks (t3 fails its one evaluator), each task a
/// folder as bundles before schema 1.1 have them: most cases check that older layout.
async fn valid_bundle(root: &Path) -> (FsBundleStore, RunId) {
    valid_bundle_of(root, false).await
}

/// [`valid_bundle`] with each task in its pack, as agenteval writes them now.
async fn valid_packed_bundle(root: &Path) -> (FsBundleStore, RunId) {
    valid_bundle_of(root, true).await
}

async fn valid_bundle_of(root: &Path, packed: bool) -> (FsBundleStore, RunId) {
    let (store, run, meta, table) = finished_bundle_of(root, packed).await;
    let shared: std::sync::Arc<dyn BundleStore> = std::sync::Arc::new(store.clone());
    seal(shared, &meta, table.ids()).await.unwrap();
    store.put(&run, layout::SPANS, b"").await.unwrap();
    write_manifest(&store, &run, &Default::default()).await.unwrap();
    (store, run)
}

/// The bundle of a run whose three tasks are done, each by its own job's first attempt, whose
/// worker wrote through a `RecordingStore` and left its manifest part: ready to seal.
async fn finished_bundle(root: &Path) -> (FsBundleStore, RunId, Metadata, TaskTable) {
    finished_bundle_of(root, false).await
}

/// A task folder as a worker before schema 1.1 wrote it: `result.json` last.
async fn write_folder_task(store: &dyn BundleStore, result: &TaskResult, log: &str, spans: &[u8], trace: &[u8]) {
    let (run, id) = (&result.run_id, &result.task_id);
    store.put(run, &layout::task_file(id, layout::TASK_TRACE), trace).await.unwrap();
    store.put(run, &layout::task_file(id, layout::TASK_SPANS), spans).await.unwrap();
    store.put(run, &layout::task_file(id, layout::TASK_SCORES), &to_json_bytes(&result.scores)).await.unwrap();
    store.put(run, &layout::task_file(id, layout::TASK_LOG), log.as_bytes()).await.unwrap();
    store.put(run, &layout::task_file(id, layout::TASK_RESULT), &to_json_bytes(result)).await.unwrap();
}

async fn finished_bundle_of(root: &Path, packed: bool) -> (FsBundleStore, RunId, Metadata, TaskTable) {
    let store = FsBundleStore::new(root);
    let run = RunId::new();
    let mut table = TaskTable::default();
    for t in TASKS {
        table
            .push(&TaskSpec {
                id: t.parse().unwrap(),
                input: json!("q"),
                expected: None,
                tags: vec![],
                evaluators: vec![],
                metadata: Value::Null,
                environment: None,
                content: None,
                tests: None,
                solution: None,
                steps: None,
                user: None,
            })
            .unwrap();
    }
    store.put(&run, layout::TASKS, &table.jsonl()).await.unwrap();
    store.put(&run, layout::CONFIG, b"{}\n").await.unwrap();
    let now = Utc::now();
    let mut meta = agenteval_testkit::fixtures::metadata(run, "v", "toy", TASKS.len() as u64);
    meta.sealed = false;
    store.put(&run, layout::METADATA, &to_json_bytes(&meta)).await.unwrap();
    for (i, t) in TASKS.iter().enumerate() {
        let id: TaskId = t.parse().unwrap();
        let passed = i < 2;
        let event = TraceEvent {
            run_id: run,
            task_id: id.clone(),
            step: 0,
            attempt: 1,
            timestamp: now,
            kind: EventKind::AgentTerminal,
            payload: json!({"final_answer": "x"}),
            cost_usd: 0.5,
            input_tokens: 3,
            output_tokens: 4,
        };
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        let worker = crate::bundle::RecordingStore::new(std::sync::Arc::new(store.clone()));
        let spans = format!(
            "{{\"trace_id\":\"{0}\",\"span_id\":\"{1}\",\"name\":\"eval.task\"}}\n{{\"trace_id\":\"{0}\",\"span_id\":\"{2}\",\"name\":\"agent.execute\"}}\n",
            "a".repeat(32),
            "b".repeat(16),
            "c".repeat(16)
        );
        let result = TaskResult {
            image: None,
            changed_outside: 0,
            setup_seconds: None,
            suspect: vec![],
            tampered: vec![],
            without_tampering: None,
            rewards: None,
            unscored: false,
            models: Default::default(),
            provider_wait_seconds: 0.0,
            schema_version: SCHEMA_VERSION.into(),
            run_id: run,
            task_id: id,
            job_id: agenteval_core::JobId::numbered(0, i + 1),
            attempt: 1,
            passed,
            agent: AgentResult {
                success: true,
                final_answer: Some(json!("x")),
                error: None,
                total_cost_usd: 0.5,
                total_tokens: 7,
                wall_seconds: 0.1,
                terminated_by: TerminatedBy::Completed,
                steps: 1,
                cost_unknown: false,
                fault: None,
            },
            scores: vec![EvaluatorScore {
                optional: false,
                tokens: 0,
                evaluator_id: "e".into(),
                kind: "exact_match".into(),
                score: if passed { 1.0 } else { 0.0 },
                passed,
                reason: "r".into(),
                citations: vec![],
                cost_usd: 0.0,
                error: None,
            }],
            started_at: now,
            finished_at: now,
            steps: vec![],
            harbor_would_skip: None,
            roles: Default::default(),
        };
        if packed {
            write_task_outcome(&worker, &result, "log\n", Some(spans.as_bytes()), &line, &|s: &str| s.to_string())
                .await
                .unwrap();
        } else {
            write_folder_task(&worker, &result, "log\n", spans.as_bytes(), &line).await;
        }
        let job = result.job_id.clone();
        crate::bundle::write_files_part(&worker, &run, &job, 1, worker.written()).await.unwrap();
    }
    (store, run, meta, table)
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// Edits a JSON file of the bundle.
async fn edit(store: &FsBundleStore, run: &RunId, path: &str, f: impl FnOnce(&mut Value)) {
    let mut v = json_of(&store.get(run, path).await.unwrap());
    f(&mut v);
    store.put(run, path, &to_json_bytes(&v)).await.unwrap();
}

fn file(store: &FsBundleStore, run: &RunId, path: &str) -> std::path::PathBuf {
    Path::new(&store.bundle_uri(run)).join(path)
}

#[tokio::test]
async fn every_check_names_what_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run) = valid_bundle(dir.path()).await;
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid() && v.warnings.is_empty(), "the starting bundle is valid: {v:?}");
    assert_eq!((v.tasks_with_results, v.sealed), (3, true));

    // (name, re-write the manifest after the break, expected problem)
    type Break = for<'a> fn(
        &'a FsBundleStore,
        &'a RunId,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
    let cases: Vec<(&str, bool, &str, Break)> = vec![
        ("a changed byte", false, "tasks/t1/worker.log: sha256 differs from the manifest", |s, r| {
            Box::pin(async move { std::fs::write(file(s, r, "tasks/t1/worker.log"), "LOG\n").unwrap() })
        }),
        ("a changed size", false, "tasks/t2/worker.log: size 5 differs from the manifest's 4", |s, r| {
            Box::pin(async move { std::fs::write(file(s, r, "tasks/t2/worker.log"), "log!\n").unwrap() })
        }),
        ("a file outside the manifest", false, "extra.txt: not listed in the manifest", |s, r| {
            Box::pin(async move { s.put(r, "extra.txt", b"x").await.unwrap() })
        }),
        ("a listed file missing", false, "report.md: listed in the manifest but missing", |s, r| {
            Box::pin(async move { std::fs::remove_file(file(s, r, layout::REPORT)).unwrap() })
        }),
        ("a required file missing", true, "tasks.jsonl: missing", |s, r| {
            Box::pin(async move { std::fs::remove_file(file(s, r, layout::TASKS)).unwrap() })
        }),
        ("a sealed file missing", true, "summary.json: missing", |s, r| {
            Box::pin(async move { std::fs::remove_file(file(s, r, layout::SUMMARY)).unwrap() })
        }),
        ("metadata of another run", true, "does not match the bundle's run", |s, r| {
            Box::pin(edit(s, r, layout::METADATA, |m| m["run_id"] = json!(RunId::new())))
        }),
        ("a newer major schema", true, "metadata.json: schema_version 2.0 is not readable", |s, r| {
            Box::pin(edit(s, r, layout::METADATA, |m| m["schema_version"] = json!("2.0")))
        }),
        ("a result of a newer major schema", true, "tasks/t1/result.json: schema_version 9.1", |s, r| {
            Box::pin(edit(s, r, "tasks/t1/result.json", |m| m["schema_version"] = json!("9.1")))
        }),
        ("a task count that disagrees", true, "tasks.jsonl: 3 tasks, metadata says 4", |s, r| {
            Box::pin(edit(s, r, layout::METADATA, |m| m["tasks_total"] = json!(4)))
        }),
        ("a folder for an unknown task", true, "tasks/t9/: not a task of this run", |s, r| {
            Box::pin(async move { s.put(r, "tasks/t9/worker.log", b"?").await.unwrap() })
        }),
        ("a complete run missing a result", true, "tasks/t2/result.json: missing in a complete run", |s, r| {
            Box::pin(async move { std::fs::remove_file(file(s, r, "tasks/t2/result.json")).unwrap() })
        }),
        ("a task file missing", true, "tasks/t3/scores.json: missing", |s, r| {
            Box::pin(async move { std::fs::remove_file(file(s, r, "tasks/t3/scores.json")).unwrap() })
        }),
        ("a result in the wrong folder", true, "tasks/t1/result.json: task_id t2 does not match its folder", |s, r| {
            Box::pin(edit(s, r, "tasks/t1/result.json", |m| m["task_id"] = json!("t2")))
        }),
        ("a result of another run", true, "tasks/t1/result.json: run_id", |s, r| {
            Box::pin(edit(s, r, "tasks/t1/result.json", |m| m["run_id"] = json!(RunId::new())))
        }),
        ("passed against its scores", true, "tasks/t3/result.json: `passed` disagrees with its scores", |s, r| {
            Box::pin(edit(s, r, "tasks/t3/result.json", |m| m["passed"] = json!(true)))
        }),
        (
            "scores.json against result.json",
            true,
            "tasks/t1/scores.json: differs from the scores in result.json",
            |s, r| Box::pin(edit(s, r, "tasks/t1/scores.json", |m| m[0]["reason"] = json!("other"))),
        ),
        ("fewer events than steps", true, "tasks/t1/trace.jsonl: 1 events, result says 2", |s, r| {
            Box::pin(edit(s, r, "tasks/t1/result.json", |m| m["agent"]["steps"] = json!(2)))
        }),
        ("a line that is not an event", true, "tasks/t2/trace.jsonl:2: not a trace event", |s, r| {
            Box::pin(async move {
                let mut t = s.get(r, "tasks/t2/trace.jsonl").await.unwrap();
                t.extend_from_slice(b"{\"oops\": 1}\n");
                s.put(r, "tasks/t2/trace.jsonl", &t).await.unwrap()
            })
        }),
        (
            "a losing attempt's trace put back",
            true,
            "tasks/t2/trace.jsonl:1: written by attempt 2, but the result that counts is attempt 1",
            |s, r| {
                Box::pin(async move {
                    let t = String::from_utf8(s.get(r, "tasks/t2/trace.jsonl").await.unwrap()).unwrap();
                    s.put(r, "tasks/t2/trace.jsonl", t.replace("\"attempt\":1", "\"attempt\":2").as_bytes())
                        .await
                        .unwrap()
                })
            },
        ),
        ("a losing attempt's log put back", true, "tasks/t3/worker.log: written by attempt 4", |s, r| {
            Box::pin(async move {
                s.put(r, "tasks/t3/worker.log", b"2026-01-01T00:00:00Z task t3 attempt 4 job j1\n").await.unwrap()
            })
        }),
        ("an event out of place", true, "tasks/t2/trace.jsonl:1: event out of place", |s, r| {
            Box::pin(async move {
                let t = String::from_utf8(s.get(r, "tasks/t2/trace.jsonl").await.unwrap()).unwrap();
                s.put(r, "tasks/t2/trace.jsonl", t.replace("\"step\":0", "\"step\":5").as_bytes()).await.unwrap()
            })
        }),
        (
            "a span from another trace",
            true,
            "tasks/t1/spans.jsonl: span cccccccccccccccc (agent.execute) is not in the task's trace",
            |s, r| {
                Box::pin(async move {
                    let t = String::from_utf8(s.get(r, "tasks/t1/spans.jsonl").await.unwrap()).unwrap();
                    let mut lines: Vec<String> = t.lines().map(str::to_string).collect();
                    lines[1] = lines[1].replace(&"a".repeat(32), &"d".repeat(32));
                    s.put(r, "tasks/t1/spans.jsonl", (lines.join("\n") + "\n").as_bytes()).await.unwrap()
                })
            },
        ),
        ("two task roots", true, "tasks/t2/spans.jsonl: 2 eval.task spans, expected 1", |s, r| {
            Box::pin(async move {
                let t = String::from_utf8(s.get(r, "tasks/t2/spans.jsonl").await.unwrap()).unwrap();
                s.put(r, "tasks/t2/spans.jsonl", t.replace("agent.execute", "eval.task").as_bytes()).await.unwrap()
            })
        }),
        ("a malformed span id", true, "spans.jsonl:1: malformed trace or span id", |s, r| {
            Box::pin(async move {
                s.put(r, layout::SPANS, b"{\"trace_id\":\"ab\",\"span_id\":\"cd\",\"name\":\"eval.run\"}\n")
                    .await
                    .unwrap()
            })
        }),
        ("a run span file line that is not a span", true, "spans.jsonl:1: not a span", |s, r| {
            Box::pin(async move { s.put(r, layout::SPANS, b"[1, 2]\n").await.unwrap() })
        }),
        (
            "summary against the results",
            true,
            "summary.json: 3 finished / 3 passed, but the task results give 3 / 2",
            |s, r| Box::pin(edit(s, r, layout::SUMMARY, |m| m["passed"] = json!(3))),
        ),
        ("summary cost against the results", true, "summary.json: cost or tokens disagree", |s, r| {
            Box::pin(edit(s, r, layout::SUMMARY, |m| m["total_cost_usd"] = json!(99.0)))
        }),
        (
            "a result line that lies",
            true,
            "results.jsonl: the line of task t3 disagrees with its result.json",
            |s, r| {
                Box::pin(async move {
                    let text = String::from_utf8(s.get(r, layout::RESULTS).await.unwrap()).unwrap();
                    let lied: Vec<String> = text
                        .lines()
                        .map(|l| {
                            if l.contains("\"t3\"") {
                                l.replace("\"passed\":false", "\"passed\":true")
                            } else {
                                l.into()
                            }
                        })
                        .collect();
                    s.put(r, layout::RESULTS, format!("{}\n", lied.join("\n")).as_bytes()).await.unwrap()
                })
            },
        ),
        ("a result line twice", true, "results.jsonl: line 4: a task listed twice", |s, r| {
            Box::pin(async move {
                let text = String::from_utf8(s.get(r, layout::RESULTS).await.unwrap()).unwrap();
                let first = text.lines().next().unwrap().to_string();
                s.put(r, layout::RESULTS, format!("{text}{first}\n").as_bytes()).await.unwrap()
            })
        }),
        ("a result line missing", true, "results.jsonl: task t3 has a result but no line", |s, r| {
            Box::pin(async move {
                let text = String::from_utf8(s.get(r, layout::RESULTS).await.unwrap()).unwrap();
                let kept: Vec<&str> = text.lines().filter(|l| !l.contains("\"t3\"")).collect();
                s.put(r, layout::RESULTS, format!("{}\n", kept.join("\n")).as_bytes()).await.unwrap()
            })
        }),
        (
            "summary status against metadata",
            true,
            "summary.json: status interrupted but metadata says complete",
            |s, r| Box::pin(edit(s, r, layout::SUMMARY, |m| m["status"] = json!("interrupted"))),
        ),
        // Every file the checks read, unreadable: each is named, none is skipped in silence.
        ("an unreadable metadata.json", true, "metadata.json", |s, r| {
            Box::pin(async move { s.put(r, layout::METADATA, b"{not json").await.unwrap() })
        }),
        ("an unreadable manifest", false, "manifest.json", |s, r| {
            Box::pin(async move { s.put(r, layout::MANIFEST, b"[1,").await.unwrap() })
        }),
        ("an unreadable tasks.jsonl", true, "tasks.jsonl:1", |s, r| {
            Box::pin(async move { s.put(r, layout::TASKS, b"not a task\n").await.unwrap() })
        }),
        ("an unreadable summary", true, "summary.json", |s, r| {
            Box::pin(async move { s.put(r, layout::SUMMARY, b"{\"passed\": \"many\"}").await.unwrap() })
        }),
        ("an unreadable results.jsonl", true, "results.jsonl:", |s, r| {
            Box::pin(async move { s.put(r, layout::RESULTS, b"{\"task_id\": 7}\n").await.unwrap() })
        }),
        ("a result line without a result", true, "results.jsonl: task t3 has a line but no result", |s, r| {
            Box::pin(async move {
                // A complete run's t3 has no result.json yet keeps its line.
                std::fs::remove_file(file(s, r, "tasks/t3/result.json")).unwrap()
            })
        }),
        ("an unreadable result.json", true, "tasks/t2/result.json", |s, r| {
            Box::pin(async move { s.put(r, "tasks/t2/result.json", b"{\"task_id\":").await.unwrap() })
        }),
        ("an unreadable scores.json", true, "tasks/t1/scores.json", |s, r| {
            Box::pin(async move { s.put(r, "tasks/t1/scores.json", b"{\"score\": 1}").await.unwrap() })
        }),
    ];
    for (name, reseal, want, break_it) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (store, run) = valid_bundle(dir.path()).await;
        break_it(&store, &run).await;
        if reseal {
            write_manifest(&store, &run, &Default::default()).await.unwrap();
        }
        let v = validate(&store, &run).await.unwrap();
        assert!(
            v.problems.iter().any(|p| p.contains(want)),
            "{name}: expected a problem containing {want:?}, got {:?}",
            v.problems
        );
        assert!(!v.is_valid(), "{name}");
    }
}

/// Rewrites one file inside a task's pack (`None` from `f` drops it).
async fn edit_pack(
    store: &FsBundleStore,
    run: &RunId,
    task: &str,
    name: &str,
    f: impl FnOnce(Vec<u8>) -> Option<Vec<u8>>,
) {
    let path = format!("tasks/{task}.tar.gz");
    let files = agenteval_core::taskpack::unpack(&store.get(run, &path).await.unwrap(), &path).unwrap();
    let mut f = Some(f);
    let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
    for (n, b) in files.iter() {
        let b = if n == name { (f.take().unwrap())(b.to_vec()) } else { Some(b.to_vec()) };
        if let Some(b) = b {
            kept.push((n.to_string(), b));
        }
    }
    let refs: Vec<(&str, &[u8])> = kept.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    store.put(run, &path, &agenteval_core::taskpack::pack(&refs).unwrap()).await.unwrap();
}

fn edit_json(f: impl FnOnce(&mut Value)) -> impl FnOnce(Vec<u8>) -> Option<Vec<u8>> {
    move |b| {
        let mut v = json_of(&b);
        f(&mut v);
        Some(to_json_bytes(&v))
    }
}

#[tokio::test]
async fn every_check_of_a_task_pack_names_the_file_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run) = valid_packed_bundle(dir.path()).await;
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid() && v.warnings.is_empty(), "the starting bundle is valid: {v:?}");
    assert_eq!((v.tasks_with_results, v.sealed), (3, true));
    let listed = store.list(&run, "tasks/").await.unwrap();
    assert_eq!(listed, ["tasks/t1.tar.gz", "tasks/t2.tar.gz", "tasks/t3.tar.gz"], "one file per task");
    let t1 = agenteval_core::taskpack::unpack(&store.get(&run, "tasks/t1.tar.gz").await.unwrap(), "t1").unwrap();
    assert_eq!(t1.names().collect::<Vec<_>>(), ["result.json", "trace.jsonl", "spans.jsonl", "worker.log"]);

    type Break = for<'a> fn(
        &'a FsBundleStore,
        &'a RunId,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
    let cases: Vec<(&str, bool, &str, Break)> = vec![
        ("a changed pack", false, "tasks/t1.tar.gz: size ", |s, r| {
            // Kilobytes of digits that compress poorly: the pack surely changes size (a small
            // edit can deflate to the same size, which the checksum then catches instead).
            let log = |_| {
                Some((0..600u64).map(|i| format!("{:x}", i * 2_654_435_761 % 65_521)).collect::<String>().into_bytes())
            };
            Box::pin(edit_pack(s, r, "t1", "worker.log", log))
        }),
        ("not a pack", true, "tasks/t2.tar.gz: not a task pack", |s, r| {
            Box::pin(async move { s.put(r, "tasks/t2.tar.gz", b"plain text").await.unwrap() })
        }),
        ("a result in the wrong pack", true, "tasks/t1.tar.gz/result.json: task_id t2 does not match", |s, r| {
            Box::pin(edit_pack(s, r, "t1", "result.json", edit_json(|m| m["task_id"] = json!("t2"))))
        }),
        ("passed against its scores", true, "tasks/t3.tar.gz/result.json: `passed` disagrees", |s, r| {
            Box::pin(edit_pack(s, r, "t3", "result.json", edit_json(|m| m["passed"] = json!(true))))
        }),
        ("a pack without its trace", true, "tasks/t3.tar.gz/trace.jsonl: missing", |s, r| {
            Box::pin(edit_pack(s, r, "t3", "trace.jsonl", |_| None))
        }),
        ("another attempt's trace", true, "tasks/t2.tar.gz/trace.jsonl:1: written by attempt 2", |s, r| {
            Box::pin(edit_pack(s, r, "t2", "trace.jsonl", |b| {
                Some(String::from_utf8(b).unwrap().replace("\"attempt\":1", "\"attempt\":2").into_bytes())
            }))
        }),
        ("two task roots", true, "tasks/t2.tar.gz/spans.jsonl: 2 eval.task spans", |s, r| {
            Box::pin(edit_pack(s, r, "t2", "spans.jsonl", |b| {
                Some(String::from_utf8(b).unwrap().replace("agent.execute", "eval.task").into_bytes())
            }))
        }),
        ("a pack and a folder", true, "tasks/t1/: a task with a pack has no folder", |s, r| {
            Box::pin(async move { s.put(r, "tasks/t1/worker.log", b"?").await.unwrap() })
        }),
        ("a pack of an unknown task", true, "tasks/t9.tar.gz: not a task of this run", |s, r| {
            Box::pin(async move {
                let pack = s.get(r, "tasks/t1.tar.gz").await.unwrap();
                s.put(r, "tasks/t9.tar.gz", &pack).await.unwrap()
            })
        }),
        ("a complete run missing a pack", true, "tasks/t2.tar.gz: missing in a complete run", |s, r| {
            Box::pin(async move { std::fs::remove_file(file(s, r, "tasks/t2.tar.gz")).unwrap() })
        }),
    ];
    for (name, reseal, want, break_it) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (store, run) = valid_packed_bundle(dir.path()).await;
        break_it(&store, &run).await;
        if reseal {
            write_manifest(&store, &run, &Default::default()).await.unwrap();
        }
        let v = validate(&store, &run).await.unwrap();
        assert!(
            v.problems.iter().any(|p| p.contains(want)),
            "{name}: expected a problem containing {want:?}, got {:?}",
            v.problems
        );
        assert!(!v.is_valid(), "{name}");
    }
}

#[tokio::test]
async fn result_lines_in_another_order_are_compared_by_task() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run) = valid_bundle(dir.path()).await;
    let text = String::from_utf8(store.get(&run, layout::RESULTS).await.unwrap()).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.reverse();
    store.put(&run, layout::RESULTS, format!("{}\n", lines.join("\n")).as_bytes()).await.unwrap();
    write_manifest(&store, &run, &Default::default()).await.unwrap();
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid(), "{:?}", v.problems);
}

#[tokio::test]
async fn a_bundle_sealed_before_results_jsonl_existed_is_valid_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run) = valid_bundle(dir.path()).await;
    std::fs::remove_file(file(&store, &run, layout::RESULTS)).unwrap();
    write_manifest(&store, &run, &Default::default()).await.unwrap();
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid(), "{:?}", v.problems);
    assert!(
        v.warnings.iter().any(|w| w.contains("results.jsonl: missing (sealed by an older agenteval)")),
        "{:?}",
        v.warnings
    );
}

#[tokio::test]
async fn an_unsealed_bundle_is_valid_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run) = valid_bundle(dir.path()).await;
    edit(&store, &run, layout::METADATA, |m| {
        m["sealed"] = json!(false);
        m["status"] = json!("running");
    })
    .await;
    std::fs::remove_file(file(&store, &run, "tasks/t3/result.json")).unwrap();
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid(), "{:?}", v.problems);
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(v.warnings[0].contains("not sealed"), "{:?}", v.warnings);
    assert_eq!(v.tasks_with_results, 2);
}

/// Counts the reads of each file, over a real store.
struct Reads {
    inner: FsBundleStore,
    reads: std::sync::Mutex<std::collections::BTreeMap<String, u32>>,
}

impl Reads {
    fn count(&self, path: &str) {
        *self.reads.lock().unwrap().entry(path.to_string()).or_default() += 1;
    }
    fn of(&self, suffix: &str) -> u32 {
        self.reads.lock().unwrap().iter().filter(|(p, _)| p.ends_with(suffix)).map(|(_, n)| n).sum()
    }
}

#[async_trait::async_trait]
impl BundleStore for Reads {
    fn bundle_uri(&self, run: &RunId) -> String {
        self.inner.bundle_uri(run)
    }
    async fn put(&self, run: &RunId, path: &str, bytes: &[u8]) -> agenteval_core::Result<()> {
        self.inner.put(run, path, bytes).await
    }
    async fn get(&self, run: &RunId, path: &str) -> agenteval_core::Result<Vec<u8>> {
        self.count(path);
        self.inner.get(run, path).await
    }
    async fn read_chunks(
        &self,
        run: &RunId,
        path: &str,
        f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send),
    ) -> agenteval_core::Result<u64> {
        self.count(path);
        self.inner.read_chunks(run, path, f).await
    }
    async fn exists(&self, run: &RunId, path: &str) -> agenteval_core::Result<bool> {
        self.inner.exists(run, path).await
    }
    async fn list(&self, run: &RunId, prefix: &str) -> agenteval_core::Result<Vec<String>> {
        self.inner.list(run, prefix).await
    }
    async fn list_sized(&self, run: &RunId, prefix: &str) -> agenteval_core::Result<Vec<(String, Option<u64>)>> {
        self.inner.list_sized(run, prefix).await
    }
    async fn list_runs(&self) -> agenteval_core::Result<Vec<RunId>> {
        self.inner.list_runs().await
    }
    async fn open_appender(
        &self,
        run: &RunId,
        path: &str,
    ) -> agenteval_core::Result<Box<dyn agenteval_core::traits::Appender>> {
        self.inner.open_appender(run, path).await
    }
}

/// Sealing reads each result once and none of the files the workers' parts vouch for, and the
/// manifest it writes is the one `validate` (which reads everything) agrees with.
#[tokio::test]
async fn sealing_trusts_the_sums_workers_recorded_instead_of_reading_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run, meta, table) = finished_bundle(dir.path()).await;
    let reads = std::sync::Arc::new(Reads { inner: store.clone(), reads: Default::default() });
    seal(reads.clone(), &meta, table.ids()).await.unwrap();
    assert_eq!(reads.of("/result.json"), 3, "each result is read once, to summarize it");
    for vouched in ["/scores.json", "/worker.log"] {
        assert_eq!(reads.of(vouched), 0, "{vouched} is vouched for by the parts: {:?}", reads.reads);
    }
    // Traces are read for the report's sample of traces only, not again for the manifest.
    for sampled in ["/trace.jsonl", "/spans.jsonl", layout::JOB_FILES] {
        assert_eq!(reads.of(sampled), 3, "{sampled}: once per task: {:?}", reads.reads);
    }
    assert_eq!(reads.of(layout::RESULTS), 0, "what the seal wrote itself is not read back");
    assert_eq!(reads.of(layout::SUMMARY), 0);
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid(), "{:?}", v.problems);
}

/// The manifest of a bundle of packs reads none of them again: the seal took each pack's sum
/// when it read the pack for its result.
#[tokio::test]
async fn sealing_reads_no_pack_again_for_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run, meta, table) = finished_bundle_of(dir.path(), true).await;
    let reads = std::sync::Arc::new(Reads { inner: store.clone(), reads: Default::default() });
    let (_, hints) = crate::bundle::seal_contents(reads.clone(), &meta, table.ids()).await.unwrap();
    assert_eq!(hints.packs.len(), 3);
    let before = reads.of(".tar.gz");
    write_manifest(reads.as_ref(), &run, &hints).await.unwrap();
    assert_eq!(reads.of(".tar.gz"), before, "{:?}", reads.reads);
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid(), "{:?}", v.problems);
}

/// A part is trusted only for what its attempt produced and at the size the listing shows:
/// a file changed after its part was written, or vouched for by an attempt whose result did not
/// count, is read.
#[tokio::test]
async fn a_stale_or_superseded_part_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let (store, run, meta, table) = finished_bundle(dir.path()).await;
    // t1's log grew after its worker's part was written.
    store.put(&run, "tasks/t1/worker.log", b"log\nmore\n").await.unwrap();
    // A second attempt of t2's job left a part (with a wrong sum) but t2's result is attempt 1's.
    let t2_job = agenteval_core::JobId::numbered(0, 2);
    let mut lying = crate::bundle::FilesPart::default();
    lying.files.insert(
        "tasks/t2/scores.json".into(),
        crate::bundle::FileSum {
            sha256: "0".repeat(64),
            size: store.get(&run, "tasks/t2/scores.json").await.unwrap().len() as u64,
        },
    );
    store.put(&run, &layout::job_files(&t2_job, 2), &serde_json::to_vec(&lying).unwrap()).await.unwrap();
    let reads = std::sync::Arc::new(Reads { inner: store.clone(), reads: Default::default() });
    seal(reads.clone(), &meta, table.ids()).await.unwrap();
    assert_eq!(reads.of("tasks/t1/worker.log"), 1, "the grown log is read: {:?}", reads.reads);
    assert_eq!(reads.of("tasks/t2/scores.json"), 0, "attempt 1's part vouches for t2");
    let v = validate(&store, &run).await.unwrap();
    assert!(v.is_valid(), "{:?}", v.problems);
}
