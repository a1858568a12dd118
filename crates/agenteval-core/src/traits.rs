//! The seams of agenteval: backends, stores, indexes, agents, benchmarks, evaluators, scorers.
//!
//! Every backend is used as `Arc<dyn Trait>`, opened by a [`Resolver`] from the configuration or
//! a location, so the controller and the worker never name a concrete implementation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use crate::config::{Limits, MAX_EVENT_COST_USD, MAX_EVENT_TOKENS, RunConfig, TaskFilter};
use crate::error::{Error, Result};
use crate::ids::{RunId, TaskId};
use crate::location::{BundleRoot, IndexLocation};
use crate::model::*;
use crate::secret::Secret;

/// Exit codes of the `agenteval worker` process, which every backend reads back from its jobs.
pub mod worker_exit {
    /// Every task of the job was processed (whatever the grades).
    pub const OK: i32 = 0;
    /// A store or index failure: the job cannot vouch for its results; its unfinished tasks are
    /// retried.
    pub const FAILED: i32 = 1;
    /// The job cannot be run as specified (unreadable spec, bad config): retrying won't help.
    pub const BAD_JOB: i32 = 2;
    /// The worker stopped because it was asked to (SIGTERM/SIGINT).
    pub const CANCELLED: i32 = 3;
    /// The worker finished some of its job's tasks and hands the others back unstarted: the
    /// container they would share was changed by a task beyond what it can reset. They are
    /// dispatched again without costing them an attempt.
    pub const HANDED_BACK: i32 = 5;

    /// What a stopped worker's exit says about its job: the one reading every backend shares.
    /// `detail` (the platform's stop reason) is added to an unexpected code's reason; `no_code`
    /// says why there is none (a signal, a container stopped from outside). A job that ran
    /// without an exit code or with an unexpected one failed for infrastructure reasons.
    pub fn job_status(code: Option<i32>, detail: Option<&str>, no_code: impl FnOnce() -> String) -> JobStatus {
        let with_detail = |msg: String| match detail {
            Some(d) if !d.is_empty() => format!("{msg}: {d}"),
            _ => msg,
        };
        match code {
            Some(OK) => JobStatus::Succeeded,
            Some(CANCELLED) => JobStatus::Cancelled,
            Some(HANDED_BACK) => JobStatus::Failed {
                exit_code: Some(HANDED_BACK),
                reason: "worker handed back tasks it could not run in a clean container (see its log)".into(),
                infrastructure: true,
            },
            Some(BAD_JOB) => JobStatus::Failed {
                exit_code: Some(BAD_JOB),
                reason: "worker could not run the job as specified (see its log)".into(),
                infrastructure: false,
            },
            Some(code) => JobStatus::Failed {
                exit_code: Some(code),
                reason: with_detail(format!("worker exited with status {code}")),
                infrastructure: true,
            },
            None => JobStatus::Failed { exit_code: None, reason: with_detail(no_code()), infrastructure: true },
        }
    }

    use crate::model::JobStatus;

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_exit_reads_the_same_on_every_backend() {
            assert_eq!(job_status(Some(OK), None, String::new), JobStatus::Succeeded);
            assert_eq!(job_status(Some(CANCELLED), Some("x"), String::new), JobStatus::Cancelled);
            assert!(matches!(
                job_status(Some(BAD_JOB), Some("x"), String::new),
                JobStatus::Failed { infrastructure: false, exit_code: Some(BAD_JOB), .. }
            ));
            let JobStatus::Failed { reason, infrastructure: true, .. } =
                job_status(Some(137), Some("OOM"), String::new)
            else {
                panic!()
            };
            assert_eq!(reason, "worker exited with status 137: OOM");
            let JobStatus::Failed { reason, infrastructure: true, exit_code: None } =
                job_status(None, None, || "worker killed by SIGKILL".into())
            else {
                panic!()
            };
            assert_eq!(reason, "worker killed by SIGKILL");
        }
    }
}

