//! What a sandboxed program may do besides files: which TCP ports it may connect to, whether it
//! may open sockets or create processes at all (seccomp), and as whom it runs (an unprivileged
//! uid when the worker is root). Applied by the `agent-sandbox` launcher between the filesystem
//! ruleset's preparation and the exec; the worker itself is never confined.

use std::path::{Path, PathBuf};

use super::ConfineError;
use serde::{Deserialize, Serialize};

/// The mark a view carries when its program must run as another user (the worker is root): the
/// launcher's caller replaces it by the uid the task leases (`uids::lease`); were it left,
/// `nobody` on Debian, Ubuntu, Fedora and Alpine alike.
pub const AGENT_UID: u32 = 65534;

/// Who the sandboxed program may talk to over the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Net {
    /// Unrestricted.
    #[default]
    All,
    /// TCP connections to these ports only (on any address, loopback included: the kernel's
    /// rules know ports, not hosts); abstract unix sockets outside the sandbox unreachable.
    Tcp(Vec<u16>),
    /// No IP socket at all (TCP or UDP), no abstract unix socket outside the sandbox.
    None,
}

/// Whether a task's programs need a user of their own: [`AGENT_UID`] (to be replaced by a leased
/// uid) when this process is root, so an agent keeps none of root's rights; else none (they run
/// as the worker's user, which the kernel already keeps from everyone else's processes).
pub fn agent_user() -> Option<u32> {
    nix::unistd::geteuid().is_root().then_some(AGENT_UID)
}

/// What keeps an agent's uid from reading `path` (its program, or a file its command names):
/// the first folder above it that others cannot search, or the file itself; `None` if nothing.
pub fn unreadable_part(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mut above: Vec<&Path> = real.ancestors().skip(1).collect();
    above.reverse();
    if let Some(blocking) =
        above.into_iter().find(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
    {
        return Some(blocking.to_path_buf());
    }
    (!readable_by_others(&real)).then_some(real)
}

/// The refusal of an agent's program its uid cannot read, naming what blocks it and the fixes.
pub fn unreadable_message(what: &Path, blocking: &Path) -> String {
    let first = super::uids::FIRST;
    let last = first + super::uids::COUNT - 1;
    format!(
        "{} cannot be read by the agents' users: {} is not open to others (as root, agenteval runs each agent as a uid of its own, {first}-{last}, never as root); make it readable (chmod o+rX {}) or name a program others can read (/usr/bin/python3, say)",
        what.display(),
        blocking.display(),
        blocking.display()
    )
}

/// Whether a program running as `uid` can read `path`: every folder above it searchable and the
/// file itself readable by "others" (the agent shares no group with the worker). Used to say
/// plainly, before a task starts, that the agent could not open its own program.
pub fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(real) = path.canonicalize() else { return false };
    let Ok(m) = std::fs::metadata(&real) else { return false };
    let want = if m.is_dir() { 0o005 } else { 0o004 };
    m.permissions().mode() & want == want
        && real.ancestors().skip(1).all(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// Gives `folders` (recursively, links not followed) to `uid`, then becomes `uid` with no
/// supplementary groups. From root this also clears every capability.
pub fn become_user(uid: u32, folders: &[PathBuf]) -> Result<(), ConfineError> {
    use nix::unistd::{Gid, Uid};
    fn give(path: &Path, uid: u32) -> std::io::Result<()> {
        std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
        if std::fs::symlink_metadata(path)?.is_dir() {
            for e in std::fs::read_dir(path)? {
                give(&e?.path(), uid)?;
            }
        }
        Ok(())
    }
    for f in folders {
        give(f, uid).map_err(|e| format!("cannot give {} to uid {uid}: {e}", f.display()))?;
    }
    nix::unistd::setgroups(&[]).map_err(|e| format!("cannot drop supplementary groups: {e}"))?;
    nix::unistd::setgid(Gid::from_raw(uid)).map_err(|e| format!("cannot become gid {uid}: {e}"))?;
    nix::unistd::setuid(Uid::from_raw(uid)).map_err(|e| format!("cannot become uid {uid}: {e}"))?;
    Ok(())
}

/// Caps every file this process and its children write at `max` bytes: a write past it fails,
/// and the writer is killed by `SIGXFSZ` unless it handles it.
pub fn limit_file_size(max: u64) -> Result<(), ConfineError> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    // Never above what this process already has: raising a hard limit needs a capability.
    let (_, hard) = getrlimit(Resource::RLIMIT_FSIZE).map_err(|e| format!("cannot read the file size cap: {e}"))?;
    let max = max.min(hard);
    Ok(setrlimit(Resource::RLIMIT_FSIZE, max, max).map_err(|e| format!("cannot cap file sizes: {e}"))?)
}

/// Drops every capability this process has or could regain: as root, the bounding set is
/// emptied first, so that the program it becomes starts with none either (root then keeps only
/// an owner's rights over root's files). Without capabilities, nothing to do but the ambient set.
pub fn drop_capabilities() -> Result<(), ConfineError> {
    use caps::CapSet;
    let clear = |set: CapSet| caps::clear(None, set).map_err(|e| format!("cannot drop capabilities ({set:?}): {e}"));
    clear(CapSet::Ambient)?;
    if caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false) {
        clear(CapSet::Bounding)?;
    }
    clear(CapSet::Inheritable)?;
    clear(CapSet::Effective)?;
    Ok(clear(CapSet::Permitted)?)
}

