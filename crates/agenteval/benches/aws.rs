//! AWS benchmark against the emulator (moto, started here, or `AWS_ENDPOINT_URL`):
//!
//! 1. AWS API calls per task of a 1,000-task run (every call the controller and the workers
//!    make goes through a counting proxy), and their request cost per 1,000 tasks at list
//!    prices, compute excluded;
//! 2. launch pacing: 2,000 jobs through the ECS backend with the quota set to burst 100 /
//!    20 per second, with every 25th RunTask throttled by the proxy — expected ≈ (2000-100)/20
//!    = 95 s and zero errors surfacing;
//! 3. task images: 1,000 Harbor-like tasks over 10 images (an ECR repository in the emulator)
//!    dispatched through the ECS backend in jobs of 10 tasks of one image: the ECS and ECR
//!    calls per task, and the task definitions registered (target: 10, one per image);
//! 4. environments on the Fargate stand-in with the Docker engine (`AGENTEVAL_BENCH_ONLY=
//!    environments`, not in the default set): 50 Harbor tasks, each acting in an environment
//!    task of its own (`docs/aws.md`), with the `nop` agent: per task, the time from the task's
//!    start to its result (launching the environment task, its dial-in, the snapshot, the
//!    tests, the patch, the stop: the layout's overhead, nothing of an agent's), median and
//!    p95, next to the same tasks on the local backend's Docker environments; and the AWS calls
//!    per task (controller and workers), through the counting proxy.
//!
//! Run with `cargo bench -p agenteval --bench aws`. `AGENTEVAL_BENCH_SCALE=0.1` shrinks both.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenteval_aws::{AwsClients, AwsSettings, DynamoDbRunIndex, EcsBackend, EcsSettings, S3BundleStore};
use agenteval_core::traits::CloudBackend;
use agenteval_testkit::emulator;
use util::{BIN, Children, fault_proxy, python, read_json};

#[path = "../tests/it/util/mod.rs"]
mod util;

fn proxy(endpoint: &str, stats: &Path, throttle_every: u32, kill: &mut Children) -> String {
    let every = throttle_every.to_string();
    let (child, url) =
        fault_proxy(&["--target", endpoint, "--throttle-every", &every, "--stats", stats.to_str().unwrap()]);
    kill.0.push(child);
    url
}

/// US East list prices per request (2026): S3 PUT/LIST $0.005 per 1,000, GET/HEAD $0.0004 per
/// 1,000; DynamoDB on-demand $0.625 per million write units and $0.125 per million read units
/// (items here are under 1 KB: one unit per write, half a unit per eventually consistent read);
/// Secrets Manager $0.05 per 10,000 calls; ECS API calls are free.
fn price(op: &str) -> f64 {
    match op {
        "s3.PutObject" | "s3.UploadPart" | "s3.ListObjectsV2" | "s3.POST" => 0.005 / 1000.0,
        "s3.GetObject" | "s3.HeadObject" => 0.0004 / 1000.0,
        o if o.starts_with("dynamodb.")
            && (o.ends_with("Item") || o.ends_with("BatchWriteItem"))
            && !o.ends_with("GetItem") =>
        {
            0.625 / 1e6
        }
        o if o.starts_with("dynamodb.") => 0.125 / 1e6,
        o if o.starts_with("secretsmanager.") => 0.05 / 10_000.0,
        _ => 0.0,
    }
}

struct Setup {
    subnet: String,
    sg: String,
    td: String,
    /// The environments' security groups: (no network, public).
    env_groups: (String, String),
}

/// The ECS backend's settings for a cluster `setup` made, launching at `(burst, per second)`.
fn ecs_settings(cluster: String, s: Setup, pacing: (u32, f64), image_repository: Option<String>) -> EcsSettings {
    EcsSettings {
        cluster,
        task_definition: s.td,
        container_name: "agenteval".into(),
        subnets: vec![s.subnet],
        security_groups: vec![s.sg],
        assign_public_ip: false,
        spot: false,
        spot_fallback: true,
        launch_burst: pacing.0,
        launch_per_second: pacing.1,
        poll: Duration::from_secs(1),
        worker_env: BTreeMap::new(),
        image_repository,
    }
}

