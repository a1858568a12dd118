//! One function per command: turn parsed arguments into engine calls and print the outcome.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agenteval_core::config::{LoadedConfig, Origin};
use agenteval_core::layout;
use agenteval_core::location::{BundleRoot, IndexLocation};
use agenteval_core::model::{RunStatus, RunSummary};
use agenteval_core::traits::{Resolver, worker_exit};
use agenteval_core::{Error, RunId};
use agenteval_engine::bundle::{self, Metadata, read_json};
use agenteval_engine::controller::start::Start;
use agenteval_engine::controller::{self, RunOutcome};
use agenteval_engine::resolve::store_from_bundle_uri;
use agenteval_judge::compare::CompareOptions;
use agenteval_judge::judgement::Judgement;
use serde_json::json;

use crate::cli::{
    AgentsCommand, Cli, Command, ConfigCommand, DatasetsCommand, EnvCommand, ImagesCommand, IndexArgs, IndexCommand,
    RunConfigArgs, RunsCommand,
};
use crate::judging;
use crate::output::{self};
use crate::session::{
    config_failure, controller_options, exe, load_config, open_index, print_outcome, record_json, start,
};
use crate::telemetry::{Role, Settings, Telemetry};
use crate::wiring::{self, Wiring};
use crate::{Failure, exit};

// Long: one arm per command, each a call; split, the table of commands would be in two places.
pub async fn run(cli: Cli, telemetry: &Telemetry) -> Result<u8, Failure> {
    let quiet = cli.quiet;
    match cli.command {
        Command::Submit { mut run, naming, json, baseline, gates, cassettes, limit, junit, matrix } => {
            if let Some(n) = limit {
                run.sets.push(format!("benchmark.filter.limit={n}"));
            }
            if naming.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                return Err(Failure { code: exit::USAGE, error: anyhow::anyhow!("--name: a run needs a name") });
            }
            if !matrix.is_empty() {
                return crate::matrix::submit_matrix(&run, &naming, &matrix, json, &cassettes, quiet, telemetry).await;
            }
            let how = Judge { baseline: baseline.as_deref(), gates: gates.as_deref(), junit: junit.as_deref() };
            submit(&run, &naming, json, how, &cassettes, quiet, telemetry).await
        }
        Command::Rerun { run, all, index, json, .. } => rerun(&run, all, &index, json, quiet, telemetry).await,
        Command::Regrade { run, sets, index, json } => {
            crate::regrade::regrade(&run, &sets, &index, json, quiet, telemetry).await
        }
        Command::Replay { run, with_config, index, json, check } => {
            use crate::replay::{Recording, ReplayOptions};
            let (wiring, recording) = match Recording::folder(&run) {
                Some(dir) => (Wiring::new(exe()?, None), Recording::Folder(dir)),
                None => {
                    let (wiring, index) = open_index(&index).await?;
                    (wiring, Recording::Indexed(index, run))
                }
            };
            let o = ReplayOptions { with_config: with_config.as_deref(), check, json, quiet };
            crate::replay::replay(wiring, recording, o, telemetry).await
        }
        Command::Status { run, index, json } => status(&run, &index, json).await,
        Command::Ui { index, host, port, token_file, no_token, token, gates, open } => {
            let token = crate::ui::TokenSource { file: token_file, none: no_token, argument: token };
            crate::ui::serve(&index, &host, port, token, gates.as_deref(), open).await
        }
        Command::Runs { command: RunsCommand::List { index, name, limit, json } } => {
            runs_list(&index, name.as_deref(), limit, json).await
        }
        Command::Compare {
            base,
            cand,
            set,
            against,
            gates,
            record,
            pairwise,
            json,
            out,
            junit,
            resamples,
            seed,
            index,
        } => {
            let out = match json {
                true => crate::cli::ReportArgs { format: Some(agenteval_judge::report::Format::Json), ..out },
                false => out,
            };
            // The judge's file is checked before anything is opened, like a gates file.
            let pairwise = pairwise.as_deref().map(judging::load_pairwise).transpose()?;
            let (wiring, index) = open_index(&index).await?;
            let (resolver, index) = (wiring.as_ref(), index.as_ref());
            let opts = CompareOptions { resamples: resamples.max(1), seed, ..Default::default() };
            if let Some(set) = set {
                return judging::compare_set_cmd(resolver, index, &set, against.as_deref(), &out, opts).await;
            }
            // clap requires both without `--set`.
            let (base, cand) = (base.unwrap_or_default(), cand.unwrap_or_default());
            let pairwise = pairwise.as_ref();
            judging::compare_cmd(
                resolver,
                index,
                &base,
                &cand,
                gates.as_deref(),
                &out,
                resamples,
                seed,
                record,
                pairwise,
                junit.as_deref(),
            )
            .await
        }
        Command::Baseline { command } => judging::baseline(command).await,
        Command::History { name, task, last, index, json } => {
            crate::history::history(&name, &task, last, &index, json).await
        }
        Command::Runs {
            command: RunsCommand::Show { run, index, tasks, failed, tag, tool, ended_by, why, full, json },
        } => {
            let (wiring, index) = open_index(&index).await?;
            let all =
                tasks || failed || full || !tag.is_empty() || tool.is_some() || ended_by.is_some() || why.is_some();
            let ended_by = ended_by.as_deref().and_then(agenteval_core::model::TerminatedBy::parse);
            let filter = crate::inspect::TaskFilter { all, failed, tags: tag, tool, ended_by, why, full };
            crate::inspect::runs_show(wiring.as_ref(), index.as_ref(), &run, &filter, json).await
        }
        Command::Show { run, task, index, full, json } => {
            let (wiring, index) = open_index(&index).await?;
            crate::inspect::show_task(wiring.as_ref(), index.as_ref(), &run, &task, full, json).await
        }
        Command::Cancel { run, index, wait, json } => cancel(&run, &index, wait, json).await,
        Command::Resume { run, index, json, force, sets } => {
            resume(&run, &index, json, force, &sets, quiet, telemetry).await
        }
        Command::Report { run, index, json, junit, out } => report(&run, &index, json, junit.as_deref(), &out).await,
        Command::Export { run, index, to: crate::cli::ExportTarget::Swebench, out, json, .. } => {
            crate::export::swebench(&run, &index, out, json).await
        }
        Command::Export { run, index, to: crate::cli::ExportTarget::Atif, out, json, .. } => {
            crate::export::atif(&run, &index, out, json).await
        }
        Command::Export { run, index, to: crate::cli::ExportTarget::Otlp, out, json, .. } => {
            crate::export::otlp(&run, &index, out, json).await
        }
        Command::Export { run, index, to: crate::cli::ExportTarget::Harbor, out, json, .. } => {
            crate::export::harbor(&run, &index, out, json).await
        }
        Command::Export {
            run, index, to: crate::cli::ExportTarget::Mlflow, tracking_uri, experiment, json, ..
        } => crate::export::export(&run, &index, tracking_uri.as_deref(), experiment.as_deref(), json).await,
        Command::Analyze { run, judge, out, replay, max_tasks, index, json } => {
            let o = crate::analyze::Options { judge: &judge, out, replay: replay.as_deref(), max_tasks, json };
            crate::analyze::analyze(&run, &index, o).await
        }
        Command::Certify { check: Some(dir), json, .. } => crate::certify::check(&dir, json),
        Command::Certify { run, judge, out, judge_prompt, replay, exploits, index, json, .. } => {
            let (run, judge) = (run.unwrap_or_default(), judge.unwrap_or_default());
            let o = crate::certify::Options {
                out,
                judge: &judge,
                judge_prompt: judge_prompt.as_deref(),
                replay: replay.as_deref(),
                exploits: exploits.as_deref(),
                json,
            };
            crate::certify::certify(&run, &index, o).await
        }
        Command::Import { command: crate::cli::ImportCommand::Harbor { job, tasks, name, index, json } } => {
            crate::import::harbor(&job, tasks.as_deref(), name.as_deref(), &index, json).await
        }
        Command::Import { command: crate::cli::ImportCommand::Otlp { file, name, index, json } } => {
            crate::import_otlp::otlp(&file, name.as_deref(), &index, json).await
        }
        Command::ValidateBundle { path, index, json } => validate_bundle(&path, &index, json).await,
        Command::Config { command: ConfigCommand::Validate { file, sets, json } } => config_validate(&file, sets, json),
        Command::Doctor { run, json, probe, build } => doctor(&run, json, probe, build, telemetry).await,
        Command::Images { command: ImagesCommand::Build { run, push, json } } => {
            crate::images::build(&run, push.as_deref(), json).await
        }
        Command::Gateway { command } => crate::gateway::run(command).await,
        Command::Agents { command: AgentsCommand::List { json } } => Ok(crate::agents::list(json)),
        Command::Audit { run, exploits, json, out } => {
            crate::audit::audit(&run, &exploits, json, out.as_deref(), quiet, telemetry).await
        }
        Command::Prices { config, json } => crate::prices::list(config.as_deref(), json),
        Command::Datasets { command: DatasetsCommand::List { registry, json } } => {
            crate::agents::datasets(registry.as_deref(), json)
        }
        Command::Aws { command } => crate::stack::run(command, quiet).await,
        Command::Index { command: IndexCommand::Rebuild { bundles, index, json } } => {
            index_rebuild(&bundles, &index, json).await
        }
        Command::Worker { job: Some(job), .. } => Ok(worker(&job, telemetry).await),
        // `main` serves `--fork-server` before any runtime exists.
        Command::Worker { job: None, .. } => {
            Err(Failure { code: exit::USAGE, error: anyhow::anyhow!("`worker` needs --job FILE") })
        }
        // Handled in `main` before the runtime starts.
        Command::AgentSandbox { .. } => Err(Error::internal("agent-sandbox runs before the runtime").into()),
        Command::Env { command: EnvCommand::Exec { timeout, workdir, command } } => {
            env_exec(timeout, workdir, &command)
        }
        Command::Env { command: EnvCommand::Serve } => env_serve().await,
    }
}