/// Opens the backends that a location or a run config names. The binary implements it (it is
/// the one crate that links every backend); the controller and the worker are handed one, so
/// the engine never depends on a backend crate. One resolver holds one set of cloud settings:
/// nothing is global, so two resolvers with different settings never see each other's.
#[async_trait]
pub trait Resolver: Send + Sync {
    /// The store holding the bundles under `root`.
    async fn store(&self, root: &BundleRoot) -> Result<std::sync::Arc<dyn BundleStore>>;
    /// The run index at `at`.
    /// Opens an existing index: a missing one is `NotFound`, never silently recreated.
    async fn index(&self, at: &IndexLocation) -> Result<std::sync::Arc<dyn RunIndex>>;
    /// Opens the index, creating it if it does not exist (`submit`, `index rebuild`).
    async fn create_index(&self, at: &IndexLocation) -> Result<std::sync::Arc<dyn RunIndex>>;
    /// The backend that runs the jobs of `config` (`backend.id`).
    async fn backend(&self, config: &RunConfig) -> Result<std::sync::Arc<dyn CloudBackend>>;
    /// Where the workers of `config` read their secrets (the backend's choice: the environment
    /// and a secrets file locally, Secrets Manager on AWS).
    async fn secrets(&self, config: &RunConfig) -> Result<std::sync::Arc<dyn SecretStore>>;
    /// The task environments of `kind` (`docker`; the engine has `workspace` itself), with the
    /// run's settings. The default has none: a resolver that runs no environment tasks need not
    /// know them.
    async fn environment(
        &self,
        kind: crate::config::EnvironmentKind,
        _settings: &crate::config::EnvironmentConfig,
    ) -> Result<std::sync::Arc<dyn Environment>> {
        Err(crate::Error::invalid(format!("no `{}` environments here", kind.as_str())))
    }
    /// The environments of a job whose tasks run in their own images on `config`'s backend
    /// ([`BackendKind::image_environments`]). The default has none.
    async fn image_environments(&self, config: &RunConfig) -> Result<std::sync::Arc<dyn Environment>> {
        Err(crate::Error::invalid(format!("no environments for backend `{}` here", config.backend.id)))
    }
    /// The model gateway a worker runs for agents whose calls go through one (`agent.upstream`,
    /// and the `llm` agent's model), forwarding to `upstream` with the keys fetched for it:
    /// `(endpoint, key)`. The default has none (`None`).
    async fn gateway(
        &self,
        _upstream: &crate::config::Upstream,
        _keys: Vec<(&'static str, Secret)>,
    ) -> Result<Option<std::sync::Arc<dyn crate::gateway::ModelGateway>>> {
        Ok(None)
    }
    /// The client of Amazon Bedrock a judge on `bedrock` asks (the gateway's own is made with
    /// it). The default has none.
    async fn model_host(
        &self,
        _bedrock: &crate::config::BedrockEndpoint,
    ) -> Result<std::sync::Arc<dyn crate::gateway::ModelHost>> {
        Err(crate::Error::invalid("this build cannot reach Amazon Bedrock"))
    }
    /// The image a task's environment is built as (`agenteval-env:<hash of its folder>`, the
    /// tag `docker` environments and `agenteval images build` give it), or the image it names.
    /// The default knows none.
    fn task_image(
        &self,
        spec: &crate::environment::EnvSpec,
        _settings: &crate::config::EnvironmentConfig,
    ) -> Result<String> {
        spec.image.clone().ok_or_else(|| crate::Error::invalid("this build cannot name a task's image"))
    }
}

/// Where a task's agent acts: a container, a folder. Prepared per task attempt, torn down on
/// every exit path; a handle is plain data, so another process (a resume, the next worker)
/// can tear down what a killed one left, and `sweep` finds those by run.
#[async_trait]
pub trait Environment: Send + Sync {
    /// `workspace`, `docker`.
    fn kind(&self) -> &str;
    /// Whether a task's environment is a container of its own on a task network, where the
    /// model gateway is reached at the network's host address, not on loopback.
    fn is_container(&self) -> bool {
        false
    }
    /// Makes the task's environment. An `Err` is an infrastructure failure of the task (never
    /// the agent's): its message says what failed (a Dockerfile's last build lines).
    async fn prepare(
        &self,
        run: &RunId,
        task: &TaskSpec,
        attempt: u32,
        spec: &crate::environment::EnvSpec,
    ) -> Result<crate::environment::EnvHandle>;
    /// Runs a command in it, with a timeout and bounded output. A command that fails or times
    /// out is an `Ok` output saying so; `Err` is the environment failing.
    async fn exec(
        &self,
        env: &crate::environment::EnvHandle,
        req: &crate::environment::ExecRequest,
    ) -> Result<crate::environment::ExecOutput>;
    /// Copies a host file or folder to `to` in the environment (a folder's contents go into
    /// `to`, created if missing).
    async fn copy_in(&self, env: &crate::environment::EnvHandle, from: &std::path::Path, to: &str) -> Result<()>;
    /// Copies a file or folder of the environment to the host folder `to` (created if missing),
    /// at most `max_bytes` of it (`Invalid` past that).
    async fn copy_out(
        &self,
        env: &crate::environment::EnvHandle,
        from: &str,
        to: &std::path::Path,
        max_bytes: u64,
    ) -> Result<()>;
    /// Removes it and all it holds. Idempotent: tearing down a handle twice, or one whose
    /// environment is already gone, is `Ok`.
    async fn teardown(&self, env: &crate::environment::EnvHandle) -> Result<()>;
    /// Removes every environment of `run` still there (a killed worker's); how many it found.
    async fn sweep(&self, run: &RunId) -> Result<usize>;
    /// Whether an environment of a killed worker is left behind for [`Environment::sweep`]. Not
    /// for one that is the worker's own container, which ends with it.
    fn outlives_its_worker(&self) -> bool {
        true
    }
    /// The host's address as the environment's processes reach it, when they run in a
    /// container of their own (the model gateway listens there for them). The default: they
    /// run on this machine and reach it at loopback.
    async fn gateway_host(&self, _env: &crate::environment::EnvHandle) -> Option<std::net::Ipv4Addr> {
        None
    }
    /// Where this machine reaches `port` of the task's service `name` (a sidecar, by the name the
    /// task's own network knows it by), when it can: the `llm` agent's MCP client dials it from
    /// the worker. The default, and an environment whose task network this machine cannot
    /// reach: `None`.
    async fn service_address(
        &self,
        _env: &crate::environment::EnvHandle,
        _name: &str,
        _port: u16,
    ) -> Option<std::net::SocketAddr> {
        None
    }
    /// Starts `argv` in the environment as one of the agent's commands, with its standard input
    /// and output open to this machine (a task's `stdio` MCP server, which the `llm` agent's
    /// client speaks to): its output, its input. It ends when its input closes or the
    /// environment goes. The default, and an environment that cannot: `None`.
    async fn open_stdio(&self, _env: &crate::environment::EnvHandle, _argv: &[String]) -> Option<StdioPair> {
        None
    }
    /// Stops every process the agent left running (a background loop could rewrite the
    /// tests' reward after they ran), keeping the files as it left them: called before grading.
    /// The default does nothing (a workspace's processes die with the agent's process tree).
    async fn quiesce(&self, _env: &crate::environment::EnvHandle) -> Result<()> {
        Ok(())
    }
    /// Whether processes the agent started can outlive it here (a container's, kept for Harbor's
    /// tests): then the tests run with them held still (`environments::leftovers`). The default:
    /// no (a workspace's die with the agent's process tree).
    fn leftovers_outlive_agent(&self, _env: &crate::environment::EnvHandle) -> bool {
        false
    }
    /// Freezes, as one group the environment controls (the cgroup freezer, which no signal
    /// undoes), every process of the environment but its first and `keep` (the image's own),
    /// before anything of the agent's work is read; their pids as the environment numbers them.
    /// The default, and an environment that cannot (no cgroup it may write): `None`, and the hold
    /// is by signals alone.
    async fn freeze_all(
        &self,
        _env: &crate::environment::EnvHandle,
        _keep: &[crate::environment::ProcessMark],
    ) -> Option<Vec<u32>> {
        None
    }
    /// Lets `pids` out of the frozen group (the servers the tests may need), each watched from
    /// here where the environment can (its changes to files seen until [`Environment::watched`]
    /// is asked); the pids watched. The default: none let out, none watched.
    async fn release(&self, _env: &crate::environment::EnvHandle, _pids: &[u32]) -> Vec<u32> {
        Vec::new()
    }
    /// Whether servers the hold stopped by signal alone (no group frozen) are let go by
    /// [`Environment::release`], which watches them first: the hold then leaves them stopped
    /// for it. The default: no, the hold lets them go itself.
    fn releases_servers(&self, _env: &crate::environment::EnvHandle) -> bool {
        false
    }
    /// What the watched servers (and what they started) changed in files since the last call:
    /// (pid as the environment numbers it, command line, what it did).
    async fn watched(&self, _env: &crate::environment::EnvHandle) -> Vec<(u32, String, String)> {
        Vec::new()
    }
    /// Lets the frozen group go (its processes stay stopped by the hold's signal until it lets
    /// them go too). Nothing to do where [`Environment::freeze_all`] made none.
    async fn thaw(&self, _env: &crate::environment::EnvHandle) {}
    /// The image's own processes: those the environment had when its baseline was first taken
    /// (before anything of the agent's ran; a task's steps share it), each by pid and start
    /// time, so that a pid used again later is not taken for one of them. Never agenteval's
    /// keep-alive, which is held with the agent's processes.
    fn processes_before_agent(&self, _env: &crate::environment::EnvHandle) -> Vec<crate::environment::ProcessMark> {
        Vec::new()
    }
    /// The folder the worker's own files go under, outside the agent's working folder (the
    /// start snapshot, the tests once the agent stopped, the verifier's logs): `/` in a
    /// container (Harbor's `/tests` and `/logs/verifier`); a workspace's attempt folder.
    fn worker_root(&self, _env: &crate::environment::EnvHandle) -> String {
        "/".into()
    }
    /// Every file added, changed or removed outside the working folder and the places nothing a
    /// test reads lives in (`/tmp`, `/var/tmp`, `/run`, `/logs`, agenteval's `/tests` and
    /// `/solution`) since the environment's baseline (as prepared, or as `mark_baseline` last
    /// found it), as far as the environment can tell (a container's changes against its image):
    /// the tools its tests will trust, for the grade to count. Homes and user site-packages are
    /// in it. The default tells nothing.
    async fn changed_outside(&self, _env: &crate::environment::EnvHandle) -> Vec<String> {
        Vec::new()
    }
    /// Takes what is changed now as the environment's own from here on (an agent's setup, before
    /// the agent runs), so `changed_outside` names only what came after. The default does nothing.
    async fn mark_baseline(&self, _env: &crate::environment::EnvHandle) {}
    /// How many bytes the environment's own files grew by since it was prepared (a container's
    /// writable layer), if the environment can tell: checked against the task's `storage_mb`
    /// while the agent runs and when it stops. The default tells nothing (a workspace's folder has its own
    /// limit, `max_disk_bytes`).
    async fn written_bytes(&self, _env: &crate::environment::EnvHandle) -> Option<u64> {
        None
    }
    /// Whether a process of the environment was killed for memory since it was prepared (a
    /// task limit the agent hit, not an infrastructure failure).
    async fn out_of_memory(&self, _env: &crate::environment::EnvHandle) -> bool {
        false
    }
    /// The image `spec` runs, got ready (built unless the engine has it), as its tag and its
    /// content id: what an agent layer is built on. `None`: this environment has no images
    /// (an installed agent's layer needs a container environment).
    async fn base_image(&self, _run: &RunId, _spec: &crate::environment::EnvSpec) -> Result<Option<(String, String)>> {
        Ok(None)
    }
    /// Whether `tag` names an image this environment made and still holds as made (an agent
    /// layer built before, not one tagged over it).
    async fn has_image(&self, _tag: &str) -> bool {
        false
    }
    /// Saves the environment as it is now as the image `tag` (an agent layer), recorded as this
    /// environment's own.
    async fn commit(&self, _env: &crate::environment::EnvHandle, tag: &str) -> Result<()> {
        Err(crate::Error::invalid(format!("a {} environment cannot save image {tag}", self.kind())))
    }
}

/// A program's standard output and input, as [`Environment::open_stdio`] gives them.
pub type StdioPair = (Box<dyn tokio::io::AsyncRead + Send + Unpin>, Box<dyn tokio::io::AsyncWrite + Send + Unpin>);

/// A prepared environment and what drives it, as the agent and the evaluators get it.
#[derive(Clone)]
pub struct EnvSession {
    pub env: std::sync::Arc<dyn Environment>,
    pub handle: crate::environment::EnvHandle,
}

impl std::fmt::Debug for EnvSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSession").field("kind", &self.env.kind()).field("handle", &self.handle).finish()
    }
}

