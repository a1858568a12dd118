//! The deployed stack remembered on this machine: `agenteval aws deploy` creates or updates
//! `infra/agenteval.yaml` through CloudFormation, waits for it, and keeps its outputs as a named
//! stack profile that every `--backend aws` command reads for what its config leaves out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agenteval_core::{Error, ErrorKind, Result};
use aws_sdk_cloudformation::types::{Capability, Parameter, StackStatus};
use serde::{Deserialize, Serialize};

use crate::sdk::{AwsClients, AwsSettings, classify, kind_and_detail};

/// Chooses a stack profile other than the current one.
pub const PROFILE_ENV: &str = "AGENTEVAL_STACK_PROFILE";
/// Where agenteval keeps this machine's settings (default `$XDG_CONFIG_HOME/agenteval`, else
/// `~/.config/agenteval`).
pub const CONFIG_HOME_ENV: &str = "AGENTEVAL_CONFIG_HOME";
/// The longest a deploy is waited for.
const DEPLOY_DEADLINE: Duration = Duration::from_secs(3600);

/// A deployed stack as this machine remembers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackProfile {
    /// The profile's name (the stack's, unless `--profile` named another).
    pub name: String,
    /// The CloudFormation stack.
    pub stack: String,
    /// The region it is in.
    #[serde(default)]
    pub region: Option<String>,
    /// The endpoint it was deployed through, when not AWS's own (an emulator).
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// The stack's status when it was read.
    pub status: String,
    /// Every output of the stack.
    pub outputs: BTreeMap<String, String>,
    /// The agenteval settings its outputs are, as `--set` takes them (`aws.cluster=…`).
    pub settings: Vec<String>,
    /// When it was read (RFC 3339).
    pub saved_at: String,
}

/// The folder the stack profiles are kept in.
pub fn profiles_dir() -> Option<PathBuf> {
    let home = std::env::var_os(CONFIG_HOME_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()).map(|d| Path::new(&d).join("agenteval"))
        })
        .or_else(|| {
            std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| Path::new(&h).join(".config/agenteval"))
        })?;
    Some(home.join("stacks"))
}

/// Whether `name` can name a profile file.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.')
}

impl StackProfile {
    /// The profile's file.
    pub fn path_of(name: &str) -> Result<PathBuf> {
        if !valid_name(name) {
            return Err(Error::invalid(format!(
                "`{name}` cannot name a stack profile: use letters, digits, `-`, `_` and `.`"
            )));
        }
        let dir = profiles_dir()
            .ok_or_else(|| Error::invalid(format!("no folder for stack profiles: set {CONFIG_HOME_ENV} or HOME")))?;
        Ok(dir.join(format!("{name}.json")))
    }

    /// The profile in use and its file: the one `AGENTEVAL_STACK_PROFILE` names, else the one
    /// last deployed or chosen (`aws deploy`, `aws use`). `Ok(None)`: none chosen yet.
    pub fn current() -> Result<Option<(StackProfile, PathBuf)>> {
        let named = std::env::var(PROFILE_ENV).ok().filter(|v| !v.is_empty());
        let name = match named.clone() {
            Some(n) => n,
            None => {
                let Some(dir) = profiles_dir() else { return Ok(None) };
                match std::fs::read_to_string(dir.join("current")) {
                    Ok(n) if !n.trim().is_empty() => n.trim().to_string(),
                    _ => return Ok(None),
                }
            }
        };
        let path = Self::path_of(&name)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let how = if named.is_some() { format!("{PROFILE_ENV} names it") } else { "it is current".into() };
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "stack profile `{name}` ({how}) has no file {}: `agenteval aws use STACK` or `agenteval aws deploy` makes it",
                        path.display()
                    ),
                ));
            }
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let profile: StackProfile = serde_json::from_str(&text).map_err(|e| {
            Error::invalid(format!(
                "{} is not a stack profile ({e}); `agenteval aws use STACK` rewrites it",
                path.display()
            ))
        })?;
        Ok(Some((profile, path)))
    }

    /// Writes the profile and makes it the current one.
    pub fn save(&self) -> Result<PathBuf> {
        let path = Self::path_of(&self.name)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let body = serde_json::to_vec_pretty(self).map_err(|e| Error::internal(format!("a stack profile: {e}")))?;
        write_atomically(&path, &body)?;
        write_atomically(&dir.join("current"), format!("{}\n", self.name).as_bytes())?;
        Ok(path)
    }

    /// The settings this profile supplies now: its outputs', and its region and endpoint unless
    /// the environment names its own (`AWS_REGION`, `AWS_ENDPOINT_URL`), which win.
    pub fn settings_now(&self) -> Vec<String> {
        let mut out = self.settings.clone();
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty());
        if let Some(r) = &self.region
            && !set("AWS_REGION")
            && !set("AWS_DEFAULT_REGION")
        {
            out.push(format!("aws.region={r}"));
        }
        if let Some(e) = &self.endpoint_url
            && !set("AWS_ENDPOINT_URL")
        {
            out.push(format!("aws.endpoint_url={e}"));
        }
        out
    }

    /// Where the settings come from, for messages.
    pub fn source(&self, path: &Path) -> String {
        format!("the stack profile `{}` ({})", self.name, path.display())
    }
}

