//! End-to-end telemetry tests: the real binary exports to an OTLP receiver on 127.0.0.1 (built
//! on the OTLP protobuf definitions, gRPC and HTTP/protobuf), and the bundle's `spans.jsonl`
//! files are checked against what arrived.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::otlp::{Protocol, RSpan, Receiver};
use crate::util::*;
use nix::sys::signal::Signal;

fn spans_file(p: &Path) -> Vec<serde_json::Value> {
    crate::util::read_text(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every span of a bundle: the run's file and every task's.
fn bundle_spans(bundle: &Path) -> (Vec<serde_json::Value>, HashMap<String, Vec<serde_json::Value>>) {
    let run = spans_file(&bundle.join("spans.jsonl"));
    let mut tasks = HashMap::new();
    for d in std::fs::read_dir(bundle.join("tasks")).unwrap().flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        let id = name.strip_suffix(".tar.gz").unwrap_or(&name).to_string();
        let p = bundle.join("tasks").join(&id).join("spans.jsonl");
        if bundle_file_exists(&p) {
            tasks.insert(id, spans_file(&p));
        }
    }
    (run, tasks)
}

fn with_otlp(cmd: &mut std::process::Command, endpoint: &str, protocol: &str) {
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint).env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
}

fn one_trace_for_the_whole_fleet(protocol: Protocol) {
    let receiver = Receiver::start(protocol);
    let ws = Workspace::new();
    // 12 tasks in 4 jobs, two workers at a time.
    let cfg = toy_config(&ws, 12, 5, 3, 2);
    let mut cmd = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    let wire = if protocol == Protocol::Grpc { "grpc" } else { "http/protobuf" };
    with_otlp(&mut cmd, &receiver.endpoint(), wire);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());

    // Spans of every process arrive: the controller exits after its workers, flushing last.
    assert!(
        receiver.wait_for(Duration::from_secs(20), |s| {
            s.spans.iter().filter(|s| s.name == "eval.task").count() == 12
                && s.spans.iter().any(|s| s.name == "eval.run")
                && s.points.iter().any(|p| p.metric == "agenteval.tasks.completed")
        }),
        "spans and metrics did not all arrive"
    );
    let store = receiver.store.lock().unwrap();
    let by_id: HashMap<&str, &RSpan> = store.spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let runs: Vec<&RSpan> = store.spans.iter().filter(|s| s.name == "eval.run").collect();
    assert_eq!(runs.len(), 1);
    let root = runs[0];
    assert!(root.parent_span_id.is_empty(), "eval.run is the root");
    assert_eq!(root.attr("agenteval.run.id").unwrap(), &serde_json::json!(run_id));
    assert_eq!(root.attr("agenteval.status").unwrap(), "complete");
    assert_eq!(root.resource["agenteval.role"], "controller");
    assert_eq!(root.resource["service.name"], "agenteval");
    for s in &store.spans {
        assert_eq!(s.trace_id, root.trace_id, "{} is in the run's trace", s.name);
    }
    let jobs: Vec<&RSpan> = store.spans.iter().filter(|s| s.name == "eval.job").collect();
    assert_eq!(jobs.len(), 4);
    for j in &jobs {
        assert_eq!(j.parent_span_id, root.span_id);
        assert_eq!(j.attr("agenteval.attempt").unwrap(), 1);
        assert_eq!(j.attr("agenteval.job.status").unwrap(), "succeeded");
    }
    let mut task_ids = BTreeSet::new();
    for t in store.spans.iter().filter(|s| s.name == "eval.task") {
        let parent = by_id.get(t.parent_span_id.as_str()).expect("eval.task has a received parent");
        assert_eq!(parent.name, "eval.job", "eval.task hangs under its job");
        assert!(
            parent.start_unix_nano <= t.start_unix_nano && t.end_unix_nano <= parent.end_unix_nano,
            "the job's span covers its task: job {}..{}, task {}..{}",
            parent.start_unix_nano,
            parent.end_unix_nano,
            t.start_unix_nano,
            t.end_unix_nano
        );
        assert_eq!(t.attr("agenteval.job.id"), parent.attr("agenteval.job.id"));
        assert_eq!(t.resource["agenteval.role"], "worker");
        for key in [
            "agenteval.run.id",
            "agenteval.task.id",
            "agenteval.benchmark",
            "agenteval.agent",
            "agenteval.backend",
            "agenteval.attempt",
            "agenteval.cost_usd",
            "agenteval.tokens",
            "agenteval.terminated_by",
        ] {
            assert!(t.attr(key).is_some(), "eval.task has {key}: {:?}", t.attrs);
        }
        task_ids.insert(t.attr("agenteval.task.id").unwrap().as_str().unwrap().to_string());
    }
    assert_eq!(task_ids.len(), 12, "one eval.task per task");
    // Every other worker span leads up to an eval.task.
    let names: BTreeSet<&str> = store.spans.iter().map(|s| s.name.as_str()).collect();
    for n in [
        "benchmark.prepare",
        "agent.execute",
        "policy.check",
        "benchmark.grade",
        "evaluator.exact_match",
        "evaluator.no_error",
        "benchmark.teardown",
        "scorer.summarize",
        "report.render",
        "chat mock",
        "execute_tool calculator",
    ] {
        assert!(names.contains(n), "a {n} span arrived: {names:?}");
    }
    for s in store.spans.iter().filter(|s| !s.name.starts_with("eval.") && s.resource["agenteval.role"] == "worker") {
        let mut p = by_id[s.parent_span_id.as_str()];
        while p.name != "eval.task" {
            p = by_id[p.parent_span_id.as_str()];
        }
    }
    let chat = store.spans.iter().find(|s| s.name == "chat mock").unwrap();
    assert_eq!(chat.attr("gen_ai.operation.name").unwrap(), "chat");
    assert_eq!(chat.attr("gen_ai.request.model").unwrap(), "mock");
    assert!(chat.attr("gen_ai.usage.input_tokens").unwrap().as_i64().unwrap() > 0);
    assert_eq!(by_id[chat.parent_span_id.as_str()].name, "agent.execute");
    // The toy's agent_error tasks mark their agent span as failed.
    assert!(store.spans.iter().any(|s| s.name == "agent.execute" && s.status_code == 2));

    // The bundle has the same spans, collector or not.
    let (run_spans, task_spans) = bundle_spans(&bundle);
    assert_eq!(task_spans.len(), 12);
    let received: BTreeSet<&str> = store.spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut in_bundle = 0;
    for s in run_spans.iter().chain(task_spans.values().flatten()) {
        assert!(received.contains(s["span_id"].as_str().unwrap()), "bundle span {s} was exported");
        in_bundle += 1;
    }
    assert_eq!(in_bundle, store.spans.len(), "the bundle holds every exported span");
    let manifest = read_json(&bundle.join("manifest.json"));
    assert!(manifest["files"]["spans.jsonl"].is_object(), "the manifest lists spans.jsonl");
    assert!(manifest["files"]["tasks/toy-0000000.tar.gz"].is_object());
    assert!(bundle_file_exists(&bundle.join("tasks/toy-0000000/spans.jsonl")), "the task's spans are in its pack");

    // And they leave the bundle as OTLP JSON lines (`export --to otlp`): the protocol's own
    // reader takes every line, and each span is the one the collector received.
    let file = ws.path().join("traces.jsonl");
    let out = ws.run(&["export", &run_id, "--to", "otlp", "--out", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (said["requests"].as_u64(), said["skipped"].as_u64()),
        (Some(13), Some(0)),
        "one line per task, one for the run: {said}"
    );
    let mut exported: HashMap<String, RSpan> = HashMap::new();
    for line in crate::util::read_text(&file).unwrap().lines() {
        let req: opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for s in crate::util::otlp::spans_of(req) {
            exported.insert(s.span_id.clone(), s);
        }
    }
    assert_eq!(exported.len(), store.spans.len(), "every span, once");
    for r in &store.spans {
        let e = &exported[&r.span_id];
        let shape = |s: &RSpan| {
            (
                s.trace_id.clone(),
                s.parent_span_id.clone(),
                s.name.clone(),
                s.status_code,
                s.start_unix_nano,
                s.end_unix_nano,
            )
        };
        assert_eq!(shape(e), shape(r), "{}", r.name);
        assert_eq!(e.attrs, r.attrs, "{}", r.name);
        assert_eq!(e.resource["agenteval.run.id"], serde_json::json!(run_id));
    }

    // Fleet metrics: counts match the bundle.
    let summary = read_json(&bundle.join("summary.json"));
    assert_eq!(store.total("agenteval.tasks.completed"), 12.0);
    assert_eq!(store.total("agenteval.jobs.submitted"), 4.0);
    assert_eq!(store.total("agenteval.jobs.succeeded"), 4.0);
    assert_eq!(store.total("agenteval.jobs.failed"), 0.0);
    assert_eq!(store.total("agenteval.tokens"), summary["total_tokens"].as_f64().unwrap());
    assert!((store.total("agenteval.cost") - summary["total_cost_usd"].as_f64().unwrap()).abs() < 1e-9);
    let passed: f64 = store
        .latest("agenteval.tasks.completed")
        .iter()
        .filter(|p| p.attrs["agenteval.passed"] == true)
        .map(|p| p.value)
        .sum();
    assert_eq!(passed, summary["passed"].as_f64().unwrap());
    let durations = store.latest("agenteval.task.duration");
    assert_eq!(durations.iter().map(|p| p.count).sum::<u64>(), 12);
    let starts = store.latest("agenteval.job.start_latency");
    assert_eq!(starts.iter().map(|p| p.count).sum::<u64>(), 4, "one start latency per job");
    let rate = store.latest("agenteval.pass_rate");
    assert!((rate[0].value - summary["pass_rate"].as_f64().unwrap()).abs() < 1e-9);
    assert_eq!(store.latest("agenteval.queue.depth")[0].value, 0.0);
    assert_eq!(store.latest("agenteval.jobs.running")[0].value, 0.0);
    for p in &durations {
        assert_eq!(p.attrs["agenteval.run.id"], serde_json::json!(run_id));
        assert_eq!(p.attrs["agenteval.benchmark"], "toy");
        assert_eq!(p.attrs["agenteval.backend"], "local");
    }
    if protocol == Protocol::Grpc {
        assert!(store.grpc_requests > 0 && store.http_requests == 0);
    } else {
        assert!(store.http_requests > 0 && store.grpc_requests == 0);
    }
}

