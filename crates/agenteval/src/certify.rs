//! `agenteval certify RUN`: one sealed package a leaderboard can check — each task attempt's
//! ATIF trajectory, the run as a Harbor job, the tamper audit per task (and the exploit
//! battery's row where `agenteval audit` ran it), the digests of every input, the metered cost
//! per task, and a pinned judge's review of every passing trial (recorded, so it replays
//! without a key) — with a manifest of every file's sha256. `certify --check DIR` checks a
//! package offline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agenteval_core::config::JudgeConfig;
use agenteval_core::model::{TaskResult, TaskSpec};
use agenteval_core::{Error, layout};
use agenteval_engine::bundle::{self, Metadata, read_json};
use agenteval_engine::controller;
use agenteval_interchange::atif;
use agenteval_interchange::certified::{
    self, Audit, CERTIFICATE, Certificate, CertifiedTask, MANIFEST, Review, SCHEMA, task_path,
};
use serde_json::{Value, json};

use crate::cli::IndexArgs;
use crate::judge_door::JudgeDoor;
use crate::session::open_index;
use crate::{Failure, exit};

/// The review prompt shipped: `--judge-prompt FILE` replaces it.
pub const DEFAULT_PROMPT: &str = include_str!("certify_prompt.md");

/// The variables a review prompt may use.
pub const PROMPT_VARIABLES: &[&str] = &["task_id", "instruction", "trajectory", "grading", "verdict"];

/// Most characters of one step's text in the trajectory a judge is shown.
const STEP_CHARS: usize = 600;
/// Most characters of the whole trajectory a judge is shown (its end is kept: how it finished).
const TRAJECTORY_CHARS: usize = 16_000;

fn usage(msg: String) -> Failure {
    Failure { code: exit::USAGE, error: anyhow::anyhow!(msg) }
}

/// A prompt template read and checked: every `{{name}}` is one of [`PROMPT_VARIABLES`]; every
/// unknown one is named with its line and column, all at once.
pub fn load_prompt(path: Option<&Path>) -> Result<(String, String), Failure> {
    let (text, file) = match path {
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| usage(format!("{}: cannot read: {e}", p.display())))?,
            p.display().to_string(),
        ),
        None => (DEFAULT_PROMPT.to_string(), "the shipped review prompt".to_string()),
    };
    let mut problems = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        let mut col = 0;
        while let Some(at) = rest.find("{{") {
            let after = &rest[at + 2..];
            let Some(end) = after.find("}}") else {
                problems.push(format!("{file}:{}:{}: `{{{{` is not closed", n + 1, col + at + 1));
                break;
            };
            let name = after[..end].trim();
            if !PROMPT_VARIABLES.contains(&name) {
                problems.push(format!(
                    "{file}:{}:{}: unknown variable `{name}` (a review prompt may use {})",
                    n + 1,
                    col + at + 1,
                    PROMPT_VARIABLES.iter().map(|v| format!("{{{{{v}}}}}")).collect::<Vec<_>>().join(", ")
                ));
            }
            col += at + 2 + end + 2;
            rest = &after[end + 2..];
        }
    }
    if !problems.is_empty() {
        return Err(usage(problems.join("\n")));
    }
    Ok((text, file))
}

pub(crate) fn render(template: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find("}}").unwrap_or(0);
        out.push_str(vars.get(after[..end].trim()).map(String::as_str).unwrap_or(""));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The judge's settings: an `llm_pass_fail` evaluator's (model, endpoint fields, secrets).
pub fn load_judge(path: &Path) -> Result<JudgeConfig, Failure> {
    crate::judge_door::load_judge(path, "certify")
}

/// The trajectory as a judge reads it: each step's text, calls and results, cut to size.
pub(crate) fn trajectory_text(t: &atif::Trajectory) -> String {
    let cut = |s: &str| -> String {
        if s.chars().count() <= STEP_CHARS {
            s.to_string()
        } else {
            format!("{}…", s.chars().take(STEP_CHARS).collect::<String>())
        }
    };
    let mut out = String::new();
    for s in t.steps.iter().skip(1) {
        if let Some(m) = s.message.as_str().filter(|m| !m.trim().is_empty()) {
            out.push_str(&format!("[{} {}] {}\n", s.source, s.step_id, cut(m)));
        }
        for c in s.tool_calls.iter().flatten() {
            out.push_str(&format!(
                "[call {}] {}\n",
                c.function_name,
                cut(&Value::Object(c.arguments.clone()).to_string())
            ));
        }
        for r in s.observation.iter().flat_map(|o| &o.results) {
            let text = r.content.as_ref().map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string));
            out.push_str(&format!("[result] {}\n", cut(&text.unwrap_or_default())));
        }
    }
    if out.is_empty() {
        return "(the agent left no trace)".into();
    }
    let n = out.chars().count();
    if n > TRAJECTORY_CHARS {
        out = format!(
            "… (its first {} characters left out)\n{}",
            n - TRAJECTORY_CHARS,
            out.chars().skip(n - TRAJECTORY_CHARS).collect::<String>()
        );
    }
    out
}

