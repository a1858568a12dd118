//! `agenteval import otlp FILE --config CONFIG`: an agent's traces recorded elsewhere (OTLP JSON
//! lines, as `export --to otlp` and a collector's file exporter write them) made a run of
//! CONFIG's tasks. Each task's answer, tool calls and tokens are read from its GenAI spans, so
//! that `regrade` grades them with CONFIG's evaluators, and `analyze`, `compare` and the UI read
//! the run as any other.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use agenteval_core::format::Imported;
use agenteval_core::model::{AgentResult, EventKind, RunStatus, TaskResult, TaskSpec, TerminatedBy};
use agenteval_core::{JobId, RunId, TaskId};
use agenteval_engine::bundle::{self, Metadata, TaskTable};
use chrono::{DateTime, Utc};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, status};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::IndexArgs;
use crate::{Failure, exit};

/// The attribute that names the task a span (and all below it) belongs to; on a resource, every
/// span of it.
const TASK_ATTR: &str = "agenteval.task.id";
/// Most bytes of a traces file read.
const MAX_FILE: u64 = 256 << 20;

/// What one task's spans say the agent did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TaskTrace {
    pub id: String,
    pub started: Option<DateTime<Utc>>,
    pub ended: Option<DateTime<Utc>>,
    /// Its events in order: what the model said on the way, each tool call and its result.
    pub events: Vec<(EventKind, Value)>,
    /// The last model turn's text.
    pub answer: Option<String>,
    /// The task's input, as the first model call was sent it (when content was captured).
    pub input: Option<String>,
    pub model_calls: u32,
    pub tokens: u64,
    /// What the calls cost, when every call said (`agenteval.cost_usd`).
    pub cost_usd: Option<f64>,
    /// The task's span ended in error: why.
    pub error: Option<String>,
}

/// The tasks a traces file holds, by id, and how many spans named no task.
#[derive(Debug, Default)]
pub struct Traces {
    pub tasks: Vec<TaskTrace>,
    pub spans: usize,
    pub without_task: usize,
}

fn text(v: &AnyValue) -> Option<String> {
    use any_value::Value as V;
    match v.value.as_ref()? {
        V::StringValue(s) => Some(s.clone()),
        V::IntValue(i) => Some(i.to_string()),
        V::DoubleValue(d) => Some(d.to_string()),
        V::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref())
}

fn attr_text(attrs: &[KeyValue], key: &str) -> Option<String> {
    attr(attrs, key).and_then(text)
}

fn attr_number(attrs: &[KeyValue], key: &str) -> Option<f64> {
    use any_value::Value as V;
    match attr(attrs, key)?.value.as_ref()? {
        V::IntValue(i) => Some(*i as f64),
        V::DoubleValue(d) => Some(*d),
        V::StringValue(s) => s.parse().ok(),
        _ => None,
    }
}

fn time(nanos: u64) -> Option<DateTime<Utc>> {
    (nanos > 0).then(|| DateTime::from_timestamp_nanos(nanos.min(i64::MAX as u64) as i64))
}

/// The requests of a file: one per line (the file exporter's form), or the whole file as one.
fn requests(bytes: &[u8], source: &str) -> Result<Vec<ExportTraceServiceRequest>, String> {
    let mut out = Vec::new();
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<ExportTraceServiceRequest>(line) {
            Ok(r) => out.push(r),
            Err(e) => {
                if out.is_empty()
                    && let Ok(whole) = serde_json::from_slice::<ExportTraceServiceRequest>(bytes)
                {
                    return Ok(vec![whole]);
                }
                return Err(format!(
                    "{source}:{}:{}: not an OTLP/JSON trace request ({})",
                    n + 1,
                    e.column(),
                    e.to_string().split(" at line").next().unwrap_or_default()
                ));
            }
        }
    }
    Ok(out)
}

