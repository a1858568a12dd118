//! The model gateway through the real binary: a `command` agent in Python that speaks OpenAI
//! chat completions (whole and streamed), OpenAI Responses and Anthropic Messages (streamed)
//! with whatever token and base URLs it is given, against the scripted mock. Usage and cost
//! come from the provider, never the agent's word; `max_cost_usd` stops a looping agent; the key
//! never reaches the agent; a recorded run replays with the model gone and no key; a token
//! works for its own task only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;
use agenteval_testkit::llm_mock::MockLlm;

const KEY: &str = "sk-upstream-THEREALKEYNEVERSHOWN0123456789";

/// The agent: each task's input names what it does.
pub(crate) const AGENT: &str = r#"
import hashlib, json, os, socket, sys, urllib.request, urllib.error
req = json.loads(sys.stdin.readline())
mode = req["input"]
suffix = os.environ.get("PROMPT_SUFFIX", "")
oai, ant = os.environ["OPENAI_BASE_URL"], os.environ["ANTHROPIC_BASE_URL"]
def emit(kind, payload=None, **usage):
    print(json.dumps(dict(kind=kind, payload=payload, **usage)), flush=True)
def post(url, body, headers):
    r = urllib.request.Request(url, data=json.dumps(body).encode(), headers=dict(headers, **{"content-type": "application/json"}))
    with urllib.request.urlopen(r, timeout=30) as resp:
        return resp.read().decode()
