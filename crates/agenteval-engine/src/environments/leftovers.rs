//! What the agent left running, held still while a task's tests run under Harbor's rules: every
//! process but the servers the tests may need is stopped (SIGSTOP) before the tests start, so
//! nothing of the agent's can write the reward; what had to keep running is named.
//!
//! Harbor's rules let the agent's processes outlive it (a task may ask the agent to start a
//! service the tests then call), so they cannot simply be killed as agenteval's strict rules do.
//! The rule here: a process that holds a listening socket (TCP, UDP or a Unix socket that
//! accepts) keeps running, every other one is stopped. A pass while any agent process ran is
//! counted apart (`suspect`), naming the processes, since one of them could have written the
//! reward; a stopped process that something woke while the tests ran is named too.
//!
//! The script runs as root inside the environment with only the shell's builtins while it stops
//! processes (a command substitution would fork a child the loop could stop and then wait on; its
//! own `sleep` between passes is its child, which the loop skips), and stops everything at once
//! first (`kill -STOP -1`) where it runs in a process namespace of its own (a container: its
//! parent is outside, pid 0). A signalled process stops when it next runs, which on a loaded
//! machine can take a while: the loop looks again every 50 ms, for up to 2 s, before it names one
//! still running.

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
    /// Kept running (a listening socket) or not stoppable: (pid, command line).
    pub running: Vec<(u32, String)>,
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

/// Stops every process of the environment but PID 1, this script and its ancestors, and those
/// that ran before the agent did (`$KEEP`: the image's own services); then lets the listeners go
/// on. Prints `frozen PID CMD` and `running PID CMD` lines.
const HOLD: &str = r#"
me=$$
keep=" 1 $me $KEEP "
p=$me
while [ "$p" -gt 1 ] 2>/dev/null; do
  read -r line < /proc/$p/stat || break
  rest=${line##*) }
  set -- $rest
  p=$2
  keep="$keep$p "
done
case "$keep" in *" 0 "*)
  kill -s STOP -1 2>/dev/null
  for a in $keep; do [ "$a" -gt 1 ] 2>/dev/null && kill -s CONT $a 2>/dev/null; done ;;
esac
pass=0
while [ $pass -lt 40 ]; do
  pass=$((pass + 1))
  moving=0
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case "$keep" in *" $pid "*) continue ;; esac
    read -r line < $d/stat 2>/dev/null || continue
    rest=${line##*) }
    set -- $rest
    case "$1" in T|t|Z|X|x) continue ;; esac
    [ "$2" = "$me" ] && continue
    kill -s STOP $pid 2>/dev/null
    moving=1
  done
  [ $moving = 0 ] && break
  sleep 0.05 2>/dev/null
done
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
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  case "$keep" in *" $pid "*) continue ;; esac
  read -r line < $d/stat 2>/dev/null || continue
  rest=${line##*) }
  set -- $rest
  [ "$2" = "$me" ] && continue
  case "$1" in Z|X|x) continue ;; esac
  comm=${line#*(}
  comm=${comm%)*}
  cmd=$(tr '\000' ' ' < $d/cmdline 2>/dev/null | cut -c1-120)
  [ -n "$cmd" ] || cmd="[$comm]"
  listens=0
  for fd in $d/fd/*; do
    l=$(readlink "$fd" 2>/dev/null) || continue
    case "$l" in "socket:["*) i=${l#socket:[}; i=${i%]}; case "$socks" in *" $i "*) listens=1; break ;; esac ;; esac
  done
  if [ $listens = 1 ]; then
    kill -s CONT $pid 2>/dev/null
    echo "running $pid $cmd"
  else
    case "$1" in T|t) echo "frozen $pid $cmd" ;; *) echo "running $pid $cmd" ;; esac
  fi
done
echo "held $DONE"
"#;

fn req(cmd: String) -> ExecRequest {
    ExecRequest { user: Some("0".into()), ..ExecRequest::new(cmd, Duration::from_secs(60)) }
}

/// Holds the agent's leftover processes still for the tests. `Ok(None)`: this environment's
/// processes do not outlive the agent (a workspace's die with its process tree). `Err`: they
/// could not be held (the script did not run to its end), said why: the grade is then in doubt.
pub async fn hold(s: &EnvSession) -> agenteval_core::Result<Option<Held>> {
    if !s.env.leftovers_outlive_agent(&s.handle) {
        return Ok(None);
    }
    let before: Vec<String> = s.env.processes_before_agent(&s.handle).iter().map(u32::to_string).collect();
    let done = uuid::Uuid::now_v7().simple().to_string();
    let mut r = req(HOLD.to_string());
    r.env.insert("KEEP".into(), before.join(" "));
    r.env.insert("DONE".into(), done.clone());
    let out = s.env.exec(&s.handle, &r).await?;
    if !out.stdout.lines().any(|l| l == format!("held {done}")) {
        let said = out.stderr.trim().chars().take(200).collect::<String>();
        return Err(agenteval_core::Error::new(
            agenteval_core::ErrorKind::Io,
            format!("the script that holds them did not finish ({said})"),
        ));
    }
    Ok(Some(parse(&out.stdout)))
}

fn parse(stdout: &str) -> Held {
    let mut held = Held::default();
    for l in stdout.lines() {
        let mut parts = l.splitn(3, ' ');
        let (Some(what), Some(pid), cmd) = (parts.next(), parts.next(), parts.next().unwrap_or("").trim()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let entry = (pid, cmd.to_string());
        match what {
            "frozen" => held.frozen.push(entry),
            "running" => held.running.push(entry),
            _ => {}
        }
    }
    held
}

/// After the tests: the frozen processes something woke while they ran (a running one's signal).
pub async fn woken(s: &EnvSession, held: &Held) -> Vec<(u32, String)> {
    if held.frozen.is_empty() {
        return vec![];
    }
    let pids: Vec<String> = held.frozen.iter().map(|(p, _)| p.to_string()).collect();
    let cmd = format!(
        "for p in {}; do read -r line < /proc/$p/stat 2>/dev/null || continue; rest=${{line##*) }}; set -- $rest; case \"$1\" in T|t|Z|X|x) ;; *) echo $p ;; esac; done",
        pids.join(" ")
    );
    let Ok(out) = s.env.exec(&s.handle, &req(cmd)).await else { return vec![] };
    let awake: Vec<u32> = out.stdout.lines().filter_map(|l| l.trim().parse().ok()).collect();
    held.frozen.iter().filter(|(p, _)| awake.contains(p)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_lines_are_read_and_anything_else_is_skipped() {
        let h = parse("frozen 12 bash -c while true\nrunning 7 python3 /app/serve.py\nnoise\nfrozen x y\n");
        assert_eq!(h.frozen, vec![(12, "bash -c while true".to_string())]);
        assert_eq!(h.running, vec![(7, "python3 /app/serve.py".to_string())]);
        assert_eq!(Held::names(&h.running), "python3 /app/serve.py (pid 7)");
    }

    #[test]
    fn the_hold_script_is_valid_posix_shell() {
        let out = std::process::Command::new("sh").args(["-n", "-c", HOLD]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
