//! Harbor's `network_mode = "allowlist"`: a task container on the internal gateway network
//! (which reaches nothing but this machine's gateway ports) with `HTTP_PROXY`/`HTTPS_PROXY`
//! naming this proxy, which the worker runs on one of those ports. It forwards a `CONNECT` or an
//! absolute-form request only to a host the container's task allows (a name, a `*.` suffix, an
//! IP address or a CIDR range), never to a loopback address, and answers anything else
//! `403` with `x-agenteval-egress: refused`. Each container is known by its address.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The hosts each container (by its address) may reach.
#[derive(Debug, Default, Clone)]
pub(crate) struct Allowed(Arc<Mutex<HashMap<IpAddr, Vec<String>>>>);

impl Allowed {
    pub(crate) fn set(&self, ip: IpAddr, hosts: Vec<String>) {
        self.0.lock().expect("not poisoned").insert(ip, hosts);
    }

    pub(crate) fn forget(&self, ip: IpAddr) {
        self.0.lock().expect("not poisoned").remove(&ip);
    }

    fn of(&self, ip: IpAddr) -> Vec<String> {
        self.0.lock().expect("not poisoned").get(&ip).cloned().unwrap_or_default()
    }
}

/// Whether `host` is one the list allows: the name itself, a subdomain of a `*.` entry, or an
/// address equal to (or inside) an address entry.
pub(crate) fn allows(list: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: Option<IpAddr> = host.parse().ok();
    list.iter().any(|e| {
        let e = e.trim_end_matches('.').to_ascii_lowercase();
        if let Some(suffix) = e.strip_prefix("*.") {
            return ip.is_none() && host.ends_with(&format!(".{suffix}"));
        }
        if let Some((net, bits)) = e.split_once('/') {
            return match (ip, net.parse::<IpAddr>(), bits.parse::<u32>()) {
                (Some(IpAddr::V4(a)), Ok(IpAddr::V4(n)), Ok(b)) if b <= 32 => {
                    let mask = if b == 0 { 0 } else { u32::MAX << (32 - b) };
                    u32::from(a) & mask == u32::from(n) & mask
                }
                (Some(IpAddr::V6(a)), Ok(IpAddr::V6(n)), Ok(b)) if b <= 128 => {
                    let mask = if b == 0 { 0 } else { u128::MAX << (128 - b) };
                    u128::from(a) & mask == u128::from(n) & mask
                }
                _ => false,
            };
        }
        e == host
    })
}

/// Serves the proxy on `listener` until the process ends.
pub(crate) fn serve(listener: TcpListener, allowed: Allowed) {
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let allowed = allowed.clone();
            tokio::spawn(async move {
                let _ = handle(stream, peer, &allowed).await;
            });
        }
    });
}

async fn refuse(mut s: TcpStream, why: &str) -> std::io::Result<()> {
    let body = format!("agenteval: {why}\n");
    let head = format!(
        "HTTP/1.1 403 Forbidden\r\nx-agenteval-egress: refused\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await
}

/// One client connection: its request's head, the target it names, allowed or refused.
async fn handle(mut s: TcpStream, peer: SocketAddr, allowed: &Allowed) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let first = text.lines().next().unwrap_or_default().to_string();
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let (host, port, rest) = if method.eq_ignore_ascii_case("CONNECT") {
        let (h, p) = target.rsplit_once(':').unwrap_or((target, "443"));
        (h.to_string(), p.parse().unwrap_or(443), None)
    } else if let Some(after) = target.strip_prefix("http://") {
        let (authority, path) = after.split_once('/').map_or((after, "/".to_string()), |(a, p)| (a, format!("/{p}")));
        let (h, p) = authority.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()).unwrap_or((authority, "80"));
        (h.to_string(), p.parse().unwrap_or(80), Some(path))
    } else {
        return refuse(s, "only CONNECT and absolute http:// requests go through this proxy").await;
    };
    let list = allowed.of(peer.ip());
    if !allows(&list, &host) {
        return refuse(s, &format!("{host} is not among the task's allowed_hosts")).await;
    }
    let upstream = match tokio::net::lookup_host((host.trim_start_matches('[').trim_end_matches(']'), port)).await {
        Ok(addrs) => addrs.filter(|a| !a.ip().is_loopback() && !a.ip().is_unspecified()).collect::<Vec<_>>(),
        Err(_) => vec![],
    };
    let Some(addr) = upstream.first() else {
        return refuse(s, &format!("{host} does not resolve to an address this proxy reaches")).await;
    };
    let mut up = match TcpStream::connect(addr).await {
        Ok(u) => u,
        Err(e) => return refuse(s, &format!("{host}:{port}: {e}")).await,
    };
    match rest {
        None => s.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?,
        Some(path) => {
            // The request in origin form, the rest of what was read after it.
            let end = text.find("\r\n").unwrap_or(0);
            let version = first.split_whitespace().nth(2).unwrap_or("HTTP/1.1");
            up.write_all(format!("{method} {path} {version}").as_bytes()).await?;
            up.write_all(&head[end..]).await?;
        }
    }
    let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_suffixes_addresses_and_ranges_are_allowed_as_listed() {
        let list: Vec<String> = ["pypi.org", "*.example.com", "10.0.0.0/8", "192.0.2.1"].map(String::from).to_vec();
        assert!(allows(&list, "pypi.org") && allows(&list, "PyPI.org."));
        assert!(!allows(&list, "files.pypi.org"), "a name is not its subdomains");
        assert!(allows(&list, "a.example.com") && !allows(&list, "example.com"), "a `*.` entry is its subdomains");
        assert!(allows(&list, "10.1.2.3") && !allows(&list, "11.1.2.3"));
        assert!(allows(&list, "192.0.2.1") && !allows(&list, "evil.com"));
    }
}