def openai(path, body):
    return post(oai + "/" + path, body, {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
def anthropic(body):
    return post(ant + "/v1/messages", body, {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"})
def events(sse):
    return [json.loads(l[5:]) for l in sse.splitlines() if l.startswith("data:") and l[5:].strip() != "[DONE]"]
def chat(text, stream=False):
    body = {"model": "mock-model", "messages": [{"role": "user", "content": text + suffix}]}
    if stream:
        body["stream"] = True
        return "".join(e["choices"][0]["delta"].get("content", "") for e in events(openai("chat/completions", body)) if e.get("choices"))
    return json.loads(openai("chat/completions", body))["choices"][0]["message"]["content"]
answer = None
if mode == "chat":
    answer = chat("hello")
elif mode == "chat3":
    # Three calls back to back: more than a limit of two a second lets go at once.
    answer = " ".join(chat("hello %d" % i) for i in range(3))
elif mode == "chat-stream":
    answer = chat("streamed", stream=True)
elif mode == "anthropic-stream":
    sse = anthropic({"model": "mock-model", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "claude" + suffix}]})
    answer = "".join(e["delta"].get("text", "") for e in events(sse) if e.get("type") == "content_block_delta")
elif mode == "responses":
    out = json.loads(openai("responses", {"model": "mock-model", "input": "respond" + suffix}))
    answer = "".join(p["text"] for i in out["output"] for p in i.get("content", []) if p["type"] == "output_text")
elif mode == "lie":
    # The agent's own word about its usage counts for nothing.
    emit("cost.tick", {"model": "mock-model"}, input_tokens=999999, output_tokens=999999, cost_usd=9.0)
    answer = chat("truthful")
elif mode == "loop":
    for i in range(1000):
        try:
            chat("again %d" % i)
        except urllib.error.HTTPError as e:
            answer = "refused %d: %s" % (e.code, e.read().decode()[:200])
            break
elif mode == "env":
    want = os.environ["KEY_SHA256"]
    found = [k for k, v in os.environ.items() if hashlib.sha256(v.encode()).hexdigest() == want]
    environ = open("/proc/self/environ", "rb").read()
    raw = any(hashlib.sha256(v).hexdigest() == want for v in environ.split(b"\0") for v in [v.split(b"=", 1)[-1]])
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", int(os.environ["MOCK_PORT"])))
        direct = "reached"
    except OSError:
        direct = "blocked"
    answer = json.dumps({"key_in_env": found, "key_in_proc": raw, "direct": direct, "token_given": os.environ["OPENAI_API_KEY"].startswith("sk-agenteval-")})
elif mode == "steal":
    # Another task's token, left where this agent can read it by a hostile neighbour.
    token = open(os.environ["STOLEN"]).read().strip() if os.path.exists(os.environ["STOLEN"]) else ""
    try:
        post(oai + "/chat/completions", {"model": "mock-model", "messages": [{"role": "user", "content": "x"}]}, {"authorization": "Bearer " + token})
        answer = "stolen token worked"
    except urllib.error.HTTPError as e:
        answer = "stolen token refused %d" % e.code
elif mode == "burst":
    # 20 calls at once, each asking 500 tokens of a task that may use 1,500.
    import threading
    codes = []
    def one(i):
        body = {"model": "mock-model", "max_tokens": 500, "messages": [{"role": "user", "content": "burst %d" % i}]}
        try:
            openai("chat/completions", body)
            codes.append(200)
        except urllib.error.HTTPError as e:
            codes.append(e.code)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    answer = "%d answered" % codes.count(200)
elif mode == "cutoff":
    # A call the provider is still answering when the agent is gone.
    import threading
    body = {"model": "mock-model", "max_tokens": 1000, "stream": True, "messages": [{"role": "user", "content": "cut"}]}
    threading.Thread(target=lambda: openai("chat/completions", body), daemon=True).start()
    import time
    time.sleep(2)
    emit("agent.terminal", {"final_answer": "gone"})
    os._exit(0)
elif mode == "forbidden":
    said = []
    for path, body in [
        ("chat/completions", {"model": "o1-pro", "messages": [{"role": "user", "content": "x"}]}),
        ("responses", {"model": "mock-model", "input": "x", "tools": [{"type": "web_search"}]}),
        ("chat/completions", {"model": "mock-model", "stream": 1, "messages": [{"role": "user", "content": "x"}]}),
    ]:
        try:
            openai(path, body)
            said.append("200")
        except urllib.error.HTTPError as e:
            said.append(str(e.code))
    said.append(chat("allowed"))
    answer = " ".join(said)
elif mode == "rate-limited":
    # An agent that does not retry: the provider's 429 would end it.
    answer = chat("RATE_LIMIT me")
elif mode == "outage":
    try:
        answer = chat("ALWAYS503 down")
    except urllib.error.HTTPError as e:
        answer = "gave up on %d" % e.code
elif mode == "leave":
    open(os.environ["STOLEN"], "w").write(os.environ["OPENAI_API_KEY"])
    answer = chat("left a token")
emit("agent.terminal", {"final_answer": answer})
"#;

/// A mock-model price: $1,000 per million tokens in and out, so that each call of 10 + 5
/// tokens costs $0.015.
const PRICE: f64 = 1000.0;

fn workspace() -> Workspace {
    let ws = Workspace::new();
    ws.write("secrets.env", &format!("OPENAI_API_KEY={KEY}\nANTHROPIC_API_KEY={KEY}\n"));
    ws.write("agent.py", AGENT);
    ws
}

fn cases(ws: &Workspace, ids: &[&str]) {
    let lines: String = ids.iter().map(|id| format!("{}\n", serde_json::json!({"id": id, "input": id}))).collect();
    ws.write("cases.jsonl", &lines);
}

/// A config for the agent behind the gateway to `base_url`; `agent_extra` is added to the agent.
fn config(ws: &Workspace, name: &str, base_url: &str, agent_extra: &str) -> PathBuf {
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            r#"name: {name}
benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, agent.py]
  model: mock-model
  upstream:
    openai:
      base_url: {base_url}
      secrets: {{OPENAI_API_KEY: OPENAI_API_KEY}}
    anthropic:
      base_url: {base_url}
      secrets: {{ANTHROPIC_API_KEY: ANTHROPIC_API_KEY}}
    prices:
      mock-model: {{input_per_mtok: {PRICE}, output_per_mtok: {PRICE}}}
{agent_extra}backend:
  secrets_file: secrets.env
  max_concurrent_jobs: 2
storage:
  bundle_root: runs
"#
        ),
    )
}

fn result(bundle: &Path, id: &str) -> serde_json::Value {
    read_json(&bundle.join("tasks").join(id).join("result.json"))
}

