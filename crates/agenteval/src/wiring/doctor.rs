//! Pre-flight checks of a run config's resources (`agenteval doctor`).

use agenteval_aws::doctor::{Check, DoctorInput, run_checks};
use agenteval_core::config::{BackendId, RunConfig};
use agenteval_core::location::{BundleRoot, IndexLocation};

use super::Wiring;

/// Checks what a run of `cfg` needs; every check runs, none launches anything.
pub async fn run(wiring: &Wiring, cfg: &RunConfig) -> Vec<Check> {
    let index = cfg.storage.index_location();
    if cfg.backend.id == BackendId::Local && cfg.storage.bundle_root.is_local() && index.is_local() {
        let parent_ok = |p: &std::path::Path| p.ancestors().any(|a| a.is_dir());
        let root = cfg.storage.bundle_root.local_path().unwrap_or(std::path::Path::new("."));
        return vec![
            Check { name: "backend".into(), ok: true, detail: "local: no cloud resources needed".into() },
            Check {
                name: format!("bundle root {}", root.display()),
                ok: parent_ok(root),
                detail: "writable folder".into(),
            },
        ];
    }
    let clients = wiring.clients(&super::aws_settings(cfg.aws.as_ref())).await;
    let a = cfg.aws.clone().unwrap_or_default();
    let input = DoctorInput {
        bucket: match &cfg.storage.bundle_root {
            BundleRoot::S3 { bucket, .. } => Some(bucket.clone()),
            BundleRoot::Local(_) => None,
        },
        table: match index {
            IndexLocation::DynamoDb { table } => Some(table),
            IndexLocation::Sqlite(_) => None,
        },
        cluster: a.cluster.clone(),
        task_definition: a.task_definition.clone(),
        container_name: a.container_name.clone(),
        subnets: a.subnets.clone(),
        security_groups: a.security_groups.clone(),
        secrets: cfg.agent.secrets().values().cloned().collect(),
    };
    run_checks(clients, &input).await
}