fn grading_text(r: &TaskResult) -> String {
    let mut g: String = r.scores.iter().map(|s| format!("- {}: {}\n", s.evaluator_id, s.reason)).collect();
    if let Some(rw) = &r.rewards {
        g.push_str(&format!("- rewards: {}\n", serde_json::to_string(rw).unwrap_or_default()));
    }
    if r.tampered.is_empty() {
        g.push_str("- tamper audit: the agent changed no file its grading reads\n");
    } else {
        g.push_str(&format!("- tamper audit: the agent changed {} file(s) its grading reads\n", r.tampered.len()));
    }
    g
}

/// The reviewer: the judge's model, live and recorded, or answered from a package's recording.
struct Reviewer {
    door: JudgeDoor,
    prompt: String,
    prompt_sha256: String,
}

impl Reviewer {
    async fn new(judge: &JudgeConfig, prompt: String, out: &Path, replay: Option<&Path>) -> Result<Self, Failure> {
        let prompt_sha256 = bundle::sha256_hex(prompt.as_bytes());
        let recorded = replay.map(|pkg| pkg.join("reviews/calls"));
        let door = JudgeDoor::open(judge, &out.join("reviews/calls"), recorded.as_deref(), "certify").await?;
        Ok(Reviewer { door, prompt, prompt_sha256 })
    }

    /// Reviews one passing attempt.
    async fn review(&self, task: &TaskSpec, r: &TaskResult, t: &atif::Trajectory) -> Result<Review, Failure> {
        let vars: BTreeMap<&str, String> = [
            ("task_id", task.id.to_string()),
            ("instruction", crate::interchange::instruction(task)),
            ("trajectory", trajectory_text(t)),
            ("grading", grading_text(r)),
            ("verdict", if r.passed { "passed".to_string() } else { "not passed".to_string() }),
        ]
        .into_iter()
        .collect();
        let stem = crate::interchange::file_stem(task.id.as_str());
        let answer = self.door.ask(&stem, render(&self.prompt, &vars), 1024).await?;
        let said = answer.text;
        let parsed = agenteval_llm::extract_json(&said);
        let earned = parsed.as_ref().and_then(|v| v["earned"].as_bool());
        let why = parsed.as_ref().and_then(|v| v["why"].as_str().map(str::to_string)).unwrap_or_else(|| {
            format!("the judge gave no readable verdict: {}", said.chars().take(300).collect::<String>())
        });
        Ok(Review {
            task_id: task.id.to_string(),
            earned,
            why,
            model: self.door.model.clone(),
            prompt_sha256: self.prompt_sha256.clone(),
            input_tokens: answer.usage.input_tokens,
            output_tokens: answer.usage.output_tokens,
            cost_usd: answer.cost_usd,
        })
    }
}

fn write(out: &Path, name: &str, bytes: &[u8]) -> Result<(), Failure> {
    certified::write(out, name, bytes)
        .map(|_| ())
        .map_err(|e| Error::io(format!("writing {}", out.join(name).display()), e).into())
}

fn json_bytes(v: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec_pretty(v).expect("serializes")
}

