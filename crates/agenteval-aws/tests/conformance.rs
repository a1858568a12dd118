//! The shared `BundleStore`, `RunIndex` and `SecretStore` conformance suites against S3,
//! DynamoDB and Secrets Manager on the AWS emulator (the same suites run against the
//! filesystem, SQLite and local secrets in agenteval-local).

use std::sync::Arc;

use agenteval_aws::{AwsClients, AwsSettings, DynamoDbRunIndex, S3BundleStore};
use agenteval_testkit::emulator;

async fn clients() -> Arc<AwsClients> {
    AwsClients::connect(&AwsSettings::emulator(emulator::endpoint())).await
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_bundle_store_conformance() {
    let c = clients().await;
    let bucket = emulator::unique("bundles");
    c.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    agenteval_testkit::conformance::bundle_store_suite(Arc::new(S3BundleStore::new(c.clone(), &bucket, "team/runs")))
        .await;
    // The same store at the bucket root.
    agenteval_testkit::conformance::bundle_store_suite(Arc::new(S3BundleStore::new(c, &bucket, ""))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_manager_conformance() {
    let c = clients().await;
    let name = emulator::unique("agent-key");
    let value = "sk-in-secrets-manager-0123456789";
    c.secrets.create_secret().name(&name).secret_string(value).send().await.unwrap();
    let store = Arc::new(agenteval_aws::SecretsManager::new(c));
    agenteval_testkit::conformance::secret_store_suite(store, &[(&name, value)], &emulator::unique("absent")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_multipart_uploads_round_trip() {
    let c = clients().await;
    let bucket = emulator::unique("big");
    c.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let store = S3BundleStore::new(c, &bucket, "p");
    let run = agenteval_core::RunId::new();
    use agenteval_core::traits::BundleStore;
    let big: Vec<u8> = (0..20 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    store.put(&run, "artifacts/huge.bin", &big).await.unwrap();
    assert_eq!(store.get(&run, "artifacts/huge.bin").await.unwrap(), big);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_file_written_in_pieces_goes_up_part_by_part_and_appears_whole_at_its_end() {
    use agenteval_core::traits::BundleStore;
    let c = clients().await;
    let bucket = emulator::unique("pieces");
    c.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let store = S3BundleStore::new(c.clone(), &bucket, "p");
    let run = agenteval_core::RunId::new();
    let line: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).chain([b'\n']).collect();
    let uploads = || async {
        c.s3.list_multipart_uploads().bucket(&bucket).send().await.unwrap().uploads.unwrap_or_default().len()
    };
    store.put(&run, "results.jsonl", b"old\n").await.unwrap();
    let mut w = store.open_writer(&run, "results.jsonl").await.unwrap().expect("S3 writes in pieces");
    for _ in 0..20_000 {
        w.append(&line).await.unwrap();
    }
    // ~20 MB in: two parts are up, the rest held, and readers still see the old file.
    assert_eq!(uploads().await, 1, "one multipart upload under way");
    assert_eq!(store.get(&run, "results.jsonl").await.unwrap(), b"old\n");
    w.finish().await.unwrap();
    let got = store.get(&run, "results.jsonl").await.unwrap();
    assert_eq!(got.len(), 20_000 * line.len());
    assert!(got.chunks(line.len()).all(|l| l == line), "every piece in order");
    assert_eq!(uploads().await, 0, "the upload completed");
    // Dropped unfinished past a part: the upload is aborted and the file is as it was.
    let mut w = store.open_writer(&run, "results.jsonl").await.unwrap().unwrap();
    for _ in 0..10_000 {
        w.append(&line).await.unwrap();
    }
    assert_eq!(uploads().await, 1);
    drop(w);
    for _ in 0..100 {
        if uploads().await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(uploads().await, 0, "no parts left behind");
    assert_eq!(store.get(&run, "results.jsonl").await.unwrap().len(), 20_000 * line.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn dynamodb_run_index_conformance() {
    // The suite races two conditional updates of one item; DynamoDB applies them in turn, the
    // threaded emulator may apply both (docs/aws.md), the serialized one applies them in turn.
    let c = AwsClients::connect(&AwsSettings::emulator(emulator::serialized_endpoint())).await;
    let index = DynamoDbRunIndex::new(c, emulator::unique("runs"));
    index.create_table().await.unwrap();
    agenteval_testkit::conformance::run_index_suite(Arc::new(index)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dynamodb_clients_racing_complete_each_task_once() {
    let table = emulator::unique("race");
    let settings = AwsSettings::emulator(emulator::serialized_endpoint());
    let a = DynamoDbRunIndex::new(AwsClients::connect(&settings).await, &table);
    a.create_table().await.unwrap();
    let b = DynamoDbRunIndex::new(AwsClients::connect(&settings).await, &table);
    agenteval_testkit::conformance::run_index_race_suite(Arc::new(a), Arc::new(b)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_resources_are_not_found_errors() {
    use agenteval_core::traits::{BundleStore, RunIndex};
    let c = clients().await;
    let store = S3BundleStore::new(c.clone(), emulator::unique("nobucket"), "");
    let err = store.put(&agenteval_core::RunId::new(), "a.json", b"x").await.unwrap_err();
    assert_eq!(err.kind(), agenteval_core::ErrorKind::NotFound, "{err}");
    let index = DynamoDbRunIndex::new(c, emulator::unique("notable"));
    let err = index.list_runs(5).await.unwrap_err();
    assert_eq!(err.kind(), agenteval_core::ErrorKind::NotFound, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_runs_span_file_goes_up_in_parts_and_is_joined_once() {
    use agenteval_core::traits::BundleStore as _;
    let c = clients().await;
    let bucket = emulator::unique("parts");
    c.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let store = S3BundleStore::new(c, &bucket, "runs");
    let run = agenteval_core::RunId::new();
    let mut a = store.open_appender(&run, "spans.jsonl").await.unwrap();
    a.append(b"a\n").await.unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    a.append(b"b\n").await.unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    a.append(b"c\n").await.unwrap();
    // A controller that dies here leaves parts, which read as the file.
    let listed = store.list(&run, "").await.unwrap();
    assert_eq!(listed, vec!["spans.jsonl.parts/000001", "spans.jsonl.parts/000002"], "only what is new each time");
    assert_eq!(store.get(&run, "spans.jsonl").await.unwrap(), b"a\nb\nc\n");
    a.append(b"d\n").await.unwrap();
    a.finish().await.unwrap();
    assert_eq!(store.list(&run, "").await.unwrap(), vec!["spans.jsonl"], "joined once, parts gone");
    assert_eq!(store.get(&run, "spans.jsonl").await.unwrap(), b"a\nb\nc\nd\n");
    // A resumed controller starts from the joined file and its own parts.
    let mut again = store.open_appender(&run, "spans.jsonl").await.unwrap();
    again.append(b"a\nb\nc\nd\ne\n").await.unwrap();
    again.finish().await.unwrap();
    assert_eq!(store.get(&run, "spans.jsonl").await.unwrap(), b"a\nb\nc\nd\ne\n");

    // The fleet's telemetry file goes up the same way; parts a dead controller left are made
    // whole by the seal (`join_parts`), so the manifest lists the file, not its parts.
    let mut t = store.open_appender(&run, "telemetry.jsonl").await.unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    t.append(b"{\"n\":1}\n").await.unwrap();
    drop(t);
    assert_eq!(store.list(&run, "telemetry").await.unwrap(), vec!["telemetry.jsonl.parts/000001"]);
    store.join_parts(&run).await.unwrap();
    assert_eq!(store.list(&run, "telemetry").await.unwrap(), vec!["telemetry.jsonl"]);
    assert_eq!(store.get(&run, "telemetry.jsonl").await.unwrap(), b"{\"n\":1}\n");
}

/// With a retention, every item of a run (the run, its tasks, its jobs) carries `expires_at`,
/// the retention after its creation, for the table's TTL (which `create_table` turns on).
#[tokio::test(flavor = "multi_thread")]
async fn a_retention_gives_every_item_of_a_run_its_expiry() {
    use agenteval_core::traits::RunIndex as _;
    let c = clients().await;
    let table = emulator::unique("ttl");
    let index = DynamoDbRunIndex::new(c.clone(), &table).with_retention_days(Some(30));
    index.create_table().await.unwrap();
    let ttl = c.dynamodb.describe_time_to_live().table_name(&table).send().await.unwrap();
    let d = ttl.time_to_live_description().unwrap();
    assert_eq!(d.attribute_name(), Some(agenteval_aws::dynamo_index::TTL_ATTRIBUTE));
    let run = agenteval_testkit::conformance::run_record(agenteval_core::RunId::new(), "ttl");
    let tasks: Vec<agenteval_core::TaskId> = ["a", "b"].iter().map(|t| t.parse().unwrap()).collect();
    index.create_run(&run, &tasks).await.unwrap();
    let items = c
        .dynamodb
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", aws_sdk_dynamodb::types::AttributeValue::S(format!("RUN#{}", run.run_id)))
        .send()
        .await
        .unwrap();
    let want = (run.created_at + chrono::Duration::days(30)).timestamp().to_string();
    assert_eq!(items.items().len(), 3, "the run and its two tasks");
    for item in items.items() {
        let at = item.get("expires_at").and_then(|v| v.as_n().ok()).map(String::as_str);
        assert_eq!(at, Some(want.as_str()), "{item:?}");
    }
}

/// The Fargate stand-in (`tests/aws/fake_fargate.py`), stopped when dropped.
struct StandIn(std::process::Child);

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn harness(script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("python3");
    c.arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/aws").join(script));
    c
}

/// The job-backend suite against ECS on the emulator, with the Fargate stand-in running each
/// ECS task's command as a process of the suite's stand-in worker (the same suite runs against
/// local processes in agenteval-local).
#[tokio::test(flavor = "multi_thread")]
async fn ecs_job_backend_conformance() {
    use agenteval_aws::{EcsBackend, EcsSettings};
    let endpoint = emulator::endpoint();
    let cluster = emulator::unique("conformance");
    let out = harness("setup_emulator.py").args(["--endpoint", endpoint, "--cluster", &cluster]).output().unwrap();
    assert!(out.status.success(), "setup failed: {}", String::from_utf8_lossy(&out.stderr));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let worker = agenteval_testkit::conformance::stand_in_worker(dir.path());
    let stats = dir.path().join("fargate.json");
    let _fargate = StandIn(
        harness("fake_fargate.py")
            .args(["--endpoint", endpoint, "--cluster", &cluster, "--agenteval", worker.to_str().unwrap()])
            .args(["--stats", stats.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Tasks launched before the stand-in holds them RUNNING would run through their states on
    // their own: it is ready once it has written its first counts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !stats.exists() {
        assert!(std::time::Instant::now() < deadline, "the Fargate stand-in did not start");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let c = clients().await;
    let settings = EcsSettings {
        cluster: cluster.clone(),
        task_definition: made["task_definition"].as_str().unwrap().into(),
        container_name: "agenteval".into(),
        subnets: vec![made["subnet"].as_str().unwrap().into()],
        security_groups: vec![made["security_group"].as_str().unwrap().into()],
        assign_public_ip: false,
        spot: false,
        spot_fallback: true,
        launch_burst: 10,
        launch_per_second: 10.0,
        poll: std::time::Duration::from_millis(200),
        worker_env: Default::default(),
        image_repository: None,
    };
    let store = S3BundleStore::new(c.clone(), emulator::unique("bundles"), "runs");
    let run = agenteval_core::RunId::new();
    let uri = agenteval_core::traits::BundleStore::bundle_uri(&store, &run);
    let backend = Arc::new(EcsBackend::new(c, settings, store));
    let platform = agenteval_testkit::conformance::Platform { reports_exit_codes: false };
    agenteval_testkit::conformance::job_backend_suite(backend, run, &uri, std::time::Duration::from_secs(60), platform)
        .await;
}
