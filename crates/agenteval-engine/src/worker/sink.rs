//! The trace sink of a task attempt: every event the agent (or its recording) emits is
//! redacted, numbered and streamed to the staged `trace.jsonl` as it comes, under the run's
//! token, cost, event and byte limits; grading reads the events kept in memory.

use agenteval_core::config::Limits;
use agenteval_core::layout;
use agenteval_core::model::*;
use agenteval_core::secret::Redactor;
use agenteval_core::traits::*;
use agenteval_core::{Error, Result, RunId};
use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;

use super::ctx::Ctx;
use super::genai_spans::{CallModel, CallSpans};

/// Streams events to `trace.jsonl` and enforces token and cost limits.
pub(super) struct TraceSink {
    run_id: RunId,
    task_id: agenteval_core::TaskId,
    /// The job attempt writing the trace: every event carries it.
    attempt: u32,
    pub(super) appender: Box<dyn Appender>,
    redactor: Redactor,
    limits: Limits,
    /// What grading sees of the trace: every event, with its payload kept only while the
    /// kept payloads fit [`KEPT_PAYLOAD_BYTES`]; the whole trace is in `trace.jsonl`.
    pub(super) events: Vec<TraceEvent>,
    kept_payload_bytes: usize,
    written_bytes: u64,
    pub(super) cost: f64,
    pub(super) tokens: u64,
    pub(super) write_error: Option<Error>,
    pub(super) spans: CallSpans,
    /// Some event said its cost is unknown (`"cost_unknown": true` in its payload).
    pub(super) cost_unknown: bool,
    /// Files the agent attached, written to the task's folder once it is done.
    pub(super) attachments: Vec<(String, Vec<u8>)>,
    /// What was written, while it is small: the task's pack takes it from here instead of
    /// reading the staged file back.
    pub(super) copy: Option<Vec<u8>>,
}

/// Trace bytes a sink keeps a copy of for the task's pack; a longer trace is read back.
const COPY_BYTES: usize = 1 << 20;

/// Payload bytes of trace events the worker keeps in memory for grading, so that its memory
/// does not grow with the trace. Past it an event keeps its kind, usage and `tool` name (what the
/// built-in evaluators read) and its payload is marked `{"elided": true}`.
const KEPT_PAYLOAD_BYTES: usize = 8 << 20;

impl TraceSink {
    pub(super) async fn write(
        &mut self,
        kind: EventKind,
        payload: serde_json::Value,
        cost: f64,
        input: u64,
        output: u64,
    ) {
        let ev = TraceEvent {
            run_id: self.run_id,
            task_id: self.task_id.clone(),
            step: self.events.len() as u32,
            attempt: self.attempt,
            timestamp: Utc::now(),
            kind,
            payload: self.redactor.redact_json(&payload),
            cost_usd: cost,
            input_tokens: input,
            output_tokens: output,
        };
        let mut line = serde_json::to_vec(&ev).expect("trace events serialize");
        line.push(b'\n');
        if let Err(e) = self.appender.append(&line).await {
            self.write_error.get_or_insert(e);
        }
        match &mut self.copy {
            Some(c) if c.len() + line.len() <= COPY_BYTES => c.extend_from_slice(&line),
            _ => self.copy = None,
        }
        self.written_bytes = self.written_bytes.saturating_add(line.len() as u64);
        // Usage was checked on the way in (`emit`); saturating keeps a long trace of large but
        // believable numbers from wrapping.
        self.cost += cost;
        self.tokens = self.tokens.saturating_add(input.saturating_add(output));
        self.spans.observe(&ev);
        let mut ev = ev;
        let size = line.len();
        if self.kept_payload_bytes + size > KEPT_PAYLOAD_BYTES && kind != EventKind::AgentTerminal {
            let tool = ev.payload.get("tool").cloned();
            ev.payload = json!({"elided": true});
            if let Some(tool) = tool {
                ev.payload["tool"] = tool;
            }
        } else {
            self.kept_payload_bytes += size;
        }
        self.events.push(ev);
    }
}

impl TraceSink {
    /// A sink for events written as they were recorded (`agenteval regrade`): the same trace
    /// file, limits and redaction, and no model-call spans (no model is called).
    pub(super) async fn for_recorded(ctx: &Ctx, task: &TaskSpec) -> Result<TraceSink> {
        let spans = CallSpans::new(opentelemetry::Context::new(), CallModel::of("", false), None);
        TraceSink::open(ctx, task, ctx.config.agent.limits().clone(), spans).await
    }

