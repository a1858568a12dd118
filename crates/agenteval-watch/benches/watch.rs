//! What watching costs a server: `dd` making 200,000 one-byte writes (each one handed to the
//! listener, judged and let go on) and 200,000 reads (never handed over), watched and not; and
//! how long putting the filter in takes. Prints the figures; asserts nothing about time.
//!
//! Run as root (or with `CAP_SYS_ADMIN`), as CI runs: `cargo bench -p agenteval-watch`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CALLS: u32 = 200_000;

/// Runs `dd` with `bs=1 count=CALLS` from `from` to `to` once it reads a line, watched or not:
/// its time from the line to its end, and how long the watch took to put in.
fn run(from: &str, to: &str, watched: bool) -> (Duration, Duration) {
    let script = format!("read _; exec dd if={from} of={to} bs=1 count={CALLS} status=none");
    let mut child = Command::new("sh").args(["-c", &script]).stdin(Stdio::piped()).spawn().expect("sh runs");
    let watch = agenteval_watch::Watch::new(vec![]);
    let mut put_in = Duration::ZERO;
    if watched {
        // Let it reach its `read` first: the filter goes in while it waits there.
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        watch.add(child.id(), || ()).expect("watched (run as root)");
        put_in = t.elapsed();
    }
    let t = Instant::now();
    writeln!(child.stdin.take().unwrap(), "go").unwrap();
    assert!(child.wait().unwrap().success());
    let took = t.elapsed();
    let changes = watch.take();
    assert!(changes.is_empty(), "writes to /dev/null change no file: {changes:?}");
    (took, put_in)
}

fn main() {
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(CALLS);
    let (plain, _) = run("/dev/zero", "/dev/null", false);
    let (watched, put_in) = run("/dev/zero", "/dev/null", true);
    println!("{CALLS} writes (each handed over), one byte each:");
    println!("  unwatched  {:>8.1} ms  {:>6.2} µs a call", plain.as_secs_f64() * 1e3, per_call(plain));
    println!("  watched    {:>8.1} ms  {:>6.2} µs a call", watched.as_secs_f64() * 1e3, per_call(watched));
    println!("  the listener's cost: {:.2} µs a write", per_call(watched.saturating_sub(plain)));
    println!("  the filter put in (attach, inject, take the listener): {:.2} ms", put_in.as_secs_f64() * 1e3);
}
