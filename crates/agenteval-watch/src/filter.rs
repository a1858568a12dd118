//! The seccomp filter a watched server runs under: every system call that can change a file
//! goes to the listener (`SECCOMP_RET_USER_NOTIF`), everything else runs as before.
//!
//! Calls through a descriptor (`write`, `ftruncate`, `dup2`, …) go to the listener whatever the
//! descriptor is, since a filter cannot tell a socket from a file: the listener asks the kernel.
//! `open`/`openat` go only when their flags can change a file, `mmap` only when shared,
//! `mprotect` only when it makes memory writable, `fcntl` only when it copies a descriptor. A call of another ABI (32-bit or x32) always goes.

/// One classic BPF instruction, as `struct sock_filter` lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET: u16 = 0x06; // BPF_RET | BPF_K

pub(crate) const RET_ALLOW: u32 = 0x7fff_0000;
pub(crate) const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `O_WRONLY | O_RDWR | O_CREAT | O_TRUNC`: an open that can change a file (Linux truncates on
/// `O_TRUNC` even when opening to read).
pub(crate) const OPEN_CHANGES: u32 = 0o1 | 0o2 | 0o100 | 0o1000;
const MAP_SHARED: u32 = 0x01;
const PROT_WRITE: u32 = 0x02;
const F_DUPFD: u32 = 0;
const F_DUPFD_CLOEXEC: u32 = 1030;

/// The calls that always go to the listener (x86-64 numbers).
pub(crate) const ALWAYS: &[i64] = &[
    libc::SYS_creat,
    libc::SYS_openat2,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_rmdir,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    452, // fchmodat2
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_utimensat,
    libc::SYS_futimesat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    463, // setxattrat
    466, // removexattrat
    libc::SYS_write,
    libc::SYS_pwrite64,
    libc::SYS_writev,
    libc::SYS_pwritev,
    libc::SYS_pwritev2,
    libc::SYS_sendfile,
    libc::SYS_copy_file_range,
    libc::SYS_splice,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_io_submit,
    libc::SYS_ptrace,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
];

#[derive(Clone, Copy)]
enum To {
    Next,
    Skip(u8),
    Notify,
    Allow,
}

enum Op {
    Ld(u32),
    Jump(u16, u32, To, To),
    Ret(u32),
}

fn arg(i: u32) -> u32 {
    // The low half of `seccomp_data.args[i]` (little-endian).
    16 + 8 * i
}

fn nr(n: i64) -> u32 {
    u32::try_from(n).expect("a system call number fits")
}

/// The program, ready for `seccomp(SECCOMP_SET_MODE_FILTER, …)`.
pub(crate) fn program() -> Vec<Insn> {
    let mut ops = vec![
        Op::Ld(4),
        Op::Jump(JEQ, AUDIT_ARCH_X86_64, To::Skip(1), To::Next),
        Op::Ret(RET_USER_NOTIF),
        Op::Ld(0),
        Op::Jump(JGE, X32_SYSCALL_BIT, To::Notify, To::Next),
    ];
    ops.extend(ALWAYS.iter().map(|&n| Op::Jump(JEQ, nr(n), To::Notify, To::Next)));
    // Each block below loads an argument, so it ends in a return: the number is gone.
    for (call, at, mask) in [
        (libc::SYS_open, 1, OPEN_CHANGES),
        (libc::SYS_openat, 2, OPEN_CHANGES),
        (libc::SYS_mmap, 3, MAP_SHARED),
        (libc::SYS_mprotect, 2, PROT_WRITE),
        (libc::SYS_pkey_mprotect, 2, PROT_WRITE),
    ] {
        ops.push(Op::Jump(JEQ, nr(call), To::Next, To::Skip(2)));
        ops.push(Op::Ld(arg(at)));
        ops.push(Op::Jump(JSET, mask, To::Notify, To::Allow));
    }
    ops.push(Op::Jump(JEQ, nr(libc::SYS_fcntl), To::Next, To::Skip(3)));
    ops.push(Op::Ld(arg(1)));
    ops.push(Op::Jump(JEQ, F_DUPFD, To::Notify, To::Next));
    ops.push(Op::Jump(JEQ, F_DUPFD_CLOEXEC, To::Notify, To::Allow));
    ops.push(Op::Ret(RET_ALLOW));
    ops.push(Op::Ret(RET_USER_NOTIF));
    let (allow, notify) = (ops.len() - 2, ops.len() - 1);
    let offset = |at: usize, to: To| -> u8 {
        let target = match to {
            To::Next => at + 1,
            To::Skip(n) => at + 1 + usize::from(n),
            To::Notify => notify,
            To::Allow => allow,
        };
        u8::try_from(target - at - 1).expect("a jump within the program")
    };
    ops.iter()
        .enumerate()
        .map(|(at, op)| match *op {
            Op::Ld(k) => Insn { code: LD_ABS, jt: 0, jf: 0, k },
            Op::Jump(code, k, jt, jf) => Insn { code, jt: offset(at, jt), jf: offset(at, jf), k },
            Op::Ret(k) => Insn { code: RET, jt: 0, jf: 0, k },
        })
        .collect()
}

/// The program's bytes, as the kernel reads them.
pub(crate) fn bytes(prog: &[Insn]) -> Vec<u8> {
    prog.iter()
        .flat_map(|i| {
            let mut b = Vec::with_capacity(8);
            b.extend_from_slice(&i.code.to_ne_bytes());
            b.push(i.jt);
            b.push(i.jf);
            b.extend_from_slice(&i.k.to_ne_bytes());
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one call, as the kernel would.
    fn run(prog: &[Insn], arch: u32, call: i64, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&(call as i32).to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            data.extend_from_slice(&a.to_ne_bytes());
        }
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_ABS => acc = u32::from_ne_bytes(data[i.k as usize..i.k as usize + 4].try_into().unwrap()),
                RET => return i.k,
                JEQ | JGE | JSET => {
                    let yes = match i.code {
                        JEQ => acc == i.k,
                        JGE => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if yes { i.jt } else { i.jf });
                }
                other => panic!("unknown instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn calls_that_can_change_a_file_go_to_the_listener_and_the_rest_run() {
        let p = program();
        let x86 = AUDIT_ARCH_X86_64;
        let notified = |call: i64, args: [u64; 6]| run(&p, x86, call, args) == RET_USER_NOTIF;
        // An open to read runs; to write, create or truncate, goes.
        assert!(!notified(libc::SYS_openat, [0, 0, 0, 0, 0, 0]));
        assert!(notified(libc::SYS_openat, [0, 0, 0o1 | 0o100, 0, 0, 0]));
        assert!(notified(libc::SYS_openat, [0, 0, 0o1000, 0, 0, 0]));
        assert!(!notified(libc::SYS_open, [0, 0o2000000, 0, 0, 0, 0]));
        assert!(notified(libc::SYS_open, [0, 0o2, 0, 0, 0, 0]));
        for call in [libc::SYS_write, libc::SYS_rename, libc::SYS_unlinkat, libc::SYS_dup2, libc::SYS_ftruncate] {
            assert!(notified(call, [0; 6]), "{call}");
        }
        // A private mapping runs, a shared one goes; `fcntl` goes only to copy a descriptor.
        assert!(!notified(libc::SYS_mmap, [0, 4096, 3, 0x22, u64::MAX, 0]));
        assert!(notified(libc::SYS_mmap, [0, 4096, 3, 0x01, 5, 0]));
        assert!(!notified(libc::SYS_mprotect, [0, 4096, 1, 0, 0, 0]));
        assert!(notified(libc::SYS_mprotect, [0, 4096, 3, 0, 0, 0]));
        assert!(!notified(libc::SYS_fcntl, [3, 3, 0, 0, 0, 0]));
        assert!(notified(libc::SYS_fcntl, [3, 1030, 0, 0, 0, 0]));
        assert!(notified(libc::SYS_fcntl, [3, 0, 0, 0, 0, 0]));
        // What cannot change a file runs; another ABI always goes.
        for call in [libc::SYS_read, libc::SYS_accept4, libc::SYS_sendto, libc::SYS_close, libc::SYS_futex] {
            assert!(!notified(call, [0; 6]), "{call}");
        }
        assert!(notified(libc::SYS_read | i64::from(X32_SYSCALL_BIT), [0; 6]));
        assert_eq!(run(&p, 0x4000_0003, 5, [0; 6]), RET_USER_NOTIF, "i386");
        assert_eq!(bytes(&p).len(), p.len() * 8);
    }
}