fn trace(bundle: &Path, id: &str) -> Vec<serde_json::Value> {
    read_text(bundle.join("tasks").join(id).join("trace.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const WIRES: &[&str] = &["chat", "chat-stream", "anthropic-stream", "responses", "lie"];

#[test]
fn every_wire_is_metered_priced_recorded_and_replayed_without_the_model_or_its_key() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, WIRES);
    let cfg = config(&ws, "wires", &mock.base_url(), "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let want = [
        ("chat", "echo: hello"),
        ("chat-stream", "echo: streamed"),
        ("anthropic-stream", "echo: claude"),
        ("responses", "echo: respond"),
        ("lie", "echo: truthful"),
    ];
    for (id, answer) in want {
        let r = result(&bundle, id);
        assert_eq!(r["agent"]["final_answer"], answer, "{id}: {r}");
        // One call of the mock's 10 + 5 tokens, whatever the agent said of itself.
        assert_eq!(r["agent"]["total_tokens"], 15, "{id}: {r}");
        let cost = r["agent"]["total_cost_usd"].as_f64().unwrap();
        assert!((cost - 15.0 * PRICE / 1e6).abs() < 1e-12, "{id}: cost {cost}");
        assert!(r["agent"]["cost_unknown"] != true, "{id}: {r}");
        let calls: Vec<_> = trace(&bundle, id).into_iter().filter(|e| e["kind"] == "model.call").collect();
        assert_eq!(calls.len(), 1, "{id}");
        assert_eq!(calls[0]["payload"]["answer"], answer, "{id}: {}", calls[0]);
        assert!(bundle_file_exists(&bundle.join(format!("tasks/{id}/cassette.jsonl"))), "{id} keeps its calls");
    }
    let streamed = &trace(&bundle, "anthropic-stream").into_iter().find(|e| e["kind"] == "model.call").unwrap();
    assert_eq!(
        (streamed["payload"]["wire"].as_str(), streamed["payload"]["stream"].as_bool()),
        (Some("anthropic.messages"), Some(true))
    );
    // The provider got the real key on every call; the agent only ever had its task's token.
    let received = mock.received();
    assert_eq!(received.len(), WIRES.len());
    assert!(received.iter().all(|r| r.credential.as_deref().is_some_and(|c| c.contains(KEY))), "{received:?}");
    assert!(v["summary"]["total_cost_usd"].as_f64().unwrap() > 0.0, "{v}");

    // `show` lists the agent's model calls with their tokens.
    let run = v["run_id"].as_str().unwrap().to_string();
    let out = ws.run(&["show", &run, "chat-stream"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("model.call mock-model openai.chat stream -> e"), "{shown}");
    assert!(shown.contains("[10+5 tok $0.0150]"), "{shown}");

    // The model gone and no key: the replay answers every call from the recording.
    drop(mock);
    std::fs::write(ws.path().join("secrets.env"), "").unwrap();
    let out = ws.run(&["replay", &run, "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!(r["match"], WIRES.len(), "{r}");

    // A changed prompt is a miss in a strict replay: the task ends `replay_miss`, DIFFER.
    let changed = config(&ws, "changed", "http://127.0.0.1:9/v1", "  env: {PROMPT_SUFFIX: ' (changed)'}\n");
    let out = ws.run(&["replay", &run, "--with-config", changed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("DIFFER       chat ") && shown.contains("replay_miss"), "{shown}");
}

#[test]
fn a_looping_agent_is_stopped_at_its_cost_limit_by_the_gateway() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &["loop"]);
    let cfg = config(&ws, "loop", &mock.base_url(), "  limits: {max_cost_usd: 0.05}\n");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let r = result(&bundle, "loop");
    assert_eq!(r["agent"]["terminated_by"], "limit_cost", "{r}");
    // $0.015 a call, its prompt held (as guessed, on the safe side) before it is sent: the
    // limit is reached without being crossed, and nothing after it reaches the model.
    let calls = mock.received().len();
    assert!((2..=3).contains(&calls), "{calls} calls reached the model");
    let cost = r["agent"]["total_cost_usd"].as_f64().unwrap();
    assert!((0.03..=0.05).contains(&cost), "never past the limit: {cost}");

    // The run's budget counts the gateway's costs: $0.015 a task, $0.03 for the run, one task
    // at a time: dispatch stops after the second.
    let ids: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    let lines: String = ids.iter().map(|id| format!("{}\n", serde_json::json!({"id": id, "input": "chat"}))).collect();
    ws.write("cases.jsonl", &lines);
    let cfg = config(&ws, "budget", &mock.base_url(), "");
    let text_cfg = read_text(&cfg).unwrap().replace("max_concurrent_jobs: 2", "max_concurrent_jobs: 1");
    std::fs::write(&cfg, format!("{text_cfg}max_run_cost_usd: 0.03\n")).unwrap();
    let (v, _, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "budget_exceeded", "{v}\n{}", text(&out.stderr));
    let finished = v["summary"]["tasks_finished"].as_u64().unwrap();
    assert!((2..6).contains(&finished), "{v}");
}

#[test]
fn the_key_never_reaches_the_agent_and_a_token_is_its_tasks_alone() {
    use sha2::Digest as _;
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &["env"]);
    let seen = ws.shared_dir("seen");
    let key_hash = hex::encode(sha2::Sha256::digest(KEY.as_bytes()));
    let extra = format!(
        "  env: {{KEY_SHA256: {key_hash}, MOCK_PORT: '{}', STOLEN: {}}}\n  sandbox:\n    write: [{}]\n",
        mock.addr.port(),
        seen.join("token").display(),
        seen.display()
    );
    let cfg = config(&ws, "env", &mock.base_url(), &extra);
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let answer = result(&bundle, "env")["agent"]["final_answer"].as_str().unwrap().to_string();
    let seen_by_agent: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(seen_by_agent["key_in_env"], serde_json::json!([]), "{answer}");
    assert_eq!(seen_by_agent["key_in_proc"], false, "{answer}");
    assert_eq!(seen_by_agent["token_given"], true, "{answer}");
    // The sandbox lets the agent reach the gateway's port, not the provider's.
    if agenteval_engine::isolation::sandbox::tcp_rules_available() {
        assert_eq!(seen_by_agent["direct"], "blocked", "{answer}");
    }
    let everything = read_text(bundle.join("tasks/env/trace.jsonl")).unwrap() + &text(&out.stderr);
    assert!(!everything.contains(KEY), "the key was written down");

    // Task `leave` writes its token where task `steal` (run after it) reads it: refused.
    cases(&ws, &["leave", "steal"]);
    let cfg = config(&ws, "steal", &mock.base_url(), &extra);
    // One task at a time, in order: `leave` has ended (and its token with it) when `steal` runs.
    std::fs::write(&cfg, read_text(&cfg).unwrap().replace("max_concurrent_jobs: 2", "max_concurrent_jobs: 1")).unwrap();
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    assert_eq!(result(&bundle, "leave")["agent"]["final_answer"], "echo: left a token");
    assert_eq!(result(&bundle, "steal")["agent"]["final_answer"], "stolen token refused 401");
}

#[test]
fn an_agent_without_the_gateway_has_an_unknown_cost_never_zero() {
    let ws = Workspace::new();
    ws.write("agent.py", "import json,sys\nsys.stdin.readline()\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': 'x'}}))\n");
    ws.write("cases.jsonl", "{\"id\": \"t\", \"input\": \"x\", \"expected\": \"x\"}\n");
    let cfg = ws.write(
        "plain.yaml",
        "name: plain\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\nstorage:\n  bundle_root: runs\n",
    );
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["summary"]["cost_unknown_tasks"], 1, "{v}");
    let out = ws.run(&["show", v["run_id"].as_str().unwrap(), "t"]);
    assert!(text(&out.stdout).contains("cost unknown"), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("$0.0000"), "{}", text(&out.stdout));
}

/// `compare` judges the cost of two gateway runs (the second agent makes two calls a task), and
/// leaves cost out when neither side's is known.
#[test]
fn compare_judges_metered_cost_and_leaves_unknown_cost_out() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    let ids: Vec<String> = (0..6).map(|i| format!("t{i}")).collect();
    let lines: String = ids.iter().map(|id| format!("{}\n", serde_json::json!({"id": id, "input": "chat"}))).collect();
    ws.write("cases.jsonl", &lines);
    let one = config(&ws, "one", &mock.base_url(), "");
    let (a, code, _) = ws.submit(&one, &[]);
    assert_eq!(code, 0, "{a}");
    // The same agent, told to make every call twice.
    let twice = ws
        .write("twice.py", &AGENT.replace("answer = chat(\"hello\")", "chat(\"first\")\n    answer = chat(\"hello\")"));
    let two = config(&ws, "two", &mock.base_url(), "");
    std::fs::write(&two, read_text(&two).unwrap().replace("agent.py", twice.file_name().unwrap().to_str().unwrap()))
        .unwrap();
    let (b, code, _) = ws.submit(&two, &[]);
    assert_eq!(code, 0, "{b}");
    let cmp = |x: &serde_json::Value, y: &serde_json::Value| {
        let out = ws.run(&[
            "compare",
            x["run_id"].as_str().unwrap(),
            y["run_id"].as_str().unwrap(),
            "--format",
            "json",
            "--resamples",
            "500",
        ]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)))
    };
    let c = cmp(&a, &b);
    let metrics =
        c["comparison"]["metrics"].as_array().cloned().unwrap_or_else(|| c["metrics"].as_array().cloned().unwrap());
    let cost = metrics.iter().find(|m| m["metric"] == "cost_per_task").unwrap_or_else(|| panic!("{c}"));
    assert!((cost["base"].as_f64().unwrap() - 0.015).abs() < 1e-9, "{cost}");
    assert!((cost["cand"].as_f64().unwrap() - 0.030).abs() < 1e-9, "{cost}");
    assert_eq!(cost["regressed"], true, "twice the cost is a regression: {cost}");

    // Without the gateway and without usage of its own, an agent's cost is unknown: not compared.
    let plain = |name: &str| {
        let cfg = ws.write(
            &format!("{name}.yaml"),
            &format!("name: {name}\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, -c, 'import json,sys; sys.stdin.readline(); print(json.dumps(dict(kind=\"agent.terminal\", payload=dict(final_answer=\"x\"))))']\nstorage:\n  bundle_root: runs\n"),
        );
        let (v, code, _) = ws.submit(&cfg, &[]);
        assert_eq!(code, 0, "{v}");
        v
    };
    let (x, y) = (plain("plain-a"), plain("plain-b"));
    let c = cmp(&x, &y);
    let metrics =
        c["comparison"]["metrics"].as_array().cloned().unwrap_or_else(|| c["metrics"].as_array().cloned().unwrap());
    assert!(metrics.iter().all(|m| m["metric"] != "cost_per_task"), "unknown cost compared: {c}");
    assert!(metrics.iter().any(|m| m["metric"] == "pass_rate"), "{c}");
}

