//! `agenteval analyze RUN --judge FILE`: a pinned model's reading of why each of a run's failed
//! tasks failed (the agent's failures: wrong answers, errors, limits), grouped by the cause it
//! names. Every call is recorded in the output, so `--replay DIR` makes the same analysis with
//! no key and no call. Infrastructure failures say nothing about the agent and are grouped
//! apart without asking.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agenteval_core::model::Outcome;
use agenteval_core::{Error, layout};
use agenteval_engine::bundle::{Metadata, read_json};
use agenteval_engine::controller;
use serde::Serialize;

use crate::cli::IndexArgs;
use crate::judge_door::JudgeDoor;
use crate::session::open_index;
use crate::{Failure, exit};

/// The analysis prompt shipped (kept in every output as `prompt.md`).
const PROMPT: &str = include_str!("analyze_prompt.md");

/// The group infrastructure failures go to, without asking the model.
const INFRA: &str = "infrastructure (not the agent)";

/// One failed task as the model read it.
#[derive(Debug, Serialize)]
pub struct Read {
    pub task_id: String,
    pub outcome: &'static str,
    pub cause: String,
    pub why: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: Option<f64>,
}

/// Tasks of one cause.
#[derive(Debug, Serialize)]
pub struct Group {
    pub cause: String,
    pub tasks: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Analysis {
    pub run_id: String,
    pub model: String,
    pub prompt_sha256: String,
    pub failed: usize,
    /// Failed tasks left out past `--max-tasks`.
    pub not_read: Vec<String>,
    pub groups: Vec<Group>,
    pub tasks: Vec<Read>,
    /// What the model's calls cost; `None` when its price is unknown.
    pub cost_usd: Option<f64>,
    pub replayed_from: Option<String>,
}

/// A cause as a group's key: the same words in any case, spacing or closing punctuation are one
/// cause.
fn cause_key(cause: &str) -> String {
    let words: Vec<String> = cause.split_whitespace().map(str::to_lowercase).collect();
    let joined = words.join(" ");
    let trimmed = joined.trim_end_matches(['.', '!', ';', ':', ',']).trim();
    if trimmed.is_empty() { "unknown".into() } else { trimmed.chars().take(80).collect() }
}

/// Groups the tasks by cause, largest first (then by name).
fn grouped(tasks: &[Read]) -> Vec<Group> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in tasks {
        by.entry(t.cause.clone()).or_default().push(t.task_id.clone());
    }
    let mut groups: Vec<Group> = by.into_iter().map(|(cause, tasks)| Group { cause, tasks }).collect();
    groups.sort_by(|a, b| b.tasks.len().cmp(&a.tasks.len()).then_with(|| a.cause.cmp(&b.cause)));
    groups
}

pub struct Options<'a> {
    pub judge: &'a Path,
    pub out: Option<PathBuf>,
    pub replay: Option<&'a Path>,
    pub max_tasks: usize,
    pub json: bool,
}

