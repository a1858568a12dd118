//! What the agent left running, held still before anything of its work is read under Harbor's
//! rules: every process but the image's own and the servers the tests may need is stopped
//! (SIGSTOP) when the agent ends, before its patch, the change report and the tamper audit are
//! taken, and stays stopped until the tests' reward is read; what had to keep running is named.
//!
//! Harbor's rules let the agent's processes outlive it (a task may ask the agent to start a
//! service the tests then call), so they cannot simply be killed as agenteval's strict rules do.
//! The rule here: a process that holds a listening socket (TCP, UDP or a Unix socket that
//! accepts) keeps running, every other one is stopped. The image's own processes are those the
//! environment had when it was first prepared, each by pid *and* start time (a pid given again
//! is another process); agenteval's keep-alive is not one of them and is held with the rest. A
//! pass while any agent process ran is counted apart (`suspect`), naming the processes, since
//! one of them could have written the reward; so is a held process that ran at all while held:
//! each one's CPU time and context switches are read when it is stopped and again after the
//! reward is read, and a process that woke itself (a timer that sends it SIGCONT) and stopped
//! itself again is seen by what it spent.
//!
//! Where the environment can (a container whose cgroups this machine may write), every process
//! but its first and the image's own is first frozen as one group by the cgroup freezer, before
//! any script runs: no signal undoes that, so nothing of the agent's runs between the hold and the
//! reward (a timer's SIGCONT, or the kernel's SIGCONT to a process group it orphans, does
//! nothing); the servers found then are let out of the group. Elsewhere (the fleet, a remote
//! engine) the hold is by signals alone, and what a held process spent says whether it ran.
//!
//! The script runs as root inside the environment with only bash's builtins while it stops
//! processes and reads them (a program of the image's it ran could start something after the
//! last pass; its wait between passes is a read with a timeout), and stops everything at once
//! first (`kill -STOP -1`) where it runs in a process namespace of its own (a container: its
//! parent is outside, pid 0). A signalled process stops when it next runs, which on a loaded
//! machine can take a while (one waiting on a busy disk does not stop until the wait ends): the
//! loop looks again every 50 ms, for up to 10 s, before it names one still running. The one
//! program it runs, `readlink` (a process's sockets), runs after every process is stopped, and a
//! last pass stops and names anything that started since.

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use agenteval_core::environment::ExecRequest;
use agenteval_core::traits::EnvSession;

/// Lets every held process go on (a task told in steps: the next step's agent finds what the
/// last one left running, as under Harbor). A continue signal to a running process does nothing.
pub const RESUME: &str = "kill -s CONT -1 2>/dev/null; true";

/// The agent's processes as the tests found them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Held {
    /// Stopped for the tests: (pid, command line).
    pub frozen: Vec<(u32, String)>,
    /// Kept running (a listening socket), not stoppable, or started while the hold ran:
    /// (pid, command line).
    pub running: Vec<(u32, String)>,
    /// What each stopped process had spent when it was stopped (`TICKS:SWITCHES`).
    pub spent: BTreeMap<u32, String>,
    /// The agent's processes were frozen as one group before anything was read (the cgroup
    /// freezer, which no signal undoes), not held by their stop signal alone.
    pub group: bool,
    /// Of `running`, those that hold a listening socket (the servers).
    pub listening: Vec<u32>,
    /// Of `running`, those watched from the environment's host while they ran: each change they
    /// made to a file is known ([`watched_changes`]), so one that made none is not named.
    pub watched: Vec<u32>,
}

impl Held {
    /// The processes named in a line: `python3 /app/serve.py (pid 12), sleep 100 (pid 14)`.
    pub fn names(list: &[(u32, String)]) -> String {
        let mut out: Vec<String> = list.iter().take(8).map(|(p, c)| format!("{c} (pid {p})")).collect();
        if list.len() > 8 {
            out.push(format!("and {} more", list.len() - 8));
        }
        out.join(", ")
    }
}

/// Reads what the process at `$1` (`/proc/PID`) has spent, into `$spent`: its user and system CPU
/// ticks and its context switches. A stopped process spends nothing.
const SPENT: &str = r#"spent_of() {
  local dir=$1 line rest k v sw=0
  read -r line 2>/dev/null < $dir/stat || { spent=gone; return; }
  rest=${line##*) }
  set -- $rest
  while read -r k v; do
    case $k in voluntary_ctxt_switches:|nonvoluntary_ctxt_switches:) sw=$((sw + v)) ;; esac
  done 2>/dev/null < $dir/status
  spent="$(( ${12} + ${13} )):$sw"
}
"#;