/// What `submit` judges the finished run against: `--baseline` and `--gates`.
struct Judge<'a> {
    baseline: Option<&'a str>,
    gates: Option<&'a Path>,
    junit: Option<&'a Path>,
}

async fn submit(
    args: &RunConfigArgs,
    naming: &crate::cli::Naming,
    json: bool,
    Judge { baseline, gates, junit }: Judge<'_>,
    cassettes: &crate::cli::CassetteArgs,
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    let mut loaded = load_config(&args.config, &args.overrides()).map_err(config_failure)?;
    loaded.config.name = naming.name(&loaded.config.name, &loaded.config.agent);
    loaded.agent_flags = args.agent_flags();
    // A bad gates file is a usage error before anything runs, like a bad config.
    let gates_file = gates;
    let gates = gates.map(agenteval_judge::gates::load_gates).transpose().map_err(config_failure)?;
    if let (Some(g), Some(file)) = (&gates, gates_file)
        && g.metrics.contains_key("cost_per_task")
        && let Some((_, model, field)) = agenteval_llm::unpriced_models(&loaded.config).into_iter().next()
    {
        return Err(Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!(
                "{}: `cost_per_task` is gated, but no price is known for `{model}`: its cost would be unknown and \
                 the gate could never pass; give its price in {field} (`agenteval prices --config` lists the prices)",
                file.display()
            ),
        });
    }
    let wiring = Wiring::new(exe()?, loaded.config.aws.as_ref());
    let how =
        Start { cassettes: cassettes.cassettes.as_deref().map(|d| (d, cassettes.cassette_mode)), preflight: true };
    let strict_replay = matches!(how.cassettes, Some((_, agenteval_llm::CassetteMode::Replay)));
    let ready = start(&wiring, loaded, how).await?;
    let mut opts = controller_options(ready.config(), wiring.clone(), json, quiet, telemetry).await?;
    opts.rounds = crate::adaptive::Adaptive::for_submit(wiring.clone(), ready.config(), gates_file, baseline).await?;
    let outcome = ready.submit(opts).await?;
    let loaded_config = ready.config();
    if strict_replay && let Some(dir) = &cassettes.cassettes {
        stale_recordings(wiring.as_ref(), loaded_config, &outcome, dir, json, quiet).await?;
    }
    if baseline.is_none() && gates.is_none() {
        let code = print_outcome(&outcome, loaded_config, json, quiet)?;
        if crate::ci::wanted(junit) {
            let index = wiring.index(&loaded_config.storage.index_location()).await?;
            crate::ci::after(wiring.as_ref(), index.as_ref(), &outcome.run_id, junit, None, true).await?;
        }
        return Ok(code);
    }
    let index = wiring.index(&loaded_config.storage.index_location()).await?;
    let shown = crate::cli::ReportArgs { format: Some(agenteval_judge::report::Format::Text), output: None };
    if !json {
        print_outcome(&outcome, loaded_config, false, quiet)?;
        say!("");
    }
    let judged = judging::judge_run(
        wiring.as_ref(),
        index.as_ref(),
        baseline,
        &outcome.run_id,
        gates.as_ref(),
        (!json).then_some(&shown),
        agenteval_judge::compare::CompareOptions::default(),
        true,
        true,
        None,
    )
    .await?;
    let code = if outcome.status != RunStatus::Complete { exit::INCOMPLETE } else { judged.code };
    let shown = Some((judged.comparison.as_ref(), judged.verdict.as_ref()));
    crate::ci::after(wiring.as_ref(), index.as_ref(), &outcome.run_id, junit, shown, true).await?;
    if json {
        say!(
            "{}",
            json!({
                "run_id": outcome.run_id,
                "status": outcome.status,
                "bundle": outcome.bundle_uri,
                "exit_code": code,
                "summary": outcome.summary,
                "comparison": judged.comparison,
                "verdict": judged.verdict,
                "outcome": judged.outcome,
                "promoted": judged.promoted,
            })
        );
    }
    Ok(code)
}

