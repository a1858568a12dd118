//! Harbor's `network_mode = "allowlist"`: a task container on the internal gateway network
//! (which reaches nothing but this machine's gateway ports) with `HTTP_PROXY`/`HTTPS_PROXY`
//! naming this proxy, which the worker runs on one of those ports. It forwards a `CONNECT` or an
//! absolute-form request only to a host the container's task allows (a name, a `*.` suffix, an
//! IP address or a CIDR range, each on ports 80 and 443 unless it names its own: `host:8080`),
//! never to an address of this machine (loopback, IPv4-mapped or not; link-local and the cloud
//! metadata address; any address of any local interface or bridge; unspecified), never with a
//! `Host` header other than its target, and answers anything else `403` with
//! `x-agenteval-egress: refused`. Each container is known by its address. The local Docker
//! environments run it on the gateway network's host address; a fleet's worker on its own
//! address, for its environment tasks (`agenteval-aws`'s `env_tasks`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The hosts each container (by its address) may reach.
#[derive(Debug, Default, Clone)]
pub struct Allowed(Arc<Mutex<HashMap<IpAddr, Vec<String>>>>);

impl Allowed {
    pub fn set(&self, ip: IpAddr, hosts: Vec<String>) {
        self.0.lock().expect("not poisoned").insert(ip, hosts);
    }

    pub fn forget(&self, ip: IpAddr) {
        self.0.lock().expect("not poisoned").remove(&ip);
    }

    fn of(&self, ip: IpAddr) -> Vec<String> {
        self.0.lock().expect("not poisoned").get(&ip).cloned().unwrap_or_default()
    }
}

/// The variables that send an environment's HTTP(S) through the proxy at `proxy`, with the
/// proxy's own address (where the model gateway listens too) and loopback reached directly.
pub fn proxy_env(proxy: SocketAddr) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .into_iter()
        .map(|k| (k.to_string(), format!("http://{proxy}")))
        .collect();
    let direct = format!("localhost,127.0.0.1,{}", proxy.ip());
    env.push(("NO_PROXY".into(), direct.clone()));
    env.push(("no_proxy".into(), direct));
    env
}

/// Ports an allowlist entry that names none allows.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// An entry split into its host part and the port it names, if any (`host:8080`,
/// `[2001:db8::1]:443`; a bare IPv6 address names none).
fn entry_port(e: &str) -> (&str, Option<u16>) {
    if let Some(rest) = e.strip_prefix('[')
        && let Some((h, p)) = rest.split_once("]:")
    {
        return (h, p.parse().ok());
    }
    if e.matches(':').count() == 1
        && let Some((h, p)) = e.rsplit_once(':')
        && let Ok(p) = p.parse()
    {
        return (h, Some(p));
    }
    (e.trim_start_matches('[').trim_end_matches(']'), None)
}

/// Whether `host` on `port` is one the list allows: the name itself, a subdomain of a `*.`
/// entry, or an address equal to (or inside) an address entry; on the entry's port, else 80 or
/// 443.
pub fn allows(list: &[String], host: &str, port: u16) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: Option<IpAddr> = host.parse().ok().map(canonical);
    list.iter().any(|e| {
        let e = e.trim_end_matches('.').to_ascii_lowercase();
        let (e, named) = entry_port(&e);
        let port_ok = named.map_or(DEFAULT_PORTS.contains(&port), |p| p == port);
        if !port_ok {
            return false;
        }
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
        match (ip, e.parse::<IpAddr>()) {
            (Some(a), Ok(b)) => a == canonical(b),
            _ => e == host,
        }
    })
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (`::ffff:127.0.0.1` is loopback).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is this machine or what only this machine reaches: loopback, unspecified,
/// link-local (the cloud metadata address among them), multicast, or an address of one of its
/// interfaces (a bridge's, `docker0`'s, its own).
fn is_this_machine(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    let special = match ip {
        IpAddr::V4(a) => {
            a.is_loopback() || a.is_unspecified() || a.is_link_local() || a.is_multicast() || a.is_broadcast()
        }
        IpAddr::V6(a) => {
            a.is_loopback() || a.is_unspecified() || a.is_multicast() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    special || local_addresses().contains(&ip)
}

/// Every address of this machine's interfaces now (bridges come and go with tasks).
fn local_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return vec![] };
    addrs
        .filter_map(|a| {
            let a = a.address?;
            if let Some(v4) = a.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                a.as_sockaddr_in6().map(|v6| canonical(IpAddr::V6(v6.ip())))
            }
        })
        .collect()
}

