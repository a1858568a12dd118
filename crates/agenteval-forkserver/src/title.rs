//! A forked worker's command line as `ps` and `/proc/PID/cmdline` show it.
//!
//! A forked child inherits the server's argv, so without this every worker would read
//! `agenteval worker --fork-server` and nobody (an operator with `ps`, a test looking for the
//! worker of a job) could tell which job it runs. The server is started with room at the end of
//! its argv (`ROOM`); each child writes its own arguments over the server's, in place, through
//! `/proc/self/mem` (a process may always write its own memory; no `unsafe`). The kernel reads
//! `cmdline` from that same memory.

use std::io::{Seek, SeekFrom, Write};

/// The last argument the server is started with: room for a worker's arguments.
pub(crate) fn room() -> String {
    format!("--title-room={}", ".".repeat(4096))
}

/// Makes this process's command line `argv0 args...` (NUL-separated, padded with NULs), cut
/// short if it does not fit the room. Best effort: a kernel that refuses leaves it as it was.
pub(crate) fn set(args: &[&str]) {
    let Some((start, end)) = arg_area() else { return };
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else { return };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let mut title = argv0.to_vec();
    for a in args {
        title.push(0);
        title.extend_from_slice(a.as_bytes());
    }
    let size = (end - start) as usize;
    // The last byte stays NUL: the kernel reads a command line without one as if the process
    // had stretched it over its environment.
    title.truncate(size.saturating_sub(1));
    title.resize(size, 0);
    if let Ok(mut mem) = std::fs::OpenOptions::new().write(true).open("/proc/self/mem") {
        let _ = mem.seek(SeekFrom::Start(start)).and_then(|_| mem.write_all(&title));
    }
}

/// Where argv's strings are in this process's memory (`arg_start`, `arg_end` of `stat`).
fn arg_area() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), starting at field 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let start = fields.get(48 - 3)?.parse().ok()?;
    let end = fields.get(49 - 3)?.parse().ok()?;
    (end > start).then_some((start, end))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_argument_area_is_found_and_holds_this_command_line() {
        let (start, end) = super::arg_area().expect("arg_start and arg_end");
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert_eq!((end - start) as usize, cmdline.len(), "the area is what cmdline shows");
    }
}