/// A strict replay whose recordings did not match is not a result: the run is shown as usual,
/// then `submit` fails with exit 3 naming the cassette folder (its tasks are `replay_miss`,
/// counted as infra and left out of comparisons, never a regression).
async fn stale_recordings(
    wiring: &dyn Resolver,
    config: &agenteval_core::config::RunConfig,
    outcome: &RunOutcome,
    dir: &Path,
    json: bool,
    quiet: bool,
) -> Result<(), Failure> {
    let index = wiring.index(&config.storage.index_location()).await?;
    let tasks = index.list_tasks(&outcome.run_id).await?;
    let stale: Vec<&str> = tasks
        .iter()
        .filter(|t| t.terminated_by == Some(agenteval_core::model::TerminatedBy::ReplayMiss))
        .map(|t| t.task_id.as_str())
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    print_outcome(outcome, config, json, quiet)?;
    let first: Vec<&str> = stale.iter().take(3).copied().collect();
    Err(Failure {
        code: exit::INCOMPLETE,
        error: anyhow::anyhow!(
            "{} of {} tasks have no matching recording in {} ({}{}): the recording is stale; record it again with --cassette-mode record, or use --cassette-mode replay-or-live",
            stale.len(),
            tasks.len(),
            dir.display(),
            first.join(", "),
            if stale.len() > first.len() { ", …" } else { "" }
        ),
    })
}

async fn status(run: &str, index: &IndexArgs, json: bool) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index).await?;
    let run_id = judging::resolve_ref(index.as_ref(), run).await?;
    let r =
        index.get_run(&run_id).await?.ok_or_else(|| Error::not_found(format!("run {run_id} is not in the index")))?;
    let counts = index.task_counts(&run_id).await?;
    let alive = controller::controller_alive(&r);
    // Why a run ended early is in its metadata (the index says only that it did); a judged
    // run's gates are in its `comparison.json`.
    // Only when there is something to read there: `status` is polled, and on S3 locating a run
    // costs requests.
    let wanted = r.verdict.is_some() || !matches!(r.status, RunStatus::Running | RunStatus::Complete);
    let located = if wanted { controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await.ok() } else { None };
    let reason = match (r.status, &located) {
        (RunStatus::Running | RunStatus::Complete, _) | (_, None) => None,
        (_, Some(l)) => {
            read_json::<Metadata>(l.store.as_ref(), &run_id, layout::METADATA).await.ok().and_then(|m| m.reason)
        }
    };
    let judged = match (&located, r.verdict) {
        (Some(l), Some(_)) => Judgement::read(l.store.as_ref(), &run_id).await.ok().flatten(),
        _ => None,
    };
    if json {
        say!("{}", json!({"run": record_json(&r), "tasks": counts, "reason": reason}));
        return Ok(exit::OK);
    }
    let mut status = output::status_word(r.status);
    if r.status == RunStatus::Running && !alive {
        status.push_str(" (controller gone: `agenteval resume` finishes it)");
    }
    say!("run       {} ({})", r.run_id, r.name);
    say!("status    {status}");
    if let Some(why) = &reason {
        say!("why       {why}");
    }
    if let Some(c) = &r.concurrency {
        let at = if r.status == RunStatus::Running { "" } else { " at the end" };
        match &c.why {
            Some(why) => say!("jobs      at most {} of {} in flight{at}: {why}", c.limit, c.max),
            None => say!("jobs      at most {} in flight (backend.max_concurrent_jobs){at}", c.limit),
        }
    }
    say!(
        "tasks     {} total: {} finished, {} running, {} waiting, {} cancelled",
        counts.total,
        counts.finished(),
        counts.running,
        counts.pending + counts.queued,
        counts.cancelled
    );
    let rate = if counts.finished() == 0 { 0.0 } else { 100.0 * counts.passed as f64 / counts.finished() as f64 };
    say!(
        "finished  passed {} failed {} errored {} infra {} ({rate:.1}% passed)",
        counts.passed,
        counts.failed,
        counts.errored,
        counts.infra
    );
    let cost = match (counts.cost_unknown, counts.cost_usd) {
        (0, d) => format!("${d:.4}"),
        (n, d) if d > 0.0 => format!(">=${d:.4} ({n} task{} unknown)", if n == 1 { "" } else { "s" }),
        _ => "unknown".into(),
    };
    say!("cost      {cost}, {} tokens", counts.tokens);
    for l in judged.iter().flat_map(output::verdict_lines) {
        say!("{l}");
    }
    say!("bundle    {}", r.bundle_uri);
    Ok(exit::OK)
}

