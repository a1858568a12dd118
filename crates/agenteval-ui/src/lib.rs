//! `agenteval ui`: a read-only web UI over a run index and its bundles (local or AWS alike):
//! the runs and each name's history (one task across its nights too), a run's report and live progress, a task's trace, two runs
//! compared, and the same data as JSON under `/api/`.
//!
//! The pages around the report are rendered by askama (which escapes every value); the run,
//! task and comparison pages are the judge's HTML report itself (`agenteval_judge::html`), so
//! the UI and the report file share one implementation of the tables and the trace viewer.
//! Every request passes [`guard`]: GET/HEAD only, a loopback `Host` on a loopback bind (no DNS
//! rebinding), the token on any other bind, and strict security headers on every answer.

mod api;
mod cache;
mod data;
mod guard;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use agenteval_core::RunId;
use agenteval_core::traits::{BundleStore, RunIndex};
use async_trait::async_trait;

pub use guard::Access;

/// Where the UI reads runs from; the binary implements it over its wiring (SQLite and local
/// folders, or DynamoDB and S3).
#[async_trait]
pub trait Source: Send + Sync + 'static {
    fn index(&self) -> &dyn RunIndex;
    /// The store holding the bundle at `bundle_uri` (a run record's).
    async fn bundle(&self, bundle_uri: &str) -> agenteval_core::Result<Arc<dyn BundleStore>>;
    /// A run the user named: an id, a unique prefix of one, `latest:NAME` or `baseline:NAME`.
    /// An unknown one is `NotFound`, a malformed one `Invalid`.
    async fn resolve(&self, reference: &str) -> agenteval_core::Result<RunId>;
    /// Where the runs come from, for the page header (an index path or table).
    fn describe(&self) -> String;
}

/// What `agenteval ui` was started with.
#[derive(Debug, Clone)]
pub struct UiOptions {
    pub access: Access,
    /// A gates file's text and name, to judge comparisons with (`--gates`).
    pub gates: Option<(String, String)>,
    /// `agenteval <version>`, in footers.
    pub generator: String,
}

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the gates file {0}")]
    Gates(String),
    #[error("serving: {0}")]
    Serve(std::io::Error),
}

/// The server's state, shared by every request.
pub(crate) struct App {
    pub source: Arc<dyn Source>,
    pub opts: UiOptions,
    pub gates: Option<agenteval_judge::gates::Gates>,
    pub cache: cache::Cache,
}

/// A bound, not yet serving, UI: `addr` is where it listens (the port the OS chose for 0).
pub struct Bound {
    listener: tokio::net::TcpListener,
    pub addr: SocketAddr,
    app: Arc<App>,
}

/// Binds the address and checks the options; nothing is served yet.
pub async fn bind(source: Arc<dyn Source>, addr: SocketAddr, opts: UiOptions) -> Result<Bound, UiError> {
    let gates = match &opts.gates {
        Some((text, name)) => {
            Some(agenteval_judge::gates::load_gates_str(text, name).map_err(|e| UiError::Gates(e.to_string()))?)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| UiError::Bind { addr, source })?;
    let addr = listener.local_addr().map_err(|source| UiError::Bind { addr, source })?;
    Ok(Bound { listener, addr, app: Arc::new(App { source, opts, gates, cache: cache::Cache::default() }) })
}

impl Bound {
    /// Serves until `shutdown` resolves.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), UiError> {
        let router = router(self.app.clone());
        axum::serve(self.listener, router).with_graceful_shutdown(shutdown).await.map_err(UiError::Serve)
    }
}

fn router(app: Arc<App>) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/", get(pages::runs))
        .route("/runs/{run}", get(pages::run))
        .route("/runs/{run}/tasks/{task}", get(pages::task))
        .route("/runs/{run}/tasks/{task}/trace.jsonl", get(api::trace))
        .route("/sets/{set}", get(pages::set))
        .route("/compare", get(pages::compare))
        .route("/compare/task", get(pages::compare_task))
        .route("/history", get(pages::history))
        .route("/api/history", get(api::history))
        .route("/api/runs", get(api::runs))
        .route("/api/runs/{run}", get(api::run))
        .route("/api/runs/{run}/tasks/{task}", get(api::task))
        .route("/api/compare", get(api::compare))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard::guard))
        .with_state(app)
}
