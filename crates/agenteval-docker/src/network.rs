//! The network of containers that may reach the internet: a bridge of agenteval's own
//! (`agenteval-net`, interface `agenteval0`) on which containers cannot talk to each other, and
//! from which nothing reaches this machine's own addresses (the bridge's gateway, the host's
//! ports on any of its addresses): a firewall rule rejects every packet the bridge delivers to
//! the host itself, while what is routed onward (the internet) passes.

use std::collections::HashMap;

use agenteval_core::{Error, ErrorKind, Result};
use bollard::Docker;
use bollard::models::NetworkCreateRequest;

use crate::LABEL_MANAGED;

/// The network's name.
pub const NETWORK: &str = "agenteval-net";
/// Its bridge's interface on the host, which the firewall rule names.
pub const BRIDGE: &str = "agenteval0";

/// The network, made if missing, with the host closed to it. `Err` when the host cannot be
/// closed (no `iptables`, or not root): such a task would reach this machine's services.
pub async fn ensure(docker: &Docker) -> Result<String> {
    if docker.inspect_network(NETWORK, None::<bollard::query_parameters::InspectNetworkOptions>).await.is_err() {
        let options = HashMap::from([
            ("com.docker.network.bridge.name".to_string(), BRIDGE.to_string()),
            // Containers of different tasks do not reach each other.
            ("com.docker.network.bridge.enable_icc".to_string(), "false".to_string()),
        ]);
        let request = NetworkCreateRequest {
            name: NETWORK.into(),
            driver: Some("bridge".into()),
            options: Some(options),
            labels: Some(HashMap::from([(LABEL_MANAGED.to_string(), "1".to_string())])),
            ..Default::default()
        };
        match docker.create_network(request).await {
            Ok(_) => {}
            // Another worker made it first.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {}
            Err(e) => return Err(crate::infra("creating the network of containers with internet", e)),
        }
    }
    close_host().await?;
    Ok(NETWORK.into())
}

/// Rejects every packet from the bridge addressed to this machine itself (the `INPUT` chain;
/// what the host routes onward goes through `FORWARD`), once: the rule is looked for first.
async fn close_host() -> Result<()> {
    let rule = ["INPUT", "-i", BRIDGE, "-j", "REJECT"];
    let run = |args: Vec<&'static str>| async move {
        tokio::process::Command::new("iptables").args(&args).output().await.map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot close this machine to containers with internet: running iptables: {e}"),
            )
        })
    };
    let mut check = vec!["-w", "-C"];
    check.extend(rule);
    if run(check).await?.status.success() {
        return Ok(());
    }
    let mut insert = vec!["-w", "-I"];
    insert.push(rule[0]);
    insert.push("1");
    insert.extend(&rule[1..]);
    let out = run(insert).await?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "cannot close this machine to containers with internet (iptables: {}); run the worker as root, or give such tasks no internet",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(())
}
