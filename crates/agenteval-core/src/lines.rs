//! Lines of a bundle file read a piece at a time (`tasks.jsonl`, `results.jsonl`): one splitter
//! so that no reader holds a whole file to split it.

use crate::traits::BundleStore;
use crate::{Result, RunId};

/// Splits text that arrives in pieces into lines, carrying a line cut at the end of one piece
/// into the next. Lines are handed over without their `\n`, with their 1-based number (for
/// errors that name `file:line`). After the first error, later lines are skipped and the error
/// is kept for `finish`.
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    number: usize,
    failed: Option<crate::Error>,
}

impl LineSplitter {
    /// Hands every whole line of `piece` to `each`.
    pub fn feed(&mut self, piece: &[u8], each: &mut dyn FnMut(usize, &[u8]) -> Result<()>) {
        let mut rest = piece;
        while let Some(i) = memchr(rest) {
            if self.partial.is_empty() {
                self.take(&rest[..i], each);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&rest[..i]);
                self.take(&line, each);
                // Keep the allocation for the next cut line.
                line.clear();
                self.partial = line;
            }
            rest = &rest[i + 1..];
        }
        self.partial.extend_from_slice(rest);
    }

    /// Hands over the last line if the text did not end with a newline; returns the first error
    /// `each` gave.
    pub fn finish(mut self, each: &mut dyn FnMut(usize, &[u8]) -> Result<()>) -> Result<()> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.take(&line, each);
        }
        self.failed.map_or(Ok(()), Err)
    }

    fn take(&mut self, line: &[u8], each: &mut dyn FnMut(usize, &[u8]) -> Result<()>) {
        self.number += 1;
        if self.failed.is_none()
            && let Err(e) = each(self.number, line)
        {
            self.failed = Some(e);
        }
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Reads `path` of `run` a piece at a time and hands each line to `each` (blank lines too: a
/// reader decides what they mean). The store's error comes first, then `each`'s first.
pub async fn each_line(
    store: &dyn BundleStore,
    run: &RunId,
    path: &str,
    each: &mut (dyn FnMut(usize, &[u8]) -> Result<()> + Send),
) -> Result<()> {
    let mut lines = LineSplitter::default();
    store.read_chunks(run, path, &mut |piece| lines.feed(piece, each)).await?;
    lines.finish(each)
}

/// Whether a line holds nothing but whitespace (JSON Lines readers skip such lines).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &[u8], piece: usize) -> (Vec<(usize, String)>, Result<()>) {
        let mut got = Vec::new();
        let mut each = |n: usize, l: &[u8]| {
            got.push((n, String::from_utf8(l.to_vec()).unwrap()));
            Ok(())
        };
        let mut s = LineSplitter::default();
        for p in text.chunks(piece.max(1)) {
            s.feed(p, &mut each);
        }
        let r = s.finish(&mut each);
        (got, r)
    }

    #[test]
    fn pieces_of_any_size_give_the_same_lines() {
        let text = b"alpha\n\nbravo charlie\ndelta";
        let want: Vec<(usize, String)> =
            [(1, "alpha"), (2, ""), (3, "bravo charlie"), (4, "delta")].map(|(n, s)| (n, s.to_string())).into();
        for piece in 1..=text.len() {
            let (got, r) = split(text, piece);
            assert!(r.is_ok());
            assert_eq!(got, want, "pieces of {piece} bytes");
        }
        // A final newline adds no empty line.
        assert_eq!(split(b"a\nb\n", 3).0.len(), 2);
        assert!(split(b"", 3).0.is_empty());
    }

    #[test]
    fn the_first_error_is_kept_and_later_lines_are_skipped() {
        let mut seen = Vec::new();
        let mut each = |n: usize, l: &[u8]| {
            seen.push(n);
            if l == b"bad" { Err(crate::Error::invalid(format!("line {n}"))) } else { Ok(()) }
        };
        let mut s = LineSplitter::default();
        s.feed(b"ok\nbad\nok\nbad\n", &mut each);
        let e = s.finish(&mut each).unwrap_err();
        assert_eq!(e.to_string(), "line 2");
        assert_eq!(seen, vec![1, 2]);
    }
}