/// Runs jobs somewhere: local processes, ECS Fargate tasks. Only jobs: secrets are a
/// [`SecretStore`], a run's fleet telemetry goes to its bundle (the controller writes it
/// through the [`BundleStore`]), pre-flight checks belong to the [`BackendKind`].
#[async_trait]
pub trait CloudBackend: Send + Sync {
    /// Short name recorded in the index and the bundle (`local`, `aws`).
    fn id(&self) -> &str;
    /// Starts a job. The job spec must already be stored where `job.bundle_uri` says.
    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle>;
    /// Statuses of several jobs, in the order asked.
    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>>;
    /// Stops a job; stopping a job that already ended is not an error.
    async fn cancel_job(&self, handle: &JobHandle, reason: &str) -> Result<()>;
    /// The config field behind a launch no retry fixes (`submit_job`'s error that is not
    /// transient): the backend knows its own settings and its platform's refusals.
    fn launch_field(&self, _error: &Error) -> &'static str {
        "backend"
    }
    /// Waits until some job may have changed state, or `timeout`. Backends that learn of exits
    /// (local processes) return early; polling backends just sleep.
    async fn wait_for_change(&self, timeout: Duration) {
        tokio::time::sleep(timeout).await
    }
    /// For a backend that runs each job in its tasks' own image (ECS: a task definition per
    /// image), the image each of `images` (the tags a local build gives a task's environment,
    /// `agenteval-env:<hash>`) is run as on the fleet, pinned by digest; an `Invalid` error names
    /// every image its registry lacks. `None`: jobs run in the worker's image, and environments
    /// are made by the worker (`docker`, `workspace`).
    async fn task_images(&self, _images: &[String]) -> Result<Option<BTreeMap<String, String>>> {
        Ok(None)
    }
    /// What held this backend's launches back since the last ask, in a line (the platform
    /// throttling launches, the machine short of memory): the controller launches fewer jobs
    /// at once while there is something. `None`: nothing did.
    async fn pressure(&self) -> Option<String> {
        None
    }
}

/// Secrets by name, for workers (and the local pre-flight). Implementations never log a value.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// The secret `name`; `NotFound` when there is none.
    async fn fetch(&self, name: &str) -> Result<Secret>;
}

/// One result of a pre-flight check (`agenteval doctor`, and what `submit` refuses to start
/// without).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    pub fn new(name: impl Into<String>, r: std::result::Result<String, String>) -> Check {
        match r {
            Ok(detail) => Check { name: name.into(), ok: true, detail },
            Err(detail) => Check { name: name.into(), ok: false, detail },
        }
    }
}

/// What a deployment of a backend supplies to its run configs ([`BackendKind::deployed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Deployed {
    /// Where the settings come from, for messages (`the stack profile "agenteval" (FILE)`).
    pub source: String,
    /// `key.path=value`, as `--set` takes them.
    pub settings: Vec<String>,
}