async fn runs_list(index: &IndexArgs, name: Option<&str>, limit: usize, json: bool) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index).await?;
    let runs = match name {
        // A name's history: look further back, then keep `limit` of that name.
        Some(n) => index
            .list_runs(limit.saturating_mul(50).max(1_000))
            .await?
            .into_iter()
            .filter(|r| agenteval_engine::refs::of_history(&r.name, n))
            .take(limit)
            .collect(),
        None => index.list_runs(limit).await?,
    };
    let mut passed = Vec::with_capacity(runs.len());
    for r in &runs {
        passed.push(passed_of(wiring.as_ref(), index.as_ref(), r).await);
    }
    if json {
        let rows = runs.iter().zip(&passed).map(|(r, p)| {
            let mut v = record_json(r);
            if let Some((passed, finished)) = p {
                v["tasks_passed"] = json!(passed);
                v["tasks_finished"] = json!(finished);
                v["pass_rate"] = json!(if *finished == 0 { 0.0 } else { *passed as f64 / *finished as f64 });
            }
            v
        });
        say!("{}", serde_json::Value::Array(rows.collect()));
        return Ok(exit::OK);
    }
    if runs.is_empty() {
        say!("no runs yet");
        return Ok(exit::OK);
    }
    // 80 columns: the id's first 13 characters (its creation to the millisecond; any unique
    // prefix names the run), the name cut to fit, a judged run's baseline under its verdict.
    let mut t = output::table();
    t.set_header(vec!["run", "name", "status", "verdict", "passed", "created"]);
    for (r, p) in runs.iter().zip(&passed) {
        let id = r.run_id.to_string();
        t.add_row(vec![
            short_id(&id),
            name_cell(&r.name, &r.agent),
            if r.status == RunStatus::Running && !controller::controller_alive(r) {
                "running (gone)".to_string()
            } else {
                r.status.as_str().to_string()
            },
            match (r.verdict, r.baseline) {
                (Some(v), Some(b)) => format!("{}\nvs {}", v.as_str(), short_id(&b.to_string())),
                (Some(v), None) => format!("{}\nalone", v.as_str()),
                (None, _) => "-".to_string(),
            },
            match p {
                Some((passed, _)) => format!("{passed}/{}", r.tasks_total),
                None => format!("?/{}", r.tasks_total),
            },
            r.created_at.format("%m-%d %H:%M").to_string(),
        ]);
    }
    let t = output::compact(t);
    say!("{t}");
    Ok(exit::OK)
}

/// A run's name in `runs list`, 15 columns wide (the table stays within 80 with a judged run's
/// baseline beside it): the name, a set member's combination (`[…]`) on a line of its own, then
/// the agent and model, each cut to fit.
fn name_cell(name: &str, agent: &str) -> String {
    let fit = |s: &str| -> String {
        if s.chars().count() > 15 { s.chars().take(14).chain(['…']).collect() } else { s.to_string() }
    };
    let mut lines: Vec<String> = match name.split_once(" [") {
        Some((base, member)) => vec![fit(base), fit(&format!("[{member}"))],
        None => vec![fit(name)],
    };
    if !agent.is_empty() {
        lines.push(fit(agent));
    }
    lines.join("\n")
}

/// A run id's first 13 characters: its creation time to the millisecond, a prefix that names it.
fn short_id(id: &str) -> String {
    id.chars().take(13).collect()
}

/// How many of a run's tasks passed and finished: from the index where its counts are cheap
/// (SQLite), else from a sealed bundle's summary; `None` when neither can say.
async fn passed_of(
    resolver: &dyn Resolver,
    index: &dyn agenteval_core::traits::RunIndex,
    r: &agenteval_core::model::RunRecord,
) -> Option<(u64, u64)> {
    if index.counts_are_cheap() {
        return index.task_counts(&r.run_id).await.ok().map(|c| (c.passed, c.finished()));
    }
    if r.status == RunStatus::Running {
        return None;
    }
    let (store, run) = store_from_bundle_uri(resolver, &r.bundle_uri).await.ok()?;
    let s: RunSummary = read_json(store.as_ref(), &run, layout::SUMMARY).await.ok()?;
    Some((s.passed, s.tasks_finished))
}

/// `agenteval env exec`: one command in the task's environment, through the worker's socket.
fn env_exec(timeout: Option<f64>, workdir: Option<String>, command: &[String]) -> Result<u8, Failure> {
    use agenteval_core::environment::{ENV_SOCKET_VAR, ExecOutput, WireExec};
    use std::io::{BufRead as _, Write as _};
    let socket = std::env::var_os(ENV_SOCKET_VAR).ok_or_else(|| Failure {
        code: exit::USAGE,
        error: anyhow::anyhow!("no task environment here: {ENV_SOCKET_VAR} is not set (run from a `command` agent)"),
    })?;
    let mut stream = std::os::unix::net::UnixStream::connect(&socket)
        .map_err(|e| Error::io(format!("reaching the task's environment at {}", socket.to_string_lossy()), e))?;
    let request = WireExec { command: command.join(" "), timeout_seconds: timeout, workdir };
    let mut line = serde_json::to_vec(&request).expect("a request serializes");
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| Error::io("sending the command", e))?;
    let mut answer = String::new();
    std::io::BufReader::new(stream).read_line(&mut answer).map_err(|e| Error::io("reading the answer", e))?;
    let out: ExecOutput = serde_json::from_str(&answer)
        .map_err(|e| Error::new(agenteval_core::ErrorKind::Corrupt, format!("the environment's answer: {e}")))?;
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    Ok(match (out.timed_out, out.exit_code) {
        (true, _) => 124,
        (false, Some(c)) => u8::try_from(c).unwrap_or(1),
        (false, None) => 125,
    })
}

async fn cancel(run: &str, index: &IndexArgs, wait: u64, json: bool) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index).await?;
    let run_id = judging::resolve_ref(index.as_ref(), run).await?;
    let status = controller::cancel(wiring.as_ref(), index, &run_id, Duration::from_secs(wait)).await?;
    if json {
        say!("{}", json!({"run_id": run_id, "status": status}));
    } else {
        say!("run {run_id}: {}", output::status_word(status));
    }
    Ok(exit::OK)
}

