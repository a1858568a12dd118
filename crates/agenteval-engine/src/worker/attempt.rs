//! One attempt at one task, as it goes through the stages: the lines of its `worker.log` and
//! the files it keeps for its pack. Owned by the attempt, handed from stage to stage, and
//! written by the record stage.

/// What an attempt has said and kept so far.
#[derive(Debug)]
pub(super) struct Attempt {
    /// The lines of its `worker.log`.
    pub(super) log: Vec<String>,
    /// Files besides the trace: `(name in the pack, bytes)`, held until the pack is made rather
    /// than staged, so no file is created and removed for them.
    pub(super) files: Vec<(String, Vec<u8>)>,
    /// The whole trace as written, when it was small enough to keep (else the pack reads the
    /// staged file).
    pub(super) trace: Option<Vec<u8>>,
    /// The agent's patch of its working folder as the capture stage took it (unredacted, held
    /// for the tamper audit, never written).
    pub(super) patch: Option<String>,
}

impl Attempt {
    pub(super) fn new(first_line: String) -> Attempt {
        Attempt { log: vec![first_line], files: Vec::new(), trace: None, patch: None }
    }

    /// Adds a line to its log.
    pub(super) fn say(&mut self, line: impl Into<String>) {
        self.log.push(line.into());
    }

    /// A file kept for its pack so far.
    pub(super) fn kept(&self, name: &str) -> Option<&[u8]> {
        self.files.iter().find(|(n, _)| n == name).map(|(_, b)| b.as_slice())
    }

    /// Keeps a file for its pack (a later one of the same name replaces it).
    pub(super) fn keep(&mut self, name: impl Into<String>, bytes: Vec<u8>) {
        let name = name.into();
        self.files.retain(|(n, _)| *n != name);
        self.files.push((name, bytes));
    }

    /// Its `worker.log`, whole.
    pub(super) fn log_text(&self) -> String {
        self.log.join("\n") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_kept_twice_is_kept_once_the_later_one() {
        let mut at = Attempt::new("started".into());
        at.keep("artifacts/a", b"1".to_vec());
        at.keep("artifacts/b", b"2".to_vec());
        at.keep("artifacts/a", b"3".to_vec());
        assert_eq!(at.files, vec![("artifacts/b".into(), b"2".to_vec()), ("artifacts/a".into(), b"3".to_vec())]);
        at.say("done");
        assert_eq!(at.log_text(), "started\ndone\n");
    }
}