/// A kind of backend as the binary registers it (`crates/agenteval/src/wiring/`, one line
/// each): its name in `backend.id`, the config checks only it can make, and how its job runner
/// and secrets are opened. The core names no backend, so a new one is its own crate implementing
/// this plus that line.
#[async_trait]
pub trait BackendKind: Send + Sync {
    /// The name `backend.id` and `--backend` give it.
    fn id(&self) -> &'static str;
    /// What it runs jobs on, in a few words (listed in `--help` and errors).
    fn about(&self) -> &'static str;
    /// Whether its workers run on this machine and share its disk and environment: local
    /// folders, a secrets file, cassettes and `replay` need that.
    fn on_this_machine(&self) -> bool {
        false
    }
    /// Where its runs are indexed when no config says (`--backend NAME` on a read command), and
    /// how that was chosen, for an error that names it.
    fn default_index(&self) -> (crate::location::IndexLocation, String) {
        let at = crate::location::IndexLocation::Sqlite(PathBuf::from("runs").join("index.sqlite"));
        (at, format!("the default index of backend `{}`", self.id()))
    }
    /// Settings a deployment of this backend supplies (a deployed stack's outputs, remembered
    /// on this machine) for the fields a run config of it leaves out; what the config or `--set`
    /// says wins. `None`: nothing deployed, or nothing to supply.
    fn deployed(&self) -> Option<Deployed> {
        None
    }
    /// Problems of `config` only this backend knows, as `(json pointer, message)`: pure, run by
    /// the loader so they come with positions.
    fn validate(&self, config: &RunConfig) -> Vec<(String, String)>;
    /// The job runner for `config`.
    async fn jobs(&self, config: &RunConfig) -> Result<std::sync::Arc<dyn CloudBackend>>;
    /// Where the workers of `config` read secrets.
    async fn secrets(&self, config: &RunConfig) -> Result<std::sync::Arc<dyn SecretStore>>;
    /// Everything a run of `config` needs from this backend, checked without launching
    /// anything (`doctor`); `secrets` are the names its workers will fetch, each with who needs
    /// it. Every check runs.
    async fn check(&self, config: &RunConfig, secrets: &[(String, String)]) -> Vec<Check>;
    /// What must hold before a run is created, so that a run that cannot start is a usage error
    /// (exit 2) naming the fix rather than a run whose every task fails: `secrets` pairs each
    /// name with who needs it. The default checks nothing.
    async fn preflight(&self, config: &RunConfig, secrets: &[(String, String)]) -> Result<()> {
        let _ = (config, secrets);
        Ok(())
    }
    /// For a worker of a job whose tasks run in their own images (`JobSpec::image`), where
    /// their environments are made: on ECS, an ECS task of the image each, driven over a link.
    /// The default has none.
    async fn image_environments(&self, config: &RunConfig) -> Result<std::sync::Arc<dyn Environment>> {
        Err(crate::Error::invalid(format!("backend `{}` runs no tasks in their own images", config.backend.id)))
    }
}

/// A point-in-time view of a run's fleet, exported periodically by the controller.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TelemetrySnapshot {
    pub timestamp: chrono::DateTime<chrono::Utc>,
    pub jobs_queued: u64,
    pub jobs_running: u64,
    pub jobs_succeeded: u64,
    pub jobs_failed: u64,
    pub jobs_retried: u64,
    pub tasks_finished: u64,
    pub tasks_passed: u64,
    /// What the finished tasks cost; `None` (`null`) once one of them is unknown.
    pub cost_usd: Option<f64>,
    pub tokens: u64,
}

/// Bundle files of runs: `put/get/list/exists` under a run prefix. Paths are relative,
/// `/`-separated, and never contain `..`.
#[async_trait]
pub trait BundleStore: Send + Sync {
    /// Where the bundle of `run` lives (a folder path or an `s3://` URI).
    fn bundle_uri(&self, run: &RunId) -> String;
    async fn put(&self, run: &RunId, path: &str, bytes: &[u8]) -> Result<()>;
    /// Fails with `ErrorKind::NotFound` when the file does not exist.
    async fn get(&self, run: &RunId, path: &str) -> Result<Vec<u8>>;
    async fn exists(&self, run: &RunId, path: &str) -> Result<bool>;
    /// Hands a file's bytes to `f` in pieces and returns its size; stores that can read a
    /// piece at a time override the default (one `get`), so checksumming a large file does not
    /// hold it in memory.
    async fn read_chunks(&self, run: &RunId, path: &str, f: &mut (dyn for<'b> FnMut(&'b [u8]) + Send)) -> Result<u64> {
        let bytes = self.get(run, path).await?;
        f(&bytes);
        Ok(bytes.len() as u64)
    }
    /// Up to `len` bytes of a file from `offset`: fewer at its end, none past it. How a large
    /// file is served a piece at a time, and a file that should be small is read with a cap
    /// (a hostile bundle's `result.json` may be gigabytes). Stores that can read a range
    /// override the default, which reads the whole file.
    async fn read_range(&self, run: &RunId, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        Ok(range_of(&self.get(run, path).await?, offset, len).to_vec())
    }
    /// Every file under `prefix` (`""` for the whole bundle), sorted, relative to the bundle.
    async fn list(&self, run: &RunId, prefix: &str) -> Result<Vec<String>>;
    /// `list` with each file's size where the listing gives it without reading the file (on
    /// disk and on S3 it does); sealing trusts a size-matching checksum a writer recorded
    /// instead of reading the file again. `None`: unknown, so the file is read.
    async fn list_sized(&self, run: &RunId, prefix: &str) -> Result<Vec<(String, Option<u64>)>> {
        Ok(self.list(run, prefix).await?.into_iter().map(|p| (p, None)).collect())
    }
    /// `list_sized`, a file at a time, in no particular order: how sealing goes over a bundle
    /// of a million files without holding its listing. The default lists, then hands each;
    /// stores that can walk as they go override it.
    async fn list_sized_each(
        &self,
        run: &RunId,
        prefix: &str,
        f: &mut (dyn FnMut(String, Option<u64>) + Send),
    ) -> Result<()> {
        for (p, size) in self.list_sized(run, prefix).await? {
            f(p, size);
        }
        Ok(())
    }
    /// Makes whole any run-long file still held as parts because its writer died before
    /// finishing it (stores that write such files in parts override it).
    async fn join_parts(&self, run: &RunId) -> Result<()> {
        let _ = run;
        Ok(())
    }
    /// Every run with a bundle under this root, sorted (what `index rebuild` walks). Entries
    /// that are not run ids are skipped.
    async fn list_runs(&self) -> Result<Vec<RunId>>;
    /// Moves a file within a run's bundle, replacing `to`: how a worker publishes what it staged
    /// once its attempt is the one that counts. The default copies (`get` + `put`) and leaves
    /// `from`; stores that can move a file override it.
    async fn rename(&self, run: &RunId, from: &str, to: &str) -> Result<()> {
        let bytes = self.get(run, from).await?;
        self.put(run, to, &bytes).await
    }
    /// Writes `bytes` as `to` and removes `from` (a missing `from` is not an error): how a
    /// worker turns a task's streamed trace into its pack. The default puts and deletes;
    /// stores where creating and removing files is dear override it (on disk, the same file is
    /// rewritten and renamed: none is created or removed).
    async fn replace(&self, run: &RunId, from: &str, to: &str, bytes: &[u8]) -> Result<()> {
        self.put(run, to, bytes).await?;
        self.delete(run, from).await
    }
    /// Removes a file; a missing one is not an error. On disk, folders it leaves empty go too.
    /// How a worker clears what it staged for a task once the task's pack is published. The
    /// default keeps the file (a store that cannot delete costs disk, not correctness).
    async fn delete(&self, run: &RunId, path: &str) -> Result<()> {
        let _ = (run, path);
        Ok(())
    }
    /// Opens a file for appending lines as they happen. The default buffers and writes the
    /// whole file on every flush; stores with real appends override it.
    async fn open_appender(&self, run: &RunId, path: &str) -> Result<Box<dyn Appender>> {
        let _ = (run, path);
        Err(Error::internal("this store does not support appending"))
    }
    /// Opens a file written in pieces that appears whole at `finish`, or not at all: until
    /// then readers see the file as it was, and a crash leaves it so. What a large run's seal
    /// writes without holding it whole (`manifest.json`). `None` from a store that cannot:
    /// the caller then writes the file with one `put`.
    async fn open_writer(&self, run: &RunId, path: &str) -> Result<Option<Box<dyn Appender>>> {
        let _ = (run, path);
        Ok(None)
    }
    /// An object kept beside the runs and shared by all of them (`<root>/.shared/<key>`, never
    /// a run): what outlives one run, such as the LLM judges' cached verdicts, which workers on
    /// any machine then share. `key` is a relative path like a bundle path. Fails with
    /// `NotFound` when missing; the default keeps nothing.
    async fn get_shared(&self, key: &str) -> Result<Vec<u8>> {
        Err(Error::not_found(format!("shared object {key}: this store keeps none")))
    }
    /// Writes a shared object (whole, replacing it). The default keeps nothing.
    async fn put_shared(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let _ = (key, bytes);
        Ok(())
    }
}