/// `rerun RUN --failed`: a new run of the tasks of RUN that did not pass.
async fn rerun(
    run: &str,
    all: bool,
    index: &IndexArgs,
    json: bool,
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    use agenteval_core::model::{Outcome, TaskState, TerminatedBy};
    let (wiring, index) = open_index(index).await?;
    let run_id = judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    crate::session::not_imported(located.store.as_ref(), &run_id, "rerun").await?;
    let mut ids: Vec<String> = index
        .list_tasks(&run_id)
        .await?
        .into_iter()
        .filter(|t| match t.state {
            _ if all => true,
            TaskState::Completed => {
                let ended = t.terminated_by.unwrap_or(TerminatedBy::Completed);
                Outcome::of(t.passed.unwrap_or(false), ended) != Outcome::Passed
            }
            TaskState::Failed => true,
            _ => false,
        })
        .map(|t| t.task_id.base().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        if json {
            say!("{}", json!({"run_id": run_id, "rerun": false, "tasks": 0}));
        } else {
            say!("run {run_id} has no task that did not pass: nothing to rerun");
        }
        return Ok(exit::OK);
    }
    let mut config = located.config.clone();
    *config.benchmark.filter_mut() = agenteval_core::config::TaskFilter { ids, tags: vec![], limit: None };
    config.name = format!("{} (rerun)", config.name);
    let path = PathBuf::from(&located.record.bundle_uri).join(layout::CONFIG);
    // The recorded config already holds what `--agent` and `--model` changed.
    let loaded = LoadedConfig { config, path, agent_flags: vec![] };
    let ready = start(&wiring, loaded, Start { preflight: true, ..Start::default() }).await?;
    let mut opts = controller_options(ready.config(), wiring.clone(), json, quiet, telemetry).await?;
    opts.rerun_of = Some(run_id);
    let outcome = ready.submit(opts).await?;
    print_outcome(&outcome, ready.config(), json, quiet)
}

async fn resume(
    run: &str,
    index: &IndexArgs,
    json: bool,
    force: bool,
    sets: &[String],
    quiet: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    let (wiring, index) = open_index(index).await?;
    let run_id = judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    if located.record.status == RunStatus::Complete {
        // Nothing to do, and nothing is touched: not the bundle, not the index.
        if json {
            say!("{}", json!({"run_id": run_id, "status": located.record.status, "resumed": false}));
        } else {
            say!("run {run_id} is complete: nothing to resume");
        }
        return Ok(exit::OK);
    }
    let config = controller::resume_config(&located.config, sets).map_err(config_failure)?;
    // Tasks given up on infrastructure run again: for the agent that is one more try, which a
    // reader of the night's figures should know of.
    let again = index
        .list_tasks(&run_id)
        .await
        .map(|ts| ts.iter().filter(|t| t.state == agenteval_core::model::TaskState::Failed).count())
        .unwrap_or(0);
    if again > 0 && !quiet {
        eprintln!(
            "{again} task(s) given up on infrastructure run again: each is another attempt of the agent (the earlier one stays in the bundle)"
        );
    }
    let mut opts = controller_options(&config, wiring.clone(), json, quiet, telemetry).await?;
    opts.rounds = crate::adaptive::Adaptive::for_resume(wiring, index.clone(), &run_id, &config).await?;
    let outcome = controller::resume(index, &run_id, force, sets, opts).await?;
    print_outcome(&outcome, &config, json, quiet)
}

async fn report(
    run: &str,
    index: &IndexArgs,
    json: bool,
    junit: Option<&Path>,
    out: &crate::cli::ReportArgs,
) -> Result<u8, Failure> {
    use agenteval_judge::report::Format;
    let format = if json { Format::Json } else { out.format()? };
    // A saved results JSON is rendered as it is, without the index or the bundle.
    if run.ends_with(".json") && Path::new(run).is_file() {
        if junit.is_some() {
            return Err(Failure {
                code: exit::USAGE,
                error: anyhow::anyhow!("--junit needs the run's tasks: give the run, not {run}"),
            });
        }
        return report_from_file(Path::new(run), format, out);
    }
    let (wiring, index) = open_index(index).await?;
    let run_id = judging::resolve_ref(index.as_ref(), run).await?;
    if let Some(path) = junit {
        crate::ci::report_junit(wiring.as_ref(), index.as_ref(), &run_id, path).await?;
    }
    if format == Format::Html {
        return judging::report_html(wiring.as_ref(), index.as_ref(), &run_id, out).await;
    }
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    // Recorded after the seal, so not in the sealed summary or report.md: added to each format.
    let judged = Judgement::read(store, &run_id).await?;
    // A sealed bundle has its summary and report.md; a partial one gets them from what is
    // there, and a terminal report always reads why each task did not pass.
    let summarized = || async {
        let table = bundle::TaskTable::read(store, &run_id).await?;
        bundle::summarize(store, &run_id, table.ids(), meta.status, bundle::Lines::Skip).await
    };
    let shown = match format {
        Format::Json => {
            let s = if meta.sealed {
                read_json::<RunSummary>(store, &run_id, layout::SUMMARY).await?
            } else {
                summarized().await?.0
            };
            let mut doc = serde_json::to_value(&s).expect("serializes");
            doc["judgement"] = serde_json::to_value(&judged).expect("serializes");
            // What `report FILE.json` needs to render this again without the bundle.
            doc["metadata"] = serde_json::to_value(&meta).expect("serializes");
            format!("{}\n", serde_json::to_string_pretty(&doc).expect("serializes"))
        }
        Format::Md => {
            let mut md = if meta.sealed {
                String::from_utf8_lossy(&store.get(&run_id, layout::REPORT).await?).into_owned()
            } else {
                let (s, out) = summarized().await?;
                agenteval_engine::report::render(&meta, &s, &out.failures)
            };
            if let Some(j) = &judged {
                md.push_str(&j.md());
            }
            md
        }
        Format::Text => {
            let (s, out) = summarized().await?;
            let mut text = output::report_text(&meta, &s, &out.failures);
            for l in judged.iter().flat_map(output::verdict_lines) {
                text.push_str(&l);
                text.push('\n');
            }
            text
        }
        Format::Html => unreachable!("an HTML report is written above"),
    };
    judging::emit(out, &shown)?;
    Ok(exit::OK)
}