/// Stops every process of the environment but PID 1, this script and its ancestors, and the
/// image's own that are still the processes seen then (`$KEEP`: `PID:START` words); then lets
/// the listeners go on. Prints `frozen PID SPENT CMD`, `server PID CMD` (it listens), `running
/// PID CMD` (it could not be stopped) and `late PID CMD` lines.
const HOLD: &str = r#"
me=$$
keep=" 1 $me "
p=$me
while [ "$p" -gt 1 ] 2>/dev/null; do
  read -r line 2>/dev/null < /proc/$p/stat || break
  rest=${line##*) }
  set -- $rest
  p=$2
  keep="$keep$p "
done
for m in $KEEP; do
  pid=${m%%:*}
  read -r line 2>/dev/null < /proc/$pid/stat || continue
  rest=${line##*) }
  set -- $rest
  [ "${20}" = "${m#*:}" ] && keep="$keep$pid "
done
frozen=" $FROZEN "
for f in $FROZEN; do kill -s STOP $f 2>/dev/null; done
# In the frozen group (the freezer's cgroup, named by agenteval): held, whether or not the list
# above names it.
in_group() {
  local l
  while read -r l; do case "$l" in *agenteval-held*) return 0 ;; esac; done 2>/dev/null < /proc/$1/cgroup
  return 1
}
case "$keep" in *" 0 "*)
  kill -s STOP -1 2>/dev/null
  for a in $keep; do [ "$a" -gt 1 ] 2>/dev/null && kill -s CONT $a 2>/dev/null; done ;;
esac
exec {nap}<> <(:)
stop_all() {
  pass=0
  while [ $pass -lt 200 ]; do
    pass=$((pass + 1))
    moving=0
    for d in /proc/[0-9]*; do
      pid=${d#/proc/}
      case "$keep$frozen" in *" $pid "*) continue ;; esac
      [ -n "$GROUP" ] && in_group $pid && continue
      read -r line 2>/dev/null < $d/stat || continue
      rest=${line##*) }
      set -- $rest
      case "$1" in T|t|Z|X|x) continue ;; esac
      [ "$2" = "$me" ] && continue
      kill -s STOP $pid 2>/dev/null
      moving=1
    done
    [ $moving = 0 ] && break
    read -t 0.05 -u $nap 2>/dev/null
  done
}
cmd_of() {
  local a=()
  mapfile -d '' -t a 2>/dev/null < $1/cmdline
  cmd="${a[*]}"
  cmd=${cmd:0:120}
  [ -n "$cmd" ] || cmd="[$2]"
}
stop_all
socks=" "
for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do
  [ -r $f ] || continue
  while read -r sl local rem st a b c d e inode rest; do
    case "$f:$st" in */tcp*:0A|*/udp*:07) socks="$socks$inode " ;; esac
  done < $f
done
if [ -r /proc/net/unix ]; then
  while read -r num ref proto flags type st inode rest; do
    [ "$flags" = 00010000 ] && socks="$socks$inode "
  done < /proc/net/unix
