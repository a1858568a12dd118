//! `CloudBackend` that runs each job as a local worker process (`agenteval worker --job FILE`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenteval_core::layout;
use agenteval_core::model::{JobHandle, JobSpec, JobStatus};
use agenteval_core::traits::CloudBackend;
use agenteval_core::{Error, Result};
use agenteval_forkserver::{ForkServer, Worker};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::Notify;

use crate::fs_store::FsBundleStore;

/// Exit codes of `agenteval worker`, shared with the worker so both sides agree.
pub use agenteval_core::traits::worker_exit;

/// How long a cancelled worker gets to finish its current write before SIGKILL.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
enum Proc {
    Running,
    /// Started by a fork server that went away first: only its liveness can be known.
    Orphaned,
    Exited(JobStatus),
}

/// Runs jobs as child processes of the controller, each in its own process group so that a
/// cancel reaches the worker and the agent processes it started.
pub struct LocalProcessBackend {
    exe: PathBuf,
    store: FsBundleStore,
    procs: Arc<Mutex<HashMap<(String, u32), Proc>>>,
    changed: Arc<Notify>,
    /// How to start the fork server, if workers start by fork (see `agenteval-forkserver`).
    fork_server: Option<Vec<String>>,
    /// The fork server once started; `None` inside if it could not be (workers `exec`).
    forks: std::sync::OnceLock<Option<ForkServer>>,
    /// The memory (MiB) the machine keeps available (`backend.min_free_memory_mb`); `None`: a
    /// twentieth of the machine's, at least 512.
    memory_floor_mb: Option<u64>,
}

impl std::fmt::Debug for LocalProcessBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProcessBackend").field("exe", &self.exe).field("root", &self.store.root()).finish()
    }
}

impl LocalProcessBackend {
    /// `exe` is the agenteval binary that runs `worker`; `store` holds the bundles.
    pub fn new(exe: PathBuf, store: FsBundleStore) -> Self {
        LocalProcessBackend {
            exe,
            store,
            procs: Arc::new(Mutex::new(HashMap::new())),
            changed: Arc::new(Notify::new()),
            fork_server: None,
            forks: std::sync::OnceLock::new(),
            memory_floor_mb: None,
        }
    }

    /// Below `mb` of available memory, the controller is told to launch fewer workers.
    pub fn memory_floor(mut self, mb: Option<u64>) -> Self {
        self.memory_floor_mb = mb;
        self
    }

    /// Workers start by fork from one server started as `exe ARGS` (which must end in
    /// `agenteval_forkserver::serve` running `worker --job FILE`), not by `exec` each. If the
    /// server cannot start or goes away, workers start by `exec` again.
    pub fn forking(mut self, server_args: Vec<String>) -> Self {
        self.fork_server = Some(server_args);
        self
    }

    fn fork_server(&self) -> Option<&ForkServer> {
        let args = self.fork_server.as_ref()?;
        self.forks
            .get_or_init(|| {
                let mut cmd = tokio::process::Command::new(&self.exe);
                cmd.args(args);
                match ForkServer::launch(cmd) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::warn!("cannot start the fork server ({e}); workers start by exec");
                        None
                    }
                }
            })
            .as_ref()
            .filter(|s| s.is_alive())
    }

    /// Starts the worker of `job` by fork, `None` if it has to be by `exec`.
    async fn fork_worker(&self, job: &JobSpec, spec: &Path, log: &Path) -> Option<Worker> {
        let server = self.fork_server()?;
        let args = ["worker".to_string(), "--job".into(), spec.to_string_lossy().into_owned()];
        let env: Vec<(String, String)> = job.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        match server.start(&args, &env, log).await {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::debug!(job = %job.job_id, "starting the worker by exec: {e}");
                None
            }
        }
    }

    /// Records `key` running, and its status once `ended` says how it ended.
    fn watch(&self, key: (String, u32), log_path: PathBuf, ended: impl Future<Output = Proc> + Send + 'static) {
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), Proc::Running);
        let procs = self.procs.clone();
        let changed = self.changed.clone();
        tokio::spawn(async move {
            let status = match ended.await {
                Proc::Exited(st) => Proc::Exited(with_cause(st, &log_path)),
                other => other,
            };
            procs.lock().unwrap_or_else(|e| e.into_inner()).insert(key, status);
            changed.notify_one();
        });
    }

    fn key(h: &JobHandle) -> (String, u32) {
        (h.job_id.to_string(), h.attempt)
    }

    fn pid_of(h: &JobHandle) -> Option<i32> {
        h.native_id.strip_prefix("pid:").and_then(|p| p.parse().ok())
    }
}

