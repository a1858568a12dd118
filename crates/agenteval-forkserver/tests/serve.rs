//! The fork server end to end: this binary is both the tests and, with `--fork-server`, the
//! server they start (one thread, as in `agenteval worker --fork-server`).

use std::path::Path;
use std::time::Duration;

use agenteval_forkserver::{Error, ForkServer};

/// What a worker does here, from its arguments: print what it sees to its log, then exit.
fn stand_in(args: &[String]) -> u8 {
    match args.first().map(String::as_str) {
        Some("echo") => {
            println!("args={}", args[1..].join(" "));
            println!("env={}", std::env::var("STAND_IN_VALUE").unwrap_or_default());
            eprintln!("to stderr");
            3
        }
        Some("fds") => {
            // What every open descriptor is; the listing's own descriptor shows as the folder.
            for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
                let target = std::fs::read_link(e.path()).map(|t| t.display().to_string()).unwrap_or_default();
                println!("{} {target}", e.file_name().to_string_lossy());
            }
            0
        }
        Some("group") => {
            let pid = std::process::id() as i32;
            let group = nix::unistd::getpgrp().as_raw();
            println!("leader={}", pid == group);
            0
        }
        Some("cmdline") => {
            let cmd = std::fs::read("/proc/self/cmdline").unwrap();
            let args: Vec<String> = cmd.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            println!("{}", args.join(" ").trim_end());
            0
        }
        Some("sleep") => {
            std::thread::sleep(Duration::from_secs(args[1].parse().unwrap()));
            println!("slept");
            0
        }
        other => panic!("unknown stand-in {other:?}"),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--fork-server") {
        std::process::exit(agenteval_forkserver::serve(stand_in).into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    macro_rules! tests {
        ($($t:ident),* $(,)?) => {$(
            print!("test {} ... ", stringify!($t));
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), $t()).await.expect("timed out") });
            println!("ok");
        )*};
    }
    tests!(
        a_worker_gets_its_arguments_environment_and_log_and_its_exit_code_comes_back,
        a_worker_keeps_no_descriptor_of_the_server,
        a_worker_leads_its_own_group_and_a_signal_right_after_its_start_reaches_it,
        many_workers_at_once_each_report_their_end,
        a_log_that_cannot_be_created_is_refused,
        ps_shows_a_worker_by_its_arguments_and_the_server_without_its_room,
        a_dead_server_is_gone_and_its_running_workers_carry_on,
        a_server_that_stops_answering_is_given_up_not_waited_for,
        dropping_the_server_ends_it_and_not_its_workers,
    );
}

fn server() -> ForkServer {
    let mut cmd = tokio::process::Command::new(std::env::current_exe().unwrap());
    cmd.arg("--fork-server");
    ForkServer::launch(cmd).unwrap()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

async fn a_worker_gets_its_arguments_environment_and_log_and_its_exit_code_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    std::fs::write(&log, "an older attempt's log that is longer than the new one\n".repeat(10)).unwrap();
    let s = server();
    let w = s.start(&args(&["echo", "a", "b"]), &[("STAND_IN_VALUE".into(), "v1".into())], &log).await.unwrap();
    let st = w.wait().await.expect("an exit status");
    assert_eq!(st.code(), Some(3));
    assert_eq!(read(&log), "args=a b\nenv=v1\nto stderr\n", "stdout and stderr in a truncated log");
    // The environment of one worker is not the next one's.
    let w = s.start(&args(&["echo"]), &[], &log).await.unwrap();
    w.wait().await.unwrap();
    assert!(read(&log).contains("env=\n"), "{}", read(&log));
}

async fn a_worker_keeps_no_descriptor_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let s = server();
    assert!(s.start(&args(&["fds"]), &[], &log).await.unwrap().wait().await.unwrap().success());
    let text = read(&log);
    let fds: Vec<(&str, &str)> = text.lines().map(|l| l.split_once(' ').unwrap()).collect();
    assert!(fds.contains(&("0", "/dev/null")), "{text}");
    assert!(fds.contains(&("1", log.to_str().unwrap())) && fds.contains(&("2", log.to_str().unwrap())), "{text}");
    // Only stdin, stdout and stderr: not the server's socket and signalfd, nor what the test
    // runner passed down (an exec'd worker would inherit that); the listing's own shows as
    // the folder it lists.
    for (fd, target) in &fds {
        assert!(
            ["0", "1", "2"].contains(fd) || target.starts_with("/proc/"),
            "descriptor {fd} ({target}) leaked:\n{text}"
        );
    }
    assert_eq!(fds.len(), 4, "{text}");
}