// Long: one pass over the run's attempts, reading each failed one, then the output written.
pub async fn analyze(run: &str, index: &IndexArgs, o: Options<'_>) -> Result<u8, Failure> {
    let judge = crate::judge_door::load_judge(o.judge, "analyze")?;
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    let out = o.out.unwrap_or_else(|| PathBuf::from(format!("analysis-{run_id}")));
    let replayed_calls = o.replay.map(|d| d.join("calls"));
    let door = JudgeDoor::open(&judge, &out.join("calls"), replayed_calls.as_deref(), "analyze").await?;
    let done = crate::interchange::finished(store, &run_id, &meta, &located.config).await?;
    let failed: Vec<_> = done.attempts.iter().filter(|a| !a.result.passed).collect();
    let (mut tasks, mut not_read) = (Vec::new(), Vec::new());
    let mut cost = Some(0.0);
    let mut asked = 0;
    for a in &failed {
        let outcome = a.result.outcome();
        let task_id = a.task.id.to_string();
        if outcome == Outcome::Infra {
            let why = a.result.why();
            tasks.push(Read { task_id, outcome: outcome.as_str(), cause: INFRA.into(), why, ..Read::empty() });
            continue;
        }
        if asked >= o.max_tasks {
            not_read.push(task_id);
            continue;
        }
        asked += 1;
        let vars: BTreeMap<&str, String> = [
            ("task_id", task_id.clone()),
            ("instruction", crate::interchange::instruction(&a.task)),
            ("outcome", outcome.as_str().to_string()),
            ("why", a.result.why()),
            ("trajectory", crate::certify::trajectory_text(&a.exported.trajectory)),
        ]
        .into_iter()
        .collect();
        let stem = crate::interchange::file_stem(&task_id);
        let answer = door.ask(&stem, crate::certify::render(PROMPT, &vars), 512).await?;
        let parsed = agenteval_llm::extract_json(&answer.text);
        let field = |k: &str| parsed.as_ref().and_then(|v| v[k].as_str()).map(str::to_string);
        let (cause, why) = match (field("cause"), field("why")) {
            (Some(c), why) => (cause_key(&c), why.unwrap_or_default()),
            _ => {
                ("unknown".into(), format!("no readable cause: {}", answer.text.chars().take(200).collect::<String>()))
            }
        };
        cost = cost.zip(answer.cost_usd).map(|(a, b)| a + b);
        tasks.push(Read {
            task_id,
            outcome: outcome.as_str(),
            cause,
            why,
            input_tokens: answer.usage.input_tokens,
            output_tokens: answer.usage.output_tokens,
            cost_usd: answer.cost_usd,
        });
    }
    let analysis = Analysis {
        run_id: run_id.to_string(),
        model: door.model.clone(),
        prompt_sha256: agenteval_engine::bundle::sha256_hex(PROMPT.as_bytes()),
        failed: failed.len(),
        groups: grouped(&tasks),
        not_read,
        tasks,
        cost_usd: cost,
        replayed_from: o.replay.map(|p| p.display().to_string()),
    };
    let io = |e: std::io::Error| Error::io(format!("writing {}", out.display()), e);
    std::fs::create_dir_all(&out).map_err(io)?;
    std::fs::write(out.join("prompt.md"), PROMPT).map_err(io)?;
    let text = serde_json::to_string_pretty(&analysis).expect("serializes");
    std::fs::write(out.join("analysis.json"), &text).map_err(io)?;
    if o.json {
        say!("{text}");
    } else {
        print(&analysis, &out);
    }
    Ok(exit::OK)
}

impl Read {
    fn empty() -> Self {
        Read {
            task_id: String::new(),
            outcome: "",
            cause: String::new(),
            why: String::new(),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: Some(0.0),
        }
    }
}

fn print(a: &Analysis, out: &Path) {
    let cost = a.cost_usd.map_or_else(|| "cost unknown".to_string(), |c| format!("${c:.4}"));
    say!(
        "analysis of {}: {} failed task(s) in {} cause(s) (judge {}, {cost})",
        a.run_id,
        a.failed,
        a.groups.len(),
        a.model
    );
    let by_id: BTreeMap<&str, &Read> = a.tasks.iter().map(|t| (t.task_id.as_str(), t)).collect();
    for g in &a.groups {
        say!("{}", crate::output::wrapped(&format!("  {} ({}): ", g.cause, g.tasks.len()), &g.tasks.join(", "), 80));
        for t in g.tasks.iter().take(3) {
            let why = by_id.get(t.as_str()).map(|r| r.why.as_str()).unwrap_or("");
            say!("{}", crate::output::wrapped(&format!("    {t}: "), why, 80));
        }
    }
    if !a.not_read.is_empty() {
        say!("  {} failed task(s) not read (past --max-tasks)", a.not_read.len());
    }
    say!("written to {} (analysis.json; the calls in calls/: --replay {} repeats it)", out.display(), out.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_in_any_case_spacing_or_closing_punctuation_are_one_group_largest_first() {
        assert_eq!(cause_key("  Wrong   Answer. "), "wrong answer");
        assert_eq!(cause_key("..."), "unknown");
        let read = |id: &str, cause: &str| Read { task_id: id.into(), cause: cause_key(cause), ..Read::empty() };
        let tasks = [read("a", "tool misuse"), read("b", "Wrong answer"), read("c", "wrong answer!")];
        let groups = grouped(&tasks);
        assert_eq!(groups[0].cause, "wrong answer");
        assert_eq!(groups[0].tasks, ["b", "c"]);
        assert_eq!(groups[1].tasks, ["a"]);
    }
}
