//! Chooses implementations from configuration: the one place that maps names and URIs to
//! `Arc<dyn BundleStore>`, `Arc<dyn RunIndex>` and `Arc<dyn CloudBackend>`.
//!
//! Locations are paths or URIs: a folder or `s3://bucket/prefix` for bundles, a SQLite file
//! or `dynamodb://table` for the index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use agenteval_aws::{AwsClients, AwsSettings, DynamoDbRunIndex, EcsBackend, EcsSettings, S3BundleStore};
use agenteval_core::config::{AwsConfig, FargateCapacity, RunConfig};
use agenteval_core::traits::{BundleStore, CloudBackend, RunIndex};
use agenteval_core::{Error, Result, RunId};
use agenteval_local::{FsBundleStore, LocalProcessBackend, SqliteRunIndex};
use tokio::sync::OnceCell;

static AWS: OnceCell<Arc<AwsClients>> = OnceCell::const_new();

/// The process's AWS clients, built once. The first caller's settings win: the controller
/// passes its config's; a worker (which has only a job URI) the environment's.
pub async fn aws_clients(cfg: Option<&AwsConfig>) -> Arc<AwsClients> {
    AWS.get_or_init(|| async {
        let settings = cfg
            .map(|a| AwsSettings {
                region: a.region.clone(),
                profile: a.profile.clone(),
                endpoint_url: a.endpoint_url.clone(),
                emulator_credentials: false,
            })
            .unwrap_or_default();
        AwsClients::connect(&settings).await
    })
    .await
    .clone()
}

fn unknown_scheme(uri: &str) -> Error {
    Error::invalid(format!("`{uri}`: unsupported location (use a local path, s3:// or dynamodb://)"))
}

/// The bundle store for a bundle root (a folder or `s3://bucket/prefix`).
pub async fn store_for_root(root: &str, aws: Option<&AwsConfig>) -> Result<Arc<dyn BundleStore>> {
    if root.starts_with("s3://") {
        return Ok(Arc::new(S3BundleStore::from_uri(aws_clients(aws).await, root)?));
    }
    if root.contains("://") {
        return Err(unknown_scheme(root));
    }
    Ok(Arc::new(FsBundleStore::new(root)))
}

pub async fn store_for(cfg: &RunConfig) -> Result<Arc<dyn BundleStore>> {
    store_for_root(&cfg.storage.bundle_root.to_string_lossy(), cfg.aws.as_ref()).await
}

/// Splits a bundle URI (`/path/runs/<run_id>` or `s3://bucket/prefix/<run_id>`) into its
/// store and run id.
pub async fn store_from_bundle_uri(uri: &str) -> Result<(Arc<dyn BundleStore>, RunId)> {
    let trimmed = uri.trim_end_matches('/');
    let (root, last) =
        trimmed.rsplit_once('/').ok_or_else(|| Error::invalid(format!("`{uri}` is not a bundle location")))?;
    let run = RunId::from_str(last).map_err(|_| Error::invalid(format!("`{uri}` does not end in a run id")))?;
    let root = if root.is_empty() { "/" } else { root };
    Ok((store_for_root(root, None).await?, run))
}

/// Reads a file given as `<bundle uri>/<path inside the bundle>` (a job spec).
pub async fn read_bundle_file(uri: &str) -> Result<Vec<u8>> {
    let (bundle, path) = uri
        .split_once("/jobs/")
        .map(|(b, p)| (b.to_string(), format!("jobs/{p}")))
        .ok_or_else(|| Error::invalid(format!("`{uri}` is not a job spec location")))?;
    let (store, run) = store_from_bundle_uri(&bundle).await?;
    store.get(&run, &path).await
}

/// The URI workers use to open the index.
pub fn index_uri(cfg: &RunConfig) -> String {
    cfg.storage.index_path().to_string_lossy().into_owned()
}

pub async fn index_from_uri(uri: &str) -> Result<Arc<dyn RunIndex>> {
    if uri.starts_with("dynamodb://") {
        return Ok(Arc::new(DynamoDbRunIndex::from_uri(aws_clients(None).await, uri)?));
    }
    if uri.contains("://") {
        return Err(unknown_scheme(uri));
    }
    Ok(Arc::new(SqliteRunIndex::open(Path::new(uri))?))
}

pub async fn index_for(cfg: &RunConfig) -> Result<Arc<dyn RunIndex>> {
    if cfg.aws.is_some() {
        aws_clients(cfg.aws.as_ref()).await;
    }
    index_from_uri(&index_uri(cfg)).await
}

/// The backend named by `backend.id`. `exe` is the agenteval binary local workers run as.
pub async fn backend_for(cfg: &RunConfig, exe: &Path) -> Result<Arc<dyn CloudBackend>> {
    match cfg.backend.id.as_str() {
        "local" => {
            let root = cfg.storage.bundle_root.to_string_lossy().to_string();
            if root.contains("://") {
                return Err(Error::invalid("the local backend needs a local bundle folder"));
            }
            Ok(Arc::new(LocalProcessBackend::new(
                exe.to_path_buf(),
                FsBundleStore::new(PathBuf::from(root)),
                cfg.backend.secrets_file.clone(),
            )))
        }
        "aws" => {
            let a = cfg.aws.as_ref().ok_or_else(|| Error::invalid("backend `aws` needs an `aws` section"))?;
            let clients = aws_clients(Some(a)).await;
            let store = S3BundleStore::from_uri(clients.clone(), &cfg.storage.bundle_root.to_string_lossy())?;
            // Workers reach the same region and endpoint as the controller; credentials come
            // from their task role, never from here.
            let mut worker_env = BTreeMap::new();
            if let Some(r) = &clients.region {
                worker_env.insert("AWS_REGION".to_string(), r.clone());
            }
            if let Some(e) = &clients.endpoint_url {
                worker_env.insert("AWS_ENDPOINT_URL".to_string(), e.clone());
            }
            let settings = EcsSettings {
                cluster: a.cluster.clone().ok_or_else(|| Error::invalid("aws.cluster is not set"))?,
                task_definition: a
                    .task_definition
                    .clone()
                    .ok_or_else(|| Error::invalid("aws.task_definition is not set"))?,
                container_name: a.container_name.clone(),
                subnets: a.subnets.clone(),
                security_groups: a.security_groups.clone(),
                assign_public_ip: a.assign_public_ip,
                spot: a.capacity == FargateCapacity::FargateSpot,
                launch_burst: a.launch_burst,
                launch_per_second: a.launch_per_second,
                // The controller's heartbeat rides on its polling loop: polls longer than 10 s would
                // make a live controller look dead to `status` and `resume`.
                poll: Duration::from_secs_f64(a.poll_seconds.clamp(0.05, 10.0)),
                worker_env,
            };
            Ok(Arc::new(EcsBackend::new(clients, settings, store)))
        }
        other => Err(Error::invalid(format!("unknown backend `{other}`"))),
    }
}