async fn a_worker_leads_its_own_group_and_a_signal_right_after_its_start_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let s = server();
    assert!(s.start(&args(&["group"]), &[], &log).await.unwrap().wait().await.unwrap().success());
    assert_eq!(read(&log), "leader=true\n");
    let w = s.start(&args(&["sleep", "30"]), &[], &log).await.unwrap();
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(w.pid), nix::sys::signal::Signal::SIGTERM).expect("its group");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(w.wait().await.unwrap().signal(), Some(15));
}

async fn many_workers_at_once_each_report_their_end() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(server());
    let mut all = Vec::new();
    for i in 0..64 {
        let (s, log) = (s.clone(), dir.path().join(format!("{i}.log")));
        all.push(tokio::spawn(async move {
            s.start(&args(&["echo", &i.to_string()]), &[], &log).await.unwrap().wait().await
        }));
    }
    for (i, h) in all.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().unwrap().code(), Some(3));
        assert!(read(&dir.path().join(format!("{i}.log"))).starts_with(&format!("args={i}\n")));
    }
}

async fn ps_shows_a_worker_by_its_arguments_and_the_server_without_its_room() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let s = server();
    let long = "x".repeat(300);
    assert!(s.start(&args(&["cmdline", "--job", &long]), &[], &log).await.unwrap().wait().await.unwrap().success());
    let exe = std::env::current_exe().unwrap();
    assert_eq!(read(&log), format!("{} cmdline --job {long}\n", exe.display()));
    let server = std::fs::read(format!("/proc/{}/cmdline", s.pid().unwrap())).unwrap();
    let server = String::from_utf8_lossy(&server).replace('\0', " ");
    assert_eq!(server.trim_end(), format!("{} --fork-server", exe.display()));
}

async fn a_log_that_cannot_be_created_is_refused() {
    let s = server();
    let err = s.start(&args(&["echo"]), &[], Path::new("/nonexistent/w.log")).await.unwrap_err();
    assert!(matches!(&err, Error::Refused(m) if m.contains("/nonexistent/w.log")), "{err}");
    assert!(s.is_alive(), "a refused start does not end the server");
}

async fn a_dead_server_is_gone_and_its_running_workers_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let s = server();
    let w = s.start(&args(&["sleep", "1"]), &[], &log).await.unwrap();
    let pid = nix::unistd::Pid::from_raw(s.pid().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert_eq!(w.wait().await, None, "nobody is left to say how it ended");
    assert!(!s.is_alive());
    assert!(matches!(s.start(&args(&["echo"]), &[], &log).await, Err(Error::Gone)));
    wait_for(|| read(&log) == "slept\n").await;
}

async fn a_server_that_stops_answering_is_given_up_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let s = server().with_start_timeout(Duration::from_millis(500));
    let pid = s.pid().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGSTOP).unwrap();
    let err = s.start(&args(&["echo"]), &[], &log).await.unwrap_err();
    assert!(matches!(err, Error::Unresponsive(_)), "{err}");
    assert!(!s.is_alive());
    assert!(
        matches!(s.start(&args(&["echo"]), &[], &log).await, Err(Error::Gone)),
        "the next start goes elsewhere at once"
    );
    wait_for(|| !Path::new(&format!("/proc/{pid}")).exists() || proc_state(pid) == 'Z').await;
}

/// The state letter of a process (`R`, `S`, `T`, `Z`, ...).
fn proc_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()).unwrap_or('?')
}

async fn dropping_the_server_ends_it_and_not_its_workers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("w.log");
    let s = server();
    let server_pid = s.pid().unwrap();
    let w = s.start(&args(&["sleep", "1"]), &[], &log).await.unwrap();
    drop(s);
    assert_eq!(w.wait().await, None);
    wait_for(|| !Path::new(&format!("/proc/{server_pid}")).exists()).await;
    wait_for(|| read(&log) == "slept\n").await;
}

async fn wait_for(mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("condition never held");
}
