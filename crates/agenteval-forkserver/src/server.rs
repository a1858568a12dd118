//! The fork server's own process: reads start requests, forks each worker, reaps it, reports.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, setpgid};

use crate::protocol::{Reply, Start, line};

/// Serves start requests arriving on stdin (a socket) until it closes, then returns 0. In a
/// forked child it returns that child's exit code instead, after `entry` ran: the caller
/// returns it from `main`, so the worker ends as an exec'd one would.
///
/// Call it first thing in `main`, before anything can start a thread.
pub fn serve(entry: fn(&[String]) -> u8) -> u8 {
    let outcome = Server::open().and_then(Server::run);
    match outcome {
        Ok(None) => 0,
        Ok(Some(child)) => child.become_worker(entry),
        Err(e) => {
            eprintln!("agenteval fork server: {e}");
            4
        }
    }
}

struct Server {
    control: UnixStream,
    exits: SignalFd,
    /// The signal mask before the server blocked SIGCHLD: its children get it back.
    mask: SigSet,
}

/// What a child keeps of the server once it has dropped the rest.
struct Child {
    start: Start,
    log: File,
    mask: SigSet,
}

impl Server {
    fn open() -> std::io::Result<Server> {
        // `ps` shows the server without the room its workers' command lines take.
        let own: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--title-room=")).collect();
        crate::title::set(&own.iter().map(String::as_str).collect::<Vec<_>>());
        // The control socket arrives as stdin: keep a close-on-exec copy, and give stdin
        // `/dev/null`, which every child inherits.
        let control: OwnedFd = std::io::stdin().as_fd().try_clone_to_owned()?;
        nix::unistd::dup2_stdin(File::open("/dev/null")?)?;
        let mut chld = SigSet::empty();
        chld.add(Signal::SIGCHLD);
        let mut mask = SigSet::empty();
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&chld), Some(&mut mask))?;
        let exits = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Server { control: UnixStream::from(control), exits, mask })
    }

    /// Serves until the control socket closes (`None`), or returns in a new child (`Some`).
    fn run(mut self) -> std::io::Result<Option<Child>> {
        let mut pending = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let (requests, exits) = {
                let mut fds = [
                    PollFd::new(self.control.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.exits.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, PollTimeout::NONE) {
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                    Ok(_) => (fds[0].any().unwrap_or(true), fds[1].any().unwrap_or(true)),
                }
            };
            if exits {
                while self.exits.read_signal()?.is_some() {}
                self.reap()?;
            }
            if requests {
                let n = match self.control.read(&mut chunk) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                if n == 0 {
                    // The controller finished or died; running workers carry on without us.
                    return Ok(None);
                }
                pending.extend_from_slice(&chunk[..n]);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let request: Vec<u8> = pending.drain(..=end).collect();
                    let start: Start = serde_json::from_slice(&request)
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                    let reply = match self.start(start)? {
                        Started::Parent(reply) => reply,
                        Started::Child(child) => return Ok(Some(child)),
                    };
                    self.control.write_all(&line(&reply))?;
                }
            }
        }
    }

    fn start(&self, start: Start) -> std::io::Result<Started> {
        let log = match OpenOptions::new().write(true).create(true).truncate(true).open(&start.log) {
            Ok(f) => f,
            Err(e) => {
                let error = format!("creating {}: {e}", start.log.display());
                return Ok(Started::Parent(Reply::Refused { id: start.id, error }));
            }
        };
        // SAFETY: this process has one thread (`serve` runs before anything can start another,
        // and the server itself starts none), so the child is a complete copy of it: no lock
        // is held by a thread that does not exist there.
        #[allow(unsafe_code)]
        let forked = unsafe { fork() };
        Ok(Started::Parent(match forked {
            Ok(ForkResult::Child) => return Ok(Started::Child(Child { start, log, mask: self.mask })),
            Ok(ForkResult::Parent { child }) => {
                // Also set in the child: whichever runs first, the group exists before the
                // controller hears the pid (and may signal the group to cancel it).
                let _ = setpgid(child, child);
                Reply::Started { id: start.id, pid: child.as_raw() }
            }
            Err(e) => Reply::Refused { id: start.id, error: format!("fork: {e}") },
        }))
    }

    /// Reports every child that has ended.
    fn reap(&mut self) -> std::io::Result<()> {
        loop {
            let (pid, status) = match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, (code & 0xff) << 8),
                Ok(WaitStatus::Signaled(pid, sig, core)) => (pid, sig as i32 | if core { 0x80 } else { 0 }),
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(()),
                Err(Errno::EINTR) | Ok(_) => continue,
                Err(e) => return Err(e.into()),
            };
            self.control.write_all(&line(&Reply::Exited { pid: pid.as_raw(), status }))?;
        }
    }
}

enum Started {
    Parent(Reply),
    Child(Child),
}

impl Child {
    /// Runs in the forked child, after the server's descriptors were dropped with it.
    fn become_worker(self, entry: fn(&[String]) -> u8) -> u8 {
        let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
        if sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.mask), None).is_err()
            || nix::unistd::dup2_stdout(&self.log).is_err()
            || nix::unistd::dup2_stderr(&self.log).is_err()
        {
            return 4;
        }
        drop(self.log);
        // Descriptors the controller itself inherited without close-on-exec (a CI runner's
        // pipes, say) are not the worker's to pass on to the agents it starts.
        // SAFETY: nothing in this process owns a descriptor above 2 any more: the server's went
        // with it and the log was dropped above.
        #[allow(unsafe_code)]
        unsafe {
            libc::close_range(3, libc::c_uint::MAX, 0)
        };
        crate::title::set(&self.start.args.iter().map(String::as_str).collect::<Vec<_>>());
        for (k, v) in &self.start.env {
            // SAFETY: a forked child of a single-threaded process has one thread.
            #[allow(unsafe_code)]
            unsafe {
                std::env::set_var(k, v)
            };
        }
        entry(&self.start.args)
    }
}