/// The exploit battery's rows by task, from `agenteval audit --out DIR`'s `audit.json`.
fn exploit_rows(path: Option<&Path>) -> Result<BTreeMap<String, Value>, Failure> {
    let Some(p) = path else { return Ok(BTreeMap::new()) };
    let v: Value =
        serde_json::from_slice(&std::fs::read(p).map_err(|e| usage(format!("{}: cannot read: {e}", p.display())))?)
            .map_err(|e| usage(format!("{}: not an audit.json ({e})", p.display())))?;
    let rows =
        v["tasks"].as_array().ok_or_else(|| usage(format!("{}: not an audit.json (no `tasks`)", p.display())))?;
    Ok(rows.iter().filter_map(|t| Some((t["task_id"].as_str()?.to_string(), t.clone()))).collect())
}

/// Options of `certify RUN`.
pub struct Options<'a> {
    pub out: Option<PathBuf>,
    pub judge: &'a Path,
    pub judge_prompt: Option<&'a Path>,
    pub replay: Option<&'a Path>,
    pub exploits: Option<&'a Path>,
    pub json: bool,
}

/// `certify RUN`.
// Long: the package's parts in the order a reader checks them, each a few lines.
pub async fn certify(run: &str, index: &IndexArgs, o: Options<'_>) -> Result<u8, Failure> {
    let judge = load_judge(o.judge)?;
    let (prompt, _) = load_prompt(o.judge_prompt)?;
    let exploits = exploit_rows(o.exploits)?;
    let (wiring, index) = open_index(index).await?;
    let run_id = crate::judging::resolve_ref(index.as_ref(), run).await?;
    let located = controller::locate(wiring.as_ref(), index.as_ref(), &run_id).await?;
    let store = located.store.as_ref();
    let meta: Metadata = read_json(store, &run_id, layout::METADATA).await?;
    if !meta.sealed || meta.status != agenteval_core::model::RunStatus::Complete {
        return Err(usage(format!(
            "run {run_id} is {}: certify a complete run (`agenteval resume {run_id}` finishes it)",
            meta.status.as_str()
        )));
    }
    let out = o.out.unwrap_or_else(|| PathBuf::from(format!("certified-{run_id}")));
    if out.exists() && std::fs::read_dir(&out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(usage(format!("{}: not empty: a package is written into a new folder", out.display())));
    }
    std::fs::create_dir_all(&out).map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
    let reviewer = Reviewer::new(&judge, prompt.clone(), &out, o.replay).await?;
    write(&out, "reviews/prompt.md", prompt.as_bytes())?;
    write(&out, layout::CONFIG, &store.get(&run_id, layout::CONFIG).await?)?;
    let config = &located.config;
    // Each attempt read and converted once, for every part of the package.
    let done = crate::interchange::finished(store, &run_id, &meta, config).await?;
    let mut listed = Vec::new();
    let (mut inputs, mut costs) = (BTreeMap::new(), BTreeMap::new());
    let mut reviews_cost = 0.0;
    for f in &done.attempts {
        let (task, result, x) = (&f.task, &f.result, &f.exported);
        let id = task.id.to_string();
        let atif_path = task_path("atif", &id);
        write(&out, &atif_path, &json_bytes(&x.trajectory))?;
        let audit = Audit {
            tampered: result.tampered.iter().map(|t| serde_json::to_value(t).unwrap_or_default()).collect(),
            changed_outside: result.changed_outside,
            suspect: result.suspect.clone(),
            exploits: exploits.get(task.id.base()).cloned(),
        };
        let audit_path = task_path("audit", &id);
        write(&out, &audit_path, &json_bytes(&audit))?;
        let review = if result.passed {
            let r = reviewer.review(task, result, &x.trajectory).await?;
            reviews_cost += r.cost_usd.unwrap_or(0.0);
            let p = task_path("reviews", &id);
            write(&out, &p, &json_bytes(&r))?;
            Some(p)
        } else {
            None
        };
        inputs.insert(
            id.clone(),
            json!({"fingerprint": task.content_fingerprint(), "harbor_digest": f.digest, "image": result.image}),
        );
        let m = x.trajectory.final_metrics.clone().unwrap_or_default();
        costs.insert(
            id.clone(),
            json!({
                "cost_usd": (!result.agent.cost_unknown).then(|| result.total_cost_usd()),
                "model_calls": x.model_calls,
                "input_tokens": m.total_prompt_tokens,
                "output_tokens": m.total_completion_tokens,
                "metered_by": if x.model_calls > 0 { "agenteval gateway" } else { "none: the agent made no call through the gateway" },
            }),
        );
        listed.push(CertifiedTask {
            task_id: id,
            outcome: result.outcome().as_str().into(),
            passed: result.passed,
            trajectory: Some(atif_path),
            review,
            audit: audit_path,
        });
    }
    let base_name = meta.name.split(" [").next().unwrap_or(&meta.name);
    let job_name = crate::interchange::file_stem(&format!("{base_name}-{}", &run_id.to_string()[..8]));
    let job_dir = out.join("harbor").join(&job_name);
    crate::interchange::write_harbor_of(store, &run_id, &meta, config, &done, &job_dir).await?;
    let config_bytes = std::fs::read(out.join(layout::CONFIG)).unwrap_or_default();
    write(
        &out,
        "inputs.json",
        &json_bytes(&json!({
            "config": {"hash": meta.config_hash, "sha256": bundle::sha256_hex(&config_bytes)},
            "agent": {"name": done.agent.name, "version": done.agent.version, "model": done.agent.model, "packed_sha256": meta.agent_sha256, "git": meta.agent_git},
            "dataset": meta.dataset,
            "agenteval_version": meta.agenteval_version,
            "tasks": inputs,
        })),
    )?;
    write(&out, "costs.json", &json_bytes(&json!({"tasks": costs, "reviews_cost_usd": reviews_cost})))?;
    let summary: Value = read_json(store, &run_id, layout::SUMMARY).await.unwrap_or(Value::Null);
    let cert = Certificate {
        schema: SCHEMA.into(),
        run_id: run_id.to_string(),
        name: meta.name.clone(),
        agent: meta.agent.clone(),
        benchmark: meta.benchmark.clone(),
        agenteval_version: meta.agenteval_version.clone(),
        tasks: listed,
        judge: json!({"model": judge.model, "prompt_sha256": reviewer.prompt_sha256, "replayed_from": o.replay.map(|p| p.display().to_string())}),
        summary: json!({
            "pass_rate": summary["pass_rate"], "passed": summary["passed"], "tasks_total": summary["tasks_total"],
            "reward": summary["reward"], "total_cost_usd": summary["total_cost_usd"], "tampered": summary["tampered"],
        }),
    };
    write(&out, CERTIFICATE, &json_bytes(&cert))?;
    let manifest = certified::manifest_of(&out).map_err(|e| Error::io(format!("reading {}", out.display()), e))?;
    write(&out, MANIFEST, &json_bytes(&manifest))?;
    report(&out, o.json, true)
}