/// Whether `pid` is a live agenteval worker (not a reused pid of some other program).
fn is_live_worker(pid: i32) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmd) => {
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.split('\0').any(|a| a == "worker")
        }
        Err(_) => false,
    }
}

fn status_from_exit(st: std::process::ExitStatus) -> JobStatus {
    use std::os::unix::process::ExitStatusExt;
    worker_exit::job_status(st.code(), None, || match st.signal().and_then(|s| Signal::try_from(s).ok()) {
        Some(s) => format!("worker killed by {s}"),
        None => "worker killed by a signal".into(),
    })
}

/// A job the worker refused names the worker's own reason: the last error its log has.
fn with_cause(status: JobStatus, log: &Path) -> JobStatus {
    match status {
        JobStatus::Failed { exit_code: Some(worker_exit::BAD_JOB), infrastructure, .. } => {
            let text = std::fs::read(log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
            let cause = text
                .lines()
                .rev()
                .find_map(|l| l.split_once(" ERROR ").map(|(_, m)| m.trim().to_string()))
                .map(|m| m.chars().take(300).collect::<String>());
            JobStatus::Failed {
                exit_code: Some(worker_exit::BAD_JOB),
                reason: match cause {
                    Some(c) => format!("worker could not run the job: {c}"),
                    None => "worker could not run the job as specified (see its log)".into(),
                },
                infrastructure,
            }
        }
        other => other,
    }
}

#[async_trait]
impl CloudBackend for LocalProcessBackend {
    fn id(&self) -> &str {
        "local"
    }

    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle> {
        let run_dir = self.store.run_dir(&job.run_id);
        let spec = run_dir.join(layout::job_spec(&job.job_id, job.attempt));
        let log_path = run_dir.join(layout::job_log(&job.job_id, job.attempt));
        if let Some(dir) = log_path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        if let Some(worker) = self.fork_worker(job, &spec, &log_path).await {
            let pid = worker.pid;
            let handle =
                JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id: format!("pid:{pid}") };
            self.watch(Self::key(&handle), log_path, async move {
                match worker.wait().await {
                    Some(st) => Proc::Exited(status_from_exit(st)),
                    None => Proc::Orphaned,
                }
            });
            return Ok(handle);
        }
        let log =
            std::fs::File::create(&log_path).map_err(|e| Error::io(format!("creating {}", log_path.display()), e))?;
        let log2 = log.try_clone().map_err(|e| Error::io("duplicating log handle", e))?;
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("worker")
            .arg("--job")
            .arg(&spec)
            .envs(&job.env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            // Its own process group: Ctrl-C in the terminal reaches the controller only, and
            // the controller decides how workers stop; cancel signals the whole group.
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| Error::io(format!("starting worker {}", self.exe.display()), e))?;
        let pid = child.id().ok_or_else(|| Error::internal("worker exited before it had a pid"))? as i32;
        let handle = JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id: format!("pid:{pid}") };
        self.watch(Self::key(&handle), log_path, async move {
            Proc::Exited(match child.wait().await {
                Ok(st) => status_from_exit(st),
                Err(e) => JobStatus::Failed {
                    exit_code: None,
                    reason: format!("lost track of worker: {e}"),
                    infrastructure: true,
                },
            })
        });
        Ok(handle)
    }

    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>> {
        let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        Ok(handles
            .iter()
            .map(|h| match procs.get(&Self::key(h)) {
                Some(Proc::Running) => JobStatus::Running,
                Some(Proc::Exited(st)) => st.clone(),
                // Started by another controller process, or by a fork server that is gone: all
                // we can tell is whether it lives.
                Some(Proc::Orphaned) | None => match Self::pid_of(h) {
                    Some(pid) if is_live_worker(pid) => JobStatus::Running,
                    _ => JobStatus::Failed {
                        exit_code: None,
                        reason: "worker process is gone".into(),
                        infrastructure: true,
                    },
                },
            })
            .collect())
    }

    async fn cancel_job(&self, handle: &JobHandle, reason: &str) -> Result<()> {
        let ours =
            matches!(self.procs.lock().unwrap_or_else(|e| e.into_inner()).get(&Self::key(handle)), Some(Proc::Running));
        let Some(pid) = Self::pid_of(handle) else {
            return Err(Error::invalid(format!("`{}` is not a local job handle", handle.native_id)));
        };
        if !ours && !is_live_worker(pid) {
            return Ok(());
        }
        tracing::debug!(job = %handle.job_id, pid, reason, "cancelling worker");
        let group = Pid::from_raw(pid);
        let _ = killpg(group, Signal::SIGTERM);
        let procs = self.procs.clone();
        let key = Self::key(handle);
        tokio::spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            let still = match procs.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
                Some(Proc::Running) => true,
                Some(Proc::Exited(_)) => false,
                Some(Proc::Orphaned) | None => is_live_worker(pid),
            };
            if still {
                let _ = killpg(group, Signal::SIGKILL);
            }
        });
        Ok(())
    }

    /// The machine's memory: every worker and its agent's containers share it, and a machine
    /// that runs out kills what runs (the kernel's OOM killer) rather than saying no.
    async fn pressure(&self) -> Option<String> {
        let (available, total) = meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)?;
        let floor = self.memory_floor_mb.unwrap_or((total / 20).max(512));
        (available < floor).then(|| {
            format!(
                "the machine has {available} MiB of memory available, under {floor} MiB (backend.min_free_memory_mb)"
            )
        })
    }

    async fn wait_for_change(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.changed.notified()).await;
    }
}

