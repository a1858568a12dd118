//! `agenteval ui`: the web UI of `agenteval-ui`, over the index and bundles this command's
//! arguments name (SQLite and folders, or DynamoDB and S3), until Ctrl-C.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use agenteval_core::RunId;
use agenteval_core::traits::{BundleStore, Resolver, RunIndex};
use agenteval_ui::{Access, UiError, UiOptions};
use async_trait::async_trait;

use crate::cli::IndexArgs;
use crate::wiring::Wiring;
use crate::{Failure, exit};

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
        agenteval_engine::refs::resolve_ref(self.index.as_ref(), reference).await
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

/// Where the UI's token comes from.
#[derive(Debug, Default)]
pub struct TokenSource {
    /// `--token-file`.
    pub file: Option<std::path::PathBuf>,
    /// `--no-token`.
    pub none: bool,
    /// `--token VALUE`: refused but for `auto` (the default now), since the command line is
    /// readable by every process of the machine.
    pub argument: Option<String>,
}

/// The environment variable a token may come from.
const TOKEN_VAR: &str = "AGENTEVAL_UI_TOKEN";

fn valid_token(t: &str) -> bool {
    t.len() >= 16 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The token to require, if any: from the file, the environment, or made fresh.
fn token_of(source: TokenSource, loopback: bool, host: &str) -> Result<Option<String>, Failure> {
    const SHAPE: &str = "at least 16 characters from A-Z a-z 0-9 - _ .";
    match source.argument.as_deref() {
        None | Some("auto") => {}
        Some(_) => {
            return Err(usage(format!(
                "--token: a token on the command line is readable by every process of this machine (/proc/PID/cmdline); put it in {TOKEN_VAR} or a file for --token-file, or leave both out and use the one printed"
            )));
        }
    }
    if source.none {
        if !loopback {
            return Err(usage(format!(
                "--no-token with --host {host} would let other machines read the UI: bind a loopback address, or keep the token"
            )));
        }
        return Ok(None);
    }
    if let Some(file) = &source.file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| usage(format!("--token-file {}: cannot read it: {e}", file.display())))?;
        let t = text.trim();
        if !valid_token(t) {
            return Err(usage(format!("--token-file {}: the token must be {SHAPE}", file.display())));
        }
        return Ok(Some(t.to_string()));
    }
    match std::env::var(TOKEN_VAR) {
        Ok(t) if valid_token(t.trim()) => Ok(Some(t.trim().to_string())),
        Ok(_) => Err(usage(format!("{TOKEN_VAR}: the token must be {SHAPE}"))),
        Err(_) => new_token().map(Some),
    }
}

/// A fresh token: 128 random bits, hex.
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
    token: TokenSource,
    gates: Option<&Path>,
    open: bool,
) -> Result<u8, Failure> {
    let ip: IpAddr = match host {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h.parse().map_err(|_| usage(format!("--host {h}: give an IP address, e.g. 127.0.0.1 or 0.0.0.0")))?,
    };
    let access = Access { loopback: ip.is_loopback(), token: token_of(token, ip.is_loopback(), host)? };
    let (wiring, index_handle) = crate::session::open_index(index).await?;
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
        (None, None, backend) => format!("index {}", crate::wiring::default_index(backend)?.0),
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
    let url = match &access.token {
        Some(t) => format!("http://{shown_host}:{}/?token={t}", bound.addr.port()),
        None => format!("http://{shown_host}:{}/", bound.addr.port()),
    };
    say!("agenteval ui: {url}");
    say!("(read-only; Ctrl-C stops it)");
    // Held while the server runs: the page the browser was sent to.
    let _opened = if open { open_browser(&url) } else { None };
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

/// Opens `url` in the desktop's browser, best effort (no browser is not an error). The browser
/// gets a file only this user can read that redirects to the address, as Jupyter does: the
/// address carries the token, and a command line is readable by every process of the machine
/// (`/proc/PID/cmdline`).
fn open_browser(url: &str) -> Option<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("agenteval-ui-").tempdir().ok()?;
    let page = dir.path().join("open.html");
    let url = url.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;");
    let html = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>agenteval ui</title><p><a href=\"{url}\">agenteval ui</a></p>\n"
    );
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&page).ok()?;
        f.write_all(html.as_bytes()).ok()?;
    }
    let _ = std::process::Command::new("xdg-open")
        .arg(&page)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    Some(dir)
}
