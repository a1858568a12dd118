//! The tasks of a run as `tasks.jsonl` holds them, indexed without parsing every task; past a
//! few MiB the text lives in a temporary file, so a run's memory does not grow with its tasks'
//! text.

use std::os::unix::fs::FileExt as _;

use agenteval_core::layout;
use agenteval_core::lines::{self, LineSplitter};
use agenteval_core::model::TaskSpec;
use agenteval_core::traits::BundleStore;
use agenteval_core::{Error, Result, RunId, TaskId};
use serde::Deserialize;

/// Bytes of text held in memory before the table moves it to a temporary file.
const SPILL_BYTES: usize = 8 << 20;
/// Bytes of new lines held before they are appended to the temporary file.
const TAIL_BYTES: usize = 1 << 20;

/// Where the table's `tasks.jsonl` text is.
#[derive(Debug)]
enum Text {
    Memory(Vec<u8>),
    /// `file` holds bytes `0..len`; `tail` the lines after them, not yet written.
    Spilled {
        file: std::fs::File,
        len: u64,
        tail: Vec<u8>,
    },
}

impl Default for Text {
    fn default() -> Self {
        Text::Memory(Vec::new())
    }
}

/// The tasks of a run, held compactly: their `tasks.jsonl` text (in a temporary file once it is
/// large: at 1,000,000 tasks some 300 MB), plus an index of lines and ids.
#[derive(Debug, Default)]
pub struct TaskTable {
    text: Text,
    spans: Vec<(u64, u32)>,
    ids: Vec<TaskId>,
}

#[derive(Deserialize)]
struct IdOnly {
    id: TaskId,
}

impl TaskTable {
    fn len_bytes(&self) -> u64 {
        match &self.text {
            Text::Memory(b) => b.len() as u64,
            Text::Spilled { len, tail, .. } => len + tail.len() as u64,
        }
    }

    /// Appends one line (without its newline) whose task id is `id`.
    fn push_line(&mut self, line: &[u8], id: TaskId) -> Result<()> {
        let start = self.len_bytes();
        let len = u32::try_from(line.len()).map_err(|_| Error::invalid(format!("task {id} is over 4 GiB")))?;
        let spill_io = |e| Error::io("writing the task table to a temporary file", e);
        match &mut self.text {
            Text::Memory(b) => {
                b.extend_from_slice(line);
                b.push(b'\n');
                if b.len() > SPILL_BYTES {
                    let file = tempfile::tempfile().map_err(spill_io)?;
                    file.write_all_at(b, 0).map_err(spill_io)?;
                    self.text = Text::Spilled { file, len: b.len() as u64, tail: Vec::new() };
                }
            }
            Text::Spilled { file, len, tail } => {
                tail.extend_from_slice(line);
                tail.push(b'\n');
                if tail.len() > TAIL_BYTES {
                    file.write_all_at(tail, *len).map_err(spill_io)?;
                    *len += tail.len() as u64;
                    tail.clear();
                }
            }
        }
        self.spans.push((start, len));
        self.ids.push(id);
        Ok(())
    }

    /// Appends a task, with its content fingerprint as one more field of its line.
    pub fn push(&mut self, t: &TaskSpec) -> Result<()> {
        let mut line = serde_json::to_vec(t).expect("tasks serialize");
        // A task serializes as an object: its closing brace makes room for one more field.
        debug_assert_eq!(line.last(), Some(&b'}'));
        line.pop();
        line.extend_from_slice(b",\"fingerprint\":\"");
        line.extend_from_slice(t.content_fingerprint().as_bytes());
        line.extend_from_slice(b"\"}");
        self.push_line(&line, t.id.clone())
    }

    fn take_line(&mut self, line: &[u8], n: usize) -> Result<()> {
        if line.is_empty() {
            return Ok(());
        }
        let id: IdOnly =
            serde_json::from_slice(line).map_err(|e| Error::json(format!("{}:{}", layout::TASKS, n), e))?;
        self.push_line(line, id.id)
    }

    /// Reads a `tasks.jsonl` file, parsing only the ids up front.
    pub fn from_jsonl(jsonl: Vec<u8>) -> Result<Self> {
        let mut table = TaskTable::default();
        let mut lines = LineSplitter::default();
        let mut each = |n: usize, line: &[u8]| table.take_line(line, n);
        lines.feed(&jsonl, &mut each);
        lines.finish(&mut each)?;
        Ok(table)
    }

