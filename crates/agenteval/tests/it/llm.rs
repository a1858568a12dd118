//! The `llm` agent and the LLM judges through the real binary, against the scripted mock server
//! (`agenteval_testkit::llm_mock`): tool calls, retries, limits, prices, cassettes, `replay`,
//! keys that never leak, and the transport rule.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;
use agenteval_testkit::llm_mock::{ECHOED_KEY, MockLlm};

const KEY: &str = "sk-test-THEREALKEYNEVERSHOWN0123456789";

/// A workspace with a secrets file holding the OpenAI and Anthropic keys.
fn workspace() -> Workspace {
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\nANTHROPIC_API_KEY={KEY}\n"));
    ws
}

fn cases(ws: &Workspace, inputs: &[(&str, &str)]) {
    let lines: String =
        inputs.iter().map(|(id, input)| format!("{}\n", serde_json::json!({"id": id, "input": input}))).collect();
    ws.write("cases.jsonl", &lines);
}

/// A config for the `llm` agent on `cases.jsonl`; `agent_extra` and `extra` are YAML lines
/// added to the agent and at the top level.
fn config(ws: &Workspace, name: &str, model: &str, base_url: &str, agent_extra: &str, extra: &str) -> PathBuf {
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: {model}\n  base_url: {base_url}\n  tools: [python]\n  max_attempts: 3\n{agent_extra}backend:\n  secrets_file: secrets.env\n  max_concurrent_jobs: 2\n{extra}"
        ),
    )
}

fn task(bundle: &Path, id: &str) -> serde_json::Value {
    read_json(&bundle.join("tasks").join(id).join("result.json"))
}

fn trace(bundle: &Path, id: &str) -> Vec<serde_json::Value> {
    crate::util::read_text(bundle.join("tasks").join(id).join("trace.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn bundle_of(v: &serde_json::Value) -> PathBuf {
    PathBuf::from(v["bundle"].as_str().unwrap())
}

#[test]
fn tool_calls_round_trip_on_both_providers_and_cost_is_tokens_times_price() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello")]);
    for (name, model, price) in
        [("oai", "openai:gpt-4o-mini", (0.15, 0.60)), ("ant", "anthropic:claude-3-5-haiku-20241022", (0.80, 4.00))]
    {
        let cfg = config(&ws, name, model, &mock.base_url(), "", "");
        let (v, code, out) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{name}: {v}\n{}", text(&out.stderr));
        let bundle = bundle_of(&v);
        let r = task(&bundle, "tool");
        assert_eq!(r["agent"]["final_answer"], "the tool said 42", "{name}: {r}");
        let kinds: Vec<String> =
            trace(&bundle, "tool").iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
        let want =
            ["cost.tick", "agent.tool_call", "agent.tool_result", "cost.tick", "agent.final_answer", "agent.terminal"];
        assert_eq!(&kinds[..6], want, "{name}: {kinds:?}");
        let result_ev = trace(&bundle, "tool").into_iter().find(|e| e["kind"] == "agent.tool_result").unwrap();
        assert_eq!(result_ev["payload"]["output"].as_str().unwrap().trim(), "42");
        // Two calls of 10 input and 5 output tokens, at the packaged price.
        let want_cost = 2.0 * (10.0 * price.0 + 5.0 * price.1) / 1e6;
        let cost = r["agent"]["total_cost_usd"].as_f64().unwrap();
        assert!((cost - want_cost).abs() < 1e-12, "{name}: cost {cost}, want {want_cost}");
        assert_eq!(r["agent"]["total_tokens"], 30);
        assert_eq!(task(&bundle, "plain")["agent"]["final_answer"], "echo: hello");
        assert!(bundle_file_exists(&bundle.join("tasks/tool/cassette.jsonl")), "every llm task keeps its calls");
        // Its calls went through the model gateway: each tick carries the gateway's record of it.
        let tick = trace(&bundle, "tool").into_iter().find(|e| e["kind"] == "cost.tick").unwrap();
        let wire = if name == "ant" { "anthropic.messages" } else { "openai.chat" };
        assert_eq!(tick["payload"]["wire"], wire, "{name}: {tick}");
        assert!(tick["payload"]["latency_ms"].is_u64(), "{name}: {tick}");
        assert_eq!(v["summary"]["cost_unknown_tasks"], serde_json::Value::Null, "{v}");
    }
    let anthropic = mock.received().into_iter().find(|r| r.path == "anthropic").unwrap();
    assert_eq!(anthropic.credential.as_deref(), Some(KEY), "Anthropic gets its key in x-api-key");
}

#[test]
fn rate_limits_and_server_errors_are_retried() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("limited", "RATE_LIMIT me"), ("flaky", "FAIL500 twice")]);
    let cfg = config(&ws, "retry", "openai:gpt-4o-mini", &mock.base_url(), "", "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = bundle_of(&v);
    assert_eq!(task(&bundle, "limited")["agent"]["final_answer"], "echo: RATE_LIMIT me");
    assert_eq!(task(&bundle, "flaky")["agent"]["final_answer"], "echo: FAIL500 twice");
    let calls = mock.received();
    let limited: Vec<_> = calls.iter().filter(|c| c.body.to_string().contains("RATE_LIMIT")).collect();
    assert_eq!(limited.iter().map(|c| c.status).collect::<Vec<_>>(), [429, 200]);
    let waited = limited[1].at - limited[0].at;
    assert!(waited >= Duration::from_millis(990), "Retry-After: 1 was not honoured: {waited:?}");
    let flaky: Vec<u16> = calls.iter().filter(|c| c.body.to_string().contains("FAIL500")).map(|c| c.status).collect();
    assert_eq!(flaky, [500, 500, 200]);
}

/// A provider that keeps failing after the retries is the infrastructure's failure (429, 5xx,
/// unreachable: `infra`, never a regression); one that refuses the request is the agent's (401,
/// 403, 400: `errored`).
#[test]
fn provider_failures_are_classified_infra_or_errored() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    let want = [
        ("c429", "ALWAYS429 slow down", "infra_failure"),
        ("c503", "ALWAYS503 down", "infra_failure"),
        ("c401", "ALWAYS401 who", "agent_error"),
        ("c403", "ALWAYS403 no", "agent_error"),
        ("c400", "ALWAYS400 bad", "agent_error"),
    ];
    cases(&ws, &want.iter().map(|(id, input, _)| (*id, *input)).collect::<Vec<_>>());
    let cfg = config(&ws, "classify", "openai:gpt-4o-mini", &mock.base_url(), "", "  stop_after_identical_errors: 0\n");
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = bundle_of(&v);
    for (id, _, ended) in want {
        let r = task(&bundle, id);
        assert_eq!(r["agent"]["terminated_by"], ended, "{id}: {r}\n{}", text(&out.stderr));
        // A refused key is the fault the client found, by its status; nothing else is one.
        let fault =
            if matches!(id, "c401" | "c403") { serde_json::json!("key_refused") } else { serde_json::Value::Null };
        assert_eq!(r["agent"]["fault"], fault, "{id}: {r}");
    }
    let calls = |tag: &str| mock.received().iter().filter(|c| c.body.to_string().contains(tag)).count();
    assert_eq!(calls("ALWAYS503"), 3, "a 5xx is retried up to max_attempts");
    assert_eq!(calls("ALWAYS401"), 1, "a refused key is not retried");
    assert_eq!((v["summary"]["infra"].as_u64(), v["summary"]["errored"].as_u64()), (Some(2), Some(3)), "{v}");
    // Nobody listening at all.
    cases(&ws, &[("gone", "hello")]);
    let cfg = config(&ws, "unreachable", "openai:gpt-4o-mini", "http://127.0.0.1:9/v1", "", "");
    let (v, _, _) = ws.submit(&cfg, &[]);
    let r = task(&bundle_of(&v), "gone");
    assert_eq!(r["agent"]["terminated_by"], "infra_failure", "{r}");
    assert!(r["agent"]["error"].as_str().unwrap().contains("cannot reach"), "{r}");
}

/// A key the provider refuses on every first task stops the run, naming `agent.secrets`.
#[test]
fn a_refused_key_stops_the_run_naming_agent_secrets() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    let inputs: Vec<(String, String)> = (0..8).map(|i| (format!("k{i}"), format!("ALWAYS401 q{i}"))).collect();
    cases(&ws, &inputs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect::<Vec<_>>());
    let cfg = config(&ws, "refused", "openai:gpt-4o-mini", &mock.base_url(), "", "");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    let last = err.lines().last().unwrap();
    assert!(last.starts_with("error: the agent cannot run: the model provider refused its key"), "{err}");
    assert!(last.contains("(fix `agent.secrets`: check the key the secret holds)"), "{last}");
}

#[test]
fn every_limit_stops_the_agent_with_its_own_reason() {
    let mock = MockLlm::start(Duration::ZERO);
    let slow = MockLlm::start(Duration::from_secs(3));
    let ws = workspace();
    let cases_for = |input: &str| cases(&ws, &[("t", input)]);
    let check = |name: &str, input: &str, base: &str, agent_extra: &str, want: &str| {
        cases_for(input);
        let cfg = config(&ws, name, "openai:gpt-4o-mini", base, agent_extra, "");
        let (v, _, out) = ws.submit(&cfg, &[]);
        let r = task(&bundle_of(&v), "t");
        assert_eq!(r["agent"]["terminated_by"], want, "{name}: {r}\n{}", text(&out.stderr));
        r
    };
    let r = check("turns", "LOOP forever", &mock.base_url(), "  max_turns: 3\n", "limit_turns");
    assert!(r["agent"]["error"].as_str().unwrap().contains("max_turns"), "{r}");
    check("tokens", "BIG spender", &mock.base_url(), "  limits: {max_tokens: 100000}\n", "limit_tokens");
    check("cost", "BIG spender", &mock.base_url(), "  limits: {max_cost_usd: 0.01}\n", "limit_cost");
    check("time", "hello", &slow.base_url(), "  limits: {max_wall_seconds: 1}\n", "limit_time");
    let r = check("garbage", "MALFORMED please", &mock.base_url(), "", "agent_error");
    assert!(r["agent"]["error"].as_str().unwrap().contains("cannot read"), "{r}");
}

