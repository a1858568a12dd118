//! `agenteval doctor` on the `aws` backend: checks every AWS resource a run needs before anything is
//! launched, and names each one that is missing.

use std::sync::Arc;

use agenteval_core::ErrorKind;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::sdk::{AwsClients, kind_and_detail};

/// A failed call, said once (the check's name already names the resource): "missing" only when
/// the API answered that it does not exist.
fn failure<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    e: SdkError<E, HttpResponse>,
) -> String {
    match kind_and_detail(&e) {
        (ErrorKind::NotFound, detail) => format!("missing ({detail})"),
        (ErrorKind::Unauthorized, detail) => format!("not accessible: {detail}"),
        (_, detail) => detail,
    }
}

/// What the checks look at.
#[derive(Debug, Clone, Default)]
pub struct DoctorInput {
    pub bucket: Option<String>,
    pub table: Option<String>,
    pub cluster: Option<String>,
    pub task_definition: Option<String>,
    pub container_name: String,
    pub subnets: Vec<String>,
    pub security_groups: Vec<String>,
    pub secrets: Vec<String>,
    /// `aws.image_repository`, when the run's tasks have images.
    pub image_repository: Option<String>,
    /// `aws.environment_security_groups`, when the run's tasks have environments (checked then).
    pub environment_groups: Option<agenteval_core::config::EnvironmentGroups>,
}

pub use agenteval_core::traits::Check;

fn check(name: impl Into<String>, r: std::result::Result<String, String>) -> Check {
    Check::new(name, r)
}

