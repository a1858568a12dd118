//! Ending a task's whole process tree when the task ends: its process group, and every
//! descendant that left the group (`setsid`, `setpgid`) or was orphaned on the way — and only
//! that task's, however many tasks a worker runs at once.
//!
//! Each agent, check and grader starts under its own **supervisor** (the binary's hidden
//! `agent-sandbox` command, [`supervise`]): a child subreaper, so whatever the task's processes
//! orphan is re-parented to the supervisor, never to the worker or init. A task's processes are
//! therefore exactly the supervisor's descendants. The supervisor waits for its one program,
//! kills and reaps everything left below it, and exits with the program's status; a worker that
//! gives up on a task (time limit, cancel) kills the supervisor's descendants first, while the
//! supervisor is alive to adopt what the kill orphans, and the supervisor last. Why not a cgroup
//! or a PID namespace: both need privileges (a delegated cgroup, or `CAP_SYS_ADMIN` / a user
//! namespace the host may forbid) that a laptop, a CI container and Fargate do not all give; a
//! subreaper works unprivileged everywhere (`docs/security.md`).
//!
//! The worker is a subreaper too, as a second line: a process whose supervisor died before it
//! lands on the worker, where [`kill_tree`] still finds it in the snapshot it took. The worker
//! never waits for a process it did not find in the tree it is killing: its siblings' programs
//! are other tasks' children, whose exit statuses belong to them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

static OWNS_DESCENDANTS: AtomicBool = AtomicBool::new(false);

/// Makes this process non-dumpable: another process of the same user (an agent) can no longer
/// read its `/proc/PID/environ` or `mem`, nor ptrace it. A program it `exec`s is dumpable again.
pub fn close_to_same_user() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_dumpable(false);
}

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
        let Some((state, ppid)) = state_and_parent(pid) else { continue };
        if state != 'Z' && state != 'X' {
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

/// Kills the process tree rooted at `root` (a supervisor, or a program started as the leader of
/// its own process group): every descendant first, while `root` is alive to adopt and reap
/// what the kill orphans, then `root`'s group. `root` itself is left for its owner to wait for.
pub fn kill_tree(root: i32) {
    let owns = OWNS_DESCENDANTS.load(Ordering::SeqCst);
    let mut killed: Vec<i32> = Vec::new();
    // A process may fork while it is being killed: sweep until a pass finds nothing.
    for _ in 0..50 {
        let found = descendants(root);
        if found.is_empty() {
            break;
        }
        for &pid in &found {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        killed.extend(found);
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = killpg(Pid::from_raw(root), Signal::SIGKILL);
    if owns {
        // A root that was not a subreaper (or died first) left its orphans to this process.
        reap_orphans(&killed, root);
    }
}

/// Waits (briefly) for the killed processes of one tree that became this process's children;
/// a pid that is not this process's child is skipped, so a sibling task's status is never taken.
fn reap_orphans(killed: &[i32], root: i32) {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut pending: Vec<i32> = killed.iter().copied().filter(|&p| p != root).collect();
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(|&pid| {
            if parent_of(pid) != Some(me) {
                return false;
            }
            matches!(waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive))
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// The parent of `pid`, zombie or not.
fn parent_of(pid: i32) -> Option<i32> {
    state_and_parent(pid).map(|(_, ppid)| ppid)
}

/// A process's state letter and parent, from `/proc/<pid>/stat`.
fn state_and_parent(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split after the last `)`.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// The supervisor's side (the `agent-sandbox` command, before any thread exists): becomes a
/// child subreaper, starts `program`, reaps everything that lands on it, and once `program` has
/// exited kills and reaps every process left below it. A SIGTERM, SIGINT or SIGHUP does the
/// same at once. Returns the exit code to leave with: the program's, or 128 + its signal.
pub fn supervise(mut program: std::process::Command) -> u8 {
    use nix::sys::signal::SigSet;
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let mut mask = SigSet::empty();
    for s in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        mask.add(s);
    }
    // Blocked before the program starts, so no signal is lost; the standard library gives the
    // child an empty mask again.
    let _ = mask.thread_block();
    let main = match program.spawn() {
        Ok(c) => c.id() as i32,
        Err(e) => {
            eprintln!("cannot start `{}`: {e}", program.get_program().to_string_lossy());
            return 127;
        }
    };
    let mut status = None;
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid.as_raw() == main => status = Some(code.clamp(0, 255) as u8),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid.as_raw() == main => status = Some(128 + sig as u8),
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if let Some(code) = status {
            sweep();
            return code;
        }
        match mask.wait() {
            Ok(Signal::SIGCHLD) | Err(_) => {}
            Ok(sig) => {
                sweep();
                return 128 + sig as u8;
            }
        }
    }
}

/// Kills and reaps every descendant of this process (the supervisor's task tree).
fn sweep() {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = descendants(me);
        for &pid in &found {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let mut children_left = true;
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Err(_) => {
                    children_left = false;
                    break;
                }
                Ok(_) => {}
            }
        }
        if (found.is_empty() && !children_left) || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
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
