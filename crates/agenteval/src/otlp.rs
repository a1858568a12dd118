//! `export RUN --to otlp`: a run's spans (the controller's and every task's, as its bundle keeps
//! them in `spans.jsonl`) in OTLP's JSON encoding, one `ExportTraceServiceRequest` per line (the
//! OpenTelemetry file exporter's format, which a collector's `otlpjsonfile` receiver and every
//! OTLP/JSON reader take), built with the protocol's own types.

use std::io::Write as _;
use std::path::Path;

use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, ErrorKind, RunId, layout, taskpack};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span, status};
use serde_json::{Map, Value};

use crate::Failure;

/// One line of a bundle's `spans.jsonl` (docs/bundle-format.md), as far as OTLP holds it.
#[derive(serde::Deserialize)]
struct Line {
    trace_id: String,
    span_id: String,
    parent_span_id: Option<String>,
    name: String,
    kind: String,
    start_time: String,
    end_time: String,
    #[serde(default)]
    attributes: Map<String, Value>,
    #[serde(default)]
    events: Vec<EventLine>,
    status: String,
    status_message: Option<String>,
}

#[derive(serde::Deserialize)]
struct EventLine {
    name: String,
    time: String,
    #[serde(default)]
    attributes: Map<String, Value>,
}

fn nanos(rfc3339: &str) -> Option<u64> {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    u64::try_from(t.timestamp_nanos_opt()?).ok()
}

/// A JSON attribute value as OTLP's: a whole number stays an integer, a list an array; `null`
/// has no OTLP value and is left out.
fn any(v: &Value) -> Option<AnyValue> {
    use any_value::Value as V;
    let value = match v {
        Value::Null => return None,
        Value::Bool(b) => V::BoolValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64()?),
        },
        Value::String(s) => V::StringValue(s.clone()),
        Value::Array(a) => V::ArrayValue(ArrayValue { values: a.iter().filter_map(any).collect() }),
        Value::Object(_) => V::StringValue(v.to_string()),
    };
    Some(AnyValue { value: Some(value) })
}

fn attributes(map: &Map<String, Value>) -> Vec<KeyValue> {
    map.iter()
        .filter_map(|(k, v)| Some(KeyValue { key: k.clone(), value: Some(any(v)?), ..Default::default() }))
        .collect()
}

fn id(hex_id: &str, len: usize) -> Option<Vec<u8>> {
    hex::decode(hex_id).ok().filter(|b| b.len() == len && b.iter().any(|x| *x != 0))
}

/// One span line as an OTLP span; `None` when it is not one (ids or times unreadable).
fn span_of(l: &Line) -> Option<Span> {
    let kind = match l.kind.as_str() {
        "server" => span::SpanKind::Server,
        "client" => span::SpanKind::Client,
        "producer" => span::SpanKind::Producer,
        "consumer" => span::SpanKind::Consumer,
        _ => span::SpanKind::Internal,
    };
    let code = match l.status.as_str() {
        "ok" => status::StatusCode::Ok,
        "error" => status::StatusCode::Error,
        _ => status::StatusCode::Unset,
    };
    Some(Span {
        trace_id: id(&l.trace_id, 16)?,
        span_id: id(&l.span_id, 8)?,
        parent_span_id: l.parent_span_id.as_deref().and_then(|p| id(p, 8)).unwrap_or_default(),
        name: l.name.clone(),
        kind: kind as i32,
        start_time_unix_nano: nanos(&l.start_time)?,
        end_time_unix_nano: nanos(&l.end_time)?,
        attributes: attributes(&l.attributes),
        events: l
            .events
            .iter()
            .filter_map(|e| {
                Some(span::Event {
                    time_unix_nano: nanos(&e.time)?,
                    name: e.name.clone(),
                    attributes: attributes(&e.attributes),
                    ..Default::default()
                })
            })
            .collect(),
        status: Some(Status { code: code as i32, message: l.status_message.clone().unwrap_or_default() }),
        ..Default::default()
    })
}