/// No privileges to gain through exec (set-uid programs, file capabilities), and no ambient
/// capabilities inherited by what the program starts.
pub fn no_new_privileges() -> Result<(), ConfineError> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("cannot set no_new_privs: {e}"))?;
    Ok(())
}

#[cfg(target_os = "linux")]
mod filter {
    use std::collections::BTreeMap;

    use nix::libc;

    use super::ConfineError;
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };

    fn arch() -> Result<seccompiler::TargetArch, ConfineError> {
        std::env::consts::ARCH.try_into().map_err(|e| ConfineError(format!("seccomp: {e:?}")))
    }

    fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, ConfineError> {
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch()?)
            .map_err(|e| format!("seccomp: {e}"))?;
        filter.try_into().map_err(|e: seccompiler::BackendError| ConfineError(format!("seccomp: {e}")))
    }

    fn when(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompRule, ConfineError> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| ConfineError(format!("seccomp: {e}")))
    }

    /// Installs the filter that keeps this process and everything it starts from tracing any
    /// other process: `ptrace`, `process_vm_readv`/`process_vm_writev`, `pidfd_getfd` and
    /// `kcmp` fail with `EPERM`. Needs `no_new_privs` (set first by [`super::no_tracing`]).
    pub fn install_no_tracing() -> Result<(), ConfineError> {
        let deny: BTreeMap<i64, Vec<SeccompRule>> = [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_pidfd_getfd,
            libc::SYS_kcmp,
        ]
        .into_iter()
        .map(|n| (n, vec![]))
        .collect();
        seccompiler::apply_filter(&compile(deny, libc::EPERM)?).map_err(|e| ConfineError(format!("seccomp: {e}")))
    }

    /// Installs the filters: with `no_processes`, `fork`, `vfork` and a `clone` that is not a
    /// thread fail with `EPERM` (`clone3`, whose flags a filter cannot read, fails with `ENOSYS`
    /// so that the C library falls back to `clone` for threads); with `no_ip`, an `AF_INET` or
    /// `AF_INET6` socket fails with `EPERM`. Filters survive exec and bind every descendant.
    pub fn install(no_processes: bool, no_ip: bool) -> Result<(), ConfineError> {
        let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        if no_processes {
            #[cfg(target_arch = "x86_64")]
            {
                deny.insert(libc::SYS_fork, vec![]);
                deny.insert(libc::SYS_vfork, vec![]);
            }
            let thread = libc::CLONE_THREAD as u64;
            deny.insert(libc::SYS_clone, vec![when(0, SeccompCmpOp::MaskedEq(thread), 0)?]);
        }
        if no_ip {
            deny.insert(
                libc::SYS_socket,
                vec![
                    when(0, SeccompCmpOp::Eq, libc::AF_INET as u64)?,
                    when(0, SeccompCmpOp::Eq, libc::AF_INET6 as u64)?,
                ],
            );
        }
        if deny.is_empty() {
            return Ok(());
        }
        let apply = |p: &BpfProgram| seccompiler::apply_filter(p).map_err(|e| format!("seccomp: {e}"));
        apply(&compile(deny, libc::EPERM)?)?;
        if no_processes {
            apply(&compile(BTreeMap::from([(libc::SYS_clone3, vec![])]), libc::ENOSYS)?)?;
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod filter {
    use super::ConfineError;

    pub fn install(_no_processes: bool, _no_ip: bool) -> Result<(), ConfineError> {
        Ok(())
    }

    pub fn install_no_tracing() -> Result<(), ConfineError> {
        Ok(())
    }
}

pub use filter::install as install_filters;

/// Keeps this process and everything it starts from tracing another process (`ptrace`,
/// `process_vm_*`, `pidfd_getfd`, `kcmp`): `no_new_privs`, then a seccomp filter, which every
/// descendant inherits and none can lift. For a fleet's environment, whose container's own
/// seccomp profile agenteval cannot choose.
pub fn no_tracing() -> Result<(), ConfineError> {
    no_new_privileges()?;
    filter::install_no_tracing()
}

/// Keeps an agent's command, and all it starts, from the memory, variables and files of every
/// process it did not start (`/proc/PID/mem`, `environ`, `root`; `ptrace`): drops `CAP_MKNOD`,
/// which no agent needs and every other process of its environment keeps, from each of its sets.
/// The kernel lets a process reach another's only when the other's capabilities are a subset of
/// its own. The bounding set goes first, so a program it runs as root does not regain it.
pub fn drop_reach() -> Result<(), ConfineError> {
    use caps::{CapSet, Capability::CAP_MKNOD};
    if let Err(e) = caps::drop(None, CapSet::Bounding, CAP_MKNOD)
        && nix::unistd::getuid().is_root()
    {
        return Err(ConfineError(format!("cannot drop CAP_MKNOD from the bounding set: {e}")));
    }
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::drop(None, set, CAP_MKNOD).map_err(|e| format!("cannot drop CAP_MKNOD ({set:?}): {e}"))?;
    }
    Ok(())
}

/// The TCP ports a `command` agent reaches by default: HTTPS, and the port of the proxy the
/// worker's environment names, if any (model APIs behind a corporate proxy).
pub fn default_ports() -> Vec<u16> {
    let mut ports = vec![443];
    for var in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        if let Some(port) = std::env::var(var).ok().as_deref().and_then(proxy_port) {
            ports.push(port);
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The port of a proxy URL (`http://proxy:3128`, `proxy.corp:8080`), its scheme's default if none.
fn proxy_port(url: &str) -> Option<u16> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split('/').next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match host.rsplit_once(':') {
        Some((h, port)) if !h.ends_with(']') || host.starts_with('[') => port.parse().ok(),
        _ => Some(if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_port_is_read_from_its_url() {
        assert_eq!(proxy_port("http://proxy.corp:3128"), Some(3128));
        assert_eq!(proxy_port("http://user:pw@proxy:8080/"), Some(8080));
        assert_eq!(proxy_port("https://proxy"), Some(443));
        assert_eq!(proxy_port("proxy:9000"), Some(9000));
        assert_eq!(proxy_port("http://[::1]:3129"), Some(3129));
    }

    #[test]
    fn readable_by_others_needs_every_folder_above_searchable() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("agent.py");
        std::fs::write(&f, b"").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let tmp_ok = readable_by_others(dir.path().parent().unwrap());
        assert!(!readable_by_others(&f), "a 0700 folder above hides it");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(readable_by_others(&f), tmp_ok);
    }
}
