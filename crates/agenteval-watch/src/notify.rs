//! The seccomp listener's side of the kernel: a call taken (`SECCOMP_IOCTL_NOTIF_RECV`), let go
//! on or refused (`SECCOMP_IOCTL_NOTIF_SEND`), and the probe that proves a listener the filter's.

use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

#[repr(C)]
#[derive(Default)]
pub(crate) struct SeccompData {
    pub nr: i32,
    pub arch: u32,
    pub ip: u64,
    pub args: [u64; 6],
}

#[repr(C)]
#[derive(Default)]
pub(crate) struct Notif {
    pub id: u64,
    pub pid: u32,
    pub flags: u32,
    pub data: SeccompData,
}

#[repr(C)]
struct Resp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

const NOTIF_RECV: u64 = 0xc050_2100; // _IOWR('!', 0, struct seccomp_notif)
const NOTIF_SEND: u64 = 0xc018_2101; // _IOWR('!', 1, struct seccomp_notif_resp)
const FLAG_CONTINUE: u32 = 1;

/// The next call handed over, once one is waiting; `None`: its caller went before it was taken.
pub(crate) fn recv(listener: &OwnedFd) -> Option<Notif> {
    let mut n = Notif::default();
    #[allow(unsafe_code)]
    // SAFETY: the kernel fills `n`, a zeroed `struct seccomp_notif` of the size the request names.
    let got = unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_RECV as _, &mut n as *mut Notif) };
    (got == 0).then_some(n)
}

fn send(listener: &OwnedFd, mut r: Resp) {
    #[allow(unsafe_code)]
    // SAFETY: `r` is a `struct seccomp_notif_resp` of the size the request names.
    let _ = unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_SEND as _, &mut r as *mut Resp) };
}

/// Lets the call go on as if no filter had seen it.
pub(crate) fn go_on(listener: &OwnedFd, n: &Notif) {
    send(listener, Resp { id: n.id, val: 0, error: 0, flags: FLAG_CONTINUE });
}

/// Fails the call with `errno`; it never runs.
pub(crate) fn refuse(listener: &OwnedFd, n: &Notif, errno: i32) {
    send(listener, Resp { id: n.id, val: 0, error: -errno, flags: 0 });
}

/// Waits (2 s at most) for the probe `write(-1, …)` of thread `tid` on `listener` and lets it
/// go on; the listener if the probe came.
pub(crate) fn probe(listener: OwnedFd, tid: u32) -> Option<OwnedFd> {
    let mut polls = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
    if poll(&mut polls, PollTimeout::from(2000u16)).unwrap_or(0) <= 0 {
        return None;
    }
    let n = recv(&listener)?;
    go_on(&listener, &n);
    let ours = n.pid == tid && i64::from(n.data.nr) == libc::SYS_write && n.data.args[0] as i32 == -1;
    ours.then_some(listener)
}