/// `MemAvailable` and `MemTotal` of `/proc/meminfo`, in MiB.
fn meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb / 1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

#[cfg(test)]
mod tests {

    #[test]
    fn meminfo_reads_available_and_total_in_mib() {
        let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:    2048000 kB\n";
        assert_eq!(super::meminfo(text), Some((2000, 24000)));
        assert_eq!(super::meminfo("MemTotal: 1 kB\n"), None);
    }

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        let exe = agenteval_testkit::conformance::stand_in_worker(dir.path());
        let store = FsBundleStore::new(dir.path().join("runs"));
        let run = agenteval_core::RunId::new();
        let uri = agenteval_core::traits::BundleStore::bundle_uri(&store, &run);
        let backend = Arc::new(LocalProcessBackend::new(exe, store));
        let platform = agenteval_testkit::conformance::Platform { reports_exit_codes: true };
        agenteval_testkit::conformance::job_backend_suite(backend, run, &uri, Duration::from_secs(30), platform).await;
    }

    #[test]
    fn exit_statuses_map_to_job_statuses() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status_from_exit(std::process::ExitStatus::from_raw(0)), JobStatus::Succeeded);
        let killed = status_from_exit(std::process::ExitStatus::from_raw(9));
        assert!(matches!(killed, JobStatus::Failed { infrastructure: true, .. }), "{killed:?}");
        let bad = status_from_exit(std::process::ExitStatus::from_raw(2 << 8));
        assert!(matches!(bad, JobStatus::Failed { infrastructure: false, .. }), "{bad:?}");
    }

    #[test]
    fn a_refused_job_names_the_workers_reason() {
        use std::os::unix::process::ExitStatusExt as _;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("worker.log");
        std::fs::write(&log, "2026-01-01T00:00:00Z  INFO job started\n2026-01-01T00:00:01Z ERROR cannot start job: secret `K` is missing\n").unwrap();
        let bad = with_cause(status_from_exit(std::process::ExitStatus::from_raw(2 << 8)), &log);
        let JobStatus::Failed { reason, .. } = bad else { panic!("{bad:?}") };
        assert_eq!(reason, "worker could not run the job: cannot start job: secret `K` is missing");
        let other = with_cause(status_from_exit(std::process::ExitStatus::from_raw(1 << 8)), &log);
        assert!(matches!(other, JobStatus::Failed { reason, .. } if reason == "worker exited with status 1"));
    }
}
