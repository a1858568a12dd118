//! What the README promises of the command line, checked as a user would meet it: where
//! commands find the run index, `doctor` on the local backend, task filters and repetitions,
//! and the progress bar on a terminal.

use std::process::Command;

use crate::util::*;

fn listed(out: &std::process::Output) -> Vec<String> {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_run_is_named_by_a_prefix_of_its_id_or_latest() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 2, 0, 1, 1);
    let first = ws.submit(&cfg, &[]).0["run_id"].as_str().unwrap().to_string();
    let second = ws.submit(&cfg, &[]).0["run_id"].as_str().unwrap().to_string();
    let index = ws.index();
    let status = |run: &str| ws.run(&["status", run, "--json", "--index", index.to_str().unwrap()]);
    let id_of = |out: std::process::Output| {
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["run"]["run_id"].as_str().unwrap().to_string()
    };
    // The shortest prefix that tells the two apart, and one more character for good measure.
    let common = first.chars().zip(second.chars()).take_while(|(a, b)| a == b).count();
    assert_eq!(id_of(status(&first[..common + 2])), first);
    assert_eq!(id_of(status(&second[..common + 2])), second);
    assert_eq!(id_of(status("latest")), second, "latest is the newest run");
    // A prefix both share is ambiguous: exit 2, naming both.
    if common >= 4 {
        let out = status(&first[..common]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(&first) && err.contains(&second) && err.contains("give more of it"), "{err}");
    }
    // validate-bundle takes a reference too.
    let out = ws.run(&["validate-bundle", &second[..common + 2], "--index", index.to_str().unwrap()]);
    assert!(out.status.success() && text(&out.stdout).contains(&second), "{}", text(&out.stderr));
    let out = status("ffff");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no run id starts with `ffff`"), "{}", text(&out.stderr));
}

#[test]
fn commands_find_the_index_by_flag_config_environment_or_default() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 2, 0, 1, 1);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    // The default: ./runs/index.sqlite where the command runs.
    assert_eq!(listed(&ws.run(&["runs", "list", "--json"])), vec![run.clone()]);
    let elsewhere = tempfile::tempdir().unwrap();
    let from = |args: &[&str], env: Option<&str>| {
        let mut c = ws.cmd(args);
        c.current_dir(elsewhere.path()).env_remove("AGENTEVAL_INDEX");
        if let Some(e) = env {
            c.env("AGENTEVAL_INDEX", e);
        }
        c.output().unwrap()
    };
    let index = ws.index();
    let index = index.to_str().unwrap();
    assert_eq!(listed(&from(&["runs", "list", "--json", "--index", index], None)), vec![run.clone()]);
    assert_eq!(listed(&from(&["runs", "list", "--json", "--config", cfg.to_str().unwrap()], None)), vec![run.clone()]);
    assert_eq!(listed(&from(&["runs", "list", "--json"], Some(index))), vec![run.clone()]);
    let st = from(&["status", &run, "--json"], Some(index));
    assert!(st.status.success(), "{}", text(&st.stderr));
    // Nowhere to look: a usage error naming where it looked and the flags that choose.
    let none = from(&["runs", "list"], None);
    assert_eq!(none.status.code(), Some(2));
    let err = text(&none.stderr);
    let searched = elsewhere.path().canonicalize().unwrap();
    assert!(err.contains(&format!("no runs/index.sqlite in {}", searched.display())), "{err}");
    assert!(err.contains("--index") && err.contains("--config"), "{err}");
    assert!(!err.contains("index rebuild"), "nothing was lost here: {err}");
    // From a folder inside the project, as git finds its repository: the nearest index above.
    let deep = ws.path().join("src/deep");
    std::fs::create_dir_all(&deep).unwrap();
    let mut c = ws.cmd(&["runs", "list", "--json"]);
    c.current_dir(&deep).env_remove("AGENTEVAL_INDEX");
    assert_eq!(listed(&c.output().unwrap()), vec![run.clone()]);
    let mut c = ws.cmd(&["show", "latest:e2e-toy", "toy-0000000", "--json"]);
    c.current_dir(&deep).env_remove("AGENTEVAL_INDEX");
    let out = c.output().unwrap();
    assert!(out.status.success(), "show from a subfolder: {}", text(&out.stderr));
    // A named index that is not there says so, and how it was chosen.
    let gone = from(&["runs", "list", "--index", "/nonexistent/index.sqlite"], None);
    assert_eq!(gone.status.code(), Some(2));
    let err = text(&gone.stderr);
    assert!(err.contains("no run index at /nonexistent/index.sqlite (named by --index"), "{err}");
}

