//! The listener's side: one thread per [`Watch`] answers every watched process's calls, and
//! writes down each one that changed a file the tests could read.

use std::fs::File;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::Error;
use crate::notify::{self, Notif};

/// One change a watched process made: the process as its own namespace numbers it, its command
/// line, and what it did (`opened /logs/verifier/reward.txt to write`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub pid: u32,
    pub command: String,
    pub what: String,
}

/// Processes watched from this machine until this is dropped (their listeners are closed with
/// it: a watched process's calls that change files then fail, so keep it as long as they run).
pub struct Watch {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    listeners: Mutex<Vec<OwnedFd>>,
    changes: Mutex<Vec<Change>>,
    stop: AtomicBool,
    /// Folders whose files are never a log (the tests', the verifier's).
    guarded: Vec<String>,
}

impl Watch {
    /// A watch of nothing yet; `guarded` are folders a log's name never excuses.
    pub fn new(guarded: Vec<String>) -> Watch {
        let shared = Arc::new(Shared {
            listeners: Mutex::new(Vec::new()),
            changes: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            guarded,
        });
        let serving = shared.clone();
        let thread = std::thread::Builder::new().name("agenteval-watch".into()).spawn(move || serve(&serving)).ok();
        Watch { shared, thread }
    }

    /// Watches process `pid` (as this machine numbers it) and all it starts from now on.
    /// `ready` lets it run (it may be frozen: the filter goes in while it runs to its stop), and
    /// runs once whatever happens, after every thread of the process is asked to stop.
    pub fn add(&self, pid: u32, ready: impl FnOnce() + Send + 'static) -> Result<(), Error> {
        let mut ready = Some(ready);
        #[cfg(target_arch = "x86_64")]
        let got = {
            // A thread of its own: a tracer that ends lets its tracees go, even one that never
            // stopped for it.
            let prog = crate::filter::program();
            let handed = std::thread::spawn(move || {
                let mut go = || {
                    if let Some(r) = ready.take() {
                        r();
                    }
                };
                let out = crate::inject::install(pid, &prog, Duration::from_secs(5), &mut go);
                go();
                out
            })
            .join();
            handed.map_err(|_| Error::Gone(pid)).and_then(|r| r)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let got: Result<OwnedFd, Error> = {
            if let Some(r) = ready.take() {
                r();
            }
            Err(Error::Unsupported)
        };
        self.shared.listeners.lock().expect("not poisoned").push(got?);
        // A file it mapped, shared, before it was watched is written through memory, with no
        // call to see: named now.
        let (inner, command) = who(pid);
        let mapped = shared_maps(pid, &self.shared.guarded, 0, u64::MAX).into_iter().map(|path| Change {
            pid: inner,
            command: command.clone(),
            what: format!("holds {path} mapped, shared"),
        });
        self.shared.changes.lock().expect("not poisoned").extend(mapped);
        Ok(())
    }

    /// The changes made since the last call, each once (a file written a thousand times is one).
    pub fn take(&self) -> Vec<Change> {
        std::mem::take(&mut *self.shared.changes.lock().expect("not poisoned"))
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let listeners = self.shared.listeners.lock().map(|l| l.len()).unwrap_or(0);
        f.debug_struct("Watch").field("listeners", &listeners).finish()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let mut fds = shared.listeners.lock().expect("not poisoned");
        if fds.is_empty() {
            drop(fds);
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let mut polls: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN)).collect();
        if poll(&mut polls, PollTimeout::from(100u16)).unwrap_or(0) <= 0 {
            continue;
        }
        let events: Vec<PollFlags> = polls.iter().map(|p| p.revents().unwrap_or(PollFlags::empty())).collect();
        drop(polls);
        let mut gone = Vec::new();
        for (i, ev) in events.into_iter().enumerate() {
            if ev.contains(PollFlags::POLLIN) {
                answer(shared, &fds[i]);
            } else if ev.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
                gone.push(i);
            }
        }
        // Every process that held the filter has ended.
        for i in gone.into_iter().rev() {
            fds.remove(i);
        }
    }
}

/// Changes kept between two [`Watch::take`]s: past it a process is already named many times.
const MAX_CHANGES: usize = 1000;