#[test]
fn a_local_run_arrives_as_one_trace_over_grpc() {
    one_trace_for_the_whole_fleet(Protocol::Grpc);
}

#[test]
fn a_local_run_arrives_as_one_trace_over_http_protobuf() {
    one_trace_for_the_whole_fleet(Protocol::Http);
}

/// A collector that accepts connections and never answers: the slowest way to be down.
fn black_hole() -> (std::net::TcpListener, String) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    (l, endpoint)
}

fn assert_complete_spans(bundle: &Path, tasks: usize) {
    let (run, task_spans) = bundle_spans(bundle);
    assert_eq!(run.iter().filter(|s| s["name"] == "eval.run").count(), 1);
    let trace = run[0]["trace_id"].as_str().unwrap().to_string();
    assert_eq!(task_spans.len(), tasks, "every task has its spans.jsonl");
    for (task, spans) in &task_spans {
        let t: Vec<_> = spans.iter().filter(|s| s["name"] == "eval.task").collect();
        assert_eq!(t.len(), 1, "{task}: one eval.task");
        assert_eq!(t[0]["trace_id"], serde_json::json!(trace));
        assert!(spans.iter().any(|s| s["name"] == "agent.execute"), "{task}: agent.execute");
        assert!(spans.iter().any(|s| s["name"] == "benchmark.grade"), "{task}: benchmark.grade");
    }
}