/// Runs every check; never stops at the first failure.
// Long: a list of independent checks, one block per resource, in the order doctor prints them.
pub async fn run_checks(clients: Arc<AwsClients>, input: &DoctorInput) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(check(
        "region",
        clients
            .region
            .clone()
            .map(|r| format!("{r}{}", clients.endpoint_url.as_ref().map(|e| format!(" via {e}")).unwrap_or_default()))
            .ok_or_else(|| "no region: set AWS_REGION or aws.region".to_string()),
    ));
    match &input.bucket {
        Some(b) => {
            let r = clients.s3.head_bucket().bucket(b).send().await;
            out.push(check(format!("bucket {b}"), r.map(|_| "reachable".into()).map_err(failure)));
        }
        None => out.push(check("bucket", Err("no s3:// bundle root configured".into()))),
    }
    match &input.table {
        Some(t) => {
            let r = clients.dynamodb.describe_table().table_name(t).send().await;
            out.push(check(
                format!("table {t}"),
                match r {
                    Ok(d) => {
                        let gsis: Vec<String> = d
                            .table()
                            .map(|t| {
                                t.global_secondary_indexes()
                                    .iter()
                                    .filter_map(|g| g.index_name().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default();
                        if gsis.iter().any(|g| g == crate::dynamo_index::GSI_CREATED) {
                            Ok(format!("exists with indexes {}", gsis.join(", ")))
                        } else {
                            Err(format!("exists but lacks the `{}` index", crate::dynamo_index::GSI_CREATED))
                        }
                    }
                    Err(e) => Err(failure(e)),
                },
            ));
        }
        None => out.push(check("table", Err("no dynamodb:// index configured".into()))),
    }
    match &input.cluster {
        Some(c) => {
            let r = clients.ecs.describe_clusters().clusters(c).send().await;
            out.push(check(
                format!("cluster {c}"),
                match r {
                    Ok(d) => match d.clusters().first() {
                        Some(cl) if cl.status() == Some("ACTIVE") => Ok("active".into()),
                        Some(cl) => Err(format!("status {}", cl.status().unwrap_or("unknown"))),
                        None => Err("not found".into()),
                    },
                    Err(e) => Err(failure(e)),
                },
            ));
        }
        None => out.push(check("cluster", Err("aws.cluster is not set".into()))),
    }
    match &input.task_definition {
        Some(td) => {
            let r = clients.ecs.describe_task_definition().task_definition(td).send().await;
            out.push(check(
                format!("task definition {td}"),
                match r {
                    Ok(d) => {
                        let def = d.task_definition();
                        let container = def.and_then(|t| {
                            t.container_definitions().iter().find(|c| c.name() == Some(input.container_name.as_str()))
                        });
                        match container {
                            None => Err(format!("has no container named `{}`", input.container_name)),
                            Some(c)
                                if c.memory().is_none()
                                    && c.memory_reservation().is_none()
                                    && def.and_then(|t| t.memory()).is_none() =>
                            {
                                Err(format!("container `{}` sets no memory", input.container_name))
                            }
                            Some(_) => Ok(format!("container `{}` found", input.container_name)),
                        }
                    }
                    // ECS answers a family it does not have with a ClientException, not a
                    // not-found code: that answer, and only it, means missing.
                    Err(e) => Err(match kind_and_detail(&e) {
                        (_, detail) if detail.starts_with("ClientException") => format!("missing ({detail})"),
                        _ => failure(e),
                    }),
                },
            ));
        }
        None => out.push(check("task definition", Err("aws.task_definition is not set".into()))),
    }
    out.push(check(
        "network",
        if input.subnets.is_empty() || input.security_groups.is_empty() {
            Err("aws.subnets and aws.security_groups must both be set (awsvpc networking)".into())
        } else if input.subnets.iter().all(|s| s.starts_with("subnet-"))
            && input.security_groups.iter().all(|s| s.starts_with("sg-"))
        {
            Ok(format!("{} subnet(s), {} security group(s)", input.subnets.len(), input.security_groups.len()))
        } else {
            Err("subnets look like `subnet-…` and security groups like `sg-…`".into())
        },
    ));
    if let Some(repo) = &input.image_repository {
        let r = match crate::registry::ImageRepository::parse(repo) {
            Ok(r) => r.check(&clients).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        out.push(check(format!("image repository {repo}"), r));
    }
    if let Some(groups) = &input.environment_groups {
        out.extend(environment_groups(&clients, groups, &input.security_groups).await);
    }
    for name in &input.secrets {
        let r = clients.secrets.describe_secret().secret_id(name).send().await;
        out.push(check(format!("secret {name}"), r.map(|_| "exists".into()).map_err(failure)));
    }
    out
}

/// The workers' ports, where environments reach their worker (the gateway and the link).
const WORKER_PORTS: (i32, i32) = (47600, 47699);

/// One check per network mode's groups: each exists, a `no_network` one reaches no address
/// beyond the workers' ports, and each reaches the workers' ports, which the workers' groups
/// accept from it. A mode left unset is `no_network`'s failure (every task without a network
/// needs it) and only said for the others.
async fn environment_groups(
    clients: &AwsClients,
    groups: &agenteval_core::config::EnvironmentGroups,
    workers: &[String],
) -> Vec<Check> {
    use agenteval_core::config::Reach;
    // Every group in one call; only when one is missing (the call names none apart) is each
    // mode's looked up alone, to say which. An unreachable EC2 is one cause, said per mode.
    let modes = [Reach::NoNetwork, Reach::Allowlist, Reach::Public];
    let mut every: Vec<String> = workers.to_vec();
    every.extend(modes.iter().flat_map(|m| groups.of(*m).0.iter().cloned()));
    every.sort();
    every.dedup();
    let all = clients.ec2.describe_security_groups().set_group_ids(Some(every)).send().await;
    let (known, unreachable) = match all {
        Ok(o) => (Some(o.security_groups().to_vec()), None),
        // EC2's own answer (a group it does not have): looked up mode by mode below.
        Err(aws_sdk_ec2::error::SdkError::ServiceError(_)) => (None, None),
        // No answer at all (unreachable, no credentials): the same for every mode.
        Err(e) => (None, Some(failure(e))),
    };
    let worker_groups = match &known {
        Some(all) => all.clone(),
        None => match clients.ec2.describe_security_groups().set_group_ids(Some(workers.to_vec())).send().await {
            Ok(o) => o.security_groups().to_vec(),
            Err(_) => Vec::new(),
        },
    };
    let mut out = Vec::new();
    for reach in modes {
        let (ids, field) = groups.of(reach);
        let name = format!("environment groups {field}");
        if ids.is_empty() {
            out.push(if reach == Reach::NoNetwork {
                check(
                    name,
                    Err("not set: tasks without a network have no groups to run on (the stack's outputs name them)"
                        .into()),
                )
            } else {
                check(name, Ok("not set: tasks of this network mode fail with the reason".into()))
            });
            continue;
        }
        if let Some(cause) = &unreachable {
            out.push(check(name, Err(format!("{}: {cause}", ids.join(", ")))));
            continue;
        }
        let found = match &known {
            Some(all) => {
                all.iter().filter(|g| g.group_id().is_some_and(|id| ids.contains(&id.to_string()))).cloned().collect()
            }
            None => match clients.ec2.describe_security_groups().set_group_ids(Some(ids.to_vec())).send().await {
                Ok(o) => o.security_groups().to_vec(),
                Err(e) => {
                    out.push(check(name, Err(format!("{}: {}", ids.join(", "), failure(e)))));
                    continue;
                }
            },
        };
        let r = judge_groups(&found, &worker_groups, ids, reach != Reach::Public, field);
        out.push(check(name, r));
    }
    out
}

/// Whether a rule covers the workers' ports.
fn covers(p: &aws_sdk_ec2::types::IpPermission) -> bool {
    p.ip_protocol() == Some("-1")
        || (p.ip_protocol() == Some("tcp")
            && p.from_port().is_some_and(|f| f <= WORKER_PORTS.0)
            && p.to_port().is_some_and(|t| t >= WORKER_PORTS.1))
}

/// One mode's groups (`found`, the ids `ids`) judged: no egress to the internet where it must
/// have none (`closed`), egress to the workers' ports, and the workers' groups accepting it there.
fn judge_groups(
    found: &[aws_sdk_ec2::types::SecurityGroup],
    workers: &[aws_sdk_ec2::types::SecurityGroup],
    ids: &[String],
    closed: bool,
    field: &str,
) -> std::result::Result<String, String> {
    let open = found.iter().flat_map(|g| g.ip_permissions_egress()).any(|p| {
        p.ip_ranges().iter().any(|r| r.cidr_ip() == Some("0.0.0.0/0"))
            || p.ipv6_ranges().iter().any(|r| r.cidr_ipv6() == Some("::/0"))
    });
    let to_workers = found.iter().flat_map(|g| g.ip_permissions_egress()).any(covers);
    let accepted = ids.iter().all(|id| {
        workers
            .iter()
            .flat_map(|g| g.ip_permissions())
            .any(|p| covers(p) && p.user_id_group_pairs().iter().any(|pair| pair.group_id() == Some(id.as_str())))
    });
    let (list, (from, to)) = (ids.join(", "), WORKER_PORTS);
    if closed && open {
        Err(format!("{list}: allows egress to the internet, which a {field} task must not reach"))
    } else if !to_workers {
        Err(format!("{list}: no egress to the workers' ports {from}-{to}: its tasks could not reach their worker"))
    } else if !accepted {
        Err(format!("{list}: the workers' groups (aws.security_groups) accept no connection from it on {from}-{to}"))
    } else {
        Ok(format!("{list}: reaches its worker's ports{}", if open { " and the internet" } else { " only" }))
    }
}