/// Calls in flight hold the task's budget: of 20 at once under `max_tokens: 1500`, each asking
/// 500, no more than three go to the provider and each is counted at what it could cost when
/// the fourth ends the task; a call the provider is still answering when its agent is gone is
/// counted likewise, never as free.
#[test]
fn calls_in_flight_hold_the_budget_and_a_call_cut_off_by_the_agents_end_is_counted() {
    // Slower than the 5 s the worker waits for calls still running when an agent ends.
    let mock = MockLlm::start(Duration::from_secs(8));
    let ws = workspace();
    cases(&ws, &["burst", "cutoff"]);
    let cfg = config(&ws, "held", &mock.base_url(), "  limits: {max_tokens: 1500}\n");
    let (v, _, out) = ws.submit(&cfg, &[]);
    assert_eq!(v["status"], "complete", "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    // Three calls hold the 1,500 tokens; the next is refused and ends the task at its limit,
    // the three counted at their most (never more than the budget and their prompts).
    let burst = result(&bundle, "burst");
    assert_eq!(burst["agent"]["terminated_by"], "limit_tokens", "{burst}");
    let calls = trace(&bundle, "burst");
    let forwarded = calls.iter().filter(|e| e["kind"] == "model.call" && e["payload"]["refused"].is_null()).count();
    assert!((1..=3).contains(&forwarded), "{forwarded} of 20 calls went to the provider: {burst}");
    let tokens = burst["agent"]["total_tokens"].as_u64().unwrap();
    assert!((1500..2000).contains(&tokens), "counted at their most, no more: {burst}");
    let cut = result(&bundle, "cutoff");
    assert!(cut["agent"]["total_tokens"].as_u64().unwrap() >= 1000, "counted at its most: {cut}");
    assert!(cut["agent"]["total_cost_usd"].as_f64().unwrap() >= 1.0, "$1,000/Mtok for 1,000 tokens: {cut}");
    let calls: Vec<_> = trace(&bundle, "cutoff").into_iter().filter(|e| e["kind"] == "model.call").collect();
    assert!(calls.iter().any(|c| c["payload"]["at_cap"] == true), "{calls:?}");
}

/// What the run does not allow never reaches the provider: another model than `agent.model`, a
/// tool the provider runs itself, a `stream` that is not a boolean; the models a run used are
/// named in its summary and `runs show`.
#[test]
fn calls_the_run_does_not_allow_are_refused_and_the_models_used_are_named() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &["forbidden"]);
    let cfg = config(&ws, "forbidden", &mock.base_url(), "");
    let (v, code, out) = ws.submit(&cfg, &[]);
    assert_eq!(code, 0, "{v}\n{}", text(&out.stderr));
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let r = result(&bundle, "forbidden");
    assert_eq!(r["agent"]["final_answer"], "400 400 400 echo: allowed", "{r}");
    assert_eq!(mock.received().len(), 1, "only the allowed call reached the provider");
    assert_eq!(v["summary"]["models"], serde_json::json!({"mock-model": 1}), "{v}");
    let shown = text(&ws.run(&["runs", "show", v["run_id"].as_str().unwrap()]).stdout);
    assert!(shown.contains("models     mock-model (1 call)"), "{shown}");
}