#[test]
fn doctor_checks_the_local_bundle_folder() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 2, 0, 1, 1);
    let out = ws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("local: no cloud resources needed"), "{}", text(&out.stdout));
    // A bundle root under a file can never be created.
    ws.write("a-file", "x");
    let out = ws.run(&["doctor", "--config", cfg.to_str().unwrap(), "--set", "storage.bundle_root=a-file/runs"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("is not a folder"), "{}", text(&out.stdout));
}

#[test]
fn filters_and_repetitions_choose_the_tasks() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 10, 0, 2, 2);
    let (v, code, _) =
        ws.submit(&cfg, &["--set", "benchmark.filter.ids=[toy-0000001, toy-0000003]", "--set", "repetitions=2"]);
    assert_eq!(code, 0, "{v}");
    let bundle = std::path::PathBuf::from(v["bundle"].as_str().unwrap());
    let mut ids: Vec<String> = results(&bundle).iter().map(|r| r["task_id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["toy-0000001", "toy-0000001@r1", "toy-0000003", "toy-0000003@r1"]);
    // pass@k where a person reads the run: `runs show` (toy-0000001 fails, toy-0000003 errs
    // under the mock: both 0 of 2, so pass@1 and pass@2 are 0).
    let run = v["run_id"].as_str().unwrap();
    let shown = text(&ws.run(&["runs", "show", run, "--index", ws.index().to_str().unwrap()]).stdout);
    assert!(shown.contains("repeated: pass@1 0.0%, pass@2 0.0%"), "{shown}");
    let terminal = text(&ws.run(&["report", run, "--index", ws.index().to_str().unwrap()]).stdout);
    assert!(terminal.contains("pass@2"), "{terminal}");
    let (v, code, _) = ws.submit(&cfg, &["--set", "benchmark.filter.tags=[slow]", "--set", "benchmark.filter.limit=1"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["summary"]["tasks_total"], 1, "{v}");
}

#[test]
fn a_terminal_shows_a_progress_bar_and_the_summary() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 20, 30, 1, 2);
    // `script` gives the command a terminal, as a user's shell would.
    let line = format!("{BIN} submit --config {}", cfg.display());
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(ws.path())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "80")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}");
    for want in ["tasks", "eta", "passed ", "failed ", "errored ", "infra ", "run ", "status  complete"] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    // The summary fits an 80-column terminal (the bar's lines are held to 80 columns by
    // `output`'s unit tests: on a terminal it pads them to the width, so they cannot be measured
    // here).
    let plain = strip_ansi(&shown);
    let summary = &plain[plain.find("tasks  passed").expect("the summary table")..];
    for line in summary.lines() {
        let line = line.trim_end();
        assert!(line.chars().count() <= 80, "{} columns: {line:?}", line.chars().count());
    }
}

/// Text with each terminal escape sequence (colours, cursor moves) turned into a line break, so
/// that what lands on one screen line stays one line.
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            out.push('\n');
            continue;
        }
        out.push(c);
    }
    out
}