/// The folder of a bundle root that holds shared objects; not a run id, so never listed as one.
pub const SHARED_FOLDER: &str = ".shared";

/// The bytes of `bytes` that `read_range(offset, len)` gives.
pub fn range_of(bytes: &[u8], offset: u64, len: u64) -> &[u8] {
    let size = bytes.len() as u64;
    &bytes[offset.min(size) as usize..offset.saturating_add(len).min(size) as usize]
}

/// An append-only file being written.
#[async_trait]
pub trait Appender: Send {
    /// Appends bytes; once this returns, a crash of this process does not lose them.
    async fn append(&mut self, bytes: &[u8]) -> Result<()>;
    /// Completes the file.
    async fn finish(self: Box<Self>) -> Result<()>;
}

/// Checks a bundle-relative path: relative, `/`-separated, no `.`/`..` segments.
pub fn check_bundle_path(path: &str) -> Result<()> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path.split('/').all(|s| !s.is_empty() && s != "." && s != "..");
    if ok { Ok(()) } else { Err(Error::invalid(format!("`{path}` is not a valid bundle path"))) }
}

/// The record of every run and task, shared by the controller and all workers.
#[async_trait]
pub trait RunIndex: Send + Sync {
    /// Records a new run and all its tasks as `pending`, atomically where the store allows.
    async fn create_run(&self, run: &RunRecord, tasks: &[TaskId]) -> Result<()>;
    /// Adds tasks to a running run as `pending` (the further repetitions of an adaptive run)
    /// and makes its `tasks_total` say `tasks_total`. Unknown runs fail with `NotFound`.
    async fn add_tasks(&self, run: &RunId, tasks: &[TaskId], tasks_total: u64) -> Result<()>;
    async fn get_run(&self, run: &RunId) -> Result<Option<RunRecord>>;
    /// Runs, newest first.
    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>>;
    /// Fails with `NotFound` for an unknown run.
    async fn update_run(&self, run: &RunId, update: &RunUpdate) -> Result<()>;
    /// Applies a task transition if it moves forward (see `TaskState::may_move_to`). Returns
    /// whether it was applied. Unknown tasks fail with `NotFound`.
    async fn record_task(&self, run: &RunId, t: &TaskTransition) -> Result<bool>;
    /// Applies several transitions, in one round trip where the store allows; returns, for
    /// each, whether it was applied.
    async fn record_tasks(&self, run: &RunId, ts: &[TaskTransition]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(ts.len());
        for t in ts {
            out.push(self.record_task(run, t).await?);
        }
        Ok(out)
    }
    async fn get_task(&self, run: &RunId, task: &TaskId) -> Result<Option<TaskRecord>>;
    /// Several tasks at once, in the order asked (`None` for an unknown one): what the
    /// controller reads when a job ends. Stores that can read many keys in one call override it
    /// (DynamoDB `BatchGetItem`, one SQL statement).
    async fn get_tasks(&self, run: &RunId, tasks: &[TaskId]) -> Result<Vec<Option<TaskRecord>>> {
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            out.push(self.get_task(run, t).await?);
        }
        Ok(out)
    }
    /// Every task of a run, ordered by task id.
    async fn list_tasks(&self, run: &RunId) -> Result<Vec<TaskRecord>>;
    /// What a resume needs of a run's tasks, without the records: the completed ones' ids (in id
    /// order) and the highest attempt any task reached. Stores override it with a narrow query:
    /// at a million tasks the whole records are hundreds of megabytes.
    async fn completed_tasks(&self, run: &RunId) -> Result<CompletedTasks> {
        let tasks = self.list_tasks(run).await?;
        Ok(CompletedTasks {
            max_attempt: tasks.iter().map(|t| t.attempt).max().unwrap_or(0),
            ids: tasks.into_iter().filter(|t| t.state == TaskState::Completed).map(|t| t.task_id).collect(),
        })
    }
    async fn task_counts(&self, run: &RunId) -> Result<TaskCounts>;
    /// Adds `usd` to what the run's model calls spent at the wire (every worker's gateway adds
    /// each call's cost as it ends) and returns the run's total: one atomic addition, so that
    /// every worker of a fleet reads one budget. Unknown runs fail with `NotFound`.
    async fn add_spend(&self, run: &RunId, usd: f64) -> Result<f64>;
    /// Adds `usd` to what the run's calls in flight hold of its budget (what each could cost,
    /// reserved as it is sent; negative: given back as it ends) and returns the run's spend and
    /// what is held after it, in one atomic step.
    async fn add_held(&self, run: &RunId, usd: f64) -> Result<(f64, f64)>;
    /// What the run's model calls spent at the wire so far (0 for a run without any).
    async fn spend(&self, run: &RunId) -> Result<f64>;
    /// Adds model calls of the run and their cost (every worker's gateway counts each call as it
    /// arrives and its cost as it ends, whether its task ends with a result or not: a cancelled
    /// task's calls were paid for too). Kept apart from the budget's `add_spend`, which a set of
    /// runs shares. The default counts nothing.
    async fn add_calls(&self, _run: &RunId, _calls: u64, _usd: f64) -> Result<()> {
        Ok(())
    }
    /// The run's calls and what they cost (`add_calls`).
    async fn calls(&self, _run: &RunId) -> Result<(u64, f64)> {
        Ok((0, 0.0))
    }
    /// Adds model calls of the run that were rate limited (the provider answered 429 or 529, or
    /// the run's own rate limits held them back): what the controller's concurrency backs off
    /// on. The default counts nothing.
    async fn add_throttled(&self, _run: &RunId, _calls: u64) -> Result<()> {
        Ok(())
    }
    /// The run's rate-limited calls so far (`add_throttled`).
    async fn throttled(&self, _run: &RunId) -> Result<u64> {
        Ok(0)
    }
    /// Books `cost_ms` of the run's rate limit `key` (the gateway's governor, shared by every
    /// worker of the run): the limit's time becomes `max(its time, now_ms) + cost_ms`, in one
    /// atomic step, and is returned (the governor counts in microseconds since the epoch, despite
    /// the names). Unknown runs fail with `NotFound`.
    async fn book_rate(&self, run: &RunId, key: &str, now_ms: i64, cost_ms: i64) -> Result<i64>;
    /// Whether `task_counts` is cheap enough to call several times a second whatever the run's
    /// size (an indexed SQL aggregate). When it is not (DynamoDB reads every task item), the
    /// controller reads it once at the start and at the end and keeps the counts in between
    /// from the job ends it reads anyway.
    fn counts_are_cheap(&self) -> bool {
        true
    }
    /// Records (or updates) one dispatch of a job.
    async fn record_job(&self, job: &JobRecord) -> Result<()>;
    async fn list_jobs(&self, run: &RunId) -> Result<Vec<JobRecord>>;
    /// Pins `run` as the baseline that `baseline:<name>` names (replacing an earlier pin).
    async fn set_baseline(&self, name: &str, run: &RunId) -> Result<()>;
    /// The run pinned as the baseline of `name`, if any.
    async fn get_baseline(&self, name: &str) -> Result<Option<RunId>>;
    /// Unpins the baseline of `name`; returns the run that was pinned (`None`: there was none).
    async fn unset_baseline(&self, name: &str) -> Result<Option<RunId>>;
    /// Fails (`Io`) when the index this handle opened is no longer the one at its location
    /// (a SQLite file deleted or replaced), so that a controller stops instead of writing into a
    /// file nobody else sees.
    async fn verify(&self) -> Result<()> {
        Ok(())
    }
}

