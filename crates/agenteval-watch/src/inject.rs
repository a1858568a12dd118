//! The filter put into a running process from outside: attached with `ptrace` (`PTRACE_SEIZE`,
//! then `PTRACE_INTERRUPT`), the process is made to call `seccomp` with the filter written on
//! its stack, its listener is copied here (`pidfd_getfd`) and closed there, and the process goes
//! on where it was, a system call it was waiting in restarted as a signal would restart it.
//!
//! Each injected call runs the process's own `syscall` instruction (the one it stopped after, or
//! one of its vDSO's): nothing is written into its code, which its other threads are running.

use std::fs::File;
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::Error;
use crate::filter::{Insn, bytes};

const SECCOMP_SET_MODE_FILTER: u64 = 1;
const SECCOMP_FILTER_FLAG_TSYNC: u64 = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;
const SECCOMP_FILTER_FLAG_TSYNC_ESRCH: u64 = 1 << 4;
const PTRACE_EVENT_STOP: i32 = 128;

/// Puts `prog` into process `pid` (every thread of it), within `wait` for it to stop; its
/// listener, as a descriptor of this process. Every thread is attached and asked to stop before
/// `ready` runs (which lets the process run: it was frozen), so no code of it runs unwatched.
pub(crate) fn install(pid: u32, prog: &[Insn], wait: Duration, ready: &mut dyn FnMut()) -> Result<OwnedFd, Error> {
    let raw = i32::try_from(pid).map_err(|_| Error::Gone(pid))?;
    let main = Pid::from_raw(raw);
    ptrace::seize(main, ptrace::Options::empty()).map_err(|e| Error::Attach(pid, e))?;
    ptrace::interrupt(main).map_err(|e| Error::Attach(pid, e))?;
    let mut threads = vec![main];
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else { continue };
        let tid = Pid::from_raw(tid);
        // A thread that ended meanwhile is no thread to stop.
        if tid != main && ptrace::seize(tid, ptrace::Options::empty()).is_ok() {
            let _ = ptrace::interrupt(tid);
            threads.push(tid);
        }
    }
    ready();
    let mut firsts = Vec::with_capacity(threads.len());
    for &tid in &threads {
        // A thread that never stops is let go when this thread ends, as the kernel lets a
        // tracer's tracees go.
        firsts.push(stopped(tid, pid, wait)?);
    }
    let mut held = Vec::new();
    let saved = ptrace::getregs(main).map_err(|e| Error::Attach(pid, e))?;
    let out = with_stopped(pid, main, &saved, prog, &mut held);
    // Back where it was, whatever happened: its registers, the signal each thread stopped for,
    // and any signal that arrived while it ran the injected calls.
    let _ = ptrace::setregs(main, saved);
    for (tid, first) in threads.into_iter().zip(firsts) {
        let _ = ptrace::detach(tid, first);
    }
    for sig in held {
        let _ = nix::sys::signal::kill(main, sig);
    }
    out
}

/// Waits for the attached thread's first stop; the signal it stopped for, if one.
fn stopped(tid: Pid, pid: u32, wait: Duration) -> Result<Option<Signal>, Error> {
    let deadline = Instant::now() + wait;
    loop {
        match waitpid(tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            // Not stopped in time: this thread ends, and the kernel lets it go with it.
            Ok(WaitStatus::StillAlive) => return Err(Error::NotStopped(pid)),
            Ok(WaitStatus::PtraceEvent(_, _, PTRACE_EVENT_STOP)) => return Ok(None),
            Ok(WaitStatus::Stopped(_, sig)) => return Ok(Some(sig)),
            Ok(WaitStatus::PtraceEvent(..)) => return Ok(None),
            Ok(_) => return Err(Error::Gone(pid)),
            Err(e) => return Err(Error::Attach(pid, e)),
        }
    }
}