/// `agenteval … | head` is how people read long output: the closed pipe ends the command
/// quietly, never with a panic.
#[test]
fn output_into_a_closed_pipe_is_not_a_crash() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 30, 0, 5, 2);
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap();
    // `true` has exited before agenteval writes: every write meets a closed pipe.
    let line = format!("{BIN} runs show {run} --tasks | true");
    let out = Command::new("bash").args(["-o", "pipefail", "-c", &line]).current_dir(ws.path()).output().unwrap();
    assert!(!text(&out.stderr).contains("panicked"), "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `show` prints a long error whole, wrapped within 80 columns: the useful part of an error is
/// often its end (a path, an exit status), which a cut loses.
#[test]
fn show_prints_a_600_character_error_whole_within_80_columns() {
    let ws = Workspace::new();
    let error: String = (0..90).map(|i| format!("part{i:02}")).collect::<Vec<_>>().join(" ") + " THE-END";
    assert!(error.len() >= 600, "{}", error.len());
    ws.write("cases.jsonl", "{\"id\": \"t1\", \"input\": \"q\", \"expected\": \"a\"}\n");
    ws.write("fails.py", &format!("import sys\nsys.stdin.readline()\nsys.stderr.write({error:?})\nsys.exit(1)\n"));
    let cfg = ws.write(
        "long.yaml",
        "name: long\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent: {kind: command, command: [python3, fails.py]}\nbackend: {stop_after_identical_errors: 0}\n",
    );
    let (v, _, _) = ws.submit(&cfg, &[]);
    let run = v["run_id"].as_str().unwrap();
    let out = ws.run(&["show", run, "t1", "--index", ws.index().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.lines().all(|l| l.chars().count() <= 80), "a line past 80 columns:\n{shown}");
    let words: Vec<&str> = shown.split_whitespace().collect();
    let joined = words.join(" ");
    assert!(joined.contains(&error), "the error is not there whole:\n{shown}");
}

/// Issue 58: the first mistakes a new user makes with a shipped agent are refused before any
/// run, by `config validate`, `doctor` and `submit` alike, each naming the field to fix: a
/// preset with no way to its model, an unpriced model under a cost limit, an endpoint's key in
/// the agent's own section.
#[test]
fn a_new_users_first_mistakes_with_a_preset_are_refused_naming_the_field() {
    let ws = Workspace::new();
    ws.write("cases.jsonl", "{\"id\": \"a\", \"input\": \"hi\"}\n");
    let head =
        "name: first\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: installed\n  preset: codex\n";
    let refused = |name: &str, agent: &str, wants: &[&str]| {
        let cfg = ws.write(name, &format!("{head}{agent}"));
        let cfg = cfg.to_str().unwrap();
        for args in [vec!["config", "validate", cfg], vec!["doctor", "--config", cfg], vec!["submit", "--config", cfg]]
        {
            let out = ws.run(&args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            for want in wants {
                assert!(err.contains(want), "{args:?} should say {want:?}: {err}");
            }
        }
        assert!(!ws.runs().join("index.sqlite").exists() || listed(&ws.run(&["runs", "list", "--json"])).is_empty());
    };
    refused("no-upstream.yaml", "  model: gpt-5\n", &["no-upstream.yaml:6:3:", "add `agent.upstream.openai`"]);
    refused(
        "unpriced.yaml",
        "  model: my-finetune\n  limits: {max_cost_usd: 1}\n  upstream: {openai: {base_url: 'http://127.0.0.1:9/v1'}}\n",
        &["unpriced.yaml:8:10:", "no price is known for `my-finetune`", "`agent.upstream.prices.my-finetune`"],
    );
    refused(
        "misplaced.yaml",
        "  model: gpt-5\n  base_url: http://127.0.0.1:9/v1\n",
        &["misplaced.yaml:9:3:", "it goes under `agent.upstream.openai.base_url`"],
    );
    // With its price given, the same agent and limit are valid.
    let priced = ws.write(
        "priced.yaml",
        &format!(
            "{head}  model: my-finetune\n  limits: {{max_cost_usd: 1}}\n  upstream:\n    openai: {{base_url: 'http://127.0.0.1:9/v1'}}\n    prices:\n      my-finetune: {{input_per_mtok: 1, output_per_mtok: 2}}\n"
        ),
    );
    let out = ws.run(&["config", "validate", priced.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Issue 59: `agenteval prices` shows the packaged table, dated, each price with the provider
/// page it came from; with `--config`, the prices the config adds and the models it calls that
/// have none.
#[test]
fn prices_show_the_dated_table_its_sources_and_a_configs_unpriced_models() {
    let ws = Workspace::new();
    let out = ws.run(&["prices", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["date"].as_str().unwrap() >= "2026-11-01", "{}", v["date"]);
    let model = |name: &str| v["models"].as_array().unwrap().iter().find(|m| m["model"] == name).cloned();
    for (name, source) in [("gpt-5-codex", "openai"), ("claude-sonnet-4-5", "anthropic"), ("gemini-2.5-pro", "google")]
    {
        let m = model(name).unwrap_or_else(|| panic!("{name} is not priced: {v}"));
        assert_eq!(m["source"], source, "{m}");
        assert!(v["sources"][source]["url"].as_str().unwrap().starts_with("https://"), "{v}");
    }
    assert_eq!(model("claude-sonnet-4-5").unwrap()["price"]["cache_write_per_mtok"], 3.75);
    let shown = text(&ws.run(&["prices"]).stdout);
    assert!(
        shown.contains("gpt-5-codex") && shown.contains("https://developers.openai.com/api/docs/pricing"),
        "{shown}"
    );

    ws.write("cases.jsonl", "{\"id\": \"a\", \"input\": \"hi\"}\n");
    let cfg = ws.write(
        "p.yaml",
        "name: p\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: installed\n  preset: codex\n  model: my-finetune\n  upstream:\n    openai: {base_url: 'http://127.0.0.1:9/v1'}\n    models: [gpt-5-mini]\n    prices:\n      other-tune: {input_per_mtok: 1, output_per_mtok: 2}\n",
    );
    let out = ws.run(&["prices", "--config", cfg.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(model_source(&v, "other-tune"), "config");
    let used: Vec<(String, bool)> = v["config_models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["model"].as_str().unwrap().to_string(), m["priced"].as_bool().unwrap()))
        .collect();
    assert_eq!(used, [("my-finetune".to_string(), false), ("gpt-5-mini".to_string(), true)]);
    let said = text(&ws.run(&["prices", "--config", cfg.to_str().unwrap()]).stdout);
    assert!(said.contains("`my-finetune` has no price"), "{said}");

    // A model Bedrock serves under a model id is priced as that id's model.
    let bedrock = ws.write(
        "b.yaml",
        "name: b\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: installed\n  preset: claude-code\n  model: house-claude\n  upstream:\n    bedrock:\n      region: us-east-1\n      models: {house-claude: 'us.anthropic.claude-sonnet-4-5-20250929-v1:0'}\n",
    );
    let out = ws.run(&["prices", "--config", bedrock.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config_models"][0]["priced"], true, "{v}");
    assert_eq!(v["config_models"][0]["price"]["input_per_mtok"], 3.0, "{v}");
}

fn model_source(v: &serde_json::Value, name: &str) -> String {
    let m = v["models"].as_array().unwrap().iter().find(|m| m["model"] == name).unwrap();
    m["source"].as_str().unwrap().to_string()
}

/// `config validate` reads every task of a Harbor folder: one whose `task.toml` is not TOML is
/// named (a run would make it `infra` and run the rest), and the config is not called valid.
#[test]
fn config_validate_names_a_harbor_task_whose_task_toml_is_broken() {
    let ws = Workspace::new();
    for (task, toml) in
        [("fine", "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n"), ("broken", "[verifier\ntimeout_sec = 60\n")]
    {
        for sub in ["environment", "tests"] {
            std::fs::create_dir_all(ws.path().join(format!("tasks/{task}/{sub}"))).unwrap();
        }
        ws.write(&format!("tasks/{task}/instruction.md"), "Do the thing.\n");
        ws.write(&format!("tasks/{task}/task.toml"), toml);
        ws.write(&format!("tasks/{task}/environment/Dockerfile"), "FROM debian:bookworm\n");
        ws.write(&format!("tasks/{task}/tests/test.sh"), "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n");
    }
    let cfg = ws.write("harbor.yaml", "name: h\nbenchmark:\n  kind: harbor\n  path: tasks\nagent:\n  kind: oracle\n");
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{said}", text(&out.stdout));
    assert!(said.contains("task broken:") && !said.contains("task fine:"), "{said}");
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false, "{v}");
    assert_eq!(v["problems"][0]["task"], "broken", "{v}");
}

/// Issue 74: a run's tasks found by the tool their agent called, how they ended, or text in
/// their why; the filters combine and imply `--tasks`.
#[test]
fn runs_show_finds_tasks_by_tool_ending_and_why() {
    let ws = Workspace::new();
    ws.write(
        "agent.py",
        "import json, sys\nreq = json.loads(sys.stdin.readline())\nkind, _, arg = req['input'].partition(':')\ndef emit(k, p):\n    print(json.dumps({'kind': k, 'payload': p}), flush=True)\nif kind == 'crash':\n    print('the widget broke', file=sys.stderr)\n    sys.exit(3)\nif kind == 'tool':\n    emit('agent.tool_call', {'tool': arg, 'arguments': {}})\n    emit('agent.tool_result', {'tool': arg, 'result': 'ok'})\nemit('agent.final_answer', {'answer': 'done'})\nemit('agent.terminal', {'final_answer': 'done'})\n",
    );
    let cases = [("a", "tool:search"), ("b", "tool:browse"), ("c", "tool:search"), ("d", "crash:"), ("e", "plain:")];
    let lines: String = cases
        .iter()
        .map(|(id, input)| format!("{{\"id\": \"{id}\", \"input\": \"{input}\", \"expected\": \"done\"}}\n"))
        .collect();
    ws.write("cases.jsonl", &lines);
    let cfg = ws.write(
        "f.yaml",
        "name: finder\nbenchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, agent.py]\nbackend:\n  stop_after_identical_errors: 0\nstorage:\n  bundle_root: runs\n",
    );
    let (v, _, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["summary"]["tasks_finished"], 5, "{v} {}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap();
    let index = ws.index();
    let found = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["runs", "show", run, "--json", "--index", index.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = ws.run(&all);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["tasks"].as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(found(&["--tool", "search"]), ["a", "c"]);
    assert_eq!(found(&["--tool", "browse"]), ["b"]);
    assert!(found(&["--tool", "nothing"]).is_empty());
    assert_eq!(found(&["--ended-by", "agent_error"]), ["d"]);
    assert_eq!(found(&["--why", "WIDGET broke"]), ["d"], "the why, in any case");
    assert_eq!(found(&["--tool", "search", "--ended-by", "completed"]), ["a", "c"], "filters combine");
    let shown = text(&ws.run(&["runs", "show", run, "--tool", "browse", "--index", index.to_str().unwrap()]).stdout);
    assert!(shown.lines().any(|l| l.starts_with("b ")) && !shown.lines().any(|l| l.starts_with("a ")), "{shown}");
    let bad = ws.run(&["runs", "show", run, "--ended-by", "exploded", "--index", index.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}