/// The binary with the emulator's credentials, as every command of this bench runs it.
fn agenteval() -> Command {
    let mut c = Command::new(BIN);
    c.env("AWS_ACCESS_KEY_ID", "test").env("AWS_SECRET_ACCESS_KEY", "test").env("AWS_EC2_METADATA_DISABLED", "true");
    c
}

fn setup(endpoint: &str, cluster: &str, bucket: Option<&str>) -> Setup {
    let mut c = python("setup_emulator.py");
    c.args(["--endpoint", endpoint, "--cluster", cluster]);
    if let Some(b) = bucket {
        c.args(["--bucket", b]);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Setup {
        subnet: v["subnet"].as_str().unwrap().into(),
        sg: v["security_group"].as_str().unwrap().into(),
        td: v["task_definition"].as_str().unwrap().into(),
        env_groups: (
            v["environment_groups"]["no_network"].as_str().unwrap().into(),
            v["environment_groups"]["public"].as_str().unwrap().into(),
        ),
    }
}

async fn api_calls(endpoint: &str, tasks: u64, per_job: u64, dir: &Path) {
    let bucket = emulator::unique("bench-bundles");
    let table = emulator::unique("bench-runs");
    let cluster = emulator::unique("bench-fleet");
    let clients = AwsClients::connect(&AwsSettings::emulator(endpoint)).await;
    DynamoDbRunIndex::new(clients, &table).create_table().await.unwrap();
    let s = setup(endpoint, &cluster, Some(&bucket));
    let mut kill = Children(vec![]);
    let stats = dir.join(format!("proxy-{per_job}.json"));
    let counted = proxy(endpoint, &stats, 0, &mut kill);
    let ready = dir.join(format!("fargate-{per_job}.json"));
    kill.0.push(
        python("fake_fargate.py")
            .args(["--endpoint", endpoint, "--cluster", &cluster, "--agenteval", BIN])
            .args(["--stats", ready.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Tasks launched before the stand-in holds them RUNNING would run through their states alone.
    while !ready.exists() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let cfg = dir.join(format!("bench-{per_job}.yaml"));
    std::fs::write(
        &cfg,
        format!(
            r#"name: bench-aws
benchmark:
  kind: toy
  size: {tasks}
  latency_ms: 0
  slow_ms: 0
agent:
  kind: mock
  limits:
    max_tokens: 5000
evaluators:
  - kind: no_error
backend:
  id: aws
  max_concurrent_jobs: 16
  concurrency: fixed
  tasks_per_job: {per_job}
storage:
  bundle_root: s3://{bucket}/runs
  index: dynamodb://{table}
aws:
  region: us-east-1
  endpoint_url: {counted}
  cluster: {cluster}
  task_definition: {td}
  subnets: [{subnet}]
  security_groups: [{sg}]
  poll_seconds: 0.5
"#,
            td = s.td,
            subnet = s.subnet,
            sg = s.sg
        ),
    )
    .unwrap();
    let start = Instant::now();
    let out = agenteval().args(["submit", "--json", "--config", cfg.to_str().unwrap()]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("submit --json");
    assert_eq!(v["status"], "complete", "{v}");
    std::thread::sleep(Duration::from_millis(600));
    let ops: BTreeMap<String, u64> = serde_json::from_value(read_json(&stats)["ops"].clone()).unwrap();
    println!("\n{tasks} tasks, {per_job} per job: {:.1} s against the emulator", start.elapsed().as_secs_f64());
    println!("{:<32} {:>10} {:>12} {:>16}", "operation", "calls", "per task", "USD per 1k tasks");
    let mut total = 0.0;
    for (op, n) in &ops {
        let cost = *n as f64 * price(op) * 1000.0 / tasks as f64;
        total += cost;
        println!("{op:<32} {n:>10} {:>12.3} {cost:>16.6}", *n as f64 / tasks as f64);
    }
    let calls: u64 = ops.values().sum();
    println!("{:<32} {calls:>10} {:>12.3} {total:>16.6}", "total", calls as f64 / tasks as f64);
}

async fn pacing(endpoint: &str, jobs: u32, dir: &Path) {
    let cluster = emulator::unique("bench-pace");
    let s = setup(endpoint, &cluster, None);
    let mut kill = Children(vec![]);
    let stats = dir.join("pacing-proxy.json");
    let throttled = proxy(endpoint, &stats, 25, &mut kill);
    let clients = AwsClients::connect(&AwsSettings::emulator(&throttled)).await;
    let settings = ecs_settings(cluster, s, (100, 20.0), None);
    let backend = Arc::new(EcsBackend::new(clients.clone(), settings, S3BundleStore::new(clients, "unused", "runs")));
    let run = agenteval_core::RunId::new();
    // The controller dispatches up to 32 jobs at once; the backend's token bucket sets the pace.
    use futures::StreamExt;
    let start = Instant::now();
    let results: Vec<bool> = futures::stream::iter(0..jobs)
        .map(|i| {
            let backend = backend.clone();
            async move {
                let job = agenteval_core::model::JobSpec {
                    schema_version: agenteval_core::SCHEMA_VERSION.into(),
                    run_id: run,
                    job_id: agenteval_core::JobId::numbered(0, i as usize + 1),
                    attempt: 1,
                    epoch: 0,
                    tasks: vec![],
                    bundle_uri: "s3://unused/runs".into(),
                    index_uri: "dynamodb://unused".into(),
                    env: BTreeMap::new(),
                    image: None,
                    ledger: None,
                    tool_secrets: Default::default(),
                };
                backend.submit_job(&job).await.is_ok()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let errors = results.iter().filter(|ok| !**ok).count();
    let secs = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(600));
    let p = read_json(&stats);
    let expected = (jobs.saturating_sub(100)) as f64 / 20.0;
    // The figures mean something only if every launch went through and the proxy did throttle.
    assert_eq!(errors, 0, "launches failed: the SDK's retries did not absorb the throttling");
    assert!(p["throttled"].as_u64().unwrap_or(0) > 0, "the proxy throttled nothing: {p}");
    println!(
        "\nlaunch pacing: {jobs} jobs in {secs:.1} s (expected ≈ {expected:.1} s at burst 100, 20/s); throttled by the proxy: {}; errors surfaced: {errors}; calls: {:?}",
        p["throttled"],
        backend.calls()
    );
}

#[tokio::main]
async fn main() {
    let scale: f64 = std::env::var("AGENTEVAL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let n = |x: f64| ((x * scale) as u64).max(10);
    let endpoint = emulator::endpoint().to_string();
    let dir = tempfile::tempdir().unwrap();
    // AGENTEVAL_BENCH_ONLY=calls or =pacing runs one part (the emulator is slow: the
    // 1,000-task runs take minutes each).
    let only = std::env::var("AGENTEVAL_BENCH_ONLY").unwrap_or_default();
    println!("agenteval AWS benchmark against {endpoint}");
    if only.is_empty() || only == "calls" {
        api_calls(&endpoint, n(1000.0), 10, dir.path()).await;
        api_calls(&endpoint, n(1000.0), 1, dir.path()).await;
    }
    if only.is_empty() || only == "pacing" {
        pacing(&endpoint, n(2000.0) as u32, dir.path()).await;
    }
    if only.is_empty() || only == "images" {
        task_images(&endpoint, n(1000.0), 10).await;
    }
    if only == "environments" {
        environments(&endpoint, n(50.0), dir.path()).await;
    }
}

/// Median and p95.
fn quantiles(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

/// Each task's time from its start to its result, read back with `show`.
fn task_seconds(run: &str, tasks: u64, place: &[&str], env: &[(&str, &str)]) -> Vec<f64> {
    (0..tasks)
        .map(|i| {
            let out = agenteval()
                .args(["show", run, &format!("t{i:03}"), "--json"])
                .args(place)
                .envs(env.iter().copied())
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("show --json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
            let at = |k: &str| chrono::DateTime::parse_from_rfc3339(v["result"][k].as_str().unwrap()).unwrap();
            (at("finished_at") - at("started_at")).as_seconds_f64()
        })
        .collect()
}

/// Section 4: the environment-task layout's per-task overhead on the stand-in, beside the local
/// backend's Docker environments, and the AWS calls per task.
async fn environments(endpoint: &str, tasks: u64, dir: &Path) {
    let bucket = emulator::unique("bench-bundles");
    let table = emulator::unique("bench-runs");
    let cluster = emulator::unique("bench-fleet");
    let clients = AwsClients::connect(&AwsSettings::emulator(endpoint)).await;
    DynamoDbRunIndex::new(clients, &table).create_table().await.unwrap();
    let s = setup(endpoint, &cluster, Some(&bucket));
    let root = dir.join("env-tasks");
    for i in 0..tasks {
        let t = root.join(format!("t{i:03}"));
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::write(t.join("instruction.md"), "Nothing to do.\n").unwrap();
        std::fs::write(
            t.join("task.toml"),
            "version = \"1.0\"\n[environment]\ndocker_image = \"agenteval-local/debian:bookworm\"\nworkdir = \"/root\"\n",
        )
        .unwrap();
        std::fs::write(
            t.join("tests/test.sh"),
            "#!/bin/bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n",
        )
        .unwrap();
    }
    let mut kill = Children(vec![]);
    let stats = dir.join("proxy-env.json");
    let counted = proxy(endpoint, &stats, 0, &mut kill);
    let ready = dir.join("fargate-env.json");
    kill.0.push(
        python("fake_fargate.py")
            .args(["--endpoint", endpoint, "--cluster", &cluster, "--agenteval", BIN])
            .args(["--stats", ready.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    while !ready.exists() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let cfg = dir.join("bench-env.yaml");
    let local = dir.join("local-runs");
    std::fs::write(
        &cfg,
        format!(
            r#"name: bench-env
benchmark:
  kind: harbor
  path: {path}
agent:
  kind: nop
backend:
  id: aws
  max_concurrent_jobs: 2
  tasks_per_job: 5
storage:
  bundle_root: s3://{bucket}/runs
  index: dynamodb://{table}
aws:
  region: us-east-1
  endpoint_url: {counted}
  cluster: {cluster}
  task_definition: {td}
  subnets: [{subnet}]
  security_groups: [{sg}]
  environment_security_groups:
    no_network: [{nn}]
    public: [{public}]
  image_repository: 127.0.0.1:9/unused
  poll_seconds: 0.5
"#,
            path = root.display(),
            td = s.td,
            subnet = s.subnet,
            sg = s.sg,
            nn = s.env_groups.0,
            public = s.env_groups.1,
        ),
    )
    .unwrap();
    let submit = |extra: &[&str]| {
        let out =
            agenteval().args(["submit", "--json", "--config", cfg.to_str().unwrap()]).args(extra).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("submit --json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["status"], "complete", "{v} {}", String::from_utf8_lossy(&out.stderr));
        v["run_id"].as_str().unwrap().to_string()
    };
    let index = format!("{}/index.sqlite", local.display());
    let local_run = submit(&[
        "--backend",
        "local",
        "--set",
        &format!("storage.bundle_root={}", local.display()),
        "--set",
        &format!("storage.index={index}"),
    ]);
    let started = Instant::now();
    let fleet_run = submit(&[]);
    let fleet_wall = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(600));
    let ops: BTreeMap<String, u64> = serde_json::from_value(read_json(&stats)["ops"].clone()).unwrap();
    let aws_env = [("AWS_ENDPOINT_URL", endpoint), ("AWS_REGION", "us-east-1")];
    let fleet = task_seconds(&fleet_run, tasks, &["--index", &format!("dynamodb://{table}")], &aws_env);
    let (fleet50, fleet95) = quantiles(fleet);
    let (local50, local95) = quantiles(task_seconds(&local_run, tasks, &["--index", &index], &[]));
    println!("\n{tasks} tasks, each in an environment of its own, the nop agent ({fleet_wall:.1} s on the stand-in)");
    println!("{:<48} {:>10} {:>10}", "seconds per task, start to result", "median", "p95");
    println!("{:<48} {fleet50:>10.2} {fleet95:>10.2}", "fleet: an ECS environment task each (stand-in)");
    println!("{:<48} {local50:>10.2} {local95:>10.2}", "local: a Docker container each");
    println!("{:<32} {:>10} {:>12}", "AWS operation", "calls", "per task");
    for (op, n) in &ops {
        println!("{op:<32} {n:>10} {:>12.3}", *n as f64 / tasks as f64);
    }
    let calls: u64 = ops.values().sum();
    println!("{:<32} {calls:>10} {:>12.3}", "total", calls as f64 / tasks as f64);
}

/// Dispatches `tasks` tasks over `images` images of an ECR repository through the ECS backend
/// (no worker runs: the figure is the controller's calls) and prints them per task.
async fn task_images(endpoint: &str, tasks: u64, images: u64) {
    let cluster = emulator::unique("bench-images");
    let s = setup(endpoint, &cluster, None);
    let clients = AwsClients::connect(&AwsSettings::emulator(endpoint)).await;
    let repo_name = emulator::unique("bench-envs");
    clients.ecr.create_repository().repository_name(&repo_name).send().await.unwrap();
    let mut local = Vec::new();
    for i in 0..images {
        let tag = format!("{i:016x}");
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 100 + i, "digest": format!("sha256:{:064x}", i + 1)},
            // The emulator digests an image by its layers: one of its own each.
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 1000 + i, "digest": format!("sha256:{:064x}", 1000 + i)}]
        });
        clients
            .ecr
            .put_image()
            .repository_name(&repo_name)
            .image_tag(&tag)
            .image_manifest(manifest.to_string())
            .send()
            .await
            .unwrap();
        local.push(format!("agenteval-env:{tag}"));
    }
    let repo = format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{repo_name}");
    let settings = ecs_settings(cluster, s, (1000, 1000.0), Some(repo));
    let backend = Arc::new(EcsBackend::new(clients.clone(), settings, S3BundleStore::new(clients, "unused", "runs")));
    let start = Instant::now();
    let pinned = backend.task_images(&local).await.unwrap().unwrap();
    let run = agenteval_core::RunId::new();
    // Tasks of one image in jobs of `per_job`, as the controller groups them.
    let specs: Vec<agenteval_core::model::TaskSpec> = (0..tasks)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "id": format!("t{i:05}"), "input": "x",
                "environment": {"image": pinned[&local[(i % images) as usize]], "cpus": 1.0, "memory_mb": 3000}
            }))
            .unwrap()
        })
        .collect();
    let todo: Vec<u32> = (0..tasks as u32).collect();
    let image_of = |i: u32| specs[i as usize].environment.as_ref().and_then(|e| e.image.clone());
    let jobs = agenteval_engine::controller::decide::shard_by(&todo, 10, (0, 0), 1, image_of);
    use futures::StreamExt;
    let launched: Vec<bool> = futures::stream::iter(jobs)
        .map(|p| {
            let backend = backend.clone();
            let tasks: Vec<_> = p.tasks.iter().map(|&i| specs[i as usize].clone()).collect();
            async move {
                let job = agenteval_core::model::JobSpec {
                    schema_version: agenteval_core::SCHEMA_VERSION.into(),
                    run_id: run,
                    job_id: p.job_id.clone(),
                    attempt: 1,
                    epoch: 0,
                    image: tasks[0].environment.as_ref().and_then(|e| e.image.clone()),
                    tasks,
                    bundle_uri: "s3://unused/runs".into(),
                    index_uri: "dynamodb://unused".into(),
                    env: BTreeMap::new(),
                    ledger: None,
                    tool_secrets: Default::default(),
                };
                backend.submit_job(&job).await.map_err(|e| eprintln!("{e}")).is_ok()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let c = backend.calls();
    let per = |n: u64| n as f64 / tasks as f64;
    println!(
        "\n{tasks} tasks over {images} images, jobs of 10 tasks of one image: {} of {} jobs launched in {:.1} s",
        launched.iter().filter(|ok| **ok).count(),
        launched.len(),
        start.elapsed().as_secs_f64()
    );
    println!("{:<28} {:>8} {:>10}", "call", "calls", "per task");
    for (name, n) in [
        ("ecr:DescribeImages", c.describe_images),
        ("ecs:DescribeTaskDefinition", c.describe_task_definition),
        ("ecs:RegisterTaskDefinition", c.register_task_definition),
        ("ecs:RunTask", c.run_task),
    ] {
        println!("{name:<28} {n:>8} {:>10.3}", per(n));
    }
    let total = c.describe_images + c.describe_task_definition + c.register_task_definition + c.run_task;
    println!("{:<28} {total:>8} {:>10.3}", "total (launch side)", per(total));
    assert_eq!(c.register_task_definition, images, "one registration per image");
}
