//! `CloudBackend` on ECS Fargate: each job is a `RunTask` of the agenteval image running
//! `agenteval worker --job s3://…/job.json`, paced under the launch quota.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenteval_core::layout;
use agenteval_core::model::{JobHandle, JobSpec, JobStatus};
use agenteval_core::secret::Secret;
use agenteval_core::traits::{BundleStore, CloudBackend, TelemetrySnapshot};
use agenteval_core::{Error, ErrorKind, Result, RunId};
use async_trait::async_trait;
use aws_sdk_ecs::types::{
    AssignPublicIp, AwsVpcConfiguration, CapacityProviderStrategyItem, ContainerOverride, KeyValuePair, LaunchType,
    NetworkConfiguration, Tag, TaskOverride,
};

use crate::s3_store::S3BundleStore;
use crate::sdk::{AwsClients, classify};

/// Exit codes of the worker (must match `agenteval_local::process::worker_exit`).
const EXIT_BAD_JOB: i32 = 2;
const EXIT_CANCELLED: i32 = 3;

/// How a job's ECS task is launched.
#[derive(Debug, Clone, PartialEq)]
pub struct EcsSettings {
    pub cluster: String,
    pub task_definition: String,
    pub container_name: String,
    pub subnets: Vec<String>,
    pub security_groups: Vec<String>,
    pub assign_public_ip: bool,
    pub spot: bool,
    pub launch_burst: u32,
    pub launch_per_second: f64,
    pub poll: Duration,
    /// Extra environment for every worker (region, endpoint).
    pub worker_env: BTreeMap<String, String>,
}

/// A token bucket: `burst` launches at once, then `per_second` sustained. Fargate's RunTask
/// quota is a token bucket too; staying under it keeps throttling errors from happening at all.
#[derive(Debug)]
pub struct TokenBucket {
    capacity: f64,
    per_second: f64,
    state: tokio::sync::Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn new(burst: u32, per_second: f64) -> Self {
        TokenBucket {
            capacity: burst as f64,
            per_second,
            state: tokio::sync::Mutex::new((burst as f64, Instant::now())),
        }
    }

    /// Waits for one token.
    pub async fn take(&self) {
        let mut st = self.state.lock().await;
        loop {
            let now = Instant::now();
            let (tokens, last) = *st;
            let refilled = (tokens + now.duration_since(last).as_secs_f64() * self.per_second).min(self.capacity);
            if refilled >= 1.0 {
                *st = (refilled - 1.0, now);
                return;
            }
            *st = (refilled, now);
            let wait = (1.0 - refilled) / self.per_second;
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
    }
}

/// Counts of AWS API calls, for the benchmark's cost-per-task figure.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CallCounts {
    pub run_task: u64,
    pub describe_tasks: u64,
    pub stop_task: u64,
    pub get_secret: u64,
    pub launch_retries: u64,
}

pub struct EcsBackend {
    clients: Arc<AwsClients>,
    settings: EcsSettings,
    store: S3BundleStore,
    bucket: TokenBucket,
    secrets: Mutex<HashMap<String, Secret>>,
    calls: Mutex<CallCounts>,
    /// When each task was first seen missing from DescribeTasks (AWS forgets stopped tasks
    /// after about an hour; an emulator may not know a task at all).
    missing_since: Mutex<HashMap<String, Instant>>,
    telemetry: tokio::sync::Mutex<Vec<u8>>,
}

impl std::fmt::Debug for EcsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EcsBackend").field("cluster", &self.settings.cluster).finish()
    }
}

/// Failures of `RunTask` worth retrying: capacity and throttling.
fn retryable_launch_failure(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    r.contains("capacity")
        || r.contains("throttl")
        || r.contains("rate exceeded")
        || r.contains("resource:")
        || r.contains("agent")
}

