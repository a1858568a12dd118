//! The agent's held processes frozen as one group: a child cgroup of the container's own, frozen
//! with the cgroup freezer (v1's `freezer.state`, or v2's `cgroup.freeze`), which no signal
//! undoes: a held process with a timer that sends it `SIGCONT` stays frozen, where a `SIGSTOP`
//! alone would let it run between two checks.
//!
//! Done from this machine, as the engine's cgroups are laid out (`cgroupfs` or `systemd`, v1 or
//! v2): the container's cgroup is read from `/proc/PID/cgroup` of its first process, and each
//! process to hold is found among the cgroup's by its pid in the container's namespace
//! (`NSpid`). Where the worker cannot write the cgroup (not root, a remote engine, a read-only
//! cgroup file system) nothing is moved and the hold is by signals alone.
//!
//! A v1-frozen process cannot even die: the group is thawed and removed before its container is.

use std::path::{Path, PathBuf};

use agenteval_core::environment::ProcessMark;

/// The child cgroup the held processes are moved to.
const HELD: &str = "agenteval-held";

/// The container's cgroup in a hierarchy that can freeze: its folder and whether it is v1's.
fn container_cgroup(main_pid: u32) -> Option<(PathBuf, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{main_pid}/cgroup")).ok()?;
    let root = Path::new("/sys/fs/cgroup");
    let at = |base: PathBuf, path: &str| base.join(path.trim_start_matches('/'));
    // v1's freezer where it is mounted; else the unified hierarchy (v2 alone, or beside v1).
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "freezer") {
            let dir = at(root.join("freezer"), path);
            if dir.is_dir() {
                return Some((dir, true));
            }
        }
    }
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let unified = if root.join("cgroup.controllers").exists() { root.to_path_buf() } else { root.join("unified") };
    let dir = at(unified, path);
    dir.join("cgroup.freeze").exists().then_some((dir, false))
}

/// Each process of `cgroup`: (its host pid, its pid in the container's namespace, its start
/// time). A process that ended meanwhile is left out.
fn members(cgroup: &Path) -> Vec<(u32, u32, u64)> {
    let Ok(listed) = std::fs::read_to_string(cgroup.join("cgroup.procs")) else { return Vec::new() };
    listed
        .lines()
        .filter_map(|l| {
            let host = l.trim().parse::<u32>().ok()?;
            let status = std::fs::read_to_string(format!("/proc/{host}/status")).ok()?;
            let inner =
                status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{host}/stat")).ok()?;
            let (_, _, start) = agenteval_core::environment::parse_proc_stat(&stat)?;
            Some((host, inner, start))
        })
        .collect()
}

fn set_frozen(dir: &Path, v1: bool, frozen: bool) -> std::io::Result<()> {
    match (v1, frozen) {
        (true, true) => std::fs::write(dir.join("freezer.state"), "FROZEN"),
        (true, false) => std::fs::write(dir.join("freezer.state"), "THAWED"),
        (false, true) => std::fs::write(dir.join("cgroup.freeze"), "1"),
        (false, false) => std::fs::write(dir.join("cgroup.freeze"), "0"),
    }
}

/// Freezes every process of the container whose first process is `main_pid` but that first
/// process and `keep` (the image's own, each by pid and start time: a pid given again is
/// another process), as one group, before anything else is done: a process that would send
/// itself `SIGCONT` or be woken by its group's orphaning never runs again until it is let go.
/// Returns their pids as the container numbers them, once the group is frozen (or, past 10 s,
/// freezing: what is still in a system call freezes as it returns). `Err`: this machine's
/// cgroups cannot be written (the hold is then by signals alone, and nothing stays moved).
pub(crate) fn freeze_all(main_pid: u32, keep: &[ProcessMark]) -> std::io::Result<Vec<u32>> {
    let not_here = || std::io::Error::new(std::io::ErrorKind::Unsupported, "no cgroup of the container to freeze");
    let (cgroup, v1) = container_cgroup(main_pid).ok_or_else(not_here)?;
    let held = cgroup.join(HELD);
    std::fs::create_dir_all(&held)?;
    set_frozen(&held, v1, true)?;
    let kept = |inner: u32, start: u64| inner == 1 || keep.iter().any(|m| m.pid == inner && m.start == start);
    let mut moved = Vec::new();
    // A process not yet moved may fork meanwhile: its child is in the container's cgroup too,
    // and the next pass moves it. A moved one cannot fork: it is frozen.
    for _ in 0..50 {
        let left: Vec<(u32, u32)> =
            members(&cgroup).into_iter().filter(|(_, i, s)| !kept(*i, *s)).map(|(h, i, _)| (h, i)).collect();
        if left.is_empty() {
            break;
        }
        for (host, inner) in left {
            if std::fs::write(held.join("cgroup.procs"), host.to_string()).is_ok() {
                moved.push(inner);
            }
        }
    }
    // Frozen once every member is: a task mid-way through a system call takes a moment, and one
    // waiting on a busy disk until its wait ends. Such a task runs no code of its own until then,
    // and is frozen on its way back: the group is kept, never thawed for being slow.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !is_frozen(&held, v1) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Every process of the group is held, one moved there by an earlier hold not let go yet
    // among them: the hold names each as frozen, none as running.
    moved.extend(members(&held).into_iter().map(|(_, inner, _)| inner));
    moved.sort_unstable();
    moved.dedup();
    Ok(moved)
}

fn is_frozen(dir: &Path, v1: bool) -> bool {
    if v1 {
        std::fs::read_to_string(dir.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN")
    } else {
        std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|s| s.lines().any(|l| l.trim() == "frozen 1"))
    }
}

/// The processes `pids` (as the container numbers them) of the frozen group: (host pid, pid in
/// the container).
pub(crate) fn held(main_pid: u32, pids: &[u32]) -> Vec<(u32, u32)> {
    let Some((cgroup, _)) = container_cgroup(main_pid) else { return Vec::new() };
    members(&cgroup.join(HELD))
        .into_iter()
        .filter(|(_, inner, _)| pids.contains(inner))
        .map(|(h, i, _)| (h, i))
        .collect()
}

/// Lets process `host` (as this machine numbers it) out of the frozen group: a server the
/// tests may need runs again.
pub(crate) fn let_out(main_pid: u32, host: u32) {
    if let Some((cgroup, _)) = container_cgroup(main_pid) {
        let _ = std::fs::write(cgroup.join("cgroup.procs"), host.to_string());
    }
}

/// Lets the frozen group go: its processes back in the container's cgroup (still stopped by
/// the hold's signal), the group removed. Nothing to do where none was made.
pub(crate) fn thaw(main_pid: u32) {
    let Some((cgroup, v1)) = container_cgroup(main_pid) else { return };
    let held = cgroup.join(HELD);
    if !held.is_dir() {
        return;
    }
    let _ = set_frozen(&held, v1, false);
    if let Ok(listed) = std::fs::read_to_string(held.join("cgroup.procs")) {
        for host in listed.lines().filter(|l| !l.trim().is_empty()) {
            let _ = std::fs::write(cgroup.join("cgroup.procs"), host.trim());
        }
    }
    let _ = std::fs::remove_dir(&held);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_a_freezable_cgroup_is_not_frozen() {
        // No such process: no cgroup, nothing made, and thawing it is harmless.
        assert!(freeze_all(u32::MAX - 1, &[]).is_err());
        assert!(held(u32::MAX - 1, &[1]).is_empty());
        let_out(u32::MAX - 1, 1);
        thaw(u32::MAX - 1);
    }
}