/// The AWS settings of a command with no run config (a read command's `--backend aws`): the
/// stack profile in use gives the region and endpoint the environment does not.
pub fn settings_without_config() -> AwsSettings {
    let mut s = AwsSettings::default();
    if let Ok(Some((p, _))) = StackProfile::current() {
        for setting in p.settings_now() {
            if let Some(r) = setting.strip_prefix("aws.region=") {
                s.region = Some(r.to_string());
            } else if let Some(e) = setting.strip_prefix("aws.endpoint_url=") {
                s.endpoint_url = Some(e.to_string());
            }
        }
    }
    s
}

fn write_atomically(path: &Path, body: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// The agenteval settings of a stack's outputs: its `SetFlags` output (every setting as
/// `--set` flags), else the outputs whose description names a setting.
pub fn settings_of(outputs: &BTreeMap<String, String>, descriptions: &BTreeMap<String, String>) -> Vec<String> {
    if let Some(flags) = outputs.get("SetFlags") {
        let mut words = flags.split_whitespace();
        let mut out = Vec::new();
        while let Some(w) = words.next() {
            if w == "--set"
                && let Some(setting) = words.next()
            {
                out.push(setting.to_string());
            }
        }
        if !out.is_empty() {
            return out;
        }
    }
    outputs
        .iter()
        .filter_map(|(k, v)| {
            let d = descriptions.get(k)?.split_whitespace().next()?;
            (d.starts_with("storage.") || d.starts_with("aws.")).then(|| format!("{d}={v}"))
        })
        .collect()
}

/// What to deploy.
#[derive(Debug, Clone)]
pub struct DeployRequest {
    pub stack: String,
    pub template: String,
    /// `Key=Value` parameters; a parameter of an existing stack not given keeps its value.
    pub parameters: Vec<(String, String)>,
    /// Seconds between status reads while waiting.
    pub poll: Duration,
}

/// What a deploy did.
#[derive(Debug, Clone)]
pub struct Deployed {
    /// `created`, `updated` or `unchanged`.
    pub action: &'static str,
    pub status: String,
    pub outputs: BTreeMap<String, String>,
    pub descriptions: BTreeMap<String, String>,
    /// Why the stack did not reach a complete state (a rollback), with where to look.
    pub failed: Option<String>,
}

/// Creates the stack, or updates it if it exists, and waits until it is done.
pub async fn deploy(clients: &AwsClients, req: &DeployRequest, progress: &dyn Fn(&str)) -> Result<Deployed> {
    let cfn = &clients.cloudformation;
    let existing = describe(clients, &req.stack).await?;
    let action = match &existing {
        None => {
            let mut call = cfn
                .create_stack()
                .stack_name(&req.stack)
                .template_body(&req.template)
                .capabilities(Capability::CapabilityIam)
                .capabilities(Capability::CapabilityNamedIam);
            for (k, v) in &req.parameters {
                call = call.parameters(Parameter::builder().parameter_key(k).parameter_value(v).build());
            }
            call.send().await.map_err(|e| classify(&format!("creating stack {}", req.stack), e))?;
            "created"
        }
        Some(stack) => {
            let given: BTreeMap<&str, &str> = req.parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut call = cfn
                .update_stack()
                .stack_name(&req.stack)
                .template_body(&req.template)
                .capabilities(Capability::CapabilityIam)
                .capabilities(Capability::CapabilityNamedIam);
            for (k, v) in &given {
                call = call.parameters(Parameter::builder().parameter_key(*k).parameter_value(*v).build());
            }
            for p in stack.parameters() {
                if let Some(k) = p.parameter_key()
                    && !given.contains_key(k)
                {
                    call = call.parameters(Parameter::builder().parameter_key(k).use_previous_value(true).build());
                }
            }
            match call.send().await {
                Ok(_) => "updated",
                Err(e) => {
                    let (_, detail) = kind_and_detail(&e);
                    if detail.contains("No updates are to be performed") {
                        "unchanged"
                    } else {
                        return Err(classify(&format!("updating stack {}", req.stack), e));
                    }
                }
            }
        }
    };
    let started = Instant::now();
    loop {
        let stack = describe(clients, &req.stack).await?.ok_or_else(|| {
            Error::new(ErrorKind::NotFound, format!("stack {} vanished while it deployed", req.stack))
        })?;
        let status = stack.stack_status().cloned();
        let text = status.as_ref().map_or("UNKNOWN", |s| s.as_str()).to_string();
        if !text.ends_with("_IN_PROGRESS") {
            if matches!(status, Some(StackStatus::CreateComplete | StackStatus::UpdateComplete)) {
                let (outputs, descriptions) = outputs_of(&stack);
                if clients.endpoint_url.is_some() {
                    close_emulator_groups(clients, &req.stack, &req.template).await?;
                }
                return Ok(Deployed { action, status: text, outputs, descriptions, failed: None });
            }
            let reason = stack.stack_status_reason().unwrap_or("no reason given");
            let failed = format!(
                "stack {} ended {text}: {reason} (its events: aws cloudformation describe-stack-events --stack-name {})",
                req.stack, req.stack
            );
            return Ok(Deployed {
                action,
                status: text,
                outputs: BTreeMap::new(),
                descriptions: BTreeMap::new(),
                failed: Some(failed),
            });
        }
        if started.elapsed() > DEPLOY_DEADLINE {
            return Err(Error::new(
                ErrorKind::Transient,
                format!(
                    "stack {} is still {text} after an hour; `agenteval aws use {}` reads it once it is done",
                    req.stack, req.stack
                ),
            ));
        }
        progress(&format!("stack {} is {text}", req.stack));
        tokio::time::sleep(req.poll).await;
    }
}

/// Reads an existing stack's outputs (`aws use STACK`).
pub async fn outputs(clients: &AwsClients, stack: &str) -> Result<Deployed> {
    let found = describe(clients, stack).await?.ok_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!("no stack {stack} in this account and region (`agenteval aws deploy` creates it)"),
        )
    })?;
    let status = found.stack_status().map(|s| s.as_str().to_string()).unwrap_or_default();
    let (outputs, descriptions) = outputs_of(&found);
    Ok(Deployed { action: "unchanged", status, outputs, descriptions, failed: None })
}