fn with_stopped(
    pid: u32,
    tid: Pid,
    saved: &libc::user_regs_struct,
    prog: &[Insn],
    held: &mut Vec<Signal>,
) -> Result<OwnedFd, Error> {
    let io = |e: std::io::Error| Error::Memory(pid, e);
    let mem = File::options().read(true).write(true).open(format!("/proc/{pid}/mem")).map_err(io)?;
    let at = syscall_instruction(pid, &mem, saved.rip).ok_or(Error::NoSyscall(pid))?;
    // Below the red zone of the stack it stopped on: `struct sock_fprog` and the program, and
    // below them what a descriptor's passing needs; all put back as it was.
    let code = bytes(prog);
    let scratch = (saved.rsp - 512 - code.len() as u64) & !15;
    let passing = scratch - PASSING;
    let mut was = vec![0u8; (PASSING as usize) + 16 + code.len()];
    mem.read_exact_at(&mut was, passing).map_err(io)?;
    let t = Target { pid, tid, at, saved, mem: &mem, scratch: passing };
    let out = (|| {
        // How its listener will come here, tried on a descriptor it has before the filter goes
        // in: a filter whose listener cannot be taken would leave it waiting on nobody.
        let way = t.way(held)?;
        let mut fprog = Vec::with_capacity(16);
        fprog.extend_from_slice(&u16::try_from(prog.len()).expect("a short program").to_ne_bytes());
        fprog.extend_from_slice(&[0; 6]);
        fprog.extend_from_slice(&(scratch + 16).to_ne_bytes());
        mem.write_all_at(&fprog, scratch).map_err(io)?;
        mem.write_all_at(&code, scratch + 16).map_err(io)?;
        let flags = SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_TSYNC_ESRCH | SECCOMP_FILTER_FLAG_NEW_LISTENER;
        let fd = call(pid, tid, at, saved, libc::SYS_seccomp, [SECCOMP_SET_MODE_FILTER, flags, scratch], held)?;
        if fd < 0 {
            return Err(Error::Filter(pid, nix::errno::Errno::from_raw(i32::try_from(-fd).unwrap_or(0))));
        }
        let ours = t.take(&way, fd as i32, held);
        // Closed there either way: the process must not answer for itself.
        let _ = call(pid, tid, at, saved, libc::SYS_close, [fd as u64, 0, 0], held);
        t.proven(ours?, held)
    })();
    let _ = mem.write_all_at(&was, passing);
    out
}

/// Room for passing a descriptor over a socket (an address, a message, its control data).
const PASSING: u64 = 256;

/// The stopped process, where it runs injected calls and where its scratch memory is.
struct Target<'a> {
    pid: u32,
    tid: Pid,
    at: u64,
    saved: &'a libc::user_regs_struct,
    mem: &'a File,
    scratch: u64,
}

/// How a descriptor of the process comes here.
enum Way {
    /// `pidfd_getfd` (refused where a container's profile keeps it for `CAP_SYS_PTRACE`).
    Copy,
    /// Sent by the process over a Unix socket this process listens on (`SCM_RIGHTS`).
    Sent(std::os::unix::net::UnixListener, Vec<u8>),
}