/// `report FILE.json`: a report rendered again from a saved results JSON (`report RUN --json`
/// or `submit --json`), without the index or the bundle: the summary, and the verdict when the
/// run was judged. (Each failed task's why is in the bundle only.)
fn report_from_file(
    path: &Path,
    format: agenteval_judge::report::Format,
    out: &crate::cli::ReportArgs,
) -> Result<u8, Failure> {
    use agenteval_judge::report::Format;
    let usage = |msg: String| Failure { code: exit::USAGE, error: anyhow::anyhow!(msg) };
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| usage(format!("{file}: cannot read: {e}")))?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| usage(format!("{file}: not JSON: {e}")))?;
    let not_results = |e: String| {
        usage(format!("{file}: not a saved results JSON (`report RUN --json` or `submit --json` writes one): {e}"))
    };
    let summary_doc = if doc["summary"].is_object() { doc["summary"].clone() } else { doc.clone() };
    let s: RunSummary = serde_json::from_value(summary_doc).map_err(|e| not_results(e.to_string()))?;
    let judged: Option<Judgement> = match (&doc["judgement"], &doc["verdict"]) {
        (j, _) if j.is_object() => Some(serde_json::from_value(j.clone()).map_err(|e| not_results(e.to_string()))?),
        (_, v) if v.is_object() => {
            let verdict = serde_json::from_value(v.clone()).map_err(|e| not_results(e.to_string()))?;
            let comparison = serde_json::from_value(doc["comparison"].clone()).unwrap_or(None);
            let outcome = serde_json::from_value(doc["outcome"].clone()).unwrap_or(None);
            Some(Judgement { outcome, ..Judgement::new(comparison, verdict, agenteval_core::model::RunVerdict::Fail) })
        }
        _ => None,
    };
    let meta: Metadata = match serde_json::from_value(doc["metadata"].clone()) {
        Ok(m) => m,
        Err(_) => Metadata {
            sealed: true,
            ..Metadata::new(
                s.run_id,
                doc["name"].as_str().unwrap_or(&format!("run {}", s.run_id)),
                s.status,
                s.tasks_total,
                chrono::Utc::now(),
            )
        },
    };
    let shown = match format {
        Format::Json => {
            let mut v = serde_json::to_value(&s).expect("serializes");
            v["judgement"] = serde_json::to_value(&judged).expect("serializes");
            v["metadata"] = serde_json::to_value(&meta).expect("serializes");
            format!("{}\n", serde_json::to_string_pretty(&v).expect("serializes"))
        }
        Format::Md => {
            let mut md = agenteval_engine::report::render(&meta, &s, &[]);
            if let Some(j) = &judged {
                md.push_str(&j.md());
            }
            md
        }
        Format::Text => {
            let mut text = output::report_text(&meta, &s, &[]);
            for l in judged.iter().flat_map(output::verdict_lines) {
                text.push_str(&l);
                text.push('\n');
            }
            text
        }
        Format::Html => {
            return Err(usage(format!(
                "an HTML report needs the run's tasks: `agenteval report {} --format html` (from the index), or --format md from {file}",
                s.run_id
            )));
        }
    };
    judging::emit(out, &shown)?;
    Ok(exit::OK)
}

async fn validate_bundle(path: &str, index: &IndexArgs, json: bool) -> Result<u8, Failure> {
    let abs = if path.contains("://") {
        path.to_string()
    } else if Path::new(path).exists() {
        std::path::absolute(path).map(|p| p.display().to_string()).unwrap_or(path.to_string())
    } else {
        // Not a folder here: a run reference, whose bundle the index knows.
        let not_here = |why: String| Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!("no bundle folder `{path}`, and no run it names: {why}"),
        };
        let (_, idx) = open_index(index).await.map_err(|f| not_here(f.error.to_string()))?;
        let run = judging::resolve_ref(idx.as_ref(), path).await.map_err(|f| not_here(f.error.to_string()))?;
        idx.get_run(&run).await?.ok_or_else(|| Error::not_found(format!("run {run} is not in the index")))?.bundle_uri
    };
    let wiring = Wiring::new(exe()?, None);
    let (store, run_id) = store_from_bundle_uri(wiring.as_ref(), &abs).await?;
    let v = bundle::validate(store.as_ref(), &run_id).await?;
    if json {
        say!("{}", json!({"bundle": abs, "valid": v.is_valid(), "validation": v}));
    } else {
        for w in &v.warnings {
            say!("warning: {w}");
        }
        for p in &v.problems {
            say!("problem: {p}");
        }
        if v.is_valid() {
            say!(
                "valid: {abs} ({} files checked, {} task results, status {})",
                v.files_checked,
                v.tasks_with_results,
                v.status.map(|s| s.as_str()).unwrap_or("unknown")
            );
        } else {
            say!("invalid: {abs}: {} problem(s)", v.problems.len());
        }
    }
    Ok(if v.is_valid() { exit::OK } else { exit::CHECK_FAILED })
}