    /// Reads a run's `tasks.jsonl` a piece at a time (never whole in memory).
    pub async fn read(store: &dyn BundleStore, run: &RunId) -> Result<Self> {
        let mut table = TaskTable::default();
        lines::each_line(store, run, layout::TASKS, &mut |n, line| table.take_line(line, n)).await?;
        Ok(table)
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

    /// The positions of the tasks whose ids are not in `sorted` (ids in order): what a resume
    /// still has to run. A binary search per task, so nothing the size of the run is built.
    pub fn positions_not_in(&self, sorted: &[TaskId]) -> Vec<u32> {
        debug_assert!(sorted.is_sorted());
        (0..self.ids.len() as u32).filter(|&i| sorted.binary_search(&self.ids[i as usize]).is_err()).collect()
    }

    /// The bytes of task `i`'s line.
    fn line(&self, i: usize) -> Result<std::borrow::Cow<'_, [u8]>> {
        let (s, l) = self.spans[i];
        match &self.text {
            Text::Memory(b) => Ok(std::borrow::Cow::Borrowed(&b[s as usize..s as usize + l as usize])),
            Text::Spilled { file, len, tail } => {
                if s >= *len {
                    let at = (s - len) as usize;
                    return Ok(std::borrow::Cow::Borrowed(&tail[at..at + l as usize]));
                }
                let mut buf = vec![0u8; l as usize];
                file.read_exact_at(&mut buf, s).map_err(|e| Error::io("reading the task table's temporary file", e))?;
                Ok(std::borrow::Cow::Owned(buf))
            }
        }
    }

    pub fn spec(&self, i: usize) -> Result<TaskSpec> {
        serde_json::from_slice(&self.line(i)?).map_err(|e| Error::json(format!("{} task {}", layout::TASKS, i + 1), e))
    }

    /// Writes the table as `path` of `run` (`tasks.jsonl`): in pieces where the store takes a
    /// file in pieces, else whole.
    pub async fn write_to(&self, store: &dyn BundleStore, run: &RunId, path: &str) -> Result<()> {
        let (file, len, tail) = match &self.text {
            Text::Memory(b) => return store.put(run, path, b).await,
            Text::Spilled { file, len, tail } => (file, *len, tail),
        };
        let read = |at: u64, n: usize| {
            let mut buf = vec![0u8; n];
            file.read_exact_at(&mut buf, at)
                .map(|_| buf)
                .map_err(|e| Error::io("reading the task table's temporary file", e))
        };
        let Some(mut w) = store.open_writer(run, path).await? else {
            let mut all = read(0, len as usize)?;
            all.extend_from_slice(tail);
            return store.put(run, path, &all).await;
        };
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(TAIL_BYTES as u64 * 4) as usize;
            w.append(&read(at, n)?).await?;
            at += n as u64;
        }
        w.append(tail).await?;
        w.finish().await
    }

    /// The whole text (tests, and small tables).
    #[cfg(test)]
    pub fn jsonl(&self) -> Vec<u8> {
        match &self.text {
            Text::Memory(b) => b.clone(),
            Text::Spilled { file, len, tail } => {
                let mut buf = vec![0u8; *len as usize];
                file.read_exact_at(&mut buf, 0).unwrap();
                buf.extend_from_slice(tail);
                buf
            }
        }
    }
}

/// Reads `tasks.jsonl` in full.
pub async fn read_tasks(store: &dyn BundleStore, run: &RunId) -> Result<Vec<TaskSpec>> {
    let table = TaskTable::read(store, run).await?;
    (0..table.len()).map(|i| table.spec(i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(i: usize) -> TaskSpec {
        TaskSpec {
            steps: None,
            user: None,
            id: format!("t{i:06}").parse().unwrap(),
            input: serde_json::json!("q".repeat(200)),
            expected: None,
            tags: vec![],
            evaluators: vec![],
            metadata: serde_json::Value::Null,
            environment: None,
            content: None,
            tests: None,
            solution: None,
        }
    }

    #[test]
    fn a_large_table_moves_its_text_to_a_file_and_reads_the_same() {
        let mut t = TaskTable::default();
        let n = 60_000; // ~17 MB of lines: past SPILL_BYTES
        for i in 0..n {
            t.push(&task(i)).unwrap();
        }
        assert!(matches!(t.text, Text::Spilled { .. }), "spilled");
        for i in [0, 1, 30_000, n - 2, n - 1] {
            assert_eq!(t.spec(i).unwrap().id, task(i).id);
        }
        // Read back from its text, in pieces of any size: the same table.
        let text = t.jsonl();
        let again = TaskTable::from_jsonl(text.clone()).unwrap();
        assert_eq!(again.ids(), t.ids());
        assert_eq!(again.jsonl(), text);
        let mut fed = TaskTable::default();
        let mut lines = LineSplitter::default();
        let mut each = |n: usize, line: &[u8]| fed.take_line(line, n);
        for piece in text.chunks(777) {
            lines.feed(piece, &mut each);
        }
        lines.finish(&mut each).unwrap();
        assert_eq!(fed.ids(), t.ids());
        assert_eq!(fed.spec(n - 1).unwrap().id, task(n - 1).id);
    }

    #[test]
    fn the_positions_left_are_those_whose_ids_are_not_done() {
        let mut t = TaskTable::default();
        for i in [5, 1, 9, 3] {
            t.push(&task(i)).unwrap();
        }
        let done: Vec<TaskId> = [1, 9].iter().map(|&i| task(i).id).collect();
        assert_eq!(t.positions_not_in(&done), vec![0, 3]);
        assert_eq!(t.positions_not_in(&[]), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_line_that_is_not_a_task_is_named() {
        let e = TaskTable::from_jsonl(b"{\"id\":\"a\"}\nnot json\n".to_vec()).unwrap_err();
        assert!(e.to_string().contains("tasks.jsonl:2"), "{e}");
    }
}