/// The spans of one `spans.jsonl` as one request under a resource with `resource` attributes;
/// and how many lines were not spans (a hostile or cut file's).
fn request(lines: &[u8], resource: &[(&str, &str)]) -> (ExportTraceServiceRequest, usize) {
    let mut skipped = 0;
    let spans: Vec<Span> = lines
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter_map(|l| {
            let span = serde_json::from_slice::<Line>(l).ok().as_ref().and_then(span_of);
            skipped += usize::from(span.is_none());
            span
        })
        .collect();
    let resource = Resource {
        attributes: resource
            .iter()
            .map(|(k, v)| KeyValue {
                key: (*k).to_string(),
                value: Some(AnyValue { value: Some(any_value::Value::StringValue((*v).to_string())) }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let scope = InstrumentationScope {
        name: "agenteval".into(),
        version: agenteval_engine::VERSION.into(),
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans { scope: Some(scope), spans, ..Default::default() }],
            ..Default::default()
        }],
    };
    (request, skipped)
}

/// What `export --to otlp` wrote.
#[derive(Debug, Default, serde::Serialize)]
pub struct Written {
    pub run_id: String,
    pub out: String,
    /// Requests (lines) written: the run's, then one per task that has spans.
    pub requests: usize,
    pub spans: usize,
    /// Lines of the bundle's span files that were not spans, left out.
    pub skipped: usize,
}

/// Writes the run's spans to `out`: a line for the controller's, then one per task.
pub async fn write(store: &dyn BundleStore, run: &RunId, out: &Path) -> Result<Written, Failure> {
    let io = |e: std::io::Error| Error::io(format!("writing {}", out.display()), e);
    let run_text = run.to_string();
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).map_err(io)?);
    let mut w = Written { run_id: run_text.clone(), out: out.display().to_string(), ..Written::default() };
    let mut put = |bytes: &[u8], resource: &[(&str, &str)], w: &mut Written| -> Result<(), Failure> {
        let (req, skipped) = request(bytes, resource);
        let spans = req.resource_spans[0].scope_spans[0].spans.len();
        w.skipped += skipped;
        if spans == 0 {
            return Ok(());
        }
        serde_json::to_writer(&mut file, &req).map_err(|e| Error::invalid(format!("encoding spans: {e}")))?;
        file.write_all(b"\n").map_err(io)?;
        w.requests += 1;
        w.spans += spans;
        Ok(())
    };
    let run_spans = match store.get(run, layout::SPANS).await {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    put(&run_spans, &[("service.name", "agenteval"), ("agenteval.run.id", &run_text)], &mut w)?;
    for task in agenteval_engine::bundle::read_tasks(store, run).await? {
        let bytes = match taskpack::read_task_file(store, run, &task.id, layout::TASK_SPANS).await {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        let id = task.id.to_string();
        let resource =
            [("service.name", "agenteval-worker"), ("agenteval.run.id", &run_text), ("agenteval.task.id", &id)];
        put(&bytes, &resource, &mut w)?;
    }
    file.flush().map_err(io)?;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_line_becomes_an_otlp_span_and_what_is_not_one_is_counted() {
        let lines = concat!(
            r#"{"attributes":{"agenteval.task.id":"t1","gen_ai.usage.input_tokens":12,"cost":0.5,"ok":true,"tags":["a","b"],"none":null},"#,
            r#""duration_ms":1.0,"end_time":"2026-12-07T05:00:01.000000000Z","events":[{"attributes":{"why":"x"},"name":"retry","time":"2026-12-07T05:00:00.500000000Z"}],"#,
            r#""kind":"client","name":"chat gpt-4o","parent_is_remote":false,"parent_span_id":"00f067aa0ba902b7","span_id":"53995c3f42cd8ad8","#,
            r#""start_time":"2026-12-07T05:00:00.000000000Z","status":"error","status_message":"boom","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}"#,
            "\n{not a span}\n\n",
            r#"{"attributes":{},"duration_ms":1.0,"end_time":"x","events":[],"kind":"internal","name":"n","parent_is_remote":false,"parent_span_id":null,"span_id":"00","start_time":"x","status":"unset","status_message":null,"trace_id":"00"}"#,
            "\n"
        );
        let (req, skipped) = request(lines.as_bytes(), &[("service.name", "agenteval")]);
        assert_eq!(skipped, 2);
        let spans = &req.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 1);
        let s = &spans[0];
        assert_eq!(hex::encode(&s.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, 1_000_000_000);
        assert_eq!(s.kind, span::SpanKind::Client as i32);
        assert_eq!(s.status.as_ref().map(|s| (s.code, s.message.as_str())), Some((2, "boom")));
        assert_eq!(s.attributes.len(), 5, "null is left out");
        // OTLP's JSON encoding: hex ids, times as strings, typed values.
        let json = serde_json::to_value(&req).unwrap();
        let span = &json["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span["parentSpanId"], "00f067aa0ba902b7");
        assert!(span["startTimeUnixNano"].is_string(), "{span}");
        let attrs = span["attributes"].to_string();
        assert!(attrs.contains(r#""intValue":"12""#) || attrs.contains(r#""intValue":12"#), "{attrs}");
        assert!(attrs.contains(r#""doubleValue":0.5"#) && attrs.contains(r#""arrayValue""#), "{attrs}");
        // And the protocol's own reader takes it back whole.
        let back: ExportTraceServiceRequest = serde_json::from_value(json).unwrap();
        assert_eq!(back, req);
    }
}
