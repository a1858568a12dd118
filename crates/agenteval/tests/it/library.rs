//! The library entry point (`agenteval::api`): a program runs a config and compares two runs
//! from Rust code, and finds what the command line would have shown.

use crate::util::*;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

#[test]
fn a_program_runs_configs_and_judges_one_run_against_another_through_the_library() {
    use agenteval::api::{self, ApiError, RunOptions, RunStatus};
    let ws = Workspace::new();
    let cases = ws.write(
        "cases.jsonl",
        "{\"id\": \"a\", \"input\": \"2+2\", \"expected\": \"4\"}\n{\"id\": \"b\", \"input\": \"3+3\", \"expected\": \"6\"}\n",
    );
    let runs = ws.runs();
    let cfg = ws.write(
        "lib.yaml",
        &format!(
            "name: lib\nbenchmark:\n  kind: jsonl\n  cases: {}\nagent:\n  kind: oracle\nevaluators:\n  - kind: exact_match\nstorage:\n  bundle_root: {}\n",
            cases.display(),
            runs.display()
        ),
    );
    let bin = || Some(std::path::PathBuf::from(BIN));
    let rt = rt();
    let base = rt.block_on(api::run(&cfg, RunOptions { agenteval_bin: bin(), ..Default::default() })).unwrap();
    assert_eq!((base.status, base.exit_code, base.summary.passed), (RunStatus::Complete, 0, 2), "{base:?}");
    // The same run the command line sees.
    let shown = ws.run(&["runs", "show", &base.run_id, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["run"]["status"], "complete", "{shown}");
    assert!(std::path::Path::new(&base.bundle).join("summary.json").is_file(), "{base:?}");

    let sets = vec!["agent.kind=nop".to_string()];
    let cand = rt.block_on(api::run(&cfg, RunOptions { sets, agenteval_bin: bin(), ..Default::default() })).unwrap();
    assert_eq!((cand.exit_code, cand.summary.passed), (0, 0), "{cand:?}");

    let gates = ws.write("gates.yaml", "max_task_regressions: 0\n");
    let index = ws.index().display().to_string();
    let judged = rt.block_on(api::compare(&index, &base.run_id, &cand.run_id, Some(&gates))).unwrap();
    assert_eq!(judged.exit_code, 1, "{judged:?}");
    let verdict = judged.verdict.unwrap();
    assert!(!verdict.passed, "{verdict:?}");
    assert_eq!(judged.comparison.unwrap().regressions.len(), 2);
    // Without gates: the comparison alone, exit 0.
    let plain = rt.block_on(api::compare(&index, &base.run_id, &cand.run_id, None)).unwrap();
    assert_eq!((plain.exit_code, plain.verdict.is_none()), (0, true));

    // A bad config is every problem with its place, and the command line's exit code.
    let bad = ws.write(
        "bad.yaml",
        "name: x\nbenchmark:\n  kind: nosuch\nagent:\n  kind: mock\nbackend:\n  max_concurrent_jobs: -1\n",
    );
    let err = rt.block_on(api::run(&bad, RunOptions { agenteval_bin: bin(), ..Default::default() })).unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)) && err.exit_code() == 2, "{err:?}");
    assert!(err.to_string().contains("bad.yaml:3:"), "{err}");
    // A run that is not there: the operation's error, not a panic.
    let err = rt.block_on(api::compare(&index, &base.run_id, "no-such-run", None)).unwrap_err();
    assert_ne!(err.exit_code(), 0, "{err}");
}
