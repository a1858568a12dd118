//! A real process watched from here: what it changes in files is seen, what it writes to a log,
//! a socket or a pipe is not, and a read it was waiting in goes on as if nothing happened; its
//! threads, older and newer, and its children are watched with it; its Python bytecode cache is
//! refused (Python goes on without it), not named.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdout, Command, Stdio};

const SERVER: &str = r#"
import ctypes, os, socket, sys, threading
ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # no_new_privs, as Docker's containers have it
d = sys.argv[1]
log = open(os.path.join(d, 'server.log'), 'a')
go = threading.Event()
def waiting():
    go.wait()
    open(os.path.join(d, 'existing.txt'), 'w').close()
older = threading.Thread(target=waiting, daemon=True); older.start()
import mmap
held = open(os.path.join(d, 'mapped.bin'), 'r+b')
mapped = mmap.mmap(held.fileno(), 0)
print('ready', flush=True)
sys.stdin.readline()
go.set(); older.join()
log.write('a request\n'); log.flush()
with open(os.path.join(d, 'access.log'), 'a') as f: f.write('x')
a, b = socket.socketpair(); a.send(b'x'); os.write(b.fileno(), b'y')
open(os.path.join(d, 'input.txt')).read()
with open(os.path.join(d, 'reward.txt'), 'w') as f: f.write('1')
os.rename(os.path.join(d, 'reward.txt'), os.path.join(d, 'moved.txt'))
t = threading.Thread(target=lambda: open(os.path.join(d, 'thread.txt'), 'w').close()); t.start(); t.join()
os.system('echo hi > ' + os.path.join(d, 'child.txt'))
sys.dont_write_bytecode = False
sys.path.insert(0, os.path.join(d, 'lib'))
import lazily  # its bytecode cache is refused, and the import works all the same
assert lazily.VALUE == 42 and not os.path.exists(os.path.join(d, 'lib', '__pycache__'))
print('done', flush=True)
sys.stdin.readline()
"#;

/// `script` run by Python with `arg`, once it says it is ready: the process and its output.
fn started(script: &str, arg: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new("python3")
        .args(["-c", script, arg])
        .env_remove("PYTHONDONTWRITEBYTECODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    (child, out)
}

#[test]
fn a_watched_process_s_changes_to_files_are_seen_and_its_logs_sockets_and_pipes_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    std::fs::write(dir.path().join("input.txt"), "in").unwrap();
    std::fs::write(dir.path().join("mapped.bin"), "0123").unwrap();
    std::fs::create_dir(dir.path().join("lib")).unwrap();
    std::fs::write(dir.path().join("lib/lazily.py"), "VALUE = 42\n").unwrap();
    let (mut child, mut out) = started(SERVER, &d);
    let watch = agenteval_watch::Watch::new(vec![]);
    // It waits in a read when the filter goes in: the read goes on and takes the next line.
    watch.add(child.id(), || ()).expect("watched");
    let mut input = child.stdin.take().unwrap();
    writeln!(input, "go").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done");
    let changes = watch.take();
    let _ = child.kill();
    let _ = child.wait();
    let said: Vec<String> = changes.iter().map(|c| c.what.clone()).collect();
    for want in [
        format!("opened {d}/reward.txt to write"),
        format!("renamed {d}/moved.txt"),
        format!("opened {d}/thread.txt to write"),
        format!("opened {d}/child.txt to write"),
        format!("opened {d}/existing.txt to write"),
        format!("holds {d}/mapped.bin mapped, shared"),
    ] {
        assert!(said.contains(&want), "{want} in {said:?}");
    }
    // Nothing else: each change is to one of those files (the writes through them included).
    let files = ["reward.txt", "moved.txt", "thread.txt", "child.txt", "existing.txt", "mapped.bin"];
    assert!(said.iter().all(|s| files.iter().any(|f| s.contains(&format!("{d}/{f}")))), "{said:?}");
    assert_eq!(said.iter().filter(|s| s.starts_with("wrote")).count(), 2, "each write once: {said:?}");
    let by_python = changes.iter().find(|c| c.what.contains("reward.txt")).unwrap();
    assert_eq!(by_python.pid, child.id());
    assert!(by_python.command.contains("python3 -c import ctypes"), "{by_python:?}");
}

/// A process that answers `seccomp` itself (a filter of its own makes the call "succeed" with
/// no filter put in) is not taken as watched.
const DECOY: &str = r#"
import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(38, 1, 0, 0, 0)
# seccomp(2) returns 0 without doing anything; every other call runs.
prog = [(0x20, 0, 0, 0), (0x15, 0, 1, 317), (0x06, 0, 0, 0x00050000), (0x06, 0, 0, 0x7fff0000)]
code = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *i) for i in prog))
class Prog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
assert libc.prctl(22, 2, ctypes.byref(Prog(len(prog), ctypes.addressof(code))), 0, 0) == 0
print('ready', flush=True)
sys.stdin.readline()
"#;

#[test]
fn a_process_that_fakes_the_filter_is_not_taken_as_watched() {
    let (mut child, _out) = started(DECOY, "");
    let watch = agenteval_watch::Watch::new(vec![]);
    let got = watch.add(child.id(), || ());
    let _ = child.kill();
    let _ = child.wait();
    assert!(got.is_err(), "a decoy listener was taken for the filter");
}