/// `gateway serve --record` writes its cassette owner-only, even over a file that was not, and
/// says in one INFO line how it reaches the provider (issue 74: every connection's transport).
#[test]
fn gateway_serve_records_owner_only() {
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt as _;
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &["chat"]);
    let cfg = config(&ws, "serve", &mock.base_url(), "");
    let calls = ws.write("calls.jsonl", "");
    std::fs::set_permissions(&calls, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = ws
        .cmd(&["-v", "gateway", "serve", "--config", cfg.to_str().unwrap(), "--listen", "127.0.0.1:0", "--record"])
        .arg(&calls)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let (base, token) = (first["openai_base_url"].as_str().unwrap(), first["token"].as_str().unwrap());
    let body = serde_json::json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]});
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{base}/chat/completions"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status.as_u16(), 200);
    let _ = lines.next();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(child.wait().unwrap().success());
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    assert!(
        said.contains(
            "transport: the model gateway sends OpenAI's wire to 127.0.0.1 over plain HTTP to a loopback address"
        ),
        "{said}"
    );
    let mode = std::fs::metadata(&calls).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the cassette is owner-only");
    assert_eq!(read_text(&calls).unwrap().lines().count(), 1);
}

/// Issue 59: the gateway asks the provider again after a 429 or a 5xx, waiting as it asks
/// (`retry-after`): an agent that does not retry never sees the refusal, and the wait is said per
/// call, per task and per run. A provider still unavailable after the retries is the task's
/// `infra_failure`, never the agent's error.
#[test]
fn the_gateway_waits_out_a_providers_rate_limit_and_an_outage_is_infra() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    cases(&ws, &["rate-limited", "outage"]);
    let cfg = config(&ws, "limits", &mock.base_url(), "");
    let yaml = std::fs::read_to_string(&cfg).unwrap().replacen(
        "      secrets: {OPENAI_API_KEY: OPENAI_API_KEY}\n",
        "      secrets: {OPENAI_API_KEY: OPENAI_API_KEY}\n      max_attempts: 3\n",
        1,
    );
    std::fs::write(&cfg, yaml).unwrap();
    let (v, _, out) = ws.submit(&cfg, &[]);
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap_or_else(|| panic!("{v} {}", text(&out.stderr))));
    let limited = result(&bundle, "rate-limited");
    assert_eq!(limited["agent"]["final_answer"], "echo: RATE_LIMIT me", "{limited}");
    assert_eq!(limited["passed"], true, "{limited}");
    assert!(limited["provider_wait_seconds"].as_f64().unwrap() >= 1.0, "{limited}");
    let calls: Vec<_> = trace(&bundle, "rate-limited").into_iter().filter(|e| e["kind"] == "model.call").collect();
    assert_eq!(calls.len(), 1, "one call, answered after the wait: {calls:?}");
    assert_eq!((calls[0]["payload"]["status"].as_u64(), calls[0]["payload"]["retries"].as_u64()), (Some(200), Some(1)));
    assert!(calls[0]["payload"]["waited_ms"].as_u64().unwrap() >= 1000, "{:?}", calls[0]);
    let statuses: Vec<u16> =
        mock.received().iter().filter(|c| c.body.to_string().contains("RATE_LIMIT")).map(|c| c.status).collect();
    assert_eq!(statuses, [429, 200]);

    let down = result(&bundle, "outage");
    assert_eq!(down["agent"]["terminated_by"], "infra_failure", "{down}");
    assert!(down["agent"]["error"].as_str().unwrap().contains("503 to 3 tries"), "{down}");
    assert_eq!(mock.received().iter().filter(|c| c.body.to_string().contains("ALWAYS503")).count(), 3);

    assert!(v["summary"]["provider_wait_seconds"].as_f64().unwrap() >= 1.0, "{v}");
    let run = v["run_id"].as_str().unwrap();
    let shown = text(&ws.run(&["runs", "show", run]).stdout);
    assert!(shown.contains("s for the model provider"), "{shown}");
    let one = text(&ws.run(&["show", run, "rate-limited", "--full"]).stdout);
    assert!(one.contains("waited 1.") && one.contains("2 tries"), "{one}");
}

