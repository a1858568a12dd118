//! `agenteval history NAME --task ID`: one task across a name's last nights — its outcome,
//! cost, tokens and why each night, oldest first — from the run index (and each night's bundle
//! for the why of a wrong answer). A night that did not complete is marked as such, never shown
//! as a failure or a zero.

use agenteval_core::history::{Bundles, Night, nights, task_history};
use agenteval_core::model::RunRecord;
use agenteval_core::traits::{Resolver, RunIndex};
use agenteval_core::{Error, TaskId};
use agenteval_engine::controller;

use crate::cli::IndexArgs;
use crate::session::open_index;
use crate::{Failure, exit};

/// Each night's bundle, through the binary's wiring.
struct Wired<'a> {
    resolver: &'a dyn Resolver,
    index: &'a dyn RunIndex,
}

#[async_trait::async_trait]
impl Bundles for Wired<'_> {
    async fn bundle(&self, run: &RunRecord) -> Option<std::sync::Arc<dyn agenteval_core::traits::BundleStore>> {
        controller::locate(self.resolver, self.index, &run.run_id).await.ok().map(|l| l.store)
    }
}

/// The command.
pub async fn history(name: &str, task: &str, last: usize, index: &IndexArgs, json: bool) -> Result<u8, Failure> {
    let task_id: TaskId = task.parse().map_err(|e: Error| Failure { code: exit::USAGE, error: e.into() })?;
    let (wiring, index) = open_index(index).await?;
    let listing = index.list_runs(agenteval_engine::refs::LATEST_WINDOW).await?;
    let runs = nights(&listing, name, last)?;
    let bundles = Wired { resolver: wiring.as_ref(), index: index.as_ref() };
    let out = task_history(index.as_ref(), &bundles, &runs, &task_id).await.map_err(|e| match e.kind() {
        agenteval_core::ErrorKind::NotFound => {
            Error::not_found(format!("task `{task}` is in none of the last {} runs of `{name}`", runs.len()))
        }
        _ => e,
    })?;
    if json {
        say!("{}", serde_json::json!({"name": name, "task": task, "nights": out}));
        return Ok(exit::OK);
    }
    say!("{}", table(&out));
    let judged: Vec<&Night> = out.iter().filter(|n| n.outcome.is_some()).collect();
    let passed = judged.iter().filter(|n| n.outcome == Some("passed")).count();
    let incomplete = out.iter().filter(|n| !n.completed).count();
    let mut line = format!("{task}: passed {passed} of {} night(s) with a result", judged.len());
    if incomplete > 0 {
        line.push_str(&format!("; {incomplete} night(s) did not complete (marked `-`, not counted)"));
    }
    say!("{line}");
    Ok(exit::OK)
}

fn table(nights: &[Night]) -> String {
    use comfy_table::{ContentArrangement, Table, presets::UTF8_HORIZONTAL_ONLY};
    let mut t = Table::new();
    t.load_preset(UTF8_HORIZONTAL_ONLY).set_content_arrangement(ContentArrangement::Dynamic).set_width(80);
    t.set_header(["night", "run", "outcome", "cost $", "tokens", "why"]);
    for n in nights {
        let run =
            if n.completed { n.run_id[..13].to_string() } else { format!("{} ({})", &n.run_id[..13], n.run_status) };
        t.add_row([
            n.created_at.get(..16).unwrap_or(&n.created_at).replace('T', " "),
            run,
            n.outcome.unwrap_or("-").to_string(),
            n.cost_usd.map_or_else(|| "-".into(), |c| format!("{c:.4}")),
            n.tokens.map_or_else(|| "-".into(), |t| t.to_string()),
            n.why.chars().take(60).collect(),
        ]);
    }
    t.to_string()
}