#[test]
fn a_dead_or_silent_collector_costs_bounded_time_and_one_warning() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 6, 5, 2, 2);
    let run = |otlp: Option<(&str, &str)>| {
        let started = Instant::now();
        let mut cmd = ws.cmd(&[
            "submit",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--set",
            "telemetry.export_timeout_seconds=2",
        ]);
        if let Some((endpoint, protocol)) = otlp {
            with_otlp(&mut cmd, endpoint, protocol);
        }
        let out = cmd.output().unwrap();
        (started.elapsed(), out)
    };
    let (baseline, _) = run(None);
    // Closed port: connections are refused at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (_hole, silent) = black_hole();
    for (endpoint, protocol) in
        [(closed.as_str(), "grpc"), (silent.as_str(), "http/protobuf"), (silent.as_str(), "grpc")]
    {
        let (took, out) = run(Some((endpoint, protocol)));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{protocol} {endpoint}: {stderr}");
        // At most one export timeout (2 s) more than the same run without export; the slack
        // is for a loaded machine. Every worker waiting on the collector would cost seconds more.
        let bound = baseline + Duration::from_secs(2) + Duration::from_millis(1500);
        assert!(took <= bound, "{protocol} {endpoint}: took {took:?}, without export {baseline:?}");
        let warnings = stderr.lines().filter(|l| l.contains("telemetry")).count();
        // Export was tried and failed: said once, not once per span or per worker.
        assert_eq!(warnings, 1, "exactly one warning: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["status"], "complete");
        assert_complete_spans(Path::new(v["bundle"].as_str().unwrap()), 6);
    }
}

