//! `CloudBackend` on ECS Fargate: each job is a `RunTask` of the agenteval image running
//! `agenteval worker --job s3://…/job.json`, paced under the launch quota.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use agenteval_core::layout;
use agenteval_core::model::{JobHandle, JobSpec, JobStatus};
use agenteval_core::traits::{BundleStore, CloudBackend};
use agenteval_core::{Error, ErrorKind, Result};
use async_trait::async_trait;
use aws_sdk_ecs::types::{
    AssignPublicIp, AwsVpcConfiguration, CapacityProviderStrategyItem, ContainerOverride, KeyValuePair, LaunchType,
    NetworkConfiguration, Tag, TaskOverride,
};

use crate::s3_store::S3BundleStore;
use crate::sdk::{AwsClients, classify, unparsed_success};

use agenteval_core::traits::worker_exit;

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
    /// A Spot launch that fails goes on on-demand Fargate for a while (`aws.spot_fallback`).
    pub spot_fallback: bool,
    pub launch_burst: u32,
    pub launch_per_second: f64,
    pub poll: Duration,
    /// Extra environment for every worker (region, endpoint).
    pub worker_env: BTreeMap<String, String>,
    /// Where the tasks' environment images are (`aws.image_repository`).
    pub image_repository: Option<String>,
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
    pub launch_retries: u64,
    /// Task definitions registered for task images, and reads of task definitions.
    pub register_task_definition: u64,
    pub describe_task_definition: u64,
    /// Image lookups in the registry (ECR DescribeImages or a registry's manifest).
    pub describe_images: u64,
}

/// What the backend needs of an ECS task, read from the SDK's typed output or, when the SDK
/// cannot parse a 200 response (emulators send `cpu`/`memory` as numbers where ECS sends
/// strings), from the raw JSON: a tolerant reader, so an answer that did arrive is never
/// mistaken for a failure (a mistaken RunTask failure would launch the job twice).
#[derive(Debug, Clone, Default, PartialEq)]
struct TaskView {
    arn: String,
    last_status: String,
    stop_code: String,
    stopped_reason: String,
    exit_code: Option<i32>,
}

impl TaskView {
    fn from_sdk(t: &aws_sdk_ecs::types::Task, container: &str) -> Self {
        let c = t.containers().iter().find(|c| c.name() == Some(container)).or_else(|| t.containers().first());
        TaskView {
            arn: t.task_arn().unwrap_or_default().to_string(),
            last_status: t.last_status().unwrap_or_default().to_string(),
            stop_code: t.stop_code().map(|c| c.as_str().to_string()).unwrap_or_default(),
            stopped_reason: t.stopped_reason().unwrap_or_default().to_string(),
            exit_code: c.and_then(|c| c.exit_code()),
        }
    }

    fn from_json(t: &serde_json::Value, container: &str) -> Self {
        let str_of = |k: &str| t.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let containers = t.get("containers").and_then(|c| c.as_array()).cloned().unwrap_or_default();
        let c = containers
            .iter()
            .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(container))
            .or(containers.first());
        TaskView {
            arn: str_of("taskArn"),
            last_status: str_of("lastStatus"),
            stop_code: str_of("stopCode"),
            stopped_reason: str_of("stoppedReason"),
            exit_code: c.and_then(|c| c.get("exitCode")).and_then(|v| v.as_i64()).map(|v| v as i32),
        }
    }
}

fn failures_text(failures: impl Iterator<Item = (String, String)>) -> String {
    failures.map(|(r, d)| format!("{r} {d}").trim().to_string()).collect::<Vec<_>>().join("; ")
}

type RunTaskResult = std::result::Result<
    aws_sdk_ecs::operation::run_task::RunTaskOutput,
    aws_sdk_ecs::error::SdkError<
        aws_sdk_ecs::operation::run_task::RunTaskError,
        aws_sdk_ecs::config::http::HttpResponse,
    >,
>;

