//! Opening a bundle, or one file of it, from a location, through the [`Resolver`] the binary
//! hands in (the engine names no backend crate).

use std::sync::Arc;

use agenteval_core::location::BundleRoot;
use agenteval_core::traits::{BundleStore, Resolver};
use agenteval_core::{Error, Result, RunId};

/// The store and run id of a bundle location (`/path/runs/<run_id>`, `s3://bucket/prefix/<run_id>`).
pub async fn store_from_bundle_uri(resolver: &dyn Resolver, uri: &str) -> Result<(Arc<dyn BundleStore>, RunId)> {
    let (root, run) = BundleRoot::split_bundle_uri(uri)?;
    Ok((resolver.store(&root).await?, run))
}

/// Reads a file given as `<bundle location>/<path inside the bundle>` (a job spec).
pub async fn read_bundle_file(resolver: &dyn Resolver, uri: &str) -> Result<Vec<u8>> {
    let (bundle, path) = uri
        .split_once("/jobs/")
        .map(|(b, p)| (b.to_string(), format!("jobs/{p}")))
        .ok_or_else(|| Error::invalid(format!("`{uri}` is not a job spec location")))?;
    let (store, run) = store_from_bundle_uri(resolver, &bundle).await?;
    store.get(&run, &path).await
}