#[test]
fn a_worker_stopped_by_sigterm_flushes_its_spans() {
    let receiver = Receiver::start(Protocol::Grpc);
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 4, 1500, 1, 2);
    let mut cmd = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    with_otlp(&mut cmd, &receiver.endpoint(), "grpc");
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let victim = signal_a_worker_mid_task(&ws, Signal::SIGTERM);
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(receiver.wait_for(Duration::from_secs(20), |s| s.spans.iter().any(|s| s.name == "eval.run")));
    let store = receiver.store.lock().unwrap();
    let victim_spans: Vec<&RSpan> = store
        .spans
        .iter()
        .filter(|s| s.name == "eval.task" && s.attr("agenteval.task.id") == Some(&serde_json::json!(victim)))
        .collect();
    let stopped = victim_spans.iter().find(|s| s.attr("agenteval.attempt") == Some(&serde_json::json!(1)));
    let stopped = stopped.expect("the SIGTERMed worker's eval.task span was flushed before it exited");
    assert_eq!(stopped.status_code, 2, "marked as an error (cancelled)");
    assert!(
        victim_spans.iter().any(|s| s.attr("agenteval.attempt") == Some(&serde_json::json!(2))),
        "the retry has its own span"
    );
    let root = store.spans.iter().find(|s| s.name == "eval.run").unwrap();
    assert_eq!(stopped.trace_id, root.trace_id);
    drop(store);
    // The fleet metrics count the stopped job once as failed and once as retried.
    assert!(
        receiver.wait_for(Duration::from_secs(20), |s| s.total("agenteval.jobs.retried") > 0.0),
        "no agenteval.jobs.retried arrived"
    );
    let store = receiver.store.lock().unwrap();
    assert_eq!(store.total("agenteval.jobs.retried"), 1.0);
    assert_eq!(store.total("agenteval.jobs.failed"), 1.0);
    assert_eq!(store.total("agenteval.jobs.submitted"), 5.0, "4 jobs and one retry");
}

#[test]
fn once_the_collector_is_known_down_new_workers_do_not_export() {
    let ws = Workspace::new();
    // One job at a time, each a few hundred milliseconds; the collector refuses connections:
    // no job is told to export to it.
    let cfg = toy_config(&ws, 16, 300, 1, 1);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let mut cmd = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    with_otlp(&mut cmd, &closed, "grpc");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bundle = PathBuf::from(v["bundle"].as_str().unwrap());
    let env_of = |job: &str| read_json(&bundle.join(format!("jobs/{job}/attempt-1/job.json")))["env"].clone();
    // The controller asks the collector before the first job: known down from the start.
    let first = env_of("j000001");
    assert_eq!(first["OTEL_SDK_DISABLED"], "true", "{first}");
    let last = env_of("j000016");
    assert_eq!(last["OTEL_SDK_DISABLED"], "true", "{last}");
    assert!(last["TRACEPARENT"].is_string(), "the trace context still goes: {last}");
    assert_complete_spans(&bundle, 16);
}

