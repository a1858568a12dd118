//! Run references, as every command and the UI name a run: its id or a unique prefix of it,
//! `latest` (the newest run), `latest:NAME` (the newest complete run of that name) or
//! `baseline:NAME` (the pinned one), resolved through the run index.

use std::str::FromStr;

use agenteval_core::model::RunStatus;
use agenteval_core::traits::RunIndex;
use agenteval_core::{Error, Result, RunId};

/// How many runs `latest:NAME` looks back through.
pub const LATEST_WINDOW: usize = 10_000;

/// A run named on the command line: its id or a unique prefix of it (at least 4 characters),
/// `latest` (the newest run), `latest:NAME` (the newest complete run of that name) or
/// `baseline:NAME` (the pinned one).
pub async fn resolve_ref(index: &dyn RunIndex, reference: &str) -> Result<RunId> {
    resolve_ref_except(index, reference, None).await
}

pub use agenteval_core::model::of_history;

/// The distinct names of the runs of `asked`'s history, newest first.
fn histories<'r>(runs: &'r [agenteval_core::model::RunRecord], asked: &str) -> Vec<&'r str> {
    let mut seen: Vec<&str> = Vec::new();
    for r in runs {
        if of_history(&r.name, asked) && !seen.contains(&r.name.as_str()) {
            seen.push(&r.name);
        }
    }
    seen
}

/// The one name of an agent's runs a config's name stands for; runs of several agents are
/// never taken for one history.
fn one_history(runs: &[agenteval_core::model::RunRecord], asked: &str, how: &str) -> Result<String> {
    match histories(runs, asked).as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(Error::not_found(format!("no complete run named `{asked}` in the index"))),
        many => Err(Error::invalid(format!(
            "`{asked}` names the runs of {} agents, which are never one history: name one, {}",
            many.len(),
            many.iter().map(|h| format!("`{how}:{h}`")).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// A unique prefix of a run id among the runs the index lists.
async fn by_prefix(index: &dyn RunIndex, prefix: &str) -> Result<RunId> {
    let runs = index.list_runs(LATEST_WINDOW).await?;
    let hits: Vec<&RunId> = runs.iter().map(|r| &r.run_id).filter(|id| id.to_string().starts_with(prefix)).collect();
    match hits.as_slice() {
        [one] => Ok(**one),
        [] => Err(Error::not_found(format!("no run id starts with `{prefix}`"))),
        many => {
            let shown: Vec<String> = many.iter().take(5).map(|id| id.to_string()).collect();
            Err(Error::invalid(format!(
                "`{prefix}` is the start of {} run ids ({}{}): give more of it",
                many.len(),
                shown.join(", "),
                if many.len() > 5 { ", …" } else { "" }
            )))
        }
    }
}

/// The history a name means: itself when runs (or a pinned baseline) have that name exactly,
/// else a config's name with its one agent (`nightly` for `nightly [codex · gpt-5]`); a name
/// of several agents' histories is an error naming them.
pub async fn history_name(index: &dyn RunIndex, name: &str) -> Result<String> {
    if index.get_baseline(name).await?.is_some() {
        return Ok(name.to_string());
    }
    let runs = index.list_runs(LATEST_WINDOW).await?;
    if runs.iter().any(|r| r.name == name) {
        return Ok(name.to_string());
    }
    one_history(&runs, name, "baseline")
}

/// Like [`resolve_ref`], but `latest:` skips `except` (a run judged against the latest one
/// before it).
pub async fn resolve_ref_except(index: &dyn RunIndex, reference: &str, except: Option<&RunId>) -> Result<RunId> {
    if let Some(name) = reference.strip_prefix("latest:") {
        let runs = index.list_runs(LATEST_WINDOW).await?;
        let name = match runs.iter().any(|r| r.name == name) {
            true => name.to_string(),
            false => one_history(&runs, name, "latest")?,
        };
        // Only a run that completed can stand for "the latest": an interrupted or failed one
        // would make every comparison against it meaningless.
        return runs
            .iter()
            .find(|r| r.name == name && r.status == RunStatus::Complete && Some(&r.run_id) != except)
            .map(|r| r.run_id)
            .ok_or_else(|| Error::not_found(format!("no complete run named `{name}` in the index")));
    }
    if let Some(name) = reference.strip_prefix("baseline:") {
        if let Some(id) = index.get_baseline(name).await? {
            return Ok(id);
        }
        // A config's name: the baseline of its one agent that has one.
        let runs = index.list_runs(LATEST_WINDOW).await?;
        let mut pinned = Vec::new();
        for h in histories(&runs, name) {
            if let Some(id) = index.get_baseline(h).await? {
                pinned.push((h.to_string(), id));
            }
        }
        return match pinned.as_slice() {
            [(_, id)] => Ok(*id),
            [] => Err(Error::not_found(format!(
                "no baseline pinned for `{name}` (pin one with `agenteval baseline set RUN`)"
            ))),
            many => Err(Error::invalid(format!(
                "`{name}` has baselines for {} agents: name one, {}",
                many.len(),
                many.iter().map(|(h, _)| format!("`baseline:{h}`")).collect::<Vec<_>>().join(", ")
            ))),
        };
    }
    if reference == "latest" {
        return index
            .list_runs(1)
            .await?
            .first()
            .map(|r| r.run_id)
            .ok_or_else(|| Error::not_found("the index has no runs yet"));
    }
    if let Ok(id) = RunId::from_str(reference) {
        return Ok(id);
    }
    if reference.len() >= 4 && reference.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return by_prefix(index, &reference.to_ascii_lowercase()).await;
    }
    Err(Error::invalid(format!(
        "`{reference}` is not a run id (or a prefix of one), `latest`, `latest:NAME` or `baseline:NAME`"
    )))
}