/// Takes one call, writes it down if it changes a file, and lets it go on.
fn answer(shared: &Shared, listener: &OwnedFd) {
    // `None`: the caller went (a signal, its end) before it was taken.
    let Some(n) = notify::recv(listener) else { return };
    // Python's bytecode cache is refused, not named: Python goes on without it, and a cache
    // written beside the tests could be code they load. Refusing on a path the process gives
    // is safe whatever the path really is: the call never runs.
    if refused(&n) {
        notify::refuse(listener, &n, libc::EACCES);
        return;
    }
    // Read while the caller waits: its descriptors and memory are as the call found them.
    if let Some(what) = judge(&n, &shared.guarded) {
        let (pid, command) = who(n.pid);
        let mut changes = shared.changes.lock().expect("not poisoned");
        // Each once, and a bounded list: a process that writes a file a million times is named
        // once, and cannot fill this process's memory.
        if changes.len() < MAX_CHANGES && !changes.iter().any(|c| c.pid == pid && c.what == what) {
            changes.push(Change { pid, command, what });
        }
    }
    notify::go_on(listener, &n);
}

/// The process of thread `tid`: its pid as its own namespace numbers it, and its command line.
fn who(tid: u32) -> (u32, String) {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let tgid = field("Tgid:").and_then(|t| t.parse::<u32>().ok()).unwrap_or(tid);
    let inner = std::fs::read_to_string(format!("/proc/{tgid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("NSpid:")?.split_whitespace().last()?.parse().ok()))
        .unwrap_or(tgid);
    let cmd = std::fs::read(format!("/proc/{tgid}/cmdline")).unwrap_or_default();
    let cmd = String::from_utf8_lossy(&cmd).replace(|c: char| c.is_control(), " ");
    let cmd: String = cmd.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(120).collect();
    (inner, cmd)
}

/// The files process `pid` has mapped, shared and writable (each once), within `[lo, hi)`, but
/// logs and shared memory.
fn shared_maps(pid: u32, guarded: &[String], lo: u64, hi: u64) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut out: Vec<String> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, char::is_whitespace).filter(|w| !w.is_empty());
            let (range, perms) = (f.next()?, f.next()?);
            let (start, end) = range.split_once('-')?;
            let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
            if end <= lo || start >= hi {
                return None;
            }
            let path = l.split_whitespace().skip(5).collect::<Vec<_>>().join(" ");
            let path = path.strip_suffix(" (deleted)").unwrap_or(&path).to_string();
            let memory =
                ["/dev/", "/SYSV", "/memfd:"].iter().any(|p| path.starts_with(p)) && !path.starts_with("/dev/shm/");
            (perms.ends_with('s')
                && (perms.as_bytes()[1] == b'w' || lo > 0)
                && path.starts_with('/')
                && !memory
                && !is_log(&path, guarded))
            .then_some(path)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AT_FDCWD: i32 = -100;

/// What a descriptor is, as the kernel says.
enum Target {
    /// A socket, a pipe, a device, or no descriptor at all.
    Nothing,
    File {
        path: String,
        writable: bool,
    },
}

fn target(tid: u32, fd: u64) -> Target {
    let Ok(fd) = i32::try_from(fd as i64) else { return Target::Nothing };
    if fd < 0 {
        return Target::Nothing;
    }
    let Ok(link) = std::fs::read_link(format!("/proc/{tid}/fd/{fd}")) else { return Target::Nothing };
    let link = link.to_string_lossy().into_owned();
    if ["socket:[", "pipe:[", "anon_inode:"].iter().any(|p| link.starts_with(p)) {
        return Target::Nothing;
    }
    let path = link.strip_suffix(" (deleted)").unwrap_or(&link).to_string();
    if is_device(&path) {
        return Target::Nothing;
    }
    let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).unwrap_or_default();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .unwrap_or(0o2);
    Target::File { path, writable: flags & 0o3 != 0 }
}

/// A device (`/dev/null`, a terminal), not a file in `/dev/shm`.
fn is_device(path: &str) -> bool {
    path.starts_with("/dev/") && !path.starts_with("/dev/shm/")
}