/// The text parts of a conventions' message list (`gen_ai.output.messages`,
/// `gen_ai.input.messages`) for `role`, joined.
fn message_text(json_text: &str, role: &str) -> Option<String> {
    let messages: Value = serde_json::from_str(json_text).ok()?;
    let texts: Vec<String> = messages
        .as_array()?
        .iter()
        .filter(|m| m["role"] == role)
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["content"].as_str().map(str::to_string))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

/// Reads a traces file: each span's task (its own `agenteval.task.id`, an ancestor's, else its
/// resource's); of a task named by several spans (its attempts), the one that started last; and
/// from the task's spans in order, its model turns (`gen_ai.operation.name` `chat`; a judge's,
/// with `agenteval.evaluator.id`, is the grading's and left out) and tool calls (`execute_tool`).
// Long: the spans indexed, each given its task, then each task's spans read in order.
pub fn read(bytes: &[u8], source: &str) -> Result<Traces, String> {
    let mut spans: Vec<(Option<String>, Span)> = Vec::new();
    for req in requests(bytes, source)? {
        for rs in req.resource_spans {
            let resource_task = rs.resource.as_ref().and_then(|r| attr_text(&r.attributes, TASK_ATTR));
            for ss in rs.scope_spans {
                spans.extend(ss.spans.into_iter().map(|s| (resource_task.clone(), s)));
            }
        }
    }
    let by_id: HashMap<(Vec<u8>, Vec<u8>), usize> =
        spans.iter().enumerate().map(|(i, (_, s))| ((s.trace_id.clone(), s.span_id.clone()), i)).collect();
    // Each span's task root: the nearest span up its parents that names a task.
    let root_of = |mut i: usize| -> Option<usize> {
        for _ in 0..256 {
            let s = &spans[i].1;
            if attr_text(&s.attributes, TASK_ATTR).is_some() {
                return Some(i);
            }
            i = *by_id.get(&(s.trace_id.clone(), s.parent_span_id.clone()))?;
        }
        None
    };
    // A task's root: the latest-starting span that names it.
    let mut latest: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (_, s)) in spans.iter().enumerate() {
        if let Some(id) = attr_text(&s.attributes, TASK_ATTR) {
            let e = latest.entry(id).or_insert(i);
            if spans[*e].1.start_time_unix_nano < s.start_time_unix_nano {
                *e = i;
            }
        }
    }
    let mut members: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut without_task = 0;
    for i in 0..spans.len() {
        let task = match root_of(i) {
            Some(r) => {
                let id = attr_text(&spans[r].1.attributes, TASK_ATTR).expect("a root names its task");
                // A span under an earlier attempt's root belongs to that attempt, not the task.
                (latest.get(&id) == Some(&r)).then_some(id).ok_or(())
            }
            None => spans[i].0.clone().ok_or(()),
        };
        match task {
            Ok(id) => members.entry(id).or_default().push(i),
            Err(()) => without_task += usize::from(root_of(i).is_none()),
        }
    }
    let mut tasks = Vec::new();
    for (id, mut idx) in members {
        idx.sort_by_key(|i| spans[*i].1.start_time_unix_nano);
        let mut t = TaskTrace { id: id.clone(), cost_usd: Some(0.0), ..TaskTrace::default() };
        let mut texts: Vec<String> = Vec::new();
        for i in idx {
            let s = &spans[i].1;
            let start = time(s.start_time_unix_nano);
            let end = time(s.end_time_unix_nano);
            t.started = match (t.started, start) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            t.ended = t.ended.max(end);
            if latest.get(&id) == Some(&i)
                && s.status.as_ref().is_some_and(|st| st.code == status::StatusCode::Error as i32)
            {
                t.error = Some(s.status.as_ref().map(|st| st.message.clone()).unwrap_or_default());
            }
            let a = &s.attributes;
            match attr_text(a, "gen_ai.operation.name").as_deref() {
                Some("chat" | "text_completion" | "generate_content")
                    if attr(a, "agenteval.evaluator.id").is_none() =>
                {
                    t.model_calls += 1;
                    let tokens = attr_number(a, "gen_ai.usage.input_tokens").unwrap_or(0.0)
                        + attr_number(a, "gen_ai.usage.output_tokens").unwrap_or(0.0);
                    t.tokens += tokens.max(0.0) as u64;
                    t.cost_usd = match (t.cost_usd, attr_number(a, "agenteval.cost_usd")) {
                        (Some(sum), Some(c)) => Some(sum + c),
                        _ => None,
                    };
                    if t.input.is_none() {
                        t.input = attr_text(a, "gen_ai.input.messages").and_then(|m| message_text(&m, "user"));
                    }
                    if let Some(said) =
                        attr_text(a, "gen_ai.output.messages").and_then(|m| message_text(&m, "assistant"))
                    {
                        texts.push(said.clone());
                        t.events.push((EventKind::AgentPlan, json!({"plan": said})));
                    }
                }
                Some("execute_tool") => {
                    let tool = attr_text(a, "gen_ai.tool.name").unwrap_or_else(|| "unknown".into());
                    let call_id = attr_text(a, "gen_ai.tool.call.id");
                    let arguments = attr_text(a, "gen_ai.tool.call.arguments")
                        .map(|raw| serde_json::from_str(&raw).unwrap_or(Value::String(raw)))
                        .unwrap_or(Value::Null);
                    t.events.push((
                        EventKind::AgentToolCall,
                        json!({"tool": tool, "arguments": arguments, "call_id": call_id}),
                    ));
                    let failed = s.status.as_ref().is_some_and(|st| st.code == status::StatusCode::Error as i32);
                    if let Some(output) = attr_text(a, "gen_ai.tool.call.result") {
                        t.events.push((
                            EventKind::AgentToolResult,
                            json!({"output": output, "call_id": call_id, "is_error": failed}),
                        ));
                    }
                }
                _ => {}
            }
        }
        // The last model turn's text is the answer, not a step on the way.
        if let Some(last) = texts.pop() {
            if let Some(at) = t.events.iter().rposition(|(k, v)| *k == EventKind::AgentPlan && v["plan"] == last) {
                t.events.remove(at);
            }
            t.answer = Some(last);
        }
        if t.model_calls == 0 {
            t.cost_usd = None;
        }
        tasks.push(t);
    }
    Ok(Traces { spans: spans.len(), without_task, tasks })
}

