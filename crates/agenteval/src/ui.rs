//! `agenteval ui`: the web UI of `agenteval-ui`, over the index and bundles this command's
//! arguments name (SQLite and folders, or DynamoDB and S3), until Ctrl-C.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use agenteval_core::traits::{BundleStore, Resolver, RunIndex};
use agenteval_core::{Error, ErrorKind, RunId};
use agenteval_ui::{Access, UiError, UiOptions};
use async_trait::async_trait;

use crate::cli::IndexArgs;
use crate::wiring::Wiring;
use crate::{Failure, exit, judging};

struct Source {
    wiring: Arc<Wiring>,
    index: Arc<dyn RunIndex>,
    describe: String,
}

#[async_trait]
impl agenteval_ui::Source for Source {
    fn index(&self) -> &dyn RunIndex {
        self.index.as_ref()
    }

    async fn bundle(&self, bundle_uri: &str) -> agenteval_core::Result<Arc<dyn BundleStore>> {
        let resolver: &dyn Resolver = self.wiring.as_ref();
        Ok(agenteval_engine::resolve::store_from_bundle_uri(resolver, bundle_uri).await?.0)
    }

    async fn resolve(&self, reference: &str) -> agenteval_core::Result<RunId> {
        judging::resolve_ref(self.index.as_ref(), reference).await.map_err(|f| match f.error.downcast::<Error>() {
            Ok(e) => e,
            Err(other) => Error::new(ErrorKind::Invalid, other.to_string()),
        })
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

/// A token for `--token auto`: 128 random bits, hex.
fn new_token() -> Result<String, Failure> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Failure { code: exit::FAILED, error: anyhow::anyhow!("cannot make a token: {e}") })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn usage(message: String) -> Failure {
    Failure { code: exit::USAGE, error: anyhow::anyhow!(message) }
}

pub async fn serve(
    index: &IndexArgs,
    host: &str,
    port: u16,
    token: Option<String>,
    gates: Option<&Path>,
    open: bool,
) -> Result<u8, Failure> {
    let ip: IpAddr = match host {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h.parse().map_err(|_| usage(format!("--host {h}: give an IP address, e.g. 127.0.0.1 or 0.0.0.0")))?,
    };
    let access = match token {
        Some(t) if t == "auto" => Access::Token(new_token()?),
        Some(t) if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) => {
            return Err(usage("--token: at least 16 characters from A-Z a-z 0-9 - _ .".into()));
        }
        Some(t) => Access::Token(t),
        None if ip.is_loopback() => Access::Loopback,
        None => {
            return Err(usage(format!(
                "--host {host} lets other machines reach the UI: give --token TOKEN (or --token auto) so that only you can"
            )));
        }
    };
    let (wiring, index_handle) = crate::commands::open_index(index).await?;
    index_handle.verify().await?;
    let gates = match gates {
        Some(p) => Some((
            std::fs::read_to_string(p).map_err(|e| usage(format!("cannot read gates file {}: {e}", p.display())))?,
            p.display().to_string(),
        )),
        None => None,
    };
    let describe = match (&index.index, &index.config, index.backend.as_deref()) {
        (Some(i), _, _) => format!("index {}", i.display()),
        (None, Some(c), _) => format!("the index of {}", c.display()),
        (None, None, Some("aws")) => {
            std::env::var("AGENTEVAL_AWS_INDEX").unwrap_or_else(|_| "dynamodb://agenteval-runs".into())
        }
        _ => "index runs/index.sqlite".into(),
    };
    let source = Arc::new(Source { wiring, index: index_handle, describe });
    let opts =
        UiOptions { access: access.clone(), gates, generator: format!("agenteval {}", env!("CARGO_PKG_VERSION")) };
    let bound = agenteval_ui::bind(source, SocketAddr::new(ip, port), opts).await.map_err(|e| match e {
        UiError::Bind { .. } => usage(format!("{e} (is another `agenteval ui` running? choose another --port)")),
        UiError::Gates(_) => usage(e.to_string()),
        other => Failure::from(anyhow::anyhow!(other)),
    })?;
    // An IPv6 literal goes in brackets in a URL (`http://[::1]:8765/`).
    let shown_host = match bound.addr.ip() {
        _ if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    let url = match &access {
        Access::Token(t) => format!("http://{shown_host}:{}/?token={t}", bound.addr.port()),
        Access::Loopback => format!("http://{shown_host}:{}/", bound.addr.port()),
    };
    say!("agenteval ui: {url}");
    say!("(read-only; Ctrl-C stops it)");
    if open {
        // Best effort: no browser is not an error.
        let _ = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let stop = async {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut i), Ok(mut t)) => {
                tokio::select! { _ = i.recv() => {}, _ = t.recv() => {} }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    bound.serve(stop).await.map_err(|e| Failure::from(anyhow::anyhow!(e)))?;
    Ok(exit::OK)
}