/// A file whose writes cannot decide a verdict: a log, outside the guarded folders.
fn is_log(path: &str, guarded: &[String]) -> bool {
    if guarded.iter().any(|g| path == g || path.starts_with(&format!("{}/", g.trim_end_matches('/')))) {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    path.starts_with("/var/log/")
        || name == "nohup.out"
        || [".log", ".out", ".err"].iter().any(|ext| name.len() > ext.len() && name.ends_with(ext))
}

/// A string the process passed (a path): for the report only, never to decide.
fn string_at(tid: u32, addr: u64) -> String {
    let Ok(mem) = File::open(format!("/proc/{tid}/mem")) else { return "?".into() };
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < 4096 {
        // To the end of the page at most: the next one may not be mapped.
        let mut buf = vec![0u8; (4096 - (at % 4096)) as usize];
        let Ok(n) = mem.read_at(&mut buf, at) else { break };
        if n == 0 {
            break;
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return String::from_utf8_lossy(&out).into_owned();
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path the process passed, relative to `dirfd` (or its working folder).
fn path_at(tid: u32, dirfd: u64, addr: u64) -> String {
    let p = string_at(tid, addr);
    if p.starts_with('/') {
        return p;
    }
    let base = match dirfd as i64 as i32 {
        AT_FDCWD => std::fs::read_link(format!("/proc/{tid}/cwd")),
        fd => std::fs::read_link(format!("/proc/{tid}/fd/{fd}")),
    };
    match base {
        Ok(b) => format!("{}/{p}", b.to_string_lossy().trim_end_matches('/')),
        Err(_) => p,
    }
}

fn name(nr: i64) -> &'static str {
    match nr {
        libc::SYS_rename | libc::SYS_renameat | libc::SYS_renameat2 => "renamed",
        libc::SYS_link | libc::SYS_linkat => "linked",
        libc::SYS_symlink | libc::SYS_symlinkat => "made a symbolic link",
        libc::SYS_unlink | libc::SYS_unlinkat | libc::SYS_rmdir => "removed",
        libc::SYS_mkdir | libc::SYS_mkdirat => "made a folder",
        libc::SYS_mknod | libc::SYS_mknodat => "made a node",
        libc::SYS_chmod | libc::SYS_fchmodat | 452 | libc::SYS_fchmod => "changed the mode of",
        libc::SYS_chown | libc::SYS_lchown | libc::SYS_fchownat | libc::SYS_fchown => "changed the owner of",
        libc::SYS_truncate | libc::SYS_ftruncate => "truncated",
        libc::SYS_fallocate => "allocated",
        libc::SYS_utime | libc::SYS_utimes | libc::SYS_utimensat | libc::SYS_futimesat => "changed the times of",
        libc::SYS_setxattr | libc::SYS_lsetxattr | libc::SYS_fsetxattr | 463 => "set an attribute of",
        libc::SYS_removexattr | libc::SYS_lremovexattr | libc::SYS_fremovexattr | 466 => "removed an attribute of",
        libc::SYS_dup | libc::SYS_dup2 | libc::SYS_dup3 | libc::SYS_fcntl => "copied a descriptor of",
        libc::SYS_mmap => "mapped, shared,",
        _ => "wrote",
    }
}

/// Python's bytecode cache: a file in `__pycache__`, a `.pyc` (or the temporary file Python
/// writes one through, `x.pyc.140234`), or a `__pycache__` folder.
fn is_bytecode(path: &str) -> bool {
    let mut parts = path.trim_end_matches('/').rsplit('/');
    let name = parts.next().unwrap_or("");
    name == "__pycache__" || parts.next() == Some("__pycache__") || name.ends_with(".pyc") || name.contains(".pyc.")
}

/// Whether the call writes Python's bytecode cache (an open to write, a folder made, a rename
/// onto one): refused.
fn refused(n: &Notif) -> bool {
    let (tid, a, nr) = (n.pid, n.data.args, i64::from(n.data.nr));
    if n.data.arch != AUDIT_ARCH_X86_64 {
        return false;
    }
    let path = match nr {
        libc::SYS_open | libc::SYS_creat | libc::SYS_mkdir => path_at(tid, AT_FDCWD as u64, a[0]),
        libc::SYS_openat | libc::SYS_openat2 | libc::SYS_mkdirat => path_at(tid, a[0], a[1]),
        libc::SYS_rename => path_at(tid, AT_FDCWD as u64, a[1]),
        libc::SYS_renameat | libc::SYS_renameat2 => path_at(tid, a[2], a[3]),
        _ => return false,
    };
    is_bytecode(&path)
}

/// What the call changes, if it can change a file the tests could read; `None`: nothing of
/// the kind (a socket written, a read-only open, a log).
// Long: one arm per family of calls the filter hands over, each reading its own arguments.
fn judge(n: &Notif, guarded: &[String]) -> Option<String> {
    let (tid, a, nr) = (n.pid, n.data.args, i64::from(n.data.nr));
    if n.data.arch != AUDIT_ARCH_X86_64 || nr & 0x4000_0000 != 0 {
        return Some(format!("made a system call of another ABI ({nr})"));
    }
    let opened = |path: String, flags: u64| {
        (flags & u64::from(crate::filter::OPEN_CHANGES) != 0 && !is_log(&path, guarded) && !is_device(&path))
            .then(|| format!("opened {path} to write"))
    };
    // Through a descriptor: judged by what the kernel says it is.
    let through = |fd: u64, only_writable: bool| match target(tid, fd) {
        Target::File { path, writable } if (writable || !only_writable) && !is_log(&path, guarded) => {
            Some(format!("{} {path}", name(nr)))
        }
        _ => None,
    };
    match nr {
        libc::SYS_open => opened(path_at(tid, AT_FDCWD as u64, a[0]), a[1]),
        libc::SYS_openat => opened(path_at(tid, a[0], a[1]), a[2]),
        libc::SYS_creat => opened(path_at(tid, AT_FDCWD as u64, a[0]), 0o1),
        libc::SYS_openat2 => {
            let mut how = [0u8; 8];
            let flags = File::open(format!("/proc/{tid}/mem"))
                .and_then(|m| m.read_exact_at(&mut how, a[2]))
                .map_or(0o1, |()| u64::from_ne_bytes(how));
            opened(path_at(tid, a[0], a[1]), flags)
        }
        libc::SYS_write
        | libc::SYS_pwrite64
        | libc::SYS_writev
        | libc::SYS_pwritev
        | libc::SYS_pwritev2
        | libc::SYS_sendfile
        | libc::SYS_ftruncate
        | libc::SYS_fallocate => through(a[0], true),
        libc::SYS_copy_file_range | libc::SYS_splice => through(a[2], true),
        libc::SYS_fchmod | libc::SYS_fchown | libc::SYS_fsetxattr | libc::SYS_fremovexattr => through(a[0], false),
        libc::SYS_dup | libc::SYS_dup2 | libc::SYS_dup3 | libc::SYS_fcntl => through(a[0], true),
        libc::SYS_mmap => through(a[4], true),
        // Made writable: a file mapped, shared, in the range (its memory is the file).
        libc::SYS_mprotect | libc::SYS_pkey_mprotect => {
            let files = shared_maps(tid, guarded, a[0].max(1), a[0].saturating_add(a[1]));
            (!files.is_empty()).then(|| format!("made {} writable in memory", files.join(", ")))
        }
        libc::SYS_utimensat if a[1] == 0 => through(a[0], false),
        libc::SYS_io_submit => Some("submitted asynchronous I/O (io_submit)".into()),
        libc::SYS_ptrace | libc::SYS_process_vm_writev | libc::SYS_pidfd_getfd => {
            Some(format!("reached into another process (system call {nr})"))
        }
        libc::SYS_rename | libc::SYS_link | libc::SYS_symlink => {
            Some(format!("{} {}", name(nr), path_at(tid, AT_FDCWD as u64, a[1])))
        }
        libc::SYS_renameat | libc::SYS_renameat2 | libc::SYS_linkat => {
            Some(format!("{} {}", name(nr), path_at(tid, a[2], a[3])))
        }
        libc::SYS_symlinkat => Some(format!("{} {}", name(nr), path_at(tid, a[1], a[2]))),
        libc::SYS_unlinkat
        | libc::SYS_mkdirat
        | libc::SYS_mknodat
        | libc::SYS_fchmodat
        | 452
        | libc::SYS_fchownat
        | libc::SYS_utimensat
        | libc::SYS_futimesat
        | 463
        | 466 => Some(format!("{} {}", name(nr), path_at(tid, a[0], a[1]))),
        _ => Some(format!("{} {}", name(nr), path_at(tid, AT_FDCWD as u64, a[0]))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pythons_bytecode_cache_is_told_from_the_code_beside_it() {
        for p in ["/app/__pycache__", "/app/__pycache__/m.cpython-312.pyc.140234", "/usr/lib/x.pyc", "/a/__pycache__/"]
        {
            assert!(is_bytecode(p), "{p}");
        }
        for p in ["/app/m.py", "/app/pycache/m.py", "/app/x.pycx", "/logs/verifier/reward.txt"] {
            assert!(!is_bytecode(p), "{p}");
        }
    }

    #[test]
    fn a_log_outside_the_guarded_folders_is_a_log_and_nothing_else_is() {
        let guarded = vec!["/logs".to_string(), "/tests/".to_string()];
        for p in ["/tmp/server.log", "/app/nohup.out", "/var/log/nginx/access", "/srv/x.err"] {
            assert!(is_log(p, &guarded), "{p}");
        }
        for p in ["/logs/verifier/x.log", "/tests/a.log", "/app/main.py", "/tmp/.log", "/usr/bin/python3"] {
            assert!(!is_log(p, &guarded), "{p}");
        }
    }
}