impl EcsBackend {
    pub fn new(clients: Arc<AwsClients>, settings: EcsSettings, store: S3BundleStore) -> Self {
        let bucket = TokenBucket::new(settings.launch_burst, settings.launch_per_second);
        EcsBackend {
            clients,
            settings,
            store,
            bucket,
            secrets: Mutex::new(HashMap::new()),
            calls: Mutex::new(CallCounts::default()),
            missing_since: Mutex::new(HashMap::new()),
            telemetry: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn calls(&self) -> CallCounts {
        self.calls.lock().expect("calls lock").clone()
    }

    fn count(&self, f: impl FnOnce(&mut CallCounts)) {
        f(&mut self.calls.lock().expect("calls lock"));
    }

    /// The container override for a job: the worker command and its environment.
    pub fn container_override(&self, job: &JobSpec) -> ContainerOverride {
        let job_uri = format!("{}/{}", self.store.bundle_uri(&job.run_id), layout::job_spec(&job.job_id, job.attempt));
        let mut env: BTreeMap<String, String> = self.settings.worker_env.clone();
        env.extend(job.env.clone());
        ContainerOverride::builder()
            .name(&self.settings.container_name)
            .set_command(Some(vec!["worker".into(), "--job".into(), job_uri]))
            .set_environment(Some(
                env.into_iter().map(|(k, v)| KeyValuePair::builder().name(k).value(v).build()).collect(),
            ))
            .build()
    }

    fn status_of_task(&self, t: &aws_sdk_ecs::types::Task) -> JobStatus {
        let last = t.last_status().unwrap_or("");
        match last {
            "PROVISIONING" | "PENDING" | "ACTIVATING" => JobStatus::Queued,
            "STOPPED" => {
                let stop_code = t.stop_code().map(|c| c.as_str().to_string()).unwrap_or_default();
                let reason = t.stopped_reason().unwrap_or("").to_string();
                let exit = t
                    .containers()
                    .iter()
                    .find(|c| c.name() == Some(self.settings.container_name.as_str()))
                    .or_else(|| t.containers().first())
                    .and_then(|c| c.exit_code());
                let infra = |why: String| JobStatus::Failed { exit_code: exit, reason: why, infrastructure: true };
                match (stop_code.as_str(), exit) {
                    ("SpotInterruption", _) => infra(format!("Fargate Spot interruption: {reason}")),
                    ("TaskFailedToStart", _) => infra(format!("task failed to start: {reason}")),
                    (_, Some(0)) => JobStatus::Succeeded,
                    (_, Some(EXIT_CANCELLED)) => JobStatus::Cancelled,
                    (_, Some(EXIT_BAD_JOB)) => JobStatus::Failed {
                        exit_code: exit,
                        reason: "worker could not run the job as specified (see its log)".into(),
                        infrastructure: false,
                    },
                    (_, Some(code)) => infra(format!("worker exited with status {code}: {reason}")),
                    (_, None) => infra(format!("task stopped without an exit code: {reason}")),
                }
            }
            _ => JobStatus::Running,
        }
    }
}

#[async_trait]
impl CloudBackend for EcsBackend {
    fn id(&self) -> &str {
        "aws"
    }

    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle> {
        let s = &self.settings;
        let vpc = AwsVpcConfiguration::builder()
            .set_subnets(Some(s.subnets.clone()))
            .set_security_groups(Some(s.security_groups.clone()))
            .assign_public_ip(if s.assign_public_ip { AssignPublicIp::Enabled } else { AssignPublicIp::Disabled })
            .build()
            .map_err(|e| Error::invalid(format!("network configuration: {e}")))?;
        let mut backoff = Duration::from_millis(500);
        for attempt in 1..=6 {
            self.bucket.take().await;
            let mut req = self
                .clients
                .ecs
                .run_task()
                .cluster(&s.cluster)
                .task_definition(&s.task_definition)
                .count(1)
                .network_configuration(NetworkConfiguration::builder().awsvpc_configuration(vpc.clone()).build())
                .overrides(TaskOverride::builder().container_overrides(self.container_override(job)).build())
                .started_by(job.run_id.to_string())
                .tags(Tag::builder().key("agenteval:run").value(job.run_id.to_string()).build())
                .tags(Tag::builder().key("agenteval:job").value(format!("{}/{}", job.job_id, job.attempt)).build());
            req = if s.spot {
                req.capacity_provider_strategy(
                    CapacityProviderStrategyItem::builder()
                        .capacity_provider("FARGATE_SPOT")
                        .weight(1)
                        .build()
                        .map_err(|e| Error::invalid(format!("capacity provider: {e}")))?,
                )
            } else {
                req.launch_type(LaunchType::Fargate)
            };
            self.count(|c| c.run_task += 1);
            let out = match req.send().await {
                Ok(o) => o,
                Err(e) => {
                    let err = classify(&format!("starting job {}", job.job_id), e);
                    if err.kind() == ErrorKind::Transient && attempt < 6 {
                        tracing::warn!(job = %job.job_id, "RunTask failed, retrying: {err}");
                        self.count(|c| c.launch_retries += 1);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(20));
                        continue;
                    }
                    return Err(err);
                }
            };
            if let Some(task) = out.tasks().first() {
                let arn = task.task_arn().ok_or_else(|| Error::internal("RunTask returned a task without an ARN"))?;
                return Ok(JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id: arn.to_string() });
            }
            let reason = out
                .failures()
                .iter()
                .map(|f| format!("{} {}", f.reason().unwrap_or(""), f.detail().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("; ");
            if retryable_launch_failure(&reason) && attempt < 6 {
                tracing::warn!(job = %job.job_id, "RunTask could not place the task, retrying: {reason}");
                self.count(|c| c.launch_retries += 1);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(20));
                continue;
            }
            let kind = if retryable_launch_failure(&reason) { ErrorKind::Transient } else { ErrorKind::Invalid };
            return Err(Error::new(kind, format!("RunTask failed for job {}: {reason}", job.job_id)));
        }
        Err(Error::new(ErrorKind::Transient, format!("RunTask kept failing for job {}", job.job_id)))
    }

    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>> {
        let mut by_arn: HashMap<String, JobStatus> = HashMap::new();
        for chunk in handles.chunks(100) {
            let arns: Vec<String> = chunk.iter().map(|h| h.native_id.clone()).collect();
            self.count(|c| c.describe_tasks += 1);
            let out = self
                .clients
                .ecs
                .describe_tasks()
                .cluster(&self.settings.cluster)
                .set_tasks(Some(arns))
                .send()
                .await
                .map_err(|e| classify("describing jobs", e))?;
            for t in out.tasks() {
                if let Some(arn) = t.task_arn() {
                    by_arn.insert(arn.to_string(), self.status_of_task(t));
                }
            }
        }
        let mut missing = self.missing_since.lock().expect("missing lock");
        Ok(handles
            .iter()
            .map(|h| match by_arn.remove(&h.native_id) {
                Some(st) => {
                    missing.remove(&h.native_id);
                    st
                }
                None => {
                    // Eventual consistency can hide a just-started task for a moment.
                    let since = *missing.entry(h.native_id.clone()).or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(60) {
                        JobStatus::Failed {
                            exit_code: None,
                            reason: "ECS no longer knows the task".into(),
                            infrastructure: true,
                        }
                    } else {
                        JobStatus::Queued
                    }
                }
            })
            .collect())
    }

    async fn cancel_job(&self, handle: &JobHandle, reason: &str) -> Result<()> {
        self.count(|c| c.stop_task += 1);
        let reason: String = reason.chars().take(255).collect();
        match self
            .clients
            .ecs
            .stop_task()
            .cluster(&self.settings.cluster)
            .task(&handle.native_id)
            .reason(reason)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = classify(&format!("stopping job {}", handle.job_id), e);
                // Stopping a task that is already gone is not an error.
                if matches!(err.kind(), ErrorKind::NotFound) { Ok(()) } else { Err(err) }
            }
        }
    }

    async fn fetch_secret(&self, name: &str) -> Result<Secret> {
        if let Some(s) = self.secrets.lock().expect("secrets lock").get(name) {
            return Ok(s.clone());
        }
        self.count(|c| c.get_secret += 1);
        let out = self
            .clients
            .secrets
            .get_secret_value()
            .secret_id(name)
            .send()
            .await
            .map_err(|e| classify(&format!("reading secret `{name}`"), e))?;
        let value = out
            .secret_string()
            .map(str::to_string)
            .or_else(|| out.secret_binary().map(|b| String::from_utf8_lossy(b.as_ref()).into_owned()))
            .ok_or_else(|| Error::not_found(format!("secret `{name}` has no value")))?;
        let secret = Secret::new(value);
        self.secrets.lock().expect("secrets lock").insert(name.to_string(), secret.clone());
        Ok(secret)
    }

    async fn export_telemetry(&self, run: &RunId, snapshot: &TelemetrySnapshot) -> Result<()> {
        let mut buf = self.telemetry.lock().await;
        serde_json::to_writer(&mut *buf, snapshot).map_err(|e| Error::json("encoding telemetry", e))?;
        buf.push(b'\n');
        self.store.put(run, layout::TELEMETRY, &buf).await
    }

    async fn wait_for_change(&self, timeout: Duration) {
        tokio::time::sleep(timeout.max(self.settings.poll)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_token_bucket_allows_a_burst_then_paces() {
        let b = TokenBucket::new(5, 50.0);
        let start = Instant::now();
        for _ in 0..5 {
            b.take().await;
        }
        assert!(start.elapsed() < Duration::from_millis(20), "burst is immediate");
        for _ in 0..10 {
            b.take().await;
        }
        let e = start.elapsed();
        assert!(e >= Duration::from_millis(180), "10 more at 50/s take about 200 ms, took {e:?}");
    }

    #[test]
    fn capacity_failures_are_retryable() {
        assert!(retryable_launch_failure("Capacity is unavailable at this time"));
        assert!(retryable_launch_failure("RESOURCE:MEMORY"));
        assert!(!retryable_launch_failure("MISSING"));
    }
}