/// What a RunTask answered: the tasks it started and its `failures[]` in one line, read from
/// the typed answer or from an emulator's the SDK could not parse; `Err` is the call failing,
/// classified (`what` names the launch).
pub(crate) fn run_task_answer(answer: RunTaskResult, what: &str) -> Result<(Vec<String>, String)> {
    match answer {
        Ok(o) => Ok((
            o.tasks().iter().filter_map(|t| t.task_arn().map(str::to_string)).collect(),
            failures_text(
                o.failures()
                    .iter()
                    .map(|f| (f.reason().unwrap_or("").to_string(), f.detail().unwrap_or("").to_string())),
            ),
        )),
        Err(e) => {
            let Some(v) = unparsed_success(&e) else { return Err(classify(what, e)) };
            let arns = v["tasks"]
                .as_array()
                .map(|ts| ts.iter().filter_map(|t| t["taskArn"].as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            let failures = v["failures"]
                .as_array()
                .map(|fs| {
                    failures_text(fs.iter().map(|f| {
                        (f["reason"].as_str().unwrap_or("").to_string(), f["detail"].as_str().unwrap_or("").to_string())
                    }))
                })
                .unwrap_or_default();
            Ok((arns, failures))
        }
    }
}

pub struct EcsBackend {
    clients: Arc<AwsClients>,
    settings: EcsSettings,
    store: S3BundleStore,
    bucket: TokenBucket,
    calls: Mutex<CallCounts>,
    /// When each task was first seen missing from DescribeTasks (AWS forgets stopped tasks
    /// after about an hour; an emulator may not know a task at all).
    missing_since: Mutex<HashMap<String, Instant>>,
    /// The task definitions of task images.
    task_defs: crate::task_images::TaskDefinitions,
    /// Until when Spot launches go on on-demand Fargate instead (`aws.spot_fallback`).
    on_demand_until: Mutex<Option<Instant>>,
    /// Launches ECS refused for now (throttled, no capacity) since the controller last asked,
    /// and what the last one said: its concurrency backs off on them (`pressure`).
    refused: Mutex<(u64, String)>,
}

/// How long launches stay on on-demand Fargate after a Spot launch failed, before Spot is tried
/// again.
const SPOT_PAUSE: Duration = Duration::from_secs(300);
/// RunTask calls for one job per `submit_job`: the controller retries a launch that keeps
/// failing, within its launch deadline, so this only rides out a blip.
const LAUNCH_TRIES: u32 = 3;

impl std::fmt::Debug for EcsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EcsBackend").field("cluster", &self.settings.cluster).finish()
    }
}

/// An idempotency token for one attempt of one job (ECS allows 64 characters).
fn client_token(job: &JobSpec) -> String {
    let run = job.run_id.to_string().replace('-', "");
    let t = format!("{run}-{}-{}", job.job_id, job.attempt);
    t.chars().take(64).collect()
}

/// Failures of `RunTask` worth retrying: capacity and throttling.
pub(crate) fn retryable_launch_failure(reason: &str) -> bool {
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
            calls: Mutex::new(CallCounts::default()),
            missing_since: Mutex::new(HashMap::new()),
            task_defs: Default::default(),
            on_demand_until: Mutex::new(None),
            refused: Mutex::new((0, String::new())),
        }
    }

    /// A launch ECS refused for now, for the controller's concurrency.
    fn refused_for_now(&self, said: &str) {
        let mut r = self.refused.lock().expect("refused lock");
        r.0 += 1;
        r.1 = said.chars().take(200).collect();
    }

    /// Whether Spot launches are paused for on-demand ones after a Spot launch failed.
    fn spot_paused(&self) -> bool {
        let mut until = self.on_demand_until.lock().expect("spot lock");
        match *until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *until = None;
                tracing::info!("trying Fargate Spot again");
                false
            }
            None => false,
        }
    }

    /// After a Spot launch failed with `why`: whether launches go on on-demand Fargate now
    /// (`aws.spot_fallback`), said once per switch.
    fn fall_back_from_spot(&self, why: &str) -> bool {
        if !self.settings.spot_fallback {
            return false;
        }
        let mut until = self.on_demand_until.lock().expect("spot lock");
        if until.is_none() {
            tracing::warn!(
                "Fargate Spot launch failed ({why}); launching on on-demand Fargate for the next {} minutes (aws.spot_fallback)",
                SPOT_PAUSE.as_secs() / 60
            );
        }
        *until = Some(Instant::now() + SPOT_PAUSE);
        true
    }

    pub fn calls(&self) -> CallCounts {
        use std::sync::atomic::Ordering::Relaxed;
        let mut c = self.calls.lock().expect("calls lock").clone();
        c.register_task_definition = self.task_defs.registered.load(Relaxed);
        c.describe_task_definition = self.task_defs.described.load(Relaxed);
        c
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

    fn status_of_task(t: &TaskView) -> JobStatus {
        match t.last_status.as_str() {
            "PROVISIONING" | "PENDING" | "ACTIVATING" => JobStatus::Queued,
            "STOPPED" => {
                let exit = t.exit_code;
                let reason = &t.stopped_reason;
                let infra = |why: String| JobStatus::Failed { exit_code: exit, reason: why, infrastructure: true };
                match (t.stop_code.as_str(), exit) {
                    ("SpotInterruption", _) => infra(format!("Fargate Spot interruption: {reason}")),
                    ("TaskFailedToStart", _) => infra(format!("task failed to start: {reason}")),
                    _ => worker_exit::job_status(exit, Some(reason), || "task stopped without an exit code".into()),
                }
            }
            _ => JobStatus::Running,
        }
    }
}

