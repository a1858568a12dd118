//! `agenteval aws deploy | use | show`: the stack deployed (or found) and remembered as the
//! stack profile every `--backend aws` command reads.

use std::time::Duration;

use agenteval_aws::AwsSettings;
use agenteval_aws::stack::{self, DeployRequest, StackProfile};
use agenteval_core::Error;
use serde_json::json;

use crate::cli::{AwsCommand, StackArgs};
use crate::{Failure, exit};

/// `infra/agenteval.yaml`, so that a machine with only the binary can deploy.
const TEMPLATE: &str = include_str!("../../../infra/agenteval.yaml");

pub async fn run(command: AwsCommand, quiet: bool) -> Result<u8, Failure> {
    match command {
        AwsCommand::Deploy { stack, template, params, json } => deploy(&stack, template, &params, json, quiet).await,
        AwsCommand::Use { stack, json } => use_stack(&stack, json).await,
        AwsCommand::Show { json } => show(json),
    }
}

fn settings(args: &StackArgs) -> AwsSettings {
    AwsSettings {
        region: args.region.clone(),
        profile: None,
        endpoint_url: args.endpoint_url.clone().or_else(|| std::env::var("AWS_ENDPOINT_URL").ok()),
        emulator_credentials: false,
    }
}

async fn deploy(
    args: &StackArgs,
    template: Option<std::path::PathBuf>,
    params: &[String],
    json: bool,
    quiet: bool,
) -> Result<u8, Failure> {
    let mut parameters = Vec::new();
    for p in params {
        let Some((k, v)) = p.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(Failure {
                code: exit::USAGE,
                error: anyhow::anyhow!("--param {p}: expected KEY=VALUE, such as --param ImageUri=…"),
            });
        };
        parameters.push((k.to_string(), v.to_string()));
    }
    let body = match &template {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure { code: exit::USAGE, error: anyhow::anyhow!("--template {}: {e}", path.display()) })?,
        None => TEMPLATE.to_string(),
    };
    let clients = agenteval_aws::AwsClients::connect(&settings(args)).await;
    let req = DeployRequest { stack: args.stack.clone(), template: body, parameters, poll: Duration::from_secs(5) };
    let show_progress = !json && !quiet;
    let progress = |line: &str| {
        if show_progress {
            eprintln!("{line}");
        }
    };
    if show_progress {
        eprintln!("deploying stack {} ({})", args.stack, clients.region.as_deref().unwrap_or("the default region"));
    }
    let done = stack::deploy(&clients, &req, &progress).await?;
    if let Some(why) = done.failed {
        // The deploy ran and the stack did not come up: an operation that failed (exit 4).
        return Err(Failure { code: exit::FAILED, error: anyhow::anyhow!(why) });
    }
    remember(args, &clients, done, json)
}

async fn use_stack(args: &StackArgs, json: bool) -> Result<u8, Failure> {
    let clients = agenteval_aws::AwsClients::connect(&settings(args)).await;
    let found = stack::outputs(&clients, &args.stack).await?;
    if !found.status.ends_with("_COMPLETE") || found.status.starts_with("DELETE") || found.status.contains("ROLLBACK") {
        return Err(Error::invalid(format!(
            "stack {} is {}, not deployed: `agenteval aws deploy --stack {}` deploys it",
            args.stack, found.status, args.stack
        ))
        .into());
    }
    remember(args, &clients, found, json)
}

/// Writes the profile and says what it holds.
fn remember(
    args: &StackArgs,
    clients: &agenteval_aws::AwsClients,
    done: stack::Deployed,
    json: bool,
) -> Result<u8, Failure> {
    let settings = stack::settings_of(&done.outputs, &done.descriptions);
    if settings.is_empty() {
        return Err(Error::invalid(format!(
            "stack {} has no outputs that are agenteval settings (no `SetFlags`): is it infra/agenteval.yaml's?",
            args.stack
        ))
        .into());
    }
    let profile = StackProfile {
        name: args.profile.clone().unwrap_or_else(|| args.stack.clone()),
        stack: args.stack.clone(),
        region: clients.region.clone(),
        endpoint_url: clients.endpoint_url.clone(),
        status: done.status.clone(),
        outputs: done.outputs,
        settings,
        saved_at: chrono::Utc::now().to_rfc3339(),
    };
    let path = profile.save()?;
    if json {
        say!(
            "{}",
            json!({"stack": profile.stack, "action": done.action, "status": done.status, "profile": profile.name,
                   "file": path, "settings": profile.settings, "outputs": profile.outputs})
        );
    } else {
        say!("stack {} {} ({})", profile.stack, done.action, done.status);
        say!("remembered as stack profile `{}`: {}", profile.name, path.display());
        for s in &profile.settings {
            say!("  {s}");
        }
        say!("every --backend aws command now uses these where its config or flags say nothing");
    }
    Ok(exit::OK)
}

fn show(json: bool) -> Result<u8, Failure> {
    match StackProfile::current()? {
        None => {
            let dir = stack::profiles_dir().map(|d| d.display().to_string()).unwrap_or_else(|| "-".into());
            if json {
                say!("{}", json!({"profile": null, "folder": dir}));
            } else {
                say!("no stack profile in use (folder {dir}): `agenteval aws deploy` or `agenteval aws use STACK`");
            }
            Ok(exit::OK)
        }
        Some((p, path)) => {
            let now = p.settings_now();
            if json {
                say!(
                    "{}",
                    json!({"profile": p.name, "file": path, "stack": p.stack, "region": p.region,
                           "endpoint_url": p.endpoint_url, "status": p.status, "saved_at": p.saved_at,
                           "settings": now, "outputs": p.outputs})
                );
            } else {
                say!("stack profile `{}` ({})", p.name, path.display());
                say!("stack {} ({}), read {}", p.stack, p.status, p.saved_at);
                for s in &now {
                    say!("  {s}");
                }
            }
            Ok(exit::OK)
        }
    }
}
