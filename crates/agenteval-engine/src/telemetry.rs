//! What the engine tells OpenTelemetry: span names and attribute keys, W3C trace-context
//! hand-off from the controller to its workers, the fleet metrics, and the `SpanJournal` seam
//! through which finished spans reach the bundle's `spans.jsonl` files.
//!
//! The engine uses only the OpenTelemetry API and the `tracing` bridge. The binary installs the
//! SDK, the journal and any OTLP exporter; without them every span here is a cheap no-op.

use std::sync::Arc;

use opentelemetry::metrics::{Counter, Gauge, Histogram};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The environment variable that carries the W3C `traceparent` of a job's span to its worker
/// (the environment-carrier convention of the OpenTelemetry specification).
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// Attribute keys shared by spans and metrics.
pub mod attr {
    pub const RUN_ID: &str = "agenteval.run.id";
    pub const BENCHMARK: &str = "agenteval.benchmark";
    pub const BACKEND: &str = "agenteval.backend";
}

/// Where finished spans wait until the engine writes them into the bundle. The binary's
/// implementation is an OpenTelemetry span processor.
pub trait SpanJournal: Send + Sync {
    /// Removes and returns, as JSON lines, the finished spans of this process whose local root
    /// (the outermost span of this process above them) is `root`.
    fn take_tree(&self, root: SpanId) -> Vec<u8>;
    /// Removes and returns, as JSON lines, every finished span of this process.
    fn take_all(&self) -> Vec<u8>;
}

/// A shared journal, or none (library use, unit tests).
pub type Journal = Option<Arc<dyn SpanJournal>>;

/// The OpenTelemetry span id of a `tracing` span, if an OpenTelemetry layer records it.
pub fn span_id(span: &tracing::Span) -> Option<SpanId> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.span_id())
}

/// The W3C `traceparent` of a span, for a worker to continue the trace.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// ` trace_id=… span_id=…` of a span for a log line, or nothing.
pub fn log_ids(span: &tracing::Span) -> String {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if sc.is_valid() { format!(" trace_id={} span_id={}", sc.trace_id(), sc.span_id()) } else { String::new() }
}

/// Parses a W3C `traceparent` (version 00). `None` for anything malformed: a bad header
/// starts a new trace rather than failing a job.
pub fn parse_traceparent(s: &str) -> Option<SpanContext> {
    let mut parts = s.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let lower_hex = |x: &str| x.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !(lower_hex(trace) && lower_hex(span) && lower_hex(flags)) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let sc = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    sc.is_valid().then_some(sc)
}

/// Makes `span` a child of the remote span `traceparent` names. Must run before the span is
/// first entered. Returns whether the parent was set.
pub fn set_remote_parent(span: &tracing::Span, traceparent: &str) -> bool {
    match parse_traceparent(traceparent) {
        Some(sc) => span.set_parent(Context::new().with_remote_span_context(sc)).is_ok(),
        None => {
            tracing::warn!("ignoring a malformed {TRACEPARENT_ENV}: a trace of its own starts");
            false
        }
    }
}

/// Marks a span as failed (OpenTelemetry status `ERROR`) with a message that must already be
/// free of secrets.
pub fn set_error(span: &tracing::Span, message: &str) {
    span.set_status(opentelemetry::trace::Status::error(message.to_string()));
}

/// The fleet metrics of one run, recorded by the controller. Instruments come from the global
/// meter provider: a no-op unless the binary installed an exporting one.
pub struct FleetMetrics {
    attrs: Vec<KeyValue>,
    pub jobs_submitted: Counter<u64>,
    pub jobs_succeeded: Counter<u64>,
    pub jobs_failed: Counter<u64>,
    pub jobs_retried: Counter<u64>,
    pub jobs_running: Gauge<u64>,
    pub queue_depth: Gauge<u64>,
    pub job_start_latency: Histogram<f64>,
    pub task_duration: Histogram<f64>,
    pub tasks_completed: Counter<u64>,
    pub tokens: Counter<u64>,
    pub cost: Counter<f64>,
    pub pass_rate: Gauge<f64>,
}

/// Histogram buckets in seconds, from sub-second local starts to slow Fargate cold starts.
const SECONDS_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];

impl FleetMetrics {
    pub fn new(run_id: &str, benchmark: &str, backend: &str) -> Self {
        let m = opentelemetry::global::meter("agenteval");
        let seconds = |name: &'static str, what: &'static str| {
            m.f64_histogram(name)
                .with_unit("s")
                .with_description(what)
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build()
        };
        FleetMetrics {
            attrs: vec![
                KeyValue::new(attr::RUN_ID, run_id.to_string()),
                KeyValue::new(attr::BENCHMARK, benchmark.to_string()),
                KeyValue::new(attr::BACKEND, backend.to_string()),
            ],
            jobs_submitted: m
                .u64_counter("agenteval.jobs.submitted")
                .with_description("Jobs submitted to the backend")
                .build(),
            jobs_succeeded: m
                .u64_counter("agenteval.jobs.succeeded")
                .with_description("Jobs that ended with every task recorded")
                .build(),
            jobs_failed: m
                .u64_counter("agenteval.jobs.failed")
                .with_description("Jobs that failed, were cancelled or left tasks unrecorded")
                .build(),
            jobs_retried: m
                .u64_counter("agenteval.jobs.retried")
                .with_description("Failed jobs submitted again")
                .build(),
            jobs_running: m
                .u64_gauge("agenteval.jobs.running")
                .with_description("Jobs submitted and not yet ended")
                .build(),
            queue_depth: m.u64_gauge("agenteval.queue.depth").with_description("Jobs waiting to be submitted").build(),
            job_start_latency: seconds("agenteval.job.start_latency", "From submitting a job to seeing it run"),
            task_duration: seconds("agenteval.task.duration", "Agent wall time of a finished task"),
            tasks_completed: m
                .u64_counter("agenteval.tasks.completed")
                .with_description("Tasks with a recorded result")
                .build(),
            tokens: m
                .u64_counter("agenteval.tokens")
                .with_unit("{token}")
                .with_description("Tokens used by agents")
                .build(),
            cost: m
                .f64_counter("agenteval.cost")
                .with_unit("USD")
                .with_description("Spend of agents and evaluators")
                .build(),
            pass_rate: m
                .f64_gauge("agenteval.pass_rate")
                .with_description("Passed tasks over finished tasks so far")
                .build(),
        }
    }

    pub fn attrs(&self) -> &[KeyValue] {
        &self.attrs
    }

    /// The run's attributes plus one more.
    pub fn attrs_with(&self, kv: KeyValue) -> Vec<KeyValue> {
        let mut a = self.attrs.clone();
        a.push(kv);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip_and_rejects() {
        let sc = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn spans_without_an_otel_layer_have_no_ids() {
        let span = tracing::info_span!("x");
        assert!(span_id(&span).is_none());
        assert!(traceparent(&span).is_none());
    }
}
