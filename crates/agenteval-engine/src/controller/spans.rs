//! The run's `spans.jsonl`: the controller's spans, appended as they finish so that a crash
//! loses at most the spans still open; a resumed run keeps the spans of earlier controllers.

use agenteval_core::Result;
use agenteval_core::layout;
use agenteval_core::traits::Appender;

use super::run::Run;
use crate::telemetry::Journal;

/// The run's `spans.jsonl`, appended as the controller's spans finish so that a crash loses at
/// most the spans still open.
pub(super) struct SpanFile {
    journal: Journal,
    appender: Option<Box<dyn Appender>>,
}

impl SpanFile {
    /// Opens the run's span file; a resumed run keeps the spans of earlier controllers. Also
    /// returns the `traceparent` of the first controller's `eval.run`, if there was one.
    pub(super) async fn open(run: &Run, journal: Journal) -> Result<(Self, Option<String>)> {
        if journal.is_none() {
            return Ok((SpanFile { journal, appender: None }, None));
        }
        let (appender, earlier) = super::fleet_file::reopen(run.store.as_ref(), &run.run_id, layout::SPANS).await?;
        Ok((SpanFile { journal, appender: Some(appender) }, earlier_root(&earlier)))
    }

    pub(super) async fn flush(&mut self) -> Result<()> {
        if let (Some(j), Some(a)) = (&self.journal, self.appender.as_mut()) {
            let lines = j.take_all();
            if !lines.is_empty() {
                a.append(&lines).await?;
            }
        }
        Ok(())
    }

    pub(super) async fn finish(mut self) -> Result<()> {
        self.flush().await?;
        match self.appender.take() {
            Some(a) => a.finish().await,
            None => Ok(()),
        }
    }
}

/// The `traceparent` of the outermost `eval.run` in a run's `spans.jsonl`.
fn earlier_root(spans: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Line {
        trace_id: String,
        span_id: String,
        name: String,
        parent_span_id: Option<String>,
    }
    let roots: Vec<Line> = spans
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Line>(l).ok())
        .filter(|l| l.name == "eval.run")
        .collect();
    // The outermost: under no other `eval.run` of the file (the first controller's root may
    // hang under its caller's span, from `TRACEPARENT`).
    roots
        .iter()
        .find(|l| l.parent_span_id.as_ref().is_none_or(|p| !roots.iter().any(|r| &r.span_id == p)))
        .map(|l| format!("00-{}-{}-01", l.trace_id, l.span_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_root_is_the_outermost_run_span_even_under_a_callers_span() {
        let line = |span: &str, parent: Option<&str>| {
            serde_json::json!({"trace_id": "t", "span_id": span, "name": "eval.run", "parent_span_id": parent})
                .to_string()
        };
        let task = serde_json::json!({"trace_id": "t", "span_id": "k", "name": "eval.task", "parent_span_id": "a"});
        // The first controller's root under the caller's span `c`; a resumed one under it.
        let file = [line("b", Some("a")), line("a", Some("c")), task.to_string()].join("\n");
        assert_eq!(earlier_root(file.as_bytes()).as_deref(), Some("00-t-a-01"));
        let plain = [line("a", None)].join("\n");
        assert_eq!(earlier_root(plain.as_bytes()).as_deref(), Some("00-t-a-01"));
        assert_eq!(earlier_root(b""), None);
    }
}