fn config_validate(file: &Path, sets: Vec<String>, json: bool) -> Result<u8, Failure> {
    match load_config(file, &sets) {
        Ok(loaded) if !agenteval_engine::benchmarks::unreadable_tasks(&loaded.config).is_empty() => {
            // The config is sound, but tasks of its benchmark would end `infra` unread.
            let broken = agenteval_engine::benchmarks::unreadable_tasks(&loaded.config);
            if json {
                let problems: Vec<_> = broken
                    .iter()
                    .map(|(task, why)| json!({"file": file, "field": "/benchmark/path", "task": task, "message": why}))
                    .collect();
                say!("{}", json!({"valid": false, "file": file, "problems": problems}));
                return Ok(exit::USAGE);
            }
            let n = broken.len();
            let mut text = format!(
                "{} has {n} task{} that cannot be read (a run would end {} infra and run the rest):",
                file.display(),
                if n == 1 { "" } else { "s" },
                if n == 1 { "it" } else { "them" }
            );
            for (task, why) in &broken {
                text.push_str(&format!("\n  task {task}: {why}"));
            }
            Err(Failure { code: exit::USAGE, error: anyhow::anyhow!(text) })
        }
        Ok(loaded) => {
            if json {
                say!("{}", json!({"valid": true, "file": file, "config": loaded.resolved()}));
            } else {
                let c = &loaded.config;
                say!(
                    "{} is valid: run `{}`, benchmark {}, agent {}, backend {}",
                    file.display(),
                    c.name,
                    c.benchmark.kind(),
                    c.agent.kind(),
                    c.backend.id
                );
            }
            Ok(exit::OK)
        }
        Err(e) => {
            if json {
                let problems: Vec<_> = e
                    .problems
                    .iter()
                    .map(|p| {
                        let (line, column, set) = match &p.origin {
                            Origin::File { line, column } => (Some(*line), Some(*column), None),
                            Origin::Override(s) => (None, None, Some(s.clone())),
                            Origin::Deployed { set, .. } => (None, None, Some(set.clone())),
                            Origin::Unknown => (None, None, None),
                        };
                        let from = match &p.origin {
                            Origin::Deployed { from, .. } => Some(from.clone()),
                            _ => None,
                        };
                        json!({"file": e.file, "line": line, "column": column, "set": set, "from": from, "field": p.pointer, "message": p.message})
                    })
                    .collect();
                say!("{}", json!({"valid": false, "file": file, "problems": problems}));
                Ok(exit::USAGE)
            } else {
                Err(config_failure(e))
            }
        }
    }
}

