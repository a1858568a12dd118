//! End-to-end tests of the AWS fleet against the AWS emulator (moto, or whatever
//! `AWS_ENDPOINT_URL` points at). The emulator runs no containers, so a test harness
//! (`tests/aws/fake_fargate.py`) plays Fargate: it runs exactly the command and environment
//! that each RunTask carried, as a local process of the real binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::otlp;
use crate::util::*;
use agenteval_aws::{AwsClients, AwsSettings, DynamoDbRunIndex};
use agenteval_testkit::emulator;

/// One isolated AWS "account": its own bucket, table, cluster and working directory.
struct Aws {
    ws: Workspace,
    endpoint: String,
    bucket: String,
    table: String,
    cluster: String,
    subnet: String,
    vpc: String,
    security_group: String,
    /// The environments' security groups: (no network, public, allowlist).
    env_groups: (String, String, String),
    task_definition: String,
    harnesses: Vec<Child>,
}

impl Drop for Aws {
    /// The stand-ins are asked to stop (they remove the containers and networks they made), and
    /// killed if they take longer than a few seconds.
    fn drop(&mut self) {
        for h in &mut self.harnesses {
            let pid = nix::unistd::Pid::from_raw(h.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for h in &mut self.harnesses {
            while h.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

impl Aws {
    async fn new(secrets: &[(&str, &str)], create_bucket: bool) -> Aws {
        Aws::on(emulator::endpoint(), secrets, create_bucket).await
    }

    /// A fleet on the given emulator (`emulator::serialized_endpoint()` for racing conditional
    /// writes, which threaded moto may both apply).
    async fn on(endpoint: &str, secrets: &[(&str, &str)], create_bucket: bool) -> Aws {
        let endpoint = endpoint.to_string();
        let bucket = emulator::unique("bundles");
        let table = emulator::unique("runs");
        let cluster = emulator::unique("fleet");
        let clients = AwsClients::connect(&AwsSettings::emulator(&endpoint)).await;
        DynamoDbRunIndex::new(clients, &table).create_table().await.unwrap();
        let mut setup = python("setup_emulator.py");
        setup.args(["--endpoint", &endpoint, "--cluster", &cluster]);
        if create_bucket {
            setup.args(["--bucket", &bucket]);
        }
        for (k, v) in secrets {
            setup.args(["--secret", &format!("{k}={v}")]);
        }
        let out = setup.output().unwrap();
        assert!(out.status.success(), "setup failed: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        Aws {
            ws: Workspace::new(),
            endpoint,
            bucket,
            table,
            cluster,
            subnet: v["subnet"].as_str().unwrap().into(),
            vpc: v["vpc"].as_str().unwrap().into(),
            security_group: v["security_group"].as_str().unwrap().into(),
            env_groups: (
                v["environment_groups"]["no_network"].as_str().unwrap().into(),
                v["environment_groups"]["public"].as_str().unwrap().into(),
                v["environment_groups"]["allowlist"].as_str().unwrap().into(),
            ),
            task_definition: v["task_definition"].as_str().unwrap().into(),
            harnesses: vec![],
        }
    }

    /// Starts the Fargate stand-in for this cluster; worker logs go to `<workspace>/worker-logs`.
    fn fargate(&mut self, drop_first: u32) -> PathBuf {
        self.fargate_with(&["--drop-first", &drop_first.to_string()])
    }

    /// The Fargate stand-in starting every task's worker twice (the same job attempt), as ECS
    /// can after a RunTask response was lost and the call retried.
    fn fargate_duplicating(&mut self) -> PathBuf {
        self.fargate_with(&["--duplicate"])
    }

    fn fargate_with(&mut self, extra: &[&str]) -> PathBuf {
        let stats = self.ws.path().join(format!("fargate-{}.json", self.harnesses.len()));
        let logs = self.ws.path().join("worker-logs");
        let child = python("fake_fargate.py")
            .env("PATH", agent_path())
            .args(["--endpoint", &self.endpoint, "--cluster", &self.cluster, "--agenteval", BIN])
            .args(extra)
            .args(["--stats", stats.to_str().unwrap(), "--logs", logs.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.harnesses.push(child);
        self.stand_in_ready(&stats);
        stats
    }

    /// Waits for the stand-in to hold tasks RUNNING (it writes its first counts then): a task
    /// launched before that runs through moto's states on its own and may stay in one the
    /// stand-in never takes up, and the run would wait for it forever.
    fn stand_in_ready(&mut self, stats: &Path) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stats.exists() {
            let child = self.harnesses.last_mut().unwrap();
            assert!(child.try_wait().unwrap().is_none(), "the Fargate stand-in exited before it was ready");
            assert!(Instant::now() < deadline, "the Fargate stand-in was not ready in 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The Fargate stand-in running every task as a container of `image` (`docker run`), with
    /// the first one `docker stop`ped `interrupt_after` seconds after it started, as a Spot
    /// interruption would.
    fn fargate_in(&mut self, image: &str, interrupt_after: Option<f64>) -> PathBuf {
        let stats = self.ws.path().join(format!("fargate-{}.json", self.harnesses.len()));
        let logs = self.ws.path().join("worker-logs");
        let mut c = python("fake_fargate.py");
        c.env("PATH", agent_path());
        c.args(["--endpoint", &self.endpoint, "--cluster", &self.cluster, "--agenteval", BIN, "--image", image])
            .args(["--stats", stats.to_str().unwrap(), "--logs", logs.to_str().unwrap()]);
        if let Some(s) = interrupt_after {
            c.args(["--interrupt-first-after", &s.to_string()]);
        }
        self.harnesses.push(c.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().unwrap());
        self.stand_in_ready(&stats);
        stats
    }

    /// ECS tasks of the test's cluster with this desired status.
    async fn ecs_tasks(&self, desired: &str) -> usize {
        let clients = AwsClients::connect(&AwsSettings::emulator(&self.endpoint)).await;
        let out = clients.ecs.list_tasks().cluster(&self.cluster).desired_status(desired.into()).send().await.unwrap();
        out.task_arns().len()
    }

    fn config(&self, name: &str, body: &str, endpoint: &str) -> PathBuf {
        self.ws.write(
            &format!("{name}.yaml"),
            &format!(
                r#"name: {name}
{body}backend:
  id: aws
  max_concurrent_jobs: 4
  tasks_per_job: 2
  max_attempts: 3
storage:
  bundle_root: s3://{bucket}/team/runs
  index: dynamodb://{table}
aws:
  region: us-east-1
  endpoint_url: {endpoint}
  cluster: {cluster}
  task_definition: {td}
  subnets: [{subnet}]
  security_groups: [{sg}]
  environment_security_groups:
    no_network: [{no_network}]
    allowlist: [{allowlist}]
    public: [{public}]
  poll_seconds: 0.3
"#,
                bucket = self.bucket,
                table = self.table,
                cluster = self.cluster,
                td = self.task_definition,
                subnet = self.subnet,
                sg = self.security_group,
                no_network = self.env_groups.0,
                public = self.env_groups.1,
                allowlist = self.env_groups.2,
            ),
        )
    }

    fn cmd_in(&self, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .env("PATH", agent_path())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AGENTEVAL_AWS_INDEX", format!("dynamodb://{}", self.table))
            .env("AGENTEVAL_CONFIG_HOME", self.ws.path().join(".agenteval-home"))
            .env_remove("AGENTEVAL_STACK_PROFILE")
            .env_remove("RUST_LOG");
        for (k, _) in std::env::vars() {
            if k.starts_with("OTEL_") || k == "TRACEPARENT" {
                c.env_remove(k);
            }
        }
        c
    }

    /// Runs a command with a deadline: if the Fargate stand-in dies, a submit would wait for
    /// its jobs forever; the test must fail instead.
    fn run(&self, args: &[&str]) -> Output {
        let child = self.cmd_in(self.ws.path(), args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        wait_output(child, Duration::from_secs(240))
    }

    fn json(&self, args: &[&str]) -> (serde_json::Value, i32) {
        let out = self.run(args);
        let v = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {}\n{}", text(&out.stdout), text(&out.stderr)));
        (v, out.status.code().unwrap_or(-1))
    }
}

const TOY: &str = r#"benchmark:
  kind: toy
  size: 12
  latency_ms: 10
  slow_ms: 50
agent:
  kind: mock
  limits:
    max_tokens: 5000
evaluators:
  - kind: no_error
"#;

fn assert_index_matches_summary(aws: &Aws, run: &str) {
    let (shown, code) = aws.json(&["runs", "show", run, "--tasks", "--json", "--backend", "aws"]);
    assert_eq!(code, 0);
    let (summary, _) = aws.json(&["report", run, "--json", "--backend", "aws"]);
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len() as u64, summary["tasks_total"].as_u64().unwrap());
    assert!(tasks.iter().all(|t| t["state"] == "completed"), "{shown}");
    let passed = tasks.iter().filter(|t| t["passed"] == true).count() as u64;
    assert_eq!(passed, summary["passed"].as_u64().unwrap(), "DynamoDB and the bundle's summary agree");
    let cost: f64 = tasks.iter().map(|t| t["cost_usd"].as_f64().unwrap()).sum();
    assert!((cost - summary["total_cost_usd"].as_f64().unwrap()).abs() < 1e-6);
}

/// Two workers of one job attempt: each task is run by the one that claims it first, and its
/// folder holds that attempt's files only (`validate-bundle` checks every trace event's and
/// log's attempt against the result that counts). The claim is a conditional write, which
/// threaded moto may apply twice when two racing workers make it: the serialized emulator
/// keeps DynamoDB's guarantee.
#[tokio::test(flavor = "multi_thread")]
async fn a_duplicated_job_attempt_leaves_one_attempts_files_in_each_task_folder() {
    let mut aws = Aws::on(emulator::serialized_endpoint(), &[], true).await;
    let stats = aws.fargate_duplicating();
    let cfg = aws.config("aws-dup", TOY, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "complete");
    assert_eq!(v["summary"]["tasks_finished"], 12, "{v}");
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert!(s["duplicates"].as_u64().unwrap() >= 1, "{s}");
    let bundle = v["bundle"].as_str().unwrap();
    let out = aws.run(&["validate-bundle", bundle]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_index_matches_summary(&aws, v["run_id"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toy_run_on_the_aws_fleet_lands_in_s3_and_dynamodb() {
    let mut aws = Aws::new(&[], true).await;
    // The first task "dies" before writing anything: its job must be re-submitted.
    let stats = aws.fargate(1);
    let cfg = aws.config("aws-toy", TOY, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "complete");
    assert_eq!(v["summary"]["tasks_finished"], 12);
    let bundle = v["bundle"].as_str().unwrap().to_string();
    let run = v["run_id"].as_str().unwrap().to_string();
    assert_eq!(bundle, format!("s3://{}/team/runs/{run}", aws.bucket));

    let f = read_json(&stats);
    assert_eq!(f["dropped"], 1);
    assert!(f["started"].as_u64().unwrap() >= 6, "{f}");

    // Any machine with access sees the run.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = aws.cmd_in(elsewhere.path(), &["runs", "list", "--backend", "aws", "--json"]).output().unwrap();
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["run_id"], run.as_str(), "{list}");
    assert_eq!(list[0]["status"], "complete");

    let out = aws.run(&["validate-bundle", &bundle]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_index_matches_summary(&aws, &run);
    let (shown, _) = aws.json(&["runs", "show", &run, "--tasks", "--json", "--backend", "aws"]);
    let retried = shown["tasks"].as_array().unwrap().iter().filter(|t| t["attempt"] == 2).count();
    assert_eq!(retried, 2, "the dropped job's two tasks ran again as attempt 2, no other: {shown}");

    // The S3 bundle has the local layout: every job attempt that ran has its worker.log.
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    let root: agenteval_core::location::BundleRoot = format!("s3://{}/team/runs", aws.bucket).parse().unwrap();
    let agenteval_core::location::BundleRoot::S3 { bucket, prefix } = root else { unreachable!() };
    let store = agenteval_aws::S3BundleStore::new(clients, bucket, prefix);
    let run_id: agenteval_core::RunId = run.parse().unwrap();
    let files = agenteval_core::traits::BundleStore::list(&store, &run_id, "jobs/").await.unwrap();
    let specs: Vec<&String> = files.iter().filter(|f| f.ends_with("/job.json")).collect();
    assert!(specs.len() >= 6, "{files:?}");
    // The seal takes each task pack's sum from reading it for its result: no attempt leaves a
    // part of the manifest, nor anything staged; the run-long files written in parts were joined.
    assert!(!files.iter().any(|f| f.ends_with("/files.json") || f.contains("/tasks/")), "{files:?}");
    let all = agenteval_core::traits::BundleStore::list(&store, &run_id, "").await.unwrap();
    assert!(all.iter().all(|f| !f.contains(".parts/")), "parts are joined at seal: {all:?}");
    assert!(all.iter().any(|f| f == "telemetry.jsonl"), "{all:?}");
    let mut logs = 0;
    for spec in specs {
        let log = spec.replace("job.json", "worker.log");
        if files.contains(&log) {
            let text = agenteval_core::traits::BundleStore::get(&store, &run_id, &log).await.unwrap();
            assert!(String::from_utf8_lossy(&text).contains("job started"), "{log}");
            logs += 1;
        }
    }
    // The dropped attempt never started a worker; every other one left its log.
    assert_eq!(logs, files.iter().filter(|f| f.ends_with("/job.json")).count() - 1, "{files:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secrets_manager_secret_reaches_the_agent_and_nothing_else() {
    const SECRET: &str = "sk-aws-NEVER-STORE-91c2e";
    let mut aws = Aws::new(&[("prod/agent-key", SECRET)], true).await;
    aws.fargate(0);
    let agent = repo().join("examples/echo_agent.py");
    aws.ws.write(
        "cases.jsonl",
        "{\"id\": \"leaky\", \"input\": {\"question\": \"q\", \"mode\": \"echo_secret\"}}\n{\"id\": \"env\", \"input\": {\"question\": \"q\", \"mode\": \"echo_env\"}}\n",
    );
    let body = format!(
        r#"benchmark:
  kind: jsonl
  cases: cases.jsonl
agent:
  kind: command
  command: [python3, {}]
  secrets:
    API_KEY: prod/agent-key
"#,
        agent.display()
    );
    let cfg = aws.config("aws-secret", &body, &aws.endpoint.clone());
    // A variable of the controller's shell that no config declares must reach no agent.
    const SHELL_ONLY: &str = "shell-only-aws-5d2";
    let child = aws
        .cmd_in(aws.ws.path(), &["submit", "--json", "-vv", "--config", cfg.to_str().unwrap()])
        .env("SHELL_ONLY_TOKEN", SHELL_ONLY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(240));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains(SECRET) && !text(&out.stderr).contains(SECRET));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = v["run_id"].as_str().unwrap();
    let (shown, _) = aws.json(&["runs", "show", run, "--tasks", "--json", "--backend", "aws"]);
    assert_eq!(shown["tasks"][0]["state"], "completed", "{shown}");
    let scan = python("scan_for.py")
        .args(["--endpoint", &aws.endpoint, "--bucket", &aws.bucket, "--table", &aws.table, "--needle", SECRET])
        .output()
        .unwrap();
    let found: serde_json::Value = serde_json::from_slice(&scan.stdout).unwrap();
    assert!(scan.status.success(), "secret stored: {found}");
    assert!(found["objects"].as_u64().unwrap() > 5 && found["items"].as_u64().unwrap() > 1, "{found}");
    // Nor in the workers' own logs (what CloudWatch would hold).
    let logs: Vec<_> = std::fs::read_dir(aws.ws.path().join("worker-logs")).unwrap().flatten().collect();
    assert!(!logs.is_empty());
    for l in logs {
        let t = std::fs::read_to_string(l.path()).unwrap();
        assert!(!t.contains(SECRET), "secret in worker log {}", l.path().display());
    }
    // The agent did receive it: its echo was redacted.
    let scan = python("scan_for.py")
        .args([
            "--endpoint",
            &aws.endpoint,
            "--bucket",
            &aws.bucket,
            "--table",
            &aws.table,
            "--needle",
            "the key is [REDACTED]",
        ])
        .output()
        .unwrap();
    assert_eq!(scan.status.code(), Some(1), "the redacted echo is in the bundle");
    let scan_for = |needle: &str| {
        python("scan_for.py")
            .args(["--endpoint", &aws.endpoint, "--bucket", &aws.bucket, "--table", &aws.table, "--needle", needle])
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(scan_for("AGENTEVAL_SCRATCH_DIR="), Some(1), "the agent's environment dump is in the bundle");
    assert_eq!(scan_for(SHELL_ONLY), Some(0), "an undeclared variable of the controller reached the agent");
}

/// `redact:` on the fleet as locally: an agent's planted e-mail address and customer id (in its
/// messages, tool calls, tool results and answer) are in no S3 object (packs unpacked), no
/// DynamoDB item and no worker log, and the answer is still graded.
#[tokio::test(flavor = "multi_thread")]
async fn configured_redaction_scrubs_planted_values_on_the_fleet() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let agent = aws.ws.write("leaky.py", crate::trust::LEAKY_AGENT);
    aws.ws.write("cases.jsonl", "{\"id\": \"c1\", \"input\": \"write to the customer\"}\n");
    let body = format!(
        "benchmark:\n  kind: jsonl\n  cases: cases.jsonl\nagent:\n  kind: command\n  command: [python3, {}]\nevaluators:\n  - kind: contains\n    value: sent to\nredact:\n  patterns: ['[\\w.+-]+@[\\w-]+\\.[\\w.]+', 'CUST-\\d+']\n  fields: [customer_id]\n",
        agent.display()
    );
    let cfg = aws.config("aws-redact", &body, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!((code, v["summary"]["passed"].as_u64()), (0, Some(1)), "{v}");
    let scan_for = |needle: &str| {
        python("scan_for.py")
            .args(["--endpoint", &aws.endpoint, "--bucket", &aws.bucket, "--table", &aws.table, "--needle", needle])
            .output()
            .unwrap()
    };
    for needle in ["ann.secret@example.com", "CUST-99812"] {
        let scan = scan_for(needle);
        let found: serde_json::Value = serde_json::from_slice(&scan.stdout).unwrap_or_default();
        assert_eq!(scan.status.code(), Some(0), "{needle} stored: {found}");
        assert!(found["objects"].as_u64().unwrap_or(0) > 5, "{found}");
    }
    assert_eq!(scan_for("sent to [REDACTED]").status.code(), Some(1), "the scrubbed answer is in the bundle");
    let logs: Vec<_> = std::fs::read_dir(aws.ws.path().join("worker-logs")).unwrap().flatten().collect();
    assert!(!logs.is_empty());
    for l in logs {
        let t = std::fs::read_to_string(l.path()).unwrap();
        assert!(!t.contains("ann.secret@example.com") && !t.contains("CUST-99812"), "{}", l.path().display());
    }
}

/// ECS throttling launches and short of capacity, as Fargate is under load: the run is
/// delayed, never failed, and the controller launches fewer jobs at once while ECS refuses.
#[tokio::test(flavor = "multi_thread")]
async fn throttling_and_capacity_failures_delay_the_run_but_never_fail_it() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let proxy_stats = aws.ws.path().join("proxy.json");
    let (proxy, proxy_url) = fault_proxy(&[
        "--target",
        &aws.endpoint,
        "--throttle-every",
        "3",
        "--capacity-every",
        "4",
        "--lose-every",
        "5",
        "--stats",
        proxy_stats.to_str().unwrap(),
    ]);
    aws.harnesses.push(proxy);
    let cfg = aws.config("aws-faults", TOY, &proxy_url);
    let (v, code) =
        aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "backend.tasks_per_job=1"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "complete");
    let p = read_json(&proxy_stats);
    assert!(p["throttled"].as_u64().unwrap() >= 1 && p["capacity"].as_u64().unwrap() >= 1, "{p}");
    // A launch whose answer was lost is retried with the same client token, so that ECS
    // starts it once; every job attempt has a token of its own.
    let tokens: Vec<(String, String)> = p["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t[0].as_str().unwrap().to_string(), t[1].as_str().unwrap().to_string()))
        .collect();
    let lost: Vec<usize> = (0..tokens.len()).filter(|&i| tokens[i].1 == "lose").collect();
    assert!(!lost.is_empty(), "no answer was lost: {p}");
    for i in lost {
        let token = &tokens[i].0;
        assert!(!token.is_empty(), "RunTask without a client token");
        assert!(tokens[i + 1..].iter().any(|(t, _)| t == token), "the launch of token {token} was not retried with it");
    }
    let distinct: std::collections::BTreeSet<&String> = tokens.iter().map(|(t, _)| t).collect();
    assert_eq!(distinct.len(), 12, "one token per job attempt (12 one-task jobs): {tokens:?}");
    let run = v["run_id"].as_str().unwrap();
    let (shown, _) = aws.json(&["runs", "show", run, "--tasks", "--json", "--backend", "aws"]);
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 12);
    assert!(
        tasks.iter().all(|t| t["state"] == "completed" && t["attempt"] == 1),
        "launch faults cost no attempt: {shown}"
    );
    assert_eq!(v["summary"]["tasks_finished"], 12, "no task counted twice");
    // The refusals were met with fewer launches at once, and `status` says so.
    let (st, _) = aws.json(&["status", run, "--json", "--backend", "aws"]);
    let why = st["run"]["concurrency"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("ECS refused"), "{st}");
}

/// The emulator answers every Fargate Spot RunTask with an HTML 500 page (it places Spot tasks
/// on EC2 instances it has none of): a launch that fails forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_launch_answered_with_an_html_500_forever_ends_infra_within_the_deadline_and_the_run_seals() {
    let aws = Aws::new(&[], true).await;
    let cfg = aws.config("html-500", TOY, &aws.endpoint);
    let started = Instant::now();
    let out = aws.run(&[
        "submit",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--set",
        "aws.capacity=fargate_spot",
        "--set",
        "aws.spot_fallback=false",
        "--set",
        "backend.launch_deadline_seconds=3",
    ]);
    let took = started.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}\n{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(out.status.code(), Some(4), "a launch that cannot work exits 4: {v}\n{}", text(&out.stderr));
    assert_eq!(v["status"], "failed", "{v}");
    assert!(took < Duration::from_secs(60), "gave up in {took:?}, not within the deadline and its last try");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("unexpected token"), "the parser's complaint is not the provider's message: {stderr}");
    assert!(
        stderr.contains(&format!("agenteval resume {}", v["run_id"].as_str().unwrap())),
        "the way to finish it: {stderr}"
    );
    let run = v["run_id"].as_str().unwrap();
    let (shown, _) = aws.json(&["runs", "show", run, "--tasks", "--json", "--backend", "aws"]);
    let tasks = shown["tasks"].as_array().unwrap();
    let infra: Vec<&serde_json::Value> = tasks.iter().filter(|t| t["state"] == "failed").collect();
    assert!(!infra.is_empty(), "the failing job's tasks end infra: {shown}");
    let said = shown.to_string();
    assert!(said.contains("500 Internal Server Error"), "the page's own words: {said}");
    assert!(!said.contains("unexpected token"), "{said}");
    let bundle = v["bundle"].as_str().unwrap();
    let out = aws.run(&["validate-bundle", bundle]);
    assert!(out.status.success(), "the sealed bundle is valid: {}{}", text(&out.stdout), text(&out.stderr));
    // The cause fixed, the advice it gave finishes the night in the same run: the given-up
    // tasks and the untried ones.
    let mut aws = aws;
    aws.fargate(0);
    let (r, code) = aws.json(&["resume", run, "--json", "--backend", "aws", "--set", "aws.capacity=fargate"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "complete", "{r}");
    assert_eq!(r["summary"]["tasks_finished"], 12, "{r}");
}

/// The same Spot launches, with the config's default `aws.spot_fallback`: launched on on-demand
/// Fargate, said so, and the run completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_spot_launch_that_fails_falls_back_to_on_demand_fargate_and_says_so() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let cfg = aws.config("spot-fallback", TOY, &aws.endpoint);
    let out = aws.run(&["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "aws.capacity=fargate_spot"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}\n{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["summary"]["tasks_finished"], 12, "{v}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("launching on on-demand Fargate"), "the fallback is said: {stderr}");
    assert_eq!(stderr.matches("launching on on-demand Fargate").count(), 1, "said once: {stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_every_ecs_task_and_resume_from_anywhere_finishes() {
    let mut aws = Aws::new(&[], true).await;
    let stats = aws.fargate(0);
    let slow = r#"benchmark:
  kind: toy
  size: 10
  latency_ms: 1500
  slow_ms: 1500
agent:
  kind: mock
  limits:
    max_tokens: 5000
"#;
    let cfg = aws.config("aws-cancel", slow, &aws.endpoint.clone());
    let child = aws
        .cmd_in(
            aws.ws.path(),
            &[
                "submit",
                "--json",
                "--config",
                cfg.to_str().unwrap(),
                "--set",
                "backend.tasks_per_job=1",
                "--set",
                "backend.max_concurrent_jobs=3",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut run = String::new();
    wait_until("a finished task", Duration::from_secs(60), || {
        let out = aws.run(&["runs", "list", "--backend", "aws", "--json"]);
        let Ok(list) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else { return false };
        let Some(id) = list[0]["run_id"].as_str() else { return false };
        run = id.to_string();
        let (st, _) = aws.json(&["status", &run, "--json", "--backend", "aws"]);
        st["tasks"]["completed"].as_u64().unwrap_or(0) >= 1
    });
    let other = tempfile::tempdir().unwrap();
    let mut cancel = aws.cmd_in(other.path(), &["cancel", &run, "--backend", "aws", "--json"]);
    let out =
        wait_output(cancel.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = wait_output(child, Duration::from_secs(90));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "interrupted");
    // Every ECS task of the run was told to stop: ECS itself, not the harness, says none is
    // left to run in the cluster.
    assert_eq!(aws.ecs_tasks("RUNNING").await, 0, "ECS tasks still meant to run after cancel");
    assert!(read_json(&stats)["started"].as_u64().unwrap_or(0) >= 1, "the harness ran no task");
    let out = aws.run(&["validate-bundle", v["bundle"].as_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stdout));

    // Resume from a third directory with no local state at all.
    let third = tempfile::tempdir().unwrap();
    let mut resumed = aws.cmd_in(third.path(), &["resume", &run, "--backend", "aws", "--json"]);
    let out =
        wait_output(resumed.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), Duration::from_secs(240));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "complete");
    assert_eq!(v["summary"]["tasks_finished"], 10);
    assert!(aws.run(&["validate-bundle", v["bundle"].as_str().unwrap()]).status.success());
    assert_index_matches_summary(&aws, &run);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_resumes_of_a_crashed_run_on_dynamodb_one_drives_the_other_names_it() {
    let mut aws = Aws::on(emulator::serialized_endpoint(), &[], true).await;
    aws.fargate(0);
    let slow = r#"benchmark:
  kind: toy
  size: 8
  latency_ms: 800
  slow_ms: 800
agent:
  kind: mock
"#;
    let cfg = aws.config("aws-lease", slow, &aws.endpoint.clone());
    let mut child = aws
        .cmd_in(
            aws.ws.path(),
            &["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "backend.max_concurrent_jobs=2"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut run = String::new();
    wait_until("a finished task", Duration::from_secs(90), || {
        let out = aws.run(&["runs", "list", "--backend", "aws", "--json"]);
        let Ok(list) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else { return false };
        let Some(id) = list[0]["run_id"].as_str() else { return false };
        run = id.to_string();
        let (st, _) = aws.json(&["status", &run, "--json", "--backend", "aws"]);
        st["tasks"]["completed"].as_u64().unwrap_or(0) >= 1
    });
    // The controller crashes: its lease stays in the index until someone claims the run.
    child.kill().unwrap();
    let _ = child.wait();
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let spawn = |dir: &Path| {
        aws.cmd_in(dir, &["resume", &run, "--backend", "aws", "--json", "-q"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(a_dir.path()), spawn(b_dir.path()));
    let (a, b) = (wait_output(a, Duration::from_secs(240)), wait_output(b, Duration::from_secs(240)));
    let (winner, loser) = match [a.status.code(), b.status.code()] {
        [Some(0), Some(2)] => (&a, &b),
        [Some(2), Some(0)] => (&b, &a),
        codes => panic!("want one 0 and one 2, got {codes:?}\na: {}\nb: {}", text(&a.stderr), text(&b.stderr)),
    };
    let refusal = text(&loser.stderr);
    assert!(refusal.contains("being driven by another controller") && refusal.contains("pid"), "{refusal}");
    let v: serde_json::Value = serde_json::from_slice(&winner.stdout).unwrap();
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(v["summary"]["tasks_finished"], 8, "no task counted twice");
    assert!(aws.run(&["validate-bundle", v["bundle"].as_str().unwrap()]).status.success());
    let (shown, _) = aws.json(&["runs", "show", &run, "--json", "--backend", "aws"]);
    assert_eq!(shown["run"]["epoch"], 1, "one claim: {shown}");
    assert_index_matches_summary(&aws, &run);
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_a_missing_bucket_and_launches_nothing() {
    let aws = Aws::new(&[], false).await;
    let cfg = aws.config("aws-doctor", TOY, &aws.endpoint.clone());
    let out = aws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let shown = text(&out.stdout);
    assert!(shown.contains(&format!("FAIL bucket {}", aws.bucket)), "{shown}");
    assert!(shown.contains(&format!("ok   table {}", aws.table)), "{shown}");
    assert!(shown.contains(&format!("ok   cluster {}", aws.cluster)), "{shown}");
    assert_eq!(aws.ecs_tasks("RUNNING").await + aws.ecs_tasks("STOPPED").await, 0, "no ECS task was launched");
    // A submit with the same config runs nothing either (the bucket is missing).
    let (runs, _) = aws.json(&["runs", "list", "--backend", "aws", "--json"]);
    assert_eq!(runs.as_array().unwrap().len(), 0, "no run was created");
}

/// Every resource a run needs is checked, each one missing named, before anything launches.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_a_missing_task_definition_secret_and_bad_network() {
    let aws = Aws::new(&[], true).await;
    let cfg = aws.config("aws-doctor-all", TOY, &aws.endpoint.clone());
    let out = aws.run(&[
        "doctor",
        "--config",
        cfg.to_str().unwrap(),
        "--set",
        "aws.task_definition=no-such-family",
        "--set",
        "aws.subnets=[10.0.0.0/24]",
        "--set",
        "agent.kind=command",
        "--set",
        "agent.command=[python3, agent.py]",
        "--set",
        "agent.secrets={API_KEY: team/missing-key}",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}{}", text(&out.stdout), text(&out.stderr));
    let shown = text(&out.stdout);
    for want in [
        "FAIL task definition no-such-family",
        "FAIL network",
        "FAIL secret team/missing-key",
        &format!("ok   bucket {}", aws.bucket),
    ] {
        assert!(shown.contains(want), "missing {want:?} in:\n{shown}");
    }
    let td = shown.lines().find(|l| l.contains("task definition no-such-family")).unwrap();
    assert!(td.contains("missing ("), "the API said it does not exist: {td}");
    assert_eq!(aws.ecs_tasks("RUNNING").await + aws.ecs_tasks("STOPPED").await, 0, "no ECS task was launched");
}

/// The environments' security groups, per network mode: doctor passes the ones the stack's shape
/// makes (no network: the workers' ports only), and names a missing group and a no-network group
/// that lets its tasks out, one failing line each, exit 2.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_checks_each_network_modes_security_groups_and_names_a_missing_one() {
    let aws = Aws::new(&[], true).await;
    let cfg = aws.config("aws-doctor-groups", TOY, &aws.endpoint.clone());
    let out = aws.run(&["doctor", "--config", cfg.to_str().unwrap()]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}{}", text(&out.stderr));
    let line = shown.lines().find(|l| l.contains("environment_security_groups.no_network")).unwrap_or_default();
    assert!(
        line.starts_with("ok") && line.contains(&aws.env_groups.0) && line.contains("reaches its worker's ports only"),
        "{shown}"
    );
    let out = aws.run(&[
        "doctor",
        "--config",
        cfg.to_str().unwrap(),
        "--set",
        "aws.environment_security_groups.public=[sg-00000000000dead01]",
        "--set",
        &format!("aws.environment_security_groups.no_network=[{}]", aws.env_groups.1),
    ]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{shown}{}", text(&out.stderr));
    let failed: Vec<&str> = shown.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failed.len(), 2, "{shown}");
    assert!(
        failed.iter().any(|l| l.contains("environment_security_groups.public") && l.contains("sg-00000000000dead01")),
        "{shown}"
    );
    assert!(
        failed.iter().any(|l| l.contains("environment_security_groups.no_network") && l.contains("internet")),
        "{shown}"
    );
}

/// An endpoint nobody answers: one cause, said once, and nothing called "missing" that was
/// never looked at.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_endpoint_is_one_cause_said_once() {
    let aws = Aws::new(&[], true).await;
    let cfg = aws.config("aws-unreachable", TOY, "http://127.0.0.1:9");
    let out = aws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = err.lines().last().unwrap();
    assert_eq!(line.matches("Connection refused").count(), 1, "{line}");
    assert!(line.contains("cannot reach AWS") && !line.contains("missing"), "{line}");
    assert!(line.contains(&format!("cluster {} and task definition {}", aws.cluster, aws.task_definition)), "{line}");
    let doctor = text(&aws.run(&["doctor", "--config", cfg.to_str().unwrap()]).stdout);
    assert!(!doctor.contains("missing"), "{doctor}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trace_context_reaches_fargate_workers_through_container_overrides() {
    let receiver = otlp::Receiver::start(otlp::Protocol::Grpc);
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let body = format!("{TOY}telemetry:\n  endpoint: {}\n  protocol: grpc\n", receiver.endpoint());
    let cfg = aws.config("aws-traced", &body, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert!(receiver.wait_for(Duration::from_secs(20), |s| {
        s.spans.iter().filter(|s| s.name == "eval.task").count() == 12 && s.spans.iter().any(|s| s.name == "eval.run")
    }));
    let store = receiver.store.lock().unwrap();
    let root = store.spans.iter().find(|s| s.name == "eval.run").unwrap();
    assert_eq!(root.attr("agenteval.backend").unwrap(), "aws");
    let jobs: std::collections::HashMap<&str, &otlp::RSpan> =
        store.spans.iter().filter(|s| s.name == "eval.job").map(|s| (s.span_id.as_str(), s)).collect();

    // Every RunTask carried its job span's traceparent and the telemetry settings in the
    // container overrides (the Fargate stand-in passes nothing else to the worker).
    let out =
        python("ecs_overrides.py").args(["--endpoint", &aws.endpoint, "--cluster", &aws.cluster]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tasks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(tasks.len(), 6, "12 tasks at 2 per job");
    for t in &tasks {
        let env = &t["env"];
        let tp = env["TRACEPARENT"].as_str().unwrap_or_else(|| panic!("no TRACEPARENT in the overrides: {t}"));
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts[1], root.trace_id, "the run's trace");
        assert!(jobs.contains_key(parts[2]), "the parent is an eval.job span: {tp}");
        assert_eq!(env["OTEL_EXPORTER_OTLP_ENDPOINT"], receiver.endpoint().as_str());
        assert_eq!(env["OTEL_EXPORTER_OTLP_PROTOCOL"], "grpc");
    }
    // ...and the workers' spans joined the trace under those job spans.
    for t in store.spans.iter().filter(|s| s.name == "eval.task") {
        assert_eq!(t.trace_id, root.trace_id);
        assert!(jobs.contains_key(t.parent_span_id.as_str()), "eval.task under an eval.job");
        assert_eq!(t.attr("agenteval.backend").unwrap(), "aws");
    }
    // The S3 bundle has the spans too, in its manifest.
    let bundle = v["bundle"].as_str().unwrap();
    let out = aws.run(&["validate-bundle", bundle, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let key = format!("team/runs/{}/manifest.json", v["run_id"].as_str().unwrap());
    let script = format!(
        "import boto3,json;s3=boto3.client('s3',endpoint_url='{}',region_name='us-east-1',aws_access_key_id='t',aws_secret_access_key='t');print(s3.get_object(Bucket='{}',Key='{key}')['Body'].read().decode())",
        aws.endpoint, aws.bucket
    );
    let out = Command::new("python3").args(["-c", &script]).output().unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = manifest["files"].as_object().unwrap();
    assert!(files.contains_key("spans.jsonl"));
    assert_eq!(
        files.keys().filter(|k| k.ends_with(".tar.gz") && k.starts_with("tasks/")).count(),
        12,
        "a pack per task"
    );
    assert!(!files.keys().any(|k| k.starts_with("jobs/") && k.contains("/tasks/")), "nothing left staged: {files:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_failures_read_as_one_line_and_the_chain_comes_with_v() {
    let aws = Aws::new(&[], true).await;
    let one_line = |out: &Output, want: &str| {
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(want), "want {want:?} in {err}");
        assert!(!err.contains("DispatchFailure") && !err.contains("ConnectorError"), "no debug dump: {err}");
    };
    // A refused endpoint.
    let out = aws
        .cmd_in(aws.ws.path(), &["runs", "list", "--backend", "aws"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    one_line(&out, "cannot reach AWS: Connection refused");
    let verbose = aws
        .cmd_in(aws.ws.path(), &["-v", "runs", "list", "--backend", "aws"])
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .output()
        .unwrap();
    assert!(text(&verbose.stderr).contains("dispatch failure"), "-v shows the chain: {}", text(&verbose.stderr));
    // No credentials anywhere.
    let out = aws
        .cmd_in(aws.ws.path(), &["runs", "list", "--backend", "aws"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("HOME", aws.ws.path())
        .env("AWS_CONFIG_FILE", aws.ws.path().join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", aws.ws.path().join("none"))
        .env_remove("AWS_PROFILE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    one_line(&out, "no AWS credentials found");
    // A bucket that does not exist.
    let out = aws
        .cmd_in(
            aws.ws.path(),
            &[
                "index",
                "rebuild",
                "--bundles",
                "s3://no-such-bucket-7f3/runs",
                "--index",
                &format!("dynamodb://{}", aws.table),
            ],
        )
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    one_line(&out, "NoSuchBucket");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_task_definition_is_named_before_any_task_is_tried() {
    let aws = Aws::new(&[], true).await;
    let cfg = aws.config("no-td", TOY, &aws.endpoint.clone());
    let text_cfg = std::fs::read_to_string(&cfg).unwrap().replace(&aws.task_definition, "no-such-family:7");
    std::fs::write(&cfg, text_cfg).unwrap();
    let out = aws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("task definition no-such-family:7") && err.contains("aws.task_definition"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let (runs, _) = aws.json(&["runs", "list", "--json", "--backend", "aws"]);
    assert_eq!(runs, serde_json::json!([]), "no run was created");
}

/// The image the container tests run, made from this build's own `agenteval` by
/// `docker/build-local.sh --binary` (Docker's cache makes it instant when the binary is
/// unchanged), so the containers always run the code under test.
fn image() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    const TAG: &str = "agenteval:dev";
    BUILT.get_or_init(|| {
        let out = Command::new(repo().join("docker/build-local.sh"))
            .args(["--binary", env!("CARGO_BIN_EXE_agenteval"), TAG])
            .output()
            .unwrap();
        assert!(out.status.success(), "building the image failed: {}{}", text(&out.stdout), text(&out.stderr));
    });
    TAG
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap()
}

#[test]
fn the_image_runs_agenteval_under_tini_as_a_non_root_user_with_python() {
    let tag = image();
    let out = docker(&["image", "inspect", tag]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let config = &v[0]["Config"];
    assert_eq!(config["Entrypoint"][0], "/usr/bin/tini", "tini is PID 1, so SIGTERM reaches agenteval: {config}");
    assert_eq!(config["User"], "10001:10001", "not root");
    for label in
        ["org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.revision"]
    {
        assert!(config["Labels"][label].as_str().is_some_and(|l| !l.is_empty()), "{label}: {config}");
    }
    println!("image {tag}: {} MB", v[0]["Size"].as_u64().unwrap() / 1_000_000);
    let out = docker(&["run", "--rm", "--network", "none", tag, "--version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("agenteval "), "{}", text(&out.stdout));
    let out = docker(&["run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c", "print(6*7)"]);
    assert_eq!(text(&out.stdout).trim(), "42", "python3 for command agents and grading: {}", text(&out.stderr));
    // The image holds the configs the nightly task definition names.
    let out = docker(&["run", "--rm", "--network", "none", "--entrypoint", "ls", tag, "/etc/agenteval/configs"]);
    assert!(
        text(&out.stdout).contains("nightly.yaml") && text(&out.stdout).contains("gates.yaml"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_worker_runs_in_a_container_and_a_docker_stop_mid_task_is_retried_and_counted_once() {
    let tag = image();
    let mut aws = Aws::new(&[], true).await;
    // Each task takes 1.5 s, so the first worker is inside its second task when it is stopped.
    let stats = aws.fargate_in(tag, Some(2.5));
    let body = TOY.replace("latency_ms: 10", "latency_ms: 1500").replace("slow_ms: 50", "slow_ms: 1500");
    let cfg = aws.config("in-containers", &body, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(v["summary"]["tasks_finished"], 12, "every task once: {v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let f = read_json(&stats);
    assert_eq!(f["interrupted"], 1, "{f}");
    assert!(f["started"].as_u64().unwrap() >= 7, "six jobs and the retry, each a container: {f}");
    assert_index_matches_summary(&aws, &run);
    let (shown, _) = aws.json(&["runs", "show", &run, "--tasks", "--json", "--backend", "aws"]);
    let tasks = shown["tasks"].as_array().unwrap();
    let again = tasks.iter().filter(|t| t["attempt"] == 2).count();
    assert!((1..=2).contains(&again), "what the stopped worker had not finished ran again, nothing else: {shown}");
    let out = aws.run(&["validate-bundle", v["bundle"].as_str().unwrap()]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    // The stopped worker got the SIGTERM (through tini) and said so in its log.
    let logs: String = std::fs::read_dir(aws.ws.path().join("worker-logs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(logs.contains("cancelled"), "a worker saw the stop: {logs}");
    let left = docker(&["ps", "-q", "--filter", &format!("name=agenteval-task-{}-", aws.cluster)]);
    assert!(text(&left.stdout).trim().is_empty(), "no container is left running");
}

/// infra/agenteval.yaml, deployed into the emulator: a fleet run then uses exactly the bucket,
/// table, cluster and worker task definition the stack made, given to agenteval as the stack's
/// `SetFlags` output (over a config whose placeholders name none of them); then the stack is
/// deleted. What the emulator cannot hold (the schedule, the bucket policy, lifecycle, TTL) is
/// checked by the template tests (tests/infra.rs).
#[tokio::test(flavor = "multi_thread")]
async fn the_stack_deploys_into_the_emulator_and_a_fleet_runs_on_exactly_its_outputs() {
    let mut aws = Aws::new(&[], false).await;
    let stack = emulator::unique("agenteval");
    let template = repo().join("infra/agenteval.yaml");
    let out = python("deploy_stack.py")
        .args(["--endpoint", &aws.endpoint, "--stack", &stack, "--template", template.to_str().unwrap()])
        .args(["--param", "ImageUri=agenteval:dev", "--param", &format!("Subnets={}", aws.subnet)])
        .args(["--param", &format!("SecurityGroups={}", aws.security_group), "--param", "UseSpot=false"])
        .output()
        .unwrap();
    assert!(out.status.success(), "create_stack: {}", text(&out.stderr));
    let deployed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(deployed["status"], "CREATE_COMPLETE", "{deployed}");
    let outputs = &deployed["outputs"];
    for r in ["Bundles", "RunIndex", "Cluster", "WorkerTaskDefinition", "ControllerTaskDefinition", "WorkerRole"] {
        assert!(deployed["resources"][r].is_string(), "{r} was created: {deployed}");
    }
    // The harnesses watch and read what the stack made.
    aws.cluster = outputs["Cluster"].as_str().unwrap().to_string();
    aws.table = outputs["Index"].as_str().unwrap().trim_start_matches("dynamodb://").to_string();
    aws.fargate(0);
    let cfg = aws.ws.write(
        "from-stack.yaml",
        &format!(
            "name: from-stack\n{TOY}backend:\n  id: aws\n  tasks_per_job: 3\nstorage:\n  bundle_root: s3://placeholder/runs\n  \
             index: dynamodb://placeholder\naws:\n  region: us-east-1\n  endpoint_url: {}\n  cluster: placeholder\n  \
             task_definition: placeholder\n  subnets: [subnet-placeholder]\n  security_groups: [sg-placeholder]\n  \
             poll_seconds: 0.3\n",
            aws.endpoint
        ),
    );
    let mut args = vec!["submit", "--json", "--config", cfg.to_str().unwrap()];
    let flags = outputs["SetFlags"].as_str().unwrap();
    args.extend(flags.split_whitespace());
    let (v, code) = aws.json(&args);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "complete", "{v}");
    assert_eq!(v["summary"]["tasks_finished"], 12);
    let bundle = v["bundle"].as_str().unwrap();
    assert!(bundle.starts_with(outputs["BundleRoot"].as_str().unwrap()), "{bundle} is under the stack's bucket");
    let out = aws.run(&["validate-bundle", bundle]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_index_matches_summary(&aws, v["run_id"].as_str().unwrap());

    let out =
        python("deploy_stack.py").args(["--endpoint", &aws.endpoint, "--stack", &stack, "--delete"]).output().unwrap();
    assert!(out.status.success(), "delete_stack: {}", text(&out.stderr));
    let gone: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(["DELETED", "DELETE_COMPLETE"].contains(&gone["status"].as_str().unwrap()), "{gone}");
}

/// A command as a new user types it: no `AGENTEVAL_AWS_INDEX`, nothing but the environment's
/// credentials, region and endpoint (the emulator's), in a folder of their own.
fn as_new_user(aws: &Aws, args: &[&str]) -> Output {
    let child = aws
        .cmd_in(aws.ws.path(), args)
        .env_remove("AGENTEVAL_AWS_INDEX")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(300))
}

/// `agenteval aws deploy` of the stack into the emulator, on the test account's network, with
/// `extra` parameters, as a new user types it.
fn deploy_as_new_user(aws: &Aws, stack: &str, extra: &[String]) {
    let mut args: Vec<String> = ["aws", "deploy", "--stack", stack, "--param", "ImageUri=agenteval:dev"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in [
        format!("Subnets={}", aws.subnet),
        format!("SecurityGroups={}", aws.security_group),
        format!("VpcId={}", aws.vpc),
    ]
    .iter()
    .chain(extra)
    {
        args.extend(["--param".to_string(), p.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = as_new_user(aws, &args);
    assert!(out.status.success(), "aws deploy: {}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("remembered as stack profile"), "{}", text(&out.stdout));
}

/// The first nights on AWS as docs/operations.md tells them: before any deploy a read command
/// says how to find the stack; `aws deploy` deploys and remembers it; `doctor`, the shipped
/// nightly config as shipped (Fargate Spot included, which the emulator cannot place: it falls
/// back to on-demand), `runs list`, `baseline set`, `status` and `report` with `--backend aws`
/// and no other flag; the second night compared with the first through the shipped gates.
#[tokio::test(flavor = "multi_thread")]
async fn the_docs_first_nights_on_aws_deploy_remember_the_stack_and_judge_the_second_night() {
    const KEY: &str = "sk-nightly-FIRST-NIGHT-5be1c";
    let mut aws = Aws::new(&[("OPENAI_API_KEY", KEY)], false).await;
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);

    let out = as_new_user(&aws, &["runs", "list", "--backend", "aws"]);
    let said = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "no stack yet: {said}");
    assert!(
        said.contains("agenteval-runs") && said.contains("aws deploy") && said.contains("AGENTEVAL_AWS_INDEX"),
        "{said}"
    );
    assert!(said.lines().filter(|l| !l.trim().is_empty()).count() <= 2, "one or two lines: {said}");

    deploy_as_new_user(&aws, &emulator::unique("agenteval"), &[]);
    let out = as_new_user(&aws, &["aws", "show", "--json"]);
    let profile: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let setting = |key: &str| {
        profile["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|s| s.as_str().unwrap().strip_prefix(&format!("{key}=")).map(str::to_string))
            .unwrap_or_else(|| panic!("{key} in {profile}"))
    };
    aws.cluster = setting("aws.cluster");
    aws.table = setting("storage.index").trim_start_matches("dynamodb://").to_string();
    aws.bucket = setting("storage.bundle_root").trim_start_matches("s3://").split('/').next().unwrap().to_string();
    aws.fargate(0);

    let nightly = repo().join("configs/nightly.yaml");
    let nightly = nightly.to_str().unwrap();
    let model = format!("agent.base_url={}", mock.base_url());
    let out = as_new_user(&aws, &["doctor", "--config", nightly, "--set", &model]);
    assert!(out.status.success(), "doctor after the deploy: {}{}", text(&out.stdout), text(&out.stderr));

    let night = |extra: &[&str]| {
        let mut args =
            vec!["submit", "--backend", "aws", "--config", nightly, "--json", "--set", &model, "--limit", "21"];
        args.extend(extra);
        let out = as_new_user(&aws, &args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no JSON ({e}): {}\n{}", text(&out.stdout), text(&out.stderr)));
        (v, out)
    };
    let (first, out) = night(&[]);
    assert_eq!(out.status.code(), Some(0), "{first}\n{}", text(&out.stderr));
    assert_eq!(first["summary"]["tasks_finished"], 21, "{first}");
    assert!(text(&out.stderr).contains("launching on on-demand Fargate"), "{}", text(&out.stderr));
    let first_run = first["run_id"].as_str().unwrap().to_string();
    assert!(first["bundle"].as_str().unwrap().starts_with(&setting("storage.bundle_root")), "{first}");

    let out = as_new_user(&aws, &["runs", "list", "--backend", "aws", "--name", "nightly", "--json"]);
    assert!(out.status.success(), "runs list: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&first_run), "{}", text(&out.stdout));
    let out = as_new_user(&aws, &["baseline", "set", &first_run, "--backend", "aws"]);
    assert!(out.status.success(), "baseline set: {}{}", text(&out.stdout), text(&out.stderr));

    let gates = repo().join("configs/gates.yaml");
    let (second, out) = night(&["--baseline", "baseline:nightly", "--gates", gates.to_str().unwrap()]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "a verdict: {second}\n{}", text(&out.stderr));
    let second_run = second["run_id"].as_str().unwrap();
    for args in [
        vec!["status", second_run, "--backend", "aws"],
        vec!["report", second_run, "--backend", "aws"],
        vec!["runs", "show", second_run, "--backend", "aws"],
    ] {
        let out = as_new_user(&aws, &args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let out = as_new_user(&aws, &["compare", "baseline:nightly", second_run, "--backend", "aws", "--json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", text(&out.stderr));
    let judged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(judged["comparison"]["base"]["run_id"].as_str(), Some(first_run.as_str()), "{judged}");
    assert_eq!(judged["comparison"]["cand"]["tasks"], 21, "{judged}");
    // The UI over the stack's table and bucket, from the same folder, with no other flag.
    let mut ui = aws.cmd_in(aws.ws.path(), &["ui", "--backend", "aws", "--port", "0", "--no-token"]);
    ui.env_remove("AGENTEVAL_AWS_INDEX");
    let server = crate::util::ui::UiServer::start(ui);
    let page = server.get("/").body;
    assert!(page.contains(&first_run[..13]) && page.contains(&second_run[..13]), "both nights listed: {page}");
    assert!(!mock.received().is_empty());
}

/// The nightly schedule's launch, as EventBridge Scheduler makes it: a RunTask of the stack's
/// controller task definition with no overrides at all. The stand-in runs the definition's own
/// command (the night's `submit … --baseline baseline:nightly --gates …` with the stack's
/// settings), which launches its workers and seals a run the index shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_launch_made_as_the_nightly_schedule_makes_it_runs_the_nights_command() {
    let mut aws = Aws::new(&[], false).await;
    let night = aws.ws.write(
        "night.yaml",
        &format!("name: nightly\n{TOY}backend:\n  id: aws\n  tasks_per_job: 4\naws:\n  poll_seconds: 0.3\n"),
    );
    let gates = repo().join("configs/gates.yaml");
    let nights = [format!("NightlyConfig={}", night.display()), format!("NightlyGates={}", gates.display())];
    deploy_as_new_user(&aws, &emulator::unique("scheduled"), &nights);
    let out = as_new_user(&aws, &["aws", "show", "--json"]);
    let profile: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let output = |k: &str| profile["outputs"][k].as_str().unwrap_or_else(|| panic!("{k}: {profile}")).to_string();
    aws.cluster = output("Cluster");
    aws.fargate(0);
    let out = python("run_task.py")
        .args(["--endpoint", &aws.endpoint, "--cluster", &aws.cluster])
        .args(["--task-definition", &output("ControllerTaskDefinition")])
        .args(["--subnet", &aws.subnet, "--group", &aws.security_group])
        .output()
        .unwrap();
    assert!(out.status.success(), "the scheduler's RunTask: {}", text(&out.stderr));
    let mut listed = serde_json::Value::Null;
    wait_until("the scheduled night is sealed", Duration::from_secs(180), || {
        let out = as_new_user(&aws, &["runs", "list", "--backend", "aws", "--json"]);
        listed = serde_json::from_slice(&out.stdout).unwrap_or_default();
        listed.as_array().is_some_and(|runs| runs.iter().any(|r| r["status"] == "complete"))
    });
    let run = &listed[0];
    assert_eq!(run["name"], "nightly [mock]", "{listed}");
    assert_eq!(run["tasks_finished"], 12, "{listed}");
}

/// `docker/rehearse.sh` as docs/operations.md tells it: the emulator, the stack deployed into it
/// and remembered, the Fargate stand-in; then the commands it prints work with no other flag.
#[test]
fn the_rehearsal_script_deploys_into_an_emulator_and_the_commands_it_prints_work() {
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    let ws = Workspace::new();
    let home = ws.path().join("home");
    let port = free_port();
    let mut script = Command::new(repo().join("docker/rehearse.sh"));
    script
        .args(["--processes", "--port", &port.to_string(), "--agenteval", BIN])
        .current_dir(ws.path())
        .env("AGENTEVAL_CONFIG_HOME", &home)
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AGENTEVAL_STACK_PROFILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    let mut child = Server(script.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !said.contains("The rehearsal is up") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => said += &format!("{line}\n"),
            Err(_) => panic!("the rehearsal did not come up: {said}"),
        }
    }
    let export = loop {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("the export line");
        if let Some(rest) = line.trim().strip_prefix("export ") {
            break rest.to_string();
        }
    };
    let user = |args: &[&str]| {
        let mut c = ws.cmd(args);
        c.current_dir(repo()).env("AGENTEVAL_CONFIG_HOME", &home);
        for kv in export.split_whitespace() {
            let (k, v) = kv.split_once('=').unwrap();
            c.env(k, v);
        }
        let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        wait_output(child, Duration::from_secs(240))
    };
    let out = user(&["doctor", "--config", "configs/toy-aws.yaml"]);
    assert!(out.status.success(), "doctor: {}{}", text(&out.stdout), text(&out.stderr));
    let out = user(&[
        "submit",
        "--backend",
        "aws",
        "--config",
        "configs/toy-aws.yaml",
        "--set",
        "benchmark.size=20",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}\n{}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["summary"]["tasks_finished"], 20, "{v}");
    let out = user(&["runs", "list", "--backend", "aws"]);
    assert!(
        out.status.success() && text(&out.stdout).contains("toy-aws"),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let _ =
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.0.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = child.0.wait();
}

/// `agenteval ui --backend aws`, started in an empty folder of "another machine": the pages and
/// the API over DynamoDB and S3, for a run submitted from elsewhere.
#[tokio::test(flavor = "multi_thread")]
async fn the_ui_shows_an_aws_run_from_another_folder() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let cfg = aws.config("ui-aws", TOY, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    let server =
        crate::util::ui::UiServer::start(aws.cmd_in(elsewhere.path(), &["ui", "--backend", "aws", "--port", "0"]));
    let list = server.get("/api/runs").json();
    assert_eq!(list["runs"][0]["run_id"], run.as_str(), "{list}");
    let one = server.get(&format!("/api/runs/{run}")).json();
    assert_eq!(one["summary"]["tasks_finished"], 12, "{one}");
    let task = "toy-0000001";
    let t = server.get(&format!("/api/runs/{run}/tasks/{task}")).json();
    assert_eq!(t["result"]["task_id"], task, "{t}");
    for path in [
        "/".to_string(),
        format!("/runs/{run}"),
        format!("/runs/{run}/tasks/{task}"),
        format!("/compare?base={run}&cand={run}"),
    ] {
        let page = server.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains(&run) || page.body.contains(&run[..13]), "{path} shows the run");
    }
    let (dom, console) = crate::util::ui::browse(&server.page(&format!("runs/{run}/tasks/{task}")), None);
    assert!(console.is_empty(), "{console:?}");
    assert!(dom.contains("class=\"open\""), "the trace viewer opens over S3 too");
    assert!(server.get(&format!("/api/runs/{run}/tasks/nope-1")).status == 404);
}

/// `regrade` on the fleet: the workers read the first run's answers from S3 and grade them
/// with an added evaluator; the new run lands in S3 and DynamoDB like any other.
#[tokio::test(flavor = "multi_thread")]
async fn a_regrade_on_the_fleet_grades_the_recorded_answers_from_s3() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let cfg = aws.config("regrade-aws", TOY, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let graded = format!("{TOY}  - kind: exact_match\n");
    let regrading = aws.config("regrade-aws-2", &graded, &aws.endpoint.clone());
    let (r, code) = aws.json(&["regrade", &run, "--json", "--config", regrading.to_str().unwrap()]);
    assert_eq!(code, 0, "{r}");
    let new = r["run_id"].as_str().unwrap().to_string();
    assert_eq!(r["summary"]["tasks_finished"], 12, "{r}");
    assert!(r["summary"]["evaluators"]["exact_match"].is_object(), "the added evaluator graded: {r}");
    let out = aws.run(&["validate-bundle", r["bundle"].as_str().unwrap()]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let (shown, _) = aws.json(&["show", &new, "toy-0000001", "--json", "--backend", "aws"]);
    let (was, _) = aws.json(&["show", &run, "toy-0000001", "--json", "--backend", "aws"]);
    assert_eq!(shown["result"]["agent"]["final_answer"], was["result"]["agent"]["final_answer"], "{shown}");
    // The recorded run, not a new one: the agent's time is the first run's to the nanosecond.
    assert_eq!(shown["result"]["agent"]["wall_seconds"], was["result"]["agent"]["wall_seconds"], "{shown}");
    let (listed, _) = aws.json(&["runs", "list", "--json", "--backend", "aws"]);
    assert_eq!(listed[0]["name"], "regrade-aws [mock] (regrade)", "{listed}");
}

/// A user's own `command` agent on the fleet (`agent.pack: true`): its folder travels in the
/// run's S3 prefix, every Fargate worker runs the archive's files, and a change to the agent is
/// a new hash that `compare` judges.
#[tokio::test(flavor = "multi_thread")]
async fn a_packed_agent_reaches_the_fleet_through_s3_and_its_change_is_judged() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let dir = aws.ws.path().join("my-agent");
    std::fs::create_dir_all(&dir).unwrap();
    let agent = "import json, os, sys\nfrom answers import VERSION\nreq = json.loads(sys.stdin.readline())\nhere = os.path.dirname(os.path.abspath(__file__))\nanswer = VERSION if req['input'] == 'version' else here\nprint(json.dumps({'kind': 'agent.final_answer', 'payload': {'answer': answer}}), flush=True)\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': answer}}), flush=True)\n";
    std::fs::write(dir.join("agent.py"), agent).unwrap();
    // A nonce: this test's archive is its own, never one another test unpacked.
    let nonce = format!("{}-{:?}", emulator::unique("n"), std::time::SystemTime::now());
    std::fs::write(dir.join("answers.py"), format!("VERSION = 'one'\nNONCE = '{nonce}'\n")).unwrap();
    let cases: String =
        (0..4).map(|i| format!("{{\"id\": \"v{i}\", \"input\": \"version\", \"expected\": \"one\"}}\n")).collect();
    aws.ws.write("cases.jsonl", &format!("{cases}{{\"id\": \"where\", \"input\": \"where\"}}\n"));
    let body = "benchmark: {kind: jsonl, cases: cases.jsonl}\nagent:\n  kind: command\n  command: [python3, agent.py]\n  workdir: my-agent\n  pack: true\n";
    let cfg = aws.config("packed-aws", body, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["summary"]["passed"], 5, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let (where_, _) = aws.json(&["show", &run, "where", "--json", "--backend", "aws"]);
    let ran_in = where_["result"]["agent"]["final_answer"].as_str().unwrap().to_string();
    // The archive is in the run's S3 prefix, and its hash names the folder the worker ran.
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    let store = agenteval_aws::S3BundleStore::new(clients, aws.bucket.clone(), "team/runs");
    let run_id: agenteval_core::RunId = run.parse().unwrap();
    let meta: serde_json::Value = serde_json::from_slice(
        &agenteval_core::traits::BundleStore::get(&store, &run_id, "metadata.json").await.unwrap(),
    )
    .unwrap();
    let one = meta["agent_sha256"].as_str().unwrap().to_string();
    let files = agenteval_core::traits::BundleStore::list(&store, &run_id, "agent/").await.unwrap();
    assert_eq!(files, [format!("agent/{one}.tar.gz")], "{files:?}");
    assert!(ran_in.ends_with(&format!("agenteval-agents/{one}")), "the worker ran {ran_in}");

    std::fs::write(dir.join("answers.py"), format!("VERSION = 'two'\nNONCE = '{nonce}'\n")).unwrap();
    let (v2, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v2}");
    assert_eq!(v2["summary"]["passed"], 1, "the changed agent ran: {v2}");
    let run2 = v2["run_id"].as_str().unwrap().to_string();
    let (c, code) = aws.json(&["compare", &run, &run2, "--format", "json", "--backend", "aws"]);
    assert_eq!(code, 0, "{c}");
    assert_ne!(c["comparison"]["base"]["run_id"], c["comparison"]["cand"]["run_id"]);
    assert_eq!(c["comparison"]["regressions"].as_array().unwrap().len(), 4, "{c}");
}

/// A strict replay on the fleet, from the recording run's bundle on S3: the model server is
/// gone and no key exists anywhere, yet every answer comes back as recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_strict_replay_on_the_fleet_needs_no_key_and_no_model() {
    const KEY: &str = "sk-aws-RECORDING-ONLY-7f1e";
    let mut aws = Aws::new(&[("prod/model-key", KEY)], true).await;
    aws.fargate(0);
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let url = mock.base_url();
    aws.ws.write(
        "cases.jsonl",
        "{\"id\": \"tool\", \"input\": \"USE_TOOL please\"}\n{\"id\": \"plain\", \"input\": \"hello\"}\n",
    );
    let agent = |secrets: &str| {
        format!(
            "benchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: llm\n  model: openai:gpt-4o-mini\n  base_url: {url}\n  allow_insecure_http: true\n  tools: [python]\n{secrets}"
        )
    };
    let cfg = aws.config("replay-aws", &agent("  secrets: {OPENAI_API_KEY: prod/model-key}\n"), &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    let recorded = v["bundle"].as_str().unwrap().to_string();
    let calls = mock.received().len();
    assert!(calls >= 3, "the recording run called the model");
    drop(mock);
    // The replay's agent names a secret that does not exist: a strict replay never fetches it.
    let cfg =
        aws.config("replay-aws-2", &agent("  secrets: {OPENAI_API_KEY: prod/no-such-key}\n"), &aws.endpoint.clone());
    let (r, code) = aws.json(&[
        "submit",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--cassettes",
        &recorded,
        "--cassette-mode",
        "replay",
    ]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["summary"]["tasks_finished"], 2, "{r}");
    let run = r["run_id"].as_str().unwrap();
    let (tool, _) = aws.json(&["show", run, "tool", "--json", "--backend", "aws"]);
    assert_eq!(tool["result"]["agent"]["final_answer"], "the tool said 42", "{tool}");
    let (plain, _) = aws.json(&["show", run, "plain", "--json", "--backend", "aws"]);
    assert_eq!(plain["result"]["agent"]["final_answer"], "echo: hello", "{plain}");
    assert!(!r.to_string().contains(KEY));
    // Recording into a bundle is refused: a fleet run records its calls in its own bundle.
    let out =
        aws.run(&["submit", "--config", cfg.to_str().unwrap(), "--cassettes", &recorded, "--cassette-mode", "record"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("records its calls in its own bundle"), "{}", text(&out.stderr));
}

/// A `command` agent's calls through the gateway on the fleet: the worker of each ECS task runs
/// the gateway with the key from Secrets Manager; the usage lands in the task's result (S3) and
/// the index (DynamoDB), the calls in the task's pack, from which a strict replay on the fleet
/// answers them with the model gone and the secret no longer named.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_agents_usage_and_calls_land_in_s3_and_dynamodb_and_replay_on_the_fleet() {
    const KEY: &str = "sk-aws-GATEWAY-ONLY-0d3a9";
    let mut aws = Aws::new(&[("prod/openai", KEY)], true).await;
    aws.fargate(0);
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let program = aws.ws.write("agent.py", crate::gateway::AGENT);
    let program = program.display();
    let url = mock.base_url();
    aws.ws.write(
        "cases.jsonl",
        "{\"id\": \"chat\", \"input\": \"chat\"}\n{\"id\": \"responses\", \"input\": \"responses\"}\n",
    );
    let agent = |secret: &str| {
        format!(
            "benchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: [python3, {program}]\n  upstream:\n    openai:\n      base_url: {url}\n      secrets: {{OPENAI_API_KEY: {secret}}}\n    prices:\n      mock-model: {{input_per_mtok: 1000, output_per_mtok: 1000}}\n"
        )
    };
    let cfg = aws.config("gateway-aws", &agent("prod/openai"), &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(mock.received().len(), 2, "{v}");
    assert!(mock.received().iter().all(|r| r.credential.as_deref().is_some_and(|c| c.contains(KEY))));
    let recorded = v["bundle"].as_str().unwrap().to_string();
    let run = v["run_id"].as_str().unwrap().to_string();
    // The index (DynamoDB) has the run's usage; the result (S3) has the task's and its calls.
    let (shown, _) = aws.json(&["runs", "show", &run, "--json", "--backend", "aws"]);
    assert_eq!(shown["summary"]["total_tokens"], 30, "{shown}");
    let (chat, _) = aws.json(&["show", &run, "chat", "--json", "--backend", "aws"]);
    assert_eq!(chat["result"]["agent"]["total_tokens"], 15, "{chat}");
    assert!((chat["result"]["agent"]["total_cost_usd"].as_f64().unwrap() - 0.015).abs() < 1e-12, "{chat}");
    assert!(chat.to_string().contains("model.call"), "{chat}");
    drop(mock);
    // Replayed on the fleet from the recording run's bundle: no model, and a secret that does
    // not exist is never fetched.
    let cfg = aws.config("gateway-aws-2", &agent("prod/no-such-key"), &aws.endpoint.clone());
    let (r, code) = aws.json(&[
        "submit",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--cassettes",
        &recorded,
        "--cassette-mode",
        "replay",
    ]);
    assert_eq!(code, 0, "{r}");
    let replayed = r["run_id"].as_str().unwrap();
    let (chat, _) = aws.json(&["show", replayed, "chat", "--json", "--backend", "aws"]);
    assert_eq!(chat["result"]["agent"]["final_answer"], "echo: hello", "{chat}");
    assert_eq!(chat["result"]["agent"]["total_tokens"], 15, "{chat}");
    assert!(!r.to_string().contains(KEY));
    let scan = python("scan_for.py")
        .args(["--endpoint", &aws.endpoint, "--bucket", &aws.bucket, "--table", &aws.table, "--needle", KEY])
        .output()
        .unwrap();
    assert!(scan.status.success(), "the key was stored: {}", text(&scan.stdout));
}

/// A registry on this machine (Debian's `docker-registry`), stopped when dropped: where the
/// fleet tests push task images and the stand-in pulls them from.
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry() -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = dir.path().join("config.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .args(["serve", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry (tests/run.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the registry did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Registry { child, port, _dir: dir }
}

/// A Harbor task whose image (built from its `environment/` folder) holds `/marker` = `marker`;
/// its solution writes the marker it finds into `/app/answer.txt` and its tests want both.
fn image_task(root: &Path, id: &str, marker: &str, also: &str) {
    let t = root.join(id);
    for d in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    std::fs::write(t.join("instruction.md"), format!("Write {marker} into /app/answer.txt.\n")).unwrap();
    std::fs::write(t.join("task.toml"), "version = \"1.0\"\n[environment]\ncpus = 1\nmemory_mb = 3000\n").unwrap();
    std::fs::write(
        t.join("environment/Dockerfile"),
        format!(
            "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*\nRUN echo {marker} > /marker\nWORKDIR /app\n"
        ),
    )
    .unwrap();
    std::fs::write(t.join("solution/solve.sh"), format!("#!/bin/bash\ncat /marker > /app/answer.txt\n{also}")).unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        format!(
            "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/answer.txt)\" = {marker} ] && [ \"$(cat /marker)\" = {marker} ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        ),
    )
    .unwrap();
}

/// Harbor tasks on the fleet, each in its own image: two folders (three tasks) make two images,
/// which `agenteval images build --push` puts in a registry; until then `submit` refuses (exit
/// 2, naming both, nothing created). Then every task's environment is an ECS task of its own
/// image (the server arriving from the init container, dialing its worker back), two tasks of
/// one image are one job, each in an environment of its own (the first one's planted program
/// never reaches the second), each image's task definition is registered once (a second run
/// registers nothing), the result names the image, the bundle validates and holds each patch,
/// and an agent that does nothing passes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn harbor_tasks_on_the_fleet_run_each_in_its_own_image_from_the_registry() {
    let tag = image();
    let reg = registry();
    let mut aws = Aws::new(&[], true).await;
    let tasks = aws.ws.path().join("tasks");
    // alpha-1 also leaves a program behind outside its folder, in its own environment only.
    image_task(
        &tasks,
        "alpha-1",
        "alpha",
        "echo 'echo planted' > /usr/local/bin/pytest && chmod +x /usr/local/bin/pytest\n",
    );
    image_task(&tasks, "alpha-2", "alpha", "");
    image_task(&tasks, "beta", "beta", "");
    let repo = format!("127.0.0.1:{}/agenteval-envs", reg.port);
    let body = format!(
        "benchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: oracle\n  limits:\n    max_wall_seconds: 120\nenvironment:\n  base_image: agenteval-local/debian:bookworm\n",
        tasks.display()
    );
    let cfg = aws.config("images", &body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: {repo}\n"));
    std::fs::write(&cfg, yaml).unwrap();

    // Not pushed yet: refused before anything exists, each image named.
    let out = aws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("2 image(s) the run needs are not in") && err.matches(&repo).count() >= 2, "{err}");
    let (listed, _) = aws.json(&["runs", "list", "--json", "--backend", "aws"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "nothing was created: {listed}");

    let (built, code) = aws.json(&["images", "build", "--json", "--config", cfg.to_str().unwrap(), "--push", &repo]);
    assert_eq!(code, 0, "{built}");
    let images = built["images"].as_array().unwrap();
    assert_eq!(images.len(), 2, "two folders' contents, two images: {built}");
    assert_eq!(images.iter().map(|i| i["tasks"].as_u64().unwrap()).sum::<u64>(), 3, "{built}");
    let pushed: Vec<String> = images.iter().map(|i| i["pushed"].as_str().unwrap().to_string()).collect();
    assert!(pushed.iter().all(|p| p.starts_with(&format!("{repo}@sha256:"))), "{pushed:?}");
    // One image is not on this engine any more: the stand-in pulls it from the registry.
    let beta_local = images.iter().find(|i| i["context"].as_str().unwrap().contains("beta")).unwrap();
    let beta_tag = beta_local["tag"].as_str().unwrap().to_string();
    let beta_pinned = beta_local["pushed"].as_str().unwrap().to_string();
    let remote_tag = format!("{repo}:{}", beta_tag.rsplit_once(':').unwrap().1);
    docker(&["rmi", "-f", &beta_tag, &remote_tag, &beta_pinned]);

    let stats = aws.fargate_in(tag, None);
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    let logs = || -> String {
        std::fs::read_dir(aws.ws.path().join("worker-logs"))
            .map(|d| d.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default()).collect())
            .unwrap_or_default()
    };
    assert_eq!(code, 0, "{v}\n{}", logs());
    assert_eq!((v["status"].as_str(), v["summary"]["passed"].as_u64()), (Some("complete"), Some(3)), "{v}\n{}", logs());
    let run = v["run_id"].as_str().unwrap().to_string();
    let bundle = v["bundle"].as_str().unwrap().to_string();
    let f = read_json(&stats);
    let per_image = f["images"].as_object().unwrap();
    assert_eq!(per_image.len(), 2, "two images ran: {f}");
    assert_eq!(per_image.get(&beta_pinned).and_then(|n| n.as_u64()), Some(1), "{f}");
    // alpha's two tasks were one job, each in an environment of its own.
    assert_eq!(per_image.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), 3, "{f}");
    assert!(f["pulls"].as_array().unwrap().iter().any(|p| p["image"] == beta_pinned.as_str()), "beta was pulled: {f}");
    // The figure the issue asks for (the benchmark's note quotes it): how long a container of a
    // task image took to be ready for its worker, with the image on the engine and pulled.
    println!(
        "task image start on the stand-in (pull + init container), seconds: {} ; pulls: {}",
        f["ready_seconds"], f["pulls"]
    );

    // Each result names the image it ran in; the patch of each is in the bundle.
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    // `team/runs/RUN/tasks/ID/NAME`: NAME from the task's pack, `team/runs/RUN/tasks/ID.tar.gz`.
    let get = |key: String| {
        let c = clients.clone();
        let bucket = aws.bucket.clone();
        async move {
            let (folder, name) = key.split_once("/tasks/").unwrap();
            let (id, name) = name.split_once('/').unwrap();
            let pack = format!("{folder}/tasks/{id}.tar.gz");
            let o = c.s3.get_object().bucket(bucket).key(&pack).send().await.unwrap();
            let files = agenteval_core::taskpack::unpack(&o.body.collect().await.unwrap().into_bytes(), &pack).unwrap();
            String::from_utf8(files.get(name).unwrap_or_else(|| panic!("{pack} holds no {name}")).to_vec()).unwrap()
        }
    };
    for (task, want) in [("alpha-1", None), ("alpha-2", None), ("beta", Some(&beta_pinned))] {
        let r: serde_json::Value =
            serde_json::from_str(&get(format!("team/runs/{run}/tasks/{task}/result.json")).await).unwrap();
        let image = r["image"].as_str().unwrap_or_default();
        assert!(image.starts_with(&format!("{repo}@sha256:")), "{task}: {r}");
        if let Some(w) = want {
            assert_eq!(image, w.as_str(), "{task}");
        } else {
            assert_ne!(image, beta_pinned, "{task} ran in alpha's image");
        }
        let patch = get(format!("team/runs/{run}/tasks/{task}/artifacts/patch.diff")).await;
        assert!(patch.contains("answer.txt"), "{task}'s patch: {patch}");
    }
    let (shown, _) = aws.json(&["runs", "show", &run, "--tasks", "--json", "--backend", "aws"]);
    let attempt =
        |id: &str| shown["tasks"].as_array().unwrap().iter().find(|t| t["task_id"] == id).unwrap()["attempt"].clone();
    // Each task had an environment of its own: alpha-1's planted program never reached alpha-2.
    assert_eq!((attempt("alpha-1"), attempt("alpha-2")), (1.into(), 1.into()), "{shown}");
    let log = get(format!("team/runs/{run}/tasks/alpha-1/worker.log")).await;
    assert!(log.contains("/usr/local/bin/pytest"), "the change is named in alpha-1's log: {log}");
    assert!(log.contains("environment: ECS task") && log.contains("no_network"), "{log}");
    let out = aws.run(&["validate-bundle", &bundle]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    // This test's images' task definitions (other tests share the emulator's account).
    let families: Vec<String> =
        pushed.iter().map(|p| format!("-env-{}", &p.rsplit_once("@sha256:").unwrap().1[..16])).collect();
    let image_defs = || async {
        let all = clients.ecs.list_task_definitions().send().await.unwrap();
        all.task_definition_arns()
            .iter()
            .filter(|a| a.contains("/agenteval-worker-env-") && families.iter().any(|f| a.contains(f.as_str())))
            .count()
    };
    assert_eq!(image_defs().await, 2, "one task definition per image");

    // A regrade on the fleet runs no agent: each task's image again with its recorded patch
    // applied, then its tests.
    let (r, code) = aws.json(&["regrade", &run, "--json", "--backend", "aws"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["summary"]["passed"].as_u64(), Some(3), "{r}");
    let regraded = r["run_id"].as_str().unwrap();
    let log = get(format!("team/runs/{regraded}/tasks/beta/worker.log")).await;
    assert!(log.contains("applied run") && log.contains("patch"), "{log}");

    // From a folder with no config, the run is listed.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = aws.cmd_in(elsewhere.path(), &["runs", "list", "--backend", "aws", "--json"]).output().unwrap();
    assert!(text(&out.stdout).contains(&run), "{}", text(&out.stdout));

    // An agent that does nothing passes nothing; the images' task definitions are reused.
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "agent.kind=nop"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["summary"]["passed"].as_u64(), Some(0), "{v}");
    assert_eq!(image_defs().await, 2, "no registration for images already registered");
    let left = docker(&["ps", "-q", "--filter", &format!("name=agenteval-task-{}-", aws.cluster)]);
    assert!(text(&left.stdout).trim().is_empty(), "no container is left running");
}

/// An installed agent on the fleet runs in its task image's agent layer: `images build --push`
/// builds the layer and pushes it beside the image; until then `submit` refuses naming it; then
/// each task runs in the layer (its worker finds the agent there and installs nothing), and the
/// setup's program solves the task.
#[tokio::test(flavor = "multi_thread")]
async fn an_installed_agent_runs_in_its_agent_layer_pushed_beside_the_task_image() {
    let tag = image();
    let reg = registry();
    let mut aws = Aws::new(&[], true).await;
    let tasks = aws.ws.path().join("tasks");
    image_task(&tasks, "layered", "gamma", "");
    // The agent: a program the setup installs, doing what the task asks.
    aws.ws.write(
        "setup.sh",
        "#!/bin/bash\nset -e\nprintf '#!/bin/sh\\ncat /marker > /app/answer.txt\\necho solved\\n' > /usr/local/bin/solver\nchmod +x /usr/local/bin/solver\n",
    );
    let repo = format!("127.0.0.1:{}/agenteval-envs", reg.port);
    let body = format!(
        "benchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: installed\n  setup: setup.sh\n  command: solver\n  limits:\n    max_wall_seconds: 120\nenvironment:\n  base_image: agenteval-local/debian:bookworm\n",
        tasks.display()
    );
    let cfg = aws.config("layered", &body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: {repo}\n"));
    std::fs::write(&cfg, yaml).unwrap();
    let out = aws.run(&["submit", "--config", cfg.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("-agent-"), "the layer is what the run needs: {err}");

    let (built, code) = aws.json(&["images", "build", "--json", "--config", cfg.to_str().unwrap(), "--push", &repo]);
    assert_eq!(code, 0, "{built}");
    let layer = built["images"][0]["layer_pushed"].as_str().unwrap_or_default().to_string();
    assert!(layer.starts_with(&format!("{repo}@sha256:")), "{built}");

    let _stats = aws.fargate_in(tag, None);
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!((code, v["summary"]["passed"].as_u64()), (0, Some(1)), "{v}");
    let run = v["run_id"].as_str().unwrap();
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    let pack = format!("team/runs/{run}/tasks/layered.tar.gz");
    let o = clients.s3.get_object().bucket(&aws.bucket).key(&pack).send().await.unwrap();
    let files = agenteval_core::taskpack::unpack(&o.body.collect().await.unwrap().into_bytes(), &pack).unwrap();
    let log = String::from_utf8(files.get("worker.log").unwrap().to_vec()).unwrap();
    assert!(log.contains("the environment's image is the layer"), "{log}");
    let r: serde_json::Value = serde_json::from_slice(files.get("result.json").unwrap()).unwrap();
    assert_eq!(r["image"].as_str(), Some(layer.as_str()), "{r}");
}

/// SWE-bench predictions graded on the fleet: each instance an ECS task of the instance's own
/// image, pulled from a registry on this machine (the image the row names, run as it is), the
/// worker's container being the fresh one the patch is applied in; the verdicts are the local
/// fleet's (and the official harness's, `swebench.rs`).
#[tokio::test(flavor = "multi_thread")]
async fn swebench_predictions_are_graded_on_the_fleet_in_each_instances_image() {
    use crate::util::swebench::{instance_image, predictions, row, write_jsonl};
    let tag = image();
    let reg = registry();
    let mut aws = Aws::new(&[], true).await;
    let (local, base) = instance_image();
    let remote = format!("127.0.0.1:{}/swebench-calc:1", reg.port);
    let pushed = docker(&["tag", &local, &remote]);
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let pushed = docker(&["push", &remote]);
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let preds = predictions();
    let rows: Vec<serde_json::Value> =
        preds.iter().map(|(id, _)| row(id, "Fix `add`: it subtracts.", &remote, &base)).collect();
    write_jsonl(&aws.ws, "dataset.jsonl", &rows);
    let pred_rows: Vec<serde_json::Value> = preds
        .iter()
        .map(|(id, p)| serde_json::json!({"instance_id": id, "model_name_or_path": "test-model", "model_patch": p}))
        .collect();
    write_jsonl(&aws.ws, "preds.jsonl", &pred_rows);
    let body = "benchmark:\n  kind: swebench\n  dataset: dataset.jsonl\n  timeout_seconds: 300\nagent:\n  kind: predictions\n  path: preds.jsonl\nenvironment:\n  kind: docker\n";
    let cfg = aws.config("swebench", body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: 127.0.0.1:{}/agenteval-envs\n", reg.port));
    std::fs::write(&cfg, yaml).unwrap();
    aws.fargate_in(tag, None);
    let (v, code) =
        aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "backend.tasks_per_job=1"]);
    let logs = || -> String {
        std::fs::read_dir(aws.ws.path().join("worker-logs"))
            .map(|d| d.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default()).collect())
            .unwrap_or_default()
    };
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v}\n{}", logs());
    let run = v["run_id"].as_str().unwrap().to_string();
    let (shown, _) = aws.json(&["runs", "show", &run, "--tasks", "--json", "--backend", "aws"]);
    let mut passed: Vec<&str> = shown["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["outcome"] == "passed")
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    passed.sort();
    assert_eq!(passed, ["calc-fake-output", "calc-gold"], "the harness's resolved set: {shown}\n{}", logs());
    assert_eq!(v["summary"]["suspect"], 1, "fake output: {v}");
    assert_eq!(v["summary"]["tampered"], 2, "an edited test file, a conftest.py: {v}");
    // Graded inside the instance's own image, its report in the pack.
    let (gold, _) = aws.json(&["show", &run, "calc-gold", "--json", "--backend", "aws"]);
    let image =
        gold.pointer("/result/image").or_else(|| gold.get("image")).and_then(|i| i.as_str()).unwrap_or_default();
    assert!(image.contains("swebench-calc"), "{gold}");
}

/// SWE-bench with an acting agent on the fleet: the `llm` agent (the mock, scripted to fix one
/// instance) acts in an ECS task of the instance's image, and its patch is graded in a second,
/// fresh one, as the local backend grades it (`swebench.rs`: the same two verdicts); the
/// tests never see the container the agent acted in.
#[tokio::test(flavor = "multi_thread")]
async fn swebench_with_an_acting_agent_is_graded_on_the_fleet_in_a_fresh_environment() {
    use crate::util::swebench::{instance_image, row, write_jsonl};
    let reg = registry();
    let secret = emulator::unique("openai");
    let mut aws = Aws::new(&[(&secret, "sk-test-not-a-real-key-000000000000")], true).await;
    let (local, base) = instance_image();
    let remote = format!("127.0.0.1:{}/swebench-calc:1", reg.port);
    assert!(docker(&["tag", &local, &remote]).status.success());
    let pushed = docker(&["push", &remote]);
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let rows = [
        row("calc-agent", "`add` subtracts; make it add. FIX_CALC", &remote, &base),
        row("calc-idle", "`add` subtracts; make it add.", &remote, &base),
    ];
    write_jsonl(&aws.ws, "dataset.jsonl", &rows);
    let body = format!(
        "benchmark:\n  kind: swebench\n  dataset: dataset.jsonl\nagent:\n  kind: llm\n  model: openai:gpt-4o-mini\n  base_url: {}\n  secrets: {{OPENAI_API_KEY: {secret}}}\n  tools: []\n  limits:\n    max_wall_seconds: 300\nenvironment:\n  kind: docker\n",
        mock.base_url()
    );
    let cfg = aws.config("swebench-agent", &body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: 127.0.0.1:{}/agenteval-envs\n", reg.port));
    std::fs::write(&cfg, yaml).unwrap();
    aws.fargate(0);
    let (v, code) =
        aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap(), "--set", "backend.tasks_per_job=1"]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let (agent, _) = aws.json(&["show", &run, "calc-agent", "--json", "--backend", "aws"]);
    assert_eq!(agent["result"]["passed"], true, "{agent}");
    let (idle, _) = aws.json(&["show", &run, "calc-idle", "--json", "--backend", "aws"]);
    assert_eq!(idle["result"]["passed"], false, "{idle}");
    assert!(idle.to_string().contains("empty patch"), "{idle}");
    // The eval script says which container it ran in: a fresh one, never the agent's.
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    let pack = format!("team/runs/{run}/tasks/calc-agent.tar.gz");
    let o = clients.s3.get_object().bucket(&aws.bucket).key(&pack).send().await.unwrap();
    let files = agenteval_core::taskpack::unpack(&o.body.collect().await.unwrap().into_bytes(), &pack).unwrap();
    let log = String::from_utf8_lossy(files.get("artifacts/swebench/test_output.txt").unwrap()).into_owned();
    assert!(log.contains("FRESH-CONTAINER") && !log.contains("AGENT-CONTAINER"), "{log}");
    // Each instance had an environment task its agent acted in, and calc-agent a second, fresh,
    // to be graded in (an empty patch is not run, as the harness does not run one).
    let started_by = format!("env-{}", run.replace('-', ""));
    let envs = clients.ecs.list_tasks().cluster(&aws.cluster).started_by(&started_by).desired_status("STOPPED".into());
    let envs = envs.send().await.unwrap();
    assert_eq!(envs.task_arns().len(), 3, "{envs:?}");
}

/// A hostile agent on the fleet, root in its container under `no-network`, with the gateway in
/// front of a real key: it finds its worker (the link's connection is in its network
/// namespace's table) but reaches nothing of it but the workers' ports, not the emulator (the
/// AWS APIs) on the worker's address or its own, no credentials endpoint, no metadata; and no
/// key, credential or link token is in any environment it can read. Each finding is one line
/// of the file it leaves, read back from its patch.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_agent_on_the_fleet_reaches_only_the_gateway_and_finds_no_key_or_credentials() {
    const KEY: &str = "sk-fleet-PROVIDER-KEY-7f21c";
    let reg = registry();
    let secret = emulator::unique("openai");
    let mut aws = Aws::new(&[(&secret, KEY)], true).await;
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let moto_port = aws.endpoint.rsplit(':').next().unwrap().trim_end_matches('/').to_string();
    let t = aws.ws.path().join("tasks/probe");
    for d in ["environment", "tests"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    std::fs::write(t.join("instruction.md"), "Look around.\n").unwrap();
    std::fs::write(t.join("task.toml"), "version = \"1.0\"\n[environment]\nnetwork_mode = \"no-network\"\n").unwrap();
    std::fs::write(
        t.join("environment/Dockerfile"),
        "FROM debian:bookworm-slim\nCOPY probe.sh /probe.sh\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        t.join("environment/probe.sh"),
        format!(
            r#"#!/bin/bash
out=/app/findings.txt
: > "$out"
try() {{ if timeout 3 bash -c "echo > /dev/tcp/$2/$3" 2>/dev/null; then echo "$1: reached" >> "$out"; else echo "$1: refused" >> "$out"; fi; }}
# The worker this environment's server dialed, from the namespace's connection table.
rem=$(awk 'NR>1 && $4=="01" {{print $3; exit}}' /proc/net/tcp)
hexip=${{rem%:*}}; port=$((16#${{rem#*:}}))
ip=$((16#${{hexip:6:2}})).$((16#${{hexip:4:2}})).$((16#${{hexip:2:2}})).$((16#${{hexip:0:2}}))
try worker-link "$ip" "$port"
try emulator-on-worker "$ip" {moto_port}
try emulator-loopback 127.0.0.1 {moto_port}
try credentials-endpoint 169.254.170.2 80
try metadata-endpoint 169.254.169.254 80
gw=${{OPENAI_BASE_URL#http://}}; gw=${{gw%%/*}}
try gateway "${{gw%:*}}" "${{gw#*:}}"
if grep -qs -e {KEY} -e AWS_SECRET_ACCESS_KEY -e AWS_CONTAINER_CREDENTIALS -e AGENTEVAL_ENVLINK_TOKEN /proc/[0-9]*/environ; then
  echo "secrets: found" >> "$out"; else echo "secrets: none" >> "$out"; fi
[ "$OPENAI_API_KEY" = {KEY} ] && echo "key: given" >> "$out"
exit 0
"#
        ),
    )
    .unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        "#!/bin/bash\nmkdir -p /logs/verifier\nif [ -s /app/findings.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let repo = format!("127.0.0.1:{}/agenteval-envs", reg.port);
    let body = format!(
        "benchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: installed\n  command: bash /probe.sh\n  upstream:\n    openai:\n      base_url: {}\n      secrets: {{OPENAI_API_KEY: {secret}}}\n  limits:\n    max_wall_seconds: 120\nenvironment:\n  base_image: agenteval-local/debian:bookworm\n",
        aws.ws.path().join("tasks").display(),
        mock.base_url()
    );
    let cfg = aws.config("hostile", &body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: {repo}\n"));
    std::fs::write(&cfg, yaml).unwrap();
    let (built, code) = aws.json(&["images", "build", "--json", "--config", cfg.to_str().unwrap(), "--push", &repo]);
    assert_eq!(code, 0, "{built}");
    aws.fargate(0);
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!((v["summary"]["passed"].as_u64(), code), (Some(1), 0), "{v}");
    let run = v["run_id"].as_str().unwrap();
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    let pack = format!("team/runs/{run}/tasks/probe.tar.gz");
    let o = clients.s3.get_object().bucket(&aws.bucket).key(&pack).send().await.unwrap();
    let files = agenteval_core::taskpack::unpack(&o.body.collect().await.unwrap().into_bytes(), &pack).unwrap();
    let patch = String::from_utf8_lossy(files.get("artifacts/patch.diff").expect("the findings' patch")).into_owned();
    let found: Vec<&str> = patch.lines().filter_map(|l| l.strip_prefix('+')).filter(|l| l.contains(": ")).collect();
    assert_eq!(
        found,
        [
            "worker-link: reached",
            "emulator-on-worker: refused",
            "emulator-loopback: refused",
            "credentials-endpoint: refused",
            "metadata-endpoint: refused",
            "gateway: reached",
            "secrets: none",
        ],
        "{patch}"
    );
}

/// Runs the Harbor tasks in `tasks` with `agent` from one config file on the local backend and
/// on the fleet (their images built and pushed between), and gives each backend's verdicts: per
/// task its outcome, rewards, and whether it is unscored or counted apart (suspect).
type Verdicts = std::collections::BTreeMap<String, String>;
async fn on_both_backends(
    aws: &mut Aws,
    reg: &Registry,
    tasks: &Path,
    agent: &str,
    grading: &str,
) -> (Verdicts, Verdicts) {
    let repo = format!("127.0.0.1:{}/agenteval-envs", reg.port);
    let body = format!(
        "benchmark:\n  kind: harbor\n  grading: {grading}\n  path: {}\nagent:\n  kind: {agent}\n  limits:\n    max_wall_seconds: 300\nenvironment:\n  kind: docker\n  base_image: {}\n",
        tasks.display(),
        crate::environments::BASE
    );
    let cfg = aws.config(&format!("both-{agent}-{grading}"), &body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: {repo}\n"));
    std::fs::write(&cfg, yaml).unwrap();
    let cfg = cfg.to_str().unwrap();
    let local = aws.ws.path().join(format!("local-runs-{agent}-{grading}"));
    let index = format!("{}/index.sqlite", local.display());
    let local_set =
        ["--set", &format!("storage.bundle_root={}", local.display()), "--set", &format!("storage.index={index}")];
    let mut args = vec!["submit", "--json", "--config", cfg, "--backend", "local"];
    args.extend(local_set);
    let (here, code) = aws.json(&args);
    assert_eq!((here["status"].as_str(), code), (Some("complete"), 0), "{here}");
    let (built, code) = aws.json(&["images", "build", "--json", "--config", cfg, "--push", &repo]);
    assert_eq!(code, 0, "{built}");
    if aws.harnesses.is_empty() {
        aws.fargate(0);
    }
    let (fleet, code) = aws.json(&["submit", "--json", "--config", cfg]);
    assert_eq!((fleet["status"].as_str(), code), (Some("complete"), 0), "{fleet}");
    let verdicts = |run: &str, place: [&str; 2]| -> Verdicts {
        let (shown, _) = aws.json(&["runs", "show", run, "--tasks", "--json", place[0], place[1]]);
        let ids: Vec<String> =
            shown["tasks"].as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap().to_string()).collect();
        ids.into_iter()
            .map(|id| {
                let (t, _) = aws.json(&["show", run, &id, "--json", place[0], place[1]]);
                let r = &t["result"];
                let verdict = format!(
                    "{} {} unscored={} suspect={}",
                    r["passed"],
                    r["rewards"],
                    r["unscored"],
                    r["suspect"].is_array()
                );
                (id, verdict)
            })
            .collect()
    };
    let on_local = verdicts(here["run_id"].as_str().unwrap(), ["--index", &index]);
    let on_fleet = verdicts(fleet["run_id"].as_str().unwrap(), ["--backend", "aws"]);
    (on_local, on_fleet)
}

/// One config file, either backend: Harbor's probe tasks (a server the agent leaves for the
/// tests, watched and not named; one that rewrites the reward, named; a timeout after the work, no reward, named rewards, `public`, an `allowlist` (its host
/// reached through the worker's egress proxy, another refused), a `separate` verifier, reward
/// rewriters and test tamperers held still, localhost, a hosts pointer, PID 1 out of the agent's
/// reach through `/proc`) run by the oracle
/// on the local backend and on the fleet, and every task gets the same outcome and rewards on
/// both.
#[tokio::test(flavor = "multi_thread")]
async fn harbors_probe_tasks_get_the_same_verdicts_on_the_local_backend_and_the_fleet() {
    crate::environments::docker_ready();
    let reg = registry();
    let mut aws = Aws::new(&[], true).await;
    let tasks = aws.ws.path().join("tasks");
    crate::harbor_rules::probes(&tasks);
    let (on_local, on_fleet) = on_both_backends(&mut aws, &reg, &tasks, "oracle", "harbor").await;
    assert_eq!(on_local.len(), 17, "{on_local:?}");
    // The server the agent leaves is watched on both (from the host locally, from the
    // environment's own server on the fleet): an honest one is counted apart on neither.
    assert!(on_fleet["server"].ends_with("suspect=false"), "{on_fleet:?}");
    assert!(on_fleet["server-rewriter"].ends_with("suspect=true"), "the fleet names a server that wrote: {on_fleet:?}");
    // The listening tamperer races the tests it rewrites: whether they wrote their 0 before it
    // did is the machine's timing (a loaded run once saw none on the fleet), not a verdict. On
    // both it fails and is not counted apart; its reward is not compared.
    let (mut on_local, mut on_fleet) = (on_local, on_fleet);
    for verdicts in [&mut on_local, &mut on_fleet] {
        let v = verdicts.get_mut("listening-tamperer").expect("the probe ran");
        assert!(v.starts_with("false ") && v.ends_with("suspect=false"), "{v}");
        *v = "false".into();
    }
    assert_eq!(on_fleet, on_local, "the same verdict for every task on both backends");
}

/// A tool server's key on the fleet: a compose task whose sidecar asks for `${TOOL_KEY}`
/// (`roles.tools.secrets`) gets it from Secrets Manager as ECS starts it. The environment's task
/// definition names the secret by its ARN and holds no part of the key; the sidecar answers the
/// key's digest, which the tests check; the agent's container never has it.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_servers_key_reaches_its_sidecar_on_the_fleet_by_the_task_definitions_secrets() {
    crate::environments::docker_ready();
    const KEY: &str = "tk-fleet-7f3a9c21e5";
    let reg = registry();
    let mut aws = Aws::new(&[("prod/tool-key", KEY)], true).await;
    let d = aws.ws.path().join("tasks/tool-key");
    let image = "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\n";
    let write = |p: &str, text: &str| {
        std::fs::create_dir_all(d.join(p).parent().unwrap()).unwrap();
        std::fs::write(d.join(p), text).unwrap();
    };
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(KEY.as_bytes()));
    write("instruction.md", "Nothing to do.\n");
    write("task.toml", "version = \"1.0\"\n");
    write("environment/Dockerfile", image);
    write(
        "environment/api/Dockerfile",
        &format!("{image}RUN printf '%s\\n' {} > /srv/keyhash.py\n", shell_words(KEYHASH)),
    );
    write(
        "environment/docker-compose.yaml",
        "services:\n  main:\n    depends_on:\n      api: {condition: service_healthy}\n  api:\n    build: ./api\n    command: [python3, /srv/keyhash.py]\n    environment:\n      KEY: ${TOOL_KEY}\n    healthcheck:\n      test: [CMD-SHELL, \"python3 -c 'import urllib.request; urllib.request.urlopen(\\\"http://127.0.0.1:8080/\\\")'\"]\n      interval: 1s\n      retries: 30\n",
    );
    write("solution/solve.sh", "#!/bin/bash\ntrue\n");
    write(
        "tests/test.sh",
        &format!(
            "#!/bin/bash\nmkdir -p /logs/verifier\ngot=$(python3 -c \"import urllib.request; print(urllib.request.urlopen('http://api:8080/', timeout=10).read().decode().strip())\")\necho \"the server says $got\"\n[ \"$got\" = {digest} ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
        ),
    );
    let body = format!(
        "benchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: oracle\nenvironment:\n  kind: docker\n  base_image: {}\nroles:\n  tools:\n    secrets:\n      TOOL_KEY: prod/tool-key\n",
        d.parent().unwrap().display(),
        crate::environments::BASE
    );
    let v = harbor_on_the_fleet(&mut aws, &reg, "tool-key", &body);
    assert_eq!(v["summary"]["passed"].as_u64(), Some(1), "the sidecar had the key: {v}");
    // The environment's task definition names the secret by its ARN, and holds no part of it.
    let clients = AwsClients::connect(&AwsSettings::emulator(&aws.endpoint)).await;
    let all = clients.ecs.list_task_definitions().send().await.unwrap();
    let mut named = 0;
    for arn in all.task_definition_arns().iter().filter(|a| a.contains("-env-")) {
        let td = clients.ecs.describe_task_definition().task_definition(arn).send().await.unwrap();
        let td = td.task_definition().unwrap();
        assert!(!format!("{td:?}").contains(&KEY[3..]), "the key is in a task definition: {td:?}");
        for c in td.container_definitions() {
            for s in c.secrets() {
                assert_eq!(s.name(), "KEY", "{c:?}");
                assert!(s.value_from().contains(":secret:prod/tool-key"), "by its ARN: {s:?}");
                named += 1;
            }
        }
    }
    assert!(named >= 1, "no sidecar took the secret from its task definition");
    // Nothing of the run's holds the key: the agent's container never had it.
    let run = v["run_id"].as_str().unwrap();
    let (shown, _) = aws.json(&["show", run, "tool-key", "--json", "--backend", "aws"]);
    assert!(!shown.to_string().contains(&KEY[3..]), "{shown}");
}

/// A Harbor task whose tests call a judge, on the fleet: its tests reach the run's `roles.judge`
/// through the worker's gateway from the environment's own task, the key fetched from Secrets
/// Manager by the worker and never in the task; the judge's calls are the `judge` role's, and
/// the verdicts are the local backend's.
#[tokio::test(flavor = "multi_thread")]
async fn a_harbor_tasks_judge_is_reached_through_the_gateway_on_the_fleet_as_locally() {
    crate::environments::docker_ready();
    const KEY: &str = "sk-ant-FLEETJUDGE0123456789";
    let reg = registry();
    let mut aws = Aws::new(&[("prod/judge-key", KEY)], true).await;
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    let root = aws.ws.path().join("tasks");
    let toml = "[verifier.env]\nANTHROPIC_API_KEY = \"${ANTHROPIC_API_KEY}\"\nMODEL_NAME = \"mock-judge\"\n";
    for (name, poem) in [("poem-good", "a GOOD ANSWER of a poem"), ("poem-bad", "a dull poem")] {
        crate::harbor_tasks::task(
            &root,
            name,
            toml,
            "",
            &format!("echo '{poem}' > /app/poem.txt"),
            crate::roles::JUDGED_TEST,
        );
    }
    let body = format!(
        "benchmark:\n  kind: harbor\n  path: {}\nagent:\n  kind: oracle\nenvironment:\n  kind: docker\n  base_image: {}\nroles:\n  judge:\n    model: anthropic:mock-judge\n    base_url: {}\n    secrets: {{ANTHROPIC_API_KEY: prod/judge-key}}\n    price: {{input_per_mtok: 1000, output_per_mtok: 2000}}\n",
        root.display(),
        crate::environments::BASE,
        mock.base_url()
    );
    let v = harbor_on_the_fleet(&mut aws, &reg, "judged", &body);
    assert_eq!(v["summary"]["passed"].as_u64(), Some(1), "the judge passed the good poem alone: {v}");
    assert_eq!(v["summary"]["roles"]["judge"]["calls"].as_u64(), Some(2), "{v}");
    let got = mock.received();
    assert!(
        got.len() == 2 && got.iter().all(|c| c.credential.as_deref() == Some(KEY) && c.body["model"] == "mock-judge"),
        "the worker's gateway called the judge with the run's key: {got:?}"
    );
    let run = v["run_id"].as_str().unwrap();
    for (id, passed) in [("poem-good", true), ("poem-bad", false)] {
        let (shown, _) = aws.json(&["show", run, id, "--json", "--backend", "aws"]);
        assert_eq!(shown["result"]["passed"], passed, "{shown}");
        assert_eq!(shown["result"]["roles"]["judge"]["calls"], 1, "{shown}");
        assert!(!shown.to_string().contains(&KEY[7..]), "{shown}");
    }
}

/// Runs the Harbor tasks a config `body` names on the fleet, their images built and pushed to
/// `reg` first: the submit's answer, which must be a complete run.
fn harbor_on_the_fleet(aws: &mut Aws, reg: &Registry, name: &str, body: &str) -> serde_json::Value {
    let repo = format!("127.0.0.1:{}/agenteval-envs", reg.port);
    let cfg = aws.config(name, body, &aws.endpoint.clone());
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(&format!("  image_repository: {repo}\n"));
    std::fs::write(&cfg, yaml).unwrap();
    let cfg = cfg.to_str().unwrap();
    let (built, code) = aws.json(&["images", "build", "--json", "--config", cfg, "--push", &repo]);
    assert_eq!(code, 0, "{built}");
    aws.fargate(0);
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg]);
    assert_eq!((v["status"].as_str(), code), (Some("complete"), 0), "{v}");
    v
}

/// A small HTTP server that answers the SHA-256 of its `KEY` variable.
const KEYHASH: &str = "import hashlib, http.server, os\nkey = hashlib.sha256(os.environ.get('KEY', '').encode()).hexdigest().encode()\nclass H(http.server.BaseHTTPRequestHandler):\n    def do_GET(self):\n        self.send_response(200); self.end_headers(); self.wfile.write(key)\n    def log_message(self, *a): pass\nhttp.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()";

/// Each line of `text` as one single-quoted shell word, for `printf '%s\n' …` in a Dockerfile.
fn shell_words(text: &str) -> String {
    text.lines().map(|l| format!("'{}'", l.replace('\'', "'\\''"))).collect::<Vec<_>>().join(" ")
}

/// Real-shaped Harbor tasks on the fleet as locally: an image whose ENTRYPOINT starts a service
/// and hands over, a no-network task on `localhost`, a sidecar declared with `expose` reached by
/// its name, a named volume a sidecar writes and the task's container reads only, three steps, a
/// task Harbor would skip. The oracle passes every one on both backends under Harbor's rules and
/// agenteval's strict ones (the agent's leftovers killed, the image's services kept), and `nop`
/// none.
#[tokio::test(flavor = "multi_thread")]
async fn real_shaped_tasks_with_sidecars_and_volumes_get_the_same_verdicts_on_the_fleet() {
    crate::environments::docker_ready();
    let reg = registry();
    let mut aws = Aws::new(&[], true).await;
    let tasks = aws.ws.path().join("tasks");
    crate::harbor_tasks::tasks(&tasks, false);
    for (agent, grading) in [("oracle", "harbor"), ("oracle", "strict"), ("nop", "harbor")] {
        let (on_local, on_fleet) = on_both_backends(&mut aws, &reg, &tasks, agent, grading).await;
        assert_eq!(on_local.len(), 6, "{on_local:?}");
        let passed = on_local.values().filter(|v| v.starts_with("true")).count();
        assert_eq!(passed, if agent == "oracle" { 6 } else { 0 }, "{agent}: {on_local:?}");
        assert_eq!(on_fleet, on_local, "{agent}, {grading}: the same verdict for every task on both backends");
    }
}

/// Issue 59 on the fleet: the workers of an AWS run (each an ECS task with its own gateway)
/// book their calls in one DynamoDB item per limit, so together they keep a provider's rate
/// limit: twelve tasks on four workers, each making three calls back to back, against a mock
/// that allows 120 requests a minute, and the provider never answers 429. (Three calls a task,
/// so that the calls must wait their turn however slowly a busy machine starts the workers.)
#[tokio::test(flavor = "multi_thread")]
async fn fleet_workers_share_one_rate_limit_through_dynamodb() {
    // Secrets live as long as the emulator: a name of this test's own.
    let mut aws = Aws::new(&[("prod/rate-openai", "sk-aws-RATE-0d3a9")], true).await;
    aws.fargate(0);
    let mock = agenteval_testkit::llm_mock::MockLlm::start_limited(Duration::ZERO, 120);
    let program = aws.ws.write("agent.py", crate::gateway::AGENT);
    let lines: String = (0..12).map(|i| format!("{{\"id\": \"c{i:02}\", \"input\": \"chat3\"}}\n")).collect();
    aws.ws.write("cases.jsonl", &lines);
    let body = format!(
        "benchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: command\n  command: [python3, {}]\n  upstream:\n    openai:\n      base_url: {}\n      secrets: {{OPENAI_API_KEY: prod/rate-openai}}\n    rate_limits: [{{requests_per_minute: 120}}]\n    prices:\n      mock-model: {{input_per_mtok: 1, output_per_mtok: 1}}\n",
        program.display(),
        mock.base_url()
    );
    let cfg = aws.config("rate-aws", &body, &aws.endpoint.clone());
    let yaml = std::fs::read_to_string(&cfg).unwrap().replacen("  tasks_per_job: 2\n", "  tasks_per_job: 3\n", 1);
    std::fs::write(&cfg, yaml).unwrap();
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!((code, v["summary"]["passed"].as_u64()), (0, Some(12)), "{v}");
    let statuses: Vec<u16> = mock.received().iter().map(|c| c.status).collect();
    assert_eq!(statuses.len(), 36, "three calls a task, none refused: {statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert!(v["summary"]["provider_wait_seconds"].as_f64().unwrap() > 1.0, "the calls waited their turn: {v}");
}

/// Issue 59: on the fleet, Bedrock is reached with the worker's task role, no key: the `llm`
/// agent's calls reach Bedrock's stand-in signed with the credentials the fleet gives its tasks,
/// and no secret is fetched for them.
#[tokio::test(flavor = "multi_thread")]
async fn fleet_workers_reach_bedrock_with_their_task_role() {
    use agenteval_testkit::llm_mock::bedrock::BEDROCK_REGION;
    const ID: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let mock = agenteval_testkit::llm_mock::MockLlm::start(Duration::ZERO);
    aws.ws.write(
        "cases.jsonl",
        "{\"id\": \"a\", \"input\": \"hello\"}\n{\"id\": \"b\", \"input\": \"USE_TOOL please\"}\n",
    );
    let body = format!(
        "benchmark: {{kind: jsonl, cases: cases.jsonl}}\nagent:\n  kind: llm\n  model: anthropic:claude-sonnet-4-5\n  tools: [python]\n  bedrock:\n    region: {BEDROCK_REGION}\n    endpoint_url: http://{}\n    models: {{claude-sonnet-4-5: \"{ID}\"}}\n",
        mock.addr
    );
    let cfg = aws.config("bedrock-aws", &body, &aws.endpoint.clone());
    let (v, code) = aws.json(&["submit", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!((code, v["summary"]["passed"].as_u64()), (0, Some(2)), "{v}");
    let got = mock.received();
    assert_eq!(got.len(), 3, "{got:?}");
    for call in &got {
        assert_eq!(call.path, format!("bedrock:invoke:{ID}"));
        let credential = call.credential.as_deref().unwrap_or_default();
        assert!(credential.starts_with("AWS4-HMAC-SHA256 Credential=test/"), "the task role signs: {credential}");
    }
    assert_eq!(v["summary"]["total_tokens"].as_u64(), Some(45), "{v}");
}

/// Adaptive repetitions on the fleet: the further attempts join the run's table in S3 and its
/// tasks in DynamoDB between rounds, and the night is decided with fewer attempts than the fixed
/// design's.
#[tokio::test(flavor = "multi_thread")]
async fn adaptive_repetitions_decide_on_the_fleet_with_tasks_added_to_s3_and_dynamodb() {
    let mut aws = Aws::new(&[], true).await;
    aws.fargate(0);
    let dir = aws.ws.path().join("coin-agent");
    std::fs::create_dir_all(&dir).unwrap();
    // Answers right with the probability world.json gives the task, a seeded coin per attempt.
    let agent = "import hashlib, json, os, sys\nreq = json.loads(sys.stdin.readline())\nhere = os.path.dirname(os.path.abspath(__file__))\nworld = json.load(open(os.path.join(here, 'world.json')))\ntid = req['task_id']\np = world['p'][int(tid.partition('@r')[0][1:])]\ndraw = int(hashlib.sha256(f\"{world['seed']}:{tid}\".encode()).hexdigest()[:8], 16) / 2**32\nanswer = 'yes' if draw < p else 'no'\nprint(json.dumps({'kind': 'agent.final_answer', 'payload': {'answer': answer}}), flush=True)\nprint(json.dumps({'kind': 'agent.terminal', 'payload': {'final_answer': answer}}), flush=True)\n";
    std::fs::write(dir.join("agent.py"), agent).unwrap();
    let p: Vec<f64> = (0..16)
        .map(|i| {
            if i < 8 {
                1.0
            } else if i < 12 {
                0.0
            } else {
                0.5
            }
        })
        .collect();
    let nonce = emulator::unique("n");
    let world = |seed: u32, p: &[f64]| serde_json::json!({"seed": seed, "p": p, "nonce": nonce}).to_string();
    std::fs::write(dir.join("world.json"), world(1, &p)).unwrap();
    let cases: String =
        (0..16).map(|i| format!("{{\"id\": \"t{i:02}\", \"input\": \"q\", \"expected\": \"yes\"}}\n")).collect();
    aws.ws.write("cases.jsonl", &cases);
    let agent_cfg = "agent:\n  kind: command\n  command: [python3, agent.py]\n  workdir: coin-agent\n  pack: true\nevaluators:\n  - kind: exact_match\n";
    let fixed = aws.config(
        "coins-aws",
        &format!("repetitions: 4\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\n{agent_cfg}"),
        &aws.endpoint.clone(),
    );
    let jobs = ["--set", "backend.tasks_per_job=10"];
    let (v, code) = aws.json(&["submit", "--json", "--config", fixed.to_str().unwrap(), jobs[0], jobs[1]]);
    assert_eq!(code, 0, "{v}");
    let base = v["run_id"].as_str().unwrap().to_string();
    // The candidate breaks ten of the twenty tasks that always passed: 25 points worse.
    let worse: Vec<f64> = p.iter().enumerate().map(|(i, &p)| if i < 10 { 0.0 } else { p }).collect();
    std::fs::write(dir.join("world.json"), world(2, &worse)).unwrap();
    let gates = aws.ws.write("gates.yaml", "metrics:\n  pass_rate: {max_drop: 0.05}\n");
    let adaptive = aws.config(
        "coins-aws",
        &format!("repetitions: {{min: 1, max: 4, until: decided}}\nbenchmark: {{kind: jsonl, cases: cases.jsonl}}\n{agent_cfg}"),
        &aws.endpoint.clone(),
    );
    let (v, code) = aws.json(&[
        "submit",
        "--json",
        "--config",
        adaptive.to_str().unwrap(),
        "--baseline",
        &base,
        "--gates",
        gates.to_str().unwrap(),
        jobs[0],
        jobs[1],
    ]);
    assert_eq!(code, 1, "NO-GO: {v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    let (shown, _) = aws.json(&["runs", "show", &run, "--tasks", "--json", "--backend", "aws"]);
    let tasks = shown["tasks"].as_array().unwrap();
    assert!(tasks.iter().any(|t| t["task_id"].as_str().unwrap().contains("@r1")), "{shown}");
    assert!(tasks.len() <= 80, "at most half the fixed design's 160 attempts: {}", tasks.len());
    // DynamoDB holds every attempt the bundle's summary counts, each completed.
    let (summary, _) = aws.json(&["report", &run, "--json", "--backend", "aws"]);
    assert_eq!(tasks.len() as u64, summary["tasks_total"].as_u64().unwrap(), "{summary}");
    assert!(tasks.iter().all(|t| t["state"] == "completed"), "{shown}");
    let (c, code) =
        aws.json(&["compare", &base, &run, "--format", "json", "--backend", "aws", "--gates", gates.to_str().unwrap()]);
    assert_eq!(code, 1, "{c}");
    assert_eq!(c["comparison"]["cand"]["adaptive"]["ended"], "decided NO-GO", "{c}");
    assert_eq!(c["comparison"]["cand"]["adaptive"]["attempts"].as_u64(), Some(tasks.len() as u64), "{c}");
}
