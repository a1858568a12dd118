//! Tasks that act in a `workspace` (no Docker), end to end: the shipped `repo-tasks` under the
//! oracle and `nop` (a folder copy and a git repository checked out at a commit, each patch
//! kept), an agent that tries to forge its reward, plant tests, read the real ones or shadow the
//! tests' runner, and the run's `tests` evaluator giving tests to cases that bring none, with a
//! verifier that times out or writes garbage as an evaluator error, never a pass.

use std::path::{Path, PathBuf};

use crate::util::*;

fn repo_tasks(ws: &Workspace, agent: &str, extra: &str) -> PathBuf {
    let cases = repo().join("configs/repo-tasks/cases.jsonl");
    ws.write(
        "repo-tasks.yaml",
        &format!(
            "name: repo-tasks-test\nbenchmark:\n  kind: jsonl\n  cases: {}\nagent:\n  kind: {agent}\n  limits:\n    max_wall_seconds: 60\n\
             environment:\n  kind: workspace\nbackend:\n  max_concurrent_jobs: 3\n  tasks_per_job: 1\n  max_attempts: 1\n\
             storage:\n  bundle_root: runs\n{extra}",
            cases.display()
        ),
    )
}

/// `(task, outcome, first score, its error)` of each task of `run`.
fn outcomes(ws: &Workspace, run: &str) -> Vec<(String, String, f64, Option<String>)> {
    let mut rows: Vec<_> = results(&ws.runs().join(run))
        .iter()
        .map(|r| {
            let s = &r["scores"][0];
            (
                r["task_id"].as_str().unwrap().to_string(),
                if r["passed"] == true { "passed" } else { "failed" }.to_string(),
                s["score"].as_f64().unwrap_or(-1.0),
                s["error"].as_str().map(String::from),
            )
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

fn workspaces_left(run: &str) -> bool {
    std::env::temp_dir().join("agenteval-env").join(run).exists()
}

#[test]
fn the_shipped_workspace_tasks_pass_with_their_solutions_and_fail_with_none() {
    let ws = Workspace::new();
    let cfg = repo_tasks(&ws, "oracle", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let got = outcomes(&ws, run);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.iter().all(|(_, o, s, _)| o == "passed" && *s == 1.0), "the oracle passes every task: {got:?}");
    let bundle = ws.runs().join(run);
    assert!(ws.validate(bundle.to_str().unwrap()).status.success(), "the bundle validates");
    // The repository task started at its pinned commit (1.2.3, not the later 2.0.0), and its
    // patch is against that commit.
    let patch = crate::util::read_text(bundle.join("tasks/bump-version/artifacts/patch.diff")).unwrap();
    assert!(patch.contains("-1.2.3") && patch.contains("+1.2.4") && !patch.contains("2.0.0"), "{patch}");
    let patch = crate::util::read_text(bundle.join("tasks/fix-slugify/artifacts/patch.diff")).unwrap();
    assert!(patch.contains("--- a/textkit/slug.py") && !patch.contains("__pycache__"), "{patch}");
    let manifest = std::fs::read_to_string(bundle.join("manifest.json")).unwrap();
    assert!(manifest.contains("tasks/fix-slugify.tar.gz"), "the task's pack, and its patch, are checksummed");
    assert!(!workspaces_left(run), "no workspace folder is left after a run");
    let html = std::fs::read_to_string(bundle.join("report.html")).unwrap();
    assert!(html.contains("\"patch\":") && html.contains("+1.2.4"), "the sealed report shows each patch");

    let (v, code, _) = ws.submit(&cfg, &["--set", "agent.kind=nop"]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap();
    let got = outcomes(&ws, run);
    assert!(got.iter().all(|(_, o, s, e)| o == "failed" && *s < 1.0 && e.is_none()), "nop fails every task: {got:?}");
    assert!(!workspaces_left(run));
}

/// Tries every way a reward-hacking agent in a workspace has: write the reward where the tests
/// write it, plant a `test.sh` where the tests go, read the real tests and the case file, list
/// the other tasks' workspaces, and shadow the tests' `unittest` with one that always passes.
const CHEAT: &str = r#"
import json, subprocess, sys
req = json.loads(sys.stdin.readline())
env = req["environment"]
def sh(c):
    d = subprocess.run(env["exec"] + [c], capture_output=True, text=True)
    return {"exit": d.returncode, "out": (d.stdout + d.stderr)[-300:]}
root = env["workdir"].rsplit("/", 1)[0]
got = {
    "forge": sh(f"mkdir -p {root}/logs/verifier && echo 1 > {root}/logs/verifier/reward.txt"),
    "plant": sh(f"mkdir -p {root}/tests && echo 'exit 0' > {root}/tests/test.sh"),
    "read_tests": sh("cat TESTS/test_slug.py"),
    "read_cases": sh("cat CASES"),
    "neighbours": sh(f"ls {root}/.."),
    "shadow": sh("printf 'import sys\\nsys.exit(0)\\n' > unittest.py && echo 'import sys; sys.exit(0)' > sitecustomize.py"),
}
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": got}}), flush=True)
"#;

#[test]
fn an_agent_in_its_workspace_cannot_forge_plant_read_or_shadow_the_tests() {
    let ws = Workspace::new();
    let shipped = repo().join("configs/repo-tasks");
    let script = CHEAT
        .replace("TESTS", shipped.join("fix-slugify/tests").to_str().unwrap())
        .replace("CASES", shipped.join("cases.jsonl").to_str().unwrap());
    ws.write("cheat.py", &script);
    let cfg = repo_tasks(&ws, "command\n  command: [python3, cheat.py]", "");
    let (v, code, out) = ws.submit(&cfg, &["--set", "benchmark.filter.ids=[fix-slugify]"]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let r = read_json(&ws.runs().join(run).join("tasks/fix-slugify/result.json"));
    let a = &r["agent"]["final_answer"];
    for k in ["forge", "plant", "read_tests", "read_cases", "neighbours"] {
        assert_ne!(a[k]["exit"], 0, "{k} must fail: {a}");
    }
    assert_eq!(a["shadow"]["exit"], 0, "the agent may write its own folder: {a}");
    assert_eq!(r["passed"], false, "nothing the agent did passes the unfixed task: {r}");
    let s = &r["scores"][0];
    assert!(s["error"].is_null() && s["score"] == 0.0, "the real tests ran and failed: {s}");
    assert!(s["reason"].as_str().unwrap().contains("want 'hello-world'"), "the real tests' own words: {s}");
}

/// A shared `test.sh` for cases that bring no tests: it reads what the agent left (`answer.txt`)
/// and is slow or writes garbage when the case's folder says so.
const SHARED_TEST: &str = r#"#!/bin/bash
[ -f slow ] && sleep 30
[ -f garbage ] && { echo PASS > "$AGENTEVAL_VERIFIER_DIR/reward.txt"; exit 0; }
if [ "$(cat answer.txt 2>/dev/null)" = 42 ]; then r=1; else r=0; fi
echo "$r" > "$AGENTEVAL_VERIFIER_DIR/reward.txt"
"#;

fn case_folder(ws: &Workspace, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = ws.path().join("cases").join(name);
    std::fs::create_dir_all(&d).unwrap();
    for (f, body) in files {
        std::fs::write(d.join(f), body).unwrap();
    }
    d
}

#[test]
fn a_tests_evaluator_grades_cases_that_bring_none_and_a_broken_verifier_is_an_error_not_a_pass() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("shared-tests")).unwrap();
    ws.write("shared-tests/test.sh", SHARED_TEST);
    let right = case_folder(&ws, "right", &[("answer.txt", "42")]);
    let wrong = case_folder(&ws, "wrong", &[("answer.txt", "41")]);
    let slow = case_folder(&ws, "slow", &[("slow", "")]);
    let garbage = case_folder(&ws, "garbage", &[("garbage", "")]);
    let line = |id: &str, dir: &Path| {
        format!(
            "{{\"id\": \"{id}\", \"input\": \"leave it\", \"environment\": {{\"context\": \"{}\"}}}}\n",
            dir.strip_prefix(ws.path()).unwrap().display()
        )
    };
    let cases = [("right", &right), ("wrong", &wrong), ("slow", &slow), ("garbage", &garbage)]
        .iter()
        .map(|(id, d)| line(id, d))
        .collect::<String>();
    let cases = ws.write("cases.jsonl", &cases);
    let cfg = ws.write(
        "shared.yaml",
        &format!(
            "name: shared-tests\nbenchmark:\n  kind: jsonl\n  cases: {}\nagent:\n  kind: nop\n\
             evaluators:\n  - kind: tests\n    tests: shared-tests\n    timeout_seconds: 2\n\
             backend:\n  max_concurrent_jobs: 4\n  tasks_per_job: 1\n  max_attempts: 1\nstorage:\n  bundle_root: runs\n",
            cases.display()
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let got = outcomes(&ws, run);
    let by = |id: &str| got.iter().find(|r| r.0 == id).unwrap().clone();
    assert_eq!(by("right").1, "passed", "{got:?}");
    assert_eq!((by("wrong").1.as_str(), by("wrong").3.is_none()), ("failed", true), "{got:?}");
    for id in ["slow", "garbage"] {
        let (_, outcome, _, error) = by(id);
        assert_eq!(outcome, "failed", "{id}: {got:?}");
        assert!(error.is_some(), "a verifier that {id}s is an evaluator error: {got:?}");
    }
    assert!(by("slow").3.unwrap().contains("past 2 s"), "{got:?}");
    assert!(by("garbage").3.unwrap().contains("not a number"), "{got:?}");
    // Every score is the configured evaluator's: the benchmark's own check (an expected answer)
    // does not also judge a case that acts.
    let r = read_json(&ws.runs().join(run).join("tasks/right/result.json"));
    assert_eq!(r["scores"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["scores"][0]["evaluator_id"], "tests", "{r}");

    // A case with tests and no environment, or paths that are not there, is refused with its line.
    let bad = ws.write(
        "bad.jsonl",
        "{\"id\": \"a\", \"input\": \"x\", \"tests\": \"nowhere\"}\n{\"id\": \"b\", \"input\": \"x\", \"environment\": {\"context\": \"missing\"}}\n",
    );
    let out =
        ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--set", &format!("benchmark.cases={}", bad.display())]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.jsonl:1") && err.contains("needs an `environment`"), "{err}");
    assert!(err.contains("bad.jsonl:2") && err.contains("environment.context"), "{err}");
}

/// `regrade` of tasks that acted: each task's environment is made again with the run's patch
/// applied, and its tests run there; a task whose patch is gone cannot be regraded (infra, not
/// a pass and not the agent's failure).
#[test]
fn a_regrade_re_creates_each_environment_from_the_recorded_patch() {
    let ws = Workspace::new();
    let mut runs = Vec::new();
    for agent in ["oracle", "nop"] {
        let cfg = repo_tasks(&ws, agent, "");
        let (v, code, out) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{v} {}", text(&out.stderr));
        runs.push(v["run_id"].as_str().unwrap().to_string());
    }
    let regrade_code = |run: &str, want: i32| {
        let out = ws.run(&["regrade", run, "--json"]);
        assert_eq!(out.status.code(), Some(want), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["run_id"].as_str().unwrap().to_string()
    };
    let regrade = |run: &str| regrade_code(run, 0);
    let solved = regrade(&runs[0]);
    let got = outcomes(&ws, &solved);
    assert!(got.iter().all(|(_, o, s, _)| o == "passed" && *s == 1.0), "the oracle's patches still pass: {got:?}");
    let log = crate::util::read_text(ws.runs().join(&solved).join("tasks/bump-version/worker.log")).unwrap();
    assert!(log.contains("applied run") && log.contains("no agent ran"), "{log}");
    let nothing = regrade(&runs[1]);
    assert!(outcomes(&ws, &nothing).iter().all(|(_, o, ..)| o == "failed"), "no patch, no pass");
    // A patch that went missing from the bundle: the task cannot be regraded.
    replace_in_pack(&ws.runs().join(&runs[0]), "bump-version", "artifacts/patch.diff", None);
    // (The run is incomplete: that task was given up, exit 3.)
    let broken = regrade_code(&runs[0], 3);
    let r = results(&ws.runs().join(&broken)).into_iter().find(|r| r["task_id"] == "bump-version").unwrap();
    assert_eq!(r["passed"], false);
    assert_eq!(r["agent"]["terminated_by"], "infra_failure", "{r}");
    assert!(!workspaces_left(&solved) && !workspaces_left(&broken), "every environment was torn down");
}