    /// A sink writing the task's trace into this job attempt's staging folder.
    pub(super) async fn open(ctx: &Ctx, task: &TaskSpec, limits: Limits, spans: CallSpans) -> Result<TraceSink> {
        // Staged under the job attempt: only the attempt that counts publishes it into the task
        // folder (`write_outcome`), so a duplicate or superseded attempt never touches it.
        let staged = layout::staged_task_trace(&ctx.job.job_id, ctx.job.attempt, &task.id);
        let appender = ctx.store.open_appender(&ctx.run_id, &staged).await?;
        Ok(TraceSink {
            run_id: ctx.run_id,
            task_id: task.id.clone(),
            attempt: ctx.job.attempt,
            appender,
            redactor: ctx.redactor.clone(),
            limits,
            events: Vec::new(),
            kept_payload_bytes: 0,
            written_bytes: 0,
            cost: 0.0,
            tokens: 0,
            write_error: None,
            spans,
            cost_unknown: false,
            attachments: Vec::new(),
            copy: Some(Vec::new()),
        })
    }
}

#[async_trait]
impl EventSink for TraceSink {
    async fn emit(&mut self, event: AgentEvent) -> std::result::Result<(), Stop> {
        if let Some(problem) = event.usage_problem() {
            // Not written: the numbers would enter every total. The reason quotes them.
            return Err(Stop {
                terminated_by: TerminatedBy::AgentError,
                reason: format!("event {} {problem}", self.events.len() + 1),
            });
        }
        // The runner's own terminal event is written after this limit; one past it is allowed.
        let max_events = self.limits.trace_events();
        if self.events.len() as u64 >= max_events {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTrace,
                reason: format!("emitted more than {max_events} events (max_trace_events)"),
            });
        }
        let kind = event.kind.unwrap_or(EventKind::AgentObservation);
        if event.payload.get("cost_unknown") == Some(&serde_json::Value::Bool(true)) {
            self.cost_unknown = true;
        }
        self.write(kind, event.payload, event.cost_usd, event.input_tokens, event.output_tokens).await;
        if let Some(e) = &self.write_error {
            return Err(Stop { terminated_by: TerminatedBy::InfraFailure, reason: format!("cannot write trace: {e}") });
        }
        let max_bytes = self.limits.trace_bytes();
        if self.written_bytes > max_bytes {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTrace,
                reason: format!("wrote {} trace bytes, limit {max_bytes} (max_trace_bytes)", self.written_bytes),
            });
        }
        if let Some(max) = self.limits.max_tokens
            && self.tokens > max
        {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitTokens,
                reason: format!("used {} tokens, limit {max}", self.tokens),
            });
        }
        if let Some(max) = self.limits.max_cost_usd
            && self.cost > max
        {
            return Err(Stop {
                terminated_by: TerminatedBy::LimitCost,
                reason: format!("spent ${:.6}, limit ${max:.6}", self.cost),
            });
        }
        Ok(())
    }

    async fn attach(&mut self, name: &str, bytes: Vec<u8>) {
        // A plain file name only: an agent does not choose where in the bundle it writes.
        let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if plain && !name.starts_with('.') && !layout::TASK_FILES.contains(&name) && name != layout::TASK_SPANS {
            self.attachments.retain(|(n, _)| n != name);
            self.attachments.push((name.to_string(), bytes));
        }
    }
}

/// A sink for unit tests of the stages around it: its trace written to memory.
#[cfg(test)]
pub(super) mod testing {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// An appender that keeps what it was given, shared with the test.
    struct Kept(Arc<Mutex<Vec<u8>>>);