/// Issue 59: the run's budget is kept at the wire: once the calls of every task together spent
/// `max_run_cost_usd`, the next call of any task is refused, so the agents still running stop
/// there instead of spending on; the overshoot is the calls in flight, and it is said.
#[test]
fn the_runs_budget_refuses_the_next_call_of_every_task_once_spent() {
    // Fifty looping agents at once (two workers of 25), each call 0.2 s: fifty calls in flight.
    let mock = MockLlm::start(Duration::from_millis(200));
    let ws = workspace();
    let ids: Vec<String> = (0..50).map(|i| format!("loop-{i:02}")).collect();
    let lines: String = ids.iter().map(|id| format!("{}\n", serde_json::json!({"id": id, "input": "loop"}))).collect();
    ws.write("cases.jsonl", &lines);
    let cfg = config(&ws, "budget", &mock.base_url(), "");
    let yaml =
        std::fs::read_to_string(&cfg).unwrap().replacen("backend:\n", "max_run_cost_usd: 1.5\nbackend:\n", 1).replacen(
            "  max_concurrent_jobs: 2\n",
            "  max_concurrent_jobs: 2\n  tasks_per_job: 25\n  tasks_in_parallel: 25\n",
            1,
        );
    std::fs::write(&cfg, yaml).unwrap();
    let out = ws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{said}\n{}", text(&out.stderr));
    assert!(said.contains("of the $1.5000 budget (over by $"), "{said}");
    // Each call costs $0.015: the budget is 100 calls, and at most the fifty in flight when it
    // was reached go past it.
    let calls = mock.received().len() as f64;
    assert!(calls * 0.015 <= 1.5 + 50.0 * 0.015 + 1e-9, "{calls} calls were made past a $1.50 budget");
    let bundle = ws.runs().join(said.lines().find_map(|l| l.strip_prefix("run     ")).unwrap().trim());
    let summary = read_json(&bundle.join("summary.json"));
    assert_eq!(summary["status"], "budget_exceeded", "{summary}");
    assert!(summary["total_cost_usd"].as_f64().unwrap() <= 1.5 + 50.0 * 0.015 + 1e-9, "{summary}");
    // The overshoot is what every call cost past the budget (tasks cut short included).
    assert_eq!(summary["budget_usd"], 1.5, "{summary}");
    let over = summary["over_budget_usd"].as_f64().unwrap();
    assert!((over - (calls * 0.015 - 1.5).max(0.0)).abs() < 1e-6, "{calls} calls; the summary says {summary}");
    let cut: Vec<serde_json::Value> = results(&bundle)
        .into_iter()
        .filter(|r| r["agent"]["error"].as_str().is_some_and(|e| e.contains("the run's budget is spent")))
        .collect();
    assert!(!cut.is_empty(), "a running task's next call was refused");
    assert!(cut.iter().all(|r| r["agent"]["terminated_by"] == "infra_failure"), "{cut:?}");
}