#[test]
fn a_model_without_a_price_has_an_unknown_cost_and_refuses_a_cost_limit() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("t", "hello")]);
    let cfg = config(&ws, "unpriced", "openai-compatible:my-finetune", &mock.base_url(), "", "");
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["summary"]["cost_unknown_tasks"], 1, "{v}");
    assert_eq!(task(&bundle_of(&v), "t")["agent"]["cost_unknown"], true);
    let report = ws.run(&["report", v["run_id"].as_str().unwrap()]);
    assert!(text(&report.stdout).contains("unknown"), "{}", text(&report.stdout));
    // Never $0 where a task or a call is shown: unknown in text, null in JSON.
    let run = v["run_id"].as_str().unwrap();
    let table = text(&ws.run(&["runs", "show", run, "--tasks"]).stdout);
    let row = table.lines().find(|l| l.starts_with("t ")).unwrap_or_default();
    assert!(row.contains("unknown") && !row.contains("0.0000"), "{table}");
    let shown: serde_json::Value =
        serde_json::from_slice(&ws.run(&["runs", "show", run, "--tasks", "--json"]).stdout).unwrap();
    assert_eq!(shown["tasks"][0]["cost_usd"], serde_json::Value::Null, "{shown}");
    let one = text(&ws.run(&["show", run, "t"]).stdout);
    assert!(one.contains("$ unknown]") && !one.contains("$0.0000"), "{one}");

    let limited =
        config(&ws, "limited", "openai-compatible:my-finetune", &mock.base_url(), "  limits: {max_cost_usd: 1}\n", "");
    let out = ws.run(&["submit", "--config", limited.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("limited.yaml:7:") && err.contains("no price is known for `my-finetune`"), "{err}");
    let priced = config(
        &ws,
        "priced",
        "openai-compatible:my-finetune",
        &mock.base_url(),
        "  limits: {max_cost_usd: 1}\n  price: {input_per_mtok: 1, output_per_mtok: 2}\n",
        "",
    );
    let (v, code, _) = ws.submit(&priced, &[]);
    assert_eq!(code, 0, "{v}");
    let cost = task(&bundle_of(&v), "t")["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - (10.0 + 10.0) / 1e6).abs() < 1e-12, "{cost}");
}

#[test]
fn plain_http_to_a_remote_host_is_refused_at_load() {
    let ws = workspace();
    cases(&ws, &[("t", "hello")]);
    let cfg = config(&ws, "insecure", "openai-compatible:m", "http://10.1.2.3:8000/v1", "", "");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("insecure.yaml:8:") && err.contains("allow_insecure_http"), "{err}");
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_recorded_run_replays_exactly_without_the_model_and_a_changed_prompt_is_named() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello"), ("other", "bonjour")]);
    let cfg = config(&ws, "rec", "openai:gpt-4o-mini", &mock.base_url(), "  system: be brief\n", "");
    let tapes = ws.path().join("tapes");
    let (rec, code, _) = ws.submit(&cfg, &["--cassettes", tapes.to_str().unwrap(), "--cassette-mode", "record"]);
    assert_eq!(code, 0, "{rec}");
    assert!(tapes.join("tool.jsonl").is_file());
    let calls = mock.received().len();
    drop(mock);
    // CI has no keys: a strict replay needs none.
    let secrets = std::fs::read_to_string(ws.path().join("secrets.env")).unwrap();
    std::fs::write(ws.path().join("secrets.env"), "").unwrap();

    // Strict replay with the server gone: same answers, scores and tokens.
    let (rep, code, out) = ws.submit(&cfg, &["--cassettes", tapes.to_str().unwrap(), "--cassette-mode", "replay"]);
    assert_eq!(code, 0, "{rep}\n{}", text(&out.stderr));
    for id in ["tool", "plain", "other"] {
        let (a, b) = (task(&bundle_of(&rec), id), task(&bundle_of(&rep), id));
        for field in ["final_answer", "total_tokens", "total_cost_usd", "terminated_by"] {
            assert_eq!(a["agent"][field], b["agent"][field], "{id} {field}");
        }
        assert_eq!(a["scores"], b["scores"], "{id}");
    }
    assert_eq!(calls, 4, "the recording made 4 calls; the replay none (the server is gone)");

    // replay-or-live: a task without a recording goes to the model; the others do not.
    std::fs::write(ws.path().join("secrets.env"), &secrets).unwrap();
    let mock = MockLlm::start(Duration::ZERO);
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello"), ("other", "bonjour"), ("new", "fresh question")]);
    let live = config(&ws, "rec", "openai:gpt-4o-mini", &mock.base_url(), "  system: be brief\n", "");
    let (v, code, _) = ws.submit(&live, &["--cassettes", tapes.to_str().unwrap(), "--cassette-mode", "replay-or-live"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(task(&bundle_of(&v), "new")["agent"]["final_answer"], "echo: fresh question");
    assert_eq!(task(&bundle_of(&v), "tool")["agent"]["final_answer"], "the tool said 42");
    assert_eq!(mock.received().len(), 1, "only the unrecorded task reached the model");
    drop(mock);
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello"), ("other", "bonjour")]);

    // A changed system prompt in strict replay fails each task, naming the divergence.
    let changed = config(&ws, "rec", "openai:gpt-4o-mini", "http://127.0.0.1:9/v1", "  system: be verbose\n", "");
    let (v, code, out) = ws.submit(&changed, &["--cassettes", tapes.to_str().unwrap()]);
    let r = task(&bundle_of(&v), "plain");
    let err = r["agent"]["error"].as_str().unwrap();
    // The system prompt is the OpenAI wire's first message.
    assert!(err.contains("/messages/0/content") && err.contains("be brief") && err.contains("be verbose"), "{err}");
    assert_eq!(r["passed"], false);
    // A stale recording is its own outcome, not the agent's error, and the run is not a result:
    // exit 3 naming the cassette folder; compared with the good replay nothing regressed.
    assert_eq!(r["agent"]["terminated_by"], "replay_miss", "{r}");
    assert_eq!(code, 3, "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains("3 of 3 tasks have no matching recording") && last.contains(tapes.to_str().unwrap()),
        "{last}"
    );
    assert!(last.contains("stale"), "{last}");
    assert_eq!(v["summary"]["infra"], 3, "{v}");
    let cmp = ws.run(&["compare", rep["run_id"].as_str().unwrap(), v["run_id"].as_str().unwrap(), "--format", "json"]);
    let c: serde_json::Value =
        serde_json::from_slice(&cmp.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&cmp.stderr)));
    assert_eq!(c["comparison"]["regressions"], serde_json::json!([]), "{c}");
    assert_eq!(c["comparison"]["infra_failures"].as_array().unwrap().len(), 3, "{c}");
}