/// Exports resume when the collector comes back: jobs dispatched while the controller's exports
/// fail are told not to export, and jobs dispatched after one gets through export again.
#[test]
fn when_the_collector_comes_back_new_workers_export_again() {
    let ws = Workspace::new();
    let cfg = toy_config(&ws, 40, 300, 1, 1);
    // Held from the start, so the port cannot be taken; silent until served.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let mut cmd = ws.cmd(&[
        "submit",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--set",
        "telemetry.export_timeout_seconds=0.5",
    ]);
    with_otlp(&mut cmd, &endpoint, "grpc");
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let env_of = |spec: &Path| read_json(spec)["env"].clone();
    let specs = || -> Vec<PathBuf> {
        let Some(run) =
            std::fs::read_dir(ws.runs()).ok().and_then(|d| d.flatten().map(|e| e.path()).find(|p| p.is_dir()))
        else {
            return vec![];
        };
        let mut out: Vec<PathBuf> = std::fs::read_dir(run.join("jobs"))
            .map(|d| d.flatten().map(|e| e.path().join("attempt-1/job.json")).filter(|p| p.is_file()).collect())
            .unwrap_or_default();
        out.sort();
        out
    };
    wait_until("a job told not to export", Duration::from_secs(60), || {
        specs().iter().any(|s| env_of(s)["OTEL_SDK_DISABLED"] == "true")
    });
    let receiver = Receiver::serve_on(Protocol::Grpc, true, listener);
    let out = wait_output(child, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let all = specs();
    assert_eq!(all.len(), 40);
    let last = env_of(all.last().unwrap());
    assert_eq!(last["OTEL_EXPORTER_OTLP_ENDPOINT"], serde_json::json!(endpoint), "the last job exports again: {last}");
    assert!(
        receiver.wait_for(Duration::from_secs(20), |s| s.spans.iter().any(|s| s.name == "eval.task")),
        "workers' spans arrive once the collector is back"
    );
}

/// A Phoenix server of its own (stopped when the guard is dropped): its HTTP port, the guard.
fn phoenix() -> (u16, (Server, tempfile::TempDir)) {
    let (http, grpc) = (free_port(), free_port());
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(python_tool("phoenix", "phoenix"));
    cmd.arg("serve")
        .env("PHOENIX_WORKING_DIR", home.path())
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", http.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .env("PHOENIX_TELEMETRY_ENABLED", "false");
    let server = start_server(cmd, http, "/healthz", "Phoenix");
    (http, (server, home))
}

/// Arize Phoenix, a real LLM-observability receiver, reads a run's spans as its own: through
/// its REST API the model calls are LLM spans with their model and token counts, the tool calls
/// TOOL spans with the tool's name, and the agent an AGENT span.
#[test]
fn phoenix_recognises_the_model_calls_tokens_and_tool_calls_of_a_run() {
    use agenteval_testkit::llm_mock::MockLlm;
    let (http, _phoenix) = phoenix();

    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write("secrets.env", "OPENAI_API_KEY=sk-test-phoenix-0123456789abcdef\n");
    ws.write("cases.jsonl", "{\"id\": \"tool\", \"input\": \"USE_TOOL please\"}\n");
    let cfg = ws.write(
        "phoenix.yaml",
        &format!(
            "name: phoenix-check\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: llm\n  model: openai:gpt-4o-mini\n  base_url: {}\n  tools: [python]\n\
             backend:\n  secrets_file: secrets.env\ntelemetry:\n  resource_attributes:\n    openinference.project.name: agenteval-check\n",
            mock.base_url()
        ),
    );
    let mut submit = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    with_otlp(&mut submit, &format!("http://127.0.0.1:{http}"), "http/protobuf");
    let out = submit.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Phoenix ingests in the background: ask until the spans are there.
    let mut spans = Vec::new();
    wait_until("Phoenix to hold the run's LLM and TOOL spans", Duration::from_secs(60), || {
        let r = ui::request(http, "GET", "/v1/projects/agenteval-check/spans?limit=1000", "127.0.0.1", &[]);
        if r.status != 200 {
            return false;
        }
        spans = r.json()["data"].as_array().cloned().unwrap_or_default();
        let kinds: BTreeSet<&str> = spans.iter().filter_map(|s| s["span_kind"].as_str()).collect();
        kinds.contains("LLM") && kinds.contains("TOOL")
    });
    let attr = |s: &serde_json::Value, k: &str| s["attributes"][k].clone();
    let llm: Vec<_> = spans.iter().filter(|s| s["span_kind"] == "LLM").collect();
    assert_eq!(llm.len(), 2, "two model calls: {spans:?}");
    for s in &llm {
        assert_eq!(attr(s, "llm.model_name"), "gpt-4o-mini", "{s}");
        assert_eq!(attr(s, "llm.token_count.prompt"), 10, "{s}");
        assert_eq!(attr(s, "llm.token_count.completion"), 5, "{s}");
        assert_eq!(attr(s, "llm.token_count.total"), 15, "{s}");
        assert_eq!(attr(s, "llm.provider"), "openai", "{s}");
    }
    let tools: Vec<_> = spans.iter().filter(|s| s["span_kind"] == "TOOL").collect();
    assert_eq!(tools.len(), 1, "{spans:?}");
    assert_eq!(attr(tools[0], "tool.name"), "python", "{}", tools[0]);
    assert!(spans.iter().any(|s| s["span_kind"] == "AGENT" && s["name"] == "agent.execute"), "{spans:?}");
}

