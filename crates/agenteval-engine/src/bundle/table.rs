//! The tasks of a run as `tasks.jsonl` holds them, indexed without parsing every task.

use agenteval_core::layout;
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, Result, RunId, TaskId};
use serde::Deserialize;

/// The tasks of a run, held compactly: their `tasks.jsonl` text plus an index of lines and
/// ids. A 100,000-task run costs about 30 MB here instead of ~100 MB of `TaskSpec`s.
#[derive(Debug, Default)]
pub struct TaskTable {
    jsonl: Vec<u8>,
    spans: Vec<(u32, u32)>,
    ids: Vec<TaskId>,
}

#[derive(Deserialize)]
struct IdOnly {
    id: TaskId,
}

impl TaskTable {
    /// Appends a task, with its content fingerprint as one more field of its line.
    pub fn push(&mut self, t: &TaskSpec) {
        let start = self.jsonl.len();
        serde_json::to_writer(&mut self.jsonl, t).expect("tasks serialize");
        // A task serializes as an object: its closing brace makes room for one more field.
        debug_assert_eq!(self.jsonl.last(), Some(&b'}'));
        self.jsonl.pop();
        self.jsonl.extend_from_slice(b",\"fingerprint\":\"");
        self.jsonl.extend_from_slice(t.content_fingerprint().as_bytes());
        self.jsonl.extend_from_slice(b"\"}");
        self.spans.push((start as u32, (self.jsonl.len() - start) as u32));
        self.jsonl.push(b'\n');
        self.ids.push(t.id.clone());
    }

    /// Reads a `tasks.jsonl` file, parsing only the ids up front.
    pub fn from_jsonl(jsonl: Vec<u8>) -> Result<Self> {
        let mut spans = Vec::new();
        let mut ids = Vec::new();
        let mut start = 0usize;
        for (n, line) in jsonl.split(|b| *b == b'\n').enumerate() {
            if !line.is_empty() {
                let id: IdOnly =
                    serde_json::from_slice(line).map_err(|e| Error::json(format!("{}:{}", layout::TASKS, n + 1), e))?;
                spans.push((start as u32, line.len() as u32));
                ids.push(id.id);
            }
            start += line.len() + 1;
        }
        Ok(TaskTable { jsonl, spans, ids })
    }

    pub async fn read(store: &dyn BundleStore, run: &RunId) -> Result<Self> {
        Self::from_jsonl(store.get(run, layout::TASKS).await?)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn ids(&self) -> &[TaskId] {
        &self.ids
    }

    pub fn id(&self, i: usize) -> &TaskId {
        &self.ids[i]
    }

    pub fn spec(&self, i: usize) -> Result<TaskSpec> {
        let (s, l) = self.spans[i];
        serde_json::from_slice(&self.jsonl[s as usize..(s + l) as usize])
            .map_err(|e| Error::json(format!("{} task {}", layout::TASKS, i + 1), e))
    }

    pub fn jsonl(&self) -> &[u8] {
        &self.jsonl
    }
}

/// Reads `tasks.jsonl` in full.
pub async fn read_tasks(store: &dyn BundleStore, run: &RunId) -> Result<Vec<TaskSpec>> {
    let table = TaskTable::read(store, run).await?;
    (0..table.len()).map(|i| table.spec(i)).collect()
}