#[test]
fn replay_of_a_bundle_matches_and_names_the_task_a_changed_prompt_breaks() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello")]);
    let cfg = config(&ws, "fresh", "openai:gpt-4o-mini", &mock.base_url(), "  system: be brief\n", "");
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    drop(mock);
    // Replaying needs neither the model nor its key.
    std::fs::write(ws.path().join("secrets.env"), "").unwrap();

    let out = ws.run(&["replay", &run, "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!(r["match"], 2, "{r}");
    let out = ws.run(&["replay", &run]);
    assert!(text(&out.stdout).contains("MATCH        plain"), "{}", text(&out.stdout));

    let changed = config(&ws, "changed", "openai:gpt-4o-mini", "http://127.0.0.1:9/v1", "  system: be verbose\n", "");
    let out = ws.run(&["replay", &run, "--with-config", changed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("DIFFER       plain") && shown.contains("/messages/0/content"), "{shown}");
}

/// A recording kept in a repository (a bundle folder, no index) replays in CI with `--check`:
/// MATCH leaves nothing behind, even when an older agenteval recorded it; a new build of the
/// agent that changes its trajectory fails, naming the task and its first difference, and keeps
/// the replay to look at.
#[test]
fn replay_check_replays_a_recording_kept_in_a_repository_and_fails_a_changed_trajectory() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello")]);
    let cfg = config(&ws, "kept", "openai:gpt-4o-mini", &mock.base_url(), "  system: be brief\n", "");
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    drop(mock);
    // The bundle checked into a repository; the runs folder (index and all) gone.
    let kept = ws.path().join("repo/recordings/kept");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    let cp = std::process::Command::new("cp").arg("-a").arg(bundle_of(&v)).arg(&kept).status().unwrap();
    assert!(cp.success());
    std::fs::remove_dir_all(ws.runs()).unwrap();
    // Recorded by an older agenteval: said, not a failure.
    let meta_path = kept.join("metadata.json");
    let mut meta = read_json(&meta_path);
    meta["agenteval_version"] = "0.0.1".into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    std::fs::write(ws.path().join("secrets.env"), "").unwrap();

    let out = ws.run(&["replay", "--check", "repo/recordings/kept", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!((r["match"].as_u64(), r["replay_bundle"].is_null()), (Some(2), true), "{r}");
    assert!(r["code_changed"].as_str().unwrap_or_default().contains("0.0.1"), "{r}");
    assert!(!ws.runs().exists(), "a check leaves no runs folder behind");

    // A new build of the agent (its prompt changed) parts from the recording.
    let changed = config(&ws, "changed", "openai:gpt-4o-mini", "http://127.0.0.1:9/v1", "  system: be verbose\n", "");
    let out = ws.run(&["replay", "--check", "repo/recordings/kept", "--with-config", changed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("plain") && shown.contains("/messages/0/content"), "{shown}");
    let kept_at =
        shown.lines().find_map(|l| l.strip_prefix("the replay is kept in ")).unwrap_or_else(|| panic!("{shown}"));
    assert!(Path::new(kept_at).join("metadata.json").is_file(), "{shown}");
    assert!(!ws.runs().exists(), "{shown}");
    let _ = std::fs::remove_dir_all(Path::new(kept_at).parent().unwrap().parent().unwrap());

    // Not a bundle folder, and no index: said as such.
    let out = ws.run(&["replay", "--check", "repo/recordings/nothing"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn keys_and_key_like_answers_appear_nowhere() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("echo", "ECHO_KEY now"), ("t", "USE_TOOL please")]);
    let cfg = config(&ws, "leak", "openai:gpt-4o-mini", &mock.base_url(), "", "");
    let tapes = ws.path().join("tapes");
    let out = ws.run(&[
        "-vv",
        "submit",
        "--config",
        cfg.to_str().unwrap(),
        "--cassettes",
        tapes.to_str().unwrap(),
        "--cassette-mode",
        "record",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The server did get the key, and echoed it with a key-like string.
    let echo = mock.received().into_iter().find(|r| r.body.to_string().contains("ECHO_KEY")).unwrap();
    assert_eq!(echo.credential.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    let mut leaks = Vec::new();
    for root in [ws.runs(), tapes] {
        for file in walk(&root) {
            let bytes = std::fs::read(&file).unwrap();
            for needle in [KEY, ECHOED_KEY, "THEREALKEY", "MOCKLEAKEDKEY"] {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    leaks.push(format!("{} holds {needle}", file.display()));
                }
            }
        }
    }
    for stream in [&out.stdout, &out.stderr] {
        let t = text(stream);
        assert!(!t.contains("THEREALKEY") && !t.contains("MOCKLEAKEDKEY"), "{t}");
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
    let answer = task(&bundle_of(&serde_json::json!({"bundle": latest_bundle(&ws)})), "echo");
    assert!(answer["agent"]["final_answer"].as_str().unwrap().contains("[REDACTED]"), "{answer}");
}

fn latest_bundle(ws: &Workspace) -> String {
    let out = ws.run(&["runs", "list", "--json", "--limit", "1"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["bundle_uri"].as_str().unwrap_or_else(|| panic!("{v}")).to_string()
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() { stack.push(p) } else { out.push(p) }
        }
    }
    out
}

#[test]
fn judges_score_cache_and_an_optional_one_fails_without_failing_the_task() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("good", "JUDGE this GOOD ANSWER"), ("bad", "JUDGE this one")]);
    let judges = format!(
        "evaluators:\n  - kind: llm_rubric\n    model: openai:gpt-4o-mini\n    base_url: {0}\n    rubric: says something\n    cache_dir: judge-cache\n  - kind: llm_pass_fail\n    id: strict\n    model: anthropic:claude-3-5-haiku-latest\n    base_url: {0}\n    criteria: is polite\n    cache_dir: judge-cache\n  - kind: llm_rubric\n    id: down\n    model: openai:gpt-4o-mini\n    base_url: http://127.0.0.1:9/v1\n    max_attempts: 1\n    rubric: anything\n    optional: true\n",
        mock.base_url()
    );
    let cfg = config(&ws, "judged", "openai:gpt-4o-mini", &mock.base_url(), "", &judges);
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = bundle_of(&v);
    let scores = |id: &str| task(&bundle, id)["scores"].as_array().unwrap().clone();
    let by = |id: &str, ev: &str| scores(id).into_iter().find(|s| s["evaluator_id"] == ev).unwrap();
    assert_eq!(by("good", "llm_rubric")["score"], 0.9, "{}", text(&out.stderr));
    assert_eq!(by("good", "llm_rubric")["passed"], true);
    assert_eq!(by("bad", "llm_rubric")["passed"], false);
    assert_eq!(by("good", "strict")["passed"], true);
    assert!(by("good", "llm_rubric")["cost_usd"].as_f64().unwrap() > 0.0, "the judge's cost is its own");
    assert_eq!(by("good", "llm_rubric")["tokens"], 15, "the judge's tokens too");
    assert_eq!(task(&bundle, "good")["agent"]["total_tokens"], 15, "the agent's do not include the judges'");
    let down = by("good", "down");
    assert!(down["error"].is_string(), "{down}");
    assert_eq!(task(&bundle, "good")["passed"], true, "an optional judge that fails does not fail the task");
    assert_eq!(task(&bundle, "bad")["passed"], false);

    // Judging the same answers again is free and gives the same verdicts.
    let before = mock.received().len();
    let (v2, _, _) = ws.submit(&cfg, &[]);
    let again = task(&bundle_of(&v2), "good")["scores"].as_array().unwrap().clone();
    let rubric = again.iter().find(|s| s["evaluator_id"] == "llm_rubric").unwrap();
    assert_eq!(rubric["score"], 0.9);
    assert!(rubric.get("cost_usd").is_none(), "a cached verdict costs nothing: {rubric}");
    assert!(rubric["reason"].as_str().unwrap().contains("cached"), "{rubric}");
    assert_eq!(mock.received().len() - before, 2, "only the agent's two calls reach the model");

    // Another machine (a Fargate task) has no cache folder of its own: the verdicts kept in
    // the bundle store's shared objects serve it all the same.
    std::fs::remove_dir_all(ws.path().join("judge-cache")).unwrap();
    let shared: Vec<_> = std::fs::read_dir(ws.path().join("runs/.shared/judge")).unwrap().flatten().collect();
    assert!(shared.len() >= 4, "every verdict is kept beside the runs: {}", shared.len());
    let before = mock.received().len();
    let (v3, _, _) = ws.submit(&cfg, &[]);
    let third = task(&bundle_of(&v3), "good")["scores"].as_array().unwrap().clone();
    let rubric = third.iter().find(|s| s["evaluator_id"] == "llm_rubric").unwrap();
    assert!(rubric["reason"].as_str().unwrap().contains("cached"), "{rubric}");
    assert_eq!(mock.received().len() - before, 2, "the shared verdicts spared the judges' calls");
    // The shared folder is beside the runs, not one of them.
    let listed: serde_json::Value = serde_json::from_slice(&ws.run(&["runs", "list", "--json"]).stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    let out = ws.run(&["index", "rebuild", "--bundles", "runs", "--index", "rebuilt.sqlite"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// The red team's attack: the same wrong answer, padded so that the judge refuses it (HTTP 400,
/// as past its context). A judge's failure is the grading's, and a task whose grading failed
/// does not pass, unless the config marked that judge `optional`.
#[test]
fn a_judge_the_agent_makes_fail_never_passes_a_wrong_answer() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    ws.write(
        "padder.py",
        "import json, sys\nreq = json.loads(sys.stdin.readline())\nanswer = 'GOOD ANSWER ' + 'pad ' * 2000 + 'ALWAYS400'\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': answer}}))\n",
    );
    ws.write("cases.jsonl", "{\"id\": \"q\", \"input\": \"JUDGE: what is 2+2?\"}\n");
    for (optional, passes) in [(false, false), (true, true)] {
        let cfg = ws.write(
            "padded.yaml",
            &format!(
                "name: padded\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent: {{kind: command, command: [python3, padder.py]}}\nevaluators:\n  - kind: llm_pass_fail\n    model: openai:gpt-4o-mini\n    base_url: {}\n    max_attempts: 1\n    criteria: says 4\n    optional: {optional}\nbackend:\n  secrets_file: secrets.env\n",
                mock.base_url()
            ),
        );
        let (v, _, out) = ws.submit(&cfg, &[]);
        let r = task(&bundle_of(&v), "q");
        let judge = r["scores"].as_array().unwrap().iter().find(|s| s["kind"] == "llm_pass_fail").cloned().unwrap();
        assert!(judge["error"].as_str().unwrap_or_default().contains("HTTP 400"), "{judge}\n{}", text(&out.stderr));
        assert_eq!(r["passed"], passes, "optional: {optional}: {r}");
    }
    // Cut to its first 100 characters, the padding never reaches the judge; the cut is said.
    let cfg = ws.write(
        "cut.yaml",
        &format!(
            "name: cut\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent: {{kind: command, command: [python3, padder.py]}}\nevaluators:\n  - kind: llm_pass_fail\n    model: openai:gpt-4o-mini\n    base_url: {}\n    max_attempts: 1\n    criteria: says 4\n    max_answer_chars: 100\nbackend:\n  secrets_file: secrets.env\n",
            mock.base_url()
        ),
    );
    let (v, _, _) = ws.submit(&cfg, &[]);
    let r = task(&bundle_of(&v), "q");
    let judge = r["scores"].as_array().unwrap().iter().find(|s| s["kind"] == "llm_pass_fail").cloned().unwrap();
    assert!(judge["error"].is_null(), "{judge}");
    assert!(judge["reason"].as_str().unwrap().ends_with("(answer cut to its first 100 of 8021 characters)"), "{judge}");
}

#[test]
fn a_missing_key_is_a_usage_error_before_anything_starts() {
    let ws = Workspace::new();
    ws.write("secrets.env", "SOMETHING_ELSE=1\n");
    cases(&ws, &[("t", "hello")]);
    let judge =
        "evaluators:\n  - kind: llm_pass_fail\n    model: anthropic:claude-3-5-haiku-latest\n    criteria: polite\n";
    let cfg = config(&ws, "nokey", "openai:gpt-4o-mini", "https://api.openai.com/v1", "", judge);
    let out = ws
        .cmd(&["submit", "--config", cfg.to_str().unwrap()])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("`OPENAI_API_KEY`") && err.contains("`ANTHROPIC_API_KEY`") && err.contains("llm_pass_fail"),
        "{err}"
    );
    assert!(!ws.runs().exists(), "nothing was created");
    let out = ws
        .cmd(&["doctor", "--config", cfg.to_str().unwrap()])
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stdout).contains("FAIL secret OPENAI_API_KEY"), "{}", text(&out.stdout));
}

fn task_spans(bundle: &Path, id: &str) -> Vec<serde_json::Value> {
    crate::util::read_text(bundle.join("tasks").join(id).join("spans.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every model call, the agent's and the judge's, is a GenAI `chat` span with its provider,
/// model, usage and finish reason; each tool call an `execute_tool` span with its call id. What
/// was said is on them only when the run asks (`telemetry.capture_content`), and redacted.
#[test]
fn model_calls_follow_the_genai_conventions_and_carry_content_only_when_asked() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("tool", "USE_TOOL please"), ("key", "ECHO_KEY now")]);
    let judge = format!(
        "evaluators:\n  - kind: llm_pass_fail\n    model: anthropic:claude-3-5-haiku-latest\n    base_url: {}\n    criteria: is polite\n    cache_dir: judge-cache\n",
        mock.base_url()
    );
    let agent = "  system: You are terse.\n";
    for capture in [false, true] {
        let extra = format!("{judge}telemetry:\n  capture_content: {capture}\n");
        let cfg = config(&ws, &format!("semconv-{capture}"), "openai:gpt-4o-mini", &mock.base_url(), agent, &extra);
        let (v, code, out) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
        let bundle = bundle_of(&v);
        let spans = task_spans(&bundle, "tool");
        let named = |n: &str| spans.iter().filter(|s| s["name"] == n).collect::<Vec<_>>();
        let chats = named("chat gpt-4o-mini");
        assert_eq!(chats.len(), 2, "two agent calls: {spans:?}");
        for c in &chats {
            let a = &c["attributes"];
            assert_eq!(c["kind"], "client");
            assert_eq!(a["gen_ai.operation.name"], "chat");
            assert_eq!(a["gen_ai.provider.name"], "openai");
            assert_eq!(a["gen_ai.request.model"], "gpt-4o-mini");
            assert_eq!(a["gen_ai.usage.input_tokens"], 10);
            assert_eq!(a["gen_ai.usage.output_tokens"], 5);
            assert!(a["gen_ai.response.finish_reasons"].as_array().is_some_and(|r| r.len() == 1), "{a}");
            assert!(a["agenteval.cost_usd"].as_f64().unwrap() > 0.0);
            assert_eq!(a.get("gen_ai.input.messages").is_some(), capture, "{a}");
            assert_eq!(a.get("gen_ai.output.messages").is_some(), capture, "{a}");
        }
        let tool = named("execute_tool python");
        assert_eq!(tool.len(), 1, "{spans:?}");
        let ta = &tool[0]["attributes"];
        assert_eq!(ta["gen_ai.operation.name"], "execute_tool");
        assert_eq!(ta["gen_ai.tool.name"], "python");
        assert!(ta["gen_ai.tool.call.id"].as_str().is_some_and(|id| !id.is_empty()), "{ta}");
        assert_eq!(ta.get("gen_ai.tool.call.arguments").is_some(), capture, "{ta}");
        let agent_span = named("agent.execute");
        assert_eq!(agent_span[0]["attributes"]["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(agent_span[0]["attributes"]["gen_ai.provider.name"], "openai");
        let judge_chat = named("chat claude-3-5-haiku-latest");
        {
            // The mock gives no verdict for this task: the judge asks twice, two spans.
            assert_eq!(judge_chat.len(), 2, "each of the judge's calls is a span: {spans:?}");
            let ja = &judge_chat[0]["attributes"];
            assert_eq!(ja["gen_ai.provider.name"], "anthropic");
            assert_eq!(ja["gen_ai.usage.input_tokens"], 10);
            assert!(ja["gen_ai.response.finish_reasons"].is_string(), "{ja}");
        }
        if capture {
            let first =
                &chats.iter().min_by_key(|c| c["start_time"].as_str().unwrap().to_string()).unwrap()["attributes"];
            let input: serde_json::Value =
                serde_json::from_str(first["gen_ai.input.messages"].as_str().unwrap()).unwrap();
            assert_eq!(input[0]["role"], "user");
            assert_eq!(input[0]["parts"][0]["content"], "USE_TOOL please");
            let system: serde_json::Value =
                serde_json::from_str(first["gen_ai.system_instructions"].as_str().unwrap()).unwrap();
            assert_eq!(system[0]["content"], "You are terse.");
            let output: serde_json::Value =
                serde_json::from_str(first["gen_ai.output.messages"].as_str().unwrap()).unwrap();
            assert_eq!(output[0]["parts"][0]["type"], "tool_call", "{output}");
            assert_eq!(output[0]["finish_reason"], "tool_call");
            assert_eq!(ta["gen_ai.tool.call.result"].as_str().unwrap().trim(), "42");
            // The key the model echoed is redacted on spans as everywhere.
            let all = crate::util::read_text(bundle.join("tasks/key/spans.jsonl")).unwrap();
            assert!(all.contains("gen_ai.output.messages"), "{all}");
            assert!(!all.contains(KEY) && !all.contains(ECHOED_KEY), "a key reached the spans: {all}");
        }
    }
}

/// Traces in (issue 74): a run's traces exported as OTLP JSON lines and imported back with the
/// run's config are a run of its tasks whose answers and tool calls come from the spans alone;
/// `regrade` grades them as the run itself was graded. Importing again changes nothing; a file
/// that is not OTLP is named by line, one whose spans name no task says what to set.
#[test]
fn traces_exported_and_imported_back_are_graded_by_regrade_as_the_run_was() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    ws.write(
        "cases.jsonl",
        "{\"id\": \"tool\", \"input\": \"USE_TOOL please\", \"expected\": \"the tool said 42\"}\n{\"id\": \"plain\", \"input\": \"hello\", \"expected\": \"not what it says\"}\n",
    );
    let extra = "evaluators:\n  - kind: exact_match\n  - kind: tool_calls\n    calls: [{tool: python}]\ntelemetry:\n  capture_content: true\n";
    let cfg = config(&ws, "traced", "openai:gpt-4o-mini", &mock.base_url(), "", extra);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let run = v["run_id"].as_str().unwrap().to_string();
    let verdicts = |bundle: &Path| -> Vec<(String, bool, String)> {
        ["plain", "tool"]
            .iter()
            .map(|id| {
                let r = task(bundle, id);
                let answer = r["agent"]["final_answer"].as_str().unwrap_or_default().to_string();
                (id.to_string(), r["passed"].as_bool().unwrap(), answer)
            })
            .collect()
    };
    let original = verdicts(&bundle_of(&v));
    assert_eq!((original[0].1, original[1].1), (false, true), "{original:?}");
    let file = ws.path().join("traces.jsonl");
    let out = ws.run(&["export", &run, "--to", "otlp", "--out", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let import =
        |f: &Path| ws.run(&["import", "otlp", f.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--json"]);
    let out = import(&file);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let imported: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((imported["tasks"].as_u64(), imported["already"].as_bool()), (Some(2), Some(false)), "{imported}");
    let imported_bundle = std::path::PathBuf::from(imported["bundle"].as_str().unwrap());
    // The answers came from the spans alone, and the tool call with its arguments.
    assert_eq!(
        verdicts(&imported_bundle).iter().map(|v| v.2.clone()).collect::<Vec<_>>(),
        [original[0].2.clone(), original[1].2.clone()]
    );
    let steps = trace(&imported_bundle, "tool");
    let call = steps.iter().find(|e| e["kind"] == "agent.tool_call").expect("the tool call");
    assert_eq!(call["payload"]["tool"], "python", "{call}");
    assert!(call["payload"]["arguments"]["code"].is_string(), "{call}");
    // Graded again, from the traces: the run's own verdicts.
    let rid = imported["run_id"].as_str().unwrap().to_string();
    let out = ws.run(&["regrade", &rid, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let regraded: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdicts(&bundle_of(&regraded)), original, "the traces graded as the run was");
    // Again: nothing new.
    let again: serde_json::Value = serde_json::from_slice(&import(&file).stdout).unwrap();
    assert_eq!((again["already"].as_bool(), again["run_id"].clone()), (Some(true), imported["run_id"].clone()));
    // Not OTLP: named by line and column, exit 2; spans that name no task: what to set.
    let bad = ws.write("bad.jsonl", "{\"resourceSpans\": []}\n{\"resourceSpans\": 7}\n");
    let out = import(&bad);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("bad.jsonl:2:"), "{}", text(&out.stderr));
    let none = ws.write("none.jsonl", "{\"resourceSpans\": []}\n");
    let out = import(&none);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("agenteval.task.id"), "{}", text(&out.stderr));
    let out = ws.run(&["import", "otlp", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "--config is needed: {}", text(&out.stderr));
}

/// The judge's part of a call: the user message of a chat request (OpenAI puts the system
/// prompt first).
fn user_text(body: &serde_json::Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

fn score<'a>(result: &'a serde_json::Value, kind: &str) -> &'a serde_json::Value {
    result["scores"].as_array().unwrap().iter().find(|s| s["kind"] == kind).unwrap_or_else(|| panic!("{result}"))
}

#[test]
fn a_pairwise_judge_asks_in_both_orders_and_calls_a_disagreement_a_tie() {
    let mock = MockLlm::start(Duration::ZERO);
    let url = mock.base_url();
    let ws = workspace();
    cases(&ws, &[("better", "SAY_MODEL q1"), ("biased", "SAY_MODEL POSITION_BIAS q2")]);
    let base = config(&ws, "pair", "openai:gpt-4o-mini", &url, "  system: plain\n", "");
    let (v, code, out) = ws.submit(&base, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let base_id = v["run_id"].as_str().unwrap().to_string();
    let judge = |baseline: &str| {
        format!(
            "evaluators:\n  - kind: llm_pairwise\n    baseline: {baseline}\n    criteria: the more helpful answer\n    model: openai:judge-1\n    base_url: {url}\n    cache_dir: judge-cache\n"
        )
    };
    let cand = config(&ws, "pair", "openai:gpt-4o-mini", &url, "  system: GOOD\n", &judge("latest:pair"));
    let (v, code, out) = ws.submit(&cand, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = bundle_of(&v);
    // The reference was resolved once, at submit: the workers read that run's bundle.
    let resolved = read_json(&bundle.join("config.resolved.json"));
    assert_eq!(resolved["evaluators"][0]["baseline"], base_id.as_str(), "{resolved}");

    let better = task(&bundle, "better");
    let s = score(&better, "llm_pairwise");
    assert_eq!(s["score"], 1.0, "{s}");
    assert_eq!(s["passed"], true);
    assert!(s["reason"].as_str().unwrap().starts_with("both orders prefer this run's answer"), "{s}");
    let biased = task(&bundle, "biased");
    let s = score(&biased, "llm_pairwise");
    assert_eq!(s["score"], 0.5, "a judge that always picks A is a tie: {s}");
    assert!(s["reason"].as_str().unwrap().contains("the two orders disagree"), "{s}");

    // The swap, in the calls the judge made: this run's answer first as A, then as B.
    let asked: Vec<String> = mock
        .received()
        .iter()
        .filter(|c| c.body["model"] == "judge-1")
        .map(|c| user_text(&c.body))
        .filter(|t| t.contains("SAY_MODEL q1"))
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let ours = "model=gpt-4o-mini system=GOOD";
    let theirs = "model=gpt-4o-mini system=plain";
    assert!(asked[0].contains(&format!("## Answer A\n{ours}\n\n## Answer B\n{theirs}")), "{}", asked[0]);
    assert!(asked[1].contains(&format!("## Answer A\n{theirs}\n\n## Answer B\n{ours}")), "{}", asked[1]);

    // The same judge in `compare`: the `pairwise` metric and the tally, with its key from the
    // environment.
    ws.write(
        "judge.yaml",
        &format!(
            "model: openai:judge-1\nbase_url: {url}\ncriteria: the more helpful answer\ncache_dir: compare-cache\n"
        ),
    );
    let cand_id = v["run_id"].as_str().unwrap().to_string();
    let compare = |extra: &[&str]| {
        let mut args = vec!["compare", &base_id, &cand_id, "--pairwise", "judge.yaml"];
        args.extend_from_slice(extra);
        ws.cmd(&args).env("OPENAI_API_KEY", KEY).output().unwrap()
    };
    let out = compare(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("pairwise judge openai:judge-1: 1 wins, 1 ties, 0 losses for the candidate"),
        "{}",
        text(&out.stdout)
    );
    let out = compare(&["--format", "json"]);
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = c["comparison"]["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "pairwise").unwrap().clone();
    assert_eq!(m["cand"], 0.75, "{m}");
    assert_eq!(c["comparison"]["pairwise"]["wins"], 1, "{c}");
    // Without its key, or with a bad file: one line naming what to fix, exit 2.
    let out = ws
        .cmd(&["compare", &base_id, &cand_id, "--pairwise", "judge.yaml"])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("OPENAI_API_KEY"), "{}", text(&out.stderr));
    ws.write("bad-judge.yaml", "model: openai:judge-1\ncriteria: 3\nbase_url: ftp://x\n");
    let out = ws.run(&["compare", &base_id, &cand_id, "--pairwise", "bad-judge.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("bad-judge.yaml:2:"), "{}", text(&out.stderr));

    // A baseline the index does not know: exit 2 before any run, naming the evaluator.
    let runs_before = std::fs::read_dir(ws.path().join("runs")).unwrap().count();
    let missing = config(&ws, "pair2", "openai:gpt-4o-mini", &url, "", &judge("latest:nobody"));
    let out = ws.run(&["submit", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("evaluators[0] (llm_pairwise) baseline `latest:nobody`"), "{err}");
    assert_eq!(std::fs::read_dir(ws.path().join("runs")).unwrap().count(), runs_before);
    assert!(!err.contains(KEY));
}

#[test]
fn a_judge_sees_the_expected_answer_and_the_steps_only_when_asked() {
    let mock = MockLlm::start(Duration::ZERO);
    let url = mock.base_url();
    let ws = workspace();
    ws.write(
        "cases.jsonl",
        &format!(
            "{}\n",
            serde_json::json!({"id": "t", "input": "USE_TOOL then JUDGE GOOD ANSWER", "expected": "forty-two"})
        ),
    );
    let rubric = |include: &str| {
        format!(
            "evaluators:\n  - kind: llm_rubric\n    rubric: right and shown\n    model: openai:judge-1\n    base_url: {url}\n    cache_dir: judge-cache\n{include}"
        )
    };
    let with = config(&ws, "inc", "openai:gpt-4o-mini", &url, "", &rubric("    include: [expected, steps]\n"));
    let (v, code, out) = ws.submit(&with, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let without = config(&ws, "plain", "openai:gpt-4o-mini", &url, "", &rubric(""));
    ws.submit(&without, &[]);
    let prompts: Vec<String> =
        mock.received().iter().filter(|c| c.body["model"] == "judge-1").map(|c| user_text(&c.body)).collect();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    let shown = &prompts[0];
    assert!(shown.contains("## Expected answer\nforty-two\n"), "{shown}");
    assert!(
        shown.contains("## Steps the agent took\n1. called python {\"code\":\"print(6 * 7)\"}\n   -> 42"),
        "{shown}"
    );
    assert!(!prompts[1].contains("## Expected answer") && !prompts[1].contains("## Steps"), "{}", prompts[1]);
    // `steps` is for judges of one answer: a config error with its position.
    let bad = config(
        &ws,
        "bad",
        "openai:gpt-4o-mini",
        &url,
        "",
        &format!(
            "evaluators:\n  - kind: llm_pairwise\n    baseline: latest:inc\n    criteria: x\n    model: openai:judge-1\n    base_url: {url}\n    include: [steps]\n"
        ),
    );
    let out = ws.run(&["submit", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("bad.yaml:") && text(&out.stderr).contains("`steps` is for llm_rubric"),
        "{}",
        text(&out.stderr)
    );
}

/// `regrade`: the recorded answers graded again with an added and a changed evaluator; no agent
/// runs (the model gets no call, and the agent's key is not even needed).
#[test]
fn regrade_grades_the_recorded_answers_again_without_running_the_agent() {
    let mock = MockLlm::start(Duration::ZERO);
    let url = mock.base_url();
    let ws = workspace();
    cases(&ws, &[("a", "hello 1"), ("b", "hello 2"), ("c", "hello 3")]);
    let evaluators = "evaluators:\n  - kind: contains\n    value: echo\n";
    let cfg = config(&ws, "graded", "openai:gpt-4o-mini", &url, "", evaluators);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let first = v["run_id"].as_str().unwrap().to_string();
    let calls = mock.received().len();
    assert_eq!(calls, 3);
    // No key anywhere now: a regrade needs none (the judges would need theirs).
    ws.write("secrets.env", "");
    let more = format!("{evaluators}  - kind: regex\n    pattern: '^echo: hello [12]$'\n");
    let regrading = config(&ws, "graded-2", "openai:gpt-4o-mini", &url, "", &more);
    let out = ws
        .cmd(&["regrade", &first[..13], "--config", regrading.to_str().unwrap(), "--json"])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(mock.received().len(), calls, "a regrade started an agent");
    let second = v["run_id"].as_str().unwrap().to_string();
    let (old, new) = (ws.path().join("runs").join(&first), bundle_of(&v));
    assert_eq!(read_json(&new.join("metadata.json"))["regrade_of"], first.as_str());
    assert_eq!(read_json(&new.join("metadata.json"))["name"], "graded [llm · openai:gpt-4o-mini] (regrade)");
    for id in ["a", "b", "c"] {
        let (was, now) = (task(&old, id), task(&new, id));
        assert_eq!(was["agent"]["final_answer"], now["agent"]["final_answer"], "the same answer");
        assert_eq!(was["agent"]["total_tokens"], now["agent"]["total_tokens"]);
        let regex = score(&now, "regex");
        assert_eq!(regex["passed"], id != "c", "{now}");
        // The trace is the recorded one, then the new scores.
        let kinds: Vec<String> = trace(&new, id).iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
        assert!(kinds.starts_with(&["cost.tick".to_string(), "agent.final_answer".into()]), "{kinds:?}");
        assert_eq!(kinds.iter().filter(|k| *k == "evaluator.score").count(), 3, "{kinds:?}");
    }
    let out = ws.run(&["validate-bundle", new.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // compare: the agent did the same; only the grading moved (and the new evaluator is named).
    let out = ws.run(&["compare", &first, &second, "--format", "json"]);
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &c["comparison"];
    assert_eq!(c["scores_added"], serde_json::json!(["regex"]), "{c}");
    for m in c["metrics"].as_array().unwrap() {
        let moved = m["diff"]["mean"].as_f64().is_some_and(|d| d != 0.0);
        assert_eq!(moved, m["metric"] == "pass_rate", "only the pass rate moves (task c fails the regex): {m}");
    }
    let shown = text(&ws.run(&["compare", &first, &second]).stdout);
    assert!(shown.contains("evaluators only the candidate has (not compared): regex"), "{shown}");

    // `--set` on the recorded config; a regrade of a regrade is refused.
    let out = ws.run(&["regrade", &first, "--set", "evaluators.0.value=nowhere", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["passed"], 0, "{v}");
    let out = ws.run(&["regrade", &second]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is itself a regrade"), "{}", text(&out.stderr));
    let out = ws.run(&["regrade", &first, "--set", "evaluators.0.bogus=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Whether a text shows an unknown cost as a number: `0.0000` (or `$0.00`) anywhere.
fn shows_zero_cost(text: &str) -> bool {
    text.contains("0.0000") || text.contains("$0.00")
}

/// The cost fields of a JSON document that hold a number where the cost is unknown: every key
/// naming a cost (`cost_usd`, `total_cost_usd`, …) must be `null` or absent, never `0`.
fn zero_costs(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let here = format!("{at}/{k}");
                if k.contains("cost") && !k.contains("unknown") && v.as_f64() == Some(0.0) {
                    out.push(here.clone());
                }
                zero_costs(v, &here, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| zero_costs(v, &format!("{at}/{i}"), out)),
        _ => {}
    }
}

/// What in a JSON output (one document, or one per line) reads an unknown cost as 0.
fn zero_cost_json(what: &str, text: &str) -> Vec<String> {
    let docs: Vec<serde_json::Value> = match serde_json::from_str(text) {
        Ok(v) => vec![v],
        Err(_) => text.lines().filter(|l| !l.trim().is_empty()).filter_map(|l| serde_json::from_str(l).ok()).collect(),
    };
    if docs.is_empty() {
        return vec![format!("{what} printed no JSON: {text}")];
    }
    let mut found = vec![];
    docs.iter().for_each(|v| zero_costs(v, "", &mut found));
    found.into_iter().map(|at| format!("{what}: {at} is 0")).collect()
}

/// Issue 58: a run whose costs are unknown (a model without a price) says so in every output:
/// `unknown` in text, `null` in JSON, never `0.0000` or `0.0`.
#[test]
fn every_output_of_a_run_with_unknown_costs_says_unknown_never_zero() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("t", "hello"), ("u", "USE_TOOL please")]);
    let cfg = config(&ws, "unpriced", "openai-compatible:my-finetune", &mock.base_url(), "", "");
    let mut wrong = vec![];
    let mut check_text = |what: &str, body: &str| {
        let lines: Vec<&str> = body.lines().filter(|l| shows_zero_cost(l)).collect();
        if !lines.is_empty() {
            wrong.push(format!("{what}:\n{}", lines.join("\n")));
        }
    };
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    check_text("submit", &text(&out.stdout));
    let (v, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let bundle = bundle_of(&v);

    let texts: &[&[&str]] = &[
        &["status", &run],
        &["runs", "list"],
        &["runs", "show", &run],
        &["runs", "show", &run, "--tasks"],
        &["runs", "show", &run, "--tasks", "--full"],
        &["show", &run, "t"],
        &["show", &run, "u", "--full"],
        &["report", &run],
        &["report", &run, "--format", "md"],
        &["report", &run, "--format", "html"],
        &["compare", &run, &run],
    ];
    for args in texts {
        let out = ws.run(args);
        assert!(out.status.success() || args[0] == "compare", "{args:?}: {}", text(&out.stderr));
        check_text(&format!("{args:?}"), &text(&out.stdout));
    }
    for file in ["report.md", "report.html"] {
        if let Ok(body) = read_text(bundle.join(file)) {
            check_text(file, &body);
        }
    }
    // The page as a browser builds it: its scripts render the costs.
    let page = ws.path().join("report.html");
    let out = ws.run(&["report", &run, "-o", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (dom, _) = crate::util::ui::browse(&format!("file://{}", page.display()), None);
    assert!(dom.contains("unknown"), "{dom}");
    check_text("report.html in a browser", &dom);
    let index = ws.index();
    let ui = crate::util::ui::UiServer::start(ws.cmd(&["ui", "--index", index.to_str().unwrap(), "--port", "0"]));
    for page in ["/", &format!("/runs/{run}"), &format!("/runs/{run}/tasks/u")] {
        let r = ui.get(page);
        assert_eq!(r.status, 200, "{page}: {}", r.body);
        check_text(&format!("ui {page}"), &r.body);
    }
    let (dom, _) = crate::util::ui::browse(&ui.page(&format!("/runs/{run}")), None);
    check_text("the ui's run page in a browser", &dom);

    wrong.extend(zero_cost_json("submit --json", &v.to_string()));
    let jsons: &[&[&str]] = &[
        &["status", &run, "--json"],
        &["runs", "list", "--json"],
        &["runs", "show", &run, "--json"],
        &["runs", "show", &run, "--tasks", "--json"],
        &["show", &run, "u", "--json"],
        &["report", &run, "--json"],
        &["compare", &run, &run, "--json"],
    ];
    for args in jsons {
        wrong.extend(zero_cost_json(&format!("{args:?}"), &text(&ws.run(args).stdout)));
    }
    for file in ["summary.json", "results.jsonl", "tasks/t/result.json", "tasks/u/result.json", "tasks/u/trace.jsonl"] {
        wrong.extend(zero_cost_json(file, &read_text(bundle.join(file)).unwrap()));
    }
    for api in ["/api/runs", &format!("/api/runs/{run}"), &format!("/api/runs/{run}/tasks/u")] {
        let r = ui.get(api);
        assert_eq!(r.status, 200, "{api}: {}", r.body);
        wrong.extend(zero_cost_json(api, &r.body));
    }
    assert!(wrong.is_empty(), "an unknown cost reads as zero:\n{}", wrong.join("\n---\n"));
}

/// Issue 58: a run's default name carries the model the command line chose, so two models'
/// runs are two histories; `--name` names it; `--try` keeps a run out of its name's history,
/// `latest:NAME` and baselines.
#[test]
fn runs_are_named_for_the_model_chosen_and_a_try_stays_out_of_the_history() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("t", "hello")]);
    let cfg = config(&ws, "nightly", "openai:gpt-4o-mini", &mock.base_url(), "", "");
    let name_of = |v: &serde_json::Value| {
        let shown = ws.run(&["runs", "show", v["run_id"].as_str().unwrap(), "--json"]);
        serde_json::from_slice::<serde_json::Value>(&shown.stdout).unwrap()["run"]["name"].as_str().unwrap().to_string()
    };
    let (plain, code, _) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{plain}");
    assert_eq!(name_of(&plain), "nightly [llm · openai:gpt-4o-mini]");
    let (other, _, _) = ws.submit(&cfg, &["--model", "anthropic:claude-3-5-haiku-20241022"]);
    assert_eq!(name_of(&other), "nightly [llm · anthropic:claude-3-5-haiku-20241022]");
    let (named, _, _) = ws.submit(&cfg, &["--model", "anthropic:claude-3-5-haiku-20241022", "--name", "nightly-haiku"]);
    assert_eq!(name_of(&named), "nightly-haiku");
    let (tried, code, _) = ws.submit(&cfg, &["--try"]);
    assert_eq!(code, 0, "{tried}");
    assert_eq!(name_of(&tried), "nightly [llm · openai:gpt-4o-mini] (try)");
    // The newest run is the try, yet the model's latest is still the plain one.
    let st: serde_json::Value =
        serde_json::from_slice(&ws.run(&["status", "latest:nightly [llm · openai:gpt-4o-mini]", "--json"]).stdout)
            .unwrap();
    assert_eq!(st["run"]["run_id"], plain["run_id"], "{st}");
    // The config's name alone stands for two models' runs here: it names both, and picks none.
    let out = ws.run(&["status", "latest:nightly"]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("2 agents") && said.contains("latest:nightly [llm · anthropic"), "{said}");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--name", " "]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Issue 59: the `llm` agent's `openai:` model served by an Azure OpenAI resource (the stand-in
/// answers Azure's paths and refuses a call without its `api-key`): the calls reach the
/// deployment, metered from the resource's usage at the model's price, the key never in the
/// bundle.
#[test]
fn the_llm_agent_reaches_an_azure_resource_through_the_gateway_metered() {
    const AZURE_KEY: &str = "azure-key-THEREALAZUREKEY0123456789";
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("AZURE_OPENAI_API_KEY={AZURE_KEY}\n"));
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello")]);
    let cfg = ws.write(
        "azure.yaml",
        &format!(
            "name: azure\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: openai:gpt-5\n  tools: [python]\n  azure:\n    base_url: http://{}\n    deployments: {{gpt-5: eval-gpt5}}\n  limits: {{max_cost_usd: 1}}\nbackend:\n  secrets_file: secrets.env\n",
            mock.addr
        ),
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = bundle_of(&v);
    let r = task(&bundle, "tool");
    assert_eq!(r["agent"]["final_answer"], "the tool said 42", "{r}");
    let got = mock.received();
    assert!(got.iter().all(|c| c.path == "azure-v1:chat" && c.body["model"] == "eval-gpt5"), "{got:?}");
    assert!(got.iter().all(|c| c.credential.as_deref() == Some(&format!("api-key {AZURE_KEY}"))), "{got:?}");
    // Two calls of 10 input and 5 output tokens, at gpt-5's packaged price.
    let cost = r["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - 2.0 * (10.0 * 1.25 + 5.0 * 10.0) / 1e6).abs() < 1e-12, "{r}");
    assert_eq!(r["agent"]["total_tokens"], 30);
    for file in ["tasks/tool/trace.jsonl", "tasks/tool/cassette.jsonl", "tasks/tool/worker.log"] {
        let body = read_text(bundle.join(file)).unwrap_or_default();
        assert!(!body.contains(AZURE_KEY), "{file} holds the key");
    }
    // `doctor` asks the resource where its v1 API lists models.
    let out = ws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    let said = text(&out.stdout);
    assert!(out.status.success() && said.contains("model endpoint azure"), "{said}\n{}", text(&out.stderr));
    // Without its credential the resource is not asked at all: the secret is missing at submit.
    ws.write("secrets.env", "");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("AZURE_OPENAI_API_KEY"), "{}", text(&out.stderr));
}

/// Issue 59: the `llm` agent on Amazon Bedrock: its Messages calls reach the stand-in as
/// `InvokeModel` for the mapped model id, SigV4-signed for the configured region with the AWS
/// credentials of the environment (no key anywhere), metered from Bedrock's usage at the model's
/// price; `doctor` finds credentials to sign with; and the recording replays with the stand-in
/// gone and no credentials at all.
#[test]
fn the_llm_agent_reaches_bedrock_through_the_gateway_signed_metered_and_replayed() {
    use agenteval_testkit::llm_mock::bedrock::{
        BEDROCK_ACCESS_KEY, BEDROCK_REGION, BEDROCK_SECRET_KEY, signing_for_stand_in,
    };
    const ID: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", "");
    cases(&ws, &[("tool", "USE_TOOL please"), ("plain", "hello")]);
    let cfg = ws.write(
        "bedrock.yaml",
        &format!(
            "name: bedrock\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: anthropic:claude-sonnet-4-5\n  tools: [python]\n  bedrock:\n    region: {BEDROCK_REGION}\n    endpoint_url: http://{}\n    models: {{claude-sonnet-4-5: \"{ID}\"}}\n  limits: {{max_cost_usd: 1}}\nbackend:\n  secrets_file: secrets.env\n",
            mock.addr
        ),
    );
    let signed = |args: &[&str]| signing_for_stand_in(&mut ws.cmd(args)).output().unwrap();
    let tapes = ws.path().join("tapes");
    let out = signed(&[
        "submit",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--cassettes",
        tapes.to_str().unwrap(),
        "--cassette-mode",
        "record",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    let bundle = bundle_of(&v);
    let r = task(&bundle, "tool");
    assert_eq!(r["agent"]["final_answer"], "the tool said 42", "{r}");
    let got = mock.received();
    assert_eq!(got.len(), 3, "{got:?}");
    for call in &got {
        assert_eq!(call.path, format!("bedrock:invoke:{ID}"));
        let credential = call.credential.as_deref().unwrap_or_default();
        let scope = format!("Credential={BEDROCK_ACCESS_KEY}/");
        assert!(credential.starts_with("AWS4-HMAC-SHA256 ") && credential.contains(&scope), "{credential}");
        assert!(credential.contains(&format!("/{BEDROCK_REGION}/bedrock/aws4_request")), "{credential}");
    }
    // Two calls of 10 input and 5 output tokens, at Claude Sonnet 4.5's packaged price.
    let cost = r["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - 2.0 * (10.0 * 3.0 + 5.0 * 15.0) / 1e6).abs() < 1e-12, "{r}");
    assert_eq!(r["agent"]["total_tokens"], 30);
    for file in ["tasks/tool/trace.jsonl", "tasks/tool/cassette.jsonl", "tasks/tool/worker.log"] {
        let body = read_text(bundle.join(file)).unwrap_or_default();
        assert!(!body.contains(BEDROCK_SECRET_KEY), "{file} holds the AWS secret");
    }
    let out = signed(&["doctor", "--config", cfg.to_str().unwrap()]);
    let said = text(&out.stdout);
    assert!(out.status.success() && said.contains("model endpoint bedrock"), "{said}\n{}", text(&out.stderr));
    assert!(said.contains("answered an invocation") || said.contains("accepts the credentials"), "{said}");

    // With the stand-in gone and no AWS credentials: the same answers, tokens and cost.
    drop(mock);
    let (rep, code, out) = ws.submit(&cfg, &["--cassettes", tapes.to_str().unwrap(), "--cassette-mode", "replay"]);
    assert_eq!(code, 0, "{rep}\n{}", text(&out.stderr));
    for id in ["tool", "plain"] {
        let (a, b) = (task(&bundle, id), task(&bundle_of(&rep), id));
        for field in ["final_answer", "total_tokens", "total_cost_usd"] {
            assert_eq!(a["agent"][field], b["agent"][field], "{id} {field}");
        }
    }
}

/// Bedrock that cannot be reached (no such host): `doctor` says so before any run, having sent
/// its one signed request, and a run's tasks end `infra` saying the host cannot be reached,
/// never with a status no provider gave.
#[test]
fn an_unreachable_bedrock_is_said_as_such_by_doctor_and_by_the_run() {
    use agenteval_testkit::llm_mock::bedrock::{BEDROCK_REGION, signing_for_stand_in};
    let ws = Workspace::new();
    ws.write("secrets.env", "");
    cases(&ws, &[("plain", "hello")]);
    let cfg = ws.write(
        "gone.yaml",
        &format!(
            "name: gone\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: anthropic:claude-sonnet-4-5\n  max_attempts: 2\n  bedrock:\n    region: {BEDROCK_REGION}\n    endpoint_url: https://bedrock-runtime.no-such-host.invalid\n  limits: {{max_cost_usd: 1}}\nbackend:\n  secrets_file: secrets.env\n"
        ),
    );
    let signed = |args: &[&str]| signing_for_stand_in(&mut ws.cmd(args)).output().unwrap();
    let out = signed(&["doctor", "--config", cfg.to_str().unwrap()]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{said}");
    let line = said.lines().find(|l| l.contains("model endpoint bedrock")).unwrap_or_else(|| panic!("{said}"));
    assert!(line.starts_with("FAIL") && line.contains("cannot reach") && line.contains("(DNS: "), "{line}");

    let out = signed(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let r = task(&bundle_of(&v), "plain");
    let why = r.to_string();
    assert!(why.contains("cannot reach") && why.contains("DNS: "), "{r}");
    assert!(!why.contains("answered 502"), "no status was given by anyone: {r}");
}

/// Issue 59: a model Bedrock serves through `Converse` (not Anthropic's): the `llm` agent's
/// chat calls, its tool call and the tool's result included, reach the stand-in's Converse for
/// the mapped id, signed, and are metered from Converse's usage.
#[test]
fn the_llm_agent_reaches_a_converse_model_on_bedrock() {
    use agenteval_testkit::llm_mock::bedrock::{BEDROCK_REGION, signing_for_stand_in};
    const ID: &str = "meta.llama3-3-70b-instruct-v1:0";
    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", "");
    cases(&ws, &[("tool", "USE_TOOL please")]);
    let cfg = ws.write(
        "converse.yaml",
        &format!(
            "name: converse\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: openai-compatible:llama-3.3-70b\n  tools: [python]\n  bedrock:\n    region: {BEDROCK_REGION}\n    endpoint_url: http://{}\n    models: {{llama-3.3-70b: \"{ID}\"}}\n    price: {{input_per_mtok: 1, output_per_mtok: 2}}\nbackend:\n  secrets_file: secrets.env\n",
            mock.addr
        ),
    );
    let out =
        signing_for_stand_in(&mut ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    let r = task(&bundle_of(&v), "tool");
    assert_eq!(r["agent"]["final_answer"], "the tool said 42", "{r}");
    let got = mock.received();
    let want = format!("bedrock:converse:{ID}");
    assert_eq!(got.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), [want.as_str(), want.as_str()]);
    assert_eq!(r["agent"]["total_tokens"], 30, "{r}");
    let cost = r["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((cost - 2.0 * (10.0 * 1.0 + 5.0 * 2.0) / 1e6).abs() < 1e-12, "{r}");
}

/// Issue 59: a judge on Amazon Bedrock: its verdict comes from the stand-in's `InvokeModel`,
/// signed with the environment's AWS credentials, and no key is asked of the secret store.
#[test]
fn a_judge_on_bedrock_is_signed_and_needs_no_key() {
    use agenteval_testkit::llm_mock::bedrock::{BEDROCK_REGION, signing_for_stand_in};
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("good", "JUDGE this GOOD ANSWER")]);
    let judge = format!(
        "evaluators:\n  - kind: llm_pass_fail\n    id: bedrock\n    model: anthropic:claude-haiku-4-5\n    criteria: is polite\n    cache_dir: judge-cache\n    bedrock:\n      region: {BEDROCK_REGION}\n      endpoint_url: http://{}\n      models: {{claude-haiku-4-5: us.anthropic.claude-haiku-4-5-20251001-v1:0}}\n",
        mock.addr
    );
    let cfg = config(&ws, "judged-bedrock", "openai:gpt-4o-mini", &mock.base_url(), "", &judge);
    let out =
        signing_for_stand_in(&mut ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()])).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    let r = task(&bundle_of(&v), "good");
    let score = r["scores"].as_array().unwrap().iter().find(|s| s["evaluator_id"] == "bedrock").unwrap().clone();
    assert_eq!((score["passed"].as_bool(), score["tokens"].as_u64()), (Some(true), Some(15)), "{score}");
    let judged: Vec<_> = mock.received().into_iter().filter(|c| c.path.starts_with("bedrock:")).collect();
    assert_eq!(judged.len(), 1, "{judged:?}");
    assert_eq!(judged[0].path, "bedrock:invoke:us.anthropic.claude-haiku-4-5-20251001-v1:0");
    assert!(judged[0].credential.as_deref().unwrap_or_default().starts_with("AWS4-HMAC-SHA256 "), "{judged:?}");
}

/// Issue 74: a judge on an Azure OpenAI resource, as on Bedrock: its verdict comes from the
/// resource's deployment (the v1 API, then a dated one), sent the resource's `api-key` from the
/// secret the judge names; the key is nowhere in the bundle, and a judge without it is refused
/// before anything runs.
#[test]
fn a_judge_on_an_azure_resource_answers_from_its_deployment_with_its_key() {
    const JUDGE_KEY: &str = "azure-judge-key-SECRETJUDGE42";
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    let secrets = read_text(ws.path().join("secrets.env")).unwrap_or_default();
    ws.write("secrets.env", &format!("{secrets}JUDGE_AZURE={JUDGE_KEY}\n"));
    cases(&ws, &[("good", "JUDGE this GOOD ANSWER")]);
    let judge = |version: &str| {
        format!(
            "evaluators:\n  - kind: llm_pass_fail\n    id: azure\n    model: openai:gpt-4o\n    criteria: is polite ({})\n    cache_dir: judge-cache\n    azure:\n      base_url: http://{}\n      deployments: {{gpt-4o: grader-4o}}\n{version}      secrets: {{AZURE_OPENAI_API_KEY: JUDGE_AZURE}}\n",
            version.len(),
            mock.addr
        )
    };
    for (version, path) in [("", "azure-v1:chat"), ("      api_version: 2024-10-21\n", "azure-dated:chat:grader-4o")] {
        let cfg = config(&ws, "judged-azure", "openai:gpt-4o-mini", &mock.base_url(), "", &judge(version));
        let (v, code, out) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
        let bundle = bundle_of(&v);
        let r = task(&bundle, "good");
        let score = r["scores"].as_array().unwrap().iter().find(|s| s["evaluator_id"] == "azure").unwrap().clone();
        assert_eq!((score["passed"].as_bool(), score["tokens"].as_u64()), (Some(true), Some(15)), "{score}");
        let judged: Vec<_> = mock.received().into_iter().filter(|c| c.path.starts_with("azure")).collect();
        let judged: Vec<_> = judged.into_iter().filter(|c| c.path == path).collect();
        assert_eq!(judged.len(), 1, "one call to {path}: {judged:?}");
        assert_eq!(judged[0].credential.as_deref(), Some(format!("api-key {JUDGE_KEY}").as_str()), "{judged:?}");
        if version.is_empty() {
            assert_eq!(judged[0].body["model"], "grader-4o", "the v1 API names the deployment as the model");
        }
        for file in ["tasks/good/result.json", "tasks/good/trace.jsonl", "tasks/good/worker.log"] {
            assert!(!read_text(bundle.join(file)).unwrap_or_default().contains(JUDGE_KEY), "{file} holds the key");
        }
    }
    // A judge without its credential: refused at submit, naming the secret.
    ws.write("secrets.env", &secrets);
    let cfg = config(&ws, "judged-azure-nokey", "openai:gpt-4o-mini", &mock.base_url(), "", &judge(""));
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("JUDGE_AZURE"), "{}", text(&out.stderr));
    // Served by one of azure or bedrock, and only `openai:` judges: said at load, by place.
    let both = judge("").replace("model: openai:gpt-4o", "model: anthropic:claude-haiku-4-5")
        + "    bedrock: {region: us-east-1}\n";
    let cfg = config(&ws, "judged-both", "openai:gpt-4o-mini", &mock.base_url(), "", &both);
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("Azure OpenAI serves `openai:` judges") && err.contains("not both"), "{err}");
}

/// Issue 74: judges held to their verdict's JSON Schema (`response_format: json_schema`): an
/// `openai:` judge asks it as OpenAI's strict `response_format` and reads the bare JSON; an
/// `anthropic:` one, whose wire has no such field, as a tool it must call (`tool_choice`), and
/// reads the verdict from that call's input.
#[test]
fn judges_held_to_a_schema_ask_it_on_each_wire_and_read_the_verdict() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("good", "JUDGE this GOOD ANSWER"), ("bad", "JUDGE this poor one")]);
    let judges = format!(
        "evaluators:\n  - kind: llm_rubric\n    id: strict-openai\n    model: openai:gpt-4o-mini\n    base_url: {url}\n    rubric: is polite\n    cache_dir: judge-cache\n    response_format: json_schema\n  - kind: llm_pass_fail\n    id: strict-anthropic\n    model: anthropic:claude-haiku-4-5\n    base_url: {url}\n    criteria: is polite\n    cache_dir: judge-cache\n    response_format: json_schema\n",
        url = mock.base_url()
    );
    let cfg = config(&ws, "schema-judges", "openai:gpt-4o-mini", &mock.base_url(), "", &judges);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert!(code == 0 || code == 1, "{v}\n{}", text(&out.stderr));
    let bundle = bundle_of(&v);
    for (id, passed) in [("good", true), ("bad", false)] {
        let r = task(&bundle, id);
        for judge in ["strict-openai", "strict-anthropic"] {
            let s = r["scores"].as_array().unwrap().iter().find(|s| s["evaluator_id"] == judge).unwrap().clone();
            assert_eq!(s["passed"].as_bool(), Some(passed), "{id} by {judge}: {s}");
            assert!(s["reason"].as_str().unwrap_or_default().starts_with("scripted"), "{s}");
        }
    }
    let got = mock.received();
    let asked: Vec<_> = got.iter().filter(|c| c.body.to_string().contains("## Rubric")).collect();
    assert_eq!(asked.len(), 2, "{got:?}");
    for c in &asked {
        let f = &c.body["response_format"];
        assert_eq!(
            (f["type"].as_str(), f["json_schema"]["strict"].as_bool()),
            (Some("json_schema"), Some(true)),
            "{f}"
        );
        assert_eq!(f["json_schema"]["schema"]["required"], serde_json::json!(["score", "reason"]), "{f}");
    }
    let emulated: Vec<_> = got.iter().filter(|c| c.body.get("tool_choice").is_some()).collect();
    assert_eq!(emulated.len(), 2, "the anthropic judge's two calls: {got:?}");
    for c in &emulated {
        assert_eq!(c.body["tool_choice"], serde_json::json!({"type": "tool", "name": "verdict"}), "{}", c.body);
        assert_eq!(c.body["tools"][0]["input_schema"]["required"], serde_json::json!(["passed", "reason"]));
    }
    // A reply format the judge does not know is a config error, by place.
    let bad = judges.replacen("response_format: json_schema", "response_format: yaml", 1);
    let cfg = config(&ws, "schema-bad", "openai:gpt-4o-mini", &mock.base_url(), "", &bad);
    let out = ws.run(&["config", "validate", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("response_format"), "{}", text(&out.stderr));
}

/// Issue 59: a cost gate on a model without a price is refused before the run, naming the gates
/// file, the model and the field that would price it: the gate could never pass.
#[test]
fn a_cost_gate_on_an_unpriced_model_is_refused_before_the_run() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("t", "hello")]);
    let cfg = config(&ws, "gated", "openai-compatible:my-finetune", &mock.base_url(), "", "");
    let gates = repo().join("configs/gates.yaml");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap(), "--gates", gates.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("gates.yaml: `cost_per_task` is gated, but no price is known for `my-finetune`"), "{err}");
    assert!(err.contains("`agent.price`"), "{err}");
    assert!(mock.received().is_empty(), "nothing ran");
    // Priced, the same gates run.
    let priced = config(
        &ws,
        "gated-priced",
        "openai-compatible:my-finetune",
        &mock.base_url(),
        "  price: {input_per_mtok: 1, output_per_mtok: 2}\n",
        "",
    );
    let out = ws.run(&["submit", "--config", priced.to_str().unwrap(), "--gates", gates.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A run cancelled while its tasks' model calls are in flight: the tasks with no result still
/// made those calls, and the run says how many (its gateways counted every call in the index).
#[test]
fn a_cancelled_tasks_model_calls_are_counted_for_the_run() {
    let mock = MockLlm::start(Duration::from_millis(1500));
    let ws = workspace();
    let inputs: Vec<(String, String)> = (0..8).map(|i| (format!("c{i}"), format!("hello {i}"))).collect();
    let inputs: Vec<(&str, &str)> = inputs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    cases(&ws, &inputs);
    let cfg = config(&ws, "cut", "openai:gpt-4o-mini", &mock.base_url(), "", "");
    let child = ws.spawn(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    // Cancelled once the first tasks' calls are out, before they are answered.
    wait_until("calls in flight", Duration::from_secs(60), || !mock.received().is_empty());
    let listed = ws.run(&["runs", "list", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let run = runs[0]["run_id"].as_str().unwrap().to_string();
    let out = ws.run(&["cancel", &run]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = wait_output(child, Duration::from_secs(120));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let s = &v["summary"];
    let in_results: u64 = s["models"].as_object().map_or(0, |m| m.values().filter_map(|n| n.as_u64()).sum());
    let without = s["calls_without_result"].as_u64().unwrap_or(0);
    assert!(without > 0, "the cancelled tasks' calls are counted: {v}\n{}", text(&out.stderr));
    // The mock lists the calls it answered; the cancelled ones were cut before their answer.
    assert!(in_results + without > mock.received().len() as u64, "every call made, answered or not: {v}");
    // The run's cost is every call's: the finished tasks' and the cancelled ones'.
    let total = s["total_cost_usd"].as_f64().unwrap_or(0.0);
    let without_cost = s["cost_without_result_usd"].as_f64().unwrap_or(0.0);
    let run_cost = s["run_cost_usd"].as_f64().unwrap();
    assert!((run_cost - (total + without_cost)).abs() < 1e-9 && run_cost >= total, "{v}");
    let shown = text(&ws.run(&["runs", "show", &run]).stdout);
    assert!(shown.contains("by tasks that ended with no result"), "{shown}");
    let flat = shown.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("the run's calls cost $"), "{shown}");
}

/// `doctor` of an `llm` agent whose endpoint does not answer names the field that sets it in
/// this agent's config (`agent.base_url`), never `agent.upstream`, which the `llm` agent refuses.
#[test]
fn doctor_names_the_llm_agents_own_base_url_for_an_endpoint_that_does_not_answer() {
    let ws = workspace();
    cases(&ws, &[("t", "hello")]);
    let cfg = config(&ws, "dead", "openai:gpt-4o-mini", "http://127.0.0.1:9/v1", "", "");
    let out = ws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{said}{}", text(&out.stderr));
    let line = said
        .lines()
        .find(|l| l.starts_with("FAIL") && l.contains("model endpoint"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains("cannot reach http://127.0.0.1:9/v1 (connect: ") && line.contains("(agent.base_url)"),
        "{line}"
    );
    assert!(!said.contains("agent.upstream"), "{said}");
}

/// Issue 74: a judge's prompt is a template file of the team's, filled with the task, the
/// answer and the criteria (the reply's JSON shape asked after it all the same), and checked at
/// load: a variable the judge does not fill is a config error at the file's line.
#[test]
fn a_judges_prompt_is_a_template_file_checked_at_load() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &[("good", "a GOOD ANSWER please"), ("meh", "anything")]);
    ws.write(
        "judge.md",
        "JUDGE as our team does.\nThe task: {{task}}\nWhat the agent said: {{ answer }}\nOur bar: {{criteria}}\n",
    );
    let judges = format!(
        "evaluators:\n  - kind: llm_pass_fail\n    id: ours\n    model: openai:gpt-4o-mini\n    base_url: {}\n    criteria: is GOOD\n    prompt_file: judge.md\n    cache_dir: judge-cache\n",
        mock.base_url()
    );
    let cfg = config(&ws, "templated", "openai:gpt-4o-mini", &mock.base_url(), "", &judges);
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = bundle_of(&v);
    let score = |id: &str| {
        task(&bundle, id)["scores"].as_array().unwrap().iter().find(|s| s["evaluator_id"] == "ours").unwrap().clone()
    };
    assert_eq!(score("good")["passed"], true, "{} {}", score("good"), text(&out.stderr));
    assert_eq!(score("meh")["passed"], false, "{}", score("meh"));
    let asked: Vec<String> =
        mock.received().iter().map(|c| c.body.to_string()).filter(|b| b.contains("JUDGE as our team does")).collect();
    assert_eq!(asked.len(), 2, "one judge call a task, with the team's words");
    assert!(
        asked.iter().all(|b| b.contains("Our bar: is GOOD") && b.contains("Reply with one JSON object")),
        "{asked:?}"
    );
    // A variable the judge does not fill, and an unclosed one: config errors before any run.
    ws.write("judge.md", "Task: {{task}}\nAnswer: {{answr}}\n");
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("prompt_file") && err.contains("`{{answr}}`") && err.contains("task, criteria"), "{err}");
    let inline = config(
        &ws,
        "inline",
        "openai:gpt-4o-mini",
        &mock.base_url(),
        "",
        &format!(
            "evaluators:\n  - kind: llm_rubric\n    model: openai:gpt-4o-mini\n    base_url: {}\n    rubric: r\n    prompt: 'Grade {{{{answer}}'\n",
            mock.base_url()
        ),
    );
    let out = ws.run(&["config", "validate", inline.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("never closed"), "{said}");
}