/// What a benchmark prepared for one task.
#[derive(Debug, Clone, Default)]
pub struct TaskEnvironment {
    /// A scratch folder the agent may use; removed at teardown.
    pub workdir: Option<PathBuf>,
    pub vars: BTreeMap<String, String>,
    /// The environment the agent acts in, for tasks that have one.
    pub session: Option<EnvSession>,
    /// Makes another environment of the task's own image, which its agent never touched, for a
    /// grader that trusts nothing the agent's holds (SWE-bench's fresh container). Set by the
    /// worker for every task with an environment.
    pub fresh: Option<std::sync::Arc<dyn FreshEnvironment>>,
    /// What the benchmark's grader found beside its score, which the worker keeps.
    pub findings: std::sync::Arc<std::sync::Mutex<Findings>>,
}

/// What a grader found beside its score: files for the task's pack (`artifacts/<name>`) and
/// reasons to doubt its verdict (`suspect`, counted in the summary; the verdict stands).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    pub files: Vec<(String, Vec<u8>)>,
    pub suspect: Vec<String>,
    /// The tamper audit's findings: files the agent changed that the grading reads.
    pub tampered: Vec<crate::tamper::Tampered>,
    /// The verdict without the tampering (SWE-bench's `grade_without_tampering`).
    pub without_tampering: Option<crate::model::WithoutTampering>,
    /// A verifier's rewards by name, as Harbor records them (`{"reward": 1.0}` for a number).
    pub rewards: Option<BTreeMap<String, f64>>,
    /// Graded by Harbor's rules and no reward came: left out of the mean reward.
    pub unscored: bool,
    /// The models the agent called, with how many calls each.
    pub models: BTreeMap<String, u64>,
    /// Milliseconds the gateway waited for the provider across the agent's calls.
    pub provider_wait_ms: u64,
    /// What the task's other actors (the simulated user) spent, by role.
    pub roles: BTreeMap<String, crate::model::RoleUsage>,
    /// A task told in steps: what became of each step run.
    pub steps: Vec<crate::model::StepResult>,
}

/// A maker of fresh environments for one task (see [`TaskEnvironment::fresh`]).
#[async_trait]
pub trait FreshEnvironment: Send + Sync {
    /// A new environment of the task's image, untouched by its agent; the caller tears it down
    /// with [`FreshEnvironment::discard`].
    async fn make(&self) -> Result<EnvSession>;
    /// Tears it down; a failure is left to the run's sweep.
    async fn discard(&self, session: &EnvSession);
}

impl std::fmt::Debug for dyn FreshEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FreshEnvironment")
    }
}

/// What a benchmark says one of its tasks needs beyond the run's settings. The default asks
/// nothing: a new benchmark declares only what differs, and the worker never asks which
/// benchmark it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskPlan {
    /// The task's own time limit for its agent, in seconds: it lowers the run's (the run's
    /// stays when it is lower).
    pub agent_timeout_secs: Option<f64>,
    /// Why the benchmark's own tool would skip this task (it still runs here): kept in its
    /// result and counted in the summary.
    pub would_skip: Option<String>,
    /// The task is a conversation with a simulated user (`roles.user`), briefed so.
    pub user: Option<UserBrief>,
}

/// What a benchmark tells its simulated user of a task: its system prompt (the benchmark's own
/// guidelines with the task's persona and instructions: a "standard" simulator is the
/// benchmark's) and the agent's opening line, which the user answers first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UserBrief {
    pub system: String,
    pub opening: String,
    /// Words that, in a user's turn, end the conversation (`###STOP###`).
    pub stop_words: Vec<String>,
    /// The conversation the task starts from (τ²'s `message_history`), before the `opening`,
    /// which is then the agent's last line of it: both sides are told it as they said it.
    pub history: Vec<PriorMessage>,
}

/// A message of the conversation a task starts from, as its side said it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum PriorMessage {
    User {
        text: String,
    },
    Agent {
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        tool_calls: Vec<PriorCall>,
    },
    /// A tool's answer to the agent's call `call_id`.
    Tool {
        call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        error: bool,
    },
}

/// A tool call of the conversation a task starts from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PriorCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