    #[async_trait]
    impl Appender for Kept {
        async fn append(&mut self, bytes: &[u8]) -> Result<()> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(())
        }
        async fn finish(self: Box<Self>) -> Result<()> {
            Ok(())
        }
    }

    pub(in crate::worker) fn sink(limits: Limits, redactor: Redactor) -> (TraceSink, Arc<Mutex<Vec<u8>>>) {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = TraceSink {
            run_id: RunId::new(),
            task_id: "t".parse().unwrap(),
            attempt: 2,
            appender: Box::new(Kept(written.clone())),
            redactor,
            limits,
            events: Vec::new(),
            kept_payload_bytes: 0,
            written_bytes: 0,
            cost: 0.0,
            tokens: 0,
            write_error: None,
            spans: CallSpans::new(opentelemetry::Context::new(), CallModel::of("m", false), None),
            cost_unknown: false,
            attachments: Vec::new(),
            copy: Some(Vec::new()),
        };
        (sink, written)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::sink;
    use super::*;

    fn used(tokens: u64, cost: f64) -> AgentEvent {
        AgentEvent {
            kind: Some(EventKind::CostTick),
            payload: json!({}),
            cost_usd: cost,
            input_tokens: tokens,
            output_tokens: 0,
        }
    }

    #[tokio::test]
    async fn each_limit_stops_the_agent_past_it_with_its_reason() {
        let cases: [(Limits, AgentEvent, TerminatedBy, &str); 4] = [
            (
                Limits { max_tokens: Some(100), ..Limits::default() },
                used(60, 0.0),
                TerminatedBy::LimitTokens,
                "limit 100",
            ),
            (
                Limits { max_cost_usd: Some(0.01), ..Limits::default() },
                used(0, 0.006),
                TerminatedBy::LimitCost,
                "limit $0.010000",
            ),
            (
                Limits { max_trace_events: Some(1), ..Limits::default() },
                used(0, 0.0),
                TerminatedBy::LimitTrace,
                "max_trace_events",
            ),
            (
                Limits { max_trace_bytes: Some(10), ..Limits::default() },
                used(0, 0.0),
                TerminatedBy::LimitTrace,
                "max_trace_bytes",
            ),
        ];
        for (limits, event, by, reason) in cases {
            let (mut s, _) = sink(limits.clone(), Redactor::new());
            let first = s.emit(event.clone()).await;
            let stop = match first {
                Err(stop) => stop,
                Ok(()) => s.emit(event).await.expect_err("the second event crosses the limit"),
            };
            assert_eq!(stop.terminated_by, by, "{limits:?}");
            assert!(stop.reason.contains(reason), "{limits:?}: {}", stop.reason);
        }
    }

    #[tokio::test]
    async fn unbelievable_usage_is_refused_and_never_counted() {
        let (mut s, written) = sink(Limits::default(), Redactor::new());
        let stop = s.emit(used(0, -1.0)).await.unwrap_err();
        assert_eq!(stop.terminated_by, TerminatedBy::AgentError);
        assert!(stop.reason.starts_with("event 1 reports cost_usd -1"), "{}", stop.reason);
        assert_eq!((s.cost, s.events.len()), (0.0, 0));
        assert!(written.lock().unwrap().is_empty(), "not written");
    }

    #[tokio::test]
    async fn events_are_numbered_redacted_and_written_as_they_come() {
        let redactor = Redactor::new();
        redactor.add(&agenteval_core::secret::Secret::new("sk-test-very-secret-value"));
        let (mut s, written) = sink(Limits::default(), redactor);
        s.emit(AgentEvent::new(EventKind::AgentPlan, json!({"said": "key sk-test-very-secret-value"}))).await.unwrap();
        s.emit(used(7, 0.5)).await.unwrap();
        s.emit(AgentEvent { payload: json!({"cost_unknown": true}), ..used(0, 0.0) }).await.unwrap();
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("very-secret"), "{text}");
        let steps: Vec<u32> = s.events.iter().map(|e| e.step).collect();
        assert_eq!(steps, [0, 1, 2]);
        assert!(s.events.iter().all(|e| e.attempt == 2));
        assert_eq!((s.tokens, s.cost, s.cost_unknown), (7, 0.5, true));
        assert_eq!(s.copy.as_deref(), Some(text.as_bytes()), "a short trace is kept for the pack");
    }

    #[tokio::test]
    async fn an_agent_attaches_plain_names_only() {
        let (mut s, _) = sink(Limits::default(), Redactor::new());
        for name in ["notes.txt", "../escape", "a/b", ".hidden", "", layout::TASK_RESULT, "notes.txt"] {
            s.attach(name, name.as_bytes().to_vec()).await;
        }
        let names: Vec<&str> = s.attachments.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["notes.txt"], "one, the later of two");
    }
}