/// The `Host` header of a request head, if it has one.
fn host_header(head: &str) -> Option<&str> {
    head.lines().skip(1).take_while(|l| !l.is_empty()).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("host").then(|| v.trim())
    })
}

/// Whether a `Host` header names the request's target (its port, when it names one, too).
fn same_host(header: &str, host: &str, port: u16) -> bool {
    let header = header.to_ascii_lowercase();
    let (h, p) = entry_port(&header);
    let target = host.to_ascii_lowercase();
    let target = target.trim_start_matches('[').trim_end_matches(']');
    h.trim_end_matches('.') == target.trim_end_matches('.') && p.is_none_or(|p| p == port)
}

/// Serves the proxy on `listener` until the process ends.
pub fn serve(listener: TcpListener, allowed: Allowed) {
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
    if !allows(&list, &host, port) {
        return refuse(
            s,
            &format!("{host}:{port} is not among the task's allowed_hosts (80 and 443 unless an entry names its port)"),
        )
        .await;
    }
    if rest.is_some()
        && let Some(h) = host_header(&text)
        && !same_host(h, &host, port)
    {
        return refuse(s, &format!("the Host header `{h}` is not the request's target {host}")).await;
    }
    let upstream = match tokio::net::lookup_host((host.trim_start_matches('[').trim_end_matches(']'), port)).await {
        Ok(addrs) => addrs.filter(|a| !is_this_machine(a.ip())).collect::<Vec<_>>(),
        Err(_) => vec![],
    };
    let Some(addr) = upstream.first() else {
        return refuse(s, &format!("{host} does not resolve to an address this proxy reaches (never this machine)"))
            .await;
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
        let ok = |h: &str| allows(&list, h, 443);
        assert!(ok("pypi.org") && ok("PyPI.org."));
        assert!(!ok("files.pypi.org"), "a name is not its subdomains");
        assert!(ok("a.example.com") && !ok("example.com"), "a `*.` entry is its subdomains");
        assert!(ok("10.1.2.3") && !ok("11.1.2.3"));
        assert!(ok("192.0.2.1") && !ok("evil.com"));
        assert!(ok("[::ffff:192.0.2.1]"), "an IPv4-mapped address is its IPv4 address");
    }

    #[test]
    fn only_the_port_an_entry_names_or_80_and_443_are_allowed() {
        let list: Vec<String> = ["pypi.org", "10.0.0.5:8080", "[2001:db8::1]:8443"].map(String::from).to_vec();
        assert!(allows(&list, "pypi.org", 443) && allows(&list, "pypi.org", 80));
        assert!(!allows(&list, "pypi.org", 22), "any other port of an allowed host is refused");
        assert!(allows(&list, "10.0.0.5", 8080) && !allows(&list, "10.0.0.5", 443));
        assert!(allows(&list, "[2001:db8::1]", 8443) && !allows(&list, "2001:db8::1", 443));
    }

    #[test]
    fn every_address_of_this_machine_is_refused() {
        for a in
            ["127.0.0.1", "::1", "::ffff:127.0.0.1", "0.0.0.0", "169.254.169.254", "fe80::1", "::ffff:169.254.169.254"]
        {
            assert!(is_this_machine(a.parse().unwrap()), "{a}");
        }
        for a in local_addresses() {
            assert!(is_this_machine(a), "{a}, an interface's");
        }
        assert!(!is_this_machine("192.0.2.7".parse().unwrap()));
    }

    #[test]
    fn a_host_header_must_name_the_target() {
        let head = "GET http://a.example/x HTTP/1.1\r\nHost: evil.example\r\n\r\n";
        assert_eq!(host_header(head), Some("evil.example"));
        assert!(!same_host("evil.example", "a.example", 80));
        assert!(same_host("A.example:80", "a.example", 80) && same_host("a.example", "a.example", 8080));
        assert!(!same_host("a.example:8080", "a.example", 80));
    }
}