/// The instructions a case's simulated user gets, its scenario inside: agenteval's own
/// (docs/roles.md), with τ²'s stop word.
const USER_GUIDE: &str = "You are playing a user who is talking to an AI assistant. Follow the scenario \
below: it says who you are and what you want. Write only what the user says, one message at a time, in \
plain words; do not reveal the scenario or that you are simulated, and do not invent facts it does not \
give. When what you wanted is done, or the assistant cannot do it, end the conversation with a last \
message that ends with ###STOP###.\n\n<scenario>\n{scenario}\n</scenario>";

/// The agent's opening line when a case gives none.
pub const DEFAULT_OPENING: &str = "Hello! How can I help you today?";

impl crate::model::UserSpec {
    /// The simulated user briefed with it (every benchmark whose tasks carry one, unless the
    /// benchmark briefs its users itself).
    pub fn brief(&self) -> UserBrief {
        UserBrief {
            system: USER_GUIDE.replace("{scenario}", self.scenario.trim()),
            opening: self.opening.clone().unwrap_or_else(|| DEFAULT_OPENING.to_string()),
            stop_words: vec!["###STOP###".to_string()],
            history: Vec::new(),
        }
    }
}

/// One turn of a simulated user.
#[derive(Debug, Clone, PartialEq)]
pub struct UserTurn {
    pub text: String,
    /// The user ended the conversation with it.
    pub ends: bool,
    /// What it did with tools of its own before it said `text` (τ²'s telecom user, on its
    /// phone), in order.
    pub acted: Vec<UserAct>,
}

impl UserTurn {
    /// Its `user.message` event's payload: its words, whether they end the conversation, and
    /// what it did with its own tools first (`acted`, when it did).
    pub fn event_payload(&self) -> serde_json::Value {
        let mut p = serde_json::json!({"text": self.text, "ends": self.ends});
        if !self.acted.is_empty() {
            p["acted"] = serde_json::to_value(&self.acted).unwrap_or_default();
        }
        p
    }
}

/// One round of a simulated user's own tool calls: what it said with them, the calls, and the
/// tools' answers, in the calls' order.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UserAct {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub calls: Vec<PriorCall>,
    pub results: Vec<UserToolResult>,
}

/// A tool's answer to one of the simulated user's calls.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct UserToolResult {
    pub call_id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

/// The simulated user an agent converses with: each reply is a model call through the run's
/// gateway under the user's own door (metered, budgeted and recorded apart from the agent's).
#[async_trait]
pub trait SimulatedUser: Send + Sync {
    /// The agent's opening line, which the conversation starts with.
    fn opening(&self) -> &str;
    /// The conversation before the opening line, when the task starts from one.
    fn history(&self) -> &[PriorMessage] {
        &[]
    }
    /// The user's reply to what the agent said; `Err` when the conversation cannot go on (the
    /// user's budget is spent, its recording has no such turn, its model failed).
    async fn reply(&self, agent_said: &str) -> std::result::Result<UserTurn, Stop>;
}

/// A source of tasks with its own grader.
#[async_trait]
pub trait BenchmarkAdapter: Send + Sync {
    fn name(&self) -> &str;
    /// What `task` needs beyond the run's settings (see [`TaskPlan`]).
    fn plan(&self, task: &TaskSpec) -> TaskPlan {
        // A task that carries its own simulated user (a case's `user`) is a conversation.
        TaskPlan { user: task.user.as_ref().map(crate::model::UserSpec::brief), ..TaskPlan::default() }
    }
    /// Tools the task's simulated user acts with on its own side (τ²'s telecom user's phone):
    /// answered by the benchmark, never offered to the agent.
    fn user_tools(&self, _task: &TaskSpec) -> Vec<std::sync::Arc<dyn AgentTool>> {
        Vec::new()
    }
    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskSpec>>;
    /// Hands matching tasks to `f` one at a time. Benchmarks with very many tasks override it
    /// so that a run never holds them all as `TaskSpec`s.
    async fn for_each_task(
        &self,
        filter: &TaskFilter,
        f: &mut (dyn FnMut(TaskSpec) -> Result<()> + Send),
    ) -> Result<()> {
        for t in self.list_tasks(filter).await? {
            f(t)?;
        }
        Ok(())
    }
    /// Sets up what a task needs (files, services). The default prepares nothing: tasks that
    /// are pure data need no environment.
    async fn prepare_environment(&self, _run: &RunId, _task: &TaskSpec) -> Result<TaskEnvironment> {
        Ok(TaskEnvironment::default())
    }
    /// The benchmark's own verdict on an agent's result, with the task's environment as the
    /// agent left it (a Harbor task runs its tests there). The default: the agent completed and
    /// its final answer equals the task's `expected` (see `model::grade_expected`).
    async fn grade(
        &self,
        task: &TaskSpec,
        result: &AgentResult,
        _trace: &[TraceEvent],
        _env: &TaskEnvironment,
    ) -> EvaluatorScore {
        grade_expected(task, result)
    }
    /// Tools this benchmark offers the built-in `llm` agent on `task` (besides its built-in
    /// ones). Default: none.
    fn tools(&self, _task: &TaskSpec) -> Vec<std::sync::Arc<dyn AgentTool>> {
        Vec::new()
    }
    /// Releases what `prepare_environment` made. Calling it twice is harmless.
    async fn teardown(&self, _env: &TaskEnvironment) -> Result<()> {
        Ok(())
    }
}

/// Why an agent must stop early.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub terminated_by: TerminatedBy,
    pub reason: String,
}

/// Receives an agent's trace events as they happen; the runner behind it writes them to the
/// bundle and enforces token and cost limits by answering `Err(Stop)`.
#[async_trait]
pub trait EventSink: Send {
    async fn emit(&mut self, event: AgentEvent) -> std::result::Result<(), Stop>;
    /// Adds a file to the task's bundle folder (redacted like the trace), e.g. the `llm`
    /// agent's `cassette.jsonl`. `name` is a plain file name. The default drops it.
    async fn attach(&mut self, name: &str, bytes: Vec<u8>) {
        let _ = (name, bytes);
    }
}

/// An event as an agent reports it; the sink adds run, task, step and timestamp.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentEvent {
    pub kind: Option<EventKind>,
    pub payload: serde_json::Value,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl AgentEvent {
    pub fn new(kind: EventKind, payload: serde_json::Value) -> Self {
        AgentEvent { kind: Some(kind), payload, ..Default::default() }
    }

    /// Why this event's usage numbers cannot be believed, if they cannot: a cost that is
    /// negative, not finite or absurd, or a token count past [`MAX_EVENT_TOKENS`]. A negative
    /// cost would lower a budget; an infinite one would make totals unwritable.
    pub fn usage_problem(&self) -> Option<String> {
        let c = self.cost_usd;
        if !c.is_finite() || !(0.0..=MAX_EVENT_COST_USD).contains(&c) {
            return Some(format!(
                "reports cost_usd {c}: an event's cost must be a finite number from 0 to {MAX_EVENT_COST_USD}"
            ));
        }
        for (name, v) in [("input_tokens", self.input_tokens), ("output_tokens", self.output_tokens)] {
            if v > MAX_EVENT_TOKENS {
                return Some(format!("reports {name} {v}: an event reports at most {MAX_EVENT_TOKENS} tokens"));
            }
        }
        None
    }
}