/// `certify --check DIR`.
pub fn check(dir: &Path, json: bool) -> Result<u8, Failure> {
    if !dir.join(MANIFEST).is_file() {
        return Err(usage(format!(
            "{}: not a certified package (no {MANIFEST}); `agenteval certify RUN` writes one",
            dir.display()
        )));
    }
    report(dir, json, false)
}

fn report(dir: &Path, json: bool, written: bool) -> Result<u8, Failure> {
    let c = certified::check(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    if json {
        say!("{}", serde_json::to_string(&json!({"package": dir, "ok": c.ok(), "check": c})).expect("serializes"));
    } else {
        if written {
            say!(
                "wrote a certified package of {} task(s) ({} passing, each reviewed) to {}",
                c.tasks,
                c.passing,
                dir.display()
            );
        }
        for p in &c.problems {
            say!("problem: {p}");
        }
        for f in &c.flagged {
            say!("flagged: {}", f.split_whitespace().collect::<Vec<_>>().join(" "));
        }
        let digest = c.package_digest.as_deref().unwrap_or("-");
        if c.ok() {
            say!("ok: {} files checked, {} tasks, {} passing; package sha256 {digest}", c.files, c.tasks, c.passing);
        } else {
            say!("FAILED: {} problem(s) in {}", c.problems.len(), dir.display());
        }
    }
    Ok(if c.ok() { exit::OK } else { exit::CHECK_FAILED })
}
