//! Pre-flight checks of a run config's resources (`agenteval doctor`).

use agenteval_aws::doctor::{Check, DoctorInput, run_checks};
use agenteval_core::config::RunConfig;

use crate::factory;

/// Checks what a run of `cfg` needs; every check runs, none launches anything.
pub async fn run(cfg: &RunConfig) -> Vec<Check> {
    let root = cfg.storage.bundle_root.to_string_lossy().to_string();
    let index = factory::index_uri(cfg);
    if cfg.backend.id != "aws" && !root.starts_with("s3://") && !index.starts_with("dynamodb://") {
        let parent_ok = |p: &std::path::Path| p.ancestors().any(|a| a.is_dir());
        return vec![
            Check { name: "backend".into(), ok: true, detail: "local: no cloud resources needed".into() },
            Check {
                name: format!("bundle root {root}"),
                ok: parent_ok(std::path::Path::new(&root)),
                detail: "writable folder".into(),
            },
        ];
    }
    let clients = factory::aws_clients(cfg.aws.as_ref()).await;
    let a = cfg.aws.clone().unwrap_or_else(|| serde_json::from_value(serde_json::json!({})).expect("defaults"));
    let input = DoctorInput {
        bucket: agenteval_aws::s3_store::parse_s3_uri(&root).ok().map(|(b, _)| b),
        table: index.strip_prefix("dynamodb://").map(str::to_string),
        cluster: a.cluster.clone(),
        task_definition: a.task_definition.clone(),
        container_name: a.container_name.clone(),
        subnets: a.subnets.clone(),
        security_groups: a.security_groups.clone(),
        secrets: cfg.agent.secrets.values().cloned().collect(),
    };
    run_checks(clients, &input).await
}