#[async_trait]
impl CloudBackend for EcsBackend {
    /// What ECS's refusal of RunTask names: the task definition, the cluster, the network.
    fn launch_field(&self, error: &Error) -> &'static str {
        let r = error.to_string().to_ascii_lowercase();
        if r.contains("task definition") || r.contains("taskdefinition") {
            "aws.task_definition"
        } else if r.contains("cluster") {
            "aws.cluster"
        } else if r.contains("subnet") || r.contains("security group") {
            "aws.subnets / aws.security_groups"
        } else {
            "aws"
        }
    }

    fn id(&self) -> &str {
        "aws"
    }

    // Long: one RunTask with its retries: the task definition and size, the request, and each
    // way an answer can come back (typed, unparsed, failures), in the order they are tried.
    async fn submit_job(&self, job: &JobSpec) -> Result<JobHandle> {
        let s = &self.settings;
        // A job of tasks in their own image runs in the worker's task definition like any other;
        // its tasks' environments are ECS tasks of that image's definition, which the worker
        // launches (`env_tasks`).
        let mut container = self.container_override(job);
        if let Some(image) = &job.image {
            // The tasks of one image share its folder, and so its compose services.
            let services = job.tasks.iter().find_map(|t| t.environment.as_ref()).map(crate::task_images::Services::of);
            let services = services.unwrap_or_default().with_secrets(&job.tool_secrets);
            let def = self.task_defs.for_image(&self.clients, &s.task_definition, image, &services).await?;
            let var = KeyValuePair::builder().name(crate::task_images::TASK_DEFINITION_ENV).value(def).build();
            container.environment.get_or_insert_with(Vec::new).push(var);
        }
        let overrides = TaskOverride::builder().container_overrides(container).build();
        let vpc = AwsVpcConfiguration::builder()
            .set_subnets(Some(s.subnets.clone()))
            .set_security_groups(Some(s.security_groups.clone()))
            .assign_public_ip(if s.assign_public_ip { AssignPublicIp::Enabled } else { AssignPublicIp::Disabled })
            .build()
            .map_err(|e| Error::invalid(format!("network configuration: {e}")))?;
        let mut backoff = Duration::from_millis(500);
        let mut attempt = 0;
        while attempt < LAUNCH_TRIES {
            attempt += 1;
            let spot = s.spot && !self.spot_paused();
            self.bucket.take().await;
            let mut req = self
                .clients
                .ecs
                .run_task()
                .cluster(&s.cluster)
                .task_definition(&s.task_definition)
                .count(1)
                .network_configuration(NetworkConfiguration::builder().awsvpc_configuration(vpc.clone()).build())
                .overrides(overrides.clone())
                .started_by(job.run_id.to_string())
                // Retries of one job attempt are the same request: ECS starts it at most once.
                .client_token(client_token(job))
                .tags(Tag::builder().key("agenteval:run").value(job.run_id.to_string()).build())
                .tags(Tag::builder().key("agenteval:job").value(format!("{}/{}", job.job_id, job.attempt)).build());
            req = if spot {
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
            let (arns, failures) = match run_task_answer(req.send().await, &format!("starting job {}", job.job_id)) {
                Ok(answer) => answer,
                Err(err) => {
                    if spot && err.kind() == ErrorKind::Transient && self.fall_back_from_spot(&err.to_string()) {
                        // The on-demand launch is a try of its own.
                        attempt -= 1;
                        continue;
                    }
                    if err.kind() == ErrorKind::Transient {
                        self.refused_for_now(&err.to_string());
                    }
                    if err.kind() == ErrorKind::Transient && attempt < LAUNCH_TRIES {
                        tracing::warn!(job = %job.job_id, "RunTask failed, retrying: {err}");
                        self.count(|c| c.launch_retries += 1);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(20));
                        continue;
                    }
                    return Err(err);
                }
            };
            if let Some(arn) = arns.into_iter().next() {
                return Ok(JobHandle { job_id: job.job_id.clone(), attempt: job.attempt, native_id: arn });
            }
            let reason = failures;
            if retryable_launch_failure(&reason) {
                self.refused_for_now(&reason);
            }
            if spot && retryable_launch_failure(&reason) && self.fall_back_from_spot(&reason) {
                attempt -= 1;
                continue;
            }
            if retryable_launch_failure(&reason) && attempt < LAUNCH_TRIES {
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

    async fn pressure(&self) -> Option<String> {
        let (n, said) = std::mem::take(&mut *self.refused.lock().expect("refused lock"));
        (n > 0).then(|| format!("ECS refused {n} launch{} for now ({said})", if n == 1 { "" } else { "es" }))
    }

    async fn job_status(&self, handles: &[JobHandle]) -> Result<Vec<JobStatus>> {
        let mut by_arn: HashMap<String, JobStatus> = HashMap::new();
        for chunk in handles.chunks(100) {
            let arns: Vec<String> = chunk.iter().map(|h| h.native_id.clone()).collect();
            self.count(|c| c.describe_tasks += 1);
            let res =
                self.clients.ecs.describe_tasks().cluster(&self.settings.cluster).set_tasks(Some(arns)).send().await;
            let views: Vec<TaskView> = match res {
                Ok(out) => out.tasks().iter().map(|t| TaskView::from_sdk(t, &self.settings.container_name)).collect(),
                Err(e) => match unparsed_success(&e) {
                    Some(v) => v["tasks"]
                        .as_array()
                        .map(|ts| ts.iter().map(|t| TaskView::from_json(t, &self.settings.container_name)).collect())
                        .unwrap_or_default(),
                    None => return Err(classify("describing jobs", e)),
                },
            };
            for t in views {
                by_arn.insert(t.arn.clone(), Self::status_of_task(&t));
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
            Err(e) if unparsed_success(&e).is_some() => Ok(()),
            Err(e) => {
                let err = classify(&format!("stopping job {}", handle.job_id), e);
                // Stopping a task that is already gone is not an error.
                if matches!(err.kind(), ErrorKind::NotFound) { Ok(()) } else { Err(err) }
            }
        }
    }

    async fn task_images(&self, images: &[String]) -> Result<Option<BTreeMap<String, String>>> {
        let mut out = BTreeMap::new();
        if images.is_empty() {
            return Ok(Some(out));
        }
        let repo = self.settings.image_repository.as_deref().ok_or_else(|| {
            Error::invalid(
                "the tasks act in their own images: set aws.image_repository to the repository they are pushed to (agenteval images build --config FILE --push REPOSITORY)",
            )
        })?;
        let repo = crate::registry::ImageRepository::parse(repo)?;
        let mut missing = Vec::new();
        for local in images {
            let Some(reference) = repo.reference(local) else {
                // An image the task names itself (a public one) runs as it is.
                out.insert(local.clone(), local.clone());
                continue;
            };
            self.count(|c| c.describe_images += 1);
            match repo.digest(&self.clients, &reference).await? {
                Some(d) if !d.is_empty() => {
                    out.insert(local.clone(), format!("{}@{d}", repo.uri));
                }
                Some(_) => {
                    out.insert(local.clone(), reference);
                }
                None => missing.push(reference),
            }
        }
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "{} image(s) the run needs are not in {}: {} (build and push them: agenteval images build --config FILE --push {})",
                missing.len(),
                repo.uri,
                missing.join(", "),
                repo.uri
            )));
        }
        Ok(Some(out))
    }

    async fn wait_for_change(&self, timeout: Duration) {
        tokio::time::sleep(timeout.max(self.settings.poll)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a paused clock, so the figures are exact whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn the_token_bucket_allows_a_burst_then_paces() {
        let b = TokenBucket::new(5, 50.0);
        let start = Instant::now();
        for _ in 0..5 {
            b.take().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is immediate");
        for _ in 0..10 {
            b.take().await;
        }
        let e = start.elapsed();
        assert!((Duration::from_millis(199)..=Duration::from_millis(201)).contains(&e), "10 more at 50/s: {e:?}");
    }

    fn stopped(stop_code: &str, exit: Option<i32>) -> TaskView {
        TaskView {
            arn: "arn:aws:ecs:us-east-1:1:task/c/abc".into(),
            last_status: "STOPPED".into(),
            stop_code: stop_code.into(),
            stopped_reason: "why".into(),
            exit_code: exit,
        }
    }

    #[test]
    fn every_way_a_task_stops_maps_to_a_job_status() {
        let infra = |st: JobStatus| matches!(st, JobStatus::Failed { infrastructure: true, .. });
        let status = |v: &TaskView| EcsBackend::status_of_task(v);
        for pending in ["PROVISIONING", "PENDING", "ACTIVATING"] {
            let v = TaskView { last_status: pending.into(), ..Default::default() };
            assert_eq!(status(&v), JobStatus::Queued, "{pending}");
        }
        for running in ["RUNNING", "DEACTIVATING", "STOPPING", "DEPROVISIONING"] {
            let v = TaskView { last_status: running.into(), ..Default::default() };
            assert_eq!(status(&v), JobStatus::Running, "{running}");
        }
        assert_eq!(status(&stopped("EssentialContainerExited", Some(0))), JobStatus::Succeeded);
        assert_eq!(status(&stopped("EssentialContainerExited", Some(worker_exit::CANCELLED))), JobStatus::Cancelled);
        let bad = status(&stopped("EssentialContainerExited", Some(worker_exit::BAD_JOB)));
        assert!(matches!(bad, JobStatus::Failed { infrastructure: false, exit_code: Some(2), .. }), "{bad:?}");
        // A Spot interruption or a failed start is the infrastructure's, whatever the exit code.
        let spot = status(&stopped("SpotInterruption", Some(0)));
        assert!(infra(spot.clone()), "{spot:?}");
        assert!(format!("{spot:?}").contains("Spot interruption"));
        assert!(infra(status(&stopped("TaskFailedToStart", None))));
        assert!(infra(status(&stopped("EssentialContainerExited", Some(137)))));
        assert!(infra(status(&stopped("UserInitiated", None))));
        assert!(infra(status(&stopped("", Some(worker_exit::FAILED)))));
    }

    /// A DescribeTasks answer as ECS sends it, read by the SDK and by the raw-JSON fallback.
    const DESCRIBED: &str = r#"{"tasks": [{
        "taskArn": "arn:aws:ecs:us-east-1:123456789012:task/agenteval/0a1b2c",
        "lastStatus": "STOPPED", "stopCode": "SpotInterruption",
        "stoppedReason": "Your Spot Task was interrupted.", "cpu": "1024", "memory": "2048",
        "containers": [
            {"name": "adot-collector", "exitCode": 0},
            {"name": "agenteval", "exitCode": 143}
        ]}], "failures": []}"#;

    #[test]
    fn typed_and_raw_responses_read_the_same() {
        let v: serde_json::Value = serde_json::from_str(DESCRIBED).unwrap();
        let raw = TaskView::from_json(&v["tasks"][0], "agenteval");
        assert_eq!(raw.exit_code, Some(143), "the worker's container, not the sidecar");
        assert_eq!((raw.last_status.as_str(), raw.stop_code.as_str()), ("STOPPED", "SpotInterruption"));
        let task = aws_sdk_ecs::types::Task::builder()
            .task_arn(raw.arn.clone())
            .last_status("STOPPED")
            .stop_code(aws_sdk_ecs::types::TaskStopCode::SpotInterruption)
            .stopped_reason("Your Spot Task was interrupted.")
            .containers(aws_sdk_ecs::types::Container::builder().name("adot-collector").exit_code(0).build())
            .containers(aws_sdk_ecs::types::Container::builder().name("agenteval").exit_code(143).build())
            .build();
        assert_eq!(TaskView::from_sdk(&task, "agenteval"), raw);
        // Emulators send numbers where ECS sends strings; the fallback does not care.
        let moto = DESCRIBED.replace("\"1024\"", "1024").replace("\"2048\"", "2048");
        let v: serde_json::Value = serde_json::from_str(&moto).unwrap();
        assert_eq!(TaskView::from_json(&v["tasks"][0], "agenteval"), raw);
        // A task without the named container reads its first one.
        assert_eq!(TaskView::from_json(&v["tasks"][0], "missing").exit_code, Some(0));
    }

    #[test]
    fn capacity_failures_are_retryable() {
        assert!(retryable_launch_failure("Capacity is unavailable at this time"));
        assert!(retryable_launch_failure("RESOURCE:MEMORY"));
        assert!(!retryable_launch_failure("MISSING"));
    }
}