/// On an emulator (an endpoint override), the stack's security groups as CloudFormation makes
/// them on AWS: a group the template gives egress rules has exactly those, not the allow-all
/// rule a new group starts with. moto ignores `SecurityGroupEgress`, which would leave a
/// `no_network` environment open to the internet.
async fn close_emulator_groups(clients: &AwsClients, stack: &str, template: &str) -> Result<()> {
    use aws_sdk_ec2::types::{IpPermission, IpRange, UserIdGroupPair};
    let Ok(doc) = agenteval_core::config::YamlDoc::parse(template) else { return Ok(()) };
    let resources = clients
        .cloudformation
        .list_stack_resources()
        .stack_name(stack)
        .send()
        .await
        .map_err(|e| classify(&format!("listing stack {stack}'s resources"), e))?;
    let physical: BTreeMap<String, String> = resources
        .stack_resource_summaries()
        .iter()
        .filter_map(|r| Some((r.logical_resource_id()?.to_string(), r.physical_resource_id()?.to_string())))
        .collect();
    let Some(declared) = doc.value.get("Resources").and_then(|r| r.as_object()) else { return Ok(()) };
    let allow_all =
        || IpPermission::builder().ip_protocol("-1").ip_ranges(IpRange::builder().cidr_ip("0.0.0.0/0").build()).build();
    for (logical, r) in declared {
        if r.get("Type").and_then(|t| t.as_str()) != Some("AWS::EC2::SecurityGroup") {
            continue;
        }
        let Some(rules) = r.pointer("/Properties/SecurityGroupEgress").and_then(|e| e.as_array()) else { continue };
        let opens = |rule: &serde_json::Value| {
            rule.get("CidrIp").and_then(|c| c.as_str()) == Some("0.0.0.0/0")
                && rule.get("IpProtocol").map(|p| p.to_string().contains("-1")).unwrap_or(false)
        };
        let Some(id) = physical.get(logical) else { continue };
        if rules.iter().any(opens) {
            continue;
        }
        let mut wanted = Vec::new();
        for rule in rules {
            let protocol =
                rule.get("IpProtocol").map(|p| p.as_str().map(str::to_string).unwrap_or_else(|| p.to_string()));
            let port =
                |k: &str| rule.get(k).and_then(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok())).map(|v| v as i32);
            let mut p = IpPermission::builder()
                .set_ip_protocol(protocol)
                .set_from_port(port("FromPort"))
                .set_to_port(port("ToPort"));
            if let Some(c) = rule.get("CidrIp").and_then(|c| c.as_str()) {
                p = p.ip_ranges(IpRange::builder().cidr_ip(c).build());
            }
            if let Some(g) =
                rule.pointer("/DestinationSecurityGroupId/Ref").and_then(|g| g.as_str()).and_then(|g| physical.get(g))
            {
                p = p.user_id_group_pairs(UserIdGroupPair::builder().group_id(g).build());
            }
            wanted.push(p.build());
        }
        tracing::info!("giving {logical} ({id}) the template's egress rules only, as CloudFormation does on AWS");
        clients
            .ec2
            .revoke_security_group_egress()
            .group_id(id)
            .ip_permissions(allow_all())
            .send()
            .await
            .map_err(|e| classify(&format!("closing security group {id}"), e))?;
        if !wanted.is_empty() {
            clients
                .ec2
                .authorize_security_group_egress()
                .group_id(id)
                .set_ip_permissions(Some(wanted))
                .send()
                .await
                .map_err(|e| classify(&format!("setting security group {id}'s egress"), e))?;
        }
    }
    Ok(())
}

