//! `agenteval gateway serve --config FILE`: the model gateway on its own, for an agent a user is
//! developing: one door (one token), the config's `agent.upstream` behind it with its keys from
//! the backend's secrets, the agent's `limits` as its budget; every call printed as it ends
//! (tokens, cost, latency, answer), recorded to `--record FILE` when the gateway stops, or
//! answered from `--replay FILE`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use agenteval_core::gateway::{Door, DoorSpec, ModelCall, Reach, Replay};
use agenteval_core::secret::Redactor;
use agenteval_core::traits::Resolver as _;
use agenteval_core::{Error, RunId};
use serde_json::json;

use crate::cli::{GatewayCommand, RunConfigArgs};
use crate::session::{config_failure, exe, load_config};
use crate::wiring::Wiring;
use crate::{Failure, exit};

/// `agenteval gateway …`.
pub async fn run(command: GatewayCommand) -> Result<u8, Failure> {
    match command {
        GatewayCommand::Serve { run, listen, record, replay, json } => {
            serve(ServeArgs { run: &run, listen: &listen, record: record.as_deref(), replay: replay.as_ref(), json })
                .await
        }
    }
}

/// What `gateway serve` was asked.
pub struct ServeArgs<'a> {
    pub run: &'a RunConfigArgs,
    pub listen: &'a str,
    pub record: Option<&'a Path>,
    pub replay: Option<&'a PathBuf>,
    pub json: bool,
}

pub async fn serve(args: ServeArgs<'_>) -> Result<u8, Failure> {
    let loaded = load_config(&args.run.config, &args.run.overrides()).map_err(config_failure)?;
    let config = &loaded.config;
    let upstream = config.agent.upstream().ok_or_else(|| {
        Error::invalid(format!(
            "{}: the agent has no `upstream`: name where its calls go (agent.upstream.openai / .anthropic, docs/agents.md)",
            args.run.config.display()
        ))
    })?;
    let addr: SocketAddr = args
        .listen
        .parse()
        .map_err(|e| Error::invalid(format!("--listen {}: not an address and port ({e})", args.listen)))?;
    let replay = match args.replay {
        Some(file) => Some(Replay {
            cassette: std::fs::read(file).map_err(|e| Error::io(format!("reading {}", file.display()), e))?,
            strict: true,
        }),
        None => None,
    };
    let redactor = Redactor::new();
    // A strict replay needs no key.
    let keys = if replay.is_none() { keys(config, upstream, &redactor).await? } else { Vec::new() };
    let gateway_config = Wiring::new(exe()?, config.aws.as_ref()).gateway_config(upstream, keys).await?;
    let gateway = agenteval_gateway::Gateway::start_at(gateway_config, addr).await?;
    let limits = config.agent.limits();
    let mut door = gateway.open_door(DoorSpec {
        run_id: RunId::new(),
        task_id: "gateway".parse()?,
        attempt: 1,
        max_tokens: limits.max_tokens,
        max_cost_usd: limits.max_cost_usd,
        replay,
        record: args.record.is_some(),
        redactor,
        models: agenteval_engine::agents::access::door_models(config),
        // The agent being developed meets the provider's refusals as it will in a run.
        retry: true,
        run_budget: None,
        rate: None,
        usage: None,
    });
    // Calls are written to the record as they end, not held.
    let mut recording = args.record.map(open_record).transpose()?;
    let (openai, anthropic) = door.base_urls(Reach::Host)?;
    let token = door.token().expose().to_string();
    if args.json {
        say!(
            "{}",
            json!({"listening": gateway.addr().to_string(), "openai_base_url": openai, "anthropic_base_url": anthropic, "token": token})
        );
    } else {
        say!("the model gateway listens at http://{} (Ctrl-C stops it)", gateway.addr());
        say!("point the agent at it:");
        say!("  export OPENAI_BASE_URL={openai} OPENAI_API_KEY={token}");
        say!("  export ANTHROPIC_BASE_URL={anthropic} ANTHROPIC_API_KEY={token}");
    }
    let (mut calls, mut tokens, mut cost, mut unknown) = (0u32, 0u64, 0.0f64, false);
    // One listener for the whole loop: a Ctrl-C that comes while a call is being written must
    // not fall between two listeners and be lost.
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            call = door.next_call() => {
                calls += 1;
                tokens += call.input_tokens + call.output_tokens;
                cost += call.cost_usd.unwrap_or(0.0);
                unknown |= call.cost_usd.is_none();
                say!("{}", if args.json { serde_json::to_string(&call).expect("calls serialize") } else { line(&call) });
                if let Some(f) = recording.as_mut() {
                    std::io::Write::write_all(f, &door.take_cassette())
                        .map_err(|e| Error::io("writing the record", e))?;
                }
            }
            _ = &mut stop => break,
        }
    }
    door.close();
    if let Some(f) = recording.as_mut() {
        // Calls that ended as the gateway stopped.
        std::io::Write::write_all(f, &door.take_cassette()).map_err(|e| Error::io("writing the record", e))?;
    }
    if !args.json {
        let cost = if unknown { format!("${cost:.4} (partly unknown)") } else { format!("${cost:.4}") };
        let recorded = args.record.map(|f| format!(", recorded in {}", f.display())).unwrap_or_default();
        say!("{calls} calls, {tokens} tokens, {cost}{recorded}");
    }
    Ok(exit::OK)
}

/// The provider keys the gateway holds, fetched from the config's secret store (each one
/// redacted from what is shown).
async fn keys(
    config: &agenteval_core::config::RunConfig,
    upstream: &agenteval_core::config::Upstream,
    redactor: &Redactor,
) -> Result<Vec<(&'static str, agenteval_core::secret::Secret)>, Failure> {
    let wiring = Wiring::new(exe()?, config.aws.as_ref());
    let secrets = wiring.secrets(config).await?;
    let mut keys = Vec::new();
    for (which, name, required) in agenteval_engine::agents::access::upstream_secrets(upstream) {
        match secrets.fetch(&name).await {
            Ok(s) => {
                redactor.add(&s);
                keys.push((which, s));
            }
            Err(e) if !required && e.kind() == agenteval_core::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(keys)
}

/// The record file, owner-only (0600): a cassette holds every prompt and answer (the key is
/// never in it). An existing file keeps its mode through `open`, so it is set.
fn open_record(file: &Path) -> agenteval_core::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)
        .map_err(|e| Error::io(format!("creating {}", file.display()), e))?;
    std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| Error::io(format!("making {} owner-only", file.display()), e))?;
    Ok(f)
}

/// One call, in a line.
fn line(c: &ModelCall) -> String {
    let cost = c.cost_usd.map_or_else(|| "cost unknown".to_string(), |d| format!("${d:.4}"));
    let what = match &c.refused {
        Some(r) => format!("refused: {}", r.reason()),
        None if !(200..300).contains(&c.status) => format!("HTTP {}", c.status),
        None => format!("-> {}", crate::output::middle_cut(&c.answer.replace('\n', "⏎"), 60)),
    };
    format!(
        "call {:<3} {} {}{}  {}+{} tok  {cost}  {} ms  {what}",
        c.call,
        c.wire,
        c.model,
        if c.stream { " (stream)" } else { "" },
        c.input_tokens,
        c.output_tokens,
        c.latency_ms
    )
}