async fn doctor(
    args: &RunConfigArgs,
    json: bool,
    probe: bool,
    build: bool,
    telemetry: &Telemetry,
) -> Result<u8, Failure> {
    let loaded = load_config(&args.config, &args.overrides()).map_err(config_failure)?;
    let wiring = Wiring::new(exe()?, loaded.config.aws.as_ref());
    let mut checks = wiring::doctor::run(&wiring, &loaded.config, build).await;
    if probe {
        checks.push(probe_agent(args, telemetry).await?);
    }
    let ok = checks.iter().all(|c| c.ok);
    if json {
        say!("{}", json!({"ok": ok, "checks": checks}));
    } else {
        for c in &checks {
            say!("{} {:<40} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail);
        }
        say!("{}", if ok { "everything a run needs is in place" } else { "fix the failed checks before submitting" });
    }
    Ok(if ok { exit::OK } else { exit::USAGE })
}

/// `doctor --probe`: one real run of the benchmark's first task, on the local backend, into a
/// folder removed afterwards; the check passes when the agent ran and was graded (right or
/// wrong), and fails with what the task said otherwise.
async fn probe_agent(args: &RunConfigArgs, telemetry: &Telemetry) -> Result<agenteval_core::traits::Check, Failure> {
    let dir = tempfile::Builder::new()
        .prefix("agenteval-probe-")
        .tempdir()
        .map_err(|e| Error::io("cannot create a folder for the probe", e))?;
    let root = dir.path().display().to_string();
    let mut sets = args.overrides();
    sets.extend([
        "backend.id=local".to_string(),
        "benchmark.filter.limit=1".to_string(),
        format!("storage.bundle_root={root}"),
        format!("storage.index={root}/index.sqlite"),
        "name=doctor-probe".to_string(),
    ]);
    let loaded = load_config(&args.config, &sets).map_err(config_failure)?;
    let wiring = Wiring::new(exe()?, None);
    let index_at = loaded.config.storage.index_location();
    let name = "probe: the agent on the first task".to_string();
    // No pre-flight: what would fail is what the probe reports.
    let ready = match start(&wiring, loaded, Start::default()).await {
        Ok(r) => r,
        Err(f) => return Ok(agenteval_core::traits::Check { name, ok: false, detail: f.error.to_string() }),
    };
    let opts = controller_options(ready.config(), wiring.clone(), true, true, telemetry).await?;
    let outcome = match ready.submit(opts).await {
        Ok(o) => o,
        Err(e) => return Ok(agenteval_core::traits::Check { name, ok: false, detail: e.to_string() }),
    };
    let index = wiring.index(&index_at).await?;
    let tasks = index.list_tasks(&outcome.run_id).await?;
    let Some(task) = tasks.first() else {
        return Ok(agenteval_core::traits::Check { name, ok: false, detail: "the benchmark has no task".into() });
    };
    let s = &outcome.summary;
    let (ok, detail) = if s.passed + s.failed == 1 {
        let verdict = if s.passed == 1 { "passed" } else { "graded, not passed" };
        (true, format!("task {}: the agent ran and answered ({verdict})", task.task_id))
    } else {
        let why = task.detail.clone().unwrap_or_else(|| "no detail".into());
        let hint = match &task.fault {
            Some(f) => format!(" — {} (fix `{}`: {})", f.describe(), f.field(), f.fix()),
            None => String::new(),
        };
        (false, format!("task {}: {why}{hint}", task.task_id))
    };
    Ok(agenteval_core::traits::Check { name, ok, detail })
}

async fn index_rebuild(bundles: &str, args: &IndexArgs, json: bool) -> Result<u8, Failure> {
    let root: BundleRoot = bundles.parse()?;
    let (wiring, at) = if let Some(i) = &args.index {
        (Wiring::new(exe()?, None), i.display().to_string().parse::<IndexLocation>()?)
    } else if let Some(c) = &args.config {
        let cfg = load_config(c, &[]).map_err(config_failure)?.config;
        (Wiring::new(exe()?, cfg.aws.as_ref()), cfg.storage.index_location())
    } else {
        match &root {
            BundleRoot::Local(dir) => (Wiring::new(exe()?, None), IndexLocation::Sqlite(dir.join("index.sqlite"))),
            BundleRoot::S3 { .. } => {
                return Err(Error::invalid("an s3:// bundle root needs --index dynamodb://TABLE").into());
            }
        }
    };
    if let BundleRoot::Local(dir) = &root
        && !dir.is_dir()
    {
        return Err(Error::not_found(format!("no bundle folder at {}", dir.display())).into());
    }
    let store = wiring.store(&root).await?;
    let index = wiring.create_index(&at).await?;
    let rebuilt = agenteval_engine::rebuild::rebuild_index(store.as_ref(), index.as_ref()).await?;
    if json {
        say!(
            "{}",
            json!({"index": at.to_string(), "added": rebuilt.added.iter().map(|(r, n)| json!({"run_id": r, "tasks_finished": n})).collect::<Vec<_>>(), "kept": rebuilt.kept, "skipped": rebuilt.skipped.iter().map(|(f, why)| json!({"folder": f, "reason": why})).collect::<Vec<_>>()})
        );
    } else {
        for (run, n) in &rebuilt.added {
            say!("added  {run}  ({n} finished tasks)");
        }
        for (folder, why) in &rebuilt.skipped {
            say!("skipped {folder}: {why}");
        }
        say!(
            "{}: {} runs added, {} already there, {} skipped",
            at,
            rebuilt.added.len(),
            rebuilt.kept.len(),
            rebuilt.skipped.len()
        );
    }
    Ok(if rebuilt.skipped.is_empty() { exit::OK } else { exit::FAILED })
}

/// `env serve`: this container (a task's image, on a fleet) served as the task's environment to
/// the worker that launched it. The link's token is this process's only secret: it makes itself
/// non-dumpable first, so the agent's commands (root here too) cannot read it from its memory or
/// `/proc/PID/environ`, and its commands get only their own variables.
async fn env_serve() -> Result<u8, Failure> {
    agenteval_engine::isolation::reap::close_to_same_user();
    agenteval_engine::isolation::reap::own_descendants();
    let var = |name: &str| {
        std::env::var(name).map_err(|_| Failure {
            code: exit::USAGE,
            error: anyhow::anyhow!("`env serve` is started by a fleet's environment task, which sets {name}"),
        })
    };
    let (dial, id, token) =
        (var(agenteval_envlink::DIAL_ENV)?, var(agenteval_envlink::ID_ENV)?, var(agenteval_envlink::TOKEN_ENV)?);
    // Its commands start through this binary, which keeps them from tracing another process.
    if let Ok(exe) = std::env::current_exe() {
        agenteval_engine::isolation::sandbox::set_launcher(exe);
    }
    let here = Arc::new(agenteval_engine::environments::here::HereEnvironment::new());
    agenteval_envlink::dial_and_serve(&dial, &id, &token, here).await?;
    Ok(exit::OK)
}

async fn worker(job: &str, telemetry: &Telemetry) -> u8 {
    // Everything an agent leaves behind (a `setsid` child included) becomes this process's to
    // kill when its task ends.
    agenteval_engine::isolation::reap::own_descendants();
    // Workers are configured by their environment alone (the controller forwards its settings).
    telemetry.connect(&Settings::resolve(None), Role::Worker);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("cannot find own executable: {e}");
            return worker_exit::FAILED as u8;
        }
    };
    // A worker knows only its job's location: AWS settings come from its environment, which
    // the controller's backend set (region, endpoint) and its task role completes.
    agenteval_engine::isolation::sandbox::set_launcher(exe.clone());
    let wiring = Wiring::new(exe, None);
    // The handlers are installed now, not when the job first polls `cancel`: a SIGTERM that
    // arrived between a task's start and that first poll would kill the worker outright, its
    // task's span unflushed.
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    };
    let cancel = async move {
        match signals {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    // A bundle on another machine (S3) gets the job's log from the worker itself, as the local
    // backend's redirect gives it locally: every few seconds while it runs, and at its end.
    let remote = job.split_once("/jobs/").is_some_and(|(bundle, _)| {
        agenteval_core::location::BundleRoot::split_bundle_uri(bundle).is_ok_and(|(root, _)| !root.is_local())
    });
    let upload = if remote {
        crate::telemetry::capture_log();
        LogUpload::start(wiring.as_ref(), job).await
    } else {
        None
    };
    let code = agenteval_engine::worker::run_job(job, wiring.as_ref(), Some(telemetry.journal()), cancel).await as u8;
    if let Some(u) = upload {
        u.finish().await;
    }
    code
}

/// Keeps `jobs/<job>/attempt-<n>/worker.log` in the bundle up to date with the captured log.
struct LogUpload {
    store: Arc<dyn agenteval_core::traits::BundleStore>,
    run: RunId,
    path: String,
    task: tokio::task::JoinHandle<()>,
}

/// Whether the bundle of `run` is sealed (its metadata says so).
async fn sealed(store: &dyn agenteval_core::traits::BundleStore, run: &RunId) -> bool {
    read_json::<Metadata>(store, run, layout::METADATA).await.is_ok_and(|m| m.sealed)
}

/// How often a worker's log reaches a remote bundle while the job runs.
const LOG_UPLOAD_EVERY: Duration = Duration::from_secs(5);

impl LogUpload {
    async fn start(resolver: &dyn Resolver, job_uri: &str) -> Option<LogUpload> {
        let bytes = agenteval_engine::resolve::read_bundle_file(resolver, job_uri).await.ok()?;
        let spec: agenteval_core::model::JobSpec = serde_json::from_slice(&bytes).ok()?;
        let (store, run) = store_from_bundle_uri(resolver, &spec.bundle_uri).await.ok()?;
        let path = layout::job_log(&spec.job_id, spec.attempt);
        let (s, p) = (store.clone(), path.clone());
        let task = tokio::spawn(async move {
            let mut sent = 0;
            loop {
                tokio::time::sleep(LOG_UPLOAD_EVERY).await;
                let log = crate::telemetry::captured_log();
                if log.len() != sent && !sealed(s.as_ref(), &run).await && s.put(&run, &p, &log).await.is_ok() {
                    sent = log.len();
                }
            }
        });
        Some(LogUpload { store, run, path, task })
    }

    async fn finish(self) {
        self.task.abort();
        // A bundle sealed meanwhile (a stopped worker outliving its run) keeps what its
        // manifest says.
        if sealed(self.store.as_ref(), &self.run).await {
            return;
        }
        let log = crate::telemetry::captured_log();
        if let Err(e) = self.store.put(&self.run, &self.path, &log).await {
            eprintln!("cannot write the job's log to its bundle: {e}");
        }
    }
}