/// Issue 59: the runs of a set (`--matrix`) share one budget at the wire: every worker of both
/// runs reads the set's one ledger before each call, so four looping agents in each run stop
/// together once the set, not each run, spent `max_run_cost_usd`; the set's table says by how
/// much the calls in flight went over.
#[test]
fn a_sets_runs_share_one_budget_at_the_wire() {
    let mock = MockLlm::start(Duration::ZERO);
    let ws = workspace();
    let lines: String =
        (0..4).map(|i| format!("{}\n", serde_json::json!({"id": format!("loop-{i}"), "input": "loop"}))).collect();
    ws.write("cases.jsonl", &lines);
    let cfg = config(&ws, "set-budget", &mock.base_url(), "");
    let yaml = std::fs::read_to_string(&cfg).unwrap().replacen("backend:\n", "max_run_cost_usd: 0.1\nbackend:\n", 1);
    std::fs::write(&cfg, yaml).unwrap();
    let (v, code, out) = ws.submit(&cfg, &["--matrix", "agent.limits.max_wall_seconds=100,101"]);
    assert_eq!(code, 3, "{v}\n{}", text(&out.stderr));
    // Each call costs $0.015; the set's fleet runs two tasks at once: two calls in flight at most.
    let calls = mock.received().len() as f64;
    assert!(calls * 0.015 <= 0.1 + 2.0 * 0.015 + 1e-9, "{calls} calls were made past the set's $0.10 budget: {v}");
    assert_eq!(v["budget_usd"], 0.1, "{v}");
    let (spent, over) = (v["spent_usd"].as_f64().unwrap(), v["over_budget_usd"].as_f64().unwrap());
    assert!(spent <= 0.1 + 2.0 * 0.015 + 1e-9 && (over - (spent - 0.1).max(0.0)).abs() < 1e-9, "{v}");
}

