//! Pre-flight checks of a run config's resources (`agenteval doctor`).

use std::path::Path;

use agenteval_aws::doctor::{Check, DoctorInput, run_checks};
use agenteval_core::config::{BackendId, RunConfig};
use agenteval_core::location::{BundleRoot, IndexLocation};

use super::Wiring;

/// Whether `dir` is, or can be created as, a folder agenteval can write: the nearest part of
/// the path that exists must be a folder that is not read-only.
fn creatable_folder(dir: &Path) -> (bool, String) {
    let Some(existing) = dir.ancestors().find(|a| a.exists()) else {
        return (false, "no part of the path exists".into());
    };
    if !existing.is_dir() {
        return (false, format!("{} is not a folder", existing.display()));
    }
    match std::fs::metadata(existing) {
        Ok(m) if m.permissions().readonly() => (false, format!("{} is read-only", existing.display())),
        Ok(_) if existing == dir => (true, "writable folder".into()),
        Ok(_) => (true, format!("will be created in {}", existing.display())),
        Err(e) => (false, format!("{}: {e}", existing.display())),
    }
}

/// Checks what a run of `cfg` needs; every check runs, none launches anything.
pub async fn run(wiring: &Wiring, cfg: &RunConfig) -> Vec<Check> {
    let index = cfg.storage.index_location();
    if cfg.backend.id == BackendId::Local && cfg.storage.bundle_root.is_local() && index.is_local() {
        let root = cfg.storage.bundle_root.local_path().unwrap_or(Path::new("."));
        let (ok, detail) = creatable_folder(root);
        let mut checks = vec![
            Check { name: "backend".into(), ok: true, detail: "local: no cloud resources needed".into() },
            Check { name: format!("bundle root {}", root.display()), ok, detail },
        ];
        if let agenteval_core::config::AgentConfig::Command { command, workdir, .. } = &cfg.agent
            && let Some(prog) = command.first()
        {
            let local = workdir.as_ref().map(|w| w.join(prog)).filter(|p| !prog.starts_with('/') && p.exists());
            let prog = local.map(|p| p.display().to_string()).unwrap_or_else(|| prog.clone());
            let (ok, detail) = match agenteval_engine::agents::runnable(&prog) {
                Ok(path) => (true, format!("{} is executable", path.display())),
                Err(why) => (false, format!("{why} (agent.command)")),
            };
            checks.push(Check { name: format!("agent program {prog}"), ok, detail });
        }
        if let Ok(backend) = agenteval_core::traits::Resolver::backend(wiring, cfg).await {
            for (name, user) in agenteval_engine::worker::required_secrets(cfg, false) {
                let (ok, detail) = match backend.fetch_secret(&name).await {
                    Ok(_) => (true, format!("found (for the {user})")),
                    Err(e) => (false, format!("{e} (for the {user})")),
                };
                checks.push(Check { name: format!("secret {name}"), ok, detail });
            }
        }
        return checks;
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
        secrets: agenteval_engine::worker::required_secrets(cfg, false).into_iter().map(|(name, _)| name).collect(),
    };
    run_checks(clients, &input).await
}