impl Target<'_> {
    /// The way that works, tried on one of its descriptors.
    fn way(&self, held: &mut Vec<Signal>) -> Result<Way, Error> {
        let any = std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .ok_or(Error::Gone(self.pid))?;
        if copy_fd(self.pid, any).is_ok() {
            return Ok(Way::Copy);
        }
        use std::os::linux::net::SocketAddrExt as _;
        // A name no process of the agent's can guess and take first (which would only make
        // the watch fail: the peer's pid is checked, and the listener proven, either way).
        let mut nonce = [0u8; 16];
        std::io::Read::read_exact(&mut File::open("/dev/urandom").map_err(|e| Error::Memory(self.pid, e))?, &mut nonce)
            .map_err(|e| Error::Memory(self.pid, e))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("agenteval-watch-{}-{nonce}", self.pid).into_bytes();
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).map_err(|e| Error::Memory(self.pid, e))?;
        let listener = std::os::unix::net::UnixListener::bind_addr(&addr).map_err(|e| Error::Memory(self.pid, e))?;
        let way = Way::Sent(listener, name);
        self.take(&way, any, held)?;
        Ok(way)
    }

    /// Its descriptor `fd`, here.
    fn take(&self, way: &Way, fd: i32, held: &mut Vec<Signal>) -> Result<OwnedFd, Error> {
        match way {
            Way::Copy => copy_fd(self.pid, fd),
            Way::Sent(listener, name) => self.send(listener, name, fd, held),
        }
    }

    /// `listener` if it is the filter's: a listener, to which a call the filter hands over (a
    /// `write` to no descriptor, made by the process) comes. A process with a filter of its own
    /// could answer `seccomp` itself and hand back a listener of a filter that sees nothing.
    fn proven(&self, listener: OwnedFd, held: &mut Vec<Signal>) -> Result<OwnedFd, Error> {
        let fake = || Error::Filter(self.pid, nix::errno::Errno::EBADMSG);
        let link = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&listener)));
        if !link.is_ok_and(|l| l.to_string_lossy() == "anon_inode:seccomp notify") {
            return Err(fake());
        }
        let tid = u32::try_from(self.tid.as_raw()).map_err(|_| fake())?;
        // The listener goes with the thread that answers: if it fails, it closes the listener,
        // and the call waiting on it ends (a filter with no listener fails the call).
        let answering = std::thread::spawn(move || crate::notify::probe(listener, tid));
        let r = self.call(libc::SYS_write, [u64::MAX, 0, 0], held);
        let listener = answering.join().ok().flatten();
        r?;
        listener.ok_or_else(fake)
    }

    fn call(&self, nr: i64, args: [u64; 3], held: &mut Vec<Signal>) -> Result<i64, Error> {
        call(self.pid, self.tid, self.at, self.saved, nr, args, held)
    }

    /// Has the process connect to `listener` and send `fd` over it.
    fn send(
        &self,
        listener: &std::os::unix::net::UnixListener,
        name: &[u8],
        fd: i32,
        held: &mut Vec<Signal>,
    ) -> Result<OwnedFd, Error> {
        let io = |e: std::io::Error| Error::Memory(self.pid, e);
        let refused = |r: i64| Error::Copy(self.pid, nix::errno::Errno::from_raw(i32::try_from(-r).unwrap_or(0)));
        let base = self.scratch;
        // struct sockaddr_un, abstract: the family, a 0, the name.
        let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        addr.push(0);
        addr.extend_from_slice(name);
        let (iov, byte, cmsg, msg) = (base + 112, base + 128, base + 136, base + 160);
        let mut m = Vec::new();
        m.extend_from_slice(&0u64.to_ne_bytes()); // msg_name
        m.extend_from_slice(&0u64.to_ne_bytes()); // msg_namelen (and padding)
        m.extend_from_slice(&iov.to_ne_bytes()); // msg_iov
        m.extend_from_slice(&1u64.to_ne_bytes()); // msg_iovlen
        m.extend_from_slice(&cmsg.to_ne_bytes()); // msg_control
        m.extend_from_slice(&24u64.to_ne_bytes()); // msg_controllen: CMSG_SPACE(4)
        m.extend_from_slice(&0u64.to_ne_bytes()); // msg_flags (and padding)
        let mut c = Vec::new();
        c.extend_from_slice(&20u64.to_ne_bytes()); // cmsg_len: CMSG_LEN(4)
        c.extend_from_slice(&libc::SOL_SOCKET.to_ne_bytes());
        c.extend_from_slice(&libc::SCM_RIGHTS.to_ne_bytes());
        c.extend_from_slice(&fd.to_ne_bytes());
        c.extend_from_slice(&[0; 4]);
        let mut v = byte.to_ne_bytes().to_vec();
        v.extend_from_slice(&1u64.to_ne_bytes());
        for (at, bytes) in [(base, &addr), (iov, &v), (byte, &vec![b'!']), (cmsg, &c), (msg, &m)] {
            self.mem.write_all_at(bytes, at).map_err(io)?;
        }
        let sock = self.call(
            libc::SYS_socket,
            [libc::AF_UNIX as u64, (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64, 0],
            held,
        )?;
        if sock < 0 {
            return Err(refused(sock));
        }
        let sent = (|| {
            let r = self.call(libc::SYS_connect, [sock as u64, base, addr.len() as u64], held)?;
            if r < 0 {
                return Err(refused(r));
            }
            let r = self.call(libc::SYS_sendmsg, [sock as u64, msg, 0], held)?;
            if r < 0 {
                return Err(refused(r));
            }
            Ok(())
        })();
        let _ = self.call(libc::SYS_close, [sock as u64, 0, 0], held);
        sent?;
        // Its connection is waiting (a connect completes without an accept).
        listener.set_nonblocking(true).map_err(io)?;
        let (stream, _) = listener.accept().map_err(io)?;
        let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
            .map_err(|e| Error::Copy(self.pid, e))?;
        if u32::try_from(peer.pid()).ok() != Some(self.pid) {
            return Err(Error::Copy(self.pid, nix::errno::Errno::EPERM));
        }
        received(&stream).ok_or(Error::Copy(self.pid, nix::errno::Errno::EBADMSG))
    }
}