/// Issue 59: 200 tasks against a provider that allows 600 requests a minute and answers 429
/// beyond. With `upstream.rate_limits` at that limit, the workers' gateways book every call in
/// the run index together and each waits its turn: no 429, no task errs, the wait is said. Without
/// it, the same four workers outrun a provider that allows two calls a second, however slow this
/// machine is, and the provider refuses calls (the gateway waits those out).
#[test]
fn two_hundred_tasks_share_one_rate_limit_across_workers_and_the_provider_never_refuses() {
    let all: Vec<String> = (0..200).map(|i| format!("c{i:03}")).collect();
    let run = |governed: bool, per_minute: u64, ids: &[String]| {
        let mock = MockLlm::start_limited(Duration::ZERO, per_minute);
        let ws = workspace();
        let lines: String =
            ids.iter().map(|id| format!("{}\n", serde_json::json!({"id": id, "input": "chat"}))).collect();
        ws.write("cases.jsonl", &lines);
        let limits = if governed { "    rate_limits: [{model: mock-model, requests_per_minute: 600}]\n" } else { "" };
        let cfg = config(&ws, "rate", &mock.base_url(), "");
        let yaml = std::fs::read_to_string(&cfg)
            .unwrap()
            .replacen("    prices:\n", &format!("{limits}    prices:\n"), 1)
            .replacen("  max_concurrent_jobs: 2\n", "  max_concurrent_jobs: 4\n  tasks_per_job: 50\n", 1);
        std::fs::write(&cfg, yaml).unwrap();
        let (v, code, out) = ws.submit(&cfg, &[]);
        // A task that did not finish says why in its result and its log.
        let why = |id: &String| {
            let task = ws.runs().join(v["run_id"].as_str().unwrap_or_default()).join("tasks").join(id);
            let r = read_json(&task.join("result.json"));
            let log = crate::util::read_text(task.join("worker.log")).unwrap_or_default();
            (r["agent"]["terminated_by"] != "completed").then(|| format!("{id}: {}\n{log}", r["agent"]))
        };
        if governed && v["status"] != "complete" {
            let unfinished: Vec<String> = ids.iter().filter_map(why).collect();
            panic!("{v} {}\n{}", text(&out.stderr), unfinished.join("\n"));
        }
        let refused = mock.received().iter().filter(|c| c.status == 429).count();
        (v, code, refused)
    };
    let (v, code, refused) = run(true, 600, &all);
    assert_eq!((code, v["summary"]["passed"].as_u64()), (0, Some(200)), "{v}");
    assert_eq!(refused, 0, "the provider never had to refuse a call: {v}");
    assert!(v["summary"]["provider_wait_seconds"].as_f64().unwrap() > 1.0, "the calls waited their turn: {v}");
    let (v, _, refused) = run(false, 120, &all[..40]);
    assert!(refused > 0, "without the governor the provider refuses calls: {v}");
}

/// Issue 73: a provider that allows 120 requests a minute and a run that may keep twelve jobs
/// in flight, with no rate limit configured. Under `concurrency: fixed` the twelve keep hitting
/// the provider's limit, and calls refused through all the gateway's tries lose their tasks;
/// under the default `adaptive` the controller starts with a few jobs, sees the 429s the
/// workers' gateways count in the index and keeps fewer jobs in flight: fewer 429s, every task
/// passed, and `status` says how many jobs it kept and why.
#[test]
fn concurrency_backs_off_on_the_providers_429s_and_says_why() {
    let ids: Vec<String> = (0..24).map(|i| format!("c{i:02}")).collect();
    let run = |mode: &str| {
        let mock = MockLlm::start_limited(Duration::ZERO, 120);
        let ws = workspace();
        let lines: String =
            ids.iter().map(|id| format!("{}\n", serde_json::json!({"id": id, "input": "chat"}))).collect();
        ws.write("cases.jsonl", &lines);
        let cfg = config(&ws, "conc", &mock.base_url(), "");
        let yaml = std::fs::read_to_string(&cfg).unwrap().replacen(
            "  max_concurrent_jobs: 2\n",
            &format!("  max_concurrent_jobs: 12\n  concurrency: {mode}\n"),
            1,
        );
        std::fs::write(&cfg, yaml).unwrap();
        let (v, _, out) = ws.submit(&cfg, &[]);
        let refused = mock.received().iter().filter(|c| c.status == 429).count();
        let run = v["run_id"].as_str().unwrap().to_string();
        let index = ws.index();
        let index = index.to_str().unwrap();
        let status: serde_json::Value =
            serde_json::from_slice(&ws.run(&["status", &run, "--json", "--index", index]).stdout).unwrap();
        let shown = ws.run(&["status", &run, "--index", index]);
        (v, refused, status["run"]["concurrency"].clone(), text(&shown.stdout), text(&out.stderr))
    };
    let (fixed, fixed_refused, fixed_conc, _, _) = run("fixed");
    let (v, refused, conc, shown, stderr) = run("adaptive");
    eprintln!("429s: fixed {fixed_refused}, adaptive {refused}; adaptive ended at {conc}");
    assert!(fixed_refused > 0, "twelve jobs at once meet the provider's limit: {fixed}");
    assert_eq!(fixed_conc["limit"], 12, "fixed never moves: {fixed_conc}");
    assert_eq!(v["summary"]["passed"].as_u64(), Some(24), "no task errored: {v}");
    assert!(refused < fixed_refused, "fewer 429s adaptive ({refused}) than fixed ({fixed_refused})");
    assert!(conc["limit"].as_u64().unwrap() < 12, "{conc}");
    assert_eq!(conc["max"], 12, "{conc}");
    assert!(conc["why"].as_str().unwrap().contains("rate limited"), "{conc}");
    assert_eq!(v["status"], "complete", "{v} {stderr}");
    assert!(shown.contains("of 12 in flight at the end: "), "{shown}");
}
