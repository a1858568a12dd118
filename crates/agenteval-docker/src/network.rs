//! The networks of task containers, bridges of agenteval's own on which containers cannot talk
//! to each other: `agenteval-net` (interface `agenteval0`) for containers that may reach the
//! internet, and `agenteval-tasks` (`agenteval1`, internal: nothing is routed out) for those
//! that may not but whose agent reaches the model gateway. From these and every other network
//! agenteval makes (a multi-container task's own), nothing reaches this machine's own addresses
//! but the gateway's ports (`GATEWAY_PORTS`): every bridge agenteval makes is named
//! `agenteval…` (`BRIDGE_PREFIX`), and firewall rules on that prefix (IPv4 and IPv6) accept
//! those ports and the answers on connections this machine opened, and reject every other
//! packet such a bridge delivers to the host itself, whatever address it was sent to (the
//! bridge's, `docker0`'s, the host's own), while what is routed onward (the internet, from
//! `agenteval-net` only) passes.

use std::collections::HashMap;

use agenteval_core::{Error, ErrorKind, Result};
use bollard::Docker;
use bollard::models::NetworkCreateRequest;

use crate::LABEL_MANAGED;

/// A task network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskNet {
    /// The internet, not the host.
    Internet,
    /// The model gateway on the host, nothing else.
    GatewayOnly,
}

impl TaskNet {
    pub fn name(self) -> &'static str {
        match self {
            TaskNet::Internet => "agenteval-net",
            TaskNet::GatewayOnly => "agenteval-tasks",
        }
    }

    /// Its bridge's interface on the host, which the firewall rules name.
    pub fn bridge(self) -> &'static str {
        match self {
            TaskNet::Internet => "agenteval0",
            TaskNet::GatewayOnly => "agenteval1",
        }
    }
}

/// The network, made if missing, with the host closed to it but for the gateway's ports. `Err`
/// when the host cannot be closed (no `iptables`, or not root): such a task would reach this
/// machine's services.
pub async fn ensure(docker: &Docker, net: TaskNet) -> Result<String> {
    let name = net.name();
    if docker.inspect_network(name, None::<bollard::query_parameters::InspectNetworkOptions>).await.is_err() {
        let options = HashMap::from([
            ("com.docker.network.bridge.name".to_string(), net.bridge().to_string()),
            // Containers of different tasks do not reach each other.
            ("com.docker.network.bridge.enable_icc".to_string(), "false".to_string()),
        ]);
        let request = NetworkCreateRequest {
            name: name.into(),
            driver: Some("bridge".into()),
            internal: Some(net == TaskNet::GatewayOnly),
            options: Some(options),
            labels: Some(HashMap::from([(LABEL_MANAGED.to_string(), "1".to_string())])),
            ..Default::default()
        };
        match docker.create_network(request).await {
            Ok(_) => {}
            // Another worker made it first.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {}
            Err(e) => return Err(crate::infra(&format!("creating the task network {name}"), e)),
        }
    }
    close_host().await?;
    Ok(name.into())
}

/// What the name of every bridge agenteval makes starts with: the firewall rules name it.
pub const BRIDGE_PREFIX: &str = "agenteval";

/// A bridge name for a task's own network from its network's unique suffix (Linux allows 15
/// bytes).
pub fn task_bridge(unique_hex: &str) -> String {
    format!("{BRIDGE_PREFIX}{}", &unique_hex[..unique_hex.len().min(15 - BRIDGE_PREFIX.len())])
}

/// The host's address on `name`, where its containers reach the model gateway.
pub async fn host_address(docker: &Docker, name: &str) -> Option<std::net::Ipv4Addr> {
    let n = docker.inspect_network(name, None::<bollard::query_parameters::InspectNetworkOptions>).await.ok()?;
    n.ipam?.config?.into_iter().find_map(|c| c.gateway?.parse().ok())
}

/// Rejects every packet from the bridge addressed to this machine itself (the `INPUT` chain;
/// what the host routes onward goes through `FORWARD`) but those to the gateway's ports and the
/// answers on connections this machine opened (the `llm` agent's MCP client dialing a sidecar: a
/// container cannot open such a connection itself), once: each rule is looked for first, and
/// the accepting ones always end above the rejecting one.
pub(crate) async fn close_host() -> Result<()> {
    let (first, last) = (agenteval_core::gateway::GATEWAY_PORTS.start(), agenteval_core::gateway::GATEWAY_PORTS.end());
    let ports = format!("{first}:{last}");
    let every = format!("{BRIDGE_PREFIX}+");
    close_with("iptables", &["INPUT", "-i", &every, "-j", "REJECT"]).await?;
    close_with("iptables", &["INPUT", "-i", &every, "-p", "tcp", "--dport", &ports, "-j", "ACCEPT"]).await?;
    close_with(
        "iptables",
        &["INPUT", "-i", &every, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
    )
    .await?;
    // IPv6: agenteval's bridges carry none of it but a link-local address; where the machine
    // has no ip6tables (no IPv6 at all) there is nothing to close.
    if tokio::process::Command::new("ip6tables").arg("--version").output().await.is_ok_and(|o| o.status.success()) {
        close_with("ip6tables", &["INPUT", "-i", &every, "-j", "REJECT"]).await?;
        close_with("ip6tables", &["INPUT", "-i", &every, "-p", "tcp", "--dport", &ports, "-j", "ACCEPT"]).await?;
        let back = ["INPUT", "-i", &every, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"];
        close_with("ip6tables", &back).await?;
    }
    Ok(())
}

/// Puts `rule` (its chain first) at the top of its chain unless it is there already.
async fn close_with(tool: &'static str, rule: &[&str]) -> Result<()> {
    let run = |args: Vec<&str>| {
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        async move {
            tokio::process::Command::new(tool).args(&args).output().await.map_err(|e| {
                Error::new(ErrorKind::Io, format!("cannot close this machine to task containers: running {tool}: {e}"))
            })
        }
    };
    let mut check = vec!["-w", "-C"];
    check.extend_from_slice(rule);
    if run(check).await?.status.success() {
        return Ok(());
    }
    let mut insert = vec!["-w", "-I", rule[0], "1"];
    insert.extend_from_slice(&rule[1..]);
    let out = run(insert).await?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "cannot close this machine to task containers ({tool}: {}); run the worker as root, or give such tasks no internet and no gateway",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(())
}
