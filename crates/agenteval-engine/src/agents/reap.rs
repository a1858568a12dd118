//! Ending an agent's whole process tree when its task ends: its process group, and every
//! descendant that left the group (`setsid`, `setpgid`) or was orphaned on the way.
//!
//! A worker process calls [`own_descendants`] once: it becomes a child subreaper, so an orphan
//! of the agent is re-parented to the worker instead of init, and after each task every
//! descendant of the worker is killed (a worker runs one task at a time, so all of them belong
//! to the task that ended). Elsewhere (tests, other embedders) only the agent's own tree is swept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

static OWNS_DESCENDANTS: AtomicBool = AtomicBool::new(false);

/// Makes this process the reaper of every process its agents leave behind. Call it only in a
/// process whose children are all agents (the worker).
pub fn own_descendants() {
    #[cfg(target_os = "linux")]
    if nix::sys::prctl::set_child_subreaper(true).is_ok() {
        OWNS_DESCENDANTS.store(true, Ordering::SeqCst);
    }
}

/// Parent of every live process, from `/proc/<pid>/stat`.
fn parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return map };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split after the last `)`.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        if state == Some("Z") || state == Some("X") {
            continue;
        }
        if let Some(ppid) = fields.next().and_then(|p| p.parse().ok()) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Every live descendant of `root`, not `root` itself.
pub fn descendants(root: i32) -> Vec<i32> {
    let parents = parents();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &ppid) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            out.extend(kids);
            stack.extend(kids);
        }
    }
    out
}

/// Kills the agent `agent` started as the leader of its own process group, its group, and every
/// process descended from it; in a worker, every descendant of the worker as well. Orphans the
/// worker inherited are reaped; the agent itself is left for its owner to wait for.
pub fn kill_tree(agent: i32) {
    let me = std::process::id() as i32;
    let owns = OWNS_DESCENDANTS.load(Ordering::SeqCst);
    // The tree is read before anything is killed: once the agent dies, a child that left its
    // group is re-parented (to this process only if it is a subreaper) and can no longer be
    // traced back to the agent.
    let before = descendants(agent);
    let _ = killpg(Pid::from_raw(agent), Signal::SIGKILL);
    for &pid in &before {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    // A process may fork while it is being killed: sweep until a pass finds nothing.
    for _ in 0..20 {
        let mut found = descendants(agent);
        if owns {
            found.extend(descendants(me).into_iter().filter(|&p| p != agent));
        }
        if found.is_empty() {
            break;
        }
        for &pid in &found {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if owns {
            reap_orphans(&found, agent);
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Waits (briefly) for the killed processes that became this process's children.
fn reap_orphans(killed: &[i32], agent: i32) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut pending: Vec<i32> = killed.iter().copied().filter(|&p| p != agent).collect();
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(|&pid| match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) => true,
            // Exited, or not our child (a grandchild whose parent reaps it): done either way.
            _ => false,
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt as _;

    use super::*;

    #[test]
    fn a_setsid_grandchild_is_found_and_killed() {
        // sh starts a grandchild in its own session, prints its pid and waits.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 300 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !descendants(child.id() as i32).contains(&grandchild) {
            assert!(Instant::now() < deadline, "grandchild {grandchild} never showed up under {}", child.id());
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_tree(child.id() as i32);
        child.wait().unwrap();
        let alive = || {
            std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive() {
            assert!(Instant::now() < deadline, "the setsid grandchild {grandchild} outlived kill_tree");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