/// Everything an agent gets for one task.
pub struct AgentContext<'a> {
    pub run_id: RunId,
    pub task: &'a TaskSpec,
    pub limits: &'a Limits,
    pub env: &'a TaskEnvironment,
    /// Secrets to hand to the agent, by environment variable name.
    pub secrets: &'a [(String, Secret)],
    /// Tools the benchmark offers for this task.
    pub tools: &'a [std::sync::Arc<dyn AgentTool>],
    /// The task's door to the model gateway, when the agent's calls go through one.
    pub gateway: Option<&'a GatewayAccess>,
    /// The simulated user the agent converses with, when the task is a conversation.
    pub user: Option<&'a dyn SimulatedUser>,
}

/// How an agent reaches the model gateway: its task's token and the gateway's addresses.
pub struct GatewayAccess {
    pub token: Secret,
    /// The base URLs (OpenAI's, Anthropic's) from this machine.
    pub host: (String, String),
    /// The port it listens on at loopback (a sandboxed agent's network rule lets it through).
    pub port: u16,
    /// The base URLs from a container on the task network, when the gateway listens there.
    pub container: Option<(String, String)>,
    /// The gateway called without a connection, for an agent of the worker's own process.
    pub local: Option<std::sync::Arc<dyn crate::gateway::LocalCall>>,
}

impl GatewayAccess {
    /// The variables an agent is given: from the host, or from a container.
    pub fn env(&self, in_container: bool) -> Vec<(String, String)> {
        let (openai, anthropic) = match (&self.container, in_container) {
            (Some(c), true) => c,
            _ => &self.host,
        };
        crate::gateway::door_env(&self.token, openai, anthropic)
    }
}

impl std::fmt::Debug for GatewayAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayAccess").field("host", &self.host).field("container", &self.container).finish()
    }
}

impl std::fmt::Debug for AgentContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentContext")
            .field("run_id", &self.run_id)
            .field("task", &self.task.id)
            .field("secrets", &self.secrets.len())
            .field("tools", &self.tools.iter().map(|t| t.spec().name).collect::<Vec<_>>())
            .finish()
    }
}

/// What a model is told about a tool: its name, what it does, its parameters (JSON Schema).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// A tool the built-in `llm` agent can call: a benchmark's, or a built-in one (`python`).
#[async_trait]
pub trait AgentTool: Send + Sync {
    fn spec(&self) -> ToolSpec;
    /// Runs the tool for one call. `Err` is a message the model sees as a failed call; it does
    /// not stop the agent.
    async fn call(&self, arguments: &serde_json::Value, env: &TaskEnvironment) -> std::result::Result<String, String>;
}

/// What the agent produced, before the runner adds totals from the sink.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentOutcome {
    pub final_answer: Option<serde_json::Value>,
    /// `None` on success.
    pub error: Option<(TerminatedBy, String)>,
    /// Why the agent could not run at all, set by the agent where it found out (an
    /// `agent_error` only).
    pub fault: Option<crate::model::AgentFault>,
}

impl AgentOutcome {
    /// The agent's answer.
    pub fn answer(final_answer: serde_json::Value) -> AgentOutcome {
        AgentOutcome { final_answer: Some(final_answer), ..Default::default() }
    }

    /// Stopped for this reason, with no answer.
    pub fn stopped(by: TerminatedBy, why: impl Into<String>) -> AgentOutcome {
        AgentOutcome { error: Some((by, why.into())), ..Default::default() }
    }

    /// An agent that could not run, for this fault.
    pub fn faulted(fault: crate::model::AgentFault, why: impl Into<String>) -> AgentOutcome {
        AgentOutcome { fault: Some(fault), ..AgentOutcome::stopped(TerminatedBy::AgentError, why) }
    }
}

/// What an agent asks of the task attempt around it. The defaults fit an agent that acts on
/// its own in the task's environment and reports its own usage: a new kind of agent declares
/// only what differs, and the worker never asks which kind it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentNeeds {
    /// It is given the task's reference solution (the oracle), fetched for it alone.
    pub sees_solution: bool,
    /// A file it leaves in its environment as its own record of the run, kept with the task's
    /// artifacts.
    pub record: Option<String>,
    /// It calls its model from this process (the built-in `llm` agent): its key stays here
    /// (behind the gateway, the gateway's), it answers a strict replay from the cassettes
    /// itself, and each `cost.tick` it writes stands for one call.
    pub calls_in_process: bool,
    /// A program of the user's: when its calls bypass the gateway and it reports no usage, its
    /// cost is unknown, never $0.
    pub usage_unknown_unless_metered: bool,
    /// The system prompt it sends, which the GenAI spans may show when content is captured.
    pub system_prompt: Option<String>,
    /// Its answers were made elsewhere (the `predictions` agent): it gets no environment of
    /// its own.
    pub acts_elsewhere: bool,
    /// It is given a task's MCP servers (a preset with an MCP client): another agent runs
    /// without them, and its task's log says so.
    pub takes_mcp_servers: bool,
}

/// An agent under evaluation.
#[async_trait]
pub trait AgentRunner: Send + Sync {
    fn name(&self) -> &str;
    /// What it needs of the task attempt around it (see [`AgentNeeds`]).
    fn needs(&self) -> AgentNeeds {
        AgentNeeds::default()
    }
    /// Runs the agent on one task, streaming events into `sink`. Failures of the agent are
    /// reported in the outcome, never as a panic or an `Err` of the worker.
    async fn run(&self, ctx: &AgentContext<'_>, sink: &mut dyn EventSink) -> AgentOutcome;
}

/// What an evaluator looks at.
#[derive(Debug)]
pub struct EvalInput<'a> {
    pub task: &'a TaskSpec,
    pub result: &'a AgentResult,
    pub trace: &'a [TraceEvent],
    /// The task's environment as the agent left it (its processes stopped), for a task with one.
    pub env: Option<&'a EnvSession>,
}

/// Scores one aspect of a task's result.
#[async_trait]
pub trait Evaluator: Send + Sync {
    fn id(&self) -> &str;
    fn kind(&self) -> &str;
    /// An `Err` becomes an error score for this evaluator; it never fails the task run.
    async fn evaluate(&self, input: &EvalInput<'_>) -> Result<EvaluatorScore>;
}

/// Aggregates task results into part of the run summary, one result at a time (so a run of
/// a million tasks is summarized without holding them all).
pub trait Scorer: Send {
    fn observe(&mut self, result: &TaskResult);
    fn finish(&self, summary: &mut RunSummary);
}