fi
listening=" "
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  case "$keep" in *" $pid "*) continue ;; esac
  read -r line 2>/dev/null < $d/stat || continue
  rest=${line##*) }
  set -- $rest
  [ "$2" = "$me" ] && continue
  case "$1" in Z|X|x) continue ;; esac
  for fd in $d/fd/*; do
    l=$(readlink "$fd" 2>/dev/null) || continue
    case "$l" in "socket:["*) i=${l#socket:[}; i=${i%]}; case "$socks" in *" $i "*) listening="$listening$pid "; break ;; esac ;; esac
  done
done
before=" "
for d in /proc/[0-9]*; do before="$before${d#/proc/} "; done
stop_all
"#;

/// The report, once every process is stopped: the listeners let go on, what each stopped one has
/// spent, and anything the last pass had to stop (started while the hold ran). A process shows
/// as stopped a moment before it is switched out (which counts as one more switch), longer on a
/// busy machine, where it may wait its turn on the run queue for longer than any fixed pause: the
/// report reads the stopped processes' counts every tenth of a second until two reads agree and
/// every stopped process is off the run queue (its `wchan` is named: the kernel names it only
/// for a task that is not queued to run), for at most 10 s, so that what it keeps is what a
/// process that stays stopped keeps. Where the kernel names no `wchan` at all, two reads that
/// agree after a second do. One that wakes itself keeps moving and is caught after the tests
/// all the same.
const REPORT: &str = r#"
settled=""
n=0
named=0
while [ $n -lt 100 ]; do
  read -t 0.1 -u $nap 2>/dev/null
  now=""
  queued=0
  for d in /proc/[0-9]*; do
    read -r line 2>/dev/null < $d/stat || continue
    rest=${line##*) }
    set -- $rest
    case "$1" in
      T|t)
        w=0
        read -r w 2>/dev/null < $d/wchan
        if [ "$w" = 0 ]; then queued=1; else named=1; fi
        spent_of $d
        now="$now ${d#/proc/}:$spent" ;;
    esac
  done
  if [ "$now" = "$settled" ]; then
    [ $queued = 0 ] && break
    [ $named = 0 ] && [ $n -ge 10 ] && break
  fi
  settled=$now
  n=$((n + 1))
done
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  case "$keep" in *" $pid "*) continue ;; esac
  read -r line 2>/dev/null < $d/stat || continue
  comm=${line#*(}
  comm=${comm%)*}
  rest=${line##*) }
  set -- $rest
  [ "$2" = "$me" ] && continue
  case "$1" in Z|X|x) continue ;; esac
  cmd_of $d "$comm"
  case "$listening" in *" $pid "*)
    # Left stopped where the environment lets it go itself, watched (`$SERVERS_STOPPED`).
    [ -z "$SERVERS_STOPPED" ] && kill -s CONT $pid 2>/dev/null
    echo "server $pid $cmd"; continue ;;
  esac
  case "$frozen" in *" $pid "*) spent_of $d; echo "frozen $pid $spent $cmd"; continue ;; esac
  if [ -n "$GROUP" ] && in_group $pid; then spent_of $d; echo "frozen $pid $spent $cmd"; continue; fi
  case "$before" in *" $pid "*) ;; *) echo "late $pid $cmd"; continue ;; esac
  case "$1" in
    T|t) spent_of $d; echo "frozen $pid $spent $cmd" ;;
    *) echo "running $pid $cmd" ;;
  esac
done
echo "held $DONE"
"#;

/// After the tests: which of the stopped processes ran while held (`$SPENT`: `PID:TICKS:SWITCHES`
/// words): one not stopped now (`$GROUP`: frozen as a group, which shows as `D`), or that spent
/// anything since.
const WOKEN: &str = r#"
for w in $SPENT; do
  pid=${w%%:*}
  d=/proc/$pid
  read -r line 2>/dev/null < $d/stat || continue
  rest=${line##*) }
  set -- $rest
  case "$1" in Z|X|x) continue ;; esac
  spent_of $d
  state=$1
  # A process in a frozen group sleeps in the freezer (`D` under v1, `S` under v2) until it is
  # thawed: what it spent says whether it ran.
  [ -n "$GROUP" ] && case "$state" in D|S) state=T ;; esac
  was=${w#*:}
  # In a frozen group a signal (a timer's, the hold's own) wakes a process only to send it back
  # into the freezer: a context switch, no code of its own. There only CPU time says it ran.
  if [ -n "$GROUP" ]; then spent=${spent%%:*}:0; was=${was%%:*}:0; fi
  # Ran: it spent more CPU or was switched in more often (a count that could not be read, or
  # reads lower, says nothing).
  case "$state" in
    T|t) if [ "${spent%%:*}" -gt "${was%%:*}" ] 2>/dev/null || [ "${spent#*:}" -gt "${was#*:}" ] 2>/dev/null; then
           echo "$pid ran while held (ticks:switches $was then $spent)"
         fi ;;
    *) echo "$pid not stopped ($1)" ;;
  esac
done
"#;

/// The holds in force, by environment: taken when the agent ends (the capture stage), read by
/// the tests' grading, let go between a task's steps and when its turn ends.
static HOLDS: LazyLock<Mutex<HashMap<String, std::result::Result<Held, String>>>> = LazyLock::new(Default::default);

fn req(cmd: String) -> ExecRequest {
    ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(60)) }.as_grader()
}

/// Holds the agent's leftover processes still, once per turn: the first call stops them, a later
/// one (the tests' grading, after the capture stage held them) finds them held. `Ok(None)`: this
/// environment's processes do not outlive the agent (a workspace's die with its process tree).
/// `Err`: they could not be held (the script did not run to its end), said why: the grade is
/// then in doubt.
pub async fn hold(s: &EnvSession) -> agenteval_core::Result<Option<Held>> {
    if !s.env.leftovers_outlive_agent(&s.handle) {
        return Ok(None);
    }
    let held = HOLDS.lock().expect("not poisoned").get(&s.handle.id).cloned();
    let held = match held {
        Some(h) => h,
        None => {
            let h = hold_now(s).await.map_err(|e| e.to_string());
            HOLDS.lock().expect("not poisoned").insert(s.handle.id.clone(), h.clone());
            h
        }
    };
    held.map(Some).map_err(|why| agenteval_core::Error::new(agenteval_core::ErrorKind::Io, why))
}

/// Forgets the environment's hold and thaws its frozen group (its processes are let go by
/// [`RESUME`], or the environment is torn down).
pub async fn forget(s: &EnvSession) {
    // A hold that failed may have frozen the group all the same.
    if HOLDS.lock().expect("not poisoned").remove(&s.handle.id).is_some() {
        s.env.thaw(&s.handle).await;
    }
}

async fn hold_now(s: &EnvSession) -> agenteval_core::Result<Held> {
    let marks = s.env.processes_before_agent(&s.handle);
    let before: Vec<String> = marks.iter().map(|m| m.word()).collect();
    // Frozen as one group first, where the environment can: nothing of the agent's runs again
    // (no timer's SIGCONT, no group's orphaning) from here until the tests' reward is read.
    let frozen = s.env.freeze_all(&s.handle, &marks).await;
    let done = uuid::Uuid::now_v7().simple().to_string();
    let mut r = req(format!("{SPENT}{HOLD}{REPORT}"));
    r.env.insert("KEEP".into(), before.join(" "));
    r.env.insert("DONE".into(), done.clone());
    let words: Vec<String> = frozen.iter().flatten().map(u32::to_string).collect();
    r.env.insert("FROZEN".into(), words.join(" "));
    if frozen.is_some() {
        r.env.insert("GROUP".into(), "1".into());
    }
    // Held by signals alone where the environment lets its servers go itself: they stay
    // stopped until it has them watched.
    let by_release = frozen.is_none() && s.env.releases_servers(&s.handle);
    if by_release {
        r.env.insert("SERVERS_STOPPED".into(), "1".into());
    }
    let out = s.env.exec(&s.handle, &r).await?;
    if !out.stdout.lines().any(|l| l == format!("held {done}")) {
        let said = out.stderr.trim().chars().take(200).collect::<String>();
        return Err(agenteval_core::Error::new(
            agenteval_core::ErrorKind::Io,
            format!("the script that holds them did not finish ({said})"),
        ));
    }
    let mut held = parse(&out.stdout);
    if by_release {
        let _ = s.env.watched(&s.handle).await;
        let servers: Vec<u32> = held.listening.clone();
        held.watched = s.env.release(&s.handle, &servers).await;
    }
    if let Some(frozen) = &frozen {
        held.group = true;
        // The servers the tests may need run again, watched where the environment can; what a
        // server watched since an earlier step changed while that step's agent worked is not
        // this grade's.
        let go: Vec<u32> = held.running.iter().map(|(p, _)| *p).filter(|p| frozen.contains(p)).collect();
        if !go.is_empty() {
            let _ = s.env.watched(&s.handle).await;
            held.watched = s.env.release(&s.handle, &go).await;
        }
    }
    Ok(held)
}

fn parse(stdout: &str) -> Held {
    let mut held = Held::default();
    for l in stdout.lines() {
        let mut parts = l.splitn(3, ' ');
        let (Some(what), Some(pid), rest) = (parts.next(), parts.next(), parts.next().unwrap_or("").trim()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        match what {
            "frozen" => {
                let (spent, cmd) = rest.split_once(' ').unwrap_or((rest, ""));
                held.spent.insert(pid, spent.to_string());
                held.frozen.push((pid, cmd.trim().to_string()));
            }
            "server" => {
                held.listening.push(pid);
                held.running.push((pid, rest.to_string()))
            }
            "running" => held.running.push((pid, rest.to_string())),
            "late" => held.running.push((pid, format!("{rest} [started while the hold ran]"))),
            _ => {}
        }
    }
    held
}

/// After the tests: the stopped processes that ran while held (something woke them, or they
/// woke themselves and stopped again), by what they spent.
pub async fn woken(s: &EnvSession, held: &Held) -> Vec<(u32, String)> {
    if held.frozen.is_empty() {
        return vec![];
    }
    let spent: Vec<String> = held.spent.iter().map(|(p, w)| format!("{p}:{w}")).collect();
    let mut r = req(format!("{SPENT}{WOKEN}"));
    r.env.insert("SPENT".into(), spent.join(" "));
    if held.group {
        r.env.insert("GROUP".into(), "1".into());
    }
    let Ok(out) = s.env.exec(&s.handle, &r).await else {
        // Not knowing is not knowing that none woke.
        return held.frozen.clone();
    };
    let awake: BTreeMap<u32, String> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let (pid, why) = l.trim().split_once(' ')?;
            Some((pid.parse().ok()?, why.to_string()))
        })
        .collect();
    let named = |(p, c): &(u32, String)| awake.get(p).map(|why| (*p, format!("{c} [{why}]")));
    held.frozen.iter().filter_map(named).collect()
}

/// After the reward is read: the watched servers (and what they started) that changed a file
/// since they were let out, each named with what it changed.
pub async fn watched_changes(s: &EnvSession, held: &Held) -> Vec<(u32, String)> {
    if held.watched.is_empty() {
        return vec![];
    }
    let mut by_pid: BTreeMap<u32, (String, Vec<String>)> = BTreeMap::new();
    for (pid, cmd, what) in s.env.watched(&s.handle).await {
        by_pid.entry(pid).or_insert_with(|| (cmd, Vec::new())).1.push(what);
    }
    by_pid
        .into_iter()
        .map(|(pid, (cmd, whats))| {
            let mut said: Vec<String> = whats.iter().take(3).cloned().collect();
            if whats.len() > 3 {
                said.push(format!("and {} more", whats.len() - 3));
            }
            (pid, format!("{cmd} [changed files while the tests ran: {}]", said.join("; ")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_lines_are_read_and_anything_else_is_skipped() {
        let h = parse(
            "frozen 12 5:3 bash -c while true\nserver 7 python3 /app/serve.py\nlate 9 sh -c x\nnoise\nfrozen x y\nrunning 4 dd\n",
        );
        assert_eq!(h.listening, vec![7], "a server listens; what could not be stopped does not");
        assert_eq!(h.frozen, vec![(12, "bash -c while true".to_string())]);
        assert_eq!(h.spent.get(&12).map(String::as_str), Some("5:3"));
        assert_eq!(h.running[0], (7, "python3 /app/serve.py".to_string()));
        assert!(h.running[1].1.contains("started while the hold ran"), "{:?}", h.running);
        assert_eq!(Held::names(&h.running[..1]), "python3 /app/serve.py (pid 7)");
    }

    #[test]
    fn the_scripts_are_valid_bash() {
        for script in [format!("{SPENT}{HOLD}{REPORT}"), format!("{SPENT}{WOKEN}")] {
            let out = std::process::Command::new("bash").args(["-n", "-c", &script]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// The woken check on this machine's own processes: a stopped child that spent nothing is
    /// still held; one that ran and stopped itself again is named.
    #[test]
    fn a_process_that_ran_while_held_is_seen_by_what_it_spent() {
        use std::process::Command;
        let mut quiet = Command::new("sleep").arg("30").spawn().unwrap();
        // Stops itself at once, then wakes (a child's SIGCONT after 0.3 s), spins, stops again.
        let mut waker = Command::new("bash")
            .args(["-c", "(sleep 0.3; kill -CONT $$) & kill -STOP $$; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; kill -STOP $$"])
            .spawn()
            .unwrap();
        let (q, w) = (quiet.id(), waker.id());
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(q as i32), nix::sys::signal::Signal::SIGSTOP).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let run = |script: String, env: &[(&str, String)]| {
            let out = Command::new("bash").args(["-c", &script]).envs(env.iter().cloned()).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let spent_now =
            |pid: u32| run(format!("{SPENT}d=/proc/{pid}; spent_of $d; echo $spent"), &[]).trim().to_string();
        let spent = format!("{q}:{} {w}:{}", spent_now(q), spent_now(w));
        std::thread::sleep(Duration::from_millis(1500));
        let woke = run(format!("{SPENT}{WOKEN}"), &[("SPENT", spent)]);
        let woke: Vec<u32> = woke.lines().filter_map(|l| l.split_whitespace().next()?.parse().ok()).collect();
        for child in [&mut quiet, &mut waker] {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(woke, vec![w], "only the process that woke itself is named");
    }
}