/// A stack's outputs by key, and their descriptions.
fn outputs_of(stack: &aws_sdk_cloudformation::types::Stack) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut outputs = BTreeMap::new();
    let mut descriptions = BTreeMap::new();
    for o in stack.outputs() {
        if let (Some(k), Some(v)) = (o.output_key(), o.output_value()) {
            outputs.insert(k.to_string(), v.to_string());
            if let Some(d) = o.description() {
                descriptions.insert(k.to_string(), d.to_string());
            }
        }
    }
    (outputs, descriptions)
}

async fn describe(clients: &AwsClients, stack: &str) -> Result<Option<aws_sdk_cloudformation::types::Stack>> {
    match clients.cloudformation.describe_stacks().stack_name(stack).send().await {
        Ok(out) => Ok(out.stacks().first().cloned().filter(|s| s.stack_status() != Some(&StackStatus::DeleteComplete))),
        Err(e) => {
            let (_, detail) = kind_and_detail(&e);
            if detail.contains("does not exist") {
                Ok(None)
            } else {
                Err(classify(&format!("reading stack {stack}"), e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stacks_set_flags_are_its_settings() {
        let mut outputs = BTreeMap::new();
        outputs.insert(
            "SetFlags".to_string(),
            "--set storage.bundle_root=s3://b/runs --set aws.subnets=[subnet-1,subnet-2] --set aws.cluster=c"
                .to_string(),
        );
        outputs.insert("Cluster".to_string(), "c".to_string());
        assert_eq!(
            settings_of(&outputs, &BTreeMap::new()),
            vec!["storage.bundle_root=s3://b/runs", "aws.subnets=[subnet-1,subnet-2]", "aws.cluster=c"]
        );
        outputs.remove("SetFlags");
        let mut d = BTreeMap::new();
        d.insert("Cluster".to_string(), "aws.cluster".to_string());
        assert_eq!(settings_of(&outputs, &d), vec!["aws.cluster=c"]);
    }

    #[test]
    fn a_profile_name_is_a_file_name() {
        assert!(valid_name("agenteval-prod_2.eu"));
        for bad in ["", "../x", ".hidden", "a/b", "a b"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