/// The one descriptor a message on `stream` carries.
fn received(stream: &std::os::unix::net::UnixStream) -> Option<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg =
        recvmsg::<()>(std::os::fd::AsRawFd::as_raw_fd(stream), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
            .ok()?;
    let fds: Vec<i32> = msg
        .cmsgs()
        .ok()?
        .filter_map(|c| match c {
            ControlMessageOwned::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    let mut owned: Vec<OwnedFd> = fds
        .into_iter()
        .map(|fd| {
            #[allow(unsafe_code)]
            // SAFETY: the kernel just gave this process the descriptor; nothing else owns it.
            unsafe {
                OwnedFd::from_raw_fd(fd)
            }
        })
        .collect();
    (owned.len() == 1).then(|| owned.remove(0))
}

/// Runs one system call in the stopped thread, from `at` (a `syscall` instruction); its result.
fn call(
    pid: u32,
    tid: Pid,
    at: u64,
    saved: &libc::user_regs_struct,
    nr: i64,
    args: [u64; 3],
    held: &mut Vec<Signal>,
) -> Result<i64, Error> {
    let mut r = *saved;
    r.rip = at;
    r.rax = nr as u64;
    // Not in a system call: the kernel does not restart anything on the way out of this stop.
    r.orig_rax = u64::MAX;
    (r.rdi, r.rsi, r.rdx) = (args[0], args[1], args[2]);
    ptrace::setregs(tid, r).map_err(|e| Error::Attach(pid, e))?;
    for _ in 0..64 {
        ptrace::step(tid, None).map_err(|e| Error::Attach(pid, e))?;
        match waitpid(tid, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {
                let out = ptrace::getregs(tid).map_err(|e| Error::Attach(pid, e))?;
                return if out.rip == at + 2 { Ok(out.rax as i64) } else { Err(Error::NoSyscall(pid)) };
            }
            // A signal came first: kept, sent again once the process is let go.
            Ok(WaitStatus::Stopped(_, sig)) => held.push(sig),
            Ok(WaitStatus::PtraceEvent(..)) => {}
            Ok(_) => return Err(Error::Gone(pid)),
            Err(e) => return Err(Error::Attach(pid, e)),
        }
    }
    Err(Error::NoSyscall(pid))
}

/// A `syscall` instruction (`0f 05`) the process can run: the one it stopped just after, if it
/// stopped in a system call, else the first in its vDSO or other code.
fn syscall_instruction(pid: u32, mem: &File, rip: u64) -> Option<u64> {
    let mut two = [0u8; 2];
    if rip >= 2 && mem.read_exact_at(&mut two, rip - 2).is_ok() && two == [0x0f, 0x05] {
        return Some(rip - 2);
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut code: Vec<(u64, u64, bool)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let (lo, hi) = range.split_once('-')?;
            let lo = u64::from_str_radix(lo, 16).ok()?;
            let hi = u64::from_str_radix(hi, 16).ok()?;
            perms.contains('x').then_some((lo, hi, l.ends_with("[vdso]")))
        })
        .collect();
    code.sort_by_key(|(_, _, vdso)| !vdso);
    for (lo, hi, _) in code {
        let mut buf = vec![0u8; usize::try_from((hi - lo).min(1 << 20)).ok()?];
        if mem.read_exact_at(&mut buf, lo).is_ok()
            && let Some(i) = buf.windows(2).position(|w| w == [0x0f, 0x05])
        {
            return Some(lo + i as u64);
        }
    }
    None
}

/// The process's descriptor `fd`, copied into this process.
fn copy_fd(pid: u32, fd: i32) -> Result<OwnedFd, Error> {
    let gone = |e| Error::Copy(pid, nix::errno::Errno::from_raw(e));
    #[allow(unsafe_code)]
    // SAFETY: plain system calls on integers; a descriptor they return is this process's alone.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0);
        if pidfd < 0 {
            return Err(gone(nix::errno::Errno::last_raw()));
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as i32);
        let ours = libc::syscall(libc::SYS_pidfd_getfd, std::os::fd::AsRawFd::as_raw_fd(&pidfd), fd, 0);
        if ours < 0 {
            return Err(gone(nix::errno::Errno::last_raw()));
        }
        Ok(OwnedFd::from_raw_fd(ours as i32))
    }
}