/// A third-party agent's calls through the model gateway reach Phoenix as LLM spans too: a
/// `command` agent on OpenAI's streamed wire and on Anthropic's, its tokens the provider's.
#[test]
fn phoenix_shows_a_gateway_agents_model_calls_as_llm_spans() {
    use agenteval_testkit::llm_mock::MockLlm;
    let (http, _phoenix) = phoenix();

    let mock = MockLlm::start(Duration::ZERO);
    let ws = Workspace::new();
    ws.write(
        "secrets.env",
        "OPENAI_API_KEY=sk-test-phoenix-0123456789abcdef\nANTHROPIC_API_KEY=sk-test-phoenix-0123456789abcdef\n",
    );
    ws.write("agent.py", crate::gateway::AGENT);
    ws.write(
        "cases.jsonl",
        "{\"id\": \"a\", \"input\": \"chat-stream\"}\n{\"id\": \"b\", \"input\": \"anthropic-stream\"}\n",
    );
    let cfg = ws.write(
        "phoenix.yaml",
        &format!(
            "name: phoenix-gateway\nbenchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, agent.py]\n  model: mock-model\n  upstream:\n    openai: {{base_url: '{url}'}}\n    anthropic: {{base_url: '{url}'}}\n\
             backend:\n  secrets_file: secrets.env\ntelemetry:\n  resource_attributes:\n    openinference.project.name: agenteval-gateway\n",
            url = mock.base_url()
        ),
    );
    let mut submit = ws.cmd(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    with_otlp(&mut submit, &format!("http://127.0.0.1:{http}"), "http/protobuf");
    let out = submit.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let mut spans = Vec::new();
    wait_until("Phoenix to hold the gateway calls' LLM spans", Duration::from_secs(60), || {
        let r = ui::request(http, "GET", "/v1/projects/agenteval-gateway/spans?limit=1000", "127.0.0.1", &[]);
        if r.status != 200 {
            return false;
        }
        spans = r.json()["data"].as_array().cloned().unwrap_or_default();
        spans.iter().filter(|s| s["span_kind"] == "LLM").count() >= 2
    });
    let attr = |s: &serde_json::Value, k: &str| s["attributes"][k].clone();
    let llm: Vec<_> = spans.iter().filter(|s| s["span_kind"] == "LLM").collect();
    assert_eq!(llm.len(), 2, "one call per task: {spans:?}");
    let mut providers: Vec<String> =
        llm.iter().map(|s| attr(s, "llm.provider").as_str().unwrap_or("").to_string()).collect();
    providers.sort();
    assert_eq!(providers, ["anthropic", "openai"], "{llm:?}");
    for s in &llm {
        assert_eq!(attr(s, "llm.model_name"), "mock-model", "{s}");
        assert_eq!(attr(s, "llm.token_count.prompt"), 10, "{s}");
        assert_eq!(attr(s, "llm.token_count.completion"), 5, "{s}");
    }
}