/// The task's events as its trace, then how it ended.
fn events_of(t: &TaskTrace, terminated_by: TerminatedBy) -> Vec<(EventKind, Value)> {
    let mut events = t.events.clone();
    if let Some(a) = &t.answer {
        events.push((EventKind::AgentFinalAnswer, json!({"answer": a})));
    }
    events.push((
        EventKind::AgentTerminal,
        json!({"terminated_by": terminated_by.as_str(), "final_answer": t.answer, "imported": "otlp"}),
    ));
    events
}

fn result_of(run: RunId, id: &TaskId, t: &TaskTrace) -> (TaskResult, TerminatedBy) {
    let started = t.started.unwrap_or_else(Utc::now);
    let ended = t.ended.unwrap_or(started);
    let terminated_by = if t.error.is_some() { TerminatedBy::AgentError } else { TerminatedBy::Completed };
    let agent = AgentResult {
        success: t.error.is_none(),
        final_answer: t.answer.clone().map(Value::String),
        error: t.error.clone(),
        total_cost_usd: t.cost_usd.unwrap_or(0.0),
        total_tokens: t.tokens,
        wall_seconds: (ended - started).num_milliseconds().max(0) as f64 / 1000.0,
        terminated_by,
        steps: t.events.len() as u32 + u32::from(t.answer.is_some()),
        cost_unknown: t.cost_usd.is_none(),
        fault: None,
    };
    let result = TaskResult {
        schema_version: agenteval_core::SCHEMA_VERSION.into(),
        run_id: run,
        task_id: id.clone(),
        job_id: JobId::numbered(0, 1),
        attempt: 1,
        passed: false,
        agent,
        scores: vec![],
        started_at: started,
        finished_at: ended,
        image: None,
        changed_outside: 0,
        setup_seconds: None,
        suspect: vec![],
        tampered: vec![],
        without_tampering: None,
        rewards: None,
        unscored: true,
        models: BTreeMap::new(),
        provider_wait_seconds: 0.0,
        steps: vec![],
        harbor_would_skip: None,
        roles: Default::default(),
    };
    (result, terminated_by)
}

