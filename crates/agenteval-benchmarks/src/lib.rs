//! The benchmarks that need nothing of the engine's environments, each behind the benchmark port:
//! `toy` (generated arithmetic), `jsonl` (cases from a file), `humaneval` (OpenAI's HumanEval,
//! graded by its own check in a sandboxed Python) and `command` (a program in any language that
//! lists the tasks and grades each answer), `swebench` (SWE-bench instances, the patch graded in a
//! fresh container of the instance's image as the official harness grades it); and the helpers every benchmark shares: its data
//! files read with caps, its filter applied, its files hashed.

pub mod command;
pub mod humaneval;
pub mod jsonl;
pub mod swebench;
pub mod toy;

use std::path::Path;

pub use jsonl::{CaseRules, JsonlBenchmark, parse_cases};
pub use toy::ToyBenchmark;

/// Reads a benchmark's data file whole, gzip or not, refusing one that is not a regular file
/// (a FIFO would hang the controller) or that holds more than `max` bytes once decompressed (a
/// 3 MB gzip bomb is 3 GB of text). `option` names the setting that raises the cap.
pub fn read_data_file(path: &Path, max: u64, option: &str) -> agenteval_core::Result<Vec<u8>> {
    read_capped(path, max, option).map_err(agenteval_core::Error::invalid)
}

fn read_capped(path: &Path, max: u64, option: &str) -> std::result::Result<Vec<u8>, String> {
    use std::io::{BufRead as _, BufReader, Read as _};
    let name = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut reader = BufReader::new(file);
    let gzip = reader.fill_buf().map_err(|e| format!("cannot read {name}: {e}"))?.starts_with(&[0x1f, 0x8b]);
    let mut out = Vec::new();
    let read = if gzip {
        flate2::read::GzDecoder::new(reader).take(max + 1).read_to_end(&mut out)
    } else {
        reader.take(max + 1).read_to_end(&mut out)
    };
    read.map_err(|e| {
        if gzip { format!("{name} is not a readable gzip file: {e}") } else { format!("cannot read {name}: {e}") }
    })?;
    if out.len() as u64 > max {
        return Err(format!(
            "{name} holds more than {max} bytes{}; raise `benchmark.{option}` if it is meant to",
            if gzip { " once decompressed" } else { "" }
        ));
    }
    Ok(out)
}

/// The tasks a benchmark's filter chooses, in their order, at most `limit` of them.
pub fn chosen(
    mut tasks: Vec<agenteval_core::model::TaskSpec>,
    filter: &agenteval_core::config::TaskFilter,
) -> Vec<agenteval_core::model::TaskSpec> {
    tasks.retain(|t| filter.matches(t.id.as_str(), &t.tags));
    if let Some(limit) = filter.limit {
        tasks.truncate(limit as usize);
    }
    tasks
}

/// Adds the files below `root` (or `root` itself, a file) to `h` under `label`: each one's path
/// below `root`, whether it is executable, its length and its bytes, in path order; links are
/// not followed. What cannot be read is hashed as unreadable, never skipped in silence.
pub fn hash_tree(h: &mut sha2::Sha256, label: &str, root: &Path) {
    use sha2::Digest as _;
    use std::os::unix::fs::PermissionsExt as _;
    let mut files = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => match std::fs::read_dir(&p) {
                Ok(entries) => todo.extend(entries.flatten().map(|e| e.path())),
                Err(_) => files.push((p, None)),
            },
            Ok(m) if m.is_file() => files.push((p, Some(m.permissions().mode() & 0o111 != 0))),
            _ => {}
        }
    }
    files.sort();
    h.update(label.as_bytes());
    h.update([0]);
    for (f, exec) in files {
        h.update(f.strip_prefix(root).unwrap_or(&f).to_string_lossy().as_bytes());
        h.update([0, u8::from(exec == Some(true))]);
        match std::fs::read(&f) {
            Ok(bytes) => {
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(&bytes);
            }
            Err(_) => h.update(b"unreadable"),
        }
    }
}