/// What an import did.
#[derive(Debug, Serialize)]
pub struct ImportedTraces {
    pub run_id: String,
    pub name: String,
    pub bundle: String,
    /// It was imported before: nothing was written.
    pub already: bool,
    pub tasks: usize,
    pub spans: usize,
    /// Spans that named no task (a controller's, another service's): left out.
    pub without_task: usize,
}

fn usage(message: String) -> Failure {
    Failure { code: exit::USAGE, error: anyhow::anyhow!(message) }
}

/// The command.
// Long: read the file, write each task's pack, then the run's documents, seal and index.
pub async fn otlp(file: &Path, name: Option<&str>, index: &IndexArgs, json: bool) -> Result<u8, Failure> {
    use std::io::Read as _;
    let Some(config_path) = &index.config else {
        return Err(usage(
            "import otlp needs --config CONFIG: the run config whose benchmark lists the traces' tasks and whose evaluators `regrade` grades them with".into(),
        ));
    };
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| usage(format!("{}: {e}", file.display())))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(usage(format!("{}: over {} MiB of traces", file.display(), MAX_FILE >> 20)));
    }
    let traces = read(&bytes, &file.display().to_string()).map_err(usage)?;
    if traces.tasks.is_empty() {
        return Err(usage(format!(
            "{}: no span names a task ({} spans): set `{TASK_ATTR}` on the root span of each task's trace (or on its resource)",
            file.display(),
            traces.spans
        )));
    }
    let loaded = crate::session::load_config(config_path, &[]).map_err(crate::session::config_failure)?;
    let digest = bundle::sha256_hex(&bytes);
    let started = traces.tasks.iter().filter_map(|t| t.started).min().unwrap_or_else(Utc::now);
    let run = RunId::derived(started.timestamp_millis().max(0) as u64, format!("otlp:{digest}").as_bytes());
    let (_wiring, store, idx, at) = crate::import::destination(index).await?;
    let run_name = name.map(str::to_string).unwrap_or_else(|| format!("{} [otlp]", loaded.config.name));
    if let Some(r) = idx.get_run(&run).await? {
        let done = ImportedTraces {
            run_id: run.to_string(),
            name: r.name,
            bundle: r.bundle_uri,
            already: true,
            tasks: traces.tasks.len(),
            spans: traces.spans,
            without_task: traces.without_task,
        };
        if json {
            say!("{}", serde_json::to_string(&done).expect("serializes"));
        } else {
            say!("{} was imported before, as run {run} ({}): nothing to do", file.display(), done.name);
        }
        return Ok(exit::OK);
    }
    let mut table = TaskTable::default();
    let mut ids = Vec::new();
    for t in &traces.tasks {
        let id: TaskId =
            t.id.parse()
                .map_err(|_| usage(format!("{}: task `{}` cannot be named as a task here", file.display(), t.id)))?;
        let spec = TaskSpec {
            id: id.clone(),
            input: Value::String(t.input.clone().unwrap_or_default()),
            expected: None,
            tags: vec![],
            evaluators: vec![],
            metadata: json!({"otlp": {"file": digest}}),
            environment: None,
            content: None,
            tests: None,
            solution: None,
            steps: None,
            user: None,
        };
        table.push(&spec)?;
        let (result, terminated_by) = result_of(run, &id, t);
        let at = t.started.unwrap_or_else(Utc::now);
        let lines = crate::import::trace_lines(run, &id, at, events_of(t, terminated_by));
        let log = format!("imported from the traces of {} (sha256 {digest})\n", file.display());
        bundle::write_task_pack(store.as_ref(), &result, &log, &lines, &[]).await?;
        ids.push(id);
    }
    // The config the traces are graded by, with an agent that runs nothing: nothing of this run
    // ran here.
    let mut config = loaded.resolved();
    config["name"] = json!(run_name);
    config["agent"] = json!({"kind": "nop"});
    let meta = Metadata {
        backend: "otlp".into(),
        benchmark: loaded.config.benchmark.kind().to_string(),
        agent: "imported traces".into(),
        config_hash: bundle::sha256_hex(&agenteval_core::model::canonical_json(&config)),
        agenteval_version: agenteval_engine::VERSION.into(),
        finished_at: traces.tasks.iter().filter_map(|t| t.ended).max().or(Some(started)),
        imported: Some(Imported {
            tool: "otlp".into(),
            version: None,
            id: digest.clone(),
            from: std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf()).display().to_string(),
        }),
        ..Metadata::new(run, &run_name, RunStatus::Complete, ids.len() as u64, started)
    };
    crate::import::write_run(&store, idx.as_ref(), &config, &table, &meta, &ids).await?;
    let done = ImportedTraces {
        run_id: run.to_string(),
        name: run_name,
        bundle: store.bundle_uri(&run),
        already: false,
        tasks: ids.len(),
        spans: traces.spans,
        without_task: traces.without_task,
    };
    if json {
        say!("{}", serde_json::to_string(&done).expect("serializes"));
    } else {
        say!("imported {} task(s) of {} as run {run} ({}) into {at}", done.tasks, file.display(), done.name);
        if done.without_task > 0 {
            say!("  {} span(s) named no task and were left out", done.without_task);
        }
        say!("  grade them: agenteval regrade {run}");
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: &str, id: &str, parent: &str, start: u64, attrs: Value) -> Value {
        let attributes: Vec<Value> = attrs
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| match v {
                Value::Number(n) if n.is_i64() => json!({"key": k, "value": {"intValue": n.to_string()}}),
                Value::Number(n) => json!({"key": k, "value": {"doubleValue": n}}),
                v => json!({"key": k, "value": {"stringValue": v.as_str().map_or_else(|| v.to_string(), str::to_string)}}),
            })
            .collect();
        json!({"traceId": trace, "spanId": id, "parentSpanId": parent, "name": "s", "kind": 1,
               "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 10).to_string(), "attributes": attributes})
    }

    fn line(spans: Vec<Value>) -> String {
        json!({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}).to_string()
    }

    #[test]
    fn a_tasks_spans_become_its_answer_tool_calls_and_tokens_and_a_judges_are_left_out() {
        let t = "4bf92f3577b34da6a3ce929d0e0e4736";
        let out = |text: &str| json!([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]).to_string();
        let lines = [
            line(vec![
                span(t, "00f067aa0ba90201", "", 100, json!({"agenteval.run.id": "r"})),
                span(t, "00f067aa0ba90202", "00f067aa0ba90201", 110, json!({TASK_ATTR: "t1"})),
                span(t, "00f067aa0ba90203", "00f067aa0ba90202", 120, json!({"gen_ai.operation.name": "chat",
                    "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5, "agenteval.cost_usd": 0.5,
                    "gen_ai.input.messages": json!([{"role": "user", "parts": [{"type": "text", "content": "add 2 and 3"}]}]).to_string(),
                    "gen_ai.output.messages": out("let me compute")})),
                span(t, "00f067aa0ba90204", "00f067aa0ba90202", 130, json!({"gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "python", "gen_ai.tool.call.id": "c1",
                    "gen_ai.tool.call.arguments": "{\"code\": \"print(2+3)\"}", "gen_ai.tool.call.result": "5"})),
                span(t, "00f067aa0ba90205", "00f067aa0ba90202", 140, json!({"gen_ai.operation.name": "chat",
                    "gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 1, "agenteval.cost_usd": 0.25,
                    "gen_ai.output.messages": out("5")})),
                // A judge's call grades the task: not the agent's.
                span(t, "00f067aa0ba90206", "00f067aa0ba90202", 150, json!({"gen_ai.operation.name": "chat",
                    "agenteval.evaluator.id": "judge", "gen_ai.output.messages": out("{\"passed\": true}")})),
            ]),
            String::new(),
            line(vec![span(t, "00f067aa0ba90207", "", 160, json!({"other": "x"}))]),
        ]
        .join("\n");
        let traces = read(lines.as_bytes(), "f.jsonl").unwrap();
        assert_eq!((traces.spans, traces.without_task), (7, 2), "the run's span and the stray one");
        assert_eq!(traces.tasks.len(), 1);
        let task = &traces.tasks[0];
        assert_eq!(task.id, "t1");
        assert_eq!((task.answer.as_deref(), task.input.as_deref()), (Some("5"), Some("add 2 and 3")));
        assert_eq!((task.model_calls, task.tokens, task.cost_usd), (2, 36, Some(0.75)));
        let kinds: Vec<EventKind> = task.events.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [EventKind::AgentPlan, EventKind::AgentToolCall, EventKind::AgentToolResult]);
        assert_eq!(task.events[1].1["arguments"]["code"], "print(2+3)");
        // The whole file as one request (not lines) reads the same.
        let one = line(vec![
            span(t, "00f067aa0ba90208", "", 100, json!({TASK_ATTR: "t2"})),
            span(
                t,
                "00f067aa0ba90209",
                "00f067aa0ba90208",
                110,
                json!({"gen_ai.operation.name": "chat", "gen_ai.output.messages": out("hi")}),
            ),
        ]);
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<Value>(&one).unwrap()).unwrap();
        let traces = read(pretty.as_bytes(), "f.json").unwrap();
        assert_eq!(traces.tasks[0].answer.as_deref(), Some("hi"));
        assert_eq!(traces.tasks[0].cost_usd, None, "a call that did not say its cost: unknown, not $0");
    }

    #[test]
    fn an_earlier_attempts_spans_are_not_the_tasks_and_a_bad_line_is_named_by_place() {
        let t = "4bf92f3577b34da6a3ce929d0e0e4736";
        let out = |text: &str| json!([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]).to_string();
        let lines = line(vec![
            span(t, "00f067aa0ba90201", "", 100, json!({TASK_ATTR: "t1", "agenteval.attempt": 1})),
            span(
                t,
                "00f067aa0ba90202",
                "00f067aa0ba90201",
                110,
                json!({"gen_ai.operation.name": "chat", "gen_ai.output.messages": out("first")}),
            ),
            span(t, "00f067aa0ba90203", "", 200, json!({TASK_ATTR: "t1", "agenteval.attempt": 2})),
            span(
                t,
                "00f067aa0ba90204",
                "00f067aa0ba90203",
                210,
                json!({"gen_ai.operation.name": "chat", "gen_ai.output.messages": out("second")}),
            ),
        ]);
        let traces = read(lines.as_bytes(), "f.jsonl").unwrap();
        assert_eq!(traces.tasks.len(), 1);
        assert_eq!((traces.tasks[0].answer.as_deref(), traces.tasks[0].model_calls), (Some("second"), 1));
        let bad = format!("{lines}\n{{\"resourceSpans\": 7}}\n");
        let err = read(bad.as_bytes(), "f.jsonl").unwrap_err();
        assert!(err.starts_with("f.jsonl:2:"), "{err}");
    }
}
